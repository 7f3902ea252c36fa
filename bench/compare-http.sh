#!/usr/bin/env bash
# Plain-HTTP client throughput: surge vs oha vs wrk against `surge echo`'s POST /echo.
#
#   bench/compare-http.sh            # full: levels 64 and 256, 5 alternating rounds, 10 s runs
#   bench/compare-http.sh --quick    # smoke: 1 round, 3 s runs; RESULTS.md is left alone
#
# The echo server is pinned to CPU $SERVER_CPU (1), every client to CPU $CLIENT_CPU (0),
# so each client gets exactly one core against a server with exactly one core. Runs
# alternate between the tools (the starting tool rotates every round) so drift in the
# machine's state spreads evenly over them. Every tool is time-bound (surge with
# --duration and a cap of $SURGE_NUM_PROMPTS prompts).
#
# Environment (defaults in brackets):
#   LEVELS ["64 256"]  ROUNDS [5; quick 1]  DURATION seconds [10; quick 3]
#   TOOLS ["surge oha wrk"]  SERVER_CPU [1]  CLIENT_CPU [0]  PORT [a free one]
#   SURGE_NUM_PROMPTS [1500000; quick 400000]  PAUSE seconds between runs [2]
#   OHA [oha on PATH, else ~/.cargo/bin/oha]  OHA_WAIT seconds to wait for oha to appear [0]
#   WRK [wrk]  OUT raw-output directory [a new /tmp/surge-compare-http.XXXXXX]
#   RESULTS file whose "compare-http" section is replaced [full: bench/RESULTS.md; quick: none]
#   QUIET_WAIT seconds to wait before each run for other Rust builds (cargo, rustc, cc, ld)
#     to finish [full 900; quick 0]  RETRIES redo a disturbed run [full 4; quick 0]
#   OTHER_MAX a run is disturbed when a build was seen during it or the rest of the machine
#     used more than this % of one core meanwhile [15]; quick mode only marks such runs
set -euo pipefail
source "$(dirname "$0")/lib.sh"

QUICK=0
case "${1:-}" in
    --quick) QUICK=1 ;;
    "") ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (only --quick)" ;;
esac

LEVELS=${LEVELS:-"64 256"}
TOOLS=${TOOLS:-"surge oha wrk"}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
PAUSE=${PAUSE:-2}
WRK=${WRK:-wrk}
OHA_WAIT=${OHA_WAIT:-0}
if (( QUICK )); then
    ROUNDS=${ROUNDS:-1}; DURATION=${DURATION:-3}; SURGE_NUM_PROMPTS=${SURGE_NUM_PROMPTS:-400000}
    QUIET_WAIT=${QUIET_WAIT:-0}; RETRIES=${RETRIES:-0}; OTHER_MAX=${OTHER_MAX:-15}
    RESULTS=${RESULTS:-}
else
    ROUNDS=${ROUNDS:-5}; DURATION=${DURATION:-10}; SURGE_NUM_PROMPTS=${SURGE_NUM_PROMPTS:-1500000}
    QUIET_WAIT=${QUIET_WAIT:-900}; RETRIES=${RETRIES:-4}; OTHER_MAX=${OTHER_MAX:-15}
    RESULTS=${RESULTS-$BENCH_DIR/RESULTS.md}
fi
OUT=${OUT:-$(mktemp -d /tmp/surge-compare-http.XXXXXX)}
mkdir -p "$OUT"

# The body oha and wrk send: 16 words from surge's prompt word list, like the bodies of
# `surge run --backend http --random-input-len 16` (random words, 16 of them).
BODY="water people little answer country time long find make day the of and to was he"

# --- tools -------------------------------------------------------------------
command -v taskset >/dev/null || die "taskset not found (util-linux)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
[[ ${BIN:-release} == release ]] || die "BIN=$BIN: comparisons use the release build"
prepare_bins "$OUT"

