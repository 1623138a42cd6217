#!/usr/bin/env bash
# run-fuzz.sh BUILD_DIR SECONDS — both fuzz harnesses, one after the other,
# SECONDS each (after their regression inputs), in a build dir configured
# with -Dfuzz=true by clang (see tests/fuzz/README.md). CI runs 60 s each
# (scripts/test.sh); the benchmark 600:
#   CC=clang-14 meson setup build-fuzz -Dcuda=disabled -Dfuzz=true \
#     -Db_sanitize=address,undefined -Db_lundef=false
#   tests/fuzz/run-fuzz.sh build-fuzz 600
# Prints libFuzzer's final stats (stat::number_of_executed_units, the last
# cov:/ft: line) and a summary line per harness; exits 1 if either found a
# crash, leak, timeout or OOM (the input lands in BUILD_DIR/fuzz-artifacts/).
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1") secs=$2
if ! grep -q 'fuzz-request' "$build/build.ninja" 2>/dev/null; then
  echo "$build is not a fuzz build dir (configure it with CC=clang-14 ... -Dfuzz=true)" >&2
  exit 2
fi
meson compile -C "$build" fuzz-request fuzz-checkpoint >/dev/null || { echo "fuzz: build failed" >&2; exit 1; }
rc=0
summary=()
for h in request checkpoint; do
  echo "== fuzz-$h: $secs s =="
  out=$(FUZZ_SECONDS=$secs "$here/fuzz-one.sh" "$build/tests/fuzz/fuzz-$h" "$here/corpus/$h" "$here/regress/$h" \
        "$build/fuzz-artifacts" 2>&1) || rc=1
  echo "$out"
  summary+=("$(tail -n 1 <<<"$out")")
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
ccomp=$(sed -n 's/.*"command": "\([^ ]*\) .*/\1/p' "$build/compile_commands.json" | head -n 1)
echo "== fuzz summary: $secs s per harness, $(nproc) cores ($cpu), $("$ccomp" --version 2>/dev/null | head -n 1) =="
printf '%s\n' "${summary[@]}"
exit $rc
