//! vLLM's `max_concurrent_requests`: the run cut into one-second buckets from the first
//! successful request's start; each successful request counts in every bucket it is active
//! in (from the second of its start to the second of its end, both included); the largest
//! count. (So requests shorter than a second count once per second they touch: at 4 in
//! flight and 1.2 s requests vLLM reports about 8.) Exact while the run's samples are kept
//! (D23); beyond, buckets are anchored at the run's start instead of the first start, in
//! bounded memory (D92).

use super::seconds::{RunningPeak, Seconds};
use super::spilled::Spilled;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct ActiveSeconds {
    /// Successful requests' (start, end), seconds, while exact.
    exact: Option<Spilled<(f64, f64)>>,
    /// Start second +1, second after the end -1, on the run's timeline.
    bins: Seconds<RunningPeak>,
}

impl ActiveSeconds {
    pub fn new() -> Self {
        Self { exact: Some(Spilled::new()), bins: Seconds::default() }
    }

    /// One successful request.
    pub fn add(&mut self, start_s: f64, end_s: f64) {
        if let Some(e) = &mut self.exact {
            e.push((start_s, end_s));
        }
        self.bins.add(start_s.floor() as i64, 1);
        self.bins.add(end_s.floor() as i64 + 1, -1);
    }

    /// Stops keeping the intervals (the exact budget is spent).
    pub fn drop_exact(&mut self) {
        self.exact = None;
    }

    /// The largest number of successful requests active within one second (the kept
    /// intervals are read back for it; if they cannot be, the run-anchored bins answer).
    pub fn peak(self) -> u64 {
        let Self { mut exact, bins } = self;
        if let Some(e) = &mut exact
            && e.load().is_err()
        {
            exact = None;
        }
        match &exact {
            Some(e) if !e.is_empty() => {
                let e = e.values();
                let min = e.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
                let mut diff: BTreeMap<i64, i64> = BTreeMap::new();
                for &(s, end) in e {
                    // Python's int() of a non-negative float: the floor.
                    *diff.entry((s - min) as i64).or_default() += 1;
                    *diff.entry((end - min) as i64 + 1).or_default() -= 1;
                }
                max_prefix(&diff)
            }
            _ => bins.answer().max(0) as u64,
        }
    }
}

fn max_prefix(diff: &BTreeMap<i64, i64>) -> u64 {
    let (mut cur, mut peak) = (0i64, 0i64);
    for d in diff.values() {
        cur += d;
        peak = peak.max(cur);
    }
    peak.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM's own computation, transcribed: buckets from the first start.
    fn vllm(rows: &[(f64, f64)]) -> u64 {
        let min = rows.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
        let max_end = rows.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
        let n = (max_end - min).ceil() as usize + 1;
        let mut per = vec![0u64; n];
        for &(s, e) in rows {
            for b in per.iter_mut().take((e - min) as usize + 1).skip((s - min) as usize) {
                *b += 1;
            }
        }
        per.into_iter().max().unwrap_or(0)
    }

    #[test]
    fn counts_requests_per_second_touched_as_vllm() {
        // 4 slots, requests of 1.2 s back to back: each second touches about 8.
        let mut rows = Vec::new();
        for slot in 0..4 {
            let mut t = 0.3 + 0.01 * f64::from(slot);
            for _ in 0..5 {
                rows.push((t, t + 1.2));
                t += 1.2;
            }
        }
        let mut a = ActiveSeconds::new();
        for &(s, e) in &rows {
            a.add(s, e);
        }
        assert_eq!(a.clone().peak(), vllm(&rows));
        assert_eq!(a.clone().peak(), 8);
        // Beyond the exact budget, anchored at 0 instead of 0.3: still 8 here.
        a.drop_exact();
        assert_eq!(a.clone().peak(), 8);
        assert_eq!(ActiveSeconds::new().peak(), 0);
    }
}
