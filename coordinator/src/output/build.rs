//! From a finished run (plan, merged metrics, what the fleet delivered) to its typed
//! [`RunResult`]: the one place a result is assembled.

use super::result::{
    AgentEntry, AgentStop, ClientBlock, Counts, Detailed, Distribution, EndedBy, ErrorExample, ImpliedLateness, Labels,
    Lag, Latencies, Lateness, MetricStats, Probes, QueueLatency, RESULT_SCHEMA, Rate, RunMetadata, RunResult, RunState,
    ShareEntry, StreamExample, TokenCounts, TokenizerRef,
};
use super::sets::{LatencyMode, Ramp};
use crate::analysis::metrics::{Metrics, kind_name};
use crate::analysis::verdict::{self, Verdict};
use crate::analysis::{cost, gpu, phases};
use crate::fleet::outcome::Outcome;
use crate::plan::{METRICS, QUEUE_METRICS, RunPlan};

/// The instantaneous peak: exact while the run was exact; beyond D23's budget the time
/// series' per-slice bound, capped by the agents' own peaks (each agent counts its
/// requests in flight exactly; their sum bounds the fleet's at any instant).
fn peak_in_flight(o: &Outcome, m: &Metrics) -> f64 {
    if m.exact || o.agents.iter().any(|a| a.done.is_none()) {
        return m.peak_in_flight;
    }
    let agents: u64 = o.agents.iter().filter_map(|a| a.done.as_ref()).map(|d| u64::from(d.max_in_flight)).sum();
    m.peak_in_flight.min(agents as f64)
}

/// The percentiles a result carries: the plan's, plus 99 (the client-bound and sweep
/// statistics read it).
fn percentiles(plan: &RunPlan) -> Vec<f64> {
    let mut p = plan.metric_percentiles.clone();
    if !p.contains(&99.0) {
        p.push(99.0);
    }
    p
}

/// The `anomalies` block: every kind's count, and examples naming their agent.
fn anomalies(o: &Outcome, m: &Metrics) -> super::result::AnomaliesResult {
    use crate::analysis::anomalies::{KINDS, name};
    let a = &m.anomalies;
    let agent = |i: usize| o.agents.get(i).map_or_else(|| i.to_string(), |r| r.addr.clone());
    super::result::AnomaliesResult {
        requests: a.rows,
        by_kind: KINDS.iter().map(|&k| (name(k).to_string(), a.counts.get(name(k)).copied().unwrap_or(0))).collect(),
        examples: a
            .examples
            .iter()
            .map(|(kind, ex)| {
                let list = ex
                    .iter()
                    .map(|e| super::result::AnomalyExample {
                        seq: e.seq,
                        agent: agent(e.agent),
                        detail: e.detail.clone(),
                    })
                    .collect();
                (kind.to_string(), list)
            })
            .collect(),
    }
}
/// The latency statistics: the four metrics always (E2EL alone for a pooling run), and vLLM's client-queue metrics when
/// `--percentile-metrics` names them and the run is one where vLLM computes them.
fn latencies(plan: &RunPlan, m: &Metrics, ps: &[f64]) -> Latencies {
    // A pooling run has no tokens to time: E2EL only, as vLLM reports it.
    let mut l: Vec<MetricStats> = METRICS
        .iter()
        .filter(|k| !plan.pooling() || **k == "e2el")
        .map(|k| MetricStats::of(k, m.dist(k), ps))
        .collect();
    let wants = |k: &str| plan.percentile_metrics.contains(&k);
    if plan.max_concurrency.is_some() && wants(QUEUE_METRICS[0]) {
        l.push(MetricStats::of(QUEUE_METRICS[0], &m.client_queue, ps));
    }
    if let (Some(q), true) = (&m.e2el_incl_queue, plan.max_concurrency.is_some() && wants(QUEUE_METRICS[1])) {
        l.push(MetricStats::of(QUEUE_METRICS[1], q, ps));
    }
    // `--percentile-metrics ttfo` (D49): over the requests that reasoned; with none, the
    // first answer token is the first token, and TTFT is it.
    if wants("ttfo") {
        l.push(MetricStats::of("ttfo", m.sample_of("ttfo"), ps));
    }
    // k6's HTTP phases (D35), when the agents timed them: `http_req_<phase>`.
    let h = &m.http_phases;
    if !h.is_empty() {
        for (name, p) in phases::PHASES.iter().zip(&h.phases) {
            l.push(phase_stats(&format!("http_req_{name}"), p, ps));
        }
        l.push(phase_stats(&format!("http_{}", phases::HEAD_TO_FIRST_TOKEN), &h.head_to_first_token, ps));
    }
    Latencies(l)
}

