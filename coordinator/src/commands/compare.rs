//! `surge compare BASE CANDIDATE [MORE...]`: result files or sweep directories side by
//! side, matched by level; `--fail-if` rules gate a CI pipeline on a regression (D8:
//! exit 0 pass, 1 a rule breached, 2 usage or a metric missing).

use super::report;
use crate::analysis::compare::{Line, Rule, compare, parse_rule};
use crate::exit;
use crate::output::keys::Key;
use crate::output::read::{self, level};
use crate::output::report::{Options, Section, Table};
use crate::output::result::RunResult;
use crate::output::tables::compare_table;
use crate::output::terminal;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Metrics shown when no rule names others.
const SHOWN: [&str; 8] = [
    "request_throughput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
];

/// One input: its results by level (`"run"` for a lone result file), and its schema.
struct Input {
    name: String,
    schema: u64,
    levels: BTreeMap<String, Vec<RunResult>>,
}

fn usage(m: String) -> (u8, String) {
    (exit::USAGE, m)
}

fn load(path: &Path) -> Result<Input, (u8, String)> {
    let l = read::load(path).map_err(usage)?;
    let mut levels: BTreeMap<String, Vec<RunResult>> = BTreeMap::new();
    for (_, r) in l.results {
        let key = if l.is_dir { level(&r) } else { "run".to_string() };
        levels.entry(key).or_default().push(r);
    }
    Ok(Input { name: l.name, schema: l.schema, levels })
}

/// The values of `metric` (`key`) over the runs of a level; an error names what is missing.
fn values(runs: &[RunResult], (metric, key): &(String, Key), input: &str) -> Result<Vec<f64>, (u8, String)> {
    runs.iter()
        .map(|r| key.of(r))
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| usage(format!("{input}: no metric {metric:?} in its results")))
}

/// The compare table, the breached rules, and the lines (for `--html`).
type Compared = (String, Vec<String>, Vec<Line>);

fn run(paths: &[PathBuf], rules: &[String]) -> Result<Compared, (u8, String)> {
    let rules: Vec<Rule> = rules.iter().map(|r| parse_rule(r).map_err(usage)).collect::<Result<_, _>>()?;
    let [base, candidates @ ..] = paths else { return Err(usage("compare: BASE and CANDIDATE needed".into())) };
    if candidates.is_empty() {
        return Err(usage("compare: a CANDIDATE to compare with BASE is needed".into()));
    }
    let mut metrics: Vec<(String, Key)> = Vec::new();
    for name in SHOWN.iter().copied().chain(rules.iter().map(|r| r.metric.as_str())) {
        if !metrics.iter().any(|(m, _)| m == name) {
            metrics.push((name.to_string(), Key::parse(name).map_err(|e| usage(format!("--fail-if: {e}")))?));
        }
    }
    let base = load(base)?;
    let (mut lines, mut breached) = (Vec::new(), Vec::new());
    for path in candidates {
        let cand = load(path)?;
        if cand.schema != base.schema {
            return Err(usage(format!(
                "{} has result schema {} and {} schema {}: their numbers do not mean the same",
                base.name, base.schema, cand.name, cand.schema
            )));
        }
        // Lone results compare with each other whatever their levels.
        let pairs: Vec<(&String, &Vec<RunResult>, &Vec<RunResult>)> =
            if base.levels.len() == 1 && cand.levels.len() == 1 {
                let (k, b) = base.levels.iter().next().expect("one level");
                vec![(k, b, cand.levels.values().next().expect("one level"))]
            } else {
                base.levels.iter().filter_map(|(k, b)| cand.levels.get(k).map(|c| (k, b, c))).collect()
            };
        if pairs.is_empty() {
            return Err(usage(format!("{} and {} have no level in common", base.name, cand.name)));
        }
        for (level, b, c) in pairs {
            for metric in &metrics {
                let m = &metric.0;
                let shown = SHOWN.contains(&m.as_str());
                let (bv, cv) = match (values(b, metric, &base.name), values(c, metric, &cand.name)) {
                    (Ok(bv), Ok(cv)) => (bv, cv),
                    // A shown metric a run lacks (not in --percentile-metrics) is skipped;
                    // a rule's metric must be there.
                    (Err(e), _) | (_, Err(e)) if !shown || rules.iter().any(|r| &r.metric == m) => return Err(e),
                    _ => continue,
                };
                let cmp = compare(&bv, &cv);
                for r in rules.iter().filter(|r| &r.metric == m) {
                    if cmp.change_pct.is_some_and(|p| r.breached(p)) {
                        breached.push(format!(
                            "--fail-if '{}' breached at {level} by {}: {:+.1}% ({:.3} -> {:.3})",
                            r.text,
                            cand.name,
                            cmp.change_pct.unwrap_or(0.0),
                            cmp.base_mean,
                            cmp.candidate_mean
                        ));
                    }
                }
                lines.push(Line { candidate: cand.name.clone(), level: level.clone(), metric: m.clone(), c: cmp });
            }
        }
    }
    Ok((compare_table(&base.name, &lines), breached, lines))
}

