//! Bad input: usage errors exit 2 naming the flag; an unreachable server is a clear error.

use crate::util::{surge, text};
use std::time::Duration;

fn usage_error(args: &[&str], flag: &str) {
    let out = surge(args, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(flag), "{args:?}: message does not name {flag}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn usage_errors_name_the_flag_and_exit_2() {
    usage_error(&["run", "--no-such-flag"], "--no-such-flag");
    usage_error(&["run", "--max-concurrency", "0"], "--max-concurrency");
    usage_error(&["run", "--goodput", "ttft=200"], "--goodput");
    usage_error(&["run", "--goodput", "latency:5"], "--goodput");
    usage_error(&["run", "--request-rate", "fast"], "--request-rate");
    usage_error(&["run", "--duration", "soon"], "--duration");
    usage_error(&["run", "--percentile-metrics", "ttft,xyz"], "--percentile-metrics");
    usage_error(&["run", "--base-url", "ftp://x"], "--base-url");
    usage_error(&["run", "--dataset-name", "fixed"], "--prompt");
    usage_error(&["run", "--agents", "10.0.0.1:7000"], "--tls-ca");
    usage_error(&["run", "--agents", "10.0.0.1:7000", "--agents-plaintext"], "--agents-plaintext");
    usage_error(&["run", "--base-url", "http://127.0.0.1:1", "--http-version", "3"], "--http-version 3");
    usage_error(&["run", "--base-url", "https://127.0.0.1:1", "--h3-connections", "2"], "--h3-connections");
    usage_error(&["run", "--ca-cert", "/nonexistent/ca.pem"], "--ca-cert /nonexistent/ca.pem");
    usage_error(&["run", "--metadata", "novalue"], "--metadata");
    usage_error(&["echo", "--fault-500-rate", "2"], "--fault-500-rate");
    // Conversations: a flag that would change nothing, and contradictions.
    usage_error(&["run", "--multi-turn-num-turns", "4"], "--multi-turn-num-turns: only meaningful with --multi-turn");
    usage_error(&["run", "--multi-turn", "--dataset-name", "prefix-repetition"], "--multi-turn: --dataset-name");
    usage_error(
        &["run", "--multi-turn", "--multi-turn-min-turns", "5", "--multi-turn-max-turns", "2"],
        "--multi-turn-min-turns 5",
    );
    usage_error(&["run", "--multi-turn", "--multi-turn-concurrency", "2,4"], "--multi-turn-concurrency");
    usage_error(&["run", "--multi-turn", "--save-detailed"], "--save-detailed");
    usage_error(&["run", "--multi-turn", "--session-id-header", "bad header"], "--session-id-header");
    usage_error(
        &[
            "run",
            "--multi-turn",
            "--multi-turn-prefix-global-ratio",
            "0.6",
            "--multi-turn-prefix-conversation-ratio",
            "0.5",
        ],
        "--multi-turn-prefix-*-ratio",
    );
    usage_error(&["echo", "--prefix-cache-tokens", "10", "--block-size", "0"], "--block-size");
    // The backends (D44) and steady state (D45).
    usage_error(&["run", "--backend", "openai-responses", "--multi-turn"], "--multi-turn: conversations go to");
    usage_error(&["run", "--backend", "openai-audio"], "--backend openai-audio and --dataset-name custom_audio");
    usage_error(&["run", "--backend", "vllm-rerank"], "--backend vllm-rerank and --dataset-name random-rerank");
    usage_error(&["run", "--backend", "openai-chat", "--random-batch-size", "4"], "--random-batch-size 4");
    usage_error(&["run", "--prompt-token-ids"], "--prompt-token-ids: needs --tokenizer");
    usage_error(&["run", "--steady-state-threshold", "0"], "--steady-state-threshold");
    usage_error(&["run", "--steady-state-threshold", "1.5"], "--steady-state-threshold");
    usage_error(&["run", "--strict", "--burstiness", "2"], "--burstiness has no effect on this run");
    usage_error(&["echo", "--embedding-dim", "0"], "--embedding-dim");
    // Capacity (D62) and --precision.
    usage_error(&["capacity", "--range", "1:8"], "--slo");
    usage_error(&["capacity", "--slo", "ttft:p99<=30"], "--range");
    usage_error(&["capacity", "--slo", "ttft:p99<=30", "--range", "8:1"], "--range");
    usage_error(&["capacity", "--slo", "ttft:99<=30", "--range", "1:8"], "--slo");
    usage_error(&["capacity", "--slo", "ttft:p99<=30", "--range", "1.5:8"], "--range");
    usage_error(
        &["capacity", "--slo", "ttft:p99<=30", "--range", "1:8", "--max-concurrency", "4"],
        "--max-concurrency",
    );
    usage_error(&["capacity", "--slo", "ttft:p99<=30", "--range", "1:8", "--over", "sessions"], "--over sessions");
    usage_error(&["capacity", "--slo", "ttft:p99<=30", "--range", "1:8", "--resolution", "5%"], "--resolution");
    usage_error(&["capacity", "--min-goodput-ratio", "0.9", "--range", "1:8"], "--min-goodput-ratio");
    usage_error(&["capacity", "--slo", "ttft:p99<=30", "--range", "1:8", "--confidence", "1.5"], "--confidence");
    usage_error(&["run", "--precision", "ttft:p99"], "--precision");
    usage_error(&["run", "--precision", "ttft:p99:0%"], "--precision");
}

/// An agent's TLS file that cannot be read is a usage error naming it, said once (it
/// exited 1 with the OS's error twice).
#[test]
fn an_agents_missing_tls_file_is_a_usage_error() {
    let missing = "/nonexistent/surge-test/ca.pem";
    let args = ["--listen", "127.0.0.1:0", "--tls-ca", missing, "--tls-cert", missing, "--tls-key", missing];
    let out = crate::util::bin_bg("surge-agent", &args).finish(Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tls-ca") && stderr.matches("os error").count() == 1, "{stderr}");
}

#[test]
fn unreachable_server_is_a_clear_error_not_a_hang() {
    // Bind then drop a listener: the port is closed, connections are refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let out = surge(&["run", "--base-url", &base, "--model", "m", "--num-prompts", "5"], Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("connect") && stderr.contains(&port.to_string()), "{stderr}");
    let out = surge(&["run", "--base-url", &base, "--num-prompts", "5"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--model"), "{}", text(&out.stderr));
    let out = surge(&["run", "--base-url", &base, "--model", "m", "--ready-timeout", "1s"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--ready-timeout"), "{}", text(&out.stderr));
}

#[test]
fn values_no_clock_or_memory_holds_are_refused_by_name() {
    // Times past a year would overflow the clocks they are added to (they panicked).
    usage_error(&["run", "--duration", "1e20"], "--duration");
    usage_error(&["run", "--duration", "400000000000y"], "--duration");
    usage_error(&["run", "--max-run-time", "1e19"], "--max-run-time");
    usage_error(&["run", "--ready-timeout", "1e19"], "--ready-timeout");
    usage_error(&["run", "--scrape-interval", "1e19"], "--scrape-interval");
    usage_error(&["run", "--profile", "--profile-duration", "1e20"], "--profile-duration");
    usage_error(&["run", "--multi-turn", "--multi-turn-delay-ms", "1e22"], "--multi-turn-delay-ms");
    usage_error(
        &["run", "--backend", "openai-chat", "--multi-turn", "--tool-loop", "--tool-latency-ms", "1e22"],
        "--tool-latency-ms",
    );
    // A GPU scrape every 0 s (a zero interval panicked), slices of a nanosecond (a
    // time series of 1e10 slices), prompts of 4e9 tokens (24 GB each).
    usage_error(
        &["run", "--no-scrape-metrics", "--gpu-metrics-url", "http://127.0.0.1:9/metrics", "--scrape-interval", "0"],
        "--scrape-interval",
    );
    usage_error(&["run", "--timeslice", "1ns"], "--timeslice");
    usage_error(&["run", "--random-input-len", "4000000000"], "--random-input-len");
    usage_error(&["run", "--sonnet-input-len", "20000000"], "--sonnet-input-len");
    usage_error(
        &["run", "--backend", "openai-embeddings", "--random-input-len", "1000000", "--random-batch-size", "64"],
        "--random-batch-size 64: up to 64000000 tokens",
    );
    usage_error(&["run", "--scrape-interval", "1ms"], "--scrape-interval");
    // The same in files: a trace's delay and length, a matrix profile's rate.
    let dir = crate::util::TempDir::new("too-long");
    let trace = dir.path("trace.jsonl");
    let lines = [
        r#"{"session_id": "a", "timestamp": 0, "input_length": 9}
{"session_id": "a", "delay": 1e22, "input_length": 9}"#,
        r#"{"timestamp": 0, "input_length": 4294967295}"#,
    ];
    let lines =
        [lines[0], lines[1], "{\"timestamp\": 0, \"input_length\": 9}\n{\"timestamp\": 1e300, \"input_length\": 9}"];
    for (text, key) in lines.into_iter().zip(["\"delay\"", "\"input_length\"", "more than a year"]) {
        std::fs::write(&trace, text).unwrap();
        usage_error(&["run", "--dataset-name", "timed_trace", "--dataset-path", &trace], key);
    }
    let config = dir.path("matrix.toml");
    let profile = "[[profile]]\ntag = \"p\"\noutput-len = 8\nconcurrency = 1\nnum-prompts = 4\n";
    for (extra, key) in
        [("input-len = 8\nrequest-rate = -1.0\n", "request-rate"), ("input-len = 20000000\n", "input-len")]
    {
        std::fs::write(&config, format!("{profile}{extra}")).unwrap();
        usage_error(&["matrix", "--config", &config], key);
    }
    // A rate of one request in more than a year sent nothing and ended as if it had sent
    // all (exit 0); a tag suffix wrote outside --result-dir.
    usage_error(&["run", "--request-rate", "1e-300"], "--request-rate");
    // Headers the agent refused at the load's start (exit 1, no flag named), or that broke
    // every body; images wider than JPEG's 16 bits, sent empty.
    usage_error(&["run", "--header", "X-A: a\u{1}b"], "--header \"X-A\"");
    usage_error(&["run", "--header", "Content-Length: 5"], "--header \"Content-Length\"");
    usage_error(
        &[
            "run",
            "--backend",
            "openai-chat",
            "--dataset-name",
            "random-mm",
            "--random-mm-bucket-config",
            "{(1, 65536, 1): 1}",
        ],
        "each side from 1 to 65535",
    );
    std::fs::write(&config, format!("{profile}input-len = 8\nrequest-rate = 1e-300\n")).unwrap();
    usage_error(&["matrix", "--config", &config], "request-rate is less than one request a year");
    std::fs::write(&config, format!("{profile}input-len = 8\n")).unwrap();
    usage_error(&["matrix", "--config", &config, "--tag-suffix", "/../../escaped"], "--tag-suffix");
    usage_error(&["capacity", "--over", "rate", "--range", "1e-12:8", "--slo", "ttft:p99<=500"], "--range");
    // A session trace whose second session comes years after the first; a trace of a
    // second replayed a billion times slower.
    std::fs::write(&trace, "{\"session_id\": \"a\", \"timestamp\": 0, \"input_length\": 9}\n{\"session_id\": \"b\", \"timestamp\": 1e12, \"input_length\": 9}").unwrap();
    usage_error(&["run", "--dataset-name", "timed_trace", "--dataset-path", &trace], "more than a year");
    std::fs::write(&trace, "{\"timestamp\": 0, \"input_length\": 9}\n{\"timestamp\": 1000, \"input_length\": 9}")
        .unwrap();
    usage_error(
        &["run", "--dataset-name", "timed_trace", "--dataset-path", &trace, "--trace-speedup", "1e-9"],
        "--trace-speedup",
    );
}

/// Values a sweep of the command line found accepted (2026-11-28): a URL's port that is
/// not one became port 80, an infinite head delay hung every stream, a TLS file that was
/// empty or another's key failed at the first connection with exit 1 and no file named,
/// `surge certs issue --name ca` overwrote the CA, and a concurrency range past `u32`
/// was clamped.
#[test]
fn ports_hosts_tls_files_and_certificates_that_cannot_be_used_are_refused_by_name() {
    for url in ["http://127.0.0.1:99999", "http://127.0.0.1:-1", "http://127.0.0.1:abc", "http://127.0.0.1:"] {
        usage_error(&["run", "--base-url", url], "--base-url");
    }
    usage_error(&["run", "--host", "127.0.0.1/x", "--port", "1"], "--host");
    usage_error(&["run", "--metrics-url", "http://127.0.0.1:70000/metrics"], "--metrics-url");
    usage_error(&["echo", "--head-delay-ms", "inf"], "--head-delay-ms");
    usage_error(&["run", "--max-run-time", "0s"], "--max-run-time");
    usage_error(&["validate", "--target", ""], "--target");
    usage_error(&["validate", "--target", "http://127.0.0.1:9", "--http-version", "3"], "--target");
    usage_error(&["run", "--top-p=-1"], "--top-p");
    usage_error(&["run", "--repetition-penalty=-1"], "--repetition-penalty");
    usage_error(&["run", "--multi-turn", "--session-id-header", "Content-Length"], "--session-id-header");
    usage_error(&["run", "--request-id-prefix", "a\r\nX-Injected: 1"], "--request-id-prefix");
    usage_error(&["capacity", "--slo", "ttft:p99<=30", "--range", "4294967296:4294967297"], "--range");
    let dir = crate::util::TempDir::new("tls-files");
    let pki = dir.path("pki");
    for args in [
        vec!["certs", "init", "--out", &pki],
        vec!["certs", "issue", "--ca", &pki, "--name", "a", "--san", "127.0.0.1", "--out", &pki],
        vec!["certs", "issue", "--ca", &pki, "--name", "b", "--san", "127.0.0.1", "--out", &pki],
    ] {
        let out = surge(&args, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
    }
    let (ca, a_pem, a_key, b_key) =
        (dir.path("pki/ca.pem"), dir.path("pki/a.pem"), dir.path("pki/a.key"), dir.path("pki/b.key"));
    let empty = dir.path("empty");
    std::fs::write(&empty, "").unwrap();
    let agents = ["run", "--agents", "127.0.0.1:1", "--tls-ca"];
    usage_error(&[&agents[..], &[empty.as_str(), "--tls-cert", &a_pem, "--tls-key", &a_key]].concat(), "--tls-ca");
    usage_error(&[&agents[..], &[ca.as_str(), "--tls-cert", &a_pem, "--tls-key", &b_key]].concat(), "--tls-key");
    let args = ["--listen", "127.0.0.1:0", "--tls-ca", &ca, "--tls-cert", &a_pem, "--tls-key", &b_key];
    let out = crate::util::bin_bg("surge-agent", &args).finish(Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--tls-key") && stderr.contains("b.key"), "{stderr}");
    let before = std::fs::read(&ca).unwrap();
    usage_error(&["certs", "issue", "--ca", &pki, "--name", "ca", "--out", &pki], "--name");
    let out = surge(&["certs", "init", "--out", &pki], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&ca).unwrap(), before, "the CA is kept");
}
