//! The command line: options as clap parses them, with `vllm bench serve`'s flag names
//! ([`Cli`]), the configuration file ([`config`]), the dataset files ([`dataset`],
//! [`crate::dataset`]), and [`build`], which turns them once into the typed plans of
//! [`crate::plan`]. Every usage error is a [`UsageError`] naming the flag, file or key.

pub mod build;
pub mod config;
pub mod conversation;
pub mod dataset;
pub mod endpoints;
pub mod ignored;
mod mm;
pub mod parse;
pub mod reference;
pub mod url;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// A usage error: bad flags, values or configuration (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[derive(Debug, Parser)]
#[command(name = "surge", version, about = "Distributed load generator for LLM serving endpoints")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's command line (exits on a usage error, as clap does), and
    /// records which flags of a load command were given on it, for [`ignored`].
    pub fn parse_recording() -> Self {
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        Self::try_parse_recording(&argv).unwrap_or_else(|e| e.exit())
    }

    /// Parses `argv` (the program's name first) as [`Cli::parse_recording`] does, with
    /// clap's error instead of an exit.
    pub fn try_parse_recording(argv: &[std::ffi::OsString]) -> Result<Self, clap::Error> {
        let mut cmd = <Self as clap::CommandFactory>::command();
        let m = cmd.try_get_matches_from_mut(argv)?;
        Self::from_matches(&cmd, &m, argv)
    }

    /// The command line `argv` that `cmd` (this type's command) parsed into `m`, with the
    /// flags given recorded as [`Cli::try_parse_recording`] records them.
    pub fn from_matches(
        cmd: &clap::Command,
        m: &clap::ArgMatches,
        argv: &[std::ffi::OsString],
    ) -> Result<Self, clap::Error> {
        let mut cli = <Self as clap::FromArgMatches>::from_arg_matches(m)?;
        cli.record_given(cmd, m, argv);
        Ok(cli)
    }

    /// Fills the load command's `RunArgs::given` from its matches, and `RunArgs::argv`
    /// with the command line they came from (to build its plan without each flag, D78).
    pub fn record_given(&mut self, cmd: &clap::Command, m: &clap::ArgMatches, argv: &[std::ffi::OsString]) {
        let Some((name, sub)) = m.subcommand() else { return };
        let Some(sub_cmd) = cmd.find_subcommand(name) else { return };
        let run = match &mut self.command {
            Command::Run(a) => &mut **a,
            Command::Sweep(a) => &mut a.run,
            Command::Matrix(a) => &mut a.run,
            Command::Capacity(a) => &mut a.run,
            Command::Fleet(FleetCommand::Check(a)) => {
                if let (Some((_, check)), Some(check_cmd)) = (sub.subcommand(), sub_cmd.find_subcommand("check")) {
                    a.given = ignored::given(check_cmd, check);
                    a.argv = argv.to_vec();
                }
                return;
            }
            _ => return,
        };
        run.given = ignored::given(sub_cmd, sub);
        run.settings = ignored::settings(sub_cmd, sub);
        run.argv = argv.to_vec();
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark an endpoint once (flags as `vllm bench serve`).
    #[command(args_override_self = true)]
    Run(Box<RunArgs>),
    /// Run a saturation sweep over concurrency or request-rate levels, repeated, with
    /// confidence intervals and an optional knee search.
    #[command(args_override_self = true)]
    Sweep(Box<SweepArgs>),
    /// Run the standard profile matrix (or the profiles of --config).
    #[command(args_override_self = true)]
    Matrix(Box<MatrixArgs>),
    /// Find the most load the target carries within its SLOs: levels searched up and
    /// bisected, each judged by its percentiles' confidence intervals.
    #[command(args_override_self = true)]
    Capacity(Box<CapacityArgs>),
    /// Measure the client against the echo server (the client-overhead table), or judge a
    /// result with --against.
    #[command(args_override_self = true)]
    Validate(Box<ValidateArgs>),
    /// Serve the echo / mock OpenAI server.
    Echo(Box<surge_echo::EchoArgs>),
    /// Create a CA and issue certificates for coordinator <-> agent mutual TLS.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Start the echo server on a loopback port and run a short benchmark against it.
    Demo,
    /// Check the agents before a long run: one line per agent (certificate, version,
    /// cores, limits, clock, allowed targets, and with --base-url whether it reaches the
    /// target); exit 0 when every agent can run the load the flags plan (as `surge run`'s).
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Put results side by side: BASE against each CANDIDATE (result files or sweep
    /// directories, matched by level); --fail-if gates on a regression.
    Compare(CompareArgs),
    /// Write one self-contained HTML report (inline SVG charts, works offline) of result
    /// files, sweep or matrix directories (several overlay); --png writes each chart as PNG.
    Report(ReportArgs),
}

#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// Check every --agents agent against the load `surge run` with the same flags would plan.
    #[command(args_override_self = true)]
    Check(Box<RunArgs>),
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A result file, a sweep directory or a matrix directory; several are overlaid.
    #[arg(required = true, num_args = 1.., value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The HTML file (default: report.html in a directory given first, else the first
    /// result's name with .html).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write every chart as a PNG file in DIR, named after the chart.
    #[arg(long = "png", value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// The deployment's price per hour (USD): prices results saved without a cost.
    #[arg(long = "cost-per-hour", value_name = "USD")]
    pub cost_per_hour: Option<f64>,
}

/// `--endpoint-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EndpointPolicyArg {
    /// In each agent's send order, by weight.
    #[value(name = "round-robin")]
    RoundRobin,
    /// A seeded draw per request, by weight.
    Random,
    /// The endpoint with the fewest of the agent's requests in flight per unit of weight.
    #[value(name = "least-in-flight")]
    LeastInFlight,
    /// By a hash of the conversation (of the request index without one): a session's
    /// turns all go to one endpoint, the same from every agent.
    Session,
}

impl EndpointPolicyArg {
    /// As the wire carries it.
    pub fn wire(self) -> surge_proto::EndpointPolicy {
        match self {
            Self::RoundRobin => surge_proto::EndpointPolicy::RoundRobin,
            Self::Random => surge_proto::EndpointPolicy::Random,
            Self::LeastInFlight => surge_proto::EndpointPolicy::LeastInFlight,
            Self::Session => surge_proto::EndpointPolicy::Session,
        }
    }
}

