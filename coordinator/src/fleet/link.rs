//! One agent's link: the session's current gRPC stream, something sent every 100 ms at
//! least (a heartbeat where nothing else went, on the grid of D79; acks in its place, D86),
//! and the resume (D2): when the agent falls silent for 0.5 s or the stream breaks, fresh
//! connections are dialled (a new attempt every 50 ms, each with a 100 ms connect
//! timeout, several in flight), and the first that connects, alone, carries the Hello
//! that resumes the session by id, so two streams never race to attach.

use super::heard::Heard;
use super::incoming::{Incoming, Said};
use super::outgoing::Outgoing;
use super::{Event, chain, is_tls_failure, now_ns, tls_hint};
use std::sync::Arc;
use std::time::Duration;
use surge_core::beat::Beat;
use surge_proto::codec::FrozenCodec;
use surge_proto::{CoordinatorMsg, Heartbeat, Hello, HelloReply, agent_msg, coordinator_msg};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};

/// Liveness both ways (D2).
pub(super) const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Silence after which the coordinator dials a fresh connection to resume (D2).
pub(super) const REDIAL_AFTER: Duration = Duration::from_millis(500);
/// TCP connect timeout of a resume's connection (D2).
pub(super) const RESUME_CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// A new connection attempt this often while resuming, at most this many in flight.
const REDIAL_EVERY: Duration = Duration::from_millis(50);
const MAX_CONNECTS: usize = 4;
/// Bound of the Hello exchange on a connected channel.
pub(super) const ATTACH_TIMEOUT: Duration = Duration::from_millis(500);
/// Past this silence the agent's lease (3 s) has run out: no more attempts.
pub(super) const RESUME_WINDOW: Duration = Duration::from_millis(3500);

/// The largest message either way.
const MAX_MESSAGE: usize = 64 << 20;

/// The `Agent.Session` call, as the generated client makes it, with the agent's
/// messages read as [`Incoming`] (D99).
async fn session(
    channel: Channel,
    outbound: UnboundedReceiverStream<CoordinatorMsg>,
) -> Result<Streaming<Incoming>, tonic::Status> {
    let mut grpc =
        tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE);
    grpc.ready().await.map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let path = http::uri::PathAndQuery::from_static("/surge.v1.Agent/Session");
    let mut req = tonic::Request::new(outbound);
    req.extensions_mut().insert(tonic::GrpcMethod::new("surge.v1.Agent", "Session"));
    let codec = FrozenCodec::<CoordinatorMsg, Incoming>::default();
    Ok(grpc.streaming(req, path, codec).await?.into_inner())
}

/// The Hello that opens (`resume_session_id` 0, giving the new session `session_id`, D91)
/// or resumes a session, in the protocol `version` the session speaks (this coordinator's,
/// or the previous one for an agent that refused it, D43).
pub(super) fn hello(resume_session_id: u64, session_id: u64, version: u32) -> CoordinatorMsg {
    CoordinatorMsg {
        msg: Some(coordinator_msg::Msg::Hello(Hello {
            protocol_version: version,
            coordinator_version: env!("CARGO_PKG_VERSION").into(),
            lease_ms: 0,
            resume_session_id,
            session_id,
        })),
    }
}

/// One stream of a session: what goes to the agent, what comes back.
pub(super) struct Stream {
    tx: mpsc::UnboundedSender<CoordinatorMsg>,
    pub(super) inbound: Streaming<Incoming>,
}

impl Stream {
    /// A heartbeat on a session whose link has not started yet (D2: the coordinator sends
    /// something every 100 ms; an agent that hears nothing for its 3 s lease ends the session).
    pub(super) fn heartbeat(&self) {
        let beat = Heartbeat { sent_unix_ns: now_ns() };
        let _ = self.tx.send(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Heartbeat(beat)) });
    }
}

/// Opens a session stream on `channel`; its first message is `first` (a Hello).
pub(super) async fn open_stream(channel: Channel, first: CoordinatorMsg) -> Result<Stream, tonic::Status> {
    let (tx, rx) = mpsc::unbounded_channel();
    // The agent answers the stream once it has read the Hello.
    let _ = tx.send(first);
    let inbound = session(channel, UnboundedReceiverStream::new(rx)).await?;
    Ok(Stream { tx, inbound })
}

