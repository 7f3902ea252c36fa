//! The sections of single runs (lone results, matrix profiles), several overlaid: run
//! metadata, the summary's values, latency distributions, the time series, the agents,
//! errors, the server's metrics and cost.

use super::chart::{Chart, Kind, Mark, Point};
use super::{Options, Run, Section, Table, cell, cost_at, fmt_num, num_cell};
use crate::analysis::timeseries::Slice;
use crate::output::keys::{Key, Stat, latency};
use crate::output::result::{Distribution, EndedBy};

/// The growth from one distribution bucket to the next (32 per doubling, as results hold).
pub const BUCKET_BASE: f64 = 1.021_897_148_654_116_7;

/// The distributions charted, with their names.
const DISTRIBUTIONS: [(&str, &str); 3] = [("ttft", "TTFT"), ("itl", "ITL"), ("e2el", "E2E latency")];

/// The summary's rows: label and result key, in the order `vllm bench serve` prints them
/// (after the counts: the requests with anomalies).
const SUMMARY: [(&str, &str); 12] = [
    ("Benchmark duration (s)", "duration"),
    ("Total input tokens", "total_input_tokens"),
    ("Total generated tokens", "total_output_tokens"),
    ("Request throughput (req/s)", "request_throughput"),
    ("Output token throughput (tok/s)", "output_throughput"),
    ("Peak output token throughput (tok/s)", "max_output_tokens_per_s"),
    ("Peak concurrent requests (vLLM: per second)", "max_concurrent_requests"),
    ("Peak in flight (one instant)", "peak_in_flight"),
    ("Total token throughput (tok/s)", "total_token_throughput"),
    ("Request goodput (req/s)", "request_goodput"),
    ("Cost per 1M output tokens (USD)", "cost_per_million_output_tokens"),
    ("Cost per 1M total tokens (USD)", "cost_per_million_total_tokens"),
];

pub fn sections(runs: &[Run], opts: Options) -> Vec<Section> {
    let mut out = vec![metadata(runs), summary(runs, opts), distributions(runs), time_series(runs), agents(runs)];
    if super::turns::any(runs) {
        out.push(super::turns::section(runs));
    }
    if super::agents::any(runs) {
        out.push(super::agents::section(runs));
    }
    if super::endpoints::any(runs) {
        out.push(super::endpoints::section(runs));
    }
    out.push(errors(runs));
    if runs.iter().any(|r| r.v.server_metrics.is_some()) {
        out.push(server(runs));
    }
    if runs.iter().any(|r| r.v.gpu_metrics.is_some()) {
        out.push(gpu(runs));
    }
    if runs.iter().any(|r| cost(r, opts).is_some()) {
        out.push(cost_section(runs, opts));
    }
    out
}

/// GPU telemetry over time beside the throughput: power, utilization, energy per token.
fn gpu(runs: &[Run]) -> Section {
    let mut s = Section::new("gpu", "GPU and energy");
    s.chart(over_time(runs, "gpu-power", "GPU power per slice (all GPUs)", "W", |x| x.gpu_power_w));
    s.chart(over_time(runs, "gpu-utilization", "GPU utilization per slice (mean of the GPUs)", "%", |x| {
        x.gpu_utilization_pct
    }));
    s.chart(over_time(runs, "gpu-throughput", "Output throughput per slice", "tok/s", |x| Some(x.output_throughput)));
    s.chart(over_time(runs, "gpu-energy-per-token", "Energy per output token per slice", "J", |x| {
        x.energy_per_output_token_j
    }));
    for r in runs {
        if let Some(j) = r.v.energy_per_output_token_j {
            s.notes.push(format!(
                "{}: {} J per output token, {} output tokens per joule, {} W on average.",
                r.name,
                fmt_num(j),
                num_cell(r.v.output_tokens_per_joule),
                num_cell(r.v.average_gpu_power_w)
            ));
        }
    }
    s
}

