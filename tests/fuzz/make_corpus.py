#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpora (tests/fuzz/corpus/<target>/) and the dictionaries
(tests/fuzz/<target>.dict) of the libFuzzer targets from files already in the repository
(models/stories260K, tests/fixtures, tests/tokenizer, tests/template, tests/server) plus a few
hand-written inputs, and the string literals the parsers compare against (read from src/).
Run from anywhere with python3 (standard library only); it rewrites both, deterministically:
    python3 tests/fuzz/make_corpus.py
Seed names are the first 16 hex digits of the seed's SHA-1 (as libFuzzer names its own finds).
"""
import hashlib
import json
import os
import re
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ = os.path.join(ROOT, "tests", "fuzz")


def rd(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def c_literals(path):
    """The string literals of a C file, adjacent ones joined, escapes decoded, as bytes."""
    src = rd(path).decode("utf-8")
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    out = []
    pending = None
    pos = 0
    tok = re.compile(r"'(?:[^'\\\n]|\\.)*'|" r'"((?:[^"\\\n]|\\.)*)"|(\S)', re.S)
    for m in tok.finditer(src, pos):
        if m.group(1) is None and m.group(2) is None:  # a character literal
            if pending is not None:
                out.append(pending)
                pending = None
        elif m.group(1) is not None:
            val = c_unescape(m.group(1))
            pending = val if pending is None else pending + val
        else:
            if pending is not None:
                out.append(pending)
                pending = None
    if pending is not None:
        out.append(pending)
    return out


def c_unescape(s):
    b = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, '"': 34, "'": 39, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}
    while i < len(s):
        c = s[i]
        if c != "\\":
            b += c.encode("utf-8")
            i += 1
            continue
        e = s[i + 1]
        if e == "x":
            m = re.match(r"[0-9a-fA-F]+", s[i + 2:])
            b.append(int(m.group(0), 16) & 0xFF)
            i += 2 + len(m.group(0))
        elif e in "01234567" and re.match(r"[0-7]{1,3}", s[i + 1:]).group(0) != "0":
            m = re.match(r"[0-7]{1,3}", s[i + 1:])
            b.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        elif e == "u":
            b += chr(int(s[i + 2:i + 6], 16)).encode("utf-8")
            i += 6
        else:
            b.append(simple.get(e, ord(e)))
            i += 2
    return bytes(b)


def st_file(tensors, meta=True, pad=True):
    """A safetensors file: tensors = [(name, dtype, shape, data bytes)]."""
    header = {"__metadata__": {"format": "pt"}} if meta else {}
    off = 0
    blob = b""
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def seeds_safetensors():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    bf16 = bytes([0x80, 0x3F, 0x00, 0x40, 0x40, 0x40])
    s = []
    one = st_file([("model.embed_tokens.weight", "BF16", [3], bf16), ("lm_head.weight", "F32", [2, 2], f32)])
    s.append(b"\x00" + one)
    s.append(b"\x00" + st_file([("a", "F16", [2, 1], b"\x00\x3c\x00\xc0"), ("i", "I64", [1], struct.pack("<q", 7)),
                                ("u", "U8", [3], b"abc"), ("b", "BOOL", [2], b"\x01\x00"),
                                ("f8", "F8_E4M3", [2], b"\x38\x40"), ("f4", "F4", [2], b"\x12"),
                                ("scalar", "F32", [], struct.pack("<f", 1.5)), ("empty", "F32", [0, 4], b""),
                                ("five", "U8", [1, 1, 1, 1, 2], b"xy"), ("d", "F64", [1], struct.pack("<d", 2.0))]))
    s.append(b"\x00" + st_file([("w", "BF16", [2, 2], bf16 + b"\x00\x00")], meta=False, pad=False))
    # the header of a real fixture model, its data cut to the first tensors
    real = rd("tests/fixtures/models/qwen3_qknorm/model.safetensors")
    (hlen,) = struct.unpack("<Q", real[:8])
    hdr = json.loads(real[8:8 + hlen])
    small = [(k, v["dtype"], [1] * len(v["shape"]), b"\x00" * (2 if v["dtype"] in ("BF16", "F16") else 4))
             for k, v in list(hdr.items()) if k != "__metadata__"][:12]
    s.append(b"\x00" + st_file(small))
    # sharded: index NUL len(shard1) shard1 shard2
    sh1 = st_file([("model.embed_tokens.weight", "BF16", [3], bf16)])
    sh2 = st_file([("lm_head.weight", "F32", [2, 2], f32)])
    index = json.dumps({"metadata": {"total_size": 22}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}, indent=2).encode()
    s.append(b"\x01" + index + b"\x00" + struct.pack("<H", len(sh1)) + sh1 + sh2)
    return s


SAFETENSORS_DICT = [b"__metadata__", b"dtype", b"shape", b"data_offsets", b"format", b"pt", b"weight_map",
                    b"metadata", b"total_size", b"model-00001-of-00002.safetensors",
                    b"model-00002-of-00002.safetensors", b"../", b"\x00\x00\x00\x00\x00\x00\x00",
                    b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"18446744073709551615", b"9223372036854775807",
                    b"4294967296", b"[0,0]", b"[]", b"-1"]
for dt in ["F32", "F16", "BF16", "I32", "I64", "U8", "F64", "U64", "U32", "I16", "U16", "I8", "BOOL", "F8_E4M3",
           "F8_E5M2", "F8_E8M0", "C64", "F6_E2M3", "F6_E3M2", "F4"]:
    SAFETENSORS_DICT.append(dt.encode())


# GGUF (llama.cpp's docs/gguf.md): little-endian; strings u64 length + bytes; value types 0..12
GG_U8, GG_I8, GG_U16, GG_I16, GG_U32, GG_I32, GG_F32, GG_BOOL, GG_STR, GG_ARR, GG_U64, GG_I64, GG_F64 = range(13)
GG_FMT = {GG_U8: "<B", GG_I8: "<b", GG_U16: "<H", GG_I16: "<h", GG_U32: "<I", GG_I32: "<i", GG_F32: "<f",
          GG_BOOL: "<B", GG_U64: "<Q", GG_I64: "<q", GG_F64: "<d"}


def gg_str(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(s)) + s


def gg_val(t, v):
    """A value of type t; arrays are (elem_type, [values])."""
    if t == GG_STR:
        return gg_str(v)
    if t == GG_ARR:
        et, vals = v
        return struct.pack("<IQ", et, len(vals)) + b"".join(gg_val(et, x) for x in vals)
    return struct.pack(GG_FMT[t], v)


def gguf_file(kvs, tensors, version=3, align=32):
    """kvs = [(key, type, value)]; tensors = [(name, ne, ggml type, data bytes)], laid out in order, aligned."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gg_str(k) + struct.pack("<I", t) + gg_val(t, v)
    off, blob = 0, b""
    for name, ne, ty, data in tensors:
        out += gg_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", ty, off)
        blob += data + b"\x00" * (-len(data) % align)
        off = len(blob)
    out += b"\x00" * (-len(out) % align)
    return out + blob


