//! The typed result model: what a run, a sweep and a validation produce, as values.
//! A run's document serializes to `vllm bench serve`'s `--save-result` keys (declaration
//! order), surge's `run_metadata` and `client` blocks, errors by kind, and with
//! `--save-detailed` the per-request arrays; it deserializes from files written by
//! earlier versions (a file without `result_schema` is schema 1).

use crate::analysis::repeat::Summary;
use crate::analysis::timeseries::Slice;
use crate::analysis::token_source::Source;
use crate::analysis::verdict::Verdict;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// Bumped on any change of a key's meaning (D12).
pub const RESULT_SCHEMA: u32 = 3;

fn schema_one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

/// A request rate: a number, or vLLM's `"inf"` for an unpaced run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(pub f64);

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() { s.serialize_f64(self.0) } else { s.serialize_str("inf") }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(f64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Rate(n)),
            Raw::S(s) if s == "inf" => Ok(Rate(f64::INFINITY)),
            Raw::S(s) => Err(de::Error::custom(format!("request_rate {s:?}: expected a number or \"inf\""))),
        }
    }
}

/// One result of `surge run` (and each level-run of a sweep or matrix).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub date: String,
    pub endpoint_type: String,
    pub backend: String,
    /// `--label` (`null` without it), as vLLM writes it.
    #[serde(default)]
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: String,
    /// `null` for a duration run without a request cap.
    pub num_prompts: Option<u64>,
    /// `--metadata KEY=VALUE`, at the top level as vLLM writes it (after `num_prompts`).
    #[serde(flatten)]
    pub labels: Labels,
    pub request_rate: Rate,
    pub burstiness: f64,
    pub max_concurrency: Option<u32>,
    /// `--ramp-up-strategy` and its rates, as vLLM writes them (absent without a ramp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_up_strategy: Option<super::sets::Ramp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_up_start_rps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_up_end_rps: Option<u32>,
    pub duration: f64,
    /// What ended the run: `num_prompts`, `dataset` (`--no-oversample` at the end of a
    /// file), `duration`, `max_run_time`, `interrupt` or `agent_loss`.
    #[serde(default)]
    pub ended_by: EndedBy,
    /// File datasets: passes over the file that the run's requests made (D20; 2 = every
    /// entry was sent, then some again in a new order). Absent for generated prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_passes: Option<u64>,
    pub completed: u64,
    /// Schema 3: cancelled requests are not in `failed` (nor in `errors_by_kind`).
    pub failed: u64,
    /// Requests the client cancelled: in flight at a stop, or at the end of `--graceful-stop`
    /// (D21). Absent in files before schema 3.
    #[serde(default)]
    pub cancelled: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// Pooling backends (vLLM's keys): inputs embedded, and their rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_input_sequences: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sequence_throughput: Option<f64>,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// vLLM's per-request `latencies` and `queue_times`, streamed from the run's spill
    /// file when written (a `--num-prompts` run; D3). Not read back.
    #[serde(flatten, skip_deserializing)]
    pub vllm_arrays: Option<super::spill::VllmArrays>,
    pub max_output_tokens_per_s: f64,
    /// vLLM's meaning (schema 2): successful requests active within one second, the
    /// largest count; schema 1 files hold the instantaneous peak here.
    pub max_concurrent_requests: f64,
    /// The most requests in flight at one instant, failed ones included (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_in_flight: Option<f64>,
    /// vLLM's inverse real-time factor of audio benchmarks: 0 for text, as vLLM writes it.
    #[serde(default)]
    pub rtfx: f64,
    /// Flags given on the command line that the run did not read (D44), as warned.
    #[serde(default)]
    pub ignored_flags: Vec<String>,
    /// Reasoning and tool calls measured apart (D49); absent when no reply had either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningResult>,
    /// `--precision`: each named percentile's interval at the run's end (D62).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub precision: Vec<PrecisionEntry>,
    /// vllm-bench's steady state (D45): its window and the metrics over it; null when
    /// not looked for or not found.
    #[serde(default)]
    pub steady_state: Option<crate::analysis::steady::SteadyState>,
    /// A ramped run: when the rate reached each whole request rate (vLLM's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps_change_events: Option<Vec<crate::analysis::ramp::RpsEvent>>,
    /// `--probe-request-rate`: vLLM's probe keys, when at least one probe succeeded.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<Probes>,
    /// `mean_/median_/std_/pN_{ttft,tpot,itl,e2el}_ms`.
    #[serde(flatten)]
    pub latency: Latencies,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2el_including_client_queue: Option<QueueLatency>,
    /// A multi-turn run's keys (vllm-bench's and surge's, D32).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub multi_turn: Option<super::multi_turn::MultiTurnResult>,
    /// Agent loops (`--tool-loop`, D65).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_loop: Option<super::multi_turn::AgentLoopResult>,
    /// Sub-agent graphs of a session trace (D68).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_graphs: Option<super::multi_turn::AgentGraphsResult>,
    /// Accuracy beside speed (D71): the questions answered, right, and the share right with
    /// its interval; absent without `--accuracy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<AccuracyResult>,
    /// What the successful replies did that a benchmark can be fooled by (D70): each
    /// kind's count (zeros included) and up to 3 examples; absent from files saved before.
    #[serde(default)]
    pub anomalies: AnomaliesResult,
    /// Several endpoints (D69): each one's numbers, how requests picked one, and the rule
    /// that marks an outlier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<super::endpoints::EndpointResult>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_policy: Option<super::sets::Policy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_outlier_rule: Option<String>,
    /// `--replica-header` (D69): the replicas behind a router, as the responses named them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<super::endpoints::ReplicasResult>,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Per error kind, up to 3 distinct messages, most frequent first.
    #[serde(default)]
    pub error_examples: BTreeMap<String, Vec<ErrorExample>>,
    pub input_tokens_source: Source,
    pub output_tokens_source: Source,
    pub token_count_sources: TokenCounts,
    /// Whether the percentiles are exact over every row (false: from histograms, within
    /// 0.01 % or 1 µs; the run went past the exact budget).
    #[serde(default = "yes")]
    pub percentiles_exact: bool,
    /// With `--cost-per-hour`: USD per million output / total tokens at the measured
    /// throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_million_output_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_million_total_tokens: Option<f64>,
    /// HTTP phases (D35): successful requests on a connection used before (or opened
    /// ahead of the run) and on one opened for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_req_connections_reused: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_req_connections_new: Option<u64>,
    /// With GPU telemetry (`--gpu-metrics-url`): every GPU's energy over the run's
    /// duration per output token and per completed request (J), output tokens per joule,
    /// the GPUs' mean power (W), and with `--energy-price-kwh` the energy cost of a million
    /// output tokens (USD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_per_output_token_j: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_per_request_j: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_joule: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_gpu_power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_cost_per_million_output_tokens: Option<f64>,
    #[serde(default = "schema_one")]
    pub result_schema: u32,
    pub run_metadata: RunMetadata,
    pub client: ClientBlock,
    /// Where this level-run sits in a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepPosition>,
    /// The flags of the sweep, search or matrix that measured it (D93): `--resume` takes
    /// it only for the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, Vec<String>>,
    /// One entry per slice of the run: `--timeslice`, or wider in a run past 4,096 of them
    /// (D90).
    #[serde(default)]
    pub time_series: Vec<Slice>,
    /// The slices' width, seconds (absent without a slice, and in results before D90).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeslice_s: Option<f64>,
    /// Per latency metric (`ttft`, `tpot`, `itl`, `e2el`): its histogram, merged exactly
    /// across agents (D4); reports draw histograms and CDFs from it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distributions: BTreeMap<String, Distribution>,
    /// The server's own metrics over the level (D11), when scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<crate::analysis::server::ServerMetrics>,
    /// GPU telemetry over the level (D36), with `--gpu-metrics-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_metrics: Option<crate::analysis::gpu::GpuMetrics>,
    /// `--save-detailed`: per-request arrays in seconds, as vLLM saves them (read back
    /// from a file, or built from rows kept in memory).
    #[serde(flatten)]
    pub detailed: Option<Detailed>,
    /// The same arrays streamed from the run's spill when the result is written (a run
    /// keeps no row in memory for them). Not read back: a file read has `detailed`.
    #[serde(flatten, skip_deserializing)]
    pub detailed_spill: Option<super::detail_spill::DetailedArrays>,
}

