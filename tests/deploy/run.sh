#!/usr/bin/env bash
# Tests of deploy/: the systemd unit, install.sh, and surge-agent under a real systemd.
#
#   tests/deploy/run.sh            everything (CI runs it as root from .ci/run)
#   tests/deploy/run.sh --static   only the checks that need no container (1-3)
#
#   1. verify    `systemd-analyze verify` of deploy/systemd/surge-agent.service: stderr must be empty
#   2. security  `systemd-analyze security --offline=yes`: overall exposure must be <= 2.0
#   3. install   deploy/install.sh --root TMP: a second run changes nothing; --uninstall
#                leaves only the configuration and names it
#   4. e2e       boots a real systemd (systemd-nspawn, a debootstrapped Debian bookworm root)
#                inside a network namespace, installs the agent with install.sh, starts it
#                with systemctl (Type=notify), runs `surge run --agents` against it with
#                mutual TLS from a coordinator namespace to an echo server in a third one,
#                SIGKILLs it and checks Restart=on-failure brings it back for a new session,
#                checks the watchdog keeps it alive past WatchdogSec, then stops it cleanly.
#
# Exit status: 0 all passed; 1 a check failed; 77 SKIPPED: something could not run here
# (not root, no systemd-nspawn possible, no network for apt/debootstrap); the reason is
# printed. Nothing is ever reported as passed without having run.
#
# Needs (installed with apt-get when missing and root): systemd (systemd-analyze),
# systemd-container (systemd-nspawn), debootstrap, iproute2, util-linux.
# Environment:
#   SURGE_BIN_DIR        directory with surge and surge-agent (default: builds them with
#                        `cargo build --release --bins --locked` and uses target/release)
#   SURGE_TEST_ROOTFS    cached container root (default /var/cache/surge-test-root); made
#                        once with debootstrap (~35 s to a few minutes), then reused
#   SURGE_DEBIAN_MIRROR  debootstrap mirror (default http://deb.debian.org/debian)
#   SURGE_TEST_KEEP=1    keep the work directory (logs, certificates, results)
set -euo pipefail

SKIP=77
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DEPLOY=$REPO/deploy
UNIT=$DEPLOY/systemd/surge-agent.service
ROOTFS=${SURGE_TEST_ROOTFS:-/var/cache/surge-test-root}
MIRROR=${SURGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
MAX_EXPOSURE=2.0
STATIC_ONLY=0
case ${1:-} in
  --static) STATIC_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--static]" >&2; exit 2 ;;
esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/surge-deploy-test.XXXXXX")
T0=$(date +%s.%N)
PHASE='' PHASE_T0=''
TIMINGS=()
SKIPPED=()

