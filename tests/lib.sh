# Shared preamble of the scripts that .ci/run calls after the README's test command
# (tests/report, tests/prometheus, tests/proxies; D28): install a Debian package or skip
# loudly, a scratch directory and the processes to end with the script, and bounded waits.
# Source it after defining `say` (the script's prefixed message); do not run it.
# shellcheck shell=bash

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SURGE_BIN_DIR:-$REPO/target/debug}
# Exit code of a check that cannot run on this machine (reported, never a silent pass).
SKIP=77

# need_command CMD PACKAGE: CMD on the PATH, else apt-get installs PACKAGE (as root), else
# the script exits SKIP with the reason.
need_command() {
    local cmd=$1 pkg=$2
    command -v "$cmd" >/dev/null 2>&1 && return 0
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's $pkg package"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg"; } \
            >/dev/null 2>&1 || { say "SKIPPED: cannot apt-get install $pkg"; exit $SKIP; }
        command -v "$cmd" >/dev/null 2>&1 || { say "SKIPPED: $pkg installed no $cmd"; exit $SKIP; }
    else
        say "SKIPPED: no $cmd, and not root with apt-get to install $pkg"
        exit $SKIP
    fi
}

# need_bins NAME...: the surge binaries the script runs, built in $BIN.
need_bins() {
    local b
    for b in "$@"; do
        [[ -x $BIN/$b ]] || { say "no $b binary in $BIN (run cargo build)"; exit 1; }
    done
}

# A scratch directory, and PIDS: every process the script starts; both go when it exits.
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# wait_for WHAT COMMAND...: COMMAND succeeds within 20 s, else the script fails naming WHAT.
wait_for() {
    local what=$1 _
    shift
    for _ in $(seq 1 400); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    say "FAILED: timed out waiting for $what"
    exit 1
}

# wait_line FILE PATTERN: a line of FILE matches PATTERN within 20 s, else the script fails
# and prints FILE.
wait_line() {
    local _
    for _ in $(seq 1 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    say "FAILED: timed out waiting for '$2' in $1"
    cat "$1" >&2
    exit 1
}

# A free TCP port on 127.0.0.1 (the kernel's choice; racy, but fine on loopback).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
