#!/usr/bin/env python3
"""make_json_tiny.py: writes tests/fixtures/models/json_tiny, a random-weight Llama with a 135-token character vocabulary.

    python3 tools/make_json_tiny.py [--out tests/fixtures/models/json_tiny]

What it is for: the structured-output end-to-end test (tests/server/test_server_structured.c) samples JSON at
temperature 1 from a model whose logits are near-uniform. With a real 32k+ vocabulary a JSON string only closes
when one of a few quote tokens is drawn, so random outputs never end; with this ~135-token vocabulary a string
closes after ~30-100 characters, a number after a few digits and an array after a few items, so every
constrained output finishes within a few thousand tokens.

Pure Python 3 (no numpy / torch: the safetensors file is written with struct), deterministic (random.Random(SEED)),
well under a second. Files written:
  config.json             LlamaForCausalLM: hidden 32, 2 layers, 4 heads / 2 KV heads (head_dim 8), intermediate
                          64, vocab 135, max_position_embeddings 4096, rope_theta 1e4, untied, float32
  generation_config.json  bos 1, eos 2
  model.safetensors       F32; embeddings N(0, 1), every projection N(0, 0.3), norm weights 1 + 0.1 N(0, 1),
                          lm_head N(0, 0.02): logits have a spread of ~0.1 nat, so sampling is near-uniform over
                          whatever the grammar allows
  tokenizer.json          BPE without pre-tokenizer or normalizer, decoder Fuse (a "raw" vocabulary: a token's
                          bytes are its string; without a decoder HF joins tokens with spaces): <unk> <s> </s> (ids 0-2, special), the 95 printable ASCII characters,
                          "\\n", "\\t", then multi-character tokens that straddle JSON's token boundaries
                          ('": "', '", "', '}, {', '"}', '}]', '\\"', 'true', 'null', ...: closing tokens as well as
                          continuing ones, so arrays end as often as they go on; their BPE merges included so
                          the encoder produces them too) and three non-ASCII characters (é, €, and an emoji: 2, 3
                          and 4 UTF-8 bytes; an emoji is one code point but two UTF-16 units, which maxLength
                          counts once); unknown characters encode to <unk>; the post-processor adds <s>
  tokenizer_config.json   a plain chat template ("{role}: {content}\\n" per message, "assistant: " to generate)
  expected.json           the parity fixture (tests/model/test_parity.c, tests/cuda/test_cuda_parity.c read every
                          folder of tests/fixtures/models): greedy 12 new tokens for prompts of 1, 5, 17 and 40
                          random ids in [3, vocab), computed here by a float64 reference forward (HF Llama:
                          rotate-half RoPE, GQA, RMSNorm, SiLU MLP), with logprobs and top1 - top2 gaps as
                          tools/make_fixtures.py writes them
"""
import argparse
import json
import math
import os
import random
import struct
import sys

SEED = 20261207
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER = 32, 2, 4, 2, 8, 64
MAX_POS, ROPE_THETA, EPS = 4096, 10000.0, 1e-5
PROMPT_LENS, NEW_TOKENS = (1, 5, 17, 40), 12