log() { printf '[deploy-test %6.2fs] %s\n' "$(elapsed "$T0")" "$*"; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
phase() { end_phase; PHASE=$1; PHASE_T0=$(date +%s.%N); log "=== $PHASE"; }
end_phase() {
  if [ -n "$PHASE" ]; then
    local t; t=$(elapsed "$PHASE_T0"); TIMINGS+=("$(printf '%-48s %7.2f s' "$PHASE" "$t")"); log "--- $PHASE: ${t}s"
  fi
  PHASE=
}
fail() { log "FAILED ($PHASE): $*"; exit 1; }
skip() {   # skip REASON: the rest of the end-to-end test cannot run here
  SKIPPED+=("$*")
  echo
  echo "######################################################################"
  echo "## SKIPPED: $*"
  echo "## (the end-to-end systemd test did NOT run; this is not a pass)"
  echo "######################################################################"
  echo
  exit $SKIP
}

# --- teardown: always, also on failure -----------------------------------------
NSPAWN_PID='' LEADER='' ECHO_PID='' ROUTE='' NETNS=()
summary() {
  echo
  echo "deploy tests: phase timings"
  local l; for l in "${TIMINGS[@]}"; do echo "  $l"; done
  printf '  %-48s %7.2f s\n' total "$(elapsed "$T0")"
}
teardown() {
  local rc=$?
  set +e
  end_phase
  if [ "$rc" != 0 ] && [ "$rc" != "$SKIP" ] && [ -n "$LEADER" ] && [ -d "/proc/$LEADER" ]; then
    echo "---- diagnostics: systemctl status / journal of surge-agent in the container"
    nsenter -t "$LEADER" -a systemctl --no-pager -n 0 status surge-agent 2>&1
    nsenter -t "$LEADER" -a journalctl --no-pager -u surge-agent -n 60 2>&1
    echo "---- nspawn log (tail)"; tail -n 30 "$WORK/nspawn.log" 2>/dev/null
  fi
  if [ -n "$ECHO_PID" ]; then kill "$ECHO_PID" 2>/dev/null; wait "$ECHO_PID" 2>/dev/null; fi
  if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    local t; t=$(date +%s.%N)
    kill -TERM "$NSPAWN_PID"                     # systemd in the container shuts down cleanly
    for _ in $(seq 1 100); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$NSPAWN_PID" 2>/dev/null; then log "container did not stop in 10 s: SIGKILL"; kill -KILL "$NSPAWN_PID"; fi
    wait "$NSPAWN_PID" 2>/dev/null
    log "container stopped ($(elapsed "$t")s)"
  fi
  local ns
  for ns in "${NETNS[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null   # only processes in our own namespaces
    ip netns del "$ns" 2>/dev/null
  done
  [ -z "$ROUTE" ] || ip route del unreachable "$ROUTE" 2>/dev/null
  [ ${#NETNS[@]} = 0 ] || log "removed network namespaces ${NETNS[*]}${ROUTE:+ and the unreachable route $ROUTE}"
  if [ "${SURGE_TEST_KEEP:-0}" = 1 ] || { [ "$rc" != 0 ] && [ "$rc" != "$SKIP" ]; }; then
    log "work directory kept: $WORK"
  else
    rm -rf "$WORK"
  fi
  summary
  case $rc in
    0) if [ "$STATIC_ONLY" = 1 ]; then echo "deploy tests: static checks PASSED (--static: end-to-end test not run)"; else echo "deploy tests: PASSED"; fi ;;
    "$SKIP") echo "deploy tests: SKIPPED (exit $SKIP): ${SKIPPED[*]}" ;;
    *) echo "deploy tests: FAILED (exit $rc)" ;;
  esac
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

IS_ROOT=0; [ "$(id -u)" = 0 ] && IS_ROOT=1
APT_UPDATED=0
# need CMD PACKAGE: make CMD available, installing PACKAGE with apt-get when possible.
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$IS_ROOT" = 1 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing $2 (for $1)"
    if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq >"$WORK/apt.log" 2>&1 && APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >>"$WORK/apt.log" 2>&1 || true
  fi
  command -v "$1" >/dev/null 2>&1 || { tail -n 5 "$WORK/apt.log" 2>/dev/null; return 1; }
}

# --- binaries ---------------------------------------------------------------------
phase "build binaries"
if [ -n "${SURGE_BIN_DIR:-}" ]; then
  BIN_DIR=$(cd "$SURGE_BIN_DIR" && pwd)
else
  (cd "$REPO" && cargo build --release --bins --locked --quiet) || fail "cargo build --release --bins failed"
  BIN_DIR=$REPO/target/release
fi
for b in surge surge-agent; do [ -x "$BIN_DIR/$b" ] || fail "$BIN_DIR/$b is missing"; done
log "binaries: $BIN_DIR"

# --- 1. systemd-analyze verify ------------------------------------------------------
phase "1 systemd-analyze verify"
need systemd-analyze systemd || skip "systemd-analyze is not installed and could not be installed (apt-get install systemd)"
# verify checks that ExecStart's binary exists: show it the built one at /usr/local/bin,
# in a private mount namespace (nothing is installed on this host).
mkdir -p "$WORK/usr-local/bin"; cp "$BIN_DIR/surge-agent" "$WORK/usr-local/bin/"
mkdir -p "$WORK/unit"; cp "$UNIT" "$WORK/unit/"          # verify wants the real unit name
# shellcheck disable=SC2016 # expanded by the inner sh
VERIFY_CMD='mount --bind "$1" /usr/local && exec systemd-analyze verify "$2"'
if [ "$IS_ROOT" = 1 ]; then UNSHARE=(unshare --mount --propagation private); else UNSHARE=(unshare --map-root-user --mount --propagation private); fi
set +e
"${UNSHARE[@]}" sh -c "$VERIFY_CMD" sh "$WORK/usr-local" "$WORK/unit/surge-agent.service" >"$WORK/verify.out" 2>"$WORK/verify.err"
VRC=$?
set -e
cat "$WORK/verify.out"
if [ -s "$WORK/verify.err" ]; then
  echo "---- systemd-analyze verify stderr:"; cat "$WORK/verify.err"
  if grep -q "unshare\|mount:" "$WORK/verify.err" && [ "$IS_ROOT" = 0 ]; then
    skip "cannot make a private mount namespace for systemd-analyze verify as non-root"
  fi
  fail "systemd-analyze verify printed warnings (stderr must be empty)"
