//! Reading results back for `surge compare` and `surge report`: a result file, or every
//! result of a sweep or matrix directory (with a sweep's `summary.json`). Results are
//! read as JSON values, so files of every schema this version knows can be read (D18).

use std::path::{Path, PathBuf};

/// What one PATH given on the command line holds.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The path as given.
    pub name: String,
    /// The results' `result_schema` (1 for files without it).
    pub schema: u64,
    /// The result files, sorted by path, each with its name (file stem).
    pub results: Vec<(String, serde_json::Value)>,
    /// A sweep directory's `summary.json`.
    pub summary: Option<serde_json::Value>,
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
        loaded.results.push((stem(&f), v));
    }
    if loaded.results.is_empty() {
        return Err(format!("{}: no result in it", path.display()));
    }
    let summary = path.join("summary.json");
    if is_dir && summary.is_file() {
        loaded.summary = Some(read_json(&summary)?);
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
pub fn level(v: &serde_json::Value) -> String {
    if let Some(s) = v.get("sweep").filter(|s| s.is_object()) {
        return format!("{}={}", s["kind"].as_str().unwrap_or("level"), s["level"]);
    }
    match (v.get("max_concurrency").and_then(|c| c.as_u64()), v.get("request_rate")) {
        (Some(c), _) => format!("concurrency={c}"),
        (None, Some(r)) => format!("rate={r}"),
        _ => "run".into(),
    }
}