fn head(first: &str, runs: &[Run]) -> Vec<String> {
    std::iter::once(first.to_string()).chain(runs.iter().map(|r| r.name.clone())).collect()
}

/// The `run_metadata` block key by key, as its file shows it.
fn metadata(runs: &[Run]) -> Section {
    let blocks: Vec<serde_json::Map<String, serde_json::Value>> = runs
        .iter()
        .map(|r| match serde_json::to_value(&r.v.run_metadata) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        })
        .collect();
    let mut keys: Vec<&String> = Vec::new();
    for k in blocks.iter().flat_map(|m| m.keys()) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let rows = keys
        .iter()
        .map(|k| std::iter::once(k.to_string()).chain(blocks.iter().map(|m| cell(m.get(*k)))).collect())
        .collect();
    let mut s = Section::new("run-metadata", "Run metadata");
    s.tables.push(Table { caption: "run_metadata".into(), head: head("key", runs), rows });
    s
}

/// The cost per million output tokens: the result's, else from `--cost-per-hour`.
fn cost(r: &Run, opts: Options) -> Option<f64> {
    r.v.cost_per_million_output_tokens.or_else(|| opts.cost_per_hour.and_then(|c| cost_at(c, r.v.output_throughput)))
}

fn summary(runs: &[Run], opts: Options) -> Section {
    let row = |label: &str, f: &dyn Fn(&Run) -> String| -> Vec<String> {
        std::iter::once(label.to_string()).chain(runs.iter().map(f)).collect()
    };
    let mut rows: Vec<Vec<String>> = vec![
        row("Successful requests", &|r| r.v.completed.to_string()),
        row("Failed requests", &|r| r.v.failed.to_string()),
        row("Requests with anomalies", &|r| r.v.anomalies.requests.to_string()),
    ];
    for (label, name) in SUMMARY {
        let Ok(key) = Key::parse(name) else { continue };
        if runs.iter().any(|r| key.of(r.v).is_some()) {
            rows.push(row(label, &|r| num_cell(key.of(r.v))));
        }
    }
    if runs.iter().any(|r| r.v.ended_by != EndedBy::Unknown) {
        rows.push(row("Ended by", &|r| r.v.ended_by.as_str().to_string()));
    }
    if opts.cost_per_hour.is_some() && runs.iter().all(|r| r.v.cost_per_million_output_tokens.is_none()) {
        rows.push(
            std::iter::once(format!(
                "Cost per 1M output tokens (USD, at {} USD/h)",
                fmt_num(opts.cost_per_hour.unwrap_or(0.0))
            ))
            .chain(runs.iter().map(|r| cost(r, opts).map_or("—".into(), fmt_num)))
            .collect(),
        );
    }
    for (metric, name) in [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")] {
        let Some(first) = runs.first() else { break };
        // Mean, median, then the first run's percentiles in its order.
        let mut stats = vec![(Stat::Mean, "Mean".to_string()), (Stat::Median, "Median".to_string())];
        if let Some(m) = first.v.latency.get(metric) {
            stats.extend(
                m.percentiles.iter().map(|&(p, _)| (Stat::P(p), format!("p{}", crate::plan::percentile_word(p)))),
            );
        }
        for (stat, word) in stats {
            if runs.iter().any(|r| r.v.latency.get(metric).is_some()) {
                let label = format!("{word} {name} (ms)");
                rows.push(row(&label, &|r| num_cell(latency(&r.v.latency, stat, metric))));
            }
        }
    }
    rows.push(row("Client-bound", &|r| {
        let v = &r.v.client.verdict;
        if v.client_bound { format!("yes: {}", v.reasons.join(", ")) } else { "no".into() }
    }));
    let mut s = Section::new("summary", "Summary");
    s.tables.push(Table { caption: "the summary block's values".into(), head: head("metric", runs), rows });
    s
}

/// A run's distribution of `metric`: bucket bounds and counts, and its quantiles.
fn dist<'a>(r: &Run<'a>, metric: &str) -> Option<&'a Distribution> {
    r.v.distributions.get(metric)
}

