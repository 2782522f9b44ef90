/*
 * state_cache.h: the table of recurrent-state checkpoints that gives hybrid
 * (linear-attention) models prefix caching, as vLLM's mamba_cache_mode
 * "align": the scheduler cuts prompt chunks at checkpoint boundaries (every
 * ckpt_interval tokens, a multiple of the block size), a step that ends a
 * request's chunk on a boundary copies the request's conv and recurrent
 * states into a checkpoint slot, and a later request whose KV prefix-cache
 * hit ends on that boundary copies them back into its own state slot and
 * resumes there.
 *
 * A checkpoint is keyed by the prefix id (kv_manager.h) of the KV block
 * that ends at its boundary: that id names the exact token prefix before the
 * boundary, and ids are never reused, so a key can never name other tokens.
 * The table maps keys to checkpoint slots 0 .. num_slots - 1 (rows of the
 * model cache's checkpoint pools, model.h) with LRU eviction.
 *
 * Step protocol (the scheduler's sched_step / sched_commit):
 *  - sc_reserve takes a slot for a save of the current step: the entry is
 *    pending, invisible to sc_lookup (its state is computed later in the
 *    step, after any restore of the same step) and pinned;
 *  - sc_pin marks a committed entry restored by the current step: it cannot
 *    be evicted (taken by a save) until the step ends;
 *  - sc_commit makes the step's pending entries visible and drops every pin;
 *    sc_rollback (the step's forward never ran) frees its pending entries
 *    and drops every pin.
 */
#ifndef VLLM_ENGINE_STATE_CACHE_H
#define VLLM_ENGINE_STATE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm.h"

/* Counters over the table's lifetime: saves and restores of committed steps, evictions as they happen. */
typedef struct sc_stats {
    uint64_t saves;      /* checkpoints written (pending entries committed) */
    uint64_t restores;   /* checkpoints restored into a request's state (the prefix hits of hybrid models) */
    uint64_t evictions;  /* committed checkpoints dropped to make room for a new one */
} sc_stats;

typedef struct state_cache {
    int num_slots;
    uint64_t *key;          /* (num_slots) prefix id held, 0 = free */
    uint64_t *last_use;     /* (num_slots) LRU stamp: the step that saved or last restored it */
    uint8_t *pending;       /* (num_slots) reserved by the current step, not visible yet */
    uint8_t *pinned;        /* (num_slots) reserved or restored by the current step: not evictable */
    int32_t *bucket_next;   /* (num_slots) next slot in the same bucket */
    int32_t *buckets;       /* (bucket_mask + 1) first slot per bucket, -1 if none */
    uint64_t bucket_mask;
    int32_t *step_slots;    /* (num_slots) slots pinned by the current step */
    int num_step;
    int num_used;           /* slots holding a key (pending or committed) */
    uint64_t clock;         /* LRU time: bumped by every commit */
    uint64_t step_restores; /* restores of the current step (counted at commit) */
    sc_stats stats;
} state_cache;

/* A table of num_slots checkpoints (0: an empty table whose lookups miss). */
vllm_status sc_init(state_cache *c, int num_slots);
void sc_destroy(state_cache *c);
/* The committed checkpoint of prefix id `id`, or -1. */
int sc_lookup(const state_cache *c, uint64_t id);
/* True when `id` has an entry, committed or pending. */
bool sc_contains(const state_cache *c, uint64_t id);
/* A slot for a new checkpoint of `id` (which must have no entry), pending and pinned until the step
 * ends: a free slot, else the least recently used committed unpinned one (evicted); -1 when every slot
 * is pinned (or the table is empty). */
int sc_reserve(state_cache *c, uint64_t id);
/* Pins the committed checkpoint in `slot` for a restore of the current step (and marks it used). */
void sc_pin(state_cache *c, int slot);
/* The step ran: its pending entries become visible, pins are dropped, restores counted. */
void sc_commit(state_cache *c);
/* The step did not run: its pending entries are freed (their states were never written), pins dropped. */
void sc_rollback(state_cache *c);
/* Forgets every checkpoint (with the prefix cache, after an error); the counters stay. */
void sc_reset(state_cache *c);

#endif
