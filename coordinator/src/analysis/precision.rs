//! `--precision METRIC:PCT:WIDTH%` (D62, GuideLLM's target margin of error): the run ends
//! once every named percentile's interval (D47) is at most WIDTH of its estimate. While
//! the run goes, ranks are read from an HDR histogram (3 significant digits, constant
//! memory); the result's intervals are the exact ones from the run's kept values.
//!
//! An interval is believed only once the rows span [`SPAN_LATENCIES`] of their own mean
//! latency, first send to last end (D98): the order-statistic interval holds for
//! independent values, and a closed loop's first wave is not that. Its requests start
//! together, so a server that batches their prefill, or a host stall that releases their
//! first tokens at once, gives many the same TTFT; 64 such rows once read a p90 interval
//! 0.3 % wide and halted a run at its first check.

use super::interval::ranks;
use super::monitor::{Checkpoints, Monitor, values_ms};
use crate::fleet::outcome::{GlobalRow, Halt};
use crate::plan::Precision;
use hdrhistogram::Histogram;

/// How many of their mean latencies the rows must span before a halt (D98).
pub const SPAN_LATENCIES: f64 = 5.0;

pub struct PrecisionMonitor {
    targets: Vec<(Precision, Histogram<u64>)>,
    confidence: f64,
    rows: u64,
    checks: Checkpoints,
    /// The earliest send and the latest end seen, s.
    first_start_s: f64,
    last_end_s: f64,
    /// The successes' latencies summed, s, and their count.
    latency_sum_s: f64,
    successes: u64,
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
            first_start_s: f64::INFINITY,
            last_end_s: f64::NEG_INFINITY,
            latency_sum_s: 0.0,
            successes: 0,
        })
    }

    /// Whether the rows so far span [`SPAN_LATENCIES`] of their mean latency.
    fn spanned(&self) -> bool {
        self.successes > 0
            && self.last_end_s - self.first_start_s >= SPAN_LATENCIES * self.latency_sum_s / self.successes as f64
    }

    /// Whether every target's interval is within its width now, with a fifth to spare: the
    /// rows on their way at the halt (finished at the agents, not yet merged) join the
    /// result's exact interval, and the histogram reads ranks within 0.1 %. The requests
    /// in flight at the halt are cancelled, as by Ctrl-C, and join no interval.
    fn reached(&self) -> bool {
        self.spanned()
            && self.targets.iter().all(|(t, h)| {
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
            self.first_start_s = self.first_start_s.min(r.start_s);
            self.last_end_s = self.last_end_s.max(r.end_s());
            if r.ok() {
                self.latency_sum_s += r.e2el_s();
                self.successes += 1;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Row;

    /// A success sent at `start_s` whose first token came `ttft_ms` later, 120 ms long.
    fn row(start_s: f64, ttft_ms: f64) -> GlobalRow {
        let row =
            Row { ttft_us: (ttft_ms * 1000.0) as u64, latency_us: 120_000, output_tokens: 4, ..Default::default() };
        GlobalRow { agent: 0, start_s, intended_s: None, row }
    }

    fn monitor() -> PrecisionMonitor {
        PrecisionMonitor::new(&[Precision::parse("ttft:p90:1%").unwrap()], 0.95).unwrap()
    }

    /// A closed loop's first wave, 64 requests sent together whose first tokens a batched
    /// prefill (or a stall) released at once: an interval of width 0, not believed until
    /// the rows span five latencies.
    #[test]
    fn a_first_wave_of_tied_values_does_not_halt() {
        let mut m = monitor();
        let wave: Vec<GlobalRow> = (0..64).map(|_| row(0.0, 100.0)).collect();
        m.rows(&wave.iter().collect::<Vec<_>>());
        assert_eq!(m.halt(), None, "one wave spans one latency");
        // Four more waves 120 ms apart span 0.6 s, five latencies: now it may halt.
        let more: Vec<GlobalRow> = (1..5).flat_map(|w| (0..64).map(move |_| row(0.12 * f64::from(w), 100.0))).collect();
        m.rows(&more.iter().collect::<Vec<_>>());
        assert_eq!(m.halt(), Some(Halt::Precision));
    }

    /// Values spread over 80-120 ms need about a thousand rows for a p90 within 1 %; the
    /// monitor halts neither at the first check nor never.
    #[test]
    fn a_spread_sample_halts_once_its_interval_is_narrow() {
        let mut m = monitor();
        let mut halted_at = None;
        for i in 0..20_000u64 {
            // A low-discrepancy spread of 80-120 ms, in send order 2 ms apart.
            let v = 80.0 + 40.0 * ((i as f64 * 0.618_034) % 1.0);
            m.rows(&[&row(i as f64 * 0.002, v)]);
            if m.halt().is_some() {
                halted_at = Some(i + 1);
                break;
            }
        }
        let n = halted_at.expect("halts");
        assert!((500..3000).contains(&n), "halted at {n} rows");
    }
}
