/*
 * test_detok.c: incremental detokenization (tok_stream) on the bundled stories260K tokenizer
 * (SentencePiece-style, byte fallback) and the hand-made tokenizers of tests/tokenizer/data
 * (ByteLevel, Metaspace, BPEDecoder): every piece is valid UTF-8 and the pieces concatenate to
 * decode(prompt + generated) minus decode(prompt), for encoded texts (emoji, CJK, ZWJ, accents)
 * cut at every point and for random id sequences (where the full decode has no U+FFFD: HF's
 * ByteFallback rewrites a whole byte run as U+FFFD when it turns invalid, which no stream can
 * follow). Also: text is held back until a multi-byte character is complete, finish flushes an
 * unfinished one, out-of-vocabulary ids and skipped specials add nothing, argument errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tokenizer/internal.h"
#include "tokenizer/tokenizer.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif
#define DATA VLLM_SOURCE_DIR "/tests/tokenizer/data"

static const char *TEXTS[] = {
    "Once upon a time, there was a little girl named Lily.",
    "Emoji: \xF0\x9F\x98\x80\xF0\x9F\x91\x8D and a family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D"
    "\xF0\x9F\x91\xA7 here.",
    "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95 CJK \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E and \xED\x95\x9C"
    "\xEA\xB5\xAD\xEC\x96\xB4",
    "caf\xC3\xA9 na\xC3\xAFve e\xCC\x81 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4"
    "\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
    "  leading spaces\tand\ttabs\r\nlines  \n\n  trailing  ",
    "def f(x):\n    return x * 2  # code\n",
    "a",
    "",
};
#define N_TEXTS (sizeof TEXTS / sizeof TEXTS[0])

static tokenizer *load(const char *dir) {
    tokenizer *tok = NULL;
    vllm_status st = tok_load_dir(dir, &tok);
    CHECK_MSG(st == VLLM_OK, "loading %s: %s", dir, vllm_last_error());
    return tok;
}

static bool has_fffd(const char *s, size_t len) {
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(s + i, "\xEF\xBF\xBD", 3) == 0) return true;
    return false;
}

/* Streams ids[n_prompt:] after ids[:n_prompt]; returns the concatenated pieces (a tok_buf, so
 * U+0000 counts) and checks each piece. false on an API failure (reported). */
static bool stream_all(const tokenizer *tok, const int32_t *ids, size_t n_prompt, size_t n, bool skip,
                       const char *label, tok_buf *all) {
    tok_stream *s = NULL;
    vllm_status st = tok_stream_create(tok, ids, n_prompt, skip, &s);
    CHECK_MSG(st == VLLM_OK, "%s: create: %s", label, vllm_last_error());
    if (st) return false;
    tok_buf_append(all, "", 0);
    for (size_t i = n_prompt; i <= n; i++) {
        char *piece = NULL;
        size_t len = 0;
        st = i < n ? tok_stream_push(s, ids[i], &piece, &len) : tok_stream_finish(s, &piece, &len);
        CHECK_MSG(st == VLLM_OK && piece, "%s: push %zu: %s", label, i, vllm_last_error());
        if (st || !piece) break;
        CHECK_MSG(tok_utf8_valid(piece, len), "%s: piece %zu is not valid UTF-8", label, i);
        CHECK(len == strlen(piece) || memchr(piece, 0, len) != NULL);
        tok_buf_append(all, piece, len);
        free(piece);
    }
    tok_stream_free(s);
    return st == VLLM_OK;
}

/* The stream's text against the full decode's continuation, where it lines up: decode(prompt)
 * is a prefix of the full decode and (unless fffd_ok) the full decode has no U+FFFD. strict:
 * must line up. Returns whether a comparison was made. */
