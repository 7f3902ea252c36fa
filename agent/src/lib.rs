//! surge's agent: the load engine and the daemon that serves it to coordinators.
//!
//! - [`engine`] runs a [`Workload`](surge_proto::Workload) against an HTTP target and
//!   reports each finished request as a row to a [`sink::Sink`]; it knows nothing about
//!   where rows go.
//! - [`service`] is the gRPC `Agent` service: one session per coordinator, clock pings,
//!   two-phase start, batched samples with acks, heartbeats, the dead-man switch.
//! - [`daemon`] is the `surge-agent` process: configuration, TLS, signals.

pub mod allowlist;
pub mod cpu;
pub mod daemon;
pub mod dataset;
pub mod engine;
pub mod openai;
pub mod pacing;
pub mod service;
pub mod sink;
pub mod sse;
pub mod synth;
pub mod tokenizer;
