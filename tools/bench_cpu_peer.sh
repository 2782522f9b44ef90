#!/usr/bin/env bash
# tools/bench_cpu_peer.sh: issue 19's CPU row: vllmc and llama.cpp's llama-bench on the same GGUF file, on
# this machine, in the same minutes, runs interleaved; medians of ROUNDS rounds.
#
#   tools/bench_cpu_peer.sh MODEL.gguf VLLMC LLAMA_BENCH [THREADS...]
#
# MODEL.gguf: e.g. tools/make_gguf_bench.py OUT TOKDIR --shape qwen3-0.6b --types BF16 (random N(0, 0.02)
# weights in the Qwen3-0.6B shape; needs gguf-py and numpy). LLAMA_BENCH: a CPU build of llama.cpp (see
# docs/benchmarks.md for the flags). Per round and thread count: llama-bench -p 128 -n 32 -r 1 (pp128, tg32),
# then vllmc bench latency --batch-size 1 --input-len 128 with --output-len 1 (prefill = 128 / latency) and
# 33 (decode = 32 / the difference), 3 iterations each; peak RSS from /usr/bin/time of each process.
set -euo pipefail
M=$1 V=$2 L=$3; shift 3
THREADS=${*:-2 1}
ROUNDS=${ROUNDS:-6}
lat() { # threads output_len -> "avg_latency peak_rss_kb"
  /usr/bin/time -f "RSS %M" "$V" bench latency --model "$M" --device cpu --threads "$1" --batch-size 1 \
    --input-len 128 --output-len "$2" --num-iters 3 --num-iters-warmup 1 2>&1 |
    awk '/Avg latency/ {a = $3} /^RSS/ {r = $2} END {print a, r}'
}
med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for t in $THREADS; do
  : > /tmp/bcp_$t.txt
  for r in $(seq "$ROUNDS"); do
    out=$(/usr/bin/time -f "RSS %M" "$L" -m "$M" -t "$t" -p 128 -n 32 -r 1 -o csv 2>&1)
    pp=$(echo "$out" | awk -F, '/"128","0"/ {gsub(/"/, ""); print $(NF-1)}' | head -1)
    tg=$(echo "$out" | awk -F, '/"0","32"/ {gsub(/"/, ""); print $(NF-1)}' | head -1)
    lr=$(echo "$out" | awk '/^RSS/ {print $2}')
    read -r a1 r1 <<< "$(lat "$t" 1)"
    read -r a2 r2 <<< "$(lat "$t" 33)"
    vp=$(awk -v a="$a1" 'BEGIN {printf "%.2f", 128 / a}')
    vd=$(awk -v a="$a1" -v b="$a2" 'BEGIN {printf "%.2f", 32 / (b - a)}')
    echo "$pp $tg $lr $vp $vd $r2" >> /tmp/bcp_$t.txt
    echo "threads $t round $r: llama.cpp pp128 $pp tg32 $tg rss ${lr} KB | vllmc prefill $vp decode $vd rss ${r2} KB"
  done
  for c in 1 2 3 4 5 6; do eval "m$c=\$(awk '{print \$$c}' /tmp/bcp_$t.txt | med)"; done
  echo "MEDIAN threads $t: llama.cpp pp128 $m1 tg32 $m2 peak RSS $m3 KB | vllmc prefill $m4 decode $m5 peak RSS $m6 KB"
done
