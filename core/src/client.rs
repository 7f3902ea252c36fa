//! Single requests to the target outside a run (D12: one client API for the
//! initial test request, `/v1/models`, `/metrics` and readiness), on the engine's own
//! connector: the same name resolution, TLS verification and HTTP/1.1 stack as the load.
//!
//! Each call opens one HTTP/1.1 connection, sends one request, reads the whole answer
//! and closes. The whole exchange is bounded by the caller's timeout.

use crate::transport::conn::{Body, Version};
use crate::transport::connector::{ConnectError, Connector};
use crate::transport::stats::Stats;
use crate::transport::target::{Target, TargetError};
use crate::transport::tls::TargetTls;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A complete answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
}

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The base URL cannot be used (scheme, host, resolution, TLS name).
    #[error(transparent)]
    Target(#[from] TargetError),
    /// No connection (refused, unreachable, TLS handshake).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The timeout passed before a connection was open.
    #[error("connect timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// The request cannot be built (e.g. a path that is not a valid URI).
    #[error("invalid request: {0}")]
    Request(#[source] http::Error),
    /// The exchange failed after the connection was open (reset, malformed answer).
    #[error("the exchange failed: {}", .0.as_str_name().trim_start_matches("ERROR_KIND_").to_ascii_lowercase())]
    Http(surge_proto::ErrorKind),
    /// The timeout passed before the whole answer arrived.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl ClientError {
    /// Whether the server could not be reached at all (nothing listening, unreachable,
    /// or connecting took too long), as opposed to a server that answered badly.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Connect(ConnectError::Tcp { .. }) | ClientError::ConnectTimeout(_))
    }
}

/// `GET {base_url}{path}`.
pub async fn get(base_url: &str, path: &str, timeout: Duration) -> Result<Response, ClientError> {
    request(http::Method::GET, base_url, path, None, timeout, None, &TargetTls::default()).await
}

/// [`get`], verifying an https target as `tls` says (`--ca-cert`, `--insecure`).
pub async fn get_tls(tls: &TargetTls, base_url: &str, path: &str, timeout: Duration) -> Result<Response, ClientError> {
    request(http::Method::GET, base_url, path, None, timeout, None, tls).await
}

/// [`get_tls`] from the host address `local` (the agent's `--local-address`).
pub async fn get_from(
    local: Option<std::net::IpAddr>,
    tls: &TargetTls,
    base_url: &str,
    path: &str,
    timeout: Duration,
) -> Result<Response, ClientError> {
    request(http::Method::GET, base_url, path, None, timeout, local, tls).await
}

/// `POST {base_url}{path}` without a body, verifying an https target as `tls` says.
pub async fn post_empty(
    tls: &TargetTls,
    base_url: &str,
    path: &str,
    timeout: Duration,
) -> Result<Response, ClientError> {
    request(http::Method::POST, base_url, path, None, timeout, None, tls).await
}

/// `POST {base_url}{path}` with a JSON body.
pub async fn post_json(base_url: &str, path: &str, body: Bytes, timeout: Duration) -> Result<Response, ClientError> {
    request(http::Method::POST, base_url, path, Some(body), timeout, None, &TargetTls::default()).await
}

