//! The command line, stage two: [`RunArgs`] checked and resolved into a [`RunPlan`].
//! Every problem here is a usage error (exit code 2) whose message names the flag or the
//! configuration key.

use crate::cli::{BackendArg, RunArgs};
use crate::dataset_plan::{self, TokenizerFile};
use crate::metrics::Slo;
use crate::parse;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::{Backend, DatasetSpec, PromptItem};

/// A usage error: bad flags, bad configuration.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// Coordinator <-> agent TLS material.
#[derive(Debug, Clone)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where the load runs.
#[derive(Debug, Clone)]
pub enum Agents {
    /// One in-process agent behind the same gRPC service remote agents serve.
    Embedded,
    /// Remote agents; `tls` is `None` only with `--insecure` on loopback.
    Remote { addrs: Vec<String>, tls: Option<TlsPaths> },
}

/// A validated `surge run`.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub base_url: String,
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
    pub num_prompts: u64,
    pub duration: Option<Duration>,
    pub max_concurrency: Option<u32>,
    pub request_rate: f64,
    pub burstiness: f64,
    pub num_warmups: u32,
    pub ignore_eos: bool,
    pub temperature: Option<f64>,
    pub seed: u64,
    pub percentile_metrics: Vec<&'static str>,
    pub metric_percentiles: Vec<f64>,
    pub slo: Slo,
    pub save_result: bool,
    pub save_detailed: bool,
    pub result_dir: Option<PathBuf>,
    pub result_filename: Option<String>,
    pub metadata: Vec<(String, String)>,
    pub ready_timeout: Option<Duration>,
    pub http2: bool,
    pub headers: Vec<(String, String)>,
    pub agents: Agents,
    pub tolerate_agent_loss: bool,
    pub max_run_time: Duration,
    pub verdict: VerdictLimits,
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
}

impl Default for VerdictLimits {
    fn default() -> Self {
        Self { cpu_fraction: 0.85, lag_p99_us: 1_000, rate_shortfall: 0.01 }
    }
}

/// The coordinator configuration file: agents and TLS paths, and for `surge matrix` the
/// labels and custom profiles.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CoordinatorFile {
    #[serde(default)]
    pub agents: Vec<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub hardware: Option<String>,
    pub engine: Option<String>,
    pub cluster_label: Option<String>,
    #[serde(default, rename = "profile")]
    pub profiles: Vec<ProfileSpec>,
}

/// One `[[profile]]` of a matrix file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfileSpec {
    pub tag: String,
    pub input_len: u32,
    pub output_len: u32,
    pub concurrency: u32,
    pub num_prompts: u64,
    /// Requests/s; absent = inf.
    pub request_rate: Option<f64>,
}

/// Reads a coordinator configuration file.
pub fn load_file(path: &std::path::Path) -> Result<CoordinatorFile, UsageError> {
    if !path.exists() {
        return usage(format!("--config {}: file not found", path.display()));
    }
    config::Config::builder()
        .add_source(config::File::from(path).format(config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize::<CoordinatorFile>())
        .map_err(|e| UsageError(format!("--config {}: {e}", path.display())))
}

fn is_loopback(addr: &str) -> bool {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return sa.ip().is_loopback();
    }
    addr.rsplit_once(':').is_some_and(|(h, _)| h == "localhost")
}

