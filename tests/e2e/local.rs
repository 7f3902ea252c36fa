//! `surge run` on one machine (embedded agent) against `surge echo`.

use crate::util::{TempDir, echo, read_json, run_saved, surge, text};
use std::time::Duration;

/// Every key docs/results.md lists for the result file.
const KEYS: &[&str] = &[
    "date",
    "backend",
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_concurrent_requests",
    "run_metadata",
    "client",
];

fn metric_keys() -> Vec<String> {
    let mut v = Vec::new();
    for m in ["ttft", "tpot", "itl", "e2el"] {
        for s in ["mean", "median", "std", "p99"] {
            v.push(format!("{s}_{m}_ms"));
        }
    }
    v
}

#[test]
fn completions_run_counts_tokens_and_writes_every_key() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "50", "--itl-ms", "10"]);
    let dir = TempDir::new("local");
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--endpoint",
            "/v1/completions",
            "--model",
            "m",
            "--dataset-name",
            "random",
            "--random-input-len",
            "128",
            "--random-output-len",
            "64",
            "--num-prompts",
            "2000",
            "--max-concurrency",
            "200",
            "--ignore-eos",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,99",
            "--save-result",
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "r.json",
            "--metadata",
            "hardware=test host",
            "engine=surge echo",
        ],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{}", text(&out.stderr));
    assert!(stdout.starts_with("============ Serving Benchmark Result ============\n"), "{stdout}");
    for label in ["Successful requests:", "Median TTFT (ms):", "P99 E2EL (ms):", "P50 ITL (ms):", "Mean TPOT (ms):"] {
        assert!(stdout.contains(label), "missing {label} in\n{stdout}");
    }
    let r = read_json(&dir.path("r.json"));
    for k in KEYS.iter().map(|s| s.to_string()).chain(metric_keys()) {
        assert!(r.get(&k).is_some(), "key {k} missing");
    }
    assert_eq!(r["completed"], 2000);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["total_output_tokens"], 128_000);
    assert_eq!(r["total_input_tokens"], 2000 * 128);
    assert_eq!(r["peak_in_flight"], 200.0);
    assert!(r["max_concurrent_requests"].as_f64().unwrap() >= 200.0, "vLLM's count per second");
    assert_eq!(r["run_metadata"]["hardware"], "test host");
    assert_eq!(r["output_tokens_source"], "server_usage");
    let ttft = r["median_ttft_ms"].as_f64().unwrap();
    assert!(ttft >= 50.0, "the echo server cannot answer before its TTFT: {ttft}");
    let itl = r["median_itl_ms"].as_f64().unwrap();
    assert!(itl > 5.0 && itl < 15.0, "median ITL {itl}");
    eprintln!("median TTFT {ttft:.2} ms, median ITL {itl:.2} ms, median TPOT {:.2} ms", r["median_tpot_ms"]);
}

#[test]
fn two_thousand_in_flight_all_complete() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "100", "--itl-ms", "20"]);
    let dir = TempDir::new("c2000");
    let r = run_saved(
        &dir,
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "64",
            "--random-output-len",
            "32",
            "--num-prompts",
            "10000",
            "--max-concurrency",
            "2000",
            "--ignore-eos",
        ],
        Duration::from_secs(240),
    );
    assert_eq!(r["completed"], 10_000);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["total_output_tokens"], 320_000);
    let peak = r["peak_in_flight"].as_f64().unwrap();
    assert!(peak >= 1900.0, "peak concurrency {peak}");
    eprintln!("p99 TTFT {:.2} ms, peak concurrency {peak}", r["p99_ttft_ms"]);
}

#[test]
fn chat_backend_and_request_rate() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "1", "--itl-ms", "1"]);
    let dir = TempDir::new("rate");
    let r = run_saved(
        &dir,
        &[
            "run",
            "--base-url",
            &base,
            "--backend",
            "openai-chat",
            "--model",
            "m",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--num-prompts",
            "600",
            "--request-rate",
            "300",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(r["completed"], 600);
    assert_eq!(r["request_rate"], 300.0);
    assert!(r["e2el_including_client_queue"]["p99_ms"].as_f64().is_some());
    // Poisson arrivals over ~2 s: the achieved send rate is near 300/s.
    let achieved = r["client"]["verdict"]["achieved_rate"].as_f64().unwrap();
    assert!((achieved / 300.0 - 1.0).abs() < 0.15, "achieved {achieved}");
}

#[test]
fn http_backend_posts_the_prompt_to_echo() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--backend",
            "http",
            "--random-input-len",
            "32",
            "--num-prompts",
            "500",
            "--max-concurrency",
            "16",
        ],
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("Successful requests:                     500"), "{stdout}");
}

