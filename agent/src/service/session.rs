//! One coordinator session as a state machine: [`Session::handle`] takes one [`Event`]
//! and the time, updates the protocol state and returns the [`Action`]s to perform. It
//! does no I/O and never waits, so unit tests drive it with explicit instants; the
//! driver (`driver.rs`) gathers the events and performs the actions.
//!
//! Rules enforced here (docs/design.md, D2, D34 and D43): a coordinator older than this
//! agent is refused, a newer one hears this agent's version and decides; targets
//! outside the allowlist are refused; something goes out at least every 100 ms (a
//! heartbeat where nothing else did, on the shared grid of D79) and a health report
//! every second; a coordinator silent for the lease stops all load at once
//! (dead-man switch) and the session ends once the run's last batch and its Done are
//! out; a broken stream is not the end: a stream that resumes the session within the
//! lease gets every unacknowledged batch again, and the run's Done (D2); Start needs the
//! run it names to be prepared, and carries the deadline the engine enforces; rows leave
//! in numbered batches, kept until acknowledged; Done follows the run's last batch.

use super::AgentSettings;
use super::allowlist::Refused;
use super::batch::Outbox;
use super::capacity::Reservation;
use crate::cpu;
use crate::engine::stats::{Lag, Stats};
use crate::engine::{EngineError, Report};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use surge_core::beat::Beat;
use surge_proto::{
    ClockPong, CoordinatorMsg, Done, ErrorCode, Health, Heartbeat, HelloReply, PROTOCOL_VERSION, Ready, Row,
    ServerMetrics, Workload, agent_msg, coordinator_msg,
};
use tokio::time::Instant;

/// The longest the coordinator goes without hearing something (D2: liveness every
/// 100 ms both ways); a heartbeat fills what else leaves no shorter (D79).
pub(crate) const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// How often a health report goes out: on the whole seconds of unix time, which are
/// points of the heartbeats' grid too, so a report takes a heartbeat's place (D79).
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// The time an event is handled at: monotonic for deadlines, the agent's wall clock
/// (unix ns) for what goes on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub at: Instant,
    pub unix_ns: i64,
}

impl Now {
    pub(crate) fn read() -> Self {
        let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        Self { at: Instant::now(), unix_ns }
    }

    /// The local instant at which the agent clock reads `unix_ns` (now if that is past).
    fn instant_at(self, unix_ns: i64) -> Instant {
        let ahead = Duration::from_nanos(u64::try_from(unix_ns.saturating_sub(self.unix_ns)).unwrap_or(0));
        // A deadline centuries away is as good as none.
        self.at.checked_add(ahead).unwrap_or_else(|| self.at + Duration::from_secs(100 * 365 * 86_400))
    }
}

/// A run's live counters, read for a health report.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Live {
    pub in_flight: u32,
    pub open_connections: u32,
    pub active_sessions: u32,
    pub lag: Lag,
    pub wake: Lag,
    pub completed: u64,
    pub failed: u64,
}

impl Live {
    pub(crate) fn read(stats: &Stats) -> Self {
        Self {
            in_flight: stats.in_flight.load(Ordering::Relaxed),
            open_connections: stats.open_connections.load(Ordering::Relaxed),
            active_sessions: stats.active_sessions.load(Ordering::Relaxed),
            lag: stats.lag(),
            wake: stats.wake(),
            completed: stats.completed.load(Ordering::Relaxed),
            failed: stats.failed.load(Ordering::Relaxed),
        }
    }
}

/// What a health report carries, read by the driver.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reading {
    pub cpu_percent: f64,
    pub host: cpu::HostSample,
    pub live: Option<Live>,
}

/// What a prepared workload reports in Ready.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PrepInfo {
    pub connections_open: u32,
    pub warmups_completed: u32,
}

/// One input of the session.
#[derive(Debug)]
pub(crate) enum Event {
    /// A message from the coordinator (any message renews the lease).
    Message(CoordinatorMsg),
    /// The stream broke or ended without a Bye; the session waits for a resume within
    /// its lease.
    Detached,
    /// A fresh stream resumed the session.
    Resumed,
    /// The heartbeat is due; with a health report due too ([`Session::health_due`]), the
    /// engine's CPU, the host's and the run's counters were just read.
    HeartbeatDue { health: Option<Reading> },
    /// The lease deadline ([`Session::lease_deadline`]) has come.
    LeaseDeadline,
    /// Rows the engine finished since the last flush (flush tick or a full batch).
    Rows(Vec<Row>),
    /// The allowlist's verdict on a Prepare's target.
    TargetChecked { run_id: u64, workload: Box<Workload>, verdict: Result<(), Refused> },
    /// The engine prepared a workload (or could not).
    Prepared { run_id: u64, result: Result<PrepInfo, EngineError> },
    /// The run ended; `rows` are those recorded after the last flush; `host` is the
    /// host's CPU over the run.
    EngineFinished { report: Report, cpu_seconds: f64, host: cpu::HostSample, rows: Vec<Row> },
    /// A scrape of the target's `/metrics` for the run (the workload asked for it).
    ServerMetrics(ServerMetrics),
    /// A reading of this host's GPUs (`--gpu nvml`).
    GpuSamples(surge_proto::GpuSamples),
    /// The agent is shutting down (SIGTERM).
    Shutdown,
}

/// One thing for the driver to do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// Send a message to the coordinator.
    Send(agent_msg::Msg),
    /// Check the workload's target against the allowlist (resolves names): then
    /// [`Event::TargetChecked`].
    CheckTarget { run_id: u64, workload: Workload },
    /// Prepare the workload in the engine: then [`Event::Prepared`].
    Prepare { run_id: u64, workload: Workload },
    /// Drop the prepared workload (its connections close).
    DiscardPrepared,
    /// Start the prepared run: then [`Event::Rows`] and finally [`Event::EngineFinished`].
    StartEngine { run_id: u64, start_at: Instant, deadline: Instant },
    /// Stop the running engine now (no new request; in-flight ones cancelled).
    StopEngine,
    /// Stop scraping the server's metrics for run `run_id` after one last scrape.
    ScrapeLast { run_id: u64 },
    /// Check the target against the allowlist and `GET /v1/models` from here; the reply
    /// goes straight to the coordinator (it is not a row: nothing to acknowledge).
    Probe(surge_proto::Probe),
    /// End the session (after the actions before it).
    Close(End),
}

/// Why a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    ProtocolMismatch,
    CoordinatorClosed,
    LeaseExpired,
    ShuttingDown,
}

impl End {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            End::ProtocolMismatch => "protocol mismatch",
            End::CoordinatorClosed => "coordinator closed the session",
            End::LeaseExpired => "lease expired",
            End::ShuttingDown => "agent shutting down",
        }
    }

    /// Done's `stop` for a run cut short by this.
    fn stop_reason(self) -> surge_proto::StopReason {
        match self {
            End::ShuttingDown => surge_proto::StopReason::Signal,
            End::LeaseExpired => surge_proto::StopReason::Lease,
            End::CoordinatorClosed | End::ProtocolMismatch => surge_proto::StopReason::CoordinatorGone,
        }
    }
}

