//! `--profile` (vllm-bench's): the server's profiler around the load. Started once every
//! agent is ready (the warm-ups done), before the start instant: at once, or with
//! `--profile-batch-threshold T` when the server's `vllm:num_requests_running` first
//! reaches T (its `/metrics` read every 500 ms), then stopped after `--profile-duration`
//! or at the end of the load, whichever comes first. The profiler's answers are the run's
//! notices; a server that refuses it does not fail the run.

use crate::plan::ProfilePlan;
use std::time::Duration;
use surge_core::client;
use surge_core::transport::tls::TargetTls;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the running batch is read in threshold mode.
const POLL: Duration = Duration::from_millis(500);
/// How long one profiler call may take.
const CALL: Duration = Duration::from_secs(30);

/// A profiler started, or waiting for its batch.
pub struct Profiler {
    base_url: String,
    tls: TargetTls,
    /// Threshold mode: the watcher and what it says; immediate mode: `None`.
    watcher: Option<(JoinHandle<Vec<String>>, CancellationToken)>,
    started: bool,
}

/// `POST base_url + path`: a notice of how it went.
async fn call(tls: &TargetTls, base_url: &str, path: &str) -> Result<(), String> {
    match client::post_empty(tls, base_url, path, CALL).await {
        Ok(r) if (200..300).contains(&r.status) => Ok(()),
        Ok(r) => Err(format!(
            "--profile: POST {base_url}{path} answered HTTP {}: {} (vLLM serves it when started with a profiler, e.g. --profiler-config)",
            r.status,
            String::from_utf8_lossy(&r.body).trim()
        )),
        Err(e) => Err(format!("--profile: POST {base_url}{path} failed: {e}")),
    }
}

/// The server's requests running now (`vllm:num_requests_running`, summed over engines).
async fn running(tls: &TargetTls, base_url: &str) -> Option<f64> {
    let url = format!("{base_url}/metrics");
    let want = ["vllm:num_requests_running".to_string()];
    let snap = surge_core::scrape::scrape(&[url], &want, CALL, None, tls).await.ok()?;
    match snap.get("vllm:num_requests_running")? {
        surge_core::scrape::Metric::Gauge(v) | surge_core::scrape::Metric::Counter(v) => Some(*v),
        surge_core::scrape::Metric::Histogram(_) => None,
    }
}

impl Profiler {
    /// Starts the profiler (immediate mode) or its watcher (threshold mode); `notices`
    /// gets what to tell the user now.
    pub async fn start(plan: &ProfilePlan, base_url: &str, tls: TargetTls, notices: &mut Vec<String>) -> Self {
        let base_url = base_url.to_string();
        let Some(threshold) = plan.batch_threshold else {
            let started = match call(&tls, &base_url, "/start_profile").await {
                Ok(()) => {
                    notices.push("profiler started".into());
                    true
                }
                Err(e) => {
                    notices.push(e);
                    false
                }
            };
            return Self { base_url, tls, watcher: None, started };
        };
        let secs = plan.duration.as_secs_f64();
        notices.push(format!(
            "--profile: waiting for {threshold} requests running on the server before starting the profiler (it captures {secs}s)"
        ));
        let stop = CancellationToken::new();
        let (url, t, token) = (base_url.clone(), tls.clone(), stop.clone());
        let duration = plan.duration;
        let task = tokio::spawn(async move {
            let mut said = Vec::new();
            loop {
                if let Some(n) = running(&t, &url).await
                    && n >= f64::from(threshold)
                {
                    said.push(format!("--profile: {n} requests running >= {threshold}: profiler started"));
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    () = token.cancelled() => {
                        said.push(format!("--profile: the load ended before {threshold} requests were running; no profile taken"));
                        return said;
                    }
                }
            }
            if let Err(e) = call(&t, &url, "/start_profile").await {
                said.push(e);
                return said;
            }
            tokio::select! {
                () = tokio::time::sleep(duration) => said.push(format!("--profile: profiler stopped after {}s", duration.as_secs_f64())),
                () = token.cancelled() => said.push("--profile: the load ended first; profiler stopped early".into()),
            }
            if let Err(e) = call(&t, &url, "/stop_profile").await {
                said.push(e);
            }
            said
        });
        Self { base_url, tls, watcher: Some((task, stop)), started: false }
    }

    /// Stops the profiler at the end of the load; what to tell the user.
    pub async fn stop(mut self) -> Vec<String> {
        match self.watcher.take() {
            Some((task, stop)) => {
                stop.cancel();
                task.await.unwrap_or_else(|e| vec![format!("--profile: the profiler's watcher failed: {e}")])
            }
            None if self.started => match call(&self.tls, &self.base_url, "/stop_profile").await {
                Ok(()) => vec!["profiler stopped".into()],
                Err(e) => vec![e],
            },
            None => Vec::new(),
        }
    }
}

impl Drop for Profiler {
    /// A run that failed ends the watcher too (the profiler, if started, is left to the
    /// server: no request is sent from a destructor).
    fn drop(&mut self) {
        if let Some((_, stop)) = &self.watcher {
            stop.cancel();
        }
    }
}
