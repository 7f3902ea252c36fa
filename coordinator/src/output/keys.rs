//! A result's numbers by the names users give them (`--fail-if p99_ttft_ms>+5%`, the
//! rows of `surge compare`): each name is parsed once into a closed set, [`Key`], and
//! read from the typed result; a name that is no key is refused when it is given.

use super::latencies::Latencies;
use super::result::RunResult;

/// A statistic of a latency metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stat {
    Mean,
    Median,
    Std,
    /// A percentile (`p99.9` is 99.9).
    P(f64),
}

/// A number of the whole run, as vLLM's and surge's result keys name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    Completed,
    Failed,
    Cancelled,
    Duration,
    TotalInputTokens,
    TotalOutputTokens,
    RequestThroughput,
    RequestGoodput,
    OutputThroughput,
    TotalTokenThroughput,
    MaxOutputTokensPerS,
    MaxConcurrentRequests,
    PeakInFlight,
    InputSequenceThroughput,
    Rtfx,
    CostPerMillionOutputTokens,
    CostPerMillionTotalTokens,
    EnergyPerOutputTokenJ,
    EnergyPerRequestJ,
    OutputTokensPerJoule,
    AverageGpuPowerW,
    ConversationsCompleted,
    ConversationsFailed,
    AvgTurnsCompleted,
    AvgConversationDurationMs,
    PromptCacheHitRate,
}

/// Each scalar's key in a result file.
const SCALARS: [(&str, Scalar); 26] = [
    ("completed", Scalar::Completed),
    ("failed", Scalar::Failed),
    ("cancelled", Scalar::Cancelled),
    ("duration", Scalar::Duration),
    ("total_input_tokens", Scalar::TotalInputTokens),
    ("total_output_tokens", Scalar::TotalOutputTokens),
    ("request_throughput", Scalar::RequestThroughput),
    ("request_goodput", Scalar::RequestGoodput),
    ("output_throughput", Scalar::OutputThroughput),
    ("total_token_throughput", Scalar::TotalTokenThroughput),
    ("max_output_tokens_per_s", Scalar::MaxOutputTokensPerS),
    ("max_concurrent_requests", Scalar::MaxConcurrentRequests),
    ("peak_in_flight", Scalar::PeakInFlight),
    ("input_sequence_throughput", Scalar::InputSequenceThroughput),
    ("rtfx", Scalar::Rtfx),
    ("cost_per_million_output_tokens", Scalar::CostPerMillionOutputTokens),
    ("cost_per_million_total_tokens", Scalar::CostPerMillionTotalTokens),
    ("energy_per_output_token_j", Scalar::EnergyPerOutputTokenJ),
    ("energy_per_request_j", Scalar::EnergyPerRequestJ),
    ("output_tokens_per_joule", Scalar::OutputTokensPerJoule),
    ("average_gpu_power_w", Scalar::AverageGpuPowerW),
    ("conversations_completed", Scalar::ConversationsCompleted),
    ("conversations_failed", Scalar::ConversationsFailed),
    ("avg_turns_completed", Scalar::AvgTurnsCompleted),
    ("avg_conversation_duration_ms", Scalar::AvgConversationDurationMs),
    ("prompt_cache_hit_rate", Scalar::PromptCacheHitRate),
];