find_oha() {
    if [[ -n ${OHA:-} ]]; then [[ -x $OHA ]] && echo "$OHA"; return 0; fi
    command -v oha 2>/dev/null || { [[ -x $HOME/.cargo/bin/oha ]] && echo "$HOME/.cargo/bin/oha"; } || true
}
NOTES=()
want() { [[ " $TOOLS " == *" $1 "* ]]; }
if want oha; then
    OHA_BIN=$(find_oha)
    waited=0
    while [[ -z $OHA_BIN ]] && (( waited < OHA_WAIT )); do
        (( waited % 60 == 0 )) && log "waiting for oha to appear ($waited/${OHA_WAIT}s)"
        sleep 10; waited=$((waited + 10)); OHA_BIN=$(find_oha)
    done
    if [[ -z $OHA_BIN ]]; then
        NOTES+=("oha was not available (looked on PATH and in ~/.cargo/bin): it was left out.")
        TOOLS=$(tr ' ' '\n' <<<"$TOOLS" | grep -vx oha | xargs)
    fi
fi
if want wrk && ! command -v "$WRK" >/dev/null; then
    NOTES+=("wrk was not available: it was left out.")
    TOOLS=$(tr ' ' '\n' <<<"$TOOLS" | grep -vx wrk | xargs)
