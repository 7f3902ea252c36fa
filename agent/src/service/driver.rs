//! A session's I/O loop: `select!` turns each input (a coordinator message, the end or
//! failure of the stream, a resumed stream, the heartbeat and lease timers, the
//! batch-flush tick or a full batch, the end of a target check, a prepare or a run, the
//! daemon's shutdown) into one [`Event`], [`Session::handle`] decides, and the loop
//! performs the [`Action`]s in order. It owns what the state machine must not: the
//! current stream pair, the engine's prepared workload and running task, the run's sink
//! and counters, the CPU meter.

use super::AgentSettings;
use super::allowlist::Refused;
use super::batch::{BATCH_INTERVAL, BatchSink};
use super::scraping;
use super::session::{Action, End, Event, Live, Now, PrepInfo, Reading, Session};
use crate::cpu::{self, CpuMeter, HostMeter};
use crate::engine::stats::Stats;
use crate::engine::{self, Control, EngineError, Prepared, Report};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use surge_core::beat::next_slot;
use surge_proto::{AgentMsg, CoordinatorMsg, Row, Workload, agent_msg};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// The coordinator's messages on the session's current stream.
pub(crate) type Inbound = Pin<Box<dyn Stream<Item = Result<CoordinatorMsg, Status>> + Send>>;
/// The session's messages to the coordinator on its current stream.
pub(crate) type Outbound = mpsc::UnboundedSender<Result<AgentMsg, Status>>;

/// A fresh stream that resumes the session (D2).
pub(crate) struct Attach {
    pub inbound: Inbound,
    pub tx: Outbound,
    pub peer: String,
}

/// A session's id, its first stream, and where resuming streams arrive.
pub(crate) struct Link {
    pub id: u64,
    pub inbound: Inbound,
    pub tx: Outbound,
    pub attach: mpsc::Receiver<Attach>,
    /// False in-process: the stream cannot break, so batches are not kept for a resend.
    pub resumable: bool,
}

/// Results of the session's background tasks.
enum Internal {
    Checked {
        run_id: u64,
        workload: Box<Workload>,
        verdict: Result<(), Refused>,
    },
    Prepared(u64, Box<Result<Prepared, EngineError>>),
    Finished {
        report: Report,
        cpu_seconds: f64,
        host: cpu::HostSample,
    },
    Scraped(surge_proto::ServerMetrics),
    /// A reading of this host's GPUs (`--gpu nvml`).
    Gpu(surge_proto::GpuSamples),
}

/// The engine side of the run in progress.
struct RunHandle {
    stop: CancellationToken,
    stats: Arc<Stats>,
    sink: Arc<BatchSink>,
}

struct Driver {
    session: Session,
    settings: Arc<AgentSettings>,
    tx: Outbound,
    cpu: CpuMeter,
    host: HostMeter,
    internal_tx: mpsc::Sender<Internal>,
    /// The workload prepared for the session's `prepared` run.
    prepared: Option<(u64, Prepared)>,
    run: Option<RunHandle>,
    /// The run's scraping of the server's metrics, and what stops its periodic scrapes.
    scraping: Option<(scraping::Job, CancellationToken)>,
    /// This agent's label in its live metrics.
    live_label: String,
    /// Periodic scrapes dropped (the queue to the session was full) since the last one
    /// sent: told to the coordinator with the next (`ServerMetrics.dropped_before`).
    scrapes_dropped: Arc<std::sync::atomic::AtomicU64>,
}

