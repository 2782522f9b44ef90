/* kv_coordinator.c: block tables per KV cache group, sliding-window freeing and group-aware prefix hits (see kv_coordinator.h). */
#include "engine/kv_coordinator.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

vllm_status kvc_init(kv_coordinator *c, const kv_cache_groups *groups, int num_blocks, int block_size,
                     int max_blocks, bool caching) {
    memset(c, 0, sizeof *c);
    if (max_blocks < 1) return vt_error(VLLM_ERR_INVALID_ARG, "kv cache: %d blocks per sequence", max_blocks);
    c->block_size = block_size;
    c->max_blocks = max_blocks;
    if (groups && groups->num_groups > 0) {
        c->num_groups = groups->num_groups;
        memcpy(c->spec, groups->spec, sizeof c->spec);
    } else {
        c->num_groups = 1;
        c->spec[0] = (cache_spec){.kind = CACHE_FULL_ATTENTION};
    }
    vllm_status st = kv_init(&c->pool, num_blocks, block_size, caching);
    if (st != VLLM_OK) return st;
    bool frees = false;
    for (int g = 0; g < c->num_groups; g++) frees |= c->spec[g].kind == CACHE_SLIDING_WINDOW;
    if (frees) {
        if (num_blocks < 2) {
            kvc_destroy(c);
            return vt_error(VLLM_ERR_INVALID_ARG, "kv cache: %d block(s): a sliding window needs a null block too",
                            num_blocks);
        }
        kv_reserve_null(&c->pool);
    }
    c->hashes = malloc((size_t)max_blocks * sizeof *c->hashes);
    c->ids = malloc((size_t)max_blocks * sizeof *c->ids);
    if (!c->hashes || !c->ids) {
        kvc_destroy(c);
        return vt_error(VLLM_ERR_NO_MEMORY, "kv cache: out of memory");
    }
    return VLLM_OK;
}

