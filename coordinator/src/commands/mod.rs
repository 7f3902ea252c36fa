//! The drivers: each command runs its plan on a fleet session and hands every typed
//! result to its outputs; none prints or exits. `run` is here; `sweep`, `matrix` and
//! `validate` have their own files; `echo` and `demo` serve and exercise the echo server.

pub mod capacity;
pub mod compare;
pub mod compare_capacity;
pub mod dry_run;
pub mod fleet;
#[cfg(test)]
mod golden_tests;
pub mod matrix;
pub mod report;
pub mod resume;
pub mod sweep;
pub mod validate;

use crate::analysis::aggregate::Aggregator;
use crate::analysis::metrics::{GlobalRow, Metrics};
use crate::analysis::monitor::Monitor as _;
use crate::analysis::verdict;
use crate::cli::build;
use crate::exit::{self, Failure};
use crate::fleet::Fleet;
use crate::fleet::outcome::Outcome;
use crate::fleet::session::{Observer, RunError, Session};
use crate::output::detail_spill::DetailSpill;
use crate::output::result::{RunResult, saved_at};
use crate::output::spill::Spill;
use crate::output::summary::SummaryView;
use crate::output::terminal;
use crate::output::{LevelStart, Outputs, RunRecord, build as result_build};
use crate::plan::{Agents, RunPlan};
use crate::target::ready;
use tokio_util::sync::CancellationToken;

/// Readiness wait, then the model name requests carry (flag, or the server's first).
pub async fn resolve_model(plan: &RunPlan) -> Result<String, Failure> {
    let tls = plan.target_tls.client();
    if let Some(t) = plan.ready_timeout {
        // Every endpoint (D69), each within the timeout.
        for e in &plan.endpoints.list {
            ready::wait_ready(&tls, &e.url, t)
                .await
                .map_err(|e| Failure::new(exit::FAILURE, format!("--ready-timeout: {e}")))?;
        }
    }
    match (&plan.served_model_name, &plan.model, plan.backend) {
        (Some(m), _, _) | (None, Some(m), _) => Ok(m.clone()),
        (None, None, surge_proto::Backend::Http) => Ok("none".to_string()),
        (None, None, _) => ready::first_model(&tls, &plan.base_url).await.map_err(|e| {
            Failure::new(exit::FAILURE, format!("--model not given and the server's model list is unavailable: {e}"))
        }),
    }
}

/// Sessions with the plan's agents (or an embedded one, stopped with `embedded`), with
/// the live outputs the plan asks for (`--prometheus-listen`, `--otlp-endpoint`) opened
/// in `outputs`, which the command closes with [`Outputs::stop`].
/// With remote agents and `table`, the fleet check's table is printed first (failing lines
/// are the run's own refusals to come, so it goes on).
pub async fn open_session(
    plan: &RunPlan,
    embedded: &CancellationToken,
    table: bool,
    outputs: &mut Outputs,
) -> Result<Session, Failure> {
    outputs.open(plan).await.map_err(|e| {
        if e.usage { Failure::new(exit::USAGE, e.to_string()) } else { Failure::new(exit::FAILURE, e.to_string()) }
    })?;
    open_fleet(plan, embedded, table).await
}

/// The session with the plan's agents, without the live outputs (a command that sends no
/// load, such as `surge fleet check`, starts none).
pub async fn open_fleet(plan: &RunPlan, embedded: &CancellationToken, table: bool) -> Result<Session, Failure> {
    let fleet = match &plan.agents {
        Agents::Embedded => crate::fleet::local::embedded(embedded.clone()).await,
        Agents::Remote { addrs, tls, wait } => {
            Fleet::connect(addrs, tls.as_ref(), *wait, &mut |m| terminal::say("", m)).await
        }
    };
    let fleet = fleet.map_err(|e| Failure::run("", &e))?;
    let mut session = Session::open(fleet, plan, &mut Said).await.map_err(|e| run_failure(plan, &e))?;
    if table && matches!(plan.agents, Agents::Remote { .. }) {
        let checked = crate::fleet::check::check(&mut session, plan, true).await.map_err(|e| run_failure(plan, &e))?;
        crate::output::terminal::out(&crate::output::fleet::table(&checked, session.missing()));
    }
    Ok(session)
}

