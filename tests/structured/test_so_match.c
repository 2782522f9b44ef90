/*
 * test_so_match.c: the structured-output matcher (src/structured/so_match.h): whole strings accepted or refused
 * by xgrammar's JSON rules (the object root of vLLM's json_object: no space before it, no trailing comma, no
 * raw newline in a string, no leading zero), left recursion, empty rules, bounded repeats, UTF-8 classes read
 * a byte at a time, rollback; token masks on the byte-level and SentencePiece test vocabularies equal to trying
 * every token, along JSON texts, stop tokens only where the grammar may end, specials never; the state limit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/so_match.h"
#include "test.h"

static const char *JSON =
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= (\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape "
    "basic_string_sub) (= [ \\n\\t]* [,}\\]:])\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?\n"
    "basic_string ::= [\"] basic_string_sub\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_array ::= ((\"[\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"]\") | "
    "(\"[\" [ \\n\\t]* \"]\"))\n"
    "basic_object ::= (\"{\" [ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any ([ \\n\\t]* \",\" "
    "[ \\n\\t]* basic_string [ \\n\\t]* \":\" [ \\n\\t]* basic_any)* [ \\n\\t]* \"}\") | \"{\" [ \\n\\t]* \"}\"\n"
    "root ::= basic_object\n";

static so_compiled *compile(const char *ebnf) {
    so_grammar *g = NULL;
    so_compiled *c = NULL;
    CHECK_MSG(so_ebnf_parse(ebnf, strlen(ebnf), NULL, &g) == VLLM_OK, "%s", vllm_last_error());
    if (g) CHECK_MSG(so_compile(g, &c) == VLLM_OK, "%s", vllm_last_error());
    so_grammar_free(g);
    return c;
}

/* whether the whole of s is a sentence (read at once, then byte by byte with the same answer) */
static bool accepts(const so_compiled *c, const char *s) {
    so_matcher *m = NULL;
    CHECK_OK(so_matcher_create(c, &m));
    if (!m) return false;
    const bool whole = so_match_bytes(m, (const uint8_t *)s, strlen(s)) && so_match_can_end(m);
    so_match_rollback(m, so_match_pos(m));
    CHECK(so_match_pos(m) == 0);
    bool bytes = true;
    for (size_t i = 0; s[i] && bytes; i++) bytes = so_match_bytes(m, (const uint8_t *)s + i, 1);
    bytes = bytes && so_match_can_end(m);
    CHECK_MSG(whole == bytes, "'%s': at once %d, byte by byte %d", s, whole, bytes);
    so_matcher_free(m);
    return whole;
}

