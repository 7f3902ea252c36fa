//! Tables drawn from typed results: a sweep's terminal table and `summary.csv`, and the
//! client-overhead table of `surge validate` in Markdown.

use super::result::{LevelKey, LevelSummary, RunResult, SweepSummary, ValidationRow};
use crate::analysis::repeat::{Summary, summarize};
use crate::analysis::timeseries::{AgentSlice, Slice};
use crate::plan::percentile_word;
use std::fmt::Write;

/// The per-level statistics of a sweep, in column order.
pub const SWEEP_STATS: [&str; 10] = [
    "request_throughput",
    "output_throughput",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "p50_e2el_ms",
    "p99_e2el_ms",
];

/// Statistics of a sweep with `--cost-per-hour`, after [`SWEEP_STATS`].
pub const COST_STATS: [&str; 2] = ["cost_per_million_output_tokens", "cost_per_million_total_tokens"];

/// Statistics of a sweep with GPU telemetry (`--gpu-metrics-url`, `--gpu nvml`), after
/// the others: the efficiency frontier's axis, and what it costs in energy.
pub const ENERGY_STATS: [&str; 3] = ["output_tokens_per_joule", "energy_per_output_token_j", "average_gpu_power_w"];

/// Statistics of a sweep with `--accuracy` (D71): each level's share of right answers.
pub const ACCURACY_STATS: [&str; 1] = ["accuracy"];

/// One sweep statistic of one run result.
pub fn sweep_stat(r: &RunResult, name: &str) -> Option<f64> {
    match name {
        "request_throughput" => Some(r.request_throughput),
        "output_throughput" => Some(r.output_throughput),
        "cost_per_million_output_tokens" => r.cost_per_million_output_tokens,
        "cost_per_million_total_tokens" => r.cost_per_million_total_tokens,
        "output_tokens_per_joule" => r.output_tokens_per_joule,
        "energy_per_output_token_j" => r.energy_per_output_token_j,
        "average_gpu_power_w" => r.average_gpu_power_w,
        "accuracy" => r.accuracy.as_ref().and_then(|a| a.accuracy),
        _ => {
            let (p, metric) = name.strip_suffix("_ms")?.split_once('_')?;
            let m = r.latency.get(metric)?;
            match p {
                "p50" => Some(m.median_ms),
                "p99" => m.at(99.0),
                _ => None,
            }
        }
    }
}

/// The level of a summary entry.
pub fn level_of(l: &LevelSummary) -> f64 {
    match l.level {
        LevelKey::Concurrency(v) | LevelKey::RequestRate(v) | LevelKey::MultiTurnConcurrency(v) => {
            v.unwrap_or(f64::NAN)
        }
    }
}

fn stat(l: &LevelSummary, name: &str) -> Summary {
    l.stats.get(name).copied().unwrap_or_else(|| summarize(&[]))
}

/// The table printed at the end of a sweep.
pub fn sweep_table(s: &SweepSummary) -> String {
    let cost = has_cost(s);
    let mut out = format!(
        "{:>10} {:>4} {:>22} {:>12} {:>10} {:>10} {:>10}{}\n",
        s.kind.key(),
        "runs",
        "req/s (95% CI)",
        "out tok/s",
        "p50 TTFT",
        "p99 TTFT",
        "p99 E2EL",
        if cost { format!(" {:>12}", "$/1M out") } else { String::new() }
    );
    for l in &s.levels {
        let rt = stat(l, "request_throughput");
        let _ = writeln!(
            out,
            "{:>10} {:>4} {:>22} {:>12.1} {:>10.2} {:>10.2} {:>10.2}{}{}",
            percentile_word(level_of(l)),
            l.runs,
            format!("{:.2} [{:.2}, {:.2}]", rt.mean, rt.ci95_low, rt.ci95_high),
            stat(l, "output_throughput").mean,
            stat(l, "p50_ttft_ms").mean,
            stat(l, "p99_ttft_ms").mean,
            stat(l, "p99_e2el_ms").mean,
            if cost { format!(" {:>12.4}", stat(l, "cost_per_million_output_tokens").mean) } else { String::new() },
            if l.knee { "  <- knee" } else { "" }
        );
    }
    out
}

/// Whether the sweep ran with `--cost-per-hour`.
fn has_cost(s: &SweepSummary) -> bool {
    s.levels.iter().any(|l| l.stats.contains_key(COST_STATS[0]))
}

/// The statistics of the sweep's columns.
fn columns(s: &SweepSummary) -> Vec<&'static str> {
    let mut c = SWEEP_STATS.to_vec();
    if has_cost(s) {
        c.extend(COST_STATS);
    }
    if s.levels.iter().any(|l| l.stats.contains_key(ENERGY_STATS[0])) {
        c.extend(ENERGY_STATS);
    }
    if s.levels.iter().any(|l| l.stats.contains_key(ACCURACY_STATS[0])) {
        c.extend(ACCURACY_STATS);
    }
    c
}

