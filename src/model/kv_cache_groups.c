/* kv_cache_groups.c: layer cache specs and their KV cache groups (see kv_cache_groups.h). */
#include "model/kv_cache_groups.h"

#include <string.h>

#include "core/error.h"
#include "core/log.h"

cache_spec model_layer_cache_spec(const model_config *c, int l) {
    cache_spec s = {0};
    const layer_spec *ls = &c->layers[l];
    switch (ls->kind) {
    case LAYER_ATTENTION:
        s.kind = ls->sliding_window > 0 ? CACHE_SLIDING_WINDOW : CACHE_FULL_ATTENTION;
        s.sliding_window = ls->sliding_window > 0 ? ls->sliding_window : 0;
        s.num_kv_heads = c->num_kv_heads;
        s.head_dim = c->head_dim;
        break;
    case LAYER_LINEAR_ATTENTION: /* its state lives in the recurrent-state pool, not in paged blocks */
        break;
    case LAYER_MLA: /* the latent [c ; k_rope] of each token, one "head", no V (vLLM's MLAAttentionSpec) */
        s.kind = CACHE_MLA;
        s.num_kv_heads = 1;
        s.head_dim = c->mla.kv_lora_rank + c->mla.qk_rope_head_dim;
        break;
    }
    return s;
}

static bool spec_equal(const cache_spec *a, const cache_spec *b) {
    return a->kind == b->kind && a->sliding_window == b->sliding_window && a->num_kv_heads == b->num_kv_heads &&
           a->head_dim == b->head_dim;
}

/* One group holding every caching layer, with spec s. */
static void single_group(const model_config *c, const cache_spec *s, kv_cache_groups *g) {
    g->num_groups = 1;
    g->spec[0] = *s;
    for (int l = 0; l < c->num_layers; l++) {
        if (model_layer_cache_spec(c, l).kind == CACHE_NONE) continue;
        g->layer_group[l] = 0;
        g->layer_slot[l] = g->group_size++;
    }
    g->group_layers[0] = g->group_size;
}

vllm_status kv_cache_groups_plan(const model_config *c, kv_cache_groups *g) {
    memset(g, 0, sizeof *g);
    for (int l = 0; l < MODEL_MAX_LAYERS; l++) g->layer_group[l] = g->layer_slot[l] = -1;

    /* bucket the layers by spec (vLLM's same_type_layers), full attention first, then in order
     * of first appearance; a bucket lists its layers in model order */
    enum { MAX_SPECS = KV_MAX_GROUPS };
    cache_spec specs[MAX_SPECS];
    int count[MAX_SPECS] = {0}, num_specs = 0, first_page = -1;
    bool too_many = false;
    for (int pass = 0; pass < 2; pass++) /* pass 0: full attention, pass 1: the rest */
        for (int l = 0; l < c->num_layers; l++) {
            cache_spec s = model_layer_cache_spec(c, l);
            if (s.kind == CACHE_NONE || (s.kind == CACHE_FULL_ATTENTION) != (pass == 0)) continue;
            int page = cache_spec_planes(&s) * s.num_kv_heads * s.head_dim;
            if (first_page < 0) first_page = page;
            if (page != first_page)
                return vt_error(VLLM_ERR_UNSUPPORTED,
                                "layer %d caches %d values per token, another layer %d: KV cache groups need "
                                "one page size",
                                l, page, first_page);
            int k = 0;
            while (k < num_specs && !spec_equal(&specs[k], &s)) k++;
            if (k == num_specs) {
                if (num_specs == MAX_SPECS) {
                    too_many = true;
                    continue;
                }
                specs[num_specs++] = s;
            }
            count[k]++;
        }
    if (num_specs == 0) return VLLM_OK; /* attention-free */
    if (num_specs == 1) {
        single_group(c, &specs[0], g);
        return VLLM_OK;
    }

    /* group_size: the smallest bucket (the "1" of an n:1 pattern), or the largest one when the
     * buckets are within 1.5x of each other (less padding) */
    int mn = count[0], mx = count[0];
    for (int k = 1; k < num_specs; k++) {
        if (count[k] < mn) mn = count[k];
        if (count[k] > mx) mx = count[k];
    }
    int gs = 2 * mx < 3 * mn ? mx : mn, total = 0;
    for (int k = 0; k < num_specs; k++) total += (count[k] + gs - 1) / gs;
    if (too_many || total > KV_MAX_GROUPS) {
        cache_spec full = specs[0];
        full.kind = CACHE_FULL_ATTENTION;
        full.sliding_window = 0;
        LOG_W("KV cache: the layers' specs need %d cache groups (at most %d): every layer allocates as full "
              "attention (sliding-window layers keep their whole context)",
              total, KV_MAX_GROUPS);
        single_group(c, &full, g);
        return VLLM_OK;
    }

    /* split each bucket into ceil(count / gs) groups; group i of a bucket takes its layers
     * i, i + n, i + 2n, ... (layers[i::n], so layers of all depths mix in every group) */
    g->group_size = gs;
    for (int k = 0; k < num_specs; k++) {
        int n = (count[k] + gs - 1) / gs, base = g->num_groups, seen = 0;
        for (int i = 0; i < n; i++) g->spec[base + i] = specs[k];
        for (int l = 0; l < c->num_layers; l++) {
            cache_spec s = model_layer_cache_spec(c, l);
            if (s.kind == CACHE_NONE || !spec_equal(&s, &specs[k])) continue;
            int grp = base + seen % n;
            g->layer_group[l] = grp;
            g->layer_slot[l] = g->group_layers[grp]++;
            seen++;
        }
        g->num_groups += n;
    }
    for (int k = 0; k < num_specs; k++)
        if (count[k] % gs)
            LOG_I("KV cache: %d layers of one spec in groups of %d: %d padding slot(s)", count[k], gs,
                  gs - count[k] % gs);
    return VLLM_OK;
}

bool kv_cache_groups_free_blocks(const kv_cache_groups *g) {
    for (int i = 0; i < g->num_groups; i++)
        if (g->spec[i].kind == CACHE_SLIDING_WINDOW) return true;
    return false;
}

int kv_group_max_blocks(const cache_spec *s, int block_size, int max_model_len, int max_step_tokens) {
    int full = (max_model_len + block_size - 1) / block_size;
    if (s->kind != CACHE_SLIDING_WINDOW) return full;
    long long tokens = (long long)s->sliding_window - 1 + max_step_tokens;
    if (tokens > max_model_len) tokens = max_model_len;
    long long n = (tokens + block_size - 1) / block_size + 1;
    return n < full ? (int)n : full;
}
