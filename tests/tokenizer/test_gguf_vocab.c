/*
 * test_gguf_vocab.c: tok_load_gguf (tokenizers built from GGUF tokenizer.ggml.* metadata) against
 * llama.cpp's tokenizer test vectors: tests/fixtures/llamacpp-vocab/ggml-vocab-<name>.gguf with its
 * .inp / .out (llama.cpp's tests/test-tokenizer-0: every string encoded without special tokens must
 * give the .out ids exactly), decode(encode(x)) == x for every string, the special ids, add_bos
 * and special-token handling from the metadata, the chat template, and refusals (in-memory GGUF
 * files written here).
 *
 * Vocabularies checked (all strings exact): llama-spm, phi-3 (SentencePiece "llama"), gpt-2, mpt,
 * starcoder, refact, falcon, deepseek-coder, deepseek-llm (byte-level BPE "gpt2").
 * Not run: bert-bge (tokenizer.ggml.model "bert", WordPiece: the engine has no WordPiece model; the
 * test checks it is refused with VLLM_ERR_UNSUPPORTED).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/gguf.h"
#include "test.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/llamacpp-vocab"
#define SEP "\n__ggml_vocab_test__\n"

/* Parses one .out line "  1 2 3" into ids (malloc'd, count in *n). */
static bool parse_ids_line(const char *s, size_t len, int32_t **ids, size_t *n) {
    size_t cap = len / 2 + 1, k = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    size_t i = 0;
    while (i < len) {
        while (i < len && s[i] == ' ') i++;
        if (i >= len) break;
        long v = 0;
        size_t digits = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9' && digits < 10) v = v * 10 + (s[i++] - '0'), digits++;
        if (digits == 0 || v > INT32_MAX || (i < len && s[i] != ' ') || k >= cap) {
            free(a);
            return false;
        }
        a[k++] = (int32_t)v;
    }
    *ids = a;
    *n = k;
    return true;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "      %s [", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, i ? " %d" : "%d", (int)ids[i]);
    fprintf(stderr, "]\n");
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Opens fixtures/ggml-vocab-<name>.gguf and builds its tokenizer (NULL on failure, reported). */
static tokenizer *load(const char *name, gguf_file **gf) {
    char path[1024];
    snprintf(path, sizeof path, FIXTURES "/ggml-vocab-%s.gguf", name);
    *gf = NULL;
    tokenizer *tok = NULL;
    vllm_status st = gguf_open(path, gf);
    CHECK_MSG(st == VLLM_OK, "%s: gguf_open: %s", name, vllm_last_error());
    if (st) return NULL;
    st = tok_load_gguf(*gf, &tok);
    CHECK_MSG(st == VLLM_OK, "%s: tok_load_gguf: %s", name, vllm_last_error());
    return tok;
}

/* The .inp strings and .out ids of one vocabulary. */
typedef struct vectors {
    char *inp, *out;
    size_t n;
    const char **text;
    size_t *len;
    int32_t **ids;
    size_t *n_ids;
} vectors;

static void vectors_free(vectors *v) {
    for (size_t i = 0; i < v->n; i++) free(v->ids[i]);
    free(v->text);
    free(v->len);
    free(v->ids);
    free(v->n_ids);
    free(v->inp);
    free(v->out);
    memset(v, 0, sizeof *v);
}