/// The run in progress.
#[derive(Debug)]
struct Running {
    run_id: u64,
    /// Agent clock (unix ns) of the instant rows are relative to.
    started_unix_ns: i64,
}

/// The protocol state of one coordinator session.
#[derive(Debug)]
pub(crate) struct Session {
    settings: Arc<AgentSettings>,
    /// The id a coordinator resumes the session by.
    id: u64,
    /// The last run's Done, resent on resume until the next Prepare.
    last_done: Option<Done>,
    /// This session's share of the agent's max-in-flight, held from Prepare to the run's end.
    reservation: Option<Reservation>,
    cores: u32,
    hostname: String,
    /// The agent's lease, or the coordinator's when its Hello names one.
    lease: Duration,
    last_heard: Instant,
    /// When a heartbeat is due: only where nothing else went for an interval (D79).
    beat: Beat<Instant>,
    /// When a health report is due (a schedule on the whole seconds; nothing stands in).
    health: Beat<Instant>,
    /// The run prepared and waiting for its Start.
    prepared: Option<u64>,
    /// The run being prepared (its Prepare accepted, no Ready or error yet), and the Ready
    /// of the prepared run: a Prepare resent after a resume (its Ready may have gone into
    /// the broken stream) is answered with the same Ready, never prepared twice.
    preparing: Option<u64>,
    ready: Option<Ready>,
    running: Option<Running>,
    outbox: Outbox,
    /// Set when the session must end once the current run is flushed.
    closing: Option<End>,
}

fn error(code: ErrorCode, message: String) -> agent_msg::Msg {
    agent_msg::Msg::Error(surge_proto::Error { code: code as i32, message })
}

impl Session {
    /// A session opened at `now`: the first heartbeat is due at once.
    pub(crate) fn new(settings: Arc<AgentSettings>, id: u64, now: Now) -> Self {
        let (now, unix_ns) = (now.at, now.unix_ns);
        Self {
            lease: settings.lease,
            settings,
            id,
            last_done: None,
            reservation: None,
            cores: cpu::cores(),
            hostname: cpu::hostname(),
            last_heard: now,
            beat: Beat::new(HEARTBEAT_INTERVAL, now, unix_ns, now),
            health: Beat::new(HEALTH_INTERVAL, now, unix_ns, now),
            prepared: None,
            preparing: None,
            ready: None,
            running: None,
            outbox: Outbox::default(),
            closing: None,
        }
    }

    /// The same session, on a stream that can (gRPC) or cannot (in-process) break and be
    /// resumed: a session that cannot keeps no batches for a resend.
    pub(crate) fn resumable(mut self, resumable: bool) -> Self {
        if !resumable {
            self.outbox = Outbox::without_copies();
        }
        self
    }

    /// When the next heartbeat or health report is due.
    pub(crate) fn next_heartbeat(&self) -> Instant {
        self.beat.due().min(self.health.due())
    }

    /// When the coordinator's silence expires the lease (none once the session is ending).
    pub(crate) fn lease_deadline(&self) -> Option<Instant> {
        self.closing.is_none().then(|| self.last_heard + self.lease)
    }

    /// Whether the session is ending (after its run, if one is going).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// Advances the session by one event.
    pub(crate) fn handle(&mut self, event: Event, now: Now) -> Vec<Action> {
        let mut out = Vec::new();
        // What leaves on any event but the heartbeat's own stands in for a heartbeat.
        let beat = matches!(event, Event::HeartbeatDue { .. });
        self.advance(event, now, &mut out);
        if !beat && out.iter().any(|a| matches!(a, Action::Send(_))) {
            self.beat.sent(now.at);
        }
        out
    }

    fn advance(&mut self, event: Event, now: Now, out: &mut Vec<Action>) {
        match event {
            Event::Message(m) => {
                self.last_heard = now.at;
                if let Some(m) = m.msg {
                    self.on_message(m, now, out);
                }
            }
            Event::Detached => {}
            Event::Resumed => {
                self.last_heard = now.at;
                self.on_resumed(out);
            }
            Event::HeartbeatDue { health } => self.on_heartbeat(health, now, out),
            Event::LeaseDeadline => {
                if self.lease_deadline().is_some_and(|d| now.at >= d) {
                    tracing::warn!(lease_ms = self.lease.as_millis() as u64, "lease expired: stopping load");
                    self.abandon(End::LeaseExpired, out);
                }
            }
            Event::Rows(rows) => self.send_rows(rows, out),
            Event::ServerMetrics(m) => out.push(Action::Send(agent_msg::Msg::ServerMetrics(m))),
            // GpuSamples came with version 10 (an emulated older agent has none).
            Event::GpuSamples(g) if self.settings.protocol == PROTOCOL_VERSION => {
                out.push(Action::Send(agent_msg::Msg::GpuSamples(g)));
            }
            Event::GpuSamples(_) => {}
            Event::TargetChecked { run_id, workload, verdict } => self.on_checked(run_id, *workload, verdict, out),
            Event::Prepared { run_id, result: Ok(p) } => {
                self.prepared = Some(run_id);
                self.preparing = self.preparing.filter(|r| *r != run_id);
                let ready =
                    Ready { run_id, connections_open: p.connections_open, warmups_completed: p.warmups_completed };
                self.ready = Some(ready);
                out.push(Action::Send(agent_msg::Msg::Ready(ready)));
            }
            Event::Prepared { run_id, result: Err(e) } => {
                self.preparing = self.preparing.filter(|r| *r != run_id);
                self.reservation = None;
                out.push(Action::Send(error(ErrorCode::BadRequest, e.to_string())));
            }
            Event::EngineFinished { report, cpu_seconds, host, rows } => {
                self.on_finished(report, cpu_seconds, host, rows, out)
            }
            Event::Shutdown => self.abandon(End::ShuttingDown, out),
        }
    }

    /// Stops the load because the session must end; it ends after the run's Done.
    fn abandon(&mut self, why: End, out: &mut Vec<Action>) {
        let why = *self.closing.get_or_insert(why);
        out.push(if self.running.is_some() { Action::StopEngine } else { Action::Close(why) });
    }

    /// Whether a health report is due at `at` (the driver reads the CPU for it).
    pub(crate) fn health_due(&self, at: Instant) -> bool {
        at >= self.health.due()
    }

