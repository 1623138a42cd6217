# kernels/dev: on the GPU machine, after scripts/gpu-prepare.sh and with a
# base build's bench-gpu-step and bench-gpu-pop in .devcarry/x/base (carried
# as .devcarry/x.tar.xz): the lone step (mode 0, AB_BATCHES) and populations
# (AB_POPS) in AB_PREC (tf32 fp32), base and new alternately AB_ROUNDS (2)
# times, so a change is measured against its base in one call.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .devcarry/x/base ] || tar -C .devcarry -xJf .devcarry/x.tar.xz
for r in $(seq ${AB_ROUNDS:-2}); do
  for prec in ${AB_PREC:-tf32 fp32}; do
    tc=$([ $prec = tf32 ] && echo 1 || echo 0)
    for v in base new; do
      d=.devcarry/bin; [ $v = base ] && d=.devcarry/x/base
      if [ -n "${AB_BATCHES-64,256,1024,4096}" ]; then
        echo "== round $r $v $prec step"
        BENCH_TF32=$tc BENCH_PROFILE_MODE=0 $d/bench-gpu-step ${AB_BATCHES-64,256,1024,4096} 300 2>&1 | grep -E "us/step|µs|batch" | head -6
      fi
      echo "== round $r $v $prec pop"
      $d/bench-gpu-pop ${AB_POPS:-1,8,32} $tc | grep members | sed 's/ us per population step,//'
    done
  done
done
