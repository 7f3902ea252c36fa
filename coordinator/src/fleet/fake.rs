//! Fake agents for the fleet's tests: any [`Agent`] served on loopback.

use surge_proto::agent_server::{Agent, AgentServer};
use surge_proto::{AgentMsg, CoordinatorMsg, Hello, coordinator_msg};
use tonic::{Status, Streaming};

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

/// The Hello a session opens with; anything else refuses the session.
pub(super) async fn hello(inbound: &mut Streaming<CoordinatorMsg>) -> Result<Hello, Status> {
    match inbound.message().await {
        Ok(Some(CoordinatorMsg { msg: Some(coordinator_msg::Msg::Hello(h)) })) => Ok(h),
        other => Err(Status::invalid_argument(format!("no Hello: {other:?}"))),
    }
}
