#!/usr/bin/env bash
# Run on the GPU machine: per-SASS-instruction warp-stall samples of one
# launch of the kernels matching $1 (regex) at batch $2 (the ${SKIP}th
# match), as CSV under $OUT: where a latency-bound kernel spends its cycles.
# SASS_BENCH names another bench and its arguments in place of
# bench-gpu-step's (e.g. "bench-gpu-dt 64 1": the DT's step in TF32);
# SASS_INTERVAL the sampling interval (2^(5 + n) cycles; ncu's own choice
# by default: a few hundred samples for a 10 µs kernel); BENCH_PROFILE_MODE
# and BENCH_TF32 pick the step (bench-gpu-step modes, mode 0 by default).
set -uo pipefail
cd "$(dirname "$0")/../.."
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
out=${OUT:-gpu-logs}; mkdir -p "$out"
BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=${BENCH_PROFILE_MODE:-0} "$ncu" --clock-control none --cache-control none -k "regex:$1" \
  --launch-skip ${SKIP:-20} --launch-count 1 ${SASS_INTERVAL:+--warp-sampling-interval $SASS_INTERVAL} --section SourceCounters --section WarpStateStats \
  -f -o "$out/sass" .devcarry/bin/${SASS_BENCH:-bench-gpu-step "$2" 3} > "$out/sass-run.log" 2>&1
"$ncu" -i "$out/sass.ncu-rep" --page source --csv --print-source sass > "$out/sass.csv" 2>&1
rm -f "$out/sass.ncu-rep"
wc -l "$out/sass.csv"