    /// A heartbeat where nothing else went for an interval, on the grid (D79); a health
    /// report every second, in place of the heartbeat when both are due.
    fn on_heartbeat(&mut self, health: Option<Reading>, now: Now, out: &mut Vec<Action>) {
        let beat = self.beat.fire(now.at);
        let health = health.filter(|_| self.health_due(now.at));
        let Some(Reading { cpu_percent, host, live }) = health else {
            if beat {
                out.push(Action::Send(agent_msg::Msg::Heartbeat(Heartbeat { sent_unix_ns: now.unix_ns })));
            }
            return;
        };
        // The next report at the next whole second, however late this one was.
        self.health.fire(now.at);
        if !beat {
            self.beat.sent(now.at);
        }
        let mut h = Health {
            sent_unix_ns: now.unix_ns,
            cpu_percent,
            host_busy_pct: host.busy_pct,
            cpu_pressure_pct: host.pressure_pct,
            ..Default::default()
        };
        if let Some(l) = live.filter(|_| self.running.is_some()) {
            h.in_flight = l.in_flight;
            h.open_connections = l.open_connections;
            h.active_sessions = l.active_sessions;
            h.lag_p50_us = l.lag.p50_us;
            h.lag_p99_us = l.lag.p99_us;
            h.lag_max_us = l.lag.max_us;
            h.wake_p99_us = l.wake.p99_us;
            h.wake_max_us = l.wake.max_us;
            h.completed = l.completed;
            h.failed = l.failed;
        }
        out.push(Action::Send(agent_msg::Msg::Health(h)));
    }

    fn on_message(&mut self, m: coordinator_msg::Msg, now: Now, out: &mut Vec<Action>) {
        use coordinator_msg::Msg;
        match m {
            Msg::Hello(h) => {
                if !self.accepts(h.protocol_version) {
                    let text = format!(
                        "protocol version mismatch: coordinator speaks version {}, this agent speaks version {}",
                        h.protocol_version, self.settings.protocol
                    );
                    tracing::warn!("{text}");
                    out.push(Action::Send(error(ErrorCode::ProtocolMismatch, text)));
                    if self.running.is_some() {
                        out.push(Action::StopEngine);
                    }
                    self.closing = Some(End::ProtocolMismatch);
                    out.push(Action::Close(End::ProtocolMismatch));
                    return;
                }
                if h.lease_ms > 0 {
                    self.lease = Duration::from_millis(u64::from(h.lease_ms));
                }
                out.push(Action::Send(agent_msg::Msg::Hello(self.hello_reply(false))));
            }
            Msg::Ping(p) => out.push(Action::Send(agent_msg::Msg::Pong(ClockPong {
                seq: p.seq,
                t1_unix_ns: p.t1_unix_ns,
                t2_unix_ns: now.unix_ns,
                t3_unix_ns: now.unix_ns,
            }))),
            Msg::Prepare(p)
                if self.preparing == Some(p.run_id) || self.running.as_ref().is_some_and(|r| r.run_id == p.run_id) =>
            {
                // Resent after a resume while it is being prepared: its Ready will come.
            }
            Msg::Prepare(p) if self.prepared == Some(p.run_id) && self.ready.is_some_and(|r| r.run_id == p.run_id) => {
                // Resent after a resume: its Ready may have been lost with the old stream.
                if let Some(r) = self.ready {
                    out.push(Action::Send(agent_msg::Msg::Ready(r)));
                }
            }
            Msg::Prepare(_) if self.preparing.is_some() => {
                // Another run is being prepared: one at a time.
                let text = format!("run {} is being prepared on this session", self.preparing.unwrap_or_default());
                out.push(Action::Send(error(ErrorCode::Busy, text)));
            }
            Msg::Prepare(p) => {
                self.last_done = None;
                if self.running.is_some() {
                    let text = "a run is already in progress on this session".to_string();
                    out.push(Action::Send(error(ErrorCode::Busy, text)));
                } else if let Some(mut workload) = p.workload {
                    // Read at the edge: a workload this agent cannot read is refused before
                    // anything is resolved, connected or sent.
                    let read = if self.settings.protocol == surge_proto::v9::VERSION {
                        surge_proto::v9::decode_workload(&mut workload)
                    } else {
                        Ok(())
                    };
                    match read
                        .map_err(|e| e.to_string())
                        .and_then(|()| crate::engine::workload::spec::check(&workload).map_err(|e| e.to_string()))
                    {
                        Ok(_) => {
                            self.preparing = Some(p.run_id);
                            out.push(Action::CheckTarget { run_id: p.run_id, workload });
                        }
                        Err(e) => out.push(Action::Send(error(ErrorCode::BadRequest, e))),
                    }
                } else {
                    out.push(Action::Send(error(ErrorCode::BadRequest, "Prepare without a workload".into())));
                }
            }
            Msg::Start(s) => {
                // The coordinator resends Start after a resume, in case the first went into
                // the broken stream: a Start of the run already running or done is that.
                let current = self.running.as_ref().map(|r| r.run_id).or(self.last_done.as_ref().map(|d| d.run_id));
                if current == Some(s.run_id) {
                    return;
                }
                let prepared = self.prepared.take();
                if prepared != Some(s.run_id) {
                    if prepared.is_some() {
                        self.reservation = None;
                        out.push(Action::DiscardPrepared);
                    }
                    let text = format!("Start for run {} that is not prepared", s.run_id);
                    out.push(Action::Send(error(ErrorCode::BadRequest, text)));
                    return;
                }
                self.running = Some(Running { run_id: s.run_id, started_unix_ns: s.start_at_unix_ns });
                out.push(Action::StartEngine {
                    run_id: s.run_id,
                    start_at: now.instant_at(s.start_at_unix_ns),
                    deadline: now.instant_at(s.deadline_unix_ns),
                });
            }
            Msg::Stop(s) => {
                if self.running.as_ref().is_some_and(|r| r.run_id == s.run_id) {
                    tracing::info!(reason = %s.reason, "stop requested");
                    out.push(Action::StopEngine);
                }
            }
            Msg::Heartbeat(_) => {}
            Msg::ScrapeLast(s) => out.push(Action::ScrapeLast { run_id: s.run_id }),
            // Probe came with version 10: an agent of version 9 never answers it.
            Msg::Probe(_) if self.settings.protocol < PROTOCOL_VERSION => {}
            Msg::Probe(p) => out.push(Action::Probe(p)),
            Msg::Bye(_) => self.abandon(End::CoordinatorClosed, out),
            Msg::Ack(a) => {
                self.outbox.ack(a.seq);
            }
        }
    }

    fn on_checked(&mut self, run_id: u64, mut w: Workload, verdict: Result<(), Refused>, out: &mut Vec<Action>) {
        // Still being prepared only if it goes on to the engine (below).
        self.preparing = self.preparing.filter(|r| *r != run_id);
        if let Err(refused) = verdict {
            out.push(Action::Send(error(ErrorCode::TargetNotAllowed, refused.to_string())));
            return;
        }
        let cap = self.settings.max_in_flight;
        if w.max_concurrency > cap {
            let text =
                format!("requested max concurrency {} exceeds this agent's max-in-flight {cap}", w.max_concurrency);
            out.push(Action::Send(error(ErrorCode::OverCapacity, text)));
            return;
        }
        // Multiplexed connections (HTTP/2, HTTP/3) carry 100 streams each.
        let h2 = matches!(w.http(), surge_proto::HttpChoice::Http2 | surge_proto::HttpChoice::Http3);
        if let Err(text) = self.settings.limits.check(w.max_concurrency, h2) {
            out.push(Action::Send(error(ErrorCode::OverCapacity, text)));
            return;
        }
        // A run held before (prepared, never started) gives its share back first.
        self.reservation = None;
        let want = (w.max_concurrency > 0).then_some(w.max_concurrency);
        match self.settings.capacity.reserve(want, self.settings.limits.max_concurrency(h2)) {
            Ok(r) => {
                w.max_concurrency = r.amount();
                self.reservation = Some(r);
            }
            Err(text) => {
                out.push(Action::Send(error(ErrorCode::OverCapacity, text)));
                return;
            }
        }
        self.preparing = Some(run_id);
        out.push(Action::Prepare { run_id, workload: w });
    }

