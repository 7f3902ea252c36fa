//! One run across a fleet of agents: hello and version check, clock offsets, the split,
//! two-phase start (Prepare -> Ready -> Start at one instant), then batches, acks,
//! heartbeats and loss detection until every agent is done (or lost), and the rows
//! placed on one global timeline.

use super::clock::{self, Exchange, Offset};
use super::collect::{Action, Collector, Input};
use super::outcome::{AgentReport, GlobalRow, Halt, Outcome, RunStatus, finished_requests};
use super::{Event, Fleet, now_ns, wire};
use crate::plan::RunPlan;
use crate::plan::split;
use crate::target::gpu::{self, GpuScrape};
use crate::target::scrape::{self, ServerScrape};
use std::time::{Duration, Instant};
use surge_core::data::share::Stripe;
use surge_proto::{
    ClockPing, HelloReply, PROTOCOL_VERSION, Prepare, ScrapeLast, Start, Workload, agent_msg, coordinator_msg::Msg, v9,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const CLOCK_PINGS: u64 = 8;

/// Who hears about a run while it goes: its rows as they arrive, health reports,
/// progress and notices (an agent lost, an interrupt taken). The fleet keeps no row and
/// does not know where they end up.
pub trait Observer: Send {
    /// Rows placed on the run's timeline.
    fn rows(&mut self, _rows: &[GlobalRow]) {}
    /// Agent `agent`'s health report, `t_s` seconds after the run's start.
    fn health(&mut self, _agent: usize, _health: &surge_proto::Health, _t_s: f64) {}
    /// Requests finished so far.
    fn progress(&mut self, _finished: u64) {}
    /// Something the user should hear about now.
    fn notice(&mut self, _message: &str) {}
    /// A scrape of the server's metrics.
    fn server(&mut self, _scrape: &ServerScrape) {}
    /// A scrape of the GPU exporter pages.
    fn gpu(&mut self, _scrape: &GpuScrape) {}
    /// Whether the run has measured enough and should stop now (asked after each event).
    fn halt(&mut self) -> Option<Halt> {
        None
    }
    /// The run `run_id` starts at `start_unix_ns` (coordinator clock); `slices` are the
    /// agents' request shares (their global indices, how many).
    fn started(&mut self, _run_id: u64, _start_unix_ns: i64, _slices: &[(Stripe, u64)]) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl Observer for Silent {}

/// A failure that prevented the run (refusals, unreachable agents, timeouts).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// An agent refused or failed a step.
    #[error("agent {addr}: {message}")]
    Agent { addr: String, message: String },
    /// Some agents did not answer a step in time.
    #[error("no {what} within {timeout:?} from agent(s) {}", missing.join(", "))]
    Timeout { what: String, timeout: Duration, missing: Vec<String> },
}

fn agent_err(addr: &str, m: impl std::fmt::Display) -> RunError {
    RunError::Agent { addr: addr.to_string(), message: m.to_string() }
}

struct Runner<'a> {
    fleet: &'a mut Fleet,
    plan: &'a RunPlan,
    agents: Vec<AgentReport>,
    run_id: u64,
    observer: &'a mut dyn Observer,
    /// The run's planned start, coordinator clock (unix ns).
    start_ns: i64,
    /// `--profile`: the server's profiler, started once every agent is ready.
    profiler: Option<crate::target::profile::Profiler>,
    /// Why the observer ended the run early, if it did.
    halted: Option<Halt>,
}

/// What a session learned of one agent in its handshake.
#[derive(Debug, Clone)]
pub struct AgentBase {
    pub addr: String,
    pub hello: HelloReply,
    pub offset: Offset,
}

/// Sessions with every agent, past the handshake (versions checked, clocks measured),
/// ready for any number of runs.
#[derive(Debug)]
pub struct Session {
    fleet: Fleet,
    pub agents: Vec<AgentBase>,
}

