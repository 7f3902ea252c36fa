//! surge's coordinator. The flow goes one way:
//!
//! `cli` (flags and configuration) → `plan` (typed plans, derived by changing fields) →
//! `fleet` (agent sessions, clocks, the split, collection) → `analysis` (the merge,
//! statistics, the verdict) → `output` (the typed result and its sinks), driven by
//! `commands`. `certs` issues the mutual-TLS material, `ready` talks to the target
//! before a run, `exit` maps outcomes to exit codes.
//!
//! A local run is the same code as a distributed one: with no `--agents`, an agent is
//! started in-process behind the same gRPC service and the run goes through it. Library
//! code prints nothing (sinks under `output` do) and never exits the process.

pub mod analysis;
pub mod certs;
pub mod cli;
pub mod commands;
pub mod exit;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod output;
pub mod plan;
pub mod ready;
