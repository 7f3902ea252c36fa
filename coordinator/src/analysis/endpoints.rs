//! Several endpoints (D69), folded row by row from each row's `endpoint`: per endpoint,
//! the counts, errors by kind, tokens and TTFT/TPOT/ITL/E2EL distributions (exact within
//! the run's budget, merged from every agent's rows), the prefix cache's hit rate per
//! turn, and per time-series slice its completions, output tokens and TTFT; and which
//! endpoint is an outlier. Memory grows with endpoints and slices, never with requests.

use super::conversations::{MAX_TURN_METRICS, Turn};
use super::dist::MetricStats;
use super::fold::{Fold, Whole};
use super::grid::{Grid, Merge, Slices};
use crate::fleet::outcome::{GlobalRow, kind_name};
use std::collections::BTreeMap;

/// The outlier rule (D69): an endpoint whose p99 TTFT is above this many times the
/// median of the other endpoints' p99 TTFT, and at least [`OUTLIER_MIN_MS`] above it,
/// with at least [`OUTLIER_MIN_ROWS`] successes.
pub const OUTLIER_RATIO: f64 = 1.5;
pub const OUTLIER_MIN_MS: f64 = 5.0;
pub const OUTLIER_MIN_ROWS: u64 = 10;

/// A turn's prefix-cache counts on one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Hits {
    pub cached_tokens: u64,
    pub input_tokens: u64,
    pub rows: u64,
}

impl Hits {
    pub fn rate(&self) -> Option<f64> {
        (self.rows > 0 && self.input_tokens > 0).then(|| self.cached_tokens as f64 / self.input_tokens as f64)
    }
}

/// One time-series slice of one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sliced {
    pub completed: u64,
    pub failed: u64,
    pub output_tokens: u64,
    /// Successes with a first token (TTFT's sum and maximum are theirs).
    pub ttft_rows: u64,
    pub ttft_sum_s: f64,
    pub ttft_max_s: f64,
}

/// One endpoint's requests.
#[derive(Debug, Clone)]
pub struct EndpointStats {
    /// Completed and failed requests, their tokens and latency distributions.
    pub all: Turn,
    /// Requests the client cancelled (neither completed nor failed).
    pub cancelled: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Conversations: each turn's hits (turns past [`MAX_TURN_METRICS`] in the last).
    pub turns: Vec<Hits>,
    /// By time-series slice (its index), once the run is over.
    pub slices: BTreeMap<i64, Sliced>,
    /// TTFT, TPOT, ITL and E2EL at the run's percentiles (and 99), once the run is over:
    /// read one endpoint at a time, whose kept values then go, so the end of a run never
    /// holds every endpoint's values at once.
    pub latency: Vec<MetricStats>,
}

impl EndpointStats {
    fn new() -> Self {
        Self {
            all: Turn::new(),
            cancelled: 0,
            errors_by_kind: BTreeMap::new(),
            turns: Vec::new(),
            slices: BTreeMap::new(),
            latency: Vec::new(),
        }
    }
}

/// Every endpoint's stats, by index; the outliers marked.
#[derive(Debug, Clone, Default)]
pub struct EndpointsView {
    pub list: Vec<EndpointStats>,
    pub outliers: Vec<bool>,
    /// The slices' width (the time series'), seconds.
    pub slice_s: f64,
}

/// The fold of a run with several endpoints.
#[derive(Debug)]
pub struct EndpointsFold {
    view: EndpointsView,
    /// Each endpoint's slices while the run goes (on the time series' grid, D90).
    sliced: Vec<Slices<Sliced>>,
    /// The run's `--metric-percentiles` (99 is added for the outlier rule).
    percentiles: Vec<f64>,
}

impl EndpointsFold {
    pub fn new(endpoints: usize, grid: Grid, percentiles: Vec<f64>) -> Self {
        let list = (0..endpoints).map(|_| EndpointStats::new()).collect();
        let sliced = (0..endpoints).map(|_| Slices::new(grid.clone())).collect();
        Self { view: EndpointsView { list, outliers: Vec::new(), slice_s: grid.width_s() }, sliced, percentiles }
    }
}

