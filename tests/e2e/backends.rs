//! vLLM's other backends (D44) end to end against `surge echo`, on the embedded agent and
//! on three agents: the Responses API (streamed events), the embedding backends, pooling
//! and rerank (one JSON answer: E2EL and input counts, vLLM's pooling keys).

use crate::util::{TempDir, agent, echo, echo_metric, run_saved};
use std::time::Duration;

/// The keys `vllm bench serve` writes for a pooling run (serve.py, vLLM 0.32).
const POOLING_KEYS: &[&str] = &[
    "date",
    "endpoint_type",
    "backend",
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "total_input_tokens",
    "total_input_sequences",
    "request_throughput",
    "input_sequence_throughput",
    "total_token_throughput",
    "latencies",
    "queue_times",
    "mean_e2el_ms",
    "median_e2el_ms",
    "std_e2el_ms",
    "p99_e2el_ms",
];

/// The keys it writes for a generation run (without --save-detailed).
const GENERATION_KEYS: &[&str] = &[
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_itl_ms",
    "p99_tpot_ms",
];

/// One backend's run: its flags, and what the result must say.
struct Case {
    backend: &'static str,
    extra: &'static [&'static str],
    /// Requests the echo answers.
    requests: u64,
    /// Inputs in all (pooling), input tokens in all.
    sequences: Option<u64>,
    input_tokens: u64,
}

const CASES: &[Case] = &[
    Case { backend: "openai-responses", extra: &[], requests: 12, sequences: None, input_tokens: 96 },
    Case { backend: "openai-embeddings", extra: &[], requests: 12, sequences: Some(12), input_tokens: 96 },
    Case {
        backend: "openai-embeddings",
        extra: &["--random-batch-size", "5"],
        requests: 3,
        sequences: Some(12),
        input_tokens: 96,
    },
    Case { backend: "openai-embeddings-chat", extra: &[], requests: 12, sequences: Some(12), input_tokens: 96 },
    Case { backend: "openai-embeddings-clip", extra: &[], requests: 12, sequences: Some(12), input_tokens: 96 },
    Case { backend: "openai-embeddings-vlm2vec", extra: &[], requests: 12, sequences: Some(12), input_tokens: 96 },
    Case { backend: "infinity-embeddings", extra: &[], requests: 12, sequences: Some(12), input_tokens: 96 },
    Case { backend: "infinity-embeddings-clip", extra: &[], requests: 12, sequences: Some(12), input_tokens: 96 },
    Case {
        backend: "vllm-pooling",
        extra: &["--random-batch-size", "4"],
        requests: 3,
        sequences: Some(12),
        input_tokens: 96,
    },
    // A query of 8/2-1 = 3 words and documents of 8-3-1 = 4: each pair 7 tokens to the echo.
    Case {
        backend: "vllm-rerank",
        extra: &["--dataset-name", "random-rerank", "--random-batch-size", "4"],
        requests: 3,
        sequences: Some(12),
        input_tokens: 84,
    },
];

fn check(case: &Case, agents: Option<&str>) {
    // Tokens 10 ms apart: after a stall of the host shorter than that the echo has no
    // token due to send at once (2 ms apart, a host stalling 15 ms in every 150 read a
    // third of the gaps as zero, the catch-up).
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "10", "--embedding-dim", "32"]);
    let dir = TempDir::new(&format!("backend-{}-{}", case.backend, agents.is_some()));
    let mut args = vec![
        "run",
        "--base-url",
        &base,
        "--backend",
        case.backend,
        "--model",
        "m",
        "--num-prompts",
        "12",
        "--max-concurrency",
        "3",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--no-initial-test",
    ];
    args.extend_from_slice(case.extra);
    let rows = dir.path("rows.jsonl");
    args.extend_from_slice(&["--save-rows", &rows]);
    if let Some(a) = agents {
        args.extend_from_slice(&["--agents", a, "--agents-plaintext"]);
    }
    let r = run_saved(&dir, &args, Duration::from_secs(60));
    let what = format!("{} (agents {agents:?}): {r}", case.backend);
    // Each row says how many inputs its request carried.
    let inputs: u64 = std::fs::read_to_string(&rows)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["input_sequences"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(inputs, case.sequences.unwrap_or(0), "rows' input_sequences: {what}");
    assert_eq!(r["completed"].as_u64(), Some(case.requests), "{what}");
    let served = echo_metric(&base, "surge_echo_prompt_tokens_total") as u64;
    assert_eq!(served, case.input_tokens, "the echo counted the same inputs: {what}");
    assert_eq!(r["backend"], case.backend, "{what}");
    assert_eq!(r["total_input_tokens"].as_u64(), Some(case.input_tokens), "{what}");
    let keys = if case.sequences.is_some() { POOLING_KEYS } else { GENERATION_KEYS };
    for k in keys {
        assert!(r.get(*k).is_some(), "{}: vLLM's key {k} missing", case.backend);
    }
    match case.sequences {
        Some(n) => {
            assert_eq!(r["total_input_sequences"].as_u64(), Some(n), "{what}");
            let e2el = r["median_e2el_ms"].as_f64().unwrap();
            assert!((20.0..40.0).contains(&e2el), "the echo answers 20 ms in: {what}");
            assert!(r.get("mean_ttft_ms").is_none(), "pooling reports E2EL only: {what}");
        }
        None => {
            assert_eq!(r["total_output_tokens"].as_u64(), Some(case.requests * 4), "{what}");
            let ttft = r["median_ttft_ms"].as_f64().unwrap();
            assert!((20.0..30.0).contains(&ttft), "{what}");
            // The median: under load a few token events share a read (a zero gap, the truth
            // there), which pulls the mean down.
            assert!(r["median_itl_ms"].as_f64().unwrap() >= 9.0, "{what}");
        }
    }
}