fn phase_stats(name: &str, p: &phases::Phase, ps: &[f64]) -> MetricStats {
    MetricStats {
        name: name.to_string(),
        mean_ms: p.mean_ms(),
        median_ms: p.percentile_ms(50.0),
        std_ms: p.std_ms(),
        percentiles: ps.iter().map(|&q| (q, p.percentile_ms(q))).collect(),
    }
}

/// The `distributions` key: each latency metric that has values.
fn distributions(m: &Metrics) -> std::collections::BTreeMap<String, Distribution> {
    METRICS
        .iter()
        .map(|&name| (name, m.dist(name)))
        .filter(|(_, d)| !d.is_empty())
        .map(|(name, d)| {
            let (le_ms, counts) = d.buckets().into_iter().unzip();
            let dist = Distribution {
                count: d.len(),
                p50_ms: d.median_ms(),
                p90_ms: d.percentile_ms(90.0),
                p99_ms: d.percentile_ms(99.0),
                le_ms,
                counts,
            };
            (name.to_string(), dist)
        })
        .collect()
}

/// A request count, `None` when the run had no cap.
fn cap(n: u64) -> Option<u64> {
    (n != crate::plan::UNBOUNDED).then_some(n)
}

fn meta(plan: &RunPlan, key: &str) -> Option<String> {
    plan.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// The client block: each agent's share, counts, clock, CPU and lag, and the verdict.
pub fn client_block(plan: &RunPlan, o: &Outcome, m: &Metrics, verdict: Verdict) -> ClientBlock {
    let open_loop = plan.request_rate.is_finite();
    let agents = o
        .agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let done = a.done.clone().unwrap_or_default();
            let ((p50, p99, max), (wake_p99, wake_max)) = verdict::lag_us(a);
            AgentEntry {
                address: a.addr.clone(),
                hostname: a.hello.hostname.clone(),
                cores: a.hello.cores.max(1),
                protocol: a.hello.protocol_version,
                share: a.share.as_ref().map(|s| ShareEntry {
                    fraction: s.fraction,
                    slice_start: s.indices.first(),
                    index_cycle: s.indices.cycle(),
                    index_positions: s.indices.positions().to_vec(),
                    num_prompts: cap(s.num_prompts),
                    max_concurrency: s.max_concurrency,
                    request_rate: Rate(s.request_rate),
                }),
                completed: a.completed,
                failed: a.failed,
                rows_received: a.rows,
                agent_reported: a.done.as_ref().map(|d| Counts {
                    completed: d.completed,
                    failed: d.failed,
                    cancelled: d.cancelled,
                }),
                clock_offset_ms: a.offset.offset_ns as f64 / 1e6,
                clock_offset_bound_ms: a.offset.bound_ns() as f64 / 1e6,
                cpu_percent: verdict::cpu_percent(a),
                cpu_seconds: done.cpu_seconds,
                host_busy_pct: verdict::host(a).0,
                cpu_pressure_pct: verdict::host(a).1,
                coalesced_token_fraction: m.coalesced_fraction(i),
                implied_read_lateness_ms: plan
                    .server_itl_ms
                    .and_then(|itl| m.coalesced.get(i)?.implied_lateness_ms(itl))
                    .map(|(mean, max)| ImpliedLateness { mean, max }),
                scheduling_lag_us: Lag { p50, p99, max },
                timer_wake_lateness_us: Lateness { p99: wake_p99, max: wake_max },
                max_in_flight: done.max_in_flight,
                reconnects: done.reconnects,
                scrape_points_dropped: a.scrape_points_dropped,
                stop_reason: if a.lost.is_some() && a.done.is_none() {
                    AgentStop::Lost
                } else {
                    AgentStop::of(done.stop())
                },
                health: a.lost.as_ref().map_or_else(|| "ok".to_string(), |why| format!("lost: {why}")),
            }
        })
        .collect();
    ClientBlock {
        surge_version: env!("CARGO_PKG_VERSION").into(),
        status: RunState::of(&o.status),
        latency_mode: if open_loop { LatencyMode::OpenLoop } else { LatencyMode::ClosedLoop },
        open_loop,
        agents,
        agents_missing: o.missing_agents.clone(),
        agents_waited_s: (o.agents_waited_s > 0.0).then_some(o.agents_waited_s),
        verdict,
    }
}