static bool vectors_read(const char *name, vectors *v) {
    char path[1024];
    memset(v, 0, sizeof *v);
    snprintf(path, sizeof path, FIXTURES "/ggml-vocab-%s.gguf.inp", name);
    v->inp = t_slurp(path);
    snprintf(path, sizeof path, FIXTURES "/ggml-vocab-%s.gguf.out", name);
    v->out = t_slurp(path);
    CHECK_MSG(v->inp && v->out, "%s: cannot read the .inp / .out files", name);
    if (!v->inp || !v->out) return false;
    size_t cap = 0;
    for (const char *p = v->inp; (p = strstr(p, SEP)) != NULL; p += strlen(SEP)) cap++;
    v->text = calloc(cap + 1, sizeof *v->text);
    v->len = calloc(cap + 1, sizeof *v->len);
    v->ids = calloc(cap + 1, sizeof *v->ids);
    v->n_ids = calloc(cap + 1, sizeof *v->n_ids);
    if (!v->text || !v->len || !v->ids || !v->n_ids) return false;
    const char *p = v->inp, *o = v->out, *sep;
    while ((sep = strstr(p, SEP)) != NULL) {
        const char *eol = strchr(o, '\n');
        size_t olen = eol ? (size_t)(eol - o) : strlen(o);
        CHECK_MSG(*o || eol, "%s: .out has fewer lines than .inp has strings", name);
        if (!*o && !eol) return false;
        size_t i = v->n;
        bool ok = parse_ids_line(o, olen, &v->ids[i], &v->n_ids[i]);
        CHECK_MSG(ok, "%s: .out line %zu malformed", name, i + 1);
        if (!ok) return false;
        v->text[i] = p;
        v->len[i] = (size_t)(sep - p);
        v->n++;
        p = sep + strlen(SEP);
        o = eol ? eol + 1 : o + olen;
    }
    CHECK_MSG(*p == 0, "%s: trailing text after the last separator", name);
    CHECK_MSG(v->n > 0, "%s: no test strings", name);
    return v->n > 0;
}

/* Every string of the vocabulary's vectors: exact ids, and decode(encode(x)) == x. Returns the
 * number of strings that failed either. */
static int check_vectors(const char *name, const tokenizer *tok) {
    vectors v;
    if (!vectors_read(name, &v) || !tok) {
        vectors_free(&v);
        return 1;
    }
    int agree = 0, round = 0;
    for (size_t i = 0; i < v.n; i++) {
        int32_t *got = NULL;
        size_t n_got = 0;
        vllm_status st = tok_encode(tok, v.text[i], v.len[i], false, &got, &n_got);
        CHECK_MSG(st == VLLM_OK, "%s: string %zu: encode failed: %s", name, i + 1, vllm_last_error());
        if (st) continue;
        bool same = same_ids(v.ids[i], v.n_ids[i], got, n_got);
        if (same) {
            agree++;
        } else {
            int shown = (int)(v.len[i] < 200 ? v.len[i] : 200);
            fprintf(stderr, "  %s: string %zu (%zu bytes) \"%.*s\" differs\n", name, i + 1, v.len[i], shown, v.text[i]);
            print_ids("expected", v.ids[i], v.n_ids[i]);
            print_ids("got     ", got, n_got);
        }
        CHECK_MSG(same, "%s: string %zu: ids differ (above)", name, i + 1);
        char *text = NULL;
        size_t len = 0;
        st = tok_decode_ex(tok, got, n_got, false, false, &text, &len);
        CHECK_MSG(st == VLLM_OK, "%s: string %zu: decode failed: %s", name, i + 1, vllm_last_error());
        bool rt = st == VLLM_OK && len == v.len[i] && memcmp(text, v.text[i], len) == 0;
        if (rt) round++;
        CHECK_MSG(rt, "%s: string %zu: decode(encode(x)) = \"%s\", not x = \"%.*s\"", name, i + 1, text ? text : "",
                  (int)v.len[i], v.text[i]);
        free(text);
        free(got);
    }
    fprintf(stderr, "%s: %d/%zu strings give llama.cpp's ids, %d/%zu round trip\n", name, agree, v.n, round, v.n);
    int failed = (int)v.n - (agree < round ? agree : round);
    vectors_free(&v);
    return failed;
}

/* encode(text, add_special) == want */
static void check_encode(const char *name, const tokenizer *tok, const char *text, bool add_special,
                         const int32_t *want, size_t n_want) {
    int32_t *got = NULL;
    size_t n = 0;
    vllm_status st = tok_encode(tok, text, strlen(text), add_special, &got, &n);
    CHECK_MSG(st == VLLM_OK, "%s: encode(\"%s\"): %s", name, text, vllm_last_error());
    bool same = st == VLLM_OK && same_ids(want, n_want, got, n);
    if (!same && st == VLLM_OK) {
        fprintf(stderr, "  %s: encode(\"%s\", add_special=%d)\n", name, text, (int)add_special);
        print_ids("expected", want, n_want);
        print_ids("got     ", got, n);
    }
    CHECK_MSG(same, "%s: encode(\"%s\", add_special=%d) (above)", name, text, (int)add_special);
    free(got);
}