/// `--lora-assignment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoraAssignmentArg {
    /// A seeded draw per request index.
    Random,
    /// Module i % n for request i.
    #[value(name = "round-robin")]
    RoundRobin,
}

/// `--ramp-up-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RampArg {
    Linear,
    Exponential,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A result file or a sweep directory, then one or more to compare with it.
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Exit 1 when a metric's relative change breaches a rule: 'METRIC>+10%' or
    /// 'METRIC<-5%' (e.g. 'median_ttft_ms>+10%', 'output_throughput<-5%'); repeatable.
    #[arg(long = "fail-if", value_name = "RULE")]
    pub fail_if: Vec<String>,
    /// Also write the comparison as an HTML report with the inputs' curves overlaid.
    #[arg(long = "html", value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Capacity searches (`surge capacity` directories): exit 1 when a candidate's
    /// capacity is more than this percentage below the base's, e.g. 5%.
    #[arg(long = "max-capacity-drop", value_name = "PERCENT")]
    pub max_capacity_drop: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Write DIR/ca.pem and DIR/ca.key.
    Init {
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Write DIR/NAME.pem and DIR/NAME.key, signed by the CA in --ca.
    Issue {
        #[arg(long, value_name = "DIR")]
        ca: PathBuf,
        #[arg(long)]
        name: String,
        /// Subject alternative names: host names or IP addresses (repeatable).
        #[arg(long = "san", value_name = "HOST_OR_IP")]
        sans: Vec<String>,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// `--otlp-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtlpProtocolArg {
    Grpc,
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

/// `--scrape-from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScrapeFrom {
    Coordinator,
    Agent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// OpenAI /v1/completions, streamed.
    Openai,
    /// vLLM's name for the same (`--backend vllm`): OpenAI /v1/completions.
    Vllm,
    /// OpenAI /v1/chat/completions, streamed.
    OpenaiChat,
    /// OpenAI /v1/responses, streamed (output text and reasoning deltas are tokens).
    OpenaiResponses,
    /// OpenAI /v1/audio/transcriptions (or translations with --endpoint), streamed; audio
    /// files of --dataset-name custom_audio.
    OpenaiAudio,
    /// OpenAI /v1/embeddings with the prompt as `input` (not streamed).
    OpenaiEmbeddings,
    /// /v1/embeddings with the prompt as chat `messages`.
    OpenaiEmbeddingsChat,
    /// /v1/embeddings, CLIP-style: text or image inputs.
    OpenaiEmbeddingsClip,
    /// /v1/embeddings, VLM2Vec-style chat messages.
    OpenaiEmbeddingsVlm2vec,
    /// Infinity's /embeddings.
    InfinityEmbeddings,
    /// Infinity's /embeddings, CLIP-style.
    InfinityEmbeddingsClip,
    /// vLLM's /pooling.
    VllmPooling,
    /// vLLM's /rerank: a query and documents, scores back.
    VllmRerank,
    /// A plain POST of the prompt as the body (e.g. the echo route).
    Http,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DatasetArg {
    /// Random tokens (exact lengths with --tokenizer, else common words).
    Random,
    /// The same --prompt every time.
    Fixed,
    /// A ShareGPT JSON file (--dataset-path): first human turn = prompt.
    Sharegpt,
    /// A JSONL file (--dataset-path): {"prompt": ..., "output_tokens": N} or {"messages": [...]} per line.
    Custom,
    /// Shared prefixes with random suffixes, for prefix-cache tests.
    PrefixRepetition,
    /// A JSONL trace (--dataset-path) replayed at its timestamps: Mooncake's form
    /// {"timestamp": MS, "input_length": N, "output_length": M, "hash_ids": [...]} or
    /// {"timestamp": MS, "prompt": ...}.
    #[value(name = "timed_trace", alias = "timed-trace", alias = "mooncake")]
    TimedTrace,
    /// BurstGPT's CSV (--dataset-path): GPT-4 rows' request and response lengths.
    Burstgpt,
    /// Spec-Bench's question.jsonl (--dataset-path): the first turn of each question.
    #[value(name = "spec_bench", alias = "spec-bench")]
    SpecBench,
    /// Poem lines (--dataset-path): vLLM's sonnet prompts.
    Sonnet,
    /// A local JSON/JSONL copy (--dataset-path) of the Hugging Face dataset --hf-name.
    Hf,
    /// Random text plus random JPEG images in chat content (--backend openai-chat).
    #[value(name = "random-mm", alias = "random_mm")]
    RandomMm,
    /// One random query and --random-batch-size random documents per request
    /// (--backend vllm-rerank; --num-prompts counts documents).
    #[value(name = "random-rerank", alias = "random_rerank")]
    RandomRerank,
    /// Local audio files (--dataset-path: a directory of .wav/.flac files, or vLLM's JSONL
    /// {"audio": PATH, "prompt": ..., "output_tokens": N}) for --backend openai-audio.
    #[value(name = "custom_audio", alias = "custom-audio")]
    CustomAudio,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten, next_help_heading = "Target")]
    pub target: TargetArgs,
    #[command(flatten, next_help_heading = "HTTP and TLS to the target")]
    pub transport: TransportArgs,
    #[command(flatten, next_help_heading = "Dataset")]
    pub dataset: DatasetArgs,
    #[command(flatten, next_help_heading = "Conversations (multi-turn)")]
    pub conversation: conversation::ConversationArgs,
    #[command(flatten, next_help_heading = "Load shape")]
    pub load: LoadArgs,
    #[command(flatten, next_help_heading = "Sampling")]
    pub sampling: SamplingArgs,
    #[command(flatten, next_help_heading = "Results")]
    pub output: OutputArgs,
    #[command(flatten, next_help_heading = "Server view")]
    pub server: ServerViewArgs,
    #[command(flatten, next_help_heading = "Live metrics and traces")]
    pub telemetry: TelemetryArgs,
    #[command(flatten, next_help_heading = "Client verdict")]
    pub verdict: VerdictArgs,
    #[command(flatten, next_help_heading = "Agents and their TLS")]
    pub fleet: FleetArgs,
    /// Coordinator config file (TOML: agents, tls-ca, tls-cert, tls-key).
    #[arg(long, help_heading = "Agents and their TLS", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// When an agent is lost, keep the others' results and mark the run partial.
    #[arg(long, help_heading = "Agents and their TLS")]
    pub tolerate_agent_loss: bool,
    /// Flags given that this run would not read (e.g. --hf-name with --dataset-name
    /// random) are usage errors (exit 2) instead of warnings.
    #[arg(long, help_heading = "Checks")]
    pub strict: bool,
    /// Build the plan and the dataset (on the agents too with --agents), print each
    /// agent's request count, the input and output length statistics and the first
    /// prompt; send nothing.
    #[arg(long = "dry-run", help_heading = "Checks")]
    pub dry_run: bool,
    /// The long names of the flags given on the command line (filled by
    /// [`Cli::parse_recording`]; empty when the arguments were built in code).
    #[arg(skip)]
    pub given: Vec<String>,
    /// The whole command line these arguments were parsed from (empty when built in code).
    #[arg(skip)]
    pub argv: Vec<std::ffi::OsString>,
    /// The flags given and their values, as `--resume` compares them (D93).
    #[arg(skip)]
    pub settings: Vec<(String, Vec<String>)>,
}

