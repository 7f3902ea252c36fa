//! The fleet as deployments start it: agents that come up after the coordinator, runs that
//! go on with some of their agents, and the graceful end of a duration run (D21).

use crate::util::{TempDir, agent, echo, read_json, surge, surge_bg, text};
use std::time::{Duration, Instant};

/// A free TCP port on `ip` (the kernel's pick; free again once returned).
fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0)).and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A `surge-agent` listening on `addr` (plaintext, the loopback target allowed), not waited
/// for: the coordinator under test waits. Killed when dropped, also when an assertion fails.
fn agent_at(addr: &str) -> crate::util::Proc {
    let child = std::process::Command::new(crate::util::bin("surge-agent"))
        .args(["--listen", addr, "--plaintext", "--allowed-targets", "127.0.0.1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the agent");
    crate::util::Proc { child }
}

fn run_args<'a>(base: &'a str, agents: &'a str, dir: &'a TempDir, file: &'a str) -> Vec<String> {
    [
        "run",
        "--base-url",
        base,
        "--model",
        "m",
        "--num-prompts",
        "40",
        "--max-concurrency",
        "4",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--agents",
        agents,
        "--agents-plaintext",
        "--save-result",
        "--result-dir",
        &dir.path(""),
        "--result-filename",
        file,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn a_coordinator_started_before_an_agent_waits_for_it_and_says_so() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let agent_args = ["--plaintext", "--allowed-targets", "127.0.0.1"];
    let (_a1, addr1) = agent("127.0.0.2", &agent_args);
    let port = free_port("127.0.0.3");
    let late = format!("127.0.0.3:{port}");
    let agents = format!("{addr1},{late}");
    let dir = TempDir::new("late-agent");
    let args = run_args(&base, &agents, &dir, "late.json");
    let bg = surge_bg(&args.iter().map(String::as_str).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(3));
    let _a2 = agent_at(&late);
    let out = bg.finish(Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", text(&out.stdout));
    assert!(stderr.contains("waiting for agent(s) 127.0.0.3"), "it says whom it waits for: {stderr}");
    // The run prints the fleet check's table at start.
    assert!(text(&out.stdout).contains("allowed targets"), "{}", text(&out.stdout));
    let r = read_json(&dir.path("late.json"));
    assert_eq!(r["completed"], 40);
    assert_eq!(r["client"]["agents"].as_array().map(Vec::len), Some(2));
    assert!(r["client"]["agents_waited_s"].as_f64().is_some_and(|w| w >= 2.5), "{}", r["client"]);
}

/// An agent that goes away after the coordinator's connection was accepted, before the
/// session opened (a restart, or on loopback a new connection meeting the old one's closing
/// state), is waited for as an agent not yet listening is (D42, D87): the run starts once
/// the agent is back, instead of failing with "session refused".
#[test]
fn an_agent_that_drops_the_first_connection_before_the_session_opens_is_waited_for() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let agent_args = ["--plaintext", "--allowed-targets", "127.0.0.1"];
    let (_a1, addr1) = agent("127.0.0.2", &agent_args);
    // A listener that takes the first connection, then closes it and itself.
    let fake = std::net::TcpListener::bind(("127.0.0.3", 0)).expect("bind");
    let late = fake.local_addr().expect("addr").to_string();
    fake.set_nonblocking(true).expect("nonblocking");
    let agents = format!("{addr1},{late}");
    let dir = TempDir::new("dropped-agent");
    let args = run_args(&base, &agents, &dir, "dropped.json");
    let bg = surge_bg(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let until = Instant::now() + Duration::from_secs(30);
    let accepted = loop {
        match fake.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("the coordinator never connected: {e}"),
        }
    };
    drop(accepted);
    drop(fake);
    // Down a while: the coordinator's next connection finds nothing listening.
    std::thread::sleep(Duration::from_millis(500));
    let _a2 = agent_at(&late);
    let out = bg.finish(Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", text(&out.stdout));
    let r = read_json(&dir.path("dropped.json"));
    assert_eq!(r["completed"], 40);
    assert_eq!(r["client"]["agents"].as_array().map(Vec::len), Some(2));
    assert!(r["client"]["agents_waited_s"].as_f64().is_some_and(|w| w > 0.0), "{}", r["client"]);
}

#[test]
fn an_agent_missing_past_the_connect_timeout_is_named_or_left_with_min_agents() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let (_a1, addr1) = agent("127.0.0.2", &["--plaintext", "--allowed-targets", "127.0.0.1"]);
    let missing = format!("127.0.0.3:{}", free_port("127.0.0.3"));
    let agents = format!("{addr1},{missing}");
    let dir = TempDir::new("missing-agent");
    let mut args = run_args(&base, &agents, &dir, "missing.json");
    args.extend(["--agent-connect-timeout".into(), "2s".into()]);
    let t = Instant::now();
    let out = surge(&args.iter().map(String::as_str).collect::<Vec<_>>(), Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&missing) && stderr.contains("--agent-connect-timeout"), "{stderr}");
    assert!(t.elapsed() < Duration::from_secs(15), "gave up after {:?}", t.elapsed());
    // With --min-agents 1 the run goes on with the agent it reached, and says which is missing.
    args.extend(["--min-agents".into(), "1".into()]);
    let out = surge(&args.iter().map(String::as_str).collect::<Vec<_>>(), Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_json(&dir.path("missing.json"));
    assert_eq!(r["completed"], 40);
    assert_eq!(r["client"]["agents_missing"], serde_json::json!([missing]));
    assert!(text(&out.stdout).contains("Agents missing (--min-agents):"));
}

#[test]
fn the_requests_in_flight_at_the_duration_get_the_graceful_stop_then_are_cancelled() {
    // 20 streams of 200 tokens, 100 ms to the first and 10 ms apart (2.09 s each): the
    // second wave is in flight at 3 s and would end at about 4.18 s, after the 1 s grace.
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "100", "--itl-ms", "10"]);
    let dir = TempDir::new("graceful");
    let t = Instant::now();
    let out = surge(
        &[
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--random-input-len",
            "8",
            "--random-output-len",
            "200",
            "--max-concurrency",
            "20",
            "--duration",
            "3s",
            "--graceful-stop",
            "1s",
            "--save-result",
            "--result-dir",
            &dir.path(""),
            "--result-filename",
            "g.json",
        ],
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}\n{stderr}", text(&out.stdout));
    let r = read_json(&dir.path("g.json"));
    assert_eq!(r["ended_by"], "duration");
    assert_eq!((r["completed"].as_u64(), r["cancelled"].as_u64(), r["failed"].as_u64()), (Some(20), Some(20), Some(0)));
    assert!(
        r["errors_by_kind"].get("cancelled").is_none(),
        "cancelled requests are not errors: {}",
        r["errors_by_kind"]
    );
    let d = r["duration"].as_f64().unwrap();
    assert!((3.9..4.3).contains(&d), "duration {d}: to the cancellation at 3 s + 1 s");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

