#!/usr/bin/env bash
# The test command of the README: installs what is missing, configures (CUDA
# on when nvcc is found: the GPU suite is built and skips without a device),
# builds, and runs every suite, then the fuzzers for a minute each (below).
# Exit status: meson's, else the fuzzers'.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
rc=0
meson test -C build --print-errorlogs --num-processes 2 "$@" || rc=$?
# one plain closing line for whoever reads the log; with CI set (.ci/run sets
# it) a skip outside the gpu suite fails the run: it means a package or tool
# CI should have installed is missing, and a skip must never pass as a pass
/usr/bin/python3 - build/meson-logs/testlog.json <<'PY' || rc=1
import json, os, sys
p = f = s = 0
bad = []
for line in open(sys.argv[1]):
    t = json.loads(line)
    r = t["result"]
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP":
        s += 1
        # the suite: the "suite" field where meson writes one, else the name's
        # "project:suite / test" prefix (Debian 12's meson writes no field)
        suites = t.get("suite") or [t["name"].split(" / ")[0].split(":")[-1]]
        if os.environ.get("CI") and "gpu" not in suites: bad.append(t["name"])
    else: f += 1
print(f"tests: {p} passed, {f} failed, {s} skipped")
if bad:
    print(f"CI is set: skipped outside the gpu suite, so failed: {', '.join(bad)} (see their logs for what is missing)")
    sys.exit(1)
PY
# Fuzzing (tests/fuzz): both libFuzzer harnesses for FUZZ_SECONDS (default
# 60) each, in their own clang-14 build (build-fuzz, git-ignored); a crash
# fails the run like a failed test. Needs clang-14 and libclang-rt-14-dev
# (libFuzzer's runtime); without them it is skipped, and says so.
fuzz_secs=${FUZZ_SECONDS:-60}
if [ "$fuzz_secs" = 0 ]; then
  echo "fuzz: SKIPPED (FUZZ_SECONDS=0)"
elif command -v clang-14 >/dev/null && [ -e "$(clang-14 -print-runtime-dir)/libclang_rt.fuzzer-x86_64.a" ]; then
  frc=0
  if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang-14 meson setup build-fuzz -Dcuda=disabled -Dfuzz=true -Db_sanitize=address,undefined \
      -Db_lundef=false >build-fuzz.setup.log 2>&1 || { cat build-fuzz.setup.log; frc=1; }
    rm -f build-fuzz.setup.log
  fi
  [ $frc -eq 0 ] && { bash tests/fuzz/run-fuzz.sh build-fuzz "$fuzz_secs" || frc=$?; }
  [ $frc -eq 0 ] && echo "fuzz: ok" || echo "fuzz: FAILED (inputs and logs in build-fuzz/fuzz-artifacts/)"
  [ $rc -ne 0 ] || rc=$frc
else
  echo "fuzz: SKIPPED (clang-14 and libclang-rt-14-dev are not installed; apt-get install clang-14 libclang-rt-14-dev llvm-14)"
  [ -z "${CI:-}" ] || { echo "CI is set: the fuzzers' skip fails the run"; rc=1; }
fi
exit $rc
