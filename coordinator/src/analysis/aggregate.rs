//! From merged per-request rows to [`Metrics`], folded row by row as rows arrive
//! ([`Aggregator`]): the core (throughput over the global timeline, goodput, peak
//! concurrency and peak output rate, the latency distributions TTFT, TPOT, ITL and E2EL,
//! computed in seconds and reported in ms as vLLM does, errors by kind, the time series)
//! here; every other part of the analysis is a registered fold ([`super::folds`]), fed
//! the same rows and scrapes and put in the metrics at the end.

use super::active::ActiveSeconds;
use super::coalesce::Coalescing;
use super::fold::{ClientSide, Whole};
use super::folds::{Folds, Wanted};
use super::grid::Grid;
use super::metrics::{EXACT_SAMPLES, EXAMPLES_PER_KIND, ErrorSeen, Metrics, TRACKED_MESSAGES};
use super::sample::Sample;
use super::seconds::{Largest, Seconds};
use super::spilled::Spilled;
use super::timeseries::TimeSeries;
pub use crate::fleet::outcome::{GlobalRow, kind_name};
use crate::plan::{RunPlan, Slo};
use crate::target::gpu::GpuScrape;
use crate::target::scrape::ServerScrape;
use surge_core::data::share::Stripe;

/// Whether a successful row met every objective of `slo` (vLLM's goodput, and surge's
/// `ttfo`: the first answer token, the first token for a reply that did not reason). A
/// reply with no token meets no time-to-token objective.
pub fn meets(slo: &Slo, r: &GlobalRow) -> bool {
    let ok = |limit: Option<f64>, v_s: f64| limit.is_none_or(|ms| v_s * 1000.0 <= ms);
    let first = r.first_token_s().unwrap_or(f64::INFINITY);
    let ttfo = r.row.ttfo_us.map_or(first, |t| t as f64 / 1e6);
    ok(slo.ttft_ms, first)
        && ok(slo.tpot_ms, r.tpot_s().unwrap_or(0.0))
        && ok(slo.e2el_ms, r.e2el_s())
        && ok(slo.ttfo_ms, ttfo)
}

/// Folds rows into [`Metrics`] as they arrive, in memory that does not grow with the run
/// (beyond the exact budget, the per-second peak bins; the time series' slices are
/// bounded by D90).
#[derive(Debug)]
pub struct Aggregator {
    m: Metrics,
    slo: Slo,
    good: u64,
    samples: u64,
    /// The exact budget (D23): past it, every exact record goes.
    budget: u64,
    first: f64,
    last: f64,
    queued: Sample,
    /// Successful requests' client queue time: send minus arrival (the intended send in an
    /// open loop; the start when every request arrives at once, as vLLM's).
    client_queue: Sample,
    /// vLLM's `max_concurrent_requests` (successful requests per one-second bucket).
    active: ActiveSeconds,
    /// Every request's start and end while exact.
    events: Option<(Spilled<f64>, Spilled<f64>)>,
    /// Output tokens per second of the run's timeline.
    token_bins: Seconds<Largest>,
    keep_rows: bool,
    series: TimeSeries,
    /// Every other part of the analysis.
    folds: Folds,
}

impl Aggregator {
    /// `keep_rows`: keep every row for the detailed arrays; `wanted`: the optional folds and
    /// the time series' slice.
    pub fn new(slo: Slo, keep_rows: bool, wanted: Wanted) -> Self {
        let grid = Grid::new(wanted.slice_s);
        Self {
            m: Metrics::default(),
            slo,
            good: 0,
            samples: 0,
            budget: EXACT_SAMPLES,
            first: f64::INFINITY,
            last: f64::NEG_INFINITY,
            queued: Sample::new(),
            client_queue: Sample::new(),
            active: ActiveSeconds::new(),
            events: Some((Spilled::new(), Spilled::new())),
            token_bins: Seconds::default(),
            keep_rows,
            series: TimeSeries::new(grid.clone()),
            folds: Folds::registered(wanted, &grid),
        }
    }