/// `surge-agent` on `ip` with its open-file limit lowered to `nofile` first.
fn agent_with_nofile(ip: &str, nofile: u32) -> (crate::util::Proc, String) {
    let script = format!("ulimit -n {nofile} && exec \"$0\" \"$@\"");
    let port = free_port(ip);
    let listen = format!("{ip}:{port}");
    let child = std::process::Command::new("sh")
        .args(["-c", &script, &crate::util::bin("surge-agent").display().to_string()])
        .args(["--listen", &listen, "--plaintext", "--allowed-targets", "127.0.0.1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn an agent under ulimit");
    let proc = crate::util::Proc { child };
    crate::util::wait_for(Duration::from_secs(20), "the agent to listen", || {
        std::net::TcpStream::connect(&listen).is_ok()
    });
    (proc, listen)
}

#[test]
fn fleet_check_names_each_agent_that_cannot_run_the_load() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let (_ok, ok) = agent("127.0.0.2", &["--plaintext", "--allowed-targets", "127.0.0.1"]);
    let (_elsewhere, elsewhere) = agent("127.0.0.3", &["--plaintext", "--allowed-targets", "10.0.0.0/8"]);
    let (_low, low) = agent_with_nofile("127.0.0.4", 250);
    let agents = format!("{ok},{elsewhere},{low}");
    // 600 in flight: 200 for each agent; 250 open files leave 150 connections.
    let check = |agents: &str| {
        let args = [
            "fleet",
            "check",
            "--agents",
            agents,
            "--agents-plaintext",
            "--base-url",
            &base,
            "--max-concurrency",
            "600",
        ];
        surge(&args, Duration::from_secs(60))
    };
    let out = check(&agents);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", text(&out.stderr));
    let line = |addr: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(addr))
            .unwrap_or_else(|| panic!("no line for {addr}: {stdout}"))
            .to_string()
    };
    assert!(line(&ok).ends_with(" ok"), "{}", line(&ok));
    assert!(line(&ok).contains("(200)"), "it reached the target: {}", line(&ok));
    assert!(
        line(&elsewhere).contains("FAIL: may not load") && line(&elsewhere).contains("allowlist"),
        "{}",
        line(&elsewhere)
    );
    assert!(line(&low).contains("FAIL") && line(&low).contains("open-file limit 250"), "{}", line(&low));
    // Three agents that can: exit 0.
    let (_b, b) = agent("127.0.0.3", &["--plaintext", "--allowed-targets", "127.0.0.1"]);
    let (_c, c) = agent("127.0.0.4", &["--plaintext", "--allowed-targets", "127.0.0.1"]);
    let out = check(&format!("{ok},{b},{c}"));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().filter(|l| l.ends_with(" ok")).count(), 3);
}

