//! The coordinator's side of the agent sessions: one gRPC session stream per agent
//! (mutual TLS, or plaintext to loopback), a link task per agent that forwards every
//! message into one event channel stamped with its arrival time, sends heartbeats every
//! 100 ms, and resumes the session on a fresh connection when the old one falls silent
//! or breaks (D2). [`session`] runs the handshake and each run
//! over them, [`collect`] is the collection phase's state machine, [`outcome`] what a
//! run produced, [`clock`] the offset estimate.

pub mod clock;
pub mod collect;
pub mod outcome;
pub mod session;

use crate::plan::TlsPaths;
use std::time::Duration;
use surge_proto::agent_client::AgentClient;
use surge_proto::{AgentMsg, CoordinatorMsg, Heartbeat, Hello, PROTOCOL_VERSION, agent_msg, coordinator_msg};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// How long opening a session may take before the agent counts as unreachable.
const SESSION_OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Liveness both ways (D2).
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Silence after which the coordinator dials a fresh connection to resume (D2).
const REDIAL_AFTER: Duration = Duration::from_millis(500);
/// TCP connect timeout of a resume attempt, and the whole attempt's bound.
const RESUME_CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
const RESUME_ATTEMPT: Duration = Duration::from_millis(500);
/// Past this silence the agent's lease (3 s) has run out: no more attempts.
const RESUME_WINDOW: Duration = Duration::from_millis(3500);

/// Something one agent did.
#[derive(Debug)]
pub enum Event {
    /// A message, with the coordinator's clock (unix ns) at arrival.
    Msg { agent: usize, msg: agent_msg::Msg, recv_ns: i64 },
    /// The session stream ended (`error`: why, when it was not a clean close) and could
    /// not be resumed.
    Closed { agent: usize, error: Option<String> },
    /// The session went on over a fresh connection after `after` of silence; the agent
    /// resends what was not acknowledged.
    Resumed { agent: usize, after: Duration },
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
    /// Cancelled to end every agent's link (and with it its stream).
    links: CancellationToken,
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

/// The agent's gRPC endpoint: TLS with this coordinator's identity, or plaintext.
fn endpoint(addr: &str, tls: Option<&TlsPaths>, connect_timeout: Duration) -> Result<Endpoint, FleetError> {
    let err = |message: String| FleetError::Connect { addr: addr.to_string(), message };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| err(format!("not a valid address: {e}")))?
        .connect_timeout(connect_timeout)
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
    Ok(ep)
}

fn client(channel: Channel) -> AgentClient<Channel> {
    AgentClient::new(channel).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

fn hello(resume_session_id: u64) -> CoordinatorMsg {
    CoordinatorMsg {
        msg: Some(coordinator_msg::Msg::Hello(Hello {
            protocol_version: PROTOCOL_VERSION,
            coordinator_version: env!("CARGO_PKG_VERSION").into(),
            lease_ms: 0,
            resume_session_id,
        })),
    }
}

/// One stream of a session: what goes to the agent, what comes back.
struct Stream {
    tx: mpsc::UnboundedSender<CoordinatorMsg>,
    inbound: Streaming<AgentMsg>,
}

/// Opens a session stream on `channel`; its first message is `first` (a Hello).
async fn open_stream(channel: Channel, first: CoordinatorMsg) -> Result<Stream, tonic::Status> {
    let (tx, rx) = mpsc::unbounded_channel();
    // The agent answers the stream once it has read the Hello.
    let _ = tx.send(first);
    let inbound = client(channel).session(UnboundedReceiverStream::new(rx)).await?.into_inner();
    Ok(Stream { tx, inbound })
}

/// One attempt to resume session `id` on a fresh connection (D2): connect, Hello with
/// the id, and the agent's HelloReply saying it resumed.
async fn resume(ep: Endpoint, id: u64) -> Result<Stream, ResumeError> {
    let attempt = async {
        let channel = ep.connect().await.map_err(|e| {
            // Nobody listens: the agent process is gone, and its session with it.
            if refused(&e) { ResumeError::Gone(chain(&e)) } else { ResumeError::Retry(chain(&e)) }
        })?;
        let mut s = open_stream(channel, hello(id)).await.map_err(|s| match s.code() {
            tonic::Code::NotFound => ResumeError::Gone(s.message().to_string()),
            _ => ResumeError::Retry(format!("{}: {}", s.code(), s.message())),
        })?;
        match s.inbound.message().await {
            Ok(Some(AgentMsg { msg: Some(agent_msg::Msg::Hello(h)) })) if h.resumed => Ok(s),
            other => Err(ResumeError::Retry(format!("unexpected answer to a resume: {other:?}"))),
        }
    };
    tokio::time::timeout(RESUME_ATTEMPT, attempt).await.map_err(|_| ResumeError::Retry("timed out".into()))?
}

/// Whether `e` is a refused TCP connection.
fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        cur = c.source();
    }
    false
}

#[derive(Debug)]
enum ResumeError {
    /// Worth another attempt (unreachable, timed out).
    Retry(String),
    /// The agent has no such session any more.
    Gone(String),
}

/// A session's link to one agent: forwards the fleet's messages to the current stream,
/// the agent's messages to the fleet's events, sends a heartbeat every 100 ms, and when
/// the agent falls silent for [`REDIAL_AFTER`] or the stream breaks, resumes the session
/// on a fresh connection, one attempt at a time (two would race to attach), 100 ms
/// apart, until the agent's lease has surely run out (D2). Ends the session with Bye.
struct Link {
    agent: usize,
    ep: Endpoint,
    tls: bool,
    rx: mpsc::Receiver<CoordinatorMsg>,
    events: mpsc::Sender<Event>,
    stop: CancellationToken,
}

