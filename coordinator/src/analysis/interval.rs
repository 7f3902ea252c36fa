//! A percentile judged with its interval (D47): the distribution-free confidence interval
//! of a quantile from order statistics. Of `n` values, the number `B` below the true
//! `p`-quantile is Binomial(n, p) whatever the distribution; the `l`-th smallest value is
//! at most the quantile when `B >= l`, the `u`-th is above it when `B <= u - 1`, so
//! `[x(l), x(u)]` covers it with probability `F(u - 1) - F(l - 1)` (F the binomial CDF).
//! `l` is the largest rank with `F(l - 1) <= a/2`, `u` the smallest with
//! `F(u - 1) >= 1 - a/2`: at least `1 - a` together, each side wrong at most `a/2`.
//! MLPerf LoadGen's early-stopping rule rests on the same binomial bound on ranks.
//! A side with no such rank is open: too few values to bound it.

use statrs::distribution::{Beta, Binomial, ContinuousCDF, DiscreteCDF};

/// The ranks (1-based, of the sorted values) that bound a quantile; `None`: no bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranks {
    pub lower: Option<u64>,
    pub upper: Option<u64>,
}

/// The ranks bounding the `p`-quantile (0 < p < 1) of `n` values at `confidence`.
pub fn ranks(n: u64, p: f64, confidence: f64) -> Ranks {
    if n == 0 {
        return Ranks { lower: None, upper: None };
    }
    let tail = (1.0 - confidence) / 2.0;
    let b = Binomial::new(p, n).expect("0 < p < 1");
    // F(k) grows with k: the largest l with F(l-1) <= tail, the smallest u with F(u-1) >= 1-tail.
    let lower = {
        let (mut lo, mut hi) = (0u64, n); // F(lo-1) <= tail holds for lo = 0 (F(-1) = 0)
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if b.cdf(mid - 1) <= tail { lo = mid } else { hi = mid - 1 }
        }
        (lo >= 1).then_some(lo)
    };
    let upper = if b.cdf(n - 1) < 1.0 - tail {
        None
    } else {
        let (mut lo, mut hi) = (1u64, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if b.cdf(mid - 1) >= 1.0 - tail { hi = mid } else { lo = mid + 1 }
        }
        Some(lo)
    };
    Ranks { lower, upper }
}

/// A percentile's point estimate and its interval, in the values' unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub n: u64,
    pub estimate: f64,
    /// `None`: too few values for a lower bound.
    pub low: Option<f64>,
    /// `None`: too few values for an upper bound.
    pub high: Option<f64>,
}

impl Interval {
    /// The bounds' width relative to the estimate; infinite while a side is open.
    pub fn relative_width(&self) -> f64 {
        match (self.low, self.high) {
            (Some(l), Some(h)) if self.estimate > 0.0 => (h - l) / self.estimate,
            (Some(l), Some(h)) if h == l => 0.0,
            _ => f64::INFINITY,
        }
    }
}

/// The `pct` percentile (0-100) of `sorted` (ascending) with its interval at `confidence`;
/// the estimate is numpy's linear interpolation, as vLLM reports percentiles.
pub fn percentile(sorted: &[f64], pct: f64, confidence: f64) -> Interval {
    let n = sorted.len() as u64;
    let estimate = super::stats::percentile_sorted(sorted, pct);
    let r = ranks(n, pct / 100.0, confidence);
    let at = |k: u64| sorted[(k - 1) as usize];
    Interval { n, estimate, low: r.lower.map(at), high: r.upper.map(at) }
}

/// The fewest values for which the `pct` percentile has an upper bound at `confidence`
/// (a level can pass only from there): the smallest n with `1 - p^n >= 1 - a/2`.
pub fn values_for_upper_bound(pct: f64, confidence: f64) -> u64 {
    let p = pct / 100.0;
    let tail = (1.0 - confidence) / 2.0;
    (tail.ln() / p.ln()).ceil().max(1.0) as u64
}

/// A proportion's Clopper-Pearson interval at `confidence`: `k` successes of `n`.
pub fn proportion(k: u64, n: u64, confidence: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let tail = (1.0 - confidence) / 2.0;
    let (k, nf) = (k as f64, n as f64);
    let low = if k == 0.0 { 0.0 } else { Beta::new(k, nf - k + 1.0).expect("shape").inverse_cdf(tail) };
    let high = if k == nf { 1.0 } else { Beta::new(k + 1.0, nf - k).expect("shape").inverse_cdf(1.0 - tail) };
    (low, high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The interval covers the true quantile at least as often as it says: 2,000 sample
    /// sets of an exponential distribution (true p-quantile -ln(1-p)), for p50, p90, p99,
    /// at n = 100 and n = 10,000; coverage at least 94 % at 95 % confidence.
    #[test]
    fn the_interval_covers_the_true_quantile_at_its_confidence() {
        let mut rng = StdRng::seed_from_u64(7);
        for n in [100usize, 10_000] {
            for pct in [50.0, 90.0, 99.0] {
                let truth = -(1.0f64 - pct / 100.0).ln();
                let sets = 2_000;
                let mut covered = 0;
                let mut values = vec![0.0f64; n];
                for _ in 0..sets {
                    for v in values.iter_mut() {
                        *v = -(1.0 - rng.random::<f64>()).ln();
                    }
                    values.sort_unstable_by(f64::total_cmp);
                    let i = percentile(&values, pct, 0.95);
                    let ok = i.low.is_none_or(|l| l <= truth) && i.high.is_none_or(|h| h >= truth);
                    covered += usize::from(ok);
                }
                let share = covered as f64 / sets as f64;
                assert!(share >= 0.94, "n {n} p{pct}: covered {share}");
            }
        }
    }

    /// The ranks are the binomial bounds: p50 of 100 values is bounded by ranks 40 and 61
    /// (the textbook table), p99 of 100 has no upper bound, of 1,000 it has one.
    #[test]
    fn ranks_match_the_binomial_table() {
        assert_eq!(ranks(100, 0.5, 0.95), Ranks { lower: Some(40), upper: Some(61) });
        assert_eq!(ranks(100, 0.99, 0.95).upper, None);
        let r = ranks(1_000, 0.99, 0.95);
        assert!(r.lower.is_some_and(|l| (980..990).contains(&l)), "{r:?}");
        assert!(r.upper.is_some_and(|u| (991..=1000).contains(&u)), "{r:?}");
        assert_eq!(ranks(0, 0.5, 0.95), Ranks { lower: None, upper: None });
    }

    #[test]
    fn the_fewest_values_for_an_upper_bound() {
        let n = values_for_upper_bound(99.0, 0.95);
        assert_eq!(n, 368);
        assert!(ranks(n, 0.99, 0.95).upper.is_some());
        assert!(ranks(n - 1, 0.99, 0.95).upper.is_none());
    }

    #[test]
    fn a_proportions_interval() {
        let (l, h) = proportion(90, 100, 0.95);
        assert!((0.82..0.83).contains(&l) && (0.94..0.96).contains(&h), "{l} {h}");
        assert_eq!(proportion(0, 10, 0.95).0, 0.0);
        assert_eq!(proportion(10, 10, 0.95).1, 1.0);
    }
}
