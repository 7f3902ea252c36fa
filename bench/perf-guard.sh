#!/usr/bin/env bash
# The performance guard: the four figures of the client's cost in one table,
# each beside its reference. Timing, so not in CI; bench/RESULTS.md keeps its history.
#
#   SURGE_BIN_DIR=$PWD/target/release bench/perf-guard.sh     # binaries already built
#   BIN=debug ROUNDS=2 AGENTS=256 bench/perf-guard.sh
#
# 1. Token event: `surge run --backend openai-chat` (embedded agent) on core 0 against
#    `surge echo --ttft-ms 5 --itl-ms 1` on core 1, 8 and then 64 output tokens, 200 in
#    flight, REQUESTS [16000] each; the engine's CPU per request (the result's
#    client.agents[].cpu_seconds over completed) and the marginal cost of one token
#    event, (cpu64 - cpu8) / 56. Rounds alternate the order (this host's cost per
#    request drifts over consecutive runs). The same from the whole process under
#    /usr/bin/time, and, where vllm-bench is built (VLLM_BENCH, or on PATH), its process
#    CPU on the same loads: the ratios of the marginal event and of the 8-token request.
# 2. Request path: the same 8-token load from a `surge-agent` process counted by
#    `perf stat -e raw_syscalls:sys_enter` (no tracer slowdown): syscalls per request
#    and per token event, against the floor of one write and one read per arriving
#    segment; then the same under `strace -f -c` for the split by syscall.
# 3. Ingest: 3 `surge-agent` processes over mutual TLS, `surge run --backend http` on
#    the echo's /echo, ROWS [150000] rows: the coordinator's CPU per row (perf's
#    task-clock of `surge run`) and peak RSS; then SMALL_ROWS [2000] rows, which splits
#    the CPU into a cost per row (the difference over the rows between) and a cost
#    whatever the rows (start, TLS sessions, plan, result files).
# 4. Control plane: AGENTS [256] `surge-agent` processes on 127.0.1.x (plaintext,
#    loopback), one `surge run` of IDLE_S [20] s at 2 requests/s (8-token completions):
#    setup (launch to the echo's first request), peak RSS, and the coordinator's CPU
#    per agent-second in a steady window (from 3 s after the first request to 3 s
#    before the end, perf's task-clock of the coordinator, so the sessions' setup is
#    not in it); then runs
#    of LOAD_S [20] s at RATE [1000] requests/s (`--backend http`) from AGENTS agents
#    and from 3: the coordinator's CPU per row served in the same kind of window, all of
#    it and less that fleet's idle CPU per second (an idle run of 3 agents gives theirs).
#
# FIGURES [token path ingest control] picks the sections. Prints the table and writes
# it to OUT/table.md; with RECORD=1 it replaces the perf-guard section of
# bench/RESULTS.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
    "") ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