static void test_strings(void) {
    so_compiled *c = compile(JSON);
    if (c) {
        const char *yes[] = {"{}", "{ }", "{\"a\":1}", "{\"a\" : [1, 2.5e-3, -0, true, null, {\"b\":\"x\\n\\u00e9\"}]}",
                             "{\n\t\"k\": \"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\", \"n\": {\"m\": []}\n}", "{\"\":\"\"}"};
        const char *no[] = {"[1]", " {}", "{} ", "{\"a\":01}", "{\"a\":\"raw\nline\"}", "{\"a\":1,}", "{\"a\"}",
                            "{a:1}", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":1", "", "{\"a\":1.}", "{\"a\":\"\x01\"}"};
        for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) CHECK_MSG(accepts(c, yes[i]), "refused '%s'", yes[i]);
        for (size_t i = 0; i < sizeof no / sizeof *no; i++) CHECK_MSG(!accepts(c, no[i]), "accepted '%s'", no[i]);
        /* a prefix is readable but not an end; a refused byte leaves the matcher as it was */
        so_matcher *m = NULL;
        CHECK_OK(so_matcher_create(c, &m));
        if (m) {
            CHECK(so_match_bytes(m, (const uint8_t *)"{\"ab", 4) && !so_match_can_end(m) && so_match_pos(m) == 4);
            CHECK(!so_match_bytes(m, (const uint8_t *)"c\n", 2) && so_match_pos(m) == 4);
            CHECK(so_match_bytes(m, (const uint8_t *)"\": 1}", 5) && so_match_can_end(m));
            so_match_rollback(m, 2);
            CHECK(so_match_pos(m) == 7 && !so_match_can_end(m));
            CHECK(so_match_bytes(m, (const uint8_t *)"2 }", 3) && so_match_can_end(m));
            so_matcher_free(m);
        }
        so_compiled_free(c);
    }
    c = compile("root ::= \"\" \"\"\n"); /* no edges at all (fuzz_ebnf's find) */
    if (c) {
        CHECK(accepts(c, "") && !accepts(c, "a"));
        so_compiled_free(c);
    }
    c = compile("root ::= root \"a\" | \"b\"\n"); /* left recursion */
    if (c) {
        CHECK(accepts(c, "b") && accepts(c, "baaa") && !accepts(c, "ab") && !accepts(c, ""));
        so_compiled_free(c);
    }
    c = compile("root ::= x \"c\" x\nx ::= \"\" | \"a\" x\n"); /* empty matches */
    if (c) {
        CHECK(accepts(c, "c") && accepts(c, "aac") && accepts(c, "caa") && !accepts(c, "cc"));
        so_compiled_free(c);
    }
    c = compile("root ::= \"a\"{2,3} (\"b\" | \"cd\"){0,2} \"e\"{2,}\n");
    if (c) {
        CHECK(accepts(c, "aaee") && accepts(c, "aaacdbeee") && !accepts(c, "aee") && !accepts(c, "aaaaee") &&
              !accepts(c, "aabbbee") && !accepts(c, "aae"));
        so_compiled_free(c);
    }
    c = compile("root ::= [^a\\u00e9]+ [\\u4e00-\\u9fff] [\\U0001F600-\\U0001F64F]?\n");
    if (c) {
        CHECK(accepts(c, "b\xc3\xa8\xe4\xb8\xad") && accepts(c, "zz\xe4\xb8\xad\xf0\x9f\x98\x80"));
        CHECK(!accepts(c, "a\xe4\xb8\xad") && !accepts(c, "\xc3\xa9\xe4\xb8\xad") && !accepts(c, "b\xe4\xb8") &&
              !accepts(c, "b\xed\xa0\x80\xe4\xb8\xad")); /* a surrogate is not UTF-8 */
        so_compiled_free(c);
    }
    /* a repeat too large to expand: by states, by a class's edges */
    so_grammar *g = NULL;
    so_compiled *big = NULL;
    const char *huge = "root ::= (\"a\"{1000}){5000}\n";
    CHECK_OK(so_ebnf_parse(huge, strlen(huge), NULL, &g));
    if (g) CHECK(so_compile(g, &big) == VLLM_ERR_INVALID_ARG && !big && strstr(vllm_last_error(), "too large"));
    so_grammar_free(g);
    g = NULL;
    const char *wide = "root ::= [acegikmoqsuwyACEGIKMOQSUWY02468!#%&(*,.:<>@^`|~]{1000000}\n";
    CHECK_OK(so_ebnf_parse(wide, strlen(wide), NULL, &g));
    if (g) CHECK(so_compile(g, &big) == VLLM_ERR_INVALID_ARG && !big && strstr(vllm_last_error(), "edges"));
    so_grammar_free(g);
}

/* a stop id without bytes (padding) is a stop, not a special: the mask and so_match_token agree; a rollback undoes
 * a stop token taken */
static void test_stop_rules(void) {
    tokenizer *tok = NULL;
    CHECK_OK(tok_load_dir(VLLM_SOURCE_DIR "/tests/tokenizer/data/bytelevel", &tok));
    if (!tok) return;
    const int32_t V = tok_vocab_size(tok) + 5, stop = tok_vocab_size(tok) + 2;
    so_vocab *v = NULL;
    CHECK_OK(so_vocab_build(tok, V, &stop, 1, &v));
    so_compiled *c = compile("root ::= \"a\"?\n");
    so_matcher *m = NULL;
    if (c) CHECK_OK(so_matcher_create(c, &m));
    uint32_t *mask = calloc((size_t)(V + 31) / 32, 4);
    if (v && m && mask) {
        CHECK(so_vocab_is_stop(v, stop) && !so_vocab_is_special(v, stop));
        so_match_fill_mask(m, v, mask);
        CHECK(mask[stop >> 5] >> (stop & 31) & 1u);
        CHECK(so_match_token(m, v, stop) && so_match_terminated(m));
        CHECK(!so_match_token(m, v, tok_piece_to_id(tok, "a")));
        so_match_rollback(m, 0); /* the stop token undone */
        CHECK(!so_match_terminated(m) && so_match_token(m, v, tok_piece_to_id(tok, "a")));
    }
    free(mask);
    so_matcher_free(m);
    so_compiled_free(c);
    so_vocab_free(v);
    tok_free(tok);
}

