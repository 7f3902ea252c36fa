//! Results as files, each written atomically (a temporary file, then a rename): a run's
//! JSON where its record says, a sweep's `summary.json` and `summary.csv`, and
//! `validate.json` with `validate.md`.

use super::result::{RunResult, SweepSummary, ValidationResult};
use super::{Output, OutputError, RunRecord, tables};
use crate::plan::RunPlan;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically, creating its directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_atomic_with(path, |out| std::io::Write::write_all(out, bytes))
}

/// Writes `value` as pretty JSON, atomically, streamed to the file: a run's per-request
/// arrays are never held serialized in memory.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), OutputError> {
    write_atomic_with(path, |out| serde_json::to_writer_pretty(out, value).map_err(std::io::Error::other))
}

/// What `write` writes, into `path` atomically: to `path` with `.tmp` appended (its
/// directory created), then renamed. A file cut short is not left behind. A path that is
/// a device or a pipe (`/dev/stdout`, a FIFO) is written in place, as vLLM's `open` does,
/// rather than replaced by a file; a directory is refused before anything is written.
fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    let err = |source| OutputError::Write { path: path.to_path_buf(), source };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(err(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory")));
        }
        Ok(m) if !m.is_file() => {
            let mut out = std::io::BufWriter::new(std::fs::OpenOptions::new().write(true).open(path).map_err(err)?);
            return write(&mut out).and_then(|()| std::io::Write::flush(&mut out)).map_err(err);
        }
        _ => {}
    }
    let tmp = tmp_of(path);
    if let Some(dir) = tmp.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::fs::File::create(&tmp).map_err(err)?);
    let written = write(&mut out).and_then(|()| std::io::Write::flush(&mut out));
    drop(out);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}

/// `path` with `.tmp` appended: where an atomic write goes before its rename.
fn tmp_of(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Appends `value` on one line to `path` (a newline first when the file is not empty), as
/// vLLM's `--append-result` does.
pub fn append_json_line<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), OutputError> {
    use std::io::Write;
    let err = |source| OutputError::Write { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut line = serde_json::to_vec(value).map_err(|e| err(std::io::Error::other(e)))?;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(err)?;
    if f.metadata().map_err(err)?.len() > 0 {
        line.insert(0, b'\n');
    }
    f.write_all(&line).map_err(err)
}

/// `r.json` → `r.timeseries.csv` (D5).
pub fn timeseries_path(result: &Path) -> PathBuf {
    let stem = result.file_stem().map_or_else(|| "result".into(), |s| s.to_string_lossy().into_owned());
    result.with_file_name(format!("{stem}.timeseries.csv"))
}

/// A complete run result saved earlier (`--resume`), or `None`.
pub fn complete_result(path: &Path) -> Option<RunResult> {
    let r: RunResult = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (r.client.status == crate::output::result::RunState::Complete).then_some(r)
}

/// Where a run's result goes: `--result-dir`/`--result-filename`, or vLLM's default name.
pub fn result_path(plan: &RunPlan, model: &str, started_at: chrono::DateTime<chrono::Utc>) -> PathBuf {
    let name = plan.result_filename.clone().unwrap_or_else(|| {
        let rate = match plan.ramp {
            Some(r) => format!("ramp-up-{}-{}qps-{}", r.name(), r.start, r.end),
            None if plan.request_rate.is_finite() => format!("{}", plan.request_rate),
            None => "inf".into(),
        };
        let conc = plan.max_concurrency.map_or_else(String::new, |c| format!("-concurrency{c}"));
        let base = model.rsplit('/').next().unwrap_or(model);
        let label = plan.label.as_deref().unwrap_or(plan.backend_name);
        format!("{label}-{rate}qps{conc}-{base}-{}.json", started_at.format("%Y%m%d-%H%M%S"))
    });
    plan.result_dir.clone().unwrap_or_else(|| PathBuf::from(".")).join(name)
}

/// The result files: a run's JSON and time-series CSV, a sweep's, a search's, a validation's.
pub struct Files;

impl Output for Files {
    fn name(&self) -> &'static str {
        "--save-result"
    }
    fn run(&mut self, r: &RunRecord) -> Result<(), OutputError> {
        let Some(path) = &r.file else { return Ok(()) };
        if r.append {
            append_json_line(path, &r.result)?;
        } else {
            write_json(path, &r.result)?;
        }
        write_atomic(&timeseries_path(path), tables::timeseries_csv(&r.result.time_series).as_bytes())
    }

    fn sweep(&mut self, s: &SweepSummary, dir: &Path, _done: bool) -> Result<(), OutputError> {
        write_atomic(&dir.join("summary.csv"), tables::sweep_csv(s).as_bytes())?;
        write_json(&dir.join("summary.json"), s)
    }

    fn capacity(&mut self, c: &super::capacity::CapacityResult, dir: &Path, _done: bool) -> Result<(), OutputError> {
        write_json(&dir.join("capacity.json"), c)
    }

    fn validation(&mut self, v: &ValidationResult, dir: &Path) -> Result<(), OutputError> {
        write_json(&dir.join("validate.json"), v)?;
        write_atomic(&dir.join("validate.md"), tables::validation_markdown(&v.rows).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("surge-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn json_is_written_pretty_into_a_new_directory_and_replaces_the_old_file() {
        let dir = scratch("pretty");
        let path = dir.join("deep").join("r.json");
        let value = serde_json::json!({"completed": 3, "ttfts": [0.1, 0.25, 1e-7], "label": "é"});
        write_json(&path, &value).expect("written");
        assert_eq!(std::fs::read(&path).unwrap(), serde_json::to_vec_pretty(&value).unwrap());
        write_json(&path, &serde_json::json!([1])).expect("written again");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[\n  1\n]");
        assert!(!tmp_of(&path).exists(), "the temporary file is renamed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_that_cannot_be_written_leaves_no_file() {
        let dir = scratch("fails");
        let path = dir.join("r.json");
        // JSON keys must be strings: serde_json refuses a map keyed by lists.
        let bad: std::collections::BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        let e = write_json(&path, &bad).expect_err("refused");
        assert!(e.to_string().contains("r.json"), "{e}");
        assert!(!path.exists() && !tmp_of(&path).exists(), "nothing is left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pipe_is_written_in_place_and_a_directory_is_refused_leaving_nothing() {
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("special");
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        write_json(&fifo, &serde_json::json!([1])).expect("written into the pipe");
        // Checked before the reader is joined: a pipe replaced by a file is never opened
        // for writing, and its reader would wait for good.
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the pipe is not replaced by a file");
        assert_eq!(reader.join().unwrap(), "[\n  1\n]");
        let e = write_json(&dir, &serde_json::json!([1])).expect_err("a directory is refused");
        // The check's own words (the rename's error would say "Is a directory").
        assert!(e.to_string().contains("is a directory"), "{e}");
        assert!(!tmp_of(&dir).exists(), "no temporary file is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
