//! A faulty server: the run completes, failures are counted by kind, nothing panics.

use crate::util::{TempDir, echo, read_json, surge, text};
use std::time::Duration;

#[test]
fn errors_are_counted_by_kind_and_the_run_finishes() {
    let (_echo, base) = echo(
        "127.0.0.1",
        &[
            "--ttft-ms",
            "1",
            "--itl-ms",
            "1",
            "--fault-500-rate",
            "0.2",
            "--fault-reset-rate",
            "0.1",
            "--fault-malformed-rate",
            "0.1",
            "--fault-truncate-rate",
            "0.1",
            "--seed",
            "3",
        ],
    );
    let dir = TempDir::new("faults");
    let out = surge(
        &[
            "run",
            // Faults would stop the run at its initial test request; these tests measure the load.
            "--no-initial-test",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "8",
            "--random-output-len",
            "8",
            "--num-prompts",
            "1000",
            "--max-concurrency",
            "32",
            "--save-result",
            "--save-detailed",
            "--save-rows",
            &dir.path("rows.jsonl"),
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "r.json",
        ],
        Duration::from_secs(120),
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", text(&out.stdout));
    assert!(!stderr.contains("panicked"), "{stderr}");
    let r = read_json(&dir.path("r.json"));
    let failed = r["failed"].as_u64().unwrap();
    let completed = r["completed"].as_u64().unwrap();
    assert_eq!(completed + failed, 1000);
    assert!(failed > 200, "failed {failed}");
    let kinds = r["errors_by_kind"].as_object().unwrap();
    let by = |k: &str| kinds.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    assert!(by("http_status") > 100, "{kinds:?}");
    assert!(by("malformed") > 30, "{kinds:?}");
    assert!(by("truncated") + by("connection_reset") > 80, "{kinds:?}");
    assert_eq!(kinds.values().map(|v| v.as_u64().unwrap()).sum::<u64>(), failed);
    let errors = r["errors"].as_array().unwrap();
    assert_eq!(errors.iter().filter(|e| !e.as_str().unwrap().is_empty()).count() as u64, failed);
    // The echo cuts a truncated stream by ending its HTTP/1.1 connection mid-body: each
    // example says so, names the echo and HTTP/1.1, and so does each such row.
    for e in r["error_examples"]["truncated"].as_array().unwrap() {
        let s = &e["stream"];
        assert_eq!((s["ended"].as_str(), s["ended_by"].as_str()), (Some("peer_closed"), Some("peer")), "{e}");
        assert_eq!((s["server"].as_str(), s["http_version"].as_str()), (Some("surge-echo"), Some("HTTP/1.1")), "{e}");
        assert!(s["events"].as_u64().unwrap() >= 1 && s["bytes"].as_u64().unwrap() > 0, "{e}");
        assert!(e["message"].as_str().unwrap().starts_with("stream cut, ended by the peer: the peer closed"), "{e}");
    }
    let rows = std::fs::read_to_string(dir.path("rows.jsonl")).unwrap();
    let mut cut = 0;
    for line in rows.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        match row["error_kind"].as_str().unwrap() {
            "truncated" => {
                assert_eq!(row["stream"]["ended"], "peer_closed", "{row}");
                cut += 1;
            }
            // A 500, a malformed event and a reset before the head are not cut streams.
            _ => assert!(row.get("stream").is_none(), "{row}"),
        }
    }
    assert_eq!(cut, by("truncated"));
}

#[test]
fn a_stalling_server_is_cut_off_by_the_run_time_limit() {
    let (_echo, base) = echo("127.0.0.1", &["--fault-stall-ms", "600000", "--fault-stall-rate", "1"]);
    let out = surge(
        &[
            "run",
            // Faults would stop the run at its initial test request; these tests measure the load.
            "--no-initial-test",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "8",
            "--random-output-len",
            "8",
            "--num-prompts",
            "10",
            "--max-concurrency",
            "10",
            "--max-run-time",
            "2s",
        ],
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Cancelled by the client at the run-time limit: not failures (D21, result schema 3).
    assert!(stdout.contains("Failed requests:                         0 "), "{stdout}");
    assert!(stdout.contains("Cancelled requests (not failed):         10"), "{stdout}");
}
