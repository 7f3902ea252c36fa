//! OTLP traces of a command: a span for the command's run (its metadata and
//! headline numbers), a child span per level, and a span per request (`llm.request`,
//! OpenTelemetry GenAI attributes) rebuilt from its row, with the trace and span ids the
//! agent sent in its `traceparent` (D19), so a server that traces joins the request's
//! trace. Each request span links to its level's span. Exported in batches by
//! `opentelemetry-otlp` over gRPC or HTTP/protobuf.

use crate::fleet::outcome::{GlobalRow, kind_name};
use crate::output::result::RunResult;
use crate::output::{LevelStart, Output, OutputError};
use crate::plan::{OtlpPlan, OtlpProtocol};
use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The level in progress.
#[derive(Debug)]
struct Level {
    run_id: u64,
    span: SpanId,
    start_unix_ns: i64,
    model: String,
    agents: Vec<String>,
}

/// A command's traces.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    ratio: f64,
    trace: TraceId,
    span: SpanId,
    started: SystemTime,
    level: Option<Level>,
    levels: u32,
    /// The command's span is out and the exporter shut down.
    finished: bool,
}

fn at(unix_ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(unix_ns).unwrap_or(0))
}

impl Traces {
    /// The exporter and the command's trace; call from a blocking context (the HTTP
    /// exporter's client runs its own runtime).
    pub fn new(plan: &OtlpPlan) -> Result<Self, String> {
        let exporter = match plan.protocol {
            OtlpProtocol::Grpc => {
                let mut md = tonic::metadata::MetadataMap::new();
                for (k, v) in &plan.headers {
                    let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .map_err(|e| format!("--otlp-header {k}: {e}"))?;
                    md.insert(key, v.parse().map_err(|e| format!("--otlp-header {k}: {e}"))?);
                }
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(plan.endpoint.clone())
                    .with_metadata(md)
                    .with_timeout(Duration::from_secs(10))
                    .build()
            }
            OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(plan.endpoint.clone())
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_headers(plan.headers.iter().cloned().collect())
                .with_timeout(Duration::from_secs(10))
                .build(),
        }
        .map_err(|e| format!("--otlp-endpoint {}: {e}", plan.endpoint))?;
        // A large queue: at thousands of requests a second, a small one drops spans.
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(1 << 16)
            .with_max_export_batch_size(2048)
            .with_scheduled_delay(Duration::from_millis(500))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).with_batch_config(batch).build())
            .with_resource(opentelemetry_sdk::Resource::builder().with_service_name("surge").build())
            .build();
        use opentelemetry::trace::TracerProvider as _;
        let tracer = provider.tracer("surge");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let (trace, span) = surge_core::trace::ids(now.as_nanos() as u64, u64::MAX);
        Ok(Self {
            provider,
            tracer,
            ratio: plan.sample_ratio,
            trace: TraceId::from(trace),
            span: SpanId::from(span),
            started: SystemTime::now(),
            level: None,
            levels: 0,
            finished: false,
        })
    }

    fn command_context(&self) -> Context {
        let sc = SpanContext::new(self.trace, self.span, TraceFlags::SAMPLED, false, TraceState::default());
        Context::new().with_remote_span_context(sc)
    }

    /// A level began at `start_unix_ns` (coordinator clock) on `agents`.
    pub fn level_start(&mut self, run_id: u64, start_unix_ns: i64, model: &str, agents: Vec<String>) {
        self.levels += 1;
        let (_, span) = surge_core::trace::ids(run_id, u64::MAX - 1);
        self.level = Some(Level { run_id, span: SpanId::from(span), start_unix_ns, model: model.into(), agents });
    }

    /// One span per sampled request.
    pub fn rows<'a>(&self, rows: impl IntoIterator<Item = &'a GlobalRow>) {
        let Some(l) = &self.level else { return };
        let level = SpanContext::new(self.trace, l.span, TraceFlags::SAMPLED, false, TraceState::default());
        for r in rows {
            let (trace, span) = surge_core::trace::ids(l.run_id, r.row.index);
            if !surge_core::trace::sampled(trace, self.ratio) {
                continue;
            }
            let start = l.start_unix_ns + (r.start_s * 1e9) as i64;
            let end = start + (r.e2el_s() * 1e9) as i64;
            let agent = l.agents.get(r.agent).cloned().unwrap_or_default();
            let mut attrs = vec![
                KeyValue::new("gen_ai.operation.name", "text_completion"),
                KeyValue::new("gen_ai.request.model", l.model.clone()),
                KeyValue::new("gen_ai.usage.input_tokens", i64::from(r.row.input_tokens)),
                KeyValue::new("gen_ai.usage.output_tokens", i64::from(r.row.output_tokens)),
                KeyValue::new("surge.e2el_ms", r.e2el_s() * 1e3),
                KeyValue::new("surge.agent", agent),
                KeyValue::new("surge.request_index", r.row.index as i64),
            ];
            if r.row.ttft_us > 0 {
                attrs.push(KeyValue::new("surge.ttft_ms", r.ttft_s() * 1e3));
            }
            if !r.row.response_id.is_empty() {
                attrs.push(KeyValue::new("gen_ai.response.id", r.row.response_id_str().into_owned()));
            }
            if r.row.http_status > 0 {
                attrs.push(KeyValue::new("http.response.status_code", i64::from(r.row.http_status)));
            }
            let status = if r.ok() {
                Status::Ok
            } else {
                let kind = kind_name(r.row.error());
                attrs.push(KeyValue::new("error.type", kind.clone()));
                Status::error(kind)
            };
            let mut b = SpanBuilder::from_name("llm.request")
                .with_kind(SpanKind::Client)
                .with_trace_id(TraceId::from(trace))
                .with_span_id(SpanId::from(span))
                .with_start_time(at(start))
                .with_end_time(at(end))
                .with_attributes(attrs)
                .with_links(vec![Link::with_context(level.clone())]);
            b.status = status;
            drop(self.tracer.build_with_context(b, &Context::new()));
        }
    }

    /// The level ended with result `r`: its span, with the headline numbers.
    pub fn level_end(&mut self, r: &RunResult) {
        let Some(l) = self.level.take() else { return };
        let end = at(l.start_unix_ns) + Duration::from_secs_f64(r.duration.max(0.0));
        let mut b = SpanBuilder::from_name(format!("level {}", self.levels))
            .with_span_id(l.span)
            .with_start_time(at(l.start_unix_ns))
            .with_end_time(end)
            .with_attributes({
                let mut a = headline(r);
                // Request spans' ids derive from it (D19).
                a.push(KeyValue::new("surge.run_id", l.run_id.to_string()));
                a
            });
        b.status = Status::Ok;
        drop(self.tracer.build_with_context(b, &self.command_context()));
    }

    /// The command's span (with the last level's metadata and numbers), then every span
    /// out; call from a blocking context.
    pub fn finish(&mut self, last: Option<&RunResult>) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let mut attrs = last.map(headline).unwrap_or_default();
        if let Some(r) = last {
            let m = &r.run_metadata;
            attrs.push(KeyValue::new("surge.model", m.model.clone()));
            for (k, v) in [
                ("surge.result_tag", &m.result_tag),
                ("surge.hardware", &m.hardware),
                ("surge.engine", &m.engine),
                ("surge.cluster_label", &m.cluster_label),
            ] {
                if let Some(v) = v {
                    attrs.push(KeyValue::new(k, v.clone()));
                }
            }
        }
        attrs.push(KeyValue::new("surge.levels", i64::from(self.levels)));
        let b = SpanBuilder::from_name("surge run")
            .with_trace_id(self.trace)
            .with_span_id(self.span)
            .with_start_time(self.started)
            .with_end_time(SystemTime::now())
            .with_attributes(attrs);
        drop(self.tracer.build_with_context(b, &Context::new()));
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}

