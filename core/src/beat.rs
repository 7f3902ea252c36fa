//! When a heartbeat is due (D2, D79). A side of a session must send something at least
//! every `interval`; a heartbeat fills only the gaps that its other messages (rows, acks,
//! health reports) leave. Heartbeats that do go fall on a grid shared by every process:
//! the whole multiples of `interval` in unix time. A coordinator's links then wake
//! together, once per interval rather than once per agent, and agents on synchronized
//! clocks reach the coordinator together, read in one wake-up. The grid is placed once,
//! from the wall clock when the schedule starts, and followed on the monotonic clock
//! after that: a step of the wall clock moves no heartbeat.
//!
//! Generic over the instant type, so the agent's state machine can use tokio's (paused in
//! its tests) and a unit test plain integers.

use std::ops::{Add, Sub};
use std::time::Duration;

/// One side's heartbeat schedule.
#[derive(Debug, Clone, Copy)]
pub struct Beat<I> {
    interval: Duration,
    /// A point of the grid.
    origin: I,
    /// When the next heartbeat goes, unless something else goes first.
    due: I,
    /// When a message other than a heartbeat last left.
    last_sent: Option<I>,
}

/// The first grid point (a whole multiple of `interval` in unix time) strictly after
/// `now`, which reads `unix_ns` on the wall clock. The agent's batches leave on these
/// points too (D83).
pub fn next_slot<I: Add<Duration, Output = I>>(now: I, unix_ns: i64, interval: Duration) -> I {
    let iv = interval.as_nanos().max(1) as i64;
    let into = unix_ns.rem_euclid(iv);
    now + Duration::from_nanos((iv - into) as u64)
}

impl<I: Copy + Ord + Add<Duration, Output = I> + Sub<I, Output = Duration>> Beat<I> {
    /// A schedule started at `now` (reading `unix_ns` on the wall clock) whose first
    /// heartbeat is due at `first`.
    pub fn new(interval: Duration, now: I, unix_ns: i64, first: I) -> Self {
        Self { interval, origin: next_slot(now, unix_ns, interval), due: first, last_sent: None }
    }

    /// The first point of the grid strictly after `now`.
    fn next_point(&self, now: I) -> I {
        if now < self.origin {
            return self.origin;
        }
        let iv = self.interval.as_nanos().max(1);
        let k = (now - self.origin).as_nanos() / iv + 1;
        self.origin + Duration::from_nanos((iv * k) as u64)
    }

    /// When the next heartbeat goes, unless something else goes first.
    pub fn due(&self) -> I {
        self.due
    }

    /// Something other than a heartbeat left at `at`: the next heartbeat can wait.
    pub fn sent(&mut self, at: I) {
        self.last_sent = Some(self.last_sent.map_or(at, |s| s.max(at)));
    }

    /// Asked at `now`: whether a heartbeat goes now.
    /// Not yet due, or something else left within the interval: no, and the heartbeat is
    /// due one interval after that message. Due: yes, and the next is due at the grid's
    /// next point, at most one interval on.
    pub fn fire(&mut self, now: I) -> bool {
        if now < self.due {
            return false;
        }
        if let Some(s) = self.last_sent
            && s + self.interval > now
        {
            self.due = s + self.interval;
            return false;
        }
        self.due = self.next_point(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(b: &mut Beat<Ms>, t: u64) -> bool {
        b.fire(Ms(t))
    }

    /// A schedule started at `t` ms, when the wall clock read `unix_ms`.
    fn beat(t: u64, unix_ms: i64, first: u64) -> Beat<Ms> {
        Beat::new(IV, Ms(t), unix_ms * 1_000_000, Ms(first))
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Ms(u64);
    impl Add<Duration> for Ms {
        type Output = Ms;
        fn add(self, d: Duration) -> Ms {
            Ms(self.0 + d.as_millis() as u64)
        }
    }
    impl Sub<Ms> for Ms {
        type Output = Duration;
        fn sub(self, o: Ms) -> Duration {
            Duration::from_millis(self.0 - o.0)
        }
    }

    const IV: Duration = Duration::from_millis(100);

    #[test]
    fn idle_beats_fall_on_the_grid_whatever_the_start() {
        // Started at 37 ms of this process, when the wall clock read ...2_015 ms: the
        // grid's points are at 122, 222, ... here.
        let mut b = beat(37, 2_015, 37);
        assert!(!fire(&mut b, 36), "not due yet");
        assert!(fire(&mut b, 37), "the first at once");
        assert_eq!(b.due(), Ms(122), "then on the grid");
        for k in 1..5 {
            assert!(fire(&mut b, 22 + 100 * k));
            assert_eq!(b.due(), Ms(22 + 100 * (k + 1)));
        }
        // A late wake-up sends at once and returns to the grid, never a burst.
        assert!(fire(&mut b, 730));
        assert_eq!(b.due(), Ms(822));
    }

    #[test]
    fn other_messages_stand_in_for_heartbeats_and_no_gap_exceeds_the_interval() {
        let mut b = beat(0, 0, 0);
        assert!(fire(&mut b, 0));
        // Rows every 100 ms at an odd phase: no heartbeat at all.
        for k in 0..10 {
            b.sent(Ms(30 + 100 * k));
            let due = b.due().0;
            assert!(!fire(&mut b, due), "beat {k}");
        }
        // The rows stop after 930: a heartbeat exactly one interval later, then the grid.
        assert_eq!(b.due(), Ms(1030));
        assert!(fire(&mut b, 1030));
        assert_eq!(b.due(), Ms(1100));
        // Every gap between two things sent, over a mixed sequence, stays within 100 ms.
        let mut b = beat(0, 0, 0);
        let (mut last, mut t) = (0, 0);
        let others = [5, 180, 185, 420, 421, 999];
        let mut next_other = others.iter().copied().peekable();
        while t < 1200 {
            let due = b.due().0;
            t = due.min(next_other.peek().copied().unwrap_or(u64::MAX));
            let went = if next_other.peek() == Some(&t) {
                next_other.next();
                b.sent(Ms(t));
                true
            } else {
                fire(&mut b, t)
            };
            if went {
                assert!(t - last <= 100, "a gap of {} ms before {t}", t - last);
                last = t;
            }
        }
    }
}
