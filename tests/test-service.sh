#!/usr/bin/env bash
# The system service's socket as local users meet it (README "Running it as a
# service"): a dqnd on /run/dqnd/dqnd.sock with --socket-mode 0660. A user
# with no per-user daemon reaches it through dqnctl's default URL: outside the
# socket's group they are told "permission denied", inside it they are served.
# Needs root (to run dqnctl as another user) and a free /run/dqnd/dqnd.sock;
# exits 77 (skipped) otherwise.
set -uo pipefail
dqnd=$1; dqnctl=$2
[ "$(id -u)" -eq 0 ] || { echo "not root: skipped"; exit 77; }
command -v setpriv >/dev/null || { echo "no setpriv: skipped"; exit 77; }
[ -e /run/dqnd/dqnd.sock ] && { echo "/run/dqnd/dqnd.sock is in use: skipped"; exit 77; }
as_nobody() { setpriv --reuid 65534 --regid 65534 "$@"; }
made_dir=0; [ -d /run/dqnd ] || { mkdir -p /run/dqnd && chmod 0755 /run/dqnd && made_dir=1; }
tmp=$(mktemp -d); pid=
# nobody runs a copy of dqnctl from a directory it may enter (the build tree
# may sit in root's home, closed to others)
chmod 0755 "$tmp"; install -m 0755 "$dqnctl" "$tmp/dqnctl"; dqnctl=$tmp/dqnctl
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -f /run/dqnd/dqnd.sock; [ $made_dir = 1 ] && rmdir /run/dqnd
  rm -rf "$tmp"
}
trap cleanup EXIT
"$dqnd" --listen ipc:///run/dqnd/dqnd.sock --socket-mode 0660 --state-dir "$tmp/state" --backend cpu \
  --log-file "$tmp/dqnd.log" &
pid=$!
for _ in $(seq 100); do [ -S /run/dqnd/dqnd.sock ] && break; sleep 0.05; done
[ -S /run/dqnd/dqnd.sock ] || { echo "FAIL: dqnd did not listen"; cat "$tmp/dqnd.log"; exit 1; }
fail=0
check() { # what expected-status needle command...
  local what=$1 want=$2 needle=$3; shift 3
  local out rc; out=$("$@" 2>&1); rc=$?
  if [ $rc -ne "$want" ] || ! grep -q -- "$needle" <<<"$out"; then
    echo "FAIL: $what: exit $rc (want $want), output: $out"; fail=1
  else echo "ok: $what"; fi
}
# nobody's per-user socket does not exist: the default URL falls back to the
# system socket, which is root:root 0660 — so "permission denied", naming it
check "outside the group" 3 "connect ipc:///run/dqnd/dqnd.sock: permission denied" \
  as_nobody --clear-groups env -u XDG_RUNTIME_DIR -u DQND_URL -u RUNTIME_DIRECTORY "$dqnctl" --timeout 2000 health
# in the socket's group (root's here; dqnd's under systemd) the same user is served
check "inside the group" 0 "serving" \
  as_nobody --groups 0 env -u XDG_RUNTIME_DIR -u DQND_URL -u RUNTIME_DIRECTORY "$dqnctl" --timeout 2000 health
mode=$(stat -c %a /run/dqnd/dqnd.sock)
[ "$mode" = 660 ] && echo "ok: socket mode 0660" || { echo "FAIL: socket mode $mode"; fail=1; }
[ $fail -eq 0 ] && echo "3 passed, 0 failed" || echo "service checks failed"
exit $fail
