#!/usr/bin/env bash
# tools/device/bench_small_batch.sh: decode batches of a few sequences and the throughput run's time split, in one
# device call (issue 19 items 1-2).
#
#   VLLMC=build/vllmc tools/device/bench_small_batch.sh QWEN3_8B_DIR [QWEN3_0.6B_DIR]
#
# The model folders: config.json + generation_config.json + tokenizer files (weights --load-format dummy).
# 1. Batch-B decode (B = 2, 4, 8 by default: BATCHES="..."), each with the BF16 GEMV's token limit
#    (VLLM_CUDA_GEMV_MAX_T) at each of MAXTS (default "8 4"; "auto": unset, the backend's choice by layer size):
#    step ms = (t(128 in, 33 out) - t(128 in, 1 out)) / 32, bench latency with 1 warm-up + 3 iterations.
# 2. `vllmc bench throughput` 256 x 128/128 (--max-num-seqs 256) under VLLM_LOG_LEVEL=debug: the engine's split
#    (prefill / decode seconds, host time in the forward, the wait in sampling).
# Logs go to $OUT (default /tmp); one line per measurement to stdout.
set -u
V=${VLLMC:-build/vllmc}; OUTDIR=${OUT:-/tmp}
lat() { # dir max_t batch out -> average seconds
  local lim=(env VLLM_CUDA_GEMV_MAX_T="$2"); [ "$2" = auto ] && lim=(env -u VLLM_CUDA_GEMV_MAX_T)
  "${lim[@]}" timeout 120 "$V" bench latency --model "$1" --load-format dummy --device cuda \
    --num-iters-warmup 1 --num-iters 3 --batch-size "$3" --input-len 128 --output-len "$4" --max-model-len 1024 \
    2>> "$OUTDIR/small_batch.log" | awk '/^Avg latency/ {print $3}'
}
step() { # dir batch max_t
  local f p
  f=$(lat "$1" "$3" "$2" 33); p=$(lat "$1" "$3" "$2" 1)
  echo "$(basename "$1") batch $2, GEMV max T $3: decode step $(awk -v f="$f" -v p="$p" 'BEGIN {
    if (f == "" || p == "") print "failed"; else printf "%.3f ms", (f - p) / 32 * 1000 }')"
}
for d in "$@"; do
  for b in ${BATCHES:-2 4 8}; do
    for mt in ${MAXTS:-8 4}; do step "$d" "$b" "$mt"; done
  done
  [ "$d" = "$1" ] || continue
  VLLM_LOG_LEVEL=debug timeout 120 "$V" bench throughput --model "$d" --load-format dummy --device cuda \
    --num-prompts 256 --input-len 128 --output-len 128 --max-num-seqs 256 > "$OUTDIR/thr_split.log" 2>&1
  grep -E "Throughput|engine:" "$OUTDIR/thr_split.log"
done
