//! Reasoning measured apart (D49) against `surge echo --reasoning-tokens K`, whose chat
//! and Responses streams send their first K tokens as reasoning (and chat says so in the
//! usage's `completion_tokens_details`): TTFT stays vLLM's (the first thought), `ttfo` is
//! when the answer began, K tokens later. Alone ([`crate::ALONE`]): every row's TTFO is
//! checked within 1 ms of its TTFT plus the K gaps it saw (the echo's actual timing), and
//! against the echo's setting each backend's median within 2.5 ms and every row within 15 ms
//! plus the host's longest stall during the run ([`crate::stalls`]).
//! The per-row bound measures the echo's timers, not surge: a busy 2-core host delays whole
//! waves of rows by 2-3 ms (CI once saw 3.0 ms, a CPU hog beside the test 2.2 ms on 4 rows
//! in 40), and a VM whose CPUs stall, by 4 ms and more (104.06 ms for 100). A token off
//! (5 ms) is caught by the 1 ms check against the row's own gaps.

use crate::util::{TempDir, echo, run_saved};
use std::time::Duration;

/// Every request's `ttfo` is its TTFT plus 20 reasoning tokens 5 ms apart (within 1 ms),
/// with 20 reasoning and 20 answer tokens, through chat and through the Responses API.
#[test]
fn the_answer_is_timed_apart_from_the_reasoning() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (_echo, base) =
        echo("127.0.0.1", &["--ttft-ms", "30", "--itl-ms", "5", "--output-tokens", "40", "--reasoning-tokens", "20"]);
    for backend in ["openai-chat", "openai-responses"] {
        let dir = TempDir::new(&format!("reasoning-{backend}"));
        let rows = dir.path("rows.jsonl");
        let (r, stall) = crate::stalls::during(|| {
            run_saved(
                &dir,
                &[
                    "run",
                    "--base-url",
                    &base,
                    "--backend",
                    backend,
                    "--model",
                    "m",
                    "--random-input-len",
                    "8",
                    "--random-output-len",
                    "40",
                    "--num-prompts",
                    "40",
                    "--max-concurrency",
                    "4",
                    "--percentile-metrics",
                    "ttft,tpot,itl,ttfo",
                    "--metric-percentiles",
                    "50,99",
                    "--save-rows",
                    &rows,
                ],
                Duration::from_secs(120),
            )
        });
        assert_eq!(r["completed"], 40, "{backend}");
        assert_eq!(r["total_output_tokens"], 1600, "{backend}: every delta is a token, as vLLM counts");
        let rs = &r["reasoning"];
        assert_eq!(rs["requests_with_reasoning"], 40, "{backend}: {rs}");
        assert_eq!(rs["reasoning_tokens"], 800, "{backend}");
        assert_eq!(rs["answer_tokens"], 800, "{backend}");
        let text = std::fs::read_to_string(&rows).unwrap();
        let (mut n, mut gaps, mut spans) = (0, Vec::new(), Vec::new());
        // Per row, against the echo's schedule: its timer may wake late on a busy host
        // (104.06 ms for the 100 ms below, where the host's timer lateness p99 was 5.6 ms).
        // surge's own exactness is checked against the gaps each row saw, within 1 ms, and
        // the schedule by the medians, within half a token's 5 ms gap (one token off moves
        // every row by 5 ms; a host stalled 15 ms in every 150 moved the median by 2.3).
        // The echo's schedule is absolute: a stall of the host at the first or the 21st
        // token moves one row by as much, so the longest stall seen is added.
        let near = |what: &str, got: f64, want: f64| {
            assert!(
                (got - want).abs() <= 15.0 + stall,
                "{backend}: {what} {got:.3} ms, expected {want} ms (longest stall {stall:.1} ms)"
            );
            got
        };
        for line in text.lines() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let (ttft, ttfo) = (row["ttft"].as_f64().unwrap() * 1000.0, row["ttfo"].as_f64().unwrap() * 1000.0);
            // The answer's first token is the 21st event: TTFO is TTFT plus the twenty gaps
            // this request saw before it, within 1 ms on every request (to the microsecond
            // in fact), however late the echo's timer woke; counting reasoning as answer
            // gives 0, one token off gives 5 ms.
            let itl: Vec<f64> = row["itl"].as_array().unwrap().iter().map(|g| g.as_f64().unwrap() * 1000.0).collect();
            let seen: f64 = itl[..20].iter().sum();
            assert!(
                (ttfo - ttft - seen).abs() <= 1.0,
                "{backend}: TTFO - TTFT {:.3} ms, the 20 reasoning gaps {seen:.3} ms",
                ttfo - ttft
            );
            // Twenty reasoning tokens 5 ms apart: the answer begins 100 ms after the first thought.
            gaps.push(near("TTFO - TTFT", ttfo - ttft, 100.0));
            assert_eq!(row["reasoning_tokens"], 20, "{backend}");
            assert_eq!(row["output_len"].as_u64().unwrap() - 20, 20, "{backend}: answer tokens");
            let span = row["reasoning"].as_f64().unwrap() * 1000.0;
            spans.push(near("first to last of 20 reasoning deltas", span, 95.0));
            n += 1;
        }
        assert_eq!(n, 40);
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (gap, span) = (median(&mut gaps), median(&mut spans));
        assert!((gap - 100.0).abs() <= 2.5, "{backend}: median TTFO - TTFT {gap:.3} ms: {gaps:?}");
        assert!((span - 95.0).abs() <= 2.5, "{backend}: median reasoning span {span:.3} ms: {spans:?}");
        let answer_tpot = rs["median_answer_tpot_ms"].as_f64().unwrap();
        assert!((answer_tpot - 5.0).abs() < 1.0, "{backend}: {answer_tpot}");
        // --percentile-metrics ttfo: the top-level keys too, equal to the block's.
        assert_eq!(r["median_ttfo_ms"], rs["median_ttfo_ms"], "{backend}");
        assert!(r["p99_ttfo_ms"].is_number());
        if backend == "openai-chat" {
            assert_eq!(rs["server_reasoning_tokens"], 800, "the usage's completion_tokens_details");
        }
    }
}