def gguf_parts(parts):
    """fuzz_gguf's framing of 1-3 parts: the count in byte 0, the lengths of all but the last."""
    return bytes([len(parts) - 1]) + b"".join(struct.pack("<I", len(p)) for p in parts[:-1]) + b"".join(parts)


def gguf_read_kvs(data, cut=8):
    """The metadata of a real GGUF file, arrays cut to their first `cut` elements."""
    pos = 24
    (n_kv,) = struct.unpack_from("<Q", data, 16)

    def rstr():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        s = data[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def rval(t):
        nonlocal pos
        if t == GG_STR:
            return rstr()
        if t == GG_ARR:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return (et, [rval(et) for _ in range(n)])
        (v,) = struct.unpack_from(GG_FMT[t], data, pos)
        pos += struct.calcsize(GG_FMT[t])
        return v

    kvs = []
    for _ in range(n_kv):
        k = rstr().decode()
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        v = rval(t)
        if t == GG_ARR:
            v = (v[0], v[1][:cut])
        kvs.append((k, t, v))
    return kvs


def seeds_gguf():
    s = []
    every = [("u8", GG_U8, 200), ("i8", GG_I8, -100), ("u16", GG_U16, 60000), ("i16", GG_I16, -30000),
             ("u32", GG_U32, 4000000000), ("i32", GG_I32, -2000000000), ("f32", GG_F32, 1.5), ("bool", GG_BOOL, 1),
             ("str", GG_STR, "hello"), ("u64", GG_U64, 2 ** 63 + 5), ("i64", GG_I64, -2 ** 62), ("f64", GG_F64, -3.25),
             ("tokenizer.ggml.tokens", GG_ARR, (GG_STR, ["<s>", "", "\u2581the"])),
             ("tokenizer.ggml.scores", GG_ARR, (GG_F32, [0.5, -1.0, 2.0])),
             ("tokenizer.ggml.token_type", GG_ARR, (GG_I32, [3, 1, 1])),
             ("arr.empty", GG_ARR, (GG_U8, [])),
             ("arr.nested", GG_ARR, (GG_ARR, [(GG_U16, [1, 2]), (GG_STR, ["x"])]))]
    s.append(b"\x00" + gguf_file(every, []))
    s.append(b"\x00" + gguf_file(every[:3], [], version=2))
    # tensors of several types, a custom alignment
    tens = [("w.f32", [4, 2], 0, b"\x01" * 32), ("w.f16", [8], 1, b"\x02" * 16), ("w.q4_0", [64, 2], 2, b"\x03" * 72),
            ("w.q4_k", [256, 1, 1, 2], 12, b"\x04" * 288), ("w.mxfp4", [32], 39, b"\x05" * 17),
            ("w.empty", [0, 3], 0, b""), ("w.unknown", [8], 31, b"")]
    s.append(b"\x00" + gguf_file([("general.architecture", GG_STR, "llama"), ("general.alignment", GG_U32, 64)], tens,
                                  align=64))
    # the metadata of the real fixtures (arrays cut short), the Llama one with its tensor infos shrunk
    llama = rd("tests/fixtures/gguf/ollama-llama-2-tiny-random.gguf")
    phi3 = rd("tests/fixtures/llamacpp-vocab/ggml-vocab-phi-3.gguf")
    small = [("token_embd.weight", [8, 8], 1, b"\x00" * 128), ("blk.0.attn_q.weight", [8, 8], 1, b"\x00" * 128),
             ("blk.0.attn_norm.weight", [8], 0, b"\x00" * 32), ("output.weight", [8, 8], 1, b"\x00" * 128)]
    s.append(b"\x00" + gguf_file(gguf_read_kvs(llama), small))
    s.append(b"\x00" + gguf_file(gguf_read_kvs(phi3), []))
    # a split set of three parts, in memory and as files
    def part(no, names):
        kvs = ([("general.architecture", GG_STR, "llama")] if no == 0 else []) + [
            ("split.no", GG_U16, no), ("split.count", GG_U16, 3), ("split.tensors.count", GG_I32, 4)]
        return gguf_file(kvs, [(n, [4], 0, b"\x07" * 16) for n in names])
    parts = [part(0, ["a"]), part(1, ["b", "c"]), part(2, ["d"])]
    s.append(gguf_parts(parts))
    s.append(bytes([gguf_parts(parts)[0] | 4]) + gguf_parts(parts)[1:])
    s.append(b"\x04" + gguf_file(every[:4], tens[:2]))
    return s


def seeds_gguf_model():
    """Tiny GGUF models of each family the mapping knows (hidden 32, 2 layers, 16 tokens), tensors of the shapes
    llama.cpp's converter writes, bytes from a fixed generator (their values do not matter to the mapping)."""
    F32, F16, Q8_0, BF16, MXFP4 = 0, 1, 8, 30, 39
    per = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q8_0: (32, 34), MXFP4: (32, 17)}
    rng = [12345]

    def data(ne, ty):
        n = 1
        for x in ne:
            n *= x
        blk, size = per[ty]
        out = bytearray()
        for _ in range(n // blk * size):
            rng[0] = (rng[0] * 1103515245 + 12345) & 0x7FFFFFFF
            out.append((rng[0] >> 16) & 0x3F)  # small positive bytes: finite F32 / F16 / BF16 values
        return bytes(out)

    def model(arch, extra, tensors, layers=2):
        kvs = [("general.architecture", GG_STR, arch), (arch + ".context_length", GG_U32, 64),
               (arch + ".embedding_length", GG_U32, 32), (arch + ".block_count", GG_U32, layers),
               (arch + ".feed_forward_length", GG_U32, 32), (arch + ".attention.head_count", GG_U32, 2),
               (arch + ".attention.head_count_kv", GG_U32, 1), (arch + ".attention.key_length", GG_U32, 16),
               (arch + ".attention.value_length", GG_U32, 16),
               (arch + ".attention.layer_norm_rms_epsilon", GG_F32, 1e-5), (arch + ".rope.freq_base", GG_F32, 1e4)]
        kvs += [(arch + "." + k if not k.startswith("general.") else k, t, v) for k, t, v in extra]
        tens = [("token_embd.weight", [32, 16], F16, None), ("output_norm.weight", [32], F32, None),
                ("output.weight", [32, 16], Q8_0, None)] + tensors
        return gguf_file(kvs, [(n, ne, ty, data(ne, ty)) for n, ne, ty, _ in tens])

    def attn(i, biases=False, qrows=32):
        t = [("blk.%d.attn_norm.weight" % i, [32], F32, None), ("blk.%d.attn_q.weight" % i, [32, qrows], BF16, None),
             ("blk.%d.attn_k.weight" % i, [32, 16], Q8_0, None), ("blk.%d.attn_v.weight" % i, [32, 16], BF16, None),
             ("blk.%d.attn_output.weight" % i, [32, 32], Q8_0, None)]
        if biases:
            t += [("blk.%d.attn_%s.bias" % (i, x), [n], F32, None) for x, n in (("q", qrows), ("k", 16), ("v", 16))]
        return t

    def mlp(i, norm="ffn_norm"):
        return [("blk.%d.%s.weight" % (i, norm), [32], F32, None), ("blk.%d.ffn_gate.weight" % i, [32, 32], Q8_0, None),
                ("blk.%d.ffn_up.weight" % i, [32, 32], BF16, None), ("blk.%d.ffn_down.weight" % i, [32, 32], Q8_0, None)]

    def experts(i, ff=32, ty=Q8_0, fused=False, bias=False):
        t = [("blk.%d.ffn_gate_inp.weight" % i, [32, 4], F32, None), ("blk.%d.ffn_down_exps.weight" % i, [ff, 32, 4], ty, None)]
        if fused:
            t.append(("blk.%d.ffn_gate_up_exps.weight" % i, [32, 2 * ff, 4], ty, None))
        else:
            t += [("blk.%d.ffn_gate_exps.weight" % i, [32, ff, 4], ty, None), ("blk.%d.ffn_up_exps.weight" % i, [32, ff, 4], ty, None)]
        if bias:
            t += [("blk.%d.ffn_gate_inp.bias" % i, [4], F32, None)] + [
                ("blk.%d.ffn_%s_exps.bias" % (i, x), [ff if x != "down" else 32, 4], F32, None) for x in ("gate", "up", "down")]
        return t

    def shexp(i, squeeze):
        return [("blk.%d.ffn_gate_inp_shexp.weight" % i, [32] if squeeze else [32, 1], F32, None),
                ("blk.%d.ffn_gate_shexp.weight" % i, [32, 32], Q8_0, None), ("blk.%d.ffn_up_shexp.weight" % i, [32, 32], BF16, None),
                ("blk.%d.ffn_down_shexp.weight" % i, [32, 32], Q8_0, None)]

    def gdn(i, next_=False):  # H_k 2, H_v 4, d_k 8, d_v 8: q|k 32 rows, v 32 rows
        t = [("blk.%d.attn_norm.weight" % i, [32], F32, None), ("blk.%d.attn_qkv.weight" % i, [32, 64], Q8_0, None),
             ("blk.%d.attn_gate.weight" % i, [32, 32], BF16, None), ("blk.%d.ssm_a" % i, [4], F32, None),
             ("blk.%d.ssm_dt.bias" % i, [4], F32, None), ("blk.%d.ssm_conv1d.weight" % i, [4, 64], F32, None),
             ("blk.%d.ssm_norm.weight" % i, [8], F32, None), ("blk.%d.ssm_out.weight" % i, [32, 32], Q8_0, None)]
        if next_:
            return t + [("blk.%d.ssm_ba.weight" % i, [32, 8], BF16, None)]
        return t + [("blk.%d.ssm_beta.weight" % i, [32, 4], BF16, None), ("blk.%d.ssm_alpha.weight" % i, [32, 4], F16, None)]

    ssm = [("ssm.conv_kernel", GG_U32, 4), ("ssm.state_size", GG_U32, 8), ("ssm.group_count", GG_U32, 2),
           ("ssm.time_step_rank", GG_U32, 4), ("ssm.inner_size", GG_U32, 32), ("rope.dimension_count", GG_U32, 4)]
    gated_attn = lambda i: attn(i, qrows=64) + [("blk.%d.attn_q_norm.weight" % i, [16], F32, None),
                                                 ("blk.%d.attn_k_norm.weight" % i, [16], F32, None)]
    s = []
    s.append(model("llama", [("rope.dimension_count", GG_U32, 16), ("vocab_size", GG_U32, 16)],
                   attn(0) + mlp(0) + attn(1) + mlp(1) + [("rope_freqs.weight", [8], F32, None)]))
    s.append(model("llama", [("expert_count", GG_U32, 4), ("expert_used_count", GG_U32, 2)],
                   attn(0) + experts(0, fused=True) + [("blk.0.ffn_norm.weight", [32], F32, None)] + attn(1) + experts(1) +
                   [("blk.1.ffn_norm.weight", [32], F32, None)]))
    s.append(model("qwen2moe", [("expert_count", GG_U32, 4), ("expert_used_count", GG_U32, 2),
                                ("expert_feed_forward_length", GG_U32, 32), ("expert_shared_feed_forward_length", GG_U32, 32)],
                   attn(0, True) + experts(0) + shexp(0, True) + [("blk.0.ffn_norm.weight", [32], F32, None)] +
                   attn(1, True) + experts(1) + shexp(1, False) + [("blk.1.ffn_norm.weight", [32], F32, None)]))
    s.append(model("gpt-oss", [("expert_count", GG_U32, 4), ("expert_used_count", GG_U32, 2),
                               ("expert_feed_forward_length", GG_U32, 32), ("attention.sliding_window", GG_U32, 8),
                               ("rope.scaling.type", GG_STR, "yarn"), ("rope.scaling.factor", GG_F32, 4.0),
                               ("rope.scaling.original_context_length", GG_U32, 16)],
                   [t for i in range(2) for t in attn(i, True) + experts(i, ty=MXFP4, bias=True) +
                    [("blk.%d.attn_sinks.weight" % i, [2], F32, None), ("blk.%d.attn_output.bias" % i, [32], F32, None),
                     ("blk.%d.post_attention_norm.weight" % i, [32], F32, None)]]))
    s.append(model("qwen35", ssm + [("attention.recurrent_layers", GG_ARR, (GG_BOOL, [1, 0, 0])),
                                    ("nextn_predict_layers", GG_U32, 1)],
                   gdn(0) + mlp(0, "post_attention_norm") + gated_attn(1) + mlp(1, "post_attention_norm"), layers=3))
    s.append(model("qwen35moe", ssm + [("expert_count", GG_U32, 4), ("expert_used_count", GG_U32, 2),
                                       ("full_attention_interval", GG_U32, 2), ("expert_feed_forward_length", GG_U32, 32)],
                   gdn(0) + experts(0) + shexp(0, False) + [("blk.0.post_attention_norm.weight", [32], F32, None)] +
                   gated_attn(1) + experts(1, fused=True) + shexp(1, True) + [("blk.1.post_attention_norm.weight", [32], F32, None)]))
    s.append(model("qwen3next", ssm + [("expert_count", GG_U32, 4), ("expert_used_count", GG_U32, 2),
                                       ("full_attention_interval", GG_U32, 2)],
                   gdn(0, True) + experts(0) + shexp(0, False) + [("blk.0.post_attention_norm.weight", [32], F32, None)] +
                   gated_attn(1) + experts(1) + shexp(1, False) + [("blk.1.post_attention_norm.weight", [32], F32, None)]))
    s.append(model("olmo2", [], [t for i in range(2) for t in attn(i) + mlp(i, "post_ffw_norm") +
                                 [("blk.%d.attn_q_norm.weight" % i, [32], F32, None), ("blk.%d.attn_k_norm.weight" % i, [16], F32, None),
                                  ("blk.%d.post_attention_norm.weight" % i, [32], F32, None)]]))
    s.append(model("granite", [("attention.scale", GG_F32, 0.25), ("embedding_scale", GG_F32, 2.0),
                               ("residual_scale", GG_F32, 0.5), ("logit_scale", GG_F32, 4.0)],
                   attn(0) + mlp(0) + attn(1) + mlp(1)))
    s.append(model("glm4", [("rope.dimension_count", GG_U32, 8)],
                   [t for i in range(2) for t in attn(i, True) + [("blk.%d.ffn_norm.weight" % i, [32], F32, None),
                    ("blk.%d.ffn_up.weight" % i, [32, 64], Q8_0, None), ("blk.%d.ffn_down.weight" % i, [32, 32], Q8_0, None),
                    ("blk.%d.post_attention_norm.weight" % i, [32], F32, None), ("blk.%d.post_ffw_norm.weight" % i, [32], F32, None)]]))
    mla = [("attention.kv_lora_rank", GG_U32, 32), ("attention.key_length", GG_U32, 40), ("attention.value_length", GG_U32, 32),
           ("attention.key_length_mla", GG_U32, 24), ("attention.value_length_mla", GG_U32, 16),
           ("attention.q_lora_rank", GG_U32, 32), ("rope.dimension_count", GG_U32, 8),
           ("leading_dense_block_count", GG_U32, 1), ("expert_count", GG_U32, 4), ("expert_used_count", GG_U32, 2),
           ("expert_shared_count", GG_U32, 1), ("expert_feed_forward_length", GG_U32, 32),
           ("expert_group_count", GG_U32, 2), ("expert_group_used_count", GG_U32, 1), ("expert_gating_func", GG_U32, 2),
           ("expert_weights_norm", GG_BOOL, 1), ("expert_weights_scale", GG_F32, 2.5), ("rope.scaling.type", GG_STR, "yarn"),
           ("rope.scaling.factor", GG_F32, 4.0), ("rope.scaling.original_context_length", GG_U32, 16),
           ("rope.scaling.yarn_log_multiplier", GG_F32, 0.1)]
    def mla_attn(i):  # H 2, N 16, R 8, V 16, L 32, QL 32
        return [("blk.%d.attn_norm.weight" % i, [32], F32, None), ("blk.%d.attn_q_a.weight" % i, [32, 32], Q8_0, None),
                ("blk.%d.attn_q_a_norm.weight" % i, [32], F32, None), ("blk.%d.attn_q_b.weight" % i, [32, 48], BF16, None),
                ("blk.%d.attn_kv_a_mqa.weight" % i, [32, 40], Q8_0, None), ("blk.%d.attn_kv_a_norm.weight" % i, [32], F32, None),
                ("blk.%d.attn_k_b.weight" % i, [16, 32, 2], BF16, None), ("blk.%d.attn_v_b.weight" % i, [32, 16, 2], Q8_0, None),
                ("blk.%d.attn_output.weight" % i, [32, 32], Q8_0, None)]
    s.append(model("deepseek2", mla, mla_attn(0) + mlp(0) + mla_attn(1) + experts(1) + [
        ("blk.1.ffn_norm.weight", [32], F32, None), ("blk.1.exp_probs_b.bias", [4], F32, None),
        ("blk.1.ffn_gate_shexp.weight", [32, 32], Q8_0, None), ("blk.1.ffn_up_shexp.weight", [32, 32], Q8_0, None),
        ("blk.1.ffn_down_shexp.weight", [32, 32], Q8_0, None)]))
    s.append(model("gemma3", [("attention.sliding_window", GG_U32, 8), ("rope.freq_base_swa", GG_F32, 1e4)],
                   [t for i in range(2) for t in attn(i) + mlp(i) + [("blk.%d.post_attention_norm.weight" % i, [32], F32, None),
                    ("blk.%d.post_ffw_norm.weight" % i, [32], F32, None), ("blk.%d.attn_q_norm.weight" % i, [16], F32, None),
                    ("blk.%d.attn_k_norm.weight" % i, [16], F32, None)]]))
    return s


GGUF_DICT = [b"GGUF", b"\x02\x00\x00\x00", b"\x03\x00\x00\x00", b"\x00\x00\x00\x03",
             b"\xff\xff\xff\xff\xff\xff\xff\xff", b"\x00\x00\x00\x00\x00\x00\x00\x80",
             b"\x00\x00\x00\x00\x00\x00\x00\x00", b"\x20\x00\x00\x00", b"\x40\x00\x00\x00",
             b"\x00\x01\x00\x00\x00\x00\x00\x00", b"\x01\x00\x00\x00\x00\x00\x00\x00",
             b"general.alignment", b"general.architecture", b"split.no", b"split.count", b"split.tensors.count",
             b"tokenizer.ggml.tokens", b"tokenizer.ggml.scores", b"token_embd.weight", b".weight", b"blk.0."]
for t in range(14):  # value types and ggml types as u32
    GGUF_DICT.append(struct.pack("<I", t))
for t in [15, 23, 30, 31, 34, 35, 39, 40]:
    GGUF_DICT.append(struct.pack("<I", t))


def seeds_hf_config():
    s = [rd("models/stories260K/config.json") + b"\x00" + rd("models/stories260K/generation_config.json")]
    fix = os.path.join(ROOT, "tests/fixtures/models")
    for d in sorted(os.listdir(fix)):
        cfg = rd(os.path.join("tests/fixtures/models", d, "config.json"))
        gen_path = os.path.join("tests/fixtures/models", d, "generation_config.json")
        s.append(cfg + (b"\x00" + rd(gen_path) if os.path.exists(os.path.join(ROOT, gen_path)) else b""))
    base = json.loads(rd("models/stories260K/config.json"))
    v = dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
             eos_token_id=[2, 3], dtype="bfloat16")
    s.append(json.dumps(v).encode() + b"\x00" + b'{"eos_token_id": [2, 7], "temperature": 0.6, "top_p": 0.9, "top_k": 20}')
    v = dict(base, architectures=["Qwen3ForCausalLM"], rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 1e6, "partial_rotary_factor": 0.5},
             use_sliding_window=False, torch_dtype=None, pad_token_id=None)
    s.append(json.dumps(v).encode())
    v = dict(base, architectures=["MistralForCausalLM"], sliding_window=4096, rope_scaling={"type": "default"})
    s.append(json.dumps(v).encode() + b"\x00{}")
    return s


