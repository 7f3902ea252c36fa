//! The client's own live metrics in the Prometheus text format 0.0.4 (D16), for
//! Prometheus or Grafana to watch a long run: `surge run|sweep --prometheus-listen` (every
//! agent, labelled by address) and `surge-agent --metrics-listen` (this agent, plus its
//! sessions). Kept in `prometheus` counters, gauges and histograms of a registry of
//! their own, rendered by its `TextEncoder`, served by a small HTTP/1.1 server.

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::convert::Infallible;
use std::sync::Arc;
use surge_proto::{Health, Row};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// TTFT and E2EL buckets (seconds): vLLM's TTFT buckets, so the two chart alike.
const LATENCY_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// ITL buckets (seconds): vLLM's inter-token buckets.
const ITL_BUCKETS: [f64; 19] =
    [0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0];

/// The live metrics, labelled by agent.
#[derive(Debug)]
pub struct LiveMetrics {
    registry: Registry,
    requests: IntCounterVec,
    errors: IntCounterVec,
    output_tokens: IntCounterVec,
    in_flight: IntGaugeVec,
    ttft: HistogramVec,
    itl: HistogramVec,
    e2el: HistogramVec,
    send_lag_p99: GaugeVec,
    cpu: GaugeVec,
    host_busy: GaugeVec,
    pressure: GaugeVec,
    /// Open coordinator sessions (an agent's own endpoint only: [`LiveMetrics::for_agent`]).
    pub sessions: Option<IntGauge>,
}

impl Default for LiveMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
            r.register(Box::new(m.clone())).expect("metric names are distinct");
            m
        }
        let counter = |name: &str, help: &str, labels: &[&str]| {
            reg(&registry, IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter"))
        };
        let gauge = |name: &str, help: &str| {
            reg(&registry, GaugeVec::new(Opts::new(name, help), &["agent"]).expect("valid gauge"))
        };
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            reg(&registry, HistogramVec::new(opts, &["agent"]).expect("valid histogram"))
        };
        Self {
            requests: counter(
                "surge_requests_total",
                "Requests finished, by outcome (completed, failed).",
                &["agent", "outcome"],
            ),
            errors: counter("surge_errors_total", "Failed requests by error kind.", &["agent", "kind"]),
            output_tokens: counter("surge_output_tokens_total", "Output tokens of completed requests.", &["agent"]),
            in_flight: reg(
                &registry,
                IntGaugeVec::new(Opts::new("surge_requests_in_flight", "Requests in flight."), &["agent"])
                    .expect("valid gauge"),
            ),
            ttft: histogram("surge_ttft_seconds", "Time to first token.", &LATENCY_BUCKETS),
            itl: histogram("surge_itl_seconds", "Inter-token latency.", &ITL_BUCKETS),
            e2el: histogram("surge_e2el_seconds", "End-to-end request latency.", &LATENCY_BUCKETS),
            send_lag_p99: gauge("surge_send_lag_p99_seconds", "Open loop: p99 of actual minus intended send."),
            cpu: gauge("surge_engine_cpu_percent", "The engine's CPU (100 = one core)."),
            host_busy: gauge("surge_host_busy_percent", "Busy share of all the agent host's CPUs."),
            pressure: gauge("surge_cpu_pressure_percent", "Share of time some task waited for a CPU (PSI)."),
            sessions: None,
            registry,
        }
    }

    /// An agent's own metrics: also its open sessions.
    pub fn for_agent() -> Self {
        let mut m = Self::new();
        let g = IntGauge::new("surge_agent_sessions", "Open coordinator sessions.").expect("valid gauge");
        m.registry.register(Box::new(g.clone())).expect("metric names are distinct");
        m.sessions = Some(g);
        m
    }

    /// One finished request of `agent`.
    pub fn row(&self, agent: &str, row: &Row) {
        if row.error() != surge_proto::ErrorKind::None {
            let kind = row.error().as_str_name().trim_start_matches("ERROR_KIND_").to_ascii_lowercase();
            self.requests.with_label_values(&[agent, "failed"]).inc();
            self.errors.with_label_values(&[agent, &kind]).inc();
            return;
        }
        self.requests.with_label_values(&[agent, "completed"]).inc();
        self.output_tokens.with_label_values(&[agent]).inc_by(u64::from(row.output_tokens));
        if row.ttft_us > 0 {
            self.ttft.with_label_values(&[agent]).observe(row.ttft_us as f64 / 1e6);
        }
        self.e2el.with_label_values(&[agent]).observe(row.latency_us as f64 / 1e6);
        let itl = self.itl.with_label_values(&[agent]);
        for g in row.gaps() {
            itl.observe(f64::from(g) / 1e6);
        }
    }

    /// A health report of `agent`.
    pub fn health(&self, agent: &str, h: &Health) {
        self.in_flight.with_label_values(&[agent]).set(i64::from(h.in_flight));
        self.send_lag_p99.with_label_values(&[agent]).set(h.lag_p99_us as f64 / 1e6);
        self.cpu.with_label_values(&[agent]).set(h.cpu_percent);
        self.host_busy.with_label_values(&[agent]).set(h.host_busy_pct);
        if let Some(p) = h.cpu_pressure_pct {
            self.pressure.with_label_values(&[agent]).set(p);
        }
    }

    /// Everything, in the Prometheus text format 0.0.4.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096);
        // Only fails on a malformed family, which the constructors rule out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// Serves `GET /metrics` (any path, in fact) on `listener` until `stop`.
