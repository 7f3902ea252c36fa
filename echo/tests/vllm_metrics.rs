//! `--metrics-flavor vllm` end to end: the `vllm:*` metrics of `GET /metrics`
//! agree with the server's own and with what clients received.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use surge_echo::{EchoConfig, MetricsFlavor, serve};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const LIMIT: Duration = Duration::from_secs(20);

async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(LIMIT, fut).await.expect("timed out")
}

/// A server on 127.0.0.1; stopped when `stop` is sent or dropped.
async fn start(config: EchoConfig) -> (SocketAddr, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, config, async {
        let _ = rx.await;
    }));
    (addr, stop)
}

/// Send one request on a fresh HTTP/1.1 connection; the response's head, body unread.
async fn open(addr: SocketAddr, method: Method, path: &str, body: Option<Value>) -> http::Response<Incoming> {
    let stream = bounded(TcpStream::connect(addr)).await.unwrap();
    let (mut sender, conn) = bounded(http1::handshake(TokioIo::new(stream))).await.unwrap();
    tokio::spawn(conn);
    let bytes = body.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes))
        .unwrap();
    bounded(sender.send_request(req)).await.unwrap()
}

/// The whole body of a response, as text.
async fn read(resp: http::Response<Incoming>) -> String {
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = bounded(resp.into_body().collect()).await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

async fn scrape(addr: SocketAddr) -> String {
    read(open(addr, Method::GET, "/metrics", None).await).await
}

/// The value of the sample named exactly `series` (name and labels).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
        .parse()
        .unwrap()
}

/// Output tokens a client received in one response: one per streamed event with
/// text (chat's role announcement carries none), or the words of a whole response.
fn output_tokens(body: &str) -> f64 {
    let text = |v: &Value| {
        let choice = &v["choices"][0];
        let t = [&choice["text"], &choice["delta"]["content"], &choice["message"]["content"]];
        t.into_iter().find_map(Value::as_str).unwrap_or("").to_owned()
    };
    if let Ok(whole) = serde_json::from_str::<Value>(body) {
        return text(&whole).split_whitespace().count() as f64;
    }
    let events = body.split_terminator("\n\n").filter_map(|e| e.strip_prefix("data: ")).filter(|e| *e != "[DONE]");
    events.filter(|e| !text(&serde_json::from_str(e).unwrap()).is_empty()).count() as f64
}

fn vllm_config(model: &str) -> EchoConfig {
    EchoConfig { model: model.to_owned(), metrics_flavor: MetricsFlavor::Vllm, ..EchoConfig::default() }
}

#[tokio::test]
async fn vllm_counts_agree_with_surge_counts_and_with_the_clients() {
    const TOKENS: u64 = 4;
    let (addr, _stop) = start(EchoConfig { ttft_ms: 30.0, itl_ms: 1.0, ..vllm_config("tiny") }).await;
    let streamed = json!({"prompt": "a b c", "max_tokens": TOKENS, "stream": true});
    let chat = json!({"messages": [{"role": "user", "content": "a b c"}], "max_tokens": TOKENS, "stream": true});
    let whole = json!({"prompt": "a b c", "max_tokens": TOKENS});
    let mut received = 0.0;
    for (path, body) in [
        ("/v1/completions", &streamed),
        ("/v1/completions", &streamed),
        ("/v1/completions", &streamed),
        ("/v1/completions", &streamed),
        ("/v1/chat/completions", &chat),
        ("/v1/completions", &whole),
    ] {
        received += output_tokens(&read(open(addr, Method::POST, path, Some(body.clone())).await).await);
    }
    let requests = 6.0;
    let tokens = requests * TOKENS as f64;
    assert_eq!(received, tokens);

    let m = scrape(addr).await;
    let label = "{model_name=\"tiny\"}";
    let vllm = |name: &str| value(&m, &format!("vllm:{name}{label}"));
    assert_eq!(vllm("generation_tokens_total"), value(&m, "surge_echo_tokens_total"));
    assert_eq!(vllm("generation_tokens_total"), tokens);
    assert_eq!(vllm("prompt_tokens_total"), value(&m, "surge_echo_prompt_tokens_total"));
    assert_eq!(vllm("prompt_tokens_total"), requests * 3.0);
    assert_eq!(vllm("request_success_total"), requests);
    assert_eq!(vllm("num_requests_running"), 0.0);
    assert_eq!(vllm("num_requests_waiting"), 0.0);
    assert_eq!(vllm("kv_cache_usage_perc"), 0.0, "no slot limit");
    // One TTFT per completion request, none below the configured 30 ms.
    assert_eq!(vllm("time_to_first_token_seconds_count"), requests);
    assert!(vllm("time_to_first_token_seconds_sum") >= requests * 0.030);
    let bucket =
        |le: &str| value(&m, &format!("vllm:time_to_first_token_seconds_bucket{{model_name=\"tiny\",le=\"{le}\"}}"));
    assert_eq!(bucket("0.02"), 0.0);
    // Generous: 30 ms plus whatever a loaded test host adds.
    assert_eq!(bucket("0.5"), requests);
    assert_eq!(bucket("+Inf"), requests);
    for line in m.lines().filter(|l| l.starts_with("vllm:")) {
        assert!(line.contains("model_name=\"tiny\""), "{line}");
    }
}

