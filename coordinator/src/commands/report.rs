//! `surge report PATH... [-o FILE] [--png DIR] [--cost-per-hour USD]`: one self-contained
//! HTML page from result files, sweep and matrix directories (several overlay), and a PNG
//! per chart on request. `surge compare --html` writes the same page with its table.

use crate::exit;
use crate::output::files::write_atomic;
use crate::output::read::{self, Loaded};
use crate::output::report::{self, Options, Report, Section, draw, html};
use crate::output::terminal;
use std::path::{Path, PathBuf};

/// Where the page goes without `-o`: `report.html` in a directory given first, else beside
/// the first result file (`r.json` -> `r.html`).
pub fn default_output(first: &Path) -> PathBuf {
    if first.is_dir() { first.join("report.html") } else { first.with_extension("html") }
}

pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Loaded>, String> {
    paths.iter().map(|p| read::load(p)).collect()
}

/// Draws every chart, then writes the page at `out` and, with `png`, a PNG per chart.
pub fn write(r: &Report, out: &Path, png: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    let charts: Vec<_> = r.sections.iter().flat_map(|s| &s.charts).collect();
    let svgs = charts.iter().map(|c| draw::svg(c)).collect::<Result<Vec<_>, _>>()?;
    write_atomic(out, html::page(r, svgs).as_bytes()).map_err(|e| e.to_string())?;
    let mut written = vec![out.to_path_buf()];
    if let Some(dir) = png {
        std::fs::create_dir_all(dir).map_err(|e| format!("--png {}: {e}", dir.display()))?;
        for c in charts {
            let path = dir.join(format!("{}.png", c.id));
            draw::png(c, &path)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Prepends `extra` sections (compare's table) to the report of `inputs`.
pub fn build(inputs: &[Loaded], opts: Options, extra: Vec<Section>) -> Report {
    let mut r = report::build(inputs, opts);
    r.sections.splice(0..0, extra);
    r
}

/// `surge report`.
pub fn report_command(paths: &[PathBuf], output: Option<&Path>, png: Option<&Path>, cost_per_hour: Option<f64>) -> u8 {
    if let Some(c) = cost_per_hour.filter(|c| !(c.is_finite() && *c > 0.0)) {
        terminal::say("report", &format!("--cost-per-hour must be a positive number of USD, not {c}"));
        return exit::USAGE;
    }
    let inputs = match load_all(paths) {
        Ok(i) => i,
        Err(e) => {
            terminal::say("report", &e);
            return exit::USAGE;
        }
    };
    let Some(first) = paths.first() else {
        terminal::say("report", "a result file or a sweep or matrix directory is needed");
        return exit::USAGE;
    };
    let out = output.map_or_else(|| default_output(first), Path::to_path_buf);
    let r = build(&inputs, Options { cost_per_hour }, Vec::new());
    match write(&r, &out, png) {
        Ok(files) => {
            let charts = files.len() - 1;
            terminal::say(
                "report",
                &format!(
                    "wrote {}{}",
                    out.display(),
                    if png.is_some() { format!(" and {charts} PNGs") } else { String::new() }
                ),
            );
            exit::OK
        }
        Err(e) => {
            terminal::say("report", &e);
            exit::FAILURE
        }
    }
}