def seeds_tokenizer_config():
    s = []
    for p in ["models/stories260K/tokenizer_config.json", "tests/fixtures/llama2-tokenizer/tokenizer_config.json",
              "tests/tokenizer/data/bytelevel/tokenizer_config.json", "tests/tokenizer/data/spm/tokenizer_config.json"]:
        s.append(rd(p))
    chat = rd("tests/server/stories260k_chat.jinja")
    s.append(rd("models/stories260K/tokenizer_config.json") + b"\x00" + chat)
    s.append(b"\x00" + chat)  # chat_template.jinja alone
    toks = json.loads(rd("tests/template/templates/tokens.json"))
    for name in ["llama3_1", "mistral_nemo"]:
        cfg = {"add_bos_token": True, "bos_token": {"content": toks[name]["bos_token"], "lstrip": False},
               "eos_token": toks[name]["eos_token"], "clean_up_tokenization_spaces": True,
               "chat_template": rd("tests/template/templates/%s.jinja" % name).decode()}
        s.append(json.dumps(cfg, indent=2).encode())
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "add_eos_token": True,
           "chat_template": [{"name": "tool_use", "template": "{{ tools }}"},
                             {"name": "default", "template": chat.decode()}]}
    s.append(json.dumps(cfg).encode())
    return s


