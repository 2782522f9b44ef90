#!/usr/bin/env bash
# tools/device/bench_serve_load.sh: issue 19 part 2 item 3 (serving under load) in one device call.
#
#   VLLMC=build/vllmc tools/device/bench_serve_load.sh MODEL_DIR
#
# MODEL_DIR: the Qwen3-8B shape as config.json + generation_config.json + tokenizer files (weights
# --load-format dummy). Runs `vllmc bench throughput` with the serving lengths (512 in / 128 out, 512
# prompts) for the 90% comparison, then `vllmc serve` with `vllmc bench serve` at concurrency 1, 16, 64 and
# 256 (2 x concurrency prompts, at least 16; TTFT / TPOT / ITL at p50 and p99), then concurrency 256 again
# under --max-num-batched-tokens 2048 and 512 (the chunked-prefill budget that keeps decodes flowing: the
# issue asks P99 ITL <= 3 x the median). Logs go to $OUT (default /tmp); a summary line per run to stdout.
set -u
M=$1; V=${VLLMC:-build/vllmc}; OUTDIR=${OUT:-/tmp}; PORT=${PORT:-8123}
"$V" bench throughput --model "$M" --load-format dummy --device cuda --num-prompts 512 --input-len 512 \
  --output-len 128 --max-model-len 2048 > "$OUTDIR/thr.log" 2>&1
echo "throughput 512 x 512/128: $(grep -E 'Throughput' "$OUTDIR/thr.log" | head -1)"
serve_run() { # tag, serve flags, concurrencies...
  local tag=$1 flags=$2; shift 2
  # shellcheck disable=SC2086
  "$V" serve "$M" --load-format dummy --device cuda --port "$PORT" --max-model-len 2048 $flags \
    > "$OUTDIR/serve_$tag.log" 2>&1 &
  local pid=$!
  for _ in $(seq 180); do curl -s "localhost:$PORT/health" > /dev/null 2>&1 && break; sleep 1; done
  for c in "$@"; do
    local n=$(( c * 2 )); [ $n -lt 16 ] && n=16
    "$V" bench serve --port "$PORT" --num-prompts $n --random-input-len 512 --random-output-len 128 \
      --max-concurrency "$c" --metric-percentiles 50,99 --disable-tqdm > "$OUTDIR/bs_${tag}_$c.log" 2>&1
    echo "[$tag] concurrency $c ($n prompts): $(grep -E 'Failed|Output token throughput|TTFT|TPOT|ITL' \
      "$OUTDIR/bs_${tag}_$c.log" | tr -s ' ' | paste -sd'|')"
  done
  kill "$pid"; wait "$pid" 2>/dev/null
}
serve_run default "" 1 16 64 256
serve_run mnbt2048 "--max-num-batched-tokens 2048" 256
serve_run mnbt512 "--max-num-batched-tokens 512" 256
