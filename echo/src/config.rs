//! Command-line flags ([`EchoArgs`]) and the validated server configuration
//! ([`EchoConfig`]).
//!
//! `EchoArgs` is meant to be flattened into a host CLI (`surge echo ...`);
//! `EchoConfig` is a plain struct with public fields so tests can build one
//! without clap. Both go through [`EchoConfig::validate`].

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// Largest output length (tokens per response) the server accepts, from a flag
/// or from a request's `max_tokens`. Keeps a single non-streamed response
/// bounded in memory.
pub const MAX_OUTPUT_TOKENS: u64 = 1 << 20;

/// Largest delay (milliseconds) accepted for any timing flag: one day.
const MAX_DELAY_MS: f64 = 86_400_000.0;

/// Flags of the echo / mock OpenAI server (`surge echo`).
#[derive(clap::Args, Debug, Clone)]
pub struct EchoArgs {
    /// Address to listen on (HTTP/1.1 and h2c on the same port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,

    /// Model name listed by /v1/models and reported when a request names none.
    #[arg(long, value_name = "NAME", default_value = "surge-echo")]
    pub model: String,

    /// Answer a completion that names another model than --model with vLLM's 404 error.
    #[arg(long)]
    pub reject_unknown_model: bool,

    /// LoRA adapters served beside --model, as vLLM's `NAME=PATH` (the path is ignored):
    /// completions may name them, and each is counted in
    /// `surge_echo_lora_requests_total{lora="NAME"}`.
    #[arg(long = "lora-modules", num_args = 1.., value_name = "NAME[=PATH]")]
    pub lora_modules: Vec<String>,

    /// Time to first token in milliseconds, counted from when the request arrived (the
    /// kernel's receive stamp), or got its slot if it had to wait for one.
    #[arg(long = "ttft-ms", value_name = "MS", default_value_t = 0.0)]
    pub ttft_ms: f64,

    /// Inter-token latency in milliseconds.
    #[arg(long = "itl-ms", value_name = "MS", default_value_t = 0.0)]
    pub itl_ms: f64,

    /// Hold a streamed response's head this long after the request arrived (a proxy or
    /// server that answers late); the tokens keep their schedule, so with a head delay
    /// below --ttft-ms the head comes first, as usual, only later.
    #[arg(long = "head-delay-ms", value_name = "MS", default_value_t = 0.0)]
    pub head_delay_ms: f64,

    /// Output tokens per response, overriding the request's max_tokens
    /// (default: the request's max_tokens, or 16 when absent).
    #[arg(long = "output-tokens", value_name = "N")]
    pub output_tokens: Option<u64>,

    /// Dimension of the embeddings and pooled vectors served by /v1/embeddings and
    /// /pooling (each answered --ttft-ms after it arrived).
    #[arg(long = "embedding-dim", value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub embedding_dim: u32,

    /// Each delay (TTFT and every ITL) gets + uniform[-J, +J] ms, clamped at >= 0.
    #[arg(long = "jitter-ms", value_name = "MS", default_value_t = 0.0)]
    pub jitter_ms: f64,

    /// Keep a prefix cache of this many prompt tokens (LRU, in blocks of --block-size
    /// words; block j's key chains blocks 0..j, as vLLM's prefix caching): answers
    /// usage.prompt_tokens_details.cached_tokens and counts cached and uncached prompt
    /// tokens on /metrics. 0: no cache.
    #[arg(long = "prefix-cache-tokens", value_name = "N", default_value_t = 0)]
    pub prefix_cache_tokens: u64,

    /// Tokens (words) per cached block.
    #[arg(long = "block-size", value_name = "B", default_value_t = 16)]
    pub block_size: usize,

    /// With --prefix-cache-tokens: the first token waits --ttft-ms plus this many
    /// microseconds per uncached prompt token (the prefill the cache saves).
    #[arg(long = "prefill-us-per-token", value_name = "US", default_value_t = 0.0)]
    pub prefill_us_per_token: f64,

