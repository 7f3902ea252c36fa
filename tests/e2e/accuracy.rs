//! Accuracy beside speed (D71) against `surge echo --answers`, the ground truth: it answers
//! each question of the file right, or wrong at `--wrong-answer-rate` (a seeded draw per
//! request), and counts both; surge must score exactly as many right, from one agent and
//! merged from three, with the Wilson interval of the share.

use crate::util::{TempDir, agent, echo, echo_metric, run_saved, surge, text};
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// 200 GSM8K-style questions with numeric answers, and a few of each other kind.
fn questions(dir: &TempDir) -> String {
    let mut lines: Vec<String> = (0..200)
        .map(|i| {
            format!(
                "{{\"prompt\": \"Tom has {i} apples and buys {} more. How many apples?\", \"number\": {}}}",
                i % 7,
                i + i % 7
            )
        })
        .collect();
    lines[10] = "{\"prompt\": \"Which is a mammal? A. Trout B. Whale C. Frog\", \"choice\": \"B\"}".into();
    lines[20] = "{\"prompt\": \"Capital of Italy?\", \"answer\": \"Rome\"}".into();
    lines[30] = "{\"prompt\": \"Name a prime below 5.\", \"regex\": \"\\\\b(2|3)\\\\b\", \"answer\": \"3\"}".into();
    let path = dir.path("questions.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn args<'a>(base: &'a str, file: &'a str, backend: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--base-url",
        base,
        "--backend",
        backend,
        "--model",
        "m",
        "--accuracy",
        file,
        "--num-prompts",
        "200",
        "--max-concurrency",
        "16",
        "--no-initial-test",
    ]
}

/// The result's accuracy against the echo's counts of right and wrong answers.
fn check(r: &Value, base: &str) {
    let right = echo_metric(base, "surge_echo_injected_anomalies_total{kind=\"right_answer\"}") as u64;
    let wrong = echo_metric(base, "surge_echo_injected_anomalies_total{kind=\"wrong_answer\"}") as u64;
    assert_eq!(right + wrong, 200, "every request was a question");
    assert!((10..=35).contains(&wrong), "about 10 % wrong: {wrong}");
    let a = &r["accuracy"];
    assert_eq!((a["samples"].as_u64(), a["correct"].as_u64()), (Some(200), Some(right)), "{a}");
    let p = right as f64 / 200.0;
    assert_eq!(a["accuracy"].as_f64(), Some(p));
    let (lo, hi) = (a["ci_low"].as_f64().unwrap(), a["ci_high"].as_f64().unwrap());
    assert!(lo < p && p < hi && hi - lo < 0.1 && hi - lo > 0.05, "a 95 % interval around {p}: [{lo}, {hi}]");
    assert_eq!(r["anomalies"]["requests"], 0, "questions end at EOS without an anomaly: {}", r["anomalies"]);
}

#[test]
fn questions_answered_ninety_percent_right_give_that_accuracy_from_one_agent_and_three() {
    let dir = TempDir::new("accuracy");
    let file = questions(&dir);
    for backend in ["openai-chat", "openai"] {
        let (_echo, base) = echo("127.0.0.1", &["--answers", &file, "--wrong-answer-rate", "0.1"]);
        let r = run_saved(&dir, &args(&base, &file, backend), LIMIT);
        check(&r, &base);
    }
    let (_echo, base) = echo("127.0.0.1", &["--answers", &file, "--wrong-answer-rate", "0.1"]);
    let agents: Vec<_> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        .iter()
        .map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"]))
        .collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    let mut a = args(&base, &file, "openai-chat");
    a.extend_from_slice(&["--agents", &addrs, "--agents-plaintext"]);
    let r = run_saved(&dir, &a, LIMIT);
    check(&r, &base);
}

#[test]
fn a_share_of_the_load_asks_and_bad_files_are_refused() {
    let dir = TempDir::new("accuracy-mix");
    let file = questions(&dir);
    let (_echo, base) = echo("127.0.0.1", &["--answers", &file]);
    let mut a = args(&base, &file, "openai");
    a.extend_from_slice(&["--accuracy-ratio", "0.25"]);
    let r = run_saved(&dir, &a, LIMIT);
    let samples = r["accuracy"]["samples"].as_u64().unwrap();
    assert!((25..=75).contains(&samples), "about a quarter of 200: {samples}");
    assert_eq!(r["accuracy"]["correct"].as_u64(), Some(samples), "the echo answers every question right");
    assert_eq!(r["completed"], 200, "the rest is the load's own requests");

    let bad = dir.path("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"x\", \"regex\": \"(\"}\n").unwrap();
    let out = surge(&args(&base, &bad, "openai"), LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(said.contains("--accuracy") && said.contains("line 1") && said.contains("regex"), "{said}");
    let out = surge(&[&args(&base, &file, "openai")[..], &["--multi-turn"]].concat(), LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A sweep reports each level's accuracy; a capacity search takes a floor on it as an SLO
/// (`--slo accuracy>=0.85`): met by an echo that answers 98 % right, missed at every level
/// by one that answers half wrong.
#[test]
fn sweeps_report_accuracy_per_level_and_capacity_takes_it_as_an_slo() {
    let dir = TempDir::new("accuracy-sweep");
    let file = questions(&dir);
    let (_echo, base) = echo("127.0.0.1", &["--answers", &file, "--wrong-answer-rate", "0.1"]);
    let d = dir.path("sweep");
    let sweep = [
        "sweep",
        "--base-url",
        &base,
        "--model",
        "m",
        "--accuracy",
        &file,
        "--concurrency",
        "2,8",
        "--num-prompts",
        "100",
        "--result-dir",
        &d,
    ];
    let out = surge(&sweep, LIMIT);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let summary = crate::util::read_json(&format!("{d}/summary.json"));
    for l in summary["levels"].as_array().unwrap() {
        let acc = l["stats"]["accuracy"]["mean"].as_f64().unwrap_or_else(|| panic!("no accuracy: {l}"));
        assert!((0.75..=1.0).contains(&acc), "{acc}");
    }
    let csv = std::fs::read_to_string(format!("{d}/summary.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("accuracy"), "{csv}");

    for (wrong, passes) in [("0.02", true), ("0.5", false)] {
        let (_echo, base) = echo("127.0.0.1", &["--answers", &file, "--wrong-answer-rate", wrong]);
        let cdir = TempDir::new("accuracy-capacity");
        let c = crate::caputil::capacity(
            &base,
            &cdir,
            &["--accuracy", &file, "--slo", "accuracy>=0.85", "--range", "2:4", "--num-prompts", "400"],
        )
        .0;
        let levels = c["levels"].as_array().unwrap();
        assert!(levels.iter().all(|l| l["accuracy"]["estimate"].is_number()), "{c}");
        if passes {
            assert_eq!(c["capacity"].as_f64(), Some(4.0), "every level passes: {c}");
        } else {
            assert_eq!(c["capacity"], Value::Null, "no level passes: {c}");
        }
    }
}
