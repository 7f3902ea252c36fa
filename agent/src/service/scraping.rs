//! The target's `/metrics`, scraped by this agent for its run when the workload asks
//! (D11): once before the load (the baseline), every interval while it runs, and
//! once after its last request, each as a [`ServerMetrics`] message.

use crate::engine::tls::TargetTls;
use crate::scrape;
use std::time::Duration;
use surge_proto::{ServerMetrics, Workload};
use tokio_util::sync::CancellationToken;

/// What to scrape for one run.
#[derive(Debug, Clone)]
pub(super) struct Job {
    run_id: u64,
    urls: Vec<String>,
    extra: Vec<String>,
    interval: Duration,
    local: Option<std::net::IpAddr>,
    /// The target's TLS settings: `/metrics` is verified as the load is.
    tls: TargetTls,
}

impl Job {
    /// The workload's scraping, if it asks for any.
    pub fn of(run_id: u64, w: &Workload, local: Option<std::net::IpAddr>) -> Option<Self> {
        (!w.scrape_urls.is_empty()).then(|| Self {
            run_id,
            urls: w.scrape_urls.clone(),
            extra: w.scrape_metrics.clone(),
            interval: Duration::from_millis(w.scrape_interval_ms.max(100)),
            local,
            tls: TargetTls::of(w),
        })
    }

    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// One scrape; a failure is a message with its reason.
    pub async fn once(&self, baseline: bool, last: bool) -> ServerMetrics {
        let scraped_unix_ns = super::session::Now::read().unix_ns;
        // Bounded well within the interval, so scrapes never pile up.
        let timeout = self.interval.min(Duration::from_secs(5));
        let (metrics, error) = match scrape::scrape(&self.urls, &self.extra, timeout, self.local, &self.tls).await {
            Ok(s) => (scrape::to_proto(&s), String::new()),
            Err(e) => (Vec::new(), e),
        };
        ServerMetrics { run_id: self.run_id, scraped_unix_ns, metrics, error, baseline, last, dropped_before: 0 }
    }

    /// A scrape that did not happen, with why.
    pub fn failed(&self, why: &str, baseline: bool) -> ServerMetrics {
        let scraped_unix_ns = super::session::Now::read().unix_ns;
        ServerMetrics { run_id: self.run_id, scraped_unix_ns, error: why.into(), baseline, ..Default::default() }
    }

    /// Scrapes every interval until `stop`, handing each to `send`.
    pub async fn periodic(&self, stop: CancellationToken, send: impl Fn(ServerMetrics)) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let m = self.once(false, false).await;
            if stop.is_cancelled() {
                return;
            }
            send(m);
        }
    }
}
