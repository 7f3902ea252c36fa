#!/usr/bin/env bash
# Control-path partitions between the coordinator and one agent (D2, D13, D42), in
# network namespaces with nft drops, at 2,000 requests in flight. Each round drops the
# control path of agent a1 in every phase of a level, and the script runs
# PARTITION_ROUNDS rounds (default 5):
#   blip-setup-2.5s  2.5 s (both directions) from the moment a1 logs its new session:
#                    Hello's reply, the clock pings, the fleet check's probe and the
#                    Prepare go into the drop and are resent when the session resumes;
#   blip-ready-2.5s  from the moment a1 logs that it prepared the level: its Ready and
#                    the Start (both resent after the resume);
#   blip-2.5s        3 s into the load (3 s after a1's "prepared");
#   blip-half-2.5s   as blip-2.5s, healed unevenly as TCP's backoff heals an old
#                    connection: a1's direction of it back after 0.7 s, the coordinator's
#                    data on it dropped until 3.6 s (past a1's lease), new connections
#                    back after 2.5 s: complete only if the resume dialled goes on
#                    while the coordinator hears a1 again on the old stream (D2);
#   blip-end-2.5s    7.8 s after a1's "prepared" in an 8 s level: the last rows, Done and
#                    its acknowledgement.
#   Each completes valid: the agents' counts add up to what the target served, no row
#   twice, both agents have rows (a Start lost in the broken stream once left a1 idle in
#   a run that still looked complete).
#   cut-10s          a 10 s drop 3 s into the load: the loss is reported <= 3.0 s after the cut and the
#                    agent's requests at the target stop within its lease (3 s).
# The table also gives each agent's time from Prepare to Ready (its log's "prepared" line).
# Needs root, iproute2 and nftables (apt-installed when missing). Exit 77 = cannot run here.
# Usage: [BIN=debug] [PARTITION_ROUNDS=N] [PARTITION_LEVELS="blip-setup-2.5s ..."] bench/partition.sh
# (appends a table to bench/RESULTS.md; BIN=debug uses the optimized dev profile without a
# release build; PARTITION_LEVELS runs only the levels named)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[[ $(id -u) == 0 ]] || { echo "partition: needs root (network namespaces)"; exit 77; }
need=()
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
    { apt-get update -qq && apt-get install -y -qq "${need[@]}"; } >/dev/null 2>&1 \
        || { echo "partition: cannot install ${need[*]}"; exit 77; }
fi
command -v python3 >/dev/null || { echo "partition: needs python3"; exit 77; }
ip netns list >/dev/null 2>&1 || { echo "partition: no network namespaces here"; exit 77; }

