/*
 * test_tokenizer.c: the tokenizer against Hugging Face's reference outputs on the hand-made
 * tokenizers of tests/tokenizer/data (expected.jsonl, made by make_expected.js with the
 * `tokenizers` package), plus unit tests: GPT-2 byte map, UTF-8 handling, split behaviors,
 * byte fallback round trips, config-driven BOS/EOS, and malformed-file errors.
 */
#define _POSIX_C_SOURCE 200809L /* getline */
#include <jansson.h>
#include <pthread.h>
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

static const char *DIRS[] = {"spm", "bytelevel", "gpt2", "misc", "wp", "unicode", "unicode_w", "opts_a", "opts_b", "opts_c"};
#define N_DIRS (sizeof DIRS / sizeof DIRS[0])

static tokenizer *load(const char *name) {
    char path[512];
    snprintf(path, sizeof path, DATA "/%s", name);
    tokenizer *tok = NULL;
    vllm_status st = tok_load_dir(path, &tok);
    CHECK_MSG(st == VLLM_OK, "loading %s: %s", path, vllm_last_error());
    return tok;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Every line of expected.jsonl: encodings and decodings by HF tokenizers 0.23.2. */
static void test_reference(void) {
    tokenizer *toks[N_DIRS] = {0};
    for (size_t i = 0; i < N_DIRS; i++) toks[i] = load(DIRS[i]);
    FILE *f = fopen(DATA "/expected.jsonl", "r");
    CHECK_MSG(f != NULL, "open expected.jsonl");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    int n_enc = 0, n_dec = 0, fails = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t err;
        json_t *o = json_loads(line, JSON_ALLOW_NUL, &err);
        CHECK_MSG(o != NULL, "expected.jsonl: %s", err.text);
        if (!o) continue;
        const char *dir = json_string_value(json_object_get(o, "dir"));
        tokenizer *tok = NULL;
        for (size_t i = 0; i < N_DIRS; i++)
            if (strcmp(dir, DIRS[i]) == 0) tok = toks[i];
        json_t *jids = json_object_get(o, "ids");
        size_t n_ref = json_array_size(jids);
        int32_t *ref = malloc((n_ref + 1) * sizeof *ref);
        for (size_t i = 0; i < n_ref; i++) ref[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        json_t *jtext = json_object_get(o, "text");
        const char *text = json_string_value(jtext);
        size_t text_len = json_string_length(jtext);
        if (!tok) {
            /* load failure already reported */
        } else if (json_is_true(json_object_get(o, "decode"))) {
            bool skip = json_is_true(json_object_get(o, "skip_special"));
            char *out = NULL;
            vllm_status st = tok_decode(tok, ref, n_ref, skip, &out);
            /* (texts with a NUL byte compare up to it: the API returns a C string) */
            bool ok = st == VLLM_OK && out && strcmp(out, text) == 0;
            CHECK_MSG(ok, "[%s] decode (skip=%d) -> '%s', HF '%s' (%s)", dir, skip, out ? out : "(null)", text,
                      st ? vllm_last_error() : "ok");
            if (!ok && fails++ < 20) print_ids("ids", ref, n_ref);
            free(out);
            n_dec++;
        } else {
            bool add = json_is_true(json_object_get(o, "add_special"));
            int32_t *ids = NULL;
            size_t n = 0;
            vllm_status st = tok_encode(tok, text, text_len, add, &ids, &n);
            bool ok = st == VLLM_OK && n == n_ref && (n == 0 || memcmp(ids, ref, n * sizeof *ids) == 0);
            CHECK_MSG(ok, "[%s] encode (add_special=%d) '%s' (%s)", dir, add, text, st ? vllm_last_error() : "ok");
            if (!ok && fails++ < 20) {
                print_ids("got", ids, n);
                print_ids("HF ", ref, n_ref);
            }
            free(ids);
            n_enc++;
        }
        free(ref);
        json_decref(o);
    }
    free(line);
    fclose(f);
    CHECK(n_enc > 200 && n_dec > 300);
    for (size_t i = 0; i < N_DIRS; i++) tok_free(toks[i]);
}

static void test_bytelevel_map(void) {
    bool seen[0x200] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_bytelevel_cp((uint8_t)b);
        CHECK(cp < 0x200);
        if (cp >= 0x200) continue;
        CHECK_MSG(!seen[cp], "byte %d maps to a used code point U+%04X", b, cp);
        seen[cp] = true;
        CHECK_MSG(tok_bytelevel_byte(cp) == b, "byte %d -> U+%04X -> %d", b, cp, tok_bytelevel_byte(cp));
    }
    CHECK(tok_bytelevel_cp(' ') == 0x120);  /* 'Ġ' */
    CHECK(tok_bytelevel_cp('\n') == 0x10A); /* 'Ċ' */
    CHECK(tok_bytelevel_cp('A') == 'A');
    CHECK(tok_bytelevel_cp(0xAD) == 0x143);
    CHECK(tok_bytelevel_byte(0x144) == -1);
    CHECK(tok_bytelevel_byte(0x20) == -1);
}

