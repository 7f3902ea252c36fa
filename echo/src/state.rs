//! What request handlers share: [`State`], one per server (configuration,
//! metrics, completion slots, the token timer, the prompt counter), and
//! [`ConnCtx`], what a handler knows about its connection.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use crate::arrival::ArrivalClock;
use crate::config::{EchoConfig, MetricsFlavor};
use crate::counter::Counter;
use crate::metrics::Metrics;
use crate::prefix_cache::PrefixCache;
use crate::timer::Timer;

/// State shared by all connections of one server.
#[derive(Debug)]
pub(crate) struct State {
    pub config: EchoConfig,
    pub metrics: Arc<Metrics>,
    /// Completion requests seen so far (numbers requests for ids and faults).
    pub completions: AtomicU64,
    /// Between `POST /start_profile` and `POST /stop_profile` (vLLM's profiler routes).
    pub profiling: std::sync::atomic::AtomicBool,
    /// Completion slots (`--max-concurrent-streams`).
    pub slots: Option<Arc<Semaphore>>,
    /// Wakes streams and non-streamed responses at their token deadlines.
    pub timer: Timer,
    /// Counts prompt tokens (words or `--tokenizer`).
    pub counter: Counter,
    /// The `/v1/models` body, rendered once.
    pub models_body: Bytes,
    /// `x-served-by` of every response (`--replica-name`).
    pub served_by: Option<http::HeaderValue>,
    /// `--answers`: questions and their answers' tokens (checked by `validate`).
    pub answers: crate::answers::Answers,
    /// `--prefix-cache-tokens`: the prompt-block cache (D33).
    pub prefix_cache: Option<Mutex<PrefixCache>>,
}

impl State {
    pub fn new(config: EchoConfig, timer: Timer, counter: Counter) -> Self {
        let models = json!({
            "object": "list",
            "data": [{"id": config.model, "object": "model", "owned_by": "surge-echo"}],
        });
        Self {
            slots: config.max_concurrent_streams.map(|k| Arc::new(Semaphore::new(k))),
            models_body: Bytes::from(serde_json::to_vec(&models).unwrap_or_default()),
            served_by: config.replica_name.as_deref().and_then(|n| http::HeaderValue::try_from(n).ok()),
            answers: config.answers.as_deref().and_then(|p| crate::answers::load(p).ok()).unwrap_or_default(),
            metrics: Arc::new(match config.metrics_flavor {
                MetricsFlavor::Surge => Metrics::new(),
                MetricsFlavor::Vllm => Metrics::with_vllm(&config.model, config.max_concurrent_streams),
            }),
            completions: AtomicU64::new(0),
            profiling: std::sync::atomic::AtomicBool::new(false),
            prefix_cache: (config.prefix_cache_tokens > 0)
                .then(|| Mutex::new(PrefixCache::new(config.prefix_cache_tokens, config.block_size))),
            timer,
            counter,
            config,
        }
    }
}

/// What a request handler knows about its connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnCtx {
    /// The close-after-stream signal, when that mode is on.
    pub close_notify: Option<Arc<Notify>>,
    /// When the connection's latest bytes arrived (the kernel's stamp).
    pub arrival: ArrivalClock,
    /// The client's address.
    pub peer: Option<std::net::IpAddr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_body_lists_the_model() {
        let state = State::new(
            EchoConfig { model: "my\"model".to_owned(), ..EchoConfig::default() },
            Timer::new().unwrap(),
            Counter::Words,
        );
        let v: serde_json::Value = serde_json::from_slice(&state.models_body).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], "my\"model");
        assert_eq!(v["data"][0]["object"], "model");
        assert_eq!(v["data"][0]["owned_by"], "surge-echo");
    }
}
