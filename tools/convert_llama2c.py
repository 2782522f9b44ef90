#!/usr/bin/env python3
"""
convert_llama2c.py: converts Karpathy's stories260K (llama2.c legacy checkpoint
stories260K.bin + tokenizer tok512.bin) into a Hugging Face Llama folder
(config.json, generation_config.json, model.safetensors in F32, tokenizer.json,
tokenizer_config.json, LICENSE, README.md), the model bundled with vllm.c.

Pure python 3 (struct/array/json, no numpy/torch), deterministic.

  python3 tools/convert_llama2c.py [--src DIR] [--out models/stories260K]
                                   [--fixture tests/fixtures/stories260K_tokens.jsonl]
                                   [--check]

Always: cross-checks llama2.c's score-driven encoder against an HF-style
merge-rank BPE encoder over a small corpus and writes the token fixture.
--check: reads the written model.safetensors back, runs a reference Llama
forward (HF rotate-half RoPE) greedily from BOS and asserts the model card's
text, which proves the q/k row permutation is right.
"""
import argparse
import array
import json
import math
import operator
import os
import shutil
import struct
import sys

SP = "\u2581"  # SentencePiece space mark "▁"
N_SPECIAL = 3  # <unk> <s> </s>
N_BYTES = 256  # <0x00>..<0xFF> at ids 3..258
FIRST_PIECE = N_SPECIAL + N_BYTES
EXPECTED_TEXT = "Once upon a time, there was a little girl named Lily."

# -----------------------------------------------------------------------------
# llama2.c checkpoint

