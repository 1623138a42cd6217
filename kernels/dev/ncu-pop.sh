# kernels/dev: a population's step under Nsight Compute on the GPU machine,
# after scripts/gpu-prepare.sh: each kernel's time over NCU_POP_COUNT (120)
# launches of bench-gpu-pop past the warm-up, for each members:tc of NCU_POP
# ("32:1 32:0"), as TSV under $OUT, then summed by kernel and divided by the
# steps seen (finish_kernel runs once a step).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-ncu-logs}; mkdir -p "$OUT"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for spec in ${NCU_POP-32:1 32:0}; do
  IFS=: read -r n tc <<< "$spec"
  $ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip ${NCU_POP_SKIP:-900} \
    --launch-count ${NCU_POP_COUNT:-120} .devcarry/bin/bench-gpu-pop $n $tc 2>&1 |
   awk '/^  [a-zA-Z_].*\(/ {k=$0; sub(/^ +(void )?/, "", k)} /gpu__time_duration.sum/ {printf "%s\t%s\t%s\n", substr(k,1,70), $NF, $(NF-1)}' > $OUT/ncu_pop_${n}_${tc}.tsv
  awk -F'\t' -v n=$n -v tc=$tc '{u=$3; v=$2+0; if (u=="ms") v*=1000; if (u=="ns"||u=="nsecond") v/=1000;
     split($1, a, "("); k=a[1]; t[k]+=v; c[k]++; if (k ~ /finish_kernel/) s++; tot+=v}
     END {printf "== members %d tc %d: %d steps seen, %.1f us a step serialised\n", n, tc, s, tot/(s?s:1);
          for (k in t) printf "%9.1f us  %5.1f%%  %3d x  %s\n", t[k]/(s?s:1), 100*t[k]/tot, c[k]/(s?s:1), k}' $OUT/ncu_pop_${n}_${tc}.tsv | sort -k1 -n -r
done
