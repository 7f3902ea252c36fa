//! How a stream that ends before `[DONE]` ended, and who ended it (D38): a server
//! written here cuts a streamed completion each way a proxy or a server can, and the
//! failed row must say which: a clean end with an empty body right after the head (what
//! Caddy's HTTP/1.1 proxy sends when it loses its upstream), a clean end after some events,
//! the peer closing the connection (FIN), a reset (RST; RST_STREAM on HTTP/2), and surge's
//! own read timeout. Each row also carries the events and bytes that came, the HTTP version
//! and the response's `Server` and `Via`.

mod common;

use bytes::Bytes;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_agent::engine::conn::Version;
use surge_agent::engine::connector::Connector;
use surge_agent::engine::load::pool::Pool;
use surge_agent::engine::load::request::{self, Job};
use surge_agent::engine::stats::Stats;
use surge_agent::engine::target::Target;
use surge_agent::engine::tls::TargetTls;
use surge_proto::{ErrorKind, HttpVersion, Row, StreamCut, StreamEnd, TokenSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One SSE token event.
const EVENT: &str = "data: {\"choices\":[{\"index\":0,\"text\":\" hi\",\"finish_reason\":null}]}\n\n";

/// What the scripted HTTP/1.1 server does after reading a request.
#[derive(Clone, Copy)]
enum Script {
    /// The head, then at once the terminating chunk: an empty body.
    EmptyBody,
    /// The head, `n` events, then the terminating chunk (no `[DONE]`).
    CleanAfter(usize),
    /// The head, `n` events, then it closes the connection (FIN) mid-body.
    Fin(usize),
    /// The head, `n` events, then it resets the connection (RST: linger 0).
    Rst(usize),
    /// The head, `n` events, then silence (until the client gives up).
    Silent(usize),
}

fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

async fn serve(mut tcp: TcpStream, script: Script) {
    let mut buf = vec![0u8; 8192];
    let mut got = Vec::new();
    while !got.windows(2).any(|w| w == b"{}") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\
                server: TestProxy/1.0\r\nvia: 1.1 test-hop\r\n\r\n";
    let events = |n: usize| (0..n).map(|_| chunk(EVENT)).collect::<String>();
    let out = match script {
        Script::EmptyBody => format!("{head}0\r\n\r\n"),
        Script::CleanAfter(n) => format!("{head}{}0\r\n\r\n", events(n)),
        Script::Fin(n) | Script::Rst(n) | Script::Silent(n) => format!("{head}{}", events(n)),
    };
    if tcp.write_all(out.as_bytes()).await.is_err() {
        return;
    }
    let _ = tcp.flush().await;
    match script {
        Script::EmptyBody | Script::CleanAfter(_) => {
            // Keep the connection open: only the body's end may end the stream.
            let _ = tcp.read(&mut buf).await;
        }
        Script::Fin(_) => {
            let _ = tcp.shutdown().await;
            let _ = tcp.read(&mut buf).await;
        }
        Script::Rst(_) => {
            // Let the events reach the client before the reset discards what is unread.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tcp.set_zero_linger();
            drop(tcp);
        }
        Script::Silent(_) => {
            let _ = tcp.read(&mut buf).await;
        }
    }
}

async fn server(script: Script) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve(tcp, script));
        }
    });
    addr
}

/// One request to `addr` over `version`; its row, within 10 s.
async fn one(addr: std::net::SocketAddr, version: Version, read_timeout: Option<Duration>) -> Row {
    let target = Target::resolve(&format!("http://{addr}")).await.unwrap();
    let pool = Arc::new(Pool::with_connections(
        Connector::with_tls(target.clone(), version, &TargetTls::default()).unwrap(),
        Arc::new(Stats::default()),
        1,
        0,
    ));
    let tpl = common::stream_template(&target, read_timeout);
    let job = Job {
        index: 0,
        body: Bytes::from_static(b"{}"),
        input_tokens: 1,
        input_source: TokenSource::ClientEstimate,
        input_sequences: 0,
        audio_s: 0.0,
        max_tokens: 0,
        honours_eos: false,
        intended: None,
        session: None,
        keep_reply: false,
    };
    tokio::time::timeout(Duration::from_secs(10), request::execute(&pool, &tpl, job, Instant::now()))
        .await
        .expect("the request ends within 10 s")
}

fn cut(row: &Row) -> &StreamCut {
    row.cut.as_ref().unwrap_or_else(|| panic!("a cut stream's row says how it ended: {row:?}"))
}

