#!/usr/bin/env bash
# Run on the GPU machine: instruction mix and per-issue warp stall reasons of
# one launch of the kernels matching $1 (regex) at batch $2, the ${SKIP}th match.
set -uo pipefail
cd "$(dirname "$0")/../.."
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
m="gpu__time_duration.sum,smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed_op_shared_ld.sum,sm__cycles_active.avg,smsp__warps_active.avg.per_cycle_active"
m="$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
DQN_CUDA_NO_GRAPH=1 BENCH_PROFILE_MODE=0 "$ncu" --clock-control none --cache-control none -k "regex:$1" \
  --launch-skip ${SKIP:-24} --launch-count ${COUNT:-1} --metrics "$m" .devcarry/bin/bench-gpu-step "$2" 3 2>&1 |
  grep -E "^  [a-zA-Z_]|duration|inst_exec|ffma|cycles_active|warps_active|stalled" |
  awk '{ if ($NF+0 > 0.05 || $0 !~ /stalled/) print }' | sed 's/smsp__average_warps_issue_stalled_//'