/// Says a session's notices on the terminal before the run's outputs hear them.
struct Said;
impl Observer for Said {
    fn notice(&mut self, message: &str) {
        terminal::say("", message);
    }
}

/// A run that could not happen. With the embedded agent its address is noise: the
/// message is the agent's own.
fn run_failure(plan: &RunPlan, e: &RunError) -> Failure {
    match (e, &plan.agents) {
        (RunError::Agent { message, .. }, Agents::Embedded) => Failure::new(exit::FAILURE, message.clone()),
        _ => Failure::run("", e),
    }
}

/// The typed result of a finished run.
pub fn finish(plan: &RunPlan, model: &str, outcome: &Outcome, m: &Metrics) -> RunResult {
    let v = verdict::judge(plan, m, &outcome.agents);
    let client = result_build::client_block(plan, outcome, m, v);
    result_build::run_result(plan, model, m, outcome, client, saved_at(chrono::Utc::now()))
}

/// A run's observer: folds its rows as they arrive and hands them, its health and its
/// progress to the command's outputs and the run's own.
struct Watch<'a> {
    agg: Aggregator,
    /// The command's outputs.
    outputs: &'a mut Outputs,
    /// This run's outputs (`--save-rows`).
    own: Outputs,
    /// Requests in flight per agent, from their health reports.
    in_flight: Vec<u32>,
    /// The run's `--duration`, for "elapsed of total".
    duration: Option<f64>,
    /// Agent addresses, the live metrics' labels.
    agents: Vec<String>,
    /// The model requested, for the request spans.
    model: String,
    /// How the terminal names the run, and how many requests it sends when known.
    label: String,
    total: Option<u64>,
    /// vLLM's `latencies`/`queue_times`, spilled to disk by request index.
    spill: Option<Spill>,
    /// `--save-detailed`'s arrays, spilled to disk as rows arrive.
    detail: Option<DetailSpill>,
    detail_error: Option<crate::output::OutputError>,
    /// `--precision`: ends the run once its percentiles are precise enough.
    precision: Option<crate::analysis::precision::PrecisionMonitor>,
    /// The command's own watcher (a capacity level's).
    monitor: Option<&'a mut (dyn crate::analysis::monitor::Monitor + 'a)>,
}

impl Observer for Watch<'_> {
    fn halt(&mut self) -> Option<crate::fleet::outcome::Halt> {
        self.precision.as_mut().and_then(|m| m.halt()).or_else(|| self.monitor.as_mut().and_then(|m| m.halt()))
    }
    fn rows(&mut self, rows: &[GlobalRow]) {
        // Probes (--probe-request-rate) are reported apart from the load.
        let (probes, rows): (Vec<&GlobalRow>, Vec<&GlobalRow>) = rows.iter().partition(|r| r.row.probe);
        for p in probes {
            self.agg.probe(p);
        }
        self.outputs.rows(&self.agents, &rows);
        self.own.rows(&self.agents, &rows);
        if let Some(m) = &mut self.precision {
            m.rows(&rows);
        }
        if let Some(m) = &mut self.monitor {
            m.rows(&rows);
        }
        for r in rows {
            self.agg.add(r);
            if let Some(d) = &mut self.detail
                && let Err(e) = d.write(r)
            {
                self.detail = None;
                self.detail_error =
                    Some(crate::output::OutputError::Write { path: "the --save-detailed spill".into(), source: e });
            }
            if let Some(s) = &mut self.spill
                && let Err(e) = s.write(r)
            {
                tracing::warn!("latencies/queue_times left out of the result: cannot write their spill file: {e}");
                self.spill = None;
            }
        }
    }
    fn health(&mut self, agent: usize, h: &surge_proto::Health, t_s: f64) {
        self.agg.health(agent, h, t_s);
        self.outputs.health(self.agents.get(agent).map_or("", String::as_str), h);
        if self.in_flight.len() <= agent {
            self.in_flight.resize(agent + 1, 0);
        }
        self.in_flight[agent] = h.in_flight;
        if let Some((req_s, tok_s, p99, errors)) = self.agg.recent() {
            let in_flight: u64 = self.in_flight.iter().map(|&n| u64::from(n)).sum();
            let mut line = format!(
                "{req_s:.0} req/s  {tok_s:.0} tok/s  {in_flight} in flight  TTFT p99 {p99:.1} ms  {errors} errors"
            );
            if let Some(d) = self.duration {
                line.push_str(&format!("  {:.0}/{d:.0} s", t_s.min(d)));
            }
            self.outputs.status(&line);
        }
    }
    fn progress(&mut self, finished: u64) {
        self.outputs.progress(finished);
    }
    fn notice(&mut self, message: &str) {
        self.outputs.notice(message);
    }
    fn server(&mut self, scrape: &crate::target::scrape::ServerScrape) {
        self.agg.server(scrape);
    }
    fn gpu(&mut self, scrape: &crate::target::gpu::GpuScrape) {
        self.agg.gpu(scrape);
    }
    fn started(&mut self, run_id: u64, start_unix_ns: i64, slices: &[(surge_core::data::share::Stripe, u64)]) {
        self.agg.started(slices);
        let s = LevelStart {
            run_id,
            start_unix_ns,
            model: &self.model,
            agents: &self.agents,
            label: &self.label,
            total: self.total,
        };
        self.outputs.level_start(&s);
        self.own.level_start(&s);
    }
}

