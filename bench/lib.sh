# Shared helpers for the bench/ scripts. Source it; do not run it.
# shellcheck shell=bash

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)

START_DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Builds the release binaries when one of them is missing, then copies both into
# $1/bin so that a concurrent `cargo build` in the workspace cannot swap them in the
# middle of a comparison. Sets SURGE, SURGE_AGENT and BINS_BUILT. With BIN=debug, builds
# and copies the optimized dev profile instead (no release build; not for comparisons).
prepare_bins() {
    local dest=$1/bin
    if [[ -n ${SURGE_BIN_DIR:-} ]]; then
        # Binaries already built (SURGE_BIN_DIR=target/debug after `cargo test`): copied as they are.
        mkdir -p "$dest"
        cp "$SURGE_BIN_DIR/surge" "$SURGE_BIN_DIR/surge-agent" "$dest/" || die "no binaries in $SURGE_BIN_DIR"
        SURGE=$dest/surge SURGE_AGENT=$dest/surge-agent
        BINS_BUILT="$(date -u -r "$SURGE_BIN_DIR/surge" '+%Y-%m-%d %H:%M UTC')"
        return
    fi
    if [[ ${BIN:-release} == debug ]]; then
        (cd "$ROOT" && cargo build --bins -q) || die "cargo build failed"
        mkdir -p "$dest"
        cp "$ROOT/target/debug/surge" "$ROOT/target/debug/surge-agent" "$dest/"
        SURGE=$dest/surge SURGE_AGENT=$dest/surge-agent BINS_BUILT="(dev profile)"
        return
    fi
    if [[ ! -x $ROOT/target/release/surge || ! -x $ROOT/target/release/surge-agent ]]; then
        log "release binaries missing: cargo build --release --bins"
        (cd "$ROOT" && cargo build --release --bins) || die "cargo build failed"
    fi
    mkdir -p "$dest"
    BINS_BUILT=$(date -u -r "$ROOT/target/release/surge" '+%Y-%m-%d %H:%M UTC')
    cp "$ROOT/target/release/surge" "$ROOT/target/release/surge-agent" "$dest/"
    SURGE=$dest/surge
    SURGE_AGENT=$dest/surge-agent
}

# A free TCP port on 127.0.0.1 (the kernel picks it; racy but fine on a quiet box).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits until GET http://127.0.0.1:$1/metrics answers, at most ~10 s.
wait_http() {
    local _
    for _ in $(seq 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$1/metrics" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# The address a surge-agent logged in $1 ("listening on ADDR"), waiting up to $2 [10] s;
# empty when it did not start.
agent_addr() {
    local a="" _
    for _ in $(seq 1 $(( ${2:-10} * 20 ))); do
        a=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$1" 2>/dev/null | head -1)
        [[ -n $a ]] && break
        sleep 0.05
    done
    echo "$a"
}

# Three surge-agents on 127.0.0.2-4 over mutual TLS, with a fresh PKI in $1/pki (the
# coordinator's certificate beside them). Appends their PIDs to PIDS; sets PKI and
# TLS_AGENTS (their addresses, comma-separated).
start_tls_agents() {
    PKI=$1/pki
    "$SURGE" certs init --out "$PKI" >/dev/null
    "$SURGE" certs issue --ca "$PKI" --name agent --san 127.0.0.2 --san 127.0.0.3 --san 127.0.0.4 --out "$PKI" >/dev/null
    "$SURGE" certs issue --ca "$PKI" --name coordinator --out "$PKI" >/dev/null
    local i a addrs=()
    for i in 2 3 4; do
        "$SURGE_AGENT" --listen "127.0.0.$i:0" --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/agent.pem" \
            --tls-key "$PKI/agent.key" --allowed-targets 127.0.0.1 >"$1/tls-agent.$i.log" 2>&1 &
        PIDS+=($!)
    done
    for i in 2 3 4; do
        a=$(agent_addr "$1/tls-agent.$i.log")
        [[ -n $a ]] || die "TLS agent $i did not start"
        addrs+=("$a")
    done
    TLS_AGENTS=$(IFS=,; echo "${addrs[*]}")
}

# utime+stime of a process in clock ticks (1/100 s).
cpu_ticks() {
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# Processes that look like Rust builds (cargo, rustc, linkers), as "N (names)".
builds_running() {
    local names
    names=$(ps -eo comm= | grep -E '^(cargo|rustc|cc|ld|ld\.lld|mold|clang)$' | sort | uniq -c \
        | awk '{printf "%s%s x%s", (NR>1?", ":""), $2, $1}')
    if [[ -z $names ]]; then echo "none"; else echo "$names"; fi
}

# Machine description, markdown bullet list.
machine_md() {
    local mem
    mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
    echo "- date: ${START_DATE:-$(date -u '+%Y-%m-%d %H:%M:%S UTC')}"
    echo "- nproc: $(nproc); CPU: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
    echo "- kernel: $(uname -sr); memory: $mem"
    echo "- binaries: \`${SURGE_BIN_DIR:-target/release}\` built ${BINS_BUILT:-?}, sha256 surge $(sha256sum "$SURGE" | cut -c1-12), surge-agent $(sha256sum "$SURGE_AGENT" | cut -c1-12)"
    echo "- surge: $("$SURGE" --version 2>/dev/null) (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', working tree differs from HEAD'))"
}

# Replaces the block between "<!-- $2:begin -->" and "<!-- $2:end -->" in file $1
# with the contents of file $3 (markers included in $3), or appends it.
replace_section() {
    local file=$1 name=$2 content=$3
    python3 - "$file" "$name" "$content" <<'EOF'
import os, re, sys
path, name, content = sys.argv[1], sys.argv[2], open(sys.argv[3]).read().rstrip("\n") + "\n"
text = open(path).read() if os.path.exists(path) else "# surge benchmark results\n"
pat = re.compile(r"<!-- %s:begin -->.*?<!-- %s:end -->\n?" % (re.escape(name), re.escape(name)), re.S)
if pat.search(text):
    text = pat.sub(lambda _: content, text, count=1)
else:
    text = text.rstrip("\n") + "\n\n" + content
open(path, "w").write(text)
EOF
}

# The real target of the *-real.sh scripts: llama.cpp's llama-server with SmolLM2-135M
# (`../shared/tools/real-llm-target.sh setup` once, under RT). Exits 77 without it.
need_llama_server() {
    local rt=${RT:-$HOME/.cache/surge-real-target}
    LLAMA_SERVER=$rt/build/llama.cpp/bin/llama-server
    LLAMA_MODEL=$rt/models/smollm2-135m-instruct-q4_1.gguf
    [[ -x $LLAMA_SERVER && -f $LLAMA_MODEL ]] || { log "no llama-server: run ../shared/tools/real-llm-target.sh setup"; exit 77; }
}

# Starts it (4 slots, metrics on, any extra flags given), logging to OUT/server.log, its
# PID added to PIDS; waits for its health and sets BASE.
start_llama_server() { # out [extra flags...]
    local out=$1 port
    shift
    port=$(free_port)
    "$LLAMA_SERVER" -m "$LLAMA_MODEL" --alias smollm2 --host 127.0.0.1 --port "$port" -np 4 -c 8192 -t 2 \
        --metrics --no-webui "$@" >"$out/server.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.2; done
    BASE="http://127.0.0.1:$port"
}