def read_checkpoint(path):
    """Returns (header dict, {name: (shape, array('f'))}) of the llama2.c weights."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        sys.exit(f"{path}: too short for a llama2.c header")
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack_from("<7i", data, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    for name, v in (("dim", dim), ("hidden_dim", hidden), ("n_layers", n_layers),
                    ("n_heads", n_heads), ("n_kv_heads", n_kv), ("vocab_size", vocab),
                    ("seq_len", seq_len)):
        if v <= 0 or v > 1 << 20:
            sys.exit(f"{path}: bad header field {name}={v}")
    if dim % n_heads or n_heads % n_kv or (dim // n_heads) % 2:
        sys.exit(f"{path}: inconsistent heads: dim {dim} n_heads {n_heads} n_kv {n_kv}")
    hs = dim // n_heads
    kv_dim = n_kv * hs
    L = n_layers
    layout = [("token_embedding", (vocab, dim)), ("rms_att", (L, dim)),
              ("wq", (L, dim, dim)), ("wk", (L, kv_dim, dim)), ("wv", (L, kv_dim, dim)),
              ("wo", (L, dim, dim)), ("rms_ffn", (L, dim)), ("w1", (L, hidden, dim)),
              ("w2", (L, dim, hidden)), ("w3", (L, hidden, dim)), ("rms_final", (dim,)),
              ("freq_cis_real", (seq_len, hs // 2)), ("freq_cis_imag", (seq_len, hs // 2))]
    if not shared:
        layout.append(("wcls", (vocab, dim)))
    off = 28
    weights = {}
    for name, shape in layout:
        n = math.prod(shape)
        end = off + 4 * n
        if end > len(data):
            sys.exit(f"{path}: truncated in {name} (needs {end} bytes, file has {len(data)})")
        a = array.array("f")
        a.frombytes(data[off:end])
        if sys.byteorder != "little":
            a.byteswap()
        weights[name] = (shape, a)
        off = end
    if off != len(data):
        sys.exit(f"{path}: {len(data) - off} trailing bytes after the weights")
    hdr = dict(dim=dim, hidden=hidden, n_layers=L, n_heads=n_heads, n_kv=n_kv,
               vocab=vocab, seq_len=seq_len, shared=shared, head_size=hs, kv_dim=kv_dim)
    return hdr, weights


def layer_slice(weights, name, layer):
    shape, a = weights[name]
    n = math.prod(shape[1:])
    return a[layer * n:(layer + 1) * n]


def permute_rows(w, n_heads, dim1, dim2):
    """llama2.c (interleaved pairs) -> HF (rotate-half) row order of wq / wk, as
    transformers' convert_llama_weights_to_hf.py:
      w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
    i.e. new row h*hd + j*hd/2 + i = old row h*hd + 2*i + j."""
    hd = dim1 // n_heads
    out = array.array("f", bytes(4 * dim1 * dim2))
    for h in range(n_heads):
        for j in range(2):
            for i in range(hd // 2):
                src = (h * hd + 2 * i + j) * dim2
                dst = (h * hd + j * (hd // 2) + i) * dim2
                out[dst:dst + dim2] = w[src:src + dim2]
    return out


def hf_tensors(hdr, weights):
    """Ordered list of (HF name, shape, array('f'))."""
    dim, hidden, kv_dim = hdr["dim"], hdr["hidden"], hdr["kv_dim"]
    out = [("model.embed_tokens.weight", [hdr["vocab"], dim], weights["token_embedding"][1])]
    for l in range(hdr["n_layers"]):
        p = f"model.layers.{l}."
        wq = permute_rows(layer_slice(weights, "wq", l), hdr["n_heads"], dim, dim)
        wk = permute_rows(layer_slice(weights, "wk", l), hdr["n_kv"], kv_dim, dim)
        out += [
            (p + "input_layernorm.weight", [dim], layer_slice(weights, "rms_att", l)),
            (p + "self_attn.q_proj.weight", [dim, dim], wq),
            (p + "self_attn.k_proj.weight", [kv_dim, dim], wk),
            (p + "self_attn.v_proj.weight", [kv_dim, dim], layer_slice(weights, "wv", l)),
            (p + "self_attn.o_proj.weight", [dim, dim], layer_slice(weights, "wo", l)),
            (p + "post_attention_layernorm.weight", [dim], layer_slice(weights, "rms_ffn", l)),
            (p + "mlp.gate_proj.weight", [hidden, dim], layer_slice(weights, "w1", l)),
            (p + "mlp.down_proj.weight", [dim, hidden], layer_slice(weights, "w2", l)),
            (p + "mlp.up_proj.weight", [hidden, dim], layer_slice(weights, "w3", l)),
        ]
    out.append(("model.norm.weight", [dim], weights["rms_final"][1]))
    if not hdr["shared"]:
        out.append(("lm_head.weight", [hdr["vocab"], dim], weights["wcls"][1]))
    return out

# -----------------------------------------------------------------------------
# safetensors (F32 only)

def write_safetensors(path, tensors):
    header, off = {}, 0
    for name, shape, a in tensors:
        assert len(a) == math.prod(shape), name
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * len(a)]}
        off += 4 * len(a)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, a in tensors:
            if sys.byteorder != "little":
                a = array.array("f", a)
                a.byteswap()
            f.write(a.tobytes())


def read_safetensors(path):
    """{name: (shape, array('f'))}: an independent read-back for --check."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        a = array.array("f")
        a.frombytes(data[base + b:base + e])
        if sys.byteorder != "little":
            a.byteswap()
        assert len(a) == math.prod(info["shape"]), name
        out[name] = (info["shape"], a)
    return out

# -----------------------------------------------------------------------------
# tokenizer

def read_tok512(path, vocab_size):
    """Returns (raw pieces as in the file, decoded str; scores)."""
    with open(path, "rb") as f:
        data = f.read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    off, pieces, scores = 4, [], []
    for i in range(vocab_size):
        if off + 8 > len(data):
            sys.exit(f"{path}: truncated at token {i}")
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        if n < 0 or n > max_len or off + n > len(data):
            sys.exit(f"{path}: token {i}: bad length {n}")
        pieces.append(data[off:off + n].decode("utf-8"))
        scores.append(score)
        off += n
    if off != len(data):
        sys.exit(f"{path}: {len(data) - off} trailing bytes")
    return pieces, scores


