#!/usr/bin/env bash
# Capacity (D62): a published methodology's fine saturation grid (11 concurrency levels x
# 3 runs around the knee, each level judged by its runs' mean p99 TTFT) against
# `surge capacity` (doubling, then bisection, each level judged by its p99's interval), on
# the same `surge echo --max-concurrent-streams 48` (TTFT 20 ms, 16 tokens 2 ms apart:
# the capacity under a 30 ms p99 TTFT objective is exactly 48). Both get the same prior
# knowledge: the knee is between 32 and 64 (the grid's levels 40..60 by 2, within 5 %).
# Reports the requests and the wall time each needs to place the capacity within 5 %, and
# the answer each gives. A second table searches from 1 with no prior (--range 1:1024).
# Usage: bench/capacity-vs-grid.sh   (BIN=debug for the dev build). Replaces its section
# of bench/RESULTS.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECTION=capacity-vs-grid
WORK=$(mktemp -d /tmp/surge-capacity.XXXXXX)
ECHO_PID=
cleanup() {
    [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
prepare_bins "$WORK"
PORT=$(free_port)
"$SURGE" echo --listen "127.0.0.1:$PORT" --max-concurrent-streams 48 --ttft-ms 20 --itl-ms 2 \
    --output-tokens 16 >"$WORK/echo.log" 2>&1 &
ECHO_PID=$!
wait_http "$PORT" || die "echo did not start"
BASE=http://127.0.0.1:$PORT
COMMON=(--base-url "$BASE" --model m --random-input-len 8 --random-output-len 16 --no-scrape-metrics)
N=368   # the fewest requests for which a p99 at 95 % can pass (what capacity uses by default)

now() { date +%s.%N; }

# The grid: 11 levels x 3 runs, N requests each.
t0=$(now)
"$SURGE" sweep "${COMMON[@]}" --concurrency 40,42,44,46,48,50,52,54,56,58,60 --runs 3 --num-prompts $N \
    --result-dir "$WORK/grid" >"$WORK/grid.log" 2>&1 || die "grid sweep failed: $(tail -5 "$WORK/grid.log")"
t1=$(now)
grid_wall=$(echo "$t1 - $t0" | bc)
read -r grid_requests grid_answer < <(python3 - "$WORK/grid" <<'EOF'
import json, sys, glob, collections
runs = collections.defaultdict(list)
requests = 0
for f in glob.glob(sys.argv[1] + "/sweep-c*-run*.json"):
    r = json.load(open(f))
    requests += r["completed"] + r["failed"] + r.get("cancelled", 0)
    runs[r["max_concurrency"]].append(r["p99_ttft_ms"])
passing = [c for c, v in runs.items() if sum(v) / len(v) <= 30.0]
print(requests, max(passing) if passing else "none")
EOF
)
log "grid: $grid_requests requests, ${grid_wall}s, answer $grid_answer"

search() {  # $1 name, rest: capacity flags
    local name=$1; shift
    local t0 t1
    t0=$(now)
    "$SURGE" capacity "${COMMON[@]}" --slo 'ttft:p99<=30' --over concurrency "$@" --result-dir "$WORK/$name" \
        >"$WORK/$name.log" 2>&1 || die "capacity failed: $(tail -5 "$WORK/$name.log")"
    t1=$(now)
    python3 - "$WORK/$name/capacity.json" "$(echo "$t1 - $t0" | bc)" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
print(c["totals"]["requests"], sys.argv[2], c["totals"]["level_runs"], c["capacity"], c["bracket"])
EOF
}
read -r cap_requests cap_wall cap_runs cap_answer cap_bracket < <(search prior --range 32:64)
log "capacity (prior 32:64): $cap_requests requests, ${cap_wall}s, $cap_runs level-runs, answer $cap_answer"
read -r free_requests free_wall free_runs free_answer free_bracket < <(search free --range 1:1024)
log "capacity (1:1024): $free_requests requests, ${free_wall}s, $free_runs level-runs, answer $free_answer"

ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
OUT=$WORK/section.md
{
    echo "<!-- $SECTION:begin -->"
    echo "## Capacity: a fine grid against \`surge capacity\` (bench/capacity-vs-grid.sh)"
    echo
    machine_md
    echo "- target: \`surge echo --max-concurrent-streams 48 --ttft-ms 20 --itl-ms 2 --output-tokens 16\`; objective p99 TTFT <= 30 ms; true capacity 48"
    echo "- grid: 11 levels (40..60 by 2) x 3 runs x $N requests, a level passes when its runs' mean p99 TTFT is within 30 ms (the methodology's point estimate)"
    echo
    echo "| method | level-runs | requests | wall s | answer | requests vs grid | wall vs grid |"
    echo "|---|---|---|---|---|---|---|"
    echo "| grid 11 x 3 (prior: knee in 32..64) | 33 | $grid_requests | $(printf %.1f "$grid_wall") | $grid_answer | 1.00 | 1.00 |"
    echo "| \`surge capacity --range 32:64\` (same prior) | $cap_runs | $cap_requests | $(printf %.1f "$cap_wall") | $cap_answer $cap_bracket | $(ratio "$cap_requests" "$grid_requests") | $(ratio "$cap_wall" "$grid_wall") |"
    echo "| \`surge capacity --range 1:1024\` (no prior) | $free_runs | $free_requests | $(printf %.1f "$free_wall") | $free_answer $free_bracket | $(ratio "$free_requests" "$grid_requests") | $(ratio "$free_wall" "$grid_wall") |"
    echo
    echo "<!-- $SECTION:end -->"
} >"$OUT"
replace_section "$ROOT/bench/RESULTS.md" "$SECTION" "$OUT"
cat "$OUT"
