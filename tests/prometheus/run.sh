#!/usr/bin/env bash
# A real Prometheus scrapes surge's live metrics (D16, D28) and a value is read
# back through its HTTP query API:
#   - `surge run --prometheus-listen` (every agent, labelled) against `surge echo`,
#     through a remote `surge-agent --metrics-listen` (its own endpoint, with sessions);
#   - Prometheus (Debian's `prometheus` package, apt-installed when missing) scrapes both
#     every 500 ms; after the run, /api/v1/query must give surge_requests_total =
#     the run's completed count, from the agent's endpoint and from the coordinator's
#     (which serves its final values for --live-linger after the run), and
#     surge_agent_sessions was 1.
#
# Exit: 0 passed; 1 failed; 77 SKIPPED (no prometheus and no way to install it).
# Environment: SURGE_BIN_DIR (default target/debug: the README's test command built it).
set -euo pipefail
say() { echo "prometheus test: $*" >&2; }
source "$(dirname "$0")/../lib.sh"

need_command python3 python3
need_bins surge surge-agent
need_command prometheus prometheus

"$BIN/surge" echo --listen 127.0.0.1:0 --ttft-ms 5 --itl-ms 2 >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/echo.log" "listening on "
ECHO=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/p' "$WORK/echo.log" | head -1)
AGENT_METRICS=$(free_port)
"$BIN/surge-agent" --listen 127.0.0.2:0 --plaintext --allowed-targets 127.0.0.1 \
    --metrics-listen "127.0.0.2:$AGENT_METRICS" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "listening on "
AGENT=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$WORK/agent.log" | head -1)
SURGE_METRICS=$(free_port)
PROM=$(free_port)
cat >"$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 500ms
  evaluation_interval: 500ms
scrape_configs:
  - job_name: surge
    static_configs: [{targets: ["127.0.0.1:$SURGE_METRICS"]}]
  - job_name: surge-agent
    static_configs: [{targets: ["127.0.0.2:$AGENT_METRICS"]}]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROM" >"$WORK/prom.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/prom.log" "Server is ready to receive web requests"

"$BIN/surge" run --base-url "http://$ECHO" --model m --agents "$AGENT" --agents-plaintext --no-scrape-metrics \
    --random-input-len 16 --random-output-len 8 --ignore-eos --max-concurrency 20 --duration 6s \
    --prometheus-listen "127.0.0.1:$SURGE_METRICS" --live-linger 2s --save-result --result-dir "$WORK" --result-filename r.json \
    >"$WORK/run.log" 2>&1 &
RUN=$!
PIDS+=($RUN)
query() { curl -sf --get "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$1"; }
value() { python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")'; }
# While the run is on: the agent's own endpoint shows its session.
SESSIONS=none
for _ in $(seq 1 100); do
    SESSIONS=$(query 'max_over_time(surge_agent_sessions{job="surge-agent"}[1m])' | value)
    [[ $SESSIONS == 1 ]] && break
    sleep 0.1
done
wait "$RUN" || { say "surge run failed"; cat "$WORK/run.log" >&2; exit 1; }
COMPLETED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["completed"])' "$WORK/r.json")
# surge serves its final counts for --live-linger (2 s: four scrapes) before it exits;
# compare with what Prometheus last saw of both endpoints.
GOT=none
for _ in $(seq 1 40); do
    GOT=$(query "max_over_time(surge_requests_total{job=\"surge\",outcome=\"completed\",agent=\"$AGENT\"}[1m])" | value)
    AGENT_GOT=$(query 'max_over_time(surge_requests_total{job="surge-agent",outcome="completed"}[1m])' | value)
    [[ $AGENT_GOT != none && ${AGENT_GOT%.*} == "$COMPLETED" && ${GOT%.*} == "$COMPLETED" ]] && break
    sleep 0.25
done
say "run completed $COMPLETED; Prometheus: coordinator's surge_requests_total $GOT, agent's $AGENT_GOT, agent sessions $SESSIONS"
[[ $SESSIONS == 1 ]] || { say "FAILED: surge_agent_sessions never read 1"; exit 1; }
[[ ${AGENT_GOT%.*} == "$COMPLETED" ]] || { say "FAILED: the agent's counter is not the run's completed count"; exit 1; }
# The coordinator's endpoint published its final values and lingered: the last scrape
# saw every completed request (it once read 5,781 of 6,141 without the linger).
[[ ${GOT%.*} == "$COMPLETED" ]] || { say "FAILED: the coordinator's surge_requests_total ($GOT) is not the run's $COMPLETED"; exit 1; }
say "passed"
