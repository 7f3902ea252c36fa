//! What a run measured, as the summary and the result file report it: `vllm bench
//! serve`'s numbers and surge's own, made by the aggregator ([`super::aggregate`]) and its
//! folds. While a run's samples fit [`EXACT_SAMPLES`], a percentile recomputed from the
//! saved per-request arrays is equal, bit for bit, to the one in the summary; beyond,
//! memory stops growing and percentiles come from histograms (see `sample`).

use super::coalesce::Coalescing;
use super::conversations::Conversations;
use super::gpu::GpuMetrics;
use super::ramp::RampEvents;
use super::sample::Sample;
use super::server::ServerMetrics;
use super::steady::SteadyState;
use super::timeseries::Slice;
pub use crate::fleet::outcome::{GlobalRow, kind_name};
use std::collections::BTreeMap;

/// Latency samples (TTFT, TPOT, ITL, E2EL, queue values together) kept exactly; beyond, the run
/// switches to histograms (D4, D23).
pub const EXACT_SAMPLES: u64 = 10_000_000;

/// Distinct messages tracked per error kind while folding (the top 3 are reported).
pub(super) const TRACKED_MESSAGES: usize = 16;
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
    pub(super) fn add(&mut self, t: f64) {
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
    /// The time series' slices' width: `--timeslice`, doubled as often as a run past
    /// [`super::grid::MOST_SLICES`] slices needed (D90); `None` without a slice.
    pub timeslice_s: Option<f64>,
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
    /// Agent loops (D65): per step, tool calls and answers, per session.
    pub agent_loop: Option<super::agent_loop::AgentLoop>,
    /// Sub-agent graphs (D68).
    pub graphs: Option<super::graphs::Graphs>,
    /// The accuracy questions' answers (D71); `None` when none was asked.
    pub accuracy: Option<super::accuracy::Accuracy>,
    /// What the successful replies did that a benchmark can be fooled by (D70).
    pub anomalies: super::anomalies::Anomalies,
    /// Several endpoints (D69): each one's numbers.
    pub endpoints: Option<super::endpoints::EndpointsView>,
    /// `--replica-header` (D69): the replicas behind a router, as the responses named them.
    pub replicas: Option<super::replicas::ReplicasView>,
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
