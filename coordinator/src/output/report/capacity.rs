//! The section of a capacity search (D62), read from the typed `capacity.json`: the
//! levels in search order, and per objective its percentile against the level with each
//! level's confidence interval as whiskers, the objective's limit as a line and the
//! capacity marked.

use super::chart::{Chart, Kind, Mark, Point};
use super::{Section, Table, fmt_num};
use crate::output::capacity::CapacityResult;

fn ms(v: Option<f64>) -> String {
    v.map_or("open".into(), fmt_num)
}

fn word(v: Option<f64>) -> String {
    v.map_or("none".into(), fmt_num)
}

/// One search's section.
pub fn section(name: &str, c: &CapacityResult) -> Section {
    let mut sec = Section::new(&format!("capacity-{}", super::short_name(name)), &format!("Capacity: {name}"));
    sec.notes.push(format!(
        "capacity {} {} (bracket [{}, {}]), {} level-runs, {} requests, {:.1} s; each level judged by its percentiles' \
         {} % confidence intervals (a pass: every upper bound within its limit; a fail: a lower bound beyond).",
        word(c.capacity),
        c.unit,
        word(c.bracket[0]),
        word(c.bracket[1]),
        c.totals.level_runs,
        c.totals.requests,
        c.totals.wall_s,
        c.confidence * 100.0
    ));
    let mut head = vec!["level".to_string(), "verdict".into(), "runs".into(), "requests".into()];
    head.extend(c.slos.iter().map(|s| format!("{} [interval] ms", s.label())));
    head.push("req/s".into());
    let rows = c
        .levels
        .iter()
        .map(|l| {
            let mut row = vec![
                fmt_num(l.level),
                format!("{:?}{}", l.verdict, if l.stopped_early.is_some() { " (stopped early)" } else { "" })
                    .to_lowercase(),
                l.runs.to_string(),
                l.requests.to_string(),
            ];
            row.extend(
                l.slos.iter().map(|s| format!("{} [{}, {}]", fmt_num(s.estimate_ms), ms(s.low_ms), ms(s.high_ms))),
            );
            row.push(fmt_num(l.request_throughput));
            row
        })
        .collect();
    sec.tables.push(Table { caption: "levels in search order".into(), head, rows });
    let x = match c.unit.as_str() {
        "request_rate" => "request rate (req/s)",
        "multi_turn_concurrency" => "open conversations",
        _ => "concurrency (requests in flight)",
    };
    for (i, slo) in c.slos.iter().enumerate() {
        let mut levels: Vec<&crate::output::capacity::CapacityLevel> = c.levels.iter().collect();
        levels.sort_by(|a, b| a.level.total_cmp(&b.level));
        let points: Vec<Point> = levels
            .iter()
            .filter_map(|l| {
                let s = l.slos.get(i)?;
                let range = Some((s.low_ms.unwrap_or(s.estimate_ms), s.high_ms.unwrap_or(s.estimate_ms)));
                Some(Point {
                    range,
                    label: Some(format!("{:?}", l.verdict).to_lowercase()),
                    ..Point::new(l.level, s.estimate_ms)
                })
            })
            .collect();
        let (x0, x1) = (points.first().map_or(0.0, |p| p.x), points.last().map_or(1.0, |p| p.x));
        let id = format!("capacity-{}-{}-{i}", super::short_name(name), slo.metric.name());
        let mut chart =
            Chart::new(&id, &format!("{} against load (interval whiskers)", slo.label()), x, "ms", Kind::Line)
                .with(&format!("p{} {}", crate::plan::percentile_word(slo.pct), slo.metric.name()), points)
                .with(
                    &format!("limit {} ms", fmt_num(slo.limit_ms)),
                    vec![Point::new(x0, slo.limit_ms), Point::new(x1, slo.limit_ms)],
                );
        if c.unit == "request_rate" {
            chart = chart.log_x();
        }
        if let Some(cap) = c.capacity {
            chart.marks.push(Mark { x: cap, label: format!("capacity {}", fmt_num(cap)), series: 0 });
        }
        sec.chart(chart);
    }
    sec
}
