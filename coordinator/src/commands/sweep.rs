//! `surge sweep`: the same run at several concurrency or request-rate levels, each
//! repeated `--runs` times, with per-level statistics (mean, std, t-based 95% CI, CV),
//! an optional knee search, and results handed to the outputs as each level-run finishes:
//! `DIR/TAG-c16-run2.json`, then `DIR/summary.csv` and `DIR/summary.json` after every
//! level. `--resume` skips level-runs whose files are complete, so a crash loses at most
//! the level-run in flight.

use super::{open_session, resolve_model, run_on};
use crate::analysis::knee::{Point, grid};
use crate::analysis::repeat::summarize;
use crate::exit::{self, Failure};
use crate::fleet::outcome::RunStatus;
use crate::fleet::session::Session;
use crate::output::Outputs;
use crate::output::files::complete_result;
use crate::output::result::{
    KneeEntry, KneeRuleEntry, LevelKey, LevelSummary, RunResult, SweepPosition, SweepSummary, saved_at,
};
use crate::output::tables::{ACCURACY_STATS, COST_STATS, ENERGY_STATS, SWEEP_STATS, sweep_stat};
use crate::plan::sweep::{Kind, SweepPlan};
use tokio_util::sync::CancellationToken;

/// Every finished level-run result, by level (ascending).
#[derive(Default)]
struct Results {
    levels: Vec<(f64, Vec<RunResult>)>,
}

impl Results {
    fn push(&mut self, level: f64, r: RunResult) {
        match self.levels.iter_mut().find(|(l, _)| *l == level) {
            Some((_, v)) => v.push(r),
            None => {
                self.levels.push((level, vec![r]));
                self.levels.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }

    fn mean(runs: &[RunResult], name: &str) -> f64 {
        summarize(&runs.iter().filter_map(|r| sweep_stat(r, name)).collect::<Vec<_>>()).mean
    }

    fn points(&self) -> Vec<Point> {
        self.levels
            .iter()
            .map(|(level, runs)| Point {
                level: *level,
                throughput: Self::mean(runs, "request_throughput"),
                p99_latency_ms: Self::mean(runs, "p99_e2el_ms"),
            })
            .collect()
    }

    fn summary(&self, plan: &SweepPlan, knee: Option<f64>) -> SweepSummary {
        let key = |v: Option<f64>| match plan.kind {
            Kind::Concurrency => LevelKey::Concurrency(v),
            Kind::RequestRate => LevelKey::RequestRate(v),
            Kind::Sessions => LevelKey::MultiTurnConcurrency(v),
        };
        let levels = self
            .levels
            .iter()
            .map(|(level, runs)| LevelSummary {
                level: key(Some(*level)),
                runs: runs.len(),
                stats: SWEEP_STATS
                    .iter()
                    .chain(COST_STATS.iter())
                    .chain(ENERGY_STATS.iter())
                    .chain(ACCURACY_STATS.iter())
                    .filter_map(|name| {
                        let values: Vec<f64> = runs.iter().filter_map(|r| sweep_stat(r, name)).collect();
                        // The cost columns only with --cost-per-hour, energy with GPU
                        // telemetry, accuracy with --accuracy.
                        let optional =
                            COST_STATS.contains(name) || ENERGY_STATS.contains(name) || ACCURACY_STATS.contains(name);
                        (!values.is_empty() || !optional).then(|| (name.to_string(), summarize(&values)))
                    })
                    .collect(),
                knee: knee == Some(*level),
            })
            .collect();
        SweepSummary {
            kind: plan.kind,
            tag: plan.tag.clone(),
            runs_per_level: plan.runs,
            levels,
            knee: KneeEntry {
                level: key(knee),
                rule: KneeRuleEntry { efficiency: plan.rule.efficiency, latency_growth: plan.rule.latency_growth },
                searched: plan.find_knee,
            },
            saved_at_utc: saved_at(chrono::Utc::now()),
        }
    }
}

struct Sweep<'a> {
    plan: &'a SweepPlan,
    session: Session,
    outputs: &'a mut Outputs,
    model: String,
    results: Results,
    first: bool,
}

impl Sweep<'_> {
    /// Runs every (level, run) not already complete; stops at the first run that is not.
    async fn levels(&mut self, levels: &[f64]) -> Result<(), Failure> {
        let plan = self.plan;
        for &level in levels {
            for k in 1..=plan.runs {
                let path = plan.file(level, k);
                if plan.resume
                    && let Some(r) = complete_result(&path)
                    && super::resume::same(&r.settings, &plan.settings.map(), &path, self.outputs)
                {
                    self.outputs.notice(&format!("{} complete, skipped", path.display()));
                    self.results.push(level, r);
                    continue;
                }
                if !self.first && !plan.cooldown.is_zero() {
                    tokio::time::sleep(plan.cooldown).await;
                }
                self.first = false;
                let p = plan.at(level, k);
                if plan.reset_prefix_cache {
                    crate::target::cache::reset_prefix_cache(&p).await.map_err(|m| Failure::new(exit::FAILURE, m))?;
                }
                let label = format!("{} run {k}/{}", plan.level_name(level), plan.runs);
                let (mut record, _, _) =
                    run_on(&mut self.session, self.outputs, &p, &self.model, &label, false).await?;
                record.result.sweep = Some(SweepPosition { kind: plan.kind, level, run: k, runs: plan.runs });
                record.result.settings = plan.settings.map();
                record.file = Some(path);
                self.outputs.run(&record).map_err(|e| Failure::run("", &e))?;
                if record.status != RunStatus::Complete {
                    return Err(Failure::new(
                        exit::of_status(&record.status),
                        format!("{} run {k} ended {}; sweep stopped", plan.level_name(level), record.status.as_str()),
                    ));
                }
                // Written: its arrays' spill files go now, not at the end of the sweep.
                record.result.detailed_spill = None;
                self.results.push(level, record.result);
            }
            let s = self.results.summary(plan, None);
            self.outputs.sweep(&s, &plan.dir, false).map_err(|e| Failure::run("summary", &e))?;
        }
        Ok(())
    }

