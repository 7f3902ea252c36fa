//! The server's own view of a level (D11), from its `/metrics` scrapes: counter
//! increases between the baseline (after the initial test requests, before the load) and
//! the last scrape (after the last request), gauges' mean and max over the level,
//! histogram percentiles from bucket increases, a per-family series on the time series'
//! slices (gauges: mean of the slice's scrapes; counters: increase per second), and the
//! cross-checks against the client's own numbers. Memory: two snapshots and one number
//! per family and slice, like the time series.

pub use super::fold::ClientSide;
use super::fold::{Fold, Whole};
use super::grid::{Grid, Merge, Slices};
use crate::target::scrape::ServerScrape;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use surge_core::scrape::{Histogram, Metric, Snapshot};

/// Generation-token counters, by serving stack (the first found is used).
const GENERATION_TOKENS: [&str; 3] =
    ["vllm:generation_tokens_total", "sglang:generation_tokens_total", "llamacpp:tokens_predicted_total"];
/// The server's TTFT histograms (seconds).
const SERVER_TTFT: [&str; 2] = ["vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"];
/// A mismatch of output tokens above this (percent) is flagged.
pub const MISMATCH_LIMIT_PCT: f64 = 1.0;

/// A gauge over the level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaugeStats {
    pub mean: f64,
    pub max: f64,
}

/// A histogram over the level, in the family's unit (vLLM's are seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HistogramStats {
    pub count: f64,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
}

/// The server's numbers against the client's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Checks {
    /// The family the server counts generated tokens in, and its increase.
    pub generation_tokens_metric: Option<String>,
    pub server_output_tokens: Option<f64>,
    pub client_output_tokens: u64,
    /// (server - client) / client, percent: other traffic on the server, or a miscount.
    pub output_tokens_mismatch_pct: Option<f64>,
    /// The server's own TTFT median against the client's: the difference is the network,
    /// the client and queueing outside the engine.
    pub server_ttft_p50_ms: Option<f64>,
    pub client_ttft_p50_ms: f64,
    pub ttft_p50_difference_ms: Option<f64>,
    /// The same with means: exact from the histogram's sum, where the p50 is only as fine
    /// as the server's buckets.
    pub server_ttft_mean_ms: Option<f64>,
    pub client_ttft_mean_ms: f64,
    pub ttft_mean_difference_ms: Option<f64>,
    /// What a user should look at.
    pub flagged: Vec<String>,
}

/// `server_metrics` in the result.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServerMetrics {
    pub scrapes: u64,
    pub failed_scrapes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Per family, one value per `time_series` slice (`null`: no scrape there).
    pub series: BTreeMap<String, Vec<Option<f64>>>,
    pub deltas: BTreeMap<String, f64>,
    pub gauges: BTreeMap<String, GaugeStats>,
    pub histograms: BTreeMap<String, HistogramStats>,
    pub checks: Checks,
}

/// One slice's values, by family index: (sum, n); two neighbours add place by place.
#[derive(Debug, Default)]
struct Sums(Vec<(f64, u32)>);

impl Merge for Sums {
    fn merge(&mut self, o: Self) {
        if self.0.len() < o.0.len() {
            self.0.resize(o.0.len(), (0.0, 0));
        }
        for (a, b) in self.0.iter_mut().zip(o.0) {
            (a.0, a.1) = (a.0 + b.0, a.1 + b.1);
        }
    }
}

/// `name`'s place among a slice's `values`, its name kept once in `families`.
fn slot<'a>(
    values: &'a mut Vec<(f64, u32)>,
    families: &mut Vec<String>,
    index: &mut BTreeMap<String, usize>,
    name: &str,
) -> &'a mut (f64, u32) {
    let k = match index.get(name) {
        Some(&k) => k,
        None => {
            families.push(name.to_string());
            index.insert(name.to_string(), families.len() - 1);
            families.len() - 1
        }
    };
    if values.len() <= k {
        values.resize(k + 1, (0.0, 0));
    }
    &mut values[k]
}

/// Scrapes folded as they arrive.
#[derive(Debug)]
pub struct ServerView {
    baseline: Option<Snapshot>,
    last: Option<Snapshot>,
    prev: Option<Snapshot>,
    gauges: BTreeMap<String, (f64, u64, f64)>,
    /// The families scraped, each name kept once; a slice refers to them by index.
    families: Vec<String>,
    family_index: BTreeMap<String, usize>,
    /// Per slice: per family, by index, (sum, n); counters sum their increases; n = 0: not
    /// in that slice. 16 bytes a family, where a map of names took about 100.
    slices: Slices<Sums>,
    scrapes: u64,
    failed: u64,
    last_error: Option<String>,
}