#[test]
fn server_closing_after_each_stream_costs_reconnects_not_failures() {
    let (_echo, base) = echo("127.0.0.1", &["--close-after-stream", "--ttft-ms", "1", "--itl-ms", "1"]);
    let dir = TempDir::new("close");
    let r = run_saved(
        &dir,
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "8",
            "--random-output-len",
            "8",
            "--num-prompts",
            "400",
            "--max-concurrency",
            "8",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(r["completed"], 400);
    assert_eq!(r["failed"], 0);
}

#[test]
fn duration_stops_issuing_and_ready_timeout_waits() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "1", "--itl-ms", "1"]);
    let dir = TempDir::new("dur");
    let r = run_saved(
        &dir,
        &[
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
            "5000",
            "--request-rate",
            "200",
            "--duration",
            "1s",
            "--ready-timeout",
            "10s",
        ],
        Duration::from_secs(60),
    );
    let done = r["completed"].as_u64().unwrap();
    assert!((100..=320).contains(&done), "about 200 requests in 1 s, got {done}");
}

#[test]
fn http2_warmups_goodput_and_metadata() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "10", "--itl-ms", "2"]);
    let dir = TempDir::new("h2");
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--http2",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--num-prompts",
            "300",
            "--max-concurrency",
            "50",
            "--num-warmups",
            "20",
            "--goodput",
            "ttft:5000",
            "e2el:20",
            "--metadata",
            "cluster_label=lab",
            "note=x",
            "--save-result",
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "r.json",
        ],
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("Request goodput (req/s):"), "{stdout}");
    let r = read_json(&dir.path("r.json"));
    assert_eq!(r["completed"], 300, "warm-ups are not counted");
    assert_eq!(r["failed"], 0);
    // Every request meets the TTFT objective and none the E2EL one: the echo sends its 8
    // tokens at 10 ms + 2 ms per token from the request, so E2EL is at least 24 ms. (A TPOT
    // objective is not certain to fail: after a stall of the host the echo sends the tokens
    // that fell due at once, and a fresh clone's run once found 133 req/s of TPOT <= 1 ms.)
    assert_eq!(r["request_goodput"], 0.0);
    assert_eq!(r["note"], "x");
    assert_eq!(r["run_metadata"]["cluster_label"], "lab");
}

/// `--cost-per-hour 10`: the result's cost per million tokens is the price per hour over
/// the tokens an hour at the measured throughput, exactly; the summary says it.
#[test]
fn cost_per_hour_gives_the_cost_per_million_tokens() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "2"]);
    let dir = TempDir::new("cost");
    let args = [
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "400",
        "--max-concurrency",
        "32",
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--ignore-eos",
        "--cost-per-hour",
        "10",
    ];
    let r = run_saved(&dir, &args, Duration::from_secs(60));
    let out_tps = r["output_throughput"].as_f64().unwrap();
    let total_tps = r["total_token_throughput"].as_f64().unwrap();
    assert!(out_tps > 0.0);
    assert_eq!(r["cost_per_million_output_tokens"].as_f64(), Some(10.0 / (out_tps * 3600.0) * 1e6));
    assert_eq!(r["cost_per_million_total_tokens"].as_f64(), Some(10.0 / (total_tps * 3600.0) * 1e6));
    let plain = run_saved(&TempDir::new("no-cost"), &args[..args.len() - 2], Duration::from_secs(60));
    assert!(plain.get("cost_per_million_output_tokens").is_none(), "no cost without a price");
}

