#!/usr/bin/env bash
# Run on the GPU machine: Nsight Compute's speed-of-light, memory and warp-stall
# sections for one launch of the kernels matching $1 (a regex) at batch $2.
set -uo pipefail
cd "$(dirname "$0")/.."
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -d .devcarry/bin ] || { [ -f .devcarry/bin.tar.xz ] && tar -C .devcarry -xJf .devcarry/bin.tar.xz; }
bench=build/tests/bench/bench-gpu-step; [ -x .devcarry/bin/bench-gpu-step ] && bench=.devcarry/bin/bench-gpu-step
BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=0 "$ncu" --clock-control none --cache-control none -k "regex:$1" --launch-skip ${SKIP:-25} --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  "$bench" "$2" 3 2>&1 | grep -vE "^==PROF==|^ +-+ *$|^\s*$" | grep -E "^\s+[A-Z].*[0-9]|Section|fused|WRN|Stall" | head -${LINES_MAX:-80}
