//! From parsed flags and configuration to the typed plans, once: `surge run`, `sweep`,
//! `matrix` and `validate`. Derived plans (levels, profiles) are made later by changing
//! fields of these values, never by building command lines.

use super::config::{CoordinatorFile, load_file};
use super::{
    BackendArg, Command, FleetCommand, LoadArgs, MatrixArgs, RunArgs, SamplingArgs, ServerViewArgs, SweepArgs,
    TelemetryArgs, TransportArgs, UsageError, ValidateArgs, VerdictArgs, dataset, parse,
};
use crate::plan::matrix::{MatrixPlan, standard};
use crate::plan::sweep::{Kind, KneeRule, SweepPlan};
use crate::plan::validate::ValidatePlan;
use crate::plan::{Agents, ConnectWait, GpuPlan, OtlpPlan, OtlpProtocol, RunPlan, ScrapePlan, TlsPaths, VerdictLimits};
use clap::{Args, FromArgMatches};
use std::net::SocketAddr;
use std::path::PathBuf;
use surge_proto::{Backend, HttpChoice};

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

fn is_loopback(addr: &str) -> bool {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return sa.ip().is_loopback();
    }
    addr.rsplit_once(':').is_some_and(|(h, _)| h == "localhost")
}

/// `--ramp-up-*`, checked as vLLM checks them. With `--num-prompts` the ramp runs over the
/// requests (vLLM's); a `--duration` run without it ramps over the duration (D22).
fn ramp_plan(l: &LoadArgs, request_rate: f64) -> Result<Option<crate::plan::RampPlan>, UsageError> {
    let Some(strategy) = l.ramp_up_strategy else {
        if l.ramp_up_start_rps.is_some() || l.ramp_up_end_rps.is_some() {
            return usage("--ramp-up-start-rps/--ramp-up-end-rps: need --ramp-up-strategy linear|exponential");
        }
        return Ok(None);
    };
    let (Some(start), Some(end)) = (l.ramp_up_start_rps, l.ramp_up_end_rps) else {
        return usage("--ramp-up-strategy: both --ramp-up-start-rps and --ramp-up-end-rps must be given");
    };
    if request_rate.is_finite() {
        return usage("--ramp-up-strategy: do not give --request-rate too (the ramp sets the rate)");
    }
    if start > end {
        return usage(format!("--ramp-up-start-rps {start}: must not exceed --ramp-up-end-rps {end}"));
    }
    let exponential = strategy == crate::cli::RampArg::Exponential;
    if exponential && start == 0 {
        return usage("--ramp-up-start-rps 0: an exponential ramp cannot start at 0");
    }
    Ok(Some(crate::plan::RampPlan { exponential, start, end }))
}

/// A `--backend` value's protocol, the name the result gives it, and its default endpoint.
fn backend_of(b: BackendArg) -> (Backend, &'static str, &'static str) {
    match b {
        BackendArg::Openai => (Backend::Openai, "openai", "/v1/completions"),
        BackendArg::Vllm => (Backend::Openai, "vllm", "/v1/completions"),
        BackendArg::OpenaiChat => (Backend::OpenaiChat, "openai-chat", "/v1/chat/completions"),
        BackendArg::OpenaiResponses => (Backend::OpenaiResponses, "openai-responses", "/v1/responses"),
        BackendArg::OpenaiAudio => (Backend::OpenaiAudio, "openai-audio", "/v1/audio/transcriptions"),
        BackendArg::OpenaiEmbeddings => (Backend::OpenaiEmbeddings, "openai-embeddings", "/v1/embeddings"),
        BackendArg::OpenaiEmbeddingsChat => (Backend::OpenaiEmbeddingsChat, "openai-embeddings-chat", "/v1/embeddings"),
        // Without images (surge's datasets are text), vLLM's CLIP and VLM2Vec clients send
        // what openai-embeddings-chat sends.
        BackendArg::OpenaiEmbeddingsClip => (Backend::OpenaiEmbeddingsChat, "openai-embeddings-clip", "/v1/embeddings"),
        BackendArg::OpenaiEmbeddingsVlm2vec => {
            (Backend::OpenaiEmbeddingsChat, "openai-embeddings-vlm2vec", "/v1/embeddings")
        }
        BackendArg::InfinityEmbeddings => (Backend::InfinityEmbeddings, "infinity-embeddings", "/embeddings"),
        BackendArg::InfinityEmbeddingsClip => (Backend::InfinityEmbeddings, "infinity-embeddings-clip", "/embeddings"),
        BackendArg::VllmPooling => (Backend::VllmPooling, "vllm-pooling", "/pooling"),
        BackendArg::VllmRerank => (Backend::VllmRerank, "vllm-rerank", "/rerank"),
        BackendArg::Http => (Backend::Http, "http", "/echo"),
    }
}

/// The flags that go only with some backends or datasets, checked together.
fn check_pairs(a: &RunArgs, backend: Backend, backend_name: &str, pooling: bool) -> Result<(), UsageError> {
    let batch = a.dataset.random_batch_size;
    if a.conversation.tool_loop && backend != Backend::OpenaiChat {
        return usage(format!("--tool-loop: tool calls are chat's (--backend openai-chat), not {backend_name}"));
    }
    if a.conversation.multi_turn && !matches!(backend, Backend::Openai | Backend::OpenaiChat) {
        return usage(format!(
            "--multi-turn: conversations go to --backend openai-chat (or openai), not {backend_name}"
        ));
    }
    if batch > 1
        && !(pooling
            && matches!(
                backend,
                Backend::OpenaiEmbeddings | Backend::InfinityEmbeddings | Backend::VllmPooling | Backend::VllmRerank
            ))
    {
        return usage(format!(
            "--random-batch-size {batch}: only the pooling backends that take a list of inputs (openai-embeddings, infinity-embeddings, vllm-pooling, vllm-rerank) batch"
        ));
    }
    if batch > 1 && !matches!(a.dataset.dataset_name, super::DatasetArg::Random | super::DatasetArg::RandomRerank) {
        return usage(format!("--random-batch-size {batch}: batches are made of the random or random-rerank dataset"));
    }
    if (backend == Backend::OpenaiAudio) != (a.dataset.dataset_name == super::DatasetArg::CustomAudio) {
        return usage("--backend openai-audio and --dataset-name custom_audio go together (audio files)");
    }
    if (backend == Backend::VllmRerank) != (a.dataset.dataset_name == super::DatasetArg::RandomRerank) {
        return usage("--backend vllm-rerank and --dataset-name random-rerank go together (a query and its documents)");
    }
    if a.dataset.prompt_token_ids && batch > 1 {
        return usage("--prompt-token-ids: not with --random-batch-size above 1");
    }
    Ok(())
}

/// `--graceful-stop` (a `--duration` run's wait for the requests in flight) and the hard
/// limit, `--max-run-time` or what the duration implies.
fn run_time(l: &LoadArgs) -> Result<(Option<std::time::Duration>, std::time::Duration), UsageError> {
    if l.graceful_stop.is_some() && l.duration.is_none() {
        return usage("--graceful-stop: only meaningful with --duration");
    }
    let graceful_stop = l.duration.map(|_| l.graceful_stop.unwrap_or(crate::plan::DEFAULT_GRACEFUL_STOP));
    let max_run_time = match (l.max_run_time, l.duration) {
        (Some(m), _) if m.is_zero() => return usage("--max-run-time 0s: the run would end before it began"),
        (Some(m), Some(d)) if m < d => {
            return usage(format!(
                "--max-run-time {}: shorter than --duration {} (the hard limit would cut the run)",
                humantime::format_duration(m),
                humantime::format_duration(d)
            ));
        }
        (Some(m), _) => m,
        (None, Some(d)) => d + graceful_stop.unwrap_or_default() + crate::plan::DURATION_GRACE,
        (None, None) => crate::plan::DEFAULT_MAX_RUN_TIME,
    };
    Ok((graceful_stop, max_run_time))
}

