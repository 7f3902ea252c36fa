//! The collection phase of a run as a state machine: after Start, every input (an agent's
//! message, a closed session, a quiet poll, Ctrl-C) goes through [`Collector::handle`],
//! which changes no socket and returns the [`Action`]s to perform: acknowledge a batch,
//! tell every agent to stop, report progress or a notice. The loop that performs them
//! lives in `session`; the rules live here, testable without sockets.

use super::incoming::RowBatch;
use super::link::ATTACH_TIMEOUT;
use super::outcome::{AgentReport, GlobalRow, RunStatus, finished_requests};
use std::time::{Duration, Instant};
use surge_proto::{Stop, agent_msg, coordinator_msg::Msg};

/// Silence after which an agent is declared lost (D2: reported within 3.0 s of a cut,
/// while a shorter blip is resumed in time).
pub const LOSS_TIMEOUT: Duration = Duration::from_millis(2900);
const _: () =
    assert!(ATTACH_TIMEOUT.as_millis() < LOSS_TIMEOUT.as_millis(), "hearing an agent never brings its loss sooner");

/// When agent `a`'s silence becomes a loss: [`LOSS_TIMEOUT`] after it was last heard, or
/// later while a resume that reached it is under way, bounded by the resume's own timeout
/// (D72). A cut lets no connection through, so it is still reported after 2.9 s. Hearing
/// the agent at `t` (which ends a resume begun before `t`) moves this to `t + LOSS_TIMEOUT`,
/// never sooner, as the resume's timeout is the shorter: a loss walked for when it fell due
/// is not missed (D96).
fn loss_at(a: &AgentReport) -> Option<Instant> {
    let silent = a.last_heard? + LOSS_TIMEOUT;
    Some(a.reattaching.map_or(silent, |r| silent.max(r + ATTACH_TIMEOUT)))
}

/// The soonest loss among the pending `agents`.
fn soonest_loss(agents: &[AgentReport]) -> Option<Instant> {
    agents.iter().filter(|a| a.pending()).filter_map(loss_at).min()
}

/// What happened.
#[derive(Debug)]
pub enum Input {
    /// A message from agent `agent`.
    Msg { agent: usize, msg: agent_msg::Msg },
    /// A batch of rows from agent `agent` (D99).
    Batch { agent: usize, batch: RowBatch },
    /// Agent `agent`'s session ended.
    Closed { agent: usize, error: Option<String> },
    /// Agent `agent`'s session resumed on a fresh connection after `after` of silence.
    Resumed { agent: usize, after: Duration },
    /// A fresh connection to agent `agent` is up and carries a resume (D72).
    Reattaching { agent: usize },
    /// Nothing arrived for a while.
    Quiet,
    /// Ctrl-C.
    Interrupt,
    /// The run has measured what it was for: stop the agents, keep the run complete.
    Halt(super::outcome::Halt),
    /// SIGTERM.
    Terminate,
}

/// What to do about it.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send `msg` to agent `agent`.
    Send { agent: usize, msg: Msg },
    /// Send `msg` to every agent.
    Broadcast(Msg),
    /// Requests finished so far, from the agents' health reports.
    Progress(u64),
    /// Rows placed on the run's timeline, in arrival order.
    Rows(Vec<GlobalRow>),
    /// Agent `agent`'s health report.
    Health { agent: usize, health: surge_proto::Health },
    /// Something the user should hear about (an agent lost, the interrupt taken).
    Notice(String),
}

/// The state of one run's collection.
#[derive(Debug)]
pub struct Collector {
    run_id: u64,
    run_start_ns: i64,
    agents: Vec<AgentReport>,
    tolerate_loss: bool,
    hard_stop: Instant,
    lost: Vec<String>,
    interrupted: bool,
    terminated: bool,
    stopping: bool,
    /// A second interrupt: stop waiting for the agents.
    abandoned: bool,
    halted: Option<super::outcome::Halt>,
    /// When the quietest pending agent's silence becomes a loss, as of the last walk over
    /// the agents (D96). Never later than the truth: hearing an agent only makes its
    /// silence end later (see [`loss_at`]), and every input but a message walks again.
    loss_due: Option<Instant>,
}

