//! The server's metrics, kept in `prometheus` counters and gauges (plain
//! atomics on the hot path) in a registry of their own, one per server, and
//! rendered by `prometheus`'s `TextEncoder` in the Prometheus text format 0.0.4
//! for `GET /metrics`. With `--metrics-flavor vllm` the registry also holds
//! their vLLM-named twins ([`VllmMetrics`]).
//!
//! Every update goes through a method of [`Metrics`], which updates a metric and
//! its twin together: one code path, so they never disagree.

use std::time::Instant;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::vllm::VllmMetrics;

/// The metrics of the echo server.
#[derive(Debug)]
pub(crate) struct Metrics {
    /// Every request received, whatever its route.
    requests_total: IntCounter,
    /// Of them, requests that came over HTTP/3.
    http3_requests_total: IntCounter,
    /// Completions holding a slot (being generated).
    requests_running: IntGauge,
    /// Completions waiting for a slot.
    requests_waiting: IntGauge,
    /// Output tokens sent.
    tokens_total: IntCounter,
    /// Prompt tokens received (whitespace-separated words).
    prompt_tokens_total: IntCounter,
    /// `--prefix-cache-tokens`: prompt tokens found in the cache, and the others.
    prompt_cached_tokens_total: IntCounter,
    prompt_uncached_tokens_total: IntCounter,
    /// Inline images (`data:image/...` URLs) in chat requests answered.
    prompt_images_total: IntCounter,
    /// Chat streams answered with a tool call (`--tool-call`, `--tool-call-rate`).
    tool_call_replies_total: IntCounter,
    /// `tool` messages received, and those naming no call of the assistant message
    /// before them.
    tool_results_total: IntCounter,
    tool_results_unmatched_total: IntCounter,
    /// Completions per LoRA adapter (`--lora-modules`), labelled `lora`.
    lora_requests_total: IntCounterVec,
    /// Anomalies injected into streams (D70), labelled `kind`.
    injected_anomalies_total: IntCounterVec,
    /// vLLM's names for the same counts (`--metrics-flavor vllm`).
    vllm: Option<VllmMetrics>,
    /// This server's metrics only: several servers can run in one process (tests).
    registry: Registry,
}

impl Metrics {
    /// Fresh metrics, all zero, in a registry of their own; without vLLM's names.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Fresh metrics that also carry vLLM's names, labelled `model_name`;
    /// `slots` is the completion slot limit (`None`: none).
    pub fn with_vllm(model_name: &str, slots: Option<usize>) -> Self {
        Self::build(Some((model_name, slots)))
    }

