//! `surge validate` as a value: the concurrency levels, what each request does, where
//! the table goes, and the run being judged; each level's plan is the base run with the
//! target and the concurrency set.

use super::RunPlan;
use std::path::PathBuf;

/// Bytes per token of the non-streaming estimate (the usual rule of thumb for English
/// text in BPE vocabularies).
pub const BYTES_PER_TOKEN: f64 = 4.0;
/// Default minimum headroom for `--against`.
pub const DEFAULT_MIN_HEADROOM: f64 = 10.0;
/// Levels when neither `--levels` nor `--against` says.
pub const DEFAULT_LEVELS: [u32; 7] = [100, 250, 500, 750, 1000, 1500, 2000];

/// A validated `surge validate`.
#[derive(Debug, Clone)]
pub struct ValidatePlan {
    /// An echo server elsewhere; `None` = one embedded in this process.
    pub target: Option<String>,
    /// Explicit `--levels`; otherwise the judged run's concurrency or [`DEFAULT_LEVELS`].
    pub levels: Option<Vec<u32>>,
    pub streaming: bool,
    pub requests_per_level: u64,
    pub tokens_per_request: u32,
    pub result_dir: PathBuf,
    pub against: Option<PathBuf>,
    pub min_headroom: f64,
    /// The embedded echo's inter-token latency (`--itl-ms`).
    pub itl_ms: f64,
    /// Every level's run, except the target and the concurrency.
    pub base: RunPlan,
}

impl ValidatePlan {
    /// The plan of one level against `base_url`.
    pub fn at(&self, base_url: &str, level: u32) -> RunPlan {
        let mut p = self.base.clone();
        p.base_url = base_url.trim_end_matches('/').to_string();
        p.endpoints = super::EndpointsPlan::single(&p.base_url);
        p.max_concurrency = Some(level);
        p
    }
}
