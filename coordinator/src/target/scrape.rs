//! The target's `/metrics` beside a run (D11): scraped here, or by the first
//! agent when the target is reachable only from agents (its scrapes arrive as
//! `ServerMetrics` messages). Either way each scrape reaches the observer as a
//! [`ServerScrape`] on the run's timeline: a baseline after the initial test requests and
//! before the load, one every interval, and one after the last request.

use crate::plan::ScrapePlan;
use std::time::Duration;
use surge_core::scrape::{self, Snapshot};
use surge_proto::ServerMetrics;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One scrape, `t_s` seconds after the run's start (negative: before it).
#[derive(Debug, Clone)]
pub struct ServerScrape {
    pub t_s: f64,
    /// The families found, or why the scrape failed.
    pub result: Result<Snapshot, String>,
    pub baseline: bool,
    pub last: bool,
}

impl ServerScrape {
    /// An agent's scrape; `offset_ns` is its clock minus the coordinator's.
    pub fn from_agent(m: &ServerMetrics, offset_ns: i64, start_ns: i64) -> Self {
        let t_s = (m.scraped_unix_ns - offset_ns - start_ns) as f64 / 1e9;
        let result = if m.error.is_empty() { Ok(scrape::from_proto(m)) } else { Err(m.error.clone()) };
        Self { t_s, result, baseline: m.baseline, last: m.last }
    }
}

/// What to tell the user when the default `{base-url}/metrics` fails before the load:
/// nothing when the server has no such page (HTTP 404: many OpenAI-compatible servers),
/// else why the result will have no server view.
pub fn default_url_failed(err: &str) -> Option<String> {
    (!err.ends_with(": HTTP 404")).then(|| {
        format!("no server view: {err} (--metrics-url URL to scrape another address, --no-scrape-metrics to skip this)")
    })
}

/// One scrape of the plan's URLs, bounded by the interval (at most 5 s).
pub async fn once(plan: &ScrapePlan) -> Result<Snapshot, String> {
    scrape::scrape(&plan.urls, &plan.extra, plan.interval.min(Duration::from_secs(5)), None, &plan.tls.client()).await
}

/// Scrapes every interval until `stop`, sending each result with the time it was taken
/// (seconds after `start_ns`).
pub async fn periodic(plan: ScrapePlan, start_ns: i64, tx: mpsc::Sender<ServerScrape>, stop: CancellationToken) {
    every(plan.interval, start_ns, tx, stop, |t_s| {
        let plan = plan.clone();
        async move { ServerScrape { t_s, result: once(&plan).await, baseline: false, last: false } }
    })
    .await;
}

/// Every `interval` (the first one after one interval) until `stop`: `take(t_s)`, with
/// `t_s` the seconds since `start_ns`, sent to `tx`.
pub async fn every<T, F, Fut>(interval: Duration, start_ns: i64, tx: mpsc::Sender<T>, stop: CancellationToken, take: F)
where
    F: Fn(f64) -> Fut,
    Fut: Future<Output = T>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let taken = take((crate::clock::now_ns() - start_ns) as f64 / 1e9).await;
        if stop.is_cancelled() || tx.send(taken).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_default_metrics_page_is_told_unless_the_server_has_none() {
        assert_eq!(default_url_failed("http://127.0.0.1:8000/metrics: HTTP 404"), None);
        let told = default_url_failed("http://127.0.0.1:8000/metrics: no answer within 1s").unwrap();
        assert!(told.starts_with("no server view: http://127.0.0.1:8000/metrics: no answer within 1s"), "{told}");
        assert!(told.contains("--metrics-url") && told.contains("--no-scrape-metrics"), "{told}");
        assert!(default_url_failed("http://h/metrics: HTTP 500").is_some());
    }
}
