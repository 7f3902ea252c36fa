//! How long opening a connection took: a leaf that the TCP and QUIC connectors share.

/// How long opening a connection took (D35): TCP connect, then TLS; over QUIC, until the
/// server's first flight, then the rest of the handshake.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opening {
    pub connecting: std::time::Duration,
    pub tls: std::time::Duration,
}
