//! Several agents on 127.0.0.2-4 with mutual TLS: sharded load, exact merge, agent and
//! coordinator loss, refusals.

use crate::util::{TempDir, agent, echo, echo_metric, np_percentile, read_json, surge, surge_bg, text, wait_for};
use std::time::{Duration, Instant};

struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        let d = dir.path("");
        let ok = |args: &[&str]| {
            let out = surge(args, Duration::from_secs(30));
            assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        };
        ok(&["certs", "init", "--out", &d]);
        ok(&[
            "certs",
            "issue",
            "--ca",
            &d,
            "--name",
            "agent",
            "--san",
            "127.0.0.2",
            "--san",
            "127.0.0.3",
            "--san",
            "127.0.0.4",
            "--out",
            &d,
        ]);
        ok(&["certs", "issue", "--ca", &d, "--name", "coordinator", "--out", &d]);
        let rogue = dir.path("rogue");
        ok(&["certs", "init", "--out", &rogue]);
        ok(&["certs", "issue", "--ca", &rogue, "--name", "coordinator", "--out", &rogue]);
        Self { dir }
    }

    fn agent_args(&self) -> Vec<String> {
        vec![
            "--tls-ca".into(),
            self.dir.path("ca.pem"),
            "--tls-cert".into(),
            self.dir.path("agent.pem"),
            "--tls-key".into(),
            self.dir.path("agent.key"),
        ]
    }

    fn coordinator_args(&self, rogue: bool) -> Vec<String> {
        let d = if rogue { self.dir.path("rogue") } else { self.dir.path("") };
        let p = |f: &str| std::path::Path::new(&d).join(f).display().to_string();
        vec![
            "--tls-ca".into(),
            self.dir.path("ca.pem"),
            "--tls-cert".into(),
            p("coordinator.pem"),
            "--tls-key".into(),
            p("coordinator.key"),
        ]
    }
}

fn start_agents(pki: &Pki, ips: &[&str], extra: &[&str]) -> (Vec<crate::util::Proc>, Vec<String>) {
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    for ip in ips {
        let mut args: Vec<String> = pki.agent_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (p, a) = agent(ip, &args);
        procs.push(p);
        addrs.push(a);
    }
    (procs, addrs)
}

fn run_args<'a>(base: &'a str, agents: &'a str, tls: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", "--base-url", base, "--model", "m", "--agents", agents];
    v.extend(tls.iter().map(String::as_str));
    v.extend_from_slice(extra);
    v
}

