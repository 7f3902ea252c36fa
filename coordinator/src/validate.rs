//! `surge validate`: how fast is this client? Runs the echo server (embedded, or
//! `--target` elsewhere) through concurrency levels and prints the table users publish
//! (Concurrency | Requests/sec | Tokens/sec | p50 | p95 | p99 (ms) | Success Rate), plus
//! each agent's CPU and send lag per level; saves it as JSON and Markdown.
//! `--against result.json` turns it into a verdict: the client's validated capacity at
//! that run's concurrency divided by the request rate the run achieved (the headroom).
//!
//! Tokens/sec: with `--streaming`, streamed tokens counted from the server's `usage`.
//! Without it, requests are plain POSTs to `/echo` and tokens are estimated from the
//! bytes echoed back at 4 bytes per token (the usual rule of thumb for English text in
//! BPE vocabularies).

use crate::cli::{Cli, Command};
use crate::plan::{RunPlan, UsageError};
use crate::{Failure, exit, finish, open_session, report};
use clap::{Args, Parser};
use serde_json::{Value, json};
use std::fmt::Write;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// Bytes per token of the non-streaming estimate.
pub const BYTES_PER_TOKEN: f64 = 4.0;
/// Default minimum headroom for `--against`.
pub const DEFAULT_MIN_HEADROOM: f64 = 10.0;

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// An echo server elsewhere (default: one embedded in this process).
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Concurrency levels (default 100,250,500,750,1000,1500,2000; with --against, the
    /// run's own concurrency).
    #[arg(long, value_parser = crate::parse::level_list, value_name = "LIST")]
    pub levels: Option<crate::parse::Levels>,
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests_per_level: u64,
    /// Stream completions (tokens counted) instead of plain POSTs to /echo.
    #[arg(long)]
    pub streaming: bool,
    /// Tokens per streamed response (or words per POSTed body).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub tokens_per_request: u32,
    #[arg(long, value_name = "DIR", default_value = "surge-validate")]
    pub result_dir: PathBuf,
    /// A result file to judge: is the client's capacity far above what that run needed?
    #[arg(long, value_name = "FILE")]
    pub against: Option<PathBuf>,
    /// Headroom below which --against fails (exit code 5).
    #[arg(long, default_value_t = DEFAULT_MIN_HEADROOM, value_parser = crate::parse::positive)]
    pub min_headroom: f64,
    #[command(flatten)]
    pub fleet: crate::cli::FleetArgs,
}

/// The run being judged by `--against`.
#[derive(Debug, Clone)]
struct Against {
    path: PathBuf,
    concurrency: Option<u32>,
    achieved_rps: f64,
}

fn read_against(path: &PathBuf) -> Result<Against, UsageError> {
    let text = std::fs::read(path).map_err(|e| UsageError(format!("--against {}: {e}", path.display())))?;
    let doc: Value =
        serde_json::from_slice(&text).map_err(|e| UsageError(format!("--against {}: {e}", path.display())))?;
    let achieved_rps = doc["request_throughput"]
        .as_f64()
        .ok_or_else(|| UsageError(format!("--against {}: no request_throughput", path.display())))?;
    let concurrency = doc["max_concurrency"].as_u64().map(|c| c as u32);
    Ok(Against { path: path.clone(), concurrency, achieved_rps })
}

/// One row of the table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub concurrency: u32,
    pub requests_per_sec: f64,
    pub tokens_per_sec: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub success_rate: f64,
    pub agents: Vec<Value>,
}

fn markdown(rows: &[Row]) -> String {
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
    s.push_str("\n| Concurrency | Agent | CPU (%) | Send lag p99 (us) |\n|---|---|---|---|\n");
    for r in rows {
        for a in &r.agents {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} |",
                r.concurrency,
                a["address"].as_str().unwrap_or(""),
                a["cpu_percent"].as_f64().unwrap_or(0.0),
                a["scheduling_lag_us"]["p99"]
            );
        }
    }
    s
}

fn level_plan(a: &ValidateArgs, base: &str, level: u32) -> Result<RunPlan, UsageError> {
    let mut argv: Vec<String> =
        ["surge", "run", "--base-url", base, "--model", "surge-echo"].map(String::from).to_vec();
    let n = a.requests_per_level.to_string();
    let t = a.tokens_per_request.to_string();
    let c = level.to_string();
    if a.streaming {
        argv.extend(
            ["--backend", "openai", "--random-input-len", "16", "--random-output-len", &t, "--ignore-eos"]
                .map(String::from),
        );
    } else {
        argv.extend(["--backend", "http", "--endpoint", "/echo", "--random-input-len", &t].map(String::from));
    }
    argv.extend(
        [
            "--num-prompts",
            &n,
            "--max-concurrency",
            &c,
            "--percentile-metrics",
            "e2el",
            "--metric-percentiles",
            "50,95,99",
        ]
        .map(String::from),
    );
    argv.extend(a.fleet.to_argv());
    let cli = Cli::try_parse_from(&argv).map_err(|e| UsageError(e.to_string()))?;
    let Command::Run(run) = cli.command else { return Err(UsageError("internal: not a run".into())) };
    RunPlan::from_args(*run)
}

/// `surge validate`.
pub async fn validate_command(a: ValidateArgs) -> u8 {
    match validate(a).await {
        Ok(code) => code,
        Err(f) => {
            eprintln!("surge validate: {}", f.message);
            f.code
        }
    }
}

