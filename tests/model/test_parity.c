/*
 * test_parity.c: every model fixture in tests/fixtures/models/ (tiny random
 * models made by tools/make_fixtures.py with transformers) against its
 * recorded greedy continuations: identical tokens up to the first recorded
 * near-tie (top1 - top2 < 0.02 nats) and logprobs within 1e-3. Each case
 * runs under several engine layouts (one batch, chunked prefill, odd block
 * sizes, a KV cache small enough to force preemption, blocks small enough
 * that sliding-window layers free theirs) which must all agree.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/fixtures.h"
#include "test.h"
#include "vllm.h"

#define NEAR_TIE 0.02
#define LOGPROB_TOL 1e-3

#define TIGHT (-1) /* num_kv_blocks: the fewest that make the generation preempt */

typedef struct layout {
    const char *name;
    int block_size, max_num_batched_tokens, num_kv_blocks, max_num_seqs, threads, max_model_len;
    bool no_prefix_caching;
} layout;

static const layout LAYOUTS[] = {
    {"one batch", 16, 8192, 0, 256, 1, 128, false},
    {"chunked prefill, block 7, 3 threads", 7, 9, 0, 256, 3, 128, false},
    {"block 1, 2 seqs at a time", 1, 8192, 0, 2, 2, 128, false},
    /* TIGHT: the smallest KV cache, from the fewest blocks the engine accepts for one 64-token
     * sequence up, under which the generation preempts (24 blocks of the one-group fixtures; how
     * many with KV cache groups depends on the windows, as sliding-window layers free blocks) */
    {"tight KV cache (preemption)", 4, 8192, TIGHT, 256, 1, 64, false},
    {"one sequence, 5-token chunks (prefill-only steps)", 16, 5, 0, 1, 2, 128, false},
    {"prefix caching off", 4, 8192, 0, 256, 1, 128, true},
    /* block 2 < sliding_window 8 of the Gemma fixtures: their sliding-window groups free the
     * blocks that leave the window during the generation (and serve prefix hits from the rest) */
    {"block 2, 6-token chunks (sliding-window blocks freed)", 2, 6, 0, 256, 2, 128, false},
    {"block 2, sliding-window blocks freed, prefix caching off", 2, 8192, 0, 256, 1, 128, true},
};

/* The fewest KV blocks an engine with options o accepts (it must hold one
 * sequence of max_model_len in every KV cache group), by bisection. */
static int fewest_kv_blocks(const char *dir, vllm_engine_options o) {
    int lo = 1, hi = 4096;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        o.num_kv_blocks = mid;
        vllm_engine *e = NULL;
        if (vllm_engine_create(dir, &o, &e) == VLLM_OK) hi = mid;
        else lo = mid + 1;
        vllm_engine_free(e);
    }
    return lo;
}

static void run_case(const char *dir, json_t *expected) {
    json_t *prompts = json_object_get(expected, "prompts");
    size_t np = json_array_size(prompts);
    CHECK_MSG(np > 0, "%s: no prompts", dir);
    if (!np) return;
    fixture_prompts fp;
    fixture_prompts_load(prompts, &fp);
    vllm_prompt *ps = fp.ps;
    const int max_new = fp.max_new;
    for (size_t L = 0; L < sizeof LAYOUTS / sizeof LAYOUTS[0]; L++) {
        const layout *lay = &LAYOUTS[L];
        vllm_engine_options o = vllm_engine_default_options();
        o.block_size = lay->block_size;
        o.max_num_batched_tokens = lay->max_num_batched_tokens;
        o.num_kv_blocks = lay->num_kv_blocks;
        o.max_num_seqs = lay->max_num_seqs;
        o.num_threads = lay->threads;
        o.max_model_len = lay->max_model_len;
        o.enable_prefix_caching = !lay->no_prefix_caching;
        bool tight = lay->num_kv_blocks == TIGHT;
        int fewest = tight ? fewest_kv_blocks(dir, o) : 0;
        vllm_engine *e = NULL;
        vllm_completion *c = NULL;
        vllm_generate_stats stats;
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = max_new;
        vllm_status st;
        for (int extra = 0;; extra++) { /* tight: grow the cache until the generation preempts */
            if (tight) o.num_kv_blocks = fewest + extra;
            st = vllm_engine_create(dir, &o, &e);
            if (st != VLLM_OK) break;
            st = vllm_generate(e, ps, np, &sp, false, &c, &stats);
            if (!tight || st != VLLM_OK || stats.preemptions > 0 || extra == 64) break;
            vllm_completions_free(c, np);
            vllm_engine_free(e);
            c = NULL;
            e = NULL;
        }
        CHECK_MSG(e != NULL, "%s: %s", dir, vllm_last_error());
        if (!e) continue;
        if (tight) CHECK_MSG(stats.preemptions > 0, "%s [%s]: no preemption", dir, lay->name);
        CHECK_MSG(st == VLLM_OK, "%s [%s]: %s", dir, lay->name, vllm_last_error());
        for (size_t i = 0; st == VLLM_OK && i < np; i++) {
            json_t *p = json_array_get(prompts, i);
            json_t *toks = json_object_get(p, "token_ids"), *lps = json_object_get(p, "logprobs"),
                   *gaps = json_object_get(p, "top2_gap");
            size_t nt = json_array_size(toks);
            CHECK(c[i].num_tokens == (size_t)max_new);
            for (size_t j = 0; j < nt && j < c[i].num_tokens; j++) {
                int want = (int)json_integer_value(json_array_get(toks, j));
                double want_lp = json_number_value(json_array_get(lps, j));
                CHECK_MSG(c[i].token_ids[j] == want, "%s [%s] prompt %zu token %zu: got %d want %d", dir, lay->name, i,
                          j, c[i].token_ids[j], want);
                if (c[i].token_ids[j] != want) break;
                CHECK_MSG(fabs(c[i].logprobs[j] - want_lp) <= LOGPROB_TOL,
                          "%s [%s] prompt %zu token %zu: logprob %.6f want %.6f", dir, lay->name, i, j,
                          (double)c[i].logprobs[j], want_lp);
                if (json_number_value(json_array_get(gaps, j)) < NEAR_TIE) break; /* near-tie: stop comparing */
            }
        }
        vllm_completions_free(c, np);
        vllm_engine_free(e);
    }
    fixture_prompts_free(&fp);
}

int main(int argc, char **argv) {
    /* argv[1]: another folder of fixtures (new ones, before they are committed) */
    const char *root = argc > 1 ? argv[1] : VLLM_SOURCE_DIR "/tests/fixtures/models";
    fixture_names names;
    CHECK_MSG(fixture_list(root, &names), "%s missing", root);
    for (int k = 0; k < names.n; k++) {
        char dir[1024];
        json_error_t err;
        json_t *exp = fixture_load(root, names.name[k], dir, sizeof dir, &err);
        CHECK_MSG(exp != NULL, "%s/%s: %s", root, names.name[k], err.text);
        if (!exp) continue;
        fprintf(stderr, "case %s\n", names.name[k]);
        run_case(dir, exp);
        json_decref(exp);
    }
    CHECK_MSG(names.n >= (argc > 1 ? 1 : 5), "expected at least 5 fixture models, found %d", names.n);
    TEST_END();
}
