/* block_pool.c: free list and reference counts of KV cache blocks. */
#include "engine/block_pool.h"

#include <stdlib.h>

#include "core/error.h"

vllm_status block_pool_init(block_pool *p, int num_blocks) {
    p->num_blocks = num_blocks;
    p->free_ids = malloc((size_t)num_blocks * sizeof *p->free_ids);
    p->refcount = calloc((size_t)num_blocks, sizeof *p->refcount);
    if (!p->free_ids || !p->refcount) {
        block_pool_destroy(p);
        return vt_error(VLLM_ERR_NO_MEMORY, "block pool: out of memory");
    }
    /* lowest ids on top of the stack */
    for (int i = 0; i < num_blocks; i++) p->free_ids[i] = num_blocks - 1 - i;
    p->num_free = num_blocks;
    return VLLM_OK;
}

void block_pool_destroy(block_pool *p) {
    free(p->free_ids);
    free(p->refcount);
    p->free_ids = NULL;
    p->refcount = NULL;
    p->num_free = p->num_blocks = 0;
}

int block_pool_alloc(block_pool *p) {
    if (p->num_free == 0) return -1;
    int b = p->free_ids[--p->num_free];
    p->refcount[b] = 1;
    return b;
}

void block_pool_release(block_pool *p, int block) {
    if (block < 0 || block >= p->num_blocks || p->refcount[block] <= 0) return;
    if (--p->refcount[block] == 0) p->free_ids[p->num_free++] = block;
}