def hf_vocab(raw_pieces):
    """HF piece strings, index = id."""
    v = ["<unk>", "<s>", "</s>"] + [p.replace(" ", SP) for p in raw_pieces[N_SPECIAL:]]
    for b in range(N_BYTES):
        if v[N_SPECIAL + b] != f"<0x{b:02X}>":
            sys.exit(f"tok512.bin: id {N_SPECIAL + b} is {v[N_SPECIAL + b]!r}, expected <0x{b:02X}>")
    if len(set(v)) != len(v):
        sys.exit("tok512.bin: duplicate pieces")
    return v


def make_merges(vocab, scores):
    """Every split (a, b) of a normal piece into two normal pieces, ordered by the
    merged piece's score descending (llama2.c merges the highest-scoring result
    first), then by id of a, then id of b. Special and byte tokens never merge."""
    ids = {p: i for i, p in enumerate(vocab) if i >= FIRST_PIECE}
    merges = []
    for m, piece in enumerate(vocab):
        if m < FIRST_PIECE:
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in ids and b in ids:
                merges.append((-scores[m], ids[a], ids[b], a, b))
    merges.sort()
    return [(a, b) for _, _, _, a, b in merges]


def tokenizer_json(vocab, merges):
    special = lambda i, s: {"id": i, "content": s, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP},
            {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SP}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {p: i for i, p in enumerate(vocab)},
                  "merges": [f"{a} {b}" for a, b in merges]},
    }


TOKENIZER_CONFIG = {
    "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
    "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer", "model_max_length": 512,
    "legacy": True, "clean_up_tokenization_spaces": False, "chat_template": None,
}


def encode_llama2c(text, raw_pieces, scores):
    """run.c encode() without BOS/EOS: dummy " " prefix, one token per UTF-8
    character (byte + 3 fallback), then repeatedly merge the adjacent pair whose
    concatenation is the highest-scoring piece (leftmost on ties)."""
    lookup = {}
    for i, p in enumerate(raw_pieces):
        lookup.setdefault(p, i)
    if not text:
        return []
    toks = [lookup[" "]]
    for ch in text:
        if ch in lookup:
            toks.append(lookup[ch])
        else:
            toks += [b + N_SPECIAL for b in ch.encode("utf-8")]
    while True:
        best, best_i, best_id = -1e10, -1, -1
        for i in range(len(toks) - 1):
            m = lookup.get(raw_pieces[toks[i]] + raw_pieces[toks[i + 1]])
            if m is not None and scores[m] > best:
                best, best_i, best_id = scores[m], i, m
        if best_i < 0:
            return toks
        toks[best_i:best_i + 2] = [best_id]


def encode_hf_bpe(text, vocab, merges):
    """What the tokenizer.json above does (HF tokenizers BPE): normalize, split into
    characters (unknown ones -> <0xXX> byte tokens), then repeatedly apply the
    lowest-rank merge present, leftmost occurrence first."""
    if not text:
        return []
    ids = {p: i for i, p in enumerate(vocab)}
    rank = {m: r for r, m in enumerate(merges)}
    s = SP + text.replace(" ", SP)
    sym = []
    for ch in s:
        if ch in ids and ids[ch] >= FIRST_PIECE:
            sym.append(ch)
        else:
            sym += [f"<0x{b:02X}>" for b in ch.encode("utf-8")]
    while True:
        best, best_i = None, -1
        for i in range(len(sym) - 1):
            r = rank.get((sym[i], sym[i + 1]))
            if r is not None and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            return [ids[p] for p in sym]
        sym[best_i:best_i + 2] = [sym[best_i] + sym[best_i + 1]]


def decode(ids, vocab):
    """The tokenizer.json decoder: ▁ -> space, byte tokens -> bytes, strip one
    leading space."""
    buf = bytearray()
    for i in ids:
        p = vocab[i]
        if N_SPECIAL <= i < FIRST_PIECE:
            buf.append(i - N_SPECIAL)
        elif i >= FIRST_PIECE:
            buf += p.replace(SP, " ").encode("utf-8")
    s = buf.decode("utf-8", errors="replace")
    return s[1:] if s.startswith(" ") else s


