//! The terminal summary, in the layout of `vllm bench serve` (users paste and parse it),
//! followed by the lines surge adds: client health, errors by kind, agents, and the
//! run's status when it is not complete.

use super::result::RunResult;
use crate::fleet::outcome::RunStatus;
use crate::plan::{RunPlan, percentile_word};
use std::fmt::Write;

/// What the summary shows: vLLM's `--percentile-metrics` and `--metric-percentiles`.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryView {
    pub metrics: Vec<&'static str>,
    pub percentiles: Vec<f64>,
    /// `--max-failure-rate`, for the line that explains a non-zero exit code.
    pub max_failure_rate: f64,
    /// `--show-http-phases`.
    pub http_phases: bool,
    /// `--fail-on-anomaly`.
    pub fail_on_anomaly: bool,
}

impl SummaryView {
    pub fn of(plan: &RunPlan) -> Self {
        Self {
            metrics: plan.percentile_metrics.clone(),
            percentiles: plan.metric_percentiles.clone(),
            max_failure_rate: plan.max_failure_rate,
            http_phases: plan.show_http_phases,
            fail_on_anomaly: plan.fail_on_anomaly,
        }
    }
}

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<40} {value:<10}");
}

fn fline(out: &mut String, label: &str, value: f64) {
    let _ = writeln!(out, "{label:<40} {value:<10.2}");
}

/// What a user waits for (D49): the answer after the reasoning, and tool calls.
fn reasoning_section(out: &mut String, rs: &super::result::ReasoningResult, percentiles: &[f64]) {
    header(out, "Reasoning and answer", '-');
    line(out, "Requests that reasoned:", rs.requests_with_reasoning);
    line(out, "Reasoning tokens (client):", rs.reasoning_tokens);
    if let Some(n) = rs.server_reasoning_tokens {
        line(out, "Reasoning tokens (server):", n);
    }
    line(out, "Answer tokens:", rs.answer_tokens);
    for (key, short) in
        [("ttfo", "TTFO"), ("reasoning", "reasoning"), ("answer_tpot", "answer TPOT"), ("tool_call", "first tool call")]
    {
        let Some(d) = rs.latency.get(key) else { continue };
        fline(out, &format!("Mean {short} (ms):"), d.mean_ms);
        fline(out, &format!("Median {short} (ms):"), d.median_ms);
        for &p in percentiles {
            fline(out, &format!("P{} {short} (ms):", percentile_word(p)), d.at(p).unwrap_or(f64::NAN));
        }
    }
    if rs.requests_with_tool_calls > 0 {
        line(out, "Requests with a tool call:", rs.requests_with_tool_calls);
        line(out, "Tool calls:", rs.tool_calls);
        line(out, "Tool-call tokens:", rs.tool_call_tokens);
    }
}

/// vllm-bench's steady-state block (D45).
fn steady_section(out: &mut String, s: &crate::analysis::steady::SteadyState) {
    let w = &s.window;
    if let Some(warning) = &w.warning {
        let _ = writeln!(out, "Warning: {warning}");
    }
    header(out, "Steady-State Metrics", '-');
    match (w.threshold, w.target_concurrency, w.threshold_abs, w.target_rate) {
        (Some(t), Some(c), Some(abs), _) => {
            line(out, "Concurrency threshold:", format!(">= {t:.2} * {c} = {abs}"));
        }
        (_, _, _, Some(rate)) => line(out, "Completion rate within 5 % of:", format!("{rate} req/s")),
        _ => {}
    }
    line(out, "Window:", format!("{:.1}s -> {:.1}s  ({:.1}s)", w.start_s, w.end_s, w.duration_s));
    line(out, "Observed peak concurrency:", w.observed_peak);
    let pct = 100.0 * w.requests_started_in_window as f64 / w.requests_total.max(1) as f64;
    line(
        out,
        "Requests started in window:",
        format!("{} / {} ({pct:.1}%)", w.requests_started_in_window, w.requests_total),
    );
    line(out, "Requests completed in window:", w.requests_completed_in_window);
    fline(out, "Request throughput (req/s):", s.request_throughput);
    fline(out, "Output token throughput (tok/s):", s.output_throughput);
    fline(out, "Input token throughput (tok/s):", s.input_throughput);
    fline(out, "Total token throughput (tok/s):", s.total_token_throughput);
    if s.mean_ttft_ms > 0.0 {
        fline(out, "Mean TTFT (ms):", s.mean_ttft_ms);
        fline(out, "Median TTFT (ms):", s.median_ttft_ms);
        for (p, v) in &s.percentiles_ttft_ms {
            fline(out, &format!("P{} TTFT (ms):", crate::plan::percentile_word(*p)), *v);
        }
    }
    if s.mean_tpot_ms > 0.0 {
        fline(out, "Mean TPOT (ms):", s.mean_tpot_ms);
        fline(out, "Median TPOT (ms):", s.median_tpot_ms);
        fline(out, "P90 TPOT (ms):", s.p90_tpot_ms);
        fline(out, "P99 TPOT (ms):", s.p99_tpot_ms);
    }
}