def seeds_oai_request():
    s = set()
    for src in ("tests/server/test_oai_request.c", "tests/server/test_oai_agents.c"):
        for lit in c_literals(src):
            if lit.startswith(b"{") and len(lit) < 4096:
                s.add(lit)
    s.update([
        b'{"model":"stories","prompt":"Once upon a time","max_tokens":8,"temperature":0,"stream":true,'
        b'"stream_options":{"include_usage":true,"continuous_usage_stats":true}}',
        b'{"prompt":[[1,5,6],[7,8]],"n":2,"logprobs":3,"echo":true,"prompt_logprobs":2,"seed":7,"stop":["a","b"],'
        b'"stop_token_ids":[2],"logit_bias":{"5":-100,"6":2.5},"allowed_token_ids":[5,6,7],"bad_words":["x"]}',
        b'{"model":"alias","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text",'
        b'"text":"hi"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":'
        b'{"name":"f","arguments":"{\\"city\\":\\"Paris\\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"22"}],'
        b'"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}],'
        b'"tool_choice":"auto","logprobs":true,"top_logprobs":2,"max_completion_tokens":5,"n":2,"stream":true,'
        b'"chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":true,"request_id":"r1"}',
        b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],'
        b'"continue_final_message":true,"add_generation_prompt":false,"echo":true,"return_tokens_as_token_ids":true}',
        b'{"prompt":"hello","add_special_tokens":false,"return_token_strs":true}',
        b'{"model":"stories","tokens":[1,72,107,110,110]}',
        b'{"prompt":"abc","truncate_prompt_tokens":2,"min_tokens":1,"max_tokens":3,"ignore_eos":true,'
        b'"repetition_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":-0.5,"top_k":5,"top_p":0.5,"min_p":0.1,'
        b'"skip_special_tokens":false,"include_stop_str_in_output":true,"response_format":{"type":"text"}}',
    ])
    return sorted(s)