    /// What a run plan asks of the folds: steady state when looked for, a ramp's events,
    /// agent loops, several endpoints, replicas.
    pub fn wanted(plan: &RunPlan) -> Wanted {
        let over_s = plan.duration.filter(|_| plan.num_prompts == crate::plan::UNBOUNDED).map(|d| d.as_secs_f64());
        Wanted {
            slice_s: plan.timeslice.as_secs_f64(),
            steady: plan.steady_plan().map(|p| (p, plan.metric_percentiles.clone())),
            ramp: plan.ramp.map(|r| (r, over_s)),
            agent_loop: plan.multi_turn.as_ref().is_some_and(|m| m.tool_loop.is_some()),
            endpoints: if plan.endpoints.several() { plan.endpoints.list.len() } else { 0 },
            percentiles: plan.metric_percentiles.clone(),
            replicas: plan.endpoints.replica_header.is_some(),
        }
    }

    /// The agents' shares: (their global indices, how many).
    pub fn started(&mut self, slices: &[(Stripe, u64)]) {
        self.folds.started(slices);
    }

    /// One finished request.
    pub fn add(&mut self, r: &GlobalRow) {
        self.folds.row(r);
        let m = &mut self.m;
        self.first = self.first.min(r.start_s);
        self.last = self.last.max(r.end_s());
        m.sends.add(r.start_s);
        if let Some(i) = r.intended_s {
            m.intended.add(i);
        }
        if let Some((starts, ends)) = &mut self.events {
            starts.push(r.start_s);
            ends.push(r.end_s());
            // Two events weigh about one sample each in the budget.
            self.samples += 2;
        }
        if r.ok() && self.events.is_some() {
            self.samples += 1;
        }
        if r.ok() {
            self.active.add(r.start_s, r.end_s());
        }
        let coalescing = if r.ok() { Coalescing::of_row(&r.row) } else { None };
        self.series.add(r, coalescing.as_ref());
        if self.keep_rows {
            m.rows.push(r.clone());
        }
        if r.row.error() == surge_proto::ErrorKind::Cancelled {
            m.cancelled += 1;
        } else if !r.ok() {
            failure(m, r);
        } else {
            self.success(r, coalescing);
        }
        // Every row weighs in the budget, a failure's events too (a target that only
        // fails would otherwise keep them for the whole run).
        if self.samples > self.budget && self.events.is_some() {
            self.drop_exact();
        }
    }

    /// A successful request's counts and latencies.
    fn success(&mut self, r: &GlobalRow, coalescing: Option<Coalescing>) {
        let m = &mut self.m;
        m.completed += 1;
        m.total_input_tokens += u64::from(r.row.input_tokens);
        m.total_output_tokens += u64::from(r.row.output_tokens);
        m.total_input_sequences += u64::from(r.row.input_sequences);
        m.total_audio_s += r.row.input_audio_s;
        m.server_usage_rows += u64::from(r.row.usage_from_server);
        m.token_sources.add(&r.row);
        if let Some(t) = r.first_token_s() {
            m.ttft.add(t);
            self.samples += 1;
        }
        m.e2el.add(r.e2el_s());
        self.samples += 1;
        if let Some(t) = r.tpot_s() {
            m.tpot.add(t);
            self.samples += 1;
        }
        for g in r.row.gaps() {
            m.itl.add(f64::from(g) / 1e6);
        }
        if let Some(c) = coalescing {
            if m.coalesced.len() <= r.agent {
                m.coalesced.resize(r.agent + 1, Coalescing::default());
            }
            m.coalesced[r.agent].add(&c);
        }
        self.samples += r.row.gap_count() as u64;
        if let Some(i) = r.intended_s {
            self.queued.add(r.end_s() - i);
            self.samples += 1;
        }
        self.client_queue.add(r.queue_s());
        self.samples += 1;
        if r.row.ttft_us > 0 {
            // A row's tokens mostly share a second: one map entry per second they span.
            let mut t = r.start_s + r.ttft_s();
            let (mut second, mut tokens) = (t.floor() as i64, 1i64);
            for g in r.row.gaps() {
                t += f64::from(g) / 1e6;
                let s = t.floor() as i64;
                if s != second {
                    self.token_bins.add(second, tokens);
                    (second, tokens) = (s, 0);
                }
                tokens += 1;
            }
            self.token_bins.add(second, tokens);
        }
        self.good += u64::from(!self.slo.is_empty() && meets(&self.slo, r));
    }