# Strings the fixture covers. Not included on purpose, because llama2.c and an HF
# tokenizer legitimately differ there: a literal "▁" in the text (HF normalizes
# it like a space), literal special tokens like "<s>" (HF splits them out as added
# tokens), NUL (a C string ends there).
CORPUS = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park.",
    "One day, she saw a big, red ball.",
    "Lily's mom said, \"Lily, let's go to the park.\"",
    "Tom and Sue went to the store to buy some milk and cookies.",
    "The cat sat on the mat. The dog barked at the cat!",
    "\"I'm sorry,\" said Ben. \"I didn't know what to do.\"",
    "Timmy's friend Billy came over and they played with blocks all afternoon.",
    "Why is the sky blue? Because the sun is bright!",
    "They were happy. The end.",
    "a",
    "I",
    " ",
    "  ",
    "\n",
    ".",
    "the",
    " the",
    "The",
    "hello world",
    "  leading spaces",
    "trailing spaces   ",
    " both sides ",
    "many     spaces   between    words",
    "line one\nline two\n\nline four",
    "\n\nstarts with newlines",
    "ends with a newline\n",
    "windows\r\nline\r\nendings",
    "tab\tseparated\tvalues",
    "0123456789",
    "There are 3 apples and 12 oranges, 1.5 kg in total.",
    "Call 555-0199 at 10:30 on 2024/01/15.",
    "x = 1 + 2 * 3 / 4 - 5 % 6",
    "Hello, world! How's it going? (fine) [ok] {yes} <tag> a|b ~c `d`",
    "email@example.com and https://example.org/path?q=1&r=2#frag",
    "$100 & 50% off *today* only + free #shipping @store ^_^",
    "\u201csmart quotes\u201d and \u2018single ones\u2019 \u2014 em dash \u2013 en dash\u2026",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 se\u00f1or \u00fcber \u00e0 la fa\u00e7ade",
    "\u00d1and\u00fa and \u00c5ngstr\u00f6m",
    "Stra\u00dfe, \u00e6sir, \u0153uvre",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u4e2d\u6587\u5b57\u7b26 and English",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "emoji \U0001F600\U0001F389 party",
    "\U0001F469\u200d\U0001F469\u200d\U0001F467 family",
    "flags \U0001F1EF\U0001F1F5 and \u2764\ufe0f",
    "zero\u200bwidth space",
    "no\u00a0break\u00a0space",
    "hair\u200aspace and thin\u2009space",
    "\u20ac5 \u2122 \u00a9 \u00ae \u00b0C",
    "mixed \u00e9\U0001F600\u4e2d a",
    "aaaaaaaaaaaaaaaa",
    "abababababab",
    "    ",
    "!!!???...,,,",
    "The little bird flew high in the sky. It was very happy and sang a song.",
    "\"Don't worry, Lily. We can help you.\" Her mom smiled.",
    "A\nB\nC",
    "control\x01char\x7f",
]


def check_tokenizer(raw_pieces, scores, vocab, merges):
    """Both encoders must agree on the corpus; returns [(text, ids)]."""
    rows = []
    for text in CORPUS:
        a = encode_llama2c(text, raw_pieces, scores)
        b = encode_hf_bpe(text, vocab, merges)
        if a != b:
            sys.exit(f"tokenizer mismatch on {text!r}:\n  llama2.c {a}\n  hf-bpe   {b}")
        back = decode(a, vocab)
        if back != text:
            sys.exit(f"decode(encode({text!r})) = {back!r}")
        rows.append((text, a))
    return rows

# -----------------------------------------------------------------------------
# reference forward (--check): HF Llama semantics on the converted tensors

