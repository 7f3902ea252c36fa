//! The endpoints section (D69): a table of each endpoint's counts, TTFT and whether it is
//! an outlier, the replicas behind a router, and each endpoint's mean TTFT and request
//! throughput over time, one series per endpoint of each run.

use super::chart::{Chart, Kind, Point};
use super::{Run, Section, Table, fmt_num, num_cell};
use crate::analysis::timeseries::EndpointSlice;
use crate::output::endpoints::EndpointResult;
use crate::output::keys::{Stat, latency};

/// The columns of the table: a label and an entry's value.
type Column = (&'static str, fn(&EndpointResult) -> String);

const COLUMNS: [Column; 7] = [
    ("requests", |e| e.requests.to_string()),
    ("failed", |e| e.failed.to_string()),
    ("req/s", |e| fmt_num(e.request_throughput)),
    ("TTFT p50 (ms)", |e| num_cell(latency(&e.latency, Stat::Median, "ttft"))),
    ("TTFT p99 (ms)", |e| num_cell(latency(&e.latency, Stat::P(99.0), "ttft"))),
    ("cache hit rate", |e| num_cell(e.prompt_cache_hit_rate)),
    ("outlier", |e| if e.outlier { "yes" } else { "no" }.into()),
];

/// Whether any run had several endpoints or read the replicas.
pub fn any(runs: &[Run]) -> bool {
    runs.iter().any(|r| r.v.endpoints.is_some() || r.v.replicas.is_some())
}

fn list<'a>(r: &Run<'a>) -> &'a [EndpointResult] {
    r.v.endpoints.as_deref().unwrap_or(&[])
}

/// One series per endpoint of each run: `value` of its part of each slice.
fn per_endpoint(runs: &[Run], chart: Chart, value: fn(&EndpointSlice) -> Option<f64>) -> Chart {
    runs.iter().fold(chart, |c, r| {
        list(r).iter().enumerate().fold(c, |c, (i, e)| {
            let points =
                r.v.time_series.iter().filter_map(|s| Some(Point::new(s.t, value(s.endpoints.get(i)?)?))).collect();
            c.with(&format!("{} {}", r.name, e.name), points)
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
                let mut row = vec![r.name.clone(), e.name.clone()];
                row.extend(COLUMNS.iter().map(|(_, value)| value(e)));
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
            let rep = r.v.replicas.as_ref()?;
            Some(vec![
                r.name.clone(),
                rep.replicas_seen.to_string(),
                fmt_num(rep.balance),
                num_cell(rep.session_affinity),
                num_cell(rep.stayed_hit_rate),
                num_cell(rep.moved_hit_rate),
            ])
        })
        .collect();
    s.tables.push(Table { caption: "replicas behind the router".into(), head: head.map(String::from).to_vec(), rows });
    let ttft =
        Chart::new("endpoint-ttft", "Mean TTFT per slice, by endpoint", "time from the start (s)", "ms", Kind::Line);
    // A slice where the endpoint completed nothing has no TTFT to draw.
    s.chart(per_endpoint(runs, ttft, |e| (e.completed > 0).then_some(e.mean_ttft_ms)));
    let rate = Chart::new(
        "endpoint-throughput",
        "Request throughput per slice, by endpoint",
        "time from the start (s)",
        "req/s",
        Kind::Line,
    );
    s.chart(per_endpoint(runs, rate, |e| Some(e.request_throughput)));
    s
}
