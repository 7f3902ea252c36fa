//! The `surge` binary's command line surface (and, by existing, the reason `cargo test
//! --workspace` builds the binary the end-to-end suite runs).

use std::process::Command;

fn surge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_surge")).args(args).output().expect("run surge")
}

#[test]
fn run_help_lists_vllm_bench_serve_flags() {
    let out = surge(&["run", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--base-url",
        "--host",
        "--port",
        "--endpoint",
        "--backend",
        "--model",
        "--served-model-name",
        "--dataset-name",
        "--random-input-len",
        "--random-output-len",
        "--num-prompts",
        "--max-concurrency",
        "--request-rate",
        "--burstiness",
        "--num-warmups",
        "--ignore-eos",
        "--temperature",
        "--seed",
        "--percentile-metrics",
        "--metric-percentiles",
        "--goodput",
        "--save-result",
        "--result-dir",
        "--result-filename",
        "--save-detailed",
        "--metadata",
        "--ready-timeout",
        "--duration",
        "--agents",
        "--tls-ca",
        "--tls-cert",
        "--tls-key",
        "--agents-plaintext",
        "--tolerate-agent-loss",
    ] {
        assert!(help.contains(flag), "{flag} missing from `surge run --help`");
    }
}

#[test]
fn certs_issue_without_a_ca_names_the_flag() {
    let dir = std::env::temp_dir().join(format!("surge-cli-{}", std::process::id()));
    let out = surge(&[
        "certs",
        "issue",
        "--ca",
        dir.join("nope").to_str().unwrap(),
        "--name",
        "a",
        "--out",
        dir.to_str().unwrap(),
    ]);
    // A --ca that holds no CA is the user's to fix: a usage error (it exited 1).
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ca"));
    let _ = std::fs::remove_dir_all(dir);
}