fn header(out: &mut String, title: &str, fill: char) {
    let _ = writeln!(out, "{}", center(title, 50, fill));
}

fn center(s: &str, width: usize, fill: char) -> String {
    let len = s.chars().count();
    if len >= width {
        return s.to_string();
    }
    let left = (width - len) / 2;
    let right = width - len - left;
    format!("{}{}{}", fill.to_string().repeat(left), s, fill.to_string().repeat(right))
}

/// Client-bound reasons the summary prints before saying how many more there are.
const SHOWN_REASONS: usize = 4;

const SECTIONS: [(&str, &str, &str); 6] = [
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
    ("client_queue_time", "Client Queue Time", "Client-side Queueing"),
    ("e2el_including_client_queue", "E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
];

/// Renders the summary block of one run.
pub fn summary(r: &RunResult, view: &SummaryView, status: &RunStatus) -> String {
    let mut out = String::new();
    header(&mut out, " Serving Benchmark Result ", '=');
    line(&mut out, "Successful requests:", r.completed);
    line(&mut out, "Failed requests:", r.failed);
    // As vLLM prints them: only when set.
    if let Some(c) = r.max_concurrency {
        line(&mut out, "Maximum request concurrency:", c);
    }
    if r.request_rate.0.is_finite() {
        fline(&mut out, "Request rate configured (RPS):", r.request_rate.0);
    }
    fline(&mut out, "Benchmark duration (s):", r.duration);
    line(&mut out, "Total input tokens:", r.total_input_tokens);
    let pooling = r.input_sequence_throughput.is_some();
    if !pooling {
        line(&mut out, "Total generated tokens:", r.total_output_tokens);
    }
    fline(&mut out, "Request throughput (req/s):", r.request_throughput);
    if let Some(t) = r.input_sequence_throughput {
        fline(&mut out, "Input throughput (inputs/s):", t);
    }
    if let Some(g) = r.request_goodput {
        fline(&mut out, "Request goodput (req/s):", g);
    }
    if !pooling {
        fline(&mut out, "Output token throughput (tok/s):", r.output_throughput);
        fline(&mut out, "Peak output token throughput (tok/s):", r.max_output_tokens_per_s);
        fline(&mut out, "Peak concurrent requests:", r.max_concurrent_requests);
    }
    fline(&mut out, "Total token throughput (tok/s):", r.total_token_throughput);
    if let Some(p) = &r.probes {
        header(&mut out, "Probe Requests", '-');
        line(&mut out, "Probe requests completed:", p.probe_completed);
        line(&mut out, "Probe requests failed:", p.probe_failed);
        fline(&mut out, "Median probe E2EL (ms):", p.probe_median_e2el_ms);
        fline(&mut out, "P99 probe E2EL (ms):", p.probe_p99_e2el_ms);
        fline(&mut out, "Max probe E2EL (ms):", p.probe_max_e2el_ms);
    }
    for (key, short, title) in SECTIONS {
        if !view.metrics.contains(&key) {
            continue;
        }
        let Some(d) = r.latency.get(key) else { continue };
        header(&mut out, title, '-');
        fline(&mut out, &format!("Mean {short} (ms):"), d.mean_ms);
        fline(&mut out, &format!("Median {short} (ms):"), d.median_ms);
        for &p in &view.percentiles {
            fline(&mut out, &format!("P{} {short} (ms):", percentile_word(p)), d.at(p).unwrap_or(f64::NAN));
        }
    }
    if let Some(mt) = &r.multi_turn {
        multi_turn_section(&mut out, mt);
    }
    if let Some(al) = &r.agent_loop {
        agent_loop_section(&mut out, al);
    }
    if let Some(list) = &r.endpoints {
        endpoints_section(&mut out, list, r.endpoint_policy.map_or("round-robin", |p| p.as_str()));
    }
    if let Some(rep) = &r.replicas {
        replicas_section(&mut out, rep);
    }
    if let Some(g) = &r.agent_graphs {
        header(&mut out, "Sub-agents", '-');
        line(&mut out, "Graphs / sub-agent sessions:", format!("{}/{}", g.graphs, g.sub_agent_sessions));
        line(&mut out, "Widest fan-out:", g.max_fan_out);
        for (key, what) in [("graph_duration", "graph duration"), ("critical_path", "critical path")] {
            if let Some(d) = g.latency.get(key) {
                fline(&mut out, &format!("Median {what} (ms):"), d.median_ms);
            }
        }
    }
    if let Some(s) = &r.steady_state {
        steady_section(&mut out, s);
    }
    if let Some(rs) = &r.reasoning {
        reasoning_section(&mut out, rs, &view.percentiles);
    }
    surge_section(&mut out, r, view, status);
    out
}

/// surge's own lines after vLLM's: how the run ended, what it cost, the client's verdict,
/// the server's and the GPUs' views; the last line says why the exit code is not 0.
fn surge_section(out: &mut String, r: &RunResult, view: &SummaryView, status: &RunStatus) {
    header(out, "surge", '-');
    if r.ended_by != crate::output::result::EndedBy::Unknown {
        line(out, "Ended by:", r.ended_by.as_str());
    }
    if r.cancelled > 0 {
        line(out, "Cancelled requests (not failed):", r.cancelled);
    }
    if let Some(p) = r.peak_in_flight {
        fline(out, "Peak in flight (one instant):", p);
    }
    if let Some(q) = &r.e2el_including_client_queue {
        let p99 = q.percentiles.iter().find(|(p, _)| *p == 99.0).map_or(f64::NAN, |(_, v)| *v);
        fline(out, "P99 E2EL incl. client queue (ms):", p99);
    } else {
        line(out, "Latency measured from:", "actual send (closed loop)");
    }
    if let Some(c) = r.cost_per_million_output_tokens {
        fline(out, "Cost per 1M output tokens (USD):", c);
    }
    if let Some(c) = r.cost_per_million_total_tokens {
        fline(out, "Cost per 1M total tokens (USD):", c);
    }
    let client = &r.client;
    line(out, "Agents:", client.agents.len());
    if !client.agents_missing.is_empty() {
        line(out, "Agents missing (--min-agents):", client.agents_missing.join(", "));
    }
    if let Some(w) = client.agents_waited_s {
        fline(out, "Waited for late agents (s):", w);
    }
    let cpu = client.agents.iter().map(|a| a.cpu_percent).fold(0.0, f64::max);
    fline(out, "Client CPU, busiest agent (%):", cpu);
    // The other client-bound signals, the worst agent's (D14).
    let worst = |f: fn(&super::result::AgentEntry) -> Option<f64>| client.agents.iter().filter_map(f).reduce(f64::max);
    if let Some(v) = worst(|a| Some(a.host_busy_pct)) {
        fline(out, "Client host busy, busiest (%):", v);
    }
    if let Some(v) = worst(|a| a.cpu_pressure_pct) {
        fline(out, "Client host CPU pressure (%):", v);
    }
    if let Some(v) = worst(|a| a.coalesced_token_fraction) {
        fline(out, "Client coalesced reads (%):", v * 100.0);
    }
    if let Some(v) = worst(|a| a.implied_read_lateness_ms.map(|l| l.max)) {
        fline(out, "Client implied read lateness max (ms):", v);
    }
    if client.open_loop {
        let lag = client.agents.iter().map(|a| a.scheduling_lag_us.p99).max().unwrap_or(0);
        fline(out, "Client send lag p99 (ms):", lag as f64 / 1000.0);
    }
    if let Some(a) = &r.accuracy {
        let ci = match (a.accuracy, a.ci_low, a.ci_high) {
            (Some(p), Some(lo), Some(hi)) => {
                format!("{p:.3} [{lo:.3}, {hi:.3}] ({} right of {})", a.correct, a.samples)
            }
            _ => "no question answered".to_string(),
        };
        line(out, &format!("Accuracy ({:.0}% CI):", a.confidence * 100.0), ci);
    }
    anomalies_lines(out, &r.anomalies);
    for (kind, n) in &r.errors_by_kind {
        line(out, &format!("Errors ({kind}):"), n);
        if let Some(e) = r.error_examples.get(kind).and_then(|v| v.first()).filter(|e| !e.message.is_empty()) {
            let _ = writeln!(out, "  e.g. {} ({} requests)", e.message, e.count);
        }
    }
    if client.verdict.client_bound {
        // Dozens of agents give dozens of reasons: the first few, then how many more
        // (all of them are in the result's client.verdict.reasons).
        let reasons = &client.verdict.reasons;
        let shown = reasons.iter().take(SHOWN_REASONS).cloned().collect::<Vec<_>>().join("; ");
        let more = reasons.len().saturating_sub(SHOWN_REASONS);
        let tail =
            if more > 0 { format!("; and {more} more (client.verdict.reasons in the result)") } else { String::new() };
        let _ = writeln!(out, "WARNING: client-bound: {shown}{tail}");
    }
    if let Some(s) = &r.server_metrics {
        server_section(out, s);
    }
    if view.http_phases {
        phases_block(out, r);
    }
    if let Some(g) = &r.gpu_metrics {
        gpu_block(out, r, g);
    }
    match status {
        RunStatus::Complete => {}
        RunStatus::Invalid { lost } => {
            let _ = writeln!(out, "RUN INVALID: agent(s) lost: {} (partial data saved)", lost.join(", "));
        }
        RunStatus::Partial { lost } => {
            let _ = writeln!(out, "RUN PARTIAL: agent(s) lost: {} (their share is missing)", lost.join(", "));
        }
        RunStatus::Interrupted | RunStatus::Terminated => {
            let _ = writeln!(out, "RUN INTERRUPTED: results cover what finished before the stop");
        }
    }
    let _ = writeln!(out, "{}", "=".repeat(50));
    // The last line says why the exit code is not 0 (D8).
    if let (_, Some(why)) = crate::exit::of_run(status, r.completed, &r.errors_by_kind, view.max_failure_rate) {
        let _ = writeln!(out, "{why}");
    } else if let (_, Some(why)) =
        crate::exit::of_anomalies(view.fail_on_anomaly, r.anomalies.requests, &r.anomalies.by_kind)
    {
        let _ = writeln!(out, "{why}");
    }
}

/// Anomalies (D70): one line when there is none, else one per kind seen with an example.
fn anomalies_lines(out: &mut String, a: &super::result::AnomaliesResult) {
    if a.requests == 0 {
        line(out, "Anomalies:", "none");
        return;
    }
    line(out, "Anomalies (requests):", a.requests);
    for (kind, n) in a.by_kind.iter().filter(|(_, n)| **n > 0) {
        line(out, &format!("Anomalies ({kind}):"), n);
        if let Some(e) = a.examples.get(kind).and_then(|v| v.first()) {
            let _ = writeln!(out, "  e.g. seq {}: {}", e.seq, e.detail);
        }
    }
}

/// Conversations: how they ended, the prefix cache, one line per turn (1-based on screen,
/// as vllm-bench prints turns; 0-based in the result, D32).
fn multi_turn_section(out: &mut String, mt: &super::multi_turn::MultiTurnResult) {
    header(out, "Conversations", '-');
    line(
        out,
        "Conversations completed/started:",
        format!("{}/{}", mt.conversations_completed, mt.conversations_started),
    );
    line(out, "Conversations failed:", mt.conversations_failed);
    if mt.conversations_unfinished > 0 {
        line(out, "Conversations unfinished (cut):", mt.conversations_unfinished);
    }
    line(out, "Cancelled turns:", mt.cancelled_turns);
    fline(out, "Avg turns completed:", mt.avg_turns_completed);
    fline(out, "Avg conversation duration (ms):", mt.avg_conversation_duration_ms);
    if let Some(h) = mt.history_token_fraction {
        fline(out, "History share of input tokens (%):", h * 100.0);
    }
    match mt.prompt_cache_hit_rate {
        Some(h) => fline(out, "Prefix cache hit rate (%):", h * 100.0),
        None => line(out, "Prefix cache hit rate (%):", "not reported"),
    }
    let _ = writeln!(
        out,
        "{:<6} {:>9} {:>7} {:>10} {:>11} {:>11} {:>9}",
        "Turn", "requests", "failed", "mean in", "TTFT p50", "TTFT p99", "cache %"
    );
    for t in &mt.per_turn_metrics {
        let ttft = t.latency.get("ttft");
        let p50 = ttft.map_or(f64::NAN, |d| d.median_ms);
        let p99 = ttft.and_then(|d| d.at(99.0)).unwrap_or(f64::NAN);
        let cache = t.prompt_cache_hit_rate.map_or_else(|| "-".to_string(), |h| format!("{:.1}", h * 100.0));
        let _ = writeln!(
            out,
            "{:<6} {:>9} {:>7} {:>10.1} {:>11.2} {:>11.2} {:>9}",
            t.turn_index + 1,
            t.completed,
            t.failed,
            t.mean_input_tokens,
            p50,
            p99,
            cache
        );
    }
    if let Some(w) = &mt.prompt_cache_warning {
        let _ = writeln!(out, "WARNING: {w}");
    }
}

/// Agent loops (D65): what the replies did, per session, one line per step (0: the
/// user's message of each turn).
fn agent_loop_section(out: &mut String, a: &super::multi_turn::AgentLoopResult) {
    header(out, "Agent loops", '-');
    line(out, "Replies calling tools / answering:", format!("{}/{}", a.tool_call_replies, a.answers));
    line(out, "Tool steps sent:", a.tool_steps);
    fline(out, "Mean tool wait (ms):", a.mean_tool_wait_ms);
    fline(out, "Mean steps per session:", a.mean_steps_per_session);
    fline(out, "Mean tool time per session (ms):", a.mean_tool_time_per_session_ms);
    fline(out, "Mean model time per session (ms):", a.mean_model_time_per_session_ms);
    let _ = writeln!(
        out,
        "{:<6} {:>9} {:>7} {:>10} {:>11} {:>9}",
        "Step", "requests", "failed", "mean in", "TTFT p50", "cache %"
    );
    for t in &a.per_step_metrics {
        let p50 = t.latency.get("ttft").map_or(f64::NAN, |d| d.median_ms);
        let cache = t.prompt_cache_hit_rate.map_or_else(|| "-".to_string(), |h| format!("{:.1}", h * 100.0));
        let _ = writeln!(
            out,
            "{:<6} {:>9} {:>7} {:>10.1} {:>11.2} {:>9}",
            t.turn_index, t.completed, t.failed, t.mean_input_tokens, p50, cache
        );
    }
}

/// Several endpoints (D69): one line each, an outlier marked with the rule's words.
fn endpoints_section(out: &mut String, list: &[super::endpoints::EndpointResult], policy: &str) {
    header(out, &format!("Endpoints ({policy})"), '-');
    let _ = writeln!(
        out,
        "{:<22} {:>8} {:>6} {:>9} {:>9} {:>9} {:>8}",
        "Endpoint", "requests", "failed", "req/s", "TTFT p50", "TTFT p99", "cache %"
    );
    for e in list {
        let ttft = e.latency.get("ttft");
        let (p50, p99) = (ttft.map_or(f64::NAN, |d| d.median_ms), ttft.and_then(|d| d.at(99.0)).unwrap_or(f64::NAN));
        let cache = e.prompt_cache_hit_rate.map_or_else(|| "-".to_string(), |h| format!("{:.1}", h * 100.0));
        let mark = if e.outlier { "  <- outlier: p99 TTFT above the others'" } else { "" };
        let _ = writeln!(
            out,
            "{:<22} {:>8} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>8}{mark}",
            e.name, e.requests, e.failed, e.request_throughput, p50, p99, cache
        );
    }
}

/// The replicas behind a router (D69): balance, and for conversations the affinity and
/// what moving cost the cache, in one line each.
fn replicas_section(out: &mut String, r: &super::endpoints::ReplicasResult) {
    header(out, &format!("Replicas ({})", r.header), '-');
    let shares: Vec<String> = r.replicas.iter().map(|x| format!("{} {:.1}%", x.name, x.share * 100.0)).collect();
    line(out, "Replicas seen:", format!("{} ({})", r.replicas_seen, shares.join(", ")));
    fline(out, "Balance (fewest/most):", r.balance);
    if r.unnamed_responses > 0 {
        line(out, "Responses without the header:", r.unnamed_responses);
    }
    if let Some(a) = r.session_affinity {
        line(
            out,
            "Session affinity:",
            format!("{:.1}% of {} sessions on one replica", a * 100.0, r.sessions.unwrap_or(0)),
        );
    }
    let pct = |h: Option<f64>| h.map_or_else(|| "-".to_string(), |h| format!("{:.1}%", h * 100.0));
    if let (Some(s), Some(m)) = (r.stayed_requests, r.moved_requests) {
        line(
            out,
            "Cache hits stayed / moved:",
            format!("{} of {s} / {} of {m}", pct(r.stayed_hit_rate), pct(r.moved_hit_rate)),
        );
    }
}

/// The server's own view (D11): what it counted against what the client did.
fn server_section(out: &mut String, s: &crate::analysis::server::ServerMetrics) {
    header(out, "Server", '-');
    line(out, "Scrapes (failed):", format!("{} ({})", s.scrapes, s.failed_scrapes));
    let c = &s.checks;
    if let (Some(v), Some(name)) = (c.server_output_tokens, &c.generation_tokens_metric) {
        line(out, "Server output tokens:", format!("{v:.0} ({name})"));
    }
    if let Some(p) = c.output_tokens_mismatch_pct {
        fline(out, "Output tokens vs client (%):", p);
    }
    if let (Some(p50), Some(mean)) = (c.server_ttft_p50_ms, c.server_ttft_mean_ms) {
        fline(out, "Server TTFT p50 (ms):", p50);
        fline(out, "Server TTFT mean (ms):", mean);
    }
    for (name, g) in
        s.gauges.iter().filter(|(n, _)| n.ends_with("num_requests_running") || n.ends_with("num_requests_waiting"))
    {
        fline(out, &format!("Max {}:", name.rsplit(':').next().unwrap_or(name)), g.max);
    }
    for f in &c.flagged {
        let _ = writeln!(out, "WARNING: server: {f}");
    }
}

/// The GPU and energy block (`--gpu-metrics-url`): the totals, then one line per GPU.
fn gpu_block(out: &mut String, r: &RunResult, g: &crate::analysis::gpu::GpuMetrics) {
    header(out, "GPU and energy", '-');
    line(out, "GPUs:", g.gpus.len());
    fline(out, "GPU energy over the run (J):", g.total_energy_j);
    fline(out, "Average GPU power (W):", g.average_power_w);
    fline(out, "Peak GPU power (W):", g.peak_power_w);
    if let Some(j) = r.energy_per_output_token_j {
        fline(out, "Energy per output token (J):", j);
    }
    if let Some(j) = r.energy_per_request_j {
        fline(out, "Energy per request (J):", j);
    }
    if let Some(t) = r.output_tokens_per_joule {
        fline(out, "Output tokens per joule:", t);
    }
    if let Some(c) = r.energy_cost_per_million_output_tokens {
        fline(out, "Energy cost per 1M output tokens (USD):", c);
    }
    for gpu in &g.gpus {
        let mean =
            |s: &Option<crate::analysis::server::GaugeStats>| s.map_or("-".to_string(), |s| format!("{:.0}", s.mean));
        let mut what = format!(
            "{:.0} J ({}), {} W mean, {} % busy, {} MHz, {} C",
            gpu.energy_j,
            gpu.energy_from,
            mean(&gpu.power_w),
            mean(&gpu.utilization_pct),
            mean(&gpu.sm_clock_mhz),
            gpu.temperature_c.map_or("-".to_string(), |t| format!("{:.0}", t.max)),
        );
        if gpu.xid_error_count > 0 {
            what.push_str(&format!(", {} XID errors", gpu.xid_error_count));
        }
        if gpu.counter_resets > 0 {
            what.push_str(&format!(", counter reset {}x", gpu.counter_resets));
        }
        line(out, &format!("  {} gpu {}:", gpu.host, gpu.gpu), what);
    }
    if g.failed_scrapes > 0 {
        line(
            out,
            "GPU scrapes failed:",
            format!("{} of {} ({})", g.failed_scrapes, g.scrapes, g.last_error.as_deref().unwrap_or("")),
        );
    }
}

/// `--show-http-phases`: k6's phases of the successful requests (mean, median, p99 in ms),
/// the head-to-first-token gap, and how many came on a new connection.
fn phases_block(out: &mut String, r: &RunResult) {
    header(out, "HTTP phases", '-');
    if r.latency.get("http_req_duration").is_none() {
        let _ = writeln!(out, "(not timed: no successful request, or agents that do not time phases)");
        return;
    }
    let _ = writeln!(out, "{:<28} {:>10} {:>10} {:>10}", "phase (ms)", "mean", "median", "p99");
    let names = crate::analysis::phases::PHASES.iter().map(|p| format!("http_req_{p}"));
    for name in names.chain(std::iter::once("http_head_to_first_token".to_string())) {
        if let Some(m) = r.latency.get(&name) {
            let p99 = m.at(99.0).map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
            let label = name.trim_start_matches("http_req_").trim_start_matches("http_");
            let _ = writeln!(out, "{label:<28} {:>10.2} {:>10.2} {p99:>10}", m.mean_ms, m.median_ms);
        }
    }
    if let (Some(new), Some(reused)) = (r.http_req_connections_new, r.http_req_connections_reused) {
        line(out, "Requests on new / reused connections:", format!("{new} / {reused}"));
    }
}

#[cfg(test)]
mod tests {
    use super::center;

    #[test]
    fn centers_like_python_format() {
        // '{s:{c}^{n}}'.format(s=' Serving Benchmark Result ', n=50, c='=')
        assert_eq!(center(" Serving Benchmark Result ", 50, '='), "============ Serving Benchmark Result ============");
        // Python puts the extra fill on the right for odd padding.
        assert_eq!(center("Time to First Token", 50, '-'), "---------------Time to First Token----------------");
    }
}
