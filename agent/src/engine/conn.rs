//! Connections to the target: TCP (+ rustls for https), HTTP/1.1 or HTTP/2 (hyper 1.x),
//! and a pool that hands each in-flight request a connection of its own (HTTP/1.1) or a
//! share of a multiplexed one (HTTP/2).
//!
//! A connection the server closed (llama.cpp's server closes after every streamed
//! response while advertising keep-alive) is dropped at check-in or check-out and a new
//! one is opened: a reconnect, counted, never a failed request.

use super::ioclock::{IoClock, Stamped};
use super::stats::Stats;
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use surge_proto::ErrorKind;
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
    /// A connecting task died (panicked or was cancelled).
    #[error("{0}")]
    Task(#[source] tokio::task::JoinError),
}

impl ConnectError {
    /// The row error kind of a request that could not get a connection.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ConnectError::Tcp { .. } | ConnectError::Http(_) => ErrorKind::Connect,
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

/// The request half of one client connection.
#[derive(Debug)]
pub enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One client connection and the time of its latest socket read.
#[derive(Debug)]
pub struct Conn {
    pub sender: Sender,
    pub clock: IoClock,
    /// Cancelled once the connection's task has ended and dropped the connection.
    pub gone: CancellationToken,
}

impl Conn {
    pub fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    pub fn is_h2(&self) -> bool {
        matches!(self.sender, Sender::H2(_))
    }

    /// Waits until the connection can take a request.
    pub async fn ready(&mut self) -> Result<(), hyper::Error> {
        match &mut self.sender {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    pub async fn send(
        &mut self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper::Error> {
        match &mut self.sender {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(req).await,
        }
    }
}

/// Opens connections to one target.
pub struct Connector {
    pub target: Target,
    tls: Option<tokio_rustls::TlsConnector>,
    server_name: Option<rustls::pki_types::ServerName<'static>>,
    h2: bool,
    /// Source address of every connection (`None`: the kernel's choice).
    local: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").field("target", &self.target).field("h2", &self.h2).finish()
    }
}

impl Connector {
    /// `h2`: HTTP/2 (prior knowledge on http, ALPN `h2` on https). https targets are
    /// verified against the Mozilla roots (webpki-roots).
    pub fn new(target: Target, h2: bool) -> Result<Self, TargetError> {
        let mut roots = rustls::RootCertStore::empty();
        if target.https {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        Self::with_roots(target, h2, roots)
    }

    /// As [`new`](Self::new), verifying https targets against `roots` instead.
    pub fn with_roots(target: Target, h2: bool, roots: rustls::RootCertStore) -> Result<Self, TargetError> {
        let (tls, server_name) = if target.https {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|source| TargetError::Tls { url: target.host.clone(), source })?
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = if h2 { vec![b"h2".to_vec()] } else { vec![b"http/1.1".to_vec()] };
            let name = rustls::pki_types::ServerName::try_from(target.host.clone())
                .map_err(|source| TargetError::ServerName { url: target.host.clone(), source })?;
            (Some(tokio_rustls::TlsConnector::from(Arc::new(cfg))), Some(name))
        } else {
            (None, None)
        };
        Ok(Self { target, tls, server_name, h2, local: None })
    }

    /// Connections opened from `local` (an address of this host) when given.
    pub fn from_address(mut self, local: Option<std::net::IpAddr>) -> Self {
        self.local = local;
        self
    }

    async fn tcp(&self) -> std::io::Result<TcpStream> {
        let addr = self.target.addr;
        let Some(ip) = self.local else { return TcpStream::connect(addr).await };
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.bind(std::net::SocketAddr::new(ip, 0))?;
        socket.connect(addr).await
    }

    /// Opens one connection.
    pub async fn connect(&self, stats: &Arc<Stats>) -> Result<Conn, ConnectError> {
        let addr = self.target.addr;
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
                self.handshake(stream, clock, stats).await
            }
            _ => self.handshake(tcp, clock, stats).await,
        }
    }

    async fn handshake<I>(&self, io: I, clock: IoClock, stats: &Arc<Stats>) -> Result<Conn, ConnectError>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(io);
        let guard = stats.connection_opened();
        let err = ConnectError::Http;
        if self.h2 {
            let (send, conn) = http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(1 << 20)
                .initial_connection_window_size(4 << 20)
                .handshake(io)
                .await
                .map_err(err)?;
            let gone = CancellationToken::new();
            tokio::spawn(watch(conn, guard, gone.clone()));
            Ok(Conn { sender: Sender::H2(send), clock, gone })
        } else {
            let (send, conn) = http1::Builder::new().max_buf_size(4 << 20).handshake(io).await.map_err(err)?;
            let gone = CancellationToken::new();
            tokio::spawn(watch(conn, guard, gone.clone()));
            Ok(Conn { sender: Sender::H1(send), clock, gone })
        }
    }
}