def seeds_http_client():
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"id\":\"cmpl-1\",\"choices\":[]}"
    chunks = [b'data: {"id":"cmpl-1","choices":[{"index":0,"text":"Once"}]}\n\n',
              b': keep-alive\n\n', b'data: {"choices":[{"index":0,"text":" upon",\n', b'data: "finish_reason":null}]}\r\n\r\n',
              b'event: usage\nid: 3\nretry: 10\n\n', b'data: [DONE]\n\n']
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nX-Trailer: 1\r\n\r\n"
    sse = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n"
           b"Connection: keep-alive\r\n\r\n" + chunked)
    close = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nline one\r\nline two\nlast line without newline"
    cont = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    err = (b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 59\r\n\r\n"
           b'{"error":{"message":"no","type":"NotFoundError","code":404}}')
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\n"
    s = [b"\x00" + ok, b"\x02" + sse, b"\x0a" + sse, b"\x03" + sse, b"\x01" + close, b"\x00" + cont,
         b"\x00" + err, b"\x04" + head + ok, b"\x01" + ok + ok + err,
         b"\x00HTTP/1.1 204 No Content\r\n\r\n" + ok,
         b"\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
         b"\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nuntil close",
         b"http://127.0.0.1:8000/v1", b"http://[::1]:65535/a/b/?q#f"]
    return s


