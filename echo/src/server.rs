//! The accept loop and the per-connection task.
//!
//! One tokio task per connection, served by hyper-util's auto builder
//! (HTTP/1.1 keep-alive, or HTTP/2 with prior knowledge on the same port).
//! Accept errors never end the loop: per-connection ones are skipped, others
//! (EMFILE, ENOBUFS, ...) are logged and followed by a short back-off.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

use crate::arrival::Arrival;
use crate::config::EchoConfig;
use crate::counter::Counter;
use crate::routes;
use crate::state::{ConnCtx, State};
use crate::timer::Timer;

/// Pause after an accept error that is not about one connection.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Streams one HTTP/2 connection may carry at once.
const H2_MAX_STREAMS: u32 = 16_384;

/// Serve on `listener` until `shutdown` resolves.
pub(crate) async fn run(
    listener: TcpListener,
    config: EchoConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    config.validate().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // The token timer's thread stops once the server state and every
    // response still holding a handle to it are dropped.
    let counter = Counter::load(config.tokenizer.as_deref())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("--tokenizer {e}")))?;
    let state = Arc::new(State::new(config, Timer::new()?, counter));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No timer is configured: no header-read timeout, so idle keep-alive
    // connections of a paused load client stay open.
    builder.http1().keep_alive(true).header_read_timeout(None);
    builder.http2().max_concurrent_streams(H2_MAX_STREAMS);
    let builder = Arc::new(builder);
    // Dropping `stop_tx` tells every connection task to drop its connection.
    let (stop_tx, stop_rx) = watch::channel(());
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
                tokio::spawn(connection(stream, state.clone(), builder.clone(), stop_rx.clone()));
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

/// Serve one connection until it ends or the server stops.
async fn connection(
    stream: TcpStream,
    state: Arc<State>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut stop: watch::Receiver<()>,
) {
    let close_notify = state.config.close_after_stream.then(|| Arc::new(Notify::new()));
    let peer = stream.peer_addr().ok().map(|a| a.ip());
    let (stream, arrival) = match Arrival::new(stream) {
        Ok(s) => s,
        Err(e) => {
            debug!(error = %e, "cannot register the connection");
            return;
        }
    };
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
