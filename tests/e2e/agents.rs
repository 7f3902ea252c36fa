//! Agent loops (D65) against `surge echo --tool-call-rate`, the ground truth of tool
//! calls: the echo answers a chat stream with a tool call at a seeded rate, counts the
//! calls it made and the `tool` messages it received (and whether each names a call of
//! the assistant message before it), and caches prompt prefixes; surge follows each call
//! with a step after the tool's latency. One agent and three.

use crate::util::{TempDir, agent, echo, echo_metric, run_saved, surge, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
/// Every reply's tokens (the echo's `--output-tokens`).
const OUT: u64 = 6;

fn rows(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().map(|l| serde_json::from_str(l).expect("a JSON row")).collect()
}

fn tool_echo() -> (crate::util::Proc, String) {
    echo(
        "127.0.0.1",
        &[
            "--ttft-ms",
            "5",
            "--itl-ms",
            "1",
            "--output-tokens",
            "6",
            "--tool-call-rate",
            "0.5",
            "--prefix-cache-tokens",
            "100000000",
            "--block-size",
            "4",
        ],
    )
}

/// `surge run` of `sessions` chat sessions of 2 turns with a tool loop of at most 4
/// steps, 50 ms of tool latency.
fn args<'a>(base: &'a str, sessions: &'a str, rows: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--base-url",
        base,
        "--backend",
        "openai-chat",
        "--model",
        "m",
        "--random-input-len",
        "16",
        "--random-output-len",
        "6",
        "--multi-turn",
        "--multi-turn-num-turns",
        "2",
        "--num-prompts",
        sessions,
        "--max-concurrency",
        "8",
        "--tool-loop",
        "--max-tool-steps",
        "4",
        "--tool-latency-ms",
        "50",
        "--tool-result-len",
        "8",
        "--save-rows",
        rows,
        // The initial test request would be one more reply the rows do not hold.
        "--no-initial-test",
    ]
}

