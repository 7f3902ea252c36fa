#!/usr/bin/env bash
# Streams through real reverse proxies (D38): Debian's Caddy on HTTP/1.1, HTTP/2 and
# HTTP/3 (TLS from its internal CA), and Debian's nginx on HTTP/1.1 and HTTP/2 (TLS from a
# private CA made here), each in front of `surge echo`; 2,000 streamed completions at 100
# and at 1,000 in flight per path (64 in, 32 out, TTFT 50 ms; ITL 10 ms at 100 in flight and
# 100 ms at 1,000, so every proxy forwards 10,000 token events/s at both), and the same load
# straight to the echo for reference. It asserts:
#   - through nginx and through Caddy's HTTP/2 and HTTP/3: no request failed;
#   - through Caddy's HTTP/1.1: every failure is `truncated`, their number equals the
#     `aborting with incomplete response` lines Caddy logged during that run, and each
#     example says the stream ended after the head with an empty body, ended by the peer;
#   - everywhere: TTFT p50 within $TTFT_SLACK_MS (5) ms of the direct run's at that level.
# It prints the table of every run (the FAQ's table).
#
# Exit: 0 passed; 1 failed; 77 SKIPPED (a proxy or tool missing and no way to install it).
# Environment: SURGE_BIN_DIR (default target/debug), REQUESTS (2000), LEVELS ("100 1000"),
# TTFT_SLACK_MS (5).
set -euo pipefail
say() { echo "proxies test: $*" >&2; }
source "$(dirname "$0")/../lib.sh"
REQUESTS=${REQUESTS:-2000}
LEVELS=${LEVELS:-100 1000}
TTFT_SLACK_MS=${TTFT_SLACK_MS:-5}

need_command python3 python3
need_command openssl openssl
need_command caddy caddy
need_command nginx nginx
need_bins surge
# 1,000 in flight through a proxy: 2,000 sockets for the proxy, 1,000 for surge.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [[ $(ulimit -n) != unlimited && $(ulimit -n) -lt 8192 ]]; then
    say "SKIPPED: the open-file limit is $(ulimit -n), 1,000 in flight through a proxy needs 8192"
    exit $SKIP
fi

# Per level: an echo (plaintext HTTP/1.1 and h2c on loopback) whose gap between tokens
# keeps the event rate the proxies forward at 10,000 per second (ITL 10 ms at 100 in flight,
# 100 ms at 1,000): the TTFT check is about surge's timing through a proxy, not about a
# proxy saturated on a 2-core machine. Each proxy serves one port per level, to its echo.
declare -A UP CADDY_PORT NGINX_PORT
for level in $LEVELS; do
    "$BIN/surge" echo --listen 127.0.0.1:0 --ttft-ms 50 --itl-ms $((level / 10)) >"$WORK/echo-$level.out" 2>&1 &
    PIDS+=($!)
    wait_line "$WORK/echo-$level.out" "listening on"
    UP[$level]=$(grep -o 'http://[0-9.:]*' "$WORK/echo-$level.out" | head -1 | sed 's|http://||')
done
# Two free ports per level for the proxies, chosen while the echoes hold theirs and held
# open together, so that no two are the same (two nginx servers on one port would send both
# levels to the first level's echo).
read -r -a PORTS <<<"$(python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(2 * int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$(wc -w <<<"$LEVELS")")"
i=0
for level in $LEVELS; do
    CADDY_PORT[$level]=${PORTS[$i]}
    NGINX_PORT[$level]=${PORTS[$((i + 1))]}
    i=$((i + 2))
done

# Caddy: h1, h2 and h3 on one port per level, TLS from its internal CA; SSE unbuffered.
{
    printf '{\n\tadmin off\n\tauto_https disable_redirects\n\tskip_install_trust\n\tservers {\n\t\tprotocols h1 h2 h3\n\t}\n}\n'
    for level in $LEVELS; do
        cat <<CADDY
https://localhost:${CADDY_PORT[$level]} {
	tls internal
	log {
		output file $WORK/caddy-access.log
		format json
	}
	reverse_proxy ${UP[$level]} {
		flush_interval -1
	}
}
CADDY
    done
} >"$WORK/Caddyfile"
XDG_DATA_HOME=$WORK/data XDG_CONFIG_HOME=$WORK/config caddy run --config "$WORK/Caddyfile" --adapter caddyfile \
    >"$WORK/caddy.log" 2>&1 &
