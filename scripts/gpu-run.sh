#!/usr/bin/env bash
# Run on the GPU machine (see scripts/gpu-prepare.sh): the gpu suite, each
# test's log under $OUT (or ./gpu-logs), a summary line per test, and with
# --peer dqnd's GPU step benchmark followed by the PyTorch peer's step times on
# the same GPU in the same call (fp32; TF32 too with PEER_TF32=1; PEER_MODES
# picks its fp32 modes, PEER_TORCH=0 leaves it out; PEER_JAX=1 adds JAX).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
# as meson test sets them (the golden files: this copy's, not the build machine's path)
export DQND_GOLDEN_DIR=$PWD/tests/golden OPENBLAS_NUM_THREADS=1
# always from this call's archive: a warm machine keeps the last call's bin/
[ -f .devcarry/lib.tar.xz ] && tar -C .devcarry -xJf .devcarry/lib.tar.xz  # gpu-prepare.sh's libraries, compressed
[ -f .devcarry/bin.tar.xz ] && rm -rf .devcarry/bin && tar -C .devcarry -xJf .devcarry/bin.tar.xz
bin=build/tests; [ -d .devcarry/bin ] && bin=.devcarry/bin  # stripped copies from gpu-prepare.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
pass=0; fail=0; skip=0
[ "${SKIP_SUITE:-0}" = 1 ] && echo "gpu suite skipped (SKIP_SUITE=1)"
for t in $bin/test-gpu-*; do
  [ "${SKIP_SUITE:-0}" = 1 ] && break
  [ -x "$t" ] || continue
  name=$(basename "$t")
  "$t" > "$out/$name.log" 2>&1; rc=$?
  case $rc in 0) pass=$((pass+1)); r=ok;; 77) skip=$((skip+1)); r=skipped;; *) fail=$((fail+1)); r="FAILED ($rc)";; esac
  echo "$name: $r"; [ "$r" = ok ] || tail -5 "$out/$name.log"
done
echo "gpu suite: $pass passed, $fail failed, $skip skipped"
bench=$bin/bench-gpu-step; [ -x "$bench" ] || bench=build/tests/bench/bench-gpu-step
if [ "${1:-}" = --peer ] && [ -x "$bench" ]; then
  echo "commit: $(cat .devcarry/COMMIT 2>/dev/null || echo unknown)" | tee "$out/bench-gpu.log"
  "$bench" 64,256,1024,4096 300 2>&1 | tee -a "$out/bench-gpu.log"
  # a previous build's bench (OLD_BENCH=path), in the same call: the regression check
  if [ -n "${OLD_BENCH:-}" ] && [ -x "$OLD_BENCH" ]; then
    echo "previous build ($OLD_BENCH):" | tee "$out/bench-old.log"
    "$OLD_BENCH" 64,256,1024,4096 300 2>&1 | tee -a "$out/bench-old.log"
  fi
fi
if [ "${1:-}" = --peer ] && [ "${PEER_TORCH:-1}" = 1 ] && [ -f .devcarry/anchor_torch_bdq.py ]; then
  steps=${PEER_STEPS:-200}
  PYTHONUNBUFFERED=1 python3 .devcarry/anchor_torch_bdq.py --steps "$steps" --modes "${PEER_MODES:-eager,eager_fused,graph,compile_graph}" --json "$out/peer_fp32.json" 2>&1 | tee "$out/peer_fp32.log" | grep -E '^B=|FAILED|cuda'
  if [ "${PEER_TF32:-0}" = 1 ]; then
    PYTHONUNBUFFERED=1 python3 .devcarry/anchor_torch_bdq.py --steps "$steps" --tf32 --modes graph,compile_graph --json "$out/peer_tf32.json" 2>&1 | tee "$out/peer_tf32.log" | grep -E '^B=|FAILED'
  fi
fi
# the JAX peer (jit + lax.scan of PEER_UNROLL steps per call), fp32 and with PEER_TF32=1 TF32
if [ "${1:-}" = --peer ] && [ "${PEER_JAX:-0}" = 1 ] && [ -f .devcarry/anchor_jax_bdq.py ]; then
  u=${PEER_UNROLL:-50}; steps=${PEER_STEPS:-200}
  PYTHONUNBUFFERED=1 python3 .devcarry/anchor_jax_bdq.py --steps "$steps" --unroll "$u" --json "$out/jax_fp32.json" 2>&1 | tee "$out/jax_fp32.log" | grep -E '^B=|^jax|Error'
  if [ "${PEER_TF32:-0}" = 1 ]; then
    PYTHONUNBUFFERED=1 python3 .devcarry/anchor_jax_bdq.py --steps "$steps" --unroll "$u" --tf32 --json "$out/jax_tf32.json" 2>&1 | tee "$out/jax_tf32.log" | grep -E '^B=|^jax|Error'
  fi
