//! `surge run`'s flags, "Conversations": multi-turn sessions (vllm-bench's `--multi-turn`
//! flags, AIPerf's shared system prompt), and their check into a [`MultiTurnPlan`].

use super::{UsageError, parse};
use crate::plan::{MultiTurnPlan, ToolLoopPlan};
use clap::Args;

/// How a session waits before each turn after its first.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayDistArg {
    /// Exactly --multi-turn-delay-ms.
    Fixed,
    /// Exponential with mean --multi-turn-delay-ms (seeded per session and turn).
    Exponential,
}

/// `surge run`'s flags, "Conversations".
#[derive(Debug, Clone, Args)]
pub struct ConversationArgs {
    /// Send conversations: each of --num-prompts sessions runs its turns one after
    /// another on one agent, every turn resending the history (earlier messages and the
    /// server's replies as streamed). A timed trace whose lines carry session_id is one
    /// without this flag.
    #[arg(long = "multi-turn")]
    pub multi_turn: bool,
    /// Turns per session (vllm-bench's default: 3).
    #[arg(long = "multi-turn-num-turns", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub num_turns: Option<u32>,
    /// Turns per session drawn uniformly from MIN..=MAX (one left out: --multi-turn-num-turns).
    #[arg(long = "multi-turn-min-turns", value_name = "MIN", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_turns: Option<u32>,
    #[arg(long = "multi-turn-max-turns", value_name = "MAX", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_turns: Option<u32>,
    /// Sessions open at once, each holding its slot through its think time (default:
    /// --max-concurrency); --max-concurrency still bounds requests in flight. For
    /// `surge sweep`, a list of levels (e.g. 10,100,1000).
    #[arg(long = "multi-turn-concurrency", value_parser = parse::level_list, value_name = "N")]
    pub session_concurrency: Option<parse::Levels>,
    /// Think time before each turn after the first, from the end of the previous one.
    #[arg(long = "multi-turn-delay-ms", default_value_t = 0.0, value_parser = parse::millis, value_name = "MS")]
    pub delay_ms: f64,
    #[arg(long = "multi-turn-delay-dist", value_enum, default_value = "fixed", value_name = "DIST")]
    pub delay_dist: DelayDistArg,
    /// New tokens of each turn after the first (default: --random-input-len).
    #[arg(long = "per-turn-input-len", value_parser = parse::tokens, value_name = "TOKENS")]
    pub per_turn_input_len: Option<u32>,
    /// vllm-bench's prefix sharing: this fraction of the first turn's input is the same in
    /// every session; with either ratio, turns send no history.
    #[arg(long = "multi-turn-prefix-global-ratio", default_value_t = 0.0, value_name = "R")]
    pub prefix_global_ratio: f64,
    /// ...and this fraction the same in every turn of a session.
    #[arg(long = "multi-turn-prefix-conversation-ratio", default_value_t = 0.0, value_name = "R")]
    pub prefix_conversation_ratio: f64,
    /// One system prompt of this many tokens, the same in every session.
    #[arg(long = "shared-system-prompt-len", default_value_t = 0, value_parser = parse::tokens, value_name = "TOKENS")]
    pub shared_system_prompt_len: u32,
    /// The header that carries `<request-id-prefix>conv-<session>` on every turn.
    #[arg(long = "session-id-header", default_value = "X-Session-ID", value_name = "NAME")]
    pub session_id_header: String,
    #[arg(long = "no-session-id-header")]
    pub no_session_id_header: bool,
    /// Agent loops (chat): a reply that ends in tool calls is followed, after the tool's
    /// latency, by a step that sends the calls and one `tool` message per call with a
    /// generated result, until a reply answers or --max-tool-steps steps were sent; then
    /// the session's next turn. Give the model tools with --tools.
    #[arg(long = "tool-loop")]
    pub tool_loop: bool,
    /// The tool's latency before each step, from the end of the reply that called it.
    #[arg(long = "tool-latency-ms", default_value_t = 0.0, value_parser = parse::millis, value_name = "MS")]
    pub tool_latency_ms: f64,
    /// Exactly --tool-latency-ms, or exponential with that mean (seeded per session, turn
    /// and step).
    #[arg(long = "tool-latency-dist", value_enum, default_value = "fixed", value_name = "DIST")]
    pub tool_latency_dist: DelayDistArg,
    /// Tokens of each generated tool result.
    #[arg(long = "tool-result-len", default_value_t = 32, value_parser = parse::tokens, value_name = "TOKENS")]
    pub tool_result_len: u32,
    /// Tool steps per turn at most (a reply still calling tools after them ends the turn).
    #[arg(long = "max-tool-steps", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "N")]
    pub max_tool_steps: u32,
}

fn usage<T>(m: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(m.into()))
}

