//! Connections to the target, whatever carries them: TCP (+ rustls for https) with
//! HTTP/1.1 or HTTP/2 (hyper 1.x), or QUIC with HTTP/3 (`h3`); and a pool that hands each
//! in-flight request a connection of its own (HTTP/1.1) or a share of a multiplexed one
//! (HTTP/2, HTTP/3). The request loop sees only [`Conn::send`] and [`Conn::chunk`]: the
//! same row, timing points and error kinds for every transport. A multiplexed
//! connection's I/O runs in a task of its own; an HTTP/1.1 connection's is polled by the
//! request that holds it (`Driver`), so a request costs no hand-over between tasks.
//!
//! A connection the server closed (llama.cpp's server closes after every streamed
//! response while advertising keep-alive) is dropped at check-in or check-out and a new
//! one is opened: a reconnect, counted, never a failed request.

use super::ending::{ReadError, end_of_hyper};
use super::h3;
use super::ioclock::{IoClock, Stamped};
use super::stats::Stats;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;
use surge_proto::{ErrorKind, StreamEnd};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Where requests go, resolved once before the run.
#[derive(Debug, Clone)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
    /// `host:port` as sent in `Host` / `:authority`.
    pub authority: String,
    /// Path prefix of the base URL (without trailing `/`), prepended to the endpoint.
    pub base_path: String,
}

/// An unusable base URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    #[error("base URL {0:?} is not an http:// or https:// URL")]
    Scheme(String),
    #[error("base URL {url:?}: {source}")]
    Uri {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("base URL {url:?}: no host")]
    NoHost { url: String },
    /// The host is not a valid TLS server name.
    #[error("base URL {url:?}: {source}")]
    ServerName {
        url: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// HTTP/3 needs an https:// base URL (QUIC always carries TLS).
    #[error("base URL {0:?}: HTTP/3 needs an https:// URL")]
    H3NeedsHttps(String),
    /// The extra CA certificates (--ca-cert) are not PEM certificates.
    #[error("--ca-cert: {0}")]
    CaCert(String),
    /// The TLS client configuration cannot be built.
    #[error("base URL {url:?}: {source}")]
    Tls {
        url: String,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot resolve {host}: no address")]
    NoAddress { host: String },
}

/// Why a connection to the target could not be opened. [`kind`](Self::kind) is the
/// error kind a request row records for it, decided by where the failure happened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// TCP connect (refused, unreachable, timed out).
    #[error("connect {addr}: {source}")]
    Tcp {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake failed (certificate, protocol, or the peer closed during it).
    #[error("TLS handshake with {host}: {source}")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP/1.1 or HTTP/2 handshake failed.
    #[error("HTTP handshake: {0}")]
    Http(#[source] hyper::Error),
    /// The QUIC handshake failed (TLS inside it, or no answer over UDP).
    #[error("QUIC connect {addr}: {source}")]
    Quic {
        addr: SocketAddr,
        #[source]
        source: quinn::ConnectionError,
    },
    /// The HTTP/3 session could not be set up on a QUIC connection.
    #[error("HTTP/3 handshake: {0}")]
    H3(String),
    /// A connecting task died (panicked or was cancelled).
    #[error("{0}")]
    Task(#[source] tokio::task::JoinError),
}

impl ConnectError {
    /// The row error kind of a request that could not get a connection.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ConnectError::Tcp { .. } | ConnectError::Http(_) | ConnectError::H3(_) => ErrorKind::Connect,
            ConnectError::Quic { source, .. } if h3::is_tls_failure(source) => ErrorKind::Tls,
            ConnectError::Quic { .. } => ErrorKind::Connect,
            ConnectError::Tls { .. } => ErrorKind::Tls,
            ConnectError::Task(_) => ErrorKind::Other,
        }
    }

    /// The TLS library's own error, when the handshake failed on one (not on I/O).
    pub fn tls_error(&self) -> Option<&rustls::Error> {
        match self {
            ConnectError::Tls { source, .. } => source.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()),
            _ => None,
        }
    }
}

