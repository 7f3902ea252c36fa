#!/usr/bin/env bash
# Install (or remove) surge-agent as a systemd service.
#
#   deploy/install.sh [--root DIR] [BINARY]       install or update
#   deploy/install.sh [--root DIR] --uninstall    remove everything but the configuration
#
# BINARY defaults to ./target/release/surge-agent (or the one next to this script's
# repository). Installs:
#   /usr/local/bin/surge-agent                   root:root 0755   (replaced atomically)
#   /etc/systemd/system/surge-agent.service      root:root 0644
#   /etc/surge/                                  root:root 0755
#   /etc/surge/agent.toml                        root:root 0644   only if absent; never overwritten
#   /etc/surge/tls/                              root:root 0750   put ca.pem, agent.pem, agent.key here (0600)
# Run it again at any time: it changes only what differs and says so ("nothing changed"
# when everything is already in place). It does not enable or start the service.
# --uninstall stops and disables the service, removes the binary, the unit and
# /etc/surge/tls (certificates and key included), and keeps /etc/surge/agent.toml,
# /etc/surge/agent.env and any drop-ins from `systemctl edit`, naming them.
# --root DIR installs under DIR instead of / (images, tests); systemctl is then never called.
# `systemctl daemon-reload` runs only when systemd is running on this host (and --root is /).
# Exit status: 0 done, 1 failed, 2 bad arguments.
set -euo pipefail

SELF=$(basename "$0")
HERE=$(cd "$(dirname "$0")" && pwd)
UNIT_SRC=$HERE/systemd/surge-agent.service
CONF_SRC=$HERE/agent.example.toml

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$SELF: $*" >&2; exit "${2:-1}"; }

ROOT=/ UNINSTALL=0 BIN=
while [ $# -gt 0 ]; do
  case $1 in
    --root) [ $# -ge 2 ] || die "--root needs a directory" 2; ROOT=$2; shift 2 ;;
    --root=*) ROOT=${1#--root=}; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" 2 ;;
    *) [ -z "$BIN" ] || die "more than one binary given: $BIN and $1" 2; BIN=$1; shift ;;
  esac
done
[ "$UNINSTALL" = 0 ] || [ -z "$BIN" ] || die "--uninstall takes no binary" 2
[ -d "$ROOT" ] || die "--root $ROOT: not a directory" 2
ROOT=$(cd "$ROOT" && pwd)
R=${ROOT%/}                                    # prefix for every path ("" for /)

BIN_DST=/usr/local/bin/surge-agent
UNIT_DST=/etc/systemd/system/surge-agent.service
DROPIN_DIR=/etc/systemd/system/surge-agent.service.d
ETC=/etc/surge
CONF_DST=$ETC/agent.toml
ENV_FILE=$ETC/agent.env
TLS=$ETC/tls

if [ "$(id -u)" = 0 ]; then OWNER=root:root; else OWNER=$(id -un):$(id -gn); fi
CHANGES=0
did() { CHANGES=$((CHANGES + 1)); printf '  %-10s %s\n' "$1" "$2"; }
same() { printf '  %-10s %s\n' "$1" "$2"; }

