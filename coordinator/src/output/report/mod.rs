//! `surge report`: results (run files, sweep and matrix directories) turned into one
//! self-contained HTML page (inline SVG, no network reference) and, on request, a PNG per
//! chart. [`build`] makes the page's content as data (sections of tables and
//! [`chart::Chart`]s, from [`runs`] and [`sweeps`]); [`html`] writes it, [`draw`] draws
//! the charts.

pub mod agents;
pub mod capacity;
pub mod chart;
pub mod draw;
pub mod endpoints;
pub mod html;
pub mod runs;
pub mod sweeps;
pub mod turns;

use super::read::Loaded;
use super::result::{RunResult, SweepSummary};
use chart::Chart;

/// A table as it is shown: a caption, a header row, rows of cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub caption: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One part of the page.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub id: String,
    pub title: String,
    pub notes: Vec<String>,
    pub tables: Vec<Table>,
    pub charts: Vec<Chart>,
}

impl Section {
    pub fn new(id: &str, title: &str) -> Self {
        Self { id: id.into(), title: title.into(), notes: Vec::new(), tables: Vec::new(), charts: Vec::new() }
    }

    /// Adds the chart unless it has nothing to plot.
    pub fn chart(&mut self, c: Chart) {
        if !c.is_empty() {
            self.charts.push(c);
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub title: String,
    /// The inputs, as given.
    pub inputs: Vec<String>,
    pub sections: Vec<Section>,
}

/// One run result and the name it is shown under.
pub struct Run<'a> {
    pub name: String,
    pub v: &'a RunResult,
}

/// One sweep directory.
pub struct Sweep<'a> {
    pub name: String,
    pub summary: &'a SweepSummary,
    pub runs: Vec<Run<'a>>,
}

/// USD per hour from `--cost-per-hour`, applied to results that carry no cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    pub cost_per_hour: Option<f64>,
}

/// The page for `inputs`: sweeps first (their curves), then every run that is not part of a
/// sweep (lone results, matrix profiles), overlaid.
pub fn build(inputs: &[Loaded], opts: Options) -> Report {
    let many = inputs.len() > 1;
    let mut sweeps = Vec::new();
    let mut lone = Vec::new();
    let mut searches = Vec::new();
    for l in inputs {
        // A capacity search is shown by its own section, not as its level-runs.
        if let Some(c) = &l.capacity {
            searches.push(capacity::section(&l.name, c));
            continue;
        }
        let short = short_name(&l.name);
        let runs: Vec<Run> = l
            .results
            .iter()
            .map(|(stem, v)| Run {
                name: if many && l.is_dir { format!("{short}/{stem}") } else { run_name(stem, v, l.is_dir) },
                v,
            })
            .collect();
        match &l.summary {
            Some(summary) => sweeps.push(Sweep { name: short, summary, runs }),
            None => lone.extend(runs),
        }
    }
    let mut sections = searches;
    if !sweeps.is_empty() {
        sections.extend(sweeps::sections(&sweeps, opts));
    }
    if !lone.is_empty() {
        sections.extend(runs::sections(&lone, opts));
    }
    let title = match inputs {
        [one] => format!("surge report: {}", short_name(&one.name)),
        _ => format!("surge report: {} inputs", inputs.len()),
    };
    Report { title, inputs: inputs.iter().map(|l| l.name.clone()).collect(), sections }
}

/// A path's last component.
pub(crate) fn short_name(path: &str) -> String {
    let p = std::path::Path::new(path.trim_end_matches('/'));
    p.file_name().and_then(|n| n.to_str()).unwrap_or(path).to_string()
}

/// A lone run is shown under its `--label` when it has one, else its file stem.
fn run_name(stem: &str, r: &RunResult, in_dir: bool) -> String {
    match &r.label {
        Some(label) if !in_dir => label.clone(),
        _ => stem.to_string(),
    }
}

/// A number as tables show it: integers plain, others with up to 3 decimals.
pub fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else if x.abs() >= 100.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A number as one table cell (`—` when absent).
pub fn num_cell(x: Option<f64>) -> String {
    x.filter(|x| x.is_finite()).map_or_else(|| "—".into(), fmt_num)
}

/// Any JSON value as one table cell (a block shown key by key: `run_metadata`, a server
/// check).
pub fn cell(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => "—".into(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.as_f64().map_or_else(|| n.to_string(), fmt_num),
        Some(serde_json::Value::Bool(b)) => if *b { "yes" } else { "no" }.into(),
        Some(serde_json::Value::Array(a)) => a.iter().map(|x| cell(Some(x))).collect::<Vec<_>>().join(", "),
        Some(other) => other.to_string(),
    }
}

/// USD per million tokens at `tokens_per_s` for `per_hour` USD an hour.
pub fn cost_at(per_hour: f64, tokens_per_s: f64) -> Option<f64> {
    crate::analysis::cost::per_million(per_hour, tokens_per_s)
}