/* the mask against trying every token, at each prefix of text read token by token (greedy longest token) */
static void check_masks(const char *tokdir, const char *text) {
    tokenizer *tok = NULL;
    CHECK_OK(tok_load_dir(tokdir, &tok));
    if (!tok) return;
    const int32_t V = tok_vocab_size(tok) + 5, eos = tok_eos_id(tok) >= 0 ? tok_eos_id(tok) : 2;
    so_vocab *v = NULL;
    CHECK_OK(so_vocab_build(tok, V, &eos, 1, &v));
    so_compiled *c = compile(JSON);
    so_matcher *m = NULL;
    if (c) CHECK_OK(so_matcher_create(c, &m));
    uint32_t *mask = calloc((size_t)(V + 31) / 32, 4), *cached = calloc((size_t)(V + 31) / 32, 4);
    so_mask_cache *mc = NULL;
    if (c && v) CHECK_OK(so_mask_cache_create(c, v, &mc));
    const size_t n = strlen(text);
    size_t at = 0;
    int steps = 0, allowed_total = 0;
    while (v && m && mask && cached && mc) {
        so_match_fill_mask(m, v, mask);
        const size_t pos = so_match_pos(m);
        /* the adaptive cache gives the same bits (JSON's lookaheads repeat what its parent rules require), twice */
        for (int rep = 0; rep < 2; rep++) {
            CHECK_OK(so_match_fill_mask_cached(m, mc, cached));
            CHECK_MSG(!memcmp(mask, cached, (size_t)(V + 31) / 32 * 4), "%s at %zu: the cached mask differs", tokdir,
                      at);
            CHECK(so_match_pos(m) == pos);
        }
        int bad = 0, allowed = 0, best = -1;
        size_t best_n = 0;
        for (int32_t id = 0; id < V; id++) {
            const bool bit = mask[id >> 5] >> (id & 31) & 1u;
            bool want;
            if (so_vocab_is_stop(v, id)) want = so_match_can_end(m);
            else {
                want = so_match_token(m, v, id);
                if (want) so_match_rollback(m, so_match_pos(m) - pos);
            }
            if (so_vocab_is_special(v, id)) CHECK(!bit);
            bad += bit != want;
            allowed += bit;
            size_t tn = 0;
            const uint8_t *tb = so_vocab_bytes(v, id, &tn);
            if (bit && !so_vocab_is_stop(v, id) && tn > best_n && at + tn <= n && !memcmp(tb, text + at, tn))
                best = id, best_n = tn;
        }
        CHECK_MSG(bad == 0, "%s at %zu: %d tokens differ from trying them", tokdir, at, bad);
        CHECK(so_match_pos(m) == pos);
        allowed_total += allowed;
        steps++;
        if (at == n) { /* the text is whole: only the stop token (and tokens going on) */
            CHECK(mask[eos >> 5] >> (eos & 31) & 1u);
            CHECK(so_match_token(m, v, eos) && so_match_terminated(m));
            so_match_fill_mask(m, v, mask);
            int any = 0;
            for (int32_t w = 0; w < (V + 31) / 32; w++) any |= mask[w] != 0;
            CHECK(!any);
            break;
        }
        CHECK_MSG(best >= 0, "%s: no allowed token continues the text at %zu", tokdir, at);
        if (best < 0) break;
        CHECK(so_match_token(m, v, best));
        at += best_n;
    }
    CHECK(steps > 3 && allowed_total > steps);
    CHECK(mc && so_mask_cache_entries(mc) > 3 && so_mask_cache_bytes(mc) > 0);
    so_mask_cache_free(mc);
    free(cached);
    free(mask);
    so_matcher_free(m);
    so_compiled_free(c);
    so_vocab_free(v);
    tok_free(tok);
}

/* Several threads fill masks at once on one new mask cache, each with its own scratch and matcher, while another
 * classifies every state ahead: each mask must equal the brute-force walk (TSan runs this too). */
typedef struct thread_walk {
    const so_compiled *c;
    const so_vocab *v;
    so_mask_cache *mc;
    const char *text;
    int32_t V;
    int masks, bad, failed;
} thread_walk;

