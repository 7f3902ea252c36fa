//! End-to-end tests: real `surge`, `surge-agent` and `surge echo` processes on loopback
//! addresses (127.0.0.0/8 only), every one killed by PID when its test ends.

mod accuracy;
mod agents;
mod anomalies;
mod backends;
mod blackhole;
mod capacity;
mod caputil;
mod compare;
mod conversations;
mod datasets;
mod distributed;
mod dropin;
mod dry_run;
mod endpoints;
mod failures;
mod faults;
mod fleet;
mod gpu;
mod h3util;
mod http3;
mod local;
mod longruns;
mod per_request;
mod profile;
mod reasoning;
mod report;
mod resume;
mod server_view;
mod stalls;
mod sweep;
mod usage;
mod util;
mod validate;
mod vllm_datasets;
