//! The load engine: prepares a workload (its slice's job source, warm connections,
//! warm-up requests) and runs it against the target, reporting every finished request to
//! a [`Sink`]. The engine knows nothing of gRPC or of the coordinator: it is driven by a
//! [`Control`] (start instant, hard deadline, stop token) and reports to a sink.
//!
//! Grouped by layer, each depending only on those above it:
//! - transport: target resolution, TCP/TLS/HTTP/1.1/2/3 connections, socket clocks and
//!   live counters ([`conn`], [`connector`], [`h3`], [`ioclock`], [`stats`]), the core
//!   crate's, shared with the coordinator's own requests to the target;
//! - [`api`]: what a request body holds and how a response is read, one decoder per API
//!   (completions and chat, Responses, pooling, audio), bytes in and a row out, without
//!   I/O (D67);
//! - [`workload`]: request `k` of the slice made when it is sent, a single request or a
//!   conversation's session, two types (D20), so neither preparing nor running a slice
//!   holds memory in proportion to its length, and a slice may have no request cap;
//! - [`load`]: the run loops (closed, paced, probes), the timed request, the connection
//!   pools and endpoints, a conversation's turns;
//! - `prepare`: a workload made ready (template, tokenizer, jobs, warm connections, the
//!   initial test); this file: the types the service sees; [`sink`]: where rows go.

pub mod api;
pub mod load;
mod prepare;
pub mod sink;
pub mod workload;

pub use load::run;
pub use prepare::{prepare, prepare_on};
pub use sink::{Sink, VecSink};
// The transport layer (connections, TLS, HTTP/1.1, HTTP/2, HTTP/3, their clocks and
// counters) is the core crate's, shared with the coordinator's own requests to the target.
pub use surge_core::transport::{conn, connector, ending, h3, ioclock, stats, target, tls};

/// The runtime a session's workloads are prepared and run on: threads of its own (one
/// per core, named `surge-engine`), counted by `cpu::engine_cpu_time`, so the client's
/// CPU excludes the coordinator, the gRPC service and an embedded echo server.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(crate::cpu::cores() as usize)
            .thread_name("surge-engine")
            .on_thread_start(crate::cpu::register_engine_thread)
            .enable_all()
            .build()
            .expect("the engine's runtime starts (threads and an epoll instance)")
    })
}

use crate::data::tokenizer::TokenizerError;
use load::endpoints::Endpoints;
use load::pacing;
use stats::{Lag, Stats};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use surge_proto::Workload;
use tokio_util::sync::CancellationToken;
use workload::{Jobs, questions, spec};

/// Why a workload cannot be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error(transparent)]
    Target(#[from] target::TargetError),
    #[error(transparent)]
    Pacing(#[from] pacing::PacingError),
    #[error("cannot connect to the target: {0}")]
    Connect(#[source] connector::ConnectError),
    /// A header name or value (or the target's authority, as `host`) that HTTP refuses.
    #[error("invalid header {name:?}")]
    Header {
        name: String,
        #[source]
        source: http::Error,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(#[source] TokenizerError),
    #[error("dataset: a file dataset without prompts")]
    MissingPrompts,
    #[error("dataset: messages: {0}")]
    Messages(#[source] serde_json::Error),
    #[error("extra body: {0}")]
    ExtraBody(String),
    /// The request sent before the load failed (D7, D17).
    #[error("the initial test request to {url} failed: {message} (--no-initial-test skips it)")]
    InitialTest { url: String, message: String },
    /// A workload this agent cannot read: an unknown or unset choice, a contradiction.
    #[error(transparent)]
    Spec(spec::SpecError),
    /// No request cap, no concurrency limit and no rate: nothing would bound the load.
    #[error("a run without a request cap needs a concurrency limit or a request rate")]
    Unbounded,
    /// A blocking task (tokenizer parsing) died.
    #[error("{what}: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// A workload ready to start: job source ready, connections open, warm-ups done.
#[derive(Debug)]
pub struct Prepared {
    workload: Workload,
    /// The workload as read at the edge ([`spec::check`]).
    spec: spec::Spec,
    jobs: Jobs,
    endpoints: Arc<Endpoints>,
    /// The accuracy questions mixed into the load (D71).
    questions: Option<Arc<questions::Questions>>,
    stats: Arc<Stats>,
    pub connections_open: u32,
    pub warmups_completed: u32,
}

/// How a run is driven from outside.
#[derive(Debug, Clone)]
pub struct Control {
    /// When the first request may be sent.
    pub start_at: Instant,
    /// Hard deadline: everything stops here, in-flight requests are cancelled.
    pub deadline: Instant,
    /// Stop now: no new request, in-flight requests cancelled.
    pub stop: CancellationToken,
}

/// Why issuing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Finished,
    Duration,
    Stopped,
    Deadline,
}

impl StopReason {
    /// As `Done.stop` carries it.
    pub fn wire(self) -> surge_proto::StopReason {
        match self {
            StopReason::Finished => surge_proto::StopReason::Finished,
            StopReason::Duration => surge_proto::StopReason::Duration,
            StopReason::Stopped => surge_proto::StopReason::Stopped,
            StopReason::Deadline => surge_proto::StopReason::Deadline,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Finished => "finished",
            StopReason::Duration => "duration",
            StopReason::Stopped => "stopped",
            StopReason::Deadline => "deadline",
        }
    }
}

/// The outcome of a run, besides its rows.
#[derive(Debug, Clone)]
pub struct Report {
    /// Wall-clock time of the instant rows are relative to (the planned start).
    pub started_at: SystemTime,
    pub completed: u64,
    pub failed: u64,
    /// Cancelled by the client, not in `failed` (D21).
    pub cancelled: u64,
    pub stop_reason: StopReason,
    pub wall: Duration,
    pub lag: Lag,
    pub wake: Lag,
    pub max_in_flight: u32,
    pub reconnects: u64,
}

impl Prepared {
    /// The workload it runs.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// Live counters (for health reports while the run is going).
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }
}