void kvc_destroy(kv_coordinator *c) {
    kv_destroy(&c->pool);
    free(c->hashes);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

int kvc_num_free(const kv_coordinator *c) { return kv_num_free(&c->pool); }

static int32_t *table(const kv_coordinator *c, const int32_t *blocks, int g) {
    return (int32_t *)blocks + (size_t)g * (size_t)c->max_blocks;
}

/* ---- prefix hits ---- */

/* Group g's cached block for block i of the tokens, whose hashes / prefix
 * ids are in c->hashes / c->ids, or -1. */
static int32_t lookup_block(const kv_coordinator *c, int g, const int32_t *tokens, int i) {
    return kv_lookup(&c->pool, g, c->hashes[i], i ? c->ids[i - 1] : KV_ROOT_ID, tokens + (size_t)i * c->block_size);
}

/* Group g's longest hit of at most max blocks; writes its table to out when
 * not NULL. */
static int group_hit(const kv_coordinator *c, int g, const int32_t *tokens, int max, int32_t *out) {
    const cache_spec *s = &c->spec[g];
    if (s->kind != CACHE_SLIDING_WINDOW) {
        /* FullAttentionManager: cached blocks from the start */
        int n = 0;
        for (int32_t b; n < max && (b = lookup_block(c, g, tokens, n)) >= 0; n++)
            if (out) out[n] = b;
        return n;
    }
    /* SlidingWindowManager: from the right, the first run of cached blocks that covers the
     * window - 1 tokens before its end (the next token's window); a shorter run from the start
     * also serves (the window reaches the first token) */
    int need = (s->sliding_window - 1 + c->block_size - 1) / c->block_size, run = 0;
    for (int i = max - 1; i >= 0; i--) {
        int32_t b = lookup_block(c, g, tokens, i);
        if (b < 0) {
            run = 0;
            continue;
        }
        if (out) out[i] = b;
        if (++run >= need) {
            if (out)
                for (int j = 0; j < i; j++) out[j] = c->pool.null_block;
            return i + run;
        }
    }
    return run;
}

int kvc_find_hit(kv_coordinator *c, const int32_t *tokens, int num_tokens, int32_t *blocks, kv_chain *chain) {
    *chain = (kv_chain){.num_blocks = 0, .hash = KV_ROOT_HASH, .id = KV_ROOT_ID};
    if (!c->pool.caching || num_tokens < 1) return 0;
    int bs = c->block_size, limit = (num_tokens - 1) / bs;
    if (limit > c->max_blocks) limit = c->max_blocks;
    /* the prefix ids of the leading blocks some group still caches */
    int known = 0;
    uint64_t ph = KV_ROOT_HASH, pid = KV_ROOT_ID;
    while (known < limit) {
        const int32_t *t = tokens + (size_t)known * bs;
        uint64_t h = kv_block_hash(ph, t, bs);
        int32_t b = kv_lookup(&c->pool, -1, h, pid, t);
        if (b < 0) break;
        c->hashes[known] = h;
        c->ids[known] = c->pool.cache_id[b];
        ph = h;
        pid = c->ids[known];
        known++;
    }
    /* the longest hit every group serves: each group's search capped by the current hit until
     * none shortens it (full attention's hit of any shorter length is its prefix); the caller's
     * cap_hit takes part as one more group */
    int hit = known;
    for (bool changed = true; changed && hit > 0;) {
        changed = false;
        if (c->cap_hit) {
            int h = c->cap_hit(c->cap_ctx, c->ids, hit);
            if (h < hit) {
                hit = h > 0 ? h : 0;
                changed = true;
            }
        }
        for (int g = 0; g < c->num_groups; g++) {
            int h = group_hit(c, g, tokens, hit, NULL);
            if (h < hit) {
                hit = h;
                changed = true;
            }
        }
    }
    for (int g = 0; g < c->num_groups && hit > 0; g++) group_hit(c, g, tokens, hit, table(c, blocks, g));
    chain->num_blocks = hit;
    if (hit > 0) {
        chain->hash = c->hashes[hit - 1];
        chain->id = c->ids[hit - 1];
    }
    return hit;
}

int kvc_num_evictable(const kv_coordinator *c, const int32_t *blocks, int n) {
    int k = 0;
    for (int g = 0; g < c->num_groups; g++) k += kv_num_evictable(&c->pool, table(c, blocks, g), n);
    return k;
}

void kvc_touch(kv_coordinator *c, const int32_t *blocks, int n) {
    for (int g = 0; g < c->num_groups; g++) kv_touch(&c->pool, table(c, blocks, g), n);
}

/* ---- allocation ---- */

void kvc_remove_skipped(kv_coordinator *c, int32_t *blocks, int num_blocks, int num_computed) {
    for (int g = 0; g < c->num_groups; g++) {
        const cache_spec *s = &c->spec[g];
        if (s->kind != CACHE_SLIDING_WINDOW) continue;
        /* tokens before the first key the next query reads, pos - window + 1 */
        int skipped = num_computed - s->sliding_window + 1;
        if (skipped <= 0) continue;
        int n = skipped / c->block_size, lo = n;
        if (n > num_blocks) n = lo = num_blocks;
        int32_t *t = table(c, blocks, g);
        while (lo > 0 && t[lo - 1] != c->pool.null_block) lo--; /* earlier ones are null already */
        kv_free_blocks(&c->pool, t + lo, n - lo);
        for (int i = lo; i < n; i++) t[i] = c->pool.null_block;
    }
}

int kvc_num_new_blocks(const kv_coordinator *c, int num_blocks, int num_tokens) {
    int want = (num_tokens + c->block_size - 1) / c->block_size;
    return want > num_blocks ? (want - num_blocks) * c->num_groups : 0;
}

bool kvc_allocate(kv_coordinator *c, int32_t *blocks, int *num_blocks, int num_tokens) {
    int want = (num_tokens + c->block_size - 1) / c->block_size;
    if (want > c->max_blocks || kvc_num_new_blocks(c, *num_blocks, num_tokens) > kv_num_free(&c->pool)) return false;
    for (int g = 0; g < c->num_groups; g++) {
        int32_t *t = table(c, blocks, g);
        for (int i = *num_blocks; i < want; i++) t[i] = kv_alloc(&c->pool);
    }
    if (want > *num_blocks) *num_blocks = want;
    return true;
}

void kvc_free(kv_coordinator *c, int32_t *blocks, int *num_blocks) {
    for (int g = 0; g < c->num_groups; g++) kv_free_blocks(&c->pool, table(c, blocks, g), *num_blocks);
    *num_blocks = 0;
}

/* ---- caching ---- */

void kvc_cache_blocks(kv_coordinator *c, const int32_t *tokens, int num_tokens, const int32_t *blocks,
                      kv_chain *chain, int32_t *rec, int *num_rec) {
    kv_manager *m = &c->pool;
    if (!m->caching) return;
    int bs = c->block_size, full = num_tokens / bs;
    for (int i = chain->num_blocks; i < full; i++) {
        uint64_t ph = i == 0 ? KV_ROOT_HASH : chain->hash, pid = i == 0 ? KV_ROOT_ID : chain->id;
        chain->num_blocks = i + 1;
        if (pid == 0) continue; /* broken chain: the rest of this sequence stays uncached */
        const int32_t *t = tokens + (size_t)i * bs;
        uint64_t h = kv_block_hash(ph, t, bs);
        chain->hash = h;
        /* the prefix's id: the one any group's cached block of it carries, else a new one */
        int32_t any = kv_lookup(m, -1, h, pid, t);
        uint64_t id = any >= 0 ? m->cache_id[any] : 0;
        for (int g = 0; g < c->num_groups; g++) {
            int32_t b = table(c, blocks, g)[i];
            if (b < 0 || b == m->null_block || m->cache_id[b]) continue; /* no block, or b holds a hash */
            if (kv_lookup(m, g, h, pid, t) >= 0) continue;                 /* an equal block is cached */
            if (!id) id = kv_new_id(m);
            kv_cache_block(m, g, b, h, pid, id, t);
            if (rec) rec[(*num_rec)++] = b;
        }
        chain->id = id; /* 0 (the chain breaks) only when no group holds a block for it */
    }
}

int kvc_held_blocks(const kv_coordinator *c, const int32_t *blocks, int num_blocks, int g) {
    const int32_t *t = table(c, blocks, g);
    int n = 0;
    for (int i = 0; i < num_blocks; i++) n += t[i] >= 0 && t[i] != c->pool.null_block;
    return n;
}
