//! Opening connections to the target: TCP (+ rustls for https) with an HTTP/1.1 or
//! HTTP/2 handshake (hyper), or QUIC with HTTP/3; what failed, if one cannot be opened.

use super::conn::{Conn, Driver, Opening, Sender, Version};
use super::h3;
use super::ioclock::{IoClock, Stamped};
use super::stats::Stats;
use super::target::{Target, TargetError};
use super::tls::TargetTls;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use surge_proto::ErrorKind;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

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

/// Opens connections to one target.
pub struct Connector {
    pub target: Target,
    tls: Option<tokio_rustls::TlsConnector>,
    quic: Option<quinn::ClientConfig>,
    server_name: Option<rustls::pki_types::ServerName<'static>>,
    pub version: Version,
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

impl Connector {
    /// Connections to `target` over `version`; an https target's certificate checked as
    /// `tls` says.
    pub fn with_tls(target: Target, version: Version, tls: &TargetTls) -> Result<Self, TargetError> {
        if version == Version::Http3 && !target.https {
            return Err(TargetError::H3NeedsHttps(format!("http://{}{}", target.authority, target.base_path)));
        }
        let (mut rustls, mut quic, mut server_name) = (None, None, None);
        if target.https {
            let cfg = tls.client_config(&target.host, version)?;
            server_name = Some(
                rustls::pki_types::ServerName::try_from(target.host.clone())
                    .map_err(|source| TargetError::ServerName { url: target.host.clone(), source })?,
            );
            if version == Version::Http3 {
                quic = Some(
                    h3::client_config(cfg).map_err(|source| TargetError::Tls { url: target.host.clone(), source })?,
                );
            } else {
                rustls = Some(tokio_rustls::TlsConnector::from(Arc::new(cfg)));
            }
        }
        Ok(Self {
            target,
            tls: rustls,
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
            let (sender, gone, opening) =
                h3::connect(quic, addr, &self.target.host, self.local, guard).await.map_err(|e| match e {
                    h3::Failure::Socket(source) => ConnectError::Tcp { addr, source },
                    h3::Failure::Quic(source) => ConnectError::Quic { addr, source },
                    h3::Failure::Session(text) => ConnectError::H3(text),
                })?;
            let clock = IoClock::default();
            return Ok(Conn { sender: Sender::H3(sender), clock, opened: Some(opening), gone, driver: None });
        }
        let began = Instant::now();
        let tcp = self.tcp().await.map_err(|source| ConnectError::Tcp { addr, source })?;
        let connected = Instant::now();
        let mut opening = Opening { connecting: connected - began, tls: Duration::ZERO };
        let _ = tcp.set_nodelay(true);
        // Stamped under TLS: bytes are dated when they reach or leave the socket.
        let (tcp, clock) = Stamped::new(tcp).map_err(|source| ConnectError::Tcp { addr, source })?;
        match (&self.tls, &self.server_name) {
            (Some(tls), Some(name)) => {
                let stream = tls
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|source| ConnectError::Tls { host: self.target.host.clone(), source })?;
                opening.tls = connected.elapsed();
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
                self.handshake(stream, clock, opening, stats, h2).await
            }
            _ => self.handshake(tcp, clock, opening, stats, self.version == Version::Http2).await,
        }
    }

    async fn handshake<I>(
        &self,
        io: I,
        clock: IoClock,
        opening: Opening,
        stats: &Arc<Stats>,
        h2: bool,
    ) -> Result<Conn, ConnectError>
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
            Ok(Conn { sender: Sender::H2(send), clock, opened: Some(opening), gone, driver: None })
        } else {
            let (send, conn) = http1::Builder::new().max_buf_size(4 << 20).handshake(io).await.map_err(err)?;
            let gone = CancellationToken::new();
            let driver = Driver(Box::pin(watch(conn, guard, gone.clone())));
            Ok(Conn { sender: Sender::H1(send), clock, opened: Some(opening), gone, driver: Some(driver) })
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
