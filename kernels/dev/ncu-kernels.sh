# kernels/dev: on the GPU machine, after scripts/gpu-prepare.sh (and its
# A/B builds, carried as .devcarry/x.tar.xz): Nsight Compute's detailed look
# (scripts/ncu-detail.sh's metrics: throughputs, pipes, every stall reason)
# at the launches of chosen kernels in chosen bench binaries.
# NCU_SPECS="binary|kernel-regex|skip|count|args ..." with binary a path
# under .devcarry (bin/bench-gpu-dt, x/<variant>/bench-gpu-dt), the regex
# matched against the demangled name (template arguments included), the
# bench's arguments comma-free words separated by '+'. Each spec's lines go
# to $OUT/ncu-kernels.log and stdout. A regex with a template argument
# (dt_gemm_tma_kernel<3) matched no launch in session 54 where the base
# name alone did (dt_mlp_kernel): match the base name and pick the launch
# by its skip (DEVICE_NOTES.md item 236).
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
[ -d .devcarry/x ] || { [ -f .devcarry/x.tar.xz ] && tar -C .devcarry -xJf .devcarry/x.tar.xz; }
OUT=${OUT:-ncu-logs}; mkdir -p "$OUT"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
. scripts/ncu-detail.sh
for spec in ${NCU_SPECS:-}; do
  IFS='|' read -r bin kre sk cn args <<< "$spec"
  echo "== ncu $bin ${args//+/ }: kernels $kre (skip $sk, $cn)" | tee -a "$OUT/ncu-kernels.log"
  $ncu --clock-control none --cache-control none --kernel-name-base demangled -k "regex:$kre" \
    --launch-skip "$sk" --launch-count "$cn" --metrics "$ncu_detail_metrics" ".devcarry/$bin" ${args//+/ } 2>&1 |
    ncu_detail_filter | tee -a "$OUT/ncu-kernels.log"
done
