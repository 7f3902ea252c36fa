//! Two benchmarks side by side (`surge compare`): per level and metric, the relative change of a
//! candidate against a base, Welch's t-test where both sides have at least two runs, and
//! the `--fail-if` rules a CI pipeline gates on.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// `METRIC>+10%` (breached when the change is above +10 %) or `METRIC<-5%` (below -5 %).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub metric: String,
    /// `>`: breached above `pct`; `<`: below it.
    pub above: bool,
    pub pct: f64,
    pub text: String,
}

/// Parses one `--fail-if` rule.
pub fn parse_rule(s: &str) -> Result<Rule, String> {
    let bad = || format!("--fail-if {s:?}: expected METRIC>+N% or METRIC<-N% (e.g. 'median_ttft_ms>+10%')");
    let (at, above) = match (s.find('>'), s.find('<')) {
        (Some(i), None) => (i, true),
        (None, Some(i)) => (i, false),
        _ => return Err(bad()),
    };
    let metric = s[..at].trim();
    let pct = s[at + 1..].trim().strip_suffix('%').ok_or_else(bad)?;
    let pct: f64 = pct.parse().map_err(|_| bad())?;
    if metric.is_empty() || !pct.is_finite() {
        return Err(bad());
    }
    Ok(Rule { metric: metric.into(), above, pct, text: s.trim().into() })
}

impl Rule {
    /// Whether a relative change (percent) breaches the rule.
    pub fn breached(&self, change_pct: f64) -> bool {
        if self.above { change_pct > self.pct } else { change_pct < self.pct }
    }
}

/// One line of a comparison: a candidate's metric at one level.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub candidate: String,
    pub level: String,
    pub metric: String,
    pub c: Compared,
}

/// One metric at one level: the runs' values on each side.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    pub base_mean: f64,
    pub candidate_mean: f64,
    /// (candidate - base) / base, percent; `None` when the base is 0.
    pub change_pct: Option<f64>,
    /// Welch's two-sided p-value, with at least two runs on each side.
    pub p_value: Option<f64>,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn variance(v: &[f64]) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len().saturating_sub(1)).max(1) as f64
}

/// Welch's t-test of two samples: the two-sided p-value (`None` with fewer than two
/// values on a side; 1 when neither varies and the means agree, 0 when they differ).
pub fn welch(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (va, vb) = (variance(a) / a.len() as f64, variance(b) / b.len() as f64);
    let diff = mean(a) - mean(b);
    if va + vb == 0.0 {
        return Some(if diff == 0.0 { 1.0 } else { 0.0 });
    }
    let t = diff / (va + vb).sqrt();
    let df = (va + vb).powi(2) / (va * va / (a.len() - 1) as f64 + vb * vb / (b.len() - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(2.0 * (1.0 - dist.cdf(t.abs())))
}

/// One metric compared.
pub fn compare(base: &[f64], candidate: &[f64]) -> Compared {
    let (b, c) = (mean(base), mean(candidate));
    Compared {
        base_mean: b,
        candidate_mean: c,
        change_pct: (b != 0.0).then(|| 100.0 * (c - b) / b.abs()),
        p_value: welch(base, candidate),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_breach() {
        let r = parse_rule("median_ttft_ms>+50%").unwrap();
        assert_eq!((r.metric.as_str(), r.above, r.pct), ("median_ttft_ms", true, 50.0));
        assert!(r.breached(50.1) && !r.breached(50.0));
        let r = parse_rule("output_throughput<-5%").unwrap();
        assert!(r.breached(-5.5) && !r.breached(-4.0));
        for bad in ["", "x", "x>10", "x>+a%", ">+5%", "x>5%<"] {
            assert!(parse_rule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn welch_matches_a_known_value() {
        // Two samples whose Welch t is 2.0 with 2 and 2 values of variance 1 and 1:
        // df = 2, two-sided p = 0.1835 (t tables).
        let a = [0.0, 1.0 * std::f64::consts::SQRT_2];
        let b = [2.0, 2.0 + std::f64::consts::SQRT_2];
        let p = welch(&b, &a).unwrap();
        assert!((p - 0.18350341907227397).abs() < 1e-9, "{p}");
        assert_eq!(welch(&[1.0], &[2.0, 3.0]), None);
        assert_eq!(welch(&[1.0, 1.0], &[1.0, 1.0]), Some(1.0));
        let c = compare(&[10.0, 10.0], &[20.0, 20.0]);
        assert_eq!((c.change_pct, c.p_value), (Some(100.0), Some(0.0)));
    }
}
