#!/usr/bin/env bash
# A run's time slices do not grow with its length (D90): `surge run` at RATE req/s [300]
# for SECONDS_RUN [300] with `--timeslice 10ms` (30,000 slices asked: a run of 8 h at 1 s)
# against `surge echo`, the coordinator's RSS read every 10 s; then the result's
# `timeslice_s`, slice count and completed sum. The RSS compared is at 30 s and 10 s
# before the load ends (the end's analysis, sorting the exact values, is a peak of its
# own). With BEFORE=DIR (a directory holding an older `surge`), the same run of that
# binary goes alongside, on the same echo.
#
#   bench/slices.sh                       # ~5 min
#   SECONDS_RUN=120 BEFORE=/tmp/b/old bench/slices.sh
#
# Environment: SURGE_BIN_DIR / BIN as the other scripts (bench/lib.sh), OUT raw-output
#   directory, RESULTS file whose "slices" section is replaced [bench/RESULTS.md; empty =
#   none].
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
RATE=${RATE:-300}
SECONDS_RUN=${SECONDS_RUN:-300}
RESULTS=${RESULTS-$BENCH_DIR/RESULTS.md}
OUT=${OUT:-$(mktemp -d /tmp/surge-slices.XXXXXX)}
mkdir -p "$OUT"
prepare_bins "$OUT"

PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

PORT=$(free_port)
"$SURGE" echo --listen "127.0.0.1:$PORT" >"$OUT/echo.log" 2>&1 &
PIDS+=($!)
wait_http "$PORT" || die "echo did not start"

# run NAME BINARY: one run in the background; its PID in RUN_PID.
run() {
    mkdir -p "$OUT/$1"
    "$2" run --base-url "http://127.0.0.1:$PORT" --model surge-echo --backend openai \
        --dataset-name random --random-input-len 16 --random-output-len 4 \
        --request-rate "$RATE" --duration "${SECONDS_RUN}s" --timeslice 10ms \
        --result-dir "$OUT/$1" --save-result >"$OUT/$1/run.log" 2>&1 &
    RUN_PID=$!
    PIDS+=("$RUN_PID")
}

names=(after)
run after "$SURGE"
pids=("$RUN_PID")
if [[ -n ${BEFORE:-} ]]; then
    names+=(before)
    run before "$BEFORE/surge"
    pids+=("$RUN_PID")
fi
log "runs: ${names[*]} (${SECONDS_RUN} s at ${RATE} req/s, 10 ms slices)"
start=$(date +%s)
for _ in $(seq 1 $(( SECONDS_RUN / 10 + 30 ))); do
    alive=0
    for i in "${!pids[@]}"; do
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/${pids[$i]}/status" 2>/dev/null || true)
        if [[ -n $rss ]]; then
            alive=1
            echo "$(( $(date +%s) - start )) $rss" >>"$OUT/${names[$i]}/rss.txt"
        fi
    done
    [[ $alive == 1 ]] || break
    sleep 10
done
for p in "${pids[@]}"; do wait "$p" || die "a run failed: see $OUT/*/run.log"; done

table=$OUT/table.md
{
    echo "| build | RSS at 30 s (MiB) | RSS 10 s before the load's end (MiB) | growth between (KiB/s) | peak RSS, the end's analysis included (MiB) | \`timeslice_s\` | slices | completed (sum of slices / result) |"
    echo "|---|---|---|---|---|---|---|---|"
    for n in "${names[@]}"; do
        python3 - "$OUT/$n" "$n" "$SECONDS_RUN" <<'EOF'
import glob, json, sys
d, name, length = sys.argv[1], sys.argv[2], int(sys.argv[3])
rss = [tuple(map(int, l.split())) for l in open(f"{d}/rss.txt")]
at30 = min(rss, key=lambda p: abs(p[0] - 30))
late = min(rss, key=lambda p: abs(p[0] - (length - 10)))
r = json.load(open(glob.glob(f"{d}/*.json")[0]))
ts = r["time_series"]
growth = (late[1] - at30[1]) / max(late[0] - at30[0], 1)
print(f"| {name} | {at30[1] / 1024:.1f} | {late[1] / 1024:.1f} | {growth:.1f} | {max(p[1] for p in rss) / 1024:.1f} | "
      f"{r.get('timeslice_s', '(absent)')} | {len(ts)} | {sum(s['completed'] for s in ts)} / {r['completed']} |")
EOF
    done
} >"$table"
cat "$table"

if [[ -n $RESULTS ]]; then
    section=$OUT/section.md
    {
        echo "<!-- slices:begin -->"
        echo "## slices ($START_DATE, bench/slices.sh, ${SECONDS_RUN} s at ${RATE} req/s, --timeslice 10ms)"
        echo
        machine_md
        [[ -n ${BEFORE:-} ]] && echo "- before: \`$BEFORE/surge\` ($("$BEFORE/surge" --version 2>/dev/null))"
        echo
        cat "$table"
        echo "<!-- slices:end -->"
    } >"$section"
    replace_section "$RESULTS" slices "$section"
    log "recorded in $RESULTS"
fi