/// `--append-result` (vLLM's): each run adds its result as one JSON line to the file.
#[test]
fn append_result_adds_one_json_line_per_run() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let dir = TempDir::new("append");
    let d = dir.path("");
    for n in ["20", "30"] {
        let args = [
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--num-prompts",
            n,
            "--max-concurrency",
            "4",
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--append-result",
            "--result-dir",
            &d,
            "--result-filename",
            "all.jsonl",
        ];
        let out = surge(&args, Duration::from_secs(60));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let text = std::fs::read_to_string(dir.path("all.jsonl")).unwrap();
    let completed: Vec<u64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["completed"].as_u64().unwrap())
        .collect();
    assert_eq!(completed, vec![20, 30]);
}

/// `--ramp-up-strategy linear` (vLLM's): the rate climbs from 40 to 400 req/s over the
/// requests, the result carries vLLM's ramp keys and one `rps_change_events` entry per
/// whole rate, in time order; bad ramp flags are usage errors naming the flag.
#[test]
fn a_linear_ramp_up_climbs_and_writes_rps_change_events() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let dir = TempDir::new("ramp");
    let args = vec![
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "600",
        "--random-input-len",
        "8",
        "--random-output-len",
        "2",
        "--burstiness",
        "100",
        "--save-detailed",
        "--ramp-up-strategy",
        "linear",
        "--ramp-up-start-rps",
        "40",
        "--ramp-up-end-rps",
        "400",
    ];
    let r = run_saved(&dir, &args, Duration::from_secs(60));
    assert_eq!(r["completed"], 600);
    assert_eq!(
        (r["ramp_up_strategy"].as_str(), r["ramp_up_start_rps"].as_u64(), r["ramp_up_end_rps"].as_u64()),
        (Some("linear"), Some(40), Some(400))
    );
    let events = r["rps_change_events"].as_array().unwrap();
    let rps: Vec<u64> = events.iter().map(|e| e["rps"].as_u64().unwrap()).collect();
    assert_eq!(rps, (40..=400).collect::<Vec<u64>>());
    let stamps: Vec<&str> = events.iter().map(|e| e["timestamp"].as_str().unwrap()).collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    // Early gaps are several times the late ones (40-76 req/s against 364-400).
    let mut starts: Vec<f64> = r["start_times"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    starts.sort_by(f64::total_cmp);
    let gap = |w: &[f64]| (w[w.len() - 1] - w[0]) / (w.len() - 1) as f64;
    let (early, late) = (gap(&starts[..60]), gap(&starts[540..]));
    assert!((4.0..10.0).contains(&(early / late)), "early gap {early}, late gap {late}");
    // The whole run lasts about the sum of the gaps: 600 / 360 * ln(10) = 3.8 s.
    let d = r["duration"].as_f64().unwrap();
    assert!((3.0..5.5).contains(&d), "duration {d}");
    // A --duration run without --num-prompts ramps over the duration (D22): 20 -> 200 req/s
    // over 3 s sends about the mean rate x 3 = 330 requests.
    let timed = [
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--duration",
        "3s",
        "--random-input-len",
        "8",
        "--random-output-len",
        "2",
        "--burstiness",
        "100",
        "--ramp-up-strategy",
        "linear",
        "--ramp-up-start-rps",
        "20",
        "--ramp-up-end-rps",
        "200",
        "--save-detailed",
    ];
    let r = run_saved(&dir, &timed, Duration::from_secs(60));
    let n = r["completed"].as_u64().unwrap();
    // D3: a --duration run has vLLM's per-request arrays with --save-detailed.
    assert_eq!(r["latencies"].as_array().map(Vec::len), Some(n as usize));
    assert_eq!(r["queue_times"].as_array().map(Vec::len), Some(n as usize));
    assert!((300..=345).contains(&n), "{n} requests in 3 s of a 20 -> 200 ramp");
    let events = r["rps_change_events"].as_array().unwrap();
    assert!(events.len() >= 170, "{} events (20..=200 reached by the end)", events.len());
    // Bad flags name themselves.
    for (extra, flag) in [
        (vec!["--request-rate", "5"], "--request-rate"),
        (vec!["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0"], "--ramp-up-start-rps 0"),
        (vec!["--ramp-up-start-rps", "500"], "--ramp-up-start-rps 500"),
    ] {
        let mut a = args.clone();
        a.extend(extra);
        let out = surge(&a, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(flag), "{flag}: {}", text(&out.stderr));
    }
}