/// `surge run`'s flags, "Target": the server under test: where, which API, which model, how to reach it.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Server base URL, e.g. http://127.0.0.1:8000 (overrides --host/--port). Repeat it
    /// for several replicas: each request goes to one of them (--endpoint-policy) and the
    /// result has each one's numbers (`endpoints`).
    #[arg(long, value_name = "URL", action = clap::ArgAction::Append)]
    pub base_url: Vec<String>,
    /// The replicas from a file instead: one base URL per line, then optionally its
    /// weight and its name (`http://10.0.0.7:8000 2 gpu-a`); `#` starts a comment.
    #[arg(long = "endpoints", value_name = "FILE", conflicts_with = "base_url")]
    pub endpoints: Option<PathBuf>,
    /// How a request picks one of several endpoints; each agent applies it to its own share.
    #[arg(long = "endpoint-policy", value_enum, default_value = "round-robin")]
    pub endpoint_policy: EndpointPolicyArg,
    /// The response header that names the replica behind a router which served the
    /// request (e.g. x-served-by, or server/via where a proxy puts it): the result
    /// reports the router's balance and session affinity (`replicas`).
    #[arg(long = "replica-header", value_name = "NAME")]
    pub replica_header: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// API path (default: /v1/completions, /v1/chat/completions or /echo by backend).
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long, value_enum, default_value = "openai")]
    pub backend: BackendArg,
    /// Model name (default: the first model the server lists at /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// Name sent in requests when the server serves the model under another name.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// LoRA adapters the server serves: each request names one of them as its `model`
    /// (the initial test and warm-ups name the base model), as vLLM's flag.
    #[arg(long = "lora-modules", num_args = 1.., action = clap::ArgAction::Set, value_name = "NAME")]
    pub lora_modules: Vec<String>,
    /// How requests are given a --lora-modules adapter: random (seeded by --seed and the
    /// request index, the same on every agent) or round-robin (request i: module i % n).
    #[arg(long = "lora-assignment", value_enum, default_value = "random")]
    pub lora_assignment: LoraAssignmentArg,
    /// Wait this long for the server to be ready before starting: GET /v1/models polled
    /// until it answers 200, and the initial test request retried while the server
    /// refuses connections or answers 502, 503 or 429 (vLLM's --ready-check-timeout-sec,
    /// in seconds, is the same flag; 0 = the first answer decides).
    #[arg(long, alias = "ready-check-timeout-sec", value_parser = parse::duration, value_name = "DURATION")]
    pub ready_timeout: Option<Duration>,
    /// Extra request header NAME:VALUE or NAME=VALUE (repeatable; several per flag), e.g.
    /// an Authorization header. OPENAI_API_KEY in the environment sends
    /// `Authorization: Bearer $OPENAI_API_KEY` unless a header names Authorization.
    #[arg(long = "header", value_name = "NAME:VALUE", num_args = 1..)]
    pub headers: Vec<String>,
    /// Skip the one request each agent sends before the load to check the endpoint,
    /// model and key (vLLM 0.32+ skips it by default; surge sends it).
    #[arg(long)]
    pub no_initial_test: bool,
    /// Fail a request as `timeout` when its response body brings no byte for this long
    /// (its stream is then reported as ended by the client); default: no limit, as vLLM's
    /// client (which waits up to 6 h per request).
    #[arg(long, value_parser = parse::duration, value_name = "DURATION")]
    pub read_timeout: Option<Duration>,
}