static bool check_continuation(const tokenizer *tok, const int32_t *ids, size_t n_prompt, size_t n, bool skip,
                               bool fffd_ok, bool strict, const char *label) {
    char *full = NULL, *head = NULL;
    size_t fl = 0, hl = 0;
    tok_buf got = {0};
    CHECK_OK(tok_decode_len(tok, ids, n, skip, &full, &fl));
    CHECK_OK(tok_decode_len(tok, ids, n_prompt, skip, &head, &hl));
    bool compared = false;
    if (stream_all(tok, ids, n_prompt, n, skip, label, &got) && full && head) {
        bool prefix = hl <= fl && memcmp(full, head, hl) == 0;
        if ((prefix && (fffd_ok || !has_fffd(full, fl))) || strict) {
            CHECK_MSG(prefix, "%s: decode(prompt) '%s' is not a prefix of '%s'", label, head, full);
            if (prefix)
                CHECK_MSG(got.len == fl - hl && memcmp(got.data, full + hl, got.len) == 0,
                          "%s (prompt %zu of %zu ids, skip %d): streamed '%s' (%zu bytes), want '%s' (%zu bytes)",
                          label, n_prompt, n, skip, got.data, got.len, full + hl, fl - hl);
            compared = true;
        }
    }
    free(full);
    free(head);
    tok_buf_free(&got);
    return compared;
}

/* Encoded texts, cut into prompt and generation at every point. */
static void test_texts(const tokenizer *tok, const char *name, bool fffd_ok) {
    for (size_t t = 0; t < N_TEXTS; t++) {
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK_OK(tok_encode(tok, TEXTS[t], strlen(TEXTS[t]), special, &ids, &n));
            char label[128];
            snprintf(label, sizeof label, "%s text %zu", name, t);
            for (size_t k = 0; k <= n; k++)
                for (int skip = 0; skip < 2; skip++) check_continuation(tok, ids, k, n, skip, fffd_ok, false, label);
            /* valid text cut anywhere: the prompt's decode may end in an unfinished character,
             * but with no prompt at all the stream must be the full decode */
            CHECK(check_continuation(tok, ids, 0, n, true, true, true, label));
            free(ids);
        }
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33) % n;
}

/* Random ids (biased towards byte tokens and specials to stress the hold-back logic). */
static void test_random(const tokenizer *tok, const char *name, bool fffd_ok, int rounds) {
    int vocab = tok_vocab_size(tok), compared = 0;
    int32_t ids[64];
    for (int r = 0; r < rounds; r++) {
        size_t n = 1 + rnd(40), k = rnd((uint32_t)n + 1);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(rnd(4) == 0 ? rnd(16) : rnd((uint32_t)vocab));
        char label[96];
        snprintf(label, sizeof label, "%s random round %d", name, r);
        compared += check_continuation(tok, ids, k, n, r & 1, fffd_ok, false, label);
    }
    CHECK_MSG(compared > rounds / 10, "%s: only %d of %d random sequences lined up", name, compared, rounds);
}

/* stories260K: an emoji spelled in byte tokens comes out whole, on its last byte. */
static void test_hold_back(const tokenizer *tok) {
    const char *text = "Hi \xF0\x9F\x98\x80!";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(tok_encode(tok, text, strlen(text), false, &ids, &n));
    if (!ids) return;
    tok_stream *s = NULL;
    CHECK_OK(tok_stream_create(tok, NULL, 0, false, &s));
    int32_t bytes[4] = {tok_piece_to_id(tok, "<0xF0>"), tok_piece_to_id(tok, "<0x9F>"), tok_piece_to_id(tok, "<0x98>"),
                        tok_piece_to_id(tok, "<0x80>")};
    CHECK(bytes[0] >= 0 && bytes[3] >= 0);
    char *piece = NULL;
    CHECK_OK(tok_stream_push(s, tok_piece_to_id(tok, "\xE2\x96\x81H"), &piece, NULL));
    CHECK_MSG(piece && strcmp(piece, "H") == 0, "first piece '%s'", piece ? piece : "(null)");
    free(piece);
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tok_stream_push(s, bytes[i], &piece, NULL));
        if (i < 3) CHECK_MSG(piece && piece[0] == '\0', "byte %d: held back, got '%s'", i, piece ? piece : "(null)");
        else CHECK_MSG(piece && strcmp(piece, "\xF0\x9F\x98\x80") == 0, "emoji piece '%s'", piece ? piece : "(null)");
        free(piece);
    }
    /* an unfinished sequence at the end: finish gives what the full decode gives (after a
     * non-byte token: HF's ByteFallback would turn the whole byte run, emoji too, into U+FFFD) */
    CHECK_OK(tok_stream_push(s, tok_piece_to_id(tok, "\xE2\x96\x81H"), &piece, NULL));
    CHECK_MSG(piece && strcmp(piece, " H") == 0, "piece '%s'", piece ? piece : "(null)");
    free(piece);
    CHECK_OK(tok_stream_push(s, bytes[0], &piece, NULL));
    CHECK(piece && piece[0] == '\0');
    free(piece);
    CHECK_OK(tok_stream_push(s, bytes[1], &piece, NULL));
    CHECK(piece && piece[0] == '\0');
    free(piece);
    CHECK_OK(tok_stream_finish(s, &piece, NULL));
    CHECK_MSG(piece && strcmp(piece, "\xEF\xBF\xBD\xEF\xBF\xBD") == 0, "finish '%s'", piece ? piece : "(null)");
    free(piece);
    CHECK_OK(tok_stream_finish(s, &piece, NULL)); /* nothing left */
    CHECK(piece && piece[0] == '\0');
    free(piece);
    tok_stream_free(s);
    free(ids);
}

