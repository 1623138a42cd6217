#!/usr/bin/env bash
# The kernel-version harness (llm.c's dev/cuda in spirit), on the GPU machine
# (after scripts/gpu-prepare.sh here; carry .devcarry/lib and
# .devcarry/bin.tar.xz). The library now holds the two defaults only (fp32
# and TF32 layer-GEMM phases: DEVICE_NOTES.md item 49); the older versions
# of README.md's table are selectable in a build of the commit item 49
# names, whose run-versions.sh times them all. This one times what the
# library runs, and its split-K occupancy settings.
# Usage: kernels/dev/run-versions.sh [batches] [steps]
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/bin ] || { [ -f .devcarry/bin.tar.xz ] && tar -C .devcarry -xJf .devcarry/bin.tar.xz; }
bench=.devcarry/bin/bench-gpu-step; [ -x "$bench" ] || bench=build/tests/bench/bench-gpu-step
batches=${1:-64,256,1024,4096}; steps=${2:-200}
echo "== layer-GEMM phases, FFMA, + 64x128 tiles at large batches (the fp32 default)"
BENCH_PROFILE_MODE=0 "$bench" "$batches" "$steps" | grep B=
echo "== the same, cuda_gemm_occupancy=1 (fewer split-K parts: many trainers per GPU)"
BENCH_GEMM_OCC=1 BENCH_PROFILE_MODE=0 "$bench" "$batches" "$steps" | grep B=
echo "== layer-GEMM phases, TF32 tensor cores (tensor_cores=1)"
BENCH_PROFILE_MODE=2 "$bench" "$batches" "$steps" | grep B=