    /// The coarse levels, then the grid around the first step that stops scaling.
    async fn all(&mut self) -> Result<(), Failure> {
        let plan = self.plan;
        self.levels(&plan.levels).await?;
        if plan.find_knee {
            let points = self.results.points();
            match plan.rule.first_stop(&points) {
                Some(i) => {
                    let integer = plan.kind != Kind::RequestRate;
                    let fine = grid(points[i].level, points[i + 1].level, plan.knee_steps, integer);
                    self.outputs.notice(&format!(
                        "scaling stops between {} and {}; refining at {:?}",
                        points[i].level,
                        points[i + 1].level,
                        fine
                    ));
                    self.levels(&fine).await?;
                }
                None => self.outputs.notice("still scaling at the highest level; no knee below it"),
            }
        }
        Ok(())
    }
}

/// `surge sweep`.
pub async fn sweep_command(plan: SweepPlan) -> u8 {
    let mut outputs = Outputs::standard("sweep", false);
    super::warn_ignored(&plan.base, &mut outputs);
    let res = sweep(&plan, &mut outputs).await;
    outputs.stop(None).await;
    match res {
        Ok(code) => code,
        Err(f) => {
            outputs.notice(&f.message);
            f.code
        }
    }
}

/// The sweep; the caller closes `outputs` when it returns.
async fn sweep(plan: &SweepPlan, outputs: &mut Outputs) -> Result<u8, Failure> {
    let model = resolve_model(&plan.base).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let session = open_session(&plan.base, &embedded, true, outputs).await?;
    let mut s = Sweep { plan, session, outputs, model, results: Results::default(), first: true };
    let res = s.all().await;
    let Sweep { session, outputs, results, .. } = s;
    session.close();
    // The levels' spans are out; the sweep's span carries no level's numbers.
    outputs.stop(None).await;
    let knee = if plan.find_knee { plan.rule.knee(&results.points()) } else { None };
    let summary = results.summary(plan, knee);
    outputs.sweep(&summary, &plan.dir, true).map_err(|e| Failure::run("summary", &e))?;
    outputs.notice(&format!("results in {}", plan.dir.display()));
    if plan.base.plot_timeline {
        super::plot_timeline(outputs, &plan.dir, &plan.dir.join("report.html"), plan.base.cost_per_hour);
    }
    res.map(|()| exit::OK)
}