static void *walk_thread(void *arg) {
    thread_walk *t = arg;
    so_matcher *m = NULL;
    so_mask_scratch *sc = NULL;
    uint32_t *brute = calloc((size_t)(t->V + 31) / 32, 4), *fast = calloc((size_t)(t->V + 31) / 32, 4);
    if (so_matcher_create(t->c, &m) != VLLM_OK || so_mask_scratch_create(&sc) != VLLM_OK || !brute || !fast) {
        t->failed = 1;
    }
    const size_t n = strlen(t->text);
    size_t at = 0;
    while (!t->failed && at < n) {
        so_match_fill_mask(m, t->v, brute);
        if (so_match_fill_mask_scratch(m, t->mc, sc, fast) != VLLM_OK) {
            t->failed = 1;
            break;
        }
        t->masks++;
        t->bad += memcmp(brute, fast, (size_t)(t->V + 31) / 32 * 4) != 0;
        int32_t best = -1;
        size_t best_n = 0;
        for (int32_t id = 0; id < t->V; id++) {
            size_t tn = 0;
            const uint8_t *tb = so_vocab_bytes(t->v, id, &tn);
            if ((brute[id >> 5] >> (id & 31) & 1u) && !so_vocab_is_stop(t->v, id) && tn > best_n && at + tn <= n &&
                !memcmp(tb, t->text + at, tn))
                best = id, best_n = tn;
        }
        if (best < 0 || !so_match_token(m, t->v, best)) {
            t->failed = 2;
            break;
        }
        at += best_n;
    }
    so_mask_scratch_free(sc);
    so_matcher_free(m);
    free(brute), free(fast);
    return NULL;
}

typedef struct classify_all {
    so_mask_cache *mc;
    int failed;
} classify_all;

static void *classify_thread(void *arg) {
    classify_all *a = arg;
    so_mask_scratch *sc = NULL;
    if (so_mask_scratch_create(&sc) != VLLM_OK) a->failed = 1;
    for (int32_t s = 0; !a->failed && s < so_mask_cache_num_states(a->mc); s++)
        if (so_mask_cache_classify(a->mc, sc, s) != VLLM_OK) a->failed = 1;
    so_mask_scratch_free(sc);
    return NULL;
}

static void check_threads(const char *tokdir) {
    tokenizer *tok = NULL;
    CHECK_OK(tok_load_dir(tokdir, &tok));
    if (!tok) return;
    const int32_t V = tok_vocab_size(tok) + 5, eos = tok_eos_id(tok) >= 0 ? tok_eos_id(tok) : 2;
    so_vocab *v = NULL;
    CHECK_OK(so_vocab_build(tok, V, &eos, 1, &v));
    so_compiled *c = compile(JSON);
    so_mask_cache *mc = NULL;
    if (c && v) CHECK_OK(so_mask_cache_create(c, v, &mc));
    static const char *const texts[] = {"{\"name\": \"the cat\", \"n\": [1, -2.5e3, true]}", "{\"a\": {\"b\": null}, \"c\": []}",
                                        "{\"tt\": \"the\", \"x\": [false, 0.5]}", "{\"l\": [1, 2, 3, {\"k\": \"v\"}]}"};
    enum { N = sizeof texts / sizeof *texts };
    thread_walk tw[N];
    pthread_t th[N + 1];
    classify_all ca = {mc, 0};
    for (int round = 0; mc && round < 2; round++) { /* the first round on a new cache, then on a warm one */
        CHECK(pthread_create(&th[N], NULL, classify_thread, &ca) == 0);
        for (int i = 0; i < N; i++) {
            tw[i] = (thread_walk){c, v, mc, texts[i], V, 0, 0, 0};
            CHECK(pthread_create(&th[i], NULL, walk_thread, &tw[i]) == 0);
        }
        for (int i = 0; i <= N; i++) pthread_join(th[i], NULL);
        CHECK(!ca.failed);
        for (int i = 0; i < N; i++) {
            CHECK_MSG(!tw[i].failed && tw[i].masks > 3, "%s thread %d: failed %d after %d masks", tokdir, i, tw[i].failed,
                      tw[i].masks);
            CHECK_MSG(tw[i].bad == 0, "%s thread %d: %d of %d masks differ from the walk", tokdir, i, tw[i].bad,
                      tw[i].masks);
        }
    }
    int64_t fills, walked;
    double es;
    if (mc) so_mask_cache_stats(mc, &fills, &walked, &es);
    CHECK(mc && fills > 8 && so_mask_cache_entries(mc) > 3);
    so_mask_cache_free(mc);
    so_compiled_free(c);
    so_vocab_free(v);
    tok_free(tok);
}

int main(void) {
    test_strings();
    test_stop_rules();
    check_masks(VLLM_SOURCE_DIR "/tests/tokenizer/data/bytelevel", "{\"name\": \"the cat\", \"n\": [1, -2.5e3, true]}");
    check_masks(VLLM_SOURCE_DIR "/tests/tokenizer/data/spm", "{\"a\": {\"b\": null}, \"tt\": \"the\"}");
    check_threads(VLLM_SOURCE_DIR "/tests/tokenizer/data/bytelevel");
    TEST_END();
}