impl ConversationArgs {
    /// Whether any conversation flag was given a value of its own.
    fn any_set(&self) -> Option<&'static str> {
        [
            (self.num_turns.is_some(), "--multi-turn-num-turns"),
            (self.min_turns.is_some(), "--multi-turn-min-turns"),
            (self.max_turns.is_some(), "--multi-turn-max-turns"),
            (self.session_concurrency.is_some(), "--multi-turn-concurrency"),
            (self.delay_ms != 0.0, "--multi-turn-delay-ms"),
            (self.delay_dist != DelayDistArg::Fixed, "--multi-turn-delay-dist"),
            (self.per_turn_input_len.is_some(), "--per-turn-input-len"),
            (self.prefix_global_ratio != 0.0, "--multi-turn-prefix-global-ratio"),
            (self.prefix_conversation_ratio != 0.0, "--multi-turn-prefix-conversation-ratio"),
            (self.shared_system_prompt_len != 0, "--shared-system-prompt-len"),
            (self.no_session_id_header, "--no-session-id-header"),
            (self.tool_loop, "--tool-loop"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// The conversations of a run, or `None`; `session_trace`: the dataset is a timed trace
/// whose lines carry `session_id` (then it is one, flag or not). Every flag that would
/// have no effect is refused by name.
pub fn multi_turn_plan(
    a: &ConversationArgs,
    dataset: &str,
    session_trace: bool,
    max_concurrency: Option<u32>,
) -> Result<Option<MultiTurnPlan>, UsageError> {
    if !a.multi_turn && !session_trace {
        if let Some(flag) = a.any_set() {
            return usage(format!("{flag}: only meaningful with --multi-turn"));
        }
        return Ok(None);
    }
    if dataset == "timed_trace" && !session_trace {
        return usage("--multi-turn with a timed trace: its lines need a session_id (AIPerf's session traces)");
    }
    if !matches!(dataset, "random" | "timed_trace" | "sharegpt") {
        return usage(format!(
            "--multi-turn: --dataset-name {dataset} has no conversations (random, sharegpt or a session trace)"
        ));
    }
    let generated = dataset == "random";
    let trace = dataset == "timed_trace";
    // What a file's conversations set themselves (a ShareGPT file: its turns and their
    // lengths; a trace: its times too).
    for (set, flag, applies) in [
        (a.num_turns.is_some() || a.min_turns.is_some(), "--multi-turn-num-turns/--multi-turn-min-turns", !generated),
        (a.max_turns.is_some(), "--multi-turn-max-turns", trace),
        (a.delay_ms != 0.0 || a.delay_dist != DelayDistArg::Fixed, "--multi-turn-delay-*", trace),
        (a.per_turn_input_len.is_some(), "--per-turn-input-len", !generated),
        (a.prefix_global_ratio != 0.0 || a.prefix_conversation_ratio != 0.0, "--multi-turn-prefix-*-ratio", !generated),
        (a.shared_system_prompt_len != 0, "--shared-system-prompt-len", !generated),
    ] {
        if set && applies {
            return usage(format!("{flag}: --dataset-name {dataset} sets the turns of its conversations"));
        }
    }
    // vllm-bench's rule: an absent end of the range is --multi-turn-num-turns.
    let n = a.num_turns.unwrap_or(3);
    // A file's conversations have their own turns: --multi-turn-max-turns only caps them.
    let (lo, hi) = if generated {
        (a.min_turns.unwrap_or(n), a.max_turns.unwrap_or(n))
    } else {
        (1, a.max_turns.unwrap_or(surge_proto::MAX_TURNS))
    };
    let most = surge_proto::MAX_TURNS;
    if lo > hi || hi > most {
        return usage(format!("--multi-turn-min-turns {lo} / --multi-turn-max-turns {hi}: need MIN <= MAX <= {most}"));
    }
    let ratios = [a.prefix_global_ratio, a.prefix_conversation_ratio];
    if ratios.iter().any(|r| !(0.0..=1.0).contains(r)) || ratios.iter().sum::<f64>() >= 1.0 {
        return usage("--multi-turn-prefix-*-ratio: each within 0..=1 and their sum below 1");
    }
    let concurrency = match a.session_concurrency.as_ref().map(|l| l.0.as_slice()) {
        None => None,
        Some([c]) => Some(*c),
        Some(_) => {
            return usage("--multi-turn-concurrency: surge run takes one number (lists of levels are for surge sweep)");
        }
    };
    let tool_loop = tool_loop_plan(a, generated, trace)?;
    let header = if a.no_session_id_header { None } else { Some(a.session_id_header.clone()) };
    if let Some(h) = &header {
        if http::HeaderName::try_from(h.as_str()).is_err() {
            return usage(format!("--session-id-header {h:?}: not an HTTP header name"));
        }
        // Headers the client writes itself: one given here was silently not sent.
        if ["content-length", "transfer-encoding", "host", "connection"].iter().any(|f| h.eq_ignore_ascii_case(f)) {
            return usage(format!("--session-id-header {h:?}: surge writes this header itself"));
        }
    }
    Ok(Some(MultiTurnPlan {
        generated,
        num_turns: n,
        turns_min: lo,
        turns_max: hi,
        per_turn_input_len: a.per_turn_input_len.unwrap_or(0),
        delay_ms: a.delay_ms,
        exponential: a.delay_dist == DelayDistArg::Exponential,
        concurrency: concurrency.or(max_concurrency),
        prefix_global_ratio: a.prefix_global_ratio,
        prefix_conversation_ratio: a.prefix_conversation_ratio,
        shared_system_prompt_len: a.shared_system_prompt_len,
        session_header: header,
        tool_loop,
    }))
}

/// `--tool-loop` and its settings: steps need the live history (generated turns without
/// prefix ratios, or a file's conversations), not a trace's recorded prompts.
fn tool_loop_plan(a: &ConversationArgs, generated: bool, trace: bool) -> Result<Option<ToolLoopPlan>, UsageError> {
    if !a.tool_loop {
        return Ok(None);
    }
    if trace {
        return usage("--tool-loop: a session trace's turns carry their own prompts; steps need the live history");
    }
    if generated && (a.prefix_global_ratio != 0.0 || a.prefix_conversation_ratio != 0.0) {
        return usage("--tool-loop: with --multi-turn-prefix-*-ratio turns send no history; steps need it");
    }
    Ok(Some(ToolLoopPlan {
        latency_ms: a.tool_latency_ms,
        exponential: a.tool_latency_dist == DelayDistArg::Exponential,
        result_len: a.tool_result_len,
        max_steps: a.max_tool_steps,
    }))
}
