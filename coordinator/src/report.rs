//! The result file: `vllm bench serve`'s `--save-result` keys verbatim, surge's
//! `run_metadata` and `client` blocks, errors by kind, and with `--save-detailed` the
//! per-request arrays (seconds, as vLLM saves them).

use crate::metrics::{Metrics, kind_name};
use crate::parse::percentile_word;
use crate::plan::RunPlan;
use crate::run::Outcome;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::path::PathBuf;

/// One agent in `client.agents`.
#[derive(Debug, Clone, Serialize)]
pub struct AgentEntry {
    pub address: String,
    pub hostname: String,
    pub cores: u32,
    pub share: Value,
    pub completed: u64,
    pub failed: u64,
    pub rows_received: u64,
    /// The agent's own counts in its Done message (absent when it was lost): equal to
    /// the rows received when nothing was lost on the way.
    pub agent_reported: Value,
    pub clock_offset_ms: f64,
    pub clock_offset_bound_ms: f64,
    /// Process CPU time over the run's wall time; 100 = one core.
    pub cpu_percent: f64,
    pub cpu_seconds: f64,
    /// Intended to actual send (open loop), microseconds.
    pub scheduling_lag_us: Value,
    /// Pacing-timer wake-up lateness (open loop), microseconds.
    pub timer_wake_lateness_us: Value,
    pub max_in_flight: u32,
    pub reconnects: u64,
    pub stop_reason: String,
    pub health: String,
}

/// Was the client the bottleneck?
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub client_bound: bool,
    pub reasons: Vec<String>,
    pub requested_rate: Option<f64>,
    /// The rate of the drawn open-loop schedule.
    pub scheduled_rate: Option<f64>,
    pub achieved_rate: f64,
    /// Connect, reset, timeout and TLS errors.
    pub socket_errors: u64,
    pub thresholds: Value,
}

/// The `client` block: where the load came from and whether it was the bottleneck.
#[derive(Debug, Clone, Serialize)]
pub struct ClientBlock {
    pub surge_version: &'static str,
    pub status: &'static str,
    pub latency_mode: &'static str,
    pub open_loop: bool,
    pub agents: Vec<AgentEntry>,
    pub verdict: Verdict,
}

/// Builds the client block and its verdict.
pub fn client_block(plan: &RunPlan, m: &Metrics, o: &Outcome) -> ClientBlock {
    let limits = plan.verdict;
    let open_loop = plan.request_rate.is_finite();
    let mut reasons = Vec::new();
    let mut agents = Vec::new();
    for a in &o.agents {
        let done = a.done.clone().unwrap_or_default();
        let health = a.last_health.clone().unwrap_or_default();
        let cpu_percent =
            if done.wall_seconds > 0.0 { 100.0 * done.cpu_seconds / done.wall_seconds } else { a.peak_cpu_percent };
        let cores = a.hello.cores.max(1);
        if cpu_percent > limits.cpu_fraction * 100.0 * f64::from(cores) {
            reasons.push(format!(
                "agent {} used {cpu_percent:.0}% CPU of {cores} core(s) (limit {:.0}%)",
                a.addr,
                limits.cpu_fraction * 100.0 * f64::from(cores)
            ));
        }
        let (lag, wake) = if a.done.is_some() {
            ((done.lag_p50_us, done.lag_p99_us, done.lag_max_us), (done.wake_p99_us, done.wake_max_us))
        } else {
            ((health.lag_p50_us, health.lag_p99_us, health.lag_max_us), (health.wake_p99_us, health.wake_max_us))
        };
        if open_loop && lag.1 > limits.lag_p99_us {
            reasons.push(format!(
                "agent {} send lag p99 {:.2} ms (limit {:.2} ms)",
                a.addr,
                lag.1 as f64 / 1000.0,
                limits.lag_p99_us as f64 / 1000.0
            ));
        }
        let share = a.share.as_ref().map_or(Value::Null, |s| {
            json!({
                "fraction": s.fraction,
                "slice_start": s.slice_start,
                "num_prompts": s.num_prompts,
                "max_concurrency": s.max_concurrency,
                "request_rate": if s.request_rate.is_finite() { json!(s.request_rate) } else { json!("inf") },
            })
        });
        agents.push(AgentEntry {
            address: a.addr.clone(),
            hostname: a.hello.hostname.clone(),
            cores,
            share,
            completed: a.completed,
            failed: a.failed,
            rows_received: a.rows,
            agent_reported: a
                .done
                .as_ref()
                .map_or(Value::Null, |d| json!({"completed": d.completed, "failed": d.failed})),
            clock_offset_ms: a.offset.offset_ns as f64 / 1e6,
            clock_offset_bound_ms: a.offset.bound_ns() as f64 / 1e6,
            cpu_percent,
            cpu_seconds: done.cpu_seconds,
            scheduling_lag_us: json!({"p50": lag.0, "p99": lag.1, "max": lag.2}),
            timer_wake_lateness_us: json!({"p99": wake.0, "max": wake.1}),
            max_in_flight: done.max_in_flight,
            reconnects: done.reconnects,
            stop_reason: if a.lost.is_some() && a.done.is_none() { "lost".into() } else { done.stop_reason.clone() },
            health: a.lost.clone().map_or_else(|| "ok".to_string(), |why| format!("lost: {why}")),
        });
    }
    let achieved_rate = send_rate(o.rows.iter().map(|r| r.start_s));
    // Compared with the rate of the schedule actually drawn (a Poisson schedule of n
    // requests deviates from the nominal rate by about 1/sqrt(n) on its own).
    let scheduled_rate = open_loop.then(|| send_rate(o.rows.iter().filter_map(|r| r.intended_s)));
    let requested_rate = open_loop.then_some(plan.request_rate);
    if let Some(r) = scheduled_rate {
        if plan.max_concurrency.is_none() && o.rows.len() >= 100 && achieved_rate < r * (1.0 - limits.rate_shortfall) {
            reasons.push(format!(
                "achieved send rate {achieved_rate:.1}/s is more than {:.0}% below the scheduled {r:.1}/s",
                limits.rate_shortfall * 100.0
            ));
        }
    }
    let socket_errors =
        ["connect", "connection_reset", "timeout", "tls"].iter().filter_map(|k| m.errors_by_kind.get(*k)).sum();
    ClientBlock {
        surge_version: env!("CARGO_PKG_VERSION"),
        status: o.status.as_str(),
        latency_mode: if open_loop {
            "open loop: latencies from the actual send; e2el_including_client_queue from the intended send"
        } else {
            "closed loop: latencies from the actual send (coordinated omission applies)"
        },
        open_loop,
        agents,
        verdict: Verdict {
            client_bound: !reasons.is_empty(),
            reasons,
            requested_rate,
            scheduled_rate,
            achieved_rate,
            socket_errors,
            thresholds: json!({
                "cpu_fraction_of_cores": limits.cpu_fraction,
                "send_lag_p99_us": limits.lag_p99_us,
                "rate_shortfall": limits.rate_shortfall,
            }),
        },
    }
}

