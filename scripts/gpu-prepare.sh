#!/usr/bin/env bash
# Run here (no GPU needed): build with CUDA for sm_90 (H100/H200), then gather
# the shared libraries the GPU machine lacks into .devcarry/lib (git-ignored),
# and copy the PyTorch peer there so it travels with the tree. Then, on the GPU
# machine, with carry ["build", ".devcarry"], run:
#   export LD_LIBRARY_PATH=$PWD/.devcarry/lib:$LD_LIBRARY_PATH; bash scripts/gpu-run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export PATH=/usr/local/cuda/bin:$PATH
[ -f build/build.ninja ] || meson setup build -Dcuda=enabled -Dgpu_arch=90a
# meson does not track the headers a .cu file includes (no nvcc depfiles), so
# a changed .cuh would leave objects built against an old struct layout:
# rebuild every CUDA object whenever any CUDA header is newer than it.
cuda_fresh() {
  for o in build/kernels/libdqncuda.a.p/*.o; do
    [ -e "$o" ] || continue
    if [ -n "$(find kernels -name '*.cuh' -newer "$o" -o -name '*.h' -newer "$o" | head -1)" ]; then
      touch kernels/cuda/*.cu; break
    fi
  done
}
cuda_fresh
meson compile -C build
bins=$(find build/tests build/daemon build/client build/kernels -maxdepth 2 -type f -perm -u+x ! -name '*.so' ! -name '*.sh' | grep -v '\.p/')
bash scripts/device-carry.sh $bins
git rev-parse --short HEAD > .devcarry/COMMIT 2>/dev/null || true
# the kernel-timeline tracer (kernels/dev/trace_inject.c: a CUPTI injection
# library, CUDA_INJECTION64_PATH) and the CUPTI it links, for the GPU machine
# (where this machine's CUDA has CUPTI)
if [ -f /usr/local/cuda/include/cupti.h ] && [ -f /usr/local/cuda/lib64/libcupti.so ]; then
  cc -shared -fPIC -O2 -Wall -I/usr/local/cuda/include kernels/dev/trace_inject.c -L/usr/local/cuda/lib64 -lcupti \
    -o .devcarry/lib/libtrace_inject.so
  cp -L /usr/local/cuda/lib64/libcupti.so.* .devcarry/lib/
fi
# the libraries compressed too (49 MB as they are, 8 MB so: room in a call's
# 64 MiB for A/B builds); gpu-run.sh and gpu-ens.sh unpack .devcarry/lib.tar.xz
# into .devcarry/lib when it travels: carry [".devcarry/lib.tar.xz", ...]
tar -C .devcarry -cf - lib | xz -T2 -6 > .devcarry/lib.tar.xz
# stripped copies of the gpu suite and the GPU benchmarks: what gpu-run.sh runs
# (the debug builds together with the libraries exceed what one call carries)
rm -rf .devcarry/bin && mkdir -p .devcarry/bin  # no binary left from another build
for b in build/tests/test-gpu-* build/tests/bench/bench-gpu-* build/tests/bench/bench-bitflip build/tests/bench/bench-rpc build/client/dqn-demo build/client/dqnctl build/daemon/dqnd build/kernels/bench-grid-barrier build/kernels/bench-persist-chain build/kernels/bench-cluster-fwd build/kernels/bench-cluster-fwd-tf32 build/kernels/bench-sgemm-variants; do
  [ -f "$b" ] && [ -x "$b" ] && strip -o ".devcarry/bin/$(basename "$b")" "$b"
done
# and compressed, for calls whose carry limit the uncompressed set would pass:
# carry [".devcarry/lib.tar.xz", ".devcarry/bin.tar.xz", ".devcarry/anchor_torch_bdq.py", ".devcarry/COMMIT"]
# xz -9: a 64 MB dictionary, so the binaries (8 MB each, the same kernels in each) compress as one
tar -C .devcarry -cf - bin | xz -9 > .devcarry/bin.tar.xz
# A/B builds: AB_PATCHES="kernels/dev/patches/a.patch ..." applies each patch
# (or a.patch+b.patch: b on top of a) to this tree in turn, rebuilds AB_BENCHES (bench-gpu-step bench-gpu-pop by
# default; bench-gpu-dt for the DT) and AB_TESTS, strips them into
# .devcarry/x/<patch name>/ and reverses the patch (also when its build
# fails), then rebuilds this tree; carry .devcarry/x.tar.xz and compare on the
# GPU machine with AB_VARIANTS="new <patch name> ..." kernels/dev/ab-pop.sh
# (AB_MODES for the ensemble steps), a variant's tests run by hand from x/
if [ -n "${AB_PATCHES:-}" ]; then
  rm -rf .devcarry/x && mkdir -p .devcarry/x
  for p in $AB_PATCHES; do
    # a.patch+b.patch: b applies on top of a (a variant's increment kept as
    # its own patch); the variant is named after the last
    name=$(basename "${p##*+}" .patch)
    ps=$(echo "$p" | tr '+' ' ') rs=$(echo "$p" | tr '+' '\n' | tac | tr '\n' ' ')
    for q in $ps; do git apply "$q"; done
    trap 'for q in $rs; do git apply -R "$q"; done' EXIT
    cuda_fresh
    # the AB_TESTS this variant has (a patch may add a test the others lack)
    ninja -C build build.ninja > /dev/null
    tests=""
    for t in ${AB_TESTS-test-gpu-loss test-gpu-learner}; do
      ninja -C build -t query "tests/$t" > /dev/null 2>&1 && tests="$tests $t"
    done
    ninja -C build $(for b in ${AB_BENCHES:-bench-gpu-step bench-gpu-pop}; do echo "tests/bench/$b"; done) \
      $(for t in $tests; do echo "tests/$t"; done)
    mkdir -p ".devcarry/x/$name"
    for b in $(for b in ${AB_BENCHES:-bench-gpu-step bench-gpu-pop}; do echo "build/tests/bench/$b"; done) $tests; do
      [ -f "$b" ] || b=build/tests/$b
      strip -o ".devcarry/x/$name/$(basename "$b")" "$b"
    done
    for q in $rs; do git apply -R "$q"; done
    trap - EXIT
  done
  cuda_fresh
  meson compile -C build
  tar -C .devcarry -cf - x | xz -9 > .devcarry/x.tar.xz
  echo "A/B builds: $(ls .devcarry/x | tr '\n' ' ')"
fi
cp tests/bench/peers/anchor_torch_bdq.py tests/bench/peers/anchor_jax_bdq.py tests/bench/peers/dt_torch.py .devcarry/
# the Python package (gpu-run.sh --search): carry [..., ".devcarry/py.tar.xz"]
rm -rf .devcarry/py && mkdir -p .devcarry/py/dqnd/v1
cp build/client/python/dqnd/*.py .devcarry/py/dqnd/ && cp build/client/python/dqnd/v1/*.py .devcarry/py/dqnd/v1/
strip -o .devcarry/py/dqnd/libdqnpyenv.so build/client/python/dqnd/libdqnpyenv.so
# and Debian's pure-Python optuna with what it imports, for a GPU machine
# whose python3 lacks them (gpu-run.sh puts py/deps on PYTHONPATH only then)
mkdir -p .devcarry/py/deps
for m in optuna cmaes sqlalchemy alembic colorlog tqdm yaml mako markupsafe packaging google; do
  d=/usr/lib/python3/dist-packages/$m
  [ -d "$d" ] && cp -r "$d" .devcarry/py/deps/
done
find .devcarry/py/deps -name '__pycache__' -prune -exec rm -rf {} + ; find .devcarry/py/deps -name '*.so' -delete
tar -C .devcarry -cJf .devcarry/py.tar.xz py
echo "prepared: $(echo $bins | wc -w) binaries"
