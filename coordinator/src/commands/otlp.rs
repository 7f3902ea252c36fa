//! `--otlp-endpoint`: the command's traces ([`Traces`]) for the whole process, from the
//! first level to the end of the command, when every span is flushed.

use crate::exit::{self, Failure};
use crate::output::result::RunResult;
use crate::output::traces::Traces;
use crate::plan::OtlpPlan;
use std::sync::{Mutex, OnceLock};

static TRACES: OnceLock<Mutex<Option<Traces>>> = OnceLock::new();

/// Starts exporting (once per process).
pub async fn start(plan: &OtlpPlan) -> Result<(), Failure> {
    if TRACES.get().is_some() {
        return Ok(());
    }
    let plan = plan.clone();
    // The HTTP exporter's client runs a runtime of its own: built off the async threads.
    let traces = tokio::task::spawn_blocking(move || Traces::new(&plan))
        .await
        .map_err(|e| Failure::new(exit::FAILURE, format!("--otlp-endpoint: {e}")))?
        .map_err(|e| Failure::new(exit::USAGE, e))?;
    let _ = TRACES.set(Mutex::new(Some(traces)));
    Ok(())
}

/// Runs `f` on the traces, when exporting.
pub fn with(f: impl FnOnce(&mut Traces)) {
    if let Some(m) = TRACES.get()
        && let Ok(mut g) = m.lock()
        && let Some(t) = g.as_mut()
    {
        f(t);
    }
}

/// The command ended (`last`: its last level's result): the command's span, and every
/// span out before the process exits.
pub async fn finish(last: Option<&RunResult>) {
    let Some(t) = TRACES.get().and_then(|m| m.lock().ok()?.take()) else { return };
    let last = last.cloned();
    let _ = tokio::task::spawn_blocking(move || t.finish(last.as_ref())).await;
}
