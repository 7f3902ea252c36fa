#!/usr/bin/env bash
# Capacity against a real engine (D62): `surge capacity` over concurrency against
# llama.cpp's llama-server (SmolLM2-135M Q4_1, 8 slots, 2 threads; set up once by
# ../shared/tools/real-llm-target.sh setup), with a p90 TTFT and a p90 TPOT objective.
# Prints the search table and writes it to its section of bench/RESULTS.md.
# Usage: bench/capacity-real.sh   (BIN=debug for the dev build; SLO_TTFT, SLO_TPOT in ms)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECTION=capacity-real
TARGET=${TARGET:-$ROOT/../shared/tools/real-llm-target.sh}
RT=${RT:-$HOME/.cache/surge-real-target}
TOKENIZER=$RT/tokenizers/smollm2/tokenizer.json
[[ -x $RT/build/llama.cpp/bin/llama-server ]] || die "no llama-server: run $TARGET setup first"
SLO_TTFT=${SLO_TTFT:-1500}
SLO_TPOT=${SLO_TPOT:-150}
PORT=${PORT:-$(free_port)}
WORK=$(mktemp -d /tmp/surge-capacity-real.XXXXXX)
STARTED=0
cleanup() {
    [[ $STARTED == 1 ]] && PORT=$PORT RT=$RT bash "$TARGET" stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT
prepare_bins "$WORK"
PORT=$PORT RT=$RT bash "$TARGET" start >&2 || die "llama-server did not start"
STARTED=1
t0=$(date +%s.%N)
"$SURGE" capacity --base-url "http://127.0.0.1:$PORT" --model smollm2 --tokenizer "$TOKENIZER" \
    --random-input-len 64 --random-output-len 32 --ignore-eos \
    --slo "ttft:p90<=$SLO_TTFT" --slo "tpot:p90<=$SLO_TPOT" --over concurrency --range 1:64 \
    --result-dir "$WORK/cap" >"$WORK/cap.log" 2>&1 || die "capacity failed: $(tail -5 "$WORK/cap.log")"
t1=$(date +%s.%N)
OUT=$WORK/section.md
{
    echo "<!-- $SECTION:begin -->"
    echo "## Capacity against a real engine: llama-server (bench/capacity-real.sh)"
    echo
    machine_md
    echo "- target: llama.cpp llama-server, SmolLM2-135M-Instruct Q4_1, \`-np 8 -t 2\`, on this host's CPU"
    echo "- load: random 64-token prompts, 32 output tokens (--ignore-eos); objectives p90 TTFT <= $SLO_TTFT ms, p90 TPOT <= $SLO_TPOT ms, 95 % confidence; wall $(printf %.0f "$(echo "$t1 - $t0" | bc)") s"
    echo
    echo '```'
    sed -n '/=== Capacity search ===/,/^at capacity/p' "$WORK/cap.log"
    echo '```'
    echo
    echo "<!-- $SECTION:end -->"
} >"$OUT"
replace_section "$ROOT/bench/RESULTS.md" "$SECTION" "$OUT"
cat "$OUT"
