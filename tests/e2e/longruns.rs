//! Long and large runs in short form: a duration run without a request cap,
//! the time series, rows streamed to disk, and a huge `--num-prompts` that costs nothing
//! up front. The full-length checks (120 s at 2000 in flight, RSS flat; 30-minute soak)
//! are `bench/long-runs.sh`.

use crate::util::{TempDir, echo, echo_metric, np_percentile, run_saved, surge_bg, text, wait_for};
use std::io::BufRead;
use std::time::{Duration, Instant};

#[test]
fn duration_alone_has_no_cap_and_the_time_series_adds_up() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "2"]);
    let dir = TempDir::new("longrun");
    let rows = dir.path("rows.jsonl");
    let t0 = Instant::now();
    let r = run_saved(
        &dir,
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--ignore-eos",
            "--max-concurrency",
            "64",
            "--duration",
            "4s",
            "--save-rows",
            &rows,
        ],
        Duration::from_secs(60),
    );
    let wall = t0.elapsed();
    assert!(wall < Duration::from_secs(30), "{wall:?}");
    assert_eq!(r["ended_by"], "duration", "{}", r["ended_by"]);
    assert!(r["num_prompts"].is_null(), "no cap: {}", r["num_prompts"]);
    let completed = r["completed"].as_u64().unwrap();
    // Far more than vLLM's default of 1000 prompts: the duration, not a cap, ended it.
    assert!(completed > 1000, "completed {completed}");
    assert_eq!(r["failed"], 0);
    let ts = r["time_series"].as_array().unwrap();
    assert!(ts.len() >= 4 && ts.len() <= 6, "{} slices", ts.len());
    let sum: u64 = ts.iter().map(|s| s["completed"].as_u64().unwrap()).sum();
    assert_eq!(sum, completed);
    let started: u64 = ts.iter().map(|s| s["started"].as_u64().unwrap()).sum();
    assert_eq!(started, completed);
    assert_eq!(ts.last().unwrap()["in_flight"], 0);
    let busy = &ts[1];
    assert!(busy["p99_ttft_ms"].as_f64().unwrap() >= 5.0, "{busy}");
    // In flight at a slice's end, counted from the rows' start and end times. It read 0 at
    // slice 1's end once on a 2-core VM (host 98 % busy: a stall across the boundary), so
    // the gauge is asked to show requests in flight at some boundary before the last.
    let open = ts[..ts.len() - 1].iter().map(|s| s["in_flight"].as_u64().unwrap());
    assert!(open.clone().any(|n| n > 0), "in flight at the slices' ends: {:?}", open.collect::<Vec<_>>());
    assert!(!busy["agents"].as_array().unwrap().is_empty(), "{busy}");
    // The CSV beside the result has a line per slice.
    let csv = std::fs::read_to_string(dir.path("r.timeseries.csv")).unwrap();
    assert_eq!(csv.lines().count(), ts.len() + 1, "{csv}");
    // One line per request, and the result's percentiles are numpy's over the file.
    let file = std::fs::File::open(&rows).unwrap();
    let (mut ttft, mut e2el, mut n) = (Vec::new(), Vec::new(), 0u64);
    for line in std::io::BufReader::new(file).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        assert_eq!(v["error"], "");
        assert!(v["intended_start_time"].is_null());
        ttft.push(v["ttft"].as_f64().unwrap());
        e2el.push(v["latency"].as_f64().unwrap());
        n += 1;
    }
    assert_eq!(n, completed);
    assert_eq!(r["median_ttft_ms"].as_f64().unwrap(), np_percentile(&ttft, 50.0) * 1000.0);
    assert_eq!(r["p99_e2el_ms"].as_f64().unwrap(), np_percentile(&e2el, 99.0) * 1000.0);
    assert_eq!(r["percentiles_exact"], true);
}

#[test]
fn a_huge_num_prompts_costs_nothing_up_front_and_the_duration_ends_it() {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "5", "--itl-ms", "2"]);
    let dir = TempDir::new("hugeprompts");
    let d = dir.path("");
    let t0 = Instant::now();
    let bg = surge_bg(&[
        "run",
        "--base-url",
        &base,
        "--model",
        "m",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--ignore-eos",
        "--max-concurrency",
        "32",
        "--num-prompts",
        "100000000",
        "--duration",
        "3s",
        "--save-result",
        "--result-dir",
        &d,
        "--result-filename",
        "r.json",
    ]);
    // Requests reach the server soon after launch (nothing is prepared per prompt).
    wait_for(Duration::from_secs(10), "the first completion at the echo", || {
        echo_metric(&base, "surge_echo_requests_total") >= 2.0
    });
    let first = t0.elapsed();
    let out = bg.finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(first < Duration::from_secs(5), "first request after {first:?}");
    let r = crate::util::read_json(&dir.path("r.json"));
    assert_eq!(r["ended_by"], "duration");
    assert_eq!(r["num_prompts"], 100_000_000u64);
}

#[test]
fn max_run_time_below_the_duration_is_a_usage_error() {
    let out = crate::util::surge(
        &["run", "--base-url", "http://127.0.0.1:9", "--model", "m", "--duration", "10s", "--max-run-time", "5s"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--max-run-time"), "{}", text(&out.stderr));
}

#[test]
fn a_duration_without_any_bound_on_the_load_is_a_usage_error() {
    let out = crate::util::surge(
        &["run", "--base-url", "http://127.0.0.1:9", "--model", "m", "--duration", "10s"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--max-concurrency"), "{}", text(&out.stderr));
}

/// Ctrl-C or SIGTERM mid-run: the load stops, what was measured is written, marked.
#[test]
fn an_interrupt_keeps_what_was_measured() {
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "5"]);
        let dir = TempDir::new("interrupt");
        let d = dir.path("");
        let bg = surge_bg(&[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--ignore-eos",
            "--max-concurrency",
            "200",
            "--duration",
            "60s",
            "--save-result",
            "--result-dir",
            &d,
            "--result-filename",
            "r.json",
        ]);
        // 500 requests' worth of tokens served (8 each) before the signal.
        wait_for(Duration::from_secs(20), "requests served by the echo", || {
            echo_metric(&base, "surge_echo_tokens_total") >= 4000.0
        });
        bg.proc.signal(sig);
        let t0 = Instant::now();
        let out = bg.finish(Duration::from_secs(20));
        assert!(t0.elapsed() < Duration::from_secs(2), "SIG{sig}: exit took {:?}", t0.elapsed());
        assert_eq!(out.status.code(), Some(code), "SIG{sig}: {}", text(&out.stderr));
        let r = crate::util::read_json(&dir.path("r.json"));
        assert_eq!(r["ended_by"], "interrupt", "SIG{sig}");
        assert_eq!(r["client"]["status"], "interrupted");
        assert!(r["completed"].as_u64().unwrap() >= 300, "SIG{sig}: {}", r["completed"]);
        // The load stopped with the process: the echo's token counter is frozen (once the
        // echo has met the closed sockets: a token written just after the exit counts).
        std::thread::sleep(Duration::from_millis(300));
        let frozen = echo_metric(&base, "surge_echo_tokens_total");
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(echo_metric(&base, "surge_echo_tokens_total"), frozen, "SIG{sig}: tokens served after the exit");
        let stdout = text(&out.stdout);
        assert!(stdout.contains("RUN INTERRUPTED"), "{stdout}");
        assert!(stdout.lines().last().unwrap_or_default().ends_with(&format!("(exit code {code})")), "{stdout}");
    }
}
