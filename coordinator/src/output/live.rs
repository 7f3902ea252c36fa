//! `--prometheus-listen`: the live metrics, served while the command runs, one
//! [`Output`] of the command's set. Every row is published as it arrives; after the last
//! run the endpoint keeps serving the final values for the linger, so a scraper's last
//! look sees the whole run, then closes.

use super::result::RunResult;
use super::{Output, OutputError, StartError};
use crate::fleet::outcome::GlobalRow;
use std::sync::Arc;
use surge_core::live::LiveMetrics;
use tokio_util::sync::CancellationToken;

pub struct Live {
    metrics: Arc<LiveMetrics>,
    stop: CancellationToken,
    /// How long the final values stay served after the last run.
    linger: std::time::Duration,
}

impl Live {
    /// Listens on `addr` and serves the metrics until stopped.
    pub async fn start(addr: std::net::SocketAddr, linger: std::time::Duration) -> Result<Self, StartError> {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| StartError {
            flag: "--prometheus-listen",
            message: format!("{addr}: {e}"),
            usage: false,
        })?;
        let metrics = Arc::new(LiveMetrics::new());
        let stop = CancellationToken::new();
        tokio::spawn(surge_core::live::serve(listener, Arc::clone(&metrics), stop.clone()));
        Ok(Self { metrics, stop, linger })
    }
}

impl Output for Live {
    fn name(&self) -> &'static str {
        "--prometheus-listen"
    }
    fn rows(&mut self, agents: &[String], rows: &[&GlobalRow]) -> Result<(), OutputError> {
        for r in rows {
            self.metrics.row(agents.get(r.agent).map_or("", String::as_str), &r.row);
        }
        Ok(())
    }
    fn health(&mut self, agent: &str, h: &surge_proto::Health) {
        self.metrics.health(agent, h);
    }
    fn linger(&self) -> std::time::Duration {
        self.linger
    }
    fn stop(&mut self, _last: Option<&RunResult>) {
        self.stop.cancel();
    }
}