esac
ROUNDS=${ROUNDS:-1}
REQUESTS=${REQUESTS:-16000}
ROWS=${ROWS:-150000}
SMALL_ROWS=${SMALL_ROWS:-2000}
AGENTS=${AGENTS:-256}
IDLE_S=${IDLE_S:-20}
LOAD_S=${LOAD_S:-20}
RATE=${RATE:-1000}
FIGURES=${FIGURES:-token path ingest control}
# The reference client: vllm-bench where built (VLLM_BENCH=/path/to/vllm-bench, or on PATH).
VLLM_BENCH=${VLLM_BENCH:-$(command -v vllm-bench || true)}
v8=- v64=- v_event=- event_ratio="- (no vllm-bench)" request_ratio="- (no vllm-bench)" p8=- p64=- p_event=-
want() { [[ " $FIGURES " == *" $1 "* ]]; }
cpu8=- cpu64=- per_event=- per_request=- per_token=- split=- ingest_rows=- per_row=- ingest_rss=0
marginal=- fixed_ms=-
setup=- per_agent_s=- calls_agent_s=- per_call=- idle_rss=0 many=- few=- ratio=- n_rows=- many_more=- few_more=- ratio_more=-
OUT=${OUT:-$(mktemp -d /tmp/surge-perf-guard.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || true
prepare_bins "$OUT"
command -v perf >/dev/null || die "perf is needed (apt-get install linux-perf or linux-tools)"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# The echo on core 1 (the client gets core 0), counting what it served.
port=$(free_port)
taskset -c 1 "$SURGE" echo --listen "127.0.0.1:$port" --ttft-ms 5 --itl-ms 1 >"$OUT/echo.log" 2>&1 &
PIDS+=($!)
wait_http "$port" || die "echo did not start"
BASE="http://127.0.0.1:$port"

# mean of the numbers on stdin, 2 decimals
mean() { awk '{s += $1; n++} END {if (n) printf "%.2f", s / n; else print "?"}'; }
# the field of a result file: python expression over r
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

# --- 1. token event --------------------------------------------------------------
if want token; then
# The engine's CPU per request (the result's own account) and the whole process's (as
# /usr/bin/time sees it, startup included), in us: "engine process".
engine_cpu_per_request() { # tokens file
    taskset -c 0 /usr/bin/time -f '%U %S' -o "$OUT/tok-time.txt" "$SURGE" run --base-url "$BASE" --model m \
        --backend openai-chat --no-initial-test --random-input-len 16 --random-output-len "$1" --ignore-eos \
        --num-prompts "$REQUESTS" --max-concurrency 200 --save-result --result-dir "$OUT" --result-filename "$2" \
        >/dev/null 2>&1 || die "surge run failed (tokens $1)"
    local engine ok
    engine=$(field "$OUT/$2" 'sum(a["cpu_seconds"] for a in r["client"]["agents"]) / max(r["completed"], 1) * 1e6')
    ok=$(field "$OUT/$2" 'r["completed"]')
    awk -v e="$engine" -v n="$ok" '{printf "%s %.2f\n", e, ($1 + $2) / (n > 0 ? n : 1) * 1e6}' "$OUT/tok-time.txt"
}
# vllm-bench's process CPU per request, us, on the same load (its random dataset tokenized
# with the test fixture's tokenizer; it has no engine account of its own).
vllm_bench_cpu_per_request() { # tokens
    taskset -c 0 /usr/bin/time -f '%U %S' -o "$OUT/vb-time.txt" "$VLLM_BENCH" --backend openai-chat \
        --base-url "$BASE" --model m --tokenizer "$ROOT/tests/fixtures/tokenizer" --dataset-name random \
        --random-input-len 16 --random-output-len "$1" --ignore-eos --num-prompts "$REQUESTS" \
        --max-concurrency 200 --disable-tqdm >"$OUT/vb-$1.out" 2>&1 || die "vllm-bench failed: $(tail -3 "$OUT/vb-$1.out")"
    local ok
    ok=$(awk '/Successful requests:/ {print $NF}' "$OUT/vb-$1.out")
    [[ ${ok:-0} -gt 0 ]] || die "vllm-bench completed nothing: $(tail -3 "$OUT/vb-$1.out")"
    awk -v n="$ok" '{printf "%.2f\n", ($1 + $2) / n * 1e6}' "$OUT/vb-time.txt"
}
: >"$OUT/tok8" ; : >"$OUT/tok64"; : >"$OUT/ptok8" ; : >"$OUT/ptok64"; : >"$OUT/vb8" ; : >"$OUT/vb64"
for round in $(seq 1 "$ROUNDS"); do
    if ((round % 2)); then order="8 64"; else order="64 8"; fi
    for n in $order; do
        read -r c p < <(engine_cpu_per_request "$n" "tok$n-$round.json")
        echo "$c" >>"$OUT/tok$n"; echo "$p" >>"$OUT/ptok$n"
        log "token event: round $round, $n tokens: engine $c us, process $p us per request"
        if [[ -n $VLLM_BENCH ]]; then
            v=$(vllm_bench_cpu_per_request "$n")
            echo "$v" >>"$OUT/vb$n"
            log "token event: round $round, $n tokens: vllm-bench $v us per request"
        fi
    done
done
cpu8=$(mean <"$OUT/tok8"); cpu64=$(mean <"$OUT/tok64")
per_event=$(python3 -c "print(round(($cpu64 - $cpu8) / 56, 2))")
p8=$(mean <"$OUT/ptok8"); p64=$(mean <"$OUT/ptok64")
p_event=$(python3 -c "print(round(($p64 - $p8) / 56, 2))")
if [[ -n $VLLM_BENCH ]]; then
    v8=$(mean <"$OUT/vb8"); v64=$(mean <"$OUT/vb64")
    v_event=$(python3 -c "print(round(($v64 - $v8) / 56, 2))")
    event_ratio=$(python3 -c "print(round($p_event / $v_event, 2) if $v_event > 0 else '?')")
    request_ratio=$(python3 -c "print(round($p8 / $v8, 2))")
fi
fi

# --- 2. request path: syscalls ------------------------------------------------------
agent_run() { # wrapper-command... ; runs one 8-token load through a surge-agent under it
    local log=$OUT/agent-sys.log
    rm -f "$log"
    "$@" taskset -c 0 "$SURGE_AGENT" --listen 127.0.0.2:0 --plaintext --allowed-targets 127.0.0.1 >"$log" 2>&1 &
    local wrapper=$!
    local a
    a=$(agent_addr "$log")
    [[ -n $a ]] || die "agent did not start under $1"
    "$SURGE" run --base-url "$BASE" --model m --backend openai-chat --no-initial-test --agents "$a" \
        --agents-plaintext --random-input-len 16 --random-output-len 8 --ignore-eos --num-prompts "$REQUESTS" \
        --max-concurrency 200 --save-result --result-dir "$OUT" --result-filename sys.json >/dev/null 2>&1 \
        || die "surge run through the agent failed"
    pkill -INT -f "^$SURGE_AGENT --listen 127.0.0.2:0" 2>/dev/null || true
    wait "$wrapper" 2>/dev/null || true
}
if want path; then
agent_run perf stat -x, -e raw_syscalls:sys_enter -o "$OUT/perf-stat.csv" --
completed=$(field "$OUT/sys.json" 'r["completed"]')
events=$(field "$OUT/sys.json" 'r["total_output_tokens"]')
syscalls=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$OUT/perf-stat.csv")
per_request=$(python3 -c "print(round($syscalls / max($completed, 1), 1))")
per_token=$(python3 -c "print(round($syscalls / max($events, 1), 2))")
agent_run strace -f -c -o "$OUT/strace.txt" --
split=$(awk -v n="$completed" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "syscall" && $NF != "total" {printf "%s %.1f\n", $NF, $4 / n}' \
    "$OUT/strace.txt" | sort -k2 -rn | head -6 | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')
fi

# coordinator CPU (s) and peak RSS (KiB) of one `surge run`, its arguments after --
# CPU from perf's task-clock (steadier than /usr/bin/time's 10 ms ticks), peak RSS from time.
timed_run() {
    perf stat -e task-clock -x, -o "$OUT/stat.txt" -- /usr/bin/time -f '%M' -o "$OUT/time.txt" "$SURGE" run "$@" \
        >"$OUT/run.out" 2>&1 || die "surge run failed: $(tail -3 "$OUT/run.out")"
    local ms
    ms=$(awk -F, '$3 == "task-clock" || $3 ~ /^task-clock/ {print $1}' "$OUT/stat.txt")
    printf '%.3f %d\n' "$(python3 -c "print(${ms:-0} / 1000)")" "$(cat "$OUT/time.txt")"
}

# --- 3. ingest ------------------------------------------------------------------
if want ingest; then
(( ROWS > SMALL_ROWS )) || die "ROWS ($ROWS) must be above SMALL_ROWS ($SMALL_ROWS): the split is their difference"
start_tls_agents "$OUT"
tls_list=$TLS_AGENTS
ingest() { # rows, result file
    timed_run --base-url "$BASE" --model m --backend http --no-initial-test \
        --agents "$tls_list" --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/coordinator.pem" --tls-key "$PKI/coordinator.key" \
        --random-input-len 16 --num-prompts "$1" --max-concurrency 300 --save-result --result-dir "$OUT" \
        --result-filename "$2"
}
read -r ingest_cpu ingest_rss < <(ingest "$ROWS" ingest.json)
ingest_rows=$(field "$OUT/ingest.json" 'r["completed"] + r["failed"]')
per_row=$(python3 -c "print(round($ingest_cpu / max($ingest_rows, 1) * 1e6, 2))")
# The same with SMALL_ROWS: what the run costs whatever its rows (start, sessions, plan,
# files), and the cost of one more row between the two.
read -r small_cpu _ < <(ingest "$SMALL_ROWS" ingest-small.json)
small_rows=$(field "$OUT/ingest-small.json" 'r["completed"] + r["failed"]')
read -r marginal fixed_ms < <(python3 -c "
m = ($ingest_cpu - $small_cpu) / max($ingest_rows - $small_rows, 1)
print(round(m * 1e6, 2), round(($small_cpu - m * $small_rows) * 1e3, 1))")
log "ingest: $ingest_rows rows, coordinator $ingest_cpu s CPU, $per_row us per row ($marginal us per row more, $fixed_ms ms whatever the rows)"
fi

# --- 4. control plane -----------------------------------------------------------------
if want control; then
fleet=()
for i in $(seq 1 "$AGENTS"); do
    ip="127.0.$((1 + (i - 1) / 250)).$((2 + (i - 1) % 250))"
    "$SURGE_AGENT" --listen "$ip:0" --plaintext --allowed-targets 127.0.0.1 >"$OUT/fleet.$i.log" 2>&1 &
    PIDS+=($!)
done
for i in $(seq 1 "$AGENTS"); do
    a=$(agent_addr "$OUT/fleet.$i.log" 20)
    [[ -n $a ]] || die "fleet agent $i did not start"
    fleet+=("$a")
done
fleet_list=$(IFS=,; echo "${fleet[*]}")
log "$AGENTS agents up"
# requests the echo served (its counter counts these polls too: one each, itself included)
served() { curl -fsS "$BASE/metrics" | awk '/^surge_echo_requests_total / {print $2 + 0}'; }
# One `surge run` (its arguments) under /usr/bin/time, in the background; sets RUN (the
# time process), COORD (the coordinator), T0 and FIRST (when the echo saw the load's first
# request). Before the load, each of the run's agents checks the target with one
# `GET /v1/models` (its count is the run's comma-separated --agents list), and each poll
# counts itself: neither is the load.
start_run() {
    local before polls=0 checks=0 prev="" a
    for a in "$@"; do
        [[ $prev == --agents ]] && checks=$(tr ',' '\n' <<<"$a" | grep -c .)
        prev=$a
    done
    before=$(served)
    T0=$(date +%s.%N)
    /usr/bin/time -f '%U %S %M' -o "$OUT/time.txt" "$SURGE" run "$@" >"$OUT/run.out" 2>&1 &
    RUN=$!
    COORD=""
    for _ in $(seq 1 100); do COORD=$(pgrep -P "$RUN" | head -1); [[ -n $COORD ]] && break; sleep 0.02; done
    FIRST=""
    for _ in $(seq 1 1200); do
        kill -0 "$RUN" 2>/dev/null || break
        polls=$((polls + 1))
        if python3 -c "import sys; sys.exit(not float('$(served)') > float('$before') + $polls + $checks)"; then
            FIRST=$(date +%s.%N); break
        fi
        sleep 0.05
    done
    [[ -n $FIRST ]] || die "no request reached the echo: $(tail -3 "$OUT/run.out")"
}
# The coordinator's CPU (s), the seconds and the requests served over a steady window
# of $1 s that starts 3 s after the first request.
# CPU from perf's task-clock over the window, all threads (/proc's 10 ms ticks are too
# coarse for 3 agents' 5 ms a second), and the syscalls it made (4th field): idle, about
# one per control message, each a heartbeat, a health report or a batch.
window() {
    sleep 3
    local ms calls t1 s1 t2 s2
    t1=$(date +%s.%N); s1=$(served)
    perf stat -e task-clock,raw_syscalls:sys_enter -x, -o "$OUT/window.txt" -p "$COORD" -- sleep "$1" 2>/dev/null
    t2=$(date +%s.%N); s2=$(served)
    ms=$(awk -F, '$3 ~ /^task-clock/ {print $1}' "$OUT/window.txt")
    calls=$(awk -F, '$3 ~ /raw_syscalls:sys_enter/ {print $1}' "$OUT/window.txt")
    python3 -c "print(${ms:-0} / 1000, $t2 - $t1, $s2 - $s1 - 1, ${calls:-0})"
}
finish_run() { wait "$RUN" || die "surge run failed: $(tail -3 "$OUT/run.out")"; }
win=$((IDLE_S - 6))
few_list=$(IFS=,; echo "${fleet[*]:0:3}")
# The coordinator's CPU per second (s) over a steady window of an idle run (2 req/s).
idle_run() { # agent list, agents
    start_run --base-url "$BASE" --model m --random-input-len 16 --random-output-len 8 --no-initial-test \
        --agents "$1" --agents-plaintext --request-rate 2 --duration "$IDLE_S" --max-concurrency "$2"
}
idle_run "$fleet_list" "$AGENTS"
setup=$(python3 -c "print(round($FIRST - $T0, 2))")
read -r idle_cpu idle_secs _ idle_calls < <(window "$win")
finish_run
idle_rss=$(awk '{print $3}' "$OUT/time.txt")
per_agent_s=$(python3 -c "print(round($idle_cpu / ($AGENTS * $idle_secs) * 1e6, 1))")
calls_agent_s=$(python3 -c "print(round($idle_calls / ($AGENTS * $idle_secs), 1))")
per_call=$(python3 -c "print(round($idle_cpu / max($idle_calls, 1) * 1e6, 1))")
idle_many=$(python3 -c "print($idle_cpu / $idle_secs)")
log "control plane: setup $setup s, idle $per_agent_s us per agent-second ($idle_cpu s over $idle_secs s; $calls_agent_s syscalls per agent-second, $per_call us each)"
idle_run "$few_list" 3
read -r cpu3 secs3 _ < <(window "$win")
finish_run
idle_few=$(python3 -c "print($cpu3 / $secs3)")
log "control plane: idle at 3 agents $idle_few s of CPU per second"
# CPU per row at AGENTS agents and at 3, the same open-loop rate, in a steady window:
# all of it, and what the rows add to the same fleet's idle CPU per second.
per_row_under_load() { # agent list, idle CPU per second
    start_run --base-url "$BASE" --model m --backend http --no-initial-test --agents "$1" --agents-plaintext \
        --request-rate "$RATE" --duration "$LOAD_S" --max-concurrency 1000
    local cpu secs rows
    read -r cpu secs rows _ < <(window $((LOAD_S - 6)))
    finish_run
    python3 -c "r = max($rows, 1); print(round($cpu / r * 1e6, 2), int($rows), round(($cpu - $2 * $secs) / r * 1e6, 2))"
}
read -r many n_rows many_more < <(per_row_under_load "$fleet_list" "$idle_many")
read -r few _ few_more < <(per_row_under_load "$few_list" "$idle_few")
ratio=$(python3 -c "print(round($many / max($few, 1e-9), 2))")
ratio_more=$(python3 -c "print(round($many_more / $few_more, 2) if $few_more > 0 else '-')")
log "control plane: per row under load $many us at $AGENTS agents, $few us at 3 ($many_more / $few_more us more than idle)"
fi

cat <<EOF | tee "$OUT/table.md"
<!-- perf-guard:begin -->
## The performance guard (bench/perf-guard.sh, $START_DATE, binaries $BINS_BUILT, $(nproc) cores, $ROUNDS round(s))

| figure | measured | target |
|---|---|---|
| token event: engine CPU per request, 8 / 64 output tokens (chat, 200 in flight, $REQUESTS requests) | $cpu8 / $cpu64 us | |
| token event: marginal CPU per token event, (64 - 8) / 56 | **$per_event us** | |
| token event: the same from the whole process (/usr/bin/time), surge / vllm-bench | $p_event / $v_event us: **$event_ratio** | <= 0.33x |
| request path: process CPU per 8-token request, surge / vllm-bench (startup included) | $p8 / $v8 us: **$request_ratio** | <= 0.4x |
| request path: syscalls per 8-token request / per token event (perf stat) | **$per_request** / $per_token | floor: 1 write + 1 read per arriving segment |
| request path: most frequent syscalls per request (strace -f -c) | $split | |
| ingest: coordinator CPU per row (task-clock), 3 mTLS agents, --backend http, $ingest_rows rows | **$per_row us** (peak RSS $((ingest_rss / 1024)) MiB) | <= 0.5 us |
| ingest: the same split against a run of $SMALL_ROWS rows: per row more / whatever the rows | $marginal us / $fixed_ms ms | |
| control plane: setup of $AGENTS agents (launch to the load's first request) | **$setup s** | <= 5 s |
| control plane: coordinator CPU per agent-second, $AGENTS agents at 2 req/s, steady window | **$per_agent_s us** (peak RSS $((idle_rss / 1024)) MiB) | <= 20 us |
| control plane: the same idle window's coordinator syscalls per agent-second / CPU per syscall | $calls_agent_s / $per_call us | |
| control plane: coordinator CPU per row at $RATE req/s, $AGENTS agents / 3 agents, steady window ($n_rows rows) | $many / $few us: **${ratio}x** | <= 1.5x |
| control plane: the same less each fleet's idle CPU per second (what the rows add) | $many_more / $few_more us: ${ratio_more}x | |

- raw output: \`$OUT\`; git $(git -C "$ROOT" rev-parse --short HEAD)
<!-- perf-guard:end -->
EOF
if [[ ${RECORD:-0} == 1 ]]; then
    replace_section "$ROOT/bench/RESULTS.md" perf-guard "$OUT/table.md"
fi