    /// Past the exact budget: every exact record goes, the core's and the folds'.
    fn drop_exact(&mut self) {
        self.events = None;
        self.active.drop_exact();
        let m = &mut self.m;
        for s in
            [&mut m.ttft, &mut m.tpot, &mut m.itl, &mut m.e2el, &mut m.probe, &mut self.queued, &mut self.client_queue]
        {
            s.drop_exact();
        }
        self.folds.drop_exact();
    }

    /// A `--probe-request-rate` probe (not a request of the load).
    pub fn probe(&mut self, r: &GlobalRow) {
        if r.ok() {
            self.m.probe.add(r.e2el_s());
            // A probe's value weighs in the exact budget as a request's does.
            self.samples += 1;
            if self.samples > self.budget && self.events.is_some() {
                self.drop_exact();
            }
        } else {
            self.m.probe_failed += 1;
        }
    }

    /// An agent's health report `t_s` seconds into the run.
    pub fn health(&mut self, agent: usize, h: &surge_proto::Health, t_s: f64) {
        self.series.health(agent, h, t_s);
    }

    /// A scrape of the server's metrics.
    pub fn server(&mut self, s: &ServerScrape) {
        self.folds.server(s);
    }

    /// A scrape of the GPU exporter pages.
    pub fn gpu(&mut self, s: &GpuScrape) {
        self.folds.gpu(s);
    }

    /// The last finished slice (see [`TimeSeries::recent`]).
    pub fn recent(&self) -> Option<(f64, f64, f64, u64)> {
        self.series.recent()
    }

    /// The run's metrics: the core's, then each fold's put in.
    pub fn finish(self) -> Metrics {
        let Self {
            mut m,
            slo,
            good,
            first,
            last,
            queued,
            mut client_queue,
            active,
            events,
            token_bins,
            series,
            folds,
            ..
        } = self;
        client_queue.seal();
        m.client_queue = client_queue;
        m.exact = events.is_some();
        for seen in m.error_examples.values_mut() {
            seen.sort_by_key(|e| std::cmp::Reverse(e.count));
            seen.truncate(EXAMPLES_PER_KIND);
        }
        let (slices, slice_s, peak_in_flight) = series.finish();
        m.time_series = slices;
        m.timeslice_s = (!m.time_series.is_empty()).then_some(slice_s);
        let mut whole = Whole { sends: m.sends.n, slices: m.time_series.len(), ..Whole::default() };
        if m.sends.n == 0 {
            // Probes may have answered when no request of the load was sent.
            m.probe.seal();
            folds.finish(&whole, &mut m);
            return m;
        }
        // vLLM's duration (D21): from the start of the dispatch (the run's planned start,
        // 0 on this timeline; earlier if an agent's clock put a send before it) to the last
        // completion.
        m.duration_s = (last - first.min(0.0)).max(0.0);
        if m.duration_s > 0.0 {
            m.request_throughput = m.completed as f64 / m.duration_s;
            m.input_sequence_throughput = m.total_input_sequences as f64 / m.duration_s;
            m.output_throughput = m.total_output_tokens as f64 / m.duration_s;
            m.total_token_throughput = (m.total_input_tokens + m.total_output_tokens) as f64 / m.duration_s;
            m.request_goodput = (!slo.is_empty()).then(|| good as f64 / m.duration_s);
        }
        m.peak_in_flight = match events.map(|(mut s, mut e)| s.load().and_then(|()| e.load()).map(|()| (s, e))) {
            Some(Ok((mut s, mut e))) => super::stats::peak_in_flight(s.values_mut(), e.values_mut()) as f64,
            _ => peak_in_flight as f64,
        };
        m.max_concurrent_requests = active.peak() as f64;
        m.max_output_tokens_per_s = token_bins.answer() as f64;
        for s in [&mut m.ttft, &mut m.tpot, &mut m.itl, &mut m.e2el, &mut m.probe] {
            s.seal();
        }
        if !queued.is_empty() {
            let mut q = queued;
            q.seal();
            m.e2el_incl_queue = Some(q);
        }
        whole.duration_s = m.duration_s;
        whole.client = ClientSide {
            output_tokens: m.total_output_tokens,
            ttft_p50_ms: m.ttft.median_ms(),
            ttft_mean_ms: m.ttft.mean_ms(),
        };
        folds.finish(&whole, &mut m);
        m
    }
}

