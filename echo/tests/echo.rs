//! End-to-end tests of the echo server over real sockets on 127.0.0.1, with
//! raw hyper clients (HTTP/1.1 and h2c). Every wait is bounded by a timeout.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use surge_echo::{EchoConfig, serve};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const LIMIT: Duration = Duration::from_secs(10);

async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(LIMIT, fut).await.expect("timed out")
}

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Server {
    async fn start(config: EchoConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, config, async {
            let _ = rx.await;
        }));
        Self { addr, stop: Some(tx), task: Some(task) }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        bounded(self.task.take().unwrap()).await.unwrap().unwrap();
    }

    async fn h1(&self) -> (http1::SendRequest<Full<Bytes>>, JoinHandle<hyper::Result<()>>) {
        let stream = bounded(TcpStream::connect(self.addr)).await.unwrap();
        let (sender, conn) = bounded(http1::handshake(TokioIo::new(stream))).await.unwrap();
        (sender, tokio::spawn(conn))
    }

    /// One request on a fresh HTTP/1.1 connection.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let (mut sender, _conn) = self.h1().await;
        send(&mut sender, method, path, body).await
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

fn request(method: Method, path: &str, body: Option<Value>) -> Request<Full<Bytes>> {
    let bytes = body.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes))
        .unwrap()
}

async fn send(sender: &mut http1::SendRequest<Full<Bytes>>, method: Method, path: &str, body: Option<Value>) -> Reply {
    bounded(sender.ready()).await.unwrap();
    let resp = bounded(sender.send_request(request(method, path, body))).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = bounded(body.collect()).await.unwrap().to_bytes();
    Reply { status: parts.status, headers: parts.headers, body }
}

/// The `data:` payloads of an SSE body, in order.
fn events(body: &str) -> Vec<&str> {
    body.split_terminator("\n\n").map(|e| e.strip_prefix("data: ").expect("data: prefix")).collect()
}

