//! `surge compare` of capacity searches (D62): BASE and each CANDIDATE are `surge
//! capacity` directories (or their `capacity.json`); the table puts their capacities and
//! brackets side by side, and `--max-capacity-drop P%` exits 1 when a candidate's
//! capacity is more than P % below the base's (or it found none where the base did).

use crate::exit;
use crate::output::capacity::CapacityResult;
use std::path::{Path, PathBuf};

/// The capacity result at `path` (a directory holding `capacity.json`, or the file), if
/// it is one.
pub fn capacity_at(path: &Path) -> Option<PathBuf> {
    let file = if path.is_dir() { path.join("capacity.json") } else { path.to_path_buf() };
    (file.file_name().is_some_and(|n| n == "capacity.json") && file.is_file()).then_some(file)
}

fn load(path: &Path) -> Result<CapacityResult, (u8, String)> {
    let file = capacity_at(path).ok_or_else(|| (exit::USAGE, format!("{}: not a capacity result", path.display())))?;
    let text = std::fs::read_to_string(&file).map_err(|e| (exit::USAGE, format!("{}: {e}", file.display())))?;
    serde_json::from_str(&text).map_err(|e| (exit::USAGE, format!("{}: not a capacity result: {e}", file.display())))
}

/// `5%` or `5` as a fraction.
pub fn parse_drop(s: &str) -> Result<f64, String> {
    s.trim()
        .trim_end_matches('%')
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..100.0).contains(v))
        .map(|v| v / 100.0)
        .ok_or_else(|| format!("--max-capacity-drop {s:?}: expected a percentage below 100, e.g. 5%"))
}

fn word(v: Option<f64>) -> String {
    v.map_or("none".into(), crate::plan::percentile_word)
}

/// The table and the breaches.
pub fn compare(paths: &[PathBuf], max_drop: Option<f64>) -> Result<(String, Vec<String>), (u8, String)> {
    let [base_path, candidates @ ..] = paths else {
        return Err((exit::USAGE, "compare: BASE and CANDIDATE needed".into()));
    };
    let base = load(base_path)?;
    let mut table = format!("{:<40} {:>12} {:>22} {:>10}\n", "capacity search", "capacity", "bracket", "change");
    let row = |name: &Path, c: &CapacityResult, change: String| {
        format!(
            "{:<40} {:>12} {:>22} {:>10}\n",
            name.display(),
            word(c.capacity),
            format!("[{}, {}]", word(c.bracket[0]), word(c.bracket[1])),
            change
        )
    };
    table.push_str(&row(base_path, &base, "base".into()));
    let mut breached = Vec::new();
    for path in candidates {
        let cand = load(path)?;
        if cand.unit != base.unit || cand.slos != base.slos || cand.min_goodput_ratio != base.min_goodput_ratio {
            return Err((
                exit::USAGE,
                format!("{} and {} searched different units or objectives", base_path.display(), path.display()),
            ));
        }
        let change = match (base.capacity, cand.capacity) {
            (Some(b), Some(c)) if b > 0.0 => Some(c / b - 1.0),
            _ => None,
        };
        table.push_str(&row(path, &cand, change.map_or("-".into(), |c| format!("{:+.1}%", c * 100.0))));
        if let Some(d) = max_drop {
            let dropped = match (base.capacity, cand.capacity) {
                (Some(_), None) => true,
                _ => change.is_some_and(|c| c < -d),
            };
            if dropped {
                breached.push(format!(
                    "--max-capacity-drop {}% breached by {}: capacity {} -> {}",
                    d * 100.0,
                    path.display(),
                    word(base.capacity),
                    word(cand.capacity)
                ));
            }
        }
    }
    Ok((table, breached))
}
