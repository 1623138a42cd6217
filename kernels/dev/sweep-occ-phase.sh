# kernels/dev/sweep-occ-phase.sh — on the GPU machine: the split-K occupancy
# per layer-GEMM phase (gemm-occ-phase.patch's GEMM_OCC_PH, one phase moved
# from the config's 2 at a time), step times at several batches, baseline
# repeated; and each phase's plan (GEMM_PLAN_PRINT). Carry .devcarry/x.tar.xz
# built with AB_PATCHES=kernels/dev/patches/gemm-occ-phase.patch.
set -u
cd .devcarry && rm -rf x && tar -xJf x.tar.xz && tar -xJf lib.tar.xz && cd ..
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
b=.devcarry/x/gemm-occ-phase/bench-gpu-step
B=${BATCHES:-32,64,128,256}
for spec in ${SPECS:-4:1 3:0}; do
  IFS=: read -r m tf <<< "$spec"
  GEMM_PLAN_PRINT=1 BENCH_TF32=$tf BENCH_PROFILE_MODE=$m $b $B 5 2>&1 | grep -E '^plan|^B=' | sed "s/^/m$m-$tf /" >> $OUT/plan.log
  run() { GEMM_OCC_PH=$1 BENCH_TF32=$tf BENCH_PROFILE_MODE=$m $b $B ${STEPS:-200} 2>&1 | grep -E '^B=|rror' | sed "s/^/m$m-$tf $1 /" | tee -a $OUT/occ.log; }
  run 00000000000
  for ph in 0 1 2 3 4 5 6 7 8 9 10; do
    for o in ${OS:-1 3}; do
      s=$(printf '%011d' 0 | sed "s/./$o/$((ph + 1))")
      run $s
    done
    [ $ph = 5 ] && run 00000000000
  done
  run 00000000000
done