/// How many requests (or sessions) the run sends, and whether the dataset's end is what
/// ends it: `--num-prompts`, a trace's length (`trace_len`, when replaying one), unbounded
/// for a `--duration` run, else vLLM's default; `file_len`: the dataset's prompts (or
/// sessions).
fn run_length(a: &RunArgs, trace_len: Option<u64>, file_len: u64) -> (u64, bool) {
    let num_prompts = match (a.load.num_prompts, a.load.duration) {
        (Some(n), _) => n,
        // A trace is replayed whole unless asked for fewer.
        (None, _) if let Some(n) = trace_len => n,
        (None, Some(_)) => crate::plan::UNBOUNDED,
        (None, None) => crate::plan::DEFAULT_NUM_PROMPTS,
    };
    // --no-oversample: a file shorter than the run ends it (D20); a trace already does.
    let ends_at_dataset = a.dataset.no_oversample && trace_len.is_none() && file_len > 0 && num_prompts > file_len;
    let num_prompts = if ends_at_dataset { file_len } else { num_prompts };
    // vLLM's --random-batch-size: --num-prompts counts prompts (rerank: documents), B to
    // a request.
    let num_prompts = match u64::from(a.dataset.random_batch_size.max(1)) {
        b if b > 1 && num_prompts != crate::plan::UNBOUNDED => num_prompts.div_ceil(b),
        _ => num_prompts,
    };
    (num_prompts, ends_at_dataset)
}

/// `--accuracy FILE` and `--accuracy-ratio` (D71): the questions, read and checked here.
fn accuracy_plan(a: &RunArgs, backend: Backend) -> Result<Option<crate::plan::Accuracy>, UsageError> {
    let Some(path) = &a.output.accuracy else { return Ok(None) };
    if !matches!(backend, Backend::Openai | Backend::OpenaiChat) {
        return usage("--accuracy: questions need --backend openai or openai-chat");
    }
    if a.conversation.multi_turn {
        return usage("--accuracy: questions are single requests; they do not mix with --multi-turn");
    }
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| UsageError(format!("--accuracy {shown}: {e}")))?;
    let items = surge_core::data::answers::parse(&text).map_err(|e| UsageError(format!("--accuracy {shown}: {e}")))?;
    if a.output.accuracy_ratio <= 0.0 {
        return usage("--accuracy-ratio: above 0 (1: every request is a question)");
    }
    Ok(Some((items.into(), a.output.accuracy_ratio)))
}

/// Single flags' values that no plan field checks by being built.
fn check_values(a: &RunArgs, backend: Backend) -> Result<(), UsageError> {
    if a.sampling.temperature.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
        return usage("--temperature: must be a number >= 0");
    }
    // The ranges vLLM's SamplingParams accepts: a value outside was sent and refused by
    // the server on every request.
    let s = &a.sampling;
    let ranges = [
        ("--top-p", s.top_p, "within (0, 1]", (|v: f64| v > 0.0 && v <= 1.0) as fn(f64) -> bool),
        ("--min-p", s.min_p, "within [0, 1]", |v| (0.0..=1.0).contains(&v)),
        ("--frequency-penalty", s.frequency_penalty, "within [-2, 2]", |v| (-2.0..=2.0).contains(&v)),
        ("--presence-penalty", s.presence_penalty, "within [-2, 2]", |v| (-2.0..=2.0).contains(&v)),
        ("--repetition-penalty", s.repetition_penalty, "above 0", |v| v > 0.0 && v.is_finite()),
    ];
    for (flag, value, range, ok) in ranges {
        if let Some(v) = value.filter(|v| !ok(*v)) {
            return usage(format!("{flag} {v}: must be {range}, as vLLM accepts it"));
        }
    }
    if let Some(k) = s.top_k.filter(|k| *k < -1) {
        return usage(format!("--top-k {k}: must be -1 (all), 0 or more, as vLLM accepts it"));
    }
    if a.target.read_timeout.is_some_and(|t| t.as_millis() == 0) {
        return usage("--read-timeout: must be at least 1ms (leave it out for no limit)");
    }
    if a.telemetry.live_linger.is_some() && a.telemetry.prometheus_listen.is_none() {
        return usage("--live-linger: only meaningful with --prometheus-listen");
    }
    if a.output.timeslice < std::time::Duration::from_millis(10) {
        return usage("--timeslice: at least 10ms");
    }
    // The server's and the GPUs' pages, and the agents' own GPU samples.
    if a.server.scrape_interval < std::time::Duration::from_millis(100) {
        return usage("--scrape-interval: at least 100ms");
    }
    if a.output.steady_state_threshold <= 0.0 {
        return usage("--steady-state-threshold: must be in (0, 1]");
    }
    let thresholds: Vec<Option<f64>> = a
        .output
        .timeline_itl_thresholds
        .split(',')
        .map(|t| t.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect();
    if !matches!(thresholds[..], [Some(lo), Some(hi)] if lo <= hi) {
        return usage(format!(
            "--timeline-itl-thresholds {:?}: expected LOW,HIGH in ms",
            a.output.timeline_itl_thresholds
        ));
    }
    if !a.target.lora_modules.is_empty() && backend == Backend::Http {
        return usage("--lora-modules: the http backend sends no model name to replace");
    }
    if a.target.lora_modules.iter().any(|m| m.trim().is_empty()) {
        return usage("--lora-modules: a module name is empty");
    }
    Ok(())
}

/// `surge run`'s flags (and `--config`) as a validated plan in its normal form, with the
/// flags given that change nothing found (D78) and refused under `--strict`.
pub fn run_plan(a: RunArgs) -> Result<RunPlan, UsageError> {
    let run = a.clone();
    checked(
        &run,
        a,
        |r| plan_run(r).map(RunPlan::normalized),
        |c| match c {
            Command::Run(r) | Command::Fleet(FleetCommand::Check(r)) => Some(*r),
            _ => None,
        },
        |p| &mut p.ignored_flags,
    )
}

/// The plan `build` makes of `args`, with the flags of `run`'s command line it does not
/// depend on in its `ignored_flags` (`flags`), or under `--strict` a usage error naming
/// them. `of` takes the same command's arguments out of another parsed command line, to
/// build its plan too (with the first dataset read kept).
fn checked<A, P: PartialEq>(
    run: &RunArgs,
    args: A,
    build: impl Fn(A) -> Result<P, UsageError>,
    of: impl Fn(Command) -> Option<A>,
    flags: fn(&mut P) -> &mut Vec<String>,
) -> Result<P, UsageError> {
    dataset::memoized(|| {
        let mut plan = build(args)?;
        let found: Vec<String> =
            super::ignored::ignored(run, &plan, |c| of(c).map(&build)).iter().map(ToString::to_string).collect();
        if run.strict && !found.is_empty() {
            return usage(format!("--strict: {}", found.join("; ")));
        }
        *flags(&mut plan) = found;
        Ok(plan)
    })
}

