//! `surge validate`: how fast is this client? Runs the echo server (embedded, or
//! `--target` elsewhere) through concurrency levels and produces the table users publish
//! (Concurrency | Requests/sec | Tokens/sec | p50 | p95 | p99 (ms) | Success Rate), plus
//! each agent's CPU and send lag per level. `--against result.json` turns it into a
//! verdict: the client's validated capacity at that run's concurrency divided by the
//! request rate the run achieved (the headroom).
//!
//! Tokens/sec: with `--streaming`, streamed tokens counted from the server's `usage`.
//! Without it, requests are plain POSTs to `/echo` and tokens are estimated from the
//! bytes echoed back at [`BYTES_PER_TOKEN`].

use super::{open_session, run_watched};
use crate::analysis::monitor::Monitor;
use crate::exit::{self, Failure};
use crate::fleet::outcome::{GlobalRow, Halt, RunStatus};
use crate::output::Outputs;
use crate::output::result::{Headroom, JudgedRun, RunResult, ValidationResult, ValidationRow, saved_at};
use crate::plan::RunPlan;
use crate::plan::validate::{BYTES_PER_TOKEN, DEFAULT_LEVELS, ValidatePlan};
use std::path::Path;
use tokio_util::sync::CancellationToken;

fn read_against(path: &Path) -> Result<JudgedRun, Failure> {
    let usage = |m: String| Failure::new(exit::USAGE, format!("--against {}: {m}", path.display()));
    let text = std::fs::read(path).map_err(|e| usage(e.to_string()))?;
    serde_json::from_slice(&text).map_err(|e| usage(e.to_string()))
}

/// The bytes the echo sent back on a level's successes (their prompts'), counted as the
/// rows arrive rather than kept.
struct Echoed<'p> {
    plan: &'p RunPlan,
    bytes: usize,
}

impl Monitor for Echoed<'_> {
    fn rows(&mut self, rows: &[&GlobalRow]) {
        for r in rows.iter().filter(|r| r.ok()) {
            self.bytes += surge_core::data::dataset::prompt(&self.plan.dataset, r.row.index).text.len();
        }
    }
    fn halt(&mut self) -> Option<Halt> {
        None
    }
}

/// One row of the table from one level's run (`echoed`: the bytes echoed back).
fn row(plan: &ValidatePlan, level: u32, r: &RunResult, echoed: usize) -> ValidationRow {
    let tokens_per_sec = if plan.streaming {
        r.output_throughput
    } else if r.duration > 0.0 {
        echoed as f64 / BYTES_PER_TOKEN / r.duration
    } else {
        0.0
    };
    let e2el = r.latency.get("e2el");
    let at = |q: f64| e2el.and_then(|m| m.at(q)).unwrap_or(0.0);
    let total = (r.completed + r.failed).max(1);
    ValidationRow {
        concurrency: level,
        requests_per_sec: r.request_throughput,
        tokens_per_sec,
        p50_ms: e2el.map_or(0.0, |m| m.median_ms),
        p95_ms: at(95.0),
        p99_ms: at(99.0),
        success_rate: r.completed as f64 / total as f64,
        client_bound: r.client.verdict.client_bound,
        client_bound_reasons: r.client.verdict.reasons.clone(),
        agents: r.client.agents.clone(),
    }
}

/// `surge validate`.
pub async fn validate_command(plan: ValidatePlan) -> u8 {
    let mut outputs = Outputs::standard("validate", false);
    let res = validate(&plan, &mut outputs).await;
    outputs.stop(None).await;
    match res {
        Ok(code) => code,
        Err(f) => {
            outputs.notice(&f.message);
            f.code
        }
    }
}