#[test]
fn three_agents_merge_exactly() {
    let pki = Pki::new("dist");
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "100", "--itl-ms", "20"]);
    let (_agents, addrs) =
        start_agents(&pki, &["127.0.0.2", "127.0.0.3", "127.0.0.4"], &["--allowed-targets", "127.0.0.1"]);
    let agents = addrs.join(",");
    let tls = pki.coordinator_args(false);
    let result = pki.dir.path("r.json");
    let out = surge(
        &run_args(
            &base,
            &agents,
            &tls,
            &[
                "--max-concurrency",
                "2000",
                "--num-prompts",
                "10000",
                "--random-input-len",
                "64",
                "--random-output-len",
                "32",
                "--ignore-eos",
                "--percentile-metrics",
                "ttft,tpot,itl,e2el",
                "--metric-percentiles",
                "50,90,99,99.9",
                "--save-detailed",
                "--result-dir",
                &pki.dir.path(""),
                "--result-filename",
                "r.json",
            ],
        ),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let r = read_json(&result);
    assert_eq!(r["completed"], 10_000);
    assert_eq!(r["failed"], 0);
    let entries = r["client"]["agents"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries.iter().map(|a| a["completed"].as_u64().unwrap()).sum::<u64>(), 10_000);
    for a in entries {
        assert!(a["completed"].as_u64().unwrap() > 0);
        assert_eq!(a["completed"], a["agent_reported"]["completed"], "rows received = rows the agent finished");
        // One host, one clock: the estimated offset is within its bound of zero, and the
        // bound (half the best round trip) is small on loopback.
        let (offset, bound) = (a["clock_offset_ms"].as_f64().unwrap(), a["clock_offset_bound_ms"].as_f64().unwrap());
        assert!(offset.abs() <= bound + 0.05 && bound > 0.0 && bound < 5.0, "offset {offset} ms, bound {bound} ms");
        assert_eq!(a["health"], "ok");
        // The host signals came over gRPC from each agent (D14).
        let busy = a["host_busy_pct"].as_f64().unwrap();
        assert!(busy > 0.0 && busy <= 100.0, "host busy {busy}");
        if std::path::Path::new("/proc/pressure/cpu").exists() {
            let p = a["cpu_pressure_pct"].as_f64().expect("CPU pressure where the kernel has PSI");
            assert!((0.0..=100.0).contains(&p), "pressure {p}");
        }
        let num = |k: &str| a[k].as_f64().map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        eprintln!(
            "agent {}: cpu {}%, host busy {busy:.1}%, pressure {}%, coalesced {}",
            a["address"],
            num("cpu_percent"),
            num("cpu_pressure_pct"),
            num("coalesced_token_fraction")
        );
    }
    // Each agent's coalesced reads, summed over the agents, are the ITL gaps of 0 in the
    // union of the rows (every stream has 32 tokens 20 ms apart: all count).
    let coalesced: f64 = entries
        .iter()
        .map(|a| a["coalesced_token_fraction"].as_f64().unwrap() * 32.0 * a["completed"].as_f64().unwrap())
        .sum();
    let zeros = r["itls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a.as_array().unwrap())
        .filter(|v| v.as_f64() == Some(0.0))
        .count();
    assert!((coalesced - zeros as f64).abs() < 0.5, "coalesced per agent sum {coalesced} vs {zeros} gaps of 0");
    // Every agent's signals are in the time series too (D14).
    for i in 0..3u64 {
        let seen = r["time_series"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["agents"].as_array().unwrap().iter())
            .any(|a| a["agent"] == i && a["host_busy_pct"].is_f64() && a["fired"].is_array());
        assert!(seen, "agent {i} has slices with its host signals");
    }
    // Recompute every distribution from the union of the per-request rows.
    let f = |k: &str| -> Vec<f64> { r[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect() };
    let (ttfts, e2els) = (f("ttfts"), f("e2els"));
    let outs: Vec<u64> = r["output_lens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(ttfts.len(), 10_000);
    let tpots: Vec<f64> =
        (0..outs.len()).filter(|&i| outs[i] > 1).map(|i| (e2els[i] - ttfts[i]) / (outs[i] - 1) as f64).collect();
    let itls: Vec<f64> = r["itls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
        .collect();
    assert_eq!(itls.len(), 10_000 * 31);
    for (name, values) in [("ttft", &ttfts), ("tpot", &tpots), ("itl", &itls), ("e2el", &e2els)] {
        for (p, key) in [
            (50.0, format!("median_{name}_ms")),
            (50.0, format!("p50_{name}_ms")),
            (90.0, format!("p90_{name}_ms")),
            (99.0, format!("p99_{name}_ms")),
            (99.9, format!("p99.9_{name}_ms")),
        ] {
            let expect = np_percentile(values, p) * 1000.0;
            assert_eq!(r[&key].as_f64().unwrap(), expect, "{key}");
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64 * 1000.0;
        let got = r[format!("mean_{name}_ms")].as_f64().unwrap();
        assert!((got - mean).abs() <= 1e-9 * mean.abs(), "mean_{name}_ms {got} vs {mean}");
    }
}

#[test]
fn losing_an_agent_aborts_the_run_and_keeps_what_arrived() {
    let pki = Pki::new("lose");
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "50", "--itl-ms", "10"]);
    let (mut agents, addrs) =
        start_agents(&pki, &["127.0.0.2", "127.0.0.3", "127.0.0.4"], &["--allowed-targets", "127.0.0.0/8"]);
    let joined = addrs.join(",");
    let tls = pki.coordinator_args(false);
    let dir = pki.dir.path("");
    let bg = surge_bg(&run_args(
        &base,
        &joined,
        &tls,
        &[
            "--max-concurrency",
            "150",
            "--num-prompts",
            "100000",
            "--random-input-len",
            "8",
            "--random-output-len",
            "16",
            "--ignore-eos",
            "--save-result",
            "--result-dir",
            &dir,
            "--result-filename",
            "lost.json",
        ],
    ));
    wait_for(Duration::from_secs(30), "load to flow", || echo_metric(&base, "surge_echo_requests_total") > 600.0);
    let killed = Instant::now();
    agents[1].kill9();
    let out = bg.finish(Duration::from_secs(30));
    let elapsed = killed.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("agent {} lost", addrs[1])), "{stderr}");
    assert!(elapsed < Duration::from_secs(8), "took {elapsed:?} to report and exit");
    let r = read_json(&pki.dir.path("lost.json"));
    assert_eq!(r["client"]["status"], "invalid");
    let entries = r["client"]["agents"].as_array().unwrap();
    assert!(entries[1]["health"].as_str().unwrap().starts_with("lost"), "{entries:?}");
    assert!(entries[1]["rows_received"].as_u64().unwrap() > 0, "the lost agent's batches that arrived are kept");
    assert!(r["completed"].as_u64().unwrap() > 300);
}

#[test]
fn a_dead_coordinator_stops_the_load_and_the_agent_serves_the_next() {
    let pki = Pki::new("coorddeath");
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "50", "--itl-ms", "10"]);
    let (mut agents, addrs) = start_agents(&pki, &["127.0.0.2"], &["--allowed-targets", "127.0.0.1"]);
    let tls = pki.coordinator_args(false);
    let mut bg = surge_bg(&run_args(
        &base,
        &addrs[0],
        &tls,
        &[
            "--max-concurrency",
            "100",
            "--num-prompts",
            "100000",
            "--random-input-len",
            "8",
            "--random-output-len",
            "16",
        ],
    ));
    wait_for(Duration::from_secs(30), "load to flow", || echo_metric(&base, "surge_echo_requests_total") > 300.0);
    bg.proc.kill9();
    // Tokens, not requests: scraping /metrics is itself a request. The agent keeps the
    // session for a resume until its 3 s lease from the last message runs out, so the
    // first reading waits a second past it (one at 3 s raced the agent's own stop).
    std::thread::sleep(Duration::from_secs(4));
    let a = echo_metric(&base, "surge_echo_tokens_total");
    std::thread::sleep(Duration::from_millis(1500));
    let b = echo_metric(&base, "surge_echo_tokens_total");
    assert_eq!(a, b, "load continued after the coordinator died");
    assert_eq!(echo_metric(&base, "surge_echo_requests_running"), 0.0);
    assert!(agents[0].alive(), "the agent process must survive its coordinator");
    let out = surge(
        &run_args(
            &base,
            &addrs[0],
            &tls,
            &["--max-concurrency", "10", "--num-prompts", "50", "--random-input-len", "8", "--random-output-len", "4"],
        ),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Successful requests:                     50"));
}