/// Runs one session until it ends, on `link`'s stream and then on each stream that
/// resumes it.
pub(crate) async fn run(settings: Arc<AgentSettings>, shutdown: CancellationToken, link: Link, peer: String) {
    let Link { id, mut inbound, tx, mut attach, resumable } = link;
    tracing::info!(%peer, id, "session opened");
    // Small: each task sends one result and waits its turn.
    let (internal_tx, mut internal_rx) = mpsc::channel(4);
    let live = settings.live.clone();
    if let Some(g) = live.as_ref().and_then(|l| l.sessions.as_ref()) {
        g.inc();
    }
    let mut d = Driver {
        live_label: gethostname::gethostname().to_string_lossy().into_owned(),
        session: Session::new(Arc::clone(&settings), id, Now::read()).resumable(resumable),
        settings,
        tx,
        cpu: CpuMeter::default(),
        host: HostMeter::default(),
        internal_tx,
        prepared: None,
        scraping: None,
        run: None,
        scrapes_dropped: Arc::default(),
    };
    let mut flush = flush_schedule(Now::read());
    let mut inbound_open = true;
    let end = loop {
        let sink = d.run.as_ref().map(|r| Arc::clone(&r.sink));
        let full = async {
            match &sink {
                Some(s) => s.full().await,
                None => std::future::pending().await,
            }
        };
        let lease = d.session.lease_deadline();
        let event = tokio::select! {
            m = inbound.next(), if inbound_open => match m {
                Some(Ok(m)) => Event::Message(m),
                // A broken stream, or one that ended without a Bye, may be resumed on a
                // fresh one within the lease.
                Some(Err(status)) => {
                    inbound_open = false;
                    tracing::warn!(%peer, error = %status.message(), "control stream broken; waiting for a resume");
                    Event::Detached
                }
                None => {
                    inbound_open = false;
                    tracing::info!(%peer, "control stream ended without a Bye; waiting for a resume");
                    Event::Detached
                }
            },
            Some(a) = attach.recv() => {
                tracing::info!(peer = %a.peer, id, "session resumed on a new stream");
                (inbound, d.tx, inbound_open) = (a.inbound, a.tx, true);
                Event::Resumed
            },
            Some(ev) = internal_rx.recv() => d.internal(ev),
            _ = sleep_until(d.session.next_heartbeat()) => Event::HeartbeatDue {
                health: d.session.health_due(Instant::now()).then(|| Reading {
                    cpu_percent: d.cpu.sample(),
                    host: d.host.sample(),
                    live: d.run.as_ref().map(|r| Live::read(&r.stats)),
                }),
            },
            _ = sleep_until(lease.unwrap_or_else(Instant::now)), if lease.is_some() => Event::LeaseDeadline,
            _ = flush.tick() => match d.drain() {
                Some(rows) => Event::Rows(rows),
                None => continue,
            },
            _ = full => match d.drain() {
                Some(rows) => Event::Rows(rows),
                None => continue,
            },
            _ = shutdown.cancelled(), if !d.session.is_closing() => Event::Shutdown,
        };
        let actions = d.session.handle(event, Now::read());
        if let Some(end) = d.perform(actions).await {
            break end;
        }
    };
    // An ended session never leaves load (or scraping) running behind it.
    if let Some(r) = d.run.take() {
        r.stop.cancel();
    }
    if let Some((_, stop)) = d.scraping.take() {
        stop.cancel();
    }
    if let Some(g) = live.as_ref().and_then(|l| l.sessions.as_ref()) {
        g.dec();
    }
    tracing::info!(%peer, reason = end.as_str(), "session closed");
}

/// When the rows recorded are sent: every [`BATCH_INTERVAL`] on the heartbeats' grid, the
/// whole multiples of the interval in unix time (D83), from the first point after `now`.
/// A fleet's batches then reach the coordinator together, and its links and collection
/// loop wake once per interval for all of them. A tick missed is skipped, not made up.
fn flush_schedule(now: Now) -> tokio::time::Interval {
    let mut flush = tokio::time::interval_at(next_slot(now.at, now.unix_ns, BATCH_INTERVAL), BATCH_INTERVAL);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    flush
}

impl Driver {
    /// The run's rows recorded since the last flush, if any.
    fn drain(&self) -> Option<Vec<Row>> {
        let rows = self.run.as_ref()?.sink.drain();
        self.observe(&rows);
        (!rows.is_empty()).then_some(rows)
    }

    /// Rows into the live metrics, when served.
    fn observe(&self, rows: &[Row]) {
        if let Some(l) = &self.settings.live {
            for r in rows {
                l.row(&self.live_label, r);
            }
        }
    }

