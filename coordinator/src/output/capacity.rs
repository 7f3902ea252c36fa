//! `surge capacity`'s answer (D48, D62) as a value: `DIR/capacity.json`, rewritten after
//! every level so `--resume` can continue a cut search, and the table the terminal prints.

use crate::analysis::capacity::{Slo, Verdict};
use serde::{Deserialize, Serialize};

/// The whole search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityResult {
    /// The unit's value at the highest passing level (`null`: no level passed).
    pub capacity: Option<f64>,
    /// [highest pass, lowest fail]; `null` where the search found none.
    pub bracket: [Option<f64>; 2],
    /// `concurrency`, `request_rate` or `multi_turn_concurrency`.
    pub unit: String,
    pub slos: Vec<Slo>,
    /// `--min-goodput-ratio` (with `--goodput`'s objectives) instead of `slos`.
    #[serde(default)]
    pub min_goodput_ratio: Option<f64>,
    /// `--slo accuracy>=X` (D71): the floor on the share of right answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_accuracy: Option<f64>,
    pub confidence: f64,
    /// Every level run, in search order.
    pub levels: Vec<CapacityLevel>,
    /// The passing level's measured throughput, cost and energy.
    pub at_capacity: Option<AtCapacity>,
    pub totals: Totals,
    /// The search ended by its own rule (not cut by Ctrl-C, a failed run or --max-level-runs).
    pub complete: bool,
    /// Why it ended, in words.
    pub ended: String,
    pub saved_at_utc: String,
    /// The flags of the search (D93): `--resume` goes on only from the same.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub settings: std::collections::BTreeMap<String, Vec<String>>,
}

/// One level: its verdict and what decided it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityLevel {
    pub level: f64,
    pub verdict: Verdict,
    /// The level-runs it took (the first `--runs`, then more while undecided).
    pub runs: u32,
    /// Requests that ended (completed, failed, cancelled) over its runs.
    pub requests: u64,
    pub slos: Vec<SloAtLevel>,
    /// With `--min-goodput-ratio`: the share of requests meeting every objective, and its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_ratio: Option<Bounded>,
    /// With `--slo accuracy>=X`: the share of questions answered right, and its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Bounded>,
    pub request_throughput: f64,
    pub output_throughput: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// Undecided when the level's request budget ran out: requests in all that a decision
    /// would have needed at the share seen (`null`: more than 10 million).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_to_decide: Option<u64>,
    /// Stopped as over-saturated before its planned requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<StoppedEarly>,
    /// The level-run files.
    pub files: Vec<String>,
}

/// One SLO at one level: the percentile over the pooled runs with its interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloAtLevel {
    pub slo: String,
    pub n: u64,
    pub estimate_ms: f64,
    pub low_ms: Option<f64>,
    pub high_ms: Option<f64>,
    pub verdict: Verdict,
    /// With several runs: each run's own estimate (the spread, shown beside the verdict,
    /// never used for it, D47).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_estimates_ms: Vec<f64>,
}

/// A share with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounded {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoppedEarly {
    pub requests_sent: u64,
    pub requests_planned: u64,
    pub after_s: f64,
    /// The time the rest of the level would have taken at its rate.
    pub saved_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AtCapacity {
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_million_output_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_per_output_token_j: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub level_runs: u32,
    pub requests: u64,
    pub wall_s: f64,
    /// Time over-saturated levels did not take (their early stop).
    pub saved_s: f64,
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), crate::plan::percentile_word)
}

/// The search as a table, then the answer in one line.
pub fn table(c: &CapacityResult) -> String {
    let mut out = format!("{:=^80}\n", " Capacity search ");
    let mut what = if c.slos.is_empty() && c.min_goodput_ratio.is_some() {
        format!("goodput ratio >= {}", num(c.min_goodput_ratio))
    } else {
        c.slos.iter().map(Slo::label).collect::<Vec<_>>().join(", ")
    };
    if let Some(f) = c.min_accuracy {
        what = if what.is_empty() { format!("accuracy >= {f}") } else { format!("{what}, accuracy >= {f}") };
    }
    out.push_str(&format!("over {} for {what}, at {} % confidence\n", c.unit, c.confidence * 100.0));
    out.push_str(&format!(
        "{:>10}  {:<10} {:>5} {:>9}  {:<34} {:>9}\n",
        "level", "verdict", "runs", "requests", "percentile [interval] ms", "req/s"
    ));
    for l in &c.levels {
        let first = l.slos.first().map_or_else(
            || {
                l.goodput_ratio.or(l.accuracy).map_or(String::new(), |g| {
                    let what = if l.goodput_ratio.is_some() { "good" } else { "right" };
                    format!("{what} {:.3} [{:.3}, {:.3}]", g.estimate, g.low, g.high)
                })
            },
            |s| format!("{:.1} [{}, {}]", s.estimate_ms, ms(s.low_ms), ms(s.high_ms)),
        );
        let verdict = match (l.verdict, &l.stopped_early) {
            (_, Some(_)) => "fail*".to_string(),
            (v, None) => format!("{v:?}").to_lowercase(),
        };
        out.push_str(&format!(
            "{:>10}  {:<10} {:>5} {:>9}  {:<34} {:>9.2}\n",
            crate::plan::percentile_word(l.level),
            verdict,
            l.runs,
            l.requests,
            first,
            l.request_throughput
        ));
        for s in l.slos.iter().skip(1) {
            out.push_str(&format!(
                "{:>38}  {:<34}\n",
                "",
                format!("{:.1} [{}, {}]", s.estimate_ms, ms(s.low_ms), ms(s.high_ms))
            ));
        }
    }
    if c.levels.iter().any(|l| l.stopped_early.is_some()) {
        out.push_str("* stopped early: over-saturated\n");
    }
    out.push_str(&format!(
        "capacity: {} {} (bracket [{}, {}]); {} level-runs, {} requests, {:.1} s{}\n",
        num(c.capacity),
        c.unit,
        num(c.bracket[0]),
        num(c.bracket[1]),
        c.totals.level_runs,
        c.totals.requests,
        c.totals.wall_s,
        if c.complete { String::new() } else { format!(" ({})", c.ended) }
    ));
    if let Some(a) = &c.at_capacity {
        out.push_str(&format!(
            "at capacity: {:.2} req/s, {:.1} output tok/s",
            a.request_throughput, a.output_throughput
        ));
        if let Some(cost) = a.cost_per_million_output_tokens {
            out.push_str(&format!(", ${cost:.4} per million output tokens"));
        }
        if let Some(j) = a.energy_per_output_token_j {
            out.push_str(&format!(", {j:.3} J per output token"));
        }
        out.push('\n');
    }
    out
}

fn ms(v: Option<f64>) -> String {
    v.map_or("open".into(), |v| format!("{v:.1}"))
}
