//! GPU telemetry over a level (D36), from GPU exporter pages scraped beside the run: per
//! GPU (kept apart by host, index and UUID), the energy over the measured window, power,
//! utilization, memory, SM clock and temperature (mean and max), XID errors as events, and
//! the power and thermal violation counters' increase; per time slice, the energy and the
//! mean power of all GPUs. Memory: per GPU, the last sample and a few recent points of its
//! energy curve; per slice, two numbers (like the time series). Nothing grows with the
//! run's length beyond the slices.
//!
//! Energy: between two scrapes, the energy counter's increase (DCGM's total energy, AMD's
//! energy consumed); where there is no counter, or the counter went back (a reset: a
//! driver reload, a wrap), the power integrated over the gap (trapezoids). The window's
//! energy is the curve read at the window's ends, each interpolated between the scrapes
//! around it (the baseline scrape precedes the load, the last one follows it).

use super::fold::{Fold, Whole};
use super::grid::{Grid, Merge, Slices};
use super::server::GaugeStats;
use crate::target::gpu::GpuScrape;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use surge_core::scrape::{GpuKey, GpuReading};

/// Points of a GPU's energy curve kept to read it at the window's end.
const RECENT: usize = 64;
/// XID events kept per GPU (the count goes on).
const XID_EVENTS: usize = 16;

/// A mean and a max folded sample by sample.
#[derive(Debug, Clone, Copy, Default)]
struct Gauge {
    sum: f64,
    n: u64,
    max: f64,
}

impl Gauge {
    fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.max = if self.n == 0 { v } else { self.max.max(v) };
            self.sum += v;
            self.n += 1;
        }
    }

    fn merge(&mut self, o: &Self) {
        if o.n > 0 {
            self.max = if self.n == 0 { o.max } else { self.max.max(o.max) };
            self.sum += o.sum;
            self.n += o.n;
        }
    }

    fn stats(&self) -> Option<GaugeStats> {
        (self.n > 0).then(|| GaugeStats { mean: self.sum / self.n as f64, max: self.max })
    }
}

/// A counter's increase over the level, across resets.
#[derive(Debug, Clone, Copy, Default)]
struct Increase {
    last: Option<f64>,
    total: f64,
}

impl Increase {
    fn add(&mut self, v: Option<f64>) {
        let Some(v) = v.filter(|v| v.is_finite()) else { return };
        if let Some(last) = self.last {
            self.total += if v >= last { v - last } else { v };
        }
        self.last = Some(v);
    }
}

/// One XID error seen: its number and when (seconds into the run).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct XidEvent {
    pub t_s: f64,
    pub xid: u32,
}

/// One GPU over the level.
#[derive(Debug, Clone, Default)]
struct Track {
    model: String,
    source: &'static str,
    /// The previous scrape: its time, power and energy counter.
    prev: Option<(f64, Option<f64>, Option<f64>)>,
    /// Energy since the first scrape (J), and its recent points (t, energy).
    cum_j: f64,
    recent: VecDeque<(f64, f64)>,
    /// The curve at the run's start (interpolated), once a scrape after it came.
    at_start: Option<f64>,
    from_counter: u64,
    from_power: u64,
    resets: u32,
    power: Gauge,
    utilization: Gauge,
    memory: Gauge,
    clock: Gauge,
    temperature: Gauge,
    last_xid: f64,
    xids: Vec<XidEvent>,
    xid_count: u64,
    power_violation: Increase,
    thermal_violation: Increase,
}

