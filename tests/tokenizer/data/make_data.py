#!/usr/bin/env python3
"""make_data.py: writes the hand-made tokenizer folders used by tests/tokenizer/test_tokenizer.c.

Each folder holds a tokenizer.json whose BPE vocab and merges are trained here on a small
corpus (a plain frequency BPE, deterministic), exercising one family of HF components:
  spm/        Llama/SentencePiece legacy layout: Prepend+Replace normalizer, byte fallback,
              TemplateProcessing <s>, Replace/ByteFallback/Fuse/Strip decoder (+ tokenizer_config.json)
  bytelevel/  Qwen-like: NFC, Split(regex)+ByteLevel(use_regex=false), ByteLevel decoder, added tokens
  gpt2/       GPT-2-like: ByteLevel(add_prefix_space, use_regex=true), template appending <|endoftext|>
  misc/       NFKC + Replace(regex), Digits + Punctuation + Metaspace(first), unk fusing, Roberta
              post-processor, Metaspace decoder, added tokens with lstrip/rstrip/single_word/normalized
  wp/         continuing_subword_prefix/end_of_word_suffix, ignore_merges, WhitespaceSplit, BPEDecoder
Expected ids/texts come from the reference implementation: see make_expected.js.
Usage: python3 tests/tokenizer/data/make_data.py   (from the repo root; python3 stdlib only)
"""
import json
import os
import re
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
META = "\u2581"

CORPUS = """Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big red ball under the tree. "Hello!" said the ball. Lily was very happy.
The quick brown fox jumps over the lazy dog. Hello world, hello again! How are you today?
I'm sure you'll see we've done it. They're here and it's fine; we'd like 12345 apples and 3.14 pies.
def main(): return x + y  # code with   spaces and\ttabs
Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe. The end.
"""

BYTE_TOKENS = ["<0x%02X>" % b for b in range(256)]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def train(words, n_merges, join=lambda a, b: a + b):
    """words: Counter of tuples of symbols. Returns the merges list (pairs) and merged tokens."""
    words = Counter(words)
    merges, made = [], []
    for _ in range(n_merges):
        pairs = Counter()
        for w, f in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += f
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        new = join(*best)
        made.append(new)
        nw = Counter()
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] += f
        words = nw
    return merges, made


def vocab_from(tokens):
    vocab = {}
    for t in tokens:
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab


def added(id_, content, special=True, normalized=None, lstrip=False, rstrip=False, single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": (not special) if normalized is None else normalized,
            "special": special}


