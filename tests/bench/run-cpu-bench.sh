#!/usr/bin/env bash
# CPU step benchmark: dqnd's CPU learner and the PyTorch peer
# (tests/bench/peers/anchor_torch_bdq.py, the team's peer, eager, Debian's python3-torch) in the
# same run on the same machine, one thread each. Prints both and the ratio.
# usage: tests/bench/run-cpu-bench.sh [build-dir] [steps]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}; steps=${2:-100}
peer=tests/bench/peers/anchor_torch_bdq.py
out=$(mktemp -d)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') x$(nproc), commit $(git rev-parse --short HEAD)"
OPENBLAS_NUM_THREADS=1 "$build/tests/bench/bench-cpu-step" --batches 64,256 --steps "$steps" --json "$out/dqnd.json"
OPENBLAS_NUM_THREADS=1 "$build/tests/bench/bench-cpu-step" --batches 64,256 --steps "$steps" --per --json "$out/dqnd-per.json"
if [ -f "$peer" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  OMP_NUM_THREADS=1 /usr/bin/python3 "$peer" --device cpu --modes eager --replay 100000 --batches 64,256 \
    --steps "$steps" --json "$out/torch.json"
  /usr/bin/python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
ours = {r["batch"]: r for r in json.load(open(d + "/dqnd.json"))}
per = {r["batch"]: r for r in json.load(open(d + "/dqnd-per.json"))}
peer = {r["batch"]: r for r in json.load(open(d + "/torch.json"))}
print("| batch | dqnd CPU uniform (us/step) | dqnd CPU PER (us/step) | PyTorch CPU eager (us/step) | speed-up (uniform vs eager) |")
print("|---|---|---|---|---|")
for b in sorted(ours):
    t = peer.get(b, {}).get("us_per_step", float("nan"))
    print(f"| {b} | {ours[b]['us_per_step']:.0f} | {per[b]['us_per_step']:.0f} | {t:.0f} | {t / ours[b]['us_per_step']:.2f}x |")
PY
else
  echo "PyTorch peer not available (needs $peer and python3-torch): dqnd figures only"
fi
rm -rf "$out"
