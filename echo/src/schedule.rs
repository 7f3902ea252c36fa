//! The token schedule of one completion.
//!
//! Token `k` (0-based) is due at `start + ttft + stall + k * itl`, where
//! `start` is when the request arrived (the kernel's receive stamp, see
//! [`crate::arrival`]) or, if it had to wait for a slot, when it got one. Deadlines are absolute offsets
//! from `start` (waited for with the precise timer of [`crate::timer`]), so
//! timer lateness on one token never shifts the next. With `--jitter-ms J`
//! every delay (the TTFT and each ITL) gets `+ uniform[-J, +J]`, clamped at
//! zero, drawn from a per-request RNG seeded from the server seed and the
//! request number.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::EchoConfig;
use crate::faults;

/// Offsets (milliseconds from `start`) of successive tokens of one response.
#[derive(Debug)]
pub(crate) struct Schedule {
    ttft_ms: f64,
    itl_ms: f64,
    jitter_ms: f64,
    rng: Option<SmallRng>,
    /// Offset of the last token handed out (jittered schedules only).
    offset_ms: f64,
    /// Index of the next token.
    next: u64,
}

impl Schedule {
    /// The schedule of completion request number `index`, with `stall_ms`
    /// added before the first token.
    pub fn new(config: &EchoConfig, index: u64, stall_ms: f64) -> Self {
        let rng = (config.jitter_ms > 0.0)
            .then(|| SmallRng::seed_from_u64(faults::mix(config.seed, index, faults::SALT_JITTER)));
        Self {
            ttft_ms: config.ttft_ms + stall_ms,
            itl_ms: config.itl_ms,
            jitter_ms: config.jitter_ms,
            rng,
            offset_ms: 0.0,
            next: 0,
        }
    }

    /// Offset in milliseconds of the next token, advancing the schedule.
    pub fn next_offset_ms(&mut self) -> f64 {
        let k = self.next;
        self.next += 1;
        match &mut self.rng {
            None => self.ttft_ms + k as f64 * self.itl_ms,
            Some(rng) => {
                let base = if k == 0 { self.ttft_ms } else { self.itl_ms };
                let j = self.jitter_ms;
                let delay = (base + rng.random_range(-j..=j)).max(0.0);
                self.offset_ms += delay;
                self.offset_ms
            }
        }
    }

    /// Offset in milliseconds of the last of `n` tokens (`n >= 1`), i.e. when
    /// a non-streamed response of `n` tokens is complete.
    pub fn last_offset_ms(&mut self, n: u64) -> f64 {
        if self.rng.is_none() {
            return self.ttft_ms + n.saturating_sub(1) as f64 * self.itl_ms;
        }
        let mut offset = 0.0;
        for _ in 0..n.max(1) {
            offset = self.next_offset_ms();
        }
        offset
    }
}

/// `start + offset_ms`, saturating to a far-away instant instead of
/// panicking on overflow.
pub(crate) fn deadline(start: Instant, offset_ms: f64) -> Instant {
    const FAR: Duration = Duration::from_secs(365 * 86_400);
    let d = Duration::try_from_secs_f64(offset_ms / 1e3).unwrap_or(FAR);
    start.checked_add(d.min(FAR)).unwrap_or_else(|| start + Duration::from_secs(86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(ttft: f64, itl: f64, jitter: f64) -> EchoConfig {
        EchoConfig { ttft_ms: ttft, itl_ms: itl, jitter_ms: jitter, ..EchoConfig::default() }
    }

    #[test]
    fn fixed_schedule_is_cumulative() {
        let mut s = Schedule::new(&config(100.0, 10.0, 0.0), 0, 0.0);
        let offs: Vec<f64> = (0..4).map(|_| s.next_offset_ms()).collect();
        assert_eq!(offs, vec![100.0, 110.0, 120.0, 130.0]);
        let mut s = Schedule::new(&config(100.0, 10.0, 0.0), 0, 50.0);
        assert_eq!(s.next_offset_ms(), 150.0);
        assert_eq!(s.next_offset_ms(), 160.0);
        let mut s = Schedule::new(&config(100.0, 10.0, 0.0), 0, 0.0);
        assert_eq!(s.last_offset_ms(5), 140.0);
        assert_eq!(s.last_offset_ms(1), 100.0);
    }

    #[test]
    fn jitter_is_bounded_seeded_and_monotonic() {
        let c = config(100.0, 10.0, 4.0);
        let run = |index| {
            let mut s = Schedule::new(&c, index, 0.0);
            (0..50).map(|_| s.next_offset_ms()).collect::<Vec<_>>()
        };
        let a = run(3);
        assert_eq!(a, run(3));
        assert_ne!(a, run(4));
        assert!((96.0..=104.0).contains(&a[0]));
        for w in a.windows(2) {
            let d = w[1] - w[0];
            assert!((6.0 - 1e-9..=14.0 + 1e-9).contains(&d), "{d}");
        }
        let mut s = Schedule::new(&c, 3, 0.0);
        assert_eq!(s.last_offset_ms(50), a[49]);
    }

    #[test]
    fn jitter_clamps_at_zero() {
        let c = config(0.0, 0.0, 5.0);
        let mut s = Schedule::new(&c, 1, 0.0);
        let mut prev = 0.0;
        for _ in 0..100 {
            let o = s.next_offset_ms();
            assert!(o >= prev);
            prev = o;
        }
    }

    #[test]
    fn deadline_never_panics() {
        let now = Instant::now();
        assert_eq!(deadline(now, 0.0), now);
        assert_eq!(deadline(now, 1500.0), now + Duration::from_millis(1500));
        assert!(deadline(now, f64::MAX) > now);
        assert!(deadline(now, f64::INFINITY) > now);
        assert!(deadline(now, f64::NAN) > now);
    }
}
