#!/usr/bin/env bash
# The soak benchmark (issue 17): test-soak for SECONDS (default 600) — 64
# clients, half over ipc and half over tls+tcp, every command mixed — with
# its per-command p50/p99 latency, exact transition counts and the daemon's
# RSS after warm-up and at the end, as a table and as JSON
# (tests/bench/results/soak.json). The test suite runs the same for 30 s.
# usage: tests/bench/run-soak.sh [build-dir] [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}; secs=${2:-600}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') x$(nproc), commit $(git rev-parse --short HEAD), ${secs} s"
mkdir -p tests/bench/results
DQND_BIN=$build/daemon/dqnd DQNCTL_BIN=$build/client/dqnctl DQND_CERTS=$PWD/scripts/tls-certs.sh OPENBLAS_NUM_THREADS=1 CK_DEFAULT_TIMEOUT=$((secs + 300)) \
  "$build/tests/test-soak" --seconds "$secs" --json tests/bench/results/soak.json