static void test_edges(const tokenizer *tok) {
    tok_stream *s = NULL;
    char *piece = NULL;
    int32_t prompt[2] = {1, tok_piece_to_id(tok, "\xE2\x96\x81Once")};
    CHECK(prompt[1] > 0);
    CHECK_OK(tok_stream_create(tok, prompt, 2, true, &s));
    /* out of the vocabulary, negative, and a skipped special: no text */
    int32_t nothing[3] = {tok_vocab_size(tok), -5, 2};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(tok_stream_push(s, nothing[i], &piece, NULL));
        CHECK(piece && piece[0] == '\0');
        free(piece);
    }
    CHECK_OK(tok_stream_push(s, tok_piece_to_id(tok, "\xE2\x96\x81upon"), &piece, NULL));
    CHECK_MSG(piece && strcmp(piece, " upon") == 0, "got '%s'", piece ? piece : "(null)");
    free(piece);
    tok_stream_free(s);
    /* specials kept without skip_special */
    CHECK_OK(tok_stream_create(tok, prompt, 2, false, &s));
    CHECK_OK(tok_stream_push(s, 2, &piece, NULL));
    CHECK_MSG(piece && strcmp(piece, "</s>") == 0, "got '%s'", piece ? piece : "(null)");
    free(piece);
    tok_stream_free(s);
    /* argument errors */
    EXPECT_ERR(tok_stream_create(NULL, NULL, 0, false, &s), VLLM_ERR_INVALID_ARG, "tok_stream_create", "NULL");
    EXPECT_ERR(tok_stream_create(tok, NULL, 3, false, &s), VLLM_ERR_INVALID_ARG, "tok_stream_create", "NULL");
    EXPECT_ERR(tok_stream_push(NULL, 5, &piece, NULL), VLLM_ERR_INVALID_ARG, "tok_stream_push", "NULL");
    EXPECT_ERR(tok_stream_finish(NULL, &piece, NULL), VLLM_ERR_INVALID_ARG, "tok_stream_finish", "NULL");
    tok_stream_free(NULL);
}

/* A long generation: the window stays short (the id list is compacted), text still matches. */
static void test_long(const tokenizer *tok) {
    tok_buf text = {0};
    for (int i = 0; i < 400; i++) tok_buf_append(&text, "The cat sat on \xE7\x8C\xAB mat. ", 19);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(tok_encode(tok, text.data, text.len, false, &ids, &n));
    CHECK(n > 1000);
    if (ids) CHECK(check_continuation(tok, ids, 3, n, false, false, true, "long"));
    free(ids);
    tok_buf_free(&text);
}

int main(void) {
    static const char *dirs[] = {VLLM_SOURCE_DIR "/models/stories260K", DATA "/spm", DATA "/bytelevel",
                                 DATA "/gpt2", DATA "/misc", DATA "/wp"};
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        tokenizer *tok = load(dirs[d]);
        if (!tok) continue;
        const char *name = strrchr(dirs[d], '/') + 1;
        /* byte-level decoding (from_utf8_lossy) never rewrites text it already gave, so those
         * must line up even with U+FFFD in the text; ByteFallback may (see the top comment) */
        bool fffd_ok = strcmp(name, "bytelevel") == 0 || strcmp(name, "gpt2") == 0;
        test_texts(tok, name, fffd_ok);
        test_random(tok, name, fffd_ok, 400);
        if (d == 0) {
            test_hold_back(tok);
            test_edges(tok);
            test_long(tok);
        }
        tok_free(tok);
    }
    TEST_END();
}
