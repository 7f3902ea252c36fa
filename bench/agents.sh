#!/usr/bin/env bash
# Agent loops at scale (D65): open sessions with tool loops cost memory while open,
# nothing after; every step completes.
#
#   bench/agents.sh                  # 10,000 open sessions x 3 turns with tool loops
#   SESSIONS=2000 bench/agents.sh
#
# SESSIONS [10000] chat sessions of TURNS [3] turns, all open at once
# (--multi-turn-concurrency SESSIONS), think time exponential with mean THINK_MS [2000],
# --tool-loop with --tool-latency-ms TOOL_MS [500] (exponential), --max-tool-steps 4,
# --tool-result-len 64, --max-concurrency INFLIGHT [2000], against `surge echo`
# (TTFT 20 ms, ITL 2 ms, --tool-call-rate 0.5): requests (turns and steps) completed, the
# echo's tool-call replies against surge's, tool messages the echo could not match (goal 0),
# peak RSS of surge over its RSS before the load (per open session), client CPU per
# request (user+sys of the surge process).
#
# Environment: BIN=release|debug [release], SURGE_BIN_DIR (use built binaries), OUT.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
SESSIONS=${SESSIONS:-10000}
TURNS=${TURNS:-3}
THINK_MS=${THINK_MS:-2000}
TOOL_MS=${TOOL_MS:-500}
INFLIGHT=${INFLIGHT:-2000}
OUT=${OUT:-$(mktemp -d /tmp/surge-agents.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n 20000 2>/dev/null || true

prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

port=$(free_port)
"$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 20 --itl-ms 2 --output-tokens 16 --tool-call-rate 0.5 \
    >"$OUT/echo.log" 2>&1 &
ECHO_PID=$!
PIDS+=("$ECHO_PID")
wait_http "$port" || die "echo did not start"
BASE="http://127.0.0.1:$port"
metric() { curl -fsS "$BASE/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

log "$SESSIONS sessions x $TURNS turns, tool loops (${TOOL_MS} ms exponential, <= 4 steps), $INFLIGHT in flight"
"$SURGE" run --base-url "$BASE" --backend openai-chat --model m --random-input-len 32 --random-output-len 16 \
    --multi-turn --multi-turn-num-turns "$TURNS" --multi-turn-delay-dist exponential \
    --multi-turn-delay-ms "$THINK_MS" --multi-turn-concurrency "$SESSIONS" --num-prompts "$SESSIONS" \
    --max-concurrency "$INFLIGHT" --tool-loop --tool-latency-ms "$TOOL_MS" --tool-latency-dist exponential \
    --max-tool-steps 4 --tool-result-len 64 --no-initial-test \
    --save-result --result-dir "$OUT" --result-filename agents.json >"$OUT/agents.out" 2>&1 &
SURGE_PID=$!
PIDS+=("$SURGE_PID")
sleep 0.3
base_rss=$(rss_kib "$SURGE_PID")
peak_rss=$base_rss
cpu=0
while kill -0 "$SURGE_PID" 2>/dev/null; do
    r=$(rss_kib "$SURGE_PID")
    ((r > peak_rss)) && peak_rss=$r
    c=$(cpu_s "$SURGE_PID")
    [[ $c != 0 ]] && cpu=$c
    sleep 0.5
done
wait "$SURGE_PID" || log "surge exited non-zero (see $OUT/agents.out)"
R=$OUT/agents.json
completed=$(json "$R" 'd["completed"]')
failed=$(json "$R" 'd["failed"]')
conv=$(json "$R" 'd["conversations_completed"]')
steps=$(json "$R" 'd["agent_loop"]["tool_steps"]')
calls=$(json "$R" 'd["agent_loop"]["tool_call_replies"]')
dur=$(json "$R" 'd["duration"]')
echo_calls=$(metric surge_echo_tool_call_replies_total)
unmatched=$(metric surge_echo_tool_results_unmatched_total)
per_session=$(python3 -c "print(round(($peak_rss - $base_rss) * 1024 / $SESSIONS))")
per_req_us=$(python3 -c "print(round($cpu / max($completed, 1) * 1e6, 1))")

cat <<EOF | tee "$OUT/table.md"
## agent loops ($START_DATE, binaries $BINS_BUILT, $(nproc) cores)

| check | result |
|---|---|
| $SESSIONS sessions x $TURNS turns, tool loops, $INFLIGHT in flight | $completed requests completed ($steps tool steps), $failed failed; $conv of $SESSIONS conversations completed; ${dur} s |
| tool-call replies: surge / the echo; unmatched tool messages | $calls / ${echo_calls%.*}; ${unmatched%.*} |
| surge RSS before the load / peak | $((base_rss / 1024)) MiB / $((peak_rss / 1024)) MiB: **$per_session B per open session** |
| client CPU per request (surge process, user+sys) | **$per_req_us us** ($cpu s over $completed requests) |
EOF
log "raw output in $OUT"
