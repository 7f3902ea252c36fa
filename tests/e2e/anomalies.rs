//! Anomalies (D70) against the echo's seeded faults, each of which the echo counts as it
//! injects it (`surge_echo_injected_anomalies_total{kind}`): surge must count exactly as
//! many of the matching kind, on the right rows, and none on a clean echo at 2,000 in
//! flight; anomalies are not failures unless `--fail-on-anomaly`.

use crate::util::{TempDir, echo, echo_metric, run_saved, surge, text};
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// The echo's count of one injected kind.
fn injected(base: &str, kind: &str) -> u64 {
    echo_metric(base, &format!("surge_echo_injected_anomalies_total{{kind=\"{kind}\"}}")) as u64
}

fn args<'a>(base: &'a str, n: &'a str, in_flight: &'a str, backend: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--base-url",
        base,
        "--backend",
        backend,
        "--model",
        "m",
        "--num-prompts",
        n,
        "--max-concurrency",
        in_flight,
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--no-initial-test",
    ]
}

fn kinds(r: &Value) -> Vec<(String, u64)> {
    let by = r["anomalies"]["by_kind"].as_object().expect("anomalies.by_kind");
    by.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect()
}

fn count(r: &Value, kind: &str) -> u64 {
    r["anomalies"]["by_kind"][kind].as_u64().unwrap_or(u64::MAX)
}

/// An echo fault flag, the label it is counted under, and the kinds it must show with how
/// many of each per injected one.
type Case = (&'static str, &'static str, &'static [(&'static str, u64)]);

#[test]
fn each_fault_of_the_echo_is_counted_as_its_anomaly_exactly() {
    // One fault at a time, on completions and on chat: (echo flag, its label, the kinds
    // it must show and how many of each, as a multiple of the injected count).
    let cases: [Case; 3] = [
        ("--drop-finish-reason-rate", "no_finish_reason", &[("no_finish_reason", 1)]),
        // A usage above what was sent is also above max_tokens.
        ("--usage-mismatch-rate", "usage_mismatch", &[("usage_mismatch", 1), ("length_off", 1)]),
        // Half the tokens, with ignore_eos: short, and more than 10 % off.
        ("--early-eos-rate", "early_eos", &[("short_output", 1), ("length_off", 1)]),
    ];
    for backend in ["openai", "openai-chat"] {
        for (flag, label, want) in cases {
            let (_echo, base) = echo("127.0.0.1", &["--output-tokens", "16", flag, "0.1"]);
            let dir = TempDir::new("anomalies");
            let rows_path = dir.path("rows.jsonl");
            let mut a = args(&base, "400", "50", backend);
            a.extend_from_slice(&["--save-rows", &rows_path]);
            let r = run_saved(&dir, &a, LIMIT);
            assert_eq!(r["failed"], 0, "anomalies are not failures: {}", r["errors_by_kind"]);
            let n = injected(&base, label);
            assert!(n > 10, "{flag}: the echo injected {n}");
            for (kind, k) in want {
                assert_eq!(count(&r, kind), n * k, "{backend} {flag}: {kind} of {:?}", kinds(&r));
            }
            let others: u64 = kinds(&r).iter().filter(|(k, _)| !want.iter().any(|(w, _)| w == k)).map(|(_, v)| v).sum();
            assert_eq!(others, 0, "{backend} {flag}: no other kind: {:?}", kinds(&r));
            assert_eq!(r["anomalies"]["requests"].as_u64(), Some(n));
            // The rows say which requests.
            let rows = std::fs::read_to_string(&rows_path).unwrap();
            let marked = rows.lines().filter(|l| l.contains(&format!("\"{}\"", want[0].0))).count() as u64;
            assert_eq!(marked, n, "{backend} {flag}: rows marked {}", want[0].0);
            let example = &r["anomalies"]["examples"][want[0].0][0];
            assert!(example["detail"].as_str().is_some_and(|d| !d.is_empty()), "{example}");
        }
    }
}

/// A stream that ends as it should with no token (D50): a success, counted as `no_tokens`
/// exactly as often as the echo sent one, with no TTFT: it stays out of the TTFT
/// percentiles (the echo's 20 ms is their floor) and meets no TTFT goodput objective.
#[test]
fn an_empty_reply_is_a_success_with_no_tokens_and_no_ttft() {
    for backend in ["openai", "openai-chat"] {
        let (_echo, base) =
            echo("127.0.0.1", &["--ttft-ms", "20", "--output-tokens", "16", "--empty-reply-rate", "0.1"]);
        let dir = TempDir::new("anomalies-empty");
        let mut a = args(&base, "400", "50", backend);
        a.extend_from_slice(&["--metric-percentiles", "1,50", "--goodput", "ttft:1000"]);
        let r = run_saved(&dir, &a, LIMIT);
        let n = injected(&base, "no_tokens");
        assert!(n > 10, "{backend}: the echo sent {n} empty replies");
        assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(400), Some(0)), "{}", r["errors_by_kind"]);
        assert_eq!(count(&r, "no_tokens"), n, "{backend}: {:?}", kinds(&r));
        // Asked to ignore EOS (the random dataset's default, as vLLM's), an empty reply is
        // also short and off its length; nothing else.
        for kind in ["short_output", "length_off"] {
            assert_eq!(count(&r, kind), n, "{backend}: {kind} of {:?}", kinds(&r));
        }
        assert_eq!(kinds(&r).iter().map(|(_, v)| v).sum::<u64>(), 3 * n, "{backend}: {:?}", kinds(&r));
        assert_eq!(r["total_output_tokens"].as_u64(), Some(16 * (400 - n)), "{backend}");
        let p1 = r["p1_ttft_ms"].as_f64().expect("p1_ttft_ms");
        assert!(p1 >= 20.0, "{backend}: a reply with no token has no TTFT, yet p1 TTFT is {p1} ms");
        let good = r["request_goodput"].as_f64().unwrap() * r["duration"].as_f64().unwrap();
        assert!((good - (400 - n) as f64).abs() < 0.5, "{backend}: goodput counts {good} of {} with a token", 400 - n);
    }
}