fn buckets(d: &Distribution) -> Vec<(f64, f64)> {
    d.le_ms.iter().zip(&d.counts).map(|(&le, &c)| (le, c as f64)).collect()
}

fn distributions(runs: &[Run]) -> Section {
    let mut s = Section::new("distributions", "Latency distributions");
    for (metric, name) in DISTRIBUTIONS {
        let mut hist = Chart::new(
            &format!("{metric}-histogram"),
            &format!("{name}: histogram"),
            &format!("{name} (ms)"),
            "requests",
            Kind::Histogram,
        )
        .log_x();
        if metric == "itl" {
            hist.y_label = "token gaps".into();
        }
        let mut cdf = Chart::new(
            &format!("{metric}-cdf"),
            &format!("{name}: CDF"),
            &format!("{name} (ms)"),
            "fraction ≤ x",
            Kind::Line,
        )
        .log_x();
        for r in runs {
            let Some(d) = dist(r, metric) else { continue };
            let b = buckets(d);
            let total: f64 = b.iter().map(|(_, c)| c).sum();
            hist = hist.with(&r.name, b.iter().map(|&(le, c)| Point::new(le, c)).collect());
            // From 0 at the first bucket's lower bound, up at each bucket's upper bound.
            let start = b.first().map(|&(le, _)| Point::new(le / BUCKET_BASE, 0.0));
            let mut acc = 0.0;
            let points = start
                .into_iter()
                .chain(b.iter().map(|&(le, c)| {
                    acc += c;
                    Point::new(le, acc / total)
                }))
                .collect();
            cdf = cdf.with(&r.name, points);
            let series = cdf.series.len().saturating_sub(1);
            for (q, x) in [("p50", d.p50_ms), ("p90", d.p90_ms), ("p99", d.p99_ms)] {
                let label = if runs.len() > 1 { format!("{} {q}", r.name) } else { q.to_string() };
                cdf.marks.push(Mark { x, label, series });
            }
        }
        s.chart(hist);
        s.chart(cdf);
    }
    if s.charts.is_empty() {
        s.notes.push(
            "No distributions in these results (written by a surge before the report, or no request completed).".into(),
        );
    }
    s
}

/// One series per run: `value` of each slice against the slice's start.
fn over_time(runs: &[Run], id: &str, title: &str, y: &str, value: impl Fn(&Slice) -> Option<f64>) -> Chart {
    runs.iter().fold(Chart::new(id, title, "time from the start (s)", y, Kind::Line), |c, r| {
        let points = r.v.time_series.iter().filter_map(|s| Some(Point::new(s.t, value(s)?))).collect();
        c.with(&r.name, points)
    })
}

fn time_series(runs: &[Run]) -> Section {
    let mut s = Section::new("time-series", "Over time");
    s.chart(over_time(runs, "ts-output-throughput", "Output throughput per slice", "tok/s", |x| {
        Some(x.output_throughput)
    }));
    // The steady-state window (D45): its rate drawn across the slices it covers.
    let steady = runs.iter().fold(
        over_time(runs, "ts-request-throughput", "Request throughput per slice", "req/s", |x| {
            Some(x.request_throughput)
        }),
        |c, r| {
            let slices = &r.v.time_series;
            let marked: Vec<f64> = slices.iter().filter(|x| x.steady).map(|x| x.t).collect();
            let width = slices.get(1).map_or(1.0, |x| x.t);
            match (marked.first(), marked.last(), r.v.steady_state.as_ref().map(|s| s.request_throughput)) {
                (Some(&a), Some(&b), Some(rate)) => {
                    c.with(&format!("{} steady state", r.name), vec![Point::new(a, rate), Point::new(b + width, rate)])
                }
                _ => c,
            }
        },
    );
    s.chart(steady);
    for r in runs {
        if let Some(w) = r.v.steady_state.as_ref().map(|s| &s.window) {
            let (a, b) = (w.start_s, w.end_s);
            s.notes.push(format!("{}: steady state from {a:.1} s to {b:.1} s after the first start (the flat line on the request throughput chart).", r.name));
        }
    }
    s.chart(over_time(runs, "ts-in-flight", "Requests in flight at each slice's end", "requests", |x| {
        Some(x.in_flight as f64)
    }));
    s.chart(over_time(runs, "ts-ttft-p99", "TTFT p99 per slice", "ms", |x| Some(x.p99_ttft_ms)));
    s.chart(over_time(
        runs,
        "ts-ttfo-p99",
        "Time to first output (TTFO) p99 per slice, replies that reasoned",
        "ms",
        |x| x.p99_ttfo_ms,
    ));
    s.chart(over_time(runs, "ts-errors", "Failed requests per slice", "requests", |x| Some(x.failed as f64)));
    if s.charts.is_empty() {
        s.notes.push("No time series in these results.".into());
    }
    s
}

