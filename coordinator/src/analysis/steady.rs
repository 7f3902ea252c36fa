//! Steady state (D45): the part of a run where the load is what was asked, without its
//! ramp-up and its drain, and the throughput and latency measured over it.
//!
//! - Closed loop (`--max-concurrency C`, no rate): vllm-bench's window. Over the
//!   successful requests' starts and ends (an end before a start at the same instant),
//!   the window opens at the first time the requests in flight reach
//!   `ceil(threshold x C)` and closes at the last time they fall below it (the last end
//!   when they never do); it is half-open, `[start, end)`.
//! - Open loop (a finite `--request-rate R`): the window spans the time slices
//!   (`--timeslice`) whose completions per second are within 5 % of `R`, from the first
//!   such slice to the end of the last.
//!
//! Over the window: requests completed in it per second, the input tokens of the
//! requests started in it, output tokens by their arrival time, and TTFT and TPOT of the
//! requests started in it. A token's time is exact for the requests wholly inside the
//! window; a request that straddles an edge has its token events spread evenly between
//! its first and its last (exact when its ITL is constant). The records are spilled as
//! the run goes (one fixed-size record per successful request), so memory does not grow
//! with the run's length, and read back a chunk at a time at its end: beyond one chunk,
//! only their starts and ends, and the TTFTs and TPOTs in the window, are held (all of
//! them in memory only where no temporary file could be had). Beyond the exact budget
//! (D23) steady state is not computed.

use super::fold::{Fold, Whole};
use super::spilled::{Record, Spilled};
use super::stats::percentile_sorted;
use crate::fleet::outcome::GlobalRow;
pub use crate::plan::SteadyPlan;
use serde::{Deserialize, Serialize};

/// How far an open loop's completion rate may be from the asked rate.
pub const OPEN_TOLERANCE: f64 = 0.05;

/// One successful request, as steady state needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Req {
    pub start: f64,
    pub end: f64,
    /// TTFT (s); 0 for a pooling request.
    pub ttft: f64,
    /// TPOT (s), negative when it has none.
    pub tpot: f64,
    /// Its first and last token events (s on the run's timeline) and how many.
    pub first_token: f64,
    pub last_token: f64,
    pub events: u32,
    pub input: u32,
}

impl Record for Req {
    const SIZE: usize = 56;
    fn put(&self, out: &mut Vec<u8>) {
        for v in [self.start, self.end, self.ttft, self.tpot, self.first_token, self.last_token] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.events.to_le_bytes());
        out.extend_from_slice(&self.input.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        let f = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i * 8..i * 8 + 8]);
            f64::from_le_bytes(a)
        };
        let u = |at: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[at..at + 4]);
            u32::from_le_bytes(a)
        };
        Req {
            start: f(0),
            end: f(1),
            ttft: f(2),
            tpot: f(3),
            first_token: f(4),
            last_token: f(5),
            events: u(48),
            input: u(52),
        }
    }
}

/// The window, in vllm-bench's keys (seconds from the first successful start).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    /// Closed loop: `--max-concurrency`, the threshold and `ceil(threshold x C)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_abs: Option<u32>,
    /// Open loop: the asked rate and the tolerance around it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_tolerance: Option<f64>,
    pub observed_peak: u32,
    pub requests_started_in_window: u64,
    pub requests_completed_in_window: u64,
    pub requests_total: u64,
    pub warning: Option<String>,
    /// The window on the run's own timeline (the time series' `t`), for marking it.
    #[serde(skip, default)]
    pub run_start_s: f64,
}

/// vllm-bench's `steady_state` object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SteadyState {
    pub window: Window,
    pub request_throughput: f64,
    pub input_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub mean_ttft_ms: f64,
    pub median_ttft_ms: f64,
    /// `[[p, ms], ...]`.
    pub percentiles_ttft_ms: Vec<(f64, f64)>,
    pub mean_tpot_ms: f64,
    pub median_tpot_ms: f64,
    pub p90_tpot_ms: f64,
    pub p99_tpot_ms: f64,
}

/// The records of a run, spilled while it goes.
#[derive(Debug, Default)]
pub struct Steady {
    reqs: Option<Spilled<Req>>,
}

impl Steady {
    pub fn new() -> Self {
        Self { reqs: Some(Spilled::new()) }
    }