#[test]
fn a_clean_echo_gives_none_at_2000_in_flight_and_fail_on_anomaly_sets_the_exit_code() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "2", "--output-tokens", "16"]);
    let dir = TempDir::new("anomalies-clean");
    for backend in ["openai", "openai-chat"] {
        let r = run_saved(&dir, &args(&base, "4000", "2000", backend), LIMIT);
        assert_eq!(r["completed"], 4000, "{}", r["errors_by_kind"]);
        assert_eq!(r["anomalies"]["requests"], 0, "{backend}: {:?}", kinds(&r));
        assert!(kinds(&r).iter().all(|(_, n)| *n == 0) && kinds(&r).len() == 7, "every kind listed, at 0");
    }
    let out = surge(&[&args(&base, "100", "10", "openai")[..], &["--fail-on-anomaly"]].concat(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "clean: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Anomalies:                               none"), "{}", text(&out.stdout));

    let (_faulty, bad) = echo("127.0.0.1", &["--output-tokens", "16", "--early-eos-rate", "0.5"]);
    let out = surge(&args(&bad, "100", "10", "openai"), LIMIT);
    assert_eq!(out.status.code(), Some(0), "counted, not failed: {}", text(&out.stdout));
    let out = surge(&[&args(&bad, "100", "10", "openai")[..], &["--fail-on-anomaly"]].concat(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let said = text(&out.stdout);
    assert!(said.contains("showed anomalies") && said.contains("--fail-on-anomaly"), "{said}");
}

/// `--check-determinism`: ten questions asked ten times each, one at a time, of an echo
/// that answers 30 % of them "wrong": every reply whose text differs from its question's
/// first reply is `nondeterministic`, exactly; answered right every time, none is.
#[test]
fn the_same_request_answered_otherwise_is_nondeterministic() {
    let dir = TempDir::new("determinism");
    let file = dir.path("q.jsonl");
    let lines: Vec<String> =
        (0..10).map(|i| format!("{{\"prompt\": \"What is {i} plus 1?\", \"number\": {}}}", i + 1)).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    for (rate, some) in [("0.3", true), ("0", false)] {
        let (_echo, base) = echo("127.0.0.1", &["--answers", &file, "--wrong-answer-rate", rate]);
        let rows_path = dir.path(&format!("rows-{rate}.jsonl"));
        let mut a = args(&base, "100", "1", "openai");
        a.extend_from_slice(&["--accuracy", &file, "--check-determinism", "--save-rows", &rows_path]);
        let r = run_saved(&dir, &a, LIMIT);
        // From the rows, in the order they were answered: replies unlike their question's first.
        let mut first = std::collections::HashMap::new();
        let mut differ = 0;
        for line in std::fs::read_to_string(&rows_path).unwrap().lines() {
            let row: Value = serde_json::from_str(line).unwrap();
            let q = row["seq"].as_u64().unwrap() % 10;
            let right = row["correct"].as_bool().unwrap();
            differ += u64::from(*first.entry(q).or_insert(right) != right);
        }
        assert_eq!(count(&r, "nondeterministic"), differ, "rate {rate}: {:?}", kinds(&r));
        assert_eq!(differ > 0, some, "rate {rate}: {differ}");
    }
    let out = surge(
        &[&args("http://127.0.0.1:9", "1", "1", "openai")[..], &["--check-determinism", "--temperature", "0.7"]]
            .concat(),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// The echo names its replies after `x-request-id`, as vLLM does; at `--misdirect-rate`
/// a reply names another request: each is `wrong_request`, in single requests and in a
/// conversation's turns alike.
#[test]
fn a_reply_that_names_another_request_is_counted() {
    for multi_turn in [false, true] {
        let (_echo, base) = echo("127.0.0.1", &["--output-tokens", "4", "--misdirect-rate", "0.2"]);
        let dir = TempDir::new("misdirect");
        let mut a = args(&base, "60", "4", "openai-chat");
        if multi_turn {
            a.extend_from_slice(&["--multi-turn", "--multi-turn-num-turns", "3"]);
        }
        let r = run_saved(&dir, &a, LIMIT);
        let n = injected(&base, "misdirected");
        assert!(n > 0, "the echo misdirected some replies");
        assert_eq!(count(&r, "wrong_request"), n, "multi-turn {multi_turn}: {:?}", kinds(&r));
        let example = r["anomalies"]["examples"]["wrong_request"][0]["detail"].as_str().unwrap_or_default();
        assert!(example.contains("misdirected"), "{example}");
    }
}