impl Target {
    /// Parses and resolves `base_url` (e.g. `http://127.0.0.1:8000` or `https://h/v1x`).
    pub async fn resolve(base_url: &str) -> Result<Self, TargetError> {
        let uri: http::Uri = base_url.parse().map_err(|source| TargetError::Uri { url: base_url.into(), source })?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(TargetError::Scheme(base_url.into())),
        };
        let host = uri
            .host()
            .ok_or_else(|| TargetError::NoHost { url: base_url.into() })?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|source| TargetError::Resolve { host: host.clone(), source })?
            .next()
            .ok_or_else(|| TargetError::NoAddress { host: host.clone() })?;
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_else(|| format!("{host}:{port}"));
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(Self { https, host, port, addr, authority, base_path })
    }

    /// The request URI for `endpoint`: origin-form for HTTP/1.1, absolute for HTTP/2.
    pub fn uri(&self, endpoint: &str, absolute: bool) -> http::Uri {
        let path = format!("{}{}", self.base_path, endpoint);
        let s = if absolute {
            format!("{}://{}{}", if self.https { "https" } else { "http" }, self.authority, path)
        } else {
            path
        };
        s.parse().unwrap_or_else(|_| http::Uri::from_static("/"))
    }
}

/// Which HTTP version carries the requests (`--http-version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Not forced: HTTP/1.1 for http; for https, what ALPN agrees (h2 or http/1.1).
    Auto,
    Http1,
    Http2,
    Http3,
}

/// How the target's certificate is checked.
#[derive(Debug, Clone, Default)]
pub struct TargetTls {
    /// Do not verify it (vLLM's `--insecure`).
    pub insecure: bool,
    /// Roots trusted besides the Mozilla ones (PEM; `--ca-cert`).
    pub ca_pem: Vec<u8>,
}

impl TargetTls {
    /// A workload's target TLS settings (`target_insecure`, `target_ca_pem`).
    pub fn of(w: &surge_proto::Workload) -> Self {
        Self { insecure: w.target_insecure, ca_pem: w.target_ca_pem.clone() }
    }
}

/// The request half of one client connection.
pub enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
    H3(h3::Sender),
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sender::H1(_) => "Sender::H1",
            Sender::H2(_) => "Sender::H2",
            Sender::H3(_) => "Sender::H3",
        })
    }
}

impl Sender {
    /// Another handle on the same connection, for a multiplexed one.
    fn share(&self) -> Option<Sender> {
        match self {
            Sender::H1(_) => None,
            Sender::H2(s) => Some(Sender::H2(s.clone())),
            Sender::H3(s) => Some(Sender::H3(s.clone())),
        }
    }
}

/// One client connection and the time of its latest socket read.
#[derive(Debug)]
pub struct Conn {
    pub sender: Sender,
    pub clock: IoClock,
    /// Cancelled once the connection has ended and dropped its requests.
    pub gone: CancellationToken,
    /// An HTTP/1.1 connection's I/O, driven by the request that holds the connection
    /// (`None` for a multiplexed one, whose own task drives it, and once it has ended).
    driver: Option<Driver>,
}

/// hyper's future of an HTTP/1.1 connection, polled by the task of the request using
/// the connection rather than by a task of its own: no hand-over between two tasks for
/// each request, response head and body chunk. Idle in the pool, nobody polls it; a close
/// by the server is seen when the next request readies the connection (a reconnect).
struct Driver(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>);

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

/// Runs `f` while driving the connection's I/O; `None` if the connection ended while
/// `f` was still waiting (its requests are then never answered).
async fn driven<F: Future>(driver: &mut Option<Driver>, f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = f.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        let Some(d) = driver.as_mut() else { return Poll::Ready(None) };
        if d.0.as_mut().poll(cx).is_ready() {
            *driver = None;
        }
        // What the connection just did (written, read) may have completed `f`.
        match f.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if driver.is_none() => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// A response's body, read chunk by chunk whatever carries it.
pub enum Body {
    Hyper(hyper::body::Incoming, IoClock),
    H3(Box<h3::Stream>),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Body::Hyper(..) => "Body::Hyper",
            Body::H3(_) => "Body::H3",
        })
    }
}

/// A response's head: what the request loop reads of it.
#[derive(Debug)]
pub struct Head {
    pub status: http::StatusCode,
    pub version: http::Version,
    /// Kept (a move, not a copy) to name the peer if the body is cut (`Server`, `Via`).
    pub headers: http::HeaderMap,
}

impl Head {
    fn of<B>(resp: http::Response<B>) -> (Self, B) {
        let (parts, body) = resp.into_parts();
        (Self { status: parts.status, version: parts.version, headers: parts.headers }, body)
    }
}