PIDS+=($!)
CADDY_CA=$WORK/data/caddy/pki/authorities/local/root.crt
wait_for "caddy's HTTP/3 listener (log: $WORK/caddy.log)" grep -q "enabling HTTP/3 listener" "$WORK/caddy.log"
wait_for "caddy's local CA at $CADDY_CA" test -s "$CADDY_CA"

# nginx: a private CA and a certificate for localhost signed by it.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=surge test CA" \
    -keyout "$WORK/ca.key" -out "$WORK/ca.crt" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$WORK/nginx.key" -out "$WORK/nginx.csr" >/dev/null 2>&1
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$WORK/san.ext"
openssl x509 -req -in "$WORK/nginx.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 \
    -extfile "$WORK/san.ext" -out "$WORK/nginx.crt" >/dev/null 2>&1
mkdir -p "$WORK/nginx"
{
    [[ $(id -u) == 0 ]] && echo "user root;"
    cat <<NGINX
worker_processes 1;
worker_rlimit_nofile 16384;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 8192; }
http {
    log_format proto '\$server_protocol \$request_uri';
    access_log $WORK/nginx/access.log proto;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    ssl_certificate $WORK/nginx.crt;
    ssl_certificate_key $WORK/nginx.key;
    http2_max_concurrent_streams 1024;
    keepalive_requests 100000;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffering off;
NGINX
    for level in $LEVELS; do
        cat <<NGINX
    upstream echo$level { server ${UP[$level]}; keepalive 256; }
    server {
        listen 127.0.0.1:${NGINX_PORT[$level]} ssl http2;
        server_name localhost;
        location / { proxy_pass http://echo$level; }
    }
NGINX
    done
    echo "}"
} >"$WORK/nginx.conf"
nginx -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' >"$WORK/nginx.out" 2>&1 &
PIDS+=($!)
for level in $LEVELS; do
    wait_for "nginx on port ${NGINX_PORT[$level]} (log: $WORK/nginx.out)" \
        python3 -c "import socket; socket.create_connection(('127.0.0.1', ${NGINX_PORT[$level]}), 1)"
done

aborts() { grep -c "aborting with incomplete response" "$WORK/caddy.log" || true; }
# The completion requests a proxy's access log holds so far, as "PROTOCOL COUNT" lines.
protocols() {
    case $1 in
    caddy-*) python3 -c '
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1]):
    try:
        r = json.loads(line).get("request", {})
    except ValueError:
        continue
    if r.get("uri") == "/v1/completions":
        c[r.get("proto")] += 1
for k, v in sorted(c.items()):
    print(k, v)' "$WORK/caddy-access.log" 2>/dev/null || true ;;
    nginx-*) sleep 0.2; awk '$2 == "/v1/completions" { c[$1]++ } END { for (k in c) print k, c[k] }' \
        "$WORK/nginx/access.log" 2>/dev/null | sort || true ;;
    esac
}

# run NAME URL LEVEL ARGS...: one run of the load; its result is $WORK/NAME-LEVEL.json and
# the Caddy aborts logged during it are in $WORK/NAME-LEVEL.aborts.
run() {
    local name=$1 url=$2 level=$3 rc before pace=()
    shift 3
    # Up to 100 in flight, a closed loop (the load of the issue's report). Beyond, an open
    # loop paced at level / request time (50 ms + 31 gaps), which holds about `level` in
    # flight without starting them all in the same instant: 1,000 simultaneous starts
    # queue in a proxy on 2 cores (its own latency, in the FAQ's table), not in surge.
    if ((level > 100)); then
        pace=(--request-rate $((level * 1000 / (50 + 31 * level / 10))))
    fi
    before=$(aborts)
    protocols "$name" >"$WORK/$name-$level.proto-before"
    set +e
    "$BIN/surge" run --base-url "$url" --model m --random-input-len 64 --random-output-len 32 --ignore-eos \
        --num-prompts "$REQUESTS" --max-concurrency "$level" "${pace[@]}" --no-scrape-metrics --no-initial-test "$@" \
        --save-result --result-dir "$WORK" --result-filename "$name-$level.json" >"$WORK/$name-$level.out" 2>&1
    rc=$?
    set -e
    # Caddy logs an abort when it gives up on the upstream; let the last lines land.
    sleep 0.5
    echo $(($(aborts) - before)) >"$WORK/$name-$level.aborts"
    protocols "$name" >"$WORK/$name-$level.proto-after"
    # Exit 1 is a run with failures (D8): the checks below judge them. Anything else is wrong.
    if [[ $rc != 0 && $rc != 1 ]] || [[ ! -s $WORK/$name-$level.json ]]; then
        say "FAILED: $name at $level in flight: surge run exited $rc"
        cat "$WORK/$name-$level.out" >&2
        tail -20 "$WORK/caddy.log" >&2
        exit 1
    fi
}

