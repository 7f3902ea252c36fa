//! The accept loop and the per-connection task.
//!
//! One tokio task per connection, served by hyper-util's auto builder
//! (HTTP/1.1 keep-alive, or HTTP/2 with prior knowledge on the same port; over TLS
//! with `--tls-self-signed`, ALPN h2 or http/1.1). With `--http3`, HTTP/3 is served
//! on the UDP port of the same number by `h3server`.
//! Accept errors never end the loop: per-connection ones are skipped, others
//! (EMFILE, ENOBUFS, ...) are logged and followed by a short back-off.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::arrival::Arrival;
use crate::config::EchoConfig;
use crate::counter::Counter;
use crate::routes;
use crate::state::{ConnCtx, State};
use crate::timer::Timer;
use crate::{h3server, tls};

/// Pause after an accept error that is not about one connection.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Streams one HTTP/2 connection may carry at once.
const H2_MAX_STREAMS: u32 = 16_384;

/// A server ready to serve: configuration checked, certificates made (and written), the
/// HTTP/3 socket bound. Nothing is accepted before [`Ready::run`].
pub struct Ready {
    listener: TcpListener,
    state: Arc<State>,
    acceptor: Option<TlsAcceptor>,
    quic: Option<quinn::Endpoint>,
}

impl Ready {
    /// The URL clients use: `https://` with `--tls-self-signed`.
    pub fn url(&self) -> io::Result<String> {
        let scheme = if self.acceptor.is_some() { "https" } else { "http" };
        Ok(format!("{scheme}://{}", self.listener.local_addr()?))
    }

    /// Whether HTTP/3 is served too (on the UDP port of the same number).
    pub fn http3(&self) -> bool {
        self.quic.is_some()
    }

    /// Serve until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<()> {
        run(self, shutdown).await
    }
}

/// Checks `config` and prepares to serve on `listener`.
pub(crate) fn prepare(listener: TcpListener, config: EchoConfig) -> io::Result<Ready> {
    config.validate().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // The token timer's thread stops once the server state and every
    // response still holding a handle to it are dropped.
    let counter = Counter::load(config.tokenizer.as_deref())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("--tokenizer {e}")))?;
    let state = Arc::new(State::new(config, Timer::new()?, counter));
    let (acceptor, quic) = match state.config.tls_self_signed {
        false => (None, None),
        true => {
            let local = listener.local_addr()?;
            let certs = tls::self_signed(local.ip()).map_err(io::Error::other)?;
            if let Some(path) = &state.config.tls_cert_out {
                std::fs::write(path, &certs.ca_pem)
                    .map_err(|e| io::Error::new(e.kind(), format!("--tls-cert-out {}: {e}", path.display())))?;
            }
            let cfg = tls::server_config(&certs, &[b"h2", b"http/1.1"]).map_err(io::Error::other)?;
            let quic = match state.config.http3 {
                false => None,
                true => Some(
                    h3server::bind(local, &cfg)
                        .map_err(|e| io::Error::new(e.kind(), format!("--http3: UDP {local}: {e}")))?,
                ),
            };
            (Some(TlsAcceptor::from(cfg)), quic)
        }
    };
    Ok(Ready { listener, state, acceptor, quic })
}

/// Serve until `shutdown` resolves.
async fn run(ready: Ready, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<()> {
    let Ready { listener, state, acceptor, quic } = ready;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No timer is configured: no header-read timeout, so idle keep-alive
    // connections of a paused load client stay open.
    builder.http1().keep_alive(true).header_read_timeout(None);
    builder.http2().max_concurrent_streams(H2_MAX_STREAMS);
    let builder = Arc::new(builder);
    // Dropping `stop_tx` tells every connection task to drop its connection.
    let (stop_tx, stop_rx) = watch::channel(());
    if let Some(endpoint) = quic {
        tokio::spawn(h3server::run(endpoint, state.clone(), stop_rx.clone()));
    }
    let mut shutdown = std::pin::pin!(shutdown);

    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                if let Err(e) = stream.set_nodelay(true) {
                    debug!(error = %e, "set TCP_NODELAY failed");
                }
                tokio::spawn(connection(stream, acceptor.clone(), state.clone(), builder.clone(), stop_rx.clone()));
            }
            Err(e) if is_per_connection(&e) => debug!(error = %e, "accept: connection failed"),
            Err(e) => {
                warn!(error = %e, "accept failed; backing off");
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
    drop(stop_tx);
    Ok(())
}

/// Errors that concern only the connection being accepted.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Serve one connection until it ends or the server stops (TLS first when configured).
async fn connection(
    stream: TcpStream,
    acceptor: Option<TlsAcceptor>,
    state: Arc<State>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    stop: watch::Receiver<()>,
) {
    let peer = stream.peer_addr().ok().map(|a| a.ip());
    let (stream, arrival) = match Arrival::new(stream) {
        Ok(s) => s,
        Err(e) => {
            debug!(error = %e, "cannot register the connection");
            return;
        }
    };
    match acceptor {
        None => serve(stream, arrival, peer, state, builder, stop).await,
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(tls) => serve(tls, arrival, peer, state, builder, stop).await,
            Err(e) => debug!(error = %e, "TLS handshake failed"),
        },
    }
}

async fn serve<I>(
    stream: I,
    arrival: crate::arrival::ArrivalClock,
    peer: Option<std::net::IpAddr>,
    state: Arc<State>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut stop: watch::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let close_notify = state.config.close_after_stream.then(|| Arc::new(Notify::new()));
    let service = {
        let ctx = ConnCtx { close_notify: close_notify.clone(), arrival, peer };
        service_fn(move |req| routes::handle(req, state.clone(), ctx.clone()))
    };
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed() => return,
            () = notified(close_notify.as_deref()), if !closing => {
                // Close after the response in flight (close-after-stream).
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn notified(notify: Option<&Notify>) {
    match notify {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}
