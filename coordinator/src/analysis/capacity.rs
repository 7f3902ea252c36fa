//! Capacity (D47, D48, D62): whether a load level meets its SLOs, judged from each
//! percentile's interval, and the search over levels that brackets the highest passing
//! one. Pure: values in, verdicts and the next level out. The objectives themselves are
//! the plan's (`plan::objective`).

use super::interval::{self, Interval};

pub use crate::plan::objective::{Metric, Slo};

/// What a level's values say of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every SLO's upper bound is within its limit.
    Pass,
    /// Some SLO's lower bound is above its limit.
    Fail,
    /// Neither, yet: more requests would decide it.
    Undecided,
}

/// One SLO judged on one level's values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    pub slo: Slo,
    pub interval: Interval,
    pub verdict: Verdict,
}

/// Judges `slo` on `sorted_ms` (ascending) at `confidence`.
pub fn judge(slo: Slo, sorted_ms: &[f64], confidence: f64) -> Judged {
    let interval = interval::percentile(sorted_ms, slo.pct, confidence);
    let verdict = if interval.high.is_some_and(|h| h <= slo.limit_ms) {
        Verdict::Pass
    } else if interval.low.is_some_and(|l| l > slo.limit_ms) {
        Verdict::Fail
    } else {
        Verdict::Undecided
    };
    Judged { slo, interval, verdict }
}

/// The level's verdict from its SLOs': a fail decides, then an undecided, else a pass.
pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
    let mut out = Verdict::Pass;
    for v in verdicts {
        match v {
            Verdict::Fail => return Verdict::Fail,
            Verdict::Undecided => out = Verdict::Undecided,
            Verdict::Pass => {}
        }
    }
    out
}

/// How many values in all an undecided SLO would need for a decision if the share of its
/// values within the limit stayed as it is now (`None`: not within 10 million).
pub fn values_to_decide(slo: Slo, sorted_ms: &[f64], confidence: f64) -> Option<u64> {
    let n = sorted_ms.len() as u64;
    if n == 0 {
        return Some(interval::values_for_upper_bound(slo.pct, confidence));
    }
    let within = sorted_ms.partition_point(|v| *v <= slo.limit_ms) as f64 / n as f64;
    let p = slo.pct / 100.0;
    let decided = |m: u64| {
        let r = interval::ranks(m, p, confidence);
        let below = (within * m as f64).floor() as u64;
        // The upper rank within the limit: a pass; the lower rank beyond it: a fail.
        r.upper.is_some_and(|u| u <= below) || r.lower.is_some_and(|l| l > below)
    };
    let mut m = n.max(1);
    while m <= 10_000_000 {
        if decided(m) {
            // Narrow down between m/2 and m.
            let (mut lo, mut hi) = (m / 2, m);
            while lo + 1 < hi {
                let mid = lo + (hi - lo) / 2;
                if decided(mid) { hi = mid } else { lo = mid }
            }
            return Some(hi.max(n));
        }
        m *= 2;
    }
    None
}

/// A level by the vLLM goodput rule: at least `ratio` of its requests met every
/// per-request SLO; `good` of `n`, judged by the proportion's interval.
pub fn judge_goodput(good: u64, n: u64, ratio: f64, confidence: f64) -> (Verdict, (f64, f64)) {
    let (lo, hi) = interval::proportion(good, n, confidence);
    let v = if lo >= ratio {
        Verdict::Pass
    } else if hi < ratio {
        Verdict::Fail
    } else {
        Verdict::Undecided
    };
    (v, (lo, hi))
}

/// The search over levels: up from `lo` by doubling until a level fails (or `hi`), then
/// bisection between the highest pass and the lowest fail until they are within the
/// resolution. Integer units (concurrency, sessions) bisect arithmetically down to 1;
/// rates geometrically, down to a relative width.
#[derive(Debug, Clone)]
pub struct Search {
    lo: f64,
    hi: f64,
    integer: bool,
    /// Integer units: the bracket's width; rates: its relative width.
    resolution: f64,
    pass: Option<f64>,
    fail: Option<f64>,
}

impl Search {
    pub fn new(lo: f64, hi: f64, integer: bool, resolution: f64) -> Search {
        Search { lo, hi, integer, resolution, pass: None, fail: None }
    }

