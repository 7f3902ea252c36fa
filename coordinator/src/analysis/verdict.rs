//! Was the client the bottleneck? Each agent's CPU against its cores, the open-loop send
//! lag, and the achieved send rate against the drawn schedule, with the reasons spelled
//! out when any limit is crossed.

use super::metrics::Metrics;
use super::timeseries::Slice;
use crate::fleet::outcome::AgentReport;
use crate::plan::{RunPlan, VerdictLimits};
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

/// One agent's client-bound signals over a level or a slice; `None` = not measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals {
    /// Engine CPU, 100 = one core, and the cores it may use.
    pub cpu_pct: Option<f64>,
    pub cores: u32,
    pub send_lag_p99_us: Option<u64>,
    pub host_busy_pct: Option<f64>,
    pub cpu_pressure_pct: Option<f64>,
    pub coalesced_token_fraction: Option<f64>,
}

/// A signal over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    CoalescedReads,
    EngineCpu,
    HostBusy,
    CpuPressure,
    /// Open loop only.
    SendLag,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Self::CoalescedReads => "coalesced_reads",
            Self::EngineCpu => "engine_cpu",
            Self::HostBusy => "host_busy",
            Self::CpuPressure => "cpu_pressure",
            Self::SendLag => "send_lag",
        }
    }
}

fn cpu_limit_pct(limits: &VerdictLimits, cores: u32) -> f64 {
    limits.cpu_fraction * 100.0 * f64::from(cores.max(1))
}

/// The signals of `s` over their limits, in the order the verdict gives its reasons.
pub fn fired(s: &Signals, limits: &VerdictLimits, open_loop: bool) -> Vec<Signal> {
    let over = |v: Option<f64>, limit: f64| v.is_some_and(|v| v > limit);
    let checks = [
        (Signal::CoalescedReads, over(s.coalesced_token_fraction, limits.coalesced_fraction)),
        (Signal::EngineCpu, over(s.cpu_pct, cpu_limit_pct(limits, s.cores))),
        (Signal::HostBusy, over(s.host_busy_pct, limits.host_busy_pct)),
        (Signal::CpuPressure, over(s.cpu_pressure_pct, limits.cpu_pressure_pct)),
        (Signal::SendLag, open_loop && s.send_lag_p99_us.is_some_and(|l| l > limits.lag_p99_us)),
    ];
    checks.into_iter().filter(|(_, f)| *f).map(|(sig, _)| sig).collect()
}

/// Agent `i`'s signals over the whole run.
fn run_signals(m: &Metrics, i: usize, a: &AgentReport) -> Signals {
    let (busy, pressure) = host(a);
    let ((_, lag_p99, _), _) = lag_us(a);
    Signals {
        cpu_pct: Some(cpu_percent(a)),
        cores: a.hello.cores.max(1),
        send_lag_p99_us: Some(lag_p99),
        host_busy_pct: Some(busy),
        cpu_pressure_pct: pressure,
        coalesced_token_fraction: m.coalesced_fraction(i),
    }
}

fn reason(sig: Signal, addr: &str, s: &Signals, limits: &VerdictLimits) -> String {
    let v = |x: Option<f64>| x.unwrap_or(0.0);
    match sig {
        Signal::CoalescedReads => format!(
            "agent {addr} read {:.1}% of token events in the same read as the previous one of their stream (limit \
             {:.1}%): it read late, so those tokens are dated late",
            v(s.coalesced_token_fraction) * 100.0,
            limits.coalesced_fraction * 100.0
        ),
        Signal::EngineCpu => format!(
            "agent {addr} used {:.0}% CPU of {} core(s) (limit {:.0}%)",
            v(s.cpu_pct),
            s.cores,
            cpu_limit_pct(limits, s.cores)
        ),
        Signal::HostBusy => format!(
            "agent {addr}'s host CPUs were {:.0}% busy (limit {:.0}%): other processes compete with the client",
            v(s.host_busy_pct),
            limits.host_busy_pct
        ),
        Signal::CpuPressure => format!(
            "agent {addr}'s host had tasks waiting for a CPU {:.0}% of the time (CPU pressure limit {:.0}%)",
            v(s.cpu_pressure_pct),
            limits.cpu_pressure_pct
        ),
        Signal::SendLag => format!(
            "agent {addr} send lag p99 {:.2} ms (limit {:.2} ms)",
            s.send_lag_p99_us.unwrap_or(0) as f64 / 1000.0,
            limits.lag_p99_us as f64 / 1000.0
        ),
    }
}

/// Names, in each agent's slice entries, the signals over their limits there (D14).
pub fn mark_slices(slices: &mut [Slice], plan: &RunPlan, agents: &[AgentReport]) {
    let open_loop = plan.request_rate.is_finite();
    for a in slices.iter_mut().flat_map(|s| s.agents.iter_mut()) {
        let s = Signals {
            cpu_pct: a.cpu_pct,
            cores: agents.get(a.agent).map_or(1, |r| r.hello.cores.max(1)),
            send_lag_p99_us: a.send_lag_p99_ms.map(|ms| (ms * 1000.0).round() as u64),
            host_busy_pct: a.host_busy_pct,
            cpu_pressure_pct: a.cpu_pressure_pct,
            coalesced_token_fraction: a.coalesced_token_fraction,
        };
        a.fired = fired(&s, &plan.verdict, open_loop).into_iter().map(|f| f.name().to_string()).collect();
    }
}

/// Judges one run.
pub fn judge(plan: &RunPlan, m: &Metrics, agents: &[AgentReport]) -> Verdict {
    let limits = plan.verdict;
    let open_loop = plan.request_rate.is_finite();
    let mut reasons = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        let s = run_signals(m, i, a);
        for sig in fired(&s, &limits, open_loop) {
            reasons.push(reason(sig, &a.addr, &s, &limits));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_fires_above_its_limit_only() {
        let limits = VerdictLimits::default();
        let calm = Signals {
            cpu_pct: Some(150.0),
            cores: 2,
            send_lag_p99_us: Some(limits.lag_p99_us),
            host_busy_pct: Some(limits.host_busy_pct),
            cpu_pressure_pct: Some(limits.cpu_pressure_pct),
            coalesced_token_fraction: Some(limits.coalesced_fraction),
        };
        assert_eq!(fired(&calm, &limits, true), vec![]);
        let busy = Signals {
            cpu_pct: Some(100.0 * limits.cpu_fraction * 2.0 + 1.0),
            send_lag_p99_us: Some(limits.lag_p99_us + 1),
            host_busy_pct: Some(limits.host_busy_pct + 0.5),
            cpu_pressure_pct: Some(limits.cpu_pressure_pct + 0.5),
            coalesced_token_fraction: Some(limits.coalesced_fraction * 1.5),
            ..calm
        };
        let all = [Signal::CoalescedReads, Signal::EngineCpu, Signal::HostBusy, Signal::CpuPressure, Signal::SendLag];
        assert_eq!(fired(&busy, &limits, true), all.to_vec());
        // The send lag speaks of open loops only; what was not measured never fires.
        assert_eq!(fired(&busy, &limits, false), all[..4].to_vec());
        assert_eq!(fired(&Signals { cores: 1, ..Signals::default() }, &limits, true), vec![]);
    }
}
