//! Counts per second of a run's timeline, in bounded memory (D92): the latest
//! [`WINDOW`] seconds are kept as counts, and a second that falls out of the window is
//! handed to a [`Reduce`], which keeps only what the answer needs of it (a running sum and
//! its peak, or the largest count). A row reaches the coordinator when its request ends,
//! so a second leaves the window only once every request still able to add to it has run
//! for more than an hour.

use std::collections::VecDeque;

/// The seconds kept as counts.
pub const WINDOW: usize = 4096;

/// What a second's count leaves behind when it goes.
pub trait Reduce: Default {
    /// Whether a count for a second already gone is added to the oldest kept second
    /// (true) or left out (false).
    const LATE_TO_OLDEST: bool;
    fn take(&mut self, count: i64);
    fn answer(&self) -> i64;
}

/// The largest running sum of the counts in their order: the most requests active in one
/// second, from +1 at a request's first second and -1 after its last.
#[derive(Debug, Clone, Default)]
pub struct RunningPeak {
    sum: i64,
    peak: i64,
}

impl Reduce for RunningPeak {
    // A late +1 or -1 still moves every second after it.
    const LATE_TO_OLDEST: bool = true;
    fn take(&mut self, count: i64) {
        self.sum += count;
        self.peak = self.peak.max(self.sum);
    }
    fn answer(&self) -> i64 {
        self.peak
    }
}

/// The largest count.
#[derive(Debug, Clone, Default)]
pub struct Largest(i64);

impl Reduce for Largest {
    // A second before the window was judged, or never held in it; adding its tokens to
    // another second would invent a count.
    const LATE_TO_OLDEST: bool = false;
    fn take(&mut self, count: i64) {
        self.0 = self.0.max(count);
    }
    fn answer(&self) -> i64 {
        self.0
    }
}

#[derive(Debug, Clone)]
pub struct Seconds<R> {
    /// The second of `counts[0]`.
    first: i64,
    counts: VecDeque<i64>,
    window: usize,
    /// Whether a second has left the window (the front cannot grow back then).
    gone: bool,
    reduce: R,
}

impl<R: Reduce> Default for Seconds<R> {
    fn default() -> Self {
        Self::with_window(WINDOW)
    }
}

impl<R: Reduce> Seconds<R> {
    pub fn with_window(window: usize) -> Self {
        Self { first: 0, counts: VecDeque::new(), window: window.max(1), gone: false, reduce: R::default() }
    }

    /// Adds `count` to `second`.
    pub fn add(&mut self, second: i64, count: i64) {
        if self.counts.is_empty() {
            self.first = second;
            self.counts.push_back(0);
        }
        // Times are bounded (D88), but a non-finite one floors to i64's ends: wide
        // arithmetic keeps that from overflowing.
        let mut second = second;
        if second < self.first {
            let room = self.window - self.counts.len();
            if !self.gone && (i128::from(self.first) - i128::from(second)) <= room as i128 {
                for _ in second..self.first {
                    self.counts.push_front(0);
                }
                self.first = second;
            } else if R::LATE_TO_OLDEST {
                second = self.first;
            } else {
                return;
            }
        }
        let at = i128::from(second) - i128::from(self.first);
        if at >= self.window as i128 {
            self.leave(u64::try_from(at - self.window as i128 + 1).unwrap_or(u64::MAX));
        }
        let at = (second - self.first) as usize;
        if at >= self.counts.len() {
            self.counts.resize(at + 1, 0);
        }
        self.counts[at] += count;
    }

    /// The oldest `n` seconds leave the window (those never counted are zeros).
    fn leave(&mut self, n: u64) {
        self.gone = true;
        let kept = usize::try_from(n).unwrap_or(usize::MAX).min(self.counts.len());
        for c in self.counts.drain(..kept) {
            self.reduce.take(c);
        }
        self.first = self.first.saturating_add(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The answer over every second.
    pub fn answer(mut self) -> i64 {
        for c in std::mem::take(&mut self.counts) {
            self.reduce.take(c);
        }
        self.reduce.answer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The unbounded answer: every second kept.
    fn whole(adds: &[(i64, i64)], running: bool) -> i64 {
        let mut m: BTreeMap<i64, i64> = BTreeMap::new();
        for &(s, c) in adds {
            *m.entry(s).or_default() += c;
        }
        let (mut sum, mut best) = (0i64, 0i64);
        for c in m.values() {
            sum += c;
            best = best.max(if running { sum } else { *c });
        }
        best
    }

    fn bounded<R: Reduce>(adds: &[(i64, i64)], window: usize) -> i64 {
        let mut s = Seconds::<R>::with_window(window);
        for &(sec, c) in adds {
            s.add(sec, c);
        }
        s.answer()
    }

    #[test]
    fn within_the_window_the_answer_is_the_unbounded_one() {
        // Requests of 1-3 s arriving out of order by up to 5 s, over 60 s, window 16.
        let mut adds = Vec::new();
        for i in 0..400i64 {
            let start = (i * 37 % 60).max(0);
            let len = 1 + i % 3;
            adds.push((start, 1));
            adds.push((start + len, -1));
        }
        // Sorted by end, with a jitter of a few seconds: what the coordinator sees.
        adds.sort_by_key(|&(s, c)| (s + if c < 0 { 0 } else { 3 }, c));
        assert_eq!(bounded::<RunningPeak>(&adds, 16), whole(&adds, true));
        assert_eq!(bounded::<RunningPeak>(&adds, WINDOW), whole(&adds, true));
        let tokens: Vec<(i64, i64)> = (0..500).map(|i| (i % 97 + i / 50, 1 + i % 5)).collect();
        assert_eq!(bounded::<Largest>(&tokens, 128), whole(&tokens, false));
        // A front that grows back while nothing has left.
        assert_eq!(bounded::<Largest>(&[(10, 1), (5, 4), (12, 2)], 16), 4);
        assert_eq!(bounded::<RunningPeak>(&[(10, 1), (5, 1), (12, -1)], 16), 2);
    }

    #[test]
    fn a_long_run_keeps_the_window_and_late_counts_go_where_they_are_sound() {
        let mut s = Seconds::<RunningPeak>::with_window(8);
        // A day, one request per second lasting 2 s: 2 active in every second after the first.
        for t in 0..86_400i64 {
            s.add(t, 1);
            s.add(t + 2, -1);
            assert!(s.counts.len() <= 8);
        }
        assert_eq!(s.clone().answer(), 2);
        // A request that started 100 s ago and ends now moves every later second.
        s.add(86_400 - 100, 1);
        s.add(86_401, -1);
        assert_eq!(s.answer(), 3);
        let mut l = Seconds::<Largest>::with_window(8);
        for t in 0..100 {
            l.add(t, 5);
        }
        l.add(3, 1_000); // gone: left out rather than put on another second
        assert_eq!(l.answer(), 5);
        // A jump far past the window.
        let mut j = Seconds::<Largest>::with_window(4);
        j.add(0, 7);
        j.add(31_000_000, 2);
        assert!(j.counts.len() <= 4);
        assert_eq!(j.answer(), 7);
        // A non-finite time floors to i64's ends: no overflow.
        let mut e = Seconds::<RunningPeak>::with_window(4);
        e.add(5, 1);
        e.add(i64::MAX, -1);
        e.add(i64::MIN, 1);
        let _ = e.answer();
    }
}
