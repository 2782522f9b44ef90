/*
 * scheduler.h: requests and the per-step schedule (vLLM v1 semantics):
 * one token budget per step, running requests first then waiting ones
 * FCFS, chunked prefill, preemption by recompute when blocks run out.
 * A step's decisions (sched_output: the requests, the tokens each computes,
 * their allocated blocks) become the flattened batch in the model runner's
 * input builder (input_builder.h).
 * With prefix caching, an admitted request starts from the longest cached
 * run of full blocks of its tokens (num_computed = the hit), and every
 * block that this step fills is hashed and cached as it is allocated
 * (vLLM's allocate_slots): a request admitted later in the same step may
 * already share it, as the forward writes all K/V before attention.
 * Blocks come per KV cache group (kv_coordinator.h): a request holds one
 * block table per group, sliding-window groups drop the blocks that left
 * the window before each step, and every count of blocks a step needs is
 * summed over the groups.
 * Hybrid models (linear-attention layers) hold a recurrent-state slot per
 * running request. Their prefix caching checkpoints those states (vLLM's
 * mamba_cache_mode "align", state_cache.h): with num_ckpt_slots > 0, a
 * chunk that would cross a multiple of ckpt_interval ends at the last one it
 * reaches, a chunk ending on such a boundary whose blocks are cached saves
 * the request's states into a checkpoint (after the step's forward), and an
 * admitted request's KV hit is capped to the longest that ends on a
 * boundary with a committed checkpoint, which is restored into its new
 * state slot (before the forward). A save becomes visible at sched_commit:
 * a request admitted in the same step (the n samples of one prompt) cannot
 * restore it and recomputes the prompt.
 */
#ifndef VLLM_ENGINE_SCHEDULER_H
#define VLLM_ENGINE_SCHEDULER_H

#include <stddef.h>

#include "engine/kv_coordinator.h"
#include "engine/state_cache.h"
#include "sample/sampler.h"

typedef enum req_state { REQ_WAITING = 0, REQ_RUNNING, REQ_FINISHED } req_state;

typedef struct request {
    size_t index;                 /* caller's index (output order) */
    int32_t *tokens;              /* prompt then generated ids (cap_tokens) */
    int num_prompt;
    int num_tokens;
    int cap_tokens;
    float *logprobs;              /* (cap_tokens - num_prompt) raw logprob per generated id */
    int num_computed;             /* tokens whose K/V are in the cache */
    int32_t *blocks;              /* (sched_blocks_per_request) each group's block table, group after group */
    int num_blocks;               /* entries of each table */
    int num_cached_tokens;        /* prompt tokens served from the prefix cache at first admission */
    int prompt_lp_done;           /* prompt logprobs (params.prompt_logprobs >= 0): prompt positions whose
                                     logprob is known (1 .. num_prompt; position 0 has none), kept across
                                     preemption so a recomputed chunk asks for no row twice */
    bool admitted;                /* admitted at least once (num_cached_tokens is set) */
    int state_slot;               /* while running, its slot of the recurrent-state pool (hybrid models:
                                     1 .. num_state_slots; 0: none, the pool's null slot) */
    kv_chain chain;               /* prefix caching: full blocks hashed so far */
    vllm_sampling_params params;
    sampler_rng rng;
    vllm_finish_reason finish;
    req_state state;
} request;

typedef struct sched_config {
    int max_num_seqs;
    int max_num_batched_tokens;
    int block_size;
    int max_blocks_per_seq;       /* entries of one group's block table */
    bool enable_prefix_caching;   /* false: plain allocation, no hashing */
    const kv_cache_groups *groups; /* the model's KV cache groups; NULL: one full-attention group */
    int num_state_slots;          /* recurrent-state slots (models with linear-attention layers: one per
                                     running request, so max_num_seqs), numbered from 1; 0: none */
    int num_ckpt_slots;           /* recurrent-state checkpoints (hybrid models with prefix caching), numbered
                                     from 0; 0: none (then a hybrid model never gets a prefix hit) */
    int ckpt_interval;            /* tokens between checkpoint boundaries, a multiple of block_size (with
                                     num_ckpt_slots > 0) */
} sched_config;