/// One metric's distribution: log-spaced buckets (32 per doubling; empty ones left out),
/// each counting the values above the previous bound and at most `le_ms`, and the
/// quantiles a report marks (the same values the summary's percentiles come from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub le_ms: Vec<f64>,
    pub counts: Vec<u64>,
}

/// `--metadata` labels in the order given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels(pub Vec<(String, String)>);

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Labels {
    /// Labels are the top-level keys left over with string values.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            S(String),
            Other(IgnoredAny),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("metadata labels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Any>()? {
                    if let Any::S(v) = v
                        && !super::multi_turn::STRING_KEYS.contains(&k.as_str())
                    {
                        out.push((k, v));
                    }
                }
                Ok(Labels(out))
            }
        }
        d.deserialize_map(V)
    }
}

pub use super::latencies::{Latencies, MetricStats};

/// Open loop: E2EL measured from the intended send time.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueLatency {
    pub mean_ms: f64,
    pub median_ms: f64,
    pub percentiles: Vec<(f64, f64)>,
}

impl Serialize for QueueLatency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("mean_ms", &self.mean_ms)?;
        m.serialize_entry("median_ms", &self.median_ms)?;
        for (p, v) in &self.percentiles {
            m.serialize_entry(&format!("p{}_ms", crate::plan::percentile_word(*p)), v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for QueueLatency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = QueueLatency;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("queue latency statistics")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<QueueLatency, A::Error> {
                let mut q = QueueLatency { mean_ms: f64::NAN, median_ms: f64::NAN, percentiles: Vec::new() };
                // Percentiles stay in the order the file has them (the run's order).
                while let Some((k, v)) = map.next_entry::<String, Option<f64>>()? {
                    let v = v.unwrap_or(f64::NAN);
                    match k.as_str() {
                        "mean_ms" => q.mean_ms = v,
                        "median_ms" => q.median_ms = v,
                        _ => {
                            if let Some(p) = k.strip_prefix('p').and_then(|w| w.strip_suffix("_ms")?.parse().ok()) {
                                q.percentiles.push((p, v));
                            }
                        }
                    }
                }
                Ok(q)
            }
        }
        d.deserialize_map(V)
    }
}

