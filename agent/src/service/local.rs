//! The embedded agent's sessions without a wire (D1): a coordinator in the same process
//! hands the session's messages over channels as typed values, with no protobuf
//! encoding, HTTP/2 or socket between them. The session is the same state machine and
//! driver as over gRPC.

use super::AgentService;
use super::driver::Inbound;
use surge_proto::{AgentMsg, CoordinatorMsg};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;

/// The coordinator's end of an in-process session.
#[derive(Debug)]
pub struct LocalSession {
    /// The coordinator's messages to the agent.
    pub tx: mpsc::UnboundedSender<CoordinatorMsg>,
    /// The agent's messages; an `Err` is the status the session ended with, and the
    /// channel closes when the session is over.
    pub rx: mpsc::UnboundedReceiver<Result<AgentMsg, Status>>,
}

impl AgentService {
    /// Opens a session in this process whose first message is `hello`.
    pub async fn open_local(&self, hello: CoordinatorMsg) -> Result<LocalSession, Status> {
        let (tx, from_coordinator) = mpsc::unbounded_channel();
        let inbound: Inbound = Box::pin(UnboundedReceiverStream::new(from_coordinator).map(Ok));
        // Two channels cannot break apart: nothing is resent, so no batch is kept.
        let rx = self.open(hello, inbound, "in-process".to_string(), false).await?;
        Ok(LocalSession { tx, rx })
    }
}