    pub fn add(&mut self, r: Req) {
        if let Some(s) = &mut self.reqs {
            s.push(r);
        }
    }

    /// Past the exact budget: nothing is computed.
    pub fn drop_exact(&mut self) {
        self.reqs = None;
    }

    /// The steady state of the run under `plan`; `None` when there is no window (or the
    /// records are gone). `run_s`: the run's duration, for the short-window warning.
    pub fn compute(self, plan: SteadyPlan, run_s: f64, percentiles: &[f64]) -> Option<SteadyState> {
        let reqs = self.reqs?;
        if reqs.is_empty() {
            return None;
        }
        // The records stay in their spill and are read twice, a chunk at a time: first
        // the starts and ends the window needs, then what is measured over it.
        let (mut starts, mut ends) = (Vec::with_capacity(reqs.len()), Vec::with_capacity(reqs.len()));
        let mut min_start = f64::INFINITY;
        reqs.for_each(|r| {
            min_start = min_start.min(r.start);
            starts.push(r.start);
            ends.push(r.end);
        })
        .ok()?;
        let (a, b, mut window) = match plan {
            SteadyPlan::Closed { target, threshold, .. } => closed(&mut starts, &mut ends, target, threshold)?,
            SteadyPlan::Open { rate, slice_s, .. } => open(&mut starts, &mut ends, rate, slice_s)?,
        };
        window.start_s = a - min_start;
        window.end_s = b - min_start;
        window.duration_s = b - a;
        window.run_start_s = a;
        window.requests_total = reqs.len() as u64;
        let inside = |t: f64| t >= a && t < b;
        window.requests_started_in_window = starts.iter().filter(|&&t| inside(t)).count() as u64;
        window.requests_completed_in_window = ends.iter().filter(|&&t| inside(t)).count() as u64;
        drop((starts, ends));
        if window.requests_started_in_window == 0 && window.requests_completed_in_window == 0 {
            return None;
        }
        let min_window = match plan {
            SteadyPlan::Closed { min_window_s, .. } | SteadyPlan::Open { min_window_s, .. } => min_window_s,
        }
        .unwrap_or_else(|| (0.1 * run_s).max(10.0));
        if window.duration_s < min_window {
            window.warning = Some(format!(
                "steady-state window is {:.1}s ({:.1}% of run); may not be representative",
                window.duration_s,
                100.0 * window.duration_s / run_s.max(1e-9)
            ));
        }
        let d = window.duration_s.max(1e-9);
        // Sized once: the requests started in the window are counted above.
        let n = window.requests_started_in_window as usize;
        let (mut output, mut input, mut ttft, mut tpot) = (0u64, 0u64, Vec::with_capacity(n), Vec::with_capacity(n));
        reqs.for_each(|r| {
            output += tokens_in(&r, a, b);
            if !inside(r.start) {
                return;
            }
            input += u64::from(r.input);
            if r.ttft > 0.0 {
                ttft.push(r.ttft * 1e3);
            }
            if r.tpot >= 0.0 {
                tpot.push(r.tpot * 1e3);
            }
        })
        .ok()?;
        super::stats::sort(&mut ttft);
        super::stats::sort(&mut tpot);
        let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
        let pct = |v: &[f64], p: f64| if v.is_empty() { 0.0 } else { percentile_sorted(v, p) };
        let mut ps = percentiles.to_vec();
        if !ps.contains(&90.0) {
            ps.push(90.0);
        }
        Some(SteadyState {
            request_throughput: window.requests_completed_in_window as f64 / d,
            input_throughput: input as f64 / d,
            output_throughput: output as f64 / d,
            total_token_throughput: (input + output) as f64 / d,
            mean_ttft_ms: mean(&ttft),
            median_ttft_ms: pct(&ttft, 50.0),
            percentiles_ttft_ms: if ttft.is_empty() {
                Vec::new()
            } else {
                ps.iter().map(|&p| (p, pct(&ttft, p))).collect()
            },
            mean_tpot_ms: mean(&tpot),
            median_tpot_ms: pct(&tpot, 50.0),
            p90_tpot_ms: pct(&tpot, 90.0),
            p99_tpot_ms: pct(&tpot, 99.0),
            window,
        })
    }
}

