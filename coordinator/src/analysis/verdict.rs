//! Was the client the bottleneck? Each agent's CPU against its cores, the open-loop send
//! lag, and the achieved send rate against the drawn schedule, with the reasons spelled
//! out when any limit is crossed.

use super::metrics::Metrics;
use crate::fleet::outcome::AgentReport;
use crate::plan::RunPlan;
use serde::{Deserialize, Serialize};

/// The verdict with what it was judged against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub client_bound: bool,
    pub reasons: Vec<String>,
    pub requested_rate: Option<f64>,
    /// The rate of the drawn open-loop schedule.
    pub scheduled_rate: Option<f64>,
    pub achieved_rate: f64,
    /// Connect, reset, timeout and TLS errors.
    pub socket_errors: u64,
    pub thresholds: Thresholds,
}

/// The limits of the verdict, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub cpu_fraction_of_cores: f64,
    pub send_lag_p99_us: u64,
    pub rate_shortfall: f64,
    #[serde(default = "default_host_busy")]
    pub host_busy_pct: f64,
    #[serde(default = "default_pressure")]
    pub cpu_pressure_pct: f64,
    #[serde(default = "default_coalesced")]
    pub coalesced_token_fraction: f64,
}

fn default_coalesced() -> f64 {
    crate::plan::VerdictLimits::default().coalesced_fraction
}

fn default_host_busy() -> f64 {
    crate::plan::VerdictLimits::default().host_busy_pct
}

fn default_pressure() -> f64 {
    crate::plan::VerdictLimits::default().cpu_pressure_pct
}

/// The agent host's CPU over the run: busy share of all CPUs and CPU pressure (0..100),
/// from its Done message, else its last health report.
pub fn host(a: &AgentReport) -> (f64, Option<f64>) {
    match &a.done {
        Some(d) => (d.host_busy_pct, d.cpu_pressure_pct),
        None => a.last_health.map_or((0.0, None), |h| (h.host_busy_pct, h.cpu_pressure_pct)),
    }
}

/// An agent's CPU over the run: process CPU time over wall time (100 = one core), or
/// the peak of its health reports when it never said Done.
pub fn cpu_percent(a: &AgentReport) -> f64 {
    match &a.done {
        Some(d) if d.wall_seconds > 0.0 => 100.0 * d.cpu_seconds / d.wall_seconds,
        _ => a.peak_cpu_percent,
    }
}

/// An agent's send lag (p50, p99, max) and timer lateness (p99, max), microseconds:
/// from its Done message, else from its last health report.
pub fn lag_us(a: &AgentReport) -> ((u64, u64, u64), (u64, u64)) {
    match &a.done {
        Some(d) => ((d.lag_p50_us, d.lag_p99_us, d.lag_max_us), (d.wake_p99_us, d.wake_max_us)),
        None => {
            let h = a.last_health.unwrap_or_default();
            ((h.lag_p50_us, h.lag_p99_us, h.lag_max_us), (h.wake_p99_us, h.wake_max_us))
        }
    }
}

/// Judges one run.
pub fn judge(plan: &RunPlan, m: &Metrics, agents: &[AgentReport]) -> Verdict {
    let limits = plan.verdict;
    let open_loop = plan.request_rate.is_finite();
    let mut reasons = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        if let Some(f) = m.coalesced_fraction(i).filter(|f| *f > limits.coalesced_fraction) {
            reasons.push(format!(
                "agent {} read {:.1}% of token events in the same read as the previous one of their stream (limit \
                 {:.1}%): it read late, so those tokens are dated late",
                a.addr,
                f * 100.0,
                limits.coalesced_fraction * 100.0
            ));
        }
        let cpu = cpu_percent(a);
        let cores = a.hello.cores.max(1);
        let cpu_limit = limits.cpu_fraction * 100.0 * f64::from(cores);
        if cpu > cpu_limit {
            reasons.push(format!("agent {} used {cpu:.0}% CPU of {cores} core(s) (limit {cpu_limit:.0}%)", a.addr));
        }
        let (busy, pressure) = host(a);
        if busy > limits.host_busy_pct {
            reasons.push(format!(
                "agent {}'s host CPUs were {busy:.0}% busy (limit {:.0}%): other processes compete with the client",
                a.addr, limits.host_busy_pct
            ));
        }
        if let Some(p) = pressure.filter(|p| *p > limits.cpu_pressure_pct) {
            reasons.push(format!(
                "agent {}'s host had tasks waiting for a CPU {p:.0}% of the time (CPU pressure limit {:.0}%)",
                a.addr, limits.cpu_pressure_pct
            ));
        }
        let ((_, lag_p99, _), _) = lag_us(a);
        if open_loop && lag_p99 > limits.lag_p99_us {
            reasons.push(format!(
                "agent {} send lag p99 {:.2} ms (limit {:.2} ms)",
                a.addr,
                lag_p99 as f64 / 1000.0,
                limits.lag_p99_us as f64 / 1000.0
            ));
        }
    }
    let achieved_rate = m.sends.rate();
    // Compared with the rate of the schedule actually drawn (a Poisson schedule of n
    // requests deviates from the nominal rate by about 1/sqrt(n) on its own).
    let scheduled_rate = open_loop.then(|| m.intended.rate());
    if let Some(r) = scheduled_rate
        && plan.max_concurrency.is_none()
        && m.sends.n >= 100
        && achieved_rate < r * (1.0 - limits.rate_shortfall)
    {
        reasons.push(format!(
            "achieved send rate {achieved_rate:.1}/s is more than {:.0}% below the scheduled {r:.1}/s",
            limits.rate_shortfall * 100.0
        ));
    }
    let socket_errors =
        ["connect", "connection_reset", "timeout", "tls"].iter().filter_map(|k| m.errors_by_kind.get(*k)).sum();
    Verdict {
        client_bound: !reasons.is_empty(),
        reasons,
        requested_rate: open_loop.then_some(plan.request_rate),
        scheduled_rate,
        achieved_rate,
        socket_errors,
        thresholds: Thresholds {
            cpu_fraction_of_cores: limits.cpu_fraction,
            send_lag_p99_us: limits.lag_p99_us,
            rate_shortfall: limits.rate_shortfall,
            host_busy_pct: limits.host_busy_pct,
            cpu_pressure_pct: limits.cpu_pressure_pct,
            coalesced_token_fraction: limits.coalesced_fraction,
        },
    }
}
