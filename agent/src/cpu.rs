//! CPU and host signals of this agent (D24: the one module that reads them).
//!
//! The CPU time of the engine's own threads (the runtime every run's requests are driven on, so the
//! client's CPU is the same whether the agent is embedded in `surge run` beside the
//! coordinator and an echo server, or runs alone); the number of usable cores and the
//! host name. Health reports read the CPU time once per second; nothing here is on the
//! request path. Host-wide busy time and CPU pressure belong here too.

use nix::time::{ClockId, clock_gettime};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The engine's threads: their kernel thread ids, the CPU time each had when last read,
/// and the CPU time of those that have exited (blocking-pool threads come and go).
#[derive(Debug, Default)]
struct EngineThreads {
    live: Vec<(i32, Duration)>,
    retired: Duration,
}

fn engine_threads() -> &'static Mutex<EngineThreads> {
    static THREADS: OnceLock<Mutex<EngineThreads>> = OnceLock::new();
    THREADS.get_or_init(Mutex::default)
}

/// Counts the calling thread as one of the engine's (call it when the thread starts).
pub fn register_engine_thread() {
    let tid = nix::unistd::gettid().as_raw();
    engine_threads().lock().expect("cpu lock").live.push((tid, Duration::ZERO));
}

/// CPU time of thread `tid` of this process: Linux's per-thread CPU clock, the id glibc's
/// `pthread_getcpuclockid` computes (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`).
fn thread_cpu_time(tid: i32) -> Option<Duration> {
    let id = ((!tid) << 3) | 6;
    let t = clock_gettime(ClockId::from_raw(id)).ok()?;
    Some(Duration::new(u64::try_from(t.tv_sec()).ok()?, u32::try_from(t.tv_nsec()).ok()?))
}

/// CPU time used so far by the engine's threads (zero before any ran).
pub fn engine_cpu_time() -> Duration {
    let mut threads = engine_threads().lock().expect("cpu lock");
    let EngineThreads { live, retired } = &mut *threads;
    live.retain_mut(|(tid, last)| match thread_cpu_time(*tid) {
        Some(t) => {
            *last = t;
            true
        }
        None => {
            *retired += *last;
            false
        }
    });
    *retired + live.iter().map(|(_, t)| *t).sum::<Duration>()
}

/// Number of CPUs this process may run on.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// This host's name (sent to coordinators in Hello).
pub fn hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// CPU use of the engine's threads between two readings, in percent of one core.
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    cpu: Duration,
    wall: Instant,
    read: fn() -> Duration,
}

impl Default for CpuMeter {
    fn default() -> Self {
        Self::of(engine_cpu_time)
    }
}

impl CpuMeter {
    /// A meter reading `read` (a CPU time so far).
    pub fn of(read: fn() -> Duration) -> Self {
        Self { cpu: read(), wall: Instant::now(), read }
    }

    /// Percent of one core used since the last call (or creation).
    pub fn sample(&mut self) -> f64 {
        let now = Self::of(self.read);
        let wall = now.wall.duration_since(self.wall).as_secs_f64();
        let cpu = now.cpu.saturating_sub(self.cpu).as_secs_f64();
        *self = now;
        if wall > 0.0 { 100.0 * cpu / wall } else { 0.0 }
    }
}

/// The host's CPU between two readings: the busy share of all its CPUs (`/proc/stat`)
/// and the share of wall time some task waited for a CPU (`/proc/pressure/cpu` "some",
/// from its `total` counter, so a reading covers exactly its own interval; D14).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostSample {
    /// 0..100: time all CPUs were busy over time they existed.
    pub busy_pct: f64,
    /// 0..100, or `None` where the kernel has no pressure stall information.
    pub pressure_pct: Option<f64>,
}

/// Reads [`HostSample`]s, each over the time since the previous one.
#[derive(Debug, Clone, Copy)]
pub struct HostMeter {
    busy: u64,
    total: u64,
    stalled_us: Option<u64>,
    wall: Instant,
}