/// `surge run`'s flags (and `--config`) as a validated plan: each group of flags is
/// checked and built by its own function (`agents_plan`, `verdict_limits`, `otlp_plan`,
/// `scrape_plan`, `http_version`, `target_tls`, `extra_body`, `ramp_plan`, `dataset::resolve`,
/// `check_pairs`, `check_values`, `run_time`, `run_length`). Long by its end: the
/// `RunPlan` literal, one line per field, is half of it.
fn plan_run(mut a: RunArgs) -> Result<RunPlan, UsageError> {
    // vLLM's shorthands set every dataset's length.
    if let Some(n) = a.dataset.input_len {
        a.dataset.random_input_len = n;
    }
    if let Some(n) = a.dataset.output_len {
        if n == 0 {
            return usage("--output-len: at least 1");
        }
        a.dataset.random_output_len = n;
        a.dataset.sharegpt_output_len = Some(n);
        a.dataset.custom_output_len = n;
        a.dataset.prefix_repetition_output_len = n;
        a.dataset.spec_bench_output_len = n;
        a.dataset.hf_output_len = Some(n);
    }
    let endpoints = super::endpoints::plan(
        &a.target.base_url,
        a.target.endpoints.as_deref(),
        a.target.endpoint_policy,
        a.target.replica_header.as_deref(),
        (&a.target.host, a.target.port),
    )?;
    let base_url = endpoints.list[0].url.clone();
    let (backend, backend_name, default_endpoint) = backend_of(a.target.backend);
    let pooling = !a.target.backend.generates() && backend != Backend::Http;
    check_pairs(&a, backend, backend_name, pooling)?;
    let endpoint = a.target.endpoint.clone().unwrap_or_else(|| default_endpoint.to_string());
    if !endpoint.starts_with('/') {
        return usage(format!("--endpoint {endpoint:?}: must start with '/'"));
    }
    let d = dataset::resolve(&a)?;
    if backend != Backend::Http && a.dataset.random_output_len == 0 {
        return usage("--random-output-len: must be at least 1");
    }
    let request_rate = match a.load.request_rate.0.as_slice() {
        [r] => *r,
        _ => return usage("--request-rate: surge run takes one rate (lists of levels are for surge sweep)"),
    };
    let ramp = ramp_plan(&a.load, request_rate)?;
    let trace = d.name == "timed_trace";
    // No request more than a year after the first at the replay's speed (D88): it would
    // never be sent, and the run would end as if it had been.
    let last_ms = if trace { d.prompts.iter().map(|p| p.timestamp_ms).fold(0.0, f64::max) } else { 0.0 };
    if last_ms / a.load.trace_speedup > crate::dataset::trace::YEAR_MS {
        return usage(format!(
            "--dataset-path: its last request comes {last_ms} ms after its first, at --trace-speedup {}: more than a year",
            a.load.trace_speedup
        ));
    }
    // A session trace counts its root sessions: sub-agents start when spawned (D68).
    let spawned = d.prompts.iter().map(|p| p.spawn.len() as u64).sum::<u64>();
    let sessions = d.prompts.iter().filter_map(|p| p.session).max().map(|s| s + 1 - spawned);
    let multi_turn =
        super::conversation::multi_turn_plan(&a.conversation, d.name, sessions.is_some(), a.load.max_concurrency)?;
    // A session trace is replayed session by session: its length counts sessions.
    let trace_len = sessions.unwrap_or(d.prompts.len() as u64);
    if multi_turn.is_some() && a.output.save_detailed {
        return usage(
            "--save-detailed: vLLM's per-request arrays have no turns; --save-rows keeps each turn's row (session, turn)",
        );
    }
    if multi_turn.is_some() && ramp.is_some() {
        return usage("--ramp-up-strategy: conversations start at a fixed --request-rate");
    }
    if trace && (request_rate.is_finite() || ramp.is_some()) {
        return usage(
            "--dataset-name timed_trace: the trace sets the send times; drop --request-rate/--ramp-up-strategy",
        );
    }
    if trace && a.load.num_prompts.is_some_and(|n| n > trace_len) {
        let what = if sessions.is_some() { "sessions" } else { "requests" };
        return usage(format!("--num-prompts {}: the trace has {trace_len} {what}", a.load.num_prompts.unwrap_or(0)));
    }
    check_values(&a, backend)?;
    let accuracy = accuracy_plan(&a, backend)?;
    if a.output.check_determinism && a.sampling.temperature.is_some_and(|t| t != 0.0) {
        return usage("--check-determinism: the same text is expected at temperature 0; drop --temperature");
    }
    let slo = parse::goodput(&a.output.goodput).map_err(|e| UsageError(format!("--goodput: {e}")))?;
    let headers = request_headers(&a.target.headers, std::env::var("OPENAI_API_KEY").ok())?;
    let (graceful_stop, max_run_time) = run_time(&a.load)?;
    if let Some(p) = &a.telemetry.request_id_prefix
        && http::HeaderValue::from_str(&format!("{p}0")).is_err()
    {
        return usage(format!("--request-id-prefix {p:?}: not valid in an HTTP header (a control character?)"));
    }
    if a.load.num_prompts.is_none()
        && a.load.duration.is_some()
        && a.load.max_concurrency.is_none()
        && multi_turn.as_ref().is_none_or(|m| m.concurrency.is_none())
        && a.load.ramp_up_strategy.is_none()
        && a.load.request_rate.0.iter().all(|r| r.is_infinite())
    {
        return usage(
            "--duration without --num-prompts: give --max-concurrency or a finite --request-rate (otherwise nothing bounds the load)",
        );
    }
    let file = match &a.config {
        Some(p) => load_file(p)?,
        None => CoordinatorFile::default(),
    };
    let agents = agents_plan(&a.fleet, file)?;
    let urls: Vec<&str> = endpoints.list.iter().map(|e| e.url.as_str()).collect();
    let (http_version, target_tls) = (http_version(&a.transport, &urls)?, target_tls(&a.transport)?);
    let scrape = scrape_plan(&a.server, &urls, &target_tls)?;
    let gpu = gpu_plan(&a.server, &target_tls)?;
    let extra_body = extra_body(&a.sampling, backend, a.target.backend.generates())?;
    let otlp = otlp_plan(&a.telemetry)?;
    let saves = a.output.saves();
    let precision = a
        .output
        .precision
        .iter()
        .map(|s| crate::plan::Precision::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(UsageError)?;
    let (num_prompts, ends_at_dataset) =
        run_length(&a, trace.then_some(trace_len), sessions.unwrap_or(d.prompts.len() as u64));
    Ok(RunPlan {
        base_url: base_url.trim_end_matches('/').to_string(),
        endpoints,
        endpoint,
        backend,
        backend_name,
        model: a.target.model,
        served_model_name: a.target.served_model_name,
        dataset: d.spec,
        dataset_name: d.name,
        tokenizer: d.tokenizer,
        prompts: d.prompts,
        num_prompts,
        ends_at_dataset,
        timeslice: a.output.timeslice,
        duration: a.load.duration,
        graceful_stop,
        max_concurrency: a.load.max_concurrency,
        request_rate,
        burstiness: a.load.burstiness,
        ramp,
        trace_speedup: trace.then_some(a.load.trace_speedup),
        num_warmups: a.load.num_warmups,
        // As vLLM 0.32: the random dataset runs to the requested length on OpenAI backends.
        ignore_eos: a.sampling.ignore_eos || (matches!(d.name, "random" | "random-mm") && a.target.backend.generates()),
        // vLLM sends temperature 0.0 (greedy) unless told otherwise.
        temperature: if !a.target.backend.generates() {
            a.sampling.temperature
        } else {
            a.sampling.temperature.or(Some(0.0))
        },
        extra_body,
        seed: a.dataset.seed,
        // vLLM's pooling runs report E2EL only; its default for them is "e2el".
        percentile_metrics: if pooling && !a.given.iter().any(|g| g == "percentile-metrics") {
            vec!["e2el"]
        } else {
            a.output.percentile_metrics.0
        },
        metric_percentiles: a.output.metric_percentiles.0,
        slo,
        save_result: saves,
        append_result: a.output.append_result,
        save_detailed: a.output.save_detailed,
        save_rows: a.output.save_rows,
        result_dir: a.output.result_dir,
        result_filename: a.output.result_filename,
        metadata: a.output.metadata,
        ready_timeout: a.target.ready_timeout,
        http_version,
        h3_connections: a.transport.h3_connections.unwrap_or(0),
        target_tls,
        headers,
        agents,
        tolerate_agent_loss: a.tolerate_agent_loss,
        max_failure_rate: a.output.max_failure_rate,
        fail_on_anomaly: a.output.fail_on_anomaly,
        check_determinism: a.output.check_determinism,
        accuracy,
        no_initial_test: a.target.no_initial_test,
        max_run_time,
        read_timeout: a.target.read_timeout,
        verdict: verdict_limits(&a.verdict),
        server_itl_ms: a.server.server_itl_ms,
        scrape,
        gpu,
        energy_price_kwh: a.output.energy_price_kwh,
        gpu_sample_interval: a.server.scrape_interval,
        prometheus_listen: a.telemetry.prometheus_listen,
        live_linger: a.telemetry.live_linger.unwrap_or(a.server.scrape_interval * 2),
        otlp,
        cost_per_hour: a.output.cost_per_hour,
        label: a.output.label.clone(),
        request_id_prefix: a.telemetry.request_id_prefix.clone(),
        lora_modules: a.target.lora_modules.clone(),
        lora_random: a.target.lora_assignment == super::LoraAssignmentArg::Random,
        probe_rate: a.load.probe_request_rate,
        plot_timeline: a.output.plot_timeline,
        show_http_phases: a.output.show_http_phases,
        multi_turn,
        ignored_flags: Vec::new(),
        dry_run: a.dry_run,
        profile: a.output.profile.then(|| crate::plan::ProfilePlan {
            batch_threshold: a.output.profile_batch_threshold,
            duration: std::time::Duration::from_secs_f64(a.output.profile_duration),
        }),
        steady: (!a.output.no_steady_state)
            .then_some((a.output.steady_state_threshold, a.output.steady_state_min_window)),
        precision,
        confidence: a.output.confidence,
    })
}

/// `--agents`, their TLS and the config file's agents: where the load runs.
fn agents_plan(f: &super::FleetArgs, file: CoordinatorFile) -> Result<Agents, UsageError> {
    let addrs = if f.agents.is_empty() { file.agents.clone() } else { f.agents.clone() };
    Ok(if addrs.is_empty() {
        if f.agents_plaintext || f.tls_ca.is_some() {
            return usage("--agents-plaintext/--tls-*: only meaningful with --agents");
        }
        if f.min_agents.is_some() {
            return usage("--min-agents: only meaningful with --agents");
        }
        Agents::Embedded
    } else {
        for addr in &addrs {
            if addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
                return usage(format!("--agents: {addr:?} is not HOST:PORT"));
            }
        }
        let ca = f.tls_ca.clone().or(file.tls_ca);
        let cert = f.tls_cert.clone().or(file.tls_cert);
        let key = f.tls_key.clone().or(file.tls_key);
        let tls = match (ca, cert, key) {
            (Some(ca), Some(cert), Some(key)) if !f.agents_plaintext => {
                surge_core::transport::identity::read(&ca, &cert, &key).map_err(|e| UsageError(e.to_string()))?;
                Some(TlsPaths { ca, cert, key })
            }
            (None, None, None) if f.agents_plaintext => {
                if let Some(bad) = addrs.iter().find(|a| !is_loopback(a)) {
                    return usage(format!(
                        "--agents-plaintext: plaintext is allowed only to loopback agents, not {bad}"
                    ));
                }
                None
            }
            _ if f.agents_plaintext => {
                return usage("--agents-plaintext: cannot be combined with --tls-ca/--tls-cert/--tls-key");
            }
            _ => {
                return usage(
                    "--agents: needs --tls-ca, --tls-cert and --tls-key (or --agents-plaintext for loopback agents)",
                );
            }
        };
        if f.min_agents.is_some_and(|k| k as usize > addrs.len()) {
            return usage(format!(
                "--min-agents {}: more than the {} agents given",
                f.min_agents.unwrap_or(0),
                addrs.len()
            ));
        }
        let wait = ConnectWait { timeout: f.agent_connect_timeout, min_agents: f.min_agents.map(|k| k as usize) };
        Agents::Remote { addrs, tls, wait }
    })
}