/// `surge run`'s flags, "HTTP and TLS to the target": which HTTP version carries the requests, and how the target's certificate is checked.
#[derive(Debug, Clone, Args)]
pub struct TransportArgs {
    /// HTTP version to the target: 1.1, 2 (prior knowledge on http://, ALPN h2 on
    /// https://) or 3 (QUIC; https:// only). Default: 1.1 on http://, what ALPN agrees
    /// (h2 or http/1.1) on https://. --http2 is --http-version 2.
    #[arg(long, value_name = "VERSION", value_parser = ["1.1", "2", "3"])]
    pub http_version: Option<String>,
    /// The same as --http-version 2.
    #[arg(long)]
    pub http2: bool,
    /// HTTP/3: QUIC connections per agent its streams are spread over (default: one per
    /// 100 requests in flight).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub h3_connections: Option<u32>,
    /// Do not verify the target's TLS certificate (vLLM's --insecure).
    #[arg(long)]
    pub insecure: bool,
    /// Trust this CA certificate (PEM) for the target, besides the Mozilla roots.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

/// `surge run`'s flags, "Dataset": what the prompts are and how long inputs and outputs are.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct DatasetArgs {
    /// `--dataset-name hf`: which Hugging Face dataset the local --dataset-path file is a
    /// copy of (its fields and output length); ignored with other datasets, as vLLM does.
    #[arg(long = "hf-name", value_name = "NAME")]
    pub hf_name: Option<String>,
    /// vLLM's split and subset of --hf-name: accepted; a local file holds one split.
    #[arg(long = "hf-split", value_name = "SPLIT")]
    pub hf_split: Option<String>,
    #[arg(long = "hf-subset", value_name = "SUBSET")]
    pub hf_subset: Option<String>,
    /// `--dataset-name hf`: max_tokens of every request instead of the dataset's own.
    #[arg(long = "hf-output-len", value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub hf_output_len: Option<u32>,
    /// `--dataset-name spec_bench`: max_tokens of every request.
    #[arg(long = "spec-bench-output-len", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub spec_bench_output_len: u32,
    /// `--dataset-name spec_bench`: only questions of this category.
    #[arg(long = "spec-bench-category", value_name = "NAME")]
    pub spec_bench_category: Option<String>,
    /// `--dataset-name sonnet`: prompt tokens at most, shared prefix tokens, max_tokens.
    #[arg(long = "sonnet-input-len", default_value_t = 550, value_parser = parse::tokens, value_name = "N")]
    pub sonnet_input_len: u32,
    #[arg(long = "sonnet-prefix-len", default_value_t = 200, value_name = "N")]
    pub sonnet_prefix_len: u32,
    #[arg(long = "sonnet-output-len", default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub sonnet_output_len: u32,
    /// `--dataset-name random-mm`: images per request (before the range ratio).
    #[arg(long = "random-mm-base-items-per-request", default_value_t = 1, value_name = "N")]
    pub random_mm_base_items_per_request: u32,
    /// `--dataset-name random-mm`: images per request uniform in base*(1-r)..=base*(1+r).
    #[arg(long = "random-mm-num-mm-items-range-ratio", default_value_t = 0.0, value_name = "R")]
    pub random_mm_num_mm_items_range_ratio: f64,
    /// `--dataset-name random-mm`: most items per prompt by modality, JSON (vLLM's default
    /// {"image": 255, "video": 1}; surge makes images only).
    #[arg(
        long = "random-mm-limit-mm-per-prompt",
        default_value = r#"{"image": 255, "video": 1}"#,
        value_name = "JSON"
    )]
    pub random_mm_limit_mm_per_prompt: String,
    /// `--dataset-name random-mm`: image sizes and their probabilities, vLLM's form
    /// {(height, width, frames): probability, ...}; frames must be 1 (images).
    #[arg(
        long = "random-mm-bucket-config",
        default_value = "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}",
        value_name = "DICT"
    )]
    pub random_mm_bucket_config: String,
    /// Keep a ShareGPT file's order instead of shuffling it with --seed (vLLM's flag).
    #[arg(long = "disable-shuffle")]
    pub disable_shuffle: bool,
    #[arg(long, value_enum, default_value = "random")]
    pub dataset_name: DatasetArg,
    /// The prompt of --dataset-name fixed.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Input length of every dataset that has one (vLLM's shorthand; sets
    /// --random-input-len).
    #[arg(long, value_parser = parse::tokens, value_name = "N")]
    pub input_len: Option<u32>,
    /// Output length of every dataset (vLLM's shorthand; sets --random-output-len,
    /// --sharegpt-output-len, --custom-output-len and --prefix-repetition-output-len).
    #[arg(long, value_name = "N")]
    pub output_len: Option<u32>,
    #[arg(long, default_value_t = 1024, value_parser = parse::tokens)]
    pub random_input_len: u32,
    #[arg(long, default_value_t = 128)]
    pub random_output_len: u32,
    /// Random lengths uniform in [len*(1-R), len*(1+R)], 0 <= R < 1.
    #[arg(long, default_value_t = 0.0, value_name = "R")]
    pub random_range_ratio: f64,
    /// A prefix of this many tokens shared by every random prompt, before its random part.
    #[arg(long, default_value_t = 0, value_parser = parse::tokens, value_name = "N")]
    pub random_prefix_len: u32,
    /// Prompts per request of a pooling backend that takes a list of inputs (documents
    /// per request with random-rerank); --num-prompts counts prompts.
    #[arg(long = "random-batch-size", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65536), value_name = "N")]
    pub random_batch_size: u32,
    /// Send the random dataset's prompts as token ids (completions `prompt`, pooling
    /// `input`): exact input lengths, no server-side tokenization. Needs --tokenizer.
    #[arg(long = "prompt-token-ids")]
    pub prompt_token_ids: bool,
    /// A local tokenizer.json (or a directory holding one): exact prompt lengths, client
    /// token counts; sent to every agent (nothing is downloaded).
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// The file of --dataset-name sharegpt (JSON) or custom (JSONL).
    #[arg(long, value_name = "FILE")]
    pub dataset_path: Option<PathBuf>,
    /// ShareGPT: max_tokens for every request instead of the reply's token count.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub sharegpt_output_len: Option<u32>,
    /// Custom JSONL: max_tokens of lines without "output_tokens".
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub custom_output_len: u32,
    /// Prefix repetition: number of distinct shared prefixes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub prefix_repetition_num_prefixes: u32,
    /// Prefix repetition: tokens of each shared prefix.
    #[arg(long, default_value_t = 256, value_parser = parse::tokens, value_name = "N")]
    pub prefix_repetition_prefix_len: u32,
    /// Prefix repetition: random tokens after the prefix, per request.
    #[arg(long, default_value_t = 256, value_parser = parse::tokens, value_name = "N")]
    pub prefix_repetition_suffix_len: u32,
    /// Prefix repetition: max_tokens of every request.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub prefix_repetition_output_len: u32,
    /// A file dataset with fewer entries than the run's requests ends the run at the end
    /// of the file (ended_by "dataset"), as vLLM's flag; without it, surge starts a new
    /// pass over the file in a new seeded order (result key dataset_passes).
    #[arg(long)]
    pub no_oversample: bool,
    /// --dataset-name timed_trace: tokens per hash_ids block (Mooncake's: 512; a Weka
    /// trace's own block_size is used instead).
    #[arg(long = "trace-block-size", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..), value_name = "TOKENS")]
    pub trace_block_size: u32,
    /// vLLM's flag: surge loads no tokenizer unless --tokenizer names one; with this flag
    /// it loads none even then (token counts from the server's usage, else events).
    #[arg(long = "skip-tokenizer-init")]
    pub skip_tokenizer_init: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `surge run`'s flags, "Load shape": how many requests, how fast, how many at once, for how long.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Beside the load, one-token "Hi" probes to the base model at this rate (one at a
    /// time, each 1/RATE s after the previous answered, not bounded by --max-concurrency),
    /// reported apart (`probe_*` keys): how much the load stalls an unrelated request.
    #[arg(long = "probe-request-rate", default_value_t = 0.0, value_parser = parse::non_negative, value_name = "RATE")]
    pub probe_request_rate: f64,
    /// Requests to send (default 1000, as vLLM; with --duration and without this flag, no
    /// cap: the duration ends the run; with both, whichever comes first).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub num_prompts: Option<u64>,
    /// Stop issuing requests after this long (e.g. 10s); requests in flight then get
    /// --graceful-stop to finish.
    #[arg(long, value_parser = parse::duration)]
    pub duration: Option<Duration>,
    /// With --duration: how long requests in flight at its end may still finish (k6's
    /// gracefulStop); then they are cancelled and counted in `cancelled`, not `failed`
    /// [default: 30s].
    #[arg(long = "graceful-stop", value_parser = parse::duration, value_name = "DURATION")]
    pub graceful_stop: Option<Duration>,
    /// Most requests in flight (closed loop when --request-rate is inf).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrency: Option<u32>,
    /// Requests per second (inf = all at once, bounded by --max-concurrency); for
    /// `surge sweep`, a list of rate levels (e.g. 1,2,4,8).
    #[arg(long, default_value = "inf", value_parser = parse::rate_list)]
    pub request_rate: parse::RateList,
    /// Gamma shape of inter-arrival gaps: 1.0 = Poisson, larger = more regular.
    #[arg(long, default_value_t = 1.0, value_parser = parse::positive)]
    pub burstiness: f64,
    /// Ramp the request rate from --ramp-up-start-rps to --ramp-up-end-rps over the
    /// requests (vLLM's ramp: request k is sent at the rate reached at k / (N - 1)).
    #[arg(long = "ramp-up-strategy", value_enum, value_name = "STRATEGY")]
    pub ramp_up_strategy: Option<RampArg>,
    #[arg(long = "ramp-up-start-rps", value_name = "RPS")]
    pub ramp_up_start_rps: Option<u32>,
    #[arg(long = "ramp-up-end-rps", value_name = "RPS")]
    pub ramp_up_end_rps: Option<u32>,
    /// --dataset-name timed_trace: replay this many times faster (2 = at half the trace's
    /// times).
    #[arg(long = "trace-speedup", default_value_t = 1.0, value_parser = parse::positive, value_name = "F")]
    pub trace_speedup: f64,
    #[arg(long, default_value_t = 0)]
    pub num_warmups: u32,
    /// Hard limit on a run's length, enforced by every agent itself (default 1h, or the
    /// --duration plus 60s).
    #[arg(long, value_parser = parse::duration, value_name = "DURATION")]
    pub max_run_time: Option<Duration>,
}