/// The comparison as the report's first section.
fn section(base: &str, lines: &[Line]) -> Section {
    let mut s = Section::new("comparison", "Comparison");
    s.notes.push(format!(
        "Each candidate against the base {base}: relative change of the mean; Welch's p-value with 2+ runs a side."
    ));
    let rows = lines
        .iter()
        .map(|l| {
            vec![
                l.candidate.clone(),
                l.level.clone(),
                l.metric.clone(),
                format!("{:.3}", l.c.base_mean),
                format!("{:.3}", l.c.candidate_mean),
                l.c.change_pct.map_or("—".into(), |p| format!("{p:+.1}%")),
                l.c.p_value.map_or("—".into(), |p| format!("{p:.4}")),
                if l.c.p_value.is_some_and(|p| p < 0.05) { "yes".into() } else { String::new() },
            ]
        })
        .collect();
    let head = ["candidate", "level", "metric", "base", "candidate value", "change", "p-value", "significant at 95 %"];
    s.tables.push(Table {
        caption: "candidate against base".into(),
        head: head.iter().map(|h| h.to_string()).collect(),
        rows,
    });
    s
}

fn write_html(paths: &[PathBuf], lines: &[Line], out: &Path) -> Result<(), String> {
    let inputs = report::load_all(paths)?;
    let base = inputs.first().map_or(String::new(), |l| l.name.clone());
    let r = report::build(&inputs, Options::default(), vec![section(&base, lines)]);
    report::write(&r, out, None).map(|_| ())
}

/// `surge compare` of capacity searches: the table on stdout, each breach on stderr.
pub fn compare_capacity_command(paths: &[PathBuf], max_drop: Option<&str>) -> u8 {
    use super::compare_capacity as cc;
    let drop = match max_drop.map(cc::parse_drop).transpose() {
        Ok(d) => d,
        Err(e) => {
            terminal::say("compare", &e);
            return exit::USAGE;
        }
    };
    match cc::compare(paths, drop) {
        Ok((table, breached)) => {
            terminal::out(&table);
            for b in &breached {
                terminal::say("compare", b);
            }
            if breached.is_empty() { exit::OK } else { exit::FAILURE }
        }
        Err((code, message)) => {
            terminal::say("compare", &message);
            code
        }
    }
}

/// `surge compare`: the table on stdout, each breached rule on stderr; with `html`, the
/// report with the table and the inputs overlaid.
pub fn compare_command(paths: &[PathBuf], rules: &[String], html: Option<&Path>) -> u8 {
    match run(paths, rules) {
        Ok((table, breached, lines)) => {
            terminal::out(&table);
            if let Some(out) = html {
                match write_html(paths, &lines, out) {
                    Ok(()) => terminal::say("compare", &format!("wrote {}", out.display())),
                    Err(e) => {
                        terminal::say("compare", &e);
                        return exit::FAILURE;
                    }
                }
            }
            for b in &breached {
                terminal::say("compare", b);
            }
            if breached.is_empty() { exit::OK } else { exit::FAILURE }
        }
        Err((code, message)) => {
            terminal::say("compare", &message);
            code
        }
    }
}
