//! Several endpoints and the replicas behind a router in the result (D69): `endpoints`,
//! one entry per endpoint with its counts, errors, throughput, latency statistics (the
//! run's percentiles, and p99 always: the outlier rule reads it) and per-turn prefix
//! cache hit rate; `replicas`, the router's balance and session affinity.

use super::latencies::Latencies;
use crate::analysis::endpoints::{EndpointStats, OUTLIER_MIN_MS, OUTLIER_MIN_ROWS, OUTLIER_RATIO};
use crate::analysis::metrics::Metrics;
use crate::analysis::replicas::ReplicasView;
use crate::plan::{EndpointPlan, RunPlan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The outlier rule as the result states it.
pub fn outlier_rule() -> String {
    format!(
        "p99 TTFT above {OUTLIER_RATIO} x the median of the other endpoints' p99 TTFT and at least {OUTLIER_MIN_MS} ms above it, with {OUTLIER_MIN_ROWS}+ successes"
    )
}

/// One endpoint's numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointResult {
    pub name: String,
    pub url: String,
    pub weight: u32,
    /// Requests sent to it that ended (completed + failed), and those the client cancelled.
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    #[serde(default)]
    pub cancelled: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// Over the run's duration, as the run's own throughputs.
    pub request_throughput: f64,
    pub output_throughput: f64,
    #[serde(flatten)]
    pub latency: Latencies,
    /// Conversations: cached over input tokens of its turns (`None`: the server reported no
    /// cached tokens), in all and per turn index.
    pub prompt_cache_hit_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_turn_hit_rate: Vec<Option<f64>>,
    /// By the outlier rule (`endpoint_outlier_rule`).
    pub outlier: bool,
}

/// The router's quality seen from the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicasResult {
    /// The response header read (`--replica-header`).
    pub header: String,
    pub replicas_seen: usize,
    pub replicas: Vec<ReplicaShare>,
    /// The fewest requests of a replica over the most (1 = even).
    pub balance: f64,
    /// Answered requests whose response did not carry the header.
    pub unnamed_responses: u64,
    /// Conversations: sessions ended with two requests or more, the share of them whose
    /// requests all went to one replica, and the prefix cache's hit rate of the requests
    /// that stayed on their session's previous replica against those that moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stayed_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stayed_hit_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_hit_rate: Option<f64>,
}

/// One replica's share of the answered requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaShare {
    pub name: String,
    pub requests: u64,
    pub completed: u64,
    pub share: f64,
}

fn one(p: &EndpointPlan, e: &EndpointStats, outlier: bool, duration_s: f64) -> EndpointResult {
    let per_s = |n: u64| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
    let a = &e.all;
    EndpointResult {
        name: p.name.clone(),
        url: p.url.clone(),
        weight: p.weight,
        requests: a.completed + a.failed,
        completed: a.completed,
        failed: a.failed,
        cancelled: e.cancelled,
        errors_by_kind: e.errors_by_kind.clone(),
        total_input_tokens: a.input_tokens,
        total_output_tokens: a.output_tokens,
        request_throughput: per_s(a.completed),
        output_throughput: per_s(a.output_tokens),
        latency: Latencies(e.latency.clone()),
        prompt_cache_hit_rate: a.hit_rate(),
        per_turn_hit_rate: e.turns.iter().map(|h| h.rate()).collect(),
        outlier,
    }
}

/// The `endpoints` list (`None` with one endpoint): latencies at the run's
/// `--metric-percentiles` and 99.
pub fn endpoints(plan: &RunPlan, m: &Metrics) -> Option<Vec<EndpointResult>> {
    let v = m.endpoints.as_ref()?;
    let list = plan.endpoints.list.iter().zip(&v.list).enumerate();
    Some(list.map(|(i, (p, e))| one(p, e, v.outliers.get(i).copied().unwrap_or(false), m.duration_s)).collect())
}

/// The `replicas` block (`None` without `--replica-header`).
pub fn replicas(plan: &RunPlan, m: &Metrics) -> Option<ReplicasResult> {
    let header = plan.endpoints.replica_header.clone()?;
    let empty = ReplicasView::default();
    let v = m.replicas.as_ref().unwrap_or(&empty);
    let total: u64 = v.replicas.iter().map(|r| r.requests).sum();
    let (most, fewest) = (v.replicas.iter().map(|r| r.requests).max(), v.replicas.iter().map(|r| r.requests).min());
    let conversations = plan.multi_turn.is_some();
    let some = |x: u64| conversations.then_some(x);
    Some(ReplicasResult {
        header,
        replicas_seen: v.replicas.len(),
        replicas: v
            .replicas
            .iter()
            .map(|r| ReplicaShare {
                name: r.name.clone(),
                requests: r.requests,
                completed: r.completed,
                share: if total > 0 { r.requests as f64 / total as f64 } else { 0.0 },
            })
            .collect(),
        balance: match (fewest, most) {
            (Some(f), Some(m)) if m > 0 => f as f64 / m as f64,
            _ => 0.0,
        },
        unnamed_responses: v.unnamed,
        sessions: some(v.sessions),
        session_affinity: (conversations && v.sessions > 0).then(|| v.affine_sessions as f64 / v.sessions as f64),
        stayed_requests: some(v.stayed.requests),
        moved_requests: some(v.moved.requests),
        stayed_hit_rate: v.stayed.hit_rate().filter(|_| conversations),
        moved_hit_rate: v.moved.hit_rate().filter(|_| conversations),
    })
}
