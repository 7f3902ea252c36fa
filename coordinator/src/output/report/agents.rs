//! The reasoning and agents section (D49, D65, D68): a table of what the runs' replies
//! did (reasoning, tool calls, agent-loop steps, sub-agent graphs), and an agent loop's
//! TTFT and prefix-cache hit rate by step, one series per run.

use super::chart::{Chart, Kind, Point};
use super::{Run, Section, Table, cell, num};
use serde_json::Value;

/// The rows of the table: a label and a path into the result.
const ROWS: [(&str, &str); 16] = [
    ("Requests that reasoned", "reasoning.requests_with_reasoning"),
    ("Median time to first output, TTFO (ms)", "reasoning.median_ttfo_ms"),
    ("Median reasoning (ms)", "reasoning.median_reasoning_ms"),
    ("Median answer TPOT (ms)", "reasoning.median_answer_tpot_ms"),
    ("Reasoning tokens (client)", "reasoning.reasoning_tokens"),
    ("Requests with tool calls", "reasoning.requests_with_tool_calls"),
    ("Replies ending in tool calls", "reasoning.tool_call_finishes"),
    ("Tool steps sent", "agent_loop.tool_steps"),
    ("Replies answering", "agent_loop.answers"),
    ("Mean tool wait (ms)", "agent_loop.mean_tool_wait_ms"),
    ("Mean steps per session", "agent_loop.mean_steps_per_session"),
    ("Mean model time per session (ms)", "agent_loop.mean_model_time_per_session_ms"),
    ("Sub-agent graphs", "agent_graphs.graphs"),
    ("Widest fan-out", "agent_graphs.max_fan_out"),
    ("Median graph duration (ms)", "agent_graphs.median_graph_duration_ms"),
    ("Median critical path (ms)", "agent_graphs.median_critical_path_ms"),
];

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Whether any run reasoned, called tools, looped or spawned sub-agents.
pub fn any(runs: &[Run]) -> bool {
    runs.iter().any(|r| ["reasoning", "agent_loop", "agent_graphs"].iter().any(|k| r.v.get(*k).is_some()))
}

fn steps<'a>(r: &Run<'a>) -> &'a [Value] {
    at(r.v, "agent_loop.per_step_metrics").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn by_step(runs: &[Run], chart: Chart, key: &str, suffix: &str, scale: f64) -> Chart {
    runs.iter().fold(chart, |c, r| {
        let points =
            steps(r).iter().filter_map(|t| Some(Point::new(num(t, "turn_index")?, num(t, key)? * scale))).collect();
        c.with(&format!("{}{suffix}", r.name), points)
    })
}

pub fn section(runs: &[Run]) -> Section {
    let mut s = Section::new("agents", "Reasoning and agents");
    let rows = ROWS
        .iter()
        .filter(|(_, path)| runs.iter().any(|r| at(r.v, path).is_some()))
        .map(|(label, path)| {
            std::iter::once(label.to_string()).chain(runs.iter().map(|r| cell(at(r.v, path)))).collect()
        })
        .collect();
    let mut head = vec!["".to_string()];
    head.extend(runs.iter().map(|r| r.name.clone()));
    s.tables.push(Table { caption: "what the replies did".into(), head, rows });
    let ttft = Chart::new("step-ttft", "TTFT by agent-loop step (0: the user's message)", "step", "ms", Kind::Line);
    s.chart(by_step(runs, ttft, "median_ttft_ms", " p50", 1.0));
    let cache = Chart::new("step-cache", "Prefix cache hit rate by step", "step", "% of input tokens", Kind::Line);
    s.chart(by_step(runs, cache, "prompt_cache_hit_rate", " cached", 100.0));
    s
}
