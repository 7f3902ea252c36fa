#!/usr/bin/env bash
# The server's view against a REAL engine (issue 15): llama.cpp's llama-server with
# --metrics (PLATFORM.md, tools/real-llm-target.sh), scraped by surge during a level of
# completions. Records which llamacpp: families the result holds, the generated-token
# check (llamacpp:tokens_predicted_total vs surge's total_output_tokens) and the series
# length against the time series, in bench/RESULTS.md.
#
# Needs the llama-server build (`real-llm-target.sh setup`, ~20 min once per machine).
# Without it, prints why, records that in RESULTS.md, and exits 77. Never run in CI.
#
# Usage: [BIN=debug] bench/server-metrics-llamacpp.sh   (LLAMA_TARGET=path/to/real-llm-target.sh, N=, CONC=)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

LLAMA_TARGET=${LLAMA_TARGET:-$ROOT/../shared/tools/real-llm-target.sh}
RT=${RT:-$HOME/.cache/surge-real-target}
PORT=${PORT:-8001}
N=${N:-64}
CONC=${CONC:-8}
SECTION=server-metrics-llamacpp

record() {
    local body=$1 out
    out=$(mktemp)
    {
        echo "<!-- $SECTION:begin -->"
        echo "## The server's metrics from a real llama-server (bench/server-metrics-llamacpp.sh)"
        echo
        echo "$body"
        echo "<!-- $SECTION:end -->"
    } >"$out"
    replace_section "$BENCH_DIR/RESULTS.md" "$SECTION" "$out"
    rm -f "$out"
}

if [[ ! -x $RT/build/llama.cpp/bin/llama-server ]]; then
    record "**Not measured on this host** ($(date -u '+%Y-%m-%d %H:%M UTC')): llama-server is not built here (run \`$LLAMA_TARGET setup\`, ~20 min). The parser is covered in \`cargo test\` by a llama-server-shaped sample (\`agent/src/scrape/parse.rs\`)."
    log "SKIPPED: llama-server not built ($RT)"
    exit 77
fi

WORK=$(mktemp -d)
trap 'bash "$LLAMA_TARGET" stop >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
if [[ ${BIN:-release} == debug ]]; then
    (cd "$ROOT" && cargo build --bins -q) || die "cargo build failed"
    mkdir -p "$WORK/bin"
    cp "$ROOT/target/debug/surge" "$WORK/bin/"
    SURGE=$WORK/bin/surge
else
    prepare_bins "$WORK"
fi
PORT=$PORT bash "$LLAMA_TARGET" start
"$SURGE" run --base-url "http://127.0.0.1:$PORT" --model smollm2 --num-prompts "$N" --max-concurrency "$CONC" \
    --random-input-len 32 --random-output-len 32 --ignore-eos --save-result --result-dir "$WORK" \
    --result-filename r.json | tee "$WORK/summary.txt"
python3 - "$WORK/r.json" >"$WORK/table.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("server_metrics") or {}
fams = sorted(set(s.get("deltas", {})) | set(s.get("gauges", {})) | set(s.get("histograms", {})))
c = s.get("checks", {})
print(f"{r['completed']} completions of 32 tokens at {r['max_concurrency']} in flight; "
      f"{s.get('scrapes', 0)} scrapes ({s.get('failed_scrapes', 0)} failed), "
      f"{len(r['time_series'])} slices.\n")
print("| Check | Value |\n|---|---|")
print(f"| llamacpp: families | {', '.join(f for f in fams if f.startswith('llamacpp:'))} |")
print(f"| server generated tokens ({c.get('generation_tokens_metric')}) | {c.get('server_output_tokens')} |")
print(f"| surge total_output_tokens | {c.get('client_output_tokens')} |")
print(f"| output_tokens_mismatch_pct | {c.get('output_tokens_mismatch_pct')} |")
PY
record "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores:

$(cat "$WORK/table.md")"
cat "$WORK/table.md"
