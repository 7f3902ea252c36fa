//! From merged per-request rows to `vllm bench serve`'s numbers, folded row by row as
//! rows arrive ([`Aggregator`]): throughput over the global timeline, goodput, peak
//! concurrency and peak output rate, and the latency distributions (TTFT, TPOT, ITL,
//! E2EL), computed in seconds and reported in ms as vLLM does. While a run's samples fit
//! [`EXACT_SAMPLES`], a percentile recomputed from the saved per-request arrays is equal,
//! bit for bit, to the one in the summary; beyond, memory stops growing and percentiles
//! come from histograms (see `sample`).

use super::active::ActiveSeconds;
use super::coalesce::Coalescing;
use super::conversations::Conversations;
use super::gpu::{GpuMetrics, GpuView};
use super::ramp::RampEvents;
use super::sample::Sample;
use super::server::{ClientSide, ServerMetrics, ServerView};
use super::spilled::Spilled;
use super::steady::{Req, Steady, SteadyPlan, SteadyState};
use super::timeseries::{Slice, TimeSeries};
pub use crate::fleet::outcome::{GlobalRow, kind_name};
use crate::plan::{RampPlan, Slo};
use crate::target::gpu::GpuScrape;
use crate::target::scrape::ServerScrape;
use std::collections::BTreeMap;
use surge_core::data::share::Stripe;

/// Whether a successful row met every objective of `slo`.
fn meets(slo: &Slo, r: &GlobalRow) -> bool {
    let ok = |limit: Option<f64>, v_s: f64| limit.is_none_or(|ms| v_s * 1000.0 <= ms);
    ok(slo.ttft_ms, r.ttft_s()) && ok(slo.tpot_ms, r.tpot_s().unwrap_or(0.0)) && ok(slo.e2el_ms, r.e2el_s())
}

/// Latency samples (TTFT, TPOT, ITL, E2EL, queue values together) kept exactly; beyond, the run
/// switches to histograms (D4, D23).
pub const EXACT_SAMPLES: u64 = 10_000_000;

/// Distinct messages tracked per error kind while folding (the top 3 are reported).
const TRACKED_MESSAGES: usize = 16;
/// Examples reported per error kind.
pub const EXAMPLES_PER_KIND: usize = 3;

/// One distinct failure message and how often it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorSeen {
    pub message: String,
    pub http_status: u32,
    pub count: u64,
    pub agent: usize,
    /// How the first stream with this message was cut (a cut stream's message names
    /// the ending and the peer, not the counts: those are the first one's, here).
    pub cut: Option<surge_proto::StreamCut>,
}

/// Send times seen, for the client's achieved rate.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sends {
    pub n: u64,
    pub first_s: f64,
    pub last_s: f64,
}

impl Sends {
    fn add(&mut self, t: f64) {
        if self.n == 0 {
            (self.first_s, self.last_s) = (t, t);
        }
        self.n += 1;
        self.first_s = self.first_s.min(t);
        self.last_s = self.last_s.max(t);
    }
    /// Sends per second between the first and the last.
    pub fn rate(&self) -> f64 {
        if self.n > 1 && self.last_s > self.first_s { (self.n - 1) as f64 / (self.last_s - self.first_s) } else { 0.0 }
    }
}

/// Everything the summary and the result file report about one run.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Reasoning and tool calls measured apart (D49); `None` when no reply had either.
    pub reasoning: Option<Box<super::reasoning::Reasoning>>,
    pub duration_s: f64,
    pub completed: u64,
    /// Requests that failed; cancelled ones (a stop, the graceful stop's end) are not.
    pub failed: u64,
    /// Requests cancelled by the client (D21): neither completed nor failed.
    pub cancelled: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// Pooling backends: inputs of the successful requests (vLLM's
    /// `total_input_sequences`), and their rate.
    pub total_input_sequences: u64,
    /// `openai-audio`: seconds of audio the successful requests carried (vLLM's RTFx is
    /// this over the duration).
    pub total_audio_s: f64,
    /// The steady state (D45), when looked for and found.
    pub steady_state: Option<SteadyState>,
    pub input_sequence_throughput: f64,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub max_output_tokens_per_s: f64,
    /// vLLM's: successful requests active within one second, the largest count.
    pub max_concurrent_requests: f64,
    /// surge's: requests in flight at one instant (failed ones included), the largest.
    pub peak_in_flight: f64,
    pub ttft: Sample,
    pub tpot: Sample,
    pub itl: Sample,
    pub e2el: Sample,
    /// Open loop: latency from the intended send time (includes client-side queueing).
    pub e2el_incl_queue: Option<Sample>,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Per error kind, the most frequent distinct messages: (message, HTTP status, count,
    /// index of the first agent that saw it), most frequent first, at most 3.
    pub error_examples: BTreeMap<String, Vec<ErrorSeen>>,
    pub server_usage_rows: u64,
    /// Where the token counts of successful rows came from.
    pub token_sources: super::token_source::Tally,
    /// Every send, and every intended send (open loop).
    pub sends: Sends,
    pub intended: Sends,
    /// Whether the percentiles are exact (the samples fit [`EXACT_SAMPLES`]).
    pub exact: bool,
    pub time_series: Vec<Slice>,
    /// The rows themselves, only when asked (`--save-detailed`, `surge validate`).
    pub rows: Vec<GlobalRow>,
    /// Per agent: read coalescing of its successful streamed requests ([`Coalescing`]).
    pub coalesced: Vec<Coalescing>,
    /// The server's own view, when its metrics were scraped.
    pub server: Option<ServerMetrics>,
    /// GPU telemetry over the window, when GPU exporter pages were scraped.
    pub gpu: Option<GpuMetrics>,
    /// k6's HTTP phases of the successful requests (D35), when the rows carry them.
    pub http_phases: super::phases::Phases,
    /// A ramped run's rate changes.
    pub ramp: Option<RampEvents>,
    /// Successful requests' client queue time (vLLM's `client_queue_time`).
    pub client_queue: Sample,
    /// `--probe-request-rate`: the E2E latencies of the probes that succeeded, and how
    /// many failed.
    pub probe: Sample,
    pub probe_failed: u64,
    /// A multi-turn run: per turn, per conversation, the prefix cache.
    pub conversations: Option<Conversations>,
}

