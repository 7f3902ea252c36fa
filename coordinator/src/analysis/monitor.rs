//! What watches a run's rows while it goes and may end it early (D62): `--precision`
//! ([`super::precision`]) and a capacity level's over-saturation check. The fleet asks
//! [`Monitor::halt`] after every event; a monitor answers from what it has seen.

use crate::fleet::outcome::{GlobalRow, Halt};

pub trait Monitor: Send {
    /// Rows of the load (no probes), as they arrive.
    fn rows(&mut self, rows: &[&GlobalRow]);
    /// Whether the run should stop now.
    fn halt(&mut self) -> Option<Halt>;
}

/// When to look again: after the rows seen grow by a tenth (and at least `min` rows), so
/// checks that sort what they hold cost O(log n) sorts over a run.
#[derive(Debug, Clone, Copy)]
pub struct Checkpoints {
    next: u64,
}

impl Checkpoints {
    pub fn new(min: u64) -> Self {
        Self { next: min.max(1) }
    }

    /// Whether `seen` rows call for a check now.
    pub fn due(&mut self, seen: u64) -> bool {
        if seen < self.next {
            return false;
        }
        self.next = seen + (seen / 10).max(10);
        true
    }
}

/// A row's value of `metric` in ms, for a success (`None` for a failure or, for TPOT, a
/// single-token answer, for TTFT and TTFO a reply with no token); ITL is per gap, so it
/// gives several.
pub fn values_ms(r: &GlobalRow, metric: super::capacity::Metric, mut f: impl FnMut(f64)) {
    use super::capacity::Metric;
    if !r.ok() {
        return;
    }
    match metric {
        Metric::Ttft => {
            if let Some(t) = r.first_token_s() {
                f(t * 1000.0)
            }
        }
        Metric::E2el => f(r.e2el_s() * 1000.0),
        Metric::Tpot => {
            if let Some(t) = r.tpot_s() {
                f(t * 1000.0)
            }
        }
        Metric::Itl => r.row.gaps().for_each(|g| f(f64::from(g) / 1000.0)),
        Metric::Ttfo => {
            if let Some(t) = r.row.ttfo_us.map(|t| t as f64 / 1e6).or(r.first_token_s()) {
                f(t * 1000.0)
            }
        }
    }
}
