//! The reasoning and agents section (D49, D65, D68): a table of what the runs' replies
//! did (reasoning, tool calls, agent-loop steps, sub-agent graphs), and an agent loop's
//! TTFT and prefix-cache hit rate by step, one series per run.

use super::chart::{Chart, Kind, Point};
use super::{Run, Section, Table, num_cell};
use crate::output::keys::{Stat, latency};
use crate::output::multi_turn::PerTurn;
use crate::output::result::RunResult;

/// One row of the table: its label and its value in a run (absent: the run has no such
/// block).
type Row = (&'static str, fn(&RunResult) -> Option<f64>);

fn reasoning_median(r: &RunResult, metric: &str) -> Option<f64> {
    latency(&r.reasoning.as_ref()?.latency, Stat::Median, metric)
}

const ROWS: [Row; 16] = [
    ("Requests that reasoned", |r| Some(r.reasoning.as_ref()?.requests_with_reasoning as f64)),
    ("Median time to first output, TTFO (ms)", |r| reasoning_median(r, "ttfo")),
    ("Median reasoning (ms)", |r| reasoning_median(r, "reasoning")),
    ("Median answer TPOT (ms)", |r| reasoning_median(r, "answer_tpot")),
    ("Reasoning tokens (client)", |r| Some(r.reasoning.as_ref()?.reasoning_tokens as f64)),
    ("Requests with tool calls", |r| Some(r.reasoning.as_ref()?.requests_with_tool_calls as f64)),
    ("Replies ending in tool calls", |r| Some(r.reasoning.as_ref()?.tool_call_finishes as f64)),
    ("Tool steps sent", |r| Some(r.agent_loop.as_ref()?.tool_steps as f64)),
    ("Replies answering", |r| Some(r.agent_loop.as_ref()?.answers as f64)),
    ("Mean tool wait (ms)", |r| Some(r.agent_loop.as_ref()?.mean_tool_wait_ms)),
    ("Mean steps per session", |r| Some(r.agent_loop.as_ref()?.mean_steps_per_session)),
    ("Mean model time per session (ms)", |r| Some(r.agent_loop.as_ref()?.mean_model_time_per_session_ms)),
    ("Sub-agent graphs", |r| Some(r.agent_graphs.as_ref()?.graphs as f64)),
    ("Widest fan-out", |r| Some(f64::from(r.agent_graphs.as_ref()?.max_fan_out))),
    ("Median graph duration (ms)", |r| latency(&r.agent_graphs.as_ref()?.latency, Stat::Median, "graph_duration")),
    ("Median critical path (ms)", |r| latency(&r.agent_graphs.as_ref()?.latency, Stat::Median, "critical_path")),
];

/// Whether any run reasoned, called tools, looped or spawned sub-agents.
pub fn any(runs: &[Run]) -> bool {
    runs.iter().any(|r| r.v.reasoning.is_some() || r.v.agent_loop.is_some() || r.v.agent_graphs.is_some())
}

fn steps<'a>(r: &Run<'a>) -> &'a [PerTurn] {
    r.v.agent_loop.as_ref().map_or(&[], |a| a.per_step_metrics.as_slice())
}

fn by_step(runs: &[Run], chart: Chart, value: fn(&PerTurn) -> Option<f64>, suffix: &str, scale: f64) -> Chart {
    runs.iter().fold(chart, |c, r| {
        let points =
            steps(r).iter().filter_map(|t| Some(Point::new(f64::from(t.turn_index), value(t)? * scale))).collect();
        c.with(&format!("{}{suffix}", r.name), points)
    })
}

pub fn section(runs: &[Run]) -> Section {
    let mut s = Section::new("agents", "Reasoning and agents");
    let rows = ROWS
        .iter()
        .filter(|(_, value)| runs.iter().any(|r| value(r.v).is_some()))
        .map(|(label, value)| {
            std::iter::once(label.to_string()).chain(runs.iter().map(|r| num_cell(value(r.v)))).collect()
        })
        .collect();
    let mut head = vec!["".to_string()];
    head.extend(runs.iter().map(|r| r.name.clone()));
    s.tables.push(Table { caption: "what the replies did".into(), head, rows });
    let ttft = Chart::new("step-ttft", "TTFT by agent-loop step (0: the user's message)", "step", "ms", Kind::Line);
    s.chart(by_step(runs, ttft, |t| latency(&t.latency, Stat::Median, "ttft"), " p50", 1.0));
    let cache = Chart::new("step-cache", "Prefix cache hit rate by step", "step", "% of input tokens", Kind::Line);
    s.chart(by_step(runs, cache, |t| t.prompt_cache_hit_rate, " cached", 100.0));
    s
}
