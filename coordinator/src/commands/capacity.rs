//! `surge capacity` (D48, D62): level-runs chosen by the search (up by doubling, then
//! bisection), each level judged by its SLOs' percentile intervals over its pooled runs
//! (D47), undecided levels given more requests up to their budget, over-saturated levels
//! stopped early; `DIR/capacity.json` rewritten after every level, so `--resume` goes on
//! where a cut search stopped.

use super::{open_session, resolve_model, run_watched};
use crate::analysis::capacity::{self, Search, Verdict, judge, judge_goodput, values_to_decide};
use crate::analysis::monitor::{Checkpoints, Monitor, values_ms};
use crate::analysis::saturation;
use crate::exit::{self, Failure};
use crate::fleet::outcome::{GlobalRow, Halt, RunStatus};
use crate::fleet::session::Session;
use crate::output::Outputs;
use crate::output::capacity::{AtCapacity, Bounded, CapacityLevel, CapacityResult, SloAtLevel, StoppedEarly, Totals};
use crate::output::result::{EndedBy, RunResult, SweepPosition, saved_at};

use crate::plan::capacity::CapacityPlan;
use crate::target::cache::reset_prefix_cache;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// A level's verdict, each SLO's judgement, and the goodput share's and the accuracy's
/// verdicts and intervals.
/// A proportion's verdict and interval (goodput's share, accuracy's).
type Proportion = Option<(Verdict, (f64, f64))>;

type Judgement = (Verdict, Vec<capacity::Judged>, Proportion, Proportion);

/// One level's values over all its runs, and the current run's (send time, TTFT) for the
/// over-saturation check. Bounded by the level's request budget; dropped with the level.
struct Level<'p> {
    plan: &'p CapacityPlan,
    /// Per SLO: its metric's values (ms) of every success of the level.
    values: Vec<Vec<f64>>,
    /// Per SLO: each finished run's own estimate.
    run_estimates: Vec<Vec<f64>>,
    /// Goodput: requests meeting every objective, of all that ended not cancelled.
    good: u64,
    judged: u64,
    /// Accuracy questions answered right, of those answered (D71).
    right: u64,
    answered: u64,
    /// Requests that ended, cancelled ones too.
    ended: u64,
    /// This run's successes' TTFT against their send time.
    trend: saturation::Trend,
    checks: Checkpoints,
    run_rows: u64,
}

impl<'p> Level<'p> {
    fn new(plan: &'p CapacityPlan) -> Self {
        Self {
            plan,
            values: vec![Vec::new(); plan.slos.len()],
            run_estimates: vec![Vec::new(); plan.slos.len()],
            good: 0,
            judged: 0,
            right: 0,
            answered: 0,
            ended: 0,
            trend: saturation::Trend::default(),
            checks: Checkpoints::new(50),
            run_rows: 0,
        }
    }

    fn start_run(&mut self) {
        self.trend = saturation::Trend::default();
        self.checks = Checkpoints::new(50);
        self.run_rows = 0;
    }

    /// The level's verdict from what it holds, and per SLO its judgement.
    fn judge(&mut self) -> Judgement {
        let conf = self.plan.confidence;
        let judged: Vec<capacity::Judged> = self
            .plan
            .slos
            .iter()
            .zip(&mut self.values)
            .map(|(s, v)| {
                crate::analysis::stats::sort(v);
                judge(*s, v, conf)
            })
            .collect();
        let goodput = self.plan.goodput_ratio.map(|r| judge_goodput(self.good, self.judged, r, conf));
        // Accuracy's floor is judged as goodput's is: a proportion and its interval.
        let accuracy = self.plan.accuracy_floor.map(|f| judge_goodput(self.right, self.answered, f, conf));
        let verdict = capacity::combine(
            judged.iter().map(|j| j.verdict).chain(goodput.map(|g| g.0)).chain(accuracy.map(|a| a.0)),
        );
        (verdict, judged, goodput, accuracy)
    }

    /// Requests in all the level would need for a decision at the shares seen.
    fn requests_to_decide(&mut self) -> Option<u64> {
        let conf = self.plan.confidence;
        let mut most = 0u64;
        for (s, v) in self.plan.slos.iter().zip(&mut self.values) {
            crate::analysis::stats::sort(v);
            if judge(*s, v, conf).verdict == Verdict::Undecided {
                // Values per request: ITL has several; scale back to requests.
                let per_request = (v.len() as f64 / self.ended.max(1) as f64).max(1e-9);
                most = most.max((values_to_decide(*s, v, conf)? as f64 / per_request).ceil() as u64);
            }
        }
        if let Some(r) = self.plan.goodput_ratio {
            most = most.max(proportion_to_decide(self.good, self.judged, r, conf)?);
        }
        if let Some(f) = self.plan.accuracy_floor {
            // Questions are a share of the requests: scale back to requests.
            let per_request = (self.answered as f64 / self.ended.max(1) as f64).max(1e-9);
            let n = proportion_to_decide(self.right, self.answered, f, conf)?;
            most = most.max((n as f64 / per_request).ceil() as u64);
        }
        Some(most)
    }
}

