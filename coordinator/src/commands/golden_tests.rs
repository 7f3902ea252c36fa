//! Golden tests: fixed rows through the whole result path (metrics, client verdict,
//! result document, terminal summary), compared with files committed from the
//! behaviour users already rely on. `SURGE_BLESS=1 cargo test -p surge-coordinator golden`
//! rewrites them (review the diff before committing).

use crate::cli::{Cli, Command, build};
use crate::fleet::outcome::{AgentReport, GlobalRow, Outcome, RunStatus};
use crate::output::result::RunResult;
use crate::output::summary::{SummaryView, summary};
use crate::plan::RunPlan;
use clap::Parser;
use std::path::PathBuf;
use surge_proto::{Done, ErrorKind, Health, HelloReply, Row, TokenSource};

fn plan(extra: &[&str]) -> RunPlan {
    let mut argv = vec!["surge", "run", "--base-url", "http://127.0.0.1:9", "--model", "org/golden-model"];
    argv.extend_from_slice(extra);
    let Command::Run(args) = Cli::try_parse_from(argv).expect("flags parse").command else { panic!("not a run") };
    build::run_plan(*args).expect("plan")
}

fn row(index: u64, start_us: i64, ttft_us: u32, itl: &[u32], error: ErrorKind) -> Row {
    let ok = error == ErrorKind::None;
    let latency_us = if ok { ttft_us + itl.iter().sum::<u32>() } else { ttft_us + 1_500 };
    Row {
        index,
        intended_us: -1,
        start_us,
        ttft_us: if ok { ttft_us.into() } else { 0 },
        latency_us: latency_us.into(),
        input_tokens: 100 + index as u32,
        output_tokens: if ok { itl.len() as u32 + 1 } else { 0 },
        http_status: if ok { 200 } else { 500 },
        error: error as i32,
        itl_us: if ok { surge_proto::gaps::pack(itl) } else { Default::default() },
        usage_from_server: ok,
        input_source: TokenSource::Tokenizer as i32,
        output_source: if ok { TokenSource::ServerUsage as i32 } else { TokenSource::Unspecified as i32 },
        error_message: String::new(),
        response_id: Default::default(),
        generated_text: if ok { format!("text of {index}") } else { String::new() },
        probe: false,
        cut: None,
        ..Default::default()
    }
}

fn agent(i: usize, done: bool) -> AgentReport {
    let mut a = AgentReport {
        addr: format!("10.0.0.{}:7070", i + 1),
        hello: HelloReply {
            cores: 4,
            max_in_flight: 10_000,
            hostname: format!("host{i}"),
            protocol_version: surge_proto::PROTOCOL_VERSION,
            ..Default::default()
        },
        ..Default::default()
    };
    a.offset.offset_ns = 1_250_000 * (i as i64 + 1);
    a.offset.rtt_ns = 400_000;
    a.completed = 3;
    a.failed = 1;
    a.rows = 4;
    a.share = Some(crate::plan::split::Share {
        fraction: 0.5,
        indices: surge_core::data::share::stripes(&[1, 1])[i].clone(),
        num_prompts: 4,
        max_concurrency: if i == 0 { 1 } else { 2 },
        request_rate: if i == 0 { 5.0 } else { f64::INFINITY },
        num_warmups: 0,
        sessions: 0,
    });
    a.last_health = Some(Health { cpu_percent: 42.0, lag_p99_us: 90, ..Default::default() });
    a.peak_cpu_percent = 55.0;
    if done {
        a.done = Some(Done {
            completed: 3,
            failed: 1,
            cpu_seconds: 0.9,
            wall_seconds: 3.0,
            lag_p50_us: 10,
            lag_p99_us: 120,
            lag_max_us: 300,
            stop: surge_proto::StopReason::Finished as i32,
            max_in_flight: 2,
            wake_p99_us: 30,
            wake_max_us: 60,
            ..Default::default()
        });
    } else {
        a.lost = Some("silent for more than 3s".into());
    }
    a
}