static void check_lossy(const char *in, size_t len, const char *want) {
    tok_buf b = {0};
    CHECK_OK(tok_utf8_lossy(in, len, &b));
    CHECK_MSG(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0, "lossy -> '%s', want '%s'",
              b.data ? b.data : "", want);
    tok_buf_free(&b);
}

static void test_utf8(void) {
    static const char *bad[] = {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe4\xbd",
                                "ok\x80", "\xf0\x9f\x98"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!tok_utf8_valid(bad[i], strlen(bad[i])));
    CHECK(tok_utf8_valid("h\xc3\xa9llo \xe4\xbd\xa0 \xf0\x9f\x98\x80", 16));
    CHECK(tok_utf8_valid("a\0b", 3));
    /* String::from_utf8_lossy: one U+FFFD per maximal invalid subpart */
    check_lossy("\xe4\xbd", 2, "\xef\xbf\xbd");
    check_lossy("a\xf0\x9f\x98" "b", 5, "a\xef\xbf\xbd" "b");
    check_lossy("\xff\xfe", 2, "\xef\xbf\xbd\xef\xbf\xbd");
    check_lossy("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    check_lossy("\xe4\xbd\xa0\xe4", 4, "\xe4\xbd\xa0\xef\xbf\xbd");
    check_lossy("plain", 5, "plain");
}

/* HF's documented example: "the-final--countdown" split on "-". */
static void check_split(tok_split_behavior b, bool invert, const char *want) {
    const char *s = "the-final--countdown";
    tok_spans m = {0};
    tok_pieces out = {0};
    CHECK_OK(tok_literal_find("-", 1, s, strlen(s), &m));
    CHECK_OK(tok_split_apply(s, strlen(s), &m, b, invert, true, &out));
    char got[256] = "";
    for (size_t i = 0; i < out.n; i++) {
        if (i) strcat(got, "|");
        strncat(got, tok_piece_str(&out, i), out.items[i].len);
    }
    CHECK_MSG(strcmp(got, want) == 0, "split behavior %d invert %d: '%s', want '%s'", (int)b, invert, got, want);
    CHECK(out.n == 0 || out.items[0].at_start == (out.items[0].off == 0 && !invert));
    for (size_t i = 1; i < out.n; i++) CHECK(!out.items[i].at_start);
    tok_spans_free(&m);
    tok_pieces_free(&out);
}

static void test_split(void) {
    check_split(TOK_SPLIT_REMOVED, false, "the|final|countdown");
    check_split(TOK_SPLIT_ISOLATED, false, "the|-|final|-|-|countdown");
    check_split(TOK_SPLIT_MERGED_WITH_PREVIOUS, false, "the-|final-|-|countdown");
    check_split(TOK_SPLIT_MERGED_WITH_NEXT, false, "the|-final|-|-countdown");
    check_split(TOK_SPLIT_CONTIGUOUS, false, "the|-|final|--|countdown");
    check_split(TOK_SPLIT_REMOVED, true, "-|-|-");
}

static uint32_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

/* Random Unicode text survives encode -> decode through byte fallback (spm) and bytes (ByteLevel). */
static void test_roundtrip(void) {
    static const char *names[] = {"spm", "bytelevel", "gpt2"};
    for (size_t t = 0; t < 3; t++) {
        tokenizer *tok = load(names[t]);
        if (!tok) continue;
        uint64_t seed = 42 + t;
        for (int iter = 0; iter < 200; iter++) {
            tok_buf text = {0};
            int n_chars = 1 + (int)(rng_next(&seed) % 40);
            for (int i = 0; i < n_chars; i++) {
                uint32_t r = rng_next(&seed) % 100, cp;
                if (r < 50) cp = "abcdefghij klmnop ,.!"[rng_next(&seed) % 21];
                else if (r < 60) cp = 0x20 + rng_next(&seed) % 0x5F;
                else if (r < 75) cp = 0xA0 + rng_next(&seed) % 0x700;
                else if (r < 90) cp = 0x4E00 + rng_next(&seed) % 0x5000;
                else cp = 0x1F300 + rng_next(&seed) % 0x300;
                tok_buf_append_cp(&text, cp);
            }
            /* gpt2 prefixes a space (add_prefix_space) that its decoder keeps: start with one */
            const char *in = text.data;
            size_t in_len = text.len;
            if (t == 2 && in[0] != ' ') {
                tok_buf sp = {0};
                tok_buf_append(&sp, " ", 1);
                tok_buf_append(&sp, text.data, text.len);
                tok_buf_free(&text);
                text = sp;
                in = text.data;
                in_len = text.len;
            }
            int32_t *ids = NULL;
            size_t n = 0;
            char *out = NULL;
            CHECK_OK(tok_encode(tok, in, in_len, false, &ids, &n));
            CHECK_OK(tok_decode(tok, ids, n, false, &out));
            bool ok = out && strlen(out) == in_len && memcmp(out, in, in_len) == 0;
            CHECK_MSG(ok, "[%s] round trip of '%s' gave '%s'", names[t], in, out ? out : "(null)");
            free(ids);
            free(out);
            tok_buf_free(&text);
        }
        tok_free(tok);
    }
}

static void test_spm_api(void) {
    tokenizer *tok = load("spm");
    if (!tok) return;
    CHECK(tok_bos_id(tok) == 1);
    CHECK(tok_eos_id(tok) == 2);
    CHECK(tok_is_special(tok, 0) && tok_is_special(tok, 1) && tok_is_special(tok, 2));
    CHECK(!tok_is_special(tok, 3) && !tok_is_special(tok, -1) && !tok_is_special(tok, 1 << 20));
    CHECK(strcmp(tok_id_to_piece(tok, 1), "<s>") == 0);
    CHECK(strcmp(tok_id_to_piece(tok, 3), "<0x00>") == 0);
    CHECK(tok_id_to_piece(tok, -1) == NULL && tok_id_to_piece(tok, tok_vocab_size(tok)) == NULL);
    CHECK(tok_piece_to_id(tok, "<0xF0>") == 3 + 0xF0);
    CHECK(tok_piece_to_id(tok, "</s>") == 2);
    CHECK(tok_piece_to_id(tok, "no such piece") == -1);
    CHECK(tok_vocab_size(tok) > 259);

    /* an emoji is not in the vocab: four byte tokens after the "▁" piece */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(tok_encode(tok, "\xf0\x9f\x98\x80", 4, false, &ids, &n));
    CHECK(n == 5 && ids[1] == 3 + 0xF0 && ids[2] == 3 + 0x9F && ids[3] == 3 + 0x98 && ids[4] == 3 + 0x80);
    CHECK(n >= 1 && strcmp(tok_id_to_piece(tok, ids[0]), "\xe2\x96\x81") == 0);
    free(ids);

    /* a lone byte token decodes to U+FFFD, one per byte */
    int32_t lone[] = {3 + 0xE4, 3 + 0xBD, tok_piece_to_id(tok, "a")};
    char *text = NULL;
    CHECK_OK(tok_decode(tok, lone, 3, false, &text));
    CHECK(text && strcmp(text, "\xef\xbf\xbd\xef\xbf\xbd" "a") == 0);
    free(text);

    /* skip_special drops <s> </s>; without it they are kept */
    int32_t with_special[] = {1, tok_piece_to_id(tok, "a"), 2};
    CHECK_OK(tok_decode(tok, with_special, 3, true, &text));
    CHECK(text && strcmp(text, "a") == 0);
    free(text);
    CHECK_OK(tok_decode(tok, with_special, 3, false, &text));
    CHECK(text && strcmp(text, "<s>a</s>") == 0);
    free(text);

    /* errors */
    int32_t bad[] = {5, tok_vocab_size(tok)};
    text = (char *)1;
    CHECK(tok_decode(tok, bad, 2, false, &text) == VLLM_ERR_INVALID_ARG && text == NULL);
    CHECK(strstr(vllm_last_error(), "out of range") != NULL);
    int32_t neg[] = {-1};
    CHECK(tok_decode(tok, neg, 1, false, &text) == VLLM_ERR_INVALID_ARG);
    ids = (int32_t *)1;
    CHECK(tok_encode(tok, "ab\xff", 3, false, &ids, &n) == VLLM_ERR_INVALID_ARG && ids == NULL);
    CHECK(strstr(vllm_last_error(), "UTF-8") != NULL);
    CHECK(tok_encode(tok, "\xed\xa0\x80", 3, false, &ids, &n) == VLLM_ERR_INVALID_ARG);

    /* empty input: a valid empty id array; with add_special just <s> */
    CHECK_OK(tok_encode(tok, "", 0, false, &ids, &n));
    CHECK(ids != NULL && n == 0);
    free(ids);
    CHECK_OK(tok_encode(tok, NULL, 0, true, &ids, &n));
    CHECK(n == 1 && ids[0] == 1);
    free(ids);
    CHECK_OK(tok_decode(tok, NULL, 0, false, &text));
    CHECK(text && text[0] == '\0');
    free(text);

    /* a long word (no pre-tokenizer: the whole text is one BPE word) */
    size_t big = 200000;
    char *s = malloc(big);
    for (size_t i = 0; i < big; i++) s[i] = "the cat sat on a mat. "[i % 22];
    CHECK_OK(tok_encode(tok, s, big, false, &ids, &n));
    CHECK_OK(tok_decode(tok, ids, n, false, &text));
    CHECK(text && strlen(text) == big && memcmp(text, s, big) == 0);
    free(ids);
    free(text);
    free(s);
    tok_free(tok);
}

static vllm_status load_str(const char *json, const char *config, tokenizer **out) {
    return tok_load_json(json, strlen(json), config, config ? strlen(config) : 0, out);
}

#define MINI_MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<s>\":3,\"</s>\":4},\"merges\":[\"a b\"]}"

/* No template: tokenizer_config.json's add_bos_token / add_eos_token decide. */
static void test_config_bos_eos(void) {
    tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(load_str("{" MINI_MODEL "}", "{\"add_bos_token\":true,\"add_eos_token\":true,\"bos_token\":"
                      "{\"content\":\"<s>\",\"lstrip\":false},\"eos_token\":\"</s>\"}", &tok));
    if (tok) {
        CHECK(tok_bos_id(tok) == 3 && tok_eos_id(tok) == 4);
        CHECK_OK(tok_encode(tok, "abab", 4, true, &ids, &n));
        CHECK(n == 4 && ids[0] == 3 && ids[1] == 2 && ids[2] == 2 && ids[3] == 4);
        free(ids);
        CHECK_OK(tok_encode(tok, "abab", 4, false, &ids, &n));
        CHECK(n == 2);
        free(ids);
        /* no decoder: tokens joined by spaces (HF) */
        char *text = NULL;
        int32_t in[] = {2, 0, 1};
        CHECK_OK(tok_decode(tok, in, 3, false, &text));
        CHECK(text && strcmp(text, "ab a b") == 0);
        free(text);
        /* characters outside the vocab without unk_token or byte_fallback are dropped (HF): a, b merge */
        CHECK_OK(tok_encode(tok, "acb", 3, false, &ids, &n));
        CHECK(n == 1 && ids[0] == 2);
        free(ids);
        tok_free(tok);
    }
    tok = NULL;
    CHECK_OK(load_str("{" MINI_MODEL "}", NULL, &tok));
    CHECK(tok && tok_bos_id(tok) == -1 && tok_eos_id(tok) == -1);
    if (tok) {
        CHECK_OK(tok_encode(tok, "ab", 2, true, &ids, &n));
        CHECK(n == 1 && ids[0] == 2);
        free(ids);
    }
    tok_free(tok);
}

/* tokenizer_config.json clean_up_tokenization_spaces: tok_decode applies transformers'
 * clean_up_tokenization; tok_decode_ex(cleanup=false) and the stream (as vLLM) do not. */
static void test_cleanup(void) {
    static const char *model = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\".\":1,\"n't\":2,"
                               "\"'s\":3,\"'\":4,\"b\":5,\"?\":6,\",\":7},\"merges\":[]}}";
    int32_t ids[] = {0, 2, 3, 4, 5, 6, 7}, dot[] = {0, 1};
    const char *raw = "a n't 's ' b ? ,";
    for (int on = 0; on < 2; on++) {
        tokenizer *tok = NULL;
        CHECK_OK(load_str(model, on ? "{\"clean_up_tokenization_spaces\":true}" : "{}", &tok));
        if (!tok) continue;
        char *text = NULL;
        CHECK_OK(tok_decode(tok, ids, 7, false, &text));
        CHECK_MSG(text && strcmp(text, on ? "an't's'b?," : raw) == 0, "cleanup %d: '%s'", on, text);
        free(text);
        CHECK_OK(tok_decode(tok, dot, 2, false, &text));
        CHECK(text && strcmp(text, on ? "a." : "a .") == 0);
        free(text);
        size_t len = 0;
        CHECK_OK(tok_decode_ex(tok, ids, 7, false, false, &text, &len));
        CHECK(text && strcmp(text, raw) == 0 && len == strlen(raw));
        free(text);
        /* the stream continues the prompt "a" without the clean-up */
        tok_stream *st = NULL;
        CHECK_OK(tok_stream_create(tok, ids, 1, false, &st));
        char all[64] = "";
        for (int i = 1; st && i < 7; i++) {
            char *piece = NULL;
            CHECK_OK(tok_stream_push(st, ids[i], &piece, NULL));
            if (piece && strlen(all) + strlen(piece) < sizeof all) strcat(all, piece);
            free(piece);
        }
        CHECK_MSG(strcmp(all, raw + 1) == 0, "stream: '%s'", all);
        tok_stream_free(st);
        tok_free(tok);
    }
    tokenizer *tok = (tokenizer *)1;
    CHECK(load_str(model, "{\"clean_up_tokenization_spaces\":1}", &tok) == VLLM_ERR_FORMAT && tok == NULL);
}

/* General-category escapes are rewritten from utf8proc's tables (Unicode 15): they must class
 * Unicode 15 characters as HF does, inside and outside brackets, negated or not. */
static void check_regex(const char *pattern, const char *text, const char *want) {
    tok_pattern p = {0};
    tok_spans sp = {0};
    tok_buf got = {0};
    vllm_status st = tok_regex_new(pattern, strlen(pattern), "test", &p.regex);
    CHECK_MSG(st == VLLM_OK, "%s: %s", pattern, vllm_last_error());
    if (!st) st = tok_pattern_find(&p, text, strlen(text), &sp);
    for (size_t i = 0; !st && i < sp.n; i++) {
        if (i) tok_buf_append(&got, "|", 1);
        tok_buf_append(&got, text + sp.data[i].start, sp.data[i].end - sp.data[i].start);
    }
    CHECK_MSG(!st && strcmp(got.data ? got.data : "", want) == 0, "%s on '%s': '%s', want '%s'", pattern, text,
              got.data ? got.data : "", want);
    tok_buf_free(&got);
    tok_spans_free(&sp);
    tok_regex_free(p.regex);
}

static void test_unicode_classes(void) {
    /* U+1FA77 So, U+31350 Lo, U+11F50 Nd, U+11F00 Mn: all new in Unicode 15 */
    const char *t = "a\U0001FA77B\U00031350 7\U00011F50\U00011F00!";
    check_regex("\\p{S}", t, "\U0001FA77");
    check_regex("\\p{L}+", t, "a|B\U00031350");
    check_regex("\\p{Lo}|\\p{Lu}", t, "B|\U00031350");
    check_regex("[\\p{N}\\p{M}]+", t, "7\U00011F50\U00011F00");
    check_regex("\\d+", t, "7\U00011F50");
    check_regex("\\w+", t, "a|B\U00031350|7\U00011F50\U00011F00");
    check_regex("\\W+", t, "\U0001FA77| |!");
    check_regex("[^\\w\\s]+", t, "\U0001FA77|!");
    check_regex("\\P{L}+", t, "\U0001FA77| 7\U00011F50\U00011F00!");
    check_regex("[^\\P{L}]+", t, "a|B\U00031350");
    check_regex("\\p{^N}+", t, "a\U0001FA77B\U00031350 |\U00011F00!");
    check_regex("[\\P{N}&&[^a-z]]+", t, "\U0001FA77B\U00031350 |\U00011F00!");
    check_regex("\\p{Symbol}|\\p{other_letter}", t, "\U0001FA77|\U00031350");
    check_regex(" ?[\\p{P}\\p{S}]+[\\r\\n]*", "x \U0001FA77!\n", " \U0001FA77!\n");
    check_regex("[[:alpha:]]+", "ab1", "ab");         /* POSIX brackets pass through */
    check_regex("\\p{Greek}+", "a\u03b1\u03b2", "\u03b1\u03b2"); /* scripts left to Oniguruma */
    check_regex("[]a]+", "]a]b", "]a]");              /* a leading ']' is literal */
    check_regex("\\\\p{L}", "\\p{L}", "\\p{L}");        /* an escaped backslash */
    tok_regex *re = NULL;
    CHECK(tok_regex_new("\\p{L&}", 6, "test", &re) == VLLM_ERR_FORMAT && re == NULL); /* as Oniguruma */
}

static void check_load_error(const char *json, const char *config, vllm_status want, const char *msg) {
    tokenizer *tok = (tokenizer *)1;
    vllm_status st = load_str(json, config, &tok);
    CHECK_MSG(st == want, "status %d, want %d for %s (%s)", (int)st, (int)want, json, vllm_last_error());
    CHECK(tok == NULL);
    CHECK_MSG(strstr(vllm_last_error(), msg) != NULL, "error '%s' lacks '%s'", vllm_last_error(), msg);
    if (st == VLLM_OK) tok_free(tok);
}

static void test_errors(void) {
    check_load_error("{\"model\": ", NULL, VLLM_ERR_FORMAT, "tokenizer.json: invalid JSON");
    check_load_error("[1]", NULL, VLLM_ERR_FORMAT, "tokenizer.json: must be a JSON object");
    check_load_error("{}", NULL, VLLM_ERR_FORMAT, "tokenizer.json: model missing");
    check_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", NULL, VLLM_ERR_UNSUPPORTED,
                     "tokenizer.json: model type 'Unigram' not supported yet");
    check_load_error("{\"normalizer\":{\"type\":\"Foo\"}," MINI_MODEL "}", NULL, VLLM_ERR_UNSUPPORTED,
                     "tokenizer.json: normalizer type 'Foo' not supported yet");
    check_load_error("{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":"
                     "\"Precompiled\"}]}," MINI_MODEL "}", NULL, VLLM_ERR_UNSUPPORTED,
                     "normalizer.normalizers[1] type 'Precompiled' not supported yet");
    check_load_error("{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}," MINI_MODEL "}", NULL, VLLM_ERR_UNSUPPORTED,
                     "tokenizer.json: pre_tokenizer type 'BertPreTokenizer' not supported yet");
    check_load_error("{\"decoder\":{\"type\":\"CTC\"}," MINI_MODEL "}", NULL, VLLM_ERR_UNSUPPORTED,
                     "decoder type 'CTC'");
    check_load_error("{\"post_processor\":{\"type\":\"Weird\"}," MINI_MODEL "}", NULL, VLLM_ERR_UNSUPPORTED,
                     "post_processor type 'Weird'");
    check_load_error("{\"decoder\":{\"decoders\":[]}," MINI_MODEL "}", NULL, VLLM_ERR_FORMAT, "decoder.type missing");
    check_load_error("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},"
                     MINI_MODEL "}", NULL, VLLM_ERR_FORMAT, "pre_tokenizer.pattern.Regex: bad regex");
    check_load_error("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Nope\"},"
                     MINI_MODEL "}", NULL, VLLM_ERR_FORMAT, "behavior 'Nope' unknown");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"},\"merges\":[]}}", NULL, VLLM_ERR_FORMAT,
                     "model.vocab['a'] must be an integer id");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999},\"merges\":[]}}", NULL,
                     VLLM_ERR_FORMAT, "out of range");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", NULL, VLLM_ERR_FORMAT,
                     "model.vocab must be an object");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}", NULL, VLLM_ERR_FORMAT,
                     "model.merges[0]: token 'c' is not in the vocab");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\"]}}", NULL, VLLM_ERR_FORMAT,
                     "model.merges[0]: token 'aa' is not in the vocab");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"aa\"]}}", NULL, VLLM_ERR_FORMAT,
                     "model.merges[0] 'aa' is not \"left right\"");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}", NULL, VLLM_ERR_FORMAT,
                     "model.merges[0] must be");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}}", NULL,
                     VLLM_ERR_UNSUPPORTED, "dropout");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"byte_fallback\":1}}", NULL,
                     VLLM_ERR_FORMAT, "model.byte_fallback must be a boolean");
    check_load_error("{\"added_tokens\":{}," MINI_MODEL "}", NULL, VLLM_ERR_FORMAT, "added_tokens must be an array");
    check_load_error("{\"added_tokens\":[{\"id\":-1,\"content\":\"x\"}]," MINI_MODEL "}", NULL, VLLM_ERR_FORMAT,
                     "added_tokens[0].id must be an integer");
    check_load_error("{\"added_tokens\":[{\"id\":1}]," MINI_MODEL "}", NULL, VLLM_ERR_FORMAT,
                     "added_tokens[0].content missing");
    check_load_error("{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
                     "\"<x>\",\"type_id\":0}}],\"special_tokens\":{}}," MINI_MODEL "}", NULL, VLLM_ERR_FORMAT,
                     "missing SpecialToken '<x>'");
    check_load_error("{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"ab\"}," MINI_MODEL "}", NULL,
                     VLLM_ERR_FORMAT, "pre_tokenizer.replacement must be a single character");
    check_load_error("{" MINI_MODEL "}", "{\"add_bos_token\":\"yes\"}", VLLM_ERR_FORMAT,
                     "tokenizer_config.json: add_bos_token must be a boolean");
    check_load_error("{" MINI_MODEL "}", "{\"bos_token\":5}", VLLM_ERR_FORMAT, "tokenizer_config.json: bos_token");
    check_load_error("{" MINI_MODEL "}", "nope", VLLM_ERR_FORMAT, "tokenizer_config.json: invalid JSON");

    /* unk_token configured but absent from the vocab: an error only when it is needed */
    tokenizer *tok = NULL;
    CHECK_OK(load_str("{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"vocab\":{\"a\":0},\"merges\":[]}}", NULL,
                      &tok));
    if (tok) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(tok_encode(tok, "aa", 2, false, &ids, &n));
        free(ids);
        CHECK(tok_encode(tok, "ab", 2, false, &ids, &n) == VLLM_ERR_FORMAT);
        CHECK(strstr(vllm_last_error(), "unk_token '<unk>'") != NULL);
        tok_free(tok);
    }

    tok = (tokenizer *)1;
    CHECK(tok_load_dir(DATA "/no_such_dir", &tok) == VLLM_ERR_NOT_FOUND && tok == NULL);
    CHECK(strstr(vllm_last_error(), "tokenizer.json") != NULL);
    tok_free(NULL);
}

