//! The turns of generated conversations (`--multi-turn` with the `random` dataset), each a
//! pure function of the spec, the session's global index and the turn, so every agent
//! makes exactly its own sessions and nothing is built ahead.
//!
//! - How many turns session `s` has: uniform in `[turns_min, turns_max]`, drawn from the
//!   seed and `s`.
//! - Turn 0's user message has the dataset's input length (`--random-input-len`, with
//!   `--random-range-ratio` and `--random-prefix-len` as for single requests); later turns
//!   `per_turn_input_len` new tokens.
//! - With vllm-bench's prefix ratios, each message is a part shared by every session
//!   (`floor(len * global)` tokens), a part shared by the session's turns
//!   (`floor(len * conversation)`), then the turn's own; the lengths come from turn 0's
//!   input length, as vllm-bench computes them.
//! - `--shared-system-prompt-len L`: one system prompt of L tokens for every session.
//! - Think time before turn `t > 0`: the delay, or an exponential draw with that mean
//!   from the seed, `s` and `t`.

use super::dataset::{self, Prompt};
use super::tokenizer::Tok;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::time::Duration;
use surge_proto::{DatasetSpec, MultiTurn, ThinkTime, TokenSource, ToolLoop};

const TURNS_SALT: u64 = 0x5455_524e_5300_0001;
const THINK_SALT: u64 = 0x5448_494e_4b00_0001;
const GLOBAL_SALT: u64 = 0x474c_4f42_414c_0001;
const CONVERSATION_SALT: u64 = 0x434f_4e56_0000_0001;
const SYSTEM_SALT: u64 = 0x5359_5354_454d_0001;
const TURN_SALT: u64 = 0x5455_524e_0000_0002;
const TOOL_SALT: u64 = 0x544f_4f4c_0000_0001;
const RESULT_SALT: u64 = 0x5245_5355_4c54_0001;

/// Turns of session `s`.
pub fn turns(spec: &DatasetSpec, mt: &MultiTurn, s: u64) -> u32 {
    let (lo, hi) = (mt.turns_min.max(1), mt.turns_max.max(mt.turns_min.max(1)));
    if lo == hi {
        return lo;
    }
    SmallRng::seed_from_u64(dataset::mix(spec.seed ^ TURNS_SALT, s)).random_range(lo..=hi)
}

/// The longest wait a plan can give an agent (a think time, a tool's latency, a trace's
/// delay): a year (366 days). Longer ones would overflow the clock they are added to;
/// the coordinator refuses them, and an agent caps what another one sent.
pub const LONGEST_WAIT: Duration = Duration::from_secs(366 * 86_400);

/// `secs` as a wait: none for a value that is not above 0 (NaN included), at most
/// [`LONGEST_WAIT`].
pub fn wait(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).map_or(LONGEST_WAIT, |d| d.min(LONGEST_WAIT))
}

/// The think time before turn `t` (> 0) of session `s`.
pub fn think(spec: &DatasetSpec, mt: &MultiTurn, s: u64, t: u32) -> Duration {
    let mean_s = (mt.delay_ms / 1e3).max(0.0);
    let secs = match mt.think() {
        ThinkTime::Exponential if mean_s > 0.0 => {
            let bits = dataset::mix(spec.seed ^ THINK_SALT, s.wrapping_mul(1 << 20) ^ u64::from(t));
            let u = (bits >> 11) as f64 / (1u64 << 53) as f64;
            -mean_s * (1.0 - u).ln()
        }
        _ => mean_s,
    };
    wait(secs)
}

/// An agent loop's tool latency before step `step` (>= 1) of turn `t` of session `s`:
/// the latency, or an exponential draw with that mean from the seed, `s`, `t` and `step`.
pub fn tool_latency(spec: &DatasetSpec, tl: &ToolLoop, s: u64, t: u32, step: u32) -> Duration {
    let mean_s = (tl.latency_ms / 1e3).max(0.0);
    let secs = match tl.latency() {
        ThinkTime::Exponential if mean_s > 0.0 => {
            let at = s.wrapping_mul(1 << 20) ^ (u64::from(t) << 8) ^ u64::from(step);
            let u = (dataset::mix(spec.seed ^ TOOL_SALT, at) >> 11) as f64 / (1u64 << 53) as f64;
            -mean_s * (1.0 - u).ln()
        }
        _ => mean_s,
    };
    wait(secs)
}

