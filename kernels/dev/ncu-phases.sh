#!/usr/bin/env bash
# Run on the GPU machine: one training step's layer-GEMM launches (F1..F4,
# B1..B3, the weight-gradient groups; un-captured) at batch $1, each with its
# time, grid, registers, active cycles, FMA-pipe and shared-memory wavefront
# counts and the top stall reasons: where a phase's time goes (issue 5).
# Any other kernels: KREGEX=regex COUNT=n SKIP=m (the launches matched are
# counted from the first of the bench's 5 steps; e.g. KREGEX=fused_loss
# COUNT=1 SKIP=2 for one loss launch).
set -uo pipefail
cd "$(dirname "$0")/../.."
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
m="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,sm__cycles_active.avg,smsp__inst_executed.sum"
m="$m,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
m="$m,smsp__warps_active.avg.per_cycle_active,lts__t_bytes.sum"
m="$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=0 "$ncu" --clock-control none --cache-control none -k "regex:${KREGEX:-fused_gemm}" \
  --launch-skip ${SKIP:-33} --launch-count ${COUNT:-11} --metrics "$m" .devcarry/bin/bench-gpu-step "$1" 5 2>&1 |
  grep -E "^  [a-zA-Z_]|duration|grid_size|registers|inst_exec|fma_cycles|wavefronts|cycles_active|warps_active|lts__t_bytes|stalled" |
  awk '{ if ($NF+0 > 0.3 || $0 !~ /stalled/) print }' | sed 's/smsp__average_warps_issue_stalled_//'