async fn validate(a: ValidateArgs) -> Result<u8, Failure> {
    let usage = |e: UsageError| Failure::new(exit::USAGE, e.0);
    let against = a.against.as_ref().map(read_against).transpose().map_err(usage)?;
    if !a.fleet.agents.is_empty() && a.target.is_none() {
        return Err(Failure::new(
            exit::USAGE,
            "--target URL is required with --agents (remote agents cannot reach an embedded echo server)",
        ));
    }
    let levels: Vec<u32> = match (&a.levels, &against) {
        (Some(l), _) => l.0.clone(),
        (None, Some(ag)) => vec![ag.concurrency.unwrap_or(100)],
        (None, None) => vec![100, 250, 500, 750, 1000, 1500, 2000],
    };
    // The echo server: embedded unless --target.
    let stop_echo = CancellationToken::new();
    let _stop_echo = stop_echo.clone().drop_guard();
    let base =
        match &a.target {
            Some(t) => t.trim_end_matches('/').to_string(),
            None => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| Failure::new(exit::FAILURE, format!("embedded echo server: {e}")))?;
                let addr = listener.local_addr().map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
                let s = stop_echo.clone();
                tokio::spawn(surge_echo::serve(listener, surge_echo::EchoConfig::default(), async move {
                    s.cancelled().await
                }));
                format!("http://{addr}")
            }
        };
    let first = level_plan(&a, &base, levels[0]).map_err(usage)?;
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&first, &embedded).await?;
    let mut rows = Vec::new();
    for &level in &levels {
        let plan = level_plan(&a, &base, level).map_err(usage)?;
        let outcome = match session.run(&plan, "surge-echo", None).await {
            Ok(o) => o,
            Err(e) => {
                session.close();
                return Err(Failure::new(exit::FAILURE, format!("level {level}: {e}")));
            }
        };
        let f = finish(&plan, "surge-echo", &outcome);
        let m = &f.metrics;
        let tokens_per_sec = if a.streaming {
            m.output_throughput
        } else if m.duration_s > 0.0 {
            let bytes: usize = outcome
                .rows
                .iter()
                .filter(|r| r.ok())
                .map(|r| surge_agent::dataset::prompt(&plan.dataset, r.row.index).text.len())
                .sum();
            bytes as f64 / BYTES_PER_TOKEN / m.duration_s
        } else {
            0.0
        };
        let total = (m.completed + m.failed).max(1);
        rows.push(Row {
            concurrency: level,
            requests_per_sec: m.request_throughput,
            tokens_per_sec,
            p50_ms: m.e2el.percentile_ms(50.0),
            p95_ms: m.e2el.percentile_ms(95.0),
            p99_ms: m.e2el.percentile_ms(99.0),
            success_rate: m.completed as f64 / total as f64,
            agents: f.client.agents.iter().map(|x| serde_json::to_value(x).unwrap_or(Value::Null)).collect(),
        });
    }
    session.close();
    let md = markdown(&rows);
    print!("{md}");
    let mut doc = json!({
        "target": a.target.clone().unwrap_or_else(|| "embedded echo server".into()),
        "streaming": a.streaming,
        "requests_per_level": a.requests_per_level,
        "tokens_per_request": a.tokens_per_request,
        "bytes_per_token_estimate": if a.streaming { Value::Null } else { json!(BYTES_PER_TOKEN) },
        "rows": rows,
        "saved_at_utc": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    let mut code = exit::OK;
    if let Some(ag) = &against {
        let c = ag.concurrency.unwrap_or(levels[0]);
        // Capacity at c: the smallest validated level at or above c, else the highest.
        let row = rows.iter().find(|r| r.concurrency >= c).or(rows.last()).expect("at least one level");
        let headroom = if ag.achieved_rps > 0.0 { row.requests_per_sec / ag.achieved_rps } else { f64::INFINITY };
        let pass = headroom >= a.min_headroom;
        println!(
            "\nverdict for {}: the client sustains {:.0} req/s at concurrency {}; the run achieved {:.2} req/s at concurrency {c}: headroom {:.1}x (minimum {:.1}x): {}",
            ag.path.display(),
            row.requests_per_sec,
            row.concurrency,
            ag.achieved_rps,
            headroom,
            a.min_headroom,
            if pass { "PASS, the client was not the bottleneck" } else { "FAIL, the client may have limited that run" }
        );
        doc["against"] = json!({
            "file": ag.path.display().to_string(), "run_concurrency": c, "run_request_throughput": ag.achieved_rps,
            "validated_concurrency": row.concurrency, "validated_request_throughput": row.requests_per_sec,
            "headroom": headroom, "min_headroom": a.min_headroom, "pass": pass,
        });
        if !pass {
            code = exit::HEADROOM;
        }
    }
    std::fs::create_dir_all(&a.result_dir)
        .map_err(|e| Failure::new(exit::FAILURE, format!("--result-dir {}: {e}", a.result_dir.display())))?;
    report::write(&a.result_dir.join("validate.json"), &doc).map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    std::fs::write(a.result_dir.join("validate.md"), &md).map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    eprintln!("surge validate: saved {}/validate.json and validate.md", a.result_dir.display());
    Ok(code)
}
