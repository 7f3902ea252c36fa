//! Open-loop release of requests at their intended times.
//!
//! The runtime's timers have 1 ms resolution, so a paced request would leave up to a
//! millisecond late. A dedicated OS thread instead sleeps (`std::thread::sleep`, tens of
//! microseconds of slack) until each intended time from the [`Schedule`] and hands the
//! offset to the run loop over a bounded channel. When the run loop falls behind, the
//! channel fills and the thread waits: the lateness then shows as send lag, which is the
//! honest signal that the client, not the server, was the bottleneck.

use crate::engine::load::pacing::Schedule;
use crate::engine::stats::Stats;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Longest single sleep, so a stop is noticed quickly.
const MAX_NAP: Duration = Duration::from_millis(20);

/// Intended offsets released on time by a pacing thread.
#[derive(Debug)]
pub struct Pacer {
    rx: mpsc::Receiver<Duration>,
    stop: Arc<AtomicBool>,
    hit_limit: Arc<AtomicBool>,
}

impl Pacer {
    /// Releases up to `count` offsets of `schedule` relative to `t0` (`u64::MAX`: no cap),
    /// none at or after `limit`.
    pub fn start(mut schedule: Schedule, t0: Instant, count: u64, limit: Option<Duration>, stats: Arc<Stats>) -> Self {
        let (tx, rx) = mpsc::channel(1024);
        let stop = Arc::new(AtomicBool::new(false));
        let hit_limit = Arc::new(AtomicBool::new(false));
        let (stop2, hit2) = (Arc::clone(&stop), Arc::clone(&hit_limit));
        let spawned = std::thread::Builder::new().name("surge-pacer".into()).spawn(move || {
            for _ in 0..count {
                let off = schedule.next_offset();
                if limit.is_some_and(|d| off >= d) {
                    hit2.store(true, Ordering::Relaxed);
                    return;
                }
                // An offset past what an Instant can hold is never due: the schedule ends.
                let Some(target) = t0.checked_add(off) else { return };
                loop {
                    if stop2.load(Ordering::Relaxed) {
                        return;
                    }
                    let now = Instant::now();
                    if now >= target {
                        stats.record_wake(crate::engine::load::request::us(now.duration_since(target)));
                        break;
                    }
                    std::thread::sleep((target - now).min(MAX_NAP));
                }
                if tx.blocking_send(off).is_err() {
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!("cannot start the pacing thread: {e}");
        }
        Self { rx, stop, hit_limit }
    }

    /// The next intended offset, or `None` when the schedule is exhausted.
    pub async fn next(&mut self) -> Option<Duration> {
        self.rx.recv().await
    }

    /// Whether the schedule ended because the next offset passed the duration limit.
    pub fn hit_limit(&self) -> bool {
        self.hit_limit.load(Ordering::Relaxed)
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        // The thread sees it within MAX_NAP (or at its next send, which then fails).
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn releases_every_offset_in_order_and_stops_at_the_limit() {
        let stats = Arc::new(Stats::default());
        let s = Schedule::new(2000.0, 1e9, 1).unwrap();
        let mut p = Pacer::start(s, Instant::now(), 1000, Some(Duration::from_millis(100)), Arc::clone(&stats));
        let mut got = Vec::new();
        while let Some(o) = tokio::time::timeout(Duration::from_secs(5), p.next()).await.unwrap() {
            got.push(o);
        }
        // 2000/s for 100 ms: about 200 releases, in order, then the limit.
        assert!((190..=210).contains(&got.len()), "{}", got.len());
        assert!(got.windows(2).all(|w| w[0] <= w[1]));
        assert!(p.hit_limit());
        assert!(stats.wake().max_us < 100_000);
    }

    /// An offset no `Instant` can hold is never due: the schedule ends, the thread lives.
    #[tokio::test]
    async fn an_offset_past_the_end_of_time_ends_the_schedule() {
        let s = Schedule::new(1e-300, 1.0, 3).unwrap();
        let mut p = Pacer::start(s, Instant::now(), u64::MAX, None, Arc::new(Stats::default()));
        // The first gap is drawn with a mean of 1e300 s, beyond Duration and Instant.
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), p.next()).await.unwrap(), None);
        assert!(!p.hit_limit());
    }
}