    /// Seed for jitter and fault selection.
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub seed: u64,

    /// At most K completions generated at once; the rest wait in FIFO order
    /// before their TTFT clock starts (like a server with K slots).
    #[arg(long = "max-concurrent-streams", value_name = "K")]
    pub max_concurrent_streams: Option<usize>,

    /// Close an HTTP/1.1 connection after each complete streamed response,
    /// although keep-alive was advertised (as llama.cpp's server does); on HTTP/2, send
    /// GOAWAY after it (streams in flight finish, new ones need a new connection); on
    /// HTTP/3, close the QUIC connection.
    #[arg(long = "close-after-stream")]
    pub close_after_stream: bool,

    /// Fraction of completion requests answered 500 with a JSON error body.
    #[arg(long = "fault-500-rate", value_name = "F", default_value_t = 0.0)]
    pub fault_500_rate: f64,

    /// Fraction of completion requests whose connection is dropped before any response.
    #[arg(long = "fault-reset-rate", value_name = "F", default_value_t = 0.0)]
    pub fault_reset_rate: f64,

    /// Fraction of streamed responses where one event's data is not valid JSON.
    #[arg(long = "fault-malformed-rate", value_name = "F", default_value_t = 0.0)]
    pub fault_malformed_rate: f64,

    /// Fraction of streamed responses cut off mid-stream (connection closed before the DONE event).
    #[arg(long = "fault-truncate-rate", value_name = "F", default_value_t = 0.0)]
    pub fault_truncate_rate: f64,

    /// Stall this many milliseconds before the first token, for a fraction
    /// --fault-stall-rate of completion responses.
    #[arg(long = "fault-stall-ms", value_name = "MS")]
    pub fault_stall_ms: Option<f64>,

    /// Fraction of completion responses that stall (used only with --fault-stall-ms).
    #[arg(long = "fault-stall-rate", value_name = "F", default_value_t = 1.0)]
    pub fault_stall_rate: f64,

    /// Count prompt tokens with this tokenizer.json (or a directory holding one) instead
    /// of whitespace-separated words.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,

    /// Each streamed token that does not complete a character is, with probability P,
    /// the first half of a multi-byte character split over two tokens: its chunk carries
    /// "" and the next one the whole character (as vLLM streams Chinese text or emoji);
    /// a last token so split ends the stream inside a character.
    #[arg(long = "partial-tokens", value_name = "P", default_value_t = 0.0)]
    pub partial_tokens: f64,

    /// Chat streams send their first K tokens as `delta.reasoning` (a reasoning model).
    #[arg(long = "reasoning-tokens", value_name = "K", default_value_t = 0)]
    pub reasoning_tokens: u64,

    /// Chat streams send their output as the arguments of one tool call (`delta.tool_calls`).
    #[arg(long = "tool-call")]
    pub tool_call: bool,

    /// A chat stream is a tool call with probability P (a seeded draw per request): its
    /// output is the arguments of one call (`call_<request>`, function `echo`), ended by
    /// `finish_reason: "tool_calls"`; otherwise an answer. Requests carrying `tool`
    /// messages are answered the same way, and counted with whether each names a call of
    /// the assistant message before it.
    #[arg(long = "tool-call-rate", value_name = "P", default_value_t = 0.0)]
    pub tool_call_rate: f64,

    /// A stream's last chunk carries no `finish_reason` with probability P (a seeded draw
    /// per request): an anomaly a client should count (D70), not a failure.
    #[arg(long = "drop-finish-reason-rate", value_name = "P", default_value_t = 0.0)]
    pub drop_finish_reason_rate: f64,

    /// A stream's usage says one completion token more than it sent, with probability P.
    #[arg(long = "usage-mismatch-rate", value_name = "P", default_value_t = 0.0)]
    pub usage_mismatch_rate: f64,