impl ServerView {
    pub fn new(grid: Grid) -> Self {
        Self {
            baseline: None,
            last: None,
            prev: None,
            gauges: BTreeMap::new(),
            families: Vec::new(),
            family_index: BTreeMap::new(),
            slices: Slices::new(grid),
            scrapes: 0,
            failed: 0,
            last_error: None,
        }
    }

    pub fn add(&mut self, s: &ServerScrape) {
        self.scrapes += 1;
        let snap = match &s.result {
            Ok(snap) => snap,
            Err(e) => {
                self.failed += 1;
                self.last_error = Some(e.clone());
                return;
            }
        };
        if s.baseline || self.baseline.is_none() {
            self.baseline = Some(snap.clone());
        }
        let entry = &mut self.slices.at(s.t_s).0;
        let (families, index) = (&mut self.families, &mut self.family_index);
        for (name, m) in snap {
            match m {
                Metric::Gauge(v) if !s.baseline => {
                    let g = self.gauges.entry(name.clone()).or_insert((0.0, 0, f64::NEG_INFINITY));
                    (g.0, g.1, g.2) = (g.0 + v, g.1 + 1, g.2.max(*v));
                    let e = slot(entry, families, index, name);
                    (e.0, e.1) = (e.0 + v, e.1 + 1);
                }
                Metric::Counter(v) => {
                    if let Some(Metric::Counter(p)) = self.prev.as_ref().and_then(|p| p.get(name)) {
                        // A counter that went down was reset: count from zero.
                        let inc = if v >= p { v - p } else { *v };
                        let e = slot(entry, families, index, name);
                        (e.0, e.1) = (e.0 + inc, e.1 + 1);
                    }
                }
                _ => {}
            }
        }
        self.prev = Some(snap.clone());
        self.last = Some(snap.clone());
    }

    /// The level's server view over `slices` time-series slices, checked against the
    /// client's output tokens and TTFT median; `None` when nothing was scraped.
    pub fn finish(self, slices: usize, client: ClientSide) -> Option<ServerMetrics> {
        if self.scrapes == 0 {
            return None;
        }
        let mut out = ServerMetrics {
            scrapes: self.scrapes,
            failed_scrapes: self.failed,
            last_error: self.last_error,
            ..Default::default()
        };
        let (slices_kept, width) = self.slices.finish();
        for (&i, Sums(values)) in &slices_kept {
            let Ok(i) = usize::try_from(i) else { continue };
            if i >= slices {
                continue;
            }
            let seen = values.iter().enumerate().filter(|(_, v)| v.1 > 0);
            for (name, &(sum, n)) in seen.map(|(k, v)| (&self.families[k], v)) {
                let counter = matches!(self.last.as_ref().and_then(|l| l.get(name)), Some(Metric::Counter(_)));
                let v = if counter { sum / width } else { sum / f64::from(n.max(1)) };
                out.series.entry(name.clone()).or_insert_with(|| vec![None; slices])[i] = Some(v);
            }
        }
        out.gauges = self
            .gauges
            .into_iter()
            .map(|(k, (sum, n, max))| (k, GaugeStats { mean: sum / n.max(1) as f64, max }))
            .collect();
        // A window needs two scrapes that answered.
        let window = self.scrapes - self.failed >= 2;
        if let (Some(base), Some(last), true) = (&self.baseline, &self.last, window) {
            for (name, m) in last {
                match (base.get(name), m) {
                    (Some(Metric::Counter(b)), Metric::Counter(l)) => {
                        out.deltas.insert(name.clone(), if l >= b { l - b } else { *l });
                    }
                    (None, Metric::Counter(l)) => {
                        out.deltas.insert(name.clone(), *l);
                    }
                    (b, Metric::Histogram(l)) => {
                        let d = match b {
                            Some(Metric::Histogram(b)) => delta(b, l),
                            _ => l.clone(),
                        };
                        if d.count > 0.0 {
                            out.histograms.insert(name.clone(), stats(&d));
                        }
                    }
                    _ => {}
                }
            }
        }
        out.checks = checks(&out, client);
        Some(out)
    }
}

/// `last - base`, bucket by bucket (a reset histogram counts from zero).
fn delta(base: &Histogram, last: &Histogram) -> Histogram {
    if last.count < base.count {
        return last.clone();
    }
    let before = |le: f64| base.buckets.iter().find(|(b, _)| *b == le).map_or(0.0, |(_, c)| *c);
    Histogram {
        buckets: last.buckets.iter().map(|&(le, c)| (le, (c - before(le)).max(0.0))).collect(),
        count: last.count - base.count,
        sum: last.sum - base.sum,
    }
}

