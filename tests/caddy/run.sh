#!/usr/bin/env bash
# HTTP/3 through a real third-party server (issue 17): Debian's Caddy as a TLS reverse
# proxy (h1, h2 and h3 on one port, its own local CA) in front of `surge echo`; `surge run
# --http-version 3` through it must complete every request with none failed, and Caddy's
# access log must show every completion request arriving as HTTP/3.0.
#
# Exit: 0 passed; 1 failed; 77 SKIPPED (no caddy and no way to install it).
# Environment: SURGE_BIN_DIR (default target/debug), REQUESTS (500), CONCURRENCY (50).
set -euo pipefail
say() { echo "caddy HTTP/3 test: $*" >&2; }
source "$(dirname "$0")/../lib.sh"
REQUESTS=${REQUESTS:-500}
CONCURRENCY=${CONCURRENCY:-50}

need_command python3 python3
need_bins surge
need_command caddy caddy

# The echo, plaintext HTTP/1.1 behind the proxy.
"$BIN/surge" echo --listen 127.0.0.1:0 --ttft-ms 20 --itl-ms 5 >"$WORK/echo.out" 2>&1 &
PIDS+=($!)
wait_line "$WORK/echo.out" "listening on"
ECHO=$(grep -o 'http://[0-9.:]*' "$WORK/echo.out" | head -1)

# Caddy: HTTPS with its internal CA on a free port, HTTP/3 on the same UDP port; SSE
# passed through unbuffered; a JSON access log that names each request's protocol.
PORT=$(free_port)
cat >"$WORK/Caddyfile" <<CADDY
{
	admin off
	auto_https disable_redirects
	skip_install_trust
	servers {
		protocols h1 h2 h3
	}
}
https://localhost:$PORT {
	tls internal
	log {
		output file $WORK/access.log
		format json
	}
	reverse_proxy ${ECHO#http://} {
		flush_interval -1
	}
}
CADDY
XDG_DATA_HOME=$WORK/data XDG_CONFIG_HOME=$WORK/config caddy run --config "$WORK/Caddyfile" --adapter caddyfile \
    >"$WORK/caddy.log" 2>&1 &
PIDS+=($!)
CA=$WORK/data/caddy/pki/authorities/local/root.crt
wait_for "caddy's HTTP/3 listener (log: $WORK/caddy.log)" grep -q "enabling HTTP/3 listener" "$WORK/caddy.log"
wait_for "caddy's local CA at $CA" test -s "$CA"

set +e
"$BIN/surge" run --base-url "https://localhost:$PORT" --http-version 3 --ca-cert "$CA" --model m \
    --random-input-len 16 --random-output-len 16 --ignore-eos --num-prompts "$REQUESTS" \
    --max-concurrency "$CONCURRENCY" --no-scrape-metrics --save-result --result-dir "$WORK" \
    --result-filename r.json >"$WORK/run.out" 2>&1
rc=$?
set -e
if [[ $rc != 0 ]]; then
    say "FAILED: surge run exited $rc"; cat "$WORK/run.out" >&2; tail -20 "$WORK/caddy.log" >&2; exit 1
fi
python3 - "$WORK/r.json" "$WORK/access.log" "$REQUESTS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = int(sys.argv[3])
protos = {}
for line in open(sys.argv[2]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    req = e.get("request", {})
    if req.get("uri") == "/v1/completions":
        protos[req.get("proto")] = protos.get(req.get("proto"), 0) + 1
print(f"caddy HTTP/3 test: completed {r['completed']}, failed {r['failed']}, "
      f"median TTFT {r['median_ttft_ms']:.2f} ms, median ITL {r['median_itl_ms']:.2f} ms; "
      f"completions at caddy by protocol: {protos}")
ok = r["completed"] == want and r["failed"] == 0 and protos.get("HTTP/3.0", 0) >= want and set(protos) == {"HTTP/3.0"}
sys.exit(0 if ok else 1)
PY
say "PASSED"