fi
if [ "${1:-}" = --peer ] && [ -f "$out/bench-gpu.log" ] && { [ -f "$out/peer_fp32.json" ] || [ -f "$out/jax_fp32.json" ]; }; then
  python3 scripts/gpu-summary.py "$out" | tee "$out/summary.md"
fi
# issue 28: populations of 1..64 members (bench-gpu-pop) in fp32 and TF32,
# and the JAX peer's vmapped population at the same sizes, in the same call
if [ "${1:-}" = --pop ] && [ -x "$bin/bench-gpu-pop" ]; then
  sizes=${POP_SIZES:-1,2,4,8,16,32,64}
  echo "commit: $(cat .devcarry/COMMIT 2>/dev/null || echo unknown)" | tee "$out/pop.log"
  for p in fp32 tf32; do
    "$bin/bench-gpu-pop" "$sizes" "$([ $p = tf32 ] && echo 1 || echo 0)" "$out/pop_$p.json" 2>&1 | tee -a "$out/pop.log"
  done
  # the JAX runs at every size have not fit in one call's 600 s: POP_JAX_FP32 and
  # POP_JAX_TF32 give their sizes (empty: none), POP_JAX_TF32_S a time limit in seconds
  if [ "${PEER_JAX:-1}" = 1 ] && [ -f .devcarry/anchor_jax_bdq.py ]; then
    u=${PEER_UNROLL:-20}; steps=${PEER_STEPS:-100}
    for p in fp32 tf32; do
      ps=${POP_JAX_FP32-$sizes} lim=100000
      if [ $p = tf32 ]; then ps=${POP_JAX_TF32-$sizes}; lim=${POP_JAX_TF32_S:-100000}; fi
      [ -n "$ps" ] || continue
      PYTHONUNBUFFERED=1 timeout "$lim" python3 .devcarry/anchor_jax_bdq.py --batches "" --population "$ps" --steps "$steps" \
        --unroll "$u" $([ $p = tf32 ] && echo --tf32) --json "$out/jax_pop_$p.json" 2>&1 | tee -a "$out/pop.log" |
        grep -E '^B=|^jax|Error'
    done
  fi
fi
# issue 30: the Decision Transformer's pre-training step, dqnd's (bench-gpu-dt,
# fp32 and TF32) and the PyTorch peer's (tests/bench/peers/dt_torch.py) at the
# reference sizes, fp32 and TF32, in the same call; DT_PEER_MODES: the
# peer's modes (eager, graph and compile_graph by default); DT_POPS: the
# population sizes of dqnd's runs (1: one trainer; e.g. 1,8,32 adds
# populations of 8 and 32 members in shared launches, µs per member-step)
if [ "${1:-}" = --dt ] && [ -f .devcarry/dt_torch.py ]; then
  echo "commit: $(cat .devcarry/COMMIT 2>/dev/null || echo unknown)" | tee "$out/dt.log"
  for tc in 0 1; do
    [ -x "$bin/bench-gpu-dt" ] && "$bin/bench-gpu-dt" "${DT_BATCHES:-64,256}" $tc "$out/dt_dqnd_$tc.json" \
      "${DT_POPS:-1}" 2>&1 | tee -a "$out/dt.log"
  done
  for p in fp32 tf32; do
    PYTHONUNBUFFERED=1 python3 .devcarry/dt_torch.py --batches "${DT_BATCHES:-64,256}" --steps "${PEER_STEPS:-100}" \
      --modes "${DT_PEER_MODES:-eager,graph,compile_graph}" \
      $([ $p = tf32 ] && echo --tf32) --json "$out/dt_torch_$p.json" 2>&1 | tee -a "$out/dt.log" | grep -E '^B=|^[0-9]'
  done
fi
# issue 29 item 5: the step with PER and uniform replay at capacities 10^4,
# 10^6, 10^7 (the sum tree's depth), and Submit's throughput filling and full
if [ "${1:-}" = --per ] && [ -x "$bin/bench-gpu-per" ]; then
  echo "commit: $(cat .devcarry/COMMIT 2>/dev/null || echo unknown)" | tee "$out/per.log"
  "$bin/bench-gpu-per" "${PER_BATCHES:-64,256}" "${PER_CAPS:-10000,1000000,10000000}" 300 "$out/per.json" 2>&1 | tee -a "$out/per.log"
