ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for tc in 1 0; do for b in 64 256; do
  $ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 5000 --launch-count 420 .devcarry/bin/bench-gpu-dt $b $tc 2>&1 |
   awk '/^  [a-zA-Z_].*\(/ {k=$0; sub(/^ +(void )?/, "", k)} /gpu__time_duration.sum/ {printf "%s\t%s\t%s\n", substr(k,1,60), $NF, $(NF-1)}' > $OUT/ncu_dt_${b}_${tc}.tsv
  wc -l $OUT/ncu_dt_${b}_${tc}.tsv
done; done