/// A failed request: counted by kind, with its message among the kind's examples.
fn failure(m: &mut Metrics, r: &GlobalRow) {
    m.failed += 1;
    let kind = kind_name(r.row.error());
    let seen = m.error_examples.entry(kind.clone()).or_default();
    match seen.iter().position(|e| e.message == r.row.error_message) {
        Some(i) => seen[i].count += 1,
        None if seen.len() < TRACKED_MESSAGES => seen.push(ErrorSeen {
            message: r.row.error_message.clone(),
            http_status: r.row.http_status,
            count: 1,
            agent: r.agent,
            cut: r.row.cut.clone(),
        }),
        None => {}
    }
    *m.errors_by_kind.entry(kind).or_default() += 1;
}

/// Computes the metrics of `rows` (any order) at once.
pub fn compute(rows: &[GlobalRow], slo: &Slo) -> Metrics {
    compute_kept(rows, slo, false)
}

/// [`compute`], keeping the rows in the metrics when `keep_rows`.
pub fn compute_kept(rows: &[GlobalRow], slo: &Slo, keep_rows: bool) -> Metrics {
    let mut a = Aggregator::new(slo.clone(), keep_rows, Wanted { slice_s: 1.0, ..Wanted::default() });
    for r in rows {
        a.add(r);
    }
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{ErrorKind, Row};

    fn row(start_s: f64, ttft_us: u32, latency_us: u32, out: u32, itl: Vec<u32>) -> GlobalRow {
        GlobalRow {
            agent: 0,
            start_s,
            intended_s: None,
            row: Row {
                ttft_us: ttft_us.into(),
                latency_us: latency_us.into(),
                output_tokens: out,
                input_tokens: 10,
                itl_us: surge_proto::gaps::pack(&itl),
                ..Default::default()
            },
        }
    }

    /// Past the exact budget the core's samples keep no value, the probes' included, and
    /// their counts go on.
    #[test]
    fn past_the_budget_the_cores_samples_and_the_probes_keep_no_value() {
        let mut a = Aggregator::new(Slo::default(), false, Wanted { slice_s: 1.0, ..Wanted::default() });
        a.add(&row(0.0, 1000, 9000, 4, vec![100, 200, 300]));
        a.probe(&row(0.1, 1000, 5000, 1, vec![]));
        a.drop_exact();
        a.add(&row(0.2, 1000, 9000, 4, vec![100, 200, 300]));
        a.probe(&row(0.3, 1000, 6000, 1, vec![]));
        let m = a.finish();
        let exact = [&m.ttft, &m.tpot, &m.itl, &m.e2el, &m.probe].map(|s| s.is_exact());
        assert_eq!(exact, [false; 5]);
        assert_eq!((m.probe.len(), m.completed), (2, 2));
    }

    #[test]
    fn failures_alone_spend_the_budget() {
        let mut a = Aggregator::new(Slo::default(), false, Wanted { slice_s: 1.0, ..Wanted::default() });
        a.budget = 20;
        for i in 0..11 {
            let mut r = row(f64::from(i) * 0.1, 0, 10_000, 0, vec![]);
            r.row.set_error(if i % 2 == 0 { ErrorKind::HttpStatus } else { ErrorKind::Cancelled });
            a.add(&r);
        }
        // 11 rows of two events each: 22 past 20, so the starts and ends are no longer kept.
        assert!(a.events.is_none());
        let m = a.finish();
        assert!(!m.exact);
        assert_eq!((m.failed, m.cancelled), (6, 5));
        // Probes weigh in it too.
        let mut p = Aggregator::new(Slo::default(), false, Wanted { slice_s: 1.0, ..Wanted::default() });
        p.budget = 5;
        for i in 0..6 {
            p.probe(&row(f64::from(i), 1000, 5000, 1, vec![]));
        }
        assert!(p.events.is_none(), "six probes past a budget of five");
        assert!(!p.finish().probe.is_exact());
    }

    #[test]
    fn coalesced_token_events_are_counted_per_agent() {
        let mut b = row(0.0, 1000, 9000, 4, vec![0, 5000, 0]);
        b.agent = 1;
        let mut c = row(0.0, 1000, 2000, 2, vec![1000]);
        c.agent = 1;
        let no_tokens = row(0.0, 0, 2000, 0, vec![]);
        // A server writing tokens back to back (mean gap < 1 ms): its shared reads say
        // nothing about the client, so the stream is left out.
        let mut fast = row(0.0, 1000, 1100, 4, vec![0, 0, 100]);
        fast.agent = 1;
        let m = compute(&[row(0.0, 1000, 3000, 3, vec![1000, 1000]), b, c, no_tokens, fast], &Slo::default());
        let counts: Vec<(u64, u64)> = m.coalesced.iter().map(|c| (c.coalesced, c.events)).collect();
        assert_eq!(counts, vec![(0, 3), (2, 6)]);
        assert_eq!(m.coalesced_fraction(0), Some(0.0));
        assert_eq!(m.coalesced_fraction(1), Some(2.0 / 6.0));
        assert_eq!(m.coalesced_fraction(2), None);
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
        assert_eq!(m.peak_in_flight, 2.0);
        assert_eq!(m.max_concurrent_requests, 2.0, "both successes within the first second");
        assert_eq!(m.max_output_tokens_per_s, 8.0);
        assert_eq!(m.itl.len(), 6);
    }

    /// Each token counts in the second of the run it arrived in, whichever row it is in and
    /// however many seconds the row spans.
    #[test]
    fn peak_output_tokens_per_second_counts_each_token_in_its_second() {
        let rows = [
            // Tokens at 0.95, 1.05, 1.15, 1.25 and 2.25 s.
            row(0.9, 50_000, 1_350_000, 5, vec![100_000, 100_000, 100_000, 1_000_000]),
            // Tokens at 1.5 and 1.6 s.
            row(1.0, 500_000, 600_000, 2, vec![100_000]),
        ];
        let m = compute(&rows, &Slo::default());
        assert_eq!(m.total_output_tokens, 7);
        assert_eq!(m.max_output_tokens_per_s, 5.0, "second 1 holds 3 + 2 tokens");
        let rows = [row(0.0, 100_000, 2_100_000, 3, vec![1_000_000, 1_000_000])];
        assert_eq!(compute(&rows, &Slo::default()).max_output_tokens_per_s, 1.0, "one token a second");
    }

    #[test]
    fn a_success_with_no_token_has_no_ttft_and_meets_no_ttft_objective() {
        // D50: a stream that ended as it should with no token is a success (the anomaly
        // no_tokens) whose TTFT is not 0 but absent.
        let rows = vec![row(0.0, 50_000, 300_000, 3, vec![100_000, 150_000]), row(0.1, 0, 20_000, 0, vec![])];
        let m = compute(&rows, &Slo { ttft_ms: Some(60.0), ..Default::default() });
        assert_eq!((m.completed, m.failed), (2, 0));
        assert_eq!((m.ttft.len(), m.e2el.len(), m.tpot.len()), (1, 2, 1));
        assert!((m.ttft.percentile_ms(1.0) - 50.0).abs() < 1e-9, "{}", m.ttft.percentile_ms(1.0));
        assert!((m.request_goodput.unwrap() * m.duration_s - 1.0).abs() < 1e-9, "only the reply with a token is good");
        let mut three = row(0.2, 0, 20_000, 3, vec![]);
        three.row.output_tokens = 3;
        assert_eq!(three.tpot_s(), None, "usage without a token event gives no TPOT");
    }

    #[test]
    fn ends_before_starts_at_equal_times() {
        let rows = vec![row(0.0, 1, 1_000_000, 1, vec![]), row(1.0, 1, 1_000_000, 1, vec![])];
        let m = compute(&rows, &Slo::default());
        assert_eq!(m.peak_in_flight, 1.0, "one ends as the other starts");
        assert_eq!(m.max_concurrent_requests, 2.0, "vLLM: both are active in second 1");
    }
}
