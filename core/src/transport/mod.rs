//! The transport to the target: resolving it ([`target`]), opening connections over TCP
//! with rustls or over QUIC ([`connector`], [`tls`], [`h3`]), one connection and its
//! HTTP/1.1 driver ([`conn`]), how a response ended ([`ending`]), socket-level read times
//! ([`ioclock`]), how long opening took ([`opening`]) and the live counters ([`stats`]).
//! Sharing connections between requests is the engine's (`surge_agent::engine::pool`).

pub mod conn;
pub mod connector;
pub mod ending;
pub mod h3;
pub mod identity;
pub mod ioclock;
pub mod opening;
pub mod stats;
pub mod target;
pub mod tls;
