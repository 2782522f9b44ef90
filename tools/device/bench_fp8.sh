#!/usr/bin/env bash
# tools/device/bench_fp8.sh: issue 16's FP8 / AWQ checks and speed rows on the GPU machine, one call:
# vllm.c built (CUDA), test_cuda_blocks (test_fp8 among them) and test_cuda_parity (the FP8 fixture's kernels,
# teacher-forced), a Qwen3-8B-shape block-FP8 checkpoint written (tools/make_fp8_bench.py), then
# vllmc bench latency on it and on the BF16 model of the same shape (--load-format dummy): batch-1 decode
# and 512-token prefill, and (quantized) throughput of 256 requests x 128 / 128 tokens. Needs .devdeps carried.
# MODELS="fp8 awq bf16" chooses the models (default fp8 bf16; awq: tools/make_fp8_bench.py --quant awq).
# PREBUILT=DIR: the binaries from DIR instead of a build here.
# Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
OUTDIR=${OUT:-/tmp/out}; mkdir -p "$OUTDIR"
B=/tmp/vbuild
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gens=()
for m in ${MODELS:-fp8 bf16}; do  # fp8, awq: checkpoints written here (bf16: fp8's shape, dummy weights)
  [ $m = bf16 ] && continue
  python3 tools/make_fp8_bench.py /tmp/qwen3-8b-$m --quant $m > /tmp/$m-gen.log 2>&1 &
  gens+=($!)
done
if [ -n "${PREBUILT:-}" ]; then  # binaries built elsewhere (-DVLLM_NATIVE=OFF): vllmc, cuda_test_cuda_{blocks,parity}
  B=$PREBUILT
else
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  t0=$(date +%s)
  cmake --build $B -j 16 --target vllmc_cli cuda_test_cuda_blocks cuda_test_cuda_parity 2>&1 | grep -E "error|warning" || true
  echo "== built in $(( $(date +%s) - t0 )) s"
fi
timeout 300 $B/cuda_test_cuda_blocks > "$OUTDIR/blocks.log" 2>&1; echo "test_cuda_blocks rc $?"
grep -E "FP8|I4|CHECK failed|checks|cuBLASLt" "$OUTDIR/blocks.log" | tail -30
if grep -q "FP8 linear T" "$OUTDIR/blocks.log" && grep "CHECK failed" "$OUTDIR/blocks.log" | grep -q "FP8"; then
  echo "== FP8 GEMM with K-major scales (VLLM_CUDA_F8_SCALES=k)"
  VLLM_CUDA_F8_SCALES=k timeout 300 $B/cuda_test_cuda_blocks > "$OUTDIR/blocks_k.log" 2>&1
  grep -E "FP8|CHECK failed|checks" "$OUTDIR/blocks_k.log" | tail -12
fi
if [ "${SKIP_PARITY:-0}" = 0 ]; then
  timeout 300 $B/cuda_test_cuda_parity > "$OUTDIR/parity.log" 2>&1; echo "test_cuda_parity rc $?"
  grep -E "fp8|awq|gptq|CHECK failed|checks" "$OUTDIR/parity.log" | grep -v "vllmc info" | tail -24
fi
wait "${gens[@]}"; tail -qn 1 /tmp/*-gen.log; du -sh /tmp/qwen3-8b-*
mkdir -p /tmp/qwen3-8b-bf16 && python3 - <<'PY'
import glob, json; c = json.load(open(sorted(glob.glob("/tmp/qwen3-8b-*/config.json"))[0])); c.pop("quantization_config", None)
json.dump(c, open("/tmp/qwen3-8b-bf16/config.json", "w"))
PY
V=$B/vllmc
lat() { local m=$1; shift; "$V" bench latency --model "$m" --device cuda --num-iters-warmup 2 --num-iters ${ITERS:-5} "$@" 2>&1 |
  tee -a "$OUTDIR/vllmc.log" | awk '/^Avg latency/ {print $3}'; }
for m in ${MODELS:-fp8 bf16}; do
  d=/tmp/qwen3-8b-$m; fmt=(); [ $m = bf16 ] && fmt=(--load-format dummy)
  full=$(lat $d "${fmt[@]}" --batch-size 1 --input-len 128 --output-len 128)
  pre=$(lat $d "${fmt[@]}" --batch-size 1 --input-len 128 --output-len 1)
  p512=$(lat $d "${fmt[@]}" --batch-size 1 --input-len 512 --output-len 1)
  python3 -c "f,p,q=$full,$pre,$p512;print('$m decode tok/s %.1f  prefill512 tok/s %.0f' % (127/(f-p), 512/q))" | tee -a "$OUTDIR/rows.txt"
  [ $m != bf16 ] && timeout 240 "$V" bench throughput --model $d --device cuda --num-prompts 256 --input-len 128 \
    --output-len 128 --max-num-seqs 256 2>&1 | tee -a "$OUTDIR/vllmc.log" | grep -E "Throughput|tokens/s" | tee -a "$OUTDIR/rows.txt"
done
grep -E "checkpoint|weights|KV cache" "$OUTDIR/vllmc.log" | sort | uniq -c | head -8
