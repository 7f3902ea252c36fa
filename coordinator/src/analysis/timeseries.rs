//! The run's time dimension: per slice of `--timeslice` seconds, requests started,
//! completed and failed, in flight at the slice's end, output tokens, throughput, TTFT,
//! ITL and E2EL percentiles, errors by kind, and per agent the client-bound signals (D5,
//! D14): engine CPU, send lag, host busy, CPU pressure and read coalescing, with the
//! signals over their limits named. A row counts in the slice where it ended (started:
//! where it started); a health report in the slice where it arrived, and several in one
//! slice are averaged (send lag: the largest). Percentiles come from
//! small per-slice histograms (3 significant digits) that are reduced to numbers once the
//! slice is [`SETTLE_SLICES`] behind the newest one, so memory holds a few open slices and
//! per closed one its numbers and its histograms encoded (about 1 KB each when busy), kept
//! so that a run past [`super::grid::MOST_SLICES`] slices merges neighbours exactly (D90).

use super::coalesce::Coalescing;
use super::grid::{Grid, Merge, Slices};
use crate::fleet::outcome::{GlobalRow, kind_name};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Slices this far behind the newest row are closed (rows reach the coordinator within a
/// batch interval of ending); a later row still counts, its latencies no longer do.
pub const SETTLE_SLICES: i64 = 10;

/// One agent in one slice. The health-report fields are `None` in a slice no report of
/// the agent arrived in; `coalesced_token_fraction` is `None` when none of its counted
/// streams ended in the slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSlice {
    pub agent: usize,
    /// Engine CPU, 100 = one core.
    pub cpu_pct: Option<f64>,
    pub send_lag_p99_ms: Option<f64>,
    #[serde(default)]
    pub host_busy_pct: Option<f64>,
    #[serde(default)]
    pub cpu_pressure_pct: Option<f64>,
    #[serde(default)]
    pub coalesced_token_fraction: Option<f64>,
    /// The verdict's signals over their limits in this slice (`engine_cpu`, `send_lag`,
    /// `host_busy`, `cpu_pressure`, `coalesced_reads`).
    #[serde(default)]
    pub fired: Vec<String>,
}

/// An agent's health reports and read coalescing within one slice.
#[derive(Debug, Clone, Default)]
struct AgentAcc {
    reports: u32,
    cpu: f64,
    lag_ms: f64,
    busy: f64,
    pressure: f64,
    pressure_reports: u32,
    coalescing: Coalescing,
    /// Conversations open, the most the agent reported in the slice.
    sessions: u32,
}

impl AgentAcc {
    fn merge(&mut self, o: &Self) {
        self.reports += o.reports;
        self.cpu += o.cpu;
        self.lag_ms = self.lag_ms.max(o.lag_ms);
        self.busy += o.busy;
        self.pressure += o.pressure;
        self.pressure_reports += o.pressure_reports;
        self.coalescing.add(&o.coalescing);
        self.sessions = self.sessions.max(o.sessions);
    }