/// The generated result of call `call` of step `step` of turn `t` of session `s`:
/// `tl.result_len` tokens.
pub fn tool_result(
    spec: &DatasetSpec,
    tl: &ToolLoop,
    tok: Option<&Tok>,
    s: u64,
    t: u32,
    step: u32,
    call: u32,
) -> Prompt {
    let at = s.wrapping_mul(1 << 20) ^ (u64::from(t) << 12) ^ (u64::from(step) << 6) ^ u64::from(call);
    words(tok, dataset::mix(spec.seed ^ RESULT_SALT, at), tl.result_len, 0)
}

/// The shared system prompt, if asked for.
pub fn system_prompt(spec: &DatasetSpec, mt: &MultiTurn, tok: Option<&Tok>) -> Option<Prompt> {
    let n = mt.shared_system_prompt_len;
    (n > 0).then(|| words(tok, dataset::mix(spec.seed ^ SYSTEM_SALT, 0), n, 0))
}

/// Whether each turn sends only its own message (vllm-bench: any prefix ratio set).
pub fn without_history(mt: &MultiTurn) -> bool {
    mt.prefix_global_ratio > 0.0 || mt.prefix_conversation_ratio > 0.0
}

/// The user message of turn `t` of session `s` (its `output_tokens` is the turn's
/// `max_tokens`).
pub fn user_message(spec: &DatasetSpec, mt: &MultiTurn, tok: Option<&Tok>, s: u64, t: u32) -> Prompt {
    // Turn 0 is the session's request of the single-turn dataset; its lengths set the
    // prefix parts.
    if !without_history(mt) {
        if t == 0 {
            return dataset::build(spec, tok, s);
        }
        let n = if mt.per_turn_input_len > 0 { mt.per_turn_input_len } else { spec.random_input_len };
        return words(tok, dataset::mix(spec.seed ^ TURN_SALT, turn_key(s, t)), n, output_len(spec, s, t));
    }
    let first = dataset::build(spec, tok, s);
    let output = if t == 0 { first.output_tokens } else { output_len(spec, s, t) };
    let len = f64::from(first.input_tokens);
    let global = (len * mt.prefix_global_ratio).floor() as u32;
    let conversation = (len * mt.prefix_conversation_ratio).floor() as u32;
    let total = if t == 0 || mt.per_turn_input_len == 0 { first.input_tokens } else { mt.per_turn_input_len };
    let own = total.saturating_sub(global + conversation).max(1);
    let parts = [
        words(tok, dataset::mix(spec.seed ^ GLOBAL_SALT, 0), global, 0),
        words(tok, dataset::mix(spec.seed ^ CONVERSATION_SALT, s), conversation, 0),
        words(tok, dataset::mix(spec.seed ^ TURN_SALT, turn_key(s, t)), own, 0),
    ];
    let text = parts.iter().filter(|p| !p.text.is_empty()).map(|p| p.text.as_str()).collect::<Vec<_>>().join(" ");
    let (input_tokens, input_source) = match tok {
        Some(_) => dataset::count(tok, &text),
        None => (global + conversation + own, TokenSource::ClientEstimate),
    };
    Prompt { text, input_tokens, output_tokens: output, input_source, messages_json: String::new() }
}

/// `--random-output-len` for a later turn (with the range ratio, drawn per turn).
fn output_len(spec: &DatasetSpec, s: u64, t: u32) -> u32 {
    let probe = DatasetSpec { random_input_len: 1, random_prefix_len: 0, ..spec.clone() };
    dataset::build(&probe, None, turn_key(s, t) ^ (1 << 63)).output_tokens
}

fn turn_key(s: u64, t: u32) -> u64 {
    s.wrapping_mul(1 << 20) ^ u64::from(t)
}

