//! When each request should be sent: the open-loop schedule.
//!
//! Offsets are cumulative from the run's start (gap k is added to the previous *intended*
//! time, never to the time a timer actually fired), so timer lateness never accumulates
//! into a lower rate. Gaps are drawn from a gamma distribution with shape `burstiness`
//! and mean `1 / rate` (shape 1 = Poisson arrivals, larger = more regular, smaller =
//! burstier), as `vllm bench serve` does. Rate `inf` (0 here) puts every request at 0.

use rand::{SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, Gamma};
use std::time::Duration;

/// vLLM's `--ramp-up-strategy`: the rate of request k goes from `start` to `end` with
/// k / (n - 1), linearly or geometrically; over a run without a request cap, with the
/// elapsed part of `over_s` instead (D22).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    pub exponential: bool,
    pub start: f64,
    pub end: f64,
    /// Requests in the slice.
    pub n: u64,
    /// A `--duration` run without `--num-prompts`: the ramp runs over this many seconds
    /// (0: over the requests).
    pub over_s: f64,
}

impl Ramp {
    /// The ramp a workload asks for, if any.
    pub fn of(w: &surge_proto::Workload) -> Option<Self> {
        // Read at the edge (`spec::check`): an unknown value never gets here.
        let exponential = match w.ramp() {
            surge_proto::RampStrategy::Linear => false,
            surge_proto::RampStrategy::Exponential => true,
            surge_proto::RampStrategy::None | surge_proto::RampStrategy::Unspecified => return None,
        };
        let over_s =
            if w.slice_len == crate::engine::workload::UNBOUNDED { w.duration_ms as f64 / 1000.0 } else { 0.0 };
        Some(Self { exponential, start: w.ramp_start_rps, end: w.ramp_end_rps, n: w.slice_len, over_s })
    }

    /// The rate of request `k` (0-based) due at `t_s` seconds, requests/s.
    pub fn rate_at(&self, k: u64, t_s: f64) -> f64 {
        if self.over_s > 0.0 { self.curve((t_s / self.over_s).clamp(0.0, 1.0)) } else { self.rate(k) }
    }

    /// The rate of request `k` (0-based) of a ramp over the requests, requests/s.
    pub fn rate(&self, k: u64) -> f64 {
        self.curve((k as f64 / self.n.saturating_sub(1).max(1) as f64).min(1.0))
    }

    fn curve(&self, progress: f64) -> f64 {
        if self.exponential {
            self.start * (self.end / self.start).powf(progress)
        } else {
            self.start + (self.end - self.start) * progress
        }
    }
}

/// An infinite, seeded sequence of intended send offsets.
#[derive(Debug)]
pub struct Schedule {
    rng: SmallRng,
    gamma: Option<Gamma<f64>>,
    /// With a ramp, `gamma` has mean 1 and each gap is divided by its request's rate.
    ramp: Option<Ramp>,
    /// A timed trace: request k's offset is `trace[k]` seconds (already divided by the
    /// speed-up); nothing is drawn.
    trace: Option<std::sync::Arc<[f64]>>,
    /// The request whose offset `next_s` is.
    k: u64,
    /// Intended offset of the next request, in seconds.
    next_s: f64,
}

/// A rate or burstiness that cannot be scheduled.
#[derive(Debug, thiserror::Error)]
#[error("invalid pacing: request rate {rate} with burstiness {burstiness}")]
pub struct PacingError {
    rate: f64,
    burstiness: f64,
}

impl Schedule {
    /// `rate` in requests/s (0 or infinity = all at once).
    pub fn new(rate: f64, burstiness: f64, seed: u64) -> Result<Self, PacingError> {
        let err = PacingError { rate, burstiness };
        let gamma = if rate == 0.0 || rate.is_infinite() {
            None
        } else {
            if !(rate > 0.0 && rate.is_finite() && burstiness > 0.0 && burstiness.is_finite()) {
                return Err(err);
            }
            let scale = 1.0 / (rate * burstiness);
            Some(Gamma::new(burstiness, scale).map_err(|_| err)?)
        };
        Ok(Self::first(Self { rng: SmallRng::seed_from_u64(seed), gamma, ramp: None, trace: None, k: 0, next_s: 0.0 }))
    }

    /// A timed trace's schedule: request k at `offsets_s[k]` (seconds from the start);
    /// past the last, the last.
    pub fn trace(offsets_s: std::sync::Arc<[f64]>) -> Self {
        let next_s = offsets_s.first().copied().unwrap_or(0.0);
        Self { rng: SmallRng::seed_from_u64(0), gamma: None, ramp: None, trace: Some(offsets_s), k: 0, next_s }
    }

