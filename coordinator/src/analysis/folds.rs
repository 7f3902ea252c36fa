//! The registered folds (D64): each part of the analysis beyond the core, with where its
//! result goes in [`Metrics`]. A new part of the analysis is a module that implements
//! [`Fold`] and one line here.

use super::accuracy::AccuracyFold;
use super::agent_loop::AgentLoop;
use super::anomalies::AnomaliesFold;
use super::conversations::ConversationsFold;
use super::endpoints::{EndpointsFold, EndpointsView};
use super::fold::{Fold, Whole};
use super::gpu::{GpuMetrics, GpuSlice, GpuView};
use super::graphs::Graphs;
use super::grid::Grid;
use super::metrics::Metrics;
use super::phases::Phases;
use super::ramp::RampEvents;
use super::reasoning::ReasoningFold;
use super::replicas::ReplicasFold;
use super::server::ServerView;
use super::steady::{Steady, SteadyFold, SteadyPlan, SteadyState};
use super::timeseries::EndpointSlice;
use crate::fleet::outcome::GlobalRow;
use crate::plan::RampPlan;
use crate::target::gpu::GpuScrape;
use crate::target::scrape::ServerScrape;
use surge_core::data::share::Stripe;

/// What the run asks of the optional folds.
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// The time series' slice, seconds (the server's and the GPUs' views slice alike).
    pub slice_s: f64,
    /// Steady state (D45), with the TTFT percentiles it reports.
    pub steady: Option<(SteadyPlan, Vec<f64>)>,
    /// A ramped run's `rps_change_events`; `over_s`: a ramp over the run's duration.
    pub ramp: Option<(RampPlan, Option<f64>)>,
    /// Agent loops (D65).
    pub agent_loop: bool,
    /// Several endpoints (D69): how many (0: one), and the run's percentiles.
    pub endpoints: usize,
    pub percentiles: Vec<f64>,
    /// Rows name the replica that served them (D69).
    pub replicas: bool,
}

/// Every fold of a run, in the order their results are put.
#[derive(Debug)]
pub struct Folds(Vec<Box<dyn Erased>>);

impl Folds {
    /// The folds a run with `wanted` has; the sliced ones on the time series' `grid`.
    pub fn registered(wanted: Wanted, grid: &Grid) -> Self {
        let mut f = Folds(Vec::new());
        f.put(ReasoningFold::default(), |out, m| m.reasoning = out);
        f.put(AnomaliesFold::default(), |out, m| m.anomalies = out);
        f.put(AccuracyFold::default(), |out, m| m.accuracy = out);
        f.put(Phases::default(), |out, m| m.http_phases = out);
        f.put(ConversationsFold::default(), |out, m| m.conversations = out);
        if let Some((plan, percentiles)) = wanted.steady {
            f.put(SteadyFold { records: Steady::new(), plan, percentiles }, put_steady);
        }
        if let Some((plan, over_s)) = wanted.ramp {
            f.put(RampEvents::new(plan, over_s), |out, m| m.ramp = Some(out));
        }
        if wanted.agent_loop {
            f.put(AgentLoop::default(), |out, m| m.agent_loop = out);
        }
        f.put(Graphs::default(), |out, m| m.graphs = out);
        if wanted.endpoints > 1 {
            f.put(EndpointsFold::new(wanted.endpoints, grid.clone(), wanted.percentiles.clone()), put_endpoints);
        }
        if wanted.replicas {
            f.put(ReplicasFold::default(), |out, m| m.replicas = out);
        }
        f.put(ServerView::new(grid.clone()), |out, m| m.server = out);
        f.put(GpuView::new(grid.clone()), put_gpu);
        f
    }

    fn put<F: Fold + 'static>(&mut self, fold: F, put: fn(F::Out, &mut Metrics)) {
        self.0.push(Box::new(Put { fold, put }));
    }

    pub fn row(&mut self, r: &GlobalRow) {
        self.0.iter_mut().for_each(|f| f.row(r));
    }
    pub fn started(&mut self, slices: &[(Stripe, u64)]) {
        self.0.iter_mut().for_each(|f| f.started(slices));
    }
    pub fn server(&mut self, s: &ServerScrape) {
        self.0.iter_mut().for_each(|f| f.server(s));
    }
    pub fn gpu(&mut self, s: &GpuScrape) {
        self.0.iter_mut().for_each(|f| f.gpu(s));
    }
    pub fn drop_exact(&mut self) {
        self.0.iter_mut().for_each(|f| f.drop_exact());
    }
    /// Each fold's result, put in `m` in registration order.
    pub fn finish(self, run: &Whole, m: &mut Metrics) {
        for f in self.0 {
            f.finish(run, m);
        }
    }
}

