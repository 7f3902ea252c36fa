#!/usr/bin/env bash
# Agent memory per in-flight streaming request.
#
#   bench/agent-memory.sh
#
# Starts `surge echo` with a long TTFT (so every stream stays open a while), a
# `surge-agent` on loopback, and drives $NUM_PROMPTS streamed completions through the
# agent at $INFLIGHT in flight. Samples the agent's VmRSS every $SAMPLE_MS ms and the echo
# server's `surge_echo_requests_running` gauge, and reports
# (peak RSS - idle RSS) / INFLIGHT in KiB (target: <= 50 KiB).
#
# Environment (defaults in brackets):
#   INFLIGHT [2000]  NUM_PROMPTS [2 x INFLIGHT]  TTFT_MS [2000]  ITL_MS [50]
#   INPUT_LEN [64]  OUTPUT_LEN [64]  SAMPLE_MS [200]  TARGET_KIB [50]
#   OUT raw-output directory [a new /tmp/surge-agent-memory.XXXXXX]
#   RESULTS file whose "agent-memory" section is replaced [bench/RESULTS.md; empty = none]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac

INFLIGHT=${INFLIGHT:-2000}
NUM_PROMPTS=${NUM_PROMPTS:-$((2 * INFLIGHT))}
TTFT_MS=${TTFT_MS:-2000}
ITL_MS=${ITL_MS:-50}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN=${OUTPUT_LEN:-64}
SAMPLE_MS=${SAMPLE_MS:-200}
TARGET_KIB=${TARGET_KIB:-50}
RESULTS=${RESULTS-$BENCH_DIR/RESULTS.md}
OUT=${OUT:-$(mktemp -d /tmp/surge-agent-memory.XXXXXX)}
mkdir -p "$OUT"

need=$((INFLIGHT + 256))
if (( $(ulimit -n) < need )); then
    ulimit -n "$need" 2>/dev/null || die "open-file limit $(ulimit -n) < $need and cannot be raised"
fi
prepare_bins "$OUT"