fi
[ "$VRC" = 0 ] || fail "systemd-analyze verify exited $VRC"
log "verify: exit 0, empty stderr"

# --- 2. systemd-analyze security ------------------------------------------------------
phase "2 systemd-analyze security"
systemd-analyze security --offline=yes "$WORK/unit/surge-agent.service" >"$WORK/security.out" 2>&1 || true
grep -E '✗|Overall' "$WORK/security.out" || { cat "$WORK/security.out"; fail "no exposure score"; }
EXPOSURE=$(sed -n 's/.*Overall exposure level for surge-agent.service: \([0-9.]*\).*/\1/p' "$WORK/security.out")
[ -n "$EXPOSURE" ] || fail "could not read the exposure level"
awk -v e="$EXPOSURE" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e <= m) }' ||
  fail "exposure $EXPOSURE is above $MAX_EXPOSURE"
log "security: exposure $EXPOSURE <= $MAX_EXPOSURE"

# --- 3. install.sh: idempotent, --uninstall keeps only the configuration ----------------
phase "3 install.sh --root (idempotence)"
IR=$WORK/installroot; mkdir -p "$IR"
tree_state() { (cd "$IR" && find . -printf '%p %m %u:%g %s\n' | sort && find . -type f -exec sha256sum {} + | sort); }
"$DEPLOY/install.sh" --root "$IR" "$BIN_DIR/surge-agent" | tee "$WORK/install1.out"
for p in usr/local/bin/surge-agent:755 etc/systemd/system/surge-agent.service:644 etc/surge:755 \
         etc/surge/agent.toml:644 etc/surge/tls:750; do
  f=${p%:*} m=${p##*:}
  [ -e "$IR/$f" ] || fail "install.sh did not create /$f"
  [ "$(stat -c %a "$IR/$f")" = "$m" ] || fail "/$f has mode $(stat -c %a "$IR/$f"), want $m"
done
cmp -s "$IR/usr/local/bin/surge-agent" "$BIN_DIR/surge-agent" || fail "installed binary differs"
tree_state >"$WORK/state1"
"$DEPLOY/install.sh" --root "$IR" "$BIN_DIR/surge-agent" | tee "$WORK/install2.out"
tree_state >"$WORK/state2"
grep -q "nothing changed" "$WORK/install2.out" || fail "second install.sh run did not report 'nothing changed'"
if grep -Eq '^  (installed|updated|created|fixed|removed) ' "$WORK/install2.out"; then fail "second install.sh run reported changes"; fi
diff "$WORK/state1" "$WORK/state2" || fail "second install.sh run changed files"
log "second run: nothing changed (tree identical)"
# A configuration the user edited survives a reinstall; a drifted mode is repaired.
echo "# edited by the test" >>"$IR/etc/surge/agent.toml"; cp "$IR/etc/surge/agent.toml" "$WORK/edited.toml"
chmod 755 "$IR/etc/surge/tls"
"$DEPLOY/install.sh" --root "$IR" "$BIN_DIR/surge-agent" >"$WORK/install3.out"
cmp -s "$IR/etc/surge/agent.toml" "$WORK/edited.toml" || fail "install.sh overwrote an existing agent.toml"
[ "$(stat -c %a "$IR/etc/surge/tls")" = 750 ] || fail "install.sh did not repair the mode of /etc/surge/tls"
log "edited agent.toml kept; /etc/surge/tls mode repaired"

phase "3 install.sh --uninstall"
echo dummy >"$IR/etc/surge/tls/agent.key"
mkdir -p "$IR/etc/systemd/system/multi-user.target.wants"
ln -s /etc/systemd/system/surge-agent.service "$IR/etc/systemd/system/multi-user.target.wants/surge-agent.service"
"$DEPLOY/install.sh" --root "$IR" --uninstall | tee "$WORK/uninstall.out"
LEFT=$(cd "$IR" && find . ! -type d | sort)
[ "$LEFT" = "./etc/surge/agent.toml" ] || fail "after --uninstall, expected only ./etc/surge/agent.toml, found: $LEFT"
SURGE_DIRS=$(cd "$IR" && find . -type d -name 'surge*' | sort)
[ "$SURGE_DIRS" = "./etc/surge" ] || fail "after --uninstall, surge directories left: $SURGE_DIRS"
grep -q "kept .*/etc/surge/agent.toml" "$WORK/uninstall.out" || fail "--uninstall did not name the configuration it kept"
"$DEPLOY/install.sh" --root "$IR" --uninstall >"$WORK/uninstall2.out"
grep -q "nothing to remove" "$WORK/uninstall2.out" || fail "a second --uninstall did not report 'nothing to remove'"
log "uninstall left only /etc/surge/agent.toml and named it"

phase "3 kubernetes manifests (offline)"
K8S=$DEPLOY/kubernetes
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize "$K8S" >"$WORK/kustomize.out" 2>"$WORK/kustomize.err" || { cat "$WORK/kustomize.err"; fail "kubectl kustomize $K8S failed"; }
  KINDS=$(sed -n 's/^kind: //p' "$WORK/kustomize.out" | sort | tr '\n' ' ')
  [ "$KINDS" = "ConfigMap Deployment Namespace NetworkPolicy PersistentVolumeClaim Service " ] || fail "kustomize output has kinds: $KINDS"
  log "kubectl kustomize: $KINDS"
else
  log "NOT CHECKED: kubectl kustomize (kubectl is not installed)"
fi
if command -v python3 >/dev/null 2>&1 && python3 -c 'import yaml' 2>/dev/null; then
  # Every file parses; the Job's script is valid bash.
  python3 - "$K8S" "$WORK/job.sh" <<'PY' || fail "a Kubernetes manifest does not parse"
import glob, sys, yaml
for f in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    docs = [d for d in yaml.safe_load_all(open(f)) if d]
    assert docs and all("kind" in d for d in docs), f
job = yaml.safe_load(open(sys.argv[1] + "/coordinator-job.yaml"))
c = job["spec"]["template"]["spec"]["containers"][0]
assert c["command"] == ["bash", "-c"], c["command"]
open(sys.argv[2], "w").write(c["args"][0])
PY
  bash -n "$WORK/job.sh" || fail "the coordinator Job's script is not valid bash"
  grep -q "surge sweep --agents" "$WORK/job.sh" || fail "the coordinator Job does not run surge sweep --agents"
  log "manifests parse; the Job's script is valid bash"
else
  log "NOT CHECKED: YAML parsing of the manifests (python3 with PyYAML is not installed)"
fi

if [ "$STATIC_ONLY" = 1 ]; then end_phase; log "--static: the end-to-end test was not requested"; exit 0; fi

# --- 4. end to end under a real systemd --------------------------------------------------
phase "4 e2e: prerequisites"
[ "$IS_ROOT" = 1 ] || skip "the end-to-end test needs root (network namespaces, systemd-nspawn); run as root"
need ip iproute2 || skip "ip (iproute2) is missing and could not be installed"
need nsenter util-linux || skip "nsenter (util-linux) is missing and could not be installed"
need systemd-nspawn systemd-container || skip "systemd-nspawn is missing and could not be installed (apt-get install systemd-container; no network?)"
need debootstrap debootstrap || skip "debootstrap is missing and could not be installed (no network?)"

# Addresses: one /24 nobody routes yet; the root namespace gets an unreachable route for
# it first, so nothing in the test subnet can ever leave this machine.
NET=
for o in $(seq $(( $$ % 100 + 100 )) 199) $(seq 100 199); do
  if [ -z "$(ip route show exact "10.77.$o.0/24")" ] && ! ip -o addr | grep -q " 10\.77\.$o\."; then NET=10.77.$o; break; fi
done
[ -n "$NET" ] || fail "no free 10.77.x.0/24 test subnet"
P=sdt$$
COORD_IP=$NET.1 AGENT_IP=$NET.11 TARGET_IP=$NET.50 PORT=7171

phase "4 e2e: network namespaces"
ip route replace unreachable "$NET.0/24" || skip "cannot add a route in the root namespace"
ROUTE=$NET.0/24
ip netns add "$P-sw" 2>"$WORK/netns.err" || skip "cannot create network namespaces: $(cat "$WORK/netns.err")"
NETNS+=("$P-sw")
ip -n "$P-sw" link add br0 type bridge
ip -n "$P-sw" link set br0 up
add_host() {   # add_host NAME IP: a namespace with eth0 on the switch's bridge, no default route
  local ns=$P-$1
  ip netns add "$ns"; NETNS+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "$ns" link add eth0 type veth peer name "v-$1" netns "$P-sw"
  ip -n "$ns" addr add "$2/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$P-sw" link set "v-$1" master br0 up
}
add_host coord "$COORD_IP"
add_host agent "$AGENT_IP"
add_host target "$TARGET_IP"
log "subnet $NET.0/24: coordinator $COORD_IP ($P-coord), agent $AGENT_IP ($P-agent), echo $TARGET_IP ($P-target)"

phase "4 e2e: container root"
exec 9>"$ROOTFS.lock"; flock 9
if [ -f "$ROOTFS/.surge-test-root" ]; then
  log "reusing $ROOTFS"
else
  log "debootstrap bookworm (minbase + systemd, dbus) into $ROOTFS from $MIRROR"
  rm -rf "$ROOTFS.tmp"
  if ! debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$ROOTFS.tmp" "$MIRROR" \
      >"$WORK/debootstrap.log" 2>&1; then
    tail -n 15 "$WORK/debootstrap.log"; rm -rf "$ROOTFS.tmp"
    skip "debootstrap of the container root failed (no network to $MIRROR?); log above"
  fi
  # A fixed machine-id: first boot runs no presets; --volatile=overlay keeps the cache pristine.
  systemd-id128 new >"$ROOTFS.tmp/etc/machine-id" 2>/dev/null || tr -d - </proc/sys/kernel/random/uuid >"$ROOTFS.tmp/etc/machine-id"
  date -u >"$ROOTFS.tmp/.surge-test-root"
  rm -rf "$ROOTFS"; mv "$ROOTFS.tmp" "$ROOTFS"
  log "container root ready: $(du -sh "$ROOTFS" | cut -f1)"
fi
flock -u 9

phase "4 e2e: nspawn preflight"
if ! timeout 60 systemd-nspawn -q -D "$ROOTFS" --register=no --keep-unit --volatile=overlay --console=pipe \
    /bin/true >"$WORK/preflight.log" 2>&1; then
  cat "$WORK/preflight.log"
  skip "systemd-nspawn cannot run containers on this machine (see its output above)"
fi
log "systemd-nspawn works"

phase "4 e2e: boot systemd"
MACHINE=surge-agent-test
echo "$MACHINE" >"$WORK/hostname"   # the cached root carries the build host's /etc/hostname
systemd-nspawn -D "$ROOTFS" -b --register=no --keep-unit --volatile=overlay --console=pipe -M "$MACHINE" \
  --network-namespace-path="/run/netns/$P-agent" \
  --bind-ro="$DEPLOY":/opt/surge/deploy \
  --bind-ro="$BIN_DIR/surge-agent":/opt/surge/bin/surge-agent \
  --bind-ro="$WORK/hostname":/etc/hostname \
  >"$WORK/nspawn.log" 2>&1 &
NSPAWN_PID=$!
for _ in $(seq 1 600); do   # the container's PID 1 and its private control socket (<= 60 s)
  LEADER=$(pgrep -P "$NSPAWN_PID" -x systemd || true)
  [ -n "$LEADER" ] && [ -S "/proc/$LEADER/root/run/systemd/private" ] && break
  kill -0 "$NSPAWN_PID" 2>/dev/null || { cat "$WORK/nspawn.log"; fail "systemd-nspawn exited during boot"; }
  sleep 0.1
done
if [ -z "$LEADER" ] || [ ! -S "/proc/$LEADER/root/run/systemd/private" ]; then fail "the container's systemd did not come up in 60 s"; fi
C() { nsenter -t "$LEADER" -a "$@"; }   # run a command inside the container
STATE=$(timeout 60 nsenter -t "$LEADER" -a systemctl is-system-running --wait 2>&1 || true)
log "container systemd $(C systemctl --version | head -n1 | cut -d' ' -f1-2): system $STATE"
case $STATE in
  running) ;;
  degraded) C systemctl --no-pager --failed || true ;;
  *) fail "the container's systemd is '$STATE'" ;;
