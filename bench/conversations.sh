#!/usr/bin/env bash
# Conversations at scale (D31): open sessions cost memory while open, nothing after.
#
#   bench/conversations.sh              # 40,000 sessions x 8 turns, then a 60 s duration run
#   SESSIONS=10000 bench/conversations.sh
#
# 1. scale: SESSIONS [40000] sessions of TURNS [8] turns, all open at once
#    (--multi-turn-concurrency SESSIONS), think time exponential with mean THINK_MS [5000],
#    chat, 32 new words per turn, 16 output tokens, --max-concurrency INFLIGHT [2000], against
#    `surge echo` (TTFT 20 ms, ITL 2 ms): completed turns and conversations, peak RSS of surge
#    and that of the same command with one session of one turn (RSS per open session: the
#    difference over SESSIONS), client CPU per turn (user+sys of the
#    surge process over the turns), the echo's request count.
# 2. duration: DUR_S [60] s of sessions (--multi-turn-concurrency 2000, 4 turns, think 500 ms
#    exponential): RSS at 1/3 and at the end of the run (goal: flat once sessions finish and new
#    ones start), conversations started/completed/unfinished.
#
# Environment: BIN=release|debug [release], OUT raw-output directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
SESSIONS=${SESSIONS:-40000}
TURNS=${TURNS:-8}
THINK_MS=${THINK_MS:-5000}
INFLIGHT=${INFLIGHT:-2000}
DUR_S=${DUR_S:-60}
OUT=${OUT:-$(mktemp -d /tmp/surge-conversations.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n 20000 2>/dev/null || true

prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

port=$(free_port)
"$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 20 --itl-ms 2 >"$OUT/echo.log" 2>&1 &
ECHO_PID=$!
PIDS+=("$ECHO_PID")
wait_http "$port" || die "echo did not start"
BASE="http://127.0.0.1:$port"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
common=(run --base-url "$BASE" --backend openai-chat --model m --random-input-len 32 --random-output-len 16
    --multi-turn --multi-turn-delay-dist exponential --no-initial-test --save-result --result-dir "$OUT")

# The process without the load: the peak RSS of the same command with one session of one
# turn (read at 1 s into the scale run, it already held every session a release build
# had opened by then).
/usr/bin/time -f '%M' -o "$OUT/base.time" "$SURGE" "${common[@]}" --num-prompts 1 --multi-turn-num-turns 1 \
    --multi-turn-concurrency 1 --multi-turn-delay-ms 0 --max-concurrency 1 --result-filename base.json \
    >"$OUT/base.out" 2>&1 || die "the one-session run failed (see $OUT/base.out)"
base_rss=$(tail -1 "$OUT/base.time")

# 1. scale
log "scale: $SESSIONS sessions x $TURNS turns, think ${THINK_MS} ms (exponential), $INFLIGHT in flight"
"$SURGE" "${common[@]}" --num-prompts "$SESSIONS" --multi-turn-num-turns "$TURNS" \
    --multi-turn-concurrency "$SESSIONS" --multi-turn-delay-ms "$THINK_MS" --max-concurrency "$INFLIGHT" \
    --result-filename scale.json >"$OUT/scale.out" 2>&1 &
SURGE_PID=$!
PIDS+=("$SURGE_PID")
peak_rss=$base_rss
cpu=0
while kill -0 "$SURGE_PID" 2>/dev/null; do
    r=$(rss_kib "$SURGE_PID")
    ((r > peak_rss)) && peak_rss=$r
    c=$(cpu_s "$SURGE_PID")
    [[ $c != 0 ]] && cpu=$c
    sleep 0.5
done
wait "$SURGE_PID" || log "surge exited non-zero (see $OUT/scale.out)"
R=$OUT/scale.json
completed=$(json "$R" 'd["completed"]')
failed=$(json "$R" 'd["failed"]')
conv=$(json "$R" 'd["conversations_completed"]')
dur=$(json "$R" 'd["duration"]')
per_session=$(python3 -c "print(round(($peak_rss - $base_rss) * 1024 / $SESSIONS))")
per_turn_us=$(python3 -c "print(round($cpu / max($completed, 1) * 1e6, 1))")

# 2. duration
log "duration: ${DUR_S}s, 2000 sessions open, 4 turns, think 500 ms"
"$SURGE" "${common[@]}" --duration "${DUR_S}s" --multi-turn-num-turns 4 --multi-turn-concurrency 2000 \
    --multi-turn-delay-ms 500 --max-concurrency 1000 --result-filename duration.json >"$OUT/duration.out" 2>&1 &
SURGE_PID=$!
PIDS+=("$SURGE_PID")
sleep $((DUR_S / 3))
rss_a=$(rss_kib "$SURGE_PID")
sleep $((DUR_S * 2 / 3 - 2))
rss_b=$(rss_kib "$SURGE_PID")
wait "$SURGE_PID" || log "surge exited non-zero (see $OUT/duration.out)"
D=$OUT/duration.json
d_started=$(json "$D" 'd["conversations_started"]')
d_done=$(json "$D" 'd["conversations_completed"]')
d_unfinished=$(json "$D" 'd["conversations_unfinished"]')
growth=$(python3 -c "print(round(($rss_b - $rss_a) * 100 / $rss_a, 1))")

cat <<EOF | tee "$OUT/table.md"
## conversations ($START_DATE, binaries $BINS_BUILT, $(nproc) cores)

| check | result |
|---|---|
| $SESSIONS sessions x $TURNS turns, think exp ${THINK_MS} ms, $INFLIGHT in flight | $completed turns completed, $failed failed; $conv conversations completed; ${dur} s |
| surge peak RSS with one session / with all | $((base_rss / 1024)) MiB / $((peak_rss / 1024)) MiB: **$per_session B per open session** |
| client CPU per turn (surge process, user+sys) | **$per_turn_us us** ($cpu s over $completed turns) |
| ${DUR_S}s duration run, 2000 open | started $d_started, completed $d_done, unfinished $d_unfinished |
| RSS at ${DUR_S}/3 s and at the end | $((rss_a / 1024)) MiB, $((rss_b / 1024)) MiB (growth $growth %) |
EOF
log "raw output in $OUT"
