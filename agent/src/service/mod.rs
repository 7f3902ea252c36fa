//! The gRPC `Agent` service: one session per coordinator stream, each a state machine.
//!
//! - `session`: the protocol state of one session, advanced by a synchronous
//!   `handle(event, now) -> actions` with no I/O (version check, two-phase start, Stop,
//!   acks, heartbeats, the lease);
//! - `driver`: the session's I/O loop: gathers inputs (coordinator messages, timers,
//!   engine results) into events and performs the actions (send, prepare, start, stop);
//! - `batch`: rows into numbered batches, kept until acknowledged;
//! - `grpc`: the tonic service that starts a driver per stream;
//! - `local`: the same sessions over in-process channels, for the embedded agent;
//! - [`allowlist`]: which targets this agent may load.

pub mod allowlist;
mod batch;
mod capacity;
mod driver;
mod grpc;
mod local;
mod probe;
mod scraping;
pub(crate) mod session;

pub use allowlist::{Allowlist, AllowlistError, Refused};
pub use capacity::{Capacity, HostLimits};
pub use grpc::AgentService;
pub use local::LocalSession;

use std::sync::Arc;
use std::time::Duration;

/// What every session of this agent obeys.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Requests in flight this agent accepts per run (Prepare asking more is refused).
    pub max_in_flight: u32,
    /// Dead-man interval: silence from the coordinator this long stops the load.
    pub lease: Duration,
    /// Targets this agent may load.
    pub allowed: Allowlist,
    /// Source address of connections to the target (`None`: the kernel's choice).
    pub local_address: Option<std::net::IpAddr>,
    /// The host's open-file and source-port limits.
    pub limits: HostLimits,
    /// `max_in_flight`, shared by every session.
    pub capacity: Arc<Capacity>,
    /// Live metrics to update (`--metrics-listen`), labelled `agent` = this host's name.
    pub live: Option<Arc<crate::live::LiveMetrics>>,
    /// The agent's certificate's names (CN, then SANs), for the coordinator's fleet check.
    pub cert_name: String,
    /// `--gpu nvml`: this host's GPUs, sampled during runs that ask (D36).
    pub gpu: Option<Arc<crate::gpu::GpuReader>>,
    /// The protocol version this agent speaks: [`surge_proto::PROTOCOL_VERSION`], or an
    /// older one it emulates for tests of rolling upgrades (`--emulate-protocol`, D43).
    pub protocol: u32,
}

impl AgentSettings {
    /// Settings with the host's limits (the open-file soft limit raised to the hard one).
    pub fn new(max_in_flight: u32, lease: Duration, allowed: Allowlist) -> Self {
        Self {
            max_in_flight,
            lease,
            allowed,
            local_address: None,
            limits: HostLimits::raise_and_read(),
            capacity: Capacity::new(max_in_flight),
            live: None,
            cert_name: String::new(),
            protocol: surge_proto::PROTOCOL_VERSION,
            gpu: None,
        }
    }
}