static void check_decode(const char *name, const tokenizer *tok, const int32_t *ids, size_t n, bool skip,
                         const char *want) {
    char *text = NULL;
    vllm_status st = tok_decode_ex(tok, ids, n, skip, false, &text, NULL);
    CHECK_MSG(st == VLLM_OK && strcmp(text, want) == 0, "%s: decode gave \"%s\", want \"%s\" (%s)", name,
              text ? text : "", want, st ? vllm_last_error() : "ok");
    free(text);
}

static void check_template(const char *name, const gguf_file *gf, const char *tmpl_prefix, const char *bos,
                           const char *eos) {
    char *tmpl = NULL, *b = NULL, *e = NULL;
    vllm_status st = tok_gguf_chat_template(gf, &tmpl, &b, &e);
    CHECK_MSG(st == VLLM_OK, "%s: tok_gguf_chat_template: %s", name, vllm_last_error());
    if (tmpl_prefix) CHECK_MSG(tmpl && strncmp(tmpl, tmpl_prefix, strlen(tmpl_prefix)) == 0, "%s: template %s", name,
                               tmpl ? tmpl : "(none)");
    else CHECK_MSG(tmpl == NULL, "%s: unexpected template", name);
    CHECK_MSG(b && bos && strcmp(b, bos) == 0, "%s: bos '%s', want '%s'", name, b ? b : "(none)", bos);
    CHECK_MSG(e && eos && strcmp(e, eos) == 0, "%s: eos '%s', want '%s'", name, e ? e : "(none)", eos);
    free(tmpl);
    free(b);
    free(e);
}

/* ------------------------------------------------------------------ */
/* Real vocabularies                                                   */
/* ------------------------------------------------------------------ */

/* First ids of the .out line for "Hello world" (string 11 of the shared .inp) with add_special. */
static void check_add_bos(const char *name, const tokenizer *tok, int32_t bos) {
    vectors v;
    if (!vectors_read(name, &v) || !tok) {
        vectors_free(&v);
        return;
    }
    for (size_t i = 0; i < v.n; i++) {
        if (v.len[i] != 11 || memcmp(v.text[i], "Hello world", 11) != 0) continue;
        int32_t want[64];
        size_t n = 0;
        if (bos >= 0) want[n++] = bos;
        for (size_t k = 0; k < v.n_ids[i] && n < 64; k++) want[n++] = v.ids[i][k];
        check_encode(name, tok, "Hello world", true, want, n);
        break;
    }
    vectors_free(&v);
}

static void test_real(void) {
    static const struct {
        const char *name;
        int bos, eos;
        bool add_bos;
    } vocabs[] = {
        {"llama-spm", 1, 2, true},           {"phi-3", 1, 32000, true},
        {"gpt-2", 50256, 50256, false},      {"mpt", 0, 0, false},
        {"starcoder", 0, 0, false},          {"refact", 0, 0, false},
        {"falcon", 11, 11, false},           {"deepseek-coder", 32013, 32014, true},
        {"deepseek-llm", 100000, 100001, true},
    };
    int failed_vocabs = 0;
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        gguf_file *gf = NULL;
        tokenizer *tok = load(vocabs[i].name, &gf);
        if (tok) {
            failed_vocabs += check_vectors(vocabs[i].name, tok) > 0;
            CHECK_MSG(tok_bos_id(tok) == vocabs[i].bos, "%s: bos %d", vocabs[i].name, tok_bos_id(tok));
            CHECK_MSG(tok_eos_id(tok) == vocabs[i].eos, "%s: eos %d", vocabs[i].name, tok_eos_id(tok));
            check_add_bos(vocabs[i].name, tok, vocabs[i].add_bos ? vocabs[i].bos : -1);
        } else {
            failed_vocabs++;
        }
        tok_free(tok);
        gguf_close(gf);
    }
    fprintf(stderr, "%d of %zu vocabularies failed\n", failed_vocabs, sizeof vocabs / sizeof vocabs[0]);
}