impl Body {
    /// The next chunk of data and when it arrived (`None`: the body ended cleanly).
    pub async fn chunk(&mut self) -> Option<Result<(Bytes, Instant), ReadError>> {
        match self {
            Body::Hyper(body, clock) => loop {
                match body.frame().await? {
                    // Dated by the socket read that brought it (see ioclock.rs).
                    Ok(frame) => match frame.into_data() {
                        Ok(data) => return Some(Ok((data, clock.arrival()))),
                        Err(_) => continue,
                    },
                    Err(e) => return Some(Err(ReadError::new(kind_of(&e), end_of_hyper(&e)))),
                }
            },
            Body::H3(stream) => h3::chunk(stream).await,
        }
    }
}

/// Classifies a hyper error by its innermost I/O cause.
fn kind_of(err: &hyper::Error) -> ErrorKind {
    use std::error::Error as _;
    let mut src = err.source();
    while let Some(e) = src {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe => ErrorKind::ConnectionReset,
                std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
                _ => ErrorKind::Other,
            };
        }
        src = e.source();
    }
    if err.is_incomplete_message() || err.is_canceled() {
        ErrorKind::ConnectionReset
    } else if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Other
    }
}

impl Conn {
    pub fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed() || self.driver.is_none(),
            Sender::H2(s) => s.is_closed(),
            Sender::H3(s) => s.is_closed() || self.gone.is_cancelled(),
        }
    }

    /// Whether requests share this connection (HTTP/2, HTTP/3).
    pub fn is_multiplexed(&self) -> bool {
        !matches!(self.sender, Sender::H1(_))
    }

    /// Waits until the connection can take a request; false if it cannot any more.
    pub async fn ready(&mut self) -> bool {
        match &mut self.sender {
            Sender::H1(s) => matches!(driven(&mut self.driver, s.ready()).await, Some(Ok(()))),
            Sender::H2(s) => s.ready().await.is_ok(),
            Sender::H3(s) => !s.is_closed() && !self.gone.is_cancelled(),
        }
    }

    /// The next chunk of `body`, a response on this connection (see [`Body::chunk`]).
    pub async fn chunk(&mut self, body: &mut Body) -> Option<Result<(Bytes, Instant), ReadError>> {
        if !matches!(self.sender, Sender::H1(_)) {
            return body.chunk().await;
        }
        // The connection ended before the body said why: the peer closed it.
        driven(&mut self.driver, body.chunk())
            .await
            .unwrap_or(Some(Err(ReadError::new(ErrorKind::ConnectionReset, StreamEnd::PeerClosed))))
    }

    /// Sends a request and waits for the response head.
    pub async fn send(&mut self, req: http::Request<Bytes>) -> Result<(Head, Body), ErrorKind> {
        let hyper = |r: Result<http::Response<hyper::body::Incoming>, hyper::Error>, clock: &IoClock| {
            r.map(|resp| {
                let (head, body) = Head::of(resp);
                (head, Body::Hyper(body, clock.clone()))
            })
            .map_err(|e| kind_of(&e))
        };
        match &mut self.sender {
            Sender::H1(s) => match driven(&mut self.driver, s.send_request(req.map(Full::new))).await {
                Some(r) => hyper(r, &self.clock),
                None => Err(ErrorKind::ConnectionReset),
            },
            Sender::H2(s) => hyper(s.send_request(req.map(Full::new)).await, &self.clock),
            // Boxed: see `Connector::connect`.
            Sender::H3(s) => {
                Box::pin(h3::send(s, req)).await.map(|(resp, stream)| (Head::of(resp).0, Body::H3(Box::new(stream))))
            }
        }
    }
}

/// Opens connections to one target.
pub struct Connector {
    pub target: Target,
    tls: Option<tokio_rustls::TlsConnector>,
    quic: Option<quinn::ClientConfig>,
    server_name: Option<rustls::pki_types::ServerName<'static>>,
    version: Version,
    /// An `Auto` https connection agreed on h2 (so the pool shares connections).
    negotiated_h2: std::sync::atomic::AtomicBool,
    /// Source address of every connection (`None`: the kernel's choice).
    local: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").field("target", &self.target).field("version", &self.version).finish()
    }
}

