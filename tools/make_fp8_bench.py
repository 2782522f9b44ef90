#!/usr/bin/env python3
"""
make_fp8_bench.py: a Qwen3-8B-shape checkpoint in block-scaled FP8 with random weights (the layout of
Qwen/Qwen3-8B-FP8: quantization_config fp8, weight_block_size [128, 128], F8_E4M3 projections with F32
weight_scale_inv, BF16 embeddings / norms / lm_head), for issue 16's speed rows (tools/device/bench_fp8.sh);
--quant awq: the same shape as an AWQ 4-bit checkpoint (AutoAWQ GEMM: qweight I32 (K, N / 8), qzeros I32
(K / 128, N / 8), scales F16 (K / 128, N), random nibbles; quantization_config awq, group 128).

Usage: python3 tools/make_fp8_bench.py OUT_DIR [--layers 36] [--quant fp8|awq]
Needs torch (float8_e4m3fn) and safetensors; a GPU makes it fast.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

H, I, L, NH, NKV, HD, V = 4096, 12288, 36, 32, 8, 128, 151936


def quant(w):
    """(N, K) -> E4M3 (N, K), F32 (N / 128, K / 128): s = max|block| / 448, q = e4m3(w / s)."""
    N, K = w.shape
    b = w.float().reshape(N // 128, 128, K // 128, 128)
    s = b.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (b / s[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(N, K)
    return q.cpu(), s.cpu()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=L)
    ap.add_argument("--quant", choices=("fp8", "awq"), default="fp8")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    rnd = lambda *s, std=0.02: (torch.randn(*s, generator=g, device=dev) * std)
    index, shard = {}, 0
    cfg = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=H, intermediate_size=I,
               num_hidden_layers=a.layers, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
               vocab_size=V, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
               tie_word_embeddings=False, hidden_act="silu", attention_bias=False, dtype="bfloat16",
               bos_token_id=151643, eos_token_id=151645,
               quantization_config=dict(activation_scheme="dynamic", fmt="e4m3", quant_method="fp8",
                                        weight_block_size=[128, 128]) if a.quant == "fp8" else
               dict(quant_method="awq", bits=4, group_size=128, zero_point=True, version="gemm",
                    modules_to_not_convert=None))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    def flush(t):
        nonlocal shard
        name = f"model-{shard:05d}.safetensors"
        save_file(t, os.path.join(a.out, name), metadata={"format": "pt"})
        for k in t:
            index[k] = name
        shard += 1

    flush({"model.embed_tokens.weight": rnd(V, H, std=1.0).to(torch.bfloat16).cpu(),
           "model.norm.weight": torch.ones(H, dtype=torch.bfloat16),
           "lm_head.weight": rnd(V, H).to(torch.bfloat16).cpu()})
    shapes = {"self_attn.q_proj": (NH * HD, H), "self_attn.k_proj": (NKV * HD, H), "self_attn.v_proj": (NKV * HD, H),
              "self_attn.o_proj": (H, NH * HD), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
    t = {}
    for l in range(a.layers):
        p = f"model.layers.{l}."
        for n, s in shapes.items():
            if a.quant == "awq":
                N, K = s
                ri = lambda *d: torch.randint(-2**31, 2**31 - 1, d, generator=g, device=dev, dtype=torch.int32).cpu()
                t[p + n + ".qweight"] = ri(K, N // 8)
                t[p + n + ".qzeros"] = ri(K // 128, N // 8)
                t[p + n + ".scales"] = (0.001 + rnd(K // 128, N, std=0.0005).abs()).to(torch.float16).cpu()
                continue
            q, sc = quant(rnd(*s))
            t[p + n + ".weight"] = q
            t[p + n + ".weight_scale_inv"] = sc
        for n in ("input_layernorm", "post_attention_layernorm"):
            t[p + n + ".weight"] = torch.ones(H, dtype=torch.bfloat16)
        for n in ("self_attn.q_norm", "self_attn.k_norm"):
            t[p + n + ".weight"] = torch.ones(HD, dtype=torch.bfloat16)
        if l % 6 == 5 or l == a.layers - 1:
            flush(t)
            t = {}
        print(f"layer {l + 1}/{a.layers}", flush=True)
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)


if __name__ == "__main__":
    main()
