//! `surge fleet check`: what each agent is and whether it can run the planned load, before
//! any load: its certificate, version and protocol, cores, open-file limit and the
//! requests in flight its host allows, `--max-in-flight`, clock offset and its bound, the
//! targets it allows, and (with a target) whether it may and can reach it.

use super::session::Session;
use crate::plan::{RunPlan, split};

/// One agent's line.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCheck {
    pub address: String,
    pub cert_name: String,
    pub version: String,
    pub protocol: u32,
    pub cores: u32,
    pub open_files: u64,
    /// Requests in flight (HTTP/1.1) the host's limits allow.
    pub host_max_in_flight: u32,
    pub max_in_flight: u32,
    pub clock_offset_ms: f64,
    pub clock_bound_ms: f64,
    pub allowed_targets: Vec<String>,
    /// The target's answer from this agent: (HTTP status, ms), when probed and reached.
    pub reach: Option<(u32, f64)>,
    /// Why this agent cannot run the planned load (empty: it can).
    pub problems: Vec<String>,
}

impl AgentCheck {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks every agent of `session` against `plan`; `probe`: ask each to reach the target.
pub async fn check(
    session: &mut Session,
    plan: &RunPlan,
    probe: bool,
) -> Result<Vec<AgentCheck>, super::session::RunError> {
    // Each endpoint (D69), one after the other.
    let mut replies = Vec::new();
    if probe {
        for e in &plan.endpoints.list {
            replies.push((e.url.clone(), session.probe(plan, &e.url).await?));
        }
    }
    let weights: Vec<u32> = session.agents.iter().map(|a| a.hello.cores.max(1)).collect();
    let sessions = plan.multi_turn.as_ref().and_then(|m| m.concurrency);
    let shares = split::split_sessions(
        &weights,
        plan.num_prompts,
        plan.max_concurrency,
        plan.request_rate,
        plan.num_warmups,
        sessions,
    );
    let mut out = Vec::new();
    for (i, a) in session.agents.iter().enumerate() {
        let h = &a.hello;
        let mut problems = Vec::new();
        let share = &shares[i];
        // The requests in flight its share may hold: the concurrency, else the open sessions.
        let wanted = if share.max_concurrency > 0 { share.max_concurrency } else { share.sessions };
        if wanted > h.max_in_flight {
            problems.push(format!(
                "its share of the load ({wanted} in flight) exceeds its --max-in-flight {}",
                h.max_in_flight
            ));
        }
        // The host's limits count connections: HTTP/2 and HTTP/3 carry 100 streams each.
        let multiplexed = matches!(plan.http_version, surge_proto::HttpChoice::Http2 | surge_proto::HttpChoice::Http3);
        let host_allows = if multiplexed { h.host_max_in_flight.saturating_mul(100) } else { h.host_max_in_flight };
        // 0: an agent of version 9 does not say (D43).
        if h.open_files > 0 && wanted > host_allows {
            problems.push(format!(
                "its share of the load ({wanted} in flight) exceeds the {host_allows} its open-file limit {} allows (raise LimitNOFILE / ulimit -n)",
                h.open_files
            ));
        }
        let mut reach = None;
        for (url, r) in replies.iter().filter_map(|(url, r)| Some((url, r[i].as_ref()?))) {
            if !r.allowed {
                problems.push(format!("may not load {url}: {}", r.error));
            } else if !r.error.is_empty() {
                problems.push(format!("cannot reach {url}: {}", r.error));
            } else if reach.is_none() {
                // The first endpoint's answer (the table has one column for it).
                reach = Some((r.http_status, r.ms));
            }
        }
        out.push(AgentCheck {
            address: a.addr.clone(),
            cert_name: h.cert_name.clone(),
            version: h.agent_version.clone(),
            protocol: h.protocol_version,
            cores: h.cores,
            open_files: h.open_files,
            host_max_in_flight: h.host_max_in_flight,
            max_in_flight: h.max_in_flight,
            clock_offset_ms: a.offset.offset_ns as f64 / 1e6,
            clock_bound_ms: a.offset.bound_ns() as f64 / 1e6,
            allowed_targets: h.allowed_targets.clone(),
            reach,
            problems,
        });
    }
    Ok(out)
}