esac

phase "4 e2e: install.sh in the container"
C /bin/bash /opt/surge/deploy/install.sh /opt/surge/bin/surge-agent | tee "$WORK/c-install1.out"
grep -q "reloaded .*daemon-reload" "$WORK/c-install1.out" || fail "install.sh did not run systemctl daemon-reload under a running systemd"
C /bin/bash /opt/surge/deploy/install.sh /opt/surge/bin/surge-agent | tee "$WORK/c-install2.out"
grep -q "nothing changed" "$WORK/c-install2.out" || fail "second install.sh run in the container changed something"
[ "$(C systemctl show -p LoadState --value surge-agent)" = loaded ] || fail "surge-agent.service is not loaded after install.sh"

phase "4 e2e: certificates and config"
PKI=$WORK/pki
"$BIN_DIR/surge" certs init --out "$PKI" >/dev/null
"$BIN_DIR/surge" certs issue --ca "$PKI" --name agent --san "$AGENT_IP" --out "$PKI" >/dev/null
"$BIN_DIR/surge" certs issue --ca "$PKI" --name coordinator --out "$PKI" >/dev/null
# shellcheck disable=SC2016 # expanded by the inner sh
put() { C sh -c 'umask 077; cat >"$1"' put "$2" <"$1"; }   # put HOSTFILE CONTAINERPATH (0600)
put "$PKI/ca.pem" /etc/surge/tls/ca.pem
put "$PKI/agent.pem" /etc/surge/tls/agent.pem
put "$PKI/agent.key" /etc/surge/tls/agent.key
# The installed example configuration, with this test's target allowed.
C sed -i "s|^allowed-targets = .*|allowed-targets = [\"$TARGET_IP:8000\"]|" /etc/surge/agent.toml
C grep -q "^allowed-targets = \[\"$TARGET_IP:8000\"\]" /etc/surge/agent.toml || fail "could not set allowed-targets in the installed agent.toml"
# The EnvironmentFile overrides the file: a low max-in-flight, checked below.
printf 'SURGE_AGENT_MAX_IN_FLIGHT=64\nSURGE_LOG=info\n' | C sh -c 'cat >/etc/surge/agent.env'
C ls -l /etc/surge /etc/surge/tls

