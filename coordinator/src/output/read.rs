//! Reading results back for `surge compare` and `surge report`: a result file, or every
//! result of a sweep or matrix directory (with a sweep's `summary.json`), each read into
//! the typed result model, which reads files of every schema this version knows (D18):
//! keys added since are optional there.

use super::result::{RunResult, SweepSummary};
use std::path::{Path, PathBuf};

/// What one PATH given on the command line holds.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The path as given.
    pub name: String,
    /// The results' `result_schema` (1 for files without it).
    pub schema: u64,
    /// The result files, sorted by path, each with its name (file stem).
    pub results: Vec<(String, RunResult)>,
    /// A sweep directory's `summary.json`.
    pub summary: Option<SweepSummary>,
    /// A capacity search's `capacity.json`, typed (D62).
    pub capacity: Option<crate::output::capacity::CapacityResult>,
    pub is_dir: bool,
}

fn read_json(p: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{}: not a result: {e}", p.display()))
}

fn stem(p: &Path) -> String {
    p.file_stem().and_then(|s| s.to_str()).unwrap_or("result").to_string()
}

/// Reads `path`; an error names the file and what is wrong (a usage error for callers).
pub fn load(path: &Path) -> Result<Loaded, String> {
    let is_dir = path.is_dir();
    let files: Vec<PathBuf> = if is_dir {
        let mut f: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| !matches!(p.file_name().and_then(|n| n.to_str()), Some("summary.json" | "validate.json")))
            .collect();
        f.sort();
        f
    } else {
        vec![path.to_path_buf()]
    };
    let mut loaded = Loaded {
        name: path.display().to_string(),
        schema: 0,
        results: Vec::new(),
        summary: None,
        capacity: None,
        is_dir,
    };
    for f in files {
        let v = read_json(&f)?;
        if v.get("completed").is_none() {
            if is_dir {
                continue;
            }
            return Err(format!("{}: not a surge result (no \"completed\" key)", f.display()));
        }
        let schema = v.get("result_schema").and_then(|s| s.as_u64()).unwrap_or(1);
        if loaded.schema != 0 && loaded.schema != schema {
            return Err(format!("{}: results of schemas {} and {schema} mixed", path.display(), loaded.schema));
        }
        loaded.schema = schema;
        let r: RunResult = serde_json::from_value(v).map_err(|e| format!("{}: not a result: {e}", f.display()))?;
        loaded.results.push((stem(&f), r));
    }
    if loaded.results.is_empty() {
        return Err(format!("{}: no result in it", path.display()));
    }
    let summary = path.join("summary.json");
    if is_dir && summary.is_file() {
        loaded.summary = Some(
            serde_json::from_value(read_json(&summary)?)
                .map_err(|e| format!("{}: not a sweep summary: {e}", summary.display()))?,
        );
    }
    let capacity = path.join("capacity.json");
    if is_dir && capacity.is_file() {
        let text = std::fs::read(&capacity).map_err(|e| format!("{}: {e}", capacity.display()))?;
        loaded.capacity = Some(
            serde_json::from_slice(&text).map_err(|e| format!("{}: not a capacity result: {e}", capacity.display()))?,
        );
    }
    Ok(loaded)
}

/// The level a result belongs to: its sweep position, else its concurrency or rate.
pub fn level(r: &RunResult) -> String {
    if let Some(s) = &r.sweep {
        return format!("{}={}", s.kind.key(), serde_json::to_string(&s.level).unwrap_or_default());
    }
    match r.max_concurrency {
        Some(c) => format!("concurrency={c}"),
        None => format!("rate={}", serde_json::to_string(&r.request_rate).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result of the first schema (no `result_schema`, none of the keys added since:
    /// cancellations, what ended the run, anomalies, distributions, the time series, the
    /// instantaneous peak, steady state) still loads into the typed result, read as
    /// schema 1; `surge compare` and `surge report` then read it like any other.
    #[test]
    fn a_result_of_the_first_schema_loads_typed() {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/closed_loop.json");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(golden).unwrap()).unwrap();
        let m = v.as_object_mut().unwrap();
        for k in [
            "result_schema",
            "cancelled",
            "ended_by",
            "anomalies",
            "distributions",
            "time_series",
            "peak_in_flight",
            "steady_state",
            "error_examples",
            "percentiles_exact",
            "ignored_flags",
            "rtfx",
            "label",
        ] {
            assert!(m.remove(k).is_some(), "the golden result has {k}");
        }
        let dir = std::env::temp_dir().join(format!("surge-schema1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("old.json");
        std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
        let loaded = load(&file);
        std::fs::remove_dir_all(&dir).unwrap();
        let loaded = loaded.unwrap();
        assert_eq!(loaded.schema, 1);
        let (_, r) = &loaded.results[0];
        assert_eq!((r.result_schema, r.cancelled, r.ended_by), (1, 0, super::super::result::EndedBy::Unknown));
        assert!(r.time_series.is_empty() && r.distributions.is_empty());
        let p99 = crate::output::keys::Key::parse("p99_ttft_ms").unwrap();
        assert_eq!(p99.of(r), v["p99_ttft_ms"].as_f64(), "its numbers read typed");
        assert_eq!(level(r), format!("concurrency={}", v["max_concurrency"]));
    }
}