/// One run of `plan` on `session`, named `label` on the terminal: its record for the
/// outputs, what the fleet reported, and the merged metrics (with every row when
/// `keep_rows`).
pub async fn run_on(
    session: &mut Session,
    outputs: &mut Outputs,
    plan: &RunPlan,
    model: &str,
    label: &str,
    keep_rows: bool,
) -> Result<(RunRecord, Outcome, Metrics), Failure> {
    run_watched(session, outputs, plan, model, label, keep_rows, None).await
}

/// [`run_on`], with `monitor` seeing the load's rows as they arrive and able to end the run.
pub async fn run_watched<'w>(
    session: &mut Session,
    outputs: &'w mut Outputs,
    plan: &RunPlan,
    model: &str,
    label: &str,
    keep_rows: bool,
    monitor: Option<&'w mut (dyn crate::analysis::monitor::Monitor + 'w)>,
) -> Result<(RunRecord, Outcome, Metrics), Failure> {
    // --save-detailed: the arrays go to a spill as rows arrive, not into memory (when the
    // spill cannot be made, the rows are kept as before).
    let detail = (plan.save_detailed && !keep_rows)
        .then(DetailSpill::create)
        .and_then(|d| d.map_err(|e| tracing::warn!("--save-detailed: no spill file, rows kept in memory: {e}")).ok());
    let wanted = Aggregator::wanted(plan);
    let agg = Aggregator::new(plan.slo.clone(), keep_rows || (plan.save_detailed && detail.is_none()), wanted);
    let own = Outputs::of_run(plan).map_err(|(flag, e)| Failure::run(flag, &e))?;
    // vLLM's per-request arrays for a run of N prompts (D3; a --duration run has them in
    // --save-detailed's rows instead).
    // Not for conversations: their rows are turns, indexed by session and turn (D41).
    // Only when the result is written: they are read nowhere else.
    let counted = plan.num_prompts != crate::plan::UNBOUNDED && plan.multi_turn.is_none();
    let spill = (counted && plan.save_result)
        .then(|| Spill::create(plan.num_prompts))
        .and_then(|s| s.map_err(|e| tracing::warn!("latencies/queue_times left out: no spill file: {e}")).ok());
    let mut watch = Watch {
        agg,
        outputs,
        own,
        in_flight: Vec::new(),
        duration: plan.duration.map(|d| d.as_secs_f64()),
        agents: session.agents.iter().map(|a| a.addr.clone()).collect(),
        model: model.to_string(),
        label: label.to_string(),
        total: counted.then_some(plan.num_prompts),
        spill,
        detail,
        detail_error: None,
        precision: crate::analysis::precision::PrecisionMonitor::new(&plan.precision, plan.confidence),
        monitor,
    };
    let outcome = session.run(plan, model, &mut watch).await.map_err(|e| run_failure(plan, &e))?;
    let m = watch.agg.finish();
    let mut result = finish(plan, model, &outcome, &m);
    // The run's own outputs end first: a rows file that cannot be finished fails the run.
    let mut own = watch.own;
    own.level_end(&result);
    let failed = own.take_failure();
    // A compressed rows file ends its frame when it closes.
    drop(own);
    if let Some((flag, e)) = failed {
        watch.outputs.level_end(&result);
        return Err(Failure::run(flag, &e));
    }
    if let Some(d) = watch.detail.take() {
        let arrays = d.arrays(plan.num_prompts == crate::plan::UNBOUNDED).map_err(|e| {
            Failure::run("--save-detailed", &crate::output::OutputError::Write { path: "its spill".into(), source: e })
        })?;
        result.detailed = None;
        result.detailed_spill = Some(arrays);
    } else if let Some(e) = watch.detail_error.take() {
        return Err(Failure::run("--save-detailed", &e));
    }
    result.vllm_arrays = watch.spill.take().and_then(|s| {
        s.arrays()
            .map_err(|e| tracing::warn!("latencies/queue_times left out: cannot write their spill file: {e}"))
            .ok()
    });
    watch.outputs.level_end(&result);
    let record = RunRecord {
        result,
        status: outcome.status.clone(),
        view: SummaryView::of(plan),
        file: None,
        heading: None,
        append: plan.append_result,
    };
    Ok((record, outcome, m))
}

