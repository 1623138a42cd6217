#!/usr/bin/env bash
# Run on the GPU machine: the layer-GEMM split-K plan's two knobs swept
# (DQN_CUDA_GEMM_OCC blocks per SM aimed at, DQN_CUDA_GEMM_MINCH k chunks per
# part at least), step times at batches ${BATCHES:-64,256,1024}; with a
# bench-gpu-step-base in .devcarry/bin (an older build), its times first.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
b=.devcarry/bin/bench-gpu-step
[ -x $b-base ] && { echo "base"; BENCH_PROFILE_MODE=0 $b-base ${BATCHES:-64,256,1024} 200 2>&1 | grep "B="; }
for oc in ${OCCS:-2 3 4}; do for mc in ${MINCHS:-2 1}; do
  echo "occ=$oc minch=$mc"
  DQN_CUDA_GEMM_OCC=$oc DQN_CUDA_GEMM_MINCH=$mc BENCH_PROFILE_MODE=0 timeout 60 $b ${BATCHES:-64,256,1024} 200 2>&1 | grep "B="
done; done
