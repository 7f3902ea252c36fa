//! The gRPC `Agent` service: one [`Session`] task per coordinator stream.
//!
//! Each input (a coordinator message, the heartbeat tick, the batch-flush tick, the end
//! of a prepare or a run, the daemon's shutdown) becomes one step of the session loop.
//! Rules enforced here (DESIGN.md, protocol): the protocol version must match; targets
//! outside the allowlist are refused; heartbeats go out every second; a coordinator
//! silent for the lease stops all load at once (dead-man switch) and the session is
//! dropped, while the agent keeps serving new sessions; every Start carries a deadline
//! the engine enforces; rows leave in batches (100 ms or 1024 rows) with sequence
//! numbers, kept until acknowledged.

use crate::allowlist::Allowlist;
use crate::cpu::{self, CpuMeter};
use crate::engine::{self, Control, Prepared, Report, stats::Stats};
use crate::sink::Sink;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use surge_proto::{
    AgentMsg, ClockPong, CoordinatorMsg, Done, ErrorCode, Health, Heartbeat, HelloReply, PROTOCOL_VERSION, Ready, Row,
    SampleBatch, agent_msg, coordinator_msg,
};
use tokio::sync::{Notify, mpsc};
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// Rows per batch at most, and the longest a row waits before its batch leaves.
const BATCH_ROWS: usize = 1024;
const BATCH_INTERVAL: Duration = Duration::from_millis(100);
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// What every session of this agent obeys.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub max_in_flight: u32,
    pub lease: Duration,
    pub allowed: Allowlist,
}

/// The tonic service.
#[derive(Debug, Clone)]
pub struct AgentService {
    settings: Arc<AgentSettings>,
    /// Cancelled on SIGTERM: sessions stop load, flush and close.
    shutdown: CancellationToken,
}

impl AgentService {
    pub fn new(settings: AgentSettings, shutdown: CancellationToken) -> Self {
        Self { settings: Arc::new(settings), shutdown }
    }

    /// The tonic server wrapper.
    pub fn into_server(self) -> surge_proto::agent_server::AgentServer<Self> {
        surge_proto::agent_server::AgentServer::new(self)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }
}

type MsgStream = Pin<Box<dyn Stream<Item = Result<AgentMsg, Status>> + Send>>;

#[tonic::async_trait]
impl surge_proto::agent_server::Agent for AgentService {
    type SessionStream = MsgStream;

