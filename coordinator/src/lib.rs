//! surge's coordinator: the `surge` command line, planning, sharding a run across agents,
//! clock offsets, the exact merge of every agent's rows, the statistics and reports, and
//! the certificates for coordinator <-> agent mutual TLS.
//!
//! A local run is the same code as a distributed one: with no `--agents`, an agent is
//! started in-process behind the same gRPC service and the run goes through it.

pub mod certs;
pub mod cli;
pub mod clock;
pub mod dataset_files;
pub mod dataset_plan;
pub mod exit;
pub mod fleet;
pub mod knee;
pub mod matrix;
pub mod metrics;
pub mod parse;
pub mod plan;
pub mod ready;
pub mod repeat;
pub mod report;
pub mod run;
pub mod split;
pub mod stats;
pub mod summary;
pub mod sweep;
pub mod token_source;
pub mod validate;

#[cfg(test)]
mod golden_tests;

use plan::{Agents, RunPlan};
use run::RunStatus;
use tokio_util::sync::CancellationToken;

/// A failure before or between runs, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

/// Readiness wait, then the model name requests carry (flag, or the server's first).
pub async fn resolve_model(plan: &RunPlan) -> Result<String, Failure> {
    if let Some(t) = plan.ready_timeout {
        ready::wait_ready(&plan.base_url, t)
            .await
            .map_err(|e| Failure::new(exit::FAILURE, format!("--ready-timeout: {e}")))?;
    }
    match (&plan.served_model_name, &plan.model, plan.backend) {
        (Some(m), _, _) | (None, Some(m), _) => Ok(m.clone()),
        (None, None, surge_proto::Backend::Http) => Ok("none".to_string()),
        (None, None, _) => ready::first_model(&plan.base_url).await.map_err(|e| {
            Failure::new(exit::FAILURE, format!("--model not given and the server's model list is unavailable: {e}"))
        }),
    }
}

/// Sessions with the plan's agents (or an embedded one, stopped with `embedded`).
pub async fn open_session(plan: &RunPlan, embedded: &CancellationToken) -> Result<run::Session, Failure> {
    let fleet = match &plan.agents {
        Agents::Embedded => {
            let addr = surge_agent::daemon::spawn_embedded(embedded.clone())
                .await
                .map_err(|e| Failure::new(exit::FAILURE, format!("cannot start the embedded agent: {e}")))?;
            fleet::Fleet::connect(&[addr.to_string()], None).await
        }
        Agents::Remote { addrs, tls } => fleet::Fleet::connect(addrs, tls.as_ref()).await,
    };
    let fleet = fleet.map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    run::Session::open(fleet, plan).await.map_err(|e| Failure::new(exit::FAILURE, e.to_string()))
}

/// The exit code of a finished run's status (and its message on stderr).
pub fn status_code(status: &RunStatus) -> u8 {
    match status {
        RunStatus::Complete => exit::OK,
        RunStatus::Invalid { lost } => {
            eprintln!("surge: run invalid: agent(s) {} lost (exit code {})", lost.join(", "), exit::AGENT_LOST);
            exit::AGENT_LOST
        }
        RunStatus::Partial { lost } => {
            eprintln!("surge: run partial: agent(s) {} lost (exit code {})", lost.join(", "), exit::PARTIAL);
            exit::PARTIAL
        }
        RunStatus::Interrupted => exit::INTERRUPTED,
    }
}

/// Metrics, client verdict and result document of a finished run.
pub struct Finished {
    pub metrics: metrics::Metrics,
    pub client: report::ClientBlock,
    pub doc: serde_json::Value,
}

pub fn finish(plan: &RunPlan, model: &str, outcome: &run::Outcome) -> Finished {
    let metrics = metrics::compute(&outcome.rows, &plan.slo);
    let client = report::client_block(plan, &metrics, outcome);
    let doc = report::result_json(plan, model, &metrics, outcome, &client);
    Finished { metrics, client, doc }
}

/// `surge run`: returns the process exit code.
pub async fn run_command(plan: RunPlan) -> u8 {
    match run_once(plan).await {
        Ok(code) => code,
        Err(f) => {
            eprintln!("surge: {}", f.message);
            f.code
        }
    }
}

async fn run_once(plan: RunPlan) -> Result<u8, Failure> {
    let model = resolve_model(&plan).await?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&plan, &embedded).await?;
    let outcome = session.run(&plan, &model, None).await;
    session.close();
    let outcome = outcome.map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    let f = finish(&plan, &model, &outcome);
    print!("{}", summary::render(&plan, &f.metrics, &outcome, &f.client));
    if plan.save_result {
        let path = report::result_path(&plan, &model, &outcome);
        report::write(&path, &f.doc)
            .map_err(|e| Failure::new(exit::FAILURE, format!("cannot write the result {}: {e}", path.display())))?;
        eprintln!("surge: result saved to {}", path.display());
    }
    Ok(status_code(&outcome.status))
}

/// `surge echo`: serves until Ctrl-C / SIGTERM.
pub async fn echo_command(args: surge_echo::EchoArgs) -> u8 {
    let cfg = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("surge echo: {e}");
            return exit::USAGE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(cfg.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("surge echo: --listen {}: {e}", cfg.listen);
            return exit::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(a) => {
            // A closed stdout must not turn this line into a panic.
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "surge echo listening on http://{a}");
        }
        Err(e) => eprintln!("surge echo: {e}"),
    }
    match surge_echo::serve(listener, cfg, shutdown_signal()).await {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("surge echo: {e}");
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

/// `surge demo`: the echo server on a loopback port and a short run against it.
pub async fn demo_command() -> u8 {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("surge demo: {e}");
            return exit::FAILURE;
        }
    };
    let Ok(addr) = listener.local_addr() else { return exit::FAILURE };
    let cfg = surge_echo::EchoConfig { ttft_ms: 50.0, itl_ms: 10.0, ..Default::default() };
    let stop = CancellationToken::new();
    let server_stop = stop.clone();
    tokio::spawn(async move { surge_echo::serve(listener, cfg, async move { server_stop.cancelled().await }).await });
    let base = format!("http://{addr}");
    println!(
        "surge demo: echo server at {base} (TTFT 50 ms, ITL 10 ms); 500 requests, 64 in flight, 128 in / 32 out\n"
    );
    use clap::Parser;
    let cli = cli::Cli::parse_from([
        "surge",
        "run",
        "--base-url",
        &base,
        "--model",
        "surge-echo",
        "--random-input-len",
        "128",
        "--random-output-len",
        "32",
        "--num-prompts",
        "500",
        "--max-concurrency",
        "64",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
    ]);
    let cli::Command::Run(args) = cli.command else { return exit::FAILURE };
    let code = match RunPlan::from_args(*args) {
        Ok(plan) => run_command(plan).await,
        Err(e) => {
            eprintln!("surge demo: {e}");
            exit::USAGE
        }
    };
    stop.cancel();
    code
}