fn outcome(open_loop: bool, status: RunStatus) -> (Outcome, Vec<GlobalRow>) {
    let itls: [&[u32]; 4] = [&[10_000, 12_000, 9_000], &[11_000, 30_000], &[8_000, 8_500, 9_500, 20_000], &[15_000]];
    let mut rows = Vec::new();
    for i in 0..8u64 {
        let err = match i {
            3 => ErrorKind::HttpStatus,
            6 => ErrorKind::Timeout,
            _ => ErrorKind::None,
        };
        let mut r = row(i, 100_000 * i as i64, 40_000 + 7_000 * i as u32, itls[i as usize % 4], err);
        let start_s = r.start_us as f64 / 1e6 + 0.001 * (i % 2) as f64;
        let intended_s = open_loop.then_some(start_s - 0.0005 * i as f64);
        if open_loop {
            r.intended_us = r.start_us - 500 * i as i64;
        }
        rows.push(GlobalRow { agent: (i % 2) as usize, start_s, intended_s, row: r });
    }
    let lost = matches!(status, RunStatus::Partial { .. } | RunStatus::Invalid { .. });
    let o = Outcome {
        agents: vec![agent(0, true), agent(1, !lost)],
        status,
        started_at: chrono::DateTime::from_timestamp(1_790_000_000, 0).expect("date"),
        missing_agents: Vec::new(),
        agents_waited_s: 0.0,
        halted: None,
    };
    (o, rows)
}

/// The result document with the values that change from run to run fixed.
fn document(plan: &RunPlan, (o, rows): &(Outcome, Vec<GlobalRow>)) -> (serde_json::Value, String) {
    let rows = rows.as_slice();
    let m = crate::analysis::aggregate::compute_kept(rows, &plan.slo, plan.save_detailed);
    let mut r = crate::commands::finish(plan, "org/golden-model", o, &m);
    r.run_metadata.saved_at_utc = "SAVED_AT".into();
    r.run_metadata.surge_version = "VERSION".into();
    r.client.surge_version = "VERSION".into();
    let text = summary(&r, &SummaryView::of(plan), &o.status);
    // What is written reads back as the same value.
    let back: RunResult = serde_json::from_slice(&serde_json::to_vec(&r).expect("serializes")).expect("reads back");
    assert_eq!(back, r, "the result does not survive a round trip");
    (serde_json::to_value(&r).expect("json"), text)
}

fn check(name: &str, doc: &serde_json::Value, text: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let json_path = dir.join(format!("{name}.json"));
    let text_path = dir.join(format!("{name}.txt"));
    if std::env::var_os("SURGE_BLESS").is_some() {
        std::fs::create_dir_all(&dir).expect("golden dir");
        std::fs::write(&json_path, serde_json::to_string_pretty(doc).expect("json") + "\n").expect("write");
        std::fs::write(&text_path, text).expect("write");
        return;
    }
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("golden json")).expect("golden parses");
    assert_eq!(doc, &want, "{name}.json differs from the golden file");
    let want_text = std::fs::read_to_string(&text_path).expect("golden text");
    assert_eq!(text, want_text, "{name}.txt (terminal summary) differs from the golden file");
}

#[test]
fn golden_closed_loop_with_details_metadata_and_goodput() {
    let p = plan(&[
        "--num-prompts",
        "8",
        "--max-concurrency",
        "2",
        "--metadata",
        "hardware=8xH100",
        "engine=vllm",
        "--goodput",
        "ttft:60",
        "e2el:100",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99.9",
        "--save-detailed",
    ]);
    let (doc, text) = document(&p, &outcome(false, RunStatus::Complete));
    check("closed_loop", &doc, &text);
}

#[test]
fn golden_open_loop_partial() {
    let p = plan(&["--num-prompts", "8", "--request-rate", "10", "--tolerate-agent-loss", "--random-input-len", "64"]);
    let (doc, text) = document(&p, &outcome(true, RunStatus::Partial { lost: vec!["10.0.0.2:7070".into()] }));
    check("open_loop_partial", &doc, &text);
}