impl Link {
    async fn run(mut self, mut cur: Stream) {
        let agent = self.agent;
        let (mut session_id, mut heard, mut broken) = (0u64, false, false);
        let mut last_heard = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut attempts: JoinSet<Result<Stream, ResumeError>> = JoinSet::new();
        let mut last_error = String::new();
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => {
                    let _ = cur.tx.send(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Bye(surge_proto::Bye {})) });
                    return;
                }
                m = self.rx.recv() => match m {
                    Some(m) => { let _ = cur.tx.send(m); }
                    None => return,
                },
                m = cur.inbound.message(), if !broken => match m {
                    Ok(Some(m)) => {
                        heard = true;
                        last_heard = tokio::time::Instant::now();
                        let Some(msg) = m.msg else { continue };
                        if let agent_msg::Msg::Hello(h) = &msg {
                            session_id = h.session_id;
                        }
                        if self.events.send(Event::Msg { agent, msg, recv_ns: now_ns() }).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) if session_id == 0 => {
                        let _ = self.events.send(Event::Closed { agent, error: None }).await;
                        return;
                    }
                    // The agent closes a session it ends; a resume attempt says whether
                    // it did (NotFound) or the connection did.
                    Ok(None) => {
                        broken = true;
                        last_error = "the stream ended".into();
                    }
                    Err(s) => {
                        let m = format!("{}: {}", s.code(), s.message());
                        if session_id == 0 {
                            // With TLS 1.3 a refused client certificate can surface only
                            // as a stream that dies before its first message.
                            let hint = tls_hint((self.tls && !heard) || is_tls_failure(&s, self.tls));
                            let _ = self.events.send(Event::Closed { agent, error: Some(format!("{m}{hint}")) }).await;
                            return;
                        }
                        broken = true;
                        last_error = m;
                    }
                },
                _ = tick.tick() => {
                    let _ = cur.tx.send(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Heartbeat(Heartbeat { sent_unix_ns: now_ns() })) });
                    let silent = last_heard.elapsed();
                    if session_id == 0 || (silent < REDIAL_AFTER && !broken) {
                        continue;
                    }
                    if silent > RESUME_WINDOW {
                        let error = format!("no answer for {:.1}s and no resume ({last_error})", silent.as_secs_f64());
                        let _ = self.events.send(Event::Closed { agent, error: Some(error) }).await;
                        return;
                    }
                    if attempts.is_empty() {
                        attempts.spawn(resume(self.ep.clone(), session_id));
                    }
                },
                Some(res) = attempts.join_next(), if !attempts.is_empty() => match res {
                    Ok(Ok(fresh)) => {
                        let after = last_heard.elapsed();
                        cur = fresh;
                        broken = false;
                        last_heard = tokio::time::Instant::now();
                        if self.events.send(Event::Resumed { agent, after }).await.is_err() {
                            return;
                        }
                    }
                    Ok(Err(ResumeError::Gone(m))) => {
                        let error = format!("the agent ended the session ({m})");
                        let _ = self.events.send(Event::Closed { agent, error: Some(error) }).await;
                        return;
                    }
                    Ok(Err(ResumeError::Retry(m))) => last_error = m,
                    Err(_) => {}
                },
            }
        }
    }
}

impl Fleet {
    /// Connects to every agent and opens its session stream (its first message, the
    /// Hello, is sent here; the handshake gathers the replies).
    pub async fn connect(addrs: &[String], tls: Option<&TlsPaths>) -> Result<Self, FleetError> {
        // Bounded: a link waits when the coordinator falls behind, which slows that
        // agent's stream (gRPC flow control) instead of growing memory here.
        let (ev_tx, events) = mpsc::channel(8192);
        let mut senders = Vec::new();
        let stop = CancellationToken::new();
        for (agent, addr) in addrs.iter().enumerate() {
            let channel = endpoint(addr, tls, Duration::from_secs(5))?.connect().await.map_err(|e| {
                let hint = tls_hint(is_tls_failure(&e, tls.is_some()));
                FleetError::Connect { addr: addr.clone(), message: format!("cannot connect: {}{hint}", chain(&e)) }
            })?;
            // With TLS 1.3 a rejected client certificate surfaces only as a broken transport
            // on the first call (Unknown or Cancelled, depending on timing), or as a call
            // that never gets its response: bounded here, and on a TLS session any refusal
            // there gets the hint.
            let hint = |e: &tonic::Status| tls_hint(tls.is_some() || is_tls_failure(e, false));
            let stream = match tokio::time::timeout(SESSION_OPEN_TIMEOUT, open_stream(channel, hello(0))).await {
                Ok(Ok(s)) => s,
                Ok(Err(s)) => {
                    let (m, h) = (chain(&s), hint(&s));
                    return Err(FleetError::Connect { addr: addr.clone(), message: format!("session refused: {m}{h}") });
                }
                Err(_) => {
                    let h = tls_hint(tls.is_some());
                    let message = format!("no session within {}s{h}", SESSION_OPEN_TIMEOUT.as_secs());
                    return Err(FleetError::Connect { addr: addr.clone(), message });
                }
            };
            let (tx, rx) = mpsc::channel::<CoordinatorMsg>(1024);
            let link = Link {
                agent,
                ep: endpoint(addr, tls, RESUME_CONNECT_TIMEOUT)?,
                tls: tls.is_some(),
                rx,
                events: ev_tx.clone(),
                stop: stop.clone(),
            };
            tokio::spawn(link.run(stream));
            senders.push(tx);
        }
        Ok(Self { addrs: addrs.to_vec(), senders, events, links: stop })
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
        self.links.cancel();
    }
}
