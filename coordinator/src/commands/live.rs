//! `--prometheus-listen ADDR`: the run's live metrics (every agent's requests, errors,
//! tokens, latency histograms, in flight, send lag and CPU, labelled by agent) served in
//! the Prometheus text format for the whole command: a run, every level of a sweep.

use crate::exit::Failure;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use surge_agent::live::LiveMetrics;
use tokio_util::sync::CancellationToken;

static LIVE: OnceLock<Arc<LiveMetrics>> = OnceLock::new();

/// Serves the live metrics on `addr` until the process ends (once per process).
pub async fn start(addr: SocketAddr) -> Result<(), Failure> {
    if LIVE.get().is_some() {
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| Failure::run("--prometheus-listen", &e))?;
    let live = Arc::clone(LIVE.get_or_init(|| Arc::new(LiveMetrics::new())));
    tokio::spawn(surge_agent::live::serve(listener, live, CancellationToken::new()));
    Ok(())
}

/// The live metrics, when served.
pub fn get() -> Option<&'static LiveMetrics> {
    LIVE.get().map(Arc::as_ref)
}
