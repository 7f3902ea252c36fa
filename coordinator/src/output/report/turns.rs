//! The conversations section of multi-turn runs: TTFT by turn and the prefix cache's hit
//! rate by turn (beside the history share, the most a cache could reuse), one series per
//! run, from the result's `per_turn_metrics`.

use super::chart::{Chart, Kind, Point};
use super::{Run, Section, num};
use serde_json::Value;

fn turns<'a>(r: &Run<'a>) -> &'a [Value] {
    r.v.get("per_turn_metrics").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Whether any run is a multi-turn run.
pub fn any(runs: &[Run]) -> bool {
    runs.iter().any(|r| !turns(r).is_empty())
}

/// One series per run: `key` of each turn (1-based on the axis, as the summary prints it),
/// times `scale`.
fn by_turn(runs: &[Run], chart: Chart, key: &str, suffix: &str, scale: f64) -> Chart {
    runs.iter().fold(chart, |c, r| {
        let points = turns(r)
            .iter()
            .filter_map(|t| Some(Point::new(num(t, "turn_index")? + 1.0, num(t, key)? * scale)))
            .collect();
        c.with(&format!("{}{suffix}", r.name), points)
    })
}

pub fn section(runs: &[Run]) -> Section {
    let mut s = Section::new("conversations", "Conversations");
    let ttft = Chart::new("turn-ttft", "TTFT by turn", "turn", "ms", Kind::Line);
    let ttft = by_turn(runs, ttft, "median_ttft_ms", " p50", 1.0);
    s.chart(by_turn(runs, ttft, "p99_ttft_ms", " p99", 1.0));
    let cache = Chart::new("turn-cache", "Prefix cache hit rate by turn", "turn", "% of input tokens", Kind::Line);
    let cache = by_turn(runs, cache, "prompt_cache_hit_rate", " cached", 100.0);
    s.chart(by_turn(runs, cache, "history_token_fraction", " history (the most a cache could reuse)", 100.0));
    if runs.iter().any(|r| r.v.get("total_cached_tokens").is_some_and(Value::is_null)) {
        s.notes.push(
            "A run's server reported no cached tokens (usage.prompt_tokens_details): its hit rate is not drawn.".into(),
        );
    }
    s
}
