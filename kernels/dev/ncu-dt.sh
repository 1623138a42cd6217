# kernels/dev: the DT step under Nsight Compute on the GPU machine (DEVICE_NOTES 91):
# each kernel of one step at batch 64 and 256, TF32 and fp32, as TSV under $OUT;
# then NCU_DT_DETAIL's launches in detail.
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for tc in ${NCU_DT_TC-1 0}; do for b in ${NCU_DT_B-64 256}; do
  $ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 5000 --launch-count 420 .devcarry/bin/bench-gpu-dt $b $tc 2>&1 |
   awk '/^  [a-zA-Z_].*\(/ {k=$0; sub(/^ +(void )?/, "", k)} /gpu__time_duration.sum/ {printf "%s\t%s\t%s\n", substr(k,1,60), $NF, $(NF-1)}' > $OUT/ncu_dt_${b}_${tc}.tsv
  wc -l $OUT/ncu_dt_${b}_${tc}.tsv
done; done
# NCU_DT_DETAIL="batch:tc:kernel-regex:skip:count": throughput, occupancy and
# the top stall reasons of the matching launches (as scripts/gpu-ens.sh's NCU_DETAIL)
mt="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,sm__throughput.avg.pct_of_peak_sustained_elapsed"
mt="$mt,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
mt="$mt,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
mt="$mt,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"
mt="$mt,sm__cycles_active.avg,gpc__cycles_elapsed.max,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
for spec in ${NCU_DT_DETAIL:-}; do
  IFS=: read -r b tc kre sk cn <<< "$spec"
  echo "== ncu detail DT batch $b tc $tc kernels $kre" | tee -a "$OUT/ncu-dt-detail.log"
  $ncu --clock-control none --cache-control none -k "regex:$kre" --launch-skip "$sk" --launch-count "$cn" --metrics "$mt" \
    .devcarry/bin/bench-gpu-dt $b $tc 2>&1 |
    grep -E "^  [a-zA-Z_]|duration|grid_size|registers|throughput|warps_active|issue_active|hmma|pipe_lsu|cycles|stalled" |
    awk '{ if ($NF+0 > 0.5 || $0 !~ /stalled/) print }' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
    cut -c1-150 >> "$OUT/ncu-dt-detail.log"
done