/// How many samples in all a proportion (`good` of `n`) would need for its interval to
/// exclude `r`, at the share seen (`None`: not within 10 million): the interval narrows as
/// 1/sqrt(n).
fn proportion_to_decide(good: u64, n: u64, r: f64, conf: f64) -> Option<u64> {
    let share = good as f64 / n.max(1) as f64;
    let mut m = n.max(1);
    while m <= 10_000_000 {
        if judge_goodput((share * m as f64).round() as u64, m, r, conf).0 != Verdict::Undecided {
            return Some(m);
        }
        m *= 2;
    }
    None
}

impl Monitor for Level<'_> {
    fn rows(&mut self, rows: &[&GlobalRow]) {
        let slo = &self.plan.sweep.base.slo;
        for r in rows {
            self.ended += 1;
            self.run_rows += 1;
            if r.row.error() != surge_proto::ErrorKind::Cancelled {
                self.judged += 1;
            }
            if let Some(right) = r.row.correct {
                self.answered += 1;
                self.right += u64::from(right);
            }
            for (s, v) in self.plan.slos.iter().zip(&mut self.values) {
                values_ms(r, s.metric, |x| v.push(x));
            }
            if r.ok() {
                if let Some(t) = r.first_token_s() {
                    self.trend.add(r.start_s, t * 1000.0);
                }
                if crate::analysis::aggregate::meets(slo, r) {
                    self.good += 1;
                }
            }
        }
    }

    /// Over-saturated: the queue grows and the rows so far already fail the level. Only
    /// a paced level's queue can grow without bound; a closed loop's start (every client
    /// at once, the later waves waiting) looks like growth and is not judged so.
    fn halt(&mut self) -> Option<Halt> {
        if self.plan.sweep.kind != crate::plan::sweep::Kind::RequestRate {
            return None;
        }
        if !self.checks.due(self.run_rows) || !self.trend.growing() {
            return None;
        }
        (self.judge().0 == Verdict::Fail).then_some(Halt::Saturated)
    }
}

struct Capacity<'a> {
    plan: &'a CapacityPlan,
    session: Session,
    outputs: &'a mut Outputs,
    model: String,
    result: CapacityResult,
    /// Each passing level's first run result, for the figures at capacity.
    passed: Vec<(f64, RunResult)>,
    started: Instant,
    /// A resumed search's time before this process.
    wall_before: f64,
    first: bool,
}

