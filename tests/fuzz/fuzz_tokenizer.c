/*
 * fuzz_tokenizer.c: libFuzzer target for the tokenizer. Loads, once, the bundled stories260K
 * tokenizer (SentencePiece-style, byte fallback) and the hand-made ByteLevel ones of
 * tests/tokenizer/data, then for each input (its first 4 KiB for the first two checks, 256
 * bytes when it starts with '{'):
 *   - encodes it with every tokenizer: valid UTF-8 must encode, invalid UTF-8 must be
 *     VLLM_ERR_INVALID_ARG; for the Qwen-style ByteLevel tokenizer (NFC normalizer, no prefix
 *     space) decode(encode(x)) must equal NFC(x);
 *   - decodes the input read as token ids (in and out of range), with and without
 *     skip_special, and streams them through tok_stream (every piece valid UTF-8);
 *   - loads the input as a tokenizer.json, up to a NUL byte, with what follows the NUL as its
 *     tokenizer_config.json (and, if it loads, encodes and decodes with it).
 * The seed corpus (tests/fuzz/corpus/fuzz_tokenizer) holds text and small tokenizer.json files.
 * Any crash, leak, sanitizer report or abort() below is a bug.
 * Build and run (from the repo root, which holds the data it loads):
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc \
 *       tests/fuzz/fuzz_tokenizer.c src/core/error.c src/core/log.c src/tokenizer/[a-z]*.c \
 *       -o /tmp/fuzz_tokenizer -lm -lpthread $(pkg-config --cflags --libs jansson) -lonig -lutf8proc
 *   mkdir -p /tmp/fuzz_tok_corpus && /tmp/fuzz_tokenizer -max_total_time=120 -max_len=4096 /tmp/fuzz_tok_corpus
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "fuzz_util.h"
#include "tokenizer/internal.h"
#include "tokenizer/tokenizer.h"

enum { T_STORIES, T_BYTELEVEL, T_GPT2, T_SPM, T_MISC, T_COUNT };
static const char *DIRS[T_COUNT] = {
    FUZZ_ROOT "/models/stories260K",          FUZZ_ROOT "/tests/tokenizer/data/bytelevel",
    FUZZ_ROOT "/tests/tokenizer/data/gpt2",   FUZZ_ROOT "/tests/tokenizer/data/spm",
    FUZZ_ROOT "/tests/tokenizer/data/misc",
};
static tokenizer *g_tok[T_COUNT];

static void fail(const char *what, const uint8_t *data, size_t size) {
    fprintf(fuzz_quiet_stderr(), "fuzz_tokenizer: %s (input %zu bytes, first byte %d): %s\n", what, size, size ? data[0] : -1,
            vllm_last_error());
    abort();
}

static void load_all(void) {
    for (int i = 0; i < T_COUNT; i++) {
        if (tok_load_dir(DIRS[i], &g_tok[i]) != VLLM_OK) {
            fprintf(fuzz_quiet_stderr(), "fuzz_tokenizer: cannot load %s (run from the repo root): %s\n", DIRS[i],
                    vllm_last_error());
            abort();
        }
    }
}

static void check_encode(int t, const uint8_t *data, size_t size, bool valid) {
    const tokenizer *tok = g_tok[t];
    int32_t *ids = NULL;
    size_t n = 0;
    vllm_status st = tok_encode(tok, (const char *)data, size, t == T_STORIES, &ids, &n);
    if (!valid) {
        if (st != VLLM_ERR_INVALID_ARG) fail("invalid UTF-8 not rejected", data, size);
        return;
    }
    if (st != VLLM_OK) fail("encode failed", data, size);
    char *text = NULL;
    size_t len = 0;
    st = tok_decode_len(tok, ids, n, false, &text, &len);
    if (st != VLLM_OK) fail("decode of encoded ids failed", data, size);
    if (t == T_BYTELEVEL) { /* byte-level: exact round trip of the NFC form */
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t k = size ? utf8proc_map(data, (utf8proc_ssize_t)size, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                                  : 0;
        if (k < 0) fail("utf8proc NFC failed", data, size);
        if ((size_t)k != len || (k && memcmp(nfc, text, len) != 0)) {
            fprintf(fuzz_quiet_stderr(), "round trip: '%.*s' -> '%.*s'\n", (int)k, nfc ? (const char *)nfc : "", (int)len, text);
            fail("decode(encode(x)) != NFC(x)", data, size);
        }
        free(nfc);
    }
    free(text);
    free(ids);
}