static void test_specials(void) {
    gguf_file *gf = NULL;
    tokenizer *tok = load("llama-spm", &gf);
    if (tok) {
        CHECK(tok_is_special(tok, 0) && tok_is_special(tok, 1) && tok_is_special(tok, 2));
        CHECK(!tok_is_special(tok, 15043));
        CHECK(tok_vocab_size(tok) == 32000);
        /* a control token in the text is matched, and the text after it gets the space prefix
         * (llama.cpp with parse_special, HF's Prepend per segment) */
        check_encode("llama-spm", tok, "<s>Hello", false, (const int32_t[]){1, 15043}, 2);
        check_encode("llama-spm", tok, "Hello</s>", true, (const int32_t[]){1, 15043, 2}, 3);
        check_decode("llama-spm", tok, (const int32_t[]){1, 15043}, 2, true, "Hello");
        check_decode("llama-spm", tok, (const int32_t[]){1, 15043}, 2, false, "<s> Hello");
        check_encode("llama-spm", tok, "", true, (const int32_t[]){1}, 1);
        check_encode("llama-spm", tok, "", false, NULL, 0);
        check_template("llama-spm", gf, NULL, "<s>", "</s>");
    }
    tok_free(tok);
    gguf_close(gf);

    tok = load("phi-3", &gf);
    if (tok) {
        /* "</s>" is user-defined in the file; llama.cpp makes it control by its text */
        CHECK(tok_is_special(tok, 2));
        CHECK(tok_is_special(tok, 32000) && tok_is_special(tok, 32007) && tok_is_special(tok, 32010));
        CHECK(tok_is_special(tok, 32011)); /* [PAD32011], token type unknown */
        /* Phi-3's special tokens strip the whitespace after them (llama.cpp's rule by model name) */
        check_encode("phi-3", tok, "<|user|>\nHi<|end|>", false, (const int32_t[]){32010, 6324, 32007}, 3);
        check_template("phi-3", gf, "{{ bos_token }}{% for message in messages %}", "<s>", "<|endoftext|>");
    }
    tok_free(tok);
    gguf_close(gf);

    tok = load("gpt-2", &gf);
    if (tok) {
        CHECK(tok_is_special(tok, 50256));
        check_encode("gpt-2", tok, "a<|endoftext|>", true, (const int32_t[]){64, 50256}, 2);
        check_decode("gpt-2", tok, (const int32_t[]){64, 50256}, 2, true, "a");
        check_decode("gpt-2", tok, (const int32_t[]){64, 50256}, 2, false, "a<|endoftext|>");
        check_template("gpt-2", gf, NULL, "<|endoftext|>", "<|endoftext|>");
    }
    tok_free(tok);
    gguf_close(gf);

    tok = load("mpt", &gf);
    if (tok) {
        /* user-defined runs of spaces: added tokens, not special, matched before the BPE */
        CHECK(!tok_is_special(tok, 50276));
        check_encode("mpt", tok, "a  b", false, (const int32_t[]){66, 50276, 67}, 3);
        check_decode("mpt", tok, (const int32_t[]){66, 50276, 67}, 3, true, "a  b");
    }
    tok_free(tok);
    gguf_close(gf);

    tok = load("deepseek-coder", &gf);
    if (tok) {
        CHECK(tok_is_special(tok, 32013) && tok_is_special(tok, 32014));
        CHECK(tok_is_special(tok, 32015)); /* <｜fim▁hole｜>: user-defined, a FIM marker by its text */
        CHECK(!tok_is_special(tok, 32021)); /* <|EOT|>: user-defined */
    }
    tok_free(tok);
    gguf_close(gf);

    /* bert-bge has vectors, but WordPiece is not supported */
    char path[1024];
    snprintf(path, sizeof path, FIXTURES "/ggml-vocab-bert-bge.gguf");
    CHECK_OK(gguf_open(path, &gf));
    if (gf) {
        EXPECT_ERR(tok_load_gguf(gf, &tok), VLLM_ERR_UNSUPPORTED, "'bert'", "WordPiece");
        CHECK(tok == NULL);
        fprintf(stderr, "bert-bge: not run (tokenizer.ggml.model 'bert', WordPiece, is refused: %s)\n",
                vllm_last_error());
    }
    gguf_close(gf);
}

