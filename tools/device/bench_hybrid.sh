#!/usr/bin/env bash
# tools/device/bench_hybrid.sh: issue 13's hybrid (gated delta-net) speed rows on the GPU machine, in one device call.
#
# Qwen3.5-27B shape (Qwen/Qwen3.5-27B's text config: 64 layers, every fourth full attention (24 / 4 heads of
# 256, output gate), the others gated delta-net (16 q/k heads, 48 v heads, of 128), hidden 5120, MLP 17408,
# vocabulary 248,320; 54 GB of BF16) and Qwen3.5-35B-A3B's (40 layers, hidden 2048, 16 / 2 heads of 256,
# delta-net 16 / 32 heads of 128, 256 experts of 512, top 8, a shared expert of 512), --load-format dummy:
#   - batch-1 decode against the weight-bandwidth floor (the bytes one decode step reads: every weight of
#     the dense model, the active ones of the MoE (attention or delta-net, router, top-k and shared experts),
#     the lm_head; / 4.25 TB/s, DEVICE.md's copy bandwidth); the recurrent states' read + write per step
#     are reported beside it (F32 states);
#   - 27B: offline throughput of 32 requests of 1,024 prompt / 256 output tokens (--max-num-seqs 32), and the
#     same load through `vllmc bench serve` against `vllmc serve` (TTFT, TPOT; token-id prompts, no tokenizer);
#   - 27B: one 8,192-token prompt's prefill, and the share of its time in the gated delta-net kernels
#     (ncu's gpu__time_duration of the conv, gating, delta-rule (recurrent or chunked) and gated-norm kernels,
#     over the same prefill's total).
#
#   tools/device/bench_hybrid.sh [--quick]   (VLLMC_BIN=path: a prebuilt vllmc; SHAPES picks shapes)
# Device call (DEVICE.md): carry [".devdeps"]. Results: stdout and ${OUT:-/tmp}/bench_hybrid.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
OUTDIR=${OUT:-/tmp}
RES="$OUTDIR/bench_hybrid.jsonl"; : > "$RES"
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

python3 - "$WORK" <<'PY'
import json, os, sys
rope = {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}
common = {"head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
          "full_attention_interval": 4, "vocab_size": 248320, "tie_word_embeddings": False,
          "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "hidden_act": "silu", "dtype": "bfloat16",
          "rope_parameters": rope, "bos_token_id": 248044, "eos_token_id": 248044}
shapes = {
  "qwen3.5-27b": dict(common, architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", hidden_size=5120,
                      intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24, num_key_value_heads=4,
                      linear_num_key_heads=16, linear_num_value_heads=48),
  "qwen3.5-35b-a3b": dict(common, architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text",
                          hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2,
                          linear_num_key_heads=16, linear_num_value_heads=32, moe_intermediate_size=512,
                          shared_expert_intermediate_size=512, num_experts=256, num_experts_per_tok=8),
}
for name, cfg in shapes.items():
    os.makedirs(os.path.join(sys.argv[1], name), exist_ok=True)
    json.dump(cfg, open(os.path.join(sys.argv[1], name, "config.json"), "w"))
PY
ITERS=$([ $QUICK = 1 ] && echo 3 || echo 8)
for NAME in ${SHAPES:-qwen3.5-27b qwen3.5-35b-a3b}; do
M="$WORK/$NAME"
lat() { # extra-args...: prints the average latency in seconds
  "$VLLMC" bench latency --model "$M" --load-format dummy --device cuda --max-model-len 9216 --max-num-seqs 32 \
    --num-iters-warmup 2 --num-iters $ITERS "$@" 2>&1 | tee -a "$OUTDIR/vllmc_hybrid.log" | awk '/^Avg latency/ {print $3}'
}
echo "== $NAME: decode"
full=$(lat --batch-size 1 --input-len 128 --output-len 128)
pre=$(lat --batch-size 1 --input-len 128 --output-len 1)
grep -E "recurrent state|KV cache|memory" "$OUTDIR/vllmc_hybrid.log" | tail -4
python3 - "$NAME" "$full" "$pre" "$RES" "$M/config.json" <<'PY'
import json, sys
name, full, pre, res = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
c = json.load(open(sys.argv[5]))
D, L, H, KV, HD, V = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]
Hk, Hv, dk, dv = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"]
full_layers = L // c["full_attention_interval"]; lin_layers = L - full_layers
attn = D * 2 * H * HD + 2 * D * KV * HD + H * HD * D            # q (with the gate), k, v, o
gdn = D * (2 * Hk * dk + 2 * Hv * dv + 2 * Hv) + Hv * dv * D     # in_proj, out_proj
if "num_experts" in c:
    E, K, I, Is = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    mlp = D * E + K * 3 * D * I + 3 * D * Is + D
