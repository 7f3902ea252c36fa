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
