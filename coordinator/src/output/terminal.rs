//! The terminal: summaries and tables on stdout (users paste and parse them), notices
//! on stderr prefixed with the command (`surge sweep: ...`), and each run's progress bar
//! on stderr when it is a terminal.

use super::result::{SweepSummary, ValidationResult};
use super::{Output, OutputError, RunRecord, summary, tables};
use crate::fleet::outcome::RunStatus;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};

/// Writes to stdout; a closed stdout (a pipe to `head`) is not an error worth a panic.
pub fn out(text: &str) {
    let _ = std::io::stdout().write_all(text.as_bytes());
    let _ = std::io::stdout().flush();
}

/// `surge`, `surge sweep`, ...: the prefix of every stderr line.
fn prefix(command: &str) -> String {
    if command.is_empty() { "surge".into() } else { format!("surge {command}") }
}

/// Prints `message` on stderr as `command` says things.
pub fn say(command: &str, message: &str) {
    eprintln!("{}: {message}", prefix(command));
}

/// The terminal output.
pub struct Terminal {
    command: &'static str,
    /// Print each run's summary block (`surge run`, `surge matrix`), not a sweep's.
    summaries: bool,
    /// The run's progress on stderr, while one goes and stderr is a terminal.
    bar: Option<ProgressBar>,
}

impl Terminal {
    pub fn new(command: &'static str, summaries: bool) -> Self {
        Self { command, summaries, bar: None }
    }
}

/// A bar of `total` requests when it is known, else a line; both followed by the last
/// slice's numbers.
fn bar(total: Option<u64>, label: &str) -> ProgressBar {
    let (bar, template) = match total {
        Some(n) => (ProgressBar::new(n), "{prefix} [{bar:30}] {pos}/{len} req  ETA {eta}  {msg}"),
        None => (ProgressBar::new_spinner(), "{prefix} {spinner} {pos} req  {msg}"),
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label.to_string());
    bar
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Output for Terminal {
    fn name(&self) -> &'static str {
        "terminal"
    }
    fn run(&mut self, r: &RunRecord) -> Result<(), OutputError> {
        if self.summaries {
            let mut text = r.heading.as_ref().map(|h| format!("{h}\n")).unwrap_or_default();
            text.push_str(&summary::summary(&r.result, &r.view, &r.status));
            out(&text);
        }
        let code = crate::exit::of_status(&r.status);
        match &r.status {
            RunStatus::Invalid { lost } => {
                say("", &format!("run invalid: agent(s) {} lost (exit code {code})", lost.join(", ")))
            }
            RunStatus::Partial { lost } => {
                say("", &format!("run partial: agent(s) {} lost (exit code {code})", lost.join(", ")))
            }
            RunStatus::Complete | RunStatus::Interrupted | RunStatus::Terminated => {}
        }
        Ok(())
    }

    fn sweep(&mut self, s: &SweepSummary, _dir: &std::path::Path, done: bool) -> Result<(), OutputError> {
        if done {
            let mut text = tables::sweep_table(s);
            if let (true, Some(l)) = (s.knee.searched, s.levels.iter().find(|l| l.knee)) {
                text.push_str(&format!(
                    "knee: {} = {}\n",
                    s.kind.key(),
                    crate::plan::percentile_word(tables::level_of(l))
                ));
            }
            out(&text);
        }
        Ok(())
    }

    fn capacity(
        &mut self,
        c: &super::capacity::CapacityResult,
        _dir: &std::path::Path,
        done: bool,
    ) -> Result<(), OutputError> {
        if done {
            out(&super::capacity::table(c));
        }
        Ok(())
    }

    fn validation(&mut self, v: &ValidationResult, _dir: &std::path::Path) -> Result<(), OutputError> {
        let mut text = tables::validation_markdown(&v.rows);
        if let Some(a) = &v.against {
            text.push_str(&format!(
                "\nverdict for {}: the client sustains {:.0} req/s at concurrency {}; the run achieved {:.2} req/s at concurrency {}: headroom {:.1}x (minimum {:.1}x): {}\n",
                a.file,
                a.validated_request_throughput,
                a.validated_concurrency,
                a.run_request_throughput,
                a.run_concurrency,
                a.headroom,
                a.min_headroom,
                if a.pass { "PASS, the client was not the bottleneck" } else { "FAIL, the client may have limited that run" }
            ));
        }
        out(&text);
        Ok(())
    }

    fn level_start(&mut self, s: &super::LevelStart<'_>) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if std::io::stderr().is_terminal() {
            self.bar = Some(bar(s.total, s.label));
        }
    }

    fn progress(&mut self, finished: u64) {
        if let Some(b) = &self.bar {
            b.set_position(finished);
        }
    }

    fn status(&mut self, line: &str) {
        if let Some(b) = &self.bar {
            b.set_message(line.to_string());
        }
    }

    fn level_end(&mut self, _result: &super::result::RunResult) -> Result<(), OutputError> {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        Ok(())
    }

    fn notice(&mut self, message: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| say(self.command, message)),
            None => say(self.command, message),
        }
    }
}
