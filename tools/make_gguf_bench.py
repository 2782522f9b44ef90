#!/usr/bin/env python3
# make_gguf_bench.py: GGUF files of a real model shape with random weights, for speed benchmarks only
# (issue 15's rows: vllmc and llama.cpp's llama-bench read the same file). Run on the GPU machine with
# llama.cpp's gguf-py on PYTHONPATH (DEVICE.md); nothing here is a reference output.
#
#   make_gguf_bench.py OUT_DIR TOKENIZER_DIR [--shape qwen3-8b|qwen3-0.6b] [--types Q4_K_M,Q8_0,Q6_K,BF16]
#
# TOKENIZER_DIR holds the model's tokenizer.json (or tokenizer.json.gz) and tokenizer_config.json; the
# vocabulary goes into the file as convert_hf_to_gguf.py writes a Qwen2/3 one (tokenizer.ggml.model gpt2,
# pre qwen2, tokens padded to vocab_size with [PADn] of type UNUSED, added tokens CONTROL when special,
# merges, special ids, chat_template). Weights (BF16: N(0, 0.02) values): random bytes in each block type's layout with the f16
# scales set to small finite values, so that activations stay finite; norms 1. The tensor types of a
# mix follow llama.cpp b10095 src/llama-quant.cpp llama_tensor_get_type_impl: Q4_K_M = Q4_K with
# output.weight (token_embd.weight when tied) Q6_K and attn_v / ffn_down Q6_K on the layers use_more_bits picks (i < n/8, i >= 7n/8,
# (i - n/8) % 3 == 2); Q8_0, Q6_K and BF16: every matrix of that type.
import argparse, gzip, json, os, sys

import numpy as np
import gguf

