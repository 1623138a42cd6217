# Sourced by scripts/gpu-ens.sh and kernels/dev/ncu-dt.sh: the Nsight Compute
# metrics of a detailed look at chosen launches (time, grid, registers,
# throughputs, occupancy, issue, the tensor and load/store pipes, and every
# stall reason), and the filter that keeps their lines (stall reasons above
# 0.5 a issue) for a log.
ncu_detail_metrics="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread"
ncu_detail_metrics="$ncu_detail_metrics,sm__throughput.avg.pct_of_peak_sustained_elapsed"
ncu_detail_metrics="$ncu_detail_metrics,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
ncu_detail_metrics="$ncu_detail_metrics,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
ncu_detail_metrics="$ncu_detail_metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
ncu_detail_metrics="$ncu_detail_metrics,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"
ncu_detail_metrics="$ncu_detail_metrics,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second"
ncu_detail_metrics="$ncu_detail_metrics,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
ncu_detail_metrics="$ncu_detail_metrics,sm__cycles_active.avg,gpc__cycles_elapsed.max"
ncu_detail_metrics="$ncu_detail_metrics,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
ncu_detail_filter() {
  grep -E "^  [a-zA-Z_]|duration|grid_size|registers|throughput|warps_active|issue_active|hmma|pipe_lsu|pipe_fma|per_second|shared|cycles|stalled" |
    awk '{ if ($NF+0 > 0.5 || $0 !~ /stalled/) print }' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
    cut -c1-150
}