/// The `accuracy` block (D71).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccuracyResult {
    /// Questions answered (successful replies), and those answered right.
    pub samples: u64,
    pub correct: u64,
    /// The share right; its Wilson score interval at `confidence`.
    pub accuracy: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub confidence: f64,
    /// `--accuracy-ratio`.
    pub ratio: f64,
}

/// The `anomalies` block (D70).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnomaliesResult {
    /// Successful requests with at least one anomaly.
    pub requests: u64,
    /// Every kind, 0 when none was seen.
    pub by_kind: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub examples: BTreeMap<String, Vec<AnomalyExample>>,
}

/// One request that showed an anomaly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnomalyExample {
    /// The request's index (`seq` in the rows).
    pub seq: u64,
    pub agent: String,
    pub detail: String,
}

/// One kind of failure as the server (or the connection) put it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorExample {
    /// The HTTP status, 0 when there was none.
    pub http_status: u32,
    /// The status and the start of the body, or the error's text (at most 300 bytes).
    pub message: String,
    /// Requests that failed with this message.
    pub count: u64,
    /// The first agent that saw it.
    pub agent: String,
    /// A stream cut after its response head: how it ended and who ended it (D38).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamExample>,
}

/// How a cut stream ended, as the first request with the example's message saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamExample {
    /// `empty_body` (a clean end right after the head), `clean_end` (a clean end without
    /// `[DONE]`), `peer_closed` (FIN), `reset` (RST, RST_STREAM), `read_timeout`.
    pub ended: super::sets::StreamEnd,
    /// `peer` (the server, or the proxy that `server` and `via` name) or `client` (surge).
    pub ended_by: super::sets::EndedBy,
    /// SSE events and body bytes received before the end.
    pub events: u32,
    pub bytes: u64,
    /// `HTTP/1.1`, `HTTP/2` or `HTTP/3`.
    pub http_version: super::sets::HttpVersion,
    /// The response's `Server` and `Via` headers (`""` when absent).
    pub server: String,
    pub via: String,
}

impl StreamExample {
    pub fn of(c: &surge_proto::StreamCut) -> Self {
        let ended = super::sets::StreamEnd::from(c.end());
        Self {
            ended,
            ended_by: ended.by(),
            events: c.events,
            bytes: c.bytes,
            http_version: c.version().into(),
            server: c.server.clone(),
            via: c.via.clone(),
        }
    }
}

