#!/usr/bin/env bash
# tools/device/bench_gguf.sh: issue 15's GGUF speed rows on the GPU machine, over two device calls (each
# at most 10 minutes; the second while the machine is still warm, /tmp kept):
#
#   tools/device/bench_gguf.sh prepare   # llama.cpp's CUDA build started in its own session (it outlives
#                                        # the call), vllm.c built, the Qwen3-8B-shape files written
#                                        # (tools/make_gguf_bench.py), test_cuda_blocks and the block GEMV
#                                        # microbenchmark run
#   tools/device/bench_gguf.sh bench     # vllmc and llama.cpp (llama-bench, llama-batched-bench) on the
#                                        # same files in the same call
#
# Needs .peer/llama.cpp (llama.cpp b10095, trimmed as DEVICE.md says), .peer/qwen3tok (the Qwen3
# tokenizer.json.gz + tokenizer_config.json) and .devdeps carried. Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
OUTDIR=${OUT:-/tmp/out}; mkdir -p "$OUTDIR"
G=/tmp/gguf-bench; B=/tmp/vbuild; LB=/tmp/lbuild
TYPES=${TYPES:-Q4_K_M,Q8_0,Q6_K}
phase=${1:-prepare}

if [ "$phase" = prepare ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  if [ ! -x $LB/bin/llama-bench ]; then
    setsid nohup bash -c "cmake -S .peer/llama.cpp -B $LB -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >/dev/null && \
      cmake --build $LB -j 9 --target llama-bench llama-batched-bench && echo LLAMA_BUILD_DONE" \
      > /tmp/lbuild.log 2>&1 < /dev/null &
  fi
  PYTHONPATH=.peer/llama.cpp/gguf-py python3 tools/make_gguf_bench.py $G .peer/qwen3tok --types "$TYPES" \
    > /tmp/gguf-gen.log 2>&1 &
  gen=$!
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  t0=$(date +%s)
  cmake --build $B -j 7 --target vllmc_cli cuda_test_cuda_blocks cuda_test_cuda_perf 2>&1 | grep -E "error|warning" || true
  echo "== vllm.c built in $(( $(date +%s) - t0 )) s"
  timeout 300 $B/cuda_test_cuda_blocks > "$OUTDIR/blocks.log" 2>&1; echo "test_cuda_blocks rc $?"
  grep -E "FAIL|passed|failed|checks" "$OUTDIR/blocks.log" | tail -5
  for xq in 1 0; do
    VLLM_CUDA_QGEMV_XQ=$xq VLLM_PERF_SHAPES=blocks timeout 120 $B/cuda_test_cuda_perf 2>&1 | grep "^PERF" |
      sed "s/^/xq$xq /" | tee -a "$OUTDIR/perf.log"
  done
  wait $gen; cat /tmp/gguf-gen.log
  ls -la $G
  tail -2 /tmp/lbuild.log
  exit 0
fi

# ---- bench ----
V=$B/vllmc
RES="$OUTDIR/gguf.jsonl"; : > "$RES"
lat() { # file extra-args...: the average latency in seconds
  local f=$1; shift
  "$V" bench latency --model "$f" --device cuda --num-iters-warmup 2 --num-iters ${ITERS:-5} "$@" 2>&1 |
    tee -a "$OUTDIR/vllmc.log" | awk '/^Avg latency/ {print $3}'
}
for t in ${TYPES//,/ }; do
  f=$G/qwen3-8b-$t.gguf
  [ -s "$f" ] || { echo "missing $f"; continue; }
  echo "== vllmc $t"
  full=$(lat "$f" --batch-size 1 --input-len 128 --output-len 128)
  pre=$(lat "$f" --batch-size 1 --input-len 128 --output-len 1)
  p512=$(lat "$f" --batch-size 1 --input-len 512 --output-len 1)
  read -r rss_now rss_peak < <(grep -o 'host memory after load: [0-9.]* MiB resident (peak [0-9.]* MiB)' \
    "$OUTDIR/vllmc.log" | tail -1 | grep -oE '[0-9.]+' | tr '\n' ' '; echo) || true
  python3 -c "import json;f,p,q=$full,$pre,$p512;print(json.dumps({'engine':'vllmc','file':'$t','decode_tok_s':127/(f-p),'prefill512_tok_s':512/q,'host_rss_mib':${rss_now:-0},'host_peak_rss_mib':${rss_peak:-0}}))" | tee -a "$RES"
  if [ "$t" = Q4_K_M ]; then
    fx=$(VLLM_CUDA_QGEMV_XQ=0 lat "$f" --batch-size 1 --input-len 128 --output-len 128)
    px=$(VLLM_CUDA_QGEMV_XQ=0 lat "$f" --batch-size 1 --input-len 128 --output-len 1)
    python3 -c "import json;print(json.dumps({'engine':'vllmc (BF16 activations)','file':'$t','decode_tok_s':127/($fx-$px)}))" | tee -a "$RES"
    timeout 240 "$V" bench throughput --model "$f" --device cuda --num-prompts 256 --input-len 128 --output-len 128 \
      --max-num-seqs 256 2>&1 | tee -a "$OUTDIR/vllmc.log" | grep -E "Throughput|tokens/s" || true
  fi
done
for i in $(seq 1 60); do [ -x $LB/bin/llama-bench ] && break; sleep 5; done
tail -3 /tmp/lbuild.log
if [ -x $LB/bin/llama-bench ]; then
  for t in ${TYPES//,/ }; do
    f=$G/qwen3-8b-$t.gguf
    echo "== llama-bench $t"
    timeout 150 $LB/bin/llama-bench -m "$f" -p 512 -n 128 -fa 1 -ngl 99 -r 3 -o md 2>&1 | tee -a "$OUTDIR/llama.log" | grep -E "^\|"
  done
  echo "== llama-batched-bench Q4_K_M: 256 sequences x 128 prompt + 128 generated"
  timeout 200 $LB/bin/llama-batched-bench -m $G/qwen3-8b-Q4_K_M.gguf -c 66000 -b 2048 -ub 512 -npp 128 -ntg 128 \
    -npl 256 -fa 1 -ngl 99 2>&1 | tee -a "$OUTDIR/llama.log" | grep -E "^\|" || true
fi
