/*
 * test_kv_groups.c: KV cache groups: how layers are grouped (one group for
 * a uniform stack, Gemma 2 / 3 patterns with shared physical slots), the
 * coordinator's block tables per group (sliding-window blocks freed and
 * replaced by the null block, prefix hits every group can serve), and a
 * long Gemma 3 request through the engine whose sliding-window group keeps
 * a bounded number of blocks while its full-attention group grows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/kv_coordinator.h"
#include "model/kv_cache_groups.h"
#include "test.h"

static model_config cfg; /* large (per-layer specs): static */

/* A stack of n attention layers; window[l % period] > 0 makes layer l sliding. */
static void make_stack(int n, const int *window, int period) {
    memset(&cfg, 0, sizeof cfg);
    cfg.num_layers = n;
    cfg.num_kv_heads = 2;
    cfg.head_dim = 16;
    for (int l = 0; l < n; l++) {
        cfg.layers[l].kind = LAYER_ATTENTION;
        cfg.layers[l].sliding_window = window[l % period];
    }
}

/* Every layer in exactly one group, the layers of a group on distinct slots. */
static void check_slots(const kv_cache_groups *g) {
    for (int a = 0; a < cfg.num_layers; a++) {
        CHECK(g->layer_group[a] >= 0 && g->layer_group[a] < g->num_groups);
        CHECK(g->layer_slot[a] >= 0 && g->layer_slot[a] < g->group_size);
        for (int b = a + 1; b < cfg.num_layers; b++)
            CHECK(g->layer_group[a] != g->layer_group[b] || g->layer_slot[a] != g->layer_slot[b]);
    }
}

static void test_plan(void) {
    kv_cache_groups g;
    /* uniform stack (Llama, Qwen3): one group, one slot per layer */
    int full[1] = {0};
    make_stack(6, full, 1);
    CHECK_OK(kv_cache_groups_plan(&cfg, &g));
    CHECK(g.num_groups == 1 && g.group_size == 6 && g.spec[0].kind == CACHE_FULL_ATTENTION);
    CHECK(!kv_cache_groups_free_blocks(&g));
    check_slots(&g);

    /* Mistral: every layer sliding: one sliding group */
    int mistral[1] = {4096};
    make_stack(4, mistral, 1);
    CHECK_OK(kv_cache_groups_plan(&cfg, &g));
    CHECK(g.num_groups == 1 && g.group_size == 4 && g.spec[0].kind == CACHE_SLIDING_WINDOW);
    CHECK(g.spec[0].sliding_window == 4096 && kv_cache_groups_free_blocks(&g));

    /* Gemma 2: sliding / global alternating: 2 groups of 2, full attention first */
    int gemma2[2] = {8, 0};
    make_stack(4, gemma2, 2);
    CHECK_OK(kv_cache_groups_plan(&cfg, &g));
    CHECK(g.num_groups == 2 && g.group_size == 2);
    CHECK(g.spec[0].kind == CACHE_FULL_ATTENTION && g.spec[1].kind == CACHE_SLIDING_WINDOW);
    CHECK(g.layer_group[1] == 0 && g.layer_group[3] == 0 && g.layer_group[0] == 1 && g.layer_group[2] == 1);
    CHECK(g.layer_slot[0] == 0 && g.layer_slot[1] == 0 && g.layer_slot[2] == 1 && g.layer_slot[3] == 1);
    check_slots(&g);

    /* Gemma 3 1B: 26 layers, 5 sliding : 1 global (4 global, 22 sliding): group size 4, one full
     * group and 6 sliding groups (layers[i::6]: 4, 4, 4, 4, 3, 3 layers) */
    int gemma3[6] = {512, 512, 512, 512, 512, 0};
    make_stack(26, gemma3, 6);
    CHECK_OK(kv_cache_groups_plan(&cfg, &g));
    CHECK(g.num_groups == 7 && g.group_size == 4);
    CHECK(g.spec[0].kind == CACHE_FULL_ATTENTION && g.group_layers[0] == 4);
    int sizes[7] = {4, 4, 4, 4, 4, 3, 3};
    for (int i = 0; i < 7; i++) CHECK(g.group_layers[i] == sizes[i]);
    for (int i = 1; i < 7; i++) CHECK(g.spec[i].kind == CACHE_SLIDING_WINDOW && g.spec[i].sliding_window == 512);
    CHECK(g.layer_group[0] == 1 && g.layer_group[1] == 2 && g.layer_group[6] == 6 && g.layer_group[7] == 1);
    CHECK(g.layer_group[5] == 0); /* the k-th sliding layer: group 1 + k % 6 */
    check_slots(&g);

    /* the most blocks a sequence holds per group (vLLM's max_memory_usage_bytes) */
    cache_spec f = {.kind = CACHE_FULL_ATTENTION}, s = {.kind = CACHE_SLIDING_WINDOW, .sliding_window = 8};
    CHECK(kv_group_max_blocks(&f, 4, 64, 8192) == 16);
    CHECK(kv_group_max_blocks(&s, 4, 64, 8192) == 16);    /* a whole prompt in one step */
    CHECK(kv_group_max_blocks(&s, 4, 64, 16) == 7);       /* cdiv(7 + 16, 4) + 1 */
    CHECK(kv_group_max_blocks(&s, 2, 1000, 1) == 5);      /* cdiv(7 + 1, 2) + 1 */
}

