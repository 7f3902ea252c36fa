//! The coordinator's side of the agent sessions: one gRPC session stream per agent
//! (mutual TLS, or plaintext to loopback), or in-process channels to the embedded agent
//! ([`local`]), a link task per agent that forwards every
//! message into one event channel stamped with its arrival time, sends heartbeats every
//! 100 ms, and resumes the session on a fresh connection when the old one falls silent
//! or breaks (D2). [`session`] runs the handshake and each run
//! over them, [`collect`] is the collection phase's state machine, [`outcome`] what a
//! run produced, [`incoming`] how an agent's messages are read (a batch's rows decoded
//! into their global rows, D99), [`clock`] the offset estimate.

pub mod check;
pub mod clock;
pub mod collect;
#[cfg(test)]
mod fake;
pub mod heard;
pub mod incoming;
mod link;
pub mod local;
mod open;
pub mod outcome;
mod outgoing;
pub mod session;
pub mod wire;

use crate::plan::{ConnectWait, TlsPaths};
use heard::Heard;
use link::{Link, RESUME_CONNECT_TIMEOUT};
use open::{Opened, open_all};
use std::sync::Arc;
use std::time::Duration;
use surge_proto::{CoordinatorMsg, agent_msg, coordinator_msg};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// The embedded agent's name where a remote agent's address goes.
pub const EMBEDDED: &str = "embedded";

/// Something one agent did.
#[derive(Debug)]
pub enum Event {
    /// A message, with the coordinator's clock (unix ns) at arrival.
    Msg { agent: usize, msg: agent_msg::Msg, recv_ns: i64 },
    /// A batch of rows, decoded into their global rows (D99).
    Batch { agent: usize, batch: incoming::RowBatch },
    /// The session stream ended (`error`: why, when it was not a clean close) and could
    /// not be resumed.
    Closed { agent: usize, error: Option<String> },
    /// The session went on over a fresh connection after `after` of silence; the agent
    /// resends what was not acknowledged.
    Resumed { agent: usize, after: Duration },
    /// A fresh connection to the silent agent is up and carries a resume (D72): the path
    /// is back, so its silence is not yet a loss.
    Reattaching { agent: usize },
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
    /// Agents given but not reached within the connect timeout (the run went on with
    /// `--min-agents`), and how long the fleet waited for late agents.
    pub missing: Vec<String>,
    pub waited: Duration,
    senders: Vec<mpsc::Sender<CoordinatorMsg>>,
    events: mpsc::Receiver<Event>,
    /// When each agent was last heard; its heartbeats are not events (D79).
    heard: Arc<Heard>,
    /// Cancelled to end every agent's link (and with it its stream).
    links: CancellationToken,
    /// The link tasks, so closing can wait for each to say Bye.
    tasks: tokio_util::task::TaskTracker,
}

pub use crate::clock::now_ns;

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
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        let io = c.downcast_ref::<std::io::Error>();
        if io.and_then(std::io::Error::get_ref).is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
            return true;
        }
        if tls && broke(c) {
            return true;
        }
        cur = c.source();
    }
    false
}

/// Whether `c` itself says the connection broke: reset, closed, or ended mid-message.
fn broke(c: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    c.downcast_ref::<std::io::Error>()
        .is_some_and(|io| matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted | UnexpectedEof))
        || c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_canceled() || h.is_closed())
}

/// Whether the connection broke anywhere in `e`'s cause chain.
fn dropped(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |c| c.source()).any(broke)
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

