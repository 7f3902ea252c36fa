//! From merged per-request rows to `vllm bench serve`'s numbers: throughput over the
//! global timeline, goodput, peak concurrency and peak output rate, and the latency
//! distributions (TTFT, TPOT, ITL, E2EL), computed in seconds and reported in ms as
//! vLLM does, so a percentile recomputed from the saved per-request arrays is equal,
//! bit for bit, to the one in the summary.

use super::stats::{mean, percentile_sorted, sort, std_dev};
pub use crate::fleet::outcome::GlobalRow;
use crate::plan::Slo;
use std::collections::BTreeMap;
use surge_proto::ErrorKind;

/// A sorted sample of one metric, in seconds.
#[derive(Debug, Clone, Default)]
pub struct Dist(Vec<f64>);

impl Dist {
    pub fn new(mut values: Vec<f64>) -> Self {
        sort(&mut values);
        Self(values)
    }
    pub fn mean_ms(&self) -> f64 {
        mean(&self.0) * 1000.0
    }
    pub fn median_ms(&self) -> f64 {
        percentile_sorted(&self.0, 50.0) * 1000.0
    }
    pub fn std_ms(&self) -> f64 {
        std_dev(&self.0) * 1000.0
    }
    pub fn percentile_ms(&self, p: f64) -> f64 {
        percentile_sorted(&self.0, p) * 1000.0
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether a successful row met every objective of `slo`.
fn meets(slo: &Slo, r: &GlobalRow) -> bool {
    let ok = |limit: Option<f64>, v_s: f64| limit.is_none_or(|ms| v_s * 1000.0 <= ms);
    ok(slo.ttft_ms, r.ttft_s()) && ok(slo.tpot_ms, r.tpot_s().unwrap_or(0.0)) && ok(slo.e2el_ms, r.e2el_s())
}

/// Everything the summary and the result file report about one run.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub duration_s: f64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: f64,
    pub ttft: Dist,
    pub tpot: Dist,
    pub itl: Dist,
    pub e2el: Dist,
    /// Open loop: latency from the intended send time (includes client-side queueing).
    pub e2el_incl_queue: Option<Dist>,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub server_usage_rows: u64,
    /// Where the token counts of successful rows came from.
    pub token_sources: super::token_source::Tally,
}

impl Metrics {
    pub fn dist(&self, name: &str) -> &Dist {
        match name {
            "ttft" => &self.ttft,
            "tpot" => &self.tpot,
            "itl" => &self.itl,
            _ => &self.e2el,
        }
    }
}

/// The snake_case name of an error kind, as used in results.
pub fn kind_name(k: ErrorKind) -> String {
    k.as_str_name().trim_start_matches("ERROR_KIND_").to_ascii_lowercase()
}

/// Computes the metrics of `rows` (any order).
pub fn compute(rows: &[GlobalRow], slo: &Slo) -> Metrics {
    let mut m = Metrics::default();
    if rows.is_empty() {
        return m;
    }
    let first = rows.iter().map(|r| r.start_s).fold(f64::INFINITY, f64::min);
    let last = rows.iter().map(GlobalRow::end_s).fold(f64::NEG_INFINITY, f64::max);
    m.duration_s = (last - first).max(0.0);
    let (mut ttft, mut tpot, mut itl, mut e2el, mut queued) = (vec![], vec![], vec![], vec![], vec![]);
    let mut good = 0u64;
    for r in rows {
        if !r.ok() {
            m.failed += 1;
            *m.errors_by_kind.entry(kind_name(r.row.error())).or_default() += 1;
            continue;
        }
        m.completed += 1;
        m.total_input_tokens += u64::from(r.row.input_tokens);
        m.total_output_tokens += u64::from(r.row.output_tokens);
        m.server_usage_rows += u64::from(r.row.usage_from_server);
        m.token_sources.add(&r.row);
        ttft.push(r.ttft_s());
        e2el.push(r.e2el_s());
        if let Some(t) = r.tpot_s() {
            tpot.push(t);
        }
        itl.extend(r.row.itl_us.iter().map(|&g| f64::from(g) / 1e6));
        if let Some(i) = r.intended_s {
            queued.push(r.end_s() - i);
        }
        good += u64::from(!slo.is_empty() && meets(slo, r));
    }
    if m.duration_s > 0.0 {
        m.request_throughput = m.completed as f64 / m.duration_s;
        m.output_throughput = m.total_output_tokens as f64 / m.duration_s;
        m.total_token_throughput = (m.total_input_tokens + m.total_output_tokens) as f64 / m.duration_s;
        m.request_goodput = (!slo.is_empty()).then(|| good as f64 / m.duration_s);
    }
    m.max_concurrent_requests = peak_concurrency(rows);
    m.max_output_tokens_per_s = peak_output_rate(rows, first);
    m.ttft = Dist::new(ttft);
    m.tpot = Dist::new(tpot);
    m.itl = Dist::new(itl);
    m.e2el = Dist::new(e2el);
    m.e2el_incl_queue = (!queued.is_empty()).then(|| Dist::new(queued));
    m
}

/// Most requests in flight at any instant (ends sort before starts at equal times).
fn peak_concurrency(rows: &[GlobalRow]) -> f64 {
    let mut ev: Vec<(f64, i32)> = rows.iter().flat_map(|r| [(r.start_s, 1), (r.end_s(), -1)]).collect();
    ev.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut cur, mut peak) = (0i64, 0i64);
    for (_, d) in ev {
        cur += i64::from(d);
        peak = peak.max(cur);
    }
    peak as f64
}

