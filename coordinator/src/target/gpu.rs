//! GPU exporter pages beside a run (D36): scraped by the coordinator before the load (the
//! baseline), every `--scrape-interval`, and after the last request, each reaching the
//! observer as a [`GpuScrape`] on the run's timeline.

use crate::plan::GpuPlan;
use std::time::Duration;
use surge_core::scrape::{self, GpuKey, GpuReading, GpuSource};
use surge_proto::GpuSamples;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One scrape of every page, `t_s` seconds after the run's start (negative: before it).
#[derive(Debug, Clone)]
pub struct GpuScrape {
    pub t_s: f64,
    /// Every GPU of every page, or why a page failed.
    pub result: Result<Vec<GpuReading>, String>,
}

impl GpuScrape {
    /// An agent's own reading (`surge-agent --gpu nvml`); `offset_ns` is its clock minus
    /// the coordinator's; its GPUs are named by the agent's `host`.
    pub fn from_agent(g: &GpuSamples, host: &str, offset_ns: i64, start_ns: i64) -> Self {
        let t_s = (g.sampled_unix_ns - offset_ns - start_ns) as f64 / 1e9;
        let readings = g
            .gpus
            .iter()
            .map(|s| GpuReading {
                key: GpuKey { host: host.to_string(), index: s.index, uuid: s.uuid.clone() },
                model: s.model.clone(),
                source: Some(GpuSource::Nvml),
                power_w: s.power_w,
                energy_j: s.energy_j,
                utilization_pct: s.utilization_pct,
                memory_used_mib: s.memory_used_mib,
                sm_clock_mhz: s.sm_clock_mhz,
                temperature_c: s.temperature_c,
                ..Default::default()
            })
            .collect();
        Self { t_s, result: Ok(readings) }
    }
}

/// One scrape of the plan's pages, bounded by the interval (at most 5 s).
pub async fn once(plan: &GpuPlan) -> Result<Vec<GpuReading>, String> {
    scrape::scrape_gpus(&plan.urls, plan.interval.min(Duration::from_secs(5)), &plan.tls.client()).await
}

/// Scrapes every interval until `stop`, sending each result with its time.
pub async fn periodic(plan: GpuPlan, start_ns: i64, tx: mpsc::Sender<GpuScrape>, stop: CancellationToken) {
    super::scrape::every(plan.interval, start_ns, tx, stop, |t_s| {
        let plan = plan.clone();
        async move { GpuScrape { t_s, result: once(&plan).await } }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::GpuSample;

    #[test]
    fn an_agents_reading_lands_on_the_runs_timeline_under_its_host() {
        let g = GpuSamples {
            run_id: 1,
            sampled_unix_ns: 5_500_000_000,
            gpus: vec![GpuSample { index: 1, uuid: "GPU-x".into(), power_w: Some(250.0), ..Default::default() }],
        };
        // The agent's clock is 0.5 s ahead; the run started at 4 s (coordinator clock).
        let s = GpuScrape::from_agent(&g, "gpu-node", 500_000_000, 4_000_000_000);
        assert!((s.t_s - 1.0).abs() < 1e-9, "{}", s.t_s);
        let r = s.result.unwrap();
        assert_eq!(r[0].key, GpuKey { host: "gpu-node".into(), index: 1, uuid: "GPU-x".into() });
        assert_eq!((r[0].source, r[0].power_w), (Some(GpuSource::Nvml), Some(250.0)));
    }
}