/// One `warning: --X has no effect with --Y` line per flag the run will not read (D44),
/// before any load.
pub(crate) fn warn_ignored(plan: &RunPlan, outputs: &mut Outputs) {
    for w in &plan.ignored_flags {
        outputs.notice(&format!("warning: {w}"));
    }
}

/// `surge run`: returns the process exit code.
pub async fn run_command(plan: RunPlan) -> u8 {
    let mut outputs = Outputs::standard("", true);
    warn_ignored(&plan, &mut outputs);
    if plan.dry_run {
        return dry_run::dry_run_command(&plan, &mut outputs).await;
    }
    let res = run_once(plan, &mut outputs).await;
    outputs.stop(None).await;
    match res {
        Ok(code) => code,
        Err(f) => {
            outputs.notice(&f.message);
            f.code
        }
    }
}

/// The run; the caller closes `outputs` when it returns.
async fn run_once(plan: RunPlan, outputs: &mut Outputs) -> Result<u8, Failure> {
    let model = resolve_model(&plan).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&plan, &embedded, true, outputs).await?;
    let res = run_on(&mut session, outputs, &plan, &model, "", false).await;
    session.close();
    let (mut record, outcome, _) = res?;
    if plan.save_result {
        record.file = Some(crate::output::files::result_path(&plan, &model, outcome.started_at));
    }
    outputs.run(&record).map_err(|e| Failure::run("", &e))?;
    if let Some(path) = &record.file {
        outputs.notice(&format!("result saved to {}", path.display()));
        if plan.plot_timeline {
            plot_timeline(outputs, path, &path.with_extension("timeline.html"), plan.cost_per_hour);
        }
    }
    // The summary and the file first: the live endpoint then lingers with the final values.
    outputs.stop(Some(&record.result)).await;
    // The reason for a non-zero code is the summary's last line.
    let r = &record.result;
    match exit::of_run(&record.status, r.completed, &r.errors_by_kind, plan.max_failure_rate).0 {
        exit::OK => Ok(exit::of_anomalies(plan.fail_on_anomaly, r.anomalies.requests, &r.anomalies.by_kind).0),
        code => Ok(code),
    }
}

/// vLLM's `--plot-timeline`: surge's HTML report of `input` (a result file, or a sweep or
/// matrix directory) written at `out`; a failure is a warning, not the run's.
fn plot_timeline(outputs: &mut Outputs, input: &std::path::Path, out: &std::path::Path, cost_per_hour: Option<f64>) {
    let opts = crate::output::report::Options { cost_per_hour };
    let written = report::load_all(&[input.to_path_buf()])
        .and_then(|inputs| report::write(&report::build(&inputs, opts, Vec::new()), out, None));
    match written {
        Ok(_) => outputs.notice(&format!("report saved to {}", out.display())),
        Err(e) => outputs.notice(&format!("--plot-timeline: no report: {e}")),
    }
}