phase "4 e2e: systemctl start (READY=1)"
t=$(date +%s.%N)
timeout 60 nsenter -t "$LEADER" -a systemctl start surge-agent || fail "systemctl start surge-agent failed"
log "systemctl start returned after $(elapsed "$t")s"
show() { C systemctl show -p "$1" --value surge-agent; }
[ "$(show ActiveState)/$(show SubState)" = active/running ] || fail "surge-agent is $(show ActiveState)/$(show SubState) after start"
C journalctl --no-pager -u surge-agent -o cat | grep -q "surge-agent listening on 0.0.0.0:$PORT" ||
  fail "the journal lacks 'surge-agent listening on 0.0.0.0:$PORT' (stdout to the journal)"
PID1=$(show MainPID)
STATUS=$(C cat "/proc/$PID1/status")
UID_=$(awk '/^Uid:/ { print $2 }' <<<"$STATUS")
[ "$UID_" != 0 ] || fail "the agent runs as root"
grep -Eq '^CapEff:\s+0+$' <<<"$STATUS" || fail "the agent has effective capabilities: $(grep CapEff <<<"$STATUS")"
grep -Eq '^NoNewPrivs:\s+1' <<<"$STATUS" || fail "NoNewPrivs is not set"
grep -Eq '^Seccomp:\s+2' <<<"$STATUS" || fail "no seccomp filter"
log "agent pid $PID1 (in container): uid $UID_ (DynamicUser), CapEff 0, NoNewPrivs 1, seccomp filter; LimitNOFILE $(show LimitNOFILE)"