/// vLLM's client-queue metrics when `--percentile-metrics` names them: in a closed loop
/// every request arrives at the start, so its queue time is its send time (mean about half
/// the run); in an open loop with a cap, `e2el_including_client_queue` too; without
/// `--max-concurrency`, neither (as vLLM); the summary prints vLLM's sections.
#[test]
fn client_queue_metrics_as_vllm_writes_them() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = TempDir::new("queue");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--num-prompts",
            "200",
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--percentile-metrics",
            "ttft,client_queue_time,e2el_including_client_queue",
            "--metric-percentiles",
            "50,99",
        ];
        args.extend_from_slice(extra);
        run_saved(&dir, &args, Duration::from_secs(60))
    };
    let r = run(&["--max-concurrency", "4"]);
    let (mean, half) = (r["mean_client_queue_time_ms"].as_f64().unwrap(), r["duration"].as_f64().unwrap() * 500.0);
    assert!((mean - half).abs() < 0.25 * half, "mean queue {mean} ms, half the run {half} ms");
    assert!(r["p99_client_queue_time_ms"].as_f64().unwrap() > r["p50_client_queue_time_ms"].as_f64().unwrap());
    assert!(r.get("mean_e2el_including_client_queue_ms").is_none(), "closed loop: no queue-inclusive E2EL");
    let r = run(&["--max-concurrency", "4", "--request-rate", "400"]);
    for k in ["mean_client_queue_time_ms", "std_client_queue_time_ms", "p99_e2el_including_client_queue_ms"] {
        assert!(r[k].as_f64().is_some(), "{k} missing");
    }
    assert!(r["p99_e2el_including_client_queue_ms"].as_f64() >= r["p99_client_queue_time_ms"].as_f64());
    let r = run(&[]);
    assert!(r.get("mean_client_queue_time_ms").is_none(), "no --max-concurrency, no queue metrics");
    assert_eq!(r["rtfx"], 0.0);
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--num-prompts",
            "20",
            "--max-concurrency",
            "2",
            "--percentile-metrics",
            "ttft,client_queue_time",
        ],
        Duration::from_secs(30),
    );
    assert!(text(&out.stdout).contains("---------------Client-side Queueing---------------"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("Mean Client Queue Time (ms):"), "{}", text(&out.stdout));
}

/// `max_concurrent_requests` as vLLM computes it (result schema 2): one-second buckets from
/// the first successful start, each successful request counted in every bucket it touches;
/// surge's instantaneous peak is `peak_in_flight`. Recomputed here from the saved arrays.
#[test]
fn max_concurrent_requests_is_vllms_per_second_count() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "300", "--itl-ms", "100", "--fault-500-rate", "0.1"]);
    let dir = TempDir::new("peak");
    let args = [
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--num-prompts",
        "40",
        "--max-concurrency",
        "4",
        "--random-input-len",
        "8",
        "--random-output-len",
        "10",
        "--ignore-eos",
        "--save-detailed",
    ];
    let r = run_saved(&dir, &args, Duration::from_secs(120));
    assert_eq!(r["result_schema"], 3);
    assert_eq!(r["peak_in_flight"], 4.0);
    let nums = |k: &str| -> Vec<f64> { r[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    let (starts, e2els) = (nums("start_times"), nums("e2els"));
    let ok: Vec<(f64, f64)> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .zip(starts.iter().zip(&e2els))
        .filter(|(e, _)| e.as_str() == Some(""))
        .map(|(_, (s, l))| (*s, s + l))
        .collect();
    assert!(ok.len() < 40, "the faults failed some requests");
    let min = ok.iter().map(|o| o.0).fold(f64::INFINITY, f64::min);
    let max_end = ok.iter().map(|o| o.1).fold(f64::NEG_INFINITY, f64::max);
    let mut per = vec![0u32; (max_end - min).ceil() as usize + 1];
    for (s, e) in &ok {
        for b in per.iter_mut().take((e - min) as usize + 1).skip((s - min) as usize) {
            *b += 1;
        }
    }
    let want = f64::from(per.into_iter().max().unwrap());
    assert_eq!(r["max_concurrent_requests"].as_f64(), Some(want));
    assert!(want > 4.0, "1.2 s requests at 4 in flight touch more than 4 per second: {want}");
}
