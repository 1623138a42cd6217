#!/usr/bin/env bash
# The test command of the README: installs what is missing, configures (CUDA
# on when nvcc is found: the GPU suite is built and skips without a device),
# builds, and runs every suite. Exit status is meson's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
rc=0
meson test -C build --print-errorlogs --num-processes 2 "$@" || rc=$?
# one plain closing line for whoever reads the log
python3 - build/meson-logs/testlog.json <<'PY' || true
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(f"tests: {p} passed, {f} failed, {s} skipped")
PY
exit $rc