impl Capacity<'_> {
    /// Runs one level to its verdict; `None` when `--max-level-runs` ran out first. Long:
    /// the level's loop reads top to bottom (runs asked first, each run, the judgement,
    /// the budget), as D62 describes it.
    async fn level(&mut self, level: f64) -> Result<Option<CapacityLevel>, Failure> {
        let plan = self.plan;
        let sweep = &plan.sweep;
        let mut state = Level::new(plan);
        let mut out = CapacityLevel {
            level,
            verdict: Verdict::Undecided,
            runs: 0,
            requests: 0,
            slos: Vec::new(),
            goodput_ratio: None,
            accuracy: None,
            request_throughput: 0.0,
            output_throughput: 0.0,
            goodput: None,
            requests_to_decide: None,
            stopped_early: None,
            files: Vec::new(),
        };
        let mut throughputs = Vec::new();
        let mut next_size = plan.requests_per_run;
        loop {
            if self.result.totals.level_runs >= plan.max_level_runs {
                return Ok(None);
            }
            let k = out.runs + 1;
            if !self.first && !sweep.cooldown.is_zero() {
                tokio::time::sleep(sweep.cooldown).await;
            }
            self.first = false;
            let mut p = sweep.at(level, k);
            p.num_prompts = next_size;
            if sweep.reset_prefix_cache {
                reset_prefix_cache(&p).await.map_err(|m| Failure::new(exit::FAILURE, m))?;
            }
            let label = format!("{} run {k}", sweep.level_name(level));
            state.start_run();
            let (mut record, _, _) =
                run_watched(&mut self.session, self.outputs, &p, &self.model, &label, false, Some(&mut state)).await?;
            let path = sweep.file(level, k);
            record.result.sweep = Some(SweepPosition { kind: sweep.kind, level, run: k, runs: sweep.runs });
            record.result.settings = sweep.settings.map();
            record.file = Some(path.clone());
            self.outputs.run(&record).map_err(|e| Failure::run("", &e))?;
            record.result.detailed_spill = None;
            let r = record.result;
            out.runs = k;
            out.files.push(path.display().to_string());
            let ended = r.completed + r.failed + r.cancelled;
            out.requests += ended;
            self.result.totals.level_runs += 1;
            self.result.totals.requests += ended;
            throughputs.push((r.request_throughput, r.output_throughput, r.request_goodput));
            if record.status != RunStatus::Complete {
                return Err(Failure::new(
                    exit::of_status(&record.status),
                    format!(
                        "{label} ended {}; search stopped",
                        record.status.as_str(),
                        label = sweep.level_name(level)
                    ),
                ));
            }
            // Each run's own estimate, from its result (the spread beside the verdict).
            for (i, s) in plan.slos.iter().enumerate() {
                if let Some(e) = r.latency.get(s.metric.name()).and_then(|m| m.at(s.pct)) {
                    state.run_estimates[i].push(e);
                }
            }
            if r.ended_by == EndedBy::Saturated {
                let planned = p.num_prompts;
                let saved = if ended > 0 { r.duration * (planned as f64 / ended as f64 - 1.0) } else { 0.0 };
                self.result.totals.saved_s += saved.max(0.0);
                out.stopped_early = Some(StoppedEarly {
                    requests_sent: ended,
                    requests_planned: planned,
                    after_s: r.duration,
                    saved_s: saved.max(0.0),
                });
                out.verdict = Verdict::Fail;
                break;
            }
            if k == 1 && self.passed.iter().all(|(l, _)| *l != level) {
                self.passed.push((level, r));
            }
            let (verdict, ..) = state.judge();
            out.verdict = verdict;
            if k < sweep.runs {
                continue;
            }
            if verdict != Verdict::Undecided {
                break;
            }
            // Undecided after the asked runs: more requests, within the level's budget.
            let needed = state.requests_to_decide();
            out.requests_to_decide = needed;
            let left = plan.max_requests_per_level.saturating_sub(out.requests);
            match needed {
                Some(n) if left > 0 => {
                    let rows = n.saturating_sub(out.requests).clamp(plan.requests_per_run.min(left), left);
                    next_size = rows.div_ceil(plan.requests_per_unit);
                }
                _ => break,
            }
        }
        let (_, judged, goodput, accuracy) = state.judge();
        out.slos = judged
            .iter()
            .zip(&state.run_estimates)
            .map(|(j, est)| SloAtLevel {
                slo: j.slo.label(),
                n: j.interval.n,
                estimate_ms: j.interval.estimate,
                low_ms: j.interval.low,
                high_ms: j.interval.high,
                verdict: j.verdict,
                run_estimates_ms: if est.len() > 1 { est.clone() } else { Vec::new() },
            })
            .collect();
        out.goodput_ratio = goodput.map(|(_, (low, high))| Bounded {
            estimate: state.good as f64 / state.judged.max(1) as f64,
            low,
            high,
        });
        out.accuracy = accuracy.map(|(_, (low, high))| Bounded {
            estimate: state.right as f64 / state.answered.max(1) as f64,
            low,
            high,
        });
        let n = throughputs.len().max(1) as f64;
        out.request_throughput = throughputs.iter().map(|t| t.0).sum::<f64>() / n;
        out.output_throughput = throughputs.iter().map(|t| t.1).sum::<f64>() / n;
        let goodputs: Vec<f64> = throughputs.iter().filter_map(|t| t.2).collect();
        out.goodput = (!goodputs.is_empty()).then(|| goodputs.iter().sum::<f64>() / goodputs.len() as f64);
        if out.verdict != Verdict::Undecided {
            out.requests_to_decide = None;
        }
        if out.verdict != Verdict::Pass {
            self.passed.retain(|(l, _)| *l != level);
        }
        Ok(Some(out))
    }

    /// The search, from what `--resume` found on; `Ok(false)` when `--max-level-runs`
    /// cut it.
    async fn search(&mut self, search: &mut Search) -> Result<bool, Failure> {
        while let Some(level) = search.next() {
            let Some(l) = self.level(level).await? else { return Ok(false) };
            search.record(level, l.verdict == Verdict::Pass);
            self.result.levels.push(l);
            fill(&mut self.result, search, &self.passed);
            self.result.totals.wall_s = self.wall_before + self.started.elapsed().as_secs_f64();
            self.outputs
                .capacity(&self.result, &self.plan.sweep.dir, false)
                .map_err(|e| Failure::run("capacity", &e))?;
        }
        Ok(true)
    }
}

