//! The coordinator <-> agent contract: `proto/surge.proto` compiled into tonic/prost types.
//!
//! Nothing else lives here but [`v9`], the conversions to and from the previous
//! version's wire, [`gaps`], a row's gaps between token events as the wire packs
//! them, and [`codec`], how the service's messages are decoded. [`PROTOCOL_VERSION`] is the number both sides exchange in `Hello`: a coordinator
//! works with agents of this version and of [`PREVIOUS_PROTOCOL_VERSION`], and refuses any
//! other, naming both numbers (D34, D43).

#![allow(clippy::all, missing_docs)]

/// Generated messages and the `Agent` service (client and server).
pub mod v1 {
    tonic::include_proto!("surge.v1");
}

pub use v1::*;

pub mod codec;
pub mod gaps;
pub mod v9;

/// Version of the session protocol. Bump on any incompatible change to `surge.proto`.
pub const PROTOCOL_VERSION: u32 = 10;

/// Rows of a conversation's turns: index `session * TURN_STRIDE + turn` (so a turn's
/// `x-request-id` names its session and turn, and indices stay distinct).
pub const TURN_STRIDE: u64 = 1000;
/// Most turns a session may have.
pub const MAX_TURNS: u32 = TURN_STRIDE as u32;

/// Workload features added within [`PROTOCOL_VERSION`] (fields an agent built before them
/// would ignore), by their wire name: an agent lists those it runs in
/// `HelloReply.features`, and a coordinator sends one only to an agent that lists it (D66).
pub const LISTED_FEATURES: &[&str] = &[
    "MultiTurn.tool_loop",
    "PromptItem.spawn",
    "PromptItem.join",
    "Workload.endpoints",
    "Workload.replica_header",
    "Workload.accuracy",
    "Workload.check_determinism",
];

/// The version before [`PROTOCOL_VERSION`], which a coordinator still drives (D43).
pub const PREVIOUS_PROTOCOL_VERSION: u32 = v9::VERSION;

const _: () = assert!(PREVIOUS_PROTOCOL_VERSION + 1 == PROTOCOL_VERSION);

#[cfg(test)]
mod tests {
    /// Every message of a session waits in the link's channels in a slot of the largest
    /// one's size: `Prepare` (its `Workload` about 950 bytes) is boxed, so a heartbeat or
    /// an ack does not take a kilobyte (D97).
    #[test]
    fn a_coordinator_message_is_small_whatever_the_workload() {
        let size = std::mem::size_of::<super::CoordinatorMsg>();
        assert!(size <= 96, "CoordinatorMsg takes {size} bytes");
        assert!(std::mem::size_of::<super::AgentMsg>() <= 256);
    }
}