    /// The highest passing level and the lowest failing one so far.
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.pass, self.fail)
    }

    /// Takes a level's verdict (an undecided level counts as failed, D47).
    pub fn record(&mut self, level: f64, passed: bool) {
        if passed {
            self.pass = Some(self.pass.map_or(level, |p| p.max(level)));
        } else {
            self.fail = Some(self.fail.map_or(level, |f| f.min(level)));
        }
    }

    /// The next level to run, or `None` when the bracket is narrow enough (or the range
    /// is exhausted).
    pub fn next(&self) -> Option<f64> {
        match (self.pass, self.fail) {
            (None, None) => Some(self.lo),
            (None, Some(_)) => None,
            (Some(p), None) => {
                if p >= self.hi {
                    return None;
                }
                let up = if self.integer { (p * 2.0).round() } else { p * 2.0 };
                Some(up.min(self.hi))
            }
            (Some(p), Some(f)) => {
                if self.integer {
                    if f - p <= self.resolution.max(1.0) {
                        return None;
                    }
                    Some(((p + f) / 2.0).floor())
                } else {
                    if f / p - 1.0 <= self.resolution {
                        return None;
                    }
                    // The geometric midpoint to 3 significant digits (a level a reader can
                    // type and a file name can hold), strictly inside the bracket.
                    let mid = (p * f).sqrt();
                    let unit = 10f64.powf(mid.log10().floor() - 2.0);
                    let rounded = (mid / unit).round() * unit;
                    Some(if rounded > p && rounded < f { rounded } else { mid })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(lo: f64, hi: f64, integer: bool, res: f64, capacity: f64) -> (Vec<f64>, (Option<f64>, Option<f64>)) {
        let mut s = Search::new(lo, hi, integer, res);
        let mut ran = Vec::new();
        while let Some(l) = s.next() {
            assert!(ran.len() < 40, "{ran:?}");
            ran.push(l);
            s.record(l, l <= capacity);
        }
        (ran, s.bracket())
    }

    /// A 48-slot server searched from 1 to 1024: 1, 2, ... 64 (fail), then 48 56 52 50 49:
    /// bracket [48, 49] in 12 levels.
    #[test]
    fn integer_search_brackets_the_capacity() {
        let (ran, bracket) = search(1.0, 1024.0, true, 1.0, 48.0);
        assert_eq!(ran, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 48.0, 56.0, 52.0, 50.0, 49.0]);
        assert_eq!(bracket, (Some(48.0), Some(49.0)));
        for cap in [1.0, 7.0, 100.0, 1000.0] {
            let (_, (p, f)) = search(1.0, 1024.0, true, 1.0, cap);
            assert_eq!((p, f), (Some(cap), Some(cap + 1.0)), "{cap}");
        }
        assert_eq!(search(1.0, 1024.0, true, 1.0, 5000.0).1, (Some(1024.0), None), "capacity above the range");
        assert_eq!(search(4.0, 1024.0, true, 1.0, 2.0).1, (None, Some(4.0)), "below the range");
    }

    #[test]
    fn rate_search_is_geometric_to_its_resolution() {
        let (ran, (p, f)) = search(100.0, 4000.0, false, 0.05, 960.0);
        assert_eq!(ran[..6], [100.0, 200.0, 400.0, 800.0, 1600.0, 1130.0], "{ran:?}");
        let (p, f) = (p.unwrap(), f.unwrap());
        assert!(p <= 960.0 && f > 960.0 && f / p - 1.0 <= 0.05, "{p} {f} after {ran:?}");
        assert!(p >= 960.0 / 1.05, "{p}");
        assert!(ran.len() <= 10, "{ran:?}");
    }

    /// A p99 of 200 values all within the limit, the point estimate far within: the
    /// interval has no upper bound, so the level is undecided, not passed; 400 such
    /// values pass; values mostly beyond fail.
    #[test]
    fn a_level_passes_only_when_its_interval_is_within() {
        let slo = Slo { metric: Metric::Ttft, pct: 99.0, limit_ms: 30.0 };
        let values: Vec<f64> = (0..200).map(|i| 20.0 + f64::from(i) * 0.01).collect();
        let j = judge(slo, &values, 0.95);
        assert!(j.interval.estimate <= 30.0);
        assert_eq!(j.verdict, Verdict::Undecided, "{j:?}");
        let needed = values_to_decide(slo, &values, 0.95).unwrap();
        assert_eq!(needed, 368, "the fewest values with an upper bound");
        let values: Vec<f64> = (0..400).map(|i| 20.0 + f64::from(i) * 0.01).collect();
        assert_eq!(judge(slo, &values, 0.95).verdict, Verdict::Pass);
        let values: Vec<f64> = (0..400).map(|i| 25.0 + f64::from(i) * 0.1).collect();
        assert_eq!(judge(slo, &values, 0.95).verdict, Verdict::Fail);
        assert_eq!(combine([Verdict::Pass, Verdict::Undecided]), Verdict::Undecided);
        assert_eq!(combine([Verdict::Undecided, Verdict::Fail]), Verdict::Fail);
    }

    #[test]
    fn goodput_by_its_proportions_interval() {
        assert_eq!(judge_goodput(990, 1000, 0.95, 0.95).0, Verdict::Pass);
        assert_eq!(judge_goodput(900, 1000, 0.95, 0.95).0, Verdict::Fail);
        assert_eq!(judge_goodput(19, 20, 0.95, 0.95).0, Verdict::Undecided);
    }
}
