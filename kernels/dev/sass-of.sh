#!/usr/bin/env bash
# Run on the GPU machine (it has cuobjdump): the SASS of the kernels whose
# mangled names match $1 (regex) in the stripped bench binary, to $OUT/sass-*.txt,
# with each function's instruction count and its mix by opcode.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
[ -d .devcarry/bin ] || tar -C .devcarry -xJf .devcarry/bin.tar.xz
cuobj=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
"$cuobj" -sass .devcarry/bin/${BIN:-bench-gpu-step} | awk -v re="$1" -v out="$out" '
  /Function : / { f = $3; keep = f ~ re; n = 0; if (keep) file = out "/sass-" substr(f, 1, 60) ".txt" }
  keep { print > file }'
for f in "$out"/sass-*.txt; do
  echo "== $(basename "$f"): $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$f") instructions"
  grep -oE '^ +/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_.]+' "$f" | awk '{print $NF}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' '; echo
done