impl Output for Traces {
    fn name(&self) -> &'static str {
        "--otlp-endpoint"
    }
    fn level_start(&mut self, s: &LevelStart<'_>) {
        Traces::level_start(self, s.run_id, s.start_unix_ns, s.model, s.agents.to_vec());
    }
    fn rows(&mut self, _agents: &[String], rows: &[&GlobalRow]) -> Result<(), OutputError> {
        Traces::rows(self, rows.iter().copied());
        Ok(())
    }
    fn level_end(&mut self, result: &RunResult) -> Result<(), OutputError> {
        Traces::level_end(self, result);
        Ok(())
    }
    fn stop(&mut self, last: Option<&RunResult>) {
        self.finish(last);
    }
}

/// A level's headline numbers as attributes.
fn headline(r: &RunResult) -> Vec<KeyValue> {
    let ttft = r.latency.get("ttft");
    let mut a = vec![
        KeyValue::new("surge.completed", r.completed as i64),
        KeyValue::new("surge.failed", r.failed as i64),
        KeyValue::new("surge.output_throughput", r.output_throughput),
        KeyValue::new("surge.request_throughput", r.request_throughput),
    ];
    if let Some(c) = r.max_concurrency {
        a.push(KeyValue::new("surge.max_concurrency", i64::from(c)));
    }
    if let Some(t) = ttft {
        a.push(KeyValue::new("surge.ttft_p50_ms", t.median_ms));
        if let Some(p99) = t.at(99.0) {
            a.push(KeyValue::new("surge.ttft_p99_ms", p99));
        }
    }
    a
}
