//! OTLP traces (ids per D19): `surge run --otlp-endpoint` against receivers built on the
//! official OTLP protobuf service definitions (`opentelemetry-proto`), over gRPC and
//! HTTP/protobuf. The spans are counted and checked against the run's rows.

use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Spans received, and the `x-test` header of each export.
#[derive(Default, Clone)]
struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    headers: Arc<Mutex<Vec<String>>>,
}

impl Received {
    fn add(&self, req: ExportTraceServiceRequest, header: Option<String>) {
        let mut spans = self.spans.lock().unwrap();
        for rs in req.resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        self.headers.lock().unwrap().push(header.unwrap_or_default());
    }
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let header = req.metadata().get("x-test").and_then(|v| v.to_str().ok()).map(String::from);
        self.add(req.into_inner(), header);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A gRPC receiver; its URL.
async fn grpc_receiver(r: Received) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(r))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
    );
    url
}

/// An HTTP/protobuf receiver (`POST /v1/traces`); its URL.
async fn http_receiver(r: Received) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", l.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let r = r.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let r = r.clone();
                    async move {
                        let header = req.headers().get("x-test").and_then(|v| v.to_str().ok()).map(String::from);
                        let body = req.into_body().collect().await?.to_bytes();
                        let status = match ExportTraceServiceRequest::decode(body) {
                            Ok(m) => {
                                r.add(m, header);
                                200
                            }
                            Err(_) => 400,
                        };
                        let resp = ExportTraceServiceResponse::default().encode_to_vec();
                        Ok::<_, hyper::Error>(
                            hyper::Response::builder()
                                .status(status)
                                .header("content-type", "application/x-protobuf")
                                .body(http_body_util::Full::new(bytes_of(resp)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    url
}

fn bytes_of(v: Vec<u8>) -> hyper::body::Bytes {
    hyper::body::Bytes::from(v)
}

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Value> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref()?.value.as_ref())
}

fn int(s: &Span, key: &str) -> i64 {
    match attr(s, key) {
        Some(Value::IntValue(v)) => *v,
        other => panic!("{key}: {other:?}"),
    }
}

async fn echo() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let cfg = surge_echo::EchoConfig { ttft_ms: 5.0, itl_ms: 1.0, ..Default::default() };
    tokio::spawn(surge_echo::serve(l, cfg, std::future::pending::<()>()));
    url
}

/// Runs surge against `base` exporting to `endpoint`; returns the rows by index.
async fn run(
    base: &str,
    endpoint: &str,
    protocol: &str,
    ratio: &str,
    dir: &std::path::Path,
) -> HashMap<u64, serde_json::Value> {
    let rows = dir.join("rows.jsonl");
    let args = [
        "run",
        "--base-url",
        base,
        "--model",
        "m",
        "--num-prompts",
        "300",
        "--max-concurrency",
        "16",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--ignore-eos",
        "--no-scrape-metrics",
        "--otlp-endpoint",
        endpoint,
        "--otlp-protocol",
        protocol,
        "--otlp-header",
        "x-test=yes",
        "--otlp-sample-ratio",
        ratio,
        "--save-rows",
        rows.to_str().unwrap(),
    ];
    // On a blocking thread: the receivers run on this test's runtime meanwhile.
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_surge")).args(args).output()
    });
    let out = tokio::time::timeout(Duration::from_secs(120), out).await.expect("surge finishes").unwrap().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(&rows)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| (v["seq"].as_u64().unwrap(), v))
        .collect()
}

fn check(spans: &[Span], rows: &HashMap<u64, serde_json::Value>, sampled_all: bool) {
    let requests: Vec<&Span> = spans.iter().filter(|s| s.name == "llm.request").collect();
    let levels: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("level")).collect();
    let runs: Vec<&Span> = spans.iter().filter(|s| s.name == "surge run").collect();
    assert_eq!((levels.len(), runs.len()), (1, 1), "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    assert_eq!(levels[0].parent_span_id, runs[0].span_id, "the level is the run's child");
    assert_eq!(levels[0].trace_id, runs[0].trace_id);
    assert_eq!(int(runs[0], "surge.completed"), 300);
    let run_id: u64 = match attr(levels[0], "surge.run_id") {
        Some(Value::StringValue(s)) => s.parse().unwrap(),
        other => panic!("{other:?}"),
    };
    if sampled_all {
        assert_eq!(requests.len(), 300);
    } else {
        assert!(requests.len() > 60 && requests.len() < 240, "{} of 300 at ratio 0.5", requests.len());
    }
    for s in requests {
        let index = int(s, "surge.request_index") as u64;
        let row = &rows[&index];
        // The ids the agent put in the request's traceparent (D19).
        let (trace, span) = surge_agent::trace::ids(run_id, index);
        assert_eq!(s.trace_id, trace.to_be_bytes().to_vec());
        assert_eq!(s.span_id, span.to_be_bytes().to_vec());
        assert_eq!(s.links.len(), 1);
        assert_eq!(s.links[0].span_id, levels[0].span_id, "linked to its level");
        assert!(row["id"].as_str().is_some_and(|id| id.starts_with("cmpl-")), "the server's response id: {row}");
        assert!(
            matches!(attr(s, "gen_ai.response.id"), Some(Value::StringValue(id)) if id == row["id"].as_str().unwrap())
        );
        assert_eq!(int(s, "gen_ai.usage.output_tokens"), row["output_len"].as_i64().unwrap());
        assert_eq!(int(s, "gen_ai.usage.input_tokens"), row["input_len"].as_i64().unwrap());
        assert!(matches!(attr(s, "gen_ai.request.model"), Some(Value::StringValue(m)) if m == "m"));
        let Some(Value::DoubleValue(ttft)) = attr(s, "surge.ttft_ms") else { panic!("ttft") };
        assert!((ttft - row["ttft"].as_f64().unwrap() * 1e3).abs() < 1e-6);
        let dur_ms = (s.end_time_unix_nano - s.start_time_unix_nano) as f64 / 1e6;
        assert!((dur_ms - row["latency"].as_f64().unwrap() * 1e3).abs() < 0.01, "span length = e2el");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_match_the_rows_over_grpc_and_http() {
    let base = echo().await;
    let dir = std::env::temp_dir().join(format!("surge-otlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (protocol, ratio) in [("grpc", "1"), ("http/protobuf", "1"), ("grpc", "0.5")] {
        let r = Received::default();
        let url = if protocol == "grpc" { grpc_receiver(r.clone()).await } else { http_receiver(r.clone()).await };
        let rows = run(&base, &url, protocol, ratio, &dir).await;
        assert_eq!(rows.len(), 300);
        let spans = r.spans.lock().unwrap().clone();
        eprintln!("{protocol} at ratio {ratio}: {} spans", spans.len());
        check(&spans, &rows, ratio == "1");
        assert!(r.headers.lock().unwrap().iter().all(|h| h == "yes"), "--otlp-header on every export");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