/// Rows per token-count source, for input and output counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenCounts {
    pub input: BTreeMap<Source, u64>,
    pub output: BTreeMap<Source, u64>,
}

/// The tokenizer a run counted with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerRef {
    pub path: String,
    pub sha256: String,
}

/// What was run, where, on what, for later comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetadata {
    pub model: String,
    pub served_model_name: String,
    pub benchmark_type: super::sets::BenchmarkType,
    pub dataset_name: String,
    pub input_len: Option<u32>,
    pub output_len: Option<u32>,
    pub random_range_ratio: f64,
    pub tokenizer: Option<TokenizerRef>,
    pub num_prompts: Option<u64>,
    pub max_concurrency: Option<u32>,
    pub request_rate: Rate,
    pub endpoint: String,
    pub base_url: String,
    pub hardware: Option<String>,
    pub engine: Option<String>,
    pub cluster_label: Option<String>,
    pub result_tag: Option<String>,
    pub saved_at_utc: String,
    pub surge_version: String,
    pub agents: Vec<String>,
    pub status: RunState,
}

/// How a run ended for the fleet: `complete`, `invalid` (an agent was lost), `partial`
/// (lost, with `--tolerate-agent-loss`) or `interrupted` (Ctrl-C, SIGTERM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Complete,
    Invalid,
    Partial,
    Interrupted,
    /// A state this version does not know (a file from a newer surge).
    #[serde(other)]
    Unknown,
}

impl RunState {
    pub fn of(s: &crate::fleet::outcome::RunStatus) -> Self {
        use crate::fleet::outcome::RunStatus;
        match s {
            RunStatus::Complete => Self::Complete,
            RunStatus::Invalid { .. } => Self::Invalid,
            RunStatus::Partial { .. } => Self::Partial,
            RunStatus::Interrupted | RunStatus::Terminated => Self::Interrupted,
        }
    }
}

/// The `client` block: where the load came from and whether it was the bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientBlock {
    pub surge_version: String,
    pub status: RunState,
    pub latency_mode: super::sets::LatencyMode,
    pub open_loop: bool,
    pub agents: Vec<AgentEntry>,
    /// `--min-agents`: the agents given but not reached, which the run went on without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents_missing: Vec<String>,
    /// Seconds the coordinator waited for agents that were not up yet (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_waited_s: Option<f64>,
    pub verdict: Verdict,
}

/// One agent in `client.agents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentEntry {
    pub address: String,
    pub hostname: String,
    pub cores: u32,
    /// The protocol version the agent speaks (one older than the coordinator's during a
    /// rolling upgrade, D43).
    #[serde(default)]
    pub protocol: u32,
    pub share: Option<ShareEntry>,
    pub completed: u64,
    pub failed: u64,
    pub rows_received: u64,
    /// The agent's own counts in its Done message (absent when it was lost): equal to
    /// the rows received when nothing was lost on the way.
    pub agent_reported: Option<Counts>,
    pub clock_offset_ms: f64,
    pub clock_offset_bound_ms: f64,
    /// Process CPU time over the run's wall time; 100 = one core.
    pub cpu_percent: f64,
    pub cpu_seconds: f64,
    /// The agent host's CPUs over the run: busy share of all of them, and the share of
    /// time some task waited for one (`/proc/pressure/cpu`; absent without PSI), 0..100.
    #[serde(default)]
    pub host_busy_pct: f64,
    #[serde(default)]
    pub cpu_pressure_pct: Option<f64>,
    /// Token events read in the same socket read as the previous one of their stream,
    /// over all token events (near 0 when the client keeps up with a server that writes
    /// one token at a time); absent when nothing was streamed.
    #[serde(default)]
    pub coalesced_token_fraction: Option<f64>,
    /// With `--server-itl-ms`: how late the coalesced reads imply the agent read (a read
    /// that brought `m` tokens of a stream read its first at least `m - 1` intervals
    /// late); lower bounds, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implied_read_lateness_ms: Option<ImpliedLateness>,
    /// Intended to actual send (open loop), microseconds.
    pub scheduling_lag_us: Lag,
    /// Pacing-timer wake-up lateness (open loop), microseconds.
    pub timer_wake_lateness_us: Lateness,
    pub max_in_flight: u32,
    pub reconnects: u64,
    pub stop_reason: AgentStop,
    pub health: String,
    /// Server scrapes this agent could not pass on (0 in the ordinary case).
    #[serde(default)]
    pub scrape_points_dropped: u64,
}