impl RunPlan {
    pub fn from_args(a: RunArgs) -> Result<Self, UsageError> {
        let base_url = a.base_url.clone().unwrap_or_else(|| format!("http://{}:{}", a.host, a.port));
        match base_url.parse::<http::Uri>() {
            Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {}
            _ => return usage(format!("--base-url {base_url:?}: expected http://HOST[:PORT] or https://...")),
        }
        let (backend, backend_name, default_endpoint) = match a.backend {
            BackendArg::Openai => (Backend::Openai, "openai", "/v1/completions"),
            BackendArg::OpenaiChat => (Backend::OpenaiChat, "openai-chat", "/v1/chat/completions"),
            BackendArg::Http => (Backend::Http, "http", "/echo"),
        };
        let endpoint = a.endpoint.clone().unwrap_or_else(|| default_endpoint.to_string());
        if !endpoint.starts_with('/') {
            return usage(format!("--endpoint {endpoint:?}: must start with '/'"));
        }
        let d = dataset_plan::resolve(&a)?;
        if backend != Backend::Http && a.random_output_len == 0 {
            return usage("--random-output-len: must be at least 1");
        }
        let request_rate = match a.request_rate.0.as_slice() {
            [r] => *r,
            _ => return usage("--request-rate: surge run takes one rate (lists of levels are for surge sweep)"),
        };
        let slo = parse::goodput(&a.goodput).map_err(|e| UsageError(format!("--goodput: {e}")))?;
        if a.temperature.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
            return usage("--temperature: must be a number >= 0");
        }
        let mut headers = Vec::new();
        for h in &a.headers {
            match h.split_once(':') {
                Some((k, v)) if !k.trim().is_empty() => headers.push((k.trim().to_string(), v.trim().to_string())),
                _ => return usage(format!("--header {h:?}: expected NAME:VALUE")),
            }
        }
        if let Some(name) = &a.result_filename {
            if name.contains('/') {
                return usage(format!("--result-filename {name:?}: a file name, not a path (use --result-dir)"));
            }
        }
        let file = match &a.config {
            Some(p) => load_file(p)?,
            None => CoordinatorFile::default(),
        };
        let f = &a.fleet;
        let addrs = if f.agents.is_empty() { file.agents.clone() } else { f.agents.clone() };
        let agents = if addrs.is_empty() {
            if f.insecure || f.tls_ca.is_some() {
                return usage("--insecure/--tls-*: only meaningful with --agents");
            }
            Agents::Embedded
        } else {
            for addr in &addrs {
                if addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
                    return usage(format!("--agents: {addr:?} is not HOST:PORT"));
                }
            }
            let ca = f.tls_ca.clone().or(file.tls_ca);
            let cert = f.tls_cert.clone().or(file.tls_cert);
            let key = f.tls_key.clone().or(file.tls_key);
            let tls = match (ca, cert, key) {
                (Some(ca), Some(cert), Some(key)) if !f.insecure => Some(TlsPaths { ca, cert, key }),
                (None, None, None) if f.insecure => {
                    if let Some(bad) = addrs.iter().find(|a| !is_loopback(a)) {
                        return usage(format!("--insecure: plaintext is allowed only to loopback agents, not {bad}"));
                    }
                    None
                }
                _ if f.insecure => return usage("--insecure: cannot be combined with --tls-ca/--tls-cert/--tls-key"),
                _ => {
                    return usage(
                        "--agents: needs --tls-ca, --tls-cert and --tls-key (or --insecure for loopback agents)",
                    );
                }
            };
            Agents::Remote { addrs, tls }
        };
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_string(),
            endpoint,
            backend,
            backend_name,
            model: a.model,
            served_model_name: a.served_model_name,
            dataset: d.spec,
            dataset_name: d.name,
            tokenizer: d.tokenizer,
            prompts: d.prompts,
            num_prompts: a.num_prompts,
            duration: a.duration,
            max_concurrency: a.max_concurrency,
            request_rate,
            burstiness: a.burstiness,
            num_warmups: a.num_warmups,
            ignore_eos: a.ignore_eos,
            temperature: a.temperature,
            seed: a.seed,
            percentile_metrics: a.percentile_metrics.0,
            metric_percentiles: a.metric_percentiles.0,
            slo,
            save_result: a.save_result || a.save_detailed,
            save_detailed: a.save_detailed,
            result_dir: a.result_dir,
            result_filename: a.result_filename,
            metadata: a.metadata,
            ready_timeout: a.ready_timeout,
            http2: a.http2,
            headers,
            agents,
            tolerate_agent_loss: a.tolerate_agent_loss,
            max_run_time: a.max_run_time,
            verdict: VerdictLimits {
                cpu_fraction: a.client_cpu_limit,
                lag_p99_us: a.client_lag_limit.as_micros() as u64,
                rate_shortfall: a.client_rate_shortfall,
            },
        })
    }

    /// The name sent in requests.
    pub fn request_model(&self) -> &str {
        self.served_model_name.as_deref().or(self.model.as_deref()).unwrap_or("")
    }
}