impl Collector {
    /// Starts collecting at `now` from `agents` for the run that started at `run_start_ns`
    /// (coordinator clock); gives up at `hard_stop` whatever happens.
    pub fn new(
        run_id: u64,
        run_start_ns: i64,
        mut agents: Vec<AgentReport>,
        tolerate_loss: bool,
        now: Instant,
        hard_stop: Instant,
    ) -> Self {
        for a in &mut agents {
            a.last_heard = Some(now);
        }
        let (lost, interrupted, terminated, stopping, abandoned) = (Vec::new(), false, false, false, false);
        let loss_due = soonest_loss(&agents);
        Self {
            run_id,
            run_start_ns,
            agents,
            tolerate_loss,
            hard_stop,
            lost,
            interrupted,
            terminated,
            stopping,
            abandoned,
            halted: None,
            loss_due,
        }
    }

    /// Why the coordinator stopped the run early, if it did.
    pub fn halted(&self) -> Option<super::outcome::Halt> {
        self.halted
    }

    /// When the quietest pending agent's silence passes [`LOSS_TIMEOUT`]: the collection
    /// loop wakes then (a quiet input), so a loss is declared on time rather than at the
    /// next input or poll.
    pub fn next_loss_check(&self) -> Option<Instant> {
        Some(self.loss_due? + Duration::from_millis(1))
    }

    /// Every agent is done or lost, the hard stop passed, or a second interrupt came.
    pub fn finished(&self, now: Instant) -> bool {
        !self.agents.iter().any(AgentReport::pending) || now > self.hard_stop || self.abandoned
    }

    pub fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// Agent `agent`'s clock minus the coordinator's, nanoseconds.
    pub fn offset_ns(&self, agent: usize) -> i64 {
        self.agents.get(agent).map_or(0, |a| a.offset.offset_ns)
    }

    /// Agent `agent` was heard at `at` by its link (a heartbeat is not an input, D79):
    /// news only when later than what the collector knew, and then a resume under way
    /// since before it is no longer what keeps the agent from being lost.
    pub fn heard(&mut self, agent: usize, at: Instant) {
        let Some(a) = self.agents.get_mut(agent) else { return };
        if a.last_heard.is_some_and(|t| t >= at) {
            return;
        }
        a.last_heard = Some(at);
        if a.reattaching.is_some_and(|r| r < at) {
            a.reattaching = None;
        }
    }

    /// Every agent's time in `heard`, as [`Collector::heard`] takes one.
    pub fn hear_all(&mut self, heard: &super::heard::Heard) {
        for (agent, at) in heard.iter() {
            self.heard(agent, at);
        }
    }

