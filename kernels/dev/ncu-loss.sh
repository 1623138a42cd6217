# kernels/dev: the loss kernel of a population's step under Nsight Compute on
# the GPU machine, after scripts/gpu-prepare.sh (DEVICE_NOTES item 120): one
# launch of fused_loss_kernel in bench-gpu-pop at each members:tc of
# NCU_LOSS ("8:1 32:1 1:1"), with scripts/ncu-detail.sh's metrics plus
# instructions, warps and what limits occupancy.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/ncu-detail.sh
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
tar -C .devcarry -xJf .devcarry/bin.tar.xz 2>/dev/null
m="$ncu_detail_metrics,smsp__inst_executed.sum,smsp__warps_launched.sum,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_blocks,launch__occupancy_limit_warps,sm__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active"
for spec in ${NCU_LOSS:-8:1 32:1 1:1}; do
  set -- ${spec/:/ }
  echo "== members $1 tc $2"
  $ncu --clock-control none --cache-control none -k "regex:fused_loss_kernel" --launch-skip 40 --launch-count 1 --metrics "$m" .devcarry/bin/bench-gpu-pop $1 $2 2>&1 | grep -E "^  [a-zA-Z_]|duration|grid_size|registers|throughput|warps_active|issue_active|pipe_lsu|cycles|stalled|inst_executed|warps_launched|occupancy" | awk '{ if ($NF+0 > 0.3 || $0 !~ /stalled/) print }' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | cut -c1-150
done