    /// A stream ends at half its tokens with `finish_reason: "stop"` (its usage counting
    /// what it sent), with probability P: a server that honoured EOS although the request
    /// said `ignore_eos`, or stopped short of `max_tokens`.
    #[arg(long = "early-eos-rate", value_name = "P", default_value_t = 0.0)]
    pub early_eos_rate: f64,

    /// A stream says nothing, with probability P: its last chunk carries the finish
    /// reason and empty text, its usage 0 completion tokens, then `[DONE]` (a server that
    /// answered with an empty string): a success with no token, an anomaly (D50).
    #[arg(long = "empty-reply-rate", value_name = "P", default_value_t = 0.0)]
    pub empty_reply_rate: f64,

    /// A reply names another request, with probability P: its id is made of the
    /// request's x-request-id with "-misdirected" added (a proxy or server that mixed up
    /// streams).
    #[arg(long = "misdirect-rate", value_name = "P", default_value_t = 0.0)]
    pub misdirect_rate: f64,

    /// Answer the questions of an accuracy file (surge's `--accuracy` JSONL): a request
    /// whose prompt is a question's gets its `answer` (or `number`, or `choice`) as the
    /// reply, ended with `finish_reason: "stop"`.
    #[arg(long = "answers", value_name = "FILE")]
    pub answers: Option<PathBuf>,

    /// With --answers: answer a question wrong ("wrong") with probability P, a seeded draw
    /// per request; answers are counted in surge_echo_injected_anomalies_total with
    /// kind="right_answer" or kind="wrong_answer".
    #[arg(long = "wrong-answer-rate", value_name = "P", default_value_t = 0.0)]
    pub wrong_answer_rate: f64,

    /// Name this echo as one replica of a fleet: every response carries
    /// `x-served-by: NAME`, as a router's upstream would say which replica answered.
    #[arg(long = "replica-name", value_name = "NAME")]
    pub replica_name: Option<String>,

    /// Answer the first N completion requests with 503 (a server still loading, or a
    /// gateway whose upstream is not ready yet).
    #[arg(long = "unready-requests", value_name = "N", default_value_t = 0)]
    pub unready_requests: u64,

    /// Answer completion requests from this client address with 403 (a firewall or
    /// gateway that denies one host); repeatable.
    #[arg(long = "deny-peer", value_name = "IP")]
    pub deny_peer: Vec<std::net::IpAddr>,

    /// Answer GET /metrics only to these client addresses (403 to others; a metrics
    /// endpoint reachable only from inside the cluster); repeatable. Default: everyone.
    #[arg(long = "metrics-allow-peer", value_name = "IP")]
    pub metrics_allow_peer: Vec<std::net::IpAddr>,

    /// Serve HTTPS on the TCP port (ALPN h2 or http/1.1) with a certificate for localhost,
    /// 127.0.0.1, ::1 and the listen address, signed by a private CA made at start.
    #[arg(long = "tls-self-signed")]
    pub tls_self_signed: bool,

    /// Write that CA's certificate (PEM) to FILE, for a client's --ca-cert.
    #[arg(long = "tls-cert-out", value_name = "FILE", requires = "tls_self_signed")]
    pub tls_cert_out: Option<PathBuf>,

    /// Also serve HTTP/3 (QUIC) on the UDP port of the same number (needs --tls-self-signed).
    #[arg(long = "http3", requires = "tls_self_signed")]
    pub http3: bool,

    /// Metric names of GET /metrics: surge (surge_echo_*), or vllm (also vLLM's vllm:*
    /// names, each labelled model_name with --model, as a vLLM server exposes them).
    #[arg(long = "metrics-flavor", value_name = "FLAVOR", value_enum, default_value_t = MetricsFlavor::Surge)]
    pub metrics_flavor: MetricsFlavor,
}

/// Which metric names `GET /metrics` exposes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsFlavor {
    /// The server's own surge_echo_* metrics.
    #[default]
    Surge,
    /// Also vLLM's vllm:* metrics for the same counts, labelled model_name.
    Vllm,
}

