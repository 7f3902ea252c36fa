//! `surge capacity` (D62) against `surge echo --max-concurrent-streams K`: a level far
//! above capacity stopped early, a sessions search, and `surge run --precision`. The
//! searches whose answer is held exact under a tight TTFT objective run alone in the
//! timing binary (`tests/timing/capacity.rs`).

use crate::caputil::{capacity, echo_48};
use crate::util::{TempDir, echo, read_json, surge, text};
use serde_json::Value;
use std::time::Duration;

/// A level at four times the capacity (3,840 requests/s against 960): the queue grows and
/// the level is stopped as failed before half of its 4,000 requests were sent.
#[test]
fn a_level_at_four_times_capacity_stops_early() {
    let (_echo, base) = echo_48();
    let dir = TempDir::new("capacity-early");
    let (c, stdout) = capacity(
        &base,
        &dir,
        &[
            "--over",
            "rate",
            "--burstiness",
            "1000",
            "--slo",
            "ttft:p99<=30",
            "--range",
            "3840:3840",
            "--num-prompts",
            "4000",
        ],
    );
    assert_eq!(c["capacity"], Value::Null, "{stdout}");
    let l = &c["levels"][0];
    assert_eq!(l["verdict"], "fail", "{stdout}");
    let e = &l["stopped_early"];
    let (sent, planned) = (e["requests_sent"].as_u64().unwrap(), e["requests_planned"].as_u64().unwrap());
    assert_eq!(planned, 4000);
    assert!(sent < planned / 2, "sent {sent} of {planned}\n{stdout}");
    assert!(c["totals"]["saved_s"].as_f64().unwrap() > 0.0);
    let run = read_json(l["files"][0].as_str().unwrap());
    assert_eq!(run["ended_by"], "saturated");
}

/// Open conversations (`--over sessions`) with think time: a capacity is found, and every
/// level-run's file has its per-turn metrics.
#[test]
fn a_sessions_search_finds_a_capacity_with_per_turn_metrics() {
    let (_echo, base) = echo(
        "127.0.0.1",
        &["--max-concurrent-streams", "8", "--ttft-ms", "20", "--itl-ms", "2", "--output-tokens", "8"],
    );
    let dir = TempDir::new("capacity-sessions");
    let (c, stdout) = capacity(
        &base,
        &dir,
        &[
            "--backend",
            "openai-chat",
            "--multi-turn",
            "--multi-turn-num-turns",
            "3",
            "--multi-turn-delay-ms",
            "20",
            "--over",
            "sessions",
            "--slo",
            "ttft:p90<=30",
            "--range",
            "2:64",
            "--random-output-len",
            "8",
        ],
    );
    let cap = c["capacity"].as_f64().unwrap_or_else(|| panic!("no capacity:\n{stdout}"));
    assert!((2.0..64.0).contains(&cap), "{cap}\n{stdout}");
    assert_eq!(c["unit"], "multi_turn_concurrency");
    for l in c["levels"].as_array().unwrap() {
        for f in l["files"].as_array().unwrap() {
            let r = read_json(f.as_str().unwrap());
            assert_eq!(r["per_turn_metrics"].as_array().map(Vec::len), Some(3), "{f}");
        }
    }
}

/// `surge run --precision ttft:p99:5%`: the run ends before its 100,000 requests, with
/// the interval within 5 % of the estimate.
#[test]
fn a_run_stops_once_its_percentile_is_precise_enough() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "1", "--output-tokens", "4"]);
    let dir = TempDir::new("precision");
    let d = dir.path("");
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--num-prompts",
            "100000",
            "--max-concurrency",
            "64",
            "--precision",
            "ttft:p99:5%",
            "--save-result",
            "--result-dir",
            &d,
            "--result-filename",
            "r.json",
        ],
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_json(&dir.path("r.json"));
    assert_eq!(r["ended_by"], "precision");
    let done = r["completed"].as_u64().unwrap() + r["cancelled"].as_u64().unwrap();
    assert!(done < 100_000, "{done}");
    let p = &r["precision"][0];
    assert_eq!(p["target"], "ttft:p99:5%");
    assert_eq!(p["reached"], true, "{p}");
    assert!(p["relative_width"].as_f64().unwrap() <= 0.05, "{p}");
    assert!(p["low_ms"].as_f64().unwrap() <= p["estimate_ms"].as_f64().unwrap());
}
