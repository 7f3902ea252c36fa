//! The endpoints section (D69): a table of each endpoint's counts, TTFT and whether it is
//! an outlier, the replicas behind a router, and each endpoint's mean TTFT and request
//! throughput over time, one series per endpoint of each run.

use super::chart::{Chart, Kind, Point};
use super::{Run, Section, Table, cell, num};
use serde_json::Value;

/// The columns of the table: a label and a key of an `endpoints` entry.
const COLUMNS: [(&str, &str); 7] = [
    ("requests", "requests"),
    ("failed", "failed"),
    ("req/s", "request_throughput"),
    ("TTFT p50 (ms)", "median_ttft_ms"),
    ("TTFT p99 (ms)", "p99_ttft_ms"),
    ("cache hit rate", "prompt_cache_hit_rate"),
    ("outlier", "outlier"),
];

/// Whether any run had several endpoints or read the replicas.
pub fn any(runs: &[Run]) -> bool {
    runs.iter().any(|r| r.v.get("endpoints").is_some() || r.v.get("replicas").is_some())
}

fn list<'a>(r: &Run<'a>) -> &'a [Value] {
    r.v.get("endpoints").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn slices<'a>(r: &Run<'a>) -> &'a [Value] {
    r.v.get("time_series").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// One series per endpoint of each run: `key` of its part of each slice.
fn per_endpoint(runs: &[Run], chart: Chart, key: &str) -> Chart {
    runs.iter().fold(chart, |c, r| {
        list(r).iter().enumerate().fold(c, |c, (i, e)| {
            let points = slices(r)
                .iter()
                .filter_map(|s| {
                    let part = s.get("endpoints")?.get(i)?;
                    // A slice where the endpoint completed nothing has no TTFT to draw.
                    (key != "mean_ttft_ms" || num(part, "completed")? > 0.0)
                        .then(|| Some(Point::new(num(s, "t")?, num(part, key)?)))?
                })
                .collect();
            let name = e.get("name").and_then(Value::as_str).unwrap_or("?");
            c.with(&format!("{} {name}", r.name), points)
        })
    })
}

pub fn section(runs: &[Run]) -> Section {
    let mut s = Section::new("endpoints", "Endpoints and replicas");
    let mut head = vec!["run".to_string(), "endpoint".to_string()];
    head.extend(COLUMNS.iter().map(|(label, _)| label.to_string()));
    let rows = runs
        .iter()
        .flat_map(|r| {
            list(r).iter().map(|e| {
                let mut row = vec![r.name.clone(), cell(e.get("name"))];
                row.extend(COLUMNS.iter().map(|(_, key)| cell(e.get(*key))));
                row
            })
        })
        .collect();
    s.tables.push(Table {
        caption: "each endpoint (the result's endpoint_outlier_rule marks outliers)".into(),
        head,
        rows,
    });
    let head = ["run", "replicas seen", "balance", "session affinity", "hit rate stayed", "hit rate moved"];
    let rows = runs
        .iter()
        .filter_map(|r| {
            let rep = r.v.get("replicas")?;
            let keys = ["replicas_seen", "balance", "session_affinity", "stayed_hit_rate", "moved_hit_rate"];
            Some(std::iter::once(r.name.clone()).chain(keys.iter().map(|k| cell(rep.get(*k)))).collect())
        })
        .collect();
    s.tables.push(Table { caption: "replicas behind the router".into(), head: head.map(String::from).to_vec(), rows });
    let ttft =
        Chart::new("endpoint-ttft", "Mean TTFT per slice, by endpoint", "time from the start (s)", "ms", Kind::Line);
    s.chart(per_endpoint(runs, ttft, "mean_ttft_ms"));
    let rate = Chart::new(
        "endpoint-throughput",
        "Request throughput per slice, by endpoint",
        "time from the start (s)",
        "req/s",
        Kind::Line,
    );
    s.chart(per_endpoint(runs, rate, "request_throughput"));
    s
}
