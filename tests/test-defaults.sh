#!/usr/bin/env bash
# Where dqnd listens and keeps its state when given no --listen/--state-dir
# (README "Where things are", docs/architecture.md): the user's runtime and
# state directories (XDG) for every user, root included; the system service's
# paths (/run/dqnd, /var/lib/dqnd) only with --system. Run as root (as CI
# runs) this is the case of issue 26: a daemon started by hand as root never
# restores the service's trainers nor adds its own to them. As another user
# the same rules are checked for that user.
#   test-defaults.sh DQND DQNCTL
set -uo pipefail
dqnd=$1; dqnctl=$2
tmp=$(mktemp -d); pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
uid=$(id -u)
# a clean environment: only what each case names
clean() { env -i PATH="$PATH" "$@"; }
conf() { sed -n "s/^$1 = //p"; }
expect() { # what got want
  if [ "$2" = "$3" ]; then echo "ok: $1 = $2"; else echo "FAIL: $1 = '$2', want '$3'"; fail=1; fi
}
mkdir -p "$tmp/home" "$tmp/run" "$tmp/xs"
chmod 0700 "$tmp/run"

out=$(clean HOME="$tmp/home" "$dqnd" --print-config) || { echo "FAIL: --print-config exit $?"; exit 1; }
expect "uid $uid, HOME only: state-dir" "$(conf state-dir <<<"$out")" "$tmp/home/.local/state/dqnd"
expect "uid $uid, HOME only: listen" "$(conf listen <<<"$out")" "ipc:///tmp/dqnd-$uid/dqnd.sock"

out=$(clean HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/run" XDG_STATE_HOME="$tmp/xs" "$dqnd" --print-config)
expect "uid $uid, XDG: state-dir" "$(conf state-dir <<<"$out")" "$tmp/xs/dqnd"
expect "uid $uid, XDG: listen" "$(conf listen <<<"$out")" "ipc://$tmp/run/dqnd.sock"

# systemd's own variables win (the unit sets them)
out=$(clean HOME="$tmp/home" RUNTIME_DIRECTORY="$tmp/run" STATE_DIRECTORY="$tmp/xs/svc" "$dqnd" --print-config)
expect "under systemd: state-dir" "$(conf state-dir <<<"$out")" "$tmp/xs/svc"
expect "under systemd: listen" "$(conf listen <<<"$out")" "ipc://$tmp/run/dqnd.sock"

out=$(clean HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/run" "$dqnd" --system --print-config)
expect "--system: state-dir" "$(conf state-dir <<<"$out")" "/var/lib/dqnd"
expect "--system: listen" "$(conf listen <<<"$out")" "ipc:///run/dqnd/dqnd.sock"
expect "--system: system" "$(conf system <<<"$out")" "1"

# and a daemon run that way: a trainer made through dqnctl's default URL
# lands in the user's state directory, nothing in the system's
had_var=0; [ -e /var/lib/dqnd ] && had_var=1
before=$(ls -A /var/lib/dqnd 2>/dev/null | sort)
env -i PATH="$PATH" HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/run" "$dqnd" --backend cpu --log-file "$tmp/dqnd.log" &
pid=$!
for _ in $(seq 100); do [ -S "$tmp/run/dqnd.sock" ] && break; sleep 0.05; done
[ -S "$tmp/run/dqnd.sock" ] || { echo "FAIL: dqnd did not listen on $tmp/run/dqnd.sock"; cat "$tmp/dqnd.log"; exit 1; }
if ! clean HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/run" "$dqnctl" --timeout 5000 create t1 \
    > "$tmp/create.out" 2>&1; then
  echo "FAIL: dqnctl create on the default URL:"; cat "$tmp/create.out"; fail=1
fi
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
expect "dqnd exit after SIGTERM" "$rc" 0
if ls "$tmp/home/.local/state/dqnd/t1/"ckpt-*.dqnd >/dev/null 2>&1; then
  echo "ok: t1's checkpoint is under $tmp/home/.local/state/dqnd"
else
  echo "FAIL: no checkpoint of t1 under the user's state directory:"; ls -R "$tmp/home/.local/state" 2>&1 | head; fail=1
fi
after=$(ls -A /var/lib/dqnd 2>/dev/null | sort)
if [ -e /var/lib/dqnd ] && [ $had_var = 0 ]; then
  echo "FAIL: /var/lib/dqnd was created"; fail=1
elif [ "$before" != "$after" ]; then
  echo "FAIL: /var/lib/dqnd changed"; fail=1
else
  echo "ok: /var/lib/dqnd untouched"
fi
exit $fail
