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
    let first_call = rs["median_tool_call_ms"].as_f64().unwrap();
    assert!((first_call - r["median_ttft_ms"].as_f64().unwrap()).abs() < 1.0, "{first_call}");
}