#[test]
fn refusals_are_clear() {
    let pki = Pki::new("refuse");
    let (_echo, base) = echo("127.0.0.1", &[]);
    let (_agents, addrs) = start_agents(&pki, &["127.0.0.2"], &["--allowed-targets", "127.0.0.1"]);
    // A coordinator whose certificate another CA signed.
    let rogue = pki.coordinator_args(true);
    let out = surge(&run_args(&base, &addrs[0], &rogue, &["--num-prompts", "5"]), Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&addrs[0]) && stderr.contains("TLS"), "{stderr}");
    // A target outside the allowlist.
    let tls = pki.coordinator_args(false);
    let out =
        surge(&run_args("http://127.0.0.9:8000", &addrs[0], &tls, &["--num-prompts", "5"]), Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("allowlist") && stderr.contains("127.0.0.9"), "{stderr}");
    // Plaintext to a TLS agent does not get through either.
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--agents",
            &addrs[0],
            "--agents-plaintext",
            "--num-prompts",
            "5",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

#[test]
fn sigterm_to_an_agent_flushes_its_rows_and_ends_its_session() {
    let pki = Pki::new("sigterm");
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "10"]);
    let (mut agents, addrs) = start_agents(&pki, &["127.0.0.2", "127.0.0.3"], &["--allowed-targets", "127.0.0.1"]);
    let joined = addrs.join(",");
    let tls = pki.coordinator_args(false);
    let dir = pki.dir.path("");
    let bg = surge_bg(&run_args(
        &base,
        &joined,
        &tls,
        &[
            "--max-concurrency",
            "40",
            "--num-prompts",
            "100000",
            "--random-input-len",
            "8",
            "--random-output-len",
            "8",
            "--ignore-eos",
            "--save-result",
            "--result-dir",
            &dir,
            "--result-filename",
            "term.json",
        ],
    ));
    wait_for(Duration::from_secs(30), "load to flow", || echo_metric(&base, "surge_echo_requests_total") > 300.0);
    agents[0].signal("TERM");
    let status = agents[0].wait_exit(Duration::from_secs(10)).expect("the agent exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    let out = bg.finish(Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&addrs[0]) && stderr.contains("signal"), "{stderr}");
    let r = read_json(&pki.dir.path("term.json"));
    let a0 = &r["client"]["agents"][0];
    assert_eq!(a0["stop_reason"], "signal", "{a0}");
    // Everything it finished reached the coordinator: the rows received equal its own count.
    let own = &a0["agent_reported"];
    assert_eq!(
        a0["rows_received"].as_u64().unwrap(),
        own["completed"].as_u64().unwrap() + own["failed"].as_u64().unwrap() + own["cancelled"].as_u64().unwrap(),
        "{a0}"
    );
    assert!(a0["completed"].as_u64().unwrap() > 0);
}