/* The fast loader (scan.c + bpe.c read model.vocab / model.merges from the text): escapes,
 * both merge forms, file order, and its fallbacks to jansson (repeated keys, bad JSON). */
static void test_fast_load(void) {
    tokenizer *tok = NULL;
    const char *json =
        "{ \"model\" : { \"merges\" : [ [ \"a\" , \"b\" ] ,\n \"ab \\u00e9\" ],\n"
        "  \"vocab\" : { \"a\" : 0 , \"b\":1, \"ab\":2, \"\\u00e9\":3, \"ab\\u00e9\":4, \"\\ud83d\\ude00\":5,\n"
        "   \"q\\\"\\\\\\/\\n\\t\":6, \"-0\": -0 }, \"type\" : \"BPE\" }, \"added_tokens\": [] }";
    CHECK_OK(load_str(json, NULL, &tok));
    if (tok) {
        CHECK(tok_vocab_size(tok) == 7);
        CHECK(tok_piece_to_id(tok, "\xC3\xA9") == 3 && tok_piece_to_id(tok, "\xF0\x9F\x98\x80") == 5);
        CHECK(tok_piece_to_id(tok, "q\"\\/\n\t") == 6 && tok_piece_to_id(tok, "-0") == 0);
        CHECK(tok_id_to_piece(tok, 4) && strcmp(tok_id_to_piece(tok, 4), "ab\xC3\xA9") == 0);
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(tok_encode(tok, "ab\xC3\xA9" "a", 5, false, &ids, &n));
        CHECK(n == 2 && ids && ids[0] == 4 && ids[1] == 0);
        free(ids);
        tok_free(tok);
    }
    /* a repeated vocab key: jansson's rule (the last one wins) */
    tok = NULL;
    CHECK_OK(load_str("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"a\":2},\"merges\":[]}}", NULL, &tok));
    CHECK(tok && tok_piece_to_id(tok, "a") == 2);
    tok_free(tok);
    /* a repeated "model": the last one */
    tok = NULL;
    CHECK_OK(load_str("{\"model\":{\"vocab\":{\"x\":0}},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      NULL, &tok));
    CHECK(tok && tok_piece_to_id(tok, "a") == 0 && tok_piece_to_id(tok, "x") == -1);
    tok_free(tok);
    /* broken JSON inside the scanned parts: jansson's message */
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,},\"merges\":[]}}", NULL, VLLM_ERR_FORMAT,
                     "invalid JSON at line 1");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\" \"b\"]}}", NULL,
                     VLLM_ERR_FORMAT, "invalid JSON");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0},\"merges\":[]}}", NULL, VLLM_ERR_FORMAT,
                     "invalid JSON");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}", NULL, VLLM_ERR_FORMAT,
                     "model.vocab['a'] must be an integer id");
    check_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}} x", NULL, VLLM_ERR_FORMAT,
                     "invalid JSON");
}