static void check_ids(int t, const uint8_t *data, size_t size) {
    const tokenizer *tok = g_tok[t];
    size_t n = size / 2;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return;
    int vocab = tok_vocab_size(tok);
    bool in_range = true;
    for (size_t i = 0; i < n; i++) {
        int v = data[2 * i] | (data[2 * i + 1] << 8); /* 0..65535: mostly out of small vocabs */
        ids[i] = v < 0xF000 ? v % (vocab + 2) : v - 0xF800;
        in_range = in_range && ids[i] >= 0 && ids[i] < vocab;
    }
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        vllm_status st = tok_decode_len(tok, ids, n, skip, &text, &len);
        if (in_range && st != VLLM_OK) fail("decode of in-range ids failed", data, size);
        if (!in_range && st != VLLM_ERR_INVALID_ARG) fail("out-of-range id not rejected", data, size);
        if (st == VLLM_OK && !tok_utf8_valid(text, len)) fail("decode gave invalid UTF-8", data, size);
        free(text);
        /* stream: the first few ids as the prompt */
        tok_stream *s = NULL;
        size_t np = n < 3 ? n : 3;
        if (tok_stream_create(tok, ids, np, skip, &s) != VLLM_OK) fail("stream create failed", data, size);
        size_t ns = n < 256 ? n : 256; /* (two window decodes per id: keep runs fast) */
        for (size_t i = np; i <= ns; i++) {
            char *piece = NULL;
            size_t plen = 0;
            st = i < ns ? tok_stream_push(s, ids[i], &piece, &plen) : tok_stream_finish(s, &piece, &plen);
            if (st != VLLM_OK || !piece) fail("stream push failed", data, size);
            if (!tok_utf8_valid(piece, plen)) fail("stream piece is not valid UTF-8", data, size);
            free(piece);
        }
        tok_stream_free(s);
    }
    free(ids);
}

static void check_load(const uint8_t *data, size_t size) {
    tokenizer *tok = NULL;
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *config = nul ? (const char *)nul + 1 : NULL;
    size_t config_len = nul ? size - json_len - 1 : 0;
    if (tok_load_json((const char *)data, json_len, config, config_len, &tok) != VLLM_OK) {
        if (tok) fail("failed load returned a tokenizer", data, size);
        return;
    }
    static const char *text = "Hello world, \xE4\xB8\xAD\xE6\x96\x87 123 <s> \xF0\x9F\x98\x80";
    int32_t *ids = NULL;
    size_t n = 0;
    /* (a loaded tokenizer may still fail to encode, e.g. an unk_token missing from its vocab) */
    if (tok_encode(tok, text, strlen(text), true, &ids, &n) == VLLM_OK) {
        char *out = NULL;
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok_vocab_size(tok)) fail("encode gave an id out of range", data, size);
        if (tok_decode(tok, ids, n, false, &out) != VLLM_OK) fail("decode after load failed", data, size);
        free(out);
        free(ids);
    }
    tok_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr(); /* loader warnings */
    if (!g_tok[0]) load_all();
    /* text and ids: the first 4 KiB, or 256 bytes of what may be a tokenizer.json (the large
       inputs are there for the loader; encoding them five times over under the sanitizers would
       make every run slow) */
    size_t tmax = size && data[0] == '{' ? 256 : 4096;
    size_t tsize = size < tmax ? size : tmax;
    bool valid = tok_utf8_valid((const char *)data, tsize);
    for (int t = 0; t < T_COUNT; t++) check_encode(t, data, tsize, valid);
    check_ids(size & 1 ? T_STORIES : T_BYTELEVEL, data, tsize);
    check_ids(size % 3 == 0 ? T_MISC : T_SPM, data, tsize);
    check_load(data, size);
    return 0;
}
