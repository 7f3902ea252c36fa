//! Tests that measure when requests are sent (trace replay): their own test
//! binary, and one at a time ([`ALONE`]), so no other test's load delays the sends.

#[path = "../e2e/util.rs"]
#[allow(dead_code)]
mod util;

mod capacity;
#[path = "../e2e/caputil.rs"]
mod caputil;
#[path = "../e2e/h3util.rs"]
mod h3util;
mod http3;
mod http_phases;
mod reasoning;
#[path = "../e2e/stalls.rs"]
mod stalls;
mod steady;
mod trace;

/// Held by each test for its whole run.
pub static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