/// Drives a connection to its end, then says so: `gone` is cancelled only after the
/// connection (and with it every pending request callback) has been dropped.
async fn watch<F: std::future::Future>(conn: F, guard: impl Send, gone: CancellationToken) {
    let _guard = guard;
    let _ = conn.await;
    gone.cancel();
}

/// A multiplexed HTTP/2 connection as the pool shares it.
type SharedH2 = (http2::SendRequest<Full<Bytes>>, IoClock, CancellationToken);

/// Streams multiplexed on one HTTP/2 connection before another is opened.
const H2_STREAMS_PER_CONN: usize = 100;

/// Idle HTTP/1.1 connections, or the shared HTTP/2 ones.
#[derive(Debug)]
pub struct Pool {
    pub connector: Connector,
    stats: Arc<Stats>,
    idle: Mutex<Vec<Conn>>,
    h2_conns: Mutex<Vec<SharedH2>>,
    h2_target: usize,
    h2_next: AtomicUsize,
}

impl Pool {
    /// `concurrency`: expected requests in flight (sizes the HTTP/2 connection set).
    pub fn new(connector: Connector, stats: Arc<Stats>, concurrency: usize) -> Self {
        let h2_target = concurrency.div_ceil(H2_STREAMS_PER_CONN).max(1);
        Self {
            connector,
            stats,
            idle: Mutex::new(Vec::new()),
            h2_conns: Mutex::new(Vec::new()),
            h2_target,
            h2_next: AtomicUsize::new(0),
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A connection for one request, and whether it was used before.
    pub async fn checkout(&self) -> Result<(Conn, bool), ConnectError> {
        if self.connector.h2 {
            return self.checkout_h2().await;
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

    async fn checkout_h2(&self) -> Result<(Conn, bool), ConnectError> {
        {
            let mut conns = self.h2_conns.lock().expect("pool lock");
            conns.retain(|(c, _, _)| !c.is_closed());
            if conns.len() >= self.h2_target {
                let i = self.h2_next.fetch_add(1, Ordering::Relaxed) % conns.len();
                let (s, clock, gone) = conns[i].clone();
                return Ok((Conn { sender: Sender::H2(s), clock, gone }, true));
            }
        }
        let conn = self.connector.connect(&self.stats).await?;
        self.share_h2(&conn);
        Ok((conn, false))
    }

    /// A new connection, not taken from the idle set (HTTP/2: also shared from now on).
    pub async fn connect_new(&self) -> Result<Conn, ConnectError> {
        let conn = self.connector.connect(&self.stats).await?;
        self.share_h2(&conn);
        Ok(conn)
    }

    /// Adds an HTTP/2 connection to the shared set (HTTP/1.1 ones are not shared).
    fn share_h2(&self, conn: &Conn) {
        if let Sender::H2(s) = &conn.sender {
            self.h2_conns.lock().expect("pool lock").push((s.clone(), conn.clock.clone(), conn.gone.clone()));
        }
    }

    /// Returns a connection after a complete response.
    pub fn checkin(&self, conn: Conn) {
        if conn.is_h2() || conn.is_closed() {
            return;
        }
        self.idle.lock().expect("pool lock").push(conn);
    }

    /// Opens `n` connections ahead of the run, at most `parallel` connects at a time.
    pub async fn warm(self: &Arc<Self>, n: usize, parallel: usize) -> Result<usize, ConnectError> {
        let n = if self.connector.h2 { self.h2_target } else { n };
        let mut set = tokio::task::JoinSet::new();
        let mut opened = 0;
        let mut launched = 0;
        while opened < n {
            while launched < n && set.len() < parallel.max(1) {
                let pool = Arc::clone(self);
                set.spawn(async move { pool.connector.connect(&pool.stats).await });
                launched += 1;
            }
            let Some(joined) = set.join_next().await else { break };
            let conn = joined.map_err(ConnectError::Task)??;
            match &conn.sender {
                Sender::H2(_) => self.share_h2(&conn),
                Sender::H1(_) => self.idle.lock().expect("pool lock").push(conn),
            }
            opened += 1;
        }
        Ok(opened)
    }
}
