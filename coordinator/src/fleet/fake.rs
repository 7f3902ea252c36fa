//! Fake agents for the fleet's tests: any [`Agent`] served on loopback.

use surge_proto::AgentMsg;
use surge_proto::agent_server::{Agent, AgentServer};
use tonic::Status;

/// What a fake agent's session sends back.
pub(super) type Out = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<AgentMsg, Status>> + Send>>;

/// Serves `agent` on 127.0.0.1, port 0, for the rest of the test; its address.
pub(super) async fn serve<A: Agent>(agent: A) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder().add_service(AgentServer::new(agent)).serve_with_incoming(incoming),
    );
    addr
}
