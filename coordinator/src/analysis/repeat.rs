//! Statistics across repeated runs of one level: mean, sample standard deviation
//! (n - 1), the 95% confidence interval of the mean from Student's t-distribution with
//! n - 1 degrees of freedom, and the coefficient of variation.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Summary of n observations of one quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub std: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    /// std / mean (0 when the mean is 0).
    pub cv: f64,
}

/// The two-sided 95% critical value of Student's t with `df` degrees of freedom.
pub fn t_critical_95(df: usize) -> f64 {
    match StudentsT::new(0.0, 1.0, df as f64) {
        Ok(t) => t.inverse_cdf(0.975),
        Err(_) => f64::NAN,
    }
}

/// Summarizes `values`; with one value the interval collapses to it and std is 0.
pub fn summarize(values: &[f64]) -> Summary {
    let n = values.len();
    if n == 0 {
        return Summary { n, mean: 0.0, std: 0.0, ci95_low: 0.0, ci95_high: 0.0, cv: 0.0 };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return Summary { n, mean, std: 0.0, ci95_low: mean, ci95_high: mean, cv: 0.0 };
    }
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
    let std = var.sqrt();
    let half = t_critical_95(n - 1) * std / (n as f64).sqrt();
    let cv = if mean != 0.0 { std / mean } else { 0.0 };
    Summary { n, mean, std, ci95_low: mean - half, ci95_high: mean + half, cv }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two-sided 95% critical values of Student's t, df = 1..30, from the standard
    /// printed tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];

    #[test]
    fn t_critical_values_match_the_table() {
        for (i, want) in TABLE.iter().enumerate() {
            let got = t_critical_95(i + 1);
            assert!((got - want).abs() < 0.0006, "df {}: {got} vs {want}", i + 1);
        }
    }

    #[test]
    fn ci_of_a_fixed_sample() {
        // x = [10, 12, 11, 13, 9]: mean 11, sample std sqrt(2.5) = 1.5811,
        // half-width 2.776 * 1.5811 / sqrt(5) = 1.9632 (scipy.stats.t.interval(0.95, 4, 11, sem)).
        let s = summarize(&[10.0, 12.0, 11.0, 13.0, 9.0]);
        assert_eq!(s.n, 5);
        assert!((s.mean - 11.0).abs() < 1e-12);
        assert!((s.std - 2.5f64.sqrt()).abs() < 1e-12);
        assert!((s.ci95_low - (11.0 - 1.963_243)).abs() < 1e-5, "{}", s.ci95_low);
        assert!((s.ci95_high - (11.0 + 1.963_243)).abs() < 1e-5, "{}", s.ci95_high);
        assert!((s.cv - 2.5f64.sqrt() / 11.0).abs() < 1e-12);
    }

    #[test]
    fn degenerate_samples() {
        let one = summarize(&[4.0]);
        assert_eq!((one.mean, one.std, one.ci95_low, one.ci95_high), (4.0, 0.0, 4.0, 4.0));
        assert_eq!(summarize(&[]).n, 0);
        assert_eq!(summarize(&[0.0, 0.0]).cv, 0.0);
    }
}
