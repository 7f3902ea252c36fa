#!/usr/bin/env bash
# Several endpoints at scale (D69): the cost of spreading 2,000 requests in flight over 8
# replicas against sending them to one, in the same runs on the same host.
#
#   bench/endpoints.sh                 # 2 rounds of: 1 endpoint, 8 on one echo, 8 on 8 (even rounds reversed); 60 s each
#   DURATION=20 ROUNDS=1 bench/endpoints.sh
#
# Each run: `surge run` (coordinator and its embedded agent, pinned to core 0) at
# --max-concurrency INFLIGHT [2000] for DURATION [60] s, streamed completions of 8 tokens
# (TTFT 200 ms, ITL 100 ms) against `surge echo` on core 1, with --replica-header
# x-served-by: one endpoint; 8 endpoints (--base-url x8, round-robin) that are all the same
# echo, which isolates surge's own cost of 8 pools, the policy and the per-endpoint
# analysis; and 8 endpoints on 8 echoes (whose timers no longer tick together, so the
# client gets its token events in more, smaller wake-ups). Reported: requests completed
# and failed, client CPU per request (user+sys of the surge process over completed
# requests), peak RSS, and for 8 endpoints the spread of requests over them.
#
# Environment: BIN=release|debug [release], SURGE_BIN_DIR (use built binaries), OUT,
# INFLIGHT, DURATION, ROUNDS [2].
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
INFLIGHT=${INFLIGHT:-2000}
DURATION=${DURATION:-60}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-$(mktemp -d /tmp/surge-endpoints.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n 20000 2>/dev/null || true

prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

URLS=()
for i in $(seq 1 8); do
    port=$(free_port)
    taskset -c 1 "$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 200 --itl-ms 100 --output-tokens 8 \
        --replica-name "replica-$i" >"$OUT/echo-$i.log" 2>&1 &
    PIDS+=($!)
    wait_http "$port" || die "echo $i did not start"
    URLS+=("http://127.0.0.1:$port")
done

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# run NAME URL...: one run; prints "completed failed cpu_us_per_request peak_mib spread".
run() {
    local name=$1
    shift
    local args=() u
    for u in "$@"; do args+=(--base-url "$u"); done
    taskset -c 0 "$SURGE" run "${args[@]}" --model m --random-input-len 64 --random-output-len 8 \
        --max-concurrency "$INFLIGHT" --duration "$DURATION" --no-initial-test --no-scrape-metrics \
        --replica-header x-served-by \
        --save-result --result-dir "$OUT" --result-filename "$name.json" >"$OUT/$name.out" 2>&1 &
    local pid=$! peak=0 cpu=0 r c
    PIDS+=("$pid")
    while kill -0 "$pid" 2>/dev/null; do
        r=$(rss_kib "$pid")
        ((r > peak)) && peak=$r
        c=$(cpu_s "$pid")
        [[ $c != 0 ]] && cpu=$c
        sleep 0.5
    done
    wait "$pid" || log "surge exited non-zero (see $OUT/$name.out)"
    local R=$OUT/$name.json
    local completed failed spread
    completed=$(json "$R" 'd["completed"]')
    failed=$(json "$R" 'd["failed"]')
    spread=$(json "$R" '"/".join(str(e["requests"]) for e in d.get("endpoints") or [])or "-"')
    echo "$completed $failed $(python3 -c "print(round($cpu / max($completed, 1) * 1e6, 1))") $((peak / 1024)) $spread"
}

ROWS=""
SAME=()
for i in $(seq 1 8); do SAME+=("${URLS[0]}"); done
# The host's cost per request drifts over consecutive runs (+10 % over six here), so a
# fixed order favours whatever runs first: odd rounds run 1, 8, 8x8, even rounds the
# reverse, and the means are over the rounds.
declare -A SUM_US SUM_MIB
one_config() { # round kind
    local c f us mib spread label
    case $2 in
        one) log "round $1: 1 endpoint"; read -r c f us mib spread <<<"$(run "one-$1" "${URLS[0]}")"; label="1" ;;
        same) log "round $1: 8 endpoints, one echo"; read -r c f us mib spread <<<"$(run "same-$1" "${SAME[@]}")"; label="8 (one echo behind all)" ;;
        eight) log "round $1: 8 endpoints, 8 echoes"; read -r c f us mib spread <<<"$(run "eight-$1" "${URLS[@]}")"; label="8 (8 echoes)" ;;
    esac
    [[ $2 == one ]] && spread="-"
    ROWS+="| $1 | $label | $c | $f | $us | $mib | $spread |"$'\n'
    SUM_US[$2]=$(python3 -c "print(${SUM_US[$2]:-0} + $us)")
    SUM_MIB[$2]=$(( ${SUM_MIB[$2]:-0} + mib ))
}
for round in $(seq 1 "$ROUNDS"); do
    order=(one same eight)
    ((round % 2 == 0)) && order=(eight same one)
    for kind in "${order[@]}"; do one_config "$round" "$kind"; done
done
MEANS=""
for kind in one same eight; do
    MEANS+="| mean | $kind | | | $(python3 -c "print(round(${SUM_US[$kind]} / $ROUNDS, 1))") | $((SUM_MIB[$kind] / ROUNDS)) | |"$'\n'
done

cat <<EOF | tee "$OUT/table.md"
## several endpoints ($START_DATE, binaries $BINS_BUILT, $(nproc) cores)

$INFLIGHT in flight for $DURATION s, 8-token streams (TTFT 200 ms, ITL 100 ms); surge on core 0, the echoes on core 1.

| round | endpoints | completed | failed | client CPU per request (us) | peak RSS (MiB) | requests per endpoint |
|---|---|---|---|---|---|---|
$ROWS$MEANS
EOF
log "raw output in $OUT"
