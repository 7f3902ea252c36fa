#!/usr/bin/env bash
# A real router in front of replicas (D69): Debian's nginx in front of three `surge echo`
# replicas, each with its own prefix cache and naming itself in `x-served-by`
# (--replica-name), once with `hash $http_x_session_id consistent` (every turn of a
# conversation to one replica) and once round-robin. surge runs the same conversations
# (300 sessions of 2 turns, 8 open at a time) through each, with --replica-header
# x-served-by, and this asserts:
#   - consistent hash: session_affinity 1.0; every turn after the first found its history
#     in the cache (the hit rate of one echo), and no request moved;
#   - round-robin: session_affinity about 1/3 (0.2 to 0.5: a session's second turn lands
#     on its first turn's replica one time in three), every moved request missed the cache
#     (hit rate 0) while those that stayed hit it;
#   - both: the replicas' request counts in the result equal nginx's access-log counts per
#     upstream, exactly.
#
# Exit: 0 passed; 1 failed; 77 SKIPPED (nginx missing and no way to install it).
# Environment: SURGE_BIN_DIR (default target/debug), SESSIONS (300).
set -euo pipefail
say() { echo "router test: $*" >&2; }
source "$(dirname "$0")/../lib.sh"
SESSIONS=${SESSIONS:-300}
need_command python3 python3
need_command nginx nginx
need_bins surge
declare -a UP
for i in 0 1 2; do
    "$BIN/surge" echo --listen 127.0.0.1:0 --ttft-ms 2 --itl-ms 1 --output-tokens 4 \
        --prefix-cache-tokens 100000000 --block-size 4 --replica-name "replica-$i" >"$WORK/echo-$i.out" 2>&1 &
    PIDS+=($!)
    wait_line "$WORK/echo-$i.out" "listening on"
    UP[$i]=$(grep -o 'http://[0-9.:]*' "$WORK/echo-$i.out" | head -1 | sed 's|http://||')
done
read -r HASH_PORT RR_PORT <<<"$(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
mkdir -p "$WORK/nginx"
servers() { for i in 0 1 2; do printf '        server %s;\n' "${UP[$i]}"; done; }
{
    [[ $(id -u) == 0 ]] && echo "user root;"
    cat <<NGINX
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
    log_format routed '\$server_port \$upstream_addr \$request_uri';
    access_log $WORK/nginx/access.log routed;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffering off;
    upstream by_session {
        hash \$http_x_session_id consistent;
$(servers)
        keepalive 32;
    }
    upstream in_turn {
$(servers)
        keepalive 32;
    }
    server { listen 127.0.0.1:$HASH_PORT; location / { proxy_pass http://by_session; } }
    server { listen 127.0.0.1:$RR_PORT; location / { proxy_pass http://in_turn; } }
}
NGINX
} >"$WORK/nginx.conf"
nginx -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' >"$WORK/nginx.out" 2>&1 &
PIDS+=($!)
for port in $HASH_PORT $RR_PORT; do
    wait_for "nginx on port $port (log: $WORK/nginx.out)" \
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)"
done

run() {
    local port=$1 name=$2
    "$BIN/surge" run --base-url "http://127.0.0.1:$port" --backend openai-chat --model m \
        --multi-turn --multi-turn-num-turns 2 --num-prompts "$SESSIONS" --max-concurrency 8 \
        --random-input-len 32 --random-output-len 4 --replica-header x-served-by \
        --no-initial-test --no-scrape-metrics \
        --save-result --result-dir "$WORK" --result-filename "$name.json" >"$WORK/$name.out" 2>&1 ||
        { say "FAILED: surge run through nginx ($name)"; cat "$WORK/$name.out" >&2; exit 1; }
    grep -A6 "Replicas (" "$WORK/$name.out" | sed "s/^/  $name: /" >&2
}
run "$HASH_PORT" hash
# The same conversations again: each replica's cache emptied first (vLLM's reset route).
for i in 0 1 2; do
    python3 -c "import urllib.request as u; u.urlopen(u.Request('http://${UP[$i]}/reset_prefix_cache', method='POST'), timeout=5)"
done
run "$RR_PORT" round-robin

python3 - "$WORK" "$HASH_PORT" "$RR_PORT" "${UP[@]}" <<'PY'
import collections, json, sys
work, hash_port, rr_port, ups = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
names = {u: f"replica-{i}" for i, u in enumerate(ups)}
logged = collections.defaultdict(collections.Counter)
for line in open(f"{work}/nginx/access.log"):
    port, upstream, uri = line.split()
    if uri == "/v1/chat/completions":
        logged[port][names[upstream]] += 1
failed = []
def check(cond, what):
    print(("ok      " if cond else "FAILED  ") + what, file=sys.stderr)
    if not cond:
        failed.append(what)
for name, port in (("hash", hash_port), ("round-robin", rr_port)):
    r = json.load(open(f"{work}/{name}.json"))
    rep = r["replicas"]
    counted = {x["name"]: x["requests"] for x in rep["replicas"]}
    check(counted == dict(logged[port]), f"{name}: replica counts {counted} = nginx's log {dict(logged[port])}")
    if name == "hash":
        check(rep["session_affinity"] == 1.0, f"hash: session_affinity {rep['session_affinity']} is 1.0")
        check(rep["moved_requests"] == 0, f"hash: no request moved ({rep['moved_requests']})")
        hit = rep.get("stayed_hit_rate") or 0
        check(hit > 0.3, f"hash: turns that stayed hit the cache ({hit:.3f})")
        hash_hit = r["prompt_cache_hit_rate"]
    else:
        a = rep["session_affinity"]
        check(0.2 <= a <= 0.5, f"round-robin: session_affinity {a:.3f} about 1/3")
        check(rep.get("moved_hit_rate") == 0.0, f"round-robin: moved turns missed the cache ({rep.get('moved_hit_rate')})")
        check((rep.get("stayed_hit_rate") or 0) > 0.3, f"round-robin: turns that stayed hit it ({rep.get('stayed_hit_rate')})")
        check(r["prompt_cache_hit_rate"] < hash_hit, f"round-robin's hit rate {r['prompt_cache_hit_rate']:.3f} < hash's {hash_hit:.3f}")
sys.exit(1 if failed else 0)
PY
say "passed"