/// Busy and total CPU ticks of the host, and microseconds some task stalled for a CPU.
fn host_counters() -> (u64, u64, Option<u64>) {
    use procfs::{Current, CurrentSI};
    let (busy, total) = match procfs::KernelStats::current() {
        Ok(k) => {
            let t = k.total;
            let idle = t.idle + t.iowait.unwrap_or(0);
            let all = t.user
                + t.nice
                + t.system
                + t.idle
                + [t.iowait, t.irq, t.softirq, t.steal].iter().map(|v| v.unwrap_or(0)).sum::<u64>();
            (all.saturating_sub(idle), all)
        }
        Err(_) => (0, 0),
    };
    let stalled = procfs::CpuPressure::current().ok().map(|p| p.some.total);
    (busy, total, stalled)
}

impl Default for HostMeter {
    fn default() -> Self {
        let (busy, total, stalled_us) = host_counters();
        Self { busy, total, stalled_us, wall: Instant::now() }
    }
}

impl HostMeter {
    /// The host since the last call (or creation).
    pub fn sample(&mut self) -> HostSample {
        let now = Self::default();
        let ticks = now.total.saturating_sub(self.total);
        let busy_pct = if ticks > 0 { 100.0 * now.busy.saturating_sub(self.busy) as f64 / ticks as f64 } else { 0.0 };
        let wall_us = now.wall.duration_since(self.wall).as_micros() as f64;
        let pressure_pct = match (self.stalled_us, now.stalled_us) {
            (Some(a), Some(b)) if wall_us > 0.0 => Some((100.0 * b.saturating_sub(a) as f64 / wall_us).min(100.0)),
            _ => None,
        };
        *self = now;
        HostSample { busy_pct: busy_pct.min(100.0), pressure_pct }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::resource::{UsageWho, getrusage};
    use nix::sys::time::{TimeVal, TimeValLike};

    /// The whole process's CPU time so far (all threads, user + system).
    fn process_cpu_time() -> Duration {
        let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else { return Duration::ZERO };
        duration(usage.user_time()) + duration(usage.system_time())
    }

    fn duration(t: TimeVal) -> Duration {
        Duration::from_micros(u64::try_from(t.num_microseconds()).unwrap_or(0))
    }

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
    fn engine_threads_are_counted_even_after_they_exit() {
        let before = engine_cpu_time();
        let burnt = std::thread::spawn(move || {
            register_engine_thread();
            let tid = nix::unistd::gettid().as_raw();
            let mut x = 0u64;
            while thread_cpu_time(tid).unwrap() < Duration::from_millis(50) {
                for i in 0..100_000u64 {
                    x = x.wrapping_add(std::hint::black_box(i * i));
                }
            }
            assert!(x > 0);
            let t = thread_cpu_time(tid).unwrap();
            assert!(engine_cpu_time() >= before + t, "read while it runs");
            t
        })
        .join()
        .unwrap();
        // The thread is gone; what it used stays in the total.
        assert!(engine_cpu_time() >= before + burnt, "kept after it exited");
        assert!(thread_cpu_time(100_000_000).is_none(), "no such thread (pid_max is at most 2^22)");
    }

    #[test]
    fn host_meter_sees_this_process_burn() {
        let mut m = HostMeter::default();
        assert!(burn(Duration::from_millis(100)));
        let s = m.sample();
        // One thread busy for most of the interval, out of cores() CPUs (others may be busy too).
        let floor = 100.0 / f64::from(cores()) * 0.3;
        assert!(s.busy_pct >= floor && s.busy_pct <= 100.0, "{s:?}");
        if let Some(p) = s.pressure_pct {
            assert!((0.0..=100.0).contains(&p), "{s:?}");
        }
    }

    #[test]
    fn meter_sees_a_busy_thread() {
        let mut m = CpuMeter::of(process_cpu_time);
        assert!(burn(Duration::from_millis(50)));
        let pct = m.sample();
        // 50 ms of CPU burnt on one thread in a short while: well above idle.
        assert!(pct > 10.0 && pct <= 100.0 * f64::from(cores()) + 5.0, "{pct}");
        assert!(cores() >= 1 && !hostname().is_empty());
    }
}