impl Merge for Sliced {
    fn merge(&mut self, o: Self) {
        self.completed += o.completed;
        self.failed += o.failed;
        self.output_tokens += o.output_tokens;
        self.ttft_rows += o.ttft_rows;
        self.ttft_sum_s += o.ttft_sum_s;
        self.ttft_max_s = self.ttft_max_s.max(o.ttft_max_s);
    }
}

/// Which endpoints are outliers by the rule (D69), from their p99 TTFT (ms) and successes.
pub fn outliers(p99_ms: &[f64], rows: &[u64]) -> Vec<bool> {
    (0..p99_ms.len())
        .map(|i| {
            let mut others: Vec<f64> =
                (0..p99_ms.len()).filter(|&j| j != i && rows[j] >= OUTLIER_MIN_ROWS).map(|j| p99_ms[j]).collect();
            if others.is_empty() || rows[i] < OUTLIER_MIN_ROWS {
                return false;
            }
            others.sort_unstable_by(f64::total_cmp);
            let n = others.len();
            let median = if n % 2 == 1 { others[n / 2] } else { (others[n / 2 - 1] + others[n / 2]) / 2.0 };
            p99_ms[i] > OUTLIER_RATIO * median && p99_ms[i] - median >= OUTLIER_MIN_MS
        })
        .collect()
}

impl Fold for EndpointsFold {
    type Out = Option<EndpointsView>;

    fn row(&mut self, r: &GlobalRow) {
        if r.row.probe {
            return;
        }
        let (Some(e), Some(sliced)) =
            (self.view.list.get_mut(r.row.endpoint as usize), self.sliced.get_mut(r.row.endpoint as usize))
        else {
            return;
        };
        let kind = r.row.error();
        if kind == surge_proto::ErrorKind::Cancelled {
            e.cancelled += 1;
            return;
        }
        e.all.add(r);
        let slice = sliced.at(r.end_s());
        if !r.ok() {
            *e.errors_by_kind.entry(kind_name(kind)).or_default() += 1;
            slice.failed += 1;
            return;
        }
        slice.completed += 1;
        slice.output_tokens += u64::from(r.row.output_tokens);
        if let Some(t) = r.first_token_s() {
            slice.ttft_rows += 1;
            slice.ttft_sum_s += t;
            slice.ttft_max_s = slice.ttft_max_s.max(t);
        }
        if let (Some(_), Some(c)) = (r.row.session, r.row.cached_tokens) {
            let t = (r.row.turn as usize).min(MAX_TURN_METRICS - 1);
            if e.turns.len() <= t {
                e.turns.resize(t + 1, Hits::default());
            }
            let h = &mut e.turns[t];
            h.cached_tokens += u64::from(c);
            h.input_tokens += u64::from(r.row.input_tokens);
            h.rows += 1;
        }
    }

    fn drop_exact(&mut self) {
        self.view.list.iter_mut().for_each(|e| e.all.drop_exact());
    }