    fn send_rows(&mut self, rows: Vec<Row>, out: &mut Vec<Action>) {
        let Some(r) = &self.running else { return };
        for batch in self.outbox.seal(r.run_id, r.started_unix_ns, rows) {
            out.push(Action::Send(agent_msg::Msg::Batch(batch)));
        }
    }

    fn on_finished(
        &mut self,
        report: Report,
        cpu_seconds: f64,
        host: cpu::HostSample,
        rows: Vec<Row>,
        out: &mut Vec<Action>,
    ) {
        self.send_rows(rows, out);
        let Some(running) = self.running.take() else { return };
        self.reservation = None;
        let stop_reason = self.closing.map_or(report.stop_reason.wire(), End::stop_reason);
        let mut done = Done {
            run_id: running.run_id,
            batches: self.outbox.sealed(),
            completed: report.completed,
            failed: report.failed,
            cancelled: report.cancelled,
            started_unix_ns: running.started_unix_ns,
            cpu_seconds,
            wall_seconds: report.wall.as_secs_f64(),
            lag_p50_us: report.lag.p50_us,
            lag_p99_us: report.lag.p99_us,
            lag_max_us: report.lag.max_us,
            stop: stop_reason as i32,
            max_in_flight: report.max_in_flight,
            reconnects: report.reconnects,
            wake_p99_us: report.wake.p99_us,
            wake_max_us: report.wake.max_us,
            host_busy_pct: host.busy_pct,
            cpu_pressure_pct: host.pressure_pct,
            v9_stop_reason: String::new(),
        };
        if self.settings.protocol == surge_proto::v9::VERSION {
            surge_proto::v9::encode_done(&mut done);
        }
        tracing::info!(
            completed = done.completed,
            failed = done.failed,
            reason = stop_reason.as_str_name(),
            "run finished"
        );
        self.last_done = Some(done.clone());
        out.push(Action::Send(agent_msg::Msg::Done(done)));
        if let Some(end) = self.closing {
            out.push(Action::Close(end));
        }
    }

    /// Whether a coordinator speaking `version` may drive this agent. The agent answers a
    /// coordinator of its own version or a newer one with its version, and the coordinator
    /// decides (it accepts agents one version older, D43); an older coordinator cannot
    /// know this agent's messages. An emulated older agent requires its exact version, as
    /// agents of version 9 did.
    fn accepts(&self, version: u32) -> bool {
        if self.settings.protocol < PROTOCOL_VERSION {
            version == self.settings.protocol
        } else {
            version >= PROTOCOL_VERSION
        }
    }

    fn hello_reply(&self, resumed: bool) -> HelloReply {
        let reply = HelloReply {
            protocol_version: PROTOCOL_VERSION,
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            cores: self.cores,
            max_in_flight: self.settings.max_in_flight,
            allowed_targets: self.settings.allowed.raw().to_vec(),
            hostname: self.hostname.clone(),
            session_id: self.id,
            resumed,
            cert_name: self.settings.cert_name.clone(),
            open_files: self.settings.limits.open_files,
            host_max_in_flight: self.settings.limits.max_concurrency(false),
            features: surge_proto::LISTED_FEATURES.iter().map(|f| f.to_string()).collect(),
        };
        if self.settings.protocol < PROTOCOL_VERSION {
            // An older agent knows none of the fields added since (D43).
            return HelloReply {
                protocol_version: self.settings.protocol,
                cert_name: String::new(),
                open_files: 0,
                host_max_in_flight: 0,
                features: Vec::new(),
                ..reply
            };
        }
        reply
    }

    /// A fresh stream took over: say so, then resend what the coordinator may not have.
    fn on_resumed(&mut self, out: &mut Vec<Action>) {
        out.push(Action::Send(agent_msg::Msg::Hello(self.hello_reply(true))));
        let resent = self.outbox.pending().cloned().map(agent_msg::Msg::Batch).map(Action::Send);
        out.extend(resent);
        if let Some(done) = &self.last_done {
            out.push(Action::Send(agent_msg::Msg::Done(done.clone())));
        }
    }