def bpe(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(kw)
    return m


def write(name, tok, config=None):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    base = {"version": "1.0", "truncation": None, "padding": None}
    base.update(tok)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(base, f, ensure_ascii=False, indent=1)
        f.write("\n")
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
            f.write("\n")


def make_spm():
    text = META + CORPUS.replace(" ", META).replace("\n", META)
    words = Counter(tuple(w) for w in re.findall(META + "[^" + META + "]*", text))
    chars = sorted(set(text) - {"\n"})
    merges, made = train(words, 120)
    vocab = vocab_from(["<unk>", "<s>", "</s>"] + BYTE_TOKENS + chars + made)
    write("spm", {
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": bpe(vocab, [a + " " + b for a, b in merges], unk_token="<unk>", fuse_unk=True,
                     byte_fallback=True),
    }, {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer", "legacy": True})


QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_words():
    # Python's re lacks \p{L}: a close enough split for training merges (the tests use HF's output).
    rx = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")
    return Counter(tuple(B2U[b] for b in w.encode()) for w in rx.findall(CORPUS))


def make_bytelevel():
    merges, made = train(byte_words(), 150)
    base = [B2U[b] for b in range(256)]
    vocab = vocab_from(base + made)
    n = len(vocab)
    write("bytelevel", {
        "added_tokens": [added(n, "<|endoftext|>"), added(n + 1, "<|im_start|>"), added(n + 2, "<|im_end|>"),
                         added(n + 3, "<think>", special=False, normalized=False)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": bpe(vocab, [[a, b] for a, b in merges], ignore_merges=False),
    }, {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
        "tokenizer_class": "Qwen2Tokenizer"})


def make_gpt2():
    merges, made = train(byte_words(), 100)
    vocab = vocab_from([B2U[b] for b in range(256)] + made + ["<|endoftext|>"])
    eot = vocab["<|endoftext|>"]
    write("gpt2", {
        "added_tokens": [added(eot, "<|endoftext|>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}},
                                    {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
                           "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [eot],
                                                                "tokens": ["<|endoftext|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": bpe(vocab, [a + " " + b for a, b in merges]),
    })


def make_misc():
    text = CORPUS.lower()
    words = Counter()
    for w in re.findall(r"[a-z]+", text):
        words[tuple(META + w)] += 1
        words[tuple(w)] += 1
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,!?'\";:()#+-" + META))
    merges, made = train(words, 80)
    vocab = vocab_from(["<pad>", "<s>", "</s>", "<unk>", "<mask>"] + chars + made)
    n = len(vocab)
    write("misc", {
        "added_tokens": [added(0, "<pad>"), added(1, "<s>"), added(2, "</s>"), added(3, "<unk>"),
                         added(4, "<mask>", lstrip=True),
                         added(n, "[sw]", special=False, normalized=False, single_word=True),
                         added(n + 1, "hello world", special=False, normalized=True),
                         added(n + 2, "<r>", rstrip=True)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "Punctuation", "behavior": "Isolated"},
            {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": True}]},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                           "trim_offsets": True, "add_prefix_space": False},
        "decoder": {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": True},
        "model": bpe(vocab, [a + " " + b for a, b in merges], unk_token="<unk>", fuse_unk=True),
    })


def make_wp():
    pre, suf = "##", "</w>"
    words = Counter()
    for w in re.findall(r"\S+", CORPUS.lower()):
        syms = [c if i == 0 else pre + c for i, c in enumerate(w)]
        syms[-1] += suf
        words[tuple(syms)] += 1
    alphabet = set()
    for w in words:
        alphabet.update(w)
    merges, made = train(words, 120, join=lambda a, b: a + b[len(pre):])
    vocab = vocab_from(["[UNK]"] + sorted(alphabet) + made + ["hello", "fox"])
    write("wp", {
        "added_tokens": [added(0, "[UNK]")],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": {"type": "BPEDecoder", "suffix": suf},
        "model": bpe(vocab, [a + " " + b for a, b in merges], unk_token="[UNK]", fuse_unk=False,
                     continuing_subword_prefix=pre, end_of_word_suffix=suf, ignore_merges=True),
    })


def make_unicode():
    # Unicode 15 characters (U+1FA77 So, U+31350 Lo, U+11F50 Nd, U+11F00 Mn, ...) are unassigned
    # in older regex tables: removing the property classes shows which ones the regex knows.
    merges, made = train(byte_words(), 60)
    vocab = vocab_from([B2U[b] for b in range(256)] + made)
    for name, rx in (("unicode", r"\p{S}|[\p{Lo}\p{Mn}]|\d|[^\P{Lu}]"), ("unicode_w", r"[^\w\s]")):
        write(name, {
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Removed", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": bpe(vocab, [[a, b] for a, b in merges]),
        })


def make_opts():
    # Options the real tokenizers do not use, one folder each: normalizers NFD / NFKC / Strip,
    # Split behaviors Removed / MergedWithNext / Contiguous and invert, Whitespace, Digits
    # (individual_digits false), Metaspace split=false and prepend_scheme always / never,
    # decoders Replace (regex) and Strip (stop > 0).
    words = Counter()
    for w in re.findall(r"\S+", CORPUS):
        words[tuple(w)] += 1
        words[tuple(META + w)] += 1
    chars = sorted(set(CORPUS.replace("\n", "") + META + "0123456789"))
    merges, made = train(words, 80)
    vocab = vocab_from(["<unk>", "<s>", "</s>"] + chars + made)
    model = bpe(vocab, [a + " " + b for a, b in merges], unk_token="<unk>")
    specials = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    write("opts_a", {
        "added_tokens": specials,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Strip", "strip_left": True, "strip_right": True}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Whitespace"}, {"type": "Digits", "individual_digits": False}]},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                           "trim_offsets": False, "add_prefix_space": True},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"Regex": "[aeiou]+"}, "content": "_"},
            {"type": "Strip", "content": "e", "start": 0, "stop": 1}]},
        "model": model,
    })
    write("opts_b", {
        "added_tokens": specials,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFD"}, {"type": "Strip", "strip_left": False, "strip_right": True}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "[,.!?]"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"String": " "}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[aeiou]+"}, "behavior": "Isolated", "invert": True},
            {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": False}]},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": False},
        "model": model,
    })
    write("opts_c", {
        "added_tokens": specials,
        "normalizer": {"type": "Strip", "strip_left": True, "strip_right": False},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[A-Z][a-z]*"}, "behavior": "MergedWithNext", "invert": True},
            {"type": "Split", "pattern": {"String": "e"}, "behavior": "Removed", "invert": True},
            {"type": "Metaspace", "replacement": META, "prepend_scheme": "never", "split": True}]},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": META, "prepend_scheme": "never", "split": True},
        "model": model,
    })


if __name__ == "__main__":
    make_spm()
    make_bytelevel()
    make_gpt2()
    make_misc()
    make_wp()
    make_unicode()
    make_opts()
