#!/usr/bin/env bash
# The daemon under valgrind (docs/testing.md): the integration suites whose
# checks do not time the daemon, each dqnd they start run under
# `valgrind --leak-check=full --errors-for-leak-kinds=definite
# --error-exitcode=99` (tests/harness.c, DQND_VALGRIND). An error or a
# definite leak makes that daemon exit 99, which fails the test that stops
# it; its log stays in the test's /tmp/dqnd-test-* directory.
#   scripts/valgrind-daemon.sh [build dir] [tests...]
# Defaults: build, and the suites below (cancel and soak time the daemon;
# hparams trains 10^6 steps in one submit, past any client timeout under
# valgrind; client-replies starts no daemon; the Python suites start their
# own daemons without the harness).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(daemon bad-input restart security members)
vg=$(command -v valgrind) || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
ninja -C "$build" >/dev/null
# check's own timeouts and meson's, 10x: valgrind runs the daemon ~20-50x slower
DQND_VALGRIND=$vg DQND_VALGRIND_SUPP=$PWD/tests/valgrind.supp CK_TIMEOUT_MULTIPLIER=10 meson test -C "$build" --print-errorlogs --num-processes 1 \
  --timeout-multiplier 10 "${tests[@]}"
