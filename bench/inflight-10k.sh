#!/usr/bin/env bash
# 10,000 requests in flight from one agent (D13).
#
#   bench/inflight-10k.sh
#
# `surge echo --ttft-ms 500 --itl-ms 10` and `surge run --max-concurrency 10000
# --num-prompts 30000` (16 words in, 8 tokens out) on 127.0.0.1, the embedded agent:
# completed, failed, the agent's max in flight, and the surge process's peak RSS per
# in-flight request (goal: all completed, 0 failed, <= 50 KiB).
#
# Environment: BIN=release|debug [release], INFLIGHT [10000], NUM_PROMPTS [3 x INFLIGHT],
#   OUT raw-output directory, RESULTS file whose "inflight-10k" section is replaced
#   [bench/RESULTS.md; empty = none].
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
INFLIGHT=${INFLIGHT:-10000}
NUM_PROMPTS=${NUM_PROMPTS:-$((3 * INFLIGHT))}
RESULTS=${RESULTS-$BENCH_DIR/RESULTS.md}
OUT=${OUT:-$(mktemp -d /tmp/surge-inflight-10k.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 20000 2>/dev/null || true
(( $(ulimit -n) >= INFLIGHT + 256 )) || die "open-file limit $(ulimit -n) is below $((INFLIGHT + 256))"

prepare_bins "$OUT"

port=$(free_port)
"$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 500 --itl-ms 10 >"$OUT/echo.log" 2>&1 &
echo_pid=$!
trap 'kill "$echo_pid" 2>/dev/null || true' EXIT
wait_http "$port" || die "echo did not start"

/usr/bin/time -v "$SURGE" run --base-url "http://127.0.0.1:$port" --model m --random-input-len 16 \
    --random-output-len 8 --ignore-eos --max-concurrency "$INFLIGHT" --num-prompts "$NUM_PROMPTS" \
    --save-result --result-dir "$OUT" --result-filename r.json >"$OUT/run.out" 2>"$OUT/run.err" \
    || die "run failed: $(tail -5 "$OUT/run.err")"
peak_kib=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$OUT/run.err")
line=$(python3 - "$OUT/r.json" "$peak_kib" "$INFLIGHT" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); peak = int(sys.argv[2]); n = int(sys.argv[3])
a = d["client"]["agents"][0]
print(f"| {n} | {d['completed']} | {d['failed']} | {a['max_in_flight']} | {peak // 1024} | {peak / n:.1f} | "
      f"{d['median_ttft_ms']:.0f} / {d['p99_ttft_ms']:.0f} | {d['client']['verdict']['client_bound']} |")
EOF
)
md=$OUT/section.md
{
    echo "<!-- inflight-10k:begin -->"
    echo "## ${INFLIGHT} in flight from one agent (bench/inflight-10k.sh)"
    echo
    machine_md
    echo
    echo "surge echo (TTFT 500 ms, ITL 10 ms) and surge (coordinator + embedded agent) share the host's cores; the RSS is the whole surge process."
    echo
    echo "| in flight | completed | failed | agent max in flight | surge peak RSS (MiB) | KiB per in-flight request | TTFT p50 / p99 (ms) | client_bound |"
    echo "|---|---|---|---|---|---|---|---|"
    echo "$line"
    echo "<!-- inflight-10k:end -->"
} >"$md"
cat "$md"
if [[ -n $RESULTS ]]; then replace_section "$RESULTS" inflight-10k "$md"; fi