impl Scalar {
    fn of(self, r: &RunResult) -> Option<f64> {
        let mt = r.multi_turn.as_ref();
        let v = match self {
            Scalar::Completed => r.completed as f64,
            Scalar::Failed => r.failed as f64,
            Scalar::Cancelled => r.cancelled as f64,
            Scalar::Duration => r.duration,
            Scalar::TotalInputTokens => r.total_input_tokens as f64,
            Scalar::TotalOutputTokens => r.total_output_tokens as f64,
            Scalar::RequestThroughput => r.request_throughput,
            Scalar::RequestGoodput => r.request_goodput?,
            Scalar::OutputThroughput => r.output_throughput,
            Scalar::TotalTokenThroughput => r.total_token_throughput,
            Scalar::MaxOutputTokensPerS => r.max_output_tokens_per_s,
            Scalar::MaxConcurrentRequests => r.max_concurrent_requests,
            Scalar::PeakInFlight => r.peak_in_flight?,
            Scalar::InputSequenceThroughput => r.input_sequence_throughput?,
            Scalar::Rtfx => r.rtfx,
            Scalar::CostPerMillionOutputTokens => r.cost_per_million_output_tokens?,
            Scalar::CostPerMillionTotalTokens => r.cost_per_million_total_tokens?,
            Scalar::EnergyPerOutputTokenJ => r.energy_per_output_token_j?,
            Scalar::EnergyPerRequestJ => r.energy_per_request_j?,
            Scalar::OutputTokensPerJoule => r.output_tokens_per_joule?,
            Scalar::AverageGpuPowerW => r.average_gpu_power_w?,
            Scalar::ConversationsCompleted => mt?.conversations_completed as f64,
            Scalar::ConversationsFailed => mt?.conversations_failed as f64,
            Scalar::AvgTurnsCompleted => mt?.avg_turns_completed,
            Scalar::AvgConversationDurationMs => mt?.avg_conversation_duration_ms,
            Scalar::PromptCacheHitRate => mt?.prompt_cache_hit_rate?,
        };
        v.is_finite().then_some(v)
    }
}

/// A number a result may hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Key {
    Scalar(Scalar),
    /// `{mean,median,std,pN}_{metric}_ms`.
    Latency {
        stat: Stat,
        metric: &'static str,
    },
}

impl Key {
    /// The key a name stands for; an error names it and says what names are.
    pub fn parse(name: &str) -> Result<Key, String> {
        if let Some((_, s)) = SCALARS.iter().find(|(k, _)| *k == name) {
            return Ok(Key::Scalar(*s));
        }
        let latency = super::latencies::latency_key(name).and_then(|(stat, metric)| {
            let stat = match stat {
                "mean" => Stat::Mean,
                "median" => Stat::Median,
                "std" => Stat::Std,
                p => Stat::P(p.strip_prefix('p')?.parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p))?),
            };
            Some(Key::Latency { stat, metric })
        });
        latency.ok_or_else(|| {
            format!(
                "no metric {name:?}: a result's numbers are {}, and mean_/median_/std_/pN_ of a latency metric in ms (p99_ttft_ms)",
                SCALARS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Its value in `r`, when `r` has it.
    pub fn of(&self, r: &RunResult) -> Option<f64> {
        match *self {
            Key::Scalar(s) => s.of(r),
            Key::Latency { stat, metric } => latency(&r.latency, stat, metric),
        }
    }
}

/// `stat` of `metric` in `l` (any block of latency statistics: the run's, a turn's, an
/// endpoint's), when it is there and a number.
pub fn latency(l: &Latencies, stat: Stat, metric: &str) -> Option<f64> {
    let m = l.get(metric)?;
    let v = match stat {
        Stat::Mean => m.mean_ms,
        Stat::Median => m.median_ms,
        Stat::Std => m.std_ms,
        Stat::P(p) => m.percentiles.iter().find(|(q, _)| (q - p).abs() < 1e-9)?.1,
    };
    v.is_finite().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_into_keys_and_others_are_refused_by_name() {
        assert_eq!(Key::parse("request_throughput"), Ok(Key::Scalar(Scalar::RequestThroughput)));
        assert_eq!(Key::parse("p99.9_ttft_ms"), Ok(Key::Latency { stat: Stat::P(99.9), metric: "ttft" }));
        assert_eq!(Key::parse("median_e2el_ms"), Ok(Key::Latency { stat: Stat::Median, metric: "e2el" }));
        for bad in ["p99_nothing_ms", "ttft", "p101_ttft_ms", "", "completed_ms"] {
            let e = Key::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        // Every scalar's name parses to itself.
        for (name, s) in SCALARS {
            assert_eq!(Key::parse(name), Ok(Key::Scalar(s)), "{name}");
        }
    }
}
