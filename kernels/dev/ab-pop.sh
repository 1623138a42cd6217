# kernels/dev: on the GPU machine, after scripts/gpu-prepare.sh and with a
# base build's bench-gpu-step and bench-gpu-pop in .devcarry/x/base (carried
# as .devcarry/x.tar.xz): the lone step (mode 0, AB_BATCHES) and populations
# (AB_POPS) in AB_PREC (tf32 fp32), each build alternately AB_ROUNDS (2)
# times, so a change is measured against its base in one call. AB_VARIANTS
# names the builds ("base new" by default): "new" is .devcarry/bin, any
# other name .devcarry/x/<name> (e.g. several forms of one kernel, each
# built here and copied there, as gpu-prepare.sh's AB_PATCHES does); a
# build without a bench is skipped. AB_MODES ("0") the bench-gpu-step modes
# (3 ensemble, 4 ensemble + attention); AB_POPS= (empty) skips populations.
# AB_DT (e.g. 64,256) adds the DT pre-training step (bench-gpu-dt) at those
# batches, AB_DT_POPS (1 by default, e.g. 1,8) its population sizes.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -f .devcarry/lib.tar.xz ] && [ ! -d .devcarry/lib ] && tar -C .devcarry -xJf .devcarry/lib.tar.xz
[ -f .devcarry/bin.tar.xz ] && [ ! -d .devcarry/bin ] && tar -C .devcarry -xJf .devcarry/bin.tar.xz
[ -d .devcarry/x ] || tar -C .devcarry -xJf .devcarry/x.tar.xz
# AB_RUN_TESTS=1: first each variant's own tests (the test-gpu-* that
# gpu-prepare.sh's AB_TESTS put beside its benches), their last lines
if [ "${AB_RUN_TESTS:-0}" = 1 ]; then
  export DQND_GOLDEN_DIR=$PWD/tests/golden OPENBLAS_NUM_THREADS=1
  for v in ${AB_VARIANTS:-base new}; do
    for t in .devcarry/x/$v/test-gpu-*; do
      [ -x "$t" ] || continue
      timeout ${AB_TEST_TIMEOUT:-300} "$t" > "/tmp/ab-$v-$(basename "$t").log" 2>&1; rc=$?
      echo "== $v $(basename "$t"): rc $rc"
      grep -E "Checks|bit for bit the|differs|Assertion|FAIL|rror" "/tmp/ab-$v-$(basename "$t").log" | tail -${AB_TEST_LINES:-12}
    done
  done
fi
for r in $(seq ${AB_ROUNDS:-2}); do
  for prec in ${AB_PREC:-tf32 fp32}; do
    case $prec in tf32) tc=1 ;; fp32x3) tc=2 ;; *) tc=0 ;; esac # fp32x3: tensor_cores 2
    for v in ${AB_VARIANTS:-base new}; do
      d=.devcarry/x/$v; [ $v = new ] && d=.devcarry/bin
      for m in ${AB_MODES:-0}; do
        if [ -n "${AB_BATCHES-64,256,1024,4096}" ] && [ -x $d/bench-gpu-step ]; then
          echo "== round $r $v $prec step mode $m"
          BENCH_TF32=$tc BENCH_PROFILE_MODE=$m $d/bench-gpu-step ${AB_BATCHES-64,256,1024,4096} 300 2>&1 | grep -E "us/step|µs|batch" | head -6
        fi
      done
      if [ -n "${AB_DT-}" ] && [ -x $d/bench-gpu-dt ]; then
        echo "== round $r $v $prec dt"
        $d/bench-gpu-dt "$AB_DT" $tc "" "${AB_DT_POPS:-1}" 2>&1 | grep -E "^B=|rror|fail"
      fi
      if [ -n "${AB_POPS-1,8,32}" ] && [ -x $d/bench-gpu-pop ]; then
        echo "== round $r $v $prec pop"
        # errors too: a build that fails at some size shows why instead of nothing
        $d/bench-gpu-pop ${AB_POPS-1,8,32} $tc 2>&1 | grep -E "members|rror|fail" | sed 's/ us per population step,//'
      fi
    done
  done
done