fn agents(runs: &[Run]) -> Section {
    let mut rows = Vec::new();
    for r in runs {
        for a in &r.v.client.agents {
            rows.push(vec![
                r.name.clone(),
                a.address.clone(),
                a.hostname.clone(),
                a.cores.to_string(),
                a.completed.to_string(),
                a.failed.to_string(),
                format!("{:.3} ± {:.3}", a.clock_offset_ms, a.clock_offset_bound_ms),
                format!("{:.1}", a.cpu_percent),
                format!("{:.3}", a.scheduling_lag_us.p99 as f64 / 1000.0),
                format!("{:.1}", a.host_busy_pct),
                a.health.clone(),
                a.stop_reason.as_str().to_string(),
            ]);
        }
    }
    let head = [
        "run",
        "agent",
        "host",
        "cores",
        "completed",
        "failed",
        "clock offset ± bound (ms)",
        "engine CPU %",
        "send lag p99 (ms)",
        "host busy %",
        "health",
        "stopped",
    ];
    let mut s = Section::new("agents", "Agents and the client-bound verdict");
    s.tables.push(Table { caption: "per agent".into(), head: head.iter().map(|h| h.to_string()).collect(), rows });
    let verdicts = runs
        .iter()
        .map(|r| {
            let v = &r.v.client.verdict;
            vec![
                r.name.clone(),
                if v.client_bound { "yes" } else { "no" }.into(),
                if v.reasons.is_empty() { "—".into() } else { v.reasons.join(", ") },
                fmt_num(v.achieved_rate),
                v.socket_errors.to_string(),
            ]
        })
        .collect();
    let head = ["run", "client-bound", "reasons", "achieved rate (req/s)", "socket errors"];
    s.tables.push(Table {
        caption: "verdict".into(),
        head: head.iter().map(|h| h.to_string()).collect(),
        rows: verdicts,
    });
    s
}

fn errors(runs: &[Run]) -> Section {
    let mut kinds: Vec<String> = Vec::new();
    for k in runs.iter().flat_map(|r| r.v.errors_by_kind.keys()) {
        if !kinds.contains(k) {
            kinds.push(k.clone());
        }
    }
    let count = |r: &Run, k: &str| r.v.errors_by_kind.get(k).copied().unwrap_or(0) as f64;
    let mut s = Section::new("errors", "Errors by kind");
    if kinds.is_empty() {
        s.notes.push("No request failed.".into());
        return s;
    }
    let rows = kinds
        .iter()
        .map(|k| std::iter::once(k.clone()).chain(runs.iter().map(|r| fmt_num(count(r, k)))).collect())
        .collect();
    s.tables.push(Table { caption: "errors_by_kind".into(), head: head("kind", runs), rows });
    let mut chart = Chart::new("errors-by-kind", "Failed requests by kind", "kind", "requests", Kind::Bars);
    for r in runs {
        let points = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| Point { label: Some(k.clone()), ..Point::new(i as f64, count(r, k)) })
            .collect();
        chart = chart.with(&r.name, points);
    }
    s.chart(chart);
    let mut examples = Vec::new();
    for r in runs {
        for (kind, list) in &r.v.error_examples {
            for e in list {
                examples.push(vec![
                    r.name.clone(),
                    kind.clone(),
                    e.http_status.to_string(),
                    e.count.to_string(),
                    e.agent.clone(),
                    e.message.clone(),
                ]);
            }
        }
    }
    if !examples.is_empty() {
        let head = ["run", "kind", "HTTP status", "count", "agent", "message"];
        s.tables.push(Table {
            caption: "examples".into(),
            head: head.iter().map(|h| h.to_string()).collect(),
            rows: examples,
        });
    }
    s
}

