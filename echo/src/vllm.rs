//! vLLM's metric names (`--metrics-flavor vllm`): the `vllm:*` twins of the
//! server's own metrics, each labelled `model_name` with the served model, so
//! that a client reading a vLLM server's `/metrics` can read the echo's too.
//!
//! They are only registered and updated here; the server's `Metrics`
//! updates them where it updates its own, so the two never disagree.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// vLLM's buckets of `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];

/// The one label of every vLLM metric.
const LABEL: &str = "model_name";

/// The vLLM-named metrics of one server, resolved for its model name.
#[derive(Debug)]
pub(crate) struct VllmMetrics {
    /// `vllm:num_requests_running`: completions being generated.
    pub running: IntGauge,
    /// `vllm:num_requests_waiting`: completions waiting for a slot.
    pub waiting: IntGauge,
    /// `vllm:kv_cache_usage_perc`: running / slots, set when rendered.
    kv_cache_usage: Gauge,
    /// `vllm:prompt_tokens_total`: prompt tokens of completion requests.
    pub prompt_tokens: IntCounter,
    /// `vllm:generation_tokens_total`: output tokens sent.
    pub generation_tokens: IntCounter,
    /// `vllm:request_success_total`: completions that finished normally.
    pub success: IntCounter,
    /// `vllm:time_to_first_token_seconds`: arrival to first output token.
    pub ttft: Histogram,
    /// Completion slots (`--max-concurrent-streams`); `None`: no limit.
    slots: Option<usize>,
}

impl VllmMetrics {
    /// The metrics of a server serving `model_name` with `slots` completion
    /// slots, all zero, registered in `registry`.
    pub fn new(registry: &Registry, model_name: &str, slots: Option<usize>) -> Self {
        let labels = [model_name];
        let int_gauge = |name: &str, help: &str| {
            let v = IntGaugeVec::new(Opts::new(name, help), &[LABEL]).expect("valid metric name and help");
            registry.register(Box::new(v.clone())).expect("metric names are distinct");
            v.with_label_values(&labels)
        };
        let counter = |name: &str, help: &str| {
            let v = IntCounterVec::new(Opts::new(name, help), &[LABEL]).expect("valid metric name and help");
            registry.register(Box::new(v.clone())).expect("metric names are distinct");
            v.with_label_values(&labels)
        };
        let kv = GaugeVec::new(
            Opts::new("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
            &[LABEL],
        )
        .expect("valid metric name and help");
        registry.register(Box::new(kv.clone())).expect("metric names are distinct");
        let ttft_opts =
            HistogramOpts::new("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.")
                .buckets(TTFT_BUCKETS.to_vec());
        let ttft = HistogramVec::new(ttft_opts, &[LABEL]).expect("valid metric name, help and buckets");
        registry.register(Box::new(ttft.clone())).expect("metric names are distinct");
        Self {
            running: int_gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
            waiting: int_gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
            kv_cache_usage: kv.with_label_values(&labels),
            prompt_tokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
            generation_tokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
            success: counter("vllm:request_success_total", "Count of successfully processed requests."),
            ttft: ttft.with_label_values(&labels),
            slots,
        }
    }

    /// Bring the derived gauge up to date before rendering: the KV-cache usage is
    /// the fraction of slots running (0 without a slot limit).
    pub fn refresh(&self) {
        let usage = match self.slots {
            Some(k) if k > 0 => self.running.get().max(0) as f64 / k as f64,
            _ => 0.0,
        };
        self.kv_cache_usage.set(usage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(registry: &Registry) -> String {
        prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap()
    }

    #[test]
    fn every_metric_carries_the_model_name() {
        let registry = Registry::new();
        let v = VllmMetrics::new(&registry, "my \"model\"", Some(4));
        v.running.set(3);
        v.refresh();
        let text = render(&registry);
        assert!(text.contains("vllm:num_requests_running{model_name=\"my \\\"model\\\"\"} 3\n"), "{text}");
        assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"my \\\"model\\\"\"} 0.75\n"), "{text}");
        assert_eq!(text.matches("# TYPE vllm:").count(), 7);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("vllm:") && line.contains("model_name="), "{line}");
        }
    }

    #[test]
    fn ttft_has_vllms_buckets() {
        let registry = Registry::new();
        let v = VllmMetrics::new(&registry, "m", None);
        v.ttft.observe(0.03);
        v.refresh();
        let text = render(&registry);
        assert_eq!(text.matches("vllm:time_to_first_token_seconds_bucket{").count(), TTFT_BUCKETS.len() + 1);
        assert!(text.contains("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.02\"} 0\n"), "{text}");
        assert!(text.contains("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.04\"} 1\n"), "{text}");
        assert!(text.contains("vllm:time_to_first_token_seconds_count{model_name=\"m\"} 1\n"), "{text}");
        // No slot limit: no usage.
        assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0\n"), "{text}");
    }
}