    fn slice(&self, agent: usize) -> AgentSlice {
        let n = f64::from(self.reports);
        let mean = |sum: f64| (self.reports > 0).then(|| sum / n);
        AgentSlice {
            agent,
            cpu_pct: mean(self.cpu),
            send_lag_p99_ms: (self.reports > 0).then_some(self.lag_ms),
            host_busy_pct: mean(self.busy),
            cpu_pressure_pct: (self.pressure_reports > 0).then(|| self.pressure / f64::from(self.pressure_reports)),
            coalesced_token_fraction: self.coalescing.fraction(),
            fired: Vec::new(),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One slice of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// Slice start, seconds from the run's start.
    pub t: f64,
    pub started: u64,
    pub completed: u64,
    pub failed: u64,
    /// Requests the client cancelled (absent when 0; not in `failed`, D21).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled: u64,
    /// Requests in flight at the slice's end.
    pub in_flight: u64,
    /// Multi-turn runs: conversations open, the most each agent reported in the slice,
    /// summed over agents (absent in other runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_sessions: Option<u64>,
    pub output_tokens: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub p50_ttft_ms: f64,
    pub p99_ttft_ms: f64,
    pub p50_itl_ms: f64,
    pub p99_itl_ms: f64,
    pub p99_e2el_ms: f64,
    /// Replies that reasoned first (D49): their time to first output's p99; absent when
    /// none of the slice's did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ttfo_ms: Option<f64>,
    /// Successful rows that arrived after this slice's percentiles were computed (a
    /// late agent batch): in its counts, not in its percentiles (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late_rows: u64,
    /// HTTP phases (D35), when the rows carry them: `waiting` (the time to the response
    /// head) at p50 and p99, `blocked` (waiting for a connection or stream slot) at p99.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_http_req_waiting_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_http_req_waiting_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_http_req_blocked_ms: Option<f64>,
    /// With GPU telemetry (`--gpu-metrics-url`): every GPU's energy in the slice (J), their
    /// power (W), mean utilization (%) and the energy per output token completed in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_energy_j: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_per_output_token_j: Option<f64>,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub agents: Vec<AgentSlice>,
    /// The slice overlaps the steady-state window (D45); absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steady: bool,
    /// Several endpoints (D69): each one's share of the slice, in the result's
    /// `endpoints` order (absent with one endpoint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointSlice>,
}

/// One endpoint's part of a time-series slice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointSlice {
    pub completed: u64,
    pub failed: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    /// Over the slice's successful requests (0 without one).
    pub mean_ttft_ms: f64,
    pub max_ttft_ms: f64,
}

#[derive(Debug, Clone)]
struct Hists {
    ttft: Histogram<u32>,
    itl: Histogram<u32>,
    e2el: Histogram<u32>,
    /// HTTP phases (D35), when rows carry them: `waiting` and `blocked`.
    waiting: Histogram<u32>,
    blocked: Histogram<u32>,
    /// Time to first output of the replies that reasoned first (D49).
    ttfo: Histogram<u32>,
}

fn empty() -> Histogram<u32> {
    Histogram::new_with_bounds(1, 36_000_000_000, 3).expect("valid histogram bounds")
}

impl Hists {
    fn new() -> Self {
        Self { ttft: empty(), itl: empty(), e2el: empty(), waiting: empty(), blocked: empty(), ttfo: empty() }
    }

    fn each(&self) -> [&Histogram<u32>; 6] {
        [&self.ttft, &self.itl, &self.e2el, &self.waiting, &self.blocked, &self.ttfo]
    }

    fn each_mut(&mut self) -> [&mut Histogram<u32>; 6] {
        [&mut self.ttft, &mut self.itl, &mut self.e2el, &mut self.waiting, &mut self.blocked, &mut self.ttfo]
    }

    fn add(&mut self, o: &Self) {
        for (a, b) in self.each_mut().into_iter().zip(o.each()) {
            // Same bounds and digits on both sides: an addition cannot fail.
            let _ = a.add(b);
        }
    }

    /// A closed slice's histograms, decoded (one that cannot be reads as empty).
    fn of(c: &Closed) -> Self {
        let mut h = Self::new();
        for (to, bytes) in h.each_mut().into_iter().zip(c.kept.iter()) {
            if let Some(d) = decode(bytes) {
                let _ = to.add(d);
            }
        }
        h
    }
}

/// A closed slice: its percentiles, and its histograms encoded (HdrHistogram's V2 format,
/// empty bytes for an empty one) for a merge with its neighbour when the grid widens.
#[derive(Debug, Clone)]
struct Closed {
    numbers: [f64; 9],
    kept: [Box<[u8]>; 6],
}

/// The V2 serializer and a buffer, both reused: a histogram's encoding costs one
/// allocation, its bytes.
#[derive(Default)]
struct Encoder {
    serializer: V2Serializer,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Encoder")
    }
}

impl Encoder {
    fn encode(&mut self, hist: &Histogram<u32>) -> Box<[u8]> {
        self.scratch.clear();
        if hist.is_empty() || self.serializer.serialize(hist, &mut self.scratch).is_err() {
            return Box::default();
        }
        Box::from(self.scratch.as_slice())
    }
}

