//! What a run across the fleet produced: how it ended, what the coordinator knows of
//! each agent, and every row placed on one global timeline.

use crate::fleet::clock::Offset;
use crate::plan::split::Share;
use std::collections::BTreeMap;
use std::time::Instant;
use surge_proto::{Done, ErrorKind, Health, HelloReply, Row, agent_msg};

/// One row placed on the global timeline.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GlobalRow {
    /// Index of the agent that sent it.
    pub agent: usize,
    /// Send time in seconds on the coordinator's clock, relative to the planned start.
    pub start_s: f64,
    /// Intended send time on the same timeline (open loop only).
    pub intended_s: Option<f64>,
    pub row: Row,
}

impl GlobalRow {
    /// vLLM's `latencies` entry: the E2E latency of a success, 0.0 for a failure.
    pub fn vllm_latency_s(&self) -> f64 {
        if self.ok() { self.e2el_s() } else { 0.0 }
    }

    /// vLLM's client queue time: the send minus the arrival (the intended send in an open
    /// loop; the start in a closed loop, where every request arrives at once).
    pub fn queue_s(&self) -> f64 {
        (self.start_s - self.intended_s.unwrap_or(0.0)).max(0.0)
    }

    pub fn ok(&self) -> bool {
        self.row.error() == ErrorKind::None
    }
    pub fn ttft_s(&self) -> f64 {
        self.row.ttft_us as f64 / 1e6
    }
    /// The time to the first token of a reply that had one: a success with no token (the
    /// anomaly `no_tokens`, D50) has none, and stays out of every TTFT statistic.
    pub fn first_token_s(&self) -> Option<f64> {
        (self.row.ttft_us > 0).then(|| self.ttft_s())
    }
    pub fn e2el_s(&self) -> f64 {
        self.row.latency_us as f64 / 1e6
    }
    pub fn end_s(&self) -> f64 {
        self.start_s + self.e2el_s()
    }
    /// (E2EL - TTFT) / (output tokens - 1), from the same float values the detailed
    /// result saves, or `None` for a single-token output.
    pub fn tpot_s(&self) -> Option<f64> {
        (self.row.output_tokens > 1 && self.row.ttft_us > 0)
            .then(|| (self.e2el_s() - self.ttft_s()) / f64::from(self.row.output_tokens - 1))
    }
}

/// The snake_case name of an error kind, as used in results.
pub fn kind_name(k: ErrorKind) -> String {
    k.as_str_name().trim_start_matches("ERROR_KIND_").to_ascii_lowercase()
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    Complete,
    /// Agents were lost; the run is not valid (default policy).
    Invalid {
        lost: Vec<String>,
    },
    /// Agents were lost with `--tolerate-agent-loss`; the rest is reported.
    Partial {
        lost: Vec<String>,
    },
    /// Ctrl-C (SIGINT).
    Interrupted,
    /// SIGTERM.
    Terminated,
}

impl RunStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Complete => "complete",
            RunStatus::Invalid { .. } => "invalid",
            RunStatus::Partial { .. } => "partial",
            RunStatus::Interrupted | RunStatus::Terminated => "interrupted",
        }
    }
}

/// Batch sequence numbers received, in memory that does not grow with the run: runs of
/// consecutive numbers, each by its first and its last. An agent numbers its batches on
/// across the runs of a session, so a run's numbers start wherever the last run's ended:
/// they make one run, and one more for each gap a resend has yet to fill.
#[derive(Debug, Clone, Default)]
pub struct SeenBatches {
    runs: BTreeMap<u64, u64>,
}

impl SeenBatches {
    /// Records `seq`; false when it was already received (a resend).
    pub fn insert(&mut self, seq: u64) -> bool {
        let before = self.runs.range(..=seq).next_back().map(|(&first, &last)| (first, last));
        if before.is_some_and(|(_, last)| seq <= last) {
            return false;
        }
        // The run that starts just after `seq` joins it.
        let last = seq.checked_add(1).and_then(|n| self.runs.remove(&n)).unwrap_or(seq);
        match before {
            // `l < seq`: no overflow.
            Some((first, l)) if l + 1 == seq => self.runs.insert(first, last),
            _ => self.runs.insert(seq, last),
        };
        true
    }
}

/// What the coordinator knows of one agent after the run.
#[derive(Debug, Clone, Default)]
pub struct AgentReport {
    pub addr: String,
    pub hello: HelloReply,
    pub offset: Offset,
    pub share: Option<Share>,
    pub rows: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub done: Option<Done>,
    pub last_health: Option<Health>,
    pub peak_cpu_percent: f64,
    /// Server scrapes the agent could not pass on (its `dropped_before` counts, summed).
    pub scrape_points_dropped: u64,
    pub lost: Option<String>,
    pub(crate) started_unix_ns: Option<i64>,
    pub(crate) seen: SeenBatches,
    pub(crate) last_heard: Option<Instant>,
    /// When a fresh connection to the silent agent came up to resume its session (D72).
    pub(crate) reattaching: Option<Instant>,
    /// The Start sent to it, resent when its session resumes (the first may have gone
    /// into the broken stream).
    pub(crate) start: Option<surge_proto::Start>,
}

impl AgentReport {
    /// The agent speaks the previous protocol version (D43): its Prepare carries version
    /// 9's fields, its Done is read from them, it has no graceful stop.
    pub fn legacy(&self) -> bool {
        self.hello.protocol_version == surge_proto::v9::VERSION
    }

