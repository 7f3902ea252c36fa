//! Opening the sessions (D87, D91): each agent reached is sent a Hello that gives its new
//! session an id, and its answer awaited; the sessions open hear heartbeats until the
//! last one answered; an agent that went away before it answered is reported so that it
//! is dialled again; one that fell silent before it answered is resumed by that id.

use super::incoming::{Incoming, Said};
use super::link::{self, REDIAL_AFTER, RESUME_WINDOW, Resume, Step, hello, open_stream};
use super::{FleetError, chain, dropped, is_tls_failure, tls_hint};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use surge_proto::{ErrorCode, HelloReply, PREVIOUS_PROTOCOL_VERSION, PROTOCOL_VERSION, agent_msg};
use tonic::transport::Endpoint;

/// How long opening a session may take before the agent counts as unreachable.
const SESSION_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a session on `channel` and reads the agent's answer to its Hello, resuming the
/// session on a fresh connection (`resume_ep`) when the agent falls silent before it
/// answered (D91). An agent that
/// refuses this coordinator's protocol version is asked again in the previous one, which
/// agents of that version require exactly (D43); an agent that refuses both is named with
/// its version and which side to upgrade. A call that never gets its answer (how a TLS
/// 1.3 refusal of the client's certificate may show) is bounded here.
async fn open_session(
    agent: usize,
    channel: tonic::transport::Channel,
    resume_ep: Endpoint,
    addr: &str,
    tls: bool,
) -> Result<Opened, NotOpened> {
    let err = |message: String| NotOpened::Failed(FleetError::Connect { addr: addr.to_string(), message });
    let mut refusal = String::new();
    for version in [PROTOCOL_VERSION, PREVIOUS_PROTOCOL_VERSION] {
        let resume = Resume::new(agent, resume_ep.clone(), version);
        let answer = first_answer(channel.clone(), version, resume);
        let (stream, first) = match tokio::time::timeout(SESSION_OPEN_TIMEOUT, answer).await {
            Ok(Answer::Resumed(stream, reply, after)) => return Ok(Opened { stream, reply, resumed: Some(after) }),
            Ok(Answer::Stream(Ok(got))) => got,
            Ok(Answer::Stream(Err(s))) => {
                // The agent went away after the connection was made (D87): tried again as
                // an agent not listening yet is. On plaintext, so is a connection that broke
                // before any answer; on TLS that is how a rejected certificate shows.
                if link::refused(&s) || (!tls && dropped(&s)) {
                    return Err(NotOpened::Dropped { why: chain(&s), broke: !link::refused(&s) });
                }
                // With TLS 1.3 a rejected client certificate surfaces only as a broken
                // transport on the first call, or a stream that dies before its first message.
                let h = tls_hint(tls || is_tls_failure(&s, false));
                return Err(err(format!("session refused: {}{h}", chain(&s))));
            }
            Err(_) => {
                let h = tls_hint(tls);
                return Err(err(format!("no session within {}s{h}", SESSION_OPEN_TIMEOUT.as_secs())));
            }
        };
        match first {
            Some(Said::Msg(agent_msg::Msg::Hello(reply))) => {
                return Ok(Opened { stream, reply, resumed: None });
            }
            Some(Said::Msg(agent_msg::Msg::Error(e))) if e.code() == ErrorCode::ProtocolMismatch => {
                refusal = e.message;
            }
            Some(Said::Msg(agent_msg::Msg::Error(e))) => {
                return Err(err(format!("session refused: {}", e.message)));
            }
            other => return Err(err(format!("unexpected answer to Hello: {other:?}"))),
        }
    }
    Err(err(version_refusal(&refusal)))
}

/// The first answer to a new session's Hello.
enum Answer {
    /// On the session's own stream: its first message other than a heartbeat, or how
    /// the stream failed.
    Stream(Result<(link::Stream, Option<Said>), tonic::Status>),
    /// On a fresh connection that resumed the session, after this long.
    Resumed(link::Stream, HelloReply, Duration),
}

