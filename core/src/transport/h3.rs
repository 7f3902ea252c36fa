//! HTTP/3: QUIC connections (quinn, rustls on ring, TLS 1.3, ALPN `h3`, no 0-RTT) and
//! requests multiplexed over them as h3 streams.
//!
//! Timing is taken at the same points as for the TCP transports: a request starts when
//! it is handed to its QUIC stream (the HEADERS frame goes to quinn, which sends it), and
//! each body chunk is dated when its read completes (QUIC has no kernel receive stamp per
//! stream: the UDP datagram is decrypted and reassembled in user space first).
//!
//! Each connection has its own UDP socket (a quinn endpoint), so the streams of different
//! connections are driven by different tasks, as TCP connections are.

use super::ending::ReadError;
use bytes::{Buf, Bytes};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use surge_proto::{ErrorKind, StreamEnd};
use tokio_util::sync::CancellationToken;

/// The request half of one HTTP/3 connection and the QUIC connection under it (both
/// cheap to clone: one per stream).
#[derive(Clone)]
pub struct Sender {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    quic: quinn::Connection,
}

impl Sender {
    /// Whether the QUIC connection has closed (known at once, before its driver task ends).
    pub fn is_closed(&self) -> bool {
        self.quic.close_reason().is_some()
    }
}
/// One request's stream: the body is sent on it and the response read from it.
pub type Stream = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Streams a QUIC connection may have open before another connection is used.
pub const STREAMS_PER_CONN: usize = 100;

/// A QUIC client configuration for `tls` (its ALPN and versions are set here).
pub fn client_config(mut tls: rustls::ClientConfig) -> Result<quinn::ClientConfig, rustls::Error> {
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.enable_early_data = false;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| rustls::Error::General(format!("TLS configuration unusable for QUIC: {e}")))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    // A silent server is noticed within 30 s even between requests; keep-alives keep an
    // idle connection open meanwhile (as TCP connections are kept).
    transport.max_idle_timeout(Some(Duration::from_secs(30).try_into().expect("30 s is a valid idle timeout")));
    transport.keep_alive_interval(Some(Duration::from_secs(10)));
    transport.max_concurrent_bidi_streams(0u8.into());
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

/// Why an HTTP/3 connection could not be opened.
#[derive(Debug)]
pub enum Failure {
    /// The UDP socket or the QUIC connection attempt could not be set up.
    Socket(std::io::Error),
    /// The QUIC handshake failed (TLS inside it, or no answer).
    Quic(quinn::ConnectionError),
    /// The HTTP/3 session could not be set up on the connection.
    Session(String),
}

/// Opens one QUIC connection to `addr` (from `local` when given) and its h3 session.
/// Returns the request sender, a token cancelled once the connection has ended, and how
/// long opening it took: the UDP endpoint and the first packet as `connecting` (QUIC has
/// no transport handshake of its own), the QUIC handshake, which is TLS 1.3's, as `tls`.
pub async fn connect(
    cfg: &quinn::ClientConfig,
    addr: SocketAddr,
    host: &str,
    local: Option<IpAddr>,
    guard: impl Send + 'static,
) -> Result<(Sender, CancellationToken, super::opening::Opening), Failure> {
    let began = Instant::now();
    let any: IpAddr = if addr.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let bind = SocketAddr::new(local.unwrap_or(any), 0);
    let mut endpoint = quinn::Endpoint::client(bind).map_err(Failure::Socket)?;
    endpoint.set_default_client_config(cfg.clone());
    let connecting = endpoint
        .connect(addr, host)
        .map_err(|e| Failure::Socket(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    let started = Instant::now();
    let conn = connecting.await.map_err(Failure::Quic)?;
    let opening = super::opening::Opening { connecting: started - began, tls: started.elapsed() };
    let quic = conn.clone();
    let (mut driver, send) =
        h3::client::new(h3_quinn::Connection::new(conn)).await.map_err(|e| Failure::Session(e.to_string()))?;
    let gone = CancellationToken::new();
    let done = gone.clone();
    tokio::spawn(async move {
        let _guard = guard;
        let _endpoint = endpoint;
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        done.cancel();
    });
    Ok((Sender { send, quic }, gone, opening))
}

/// Sends `req` on a new stream of `sender`: headers, body, end of the request; then
/// waits for the response head. Also returns when the request's end was handed to QUIC
/// (no socket stamp: quinn's connection task writes the packets).
pub async fn send(
    sender: &mut Sender,
    req: http::Request<Bytes>,
) -> Result<(http::Response<()>, Stream, Instant), ErrorKind> {
    let (mut parts, body) = req.into_parts();
    // hyper adds it for HTTP/1.1 and HTTP/2; proxies (Caddy) read an HTTP/3 body only with it.
    parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
    let mut stream = sender.send.send_request(http::Request::from_parts(parts, ())).await.map_err(|e| kind(&e))?;
    if !body.is_empty() {
        stream.send_data(body).await.map_err(|e| kind(&e))?;
    }
    stream.finish().await.map_err(|e| kind(&e))?;
    let sent = Instant::now();
    let resp = stream.recv_response().await.map_err(|e| kind(&e))?;
    Ok((resp, stream, sent))
}

/// The next body chunk of a response and when its read completed (`None`: the end).
pub async fn chunk(stream: &mut Stream) -> Option<Result<(Bytes, Instant), ReadError>> {
    match stream.recv_data().await {
        Ok(Some(mut buf)) => {
            let at = Instant::now();
            Some(Ok((buf.copy_to_bytes(buf.remaining()), at)))
        }
        Ok(None) => None,
        Err(e) => Some(Err(classify(&e))),
    }
}

/// A failed h3 stream's row error kind and how it ended: a stream reset (RESET_STREAM) or
/// a connection closed with an error is a reset, as a TCP reset is; a peer going away
/// closed it; an idle timeout is a timeout. (h3's error variants cannot be matched outside
/// the crate; their texts are its stable surface.)
fn classify(e: &h3::error::StreamError) -> ReadError {
    let text = e.to_string();
    let (kind, end) = if text.starts_with("Remote reset") {
        (ErrorKind::ConnectionReset, StreamEnd::Reset)
    } else if text.starts_with("Remote is closing") {
        (ErrorKind::ConnectionReset, StreamEnd::PeerClosed)
    } else if text.starts_with("Connection error") && text.ends_with("Timeout") {
        (ErrorKind::Timeout, StreamEnd::ReadTimeout)
    } else if text.starts_with("Connection error") {
        (ErrorKind::ConnectionReset, StreamEnd::Reset)
    } else {
        (ErrorKind::Other, StreamEnd::Unspecified)
    };
    ReadError::new(kind, end)
}

/// The row error kind of a failed h3 stream (see `classify`).
pub fn kind(e: &h3::error::StreamError) -> ErrorKind {
    classify(e).kind
}

/// Whether a failed QUIC handshake failed on TLS (a crypto transport error).
pub fn is_tls_failure(e: &quinn::ConnectionError) -> bool {
    match e {
        quinn::ConnectionError::TransportError(t) => {
            let code = u64::from(t.code);
            (0x100..0x200).contains(&code)
        }
        quinn::ConnectionError::ConnectionClosed(c) => {
            let code = u64::from(c.error_code);
            (0x100..0x200).contains(&code)
        }
        _ => false,
    }
}
