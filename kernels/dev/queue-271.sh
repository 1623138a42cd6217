#!/usr/bin/env bash
# kernels/dev: DEVICE_NOTES.md items 270-271's queued calls, on the GPU
# machine after (here)
#   AB_PATCHES="kernels/dev/patches/dt-w1-dx-split.patch
#     kernels/dev/patches/dt-w1-dx-split.patch+kernels/dev/patches/dt-w2-fwd-split.patch
#     kernels/dev/patches/dt-3xtf32.patch
#     kernels/dev/patches/dt-3xtf32.patch+kernels/dev/patches/dt-3xtf32-trunc.patch"
#     AB_BENCHES=bench-gpu-dt
#     AB_TESTS=test-gpu-dt bash scripts/gpu-prepare.sh
# carrying .devcarry/{lib,bin,x}.tar.xz and .devcarry/COMMIT. PART 1:
# test-gpu-dt of the library (from bin/) and of both 3xTF32 probes (logs
# whole under $OUT), then the library and the probes alternating twice at
# 64 and 256, lone and 8 members, TF32 (the probes' 3xTF32) and fp32, and
# the probes' timelines at 64. PART 2: the two split forms' test-gpu-dt,
# the library and them alternating twice at 64, lone and 8 members, TF32
# and fp32, and their timelines at 64 in both.
# Each part fits one call (~4-5 minutes).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
tar -C .devcarry -xJf .devcarry/lib.tar.xz
rm -rf .devcarry/bin .devcarry/x
tar -C .devcarry -xJf .devcarry/bin.tar.xz
tar -C .devcarry -xJf .devcarry/x.tar.xz
echo "commit $(cat .devcarry/COMMIT 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
export DQND_GOLDEN_DIR=$PWD/tests/golden OPENBLAS_NUM_THREADS=1
trace() { # build dir, batch, tc, name
  CUDA_INJECTION64_PATH=$PWD/.devcarry/lib/libtrace_inject.so TRACE_OUT=/tmp/t.csv "$1/bench-gpu-dt" "$2" "$3" "" 1 \
    > /dev/null 2>&1
  python3 kernels/dev/trace-step.py /tmp/t.csv > "$out/trace-$4.txt" 2>&1
}
tests() { # each test-gpu-dt given, its log whole under $OUT and its figures here
  for t in "$@"; do
    v=$(basename "$(dirname "$t")")
    timeout 300 "$t" > "$out/test-gpu-dt-$v.log" 2>&1
    echo "== $v test-gpu-dt: rc $?"
    grep -E "^accuracy|^PROBE|Checks|parity reference sizes|tensor_cores DT|DT parameters after|differs|rror" \
      "$out/test-gpu-dt-$v.log" | head -${TEST_LINES:-20}
  done
}
case "${PART:-1}" in
  1)
    tests .devcarry/bin/test-gpu-dt .devcarry/x/dt-3xtf32/test-gpu-dt .devcarry/x/dt-3xtf32-trunc/test-gpu-dt
    AB_ROUNDS=2 AB_VARIANTS="new dt-3xtf32 dt-3xtf32-trunc" AB_PREC="tf32 fp32" AB_DT=64,256 AB_DT_POPS=1,8 \
      AB_BATCHES= AB_POPS= bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee "$out/ab-3xtf32.txt"
    for v in dt-3xtf32 dt-3xtf32-trunc; do trace .devcarry/x/$v 64 1 "$v-64"; done
    ;;
  2)
    tests .devcarry/x/dt-w1-dx-split/test-gpu-dt .devcarry/x/dt-w2-fwd-split/test-gpu-dt
    AB_ROUNDS=2 AB_VARIANTS="new dt-w1-dx-split dt-w2-fwd-split" AB_PREC="tf32 fp32" AB_DT=64 AB_DT_POPS=1,8 \
      AB_BATCHES= AB_POPS= bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee "$out/ab-split.txt"
    for v in dt-w1-dx-split dt-w2-fwd-split; do
      for tc in 1 0; do trace .devcarry/x/$v 64 $tc "$v-tc$tc"; done
    done
    ;;
  3) # item 273: where the 3xTF32 step's error comes from (each tensor, each GEMM tile), and the
    # promoted sums' error and cost. Built (here) with
    #   AB_PATCHES="kernels/dev/patches/dt-3xtf32.patch
    #     kernels/dev/patches/dt-3xtf32.patch+kernels/dev/patches/dt-3xtf32-promote.patch
    #     kernels/dev/patches/dt-3xtf32.patch+kernels/dev/patches/dt-3xtf32-promote.patch+kernels/dev/patches/dt-3xtf32-trunc.patch"
    #   AB_BENCHES=bench-gpu-dt AB_TESTS=test-gpu-dt bash scripts/gpu-prepare.sh
    # (x/dt-3xtf32-trunc is then promote and trunc together). ~4 minutes.
    TEST_LINES=150 tests .devcarry/x/dt-3xtf32-promote/test-gpu-dt .devcarry/x/dt-3xtf32-trunc/test-gpu-dt \
      .devcarry/x/dt-3xtf32/test-gpu-dt
    for r in 1 2; do
      AB_ROUNDS=1 AB_VARIANTS="dt-3xtf32 dt-3xtf32-promote dt-3xtf32-trunc" AB_PREC="tf32" AB_DT=64,256 AB_DT_POPS=1,8 \
        AB_BATCHES= AB_POPS= bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee -a "$out/ab-promote.txt"
      AB_ROUNDS=1 AB_VARIANTS="new" AB_PREC="fp32 tf32" AB_DT=64,256 AB_DT_POPS=1,8 \
        AB_BATCHES= AB_POPS= bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee -a "$out/ab-promote.txt"
    done
    ;;
  # PART=4 (item 275: the slab probes alone) was folded into PART=5 before it ran
  5) # item 276: the landing of tensor_cores 2 (fp32 on the tensor cores), kernels/dev/patches/
    # x3-land.patch, as variant x/x3-land, beside item 275's probes. Built (here) with
    #   P=kernels/dev/patches AB_PATCHES="$P/dt-3xtf32.patch+$P/dt-3xtf32-slab.patch
    #     $P/dt-3xtf32.patch+$P/dt-3xtf32-slab.patch+$P/dt-3xtf32-promote.patch $P/x3-land.patch"
    #   AB_BENCHES=bench-gpu-dt AB_TESTS="test-gpu-dt test-gpu-dt-attn test-gpu-learner" bash scripts/gpu-prepare.sh
    # carry [lib, bin, COMMIT, x, dt_torch.py]. ~7 minutes.
    TEST_LINES=8 tests .devcarry/x/dt-3xtf32-slab/test-gpu-dt .devcarry/x/dt-3xtf32-promote/test-gpu-dt
    for t in test-gpu-dt test-gpu-dt-attn test-gpu-learner; do
      timeout 300 .devcarry/x/x3-land/$t > "$out/land-$t.log" 2>&1
      echo "== x3-land $t: rc $?"
      grep -E "^accuracy|Checks|3xTF32|tensor_cores|:F:|:E:" "$out/land-$t.log" | head -40
    done
    # time: the library and the landing in TF32 and fp32 (the same bits: the same losses), the
    # landing in fp32x3, the probe (its tf32 slot is 3xTF32); then the peer in the same call
    AB_ROUNDS=1 AB_VARIANTS="new x3-land" AB_PREC="tf32 fp32" AB_DT=64,256 AB_DT_POPS=1,8 AB_BATCHES= AB_POPS= \
      bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee "$out/ab-land.txt"
    AB_ROUNDS=1 AB_VARIANTS="x3-land" AB_PREC="fp32x3" AB_DT=64,256 AB_DT_POPS=1,8 AB_BATCHES= AB_POPS= \
      bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee -a "$out/ab-land.txt"
    AB_ROUNDS=1 AB_VARIANTS="dt-3xtf32-promote" AB_PREC="tf32" AB_DT=64,256 AB_DT_POPS=1 AB_BATCHES= AB_POPS= \
      bash kernels/dev/ab-pop.sh 2>&1 | grep -a "round\|B=\|rror\|FAIL" | tee -a "$out/ab-land.txt"
    for p in fp32 tf32; do
      PYTHONUNBUFFERED=1 python3 .devcarry/dt_torch.py --batches 64,256 --steps 100 --modes compile_graph \
        $([ $p = tf32 ] && echo --tf32) --json "$out/dt_torch_$p.json" 2>&1 | grep -E '^B=|^[0-9]' | tee -a "$out/ab-land.txt"
    done
    ;;
esac
exit 0
