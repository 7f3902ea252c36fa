#!/usr/bin/env bash
# Flame graphs of where the client's CPU goes, drawn from `perf record --call-graph dwarf`
# with inferno (installed with `cargo install inferno --locked` when missing). Timing, so
# not in CI.
#
#   bench/flame.sh                 # dev-profile binaries (optimized, with debug info)
#   OUT=/tmp/flame bench/flame.sh
#
# token-event.svg: the embedded agent's engine threads (`surge-engine`) during
#   `surge run --backend openai-chat --random-output-len 64 --ignore-eos` at 200 in
#   flight on core 0, against `surge echo --ttft-ms 5 --itl-ms 1` on core 1: 56 of each
#   request's 64 token events are the marginal cost the performance guard measures.
# ingest.svg: the coordinator (every thread) folding the rows of 3 mutual-TLS agents
#   (`--backend http` on the echo's /echo, ROWS [600000] rows).
#
# The SVGs go to bench/flame/ (with RECORD=1) or OUT; each has a title with the command.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
REQUESTS=${REQUESTS:-6000}
ROWS=${ROWS:-600000}
OUT=${OUT:-$(mktemp -d /tmp/surge-flame.XXXXXX)}
mkdir -p "$OUT"
command -v perf >/dev/null || die "perf is needed (apt-get install linux-perf or linux-tools)"
if ! command -v inferno-flamegraph >/dev/null; then
    log "inferno is missing: cargo install inferno --locked"
    cargo install inferno --locked -q || die "cannot install inferno"
fi
# Debug info for the call graphs: the dev profile is optimized and keeps it.
BIN=debug prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

port=$(free_port)
taskset -c 1 "$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 5 --itl-ms 1 >"$OUT/echo.log" 2>&1 &
PIDS+=($!)
wait_http "$port" || die "echo did not start"
BASE="http://127.0.0.1:$port"

# perf.data (file $1) folded for the threads named $2 (a regex; all when empty) into the
# SVG $3 titled $4.
draw() {
    local comms=()
    [[ -n $2 ]] && comms=(--comms "$2")
    perf script -i "$1" "${comms[@]}" 2>/dev/null | inferno-collapse-perf >"$1.folded"
    inferno-flamegraph --title "$4" --width 1600 <"$1.folded" >"$3"
    log "$3: $(wc -l <"$1.folded") stacks"
}

# --- the token event ------------------------------------------------------------------
cmd=(run --base-url "$BASE" --model m --backend openai-chat --no-initial-test --random-input-len 16
    --random-output-len 64 --ignore-eos --num-prompts "$REQUESTS" --max-concurrency 200)
taskset -c 0 perf record -F 499 --call-graph dwarf,32768 -o "$OUT/token.data" -- "$SURGE" "${cmd[@]}" \
    >"$OUT/token.out" 2>&1 || die "surge run failed: $(tail -3 "$OUT/token.out")"
draw "$OUT/token.data" surge-engine "$OUT/token-event.svg" "surge ${cmd[*]} (engine threads)"

# --- ingest ---------------------------------------------------------------------------
start_tls_agents "$OUT"
cmd=(run --base-url "$BASE" --model m --backend http --no-initial-test --agents "$TLS_AGENTS"
    --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/coordinator.pem" --tls-key "$PKI/coordinator.key"
    --random-input-len 16 --num-prompts "$ROWS" --max-concurrency 300)
perf record -F 499 --call-graph dwarf,32768 -o "$OUT/ingest.data" -- "$SURGE" "${cmd[@]}" \
    >"$OUT/ingest.out" 2>&1 || die "surge run failed: $(tail -3 "$OUT/ingest.out")"
draw "$OUT/ingest.data" "" "$OUT/ingest.svg" "surge run --backend http, 3 mTLS agents, $ROWS rows (coordinator)"

if [[ ${RECORD:-0} == 1 ]]; then
    mkdir -p "$BENCH_DIR/flame"
    cp "$OUT/token-event.svg" "$OUT/ingest.svg" "$BENCH_DIR/flame/"
    log "copied to bench/flame/"
fi
log "flame graphs in $OUT"
