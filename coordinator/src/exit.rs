//! Exit codes of `surge`, mapped in one place, and the failure type that carries one.

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
/// Stopped by SIGTERM; what finished was saved.
pub const TERMINATED: u8 = 143;
/// `surge validate --against`: the client's headroom over that run is below the minimum.
pub const HEADROOM: u8 = 5;

/// A failure before, between or instead of runs, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
    /// A failure to run (exit code 1) described by `e` and its causes.
    pub fn run(context: &str, e: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = if context.is_empty() { e.to_string() } else { format!("{context}: {e}") };
        let mut src = e.source();
        while let Some(s) = src {
            let s_text = s.to_string();
            if !message.contains(&s_text) {
                message.push_str(": ");
                message.push_str(&s_text);
            }
            src = s.source();
        }
        Self::new(FAILURE, message)
    }
}

impl From<crate::cli::UsageError> for Failure {
    fn from(e: crate::cli::UsageError) -> Self {
        Self::new(USAGE, e.0)
    }
}

/// The exit code of a finished run's status.
pub fn of_status(status: &crate::fleet::outcome::RunStatus) -> u8 {
    use crate::fleet::outcome::RunStatus;
    match status {
        RunStatus::Complete => OK,
        RunStatus::Invalid { .. } => AGENT_LOST,
        RunStatus::Partial { .. } => PARTIAL,
        RunStatus::Interrupted => INTERRUPTED,
        RunStatus::Terminated => TERMINATED,
    }
}