impl EchoArgs {
    /// Validate the flags and turn them into a configuration. The error names
    /// the offending flag.
    pub fn into_config(self) -> Result<EchoConfig, String> {
        let config = EchoConfig {
            listen: self.listen,
            model: self.model,
            reject_unknown_model: self.reject_unknown_model,
            lora_modules: self
                .lora_modules
                .iter()
                .map(|m| m.split_once('=').map_or(m.as_str(), |(name, _)| name).to_owned())
                .collect(),
            ttft_ms: self.ttft_ms,
            itl_ms: self.itl_ms,
            head_delay_ms: self.head_delay_ms,
            output_tokens: self.output_tokens,
            embedding_dim: self.embedding_dim as usize,
            jitter_ms: self.jitter_ms,
            prefix_cache_tokens: self.prefix_cache_tokens,
            block_size: self.block_size,
            prefill_us_per_token: self.prefill_us_per_token,
            seed: self.seed,
            max_concurrent_streams: self.max_concurrent_streams,
            close_after_stream: self.close_after_stream,
            fault_500_rate: self.fault_500_rate,
            fault_reset_rate: self.fault_reset_rate,
            fault_malformed_rate: self.fault_malformed_rate,
            fault_truncate_rate: self.fault_truncate_rate,
            fault_stall_ms: self.fault_stall_ms,
            fault_stall_rate: self.fault_stall_rate,
            tokenizer: self.tokenizer,
            partial_tokens: self.partial_tokens,
            reasoning_tokens: self.reasoning_tokens,
            tool_call: self.tool_call,
            tool_call_rate: self.tool_call_rate,
            replica_name: self.replica_name.clone(),
            answers: self.answers.clone(),
            wrong_answer_rate: self.wrong_answer_rate,
            drop_finish_reason_rate: self.drop_finish_reason_rate,
            usage_mismatch_rate: self.usage_mismatch_rate,
            early_eos_rate: self.early_eos_rate,
            empty_reply_rate: self.empty_reply_rate,
            misdirect_rate: self.misdirect_rate,
            unready_requests: self.unready_requests,
            deny_peer: self.deny_peer,
            metrics_allow_peer: self.metrics_allow_peer,
            metrics_flavor: self.metrics_flavor,
            tls_self_signed: self.tls_self_signed,
            tls_cert_out: self.tls_cert_out,
            http3: self.http3,
        };
        config.validate()?;
        Ok(config)
    }
}

