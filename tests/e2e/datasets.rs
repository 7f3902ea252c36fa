//! Datasets and token counts end to end: exact random prompt lengths from the fixture
//! tokenizer as the server counts them (`surge echo --tokenizer`), the tokenizer shipped
//! to agents that have no file, ShareGPT and custom JSONL files, and bad files refused up
//! front with `FILE:LINE: reason` and exit code 2.

use crate::util::{TempDir, agent, echo, echo_metric, read_json, surge, text};
use std::collections::HashSet;
use std::time::Duration;

fn fixture(rel: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel).display().to_string()
}

/// `surge run ARGS --save-detailed` into a scratch directory; returns the result.
fn run(tag: &str, args: &[&str]) -> serde_json::Value {
    let dir = TempDir::new(tag);
    let mut all = vec!["run", "--save-detailed", "--result-dir"];
    let d = dir.path("");
    all.push(&d);
    all.extend_from_slice(&["--result-filename", "r.json"]);
    all.extend_from_slice(args);
    let out = surge(&all, Duration::from_secs(180));
    assert!(out.status.success(), "{all:?}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    read_json(&dir.path("r.json"))
}

#[test]
fn random_prompts_are_exactly_1024_tokens_at_the_server() {
    let tok = fixture("tokenizer/tokenizer.json");
    let (_echo, base) = echo("127.0.0.1", &["--tokenizer", &tok]);
    let n = 300u64;
    let ns = n.to_string();
    let r = run(
        "tok1024",
        &[
            "--base-url",
            &base,
            "--model",
            "m",
            "--tokenizer",
            &fixture("tokenizer"),
            "--random-input-len",
            "1024",
            "--random-output-len",
            "4",
            "--num-prompts",
            &ns,
            "--max-concurrency",
            "32",
            "--ignore-eos",
            // The server's prompt-token count must be the run's alone.
            "--no-initial-test",
        ],
    );
    assert_eq!(r["completed"], n);
    assert_eq!(r["input_tokens_source"], "server_usage");
    assert_eq!(r["total_input_tokens"], n * 1024, "the server counted other lengths");
    let lens: Vec<u64> = r["input_lens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(lens.iter().all(|&l| l == 1024), "{lens:?}");
    assert_eq!(echo_metric(&base, "surge_echo_prompt_tokens_total"), (n * 1024) as f64);
    assert_eq!(r["run_metadata"]["tokenizer"]["sha256"].as_str().map(str::len), Some(64));
}

#[test]
fn two_agents_get_the_tokenizer_and_take_turns_by_index() {
    let tok = fixture("tokenizer/tokenizer.json");
    let (_echo, base) = echo("127.0.0.1", &["--tokenizer", &tok]);
    let agent_args = ["--plaintext", "--allowed-targets", "127.0.0.1"];
    let (_a1, addr1) = agent("127.0.0.1", &agent_args);
    let (_a2, addr2) = agent("127.0.0.1", &agent_args);
    let agents = format!("{addr1},{addr2}");
    let r = run(
        "tok2agents",
        &[
            "--base-url",
            &base,
            "--model",
            "m",
            "--tokenizer",
            &tok,
            "--random-input-len",
            "256",
            "--random-prefix-len",
            "16",
            "--random-output-len",
            "4",
            "--num-prompts",
            "200",
            "--max-concurrency",
            "20",
            "--agents",
            &agents,
            "--agents-plaintext",
        ],
    );
    assert_eq!(r["completed"], 200);
    assert_eq!(r["total_input_tokens"], 200 * 272);
    let shares: Vec<u64> =
        r["client"]["agents"].as_array().unwrap().iter().map(|a| a["share"]["num_prompts"].as_u64().unwrap()).collect();
    assert_eq!(shares.iter().sum::<u64>(), 200);
    assert!(shares.iter().all(|&s| s > 0), "{shares:?}");
    // Requests by global index: the two agents (same host, same cores) take turns (D20).
    let by_index: Vec<u64> = r["agent_indices"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(by_index.iter().collect::<HashSet<_>>().len(), 2, "both agents sent requests");
    assert!(by_index.windows(2).all(|w| w[0] != w[1]), "round-robin by index: {by_index:?}");
    let cycles: Vec<u64> =
        r["client"]["agents"].as_array().unwrap().iter().map(|a| a["share"]["index_cycle"].as_u64().unwrap()).collect();
    assert_eq!(cycles, [2, 2]);
}

#[test]
fn sharegpt_and_custom_files_load_and_run() {
    let tok = fixture("tokenizer/tokenizer.json");
    let (_echo, base) = echo("127.0.0.1", &["--tokenizer", &tok]);
    let r = run(
        "sharegpt",
        &[
            "--base-url",
            &base,
            "--model",
            "m",
            "--tokenizer",
            &tok,
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            &fixture("datasets/sharegpt.json"),
            "--num-prompts",
            "10",
            "--max-concurrency",
            "4",
        ],
    );
    assert_eq!(r["completed"], 10);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["run_metadata"]["dataset_name"], "sharegpt");
    let r = run(
        "custom",
        &[
            "--base-url",
            &base,
            "--model",
            "m",
            "--backend",
            "openai-chat",
            "--dataset-name",
            "custom",
            "--dataset-path",
            &fixture("datasets/custom.jsonl"),
            "--num-prompts",
            "8",
            "--max-concurrency",
            "2",
        ],
    );
    assert_eq!(r["completed"], 8);
    let outs: Vec<u64> = r["output_lens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    // The file's first pass in file order, the second in a new order of the same lines (D20).
    assert_eq!(outs[..4], [16, 256, 8, 40], "output_tokens per line, default 256");
    let mut second = outs[4..].to_vec();
    second.sort_unstable();
    assert_eq!(second, [8, 16, 40, 256], "every line again");
    assert_eq!(r["dataset_passes"], 2);
    let r = run(
        "prefixrep",
        &[
            "--base-url",
            &base,
            "--model",
            "m",
            "--tokenizer",
            &tok,
            "--dataset-name",
            "prefix-repetition",
            "--prefix-repetition-num-prefixes",
            "3",
            "--prefix-repetition-prefix-len",
            "64",
            "--prefix-repetition-suffix-len",
            "32",
            "--prefix-repetition-output-len",
            "5",
            "--num-prompts",
            "30",
            "--max-concurrency",
            "6",
        ],
    );
    assert_eq!(r["total_input_tokens"], 30 * 96);
    assert_eq!(r["total_output_tokens"], 30 * 5);
}

#[test]
fn bad_dataset_and_tokenizer_files_fail_up_front_with_exit_2() {
    let check = |args: &[&str], wanted: &[&str]| {
        let out = surge(args, Duration::from_secs(30));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for w in wanted {
            assert!(stderr.contains(w), "{args:?}: {w:?} not in {stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    // No server is needed: the file is refused before any load.
    let base = ["run", "--base-url", "http://127.0.0.1:9", "--model", "m"];
    let with = |extra: &[&'static str]| -> Vec<String> { base.iter().chain(extra).map(|s| s.to_string()).collect() };
    let bad = fixture("datasets/bad.jsonl");
    let args = [with(&["--dataset-name", "custom", "--dataset-path"]), vec![bad.clone()]].concat();
    check(&args.iter().map(String::as_str).collect::<Vec<_>>(), &["--dataset-path", "bad.jsonl:3: ", "not JSON"]);
    let args = [with(&["--dataset-name", "sharegpt", "--dataset-path"]), vec![bad]].concat();
    check(&args.iter().map(String::as_str).collect::<Vec<_>>(), &["bad.jsonl:1: ", "expected a sequence"]);
    check(
        &with(&["--tokenizer", "/nonexistent/tokenizer.json"]).iter().map(String::as_str).collect::<Vec<_>>(),
        &["--tokenizer", "/nonexistent/tokenizer.json"],
    );
    let not_tok = fixture("datasets/custom.jsonl");
    let args = [with(&["--tokenizer"]), vec![not_tok]].concat();
    check(&args.iter().map(String::as_str).collect::<Vec<_>>(), &["--tokenizer", "not a valid tokenizer.json"]);
    check(&with(&["--dataset-name", "sharegpt"]).iter().map(String::as_str).collect::<Vec<_>>(), &["--dataset-path"]);
    check(
        &with(&["--random-range-ratio", "1.5"]).iter().map(String::as_str).collect::<Vec<_>>(),
        &["--random-range-ratio"],
    );
    check(&["echo", "--tokenizer", "/nonexistent/tok.json"], &["--tokenizer"]);
}