    /// A ramped schedule: request k's gap is drawn at `ramp.rate(k)` (vLLM draws gap k
    /// from a gamma of mean 1 / rate_k); a rate of 0 sends at once.
    pub fn ramped(ramp: Ramp, burstiness: f64, seed: u64) -> Result<Self, PacingError> {
        let err = PacingError { rate: ramp.start, burstiness };
        let valid = |r: f64| r >= 0.0 && r.is_finite();
        if !(valid(ramp.start) && valid(ramp.end) && burstiness > 0.0 && burstiness.is_finite())
            || (ramp.exponential && ramp.start <= 0.0)
        {
            return Err(err);
        }
        let gamma = Gamma::new(burstiness, 1.0 / burstiness).map_err(|_| err)?;
        Ok(Self::first(Self {
            rng: SmallRng::seed_from_u64(seed),
            gamma: Some(gamma),
            ramp: Some(ramp),
            trace: None,
            k: 0,
            next_s: 0.0,
        }))
    }

    /// The schedule a workload asks for: its trace (offsets from its jobs), its ramp, else
    /// its rate.
    pub fn for_workload(w: &surge_proto::Workload, trace: Option<std::sync::Arc<[f64]>>) -> Result<Self, PacingError> {
        if w.trace_speedup > 0.0 {
            return Ok(Self::trace(trace.unwrap_or_else(|| std::sync::Arc::from(Vec::new()))));
        }
        match Ramp::of(w) {
            Some(r) => Self::ramped(r, w.burstiness, w.pacing_seed),
            None => Self::new(w.request_rate, w.burstiness, w.pacing_seed),
        }
    }

    /// The most requests a second `w`'s arrivals are drawn at (a ramp's higher end); `None`
    /// when nothing is paced (all at once) or a timed trace sets the times.
    pub fn peak_rate(w: &surge_proto::Workload) -> Option<f64> {
        if w.trace_speedup > 0.0 {
            return None;
        }
        let rate = Ramp::of(w).map_or(w.request_rate, |r| r.start.max(r.end));
        (rate.is_finite() && rate > 0.0).then_some(rate)
    }

    /// The first request is also drawn, as in vLLM: offset 0 would make every agent of a
    /// distributed run fire at once.
    fn first(mut self) -> Self {
        self.next_s = self.gap();
        self
    }

    /// The gap before request `k` (seconds).
    fn gap(&mut self) -> f64 {
        let Some(g) = &self.gamma else { return 0.0 };
        let x = g.sample(&mut self.rng);
        match &self.ramp {
            None => x,
            Some(r) => {
                let rate = r.rate_at(self.k, self.next_s);
                if rate > 0.0 { x / rate } else { 0.0 }
            }
        }
    }

    /// Whether requests are paced at all (false for rate inf).
    pub fn is_open_loop(&self) -> bool {
        self.gamma.is_some() || self.trace.is_some()
    }