fn run_metadata(plan: &RunPlan, model: &str, o: &Outcome, saved_at_utc: String) -> RunMetadata {
    let d = &plan.dataset;
    let input_len = match plan.dataset_name {
        "random" => Some(d.random_prefix_len + d.random_input_len),
        "prefix_repetition" => Some(d.prefix_repetition_prefix_len + d.prefix_repetition_suffix_len),
        _ => None,
    };
    let output_len = match plan.dataset_name {
        "prefix_repetition" => Some(d.prefix_repetition_output_len),
        "sharegpt" | "custom" => None,
        _ => Some(d.random_output_len.max(d.fixed_output_len)),
    };
    RunMetadata {
        model: plan.model.clone().unwrap_or_else(|| model.to_string()),
        served_model_name: plan.served_model_name.clone().unwrap_or_else(|| model.to_string()),
        benchmark_type: super::sets::BenchmarkType::Serve,
        dataset_name: plan.dataset_name.into(),
        input_len,
        output_len,
        random_range_ratio: d.random_range_ratio,
        tokenizer: plan
            .tokenizer
            .as_ref()
            .map(|t| TokenizerRef { path: t.path.display().to_string(), sha256: t.sha256.clone() }),
        num_prompts: cap(plan.num_prompts),
        max_concurrency: plan.max_concurrency,
        request_rate: Rate(plan.request_rate),
        endpoint: plan.endpoint.clone(),
        base_url: plan.base_url.clone(),
        hardware: meta(plan, "hardware"),
        engine: meta(plan, "engine"),
        cluster_label: meta(plan, "cluster_label"),
        result_tag: meta(plan, "result_tag"),
        saved_at_utc,
        surge_version: env!("CARGO_PKG_VERSION").into(),
        agents: o.agents.iter().map(|a| a.addr.clone()).collect(),
        status: RunState::of(&o.status),
    }
}

/// `--save-detailed`'s arrays; `vllm_arrays`: also vLLM's `latencies`/`queue_times` (a run
/// without a spill).
/// `--save-detailed`'s arrays from the rows the metrics kept.
pub(crate) fn detailed_of(m: &Metrics, vllm_arrays: bool) -> Detailed {
    let mut rows: Vec<&crate::fleet::outcome::GlobalRow> = m.rows.iter().collect();
    rows.sort_by_key(|r| r.row.index);
    Detailed {
        input_lens: rows.iter().map(|r| r.row.input_tokens).collect(),
        output_lens: rows.iter().map(|r| r.row.output_tokens).collect(),
        ttfts: rows.iter().map(|r| r.ttft_s()).collect(),
        e2els: rows.iter().map(|r| r.e2el_s()).collect(),
        itls: rows.iter().map(|r| r.row.gaps().map(|g| f64::from(g) / 1e6).collect()).collect(),
        start_times: rows.iter().map(|r| r.start_s).collect(),
        agent_indices: rows.iter().map(|r| r.agent).collect(),
        errors: rows.iter().map(|r| if r.ok() { String::new() } else { kind_name(r.row.error()) }).collect(),
        generated_texts: rows.iter().map(|r| r.row.generated_text.clone()).collect(),
        latencies: vllm_arrays.then(|| rows.iter().map(|r| r.vllm_latency_s()).collect()),
        queue_times: vllm_arrays.then(|| rows.iter().map(|r| r.queue_s()).collect()),
    }
}

/// What ended the run.
pub fn ended_by(plan: &RunPlan, o: &Outcome) -> EndedBy {
    use crate::fleet::outcome::RunStatus;
    match &o.status {
        RunStatus::Interrupted | RunStatus::Terminated => EndedBy::Interrupt,
        RunStatus::Invalid { .. } | RunStatus::Partial { .. } => EndedBy::AgentLoss,
        RunStatus::Complete if o.halted == Some(crate::fleet::outcome::Halt::Precision) => EndedBy::Precision,
        RunStatus::Complete if o.halted == Some(crate::fleet::outcome::Halt::Saturated) => EndedBy::Saturated,
        RunStatus::Complete => {
            use surge_proto::StopReason;
            let reasons: Vec<StopReason> = o.agents.iter().filter_map(|a| a.done.as_ref()).map(|d| d.stop()).collect();
            if reasons.contains(&StopReason::Deadline) {
                EndedBy::MaxRunTime
            } else if reasons.contains(&StopReason::Duration) {
                EndedBy::Duration
            } else if plan.ends_at_dataset {
                EndedBy::Dataset
            } else {
                EndedBy::NumPrompts
            }
        }
    }
}