/// `n` random tokens (words without a tokenizer) from `seed`.
fn words(tok: Option<&Tok>, seed: u64, n: u32, output: u32) -> Prompt {
    let spec = DatasetSpec {
        kind: surge_proto::DatasetKind::Random as i32,
        seed,
        random_input_len: n,
        random_output_len: output,
        ..Default::default()
    };
    if n == 0 {
        return Prompt {
            text: String::new(),
            input_tokens: 0,
            output_tokens: output,
            input_source: TokenSource::ClientEstimate,
            messages_json: String::new(),
        };
    }
    dataset::build(&spec, tok, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DatasetSpec {
        DatasetSpec {
            kind: surge_proto::DatasetKind::Random as i32,
            seed: 3,
            random_input_len: 20,
            random_output_len: 5,
            ..Default::default()
        }
    }

    fn mt() -> MultiTurn {
        MultiTurn {
            turns_min: 2,
            turns_max: 6,
            per_turn_input_len: 7,
            think: ThinkTime::Fixed as i32,
            ..Default::default()
        }
    }

    #[test]
    fn turn_counts_cover_the_range_and_repeat() {
        let (d, m) = (spec(), mt());
        let counts: Vec<u32> = (0..500).map(|s| turns(&d, &m, s)).collect();
        assert!(counts.iter().all(|c| (2..=6).contains(c)));
        assert!(counts.contains(&2) && counts.contains(&6), "both ends drawn");
        assert_eq!(counts, (0..500).map(|s| turns(&d, &m, s)).collect::<Vec<_>>());
        let fixed = MultiTurn { turns_min: 4, turns_max: 4, ..m };
        assert_eq!(turns(&d, &fixed, 9), 4);
    }

    #[test]
    fn later_turns_have_their_own_length_and_text() {
        let (d, m) = (spec(), mt());
        let first = user_message(&d, &m, None, 4, 0);
        assert_eq!((first.input_tokens, first.output_tokens), (20, 5));
        assert_eq!(first, dataset::build(&d, None, 4), "turn 0 is the dataset's request");
        let (a, b) = (user_message(&d, &m, None, 4, 1), user_message(&d, &m, None, 4, 2));
        assert_eq!((a.input_tokens, a.text.split_whitespace().count()), (7, 7));
        assert_ne!(a.text, b.text);
        assert_eq!(a, user_message(&d, &m, None, 4, 1), "a pure function");
    }

    #[test]
    fn prefix_ratios_share_parts_across_and_within_sessions() {
        let d = spec();
        let m = MultiTurn { prefix_global_ratio: 0.25, prefix_conversation_ratio: 0.5, ..mt() };
        assert!(without_history(&m));
        let w = |s, t| user_message(&d, &m, None, s, t).text.split(' ').map(String::from).collect::<Vec<_>>();
        let (a0, a1, b0) = (w(1, 0), w(1, 1), w(2, 0));
        assert_eq!(a0.len(), 20);
        assert_eq!(a0[..5], b0[..5], "the global part (floor(20 * 0.25))");
        assert_eq!(a0[..15], a1[..15], "global and conversation parts");
        assert_ne!(a0[5..15], b0[5..15], "each session's own part");
        assert_eq!(a1.len(), 15 + 1, "per-turn length 7 minus the shared 15: at least one own token");
    }

    #[test]
    fn think_time_is_fixed_or_exponential_with_its_mean() {
        let d = spec();
        let fixed = MultiTurn { delay_ms: 250.0, ..mt() };
        assert_eq!(think(&d, &fixed, 1, 1), Duration::from_millis(250));
        let exp = MultiTurn { think: ThinkTime::Exponential as i32, ..fixed };
        let n = 20_000u64;
        let mean = (0..n).map(|s| think(&d, &exp, s, 1).as_secs_f64()).sum::<f64>() / n as f64;
        assert!((mean - 0.25).abs() < 0.01, "{mean}");
        assert_eq!(think(&d, &exp, 7, 3), think(&d, &exp, 7, 3));
    }

    #[test]
    fn a_wait_past_a_year_waits_a_year() {
        // 1e22 ms converts to a Duration but overflowed the Instant it was added to.
        let d = spec();
        let long = MultiTurn { delay_ms: 1e22, ..mt() };
        assert_eq!(think(&d, &long, 1, 1), LONGEST_WAIT);
        let exp = MultiTurn { think: ThinkTime::Exponential as i32, ..long };
        assert!((0..100).all(|s| think(&d, &exp, s, 1) <= LONGEST_WAIT));
        assert!(std::time::Instant::now().checked_add(LONGEST_WAIT * 2).is_some());
        assert_eq!((wait(1.5), wait(f64::INFINITY)), (Duration::from_millis(1500), LONGEST_WAIT));
        assert_eq!((wait(f64::NAN), wait(-1.0), wait(-0.0)), (Duration::ZERO, Duration::ZERO, Duration::ZERO));
    }
}