HTTP_DICT = [b"HTTP/1.1 ", b"HTTP/1.0 ", b"200 OK", b"100 Continue", b"204", b"304", b"\r\n", b"\r\n\r\n",
             b"Content-Length: ", b"Transfer-Encoding: ", b"chunked", b"gzip", b"Connection: ", b"close",
             b"keep-alive", b"Content-Type: ", b"text/event-stream", b"application/json", b"data: ", b"data:",
             b"data: [DONE]", b": ping", b"event: ", b"id: ", b"retry: ", b"\n\n", b";ext=", b"0\r\n\r\n",
             b"ffffffffffffffff", b"18446744073709551616", b"http://", b"https://", b"[::1]", b":65536", b":0"]


def seeds_dataset():
    s = [b"\x01" + b'{"prompt": "Once upon a time", "output_len": 8}\n{"prompt_token_ids": [1, 403, 407], "output_tokens": 4}\n\n',
         b"\x00" + b'{"prompt": "a"}\r\n   \n{"prompt": "b", "output_len": 3}\n{"prompt": "c"}',
         b"\x06" + b'{"prompt_token_ids": [1, 2, 3]}\n{"prompt": "x"}\n{"prompt": "y"}\n{"prompt": "z"}\n',
         b"\x10" + b'{"text": "nul \\u0000 inside", "add_special_tokens": true}\n{"ids": [1, 2]}\n',
         b"\x00" + rd("tests/fixtures/stories260K_tokens.jsonl")[:2000].rsplit(b"\n", 1)[0] + b"\n"]
    return s


