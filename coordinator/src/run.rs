//! One run across a fleet of agents: hello and version check, clock offsets, the split,
//! two-phase start (Prepare -> Ready -> Start at one instant), then batches, acks,
//! heartbeats and loss detection until every agent is done (or lost), and the rows
//! placed on one global timeline.

use crate::clock::{self, Exchange, Offset};
use crate::fleet::{Event, Fleet, now_ns};
use crate::metrics::GlobalRow;
use crate::plan::RunPlan;
use crate::split::{self, Share};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use surge_proto::{
    ClockPing, Done, Health, Hello, HelloReply, PROTOCOL_VERSION, Prepare, Row, Start, Stop, Workload, agent_msg,
    coordinator_msg::Msg,
};

/// Silence after which an agent is declared lost (3 missed heartbeats).
pub const LOSS_TIMEOUT: Duration = Duration::from_secs(3);
const CLOCK_PINGS: u64 = 8;

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    Complete,
    /// Agents were lost; the run is not valid (default policy).
    Invalid {
        lost: Vec<String>,
    },
    /// Agents were lost with `--tolerate-agent-loss`; the rest is reported.
    Partial {
        lost: Vec<String>,
    },
    /// Ctrl-C.
    Interrupted,
}

impl RunStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Complete => "complete",
            RunStatus::Invalid { .. } => "invalid",
            RunStatus::Partial { .. } => "partial",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// What the coordinator knows of one agent after the run.
#[derive(Debug, Clone, Default)]
pub struct AgentReport {
    pub addr: String,
    pub hello: HelloReply,
    pub offset: Offset,
    pub share: Option<Share>,
    pub rows: u64,
    pub completed: u64,
    pub failed: u64,
    pub done: Option<Done>,
    pub last_health: Option<Health>,
    pub peak_cpu_percent: f64,
    pub lost: Option<String>,
    started_unix_ns: Option<i64>,
    seen: HashSet<u64>,
    last_heard: Option<Instant>,
    raw: Vec<Row>,
}

/// Everything a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    pub rows: Vec<GlobalRow>,
    pub agents: Vec<AgentReport>,
    pub status: RunStatus,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

/// A failure that prevented the run (refusals, unreachable agents or target).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(pub String);

fn agent_err(addr: &str, m: impl std::fmt::Display) -> RunError {
    RunError(format!("agent {addr}: {m}"))
}

struct Runner<'a> {
    fleet: &'a mut Fleet,
    plan: &'a RunPlan,
    agents: Vec<AgentReport>,
    run_id: u64,
    progress: Option<&'a (dyn Fn(u64) + Sync)>,
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
    /// Hello and clock pings with every agent of `fleet`.
    pub async fn open(mut fleet: Fleet, plan: &RunPlan) -> Result<Self, RunError> {
        let agents: Vec<AgentReport> =
            fleet.addrs.iter().map(|a| AgentReport { addr: a.clone(), ..Default::default() }).collect();
        let mut r = Runner { fleet: &mut fleet, plan, agents, run_id: 0, progress: None };
        r.handshake().await?;
        let agents =
            r.agents.into_iter().map(|a| AgentBase { addr: a.addr, hello: a.hello, offset: a.offset }).collect();
        Ok(Self { fleet, agents })
    }

    /// One run of `plan`. `progress` is called with the number of finished requests.
    pub async fn run(
        &mut self,
        plan: &RunPlan,
        model: &str,
        progress: Option<&(dyn Fn(u64) + Sync)>,
    ) -> Result<Outcome, RunError> {
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
        let mut r = Runner { fleet: &mut self.fleet, plan, agents, run_id: now_ns() as u64, progress };
        let (status, started_at) = r.drive(model).await?;
        Ok(assemble(r.agents, status, started_at))
    }

    /// Ends every session.
    pub fn close(self) {
        self.fleet.close();
    }
}

/// Runs `plan` once on `fleet` and closes it.
pub async fn execute(fleet: Fleet, plan: &RunPlan, model: &str) -> Result<Outcome, RunError> {
    let mut session = Session::open(fleet, plan).await?;
    let res = session.run(plan, model, None).await;
    session.close();
    res
}