fn empty_window() -> Window {
    Window {
        start_s: 0.0,
        end_s: 0.0,
        duration_s: 0.0,
        target_concurrency: None,
        threshold: None,
        threshold_abs: None,
        target_rate: None,
        rate_tolerance: None,
        observed_peak: 0,
        requests_started_in_window: 0,
        requests_completed_in_window: 0,
        requests_total: 0,
        warning: None,
        run_start_s: 0.0,
    }
}

/// vllm-bench's closed-loop window: `(start, end, window)` on the run's timeline.
/// `starts` and `ends` (the successful requests', in the order they came) come back
/// sorted when a window is found.
fn closed(starts: &mut [f64], ends: &mut [f64], target: u32, threshold: f64) -> Option<(f64, f64, Window)> {
    let thr = ((threshold * f64::from(target)).ceil() as u32).max(1);
    super::stats::sort(starts);
    super::stats::sort(ends);
    let (mut i, mut j, mut c, mut peak) = (0, 0, 0u32, 0u32);
    let (mut up, mut down) = (None, None);
    while i < starts.len() || j < ends.len() {
        // At equal times the end comes first.
        let end_first = j < ends.len() && (i >= starts.len() || ends[j] <= starts[i]);
        if end_first {
            let before = c;
            c = c.saturating_sub(1);
            if before >= thr && c < thr {
                down = Some(ends[j]);
            }
            j += 1;
        } else {
            let before = c;
            c += 1;
            peak = peak.max(c);
            if before < thr && c >= thr && up.is_none() {
                up = Some(starts[i]);
            }
            i += 1;
        }
    }
    let a = up?;
    let b = down.or(ends.last().copied())?;
    let w = Window {
        target_concurrency: Some(target),
        threshold: Some(threshold),
        threshold_abs: Some(thr),
        observed_peak: peak,
        ..empty_window()
    };
    (b > a).then_some((a, b, w))
}

/// The open-loop window: the first to the last slice whose completion rate is within
/// [`OPEN_TOLERANCE`] of `rate`.
/// `starts` and `ends` (the successful requests', in the order they came) come back
/// sorted when a window is found.
fn open(starts: &mut [f64], ends: &mut [f64], rate: f64, slice_s: f64) -> Option<(f64, f64, Window)> {
    // Slices on the run's timeline, as the time series starts them (`--timeslice`; D90 may
    // widen the series' own, not these).
    // Folded in the order the requests came, before anything is sorted (as the records
    // were, to the bit: ties of -0.0 and 0.0 resolve as they did).
    let first_start = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let t0 = (first_start / slice_s).floor() * slice_s;
    let last = ends.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let n = ((last - t0) / slice_s).ceil().max(1.0) as usize;
    let mut done = vec![0u64; n];
    for &end in ends.iter() {
        let k = (((end - t0) / slice_s) as usize).min(n - 1);
        done[k] += 1;
    }
    let ok = |k: usize| ((done[k] as f64 / slice_s) - rate).abs() <= OPEN_TOLERANCE * rate;
    // The last slice is cut short by the run's end: it is never steady.
    let full = n.saturating_sub(1);
    let first = (0..full).find(|&k| ok(k))?;
    let end = (first..full).rev().find(|&k| ok(k))?;
    let (a, b) = (t0 + first as f64 * slice_s, t0 + (end + 1) as f64 * slice_s);
    let peak = u32::try_from(super::stats::peak_in_flight(starts, ends)).unwrap_or(0);
    Some((
        a,
        b,
        Window { target_rate: Some(rate), rate_tolerance: Some(OPEN_TOLERANCE), observed_peak: peak, ..empty_window() },
    ))
}

/// Token events of `r` in `[a, b)`: all of them when the request lies inside, else its
/// events spread evenly between its first and its last.
fn tokens_in(r: &Req, a: f64, b: f64) -> u64 {
    let n = u64::from(r.events);
    if n == 0 {
        return 0;
    }
    let (f, l) = (r.first_token, r.last_token);
    if f >= a && l < b {
        return n;
    }
    if l < a || f >= b {
        return 0;
    }
    if n == 1 || l <= f {
        return u64::from(f >= a && f < b);
    }
    // Event k at f + k x step; count k in [0, n) with a <= f + k step < b.
    let step = (l - f) / (n - 1) as f64;
    let lo = if f >= a { 0 } else { ((a - f) / step).ceil() as u64 };
    let hi = if l < b { n } else { (((b - f) / step).ceil() as u64).min(n) };
    hi.saturating_sub(lo)
}