    /// The intended offset of the next request (saturating at `Duration::MAX`: a rate so
    /// low that the offset leaves `Duration`'s range never panics the pacing thread).
    pub fn next_offset(&mut self) -> Duration {
        let at = self.next_s;
        self.k += 1;
        match &self.trace {
            Some(t) => self.next_s = t.get(self.k as usize).or(t.last()).copied().unwrap_or(0.0),
            None => self.next_s += self.gap(),
        }
        Duration::try_from_secs_f64(at).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linear_ramp_sends_each_part_at_its_rate() {
        // 10 -> 100 req/s over 1,000 requests, nearly regular gaps: the gap before request
        // k is 1 / rate(k), so the schedule's span is the sum of those.
        let ramp = Ramp { exponential: false, start: 10.0, end: 100.0, n: 1000, over_s: 0.0 };
        let mut s = Schedule::ramped(ramp, 1e9, 1).unwrap();
        let offs: Vec<f64> = (0..1000).map(|_| s.next_offset().as_secs_f64()).collect();
        let want: f64 = (1..1000).map(|k| 1.0 / ramp.rate(k)).sum();
        assert!(((offs[999] - offs[0]) - want).abs() < 1e-3 * want, "{} vs {want}", offs[999] - offs[0]);
        // The gap before request k is 1 / rate(k): early gaps are nearly 10x the late ones.
        let (early, late) = (offs[2] - offs[1], offs[999] - offs[998]);
        let want = ramp.rate(999) / ramp.rate(2);
        assert!((early / late - want).abs() < 1e-3 * want, "{early} / {late}, want {want}");
        assert!((ramp.rate(999) - 100.0).abs() < 1e-9 && (ramp.rate(0) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn an_exponential_ramp_is_geometric_and_refuses_a_zero_start() {
        let ramp = Ramp { exponential: true, start: 1.0, end: 100.0, n: 101, over_s: 0.0 };
        assert!((ramp.rate(50) - 10.0).abs() < 1e-9, "{}", ramp.rate(50));
        assert!(Schedule::ramped(Ramp { start: 0.0, ..ramp }, 1.0, 1).is_err());
        // A linear ramp from 0 sends its first request at once.
        let mut s =
            Schedule::ramped(Ramp { exponential: false, start: 0.0, end: 10.0, n: 10, over_s: 0.0 }, 1.0, 1).unwrap();
        assert_eq!(s.next_offset(), Duration::ZERO);
    }

    #[test]
    fn a_ramp_over_a_duration_follows_elapsed_time() {
        // 10 -> 100 req/s over 10 s, regular gaps: about 550 requests in the 10 s (the mean
        // rate), and the last second runs near 100 req/s.
        let ramp = Ramp { exponential: false, start: 10.0, end: 100.0, n: u64::MAX, over_s: 10.0 };
        let mut s = Schedule::ramped(ramp, 1e9, 1).unwrap();
        let offs: Vec<f64> = (0..2000).map(|_| s.next_offset().as_secs_f64()).take_while(|&t| t < 10.0).collect();
        assert!((540..=560).contains(&offs.len()), "{} requests in 10 s", offs.len());
        let last_second = offs.iter().filter(|&&t| t >= 9.0).count();
        assert!((93..=101).contains(&last_second), "{last_second} in the last second");
    }

    #[test]
    fn a_trace_is_replayed_at_its_offsets() {
        let mut s = Schedule::trace(std::sync::Arc::from(vec![0.0, 0.5, 0.5, 2.0]));
        assert!(s.is_open_loop());
        let offs: Vec<f64> = (0..5).map(|_| s.next_offset().as_secs_f64()).collect();
        assert_eq!(offs, [0.0, 0.5, 0.5, 2.0, 2.0]);
    }

    #[test]
    fn constant_rate_is_exact_and_cumulative() {
        // Very large shape = nearly deterministic gaps.
        let mut s = Schedule::new(1000.0, 1e9, 1).unwrap();
        let offs: Vec<Duration> = (0..=1000).map(|_| s.next_offset()).collect();
        let span = (offs[1000] - offs[0]).as_secs_f64();
        assert!((span - 1.0).abs() < 1e-3, "span {span}");
        assert!(offs.windows(2).all(|w| w[1] >= w[0]));
    }

    #[test]
    fn poisson_mean_rate_converges() {
        let mut s = Schedule::new(2000.0, 1.0, 42).unwrap();
        let last = (0..20_000).map(|_| s.next_offset()).last().unwrap();
        let rate = 20_000.0 / last.as_secs_f64();
        assert!((rate / 2000.0 - 1.0).abs() < 0.03, "rate {rate}");
    }

    #[test]
    fn seeded_schedules_repeat() {
        let a: Vec<_> = {
            let mut s = Schedule::new(10.0, 0.5, 9).unwrap();
            (0..50).map(|_| s.next_offset()).collect()
        };
        let mut s = Schedule::new(10.0, 0.5, 9).unwrap();
        assert_eq!(a, (0..50).map(|_| s.next_offset()).collect::<Vec<_>>());
    }

    /// A rate so low that the second offset leaves `Duration`'s range saturates (the
    /// pacing thread used to panic in `Duration::from_secs_f64`).
    #[test]
    fn offsets_past_durations_range_saturate() {
        let mut s = Schedule::new(1e-300, 1.0, 3).unwrap();
        let _ = s.next_offset();
        assert_eq!(s.next_offset(), Duration::MAX);
    }

    #[test]
    fn infinite_rate_is_closed_loop() {
        let mut s = Schedule::new(f64::INFINITY, 1.0, 0).unwrap();
        assert!(!s.is_open_loop());
        assert_eq!(s.next_offset(), Duration::ZERO);
        assert!(Schedule::new(-1.0, 1.0, 0).is_err());
        assert!(Schedule::new(5.0, 0.0, 0).is_err());
    }
}