else:
    mlp = 3 * D * c["intermediate_size"]
weights = 2 * (full_layers * attn + lin_layers * gdn + L * mlp + V * D)
state = lin_layers * (Hv * dk * dv + (2 * Hk * dk + Hv * dv) * 3) * 4 * 2   # F32 states read + written
floor = 4.25e12 / weights
dec = 127 / (full - pre)
r = {"model": name, "decode_tok_s": dec, "floor_tok_s": floor, "ratio": dec / floor, "weights_gb": weights / 1e9,
     "state_rw_mb_per_step": state / 1e6, "floor_with_state_tok_s": 4.25e12 / (weights + state),
     "latency_128_128_s": full, "ttft_128_s": pre}
print(json.dumps(r)); open(res, "a").write(json.dumps(r) + "\n")
PY
[ "$NAME" = qwen3.5-27b ] || continue
echo "== $NAME: throughput, 32 x 1024 / 256"
"$VLLMC" bench throughput --model "$M" --load-format dummy --device cuda --max-model-len 2048 --num-prompts 32 \
  --input-len 1024 --output-len 256 --max-num-seqs 32 2>&1 | tee -a "$OUTDIR/vllmc_hybrid.log" | grep -E "Throughput" |
  sed "s/^/$NAME: /" | tee -a "$OUTDIR/bench_hybrid_throughput.txt"
echo "== $NAME: vllmc bench serve against vllmc serve, 32 x 1024 / 256 (TTFT, TPOT)"
"$VLLMC" serve --model "$M" --load-format dummy --device cuda --max-model-len 2048 --max-num-seqs 32 --port 18000 \
  > "$OUTDIR/serve_$NAME.log" 2>&1 &
SPID=$!
for _ in $(seq 120); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18000/v1/models')" 2>/dev/null && break; sleep 1; done
"$VLLMC" bench serve --port 18000 --num-prompts 32 --random-input-len 1024 --random-output-len 256 \
  --max-concurrency 32 --tokenizer "$M" 2>&1 | tee "$OUTDIR/bench_serve_$NAME.txt" |
  grep -E "Output token throughput|Mean TTFT|Median TTFT|Mean TPOT|Median TPOT|Successful" | sed "s/^/$NAME: /"
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null || true
echo "== $NAME: prefill of 8192 tokens"
p8=$(lat --batch-size 1 --input-len 8192 --output-len 1 --max-num-batched-tokens 8192)
echo "8192-token prompt: $p8 s, $(python3 -c "print(round(8192 / $p8))") tok/s"
if command -v ncu >/dev/null || [ -x /usr/local/cuda/bin/ncu ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  ids=$(python3 -c "print(','.join(str(1 + i % 1000) for i in range(8192)))")
  "$NCU" --kernel-name regex:"k_causal_conv1d|k_conv_state|k_gdn_gating|k_gated_delta_rule|k_gdr_|k_rms_norm_gated" --metrics gpu__time_duration.sum \
    --csv "$VLLMC" generate --model "$M" --load-format dummy --device cuda --max-model-len 9216 --max-num-seqs 1 \
    --max-num-batched-tokens 8192 --prompt-token-ids "$ids" --max-tokens 1 > "$OUTDIR/ncu_gdn.csv" 2> "$OUTDIR/ncu_gdn.err" || true
  python3 - "$OUTDIR/ncu_gdn.csv" "$p8" "$RES" <<'PY'
import csv, collections, json, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print("ncu: no rows"); sys.exit(0)
hdr = rows[0]; ki, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
tot = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); unit = r[ui]
    s = v * {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1}.get(unit, 1e-9)
    tot[r[ki].split("(")[0].split("<")[0]] += s
gdn = sum(tot.values()); p8 = float(sys.argv[2])
r = {"model": "qwen3.5-27b", "prefill_8192_s": p8, "prefill_tok_s": 8192 / p8, "gdn_kernels_s": gdn,
     "gdn_share": gdn / p8, "per_kernel_s": dict(tot)}
print(json.dumps(r)); open(sys.argv[3], "a").write(json.dumps(r) + "\n")
PY
fi
done