fn decode(bytes: &[u8]) -> Option<Histogram<u32>> {
    if bytes.is_empty() { None } else { Deserializer::new().deserialize(&mut &bytes[..]).ok() }
}

impl Closed {
    fn of(h: &Hists, enc: &mut Encoder) -> Self {
        Self { numbers: close(h), kept: h.each().map(|hist| enc.encode(hist)) }
    }

    /// Two closed neighbours as one: a histogram only one side has is taken with its
    /// numbers as they are; one both have is decoded, added and read again. (A doubling
    /// merges about 2,000 pairs at once, in the ingest: nothing else is decoded.)
    fn merge(&mut self, o: Self) {
        let mut enc = Encoder::default();
        for (i, theirs) in o.kept.into_iter().enumerate() {
            match (decode(&self.kept[i]), decode(&theirs)) {
                (Some(mut h), Some(b)) => {
                    // Same bounds and digits on both sides: an addition cannot fail.
                    let _ = h.add(&b);
                    read(i, &h, &mut self.numbers);
                    self.kept[i] = enc.encode(&h);
                }
                // Only theirs (or only theirs reads back): taken with its numbers.
                (None, Some(_)) => {
                    let at = first_number(i)..first_number(i) + REPORTED[i].0.len();
                    self.numbers[at.clone()].copy_from_slice(&o.numbers[at]);
                    self.kept[i] = theirs;
                }
                (_, None) => {}
            }
        }
    }
}

fn us(v_s: f64) -> u64 {
    ((v_s * 1e6).round().max(1.0) as u64).min(36_000_000_000)
}

fn ms(h: &Histogram<u32>, q: f64) -> f64 {
    if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1000.0 }
}

#[derive(Debug, Clone, Default)]
struct Open {
    started: u64,
    ended: u64,
    completed: u64,
    failed: u64,
    cancelled: u64,
    output_tokens: u64,
    errors: BTreeMap<String, u64>,
    hists: Option<Box<Hists>>,
    closed: Option<Closed>,
    /// A successful row of the slice carried HTTP phases.
    phases: bool,
    /// A successful row of the slice reasoned first (it has a `ttfo`).
    reasoned: bool,
    /// Successful rows that came after `closed` was computed.
    late: u64,
    agents: BTreeMap<usize, AgentAcc>,
}

/// Two neighbours as one slice twice as wide: counts add; a closed pair's histograms merge
/// and its percentiles are read again; with one side still open, the other's values join
/// it (its late rows stay counted as such).
impl Merge for Open {
    fn merge(&mut self, o: Self) {
        self.started += o.started;
        self.ended += o.ended;
        self.completed += o.completed;
        self.failed += o.failed;
        self.cancelled += o.cancelled;
        self.output_tokens += o.output_tokens;
        for (kind, n) in o.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        self.phases |= o.phases;
        self.reasoned |= o.reasoned;
        self.late += o.late;
        for (agent, acc) in &o.agents {
            self.agents.entry(*agent).or_default().merge(acc);
        }
        match (self.hists.take(), o.hists) {
            (None, None) => {
                self.closed = match (self.closed.take(), o.closed) {
                    (Some(mut a), Some(b)) => {
                        a.merge(b);
                        Some(a)
                    }
                    (a, b) => a.or(b),
                };
            }
            (mine, theirs) => {
                let mut h = match (mine, theirs) {
                    (Some(mut a), Some(b)) => {
                        a.add(&b);
                        a
                    }
                    (a, b) => a.or(b).unwrap_or_else(|| Box::new(Hists::new())),
                };
                // The open sides were taken above; what is left of either is closed or empty.
                for c in [self.closed.take(), o.closed].into_iter().flatten() {
                    h.add(&Hists::of(&c));
                }
                self.hists = Some(h);
            }
        }
    }
}

