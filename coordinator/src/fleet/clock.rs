//! Clock-offset estimation from NTP-style pings: of at least eight exchanges, the one
//! with the smallest round trip wins; its offset is the estimate and half its round trip
//! the error bound.

/// One ping/pong exchange: t1 (coordinator send), t2 (agent receive), t3 (agent send),
/// t4 (coordinator receive), all in ns on their own clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    pub t1: i64,
    pub t2: i64,
    pub t3: i64,
    pub t4: i64,
}

/// Agent clock minus coordinator clock, with its bound.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Offset {
    pub offset_ns: i64,
    pub rtt_ns: i64,
}

impl Offset {
    /// Error bound of the offset: half the round trip of the exchange it came from.
    pub fn bound_ns(&self) -> i64 {
        self.rtt_ns / 2
    }
}

impl Exchange {
    pub fn rtt_ns(&self) -> i64 {
        ((self.t4 - self.t1) - (self.t3 - self.t2)).max(0)
    }
    pub fn offset_ns(&self) -> i64 {
        ((self.t2 - self.t1) + (self.t3 - self.t4)) / 2
    }
}

/// The minimum-RTT estimate, or `None` without exchanges.
pub fn estimate(exchanges: &[Exchange]) -> Option<Offset> {
    let best = exchanges.iter().min_by_key(|e| e.rtt_ns())?;
    Some(Offset { offset_ns: best.offset_ns(), rtt_ns: best.rtt_ns() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_path_gives_exact_offset() {
        // Agent is 5 ms ahead; one-way delay 100 us each way, 10 us processing.
        let e = Exchange { t1: 0, t2: 5_000_000 + 100_000, t3: 5_000_000 + 110_000, t4: 210_000 };
        assert_eq!(e.offset_ns(), 5_000_000);
        assert_eq!(e.rtt_ns(), 200_000);
    }

    #[test]
    fn keeps_the_minimum_round_trip() {
        let slow = Exchange { t1: 0, t2: 9_000_000, t3: 9_000_000, t4: 10_000_000 };
        let fast = Exchange { t1: 0, t2: 1_050, t3: 1_060, t4: 110 };
        let o = estimate(&[slow, fast, slow]).unwrap();
        assert_eq!(o.rtt_ns, 100);
        assert_eq!(o.offset_ns, 1_000);
        assert_eq!(o.bound_ns(), 50);
        assert!(estimate(&[]).is_none());
    }
}