ECHO_PID='' AGENT_PID='' RUN_PID=''
cleanup() {
    local p
    for p in $RUN_PID $AGENT_PID $ECHO_PID; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
hwm_kib() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
running() {
    curl -fsS --max-time 1 "http://127.0.0.1:$PORT/metrics" 2>/dev/null \
        | awk '/^surge_echo_requests_running / { print $2 }' || true
}

PORT=${PORT:-$(free_port)}
"$SURGE" echo --listen "127.0.0.1:$PORT" --ttft-ms "$TTFT_MS" --itl-ms "$ITL_MS" >"$OUT/echo.log" 2>&1 &
ECHO_PID=$!
wait_http "$PORT" || die "echo server did not come up (see $OUT/echo.log)"

"$SURGE_AGENT" --listen 127.0.0.1:0 --plaintext --allowed-targets 127.0.0.1 >"$OUT/agent.log" 2>&1 &
AGENT_PID=$!
AGENT_ADDR=
for _ in $(seq 100); do
    AGENT_ADDR=$(sed -n 's/^surge-agent listening on \(.*\)$/\1/p' "$OUT/agent.log" | head -1)
    [[ -n $AGENT_ADDR ]] && break
    kill -0 "$AGENT_PID" 2>/dev/null || die "surge-agent exited (see $OUT/agent.log)"
    sleep 0.1
done
[[ -n $AGENT_ADDR ]] || die "surge-agent did not print its address (see $OUT/agent.log)"

LOAD_BEFORE=$(uptime | sed 's/.*load average/load average/')
BUILDS_BEFORE=$(builds_running)
sleep 1
IDLE=$(rss_kib "$AGENT_PID")
log "echo pid $ECHO_PID on 127.0.0.1:$PORT; agent pid $AGENT_PID on $AGENT_ADDR, idle VmRSS $IDLE KiB"

RUN_CMD=("$SURGE" run --agents "$AGENT_ADDR" --agents-plaintext --base-url "http://127.0.0.1:$PORT" --model m
    --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --ignore-eos
    --num-prompts "$NUM_PROMPTS" --max-concurrency "$INFLIGHT")
"${RUN_CMD[@]}" >"$OUT/run.out" 2>"$OUT/run.err" &
RUN_PID=$!

# Samples: seconds since start, agent VmRSS (KiB), echo requests running.
interval=$(awk -v ms="$SAMPLE_MS" 'BEGIN { printf "%.3f", ms / 1000 }')
t0=$(date +%s.%N)
: >"$OUT/samples.tsv"
while kill -0 "$RUN_PID" 2>/dev/null; do
    printf '%s\t%s\t%s\n' "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')" \
        "$(rss_kib "$AGENT_PID")" "$(running)" >>"$OUT/samples.tsv"
    sleep "$interval"
done
RUN_RC=0; wait "$RUN_PID" || RUN_RC=$?; RUN_PID=
AFTER=$(rss_kib "$AGENT_PID")
HWM=$(hwm_kib "$AGENT_PID")
LOAD_AFTER=$(uptime | sed 's/.*load average/load average/')
BUILDS_AFTER=$(builds_running)
(( RUN_RC == 0 )) || log "surge run exited $RUN_RC (see $OUT/run.err)"

# PRE: the highest RSS before the first request reached the server (the agent has
# prepared the run: prompts built, one connection per concurrency slot opened).
read -r NSAMPLES PEAK PEAK_T MAXRUN AT2000 PRE < <(awk -F'\t' -v n="$INFLIGHT" '
    { c++; if ($2 > p) { p = $2; pt = $1 } if ($3 > m) m = $3; if ($3 >= n) full++
      if ($3 > 0) started = 1; if (!started && $2 > pre) pre = $2 }
    END { printf "%d %d %s %d %d %d\n", c, p, pt, m, full, pre }' "$OUT/samples.tsv")
PER_REQ=$(awk -v p="$PEAK" -v i="$IDLE" -v n="$INFLIGHT" 'BEGIN { printf "%.1f", (p - i) / n }')
PER_REQ_HWM=$(awk -v p="$HWM" -v i="$IDLE" -v n="$INFLIGHT" 'BEGIN { printf "%.1f", (p - i) / n }')
VERDICT=$(awk -v x="$PER_REQ" -v t="$TARGET_KIB" 'BEGIN { print (x <= t ? "meets" : "MISSES") }')
OK=$(sed -n 's/^Successful requests:[[:space:]]*\([0-9]*\).*/\1/p' "$OUT/run.out")
FAILED=$(sed -n 's/^Failed requests:[[:space:]]*\([0-9]*\).*/\1/p' "$OUT/run.out")
PEAKCONC=$(sed -n 's/^Peak in flight (one instant):[[:space:]]*\([0-9.]*\).*/\1/p' "$OUT/run.out")
DUR=$(sed -n 's/^Benchmark duration (s):[[:space:]]*\([0-9.]*\).*/\1/p' "$OUT/run.out")

md=$OUT/agent-memory.md
{
    echo "<!-- agent-memory:begin -->"
    echo "## Agent memory per in-flight streaming request"
    echo
    echo "Measured now by \`bench/agent-memory.sh\`."
    echo
    machine_md
    echo "- before: $LOAD_BEFORE; Rust builds running: $BUILDS_BEFORE"
    echo "- after: $LOAD_AFTER; Rust builds running: $BUILDS_AFTER"
    echo
    echo "| quantity | value |"
    echo "|---|---:|"
    echo "| agent VmRSS idle (1 s after start) | $IDLE KiB |"
    echo "| agent VmRSS after preparing, before the first request reached the server (connections open) | $PRE KiB |"
    echo "| agent VmRSS peak (sampled every ${SAMPLE_MS} ms, $NSAMPLES samples, at ${PEAK_T} s) | $PEAK KiB |"
    echo "| agent VmHWM (kernel's high-water mark) | $HWM KiB |"
    echo "| agent VmRSS after the run | $AFTER KiB |"
    echo "| echo \`surge_echo_requests_running\`, max sampled | $MAXRUN |"
    echo "| samples with all $INFLIGHT in flight | $AT2000 |"
    echo "| surge run: successful / failed, peak in flight (one instant), duration | ${OK:-?} / ${FAILED:-?}, ${PEAKCONC:-?}, ${DUR:-?} s (exit $RUN_RC) |"
    echo "| **(peak - idle) / $INFLIGHT** | **$PER_REQ KiB per in-flight request** ($VERDICT the target of <= $TARGET_KIB KiB) |"
    echo "| (VmHWM - idle) / $INFLIGHT | $PER_REQ_HWM KiB |"
    echo "| of which (prepared - idle) / $INFLIGHT, before any request is sent | $(awk -v p="$PRE" -v i="$IDLE" -v n="$INFLIGHT" 'BEGIN { printf "%.1f", (p - i) / n }') KiB |"
    echo "| and (peak - prepared) / $INFLIGHT, while requests are in flight | $(awk -v p="$PEAK" -v i="$PRE" -v n="$INFLIGHT" 'BEGIN { printf "%.1f", (p - i) / n }') KiB |"
    echo
    echo "The RSS curve (seconds, KiB, requests running at the echo server) is in \`samples.tsv\` of the raw"
    echo "output directory; the agent opens one connection per concurrency slot before the start instant."
    echo
    echo "Commands:"
    echo
    echo '```sh'
    echo "surge echo --listen 127.0.0.1:P --ttft-ms $TTFT_MS --itl-ms $ITL_MS"
    echo "surge-agent --listen 127.0.0.1:0 --plaintext --allowed-targets 127.0.0.1   # prints: surge-agent listening on ADDR"
    echo "surge run --agents ADDR --agents-plaintext --base-url http://127.0.0.1:P --model m --random-input-len $INPUT_LEN --random-output-len $OUTPUT_LEN --ignore-eos --num-prompts $NUM_PROMPTS --max-concurrency $INFLIGHT"
    echo "# meanwhile, every $SAMPLE_MS ms: VmRSS from /proc/AGENT_PID/status, surge_echo_requests_running from GET http://127.0.0.1:P/metrics"
    echo '```'
    echo "<!-- agent-memory:end -->"
} >"$md"

cat "$md"
if [[ -n $RESULTS ]]; then
    replace_section "$RESULTS" agent-memory "$md"
    log "wrote the agent-memory section of $RESULTS"
fi
log "raw output: $OUT"
