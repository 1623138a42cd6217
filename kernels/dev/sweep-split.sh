#!/usr/bin/env bash
# Run on the GPU machine: the layer-GEMM split-K plan's occupancy target
# swept (the config's cuda_gemm_occupancy: blocks per SM aimed at, 1..4,
# through bench-gpu-step's BENCH_GEMM_OCC), step times at batches
# ${BATCHES:-64,256,1024}; with a bench-gpu-step-base in .devcarry/bin (an
# older build), its times first. (The minimum k chunks per part, once
# DQN_CUDA_GEMM_MINCH, is the constant SPLIT_MIN_CHUNKS in kernels/cuda/gemm.cu.)
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
b=.devcarry/bin/bench-gpu-step
[ -x $b-base ] && { echo "base"; BENCH_PROFILE_MODE=0 $b-base ${BATCHES:-64,256,1024} 200 2>&1 | grep "B="; }
for oc in ${OCCS:-1 2 3 4}; do
  echo "occupancy=$oc"
  BENCH_GEMM_OCC=$oc BENCH_PROFILE_MODE=0 timeout 60 $b ${BATCHES:-64,256,1024} 200 2>&1 | grep "B="
done
