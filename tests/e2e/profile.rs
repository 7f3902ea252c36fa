//! `--profile` (vllm-bench's): the server's profiler started once the agents are ready
//! and stopped when the load ends, at once or when the server's running batch reaches
//! `--profile-batch-threshold`. The echo refuses a stop without a start, so the notices
//! show the pairing.

use crate::util::{echo, surge, text};
use std::time::Duration;

fn run(echo_args: &[&str], extra: &[&str]) -> String {
    let (_echo, base) = echo("127.0.0.1", echo_args);
    let mut args = vec![
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "32",
        "--max-concurrency",
        "8",
        "--random-input-len",
        "4",
        "--random-output-len",
        "8",
        "--no-initial-test",
        "--profile",
    ];
    args.extend_from_slice(extra);
    let out = surge(&args, Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn the_profiler_runs_around_the_load() {
    let said = run(&["--ttft-ms", "20"], &[]);
    assert!(said.contains("profiler started") && said.contains("profiler stopped"), "{said}");
    assert!(!said.contains("HTTP 409"), "a stop without its start: {said}");
    // Threshold mode: 8 running is reached, the profile lasts 0.3 s of a longer load.
    let busy = ["--ttft-ms", "300", "--itl-ms", "50", "--metrics-flavor", "vllm"];
    let said = run(&busy, &["--profile-batch-threshold", "4", "--profile-duration", "0.3"]);
    assert!(said.contains(">= 4: profiler started"), "{said}");
    assert!(said.contains("profiler stopped after 0.3s"), "{said}");
    // A threshold the load never reaches: no profile.
    let said = run(&busy, &["--profile-batch-threshold", "100"]);
    assert!(said.contains("no profile taken") && !said.contains("profiler started"), "{said}");
}