impl Session {
    /// Hello and clock pings with every agent of `fleet`; `observer` hears the notices (a
    /// session resumed while it opened, D91).
    pub async fn open(mut fleet: Fleet, plan: &RunPlan, observer: &mut dyn Observer) -> Result<Self, RunError> {
        let agents: Vec<AgentReport> =
            fleet.addrs.iter().map(|a| AgentReport { addr: a.clone(), ..Default::default() }).collect();
        let mut r =
            Runner { fleet: &mut fleet, plan, agents, run_id: 0, observer, start_ns: 0, profiler: None, halted: None };
        r.handshake().await?;
        let agents =
            r.agents.into_iter().map(|a| AgentBase { addr: a.addr, hello: a.hello, offset: a.offset }).collect();
        Ok(Self { fleet, agents })
    }

    /// One run of `plan`; `observer` hears progress and notices.
    pub async fn run(&mut self, plan: &RunPlan, model: &str, observer: &mut dyn Observer) -> Result<Outcome, RunError> {
        let agents = self
            .agents
            .iter()
            .map(|b| AgentReport {
                addr: b.addr.clone(),
                hello: b.hello.clone(),
                offset: b.offset,
                ..Default::default()
            })
            .collect();
        let mut r = Runner {
            fleet: &mut self.fleet,
            plan,
            agents,
            run_id: now_ns() as u64,
            observer,
            start_ns: 0,
            profiler: None,
            halted: None,
        };
        let (status, started_at) = r.drive(model).await?;
        if let Some(p) = r.profiler.take() {
            for notice in p.stop().await {
                r.observer.notice(&notice);
            }
        }
        let (agents, halted) = (r.agents, r.halted);
        Ok(Outcome {
            agents,
            status,
            started_at,
            missing_agents: self.fleet.missing.clone(),
            agents_waited_s: self.fleet.waited.as_secs_f64(),
            halted,
        })
    }

    /// Asks every agent whether it may load `plan`'s target and reaches it
    /// (`GET /v1/models` from the agent): one reply per agent, in agent order.
    /// Each agent's try of the endpoint at `base_url`; `None` for an agent of version 9,
    /// which cannot probe (D43).
    pub async fn probe(
        &mut self,
        plan: &RunPlan,
        base_url: &str,
    ) -> Result<Vec<Option<surge_proto::ProbeReply>>, RunError> {
        let legacy: Vec<bool> = self.agents.iter().map(|b| b.hello.protocol_version == v9::VERSION).collect();
        let agents = self.agents.iter().map(|b| AgentReport { addr: b.addr.clone(), ..Default::default() }).collect();
        let mut r = Runner {
            fleet: &mut self.fleet,
            plan,
            agents,
            run_id: 0,
            observer: &mut Silent,
            start_ns: 0,
            profiler: None,
            halted: None,
        };
        let id = now_ns() as u64;
        let probe = surge_proto::Probe {
            id,
            base_url: base_url.to_string(),
            insecure: plan.target_tls.insecure,
            ca_pem: plan.target_tls.ca_pem.clone(),
        };
        for (i, _) in legacy.iter().enumerate().filter(|(_, l)| !**l) {
            r.fleet.send(i, Msg::Probe(probe.clone())).await;
        }
        let again = |i: usize| (!legacy[i]).then(|| Msg::Probe(probe.clone()));
        let answered: Vec<Option<Option<surge_proto::ProbeReply>>> = legacy.iter().map(|l| l.then_some(None)).collect();
        r.gather_into("probe reply", Duration::from_secs(15), answered, again, |m, _| match m {
            agent_msg::Msg::ProbeReply(p) if p.id == id => Some(Some(p)),
            _ => None,
        })
        .await
    }

    /// Agents given but not reached (`--min-agents`).
    pub fn missing(&self) -> &[String] {
        &self.fleet.missing
    }

    /// Ends every session.
    pub fn close(self) {
        self.fleet.close();
    }