    fn build(vllm: Option<(&str, Option<usize>)>) -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric name and help");
            registry.register(Box::new(c.clone())).expect("metric names are distinct");
            c
        };
        let requests_total = counter("surge_echo_requests_total", "Requests received, all routes.");
        let http3_requests_total =
            counter("surge_echo_http3_requests_total", "Requests received over HTTP/3 (QUIC), all routes.");
        let tokens_total = counter("surge_echo_tokens_total", "Output tokens sent.");
        let prompt_tokens_total =
            counter("surge_echo_prompt_tokens_total", "Prompt tokens received (whitespace-separated words).");
        let prompt_cached_tokens_total = counter(
            "surge_echo_prompt_cached_tokens_total",
            "Prompt tokens found in the prefix cache (--prefix-cache-tokens).",
        );
        let prompt_uncached_tokens_total = counter(
            "surge_echo_prompt_uncached_tokens_total",
            "Prompt tokens not found in the prefix cache (--prefix-cache-tokens).",
        );
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric name and help");
            registry.register(Box::new(g.clone())).expect("metric names are distinct");
            g
        };
        let requests_running = gauge("surge_echo_requests_running", "Completions being generated (holding a slot).");
        let requests_waiting = gauge("surge_echo_requests_waiting", "Completions waiting for a slot.");
        let prompt_images_total =
            counter("surge_echo_prompt_images_total", "Inline images (data URLs) in chat requests answered.");
        let tool_call_replies_total =
            counter("surge_echo_tool_call_replies_total", "Chat streams answered with a tool call.");
        let tool_results_total = counter("surge_echo_tool_results_total", "`tool` messages received in chat requests.");
        let tool_results_unmatched_total = counter(
            "surge_echo_tool_results_unmatched_total",
            "`tool` messages whose tool_call_id names no call of the assistant message before them.",
        );
        let lora_requests_total = IntCounterVec::new(
            Opts::new("surge_echo_lora_requests_total", "Completions naming a LoRA adapter (--lora-modules)."),
            &["lora"],
        )
        .expect("valid metric name and label");
        registry.register(Box::new(lora_requests_total.clone())).expect("metric names are distinct");
        let injected_anomalies_total = IntCounterVec::new(
            Opts::new(
                "surge_echo_injected_anomalies_total",
                "Streams given an anomaly (--drop-finish-reason-rate, --usage-mismatch-rate, --early-eos-rate).",
            ),
            &["kind"],
        )
        .expect("valid metric name and label");
        registry.register(Box::new(injected_anomalies_total.clone())).expect("metric names are distinct");
        let vllm = vllm.map(|(model_name, slots)| VllmMetrics::new(&registry, model_name, slots));
        Self {
            prompt_cached_tokens_total,
            prompt_uncached_tokens_total,
            prompt_images_total,
            tool_call_replies_total,
            tool_results_total,
            tool_results_unmatched_total,
            lora_requests_total,
            injected_anomalies_total,
            requests_total,
            http3_requests_total,
            requests_running,
            requests_waiting,
            tokens_total,
            prompt_tokens_total,
            vllm,
            registry,
        }
    }

    /// A request received, on any route.
    pub fn count_request(&self) {
        self.requests_total.inc();
    }

    /// Inline images of a chat request that will be answered.
    pub fn count_images(&self, n: u64) {
        self.prompt_images_total.inc_by(n);
    }

    /// A stream given an anomaly.
    pub fn count_anomaly(&self, kind: Injected) {
        self.injected_anomalies_total.with_label_values(&[kind.label()]).inc();
    }

    /// A chat stream answered with a tool call.
    pub fn count_tool_call_reply(&self) {
        self.tool_call_replies_total.inc();
    }

    /// A request's `tool` messages: how many, and how many named no call before them.
    pub fn count_tool_results(&self, n: u64, unmatched: u64) {
        self.tool_results_total.inc_by(n);
        self.tool_results_unmatched_total.inc_by(unmatched);
    }

    /// A completion naming LoRA adapter `name` (one of `--lora-modules`: bounded labels).
    pub fn count_lora(&self, name: &str) {
        self.lora_requests_total.with_label_values(&[name]).inc();
    }

    /// A request received over HTTP/3 (also counted by [`Metrics::count_request`]).
    pub fn count_http3_request(&self) {
        self.http3_requests_total.inc();
    }

    /// Prompt tokens of a completion request that will be answered.
    pub fn count_prompt_tokens(&self, n: u64) {
        self.prompt_tokens_total.inc_by(n);
        if let Some(v) = &self.vllm {
            v.prompt_tokens.inc_by(n);
        }
    }

    /// A prompt's prefix-cache lookup: cached and uncached tokens.
    pub fn count_cache(&self, cached: u64, uncached: u64) {
        self.prompt_cached_tokens_total.inc_by(cached);
        self.prompt_uncached_tokens_total.inc_by(uncached);
    }

    /// Output tokens sent.
    pub fn count_tokens(&self, n: u64) {
        self.tokens_total.inc_by(n);
        if let Some(v) = &self.vllm {
            v.generation_tokens.inc_by(n);
        }
    }

    /// A completion's first output token is being written now; it arrived at
    /// `arrived` (vLLM's time to first token).
    pub fn first_token(&self, arrived: Instant) {
        if let Some(v) = &self.vllm {
            v.ttft.observe(arrived.elapsed().as_secs_f64());
        }
    }

    /// A completion finished normally (its last token, or `[DONE]`, written).
    pub fn count_success(&self) {
        if let Some(v) = &self.vllm {
            v.success.inc();
        }
    }

    /// A completion holding a slot, until the guard is dropped.
    pub fn running(&self) -> GaugeGuard {
        GaugeGuard::new(&self.requests_running, self.vllm.as_ref().map(|v| &v.running))
    }

    /// A completion waiting for a slot, until the guard is dropped.
    pub fn waiting(&self) -> GaugeGuard {
        GaugeGuard::new(&self.requests_waiting, self.vllm.as_ref().map(|v| &v.waiting))
    }

    /// Output tokens sent so far.
    #[cfg(test)]
    pub fn tokens_sent(&self) -> u64 {
        self.tokens_total.get()
    }

    /// Completions holding a slot now.
    #[cfg(test)]
    pub fn running_now(&self) -> i64 {
        self.requests_running.get()
    }

    /// Render all metrics in the Prometheus text format (version 0.0.4), sorted
    /// by name.
    pub fn render(&self) -> String {
        if let Some(v) = &self.vllm {
            v.refresh();
        }
        let mut out = String::with_capacity(1024);
        // Only fails on a malformed metric family, which the constructors above rule out.
        if let Err(e) = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

/// An anomaly the echo puts into a stream (D70).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Injected {
    DroppedFinish,
    UsageMismatch,
    EarlyEos,
    /// A stream with no token (`--empty-reply-rate`).
    Empty,
    /// `--answers`: a question answered right, or wrong (`--wrong-answer-rate`).
    RightAnswer,
    WrongAnswer,
    /// A reply naming another request (`--misdirect-rate`).
    Misdirected,
}

