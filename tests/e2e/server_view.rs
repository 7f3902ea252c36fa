//! The server's own view (D11): `surge echo --metrics-flavor vllm` scraped beside
//! a level, its counters checked against the client's, other traffic flagged, and an
//! agent scraping a `/metrics` that only agents may read.

use crate::util::{TempDir, agent, echo, echo_metric, run_saved, surge, surge_bg, text, wait_for};
use std::time::Duration;

fn load<'a>(base: &'a str, n: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--base-url",
        base,
        "--model",
        "surge-echo",
        "--num-prompts",
        n,
        "--max-concurrency",
        "250",
        "--random-input-len",
        "16",
        "--random-output-len",
        "16",
        "--ignore-eos",
    ]
}

#[test]
fn the_servers_counters_match_the_clients_and_the_series_has_every_slice() {
    let (_echo, base) =
        echo("127.0.0.1", &["--metrics-flavor", "vllm", "--ttft-ms", "20", "--itl-ms", "10", "--output-tokens", "16"]);
    let dir = TempDir::new("server-view");
    let r = run_saved(&dir, &load(&base, "5000"), Duration::from_secs(120));
    assert_eq!(r["completed"], 5000);
    let s = &r["server_metrics"];
    let out_tokens = r["total_output_tokens"].as_f64().unwrap();
    assert_eq!(out_tokens, 5000.0 * 16.0);
    assert_eq!(s["deltas"]["vllm:generation_tokens_total"].as_f64(), Some(out_tokens), "{s}");
    assert_eq!(
        s["deltas"]["vllm:request_success_total"].as_f64(),
        Some(5000.0),
        "the initial test is before the baseline"
    );
    assert_eq!(s["checks"]["output_tokens_mismatch_pct"].as_f64(), Some(0.0));
    assert!(s["checks"]["flagged"].as_array().unwrap().is_empty(), "{s}");
    assert_eq!(s["failed_scrapes"], 0);
    // The server's TTFT histogram saw every request; its mean is the echo's 20 ms.
    let ttft = &s["histograms"]["vllm:time_to_first_token_seconds"];
    assert_eq!(ttft["count"].as_f64(), Some(5000.0));
    let mean_ms = s["checks"]["server_ttft_mean_ms"].as_f64().unwrap();
    assert!((19.5..30.0).contains(&mean_ms), "server TTFT mean {mean_ms} ms");
    // One point per slice (a scrape a second, slices of a second): every slice but at
    // most one (scrapes and slices are not in phase) has the running gauge.
    let slices = r["time_series"].as_array().unwrap().len();
    assert!(slices >= 3, "{slices} slices");
    for (name, series) in s["series"].as_object().unwrap() {
        assert_eq!(series.as_array().unwrap().len(), slices, "{name}");
    }
    let running = s["series"]["vllm:num_requests_running"].as_array().unwrap();
    let points = running.iter().filter(|v| v.is_number()).count();
    assert!(points + 1 >= slices, "{points} points in {slices} slices: {running:?}");
    let scrapes = s["scrapes"].as_u64().unwrap();
    assert!(scrapes as usize >= slices, "{scrapes} scrapes for {slices} slices");
    assert!(s["gauges"]["vllm:num_requests_running"]["max"].as_f64().unwrap() <= 250.0);
    eprintln!(
        "server view: {scrapes} scrapes, {slices} slices, server TTFT mean {mean_ms:.2} ms, checks {}",
        s["checks"]
    );
}

