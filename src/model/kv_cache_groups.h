/*
 * kv_cache_groups.h: KV cache groups, as vLLM v1's hybrid KV cache manager
 * makes them (vllm/v1/core/kv_cache_utils.py,
 * _get_kv_cache_groups_uniform_page_size).
 *
 * Every layer declares a cache spec (config.h). Layers with equal specs are
 * split into groups of the same number of layers (group_size); each group
 * has its own block table per sequence, and every group draws its blocks
 * from one shared pool. Physical cache tensor slot j is shared by the j-th
 * layer of every group: block id b means the same amount of memory in every
 * group, and a block belongs to one group at a time, so the layers sharing a
 * slot never touch each other's blocks.
 *
 * Example (Gemma 3, 5 sliding : 1 global): 4 global and 22 sliding layers
 * make group_size 4: one full-attention group of 4 layers and 6 sliding
 * groups (4, 4, 4, 4, 3, 3 layers: the last slots of two groups are padding),
 * 4 physical slots. A model whose layers all share one spec (Llama, Qwen3)
 * has one group holding every layer, one slot per layer.
 */
#ifndef VLLM_MODEL_KV_CACHE_GROUPS_H
#define VLLM_MODEL_KV_CACHE_GROUPS_H

#include "model/config.h"

#define KV_MAX_GROUPS 16

typedef struct kv_cache_groups {
    int num_groups;                     /* 0 when no layer caches anything */
    int group_size;                     /* layers per group = physical tensor slots */
    cache_spec spec[KV_MAX_GROUPS];     /* each group's spec; full-attention groups first */
    int group_layers[KV_MAX_GROUPS];    /* layers in each group (<= group_size; fewer: padding) */
    int layer_group[MODEL_MAX_LAYERS];  /* each layer's group, -1 when it caches nothing */
    int layer_slot[MODEL_MAX_LAYERS];   /* each layer's physical slot in [0, group_size) */
} kv_cache_groups;

/* Groups c's layers. More specs than fit KV_MAX_GROUPS fall back to one
 * group whose layers are all treated as full attention for allocation (the
 * kernels still apply each layer's window), as vLLM's
 * unify_hybrid_kv_cache_specs does without the hybrid manager. */
vllm_status kv_cache_groups_plan(const model_config *c, kv_cache_groups *g);

/* True when some group frees blocks (and the pool reserves a null block). */
bool kv_cache_groups_free_blocks(const kv_cache_groups *g);

/* The most blocks one sequence holds in a group of spec s at once when its
 * context is at most max_model_len tokens and a step schedules at most
 * max_step_tokens of it (vLLM's max_memory_usage_bytes / page size: a
 * sliding window keeps window - 1 computed tokens plus the new ones, + 1
 * block as the window need not start at a block boundary). */
int kv_group_max_blocks(const cache_spec *s, int block_size, int max_model_len, int max_step_tokens);

#endif
