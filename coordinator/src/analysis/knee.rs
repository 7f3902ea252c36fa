//! Where a saturation sweep stops scaling (the knee).
//!
//! A step from level `a` to a higher level `b` *stops scaling* when either holds:
//! - its throughput gain is below `efficiency` of the ideal linear gain:
//!   `(thr_b / thr_a - 1) < efficiency * (b / a - 1)` (default 0.5: less than half of
//!   what the added load should give), or
//! - p99 end-to-end latency grows by more than `latency_growth` (default 1.0: it
//!   doubled), whatever the throughput did.
//!
//! The knee is the last level before the first step that stops scaling. A sweep with
//! `--find-knee` first runs its coarse levels, then a grid of `--knee-steps` levels
//! strictly between the two levels of that first non-scaling step, and applies the rule
//! again over all levels, as users do by hand with a 500..1000 step 50 sweep.

pub use crate::plan::sweep::KneeRule;

impl Default for KneeRule {
    fn default() -> Self {
        Self { efficiency: 0.5, latency_growth: 1.0 }
    }
}

/// One level's mean outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub level: f64,
    pub throughput: f64,
    pub p99_latency_ms: f64,
}

impl KneeRule {
    /// Whether the step `a -> b` (b above a) still scales.
    pub fn scales(&self, a: &Point, b: &Point) -> bool {
        let ideal = b.level / a.level - 1.0;
        let gain = if a.throughput > 0.0 { b.throughput / a.throughput - 1.0 } else { f64::INFINITY };
        let growth = if a.p99_latency_ms > 0.0 { b.p99_latency_ms / a.p99_latency_ms - 1.0 } else { 0.0 };
        gain >= self.efficiency * ideal && growth <= self.latency_growth
    }

    /// Index (into `points`, sorted by level) of the first step that stops scaling:
    /// `Some(i)` means `points[i] -> points[i + 1]` stops; `None` if every step scales.
    pub fn first_stop(&self, points: &[Point]) -> Option<usize> {
        points.windows(2).position(|w| !self.scales(&w[0], &w[1]))
    }

    /// The knee: the level before the first step that stops scaling.
    pub fn knee(&self, points: &[Point]) -> Option<f64> {
        self.first_stop(points).map(|i| points[i].level)
    }
}

/// `steps` levels evenly spaced strictly between `lo` and `hi` (rounded to integers when
/// `integer`), without duplicates or the end points.
pub fn grid(lo: f64, hi: f64, steps: u32, integer: bool) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::new();
    for k in 1..=steps {
        let mut v = lo + (hi - lo) * f64::from(k) / f64::from(steps + 1);
        if integer {
            v = v.round();
        }
        if v > lo && v < hi && !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server with 32 slots and 55 ms per request, seen by a closed-loop client.
    fn slotted(level: f64) -> Point {
        let served = level.min(32.0);
        let e2el = 55.0 * (level / 32.0).max(1.0);
        Point { level, throughput: served / 0.055, p99_latency_ms: e2el }
    }

    #[test]
    fn finds_the_slot_count_of_a_slotted_server() {
        let rule = KneeRule::default();
        let coarse: Vec<Point> = [8.0, 16.0, 64.0, 128.0].map(slotted).to_vec();
        assert_eq!(rule.first_stop(&coarse), Some(1), "16 -> 64 stops scaling");
        let mut all = coarse.clone();
        all.extend(grid(16.0, 64.0, 6, true).into_iter().map(slotted));
        all.sort_by(|a, b| a.level.total_cmp(&b.level));
        let knee = rule.knee(&all).unwrap();
        assert!((24.0..=48.0).contains(&knee), "knee {knee}");
    }

    #[test]
    fn exploding_latency_stops_scaling_even_with_throughput_gain() {
        let a = Point { level: 10.0, throughput: 100.0, p99_latency_ms: 50.0 };
        let b = Point { level: 20.0, throughput: 190.0, p99_latency_ms: 150.0 };
        assert!(!KneeRule::default().scales(&a, &b));
    }

    #[test]
    fn linear_scaling_has_no_knee() {
        let pts: Vec<Point> =
            [1.0, 2.0, 4.0, 8.0].map(|l| Point { level: l, throughput: l * 10.0, p99_latency_ms: 50.0 }).to_vec();
        assert_eq!(KneeRule::default().knee(&pts), None);
    }

    #[test]
    fn grids_are_strictly_inside_and_deduplicated() {
        assert_eq!(grid(16.0, 64.0, 5, true), vec![24.0, 32.0, 40.0, 48.0, 56.0]);
        assert_eq!(grid(1.0, 3.0, 6, true), vec![2.0]);
        assert_eq!(grid(1.0, 2.0, 1, false), vec![1.5]);
    }
}
