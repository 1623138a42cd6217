#!/usr/bin/env bash
# One device call of an optimisation iteration (issue 5): parity first (the
# loss test through every kernel version, the learner test), then dqnd's fp32
# step times, then per-kernel times at batch ${PROF_B:-256} (ncu). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
bin=.devcarry/bin
echo "commit $(cat .devcarry/COMMIT 2>/dev/null)"; nvidia-smi --query-gpu=name --format=csv,noheader
for t in ${TESTS:-test-gpu-loss test-gpu-learner}; do
  timeout 300 $bin/$t > "$out/$t.log" 2>&1; echo "$t rc=$?"; grep -E "Checks|fail|FAIL|Error|error" "$out/$t.log" | head -8
done
grep -E "layer-GEMM|row tiles" "$out/test-gpu-loss.log" | head -12
BENCH_PROFILE_MODE=${BMODE:-0} $bin/bench-gpu-step ${BATCHES:-64,256,1024,4096} ${STEPS:-200} 2>&1 | tee "$out/bench.log"
[ "${PROF:-1}" = 1 ] && COUNT=${COUNT:-30} bash scripts/gpu-profile.sh ${PROF_B:-256} 0 2>&1 | tee "$out/prof.log"
exit 0