async fn request(
    method: http::Method,
    base_url: &str,
    path: &str,
    body: Option<Bytes>,
    timeout: Duration,
    local: Option<std::net::IpAddr>,
    tls: &TargetTls,
) -> Result<Response, ClientError> {
    let until = Instant::now() + timeout;
    let target = Target::resolve(base_url).await?;
    let uri = target.uri(path, false);
    let authority = target.authority.clone();
    let connector = Connector::with_tls(target, Version::Http1, tls)?.from_address(local);
    // Counters nobody reads: the connector counts open connections for the load's health.
    let stats = Arc::new(Stats::default());
    let mut conn = tokio::time::timeout_at(until, connector.connect(&stats))
        .await
        .map_err(|_| ClientError::ConnectTimeout(timeout))??;
    let mut req = http::Request::builder().method(method).uri(uri).header(http::header::HOST, authority);
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(body.unwrap_or_default()).map_err(ClientError::Request)?;
    let exchange = async {
        let (head, mut body): (_, Body) = conn.send(req).await.map_err(ClientError::Http)?;
        let mut all = bytes::BytesMut::new();
        // Through the connection: an HTTP/1.1 body longer than one read arrives only while
        // the connection's I/O is driven (a 53 KB vLLM /metrics page did not, otherwise).
        while let Some(chunk) = conn.chunk(&mut body).await {
            all.extend_from_slice(&chunk.map_err(|e| ClientError::Http(e.kind))?.0);
        }
        Ok(Response { status: head.status.as_u16(), body: all.freeze() })
    };
    tokio::time::timeout_at(until, exchange).await.map_err(|_| ClientError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP/1.1 server: reads the first request up to the end of `until`,
    /// answers `answer` and returns the request.
    async fn serve_once(until: &'static str, answer: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !String::from_utf8_lossy(&got).ends_with(until) {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        (base, task)
    }

    #[tokio::test]
    async fn get_returns_status_and_body() {
        let (base, server) =
            serve_once("\r\n\r\n", "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy").await;
        let r = get(&format!("{base}/prefix/"), "/v1/models", Duration::from_secs(5)).await.unwrap();
        assert_eq!(r, Response { status: 503, body: Bytes::from_static(b"busy") });
        let req = server.await.unwrap();
        assert!(req.starts_with("GET /prefix/v1/models HTTP/1.1\r\n"), "{req}");
        assert!(req.to_ascii_lowercase().contains("host: 127.0.0.1:"), "{req}");
    }

    #[tokio::test]
    async fn post_json_sends_the_body() {
        let (base, server) = serve_once("{\"a\":1}", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
        let r = post_json(&base, "/v1/completions", Bytes::from_static(b"{\"a\":1}"), Duration::from_secs(5)).await;
        assert_eq!(r.unwrap().status, 200);
        let req = server.await.unwrap().to_ascii_lowercase();
        assert!(req.starts_with("post /v1/completions http/1.1\r\n"), "{req}");
        assert!(req.contains("content-type: application/json") && req.ends_with("{\"a\":1}"), "{req}");
    }

    #[tokio::test]
    async fn failures_are_typed() {
        // A port nothing listens on: refused, a connect error.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = get(&format!("http://127.0.0.1:{port}"), "/", Duration::from_secs(5)).await.unwrap_err();
        let ClientError::Connect(ConnectError::Tcp { source, .. }) = &e else { panic!("{e:?}") };
        assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(e.is_unreachable());
        assert!(e.to_string().starts_with(&format!("connect 127.0.0.1:{port}: ")), "{e}");
        // A server that accepts and never answers: the timeout names the wait.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let e = get(&base, "/", Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(e, ClientError::Timeout(_)), "{e:?}");
        assert_eq!(e.to_string(), "no answer within 200ms");
        assert!(!e.is_unreachable());
        drop(listener);
        let e = get("ftp://x", "/", Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(e, ClientError::Target(TargetError::Scheme(_))), "{e:?}");
    }

    /// A body that arrives over several reads, some time apart (vLLM's /metrics is ~53 KB),
    /// is read whole within the timeout.
    #[tokio::test]
    async fn a_long_body_in_several_writes_is_read_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        const PART: usize = 20_000;
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 3 * PART).as_bytes()).await.unwrap();
            for part in [b'a', b'b', b'c'] {
                s.write_all(&[part; PART]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        });
        let r = get(&base, "/metrics", Duration::from_secs(5)).await.unwrap();
        assert_eq!((r.status, r.body.len()), (200, 3 * PART));
        assert!(r.body[..PART].iter().all(|&b| b == b'a') && r.body[2 * PART..].iter().all(|&b| b == b'c'));
        server.await.unwrap();
    }
}
