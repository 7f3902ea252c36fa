//! GPU telemetry pages (D36): NVIDIA's DCGM exporter and AMD's device metrics exporter,
//! read into one [`GpuReading`] per GPU, every GPU kept apart by its labels (host, index,
//! UUID or serial number, model). Units are made the same: watts, joules, percent, MiB,
//! MHz, degrees Celsius, microseconds.
//!
//! DCGM exporter (its default counters): `DCGM_FI_DEV_POWER_USAGE` (W),
//! `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ since the driver loaded), `DCGM_FI_DEV_GPU_UTIL`
//! (%), `DCGM_FI_DEV_FB_USED` (MiB), `DCGM_FI_DEV_SM_CLOCK` (MHz), `DCGM_FI_DEV_GPU_TEMP`
//! (C), `DCGM_FI_DEV_XID_ERRORS` (the last XID error's number), and when configured
//! `DCGM_FI_DEV_POWER_VIOLATION` / `DCGM_FI_DEV_THERMAL_VIOLATION` (us of throttling);
//! labels `gpu`, `UUID`, `modelName`, `Hostname`.
//!
//! AMD device metrics exporter: `gpu_package_power` or else `gpu_power_usage` (W),
//! `gpu_energy_consumed` (uJ), `gpu_gfx_activity` (%), `gpu_used_vram` (MB),
//! `gpu_clock{clock_type="system"}` (MHz; older releases say `GPU_CLOCK_TYPE_SYSTEM`),
//! `gpu_junction_temperature` (C); labels `gpu_id`, `serial_number`, `card_model`,
//! `hostname`.

use prom_text_format_parser::{Sample, parse_scrape};
use std::collections::BTreeMap;

/// Which exporter a reading came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuSource {
    Dcgm,
    Amd,
    /// NVML read on the GPU host by `surge-agent --gpu nvml`.
    Nvml,
}

impl GpuSource {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuSource::Dcgm => "dcgm",
            GpuSource::Amd => "amd",
            GpuSource::Nvml => "nvml",
        }
    }
}

/// Which GPU: what tells two GPUs apart across hosts and pages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GpuKey {
    pub host: String,
    pub index: u32,
    /// UUID (NVIDIA) or serial number (AMD); "" when the page has none.
    pub uuid: String,
}

/// One GPU at one scrape. `None`: the page does not have it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuReading {
    pub key: GpuKey,
    pub model: String,
    pub source: Option<GpuSource>,
    pub power_w: Option<f64>,
    /// The energy counter, in joules since the counter's own start.
    pub energy_j: Option<f64>,
    pub utilization_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub temperature_c: Option<f64>,
    /// The last XID error's number (0: none yet).
    pub xid: Option<f64>,
    pub power_violation_us: Option<f64>,
    pub thermal_violation_us: Option<f64>,
}

/// What one family of a page sets, and the factor to the reading's unit.
#[derive(Debug, Clone, Copy)]
enum Field {
    Power,
    Energy,
    Utilization,
    Memory,
    SmClock,
    Temperature,
    Xid,
    PowerViolation,
    ThermalViolation,
}

/// (family, field, factor, rank): a lower rank wins when a page has two sources of a field.
const DCGM: [(&str, Field, f64, u8); 9] = [
    ("DCGM_FI_DEV_POWER_USAGE", Field::Power, 1.0, 0),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Field::Energy, 1e-3, 0),
    ("DCGM_FI_DEV_GPU_UTIL", Field::Utilization, 1.0, 0),
    ("DCGM_FI_DEV_FB_USED", Field::Memory, 1.0, 0),
    ("DCGM_FI_DEV_SM_CLOCK", Field::SmClock, 1.0, 0),
    ("DCGM_FI_DEV_GPU_TEMP", Field::Temperature, 1.0, 0),
    ("DCGM_FI_DEV_XID_ERRORS", Field::Xid, 1.0, 0),
    ("DCGM_FI_DEV_POWER_VIOLATION", Field::PowerViolation, 1.0, 0),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", Field::ThermalViolation, 1.0, 0),
];
/// MB (10^6 bytes) in MiB.
const MB_IN_MIB: f64 = 1e6 / 1_048_576.0;
const AMD: [(&str, Field, f64, u8); 6] = [
    ("gpu_package_power", Field::Power, 1.0, 0),
    ("gpu_power_usage", Field::Power, 1.0, 1),
    ("gpu_energy_consumed", Field::Energy, 1e-6, 0),
    ("gpu_gfx_activity", Field::Utilization, 1.0, 0),
    ("gpu_used_vram", Field::Memory, MB_IN_MIB, 0),
    ("gpu_junction_temperature", Field::Temperature, 1.0, 0),
];

