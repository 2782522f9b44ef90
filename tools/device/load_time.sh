#!/usr/bin/env bash
# tools/device/load_time.sh: issue 12 item 4's real-checkpoint load times on the GPU machine.
#
# Writes a gpt-oss-20b-shaped checkpoint with BF16 experts (transformers 5's tensor names and layouts,
# 40 GB of zeros actually written to disk, in 4 safetensors shards) to $LOAD_WORK (default /tmp/load),
# then times `vllmc generate --max-tokens 1` from process start to exit with the page cache dropped
# (cold: read from disk) and again (warm: page-cached). The disk must hold 41 GB.
#
#   tools/device/load_time.sh      (VLLMC_BIN=path: a prebuilt vllmc)
# Device call (DEVICE.md): carry [".devdeps"]; needs root for /proc/sys/vm/drop_caches.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
VLLMC=${VLLMC_BIN:-build-cuda/vllmc}
W=${LOAD_WORK:-/tmp/load}; mkdir -p "$W"
python3 - "$W" <<'PY'
import json, os, struct, sys, time
w = sys.argv[1]
D, L, H, KV, HD, E, I, V = 2880, 24, 64, 8, 64, 32, 2880, 201088
cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": D, "intermediate_size": I,
       "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
       "num_local_experts": E, "num_experts_per_tok": 4, "sliding_window": 128,
       "layer_types": ["sliding_attention", "full_attention"] * (L // 2), "vocab_size": V,
       "tie_word_embeddings": False, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "swiglu_limit": 7.0,
       "attention_bias": True, "torch_dtype": "bfloat16", "rope_theta": 150000.0,
       "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                        "original_max_position_embeddings": 4096, "truncate": False}}
json.dump(cfg, open(os.path.join(w, "config.json"), "w"))
tensors = [("model.embed_tokens.weight", [V, D]), ("lm_head.weight", [V, D]), ("model.norm.weight", [D])]
for l in range(L):
    p = f"model.layers.{l}."
    tensors += [(p + "input_layernorm.weight", [D]), (p + "post_attention_layernorm.weight", [D]),
                (p + "self_attn.q_proj.weight", [H * HD, D]), (p + "self_attn.q_proj.bias", [H * HD]),
                (p + "self_attn.k_proj.weight", [KV * HD, D]), (p + "self_attn.k_proj.bias", [KV * HD]),
                (p + "self_attn.v_proj.weight", [KV * HD, D]), (p + "self_attn.v_proj.bias", [KV * HD]),
                (p + "self_attn.o_proj.weight", [D, H * HD]), (p + "self_attn.o_proj.bias", [D]),
                (p + "self_attn.sinks", [H]), (p + "mlp.router.weight", [E, D]), (p + "mlp.router.bias", [E]),
                (p + "mlp.experts.gate_up_proj", [E, D, 2 * I]), (p + "mlp.experts.gate_up_proj_bias", [E, 2 * I]),
                (p + "mlp.experts.down_proj", [E, I, D]), (p + "mlp.experts.down_proj_bias", [E, D])]
shards = 4
per = (len(tensors) + shards - 1) // shards
index, total, t0 = {"metadata": {}, "weight_map": {}}, 0, time.time()
zero = bytes(64 << 20)
for s in range(shards):
    part = tensors[s * per:(s + 1) * per]
    fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    hdr, off = {}, 0
    for name, shape in part:
        n = 2
        for d in shape: n *= d
        hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
        index["weight_map"][name] = fn
    hb = json.dumps(hdr).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(w, fn), "wb") as f:
        f.write(struct.pack("<Q", len(hb))); f.write(hb)
        left = off
        while left > 0:
            k = min(left, len(zero)); f.write(zero[:k]); left -= k
    total += off
json.dump(index, open(os.path.join(w, "model.safetensors.index.json"), "w"))
print(f"wrote {total / 1e9:.1f} GB in {time.time() - t0:.0f} s", flush=True)
PY
sync
run() { # label
  local t0=$(date +%s.%N)
  "$VLLMC" generate --model "$W" --device cuda --max-model-len 4096 --prompt-token-ids 1,2,3 --max-tokens 1 \
    > /dev/null 2> "${OUT:-/tmp}/load_$1.log"
  local t1=$(date +%s.%N)
  echo "$1: $(python3 -c "print(round($t1 - $t0, 2))") s from process start to exit; $(grep -oE 'host memory after load.*' "${OUT:-/tmp}/load_$1.log")"
}
echo 3 > /proc/sys/vm/drop_caches && run cold || echo "cold: could not drop the page cache"
run warm
rm -rf "$W"