/* ------------------------------------------------------------------ */
/* In-memory GGUF files                                                */
/* ------------------------------------------------------------------ */

typedef struct wbuf {
    unsigned char *d;
    size_t n, cap;
    uint64_t n_kv;
} wbuf;

static void w_bytes(wbuf *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        while (cap < w->n + n) cap *= 2;
        unsigned char *d = realloc(w->d, cap);
        if (!d) abort();
        w->d = d;
        w->cap = cap;
    }
    memcpy(w->d + w->n, p, n);
    w->n += n;
}
static void w_u32(wbuf *w, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    w_bytes(w, b, 4);
}
static void w_u64(wbuf *w, uint64_t v) {
    w_u32(w, (uint32_t)v);
    w_u32(w, (uint32_t)(v >> 32));
}
static void w_str(wbuf *w, const char *s) {
    w_u64(w, strlen(s));
    w_bytes(w, s, strlen(s));
}
static void w_key(wbuf *w, const char *key, uint32_t type) {
    w_str(w, key);
    w_u32(w, type);
    w->n_kv++;
}
static void kv_str(wbuf *w, const char *key, const char *val) {
    w_key(w, key, GGUF_TYPE_STRING);
    w_str(w, val);
}
static void kv_u32(wbuf *w, const char *key, uint32_t val) {
    w_key(w, key, GGUF_TYPE_UINT32);
    w_u32(w, val);
}
static void kv_bool(wbuf *w, const char *key, bool val) {
    w_key(w, key, GGUF_TYPE_BOOL);
    unsigned char b = val;
    w_bytes(w, &b, 1);
}
static void kv_strs(wbuf *w, const char *key, const char *const *vals, size_t n) {
    w_key(w, key, GGUF_TYPE_ARRAY);
    w_u32(w, GGUF_TYPE_STRING);
    w_u64(w, n);
    for (size_t i = 0; i < n; i++) w_str(w, vals[i]);
}
static void kv_f32s(wbuf *w, const char *key, const float *vals, size_t n) {
    w_key(w, key, GGUF_TYPE_ARRAY);
    w_u32(w, GGUF_TYPE_FLOAT32);
    w_u64(w, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &vals[i], 4);
        w_u32(w, u);
    }
}
static void kv_i32s(wbuf *w, const char *key, const int32_t *vals, size_t n) {
    w_key(w, key, GGUF_TYPE_ARRAY);
    w_u32(w, GGUF_TYPE_INT32);
    w_u64(w, n);
    for (size_t i = 0; i < n; i++) w_u32(w, (uint32_t)vals[i]);
}

/* The file: header (version 3, no tensors) + the key/values written into kvs. */
static unsigned char *w_file(wbuf *kvs, size_t *len) {
    wbuf f = {0};
    w_bytes(&f, "GGUF", 4);
    w_u32(&f, 3);
    w_u64(&f, 0);
    w_u64(&f, kvs->n_kv);
    w_bytes(&f, kvs->d, kvs->n);
    free(kvs->d);
    memset(kvs, 0, sizeof *kvs);
    *len = f.n;
    return f.d;
}

/* Builds the tokenizer of an in-memory GGUF (status returned, *tok NULL on failure). */
static vllm_status load_mem(wbuf *kvs, tokenizer **tok, gguf_file **gf, unsigned char **data) {
    size_t len;
    *data = w_file(kvs, &len);
    *tok = NULL;
    *gf = NULL;
    vllm_status st = gguf_open_memory(*data, len, gf);
    CHECK_MSG(st == VLLM_OK, "gguf_open_memory: %s", vllm_last_error());
    if (st) return st;
    return tok_load_gguf(*gf, tok);
}