/// A listener whose accept queue holds [`ECHO_BACKLOG`] connections. With tokio's 1,024,
/// 2,000 connections opened at once by agents overflowed it on a 2-core host (the
/// kernel's ListenOverflows), and each dropped SYN cost the client the kernel's 1 s
/// retransmission timeout: a level's Prepare took 2 s, sometimes over 5 s. The kernel
/// caps the backlog at `net.core.somaxconn`.
pub(crate) fn listen_deep(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ECHO_BACKLOG)
}

/// The echo's accept queue: room for every connection a 4,096-in-flight level opens.
const ECHO_BACKLOG: u32 = 4096;

/// `surge echo`: serves until Ctrl-C / SIGTERM.
pub async fn echo_command(args: surge_echo::EchoArgs) -> u8 {
    let cfg = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            terminal::say("echo", &e.to_string());
            return exit::USAGE;
        }
    };
    let listener = match listen_deep(cfg.listen) {
        Ok(l) => l,
        Err(e) => {
            terminal::say("echo", &format!("--listen {}: {e}", cfg.listen));
            return exit::FAILURE;
        }
    };
    let served = match surge_echo::prepare(listener, cfg) {
        Ok(ready) => {
            match ready.url() {
                Ok(url) if ready.http3() => {
                    terminal::out(&format!("surge echo listening on {url} (and HTTP/3 on the same UDP port)\n"))
                }
                Ok(url) => terminal::out(&format!("surge echo listening on {url}\n")),
                Err(e) => terminal::say("echo", &e.to_string()),
            }
            ready.run(shutdown_signal()).await
        }
        Err(e) => Err(e),
    };
    match served {
        Ok(()) => exit::OK,
        Err(e) => {
            terminal::say("echo", &e.to_string());
            // A configuration the server refused (e.g. an unreadable --tokenizer).
            if e.kind() == std::io::ErrorKind::InvalidInput { exit::USAGE } else { exit::FAILURE }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// `surge demo`'s run: 500 requests, 64 in flight, 128 in / 32 out, against `base`.
fn demo_plan(base: &str) -> Result<RunPlan, Failure> {
    let mut a = build::default_run_args()?;
    a.target.base_url = vec![base.to_string()];
    a.target.model = Some("surge-echo".into());
    a.dataset.random_input_len = 128;
    a.dataset.random_output_len = 32;
    a.load.num_prompts = Some(500);
    a.load.max_concurrency = Some(64);
    a.sampling.ignore_eos = true;
    a.output.percentile_metrics =
        crate::cli::parse::metric_list("ttft,tpot,itl,e2el").map_err(crate::cli::UsageError)?;
    a.output.metric_percentiles = crate::cli::parse::percentile_list("50,90,99").map_err(crate::cli::UsageError)?;
    Ok(build::run_plan(a)?)
}

/// `surge demo`: the echo server on a loopback port and a short run against it.
pub async fn demo_command() -> u8 {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => {
            terminal::say("demo", &e.to_string());
            return exit::FAILURE;
        }
    };
    let Ok(addr) = listener.local_addr() else { return exit::FAILURE };
    // vLLM's metric names, so the demo shows the server's view beside the client's.
    let cfg = surge_echo::EchoConfig {
        ttft_ms: 50.0,
        itl_ms: 10.0,
        metrics_flavor: surge_echo::MetricsFlavor::Vllm,
        ..Default::default()
    };
    let stop = CancellationToken::new();
    let server_stop = stop.clone();
    tokio::spawn(async move { surge_echo::serve(listener, cfg, async move { server_stop.cancelled().await }).await });
    let base = format!("http://{addr}");
    terminal::out(&format!(
        "surge demo: echo server at {base} (TTFT 50 ms, ITL 10 ms); 500 requests, 64 in flight, 128 in / 32 out\n\n"
    ));
    let code = match demo_plan(&base) {
        Ok(plan) => run_command(plan).await,
        Err(f) => {
            terminal::say("demo", &f.message);
            f.code
        }
    };
    stop.cancel();
    code
}
