#!/usr/bin/env bash
# The CPU suites (unit, integration, learning) under every OpenBLAS kernel set
# this processor can execute (OPENBLAS_CORETYPE; Debian's OpenBLAS is built
# with DYNAMIC_ARCH, so it picks by processor otherwise). A claim of the CPU
# backend (bit-identical rows, a learning margin) must hold whichever it
# picks: a user's machine may be Intel or AMD, old or new.
#   tests/run-coretypes.sh [build-dir] [out-dir] [core...]
# (defaults: build, coretypes-logs, every kernel set below)
# Per kernel set: meson's summary line and the learning suite's figures, in
# out-dir/<core>.log and out-dir/summary.txt. A kernel set whose probe dies
# on an illegal instruction (SIGILL) is listed as not executable here.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; out=${2:-coretypes-logs}
mkdir -p "$out"
cores="Cooperlake SkylakeX SapphireRapids Haswell Zen Excavator Steamroller Piledriver Bulldozer Sandybridge
       Nehalem Barcelona Opteron Core2 Penryn Dunnington Atom Prescott"
[ $# -gt 2 ] && cores="${*:3}"
summary=$out/summary.txt
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), commit $(git rev-parse --short HEAD)" | tee "$summary"
rc=0
for c in $cores; do
  # the probe: the gradient checks call BLAS in every shape the step uses;
  # CK_FORK=no so that an illegal instruction kills the probe itself (check's
  # forked tests would report it as a failure, and the kernel set would run)
  CK_FORK=no OPENBLAS_CORETYPE=$c OPENBLAS_NUM_THREADS=1 "$build/tests/test-gradcheck" >/dev/null 2>&1; prc=$?
  if [ $prc -ge 128 ]; then echo "$c: not executable here (signal $((prc - 128)))" | tee -a "$summary"; continue; fi
  echo "== $c" > "$out/$c.log"
  OPENBLAS_CORETYPE=$c meson test -C "$build" --no-rebuild --suite unit --suite integration --suite learning \
    --num-processes 2 --print-errorlogs >> "$out/$c.log" 2>&1; trc=$?
  [ $trc -eq 0 ] || rc=1
  cp "$build/meson-logs/testlog.txt" "$out/$c.testlog.txt"
  res=$(grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/$c.log" | tr -s ' ' | tr '\n' ' ')
  # the learning figures: meanrev's last iteration, the last window of each run
  learn=$(awk '/^iter/ {it=$0} /^bitflip|^deepsea/ {if (run) print run ": " last; run=$0; last=""}
               /episodes +(500|2000):/ {last=$0} END {if (run) print run ": " last; print it}' "$out/$c.testlog.txt" |
          sed 's/  */ /g')
  printf '%s: %s\n%s\n' "$c" "$res" "$learn" | tee -a "$summary"
done
exit $rc