/// The slices of a run so far.
#[derive(Debug)]
pub struct TimeSeries {
    slices: Slices<Open>,
    /// A closed slice's histograms, emptied for the next slice (a slice's six are 640 KB:
    /// made once, not once a slice).
    spare: Option<Box<Hists>>,
    encoder: Encoder,
    /// The newest row's end, seconds.
    newest_s: f64,
    /// A multi-turn run (a row carried a session): slices report open conversations.
    sessions: bool,
}

impl TimeSeries {
    pub fn new(grid: Grid) -> Self {
        Self { slices: Slices::new(grid), spare: None, encoder: Encoder::default(), newest_s: 0.0, sessions: false }
    }

    /// One finished request, with its read coalescing when it counts.
    pub fn add(&mut self, r: &GlobalRow, coalescing: Option<&Coalescing>) {
        let e = self.slices.index(r.end_s());
        let (s, newest) = (self.slices.index(r.start_s), self.slices.index(self.newest_s));
        self.sessions |= r.row.session.is_some();
        self.slices.slot(s).started += 1;
        let open = self.slices.slot(e);
        open.ended += 1;
        if r.ok() {
            open.completed += 1;
            open.output_tokens += u64::from(r.row.output_tokens);
            if let Some(c) = coalescing {
                open.agents.entry(r.agent).or_default().coalescing.add(c);
            }
            if open.closed.is_some() {
                open.late += 1;
            } else {
                let spare = &mut self.spare;
                let h = open.hists.get_or_insert_with(|| spare.take().unwrap_or_else(|| Box::new(Hists::new())));
                if let Some(t) = r.first_token_s() {
                    h.ttft.saturating_record(us(t));
                }
                h.e2el.saturating_record(us(r.e2el_s()));
                for g in r.row.gaps() {
                    h.itl.saturating_record(u64::from(g).max(1));
                }
                if let Some(t) = r.row.ttfo_us {
                    h.ttfo.saturating_record(t.max(1));
                    open.reasoned = true;
                }
                if let Some(p) = &r.row.phases {
                    // + 1 µs: a histogram cannot hold 0 (read back as 0).
                    h.waiting.saturating_record(p.waiting_us + 1);
                    h.blocked.saturating_record(p.blocked_us + 1);
                    open.phases = true;
                }
            }
        } else if r.row.error() == surge_proto::ErrorKind::Cancelled {
            open.cancelled += 1;
        } else {
            open.failed += 1;
            *open.errors.entry(kind_name(r.row.error())).or_default() += 1;
        }
        if e > newest {
            self.newest_s = r.end_s();
            self.settle(e - SETTLE_SLICES);
        }
    }

    /// Reduces the histograms of slices up to `upto` to their percentiles, kept encoded.
    fn settle(&mut self, upto: i64) {
        for (_, open) in self.slices.range_mut(upto) {
            if let Some(mut h) = open.hists.take() {
                open.closed = Some(Closed::of(&h, &mut self.encoder));
                h.each_mut().into_iter().for_each(Histogram::reset);
                self.spare = Some(h);
            }
        }
    }

    /// The newest slice that is over (the one before the newest row's): requests/s,
    /// output tokens/s, TTFT p99 (ms) and failures, for the live progress line.
    pub fn recent(&self) -> Option<(f64, f64, f64, u64)> {
        let width = self.slices.width_s();
        let o = self.slices.get((self.newest_s.max(0.0) / width).floor() as i64 - 1)?;
        let p99 = match (&o.hists, &o.closed) {
            (Some(h), _) => ms(&h.ttft, 0.99),
            (None, Some(c)) => c.numbers[1],
            (None, None) => 0.0,
        };
        Some((o.completed as f64 / width, o.output_tokens as f64 / width, p99, o.failed))
    }

    pub fn health(&mut self, agent: usize, h: &surge_proto::Health, t_s: f64) {
        let a = self.slices.at(t_s).agents.entry(agent).or_default();
        a.reports += 1;
        a.cpu += h.cpu_percent;
        a.lag_ms = a.lag_ms.max(h.lag_p99_us as f64 / 1000.0);
        a.busy += h.host_busy_pct;
        a.sessions = a.sessions.max(h.active_sessions);
        if let Some(p) = h.cpu_pressure_pct {
            a.pressure += p;
            a.pressure_reports += 1;
        }
    }