fn label<'a>(s: &'a Sample, key: &str) -> Option<&'a str> {
    s.labels.iter().find(|l| l.key == key).map(|l| l.value.as_str())
}

/// The GPU a sample is about, and the exporter's model label.
fn key_of(s: &Sample, source: GpuSource, default_host: &str) -> Option<(GpuKey, String)> {
    let (index, uuid, host, model) = match source {
        GpuSource::Dcgm => ("gpu", "UUID", "Hostname", "modelName"),
        GpuSource::Amd | GpuSource::Nvml => ("gpu_id", "serial_number", "hostname", "card_model"),
    };
    let index = label(s, index)?.parse().ok()?;
    let host = label(s, host).filter(|h| !h.is_empty()).unwrap_or(default_host).to_string();
    let key = GpuKey { host, index, uuid: label(s, uuid).unwrap_or_default().to_string() };
    Some((key, label(s, model).unwrap_or_default().to_string()))
}

fn set(r: &mut GpuReading, field: Field, v: f64) {
    let slot = match field {
        Field::Power => &mut r.power_w,
        Field::Energy => &mut r.energy_j,
        Field::Utilization => &mut r.utilization_pct,
        Field::Memory => &mut r.memory_used_mib,
        Field::SmClock => &mut r.sm_clock_mhz,
        Field::Temperature => &mut r.temperature_c,
        Field::Xid => &mut r.xid,
        Field::PowerViolation => &mut r.power_violation_us,
        Field::ThermalViolation => &mut r.thermal_violation_us,
    };
    *slot = Some(v);
}