    fn finish(mut self, _run: &Whole) -> Self::Out {
        let mut ps = self.percentiles.clone();
        if !ps.contains(&99.0) {
            ps.push(99.0);
        }
        for (e, sliced) in self.view.list.iter_mut().zip(self.sliced) {
            (e.slices, self.view.slice_s) = sliced.finish();
            e.all.seal();
            e.latency = crate::plan::METRICS.iter().map(|k| MetricStats::of(k, e.all.dist(k), &ps)).collect();
            e.all.drop_exact();
        }
        let p99: Vec<f64> = self.view.list.iter().map(|e| e.latency[0].at(99.0).unwrap_or(0.0)).collect();
        let rows: Vec<u64> = self.view.list.iter().map(|e| e.all.completed).collect();
        self.view.outliers = outliers(&p99, &rows);
        Some(self.view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{ErrorKind, Row};

    fn row(endpoint: u32, ttft_ms: u64, error: ErrorKind) -> GlobalRow {
        let mut row =
            Row { endpoint, ttft_us: ttft_ms * 1000, latency_us: ttft_ms * 1000 + 10_000, ..Default::default() };
        row.output_tokens = 3;
        row.set_error(error);
        GlobalRow { agent: 0, start_s: 0.5, intended_s: None, row }
    }

    #[test]
    fn each_endpoint_has_its_own_counts_and_distribution() {
        let mut f = EndpointsFold::new(3, Grid::new(1.0), vec![50.0]);
        for k in 0..30 {
            f.row(&row(k % 3, 10 * u64::from(k % 3 + 1), ErrorKind::None));
        }
        f.row(&row(1, 0, ErrorKind::Timeout));
        f.row(&row(2, 0, ErrorKind::Cancelled));
        f.row(&row(7, 0, ErrorKind::None));
        let v = f.finish(&Whole::default()).expect("a view");
        let counts: Vec<(u64, u64)> = v.list.iter().map(|e| (e.all.completed, e.all.failed)).collect();
        assert_eq!(counts, [(10, 0), (10, 1), (10, 0)], "an unknown endpoint index is not counted");
        assert_eq!(v.list[2].cancelled, 1);
        assert_eq!(v.list[1].errors_by_kind.get("timeout"), Some(&1));
        let p99: Vec<f64> = v.list.iter().map(|e| e.latency[0].at(99.0).unwrap()).collect();
        assert_eq!(p99, [10.0, 20.0, 30.0]);
        assert!(v.list.iter().all(|e| !e.all.ttft.is_exact()), "each endpoint's values go once read");
        assert_eq!(v.list[0].slices.get(&0).map(|s| s.completed), Some(10), "ended at 0.52 s: slice 0");
    }

    /// Past MOST_SLICES slices each endpoint's slices widen with the time series': counts
    /// add, the TTFT's sum adds and its maximum is the larger.
    #[test]
    fn an_endpoints_slices_widen_with_the_grid() {
        let mut f = EndpointsFold::new(2, Grid::new(1.0), vec![50.0]);
        let seconds = super::super::grid::MOST_SLICES as u64 + 10;
        for k in 0..seconds * 2 {
            let mut r = row((k % 2) as u32, 10 + k % 4, ErrorKind::None);
            r.start_s = k as f64 * 0.5;
            f.row(&r);
        }
        let v = f.finish(&Whole::default()).expect("a view");
        assert_eq!(v.slice_s, 2.0);
        let s = &v.list[0].slices;
        assert_eq!(s.values().map(|x| x.completed).sum::<u64>(), seconds);
        assert!(s.len() as i64 <= super::super::grid::MOST_SLICES);
        // Slice 1 ([2, 4) s): endpoint 0's rows of 2 s (10 ms) and 3 s (12 ms), made in two
        // slices of 1 s; endpoint 1's of 2.5 s (11 ms) and 3.5 s (13 ms).
        let x = s[&1];
        assert_eq!((x.completed, x.ttft_rows, x.ttft_max_s), (2, 2, 0.012));
        assert!((x.ttft_sum_s - 0.022).abs() < 1e-12);
        let x = v.list[1].slices[&1];
        assert_eq!((x.completed, x.ttft_max_s), (2, 0.013));
    }

    #[test]
    fn the_outlier_rule_needs_both_the_ratio_and_the_margin() {
        assert_eq!(outliers(&[10.0, 20.0, 60.0], &[100; 3]), [false, false, true], "60 > 1.5 x 15");
        assert_eq!(outliers(&[1.0, 1.0, 2.0], &[100; 3]), [false; 3], "2x, but only 1 ms above");
        assert_eq!(outliers(&[20.0, 20.0, 29.0], &[100; 3]), [false; 3], "9 ms above, under 1.5x");
        assert_eq!(outliers(&[20.0, 20.0, 60.0], &[100, 100, 5]), [false; 3], "too few rows to judge");
        assert_eq!(outliers(&[20.0], &[100]), [false], "alone: nothing to compare with");
    }
}