    /// A background task's result as a session event (keeping the engine's side here).
    fn internal(&mut self, ev: Internal) -> Event {
        match ev {
            Internal::Checked { run_id, workload, verdict } => Event::TargetChecked { run_id, workload, verdict },
            Internal::Prepared(run_id, res) => match *res {
                Ok(p) => {
                    let info =
                        PrepInfo { connections_open: p.connections_open, warmups_completed: p.warmups_completed };
                    self.prepared = Some((run_id, p));
                    Event::Prepared { run_id, result: Ok(info) }
                }
                Err(e) => Event::Prepared { run_id, result: Err(e) },
            },
            Internal::Finished { report, cpu_seconds, host } => {
                let rows = self.run.take().map(|r| r.sink.drain()).unwrap_or_default();
                self.observe(&rows);
                Event::EngineFinished { report, cpu_seconds, host, rows }
            }
            Internal::Scraped(mut m) => {
                m.dropped_before = self.scrapes_dropped.swap(0, std::sync::atomic::Ordering::Relaxed);
                Event::ServerMetrics(m)
            }
            Internal::Gpu(g) => Event::GpuSamples(g),
        }
    }

    /// Performs `actions` in order; `Some` when the session must end.
    async fn perform(&mut self, actions: Vec<Action>) -> Option<End> {
        for action in actions {
            match action {
                Action::Send(m) => {
                    if let (Some(l), agent_msg::Msg::Health(h)) = (&self.settings.live, &m) {
                        l.health(&self.live_label, h);
                    }
                    // A closed stream means the coordinator is gone: the lease ends the
                    // session unless it resumes, and what was not acknowledged is resent.
                    let _ = self.tx.send(Ok(AgentMsg { msg: Some(m) }));
                }
                Action::CheckTarget { run_id, workload } => {
                    let (settings, tx) = (Arc::clone(&self.settings), self.internal_tx.clone());
                    tokio::spawn(async move {
                        // The target (each of its endpoints, D69), and any /metrics URL it
                        // asks this agent to scrape.
                        let mut verdict = settings.allowed.check(&workload.base_url).await;
                        let endpoints = workload.endpoints.iter().map(|e| &e.base_url);
                        for url in endpoints.chain(&workload.scrape_urls) {
                            if verdict.is_ok() {
                                verdict = settings.allowed.check(url).await;
                            }
                        }
                        let _ = tx.send(Internal::Checked { run_id, workload: Box::new(workload), verdict }).await;
                    });
                }
                Action::Prepare { run_id, workload } => {
                    let (tx, local) = (self.internal_tx.clone(), self.settings.local_address);
                    tokio::spawn(async move {
                        let began = std::time::Instant::now();
                        // On the engine's runtime: the connections it opens are driven there.
                        let res = match engine::runtime().spawn(engine::prepare_on(workload, local)).await {
                            Ok(res) => res,
                            Err(source) => Err(EngineError::Task { what: "prepare", source }),
                        };
                        if let Ok(p) = &res {
                            let ms = began.elapsed().as_millis() as u64;
                            tracing::info!(run_id, connections = p.connections_open, ms, "prepared; Ready follows");
                        }
                        let _ = tx.send(Internal::Prepared(run_id, Box::new(res))).await;
                    });
                }
                Action::DiscardPrepared => self.prepared = None,
                Action::StartEngine { run_id, start_at, deadline } => {
                    let Some((_, prepared)) = self.prepared.take().filter(|(id, _)| *id == run_id) else {
                        tracing::error!(run_id, "start of a run that is not prepared here");
                        continue;
                    };
                    self.start(run_id, prepared, start_at, deadline);
                }
                Action::StopEngine => {
                    if let Some(r) = &self.run {
                        r.stop.cancel();
                    }
                }
                Action::ScrapeLast { run_id } => {
                    if let Some((job, stop)) = self.scraping.take().filter(|(j, _)| j.run_id() == run_id) {
                        stop.cancel();
                        let tx = self.internal_tx.clone();
                        tokio::spawn(async move {
                            let _ = tx.send(Internal::Scraped(job.once(false, true).await)).await;
                        });
                    }
                }
                Action::Probe(p) => {
                    let (settings, tx) = (Arc::clone(&self.settings), self.tx.clone());
                    tokio::spawn(async move {
                        let reply = super::probe::probe(&settings, p).await;
                        let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::ProbeReply(reply)) }));
                    });
                }
                Action::Close(end) => return Some(end),
            }
        }
        None
    }

    fn start(&mut self, run_id: u64, prepared: Prepared, start_at: Instant, deadline: Instant) {
        let stop = CancellationToken::new();
        let sink = Arc::new(BatchSink::default());
        let ctl = Control { start_at: start_at.into_std(), deadline: deadline.into_std(), stop: stop.clone() };
        self.run = Some(RunHandle { stop, stats: prepared.stats(), sink: Arc::clone(&sink) });
        let tx = self.internal_tx.clone();
        let sink: Arc<dyn engine::Sink> = sink;
        // The server's metrics around the run: a baseline before the load, then one every
        // interval until the coordinator asks for the last (every agent is done).
        if let Some((_, stop)) = self.scraping.take() {
            stop.cancel();
        }
        let scraping = scraping::Job::of(run_id, prepared.workload(), self.settings.local_address);
        if let Some(job) = &scraping {
            self.scraping = Some((job.clone(), CancellationToken::new()));
        }
        let periodic_stop = self.scraping.as_ref().map(|(_, s)| s.clone());
        let dropped = Arc::clone(&self.scrapes_dropped);
        // This host's GPUs (D36): a reading before the load, one every interval, one after.
        let interval = Duration::from_millis(prepared.workload().gpu_sample_interval_ms);
        let gpu = self.settings.gpu.clone().filter(|_| !interval.is_zero());
        tokio::spawn(async move {
            let gpu_sampling = gpu.map(|g| {
                let stop = CancellationToken::new();
                tokio::spawn(sample_gpus(g.clone(), run_id, interval, tx.clone(), stop.clone()));
                (g, stop)
            });
            if let (Some(job), Some(stop)) = (scraping, periodic_stop) {
                // Never later than the load's start.
                let baseline = tokio::time::timeout_at(start_at, job.once(true, false))
                    .await
                    .unwrap_or_else(|_| job.failed("no answer before the load began", true));
                let _ = tx.send(Internal::Scraped(baseline)).await;
                let tx = tx.clone();
                tokio::spawn(async move {
                    job.periodic(stop, |m| {
                        if tx.try_send(Internal::Scraped(m)).is_err() {
                            dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    })
                    .await
                });
            }
            let cpu_at_start = cpu::engine_cpu_time();
            let mut host = HostMeter::default();
            let report = match engine::runtime().spawn(engine::run(prepared, sink, ctl)).await {
                Ok(report) => report,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => return,
            };
            let cpu_seconds = cpu::engine_cpu_time().saturating_sub(cpu_at_start).as_secs_f64();
            let host = host.sample();
            if let Some((g, stop)) = gpu_sampling {
                stop.cancel();
                if let Some(last) = read_gpus(g, run_id).await {
                    let _ = tx.send(Internal::Gpu(last)).await;
                }
            }
            let _ = tx.send(Internal::Finished { report, cpu_seconds, host }).await;
        });
    }
}

