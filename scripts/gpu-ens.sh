#!/usr/bin/env bash
# Run on the GPU machine (after scripts/gpu-prepare.sh here): issue 15's call
# in one script — the gpu suite, the ensemble (+ attention) step at both
# batches in fp32 and TF32 beside the plain step, per-kernel times under
# Nsight Compute, and the PyTorch peer with the same flags, each part chosen
# by a variable so one call does what it needs:
#   SUITE=1             the gpu suite (scripts/gpu-run.sh's loop)
#   BATCHES=64,256      the bench's batches
#   MODES="0 3 4"       bench-gpu-step modes (3 ensemble, 4 ensemble + attention)
#   TF32=1              the same modes with tensor_cores=1 as well
#   NCU="4:64:1 4:256:1" per-kernel times, mode:batch:tf32 each
#   PEER=64             the peer at this batch (one: its compile takes minutes),
#   PEER_PREC="tf32 fp32" its precisions (--tf32 or not); PEER_ATTN=0 drops attention;
#   TRACE="4:64:1"     a kernel timeline of the captured step, mode:batch:tf32 each
#                       (kernels/dev/trace_inject.c; trace-step.py's summary and the CSV)
#   PEER_K=5 PEER_DIV=0.1 PEER_MASK=0.5 its heads, diversity and mask (mode 7,
#   issue 31's every-feature step: MODES=7 PEER_K=3 PEER_DIV=0 PEER_MASK=1)
# Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
[ -f .devcarry/lib.tar.xz ] && tar -C .devcarry -xJf .devcarry/lib.tar.xz  # gpu-prepare.sh's libraries, compressed
[ -f .devcarry/bin.tar.xz ] && rm -rf .devcarry/bin && tar -C .devcarry -xJf .devcarry/bin.tar.xz
bin=.devcarry/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
echo "commit: $(cat .devcarry/COMMIT 2>/dev/null || echo unknown)" | tee "$out/bench.log"
fail=0
if [ "${SUITE:-1}" = 1 ]; then
  for t in $bin/test-gpu-*; do
    name=$(basename "$t")
    s0=$(date +%s)
    "$t" > "$out/$name.log" 2>&1; rc=$?
    echo "$name: rc $rc ($(( $(date +%s) - s0 )) s)"; [ $rc = 0 ] || { fail=1; tail -8 "$out/$name.log"; }
  done
fi
B=${BATCHES:-64,256}
for m in ${MODES:-0 3 4}; do
  BENCH_PROFILE_MODE=$m $bin/bench-gpu-step "$B" 300 2>&1 | grep -E '^B=|rror' | tee -a "$out/bench.log"
  [ "${TF32:-1}" = 1 ] && [ "$m" != 0 ] &&
    BENCH_TF32=1 BENCH_PROFILE_MODE=$m $bin/bench-gpu-step "$B" 300 2>&1 | grep -E '^B=|rror' | tee -a "$out/bench.log"
done
# ALT=1: a variant build (gpu-prepare's .devcarry/alt.tar.xz: its gpu tests and
# bench, e.g. a patch from kernels/dev/patches applied), its suite with ALT_SUITE=1
if [ "${ALT:-0}" = 1 ] && [ -f .devcarry/alt.tar.xz ]; then
  rm -rf .devcarry/alt && tar -C .devcarry -xJf .devcarry/alt.tar.xz
  ALT_BENCH=.devcarry/alt/bench-gpu-step
  if [ "${ALT_SUITE:-1}" = 1 ]; then
    for t in .devcarry/alt/test-gpu-*; do
      name=alt-$(basename "$t")
      "$t" > "$out/$name.log" 2>&1; rc=$?
      echo "$name: rc $rc"; [ $rc = 0 ] || { fail=1; tail -8 "$out/$name.log"; }
    done
  fi
fi
# ALT_BENCH=path: a variant build's bench (an A/B of a compile-time choice), the same modes, same call
if [ -n "${ALT_BENCH:-}" ] && [ -x "${ALT_BENCH}" ]; then
  echo "variant build ($ALT_BENCH):" | tee -a "$out/bench.log"
  for m in ${MODES:-0 3 4}; do
    [ "$m" != 0 ] && BENCH_TF32=1 BENCH_PROFILE_MODE=$m "$ALT_BENCH" "$B" 300 2>&1 | grep -E '^B=|rror' | tee -a "$out/bench.log"
  done
