//! surge's agent: the load engine and the daemon that serves it to coordinators.
//!
//! The flow, one module each (what the coordinator shares — request content, transport,
//! scrapes, traces, live metrics — is `surge_core`'s):
//! - [`engine`] runs a [`Workload`](surge_proto::Workload) against an HTTP target and
//!   reports each finished request as a row to an [`engine::Sink`]; it knows nothing about
//!   where rows go;
//! - [`service`] is the gRPC `Agent` service: one session per coordinator, a state machine
//!   for clock pings, two-phase start, batched samples with acks, heartbeats and the
//!   dead-man switch;
//! - [`daemon`] is the `surge-agent` process: configuration, TLS, signals, and the embedded
//!   agent of a local run;
//! - [`cpu`] reads CPU and host signals;
//! - [`gpu`] reads this host's GPUs through NVML (`--gpu nvml`).
//!
//! Dependencies run one way: `daemon -> service -> engine -> surge_core`, and
//! `service -> cpu`.

pub mod cpu;
pub mod daemon;
pub mod engine;
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu;
pub mod service;

// What the agent shares with the coordinator lives in `surge-core`; its paths stay here
// for the agent's own code and tests.
pub use surge_core::data::{dataset, tokenizer};
pub use surge_core::{client, data, live, scrape, tomlkeys, trace};
