//! Durations as the row's microsecond fields hold them, saturating instead of wrapping.

use std::time::Duration;

/// Microseconds of a request time (u64: ~584,000 years).
pub(crate) fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Microseconds of a time since the run's start, for the signed row fields (`start_us`,
/// `intended_us`; i64: ~292,000 years, saturating rather than wrapping).
pub(crate) fn signed_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds of one gap between token events, saturating (a single gap of 71 min).
pub(crate) fn gap_us(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}
