//! The agent's own CPU use: process CPU time (user + system, all threads) from
//! `/proc/self/stat`, so health reports cost one small file read per second and nothing
//! on the request path.

use std::time::Duration;

/// Linux reports CPU times in clock ticks of 1/100 s (USER_HZ is 100 on every
/// mainstream architecture).
const TICKS_PER_SEC: f64 = 100.0;

/// Process CPU time used so far, or zero where `/proc` is unavailable.
pub fn process_cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return Duration::ZERO };
    // Fields after the parenthesised command name (which may hold spaces).
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return Duration::ZERO };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_secs_f64((ticks(14) + ticks(15)) as f64 / TICKS_PER_SEC)
}

/// Number of CPUs this process may run on.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// CPU use between two readings, in percent of one core.
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    cpu: Duration,
    wall: std::time::Instant,
}

impl Default for CpuMeter {
    fn default() -> Self {
        Self { cpu: process_cpu_time(), wall: std::time::Instant::now() }
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
    #[test]
    fn reads_own_cpu_time() {
        let start = super::process_cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(super::process_cpu_time() >= start);
    }
}
