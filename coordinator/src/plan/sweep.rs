//! A sweep as a value: the base run, the levels it varies (concurrency or request rate),
//! repetitions, the knee rule; each level-run's plan is the base with two fields changed.

use super::RunPlan;
use std::path::PathBuf;
use std::time::Duration;

/// What the levels vary; a result names it by its [`key`](Kind::key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    #[serde(rename = "concurrency")]
    Concurrency,
    #[serde(rename = "request_rate")]
    RequestRate,
    /// Conversations open at once (`--multi-turn-concurrency`).
    #[serde(rename = "multi_turn_concurrency")]
    Sessions,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Concurrency => "concurrency",
            Kind::RequestRate => "request_rate",
            Kind::Sessions => "multi_turn_concurrency",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Kind::Concurrency => "c",
            Kind::RequestRate => "r",
            Kind::Sessions => "s",
        }
    }
}

/// When a level stops being worth its cost (see `analysis::knee`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeRule {
    /// Minimum throughput gained per unit of level added, relative to linear scaling.
    pub efficiency: f64,
    /// Maximum growth of p99 latency from one level to the next.
    pub latency_growth: f64,
}

/// A validated sweep.
#[derive(Debug, Clone, PartialEq)]
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
    /// The flags given, as `--resume` compares them with the directory's (D93).
    pub settings: super::Settings,
    /// POST /reset_prefix_cache before each level-run.
    pub reset_prefix_cache: bool,
    pub dir: PathBuf,
    pub tag: String,
}

impl SweepPlan {
    /// `c16`, `r2.5`.
    pub fn level_name(&self, level: f64) -> String {
        format!("{}{}", self.kind.short(), super::percentile_word(level))
    }

    /// The result file of one level-run.
    pub fn file(&self, level: f64, run: u32) -> PathBuf {
        self.dir.join(format!("{}-{}-run{run}.json", self.tag, self.level_name(level)))
    }

    /// The plan of one level-run.
    pub fn at(&self, level: f64, run: u32) -> RunPlan {
        let mut p = self.base.clone();
        match self.kind {
            Kind::Concurrency => p.max_concurrency = Some(level as u32),
            Kind::RequestRate => p.request_rate = level,
            Kind::Sessions => {
                if let Some(m) = &mut p.multi_turn {
                    m.concurrency = Some(level as u32);
                }
            }
        }
        p.seed = self.base.seed.wrapping_add(u64::from(run - 1));
        if !p.metadata.iter().any(|(k, _)| k == "result_tag") {
            p.metadata.push(("result_tag".into(), format!("{}-{}", self.tag, self.level_name(level))));
        }
        p
    }
}