/// The steady window, and the time series' slices it overlaps marked.
fn put_steady(out: Option<SteadyState>, m: &mut Metrics) {
    m.steady_state = out;
    if let Some(w) = m.steady_state.as_ref().map(|s| &s.window) {
        let (a, b) = (w.run_start_s, w.run_start_s + w.duration_s);
        let width = m.time_series.get(1).map_or(f64::INFINITY, |s| s.t);
        for s in &mut m.time_series {
            s.steady = s.t < b && s.t + width > a;
        }
    }
}

/// The GPUs' view, and each time-series slice's energy and power.
fn put_gpu(out: Option<(GpuMetrics, Vec<GpuSlice>)>, m: &mut Metrics) {
    let Some((g, slices)) = out else { return };
    for (s, gs) in m.time_series.iter_mut().zip(slices) {
        s.gpu_energy_j = Some(gs.energy_j);
        s.gpu_power_w = Some(gs.power_w);
        s.gpu_utilization_pct = gs.utilization_pct;
        s.energy_per_output_token_j = (s.output_tokens > 0).then(|| gs.energy_j / s.output_tokens as f64);
    }
    m.gpu = Some(g);
}

/// Each endpoint's numbers, and its part of every time-series slice.
fn put_endpoints(out: Option<EndpointsView>, m: &mut Metrics) {
    let Some(v) = out else { return };
    for s in &mut m.time_series {
        let i = (s.t / v.slice_s).round() as i64;
        s.endpoints = v
            .list
            .iter()
            .map(|e| {
                let x = e.slices.get(&i).copied().unwrap_or_default();
                let mean = if x.ttft_rows > 0 { x.ttft_sum_s / x.ttft_rows as f64 * 1e3 } else { 0.0 };
                EndpointSlice {
                    completed: x.completed,
                    failed: x.failed,
                    request_throughput: x.completed as f64 / v.slice_s,
                    output_throughput: x.output_tokens as f64 / v.slice_s,
                    mean_ttft_ms: mean,
                    max_ttft_ms: x.ttft_max_s * 1e3,
                }
            })
            .collect();
    }
    m.endpoints = Some(v);
}

/// A fold and where its result goes, with its output type erased.
struct Put<F: Fold> {
    fold: F,
    put: fn(F::Out, &mut Metrics),
}

impl<F: Fold> std::fmt::Debug for Put<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fold.fmt(f)
    }
}

trait Erased: Send + std::fmt::Debug {
    fn row(&mut self, r: &GlobalRow);
    fn started(&mut self, slices: &[(Stripe, u64)]);
    fn server(&mut self, s: &ServerScrape);
    fn gpu(&mut self, s: &GpuScrape);
    fn drop_exact(&mut self);
    fn finish(self: Box<Self>, run: &Whole, m: &mut Metrics);
}

impl<F: Fold> Erased for Put<F> {
    fn row(&mut self, r: &GlobalRow) {
        self.fold.row(r);
    }
    fn started(&mut self, slices: &[(Stripe, u64)]) {
        self.fold.started(slices);
    }
    fn server(&mut self, s: &ServerScrape) {
        self.fold.server(s);
    }
    fn gpu(&mut self, s: &GpuScrape) {
        self.fold.gpu(s);
    }
    fn drop_exact(&mut self) {
        self.fold.drop_exact();
    }
    fn finish(self: Box<Self>, run: &Whole, m: &mut Metrics) {
        let Put { fold, put } = *self;
        put(fold.finish(run), m);
    }
}

#[cfg(test)]
mod tests {
    use super::super::aggregate::Aggregator;
    use super::*;
    use surge_proto::{HttpPhases, Row};

    /// A successful row that reasoned (3 deltas), carried its HTTP phases and was turn 0
    /// of session 7.
    fn row(start_s: f64) -> GlobalRow {
        GlobalRow {
            agent: 0,
            start_s,
            intended_s: None,
            row: Row {
                ttft_us: 1_000,
                latency_us: 9_000,
                output_tokens: 5,
                input_tokens: 10,
                itl_us: surge_proto::gaps::pack(&[2_000; 4]),
                reasoning_events: 3,
                ttfo_us: Some(7_000),
                phases: Some(HttpPhases { waiting_us: 500, ..Default::default() }),
                session: Some(7),
                ..Default::default()
            },
        }
    }