/// The whole result of one run, stamped `saved_at_utc`.
pub fn run_result(
    plan: &RunPlan,
    model: &str,
    m: &Metrics,
    o: &Outcome,
    client: ClientBlock,
    saved_at_utc: String,
) -> RunResult {
    let ps = percentiles(plan);
    // Energy over the run's duration against the tokens the client counted in it.
    let energy = m.gpu.as_ref().map_or_else(Default::default, |g| {
        gpu::Efficiency::of(g.total_energy_j, m.total_output_tokens, m.completed, plan.energy_price_kwh)
    });
    RunResult {
        date: o.started_at.format("%Y%m%d-%H%M%S").to_string(),
        endpoint_type: plan.backend_name.into(),
        backend: plan.backend_name.into(),
        label: plan.label.clone(),
        model_id: model.into(),
        tokenizer_id: plan.tokenizer.as_ref().map_or_else(|| model.to_string(), |t| t.path.display().to_string()),
        num_prompts: cap(plan.num_prompts),
        request_rate: Rate(plan.request_rate),
        burstiness: plan.burstiness,
        max_concurrency: plan.max_concurrency,
        ramp_up_strategy: plan.ramp.map(|r| if r.exponential { Ramp::Exponential } else { Ramp::Linear }),
        ramp_up_start_rps: plan.ramp.map(|r| r.start),
        ramp_up_end_rps: plan.ramp.map(|r| r.end),
        labels: Labels(plan.metadata.clone()),
        duration: m.duration_s,
        ended_by: ended_by(plan, o),
        dataset_passes: (plan.dataset_name != "timed_trace")
            .then(|| crate::plan::split::dataset_passes(plan.prompts.len(), m.completed + m.failed + m.cancelled))
            .flatten(),
        completed: m.completed,
        failed: m.failed,
        cancelled: m.cancelled,
        total_input_tokens: m.total_input_tokens,
        total_output_tokens: m.total_output_tokens,
        total_input_sequences: plan.pooling().then_some(m.total_input_sequences),
        input_sequence_throughput: plan.pooling().then_some(m.input_sequence_throughput),
        request_throughput: m.request_throughput,
        request_goodput: m.request_goodput,
        output_throughput: m.output_throughput,
        total_token_throughput: m.total_token_throughput,
        max_output_tokens_per_s: m.max_output_tokens_per_s,
        vllm_arrays: None,
        max_concurrent_requests: m.max_concurrent_requests,
        peak_in_flight: Some(peak_in_flight(o, m)),
        rtfx: if m.duration_s > 0.0 { m.total_audio_s / m.duration_s } else { 0.0 },
        ignored_flags: plan.ignored_flags.clone(),
        precision: precision_entries(plan, m),
        reasoning: reasoning_result(m, &plan.metric_percentiles),
        steady_state: m.steady_state.clone(),
        rps_change_events: m.ramp.as_ref().map(|r| r.events(o.started_at)),
        probes: (!m.probe.is_empty()).then(|| Probes {
            probe_completed: m.probe.len(),
            probe_failed: m.probe_failed,
            probe_median_e2el_ms: m.probe.median_ms(),
            probe_p99_e2el_ms: m.probe.percentile_ms(99.0),
            probe_max_e2el_ms: m.probe.percentile_ms(100.0),
        }),
        latency: latencies(plan, m, &ps),
        e2el_including_client_queue: m.e2el_incl_queue.as_ref().map(|q| QueueLatency {
            mean_ms: q.mean_ms(),
            median_ms: q.median_ms(),
            percentiles: ps.iter().map(|&p| (p, q.percentile_ms(p))).collect(),
        }),
        multi_turn: super::multi_turn::multi_turn(plan, m, &ps),
        agent_loop: super::multi_turn::agent_loop(plan, m, &ps),
        agent_graphs: m.graphs.as_ref().map(|g| super::multi_turn::AgentGraphsResult {
            graphs: g.graphs,
            sub_agent_sessions: g.sub_agent_sessions,
            sub_agent_requests: g.sub_agent_requests,
            max_fan_out: g.max_fan_out,
            latency: Latencies(vec![
                MetricStats::of("graph_duration", &g.duration, &ps),
                MetricStats::of("critical_path", &g.critical_path, &ps),
            ]),
        }),
        accuracy: plan.accuracy.as_ref().map(|(_, ratio)| {
            use crate::analysis::accuracy::CONFIDENCE;
            let a = m.accuracy.unwrap_or_default();
            let ci = a.interval(CONFIDENCE);
            super::result::AccuracyResult {
                samples: a.samples,
                correct: a.correct,
                accuracy: a.share(),
                ci_low: ci.map(|c| c.0),
                ci_high: ci.map(|c| c.1),
                confidence: CONFIDENCE,
                ratio: *ratio,
            }
        }),
        anomalies: anomalies(o, m),
        endpoints: super::endpoints::endpoints(plan, m),
        endpoint_policy: plan.endpoints.several().then(|| plan.endpoints.policy.into()),
        endpoint_outlier_rule: plan.endpoints.several().then(super::endpoints::outlier_rule),
        replicas: super::endpoints::replicas(plan, m),
        errors_by_kind: m.errors_by_kind.clone(),
        error_examples: m
            .error_examples
            .iter()
            .map(|(kind, seen)| {
                let examples = seen
                    .iter()
                    .map(|e| ErrorExample {
                        http_status: e.http_status,
                        message: e.message.clone(),
                        count: e.count,
                        agent: o.agents.get(e.agent).map_or_else(String::new, |a| a.addr.clone()),
                        stream: e.cut.as_ref().map(StreamExample::of),
                    })
                    .collect();
                (kind.clone(), examples)
            })
            .collect(),
        input_tokens_source: m.token_sources.input_source(),
        output_tokens_source: m.token_sources.output_source(),
        token_count_sources: TokenCounts {
            input: m.token_sources.input.clone(),
            output: m.token_sources.output.clone(),
        },
        percentiles_exact: m.exact,
        cost_per_million_output_tokens: plan.cost_per_hour.and_then(|c| cost::per_million(c, m.output_throughput)),
        cost_per_million_total_tokens: plan.cost_per_hour.and_then(|c| cost::per_million(c, m.total_token_throughput)),
        http_req_connections_reused: (!m.http_phases.is_empty()).then_some(m.http_phases.reused),
        http_req_connections_new: (!m.http_phases.is_empty()).then_some(m.http_phases.new_connections),
        energy_per_output_token_j: energy.energy_per_output_token_j,
        energy_per_request_j: energy.energy_per_request_j,
        output_tokens_per_joule: energy.output_tokens_per_joule,
        average_gpu_power_w: m.gpu.as_ref().filter(|g| !g.gpus.is_empty()).map(|g| g.average_power_w),
        energy_cost_per_million_output_tokens: energy.energy_cost_per_million_output_tokens,
        result_schema: RESULT_SCHEMA,
        run_metadata: run_metadata(plan, model, o, saved_at_utc),
        client,
        sweep: None,
        settings: Default::default(),
        time_series: {
            let mut slices = m.time_series.clone();
            verdict::mark_slices(&mut slices, plan, &o.agents);
            slices
        },
        timeslice_s: m.timeslice_s,
        distributions: distributions(m),
        server_metrics: m.server.clone(),
        gpu_metrics: m.gpu.clone(),
        detailed: plan.save_detailed.then(|| detailed_of(m, plan.num_prompts == crate::plan::UNBOUNDED)),
        detailed_spill: None,
    }
}