SPECIALS = ["<unk>", "<s>", "</s>"]
# multi-character tokens, each with the merge (left, right) that makes it; the parts are earlier tokens
MERGED = [
    ('":', '"', ":"), ('": ', '":', " "), ('": "', '": ', '"'),
    ('",', '"', ","), ('", ', '",', " "), ('", "', '", ', '"'),
    ('{"', "{", '"'), ('"}', '"', "}"), ("},", "}", ","), ("}, ", "},", " "), ("}, {", "}, ", "{"),
    ("[]", "[", "]"), ("{}", "{", "}"), ('"]', '"', "]"), ("}]", "}", "]"), ("]}", "]", "}"), ("}}", "}", "}"),
    ("]]", "]", "]"), ('\\"', "\\", '"'), ("\\n", "\\", "n"),
    ("tr", "t", "r"), ("tru", "tr", "u"), ("true", "tru", "e"),
    ("fa", "f", "a"), ("fal", "fa", "l"), ("fals", "fal", "s"), ("false", "fals", "e"),
    ("nu", "n", "u"), ("nul", "nu", "l"), ("null", "nul", "l"),
    ("0.", "0", "."), ("e+", "e", "+"),
]
NON_ASCII = ["\u00e9", "\u20ac", "\U0001F600"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")


def vocabulary():
    toks = SPECIALS + [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t"] + [m[0] for m in MERGED] + NON_ASCII
    assert len(set(toks)) == len(toks), "duplicate token"
    return toks


def tensors(vocab_size, rng):
    """name -> (shape, flat list of floats), in HF Llama naming."""
    def normal(n, std):
        return [rng.gauss(0.0, std) for _ in range(n)]

    t = {"model.embed_tokens.weight": ([vocab_size, HIDDEN], normal(vocab_size * HIDDEN, 1.0))}
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ([HIDDEN], [1 + 0.1 * rng.gauss(0, 1) for _ in range(HIDDEN)])
        t[p + "self_attn.q_proj.weight"] = ([q, HIDDEN], normal(q * HIDDEN, 0.3))
        t[p + "self_attn.k_proj.weight"] = ([kv, HIDDEN], normal(kv * HIDDEN, 0.3))
        t[p + "self_attn.v_proj.weight"] = ([kv, HIDDEN], normal(kv * HIDDEN, 0.3))
        t[p + "self_attn.o_proj.weight"] = ([HIDDEN, q], normal(HIDDEN * q, 0.3))
        t[p + "post_attention_layernorm.weight"] = ([HIDDEN], [1 + 0.1 * rng.gauss(0, 1) for _ in range(HIDDEN)])
        t[p + "mlp.gate_proj.weight"] = ([INTER, HIDDEN], normal(INTER * HIDDEN, 0.3))
        t[p + "mlp.up_proj.weight"] = ([INTER, HIDDEN], normal(INTER * HIDDEN, 0.3))
        t[p + "mlp.down_proj.weight"] = ([HIDDEN, INTER], normal(HIDDEN * INTER, 0.3))
    t["model.norm.weight"] = ([HIDDEN], [1 + 0.1 * rng.gauss(0, 1) for _ in range(HIDDEN)])
    t["lm_head.weight"] = ([vocab_size, HIDDEN], normal(vocab_size * HIDDEN, 0.02))
    # round to float32 once, so the reference runs on exactly the stored values
    return {k: (s, list(struct.unpack(f"<{len(v)}f", struct.pack(f"<{len(v)}f", *v)))) for k, (s, v) in t.items()}


def write_safetensors(path, t):
    header, blobs, off = {}, [], 0
    for name in sorted(t):
        shape, vals = t[name]
        b = struct.pack(f"<{len(vals)}f", *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---- float64 reference forward (HF LlamaForCausalLM, eager attention) ----

def mat(t, name):
    shape, v = t[name]
    return [v[r * shape[1]:(r + 1) * shape[1]] for r in range(shape[0])]


def matvec(m, x):
    return [sum(a * b for a, b in zip(row, x)) for row in m]


def rmsnorm(x, w):
    s = 1.0 / math.sqrt(sum(a * a for a in x) / len(x) + EPS)
    return [a * s * g for a, g in zip(x, w)]


def rope(v, pos):
    half = HEAD_DIM // 2
    out = list(v)
    for i in range(half):
        f = pos / ROPE_THETA ** (2 * i / HEAD_DIM)
        c, s = math.cos(f), math.sin(f)
        a, b = v[i], v[i + half]
        out[i], out[i + half] = a * c - b * s, b * c + a * s
    return out


def forward_logits(t, ids):
    """the last position's logits for ids (full forward)"""
    emb = mat(t, "model.embed_tokens.weight")
    h = [list(emb[i]) for i in ids]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        wq, wk, wv, wo = (mat(t, p + f"self_attn.{n}_proj.weight") for n in "qkvo")
        qs, ks, vs = [], [], []
        for pos, x in enumerate(h):
            xn = rmsnorm(x, t[p + "input_layernorm.weight"][1])
            q, k, v = matvec(wq, xn), matvec(wk, xn), matvec(wv, xn)
            qs.append([rope(q[j * HEAD_DIM:(j + 1) * HEAD_DIM], pos) for j in range(HEADS)])
            ks.append([rope(k[j * HEAD_DIM:(j + 1) * HEAD_DIM], pos) for j in range(KV_HEADS)])
            vs.append([v[j * HEAD_DIM:(j + 1) * HEAD_DIM] for j in range(KV_HEADS)])
        wg, wu, wd = (mat(t, p + f"mlp.{n}_proj.weight") for n in ("gate", "up", "down"))
        nh = []
        for pos, x in enumerate(h):
            att = []
            for j in range(HEADS):
                g = j // (HEADS // KV_HEADS)
                sc = [sum(a * b for a, b in zip(qs[pos][j], ks[s][g])) / math.sqrt(HEAD_DIM) for s in range(pos + 1)]
                m = max(sc)
                e = [math.exp(a - m) for a in sc]
                z = sum(e)
                att += [sum(e[s] / z * vs[s][g][d] for s in range(pos + 1)) for d in range(HEAD_DIM)]
            x = [a + b for a, b in zip(x, matvec(wo, att))]
            xn = rmsnorm(x, t[p + "post_attention_layernorm.weight"][1])
            gate, up = matvec(wg, xn), matvec(wu, xn)
            act = [a / (1 + math.exp(-a)) * b for a, b in zip(gate, up)]
            nh.append([a + b for a, b in zip(x, matvec(wd, act))])
        h = nh
    xn = rmsnorm(h[-1], t["model.norm.weight"][1])
    return matvec(mat(t, "lm_head.weight"), xn)


def greedy(t, prompt):
    ids, toks, lps, gaps = list(prompt), [], [], []
    for _ in range(NEW_TOKENS):
        lg = forward_logits(t, ids)
        m = max(lg)
        lse = m + math.log(sum(math.exp(a - m) for a in lg))
        order = sorted(range(len(lg)), key=lambda i: (-lg[i], i))
        toks.append(order[0])
        lps.append(lg[order[0]] - lse)
        gaps.append(lg[order[0]] - lg[order[1]])
        ids.append(order[0])
    return toks, lps, gaps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures", "models", "json_tiny"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    toks = vocabulary()
    V = len(toks)

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": HIDDEN,
        "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "max_position_embeddings": MAX_POS,
        "rms_norm_eps": EPS, "rope_theta": ROPE_THETA, "tie_word_embeddings": False, "attention_bias": False,
        "mlp_bias": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }
    vocab = {s: i for i, s in enumerate(toks)}
    for tok, a, b in MERGED:
        assert a + b == tok and a in vocab and b in vocab, tok
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(SPECIALS)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for _, a, b in MERGED]},
    }
    tok_config = {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": MAX_POS,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
    }

    def dump(name, obj):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")

    t = tensors(V, rng)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    dump("config.json", config)
    dump("generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    dump("tokenizer.json", tokenizer)
    dump("tokenizer_config.json", tok_config)

    prng = random.Random(SEED + 1)
    results = []
    for n in PROMPT_LENS:
        p = [prng.randrange(3, V) for _ in range(n)]
        ids, lps, gaps = greedy(t, p)
        results.append({"prompt_token_ids": p, "token_ids": ids, "logprobs": lps, "top2_gap": gaps})
    expected = {"case": "json_tiny", "generator": "tools/make_json_tiny.py (float64 reference forward)",
                "python": sys.version.split()[0], "dtype": "float32",
                "rope": {"rope_type": "default", "rope_theta": ROPE_THETA}, "sliding_window": None,
                "sliding_window_effective": None, "new_tokens": NEW_TOKENS, "prompts": results}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    spread = [max(r["logprobs"]) for r in results]
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{out}: vocab {V}, {size} bytes; greedy logprobs up to {max(spread):.3f} "
          f"(uniform would be {-math.log(V):.3f})")


if __name__ == "__main__":
    main()