/// `surge run`'s flags, "Sampling": what each request asks the model for (vLLM's sampling flags).
#[derive(Debug, Clone, Args)]
pub struct SamplingArgs {
    /// Generate to the requested length; the random datasets imply it (as vLLM's do).
    #[arg(long, default_value_ifs = [("dataset_name", "random", Some("true")), ("dataset_name", "random-mm", Some("true"))])]
    pub ignore_eos: bool,
    /// Sampling temperature (vLLM's default: 0.0, greedy, sent with every request).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Sampling parameters sent with every request (OpenAI backends), as vLLM's.
    #[arg(long, value_name = "P")]
    pub top_p: Option<f64>,
    #[arg(long, value_name = "K")]
    pub top_k: Option<i64>,
    #[arg(long, value_name = "P")]
    pub min_p: Option<f64>,
    #[arg(long, value_name = "X")]
    pub frequency_penalty: Option<f64>,
    #[arg(long, value_name = "X")]
    pub presence_penalty: Option<f64>,
    #[arg(long, value_name = "X")]
    pub repetition_penalty: Option<f64>,
    /// Log-probabilities per output token to ask for (completions bodies' `logprobs`; as
    /// in vLLM, chat requests leave it out: use --extra-body there).
    #[arg(long, value_name = "N")]
    pub logprobs: Option<u32>,
    /// OpenAI `tools` sent with every chat request (D49): a JSON file holding the array,
    /// or an object with a `tools` array (as in an OpenAI request).
    #[arg(long, value_name = "FILE")]
    pub tools: Option<std::path::PathBuf>,
    /// `tool_choice` of every chat request: auto, none, required, or a function's name.
    #[arg(long = "tool-choice", value_name = "CHOICE")]
    pub tool_choice: Option<String>,
    /// A JSON object merged into every request body, its keys winning over the sampling
    /// flags (vLLM's --extra-body).
    #[arg(long, value_name = "JSON")]
    pub extra_body: Option<String>,
}