/// Sends the Hello that opens a session, giving it a fresh id (D91), and waits for the
/// agent's answer. An agent silent for 0.5 s (no answer and no heartbeat: a drop as the
/// session opened) is dialled as a link's silent agent is (D2), and the first fresh
/// connection resumes the session by that id: the coordinator no longer needs the answer
/// to know it. A resume under way when the old stream answers decides, since the agent
/// talks on the latest stream it was given. An agent that does not know the id (built
/// before it) refuses the resume, and its own stream's answer is awaited as before.
async fn first_answer(channel: tonic::transport::Channel, version: u32, mut resume: Resume) -> Answer {
    let id = rand::random::<u64>().max(1);
    let sent = tokio::time::Instant::now();
    // When the agent was last heard, in ms after the Hello (its heartbeats count).
    let heard_ms = AtomicU64::new(0);
    let opening = async {
        let mut s = open_stream(channel, hello(0, id, version)).await?;
        // The agent's heartbeats may come before its answer to the Hello.
        loop {
            match s.inbound.message().await?.and_then(Incoming::said) {
                Some(Said::Msg(agent_msg::Msg::Heartbeat(_) | agent_msg::Msg::Health(_))) => {
                    heard_ms.store(sent.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                first => return Ok::<_, tonic::Status>((s, first)),
            }
        }
    };
    tokio::pin!(opening);
    let mut answered = None;
    let mut dialling = true;
    // When the first fresh connection was dialled: from then on the resume goes on, answer
    // or not, until it resumes or is refused, or the agent's lease has surely run out (D2):
    // an answer on the old stream shows that the agent heard the Hello, not that it hears
    // what follows, which TCP's backoff may hold past its lease.
    let mut dialled: Option<tokio::time::Instant> = None;
    let lasting = |dialled: Option<tokio::time::Instant>| dialled.is_some_and(|d| d.elapsed() < RESUME_WINDOW);
    loop {
        let heard = sent + Duration::from_millis(heard_ms.load(Ordering::Relaxed));
        let silent = dialling && (lasting(dialled) || (answered.is_none() && heard.elapsed() >= REDIAL_AFTER));
        tokio::select! {
            got = &mut opening, if answered.is_none() => answered = Some(got),
            step = resume.next(silent.then_some((id, heard))) => match step {
                Step::Resumed(resumed) => {
                    let (stream, reply) = *resumed;
                    return Answer::Resumed(stream, reply, sent.elapsed());
                }
                // Not this agent's id, or past its lease: the old stream decides.
                Step::Gone { .. } | Step::Expired(_) => dialling = false,
                Step::Dialled => {
                    dialled.get_or_insert_with(tokio::time::Instant::now);
                }
                Step::Attaching | Step::Failed(_) => {}
            },
            // Wakes when the silence reaches the redial's threshold.
            () = tokio::time::sleep_until(heard + REDIAL_AFTER), if !silent && dialling && answered.is_none() => {}
        }
        // The old stream's answer, once no resume is under way or to come.
        let resuming = resume.attaching() || (dialling && lasting(dialled));
        if !resuming && let Some(got) = answered.take() {
            return Answer::Stream(got);
        }
    }
}

/// An agent's open session: its stream, its answer to the Hello, and whether (after how
/// long) the session opened by a resume (D91).
pub(super) struct Opened {
    pub stream: link::Stream,
    pub reply: HelloReply,
    pub resumed: Option<Duration>,
}

/// Agents that went away before their session opened (D87): by agent, why, and whether
/// the connection broke (rather than a redial being refused).
pub(super) type Dropped = Vec<(usize, String, bool)>;

/// Opens the session of every agent reached (`channels`, by agent) at once; the sessions
/// open hear a heartbeat every 100 ms until the last one has answered. `Ok(Err(..))`: the
/// agents that went away before answering; the sessions opened beside them are dropped
/// with it (they would outlive their lease while those are awaited, D2).
pub(super) async fn open_all(
    channels: &[Option<tonic::transport::Channel>],
    resume_eps: &[Endpoint],
    addrs: &[String],
    secure: bool,
) -> Result<Result<Vec<Option<Opened>>, Dropped>, FleetError> {
    let mut set = tokio::task::JoinSet::new();
    for (i, ch) in channels.iter().enumerate() {
        let Some(ch) = ch.clone() else { continue };
        let (addr, ep) = (addrs[i].clone(), resume_eps[i].clone());
        set.spawn(async move { (i, open_session(i, ch, ep, &addr, secure).await) });
    }
    let mut sessions: Vec<Option<Opened>> = channels.iter().map(|_| None).collect();
    let mut dropped = Vec::new();
    let mut beat = tokio::time::interval(link::HEARTBEAT_INTERVAL);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let joined = tokio::select! {
            joined = set.join_next() => joined,
            _ = beat.tick() => {
                sessions.iter().flatten().for_each(|o| o.stream.heartbeat());
                continue;
            }
        };
        let Some(joined) = joined else { break };
        let (i, opened) = joined
            .map_err(|e| FleetError::Connect { addr: "?".into(), message: format!("opening a session failed: {e}") })?;
        match opened {
            Ok(session) => sessions[i] = Some(session),
            Err(NotOpened::Failed(e)) => return Err(e),
            Err(NotOpened::Dropped { why, broke }) => dropped.push((i, why, broke)),
        }
    }
    Ok(if dropped.is_empty() { Ok(sessions) } else { Err(dropped) })
}

/// Why a session did not open.
#[derive(Debug)]
enum NotOpened {
    /// The agent went away between the connection and its answer: tried again (`broke`:
    /// the connection broke, rather than a redial being refused).
    Dropped { why: String, broke: bool },
    /// Anything else: the run fails at once.
    Failed(FleetError),
}

/// What to say when an agent refused both versions this coordinator speaks: both
/// versions, and which side to upgrade (the agent says its version in its refusal).
fn version_refusal(refusal: &str) -> String {
    let theirs = refusal.rsplit_once("this agent speaks version ").and_then(|(_, v)| v.trim().parse::<u32>().ok());
    let ours = format!(
        "this coordinator (surge {}) speaks protocol version {PROTOCOL_VERSION} and drives agents of version \
         {PREVIOUS_PROTOCOL_VERSION} too",
        env!("CARGO_PKG_VERSION")
    );
    match theirs {
        Some(v) if v > PROTOCOL_VERSION => {
            format!("protocol version mismatch: the agent speaks version {v}; {ours}: upgrade the coordinator")
        }
        Some(v) => format!(
            "protocol version mismatch: the agent speaks version {v}; {ours}: upgrade the agent to surge {}",
            env!("CARGO_PKG_VERSION")
        ),
        None => format!("protocol version mismatch: {ours}; the agent refused both ({refusal})"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::endpoint;
    use super::super::fake::{self, Out, serve};
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use surge_proto::agent_server::Agent;
    use surge_proto::{AgentMsg, CoordinatorMsg, coordinator_msg};
    use tokio::sync::mpsc;
    use tonic::{Request, Response, Status, Streaming};

    /// An agent that answers the Hello after `delay`, then counts the heartbeats it hears.
    struct Slow {
        delay: Duration,
        beats: Arc<AtomicUsize>,
    }

    #[tonic::async_trait]
    impl Agent for Slow {
        type SessionStream = Out;

        async fn session(&self, req: Request<Streaming<CoordinatorMsg>>) -> Result<Response<Out>, Status> {
            let mut inbound = req.into_inner();
            let (tx, rx) = mpsc::unbounded_channel();
            let (delay, beats) = (self.delay, self.beats.clone());
            tokio::spawn(async move {
                let _hello = inbound.message().await;
                tokio::time::sleep(delay).await;
                let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Hello(HelloReply::default())) }));
                while let Ok(Some(m)) = inbound.message().await {
                    if matches!(m.msg, Some(coordinator_msg::Msg::Heartbeat(_))) {
                        beats.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))))
        }
    }

    /// A slow agent on loopback port 0, its address, and the heartbeats it has heard.
    async fn slow_agent(delay: Duration) -> (String, Arc<AtomicUsize>) {
        let beats = Arc::new(AtomicUsize::new(0));
        (serve(Slow { delay, beats: beats.clone() }).await, beats)
    }

    /// An agent whose answer to the opening Hello comes after 1.2 s on the old stream,
    /// and that refuses a resume until 150 ms after it (the coordinator's side of the old
    /// connection still in TCP's backoff), then takes one.
    struct LateAnswer {
        answered: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    }

    #[tonic::async_trait]
    impl Agent for LateAnswer {
        type SessionStream = Out;

        async fn session(&self, req: Request<Streaming<CoordinatorMsg>>) -> Result<Response<Out>, Status> {
            let mut inbound = req.into_inner();
            let hello = fake::hello(&mut inbound).await?;
            let (tx, rx) = mpsc::unbounded_channel();
            let reply =
                HelloReply { protocol_version: PROTOCOL_VERSION, session_id: hello.session_id, ..Default::default() };
            if hello.resume_session_id == 0 {
                let answered = Arc::clone(&self.answered);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(1200)).await;
                    *answered.lock().expect("answered") = Some(std::time::Instant::now());
                    let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Hello(reply)) }));
                    while let Ok(Some(_)) = inbound.message().await {}
                });
            } else {
                let answered = *self.answered.lock().expect("answered");
                if answered.is_none_or(|a| a.elapsed() < Duration::from_millis(150)) {
                    return Err(Status::unavailable("the path is down"));
                }
                let reply = HelloReply { resumed: true, session_id: hello.resume_session_id, ..reply };
                let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Hello(reply)) }));
                tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
            }
            Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))))
        }
    }

    /// D2: a resume dialled while the opening was silent goes on when the old stream
    /// answers; without the latch the old stream's answer is taken (tried).
    #[tokio::test]
    async fn an_opening_resume_goes_on_when_the_old_stream_answers() {
        let addr = serve(LateAnswer { answered: Arc::default() }).await;
        let ep = endpoint(&addr, None, Duration::from_secs(5)).expect("endpoint");
        let channels = vec![Some(ep.connect().await.expect("connect"))];
        let opened = open_all(&channels, &[ep], &[addr], false).await.expect("no failure").expect("no drop");
        let opened = opened[0].as_ref().expect("opened");
        assert!(opened.reply.resumed, "the session opened on a fresh stream");
        assert!(opened.resumed.is_some_and(|after| after >= Duration::from_millis(1200)), "{:?}", opened.resumed);
    }

    /// D87: the sessions opened first hear a heartbeat every 100 ms while another agent
    /// is slow to answer, so their lease (3 s, D2) does not run out before the links start.
    #[tokio::test]
    async fn sessions_open_first_hear_heartbeats_until_the_last_answers() {
        let (fast, fast_beats) = slow_agent(Duration::ZERO).await;
        let (slow, slow_beats) = slow_agent(Duration::from_millis(1000)).await;
        let addrs = vec![fast, slow];
        let (mut channels, mut eps) = (Vec::new(), Vec::new());
        for a in &addrs {
            let ep = endpoint(a, None, Duration::from_secs(5)).expect("endpoint");
            channels.push(Some(ep.connect().await.expect("connect")));
            eps.push(ep);
        }
        let t0 = std::time::Instant::now();
        let opened = open_all(&channels, &eps, &addrs, false).await.expect("no failure").expect("no drop");
        let ticks = t0.elapsed().as_millis() as usize / 100 + 1;
        assert!(opened.iter().all(Option::is_some));
        // The heartbeats sent before it returned arrive within a moment.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while fast_beats.load(Ordering::Relaxed) < 5 && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let heard = fast_beats.load(Ordering::Relaxed);
        assert!((5..=ticks).contains(&heard), "one heartbeat every 100 ms of {ticks}: {heard}");
        assert!(slow_beats.load(Ordering::Relaxed) <= 1, "the slow one opened last");
    }
}
