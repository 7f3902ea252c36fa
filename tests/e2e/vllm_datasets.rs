//! vLLM's other datasets from local files, end to end (D20, D27): `burstgpt` (CSV
//! lengths, prompts made by the agents), `spec_bench`, `sonnet`, `hf` (a local copy named
//! by `--hf-name`) and `random-mm` (images in chat content), and their refusals (exit 2
//! naming the flag).

use crate::util::{TempDir, echo, echo_metric, read_json, surge, text};
use std::collections::HashSet;
use std::time::Duration;

fn run(dir: &TempDir, args: &[&str]) -> serde_json::Value {
    let d = dir.path("");
    let mut all = vec!["run", "--save-detailed", "--result-dir", &d, "--result-filename", "r.json", "--model", "m"];
    all.extend_from_slice(args);
    let out = surge(&all, Duration::from_secs(120));
    assert!(out.status.success(), "{all:?}\n{}", text(&out.stderr));
    read_json(&dir.path("r.json"))
}

fn refused(args: &[&str], says: &str) {
    let mut all = vec!["run", "--base-url", "http://127.0.0.1:9", "--num-prompts", "1"];
    all.extend_from_slice(args);
    let out = surge(&all, Duration::from_secs(30));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{all:?}: {err}");
    assert!(err.contains(says), "{all:?}: {err}");
}

