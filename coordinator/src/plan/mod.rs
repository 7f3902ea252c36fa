//! What a benchmark is, as values: one run ([`RunPlan`]), and the plans derived from it
//! by changing fields (sweep levels, matrix profiles, validation levels), plus the
//! deterministic split of a run across agents. Plans are built once from flags and
//! configuration by `cli`; nothing here parses or prints.

pub mod capacity;
pub mod matrix;
mod normal;
pub mod objective;
pub mod split;
pub mod sweep;
pub mod validate;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::{Backend, DatasetSpec, PromptItem};

/// The metric families of `--percentile-metrics`, in vLLM's order.
pub const METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];
/// What a user waits for beside vLLM's metrics (D49): time to the first answer token, the
/// reasoning's duration, the answer's own TPOT, time to the first tool-call delta.
pub const REASONING_METRICS: [&str; 4] = ["answer_tpot", "ttfo", "reasoning", "tool_call"];

/// vLLM's client-queue metrics, only when named in `--percentile-metrics` (and, as vLLM,
/// with `--max-concurrency`; the second also with a finite `--request-rate`).
pub const QUEUE_METRICS: [&str; 2] = ["client_queue_time", "e2el_including_client_queue"];

/// vLLM's ramp-up: the rate of request k goes from `start` to `end` requests/s with
/// k / (N - 1), linearly or geometrically (each agent ramps its share over its slice).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RampPlan {
    pub exponential: bool,
    pub start: u32,
    pub end: u32,
}

impl RampPlan {
    pub fn name(&self) -> &'static str {
        if self.exponential { "exponential" } else { "linear" }
    }

    /// The whole run's rate at `progress` (0..=1) through its requests.
    pub fn rate(&self, progress: f64) -> f64 {
        let (s, e, p) = (f64::from(self.start), f64::from(self.end), progress.clamp(0.0, 1.0));
        if self.exponential { s * (e / s).powf(p) } else { s + (e - s) * p }
    }
}

/// `--num-prompts` when neither it nor `--duration` is given (vLLM's default).
pub const DEFAULT_NUM_PROMPTS: u64 = 1000;
/// `num_prompts` of a run without a request cap (`--duration` alone).
pub const UNBOUNDED: u64 = u64::MAX;
/// `--max-run-time` when not given and no `--duration` is.
pub const DEFAULT_MAX_RUN_TIME: Duration = Duration::from_secs(3600);
/// What `--max-run-time` adds to `--duration` when not given (D6).
pub const DURATION_GRACE: Duration = Duration::from_secs(60);

/// `--graceful-stop`'s default (k6's `gracefulStop`).
pub const DEFAULT_GRACEFUL_STOP: Duration = Duration::from_secs(30);

/// vLLM's spelling of a percentile (or a level) in keys, labels and file names: `99`, `99.9`.
pub fn percentile_word(p: f64) -> String {
    if p.fract() == 0.0 { format!("{}", p as i64) } else { format!("{p}") }
}

/// Service-level objectives in ms (`--goodput ttft:200 tpot:50`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
    /// surge's: the time to first output (D49; TTFT for a reply that did not reason).
    pub ttfo_ms: Option<f64>,
}

impl Slo {
    pub fn is_empty(&self) -> bool {
        self.ttft_ms.is_none() && self.tpot_ms.is_none() && self.e2el_ms.is_none() && self.ttfo_ms.is_none()
    }
}

/// The run's tokenizer: the file as shipped to agents, its hash, and the parsed tokenizer.
#[derive(Clone)]
pub struct TokenizerFile {
    pub path: PathBuf,
    pub bytes: Arc<Vec<u8>>,
    pub sha256: String,
    pub tok: Arc<surge_core::data::tokenizer::Tok>,
}

impl std::fmt::Debug for TokenizerFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenizerFile").field("path", &self.path).field("sha256", &self.sha256).finish()
    }
}

/// The same file is the same tokenizer.
impl PartialEq for TokenizerFile {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.sha256 == other.sha256
    }
}