/// `--client-*`: the limits of the client-bound verdict.
fn verdict_limits(v: &VerdictArgs) -> VerdictLimits {
    VerdictLimits {
        cpu_fraction: v.client_cpu_limit,
        lag_p99_us: v.client_lag_limit.as_micros() as u64,
        rate_shortfall: v.client_rate_shortfall,
        host_busy_pct: v.client_host_busy_limit,
        cpu_pressure_pct: v.client_pressure_limit,
        coalesced_fraction: v.client_coalesced_limit,
    }
}

/// `--otlp-*`: where and how the run's traces go.
fn otlp_plan(tm: &TelemetryArgs) -> Result<Option<OtlpPlan>, UsageError> {
    Ok(match &tm.otlp_endpoint {
        None => None,
        Some(url) => match super::url::http(url) {
            Some(_) => Some(OtlpPlan {
                endpoint: url.clone(),
                protocol: match tm.otlp_protocol {
                    super::OtlpProtocolArg::Grpc => OtlpProtocol::Grpc,
                    super::OtlpProtocolArg::HttpProtobuf => OtlpProtocol::HttpProtobuf,
                },
                headers: tm.otlp_headers.clone(),
                sample_ratio: tm.otlp_sample_ratio,
            }),
            None => return usage(format!("--otlp-endpoint {url:?}: expected http(s)://HOST:PORT[/PATH]")),
        },
    })
}

/// `--dry-run` is `surge run`'s: a sweep, a search or a matrix would run its load.
fn refuse_dry_run(a: &RunArgs) -> Result<(), UsageError> {
    if a.dry_run {
        return usage("--dry-run: only surge run plans without sending; dry-run one level with surge run");
    }
    Ok(())
}

/// `surge sweep`'s flags as a validated sweep, with the flags given that change nothing
/// found (D78).
pub fn sweep_plan(a: SweepArgs) -> Result<SweepPlan, UsageError> {
    let run = a.run.clone();
    checked(
        &run,
        a,
        plan_sweep,
        |c| match c {
            Command::Sweep(s) => Some(*s),
            _ => None,
        },
        |p| &mut p.base.ignored_flags,
    )
}

fn plan_sweep(mut a: SweepArgs) -> Result<SweepPlan, UsageError> {
    refuse_dry_run(&a.run)?;
    if a.tag.is_empty() || a.tag.contains('/') {
        return Err(UsageError(format!("--tag {:?}: must be a plain file-name prefix", a.tag)));
    }
    let rates = a.run.load.request_rate.0.clone();
    let sessions = a.run.conversation.session_concurrency.clone();
    let (kind, levels) = match (&a.concurrency, &sessions) {
        (Some(_), Some(_)) => {
            return Err(UsageError("--concurrency or --multi-turn-concurrency levels: one of them".into()));
        }
        (None, Some(s)) => {
            if rates.len() > 1 {
                return Err(UsageError("--request-rate: give one rate with --multi-turn-concurrency levels".into()));
            }
            a.run.conversation.session_concurrency = Some(super::parse::Levels(vec![s.0[0]]));
            (Kind::Sessions, s.0.iter().map(|&n| f64::from(n)).collect::<Vec<_>>())
        }
        (Some(c), None) => {
            if rates.len() > 1 {
                return Err(UsageError("--request-rate: give one rate with --concurrency levels".into()));
            }
            (Kind::Concurrency, c.0.iter().map(|&n| f64::from(n)).collect::<Vec<_>>())
        }
        (None, None) => {
            let mut r = rates.clone();
            if r.iter().any(|x| x.is_infinite()) {
                return Err(UsageError("--concurrency LIST or --request-rate LIST (finite rates) is required".into()));
            }
            r.sort_unstable_by(f64::total_cmp);
            r.dedup();
            (Kind::RequestRate, r)
        }
    };
    a.run.load.request_rate.0.truncate(1);
    // The base run at the first level (each level sets its own), so that its normal form
    // keeps what a level reads: --steady-state-* with concurrency levels.
    if kind == Kind::Concurrency {
        a.run.load.max_concurrency = levels.first().map(|&c| c as u32);
    }
    // A sweep writes every level's result: --result-dir and the rest are read.
    a.run.output.save_result = true;
    let settings = std::mem::take(&mut a.run.settings);
    let mut base = plan_run(a.run)?.normalized();
    base.save_result = true;
    // Each level-run's file is named by its tag and level.
    base.result_filename = None;
    let dir = base.result_dir.clone().unwrap_or_else(|| PathBuf::from("surge-sweep"));
    // The knee's rule is read only when the knee is looked for.
    if !a.find_knee {
        (a.knee_efficiency, a.knee_latency_growth, a.knee_steps) = (0.0, 0.0, 0);
    }
    Ok(SweepPlan {
        base,
        kind,
        levels,
        runs: a.runs,
        cooldown: a.cooldown,
        find_knee: a.find_knee,
        rule: KneeRule { efficiency: a.knee_efficiency, latency_growth: a.knee_latency_growth },
        knee_steps: a.knee_steps,
        resume: a.resume,
        settings: crate::plan::Settings(settings),
        reset_prefix_cache: a.reset_prefix_cache,
        dir,
        tag: a.tag,
    })
}

