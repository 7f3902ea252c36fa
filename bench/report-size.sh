#!/usr/bin/env bash
# Report size and render time: the report of a 10-level sweep with 5 runs per level is < 2 MB and
# renders in well under a second. Runs the sweep against `surge echo` (levels 1..512, 200
# requests per run), times `surge report` (HTML + every PNG) three times, and times
# headless Chromium taking a screenshot of the report against an empty page (the browser's
# own start-up is the empty page's time). Appends a table to bench/RESULTS.md.
# Usage: bench/report-size.sh   (needs chromium for the render line; skipped without it)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
WORK=$(mktemp -d /tmp/surge-report-size.XXXXXX)
ECHO_PID=
cleanup() { [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
prepare_bins "$WORK"
"$SURGE" echo --listen 127.0.0.1:0 --ttft-ms 5 --itl-ms 1 --max-concurrent-streams 64 >"$WORK/echo.log" 2>&1 &
ECHO_PID=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/echo.log" && break; sleep 0.05; done
BASE=$(sed -n 's/.*listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$WORK/echo.log" | head -1)
log "sweep 10 levels x 5 runs against $BASE"
"$SURGE" sweep --base-url "$BASE" --model m --concurrency 1,2,4,8,16,32,64,128,256,512 --runs 5 --cooldown 0s \
    --num-prompts 200 --random-input-len 16 --random-output-len 8 --ignore-eos --cost-per-hour 8 \
    --result-dir "$WORK/sweep" >"$WORK/sweep.log" 2>&1 || die "sweep failed: $(tail -5 "$WORK/sweep.log")"
files=$(find "$WORK/sweep" -name '*.json' | wc -l)
times=()
for _ in 1 2 3; do
    t=$( { /usr/bin/time -f '%e %M' "$SURGE" report "$WORK/sweep" -o "$WORK/r.html" --png "$WORK/png" 2>&1 >/dev/null; } | tail -1)
    times+=("$t")
done
size=$(stat -c %s "$WORK/r.html")
pngs=$(find "$WORK/png" -name '*.png' | wc -l)
render="(no chromium)"
CHROMIUM=$(command -v chromium || true)
if [[ -n $CHROMIUM ]]; then
    echo '<html><body>x</body></html>' >"$WORK/empty.html"
    shot() { /usr/bin/time -f '%e' "$CHROMIUM" --headless --no-sandbox --disable-gpu --window-size=1400,2400 \
        --screenshot="$WORK/$1.png" "file://$WORK/$1" 2>&1 | tail -1; }
    e1=$(shot empty.html); r1=$(shot r.html); e2=$(shot empty.html); r2=$(shot r.html)
    render="report ${r1} s / ${r2} s, empty page ${e1} s / ${e2} s"
fi
{
    echo
    echo "## report size and speed ($START_DATE, bench/report-size.sh, binaries $BINS_BUILT)"
    echo
    echo "10-level concurrency sweep (1..512) x 5 runs = $files result files against \`surge echo\`."
    echo
    echo "| what | value |"
    echo "|---|---|"
    echo "| report.html size | $size bytes (bound: 2 MB) |"
    echo "| \`surge report\` wall s / peak KB, HTML + $pngs PNGs (3 runs) | ${times[*]} |"
    echo "| headless Chromium screenshot | $render |"
} >>"$BENCH_DIR/RESULTS.md"
log "report $size bytes; ${times[*]}; $render"