/* A loaded tokenizer is shared read-only: encodes from several threads agree. */
typedef struct thread_job {
    const tokenizer *tok;
    const char *text;
    const int32_t *want;
    size_t n_want;
    int mismatches;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *j = arg;
    for (int i = 0; i < 50; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(j->tok, j->text, strlen(j->text), true, &ids, &n) != VLLM_OK || n != j->n_want ||
            memcmp(ids, j->want, n * sizeof *ids) != 0)
            j->mismatches++;
        free(ids);
    }
    return NULL;
}

static void test_threads(void) {
    tokenizer *tok = load("bytelevel");
    if (!tok) return;
    const char *text = "<|im_start|>user\nHow are you doing today? I'm fine, 12345 \xf0\x9f\x98\x80<|im_end|>\n";
    int32_t *want = NULL;
    size_t n_want = 0;
    CHECK_OK(tok_encode(tok, text, strlen(text), true, &want, &n_want));
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){tok, text, want, n_want, 0};
        CHECK(pthread_create(&th[i], NULL, encode_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].mismatches == 0);
    }
    free(want);
    tok_free(tok);
}

/* tok_token_bytes: each token's bytes as xgrammar's decoded vocab has them (byte-level, byte-fallback, raw) */
static void check_bytes(const tokenizer *tok, int32_t id, const char *want, size_t want_len) {
    uint8_t buf[256];
    size_t n = 0;
    const char *p = tok_id_to_piece(tok, id);
    CHECK_MSG(p && strlen(p) < sizeof buf, "token %d: piece", (int)id);
    if (!p || strlen(p) >= sizeof buf) return;
    CHECK_OK(tok_token_bytes(tok, id, buf, &n));
    CHECK_MSG(n == want_len && memcmp(buf, want, n) == 0, "token %d '%s': %zu bytes, want %zu", (int)id, p, n,
              want_len);
}