/// `surge run`'s flags, "Results": which numbers are reported and where they are written.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Length of one slice of the result's time series (a run past 4,096 slices widens them, D90).
    #[arg(long, default_value = "1s", value_parser = parse::duration, value_name = "DURATION")]
    pub timeslice: Duration,
    /// Also write surge's HTML report of the run beside the result (RESULT.timeline.html,
    /// vLLM's file name); implies --save-result, whose JSON the report is drawn from.
    #[arg(long = "plot-timeline")]
    pub plot_timeline: bool,
    /// Print where the requests' time went, in k6's HTTP phases (blocked, connecting,
    /// tls_handshaking, sending, waiting, receiving, duration), and the time from the
    /// response head to the first token. The result always has them.
    #[arg(long = "show-http-phases")]
    pub show_http_phases: bool,
    /// Steady state of a closed loop: the window where requests in flight stay at or
    /// above this fraction of --max-concurrency (vllm-bench's; in (0, 1]).
    #[arg(long = "steady-state-threshold", default_value_t = 0.95, value_parser = parse::fraction, value_name = "FRACTION", help_heading = "Steady state")]
    pub steady_state_threshold: f64,
    /// A steady window shorter than this many seconds gets a warning (default: the larger
    /// of 10 s and a tenth of the run).
    #[arg(long = "steady-state-min-window", value_parser = parse::non_negative, value_name = "SECONDS", help_heading = "Steady state")]
    pub steady_state_min_window: Option<f64>,
    /// Do not look for the steady state (`steady_state` is null).
    #[arg(long = "no-steady-state", help_heading = "Steady state")]
    pub no_steady_state: bool,
    /// POST /start_profile to the server once the agents are ready (warm-ups done) and
    /// /stop_profile when the load ends (vLLM's profiler, vllm-bench's flag).
    #[arg(long, help_heading = "Server profiler")]
    pub profile: bool,
    /// With --profile: start the profiler only when the server's
    /// vllm:num_requests_running reaches N (its /metrics read every 500 ms).
    #[arg(long = "profile-batch-threshold", value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Server profiler")]
    pub profile_batch_threshold: Option<u32>,
    /// With --profile-batch-threshold: seconds the profile captures.
    #[arg(long = "profile-duration", default_value_t = 5.0, value_parser = parse::seconds, value_name = "SECONDS", help_heading = "Server profiler")]
    pub profile_duration: f64,
    /// vLLM's ITL colour thresholds of --plot-timeline, "LOW,HIGH" ms: checked and
    /// accepted (surge's report draws ITL distributions instead of colouring each gap).
    #[arg(long = "timeline-itl-thresholds", default_value = "25,50", value_name = "LOW,HIGH")]
    pub timeline_itl_thresholds: String,
    #[arg(long, default_value = "ttft,tpot,itl", value_parser = parse::metric_list)]
    pub percentile_metrics: parse::MetricList,
    #[arg(long, default_value = "99", value_parser = parse::percentile_list)]
    pub metric_percentiles: parse::Percentiles,
    /// SLOs for goodput, e.g. --goodput ttft:200 tpot:50 (ms): ttft, tpot, e2el, and surge's ttfo (the first answer token of a reasoning reply).
    #[arg(long, num_args = 1.., action = clap::ArgAction::Set, value_name = "NAME:MS")]
    pub goodput: Vec<String>,
    /// Save the result as JSON; --save-detailed, --append-result and --plot-timeline
    /// imply it.
    #[arg(long, default_value_ifs = [("save_detailed", "true", Some("true")), ("append_result", "true", Some("true")), ("plot_timeline", "true", Some("true"))])]
    pub save_result: bool,
    /// Save per-request arrays too.
    #[arg(long)]
    pub save_detailed: bool,
    /// Write one JSON line per request to PATH as results arrive (zstd when it ends in .zst).
    #[arg(long, value_name = "PATH")]
    pub save_rows: Option<std::path::PathBuf>,
    #[arg(long, value_name = "DIR")]
    pub result_dir: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub result_filename: Option<String>,
    /// KEY=VALUE pairs saved in the result (hardware=, engine=, cluster_label= fill run_metadata).
    #[arg(long, num_args = 1.., action = clap::ArgAction::Set, value_name = "KEY=VALUE", value_parser = parse::metadata)]
    pub metadata: Vec<(String, String)>,
    /// Append the result to the result file as one JSON line instead of replacing it
    /// (vLLM's flag; implies --save-result).
    #[arg(long)]
    pub append_result: bool,
    /// A label for the result (vLLM's `--label`): its `label` key, and the prefix of the
    /// default result file name instead of the backend.
    #[arg(long, value_name = "LABEL")]
    pub label: Option<String>,
    /// The deployment's price per hour in USD (GPUs x hourly price): results gain the
    /// cost per million output and total tokens at the measured throughput.
    #[arg(long, value_parser = parse::positive, value_name = "USD")]
    pub cost_per_hour: Option<f64>,
    /// The price of a kWh in USD: with GPU telemetry (--gpu-metrics-url), results gain
    /// the energy cost per million output tokens.
    #[arg(long, value_parser = parse::positive, value_name = "USD")]
    pub energy_price_kwh: Option<f64>,
    /// Exit code 1 when more than this fraction of requests failed (cancelled ones
    /// excluded); a run where no request succeeded and one failed always exits 1 (one whose
    /// every request was cancelled at its end exits 0: cancellations are not failures).
    #[arg(long, default_value_t = 1.0, value_parser = parse::fraction, value_name = "FRACTION")]
    pub max_failure_rate: f64,
    /// Exit code 1 when a successful request showed an anomaly (no finish_reason, usage
    /// against the streamed tokens, an output length off what was asked): anomalies are
    /// counted, not failures, unless this is given.
    #[arg(long = "fail-on-anomaly")]
    pub fail_on_anomaly: bool,
    /// Check that the same request is answered with the same text (at temperature 0): each
    /// agent remembers its first 65,536 distinct requests' replies; another text for one
    /// is the anomaly `nondeterministic`.
    #[arg(long = "check-determinism")]
    pub check_determinism: bool,
    /// Accuracy beside speed: a local JSONL of questions (`prompt` with one of `answer`,
    /// `regex`, `number`, `choice`; optionally `max_tokens`), asked at temperature 0 and
    /// scored as each reply arrives; the result's `accuracy` has its interval.
    #[arg(long = "accuracy", value_name = "FILE")]
    pub accuracy: Option<PathBuf>,
    /// The share of the load's requests that are accuracy questions (1: every request).
    #[arg(long = "accuracy-ratio", default_value_t = 1.0, value_parser = parse::fraction, value_name = "R")]
    pub accuracy_ratio: f64,
    /// End the run once this percentile's confidence interval is within this width of it,
    /// METRIC:PCT:WIDTH% (repeatable; all must hold), e.g. ttft:p99:5%: no guessing
    /// --num-prompts, which stays the most the run sends.
    #[arg(long = "precision", value_name = "METRIC:PCT:WIDTH%", help_heading = "Precision and capacity")]
    pub precision: Vec<String>,
    /// The confidence of every percentile interval surge decides from (--precision,
    /// surge capacity's levels).
    #[arg(long, default_value_t = 0.95, value_parser = parse::confidence, value_name = "LEVEL", help_heading = "Precision and capacity")]
    pub confidence: f64,
}

impl OutputArgs {
    /// Whether the run writes its result file: `--save-result`, or a flag that implies it.
    pub fn saves(&self) -> bool {
        self.save_result || self.save_detailed || self.append_result || self.plot_timeline
    }
}