/// Configuration of the echo server. Field meanings are those of the flags
/// of the same name in [`EchoArgs`].
#[derive(Debug, Clone, PartialEq)]
pub struct EchoConfig {
    /// Address the host binary should bind; [`crate::serve`] itself takes a
    /// bound listener and ignores it.
    pub listen: SocketAddr,
    /// Model name listed by `/v1/models`.
    pub model: String,
    /// Refuse completions for any other model (404, as vLLM).
    pub reject_unknown_model: bool,
    /// LoRA adapter names served beside `model`.
    pub lora_modules: Vec<String>,
    /// Time to first token, milliseconds.
    pub ttft_ms: f64,
    /// Inter-token latency, milliseconds.
    pub itl_ms: f64,
    /// Delay of a streamed response's head after the request arrived, milliseconds.
    pub head_delay_ms: f64,
    /// Output tokens per response (overrides the request's max_tokens).
    pub output_tokens: Option<u64>,
    /// Length of the vectors the pooling routes answer.
    pub embedding_dim: usize,
    /// Uniform jitter half-width applied to every delay, milliseconds.
    pub jitter_ms: f64,
    /// Prefix cache size in tokens (0: none), its block size and the prefill time per
    /// uncached token (D33).
    pub prefix_cache_tokens: u64,
    pub block_size: usize,
    pub prefill_us_per_token: f64,
    /// Seed for jitter and fault selection.
    pub seed: u64,
    /// Completion slots; `None` means unlimited.
    pub max_concurrent_streams: Option<usize>,
    /// Close HTTP/1.1 connections after each complete streamed response.
    pub close_after_stream: bool,
    /// Fraction of completion requests answered 500.
    pub fault_500_rate: f64,
    /// Fraction of completion requests whose connection is dropped.
    pub fault_reset_rate: f64,
    /// Fraction of streamed responses with one malformed event.
    pub fault_malformed_rate: f64,
    /// Fraction of streamed responses cut off without `[DONE]`.
    pub fault_truncate_rate: f64,
    /// Stall before the first token, milliseconds (`None`: no stalls).
    pub fault_stall_ms: Option<f64>,
    /// Fraction of responses that stall when `fault_stall_ms` is set.
    pub fault_stall_rate: f64,
    /// Prompt tokens counted with this tokenizer.json (`None`: words).
    pub tokenizer: Option<PathBuf>,
    /// Probability that a token starts a multi-byte character split over two tokens.
    pub partial_tokens: f64,
    /// Chat: leading tokens sent as `delta.reasoning`.
    pub reasoning_tokens: u64,
    /// Chat: output sent as one tool call's arguments.
    pub tool_call: bool,
    /// Chat: the chance that a stream is a tool call (a seeded draw per request).
    pub tool_call_rate: f64,
    /// Every response says `x-served-by: NAME` (one replica of a fleet).
    pub replica_name: Option<String>,
    /// Questions answered (`--answers`), and the chance of a wrong answer.
    pub answers: Option<PathBuf>,
    pub wrong_answer_rate: f64,
    /// Anomalies injected into streams (D70), each a seeded draw per request.
    pub drop_finish_reason_rate: f64,
    pub usage_mismatch_rate: f64,
    pub early_eos_rate: f64,
    pub empty_reply_rate: f64,
    pub misdirect_rate: f64,
    /// The first this many completion requests are answered 503.
    pub unready_requests: u64,
    /// Client addresses whose completion requests are answered 403.
    pub deny_peer: Vec<std::net::IpAddr>,
    /// Peers allowed to read `/metrics` (empty: all).
    pub metrics_allow_peer: Vec<std::net::IpAddr>,
    /// Metric names of `GET /metrics`.
    pub metrics_flavor: MetricsFlavor,
    /// HTTPS on the TCP port with a certificate made at start.
    pub tls_self_signed: bool,
    /// Where the CA certificate of `tls_self_signed` is written (PEM).
    pub tls_cert_out: Option<PathBuf>,
    /// HTTP/3 on the UDP port of the same number (needs `tls_self_signed`).
    pub http3: bool,
}

impl Default for EchoConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 8000)),
            model: "surge-echo".to_owned(),
            reject_unknown_model: false,
            lora_modules: Vec::new(),
            ttft_ms: 0.0,
            itl_ms: 0.0,
            head_delay_ms: 0.0,
            output_tokens: None,
            embedding_dim: 16,
            jitter_ms: 0.0,
            prefix_cache_tokens: 0,
            block_size: 16,
            prefill_us_per_token: 0.0,
            seed: 0,
            max_concurrent_streams: None,
            close_after_stream: false,
            fault_500_rate: 0.0,
            fault_reset_rate: 0.0,
            fault_malformed_rate: 0.0,
            fault_truncate_rate: 0.0,
            fault_stall_ms: None,
            fault_stall_rate: 1.0,
            tokenizer: None,
            partial_tokens: 0.0,
            reasoning_tokens: 0,
            tool_call: false,
            tool_call_rate: 0.0,
            replica_name: None,
            answers: None,
            wrong_answer_rate: 0.0,
            drop_finish_reason_rate: 0.0,
            usage_mismatch_rate: 0.0,
            early_eos_rate: 0.0,
            empty_reply_rate: 0.0,
            misdirect_rate: 0.0,
            unready_requests: 0,
            deny_peer: Vec::new(),
            metrics_allow_peer: Vec::new(),
            metrics_flavor: MetricsFlavor::Surge,
            tls_self_signed: false,
            tls_cert_out: None,
            http3: false,
        }
    }
}