impl Track {
    /// Folds one scrape at `t`; the energy of the gap since the previous one goes to
    /// `slices` in proportion to their overlap.
    fn add(&mut self, t: f64, r: &GpuReading, slices: &mut Slices<SliceSum>) {
        if let Some((t0, p0, e0)) = self.prev
            && t > t0
        {
            let counted = match (e0, r.energy_j) {
                (Some(a), Some(b)) if b >= a => Some(b - a),
                (Some(_), Some(_)) => {
                    self.resets += 1;
                    None
                }
                _ => None,
            };
            let joules = counted.or_else(|| match (p0, r.power_w) {
                (Some(a), Some(b)) => Some((a + b) / 2.0 * (t - t0)),
                (Some(a), None) | (None, Some(a)) => Some(a * (t - t0)),
                (None, None) => None,
            });
            if let Some(j) = joules {
                if counted.is_some() {
                    self.from_counter += 1;
                } else {
                    self.from_power += 1;
                }
                if t0 < 0.0 && t >= 0.0 {
                    self.at_start = Some(self.cum_j + j * (-t0) / (t - t0));
                }
                spread(slices, t0, t, j);
                self.cum_j += j;
            }
        }
        if self.prev.is_none() && t >= 0.0 {
            // No scrape before the load: the window starts at this one.
            self.at_start = Some(0.0);
        }
        self.prev = Some((t, r.power_w, r.energy_j));
        self.recent.push_back((t, self.cum_j));
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
        if t < 0.0 {
            return;
        }
        self.power.add(r.power_w);
        self.utilization.add(r.utilization_pct);
        self.memory.add(r.memory_used_mib);
        self.clock.add(r.sm_clock_mhz);
        self.temperature.add(r.temperature_c);
        if let Some(x) = r.xid.filter(|x| x.is_finite()) {
            if x > 0.0 && x != self.last_xid {
                self.xid_count += 1;
                if self.xids.len() < XID_EVENTS {
                    self.xids.push(XidEvent { t_s: t, xid: x as u32 });
                }
            }
            self.last_xid = x;
        }
        self.power_violation.add(r.power_violation_us);
        self.thermal_violation.add(r.thermal_violation_us);
    }

    /// The energy curve at `t`, interpolated between the recent points around it.
    fn cum_at(&self, t: f64) -> f64 {
        let mut before: Option<(f64, f64)> = None;
        for &(tp, e) in &self.recent {
            if tp >= t {
                return match before {
                    Some((tb, eb)) if tp > tb => eb + (e - eb) * (t - tb) / (tp - tb),
                    _ => e,
                };
            }
            before = Some((tp, e));
        }
        before.map_or(0.0, |(_, e)| e)
    }
}

/// Energy of all GPUs in one slice, and their utilization samples.
#[derive(Debug, Clone, Copy, Default)]
struct SliceSum {
    energy_j: f64,
    utilization: Gauge,
}

impl Merge for SliceSum {
    fn merge(&mut self, o: Self) {
        self.energy_j += o.energy_j;
        self.utilization.merge(&o.utilization);
    }
}

/// Adds `j` joules spent evenly over `[t0, t1]` to the slices it overlaps (from 0 on).
fn spread(slices: &mut Slices<SliceSum>, t0: f64, t1: f64, j: f64) {
    let (a, b) = (t0.max(0.0), t1);
    if b <= a {
        return;
    }
    let rate = j / (t1 - t0);
    // The grid widened for the gap's end first, so every slice of it is at one width.
    slices.index(b);
    let slice_s = slices.width_s();
    let mut k = (a / slice_s).floor() as i64;
    while (k as f64) * slice_s < b {
        let lo = a.max(k as f64 * slice_s);
        let hi = b.min((k + 1) as f64 * slice_s);
        if hi > lo {
            slices.slot(k).energy_j += rate * (hi - lo);
        }
        k += 1;
    }
}

/// One GPU in `gpu_metrics.gpus`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuEntry {
    pub host: String,
    pub gpu: u32,
    pub uuid: String,
    pub model: String,
    /// `dcgm`, `amd` or `nvml`.
    pub source: String,
    /// Energy over the measured window (J).
    pub energy_j: f64,
    /// `counter` (the exporter's energy counter), `power` (power integrated over time),
    /// or `counter+power` (the counter, with gaps it could not cover integrated).
    pub energy_from: String,
    /// Times the energy counter went back (a reset or a wrap), each gap integrated.
    pub counter_resets: u32,
    pub power_w: Option<GaugeStats>,
    pub utilization_pct: Option<GaugeStats>,
    pub memory_used_mib: Option<GaugeStats>,
    pub sm_clock_mhz: Option<GaugeStats>,
    pub temperature_c: Option<GaugeStats>,
    /// XID errors seen during the level (the first 16), and how many.
    pub xid_errors: Vec<XidEvent>,
    pub xid_error_count: u64,
    /// Time the GPU was throttled for power / heat during the level (ms; absent when
    /// the page has no such counter).
    pub power_violation_ms: Option<f64>,
    pub thermal_violation_ms: Option<f64>,
}