impl Metrics {
    /// Agent `agent`'s `coalesced_token_fraction`: token events read together with an
    /// earlier one of their stream, over all its token events (`None`: none streamed).
    pub fn coalesced_fraction(&self, agent: usize) -> Option<f64> {
        self.coalesced.get(agent)?.fraction()
    }

    /// `name`'s sample, `ttfo` included: over the replies that reasoned, else TTFT's (D49).
    pub fn sample_of(&self, name: &str) -> &Sample {
        match (name, self.reasoning.as_deref()) {
            ("ttfo", Some(r)) if !r.ttfo.is_empty() => &r.ttfo,
            ("ttfo", _) => &self.ttft,
            _ => self.dist(name),
        }
    }

    pub fn dist(&self, name: &str) -> &Sample {
        match name {
            "ttft" => &self.ttft,
            "tpot" => &self.tpot,
            "itl" => &self.itl,
            _ => &self.e2el,
        }
    }
}

/// Folds rows into [`Metrics`] as they arrive, in memory that does not grow with the run
/// (beyond the exact budget, the per-second peak bins and the time series' slices).
#[derive(Debug)]
pub struct Aggregator {
    m: Metrics,
    slo: Slo,
    good: u64,
    samples: u64,
    first: f64,
    last: f64,
    queued: Sample,
    /// Successful requests' client queue time: send minus arrival (the intended send in an
    /// open loop; the start when every request arrives at once, as vLLM's).
    client_queue: Sample,
    /// vLLM's `max_concurrent_requests` (successful requests per one-second bucket).
    active: ActiveSeconds,
    /// (time, +1 start / -1 end) while exact.
    events: Option<Spilled<(f64, i32)>>,
    /// Output tokens per second of the run's timeline.
    token_bins: BTreeMap<i64, u64>,
    keep_rows: bool,
    series: TimeSeries,
    server: ServerView,
    gpu: GpuView,
    ramp: Option<RampEvents>,
    /// Steady state's records and what to look for (with the percentiles to report).
    steady: Steady,
    steady_plan: Option<(SteadyPlan, Vec<f64>)>,
}

/// A successful request as steady state reads it: its token events' first and last
/// times and count (none for a pooling answer).
fn steady_record(r: &GlobalRow) -> Req {
    let generated = r.row.output_tokens > 0 && r.row.ttft_us > 0;
    let first = r.start_s + r.ttft_s();
    let gaps: f64 = r.row.itl_us.iter().map(|&g| f64::from(g) / 1e6).sum();
    Req {
        start: r.start_s,
        end: r.end_s(),
        ttft: if generated { r.ttft_s() } else { 0.0 },
        tpot: r.tpot_s().unwrap_or(-1.0),
        first_token: first,
        last_token: first + gaps,
        events: if generated { u32::try_from(r.row.itl_us.len() + 1).unwrap_or(u32::MAX) } else { 0 },
        input: r.row.input_tokens,
    }
}