/// Coordinator <-> agent TLS material.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The target's TLS as the plan carries it to agents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetTls {
    pub insecure: bool,
    /// PEM bytes of `--ca-cert` (read once, when the plan is made).
    pub ca_pem: Vec<u8>,
}

impl TargetTls {
    /// The same settings for this process's own requests to the target (readiness,
    /// model list, `/metrics`).
    pub fn client(&self) -> surge_core::transport::tls::TargetTls {
        surge_core::transport::tls::TargetTls { insecure: self.insecure, ca_pem: self.ca_pem.clone() }
    }
}

/// Where the load runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Agents {
    /// One in-process agent behind the same gRPC service remote agents serve.
    Embedded,
    /// Remote agents; `tls` is `None` only with `--agents-plaintext` on loopback.
    Remote { addrs: Vec<String>, tls: Option<TlsPaths>, wait: ConnectWait },
}

/// How long to wait for agents that are not up yet (they refuse or time out: the usual
/// case when agents and the coordinator start together), and with how few to go on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectWait {
    /// `--agent-connect-timeout`.
    pub timeout: Duration,
    /// `--min-agents` (`None`: every agent).
    pub min_agents: Option<usize>,
}

/// The flags a sweep, a search or a matrix was given, kept in each result it writes and
/// compared by `--resume` (D93). They say how a plan was asked for, not what it is: no part of
/// its equality (D78 compares plans built with and without each flag).
#[derive(Debug, Clone, Default)]
pub struct Settings(pub Vec<(String, Vec<String>)>);

impl PartialEq for Settings {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Settings {
    /// As a result keeps them: by flag.
    pub fn map(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        self.0.iter().cloned().collect()
    }
}

/// A base URL's default name: its `host:port` (the scheme's port when it names none).
pub fn default_name(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(u) => {
            let port = u.port_u16().unwrap_or(if u.scheme_str() == Some("https") { 443 } else { 80 });
            format!("{}:{port}", u.host().unwrap_or_default())
        }
        Err(_) => url.to_string(),
    }
}

/// `--accuracy`'s questions and `--accuracy-ratio` (D71).
pub type Accuracy = (Arc<[surge_proto::AccuracyItem]>, f64);

/// One replica of the target (D69).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPlan {
    /// Its base URL, without a trailing `/`.
    pub url: String,
    /// Its share among the endpoints (at least 1).
    pub weight: u32,
    /// Its name in results: given, else `host:port` of its URL (with the path when two
    /// share it).
    pub name: String,
}

/// Where a run's requests go (D69): one endpoint or several, how a request picks one,
/// and the response header that names the replica behind a router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointsPlan {
    /// At least one; the first is the run's `base_url`.
    pub list: Vec<EndpointPlan>,
    pub policy: surge_proto::EndpointPolicy,
    /// `--replica-header`, lower case.
    pub replica_header: Option<String>,
}

impl EndpointsPlan {
    /// One endpoint, `url`, and nothing else.
    pub fn single(url: &str) -> Self {
        let name = default_name(url);
        Self {
            list: vec![EndpointPlan { url: url.to_string(), weight: 1, name }],
            policy: surge_proto::EndpointPolicy::RoundRobin,
            replica_header: None,
        }
    }

    /// Several endpoints: requests are spread over them.
    pub fn several(&self) -> bool {
        self.list.len() > 1
    }
}

