#!/usr/bin/env bash
# Checks the generated systemd units with `systemd-analyze verify` (exit 77 =
# skipped where systemd-analyze is not installed). The units' ExecStart points
# at the install prefix; for the check it is pointed at the built binary, and
# the template is checked as instance dqnd@0.
set -euo pipefail
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: skipped"; exit 77; }
units=$1; dqnd=$2
# the units must start on a fresh install, where /etc/dqnd/dqnd.conf does not exist
for u in dqnd.service dqnd@.service; do
  if grep -E '^ExecStart=.* --config(=| )' "$units/$u"; then echo "$u: ExecStart needs a config file (use --config-optional)"; exit 1; fi
  grep -q -- '--socket-mode 0660' "$units/$u" || { echo "$u: the socket is not open to group dqnd"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for u in dqnd.service dqnd@.service; do
  name=$u; [ "$u" = dqnd@.service ] && name=dqnd@0.service
  sed "s|^ExecStart=[^ ]*dqnd |ExecStart=$dqnd |" "$units/$u" > "$tmp/$name"
done
out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$tmp/dqnd.service" "$tmp/dqnd@0.service" 2>&1) || true
echo "$out"
# anything it prints about our units is a finding
if echo "$out" | grep -E 'dqnd(@0)?\.service' >/dev/null; then echo "verify: findings above"; exit 1; fi
echo "units verified"