impl Aggregator {
    /// `keep_rows`: keep every row for the detailed arrays; `slice_s`: the time series' slice.
    pub fn new(slo: Slo, keep_rows: bool, slice_s: f64) -> Self {
        Self {
            m: Metrics::default(),
            slo,
            good: 0,
            samples: 0,
            first: f64::INFINITY,
            last: f64::NEG_INFINITY,
            queued: Sample::new(),
            client_queue: Sample::new(),
            active: ActiveSeconds::new(),
            events: Some(Spilled::new()),
            token_bins: BTreeMap::new(),
            keep_rows,
            series: TimeSeries::new(slice_s),
            server: ServerView::new(slice_s),
            gpu: GpuView::new(slice_s),
            ramp: None,
            steady: Steady::new(),
            steady_plan: None,
        }
    }

    /// Looks for the run's steady state (D45), reporting TTFT at `percentiles`.
    pub fn with_steady(mut self, plan: Option<SteadyPlan>, percentiles: &[f64]) -> Self {
        self.steady_plan = plan.map(|p| (p, percentiles.to_vec()));
        self
    }

    /// A ramped run: `rps_change_events` are tracked (the agents' slices come with
    /// [`Aggregator::ramp_slices`]).
    /// `over_s`: a ramp over time (a `--duration` run without a request cap).
    pub fn with_ramp(mut self, ramp: Option<RampPlan>, over_s: Option<f64>) -> Self {
        self.ramp = ramp.map(|r| RampEvents::new(r, over_s));
        self
    }

    /// The agents' shares: (their global indices, how many).
    pub fn ramp_slices(&mut self, slices: Vec<(Stripe, u64)>) {
        if let Some(r) = &mut self.ramp {
            r.slices(slices);
        }
    }

    /// One finished request.
    pub fn add(&mut self, r: &GlobalRow) {
        if let Some(ramp) = &mut self.ramp {
            ramp.add(r.agent, r.row.index, r.start_s);
        }
        let m = &mut self.m;
        self.first = self.first.min(r.start_s);
        self.last = self.last.max(r.end_s());
        m.sends.add(r.start_s);
        if let Some(i) = r.intended_s {
            m.intended.add(i);
        }
        if let Some(ev) = &mut self.events {
            ev.push((r.start_s, 1));
            ev.push((r.end_s(), -1));
            // Two events weigh about one sample each in the budget.
            self.samples += 2;
        }
        if r.ok() && self.events.is_some() {
            self.samples += 1;
        }
        if r.ok() {
            super::reasoning::Reasoning::add(&mut m.reasoning, r);
            self.active.add(r.start_s, r.end_s());
            if self.steady_plan.is_some() {
                self.steady.add(steady_record(r));
            }
            if let Some(p) = &r.row.phases {
                m.http_phases.add(p, r.row.ttft_us);
            }
        }
        if r.row.session.is_some() {
            let c = m.conversations.get_or_insert_with(Conversations::new);
            c.add(r);
            if self.events.is_none() {
                c.drop_exact();
            }
        }
        let coalescing = if r.ok() { Coalescing::of_row(&r.row) } else { None };
        self.series.add(r, coalescing.as_ref());
        if self.keep_rows {
            m.rows.push(r.clone());
        }
        if r.row.error() == surge_proto::ErrorKind::Cancelled {
            m.cancelled += 1;
            return;
        }
        if !r.ok() {
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
            return;
        }
        m.completed += 1;
        m.total_input_tokens += u64::from(r.row.input_tokens);
        m.total_output_tokens += u64::from(r.row.output_tokens);
        m.total_input_sequences += u64::from(r.row.input_sequences);
        m.total_audio_s += r.row.input_audio_s;
        m.server_usage_rows += u64::from(r.row.usage_from_server);
        m.token_sources.add(&r.row);
        m.ttft.add(r.ttft_s());
        m.e2el.add(r.e2el_s());
        self.samples += 2;
        if let Some(t) = r.tpot_s() {
            m.tpot.add(t);
            self.samples += 1;
        }
        for &g in &r.row.itl_us {
            m.itl.add(f64::from(g) / 1e6);
        }
        if let Some(c) = coalescing {
            if m.coalesced.len() <= r.agent {
                m.coalesced.resize(r.agent + 1, Coalescing::default());
            }
            m.coalesced[r.agent].add(&c);
        }
        self.samples += r.row.itl_us.len() as u64;
        if let Some(i) = r.intended_s {
            self.queued.add(r.end_s() - i);
            self.samples += 1;
        }
        self.client_queue.add(r.queue_s());
        self.samples += 1;
        if r.row.ttft_us > 0 {
            let mut t = r.start_s + r.ttft_s();
            *self.token_bins.entry(t.floor() as i64).or_default() += 1;
            for &g in &r.row.itl_us {
                t += f64::from(g) / 1e6;
                *self.token_bins.entry(t.floor() as i64).or_default() += 1;
            }
        }
        self.good += u64::from(!self.slo.is_empty() && meets(&self.slo, r));
        if self.samples > EXACT_SAMPLES && self.events.is_some() {
            self.events = None;
            self.active.drop_exact();
            self.steady.drop_exact();
            for s in [&mut m.ttft, &mut m.tpot, &mut m.itl, &mut m.e2el, &mut self.queued, &mut self.client_queue] {
                s.drop_exact();
            }
            if let Some(c) = &mut m.conversations {
                c.drop_exact();
            }
        }
    }