/// The levels; the caller closes `outputs` when it returns.
async fn validate(plan: &ValidatePlan, outputs: &mut Outputs) -> Result<u8, Failure> {
    let against = plan.against.as_deref().map(read_against).transpose()?;
    let levels: Vec<u32> = match (&plan.levels, &against) {
        (Some(l), _) => l.clone(),
        (None, Some(a)) => vec![a.max_concurrency.unwrap_or(100)],
        (None, None) => DEFAULT_LEVELS.to_vec(),
    };
    // The echo server: embedded unless --target.
    let stop_echo = CancellationToken::new();
    let _stop_echo = stop_echo.clone().drop_guard();
    let base = match &plan.target {
        Some(t) => t.trim_end_matches('/').to_string(),
        None => {
            let listener = super::listen_deep(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
                .map_err(|e| Failure::run("embedded echo server", &e))?;
            let addr = listener.local_addr().map_err(|e| Failure::run("embedded echo server", &e))?;
            let s = stop_echo.clone();
            // HTTP/3: HTTPS and QUIC on the same port number, its own certificate.
            let h3 = plan.base.http_version == surge_proto::HttpChoice::Http3;
            let config =
                surge_echo::EchoConfig { itl_ms: plan.itl_ms, tls_self_signed: h3, http3: h3, ..Default::default() };
            let ready = surge_echo::prepare(listener, config).map_err(|e| Failure::run("embedded echo server", &e))?;
            let url = ready.url().unwrap_or_else(|_| format!("http://{addr}"));
            tokio::spawn(ready.run(async move { s.cancelled().await }));
            url
        }
    };
    let embedded = CancellationToken::new();
    let _stop_embedded = embedded.clone().drop_guard();
    let mut session = open_session(&plan.at(&base, levels[0]), &embedded, false, outputs).await?;
    let mut rows = Vec::new();
    let mut stopped = None;
    for &level in &levels {
        let p = plan.at(&base, level);
        let label = format!("level {level}");
        let mut echoed = Echoed { plan: &p, bytes: 0 };
        let watch = (!plan.streaming).then_some(&mut echoed as &mut dyn Monitor);
        let res = run_watched(&mut session, outputs, &p, "surge-echo", &label, false, watch).await;
        let (record, _, _) = match res {
            Ok(r) => r,
            Err(f) => {
                session.close();
                return Err(Failure::new(f.code, format!("level {level}: {}", f.message)));
            }
        };
        rows.push(row(plan, level, &record.result, echoed.bytes));
        // Ctrl-C / SIGTERM (or a lost agent): keep what was measured, run no further level.
        if record.status != RunStatus::Complete {
            stopped = Some(record.status.clone());
            outputs
                .notice(&format!("level {level} ended {}; the levels after it were not run", record.status.as_str()));
            break;
        }
    }
    session.close();
    outputs.stop(None).await;
    let mut code = stopped.as_ref().map_or(exit::OK, exit::of_status);
    let against = against.zip(plan.against.as_ref()).map(|(a, path)| {
        let c = a.max_concurrency.unwrap_or(levels[0]);
        // Capacity at c: the smallest validated level at or above c, else the highest.
        let row = rows.iter().find(|r| r.concurrency >= c).or(rows.last()).expect("at least one level");
        let headroom =
            if a.request_throughput > 0.0 { row.requests_per_sec / a.request_throughput } else { f64::INFINITY };
        let pass = headroom >= plan.min_headroom;
        if !pass {
            code = exit::HEADROOM;
        }
        Headroom {
            file: path.display().to_string(),
            run_concurrency: c,
            run_request_throughput: a.request_throughput,
            validated_concurrency: row.concurrency,
            validated_request_throughput: row.requests_per_sec,
            headroom,
            min_headroom: plan.min_headroom,
            pass,
        }
    });
    let v = ValidationResult {
        target: plan.target.clone().unwrap_or_else(|| "embedded echo server".into()),
        streaming: plan.streaming,
        requests_per_level: plan.requests_per_level,
        tokens_per_request: plan.tokens_per_request,
        bytes_per_token_estimate: (!plan.streaming).then_some(BYTES_PER_TOKEN),
        rows,
        saved_at_utc: saved_at(chrono::Utc::now()),
        against,
        stopped: stopped.as_ref().map(crate::output::result::RunState::of),
    };
    outputs.validation(&v, &plan.result_dir).map_err(|e| Failure::run("", &e))?;
    outputs.notice(&format!("saved {}/validate.json and validate.md", plan.result_dir.display()));
    Ok(code)
}