/// Most output tokens received in any one-second bin of the run (bins from the first send).
fn peak_output_rate(rows: &[GlobalRow], first: f64) -> f64 {
    let mut bins: BTreeMap<i64, u64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.ok() && r.row.ttft_us > 0) {
        let mut t = r.start_s + r.ttft_s();
        *bins.entry((t - first).floor() as i64).or_default() += 1;
        for &g in &r.row.itl_us {
            t += f64::from(g) / 1e6;
            *bins.entry((t - first).floor() as i64).or_default() += 1;
        }
    }
    bins.values().copied().max().unwrap_or(0) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Row;

    fn row(start_s: f64, ttft_us: u32, latency_us: u32, out: u32, itl: Vec<u32>) -> GlobalRow {
        GlobalRow {
            agent: 0,
            start_s,
            intended_s: None,
            row: Row { ttft_us: ttft_us.into(), latency_us: latency_us.into(), output_tokens: out, input_tokens: 10, itl_us: itl, ..Default::default() },
        }
    }

    #[test]
    fn throughput_tpot_peaks_and_goodput() {
        let rows = vec![
            row(0.0, 100_000, 300_000, 3, vec![100_000, 100_000]),
            row(0.5, 50_000, 250_000, 5, vec![50_000; 4]),
            {
                let mut r = row(0.6, 0, 10_000, 0, vec![]);
                r.row.set_error(ErrorKind::HttpStatus);
                r
            },
        ];
        let slo = Slo { ttft_ms: Some(60.0), ..Default::default() };
        let m = compute(&rows, &slo);
        assert_eq!((m.completed, m.failed), (2, 1));
        assert_eq!(m.errors_by_kind["http_status"], 1);
        assert!((m.duration_s - 0.75).abs() < 1e-12);
        assert_eq!(m.total_output_tokens, 8);
        assert!((m.request_throughput - 2.0 / 0.75).abs() < 1e-9);
        assert!((m.request_goodput.unwrap() - 1.0 / 0.75).abs() < 1e-9);
        assert!((m.tpot.mean_ms() - 75.0).abs() < 1e-9); // (0.2/2 + 0.2/4) / 2 s
        assert_eq!(m.max_concurrent_requests, 2.0);
        assert_eq!(m.max_output_tokens_per_s, 8.0);
        assert_eq!(m.itl.len(), 6);
    }

    #[test]
    fn ends_before_starts_at_equal_times() {
        let rows = vec![row(0.0, 1, 1_000_000, 1, vec![]), row(1.0, 1, 1_000_000, 1, vec![])];
        assert_eq!(compute(&rows, &Slo::default()).max_concurrent_requests, 1.0);
    }
}
