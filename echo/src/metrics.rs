//! Server counters kept in atomics and rendered by hand in the Prometheus
//! text exposition format for `GET /metrics`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// The five metrics of the echo server.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Every request received, whatever its route.
    pub requests_total: AtomicU64,
    /// Completions holding a slot (being generated).
    pub requests_running: AtomicI64,
    /// Completions waiting for a slot.
    pub requests_waiting: AtomicI64,
    /// Output tokens sent.
    pub tokens_total: AtomicU64,
    /// Prompt tokens received (whitespace-separated words).
    pub prompt_tokens_total: AtomicU64,
}

impl Metrics {
    /// Render all metrics in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(1024);
        let rows: [(&str, &str, &str, i128); 5] = [
            (
                "surge_echo_requests_total",
                "counter",
                "Requests received, all routes.",
                i128::from(self.requests_total.load(Relaxed)),
            ),
            (
                "surge_echo_requests_running",
                "gauge",
                "Completions being generated (holding a slot).",
                i128::from(self.requests_running.load(Relaxed)),
            ),
            (
                "surge_echo_requests_waiting",
                "gauge",
                "Completions waiting for a slot.",
                i128::from(self.requests_waiting.load(Relaxed)),
            ),
            ("surge_echo_tokens_total", "counter", "Output tokens sent.", i128::from(self.tokens_total.load(Relaxed))),
            (
                "surge_echo_prompt_tokens_total",
                "counter",
                "Prompt tokens received (whitespace-separated words).",
                i128::from(self.prompt_tokens_total.load(Relaxed)),
            ),
        ];
        for (name, kind, help, value) in rows {
            // Writing to a String cannot fail.
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n");
        }
        out
    }
}

/// Which gauge a [`GaugeGuard`] holds up.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Gauge {
    Running,
    Waiting,
}

/// Increments a gauge on creation and decrements it on drop, so a request
/// dropped at any point (client gone, connection reset) is accounted for.
#[derive(Debug)]
pub(crate) struct GaugeGuard {
    metrics: Arc<Metrics>,
    gauge: Gauge,
}

impl GaugeGuard {
    pub fn new(metrics: Arc<Metrics>, gauge: Gauge) -> Self {
        cell(&metrics, gauge).fetch_add(1, Relaxed);
        Self { metrics, gauge }
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        cell(&self.metrics, self.gauge).fetch_sub(1, Relaxed);
    }
}

fn cell(metrics: &Metrics, gauge: Gauge) -> &AtomicI64 {
    match gauge {
        Gauge::Running => &metrics.requests_running,
        Gauge::Waiting => &metrics.requests_waiting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_help_type_and_values() {
        let m = Arc::new(Metrics::default());
        m.requests_total.fetch_add(3, Relaxed);
        m.tokens_total.fetch_add(10, Relaxed);
        m.prompt_tokens_total.fetch_add(4, Relaxed);
        let running = GaugeGuard::new(m.clone(), Gauge::Running);
        let text = m.render();
        assert!(text.contains("# TYPE surge_echo_requests_total counter\n"));
        assert!(text.contains("surge_echo_requests_total 3\n"));
        assert!(text.contains("# TYPE surge_echo_requests_running gauge\n"));
        assert!(text.contains("surge_echo_requests_running 1\n"));
        assert!(text.contains("surge_echo_requests_waiting 0\n"));
        assert!(text.contains("surge_echo_tokens_total 10\n"));
        assert!(text.contains("surge_echo_prompt_tokens_total 4\n"));
        assert_eq!(text.matches("# HELP ").count(), 5);
        drop(running);
        assert!(m.render().contains("surge_echo_requests_running 0\n"));
    }
}
