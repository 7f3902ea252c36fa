//! The coordinator's own I/O with the target (D63), apart from the load the agents send:
//! readiness and model discovery before a run ([`ready`]), the server's `/metrics`
//! ([`scrape`]) and GPU exporter pages ([`gpu`]) beside it, its profiler ([`profile`]),
//! and the prefix-cache reset between level-runs ([`cache`]).

pub mod cache;
pub mod gpu;
pub mod profile;
pub mod ready;
pub mod scrape;