/// A rolling upgrade (D43): an agent of the previous protocol version (the hidden
/// `--emulate-protocol 9` reads and writes version 9's wire) runs beside a current one;
/// one two versions back is refused before any request, both versions named.
#[test]
fn an_agent_one_protocol_version_back_runs_and_two_back_is_refused() {
    let dir = TempDir::new("rolling");
    // HTTP/3 is asked for: an agent that read version 9's field wrongly (0 = auto) would
    // go over TCP, and the echo's HTTP/3 count would fall short.
    let (_echo, base, ca) = crate::h3util::echo_h3(&dir, &["--ttft-ms", "100", "--itl-ms", "10"]);
    let agent_args = ["--plaintext", "--allowed-targets", "127.0.0.1"];
    let (_new, new_addr) = agent("127.0.0.2", &agent_args);
    let (_old, old_addr) =
        agent("127.0.0.3", &["--plaintext", "--allowed-targets", "127.0.0.1", "--emulate-protocol", "9"]);
    let agents = format!("{new_addr},{old_addr}");
    // 4 streams of 150 tokens (1.6 s each): the second wave is in flight at 2 s + 1 s of
    // grace and is cancelled there, on the old agent by its Start's deadline.
    let run = |agents: &str, file: &str| {
        surge(
            &[
                "run",
                "--base-url",
                &base,
                "--ca-cert",
                &ca,
                "--http-version",
                "3",
                "--no-initial-test",
                "--model",
                "m",
                "--random-input-len",
                "8",
                "--random-output-len",
                "150",
                "--max-concurrency",
                "4",
                "--duration",
                "2s",
                "--graceful-stop",
                "1s",
                "--agents",
                agents,
                "--agents-plaintext",
                "--save-result",
                "--result-dir",
                &dir.path(""),
                "--result-filename",
                file,
            ],
            Duration::from_secs(90),
        )
    };
    let out = run(&agents, "rolling.json");
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let r = read_json(&dir.path("rolling.json"));
    let protocols: Vec<u64> =
        r["client"]["agents"].as_array().unwrap().iter().map(|a| a["protocol"].as_u64().unwrap()).collect();
    assert_eq!(protocols, [u64::from(surge_proto::PROTOCOL_VERSION), 9]);
    assert_eq!(r["ended_by"], "duration");
    assert_eq!((r["completed"].as_u64(), r["cancelled"].as_u64(), r["failed"].as_u64()), (Some(4), Some(4), Some(0)));
    for a in r["client"]["agents"].as_array().unwrap() {
        assert_eq!((a["completed"].as_u64(), a["stop_reason"].as_str()), (Some(2), Some("duration")), "{a}");
    }
    // Each agent's own counts: version 10 keeps cancelled apart, version 9 counted them failed.
    let own = |i: usize, k: &str| r["client"]["agents"][i]["agent_reported"][k].as_u64();
    assert_eq!((own(0, "failed"), own(0, "cancelled")), (Some(0), Some(2)));
    assert_eq!((own(1, "failed"), own(1, "cancelled")), (Some(2), Some(0)));
    // The 8 requests (4 completed, 4 cancelled), every one over HTTP/3.
    let h3 = crate::h3util::metric(&base, &ca, "surge_echo_http3_requests_total");
    assert_eq!(h3, 8.0, "requests over HTTP/3");
    // Two versions back: refused before any request, naming both versions.
    let older = surge_proto::PREVIOUS_PROTOCOL_VERSION - 1;
    let (_oldest, oldest_addr) = agent(
        "127.0.0.4",
        &["--plaintext", "--allowed-targets", "127.0.0.1", "--emulate-protocol", &older.to_string()],
    );
    let out = run(&format!("{new_addr},{oldest_addr}"), "refused.json");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&oldest_addr)
            && stderr.contains(&format!("agent speaks version {older}"))
            && stderr.contains(&format!("speaks protocol version {}", surge_proto::PROTOCOL_VERSION))
            && stderr.contains("upgrade the agent"),
        "{stderr}"
    );
    assert_eq!(crate::h3util::metric(&base, &ca, "surge_echo_http3_requests_total"), h3, "no request sent");
}

