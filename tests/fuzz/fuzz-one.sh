#!/usr/bin/env bash
# fuzz-one.sh EXE SEEDS REGRESS ARTIFACTS — one libFuzzer harness, bounded:
# first every file in REGRESS (inputs that once crashed) runs once, then
# FUZZ_SECONDS (default 60) of fuzzing from the SEEDS corpus. New inputs go
# to a temporary corpus (SEEDS is only read: libFuzzer writes to its first
# corpus directory alone); a crash, leak, timeout or OOM input is written to
# ARTIFACTS/<harness>/ and fails the run. Prints libFuzzer's final stats and
# one summary line:
#   fuzz-request: 123456 runs in 60 s, cov 2345, ft 6789, corpus 321, peak rss 210 MB: ok
set -uo pipefail
mkdir -p "$4"
# absolute: fuzz-request changes its working directory
exe=$(realpath "$1") seeds=$(realpath "$2") regress=$(realpath -m "$3") artifacts=$(realpath "$4")
secs=${FUZZ_SECONDS:-60}
name=$(basename "$exe")
work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts/$name" "$work/corpus"
# one BLAS thread (the harnesses measure code, not BLAS); UBSan findings are
# fatal (b_sanitize's UBSan only prints by default)
export OPENBLAS_NUM_THREADS=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# symbolised stacks in crash reports (Debian's llvm-14)
[ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && [ -x /usr/bin/llvm-symbolizer-14 ] && export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-14
# -timeout: seconds per input; -rss_limit_mb: the process (and any one malloc)
opts=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$name/")

shopt -s nullglob
old=("$regress"/*)
if [ ${#old[@]} -gt 0 ]; then
  echo "$name: replaying ${#old[@]} regression input(s) from $regress"
  if ! "$exe" "${opts[@]}" "${old[@]}" >"$work/regress.log" 2>&1; then
    tail -n 60 "$work/regress.log"
    echo "$name: a regression input fails again"
    exit 1
  fi
fi

log=$artifacts/$name.log
rc=0
timeout -k 10 $((secs + 120)) "$exe" "${opts[@]}" -max_total_time="$secs" "$work/corpus" "$seeds" >"$log" 2>&1 || rc=$?
units=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
grep -E '^stat::' "$log"
echo "$last"
if [ $rc -ne 0 ]; then
  tail -n 80 "$log"
  echo "$name: ${units:-?} runs in $secs s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, peak rss ${rss:-?} MB: FAILED (exit $rc; the input is in $artifacts/$name/, the log in $log)"
  exit 1
fi
echo "$name: ${units:-?} runs in $secs s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, peak rss ${rss:-?} MB: ok"
