//! `surge sweep`: the same run at several concurrency or request-rate levels, each
//! repeated `--runs` times, with per-level statistics (mean, std, t-based 95% CI, CV),
//! an optional knee search, and results written as each level-run finishes:
//! `DIR/TAG-c16-run2.json` (vLLM keys + run_metadata), then `DIR/summary.csv` and
//! `DIR/summary.json` after every level. `--resume` skips level-runs whose files are
//! complete, so a crash loses at most the level-run in flight.

use crate::cli::SweepArgs;
use crate::knee::{KneeRule, Point, grid};
use crate::plan::{RunPlan, UsageError};
use crate::repeat::{Summary, summarize};
use crate::{Failure, exit, finish, open_session, report, resolve_model, run};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the levels vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Concurrency,
    RequestRate,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Concurrency => "concurrency",
            Kind::RequestRate => "request_rate",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Kind::Concurrency => "c",
            Kind::RequestRate => "r",
        }
    }
}

/// Per-level statistics: (column prefix, result key).
pub const STATS: [(&str, &str); 10] = [
    ("request_throughput", "request_throughput"),
    ("output_throughput", "output_throughput"),
    ("p50_ttft_ms", "median_ttft_ms"),
    ("p99_ttft_ms", "p99_ttft_ms"),
    ("p50_tpot_ms", "median_tpot_ms"),
    ("p99_tpot_ms", "p99_tpot_ms"),
    ("p50_itl_ms", "median_itl_ms"),
    ("p99_itl_ms", "p99_itl_ms"),
    ("p50_e2el_ms", "median_e2el_ms"),
    ("p99_e2el_ms", "p99_e2el_ms"),
];

/// A validated sweep.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    pub base: RunPlan,
    pub kind: Kind,
    pub levels: Vec<f64>,
    pub runs: u32,
    pub cooldown: Duration,
    pub find_knee: bool,
    pub rule: KneeRule,
    pub knee_steps: u32,
    pub resume: bool,
    pub dir: PathBuf,
    pub tag: String,
}

impl SweepPlan {
    pub fn from_args(mut a: SweepArgs) -> Result<Self, UsageError> {
        if a.tag.is_empty() || a.tag.contains('/') {
            return Err(UsageError(format!("--tag {:?}: must be a plain file-name prefix", a.tag)));
        }
        let rates = a.run.request_rate.0.clone();
        let (kind, levels) = match &a.concurrency {
            Some(c) => {
                if rates.len() > 1 {
                    return Err(UsageError("--request-rate: give one rate with --concurrency levels".into()));
                }
                (Kind::Concurrency, c.0.iter().map(|&n| f64::from(n)).collect::<Vec<_>>())
            }
            None => {
                let mut r = rates.clone();
                if r.iter().any(|x| x.is_infinite()) {
                    return Err(UsageError(
                        "--concurrency LIST or --request-rate LIST (finite rates) is required".into(),
                    ));
                }
                r.sort_by(f64::total_cmp);
                r.dedup();
                (Kind::RequestRate, r)
            }
        };
        a.run.request_rate.0.truncate(1);
        let mut base = RunPlan::from_args(a.run)?;
        base.save_result = true;
        let dir = base.result_dir.clone().unwrap_or_else(|| PathBuf::from("surge-sweep"));
        Ok(Self {
            base,
            kind,
            levels,
            runs: a.runs,
            cooldown: a.cooldown,
            find_knee: a.find_knee,
            rule: KneeRule { efficiency: a.knee_efficiency, latency_growth: a.knee_latency_growth },
            knee_steps: a.knee_steps,
            resume: a.resume,
            dir,
            tag: a.tag,
        })
    }

    fn level_word(&self, level: f64) -> String {
        format!("{}{}", self.kind.short(), crate::parse::percentile_word(level))
    }

    fn file(&self, level: f64, run: u32) -> PathBuf {
        self.dir.join(format!("{}-{}-run{run}.json", self.tag, self.level_word(level)))
    }

    /// The plan of one level.
    pub fn at(&self, level: f64, run: u32) -> RunPlan {
        let mut p = self.base.clone();
        match self.kind {
            Kind::Concurrency => p.max_concurrency = Some(level as u32),
            Kind::RequestRate => p.request_rate = level,
        }
        p.seed = self.base.seed.wrapping_add(u64::from(run - 1));
        if !p.metadata.iter().any(|(k, _)| k == "result_tag") {
            p.metadata.push(("result_tag".into(), format!("{}-{}", self.tag, self.level_word(level))));
        }
        p
    }
}