pub async fn serve(listener: TcpListener, metrics: Arc<LiveMetrics>, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let m = Arc::clone(&metrics);
        tokio::spawn(async move {
            let svc = service_fn(move |_req| {
                let body = Full::new(Bytes::from(m.render()));
                let resp = hyper::Response::builder()
                    .header(hyper::header::CONTENT_TYPE, prometheus::TEXT_FORMAT)
                    .body(body)
                    .expect("a valid response");
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::ErrorKind;

    #[test]
    fn rows_and_health_become_labelled_series() {
        let m = LiveMetrics::for_agent();
        let ok = Row {
            ttft_us: 20_000,
            latency_us: 50_000,
            output_tokens: 3,
            itl_us: surge_proto::gaps::pack(&[15_000, 15_000]),
            ..Default::default()
        };
        m.row("a:1", &ok);
        m.row("a:1", &ok);
        let mut bad = Row::default();
        bad.set_error(ErrorKind::Timeout);
        m.row("b:2", &bad);
        m.health("a:1", &Health { in_flight: 7, cpu_percent: 42.0, lag_p99_us: 1500, ..Default::default() });
        let text = String::from_utf8(m.render()).unwrap();
        for line in [
            "surge_requests_total{agent=\"a:1\",outcome=\"completed\"} 2",
            "surge_requests_total{agent=\"b:2\",outcome=\"failed\"} 1",
            "surge_errors_total{agent=\"b:2\",kind=\"timeout\"} 1",
            "surge_output_tokens_total{agent=\"a:1\"} 6",
            "surge_requests_in_flight{agent=\"a:1\"} 7",
            "surge_engine_cpu_percent{agent=\"a:1\"} 42",
            "surge_send_lag_p99_seconds{agent=\"a:1\"} 0.0015",
            "surge_ttft_seconds_bucket{agent=\"a:1\",le=\"0.02\"} 2",
            "surge_ttft_seconds_count{agent=\"a:1\"} 2",
            "surge_itl_seconds_count{agent=\"a:1\"} 4",
            "surge_e2el_seconds_bucket{agent=\"a:1\",le=\"0.04\"} 0",
            "surge_agent_sessions 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(
            !String::from_utf8(LiveMetrics::new().render()).unwrap().contains("sessions"),
            "a coordinator's has none"
        );
    }
}