/// Sends per second between the first and the last of `times` (seconds).
fn send_rate(times: impl Iterator<Item = f64>) -> f64 {
    let (mut lo, mut hi, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0usize);
    for t in times {
        lo = lo.min(t);
        hi = hi.max(t);
        n += 1;
    }
    if n > 1 && hi > lo { (n - 1) as f64 / (hi - lo) } else { 0.0 }
}

fn rate_value(r: f64) -> Value {
    if r.is_finite() { json!(r) } else { json!("inf") }
}

/// The whole result document.
pub fn result_json(plan: &RunPlan, model: &str, m: &Metrics, o: &Outcome, client: &ClientBlock) -> Value {
    let mut v = Map::new();
    let date = o.started_at.format("%Y%m%d-%H%M%S").to_string();
    v.insert("date".into(), json!(date));
    v.insert("backend".into(), json!(plan.backend_name));
    v.insert("endpoint_type".into(), json!(plan.backend_name));
    v.insert("model_id".into(), json!(model));
    let tokenizer_id = plan.tokenizer.as_ref().map_or_else(|| model.to_string(), |t| t.path.display().to_string());
    v.insert("tokenizer_id".into(), json!(tokenizer_id));
    v.insert("num_prompts".into(), json!(plan.num_prompts));
    v.insert("request_rate".into(), rate_value(plan.request_rate));
    v.insert("burstiness".into(), json!(plan.burstiness));
    v.insert("max_concurrency".into(), json!(plan.max_concurrency));
    for (k, val) in &plan.metadata {
        v.insert(k.clone(), json!(val));
    }
    v.insert("duration".into(), json!(m.duration_s));
    v.insert("completed".into(), json!(m.completed));
    v.insert("failed".into(), json!(m.failed));
    v.insert("total_input_tokens".into(), json!(m.total_input_tokens));
    v.insert("total_output_tokens".into(), json!(m.total_output_tokens));
    v.insert("request_throughput".into(), json!(m.request_throughput));
    v.insert("request_goodput".into(), json!(m.request_goodput));
    v.insert("output_throughput".into(), json!(m.output_throughput));
    v.insert("total_token_throughput".into(), json!(m.total_token_throughput));
    v.insert("max_output_tokens_per_s".into(), json!(m.max_output_tokens_per_s));
    v.insert("max_concurrent_requests".into(), json!(m.max_concurrent_requests));
    let mut percentiles = plan.metric_percentiles.clone();
    if !percentiles.contains(&99.0) {
        percentiles.push(99.0);
    }
    for key in crate::metrics::METRICS {
        let d = m.dist(key);
        v.insert(format!("mean_{key}_ms"), json!(d.mean_ms()));
        v.insert(format!("median_{key}_ms"), json!(d.median_ms()));
        v.insert(format!("std_{key}_ms"), json!(d.std_ms()));
        for &p in &percentiles {
            v.insert(format!("p{}_{key}_ms", percentile_word(p)), json!(d.percentile_ms(p)));
        }
    }
    if let Some(q) = &m.e2el_incl_queue {
        let mut e = Map::new();
        e.insert("mean_ms".into(), json!(q.mean_ms()));
        e.insert("median_ms".into(), json!(q.median_ms()));
        for &p in &percentiles {
            e.insert(format!("p{}_ms", percentile_word(p)), json!(q.percentile_ms(p)));
        }
        v.insert("e2el_including_client_queue".into(), Value::Object(e));
    }
    v.insert("errors_by_kind".into(), json!(m.errors_by_kind));
    v.insert("input_tokens_source".into(), json!(m.token_sources.input_source()));
    v.insert("output_tokens_source".into(), json!(m.token_sources.output_source()));
    v.insert("token_count_sources".into(), m.token_sources.to_json());
    v.insert("run_metadata".into(), run_metadata(plan, model, o));
    v.insert("client".into(), serde_json::to_value(client).unwrap_or(Value::Null));
    if plan.save_detailed {
        detailed(&mut v, o);
    }
    Value::Object(v)
}

