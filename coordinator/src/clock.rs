//! The coordinator's wall clock: unix time in nanoseconds, the one timeline that rows,
//! scrapes and agents' clock offsets are placed on.

pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}
