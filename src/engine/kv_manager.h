/*
 * kv_manager.h: the KV cache block pool with automatic prefix caching
 * (vllm/v1/core/block_pool.py), shared by every KV cache group: a cached
 * block is keyed by its group too (vLLM's BlockHashWithGroupId). The
 * per-group policies (full attention, sliding window) are in
 * kv_coordinator.h.
 *
 * Blocks have reference counts. Blocks at refcount 0 sit in a free queue in
 * LRU order: allocation pops the head, release appends to the tail (a
 * sequence's blocks are released last block first, so the tail of a
 * sequence is evicted before its head).
 *
 * Prefix caching: a full block is identified by a 64-bit hash chained over
 * (parent block's hash, its block_size token ids). A cached block keeps its
 * K/V and its hash after release, and can be taken back by any request whose
 * prompt has the same prefix, until allocation evicts it (LRU). The hash
 * only picks a bucket: a lookup also compares the block's token ids and the
 * exact identity of its parent, so a hash collision can never serve wrong
 * K/V. That identity is a prefix id: the id of the token prefix ending with
 * a block, shared by the blocks of every group that hold that prefix, new
 * (never reused) when no cached block holds it.
 *
 * A pool used by a group that frees blocks (sliding window) reserves block 0
 * as the null block (vLLM's BlockPool.null_block): never allocated nor
 * freed, it stands in block tables for blocks that were dropped.
 */
#ifndef VLLM_ENGINE_KV_MANAGER_H
#define VLLM_ENGINE_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm.h"

/* Prefix cache counters (vLLM's PrefixCacheStats), in tokens. */
typedef struct kv_stats {
    uint64_t requests;   /* admissions that looked up the cache */
    uint64_t queries;    /* tokens of those requests */
    uint64_t hits;       /* tokens served from the cache */
} kv_stats;

/* A sequence's position in the hash chain: how many of its full blocks were
 * processed for caching, and the hash and cache id of the last one (id 0:
 * the chain is broken, later blocks of this sequence are not cached). */
typedef struct kv_chain {
    int num_blocks;
    uint64_t hash;
    uint64_t id;
} kv_chain;

typedef struct kv_manager {
    int num_blocks;
    int block_size;
    bool caching;            /* automatic prefix caching on */
    int num_free;
    int32_t *ref;            /* (num_blocks) refcount; 0 <=> in the free queue */
    int32_t *prev, *next;    /* (num_blocks) free queue links, -1 at the ends */
    int free_head, free_tail;
    /* prefix cache (NULL arrays when caching is off) */
    uint64_t *hash;          /* (num_blocks) valid when cache_id != 0 */
    uint64_t *cache_id;      /* (num_blocks) 0 = not cached */
    uint64_t *parent_id;     /* (num_blocks) cache id of the parent block, KV_ROOT_ID for the first */
    int32_t *group;          /* (num_blocks) the KV cache group whose block it is */
    int32_t *tokens;         /* (num_blocks, block_size) */
    int32_t *bucket_next;    /* (num_blocks) next cached block in the same bucket */
    int32_t *buckets;        /* (bucket_mask + 1) first cached block per bucket, -1 if none */
    uint64_t bucket_mask;
    uint64_t next_id;        /* next cache id (monotonic, never reused) */
    int num_cached;          /* blocks currently holding a hash */
    int32_t null_block;      /* the reserved null block, -1 when none */
    kv_stats stats;
} kv_manager;

#define KV_ROOT_ID 1u        /* parent id of a sequence's first block */

vllm_status kv_init(kv_manager *m, int num_blocks, int block_size, bool caching);
void kv_destroy(kv_manager *m);
int kv_num_free(const kv_manager *m);
/* Reserves block 0 as the null block (before any allocation); returns it. */
int32_t kv_reserve_null(kv_manager *m);
/* Blocks requests can hold: num_blocks less the null block. */
int kv_num_usable(const kv_manager *m);

/* Pops the least recently used free block (evicting its cached hash) and
 * returns it with refcount 1, or -1 when none is free. */
int kv_alloc(kv_manager *m);
/* Drops one reference on each of blocks[0..n), last block first; blocks
 * reaching 0 go to the tail of the free queue (keeping their hash). */
void kv_free_blocks(kv_manager *m, const int32_t *blocks, int n);
/* Takes a reference on each block (prefix hits), removing blocks at
 * refcount 0 from the free queue. */
void kv_touch(kv_manager *m, const int32_t *blocks, int n);
/* How many of blocks[0..n) are at refcount 0 (touching them uses up that
 * many free blocks). */
int kv_num_evictable(const kv_manager *m, const int32_t *blocks, int n);

/* The longest run of cached full blocks holding tokens[0..), at most
 * floor((num_tokens - 1) / block_size) blocks (the last token is always
 * recomputed so that it has logits) and at most max_blocks. Writes their
 * ids to blocks_out and the chain after them to *chain; takes no reference.
 * Returns the number of blocks (0 when caching is off). */
int kv_find_prefix(const kv_manager *m, const int32_t *tokens, int num_tokens, int32_t *blocks_out, int max_blocks,
                   kv_chain *chain);
/* Caches every full block among the first num_tokens tokens of a sequence
 * (tokens, block table blocks) that *chain has not processed yet. A block
 * equal to one already cached is left uncached (the chain continues through
 * the cached one). When rec is not NULL, the ids of newly cached blocks are
 * appended to rec (room for num_tokens / block_size entries) and *num_rec
 * counts them. */
void kv_cache_full_blocks(kv_manager *m, const int32_t *tokens, int num_tokens, const int32_t *blocks, kv_chain *chain,
                          int32_t *rec, int *num_rec);
/* Forgets block b's hash (its K/V are not valid: the step that was to
 * compute them did not run). */
void kv_uncache(kv_manager *m, int32_t b);
/* Forgets every cached hash (vLLM's reset_prefix_cache). */
void kv_reset_cache(kv_manager *m);

/* ---- the prefix cache by group (kv_coordinator.c) ---- */

/* The cached block of `group` (any group when group < 0) holding the block
 * `tokens` (block_size ids) of hash h after the prefix of id `parent`, or -1. */
int32_t kv_lookup(const kv_manager *m, int group, uint64_t h, uint64_t parent, const int32_t *tokens);
/* Caches block b as group's block of hash h, parent prefix `parent` and
 * prefix id `id` (b must not hold a hash). */
void kv_cache_block(kv_manager *m, int group, int32_t b, uint64_t h, uint64_t parent, uint64_t id,
                    const int32_t *tokens);
/* A new prefix id. */
uint64_t kv_new_id(kv_manager *m);

/* The chained hash of one full block (exposed for tests). */
uint64_t kv_block_hash(uint64_t parent_hash, const int32_t *tokens, int n);
#define KV_ROOT_HASH 0x6a09e667f3bcc908ull   /* parent hash of a sequence's first block */

#endif
