#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted input (D28): SSE framing and
# chunk classification, the coordinator's and the agents' session messages, dataset
# files, agent and coordinator configuration. libFuzzer via cargo-fuzz on nightly.
# Usage: bench/fuzz.sh [SECONDS per target, default 60]   (appends a table to bench/RESULTS.md)
#        FUZZ_TARGETS="agent_msgs coordinator_msgs" bench/fuzz.sh 600   (some targets only)
#        FUZZ_RUNS=10500000 nice -n 19 bench/fuzz.sh   (a number of executions instead of a
#        time, so a run at low priority beside other work still reaches its count)
# Crashes land in fuzz/artifacts/TARGET/; copy each into fuzz/corpus/TARGET/ once fixed,
# where the stable replay tests (agent/tests/fuzz_corpus.rs, coordinator/tests/fuzz_corpus.rs)
# keep it fixed. Exit 77 when nightly or cargo-fuzz cannot be had here.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECS=${1:-60}
TARGETS=(sse_stream coordinator_msgs agent_config agent_msgs sharegpt custom_jsonl coordinator_config)
if [[ -n ${FUZZ_TARGETS:-} ]]; then read -r -a TARGETS <<<"$FUZZ_TARGETS"; fi

rustup toolchain list | grep -q nightly || { echo "fuzz: no nightly toolchain"; exit 77; }
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked >/dev/null 2>&1 || { echo "fuzz: cannot install cargo-fuzz"; exit 77; }
fi
cd "$ROOT/fuzz"
cargo +nightly fuzz build -O >/dev/null 2>&1 || cargo +nightly fuzz build -O
TABLE=$(mktemp)
echo "| target | seconds | executions | exec/s | corpus files | crashes |" >"$TABLE"
echo "|---|---|---|---|---|---|" >>"$TABLE"
crashed=0
for t in "${TARGETS[@]}"; do
    log "fuzzing $t for ${SECS}s"
    work=$(mktemp -d)   # new inputs go here; the committed corpus stays as it is
    out=$(mktemp)
    rc=0
    limit=(-max_total_time="$SECS")
    if [[ -n ${FUZZ_RUNS:-} ]]; then limit=(-runs="$FUZZ_RUNS"); fi
    began=$(date +%s)
    cargo +nightly fuzz run -O "$t" "$work" "corpus/$t" -- "${limit[@]}" -rss_limit_mb=2048 >"$out" 2>&1 || rc=$?
    took=$(( $(date +%s) - began )); (( took > 0 )) || took=1
    runs=$(grep -oE '^#[0-9]+' "$out" | tail -1 | tr -d '#')
    n=$(ls "$work" | wc -l)
    crashes=$(ls "artifacts/$t" 2>/dev/null | wc -l)
    [[ $rc == 0 ]] || crashed=1
    echo "| $t | $took | ${runs:-?} | $(( ${runs:-0} / took )) | $n new | $crashes (exit $rc) |" >>"$TABLE"
    rm -rf "$work" "$out"
done
cat "$TABLE"
{
    echo
    echo "## fuzz ($START_DATE, bench/fuzz.sh ${FUZZ_RUNS:+FUZZ_RUNS=$FUZZ_RUNS }$SECS, cargo-fuzz $(cargo +nightly fuzz --version 2>/dev/null | awk '{print $2}'), $(rustc +nightly --version))"
    echo
    cat "$TABLE"
} >>"$BENCH_DIR/RESULTS.md"
exit $crashed