#[tokio::test]
async fn kv_cache_usage_is_running_over_slots() {
    // Long enough for the scrapes below to see the requests held.
    let ttft = Duration::from_millis(1500);
    let config = EchoConfig { ttft_ms: ttft.as_millis() as f64, max_concurrent_streams: Some(4), ..vllm_config("m") };
    let (addr, _stop) = start(config).await;
    let body = json!({"prompt": "x", "max_tokens": 1, "stream": true});
    // A streamed response's head is sent once it holds its slot.
    let sent = Instant::now();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(open(addr, Method::POST, "/v1/completions", Some(body.clone())).await);
    }
    let m = scrape(addr).await;
    assert_eq!(value(&m, "vllm:num_requests_running{model_name=\"m\"}"), 3.0);
    assert_eq!(value(&m, "surge_echo_requests_running"), 3.0);
    assert_eq!(value(&m, "vllm:kv_cache_usage_perc{model_name=\"m\"}"), 0.75);
    // Two more: one takes the last slot, one waits for a slot.
    held.push(open(addr, Method::POST, "/v1/completions", Some(body.clone())).await);
    let waiter = tokio::spawn(async move { read(open(addr, Method::POST, "/v1/completions", Some(body)).await).await });
    let m = bounded(async {
        loop {
            let m = scrape(addr).await;
            if value(&m, "surge_echo_requests_waiting") == 1.0 {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let waiter_in = sent.elapsed().as_secs_f64();
    assert_eq!(value(&m, "vllm:num_requests_waiting{model_name=\"m\"}"), 1.0);
    assert_eq!(value(&m, "vllm:num_requests_running{model_name=\"m\"}"), 4.0);
    assert_eq!(value(&m, "vllm:kv_cache_usage_perc{model_name=\"m\"}"), 1.0);
    for resp in held {
        read(resp).await;
    }
    bounded(waiter).await.unwrap();
    let m = scrape(addr).await;
    assert_eq!(value(&m, "vllm:num_requests_running{model_name=\"m\"}"), 0.0);
    assert_eq!(value(&m, "vllm:num_requests_waiting{model_name=\"m\"}"), 0.0);
    assert_eq!(value(&m, "vllm:kv_cache_usage_perc{model_name=\"m\"}"), 0.0);
    assert_eq!(value(&m, "vllm:request_success_total{model_name=\"m\"}"), 5.0);
    // TTFT counts from arrival, so the waiter's includes its wait: its first token came
    // at least two TTFTs after the first request was sent, and it arrived at most
    // `waiter_in` after that.
    let ttft = ttft.as_secs_f64();
    let least = 4.0 * ttft + (2.0 * ttft - waiter_in);
    let sum = value(&m, "vllm:time_to_first_token_seconds_sum{model_name=\"m\"}");
    assert!(sum >= least, "TTFT sum {sum} s < {least} s");
}

#[tokio::test]
async fn default_flavor_has_no_vllm_metrics() {
    let (addr, _stop) = start(EchoConfig::default()).await;
    let body = json!({"prompt": "x", "max_tokens": 2, "stream": true});
    read(open(addr, Method::POST, "/v1/completions", Some(body)).await).await;
    let m = scrape(addr).await;
    assert_eq!(value(&m, "surge_echo_tokens_total"), 2.0);
    assert!(!m.contains("vllm:"), "{m}");
}
