//! Failures a CI job can trust (D8): a run where nothing succeeded exits 1 with the
//! errors by kind; `--max-failure-rate` turns a failure rate into exit 1; the default
//! lets a partly failing server finish with exit 0.

use crate::util::{echo, surge, text};
use std::time::Duration;

fn run(base: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "--base-url",
        base,
        "--model",
        "m",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--num-prompts",
        "200",
        "--max-concurrency",
        "8",
    ];
    args.extend_from_slice(extra);
    surge(&args, Duration::from_secs(60))
}

/// A typo in the endpoint stops the run before the load, with the server's own words.
#[test]
fn the_initial_test_request_stops_a_wrong_setup_with_the_servers_words() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let t0 = std::time::Instant::now();
    let out = run(&base, &["--endpoint", "/v1/nothing"]);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("initial test request") && err.contains("/v1/nothing"), "{err}");
    assert!(err.contains("HTTP 404") && err.contains("not found"), "{err}");
    assert!(text(&out.stdout).is_empty(), "no summary for a run that did not happen");
}

#[test]
fn nothing_succeeded_exits_1_naming_the_errors() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let out = run(&base, &["--endpoint", "/v1/nothing", "--no-initial-test"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // The summary's last line says why the code is not 0.
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("no request succeeded") && last.contains("http_status: 200"), "{stdout}");
    assert!(last.ends_with("(exit code 1)"), "{last}");
}

#[test]
fn the_failure_rate_gate_is_opt_in() {
    let (_echo, base) = echo("127.0.0.1", &["--fault-500-rate", "0.3", "--seed", "1"]);
    let dir = crate::util::TempDir::new("examples");
    let d = dir.path("");
    let out = run(&base, &["--no-initial-test", "--save-result", "--result-dir", &d, "--result-filename", "r.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The 500s are counted, with the server's words and how often it said them.
    let r = crate::util::read_json(&dir.path("r.json"));
    let failed = r["errors_by_kind"]["http_status"].as_u64().unwrap();
    assert!(failed > 20, "{failed}");
    let examples = r["error_examples"]["http_status"].as_array().unwrap();
    assert!(!examples.is_empty() && examples.len() <= 3, "{examples:?}");
    let total: u64 = examples.iter().map(|e| e["count"].as_u64().unwrap()).sum();
    assert_eq!(total, failed, "one message for every 500: {examples:?}");
    assert_eq!(examples[0]["http_status"], 500);
    assert!(examples[0]["message"].as_str().unwrap().starts_with("HTTP 500: "), "{examples:?}");
    assert!(!examples[0]["agent"].as_str().unwrap().is_empty());
    assert!(text(&out.stdout).contains("  e.g. HTTP 500: "), "{}", text(&out.stdout));
    let out = run(&base, &["--no-initial-test", "--max-failure-rate", "0.1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.lines().last().unwrap_or_default().contains("above --max-failure-rate 0.1"), "{stdout}");
    let out = run(&base, &["--no-initial-test", "--max-failure-rate", "1.5"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn a_dead_target_is_named_without_the_embedded_agents_address() {
    let out = run("http://127.0.0.1:9", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("cannot connect to the target") && err.contains("127.0.0.1:9"), "{err}");
    assert!(!err.contains("agent 127.0.0.1:"), "{err}");
}

/// A wrong model name is stopped by the initial test with the server's message.
#[test]
fn a_wrong_model_is_named_by_the_server() {
    let (_echo, base) = echo("127.0.0.1", &["--reject-unknown-model", "--model", "a"]);
    let out = surge(
        &["run", "--base-url", &base, "--model", "b", "--num-prompts", "10", "--max-concurrency", "2"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("The model `b` does not exist."), "{}", text(&out.stderr));
}

/// A server that answers 503 while it loads is waited for up to
/// `--ready-check-timeout-sec` (vLLM's name); without it the first 503 stops the run.
#[test]
fn a_loading_server_is_waited_for_within_the_ready_timeout() {
    let (_echo, base) = echo("127.0.0.1", &["--unready-requests", "3"]);
    let dir = crate::util::TempDir::new("ready");
    let d = dir.path("");
    let out = run(
        &base,
        &["--ready-check-timeout-sec", "20", "--save-result", "--result-dir", &d, "--result-filename", "r.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = crate::util::read_json(&dir.path("r.json"));
    assert_eq!(r["completed"], 200, "the retried initial test is not part of the load");
    assert_eq!(r["failed"], 0);

    let (_echo, base) = echo("127.0.0.1", &["--unready-requests", "3"]);
    let out = run(&base, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("HTTP 503") && err.contains("still loading") && err.contains("--ready-check-timeout-sec"),
        "{err}"
    );
}
