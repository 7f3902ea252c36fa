//! The conversations section of multi-turn runs: TTFT by turn and the prefix cache's hit
//! rate by turn (beside the history share, the most a cache could reuse), one series per
//! run, from the result's `per_turn_metrics`.

use super::chart::{Chart, Kind, Point};
use super::{Run, Section};
use crate::output::keys::{Stat, latency};
use crate::output::multi_turn::PerTurn;

fn turns<'a>(r: &Run<'a>) -> &'a [PerTurn] {
    r.v.multi_turn.as_ref().map_or(&[], |m| m.per_turn_metrics.as_slice())
}

/// Whether any run is a multi-turn run.
pub fn any(runs: &[Run]) -> bool {
    runs.iter().any(|r| !turns(r).is_empty())
}

/// One series per run: `value` of each turn (1-based on the axis, as the summary prints
/// it), times `scale`.
fn by_turn(runs: &[Run], chart: Chart, value: fn(&PerTurn) -> Option<f64>, suffix: &str, scale: f64) -> Chart {
    runs.iter().fold(chart, |c, r| {
        let points = turns(r)
            .iter()
            .filter_map(|t| Some(Point::new(f64::from(t.turn_index) + 1.0, value(t)? * scale)))
            .collect();
        c.with(&format!("{}{suffix}", r.name), points)
    })
}

pub fn section(runs: &[Run]) -> Section {
    let mut s = Section::new("conversations", "Conversations");
    let ttft = Chart::new("turn-ttft", "TTFT by turn", "turn", "ms", Kind::Line);
    let ttft = by_turn(runs, ttft, |t| latency(&t.latency, Stat::Median, "ttft"), " p50", 1.0);
    s.chart(by_turn(runs, ttft, |t| latency(&t.latency, Stat::P(99.0), "ttft"), " p99", 1.0));
    let cache = Chart::new("turn-cache", "Prefix cache hit rate by turn", "turn", "% of input tokens", Kind::Line);
    let cache = by_turn(runs, cache, |t| t.prompt_cache_hit_rate, " cached", 100.0);
    s.chart(by_turn(runs, cache, |t| t.history_token_fraction, " history (the most a cache could reuse)", 100.0));
    if runs.iter().any(|r| r.v.multi_turn.as_ref().is_some_and(|m| m.total_cached_tokens.is_none())) {
        s.notes.push(
            "A run's server reported no cached tokens (usage.prompt_tokens_details): its hit rate is not drawn.".into(),
        );
    }
    s
}