/// A family name as a chart id.
fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect()
}

fn server(runs: &[Run]) -> Section {
    let mut s = Section::new("server-metrics", "Server metrics");
    let mut families: Vec<String> = Vec::new();
    for k in runs.iter().filter_map(|r| r.v.server_metrics.as_ref()).flat_map(|m| m.series.keys()) {
        if !families.contains(k) {
            families.push(k.clone());
        }
    }
    for f in &families {
        let mut chart =
            Chart::new(&format!("server-{}", slug(f)), f, "time from the start (s)", "per slice", Kind::Line);
        for r in runs {
            let Some(values) = r.v.server_metrics.as_ref().and_then(|m| m.series.get(f)) else { continue };
            let points =
                r.v.time_series.iter().zip(values).filter_map(|(sl, v)| Some(Point::new(sl.t, (*v)?))).collect();
            chart = chart.with(&r.name, points);
        }
        s.chart(chart);
    }
    let mut rows = Vec::new();
    for r in runs {
        let Some(m) = &r.v.server_metrics else { continue };
        // The checks block key by key, as its file shows it.
        if let Ok(serde_json::Value::Object(checks)) = serde_json::to_value(&m.checks) {
            for (k, v) in &checks {
                rows.push(vec![r.name.clone(), "check".into(), k.clone(), cell(Some(v))]);
            }
        }
        for (k, v) in &m.deltas {
            rows.push(vec![r.name.clone(), "increase".into(), k.clone(), fmt_num(*v)]);
        }
        for (k, g) in &m.gauges {
            let v = format!("mean {} · max {}", fmt_num(g.mean), fmt_num(g.max));
            rows.push(vec![r.name.clone(), "gauge".into(), k.clone(), v]);
        }
        for (k, h) in &m.histograms {
            let v = format!(
                "count {} · mean {} · p50 {} · p99 {}",
                fmt_num(h.count),
                fmt_num(h.mean),
                fmt_num(h.p50),
                fmt_num(h.p99)
            );
            rows.push(vec![r.name.clone(), "histogram".into(), k.clone(), v]);
        }
        let scrapes = format!("{} scrapes, {} failed", m.scrapes, m.failed_scrapes);
        rows.push(vec![r.name.clone(), "scrapes".into(), String::new(), scrapes]);
    }
    let head = ["run", "what", "family", "value"];
    s.tables.push(Table { caption: "over the run".into(), head: head.iter().map(|h| h.to_string()).collect(), rows });
    s
}

fn cost_section(runs: &[Run], opts: Options) -> Section {
    let mut s = Section::new("cost", "Cost");
    let mut chart = Chart::new(
        "cost-vs-latency",
        "Cost against latency",
        "median E2E latency (ms)",
        "USD per 1M output tokens",
        Kind::Points,
    );
    for r in runs {
        if let (Some(c), Some(l)) = (cost(r, opts), latency(&r.v.latency, Stat::Median, "e2el")) {
            chart = chart.with(&r.name, vec![Point { label: Some(r.name.clone()), ..Point::new(l, c) }]);
        }
    }
    s.chart(chart);
    if let Some(c) = opts.cost_per_hour {
        s.notes.push(format!("Results without a cost are priced at --cost-per-hour {} USD/h.", fmt_num(c)));
    }
    s
}
