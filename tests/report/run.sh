#!/usr/bin/env bash
# Browser check of `surge report` (issue 14): a 3-level sweep against `surge echo`, its
# report opened in headless Chromium (Debian's `chromium`, apt-installed when missing), a
# screenshot taken and checked not to be blank; the report's PNGs are checked the same way
# (tests/report/pngcheck.py decodes PNGs with Python's standard library).
#
# Exit: 0 passed; 1 failed; 77 SKIPPED (no chromium and no way to install it).
# Environment: SURGE_BIN_DIR (default target/debug), SURGE_REPORT_KEEP=DIR copies the
# report, the screenshot and the PNGs there (how the README's screenshot was made).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${SURGE_BIN_DIR:-$REPO/target/debug}
SKIP=77
say() { echo "report browser test: $*" >&2; }

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $CHROMIUM ]]; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's chromium package"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
            >/dev/null 2>&1 || { say "SKIPPED: cannot apt-get install chromium"; exit $SKIP; }
        CHROMIUM=$(command -v chromium)
    else
        say "SKIPPED: no chromium, and not root with apt-get to install it"
        exit $SKIP
    fi
fi
command -v python3 >/dev/null || { say "SKIPPED: needs python3"; exit $SKIP; }
[[ -x $BIN/surge ]] || { say "no surge binary in $BIN (run cargo build)"; exit 1; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
wait_line() { # file pattern
    for _ in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    say "timed out waiting for '$2' in $1"; cat "$1" >&2; return 1
}

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