    /// A `--probe-request-rate` probe (not a request of the load).
    pub fn probe(&mut self, r: &GlobalRow) {
        if r.ok() {
            self.m.probe.add(r.e2el_s());
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
        self.server.add(s);
    }

    /// A scrape of the GPU exporter pages.
    pub fn gpu(&mut self, s: &GpuScrape) {
        self.gpu.add(s);
    }

    /// The last finished slice (see [`TimeSeries::recent`]).
    pub fn recent(&self) -> Option<(f64, f64, f64, u64)> {
        self.series.recent()
    }

    /// The run's metrics.
    pub fn finish(self) -> Metrics {
        let Self {
            mut m,
            slo,
            good,
            first,
            last,
            queued,
            mut client_queue,
            mut active,
            events,
            token_bins,
            series,
            server,
            gpu,
            ramp,
            steady,
            steady_plan,
            ..
        } = self;
        client_queue.seal();
        m.client_queue = client_queue;
        if let Some(r) = &mut m.reasoning {
            r.seal();
        }
        m.exact = events.is_some();
        m.ramp = ramp;
        for seen in m.error_examples.values_mut() {
            seen.sort_by_key(|e| std::cmp::Reverse(e.count));
            seen.truncate(EXAMPLES_PER_KIND);
        }
        let (slices, peak_in_flight) = series.finish();
        m.time_series = slices;
        if m.sends.n == 0 {
            m.server = server.finish(m.time_series.len(), ClientSide::default());
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
        m.peak_in_flight = match events.map(|mut ev| ev.load().map(|()| ev)) {
            Some(Ok(mut ev)) => super::stats::peak_in_flight(ev.values_mut()) as f64,
            _ => peak_in_flight as f64,
        };
        m.max_concurrent_requests = active.peak() as f64;
        m.steady_state = steady_plan.and_then(|(p, ps)| steady.compute(p, m.duration_s, &ps));
        if let Some(w) = m.steady_state.as_ref().map(|s| &s.window) {
            let (a, b) = (w.run_start_s, w.run_start_s + w.duration_s);
            let width = m.time_series.get(1).map_or(f64::INFINITY, |s| s.t);
            for s in &mut m.time_series {
                s.steady = s.t < b && s.t + width > a;
            }
        }
        m.max_output_tokens_per_s = token_bins.values().copied().max().unwrap_or(0) as f64;
        for s in [&mut m.ttft, &mut m.tpot, &mut m.itl, &mut m.e2el, &mut m.probe] {
            s.seal();
        }
        if let Some(c) = &mut m.conversations {
            c.seal();
        }
        let client = ClientSide {
            output_tokens: m.total_output_tokens,
            ttft_p50_ms: m.ttft.median_ms(),
            ttft_mean_ms: m.ttft.mean_ms(),
        };
        m.server = server.finish(m.time_series.len(), client);
        if let Some((g, slices)) = gpu.finish(m.duration_s, m.time_series.len()) {
            for (s, gs) in m.time_series.iter_mut().zip(slices) {
                s.gpu_energy_j = Some(gs.energy_j);
                s.gpu_power_w = Some(gs.power_w);
                s.gpu_utilization_pct = gs.utilization_pct;
                s.energy_per_output_token_j = (s.output_tokens > 0).then(|| gs.energy_j / s.output_tokens as f64);
            }
            m.gpu = Some(g);
        }
        if !queued.is_empty() {
            let mut q = queued;
            q.seal();
            m.e2el_incl_queue = Some(q);
        }
        m
    }
}

/// Computes the metrics of `rows` (any order) at once.
pub fn compute(rows: &[GlobalRow], slo: &Slo) -> Metrics {
    compute_kept(rows, slo, false)
}

/// [`compute`], keeping the rows in the metrics when `keep_rows`.
pub fn compute_kept(rows: &[GlobalRow], slo: &Slo, keep_rows: bool) -> Metrics {
    let mut a = Aggregator::new(slo.clone(), keep_rows, 1.0);
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
                itl_us: itl,
                ..Default::default()
            },
        }
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

    #[test]
    fn ends_before_starts_at_equal_times() {
        let rows = vec![row(0.0, 1, 1_000_000, 1, vec![]), row(1.0, 1, 1_000_000, 1, vec![])];
        let m = compute(&rows, &Slo::default());
        assert_eq!(m.peak_in_flight, 1.0, "one ends as the other starts");
        assert_eq!(m.max_concurrent_requests, 2.0, "vLLM: both are active in second 1");
    }
}