fi
read -r -a TOOL_LIST <<<"$TOOLS"
(( ${#TOOL_LIST[@]} > 0 )) || die "no tool to run"

cat >"$OUT/post.lua" <<EOF
wrk.method = "POST"
wrk.body   = "$BODY"
wrk.headers["Content-Type"] = "text/plain"
EOF

# --- echo server -------------------------------------------------------------
PORT=${PORT:-$(free_port)}
URL=http://127.0.0.1:$PORT
ECHO_PID=
cleanup() { if [[ -n $ECHO_PID ]]; then kill "$ECHO_PID" 2>/dev/null || true; wait "$ECHO_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM
taskset -c "$SERVER_CPU" "$SURGE" echo --listen "127.0.0.1:$PORT" >"$OUT/echo.log" 2>&1 &
ECHO_PID=$!
wait_http "$PORT" || die "echo server did not come up (see $OUT/echo.log)"
[[ $(curl -fsS -X POST -H 'Content-Type: text/plain' --data-binary "$BODY" "$URL/echo") == "$BODY" ]] \
    || die "POST /echo does not echo the body"

LOAD_BEFORE=$(uptime | sed 's/.*load average/load average/')
BUILDS_BEFORE=$(builds_running)
log "echo server pid $ECHO_PID on $URL (CPU $SERVER_CPU); clients on CPU $CLIENT_CPU; raw output in $OUT"
log "$LOAD_BEFORE; builds running: $BUILDS_BEFORE"

# --- one run -----------------------------------------------------------------
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
build_count() { ps -eo comm= | grep -cE '^(cargo|rustc|cc|ld|ld\.lld|mold|clang)$' || true; }

# Waits (at most QUIET_WAIT s) until no Rust build has run for 5 s in a row.
wait_quiet() {
    local waited=0 quiet=0
    while (( quiet < 5 && waited < QUIET_WAIT )); do
        if (( $(build_count) == 0 )); then quiet=$((quiet + 1)); else quiet=0; fi
        (( waited > 0 && waited % 60 == 0 )) && log "waiting for other builds to finish (${waited}s: $(builds_running))"
        sleep 1; waited=$((waited + 1))
    done
}

# Runs one tool once. Sets RUN_LINE to "level tool round req/s 2xx errors client% server%
# other% detail" (tab separated) and RUN_BUILDS to the most build processes seen during
# the run. req/s counts 2xx responses only, for every tool.
run_one() {
    local tool=$1 c=$2 round=$3 attempt=$4
    local f=$OUT/c$c-$tool-$round.$attempt tf=$OUT/c$c-$tool-$round.$attempt.time
    local rps ok err ccpu secs detail s0 s1 b0 b1 sampler
    : >"$f.builds"
    ( while :; do build_count >>"$f.builds"; sleep 0.2; done ) &
    sampler=$!
    s0=$(cpu_ticks "$ECHO_PID"); b0=$(busy_ticks)
    case $tool in
    surge)
        taskset -c "$CLIENT_CPU" /usr/bin/time -f '%e %U %S' -o "$tf" \
            "$SURGE" run --base-url "$URL" --backend http --endpoint /echo --random-input-len 16 \
            --num-prompts "$SURGE_NUM_PROMPTS" --duration "${DURATION}s" --max-concurrency "$c" \
            >"$f.out" 2>"$f.err" || log "surge exited $? (see $f.err)"
        ;;
    oha)
        taskset -c "$CLIENT_CPU" /usr/bin/time -f '%e %U %S' -o "$tf" \
            "$OHA_BIN" -z "${DURATION}s" -c "$c" -m POST -T text/plain -d "$BODY" --no-tui \
            --output-format json "$URL/echo" >"$f.out" 2>"$f.err" || log "oha exited $? (see $f.err)"
        ;;
    wrk)
        taskset -c "$CLIENT_CPU" /usr/bin/time -f '%e %U %S' -o "$tf" \
            "$WRK" -t1 -c "$c" -d "${DURATION}s" -s "$OUT/post.lua" "$URL/echo" \
            >"$f.out" 2>"$f.err" || log "wrk exited $? (see $f.err)"
        ;;
    esac
    s1=$(cpu_ticks "$ECHO_PID"); b1=$(busy_ticks)
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
    RUN_BUILDS=$(sort -n "$f.builds" | tail -1); RUN_BUILDS=${RUN_BUILDS:-0}
    case $tool in
    surge)
        rps=$(sed -n 's/^Request throughput (req\/s):[[:space:]]*\([0-9.]*\).*/\1/p' "$f.out")
        ok=$(sed -n 's/^Successful requests:[[:space:]]*\([0-9]*\).*/\1/p' "$f.out")
        err=$(sed -n 's/^Failed requests:[[:space:]]*\([0-9]*\).*/\1/p' "$f.out")
        secs=$(sed -n 's/^Benchmark duration (s):[[:space:]]*\([0-9.]*\).*/\1/p' "$f.out")
        # surge's own figure: process CPU time over the run's wall time (excludes the
        # up-front prompt generation, which /usr/bin/time would count).
        ccpu=$(sed -n 's/^Client CPU, busiest agent (%):[[:space:]]*\([0-9.]*\).*/\1/p' "$f.out")
        detail="failed=$err"
        ;;
    oha)
        # oha's requestsPerSec counts every result, errors included (also the requests
        # cut at the deadline); count 2xx responses only.
        read -r rps ok err secs detail < <(jq -r '
            ([.statusCodeDistribution | to_entries[] | select(.key | startswith("2")) | .value] | add // 0) as $ok
            | ([.statusCodeDistribution | to_entries[] | select(.key | startswith("2") | not) | .value] | add // 0) as $bad
            | ([.errorDistribution | to_entries[] | select(.key != "aborted due to deadline") | .value] | add // 0) as $errs
            | ([.errorDistribution | to_entries[] | select(.key == "aborted due to deadline") | .value] | add // 0) as $cut
            | "\($ok / .summary.total) \($ok) \($bad + $errs) \(.summary.total) non2xx=\($bad),errors=\($errs),cut_at_deadline=\($cut)"' \
            "$f.out" 2>/dev/null || echo "0 0 ? 0 unparsable")
        ccpu=$(awk '{ printf "%.1f", 100 * ($2 + $3) / $1 }' "$tf")
        ;;
    wrk)
        read -r rps ok err secs detail < <(awk '
            /requests in/ { n = $1; t = $4; sub(/s,$/, "", t) }
            /^Requests\/sec:/ { r = $2 }
            /Non-2xx or 3xx responses:/ { bad = $NF }
            /Socket errors:/ { gsub(/,/, ""); se = $4 + $6 + $8 + $10; sd = $0; sub(/.*errors: /, "", sd); gsub(/ /, "_", sd) }
            END { bad += 0; se += 0; printf "%.2f %d %d %s non2xx=%d,socket_errors=%d%s\n",
                  (n > 0 ? r * (n - bad) / n : 0), n - bad, bad + se, t, bad, se, (sd != "" ? "(" sd ")" : "") }' "$f.out")
        ccpu=$(awk '{ printf "%.1f", 100 * ($2 + $3) / $1 }' "$tf")
        ;;
    esac
    # server CPU: the echo server's CPU time over the tool's measured duration (the server
    # is idle while surge prepares). other CPU: CPU used on the machine by anything but
    # this client and the server, over the client's whole lifetime, in % of one core.
    local scpu other
    scpu=$(awk -v d="$((s1 - s0))" -v s="${secs:-0}" 'BEGIN { printf "%.1f", (s > 0 ? d / s : 0) }')
    other=$(awk -v b="$((b1 - b0))" -v sv="$((s1 - s0))" '{ printf "%.1f", (b - sv - 100 * ($2 + $3)) / $1 }' "$tf")
    (( RUN_BUILDS > 0 )) && detail="$detail,builds_seen=$RUN_BUILDS"
    RUN_DISTURBED=$(awk -v o="$other" -v m="$OTHER_MAX" -v b="$RUN_BUILDS" 'BEGIN { print (b > 0 || o > m) ? 1 : 0 }')
    (( RUN_DISTURBED )) && detail="$detail,disturbed"
    RUN_LINE=$(printf '%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s' "$c" "$tool" "$round" "${rps:-0}" "${ok:-0}" \
        "${err:-?}" "${ccpu:-?}" "$scpu" "$other" "${detail:-}")
    log "c=$c $tool round $round: $(printf '%.0f' "${rps:-0}") req/s (2xx $ok, errors ${err:-?}, client CPU ${ccpu:-?}%, server CPU $scpu%, other CPU $other%, builds seen $RUN_BUILDS)"
}

: >"$OUT/runs.tsv"
START=$(date +%s)
DISTURBED=0 DISCARDED=0
for c in $LEVELS; do
    for ((r = 1; r <= ROUNDS; r++)); do
        n=${#TOOL_LIST[@]}
        for ((k = 0; k < n; k++)); do
            tool=${TOOL_LIST[$(((k + r - 1) % n))]}
            for ((attempt = 1; ; attempt++)); do
                (( QUIET_WAIT > 0 )) && wait_quiet
                run_one "$tool" "$c" "$r" "$attempt"
                sleep "$PAUSE"
                (( RUN_DISTURBED == 0 || attempt > RETRIES )) && break
                log "something else ran during that run (builds seen or other CPU > ${OTHER_MAX}%): discarded, again (attempt $((attempt + 1)) of $((RETRIES + 1)))"
                DISCARDED=$((DISCARDED + 1))
            done
            (( RUN_DISTURBED )) && DISTURBED=$((DISTURBED + 1))
            echo "$RUN_LINE" >>"$OUT/runs.tsv"
        done
    done
done
ELAPSED=$(( $(date +%s) - START ))
LOAD_AFTER=$(uptime | sed 's/.*load average/load average/')
BUILDS_AFTER=$(builds_running)
log "$LOAD_AFTER; builds running: $BUILDS_AFTER"

# --- report ------------------------------------------------------------------
OHA_VERSION=$( [[ -n ${OHA_BIN:-} ]] && "$OHA_BIN" --version 2>/dev/null | head -1 || echo "not used")
WRK_VERSION=$("$WRK" -v 2>&1 | head -1 | awk '{print $1, $2}' || true)
md=$OUT/compare-http.md
# The median of arr[1..n] (sorts arr in place), shared by the two summary tables.
AWK_MEDIAN='
function median(arr, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] < arr[i]) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
    return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}'
{
    echo "<!-- compare-http:begin -->"
    echo "## HTTP client throughput: surge vs oha vs wrk ($( ((QUICK)) && echo "quick mode" || echo "full mode"))"
    echo
    echo "Measured now by \`bench/compare-http.sh$( ((QUICK)) && echo " --quick")\` ($ROUNDS round(s) x ${DURATION} s per tool and level, ${ELAPSED} s in all)."
    echo
    machine_md
    echo "- oha: $OHA_VERSION; wrk: $WRK_VERSION"
    echo "- before: $LOAD_BEFORE; Rust builds running: $BUILDS_BEFORE"
    echo "- after: $LOAD_AFTER; Rust builds running: $BUILDS_AFTER"
    echo "- pinning: \`surge echo\` on CPU $SERVER_CPU, each client on CPU $CLIENT_CPU (\`taskset\`); one core each, client and server never share a core$( [[ $(nproc) -le 2 ]] && echo ", and nothing is left over for the rest of the system: the machine has only $(nproc) cores")."
    for note in "${NOTES[@]}"; do echo "- note: $note"; done
    echo
    echo "req/s counts 2xx responses only. errors = failed requests (surge), non-2xx + transport errors"
    echo "(oha: requests cut at the deadline are listed in the detail, not counted as errors; wrk: socket"
    echo "errors). client CPU = % of one core over the run (surge: its own \"Client CPU\" line; oha, wrk:"
    echo "/usr/bin/time user+sys over elapsed). server CPU = echo server's CPU time over the run's duration."
    echo "other CPU = CPU time used on the machine by anything else (from /proc/stat), % of one core over"
    echo "the client's lifetime. Runs are listed in the order they ran. A run is *disturbed* when a Rust build"
    echo "process (cargo, rustc, cc, ld) was seen during it or other CPU exceeded ${OTHER_MAX}%."
    if (( RETRIES > 0 )); then
        echo "Each run starts after builds have been quiet for 5 s (waiting at most ${QUIET_WAIT} s); a disturbed run"
        echo "is discarded and redone, at most ${RETRIES} times: $DISCARDED run(s) were discarded and redone, $DISTURBED"
        echo "run(s) in the table are still disturbed (marked in the detail). Discarded runs' raw output is kept"
        echo "too (attempt number in the file name)."
    else
        echo "Disturbed runs are only marked in the detail, not redone: $DISTURBED run(s) here."
    fi
    echo
    echo "| level | tool | run | req/s | 2xx | errors | client CPU % | server CPU % | other CPU % | detail |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"
    awk -F'\t' '{ printf "| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 }' "$OUT/runs.tsv"
    echo
    echo "Medians per tool (of req/s; client and server CPU are medians too):"
    echo
    awk -F'\t' -v tools="$TOOLS" "$AWK_MEDIAN"'
        { key = $1 SUBSEP $2; n[key]++; v[key, n[key]] = $4; cc[key, n[key]] = $7; sc[key, n[key]] = $8; lv[$1] = 1 }
        END {
            nt = split(tools, T, " ")
            printf "| level |"; for (i = 1; i <= nt; i++) printf " %s req/s | %s client CPU %% | %s server CPU %% |", T[i], T[i], T[i]
            hasoha = index(" " tools " ", " oha ") && index(" " tools " ", " surge "); haswrk = index(" " tools " ", " wrk ") && index(" " tools " ", " surge ")
            if (hasoha) printf " surge/oha |"; if (haswrk) printf " surge/wrk |"; print ""
            printf "|---:|"; for (i = 1; i <= nt; i++) printf "---:|---:|---:|"; if (hasoha) printf "---:|"; if (haswrk) printf "---:|"; print ""
            nl = 0; for (l in lv) L[++nl] = l + 0
            for (i = 1; i <= nl; i++) for (j = i + 1; j <= nl; j++) if (L[j] < L[i]) { t = L[i]; L[i] = L[j]; L[j] = t }
            for (li = 1; li <= nl; li++) {
                l = L[li]; printf "| %s |", l
                for (i = 1; i <= nt; i++) {
                    key = l SUBSEP T[i]; m = n[key]
                    for (k = 1; k <= m; k++) { a[k] = v[key, k]; b[k] = cc[key, k]; c[k] = sc[key, k] }
                    med[T[i]] = median(a, m)
                    printf " %.0f | %.1f | %.1f |", med[T[i]], median(b, m), median(c, m)
                }
                if (hasoha) printf " %.2f |", (med["oha"] > 0 ? med["surge"] / med["oha"] : 0)
                if (haswrk) printf " %.2f |", (med["wrk"] > 0 ? med["surge"] / med["wrk"] : 0)
                print ""
            }
        }' "$OUT/runs.tsv"
    echo
    echo "Ratios round by round: within a round the tools run back to back, so each ratio compares"
    echo "runs seconds apart, and drift of the machine between rounds cancels out; the median of"
    echo "the round ratios is the figure to compare with the targets (surge/oha >= 1.0, surge/wrk >= 0.9)."
    echo
    awk -F'\t' -v tools="$TOOLS" "$AWK_MEDIAN"'
        { r[$1, $3, $2] = $4; lv[$1] = 1; if ($3 > rounds) rounds = $3 }
        END {
            nt = split("oha wrk", P, " ")
            printf "| level |"; for (p = 1; p <= nt; p++) if (index(" " tools " ", " " P[p] " ")) printf " surge/%s by round | median |", P[p]; print ""
            printf "|---:|"; for (p = 1; p <= nt; p++) if (index(" " tools " ", " " P[p] " ")) printf "---|---:|"; print ""
            nl = 0; for (l in lv) L[++nl] = l + 0
            for (i = 1; i <= nl; i++) for (j = i + 1; j <= nl; j++) if (L[j] < L[i]) { t = L[i]; L[i] = L[j]; L[j] = t }
            for (li = 1; li <= nl; li++) {
                l = L[li]; printf "| %s |", l
                for (p = 1; p <= nt; p++) {
                    if (!index(" " tools " ", " " P[p] " ")) continue
                    m = 0; list = ""
                    for (k = 1; k <= rounds; k++) {
                        s = r[l, k, "surge"]; o = r[l, k, P[p]]
                        if (s > 0 && o > 0) { q[++m] = s / o; list = list (m > 1 ? ", " : "") sprintf("%.2f", s / o) }
                    }
                    if (m > 0) printf " %s | %.2f |", list, median(q, m); else printf " - | - |"
                }
                print ""
            }
        }' "$OUT/runs.tsv"
    echo
    echo "Commands (C = level; the body is the 16-word string below, 79 bytes;"
    echo "surge sends 16 random words from the same word list, 79 bytes on average):"
    echo
    echo '```sh'
    echo "BODY='$BODY'"
    echo "taskset -c $SERVER_CPU surge echo --listen 127.0.0.1:PORT"
    echo "taskset -c $CLIENT_CPU surge run --base-url http://127.0.0.1:PORT --backend http --endpoint /echo --random-input-len 16 --num-prompts $SURGE_NUM_PROMPTS --duration ${DURATION}s --max-concurrency C"
    echo "taskset -c $CLIENT_CPU oha -z ${DURATION}s -c C -m POST -T text/plain -d \"\$BODY\" --no-tui --output-format json http://127.0.0.1:PORT/echo"
    echo "taskset -c $CLIENT_CPU wrk -t1 -c C -d ${DURATION}s -s post.lua http://127.0.0.1:PORT/echo"
    echo '```'
    echo
    echo "\`post.lua\`:"
    echo
    echo '```lua'
    cat "$OUT/post.lua"
    echo '```'
    echo "<!-- compare-http:end -->"
} >"$md"

cat "$md"
if [[ -n $RESULTS ]]; then
    replace_section "$RESULTS" compare-http "$md"
    log "wrote the compare-http section of $RESULTS"
fi
log "raw output: $OUT"
