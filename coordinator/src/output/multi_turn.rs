//! A multi-turn run's keys in the result: vllm-bench's (`mode`, `per_turn_metrics`,
//! `conversations_completed`, ...; its `src/output/json.rs` is the reference, D32) and
//! surge's beside them (conversations started and unfinished, cancelled turns, duration
//! and turns-per-conversation percentiles, the prefix cache's hit rate).

use super::latencies::{Latencies, MetricStats};
use super::sets::Dist;
use crate::analysis::conversations::{Conversations, Turn};
use crate::analysis::metrics::Metrics;
use crate::plan::{METRICS, RunPlan, percentile_word};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

/// The multi-turn block, flattened into the result's top level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiTurnResult {
    /// `"multi_turn"`, vllm-bench's.
    pub mode: super::sets::Mode,
    pub num_conversations: Option<u64>,
    /// `--multi-turn-num-turns` (vllm-bench writes it even with a min/max range).
    pub turns_per_conversation: u32,
    pub multi_turn_concurrency: Option<u32>,
    pub inter_turn_delay_ms: f64,
    /// surge: `fixed` or `exponential`.
    pub inter_turn_delay_dist: Dist,
    /// vllm-bench: true when a prefix ratio is set (turns send no history).
    pub no_history_accumulation: bool,
    pub conversations_completed: u64,
    /// Sessions ended by a failed turn.
    pub conversations_failed: u64,
    pub avg_turns_completed: f64,
    pub avg_conversation_duration_ms: f64,
    /// surge: sessions whose first turn was sent, those cut by the duration or a stop
    /// (neither completed nor failed), and turns never sent after a failure.
    pub conversations_started: u64,
    pub conversations_unfinished: u64,
    pub cancelled_turns: u64,
    /// surge: conversation duration and turns per conversation, as distributions.
    #[serde(flatten)]
    pub conversation_stats: Spread,
    /// Prefix cache: cached prompt tokens the server reported (`null`: it reported none).
    pub total_cached_tokens: Option<u64>,
    pub prompt_cache_hit_rate: Option<f64>,
    /// History tokens over input tokens: the most a prefix cache could reuse.
    pub history_token_fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_warning: Option<String>,
    pub per_turn_metrics: Vec<PerTurn>,
}

/// `mean_/median_/pNN_` of conversation duration (ms) and turns per conversation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spread {
    pub values: Vec<(String, f64)>,
}

/// Whether `key` is one of [`Spread`]'s.
fn spread_key(key: &str) -> bool {
    key.ends_with("_conversation_duration_ms") || key.ends_with("_turns_per_conversation")
}

impl<'de> Deserialize<'de> for Spread {
    /// Reads its keys back from the result's top level (other keys are left alone).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let all = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let mut values: Vec<(String, f64)> = all
            .into_iter()
            .filter(|(k, _)| spread_key(k) && k != "avg_conversation_duration_ms")
            .filter_map(|(k, v)| Some((k, v.as_f64()?)))
            .collect();
        // The order they are written in: duration then turns; mean, median, percentiles.
        let rank = |k: &str| {
            let stat = k.split('_').next().unwrap_or_default();
            let p = match stat {
                "mean" => -2.0,
                "median" => -1.0,
                p => p.trim_start_matches('p').parse::<f64>().unwrap_or(f64::MAX),
            };
            (k.ends_with("_turns_per_conversation"), p)
        };
        values.sort_by(|a, b| rank(&a.0).partial_cmp(&rank(&b.0)).unwrap_or(std::cmp::Ordering::Equal));
        Ok(Self { values })
    }
}

/// The multi-turn keys whose values are strings: not `--metadata` labels when a result is
/// read back.
pub const STRING_KEYS: [&str; 3] = ["mode", "inter_turn_delay_dist", "prompt_cache_warning"];

impl Serialize for Spread {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.values.len()))?;
        for (k, v) in &self.values {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// One turn index's metrics (vllm-bench's keys, then surge's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerTurn {
    pub turn_index: u32,
    pub num_samples: u64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub input_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    #[serde(flatten)]
    pub latency: Latencies,
    pub mean_input_tokens: f64,
    pub cached_tokens: Option<u64>,
    pub prompt_cache_hit_rate: Option<f64>,
    pub history_token_fraction: Option<f64>,
}

fn per_turn(i: usize, t: &Turn, duration_s: f64, ps: &[f64]) -> PerTurn {
    // vllm-bench divides every turn's counts by the whole run's duration.
    let per_s = |n: u64| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
    PerTurn {
        turn_index: i as u32,
        num_samples: t.completed + t.failed,
        completed: t.completed,
        failed: t.failed,
        total_input_tokens: t.input_tokens,
        total_output_tokens: t.output_tokens,
        request_throughput: per_s(t.completed),
        input_throughput: per_s(t.input_tokens),
        output_throughput: per_s(t.output_tokens),
        total_token_throughput: per_s(t.input_tokens + t.output_tokens),
        latency: Latencies(METRICS.iter().map(|k| MetricStats::of(k, t.dist(k), ps)).collect()),
        mean_input_tokens: if t.completed > 0 { t.input_tokens as f64 / t.completed as f64 } else { 0.0 },
        cached_tokens: (t.cached_rows > 0).then_some(t.cached_tokens),
        prompt_cache_hit_rate: t.hit_rate(),
        history_token_fraction: t.history_fraction(),
    }
}