/// What the rows say, checked against the echo and the result: returns the rows.
fn check(base: &str, r: &Value, rows_path: &str) -> Vec<Value> {
    let rows = rows(rows_path);
    let a = &r["agent_loop"];
    assert_eq!(r["failed"], 0, "{r}");
    // Every request the echo answered is a row: a tool-call reply or an answer.
    let replies = echo_metric(base, "surge_echo_tool_call_replies_total") as u64;
    assert_eq!(echo_metric(base, "surge_echo_tokens_total") as u64, rows.len() as u64 * OUT, "one reply per row");
    assert_eq!(a["tool_call_replies"], replies, "{a}");
    assert_eq!(a["answers"].as_u64().unwrap() + replies, rows.len() as u64, "{a}");
    assert!(replies > 5, "the echo called tools: {replies}");
    // Every tool message named a call of the assistant message before it.
    assert!(echo_metric(base, "surge_echo_tool_results_total") > 0.0);
    assert_eq!(echo_metric(base, "surge_echo_tool_results_unmatched_total"), 0.0);
    // Per (session, turn): steps in order, each after the tool latency past the reply
    // before it, a call answered by the next step, the last an answer unless 4 steps ran.
    let mut turns: BTreeMap<(u64, u64), Vec<&Value>> = BTreeMap::new();
    for row in &rows {
        turns.entry((row["session"].as_u64().unwrap(), row["turn"].as_u64().unwrap())).or_default().push(row);
    }
    let mut per_step = BTreeMap::<u64, u64>::new();
    for ((s, t), mut steps) in turns {
        steps.sort_by_key(|r| r["step"].as_u64().unwrap_or(0));
        for (k, row) in steps.iter().enumerate() {
            assert_eq!(row["step"].as_u64().unwrap_or(0), k as u64, "session {s} turn {t}: steps 0, 1, ...");
            *per_step.entry(k as u64).or_default() += 1;
            let calls = row["finish_tool_calls"].as_bool().unwrap_or(false);
            let last = k + 1 == steps.len();
            assert!(calls != last || k == 4, "session {s} turn {t} step {k}: a call is followed by a step");
            if k > 0 {
                let prev = steps[k - 1];
                let ended = prev["start_time"].as_f64().unwrap() + prev["latency"].as_f64().unwrap();
                let waited = row["start_time"].as_f64().unwrap() - ended;
                assert!(waited >= 0.050 - 0.001, "session {s} turn {t} step {k}: sent {waited} s after the reply");
                assert!((row["tool_wait"].as_f64().unwrap() - 0.050).abs() < 1e-9);
                // The step resends the history: the echo's prefix cache finds it.
                let cached = row["cached_tokens"].as_u64().unwrap();
                assert!(cached >= prev["input_len"].as_u64().unwrap() - 4, "step {k}: {cached} cached of {row}");
            }
        }
    }
    // The merged per-step metrics equal the counts over the rows.
    let merged: BTreeMap<u64, u64> = a["per_step_metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["turn_index"].as_u64().unwrap(), p["completed"].as_u64().unwrap()))
        .collect();
    assert_eq!(merged, per_step);
    assert_eq!(
        a["tool_steps"].as_u64().unwrap(),
        per_step.iter().filter(|(k, _)| **k > 0).map(|(_, n)| n).sum::<u64>()
    );
    assert!(per_step.contains_key(&1), "some turn had a step");
    rows
}

#[test]
fn a_tool_loop_sends_each_call_back_with_its_result_until_an_answer() {
    let (_echo, base) = tool_echo();
    let dir = TempDir::new("tool-loop");
    let rows_path = dir.path("rows.jsonl");
    let r = run_saved(&dir, &args(&base, "20", &rows_path), LIMIT);
    assert_eq!(r["conversations_completed"], 20, "{r}");
    let rows = check(&base, &r, &rows_path);
    // Per session: steps and tool time from the row that ended it.
    let ends: Vec<&Value> = rows.iter().filter(|r| r.get("session_steps").is_some()).collect();
    assert_eq!(ends.len(), 20);
    let steps: u64 = ends.iter().map(|r| r["session_steps"].as_u64().unwrap()).sum();
    assert_eq!(steps, r["agent_loop"]["tool_steps"].as_u64().unwrap());
    for e in &ends {
        let tool = e["session_tool_time"].as_f64().unwrap();
        assert!((tool - 0.050 * e["session_steps"].as_f64().unwrap()).abs() < 1e-6, "{e}");
    }
    // Turns stay turns: per_turn_metrics count each turn's first request only.
    let turn0 = &r["per_turn_metrics"][0];
    assert_eq!(turn0["completed"], 20, "{turn0}");
    assert!(r["reasoning"]["tool_call_finishes"].as_u64().unwrap() > 0, "finish_reason tool_calls counted");
}

#[test]
fn three_agents_keep_every_session_and_its_steps_on_one_agent() {
    let (_echo, base) = tool_echo();
    let agents: Vec<_> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        .iter()
        .map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"]))
        .collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    let dir = TempDir::new("tool-loop-3");
    let rows_path = dir.path("rows.jsonl");
    let mut a = args(&base, "30", &rows_path);
    a.extend_from_slice(&["--agents", &addrs, "--agents-plaintext"]);
    let r = run_saved(&dir, &a, LIMIT);
    assert_eq!(r["conversations_completed"], 30, "{r}");
    let rows = check(&base, &r, &rows_path);
    let mut agent_of = BTreeMap::new();
    for row in &rows {
        let (s, agent) = (row["session"].as_u64().unwrap(), row["agent"].as_u64().unwrap());
        assert_eq!(*agent_of.entry(s).or_insert(agent), agent, "session {s} moved between agents");
    }
    assert_eq!(agent_of.values().collect::<std::collections::BTreeSet<_>>().len(), 3, "all three agents served");
}

#[test]
fn a_tool_loop_is_refused_where_it_cannot_run() {
    let (_echo, base) = tool_echo();
    for (extra, says) in [
        (&["--tool-loop"][..], "--tool-loop: only meaningful with --multi-turn"),
        (&["--multi-turn", "--tool-loop", "--backend", "openai"][..], "--tool-loop: tool calls are chat's"),
        (&["--multi-turn", "--max-tool-steps", "3"][..], "--max-tool-steps"),
    ] {
        let mut a = vec!["run", "--base-url", &base, "--model", "m", "--num-prompts", "2"];
        a.extend_from_slice(extra);
        if !extra.contains(&"--backend") {
            a.extend_from_slice(&["--backend", "openai-chat"]);
        }
        a.push("--strict");
        let out = surge(&a, LIMIT);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
    }
}