static void done_mem(tokenizer *tok, gguf_file *gf, unsigned char *data) {
    tok_free(tok);
    gguf_close(gf);
    free(data);
}

#define U2581 "\xE2\x96\x81"

static void test_synthetic_spm(void) {
    /* a tiny SentencePiece vocabulary: merges come from the scores */
    static const char *const toks[] = {"<unk>", "<s>", "</s>", U2581, "a", "b", U2581 "a", "ab", U2581 "ab", "",
                                       "<0x63>"};
    static const float scores[] = {0, 0, 0, -1, -2, -3, -4, -0.5f, -5, 0, 0};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6};
    const size_t n = sizeof toks / sizeof toks[0];
    wbuf w = {0};
    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, n);
    kv_f32s(&w, "tokenizer.ggml.scores", scores, n);
    kv_i32s(&w, "tokenizer.ggml.token_type", types, n);
    kv_bool(&w, "tokenizer.ggml.add_bos_token", false);
    tokenizer *tok;
    gguf_file *gf;
    unsigned char *data;
    vllm_status st = load_mem(&w, &tok, &gf, &data);
    CHECK_MSG(st == VLLM_OK, "synthetic spm: %s", vllm_last_error());
    if (tok) {
        /* "▁ab": "ab" (-0.5) merges before "▁a" (-4), then "▁ab" */
        check_encode("synthetic spm", tok, "ab", true, (const int32_t[]){8}, 1);
        /* "ba": no merges; "c" by its byte token */
        check_encode("synthetic spm", tok, "bac", false, (const int32_t[]){3, 5, 4, 10}, 4);
        check_decode("synthetic spm", tok, (const int32_t[]){8, 3, 5, 4, 10}, 5, false, "ab bac");
        CHECK(tok_bos_id(tok) == 1 && tok_eos_id(tok) == 2);
        const char *p = tok_id_to_piece(tok, 9);
        CHECK_MSG(p && strcmp(p, "[EMPTY_9]") == 0, "empty token named %s", p ? p : "(null)");
    }
    done_mem(tok, gf, data);

    /* add_space_prefix false: no "▁" before the text */
    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, n - 2);
    kv_f32s(&w, "tokenizer.ggml.scores", scores, n - 2);
    kv_bool(&w, "tokenizer.ggml.add_space_prefix", false);
    st = load_mem(&w, &tok, &gf, &data);
    CHECK_MSG(st == VLLM_OK, "synthetic spm (no space prefix): %s", vllm_last_error());
    if (tok) {
        check_encode("synthetic spm", tok, "ab", true, (const int32_t[]){1, 7}, 2);
        check_encode("synthetic spm", tok, " ab", false, (const int32_t[]){8}, 1);
    }
    done_mem(tok, gf, data);
}

static void test_synthetic_bpe(void) {
    static const char *const toks[] = {"a", "b", "c", "ab", "bc", "<|endoftext|>"};
    static const char *const merges1[] = {"b c", "a b", "b c", "x y", "nospace"};
    static const char *const merges2[] = {"a b", "b c"};
    for (int k = 0; k < 2; k++) {
        wbuf w = {0};
        kv_str(&w, "tokenizer.ggml.model", "gpt2");
        kv_str(&w, "tokenizer.ggml.pre", "gpt-2");
        kv_strs(&w, "tokenizer.ggml.tokens", toks, 6);
        if (k == 0) kv_strs(&w, "tokenizer.ggml.merges", merges1, 5);
        else kv_strs(&w, "tokenizer.ggml.merges", merges2, 2);
        kv_u32(&w, "tokenizer.ggml.bos_token_id", 5);
        kv_u32(&w, "tokenizer.ggml.eos_token_id", 5);
        kv_bool(&w, "tokenizer.ggml.add_bos_token", true);
        tokenizer *tok;
        gguf_file *gf;
        unsigned char *data;
        vllm_status st = load_mem(&w, &tok, &gf, &data);
        CHECK_MSG(st == VLLM_OK, "synthetic bpe: %s", vllm_last_error());
        if (tok) {
            if (k == 0) check_encode("synthetic bpe", tok, "abc", true, (const int32_t[]){5, 0, 4}, 3);
            else check_encode("synthetic bpe", tok, "abc", false, (const int32_t[]){3, 2}, 2);
            CHECK(tok_is_special(tok, 5)); /* "<|endoftext|>": control by its text */
        }
        done_mem(tok, gf, data);
    }
}

