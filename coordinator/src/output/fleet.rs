//! The fleet check's table: one line per agent, then each failing agent's reasons.

use crate::fleet::check::AgentCheck;
use std::fmt::Write;

/// The table `surge fleet check` prints, and `run`/`sweep` print at start with `--agents`.
pub fn table(agents: &[AgentCheck], missing: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<24} {:<9} {:>5} {:>9} {:>11} {:>10} {:>16} {:<22} {:>12}  status",
        "agent",
        "certificate",
        "version",
        "cores",
        "open-files",
        "host allows",
        "max-in-fl",
        "clock (bound) ms",
        "allowed targets",
        "target ms"
    );
    for a in agents {
        let clock = format!("{:+.2} ({:.2})", a.clock_offset_ms, a.clock_bound_ms);
        let reach = a.reach.map_or_else(|| "-".to_string(), |(status, ms)| format!("{ms:.1} ({status})"));
        let cert = if a.cert_name.is_empty() { "(plaintext)" } else { a.cert_name.as_str() };
        // An agent with no allowed-targets loads none (its allowlist is empty).
        let allowed = if a.allowed_targets.is_empty() { "(none)".to_string() } else { a.allowed_targets.join(",") };
        let status = if a.ok() { "ok".to_string() } else { format!("FAIL: {}", a.problems.join("; ")) };
        let _ = writeln!(
            out,
            "{:<22} {:<24} {:<9} {:>5} {:>9} {:>11} {:>10} {:>16} {:<22} {:>12}  {status}",
            a.address,
            cert,
            format!("{} p{}", a.version, a.protocol),
            a.cores,
            known(a.open_files),
            known(u64::from(a.host_max_in_flight)),
            a.max_in_flight,
            clock,
            allowed,
            reach,
        );
    }
    for m in missing {
        let _ = writeln!(out, "{m:<22} not reached (--min-agents let the run go on without it)");
    }
    out
}

/// A count an agent of the previous protocol version does not send (0): "-".
fn known(n: u64) -> String {
    if n == 0 { "-".to_string() } else { n.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_without_allowed_targets_shows_none_beside_its_failure() {
        let agent = |allowed: &[&str], problems: &[&str]| AgentCheck {
            address: "10.0.0.1:7171".into(),
            cert_name: "agent".into(),
            version: "0.1.0".into(),
            protocol: 10,
            cores: 2,
            open_files: 1024,
            host_max_in_flight: 1000,
            max_in_flight: 1000,
            clock_offset_ms: 0.0,
            clock_bound_ms: 0.1,
            allowed_targets: allowed.iter().map(|s| s.to_string()).collect(),
            reach: None,
            problems: problems.iter().map(|s| s.to_string()).collect(),
        };
        let t = table(&[agent(&[], &["allowlist (empty: set allowed-targets)"])], &[]);
        assert!(t.contains("(none)") && !t.contains("(any)"), "{t}");
        assert!(table(&[agent(&["10.0.0.0/8"], &[])], &[]).contains("10.0.0.0/8"));
    }
}