/* A full-attention group and a sliding-window group (window 8, blocks of 2). */
static void test_coordinator(void) {
    enum { BS = 2, MB = 16, NB = 64 };
    kv_cache_groups g = {.num_groups = 2, .group_size = 1};
    g.spec[0] = (cache_spec){.kind = CACHE_FULL_ATTENTION};
    g.spec[1] = (cache_spec){.kind = CACHE_SLIDING_WINDOW, .sliding_window = 8};
    kv_coordinator c;
    CHECK_OK(kvc_init(&c, &g, NB, BS, MB, true));
    CHECK(c.pool.null_block == 0 && kvc_num_free(&c) == NB - 1 && kv_num_usable(&c.pool) == NB - 1);

    int32_t tok[32], a[2 * MB], b[2 * MB];
    for (int i = 0; i < 32; i++) tok[i] = 100 + i;
    int na = 0, nb = 0;
    kv_chain ca = {0}, cb;

    /* request a computes 20 tokens: 10 blocks in each group, all cached */
    CHECK(kvc_num_new_blocks(&c, 0, 20) == 20);
    CHECK(kvc_allocate(&c, a, &na, 20) && na == 10);
    CHECK(kvc_num_free(&c) == NB - 1 - 20);
    kvc_cache_blocks(&c, tok, 20, a, &ca, NULL, NULL);
    CHECK(ca.num_blocks == 10 && c.pool.num_cached == 20);
    CHECK(c.pool.cache_id[a[3]] == c.pool.cache_id[a[MB + 3]]); /* one prefix id in every group */

    /* the next token is position 20: its window starts at 13, so blocks 0..5 (tokens 0..11) go */
    kvc_remove_skipped(&c, a, na, 20);
    CHECK(kvc_held_blocks(&c, a, na, 0) == 10 && kvc_held_blocks(&c, a, na, 1) == 4);
    for (int i = 0; i < 6; i++) CHECK(a[MB + i] == c.pool.null_block);
    CHECK(kvc_num_free(&c) == NB - 1 - 14);
    kvc_remove_skipped(&c, a, na, 20); /* idempotent */
    CHECK(kvc_num_free(&c) == NB - 1 - 14);

    /* the same 20 tokens + 1: full attention hits 10 blocks, the window needs cdiv(7, 2) = 4
     * blocks before position 20 (blocks 6..9, still held by a) */
    CHECK(kvc_find_hit(&c, tok, 21, b, &cb) == 10);
    CHECK(cb.num_blocks == 10 && cb.id == ca.id);
    for (int i = 0; i < 10; i++) CHECK(b[i] == a[i]);
    for (int i = 0; i < 6; i++) CHECK(b[MB + i] == c.pool.null_block);
    for (int i = 6; i < 10; i++) CHECK(b[MB + i] == a[MB + i]);
    CHECK(kvc_num_evictable(&c, b, 10) == 0);

    /* a prompt sharing 7 blocks: the window before position 14 is blocks 3..6, of which 3..5 were
     * freed by a but are still cached (they leave the free queue when touched) */
    int32_t tok2[32];
    memcpy(tok2, tok, sizeof tok2);
    tok2[14] = 7;
    CHECK(kvc_find_hit(&c, tok2, 20, b, &cb) == 7);
    for (int i = 0; i < 3; i++) CHECK(b[MB + i] == c.pool.null_block);
    int32_t sliding5 = b[MB + 5];
    CHECK(kvc_num_evictable(&c, b, 7) == 3);
    nb = 7;
    int before = kvc_num_free(&c);
    kvc_touch(&c, b, nb);
    CHECK(kvc_num_free(&c) == before - 3);
    CHECK(kvc_allocate(&c, b, &nb, 20) && nb == 10 && kvc_num_free(&c) == before - 3 - 6);
    kvc_free(&c, b, &nb);
    CHECK(nb == 0 && kvc_num_free(&c) == before);

    /* block 5 of the sliding group evicted: the window run before position 14 breaks; the run
     * 1..4 serves position 10 (hit 5 blocks), and full attention follows */
    kv_uncache(&c.pool, sliding5);
    CHECK(kvc_find_hit(&c, tok2, 20, b, &cb) == 5);
    CHECK(b[MB + 0] == c.pool.null_block && b[MB + 1] != c.pool.null_block);

    /* a hit shorter than the window from the start needs no null block */
    CHECK(kvc_find_hit(&c, tok, 5, b, &cb) == 2);
    CHECK(b[MB + 0] != c.pool.null_block && b[MB + 1] != c.pool.null_block);

    /* caching off: no hits, blocks still freed */
    kvc_free(&c, a, &na);
    CHECK(kvc_num_free(&c) == NB - 1);
    kvc_destroy(&c);
    CHECK_OK(kvc_init(&c, &g, NB, BS, MB, false));
    CHECK(kvc_allocate(&c, a, &na, 20));
    kvc_cache_blocks(&c, tok, 20, a, &ca, NULL, NULL);
    CHECK(kvc_find_hit(&c, tok, 21, b, &cb) == 0);
    kvc_remove_skipped(&c, a, na, 20);
    CHECK(kvc_held_blocks(&c, a, na, 1) == 4);
    kvc_free(&c, a, &na);
    CHECK(kvc_num_free(&c) == NB - 1);
    kvc_destroy(&c);

    /* one full-attention group (groups NULL): no null block, the whole pool usable */
    CHECK_OK(kvc_init(&c, NULL, 8, BS, MB, true));
    CHECK(c.num_groups == 1 && c.pool.null_block == -1 && kvc_num_free(&c) == 8);
    CHECK(!kvc_allocate(&c, a, &na, 18) && na == 0); /* 9 blocks do not fit: nothing taken */
    CHECK(kvc_num_free(&c) == 8);
    kvc_destroy(&c);
}

