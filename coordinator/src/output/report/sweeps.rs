//! The sections of sweeps, several overlaid: the levels table, throughput against the
//! level with 95 % confidence intervals and the knee, latency percentiles against the
//! level, the latency–throughput trade-off and cost.

use super::chart::{Chart, Kind, Mark, Point};
use super::{Options, Section, Sweep, Table, cost_at, fmt_num};
use crate::output::result::{LevelKey, LevelSummary};

/// The level's value and whether the sweep varies the request rate.
fn level_of(l: &LevelKey) -> Option<(f64, bool)> {
    match *l {
        LevelKey::Concurrency(v) | LevelKey::MultiTurnConcurrency(v) => Some((v?, false)),
        LevelKey::RequestRate(v) => Some((v?, true)),
    }
}

fn levels<'a>(s: &Sweep<'a>) -> &'a [LevelSummary] {
    &s.summary.levels
}

/// `stat`'s mean and 95 % interval at one level.
fn stat(l: &LevelSummary, name: &str) -> Option<(f64, f64, f64)> {
    let s = l.stats.get(name)?;
    Some((s.mean, s.ci95_low, s.ci95_high))
}

/// One series per sweep: `stat` against the level, with its interval.
fn points(s: &Sweep, name: &str) -> Vec<Point> {
    levels(s)
        .iter()
        .filter_map(|l| {
            let (x, _) = level_of(&l.level)?;
            let (mean, lo, hi) = stat(l, name)?;
            let range = (lo.is_finite() && hi.is_finite()).then_some((lo, hi));
            Some(Point { range, ..Point::new(x, mean) })
        })
        .collect()
}

fn axis(sweeps: &[Sweep]) -> &'static str {
    let rate = sweeps.iter().flat_map(levels).find_map(|l| level_of(&l.level)).is_some_and(|(_, rate)| rate);
    if rate { "request rate (req/s)" } else { "concurrency (requests in flight)" }
}

/// The knee's level of one sweep, when one was found.
fn knee(s: &Sweep) -> Option<f64> {
    level_of(&s.summary.knee.level)
        .map(|(x, _)| x)
        .or_else(|| levels(s).iter().find(|l| l.knee).and_then(|l| level_of(&l.level)).map(|(x, _)| x))
}

fn series_name(sweeps: &[Sweep], s: &Sweep, what: &str) -> String {
    match (sweeps.len(), what.is_empty()) {
        (1, true) => s.name.clone(),
        (1, false) => what.to_string(),
        (_, true) => s.name.clone(),
        _ => format!("{} {what}", s.name),
    }
}

pub fn sections(sweeps: &[Sweep], opts: Options) -> Vec<Section> {
    let x = axis(sweeps);
    let mut sec = Section::new("sweep", "Sweep");
    sec.tables.extend(sweeps.iter().map(table));
    for (id, title, stat, unit) in [
        ("sweep-request-throughput", "Request throughput", "request_throughput", "req/s"),
        ("sweep-output-throughput", "Output token throughput", "output_throughput", "tok/s"),
    ] {
        let mut c = Chart::new(id, &format!("{title} (mean, 95 % CI)"), x, unit, Kind::Line);
        for s in sweeps {
            c = c.with(&series_name(sweeps, s, ""), points(s, stat));
            if let Some(k) = knee(s) {
                let series = c.series.len().saturating_sub(1);
                c.marks.push(Mark { x: k, label: series_name(sweeps, s, "knee"), series });
            }
        }
        sec.chart(c);
    }
    for (metric, name) in [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency")] {
        let mut c =
            Chart::new(&format!("sweep-{metric}"), &format!("{name} p50 and p99 (mean, 95 % CI)"), x, "ms", Kind::Line);
        for s in sweeps {
            for p in ["p50", "p99"] {
                c = c.with(&series_name(sweeps, s, p), points(s, &format!("{p}_{metric}_ms")));
            }
        }
        sec.chart(c);
    }
    sec.chart(tradeoff(sweeps));
    sec.notes.push(
        "Trade-off: each point is one level (labelled with it); tok/s per user = 1000 / median TPOT (the decode speed one \
         stream sees), total = the level's output token throughput."
            .into(),
    );
    let mut out = vec![sec];
    let frontier = efficiency(sweeps);
    if !frontier.is_empty() {
        let mut s = Section::new("sweep-energy", "Energy");
        s.chart(frontier);
        s.chart(power(sweeps, x));
        s.notes.push(
            "The efficiency frontier: output tokens per joule of GPU energy against TTFT p99, one point per level \
             (labelled with it); up and to the left is better."
                .into(),
        );
        out.push(s);
    }
    let cost = cost_chart(sweeps, opts);
    if !cost.is_empty() {
        let mut s = Section::new("sweep-cost-section", "Cost");
        s.chart(cost);
        if let Some(c) = opts.cost_per_hour {
            s.notes.push(format!("Levels without a cost are priced at --cost-per-hour {} USD/h.", fmt_num(c)));
        }
        out.push(s);
    }
    out
}

