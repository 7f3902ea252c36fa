//! `--http3`: HTTP/3 over QUIC (quinn + h3) on the UDP port of the TCP listener's number,
//! with the same routes, schedules and faults as HTTP/1.1 and HTTP/2. Its own code: the
//! echo shares none with the client it measures.
//!
//! A request's body is read whole from its stream before it is routed, so its arrival
//! is when its last bytes were read (QUIC has no kernel receive stamp per stream). Faults
//! map to what HTTP/3 has: a dropped connection (`--fault-reset-rate`) resets the stream;
//! a body cut off with an error (`--fault-truncate-rate` ends cleanly, as over TCP) resets
//! it too; `--close-after-stream` closes the whole QUIC connection once a stream has
//! been sent and has had time to reach the client (four round trips, at least 2 ms),
//! cutting any other stream on it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use tokio::sync::{Notify, watch};
use tracing::debug;

use crate::arrival::ArrivalClock;
use crate::routes;
use crate::state::{ConnCtx, State};

/// Streams one QUIC connection may carry at once (as HTTP/2's limit).
const MAX_STREAMS: u32 = 16_384;
/// Request bodies beyond this are not read (the routes answer 413 above 4 MiB).
const MAX_BODY: usize = 4 << 20;

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Binds the UDP socket `addr` and serves HTTP/3 on it until `stop` changes or closes.
pub(crate) fn bind(addr: SocketAddr, tls: &rustls::ServerConfig) -> io::Result<quinn::Endpoint> {
    let mut tls = tls.clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(io::Error::other)?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(MAX_STREAMS.into());
    transport.max_idle_timeout(Some(Duration::from_secs(120).try_into().map_err(io::Error::other)?));
    cfg.transport_config(Arc::new(transport));
    quinn::Endpoint::server(cfg, addr)
}

/// Accepts QUIC connections on `endpoint` until `stop` says the server stops.
pub(crate) async fn run(endpoint: quinn::Endpoint, state: Arc<State>, mut stop: watch::Receiver<()>) {
    loop {
        let incoming = tokio::select! {
            biased;
            _ = stop.changed() => break,
            i = endpoint.accept() => i,
        };
        let Some(incoming) = incoming else { break };
        tokio::spawn(connection(incoming, state.clone(), stop.clone()));
    }
    endpoint.close(0u32.into(), b"server stopping");
}

async fn connection(incoming: quinn::Incoming, state: Arc<State>, mut stop: watch::Receiver<()>) {
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            debug!(error = %e, "QUIC handshake failed");
            return;
        }
    };
    let peer = Some(conn.remote_address().ip());
    let mut h3conn = match h3::server::builder().build::<_, Bytes>(h3_quinn::Connection::new(conn.clone())).await {
        Ok(c) => c,
        Err(e) => {
            debug!(error = %e, "HTTP/3 session setup failed");
            return;
        }
    };
    let close_notify = state.config.close_after_stream.then(|| Arc::new(Notify::new()));
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            () = notified(close_notify.as_deref()) => {
                // The stream just finished must reach the client first: a close discards
                // what QUIC has not sent yet, which cut that stream too on a loaded host.
                tokio::time::sleep((conn.rtt() * 4).max(CLOSE_GRACE)).await;
                conn.close(0x100u32.into(), b"close-after-stream");
                break;
            }
            accepted = h3conn.accept() => match accepted {
                Ok(Some(resolver)) => {
                    let ctx = ConnCtx { close_notify: None, arrival: ArrivalClock::default(), peer };
                    let (state, close) = (state.clone(), close_notify.clone());
                    tokio::spawn(async move {
                        if let Ok((req, stream)) = resolver.resolve_request().await {
                            request(req, stream, state, ctx).await;
                            if let Some(n) = close {
                                n.notify_one();
                            }
                        }
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    debug!(error = %e, "HTTP/3 connection ended");
                    break;
                }
            },
        }
    }
}

/// `--close-after-stream`: the least time between a stream's end and the close.
const CLOSE_GRACE: Duration = Duration::from_millis(2);

async fn notified(notify: Option<&Notify>) {
    match notify {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// Serves one request stream: body in, route, response out.
async fn request(req: http::Request<()>, mut stream: Stream, state: Arc<State>, mut ctx: ConnCtx) {
    let mut body = BytesMut::new();
    loop {
        match stream.recv_data().await {
            Ok(Some(mut chunk)) => {
                if body.len() <= MAX_BODY {
                    let n = chunk.remaining();
                    body.extend_from_slice(&chunk.copy_to_bytes(n));
                }
            }
            Ok(None) => break,
            Err(e) => {
                debug!(error = %e, "request stream failed");
                return;
            }
        }
    }
    ctx.arrival = ArrivalClock::at(Instant::now());
    state.metrics.count_http3_request();
    let (parts, ()) = req.into_parts();
    let req = http::Request::from_parts(parts, Full::new(body.freeze()));
    let resp = match routes::handle(req, state, ctx).await {
        Ok(r) => r,
        // An injected reset (or a body the client broke): the stream is reset.
        Err(_) => {
            stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
            return;
        }
    };
    let (parts, mut body) = resp.into_parts();
    if stream.send_response(http::Response::from_parts(parts, ())).await.is_err() {
        return;
    }
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data()
                    && stream.send_data(data).await.is_err()
                {
                    return;
                }
            }
            Err(_) => {
                stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return;
            }
        }
    }
    let _ = stream.finish().await;
}