/// `surge run`'s flags, "Server view": the target's own /metrics, scraped beside the run.
#[derive(Debug, Clone, Args)]
pub struct ServerViewArgs {
    /// The inter-token latency the server intends (e.g. `surge echo --itl-ms`): with it,
    /// each agent's read coalescing implies how late it read (`implied_read_lateness_ms`).
    #[arg(long, value_parser = parse::positive, value_name = "MS")]
    pub server_itl_ms: Option<f64>,
    /// Scrape the server's Prometheus metrics from this URL during each level
    /// (repeatable: replicas are summed). Default: `{base-url}/metrics` when it answers.
    #[arg(long = "metrics-url", value_name = "URL")]
    pub metrics_urls: Vec<String>,
    /// Do not scrape the server's metrics.
    #[arg(long)]
    pub no_scrape_metrics: bool,
    /// How often to scrape the server's metrics.
    #[arg(long, default_value = "1s", value_parser = parse::duration, value_name = "DURATION")]
    pub scrape_interval: std::time::Duration,
    /// Also keep this metric family (beyond vllm:, sglang:, llamacpp:, tgi_); repeatable.
    #[arg(long = "scrape-metric", value_name = "NAME")]
    pub scrape_metrics: Vec<String>,
    /// Who scrapes: the coordinator, or the first agent (for targets only agents reach).
    #[arg(long, value_enum, default_value = "coordinator")]
    pub scrape_from: ScrapeFrom,
    /// A GPU exporter page to scrape beside the run (NVIDIA's DCGM exporter, e.g.
    /// http://gpu-node:9400/metrics, or AMD's device metrics exporter, e.g.
    /// http://gpu-node:5000/metrics), every --scrape-interval; repeatable. Results gain
    /// GPU power, energy, utilization and energy per token.
    #[arg(long = "gpu-metrics-url", value_name = "URL")]
    pub gpu_metrics_urls: Vec<String>,
}

/// `surge run`'s flags, "Live metrics and traces": what the run shows while it goes: Prometheus, OTLP traces, request ids.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Serve the run's live metrics (Prometheus text format, every agent labelled) on
    /// ADDR, e.g. 127.0.0.1:9464, for Prometheus or Grafana to watch the run.
    #[arg(long, value_name = "ADDR")]
    pub prometheus_listen: Option<std::net::SocketAddr>,
    /// With --prometheus-listen: keep serving the final values this long after the run
    /// ends, so the last scrape sees every request [default: 2 x --scrape-interval].
    #[arg(long = "live-linger", value_parser = parse::duration, value_name = "DURATION")]
    pub live_linger: Option<std::time::Duration>,
    /// Every request carries `x-request-id: <PREFIX><index>` (vLLM's flag; default
    /// `bench-<8 hex digits of the run>-`).
    #[arg(long, value_name = "PREFIX")]
    pub request_id_prefix: Option<String>,
    /// Export OTLP traces here: a span for the run, one per level and one per request
    /// (each request also carries a W3C traceparent to the server).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport.
    #[arg(long, value_enum, default_value = "http/protobuf", value_name = "PROTOCOL")]
    pub otlp_protocol: OtlpProtocolArg,
    /// A header of the OTLP export, K=V (e.g. Authorization=Basic ...); repeatable.
    #[arg(long = "otlp-header", value_name = "K=V", value_parser = parse::metadata)]
    pub otlp_headers: Vec<(String, String)>,
    /// Share of requests with a span (0..1).
    #[arg(long, default_value_t = 1.0, value_parser = parse::fraction, value_name = "RATIO")]
    pub otlp_sample_ratio: f64,
}

/// `surge run`'s flags, "Client verdict": when surge says the client, not the server, was the bottleneck.
#[derive(Debug, Clone, Args)]
pub struct VerdictArgs {
    /// Client-bound verdict: an agent above this fraction of its cores' CPU is saturated.
    #[arg(long, default_value_t = 0.85, value_parser = parse::share, value_name = "FRACTION")]
    pub client_cpu_limit: f64,
    /// Client-bound verdict: an open-loop send lag p99 above this means the client was late.
    #[arg(long, default_value = "1ms", value_parser = parse::duration, value_name = "DURATION")]
    pub client_lag_limit: Duration,
    /// Client-bound verdict: an achieved send rate this fraction below the requested rate.
    #[arg(long, default_value_t = 0.01, value_parser = parse::share, value_name = "FRACTION")]
    pub client_rate_shortfall: f64,
    /// Client-bound verdict: an agent's host busier than this percent of all its CPUs.
    #[arg(long, default_value_t = 90.0, value_parser = parse::percent, value_name = "PERCENT")]
    pub client_host_busy_limit: f64,
    /// Client-bound verdict: tasks waiting for a CPU on an agent's host more than this
    /// percent of the time (/proc/pressure/cpu "some").
    #[arg(long, default_value_t = 50.0, value_parser = parse::percent, value_name = "PERCENT")]
    pub client_pressure_limit: f64,
    /// Client-bound verdict: more than this fraction of token events read together with
    /// the previous one of their stream (the client read late).
    #[arg(long, default_value_t = 0.01, value_parser = parse::share, value_name = "FRACTION")]
    pub client_coalesced_limit: f64,
}

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// Concurrency levels (closed loop), e.g. 10,50,100,200. Without it, the levels are
    /// the values of --request-rate.
    #[arg(long, value_parser = parse::level_list, value_name = "LIST")]
    pub concurrency: Option<parse::Levels>,
    /// Independent runs per level.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Pause between runs.
    #[arg(long, default_value = "0s", value_parser = parse::duration, value_name = "DURATION")]
    pub cooldown: Duration,
    /// After the coarse levels, refine between the last level that scaled and the first
    /// that did not, and report the knee.
    #[arg(long)]
    pub find_knee: bool,
    /// Knee rule: a step stops scaling when its throughput gain is below this fraction of
    /// the ideal linear gain...
    #[arg(long, default_value_t = 0.5, value_parser = parse::share)]
    pub knee_efficiency: f64,
    /// ...or when its p99 E2EL grows by more than this fraction (1.0 = doubles).
    #[arg(long, default_value_t = 1.0, value_parser = parse::positive)]
    pub knee_latency_growth: f64,
    /// Levels tried between the two coarse levels around the knee.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub knee_steps: u32,
    /// Skip level-runs whose result files are complete (after a crash or Ctrl-C) and were
    /// measured with the same flags (each result keeps them; --runs, --cooldown and
    /// --result-dir aside); the others are measured again.
    #[arg(long)]
    pub resume: bool,
    /// Prefix of the result files.
    #[arg(long, default_value = "sweep")]
    pub tag: String,
    /// Before each level-run, POST /reset_prefix_cache to the target (vLLM serves it with
    /// VLLM_SERVER_DEV_MODE=1), so no level starts with the previous one's cache; a
    /// refusal stops the sweep.
    #[arg(long = "reset-prefix-cache")]
    pub reset_prefix_cache: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