fn metric(text: &str, name: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn echo_roundtrip_keeps_body_and_content_type() {
    let server = Server::start(EchoConfig::default()).await;
    let (mut sender, _conn) = server.h1().await;
    for size in [0usize, 11, 300_000] {
        let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let req = Request::builder()
            .method(Method::POST)
            .uri("/echo")
            .header(header::HOST, "x")
            .header(header::CONTENT_TYPE, "application/x-test")
            .body(Full::new(Bytes::from(payload.clone())))
            .unwrap();
        bounded(sender.ready()).await.unwrap();
        let resp = bounded(sender.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/x-test");
        let body = bounded(resp.into_body().collect()).await.unwrap().to_bytes();
        assert_eq!(&body[..], &payload[..], "size {size}");
    }
    server.stop().await;
}

#[tokio::test]
async fn models_lists_configured_model() {
    let server = Server::start(EchoConfig { model: "tiny-llm".into(), ..EchoConfig::default() }).await;
    let r = server.call(Method::GET, "/v1/models", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(r.json(), json!({"object":"list","data":[{"id":"tiny-llm","object":"model","owned_by":"surge-echo"}]}));
    server.stop().await;
}

#[tokio::test]
async fn health_and_ping_answer_probes() {
    let server = Server::start(EchoConfig::default()).await;
    for (method, path) in [(Method::GET, "/health"), (Method::GET, "/ping"), (Method::POST, "/ping")] {
        let r = server.call(method, path, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
    assert_eq!(server.call(Method::POST, "/health", None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(server.call(Method::POST, "/reset_prefix_cache", None).await.status, StatusCode::OK);
    let v = server.call(Method::GET, "/version", None).await;
    assert_eq!(v.status, StatusCode::OK);
    assert!(v.json()["version"].as_str().unwrap().starts_with("surge-echo "));
    server.stop().await;
}

#[tokio::test]
async fn unknown_models_are_refused_when_asked() {
    let cfg = EchoConfig { model: "a".into(), reject_unknown_model: true, ..EchoConfig::default() };
    let server = Server::start(cfg).await;
    let body = json!({"model": "b", "prompt": "hi", "max_tokens": 2});
    let r = server.call(Method::POST, "/v1/completions", Some(body)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["message"], "The model `b` does not exist.");
    let ok = json!({"model": "a", "prompt": "hi", "max_tokens": 2});
    assert_eq!(server.call(Method::POST, "/v1/completions", Some(ok)).await.status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn streamed_completion_follows_schedule_with_usage_and_done() {
    let server = Server::start(EchoConfig { ttft_ms: 30.0, itl_ms: 5.0, ..EchoConfig::default() }).await;
    let started = Instant::now();
    let r = server
        .call(
            Method::POST,
            "/v1/completions",
            Some(json!({
                "model": "m", "prompt": "one two three", "max_tokens": 6, "stream": true,
                "stream_options": {"include_usage": true}, "ignore_eos": true, "temperature": 0
            })),
        )
        .await;
    // ttft + 5 * itl = 55 ms at the earliest.
    assert!(started.elapsed() >= Duration::from_millis(55));
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers[header::CONTENT_TYPE], "text/event-stream");
    let ev = events(r.text());
    assert_eq!(ev.len(), 6 + 2, "{ev:?}");
    for (k, e) in ev[..6].iter().enumerate() {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["model"], "m");
        assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
        let text = v["choices"][0]["text"].as_str().unwrap();
        assert!(!text.trim().is_empty());
        let finish = if k == 5 { json!("length") } else { Value::Null };
        assert_eq!(v["choices"][0]["finish_reason"], finish);
    }
    let usage: Value = serde_json::from_str(ev[6]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], json!({"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}));
    assert_eq!(ev[7], "[DONE]");
    server.stop().await;
}

#[tokio::test]
async fn stream_without_include_usage_and_output_tokens_override() {
    let server = Server::start(EchoConfig { output_tokens: Some(3), ..EchoConfig::default() }).await;
    let r = server
        .call(Method::POST, "/v1/completions", Some(json!({"prompt": "x", "max_tokens": 50, "stream": true})))
        .await;
    let ev = events(r.text());
    assert_eq!(ev.len(), 4);
    assert_eq!(ev[3], "[DONE]");
    assert!(!r.text().contains("usage"));
    server.stop().await;
}

#[tokio::test]
async fn non_streamed_completion_has_usage() {
    let server = Server::start(EchoConfig { ttft_ms: 20.0, itl_ms: 2.0, ..EchoConfig::default() }).await;
    let started = Instant::now();
    let r = server
        .call(Method::POST, "/v1/completions", Some(json!({"model": "m", "prompt": "a b c d", "max_tokens": 4})))
        .await;
    assert!(started.elapsed() >= Duration::from_millis(26));
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert_eq!(text.split_whitespace().count(), 4);
    assert_eq!(v["usage"], json!({"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}));
    // Without max_tokens: 16.
    let r = server.call(Method::POST, "/v1/completions", Some(json!({"prompt": "a"}))).await;
    assert_eq!(r.json()["usage"]["completion_tokens"], 16);
    server.stop().await;
}

#[tokio::test]
async fn chat_streaming_and_non_streaming() {
    let server = Server::start(EchoConfig::default()).await;
    let messages = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there friend"}
    ]);
    let r = server
        .call(
            Method::POST,
            "/v1/chat/completions",
            Some(json!({
                "model": "c", "messages": messages, "max_completion_tokens": 3, "stream": true,
                "stream_options": {"include_usage": true}
            })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let ev = events(r.text());
    assert_eq!(ev.len(), 6, "{ev:?}");
    // vLLM's role announcement first (not a token), then one chunk per token.
    let role: Value = serde_json::from_str(ev[0]).unwrap();
    assert_eq!(role["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    for e in &ev[1..4] {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        let delta = &v["choices"][0]["delta"];
        assert!(!delta["content"].as_str().unwrap().trim().is_empty());
        assert!(delta.get("role").is_none());
    }
    let usage: Value = serde_json::from_str(ev[4]).unwrap();
    assert_eq!(usage["usage"], json!({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}));
    assert_eq!(ev[5], "[DONE]");

    let r =
        server.call(Method::POST, "/v1/chat/completions", Some(json!({"messages": messages, "max_tokens": 2}))).await;
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    server.stop().await;
}

#[tokio::test]
async fn metrics_counters_increase() {
    let server = Server::start(EchoConfig::default()).await;
    let before = server.call(Method::GET, "/metrics", None).await;
    assert_eq!(before.status, StatusCode::OK);
    assert!(before.text().contains("# TYPE surge_echo_requests_total counter"));
    let b = before.text().to_owned();
    server.call(Method::POST, "/v1/completions", Some(json!({"prompt": "p q", "max_tokens": 7, "stream": true}))).await;
    let after = server.call(Method::GET, "/metrics", None).await;
    let a = after.text();
    assert_eq!(metric(a, "surge_echo_requests_total"), metric(&b, "surge_echo_requests_total") + 2);
    assert_eq!(metric(a, "surge_echo_tokens_total"), metric(&b, "surge_echo_tokens_total") + 7);
    assert_eq!(metric(a, "surge_echo_prompt_tokens_total"), metric(&b, "surge_echo_prompt_tokens_total") + 2);
    assert_eq!(metric(a, "surge_echo_requests_running"), 0);
    assert_eq!(metric(a, "surge_echo_requests_waiting"), 0);
    server.stop().await;
}

#[tokio::test]
async fn fault_500_at_rate_one() {
    let server = Server::start(EchoConfig { fault_500_rate: 1.0, ..EchoConfig::default() }).await;
    let (mut sender, _conn) = server.h1().await;
    for _ in 0..3 {
        let r = send(&mut sender, Method::POST, "/v1/completions", Some(json!({"prompt": "x", "stream": true}))).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.json()["error"]["code"], 500);
    }
    // Other routes are unaffected, on the same kept-alive connection.
    let r = send(&mut sender, Method::GET, "/v1/models", None).await;
    assert_eq!(r.status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn unknown_routes_are_404_and_bad_json_is_400() {
    let server = Server::start(EchoConfig::default()).await;
    for (method, path) in
        [(Method::GET, "/"), (Method::GET, "/echo"), (Method::POST, "/v1/models"), (Method::GET, "/v1/completions/x")]
    {
        let r = server.call(method, path, None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(r.json()["error"]["code"], 404);
    }
    let (mut sender, _conn) = server.h1().await;
    for body in ["{", "[]", "{\"prompt\":5}", "{\"prompt\":\"a\",\"max_tokens\":0}"] {
        bounded(sender.ready()).await.unwrap();
        let req = Request::builder()
            .method(Method::POST)
            .uri("/v1/completions")
            .header(header::HOST, "x")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = bounded(sender.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        let bytes = bounded(resp.into_body().collect()).await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["code"], 400);
    }
    server.stop().await;
}

#[tokio::test]
async fn fault_reset_drops_connection() {
    let server = Server::start(EchoConfig { fault_reset_rate: 1.0, ..EchoConfig::default() }).await;
    let (mut sender, _conn) = server.h1().await;
    bounded(sender.ready()).await.unwrap();
    let result =
        bounded(sender.send_request(request(Method::POST, "/v1/completions", Some(json!({"prompt": "x"}))))).await;
    assert!(result.is_err(), "expected a dropped connection");
    server.stop().await;
}

#[tokio::test]
async fn fault_truncate_cuts_stream_without_done() {
    let server = Server::start(EchoConfig { fault_truncate_rate: 1.0, itl_ms: 1.0, ..EchoConfig::default() }).await;
    let (mut sender, conn) = server.h1().await;
    bounded(sender.ready()).await.unwrap();
    let resp = bounded(sender.send_request(request(
        Method::POST,
        "/v1/completions",
        Some(json!({"prompt": "x", "max_tokens": 8, "stream": true})),
    )))
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut received = Vec::new();
    let errored = loop {
        match bounded(body.frame()).await {
            Some(Ok(frame)) => received.extend_from_slice(&frame.into_data().unwrap_or_default()),
            Some(Err(_)) => break true,
            None => break false,
        }
    };
    assert!(errored, "stream should end with an error");
    let text = String::from_utf8(received).unwrap();
    assert!(!text.contains("[DONE]"));
    assert_eq!(text.matches("data: ").count(), 4, "{text}");
    assert!(bounded(conn).await.unwrap().is_err() || sender.is_closed());
    server.stop().await;
}

#[tokio::test]
async fn fault_malformed_event_is_not_json() {
    let server = Server::start(EchoConfig { fault_malformed_rate: 1.0, ..EchoConfig::default() }).await;
    let r = server
        .call(Method::POST, "/v1/completions", Some(json!({"prompt": "x", "max_tokens": 8, "stream": true})))
        .await;
    let ev = events(r.text());
    assert_eq!(ev.len(), 9);
    let bad = ev[..8].iter().filter(|e| serde_json::from_str::<Value>(e).is_err()).count();
    assert_eq!(bad, 1);
    assert_eq!(ev[8], "[DONE]");
    server.stop().await;
}

#[tokio::test]
async fn fault_stall_delays_first_token() {
    let server =
        Server::start(EchoConfig { fault_stall_ms: Some(60.0), fault_stall_rate: 1.0, ..EchoConfig::default() }).await;
    let started = Instant::now();
    server.call(Method::POST, "/v1/completions", Some(json!({"prompt": "x", "max_tokens": 1, "stream": true}))).await;
    assert!(started.elapsed() >= Duration::from_millis(60));
    server.stop().await;
}

#[tokio::test]
async fn close_after_stream_closes_keep_alive_connection() {
    let server = Server::start(EchoConfig { close_after_stream: true, ..EchoConfig::default() }).await;
    let (mut sender, conn) = server.h1().await;
    let r = send(
        &mut sender,
        Method::POST,
        "/v1/completions",
        Some(json!({"prompt": "x", "max_tokens": 2, "stream": true})),
    )
    .await;
    assert!(r.text().ends_with("data: [DONE]\n\n"));
    assert!(r.headers.get(header::CONNECTION).is_none());
    // The server closes the connection: the client connection task ends.
    bounded(conn).await.unwrap().unwrap();
    assert!(sender.is_closed());
    server.stop().await;
}

#[tokio::test]
async fn slots_queue_requests_fifo() {
    let server =
        Server::start(EchoConfig { ttft_ms: 40.0, max_concurrent_streams: Some(1), ..EchoConfig::default() }).await;
    let started = Instant::now();
    let body = json!({"prompt": "x", "max_tokens": 1});
    let (a, b) = tokio::join!(
        server.call(Method::POST, "/v1/completions", Some(body.clone())),
        server.call(Method::POST, "/v1/completions", Some(body)),
    );
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    // One slot: the second TTFT clock starts when the first request is done.
    assert!(started.elapsed() >= Duration::from_millis(80));
    server.stop().await;
}

#[tokio::test]
async fn http2_prior_knowledge_streams_on_one_connection() {
    let server = Server::start(EchoConfig { itl_ms: 1.0, ..EchoConfig::default() }).await;
    let stream = bounded(TcpStream::connect(server.addr)).await.unwrap();
    let (sender, conn) = bounded(http2::handshake(TokioExecutor::new(), TokioIo::new(stream))).await.unwrap();
    tokio::spawn(conn);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let mut sender = sender.clone();
        tasks.push(tokio::spawn(async move {
            bounded(sender.ready()).await.unwrap();
            let req = Request::builder()
                .method(Method::POST)
                .uri("http://127.0.0.1/v1/completions")
                .body(Full::new(Bytes::from(
                    json!({"prompt": "x y", "max_tokens": 5, "stream": true,
                           "stream_options": {"include_usage": true}})
                    .to_string(),
                )))
                .unwrap();
            let resp = bounded(sender.send_request(req)).await.unwrap();
            assert_eq!(resp.version(), http::Version::HTTP_2);
            bounded(resp.into_body().collect()).await.unwrap().to_bytes()
        }));
    }
    for t in tasks {
        let body = bounded(t).await.unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        let ev = events(text);
        assert_eq!(ev.len(), 7);
        assert_eq!(ev[6], "[DONE]");
    }
    server.stop().await;
}

#[tokio::test]
async fn shutdown_returns_and_stops_accepting() {
    let server = Server::start(EchoConfig::default()).await;
    let addr = server.addr;
    server.stop().await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn invalid_config_is_rejected() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = EchoConfig { fault_500_rate: 2.0, ..EchoConfig::default() };
    let err = bounded(serve(listener, config, std::future::pending())).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("--fault-500-rate"));
}