DATASET_DICT = [b"prompt", b"prompt_token_ids", b"output_len", b"output_tokens", b"text", b"ids",
                b"add_special_tokens", b"\n", b"\r\n", b"2147483647", b"2147483648", b"-1", b"\\u0000"]


def seeds_tokenizer():
    s = []
    for line in rd("tests/tokenizer/corpus/corpus.jsonl").decode().splitlines()[::16]:
        s.append(json.loads(line)["text"].encode())
    s.append("<s> [INST] h\u00e9llo \u4f60\u597d \U0001F600 </s>".encode())
    data = os.path.join(ROOT, "tests/tokenizer/data")
    for d in sorted(os.listdir(data)):
        tj = os.path.join("tests/tokenizer/data", d, "tokenizer.json")
        if not os.path.exists(os.path.join(ROOT, tj)):
            continue
        cfg = os.path.join("tests/tokenizer/data", d, "tokenizer_config.json")
        s.append(rd(tj) + (b"\x00" + rd(cfg) if os.path.exists(os.path.join(ROOT, cfg)) else b""))
    s.append(rd("models/stories260K/tokenizer.json") + b"\x00" + rd("models/stories260K/tokenizer_config.json"))
    return s


def seeds_template():
    s = []
    for p in ["tests/server/stories260k_chat.jinja", "tests/template/templates/llama3_1.jinja",
              "tests/template/templates/mistral_nemo.jinja", "tests/template/templates/gpt-oss.jinja"]:
        s.append(rd(p))
    slow = [b"range(100000)", b"ns.s ~ ns.s"]  # the step and output limit tests: a second each under ASan
    for lit in c_literals("tests/template/test_jinja.c"):
        if (b"{{" in lit or b"{%" in lit) and len(lit) < 2048 and not any(x in lit for x in slow):
            s.append(lit)
    return s


