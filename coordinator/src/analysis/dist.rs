//! One distribution's statistics as a result reports them (mean, median, standard
//! deviation, percentiles, in ms), read from its [`Sample`] once the run is over.

use super::sample::Sample;

/// One metric's distribution, in ms.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricStats {
    /// `ttft`, `tpot`, `itl`, `e2el`, or one of vLLM's queue metrics.
    pub name: String,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub std_ms: f64,
    /// (percentile, value) in the order of `--metric-percentiles` (plus 99).
    pub percentiles: Vec<(f64, f64)>,
}

impl MetricStats {
    /// `name`'s statistics from its distribution `d`, at percentiles `ps`.
    pub fn of(name: &str, d: &Sample, ps: &[f64]) -> Self {
        Self {
            name: name.to_string(),
            mean_ms: d.mean_ms(),
            median_ms: d.median_ms(),
            std_ms: d.std_ms(),
            percentiles: ps.iter().map(|&p| (p, d.percentile_ms(p))).collect(),
        }
    }

    /// The value at percentile `p`, if the result has it.
    pub fn at(&self, p: f64) -> Option<f64> {
        self.percentiles.iter().find(|(q, _)| *q == p).map(|(_, v)| *v)
    }
}
