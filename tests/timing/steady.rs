//! Steady state (D45): 200 streams of 2 s each, started 100 a second for 8 s under
//! `--max-concurrency 200`: in flight ramps up over the first 2 s, holds 200 for 6 s and
//! drains over the last 2. The window must be that plateau, its throughput the plateau's
//! (100 requests/s), while the whole run's is lower. Alone ([`crate::ALONE`]): other
//! tests' load would move the times it checks.

use crate::util::{TempDir, echo, run_saved};
use std::time::Duration;

#[test]
fn the_steady_window_is_the_plateau_between_ramp_up_and_drain() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    // TTFT 100 ms and 38 gaps of 50 ms: each request lasts 2.0 s.
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "100", "--itl-ms", "50"]);
    let dir = TempDir::new("steady");
    let r = run_saved(
        &dir,
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--num-prompts",
            "800",
            "--max-concurrency",
            "200",
            "--request-rate",
            "100",
            "--burstiness",
            "1000",
            "--random-input-len",
            "8",
            "--random-output-len",
            "39",
            "--no-initial-test",
            "--steady-state-min-window",
            "1",
            "--steady-state-threshold",
            "0.99",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r["completed"], 800, "{}", r["errors_by_kind"]);
    let s = &r["steady_state"];
    let w = &s["window"];
    let (start, end) = (w["start_s"].as_f64().unwrap(), w["end_s"].as_f64().unwrap());
    // The plateau: from the 200th start (2.0 s) to the first end after the last start (8.0 s).
    assert!((start - 2.0).abs() <= 0.2 && (end - 8.0).abs() <= 0.2, "window {start}..{end}: {s}");
    // 198 of 200: the window opens 0.02 s before the first completion (with vllm-bench's
    // 0.95 it is 0.1 s, which alone puts the window's rate 1.6 % below the plateau's).
    assert_eq!((w["threshold_abs"].as_u64(), w["target_concurrency"].as_u64()), (Some(198), Some(200)));
    let steady = s["request_throughput"].as_f64().unwrap();
    assert!((steady - 100.0).abs() <= 2.0, "steady {steady} req/s against the plateau's 100: {s}");
    let whole = r["request_throughput"].as_f64().unwrap();
    assert!(whole < 90.0, "the whole run ({whole} req/s) includes the ramp and the drain");
    // 39 tokens over 2 s per request, 200 at a time: 3,900 tokens/s on the plateau.
    let tok = s["output_throughput"].as_f64().unwrap();
    assert!((tok - 3900.0).abs() <= 0.02 * 3900.0, "{tok}");
    let slices = r["time_series"].as_array().unwrap();
    let marked: Vec<f64> = slices.iter().filter(|x| x["steady"] == true).map(|x| x["t"].as_f64().unwrap()).collect();
    assert!(marked.first().is_some_and(|&t| t <= 2.0) && marked.last().is_some_and(|&t| t >= 7.0), "{marked:?}");
}
