# kernels/dev: the DT step under Nsight Compute on the GPU machine (DEVICE_NOTES 91),
# after scripts/gpu-prepare.sh: each kernel's time over 420 launches (about two
# steps) of bench-gpu-dt at each batch of NCU_DT_B (64 256) and tensor_cores of
# NCU_DT_TC (1 0), as TSV under $OUT; then NCU_DT_DETAIL's launches in detail.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/bin ] || { [ -f .devcarry/bin.tar.xz ] && tar -C .devcarry -xJf .devcarry/bin.tar.xz; }
[ -d .devcarry/x ] || { [ -f .devcarry/x.tar.xz ] && tar -C .devcarry -xJf .devcarry/x.tar.xz; }
OUT=${OUT:-ncu-logs}; mkdir -p "$OUT"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for tc in ${NCU_DT_TC-1 0}; do for b in ${NCU_DT_B-64 256}; do
  $ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 5000 --launch-count 420 .devcarry/bin/bench-gpu-dt $b $tc 2>&1 |
   awk '/^  [a-zA-Z_].*\(/ {k=$0; sub(/^ +(void )?/, "", k)} /gpu__time_duration.sum/ {printf "%s\t%s\t%s\n", substr(k,1,60), $NF, $(NF-1)}' > $OUT/ncu_dt_${b}_${tc}.tsv
  wc -l $OUT/ncu_dt_${b}_${tc}.tsv
done; done
# NCU_DT_DETAIL="batch:tc:kernel-regex:skip:count[:binary]": throughput,
# occupancy and the top stall reasons of the matching launches (as
# scripts/gpu-ens.sh's NCU_DETAIL), in binary (a path under .devcarry:
# bin/bench-gpu-dt by default, or an A/B variant's x/<name>/bench-gpu-dt,
# so a variant's kernel and the library's are read in one call; with
# NCU_DT_TC= the per-kernel times above are skipped). The regex is matched
# against the demangled name, whose template arguments read "(int)3, ": e.g.
# tma_kernel<.int.3,..int.3> for the TMA tile's GELU instance (no space in
# a spec: the specs are split on spaces; DEVICE_NOTES.md items 236, 238).
. scripts/ncu-detail.sh
for spec in ${NCU_DT_DETAIL:-}; do
  IFS=: read -r b tc kre sk cn bin <<< "$spec"
  bin=${bin:-bin/bench-gpu-dt}
  echo "== ncu detail DT $bin batch $b tc $tc kernels $kre" | tee -a "$OUT/ncu-dt-detail.log"
  $ncu --clock-control none --cache-control none --kernel-name-base demangled -k "regex:$kre" --launch-skip "$sk" --launch-count "$cn" \
    --metrics "$ncu_detail_metrics" ".devcarry/$bin" $b $tc 2>&1 | ncu_detail_filter | tee -a "$OUT/ncu-dt-detail.log"
done