def matvec(w, x, rows):
    """w (rows, len(x)) row-major, x (n) -> (rows)"""
    n = len(x)
    return [sum(map(operator.mul, w[r * n:(r + 1) * n], x)) for r in range(rows)]


def rmsnorm(x, w, eps):
    s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * s * g for v, g in zip(x, w)]


def rope_half(v, pos, n_heads, hd, theta):
    """HF rotate-half: pairs (i, i + hd/2) in each head."""
    out = list(v)
    half = hd // 2
    for i in range(half):
        freq = 1.0 / theta ** (2 * i / hd)
        c, s = math.cos(pos * freq), math.sin(pos * freq)
        for h in range(n_heads):
            a, b = h * hd + i, h * hd + i + half
            out[a] = v[a] * c - v[b] * s
            out[b] = v[b] * c + v[a] * s
    return out


def greedy_reference(cfg, t, n_new):
    dim, hd = cfg["hidden_size"], cfg["head_dim"]
    nh, nkv, hidden = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    eps, theta, V = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["vocab_size"]
    L = cfg["num_hidden_layers"]
    W = {k: v[1] for k, v in t.items()}
    emb = W["model.embed_tokens.weight"]
    head = W.get("lm_head.weight", emb)
    kcache = [[] for _ in range(L)]
    vcache = [[] for _ in range(L)]
    tok, out = 1, []
    for pos in range(n_new):
        x = list(emb[tok * dim:(tok + 1) * dim])
        for l in range(L):
            p = f"model.layers.{l}."
            h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
            q = rope_half(matvec(W[p + "self_attn.q_proj.weight"], h, nh * hd), pos, nh, hd, theta)
            k = rope_half(matvec(W[p + "self_attn.k_proj.weight"], h, nkv * hd), pos, nkv, hd, theta)
            v = matvec(W[p + "self_attn.v_proj.weight"], h, nkv * hd)
            kcache[l].append(k)
            vcache[l].append(v)
            att = []
            for hh in range(nh):
                g = hh // (nh // nkv)
                qh = q[hh * hd:(hh + 1) * hd]
                sc = [sum(map(operator.mul, qh, kk[g * hd:(g + 1) * hd])) / math.sqrt(hd)
                      for kk in kcache[l]]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                for d in range(hd):
                    att.append(sum(e[j] * vcache[l][j][g * hd + d] for j in range(len(e))) / z)
            o = matvec(W[p + "self_attn.o_proj.weight"], att, dim)
            x = [a + b for a, b in zip(x, o)]
            h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
            gate = matvec(W[p + "mlp.gate_proj.weight"], h, hidden)
            up = matvec(W[p + "mlp.up_proj.weight"], h, hidden)
            act = [gg / (1.0 + math.exp(-gg)) * u for gg, u in zip(gate, up)]
            x = [a + b for a, b in zip(x, matvec(W[p + "mlp.down_proj.weight"], act, dim))]
        x = rmsnorm(x, W["model.norm.weight"], eps)
        logits = matvec(head, x, V)
        tok = max(range(V), key=lambda i: logits[i])
        out.append(tok)
    return out

# -----------------------------------------------------------------------------