/// A validated `surge run`. Two plans are equal when they run the same (D78: a flag whose
/// removal leaves the plan equal has no effect).
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    /// The first endpoint's base URL (readiness, the model's name, the profiler).
    pub base_url: String,
    /// Every endpoint (D69).
    pub endpoints: EndpointsPlan,
    pub endpoint: String,
    pub backend: Backend,
    /// vLLM's name for the backend in results.
    pub backend_name: &'static str,
    pub model: Option<String>,
    pub served_model_name: Option<String>,
    pub dataset: DatasetSpec,
    pub dataset_name: &'static str,
    /// `--tokenizer`: shipped to every agent with its hash.
    pub tokenizer: Option<TokenizerFile>,
    /// File datasets: the parsed prompts (request i uses `prompts[i % len]`).
    pub prompts: Arc<Vec<PromptItem>>,
    /// Requests to send; [`UNBOUNDED`] for a duration run without a cap.
    pub num_prompts: u64,
    pub duration: Option<Duration>,
    /// With a duration: `--graceful-stop` (D21; default 30 s).
    pub graceful_stop: Option<Duration>,
    /// The time series' slice.
    pub timeslice: Duration,
    pub max_concurrency: Option<u32>,
    pub request_rate: f64,
    pub burstiness: f64,
    /// `--ramp-up-strategy` (then `request_rate` is infinite, as vLLM requires).
    pub ramp: Option<RampPlan>,
    /// A timed trace's replay speed-up (`None`: not a trace).
    pub trace_speedup: Option<f64>,
    pub num_warmups: u32,
    pub ignore_eos: bool,
    pub temperature: Option<f64>,
    /// The sampling flags and `--extra-body`, as one JSON object (`None`: nothing extra).
    pub extra_body: Option<String>,
    pub seed: u64,
    pub percentile_metrics: Vec<&'static str>,
    pub metric_percentiles: Vec<f64>,
    pub slo: Slo,
    pub save_result: bool,
    pub save_detailed: bool,
    /// `--save-rows PATH`.
    pub save_rows: Option<PathBuf>,
    pub result_dir: Option<PathBuf>,
    pub result_filename: Option<String>,
    pub metadata: Vec<(String, String)>,
    pub ready_timeout: Option<Duration>,
    /// `--http-version` (`Auto`: not forced).
    pub http_version: surge_proto::HttpChoice,
    /// `--h3-connections` (0: one per 100 requests in flight).
    pub h3_connections: u32,
    /// How the target's certificate is checked (`--insecure`, `--ca-cert`).
    pub target_tls: TargetTls,
    pub headers: Vec<(String, String)>,
    pub agents: Agents,
    pub tolerate_agent_loss: bool,
    /// `--no-initial-test`.
    pub no_initial_test: bool,
    /// `--no-oversample` cut `num_prompts` to a file dataset's length: the run ends at
    /// the end of the file (`ended_by = dataset`, D20).
    pub ends_at_dataset: bool,
    /// `--max-failure-rate`.
    pub max_failure_rate: f64,
    /// `--fail-on-anomaly` (D70): a run with an anomaly exits 1.
    pub fail_on_anomaly: bool,
    /// `--check-determinism` (D70).
    pub check_determinism: bool,
    /// `--accuracy` and `--accuracy-ratio` (D71): the questions and the share of requests
    /// that ask them.
    pub accuracy: Option<Accuracy>,
    pub max_run_time: Duration,
    /// `--read-timeout`: the longest wait for the next body byte of a response (`None`: no limit).
    pub read_timeout: Option<Duration>,
    pub verdict: VerdictLimits,
    /// The ITL the server intends (`--server-itl-ms`; `surge validate` sets its echo's):
    /// with it, read coalescing implies how late the client read.
    pub server_itl_ms: Option<f64>,
    /// The server's `/metrics` beside the run; `None` with `--no-scrape-metrics`.
    pub scrape: Option<ScrapePlan>,
    /// `--gpu-metrics-url`: GPU exporter pages scraped beside the run (D36).
    pub gpu: Option<GpuPlan>,
    /// How often agents with `--gpu nvml` read their GPUs (`--scrape-interval`).
    pub gpu_sample_interval: Duration,
    /// `--energy-price-kwh`: the price of a kWh (USD).
    pub energy_price_kwh: Option<f64>,
    /// `--prometheus-listen`: serve the live metrics here.
    pub prometheus_listen: Option<std::net::SocketAddr>,
    /// `--live-linger`: the live endpoint keeps serving the final values this long.
    pub live_linger: Duration,
    /// `--otlp-endpoint`: export traces of the run and its requests.
    pub otlp: Option<OtlpPlan>,
    /// `--cost-per-hour`: the deployment's price per hour (USD).
    pub cost_per_hour: Option<f64>,
    /// `--request-id-prefix` (`None`: `bench-<8 hex digits of the run id>-`).
    pub request_id_prefix: Option<String>,
    /// `--append-result`: append the result as a JSON line to the result file.
    pub append_result: bool,
    /// `--label`: the result's `label` and its default file name's prefix (vLLM's).
    pub label: Option<String>,
    /// `--lora-modules` (empty: every request names the model).
    pub lora_modules: Vec<String>,
    /// `--lora-assignment random` (else round-robin).
    pub lora_random: bool,
    /// `--probe-request-rate` (0: no probes).
    pub probe_rate: f64,
    /// `--plot-timeline`: surge's report beside the result.
    pub plot_timeline: bool,
    /// `--show-http-phases`: the summary gains the HTTP phases block (D35).
    pub show_http_phases: bool,
    /// Conversations: `num_prompts` counts sessions.
    pub multi_turn: Option<MultiTurnPlan>,
    /// Flags given that the run does not read (D44): "--X has no effect with --Y".
    pub ignored_flags: Vec<String>,
    /// `--dry-run`: plan and make the dataset, send nothing.
    pub dry_run: bool,
    /// `--steady-state-threshold` and `--steady-state-min-window`; `None` with
    /// `--no-steady-state`. Which window is looked for follows the load ([`RunPlan::steady_plan`]).
    pub steady: Option<(f64, Option<f64>)>,
    /// `--profile`: the server's profiler around the load.
    pub profile: Option<ProfilePlan>,
    /// `--precision`: the run ends once each of these percentiles is this precise (D62).
    pub precision: Vec<Precision>,
    /// `--confidence`: of every interval a decision is made from (D47).
    pub confidence: f64,
}

