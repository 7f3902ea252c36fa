//! The embedded agent (D1, D63): the one place the coordinator reaches the agent crate.
//! [`embedded`] starts it in this process and opens a session with it whose messages
//! cross in-process channels as typed values. Heartbeats go out every 100 ms as over gRPC
//! (the agent's lease is the same state machine); there is nothing to resume, since two
//! channels cannot break apart while both ends live. [`agent_command`] is the agent's own
//! command line, for the CLI reference.

use super::heard::Heard;
use super::incoming::RowBatch;
use super::link::{HEARTBEAT_INTERVAL, hello};
use super::outgoing::ack_for;
use super::{EMBEDDED, Event, Fleet, FleetError, chain, now_ns};
use std::sync::Arc;
use std::time::Duration;
use surge_agent::service::LocalSession;
use surge_proto::PROTOCOL_VERSION;
use surge_proto::{AgentMsg, CoordinatorMsg, Heartbeat, agent_msg, coordinator_msg};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A session with the embedded agent over in-process channels (D1: typed rows, no
/// encoding); its address in results and messages is [`EMBEDDED`].
pub async fn embedded(stop_agent: CancellationToken) -> Result<Fleet, FleetError> {
    let agent = surge_agent::daemon::embedded(stop_agent);
    let session = agent.open_local(hello(0, 0, PROTOCOL_VERSION)).await.map_err(|s| FleetError::Connect {
        addr: EMBEDDED.to_string(),
        message: format!("session refused: {}", chain(&s)),
    })?;
    let (ev_tx, events) = mpsc::channel(8192);
    let (tx, rx) = mpsc::channel::<CoordinatorMsg>(1024);
    let stop = CancellationToken::new();
    let tasks = tokio_util::task::TaskTracker::new();
    let heard = Arc::new(Heard::new(1));
    tasks.spawn(LocalLink { agent: 0, session, rx, events: ev_tx, heard: heard.clone(), stop: stop.clone() }.run());
    tasks.close();
    Ok(Fleet {
        addrs: vec![EMBEDDED.to_string()],
        missing: Vec::new(),
        waited: Duration::ZERO,
        senders: vec![tx],
        events,
        heard,
        links: stop,
        tasks,
    })
}

/// `surge-agent`'s command line (its flags in docs/cli.md).
pub fn agent_command() -> clap::Command {
    <surge_agent::daemon::AgentArgs as clap::CommandFactory>::command()
}

/// Forwards the fleet's messages to the embedded agent and the agent's messages to the
/// fleet's events, stamped with their arrival time. Ends the session with Bye.
pub(super) struct LocalLink {
    pub agent: usize,
    pub session: LocalSession,
    /// The fleet's messages for this agent.
    pub rx: mpsc::Receiver<CoordinatorMsg>,
    pub events: mpsc::Sender<Event>,
    /// Where the agent's heartbeats go instead of the events (D79).
    pub heard: Arc<Heard>,
    /// Cancelled when the fleet closes.
    pub stop: CancellationToken,
}

impl LocalLink {
    pub(super) async fn run(self) {
        let LocalLink { agent, session: LocalSession { tx, rx: mut from_agent }, mut rx, events, heard, stop } = self;
        let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut opened = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    let _ = tx.send(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Bye(surge_proto::Bye {})) });
                    return;
                }
                m = rx.recv() => match m {
                    Some(m) => { let _ = tx.send(m); }
                    None => return,
                },
                m = from_agent.recv() => {
                    let error = match m {
                        Some(Ok(AgentMsg { msg: Some(agent_msg::Msg::Batch(b)) })) => {
                            heard.mark(agent, std::time::Instant::now());
                            let batch = RowBatch::from(b);
                            let ack = ack_for(&batch);
                            if events.send(Event::Batch { agent, batch }).await.is_err() {
                                return;
                            }
                            // Owed by the link (D94); at once, as nothing here costs a syscall.
                            let _ = tx.send(ack);
                            continue;
                        }
                        Some(Ok(AgentMsg { msg: Some(msg) })) => {
                            let Some(msg) = heard.arrived(agent, std::time::Instant::now(), Some(msg)) else {
                                continue;
                            };
                            opened |= matches!(msg, agent_msg::Msg::Hello(_));
                            if events.send(Event::Msg { agent, msg, recv_ns: now_ns() }).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        Some(Ok(AgentMsg { msg: None })) => continue,
                        Some(Err(s)) => Some(format!("{}: {}", s.code(), s.message())),
                        // As over gRPC: a session that never opened closes cleanly; one
                        // that did ended on the agent's side (shutdown or its lease).
                        None if opened => Some("the embedded agent ended the session".to_string()),
                        None => None,
                    };
                    let _ = events.send(Event::Closed { agent, error }).await;
                    return;
                }
                _ = tick.tick() => {
                    let beat = Heartbeat { sent_unix_ns: now_ns() };
                    let _ = tx.send(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Heartbeat(beat)) });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EMBEDDED, Event};
    use std::time::{Duration, Instant};
    use surge_proto::agent_msg;
    use tokio_util::sync::CancellationToken;

    /// D94: the embedded link acknowledges each batch it hands on, of this run or an
    /// earlier one; nothing comes back from the collection (nobody reads the events here
    /// but the test).
    #[tokio::test]
    async fn the_embedded_link_acknowledges_every_batch_it_hands_on() {
        use surge_proto::{AgentMsg, SampleBatch, coordinator_msg};
        use tokio::sync::mpsc;
        let (to_agent, mut agent_hears) = mpsc::unbounded_channel();
        let (agent_says, from_agent) = mpsc::unbounded_channel();
        let (ev_tx, mut events) = mpsc::channel(16);
        let (_tx, rx) = mpsc::channel(16);
        let stop = CancellationToken::new();
        let link = super::LocalLink {
            agent: 0,
            session: surge_agent::service::LocalSession { tx: to_agent, rx: from_agent },
            rx,
            events: ev_tx,
            heard: std::sync::Arc::new(super::Heard::new(1)),
            stop: stop.clone(),
        };
        let task = tokio::spawn(link.run());
        let sent = [(2, 0), (1, 4), (2, 1)];
        for (run_id, seq) in sent {
            let b = SampleBatch { run_id, seq, ..Default::default() };
            agent_says.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Batch(b)) })).expect("send");
        }
        let mut acks = Vec::new();
        let until = Instant::now() + Duration::from_secs(5);
        while acks.len() < sent.len() && Instant::now() < until {
            tokio::select! {
                Some(m) = agent_hears.recv() => if let Some(coordinator_msg::Msg::Ack(a)) = m.msg {
                    acks.push((a.run_id, a.seq));
                },
                Some(_) = events.recv() => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        assert_eq!(acks, sent, "every batch acknowledged, in order");
        stop.cancel();
        let _ = task.await;
    }

    /// The session opens, outlives the agent's 3 s lease on the link's heartbeats alone,
    /// and is reported closed when the agent stops.
    #[tokio::test]
    async fn the_embedded_session_lives_on_heartbeats_and_closes_with_the_agent() {
        let stop = CancellationToken::new();
        let mut fleet = super::embedded(stop.clone()).await.unwrap();
        assert_eq!(fleet.addrs, [EMBEDDED]);
        let first = fleet.next(Duration::from_secs(5)).await;
        assert!(
            matches!(&first, Some(Event::Msg { msg: agent_msg::Msg::Hello(h), .. }) if h.session_id != 0 && !h.resumed),
            "{first:?}"
        );
        let lease = surge_agent::daemon::DEFAULT_LEASE;
        let until = Instant::now() + lease + Duration::from_millis(700);
        let mut reports = 0;
        while Instant::now() < until {
            // The agent's heartbeats are not events (D79): its health reports are.
            match fleet.next(Duration::from_millis(2500)).await {
                Some(Event::Msg { msg: agent_msg::Msg::Health(_), .. }) => reports += 1,
                other => panic!("the session ended within the lease: {other:?}"),
            }
            // Half a second after a report, only the heartbeats can have been heard since.
            tokio::time::sleep(Duration::from_millis(450)).await;
            let silent = fleet.heard().last(0).map(|t| t.elapsed());
            assert!(silent.is_some_and(|s| s < Duration::from_millis(250)), "heard {silent:?} ago");
        }
        assert!(reports >= 3, "a health report every second: {reports}");
        stop.cancel();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "no Closed after the agent stopped");
            match fleet.next(Duration::from_secs(10)).await {
                Some(Event::Closed { agent: 0, error }) => {
                    assert_eq!(error.as_deref(), Some("the embedded agent ended the session"));
                    break;
                }
                Some(_) => {}
                None => panic!("no Closed after the agent stopped"),
            }
        }
        fleet.close();
    }
}