    /// Closes the session and waits (at most `limit`) for every link's Bye.
    pub async fn close_and_wait(self, limit: Duration) {
        self.fleet.close_and_wait(limit).await;
    }
}

/// Runs `plan` once on `fleet` and closes it.
pub async fn execute(fleet: Fleet, plan: &RunPlan, model: &str) -> Result<Outcome, RunError> {
    let mut session = Session::open(fleet, plan, &mut Silent).await?;
    let res = session.run(plan, model, &mut Silent).await;
    session.close();
    res
}

impl Runner<'_> {
    fn absorb(&mut self, agent: usize, msg: &agent_msg::Msg) {
        if self.agents[agent].absorb(msg, Instant::now()) {
            self.observer.progress(finished_requests(&self.agents));
        }
    }

    /// Waits until `pick` accepted one message (with its arrival time) from every agent.
    async fn gather<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        pick: impl FnMut(agent_msg::Msg, i64) -> Option<T>,
    ) -> Result<Vec<T>, RunError>
    where
        T: Clone,
    {
        self.gather_resending(what, timeout, |_| None, pick).await
    }

    /// [`Self::gather`], resending `resend(agent)` to an agent whose session resumed before
    /// it answered: the request may have gone into the broken stream (the agent answers a
    /// duplicate, never acts on it twice).
    async fn gather_resending<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        resend: impl Fn(usize) -> Option<Msg>,
        pick: impl FnMut(agent_msg::Msg, i64) -> Option<T>,
    ) -> Result<Vec<T>, RunError>
    where
        T: Clone,
    {
        let none = vec![None; self.fleet.len()];
        self.gather_into(what, timeout, none, resend, pick).await
    }

    /// [`Self::gather_resending`] from the agents whose entry in `got` is still `None`.
    async fn gather_into<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut got: Vec<Option<T>>,
        resend: impl Fn(usize) -> Option<Msg>,
        mut pick: impl FnMut(agent_msg::Msg, i64) -> Option<T>,
    ) -> Result<Vec<T>, RunError>
    where
        T: Clone,
    {
        let until = Instant::now() + timeout;
        while got.iter().any(Option::is_none) {
            let left = until.saturating_duration_since(Instant::now());
            let Some(ev) = self.fleet.next(left).await else {
                let missing: Vec<&str> = got
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.is_none())
                    .map(|(i, _)| self.fleet.addrs[i].as_str())
                    .collect();
                let missing = missing.into_iter().map(String::from).collect();
                return Err(RunError::Timeout { what: what.to_string(), timeout, missing });
            };
            match ev {
                Event::Resumed { agent, after } => {
                    let addr = &self.fleet.addrs[agent];
                    self.observer
                        .notice(&format!("agent {addr}: control connection resumed after {:.1}s", after.as_secs_f64()));
                    if got[agent].is_none()
                        && let Some(m) = resend(agent)
                    {
                        self.fleet.send(agent, m).await;
                    }
                }
                Event::Closed { agent, error } => {
                    let addr = &self.fleet.addrs[agent];
                    return Err(agent_err(
                        addr,
                        format!("session ended during {what}: {}", error.unwrap_or_else(|| "closed".into())),
                    ));
                }
                Event::Msg { agent, msg, recv_ns } => {
                    self.absorb(agent, &msg);
                    match msg {
                        agent_msg::Msg::Error(e) => return Err(agent_err(&self.fleet.addrs[agent], e.message)),
                        agent_msg::Msg::Heartbeat(_) | agent_msg::Msg::Health(_) => {}
                        other => {
                            if let Some(v) = pick(other, recv_ns) {
                                got[agent] = Some(v);
                            }
                        }
                    }
                }
                // A batch of an earlier run, resent after a resume (its link
                // acknowledged it, D94): only a sign of life here.
                Event::Batch { agent, .. } => self.agents[agent].heard(Instant::now()),
                // Before the load, the link's own window bounds a resume (D72 is the
                // collection's rule).
                Event::Reattaching { .. } => {}
            }
        }
        Ok(got.into_iter().map(|g| g.expect("all gathered")).collect())
    }

    async fn broadcast(&self, f: impl Fn(usize) -> Msg) {
        for i in 0..self.fleet.len() {
            self.fleet.send(i, f(i)).await;
        }
    }

    async fn handshake(&mut self) -> Result<(), RunError> {
        // 1. Hello (sent as each stream opened): versions, capacity, allowlists.
        let hellos = self
            .gather("Hello reply", Duration::from_secs(10), |m, _| match m {
                agent_msg::Msg::Hello(h) => Some(h),
                _ => None,
            })
            .await?;
        for (i, h) in hellos.iter().enumerate() {
            // An agent newer than this coordinator answers with its own version (D43).
            if h.protocol_version != PROTOCOL_VERSION && h.protocol_version != v9::VERSION {
                let upgrade = if h.protocol_version > PROTOCOL_VERSION { "the coordinator" } else { "the agent" };
                return Err(agent_err(
                    &self.fleet.addrs[i],
                    format!(
                        "protocol version mismatch: this coordinator speaks version {PROTOCOL_VERSION} (and drives \
                         agents of version {}), the agent speaks version {}: upgrade {upgrade}",
                        v9::VERSION,
                        h.protocol_version
                    ),
                ));
            }
            self.agents[i].hello = h.clone();
        }
        // 2. Clock offsets: sequential pings, minimum round trip kept.
        let mut exchanges: Vec<Vec<Exchange>> = vec![Vec::new(); self.fleet.len()];
        for seq in 0..CLOCK_PINGS {
            let t1 = now_ns();
            self.broadcast(|_| Msg::Ping(ClockPing { seq, t1_unix_ns: t1 })).await;
            let ping = |_| Some(Msg::Ping(ClockPing { seq, t1_unix_ns: t1 }));
            let pongs = self
                .gather_resending("clock pong", Duration::from_secs(5), ping, |m, t4| match m {
                    agent_msg::Msg::Pong(p) if p.t1_unix_ns == t1 => {
                        Some(Exchange { t1: p.t1_unix_ns, t2: p.t2_unix_ns, t3: p.t3_unix_ns, t4 })
                    }
                    _ => None,
                })
                .await?;
            for (i, e) in pongs.into_iter().enumerate() {
                exchanges[i].push(e);
            }
        }
        for (i, ex) in exchanges.iter().enumerate() {
            self.agents[i].offset = clock::estimate(ex).unwrap_or_default();
        }
        Ok(())
    }

    /// One run over the fleet, in its numbered steps (split and prepare, ready, start, the
    /// load's events, the end). Long: the steps share the agents' state and read in order.
    async fn drive(&mut self, model: &str) -> Result<(RunStatus, chrono::DateTime<chrono::Utc>), RunError> {
        let plan = self.plan;
        let hellos: Vec<HelloReply> = self.agents.iter().map(|a| a.hello.clone()).collect();
        // 3. Split by capacity (cores) and prepare.
        let weights: Vec<u32> = hellos.iter().map(|h| h.cores.max(1)).collect();
        let sessions = plan.multi_turn.as_ref().and_then(|m| m.concurrency);
        let shares = split::split_sessions(
            &weights,
            plan.num_prompts,
            plan.max_concurrency,
            plan.request_rate,
            plan.num_warmups,
            sessions,
        );
        for (i, s) in shares.iter().enumerate() {
            if let Some(total) = sessions
                && s.sessions == 0
                && s.num_prompts > 0
            {
                return Err(agent_err(
                    &self.fleet.addrs[i],
                    format!(
                        "--multi-turn-concurrency {total} leaves it no open session: raise it to the number of agents at least"
                    ),
                ));
            }
            // A session has at most one request in flight: with no request bound, the
            // open sessions are the agent's in-flight requests.
            if s.max_concurrency == 0 && s.sessions > hellos[i].max_in_flight {
                return Err(agent_err(
                    &self.fleet.addrs[i],
                    format!(
                        "its share of --multi-turn-concurrency ({}) exceeds its max-in-flight {} (give --max-concurrency)",
                        s.sessions, hellos[i].max_in_flight
                    ),
                ));
            }
            if s.max_concurrency > hellos[i].max_in_flight {
                return Err(agent_err(
                    &self.fleet.addrs[i],
                    format!(
                        "its share of --max-concurrency ({}) exceeds its max-in-flight {}",
                        s.max_concurrency, hellos[i].max_in_flight
                    ),
                ));
            }
            self.agents[i].share = Some(s.clone());
        }
        let run_id = self.run_id;
        // The wire edge (D46): each agent's Workload in the fields its version reads, or
        // the feature it lacks, before any load.
        let mut workloads: Vec<Workload> = Vec::with_capacity(shares.len());
        for (i, s) in shares.iter().enumerate() {
            let w = wire::workload(plan, model, s, i, run_id);
            let (version, listed) = (self.agents[i].hello.protocol_version, &self.agents[i].hello.features);
            workloads.push(wire::for_version(w, version, listed).map_err(|l| agent_err(&self.fleet.addrs[i], l))?);
        }
        self.broadcast(|i| Msg::Prepare(Box::new(Prepare { run_id, workload: Some(workloads[i].clone()) }))).await;
        // Agents answer Ready after their initial test: it waits for a loading server, and
        // each attempt is bounded by --max-run-time.
        let ready_wait = Duration::from_secs(120) + plan.ready_timeout.unwrap_or_default() + plan.max_run_time;
        let prepare = |i: usize| Some(Msg::Prepare(Box::new(Prepare { run_id, workload: Some(workloads[i].clone()) })));
        self.gather_resending("Ready", ready_wait, prepare, |m, _| match m {
            agent_msg::Msg::Ready(r) if r.run_id == run_id => Some(()),
            _ => None,
        })
        .await?;
        // 4. The server's metrics before the load (here, unless an agent scrapes), then
        //    start everyone at one instant of the coordinator's clock.
        let scraping = self.baseline_scrape().await;
        if let Some(pp) = &plan.profile {
            let mut notices = Vec::new();
            let tls = plan.target_tls.client();
            self.profiler = Some(crate::target::profile::Profiler::start(pp, &plan.base_url, tls, &mut notices).await);
            for n in notices {
                self.observer.notice(&n);
            }
        }
        let gpu_baseline = match &plan.gpu {
            Some(gp) => Some((now_ns(), gpu::once(gp).await)),
            None => None,
        };
        let max_rtt = self.agents.iter().map(|a| a.offset.rtt_ns).max().unwrap_or(0);
        let lead_ns = (250_000_000i64).max(4 * max_rtt);
        let start_ns = now_ns() + lead_ns;
        self.start_ns = start_ns;
        let slices: Vec<(Stripe, u64)> = self
            .agents
            .iter()
            .map(|a| a.share.as_ref().map_or((Stripe::contiguous(0), 0), |s| (s.indices.clone(), s.num_prompts)))
            .collect();
        self.observer.started(run_id, start_ns, &slices);
        if let Some((s, baseline_ns)) = &scraping {
            let mut b = s.clone();
            b.t_s = (baseline_ns - start_ns) as f64 / 1e9;
            self.observer.server(&b);
        }
        if let Some((at, result)) = gpu_baseline {
            if let Err(e) = &result {
                self.observer.notice(&format!("cannot scrape GPU telemetry: {e}"));
            }
            self.observer.gpu(&GpuScrape { t_s: (at - start_ns) as f64 / 1e9, result });
        }
        let started_at = chrono::DateTime::from_timestamp_nanos(start_ns);
        let limit = plan.max_run_time;
        for a in &mut self.agents {
            // An agent of version 9 has no graceful stop: the end of it is its deadline.
            let until = match (a.legacy(), legacy_graceful_end(plan)) {
                (true, Some(end)) => end.min(limit),
                _ => limit,
            };
            a.start = Some(Start {
                run_id,
                start_at_unix_ns: start_ns + a.offset.offset_ns,
                deadline_unix_ns: start_ns + a.offset.offset_ns + until.as_nanos() as i64,
            });
        }
        self.broadcast(|i| Msg::Start(self.agents[i].start.expect("set above"))).await;
        // 5. Collect until every agent is done or lost (scraping every interval).
        let stop_scraping = CancellationToken::new();
        let (scrape_tx, scrape_rx) = mpsc::channel(16);
        if let (Some(_), Some(sp)) = (&scraping, &plan.scrape) {
            tokio::spawn(scrape::periodic(sp.clone(), start_ns, scrape_tx, stop_scraping.clone()));
        }
        let (gpu_tx, gpu_rx) = mpsc::channel(16);
        if let Some(gp) = &plan.gpu {
            tokio::spawn(gpu::periodic(gp.clone(), start_ns, gpu_tx, stop_scraping.clone()));
        }
        let status = self.collect(limit, scrape_rx, gpu_rx).await;
        stop_scraping.cancel();
        if let Some(gp) = &plan.gpu {
            let result = gpu::once(gp).await;
            self.observer.gpu(&GpuScrape { t_s: (now_ns() - start_ns) as f64 / 1e9, result });
        }
        if let (Some(_), Some(sp)) = (&scraping, &plan.scrape) {
            let t_s = (now_ns() - start_ns) as f64 / 1e9;
            let last = ServerScrape { t_s, result: scrape::once(sp).await, baseline: false, last: true };
            self.observer.server(&last);
        }
        if let Some(sp) = plan.scrape.as_ref().filter(|s| s.from_agent) {
            self.last_agent_scrape(sp.interval).await;
        }
        Ok((status, started_at))
    }

    /// Every agent is done: the scraping agent (the first) takes its last scrape.
    async fn last_agent_scrape(&mut self, interval: Duration) {
        if self.agents.first().is_none_or(|a| a.lost.is_some()) {
            return;
        }
        let run_id = self.run_id;
        self.fleet.send(0, Msg::ScrapeLast(ScrapeLast { run_id })).await;
        let until = Instant::now() + interval.min(Duration::from_secs(5)) + Duration::from_secs(2);
        while let Some(ev) = self.fleet.next(until.saturating_duration_since(Instant::now())).await {
            if let Event::Msg { agent: 0, msg: agent_msg::Msg::ServerMetrics(m), .. } = ev
                && m.run_id == run_id
            {
                let s = ServerScrape::from_agent(&m, self.agents[0].offset.offset_ns, self.start_ns);
                self.observer.server(&s);
                if m.last {
                    return;
                }
            }
        }
    }

    /// The coordinator's baseline scrape, when it scrapes: `None` when an agent scrapes,
    /// nobody does, or the default URL does not answer with metrics (the server has none).
    async fn baseline_scrape(&mut self) -> Option<(ServerScrape, i64)> {
        let sp = self.plan.scrape.as_ref().filter(|s| !s.from_agent)?;
        let at = now_ns();
        let result = scrape::once(sp).await;
        match &result {
            Ok(s) if s.is_empty() && !sp.explicit => return None,
            Err(e) if !sp.explicit => {
                if let Some(why) = scrape::default_url_failed(e) {
                    self.observer.notice(&why);
                }
                return None;
            }
            Err(e) => self.observer.notice(&format!("cannot scrape the server's metrics: {e}")),
            _ => {}
        }
        Some((ServerScrape { t_s: 0.0, result, baseline: true, last: false }, at))
    }

    async fn collect(
        &mut self,
        limit: Duration,
        mut scrapes: mpsc::Receiver<ServerScrape>,
        mut gpus: mpsc::Receiver<GpuScrape>,
    ) -> RunStatus {
        let now = Instant::now();
        let agents = std::mem::take(&mut self.agents);
        let legacy: Vec<bool> = agents.iter().map(AgentReport::legacy).collect();
        // An agent's own GPUs (`--gpu nvml`) are named by its host.
        let hosts: Vec<String> = agents
            .iter()
            .map(|a| if a.hello.hostname.is_empty() { a.addr.clone() } else { a.hello.hostname.clone() })
            .collect();
        // A version 9 agent stopped at the graceful stop's end reports its deadline.
        let graceful_deadline = legacy_graceful_end(self.plan).is_some_and(|end| end < limit);
        let hard_stop = now + limit + Duration::from_secs(30);
        let mut c = Collector::new(self.run_id, self.start_ns, agents, self.plan.tolerate_agent_loss, now, hard_stop);
        use tokio::signal::unix::{Signal, SignalKind, signal};
        // Every SIGINT counts: the first stops the agents, a second leaves at once.
        let mut int = signal(SignalKind::interrupt()).ok();
        let mut term = signal(SignalKind::terminate()).ok();
        async fn next(s: Option<&mut Signal>) -> Option<()> {
            match s {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        }
        let mut heard_at = Instant::now();
        while !c.finished(Instant::now()) {
            let halt = if c.halted().is_none() { self.observer.halt() } else { None };
            let input = if let Some(h) = halt {
                Input::Halt(h)
            } else {
                tokio::select! {
                    Some(s) = scrapes.recv() => {
                        self.observer.server(&s);
                        continue;
                    }
                    Some(g) = gpus.recv() => {
                        self.observer.gpu(&g);
                        continue;
                    }
                    ev = self.fleet.next(quiet_wait(&c)) => match ev {
                        Some(Event::Msg { agent, mut msg, .. }) => {
                            if let agent_msg::Msg::Done(d) = &mut msg
                                && legacy[agent]
                            {
                                v9::decode_done(d);
                                if graceful_deadline && d.stop() == surge_proto::StopReason::Deadline {
                                    d.set_stop(surge_proto::StopReason::Duration);
                                }
                            }
                            if let agent_msg::Msg::GpuSamples(g) = &msg {
                                if g.run_id == self.run_id {
                                    let offset = c.offset_ns(agent);
                                    self.observer.gpu(&GpuScrape::from_agent(g, &hosts[agent], offset, self.start_ns));
                                }
                                continue;
                            }
                            if let agent_msg::Msg::ServerMetrics(m) = &msg
                                && m.run_id == self.run_id
                            {
                                let offset = c.offset_ns(agent);
                                self.observer.server(&ServerScrape::from_agent(m, offset, self.start_ns));
                            }
                            Input::Msg { agent, msg }
                        }
                        Some(Event::Batch { agent, batch }) => Input::Batch { agent, batch },
                        Some(Event::Closed { agent, error }) => Input::Closed { agent, error },
                        Some(Event::Resumed { agent, after }) => Input::Resumed { agent, after },
                        Some(Event::Reattaching { agent }) => Input::Reattaching { agent },
                        None => Input::Quiet,
                    },
                    Some(_) = next(int.as_mut()) => Input::Interrupt,
                    Some(_) = next(term.as_mut()), if !c.interrupted() => Input::Terminate,
                }
            };
            // The links' table, before a quiet input (where losses fall due) and at most
            // every HEAR_EVERY otherwise: with many agents, not once per batch.
            let now = Instant::now();
            if matches!(input, Input::Quiet) || now.duration_since(heard_at) >= HEAR_EVERY {
                c.hear_all(self.fleet.heard());
                heard_at = now;
            }
            for action in c.handle(input, now) {
                match action {
                    Action::Send { agent, msg } => self.fleet.send(agent, msg).await,
                    Action::Broadcast(msg) => self.broadcast(|_| msg.clone()).await,
                    Action::Progress(n) => self.observer.progress(n),
                    Action::Rows(rows) => self.observer.rows(&rows),
                    Action::Health { agent, health } => {
                        self.observer.health(agent, &health, (now_ns() - self.start_ns) as f64 / 1e9)
                    }
                    Action::Notice(m) => self.observer.notice(&m),
                }
            }
        }
        self.halted = c.halted();
        let (agents, status) = c.finish();
        self.agents = agents;
        status
    }
}