/// One agent's path to the target fails (the target denies its source address): under
/// load its errors are counted and the examples name it; the initial test stops the run
/// naming it.
#[test]
fn one_agents_failing_path_is_named() {
    let pki = Pki::new("path");
    let (_echo, base) = echo("127.0.0.1", &["--deny-peer", "127.0.0.3"]);
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        let mut args = pki.agent_args();
        args.extend(["--allowed-targets".into(), "127.0.0.1".into(), "--local-address".into(), ip.into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (p, a) = crate::util::agent(ip, &args);
        procs.push(p);
        addrs.push(a);
    }
    let agents = addrs.join(",");
    let tls = pki.coordinator_args(false);
    let d = pki.dir.path("");
    let load =
        ["--num-prompts", "200", "--max-concurrency", "8", "--random-input-len", "16", "--random-output-len", "4"];
    let mut extra = load.to_vec();
    extra.extend(["--no-initial-test", "--result-dir", &d, "--result-filename", "r.json", "--save-result"]);
    let out = surge(&run_args(&base, &agents, &tls, &extra), Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let r = read_json(&pki.dir.path("r.json"));
    let failed = r["errors_by_kind"]["http_status"].as_u64().unwrap();
    assert_eq!(r["completed"].as_u64().unwrap() + failed, 200);
    let examples = r["error_examples"]["http_status"].as_array().unwrap();
    assert_eq!(examples.len(), 1, "{examples:?}");
    assert_eq!(examples[0]["count"].as_u64().unwrap(), failed);
    assert_eq!(examples[0]["http_status"], 403);
    assert_eq!(examples[0]["agent"], addrs[1].as_str(), "{examples:?}");
    assert!(examples[0]["message"].as_str().unwrap().contains("127.0.0.3 are not allowed"), "{examples:?}");
    let by_agent = r["client"]["agents"].as_array().unwrap();
    assert!(by_agent.iter().any(|a| a["address"] == addrs[0].as_str() && a["completed"].as_u64().unwrap() > 0));

    // With the initial test, the run stops before the load and names the agent.
    let out = surge(&run_args(&base, &agents, &tls, &load), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains(&addrs[1]) && err.contains("HTTP 403") && err.contains("initial test"), "{err}");
    drop(procs);
}
