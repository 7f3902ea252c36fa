//! CPU and host signals of this agent (DESIGN.md D24: the one module that reads them).
//!
//! Today: the process's CPU time (user + system, all threads) from `getrusage(2)`, the
//! number of usable cores and the host name. Health reports read the CPU time once per
//! second; nothing here is on the request path. Later issues add engine-only thread CPU,
//! host-wide busy time and CPU pressure here, not elsewhere.

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::{TimeVal, TimeValLike};
use std::time::{Duration, Instant};

/// Process CPU time used so far (all threads, user + system), or zero where the kernel
/// does not say.
pub fn process_cpu_time() -> Duration {
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else { return Duration::ZERO };
    duration(usage.user_time()) + duration(usage.system_time())
}

fn duration(t: TimeVal) -> Duration {
    Duration::from_micros(u64::try_from(t.num_microseconds()).unwrap_or(0))
}

/// Number of CPUs this process may run on.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// This host's name (sent to coordinators in Hello).
pub fn hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// CPU use between two readings, in percent of one core.
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    cpu: Duration,
    wall: Instant,
}

impl Default for CpuMeter {
    fn default() -> Self {
        Self { cpu: process_cpu_time(), wall: Instant::now() }
    }
}

impl CpuMeter {
    /// Percent of one core used since the last call (or creation).
    pub fn sample(&mut self) -> f64 {
        let now = Self::default();
        let wall = now.wall.duration_since(self.wall).as_secs_f64();
        let cpu = now.cpu.saturating_sub(self.cpu).as_secs_f64();
        *self = now;
        if wall > 0.0 { 100.0 * cpu / wall } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the process has used `d` more CPU time; false if that took over 10 s
    /// of wall time (the clock is not advancing).
    fn burn(d: Duration) -> bool {
        let (cpu0, wall0) = (process_cpu_time(), Instant::now());
        let mut x = 0u64;
        while process_cpu_time().saturating_sub(cpu0) < d {
            for i in 0..100_000u64 {
                x = x.wrapping_add(std::hint::black_box(i * i));
            }
            if wall0.elapsed() > Duration::from_secs(10) {
                return false;
            }
        }
        x > 0
    }

    #[test]
    fn reads_own_cpu_time() {
        assert!(process_cpu_time() > Duration::ZERO, "the test harness has used some CPU already");
        assert!(burn(Duration::from_millis(50)), "process CPU time does not advance");
    }

    #[test]
    fn meter_sees_a_busy_thread() {
        let mut m = CpuMeter::default();
        assert!(burn(Duration::from_millis(50)));
        let pct = m.sample();
        // 50 ms of CPU burnt on one thread in a short while: well above idle.
        assert!(pct > 10.0 && pct <= 100.0 * f64::from(cores()) + 5.0, "{pct}");
        assert!(cores() >= 1 && !hostname().is_empty());
    }
}
