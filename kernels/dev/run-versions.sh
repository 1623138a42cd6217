#!/usr/bin/env bash
# The kernel-version harness (llm.c's dev/cuda in spirit): every training-step
# kernel version that mattered stays selectable at run time, and this script
# times each of them with the same benchmark in one call, on the GPU machine
# (after scripts/gpu-prepare.sh here; carry .devcarry/lib and .devcarry/bin.tar.xz).
# Usage: kernels/dev/run-versions.sh [batches] [steps]
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/bin ] || { [ -f .devcarry/bin.tar.xz ] && tar -C .devcarry -xJf .devcarry/bin.tar.xz; }
bench=.devcarry/bin/bench-gpu-step; [ -x "$bench" ] || bench=build/tests/bench/bench-gpu-step
batches=${1:-64,256,1024,4096}; steps=${2:-200}
run() { # name, env...
  local name=$1; shift
  echo "== $name"
  env "$@" BENCH_PROFILE_MODE=0 "$bench" "$batches" "$steps" | grep B=
}
run "v1 generic kernels (~60 launches: GEMM per layer, split-K)" DQN_CUDA_KERNELS=v1
run "v2 row tiles, FFMA, 16 KiB x 4 weight stages" DQN_CUDA_FUSED_GEMM=0 DQN_CUDA_STAGE_FLOATS=4096
run "v2 row tiles, FFMA, 64 KiB x 2 weight stages (the previous default)" DQN_CUDA_FUSED_GEMM=0
run "v2 row tiles, 3xTF32 tensor cores (fp32 accuracy)" DQN_CUDA_FUSED_GEMM=0 DQN_CUDA_FUSED_MODE=tf32x3
run "v3 row tiles as thread-block clusters" DQN_CUDA_FUSED_GEMM=0 DQN_CUDA_FUSED_CLUSTER=1
run "v4 layer-GEMM phases, FFMA, 32x64 tiles only" DQN_CUDA_GEMM_BIG=0
run "v4 layer-GEMM phases, FFMA, + 64x128 tiles at large batches (the default)"
run "v4 layer-GEMM phases, 3xTF32 tensor cores" DQN_CUDA_GEMM_ARITH=tf32x3
echo "== v2 row tiles, TF32 tensor cores (tensor_cores=1, the previous TF32 path)"
DQN_CUDA_FUSED_GEMM=0 BENCH_PROFILE_MODE=2 "$bench" "$batches" "$steps" | grep B=
echo "== v4 layer-GEMM phases, TF32 tensor cores (tensor_cores=1)"
BENCH_PROFILE_MODE=2 "$bench" "$batches" "$steps" | grep B=