    async fn session(
        &self,
        request: Request<Streaming<CoordinatorMsg>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let peer = request.remote_addr().map_or_else(|| "in-process".to_string(), |a| a.to_string());
        let inbound = request.into_inner();
        // Bounded: a coordinator that stops reading slows the batch flushes, which then
        // hold rows in memory; the run itself never waits on it.
        let (tx, rx) = mpsc::channel(1024);
        let session = Session::new(Arc::clone(&self.settings), self.shutdown.clone(), tx, peer);
        tokio::spawn(session.run(inbound));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// Collects rows for the session's batch flusher.
#[derive(Debug, Default)]
struct BatchSink {
    rows: Mutex<Vec<Row>>,
    full: Notify,
}

impl Sink for BatchSink {
    fn record(&self, row: Row) {
        let mut rows = self.rows.lock().expect("sink lock");
        rows.push(row);
        if rows.len() >= BATCH_ROWS {
            self.full.notify_one();
        }
    }
}

impl BatchSink {
    fn drain(&self) -> Vec<Row> {
        std::mem::take(&mut *self.rows.lock().expect("sink lock"))
    }
}

/// A run in progress.
struct Running {
    run_id: u64,
    stop: CancellationToken,
    stats: Arc<Stats>,
    sink: Arc<BatchSink>,
    cpu_at_start: Duration,
    /// Agent clock (unix ns) of the instant rows are relative to.
    started_unix_ns: i64,
}

enum Internal {
    Prepared(u64, Result<Prepared, String>),
    Finished(Report),
}

/// The state of one coordinator session.
struct Session {
    settings: Arc<AgentSettings>,
    shutdown: CancellationToken,
    tx: mpsc::Sender<Result<AgentMsg, Status>>,
    peer: String,
    lease: Duration,
    last_heard: Instant,
    prepared: Option<(u64, Prepared)>,
    running: Option<Running>,
    next_seq: u64,
    unacked: BTreeMap<u64, SampleBatch>,
    cpu: CpuMeter,
    internal_tx: mpsc::Sender<Internal>,
    internal_rx: Option<mpsc::Receiver<Internal>>,
    /// Set when the session must end after the current run is flushed.
    closing: Option<&'static str>,
}

fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

fn now_ns() -> i64 {
    unix_ns(SystemTime::now())
}

/// The local instant at which the agent clock reads `unix_ns`.
fn instant_at(ns: i64) -> Instant {
    let delta = ns - now_ns();
    if delta > 0 { Instant::now() + Duration::from_nanos(delta as u64) } else { Instant::now() }
}

fn msg(m: agent_msg::Msg) -> Result<AgentMsg, Status> {
    Ok(AgentMsg { msg: Some(m) })
}

fn error(code: ErrorCode, message: String) -> agent_msg::Msg {
    agent_msg::Msg::Error(surge_proto::Error { code: code as i32, message })
}

impl Session {
    fn new(
        settings: Arc<AgentSettings>,
        shutdown: CancellationToken,
        tx: mpsc::Sender<Result<AgentMsg, Status>>,
        peer: String,
    ) -> Self {
        let (internal_tx, internal_rx) = mpsc::channel(4);
        Self {
            lease: settings.lease,
            settings,
            shutdown,
            tx,
            peer,
            last_heard: Instant::now(),
            prepared: None,
            running: None,
            next_seq: 0,
            unacked: BTreeMap::new(),
            cpu: CpuMeter::default(),
            internal_tx,
            internal_rx: Some(internal_rx),
            closing: None,
        }
    }

    async fn send(&self, m: agent_msg::Msg) {
        // A closed channel means the coordinator is gone; the lease check ends the session.
        let _ = self.tx.send(msg(m)).await;
    }

    async fn run(mut self, mut inbound: Streaming<CoordinatorMsg>) {
        tracing::info!(peer = %self.peer, "session opened");
        let mut internal_rx = self.internal_rx.take().expect("set in new");
        let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL);
        let mut flush = tokio::time::interval(BATCH_INTERVAL);
        let mut inbound_open = true;
        let end = loop {
            let sink = self.running.as_ref().map(|r| Arc::clone(&r.sink));
            let full = async {
                match &sink {
                    Some(s) => s.full.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = inbound.message(), if inbound_open => match m {
                    Ok(Some(m)) => {
                        self.last_heard = Instant::now();
                        if let Some(end) = self.on_message(m).await {
                            break end;
                        }
                    }
                    Ok(None) | Err(_) => {
                        // The coordinator is gone: stop load at once (dead-man switch).
                        inbound_open = false;
                        self.abandon("coordinator closed the session");
                        if self.running.is_none() { break "coordinator closed the session"; }
                    }
                },
                Some(ev) = internal_rx.recv() => {
                    if let Some(end) = self.on_internal(ev).await {
                        break end;
                    }
                }
                _ = heartbeat.tick() => {
                    if self.last_heard.elapsed() > self.lease {
                        tracing::warn!(peer = %self.peer, lease_ms = self.lease.as_millis() as u64, "lease expired: stopping load");
                        self.abandon("lease expired");
                        if self.running.is_none() { break "lease expired"; }
                    }
                    self.send(agent_msg::Msg::Heartbeat(Heartbeat { sent_unix_ns: now_ns() })).await;
                    self.send_health().await;
                }
                _ = flush.tick() => self.flush().await,
                _ = full => self.flush().await,
                _ = self.shutdown.cancelled(), if self.closing.is_none() => {
                    self.closing = Some("agent shutting down");
                    if let Some(r) = &self.running { r.stop.cancel(); } else { break "agent shutting down"; }
                }
            }
        };
        tracing::info!(peer = %self.peer, reason = end, "session closed");
    }

    /// Stops load because the coordinator is unreachable; the session ends after the run.
    fn abandon(&mut self, why: &'static str) {
        self.closing.get_or_insert(why);
        if let Some(r) = &self.running {
            r.stop.cancel();
        }
    }

    async fn on_message(&mut self, m: CoordinatorMsg) -> Option<&'static str> {
        use coordinator_msg::Msg;
        let received = now_ns();
        match m.msg? {
            Msg::Hello(h) => {
                if h.protocol_version != PROTOCOL_VERSION {
                    let text = format!(
                        "protocol version mismatch: coordinator speaks version {}, this agent speaks version {}",
                        h.protocol_version, PROTOCOL_VERSION
                    );
                    tracing::warn!(peer = %self.peer, "{text}");
                    self.send(error(ErrorCode::ProtocolMismatch, text)).await;
                    return Some("protocol mismatch");
                }
                if h.lease_ms > 0 {
                    self.lease = Duration::from_millis(u64::from(h.lease_ms));
                }
                self.send(agent_msg::Msg::Hello(HelloReply {
                    protocol_version: PROTOCOL_VERSION,
                    agent_version: env!("CARGO_PKG_VERSION").to_string(),
                    cores: cpu::cores(),
                    max_in_flight: self.settings.max_in_flight,
                    allowed_targets: self.settings.allowed.raw().to_vec(),
                    hostname: hostname(),
                }))
                .await;
            }
            Msg::Ping(p) => {
                self.send(agent_msg::Msg::Pong(ClockPong {
                    seq: p.seq,
                    t1_unix_ns: p.t1_unix_ns,
                    t2_unix_ns: received,
                    t3_unix_ns: now_ns(),
                }))
                .await;
            }
            Msg::Prepare(p) => self.on_prepare(p).await,
            Msg::Start(s) => self.on_start(s).await,
            Msg::Stop(s) => {
                if let Some(r) = self.running.as_ref().filter(|r| r.run_id == s.run_id) {
                    tracing::info!(reason = %s.reason, "stop requested");
                    r.stop.cancel();
                }
            }
            Msg::Heartbeat(_) => {}
            Msg::Ack(a) => {
                self.unacked.remove(&a.seq);
            }
        }
        None
    }

    async fn on_prepare(&mut self, p: surge_proto::Prepare) {
        if self.running.is_some() {
            self.send(error(ErrorCode::Busy, "a run is already in progress on this session".into())).await;
            return;
        }
        let Some(mut w) = p.workload else {
            self.send(error(ErrorCode::BadRequest, "Prepare without a workload".into())).await;
            return;
        };
        if let Err(text) = self.check_target(&w.base_url).await {
            self.send(error(ErrorCode::TargetNotAllowed, text)).await;
            return;
        }
        let cap = self.settings.max_in_flight;
        if w.max_concurrency > cap {
            let text =
                format!("requested max concurrency {} exceeds this agent's max-in-flight {cap}", w.max_concurrency);
            self.send(error(ErrorCode::OverCapacity, text)).await;
            return;
        }
        if w.max_concurrency == 0 {
            w.max_concurrency = cap;
        }
        let tx = self.internal_tx.clone();
        let run_id = p.run_id;
        tokio::spawn(async move {
            let res = engine::prepare(w).await.map_err(|e| e.to_string());
            let _ = tx.send(Internal::Prepared(run_id, res)).await;
        });
    }

    async fn check_target(&self, base_url: &str) -> Result<(), String> {
        let uri: http::Uri = base_url.parse().map_err(|e| format!("base URL {base_url:?}: {e}"))?;
        let host = uri.host().ok_or_else(|| format!("base URL {base_url:?} has no host"))?;
        let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<std::net::IpAddr> = match tokio::net::lookup_host((bare, port)).await {
            Ok(it) => it.map(|a| a.ip()).collect(),
            Err(_) => Vec::new(),
        };
        if self.settings.allowed.allows(host, port, &addrs) {
            Ok(())
        } else {
            Err(format!(
                "target {host}:{port} is not in this agent's allowlist ({})",
                if self.settings.allowed.raw().is_empty() {
                    "empty: set allowed-targets".to_string()
                } else {
                    self.settings.allowed.raw().join(", ")
                }
            ))
        }
    }

    async fn on_start(&mut self, s: surge_proto::Start) {
        let Some((run_id, prepared)) = self.prepared.take().filter(|(id, _)| *id == s.run_id) else {
            self.send(error(ErrorCode::BadRequest, format!("Start for run {} that is not prepared", s.run_id))).await;
            return;
        };
        let stop = CancellationToken::new();
        let sink = Arc::new(BatchSink::default());
        let ctl = Control {
            start_at: instant_at(s.start_at_unix_ns),
            deadline: instant_at(s.deadline_unix_ns),
            stop: stop.clone(),
        };
        self.running = Some(Running {
            run_id,
            stop,
            stats: prepared.stats(),
            sink: Arc::clone(&sink),
            cpu_at_start: cpu::process_cpu_time(),
            started_unix_ns: s.start_at_unix_ns,
        });
        let tx = self.internal_tx.clone();
        let sink: Arc<dyn Sink> = sink;
        tokio::spawn(async move {
            let report = engine::run(prepared, sink, ctl).await;
            let _ = tx.send(Internal::Finished(report)).await;
        });
    }

    async fn on_internal(&mut self, ev: Internal) -> Option<&'static str> {
        match ev {
            Internal::Prepared(run_id, Ok(p)) => {
                let ready =
                    Ready { run_id, connections_open: p.connections_open, warmups_completed: p.warmups_completed };
                self.prepared = Some((run_id, p));
                self.send(agent_msg::Msg::Ready(ready)).await;
            }
            Internal::Prepared(_, Err(text)) => {
                self.send(error(ErrorCode::BadRequest, text)).await;
            }
            Internal::Finished(report) => {
                let running = self.running.take()?;
                self.flush_rows(running.run_id, running.started_unix_ns, running.sink.drain()).await;
                let stop_reason = match self.closing {
                    Some("agent shutting down") => "signal",
                    Some("lease expired") => "lease",
                    Some(_) => "coordinator gone",
                    None => report.stop_reason.as_str(),
                };
                let done = Done {
                    run_id: running.run_id,
                    batches: self.next_seq,
                    completed: report.completed,
                    failed: report.failed,
                    started_unix_ns: running.started_unix_ns,
                    cpu_seconds: cpu::process_cpu_time().saturating_sub(running.cpu_at_start).as_secs_f64(),
                    wall_seconds: report.wall.as_secs_f64(),
                    lag_p50_us: report.lag.p50_us,
                    lag_p99_us: report.lag.p99_us,
                    lag_max_us: report.lag.max_us,
                    stop_reason: stop_reason.to_string(),
                    max_in_flight: report.max_in_flight,
                    reconnects: report.reconnects,
                    wake_p99_us: report.wake.p99_us,
                    wake_max_us: report.wake.max_us,
                };
                tracing::info!(completed = done.completed, failed = done.failed, reason = stop_reason, "run finished");
                self.send(agent_msg::Msg::Done(done)).await;
                if let Some(why) = self.closing {
                    return Some(why);
                }
            }
        }
        None
    }

