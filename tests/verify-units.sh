#!/usr/bin/env bash
# Checks the generated systemd units with `systemd-analyze verify` (exit 77 =
# skipped where systemd-analyze is not installed). The units' ExecStart points
# at the install prefix; for the check it is pointed at the built binary, and
# the template is checked as instance dqnd@0.
set -euo pipefail
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: skipped"; exit 77; }
units=$1; dqnd=$2
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
