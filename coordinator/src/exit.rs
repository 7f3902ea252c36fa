//! Exit codes of `surge`, mapped in one place, and the failure type that carries one.

/// The run finished (failed requests are counted in the results; see [`of_run`]).
pub const OK: u8 = 0;
/// The run could not happen (an agent refused: TLS, allowlist, protocol version; the
/// target or an agent was unreachable; a file could not be written), no request
/// succeeded, or too many failed (`--max-failure-rate`).
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

/// The exit code of a finished run (D8): its status first (interrupt, agent loss), then
/// exit 1 when no request succeeded or the failure rate (cancelled requests excluded) is
/// above `max_failure_rate`; with the reason for every code but 0.
pub fn of_run(
    status: &crate::fleet::outcome::RunStatus,
    completed: u64,
    errors_by_kind: &std::collections::BTreeMap<String, u64>,
    max_failure_rate: f64,
) -> (u8, Option<String>) {
    use crate::fleet::outcome::RunStatus;
    let code = of_status(status);
    let why = match status {
        RunStatus::Complete => None,
        RunStatus::Invalid { lost } => Some(format!("agent(s) {} lost: the run is invalid", lost.join(", "))),
        RunStatus::Partial { lost } => Some(format!("agent(s) {} lost: the result is partial", lost.join(", "))),
        RunStatus::Interrupted => Some("interrupted by Ctrl-C".to_owned()),
        RunStatus::Terminated => Some("stopped by SIGTERM".to_owned()),
    };
    if let Some(why) = why {
        return (code, Some(format!("{why} (exit code {code})")));
    }
    let failed: u64 = errors_by_kind.iter().filter(|(k, _)| k.as_str() != "cancelled").map(|(_, n)| n).sum();
    let kinds = || errors_by_kind.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", ");
    if completed == 0 && failed > 0 {
        return (FAILURE, Some(format!("no request succeeded ({failed} failed: {}) (exit code {FAILURE})", kinds())));
    }

    let rate = if completed + failed > 0 { failed as f64 / (completed + failed) as f64 } else { 0.0 };
    if rate > max_failure_rate {
        let msg = format!(
            "{:.1}% of requests failed ({}), above --max-failure-rate {max_failure_rate} (exit code {FAILURE})",
            rate * 100.0,
            kinds()
        );
        return (FAILURE, Some(msg));
    }
    (OK, None)
}

/// `--fail-on-anomaly` (D70): exit 1 when a successful request showed an anomaly, with
/// the reason.
/// `requests`: those with an anomaly; `by_kind`: each kind's count.
pub fn of_anomalies(
    fail: bool,
    requests: u64,
    by_kind: &std::collections::BTreeMap<String, u64>,
) -> (u8, Option<String>) {
    if !fail || requests == 0 {
        return (OK, None);
    }
    let kinds: Vec<String> = by_kind.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}: {n}")).collect();
    let why = format!(
        "{requests} requests showed anomalies ({}) with --fail-on-anomaly (exit code {FAILURE})",
        kinds.join(", ")
    );
    (FAILURE, Some(why))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::outcome::RunStatus;
    use std::collections::BTreeMap;

    fn errors(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
        v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn failures_and_precedence() {
        let ok = RunStatus::Complete;
        assert_eq!(of_run(&ok, 10, &errors(&[]), 1.0).0, OK);
        assert_eq!(of_run(&ok, 0, &errors(&[("http_status", 20)]), 1.0).0, FAILURE);
        assert!(of_run(&ok, 0, &errors(&[("http_status", 20)]), 1.0).1.unwrap().contains("http_status: 20"));
        // 30 % failed: fine by default, not with --max-failure-rate 0.2.
        let e = errors(&[("http_status", 3)]);
        assert_eq!(of_run(&ok, 7, &e, 1.0).0, OK);
        assert_eq!(of_run(&ok, 7, &e, 0.2).0, FAILURE);
        assert_eq!(of_run(&ok, 7, &e, 0.3).0, OK);
        // Cancelled requests are not failures.
        assert_eq!(of_run(&ok, 7, &errors(&[("cancelled", 50)]), 0.0).0, OK);
        // Status first: an interrupt or a lost agent wins over the failure rate.
        assert_eq!(of_run(&RunStatus::Interrupted, 0, &e, 0.0).0, INTERRUPTED);
        assert_eq!(of_run(&RunStatus::Invalid { lost: vec![] }, 0, &e, 0.0).0, AGENT_LOST);
        let why = of_run(&RunStatus::Partial { lost: vec!["a:1".into()] }, 7, &e, 1.0).1.unwrap();
        assert_eq!(why, "agent(s) a:1 lost: the result is partial (exit code 4)");
        assert_eq!(of_run(&ok, 7, &e, 1.0).1, None);
    }
}
