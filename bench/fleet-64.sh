#!/usr/bin/env bash
# One coordinator, 64 agents: setup time, coordinator CPU per row, exact sums, RSS.
#
#   bench/fleet-64.sh                  # 64 agents on 127.0.0.2-65, 50 in flight each
#   AGENTS=16 PER_AGENT=100 bench/fleet-64.sh
#
# Starts `surge echo` on 127.0.0.1 and AGENTS [64] plaintext `surge-agent`s on 127.0.0.2,
# 127.0.0.3, ... (loopback: no namespace needed), then `surge run --agents ...` with
# PER_AGENT [50] in flight per agent and REQUESTS [64000] requests (16 words in, 8 tokens
# out, echo TTFT 10 ms, ITL 1 ms). Reports: the setup time (launch of `surge run` to the
# first completion request the echo counts: connect, Hello, clock pings, fleet check,
# Prepare, Ready, Start), the run's wall time, completed and the echo's count (exact sums),
# rows received per agent (min/max), the coordinator's CPU per row and its peak RSS.
#
# Environment: BIN=release|debug [release], OUT raw-output directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
AGENTS=${AGENTS:-64}
PER_AGENT=${PER_AGENT:-50}
REQUESTS=${REQUESTS:-64000}
OUT=${OUT:-$(mktemp -d /tmp/surge-fleet-64.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || true
prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

port=$(free_port)
"$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 10 --itl-ms 1 >"$OUT/echo.log" 2>&1 &
PIDS+=($!)
wait_http "$port" || die "echo did not start"
BASE="http://127.0.0.1:$port"
echo_count() { curl -fsS "$BASE/metrics" | awk '/^surge_echo_prompt_tokens_total / {print $2 / 16}'; }

addrs=()
for i in $(seq 2 $((AGENTS + 1))); do
    "$SURGE_AGENT" --listen "127.0.0.$i:0" --plaintext --allowed-targets 127.0.0.1 >"$OUT/agent.$i.log" 2>&1 &
    PIDS+=($!)
done
for i in $(seq 2 $((AGENTS + 1))); do
    a=$(agent_addr "$OUT/agent.$i.log")
    [[ -n $a ]] || die "agent $i did not start"
    addrs+=("$a")
done
list=$(IFS=,; echo "${addrs[*]}")
log "$AGENTS agents up; surge run with $((AGENTS * PER_AGENT)) in flight"

t0=$(date +%s.%N)
"$SURGE" run --base-url "$BASE" --model m --agents "$list" --agents-plaintext --no-initial-test \
    --random-input-len 16 --random-output-len 8 --num-prompts "$REQUESTS" \
    --max-concurrency $((AGENTS * PER_AGENT)) --save-result --result-dir "$OUT" --result-filename r.json \
    >"$OUT/run.out" 2>&1 &
RUN=$!
PIDS+=($RUN)
first=""
peak=0
while kill -0 "$RUN" 2>/dev/null; do
    if [[ -z $first ]] && [[ $(echo_count | cut -d. -f1) -gt 0 ]]; then first=$(date +%s.%N); fi
    r=$(awk '/^VmHWM:/ {print $2}' "/proc/$RUN/status" 2>/dev/null || echo 0)
    ((r > peak)) && peak=$r
    cpu=$(awk '{print ($14 + $15) / 100}' "/proc/$RUN/stat" 2>/dev/null || echo "$cpu")
    sleep 0.05
done
wait "$RUN" || log "surge run exited non-zero (see $OUT/run.out)"
t1=$(date +%s.%N)
R=$OUT/r.json
read -r completed failed rows_min rows_max dur < <(python3 - "$R" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [a["rows_received"] for a in r["client"]["agents"]]
print(r["completed"], r["failed"], min(rows), max(rows), r["duration"])
EOF
)
served=$(echo_count)
setup=$(python3 -c "print(round(${first:-$t1} - $t0, 2))")
wall=$(python3 -c "print(round($t1 - $t0, 2))")
per_row=$(python3 -c "print(round(${cpu:-0} / max($completed + $failed, 1) * 1e6, 1))")

cat <<EOF | tee "$OUT/table.md"
## $AGENTS agents on loopback (bench/fleet-64.sh, $START_DATE, binaries $BINS_BUILT, $(nproc) cores)

| check | result |
|---|---|
| agents, in flight each, requests | $AGENTS, $PER_AGENT, $REQUESTS |
| setup: launch to the echo's first request | **$setup s** |
| wall time of \`surge run\` / the result's duration | $wall s / $dur s |
| completed, failed / requests the echo served | $completed, $failed / $served |
| rows received per agent (min-max) | $rows_min-$rows_max |
| coordinator CPU per row (user+sys) | **$per_row us** (${cpu:-?} s) |
| coordinator peak RSS | $((peak / 1024)) MiB |
EOF
log "raw output in $OUT"