/// What a user waits for beside vLLM's metrics (D49): over the successful requests that
/// reasoned, `ttfo` (start to the first answer delta), `reasoning` (first to last reasoning
/// delta) and `answer_tpot`; over those with a tool call, `tool_call` (start to its first
/// delta); as `mean_ttfo_ms`, `p99_reasoning_ms`, ... at `--metric-percentiles`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningResult {
    pub requests_with_reasoning: u64,
    /// Reasoning deltas, counted by the client.
    pub reasoning_tokens: u64,
    /// `usage.completion_tokens_details.reasoning_tokens` summed, when the server sent it.
    pub server_reasoning_tokens: Option<u64>,
    /// Output tokens of those requests that were not reasoning.
    pub answer_tokens: u64,
    pub requests_with_tool_calls: u64,
    /// Tool calls those replies opened, and their deltas (the arguments' token events).
    #[serde(default)]
    pub tool_calls: u64,
    #[serde(default)]
    pub tool_call_tokens: u64,
    /// Replies that ended with `finish_reason: "tool_calls"`.
    #[serde(default)]
    pub tool_call_finishes: u64,
    #[serde(flatten)]
    pub latency: Latencies,
}

/// One `--precision` target at the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrecisionEntry {
    /// `ttft:p99:5%`.
    pub target: String,
    pub n: u64,
    pub estimate_ms: f64,
    pub low_ms: Option<f64>,
    pub high_ms: Option<f64>,
    /// (high - low) / estimate; null while a side is open.
    pub relative_width: Option<f64>,
    pub confidence: f64,
    /// Whether the width is within the target's.
    pub reached: bool,
}

/// What ended a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    NumPrompts,
    /// `--no-oversample` at the end of the file.
    Dataset,
    Duration,
    MaxRunTime,
    Interrupt,
    AgentLoss,
    /// `--precision`: the named percentiles' intervals were narrow enough (D62).
    Precision,
    /// A capacity level stopped early as over-saturated (D62).
    Saturated,
    /// A file written before the key existed (or by a newer surge with another reason).
    #[default]
    #[serde(rename = "", other)]
    Unknown,
}

impl EndedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NumPrompts => "num_prompts",
            Self::Dataset => "dataset",
            Self::Duration => "duration",
            Self::MaxRunTime => "max_run_time",
            Self::Interrupt => "interrupt",
            Self::AgentLoss => "agent_loss",
            Self::Precision => "precision",
            Self::Saturated => "saturated",
            Self::Unknown => "",
        }
    }
}

/// Why an agent's run ended, as the result names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStop {
    Finished,
    Duration,
    Stopped,
    Deadline,
    Lease,
    Signal,
    #[serde(rename = "coordinator gone")]
    CoordinatorGone,
    /// The coordinator lost the agent before it said it was done.
    Lost,
    /// A reason this version does not know (a file from a newer surge).
    #[serde(rename = "", other)]
    Unknown,
}

impl AgentStop {
    /// As the result names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::Duration => "duration",
            Self::Stopped => "stopped",
            Self::Deadline => "deadline",
            Self::Lease => "lease",
            Self::Signal => "signal",
            Self::CoordinatorGone => "coordinator gone",
            Self::Lost => "lost",
            Self::Unknown => "",
        }
    }

    /// The agent's `Done.stop`.
    pub fn of(s: surge_proto::StopReason) -> Self {
        use surge_proto::StopReason as S;
        match s {
            S::Finished => Self::Finished,
            S::Duration => Self::Duration,
            S::Stopped => Self::Stopped,
            S::Deadline => Self::Deadline,
            S::Lease => Self::Lease,
            S::Signal => Self::Signal,
            S::CoordinatorGone => Self::CoordinatorGone,
            S::Unspecified => Self::Unknown,
        }
    }
}

/// Read lateness implied by coalesced reads: mean over all token events, and the most.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ImpliedLateness {
    pub mean: f64,
    pub max: f64,
}

