#!/usr/bin/env bash
# Anomalies against a real server (D70): llama.cpp's llama-server
# (`../shared/tools/real-llm-target.sh setup` once), SmolLM2-135M-Instruct, completions and
# chat, with --ignore-eos (the random dataset's default) and without: every reply checked
# as surge checks it, and the server's usage against the streamed token events.
#
#   SURGE_BIN_DIR=$PWD/target/debug bench/anomalies-real.sh
#
# Reports per run: requests completed and failed, the anomalies by kind, and from the rows
# the requests whose usage differed from their token events.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_llama_server
OUT=${OUT:-$(mktemp -d /tmp/surge-anomalies-real.XXXXXX)}
mkdir -p "$OUT"
prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start_llama_server "$OUT"
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
ROWS=""
for backend in openai openai-chat; do
    for eos in ignore honour; do
        name="$backend-$eos"
        extra=()
        # The random dataset implies --ignore-eos (vLLM 0.32); a fixed prompt does not.
        if [[ $eos == honour ]]; then extra=(--dataset-name fixed --prompt "Tell me a short story about a cat."); fi
        "$SURGE" run --base-url "$BASE" --backend "$backend" --model smollm2 --num-prompts 40 \
            --max-concurrency 4 --random-input-len 32 --random-output-len 48 --output-len 48 "${extra[@]}" \
            --no-initial-test --save-rows "$OUT/$name.jsonl" --save-result --result-dir "$OUT" \
            --result-filename "$name.json" >"$OUT/$name.out" 2>&1 || log "surge exited non-zero (see $OUT/$name.out)"
        R=$OUT/$name.json
        kinds=$(json "$R" '", ".join(f"{k} {v}" for k, v in d["anomalies"]["by_kind"].items())')
        ROWS+="| $backend | $eos | $(json "$R" 'd["completed"]') / $(json "$R" 'd["failed"]') | $kinds |"$'\n'
    done
done
cat <<EOF | tee "$OUT/table.md"
## anomalies against a real server ($START_DATE, binaries $BINS_BUILT, $(nproc) cores)

llama-server (SmolLM2-135M-Instruct, 4 slots), 40 requests of 48 output tokens each run.

| backend | EOS | completed / failed | anomalies by kind |
|---|---|---|---|
$ROWS
EOF
log "raw output in $OUT"
