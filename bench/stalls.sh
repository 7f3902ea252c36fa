#!/usr/bin/env bash
# The test suite on a host whose CPUs stall: CI's 2-core VM freezes for milliseconds at a
# time (a 1 ms sleep ends 4-14 ms late, at worst 100 ms), and a bound written on a quiet
# host fails there. This runs a command in its own process group and freezes the whole
# group (the tests, their echo servers, agents and coordinators) with SIGSTOP for
# STALL_MS every PERIOD_MS, then prints how many stalls it made and the command's status.
# Usage: [STALL_MS=10] [PERIOD_MS=200] bench/stalls.sh [COMMAND...]
#   (default command: cargo test --workspace --locked --no-fail-fast; run it where no
#   other build runs; a test that fails here names a bound to look at, with the stall the
#   tests' probe, tests/timing/stalls.rs, saw)
set -euo pipefail
STALL_MS=${STALL_MS:-10}
PERIOD_MS=${PERIOD_MS:-200}
[[ $STALL_MS =~ ^[0-9]+$ && $PERIOD_MS =~ ^[1-9][0-9]*$ ]] || {
    echo "stalls: STALL_MS and PERIOD_MS are whole milliseconds, PERIOD_MS above 0 (got '$STALL_MS', '$PERIOD_MS')" >&2
    exit 2
}
[[ $# -gt 0 ]] || set -- cargo test --workspace --locked --no-fail-fast
stall_s=$(awk -v m="$STALL_MS" 'BEGIN { printf "%.3f", m / 1000 }')
period_s=$(awk -v m="$PERIOD_MS" 'BEGIN { printf "%.3f", m / 1000 }')

setsid "$@" &
pid=$!
trap 'kill -CONT -- "-$pid" 2>/dev/null || true' EXIT
stalls=0
# Bounded: at most a day of periods; ends when the command does.
for ((i = 0; i < 86400000 / PERIOD_MS; i++)); do
    sleep "$period_s"
    kill -0 "$pid" 2>/dev/null || break
    kill -STOP -- "-$pid" 2>/dev/null || break
    sleep "$stall_s"
    kill -CONT -- "-$pid" 2>/dev/null || break
    stalls=$((stalls + 1))
done
rc=0
wait "$pid" || rc=$?
echo "stalls: $stalls of ${STALL_MS} ms every ${PERIOD_MS} ms; exit status $rc" >&2
exit "$rc"