/// `summary.csv`: a row per level, mean/std/CI/CV per statistic, the knee flag.
pub fn sweep_csv(s: &SweepSummary) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec![s.kind.key().to_string(), "runs".to_string()];
    let cols = columns(s);
    for name in &cols {
        for part in ["mean", "std", "ci95_low", "ci95_high", "cv"] {
            header.push(format!("{name}_{part}"));
        }
    }
    header.push("knee".into());
    let _ = w.write_record(&header);
    for l in &s.levels {
        let mut rec = vec![percentile_word(level_of(l)), l.runs.to_string()];
        for name in &cols {
            let v = stat(l, name);
            rec.extend([v.mean, v.std, v.ci95_low, v.ci95_high, v.cv].map(|x| format!("{x}")));
        }
        rec.push(l.knee.to_string());
        let _ = w.write_record(&rec);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// `<result>.timeseries.csv`: one row per slice; errors as `kind:n` joined by `;`; the
/// worst agent's value of each client-bound signal, and the signals over their limits in
/// the slice, joined by `;`.
pub fn timeseries_csv(slices: &[Slice]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record([
        "t",
        "started",
        "completed",
        "failed",
        "in_flight",
        "output_tokens",
        "request_throughput",
        "output_throughput",
        "p50_ttft_ms",
        "p99_ttft_ms",
        "p50_itl_ms",
        "p99_itl_ms",
        "p99_e2el_ms",
        "errors",
        "agent_cpu_pct_max",
        "agent_send_lag_p99_ms_max",
        "host_busy_pct_max",
        "cpu_pressure_pct_max",
        "coalesced_token_fraction_max",
        "client_bound_signals",
    ]);
    for s in slices {
        let errors: Vec<String> = s.errors_by_kind.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        // The worst agent; empty when no agent measured it in this slice.
        let max = |f: fn(&AgentSlice) -> Option<f64>| {
            s.agents.iter().filter_map(f).reduce(f64::max).map_or_else(String::new, |v| format!("{v}"))
        };
        let mut fired: Vec<&str> = s.agents.iter().flat_map(|a| a.fired.iter().map(String::as_str)).collect();
        fired.sort_unstable();
        fired.dedup();
        let _ = w.write_record([
            format!("{}", s.t),
            s.started.to_string(),
            s.completed.to_string(),
            s.failed.to_string(),
            s.in_flight.to_string(),
            s.output_tokens.to_string(),
            format!("{}", s.request_throughput),
            format!("{}", s.output_throughput),
            format!("{}", s.p50_ttft_ms),
            format!("{}", s.p99_ttft_ms),
            format!("{}", s.p50_itl_ms),
            format!("{}", s.p99_itl_ms),
            format!("{}", s.p99_e2el_ms),
            errors.join(";"),
            max(|a| a.cpu_pct),
            max(|a| a.send_lag_p99_ms),
            max(|a| a.host_busy_pct),
            max(|a| a.cpu_pressure_pct),
            max(|a| a.coalesced_token_fraction),
            fired.join(";"),
        ]);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The client-overhead table users publish, then each agent's CPU and send lag.
pub fn validation_markdown(rows: &[ValidationRow]) -> String {
    let mut s =
        String::from("| Concurrency | Requests/sec | Tokens/sec | p50 (ms) | p95 (ms) | p99 (ms) | Success Rate |\n");
    s.push_str("|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1}% |",
            r.concurrency,
            r.requests_per_sec,
            r.tokens_per_sec,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.success_rate * 100.0
        );
    }
    // The client-bound signals per level and agent (D14); "-" = not measured.
    s.push_str(
        "\n| Concurrency | Agent | CPU (%) | Send lag p99 (us) | Host busy (%) | CPU pressure (%) | Coalesced reads (%) \
         | Implied read lateness max (ms) | Client-bound |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let or_dash = |v: Option<f64>, digits: usize| v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"));
    for r in rows {
        for a in &r.agents {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} | {:.0} | {} | {} | {} | {} |",
                r.concurrency,
                a.address,
                a.cpu_percent,
                a.scheduling_lag_us.p99,
                a.host_busy_pct,
                or_dash(a.cpu_pressure_pct, 0),
                or_dash(a.coalesced_token_fraction.map(|f| f * 100.0), 2),
                or_dash(a.implied_read_lateness_ms.map(|l| l.max), 1),
                if r.client_bound { "yes" } else { "no" },
            );
        }
    }
    for r in rows.iter().filter(|r| r.client_bound) {
        let _ = writeln!(s, "\nLevel {}: client-bound: {}", r.concurrency, r.client_bound_reasons.join("; "));
    }
    s
}

/// `surge compare`'s table: per candidate, level and metric, the base and candidate
/// means, the relative change, and Welch's p-value with a mark when significant at 95 %.
pub fn compare_table(base: &str, lines: &[crate::analysis::compare::Line]) -> String {
    let mut out = format!("base: {base}\n");
    let mut candidate = "";
    for l in lines {
        if l.candidate != candidate {
            candidate = &l.candidate;
            let _ = writeln!(
                out,
                "\ncandidate: {candidate}\n{:<16} {:<22} {:>14} {:>14} {:>9} {:>8}",
                "level", "metric", "base", "candidate", "change", "p"
            );
        }
        let change = l.c.change_pct.map_or_else(|| "-".to_string(), |p| format!("{p:+.1}%"));
        let p = match l.c.p_value {
            Some(p) if p < 0.05 => format!("{p:.3} *"),
            Some(p) => format!("{p:.3}"),
            None => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<16} {:<22} {:>14.3} {:>14.3} {:>9} {:>8}",
            l.level, l.metric, l.c.base_mean, l.c.candidate_mean, change, p
        );
    }
    out.push_str("\n* significant at 95 % (Welch's t-test, with 2+ runs on each side)\n");
    out
}