#[test]
fn every_backend_on_the_embedded_agent() {
    for case in CASES {
        check(case, None);
    }
}

#[test]
fn every_backend_on_three_agents() {
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let agents: Vec<_> = ips.iter().map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"])).collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    for case in CASES {
        check(case, Some(&addrs));
    }
}

/// A mono 16-bit PCM WAV of `samples` silent samples at 16 kHz.
pub(crate) fn wav(samples: u32) -> Vec<u8> {
    let data = samples * 2;
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&16_000u32.to_le_bytes());
    out.extend_from_slice(&32_000u32.to_le_bytes()); // bytes per second
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    out.resize(out.len() + data as usize, 0);
    out
}

/// `openai-audio` with `--dataset-name custom_audio`: three files of 1, 0.5 and 0.25 s,
/// 12 requests (each file four times), streamed transcriptions, vLLM's RTFx.
fn audio_run(agents: Option<&str>) {
    let (_echo, base) = echo("127.0.0.1", &["--ttft-ms", "20", "--itl-ms", "2"]);
    let dir = TempDir::new(&format!("backend-audio-{}", agents.is_some()));
    let files = dir.path("audio");
    std::fs::create_dir_all(&files).unwrap();
    for (name, samples) in [("a.wav", 16_000), ("b.wav", 8_000), ("c.wav", 4_000)] {
        std::fs::write(format!("{files}/{name}"), wav(samples)).unwrap();
    }
    let mut args = vec![
        "run",
        "--base-url",
        &base,
        "--backend",
        "openai-audio",
        "--dataset-name",
        "custom_audio",
        "--dataset-path",
        &files,
        "--custom-output-len",
        "6",
        "--model",
        "whisper",
        "--num-prompts",
        "12",
        "--max-concurrency",
        "3",
        "--no-initial-test",
    ];
    if let Some(a) = agents {
        args.extend_from_slice(&["--agents", a, "--agents-plaintext"]);
    }
    let r = run_saved(&dir, &args, Duration::from_secs(60));
    assert_eq!(r["completed"].as_u64(), Some(12), "{r}");
    assert_eq!(r["backend"], "openai-audio");
    assert_eq!(r["total_output_tokens"].as_u64(), Some(72), "{r}");
    for k in GENERATION_KEYS {
        assert!(r.get(*k).is_some(), "openai-audio: vLLM's key {k} missing");
    }
    // RTFx: 4 x 1.75 s of audio over the run's duration.
    let (rtfx, duration) = (r["rtfx"].as_f64().unwrap(), r["duration"].as_f64().unwrap());
    assert!((rtfx * duration - 7.0).abs() < 1e-6, "rtfx {rtfx} x duration {duration}");
    let ttft = r["median_ttft_ms"].as_f64().unwrap();
    assert!((20.0..30.0).contains(&ttft), "{r}");
}

#[test]
fn audio_on_the_embedded_agent_and_on_three_agents() {
    audio_run(None);
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let agents: Vec<_> = ips.iter().map(|ip| agent(ip, &["--plaintext", "--allowed-targets", "127.0.0.1"])).collect();
    let addrs = agents.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(",");
    audio_run(Some(&addrs));
}

/// `--prompt-token-ids`: the random dataset's prompts sent as token ids, exactly as long
/// as asked, to completions (`prompt`) and to an embeddings backend (`input`); the echo
/// counts one token per id, and the server's count is the client's.
#[test]
fn prompt_token_ids_are_sent_as_ids() {
    let tok = format!("{}/fixtures/tokenizer", env!("CARGO_MANIFEST_DIR"));
    for backend in ["openai", "openai-embeddings"] {
        let (_echo, base) = echo("127.0.0.1", &[]);
        let dir = TempDir::new(&format!("token-ids-{backend}"));
        let args = [
            "run",
            "--base-url",
            &base,
            "--backend",
            backend,
            "--model",
            "m",
            "--tokenizer",
            &tok,
            "--prompt-token-ids",
            "--random-input-len",
            "17",
            "--random-output-len",
            "3",
            "--num-prompts",
            "5",
            "--no-initial-test",
        ];
        let r = run_saved(&dir, &args, Duration::from_secs(60));
        assert_eq!(r["completed"].as_u64(), Some(5), "{backend}: {r}");
        assert_eq!(r["total_input_tokens"].as_u64(), Some(85), "{backend}: 5 x 17 ids, the server's count");
        assert_eq!(echo_metric(&base, "surge_echo_prompt_tokens_total"), 85.0, "{backend}");
    }
}
