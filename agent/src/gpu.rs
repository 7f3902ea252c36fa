//! `surge-agent --gpu nvml` (D36): the GPUs of this host read through NVML, which
//! `nvml-wrapper` loads at run time (`libnvidia-ml.so.1`), so building surge needs no CUDA
//! and a host without the library or a GPU gets a clear reason, not a failed start.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use surge_proto::GpuSample;

/// The host's GPUs, open through NVML.
pub struct GpuReader {
    nvml: Nvml,
    count: u32,
}

impl std::fmt::Debug for GpuReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuReader").field("gpus", &self.count).finish()
    }
}

impl GpuReader {
    /// Loads NVML and counts the GPUs; why not, when it cannot (no library, no driver, no
    /// GPU).
    pub fn load() -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|e| format!("NVML could not be loaded ({e})"))?;
        let count = nvml.device_count().map_err(|e| format!("NVML could not count the GPUs ({e})"))?;
        if count == 0 {
            return Err("NVML found no GPU on this host".into());
        }
        Ok(Self { nvml, count })
    }

    /// GPUs on this host.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// One reading of every GPU: watts, joules since the driver loaded, percent, MiB, MHz,
    /// degrees Celsius; a value NVML cannot give on this GPU is left out.
    pub fn read(&self) -> Vec<GpuSample> {
        (0..self.count)
            .filter_map(|index| {
                let d = self.nvml.device_by_index(index).ok()?;
                Some(GpuSample {
                    index,
                    uuid: d.uuid().unwrap_or_default(),
                    model: d.name().unwrap_or_default(),
                    power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                    energy_j: d.total_energy_consumption().ok().map(|mj| mj as f64 / 1000.0),
                    utilization_pct: d.utilization_rates().ok().map(|u| f64::from(u.gpu)),
                    memory_used_mib: d.memory_info().ok().map(|m| m.used as f64 / 1_048_576.0),
                    sm_clock_mhz: d.clock_info(Clock::SM).ok().map(f64::from),
                    temperature_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                })
            })
            .collect()
    }
}