phase "4 e2e: echo server"
ip netns exec "$P-target" "$BIN_DIR/surge" echo --listen "$TARGET_IP:8000" --ttft-ms 5 --itl-ms 1 >"$WORK/echo.log" 2>&1 &
ECHO_PID=$!
for _ in $(seq 1 100); do grep -q "listening" "$WORK/echo.log" && break; sleep 0.05; done
grep -q "surge echo listening on http://$TARGET_IP:8000" "$WORK/echo.log" || { cat "$WORK/echo.log"; fail "surge echo did not start"; }

COORD_TLS=(--tls-ca "$PKI/ca.pem" --tls-cert "$PKI/coordinator.pem" --tls-key "$PKI/coordinator.key")
surge_run() {   # surge_run NAME [extra flags...]: a benchmark through the agent, from the coordinator namespace
  local name=$1; shift
  timeout 120 ip netns exec "$P-coord" "$BIN_DIR/surge" run --agents "$AGENT_IP:$PORT" "${COORD_TLS[@]}" \
    --base-url "http://$TARGET_IP:8000" --model m --num-prompts 300 --random-input-len 32 --random-output-len 16 \
    --save-result --result-dir "$WORK/results" --result-filename "$name.json" "$@" >"$WORK/$name.out" 2>&1
}
RUNS_SEEN=0
check_result() {   # check_result NAME: exit 0, 300 completed, through the container's agent
  local f=$WORK/results/$1.json
  [ -f "$f" ] || { cat "$WORK/$1.out"; fail "$1: no result file"; }
  grep -Eq '"completed": *300,' "$f" || { cat "$WORK/$1.out"; fail "$1: not 300 completed requests"; }
  grep -Eq '"failed": *0,' "$f" || fail "$1: failed requests"
  grep -Eq "\"address\": *\"$AGENT_IP:$PORT\"" "$f" || fail "$1: the result does not list agent $AGENT_IP:$PORT"
  grep -Eq "\"hostname\": *\"$MACHINE\"" "$f" || fail "$1: the agent's hostname is not the container's ($MACHINE)"
  RUNS_SEEN=$((RUNS_SEEN + 1))
  [ "$(C journalctl --no-pager -u surge-agent -o cat | grep -c 'run finished completed=300 failed=0')" = "$RUNS_SEEN" ] ||
    fail "$1: the container's journal does not show this run finishing"
  log "$1: 300/300 completed through $AGENT_IP:$PORT (hostname $MACHINE); $(grep -E 'Request throughput' "$WORK/$1.out" | tr -s ' ')"
}