fi
# issue 15's ensemble and attention step beside the peer with the same flags:
# scripts/gpu-ens.sh
if [ "${1:-}" = --demo ] && [ -x "$bin/dqnd" ]; then
  # issue 4: the daemon trains the demo environment on the GPU (auto backend)
  # to the same result as on the CPU; and the in-process demo on cuda and cpu
  "$bin/dqn-demo" --backend auto 2>&1 | tail -3 | tee "$out/demo-cuda.log"
  sock=$PWD/gpu-demo.sock; rm -f "$sock"
  "$bin/dqnd" --listen "ipc://$sock" --state-dir "$PWD/gpu-demo-state" > "$out/dqnd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do "$bin/dqnctl" --url "ipc://$sock" --timeout 1000 health >/dev/null 2>&1 && break; sleep 0.1; done
  "$bin/dqnctl" --url "ipc://$sock" info | tee "$out/dqnd-info.log" | grep -iE "backend|device|cuda" | head -3
  "$bin/dqnctl" --url "ipc://$sock" demo 2>&1 | tail -3 | tee "$out/demo-daemon.log"
  kill -TERM $pid; wait $pid; echo "dqnd exit: $?"
fi
if [ "${1:-}" = --search ] && [ -x "$bin/dqnd" ]; then
  # issue 31 item 3: the every-feature search (optuna_search.py --env bitflip
  # --dt) through one daemon on this GPU; needs python3 with optuna and
  # protobuf here, and .devcarry/py.tar.xz (gpu-prepare.sh) carried
  [ -f .devcarry/py.tar.xz ] && rm -rf .devcarry/py && tar -C .devcarry -xJf .devcarry/py.tar.xz
  py=${PYTHON:-python3}
  pp=$PWD/.devcarry/py
  if ! PYTHONPATH=$pp $py -c "import optuna, dqnd" 2>/dev/null; then
    # this python3 lacks optuna or protobuf: Debian's pure-Python copies of
    # what it lacks (only those: a copy would shadow what it has)
    for d in .devcarry/py/deps/*; do
      m=$(basename "$d"); [ "$m" = google ] && m=google.protobuf
      $py -c "import $m" 2>/dev/null && rm -rf "$d"
    done
    [ -d .devcarry/py/deps/google ] && export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python
    ls .devcarry/py/deps; pp=$pp:$PWD/.devcarry/py/deps
  fi
  # the curves' PNG needs matplotlib; without it, plot from search.db later
  plot=(); PYTHONPATH=$pp $py -c "import matplotlib" 2>/dev/null && plot=(--plot "$out/search.png")
  $py --version | tee "$out/search-python.log"
  if ! PYTHONPATH=$pp $py -c "import optuna, dqnd" 2>"$out/search-import.log"; then
    echo "search skipped: $(tail -1 "$out/search-import.log")"
  else
    tmp=$(mktemp -d); sock=$tmp/d.sock
    "$bin/dqnd" --listen "ipc://$sock" --state-dir "$tmp/state" --backend "${SEARCH_BACKEND:-cuda}" \
      --checkpoint-interval 0 > "$out/search-dqnd.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do "$bin/dqnctl" --url "ipc://$sock" --timeout 1000 health >/dev/null 2>&1 && break; sleep 0.1; done
    "$bin/dqnctl" --url "ipc://$sock" info | grep -iE "backend|device" | head -2 | tee "$out/search.log"
    t0=$(date +%s)
    PYTHONPATH=$pp PYTHONUNBUFFERED=1 $py client/python/examples/optuna_search.py \
      --daemons "ipc://$sock" --storage "sqlite:///$out/search.db" --env bitflip --dt --bits "${SEARCH_BITS:-8}" \
      --trials "${SEARCH_TRIALS:-20}" --per-daemon "${SEARCH_PER_DAEMON:-4}" --rounds "${SEARCH_ROUNDS:-40}" \
      --envs 16 --train-steps 64 --eval-every 10 --eval-episodes 32 --seed 1 "${plot[@]}" ${SEARCH_EXTRA:-} \
      --timeout 120 2>&1 | tee -a "$out/search.log" | grep -vE "round [0-9]+/"
    echo "search wall time: $(( $(date +%s) - t0 )) s on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" | tee -a "$out/search.log"
    kill -TERM $pid; wait $pid; echo "dqnd exit: $?" | tee -a "$out/search.log"
    rm -rf "$tmp"
  fi
fi
[ $fail -eq 0 ]
