//! vLLM's `rps_change_events` for a ramped run: when the ramp reached each whole rate. Each
//! agent ramps its share over its own requests, so a request's rate is the whole ramp's at
//! its progress through its agent's share (or, for a `--duration` run without a request cap,
//! at its send time's part of the duration, D22); an event is the first request sent at or
//! above its rate. Memory: one time per whole rate reached (not per request).

use super::fold::{Fold, Whole};
use crate::fleet::outcome::GlobalRow;
use crate::plan::RampPlan;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use surge_core::data::share::Stripe;

/// One event as vLLM writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpsEvent {
    pub rps: u32,
    pub timestamp: String,
}

#[derive(Debug, Clone)]
pub struct RampEvents {
    plan: RampPlan,
    /// A ramp over time: the run's duration, seconds.
    over_s: Option<f64>,
    /// Per agent: its share's global indices and how many it sends.
    slices: Vec<(Stripe, u64)>,
    /// Whole rate (vLLM's `int(rate)`) -> the earliest send seen at it, seconds from the start.
    first_s: BTreeMap<u32, f64>,
}

impl RampEvents {
    pub fn new(plan: RampPlan, over_s: Option<f64>) -> Self {
        Self { plan, over_s, slices: Vec::new(), first_s: BTreeMap::new() }
    }

    /// The agents' shares, known once the run is split.
    pub fn slices(&mut self, slices: Vec<(Stripe, u64)>) {
        self.slices = slices;
    }

    /// A request of agent `agent` with global index `index`, sent `start_s` after the start.
    pub fn add(&mut self, agent: usize, index: u64, start_s: f64) {
        let progress = match (self.over_s, self.slices.get(agent)) {
            (Some(d), _) if d > 0.0 => start_s / d,
            (_, Some((share, len))) => {
                let Some(k) = share.position(index) else { return };
                k as f64 / len.saturating_sub(1).max(1) as f64
            }
            _ => return,
        };
        let rps = self.plan.rate(progress).floor() as u32;
        let t = self.first_s.entry(rps).or_insert(start_s);
        *t = t.min(start_s);
    }

    /// The events: the start rate at the start, then each whole rate up to the end rate at
    /// the first request sent at or above it (none past what the run reached).
    pub fn events(&self, started_at: chrono::DateTime<chrono::Utc>) -> Vec<RpsEvent> {
        let stamp = |s: f64| {
            let at = started_at + chrono::Duration::microseconds((s.max(0.0) * 1e6) as i64);
            at.to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
        };
        let mut out = vec![RpsEvent { rps: self.plan.start, timestamp: stamp(0.0) }];
        for rps in self.plan.start.saturating_add(1)..=self.plan.end {
            match self.first_s.range(rps..).map(|(_, &t)| t).reduce(f64::min) {
                Some(t) => out.push(RpsEvent { rps, timestamp: stamp(t) }),
                None => break,
            }
        }
        out
    }
}

/// Every request, failed ones included, at its progress through its agent's share.
impl Fold for RampEvents {
    type Out = RampEvents;
    fn row(&mut self, r: &GlobalRow) {
        self.add(r.agent, r.row.index, r.start_s);
    }
    fn started(&mut self, slices: &[(Stripe, u64)]) {
        self.slices(slices.to_vec());
    }
    fn finish(self, _run: &Whole) -> RampEvents {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_whole_rate_at_the_first_request_sent_at_it() {
        // 1 -> 4 req/s over 7 requests on one agent: rates 1, 1.5, 2, 2.5, 3, 3.5, 4.
        let mut r = RampEvents::new(RampPlan { exponential: false, start: 1, end: 4 }, None);
        r.slices(vec![(Stripe::contiguous(100), 7)]);
        for k in 0..7u64 {
            r.add(0, 100 + k, k as f64);
        }
        let t0 = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let e = r.events(t0);
        let rps: Vec<u32> = e.iter().map(|x| x.rps).collect();
        assert_eq!(rps, [1, 2, 3, 4]);
        assert_eq!(e[0].timestamp, "2027-01-15T08:00:00.000000+00:00");
        assert_eq!(e[1].timestamp, "2027-01-15T08:00:02.000000+00:00", "request 2 reached 2 req/s");
        assert_eq!(e[3].timestamp, "2027-01-15T08:00:06.000000+00:00");
        // Two agents each ramp over their own share (taking turns by index): agent 1's
        // last request, index 13, is at the end rate; index 12 is not its request.
        let mut r = RampEvents::new(RampPlan { exponential: false, start: 1, end: 4 }, None);
        let shares = surge_core::data::share::stripes(&[1, 1]);
        r.slices(shares.into_iter().map(|s| (s, 7)).collect());
        r.add(1, 12, 0.2);
        assert_eq!(r.events(t0).len(), 1, "another agent's index counts for nothing");
        r.add(1, 13, 0.5);
        assert_eq!(r.events(t0).len(), 4, "agent 1's last request is at the end rate");
        // Over a 6 s duration: the rate at a send is the ramp's at its time.
        let mut r = RampEvents::new(RampPlan { exponential: false, start: 1, end: 4 }, Some(6.0));
        r.add(0, u64::MAX / 2, 4.0);
        let e = r.events(t0);
        assert_eq!(e.iter().map(|x| x.rps).collect::<Vec<_>>(), [1, 2, 3], "3 req/s reached at 4 s of 6");
        assert_eq!(e[2].timestamp, "2027-01-15T08:00:04.000000+00:00");
    }
}