phase "4 e2e: surge run --agents (mTLS)"
set +e; surge_run over-capacity --max-concurrency 100; rc=$?; set -e
[ "$rc" = 1 ] || { cat "$WORK/over-capacity.out"; fail "a run above max-in-flight 64 (from agent.env) exited $rc, want 1"; }
grep -q "max-in-flight 64" "$WORK/over-capacity.out" || { cat "$WORK/over-capacity.out"; fail "the refusal does not name max-in-flight 64"; }
log "refused as expected: $(grep -m1 "max-in-flight 64" "$WORK/over-capacity.out")  (EnvironmentFile applied)"
surge_run run1 --max-concurrency 32 || { cat "$WORK/run1.out"; fail "surge run through the agent failed"; }
check_result run1

phase "4 e2e: SIGKILL -> Restart=on-failure"
NR0=$(show NRestarts)
C systemctl kill -s KILL surge-agent
t=$(date +%s.%N) ok=0
for _ in $(seq 1 300); do   # <= 30 s
  if [ "$(show ActiveState)" = active ] && [ "$(show NRestarts)" -gt "$NR0" ] && [ "$(show MainPID)" != "$PID1" ] &&
     ip netns exec "$P-coord" timeout 1 bash -c "exec 3<>/dev/tcp/$AGENT_IP/$PORT" 2>/dev/null; then ok=1; break; fi
  sleep 0.1