impl Fleet {
    /// Connects to every agent and opens its session stream (its first message, the
    /// Hello, is sent here; the handshake gathers the replies). An agent that refuses the
    /// connection, drops it before its session opens (D87) or does not answer is tried
    /// again with backoff until `wait.timeout`
    /// (`waiting` hears which agents are still awaited, about every 5 s); past it, the run
    /// goes on with those reached if they are at least `wait.min_agents`, else fails naming
    /// the missing ones. Any other failure (TLS, a refused session) fails at once.
    pub async fn connect(
        addrs: &[String],
        tls: Option<&TlsPaths>,
        wait: ConnectWait,
        waiting: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Self, FleetError> {
        let started = std::time::Instant::now();
        let until = started + wait.timeout;
        let mut channels: Vec<Option<tonic::transport::Channel>> = vec![None; addrs.len()];
        // Agents left out past the timeout (`--min-agents`): not dialed again (no channel).
        let mut left_out = vec![false; addrs.len()];
        // Agents whose connection broke once before their session opened (D87).
        let mut broke_before = vec![false; addrs.len()];
        let mut last_error: Vec<String> = vec![String::new(); addrs.len()];
        let mut backoff = Duration::from_millis(100);
        let mut next_notice = started + Duration::from_secs(1);
        let mut retried = false;
        let secure = tls.is_some();
        // Where a session is resumed, while it opens (D91) and after (D2).
        let resume_eps =
            addrs.iter().map(|a| endpoint(a, tls, RESUME_CONNECT_TIMEOUT)).collect::<Result<Vec<_>, _>>()?;
        // Whether `reached` agents may go on past the timeout (`--min-agents`).
        let enough = |reached: usize| wait.min_agents.is_some_and(|k| reached >= k.max(1));
        let sessions = loop {
            let mut set = tokio::task::JoinSet::new();
            for (i, addr) in addrs.iter().enumerate().filter(|(i, _)| channels[*i].is_none() && !left_out[*i]) {
                let ep = endpoint(addr, tls, Duration::from_secs(5))?;
                set.spawn(async move { (i, ep.connect().await) });
            }
            while let Some(joined) = set.join_next().await {
                let Ok((i, res)) = joined else { continue };
                match res {
                    Ok(ch) => channels[i] = Some(ch),
                    Err(e) if is_tls_failure(&e, secure) => {
                        let message = format!("cannot connect: {}{TLS_HINT}", chain(&e));
                        return Err(FleetError::Connect { addr: addrs[i].clone(), message });
                    }
                    Err(e) => last_error[i] = chain(&e),
                }
            }
            let pending: Vec<usize> = (0..addrs.len()).filter(|&i| channels[i].is_none() && !left_out[i]).collect();
            // Every agent reached has a channel; one left out has none.
            let reached = |channels: &[Option<_>]| channels.iter().filter(|c| c.is_some()).count();
            let now = std::time::Instant::now();
            if !pending.is_empty() && now >= until {
                let reached = reached(&channels);
                let names = pending.iter().map(|&i| format!("{} ({})", addrs[i], last_error[i])).collect::<Vec<_>>();
                if !enough(reached) {
                    let message = format!(
                        "not reachable within --agent-connect-timeout {}s: cannot connect: {}",
                        wait.timeout.as_secs_f64(),
                        names.join(", ")
                    );
                    return Err(FleetError::Connect {
                        addr: pending.iter().map(|&i| addrs[i].clone()).collect::<Vec<_>>().join(", "),
                        message,
                    });
                }
                waiting(&format!(
                    "going on with {reached} of {} agents (--min-agents); not reached: {}",
                    addrs.len(),
                    names.join(", ")
                ));
                pending.iter().for_each(|&i| left_out[i] = true);
            }
            if pending.is_empty() || now >= until {
                let dropped = match open_all(&channels, &resume_eps, addrs, secure).await? {
                    Ok(sessions) => break sessions,
                    Err(dropped) => dropped,
                };
                // Dialed again as agents not listening yet; past the timeout, not waited for.
                // A connection that breaks twice is not an agent restarting: it is a server
                // that accepts and closes, or no agent.
                for (i, why, broke) in &dropped {
                    if *broke && broke_before[*i] && now < until {
                        let message = format!("session refused: {why}");
                        return Err(FleetError::Connect { addr: addrs[*i].clone(), message });
                    }
                    broke_before[*i] |= *broke;
                    (channels[*i], last_error[*i], left_out[*i]) = (None, why.clone(), now >= until);
                }
                if now >= until {
                    let reached = reached(&channels);
                    let gone = dropped.iter().map(|(i, _, _)| addrs[*i].clone()).collect::<Vec<_>>();
                    let names = dropped.iter().map(|(i, e, _)| format!("{} ({e})", addrs[*i])).collect::<Vec<_>>();
                    let said = format!(
                        "dropped the connection before its session opened, past --agent-connect-timeout {}s: {}",
                        wait.timeout.as_secs_f64(),
                        names.join(", ")
                    );
                    if !enough(reached) {
                        return Err(FleetError::Connect { addr: gone.join(", "), message: said });
                    }
                    waiting(&format!("going on with {reached} of {} agents (--min-agents); {said}", addrs.len()));
                }
            }
            let now = std::time::Instant::now();
            if now >= next_notice && now < until && !pending.is_empty() {
                let names = pending.iter().map(|&i| addrs[i].as_str()).collect::<Vec<_>>().join(", ");
                let left = until.saturating_duration_since(now).as_secs();
                waiting(&format!(
                    "waiting for agent(s) {names} (not reachable yet; {left}s left of --agent-connect-timeout)"
                ));
                next_notice = now + Duration::from_secs(5);
            }
            retried = true;
            tokio::time::sleep(backoff.min(until.saturating_duration_since(now))).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        };
        let waited = if retried { started.elapsed() } else { Duration::ZERO };
        let missing: Vec<String> = addrs.iter().zip(&left_out).filter(|(_, l)| **l).map(|(a, _)| a.clone()).collect();
        let reached: Vec<(String, Opened, Endpoint)> =
            addrs.iter().cloned().zip(sessions).zip(resume_eps).filter_map(|((a, c), ep)| Some((a, c?, ep))).collect();
        // Bounded: a link waits when the coordinator falls behind, which slows that
        // agent's stream (gRPC flow control) instead of growing memory here.
        let (ev_tx, events) = mpsc::channel(8192);
        let mut senders = Vec::new();
        let stop = CancellationToken::new();
        let tasks = tokio_util::task::TaskTracker::new();
        let addrs: Vec<String> = reached.iter().map(|(a, _, _)| a.clone()).collect();
        let heard = Arc::new(Heard::new(addrs.len()));
        for (agent, (_, Opened { stream, reply, resumed }, ep)) in reached.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<CoordinatorMsg>(1024);
            let link = Link {
                agent,
                ep,
                tls: tls.is_some(),
                version: reply.protocol_version,
                opened: reply,
                resumed,
                rx,
                events: ev_tx.clone(),
                heard: heard.clone(),
                stop: stop.clone(),
            };
            tasks.spawn(link.run(stream));
            senders.push(tx);
        }
        tasks.close();
        Ok(Self { addrs, missing, waited, senders, events, heard, links: stop, tasks })
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

    /// When each agent was last heard (its heartbeats are not events).
    pub fn heard(&self) -> &Heard {
        &self.heard
    }

    /// The next event, or `None` after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Event> {
        tokio::time::timeout(timeout, self.events.recv()).await.ok().flatten()
    }

    /// Closes every session (agents see their streams end).
    pub fn close(self) {
        self.links.cancel();
    }

    /// Closes every link and waits (at most `limit`) until each has said Bye.
    pub async fn close_and_wait(self, limit: std::time::Duration) {
        self.links.cancel();
        let _ = tokio::time::timeout(limit, self.tasks.wait()).await;
    }
}