/// One reading of every GPU, off the runtime's threads (NVML calls block).
async fn read_gpus(g: Arc<crate::gpu::GpuReader>, run_id: u64) -> Option<surge_proto::GpuSamples> {
    let gpus = tokio::task::spawn_blocking(move || g.read()).await.ok()?;
    let sampled_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    Some(surge_proto::GpuSamples { run_id, sampled_unix_ns, gpus })
}

/// Reads the GPUs now and every `interval` until `stop`; a reading the session cannot take
/// at once is dropped (the next one carries the counters on).
async fn sample_gpus(
    g: Arc<crate::gpu::GpuReader>,
    run_id: u64,
    interval: Duration,
    tx: mpsc::Sender<Internal>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Some(s) = read_gpus(Arc::clone(&g), run_id).await
            && !stop.is_cancelled()
        {
            let _ = tx.try_send(Internal::Gpu(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Allowlist;
    use std::time::Duration;
    use surge_proto::{Hello, PROTOCOL_VERSION, agent_msg, coordinator_msg};

    type ToAgent = mpsc::Sender<Result<CoordinatorMsg, Status>>;
    type FromAgent = mpsc::UnboundedReceiver<Result<AgentMsg, Status>>;

    /// A session on channels (no socket): what the coordinator sends, what it receives.
    fn open(lease: Duration) -> (ToAgent, FromAgent) {
        let settings = Arc::new(AgentSettings::new(10, lease, Allowlist::any()));
        let (in_tx, in_rx) = mpsc::channel(16);
        let (tx, rx) = mpsc::unbounded_channel();
        let inbound: Inbound = Box::pin(tokio_stream::wrappers::ReceiverStream::new(in_rx));
        let (_attach_tx, attach) = mpsc::channel(1);
        tokio::spawn(run(
            settings,
            CancellationToken::new(),
            Link { id: 1, inbound, tx, attach, resumable: true },
            "test".into(),
        ));
        (in_tx, rx)
    }

    fn heartbeat() -> Result<CoordinatorMsg, Status> {
        Ok(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Heartbeat(surge_proto::Heartbeat { sent_unix_ns: 0 })) })
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_leave_every_100ms_and_silence_ends_the_session() {
        let t0 = Instant::now();
        let (coordinator, mut rx) = open(Duration::from_secs(3));
        let hello = Hello { protocol_version: PROTOCOL_VERSION, ..Default::default() };
        coordinator.send(Ok(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Hello(hello)) })).await.unwrap();
        // The coordinator talks every 500 ms until 5.5 s, then falls silent.
        let talk = tokio::spawn(async move {
            for _ in 0..=10 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                coordinator.send(heartbeat()).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            coordinator // kept open: silence, not a closed stream
        });
        let (mut beats, mut healths, mut hello_reply) = (0, 0, false);
        let mut sent = Vec::new();
        while let Some(m) = rx.recv().await {
            sent.push(t0.elapsed().as_millis() as u64);
            match m.unwrap().msg.unwrap() {
                agent_msg::Msg::Heartbeat(_) => beats += 1,
                agent_msg::Msg::Health(_) => healths += 1,
                agent_msg::Msg::Hello(_) => hello_reply = true,
                other => panic!("unexpected {other:?}"),
            }
        }
        // The channel closed: the session ended, 3 s after the last message (at 5.5 s).
        let ended = t0.elapsed();
        let _coordinator = talk.await.unwrap();
        assert!(hello_reply);
        // Something every 100 ms at most until the lease ran out (D2): a health report
        // every second, heartbeats in between on the grid (D79), whose phase is the wall
        // clock's.
        assert_eq!(sent.first(), Some(&0));
        let gaps: Vec<u64> = sent.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g <= 100), "{sent:?}");
        assert!(8400 <= *sent.last().unwrap(), "{sent:?}");
        // About 9 heartbeats a second: the reports, on whole seconds of the grid, take
        // the tenth's place (a report off the grid would add a heartbeat: ~85).
        assert!((74..=79).contains(&beats), "{beats} heartbeats: {sent:?}");
        assert!((9..=10).contains(&healths), "{healths} reports: one at once, then each whole second");
        assert_eq!(ended, Duration::from_millis(8500));
    }

    #[tokio::test(start_paused = true)]
    async fn batches_leave_on_the_grid_of_unix_time() {
        let iv = BATCH_INTERVAL.as_nanos() as i64;
        for into_ms in [0, 1, 37, 99] {
            // Started when the wall clock read 1,700,000,000.<into_ms> s.
            let now = Now { at: Instant::now(), unix_ns: 1_700_000_000_000_000_000 + into_ms * 1_000_000 };
            let mut flush = flush_schedule(now);
            let mut ticks = Vec::new();
            for _ in 0..4 {
                let t = flush.tick().await;
                ticks.push(now.unix_ns + (t - now.at).as_nanos() as i64);
            }
            assert!(ticks.iter().all(|u| u % iv == 0), "started {into_ms} ms into the interval: {ticks:?}");
            assert!(
                ticks[0] > now.unix_ns && ticks[0] - now.unix_ns <= iv,
                "the first point after the start: {ticks:?}"
            );
            assert!(ticks.windows(2).all(|w| w[1] - w[0] == iv), "{ticks:?}");
        }
    }
}