P=surgepart NET=10.78.0
WORK=$(mktemp -d /tmp/surge-partition.XXXXXX)
prepare_bins "$WORK"
PIDS=()
cleanup() {
    local rc=$? pid left=()
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    # Every process must end on SIGTERM (an agent whose coordinator vanished once did not).
    for _ in $(seq 1 160); do
        left=()
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
        (( ${#left[@]} == 0 )) && break
        sleep 0.05
    done
    if (( ${#left[@]} > 0 )); then
        for pid in "${left[@]}"; do
            log "FAILED: $(tr '\0' ' ' </proc/$pid/cmdline 2>/dev/null | cut -c1-80) (pid $pid) still running 8 s after SIGTERM; killed"
            kill -9 "$pid" 2>/dev/null || true
        done
        rc=1
    fi
    for ns in $(ip netns list | awk '{print $1}' | grep "^${P}-" || true); do ip netns del "$ns"; done
    ip route del unreachable $NET.0/24 2>/dev/null || true
    exit "$rc"
}
trap cleanup EXIT

# The root namespace must never route the test subnet out of this machine.
ip route replace unreachable $NET.0/24
ip netns add ${P}-sw
ip -n ${P}-sw link add br0 type bridge
ip -n ${P}-sw link set br0 up
host() { # name ip
    ip netns add ${P}-$1
    ip -n ${P}-$1 link set lo up
    ip -n ${P}-$1 link add eth0 type veth peer name v-$1 netns ${P}-sw
    ip -n ${P}-$1 addr add $2/24 dev eth0
    ip -n ${P}-$1 link set eth0 up
    ip -n ${P}-sw link set v-$1 master br0 up
}
host coord $NET.1; host a1 $NET.11; host a2 $NET.12; host target $NET.20

PKI=$WORK/pki
"$SURGE" certs init --out "$PKI" >/dev/null
"$SURGE" certs issue --ca "$PKI" --name agent --san $NET.11 --san $NET.12 --out "$PKI" >/dev/null
"$SURGE" certs issue --ca "$PKI" --name coordinator --out "$PKI" >/dev/null

ip netns exec ${P}-target "$SURGE" echo --listen $NET.20:8000 --ttft-ms 500 --itl-ms 50 >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
for a in a1 a2; do
    ip=$([[ $a == a1 ]] && echo $NET.11 || echo $NET.12)
    ip netns exec ${P}-$a "$SURGE_AGENT" --listen $ip:7171 --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/agent.pem" \
        --tls-key "$PKI/agent.key" --allowed-targets $NET.20 >"$WORK/$a.log" 2>&1 &
    PIDS+=($!)
done
served() { ip netns exec ${P}-target curl -fsS http://$NET.20:8000/metrics | awk '/^surge_echo_tokens_total/ {print int($2/8)}'; }
running() { ip netns exec ${P}-target curl -fsS http://$NET.20:8000/metrics | awk '/^surge_echo_requests_running/ {print int($2)}'; }
for _ in $(seq 100); do [[ -n $(served 2>/dev/null) ]] && break; sleep 0.1; done
[[ -n $(served 2>/dev/null) ]] || { cat "$WORK/echo.log" >&2; die "the echo target did not answer within 10 s"; }
# The coordinator does not retry an agent that refuses the connection (exit 1, no result),
# so wait for each agent's "listening" line; on a loaded 2-core host it once came after
# the first level had started.
for a in a1 a2; do
    for _ in $(seq 200); do grep -q "listening on" "$WORK/$a.log" && break; sleep 0.05; done
    grep -q "listening on" "$WORK/$a.log" || { cat "$WORK/$a.log" >&2; die "agent $a did not listen within 10 s"; }
done

# Lines of agent A's log that contain TEXT.
loglines() { grep -c -- "$2" "$WORK/$1.log" || true; }
# One level: 2,000 in flight for D seconds; the control path of a1 is cut for CUT s, AT
# seconds after launch, or (AT = log:TEXT[+SECS]) as soon as a1's log has a new line with
# TEXT (SECS later). The load starts about 0.3 s after the agents say "prepared", whose
# time varies (2-5 s for 1,000 connections each here), so drops meant for the load are
# placed after that line, not after the launch.
level() { # name duration cut [at, default 5] [half: a half-healed blip]
    local name=$1 d=$2 cut=$3 at=${4:-5} shape=${5:-} dir=$WORK/${1// /_}
    mkdir -p "$dir"
    local before; before=$(served)
    local prep0_a1 prep0_a2 trigger="" n0=0
    prep0_a1=$(loglines a1 "prepared; Ready follows"); prep0_a2=$(loglines a2 "prepared; Ready follows")
    local after_s=0
    if [[ $at == log:* ]]; then
        trigger=${at#log:}
        if [[ $trigger == *+* ]]; then after_s=${trigger##*+}; trigger=${trigger%+*}; fi
        n0=$(loglines a1 "$trigger")
    fi
    ip netns exec ${P}-coord env SURGE_LOG=${SURGE_LOG:-warn,surge_coordinator::fleet=info} "$SURGE" run --base-url http://$NET.20:8000 --model m --agents $NET.11:7171,$NET.12:7171 \
        --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/coordinator.pem" --tls-key "$PKI/coordinator.key" \
        --random-input-len 16 --random-output-len 8 --ignore-eos --max-concurrency 2000 --duration "${d}s" \
        --no-initial-test --save-rows "$dir/rows.jsonl" --save-result --result-dir "$dir" --result-filename r.json \
        >"$dir/out.txt" 2> >(while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$dir/err.txt") &
    local pid=$!
    local wait_for="sleep $at"
    if [[ -n $trigger ]]; then
        # Polled every 5 ms inside the cutter (at most 30 s; then the drop starts anyway).
        wait_for="for _ in \$(seq 6000); do [[ \$(grep -c -- '$trigger' '$WORK/a1.log') -gt $n0 ]] && break; sleep 0.005; done; sleep $after_s"
    fi
    # The drop and its removal run in one high-priority shell inside a1's namespace, so
    # that process start-up on a loaded host does not stretch the cut.
    cat >"$dir/cut.nft" <<NFT
table inet cut {
    chain in {
        type filter hook input priority 0; policy accept;
        ip saddr $NET.1 drop
    }
    chain out {
        type filter hook output priority 0; policy accept;
        ip daddr $NET.1 drop
    }
}
NFT
    local drop="sleep $cut && nft delete table inet cut && date +%s.%N >'$dir/release.at'"
    if [[ $shape == half ]]; then
        # The blip healed unevenly, as TCP's two backoff timers heal an old connection:
        # 0.7 s into the drop a1's direction of the connections open before it comes back
        # (the coordinator's pure ACKs to a1 pass, so a1's data flows), the coordinator's
        # data on them stays dropped until 1.1 s after the path is back for new
        # connections (at $cut s), past a1's lease: only a resume keeps a1 loading.
        # An IPv4 TCP segment of more than 80 bytes carries data (60 of headers at most,
        # and a TLS record is 22 bytes or more).
        cat >"$dir/half.sh" <<HALF
old=\$(ss -Htn state established '( sport = :7171 )' | grep -o '$NET.1:[0-9]*' | cut -d: -f2 | paste -sd, -)
[[ -n \$old ]] || { echo 'half: no connection from the coordinator' >&2; exit 1; }
nft -f - <<NFT1
delete table inet cut
table inet cut {
    chain in {
        type filter hook input priority 0; policy accept;
        ip saddr $NET.1 tcp sport { \$old } ip length <= 80 accept
        ip saddr $NET.1 drop
    }
}
NFT1
sleep $(python3 -c "print($cut - 0.7)")
nft -f - <<NFT2
delete table inet cut
table inet cut {
    chain in {
        type filter hook input priority 0; policy accept;
        ip saddr $NET.1 tcp sport { \$old } ip length > 80 drop
    }
}
NFT2
date +%s.%N >'$dir/release.at'
sleep 1.1
nft delete table inet cut
HALF
        drop="sleep 0.7 && bash '$dir/half.sh'"
    fi
    nice -n -20 ip netns exec ${P}-a1 bash -c "$wait_for; nft -f '$dir/cut.nft' && date +%s.%N >'$dir/cut.at' && $drop" &
    local cutter=$!
    for _ in $(seq 4000); do [[ -s $dir/cut.at ]] && break; sleep 0.01; done
    local t_cut; t_cut=$(cat "$dir/cut.at")
    local stopped=""
    if [[ ${cut%.*} -ge 10 ]]; then
        # Watch the target: a1's share stops within its lease (a2 is stopped by the coordinator).
        for _ in $(seq 200); do
            [[ $(running) == 0 ]] && { stopped=$(date +%s.%N); break; }
            sleep 0.05
        done
    fi
    wait $cutter
    echo "cut $t_cut released $(cat "$dir/release.at")" >"$dir/cut.txt"
    local rc=0; wait $pid || rc=$?
    sleep 1
    local after; after=$(served)
    if [[ ! -s $dir/r.json ]]; then
        log "level $name: surge run exited $rc without a result; its output:"
        tail -n 40 "$dir/out.txt" "$dir/err.txt" "$WORK/a1.log" "$WORK/a2.log" >&2 || true
        die "level $name wrote no result"
    fi
    local prep_a1 prep_a2
    prep_a1=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/a1.log" | grep -- "prepared; Ready follows" | tail -n +$((prep0_a1 + 1)) | grep -o 'ms=[0-9]*' | tr '\n' ' ' || true)
    prep_a2=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/a2.log" | grep -- "prepared; Ready follows" | tail -n +$((prep0_a2 + 1)) | grep -o 'ms=[0-9]*' | tr '\n' ' ' || true)
    python3 - "$dir" "$name" "$rc" "$t_cut" "${stopped:-}" "$((after - before))" "$prep_a1" "$prep_a2" >>"$WORK/table.md" <<'PY'
import json, sys
d, name, rc, t_cut, stopped, served = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
prep = " / ".join(",".join(v[3:] for v in a.split()) or "-" for a in sys.argv[7:9])
r = json.load(open(f"{d}/r.json"))
seen, dups, by_agent = set(), 0, [0, 0]
for line in open(f"{d}/rows.jsonl"):
    v = json.loads(line)
    k = (v["agent"], v["seq"])
    dups += k in seen
    seen.add(k)
    by_agent[v["agent"]] += 1
lost_at = next((float(l.split()[0]) for l in open(f"{d}/err.txt") if " lost" in l), None)
resumed = next((l.split(" ", 1)[1].strip() for l in open(f"{d}/err.txt") if "resumed after" in l or " lost" in l), "")
cut_at, released_at = (float(x) for x in open(f"{d}/cut.txt").read().split()[1::2])
fin = r["completed"] + r["failed"]
print(f"| {name} | {rc} | {r['client']['status']} | {r['completed']} | {r['failed']} | {served} | {fin - served:+d} | {dups} | {by_agent[0]} / {by_agent[1]} | "
      f"{'' if lost_at is None else f'{lost_at - t_cut:.2f} s'} | {'' if not stopped else f'{float(stopped) - t_cut:.2f} s'} | {resumed} | {prep} | {released_at - cut_at:.3f} s |")
PY
}
{
    echo "| level | exit | status | completed | failed | served by the target | result - served | rows twice | rows a1 / a2 | loss reported after the cut | target idle after the cut | resume or loss | prepare ms a1 / a2 | drop lasted |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$WORK/table.md"
ROUNDS=${PARTITION_ROUNDS:-5}
# PARTITION_LEVELS: the levels each round runs (default all), by name without the " #N".
LEVELS=${PARTITION_LEVELS:-blip-setup-2.5s blip-ready-2.5s blip-2.5s blip-half-2.5s blip-end-2.5s cut-10s}
wanted() { [[ " $LEVELS " == *" $1 "* ]]; }
for round in $(seq "$ROUNDS"); do
    if wanted blip-setup-2.5s; then level "blip-setup-2.5s #$round" 12 2.5 "log:session opened"; fi
    if wanted blip-ready-2.5s; then level "blip-ready-2.5s #$round" 10 2.5 "log:prepared; Ready follows"; fi
    if wanted blip-2.5s; then level "blip-2.5s #$round" 12 2.5 "log:prepared; Ready follows+3"; fi
    if wanted blip-half-2.5s; then level "blip-half-2.5s #$round" 12 2.5 "log:prepared; Ready follows+3" half; fi
    if wanted blip-end-2.5s; then level "blip-end-2.5s #$round" 8 2.5 "log:prepared; Ready follows+7.8"; fi
    if wanted cut-10s; then level "cut-10s #$round" 20 10 "log:prepared; Ready follows+3"; fi
done
cat "$WORK/table.md"
{
    echo
    echo "## partition ($START_DATE, bench/partition.sh, binaries built $BINS_BUILT)"
    echo
    echo "Two agents and the echo target in network namespaces, 2,000 in flight (echo TTFT 500 ms, ITL 50 ms, 8 tokens);"
    echo "An nft drop of everything between the coordinator and agent a1, both directions: from a1's new session (setup),"
    echo "from a1's \"prepared\" (its Ready and the Start), 3 s after it (the load; blip-half: a1's side of the old connections back after 0.7 s, the coordinator's data on them dropped until 3.6 s), 7.8 s after it in an 8 s level (its end), and a 10 s cut 3 s into the load;"
    echo "$ROUNDS rounds of: $LEVELS. \"prepare ms\" is each agent's time from Prepare to Ready (its log)."
    echo "\"served by the target\" counts the target's completed requests (tokens / 8) during the level."
    echo
    cat "$WORK/table.md"
} >>"$BENCH_DIR/RESULTS.md"
# The must-show bounds: the blips complete with every row once and rows from both agents; the cut is reported
# within 3.0 s and the target is idle within the lease (3 s from the last word a1 heard,
# which precedes the cut) plus 0.5 s for cancelling in-flight requests and for polling
# the target through `ip netns exec curl` on a loaded host (measured 3.06-3.15 s).
if python3 - "$WORK/table.md" "$WORK/failed.txt" <<'PY'
import sys
failed = open(sys.argv[2], "w")
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| blip") or l.startswith("| cut")]
ok = True
for r in rows:
    r = [c.strip() for c in r]
    if r[0].startswith("blip"):
        # Every row once, and both agents ran their share (a lost Start once left a1 idle
        # in a run that still looked complete).
        held = r[1] == "0" and r[6] == "+0" and r[7] == "0" and min(int(x) for x in r[8].split(" / ")) > 0
    else:
        held = r[1] == "3" and float(r[9].split()[0]) <= 3.0 and float(r[10].split()[0]) <= 3.5
    if not held:
        print(r[0].replace(" ", "_"), file=failed)
    ok &= held
print("partition bounds:", "held" if ok else "NOT held")
sys.exit(0 if ok else 1)
PY
then :; else
    # What the coordinator and a1 said from the cut on, for each level that did not hold
    # (CI keeps nothing else of the run).
    while read -r lvl; do
        t_cut=$(cat "$WORK/$lvl/cut.at"); t_rel=$(cat "$WORK/$lvl/release.at")
        echo "--- $lvl: cut at $t_cut, released at $t_rel; the coordinator:"
        awk -v t="$t_cut" '$1 >= t - 0.5' "$WORK/$lvl/err.txt" | head -n 60
        echo "--- $lvl: a1 from the cut on:"
        sed 's/\x1b\[[0-9;]*m//g' "$WORK/a1.log" | python3 -c '
import sys, datetime
t = float(sys.argv[1])
for l in sys.stdin:
    try:
        at = datetime.datetime.fromisoformat(l.split()[0].replace("Z", "+00:00")).timestamp()
    except (ValueError, IndexError):
        continue
    if t - 0.5 <= at <= t + 12:
        print(l.rstrip()[:300])' "$t_cut" | head -n 60
    done <"$WORK/failed.txt"
    exit 1
fi