/// Accepts any certificate (vLLM's `--insecure`), still checking the handshake's
/// signatures with the provider's algorithms.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl Connector {
    /// https targets are verified against the Mozilla roots (webpki-roots).
    pub fn new(target: Target, version: Version) -> Result<Self, TargetError> {
        Self::with_tls(target, version, &TargetTls::default())
    }

    /// https targets verified as `tls` says.
    pub fn with_tls(target: Target, version: Version, tls: &TargetTls) -> Result<Self, TargetError> {
        let mut roots = rustls::RootCertStore::empty();
        if target.https || version == Version::Http3 {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let mut pem = tls.ca_pem.as_slice();
            for cert in rustls_pemfile::certs(&mut pem) {
                let cert = cert.map_err(|e| TargetError::CaCert(e.to_string()))?;
                roots.add(cert).map_err(|e| TargetError::CaCert(e.to_string()))?;
            }
        }
        Self::build(target, version, roots, tls.insecure)
    }

    /// As [`new`](Self::new), verifying https targets against `roots` instead.
    pub fn with_roots(target: Target, version: Version, roots: rustls::RootCertStore) -> Result<Self, TargetError> {
        Self::build(target, version, roots, false)
    }

    fn build(
        target: Target,
        version: Version,
        roots: rustls::RootCertStore,
        insecure: bool,
    ) -> Result<Self, TargetError> {
        if version == Version::Http3 && !target.https {
            return Err(TargetError::H3NeedsHttps(format!("http://{}{}", target.authority, target.base_path)));
        }
        let (mut tls, mut quic, mut server_name) = (None, None, None);
        if target.https {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let err = |source| TargetError::Tls { url: target.host.clone(), source };
            let versions: &[&rustls::SupportedProtocolVersion] =
                if version == Version::Http3 { &[&rustls::version::TLS13] } else { rustls::DEFAULT_VERSIONS };
            let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_protocol_versions(versions)
                .map_err(err)?;
            let mut cfg = if insecure {
                builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify(provider))).with_no_client_auth()
            } else {
                builder.with_root_certificates(roots).with_no_client_auth()
            };
            cfg.alpn_protocols = match version {
                Version::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
                Version::Http1 => vec![b"http/1.1".to_vec()],
                Version::Http2 => vec![b"h2".to_vec()],
                Version::Http3 => vec![b"h3".to_vec()],
            };
            server_name = Some(
                rustls::pki_types::ServerName::try_from(target.host.clone())
                    .map_err(|source| TargetError::ServerName { url: target.host.clone(), source })?,
            );
            if version == Version::Http3 {
                quic = Some(h3::client_config(cfg).map_err(err)?);
            } else {
                tls = Some(tokio_rustls::TlsConnector::from(Arc::new(cfg)));
            }
        }
        Ok(Self {
            target,
            tls,
            quic,
            server_name,
            version,
            negotiated_h2: std::sync::atomic::AtomicBool::new(false),
            local: None,
        })
    }

    /// Connections opened from `local` (an address of this host) when given.
    pub fn from_address(mut self, local: Option<std::net::IpAddr>) -> Self {
        self.local = local;
        self
    }

    /// Whether requests share connections (forced HTTP/2 or HTTP/3, or h2 agreed by ALPN).
    pub fn multiplexed(&self) -> bool {
        matches!(self.version, Version::Http2 | Version::Http3) || self.negotiated_h2.load(Ordering::Relaxed)
    }

    async fn tcp(&self) -> std::io::Result<TcpStream> {
        let addr = self.target.addr;
        let Some(ip) = self.local else { return TcpStream::connect(addr).await };
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.bind(std::net::SocketAddr::new(ip, 0))?;
        socket.connect(addr).await
    }

    /// Opens one connection. The handshakes' futures are large (TLS, QUIC, HTTP/2) and
    /// rare, so they live on the heap: every request's future holds a connect in its
    /// state, and a large state is copied each time a request's future is made.
    pub async fn connect(&self, stats: &Arc<Stats>) -> Result<Conn, ConnectError> {
        Box::pin(self.open(stats)).await
    }

    async fn open(&self, stats: &Arc<Stats>) -> Result<Conn, ConnectError> {
        let addr = self.target.addr;
        if let Some(quic) = &self.quic {
            let guard = stats.connection_opened();
            let (sender, gone) =
                h3::connect(quic, addr, &self.target.host, self.local, guard).await.map_err(|e| match e {
                    h3::Failure::Socket(source) => ConnectError::Tcp { addr, source },
                    h3::Failure::Quic(source) => ConnectError::Quic { addr, source },
                    h3::Failure::Session(text) => ConnectError::H3(text),
                })?;
            return Ok(Conn { sender: Sender::H3(sender), clock: IoClock::default(), gone, driver: None });
        }
        let tcp = self.tcp().await.map_err(|source| ConnectError::Tcp { addr, source })?;
        let _ = tcp.set_nodelay(true);
        // Stamped under TLS: bytes are dated when they reach or leave the socket.
        let (tcp, clock) = Stamped::new(tcp).map_err(|source| ConnectError::Tcp { addr, source })?;
        match (&self.tls, &self.server_name) {
            (Some(tls), Some(name)) => {
                let stream = tls
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|source| ConnectError::Tls { host: self.target.host.clone(), source })?;
                let h2 = match self.version {
                    Version::Auto => {
                        let agreed = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                        if agreed {
                            self.negotiated_h2.store(true, Ordering::Relaxed);
                        }
                        agreed
                    }
                    v => v == Version::Http2,
                };
                self.handshake(stream, clock, stats, h2).await
            }
            _ => self.handshake(tcp, clock, stats, self.version == Version::Http2).await,
        }
    }

    async fn handshake<I>(&self, io: I, clock: IoClock, stats: &Arc<Stats>, h2: bool) -> Result<Conn, ConnectError>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(io);
        let guard = stats.connection_opened();
        let err = ConnectError::Http;
        if h2 {
            let (send, conn) = http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(1 << 20)
                .initial_connection_window_size(4 << 20)
                .handshake(io)
                .await
                .map_err(err)?;
            let gone = CancellationToken::new();
            tokio::spawn(watch(conn, guard, gone.clone()));
            Ok(Conn { sender: Sender::H2(send), clock, gone, driver: None })
        } else {
            let (send, conn) = http1::Builder::new().max_buf_size(4 << 20).handshake(io).await.map_err(err)?;
            let gone = CancellationToken::new();
            let driver = Driver(Box::pin(watch(conn, guard, gone.clone())));
            Ok(Conn { sender: Sender::H1(send), clock, gone, driver: Some(driver) })
        }
    }
}

