//! The server's five metrics, kept in `prometheus` counters and gauges (plain
//! atomics on the hot path) in a registry of their own, one per server, and
//! rendered by `prometheus`'s `TextEncoder` in the Prometheus text format 0.0.4
//! for `GET /metrics`.

use prometheus::{IntCounter, IntGauge, Registry, TextEncoder};

/// The five metrics of the echo server.
#[derive(Debug)]
pub(crate) struct Metrics {
    /// Every request received, whatever its route.
    pub requests_total: IntCounter,
    /// Completions holding a slot (being generated).
    pub requests_running: IntGauge,
    /// Completions waiting for a slot.
    pub requests_waiting: IntGauge,
    /// Output tokens sent.
    pub tokens_total: IntCounter,
    /// Prompt tokens received (whitespace-separated words).
    pub prompt_tokens_total: IntCounter,
    /// This server's metrics only: several servers can run in one process (tests).
    registry: Registry,
}

impl Metrics {
    /// Fresh metrics, all zero, in a registry of their own.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric name and help");
            registry.register(Box::new(c.clone())).expect("metric names are distinct");
            c
        };
        let requests_total = counter("surge_echo_requests_total", "Requests received, all routes.");
        let tokens_total = counter("surge_echo_tokens_total", "Output tokens sent.");
        let prompt_tokens_total =
            counter("surge_echo_prompt_tokens_total", "Prompt tokens received (whitespace-separated words).");
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric name and help");
            registry.register(Box::new(g.clone())).expect("metric names are distinct");
            g
        };
        let requests_running = gauge("surge_echo_requests_running", "Completions being generated (holding a slot).");
        let requests_waiting = gauge("surge_echo_requests_waiting", "Completions waiting for a slot.");
        Self { requests_total, requests_running, requests_waiting, tokens_total, prompt_tokens_total, registry }
    }

    /// Render all metrics in the Prometheus text format (version 0.0.4), sorted
    /// by name.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(1024);
        // Only fails on a malformed metric family, which the constructors above rule out.
        if let Err(e) = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Increments a gauge on creation and decrements it on drop, so a request
/// dropped at any point (client gone, connection reset) is accounted for.
#[derive(Debug)]
pub(crate) struct GaugeGuard(IntGauge);

impl GaugeGuard {
    pub fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
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
        let running = GaugeGuard::new(&m.requests_running);
        let text = m.render();
        assert!(text.contains("# HELP surge_echo_requests_total Requests received, all routes.\n"));
        assert!(text.contains("# TYPE surge_echo_requests_total counter\n"));
        assert!(text.contains("surge_echo_requests_total 3\n"));
        assert!(text.contains("# TYPE surge_echo_requests_running gauge\n"));
        assert!(text.contains("surge_echo_requests_running 1\n"));
        assert!(text.contains("surge_echo_requests_waiting 0\n"));
        assert!(text.contains("surge_echo_tokens_total 10\n"));
        assert!(text.contains("surge_echo_prompt_tokens_total 4\n"));
        assert_eq!(text.matches("# HELP ").count(), 5);
        assert_eq!(text.matches("# TYPE ").count(), 5);
        drop(running);
        assert!(m.render().contains("surge_echo_requests_running 0\n"));
    }

    #[test]
    fn exact_text() {
        let m = Metrics::new();
        m.requests_total.inc_by(7);
        m.requests_waiting.set(2);
        assert_eq!(
            m.render(),
            "# HELP surge_echo_prompt_tokens_total Prompt tokens received (whitespace-separated words).\n\
             # TYPE surge_echo_prompt_tokens_total counter\n\
             surge_echo_prompt_tokens_total 0\n\
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
             surge_echo_tokens_total 0\n"
        );
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