/// One connection for a resume; a refused one means the agent process is gone, and
/// its session with it.
async fn connect(ep: Endpoint) -> Result<Channel, ResumeError> {
    ep.connect()
        .await
        .map_err(|e| if refused(&e) { ResumeError::Gone(chain(&e)) } else { ResumeError::Retry(chain(&e)) })
}

/// Resumes session `id` on `channel`: Hello with the id, and the agent's HelloReply
/// saying it resumed.
async fn attach(channel: Channel, id: u64, version: u32) -> Result<(Stream, HelloReply), ResumeError> {
    let attempt = async {
        let mut s = open_stream(channel, hello(id, 0, version)).await.map_err(|s| match s.code() {
            tonic::Code::NotFound => ResumeError::Gone(s.message().to_string()),
            _ => ResumeError::Retry(format!("{}: {}", s.code(), s.message())),
        })?;
        // The agent's heartbeats may come before its answer to the Hello.
        loop {
            match s.inbound.message().await.map(|m| m.and_then(Incoming::said)) {
                Ok(Some(Said::Msg(agent_msg::Msg::Hello(h)))) if h.resumed => return Ok((s, h)),
                Ok(Some(Said::Msg(agent_msg::Msg::Heartbeat(_) | agent_msg::Msg::Health(_)))) => {}
                other => return Err(ResumeError::Retry(format!("unexpected answer to a resume: {other:?}"))),
            }
        }
    };
    tokio::time::timeout(ATTACH_TIMEOUT, attempt)
        .await
        .map_err(|_| ResumeError::Retry("no resume reply in time".into()))?
}

/// Whether `e` is a refused TCP connection.
pub(super) fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        cur = c.source();
    }
    false
}

#[derive(Debug)]
enum ResumeError {
    /// Worth another attempt (unreachable, timed out).
    Retry(String),
    /// The agent has no such session any more.
    Gone(String),
}

/// A resume's two stages (D2): while asked, a fresh connection is dialled every 50 ms
/// (the endpoint's 100 ms connect timeout, at most four in flight), and the first that
/// connects, alone, carries the Hello that resumes the session, so two streams never race
/// to attach.
pub(super) struct Resume {
    agent: usize,
    ep: Endpoint,
    version: u32,
    /// The session the connections dialled resume.
    id: u64,
    redial: tokio::time::Interval,
    connecting: JoinSet<Result<Channel, ResumeError>>,
    attaching: JoinSet<Result<(Stream, HelloReply), ResumeError>>,
}

/// What a resume did.
pub(super) enum Step {
    /// A new attempt was due (dialled unless four are in flight).
    Dialled,
    /// Silent for this long, past the agent's lease: no more attempts.
    Expired(Duration),
    /// A connection was made and carries the resume's Hello.
    Attaching,
    /// The session resumed on this stream, with the agent's answer.
    Resumed(Box<(Stream, HelloReply)>),
    /// An attempt (its connection, or its Hello) failed and another is worth it.
    Failed(String),
    /// The agent refused the connection, or (`attached`) has no such session.
    Gone { attached: bool, why: String },
}

impl Resume {
    pub(super) fn new(agent: usize, ep: Endpoint, version: u32) -> Self {
        let mut redial = tokio::time::interval(REDIAL_EVERY);
        // After a long quiet spell, one attempt at once, then one every 50 ms (not a burst).
        redial.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { agent, ep, version, id: 0, redial, connecting: JoinSet::new(), attaching: JoinSet::new() }
    }

    /// Whether a connection carries the resume's Hello: its answer decides.
    pub(super) fn attaching(&self) -> bool {
        !self.attaching.is_empty()
    }

