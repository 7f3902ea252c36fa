//! The sections of single runs (lone results, matrix profiles), several overlaid: run
//! metadata, the summary's values, latency distributions, the time series, the agents,
//! errors, the server's metrics and cost.

use super::chart::{Chart, Kind, Mark, Point};
use super::{Options, Run, Section, Table, cell, cost_at, fmt_num, num};
use serde_json::Value;

/// The growth from one distribution bucket to the next (32 per doubling, as results hold).
pub const BUCKET_BASE: f64 = 1.021_897_148_654_116_7;

/// The distributions charted, with their names.
const DISTRIBUTIONS: [(&str, &str); 3] = [("ttft", "TTFT"), ("itl", "ITL"), ("e2el", "E2E latency")];

/// The summary's rows: label and result key, in the order `vllm bench serve` prints them.
const SUMMARY: [(&str, &str); 16] = [
    ("Successful requests", "completed"),
    ("Failed requests", "failed"),
    ("Requests with anomalies", "anomalies.requests"),
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
    ("Ended by", "ended_by"),
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
    if runs.iter().any(|r| r.v.get("server_metrics").is_some_and(Value::is_object)) {
        out.push(server(runs));
    }
    if runs.iter().any(|r| r.v.get("gpu_metrics").is_some_and(Value::is_object)) {
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
    s.chart(over_time(runs, "gpu-power", "GPU power per slice (all GPUs)", "W", "gpu_power_w"));
    s.chart(over_time(
        runs,
        "gpu-utilization",
        "GPU utilization per slice (mean of the GPUs)",
        "%",
        "gpu_utilization_pct",
    ));
    s.chart(over_time(runs, "gpu-throughput", "Output throughput per slice", "tok/s", "output_throughput"));
    s.chart(over_time(
        runs,
        "gpu-energy-per-token",
        "Energy per output token per slice",
        "J",
        "energy_per_output_token_j",
    ));
    for r in runs {
        if let Some(j) = num(r.v, "energy_per_output_token_j") {
            s.notes.push(format!(
                "{}: {} J per output token, {} output tokens per joule, {} W on average.",
                r.name,
                fmt_num(j),
                num(r.v, "output_tokens_per_joule").map_or("—".into(), fmt_num),
                num(r.v, "average_gpu_power_w").map_or("—".into(), fmt_num)
            ));
        }
    }
    s
}

fn head(first: &str, runs: &[Run]) -> Vec<String> {
    std::iter::once(first.to_string()).chain(runs.iter().map(|r| r.name.clone())).collect()
}

fn metadata(runs: &[Run]) -> Section {
    let mut keys: Vec<String> = Vec::new();
    for r in runs {
        if let Some(m) = r.v.get("run_metadata").and_then(Value::as_object) {
            for k in m.keys() {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
    }
    let rows = keys
        .iter()
        .map(|k| {
            std::iter::once(k.clone())
                .chain(runs.iter().map(|r| cell(r.v.get("run_metadata").and_then(|m| m.get(k)))))
                .collect()
        })
        .collect();
    let mut s = Section::new("run-metadata", "Run metadata");
    s.tables.push(Table { caption: "run_metadata".into(), head: head("key", runs), rows });
    s
}

/// The cost per million output tokens: the result's, else from `--cost-per-hour`.
fn cost(r: &Run, opts: Options) -> Option<f64> {
    num(r.v, "cost_per_million_output_tokens")
        .or_else(|| opts.cost_per_hour.and_then(|c| cost_at(c, num(r.v, "output_throughput")?)))
}

fn summary(runs: &[Run], opts: Options) -> Section {
    // A key may be a path into the result (`anomalies.requests`).
    let at = |v: &'_ Value, key: &str| key.split('.').try_fold(v, |v, k| v.get(k)).cloned();
    let mut rows: Vec<Vec<String>> = SUMMARY
        .iter()
        .filter(|(_, key)| runs.iter().any(|r| at(r.v, key).is_some_and(|x| !x.is_null())))
        .map(|(label, key)| {
            std::iter::once(label.to_string()).chain(runs.iter().map(|r| cell(at(r.v, key).as_ref()))).collect()
        })
        .collect();
    if opts.cost_per_hour.is_some() && runs.iter().all(|r| num(r.v, "cost_per_million_output_tokens").is_none()) {
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
        let mut keys = vec![format!("mean_{metric}_ms"), format!("median_{metric}_ms")];
        if let Some(obj) = first.v.as_object() {
            let prefix = "p";
            let suffix = format!("_{metric}_ms");
            keys.extend(
                obj.keys()
                    .filter(|k| k.starts_with(prefix) && k.ends_with(&suffix) && !k.starts_with("percentiles"))
                    .cloned(),
            );
        }
        for k in keys.iter().filter(|k| runs.iter().any(|r| r.v.get(k.as_str()).is_some())) {
            let label = format!(
                "{} {name} (ms)",
                k.split('_').next().unwrap_or("").replace("median", "Median").replace("mean", "Mean")
            );
            rows.push(std::iter::once(label).chain(runs.iter().map(|r| cell(r.v.get(k.as_str())))).collect());
        }
    }
    rows.push(
        std::iter::once("Client-bound".to_string())
            .chain(runs.iter().map(|r| {
                let v = r.v.get("client").and_then(|c| c.get("verdict"));
                match v.and_then(|v| v.get("client_bound")).and_then(Value::as_bool) {
                    Some(true) => format!("yes: {}", cell(v.and_then(|v| v.get("reasons")))),
                    Some(false) => "no".into(),
                    None => "—".into(),
                }
            }))
            .collect(),
    );
    let mut s = Section::new("summary", "Summary");
    s.tables.push(Table { caption: "the summary block's values".into(), head: head("metric", runs), rows });
    s
}

/// A run's distribution of `metric`: bucket bounds and counts, and its quantiles.
fn dist<'a>(r: &Run<'a>, metric: &str) -> Option<&'a Value> {
    r.v.get("distributions")?.get(metric).filter(|d| d.get("le_ms").is_some_and(Value::is_array))
}

fn buckets(d: &Value) -> Vec<(f64, f64)> {
    let le = d["le_ms"].as_array().into_iter().flatten().filter_map(Value::as_f64);
    let counts = d["counts"].as_array().into_iter().flatten().filter_map(Value::as_f64);
    le.zip(counts).collect()
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
            for q in ["p50", "p90", "p99"] {
                if let Some(x) = num(d, &format!("{q}_ms")) {
                    let label = if runs.len() > 1 { format!("{} {q}", r.name) } else { q.to_string() };
                    cdf.marks.push(Mark { x, label, series });
                }
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

fn slices<'a>(r: &Run<'a>) -> &'a [Value] {
    r.v.get("time_series").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// One series per run: `key` of each slice against the slice's start.
fn over_time(runs: &[Run], id: &str, title: &str, y: &str, key: &str) -> Chart {
    runs.iter().fold(Chart::new(id, title, "time from the start (s)", y, Kind::Line), |c, r| {
        let points = slices(r).iter().filter_map(|s| Some(Point::new(num(s, "t")?, num(s, key)?))).collect();
        c.with(&r.name, points)
    })
}

fn time_series(runs: &[Run]) -> Section {
    let mut s = Section::new("time-series", "Over time");
    s.chart(over_time(runs, "ts-output-throughput", "Output throughput per slice", "tok/s", "output_throughput"));
    // The steady-state window (D45): its rate drawn across the slices it covers.
    let steady = runs.iter().fold(
        over_time(runs, "ts-request-throughput", "Request throughput per slice", "req/s", "request_throughput"),
        |c, r| {
            let marked: Vec<f64> = slices(r)
                .iter()
                .filter(|x| x.get("steady") == Some(&Value::Bool(true)))
                .filter_map(|x| num(x, "t"))
                .collect();
            let width = slices(r).get(1).and_then(|x| num(x, "t")).unwrap_or(1.0);
            match (marked.first(), marked.last(), num(r.v, "steady_state.request_throughput")) {
                (Some(&a), Some(&b), Some(rate)) => {
                    c.with(&format!("{} steady state", r.name), vec![Point::new(a, rate), Point::new(b + width, rate)])
                }
                _ => c,
            }
        },
    );
    s.chart(steady);
    for r in runs {
        if let (Some(a), Some(b)) = (num(r.v, "steady_state.window.start_s"), num(r.v, "steady_state.window.end_s")) {
            s.notes.push(format!("{}: steady state from {a:.1} s to {b:.1} s after the first start (the flat line on the request throughput chart).", r.name));
        }
    }
    s.chart(over_time(runs, "ts-in-flight", "Requests in flight at each slice's end", "requests", "in_flight"));
    s.chart(over_time(runs, "ts-ttft-p99", "TTFT p99 per slice", "ms", "p99_ttft_ms"));
    s.chart(over_time(
        runs,
        "ts-ttfo-p99",
        "Time to first output (TTFO) p99 per slice, replies that reasoned",
        "ms",
        "p99_ttfo_ms",
    ));
    s.chart(over_time(runs, "ts-errors", "Failed requests per slice", "requests", "failed"));
    if s.charts.is_empty() {
        s.notes.push("No time series in these results.".into());
    }
    s
}

fn agents(runs: &[Run]) -> Section {
    let mut rows = Vec::new();
    for r in runs {
        let client = r.v.get("client");
        for a in client.and_then(|c| c.get("agents")).and_then(Value::as_array).into_iter().flatten() {
            let offset = match (num(a, "clock_offset_ms"), num(a, "clock_offset_bound_ms")) {
                (Some(o), Some(b)) => format!("{o:.3} ± {b:.3}"),
                _ => "—".into(),
            };
            rows.push(vec![
                r.name.clone(),
                cell(a.get("address")),
                cell(a.get("hostname")),
                cell(a.get("cores")),
                cell(a.get("completed")),
                cell(a.get("failed")),
                offset,
                num(a, "cpu_percent").map_or("—".into(), |c| format!("{c:.1}")),
                num(a, "scheduling_lag_us.p99").map_or("—".into(), |l| format!("{:.3}", l / 1000.0)),
                num(a, "host_busy_pct").map_or("—".into(), |c| format!("{c:.1}")),
                cell(a.get("health")),
                cell(a.get("stop_reason")),
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
            let v = r.v.get("client").and_then(|c| c.get("verdict"));
            vec![
                r.name.clone(),
                cell(v.and_then(|v| v.get("client_bound"))),
                cell(v.and_then(|v| v.get("reasons"))),
                cell(v.and_then(|v| v.get("achieved_rate"))),
                cell(v.and_then(|v| v.get("socket_errors"))),
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
    for r in runs {
        for k in r.v.get("errors_by_kind").and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            if !kinds.contains(k) {
                kinds.push(k.clone());
            }
        }
    }
    let count = |r: &Run, k: &str| num(r.v, &format!("errors_by_kind.{k}")).unwrap_or(0.0);
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
        for (kind, list) in r.v.get("error_examples").and_then(Value::as_object).into_iter().flatten() {
            for e in list.as_array().into_iter().flatten() {
                examples.push(vec![
                    r.name.clone(),
                    kind.clone(),
                    cell(e.get("http_status")),
                    cell(e.get("count")),
                    cell(e.get("agent")),
                    cell(e.get("message")),
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
    for r in runs {
        for k in
            r.v.get("server_metrics")
                .and_then(|m| m.get("series"))
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|m| m.keys())
        {
            if !families.contains(k) {
                families.push(k.clone());
            }
        }
    }
    for f in &families {
        let mut chart =
            Chart::new(&format!("server-{}", slug(f)), f, "time from the start (s)", "per slice", Kind::Line);
        for r in runs {
            let Some(values) =
                r.v.get("server_metrics")
                    .and_then(|m| m.get("series"))
                    .and_then(|m| m.get(f))
                    .and_then(Value::as_array)
            else {
                continue;
            };
            let points = slices(r)
                .iter()
                .zip(values)
                .filter_map(|(sl, v)| Some(Point::new(num(sl, "t")?, v.as_f64()?)))
                .collect();
            chart = chart.with(&r.name, points);
        }
        s.chart(chart);
    }
    let mut rows = Vec::new();
    for r in runs {
        let Some(m) = r.v.get("server_metrics") else { continue };
        for (k, v) in m.get("checks").and_then(Value::as_object).into_iter().flatten() {
            rows.push(vec![r.name.clone(), "check".into(), k.clone(), cell(Some(v))]);
        }
        for (k, v) in m.get("deltas").and_then(Value::as_object).into_iter().flatten() {
            rows.push(vec![r.name.clone(), "increase".into(), k.clone(), cell(Some(v))]);
        }
        for (k, g) in m.get("gauges").and_then(Value::as_object).into_iter().flatten() {
            let v = format!("mean {} · max {}", cell(g.get("mean")), cell(g.get("max")));
            rows.push(vec![r.name.clone(), "gauge".into(), k.clone(), v]);
        }
        for (k, h) in m.get("histograms").and_then(Value::as_object).into_iter().flatten() {
            let v = format!(
                "count {} · mean {} · p50 {} · p99 {}",
                cell(h.get("count")),
                cell(h.get("mean")),
                cell(h.get("p50")),
                cell(h.get("p99"))
            );
            rows.push(vec![r.name.clone(), "histogram".into(), k.clone(), v]);
        }
        let scrapes = format!("{} scrapes, {} failed", cell(m.get("scrapes")), cell(m.get("failed_scrapes")));
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
        if let (Some(c), Some(l)) = (cost(r, opts), num(r.v, "median_e2el_ms")) {
            chart = chart.with(&r.name, vec![Point { label: Some(r.name.clone()), ..Point::new(l, c) }]);
        }
    }
    s.chart(chart);
    if let Some(c) = opts.cost_per_hour {
        s.notes.push(format!("Results without a cost are priced at --cost-per-hour {} USD/h.", fmt_num(c)));
    }
    s
}
