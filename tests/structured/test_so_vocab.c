/*
 * test_so_vocab.c: the grammar matcher's vocabulary (src/structured/so_vocab.h) on the repository's test
 * tokenizers (tests/tokenizer/data): byte-level (Qwen-style, with added tokens) and SentencePiece byte-fallback.
 * Checks the special set (empty bytes, padding past the tokenizer), the stop set, the sorted order (bytes, then
 * id) and every trie range against a brute-force scan; bad sizes and stop ids refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/so_vocab.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

#define DATA VLLM_SOURCE_DIR "/tests/tokenizer/data"

static tokenizer *load(const char *name) {
    tokenizer *tok = NULL;
    vllm_status st = tok_load_dir(name, &tok);
    CHECK_MSG(st == VLLM_OK, "loading %s: %s", name, vllm_last_error());
    return tok;
}

/* a's bytes before b's: memcmp order, a prefix first, equal bytes by id */
static int order(const so_vocab *v, int32_t a, int32_t b) {
    size_t na = 0, nb = 0;
    const uint8_t *pa = so_vocab_bytes(v, a, &na), *pb = so_vocab_bytes(v, b, &nb);
    const int c = memcmp(pa, pb, na < nb ? na : nb);
    if (c) return c;
    if (na != nb) return na < nb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void check_vocab(const tokenizer *tok, int pad, int32_t stop, int *n_dup) {
    const int32_t nt = tok_vocab_size(tok), n = nt + pad;
    so_vocab *v = NULL;
    const int32_t stops[2] = {stop, stop}; /* (a duplicate is dropped) */
    CHECK_OK(so_vocab_build(tok, n, stops, 2, &v));
    if (!v) return;
    CHECK(so_vocab_size(v) == n);
    CHECK(so_vocab_n_stop(v) == 1 && so_vocab_stop_id(v, 0) == stop && so_vocab_is_stop(v, stop));
    int32_t specials = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len = 9;
        const uint8_t *b = so_vocab_bytes(v, id, &len);
        CHECK(b != NULL);
        /* special: no bytes, or a special token of the tokenizer (its text would leave the reply) */
        CHECK(so_vocab_is_special(v, id) ==
              (!so_vocab_is_stop(v, id) && (len == 0 || (id < nt && tok_is_special(tok, id)))));
        if (id >= nt) CHECK_MSG(so_vocab_is_special(v, id) && len == 0, "padding id %d not special", (int)id);
        if (id < nt && len) {
            uint8_t buf[256];
            size_t bl = 0;
            CHECK_OK(tok_token_bytes(tok, id, buf, &bl));
            CHECK(bl == len && memcmp(buf, b, len) == 0);
        }
        specials += so_vocab_is_special(v, id);
    }
    CHECK(specials >= pad);
    const int32_t ns = so_vocab_n_sorted(v);
    CHECK_MSG(ns == n - specials - 1, "%d sorted of %d (%d special, 1 stop)", (int)ns, (int)n, (int)specials);
    for (int32_t i = 0; i < ns; i++) {
        const int32_t id = so_vocab_sorted_id(v, i);
        CHECK(!so_vocab_is_special(v, id) && !so_vocab_is_stop(v, id));
        if (i) CHECK_MSG(order(v, so_vocab_sorted_id(v, i - 1), id) < 0, "sorted %d out of order", (int)i);
        /* the trie range: the first later index whose bytes do not start with id's */
        size_t na = 0;
        const uint8_t *a = so_vocab_bytes(v, id, &na);
        int32_t j = i + 1;
        for (; j < ns; j++) {
            size_t nb = 0;
            const uint8_t *b = so_vocab_bytes(v, so_vocab_sorted_id(v, j), &nb);
            if (!(na <= nb && memcmp(a, b, na) == 0)) break;
        }
        CHECK_MSG(so_vocab_subtree_end(v, i) == j, "sorted %d: range end %d, want %d", (int)i,
                  (int)so_vocab_subtree_end(v, i), (int)j);
        if (i && order(v, so_vocab_sorted_id(v, i - 1), id) < 0) {
            size_t np = 0;
            const uint8_t *p = so_vocab_bytes(v, so_vocab_sorted_id(v, i - 1), &np);
            if (np == na && memcmp(p, a, na) == 0) (*n_dup)++;
        }
    }
    so_vocab_free(v);
}

int main(void) {
    tokenizer *tok = load(DATA "/bytelevel");
    int dup = 0;
    if (tok) {
        check_vocab(tok, 7, tok_piece_to_id(tok, "<|im_end|>"), &dup);
        check_vocab(tok, 0, 0, &dup);
        so_vocab *v = NULL;
        const int32_t bad = tok_vocab_size(tok) + 9;
        CHECK(so_vocab_build(tok, 0, NULL, 0, &v) == VLLM_ERR_INVALID_ARG && !v);
        CHECK(so_vocab_build(tok, tok_vocab_size(tok) + 8, &bad, 1, &v) == VLLM_ERR_INVALID_ARG && !v);
        tok_free(tok);
    }
    tok = load(DATA "/spm");
    if (tok) {
        dup = 0;
        check_vocab(tok, 3, tok_piece_to_id(tok, "</s>"), &dup);
        /* "<0x20>" and U+2581 are both " ": equal bytes, ordered by id, one inside the other's range */
        CHECK_MSG(dup > 0, "no duplicate byte strings in the SentencePiece vocabulary");
        tok_free(tok);
    }
    TEST_END();
}