def seeds_ebnf():
    """Grammars of the structured-output tests, each alone and with a text to match after a NUL."""
    s = []
    for p in ["tests/structured/test_so_grammar.c", "tests/structured/test_so_match.c"]:
        for lit in c_literals(p):
            if b"::=" in lit and len(lit) < 4096:
                s.append(lit)
    s += [b'root ::= "{" [ \\n\\t]* "}"\x00{ }', b'root ::= root "a" | "b"\x00baa',
          b'root ::= x "c" x\nx ::= "" | "a" x\x00aca', b'root ::= [^a]+ [\\u4e00-\\u9fff]\x00b\xe4\xb8\xad',
          b'root ::= "a"{2,3} ("b" | "cd"){0,2}\x00aacd']
    return s


def literals_of(paths, pattern=rb"^[A-Za-z_][A-Za-z0-9_.\-]{1,40}$"):
    out = set()
    for p in paths:
        for lit in c_literals(p):
            if re.match(pattern, lit):
                out.add(lit)
    return sorted(out)


def quoted(entries):
    """Each entry alone and as a JSON string (with its quotes)."""
    return [e for x in entries for e in (x, b'"' + x + b'"')]


def write_dict(name, entries):
    lines = ["# fuzz_%s.dict: libFuzzer dictionary of fuzz_%s (written by make_corpus.py)" % (name, name)]
    seen = set()
    for e in entries:
        if e in seen or not e:
            continue
        seen.add(e)
        esc = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else "\\x%02X" % c for c in e)
        lines.append('"%s"' % esc)
    with open(os.path.join(FUZZ, "fuzz_%s.dict" % name), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_corpus(name, seeds):
    d = os.path.join(FUZZ, "corpus", "fuzz_" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for data in seeds:
        with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
            f.write(data)


def main():
    json_tokens = [b"{", b"}", b"[", b"]", b":", b",", b"null", b"true", b"false", b"\"\"", b"\\u0000", b"\\ud800",
                   b"1e308", b"-0", b"0.5", b"2147483647", b"2147483648", b"-2147483649", b"9223372036854775808"]
    jinja_tokens = [b"{{", b"}}", b"{%", b"%}", b"{#", b"#}", b"{%-", b"-%}", b"{{-", b"-}}", b"|", b"~", b"**", b"//"]
    oai_src = ["src/server/oai_request.c", "src/server/oai_chat.c", "src/server/oai_tokenize.c", "src/server/oai_field.c",
               "src/server/oai_responses_req.c", "src/server/oai_anthropic_req.c"]
    tok_src = ["src/tokenizer/%s" % f for f in sorted(os.listdir(os.path.join(ROOT, "src/tokenizer"))) if f.endswith(".c")]

    write_corpus("safetensors", seeds_safetensors())
    write_dict("safetensors", quoted(SAFETENSORS_DICT) + json_tokens)
    write_corpus("hf_config", seeds_hf_config())
    write_dict("hf_config", quoted(literals_of(["src/loader/hf_config.c"])) + json_tokens + [b"\x00"])
    write_corpus("tokenizer_config", seeds_tokenizer_config())
    write_dict("tokenizer_config", quoted(literals_of(["src/template/chat_template.c", "src/tokenizer/tokenizer.c"])) +
               literals_of(["src/template/jinja.c"]) + json_tokens + jinja_tokens + [b"\x00"])
    write_corpus("oai_request", seeds_oai_request())
    write_dict("oai_request", quoted(literals_of(oai_src) + [b"stories", b"alias"]) + json_tokens)
    write_corpus("http_client", seeds_http_client())
    write_dict("http_client", HTTP_DICT)
    write_corpus("dataset", seeds_dataset())
    write_dict("dataset", quoted(DATASET_DICT) + json_tokens)
    write_corpus("tokenizer", seeds_tokenizer())
    write_dict("tokenizer", quoted(literals_of(tok_src)) + json_tokens + [b"\x00", b"<s>", b"</s>", b"\xc4\xa0", b"\xe2\x96\x81"])
    write_corpus("gguf", seeds_gguf())
    write_dict("gguf", GGUF_DICT)
    write_corpus("gguf_model", seeds_gguf_model())
    write_dict("gguf_model", GGUF_DICT + literals_of(["src/loader/gguf_config.c"], rb"^[A-Za-z_][A-Za-z0-9_.\-]{1,60}$") +
               [b"blk.1.", b"yarn", b"linear"])
    write_corpus("ebnf", seeds_ebnf())
    write_dict("ebnf", [b"::=", b"root", b"|", b"(", b")", b"(=", b"[", b"[^", b"]", b"-", b"?", b"*", b"+", b"{", b"}",
                        b",", b"\"", b"\\x", b"\\u", b"\\U", b"\\n", b"\\0", b"\\", b"#", b"\n", b"\x00", b"{2,3}",
                        b"{1,}", b"basic_any", b"\xe4\xb8\xad"])
    write_corpus("template", seeds_template())
    write_dict("template", literals_of(["src/template/jinja.c"]) + jinja_tokens + [b"messages", b"role", b"content",
                                                                                  b"add_generation_prompt", b"bos_token",
                                                                                  b"eos_token", b"tools", b"tool_calls"])


if __name__ == "__main__":
    main()
