#!/usr/bin/env bash
# HTTP/1.1 vs HTTP/2 vs HTTP/3 on one server: `surge echo --tls-self-signed
# --http3` (HTTPS with h2/http1.1 by ALPN on TCP, HTTP/3 on the UDP port of the same
# number) pinned to CPU $SERVER_CPU, `surge run --backend http --endpoint /echo` pinned to
# CPU $CLIENT_CPU with --http-version 1.1, 2 and 3 in turn (the starting version rotates
# every round), the median req/s of $ROUNDS rounds each.
#
#   bench/compare-transports.sh          # 256 in flight, 3 rounds of 10 s
#
# Environment: CONCURRENCY [256] ROUNDS [3] DURATION seconds [10] SERVER_CPU [1]
#   CLIENT_CPU [0] OUT raw-output directory, RESULTS file whose "compare-transports"
#   section is replaced [bench/RESULTS.md; empty = none]. OHA_H3: an oha built with its
#   HTTP/3 feature (`cargo install oha --locked --features http3 --root DIR`); when given,
#   each version's surge run is followed by oha's (`--http-version V --insecure`, the same
#   body as compare-http.sh) and the table gets oha's rows beside surge's.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

CONCURRENCY=${CONCURRENCY:-256}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
RESULTS=${RESULTS-$BENCH_DIR/RESULTS.md}
OUT=${OUT:-$(mktemp -d /tmp/surge-compare-transports.XXXXXX)}
mkdir -p "$OUT"
ulimit -n 20000 2>/dev/null || true
[[ ${BIN:-release} == release ]] || die "BIN=$BIN: comparisons use the release build"
prepare_bins "$OUT"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

port=$(free_port)
taskset -c "$SERVER_CPU" "$SURGE" echo --listen "127.0.0.1:$port" --tls-self-signed --http3 >"$OUT/echo.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q "listening on" "$OUT/echo.log" && break; sleep 0.1; done
URL="https://127.0.0.1:$port"

VERSIONS=(1.1 2 3)
BODY="water people little answer country time long find make day the of and to was he"
OHA_H3=${OHA_H3:-}
[[ -z $OHA_H3 || -x $OHA_H3 ]] || die "OHA_H3=$OHA_H3 is not an executable"
declare -A RPS OHA
for round in $(seq 1 "$ROUNDS"); do
    for k in 0 1 2; do
        v=${VERSIONS[$(( (k + round - 1) % 3 ))]}
        f="$OUT/h$v.r$round.json"
        log "round $round: HTTP/$v"
        taskset -c "$CLIENT_CPU" "$SURGE" run --base-url "$URL" --insecure --http-version "$v" --backend http \
            --endpoint /echo --random-input-len 16 --max-concurrency "$CONCURRENCY" --duration "${DURATION}s" \
            --num-prompts 3000000 --no-scrape-metrics --save-result --result-dir "$OUT" \
            --result-filename "$(basename "$f")" >"$f.out" 2>&1 || log "HTTP/$v exited $? (see $f.out)"
        r=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['request_throughput']:.0f} {d['failed']} {d['client']['agents'][0]['cpu_percent']:.0f}\")" "$f" 2>/dev/null || echo "0 ? ?")
        RPS[$v]+="$r;"
        sleep 2
        if [[ -n $OHA_H3 ]]; then
            o="$OUT/oha-h$v.r$round"
            log "round $round: oha HTTP/$v"
            /usr/bin/time -f "%e %U %S" -o "$o.time" taskset -c "$CLIENT_CPU" "$OHA_H3" --no-tui --output-format json \
                --insecure --http-version "$v" -z "${DURATION}s" -c "$CONCURRENCY" -m POST -T text/plain -d "$BODY" \
                "$URL/echo" >"$o.json" 2>"$o.err" || log "oha HTTP/$v exited $? (see $o.err)"
            r=$(python3 -c "
import json,sys
d=json.load(open(sys.argv[1])); e,u,s=map(float,open(sys.argv[2]).read().split()[-3:])
ok=sum(v for k,v in d['statusCodeDistribution'].items() if k.startswith('2'))
bad=sum(v for k,v in d.get('errorDistribution',{}).items() if k!='aborted due to deadline')+sum(v for k,v in d['statusCodeDistribution'].items() if not k.startswith('2'))
print(f\"{ok/d['summary']['total']:.0f} {bad} {100*(u+s)/e:.0f}\")" "$o.json" "$o.time" 2>/dev/null || echo "0 ? ?")
            OHA[$v]+="$r;"
            sleep 2
        fi
    done
done

md=$OUT/section.md
{
    echo "<!-- compare-transports:begin -->"
    echo "## HTTP/1.1 vs HTTP/2 vs HTTP/3 on one echo (bench/compare-transports.sh)"
    echo
    machine_md
    echo "- \`surge echo --tls-self-signed --http3\` on CPU $SERVER_CPU; \`surge run --backend http --endpoint /echo --random-input-len 16 --max-concurrency $CONCURRENCY --duration ${DURATION}s --insecure --http-version V\` on CPU $CLIENT_CPU; all over TLS 1.3 (HTTP/3: QUIC), $ROUNDS alternating rounds"
    echo
    echo "| version | median req/s | rounds (req/s, failed, client CPU %) |"
    echo "|---|---|---|"
    median() { python3 -c "import statistics,sys; print(f'{statistics.median(float(x.split()[0]) for x in sys.argv[1].split(\";\") if x):.0f}')" "$1"; }
    for v in "${VERSIONS[@]}"; do
        echo "| HTTP/$v | $(median "${RPS[$v]}") | ${RPS[$v]%;} |"
        [[ -n $OHA_H3 ]] && echo "| oha HTTP/$v | $(median "${OHA[$v]}") | ${OHA[$v]%;} |"
    done
    if [[ -n $OHA_H3 ]]; then
        echo
        echo "oha: \`$("$OHA_H3" --version)\` built with \`--features http3\`, run right after surge at each version: \`oha --no-tui --output-format json --insecure --http-version V -z ${DURATION}s -c $CONCURRENCY -m POST -T text/plain -d BODY URL/echo\` (2xx per second of its run; failed = non-2xx + transport errors, not the requests cut at the deadline; client CPU from /usr/bin/time)."
    fi
    echo "<!-- compare-transports:end -->"
} >"$md"
cat "$md"
if [[ -n $RESULTS ]]; then replace_section "$RESULTS" compare-transports "$md"; fi
exit 0
