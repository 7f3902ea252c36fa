//! Reasoning and tools measured apart (D49): what adds no key, and tool calls counted.
//! The per-request timing of `ttfo` is in the timing binary (`tests/timing/reasoning.rs`),
//! alone, so no other test's load moves the times it checks.

use crate::util::{TempDir, echo, run_saved};
use std::time::Duration;

/// A reply without reasoning adds no key (vLLM's result stays as it was).
#[test]
fn a_plain_reply_adds_no_reasoning_key() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4"]);
    let dir = TempDir::new("no-reasoning");
    let r = run_saved(
        &dir,
        &["run", "--base-url", &base, "--backend", "openai-chat", "--model", "m", "--num-prompts", "10"],
        Duration::from_secs(60),
    );
    assert_eq!(r["completed"], 10);
    assert!(r.get("reasoning").is_none(), "{}", r["reasoning"]);
    assert!(r.get("median_ttfo_ms").is_none());
    let slices = r["time_series"].as_array().unwrap();
    assert!(slices.iter().all(|s| s.get("p99_ttfo_ms").is_none()), "no reasoning, no ttfo in the time series");
}

/// The time series carries each slice's TTFO p99 over the replies that reasoned: 5
/// reasoning tokens 10 ms apart after a 10 ms TTFT put it at 60 ms.
#[test]
fn the_time_series_carries_the_time_to_first_output() {
    let (_echo, base) =
        echo("127.0.0.1", &["--ttft-ms", "10", "--itl-ms", "10", "--output-tokens", "8", "--reasoning-tokens", "5"]);
    let dir = TempDir::new("ttfo-series");
    let r = run_saved(
        &dir,
        &["run", "--base-url", &base, "--backend", "openai-chat", "--model", "m", "--num-prompts", "20"],
        Duration::from_secs(60),
    );
    assert_eq!(r["completed"], 20);
    let slices: Vec<f64> =
        r["time_series"].as_array().unwrap().iter().filter_map(|s| s["p99_ttfo_ms"].as_f64()).collect();
    assert!(!slices.is_empty(), "{}", r["time_series"]);
    assert!(slices.iter().all(|t| (59.0..100.0).contains(t)), "{slices:?}");
    // Goodput on the first answer token: replies' TTFT meets 40 ms (10 ms scheduled, room
    // for a host that stalls while the ten requests start together), no reply's TTFO does.
    for (slo, good) in [("ttft:40", true), ("ttfo:40", false)] {
        let dir = TempDir::new(&format!("ttfo-goodput-{good}"));
        let args = ["run", "--base-url", &base, "--backend", "openai-chat", "--model", "m", "--num-prompts", "10"];
        let r = run_saved(&dir, &[&args[..], &["--goodput", slo]].concat(), Duration::from_secs(60));
        let goodput = r["request_goodput"].as_f64().unwrap();
        // TTFO is 60 ms by the echo's schedule, never earlier: no reply meets ttfo:40.
        assert_eq!(goodput > 0.0, good, "--goodput {slo}: {goodput}");
    }
}

/// `--tools FILE --tool-choice auto` against `surge echo --tool-call`, whose chat replies
/// are a tool call: every request counts one, and the time to its first delta is TTFT's.
#[test]
fn tool_calls_are_counted_and_timed() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "10", "--itl-ms", "1", "--output-tokens", "6", "--tool-call"]);
    let dir = TempDir::new("tools");
    let tools = dir.path("tools.json");
    std::fs::write(&tools, r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]"#)
        .unwrap();
    let r = run_saved(
        &dir,
        &[
            "run",
            "--base-url",
            &base,
            "--backend",
            "openai-chat",
            "--model",
            "m",
            "--num-prompts",
            "20",
            "--tools",
            &tools,
            "--tool-choice",
            "auto",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(r["completed"], 20);
    let rs = &r["reasoning"];
    assert_eq!(rs["requests_with_tool_calls"], 20, "{rs}");
    assert_eq!(rs["tool_calls"], 20, "one call a reply (its first delta has the id)");
    assert_eq!(rs["tool_call_tokens"], 120, "six argument deltas a reply");
    assert_eq!(rs["requests_with_reasoning"], 0);
    assert_eq!(rs["tool_call_finishes"], 20, "every reply ended with finish_reason tool_calls");
    let first_call = rs["median_tool_call_ms"].as_f64().unwrap();
    assert!((first_call - r["median_ttft_ms"].as_f64().unwrap()).abs() < 1.0, "{first_call}");
}
