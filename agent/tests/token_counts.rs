//! Token counts when the server sends no usage: the prompt's count from the run's
//! tokenizer, the output re-counted from the streamed text with it, and without a
//! tokenizer the word estimate and the event count; each row says which.

use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_agent::engine::VecSink;
use surge_agent::engine::{self, Control};
use surge_agent::tokenizer::{Tok, sha256_hex};
use surge_proto::{Backend, DatasetKind, DatasetSpec, ErrorKind, TokenSource, Workload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const EVENTS: &[&str] = &[" The quick", " brown fox", " jumps over the lazy dog."];

/// A server that streams EVENTS without usage, then [DONE], and closes the connection.
async fn no_usage_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the whole request (headers and content-length body) before answering.
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let mut resp =
                    String::from("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n");
                for e in EVENTS {
                    resp.push_str(&format!("data: {{\"choices\":[{{\"index\":0,\"text\":{e:?}}}]}}\n\n"));
                }
                resp.push_str("data: [DONE]\n\n");
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

fn workload(base: &str, tokenizer: Option<&[u8]>) -> Workload {
    let bytes = tokenizer.map(<[u8]>::to_vec).unwrap_or_default();
    Workload {
        base_url: base.into(),
        http: surge_proto::HttpChoice::Auto as i32,
        ramp: surge_proto::RampStrategy::None as i32,
        endpoint: "/v1/completions".into(),
        backend: Backend::Openai as i32,
        model: "m".into(),
        dataset: Some(DatasetSpec {
            kind: DatasetKind::Random as i32,
            seed: 1,
            random_input_len: 16,
            random_output_len: 8,
            ..Default::default()
        }),
        slice_len: 5,
        max_concurrency: 2,
        burstiness: 1.0,
        tokenizer_sha256: tokenizer.map(sha256_hex).unwrap_or_default(),
        tokenizer_json: bytes,
        ..Default::default()
    }
}

async fn rows(w: Workload) -> Vec<surge_proto::Row> {
    let prepared = engine::prepare(w).await.unwrap();
    let sink = Arc::new(VecSink::default());
    let ctl = Control {
        start_at: Instant::now(),
        deadline: Instant::now() + Duration::from_secs(30),
        stop: CancellationToken::new(),
    };
    engine::run(prepared, sink.clone(), ctl).await;
    sink.take()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_usage_counts_come_from_the_tokenizer_or_events() {
    let base = no_usage_server().await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer/tokenizer.json");
    let bytes = std::fs::read(path).unwrap();
    let tok = Tok::from_bytes(&bytes).unwrap();
    let expected = tok.count(&EVENTS.concat());
    assert_ne!(expected, EVENTS.len() as u32, "the test needs a count that differs from the events");

    let with = rows(workload(&base, Some(&bytes))).await;
    assert_eq!(with.len(), 5);
    for r in &with {
        assert_eq!(r.error(), ErrorKind::None, "{r:?}");
        assert!(!r.usage_from_server);
        assert_eq!((r.input_tokens, r.input_source()), (16, TokenSource::Tokenizer));
        assert_eq!((r.output_tokens, r.output_source()), (expected, TokenSource::Tokenizer));
    }

    let without = rows(workload(&base, None)).await;
    for r in &without {
        assert_eq!(r.error(), ErrorKind::None, "{r:?}");
        assert_eq!((r.input_tokens, r.input_source()), (16, TokenSource::ClientEstimate));
        assert_eq!((r.output_tokens, r.output_source()), (EVENTS.len() as u32, TokenSource::EventCount));
    }

    // A wrong hash is refused, not trusted.
    let mut bad = workload(&base, Some(&bytes));
    bad.tokenizer_sha256 = "0".repeat(64);
    let err = engine::prepare(bad).await.unwrap_err().to_string();
    assert!(err.contains("tokenizer"), "{err}");
}
