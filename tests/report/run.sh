#!/usr/bin/env bash
# Browser check of `surge report` (D28): a 3-level sweep against `surge echo`, its
# report opened in headless Chromium (Debian's `chromium`, apt-installed when missing), a
# screenshot taken and checked not to be blank; the report's PNGs are checked the same way
# (tests/report/pngcheck.py decodes PNGs with Python's standard library).
#
# Exit: 0 passed; 1 failed; 77 SKIPPED (no chromium and no way to install it).
# Environment: SURGE_BIN_DIR (default target/debug), SURGE_REPORT_KEEP=DIR copies the
# report, the screenshot and the PNGs there (how docs/guide.md's screenshot was made).
set -euo pipefail
say() { echo "report browser test: $*" >&2; }
source "$(dirname "$0")/../lib.sh"

need_command python3 python3
need_bins surge
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $CHROMIUM ]]; then
    need_command chromium chromium
    CHROMIUM=$(command -v chromium)
fi

"$BIN/surge" echo --listen 127.0.0.1:0 --ttft-ms 20 --itl-ms 4 --max-concurrent-streams 16 >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/echo.log" "listening on "
ECHO=$(sed -n 's/.*listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$WORK/echo.log" | head -1)

say "sweep 4,16,64 x 2 runs against $ECHO"
timeout 300 "$BIN/surge" sweep --base-url "$ECHO" --model m --concurrency 4,16,64 --runs 2 --cooldown 0s \
    --num-prompts 400 --random-input-len 32 --random-output-len 16 --ignore-eos --cost-per-hour 12 \
    --result-dir "$WORK/sweep" >"$WORK/sweep.log" 2>&1 || { cat "$WORK/sweep.log" >&2; say "FAILED: the sweep"; exit 1; }
timeout 60 "$BIN/surge" report "$WORK/sweep" -o "$WORK/report.html" --png "$WORK/png" \
    || { say "FAILED: surge report"; exit 1; }

timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,2400 \
    --screenshot="$WORK/screenshot.png" "file://$WORK/report.html" >"$WORK/chromium.log" 2>&1 || true
[[ -s $WORK/screenshot.png ]] || { cat "$WORK/chromium.log" >&2; say "FAILED: no screenshot"; exit 1; }
python3 "$REPO/tests/report/pngcheck.py" "$WORK/screenshot.png" 0.05 || { say "FAILED: the screenshot is blank"; exit 1; }
n=0
for f in "$WORK"/png/*.png; do
    python3 "$REPO/tests/report/pngcheck.py" "$f" 0.01 >/dev/null || { python3 "$REPO/tests/report/pngcheck.py" "$f" || true; say "FAILED: $f is blank"; exit 1; }
    n=$((n + 1))
done
(( n >= 8 )) || { say "FAILED: only $n PNGs"; exit 1; }
if [[ -n ${SURGE_REPORT_KEEP:-} ]]; then
    mkdir -p "$SURGE_REPORT_KEEP"
    cp -r "$WORK/report.html" "$WORK/screenshot.png" "$WORK/png" "$SURGE_REPORT_KEEP/"
fi
say "PASSED: screenshot and $n PNGs not blank"
