#!/usr/bin/env bash
# tools/device/bench_moe.sh: issue 12's mixture-of-experts speed rows on the GPU machine, in one device call.
#
# Qwen3-30B-A3B shape (Qwen/Qwen3-30B-A3B's config.json: 48 layers, hidden 2048, 32 / 4 heads of 128,
# 128 experts of 768, top 8, vocabulary 151,936; 61 GB of BF16) and gpt-oss-20b's (24 layers, hidden
# 2880, 64 / 8 heads of 64 with sinks, 32 experts of 2880, top 4, BF16 experts), --load-format dummy
# (filled on the device): the load time, batch-1 decode against its active-weight floor (the bytes one
# decode step reads: attention, router and the top-k experts per layer, the lm_head; / 4.25 TB/s, the
# device copy bandwidth of DEVICE.md), and offline throughput with 256 prompts of 128 tokens, 128 out.
# SHAPES="qwen3-30b-a3b" picks shapes.
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

# config.json of the shapes: Qwen/Qwen3-30B-A3B; openai/gpt-oss-20b with BF16 experts (its checkpoint's
# MXFP4 experts dequantized, so no quantization_config)
python3 - "$WORK" <<'PY'
import json, os, sys
shapes = {
  "qwen3-30b-a3b": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "tie_word_embeddings": False, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645},
  "gpt-oss-20b": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12, "vocab_size": 201088,
    "tie_word_embeddings": False, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "swiglu_limit": 7.0,
    "attention_bias": True, "hidden_act": "silu", "torch_dtype": "bfloat16", "rope_theta": 150000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "original_max_position_embeddings": 4096, "truncate": False},
    "bos_token_id": 199998, "eos_token_id": 200002, "pad_token_id": 199999},
}
for name, cfg in shapes.items():
    os.makedirs(os.path.join(sys.argv[1], name), exist_ok=True)
    json.dump(cfg, open(os.path.join(sys.argv[1], name, "config.json"), "w"))
PY
ITERS=$([ $QUICK = 1 ] && echo 3 || echo 10)
for NAME in ${SHAPES:-qwen3-30b-a3b gpt-oss-20b}; do
M="$WORK/$NAME"
lat() { # extra-args...: prints the average latency in seconds
  "$VLLMC" bench latency --model "$M" --load-format dummy --device cuda --max-model-len 4096 --num-iters-warmup 2 \
    --num-iters $ITERS "$@" 2>&1 | tee -a "$OUTDIR/vllmc_moe.log" | awk '/^Avg latency/ {print $3}'
}
echo "== $NAME: load (dummy weights filled on the device)"
t0=$(date +%s.%N)
"$VLLMC" generate --model "$M" --load-format dummy --device cuda --max-model-len 4096 --prompt-token-ids 1,2,3 \
  --max-tokens 1 > /dev/null 2> "$OUTDIR/load_$NAME.log"
t1=$(date +%s.%N)
grep -E "memory|KV" "$OUTDIR/load_$NAME.log" | head -6
load_s=$(python3 -c "print(round($t1 - $t0, 2))")
echo "process start to first token with dummy weights: $load_s s"
echo "== $NAME: decode / prefill"
full=$(lat --batch-size 1 --input-len 128 --output-len 128)
pre=$(lat --batch-size 1 --input-len 128 --output-len 1)
python3 - "$NAME" "$full" "$pre" "$load_s" "$RES" "$M/config.json" <<'PY'
import json, sys
name, full, pre, load_s, res = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
c = json.load(open(sys.argv[6]))
D, L, H, KV, HD, V = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]
E = c.get("num_experts") or c["num_local_experts"]; K = c["num_experts_per_tok"]
I = c.get("moe_intermediate_size") or c["intermediate_size"]
attn = D * H * HD + 2 * D * KV * HD + H * HD * D
active = L * (attn + D * E + K * 3 * D * I) + V * D   # params read per decode step (norms, biases: negligible)
floor = 4.25e12 / (2 * active)
dec = 127 / (full - pre)
r = {"model": name, "decode_tok_s": dec, "floor_tok_s": floor, "ratio": dec / floor, "active_gb": 2 * active / 1e9,
     "latency_128_128_s": full, "ttft_128_s": pre, "load_s": load_s}
print(json.dumps(r)); open(res, "a").write(json.dumps(r) + "\n")
PY
echo "== $NAME: throughput"
"$VLLMC" bench throughput --model "$M" --load-format dummy --device cuda --max-model-len 4096 --num-prompts 256 \
  --input-len 128 --output-len 128 --max-num-seqs 256 2>&1 | tee -a "$OUTDIR/vllmc_moe.log" | grep -E "Throughput" |
  sed "s/^/$NAME: /" | tee -a "$OUTDIR/bench_moe_throughput.txt"
done