/// The HTTP/1.1 endings: kind, ending, events, bytes, and the peer's headers.
async fn check_h1(script: Script, kind: ErrorKind, end: StreamEnd, events: u32, read_timeout: Option<Duration>) {
    let row = one(server(script).await, Version::Http1, read_timeout).await;
    assert_eq!(row.error(), kind, "{row:?}");
    assert_eq!(row.http_status, 200);
    let c = cut(&row);
    assert_eq!(c.end(), end, "{row:?}");
    assert_eq!(c.events, events, "{row:?}");
    assert_eq!(c.bytes, u64::from(events) * EVENT.len() as u64, "{row:?}");
    assert_eq!(c.version(), HttpVersion::HttpVersion11);
    assert_eq!((c.server.as_str(), c.via.as_str()), ("TestProxy/1.0", "1.1 test-hop"));
    assert!(row.error_message.contains("Server: TestProxy/1.0, Via: 1.1 test-hop"), "{}", row.error_message);
}

#[tokio::test]
async fn an_empty_body_right_after_the_head_is_a_cut_by_the_peer() {
    check_h1(Script::EmptyBody, ErrorKind::Truncated, StreamEnd::EmptyBody, 0, None).await;
    let row = one(server(Script::EmptyBody).await, Version::Http1, None).await;
    assert!(
        row.error_message
            .starts_with("stream cut, ended by the peer: the body ended cleanly right after the response head, empty"),
        "{}",
        row.error_message
    );
}

#[tokio::test]
async fn a_clean_end_after_three_events_without_done_is_a_cut_by_the_peer() {
    check_h1(Script::CleanAfter(3), ErrorKind::Truncated, StreamEnd::CleanEnd, 3, None).await;
}

#[tokio::test]
async fn a_fin_mid_body_is_the_peer_closing_the_connection() {
    check_h1(Script::Fin(2), ErrorKind::Truncated, StreamEnd::PeerClosed, 2, None).await;
}

#[tokio::test]
async fn an_rst_mid_body_is_a_reset() {
    check_h1(Script::Rst(2), ErrorKind::Truncated, StreamEnd::Reset, 2, None).await;
}

#[tokio::test]
async fn silence_past_the_read_timeout_is_a_timeout_ended_by_the_client() {
    let started = Instant::now();
    check_h1(Script::Silent(1), ErrorKind::Timeout, StreamEnd::ReadTimeout, 1, Some(Duration::from_millis(300))).await;
    assert!(started.elapsed() >= Duration::from_millis(300), "not before the timeout");
    let row = one(server(Script::Silent(1)).await, Version::Http1, Some(Duration::from_millis(200))).await;
    assert!(row.error_message.starts_with("stream cut, ended by the client"), "{}", row.error_message);
}

#[tokio::test]
async fn a_stream_that_ends_with_done_has_no_cut() {
    // The same server, but a complete stream: no cut, no message.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = tcp.read(&mut buf).await;
        let body = format!("{EVENT}data: [DONE]\n\n");
        let out = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(out.as_bytes()).await.unwrap();
        let _ = tcp.read(&mut buf).await;
    });
    let row = one(addr, Version::Http1, Some(Duration::from_secs(5))).await;
    assert_eq!(row.error(), ErrorKind::None, "{row:?}");
    assert!(row.cut.is_none() && row.error_message.is_empty());
}

/// An HTTP/2 (h2c) server whose stream sends two events, then fails: hyper resets the
/// stream (RST_STREAM) and keeps the connection.
async fn h2_server() -> std::net::SocketAddr {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    // Two events 20 ms apart, then the body fails: hyper resets the stream.
                    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
                    tokio::spawn(async move {
                        for _ in 0..2 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let _ = tx.send(Ok(Frame::data(Bytes::from_static(EVENT.as_bytes())))).await;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = tx.send(Err(std::io::Error::other("the upstream went away"))).await;
                    });
                    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
                    let resp = http::Response::builder()
                        .header("content-type", "text/event-stream")
                        .header("server", "TestProxy/2.0")
                        .body(body)
                        .unwrap();
                    Ok::<_, Infallible>(resp)
                });
                let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_http2_stream_reset_mid_body_is_a_reset_on_http2() {
    let row = one(h2_server().await, Version::Http2, None).await;
    assert_eq!(row.error(), ErrorKind::Truncated, "{row:?}");
    let c = cut(&row);
    assert_eq!(c.end(), StreamEnd::Reset, "{row:?}");
    assert_eq!(c.version(), HttpVersion::HttpVersion2);
    assert_eq!(c.server, "TestProxy/2.0");
    assert_eq!(c.events, 2, "{row:?}");
}