    /// One input in, the actions it calls for out.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Action> {
        let run_id = self.run_id;
        let mut out = Vec::new();
        // A message from a pending agent moves no loss sooner: the agents are walked for
        // losses only when one falls due, not once per batch (D96).
        let message = matches!(input, Input::Msg { .. } | Input::Batch { .. });
        // Links hand batches on decoded into global rows (D99); one decoded by prost is
        // read the same way.
        let input = match input {
            Input::Msg { agent, msg: agent_msg::Msg::Batch(b) } => Input::Batch { agent, batch: RowBatch::from(b) },
            other => other,
        };
        match input {
            Input::Halt(h) => {
                if !self.interrupted && self.halted.is_none() {
                    self.halted = Some(h);
                    out.push(Action::Notice(format!("stopping the run: {}", h.reason())));
                    out.push(Action::Broadcast(Msg::Stop(Stop { run_id, reason: h.reason().into() })));
                }
                return out;
            }
            Input::Interrupt | Input::Terminate => {
                self.terminated |= matches!(input, Input::Terminate);
                if !self.interrupted {
                    self.interrupted = true;
                    out.push(Action::Notice("interrupted; stopping agents and saving what arrived".into()));
                    out.push(Action::Broadcast(Msg::Stop(Stop { run_id, reason: "interrupted".into() })));
                } else if !self.abandoned {
                    self.abandoned = true;
                    out.push(Action::Notice("interrupted again; saving what arrived without waiting".into()));
                }
                return out;
            }
            Input::Msg { agent, msg } => {
                if self.agents[agent].absorb(&msg, now) {
                    out.push(Action::Progress(finished_requests(&self.agents)));
                    if let agent_msg::Msg::Health(h) = &msg {
                        out.push(Action::Health { agent, health: *h });
                    }
                }
                match msg {
                    agent_msg::Msg::Done(d) if d.run_id == run_id => {
                        // An agent stopped by a signal ran only part of its share; so did one
                        // whose lease ran out (its Done can still arrive, by TCP's own
                        // retransmission, when the path comes back after the lease).
                        match d.stop() {
                            surge_proto::StopReason::Signal => {
                                self.mark_lost(agent, "stopped by a signal (its share is incomplete)".into(), &mut out);
                            }
                            surge_proto::StopReason::Lease | surge_proto::StopReason::CoordinatorGone => self
                                .mark_lost(
                                    agent,
                                    "stopped its load when it lost the coordinator (its share is incomplete)".into(),
                                    &mut out,
                                ),
                            _ => {}
                        }
                        let a = &mut self.agents[agent];
                        a.started_unix_ns = Some(d.started_unix_ns);
                        a.done = Some(d);
                    }
                    agent_msg::Msg::Error(e) => self.mark_lost(agent, format!("error: {}", e.message), &mut out),
                    _ => {}
                }
            }
            // Its link acknowledged it as it handed it on (D94), whatever its run.
            Input::Batch { agent, mut batch } => {
                let a = &mut self.agents[agent];
                a.heard(now);
                // A batch resent after a reconnect is kept once. One of an earlier run,
                // resent after a resume because its ack was lost with the old
                // connection, is dropped: that run's result is written (with this batch,
                // unless the agent was lost from it); its link acknowledged it, or the
                // agent would keep it and send it again on every resume of the session.
                if batch.run_id == run_id && a.seen.insert(batch.seq) {
                    a.rows += batch.rows.len() as u64;
                    a.place(agent, &mut batch.rows, batch.started_unix_ns, self.run_start_ns);
                    out.push(Action::Rows(batch.rows));
                }
            }
            Input::Closed { agent, error } => {
                if self.agents[agent].done.is_none() {
                    let why = error.unwrap_or_else(|| "session closed".into());
                    self.mark_lost(agent, format!("connection lost ({why})"), &mut out);
                }
            }
            Input::Reattaching { agent } => self.agents[agent].reattaching = Some(now),
            Input::Resumed { agent, after } => {
                let a = &mut self.agents[agent];
                a.last_heard = Some(now);
                a.reattaching = None;
                let addr = a.addr.clone();
                out.push(Action::Notice(format!(
                    "agent {addr}: control connection resumed after {:.1}s; unacknowledged batches resent",
                    after.as_secs_f64()
                )));
                // A Start sent as the stream broke may never have arrived (the agent
                // ignores a second Start of its run).
                if a.done.is_none()
                    && let Some(start) = a.start
                {
                    out.push(Action::Send { agent, msg: Msg::Start(start) });
                }
                // A Stop sent into the broken connection may never have arrived.
                if self.interrupted || self.stopping {
                    let reason = if self.interrupted { "interrupted" } else { "another agent was lost" };
                    out.push(Action::Send { agent, msg: Msg::Stop(Stop { run_id, reason: reason.into() }) });
                }
            }
            Input::Quiet => {}
        }
        if !message || self.loss_due.is_some_and(|t| now > t) {
            self.walk_agents(now, &mut out);
        }
        if !self.lost.is_empty() && !self.tolerate_loss && !self.stopping {
            self.stopping = true;
            out.push(Action::Broadcast(Msg::Stop(Stop { run_id, reason: "another agent was lost".into() })));
        }
        out
    }

    /// Every pending agent silent past its time is lost; then when the next one is due.
    fn walk_agents(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.agents.len() {
            let a = &self.agents[i];
            if a.pending() && loss_at(a).is_some_and(|t| now > t) {
                self.mark_lost(i, format!("silent for more than {:.1}s", LOSS_TIMEOUT.as_secs_f64()), out);
            }
        }
        self.loss_due = soonest_loss(&self.agents);
    }

    fn mark_lost(&mut self, agent: usize, why: String, out: &mut Vec<Action>) {
        let a = &mut self.agents[agent];
        if !a.pending() {
            return;
        }
        out.push(Action::Notice(format!("agent {} lost: {why}", a.addr)));
        a.lost = Some(why);
        self.lost.push(a.addr.clone());
    }

    /// The agents as collected, and how the run ended.
    pub fn finish(self) -> (Vec<AgentReport>, RunStatus) {
        let status = if self.terminated {
            RunStatus::Terminated
        } else if self.interrupted {
            RunStatus::Interrupted
        } else if self.lost.is_empty() {
            RunStatus::Complete
        } else if self.tolerate_loss {
            RunStatus::Partial { lost: self.lost }
        } else {
            RunStatus::Invalid { lost: self.lost }
        };
        (self.agents, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Done, Health, Heartbeat, Row, SampleBatch, Start};

    const RUN: u64 = 7;

    fn collector(n: usize, tolerate: bool, t0: Instant) -> Collector {
        let agents = (0..n).map(|i| AgentReport { addr: format!("a{i}"), ..Default::default() }).collect();
        Collector::new(RUN, 0, agents, tolerate, t0, t0 + Duration::from_secs(3600))
    }

    fn batch(agent: usize, seq: u64, first_index: u64, n: u64) -> Input {
        let rows = (first_index..first_index + n).map(|index| Row { index, ..Default::default() }).collect();
        let batch = RowBatch::from(SampleBatch { run_id: RUN, seq, rows, started_unix_ns: 1 });
        Input::Batch { agent, batch }
    }

    fn done(agent: usize, reason: surge_proto::StopReason) -> Input {
        let d = Done { run_id: RUN, stop: reason as i32, ..Default::default() };
        Input::Msg { agent, msg: agent_msg::Msg::Done(d) }
    }

    fn heartbeat(agent: usize) -> Input {
        Input::Msg { agent, msg: agent_msg::Msg::Heartbeat(Heartbeat::default()) }
    }

    fn stops(actions: &[Action]) -> usize {
        actions.iter().filter(|a| matches!(a, Action::Broadcast(Msg::Stop(_)))).count()
    }

    #[test]
    fn silence_of_2_9_s_loses_the_agent_and_stops_the_others() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        // Agent 0 keeps beating every 100 ms; agent 1 falls silent after t0.
        for k in 1..=29 {
            let acts = c.handle(heartbeat(0), t0 + Duration::from_millis(100 * k));
            assert_eq!(stops(&acts), 0, "nobody is lost at {k}00 ms");
        }
        let acts = c.handle(heartbeat(0), t0 + Duration::from_millis(2_950));
        assert_eq!(stops(&acts), 1, "{acts:?}");
        assert!(acts.iter().any(|a| matches!(a, Action::Notice(n) if n.contains("a1 lost: silent"))), "{acts:?}");
        // Told once, not on every later input.
        assert_eq!(stops(&c.handle(Input::Quiet, t0 + Duration::from_secs(4))), 0);
        assert!(!c.finished(t0 + Duration::from_secs(4)), "agent 0 is still running");
        c.handle(done(0, surge_proto::StopReason::Stopped), t0 + Duration::from_secs(5));
        assert!(c.finished(t0 + Duration::from_secs(5)));
        let (agents, status) = c.finish();
        assert_eq!(status, RunStatus::Invalid { lost: vec!["a1".into()] });
        assert!(agents[0].lost.is_none() && agents[1].lost.is_some());
    }

    /// Heartbeats reach the collector only as times its links wrote (D79): they keep an
    /// agent alive as messages do, and a stale time changes nothing.
    #[test]
    fn an_agent_heard_by_its_link_alone_is_not_lost() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut c = collector(2, false, t0);
        c.heard(0, ms(2_500));
        c.heard(0, ms(1_000));
        c.heard(1, ms(2_000));
        assert_eq!(stops(&c.handle(Input::Quiet, ms(4_800))), 0, "a0 heard at 2.5 s, a1 at 2.0 s");
        c.heard(0, ms(5_000));
        let acts = c.handle(Input::Quiet, ms(4_950));
        assert_eq!(stops(&acts), 1, "a1 silent since 2.0 s: {acts:?}");
        assert!(acts.iter().any(|a| matches!(a, Action::Notice(n) if n.contains("a1 lost"))), "{acts:?}");
        assert_eq!(c.next_loss_check(), Some(ms(5_000) + LOSS_TIMEOUT + Duration::from_millis(1)), "a0's is next");
        // The links' table, read whole.
        let table = super::super::heard::Heard::new(2);
        let mut c = collector(2, false, t0);
        let now = Instant::now().max(t0);
        table.mark(1, now + Duration::from_millis(2_000));
        c.hear_all(&table);
        let at = now + Duration::from_millis(4_000);
        let acts = c.handle(Input::Quiet, at);
        assert!(acts.iter().any(|a| matches!(a, Action::Notice(n) if n.contains("a0 lost"))), "{acts:?}");
        assert!(
            !acts.iter().any(|a| matches!(a, Action::Notice(n) if n.contains("a1 lost"))),
            "a1 was in the table: {acts:?}"
        );
    }

    #[test]
    fn a_resumed_agent_is_heard_again_and_told_a_stop_it_may_have_missed() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        c.handle(heartbeat(0), t0 + Duration::from_millis(2_500));
        // Agent 1 resumes after 2.5 s of silence: not lost, and its silence starts over.
        let acts = c.handle(
            Input::Resumed { agent: 1, after: Duration::from_millis(2_500) },
            t0 + Duration::from_millis(2_500),
        );
        assert!(acts.iter().any(|a| matches!(a, Action::Notice(n) if n.contains("a1: control connection resumed"))));
        assert!(!acts.iter().any(|a| matches!(a, Action::Send { .. })), "nothing to repeat: {acts:?}");
        assert_eq!(stops(&c.handle(heartbeat(0), t0 + Duration::from_millis(5_000))), 0, "a1 heard at 2.5 s");
        c.handle(Input::Interrupt, t0 + Duration::from_millis(5_100));
        let acts =
            c.handle(Input::Resumed { agent: 1, after: Duration::from_millis(600) }, t0 + Duration::from_millis(5_200));
        assert!(
            acts.contains(&Action::Send {
                agent: 1,
                msg: Msg::Stop(Stop { run_id: RUN, reason: "interrupted".into() })
            }),
            "{acts:?}"
        );
    }

    #[test]
    fn a_resumed_agent_gets_its_start_again_until_it_is_done() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        let start = Start { run_id: RUN, start_at_unix_ns: 5, deadline_unix_ns: 9 };
        c.agents[1].start = Some(start);
        let resumed = Input::Resumed { agent: 1, after: Duration::from_millis(600) };
        let acts = c.handle(resumed, t0 + Duration::from_millis(700));
        assert!(acts.contains(&Action::Send { agent: 1, msg: Msg::Start(start) }), "{acts:?}");
        c.handle(done(1, surge_proto::StopReason::Duration), t0 + Duration::from_secs(2));
        let acts =
            c.handle(Input::Resumed { agent: 1, after: Duration::from_millis(600) }, t0 + Duration::from_secs(3));
        assert!(!acts.iter().any(|a| matches!(a, Action::Send { .. })), "done: nothing to resend: {acts:?}");
    }

    #[test]
    fn a_second_interrupt_stops_waiting_for_the_agents() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        let acts = c.handle(Input::Interrupt, t0);
        assert_eq!(stops(&acts), 1);
        assert!(!c.finished(t0), "the agents flush their last rows first");
        let acts = c.handle(Input::Interrupt, t0 + Duration::from_millis(100));
        assert_eq!(stops(&acts), 0, "{acts:?}");
        assert!(c.finished(t0 + Duration::from_millis(100)), "a second Ctrl-C leaves at once");
        assert_eq!(c.finish().1, RunStatus::Interrupted);
    }

    #[test]
    fn the_loss_check_is_due_just_after_the_quietest_agents_timeout() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        c.handle(heartbeat(0), t0 + Duration::from_millis(700));
        let at = c.next_loss_check().unwrap();
        assert_eq!(at, t0 + LOSS_TIMEOUT + Duration::from_millis(1), "agent 1, silent since t0");
        assert!(c.handle(Input::Quiet, at - Duration::from_millis(1)).is_empty());
        assert_eq!(stops(&c.handle(Input::Quiet, at)), 1, "due means lost");
        // Lost or done agents are not waited for.
        assert_eq!(
            c.next_loss_check(),
            Some(t0 + Duration::from_millis(700) + LOSS_TIMEOUT + Duration::from_millis(1))
        );
        c.handle(done(0, surge_proto::StopReason::Stopped), t0 + Duration::from_secs(4));
        assert_eq!(c.next_loss_check(), None);
    }

    /// D96: a message walks no agent list. The check stays when it was due (the loop wakes
    /// then, and a quiet input walks), and a loss that falls due is found by the first
    /// message after it, as before.
    #[test]
    fn the_agents_are_walked_for_losses_when_one_falls_due_not_per_message() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut c = collector(2, false, t0);
        c.handle(heartbeat(0), ms(1_000));
        c.handle(heartbeat(1), ms(1_000));
        assert_eq!(c.next_loss_check(), Some(t0 + LOSS_TIMEOUT + Duration::from_millis(1)), "not walked");
        assert_eq!(stops(&c.handle(heartbeat(0), ms(2_901))), 0, "walked: both heard at 1.0 s");
        assert_eq!(c.next_loss_check(), Some(ms(1_000) + LOSS_TIMEOUT + Duration::from_millis(1)));
        // Agent 1 falls silent after 1.0 s while agent 0 keeps talking.
        assert_eq!(stops(&c.handle(heartbeat(0), ms(3_900))), 0);
        let acts = c.handle(heartbeat(0), ms(3_901));
        assert_eq!(stops(&acts), 1, "{acts:?}");
        assert!(acts.iter().any(|a| matches!(a, Action::Notice(n) if n.contains("a1 lost: silent"))), "{acts:?}");
        assert_eq!(c.next_loss_check(), Some(ms(3_901) + LOSS_TIMEOUT + Duration::from_millis(1)), "a0's");
    }

    #[test]
    fn a_resume_that_reached_the_agent_defers_its_loss_by_the_resumes_timeout_only() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        let beat = |c: &mut Collector, ms: u64| c.handle(heartbeat(0), t0 + Duration::from_millis(ms));
        // Agent 1 is silent since t0; the path comes back at 2.8 s and a resume is under way.
        beat(&mut c, 2_800);
        c.handle(Input::Reattaching { agent: 1 }, t0 + Duration::from_millis(2_800));
        let due = t0 + Duration::from_millis(2_800) + ATTACH_TIMEOUT + Duration::from_millis(1);
        assert_eq!(c.next_loss_check(), Some(due));
        assert_eq!(stops(&beat(&mut c, 3_000)), 0, "silent 3.0 s, but its resume is answering");
        // The resume completes: heard again, its silence starts over.
        c.handle(Input::Resumed { agent: 1, after: Duration::from_millis(3_100) }, t0 + Duration::from_millis(3_100));
        assert_eq!(stops(&beat(&mut c, 5_900)), 0);
        // A resume that never answers is a loss once its timeout passes.
        c.handle(Input::Reattaching { agent: 1 }, t0 + Duration::from_millis(5_900));
        assert_eq!(stops(&beat(&mut c, 6_400)), 0, "still within the resume's 0.5 s");
        let acts = beat(&mut c, 6_402);
        assert_eq!(stops(&acts), 1, "{acts:?}");
        // A cut: nothing comes back, and the loss is at 2.9 s as before.
        let mut c = collector(1, false, t0);
        assert_eq!(stops(&c.handle(Input::Quiet, t0 + LOSS_TIMEOUT + Duration::from_millis(1))), 1);
    }

    #[test]
    fn silence_shorter_than_the_timeout_is_not_a_loss() {
        let t0 = Instant::now();
        let mut c = collector(1, false, t0);
        let acts = c.handle(Input::Quiet, t0 + LOSS_TIMEOUT);
        assert!(acts.is_empty(), "{acts:?}");
        c.handle(heartbeat(0), t0 + LOSS_TIMEOUT);
        assert!(c.handle(Input::Quiet, t0 + LOSS_TIMEOUT * 2 - Duration::from_millis(1)).is_empty());
    }

    #[test]
    fn a_lost_agent_with_tolerance_makes_a_partial_run_without_stopping_the_rest() {
        let t0 = Instant::now();
        let mut c = collector(2, true, t0);
        let acts = c.handle(Input::Closed { agent: 1, error: Some("reset".into()) }, t0);
        assert_eq!(stops(&acts), 0);
        c.handle(done(0, surge_proto::StopReason::Finished), t0 + Duration::from_secs(1));
        let (_, status) = c.finish();
        assert_eq!(status, RunStatus::Partial { lost: vec!["a1".into()] });
    }

    #[test]
    fn every_batch_is_kept_once_in_order() {
        let t0 = Instant::now();
        let mut c = collector(1, false, t0);
        let mut order = Vec::new();
        for (seq, first, dup) in [(0, 0, false), (1, 10, false), (1, 10, true), (2, 20, false)] {
            let acts = c.handle(batch(0, seq, first, 10), t0);
            // The link acknowledges (D94): nothing goes back from here.
            assert!(!acts.iter().any(|a| matches!(a, Action::Send { .. })), "{acts:?}");
            match &acts[..] {
                [Action::Rows(rows)] if !dup => order.extend(rows.iter().map(|r| r.row.index)),
                [] if dup => {}
                other => panic!("batch {seq}: {other:?}"),
            }
        }
        // A batch of an earlier run, resent after a resume: not kept (its link
        // acknowledged it). Decoded by prost, it is read as a link's batch is.
        let stale = Input::Msg {
            agent: 0,
            msg: agent_msg::Msg::Batch(SampleBatch {
                run_id: RUN - 1,
                seq: 3,
                rows: vec![Row::default()],
                ..Default::default()
            }),
        };
        assert_eq!(c.handle(stale, t0), vec![]);
        c.handle(done(0, surge_proto::StopReason::Finished), t0);
        let (agents, status) = c.finish();
        assert_eq!(status, RunStatus::Complete);
        assert_eq!(agents[0].rows, 30);
        assert_eq!(order, (0..30).collect::<Vec<_>>());
        assert_eq!(agents[0].completed, 30);
    }

    #[test]
    fn done_after_the_last_batch_finishes_the_run() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        c.handle(batch(0, 0, 0, 5), t0);
        c.handle(done(0, surge_proto::StopReason::Finished), t0);
        assert!(!c.finished(t0), "agent 1 has not said Done");
        c.handle(batch(1, 0, 5, 5), t0);
        assert!(!c.finished(t0));
        c.handle(done(1, surge_proto::StopReason::Finished), t0);
        assert!(c.finished(t0));
        let (agents, status) = c.finish();
        assert_eq!(status, RunStatus::Complete);
        assert_eq!(agents.iter().map(|a| a.rows).sum::<u64>(), 10);
    }

    #[test]
    fn interrupt_stops_every_agent_once_and_keeps_batches_still_in_flight() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        c.handle(batch(0, 0, 0, 4), t0);
        let acts = c.handle(Input::Interrupt, t0);
        assert_eq!(stops(&acts), 1);
        // Batches sent before the agents saw Stop still arrive and are kept (their
        // links acknowledged them, D94).
        let acts = c.handle(batch(1, 0, 4, 3), t0);
        assert!(matches!(&acts[..], [Action::Rows(r)] if r.len() == 3), "{acts:?}");
        c.handle(done(0, surge_proto::StopReason::Stopped), t0);
        c.handle(done(1, surge_proto::StopReason::Stopped), t0);
        assert!(c.finished(t0));
        let (agents, status) = c.finish();
        assert_eq!(status, RunStatus::Interrupted);
        assert_eq!(agents[0].rows + agents[1].rows, 7);
    }

    #[test]
    fn an_agent_stopped_by_a_signal_counts_as_lost() {
        let t0 = Instant::now();
        let mut c = collector(1, false, t0);
        c.handle(done(0, surge_proto::StopReason::Signal), t0);
        let (_, status) = c.finish();
        assert_eq!(status, RunStatus::Invalid { lost: vec!["a0".into()] });
    }

    /// A Done that says the lease ran out reached the coordinator on the old connection,
    /// once the path came back (bench/partition.sh, blip-2.5s: the run was called
    /// complete with 7,000 of the agent's 15,000 rows).
    #[test]
    fn an_agent_whose_lease_ran_out_counts_as_lost() {
        let t0 = Instant::now();
        let mut c = collector(1, false, t0);
        c.handle(batch(0, 0, 0, 5), t0);
        c.handle(done(0, surge_proto::StopReason::Lease), t0);
        let (_, status) = c.finish();
        assert_eq!(status, RunStatus::Invalid { lost: vec!["a0".into()] });
    }

    #[test]
    fn health_reports_progress() {
        let t0 = Instant::now();
        let mut c = collector(2, false, t0);
        let h = |completed| agent_msg::Msg::Health(Health { completed, failed: 1, ..Default::default() });
        c.handle(Input::Msg { agent: 0, msg: h(10) }, t0);
        let acts = c.handle(Input::Msg { agent: 1, msg: h(5) }, t0);
        assert_eq!(acts[0], Action::Progress(17));
        assert!(matches!(acts[1], Action::Health { agent: 1, .. }));
    }
}