/// An agent's part of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareEntry {
    pub fraction: f64,
    /// The agent's first global request index.
    pub slice_start: u64,
    /// The agent's global request indices (D20): in every cycle of `index_cycle`
    /// consecutive indices, those at `index_positions`.
    pub index_cycle: u64,
    pub index_positions: Vec<u64>,
    pub num_prompts: Option<u64>,
    pub max_concurrency: u32,
    pub request_rate: Rate,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub completed: u64,
    pub failed: u64,
    /// Cancelled by the client (D21); agents of protocol 9 count them in `failed`.
    #[serde(default)]
    pub cancelled: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Lag {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Lateness {
    pub p99: u64,
    pub max: u64,
}

/// A level-run's place in its sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPosition {
    pub kind: crate::plan::sweep::Kind,
    pub level: f64,
    pub run: u32,
    pub runs: u32,
}

/// vLLM's probe results: counts and E2E latency of the `--probe-request-rate` probes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probes {
    pub probe_completed: u64,
    pub probe_failed: u64,
    pub probe_median_e2el_ms: f64,
    pub probe_p99_e2el_ms: f64,
    pub probe_max_e2el_ms: f64,
}

/// `--save-detailed`: one entry per request, in request order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Detailed {
    pub input_lens: Vec<u32>,
    pub output_lens: Vec<u32>,
    pub ttfts: Vec<f64>,
    pub e2els: Vec<f64>,
    pub itls: Vec<Vec<f64>>,
    pub start_times: Vec<f64>,
    pub agent_indices: Vec<usize>,
    pub errors: Vec<String>,
    /// The text each request generated, "" for a failed one (vLLM's key).
    #[serde(default)]
    pub generated_texts: Vec<String>,
    /// vLLM's `latencies` and `queue_times` of a `--duration` run (D3: only with
    /// `--save-detailed`; a `--num-prompts` run streams them from its spill instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latencies: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_times: Option<Vec<f64>>,
}

/// The level a sweep summary entry is at, keyed by what the sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelKey {
    Concurrency(Option<f64>),
    RequestRate(Option<f64>),
    MultiTurnConcurrency(Option<f64>),
}

/// `summary.json` of a sweep directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    pub kind: crate::plan::sweep::Kind,
    pub tag: String,
    pub runs_per_level: u32,
    pub levels: Vec<LevelSummary>,
    pub knee: KneeEntry,
    pub saved_at_utc: String,
}

/// One level of a sweep: statistics over its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelSummary {
    #[serde(flatten)]
    pub level: LevelKey,
    pub runs: usize,
    /// Per statistic (`request_throughput`, `p99_ttft_ms`, ...) across the runs.
    pub stats: BTreeMap<String, Summary>,
    pub knee: bool,
}

/// The knee found (or not) and the rule that found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeEntry {
    #[serde(flatten)]
    pub level: LevelKey,
    pub rule: KneeRuleEntry,
    pub searched: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KneeRuleEntry {
    pub efficiency: f64,
    pub latency_growth: f64,
}

/// `validate.json`: the client-overhead table, and the verdict with `--against`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationResult {
    pub target: String,
    pub streaming: bool,
    pub requests_per_level: u64,
    pub tokens_per_request: u32,
    pub bytes_per_token_estimate: Option<f64>,
    pub rows: Vec<ValidationRow>,
    pub saved_at_utc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<Headroom>,
    /// How a level ended when it did not complete (`interrupted`, `invalid`, ...): the last
    /// row is that level's partial measurement and the levels after it were not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<RunState>,
}

/// One concurrency level of `surge validate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationRow {
    pub concurrency: u32,
    pub requests_per_sec: f64,
    pub tokens_per_sec: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub success_rate: f64,
    /// The level's client-bound verdict.
    #[serde(default)]
    pub client_bound: bool,
    #[serde(default)]
    pub client_bound_reasons: Vec<String>,
    pub agents: Vec<AgentEntry>,
}

/// `surge validate --against`: the client's capacity over what a run needed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Headroom {
    pub file: String,
    pub run_concurrency: u32,
    pub run_request_throughput: f64,
    pub validated_concurrency: u32,
    pub validated_request_throughput: f64,
    pub headroom: f64,
    pub min_headroom: f64,
    pub pass: bool,
}

/// The two numbers `--against` reads from a result file.
#[derive(Debug, Clone, Deserialize)]
pub struct JudgedRun {
    pub request_throughput: f64,
    pub max_concurrency: Option<u32>,
}

/// `now` as results stamp it.
pub fn saved_at(now: chrono::DateTime<chrono::Utc>) -> String {
    now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