impl Injected {
    fn label(self) -> &'static str {
        match self {
            Injected::DroppedFinish => "no_finish_reason",
            Injected::UsageMismatch => "usage_mismatch",
            Injected::EarlyEos => "early_eos",
            Injected::Empty => "no_tokens",
            Injected::RightAnswer => "right_answer",
            Injected::WrongAnswer => "wrong_answer",
            Injected::Misdirected => "misdirected",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Increments a gauge (and its vLLM twin) on creation and decrements them on
/// drop, so a request dropped at any point (client gone, connection reset) is
/// accounted for.
#[derive(Debug)]
pub(crate) struct GaugeGuard(IntGauge, Option<IntGauge>);

impl GaugeGuard {
    fn new(gauge: &IntGauge, twin: Option<&IntGauge>) -> Self {
        gauge.inc();
        if let Some(t) = twin {
            t.inc();
        }
        Self(gauge.clone(), twin.cloned())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
        if let Some(t) = &self.1 {
            t.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_help_type_and_values() {
        let m = Metrics::new();
        m.requests_total.inc_by(3);
        m.tokens_total.inc_by(10);
        m.prompt_tokens_total.inc_by(4);
        let running = m.running();
        let text = m.render();
        assert!(text.contains("# HELP surge_echo_requests_total Requests received, all routes.\n"));
        assert!(text.contains("# TYPE surge_echo_requests_total counter\n"));
        assert!(text.contains("surge_echo_requests_total 3\n"));
        assert!(text.contains("# TYPE surge_echo_requests_running gauge\n"));
        assert!(text.contains("surge_echo_requests_running 1\n"));
        assert!(text.contains("surge_echo_requests_waiting 0\n"));
        assert!(text.contains("surge_echo_tokens_total 10\n"));
        assert!(text.contains("surge_echo_prompt_tokens_total 4\n"));
        assert!(text.contains("surge_echo_http3_requests_total 0\n"));
        assert!(text.contains("surge_echo_prompt_images_total 0\n"));
        // An adapter's counter appears once it counted.
        assert!(!text.contains("surge_echo_lora_requests_total"));
        m.count_lora("a");
        let text = m.render();
        assert!(text.contains("surge_echo_lora_requests_total{lora=\"a\"} 1\n"), "{text}");
        assert_eq!(text.matches("# HELP ").count(), 13);
        assert_eq!(text.matches("# TYPE ").count(), 13);
        drop(running);
        assert!(m.render().contains("surge_echo_requests_running 0\n"));
    }

    #[test]
    fn exact_text() {
        let m = Metrics::new();
        m.requests_total.inc_by(7);
        m.requests_waiting.set(2);
        m.count_http3_request();
        assert_eq!(
            m.render(),
            "# HELP surge_echo_http3_requests_total Requests received over HTTP/3 (QUIC), all routes.\n\
             # TYPE surge_echo_http3_requests_total counter\n\
             surge_echo_http3_requests_total 1\n\
             # HELP surge_echo_prompt_cached_tokens_total Prompt tokens found in the prefix cache (--prefix-cache-tokens).\n\
             # TYPE surge_echo_prompt_cached_tokens_total counter\n\
             surge_echo_prompt_cached_tokens_total 0\n\
             # HELP surge_echo_prompt_images_total Inline images (data URLs) in chat requests answered.\n\
             # TYPE surge_echo_prompt_images_total counter\n\
             surge_echo_prompt_images_total 0\n\
             # HELP surge_echo_prompt_tokens_total Prompt tokens received (whitespace-separated words).\n\
             # TYPE surge_echo_prompt_tokens_total counter\n\
             surge_echo_prompt_tokens_total 0\n\
             # HELP surge_echo_prompt_uncached_tokens_total Prompt tokens not found in the prefix cache (--prefix-cache-tokens).\n\
             # TYPE surge_echo_prompt_uncached_tokens_total counter\n\
             surge_echo_prompt_uncached_tokens_total 0\n\
             # HELP surge_echo_requests_running Completions being generated (holding a slot).\n\
             # TYPE surge_echo_requests_running gauge\n\
             surge_echo_requests_running 0\n\
             # HELP surge_echo_requests_total Requests received, all routes.\n\
             # TYPE surge_echo_requests_total counter\n\
             surge_echo_requests_total 7\n\
             # HELP surge_echo_requests_waiting Completions waiting for a slot.\n\
             # TYPE surge_echo_requests_waiting gauge\n\
             surge_echo_requests_waiting 2\n\
             # HELP surge_echo_tokens_total Output tokens sent.\n\
             # TYPE surge_echo_tokens_total counter\n\
             surge_echo_tokens_total 0\n\
             # HELP surge_echo_tool_call_replies_total Chat streams answered with a tool call.\n\
             # TYPE surge_echo_tool_call_replies_total counter\n\
             surge_echo_tool_call_replies_total 0\n\
             # HELP surge_echo_tool_results_total `tool` messages received in chat requests.\n\
             # TYPE surge_echo_tool_results_total counter\n\
             surge_echo_tool_results_total 0\n\
             # HELP surge_echo_tool_results_unmatched_total `tool` messages whose tool_call_id names no call of the assistant message before them.\n\
             # TYPE surge_echo_tool_results_unmatched_total counter\n\
             surge_echo_tool_results_unmatched_total 0\n"
        );
    }

    #[test]
    fn vllm_twins_move_with_the_surge_metrics() {
        let m = Metrics::with_vllm("m", Some(2));
        m.count_request();
        m.count_prompt_tokens(3);
        m.count_tokens(5);
        m.count_tokens(1);
        m.count_success();
        m.first_token(Instant::now());
        let running = m.running();
        let waiting = m.waiting();
        let text = m.render();
        for line in [
            "surge_echo_prompt_tokens_total 3\n",
            "vllm:prompt_tokens_total{model_name=\"m\"} 3\n",
            "surge_echo_tokens_total 6\n",
            "vllm:generation_tokens_total{model_name=\"m\"} 6\n",
            "vllm:request_success_total{model_name=\"m\"} 1\n",
            "surge_echo_requests_running 1\n",
            "vllm:num_requests_running{model_name=\"m\"} 1\n",
            "surge_echo_requests_waiting 1\n",
            "vllm:num_requests_waiting{model_name=\"m\"} 1\n",
            "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n",
            "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        // The surge metrics come first, as before, then vLLM's.
        assert!(text.find("surge_echo_").unwrap() < text.find("vllm:").unwrap());
        drop((running, waiting));
        let text = m.render();
        assert!(text.contains("vllm:num_requests_running{model_name=\"m\"} 0\n"));
        assert!(text.contains("vllm:num_requests_waiting{model_name=\"m\"} 0\n"));
        assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0\n"));
    }

    #[test]
    fn servers_do_not_share_metrics() {
        let a = Metrics::new();
        let b = Metrics::new();
        a.tokens_total.inc_by(5);
        assert!(a.render().contains("surge_echo_tokens_total 5\n"));
        assert!(b.render().contains("surge_echo_tokens_total 0\n"));
    }
}