SHAPES = {
    "qwen3-8b": dict(hidden=4096, inter=12288, layers=36, heads=32, kv_heads=8, head_dim=128, vocab=151936, tied=False),
    "qwen3-0.6b": dict(hidden=1024, inter=3072, layers=28, heads=16, kv_heads=8, head_dim=128, vocab=151936, tied=True),
}
Q = gguf.GGMLQuantizationType
FTYPE = {"Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
         "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K, "BF16": gguf.LlamaFileType.MOSTLY_BF16}
# f16 fields of each block (byte offsets) and the value range given to them
F16_FIELDS = {Q.Q8_0: [(0, 0.002, 0.004)], Q.Q4_K: [(0, 0.001, 0.002), (2, 0.0005, 0.001)],
              Q.Q6_K: [(208, 0.0002, 0.0004)]}


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_type(mix, name, layer, n_layer, tied):
    if mix == "Q8_0": return Q.Q8_0
    if mix == "Q6_K": return Q.Q6_K
    if mix == "BF16": return Q.BF16
    if name == "output" or (tied and name == "token_embd"): return Q.Q6_K
    if name in ("attn_v", "ffn_down") and use_more_bits(layer, n_layer): return Q.Q6_K
    return Q.Q4_K


class Pool:
    """One random buffer per block type; tensors are row slices of it (rotating offsets)."""
    def __init__(self, rng, max_bytes):
        self.rng, self.max_bytes, self.bufs, self.off = rng, max_bytes, {}, {}

    def rows(self, t, rows, cols):
        bs, ts = gguf.GGML_QUANT_SIZES[t]
        row_bytes = cols // bs * ts
        if t not in self.bufs:
            nblk = int(self.max_bytes) // ts
            if t == Q.BF16:  # N(0, 0.02) rounded down to bf16 (the top half of the f32)
                v = (self.rng.standard_normal(nblk, dtype=np.float32) * 0.02).view(np.uint32) >> 16
                b = v.astype(np.uint16).view(np.uint8).reshape(nblk, ts)
            else:
                b = np.frombuffer(self.rng.bytes(nblk * ts), dtype=np.uint8).reshape(nblk, ts).copy()
            for off, lo, hi in F16_FIELDS.get(t, []):
                b[:, off:off + 2] = self.rng.uniform(lo, hi, nblk).astype(np.float16).view(np.uint8).reshape(nblk, 2)
            self.bufs[t], self.off[t] = b.reshape(-1), 0
        buf = self.bufs[t]
        need = rows * row_bytes
        assert need <= buf.size, (t, rows, cols)
        start = self.off[t] if self.off[t] + need <= buf.size else 0
        start -= start % ts
        self.off[t] = (start + 7919 * ts) % max(1, buf.size - need + 1)
        return buf[start:start + need].reshape(rows, row_bytes)


def add_vocab(w, tok_dir, vocab_size):
    p = os.path.join(tok_dir, "tokenizer.json")
    tj = json.load(gzip.open(p + ".gz", "rt", encoding="utf-8")) if not os.path.exists(p) else json.load(open(p, encoding="utf-8"))
    tc = json.load(open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8"))
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    special = {}
    for a in tj.get("added_tokens", []):
        inv[a["id"]] = a["content"]
        special[a["id"]] = a.get("special", False)
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in inv:
            tokens.append(f"[PAD{i}]"); types.append(gguf.TokenType.UNUSED)
        elif i in special:
            tokens.append(inv[i]); types.append(gguf.TokenType.CONTROL if special[i] else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(inv[i]); types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    ids = {t: i for i, t in inv.items()}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(ids[tc.get("eos_token") or "<|im_end|>"])
    w.add_pad_token_id(ids[tc.get("pad_token") or "<|endoftext|>"])
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    if tc.get("chat_template"): w.add_chat_template(tc["chat_template"])


def write(out, tok_dir, shape, mix, seed):
    s = SHAPES[shape]
    rng = np.random.default_rng(seed)
    H, I, L, V, D = s["hidden"], s["inter"], s["layers"], s["vocab"], s["head_dim"]
    w = gguf.GGUFWriter(out, "qwen3")
    w.add_name(f"{shape} random ({mix}, vllm.c tools/make_gguf_bench.py)")
    w.add_file_type(FTYPE[mix])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_block_count(L)
    w.add_context_length(40960)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    add_vocab(w, tok_dir, V)
    # the largest matrix at Q8_0's 34 / 32 bytes per element (BF16: 2)
    pool = Pool(rng, V * H * (2 if mix == "BF16" else 17 / 16) + (1 << 20))
    ones = lambda n: np.ones(n, dtype=np.float32)
    def mat(name, layer, rows, cols):
        t = tensor_type(mix, name.split(".")[-2] if layer is not None else name.split(".")[0], layer or 0, L, s["tied"])
        w.add_tensor(name, pool.rows(t, rows, cols), raw_dtype=t)
    mat("token_embd.weight", None, V, H)
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(H))
        mat(p + "attn_q.weight", i, s["heads"] * D, H)
        mat(p + "attn_k.weight", i, s["kv_heads"] * D, H)
        mat(p + "attn_v.weight", i, s["kv_heads"] * D, H)
        mat(p + "attn_output.weight", i, H, s["heads"] * D)
        w.add_tensor(p + "attn_q_norm.weight", ones(D))
        w.add_tensor(p + "attn_k_norm.weight", ones(D))
        w.add_tensor(p + "ffn_norm.weight", ones(H))
        mat(p + "ffn_gate.weight", i, I, H)
        mat(p + "ffn_up.weight", i, I, H)
        mat(p + "ffn_down.weight", i, H, I)
    w.add_tensor("output_norm.weight", ones(H))
    if not s["tied"]: mat("output.weight", None, V, H)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"wrote {out}: {os.path.getsize(out) / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("tok_dir")
    ap.add_argument("--shape", default="qwen3-8b", choices=sorted(SHAPES))
    ap.add_argument("--types", default="Q4_K_M,Q8_0,Q6_K")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for mix in a.types.split(","):
        write(os.path.join(a.out_dir, f"{a.shape}-{mix}.gguf"), a.tok_dir, a.shape, mix, a.seed)
