#!/usr/bin/env bash
# tools/device/bench_gemma.sh: issue 11's Gemma 3 speed rows on the GPU machine, in one device call.
#
# Gemma-3-12B shape (bf16, --load-format dummy): batch-1 decode against its weight-bandwidth floor
# (weight bytes / 4.25 TB/s, the device copy bandwidth of DEVICE.md). Gemma-3-4B shape: a 32k-token
# prompt's prefill and decode at 32k context, with its sliding-window layers (5 of 6 local, window
# 1024) and with the same model made all-global (layer_types all full_attention), to show what the
# window saves at long context.
#
#   tools/device/bench_gemma.sh        (VLLMC_BIN=path: a prebuilt vllmc; COMMIT names the commit)
# Device call (DEVICE.md): carry [".devdeps"]. Results: stdout and ${OUT:-/tmp}/bench_gemma.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${OUT:-/tmp}
RES="$OUTDIR/bench_gemma.jsonl"; : > "$RES"
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

# config.json of the shapes (google/gemma-3-12b-it / gemma-3-4b-it text configs)
python3 - "$WORK" <<'PY'
import json, os, sys
work = sys.argv[1]
common = dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", vocab_size=262208, head_dim=256,
              query_pre_attn_scalar=256, sliding_window=1024, rope_theta=1000000.0, rope_local_base_freq=10000.0,
              rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
              tie_word_embeddings=True, torch_dtype="bfloat16", bos_token_id=2, eos_token_id=1, pad_token_id=0)
shapes = {
  "gemma3-12b": dict(hidden_size=3840, intermediate_size=15360, num_hidden_layers=48, num_attention_heads=16,
                     num_key_value_heads=8, rope_scaling={"rope_type": "linear", "factor": 8.0}),
  "gemma3-4b": dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                    num_key_value_heads=4, rope_scaling={"rope_type": "linear", "factor": 8.0}),
}
for name, kw in shapes.items():
    cfg = dict(common, **kw)
    cfg["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                          for i in range(cfg["num_hidden_layers"])]
    variants = {name: cfg}
    if name == "gemma3-4b":
        variants["gemma3-4b-global"] = dict(cfg, layer_types=["full_attention"] * cfg["num_hidden_layers"])
    for vname, c in variants.items():
        d = os.path.join(work, vname); os.makedirs(d, exist_ok=True)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
PY

lat() { # model extra-args... -> average latency in seconds
  local m=$1; shift
  "$VLLMC" bench latency --model "$m" --device cuda --load-format dummy --num-iters-warmup 1 "$@" 2>&1 |
    tee -a "$OUTDIR/vllmc_gemma.log" | awk '/^Avg latency/ {print $3}'
}
echo "== gemma3-12b batch-1 decode"
full=$(lat "$WORK/gemma3-12b" --num-iters 5 --batch-size 1 --input-len 128 --output-len 128)
pre=$(lat "$WORK/gemma3-12b" --num-iters 5 --batch-size 1 --input-len 128 --output-len 1)
python3 -c "
import json
V,D,I,L,hd,nh,nkv=262208,3840,15360,48,256,16,8
w=2*(V*D+L*(D*(nh+2*nkv)*hd+nh*hd*D+3*D*I+4*D)+2*L*hd+D)
dec=127/($full-$pre); floor=4.25e12/w
print(json.dumps({'model':'gemma3-12b','decode_tok_s':dec,'weight_bytes':w,'floor_tok_s':floor,'ratio':dec/floor}))" | tee -a "$RES"

echo "== gemma3-4b 32k prefill and decode at 32k, local layers vs all global"
for name in gemma3-4b gemma3-4b-global; do
  p=$(lat "$WORK/$name" --num-iters 2 --batch-size 1 --input-len 32768 --output-len 1 --max-model-len 33024 \
      --max-num-batched-tokens 8192)
  f=$(lat "$WORK/$name" --num-iters 2 --batch-size 1 --input-len 32768 --output-len 65 --max-model-len 33024 \
      --max-num-batched-tokens 8192)
  python3 -c "
import json
print(json.dumps({'model':'$name','prefill32k_s':$p,'prefill32k_tok_s':32768/$p,'decode_at_32k_tok_s':64/($f-$p)}))" | tee -a "$RES"
done
echo "== table"
cat "$RES"