/// What `surge capacity` searches over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverArg {
    /// Requests in flight (a closed loop, --max-concurrency).
    Concurrency,
    /// Requests per second (an open loop, --request-rate).
    Rate,
    /// Conversations open at once (--multi-turn).
    Sessions,
}

#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// An objective every passing level meets, METRIC:PCT<=MS (repeatable): METRIC ttft,
    /// tpot, itl or e2el, PCT p50 to p99.9; e.g. --slo ttft:p99<=2000 --slo tpot:p99<=100.
    #[arg(long = "slo", value_name = "METRIC:PCT<=MS")]
    pub slo: Vec<String>,
    /// Instead of --slo: a level passes when at least this share of its requests meets
    /// every objective of --goodput (vLLM's goodput), judged by the share's interval.
    #[arg(long = "min-goodput-ratio", value_parser = parse::fraction, value_name = "R")]
    pub min_goodput_ratio: Option<f64>,
    /// The load unit searched.
    #[arg(long, value_enum, default_value = "concurrency")]
    pub over: OverArg,
    /// The levels searched, LO:HI: up from LO by doubling until a level fails, then
    /// bisection.
    #[arg(long, value_name = "LO:HI")]
    pub range: String,
    /// How narrow the final bracket is: a width in units for concurrency and sessions
    /// (default 1), a relative width for rates (default 5%).
    #[arg(long, value_name = "N|P%")]
    pub resolution: Option<String>,
    /// The most level-runs the search makes (then it reports the bracket it has).
    #[arg(long = "max-level-runs", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_level_runs: u32,
    /// The most requests one level may take while it is undecided (default 8 times a
    /// level-run's).
    #[arg(long = "max-requests-per-level", value_name = "N")]
    pub max_requests_per_level: Option<u64>,
    /// Independent runs per level, pooled for its verdict (their spread is shown beside).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Pause between level-runs.
    #[arg(long, default_value = "0s", value_parser = parse::duration, value_name = "DURATION")]
    pub cooldown: Duration,
    /// Continue a cut search: the levels already in DIR/capacity.json are not run again,
    /// when it was written with the same flags (--runs, --cooldown, --max-level-runs and
    /// --result-dir aside); else the search starts over.
    #[arg(long)]
    pub resume: bool,
    /// Prefix of the level-run files.
    #[arg(long, default_value = "capacity")]
    pub tag: String,
    /// Before each level-run, POST /reset_prefix_cache to the target.
    #[arg(long = "reset-prefix-cache")]
    pub reset_prefix_cache: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// The standard matrix: latency-1024x256-c1, serve-1024x256-c16, longctx-8192x256-c4.
    #[arg(long)]
    pub standard: bool,
    /// Hardware label for run_metadata (e.g. "8x H200").
    #[arg(long)]
    pub hardware: Option<String>,
    /// Engine label for run_metadata (e.g. "vLLM v0.19.1").
    #[arg(long)]
    pub engine: Option<String>,
    #[arg(long)]
    pub cluster_label: Option<String>,
    /// Appended to every profile tag, e.g. -8x when the profile ran on several shapes.
    #[arg(long, default_value = "")]
    pub tag_suffix: String,
    /// Skip profiles whose result files are complete and were measured with the same flags
    /// and profile; the others are measured again.
    #[arg(long)]
    pub resume: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Where the load runs: remote agents and the mutual-TLS material to reach them.
#[derive(Debug, Clone, Default, Args)]
pub struct FleetArgs {
    /// Agents to run the load on (HOST:PORT, comma separated); none = an embedded agent.
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT")]
    pub agents: Vec<String>,
    /// CA certificate (PEM) that signed the agents' certificates.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This coordinator's certificate (PEM), signed by the agents' CA.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Plaintext to agents; only for agents on loopback addresses.
    #[arg(long)]
    pub agents_plaintext: bool,
    /// How long to keep trying agents that refuse the connection or do not answer (they
    /// may still be starting), saying which ones it waits for.
    #[arg(long = "agent-connect-timeout", default_value = "60s", value_parser = parse::duration, value_name = "DURATION")]
    pub agent_connect_timeout: Duration,
    /// Start with at least K of the --agents when the others are not reachable within
    /// --agent-connect-timeout (the result lists the missing ones); default: all of them.
    #[arg(long = "min-agents", value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_agents: Option<u32>,
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// An echo server elsewhere (default: one embedded in this process).
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Concurrency levels (default 100,250,500,750,1000,1500,2000; with --against, the
    /// run's own concurrency).
    #[arg(long, value_parser = parse::level_list, value_name = "LIST")]
    pub levels: Option<parse::Levels>,
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests_per_level: u64,
    /// Stream completions (tokens counted) instead of plain POSTs to /echo.
    #[arg(long)]
    pub streaming: bool,
    /// Tokens per streamed response (or words per POSTed body).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(surge_core::data::dataset::MAX_INPUT_TOKENS)))]
    pub tokens_per_request: u32,
    /// With --streaming: the embedded echo's inter-token latency (with --target, the one
    /// that echo was started with). Above 0, each level reports the read lateness its
    /// read coalescing implies.
    #[arg(long, default_value_t = 0.0, value_parser = parse::non_negative, value_name = "MS")]
    pub itl_ms: f64,
    #[arg(long, value_name = "DIR", default_value = "surge-validate")]
    pub result_dir: PathBuf,
    /// HTTP version to the echo server: 1.1, 2 or 3 (QUIC). With 3 the embedded echo
    /// serves HTTPS and HTTP/3 with a certificate it makes (not verified by the client).
    #[arg(long, value_name = "VERSION", value_parser = ["1.1", "2", "3"])]
    pub http_version: Option<String>,
    /// A result file to judge: is the client's capacity far above what that run needed?
    #[arg(long, value_name = "FILE")]
    pub against: Option<PathBuf>,
    /// Headroom below which --against fails (exit code 5).
    #[arg(long, default_value_t = crate::plan::validate::DEFAULT_MIN_HEADROOM, value_parser = parse::positive)]
    pub min_headroom: f64,
    #[command(flatten)]
    pub fleet: FleetArgs,
}