/// `surge capacity`'s flags as a validated search (D62), with the flags given that change
/// nothing found (D78).
pub fn capacity_plan(a: super::CapacityArgs) -> Result<crate::plan::capacity::CapacityPlan, UsageError> {
    let run = a.run.clone();
    checked(
        &run,
        a,
        plan_capacity,
        |c| match c {
            Command::Capacity(s) => Some(*s),
            _ => None,
        },
        |p| &mut p.sweep.base.ignored_flags,
    )
}

/// Long: each capacity flag's check in turn, then the search's fields.
fn plan_capacity(mut a: super::CapacityArgs) -> Result<crate::plan::capacity::CapacityPlan, UsageError> {
    refuse_dry_run(&a.run)?;
    use crate::analysis::capacity::Slo;
    use crate::analysis::interval::values_for_upper_bound;
    if a.tag.is_empty() || a.tag.contains('/') {
        return usage(format!("--tag {:?}: must be a plain file-name prefix", a.tag));
    }
    // `accuracy>=X` is a floor on the share of right answers (D71); the rest are latencies.
    let mut accuracy_floor = None;
    for s in &a.slo {
        if let Some(x) = s.trim().strip_prefix("accuracy>=") {
            match x.trim().parse::<f64>() {
                Ok(v) if v > 0.0 && v < 1.0 => accuracy_floor = Some(v),
                _ => return usage(format!("--slo {s:?}: accuracy>=X with X between 0 and 1")),
            }
            if a.run.output.accuracy.is_none() {
                return usage(format!("--slo {s:?}: needs --accuracy FILE, the questions"));
            }
        }
    }
    let slos = a
        .slo
        .iter()
        .filter(|s| !s.trim().starts_with("accuracy>="))
        .map(|s| Slo::parse(s).map_err(|e| UsageError(format!("--slo {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    match (slos.is_empty() && accuracy_floor.is_none(), a.min_goodput_ratio, a.run.output.goodput.is_empty()) {
        (true, None, _) => return usage("--slo METRIC:PCT<=MS (or --goodput with --min-goodput-ratio) is required"),
        (false, Some(_), _) => return usage("--slo or --min-goodput-ratio: one of them"),
        (true, Some(_), true) => {
            return usage("--min-goodput-ratio: needs --goodput NAME:MS, the per-request objectives");
        }
        _ => {}
    }
    let (lo, hi) = a
        .range
        .split_once(':')
        .and_then(|(l, h)| Some((l.trim().parse::<f64>().ok()?, h.trim().parse::<f64>().ok()?)))
        .filter(|(l, h)| l.is_finite() && h.is_finite() && *l > 0.0 && l <= h)
        .ok_or_else(|| UsageError(format!("--range {:?}: expected LO:HI with 0 < LO <= HI", a.range)))?;
    let kind = match a.over {
        super::OverArg::Concurrency => Kind::Concurrency,
        super::OverArg::Rate => Kind::RequestRate,
        super::OverArg::Sessions => Kind::Sessions,
    };
    let integer = kind != Kind::RequestRate;
    for v in [lo, hi] {
        if let (false, Err(why)) = (integer, super::parse::rate_value(v)) {
            return usage(format!("--range {:?}: the rate {v} {why}", a.range));
        }
    }
    if integer && (lo.fract() != 0.0 || hi.fract() != 0.0) {
        return usage(format!("--range {:?}: concurrency and sessions are whole numbers", a.range));
    }
    if integer && hi > f64::from(u32::MAX) {
        return usage(format!("--range {:?}: concurrency and sessions are at most {}", a.range, u32::MAX));
    }
    let resolution = match a.resolution.as_deref() {
        None if integer => 1.0,
        None => 0.05,
        Some(r) => match r.strip_suffix('%') {
            Some(p) if !integer => p.trim().parse::<f64>().ok().filter(|v| *v > 0.0).map(|v| v / 100.0),
            None if integer => r.trim().parse::<f64>().ok().filter(|v| *v >= 1.0 && v.fract() == 0.0),
            _ => None,
        }
        .ok_or_else(|| {
            UsageError(format!(
                "--resolution {r:?}: a whole number of units (at least 1) for --over {}, a percentage for --over rate",
                if kind == Kind::Sessions { "sessions" } else { "concurrency" }
            ))
        })?,
    };
    match kind {
        Kind::Concurrency if a.run.load.max_concurrency.is_some() => {
            return usage("--max-concurrency: the search sets it (--over concurrency)");
        }
        Kind::RequestRate if a.run.load.request_rate.0.iter().any(|r| r.is_finite()) => {
            return usage("--request-rate: the search sets it (--over rate)");
        }
        Kind::Sessions if !a.run.conversation.multi_turn => return usage("--over sessions: needs --multi-turn"),
        Kind::Sessions if a.run.conversation.session_concurrency.is_some() => {
            return usage("--multi-turn-concurrency: the search sets it (--over sessions)");
        }
        _ => {}
    }
    if a.run.load.ramp_up_strategy.is_some() {
        return usage("--ramp-up-strategy: a capacity level runs at one load");
    }
    if a.run.load.duration.is_some() {
        return usage("--duration: a capacity level-run is sized in requests (--num-prompts)");
    }
    // The base run at the first level, so what the plan (and the ignored-flags check)
    // reads is a run at one of the levels: --burstiness is read by a paced run.
    match kind {
        Kind::Sessions => a.run.conversation.session_concurrency = Some(super::parse::Levels(vec![lo as u32])),
        Kind::Concurrency => a.run.load.max_concurrency = Some(lo as u32),
        Kind::RequestRate => a.run.load.request_rate = super::parse::RateList(vec![lo]),
    }
    // Every level-run writes its result.
    a.run.output.save_result = true;
    let confidence = a.run.output.confidence;
    let asked = a.run.load.num_prompts;
    let settings = std::mem::take(&mut a.run.settings);
    let mut base = plan_run(a.run)?.normalized();
    base.save_result = true;
    base.result_filename = None;
    // Enough requests that every SLO can pass (a p99 at 95 % needs 368); without
    // --num-prompts, just that (goodput: 100), so no level costs more than it must.
    let needed = slos.iter().map(|s| values_for_upper_bound(s.pct, confidence)).max().unwrap_or(100);
    // Conversations count sessions: enough of them for `needed` turns.
    let per_unit = base.multi_turn.as_ref().map_or(1, |m| u64::from(m.turns_min.max(1)));
    let requests_per_run = asked.unwrap_or(0).max(needed.div_ceil(per_unit));
    base.num_prompts = requests_per_run;
    // Each level-run's result carries every SLO's metric and percentile.
    for s in &slos {
        let name = s.metric.name();
        if let Some(m) = crate::plan::METRICS.iter().chain(&["ttfo"]).find(|m| **m == name)
            && !base.percentile_metrics.contains(m)
        {
            base.percentile_metrics.push(m);
        }
        if !base.metric_percentiles.contains(&s.pct) {
            base.metric_percentiles.push(s.pct);
        }
    }
    let max_requests_per_level = a.max_requests_per_level.unwrap_or(requests_per_run * per_unit * 8);
    if max_requests_per_level < requests_per_run * per_unit {
        return usage(format!(
            "--max-requests-per-level {max_requests_per_level}: below one level-run's {} requests",
            requests_per_run * per_unit
        ));
    }
    let dir = base.result_dir.clone().unwrap_or_else(|| PathBuf::from("surge-capacity"));
    let sweep = SweepPlan {
        base,
        kind,
        levels: Vec::new(),
        runs: a.runs,
        cooldown: a.cooldown,
        find_knee: false,
        rule: KneeRule { efficiency: 0.5, latency_growth: 1.0 },
        knee_steps: 1,
        resume: a.resume,
        settings: crate::plan::Settings(settings),
        reset_prefix_cache: a.reset_prefix_cache,
        dir,
        tag: a.tag,
    };
    Ok(crate::plan::capacity::CapacityPlan {
        sweep,
        slos,
        goodput_ratio: a.min_goodput_ratio,
        accuracy_floor,
        lo,
        hi,
        resolution,
        confidence,
        max_level_runs: a.max_level_runs,
        max_requests_per_level,
        requests_per_run,
        requests_per_unit: per_unit,
    })
}

/// `surge matrix`'s flags and profiles as a validated matrix.
pub fn matrix_plan(a: MatrixArgs) -> Result<MatrixPlan, UsageError> {
    let run = a.run.clone();
    checked(
        &run,
        a,
        plan_matrix,
        |c| match c {
            Command::Matrix(s) => Some(*s),
            _ => None,
        },
        |p| &mut p.base.ignored_flags,
    )
}

/// Its base plan is left as built: the profiles set the load and the lengths.
fn plan_matrix(mut a: MatrixArgs) -> Result<MatrixPlan, UsageError> {
    refuse_dry_run(&a.run)?;
    // A matrix writes every profile's result: --result-dir and the rest are read.
    a.run.output.save_result = true;
    let file = match &a.run.config {
        Some(p) => load_file(p)?,
        None => Default::default(),
    };
    let mut profiles = if a.standard { standard() } else { Vec::new() };
    for p in &file.profiles {
        if p.tag.is_empty()
            || p.tag.contains('/')
            || p.concurrency == 0
            || p.num_prompts == 0
            || p.input_len == 0
            || p.output_len == 0
        {
            return Err(UsageError(format!(
                "--config: profile {:?}: tag must be a file name and every number above 0",
                p.tag
            )));
        }
        if let Err(why) = super::dataset::random_input_fits(&a.run, p.input_len) {
            return Err(UsageError(format!("--config: profile {:?}: input-len {}: {why}", p.tag, p.input_len)));
        }
        if let Some(Err(why)) = p.request_rate.map(super::parse::rate_value) {
            return Err(UsageError(format!("--config: profile {:?}: request-rate {why} (or left out: inf)", p.tag)));
        }
        if profiles.iter().any(|q| q.tag == p.tag) {
            return Err(UsageError(format!("--config: profile {:?} defined twice", p.tag)));
        }
        profiles.push(p.clone());
    }
    if profiles.is_empty() {
        return Err(UsageError("--standard or --config FILE with [[profile]] tables is required".into()));
    }
    // The suffix is part of each file's name: it may not leave --result-dir.
    if a.tag_suffix.contains(['/', '\\', '\0']) {
        return Err(UsageError(format!("--tag-suffix {:?}: a result's name may not hold a path", a.tag_suffix)));
    }
    for p in &mut profiles {
        p.tag.push_str(&a.tag_suffix);
    }
    let settings = std::mem::take(&mut a.run.settings);
    let mut base = plan_run(a.run)?;
    base.save_result = true;
    // What each profile sets (`MatrixPlan::at`) is not read from the command line, and
    // each profile's file is named by its tag.
    base.result_filename = None;
    (base.temperature, base.max_concurrency, base.num_prompts, base.request_rate) = (None, None, 0, f64::INFINITY);
    (base.dataset.random_input_len, base.dataset.random_output_len) = (0, 0);
    let labels = [
        ("hardware", a.hardware.or(file.hardware)),
        ("engine", a.engine.or(file.engine)),
        ("cluster_label", a.cluster_label.or(file.cluster_label)),
    ];
    for (k, v) in labels {
        if let Some(v) = v {
            base.metadata.retain(|(key, _)| key != k);
            base.metadata.push((k.into(), v));
        }
    }
    let dir = base.result_dir.clone().unwrap_or_else(|| PathBuf::from("surge-matrix"));
    Ok(MatrixPlan { base, profiles, dir, resume: a.resume, settings: crate::plan::Settings(settings) })
}

/// `--http-version` (or `--http2`) as on the wire; HTTP/3 needs an https:// target.
fn http_version(t: &TransportArgs, base_urls: &[&str]) -> Result<HttpChoice, UsageError> {
    let v = match (t.http_version.as_deref(), t.http2) {
        (Some("1.1"), false) => HttpChoice::Http1,
        (Some("2"), _) | (None, true) => HttpChoice::Http2,
        (Some("3"), false) => HttpChoice::Http3,
        (Some(v), true) => return usage(format!("--http2 contradicts --http-version {v}")),
        _ => HttpChoice::Auto,
    };
    let https = base_urls.iter().all(|u| u.starts_with("https://"));
    if v == HttpChoice::Http3 && !https {
        return usage("--http-version 3: needs an https:// --base-url (QUIC always carries TLS)");
    }
    if t.h3_connections.is_some() && v != HttpChoice::Http3 {
        return usage("--h3-connections: only with --http-version 3");
    }
    Ok(v)
}

/// `--insecure` and `--ca-cert` (the certificate file read and checked here).
fn target_tls(t: &TransportArgs) -> Result<crate::plan::TargetTls, UsageError> {
    let ca_pem = match &t.ca_cert {
        None => Vec::new(),
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| UsageError(format!("--ca-cert {}: {e}", p.display())))?;
            let mut rd = bytes.as_slice();
            let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut rd).collect();
            match certs {
                Ok(c) if !c.is_empty() => bytes,
                Ok(_) => return usage(format!("--ca-cert {}: no PEM certificate in it", p.display())),
                Err(e) => return usage(format!("--ca-cert {}: {e}", p.display())),
            }
        }
    };
    Ok(crate::plan::TargetTls { insecure: t.insecure, ca_pem })
}