/// Drives a connection to its end, then says so: `gone` is cancelled only after the
/// connection (and with it every pending request callback) has been dropped. Spawned for
/// a multiplexed connection; an HTTP/1.1 connection's requests poll it ([`Driver`]).
async fn watch<F: std::future::Future>(conn: F, guard: impl Send, gone: CancellationToken) {
    let _guard = guard;
    let _ = conn.await;
    gone.cancel();
}

/// Streams multiplexed on one HTTP/2 or HTTP/3 connection before another is opened.
const STREAMS_PER_CONN: usize = h3::STREAMS_PER_CONN;

/// Idle HTTP/1.1 connections, or the shared multiplexed ones.
#[derive(Debug)]
pub struct Pool {
    pub connector: Connector,
    stats: Arc<Stats>,
    idle: Mutex<Vec<Conn>>,
    shared: Mutex<Vec<Conn>>,
    shared_target: usize,
    shared_next: AtomicUsize,
}

impl Pool {
    /// `concurrency`: expected requests in flight (sizes the multiplexed connection set).
    pub fn new(connector: Connector, stats: Arc<Stats>, concurrency: usize) -> Self {
        Self::with_connections(connector, stats, concurrency, 0)
    }

    /// As [`new`](Self::new) with `connections` multiplexed connections (0: one per 100
    /// requests in flight).
    pub fn with_connections(connector: Connector, stats: Arc<Stats>, concurrency: usize, connections: usize) -> Self {
        let shared_target = if connections > 0 { connections } else { concurrency.div_ceil(STREAMS_PER_CONN).max(1) };
        Self {
            connector,
            stats,
            idle: Mutex::new(Vec::new()),
            shared: Mutex::new(Vec::new()),
            shared_target,
            shared_next: AtomicUsize::new(0),
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A connection for one request, and whether it was used before.
    pub async fn checkout(&self) -> Result<(Conn, bool), ConnectError> {
        if self.connector.multiplexed() {
            return self.checkout_shared().await;
        }
        loop {
            let conn = self.idle.lock().expect("pool lock").pop();
            match conn {
                Some(c) if !c.is_closed() => return Ok((c, true)),
                Some(_) => continue,
                None => break,
            }
        }
        Ok((self.connector.connect(&self.stats).await?, false))
    }

    async fn checkout_shared(&self) -> Result<(Conn, bool), ConnectError> {
        {
            let mut conns = self.shared.lock().expect("pool lock");
            conns.retain(|c| !c.is_closed());
            if conns.len() >= self.shared_target {
                let i = self.shared_next.fetch_add(1, Ordering::Relaxed) % conns.len();
                let c = &conns[i];
                if let Some(sender) = c.sender.share() {
                    return Ok((Conn { sender, clock: c.clock.clone(), gone: c.gone.clone(), driver: None }, true));
                }
            }
        }
        let conn = self.connector.connect(&self.stats).await?;
        self.share(&conn);
        Ok((conn, false))
    }

    /// A new connection, not taken from the idle set (multiplexed: also shared from now on).
    pub async fn connect_new(&self) -> Result<Conn, ConnectError> {
        let conn = self.connector.connect(&self.stats).await?;
        self.share(&conn);
        Ok(conn)
    }

    /// Adds a multiplexed connection to the shared set (HTTP/1.1 ones are not shared).
    fn share(&self, conn: &Conn) {
        if let Some(sender) = conn.sender.share() {
            let c = Conn { sender, clock: conn.clock.clone(), gone: conn.gone.clone(), driver: None };
            self.shared.lock().expect("pool lock").push(c);
        }
    }

    /// Returns a connection after a complete response.
    pub fn checkin(&self, conn: Conn) {
        if conn.is_multiplexed() || conn.is_closed() {
            return;
        }
        self.idle.lock().expect("pool lock").push(conn);
    }

    /// Opens `n` connections ahead of the run (multiplexed: the shared set), at most
    /// `parallel` connects at a time. Without a forced version on https, one connection
    /// first shows what ALPN agrees on.
    pub async fn warm(self: &Arc<Self>, n: usize, parallel: usize) -> Result<usize, ConnectError> {
        let mut opened = 0;
        if self.connector.version == Version::Auto && self.connector.target.https && n > 0 {
            let conn = self.connector.connect(&self.stats).await?;
            self.keep(conn);
            opened = 1;
        }
        let n = if self.connector.multiplexed() { self.shared_target } else { n };
        let mut set = tokio::task::JoinSet::new();
        let mut launched = opened;
        while opened < n {
            while launched < n && set.len() < parallel.max(1) {
                let pool = Arc::clone(self);
                set.spawn(async move { pool.connector.connect(&pool.stats).await });
                launched += 1;
            }
            let Some(joined) = set.join_next().await else { break };
            let conn = joined.map_err(ConnectError::Task)??;
            self.keep(conn);
            opened += 1;
        }
        Ok(opened)
    }

    fn keep(&self, conn: Conn) {
        if conn.is_multiplexed() {
            self.share(&conn);
        } else {
            self.idle.lock().expect("pool lock").push(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ended() -> Option<Driver> {
        Some(Driver(Box::pin(async {})))
    }

    /// A connection that ends while a request still waits on it releases the request
    /// (`None`: a reset), whatever hyper does with the request's callback.
    #[tokio::test]
    async fn a_connection_that_ends_releases_what_waits_on_it() {
        let mut driver = ended();
        let out = tokio::time::timeout(Duration::from_secs(5), driven(&mut driver, std::future::pending::<()>())).await;
        assert_eq!(out.expect("released"), None);
        assert!(driver.is_none(), "the ended connection is not polled again");
        // Once ended, a request that can still complete does; one that cannot is released.
        assert_eq!(driven(&mut driver, async { 7 }).await, Some(7));
        assert_eq!(driven(&mut driver, std::future::pending::<()>()).await, None);
    }

    /// The connection is driven while the request waits: a request that needs the
    /// connection to make progress completes.
    #[tokio::test]
    async fn a_request_completes_once_its_connection_has_done_its_part() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut tx = Some(tx);
        let mut polls = 0;
        // Its first poll is woken again (as by socket readiness); its second answers.
        let mut driver = Some(Driver(Box::pin(std::future::poll_fn(move |cx| {
            polls += 1;
            match polls {
                1 => cx.waker().wake_by_ref(),
                2 => drop(tx.take().map(|tx| tx.send(9))),
                _ => {}
            }
            Poll::<()>::Pending
        }))));
        let out = tokio::time::timeout(Duration::from_secs(5), driven(&mut driver, rx));
        assert_eq!(out.await.expect("completed").map(Result::ok), Some(Some(9)));
        assert!(driver.is_some(), "the connection is still up");
    }
}
