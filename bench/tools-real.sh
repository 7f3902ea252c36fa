#!/usr/bin/env bash
# A real server's tool calls through an agent loop (D65): llama.cpp's llama-server
# (`../shared/tools/real-llm-target.sh setup` once) with --jinja (its tool-call parser),
# SmolLM2-135M-Instruct, asked with --tools and --tool-choice required; surge's counts
# against the server's own.
#
#   SURGE_BIN_DIR=$PWD/target/debug bench/tools-real.sh
#
# Reports: requests, replies ending in tool calls (finish_reason "tool_calls"), the tool
# steps surge sent back, tool-call deltas, and output tokens by surge (the server's usage
# per request, summed) against llama-server's `llamacpp:tokens_predicted_total`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_llama_server
OUT=${OUT:-$(mktemp -d /tmp/surge-tools-real.XXXXXX)}
mkdir -p "$OUT"
prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start_llama_server "$OUT" --jinja
cat >"$OUT/tools.json" <<'EOF'
[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
EOF
predicted() { curl -fsS "$BASE/metrics" | awk '$1 == "llamacpp:tokens_predicted_total" {print $2}'; }
before=$(predicted)
"$SURGE" run --base-url "$BASE" --backend openai-chat --model smollm2 --tools "$OUT/tools.json" \
    --tool-choice required --multi-turn --multi-turn-num-turns 2 --num-prompts 8 --max-concurrency 4 \
    --tool-loop --max-tool-steps 2 --tool-latency-ms 10 --random-input-len 16 --random-output-len 48 \
    --no-initial-test --save-rows "$OUT/rows.jsonl" --save-result --result-dir "$OUT" \
    --result-filename tools.json >"$OUT/run.out" 2>&1 || log "surge exited non-zero (see $OUT/run.out)"
after=$(predicted)
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
R=$OUT/tools.json
server_tokens=$(python3 -c "print(int(float('$after') - float('$before')))")
cat <<EOF | tee "$OUT/table.md"
## a real server's tool calls ($START_DATE, binaries $BINS_BUILT, $(nproc) cores)

| check | result |
|---|---|
| requests completed / failed | $(json "$R" 'd["completed"]') / $(json "$R" 'd["failed"]') |
| replies ending in tool calls (surge) / answers | $(json "$R" 'd["agent_loop"]["tool_call_replies"]') / $(json "$R" 'd["agent_loop"]["answers"]') |
| tool steps sent back | $(json "$R" 'd["agent_loop"]["tool_steps"]') |
| tool calls opened / their deltas | $(json "$R" '(d.get("reasoning") or {}).get("tool_calls")') / $(json "$R" '(d.get("reasoning") or {}).get("tool_call_tokens")') |
| output tokens: surge (server usage per request) / llama-server's counter | $(json "$R" 'd["total_output_tokens"]') / $server_tokens |
EOF
log "raw output in $OUT"
