//! Reasoning measured apart (D49) against `surge echo --reasoning-tokens K`, whose chat
//! streams send their first K tokens as `delta.reasoning` and say so in the usage's
//! `completion_tokens_details`: TTFT stays vLLM's (the first thought), `ttfo` is when the
//! answer began, K tokens 2 ms apart later.

use crate::util::{TempDir, echo, run_saved};
use std::time::Duration;

#[test]
fn the_answer_is_timed_apart_from_the_reasoning() {
    let (_echo, base) = echo(
        "127.0.0.1",
        &["--ttft-ms", "20", "--itl-ms", "2", "--output-tokens", "16", "--reasoning-tokens", "10"],
    );
    let dir = TempDir::new("reasoning");
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
            "--random-input-len",
            "8",
            "--random-output-len",
            "16",
            "--num-prompts",
            "50",
            "--max-concurrency",
            "5",
            "--percentile-metrics",
            "ttft,tpot,itl,ttfo",
            "--metric-percentiles",
            "50,99",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r["completed"], 50);
    assert_eq!(r["total_output_tokens"], 800, "every delta is a token, as vLLM counts");
    let rs = &r["reasoning"];
    assert_eq!(rs["requests_with_reasoning"], 50, "{rs}");
    assert_eq!(rs["reasoning_tokens"], 500);
    assert_eq!(rs["server_reasoning_tokens"], 500, "the usage's completion_tokens_details");
    assert_eq!(rs["answer_tokens"], 300);
    let ttft = r["median_ttft_ms"].as_f64().unwrap();
    let ttfo = rs["median_ttfo_ms"].as_f64().unwrap();
    // Ten reasoning tokens 2 ms apart: the answer begins 20 ms after the first thought.
    assert!((ttfo - ttft - 20.0).abs() < 5.0, "TTFT {ttft} ms, TTFO {ttfo} ms");
    let reasoning = rs["median_reasoning_ms"].as_f64().unwrap();
    assert!((reasoning - 18.0).abs() < 5.0, "first to last of 10 reasoning deltas: {reasoning} ms");
    let answer_tpot = rs["median_answer_tpot_ms"].as_f64().unwrap();
    assert!((answer_tpot - 2.0).abs() < 1.5, "{answer_tpot}");
    assert!(rs["p99_ttfo_ms"].as_f64().unwrap() >= ttfo);
    // --percentile-metrics ttfo: the top-level keys too, equal to the block's.
    assert_eq!(r["median_ttfo_ms"], rs["median_ttfo_ms"]);
    assert!(r["p99_ttfo_ms"].is_number());
}

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
