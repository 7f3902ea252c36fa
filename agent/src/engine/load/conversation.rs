//! Conversations (D31): request `k` of the slice is a session, whose turns run one after
//! another on this agent, each resending the history (earlier messages and the server's
//! replies as streamed) and waiting its think time after the previous turn finished.
//!
//! Sessions start as fast as their slots allow (`MultiTurn.concurrency` sessions open at
//! once, a session holding its slot through its think time), or at the paced times of an
//! open loop (a request rate, a session trace's first turns). `max_concurrency` bounds the
//! requests in flight across sessions. A turn that fails ends its session; the turns it
//! did not send are counted on its row (`session_end.cancelled_turns`). At `--duration` no
//! session starts and no further turn is sent; turns in flight finish. A finished
//! session's history is dropped with its task: memory holds open sessions only.

use super::{RunCtx, StopReason, pacer};
use crate::engine::load::pacing::Schedule;
use crate::engine::load::request::{Job, us};
use crate::engine::workload::history::History;
use crate::engine::workload::{SessionPlan, Sessions, Wait};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use surge_proto::{ErrorKind, Row, SessionEnd};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

/// The slice's sessions, how they are bounded and when issuing stops.
pub(super) struct Limits {
    /// How each session's turns are made.
    pub script: Arc<Sessions>,
    /// Sessions open at once (0: no limit).
    pub sessions: u32,
    /// Requests in flight across sessions (0: no limit).
    pub requests: u32,
    pub duration: Option<Duration>,
    /// Whether the run keeps the reply text in rows (`--save-detailed`).
    pub keep_text: bool,
}

/// Starts the slice's sessions; returns when none is left to start (or the run stopped).
pub(super) async fn run(
    ctx: &Arc<RunCtx>,
    tracker: &TaskTracker,
    schedule: Schedule,
    limits: Limits,
    ctl: &super::Control,
    deadline: tokio::time::Instant,
) -> StopReason {
    let mut pacer = schedule
        .is_open_loop()
        .then(|| pacer::Pacer::start(schedule, ctx.t0, ctx.jobs.len(), limits.duration, Arc::clone(&ctx.stats)));
    let slots = (limits.sessions > 0).then(|| Arc::new(Semaphore::new(limits.sessions as usize)));
    let requests = (limits.requests > 0).then(|| Arc::new(Semaphore::new(limits.requests as usize)));
    let limits = Arc::new(limits);
    for k in 0..ctx.jobs.len() {
        let (intended, slot) = match super::next_release(&mut pacer, slots.as_ref(), ctl, deadline).await {
            Ok(next) => next,
            Err(reason) => return reason,
        };
        if limits.duration.is_some_and(|d| ctx.t0.elapsed() >= d) {
            ctx.stats.duration_reached.store(true, Ordering::Relaxed);
            return StopReason::Duration;
        }
        if let Some(off) = intended {
            ctx.stats.record_lag(us(ctx.t0.elapsed().saturating_sub(off)));
        }
        let (ctx, requests, limits) = (Arc::clone(ctx), requests.clone(), Arc::clone(&limits));
        tracker.spawn(async move {
            let _slot = slot;
            let plan = limits.script.session(ctx.jobs.index(k));
            tokio::select! {
                _ = session(Arc::clone(&ctx), plan, requests, limits, None) => {}
                // Dropping the session (and its sub-agents) reports the turns in flight
                // as cancelled.
                () = ctx.cancel.cancelled() => {}
            }
        });
    }
    StopReason::Finished
}

/// Counts an open session until dropped.
struct Open<'a>(&'a crate::engine::stats::Stats);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.active_sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a session's graph came to (D68), for the session that spawned it: when its last
/// request (or a sub-agent's) ended, since the run's start; its critical path, counted
/// from the start of the chain it extends; the most sessions one of its turns spawned.
#[derive(Debug, Default, Clone, Copy)]
struct Graph {
    end: Duration,
    critical_us: u64,
    fan_out: u32,
}

