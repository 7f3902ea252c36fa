//! `surge validate` and the client-bound verdict.

use crate::util::{TempDir, bin, echo, read_json, surge, text};
use std::process::Command;
use std::time::Duration;

#[test]
fn validation_table_and_against_verdicts() {
    let dir = TempDir::new("validate");
    let out = surge(
        &["validate", "--levels", "100,1000,2000", "--requests-per-level", "1000", "--result-dir", &dir.path("v")],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout
            .starts_with("| Concurrency | Requests/sec | Tokens/sec | p50 (ms) | p95 (ms) | p99 (ms) | Success Rate |"),
        "{stdout}"
    );
    let v = read_json(&dir.path("v/validate.json"));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["concurrency"].as_u64().unwrap()).collect::<Vec<_>>(), vec![100, 1000, 2000]);
    for r in rows {
        assert_eq!(r["success_rate"], 1.0, "{r}");
        assert!(r["requests_per_sec"].as_f64().unwrap() > 0.0);
        assert!(!r["agents"].as_array().unwrap().is_empty());
    }
    assert!(std::fs::read_to_string(dir.path("v/validate.md")).unwrap().contains("| 2000 |"));

    // A light run passes --against; a run claiming an impossible rate fails, with numbers.
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "5"]);
    let run = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--num-prompts",
            "200",
            "--max-concurrency",
            "10",
            "--save-result",
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "light.json",
        ],
        Duration::from_secs(60),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let pass = surge(
        &["validate", "--against", &dir.path("light.json"), "--result-dir", &dir.path("v2")],
        Duration::from_secs(60),
    );
    assert!(pass.status.success(), "{}\n{}", text(&pass.stdout), text(&pass.stderr));
    assert!(text(&pass.stdout).contains("PASS"), "{}", text(&pass.stdout));
    let mut fake = read_json(&dir.path("light.json"));
    fake["request_throughput"] = serde_json::json!(5.0e7);
    std::fs::write(dir.path("fake.json"), serde_json::to_vec(&fake).unwrap()).unwrap();
    let fail = surge(
        &["validate", "--against", &dir.path("fake.json"), "--result-dir", &dir.path("v3")],
        Duration::from_secs(60),
    );
    let msg = text(&fail.stdout);
    assert_eq!(fail.status.code(), Some(5), "{msg}\n{}", text(&fail.stderr));
    assert!(msg.contains("FAIL") && msg.contains("50000000.00 req/s") && msg.contains("headroom"), "{msg}");
}

#[test]
fn an_overloaded_client_is_flagged_client_bound_and_a_light_one_is_not() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let dir = TempDir::new("bound");
    // One core, asked for far more than it can send.
    let out = Command::new("taskset")
        .args(["-c", "0"])
        .arg(bin("surge"))
        .args([
            "run",
            "--base-url",
            &base,
            "--backend",
            "http",
            "--random-input-len",
            "16",
            "--num-prompts",
            "40000",
            "--request-rate",
            "400000",
            "--save-result",
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "heavy.json",
        ])
        .output()
        .expect("taskset");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("WARNING: client-bound"), "{}", text(&out.stdout));
    let heavy = read_json(&dir.path("heavy.json"));
    let v = &heavy["client"]["verdict"];
    assert_eq!(v["client_bound"], true, "{v}");
    assert!(!v["reasons"].as_array().unwrap().is_empty());
    assert_eq!(heavy["client"]["agents"][0]["cores"], 1, "taskset pins the agent to one core");

    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--backend",
            "http",
            "--random-input-len",
            "16",
            "--num-prompts",
            "150",
            "--request-rate",
            "100",
            "--save-result",
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "light.json",
            // The suite runs tests in parallel on 2 cores; the verdict's logic is under test,
            // not this machine's scheduling jitter.
            "--client-lag-limit",
            "5ms",
        ],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let light = read_json(&dir.path("light.json"));
    assert_eq!(light["client"]["verdict"]["client_bound"], false, "{}", light["client"]);
}
