//! The run's outputs that follow it while it goes, of one kind ([`Output`], as k6's): the
//! live Prometheus endpoint (`--prometheus-listen`) and the OTLP export
//! (`--otlp-endpoint`). The command that runs owns them: [`Outputs::start`] opens each the
//! plan asks for, every level hands them its start, rows, health and result, and
//! [`Outputs::stop`] closes them (the last spans flushed, the listener closed). Nothing is
//! process-wide: two commands in one process have two sets. The result file, the rows file
//! and the terminal are sinks of finished runs (`Sink`).

use super::result::RunResult;
use super::traces::Traces;
use crate::fleet::outcome::GlobalRow;
use crate::plan::RunPlan;
use std::sync::Arc;
use surge_core::live::LiveMetrics;
use tokio_util::sync::CancellationToken;

/// What a level tells an output while it runs.
pub trait Output: Send {
    /// The level `run_id` starts at `start_unix_ns` (coordinator clock).
    fn level_start(&mut self, _run_id: u64, _start_unix_ns: i64, _model: &str, _agents: &[String]) {}
    /// Rows as they arrive (`agents`: the labels of their `agent` indices).
    fn rows(&mut self, _agents: &[String], _rows: &[&GlobalRow]) {}
    /// An agent's health report.
    fn health(&mut self, _agent: &str, _health: &surge_proto::Health) {}
    /// The level's result.
    fn level_end(&mut self, _result: &RunResult) {}
    /// How long to keep serving after the last run, before [`Output::stop`].
    fn linger(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// The command ends (`last`: its last result, if any); an output flushes and closes.
    fn stop(self: Box<Self>, _last: Option<&RunResult>) {}
}

/// Why an output could not start: the flag and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct StartError {
    pub flag: &'static str,
    pub message: String,
    /// A usage error (a bad header or endpoint), not a failure to run.
    pub usage: bool,
}

/// `--prometheus-listen`: the live metrics, served while the command runs.
struct Live {
    metrics: Arc<LiveMetrics>,
    stop: CancellationToken,
    /// How long the final values stay served after the last run.
    linger: std::time::Duration,
}

impl Output for Live {
    fn rows(&mut self, agents: &[String], rows: &[&GlobalRow]) {
        for r in rows {
            self.metrics.row(agents.get(r.agent).map_or("", String::as_str), &r.row);
        }
    }
    fn health(&mut self, agent: &str, h: &surge_proto::Health) {
        self.metrics.health(agent, h);
    }
    /// Every row was published as it arrived: the endpoint now holds the final values and
    /// keeps serving them for `linger`, so a scraper's last look sees the whole run.
    fn linger(&self) -> std::time::Duration {
        self.linger
    }
    fn stop(self: Box<Self>, _last: Option<&RunResult>) {
        self.stop.cancel();
    }
}

impl Output for Traces {
    fn level_start(&mut self, run_id: u64, start_unix_ns: i64, model: &str, agents: &[String]) {
        Traces::level_start(self, run_id, start_unix_ns, model, agents.to_vec());
    }
    fn rows(&mut self, _agents: &[String], rows: &[&GlobalRow]) {
        Traces::rows(self, rows.iter().copied());
    }
    fn level_end(&mut self, result: &RunResult) {
        Traces::level_end(self, result);
    }
    fn stop(self: Box<Self>, last: Option<&RunResult>) {
        self.finish(last);
    }
}

/// The outputs of one command.
#[derive(Default)]
pub struct Outputs(Vec<Box<dyn Output>>);