/// Prometheus' `histogram_quantile`: linear within the bucket that holds the rank; the
/// highest finite bound when it falls in `+Inf`.
fn quantile(h: &Histogram, q: f64) -> f64 {
    let total = h.buckets.last().map_or(0.0, |b| b.1);
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, c) in &h.buckets {
        if c >= rank {
            if le.is_infinite() {
                return lower.0;
            }
            let in_bucket = c - lower.1;
            return if in_bucket > 0.0 { lower.0 + (le - lower.0) * (rank - lower.1) / in_bucket } else { le };
        }
        lower = (le, c);
    }
    lower.0
}

/// The server's own view (D11): its metrics scraped over the run, checked against the
/// client's numbers.
impl Fold for ServerView {
    type Out = Option<ServerMetrics>;
    fn server(&mut self, s: &ServerScrape) {
        self.add(s);
    }
    fn finish(self, run: &Whole) -> Self::Out {
        ServerView::finish(self, run.slices, run.client)
    }
}

fn stats(h: &Histogram) -> HistogramStats {
    HistogramStats { count: h.count, mean: h.sum / h.count, p50: quantile(h, 0.5), p99: quantile(h, 0.99) }
}

fn checks(s: &ServerMetrics, client: ClientSide) -> Checks {
    let client_output_tokens = client.output_tokens;
    let mut c = Checks {
        client_output_tokens,
        client_ttft_p50_ms: client.ttft_p50_ms,
        client_ttft_mean_ms: client.ttft_mean_ms,
        ..Default::default()
    };
    if let Some((name, v)) = GENERATION_TOKENS.iter().find_map(|n| s.deltas.get(*n).map(|v| (*n, *v))) {
        c.generation_tokens_metric = Some(name.to_string());
        c.server_output_tokens = Some(v);
        if client_output_tokens > 0 {
            let pct = 100.0 * (v - client_output_tokens as f64) / client_output_tokens as f64;
            c.output_tokens_mismatch_pct = Some(pct);
            if pct.abs() > MISMATCH_LIMIT_PCT {
                c.flagged.push(format!(
                    "the server generated {v:.0} tokens ({name}) where the client counted {client_output_tokens} \
                     ({pct:+.1}%): other traffic on the server, or a client miscount"
                ));
            }
        }
    }
    if let Some(h) = SERVER_TTFT.iter().find_map(|n| s.histograms.get(*n)) {
        let server = h.p50 * 1000.0;
        c.server_ttft_p50_ms = Some(server);
        c.ttft_p50_difference_ms = Some(client.ttft_p50_ms - server);
        c.server_ttft_mean_ms = Some(h.mean * 1000.0);
        c.ttft_mean_difference_ms = Some(client.ttft_mean_ms - h.mean * 1000.0);
    }
    if s.failed_scrapes > 0 {
        c.flagged.push(format!(
            "{} of {} scrapes of the server's metrics failed{}",
            s.failed_scrapes,
            s.scrapes,
            s.last_error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
        ));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(tokens: f64, running: f64, ttft: &[(f64, f64)]) -> Snapshot {
        let mut s = Snapshot::new();
        s.insert("vllm:generation_tokens_total".into(), Metric::Counter(tokens));
        s.insert("vllm:num_requests_running".into(), Metric::Gauge(running));
        let count = ttft.last().map_or(0.0, |b| b.1);
        s.insert(
            "vllm:time_to_first_token_seconds".into(),
            Metric::Histogram(Histogram { buckets: ttft.to_vec(), count, sum: count * 0.03 }),
        );
        s
    }

    fn at(t_s: f64, s: Snapshot, baseline: bool, last: bool) -> ServerScrape {
        ServerScrape { t_s, result: Ok(s), baseline, last }
    }

    #[test]
    fn deltas_gauges_series_histograms_and_checks() {
        let inf = f64::INFINITY;
        let mut v = ServerView::new(Grid::new(1.0));
        // Before the load: 100 tokens from the initial test, 1 request in the histogram.
        v.add(&at(-0.1, snap(100.0, 0.0, &[(0.02, 0.0), (0.04, 1.0), (inf, 1.0)]), true, false));
        v.add(&at(0.5, snap(600.0, 4.0, &[(0.02, 0.0), (0.04, 5.0), (inf, 5.0)]), false, false));
        v.add(&at(1.5, snap(1100.0, 2.0, &[(0.02, 0.0), (0.04, 9.0), (inf, 11.0)]), false, false));
        v.add(&ServerScrape { t_s: 2.0, result: Err("timed out".into()), baseline: false, last: false });
        v.add(&at(2.2, snap(1100.0, 0.0, &[(0.02, 0.0), (0.04, 9.0), (inf, 11.0)]), false, true));
        let s = v.finish(3, ClientSide { output_tokens: 1000, ttft_p50_ms: 35.0, ttft_mean_ms: 34.0 }).unwrap();
        assert_eq!(s.deltas["vllm:generation_tokens_total"], 1000.0);
        assert_eq!(s.gauges["vllm:num_requests_running"], GaugeStats { mean: 2.0, max: 4.0 });
        assert_eq!(s.series["vllm:generation_tokens_total"], vec![Some(500.0), Some(500.0), Some(0.0)]);
        assert_eq!(s.series["vllm:num_requests_running"], vec![Some(4.0), Some(2.0), Some(0.0)]);
        let h = s.histograms["vllm:time_to_first_token_seconds"];
        // 10 requests over the level: 8 in (0.02, 0.04], 2 above.
        assert_eq!(h.count, 10.0);
        assert!((h.p50 - 0.0325).abs() < 1e-12, "{}", h.p50);
        assert_eq!(h.p99, 0.04, "in +Inf: the highest finite bound");
        assert_eq!(s.checks.output_tokens_mismatch_pct, Some(0.0));
        assert_eq!(s.checks.server_ttft_p50_ms, Some(32.5));
        assert!((s.checks.ttft_mean_difference_ms.unwrap() - 4.0).abs() < 1e-9, "mean 30 ms from the sum");
        assert_eq!((s.scrapes, s.failed_scrapes), (5, 1));
        assert_eq!(s.checks.flagged.len(), 1, "the failed scrape: {:?}", s.checks.flagged);
    }

    /// A family that appears in some slices only is `null` in the others, whether or not a
    /// family named after it is scraped there; over many scrapes each name is kept once.
    #[test]
    fn a_family_absent_from_a_slice_is_null_there_and_names_are_kept_once() {
        let mut v = ServerView::new(Grid::new(1.0));
        for k in 0..1000u32 {
            let mut s = Snapshot::new();
            if (k / 100) % 2 == 0 {
                s.insert("a".into(), Metric::Gauge(1.0));
            }
            s.insert("b".into(), Metric::Gauge(f64::from(k % 3)));
            v.add(&at(f64::from(k) / 100.0, s, false, false));
        }
        assert_eq!(v.families, ["a", "b"]);
        let s = v.finish(10, ClientSide::default()).unwrap();
        assert_eq!(s.series["a"], [Some(1.0), None].repeat(5), "every other second");
        assert_eq!(s.series["b"].len(), 10);
        assert!(s.series["b"].iter().all(|x| x.is_some_and(|m| (m - 1.0).abs() < 0.011)), "{:?}", s.series["b"]);
    }

    /// Scraped past MOST_SLICES slices of 1 s, the view ends as one planned at 2 s: a
    /// counter's increase per second and a gauge's mean over each merged slice.
    #[test]
    fn a_view_widened_past_the_bound_equals_one_planned_wide() {
        let seconds = super::super::grid::MOST_SLICES as u32 + 500;
        let view = |base: f64| {
            let mut v = ServerView::new(Grid::new(base));
            for k in 0..seconds * 2 {
                let mut s = Snapshot::new();
                s.insert("tokens".into(), Metric::Counter(f64::from(k * (k % 5))));
                s.insert("running".into(), Metric::Gauge(f64::from(k % 7)));
                v.add(&at(f64::from(k) / 2.0, s, k == 0, false));
            }
            v.finish(seconds as usize / 2, ClientSide::default()).unwrap()
        };
        let (narrow, wide) = (view(1.0), view(2.0));
        assert_eq!(narrow.series["tokens"].len(), seconds as usize / 2);
        assert_eq!(narrow, wide);
        assert_eq!(narrow.series["running"][1], Some(3.75), "k = 4..8: 4, 5, 6, 0");
    }

    #[test]
    fn other_traffic_is_flagged_and_a_reset_counter_counts_from_zero() {
        let mut v = ServerView::new(Grid::new(1.0));
        v.add(&at(0.0, snap(5000.0, 0.0, &[]), true, false));
        v.add(&at(1.0, snap(300.0, 0.0, &[]), false, true));
        let s = v.finish(2, ClientSide { output_tokens: 250, ..Default::default() }).unwrap();
        assert_eq!(s.deltas["vllm:generation_tokens_total"], 300.0);
        assert_eq!(s.checks.output_tokens_mismatch_pct, Some(20.0));
        assert!(s.checks.flagged[0].contains("other traffic"), "{:?}", s.checks.flagged);
        assert!(ServerView::new(Grid::new(1.0)).finish(2, ClientSide::default()).is_none());
    }
}
