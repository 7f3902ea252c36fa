//! The tonic glue: the `Agent` service hands each `Session` stream to a new session
//! driver task and returns the driver's outbound channel as the response stream.

use super::AgentSettings;
use super::driver;
use std::pin::Pin;
use std::sync::Arc;
use surge_proto::{AgentMsg, CoordinatorMsg};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// Outbound messages of one session queued at most (see [`AgentService`]'s `session`).
const OUTBOUND_QUEUE: usize = 1024;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct AgentService {
    settings: Arc<AgentSettings>,
    /// Cancelled on SIGTERM: sessions stop load, flush and close.
    shutdown: CancellationToken,
}

impl AgentService {
    pub fn new(settings: AgentSettings, shutdown: CancellationToken) -> Self {
        Self { settings: Arc::new(settings), shutdown }
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
        let inbound = request.into_inner();
        // Bounded: a coordinator that stops reading slows the batch flushes, which then
        // hold rows in memory; the run itself never waits on it.
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        tokio::spawn(driver::run(Arc::clone(&self.settings), self.shutdown.clone(), inbound, tx, peer));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}