/* A long request on the gemma3_local fixture (sliding_window 8), blocks of 2
 * tokens, 8-token chunks: after every step its sliding-window group holds at
 * most cdiv(window - 1 + 8, 2) + 1 blocks while the full group grows with the
 * context; with and without prefix caching. */
static void test_gemma3_bounded(bool caching) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.block_size = 2;
    o.max_model_len = 256;
    o.max_num_batched_tokens = 8;
    o.enable_prefix_caching = caching;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(VLLM_SOURCE_DIR "/tests/fixtures/models/gemma3_local", &o, &e));
    if (!e) return;
    const kv_coordinator *kv = &e->sched.kv;
    CHECK(kv->num_groups == 2 && kv->spec[0].kind == CACHE_FULL_ATTENTION &&
          kv->spec[1].kind == CACHE_SLIDING_WINDOW && kv->spec[1].sliding_window == 8);
    int bound = kv_group_max_blocks(&kv->spec[1], o.block_size, o.max_model_len, o.max_num_batched_tokens);
    CHECK(bound == 9);
    int usable = kv_num_usable(&kv->pool);
    CHECK(kvc_num_free(kv) == usable);

    int32_t prompt[60];
    for (int i = 0; i < 60; i++) prompt[i] = 3 + (i * 37) % 500;
    vllm_prompt p = {.token_ids = prompt, .num_token_ids = 60};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = 150;
    CHECK_OK(vllm_engine_add_request(e, "long", &p, &sp));
    int steps = 0, max_sliding = 0, max_full = 0;
    size_t generated = 0;
    while (vllm_engine_has_unfinished(e) && steps < 1000) {
        const vllm_request_output *out;
        size_t n;
        CHECK_OK(vllm_engine_step(e, &out, &n));
        for (size_t i = 0; i < n; i++) generated += out[i].num_new_tokens;
        steps++;
        if (e->sched.num_running != 1) continue;
        const request *r = e->sched.running[0];
        int full = kvc_held_blocks(kv, r->blocks, r->num_blocks, 0);
        int sliding = kvc_held_blocks(kv, r->blocks, r->num_blocks, 1);
        CHECK(full == r->num_blocks); /* full attention keeps every block */
        CHECK_MSG(sliding <= bound, "step %d: %d sliding-window blocks (bound %d), context %d", steps, sliding,
                  bound, r->num_computed);
        /* every block is held once: the pool's free count adds up */
        CHECK(kvc_num_free(kv) == usable - full - sliding);
        if (sliding > max_sliding) max_sliding = sliding;
        if (full > max_full) max_full = full;
    }
    CHECK(generated == 150);
    CHECK(max_full >= 100); /* the full group grew with the whole context (209 tokens) */
    CHECK(max_sliding >= 4 && max_sliding <= bound);
    CHECK(kvc_num_free(kv) == usable); /* no leak */
    vllm_engine_free(e);
}

int main(void) {
    test_plan();
    test_coordinator();
    test_gemma3_bounded(true);
    test_gemma3_bounded(false);
    TEST_END();
}