/* No tokenizer.ggml.pre: llama.cpp's "default" regexes (with a warning), as llama.cpp. */
static void test_default_pre(void) {
    static const char *const toks[] = {"a", "b", "ab", "1", "2", "3", "12", "123", "!", "?", "!?"};
    static const char *const merges[] = {"a b", "1 2", "12 3", "! ?"};
    wbuf w = {0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 11);
    kv_strs(&w, "tokenizer.ggml.merges", merges, 4);
    tokenizer *tok;
    gguf_file *gf;
    unsigned char *data;
    vllm_status st = load_mem(&w, &tok, &gf, &data);
    CHECK_MSG(st == VLLM_OK, "default pre: %s", vllm_last_error());
    if (tok) {
        /* "[\p{P}...]+" isolates "!?" first; then "\p{N}+" and "[0-9][0-9][0-9]" keep "123" whole */
        check_encode("default pre", tok, "ab!?123", false, (const int32_t[]){2, 10, 7}, 3);
        CHECK(tok_bos_id(tok) == -1); /* llama.cpp's default bos id (11) is outside this vocabulary */
    }
    done_mem(tok, gf, data);
}

static void test_refusals(void) {
    static const char *const toks[] = {"a", "b", "ab"};
    static const char *const merges[] = {"a b"};
    tokenizer *tok;
    gguf_file *gf;
    unsigned char *data;
    wbuf w;

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "t5");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_UNSUPPORTED, "'t5'", "Unigram");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "rwkv");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_UNSUPPORTED, "'rwkv'", "tokenizer.ggml.model");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "no-such-pre");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_strs(&w, "tokenizer.ggml.merges", merges, 1);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_UNSUPPORTED, "'no-such-pre'", "tokenizer.ggml.pre");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "kimi-k2");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_strs(&w, "tokenizer.ggml.merges", merges, 1);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_UNSUPPORTED, "'kimi-k2'", "custom code");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.pre", "gpt-2");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_FORMAT, "tokenizer.ggml.model", "missing");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "gpt-2");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_FORMAT, "tokenizer.ggml.merges", "missing");
    done_mem(tok, gf, data);

    static const char *const dup[] = {"a", "b", "a"};
    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "gpt-2");
    kv_strs(&w, "tokenizer.ggml.tokens", dup, 3);
    kv_strs(&w, "tokenizer.ggml.merges", merges, 1);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_FORMAT, "duplicate token", "ids 0 and 2");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_f32s(&w, "tokenizer.ggml.scores", (const float[]){0, 0}, 2);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_FORMAT, "tokenizer.ggml.scores", "3 tokens");
    done_mem(tok, gf, data);

    /* add_bos_token without a BOS id (llama.cpp refuses it too) */
    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "chatglm-bpe");
    kv_strs(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_strs(&w, "tokenizer.ggml.merges", merges, 1);
    kv_bool(&w, "tokenizer.ggml.add_bos_token", true);
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_FORMAT, "add_bos_token", "bos_token_id");
    done_mem(tok, gf, data);

    w = (wbuf){0};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "gpt-2");
    kv_str(&w, "tokenizer.ggml.tokens", "not an array");
    EXPECT_ERR(load_mem(&w, &tok, &gf, &data), VLLM_ERR_FORMAT, "tokenizer.ggml.tokens", "array");
    done_mem(tok, gf, data);

    EXPECT_ERR(tok_load_gguf(NULL, &tok), VLLM_ERR_INVALID_ARG, "tok_load_gguf", "NULL");
}

int main(void) {
    test_real();
    test_specials();
    test_synthetic_spm();
    test_synthetic_bpe();
    test_default_pre();
    test_refusals();
    TEST_END();
}
