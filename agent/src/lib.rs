//! surge's agent: the load engine and the daemon that serves it to coordinators.
//!
//! The flow, one module each:
//! - [`data`] makes the requests' content: prompts and token counts (datasets, tokenizer);
//! - [`engine`] runs a [`Workload`](surge_proto::Workload) against an HTTP target and
//!   reports each finished request as a row to an [`engine::Sink`]; it knows nothing about
//!   where rows go;
//! - [`service`] is the gRPC `Agent` service: one session per coordinator, a state machine
//!   for clock pings, two-phase start, batched samples with acks, heartbeats and the
//!   dead-man switch;
//! - [`daemon`] is the `surge-agent` process: configuration, TLS, signals, and the embedded
//!   agent of a local run;
//! - [`client`] sends single requests to the target (readiness, model discovery);
//! - [`cpu`] reads CPU and host signals;
//! - [`tomlkeys`] checks configuration keys before the `config` crate reads them;
//! - [`gpu`] reads this host's GPUs through NVML (`--gpu nvml`).
//!
//! Dependencies run one way: `daemon -> service -> engine -> data`, `client -> engine`,
//! and `service -> cpu`.

pub mod client;
pub mod cpu;
pub mod daemon;
pub mod data;
pub mod engine;
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu;
pub mod live;
pub mod scrape;
pub mod service;
pub mod tomlkeys;
pub mod trace;

// Paths the coordinator and the tests have used since before `data/`.
pub use data::{dataset, tokenizer};