impl Graph {
    fn join(&mut self, child: Graph) {
        self.end = self.end.max(child.end);
        self.critical_us = self.critical_us.max(child.critical_us);
        self.fan_out = self.fan_out.max(child.fan_out);
    }
}

/// Sub-agents in flight, each ending with its graph.
type Children = tokio::task::JoinSet<Graph>;

/// Waits for every sub-agent in flight; their graphs join `g`.
async fn join_all(children: &mut Children, g: &mut Graph) {
    while let Some(done) = children.join_next().await {
        if let Ok(child) = done {
            g.join(child);
        }
    }
}

/// Runs one session and, after it, waits for the sub-agents it spawned (D68): a session
/// ends with its graph. Boxed: a session spawns sessions.
fn session(
    ctx: Arc<RunCtx>,
    plan: SessionPlan,
    requests: Option<Arc<Semaphore>>,
    limits: Arc<Limits>,
    parent: Option<u64>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Graph> + Send>> {
    Box::pin(async move {
        let mut children = Children::new();
        let mut g = Graph::default();
        let last = turns(&ctx, plan, &requests, &limits, parent, &mut children, &mut g).await;
        join_all(&mut children, &mut g).await;
        if let Some(mut row) = last {
            // A root that spawned sub-agents: its graph on its last row.
            if let Some(end) = row.session_end.as_mut().filter(|_| parent.is_none() && g.fan_out > 0) {
                let last_end = Duration::from_micros(row.start_us.max(0) as u64 + row.latency_us);
                let began = last_end.saturating_sub(Duration::from_micros(end.duration_us));
                end.graph_duration_us = us(g.end.max(last_end).saturating_sub(began));
                end.critical_path_us = g.critical_us;
                end.fan_out = g.fan_out;
            }
            ctx.record(row);
        }
        g
    })
}

/// Runs every turn of one session; returns its last row (with its end), unrecorded, so
/// that its graph can be added once its sub-agents end.
async fn turns(
    ctx: &Arc<RunCtx>,
    plan: SessionPlan,
    requests: &Option<Arc<Semaphore>>,
    limits: &Arc<Limits>,
    parent: Option<u64>,
    children: &mut Children,
    g: &mut Graph,
) -> Option<Row> {
    ctx.stats.active_sessions.fetch_add(1, Ordering::Relaxed);
    let _open = Open(&ctx.stats);
    let mut history = limits.script.history();
    let mut began: Option<Duration> = None;
    let mut previous_end = Instant::now();
    let mut completed = 0u32;
    // An agent loop's totals over the session (its last row carries them).
    let mut tally = Tally::default();
    for t in 0..plan.turns {
        if t > 0 && limits.script.joins(&plan, t) {
            // A join: the turn waits for every sub-agent spawned so far; its delay counts
            // from their end.
            join_all(children, g).await;
            previous_end = previous_end.max(Instant::now());
        }
        if t > 0 {
            // The turn's due time: after its think time (or a trace's delay), or at its
            // trace timestamp, never before the previous turn finished.
            let due = match limits.script.wait(&plan, t) {
                Wait::After(d) => previous_end + d,
                Wait::At(off) => (ctx.t0 + off).max(previous_end),
            };
            // A turn due after --duration is never sent: the session ends now, not after
            // its think time (which would hold its slot and the run past the duration).
            if limits.duration.is_some_and(|d| due >= ctx.t0 + d) {
                ctx.stats.duration_reached.store(true, Ordering::Relaxed);
                return None;
            }
            tokio::time::sleep_until(due.into()).await;
            ctx.stats.record_lag(us(Instant::now().saturating_duration_since(due)));
            // Woken late, past the duration: not sent either.
            if limits.duration.is_some_and(|d| ctx.t0.elapsed() >= d) {
                ctx.stats.duration_reached.store(true, Ordering::Relaxed);
                return None;
            }
        }
        let _permit = match requests {
            Some(sem) => Some(Arc::clone(sem).acquire_owned().await.expect("semaphore never closed")),
            None => None,
        };
        let turn = if limits.script.costly() {
            // A tokenizer counts every message: off the workers that read responses.
            let (script, h) = (Arc::clone(&limits.script), history.clone());
            match tokio::task::spawn_blocking(move || script.turn(&plan, t, &h)).await {
                Ok(turn) => turn,
                Err(_) => limits.script.turn(&plan, t, &history),
            }
        } else {
            limits.script.turn(&plan, t, &history)
        };
        // Boxed, as the steps below: a session waits out its think time holding only
        // what a request needs while it is in flight (D95), not its 3.5 KB state.
        let mut row = Box::pin(ctx.send(turn_job(&plan, t, turn.planned), Some((plan.index, t)))).await;
        drop(_permit);
        row.session = Some(plan.index);
        (row.turn, row.parent) = (t, parent);
        row.history_tokens = turn.history_tokens;
        let began = *began.get_or_insert(Duration::from_micros(row.start_us.max(0) as u64));
        let mut cut = false;
        let model_before = tally.model_us;
        if let Some(tl) = limits.script.tool_loop().filter(|_| row.error() == ErrorKind::None && !row.calls.is_empty())
        {
            history.push_user(&turn.user, turn.user_tokens);
            let steps = Steps { tl, plan: &plan, t, output_tokens: turn.output_tokens, requests, limits };
            (row, cut) = Box::pin(steps.run(ctx, &mut history, row, &mut tally)).await;
        } else {
            let reply =
                if limits.keep_text { row.generated_text.clone() } else { std::mem::take(&mut row.generated_text) };
            if row.error() == ErrorKind::None && limits.script.keeps_history() {
                history.push(&turn.user, turn.user_tokens, &reply, row.output_tokens);
            }
        }
        previous_end = Instant::now();
        if limits.script.tool_loop().is_some() {
            tally.model_us += row.latency_us;
        }
        // The chain this session extends: its turns' request time (with a tool loop's
        // steps before this row, which the tally counted).
        g.critical_us += row.latency_us + (tally.model_us - model_before).saturating_sub(row.latency_us);
        g.end = g.end.max(Duration::from_micros(row.start_us.max(0) as u64 + row.latency_us));
        let ok = row.error() == ErrorKind::None;
        completed += u32::from(ok);
        if !ok || cut || t + 1 == plan.turns {
            let end = Duration::from_micros(row.start_us.max(0) as u64 + row.latency_us);
            row.session_end = Some(SessionEnd {
                duration_us: us(end.saturating_sub(began)),
                turns_completed: completed,
                cancelled_turns: if ok && !cut { 0 } else { plan.turns - t - 1 },
                failed: !ok,
                steps: tally.steps,
                tool_wait_us: tally.tool_wait_us,
                model_us: tally.model_us,
                ..Default::default()
            });
        }
        row.calls.clear();
        let spawned = if ok { limits.script.spawns(&plan, t) } else { Vec::new() };
        if !spawned.is_empty() {
            g.fan_out = g.fan_out.max(spawned.len() as u32);
            let base = g.critical_us;
            for child in spawned {
                let sub = session(Arc::clone(ctx), child, requests.clone(), Arc::clone(limits), Some(plan.index));
                children.spawn(async move {
                    let mut c = sub.await;
                    // A sub-agent's chain starts where its spawning turn ended.
                    c.critical_us += base;
                    c
                });
            }
        }
        if row.session_end.is_some() {
            return Some(row);
        }
        ctx.record(row);
        if !ok || cut {
            return None;
        }
    }
    None
}

/// The request of turn `t` of `plan` (or of one of its tool steps): indexed by session and
/// turn, keeping its reply for the history.
fn turn_job(plan: &SessionPlan, t: u32, planned: crate::engine::workload::Planned) -> Job {
    Job {
        index: plan.index * surge_proto::TURN_STRIDE + u64::from(t),
        body: planned.body,
        input_tokens: planned.input_tokens,
        input_source: planned.input_source,
        input_sequences: 0,
        audio_s: 0.0,
        max_tokens: planned.max_tokens,
        honours_eos: false,
        intended: None,
        session: Some(plan.index),
        keep_reply: true,
    }
}

/// An agent loop's totals over one session.
#[derive(Debug, Default)]
struct Tally {
    steps: u32,
    tool_wait_us: u64,
    model_us: u64,
}

/// An agent loop's steps after a turn whose reply called tools (D65): each waits the
/// tool's latency, then sends the history with the calls and one `tool` message per
/// call, until a reply answers without a call or the steps run out.
struct Steps<'a> {
    tl: &'a surge_proto::ToolLoop,
    plan: &'a SessionPlan,
    t: u32,
    output_tokens: u32,
    requests: &'a Option<Arc<Semaphore>>,
    limits: &'a Limits,
}