for level in $LEVELS; do
    caddy=https://localhost:${CADDY_PORT[$level]}
    nginx=https://localhost:${NGINX_PORT[$level]}
    run direct "http://${UP[$level]}" "$level"
    run caddy-h1 "$caddy" "$level" --http-version 1.1 --ca-cert "$CADDY_CA"
    run caddy-h2 "$caddy" "$level" --http-version 2 --ca-cert "$CADDY_CA"
    run caddy-h3 "$caddy" "$level" --http-version 3 --ca-cert "$CADDY_CA"
    run nginx-h1 "$nginx" "$level" --http-version 1.1 --ca-cert "$WORK/ca.crt"
    run nginx-h2 "$nginx" "$level" --http-version 2 --ca-cert "$WORK/ca.crt"
done

python3 - "$WORK" "$REQUESTS" "$TTFT_SLACK_MS" $LEVELS <<'PY'
import json, sys
work, want, slack, levels = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
paths = ["direct", "caddy-h1", "caddy-h2", "caddy-h3", "nginx-h1", "nginx-h2"]
bad = []
# Which protocol the proxy saw the run's completion requests arrive on.
want_proto = {"caddy-h1": "HTTP/1.1", "caddy-h2": "HTTP/2.0", "caddy-h3": "HTTP/3.0", "nginx-h1": "HTTP/1.1", "nginx-h2": "HTTP/2.0"}
def counts(path):
    out = {}
    for line in open(path):
        k, v = line.split()
        out[k] = int(v)
    return out
print(f"{'path':<10} {'in flight':>9} {'peak':>5} {'completed':>9} {'failed':>6} {'truncated':>9} {'caddy aborts':>12} "
      f"{'TTFT p50 ms':>11} {'vs direct':>9}  how the cut streams ended")
for level in levels:
    direct = json.load(open(f"{work}/direct-{level}.json"))["median_ttft_ms"]
    for p in paths:
        r = json.load(open(f"{work}/{p}-{level}.json"))
        aborts = int(open(f"{work}/{p}-{level}.aborts").read())
        kinds = r.get("errors_by_kind", {})
        trunc = kinds.get("truncated", 0)
        examples = r.get("error_examples", {}).get("truncated", [])
        ends = sorted({(e.get("stream") or {}).get("ended", "?") + " by " + (e.get("stream") or {}).get("ended_by", "?")
                       + " (" + (e.get("stream") or {}).get("server", "") + ")" for e in examples})
        ttft = r["median_ttft_ms"]
        peak = r.get("peak_in_flight", 0)
        print(f"{p:<10} {level:>9} {peak:>5.0f} {r['completed']:>9} {r['failed']:>6} {trunc:>9} {aborts:>12} {ttft:>11.2f} "
              f"{ttft - direct:>+9.2f}  {'; '.join(ends)}")
        if p in want_proto:
            before, after = counts(f"{work}/{p}-{level}.proto-before"), counts(f"{work}/{p}-{level}.proto-after")
            seen = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
            if set(seen) != {want_proto[p]} or seen[want_proto[p]] < want:
                bad.append(f"{p} at {level}: the proxy saw the completions arrive as {seen}, not {want} as {want_proto[p]}")
        if peak < 0.9 * int(level):
            bad.append(f"{p} at {level}: at most {peak:.0f} requests were in flight at once")
        if r["completed"] + r["failed"] != want:
            bad.append(f"{p} at {level}: {r['completed']} + {r['failed']} requests, not {want}")
        if abs(ttft - direct) > slack:
            bad.append(f"{p} at {level}: TTFT p50 {ttft:.2f} ms, {ttft - direct:+.2f} ms from the direct run's {direct:.2f}")
        if p == "caddy-h1":
            if r["failed"] != trunc:
                bad.append(f"{p} at {level}: failures other than truncated: {kinds}")
            if trunc != aborts:
                bad.append(f"{p} at {level}: {trunc} truncated, but Caddy logged {aborts} aborted responses")
            for e in examples:
                s = e.get("stream") or {}
                if (s.get("ended"), s.get("ended_by"), s.get("events"), s.get("bytes")) != ("empty_body", "peer", 0, 0):
                    bad.append(f"{p} at {level}: an example that is not an empty body ended by the peer: {e}")
        elif r["failed"] != 0:
            bad.append(f"{p} at {level}: {r['failed']} failed: {kinds} {r.get('error_examples')}")
for b in bad:
    print("proxies test: FAILED:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
say "PASSED"
