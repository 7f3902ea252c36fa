//! HTTP/3: `surge run --http-version 3` against `surge echo --tls-self-signed
//! --http3` on 127.0.0.1: faults counted by kind, TLS verification (`--ca-cert`,
//! `--insecure`), `surge validate --http-version 3`. The fidelity test (timing) is in the
//! `timing` test binary, run alone.

use crate::h3util::{echo_h3, metric, run_h3};
use crate::util::{TempDir, read_json, surge, text};
use std::time::Duration;

#[test]
fn http3_faults_are_counted_by_kind_and_the_run_finishes() {
    let dir = TempDir::new("h3-faults");
    // Reset streams, 500s, malformed events and cut streams.
    let (_echo, base, ca) = echo_h3(
        &dir,
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
    let args = [
        "--ca-cert",
        &ca,
        "--no-initial-test",
        "--random-output-len",
        "8",
        "--num-prompts",
        "1000",
        "--max-concurrency",
        "32",
    ];
    let (out, r) = run_h3(&dir, &base, &args, "faults.json");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", text(&out.stdout));
    assert!(!stderr.contains("panicked"), "{stderr}");
    let failed = r["failed"].as_u64().unwrap();
    assert_eq!(r["completed"].as_u64().unwrap() + failed, 1000);
    let kinds = r["errors_by_kind"].as_object().unwrap();
    let by = |k: &str| kinds.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    assert!(by("http_status") > 100, "{kinds:?}");
    assert!(by("malformed") > 30, "{kinds:?}");
    assert!(by("connection_reset") > 40, "reset streams: {kinds:?}");
    assert!(by("truncated") > 40, "{kinds:?}");
    assert_eq!(kinds.values().map(|v| v.as_u64().unwrap()).sum::<u64>(), failed);
}

#[test]
fn http3_closed_connections_and_a_silent_server_are_counted() {
    let dir = TempDir::new("h3-close");
    // Every stream's end closes its whole QUIC connection, cutting the streams sharing it.
    let (_echo, base, ca) = echo_h3(&dir, &["--ttft-ms", "5", "--itl-ms", "5", "--close-after-stream"]);
    let args = [
        "--ca-cert",
        &ca,
        "--no-initial-test",
        "--random-output-len",
        "8",
        "--num-prompts",
        "300",
        "--max-concurrency",
        "30",
        "--h3-connections",
        "1",
    ];
    let (out, r) = run_h3(&dir, &base, &args, "close.json");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", text(&out.stdout));
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (completed, failed) = (r["completed"].as_u64().unwrap(), r["failed"].as_u64().unwrap());
    assert_eq!(completed + failed, 300, "{r}");
    assert!(completed > 0 && failed > 0, "completed {completed}, failed {failed}");
    let kinds = r["errors_by_kind"].as_object().unwrap();
    let cut: u64 = ["connection_reset", "truncated"].iter().filter_map(|k| kinds.get(*k)?.as_u64()).sum();
    assert_eq!(cut, failed, "cut streams are resets or truncations: {kinds:?}");

    // A server that stops answering: the run's time limit ends it, requests cancelled.
    let (_stall, base, ca) = echo_h3(&dir, &["--fault-stall-ms", "600000", "--fault-stall-rate", "1"]);
    let args = [
        "--ca-cert",
        &ca,
        "--no-initial-test",
        "--num-prompts",
        "10",
        "--max-concurrency",
        "10",
        "--max-run-time",
        "2s",
    ];
    let (out, r) = run_h3(&dir, &base, &args, "stall.json");
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    // Cancelled by the client at the run-time limit: not failures (D21, result schema 3).
    assert_eq!((r["failed"].as_u64(), r["cancelled"].as_u64()), (Some(0), Some(10)), "{r}");
    assert!(r["errors_by_kind"].get("cancelled").is_none(), "{}", r["errors_by_kind"]);
}

#[test]
fn http3_checks_the_certificate_unless_told_not_to() {
    let dir = TempDir::new("h3-tls");
    let (_echo, base, ca) = echo_h3(&dir, &["--ttft-ms", "1", "--itl-ms", "1"]);
    let args = ["--random-output-len", "4", "--num-prompts", "20", "--max-concurrency", "4"];
    // The echo's private CA is not among the Mozilla roots: the initial test fails on TLS.
    let (out, _) = run_h3(&dir, &base, &args, "untrusted.json");
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.to_lowercase().contains("tls") || all.contains("certificate"), "{all}");
    // vLLM's --insecure: no verification.
    let mut insecure = args.to_vec();
    insecure.push("--insecure");
    let (out, r) = run_h3(&dir, &base, &insecure, "insecure.json");
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(r["completed"].as_u64(), Some(20), "{r}");
    // Over QUIC: the refused handshakes never reached HTTP; the 20 (and the initial test) did.
    let h3 = metric(&base, &ca, "surge_echo_http3_requests_total");
    assert!((21.0..=22.0).contains(&h3), "the echo saw {h3} HTTP/3 requests");
}

#[test]
fn validate_measures_the_client_over_http3() {
    let dir = TempDir::new("h3-validate");
    let out = surge(
        &[
            "validate",
            "--http-version",
            "3",
            "--levels",
            "50",
            "--requests-per-level",
            "500",
            "--result-dir",
            dir.0.to_str().expect("utf-8 path"),
        ],
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let v = read_json(&dir.path("validate.json"));
    let row = &v["rows"][0];
    assert_eq!(row["success_rate"].as_f64(), Some(1.0), "{row}");
    assert_eq!(row["agents"][0]["completed"].as_u64(), Some(500), "{row}");
}