/// A complete level-run file from an earlier attempt.
pub fn complete_result(path: &Path) -> Option<Value> {
    let doc: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (doc["client"]["status"] == "complete" && doc.get("completed").is_some()).then_some(doc)
}

/// The sweep's state: every finished level-run document, by level.
struct Results {
    levels: Vec<(f64, Vec<Value>)>,
}

impl Results {
    fn push(&mut self, level: f64, doc: Value) {
        match self.levels.iter_mut().find(|(l, _)| *l == level) {
            Some((_, v)) => v.push(doc),
            None => {
                self.levels.push((level, vec![doc]));
                self.levels.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }

    fn stats(docs: &[Value]) -> Vec<(&'static str, Summary)> {
        STATS
            .iter()
            .map(|(name, key)| (*name, summarize(&docs.iter().filter_map(|d| d[*key].as_f64()).collect::<Vec<_>>())))
            .collect()
    }

    fn points(&self) -> Vec<Point> {
        self.levels
            .iter()
            .map(|(level, docs)| {
                let s = Self::stats(docs);
                let get = |n: &str| s.iter().find(|(k, _)| *k == n).map_or(0.0, |(_, v)| v.mean);
                Point { level: *level, throughput: get("request_throughput"), p99_latency_ms: get("p99_e2el_ms") }
            })
            .collect()
    }
}

fn write_summary(plan: &SweepPlan, results: &Results, knee: Option<f64>) -> std::io::Result<()> {
    std::fs::create_dir_all(&plan.dir)?;
    let mut header = vec![plan.kind.key().to_string(), "runs".to_string()];
    for (name, _) in STATS {
        for s in ["mean", "std", "ci95_low", "ci95_high", "cv"] {
            header.push(format!("{name}_{s}"));
        }
    }
    header.push("knee".into());
    let tmp = plan.dir.join("summary.csv.tmp");
    let mut w = csv::Writer::from_path(&tmp).map_err(std::io::Error::other)?;
    w.write_record(&header).map_err(std::io::Error::other)?;
    let mut levels_json = Vec::new();
    for (level, docs) in &results.levels {
        let stats = Results::stats(docs);
        let mut rec = vec![crate::parse::percentile_word(*level), docs.len().to_string()];
        let mut obj = serde_json::Map::new();
        for (name, s) in &stats {
            rec.extend([s.mean, s.std, s.ci95_low, s.ci95_high, s.cv].map(|v| format!("{v}")));
            obj.insert((*name).to_string(), serde_json::to_value(s).unwrap_or(Value::Null));
        }
        let is_knee = knee == Some(*level);
        rec.push(is_knee.to_string());
        w.write_record(&rec).map_err(std::io::Error::other)?;
        levels_json.push(json!({ plan.kind.key(): level, "runs": docs.len(), "stats": obj, "knee": is_knee }));
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, plan.dir.join("summary.csv"))?;
    let summary = json!({
        "kind": plan.kind.key(),
        "tag": plan.tag,
        "runs_per_level": plan.runs,
        "levels": levels_json,
        "knee": {
            plan.kind.key(): knee,
            "rule": {"efficiency": plan.rule.efficiency, "latency_growth": plan.rule.latency_growth},
            "searched": plan.find_knee,
        },
        "saved_at_utc": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    report::write(&plan.dir.join("summary.json"), &summary)
}

fn progress_bar(total: u64, prefix: String) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} req  {per_sec}  ETA {eta}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(prefix);
    pb
}

/// Runs every (level, run) not already complete; stops at the first run that is not.
async fn run_levels(
    plan: &SweepPlan,
    levels: &[f64],
    session: &mut run::Session,
    model: &str,
    results: &mut Results,
    first: &mut bool,
) -> Result<(), Failure> {
    for &level in levels {
        for k in 1..=plan.runs {
            let path = plan.file(level, k);
            if plan.resume {
                if let Some(doc) = complete_result(&path) {
                    eprintln!("surge sweep: {} complete, skipped", path.display());
                    results.push(level, doc);
                    continue;
                }
            }
            if !*first && !plan.cooldown.is_zero() {
                tokio::time::sleep(plan.cooldown).await;
            }
            *first = false;
            let p = plan.at(level, k);
            let pb = progress_bar(p.num_prompts, format!("{} run {k}/{}", plan.level_word(level), plan.runs));
            let set = |n: u64| pb.set_position(n);
            let outcome =
                session.run(&p, model, Some(&set)).await.map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
            pb.finish_and_clear();
            let mut f = finish(&p, model, &outcome);
            f.doc["sweep"] = json!({"kind": plan.kind.key(), "level": level, "run": k, "runs": plan.runs});
            report::write(&path, &f.doc)
                .map_err(|e| Failure::new(exit::FAILURE, format!("{}: {e}", path.display())))?;
            if outcome.status != run::RunStatus::Complete {
                return Err(Failure::new(
                    crate::status_code(&outcome.status),
                    format!("{} run {k} ended {}; sweep stopped", plan.level_word(level), outcome.status.as_str()),
                ));
            }
            results.push(level, f.doc);
        }
        write_summary(plan, results, None).map_err(|e| Failure::new(exit::FAILURE, format!("summary: {e}")))?;
    }
    Ok(())
}

/// The table printed at the end.
fn table(plan: &SweepPlan, results: &Results, knee: Option<f64>) -> String {
    let mut out = format!(
        "{:>10} {:>4} {:>22} {:>12} {:>10} {:>10} {:>10}\n",
        plan.kind.key(),
        "runs",
        "req/s (95% CI)",
        "out tok/s",
        "p50 TTFT",
        "p99 TTFT",
        "p99 E2EL"
    );
    for (level, docs) in &results.levels {
        let s = Results::stats(docs);
        let m = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| *v).unwrap_or(summarize(&[]));
        let rt = m("request_throughput");
        out.push_str(&format!(
            "{:>10} {:>4} {:>22} {:>12.1} {:>10.2} {:>10.2} {:>10.2}{}\n",
            crate::parse::percentile_word(*level),
            docs.len(),
            format!("{:.2} [{:.2}, {:.2}]", rt.mean, rt.ci95_low, rt.ci95_high),
            m("output_throughput").mean,
            m("p50_ttft_ms").mean,
            m("p99_ttft_ms").mean,
            m("p99_e2el_ms").mean,
            if knee == Some(*level) { "  <- knee" } else { "" }
        ));
    }
    out
}

/// `surge sweep`.
pub async fn sweep_command(plan: SweepPlan) -> u8 {
    match sweep(plan).await {
        Ok(code) => code,
        Err(f) => {
            eprintln!("surge sweep: {}", f.message);
            f.code
        }
    }
}

async fn sweep(plan: SweepPlan) -> Result<u8, Failure> {
    let model = resolve_model(&plan.base).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&plan.base, &embedded).await?;
    let mut results = Results { levels: Vec::new() };
    let mut first = true;
    let res = async {
        run_levels(&plan, &plan.levels, &mut session, &model, &mut results, &mut first).await?;
        if plan.find_knee {
            let points = results.points();
            match plan.rule.first_stop(&points) {
                Some(i) => {
                    let integer = plan.kind == Kind::Concurrency;
                    let fine = grid(points[i].level, points[i + 1].level, plan.knee_steps, integer);
                    eprintln!(
                        "surge sweep: scaling stops between {} and {}; refining at {:?}",
                        points[i].level,
                        points[i + 1].level,
                        fine
                    );
                    run_levels(&plan, &fine, &mut session, &model, &mut results, &mut first).await?;
                }
                None => eprintln!("surge sweep: still scaling at the highest level; no knee below it"),
            }
        }
        Ok::<(), Failure>(())
    }
    .await;
    session.close();
    let knee = if plan.find_knee { plan.rule.knee(&results.points()) } else { None };
    write_summary(&plan, &results, knee).map_err(|e| Failure::new(exit::FAILURE, format!("summary: {e}")))?;
    print!("{}", table(&plan, &results, knee));
    if let Some(k) = knee {
        println!("knee: {} = {}", plan.kind.key(), crate::parse::percentile_word(k));
    }
    eprintln!("surge sweep: results in {}", plan.dir.display());
    res.map(|()| exit::OK)
}
