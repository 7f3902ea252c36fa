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
    // The report draws the steps.
    let html = dir.path("r.html");
    let out = surge(&["report", &dir.path("r.json"), "-o", &html], LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    for want in ["Reasoning and agents", "step-ttft", "step-cache", "Tool steps sent"] {
        assert!(page.contains(want), "the report lacks {want}");
    }
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

/// A session trace whose root `p` spawns `a`, `b` and `c` after its first turn and joins
/// them before its second (D68); each sub-agent has two turns, the second 10 ms after the
/// first. Returns the file.
fn graph_trace(dir: &TempDir, roots: usize) -> String {
    let mut lines = Vec::new();
    for r in 0..roots {
        let (p, a, b, c) = (format!("p{r}"), format!("a{r}"), format!("b{r}"), format!("c{r}"));
        let t = r * 5;
        lines.push(format!(
            r#"{{"session_id":"{p}","timestamp":{t},"input_length":16,"output_length":4,"spawn":["{a}","{b}","{c}"]}}"#
        ));
        lines.push(format!(r#"{{"session_id":"{p}","delay":0,"input_length":16,"output_length":4,"join":true}}"#));
        lines.push(format!(r#"{{"session_id":"{p}","delay":0,"input_length":16,"output_length":4}}"#));
        for child in [&a, &b, &c] {
            lines.push(format!(r#"{{"session_id":"{child}","input_length":8,"output_length":4}}"#));
            lines.push(format!(r#"{{"session_id":"{child}","delay":10,"input_length":8,"output_length":4}}"#));
        }
    }
    let path = dir.path("graph.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn graph_args<'a>(base: &'a str, trace: &'a str, rows: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--base-url",
        base,
        "--model",
        "m",
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        trace,
        "--save-rows",
        rows,
        "--no-initial-test",
    ]
}

/// What a graph's rows say against its root's totals: returns (root session, its rows'
/// agent) for each graph.
fn check_graphs(rows: &[Value]) -> Vec<(u64, u64)> {
    let num = |r: &Value, k: &str| r[k].as_f64().unwrap();
    let roots: Vec<&Value> = rows.iter().filter(|r| r.get("parent").is_none()).collect();
    let mut out = Vec::new();
    for root in roots.iter().filter(|r| r["turn"] == 0) {
        let s = root["session"].as_u64().unwrap();
        let own: Vec<&&Value> = roots.iter().filter(|r| r["session"] == s).collect();
        let turn = |t: u64| *own.iter().find(|r| r["turn"] == t).unwrap_or_else(|| panic!("root {s} turn {t}"));
        let children: Vec<&Value> = rows.iter().filter(|r| r["parent"] == s).collect();
        assert_eq!(children.len(), 6, "root {s}: three sub-agents of two turns");
        let mut by_child: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
        for c in &children {
            by_child.entry(c["session"].as_u64().unwrap()).or_default().push(c);
            assert_eq!(c["agent"], root["agent"], "a sub-agent runs on its root's agent");
        }
        assert_eq!(by_child.len(), 3);
        // The sub-agents overlap: each first turn started before any other ended.
        let firsts: Vec<&Value> = children.iter().copied().filter(|c| c["turn"] == 0).collect();
        let latest_start = firsts.iter().map(|c| num(c, "start_time")).fold(f64::MIN, f64::max);
        let earliest_end = firsts.iter().map(|c| num(c, "start_time") + num(c, "latency")).fold(f64::MAX, f64::min);
        assert!(latest_start < earliest_end, "root {s}: the sub-agents ran at once");
        // Spawned after the root's first turn, joined before its second.
        let t0_end = num(turn(0), "start_time") + num(turn(0), "latency");
        assert!(firsts.iter().all(|c| num(c, "start_time") >= t0_end));
        let last_child_end = children.iter().map(|c| num(c, "start_time") + num(c, "latency")).fold(0.0, f64::max);
        assert!(num(turn(1), "start_time") >= last_child_end, "root {s}: turn 1 waits for the sub-agents");
        // The critical path: the root's turns, plus the longest sub-agent's requests.
        let longest =
            by_child.values().map(|turns| turns.iter().map(|c| num(c, "latency")).sum::<f64>()).fold(0.0, f64::max);
        let expected = num(turn(0), "latency") + longest + num(turn(1), "latency") + num(turn(2), "latency");
        let last = turn(2);
        assert!(
            (num(last, "critical_path") - expected).abs() < 5e-6,
            "root {s}: {} vs {expected}",
            last["critical_path"]
        );
        let graph = num(last, "start_time") + num(last, "latency") - num(turn(0), "start_time");
        assert!((num(last, "graph_duration") - graph).abs() < 5e-6, "{last}");
        assert_eq!(last["fan_out"], 3);
        out.push((s, root["agent"].as_u64().unwrap()));
    }
    out
}

#[test]
fn sub_agents_run_at_once_and_their_root_waits_for_them() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "2"]);
    let dir = TempDir::new("graph");
    let trace = graph_trace(&dir, 1);
    let rows_path = dir.path("rows.jsonl");
    let r = run_saved(&dir, &graph_args(&base, &trace, &rows_path), LIMIT);
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(9), Some(0)), "{r}");
    // The conversations are the roots; the sub-agents are the graph's.
    assert_eq!((r["conversations_started"].as_u64(), r["conversations_completed"].as_u64()), (Some(1), Some(1)));
    let g = &r["agent_graphs"];
    assert_eq!(
        (g["graphs"].as_u64(), g["sub_agent_sessions"].as_u64(), g["max_fan_out"].as_u64()),
        (Some(1), Some(3), Some(3)),
        "{g}"
    );
    let rows = rows(&rows_path);
    assert_eq!(check_graphs(&rows).len(), 1);
    let last = rows.iter().find(|r| r.get("critical_path").is_some()).unwrap();
    let ms = last["critical_path"].as_f64().unwrap() * 1000.0;
    assert!((g["median_critical_path_ms"].as_f64().unwrap() - ms).abs() < 0.01, "{g}");
}

#[test]
fn three_agents_keep_each_graph_on_one_agent() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "2"]);
    let agents: Vec<_> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        .iter()
        .map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"]))
        .collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    let dir = TempDir::new("graph-3");
    let trace = graph_trace(&dir, 6);
    let rows_path = dir.path("rows.jsonl");
    let mut a = graph_args(&base, &trace, &rows_path);
    a.extend_from_slice(&["--agents", &addrs, "--agents-plaintext"]);
    let r = run_saved(&dir, &a, LIMIT);
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(54), Some(0)), "{r}");
    let graphs = check_graphs(&rows(&rows_path));
    assert_eq!(graphs.len(), 6);
    let used: std::collections::BTreeSet<u64> = graphs.iter().map(|(_, a)| *a).collect();
    assert_eq!(used.len(), 3, "the graphs spread over the agents: {graphs:?}");
    assert_eq!(r["agent_graphs"]["graphs"], 6);
}

