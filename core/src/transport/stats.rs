//! Live counters of one run, shared by the request tasks and read by the health reporter:
//! in-flight requests, open connections, reconnects, outcomes and the scheduling-lag
//! histogram. Plain atomics on the hot path; the histogram is written only by the
//! scheduler task.

use hdrhistogram::Histogram;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Counters of one run.
#[derive(Debug)]
pub struct Stats {
    pub in_flight: AtomicU32,
    pub max_in_flight: AtomicU32,
    pub open_connections: AtomicU32,
    pub reconnects: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    /// Requests the client cancelled (a stop, the graceful stop's end): not failed (D21).
    pub cancelled: AtomicU64,
    /// Conversations open now (multi-turn).
    pub active_sessions: AtomicU32,
    /// Set when a closed-loop worker stopped issuing because `--duration` passed.
    pub duration_reached: std::sync::atomic::AtomicBool,
    /// Scheduling lag (actual send - intended send) in microseconds, open loop only.
    lag_us: Mutex<Histogram<u64>>,
    /// Pacing-timer wake-up lateness in microseconds (open loop only).
    wake_us: Mutex<Histogram<u64>>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            max_in_flight: AtomicU32::new(0),
            open_connections: AtomicU32::new(0),
            reconnects: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            active_sessions: AtomicU32::new(0),
            duration_reached: std::sync::atomic::AtomicBool::new(false),
            lag_us: Mutex::new(histogram()),
            wake_us: Mutex::new(histogram()),
        }
    }
}

/// A microsecond histogram (3 significant digits) that grows to the largest value seen:
/// a lag of hours is recorded as it is, not clamped to a preset top.
fn histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static bounds");
    h.auto(true);
    h
}

/// Records `v` (at least 1), growing the histogram past its preset hour if needed
/// (`saturating_record` would clamp instead); saturates only if growing fails.
fn record(h: &mut Histogram<u64>, v: u64) {
    let v = v.max(1);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// Lag percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lag {
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl Stats {
    /// Marks a request in flight until the guard drops.
    pub fn request_started(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }

    /// Counts an open connection until the guard drops.
    pub fn connection_opened(self: &std::sync::Arc<Self>) -> ConnGuard {
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        ConnGuard(std::sync::Arc::clone(self))
    }

    pub fn record_lag(&self, lag_us: u64) {
        record(&mut self.lag_us.lock().expect("lag lock"), lag_us);
    }

    pub fn record_wake(&self, late_us: u64) {
        record(&mut self.wake_us.lock().expect("wake lock"), late_us);
    }

    /// Send lag: intended send time to the moment the request task is started.
    pub fn lag(&self) -> Lag {
        summary(&self.lag_us.lock().expect("lag lock"))
    }

    /// Pacing-timer wake-up lateness.
    pub fn wake(&self) -> Lag {
        summary(&self.wake_us.lock().expect("wake lock"))
    }
}

fn summary(h: &Histogram<u64>) -> Lag {
    if h.is_empty() {
        return Lag::default();
    }
    Lag { p50_us: h.value_at_quantile(0.5), p99_us: h.value_at_quantile(0.99), max_us: h.max() }
}

/// Decrements the in-flight count on drop.
#[derive(Debug)]
pub struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decrements the open-connection count on drop.
#[derive(Debug)]
pub struct ConnGuard(std::sync::Arc<Stats>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}