    /// Notes that the agent spoke at `now`; keeps its health. True for a Health message.
    pub(crate) fn absorb(&mut self, msg: &agent_msg::Msg, now: Instant) -> bool {
        self.heard(now);
        if let agent_msg::Msg::ServerMetrics(m) = msg {
            self.scrape_points_dropped += m.dropped_before;
        }
        if let agent_msg::Msg::Health(h) = msg {
            self.peak_cpu_percent = self.peak_cpu_percent.max(h.cpu_percent);
            self.last_health = Some(*h);
            return true;
        }
        false
    }

    /// Notes that the agent spoke at `now`.
    pub(crate) fn heard(&mut self, now: Instant) {
        // Its link may have marked a later time (D79): the silence never starts earlier.
        self.last_heard = Some(self.last_heard.map_or(now, |t| t.max(now)));
        self.reattaching = None;
    }

    /// Places `rows` of this agent (index `agent`), relative to `started_unix_ns` on the
    /// agent's clock, on the coordinator's timeline (seconds from `run_start_ns`), in
    /// their slots (D99), and counts them.
    pub fn place(&mut self, agent: usize, rows: &mut [GlobalRow], started_unix_ns: i64, run_start_ns: i64) {
        self.started_unix_ns = Some(started_unix_ns);
        let base_s = (started_unix_ns - self.offset.offset_ns - run_start_ns) as f64 / 1e9;
        for g in rows {
            let row = &g.row;
            // Probes (--probe-request-rate) are not the load's requests.
            if !row.probe {
                match row.error() {
                    ErrorKind::None => self.completed += 1,
                    // The client's cancellations are not failures (D21).
                    ErrorKind::Cancelled => self.cancelled += 1,
                    _ => self.failed += 1,
                }
            }
            g.agent = agent;
            g.start_s = base_s + row.start_us as f64 / 1e6;
            g.intended_s = (row.intended_us >= 0).then(|| base_s + row.intended_us as f64 / 1e6);
        }
    }

    /// Whether the agent is neither done nor lost.
    pub(crate) fn pending(&self) -> bool {
        self.done.is_none() && self.lost.is_none()
    }
}

/// Requests finished so far across `agents`, from their latest health reports.
pub(crate) fn finished_requests(agents: &[AgentReport]) -> u64 {
    agents.iter().filter_map(|a| a.last_health.as_ref()).map(|h| h.completed + h.failed).sum()
}

/// Everything a finished run produced (its rows went to the observer as they arrived).
#[derive(Debug)]
pub struct Outcome {
    pub agents: Vec<AgentReport>,
    pub status: RunStatus,
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// Agents given but not reached (`--min-agents`), and how long the coordinator waited
    /// for late agents before the first run (0: none was late).
    pub missing_agents: Vec<String>,
    pub agents_waited_s: f64,
    /// The coordinator ended the run once what it measured had answered its question.
    pub halted: Option<Halt>,
}

/// Why the coordinator ended a run before its planned end (D62): the agents are stopped as
/// by Ctrl-C, but the run is complete, not interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// `--precision`: every named percentile's interval is narrow enough.
    Precision,
    /// A capacity level's queue grows and the level already fails its SLOs.
    Saturated,
}

impl Halt {
    pub fn reason(self) -> &'static str {
        match self {
            Halt::Precision => "the percentiles are as precise as asked (--precision)",
            Halt::Saturated => "the level is over-saturated: its queue grows and it fails its SLOs",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SeenBatches;

    /// Scrapes an agent could not pass on are summed from every message that says so.
    #[test]
    fn dropped_scrapes_are_counted_not_lost() {
        use surge_proto::{ServerMetrics, agent_msg};
        let mut a = super::AgentReport::default();
        let now = std::time::Instant::now();
        for dropped in [0, 3, 0, 2] {
            a.absorb(
                &agent_msg::Msg::ServerMetrics(ServerMetrics { dropped_before: dropped, ..Default::default() }),
                now,
            );
        }
        assert_eq!(a.scrape_points_dropped, 5);
    }

    #[test]
    fn seen_batches_drop_duplicates_and_stay_small() {
        let mut s = SeenBatches::default();
        for (seq, new) in
            [(0, true), (2, true), (1, true), (1, false), (0, false), (5, true), (3, true), (4, true), (4, false)]
        {
            assert_eq!(s.insert(seq), new, "seq {seq}");
        }
        assert_eq!(s.runs.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(), [(0, 5)]);
        for seq in 6..100_000 {
            assert!(s.insert(seq));
        }
        assert!(!s.insert(99_999) && !s.insert(0) && s.runs.len() == 1);
        assert!(s.insert(u64::MAX) && !s.insert(u64::MAX), "the last number, once");
    }

    /// A later run of a session: its agent numbers on from where the last run's batches
    /// ended, and a fresh record of them holds one run, not every number (it held every
    /// one when it counted from 0).
    #[test]
    fn a_later_runs_numbers_from_where_the_last_ended_stay_one_run() {
        let mut s = SeenBatches::default();
        for seq in 40_000..140_000 {
            assert!(s.insert(seq));
        }
        assert_eq!(s.runs.len(), 1);
        // A resend after a reconnect: its batches arrive again, and some for the first time
        // past a gap.
        assert!(s.insert(140_005) && s.runs.len() == 2);
        assert!(!s.insert(139_000) && !s.insert(140_005));
        for seq in 140_000..140_005 {
            assert!(s.insert(seq));
        }
        assert_eq!(s.runs.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(), [(40_000, 140_005)]);
        assert!(s.insert(39_999) && s.runs.len() == 1, "a number just below joins the run");
    }
}