impl Runner<'_> {
    fn absorb(&mut self, agent: usize, msg: &agent_msg::Msg) {
        let a = &mut self.agents[agent];
        a.last_heard = Some(Instant::now());
        if let agent_msg::Msg::Health(h) = msg {
            a.peak_cpu_percent = a.peak_cpu_percent.max(h.cpu_percent);
            a.last_health = Some(h.clone());
            if let Some(progress) = self.progress {
                progress(
                    self.agents.iter().filter_map(|a| a.last_health.as_ref()).map(|h| h.completed + h.failed).sum(),
                );
            }
        }
    }

    /// Waits until `pick` accepted one message (with its arrival time) from every agent.
    async fn gather<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pick: impl FnMut(agent_msg::Msg, i64) -> Option<T>,
    ) -> Result<Vec<T>, RunError>
    where
        T: Clone,
    {
        let n = self.fleet.len();
        let mut got: Vec<Option<T>> = vec![None; n];
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
                return Err(RunError(format!("no {what} within {timeout:?} from agent(s) {}", missing.join(", "))));
            };
            match ev {
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
        // 1. Hello: versions, capacity, allowlists.
        self.broadcast(|_| {
            Msg::Hello(Hello {
                protocol_version: PROTOCOL_VERSION,
                coordinator_version: env!("CARGO_PKG_VERSION").into(),
                lease_ms: 0,
            })
        })
        .await;
        let hellos = self
            .gather("Hello reply", Duration::from_secs(10), |m, _| match m {
                agent_msg::Msg::Hello(h) => Some(h),
                _ => None,
            })
            .await?;
        for (i, h) in hellos.iter().enumerate() {
            if h.protocol_version != PROTOCOL_VERSION {
                return Err(agent_err(
                    &self.fleet.addrs[i],
                    format!(
                        "protocol version mismatch: this coordinator speaks version {PROTOCOL_VERSION}, the agent speaks version {}",
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
            let pongs = self
                .gather("clock pong", Duration::from_secs(5), |m, t4| match m {
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

    async fn drive(&mut self, model: &str) -> Result<(RunStatus, chrono::DateTime<chrono::Utc>), RunError> {
        let plan = self.plan;
        let hellos: Vec<HelloReply> = self.agents.iter().map(|a| a.hello.clone()).collect();
        // 3. Split by capacity (cores) and prepare.
        let weights: Vec<u32> = hellos.iter().map(|h| h.cores.max(1)).collect();
        let shares = split::split(&weights, plan.num_prompts, plan.max_concurrency, plan.request_rate);
        for (i, s) in shares.iter().enumerate() {
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
        let workloads: Vec<Workload> = shares.iter().enumerate().map(|(i, s)| workload(plan, model, s, i)).collect();
        let run_id = self.run_id;
        self.broadcast(|i| Msg::Prepare(Prepare { run_id, workload: Some(workloads[i].clone()) })).await;
        self.gather("Ready", Duration::from_secs(120), |m, _| match m {
            agent_msg::Msg::Ready(r) if r.run_id == run_id => Some(()),
            _ => None,
        })
        .await?;
        // 4. Start everyone at one instant of the coordinator's clock.
        let max_rtt = self.agents.iter().map(|a| a.offset.rtt_ns).max().unwrap_or(0);
        let lead_ns = (250_000_000i64).max(4 * max_rtt);
        let start_ns = now_ns() + lead_ns;
        let started_at = chrono::DateTime::from_timestamp_nanos(start_ns);
        let limit = plan.duration.map_or(plan.max_run_time, |d| (d + Duration::from_secs(60)).min(plan.max_run_time));
        let offsets: Vec<i64> = self.agents.iter().map(|a| a.offset.offset_ns).collect();
        self.broadcast(|i| {
            Msg::Start(Start {
                run_id,
                start_at_unix_ns: start_ns + offsets[i],
                deadline_unix_ns: start_ns + offsets[i] + limit.as_nanos() as i64,
            })
        })
        .await;
        let now = Instant::now();
        for a in &mut self.agents {
            a.last_heard = Some(now);
        }
        // 5. Collect until every agent is done or lost.
        let status = self.collect(limit).await;
        Ok((status, started_at))
    }

    async fn collect(&mut self, limit: Duration) -> RunStatus {
        let run_id = self.run_id;
        let hard_stop = Instant::now() + limit + Duration::from_secs(30);
        let mut lost: Vec<String> = Vec::new();
        let mut interrupted = false;
        let mut stopping = false;
        let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
        loop {
            let pending: Vec<usize> = (0..self.agents.len())
                .filter(|&i| self.agents[i].done.is_none() && self.agents[i].lost.is_none())
                .collect();
            if pending.is_empty() || Instant::now() > hard_stop {
                break;
            }
            let ev = tokio::select! {
                ev = self.fleet.next(Duration::from_millis(250)) => ev,
                _ = &mut ctrl_c, if !interrupted => {
                    interrupted = true;
                    eprintln!("surge: interrupted; stopping agents and saving what arrived");
                    self.broadcast(|_| Msg::Stop(Stop { run_id, reason: "interrupted".into() })).await;
                    continue;
                }
            };
            match ev {
                Some(Event::Msg { agent, msg, .. }) => {
                    self.absorb(agent, &msg);
                    match msg {
                        agent_msg::Msg::Batch(b) if b.run_id == run_id => {
                            self.fleet.send(agent, Msg::Ack(surge_proto::Ack { run_id, seq: b.seq })).await;
                            let a = &mut self.agents[agent];
                            if a.seen.insert(b.seq) {
                                a.started_unix_ns = Some(b.started_unix_ns);
                                a.rows += b.rows.len() as u64;
                                a.raw.extend(b.rows);
                            }
                        }
                        agent_msg::Msg::Done(d) if d.run_id == run_id => {
                            // An agent stopped by a signal ran only part of its share.
                            if d.stop_reason == "signal" {
                                self.mark_lost(
                                    agent,
                                    "stopped by a signal (its share is incomplete)".into(),
                                    &mut lost,
                                );
                            }
                            let a = &mut self.agents[agent];
                            a.started_unix_ns = Some(d.started_unix_ns);
                            a.done = Some(d);
                        }
                        agent_msg::Msg::Error(e) => {
                            self.mark_lost(agent, format!("error: {}", e.message), &mut lost);
                        }
                        _ => {}
                    }
                }
                Some(Event::Closed { agent, error }) => {
                    if self.agents[agent].done.is_none() {
                        let why = error.unwrap_or_else(|| "session closed".into());
                        self.mark_lost(agent, format!("connection lost ({why})"), &mut lost);
                    }
                }
                None => {}
            }
            let now = Instant::now();
            for i in 0..self.agents.len() {
                let a = &self.agents[i];
                if a.done.is_none() && a.lost.is_none() && a.last_heard.is_some_and(|t| now - t > LOSS_TIMEOUT) {
                    self.mark_lost(i, format!("silent for more than {}s", LOSS_TIMEOUT.as_secs()), &mut lost);
                }
            }
            if !lost.is_empty() && !self.plan.tolerate_agent_loss && !stopping {
                stopping = true;
                self.broadcast(|_| Msg::Stop(Stop { run_id, reason: "another agent was lost".into() })).await;
            }
        }
        if interrupted {
            RunStatus::Interrupted
        } else if lost.is_empty() {
            RunStatus::Complete
        } else if self.plan.tolerate_agent_loss {
            RunStatus::Partial { lost }
        } else {
            RunStatus::Invalid { lost }
        }
    }

    fn mark_lost(&mut self, agent: usize, why: String, lost: &mut Vec<String>) {
        let a = &mut self.agents[agent];
        if a.lost.is_some() || a.done.is_some() {
            return;
        }
        eprintln!("surge: agent {} lost: {why}", a.addr);
        a.lost = Some(why);
        lost.push(a.addr.clone());
    }
}

fn workload(plan: &RunPlan, model: &str, s: &Share, i: usize) -> Workload {
    Workload {
        base_url: plan.base_url.clone(),
        endpoint: plan.endpoint.clone(),
        backend: plan.backend as i32,
        model: model.to_string(),
        dataset: Some(plan.dataset.clone()),
        slice_start: s.slice_start,
        slice_len: s.num_prompts,
        max_concurrency: s.max_concurrency,
        request_rate: if s.request_rate.is_finite() { s.request_rate } else { 0.0 },
        burstiness: plan.burstiness,
        duration_ms: plan.duration.map_or(0, |d| d.as_millis() as u64),
        num_warmups: (f64::from(plan.num_warmups) * s.fraction).ceil() as u32,
        ignore_eos: plan.ignore_eos,
        temperature: plan.temperature,
        pacing_seed: plan.seed ^ ((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        http_version: if plan.http2 { 2 } else { 0 },
        insecure_tls: false,
        headers: plan.headers.iter().cloned().collect(),
        prompts: crate::dataset_plan::slice_prompts(&plan.prompts, s.slice_start, s.num_prompts),
        tokenizer_json: plan.tokenizer.as_ref().map(|t| t.bytes.to_vec()).unwrap_or_default(),
        tokenizer_sha256: plan.tokenizer.as_ref().map(|t| t.sha256.clone()).unwrap_or_default(),
    }
}

/// Places every agent's rows on the coordinator's timeline (seconds from the planned start).
fn assemble(mut agents: Vec<AgentReport>, status: RunStatus, started_at: chrono::DateTime<chrono::Utc>) -> Outcome {
    let start_ns = started_at.timestamp_nanos_opt().unwrap_or(0);
    let mut rows = Vec::new();
    for (i, a) in agents.iter_mut().enumerate() {
        let base_s = a.started_unix_ns.map_or(0.0, |s| (s - a.offset.offset_ns - start_ns) as f64 / 1e9);
        for row in std::mem::take(&mut a.raw) {
            if row.error() == surge_proto::ErrorKind::None {
                a.completed += 1;
            } else {
                a.failed += 1;
            }
            rows.push(GlobalRow {
                agent: i,
                start_s: base_s + row.start_us as f64 / 1e6,
                intended_s: (row.intended_us >= 0).then(|| base_s + row.intended_us as f64 / 1e6),
                row,
            });
        }
    }
    rows.sort_by_key(|r| r.row.index);
    Outcome { rows, agents, status, started_at }
}
