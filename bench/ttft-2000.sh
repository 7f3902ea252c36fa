#!/usr/bin/env bash
# Timing exactness at 2000 in flight: `surge run` against `surge echo` on one machine.
#
#   bench/ttft-2000.sh            # 5 runs; writes the "ttft-2000" section of bench/RESULTS.md
#   RUNS=2 RESULTS= bench/ttft-2000.sh   # a quick look; RESULTS.md is left alone
#
# Each run starts a fresh `surge echo --ttft-ms 100 --itl-ms 20` on 127.0.0.1, then
# `surge run` with 10000 prompts at --max-concurrency 2000 (64 in / 32 out, --ignore-eos),
# and reads the result JSON. The server's schedule is exact to ~0.1 ms, so every
# millisecond above 100 (TTFT) or 20 (ITL) is queueing in the server or the client: on a
# 2-core machine both share the cores. Nothing is pinned.
#
# Environment: RUNS [5]  PROMPTS [10000]  CONCURRENCY [2000]  OUT [a new /tmp dir]
#   RESULTS file whose "ttft-2000" section is replaced [bench/RESULTS.md; empty: none]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RUNS=${RUNS:-5}
PROMPTS=${PROMPTS:-10000}
CONCURRENCY=${CONCURRENCY:-2000}
RESULTS=${RESULTS-$BENCH_DIR/RESULTS.md}
OUT=${OUT:-$(mktemp -d /tmp/surge-ttft-2000.XXXXXX)}
mkdir -p "$OUT"
command -v jq >/dev/null || die "jq not found (apt-get install jq)"
prepare_bins "$OUT"

ECHO_PID=
cleanup() { [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

ROWS=$OUT/rows.md
: >"$ROWS"
for run in $(seq "$RUNS"); do
    port=$(free_port)
    "$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 100 --itl-ms 20 >"$OUT/echo-$run.log" 2>&1 &
    ECHO_PID=$!
    wait_http "$port" || die "echo server did not start (see $OUT/echo-$run.log)"
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    "$SURGE" run --base-url "http://127.0.0.1:$port" --endpoint /v1/completions --model m \
        --dataset-name random --random-input-len 64 --random-output-len 32 --ignore-eos \
        --num-prompts "$PROMPTS" --max-concurrency "$CONCURRENCY" \
        --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 \
        --save-result --result-dir "$OUT" --result-filename "run-$run.json" >"$OUT/run-$run.txt" 2>&1 \
        || die "surge run failed (see $OUT/run-$run.txt)"
    kill "$ECHO_PID"; wait "$ECHO_PID" 2>/dev/null || true; ECHO_PID=
    jq -r --arg run "$run" --arg load "$load_before" '"| \($run) | \(.completed) | \(.failed) | \(.peak_in_flight) | \(.median_ttft_ms*100|round/100) | \(.p90_ttft_ms*100|round/100) | \(.p99_ttft_ms*100|round/100) | \(.median_itl_ms*100|round/100) | \(.p99_itl_ms*100|round/100) | \(.request_throughput|round) | \($load) |"' \
        "$OUT/run-$run.json" | tee -a "$ROWS" >&2
done

SECTION=$OUT/section.md
{
    echo "<!-- ttft-2000:begin -->"
    echo "## Timing at 2000 in flight: surge run vs surge echo on one machine"
    echo
    echo "Measured now by \`bench/ttft-2000.sh\` ($RUNS runs). The echo server's schedule is TTFT 100 ms,"
    echo "ITL 20 ms; everything above that is queueing in the server or the client, which share this"
    echo "machine's cores (nothing pinned)."
    echo
    machine_md
    echo
    echo "| run | completed | failed | max in flight | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | ITL p99 | req/s | load before |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    cat "$ROWS"
    echo
    echo "Commands (P = a free port):"
    echo
    echo '```sh'
    echo "surge echo --listen 127.0.0.1:P --ttft-ms 100 --itl-ms 20"
    echo "surge run --base-url http://127.0.0.1:P --endpoint /v1/completions --model m --dataset-name random --random-input-len 64 --random-output-len 32 --ignore-eos --num-prompts $PROMPTS --max-concurrency $CONCURRENCY --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --save-result --result-dir D --result-filename r.json"
    echo '```'
    echo "<!-- ttft-2000:end -->"
} >"$SECTION"
cat "$SECTION"
if [[ -n $RESULTS ]]; then
    replace_section "$RESULTS" ttft-2000 "$SECTION"
    log "wrote the ttft-2000 section of $RESULTS"
fi
log "raw output: $OUT"