fn meta<'a>(plan: &'a RunPlan, key: &str) -> Option<&'a str> {
    plan.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn run_metadata(plan: &RunPlan, model: &str, o: &Outcome) -> Value {
    let d = &plan.dataset;
    let input_len = match plan.dataset_name {
        "random" => json!(d.random_prefix_len + d.random_input_len),
        "prefix_repetition" => json!(d.prefix_repetition_prefix_len + d.prefix_repetition_suffix_len),
        _ => Value::Null,
    };
    let output_len = match plan.dataset_name {
        "prefix_repetition" => json!(d.prefix_repetition_output_len),
        "sharegpt" | "custom" => Value::Null,
        _ => json!(d.random_output_len.max(d.fixed_output_len)),
    };
    json!({
        "model": plan.model.clone().unwrap_or_else(|| model.to_string()),
        "served_model_name": plan.served_model_name.clone().unwrap_or_else(|| model.to_string()),
        "benchmark_type": "serve",
        "dataset_name": plan.dataset_name,
        "input_len": input_len,
        "output_len": output_len,
        "random_range_ratio": d.random_range_ratio,
        "tokenizer": plan.tokenizer.as_ref().map(|t| json!({"path": t.path, "sha256": t.sha256})),
        "num_prompts": plan.num_prompts,
        "max_concurrency": plan.max_concurrency,
        "request_rate": rate_value(plan.request_rate),
        "endpoint": plan.endpoint,
        "base_url": plan.base_url,
        "hardware": meta(plan, "hardware"),
        "engine": meta(plan, "engine"),
        "cluster_label": meta(plan, "cluster_label"),
        "result_tag": meta(plan, "result_tag"),
        "saved_at_utc": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "surge_version": env!("CARGO_PKG_VERSION"),
        "agents": o.agents.iter().map(|a| a.addr.clone()).collect::<Vec<_>>(),
        "status": o.status.as_str(),
    })
}

fn detailed(v: &mut Map<String, Value>, o: &Outcome) {
    let rows = &o.rows;
    v.insert("input_lens".into(), json!(rows.iter().map(|r| r.row.input_tokens).collect::<Vec<_>>()));
    v.insert("output_lens".into(), json!(rows.iter().map(|r| r.row.output_tokens).collect::<Vec<_>>()));
    v.insert("ttfts".into(), json!(rows.iter().map(|r| r.ttft_s()).collect::<Vec<_>>()));
    v.insert("e2els".into(), json!(rows.iter().map(|r| r.e2el_s()).collect::<Vec<_>>()));
    v.insert(
        "itls".into(),
        json!(
            rows.iter()
                .map(|r| r.row.itl_us.iter().map(|&g| f64::from(g) / 1e6).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        ),
    );
    v.insert("start_times".into(), json!(rows.iter().map(|r| r.start_s).collect::<Vec<_>>()));
    v.insert("agent_indices".into(), json!(rows.iter().map(|r| r.agent).collect::<Vec<_>>()));
    v.insert(
        "errors".into(),
        json!(rows.iter().map(|r| if r.ok() { String::new() } else { kind_name(r.row.error()) }).collect::<Vec<_>>()),
    );
}

/// Where the result goes: `--result-dir`/`--result-filename`, or vLLM's default name.
pub fn result_path(plan: &RunPlan, model: &str, o: &Outcome) -> PathBuf {
    let name = plan.result_filename.clone().unwrap_or_else(|| {
        let rate = if plan.request_rate.is_finite() { format!("{}", plan.request_rate) } else { "inf".into() };
        let conc = plan.max_concurrency.map_or_else(String::new, |c| format!("-concurrency{c}"));
        let base = model.rsplit('/').next().unwrap_or(model);
        format!("{}-{rate}qps{conc}-{base}-{}.json", plan.backend_name, o.started_at.format("%Y%m%d-%H%M%S"))
    });
    plan.result_dir.clone().unwrap_or_else(|| PathBuf::from(".")).join(name)
}

/// Writes the document atomically (temporary file, then rename).
pub fn write(path: &std::path::Path, doc: &Value) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(doc).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
