#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, starts dqnd on
# its embedded default (local ipc socket, local state directory, best backend)
# and runs `dqnctl demo` against it: the learning curve of the built-in
# environment. The daemon is stopped (SIGTERM: final checkpoints) at the end.
# Arguments go to `dqnctl demo` (e.g. --iterations 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/daemon/dqnd &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do ./build/client/dqnctl --timeout 1000 health >/dev/null 2>&1 && break; sleep 0.1; done
./build/client/dqnctl info
./build/client/dqnctl demo "$@"
