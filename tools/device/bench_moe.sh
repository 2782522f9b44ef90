#!/usr/bin/env bash
# tools/device/bench_moe.sh: issue 12's mixture-of-experts speed rows on the GPU machine, in one device call.
#
# Qwen3-30B-A3B shape (Qwen/Qwen3-30B-A3B's config.json: 48 layers, hidden 2048, 32 / 4 heads of 128,
# 128 experts of 768, top 8, vocabulary 151,936; 61 GB of BF16), --load-format dummy (filled on the
# device): the load time, batch-1 decode against its active-weight floor (the bytes one decode step
# reads: attention, router and 8 of 128 experts per layer, the lm_head; / 4.25 TB/s, the device copy
# bandwidth of DEVICE.md), and offline throughput with 256 prompts of 128 tokens, 128 out.
#
#   tools/device/bench_moe.sh [--quick]   (VLLMC_BIN=path: a prebuilt vllmc; COMMIT names the commit)
# Device call (DEVICE.md): carry [".devdeps"]. Results: stdout and ${OUT:-/tmp}/bench_moe.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
OUTDIR=${OUT:-/tmp}
RES="$OUTDIR/bench_moe.jsonl"; : > "$RES"
WORK=${BENCH_WORK:-/tmp/vllmc-bench}; mkdir -p "$WORK"
source tools/device/env.sh
echo "== commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
if [ -n "${VLLMC_BIN:-}" ] && [ -x "$VLLMC_BIN" ]; then
  VLLMC=$VLLMC_BIN
else
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON >/dev/null
  cmake --build build-cuda -j "$(nproc)" --target vllmc_cli 2>&1 | grep -E "error|warning" || true
  VLLMC=build-cuda/vllmc
fi

M="$WORK/qwen3-30b-a3b"; mkdir -p "$M"
cat > "$M/config.json" <<'JSON'
{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
 "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
 "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
 "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936, "tie_word_embeddings": false,
 "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
 "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645}
JSON
ITERS=$([ $QUICK = 1 ] && echo 3 || echo 10)
lat() { # extra-args...: prints the average latency in seconds
  "$VLLMC" bench latency --model "$M" --load-format dummy --device cuda --num-iters-warmup 2 --num-iters $ITERS "$@" \
    2>&1 | tee -a "$OUTDIR/vllmc_moe.log" | awk '/^Avg latency/ {print $3}'
}
echo "== load (dummy weights filled on the device)"
t0=$(date +%s.%N)
"$VLLMC" generate --model "$M" --load-format dummy --device cuda --prompt-token-ids 1,2,3 --max-tokens 1 \
  > /dev/null 2> "$OUTDIR/load_moe.log"
t1=$(date +%s.%N)
grep -E "memory|weights|KV|load" "$OUTDIR/load_moe.log" | head -12
load_s=$(python3 -c "print(round($t1 - $t0, 2))")
echo "process start to first token, 61 GB of dummy weights: $load_s s"
echo "== decode / prefill"
full=$(lat --batch-size 1 --input-len 128 --output-len 128)
pre=$(lat --batch-size 1 --input-len 128 --output-len 1)
python3 - "$full" "$pre" "$load_s" "$RES" <<'PY'
import json, sys
full, pre, load_s, res = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
D, L, H, KV, HD, E, K, I, V = 2048, 48, 32, 4, 128, 128, 8, 768, 151936
attn = D * H * HD + 2 * D * KV * HD + H * HD * D
active = L * (attn + D * E + K * 3 * D * I) + V * D   # params read per decode step (norms: negligible)
floor = 4.25e12 / (2 * active)
dec = 127 / (full - pre)
r = {"model": "qwen3-30b-a3b", "decode_tok_s": dec, "floor_tok_s": floor, "ratio": dec / floor,
     "active_gb": 2 * active / 1e9, "latency_128_128_s": full, "ttft_128_s": pre, "load_s": load_s}
print(json.dumps(r)); open(res, "a").write(json.dumps(r) + "\n")
PY
echo "== throughput"
"$VLLMC" bench throughput --model "$M" --load-format dummy --device cuda --num-prompts 256 --input-len 128 \
  --output-len 128 --max-num-seqs 256 2>&1 | tee -a "$OUTDIR/vllmc_moe.log" | grep -E "Throughput" | tee "$OUTDIR/bench_moe_throughput.txt"