/// How often the collection loop reads the links' table of when each agent was last
/// heard (D79) while events keep it busy; a quiet input reads it every time.
const HEAR_EVERY: Duration = Duration::from_millis(10);

/// How long the collection loop waits for an event before a quiet input: 50 ms, or less
/// when an agent's loss falls due sooner (D2's 3.0 s bound has no room for a late poll).
fn quiet_wait(c: &Collector) -> Duration {
    const POLL: Duration = Duration::from_millis(50);
    c.next_loss_check().map_or(POLL, |at| at.saturating_duration_since(Instant::now()).min(POLL))
}

/// When an agent of version 9, which has no graceful stop (D43), must be stopped: the
/// duration and the graceful stop after it, as its Start's deadline.
fn legacy_graceful_end(plan: &RunPlan) -> Option<Duration> {
    Some(plan.duration? + plan.graceful_stop?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    /// A control connection that resumes before the agent answered: the request is sent
    /// again on the new stream (it may have gone into the broken one), once, and the answer
    /// that comes is taken.
    #[tokio::test]
    async fn a_request_is_resent_when_its_agents_session_resumes_before_the_answer() {
        let plan = crate::cli::build::run_plan(crate::cli::build::default_run_args().expect("args")).expect("plan");
        let (ev_tx, events) = mpsc::channel(16);
        let (tx, mut rx) = mpsc::channel(16);
        let mut fleet = Fleet {
            addrs: vec!["a:1".into()],
            missing: Vec::new(),
            waited: Duration::ZERO,
            senders: vec![tx],
            events,
            heard: std::sync::Arc::new(super::super::heard::Heard::new(1)),
            links: tokio_util::sync::CancellationToken::new(),
            tasks: tokio_util::task::TaskTracker::new(),
        };
        let agents = vec![AgentReport { addr: "a:1".into(), ..Default::default() }];
        let mut r = Runner {
            fleet: &mut fleet,
            plan: &plan,
            agents,
            run_id: 5,
            observer: &mut Silent,
            start_ns: 0,
            profiler: None,
            halted: None,
        };
        let agent = tokio::spawn(async move {
            ev_tx.send(Event::Resumed { agent: 0, after: Duration::from_millis(800) }).await.unwrap();
            // The Prepare comes again on the resumed stream.
            let again = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.expect("resent within 3 s");
            let again = again.expect("a resent message");
            assert!(matches!(&again.msg, Some(Msg::Prepare(p)) if p.run_id == 5), "{again:?}");
            let ready = agent_msg::Msg::Ready(surge_proto::Ready { run_id: 5, ..Default::default() });
            ev_tx.send(Event::Msg { agent: 0, msg: ready, recv_ns: 0 }).await.unwrap();
            rx
        });
        let prepare = |_| Some(Msg::Prepare(Box::new(Prepare { run_id: 5, workload: None })));
        let got = r
            .gather_resending("Ready", Duration::from_secs(5), prepare, |m, _| match m {
                agent_msg::Msg::Ready(x) if x.run_id == 5 => Some(()),
                _ => None,
            })
            .await;
        assert!(got.is_ok(), "{got:?}");
        let mut rx = agent.await.expect("the agent side");
        assert!(rx.try_recv().is_err(), "resent once");
    }
}