    /// The next step. With `dial` (the session to resume, and when it fell silent) a new
    /// connection is dialled every 50 ms while none attaches; without it, the attempts
    /// under way go on. Cancel safe: used as a branch of the caller's `select!`.
    pub(super) async fn next(&mut self, dial: Option<(u64, tokio::time::Instant)>) -> Step {
        loop {
            tokio::select! {
                _ = self.redial.tick(), if dial.is_some() && self.attaching.is_empty() => {
                    let (id, since) = dial.expect("checked");
                    let silent = since.elapsed();
                    if silent > RESUME_WINDOW {
                        return Step::Expired(silent);
                    }
                    if self.connecting.len() < MAX_CONNECTS {
                        tracing::debug!(agent = self.agent, silent_ms = silent.as_millis() as u64, "dialling to resume the session");
                        self.id = id;
                        self.connecting.spawn(connect(self.ep.clone()));
                    }
                    return Step::Dialled;
                }
                Some(res) = self.connecting.join_next(), if !self.connecting.is_empty() => match res {
                    // One that ended before the others were aborted, made or failed: the
                    // attach under way decides, alone.
                    _ if !self.attaching.is_empty() => {}
                    // The first connection carries the resume; the others are dropped
                    // before they say anything.
                    Ok(Ok(channel)) => {
                        self.connecting.abort_all();
                        self.attaching.spawn(attach(channel, self.id, self.version));
                        return Step::Attaching;
                    }
                    Ok(Err(ResumeError::Gone(why))) => return Step::Gone { attached: false, why },
                    Ok(Err(ResumeError::Retry(why))) => return Step::Failed(why),
                    Err(_) => {}
                },
                Some(res) = self.attaching.join_next(), if !self.attaching.is_empty() => match res {
                    Ok(Ok(resumed)) => return Step::Resumed(Box::new(resumed)),
                    Ok(Err(ResumeError::Gone(why))) => return Step::Gone { attached: true, why },
                    Ok(Err(ResumeError::Retry(why))) => {
                        tracing::info!(agent = self.agent, error = %why, "resume failed; dialling again");
                        return Step::Failed(why);
                    }
                    Err(_) => {}
                },
                else => std::future::pending().await,
            }
        }
    }
}

/// A session's link to one agent: forwards the fleet's messages to the current stream,
/// the agent's messages to the fleet's events (its heartbeats only to `heard`, D79), sends
/// a heartbeat where nothing else went for 100 ms, and when
/// the agent falls silent for [`REDIAL_AFTER`] or the stream breaks, resumes the session
/// on a fresh connection until the agent's lease has surely run out (D2). Ends the
/// session with Bye.
pub(super) struct Link {
    pub agent: usize,
    /// Where resumes dial (with [`RESUME_CONNECT_TIMEOUT`]).
    pub ep: Endpoint,
    pub tls: bool,
    /// The protocol version of the session (what a resume's Hello says).
    pub version: u32,
    /// The agent's answer to the Hello that opened the session (read when it opened).
    pub opened: HelloReply,
    /// The session opened by a resume after this long without an answer (D91).
    pub resumed: Option<Duration>,
    /// The fleet's messages for this agent.
    pub rx: mpsc::Receiver<CoordinatorMsg>,
    pub events: mpsc::Sender<Event>,
    /// When the agent was last heard, read by the collection loop.
    pub heard: Arc<Heard>,
    /// Cancelled when the fleet closes: Bye, and the stream ends.
    pub stop: CancellationToken,
}

