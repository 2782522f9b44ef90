/* kv_manager.c: KV block refcounts, the LRU free queue and the prefix cache
 * (hash chain, hash -> block buckets, eviction); see kv_manager.h. */
#include "engine/kv_manager.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* splitmix64's finalizer: a bijective 64-bit mixer with full avalanche */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t kv_block_hash(uint64_t parent_hash, const int32_t *tokens, int n) {
    uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++) h = mix64(h ^ (uint64_t)(uint32_t)tokens[i]) + 0x9e3779b97f4a7c15ull;
    return mix64(h ^ (uint64_t)n);
}

vllm_status kv_init(kv_manager *m, int num_blocks, int block_size, bool caching) {
    memset(m, 0, sizeof *m);
    if (num_blocks < 1 || block_size < 1)
        return vt_error(VLLM_ERR_INVALID_ARG, "kv cache: %d blocks of %d tokens", num_blocks, block_size);
    size_t N = (size_t)num_blocks;
    m->num_blocks = num_blocks;
    m->block_size = block_size;
    m->caching = caching;
    m->ref = calloc(N, sizeof *m->ref);
    m->prev = malloc(N * sizeof *m->prev);
    m->next = malloc(N * sizeof *m->next);
    bool ok = m->ref && m->prev && m->next;
    if (ok && caching) {
        uint64_t nb = 1;
        while (nb < N) nb <<= 1;
        m->bucket_mask = nb - 1;
        m->hash = malloc(N * sizeof *m->hash);
        m->cache_id = calloc(N, sizeof *m->cache_id);
        m->parent_id = malloc(N * sizeof *m->parent_id);
        m->group = malloc(N * sizeof *m->group);
        m->bucket_next = malloc(N * sizeof *m->bucket_next);
        m->buckets = malloc((size_t)nb * sizeof *m->buckets);
        /* N * block_size cannot overflow size_t: both are ints */
        m->tokens = malloc(N * (size_t)block_size * sizeof *m->tokens);
        ok = m->hash && m->cache_id && m->parent_id && m->group && m->bucket_next && m->buckets && m->tokens;
        if (ok)
            for (uint64_t i = 0; i < nb; i++) m->buckets[i] = -1;
    }
    if (!ok) {
        kv_destroy(m);
        return vt_error(VLLM_ERR_NO_MEMORY, "kv cache: out of memory for %d block records", num_blocks);
    }
    /* every block free, lowest ids first */
    for (int i = 0; i < num_blocks; i++) {
        m->prev[i] = i - 1;
        m->next[i] = i + 1 < num_blocks ? i + 1 : -1;
    }
    m->free_head = 0;
    m->free_tail = num_blocks - 1;
    m->num_free = num_blocks;
    m->next_id = KV_ROOT_ID + 1;
    m->null_block = -1;
    return VLLM_OK;
}

int32_t kv_reserve_null(kv_manager *m) {
    if (m->null_block >= 0) return m->null_block;
    if (m->ref[0] != 0 || m->free_head != 0) return -1; /* only before any allocation */
    (void)kv_alloc(m);                                   /* block 0, refcount 1 for good */
    m->null_block = 0;
    return 0;
}

int kv_num_usable(const kv_manager *m) { return m->num_blocks - (m->null_block >= 0); }

void kv_destroy(kv_manager *m) {
    free(m->ref);
    free(m->prev);
    free(m->next);
    free(m->hash);
    free(m->cache_id);
    free(m->parent_id);
    free(m->group);
    free(m->bucket_next);
    free(m->buckets);
    free(m->tokens);
    memset(m, 0, sizeof *m);
}

int kv_num_free(const kv_manager *m) { return m->num_free; }

/* ---- the free queue ---- */

static void queue_remove(kv_manager *m, int b) {
    if (m->prev[b] >= 0) m->next[m->prev[b]] = m->next[b];
    else m->free_head = m->next[b];
    if (m->next[b] >= 0) m->prev[m->next[b]] = m->prev[b];
    else m->free_tail = m->prev[b];
    m->prev[b] = m->next[b] = -1;
    m->num_free--;
}

static void queue_append(kv_manager *m, int b) {
    m->prev[b] = m->free_tail;
    m->next[b] = -1;
    if (m->free_tail >= 0) m->next[m->free_tail] = b;
    else m->free_head = b;
    m->free_tail = b;
    m->num_free++;
}

static bool valid_block(const kv_manager *m, int32_t b) { return b >= 0 && b < m->num_blocks; }

/* A block requests take references on (not the null block). */
static bool real_block(const kv_manager *m, int32_t b) { return valid_block(m, b) && b != m->null_block; }

int kv_alloc(kv_manager *m) {
    if (m->num_free == 0) return -1;
    int b = m->free_head;
    queue_remove(m, b);
    if (m->caching && m->cache_id[b]) kv_uncache(m, b); /* eviction */
    m->ref[b] = 1;
    return b;
}

void kv_free_blocks(kv_manager *m, const int32_t *blocks, int n) {
    for (int i = n - 1; i >= 0; i--) {
        int32_t b = blocks[i];
        if (!real_block(m, b) || m->ref[b] <= 0) continue;
        if (--m->ref[b] == 0) queue_append(m, b);
    }
}

