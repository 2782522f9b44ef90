/*
 * kv_coordinator.h: a request's blocks in every KV cache group (vLLM v1's
 * kv_cache_coordinator.py over single_type_kv_cache_manager.py).
 *
 * Every group (model/kv_cache_groups.h) gives a request its own block table
 * with one entry per block_size tokens of its context; all groups draw from
 * one block pool (kv_manager.h). Per group spec:
 *  - full attention (FullAttentionManager): every block stays until the
 *    request ends; a prefix cache hit is a run of cached blocks from the
 *    start.
 *  - sliding window (SlidingWindowManager): a block whose tokens all fell
 *    out of the window of the next token to compute is freed and replaced
 *    by the pool's null block (remove_skipped_blocks), so a request holds
 *    about window / block_size + 1 blocks besides the chunk being computed;
 *    a prefix cache hit needs only the blocks inside the window before the
 *    hit point (find_longest_cache_hit, searching from the right).
 * The hit of a request is the longest every group can serve
 * (HybridKVCacheCoordinator: each group's search capped by the others', to
 * a fixed point).
 *
 * A request's tables live in one array blocks[num_groups * max_blocks]
 * (group g's at blocks + g * max_blocks); every group's table has the same
 * number of entries, num_blocks.
 */
#ifndef VLLM_ENGINE_KV_COORDINATOR_H
#define VLLM_ENGINE_KV_COORDINATOR_H

#include "engine/kv_manager.h"
#include "model/kv_cache_groups.h"

typedef struct kv_coordinator {
    kv_manager pool;                  /* the shared blocks, free queue and prefix cache */
    int num_groups;
    int block_size;
    int max_blocks;                   /* entries of each group's table */
    cache_spec spec[KV_MAX_GROUPS];
    uint64_t *hashes, *ids;           /* (max_blocks) scratch of kvc_find_hit */
    /* Optional, NULL by default: a further limit on prefix hits, applied in kvc_find_hit's fixed point
     * with the groups' own. Given ids[i], the prefix id of the hit's block i, and a hit of `hit` blocks,
     * returns the longest hit <= hit the caller can serve (hybrid models: one ending on a block
     * boundary whose recurrent-state checkpoint exists, scheduler.c). */
    int (*cap_hit)(void *ctx, const uint64_t *ids, int hit);
    void *cap_ctx;                    /* cap_hit's first argument */
} kv_coordinator;

/* groups NULL: one full-attention group. Reserves the null block when a
 * group frees blocks. */
vllm_status kvc_init(kv_coordinator *c, const kv_cache_groups *groups, int num_blocks, int block_size,
                     int max_blocks, bool caching);
void kvc_destroy(kv_coordinator *c);
int kvc_num_free(const kv_coordinator *c);

/* The longest prefix hit of tokens[0..num_tokens) every group (and cap_hit,
 * when set) can serve, in blocks (below the last token, which is always
 * recomputed): writes each
 * group's table (null where a sliding window needs no block) and the hash
 * chain after the hit to *chain; takes no reference. 0 when caching is off. */
int kvc_find_hit(kv_coordinator *c, const int32_t *tokens, int num_tokens, int32_t *blocks, kv_chain *chain);
/* How many of the first n entries of every table are free blocks (taking
 * them uses up that many free blocks). */
int kvc_num_evictable(const kv_coordinator *c, const int32_t *blocks, int n);
/* Takes a reference on the first n entries of every table (the hits). */
void kvc_touch(kv_coordinator *c, const int32_t *blocks, int n);
/* Sliding-window groups: frees the blocks that hold only tokens before the
 * window of position num_computed (the next to compute), null in their place. */
void kvc_remove_skipped(kv_coordinator *c, int32_t *blocks, int num_blocks, int num_computed);
/* Free blocks that growing every table from num_blocks entries to hold
 * num_tokens tokens takes. */
int kvc_num_new_blocks(const kv_coordinator *c, int num_blocks, int num_tokens);
/* Grows every table to hold num_tokens tokens; false (nothing allocated)
 * when the pool has too few free blocks. */
bool kvc_allocate(kv_coordinator *c, int32_t *blocks, int *num_blocks, int num_tokens);
/* Releases every block of every table (each table last block first). */
void kvc_free(kv_coordinator *c, int32_t *blocks, int *num_blocks);
/* Caches every full block among the first num_tokens tokens that *chain has
 * not processed yet, in every group where its table holds a block (as
 * kv_cache_full_blocks); newly cached ids are appended to rec (room for
 * num_groups * num_tokens / block_size) when rec is not NULL. */
void kvc_cache_blocks(kv_coordinator *c, const int32_t *tokens, int num_tokens, const int32_t *blocks,
                      kv_chain *chain, int32_t *rec, int *num_rec);
/* Blocks (not null) group g's table holds among its first num_blocks entries. */
int kvc_held_blocks(const kv_coordinator *c, const int32_t *blocks, int num_blocks, int g);

#endif
