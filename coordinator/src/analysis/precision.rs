//! `--precision METRIC:PCT:WIDTH%` (D62, GuideLLM's target margin of error): the run ends
//! once every named percentile's interval (D47) is at most WIDTH of its estimate. While
//! the run goes, ranks are read from an HDR histogram (3 significant digits, constant
//! memory); the result's intervals are the exact ones from the run's kept values.

use super::interval::ranks;
use super::monitor::{Checkpoints, Monitor, values_ms};
use crate::fleet::outcome::{GlobalRow, Halt};
use crate::plan::Precision;
use hdrhistogram::Histogram;

pub struct PrecisionMonitor {
    targets: Vec<(Precision, Histogram<u64>)>,
    confidence: f64,
    rows: u64,
    checks: Checkpoints,
}

impl PrecisionMonitor {
    pub fn new(targets: &[Precision], confidence: f64) -> Option<Self> {
        if targets.is_empty() {
            return None;
        }
        let hist = || Histogram::new_with_bounds(1, 36_000_000_000, 3).expect("valid bounds");
        Some(Self {
            targets: targets.iter().map(|t| (*t, hist())).collect(),
            confidence,
            rows: 0,
            checks: Checkpoints::new(50),
        })
    }

    /// Whether every target's interval is within its width now, with a fifth to spare: the
    /// requests still in flight at the halt join the result's exact interval, and the
    /// histogram reads ranks within 0.1 %.
    fn reached(&self) -> bool {
        self.targets.iter().all(|(t, h)| {
            let n = h.len();
            let r = ranks(n, t.pct / 100.0, self.confidence);
            let at = |k: u64| h.value_at_quantile(k as f64 / n as f64) as f64;
            let estimate = h.value_at_quantile(t.pct / 100.0) as f64;
            match (r.lower, r.upper) {
                (Some(l), Some(u)) if estimate > 0.0 => (at(u) - at(l)) / estimate <= 0.8 * t.width,
                _ => false,
            }
        })
    }
}

impl Monitor for PrecisionMonitor {
    fn rows(&mut self, rows: &[&GlobalRow]) {
        for r in rows {
            for (t, h) in &mut self.targets {
                values_ms(r, t.metric, |v| h.saturating_record(((v * 1000.0).round() as u64).max(1)));
            }
        }
        self.rows += rows.len() as u64;
    }

    fn halt(&mut self) -> Option<Halt> {
        (self.checks.due(self.rows) && self.reached()).then_some(Halt::Precision)
    }
}