/// A multi-turn run (D32, D41): the conversation keys, `per_turn_metrics`, the summary's
/// Conversations block, and a document that reads back as the same value (its string keys
/// are not taken for `--metadata` labels).
#[test]
fn golden_multi_turn() {
    let p = plan(&[
        "--backend",
        "openai-chat",
        "--multi-turn",
        "--multi-turn-num-turns",
        "2",
        "--num-prompts",
        "4",
        "--max-concurrency",
        "2",
        "--metadata",
        "hardware=8xH100",
    ]);
    let (o, mut rows) = outcome(false, RunStatus::Complete);
    // Session k's turns are rows 2k and 2k + 1; row 3 (session 1, turn 1) and row 6
    // (session 3, turn 0) fail, so session 3 sends no second turn.
    rows.retain(|r| r.row.index != 7);
    for r in &mut rows {
        let i = r.row.index;
        let (session, turn) = (i / 2, (i % 2) as u32);
        let failed = r.row.error() != ErrorKind::None;
        r.row.index = session * 1000 + u64::from(turn);
        (r.row.session, r.row.turn) = (Some(session), turn);
        r.row.history_tokens = 50 * turn;
        r.row.cached_tokens = Some(32 * turn);
        if turn == 1 || failed {
            r.row.session_end = Some(surge_proto::SessionEnd {
                duration_us: 400_000 + 1_000 * i,
                turns_completed: turn + u32::from(!failed),
                cancelled_turns: if failed { 1 - turn } else { 0 },
                failed,
                ..Default::default()
            });
        }
    }
    let (doc, text) = document(&p, &(o, rows));
    assert_eq!((doc["conversations_completed"].as_u64(), doc["conversations_failed"].as_u64()), (Some(2), Some(2)));
    assert_eq!(doc["cancelled_turns"], 1);
    assert!(doc.get("hardware").is_some() && doc["per_turn_metrics"].as_array().is_some_and(|t| t.len() == 2));
    check("multi_turn", &doc, &text);
}

/// A file written before `result_schema` existed reads as schema 1, and a file is
/// written in vLLM's key order (the typed result's declaration order), not sorted.
#[test]
fn old_files_read_as_schema_one_and_keys_keep_vllm_order() {
    let p = plan(&["--num-prompts", "8"]);
    let (o, rows) = outcome(false, RunStatus::Complete);
    let m = crate::analysis::aggregate::compute(&rows, &p.slo);
    let mut r = crate::commands::finish(&p, "org/golden-model", &o, &m);
    let text = serde_json::to_string(&r).expect("json");
    let pos = |k: &str| text.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("{k} missing"));
    // vLLM's serve.py: date, endpoint_type, backend, label, model_id, tokenizer_id,
    // num_prompts, the --metadata keys, request_rate, burstiness, max_concurrency, ...
    let order = [
        "date",
        "endpoint_type",
        "backend",
        "label",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "duration",
        "completed",
        "failed",
    ];
    assert!(order.windows(2).all(|w| pos(w[0]) < pos(w[1])), "{text}");
    assert!(pos("mean_ttft_ms") < pos("p99_ttft_ms") && pos("p99_ttft_ms") < pos("mean_tpot_ms"));
    // A schema 1 file: no result_schema key and no peak_in_flight (its max_concurrent_requests
    // held the instantaneous peak).
    let peak = format!("\"peak_in_flight\":{},", serde_json::to_string(&r.peak_in_flight).expect("json"));
    let old = text.replace("\"result_schema\":3,", "").replace(&peak, "");
    assert_eq!(old.len(), text.len() - "\"result_schema\":3,".len() - peak.len(), "{text}");
    let back: RunResult = serde_json::from_str(&old).expect("an old file reads");
    r.result_schema = 1;
    r.peak_in_flight = None;
    assert_eq!(back, r);
}