/* One copy between a request's recurrent-state slot and a checkpoint slot: a
 * restore (checkpoint -> state, before the forward) or a save (state ->
 * checkpoint, after it). */
typedef struct sched_state_copy {
    int state_slot;               /* 1 .. num_state_slots */
    int ckpt_slot;                /* 0 .. num_ckpt_slots - 1 */
} sched_state_copy;

typedef struct scheduler {
    sched_config cfg;
    kv_coordinator kv;            /* the groups' block pool (kv.pool: free queue, prefix cache, counters) */
    request **waiting;            /* FCFS; preempted requests return to the front */
    int num_waiting, cap_waiting;
    request **running;            /* admission order */
    int num_running;
    /* the current step (what sched_output points at) */
    request **step_reqs;          /* (num_step) scheduled requests, batch order */
    int *step_tokens;             /* tokens each computes from its num_computed */
    int num_step;
    size_t num_preemptions;       /* total so far */
    /* blocks cached by the current step: forgotten again if the step is
     * not committed (the forward failed, so their K/V were never written) */
    int32_t *step_cached;         /* (num_blocks) */
    int num_step_cached;
    bool step_pending;            /* sched_step ran, sched_commit not yet */
    int *free_slots;              /* (num_state_slots) a stack of the free recurrent-state slots */
    int num_free_slots;
    state_cache sc;               /* the recurrent-state checkpoints (num_ckpt_slots) */
    sched_state_copy *step_restores, *step_saves; /* (max_num_seqs) the current step's copies */
    int num_step_restores, num_step_saves;
} scheduler;

/* One step's decisions (vLLM's SchedulerOutput): the scheduled requests in
 * batch order and how many tokens each computes, starting at its
 * num_computed; each one's block tables (request.blocks) already hold those
 * tokens; the recurrent-state copies around the forward. Arrays owned by
 * the scheduler, valid until the next sched_step. */
typedef struct sched_output {
    int num_reqs;
    request *const *reqs;         /* (num_reqs) */
    const int *num_tokens;        /* (num_reqs) tokens each computes this step, >= 1 */
    int total_tokens;             /* their sum, <= max_num_batched_tokens */
    int num_restores;             /* checkpoints to copy into admitted requests' state slots before the
                                     forward (their prefix hits) */
    const sched_state_copy *restores;
    int num_saves;                /* state slots to copy into checkpoints right after the forward (chunks
                                     ending on a checkpoint boundary) */
    const sched_state_copy *saves;
} sched_output;

/* The scheduler must stay where it is initialised (its coordinator's cap_hit points back at it). */
vllm_status sched_init(scheduler *s, const sched_config *cfg, int num_blocks);
void sched_destroy(scheduler *s);
vllm_status sched_add(scheduler *s, request *r);
/* Entries of request.blocks: max_blocks_per_seq per KV cache group. */
size_t sched_blocks_per_request(const scheduler *s);
/* Decides the next step into *out (admissions, preemptions, blocks
 * allocated and cached). out->num_reqs is 0 when there is nothing to run. */
vllm_status sched_step(scheduler *s, sched_output *out);
/* Marks the step's tokens computed (and the blocks it cached and the checkpoints it saved valid). */
void sched_commit(scheduler *s);
/* Drops every queued and running request (after an error) and forgets the
 * prefix cache and the state checkpoints. */
void sched_reset(scheduler *s);
/* Releases a finished request's blocks and removes it from running. */
void sched_finish(scheduler *s, request *r);
bool sched_has_work(const scheduler *s);
/* Free blocks (cached or not): equals the usable pool size (without the
 * null block) when no request holds any. */
int sched_num_free_blocks(const scheduler *s);
/* Prefix cache counters: admissions, their tokens, tokens served from the cache (hybrid models: each
 * hit is also a checkpoint restored). */
kv_stats sched_prefix_cache_stats(const scheduler *s);
/* State checkpoint counters (hybrid models): saves, restores, evictions. */
sc_stats sched_ckpt_stats(const scheduler *s);

#endif
