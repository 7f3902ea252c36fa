//! Deterministic fault selection.
//!
//! Whether completion request number `i` (0-based, counted per server) gets a
//! fault of a given kind depends only on the seed, `i` and the kind: a
//! SplitMix64 hash of the three gives a uniform number in [0, 1) that is
//! compared with the kind's rate. The same seed therefore replays the same
//! faults on the same request numbers.

use crate::config::EchoConfig;

/// What goes wrong with one completion request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FaultPlan {
    /// Drop the connection before any response.
    pub reset: bool,
    /// Answer 500 with a JSON error body.
    pub error_500: bool,
    /// Extra delay before the first token, milliseconds (0: none).
    pub stall_ms: f64,
    /// (Streams only) one event's data is not valid JSON.
    pub malformed: bool,
    /// (Streams only) cut the stream off without `[DONE]`.
    pub truncate: bool,
    /// (Streams only) anomalies, not failures (D70): no `finish_reason` on the last
    /// chunk; a usage count one above the tokens sent; an answer ended with `stop` at half
    /// its length although the request asked for `max_tokens` (and `ignore_eos`).
    pub drop_finish: bool,
    pub usage_mismatch: bool,
    pub early_eos: bool,
    /// The stream says nothing: its finish with empty text, usage 0 (`--empty-reply-rate`).
    pub empty: bool,
    /// The reply names another request (its id: the request's x-request-id changed).
    pub misdirect: bool,
}

const SALT_RESET: u64 = 0x5245_5345_5400_0001;
const SALT_500: u64 = 0x3530_3000_0000_0002;
const SALT_STALL: u64 = 0x5354_414c_4c00_0003;
const SALT_MALFORMED: u64 = 0x4d41_4c46_4f52_0004;
const SALT_TRUNCATE: u64 = 0x5452_554e_4300_0005;
/// Salt for the per-request jitter RNG seed (see `schedule`).
pub(crate) const SALT_JITTER: u64 = 0x4a49_5454_4552_0006;
const SALT_TOOL: u64 = 0x544f_4f4c_0000_0008;
const SALT_FINISH: u64 = 0x4649_4e49_5348_0009;
const SALT_USAGE: u64 = 0x5553_4147_4500_000a;
const SALT_EOS: u64 = 0x454f_5300_0000_000b;
const SALT_WRONG: u64 = 0x5752_4f4e_4700_000c;
const SALT_MISDIRECT: u64 = 0x4d49_5344_4952_000d;
const SALT_EMPTY: u64 = 0x454d_5054_5900_000e;

/// Whether question request `index` is answered wrong (`--wrong-answer-rate`).
pub(crate) fn wrong_answer(config: &EchoConfig, index: u64) -> bool {
    hit(config.seed, index, SALT_WRONG, config.wrong_answer_rate)
}

/// Whether chat request `index` is answered with a tool call (`--tool-call`, or a seeded
/// draw at `--tool-call-rate`).
pub(crate) fn tool_call(config: &EchoConfig, index: u64) -> bool {
    config.tool_call
        || (config.tool_call_rate > 0.0 && unit(mix(config.seed, index, SALT_TOOL)) < config.tool_call_rate)
}

impl FaultPlan {
    /// The faults of completion request number `index`.
    pub fn for_request(config: &EchoConfig, index: u64) -> Self {
        let seed = config.seed;
        let stall_ms = match config.fault_stall_ms {
            Some(ms) if hit(seed, index, SALT_STALL, config.fault_stall_rate) => ms,
            _ => 0.0,
        };
        Self {
            reset: hit(seed, index, SALT_RESET, config.fault_reset_rate),
            error_500: hit(seed, index, SALT_500, config.fault_500_rate),
            stall_ms,
            malformed: hit(seed, index, SALT_MALFORMED, config.fault_malformed_rate),
            truncate: hit(seed, index, SALT_TRUNCATE, config.fault_truncate_rate),
            drop_finish: hit(seed, index, SALT_FINISH, config.drop_finish_reason_rate),
            usage_mismatch: hit(seed, index, SALT_USAGE, config.usage_mismatch_rate),
            early_eos: hit(seed, index, SALT_EOS, config.early_eos_rate),
            empty: hit(seed, index, SALT_EMPTY, config.empty_reply_rate),
            misdirect: hit(seed, index, SALT_MISDIRECT, config.misdirect_rate),
        }
    }
}

/// Token index (0-based) whose event is malformed in a stream of `n` tokens.
pub(crate) fn malformed_index(n: u64) -> u64 {
    n / 4
}

/// Tokens of a stream of `n` that an early EOS ends after (`--early-eos-rate`).
pub(crate) fn early_eos_after(n: u64) -> u64 {
    (n / 2).max(1)
}

/// Number of token events sent before a truncated stream of `n` tokens is cut.
pub(crate) fn truncate_after(n: u64) -> u64 {
    (n / 2).max(1)
}

fn hit(seed: u64, index: u64, salt: u64, rate: f64) -> bool {
    rate > 0.0 && unit(mix(seed, index, salt)) < rate
}

/// Hash seed, request index and salt into 64 well-mixed bits.
pub(crate) fn mix(seed: u64, index: u64, salt: u64) -> u64 {
    splitmix64(splitmix64(seed ^ salt) ^ index)
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) from the top 53 bits.
pub(crate) fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rate: f64) -> EchoConfig {
        EchoConfig {
            fault_500_rate: rate,
            fault_reset_rate: rate,
            fault_malformed_rate: rate,
            fault_truncate_rate: rate,
            fault_stall_ms: Some(5.0),
            fault_stall_rate: rate,
            drop_finish_reason_rate: rate,
            usage_mismatch_rate: rate,
            early_eos_rate: rate,
            empty_reply_rate: rate,
            misdirect_rate: rate,
            ..EchoConfig::default()
        }
    }

    #[test]
    fn rate_zero_never_and_one_always() {
        for i in 0..1000 {
            assert_eq!(FaultPlan::for_request(&config(0.0), i), FaultPlan::default());
            let p = FaultPlan::for_request(&config(1.0), i);
            assert!(p.reset && p.error_500 && p.malformed && p.truncate);
            assert!(p.drop_finish && p.usage_mismatch && p.early_eos && p.empty);
            assert_eq!(p.stall_ms, 5.0);
        }
    }

    #[test]
    fn deterministic_and_near_rate() {
        let c = config(0.25);
        let a: Vec<_> = (0..4000).map(|i| FaultPlan::for_request(&c, i)).collect();
        let b: Vec<_> = (0..4000).map(|i| FaultPlan::for_request(&c, i)).collect();
        assert_eq!(a, b);
        let hits = a.iter().filter(|p| p.error_500).count();
        assert!((800..1200).contains(&hits), "{hits}");
        // Kinds are drawn independently.
        let both = a.iter().filter(|p| p.error_500 && p.reset).count();
        assert!(both < 400, "{both}");
        // Another seed gives other faults.
        let other = EchoConfig { seed: 7, ..c };
        let o: Vec<_> = (0..4000).map(|i| FaultPlan::for_request(&other, i)).collect();
        assert_ne!(a, o);
    }

    #[test]
    fn fault_positions() {
        assert_eq!(malformed_index(1), 0);
        assert_eq!(malformed_index(16), 4);
        assert_eq!(truncate_after(1), 1);
        assert_eq!(truncate_after(16), 8);
    }

    #[test]
    fn unit_is_in_range() {
        assert_eq!(unit(0), 0.0);
        assert!(unit(u64::MAX) < 1.0);
    }
}
