//! The host's own timer stalls during a test, measured beside it: a thread sleeps 1 ms at
//! a time and records how late each sleep ends. A send schedule cannot be kept through a
//! stall of the machine itself (a virtual CPU descheduled by its hypervisor), so a bound on
//! send lateness adds the longest stall this probe saw; a broken schedule (drift, the wrong
//! speed or unit, sends in series) is late by far more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// At most this many sleeps (about a minute's worth), so the probe's loop is bounded.
const MAX_SLEEPS: usize = 60_000;

/// Runs `f` with a probe beside it; returns what `f` returned and the longest stall the
/// probe saw meanwhile, ms.
pub fn during<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&stop);
    let probe = std::thread::spawn(move || {
        let mut longest: f64 = 0.0;
        for _ in 0..MAX_SLEEPS {
            if seen.load(Ordering::Relaxed) {
                break;
            }
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(1));
            longest = longest.max((t.elapsed().as_secs_f64() - 0.001) * 1000.0);
        }
        longest
    });
    let out = f();
    stop.store(true, Ordering::Relaxed);
    (out, probe.join().expect("stall probe"))
}