/// A Weka agentic-coding trace (the format AIPerf replays, D73), as written: one
/// conversation whose first call spawns two sub-agents that its second call waits for (it
/// starts after both ended, as recorded), and a third call 0.3 s after the second's end;
/// every call's input as recorded, the sub-agents on their conversation's agent, the
/// block size the file's own. The sub-agents' calls take longer here (100 tokens 5 ms
/// apart) than recorded, so only the join keeps the second call after them.
#[test]
fn a_weka_trace_replays_its_sub_agents_and_their_join() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "5"]);
    let dir = TempDir::new("weka");
    let sub = |id: &str, t: f64| {
        format!(
            r#"{{"t": {t}, "type": "subagent", "agent_id": "{id}", "subagent_type": "Explore", "status": "completed",
                "duration_ms": 400, "models": ["haiku"], "requests": [
                {{"t": {}, "type": "n", "model": "haiku", "in": 70, "out": 100, "hash_ids": [1, 7], "api_time": 0.1}},
                {{"t": {}, "type": "s", "model": "haiku", "in": 90, "out": 100, "hash_ids": [1, 7, 8], "api_time": 0.1}}]}}"#,
            t + 0.05,
            t + 0.25
        )
    };
    let trace = format!(
        r#"{{"id": "w1", "models": ["opus"], "block_size": 32, "hash_id_scope": "local", "requests": [
            {{"t": 0.0, "type": "s", "model": "opus", "in": 100, "out": 4, "hash_ids": [1, 2, 3], "api_time": 0.1, "stop": "tool_use"}},
            {},
            {},
            {{"t": 0.7, "type": "s", "model": "opus", "in": 140, "out": 4, "hash_ids": [1, 2, 3, 4], "api_time": 0.1}},
            {{"t": 1.1, "type": "s", "model": "opus", "in": 180, "out": 4, "hash_ids": [1, 2, 3, 4, 5], "api_time": 0.1}}]}}"#,
        sub("a", 0.15),
        sub("b", 0.2)
    );
    let path = dir.path("w1.json");
    std::fs::write(&path, trace).unwrap();
    let rows_path = dir.path("rows.jsonl");
    let r = run_saved(&dir, &graph_args(&base, &path, &rows_path), LIMIT);
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(7), Some(0)), "{r}");
    let g = &r["agent_graphs"];
    assert_eq!(
        (g["graphs"].as_u64(), g["sub_agent_sessions"].as_u64(), g["max_fan_out"].as_u64()),
        (Some(1), Some(2), Some(2)),
        "{g}"
    );
    let rows = rows(&rows_path);
    let num = |r: &Value, k: &str| r[k].as_f64().unwrap();
    let end = |r: &Value| num(r, "start_time") + num(r, "latency");
    let root: Vec<&Value> = {
        let mut v: Vec<&Value> = rows.iter().filter(|r| r.get("parent").is_none()).collect();
        v.sort_by_key(|r| r["turn"].as_u64());
        v
    };
    let inputs: Vec<u64> = root.iter().map(|r| r["input_len"].as_u64().unwrap()).collect();
    assert_eq!(inputs, [100, 140, 180], "the conversation's calls as recorded");
    let children: Vec<&Value> = rows.iter().filter(|r| r.get("parent").is_some()).collect();
    assert_eq!(children.len(), 4);
    assert!(children.iter().all(|c| c["agent"] == root[0]["agent"]));
    let mut child_inputs: Vec<u64> = children.iter().map(|c| c["input_len"].as_u64().unwrap()).collect();
    child_inputs.sort();
    assert_eq!(child_inputs, [70, 70, 90, 90]);
    assert!(children.iter().all(|c| num(c, "start_time") >= end(root[0])), "spawned after the first call");
    let last_child = children.iter().map(|c| end(c)).fold(0.0, f64::max);
    assert!(num(root[1], "start_time") >= last_child, "the second call joins both sub-agents");
    // Within a sub-agent, its second call waits the recorded 0.1 s after its first ended.
    for s in children.iter().filter(|c| c["turn"] == 1) {
        let first = children.iter().find(|c| c["session"] == s["session"] && c["turn"] == 0).unwrap();
        assert!(num(s, "start_time") >= end(first) + 0.1, "{s}");
    }
    assert!(num(root[2], "start_time") >= end(root[1]) + 0.3, "end to start, as recorded");
}