/// `gpu_metrics` in the result.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuMetrics {
    pub scrapes: u64,
    pub failed_scrapes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The window the energy covers: the run's duration (its start to the last completion).
    pub window_s: f64,
    /// Every GPU's energy over the window (J), and that over the window's length (W).
    pub total_energy_j: f64,
    pub average_power_w: f64,
    /// The highest power of all GPUs together at one scrape (W).
    pub peak_power_w: f64,
    pub gpus: Vec<GpuEntry>,
}

/// Per slice of the time series: the GPUs' energy (J), mean power (W) and mean
/// utilization (%).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSlice {
    pub energy_j: f64,
    pub power_w: f64,
    pub utilization_pct: Option<f64>,
}

/// Scrapes folded as they arrive.
#[derive(Debug)]
pub struct GpuView {
    gpus: BTreeMap<GpuKey, Track>,
    slices: Slices<SliceSum>,
    scrapes: u64,
    failed: u64,
    last_error: Option<String>,
    peak_power_w: f64,
}

impl GpuView {
    pub fn new(grid: Grid) -> Self {
        Self {
            gpus: BTreeMap::new(),
            slices: Slices::new(grid),
            scrapes: 0,
            failed: 0,
            last_error: None,
            peak_power_w: 0.0,
        }
    }

    pub fn add(&mut self, s: &GpuScrape) {
        self.scrapes += 1;
        let readings = match &s.result {
            Ok(r) => r,
            Err(e) => {
                self.failed += 1;
                self.last_error = Some(e.clone());
                return;
            }
        };
        let mut power = 0.0;
        for r in readings {
            let track = self.gpus.entry(r.key.clone()).or_insert_with(|| Track {
                model: r.model.clone(),
                source: r.source.map_or("", |s| s.as_str()),
                ..Default::default()
            });
            track.add(s.t_s, r, &mut self.slices);
            power += r.power_w.unwrap_or(0.0);
            if s.t_s >= 0.0 {
                self.slices.at(s.t_s).utilization.add(r.utilization_pct);
            }
        }
        if s.t_s >= 0.0 {
            self.peak_power_w = self.peak_power_w.max(power);
        }
    }

    /// The level's GPU view over the window `[0, window_s]`, and one entry per time-series
    /// slice (`slices` of them); `None` when no page was ever read.
    pub fn finish(self, window_s: f64, slices: usize) -> Option<(GpuMetrics, Vec<GpuSlice>)> {
        if self.scrapes == 0 {
            return None;
        }
        let mut gpus = Vec::new();
        for (key, t) in &self.gpus {
            let start = t.at_start.unwrap_or_else(|| t.recent.front().map_or(0.0, |p| p.1));
            let energy_j = (t.cum_at(window_s) - start).max(0.0);
            let energy_from = match (t.from_counter, t.from_power) {
                (_, 0) => "counter",
                (0, _) => "power",
                _ => "counter+power",
            };
            gpus.push(GpuEntry {
                host: key.host.clone(),
                gpu: key.index,
                uuid: key.uuid.clone(),
                model: t.model.clone(),
                source: t.source.to_string(),
                energy_j,
                energy_from: energy_from.to_string(),
                counter_resets: t.resets,
                power_w: t.power.stats(),
                utilization_pct: t.utilization.stats(),
                memory_used_mib: t.memory.stats(),
                sm_clock_mhz: t.clock.stats(),
                temperature_c: t.temperature.stats(),
                xid_errors: t.xids.clone(),
                xid_error_count: t.xid_count,
                power_violation_ms: t.power_violation.last.map(|_| t.power_violation.total / 1000.0),
                thermal_violation_ms: t.thermal_violation.last.map(|_| t.thermal_violation.total / 1000.0),
            });
        }
        let total_energy_j: f64 = gpus.iter().map(|g| g.energy_j).sum();
        let (kept, slice_s) = self.slices.finish();
        let per_slice = (0..slices as i64)
            .map(|k| {
                let s = kept.get(&k).copied().unwrap_or_default();
                GpuSlice {
                    energy_j: s.energy_j,
                    power_w: s.energy_j / slice_s,
                    utilization_pct: s.utilization.stats().map(|g| g.mean),
                }
            })
            .collect();
        let metrics = GpuMetrics {
            scrapes: self.scrapes,
            failed_scrapes: self.failed,
            last_error: self.last_error,
            window_s,
            total_energy_j,
            average_power_w: if window_s > 0.0 { total_energy_j / window_s } else { 0.0 },
            peak_power_w: self.peak_power_w,
            gpus,
        };
        Some((metrics, per_slice))
    }
}