void kv_touch(kv_manager *m, const int32_t *blocks, int n) {
    for (int i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (!real_block(m, b)) continue;
        if (m->ref[b] == 0) queue_remove(m, b);
        m->ref[b]++;
    }
}

int kv_num_evictable(const kv_manager *m, const int32_t *blocks, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += real_block(m, blocks[i]) && m->ref[blocks[i]] == 0;
    return c;
}

/* ---- the prefix cache ---- */

int32_t kv_lookup(const kv_manager *m, int group, uint64_t h, uint64_t parent, const int32_t *tokens) {
    if (!m->caching) return -1;
    size_t bs = (size_t)m->block_size;
    for (int32_t b = m->buckets[h & m->bucket_mask]; b >= 0; b = m->bucket_next[b])
        if (m->hash[b] == h && m->parent_id[b] == parent && (group < 0 || m->group[b] == group) &&
            !memcmp(m->tokens + (size_t)b * bs, tokens, bs * sizeof *tokens))
            return b;
    return -1;
}

/* Group 0's cached block with this hash, parent and tokens, or -1. */
static int32_t lookup(const kv_manager *m, uint64_t h, uint64_t parent, const int32_t *tokens) {
    return kv_lookup(m, 0, h, parent, tokens);
}

uint64_t kv_new_id(kv_manager *m) { return m->next_id++; }

void kv_cache_block(kv_manager *m, int group, int32_t b, uint64_t h, uint64_t parent, uint64_t id,
                    const int32_t *tokens) {
    if (!m->caching || !real_block(m, b) || m->cache_id[b]) return;
    size_t bs = (size_t)m->block_size;
    m->hash[b] = h;
    m->parent_id[b] = parent;
    m->group[b] = group;
    m->cache_id[b] = id;
    memcpy(m->tokens + (size_t)b * bs, tokens, bs * sizeof *tokens);
    int32_t *head = &m->buckets[h & m->bucket_mask];
    m->bucket_next[b] = *head;
    *head = b;
    m->num_cached++;
}

void kv_uncache(kv_manager *m, int32_t b) {
    if (!m->caching || !valid_block(m, b) || !m->cache_id[b]) return;
    int32_t *p = &m->buckets[m->hash[b] & m->bucket_mask];
    while (*p != b) p = &m->bucket_next[*p];
    *p = m->bucket_next[b];
    m->cache_id[b] = 0;
    m->num_cached--;
}

void kv_reset_cache(kv_manager *m) {
    if (!m->caching) return;
    for (int b = 0; b < m->num_blocks; b++) m->cache_id[b] = 0;
    for (uint64_t i = 0; i <= m->bucket_mask; i++) m->buckets[i] = -1;
    m->num_cached = 0;
}

int kv_find_prefix(const kv_manager *m, const int32_t *tokens, int num_tokens, int32_t *blocks_out, int max_blocks,
                   kv_chain *chain) {
    chain->num_blocks = 0;
    chain->hash = KV_ROOT_HASH;
    chain->id = KV_ROOT_ID;
    if (!m->caching || num_tokens < 1) return 0;
    int bs = m->block_size, limit = (num_tokens - 1) / bs;
    if (limit > max_blocks) limit = max_blocks;
    int n = 0;
    while (n < limit) {
        const int32_t *t = tokens + (size_t)n * bs;
        uint64_t h = kv_block_hash(chain->hash, t, bs);
        int32_t b = lookup(m, h, chain->id, t);
        if (b < 0) break;
        blocks_out[n++] = b;
        chain->hash = h;
        chain->id = m->cache_id[b];
    }
    chain->num_blocks = n;
    return n;
}

void kv_cache_full_blocks(kv_manager *m, const int32_t *tokens, int num_tokens, const int32_t *blocks, kv_chain *chain,
                          int32_t *rec, int *num_rec) {
    if (!m->caching) return;
    int bs = m->block_size, full = num_tokens / bs;
    for (int i = chain->num_blocks; i < full; i++) {
        uint64_t ph = i == 0 ? KV_ROOT_HASH : chain->hash, pid = i == 0 ? KV_ROOT_ID : chain->id;
        chain->num_blocks = i + 1;
        if (pid == 0) continue; /* broken chain: the rest of this sequence stays uncached */
        const int32_t *t = tokens + (size_t)i * bs;
        uint64_t h = kv_block_hash(ph, t, bs);
        int32_t b = blocks[i], hit = lookup(m, h, pid, t);
        chain->hash = h;
        if (hit >= 0) {
            chain->id = m->cache_id[hit]; /* b itself, or an equal block cached earlier */
        } else if (!real_block(m, b) || m->cache_id[b]) {
            chain->id = 0; /* b holds another prefix's hash: never expected, stop caching this sequence */
        } else {
            kv_cache_block(m, 0, b, h, pid, kv_new_id(m), t);
            chain->id = m->cache_id[b];
            if (rec) rec[(*num_rec)++] = b;
        }
    }
}
