//! GPU exporter pages beside a run (D36): scraped by the coordinator before the load (the
//! baseline), every `--scrape-interval`, and after the last request, each reaching the
//! observer as a [`GpuScrape`] on the run's timeline.

use crate::plan::GpuPlan;
use std::time::Duration;
use surge_agent::scrape::{self, GpuReading};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One scrape of every page, `t_s` seconds after the run's start (negative: before it).
#[derive(Debug, Clone)]
pub struct GpuScrape {
    pub t_s: f64,
    /// Every GPU of every page, or why a page failed.
    pub result: Result<Vec<GpuReading>, String>,
}

/// One scrape of the plan's pages, bounded by the interval (at most 5 s).
pub async fn once(plan: &GpuPlan) -> Result<Vec<GpuReading>, String> {
    scrape::scrape_gpus(&plan.urls, plan.interval.min(Duration::from_secs(5)), &plan.tls.client()).await
}

/// Scrapes every interval until `stop`, sending each result with its time.
pub async fn periodic(plan: GpuPlan, start_ns: i64, tx: mpsc::Sender<GpuScrape>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(plan.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let t_s = (super::now_ns() - start_ns) as f64 / 1e9;
        let result = once(&plan).await;
        if stop.is_cancelled() || tx.send(GpuScrape { t_s, result }).await.is_err() {
            return;
        }
    }
}