/// A successful request as steady state reads it: its token events' first and last
/// times and count (none for a pooling answer).
fn record(r: &GlobalRow) -> Req {
    let generated = r.row.output_tokens > 0 && r.row.ttft_us > 0;
    let first = r.start_s + r.ttft_s();
    let gaps: f64 = r.row.gaps().map(|g| f64::from(g) / 1e6).sum();
    Req {
        start: r.start_s,
        end: r.end_s(),
        ttft: if generated { r.ttft_s() } else { 0.0 },
        tpot: r.tpot_s().unwrap_or(-1.0),
        first_token: first,
        last_token: first + gaps,
        events: if generated { u32::try_from(r.row.gap_count() + 1).unwrap_or(u32::MAX) } else { 0 },
        input: r.row.input_tokens,
    }
}

/// The fold, registered when steady state is looked for: its plan and the TTFT
/// percentiles to report.
#[derive(Debug)]
pub struct SteadyFold {
    pub records: Steady,
    pub plan: SteadyPlan,
    pub percentiles: Vec<f64>,
}

impl Fold for SteadyFold {
    type Out = Option<SteadyState>;
    fn row(&mut self, r: &GlobalRow) {
        if r.ok() {
            self.records.add(record(r));
        }
    }
    fn drop_exact(&mut self) {
        self.records.drop_exact();
    }
    fn finish(self, run: &Whole) -> Self::Out {
        if run.sends == 0 {
            return None;
        }
        self.records.compute(self.plan, run.duration_s, &self.percentiles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(start: f64, end: f64) -> Req {
        Req { start, end, ttft: 0.1, tpot: 0.01, first_token: start + 0.1, last_token: end, events: 10, input: 5 }
    }

    fn steady(reqs: &[Req], plan: SteadyPlan) -> Option<SteadyState> {
        let mut s = Steady::new();
        reqs.iter().for_each(|r| s.add(*r));
        s.compute(plan, 30.0, &[99.0])
    }

    #[test]
    fn closed_window_from_first_up_to_last_down_crossing() {
        // Four slots: one request at 0, a second at 1, two more at 2 (in flight 4 from 2 s),
        // one ends at 8 (down to 3), the rest at 9 and 10.
        let reqs = [req(0.0, 9.0), req(1.0, 10.0), req(2.0, 8.0), req(2.0, 9.0)];
        let plan = SteadyPlan::Closed { target: 4, threshold: 0.95, min_window_s: Some(1.0) };
        let s = steady(&reqs, plan).unwrap();
        assert_eq!((s.window.start_s, s.window.end_s, s.window.threshold_abs), (2.0, 8.0, Some(4)));
        assert_eq!((s.window.requests_started_in_window, s.window.requests_completed_in_window), (2, 0));
        assert_eq!(s.window.observed_peak, 4);
        // Every token event of the four (10 each, evenly from start+0.1 to end) inside [2, 8).
        let expect: u64 = reqs.iter().map(|r| tokens_in(r, 2.0, 8.0)).sum();
        assert!((s.output_throughput - expect as f64 / 6.0).abs() < 1e-9);
        assert_eq!(s.window.warning, None);
        let short = SteadyPlan::Closed { target: 4, threshold: 0.95, min_window_s: Some(10.0) };
        assert!(steady(&reqs, short).unwrap().window.warning.unwrap().contains("6.0s"));
        // Never reaching the threshold: no window.
        assert!(steady(&reqs, SteadyPlan::Closed { target: 8, threshold: 0.95, min_window_s: None }).is_none());
    }

    #[test]
    fn an_end_at_a_start_counts_first() {
        // One slot: a request ends at 1 exactly when the next starts: in flight never 2.
        let reqs = [req(0.0, 1.0), req(1.0, 2.0)];
        let s = steady(&reqs, SteadyPlan::Closed { target: 1, threshold: 1.0, min_window_s: None }).unwrap();
        assert_eq!((s.window.start_s, s.window.end_s, s.window.observed_peak), (0.0, 2.0, 1));
    }

    #[test]
    fn tokens_of_a_request_across_an_edge_are_spread_evenly() {
        let r = Req { first_token: 0.0, last_token: 9.0, events: 10, ..req(0.0, 9.0) };
        assert_eq!(tokens_in(&r, -1.0, 20.0), 10);
        assert_eq!(tokens_in(&r, 2.0, 5.0), 3, "events at 2, 3, 4");
        assert_eq!(tokens_in(&r, 2.5, 20.0), 7, "events at 3 ..= 9");
        assert_eq!(tokens_in(&r, 10.0, 20.0), 0);
    }

    #[test]
    fn open_window_where_completions_keep_the_rate() {
        // 10 req/s asked: slices 0-1 have 2 and 5, slices 2-7 have 10, slice 8 has 3.
        let mut reqs = Vec::new();
        for (slice, n) in [(0, 2), (1, 5), (2, 10), (3, 10), (4, 10), (5, 10), (6, 10), (7, 10), (8, 3)] {
            for k in 0..n {
                let end = f64::from(slice) + (f64::from(k) + 0.5) / f64::from(n);
                reqs.push(req(end - 0.2, end));
            }
        }
        let plan = SteadyPlan::Open { rate: 10.0, slice_s: 1.0, min_window_s: None };
        let s = steady(&reqs, plan).unwrap();
        assert!((s.window.run_start_s - 2.0).abs() < 1e-9, "{:?}", s.window);
        assert!((s.window.duration_s - 6.0).abs() < 1e-9);
        assert!((s.request_throughput - 10.0).abs() < 0.2, "{}", s.request_throughput);
    }

    #[test]
    fn records_read_back_from_the_spill_give_what_they_give_in_memory() {
        // 3,000 requests, 100 at once, some without a TTFT or a TPOT; a chunk of 7
        // records puts all but a few on disk, read back across 428 chunk boundaries.
        let reqs: Vec<Req> = (0..3_000u32)
            .map(|k| {
                let start = f64::from(k) / 100.0 + f64::from(k % 13) / 1e4;
                let r = req(start, start + 1.0 + f64::from(k % 7) / 10.0);
                Req { ttft: if k % 11 == 0 { 0.0 } else { r.ttft }, tpot: if k % 5 == 0 { -1.0 } else { r.tpot }, ..r }
            })
            .collect();
        let plans = [
            SteadyPlan::Closed { target: 100, threshold: 0.9, min_window_s: None },
            SteadyPlan::Open { rate: 100.0, slice_s: 1.0, min_window_s: None },
        ];
        for plan in plans {
            let mut in_memory = Steady::new();
            let mut spilled = Steady { reqs: Some(Spilled::with_chunk(7)) };
            for r in &reqs {
                in_memory.add(*r);
                spilled.add(*r);
            }
            assert!(spilled.reqs.as_ref().is_some_and(|s| s.on_disk() > 2_900), "the records went to the file");
            let want = in_memory.compute(plan, 30.0, &[99.0]).expect("a window");
            let w = &want.window;
            // Both read their records twice: the second pass against the records themselves.
            let (a, b) = (w.run_start_s, w.run_start_s + w.duration_s);
            let started: Vec<&Req> = reqs.iter().filter(|r| r.start >= a && r.start < b).collect();
            assert!(started.len() > 1_000 && w.requests_started_in_window == started.len() as u64, "{w:?}");
            let input: u64 = started.iter().map(|r| u64::from(r.input)).sum();
            assert!((want.input_throughput * w.duration_s - input as f64).abs() < 1e-6);
            let output: u64 = reqs.iter().map(|r| tokens_in(r, a, b)).sum();
            assert!((want.output_throughput * w.duration_s - output as f64).abs() < 1e-6);
            let ttfts: Vec<f64> = started.iter().filter(|r| r.ttft > 0.0).map(|r| r.ttft * 1e3).collect();
            assert!((want.mean_ttft_ms - ttfts.iter().sum::<f64>() / ttfts.len() as f64).abs() < 1e-9);
            assert_eq!(spilled.compute(plan, 30.0, &[99.0]), Some(want), "{plan:?}");
        }
    }
}