/// The levels of an earlier `capacity.json` that this search would run again, in order,
/// recorded into `search`; returns them and the time they took.
fn resumed(plan: &CapacityPlan, search: &mut Search, outputs: &mut Outputs) -> (Vec<CapacityLevel>, f64) {
    let Ok(text) = std::fs::read_to_string(plan.file()) else { return (Vec::new(), 0.0) };
    let Ok(old) = serde_json::from_str::<CapacityResult>(&text) else {
        outputs.notice(&format!("{}: not a capacity result; starting over", plan.file().display()));
        return (Vec::new(), 0.0);
    };
    if !super::resume::same(&old.settings, &plan.sweep.settings.map(), &plan.file(), outputs) {
        return (Vec::new(), 0.0);
    }
    let wall = old.totals.wall_s;
    let mut kept = Vec::new();
    for l in old.levels {
        if search.next() != Some(l.level) {
            break;
        }
        outputs.notice(&format!("level {} ({:?}) from {}, skipped", l.level, l.verdict, plan.file().display()));
        search.record(l.level, l.verdict == Verdict::Pass);
        kept.push(l);
    }
    (kept, wall)
}

pub async fn capacity_command(plan: CapacityPlan) -> u8 {
    let mut outputs = Outputs::standard("capacity", false);
    super::warn_ignored(&plan.sweep.base, &mut outputs);
    let res = capacity(&plan, &mut outputs).await;
    outputs.stop(None).await;
    match res {
        Ok(code) => code,
        Err(f) => {
            outputs.notice(&f.message);
            f.code
        }
    }
}

/// The search; the caller closes `outputs` when it returns.
async fn capacity(plan: &CapacityPlan, outputs: &mut Outputs) -> Result<u8, Failure> {
    let base = &plan.sweep.base;
    let model = resolve_model(base).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let session = open_session(base, &embedded, true, outputs).await?;
    let mut search = Search::new(plan.lo, plan.hi, plan.integer(), plan.resolution);
    let (kept, wall_before) = if plan.sweep.resume { resumed(plan, &mut search, outputs) } else { (Vec::new(), 0.0) };
    let result = CapacityResult {
        capacity: None,
        bracket: [None, None],
        unit: plan.sweep.kind.key().into(),
        slos: plan.slos.clone(),
        min_goodput_ratio: plan.goodput_ratio,
        min_accuracy: plan.accuracy_floor,
        confidence: plan.confidence,
        totals: Totals {
            level_runs: kept.iter().map(|l| l.runs).sum(),
            requests: kept.iter().map(|l| l.requests).sum(),
            ..Default::default()
        },
        levels: kept,
        at_capacity: None,
        complete: false,
        ended: String::new(),
        saved_at_utc: String::new(),
        settings: plan.sweep.settings.map(),
    };
    let mut c = Capacity {
        plan,
        session,
        outputs,
        model,
        result,
        passed: Vec::new(),
        started: Instant::now(),
        wall_before,
        first: true,
    };
    let res = c.search(&mut search).await;
    let Capacity { session, outputs, mut result, started, wall_before, passed, .. } = c;
    session.close();
    outputs.stop(None).await;
    let (code, ended) = match &res {
        Ok(true) => (exit::OK, "the bracket is within the resolution, or the range is exhausted".to_string()),
        Ok(false) => (exit::OK, format!("--max-level-runs {} reached", plan.max_level_runs)),
        Err(f) => (f.code, f.message.clone()),
    };
    result.complete = matches!(res, Ok(true));
    result.ended = ended;
    fill(&mut result, &search, &passed);
    result.totals.wall_s = wall_before + started.elapsed().as_secs_f64();
    outputs.capacity(&result, &plan.sweep.dir, true).map_err(|e| Failure::run("capacity", &e))?;
    outputs.notice(&format!("results in {}", plan.sweep.dir.display()));
    if let Err(f) = res {
        outputs.notice(&f.message);
    }
    Ok(code)
}

/// The answer so far: capacity, bracket, the passing level's figures (D48).
fn fill(r: &mut CapacityResult, search: &Search, passed: &[(f64, RunResult)]) {
    let (pass, fail) = search.bracket();
    r.capacity = pass;
    r.bracket = [pass, fail];
    r.at_capacity = pass.and_then(|p| passed.iter().find(|(l, _)| *l == p)).map(|(_, x)| AtCapacity {
        request_throughput: x.request_throughput,
        output_throughput: x.output_throughput,
        total_token_throughput: x.total_token_throughput,
        cost_per_million_output_tokens: x.cost_per_million_output_tokens,
        energy_per_output_token_j: x.energy_per_output_token_j,
    });
    r.saved_at_utc = saved_at(chrono::Utc::now());
}