impl Outputs {
    /// Opens every output `plan` asks for.
    pub async fn start(plan: &RunPlan) -> Result<Self, StartError> {
        let mut out: Vec<Box<dyn Output>> = Vec::new();
        if let Some(addr) = plan.prometheus_listen {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| StartError {
                flag: "--prometheus-listen",
                message: format!("{addr}: {e}"),
                usage: false,
            })?;
            let metrics = Arc::new(LiveMetrics::new());
            let stop = CancellationToken::new();
            tokio::spawn(surge_core::live::serve(listener, Arc::clone(&metrics), stop.clone()));
            out.push(Box::new(Live { metrics, stop, linger: plan.live_linger }));
        }
        if let Some(o) = &plan.otlp {
            let o = o.clone();
            // The HTTP exporter's client runs a runtime of its own: built off the async threads.
            let traces = tokio::task::spawn_blocking(move || Traces::new(&o))
                .await
                .map_err(|e| StartError { flag: "--otlp-endpoint", message: e.to_string(), usage: false })?
                .map_err(|message| StartError { flag: "--otlp-endpoint", message, usage: true })?;
            out.push(Box::new(traces));
        }
        Ok(Self(out))
    }

    pub fn level_start(&mut self, run_id: u64, start_unix_ns: i64, model: &str, agents: &[String]) {
        self.0.iter_mut().for_each(|o| o.level_start(run_id, start_unix_ns, model, agents));
    }
    pub fn rows(&mut self, agents: &[String], rows: &[&GlobalRow]) {
        self.0.iter_mut().for_each(|o| o.rows(agents, rows));
    }
    pub fn health(&mut self, agent: &str, h: &surge_proto::Health) {
        self.0.iter_mut().for_each(|o| o.health(agent, h));
    }
    pub fn level_end(&mut self, result: &RunResult) {
        self.0.iter_mut().for_each(|o| o.level_end(result));
    }

    /// Closes every output, off the async threads (an exporter's flush blocks).
    pub async fn stop(self, last: Option<&RunResult>) {
        if self.0.is_empty() {
            return;
        }
        // The live endpoint's linger (Ctrl-C cuts it short).
        let linger = self.0.iter().map(|o| o.linger()).max().unwrap_or_default();
        if !linger.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        let last = last.cloned();
        let outs = self.0;
        let _ = tokio::task::spawn_blocking(move || {
            for o in outs {
                o.stop(last.as_ref());
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn free_addr() -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    async fn get_metrics(addr: std::net::SocketAddr) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut out = String::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_string(&mut out)).await;
        out
    }

    /// Two commands in one process each own their outputs: the second configuration is
    /// served, not ignored (it was, with a process-wide listener); stop closes each.
    #[tokio::test]
    async fn two_commands_in_one_process_each_serve_their_own_live_metrics() {
        let mut plan = crate::cli::build::run_plan(crate::cli::build::default_run_args().unwrap()).unwrap();
        let (a, b) = (free_addr(), free_addr());
        plan.live_linger = std::time::Duration::ZERO;
        plan.prometheus_listen = Some(a);
        let first = Outputs::start(&plan).await.unwrap();
        plan.prometheus_listen = Some(b);
        let mut second = Outputs::start(&plan).await.unwrap();
        let row = GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row: Default::default() };
        second.rows(&["agent-b".to_string()], &[&row]);
        assert!(get_metrics(a).await.starts_with("HTTP/1.1 200"));
        let page = get_metrics(b).await;
        assert!(page.starts_with("HTTP/1.1 200") && page.contains("agent-b"), "{page}");
        assert!(!get_metrics(a).await.contains("agent-b"), "each command counts its own rows");
        first.stop(None).await;
        second.stop(None).await;
        // Closed: the listener task has gone (bounded wait).
        let mut closed = false;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(b).await.is_err() {
                closed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(closed, "stop closes the endpoint");
    }

    /// After the run, the endpoint serves the final values for the linger, then closes.
    #[tokio::test]
    async fn the_final_values_stay_served_for_the_linger() {
        let mut plan = crate::cli::build::run_plan(crate::cli::build::default_run_args().unwrap()).unwrap();
        let addr = free_addr();
        plan.prometheus_listen = Some(addr);
        plan.live_linger = std::time::Duration::from_millis(1500);
        let mut out = Outputs::start(&plan).await.unwrap();
        let row = GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row: Default::default() };
        out.rows(&["agent-x".to_string()], &[&row, &row, &row]);
        let t = std::time::Instant::now();
        let stopping = tokio::spawn(async move { out.stop(None).await });
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let page = get_metrics(addr).await;
        assert!(page.contains("agent-x"), "still served after the run: {page}");
        stopping.await.unwrap();
        assert!(t.elapsed() >= std::time::Duration::from_millis(1500), "{:?}", t.elapsed());
        let mut closed = false;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                closed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(closed, "closed after the linger");
    }
}
