//! The coordinator's side of the agent sessions: one gRPC session stream per agent
//! (mutual TLS, or plaintext to loopback), a reader task per agent that forwards every
//! message into one event channel stamped with its arrival time, and a heartbeat task
//! that writes to every agent each second. [`session`] runs the handshake and each run
//! over them, [`collect`] is the collection phase's state machine, [`outcome`] what a
//! run produced, [`clock`] the offset estimate.

pub mod clock;
pub mod collect;
pub mod outcome;
pub mod session;

use crate::plan::TlsPaths;
use std::time::Duration;
use surge_proto::agent_client::AgentClient;
use surge_proto::{CoordinatorMsg, Heartbeat, agent_msg, coordinator_msg};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// How long opening a session may take before the agent counts as unreachable.
const SESSION_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Something one agent did.
#[derive(Debug)]
pub enum Event {
    /// A message, with the coordinator's clock (unix ns) at arrival.
    Msg { agent: usize, msg: agent_msg::Msg, recv_ns: i64 },
    /// The session stream ended (`error`: why, when it was not a clean close).
    Closed { agent: usize, error: Option<String> },
}

/// Why the fleet could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{what} {path}: {source}")]
    File { what: &'static str, path: String, source: std::io::Error },
    #[error("agent {addr}: {message}")]
    Connect { addr: String, message: String },
}

/// Open sessions to every agent.
#[derive(Debug)]
pub struct Fleet {
    pub addrs: Vec<String>,
    senders: Vec<mpsc::Sender<CoordinatorMsg>>,
    events: mpsc::Receiver<Event>,
    heartbeats: CancellationToken,
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

fn read(what: &'static str, path: &std::path::Path) -> Result<Vec<u8>, FleetError> {
    std::fs::read(path).map_err(|source| FleetError::File { what, path: path.display().to_string(), source })
}

/// The full cause chain of an error, on one line.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let c_s = c.to_string();
        if !s.contains(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        src = c.source();
    }
    s
}

/// Said when a connection failed in a way TLS refusals fail.
const TLS_HINT: &str = " (TLS refused: the agent accepts only coordinators whose certificate is signed by its \
     tls-ca, and this coordinator must trust the CA that signed the agent's certificate)";

/// Whether `e` failed in the TLS layer: a rustls error anywhere in its cause chain (as
/// such or inside an I/O error), or, on a TLS connection, the peer tearing the connection
/// down mid-handshake (how a TLS 1.3 server refuses a client certificate).
fn is_tls_failure(e: &(dyn std::error::Error + 'static), tls: bool) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
                return true;
            }
            if tls && matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted | UnexpectedEof) {
                return true;
            }
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>()
            && tls
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        cur = c.source();
    }
    false
}

fn tls_hint(failed_in_tls: bool) -> &'static str {
    if failed_in_tls { TLS_HINT } else { "" }
}

async fn open(addr: &str, tls: Option<&TlsPaths>) -> Result<Channel, FleetError> {
    let err = |message: String| FleetError::Connect { addr: addr.to_string(), message };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| err(format!("not a valid address: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(3));
    if let Some(t) = tls {
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
        let cfg = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("--tls-ca", &t.ca)?))
            .identity(Identity::from_pem(read("--tls-cert", &t.cert)?, read("--tls-key", &t.key)?))
            .domain_name(host);
        ep = ep.tls_config(cfg).map_err(|e| err(format!("TLS configuration: {}", chain(&e))))?;
    }
    ep.connect().await.map_err(|e| {
        let hint = tls_hint(is_tls_failure(&e, tls.is_some()));
        err(format!("cannot connect: {}{hint}", chain(&e)))
    })
}

impl Fleet {
    /// Connects to every agent and opens its session stream.
    pub async fn connect(addrs: &[String], tls: Option<&TlsPaths>) -> Result<Self, FleetError> {
        // Bounded: a reader waits when the coordinator falls behind, which slows that
        // agent's stream (gRPC flow control) instead of growing memory here.
        let (ev_tx, events) = mpsc::channel(8192);
        let mut senders = Vec::new();
        for (agent, addr) in addrs.iter().enumerate() {
            let channel = open(addr, tls).await?;
            let mut client =
                AgentClient::new(channel).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20);
            let (tx, rx) = mpsc::channel::<CoordinatorMsg>(1024);
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            // With TLS 1.3 a rejected client certificate surfaces only as a broken transport
            // on the first call (Unknown or Cancelled, depending on timing), or as a call
            // that never gets its response: bounded here.
            // so on a TLS session any refusal there gets the hint.
            let hint = |e: &tonic::Status| tls_hint(tls.is_some() || is_tls_failure(e, false));
            let mut inbound = match tokio::time::timeout(SESSION_OPEN_TIMEOUT, client.session(stream)).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(s)) => {
                    let m = chain(&s);
                    let h = hint(&s);
                    return Err(FleetError::Connect {
                        addr: addr.clone(),
                        message: format!("session refused: {m}{h}"),
                    });
                }
                Err(_) => {
                    let h = tls_hint(tls.is_some());
                    let message = format!("no session within {}s{h}", SESSION_OPEN_TIMEOUT.as_secs());
                    return Err(FleetError::Connect { addr: addr.clone(), message });
                }
            };
            let ev_tx = ev_tx.clone();
            let tls_used = tls.is_some();
            tokio::spawn(async move {
                let mut heard = false;
                loop {
                    match inbound.message().await {
                        Ok(Some(m)) => {
                            heard = true;
                            let Some(msg) = m.msg else { continue };
                            if ev_tx.send(Event::Msg { agent, msg, recv_ns: now_ns() }).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => {
                            let _ = ev_tx.send(Event::Closed { agent, error: None }).await;
                            return;
                        }
                        Err(s) => {
                            let m = format!("{}: {}", s.code(), s.message());
                            // With TLS 1.3 a refused client certificate can surface only
                            // as a stream that dies before its first message.
                            let hint = tls_hint((tls_used && !heard) || is_tls_failure(&s, tls_used));
                            let _ = ev_tx.send(Event::Closed { agent, error: Some(format!("{m}{hint}")) }).await;
                            return;
                        }
                    }
                }
            });
            senders.push(tx);
        }
        let heartbeats = CancellationToken::new();
        let (stop, hb) = (heartbeats.clone(), senders.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {
                        for tx in &hb {
                            let m = CoordinatorMsg { msg: Some(coordinator_msg::Msg::Heartbeat(Heartbeat { sent_unix_ns: now_ns() })) };
                            let _ = tx.try_send(m);
                        }
                    }
                }
            }
        });
        Ok(Self { addrs: addrs.to_vec(), senders, events, heartbeats })
    }

    pub fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Sends one message to one agent (a gone agent is noticed by its reader).
    pub async fn send(&self, agent: usize, msg: coordinator_msg::Msg) {
        let _ = self.senders[agent].send(CoordinatorMsg { msg: Some(msg) }).await;
    }

    /// The next event, or `None` after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Event> {
        tokio::time::timeout(timeout, self.events.recv()).await.ok().flatten()
    }

    /// Closes every session (agents see their streams end).
    pub fn close(self) {
        self.heartbeats.cancel();
    }
}