/// D46: an agent of protocol 9 given a feature protocol 10 added is refused before any
/// load, naming the agent and the feature: each feature in turn (it would otherwise send
/// text for token ids, completions for a pooling backend, one prompt for a batch). The
/// same agent given none of them runs (also `an_agent_one_protocol_version_back_runs...`).
#[test]
fn a_version_9_agent_is_refused_each_newer_feature_before_any_load() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let dir = TempDir::new("v9-features");
    let files = dir.path("audio");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(format!("{files}/a.wav"), crate::backends::wav(8_000)).unwrap();
    let tok = format!("{}/fixtures/tokenizer", env!("CARGO_MANIFEST_DIR"));
    let (_old, old) = agent("127.0.0.3", &["--plaintext", "--allowed-targets", "127.0.0.1", "--emulate-protocol", "9"]);
    let cases: &[(&[&str], &str)] = &[
        (&["--tokenizer", &tok, "--prompt-token-ids"], "--prompt-token-ids"),
        (&["--backend", "vllm-pooling"], "--backend vllm-pooling"),
        (&["--backend", "openai-embeddings", "--random-batch-size", "4"], "--backend openai-embeddings"),
        (&["--backend", "vllm-rerank", "--dataset-name", "random-rerank"], "--backend vllm-rerank"),
        (&["--backend", "openai-responses"], "--backend openai-responses"),
        (
            &["--backend", "openai-audio", "--dataset-name", "custom_audio", "--dataset-path", &files],
            "--backend openai-audio",
        ),
        (&["--backend", "openai-chat", "--multi-turn", "--multi-turn-num-turns", "2"], "--multi-turn"),
    ];
    for (extra, feature) in cases {
        let mut args = vec![
            "run",
            "--base-url",
            &base,
            "--model",
            "m",
            "--num-prompts",
            "4",
            "--agents",
            &old,
            "--agents-plaintext",
        ];
        args.extend_from_slice(extra);
        let out = surge(&args, Duration::from_secs(60));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{feature}: {stderr}");
        assert!(
            stderr.contains(&old)
                && stderr.contains("protocol version 9")
                && stderr.contains(feature)
                && stderr.contains("upgrade"),
            "{feature}: {stderr}"
        );
    }
    // No completion reached the target (the model lookup's GET /v1/models is no load).
    assert_eq!(crate::util::echo_metric(&base, "surge_echo_prompt_tokens_total"), 0.0, "no request reached the target");
    let out = surge(
        &["run", "--base-url", &base, "--model", "m", "--num-prompts", "4", "--agents", &old, "--agents-plaintext"],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "a run with none of them: {}", text(&out.stderr));
}