impl Steps<'_> {
    /// From the turn's first reply `row` (which called tools) to its last: recorded but
    /// the last, which is returned with whether the session must end (a step due past
    /// `--duration` is not sent).
    async fn run(&self, ctx: &RunCtx, history: &mut History, mut row: Row, tally: &mut Tally) -> (Row, bool) {
        let (plan, t) = (self.plan, self.t);
        for step in 1..=self.tl.max_steps.max(1) {
            let calls = std::mem::take(&mut row.calls);
            history.push_calls(&calls, row.output_tokens);
            for (i, c) in calls.iter().enumerate() {
                let (text, tokens) = self.limits.script.tool_result(self.tl, plan, t, step, i as u32);
                history.push_tool_result(&c.id, &text, tokens);
            }
            let wait = self.limits.script.tool_latency(self.tl, plan, t, step);
            let due = Instant::now() + wait;
            // A step due past --duration is not sent: this reply ends the session.
            if self.limits.duration.is_some_and(|d| due >= ctx.t0 + d) {
                ctx.stats.duration_reached.store(true, Ordering::Relaxed);
                return (row, true);
            }
            row.generated_text.clear();
            tally.model_us += row.latency_us;
            ctx.record(row);
            tokio::time::sleep_until(due.into()).await;
            let _permit = match self.requests {
                Some(sem) => Some(Arc::clone(sem).acquire_owned().await.expect("semaphore never closed")),
                None => None,
            };
            let planned = self.limits.script.step(plan, history, self.output_tokens);
            let history_tokens = history.tokens();
            row = ctx.send(turn_job(plan, t, planned), Some((plan.index, t))).await;
            (row.session, row.turn, row.step, row.history_tokens) = (Some(plan.index), t, step, history_tokens);
            row.tool_wait_us = us(wait);
            tally.steps += 1;
            tally.tool_wait_us += row.tool_wait_us;
            if row.error() != ErrorKind::None || row.calls.is_empty() || step == self.tl.max_steps {
                break;
            }
        }
        // The turn's answer (or its last calls, when the steps ran out) joins the history.
        let calls = std::mem::take(&mut row.calls);
        if row.error() == ErrorKind::None && calls.is_empty() {
            history.push_answer(&row.generated_text, row.output_tokens);
        } else if row.error() == ErrorKind::None {
            history.push_calls(&calls, row.output_tokens);
            for (i, c) in calls.iter().enumerate() {
                let (text, tokens) = self.limits.script.tool_result(self.tl, plan, t, self.tl.max_steps + 1, i as u32);
                history.push_tool_result(&c.id, &text, tokens);
            }
        }
        if !self.limits.keep_text {
            row.generated_text.clear();
        }
        (row, false)
    }
}