done
[ "$ok" = 1 ] || fail "surge-agent did not come back within 30 s after SIGKILL ($(show ActiveState), NRestarts $(show NRestarts))"
PID2=$(show MainPID)
RESTARTED_AT=$(date +%s.%N)
log "back after $(elapsed "$t")s (RestartSec=1): pid $PID1 -> $PID2, NRestarts $NR0 -> $(show NRestarts), port $PORT open"
surge_run run2 --max-concurrency 32 || { cat "$WORK/run2.out"; fail "surge run after the restart failed"; }
check_result run2

phase "4 e2e: watchdog (WatchdogSec=10)"
WD=$(show WatchdogUSec)
case $WD in ""|0|infinity) fail "WatchdogUSec is '$WD'" ;; esac
NR1=$(show NRestarts)
left=$(awk -v a="$RESTARTED_AT" -v b="$(date +%s.%N)" 'BEGIN { s = 11 - (b - a); print (s > 0 ? s : 0) }')
log "waiting ${left}s so the agent has run longer than WatchdogSec=$WD"
sleep "$left" & wait $!   # interruptible: the INT/TERM trap runs at once
[ "$(show ActiveState)/$(show MainPID)/$(show NRestarts)" = "active/$PID2/$NR1" ] ||
  fail "the agent did not survive past WatchdogSec: $(show ActiveState), pid $(show MainPID), NRestarts $(show NRestarts)"
if C journalctl --no-pager -u surge-agent | grep -qi "watchdog timeout"; then fail "systemd reported a watchdog timeout"; fi
log "still pid $PID2 after >11 s, no watchdog timeout (WATCHDOG=1 pings arrive)"

phase "4 e2e: systemctl stop (clean)"
t=$(date +%s.%N)
timeout 60 nsenter -t "$LEADER" -a systemctl stop surge-agent || fail "systemctl stop failed"
log "systemctl stop returned after $(elapsed "$t")s"
A=$(show ActiveState) R=$(show Result) S=$(show ExecMainStatus) CODE=$(show ExecMainCode)
log "after stop: ActiveState=$A Result=$R ExecMainCode=$CODE ExecMainStatus=$S"
[ "$A" = inactive ] || fail "surge-agent is '$A' after stop, want inactive"
[ "$R" = success ] || fail "stop Result=$R, want success"
[ "$S" = 0 ] || fail "the agent exited with status $S on SIGTERM, want 0"
if C systemctl -q is-failed surge-agent; then fail "surge-agent is failed after stop"; fi
C journalctl --no-pager -u surge-agent -o cat | grep -q "signal received: stopping load" ||
  fail "the journal lacks the agent's SIGTERM message"

phase "4 e2e: enable --now, then install.sh --uninstall"
timeout 60 nsenter -t "$LEADER" -a systemctl enable --now surge-agent || fail "systemctl enable --now surge-agent failed"
[ "$(show ActiveState)" = active ] || fail "surge-agent is not active after enable --now"
C /bin/bash /opt/surge/deploy/install.sh --uninstall | tee "$WORK/c-uninstall.out"
grep -q "stopped .*surge-agent.service" "$WORK/c-uninstall.out" || fail "--uninstall did not stop the running service"
grep -q "disabled .*surge-agent.service" "$WORK/c-uninstall.out" || fail "--uninstall did not disable the service"
grep -q "kept .*/etc/surge/agent.toml" "$WORK/c-uninstall.out" || fail "--uninstall did not name the kept configuration"
C test ! -e /etc/systemd/system/multi-user.target.wants/surge-agent.service || fail "enablement symlink left after --uninstall"
C test ! -e /usr/local/bin/surge-agent || fail "binary left after --uninstall"
C test ! -e /etc/surge/tls || fail "/etc/surge/tls left after --uninstall"
C test -f /etc/surge/agent.toml || fail "--uninstall removed the configuration"
[ "$(C systemctl show -p LoadState --value surge-agent)" = not-found ] || fail "surge-agent.service still loaded after --uninstall"

end_phase
log "all deploy tests passed (exposure $EXPOSURE)"
