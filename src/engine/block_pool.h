/*
 * block_pool.h: the pool of physical KV cache blocks: a free list and a
 * reference count per block (prefix caching will share blocks).
 */
#ifndef VLLM_ENGINE_BLOCK_POOL_H
#define VLLM_ENGINE_BLOCK_POOL_H

#include "vllm.h"

typedef struct block_pool {
    int num_blocks;
    int num_free;
    int *free_ids;   /* stack of free block ids (num_free valid) */
    int *refcount;   /* (num_blocks) */
} block_pool;

vllm_status block_pool_init(block_pool *p, int num_blocks);
void block_pool_destroy(block_pool *p);
/* A free block with refcount 1, or -1 when none is left. */
int block_pool_alloc(block_pool *p);
/* Drops one reference; the block returns to the free list at zero. */
void block_pool_release(block_pool *p, int block);

#endif
