//! Where results go. The command drivers produce typed results ([`result`], assembled by
//! [`build`]); outputs consume them, each one implementation of [`Output`] in the set
//! [`Outputs`] the command opens from its plan: the terminal (summaries, tables, notices
//! on stderr, the progress bar), the result files (JSON, CSV, Markdown, written
//! atomically), the rows file, the live Prometheus endpoint and the OTLP traces. This is
//! the only place that prints.

pub mod build;
pub mod capacity;
pub mod detail_spill;
pub mod endpoints;
pub mod files;
pub mod fleet;
pub mod keys;
pub mod latencies;
pub mod live;
pub mod multi_turn;
pub mod outputs;
pub mod read;
pub mod report;
pub mod result;
pub mod rows;
pub mod sets;
pub mod spill;
pub mod summary;
pub mod tables;
pub mod terminal;
pub mod traces;

use crate::fleet::outcome::{GlobalRow, RunStatus};
use result::{RunResult, SweepSummary, ValidationResult};
use std::path::{Path, PathBuf};
use summary::SummaryView;

/// A result could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why an output could not open: the flag and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct StartError {
    pub flag: &'static str,
    pub message: String,
    /// A usage error (a bad header or endpoint), not a failure to run.
    pub usage: bool,
}

/// One finished run, with what its outputs need to show and file it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub result: RunResult,
    pub status: RunStatus,
    pub view: SummaryView,
    /// Where the JSON file goes, when it is saved.
    pub file: Option<PathBuf>,
    /// A line shown before the summary (`surge matrix: TAG`).
    pub heading: Option<String>,
    /// `--append-result`: the JSON goes at the end of the file, on one line, as vLLM
    /// appends (a file of JSON lines).
    pub append: bool,
}

/// What a run tells its outputs when it starts.
#[derive(Debug, Clone, Copy)]
pub struct LevelStart<'a> {
    pub run_id: u64,
    /// The run's start on the coordinator's clock.
    pub start_unix_ns: i64,
    /// The model requested.
    pub model: &'a str,
    /// Agent labels, by the rows' `agent` index.
    pub agents: &'a [String],
    /// How the terminal names the run (a sweep's level, a matrix profile; empty for a run).
    pub label: &'a str,
    /// Requests the run will send, when known (a progress bar's length).
    pub total: Option<u64>,
}

/// A consumer of what a command produces, as k6's outputs are: the terminal, the result
/// files, the rows file, the live Prometheus endpoint, the OTLP traces. Each is opened by
/// [`Outputs`] from the plan and closed by [`Outputs::stop`]; every method has a default
/// that ignores it. While a run goes an output hears its start, rows, health, progress
/// and end; after it, the finished results (a run's record, a sweep's or a capacity
/// search's statistics, a validation).
pub trait Output: Send {
    /// The flag that asked for this output (`--save-rows`), or what it is (`terminal`):
    /// named when it fails.
    fn name(&self) -> &'static str;
    /// A run starts.
    fn level_start(&mut self, _s: &LevelStart<'_>) {}
    /// Rows of the load as they arrive (`agents`: the labels of their `agent` indices).
    fn rows(&mut self, _agents: &[String], _rows: &[&GlobalRow]) -> Result<(), OutputError> {
        Ok(())
    }
    /// An agent's health report.
    fn health(&mut self, _agent: &str, _health: &surge_proto::Health) {}
    /// Requests finished so far in this run.
    fn progress(&mut self, _finished: u64) {}
    /// The run's latest numbers in one line (rates, in flight, p99 TTFT, errors).
    fn status(&mut self, _line: &str) {}
    /// The run ended with `result`; what was written for it is finished now.
    fn level_end(&mut self, _result: &RunResult) -> Result<(), OutputError> {
        Ok(())
    }
    /// A run (or one level-run of a sweep, one profile of a matrix) is complete.
    fn run(&mut self, _r: &RunRecord) -> Result<(), OutputError> {
        Ok(())
    }
    /// A sweep's statistics so far (`done` after the last level).
    fn sweep(&mut self, _s: &SweepSummary, _dir: &Path, _done: bool) -> Result<(), OutputError> {
        Ok(())
    }
    /// `surge validate`'s table and verdict.
    fn validation(&mut self, _v: &ValidationResult, _dir: &Path) -> Result<(), OutputError> {
        Ok(())
    }
    /// A capacity search so far (`done` once it ended).
    fn capacity(&mut self, _c: &capacity::CapacityResult, _dir: &Path, _done: bool) -> Result<(), OutputError> {
        Ok(())
    }
    /// Something the user should hear about now.
    fn notice(&mut self, _message: &str) {}
    /// How long to keep serving after the command's last run, before [`Output::stop`].
    fn linger(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// The command ends (`last`: its last result, if any): flush and close. Called once,
    /// off the async threads (an exporter's flush blocks); later calls of the other
    /// methods may still come (a closing notice) and are ignored by what has closed.
    fn stop(&mut self, _last: Option<&RunResult>) {}
}

pub use outputs::Outputs;