fn spread(c: &Conversations, ps: &[f64]) -> Spread {
    let mut values = Vec::new();
    let d = &c.duration;
    values.push(("mean_conversation_duration_ms".into(), d.mean_ms()));
    values.push(("median_conversation_duration_ms".into(), d.median_ms()));
    for &p in ps {
        values.push((format!("p{}_conversation_duration_ms", percentile_word(p)), d.percentile_ms(p)));
    }
    // Turn counts were folded as "seconds": their ms readings are 1000 x the count.
    let t = &c.turns_per_conversation;
    values.push(("mean_turns_per_conversation".into(), t.mean_ms() / 1e3));
    values.push(("median_turns_per_conversation".into(), t.median_ms() / 1e3));
    for &p in ps {
        values.push((format!("p{}_turns_per_conversation", percentile_word(p)), t.percentile_ms(p) / 1e3));
    }
    Spread { values }
}

/// An agent loop's block (D65): its settings, what the replies did, per session and per
/// step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentLoopResult {
    pub tool_latency_ms: f64,
    /// `fixed` or `exponential`.
    pub tool_latency_dist: Dist,
    pub tool_result_len: u32,
    pub max_tool_steps: u32,
    /// Requests that were tool steps; replies that ended in tool calls; replies that
    /// answered (turns and steps alike).
    pub tool_steps: u64,
    pub tool_call_replies: u64,
    pub answers: u64,
    pub mean_tool_wait_ms: f64,
    /// Per ended session: tool steps, time waiting for tools, time in requests.
    pub sessions: u64,
    pub mean_steps_per_session: f64,
    pub mean_tool_time_per_session_ms: f64,
    pub mean_model_time_per_session_ms: f64,
    /// Step 0 is the user's message of each turn; step k its k-th tool step.
    pub per_step_metrics: Vec<PerTurn>,
}

/// A session trace's sub-agent graphs (D68): how many, the sub-agents' sessions and
/// requests, the widest fan-out, and `mean_/median_/std_/pNN_` of `graph_duration` (a
/// root's first start to the last end under it) and `critical_path` (the most request
/// time along one chain of dependent turns), in ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentGraphsResult {
    pub graphs: u64,
    pub sub_agent_sessions: u64,
    pub sub_agent_requests: u64,
    pub max_fan_out: u32,
    #[serde(flatten)]
    pub latency: Latencies,
}

/// The agent-loop block (`None` without `--tool-loop`).
pub fn agent_loop(plan: &RunPlan, m: &Metrics, ps: &[f64]) -> Option<AgentLoopResult> {
    let tl = plan.multi_turn.as_ref()?.tool_loop?;
    let empty = crate::analysis::agent_loop::AgentLoop::default();
    let a = m.agent_loop.as_ref().unwrap_or(&empty);
    Some(AgentLoopResult {
        tool_latency_ms: tl.latency_ms,
        tool_latency_dist: Dist::of(tl.exponential),
        tool_result_len: tl.result_len,
        max_tool_steps: tl.max_steps,
        tool_steps: a.tool_steps,
        tool_call_replies: a.tool_call_replies,
        answers: a.answers,
        mean_tool_wait_ms: a.tool_wait.mean_ms(),
        sessions: a.sessions,
        // Step counts were folded as "seconds": their ms readings are 1000 x the count.
        mean_steps_per_session: a.session_steps.mean_ms() / 1e3,
        mean_tool_time_per_session_ms: a.session_tool.mean_ms(),
        mean_model_time_per_session_ms: a.session_model.mean_ms(),
        per_step_metrics: a
            .steps
            .iter()
            .enumerate()
            .filter(|(_, t)| t.completed + t.failed > 0)
            .map(|(i, t)| per_turn(i, t, m.duration_s, ps))
            .collect(),
    })
}

/// The block of a multi-turn run (`None` for independent requests).
pub fn multi_turn(plan: &RunPlan, m: &Metrics, ps: &[f64]) -> Option<MultiTurnResult> {
    let mt = plan.multi_turn.as_ref()?;
    let empty = Conversations::new();
    let c = m.conversations.as_ref().unwrap_or(&empty);
    let all = &c.all;
    Some(MultiTurnResult {
        mode: super::sets::Mode::MultiTurn,
        num_conversations: (plan.num_prompts != crate::plan::UNBOUNDED).then_some(plan.num_prompts),
        turns_per_conversation: mt.num_turns,
        multi_turn_concurrency: mt.concurrency,
        inter_turn_delay_ms: mt.delay_ms,
        inter_turn_delay_dist: Dist::of(mt.exponential),
        no_history_accumulation: mt.prefix_global_ratio > 0.0 || mt.prefix_conversation_ratio > 0.0,
        conversations_completed: c.completed,
        conversations_failed: c.failed,
        avg_turns_completed: c.avg_turns(),
        avg_conversation_duration_ms: c.duration.mean_ms(),
        conversations_started: c.started,
        conversations_unfinished: c.started.saturating_sub(c.ended()),
        cancelled_turns: c.cancelled_turns,
        conversation_stats: spread(c, ps),
        total_cached_tokens: c.total_cached_tokens(),
        prompt_cache_hit_rate: all.hit_rate(),
        history_token_fraction: all.history_fraction(),
        prompt_cache_warning: c.cache_warning(),
        per_turn_metrics: c
            .turns
            .iter()
            .enumerate()
            .filter(|(_, t)| t.completed + t.failed > 0)
            .map(|(i, t)| per_turn(i, t, m.duration_s, ps))
            .collect(),
    })
}
