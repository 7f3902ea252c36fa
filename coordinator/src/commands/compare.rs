//! `surge compare BASE CANDIDATE [MORE...]`: result files or sweep directories side by
//! side, matched by level; `--fail-if` rules gate a CI pipeline on a regression (D8:
//! exit 0 pass, 1 a rule breached, 2 usage or a metric missing).

use crate::analysis::compare::{Line, Rule, compare, parse_rule};
use crate::exit;
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
    levels: BTreeMap<String, Vec<serde_json::Value>>,
}

fn usage(m: String) -> (u8, String) {
    (exit::USAGE, m)
}

/// The level a result belongs to: its sweep position, else its concurrency or rate.
fn level(v: &serde_json::Value) -> String {
    if let Some(s) = v.get("sweep").filter(|s| s.is_object()) {
        return format!("{}={}", s["kind"].as_str().unwrap_or("level"), s["level"]);
    }
    match (v.get("max_concurrency").and_then(|c| c.as_u64()), v.get("request_rate")) {
        (Some(c), _) => format!("concurrency={c}"),
        (None, Some(r)) => format!("rate={r}"),
        _ => "run".into(),
    }
}

fn load(path: &Path) -> Result<Input, (u8, String)> {
    let read = |p: &Path| -> Result<serde_json::Value, (u8, String)> {
        let text = std::fs::read(p).map_err(|e| usage(format!("{}: {e}", p.display())))?;
        serde_json::from_slice(&text).map_err(|e| usage(format!("{}: {e}", p.display())))
    };
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut f: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| usage(format!("{}: {e}", path.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| !matches!(p.file_name().and_then(|n| n.to_str()), Some("summary.json" | "validate.json")))
            .collect();
        f.sort();
        f
    } else {
        vec![path.to_path_buf()]
    };
    let mut input = Input { name: path.display().to_string(), schema: 0, levels: BTreeMap::new() };
    let lone = !path.is_dir();
    for f in files {
        let v = read(&f)?;
        if v.get("completed").is_none() {
            continue;
        }
        let schema = v.get("result_schema").and_then(|s| s.as_u64()).unwrap_or(1);
        if input.schema != 0 && input.schema != schema {
            return Err(usage(format!("{}: results of schemas {} and {schema} mixed", path.display(), input.schema)));
        }
        input.schema = schema;
        let key = if lone { "run".to_string() } else { level(&v) };
        input.levels.entry(key).or_default().push(v);
    }
    if input.levels.is_empty() {
        return Err(usage(format!("{}: no result in it", path.display())));
    }
    Ok(input)
}

/// The values of `metric` over the runs of a level; an error names what is missing.
fn values(runs: &[serde_json::Value], metric: &str, input: &str) -> Result<Vec<f64>, (u8, String)> {
    runs.iter()
        .map(|v| v.get(metric).and_then(|x| x.as_f64()))
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| usage(format!("{input}: no metric {metric:?} in its results")))
}

fn run(paths: &[PathBuf], rules: &[String]) -> Result<(String, Vec<String>), (u8, String)> {
    let rules: Vec<Rule> = rules.iter().map(|r| parse_rule(r).map_err(usage)).collect::<Result<_, _>>()?;
    let [base, candidates @ ..] = paths else { return Err(usage("compare: BASE and CANDIDATE needed".into())) };
    if candidates.is_empty() {
        return Err(usage("compare: a CANDIDATE to compare with BASE is needed".into()));
    }
    let base = load(base)?;
    let mut metrics: Vec<String> = SHOWN.iter().map(|s| s.to_string()).collect();
    for r in &rules {
        if !metrics.contains(&r.metric) {
            metrics.push(r.metric.clone());
        }
    }
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
        let pairs: Vec<(&String, &Vec<serde_json::Value>, &Vec<serde_json::Value>)> =
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
            for m in &metrics {
                let shown = SHOWN.contains(&m.as_str());
                let (bv, cv) = match (values(b, m, &base.name), values(c, m, &cand.name)) {
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
    Ok((compare_table(&base.name, &lines), breached))
}

/// `surge compare`: the table on stdout, each breached rule on stderr.
pub fn compare_command(paths: &[PathBuf], rules: &[String]) -> u8 {
    match run(paths, rules) {
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
