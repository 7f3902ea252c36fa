//! The host's own timer stalls during a test, measured beside it: a thread sleeps 1 ms at
//! a time and records how late each sleep ends. A send schedule cannot be kept through a
//! stall of the machine itself (a virtual CPU descheduled by its hypervisor), so a bound on
//! send lateness adds the longest stall this probe saw; a broken schedule (drift, the wrong
//! speed or unit, sends in series) is late by far more. A check whose margin a stall can
//! take is run again when, and only when, the probe saw such a stall ([`held`]).

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

/// Runs `attempt` (given its try, 1 to 3) with the probe beside it until its result is
/// `right`, or is wrong while the host stalled no longer than `margin_ms`: that try is
/// returned, so the caller's assertions fail on a wrong answer the host did not cause.
/// `None` when every try was wrong and stalled past the margin: the host could not hold
/// the timing the check needs, which is said on stderr, not judged.
pub fn held<T>(tag: &str, margin_ms: f64, mut attempt: impl FnMut(u32) -> T, right: impl Fn(&T) -> bool) -> Option<T> {
    for n in 1..=3 {
        let (out, stall) = during(|| attempt(n));
        if right(&out) || stall <= margin_ms {
            return Some(out);
        }
        eprintln!("{tag} try {n}: wrong, with a {stall:.1} ms stall of the host past the {margin_ms} ms margin");
    }
    eprintln!("{tag}: NOT JUDGED, the host stalled past the check's margin in every try");
    None
}