/// vLLM's sampling flags and `--extra-body` as one JSON object (the extra body's keys
/// win); they are refused on the plain `http` backend, as vLLM refuses them on
/// non-OpenAI backends.
fn extra_body(s: &SamplingArgs, backend: Backend, generates: bool) -> Result<Option<String>, UsageError> {
    let mut m = serde_json::Map::new();
    // A backend that generates nothing reads no sampling flag (they are reported as
    // ignored); only --extra-body reaches its body.
    let s = &if generates {
        s.clone()
    } else {
        SamplingArgs {
            ignore_eos: false,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            frequency_penalty: None,
            presence_penalty: None,
            repetition_penalty: None,
            logprobs: None,
            tools: None,
            tool_choice: None,
            extra_body: s.extra_body.clone(),
        }
    };
    let floats = [
        ("top_p", s.top_p),
        ("min_p", s.min_p),
        ("frequency_penalty", s.frequency_penalty),
        ("presence_penalty", s.presence_penalty),
        ("repetition_penalty", s.repetition_penalty),
    ];
    for (k, v) in floats {
        if let Some(v) = v {
            let n = serde_json::Number::from_f64(v)
                .ok_or_else(|| UsageError(format!("--{}: not a number", k.replace('_', "-"))))?;
            m.insert(k.into(), n.into());
        }
    }
    if let Some(k) = s.top_k {
        m.insert("top_k".into(), k.into());
    }
    // vLLM sends `logprobs` in completions bodies only; its chat requests leave it out.
    if let Some(n) = s.logprobs
        && backend != Backend::OpenaiChat
    {
        m.insert("logprobs".into(), n.into());
    }
    if s.tools.is_some() || s.tool_choice.is_some() {
        if backend != Backend::OpenaiChat {
            return usage("--tools and --tool-choice: tools go to --backend openai-chat");
        }
        if let Some(path) = &s.tools {
            m.insert("tools".into(), tools_file(path)?);
        }
        if let Some(c) = &s.tool_choice {
            let choice = match c.as_str() {
                "auto" | "none" | "required" => serde_json::Value::String(c.clone()),
                name if !name.is_empty() && !name.contains(char::is_whitespace) => {
                    // {"type": "function", "function": {"name": NAME}}
                    let function: serde_json::Map<String, serde_json::Value> =
                        [("name".to_string(), serde_json::Value::from(name))].into_iter().collect();
                    let choice: serde_json::Map<String, serde_json::Value> = [
                        ("type".to_string(), serde_json::Value::from("function")),
                        ("function".to_string(), serde_json::Value::Object(function)),
                    ]
                    .into_iter()
                    .collect();
                    serde_json::Value::Object(choice)
                }
                _ => return usage(format!("--tool-choice {c:?}: auto, none, required or a function's name")),
            };
            m.insert("tool_choice".into(), choice);
        }
    }
    if let Some(text) = &s.extra_body {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(extra)) => m.extend(extra),
            Ok(_) => return usage(format!("--extra-body {text:?}: expected a JSON object")),
            Err(e) => return usage(format!("--extra-body {text:?}: {e}")),
        }
    }
    if m.is_empty() {
        return Ok(None);
    }
    if backend == Backend::Http {
        return usage("sampling flags and --extra-body need an OpenAI backend (--backend openai or openai-chat)");
    }
    Ok(Some(serde_json::Value::Object(m).to_string()))
}