README = """# stories260K (bundled default model)

A real, tiny (260K parameters) Llama trained by Andrej Karpathy on TinyStories,
converted to a Hugging Face model folder so vllm.c can load it like any other
Llama checkpoint.

- Source: karpathy/tinyllamas (https://huggingface.co/karpathy/tinyllamas),
  files `stories260K.bin` and `tok512.bin` in llama2.c's legacy format, copied from
  the public repository github.com/ytmytm/llama2.c64 at commit 12b5bec.
- License: MIT (llama2.c), see LICENSE.
- Architecture: LlamaForCausalLM, hidden 64, 5 layers, 8 heads, 4 KV heads
  (head_dim 8), intermediate 172, vocab 512 (SentencePiece BPE with byte fallback),
  tied embeddings, rope_theta 10000, rms_norm_eps 1e-5, F32 weights.

## How it was converted

`python3 tools/convert_llama2c.py --check` (pure Python, deterministic):
- weights renamed to HF names; wq / wk rows permuted from llama2.c's interleaved
  RoPE pairs to HF's rotate-half layout (the permutation of transformers'
  convert_llama_weights_to_hf.py); the freq_cis tables are dropped; no
  lm_head.weight (the classifier shares the embedding);
- tokenizer.json in transformers' legacy LlamaTokenizerFast layout: pieces of
  tok512.bin with " " -> "\u2581", merges = every split of a piece into two pieces,
  ordered by the merged piece's score; checked against llama2.c's own encoder
  (tests/fixtures/stories260K_tokens.jsonl);
- `--check` runs a reference forward on the written safetensors and asserts the
  greedy continuation of BOS below.

## Greedy output (model card, `./run stories260K.bin -z tok512.bin -t 0.0`)

```
Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily's mom said, "Lily, let's go to the park." Lily was sad and didn't know what to do. She said, "I want to play with your ball, but I can't find it."
```
"""


def dump_json(path, obj, indent=2):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description="convert llama2.c stories260K to an HF folder")
    ap.add_argument("--src", default="/work/shared/models/stories260K")
    ap.add_argument("--out", default="models/stories260K")
    ap.add_argument("--fixture", default="tests/fixtures/stories260K_tokens.jsonl")
    ap.add_argument("--check", action="store_true", help="reference forward + greedy check")
    args = ap.parse_args()

    hdr, weights = read_checkpoint(os.path.join(args.src, "stories260K.bin"))
    raw_pieces, scores = read_tok512(os.path.join(args.src, "tok512.bin"), hdr["vocab"])
    vocab = hf_vocab(raw_pieces)
    merges = make_merges(vocab, scores)
    rows = check_tokenizer(raw_pieces, scores, vocab, merges)

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "vocab_size": hdr["vocab"], "hidden_size": hdr["dim"],
           "intermediate_size": hdr["hidden"], "num_hidden_layers": hdr["n_layers"],
           "num_attention_heads": hdr["n_heads"], "num_key_value_heads": hdr["n_kv"],
           "head_dim": hdr["head_size"], "max_position_embeddings": hdr["seq_len"],
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": hdr["shared"], "attention_bias": False, "mlp_bias": False,
           "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
           "torch_dtype": "float32"}

    os.makedirs(args.out, exist_ok=True)
    tensors = hf_tensors(hdr, weights)
    st_path = os.path.join(args.out, "model.safetensors")
    write_safetensors(st_path, tensors)
    dump_json(os.path.join(args.out, "config.json"), cfg)
    dump_json(os.path.join(args.out, "generation_config.json"), {"bos_token_id": 1, "eos_token_id": 2})
    dump_json(os.path.join(args.out, "tokenizer.json"), tokenizer_json(vocab, merges))
    dump_json(os.path.join(args.out, "tokenizer_config.json"), TOKENIZER_CONFIG)
    shutil.copyfile(os.path.join(args.src, "LICENSE.llama2c"), os.path.join(args.out, "LICENSE"))
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README)
    if args.fixture:
        os.makedirs(os.path.dirname(args.fixture) or ".", exist_ok=True)
        with open(args.fixture, "w", encoding="utf-8") as f:
            for text, ids in rows:
                f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")
    n_params = sum(len(a) for _, _, a in tensors)
    print(f"wrote {args.out}: {len(tensors)} tensors, {n_params} params, "
          f"{len(vocab)} tokens, {len(merges)} merges; tokenizer check ok on {len(rows)} strings")

    if args.check:
        t = read_safetensors(st_path)
        ids = greedy_reference(cfg, t, 40)
        text = decode(ids, vocab)
        print(f"greedy from BOS: {text!r}")
        if not text.startswith(EXPECTED_TEXT):
            sys.exit(f"--check FAILED: expected the text to start with {EXPECTED_TEXT!r}")
        print("check ok")


if __name__ == "__main__":
    main()