    /// The slices, their width (the asked one, or wider past [`super::grid::MOST_SLICES`]),
    /// and the most requests in flight at a slice's start plus those started within it (an
    /// upper bound of the instantaneous peak, for runs past the exact budget).
    pub fn finish(self) -> (Vec<Slice>, f64, u64) {
        let sessions = self.sessions;
        let (mut slices, width) = self.slices.finish();
        let Some(&last) = slices.keys().next_back() else { return (Vec::new(), width, 0) };
        let mut peak_in_flight = 0;
        let mut out = Vec::with_capacity(last as usize + 1);
        let mut in_flight = 0u64;
        for i in 0..=last {
            let o = slices.remove(&i).unwrap_or_default();
            peak_in_flight = peak_in_flight.max(in_flight + o.started);
            in_flight = (in_flight + o.started).saturating_sub(o.ended);
            let [
                p50_ttft_ms,
                p99_ttft_ms,
                p50_itl_ms,
                p99_itl_ms,
                p99_e2el_ms,
                p50_waiting,
                p99_waiting,
                p99_blocked,
                p99_ttfo,
            ] = match (&o.hists, &o.closed) {
                (Some(h), _) => close(h),
                (None, Some(c)) => c.numbers,
                (None, None) => [0.0; 9],
            };
            let phase = |v: f64| o.phases.then_some(v);
            out.push(Slice {
                t: i as f64 * width,
                started: o.started,
                completed: o.completed,
                failed: o.failed,
                cancelled: o.cancelled,
                in_flight,
                active_sessions: sessions.then(|| o.agents.values().map(|a| u64::from(a.sessions)).sum()),
                output_tokens: o.output_tokens,
                request_throughput: o.completed as f64 / width,
                output_throughput: o.output_tokens as f64 / width,
                p50_ttft_ms,
                p99_ttft_ms,
                p50_itl_ms,
                p99_itl_ms,
                p99_e2el_ms,
                p99_ttfo_ms: o.reasoned.then_some(p99_ttfo),
                late_rows: o.late,
                p50_http_req_waiting_ms: phase(p50_waiting),
                p99_http_req_waiting_ms: phase(p99_waiting),
                p99_http_req_blocked_ms: phase(p99_blocked),
                gpu_energy_j: None,
                gpu_power_w: None,
                gpu_utilization_pct: None,
                energy_per_output_token_j: None,
                errors_by_kind: o.errors,
                agents: o.agents.iter().map(|(&agent, a)| a.slice(agent)).collect(),
                steady: false,
                endpoints: Vec::new(),
            });
        }
        (out, width, peak_in_flight)
    }
}

/// Per histogram of [`Hists::each`], the quantiles a slice reports, in the order of its
/// nine numbers (TTFT p50 and p99, ITL p50 and p99, E2EL p99, waiting p50 and p99,
/// blocked p99, TTFO p99), and whether the values were recorded + 1 µs (the phases).
const REPORTED: [(&[f64], bool); 6] = [
    (&[0.5, 0.99], false),
    (&[0.5, 0.99], false),
    (&[0.99], false),
    (&[0.5, 0.99], true),
    (&[0.99], true),
    (&[0.99], false),
];

/// Where histogram `i`'s numbers start among the nine.
fn first_number(i: usize) -> usize {
    REPORTED[..i].iter().map(|r| r.0.len()).sum()
}

/// Histogram `i`'s numbers, written in place.
fn read(i: usize, hist: &Histogram<u32>, numbers: &mut [f64; 9]) {
    let (quantiles, shifted) = REPORTED[i];
    for (k, &q) in quantiles.iter().enumerate() {
        let v = ms(hist, q);
        numbers[first_number(i) + k] = if shifted { (v - 0.001).max(0.0) } else { v };
    }
}

