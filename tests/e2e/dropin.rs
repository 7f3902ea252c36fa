//! `vllm bench serve` command lines as users publish them (REFERENCE.md), run with only the
//! program name changed (D27): every line is accepted, the result lands where vLLM
//! would put it, and it holds the keys vLLM 0.32 writes for the same flags (captured from
//! `vllm bench serve` itself, bench/drop-in-vllm.sh), `latencies` and `queue_times` with
//! one value per request.

use crate::util::{TempDir, echo, read_json, surge, text};
use std::time::Duration;

/// The keys `vllm bench serve` wrote for REFERENCE.md's first line (default
/// `--percentile-metrics ttft,tpot,itl`, `--metric-percentiles 99`, no `--save-detailed`).
const VLLM_KEYS: [&str; 36] = [
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
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
    "latencies",
    "queue_times",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
];

fn run_line(line: &str, extra_keys: &[&str], result: &str) -> serde_json::Value {
    let args: Vec<&str> = line.split_whitespace().collect();
    let out = surge(&args, Duration::from_secs(120));
    assert!(out.status.success(), "{line}\n{}", text(&out.stderr));
    let r = read_json(result);
    for k in VLLM_KEYS.iter().chain(extra_keys) {
        assert!(r.get(*k).is_some(), "{k} missing after: {line}");
    }
    let n = r["completed"].as_u64().unwrap() + r["failed"].as_u64().unwrap();
    for k in ["latencies", "queue_times"] {
        assert_eq!(r[k].as_array().map(Vec::len), Some(n as usize), "{k}: one per request");
    }
    let text = std::fs::read_to_string(result).unwrap();
    let pos = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
    assert!(pos("total_token_throughput") < pos("latencies") && pos("queue_times") < pos("max_output_tokens_per_s"));
    r
}

#[test]
fn published_vllm_command_lines_run_unchanged() {
    let (_echo, base) = echo("127.0.0.1", &[]);
    let port = base.rsplit(':').next().unwrap().to_string();
    let dir = TempDir::new("dropin");
    let d = dir.path("");
    // REFERENCE.md: the single-profile check, its matrix variants (a --result-filename
    // with a directory in it; surge creates the directory, vLLM needs it to exist).
    for (i, o, n, c) in [(1024, 256, 20, 1), (1024, 256, 200, 16), (8192, 256, 50, 4)] {
        let file = format!("{d}/benchmarks/latency-{i}x{o}-c{c}.json");
        let line = format!(
            "run --host 127.0.0.1 --port {port} --endpoint /v1/completions --model org/model-id \
             --served-model-name served-id --dataset-name random --random-input-len {i} \
             --random-output-len {o} --num-prompts {n} --max-concurrency {c} --request-rate inf \
             --temperature 0 --save-result --result-filename {file}"
        );
        let r = run_line(&line, &[], &file);
        assert_eq!(r["completed"].as_u64(), Some(n), "{line}");
        assert_eq!(r["max_concurrency"].as_u64(), Some(c));
        // Closed loop: every request arrives at the start, so queue times climb (vLLM's).
        let q: Vec<f64> = r["queue_times"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert!(q[q.len() - 1] > q[0], "{q:?}");
        let mean_e2el = r["mean_e2el_ms"].as_f64().unwrap();
        let lat: Vec<f64> = r["latencies"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let mean = lat.iter().sum::<f64>() / lat.len() as f64 * 1000.0;
        assert!((mean - mean_e2el).abs() < 1e-6 * mean_e2el, "latencies mean {mean} vs mean_e2el_ms {mean_e2el}");
    }
    // REFERENCE.md's second line: `--backend vllm`, `--hf-name` (ignored with the default
    // random dataset, as vLLM ignores it), no result saved: it must just run.
    let line = format!(
        "run --backend vllm --model M --host 127.0.0.1 --endpoint /v1/completions --hf-name sharegpt \
         --num-prompts 5 --port {port} --random-input-len 16 --random-output-len 4 --save-result \
         --result-dir {d} --result-filename second.json"
    );
    let r = run_line(&line, &[], &format!("{d}/second.json"));
    assert_eq!(r["backend"], "vllm");
    // A ramp-up line, a chat line with sampling flags and --extra-body, --header and --metadata.
    let ramp = format!(
        "run --base-url {base} --model m --dataset-name random --random-input-len 16 --random-output-len 4 \
         --num-prompts 100 --ramp-up-strategy exponential --ramp-up-start-rps 10 --ramp-up-end-rps 100 \
         --save-result --result-dir {d} --result-filename ramp.json"
    );
    let r = run_line(
        &ramp,
        &["ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "rps_change_events"],
        &format!("{d}/ramp.json"),
    );
    assert_eq!(r["ramp_up_strategy"], "exponential");
    let chat = format!(
        "run --backend openai-chat --endpoint /v1/chat/completions --base-url {base} --model m \
         --dataset-name random --random-input-len 16 --random-output-len 4 --num-prompts 50 --max-concurrency 4 \
         --temperature 0.3 --top-p 0.9 --top-k 5 --min-p 0.1 --repetition-penalty 1.1 --extra-body {{\"seed\":7}} \
         --header X-Bench=1 --metadata hardware=cpu run=1 --save-result --result-dir {d} --result-filename chat.json"
    );
    let r = run_line(&chat, &["hardware", "run"], &format!("{d}/chat.json"));
    assert_eq!((r["hardware"].as_str(), r["run"].as_str()), (Some("cpu"), Some("1")));
    // More of vLLM's flags: probes, log-probabilities, LoRA adapters,
    // no tokenizer, a timeline page, the detailed arrays with generated texts.
    let more = format!(
        "run --backend vllm --base-url {base} --model m --dataset-name random --random-input-len 16 \
         --random-output-len 4 --num-prompts 60 --max-concurrency 6 --probe-request-rate 50 --logprobs 2 \
         --lora-modules m --lora-assignment round-robin --skip-tokenizer-init --plot-timeline \
         --timeline-itl-thresholds 10,20 --save-detailed --result-dir {d} --result-filename more.json"
    );
    let detailed = ["input_lens", "output_lens", "ttfts", "itls", "start_times", "errors", "generated_texts"];
    let probes = ["probe_completed", "probe_failed", "probe_median_e2el_ms", "probe_p99_e2el_ms", "probe_max_e2el_ms"];
    let keys: Vec<&str> = detailed.iter().chain(&probes).copied().collect();
    let r = run_line(&more, &keys, &format!("{d}/more.json"));
    assert_eq!(r["generated_texts"].as_array().map(Vec::len), Some(60));
    assert!(std::path::Path::new(&format!("{d}/more.timeline.html")).is_file());
}
