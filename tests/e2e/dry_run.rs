//! `--dry-run`: the plan and the dataset, each agent's share, nothing sent to the target;
//! and flags that would change nothing, warned or (`--strict`) refused.

use crate::util::{agent, echo, echo_metric, surge, text};
use std::time::Duration;

#[test]
fn a_dry_run_sends_nothing_and_says_each_agents_share() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let ips = ["127.0.0.2", "127.0.0.3"];
    let agents: Vec<_> = ips.iter().map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"])).collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--num-prompts",
            "10",
            "--random-input-len",
            "6",
            "--random-output-len",
            "3",
            "--agents",
            &addrs,
            "--agents-plaintext",
            "--dry-run",
            "--hf-name",
            "sharegpt",
        ],
        Duration::from_secs(60),
    );
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("warning: --hf-name has no effect with --dataset-name random"), "{said}");
    for (_, a) in &agents {
        assert!(said.contains(&format!("agent {a} (")) && said.contains("5 requests"), "{said}");
    }
    assert!(said.contains("input tokens (words (no --tokenizer)): total 60, mean 6.0, min 6, max 6"), "{said}");
    assert!(said.contains("first prompt: \""), "{said}");
    // Only the GET /metrics below reached the echo.
    assert_eq!(echo_metric(&base, "surge_echo_requests_total"), 1.0, "a dry run sent something");
    // --strict: the same flag is a usage error, before anything.
    let out = surge(
        &["run", "--base-url", &base, "--model", "m", "--dry-run", "--strict", "--hf-name", "sharegpt"],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--strict: --hf-name has no effect"));
}