fn close(h: &Hists) -> [f64; 9] {
    let mut numbers = [0.0; 9];
    for (i, hist) in h.each().into_iter().enumerate() {
        read(i, hist, &mut numbers);
    }
    numbers
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{ErrorKind, Row};

    fn row(start_s: f64, latency_ms: u64, ok: bool) -> GlobalRow {
        let mut row = Row { ttft_us: 1_000, latency_us: latency_ms * 1000, output_tokens: 3, ..Default::default() };
        row.itl_us = surge_proto::gaps::pack(&[500, 700]);
        if !ok {
            row.set_error(ErrorKind::Timeout);
        }
        GlobalRow { agent: 0, start_s, intended_s: None, row }
    }

    /// A row that ends in a slice whose percentiles were already computed (an agent's
    /// batch that came late) counts in the slice and is reported as missing from them.
    #[test]
    fn a_late_row_counts_and_its_slice_says_its_percentiles_miss_it() {
        let mut ts = TimeSeries::new(Grid::new(1.0));
        ts.add(&row(0.1, 100, true), None);
        // Slice 20's row settles every slice up to 10.
        ts.add(&row(20.1, 100, true), None);
        ts.add(&row(0.2, 100, true), None);
        ts.add(&row(0.3, 100, false), None);
        let (s, _, _) = ts.finish();
        assert_eq!((s[0].completed, s[0].failed, s[0].late_rows), (2, 1, 1));
        assert_eq!(s[20].late_rows, 0);
        assert!(serde_json::to_string(&s[20]).is_ok_and(|j| !j.contains("late_rows")), "absent when 0");
    }

    #[test]
    fn slices_count_every_row_once_and_track_in_flight() {
        let mut ts = TimeSeries::new(Grid::new(1.0));
        let mut rows = Vec::new();
        for k in 0..5000u64 {
            rows.push(row(k as f64 * 0.01, 20 + (k % 7) * 300, k % 50 != 0));
        }
        for r in &rows {
            ts.add(r, None);
        }
        let (s, _, peak) = ts.finish();
        assert!(peak >= s.iter().map(|x| x.in_flight).max().unwrap_or(0));
        assert!(s.len() >= 50, "{}", s.len());
        assert_eq!(s.iter().map(|x| x.completed + x.failed).sum::<u64>(), 5000);
        assert_eq!(s.iter().map(|x| x.failed).sum::<u64>(), 100);
        assert_eq!(s.iter().map(|x| x.started).sum::<u64>(), 5000);
        assert_eq!(s.last().map(|x| x.in_flight), Some(0));
        assert!(s[10].in_flight > 0 && s[10].p99_e2el_ms > s[10].p50_ttft_ms);
        assert!(s[3].errors_by_kind.get("timeout").copied().unwrap_or(0) > 0);
    }

    /// A run past MOST_SLICES slices of 1 s ends as one planned at 2 s from its start:
    /// every slice's counts, in-flight, agents' signals and percentiles alike (the closed
    /// slices' histograms merged exactly, not their percentiles), in half the slices.
    #[test]
    fn a_run_widened_past_the_bound_equals_one_planned_wide() {
        // Three doublings: 1 s, 2 s, 4 s, then 8 s slices.
        let seconds = super::super::grid::MOST_SLICES as u64 * 4 + 900;
        let feed = |ts: &mut TimeSeries| {
            for k in 0..seconds {
                for j in 0..4u64 {
                    let mut r = row(k as f64 + 0.1 + j as f64 * 0.2, 20 + (k * 7 + j * 13) % 400, (k + j) % 9 != 0);
                    r.row.ttft_us = 1_000 + (k % 3) * 700 + j * 50;
                    r.row.itl_us = surge_proto::gaps::pack(&[(100 + k % 50 * 30) as u32, (j * 40 + 9) as u32]);
                    if k % 3 == 0 {
                        // Some slices reason first, their neighbours not: a histogram on one side.
                        r.row.ttfo_us = Some(500 + k % 11 * 100 + j);
                    }
                    if k % 5 == 1 {
                        // And some time their HTTP phases (read shifted by 1 µs).
                        let (waiting_us, blocked_us) = (300 + k % 13 * 50 + j, k % 3 * 20);
                        r.row.phases = Some(surge_proto::HttpPhases { waiting_us, blocked_us, ..Default::default() });
                    }
                    ts.add(&r, Some(&Coalescing { coalesced: k % 2, events: 2, ..Default::default() }));
                }
                let h = surge_proto::Health { cpu_percent: (k % 10) as f64, lag_p99_us: k % 77, ..Default::default() };
                ts.health((k % 2) as usize, &h, k as f64 + 0.5);
            }
        };
        let (mut narrow, mut wide) = (TimeSeries::new(Grid::new(1.0)), TimeSeries::new(Grid::new(8.0)));
        feed(&mut narrow);
        feed(&mut wide);
        let ((n, nw, npeak), (w, ww, wpeak)) = (narrow.finish(), wide.finish());
        assert_eq!((nw, ww), (8.0, 8.0));
        assert!(n.iter().any(|s| s.p99_http_req_waiting_ms.is_some()) && n.iter().any(|s| s.p99_ttfo_ms.is_some()));
        assert_eq!(n.len(), w.len());
        assert!(n.len() >= seconds as usize / 8 && n.len() <= super::super::grid::MOST_SLICES as usize);
        assert_eq!(n.iter().map(|s| s.started).sum::<u64>(), seconds * 4);
        assert_eq!(npeak, wpeak);
        assert!(n.iter().all(|s| s.late_rows == 0));
        let mismatch = n.iter().zip(&w).position(|(a, b)| a != b);
        assert_eq!(mismatch, None, "first differing slice: {:?}", mismatch.map(|i| (&n[i], &w[i])));
        assert!(n[100].p99_e2el_ms > n[100].p50_ttft_ms && n[100].agents.len() == 2);
    }

    /// A closed slice's nine numbers, in their order, the phases read 1 µs lower.
    #[test]
    fn a_slices_numbers_are_in_their_order() {
        let mut h = Hists::new();
        for (hist, v) in h.each_mut().into_iter().zip([100, 200, 300, 401, 501, 600]) {
            hist.saturating_record(v);
        }
        let want = [0.1, 0.1, 0.2, 0.2, 0.3, 0.4, 0.4, 0.5, 0.6];
        let got = close(&h);
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12), "{got:?}");
        assert_eq!(Closed::of(&h, &mut Encoder::default()).numbers, got);
    }

    #[test]
    fn agent_signals_are_averaged_per_slice_and_coalescing_counted_where_rows_end() {
        let mut ts = TimeSeries::new(Grid::new(2.0));
        let h = |cpu_percent, host_busy_pct, cpu_pressure_pct, lag_p99_us| surge_proto::Health {
            cpu_percent,
            host_busy_pct,
            cpu_pressure_pct,
            lag_p99_us,
            ..Default::default()
        };
        ts.health(0, &h(40.0, 50.0, Some(10.0), 1500), 0.5);
        ts.health(0, &h(60.0, 70.0, None, 900), 1.5);
        ts.health(1, &h(10.0, 95.0, Some(80.0), 0), 2.5);
        let c = Coalescing { coalesced: 1, events: 4, ..Default::default() };
        ts.add(&row(0.2, 100, true), Some(&c));
        ts.add(&row(0.4, 100, true), Some(&c));
        ts.add(&row(0.6, 100, false), None);
        let (s, _, _) = ts.finish();
        assert_eq!(s.len(), 2);
        let a = &s[0].agents[0];
        assert_eq!((a.agent, a.cpu_pct, a.host_busy_pct), (0, Some(50.0), Some(60.0)));
        assert_eq!((a.cpu_pressure_pct, a.send_lag_p99_ms), (Some(10.0), Some(1.5)), "pressure of the one report");
        assert_eq!(a.coalesced_token_fraction, Some(0.25));
        let b = &s[1].agents[0];
        assert_eq!((b.agent, b.host_busy_pct, b.coalesced_token_fraction), (1, Some(95.0), None));
        assert_eq!(s[0].agents.len(), 1, "agent 1 reported nothing in slice 0");
    }
}