fi
# the plain TF32 step at every batch (PLAIN_TF32=1): the large TF32 tiles' regression check
[ "${PLAIN_TF32:-0}" = 1 ] && BENCH_PROFILE_MODE=2 $bin/bench-gpu-step 64,256,1024,4096 300 2>&1 | grep -E '^B=|rror' | tee -a "$out/bench.log"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for spec in ${NCU:-}; do
  IFS=: read -r m b tf <<< "$spec"
  echo "== ncu mode $m batch $b tf32 $tf (one step's kernels, un-captured)" | tee -a "$out/ncu.log"
  BENCH_TF32=$tf BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=$m "$ncu" --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --launch-skip ${SKIP:-600} --launch-count ${COUNT:-60} $bin/bench-gpu-step "$b" 3 2>&1 |
    awk '/^  [a-zA-Z_].*\(/ {k=$0; sub(/^ +(void )?/, "", k)} /gpu__time_duration.sum/ {printf "%-56s %10s %s\n", substr(k,1,56), $NF, $(NF-1)}' |
    tee -a "$out/ncu.log"
done
# the step's timeline from CUPTI's kernel records, graph replays included
for spec in ${TRACE:-}; do
  IFS=: read -r m b tf <<< "$spec"
  f=$out/trace-$m-$b-$tf.csv
  CUDA_INJECTION64_PATH=$PWD/.devcarry/lib/libtrace_inject.so TRACE_OUT=$f BENCH_TF32=$tf BENCH_PROFILE_MODE=$m \
    $bin/bench-gpu-step "$b" 100 2>&1 | grep -E '^B=|rror' | sed 's/^/traced: /' | tee -a "$out/bench.log"
  python3 kernels/dev/trace-step.py "$f" > "$out/trace-$m-$b-$tf.txt" 2>&1; head -60 "$out/trace-$m-$b-$tf.txt"
  xz -1f "$f"
done
# NCU_DETAIL="mode:batch:tf32:kernel-regex:skip:count": throughput, occupancy
# and the top stall reasons of the matching launches (after skip of them)
. scripts/ncu-detail.sh
for spec in ${NCU_DETAIL:-}; do
  IFS=: read -r m b tf kre sk cn <<< "$spec"
  echo "== ncu detail mode $m batch $b tf32 $tf kernels $kre" | tee -a "$out/ncu-detail.log"
  BENCH_TF32=$tf BENCH_CUDA_GRAPH=0 BENCH_PROFILE_MODE=$m "$ncu" --clock-control none --cache-control none -k "regex:$kre" \
    --launch-skip "$sk" --launch-count "$cn" --metrics "$ncu_detail_metrics" $bin/bench-gpu-step "$b" 3 2>&1 |
    ncu_detail_filter >> "$out/ncu-detail.log"
done
if [ -n "${PEER:-}" ] && [ -f .devcarry/anchor_torch_bdq.py ]; then
  for prec in ${PEER_PREC:-fp32}; do
    fl="--ensemble-k ${PEER_K:-5} --diversity ${PEER_DIV:-0.1} --mask-p ${PEER_MASK:-0.5} --prior-scale 1"
    [ "${PEER_ATTN:-1}" = 1 ] && fl="$fl --attn-tokens 8 --attn-heads 2"
    [ "$prec" = tf32 ] && fl="$fl --tf32"
    echo "peer ($prec): $fl at batch $PEER" | tee -a "$out/bench.log"
    s0=$(date +%s)
    PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-400} python3 .devcarry/anchor_torch_bdq.py --steps "${PEER_STEPS:-100}" \
      --batches "$PEER" --modes ${PEER_MODES:-graph,compile_graph} $fl --json "$out/peer_$prec.json" 2>&1 |
      tee "$out/peer_$prec.log" | grep -E '^B=|rror' | tee -a "$out/bench.log"
    echo "peer ($prec) took $(( $(date +%s) - s0 )) s" | tee -a "$out/bench.log"
  done
fi
exit $fail