/// `--precision ttft:p99:5%`: the run may end once the percentile's interval is at most
/// `width` (a fraction) of its estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Precision {
    pub metric: objective::Metric,
    pub pct: f64,
    pub width: f64,
}

impl Precision {
    /// `ttft:p99:5%`.
    pub fn parse(s: &str) -> Result<Precision, String> {
        let bad = || {
            format!("--precision {s:?}: expected METRIC:PCT:WIDTH%, e.g. ttft:p99:5% (METRIC ttft, tpot, itl or e2el)")
        };
        let mut parts = s.split(':');
        let (Some(m), Some(p), Some(w), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let metric = objective::Metric::parse(m).ok_or_else(bad)?;
        let pct: f64 = p.strip_prefix('p').ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let width: f64 = w.strip_suffix('%').ok_or_else(bad)?.parse::<f64>().map_err(|_| bad())? / 100.0;
        if !(pct > 0.0 && pct < 100.0 && width > 0.0 && width.is_finite()) {
            return Err(bad());
        }
        Ok(Precision { metric, pct, width })
    }
}

/// Conversations (`--multi-turn`, a session trace): D31.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiTurnPlan {
    /// Generated turns (the random dataset); else a session trace's.
    pub generated: bool,
    /// `--multi-turn-num-turns` (vllm-bench's `turns_per_conversation`).
    pub num_turns: u32,
    pub turns_min: u32,
    pub turns_max: u32,
    /// 0: `--random-input-len`.
    pub per_turn_input_len: u32,
    pub delay_ms: f64,
    pub exponential: bool,
    /// Sessions open at once (`None`: no limit).
    pub concurrency: Option<u32>,
    pub prefix_global_ratio: f64,
    pub prefix_conversation_ratio: f64,
    pub shared_system_prompt_len: u32,
    /// `None`: `--no-session-id-header`.
    pub session_header: Option<String>,
    /// `--tool-loop` (D65).
    pub tool_loop: Option<ToolLoopPlan>,
}

/// An agent loop's steps (D65).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolLoopPlan {
    pub latency_ms: f64,
    pub exponential: bool,
    pub result_len: u32,
    pub max_steps: u32,
}

/// OTLP trace export.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpPlan {
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// `--otlp-header K=V` (e.g. Langfuse's basic auth).
    pub headers: Vec<(String, String)>,
    /// Share of request spans exported (decided from the trace id, D19).
    pub sample_ratio: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