impl EchoConfig {
    /// Check every value; the error names the flag that carries it.
    pub fn validate(&self) -> Result<(), String> {
        if self.http3 && !self.tls_self_signed {
            return Err("--http3 needs --tls-self-signed (QUIC always carries TLS)".to_owned());
        }
        if let Some(name) = &self.replica_name
            && (name.is_empty() || http::HeaderValue::try_from(name.as_str()).is_err())
        {
            return Err(format!("--replica-name {name:?}: must be a non-empty header value"));
        }
        if self.model.is_empty() {
            return Err("--model must not be empty".to_owned());
        }
        check_delay("--ttft-ms", self.ttft_ms)?;
        check_delay("--itl-ms", self.itl_ms)?;
        check_delay("--jitter-ms", self.jitter_ms)?;
        check_delay("--head-delay-ms", self.head_delay_ms)?;
        check_number("--prefill-us-per-token", "microseconds", self.prefill_us_per_token)?;
        if self.block_size == 0 {
            return Err("--block-size must be at least 1".to_owned());
        }
        if self.prefix_cache_tokens > 0 && self.tokenizer.is_some() {
            return Err("--prefix-cache-tokens caches words: it cannot go with --tokenizer".to_owned());
        }
        if let Some(stall) = self.fault_stall_ms {
            check_delay("--fault-stall-ms", stall)?;
        }
        if let Some(n) = self.output_tokens
            && !(1..=MAX_OUTPUT_TOKENS).contains(&n)
        {
            return Err(format!("--output-tokens must be within 1..={MAX_OUTPUT_TOKENS}, got {n}"));
        }
        if let Some(k) = self.max_concurrent_streams {
            let max = tokio::sync::Semaphore::MAX_PERMITS;
            if k == 0 || k > max {
                return Err(format!("--max-concurrent-streams must be within 1..={max}, got {k}"));
            }
        }
        check_rate("--fault-500-rate", self.fault_500_rate)?;
        check_rate("--tool-call-rate", self.tool_call_rate)?;
        check_rate("--drop-finish-reason-rate", self.drop_finish_reason_rate)?;
        check_rate("--usage-mismatch-rate", self.usage_mismatch_rate)?;
        check_rate("--early-eos-rate", self.early_eos_rate)?;
        check_rate("--empty-reply-rate", self.empty_reply_rate)?;
        check_rate("--misdirect-rate", self.misdirect_rate)?;
        check_rate("--wrong-answer-rate", self.wrong_answer_rate)?;
        if let Some(p) = &self.answers {
            crate::answers::load(p).map_err(|e| format!("--answers {}: {e}", p.display()))?;
        }
        check_rate("--fault-reset-rate", self.fault_reset_rate)?;
        check_rate("--fault-malformed-rate", self.fault_malformed_rate)?;
        check_rate("--fault-truncate-rate", self.fault_truncate_rate)?;
        check_rate("--fault-stall-rate", self.fault_stall_rate)?;
        // Below 1: a split must be able to end.
        if !(0.0..1.0).contains(&self.partial_tokens) {
            return Err(format!("--partial-tokens must be within 0..1 (1 excluded), got {}", self.partial_tokens));
        }
        if let Some(p) = &self.tokenizer {
            let file = crate::counter::resolve(p);
            if !file.is_file() {
                return Err(format!("--tokenizer {}: no such file", file.display()));
            }
        }
        Ok(())
    }
}

fn check_rate(flag: &str, rate: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&rate) { Ok(()) } else { Err(format!("{flag} must be within 0..=1, got {rate}")) }
}

fn check_delay(flag: &str, ms: f64) -> Result<(), String> {
    check_number(flag, "milliseconds", ms)
}