/// `--precision`'s targets, each with its exact interval over the run (D62).
fn precision_entries(plan: &RunPlan, m: &Metrics) -> Vec<crate::output::result::PrecisionEntry> {
    plan.precision
        .iter()
        .map(|t| {
            let i = m.sample_of(t.metric.name()).interval_ms(t.pct, plan.confidence);
            let w = i.relative_width();
            crate::output::result::PrecisionEntry {
                target: format!("{}:p{}:{}%", t.metric.name(), crate::plan::percentile_word(t.pct), t.width * 100.0),
                n: i.n,
                estimate_ms: i.estimate,
                low_ms: i.low,
                high_ms: i.high,
                relative_width: w.is_finite().then_some(w),
                confidence: plan.confidence,
                reached: w <= t.width,
            }
        })
        .collect()
}

/// The reasoning block (D49), when any reply reasoned or called a tool.
fn reasoning_result(m: &Metrics, ps: &[f64]) -> Option<crate::output::result::ReasoningResult> {
    let r = m.reasoning.as_deref()?;
    let mut l = Vec::new();
    for (name, s) in
        [("ttfo", &r.ttfo), ("reasoning", &r.duration), ("answer_tpot", &r.answer_tpot), ("tool_call", &r.tool_call)]
    {
        if !s.is_empty() {
            l.push(MetricStats::of(name, s, ps));
        }
    }
    Some(crate::output::result::ReasoningResult {
        requests_with_reasoning: r.rows,
        reasoning_tokens: r.reasoning_events,
        server_reasoning_tokens: r.server_reasoning_tokens,
        answer_tokens: r.answer_tokens,
        requests_with_tool_calls: r.tool_rows,
        tool_calls: r.tool_calls,
        tool_call_tokens: r.tool_call_events,
        tool_call_finishes: r.tool_call_finishes,
        latency: Latencies(l),
    })
}