    #[test]
    fn every_registered_fold_sees_the_rows_and_puts_its_result() {
        let ramp = RampPlan { exponential: false, start: 1, end: 4 };
        let wanted = Wanted { slice_s: 1.0, ramp: Some((ramp, Some(2.0))), ..Wanted::default() };
        let mut a = Aggregator::new(Default::default(), false, wanted);
        for k in 0..4 {
            a.add(&row(f64::from(k) * 0.5));
        }
        let m = a.finish();
        let r = m.reasoning.as_deref().expect("the reasoning fold");
        assert_eq!((r.rows, r.reasoning_events, r.answer_tokens), (4, 12, 8));
        assert!((r.ttfo.median_ms() - 7.0).abs() < 1e-9);
        assert_eq!(m.http_phases.get("waiting").map(|p| p.count()), Some(4), "the phases fold");
        assert_eq!(m.conversations.as_ref().map(|c| c.started), Some(4), "the conversations fold");
        let rates: Vec<u32> =
            m.ramp.as_ref().expect("the ramp fold").events(chrono::Utc::now()).iter().map(|e| e.rps).collect();
        assert_eq!(rates, vec![1, 2, 3], "sends at 0, 0.5, 1 and 1.5 s of a 2 s ramp from 1 to 4");
        assert!(m.server.is_none() && m.gpu.is_none() && m.steady_state.is_none(), "nothing scraped or asked");
    }

    /// Past the exact budget no fold keeps a value per request or per session: neither the
    /// samples it had (each fold's `drop_exact`) nor those it makes later (a step, a turn,
    /// a reasoning reply first seen after the budget).
    #[test]
    fn past_the_budget_every_folds_sample_keeps_no_value() {
        use super::super::conversations::Turn;
        use surge_proto::SessionEnd;
        let end = SessionEnd { fan_out: 2, steps: 2, graph_duration_us: 9, critical_path_us: 5, ..Default::default() };
        let wanted = || Wanted { slice_s: 1.0, agent_loop: true, ..Wanted::default() };
        // Turn `k` of a conversation, or step `k` of an agent loop's turn.
        let at = |k: u32, reasons: bool, step: bool| {
            let mut r = row(0.0);
            (r.row.tool_wait_us, r.row.session_end) = (1_000, Some(end));
            if step {
                r.row.step = k;
            } else {
                r.row.turn = k;
            }
            r.row.tool_call_us = Some(8_000);
            if !reasons {
                (r.row.reasoning_events, r.row.ttfo_us, r.row.tool_call_us) = (0, None, None);
            }
            r
        };
        for reasons_first in [true, false] {
            let mut f = Folds::registered(wanted(), &Grid::new(1.0));
            for k in 0..2 {
                f.row(&at(k, reasons_first, false));
                f.row(&at(k, reasons_first, true));
            }
            f.drop_exact();
            for k in 2..4 {
                f.row(&at(k, true, false));
                f.row(&at(k, true, true));
            }
            let mut m = Metrics::default();
            f.finish(&Whole { sends: 4, duration_s: 1.0, slices: 1, client: Default::default() }, &mut m);
            let turn = |t: &Turn| [&t.ttft, &t.tpot, &t.itl, &t.e2el].map(|s| s.is_exact());
            let r = m.reasoning.as_deref().expect("the reasoning fold");
            let c = m.conversations.as_ref().expect("the conversations fold");
            let l = m.agent_loop.as_ref().expect("the agent loop fold");
            let g = m.graphs.as_ref().expect("the graphs fold");
            assert_eq!((c.turns.len(), l.steps.len()), (4, 4));
            let mut exact: Vec<bool> =
                [&r.ttfo, &r.duration, &r.answer_tpot, &r.tool_call].map(|s| s.is_exact()).into();
            exact.extend([&c.duration, &c.turns_per_conversation, &g.duration, &g.critical_path].map(|s| s.is_exact()));
            exact.extend([&l.tool_wait, &l.session_steps, &l.session_tool, &l.session_model].map(|s| s.is_exact()));
            exact.extend(c.turns.iter().chain([&c.all]).chain(&l.steps).flat_map(turn));
            assert!(
                exact.iter().all(|e| !e),
                "reasoning first seen {}: {exact:?}",
                if reasons_first { "before" } else { "after" }
            );
        }
    }

    #[test]
    fn optional_folds_are_registered_only_when_wanted() {
        let mut a = Aggregator::new(Default::default(), false, Wanted { slice_s: 1.0, ..Wanted::default() });
        a.add(&row(0.0));
        let m = a.finish();
        assert!(m.ramp.is_none());
        assert!(m.reasoning.is_some());
    }
}