#[test]
fn other_traffic_on_the_server_is_flagged() {
    let (_echo, base) =
        echo("127.0.0.1", &["--metrics-flavor", "vllm", "--ttft-ms", "20", "--itl-ms", "10", "--output-tokens", "16"]);
    let bg = surge_bg(&load(&base, "4000"));
    wait_for(Duration::from_secs(30), "load at the echo", || echo_metric(&base, "surge_echo_requests_total") >= 300.0);
    // A second client on the same server, within the first one's level.
    let mut other = load(&base, "300");
    other.push("--no-scrape-metrics");
    let o = surge(&other, Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = bg.finish(Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("WARNING: server:") && stdout.contains("other traffic"), "{stdout}");
    assert!(!text(&o.stdout).contains("-Server-"), "the second client did not scrape");
}

/// The metrics endpoint answers only the agents' addresses: the first agent scrapes and
/// its scrapes reach the result; the coordinator scraping it gets 403s, reported.
#[test]
fn an_agent_scrapes_what_only_agents_may_read() {
    let (_echo, base) = echo(
        "127.0.0.1",
        &[
            "--metrics-flavor",
            "vllm",
            "--output-tokens",
            "8",
            "--metrics-allow-peer",
            "127.0.0.2",
            "--metrics-allow-peer",
            "127.0.0.3",
        ],
    );
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        let args = ["--plaintext", "--allowed-targets", "127.0.0.1", "--local-address", ip];
        let (p, a) = agent(ip, &args);
        procs.push(p);
        addrs.push(a);
    }
    let agents = addrs.join(",");
    let dir = TempDir::new("agent-scrape");
    let mut args = load(&base, "3000");
    // No periodic scrape within the level: the end is the last scrape the coordinator
    // asks for once every agent is done.
    args.extend(["--agents", &agents, "--agents-plaintext", "--scrape-from", "agent", "--scrape-interval", "10s"]);
    let r = run_saved(&dir, &args, Duration::from_secs(120));
    let s = &r["server_metrics"];
    assert_eq!(s["failed_scrapes"], 0, "{s}");
    assert_eq!(s["deltas"]["vllm:generation_tokens_total"].as_f64(), r["total_output_tokens"].as_f64(), "{s}");
    assert_eq!(s["checks"]["output_tokens_mismatch_pct"].as_f64(), Some(0.0));
    assert_eq!(s["scrapes"], 2, "the baseline and the last: {s}");
    assert_eq!(r["client"]["agents"][0]["scrape_points_dropped"], 0, "no scrape dropped: {}", r["client"]);

    // The coordinator itself is refused: every scrape fails, and the summary says so.
    let metrics = format!("{base}/metrics");
    let mut args = load(&base, "500");
    args.extend(["--agents", &agents, "--agents-plaintext", "--metrics-url", &metrics]);
    let out = surge(&args, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("WARNING: server:") && stdout.contains("HTTP 403"), "{stdout}");
}

/// An https target's `/metrics` is verified as its load is: with the echo's private CA
/// (`--ca-cert`) or `--insecure`, by the coordinator and by an agent, every scrape reads.
#[test]
fn an_https_targets_metrics_are_read_with_its_ca_or_without_verification() {
    let dir = TempDir::new("server-view-tls");
    let ca = dir.path("echo-ca.pem");
    let echo_args = ["--tls-self-signed", "--tls-cert-out", &ca, "--metrics-flavor", "vllm", "--output-tokens", "4"];
    let (_echo, line) = echo("127.0.0.1", &echo_args);
    let base = line.split_whitespace().next().expect("a URL").to_string();
    assert!(base.starts_with("https://"), "{line}");
    for (how, extra) in [
        ("ca-cert", vec!["--ca-cert", ca.as_str()]),
        ("insecure", vec!["--insecure"]),
        ("ca-cert from the agent", vec!["--ca-cert", ca.as_str(), "--scrape-from", "agent"]),
    ] {
        let mut args = load(&base, "200");
        args.extend(extra);
        let r = run_saved(&dir, &args, Duration::from_secs(120));
        let s = &r["server_metrics"];
        assert_eq!(s["failed_scrapes"], 0, "{how}: {s}");
        assert!(s["scrapes"].as_u64().is_some_and(|n| n >= 2), "{how}: {s}");
        assert_eq!(s["deltas"]["vllm:request_success_total"].as_f64(), Some(200.0), "{how}: {s}");
    }
}