fn u64s(r: &serde_json::Value, key: &str) -> Vec<u64> {
    r[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
}

#[test]
fn burstgpt_replays_gpt4_lengths() {
    let dir = TempDir::new("burstgpt");
    let mut csv = String::from("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n");
    for i in 0..40u32 {
        let model = if i % 4 == 0 { "ChatGPT" } else { "GPT-4" };
        let response = if i % 5 == 0 { 0 } else { 2 + i % 7 };
        csv.push_str(&format!("{i},{model},{},{response},0,Conversation log\n", 10 + i));
    }
    let path = dir.path("burst.csv");
    std::fs::write(&path, &csv).unwrap();
    let (_echo, base) = echo("127.0.0.1", &[]);
    let r =
        run(&dir, &["--base-url", &base, "--dataset-name", "burstgpt", "--dataset-path", &path, "--num-prompts", "20"]);
    assert_eq!(r["completed"], 20, "{r}");
    // Each request has a GPT-4 row's lengths (prompt words as the echo counts them, the
    // response's max_tokens), with a response, and no row twice (20 of the 24 usable).
    let usable: HashSet<(u64, u64)> =
        (0..40u64).filter(|i| i % 4 != 0 && i % 5 != 0).map(|i| (10 + i, 2 + i % 7)).collect();
    let pairs: Vec<(u64, u64)> = u64s(&r, "input_lens").into_iter().zip(u64s(&r, "output_lens")).collect();
    assert!(pairs.iter().all(|p| usable.contains(p)), "{pairs:?}");
    let inputs: HashSet<u64> = pairs.iter().map(|p| p.0).collect();
    assert_eq!(inputs.len(), 20, "sampled without replacement: {pairs:?}");
    assert_eq!(r["input_tokens_source"], "server_usage");
    // More requests than usable rows: the requests cycle through the rows.
    let dir2 = TempDir::new("burstgpt-cycle");
    let r = run(
        &dir2,
        &["--base-url", &base, "--dataset-name", "burstgpt", "--dataset-path", &path, "--num-prompts", "100"],
    );
    assert_eq!(r["completed"], 100, "{r}");
    let pairs: HashSet<(u64, u64)> = u64s(&r, "input_lens").into_iter().zip(u64s(&r, "output_lens")).collect();
    assert_eq!(pairs, usable, "every usable row, none other");
}

/// A file shorter than the run (D20): the first pass in file order, each later pass in a
/// new seeded order of every entry, `dataset_passes` in the result; `--no-oversample`
/// ends the run at the end of the file instead (`ended_by` "dataset"). Entries are told
/// apart by their prompt's word count (1 to 10 words).
#[test]
fn a_short_file_is_sent_again_in_new_orders_unless_no_oversample() {
    let dir = TempDir::new("passes");
    let path = dir.path("ten.jsonl");
    let lines: String = (1..=10)
        .map(|n| format!("{{\"prompt\": \"{}\", \"output_tokens\": 2}}\n", vec!["word"; n].join(" ")))
        .collect();
    std::fs::write(&path, lines).unwrap();
    let (_echo, base) = echo("127.0.0.1", &[]);
    let args = ["--base-url", &base, "--dataset-name", "custom", "--dataset-path", &path, "--max-concurrency", "4"];
    let mut more = args.to_vec();
    more.extend(["--num-prompts", "25"]);
    let r = run(&dir, &more);
    assert_eq!((r["completed"].as_u64(), r["dataset_passes"].as_u64()), (Some(25), Some(3)), "{r}");
    let lens = u64s(&r, "input_lens");
    let file_order: Vec<u64> = (1..=10).collect();
    assert_eq!(lens[..10], file_order, "the first pass in file order");
    let sorted = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    assert_eq!(sorted(&lens[10..20]), file_order, "the second pass sends every entry once");
    assert_ne!(lens[10..20], file_order[..], "in a new order");
    assert_eq!(lens[20..].iter().collect::<HashSet<_>>().len(), 5, "the third pass has begun, no entry twice");
    // --no-oversample: the run ends with the file.
    let dir2 = TempDir::new("no-oversample");
    let mut capped = args.to_vec();
    capped.extend(["--num-prompts", "25", "--no-oversample"]);
    let r = run(&dir2, &capped);
    assert_eq!(r["completed"], 10, "{r}");
    assert_eq!(r["ended_by"], "dataset");
    assert_eq!(r["dataset_passes"], 1);
    assert_eq!(u64s(&r, "input_lens"), file_order);
    // Generated prompts have no passes.
    let dir3 = TempDir::new("no-passes");
    let r = run(&dir3, &["--base-url", &base, "--num-prompts", "5", "--random-input-len", "4"]);
    assert!(r.get("dataset_passes").is_none(), "{r}");
}

#[test]
fn spec_bench_sonnet_and_hf_files_run() {
    let dir = TempDir::new("vllm-files");
    let (_echo, base) = echo("127.0.0.1", &[]);
    let spec = dir.path("question.jsonl");
    std::fs::write(
        &spec,
        "{\"question_id\":1,\"category\":\"coding\",\"turns\":[\"write a sort in rust\",\"now in C\"]}\n\
         {\"question_id\":2,\"category\":\"math_reasoning\",\"turns\":[\"what is two plus two\"]}\n\
         {\"question_id\":3,\"category\":\"coding\",\"turns\":[\"reverse a list please\"]}\n",
    )
    .unwrap();
    let r = run(
        &dir,
        &[
            "--base-url",
            &base,
            "--dataset-name",
            "spec_bench",
            "--dataset-path",
            &spec,
            "--spec-bench-category",
            "coding",
        ],
    );
    // 1000 requests (vLLM's default) cycle through the two coding questions (5 and 4 words).
    assert_eq!(r["completed"], 1000);
    assert_eq!(u64s(&r, "input_lens").into_iter().collect::<HashSet<_>>(), HashSet::from([5, 4]));
    assert!(u64s(&r, "output_lens").iter().all(|&o| o == 256), "--spec-bench-output-len's default");

    let poem = dir.path("sonnet.txt");
    let lines: String = (0..30).map(|i| format!("verse {i} shall compare thee now\n")).collect();
    std::fs::write(&poem, lines).unwrap();
    let sonnet = [
        "--base-url",
        &base,
        "--dataset-name",
        "sonnet",
        "--dataset-path",
        &poem,
        "--sonnet-input-len",
        "60",
        "--sonnet-prefix-len",
        "20",
        "--sonnet-output-len",
        "3",
        "--num-prompts",
        "50",
    ];
    let dir2 = TempDir::new("sonnet");
    let r = run(&dir2, &sonnet);
    assert_eq!(r["completed"], 50);
    // 11 base words, lines of 6: round(49 / 6) = 8 lines, 59 words, all within 60.
    assert!(u64s(&r, "input_lens").iter().all(|&l| l == 59), "{:?}", u64s(&r, "input_lens"));
    assert!(u64s(&r, "output_lens").iter().all(|&o| o == 3));

    let gsm = dir.path("gsm8k.jsonl");
    std::fs::write(
        &gsm,
        "{\"question\":\"how many eggs are left\",\"answer\":\"4\"}\n{\"question\":\"add them\",\"answer\":\"9\"}\n",
    )
    .unwrap();
    let hf = ["--base-url", &base, "--dataset-name", "hf", "--dataset-path", &gsm, "--num-prompts", "10"];
    let dir3 = TempDir::new("hf");
    let mut args = hf.to_vec();
    args.extend_from_slice(&["--hf-name", "openai/gsm8k", "--hf-split", "test", "--output-len", "2"]);
    let r = run(&dir3, &args);
    assert_eq!(r["completed"], 10);
    assert_eq!(u64s(&r, "input_lens").into_iter().collect::<HashSet<_>>(), HashSet::from([5, 2]));
    assert!(u64s(&r, "output_lens").iter().all(|&o| o == 2), "--output-len overrides the dataset's 256");

    refused(&["--dataset-name", "hf", "--dataset-path", &gsm], "--hf-name");
    refused(&["--dataset-name", "hf", "--dataset-path", &gsm, "--hf-name", "lmarena-ai/VisionArena-Chat"], "--hf-name");
    refused(&["--dataset-name", "hf", "--dataset-path", &gsm, "--hf-name", "philschmid/mt-bench"], "turns");
    refused(&["--dataset-name", "sonnet"], "--dataset-path");
    refused(&["--dataset-name", "burstgpt", "--dataset-path", &spec], "columns");
    refused(&["--dataset-name", "sonnet", "--dataset-path", &poem, "--sonnet-input-len", "5"], "--sonnet-input-len 5");
}

#[test]
fn random_mm_sends_images_in_chat_content() {
    let dir = TempDir::new("random-mm");
    let (_echo, base) = echo("127.0.0.1", &[]);
    let args = [
        "--base-url",
        &base,
        "--backend",
        "openai-chat",
        "--dataset-name",
        "random-mm",
        "--random-input-len",
        "12",
        "--random-output-len",
        "3",
        "--random-mm-base-items-per-request",
        "2",
        "--random-mm-bucket-config",
        "{(64, 48, 1): 0.5, (32, 32, 1): 0.5, (720, 1280, 16): 0.0}",
        "--num-prompts",
        "100",
        "--max-concurrency",
        "8",
        "--no-initial-test",
    ];
    let r = run(&dir, &args);
    assert_eq!(r["completed"], 100, "{r}");
    // The echo counts the text parts' words only: the images went as other parts.
    assert!(u64s(&r, "input_lens").iter().all(|&l| l == 12));
    // vLLM's random-mm implies --ignore-eos.
    assert_eq!(r["total_output_tokens"], 300);
    // Two images a request (range ratio 0), each a data URL in an image_url part.
    assert_eq!(echo_metric(&base, "surge_echo_prompt_images_total"), 200.0);
    refused(&["--dataset-name", "random-mm"], "--backend openai-chat");
    let video =
        ["--backend", "openai-chat", "--dataset-name", "random-mm", "--random-mm-bucket-config", "{(4, 4, 8): 1}"];
    refused(&video, "video");
    let over = ["--backend", "openai-chat", "--dataset-name", "random-mm", "--random-mm-base-items-per-request", "3"];
    let mut over = over.to_vec();
    over.extend_from_slice(&["--random-mm-limit-mm-per-prompt", "{\"image\": 1}"]);
    refused(&over, "above the limit");
}