    async fn flush(&mut self) {
        let Some(r) = &self.running else { return };
        let (run_id, started, rows) = (r.run_id, r.started_unix_ns, r.sink.drain());
        self.flush_rows(run_id, started, rows).await;
    }

    async fn flush_rows(&mut self, run_id: u64, started_unix_ns: i64, mut rows: Vec<Row>) {
        while !rows.is_empty() {
            let rest = if rows.len() > BATCH_ROWS { rows.split_off(BATCH_ROWS) } else { Vec::new() };
            let batch = SampleBatch { run_id, seq: self.next_seq, rows, started_unix_ns };
            self.next_seq += 1;
            self.unacked.insert(batch.seq, batch.clone());
            self.send(agent_msg::Msg::Batch(batch)).await;
            rows = rest;
        }
    }

    async fn send_health(&mut self) {
        let cpu_percent = self.cpu.sample();
        let Some(r) = &self.running else {
            self.send(agent_msg::Msg::Health(Health { sent_unix_ns: now_ns(), cpu_percent, ..Default::default() }))
                .await;
            return;
        };
        let lag = r.stats.lag();
        let wake = r.stats.wake();
        let h = Health {
            wake_p99_us: wake.p99_us,
            wake_max_us: wake.max_us,
            sent_unix_ns: now_ns(),
            cpu_percent,
            in_flight: r.stats.in_flight.load(Ordering::Relaxed),
            open_connections: r.stats.open_connections.load(Ordering::Relaxed),
            lag_p50_us: lag.p50_us,
            lag_p99_us: lag.p99_us,
            lag_max_us: lag.max_us,
            completed: r.stats.completed.load(Ordering::Relaxed),
            failed: r.stats.failed.load(Ordering::Relaxed),
        };
        self.send(agent_msg::Msg::Health(h)).await;
    }
}

fn hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}
