//! What vLLM sets per request, end to end: `--lora-modules` names one adapter
//! per request (round-robin or a seeded draw, the same across agents), the initial test
//! and warm-ups name the base model; `--save-detailed` keeps each request's generated text
//! as `generated_texts`, "" for a failed request.

use crate::util::{TempDir, agent, echo, echo_metric, read_json, surge, text};
use std::time::Duration;

fn run(dir: &TempDir, args: &[&str]) -> serde_json::Value {
    let d = dir.path("");
    let mut all = vec!["run", "--save-result", "--result-dir", &d, "--result-filename", "r.json"];
    all.extend_from_slice(args);
    let out = surge(&all, Duration::from_secs(120));
    assert!(out.status.success(), "{all:?}\n{}", text(&out.stderr));
    read_json(&dir.path("r.json"))
}

fn lora_count(base: &str, name: &str) -> f64 {
    echo_metric(base, &format!("surge_echo_lora_requests_total{{lora=\"{name}\"}}"))
}

#[test]
fn lora_modules_name_one_adapter_per_request() {
    // The echo refuses any model but its own and its adapters, as vLLM does.
    let lora = ["--model", "base", "--reject-unknown-model", "--lora-modules", "a=/x", "b=/y", "c=/z"];
    let (_echo, base) = echo("127.0.0.1", &lora);
    let dir = TempDir::new("lora-rr");
    let common = ["--base-url", &base, "--model", "base", "--random-input-len", "8", "--random-output-len", "2"];
    let mut args = common.to_vec();
    args.extend_from_slice(&["--num-prompts", "300", "--max-concurrency", "20", "--num-warmups", "5"]);
    args.extend_from_slice(&["--lora-modules", "a", "b", "c", "--lora-assignment", "round-robin"]);
    let r = run(&dir, &args);
    assert_eq!(r["completed"], 300, "{r}");
    // Round-robin by request index; the initial test and the warm-ups went to the base model.
    for name in ["a", "b", "c"] {
        assert_eq!(lora_count(&base, name), 100.0, "adapter {name}");
    }

    // Random, over two agents: a seeded draw per index, every adapter used, all counted once.
    let (_echo2, base2) = echo("127.0.0.1", &lora);
    let (_a1, addr1) = agent("127.0.0.1", &["--plaintext", "--allowed-targets", "127.0.0.1"]);
    let (_a2, addr2) = agent("127.0.0.1", &["--plaintext", "--allowed-targets", "127.0.0.1"]);
    let agents = format!("{addr1},{addr2}");
    let dir2 = TempDir::new("lora-random");
    let mut args = common.to_vec();
    args[1] = &base2;
    args.extend_from_slice(&["--num-prompts", "600", "--max-concurrency", "40", "--lora-modules", "a", "b", "c"]);
    args.extend_from_slice(&["--agents", &agents, "--agents-plaintext"]);
    let r = run(&dir2, &args);
    assert_eq!(r["completed"], 600, "{r}");
    let counts: Vec<f64> = ["a", "b", "c"].iter().map(|n| lora_count(&base2, n)).collect();
    assert_eq!(counts.iter().sum::<f64>(), 600.0, "{counts:?}");
    assert!(counts.iter().all(|&c| (150.0..=250.0).contains(&c)), "a seeded uniform draw: {counts:?}");

    // The http backend sends no model: refused as a usage error naming the flag.
    let out = surge(
        &["run", "--base-url", &base, "--backend", "http", "--lora-modules", "a", "--num-prompts", "1"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--lora-modules"), "{}", text(&out.stderr));
}

#[test]
fn save_detailed_keeps_each_generated_text() {
    let (_echo, base) = echo("127.0.0.1", &["--fault-500-rate", "0.2", "--seed", "3"]);
    let dir = TempDir::new("texts");
    let args = [
        "--base-url",
        &base,
        "--model",
        "m",
        "--random-input-len",
        "8",
        "--random-output-len",
        "5",
        "--num-prompts",
        "200",
        "--max-concurrency",
        "16",
        "--no-initial-test",
        "--save-detailed",
    ];
    let r = run(&dir, &args);
    let texts: Vec<&str> =
        r["generated_texts"].as_array().expect("generated_texts").iter().map(|t| t.as_str().unwrap()).collect();
    let errors = r["errors"].as_array().unwrap();
    assert_eq!(texts.len(), 200);
    let failed = r["failed"].as_u64().unwrap();
    assert!(failed > 10, "the echo failed about a fifth: {failed}");
    for (t, e) in texts.iter().zip(errors) {
        if e.as_str() == Some("") {
            // The echo's five words, as streamed.
            assert_eq!(*t, " the quick brown fox jumps");
        } else {
            assert_eq!(*t, "", "a failed request generated nothing");
        }
    }
    // Without --save-detailed, no text is shipped or saved (vLLM deletes the key too).
    let dir2 = TempDir::new("texts-off");
    let r = run(&dir2, &args[..args.len() - 1]);
    assert!(r.get("generated_texts").is_none());
}

#[test]
fn probes_are_reported_apart_from_the_load() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "5"]);
    let dir = TempDir::new("probes");
    let d = dir.path("");
    let args = [
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--num-prompts",
        "300",
        "--max-concurrency",
        "10",
        "--probe-request-rate",
        "20",
        "--plot-timeline",
        "--result-dir",
        &d,
        "--result-filename",
        "r.json",
    ];
    let out = surge(&args, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_json(&dir.path("r.json"));
    // The load's counts hold the load only.
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(300), Some(0)), "{r}");
    assert_eq!(r["total_output_tokens"], 1200);
    let probes = r["probe_completed"].as_u64().expect("probe keys");
    assert_eq!(r["probe_failed"], 0);
    // 300 requests of ~40 ms at 10 in flight: ~1.2 s; a probe every ~70 ms (20 + 50).
    assert!((5..=40).contains(&probes), "{probes} probes");
    let (median, p99, max) = (
        r["probe_median_e2el_ms"].as_f64().unwrap(),
        r["probe_p99_e2el_ms"].as_f64().unwrap(),
        r["probe_max_e2el_ms"].as_f64().unwrap(),
    );
    // One token: the E2E latency is about the TTFT.
    assert!((19.0..40.0).contains(&median) && median <= p99 && p99 <= max, "{median} {p99} {max}");
    // The server saw each probe's single token beside the load's 4 + 4 of the initial test.
    assert_eq!(echo_metric(&base, "surge_echo_tokens_total"), (1200 + 4 + probes) as f64);
    assert!(stdout.contains("Probe Requests") && stdout.contains("Probe requests completed:"), "{stdout}");
    // --plot-timeline: surge's report beside the result, vLLM's file name.
    let page = std::fs::read_to_string(dir.path("r.timeline.html")).expect("r.timeline.html");
    assert!(page.contains("<svg"), "a page of charts");
}

#[test]
fn a_reasoning_stream_counts_from_its_first_reasoning_token() {
    // The first 4 of 8 tokens come as `delta.reasoning`: TTFT is the first of them (30 ms),
    // not the first content token (30 + 4 x 10 ms), and all 8 are output.
    let (_echo, base) = echo("127.0.0.1", &["--reasoning-tokens", "4", "--ttft-ms", "30", "--itl-ms", "10"]);
    let dir = TempDir::new("reasoning");
    let args = [
        "--base-url",
        &base,
        "--backend",
        "openai-chat",
        "--model",
        "m",
        "--random-input-len",
        "8",
        "--random-output-len",
        "8",
        "--num-prompts",
        "100",
        "--max-concurrency",
        "10",
    ];
    let r = run(&dir, &args);
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(100), Some(0)), "{r}");
    assert_eq!(r["total_output_tokens"], 800);
    let ttft = r["median_ttft_ms"].as_f64().unwrap();
    // Wide enough for a loaded machine (e2e tests run in parallel), far below the 70 ms of
    // a client that waits for content.
    assert!((29.0..50.0).contains(&ttft), "median TTFT {ttft} ms: the echo sends its first reasoning token at 30 ms");
}