fn check_number(flag: &str, unit: &str, v: f64) -> Result<(), String> {
    if (0.0..=MAX_DELAY_MS).contains(&v) {
        Ok(())
    } else {
        Err(format!("{flag} must be a number of {unit} within 0..={MAX_DELAY_MS}, got {v}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        echo: EchoArgs,
    }

    fn parse(args: &[&str]) -> Result<EchoConfig, String> {
        let mut argv = vec!["echo"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map_err(|e| e.to_string())?.echo.into_config()
    }

    #[test]
    fn defaults_match_config_default() {
        assert_eq!(parse(&[]).unwrap(), EchoConfig::default());
    }

    #[test]
    fn all_flags_parse() {
        let c = parse(&[
            "--listen",
            "0.0.0.0:9000",
            "--model",
            "m",
            "--ttft-ms",
            "12.5",
            "--itl-ms",
            "3",
            "--output-tokens",
            "7",
            "--jitter-ms",
            "1",
            "--seed",
            "42",
            "--max-concurrent-streams",
            "4",
            "--close-after-stream",
            "--fault-500-rate",
            "0.1",
            "--fault-reset-rate",
            "0.2",
            "--fault-malformed-rate",
            "0.3",
            "--fault-truncate-rate",
            "0.4",
            "--fault-stall-ms",
            "100",
            "--fault-stall-rate",
            "0.5",
            "--partial-tokens",
            "0.4",
            "--reasoning-tokens",
            "3",
            "--tool-call",
            "--metrics-flavor",
            "vllm",
        ])
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(c.model, "m");
        assert_eq!(c.ttft_ms, 12.5);
        assert_eq!(c.itl_ms, 3.0);
        assert_eq!(c.output_tokens, Some(7));
        assert_eq!(c.jitter_ms, 1.0);
        assert_eq!(c.seed, 42);
        assert_eq!(c.max_concurrent_streams, Some(4));
        assert!(c.close_after_stream);
        assert_eq!(c.fault_500_rate, 0.1);
        assert_eq!(c.fault_reset_rate, 0.2);
        assert_eq!(c.fault_malformed_rate, 0.3);
        assert_eq!(c.fault_truncate_rate, 0.4);
        assert_eq!(c.fault_stall_ms, Some(100.0));
        assert_eq!(c.fault_stall_rate, 0.5);
        assert_eq!(c.partial_tokens, 0.4);
        assert_eq!(c.reasoning_tokens, 3);
        assert!(c.tool_call);
        assert_eq!(c.metrics_flavor, MetricsFlavor::Vllm);
    }

    #[test]
    fn unknown_metrics_flavor_names_the_choices() {
        let err = parse(&["--metrics-flavor", "sglang"]).unwrap_err();
        assert!(err.contains("--metrics-flavor") && err.contains("surge") && err.contains("vllm"), "{err}");
    }

    #[test]
    fn bad_rates_name_the_flag() {
        for flag in [
            "--fault-500-rate",
            "--fault-reset-rate",
            "--fault-malformed-rate",
            "--fault-truncate-rate",
            "--fault-stall-rate",
        ] {
            for bad in ["1.5", "-0.1", "NaN"] {
                let err = parse(&[&format!("{flag}={bad}")]).unwrap_err();
                assert!(err.contains(flag), "{err}");
            }
        }
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, flag) in [
            (&["--ttft-ms=-1"][..], "--ttft-ms"),
            (&["--itl-ms", "inf"][..], "--itl-ms"),
            (&["--jitter-ms", "NaN"][..], "--jitter-ms"),
            (&["--fault-stall-ms=-5"][..], "--fault-stall-ms"),
            (&["--head-delay-ms", "inf"][..], "--head-delay-ms"),
            (&["--head-delay-ms=-1"][..], "--head-delay-ms"),
            (&["--prefill-us-per-token", "NaN"][..], "--prefill-us-per-token must be a number of microseconds"),
            (&["--output-tokens", "0"][..], "--output-tokens"),
            (&["--max-concurrent-streams", "0"][..], "--max-concurrent-streams"),
            (&["--model", ""][..], "--model"),
            (&["--partial-tokens", "1"][..], "--partial-tokens"),
            (&["--partial-tokens=-0.1"][..], "--partial-tokens"),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(flag), "{err}");
        }
    }
}