    /// Sequence numbers of the batches sent and not yet acknowledged.
    #[cfg(test)]
    fn unacked(&self) -> Vec<u64> {
        self.outbox.unacked().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StopReason;
    use crate::service::batch::BATCH_ROWS;
    use crate::service::{Allowlist, HostLimits};
    use surge_proto::{Ack, Hello, Prepare, Start, Stop};

    const LEASE: Duration = Duration::from_secs(3);

    /// A session opened at `t0`, and the clock `d` after it.
    struct Clock {
        t0: Instant,
        unix0: i64,
    }

    impl Clock {
        fn new() -> Self {
            Self { t0: Instant::now(), unix0: 1_800_000_000_000_000_000 }
        }

        fn at(&self, d: Duration) -> Now {
            Now { at: self.t0 + d, unix_ns: self.unix0 + d.as_nanos() as i64 }
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn session(c: &Clock) -> Session {
        let settings = AgentSettings::new(100, LEASE, Allowlist::any());
        Session::new(Arc::new(settings), 42, c.at(Duration::ZERO))
    }

    fn msg(m: coordinator_msg::Msg) -> Event {
        Event::Message(CoordinatorMsg { msg: Some(m) })
    }

    fn rows(n: usize) -> Vec<Row> {
        (0..n as u64).map(|index| Row { index, ..Default::default() }).collect()
    }

    fn report(stop_reason: StopReason) -> Report {
        Report {
            started_at: SystemTime::now(),
            completed: 10,
            failed: 0,
            cancelled: 0,
            stop_reason,
            wall: Duration::from_secs(1),
            lag: Lag::default(),
            wake: Lag::default(),
            max_in_flight: 4,
            reconnects: 0,
        }
    }

    /// What the actions would put on the wire, in order, by kind ("batch 3", "done", ...).
    fn sent(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::Send(agent_msg::Msg::Batch(b)) => format!("batch {}", b.seq),
                Action::Send(agent_msg::Msg::Done(d)) => format!(
                    "done {} {}",
                    d.stop().as_str_name().trim_start_matches("STOP_REASON_").to_lowercase(),
                    d.batches
                ),
                Action::Send(agent_msg::Msg::Heartbeat(_)) => "heartbeat".into(),
                Action::Send(agent_msg::Msg::Health(_)) => "health".into(),
                Action::Send(agent_msg::Msg::Ready(_)) => "ready".into(),
                Action::Send(agent_msg::Msg::Hello(_)) => "hello".into(),
                Action::Send(agent_msg::Msg::Error(e)) => format!("error {}", e.code),
                Action::Send(other) => format!("{other:?}"),
                Action::CheckTarget { .. } => "check".into(),
                Action::Prepare { .. } => "prepare".into(),
                Action::DiscardPrepared => "discard".into(),
                Action::StartEngine { .. } => "start".into(),
                Action::StopEngine => "stop engine".into(),
                Action::ScrapeLast { run_id } => format!("scrape last {run_id}"),
                Action::Probe(p) => format!("probe {}", p.base_url),
                Action::Close(end) => format!("close: {}", end.as_str()),
            })
            .collect()
    }

    #[test]
    fn a_start_resent_after_a_resume_is_ignored() {
        let c = Clock::new();
        let mut s = session(&c);
        let now = c.at(ms(0));
        start_run(&mut s, now);
        let again = Start { run_id: 1, start_at_unix_ns: now.unix_ns, deadline_unix_ns: now.unix_ns + 60e9 as i64 };
        assert!(s.handle(msg(coordinator_msg::Msg::Start(again)), now).is_empty(), "running: ignored");
        let done = s.handle(
            Event::EngineFinished {
                report: report(StopReason::Duration),
                cpu_seconds: 0.0,
                host: Default::default(),
                rows: Vec::new(),
            },
            now,
        );
        assert_eq!(sent(&done), ["done duration 0"]);
        assert!(s.handle(msg(coordinator_msg::Msg::Start(again)), now).is_empty(), "done: ignored, not an error");
        // A Start of another run that was never prepared is still refused.
        let other = Start { run_id: 2, ..again };
        assert_eq!(sent(&s.handle(msg(coordinator_msg::Msg::Start(other)), now)), ["error 3"]);
    }

    /// A Prepare resent after a resume is never prepared twice: ignored while it is being
    /// prepared, answered with the same Ready once it is, ignored once its run started.
    #[test]
    fn a_resent_prepare_is_answered_not_prepared_again() {
        let c = Clock::new();
        let mut s = session(&c);
        let now = c.at(ms(0));
        let hello = Hello { protocol_version: PROTOCOL_VERSION, ..Default::default() };
        s.handle(msg(coordinator_msg::Msg::Hello(hello)), now);
        let prepare =
            Prepare { run_id: 1, workload: Some(readable(Workload { max_concurrency: 0, ..Default::default() })) };
        let again = || msg(coordinator_msg::Msg::Prepare(Box::new(prepare.clone())));
        let a = s.handle(again(), now);
        let [Action::CheckTarget { workload, .. }] = &a[..] else { panic!("{a:?}") };
        let workload = workload.clone();
        assert!(s.handle(again(), now).is_empty(), "being checked: ignored");
        let a = s.handle(Event::TargetChecked { run_id: 1, workload: Box::new(workload), verdict: Ok(()) }, now);
        assert!(matches!(&a[..], [Action::Prepare { run_id: 1, .. }]), "{a:?}");
        assert!(s.handle(again(), now).is_empty(), "being prepared: ignored");
        let other = Prepare { run_id: 2, ..prepare.clone() };
        let busy = sent(&s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(other))), now));
        assert!(busy.len() == 1 && busy[0].starts_with("error"), "another run while one is prepared: {busy:?}");
        let info = PrepInfo { connections_open: 7, warmups_completed: 2 };
        let a = s.handle(Event::Prepared { run_id: 1, result: Ok(info) }, now);
        assert_eq!(sent(&a), ["ready"]);
        let a = s.handle(again(), now);
        assert!(
            matches!(&a[..], [Action::Send(agent_msg::Msg::Ready(r))] if r.run_id == 1 && r.connections_open == 7),
            "prepared: the same Ready again, {a:?}"
        );
        let start =
            Start { run_id: 1, start_at_unix_ns: now.unix_ns + 1_000_000, deadline_unix_ns: now.unix_ns + 60e9 as i64 };
        s.handle(msg(coordinator_msg::Msg::Start(start)), now);
        assert!(s.handle(again(), now).is_empty(), "running: ignored, not an error");
    }

    /// Hello, Prepare and Start of run 1 at `t`: the session is running.
    fn start_run(s: &mut Session, now: Now) {
        let hello = Hello { protocol_version: PROTOCOL_VERSION, ..Default::default() };
        assert_eq!(sent(&s.handle(msg(coordinator_msg::Msg::Hello(hello)), now)), ["hello"]);
        let prepare =
            Prepare { run_id: 1, workload: Some(readable(Workload { max_concurrency: 0, ..Default::default() })) };
        let a = s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(prepare))), now);
        let [Action::CheckTarget { run_id: 1, workload }] = &a[..] else { panic!("{a:?}") };
        let a =
            s.handle(Event::TargetChecked { run_id: 1, workload: Box::new(workload.clone()), verdict: Ok(()) }, now);
        let [Action::Prepare { run_id: 1, workload }] = &a[..] else { panic!("{a:?}") };
        assert_eq!(workload.max_concurrency, 100, "no concurrency asked: the agent's cap");
        let a = s.handle(Event::Prepared { run_id: 1, result: Ok(PrepInfo::default()) }, now);
        assert_eq!(sent(&a), ["ready"]);
        let start =
            Start { run_id: 1, start_at_unix_ns: now.unix_ns + 1_000_000, deadline_unix_ns: now.unix_ns + 60e9 as i64 };
        let a = s.handle(msg(coordinator_msg::Msg::Start(start)), now);
        let [Action::StartEngine { run_id: 1, start_at, deadline }] = &a[..] else { panic!("{a:?}") };
        assert_eq!((*start_at - now.at, *deadline - now.at), (ms(1), Duration::from_secs(60)));
    }

    #[test]
    fn heartbeats_are_emitted_on_schedule() {
        let c = Clock::new();
        let mut s = session(&c);
        let beat = |s: &mut Session, d: Duration| {
            sent(&s.handle(
                Event::HeartbeatDue { health: Some(Reading { cpu_percent: 1.0, ..Default::default() }) },
                c.at(d),
            ))
        };
        assert_eq!(beat(&mut s, ms(0)), ["health"], "the first beat leaves at once, as the health report");
        assert_eq!(s.next_heartbeat(), c.t0 + ms(100));
        assert!(beat(&mut s, ms(99)).is_empty(), "not due yet");
        // Every 100 ms a heartbeat; every second the health report in its place.
        for k in 1..10 {
            assert_eq!(beat(&mut s, ms(100 * k)), ["heartbeat"], "beat {k}");
        }
        assert_eq!(beat(&mut s, ms(1000)), ["health"]);
        // A late wake-up does not shift the grid...
        assert_eq!(beat(&mut s, ms(1130)), ["heartbeat"]);
        assert_eq!(s.next_heartbeat(), c.t0 + ms(1200));
        assert_eq!(beat(&mut s, ms(1200)), ["heartbeat"]);
        // ...and what else leaves stands in for a heartbeat: the next one is due an
        // interval after it (D79), then the grid again.
        let m = ServerMetrics { run_id: 1, ..Default::default() };
        assert_eq!(s.handle(Event::ServerMetrics(m), c.at(ms(1250))).len(), 1, "the metrics leave");
        assert!(beat(&mut s, ms(1300)).is_empty(), "the metrics went 50 ms ago");
        assert_eq!(s.next_heartbeat(), c.t0 + ms(1350));
        assert_eq!(beat(&mut s, ms(1350)), ["heartbeat"]);
        assert_eq!(s.next_heartbeat(), c.t0 + ms(1400));
        // After a stall, one beat and the report at once, then the grid, without a burst:
        // the next report at the next whole second, in that heartbeat's place.
        assert_eq!(beat(&mut s, ms(7550)), ["health"]);
        assert!(beat(&mut s, ms(7599)).is_empty());
        assert_eq!(s.next_heartbeat(), c.t0 + ms(7600));
        for k in 0..4 {
            assert_eq!(beat(&mut s, ms(7600 + 100 * k)), ["heartbeat"]);
        }
        assert_eq!(beat(&mut s, ms(8000)), ["health"]);
        assert_eq!(beat(&mut s, ms(8100)), ["heartbeat"]);
        // The beat carries the clock; health carries the CPU.
        let a = s.handle(Event::HeartbeatDue { health: None }, c.at(ms(8200)));
        let [Action::Send(agent_msg::Msg::Heartbeat(h))] = &a[..] else { panic!("{a:?}") };
        assert_eq!(h.sent_unix_ns, c.at(ms(8200)).unix_ns);
        let a = s.handle(
            Event::HeartbeatDue { health: Some(Reading { cpu_percent: 42.0, ..Default::default() }) },
            c.at(ms(9000)),
        );
        let [Action::Send(agent_msg::Msg::Health(health))] = &a[..] else { panic!("{a:?}") };
        assert_eq!(health.cpu_percent, 42.0);
    }

    #[test]
    fn coordinator_silence_past_the_lease_stops_the_load() {
        let c = Clock::new();
        let mut s = session(&c);
        start_run(&mut s, c.at(ms(0)));
        assert_eq!(s.lease_deadline(), Some(c.t0 + LEASE));
        // Any message renews the lease.
        let hb = surge_proto::Heartbeat { sent_unix_ns: 0 };
        assert!(s.handle(msg(coordinator_msg::Msg::Heartbeat(hb)), c.at(ms(2000))).is_empty());
        assert_eq!(s.lease_deadline(), Some(c.t0 + ms(2000) + LEASE));
        assert!(s.handle(Event::LeaseDeadline, c.at(ms(4999))).is_empty(), "still within the lease");
        assert_eq!(sent(&s.handle(Event::LeaseDeadline, c.at(ms(5000)))), ["stop engine"]);
        assert_eq!(s.lease_deadline(), None, "expired once");
        // The session ends after the run's last rows and its Done, which says why.
        let a = s.handle(
            Event::EngineFinished {
                report: report(StopReason::Stopped),
                cpu_seconds: 0.5,
                host: Default::default(),
                rows: rows(3),
            },
            c.at(ms(5100)),
        );
        assert_eq!(sent(&a), ["batch 0", "done lease 1", "close: lease expired"]);
        // Without a run, silence ends the session at once.
        let mut idle = session(&c);
        assert_eq!(sent(&idle.handle(Event::LeaseDeadline, c.at(LEASE))), ["close: lease expired"]);
    }

    #[test]
    fn batches_are_numbered_in_order_and_acks_remove_them() {
        let c = Clock::new();
        let mut s = session(&c);
        start_run(&mut s, c.at(ms(0)));
        let a = s.handle(Event::Rows(rows(2 * BATCH_ROWS + 1)), c.at(ms(100)));
        assert_eq!(sent(&a), ["batch 0", "batch 1", "batch 2"]);
        let a = s.handle(Event::Rows(rows(5)), c.at(ms(200)));
        assert_eq!(sent(&a), ["batch 3"]);
        let Action::Send(agent_msg::Msg::Batch(b)) = &a[0] else { panic!() };
        assert_eq!((b.run_id, b.rows.len(), b.started_unix_ns), (1, 5, c.at(ms(0)).unix_ns + 1_000_000));
        assert_eq!(s.unacked(), [0, 1, 2, 3]);
        let ack =
            |s: &mut Session, seq| s.handle(msg(coordinator_msg::Msg::Ack(Ack { run_id: 1, seq })), c.at(ms(300)));
        assert!(ack(&mut s, 1).is_empty());
        assert_eq!(s.unacked(), [0, 2, 3]);
        ack(&mut s, 9);
        assert_eq!(s.unacked(), [0, 2, 3], "an unknown ack changes nothing");
        ack(&mut s, 0);
        ack(&mut s, 3);
        assert_eq!(s.unacked(), [2]);
    }

    #[test]
    fn done_is_sent_only_after_the_last_batch() {
        let c = Clock::new();
        let mut s = session(&c);
        start_run(&mut s, c.at(ms(0)));
        let a = s.handle(Event::Rows(rows(10)), c.at(ms(100)));
        assert_eq!(sent(&a), ["batch 0"], "rows alone never end a run");
        let a = s.handle(
            Event::EngineFinished {
                report: report(StopReason::Finished),
                cpu_seconds: 0.5,
                host: Default::default(),
                rows: rows(BATCH_ROWS + 1),
            },
            c.at(ms(200)),
        );
        assert_eq!(sent(&a), ["batch 1", "batch 2", "done finished 3"]);
        let Some(Action::Send(agent_msg::Msg::Done(d))) = a.last() else { panic!() };
        assert_eq!((d.run_id, d.completed, d.cpu_seconds, d.max_in_flight), (1, 10, 0.5, 4));
        // Rows after the end belong to no run.
        assert!(s.handle(Event::Rows(rows(1)), c.at(ms(300))).is_empty());
    }

    #[test]
    fn stop_with_batches_in_flight_still_delivers_them_then_done() {
        let c = Clock::new();
        let mut s = session(&c);
        start_run(&mut s, c.at(ms(0)));
        s.handle(Event::Rows(rows(BATCH_ROWS + 1)), c.at(ms(100)));
        let stop = |run_id| msg(coordinator_msg::Msg::Stop(Stop { run_id, reason: "test".into() }));
        assert!(s.handle(stop(2), c.at(ms(150))).is_empty(), "a Stop for another run is ignored");
        let a = s.handle(stop(1), c.at(ms(200)));
        assert_eq!(sent(&a), ["stop engine"], "no Done before the engine has ended");
        assert_eq!(s.unacked(), [0, 1]);
        // Rows finished while the engine winds down still leave, then Done.
        let a = s.handle(Event::Rows(rows(2)), c.at(ms(250)));
        assert_eq!(sent(&a), ["batch 2"]);
        let a = s.handle(
            Event::EngineFinished {
                report: report(StopReason::Stopped),
                cpu_seconds: 0.5,
                host: Default::default(),
                rows: rows(3),
            },
            c.at(ms(300)),
        );
        assert_eq!(sent(&a), ["batch 3", "done stopped 4"], "the session stays open for the next run");
        assert_eq!(s.unacked(), [0, 1, 2, 3]);
    }

    #[test]
    fn a_resumed_session_resends_what_was_not_acknowledged_then_done() {
        let c = Clock::new();
        let mut s = session(&c);
        start_run(&mut s, c.at(ms(0)));
        let a = s.handle(Event::Rows(rows(2 * BATCH_ROWS + 1)), c.at(ms(100)));
        assert_eq!(sent(&a), ["batch 0", "batch 1", "batch 2"]);
        s.handle(msg(coordinator_msg::Msg::Ack(Ack { run_id: 1, seq: 1 })), c.at(ms(150)));
        // The stream breaks: the load goes on within the lease, rows keep being numbered.
        assert!(s.handle(Event::Detached, c.at(ms(200))).is_empty(), "a broken stream is not the end");
        assert_eq!(sent(&s.handle(Event::Rows(rows(1)), c.at(ms(300)))), ["batch 3"]);
        let a = s.handle(
            Event::EngineFinished {
                report: report(StopReason::Finished),
                cpu_seconds: 0.1,
                host: Default::default(),
                rows: rows(1),
            },
            c.at(ms(2000)),
        );
        assert_eq!(sent(&a), ["batch 4", "done finished 5"]);
        // 2.5 s after the last word a fresh stream resumes: every unacknowledged batch
        // again, in order, then Done; the lease runs from now.
        let a = s.handle(Event::Resumed, c.at(ms(2650)));
        assert_eq!(sent(&a), ["hello", "batch 0", "batch 2", "batch 3", "batch 4", "done finished 5"]);
        let [Action::Send(agent_msg::Msg::Hello(h)), ..] = &a[..] else { panic!("{a:?}") };
        assert!(h.resumed && h.session_id == 42, "{h:?}");
        assert_eq!(s.lease_deadline(), Some(c.t0 + ms(2650) + LEASE));
        for seq in [0, 2, 3, 4] {
            s.handle(msg(coordinator_msg::Msg::Ack(Ack { run_id: 1, seq })), c.at(ms(2700)));
        }
        assert_eq!(sent(&s.handle(Event::Resumed, c.at(ms(2800)))), ["hello", "done finished 5"]);
        // The next run's Prepare forgets the old Done.
        let prepare = Prepare { run_id: 2, workload: Some(Workload::default()) };
        s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(prepare))), c.at(ms(2900)));
        assert_eq!(sent(&s.handle(Event::Resumed, c.at(ms(3000)))), ["hello"]);
    }

    #[test]
    fn shutdown_and_a_closed_stream_end_the_session_after_the_run() {
        let c = Clock::new();
        let mut s = session(&c);
        start_run(&mut s, c.at(ms(0)));
        assert_eq!(sent(&s.handle(Event::Shutdown, c.at(ms(10)))), ["stop engine"]);
        assert!(s.is_closing());
        let a = s.handle(
            Event::EngineFinished {
                report: report(StopReason::Stopped),
                cpu_seconds: 0.0,
                host: Default::default(),
                rows: Vec::new(),
            },
            c.at(ms(20)),
        );
        assert_eq!(sent(&a), ["done signal 0", "close: agent shutting down"]);
        let mut s = session(&c);
        let bye = msg(coordinator_msg::Msg::Bye(surge_proto::Bye {}));
        assert_eq!(sent(&s.handle(bye, c.at(ms(0)))), ["close: coordinator closed the session"]);
    }

    #[test]
    fn max_in_flight_is_shared_across_sessions_and_host_limits_refuse() {
        let c = Clock::new();
        let settings = Arc::new(AgentSettings::new(100, LEASE, Allowlist::any()));
        let (mut a, mut b) = (
            Session::new(Arc::clone(&settings), 1, c.at(Duration::ZERO)),
            Session::new(settings, 2, c.at(Duration::ZERO)),
        );
        let check =
            |s: &mut Session, n: u32| {
                let workload = Workload { max_concurrency: n, ..Default::default() };
                sent(&s.handle(
                    Event::TargetChecked { run_id: 1, workload: Box::new(workload), verdict: Ok(()) },
                    c.at(ms(0)),
                ))
            };
        let over = format!("error {}", ErrorCode::OverCapacity as i32);
        assert_eq!(check(&mut a, 70), ["prepare"]);
        assert_eq!(check(&mut b, 40), std::slice::from_ref(&over), "70 of 100 are held by the other session");
        assert_eq!(check(&mut b, 30), ["prepare"]);
        drop(a);
        assert_eq!(check(&mut b, 100), ["prepare"], "a session's end gives its share back");
        // An agent whose open-file limit is 1024 refuses 2000 in flight over HTTP/1.1.
        let limits = HostLimits { open_files: 1024, source_ports: 28232 };
        let settings = Arc::new(AgentSettings { limits, ..AgentSettings::new(5000, LEASE, Allowlist::any()) });
        let mut s = Session::new(settings, 3, c.at(Duration::ZERO));
        let workload = Workload { max_concurrency: 2000, ..Default::default() };
        let a =
            s.handle(Event::TargetChecked { run_id: 1, workload: Box::new(workload), verdict: Ok(()) }, c.at(ms(0)));
        let [Action::Send(agent_msg::Msg::Error(e))] = &a[..] else { panic!("{a:?}") };
        assert!(e.message.contains("open-file limit 1024"), "{}", e.message);
    }

    #[test]
    fn an_agent_emulating_version_9_reads_and_writes_version_9s_wire() {
        let c = Clock::new();
        let now = c.at(ms(0));
        let settings = AgentSettings { protocol: 9, ..AgentSettings::new(100, LEASE, Allowlist::any()) };
        let mut s = Session::new(Arc::new(settings), 42, c.at(Duration::ZERO));
        // As agents of version 9 did: the exact version or a refusal.
        let hello = |v| msg(coordinator_msg::Msg::Hello(Hello { protocol_version: v, ..Default::default() }));
        let a = s.handle(hello(PROTOCOL_VERSION), now);
        let [Action::Send(agent_msg::Msg::Error(e)), ..] = &a[..] else { panic!("{a:?}") };
        assert!(
            e.message.contains(&format!("coordinator speaks version {PROTOCOL_VERSION}, this agent speaks version 9"))
        );
        let settings = AgentSettings { protocol: 9, ..AgentSettings::new(100, LEASE, Allowlist::any()) };
        let mut s = Session::new(Arc::new(settings), 42, c.at(Duration::ZERO));
        let a = s.handle(hello(9), now);
        let [Action::Send(agent_msg::Msg::Hello(h))] = &a[..] else { panic!("{a:?}") };
        assert_eq!((h.protocol_version, h.open_files), (9, 0), "version 9 has no open-file count");
        // The enums are not read: only the old fields (HTTP/2 as 2, a linear ramp).
        let w = Workload {
            v9_http_version: 2,
            v9_ramp_strategy: "linear".into(),
            graceful_stop_ms: Some(5),
            http: surge_proto::HttpChoice::Http3 as i32,
            ramp_start_rps: 1.0,
            ramp_end_rps: 2.0,
            ..Default::default()
        };
        let a = s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(Prepare { run_id: 1, workload: Some(w) }))), now);
        let [Action::CheckTarget { workload, .. }] = &a[..] else { panic!("{a:?}") };
        assert_eq!(workload.http(), surge_proto::HttpChoice::Http2);
        assert_eq!(workload.ramp(), surge_proto::RampStrategy::Linear);
        assert_eq!(workload.graceful_stop_ms, None, "unknown to version 9");
        // Probe is unknown to version 9: no answer.
        let probe = surge_proto::Probe { id: 1, ..Default::default() };
        assert!(s.handle(msg(coordinator_msg::Msg::Probe(probe)), now).is_empty());
        let mut s = Session::new(
            Arc::new(AgentSettings { protocol: 9, ..AgentSettings::new(100, LEASE, Allowlist::any()) }),
            42,
            c.at(Duration::ZERO),
        );
        s.handle(hello(9), now);
        s.running = Some(Running { run_id: 1, started_unix_ns: 0 });
        let finished = Event::EngineFinished {
            report: report(StopReason::Duration),
            cpu_seconds: 0.5,
            host: Default::default(),
            rows: Vec::new(),
        };
        let a = s.handle(finished, now);
        let Some(Action::Send(agent_msg::Msg::Done(d))) = a.last() else { panic!("{a:?}") };
        assert_eq!((d.v9_stop_reason.as_str(), d.stop()), ("duration", surge_proto::StopReason::Unspecified));
    }

    #[test]
    fn gpu_readings_go_out_unless_the_agent_speaks_an_older_protocol() {
        let c = Clock::new();
        let samples = || Event::GpuSamples(surge_proto::GpuSamples { run_id: 3, ..Default::default() });
        let a = session(&c).handle(samples(), c.at(ms(0)));
        assert!(matches!(&a[..], [Action::Send(agent_msg::Msg::GpuSamples(g))] if g.run_id == 3));
        let settings = AgentSettings { protocol: 9, ..AgentSettings::new(100, LEASE, Allowlist::any()) };
        let mut old = Session::new(Arc::new(settings), 42, c.at(Duration::ZERO));
        assert!(old.handle(samples(), c.at(ms(0))).is_empty(), "version 9 has no GpuSamples");
    }

    /// `w` with the choices a coordinator always sets.
    fn readable(w: Workload) -> Workload {
        Workload { http: surge_proto::HttpChoice::Auto as i32, ramp: surge_proto::RampStrategy::None as i32, ..w }
    }

    #[test]
    fn a_workload_with_a_value_this_agent_does_not_know_is_refused_before_anything_runs() {
        let c = Clock::new();
        let now = c.at(ms(0));
        let mut s = session(&c);
        // A newer coordinator's HTTP version: refused, naming the field and the value;
        // the target is not even checked (nothing resolved, connected or sent).
        let w = Workload { http: 7, ..readable(Workload::default()) };
        let a = s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(Prepare { run_id: 1, workload: Some(w) }))), now);
        let [Action::Send(agent_msg::Msg::Error(e))] = &a[..] else { panic!("{a:?}") };
        assert_eq!(e.code(), ErrorCode::BadRequest);
        assert_eq!(e.message, "workload field `http`: value 7 is not one this agent knows (a newer coordinator?)");
        let w = Workload { ramp: 9, ..readable(Workload::default()) };
        let a = s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(Prepare { run_id: 2, workload: Some(w) }))), now);
        let [Action::Send(agent_msg::Msg::Error(e))] = &a[..] else { panic!("{a:?}") };
        assert!(e.message.contains("`ramp`: value 9"), "{}", e.message);
        // The same workload with known values goes on to the target check.
        let a = s.handle(
            msg(coordinator_msg::Msg::Prepare(Box::new(Prepare {
                run_id: 3,
                workload: Some(readable(Workload::default())),
            }))),
            now,
        );
        assert!(matches!(&a[..], [Action::CheckTarget { run_id: 3, .. }]), "{a:?}");
    }

    #[test]
    fn refusals_are_errors_with_their_codes() {
        let c = Clock::new();
        let now = c.at(ms(0));
        let mut s = session(&c);
        let hello = Hello { protocol_version: PROTOCOL_VERSION - 1, ..Default::default() };
        let a = s.handle(msg(coordinator_msg::Msg::Hello(hello)), now);
        assert_eq!(
            sent(&a),
            [format!("error {}", ErrorCode::ProtocolMismatch as i32), "close: protocol mismatch".into()]
        );
        let mut s = session(&c);
        let start = Start { run_id: 4, ..Default::default() };
        let a = s.handle(msg(coordinator_msg::Msg::Start(start)), now);
        assert_eq!(sent(&a), [format!("error {}", ErrorCode::BadRequest as i32)]);
        let w = Workload { max_concurrency: 101, ..Default::default() };
        let a = s.handle(Event::TargetChecked { run_id: 1, workload: Box::new(w), verdict: Ok(()) }, now);
        assert_eq!(sent(&a), [format!("error {}", ErrorCode::OverCapacity as i32)]);
        let refused = Refused::NoHost { url: "x".into() };
        let a = s.handle(
            Event::TargetChecked { run_id: 1, workload: Box::new(Workload::default()), verdict: Err(refused) },
            now,
        );
        assert_eq!(sent(&a), [format!("error {}", ErrorCode::TargetNotAllowed as i32)]);
        start_run(&mut s, now);
        let a = s.handle(msg(coordinator_msg::Msg::Prepare(Box::new(Prepare { run_id: 2, workload: None }))), now);
        assert_eq!(sent(&a), [format!("error {}", ErrorCode::Busy as i32)]);
    }

    #[test]
    fn server_scrapes_go_out_and_scrape_last_reaches_the_driver() {
        let c = Clock::new();
        let mut s = session(&c);
        let m = ServerMetrics { run_id: 7, baseline: true, ..Default::default() };
        let a = s.handle(Event::ServerMetrics(m), c.at(ms(10)));
        assert!(matches!(&a[..], [Action::Send(agent_msg::Msg::ServerMetrics(m))] if m.run_id == 7 && m.baseline));
        let a = s.handle(msg(coordinator_msg::Msg::ScrapeLast(surge_proto::ScrapeLast { run_id: 7 })), c.at(ms(20)));
        assert_eq!(sent(&a), vec!["scrape last 7"]);
    }
}