# systemd is "live" when it runs this host (sd_booted) and we install into that host.
systemd_live() { [ -z "$R" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

# ensure_mode PATH MODE: fix the mode and (as root) the owner of an existing path.
ensure_mode() {
  local p=$1 mode=$2 have_mode have_owner
  have_mode=$(stat -c %a "$R$p"); have_owner=$(stat -c %U:%G "$R$p")
  if [ "$have_mode" != "$mode" ]; then chmod "$mode" "$R$p"; did fixed "$p: mode $have_mode -> $mode"; fi
  if [ "$have_owner" != "$OWNER" ]; then
    if [ "$(id -u)" = 0 ]; then chown "$OWNER" "$R$p"; did fixed "$p: owner $have_owner -> $OWNER"; fi
  fi
}

# ensure_dir PATH MODE: create it (and its parents) or fix mode and owner.
ensure_dir() {
  local p=$1 mode=$2
  if [ -d "$R$p" ]; then ensure_mode "$p" "$mode"; return; fi
  [ ! -e "$R$p" ] || die "$R$p exists and is not a directory"
  mkdir -p "$(dirname "$R$p")"
  mkdir -m "$mode" "$R$p"
  [ "$(id -u)" != 0 ] || chown "$OWNER" "$R$p"
  did created "$p/ ($mode $OWNER)"
}

# ensure_file SRC DST MODE: install SRC at DST unless identical; atomic (a running
# binary is replaced, never written into). Sets WROTE=1 when it wrote DST, else 0.
# (It always returns 0: `set -e` does not apply inside a function used in a condition.)
WROTE=0
ensure_file() {
  local src=$1 dst=$2 mode=$3 verb=installed tmp
  WROTE=0
  if [ -f "$R$dst" ]; then
    if cmp -s "$src" "$R$dst"; then ensure_mode "$dst" "$mode"; same unchanged "$dst"; return 0; fi
    verb=updated
  fi
  mkdir -p "$(dirname "$R$dst")"
  tmp=$(mktemp "$R$dst.XXXXXX")
  cat "$src" >"$tmp"
  chmod "$mode" "$tmp"
  [ "$(id -u)" != 0 ] || chown "$OWNER" "$tmp"
  mv -f "$tmp" "$R$dst"
  WROTE=1
  did "$verb" "$dst ($mode $OWNER)"
}

install_all() {
  if [ -z "$BIN" ]; then
    for c in ./target/release/surge-agent "$HERE/../target/release/surge-agent"; do
      if [ -f "$c" ]; then BIN=$c; break; fi
    done
    [ -n "$BIN" ] || die "no binary given and no ./target/release/surge-agent: build it with \`cargo build --release --bins\` or pass its path" 2
  fi
  if [ ! -f "$BIN" ] || [ ! -x "$BIN" ]; then die "$BIN: not an executable file" 2; fi
  [ -f "$UNIT_SRC" ] || die "$UNIT_SRC is missing (run install.sh from the surge repository's deploy/)"
  [ -f "$CONF_SRC" ] || die "$CONF_SRC is missing (run install.sh from the surge repository's deploy/)"

  echo "$SELF: installing surge-agent into $ROOT (binary: $BIN)"
  local bin_changed=0 unit_changed=0
  ensure_file "$BIN" "$BIN_DST" 755; bin_changed=$WROTE
  ensure_file "$UNIT_SRC" "$UNIT_DST" 644; unit_changed=$WROTE
  ensure_dir "$ETC" 755
  if [ -e "$R$CONF_DST" ]; then
    same kept "$CONF_DST (exists; never overwritten; the example is $CONF_SRC)"
  else
    ensure_file "$CONF_SRC" "$CONF_DST" 644
  fi
  ensure_dir "$TLS" 750

  if [ "$unit_changed" = 1 ]; then
    if systemd_live; then systemctl daemon-reload; did reloaded "systemd (systemctl daemon-reload)"
    else same skipped "systemctl daemon-reload (systemd is not running here or --root is not /)"; fi
  fi
  if [ $((bin_changed + unit_changed)) -gt 0 ] && systemd_live && systemctl -q is-active surge-agent.service; then
    echo "  note: surge-agent is running the old version: systemctl restart surge-agent"
  fi
  local missing=()
  for f in ca.pem agent.pem agent.key; do [ -f "$R$TLS/$f" ] || missing+=("$TLS/$f"); done
  if [ "$CHANGES" = 0 ]; then
    echo "$SELF: nothing changed: everything was already installed"
  else
    echo "$SELF: $CHANGES change(s)"
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "next: copy the certificates (surge certs init / surge certs issue --name NAME --san THIS_HOST_IP):"
    echo "        install -m 0600 ca.pem $TLS/ca.pem; install -m 0600 NAME.pem $TLS/agent.pem; install -m 0600 NAME.key $TLS/agent.key"
    echo "      set allowed-targets in $CONF_DST, then: systemctl enable --now surge-agent"
  fi
}

uninstall_all() {
  echo "$SELF: removing surge-agent from $ROOT"
  if systemd_live; then
    if systemctl -q is-active surge-agent.service 2>/dev/null; then systemctl stop surge-agent.service; did stopped surge-agent.service; fi
    if systemctl -q is-enabled surge-agent.service 2>/dev/null; then systemctl disable -q surge-agent.service; did disabled surge-agent.service; fi
  fi
  # Enablement symlinks (what `systemctl disable` removes; also under --root).
  local l
  while IFS= read -r l; do rm -f "$l"; did removed "${l#"$R"}"; done \
    < <(find "$R/etc/systemd/system" -mindepth 2 -maxdepth 2 -path '*.wants/surge-agent.service' 2>/dev/null)
  local p
  for p in "$BIN_DST" "$UNIT_DST"; do
    if [ -e "$R$p" ] || [ -L "$R$p" ]; then rm -f "$R$p"; did removed "$p"; fi
  done
  if [ -d "$R$TLS" ]; then
    while IFS= read -r l; do did removed "${l#"$R"}"; done < <(find "$R$TLS" -mindepth 1 -depth)
    rm -rf -- "$R${TLS:?}"; did removed "$TLS/"
  fi
  if [ "$CHANGES" -gt 0 ] && systemd_live; then systemctl daemon-reload; did reloaded "systemd (systemctl daemon-reload)"; fi
  local kept=()
  for p in "$CONF_DST" "$ENV_FILE" "$DROPIN_DIR"; do [ ! -e "$R$p" ] || kept+=("$p"); done
  if [ -d "$R$ETC" ] && [ ${#kept[@]} -eq 0 ] && [ -z "$(ls -A "$R$ETC")" ]; then rmdir "$R$ETC"; did removed "$ETC/"; fi
  if [ "$CHANGES" = 0 ]; then echo "$SELF: nothing to remove: surge-agent was not installed"; fi
  for p in "${kept[@]}"; do echo "  kept       $p (configuration: delete it by hand if you no longer want it)"; done
}

if [ "$UNINSTALL" = 1 ]; then uninstall_all; else install_all; fi
