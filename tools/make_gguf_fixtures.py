#!/usr/bin/env python3
"""
make_gguf_fixtures.py: GGUF parity fixtures made by llama.cpp itself (issue 15 item 5).

A tiny random Llama (hidden 256 so every K-quant applies, 2 layers, 4 heads of 64, 2 KV heads, MLP 256,
untied output) with the bundled stories260K vocabulary (512 tokens, models/stories260K/tokenizer.json)
is saved as an F32 Hugging Face folder, converted by llama.cpp's convert_hf_to_gguf.py (--outtype f32)
and quantized by its llama-quantize to each type group of the issue. For every quantized file the
reference is transformers (float32, eager) on the file's weights as llama.cpp's gguf-py dequantises
them (gguf.quants.dequantize), with llama's q / k row permutation undone: greedy tokens, their
logprobs and the top-2 gaps (as tools/make_fixtures.py's expected.json), plus, for each ggml type in
the file, two rows of one of its tensors dequantised by gguf-py (a per-type dequantisation reference).

Usage (on the GPU machine, tools/device/make_gguf_fixtures.sh runs it):
  PYTHONPATH=LLAMA/gguf-py python3 tools/make_gguf_fixtures.py --llama-cpp LLAMA \
      --quantize /tmp/lbuild/bin/llama-quantize --out DIR
Writes DIR/<type>.gguf and DIR/<type>.json for each type; DIR/f32.gguf is the unquantized conversion.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

SEED = 4321
STD = 0.15        # weights ~ N(0, STD) (hidden 256: make_fixtures.py's 0.3 at hidden 64, scaled)
EMBED_STD = 1.0   # embeddings / lm_head: peaked logits (std ~8), as make_fixtures.py
PROMPT_LENS = [1, 5, 17, 40]
NEW_TOKENS = 12
TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def config():
    return LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1,
                       eos_token_id=2, attention_bias=False, mlp_bias=False)


def make_hf(out):
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + STD * torch.randn(p.shape))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(EMBED_STD * torch.randn(p.shape))
            else:
                p.copy_(STD * torch.randn(p.shape))
    model = model.float()
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(REPO, "models", "stories260K", f), os.path.join(out, f))
    return model


# llama.cpp names -> Hugging Face names (gguf-py tensor_mapping.py, the llama rows)
LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}


def unpermute(w, heads):
    """convert_hf_to_gguf.py LlamaModel.permute, undone: GGUF row h hd + 2 i + s <- HF row h hd + s hd/2 + i"""
    rows = w.shape[0]
    hd = rows // heads
    return w.reshape(heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_gguf(path, cfg):
    import gguf
    from gguf.quants import dequantize
    r = gguf.GGUFReader(path)
    sd, types, dq = {}, {}, {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(list(t.shape))]  # ne reversed: (out, in)
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        tname = t.tensor_type.name
        types[t.name] = tname
        if tname not in dq and w.ndim == 2:
            dq[tname] = {"tensor": t.name, "rows": [0, shape[0] - 1],
                         "values": [w[0].tolist(), w[shape[0] - 1].tolist()]}
        name = t.name
        if name in GLOBAL:
            hf = GLOBAL[name]
        else:
            _, layer, base, suffix = name.split(".")
            hf = f"model.layers.{layer}.{LAYER[base]}.{suffix}"
            if base == "attn_q":
                w = unpermute(w, cfg.num_attention_heads)
            elif base == "attn_k":
                w = unpermute(w, cfg.num_key_value_heads)
        sd[hf] = torch.from_numpy(np.ascontiguousarray(w))
    return sd, types, dq


@torch.no_grad()
def greedy(model, prompt):
    ids = list(prompt)
    toks, lps, gaps = [], [], []
    for _ in range(NEW_TOKENS):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        lp = torch.log_softmax(logits, dim=-1)
        tok = int(torch.argmax(lp))
        top2 = torch.topk(lp, 2).values
        toks.append(tok)
        lps.append(float(lp[tok]))
        gaps.append(float(top2[0] - top2[1]))
        ids.append(tok)
    return toks, lps, gaps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--quantize", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="e8e6c7af (llama.cpp b10095)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    hf = os.path.join(a.out, "hf")
    make_hf(hf)
    f32 = os.path.join(a.out, "f32.gguf")
    subprocess.run([sys.executable, os.path.join(a.llama_cpp, "convert_hf_to_gguf.py"), hf, "--outtype", "f32",
                    "--outfile", f32], check=True)
    cfg = config()
    rng = random.Random(SEED)
    prompts = [[rng.randrange(3, cfg.vocab_size) for _ in range(n)] for n in PROMPT_LENS]
    for ty in TYPES:
        path = os.path.join(a.out, f"{ty}.gguf")
        subprocess.run([a.quantize, f32, path, ty], check=True, stdout=subprocess.DEVNULL)
        sd, types, dq = read_gguf(path, cfg)
        cfg._attn_implementation = "eager"
        model = LlamaForCausalLM(cfg)
        missing, unexpected = model.load_state_dict(sd, strict=False)
        if missing or unexpected:
            raise RuntimeError(f"{path}: missing {missing}, unexpected {unexpected}")
        model = model.float().eval()
        res = []
        for p in prompts:
            toks, lps, gaps = greedy(model, p)
            res.append({"prompt_token_ids": p, "token_ids": toks, "logprobs": lps, "top2_gap": gaps})
        exp = {"case": f"llama_{ty}", "type": ty, "llama.cpp": a.commit, "tensor_types": types,
               "dequant": dq, "prompts": res, "bytes": os.path.getsize(path)}
        with open(os.path.join(a.out, f"{ty}.json"), "w") as f:
            json.dump(exp, f)
        print(f"{ty}: {os.path.getsize(path)} bytes, types {sorted(set(types.values()))}, "
              f"first tokens {res[-1]['token_ids'][:6]}")


if __name__ == "__main__":
    main()
