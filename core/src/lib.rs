//! What the coordinator and the agent share (D63): the content of requests
//! ([`data`]: datasets, tokenizers, the shares of a run), the transport to the target
//! ([`transport`]: connections, TLS, HTTP/1.1, HTTP/2, HTTP/3, their clocks and counters)
//! and the single requests made over it ([`client`]: readiness, model discovery, the
//! prefix-cache reset), the server's metrics ([`scrape`]), trace ids ([`trace`]), the live
//! Prometheus endpoint ([`live`]) and configuration-key checks ([`tomlkeys`]). The
//! protocol's messages and constants are `surge_proto`'s.
//!
//! Dependencies run one way: `client -> transport`, `scrape -> client`, `data` alone.

#[cfg(feature = "count-allocations")]
pub mod alloc_count;
pub mod beat;
pub mod client;
pub mod data;
pub mod live;
pub mod scrape;
pub mod tomlkeys;
pub mod trace;
pub mod transport;