/// `--tools FILE`: the `tools` array of an OpenAI chat request, or an object holding one.
fn tools_file(path: &std::path::Path) -> Result<serde_json::Value, UsageError> {
    const MOST: u64 = 4 << 20;
    let say = |why: String| UsageError(format!("--tools {}: {why}", path.display()));
    let len = std::fs::metadata(path).map_err(|e| say(e.to_string()))?.len();
    if len > MOST {
        return Err(say(format!("{len} bytes; at most {MOST}")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| say(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| say(format!("not JSON: {e}")))?;
    let tools = match v {
        serde_json::Value::Object(mut o) => o.remove("tools").ok_or_else(|| say("no \"tools\" key".into()))?,
        other => other,
    };
    let ok = tools
        .as_array()
        .is_some_and(|a| !a.is_empty() && a.iter().all(|t| t.get("type").and_then(|x| x.as_str()).is_some()));
    if !ok {
        return Err(say("expected a non-empty array of tools, each with a \"type\" (e.g. \"function\")".into()));
    }
    Ok(tools)
}

/// `--header`s (NAME:VALUE or vLLM's NAME=VALUE, split at the first of ':' and '=', D9),
/// and, as vLLM's benchmark does, `Authorization: Bearer <api_key>` (OPENAI_API_KEY)
/// unless a header already names Authorization.
fn request_headers(raw: &[String], api_key: Option<String>) -> Result<Vec<(String, String)>, UsageError> {
    let mut headers = Vec::new();
    for h in raw {
        match h.find([':', '=']).map(|i| (&h[..i], &h[i + 1..])) {
            Some((k, v)) if !k.trim().is_empty() => headers.push((k.trim().to_string(), v.trim().to_string())),
            _ => return usage(format!("--header {h:?}: expected NAME:VALUE or NAME=VALUE")),
        }
    }
    for (k, v) in &headers {
        // What frames the body is the client's to write: a given one broke every request.
        if ["content-length", "transfer-encoding"].iter().any(|f| k.eq_ignore_ascii_case(f)) {
            return usage(format!("--header {k:?}: surge writes this header itself"));
        }
        if http::HeaderName::from_bytes(k.as_bytes()).is_err() || http::HeaderValue::from_str(v).is_err() {
            return usage(format!("--header {k:?}: not a valid HTTP header name and value"));
        }
    }
    if let Some(key) = api_key.filter(|k| !k.is_empty())
        && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    {
        let bearer = format!("Bearer {key}");
        if http::HeaderValue::from_str(&bearer).is_err() {
            return usage("OPENAI_API_KEY: not valid in an HTTP header (a control character?)".to_string());
        }
        headers.push(("Authorization".into(), bearer));
    }
    Ok(headers)
}

/// `--metrics-url`, `--no-scrape-metrics`, `--scrape-interval`, `--scrape-metric`,
/// `--scrape-from` as a plan.
fn scrape_plan(
    s: &ServerViewArgs,
    base_urls: &[&str],
    tls: &crate::plan::TargetTls,
) -> Result<Option<ScrapePlan>, UsageError> {
    if s.no_scrape_metrics {
        return Ok(None);
    }
    for url in &s.metrics_urls {
        if super::url::http(url).is_none() {
            return usage(format!("--metrics-url {url:?}: expected http://HOST[:PORT]/PATH (a port from 1 to 65535)"));
        }
    }
    let explicit = !s.metrics_urls.is_empty();
    // Each endpoint's own /metrics, kept apart by URL (D69).
    let urls = if explicit {
        s.metrics_urls.clone()
    } else {
        base_urls.iter().map(|u| format!("{}/metrics", u.trim_end_matches('/'))).collect()
    };
    Ok(Some(ScrapePlan {
        urls,
        explicit,
        extra: s.scrape_metrics.clone(),
        interval: s.scrape_interval,
        from_agent: s.scrape_from == super::ScrapeFrom::Agent,
        tls: tls.clone(),
    }))
}

/// `--gpu-metrics-url` as a plan (scraped every `--scrape-interval`).
fn gpu_plan(s: &ServerViewArgs, tls: &crate::plan::TargetTls) -> Result<Option<GpuPlan>, UsageError> {
    if s.gpu_metrics_urls.is_empty() {
        return Ok(None);
    }
    for url in &s.gpu_metrics_urls {
        if super::url::http(url).is_none() {
            return usage(format!(
                "--gpu-metrics-url {url:?}: expected http://HOST[:PORT]/PATH (a port from 1 to 65535)"
            ));
        }
    }
    Ok(Some(GpuPlan { urls: s.gpu_metrics_urls.clone(), interval: s.scrape_interval, tls: tls.clone() }))
}

/// `surge run`'s options with every default, as if no flag were given.
pub fn default_run_args() -> Result<RunArgs, UsageError> {
    let cmd = RunArgs::augment_args(clap::Command::new("surge-run").no_binary_name(true));
    let matches = cmd.try_get_matches_from(std::iter::empty::<String>()).map_err(|e| UsageError(e.to_string()))?;
    RunArgs::from_arg_matches(&matches).map_err(|e| UsageError(e.to_string()))
}

/// `surge validate`'s flags as a validated plan. Every level runs the same request
/// shape: a streamed completion (`--streaming`) or a plain POST to `/echo`.
pub fn validate_plan(a: ValidateArgs) -> Result<ValidatePlan, UsageError> {
    if !a.fleet.agents.is_empty() && a.target.is_none() {
        return usage("--target URL is required with --agents (remote agents cannot reach an embedded echo server)");
    }
    if let Some(t) = &a.target
        && super::url::http(t).is_none()
    {
        return usage(format!("--target {t:?}: expected http://HOST[:PORT] or https://... (a port from 1 to 65535)"));
    }
    let mut r = default_run_args()?;
    let h3 = a.http_version.as_deref() == Some("3");
    if h3 && a.target.as_deref().is_some_and(|t| !t.starts_with("https://")) {
        return usage("--http-version 3: needs an https:// --target (QUIC always carries TLS)");
    }
    let placeholder = if h3 { "https://127.0.0.1:9" } else { "http://127.0.0.1:9" };
    r.target.base_url = vec![a.target.clone().unwrap_or_else(|| placeholder.into())];
    r.transport.http_version = a.http_version.clone();
    // The embedded echo's certificate is made at start: nothing to verify it against.
    r.transport.insecure = h3 && a.target.is_none();
    r.target.model = Some("surge-echo".into());
    if a.streaming {
        r.target.backend = BackendArg::Openai;
        r.dataset.random_input_len = 16;
        r.dataset.random_output_len = a.tokens_per_request;
        r.sampling.ignore_eos = true;
    } else {
        r.target.backend = BackendArg::Http;
        r.target.endpoint = Some("/echo".into());
        r.dataset.random_input_len = a.tokens_per_request;
    }
    r.load.num_prompts = Some(a.requests_per_level);
    r.output.percentile_metrics = parse::metric_list("e2el").map_err(UsageError)?;
    r.output.metric_percentiles = parse::percentile_list("50,95,99").map_err(UsageError)?;
    r.fleet = a.fleet;
    let mut base = run_plan(r)?;
    base.server_itl_ms = (a.streaming && a.itl_ms > 0.0).then_some(a.itl_ms);
    Ok(ValidatePlan {
        target: a.target,
        levels: a.levels.map(|l| l.0),
        streaming: a.streaming,
        requests_per_level: a.requests_per_level,
        tokens_per_request: a.tokens_per_request,
        result_dir: a.result_dir,
        against: a.against,
        min_headroom: a.min_headroom,
        itl_ms: a.itl_ms,
        base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_dataset_ignores_eos_on_openai_backends_as_vllm() {
        let mut a = default_run_args().unwrap();
        a.target.base_url = vec!["http://127.0.0.1:9".into()];
        a.target.model = Some("m".into());
        // The flag's value: implied by the random dataset (so given, it is not warned).
        assert!(a.sampling.ignore_eos);
        a.sampling.ignore_eos = false;
        assert!(run_plan(a.clone()).unwrap().ignore_eos, "random + openai");
        a.target.backend = BackendArg::Http;
        assert!(!run_plan(a.clone()).unwrap().ignore_eos, "a plain POST has no EOS to ignore");
        a.sampling.ignore_eos = true;
        assert!(!run_plan(a).unwrap().ignore_eos, "not even when given");
    }

    #[test]
    fn sampling_flags_and_extra_body_make_one_object_the_extra_body_winning() {
        let mut a = default_run_args().unwrap();
        a.target.base_url = vec!["http://127.0.0.1:9".into()];
        a.target.model = Some("m".into());
        let p = run_plan(a.clone()).unwrap();
        assert_eq!((p.temperature, p.extra_body.as_deref()), (Some(0.0), None), "vLLM's greedy default");
        a.sampling.top_p = Some(0.9);
        a.sampling.top_k = Some(20);
        a.sampling.extra_body = Some(r#"{"top_p":0.5,"chat_template_kwargs":{"enable_thinking":false}}"#.into());
        let p = run_plan(a.clone()).unwrap();
        let v: serde_json::Value = serde_json::from_str(p.extra_body.as_deref().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"top_p": 0.5, "top_k": 20, "chat_template_kwargs": {"enable_thinking": false}})
        );
        a.sampling.extra_body = Some("[1]".into());
        assert!(run_plan(a.clone()).unwrap_err().0.contains("--extra-body"));
        a.sampling.extra_body = None;
        a.target.backend = BackendArg::Http;
        // Sampling flags on a backend that generates nothing are not read (warned, D44);
        // a body it cannot carry is refused.
        assert_eq!(run_plan(a.clone()).unwrap().extra_body, None);
        a.sampling.extra_body = Some(r#"{"x":1}"#.into());
        assert!(run_plan(a).unwrap_err().0.contains("OpenAI backend"));
    }

    /// `--tools FILE` and `--tool-choice` (D49): the file's array (or its `tools` key) and
    /// the choice in every chat body; refused elsewhere and for a file that is no tools list.
    #[test]
    fn tools_and_tool_choice_go_into_chat_bodies() {
        let dir = std::env::temp_dir().join(format!("surge-tools-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = r#"{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}"#;
        let (array, object, bad) = (dir.join("a.json"), dir.join("o.json"), dir.join("b.json"));
        std::fs::write(&array, format!("[{tool}]")).unwrap();
        std::fs::write(&object, format!(r#"{{"tools":[{tool}],"model":"x"}}"#)).unwrap();
        std::fs::write(&bad, r#"[{"name":"no type"}]"#).unwrap();
        let mut a = default_run_args().unwrap();
        a.target.base_url = vec!["http://127.0.0.1:9".into()];
        a.target.backend = BackendArg::OpenaiChat;
        for file in [&array, &object] {
            a.sampling.tools = Some(file.clone());
            a.sampling.tool_choice = Some("get_weather".into());
            let p = run_plan(a.clone()).unwrap();
            let v: serde_json::Value = serde_json::from_str(p.extra_body.as_deref().unwrap()).unwrap();
            assert_eq!(v["tools"][0]["function"]["name"], "get_weather", "{v}");
            assert_eq!(v["tool_choice"], serde_json::json!({"type": "function", "function": {"name": "get_weather"}}));
            assert!(v.get("model").is_none(), "only the tools of a request object");
        }
        a.sampling.tool_choice = Some("required".into());
        let v: serde_json::Value =
            serde_json::from_str(run_plan(a.clone()).unwrap().extra_body.as_deref().unwrap()).unwrap();
        assert_eq!(v["tool_choice"], "required");
        a.sampling.tools = Some(bad);
        assert!(run_plan(a.clone()).unwrap_err().0.contains("--tools"));
        a.sampling.tools = Some(array);
        a.target.backend = BackendArg::Openai;
        assert!(run_plan(a).unwrap_err().0.contains("openai-chat"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn logprobs_go_in_completions_bodies_only_and_the_tokenizer_can_be_skipped() {
        let mut a = default_run_args().unwrap();
        a.target.base_url = vec!["http://127.0.0.1:9".into()];
        a.target.model = Some("m".into());
        a.sampling.logprobs = Some(5);
        let p = run_plan(a.clone()).unwrap();
        assert_eq!(p.extra_body.as_deref(), Some(r#"{"logprobs":5}"#));
        a.target.backend = BackendArg::OpenaiChat;
        assert_eq!(run_plan(a.clone()).unwrap().extra_body, None, "vLLM's chat requests carry no logprobs");
        let tok = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer");
        a.dataset.tokenizer = Some(tok);
        assert!(run_plan(a.clone()).unwrap().tokenizer.is_some());
        a.dataset.skip_tokenizer_init = true;
        assert!(run_plan(a.clone()).unwrap().tokenizer.is_none(), "--skip-tokenizer-init loads none");
        a.output.timeline_itl_thresholds = "50".into();
        assert!(run_plan(a.clone()).unwrap_err().0.contains("--timeline-itl-thresholds"));
        a.output.timeline_itl_thresholds = "10,90".into();
        a.output.plot_timeline = true;
        assert!(run_plan(a).unwrap().save_result, "--plot-timeline draws from the saved result");
    }

    #[test]
    fn input_and_output_len_set_every_dataset() {
        let mut a = default_run_args().unwrap();
        a.target.base_url = vec!["http://127.0.0.1:9".into()];
        a.target.model = Some("m".into());
        a.dataset.input_len = Some(77);
        a.dataset.output_len = Some(9);
        let p = run_plan(a).unwrap();
        assert_eq!((p.dataset.random_input_len, p.dataset.random_output_len), (77, 9));
    }

    #[test]
    fn headers_take_both_syntaxes_and_the_api_key() {
        let raw: Vec<String> = ["a:1", "b=2", "c: x=y", "d=u:v"].iter().map(|s| s.to_string()).collect();
        let h = request_headers(&raw, Some("sk-1".into())).unwrap();
        let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("a", "1"), ("b", "2"), ("c", "x=y"), ("d", "u:v"), ("Authorization", "Bearer sk-1")]);
        let own = vec!["authorization: Basic z".to_string()];
        assert_eq!(request_headers(&own, Some("sk-1".into())).unwrap().len(), 1, "a given header wins");
        assert!(request_headers(&["nothing".into()], None).is_err());
        assert!(request_headers(&[], Some(String::new())).unwrap().is_empty());
    }
}