static void test_token_bytes(void) {
    tokenizer *tok = load("bytelevel");
    if (tok) {
        CHECK(tok_vocab_kind(tok) == TOK_VOCAB_BYTE_LEVEL);
        /* every token whose bytes are UTF-8 decodes alone to exactly them */
        int compared = 0;
        for (int32_t id = 0; id < tok_vocab_size(tok); id++) {
            uint8_t buf[256];
            size_t n = 0;
            const char *p = tok_id_to_piece(tok, id);
            if (!p || strlen(p) >= sizeof buf) continue;
            CHECK_OK(tok_token_bytes(tok, id, buf, &n));
            CHECK(n <= strlen(p));
            char *text = NULL;
            size_t tl = 0;
            CHECK_OK(tok_decode_ex(tok, &id, 1, false, false, &text, &tl));
            if (tok_utf8_valid((const char *)buf, n)) {
                CHECK_MSG(tl == n && memcmp(text, buf, n) == 0, "token %d '%s': bytes differ from its decode", (int)id,
                          p);
                compared++;
            }
            free(text);
        }
        CHECK_MSG(compared > 150, "%d tokens compared", compared); /* (single bytes >= 0x80 are not UTF-8) */
        const int32_t im = tok_piece_to_id(tok, "<|im_start|>");
        CHECK(im >= 0);
        if (im >= 0) check_bytes(tok, im, "<|im_start|>", 12); /* special tokens are text to a grammar */
        size_t n = 0;
        uint8_t b[8];
        CHECK(tok_token_bytes(tok, tok_vocab_size(tok), b, &n) == VLLM_ERR_INVALID_ARG);
        CHECK(tok_token_bytes(tok, -1, b, &n) == VLLM_ERR_INVALID_ARG);
        tok_free(tok);
    }
    tok = load("spm");
    if (tok) {
        CHECK(tok_vocab_kind(tok) == TOK_VOCAB_BYTE_FALLBACK);
        check_bytes(tok, tok_piece_to_id(tok, "<0x0A>"), "\n", 1);
        check_bytes(tok, tok_piece_to_id(tok, "<0x00>"), "\0", 1);
        const int32_t sp = tok_piece_to_id(tok, "\xe2\x96\x81t");
        CHECK(sp >= 0);
        if (sp >= 0) check_bytes(tok, sp, " t", 2); /* U+2581 a space, not stripped */
        check_bytes(tok, tok_piece_to_id(tok, "</s>"), "</s>", 4);
        tok_free(tok);
    }
    /* byte-level pieces mapped back; an added token with a real space (no inverse) kept as it is; no decoder: raw */
    tok = NULL;
    CHECK_OK(load_str("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"\\u0120b\":1,\"\\u0100\":2,"
                      "\"\\u00c3\\u00a9\":3},\"merges\":[]},\"decoder\":{\"type\":\"ByteLevel\"},\"added_tokens\":"
                      "[{\"id\":4,\"content\":\"x y\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                      "\"normalized\":false,\"special\":false}]}",
                      NULL, &tok));
    if (tok) {
        check_bytes(tok, 1, " b", 2);
        check_bytes(tok, 2, "\0", 1);
        check_bytes(tok, 3, "\xc3\xa9", 2);
        check_bytes(tok, 4, "x y", 3);
        tok_free(tok);
    }
    tok = NULL;
    CHECK_OK(load_str("{" MINI_MODEL "}", NULL, &tok));
    if (tok) {
        CHECK(tok_vocab_kind(tok) == TOK_VOCAB_RAW);
        check_bytes(tok, 2, "ab", 2);
        tok_free(tok);
    }
}

int main(void) {
    test_bytelevel_map();
    test_token_bytes();
    test_utf8();
    test_split();
    test_reference();
    test_roundtrip();
    test_spm_api();
    test_config_bos_eos();
    test_cleanup();
    test_unicode_classes();
    test_errors();
    test_fast_load();
    test_threads();
    TEST_END();
}