/// The GPUs of one exporter page; `default_host` names the host when the page's labels do
/// not (the URL's host). A page with neither exporter's families gives no GPU.
pub fn parse_gpus(text: &str, default_host: &str) -> Vec<GpuReading> {
    let (families, _rejected) = parse_scrape(text);
    let mut gpus: BTreeMap<GpuKey, (GpuReading, BTreeMap<u8, u8>)> = BTreeMap::new();
    for f in &families {
        let known = DCGM
            .iter()
            .map(|d| (GpuSource::Dcgm, *d))
            .chain(AMD.iter().map(|a| (GpuSource::Amd, *a)))
            .find(|(_, (name, ..))| *name == f.name);
        let clock = f.name == "gpu_clock";
        if known.is_none() && !clock {
            continue;
        }
        for s in &f.samples {
            let v = s.value.value.as_f64();
            if !v.is_finite() {
                continue;
            }
            let (source, field, factor, rank) = match known {
                Some((source, (_, field, factor, rank))) => (source, field, factor, rank),
                // AMD's clocks carry their kind in a label: the first system clock.
                None => {
                    let kind = label(s, "clock_type").unwrap_or_default();
                    if !kind.trim_start_matches("GPU_CLOCK_TYPE_").eq_ignore_ascii_case("system") {
                        continue;
                    }
                    let index = label(s, "clock_index").and_then(|i| i.parse::<u8>().ok()).unwrap_or(0);
                    (GpuSource::Amd, Field::SmClock, 1.0, index)
                }
            };
            let Some((key, model)) = key_of(s, source, default_host) else { continue };
            let (r, ranks) = gpus.entry(key.clone()).or_insert_with(|| {
                (GpuReading { key, model, source: Some(source), ..Default::default() }, BTreeMap::new())
            });
            let slot = field as u8;
            if ranks.get(&slot).is_some_and(|&held| held <= rank) {
                continue;
            }
            ranks.insert(slot, rank);
            set(r, field, v * factor);
        }
    }
    gpus.into_values().map(|(r, _)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two GPUs as the DCGM exporter writes its default counters.
    const DCGM_PAGE: &str = "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n\
# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n\
DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-aaa\",pci_bus_id=\"00000000:07:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 1980\n\
DCGM_FI_DEV_SM_CLOCK{gpu=\"1\",UUID=\"GPU-bbb\",pci_bus_id=\"00000000:0F:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 1755\n\
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n\
# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-aaa\",pci_bus_id=\"00000000:07:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 412.5\n\
DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",UUID=\"GPU-bbb\",pci_bus_id=\"00000000:0F:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 98.25\n\
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n\
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-aaa\",pci_bus_id=\"00000000:07:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 123456789\n\
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n\
# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n\
DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-aaa\",pci_bus_id=\"00000000:07:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 0\n";

    #[test]
    fn a_dcgm_page_gives_each_gpu_in_watts_and_joules() {
        let g = parse_gpus(DCGM_PAGE, "10.0.0.5");
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].key, GpuKey { host: "node1".into(), index: 0, uuid: "GPU-aaa".into() });
        assert_eq!(g[0].model, "NVIDIA H100 80GB HBM3");
        assert_eq!((g[0].power_w, g[0].sm_clock_mhz, g[0].xid), (Some(412.5), Some(1980.0), Some(0.0)));
        assert!((g[0].energy_j.unwrap() - 123_456.789).abs() < 1e-6, "mJ to J");
        assert_eq!((g[1].power_w, g[1].energy_j), (Some(98.25), None));
        assert_eq!(g[1].source, Some(GpuSource::Dcgm));
    }

    #[test]
    fn an_amd_page_prefers_package_power_and_reads_the_system_clock() {
        let page = "# HELP gpu_power_usage GPU power usage in Watts\n# TYPE gpu_power_usage gauge\n\
gpu_power_usage{gpu_id=\"0\",serial_number=\"S0\",card_model=\"AMD Instinct MI325X\",hostname=\"mi\"} 700\n\
# HELP gpu_package_power Current socket power in Watts\n# TYPE gpu_package_power gauge\n\
gpu_package_power{gpu_id=\"0\",serial_number=\"S0\",card_model=\"AMD Instinct MI325X\",hostname=\"mi\"} 650\n\
# HELP gpu_energy_consumed Accumulated energy consumed by the GPU in uJ\n# TYPE gpu_energy_consumed gauge\n\
gpu_energy_consumed{gpu_id=\"0\",serial_number=\"S0\",card_model=\"AMD Instinct MI325X\",hostname=\"mi\"} 5e9\n\
# TYPE gpu_clock gauge\n\
gpu_clock{gpu_id=\"0\",clock_index=\"1\",clock_type=\"GPU_CLOCK_TYPE_MEMORY\",serial_number=\"S0\",card_model=\"AMD Instinct MI325X\",hostname=\"mi\"} 1300\n\
gpu_clock{gpu_id=\"0\",clock_index=\"0\",clock_type=\"GPU_CLOCK_TYPE_SYSTEM\",serial_number=\"S0\",card_model=\"AMD Instinct MI325X\",hostname=\"mi\"} 2100\n\
# TYPE gpu_used_vram gauge\n\
gpu_used_vram{gpu_id=\"0\",serial_number=\"S0\",card_model=\"AMD Instinct MI325X\",hostname=\"mi\"} 1048.576\n";
        let g = parse_gpus(page, "x");
        assert_eq!(g.len(), 1);
        assert_eq!((g[0].power_w, g[0].sm_clock_mhz), (Some(650.0), Some(2100.0)));
        assert_eq!(g[0].energy_j, Some(5000.0), "uJ to J");
        assert!((g[0].memory_used_mib.unwrap() - 1000.0).abs() < 1e-9, "MB to MiB");
        assert_eq!(g[0].source, Some(GpuSource::Amd));
    }

    #[test]
    fn a_page_without_gpus_or_labels_gives_nothing() {
        assert!(parse_gpus("# TYPE vllm:x counter\nvllm:x_total 3\n", "h").is_empty());
        assert!(parse_gpus("DCGM_FI_DEV_POWER_USAGE 300\n", "h").is_empty(), "no gpu label: not a GPU");
        for junk in ["", "{{{", "DCGM_FI_DEV_POWER_USAGE{gpu=\"x\"} 1\n"] {
            assert!(parse_gpus(junk, "h").is_empty());
        }
    }
}
