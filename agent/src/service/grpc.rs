//! The tonic glue: the `Agent` service reads each `Session` stream's first message (the
//! coordinator's Hello). A Hello that resumes a session hands the stream to that
//! session's driver (D2); any other starts a new session driver task. The response
//! stream is the driver's outbound channel.

use super::AgentSettings;
use super::driver::{self, Attach, Inbound};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use surge_proto::{AgentMsg, CoordinatorMsg, coordinator_msg};
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};

/// How long a new stream may take to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Live sessions by id: where a resuming stream is handed over.
type Registry = Arc<Mutex<HashMap<u64, mpsc::Sender<Attach>>>>;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct AgentService {
    settings: Arc<AgentSettings>,
    /// Cancelled on SIGTERM: sessions stop load, flush and close.
    shutdown: CancellationToken,
    sessions: Registry,
    next_id: Arc<AtomicU64>,
    /// Every session's driver, so that a stop can wait for them to flush and close.
    drivers: TaskTracker,
}

impl AgentService {
    pub fn new(settings: AgentSettings, shutdown: CancellationToken) -> Self {
        // Ids differ across agent restarts, so a coordinator never resumes a stranger.
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        Self {
            settings: Arc::new(settings),
            shutdown,
            sessions: Registry::default(),
            next_id: Arc::new(AtomicU64::new(seed | 1)),
            drivers: TaskTracker::new(),
        }
    }

    /// Starts a session on a stream whose first message, `first`, was read (or resumes
    /// the session it names); returns what the session says on this stream. A session
    /// that is not `resumable` keeps no batches for a resend.
    pub(super) async fn open(
        &self,
        first: CoordinatorMsg,
        inbound: Inbound,
        peer: String,
        resumable: bool,
    ) -> Result<mpsc::UnboundedReceiver<Result<AgentMsg, Status>>, Status> {
        // Never blocks the session: its lease timer must fire whatever the coordinator
        // reads; what waits here is bounded by the lease (the stream is replaced or the
        // session ends).
        let (tx, rx) = mpsc::unbounded_channel();
        let (resume, given) = match &first.msg {
            Some(coordinator_msg::Msg::Hello(h)) => (h.resume_session_id, h.session_id),
            _ => (0, 0),
        };
        if resume != 0 {
            let attach = self.sessions.lock().expect("sessions lock").get(&resume).cloned();
            let gone = || Status::not_found(format!("session {resume} is over (its lease expired)"));
            let attach = attach.ok_or_else(gone)?;
            attach.send(Attach { inbound, tx, peer }).await.map_err(|_| gone())?;
        } else {
            let (attach_tx, attach_rx) = mpsc::channel(4);
            let id = {
                let mut sessions = self.sessions.lock().expect("sessions lock");
                // The coordinator's id, so that it can resume before it heard the answer (D91);
                // an agent emulating an older protocol did not know the field.
                let take = given != 0
                    && self.settings.protocol >= surge_proto::PROTOCOL_VERSION
                    && !sessions.contains_key(&given);
                // Its own ids step past one a coordinator gave (64-bit ids: a bounded loop).
                let id = if take {
                    given
                } else {
                    std::iter::repeat_with(|| self.next_id.fetch_add(2, Ordering::Relaxed))
                        .find(|id| *id != 0 && !sessions.contains_key(id))
                        .expect("an unused id")
                };
                sessions.insert(id, attach_tx);
                id
            };
            let inbound: Inbound = Box::pin(tokio_stream::once(Ok(first)).chain(inbound));
            let (settings, shutdown, sessions) =
                (Arc::clone(&self.settings), self.shutdown.clone(), self.sessions.clone());
            self.drivers.spawn(async move {
                driver::run(settings, shutdown, driver::Link { id, inbound, tx, attach: attach_rx, resumable }, peer)
                    .await;
                sessions.lock().expect("sessions lock").remove(&id);
            });
        }
        Ok(rx)
    }

    /// The sessions' drivers: once the stop is given, [`TaskTracker::wait`] returns when
    /// every session has sent its last rows and `Done` and ended.
    pub fn drivers(&self) -> TaskTracker {
        self.drivers.clone()
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
        let mut inbound = request.into_inner();
        let first = match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
            Err(_) => return Err(Status::deadline_exceeded("no Hello within 10s")),
            Ok(Err(s)) => return Err(s),
            Ok(Ok(None)) => return Err(Status::cancelled("the stream ended before its Hello")),
            Ok(Ok(Some(m))) => m,
        };
        let inbound: Inbound = Box::pin(inbound);
        let rx = self.open(first, inbound, peer, true).await?;
        Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))))
    }
}
