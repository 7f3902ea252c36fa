//! The coordinator <-> agent contract: `proto/surge.proto` compiled into tonic/prost types.
//!
//! Nothing else lives here. [`PROTOCOL_VERSION`] is the number both sides exchange in
//! `Hello`; a session whose peers disagree is refused, naming both numbers.

#![allow(clippy::all, missing_docs)]

/// Generated messages and the `Agent` service (client and server).
pub mod v1 {
    tonic::include_proto!("surge.v1");
}

pub use v1::*;

/// Version of the session protocol. Bump on any incompatible change to `surge.proto`.
pub const PROTOCOL_VERSION: u32 = 10;
