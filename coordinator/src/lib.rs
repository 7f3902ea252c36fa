//! surge's coordinator. The flow goes one way:
//!
//! `cli` (flags and configuration; `dataset` reads the files they name) → `plan` (typed
//! plans, derived by changing fields) → `fleet` (agent sessions, clocks, the split,
//! collection) → `analysis` (the merge, statistics, the verdict) → `output` (the typed
//! result and its outputs), driven by `commands`. `target` is the coordinator's own I/O
//! with the server (readiness, scrapes, GPU pages, profiler, cache reset), `certs` issues
//! the mutual-TLS material, `clock` is the coordinator's timeline, `exit` maps outcomes
//! to exit codes.
//!
//! A local run is the same session logic as a distributed one: with no `--agents`, an
//! agent runs in-process and talks to the coordinator over in-process channels, with the
//! same messages the gRPC stream carries and rows handed over typed, without protobuf
//! encoding (D1; `fleet::local`). Library
//! code prints nothing (outputs under `output` do) and never exits the process.

pub mod analysis;
pub mod certs;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod dataset;
pub mod exit;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod output;
pub mod plan;
pub mod target;
