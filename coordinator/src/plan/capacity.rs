//! A capacity search as a value (D62): the level-runs of a sweep (their plans and files
//! are a sweep's), what a level must meet, and how the search runs.

use super::objective::Slo;
use super::sweep::SweepPlan;

/// A validated `surge capacity`.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityPlan {
    /// The base run, the unit searched, runs per level, cooldown, resume, the prefix-cache
    /// reset, where files go; its `levels` are unused (the search picks them).
    pub sweep: SweepPlan,
    /// `--slo`, each judged by its percentile's interval.
    pub slos: Vec<Slo>,
    /// `--min-goodput-ratio` with `--goodput`'s per-request objectives (the base plan's `slo`).
    pub goodput_ratio: Option<f64>,
    /// `--slo accuracy>=X` (D71): the share of accuracy questions answered right, judged by
    /// its interval (the base plan has `--accuracy`).
    pub accuracy_floor: Option<f64>,
    pub lo: f64,
    pub hi: f64,
    /// Integer units: the final bracket's width; rates: its relative width.
    pub resolution: f64,
    pub confidence: f64,
    pub max_level_runs: u32,
    /// The most requests an undecided level takes in all its runs.
    pub max_requests_per_level: u64,
    /// `--num-prompts` of one level-run (at least enough for every SLO to be decidable).
    pub requests_per_run: u64,
    /// Requests (rows) one unit of `--num-prompts` makes: a conversation's fewest turns, else 1.
    pub requests_per_unit: u64,
}

impl CapacityPlan {
    /// Whether the unit is a whole number (concurrency, sessions).
    pub fn integer(&self) -> bool {
        self.sweep.kind != super::sweep::Kind::RequestRate
    }

    /// The file the search's state is written to after every level.
    pub fn file(&self) -> std::path::PathBuf {
        self.sweep.dir.join("capacity.json")
    }
}