impl Link {
    /// Carries the session until it closes. Long: one `select!` over the stream, the
    /// heartbeat, the redial and the resume's two stages (connect, then attach), read top
    /// to bottom as D2 and D72 describe them.
    pub(super) async fn run(mut self, mut cur: Stream) {
        let agent = self.agent;
        let (mut session_id, mut broken) = (self.opened.session_id, false);
        let opened = agent_msg::Msg::Hello(std::mem::take(&mut self.opened));
        if self.events.send(Event::Msg { agent, msg: opened, recv_ns: now_ns() }).await.is_err() {
            return;
        }
        let mut last_heard = tokio::time::Instant::now();
        // When the silence a resume answers began: the old stream may still deliver a
        // late message just before the resume completes.
        let mut silent_since: Option<tokio::time::Instant> = None;
        // The first heartbeat at once (the Hello went a round trip ago), then the grid.
        let now = tokio::time::Instant::now();
        let mut out = Outgoing::new(Beat::new(HEARTBEAT_INTERVAL, now, now_ns(), now));
        let beat_due = tokio::time::sleep_until(now);
        tokio::pin!(beat_due);
        let mut resume = Resume::new(agent, self.ep.clone(), self.version);
        let mut last_error = String::new();
        // A session that opened by a resume (D91) says so as any resume does.
        if let Some(after) = self.resumed
            && self.events.send(Event::Resumed { agent, after }).await.is_err()
        {
            return;
        }
        let mut resuming = false;
        loop {
            // Once dialled, a resume goes on until a fresh stream attaches (D2), or until the
            // agent's lease has surely run out since the silence began: the old stream
            // speaking again shows that the agent's direction healed, not that the agent hears
            // this side, whose retransmissions TCP's backoff may hold past the agent's lease.
            let silent = session_id != 0 && (broken || last_heard.elapsed() >= REDIAL_AFTER);
            resuming = silent || (resuming && silent_since.is_some_and(|s| s.elapsed() < RESUME_WINDOW));
            tokio::select! {
                _ = self.stop.cancelled() => {
                    let _ = cur.tx.send(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Bye(surge_proto::Bye {})) });
                    return;
                }
                m = self.rx.recv() => match m {
                    Some(m) => out.message(m, tokio::time::Instant::now(), |m| {
                        let _ = cur.tx.send(m);
                    }),
                    None => return,
                },
                m = cur.inbound.message(), if !broken => match m {
                    Ok(Some(m)) => {
                        last_heard = tokio::time::Instant::now();
                        if !resuming {
                            silent_since = None;
                        }
                        let event = match m.said() {
                            Some(Said::Batch(batch)) => {
                                self.heard.mark(agent, last_heard.into_std());
                                // Its ack, owed by the link (D94), waits for the next beat (D86).
                                out.received(&batch);
                                Event::Batch { agent, batch }
                            }
                            Some(Said::Msg(msg)) => {
                                let Some(msg) = self.heard.arrived(agent, last_heard.into_std(), Some(msg)) else {
                                    continue;
                                };
                                if let agent_msg::Msg::Hello(h) = &msg {
                                    session_id = h.session_id;
                                }
                                Event::Msg { agent, msg, recv_ns: now_ns() }
                            }
                            None => {
                                self.heard.mark(agent, last_heard.into_std());
                                continue;
                            }
                        };
                        if self.events.send(event).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) if session_id == 0 => {
                        let _ = self.events.send(Event::Closed { agent, error: None }).await;
                        return;
                    }
                    // The agent closes a session it ends; a resume attempt says whether
                    // it did (NotFound) or the connection did.
                    Ok(None) => {
                        broken = true;
                        last_error = "the stream ended".into();
                    }
                    Err(s) => {
                        let m = format!("{}: {}", s.code(), s.message());
                        if session_id == 0 {
                            let hint = tls_hint(is_tls_failure(&s, self.tls));
                            let _ = self.events.send(Event::Closed { agent, error: Some(format!("{m}{hint}")) }).await;
                            return;
                        }
                        broken = true;
                        last_error = m;
                    }
                },
                () = &mut beat_due => {
                    out.at_beat(tokio::time::Instant::now(), now_ns(), |m| {
                        let _ = cur.tx.send(m);
                    });
                    beat_due.as_mut().reset(out.due());
                },
                step = resume.next(resuming.then_some((session_id, last_heard))) => match step {
                    Step::Dialled => {
                        silent_since.get_or_insert(last_heard);
                    }
                    Step::Expired(silent) => {
                        let error = format!("no answer for {:.1}s and no resume ({last_error})", silent.as_secs_f64());
                        let _ = self.events.send(Event::Closed { agent, error: Some(error) }).await;
                        return;
                    }
                    Step::Attaching => {
                        if self.events.send(Event::Reattaching { agent }).await.is_err() {
                            return;
                        }
                    }
                    Step::Resumed(resumed) => {
                        let (fresh, _) = *resumed;
                        let after = silent_since.take().unwrap_or(last_heard).elapsed();
                        cur = fresh;
                        (broken, resuming) = (false, false);
                        last_heard = tokio::time::Instant::now();
                        if self.events.send(Event::Resumed { agent, after }).await.is_err() {
                            return;
                        }
                    }
                    Step::Gone { attached, why } => {
                        let error = if attached {
                            format!("the agent ended the session ({why})")
                        } else {
                            format!("the agent is gone ({why})")
                        };
                        let _ = self.events.send(Event::Closed { agent, error: Some(error) }).await;
                        return;
                    }
                    Step::Failed(why) => last_error = why,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::{Out, hello, serve};
    use crate::plan::ConnectWait;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use surge_proto::agent_server::Agent;
    use surge_proto::{
        AgentMsg, CoordinatorMsg, HelloReply, PROTOCOL_VERSION, SampleBatch, agent_msg, coordinator_msg,
    };
    use tokio::sync::mpsc;
    use tonic::{Request, Response, Status, Streaming};

    /// An agent that opens a session, sends `batches` (run id, seq) and notes every ack it hears.
    struct Sender {
        batches: Vec<(u64, u64)>,
        acks: Arc<Mutex<Vec<(u64, u64)>>>,
    }

    #[tonic::async_trait]
    impl Agent for Sender {
        type SessionStream = Out;

        async fn session(&self, req: Request<Streaming<CoordinatorMsg>>) -> Result<Response<Out>, Status> {
            let mut inbound = req.into_inner();
            let (tx, rx) = mpsc::unbounded_channel();
            let (batches, acks) = (self.batches.clone(), self.acks.clone());
            tokio::spawn(async move {
                let _hello = inbound.message().await;
                let reply = HelloReply { protocol_version: PROTOCOL_VERSION, session_id: 7, ..Default::default() };
                let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Hello(reply)) }));
                for (run_id, seq) in batches {
                    let b = SampleBatch { run_id, seq, ..Default::default() };
                    let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Batch(b)) }));
                }
                while let Ok(Some(m)) = inbound.message().await {
                    if let Some(coordinator_msg::Msg::Ack(a)) = m.msg {
                        acks.lock().expect("acks").push((a.run_id, a.seq));
                    }
                }
            });
            Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))))
        }
    }

    /// An agent whose side of a blip heals before the coordinator's: its old stream opens
    /// with the Hello's answer and heartbeats, falls silent for `SILENT` (the coordinator
    /// dials, and every resume is refused: the path is still down), then speaks again on
    /// the old stream while a resume is still refused for `STILL_DOWN` (TCP's backoff
    /// holding the coordinator's direction of the old connection); after that it takes one.
    struct HalfHealed {
        /// When the old stream speaks again.
        back: Arc<Mutex<Option<Instant>>>,
        refused: Arc<Mutex<u32>>,
        resumed: Arc<Mutex<Option<Instant>>>,
    }

    const QUIET_AFTER: Duration = Duration::from_millis(300);
    const SILENT: Duration = Duration::from_millis(1200);
    const STILL_DOWN: Duration = Duration::from_millis(150);

    fn beat() -> Result<AgentMsg, Status> {
        Ok(AgentMsg { msg: Some(agent_msg::Msg::Heartbeat(surge_proto::Heartbeat { sent_unix_ns: 1 })) })
    }

    #[tonic::async_trait]
    impl Agent for HalfHealed {
        type SessionStream = Out;

        async fn session(&self, req: Request<Streaming<CoordinatorMsg>>) -> Result<Response<Out>, Status> {
            let mut inbound = req.into_inner();
            let resume = hello(&mut inbound).await?.resume_session_id;
            let (tx, rx) = mpsc::unbounded_channel();
            let mut reply = HelloReply { protocol_version: PROTOCOL_VERSION, session_id: 7, ..Default::default() };
            if resume == 0 {
                let opened = Instant::now();
                *self.back.lock().expect("back") = Some(opened + QUIET_AFTER + SILENT);
                let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Hello(reply)) }));
                tokio::spawn(async move {
                    // Bounded: the test lasts a few seconds.
                    for i in 0..200u32 {
                        let at = opened + Duration::from_millis(50) * i;
                        tokio::time::sleep_until(at.into()).await;
                        let quiet = at >= opened + QUIET_AFTER && at < opened + QUIET_AFTER + SILENT;
                        if !quiet && tx.send(beat()).is_err() {
                            return;
                        }
                    }
                });
            } else {
                let back = self.back.lock().expect("back").expect("opened before any resume");
                if Instant::now() < back + STILL_DOWN {
                    *self.refused.lock().expect("refused") += 1;
                    return Err(Status::unavailable("the path is down"));
                }
                self.resumed.lock().expect("resumed").get_or_insert_with(Instant::now);
                reply.resumed = true;
                let _ = tx.send(Ok(AgentMsg { msg: Some(agent_msg::Msg::Hello(reply)) }));
                tokio::spawn(async move {
                    for _ in 0..100 {
                        if tx.send(beat()).is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                });
            }
            tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
            Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))))
        }
    }

    /// D2: a resume once dialled goes on when the old stream speaks again (CI's partition
    /// run lost an agent to a 2.5 s blip: its side of the old connection came back first,
    /// the coordinator heard it and stopped dialling, and TCP's backoff held the other
    /// side past the agent's lease). Without the latch no resume comes (tried).
    #[tokio::test]
    async fn a_resume_goes_on_when_the_old_stream_speaks_again() {
        let (back, refused, resumed) = (Arc::default(), Arc::default(), Arc::default());
        let agent =
            HalfHealed { back: Arc::clone(&back), refused: Arc::clone(&refused), resumed: Arc::clone(&resumed) };
        let addr = serve(agent).await;
        let wait = ConnectWait { timeout: Duration::from_secs(5), min_agents: None };
        let mut fleet = super::super::Fleet::connect(&[addr], None, wait, &mut |_| {}).await.expect("connect");
        let back = back.lock().expect("back").expect("the session opened");
        let (mut event, until) = (None, back + Duration::from_secs(3));
        while Instant::now() < until {
            if let Some(super::Event::Resumed { after, .. }) = fleet.next(Duration::from_millis(20)).await {
                event = Some(after);
                break;
            }
        }
        let refused = *refused.lock().expect("refused");
        assert!(refused > 0, "the coordinator dialled while the agent was silent");
        let at = resumed.lock().expect("resumed").expect("resumed after the old stream spoke again");
        assert!(at >= back + STILL_DOWN, "resumed once the path was back");
        let after = event.expect("the link said it resumed");
        assert!(after >= SILENT, "the silence it answered, from its start: {after:?}");
        fleet.close();
    }

    /// D94: the link acknowledges every batch it hands on, of this run or an earlier one,
    /// with nothing sent back by the collection (here nobody answers the events).
    #[tokio::test]
    async fn a_link_acknowledges_every_batch_it_hands_on() {
        let sent = vec![(2, 0), (2, 1), (2, 2), (1, 9), (2, 3)];
        let acks = Arc::new(Mutex::new(Vec::new()));
        let addr = serve(Sender { batches: sent.clone(), acks: acks.clone() }).await;
        let wait = ConnectWait { timeout: Duration::from_secs(5), min_agents: None };
        let mut fleet = super::super::Fleet::connect(&[addr], None, wait, &mut |_| {}).await.expect("connect");
        let mut batches = 0;
        let until = Instant::now() + Duration::from_secs(5);
        while acks.lock().expect("acks").len() < sent.len() && Instant::now() < until {
            if let Some(super::Event::Batch { .. }) = fleet.next(Duration::from_millis(20)).await {
                batches += 1;
            }
        }
        assert_eq!(batches, sent.len(), "every batch handed on");
        assert_eq!(*acks.lock().expect("acks"), sent, "every batch acknowledged, in order");
        fleet.close();
    }
}