/// Scraping the server's metrics (D11).
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapePlan {
    /// `--metrics-url` (repeatable), else `{base-url}/metrics`.
    pub urls: Vec<String>,
    /// Whether the URLs were given: then a failing scrape is reported, not a sign the
    /// server has no metrics.
    pub explicit: bool,
    /// `--scrape-metric`: families kept besides the known prefixes.
    pub extra: Vec<String>,
    pub interval: Duration,
    /// `--scrape-from agent`: the first agent scrapes (the target may be reachable only
    /// from agents).
    pub from_agent: bool,
    /// The target's TLS settings (`--ca-cert`, `--insecure`), for https URLs.
    pub tls: TargetTls,
}

/// GPU exporter pages (DCGM, AMD) scraped by the coordinator beside a run (D36).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlan {
    /// `--gpu-metrics-url` (repeatable).
    pub urls: Vec<String>,
    /// `--scrape-interval`.
    pub interval: Duration,
    /// The target's TLS settings, for https pages.
    pub tls: TargetTls,
}

/// Thresholds of the client-bound verdict (documented in `surge run --help`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerdictLimits {
    /// Fraction of an agent's cores above which its CPU counts as saturated.
    pub cpu_fraction: f64,
    /// Send lag p99 above which an open-loop client was late.
    pub lag_p99_us: u64,
    /// Achieved send rate this fraction below the requested rate.
    pub rate_shortfall: f64,
    /// Busy share of all the agent host's CPUs (0..100) above which the host is saturated.
    pub host_busy_pct: f64,
    /// Share of wall time some task waited for a CPU (PSI "some", 0..100) above which the
    /// client competed for CPUs.
    pub cpu_pressure_pct: f64,
    /// Share of token events read together with an earlier one of their stream.
    pub coalesced_fraction: f64,
}

impl Default for VerdictLimits {
    fn default() -> Self {
        Self {
            cpu_fraction: 0.85,
            lag_p99_us: 1_000,
            rate_shortfall: 0.01,
            host_busy_pct: 90.0,
            cpu_pressure_pct: 50.0,
            coalesced_fraction: 0.01,
        }
    }
}

/// Which steady state a run looks for (D45; computed by `analysis::steady`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SteadyPlan {
    /// In flight at least `threshold x target` (`--steady-state-threshold`,
    /// `--max-concurrency`).
    Closed { target: u32, threshold: f64, min_window_s: Option<f64> },
    /// Completions within 5 % of `rate` per slice of `slice_s`.
    Open { rate: f64, slice_s: f64, min_window_s: Option<f64> },
}

/// `--profile`, `--profile-batch-threshold`, `--profile-duration` (vllm-bench's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfilePlan {
    /// Start when the server runs this many requests (else at the start of the load).
    pub batch_threshold: Option<u32>,
    /// How long a threshold-started profile captures.
    pub duration: Duration,
}

impl RunPlan {
    /// The steady state this run looks for (D45): a closed loop's window by concurrency,
    /// an open loop's by rate; none for ramps and conversations, or with `--no-steady-state`.
    pub fn steady_plan(&self) -> Option<SteadyPlan> {
        let (threshold, min_window_s) = self.steady?;
        if self.ramp.is_some() || self.multi_turn.is_some() {
            return None;
        }
        // A concurrency bound decides (a paced run under it fills it as a closed loop does);
        // a rate alone is an open loop.
        match (self.max_concurrency, self.request_rate.is_finite()) {
            (Some(target), _) => Some(SteadyPlan::Closed { target, threshold, min_window_s }),
            (None, true) => {
                Some(SteadyPlan::Open { rate: self.request_rate, slice_s: self.timeslice.as_secs_f64(), min_window_s })
            }
            (None, false) => None,
        }
    }

    /// A pooling backend (embeddings, pooling, rerank): E2EL and input counts only, as
    /// vLLM reports them.
    pub fn pooling(&self) -> bool {
        use surge_proto::Backend as B;
        matches!(
            self.backend,
            B::OpenaiEmbeddings | B::OpenaiEmbeddingsChat | B::InfinityEmbeddings | B::VllmPooling | B::VllmRerank
        )
    }

    /// The name sent in requests.
    pub fn request_model(&self) -> &str {
        self.served_model_name.as_deref().or(self.model.as_deref()).unwrap_or("")
    }
}
