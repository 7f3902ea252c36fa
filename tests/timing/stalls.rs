//! The host's own timer stalls during a test, measured beside it: a thread sleeps 1 ms at
//! a time and records how late each sleep ends. A send schedule cannot be kept through a
//! stall of the machine itself (a virtual CPU descheduled by its hypervisor), so a bound on
//! send lateness adds the longest stall this probe saw; a broken schedule (drift, the wrong
//! speed or unit, sends in series) is late by far more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// At most this many sleeps (about a minute's worth), so the probe's loop is bounded.
const MAX_SLEEPS: usize = 60_000;

/// A running probe; [`Stalls::finish`] stops it and gives the longest stall.
pub struct Stalls {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<f64>>,
}

impl Stalls {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            while !seen.load(Ordering::Relaxed) && late.len() < MAX_SLEEPS {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                late.push((t.elapsed().as_secs_f64() - 0.001) * 1000.0);
            }
            late
        });
        Self { stop, thread }
    }

    /// The longest stall since the start, ms.
    pub fn finish(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let late = self.thread.join().expect("stall probe");
        late.into_iter().fold(0.0, f64::max)
    }
}
