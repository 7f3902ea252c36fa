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

/// An infinite, seeded sequence of intended send offsets.
#[derive(Debug)]
pub struct Schedule {
    rng: SmallRng,
    gamma: Option<Gamma<f64>>,
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
        let mut s = Self { rng: SmallRng::seed_from_u64(seed), gamma, next_s: 0.0 };
        // The first request is also drawn, as in vLLM: offset 0 would make every
        // agent of a distributed run fire at once.
        if let Some(g) = &s.gamma {
            s.next_s = g.sample(&mut s.rng);
        }
        Ok(s)
    }

    /// Whether requests are paced at all (false for rate inf).
    pub fn is_open_loop(&self) -> bool {
        self.gamma.is_some()
    }

    /// The intended offset of the next request (saturating at `Duration::MAX`: a rate so
    /// low that the offset leaves `Duration`'s range never panics the pacing thread).
    pub fn next_offset(&mut self) -> Duration {
        let at = self.next_s;
        if let Some(g) = &self.gamma {
            self.next_s += g.sample(&mut self.rng);
        }
        Duration::try_from_secs_f64(at).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
