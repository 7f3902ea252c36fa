//! Where each request's time went, in k6's HTTP phases (D35): `blocked`, `connecting`,
//! `tls_handshaking`, `sending`, `waiting`, `receiving` and `duration` (the sum of
//! sending, waiting and receiving), plus the gap between the response head and the first
//! token (TTFT minus sending and waiting: a head sent long before the first token). Successful requests
//! only, as the latency metrics. Each phase is a histogram (3 significant digits) and a
//! sum: memory does not grow with the run.

use super::fold::{Fold, Whole};
use crate::fleet::outcome::GlobalRow;
use hdrhistogram::Histogram;
use surge_proto::HttpPhases;

/// The phases, with their result names (`http_req_<name>`).
pub const PHASES: [&str; 7] =
    ["blocked", "connecting", "tls_handshaking", "sending", "waiting", "receiving", "duration"];
/// The head-to-first-token gap's result name (`http_<name>`).
pub const HEAD_TO_FIRST_TOKEN: &str = "head_to_first_token";

/// One phase over the run: microseconds.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    /// `None` until the first value.
    hist: Option<Histogram<u64>>,
    sum_us: f64,
}

impl Phase {
    /// Recorded as `us + 1`: a histogram cannot hold 0, which is a common phase value
    /// (a reused connection's connect).
    fn add(&mut self, us: u64) {
        let hist =
            self.hist.get_or_insert_with(|| Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds"));
        hist.saturating_record(us.saturating_add(1));
        self.sum_us += us as f64;
    }

    pub fn count(&self) -> u64 {
        self.hist.as_ref().map_or(0, Histogram::len)
    }

    pub fn std_ms(&self) -> f64 {
        match &self.hist {
            Some(h) if !h.is_empty() => h.stdev() / 1000.0,
            _ => 0.0,
        }
    }

    pub fn mean_ms(&self) -> f64 {
        if self.count() == 0 { 0.0 } else { self.sum_us / self.count() as f64 / 1000.0 }
    }

    /// The `p`th percentile (0-100) in ms.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        match &self.hist {
            Some(h) if !h.is_empty() => h.value_at_quantile(p / 100.0).saturating_sub(1) as f64 / 1000.0,
            _ => 0.0,
        }
    }
}

/// Every phase over the run, and how many requests reused a connection.
#[derive(Debug, Clone, Default)]
pub struct Phases {
    /// In [`PHASES`] order.
    pub phases: [Phase; 7],
    pub head_to_first_token: Phase,
    pub reused: u64,
    pub new_connections: u64,
}

impl Phases {
    /// A successful request's phases and its TTFT (µs; 0 when it had no token).
    pub fn add(&mut self, p: &HttpPhases, ttft_us: u64) {
        let duration = p.sending_us + p.waiting_us + p.receiving_us;
        let values = [p.blocked_us, p.connecting_us, p.tls_us, p.sending_us, p.waiting_us, p.receiving_us, duration];
        for (phase, v) in self.phases.iter_mut().zip(values) {
            phase.add(v);
        }
        if ttft_us > 0 {
            self.head_to_first_token.add(ttft_us.saturating_sub(p.sending_us + p.waiting_us));
        }
        if p.reused {
            self.reused += 1;
        } else {
            self.new_connections += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.phases[0].count() == 0
    }

    /// The phase named `name` (one of [`PHASES`]).
    pub fn get(&self, name: &str) -> Option<&Phase> {
        PHASES.iter().position(|p| *p == name).map(|i| &self.phases[i])
    }
}

/// k6's phases of the successful requests whose rows carry them (D35).
impl Fold for Phases {
    type Out = Phases;
    fn row(&mut self, r: &GlobalRow) {
        if let (true, Some(p)) = (r.ok(), &r.row.phases) {
            self.add(p, r.row.ttft_us);
        }
    }
    fn finish(self, _run: &Whole) -> Phases {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_zeros_stay_zero() {
        let mut p = Phases::default();
        for k in 0..100u64 {
            let reused = k % 4 != 0;
            let row = HttpPhases {
                blocked_us: 10,
                connecting_us: if reused { 0 } else { 300 },
                tls_us: if reused { 0 } else { 900 },
                sending_us: 20,
                waiting_us: 30_000 + k,
                receiving_us: 70_000,
                reused,
            };
            p.add(&row, 50_020 + k);
        }
        assert_eq!((p.reused, p.new_connections), (75, 25));
        let d = p.get("duration").unwrap();
        assert!((d.mean_ms() - (0.020 + 30.0495 + 70.0)).abs() < 1e-9, "{}", d.mean_ms());
        // The head came 30 ms in, the first token 50 ms: a 20 ms gap.
        assert!((p.head_to_first_token.percentile_ms(50.0) - 20.0).abs() < 0.02);
        assert_eq!(p.get("connecting").unwrap().percentile_ms(50.0), 0.0, "most reused: 0");
        assert!((p.get("tls_handshaking").unwrap().percentile_ms(99.0) - 0.9).abs() < 0.001);
        assert!(p.get("nothing").is_none());
    }

    #[test]
    fn a_phase_without_a_value_holds_no_histogram() {
        let mut p = Phases::default();
        assert!(
            p.phases.iter().chain([&p.head_to_first_token]).all(|x| x.hist.is_none()),
            "a placeholder pays for none"
        );
        assert!(p.is_empty());
        assert_eq!((p.phases[4].percentile_ms(99.0), p.phases[4].std_ms(), p.phases[4].mean_ms()), (0.0, 0.0, 0.0));
        p.add(&HttpPhases { waiting_us: 7, ..Default::default() }, 0);
        assert_eq!(p.get("waiting").map(Phase::count), Some(1));
        assert!(p.head_to_first_token.hist.is_none(), "no token, no gap");
        assert!((p.get("waiting").unwrap().percentile_ms(50.0) - 0.007).abs() < 1e-9);
    }
}
