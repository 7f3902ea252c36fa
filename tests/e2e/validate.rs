//! `surge validate` and the client-bound verdict.

use crate::util::{TempDir, echo, echo_metric, read_json, surge, surge_bg, text, wait_for};
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

/// Ctrl-C during `surge validate`: exit 130 within seconds, the load stops, the level in
/// progress is kept (its partial measurement) and marked, and no further level is run.
#[test]
fn an_interrupted_validation_keeps_what_it_measured() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let dir = TempDir::new("valint");
    let d = dir.path("");
    let bg = surge_bg(&[
        "validate",
        "--target",
        &base,
        "--levels",
        "20,40",
        "--requests-per-level",
        "100000000",
        "--result-dir",
        &d,
    ]);
    wait_for(Duration::from_secs(60), "load at the echo", || echo_metric(&base, "surge_echo_requests_total") > 2000.0);
    bg.proc.signal("INT");
    let out = bg.finish(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let seen = echo_metric(&base, "surge_echo_requests_total");
    std::thread::sleep(Duration::from_millis(500));
    // Only the metrics request itself came in since (the counter counts every route).
    assert_eq!(echo_metric(&base, "surge_echo_requests_total"), seen + 1.0, "the load stopped");
    let v = read_json(&dir.path("validate.json"));
    assert_eq!(v["stopped"], "interrupted", "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "no level after the interrupted one: {v}");
    assert_eq!(rows[0]["concurrency"], 20);
    assert!(rows[0]["requests_per_sec"].as_f64().unwrap() > 0.0, "{v}");
}
