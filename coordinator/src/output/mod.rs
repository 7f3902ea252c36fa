//! Where results go. The command drivers produce typed results
//! ([`result`], assembled by [`build`]); sinks consume them: the terminal (summaries,
//! tables, notices on stderr, the progress bar) and files (JSON, CSV, Markdown), written
//! atomically. This is the only place that prints.

pub mod build;
pub mod capacity;
pub mod detail_spill;
pub mod endpoints;
pub mod files;
pub mod fleet;
pub mod latencies;
pub mod live;
pub mod multi_turn;
pub mod read;
pub mod report;
pub mod result;
pub mod rows;
pub mod spill;
pub mod summary;
pub mod tables;
pub mod terminal;
pub mod traces;

use crate::fleet::outcome::RunStatus;
use result::{RunResult, SweepSummary, ValidationResult};
use std::path::PathBuf;
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

/// One finished run, with what its sinks need to show and file it.
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

/// A consumer of results. Every method has a default that ignores it.
pub trait Sink {
    /// A run (or one level-run of a sweep, one profile of a matrix) finished.
    fn run(&mut self, _r: &RunRecord) -> Result<(), OutputError> {
        Ok(())
    }
    /// A sweep's statistics so far (`done` after the last level).
    fn sweep(&mut self, _s: &SweepSummary, _dir: &std::path::Path, _done: bool) -> Result<(), OutputError> {
        Ok(())
    }
    /// `surge validate`'s table and verdict.
    fn validation(&mut self, _v: &ValidationResult, _dir: &std::path::Path) -> Result<(), OutputError> {
        Ok(())
    }
    /// A capacity search so far (`done` once it ended).
    fn capacity(
        &mut self,
        _c: &capacity::CapacityResult,
        _dir: &std::path::Path,
        _done: bool,
    ) -> Result<(), OutputError> {
        Ok(())
    }
    /// Something the user should hear about now.
    fn notice(&mut self, _message: &str) {}
}

/// Several sinks in order.
pub struct Sinks(pub Vec<Box<dyn Sink + Send>>);

impl Sink for Sinks {
    fn run(&mut self, r: &RunRecord) -> Result<(), OutputError> {
        self.0.iter_mut().try_for_each(|s| s.run(r))
    }
    fn sweep(&mut self, s: &SweepSummary, dir: &std::path::Path, done: bool) -> Result<(), OutputError> {
        self.0.iter_mut().try_for_each(|k| k.sweep(s, dir, done))
    }
    fn validation(&mut self, v: &ValidationResult, dir: &std::path::Path) -> Result<(), OutputError> {
        self.0.iter_mut().try_for_each(|k| k.validation(v, dir))
    }
    fn capacity(&mut self, c: &capacity::CapacityResult, dir: &std::path::Path, done: bool) -> Result<(), OutputError> {
        self.0.iter_mut().try_for_each(|k| k.capacity(c, dir, done))
    }
    fn notice(&mut self, message: &str) {
        self.0.iter_mut().for_each(|s| s.notice(message));
    }
}

/// The terminal and the files every command writes.
pub fn standard(command: &'static str, summaries: bool) -> Sinks {
    Sinks(vec![Box::new(terminal::Terminal::new(command, summaries)), Box::new(files::Files)])
}