fn table(s: &Sweep) -> Table {
    let names = ["request_throughput", "output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_e2el_ms"];
    let mut head = vec!["level".to_string(), "runs".to_string()];
    head.extend(names.iter().map(|n| format!("{n} (mean ± CI)")));
    head.push("knee".into());
    let rows = levels(s)
        .iter()
        .map(|l| {
            let mut row = vec![level_of(&l.level).map_or("—".into(), |(x, _)| fmt_num(x)), l.runs.to_string()];
            row.extend(names.iter().map(|n| match stat(l, n) {
                Some((m, lo, hi)) if hi.is_finite() && lo.is_finite() => {
                    format!("{} ± {}", fmt_num(m), fmt_num((hi - lo) / 2.0))
                }
                Some((m, _, _)) => fmt_num(m),
                None => "—".into(),
            }));
            row.push(if l.knee { "← knee".into() } else { String::new() });
            row
        })
        .collect();
    Table { caption: s.name.clone(), head, rows }
}

/// Output tok/s per user against total output tok/s, one point per level.
fn tradeoff(sweeps: &[Sweep]) -> Chart {
    let mut c = Chart::new(
        "sweep-tradeoff",
        "Latency–throughput trade-off",
        "total output throughput (tok/s)",
        "output tok/s per user",
        Kind::Points,
    );
    for s in sweeps {
        let points = levels(s)
            .iter()
            .filter_map(|l| {
                let (level, _) = level_of(&l.level)?;
                let (total, _, _) = stat(l, "output_throughput")?;
                let (tpot, _, _) = stat(l, "p50_tpot_ms")?;
                (tpot > 0.0).then(|| Point { label: Some(fmt_num(level)), ..Point::new(total, 1000.0 / tpot) })
            })
            .collect();
        c = c.with(&s.name, points);
    }
    c
}

/// Output tokens per joule against TTFT p99, one point per level (GPU telemetry).
fn efficiency(sweeps: &[Sweep]) -> Chart {
    let mut c =
        Chart::new("sweep-efficiency", "Efficiency frontier", "TTFT p99 (ms)", "output tokens per joule", Kind::Points);
    for s in sweeps {
        let points = levels(s)
            .iter()
            .filter_map(|l| {
                let (level, _) = level_of(&l.level)?;
                let (ttft, _, _) = stat(l, "p99_ttft_ms")?;
                let (tpj, _, _) = stat(l, "output_tokens_per_joule")?;
                Some(Point { label: Some(fmt_num(level)), ..Point::new(ttft, tpj) })
            })
            .collect();
        c = c.with(&s.name, points);
    }
    c
}

/// The GPUs' mean power against the level (GPU telemetry).
fn power(sweeps: &[Sweep], x: &str) -> Chart {
    sweeps.iter().fold(Chart::new("sweep-gpu-power", "GPU power (mean, 95 % CI)", x, "W", Kind::Line), |c, s| {
        c.with(&series_name(sweeps, s, ""), points(s, "average_gpu_power_w"))
    })
}

/// USD per million output tokens against the median E2E latency, one point per level.
fn cost_chart(sweeps: &[Sweep], opts: Options) -> Chart {
    let mut c = Chart::new(
        "sweep-cost",
        "Cost against latency",
        "p50 E2E latency (ms)",
        "USD per 1M output tokens",
        Kind::Points,
    );
    for s in sweeps {
        let points = levels(s)
            .iter()
            .filter_map(|l| {
                let (level, _) = level_of(&l.level)?;
                let (latency, _, _) = stat(l, "p50_e2el_ms")?;
                let cost = stat(l, "cost_per_million_output_tokens")
                    .map(|(m, _, _)| m)
                    .or_else(|| cost_at(opts.cost_per_hour?, stat(l, "output_throughput")?.0))?;
                Some(Point { label: Some(fmt_num(level)), ..Point::new(latency, cost) })
            })
            .collect();
        c = c.with(&s.name, points);
    }
    c
}
