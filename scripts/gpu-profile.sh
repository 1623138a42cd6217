#!/usr/bin/env bash
# Run on the GPU machine: per-kernel times of a few training steps of the
# `ref` config (un-captured launches so each kernel is timed alone), via
# Nsight Compute with the clocks left alone and caches warm as in a replay (CACHE=all flushes). Usage: gpu-profile.sh [batch] [noisy+per 0|1]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-256}; MODE=${2:-0}
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "ncu not found"; exit 1; }
[ -d .devcarry/bin ] || { [ -f .devcarry/bin.tar.xz ] && tar -C .devcarry -xJf .devcarry/bin.tar.xz; }
bench=build/tests/bench/bench-gpu-step; [ -x .devcarry/bin/bench-gpu-step ] && bench=.devcarry/bin/bench-gpu-step
BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=$MODE "$ncu" --clock-control none --cache-control ${CACHE:-none} --metrics gpu__time_duration.sum \
  --launch-skip ${SKIP:-400} --launch-count ${COUNT:-40} "$bench" "$B" 3 2>&1 |
  awk '/^  [a-zA-Z_].*\(/ {k=$1} /gpu__time_duration.sum/ {printf "%-40s %10s %s\n", substr(k,1,40), $NF, $(NF-1)}'
