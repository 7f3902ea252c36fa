//! Exit codes of `surge`, mapped in one place.

/// The run finished (failed requests are reported in the results, not by the exit code).
pub const OK: u8 = 0;
/// The run could not happen: an agent refused (TLS, allowlist, protocol version), the
/// target or an agent was unreachable, a file could not be written.
pub const FAILURE: u8 = 1;
/// Bad flags, values or configuration.
pub const USAGE: u8 = 2;
/// An agent was lost mid-run: the run is invalid; everything received was saved.
pub const AGENT_LOST: u8 = 3;
/// An agent was lost with `--tolerate-agent-loss`: the result is partial.
pub const PARTIAL: u8 = 4;
/// Interrupted by Ctrl-C; what finished was saved.
pub const INTERRUPTED: u8 = 130;
/// `surge validate --against`: the client's headroom over that run is below the minimum.
pub const HEADROOM: u8 = 5;