/// GPU telemetry over the run's window: nothing for a run that sent nothing.
impl Fold for GpuView {
    type Out = Option<(GpuMetrics, Vec<GpuSlice>)>;
    fn gpu(&mut self, s: &GpuScrape) {
        self.add(s);
    }
    fn finish(self, run: &Whole) -> Self::Out {
        if run.sends == 0 {
            return None;
        }
        GpuView::finish(self, run.duration_s, run.slices)
    }
}

/// Energy beside tokens: joules per output token and per request, tokens per joule, and
/// with a price per kWh the energy cost of a million output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Efficiency {
    pub energy_per_output_token_j: Option<f64>,
    pub energy_per_request_j: Option<f64>,
    pub output_tokens_per_joule: Option<f64>,
    pub energy_cost_per_million_output_tokens: Option<f64>,
}

/// Joules in a kWh.
const J_PER_KWH: f64 = 3.6e6;

impl Efficiency {
    pub fn of(energy_j: f64, output_tokens: u64, completed: u64, price_kwh: Option<f64>) -> Self {
        let per = |n: u64| (n > 0 && energy_j > 0.0).then(|| energy_j / n as f64);
        let per_token = per(output_tokens);
        Self {
            energy_per_output_token_j: per_token,
            energy_per_request_j: per(completed),
            output_tokens_per_joule: per_token.map(|j| 1.0 / j),
            energy_cost_per_million_output_tokens: per_token.zip(price_kwh).map(|(j, p)| j * 1e6 / J_PER_KWH * p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_core::scrape::GpuSource;

    fn reading(index: u32, power: f64, energy: Option<f64>) -> GpuReading {
        GpuReading {
            key: GpuKey { host: "h".into(), index, uuid: format!("GPU-{index}") },
            source: Some(GpuSource::Dcgm),
            power_w: Some(power),
            energy_j: energy,
            utilization_pct: Some(50.0),
            ..Default::default()
        }
    }

    fn scrape(t_s: f64, r: Vec<GpuReading>) -> GpuScrape {
        GpuScrape { t_s, result: Ok(r) }
    }

    #[test]
    fn the_window_reads_the_counter_between_the_scrapes_around_its_ends() {
        // 300 W on a counter from t = -0.5 to 10.5; the window is [0, 10]: 3000 J.
        let mut v = GpuView::new(Grid::new(1.0));
        for k in 0..=11 {
            let t = -0.5 + f64::from(k);
            v.add(&scrape(t, vec![reading(0, 300.0, Some(1e6 + 300.0 * (t + 0.5)))]));
        }
        let (m, slices) = v.finish(10.0, 10).unwrap();
        assert!((m.total_energy_j - 3000.0).abs() < 1e-6, "{}", m.total_energy_j);
        assert!((m.average_power_w - 300.0).abs() < 1e-9);
        assert_eq!(m.gpus[0].energy_from, "counter");
        assert!(slices.iter().all(|s| (s.energy_j - 300.0).abs() < 1e-6 && (s.power_w - 300.0).abs() < 1e-6));
        let e = Efficiency::of(m.total_energy_j, 1500, 100, Some(0.12));
        assert_eq!(e.energy_per_output_token_j, Some(2.0));
        assert_eq!(e.energy_per_request_j, Some(30.0));
        assert_eq!(e.output_tokens_per_joule, Some(0.5));
        // 2 J a token: 2e6 J (0.5556 kWh) a million, at 0.12 USD.
        assert!((e.energy_cost_per_million_output_tokens.unwrap() - 2e6 / 3.6e6 * 0.12).abs() < 1e-12);
    }

    /// Read past MOST_SLICES slices of 1 s, each slice's energy and utilization end as
    /// those of a view planned at 2 s, the energy of a gap across slices included.
    #[test]
    fn a_view_widened_past_the_bound_equals_one_planned_wide() {
        let seconds = super::super::grid::MOST_SLICES as u32 + 300;
        let view = |base: f64| {
            let mut v = GpuView::new(Grid::new(base));
            let mut e = 0.0;
            for k in 0..seconds * 2 / 3 {
                let t = f64::from(k) * 1.5 + 0.25;
                e += f64::from(100 + k % 11);
                let mut r = reading(0, 200.0, Some(e));
                r.utilization_pct = Some(f64::from(k % 4 * 10));
                v.add(&scrape(t, vec![r]));
            }
            v.finish(f64::from(seconds), seconds as usize / 2).unwrap().1
        };
        let (narrow, wide) = (view(1.0), view(2.0));
        assert_eq!(narrow.len(), wide.len());
        for (n, w) in narrow.iter().zip(&wide) {
            assert!((n.energy_j - w.energy_j).abs() < 1e-9 * w.energy_j.max(1.0), "{n:?} {w:?}");
            assert!((n.power_w - w.power_w).abs() < 1e-9 * w.power_w.max(1.0), "{n:?} {w:?}");
            assert_eq!(n.utilization_pct, w.utilization_pct);
        }
        assert!(narrow[100].energy_j > 0.0 && narrow[100].utilization_pct.is_some());
    }

    #[test]
    fn a_counter_reset_and_a_page_without_counter_fall_back_to_power() {
        let mut v = GpuView::new(Grid::new(1.0));
        // GPU 0: counter reset to 0 between t = 4.5 and 5.5 (its gap integrated from power);
        // GPU 1: power only, 100 W.
        for k in 0..=11 {
            let t = -0.5 + f64::from(k);
            let e0 = if t < 5.0 { 5e5 + 200.0 * (t + 0.5) } else { 200.0 * (t - 5.0) };
            v.add(&scrape(t, vec![reading(0, 200.0, Some(e0)), reading(1, 100.0, None)]));
        }
        let (m, _) = v.finish(10.0, 10).unwrap();
        let g0 = &m.gpus[0];
        assert_eq!((g0.counter_resets, g0.energy_from.as_str()), (1, "counter+power"));
        assert!((g0.energy_j - 2000.0).abs() < 1e-6, "{}", g0.energy_j);
        assert_eq!(m.gpus[1].energy_from, "power");
        assert!((m.gpus[1].energy_j - 1000.0).abs() < 1e-6, "{}", m.gpus[1].energy_j);
        assert!((m.peak_power_w - 300.0).abs() < 1e-9);
    }

    #[test]
    fn xid_errors_are_events_and_failed_scrapes_are_counted() {
        let mut v = GpuView::new(Grid::new(1.0));
        let with_xid = |t: f64, x: f64| {
            let mut r = reading(0, 100.0, None);
            r.xid = Some(x);
            scrape(t, vec![r])
        };
        v.add(&with_xid(0.0, 0.0));
        v.add(&with_xid(1.0, 79.0));
        v.add(&with_xid(2.0, 79.0));
        v.add(&GpuScrape { t_s: 3.0, result: Err("http://h:9400/metrics: HTTP 500".into()) });
        let (m, _) = v.finish(2.0, 2).unwrap();
        assert_eq!(m.gpus[0].xid_errors, vec![XidEvent { t_s: 1.0, xid: 79 }]);
        assert_eq!((m.scrapes, m.failed_scrapes), (4, 1));
        assert!(m.last_error.unwrap().contains("HTTP 500"));
    }
}
