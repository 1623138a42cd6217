#!/usr/bin/env bash
# A/B of compile-time variants in one call, on the GPU machine: the library's
# bench (.devcarry/bin, from scripts/gpu-prepare.sh) and each variant build's
# bench in .devcarry/vars.tar.xz (var*/bench-gpu-step: a kernel file edited,
# the bench rebuilt and stripped), the same mode and batches, then each one's
# per-kernel times of the kernels matching KRE under Nsight Compute, and with
# DETAIL=1 the library kernels' throughput and stall reasons.
#   MODE=4 TF32=1 BATCHES=64,256 KRE=wgmma NCU_BATCH=256 kernels/dev/run-variants.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
[ -f .devcarry/bin.tar.xz ] && rm -rf .devcarry/bin && tar -C .devcarry -xJf .devcarry/bin.tar.xz
[ -f .devcarry/vars.tar.xz ] && rm -rf .devcarry/var[0-9]* && tar -C .devcarry -xJf .devcarry/vars.tar.xz
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
m=${MODE:-4} tf=${TF32:-1} B=${BATCHES:-64,256} kre=${KRE:-.} nb=${NCU_BATCH:-256}
for b in .devcarry/bin/bench-gpu-step .devcarry/var*/bench-gpu-step; do
  [ -x "$b" ] || continue
  echo "== $b" | tee -a "$out/variants.log"
  BENCH_TF32=$tf BENCH_PROFILE_MODE=$m "$b" "$B" 300 2>&1 | grep -E '^B=|rror' | tee -a "$out/variants.log"
  BENCH_TF32=$tf BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=$m "$ncu" --clock-control none --cache-control none -k "regex:$kre" \
    --launch-skip ${SKIP:-20} --launch-count ${COUNT:-4} --metrics gpu__time_duration.sum "$b" "$nb" 3 2>&1 |
    awk '/^  [a-zA-Z_].*\(/ {k=$0; sub(/^ +(void )?/, "", k)} /gpu__time_duration.sum/ {printf "  %-60s %10s %s\n", substr(k,1,60), $NF, $(NF-1)}' |
    tee -a "$out/variants.log"
done
if [ "${DETAIL:-0}" = 1 ]; then
  mt="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active"
  mt="$mt,lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"
  mt="$mt,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
  BENCH_TF32=$tf BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=$m "$ncu" --clock-control none --cache-control none -k "regex:$kre" \
    --launch-skip ${SKIP:-20} --launch-count 2 --metrics "$mt" .devcarry/bin/bench-gpu-step "$nb" 3 2>&1 |
    grep -E "^  [a-zA-Z_]|duration|grid_size|registers|occupancy|throughput|warps_active|issue_active|pipe_lsu|stalled" |
    awk '{ if ($NF+0 > 0.3 || $0 !~ /stalled/) print }' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
    cut -c1-150 | tee -a "$out/variants.log"
fi
