/*
 * input_builder.h: the model runner's input builder: one step's flattened batch from the scheduler's decisions.
 *
 * vLLM splits a step in three (vllm/v1/worker/gpu_model_runner.py
 * _prepare_inputs, over the persistent InputBatch of gpu_input_batch.py):
 * the scheduler decides (which requests run, how many tokens each computes,
 * which blocks they hold: sched_output), the model runner's input builder
 * turns that into the flattened batch, and the model uploads and runs it
 * (model_forward). This is the middle part. For scheduled request i with
 * n_i tokens from its num_computed c_i:
 *   token_ids / positions   the tokens c_i .. c_i + n_i - 1 and their positions
 *   query_start_loc         the running sum of n_i (S + 1 entries)
 *   seq_lens                c_i + n_i, the context after the step
 *   block_tables            each KV cache group's table of the request
 *                           (G, S, max_blocks_per_seq), unused entries 0
 *   slot_mapping            per group, block_table[pos / bs] * bs + pos % bs
 *                           for every token (G, T)
 *   logits_indices          the rows whose logits the step needs: for each
 *                           request in batch order, the rows of this chunk
 *                           that give a still missing prompt logprob
 *                           (request.params.prompt_logprobs >= 0), then
 *                           its last row when it is sampled (every prompt
 *                           and generated token computed after the step);
 *                           for the pooling runner (pool set), the rows its
 *                           pooling reads instead: every row of the chunk
 *                           (MEAN), the prompt's first (CLS) or last (LAST)
 *                           when the chunk holds it; never a sampled row.
 * The buffers are host memory owned by the builder, grown when a step needs
 * more and reused across steps (ib_reserve sizes them once up front).
 */
#ifndef VLLM_ENGINE_INPUT_BUILDER_H
#define VLLM_ENGINE_INPUT_BUILDER_H

#include <stdbool.h>

#include "engine/scheduler.h"
#include "model/model.h"

typedef struct input_builder {
    int num_groups;               /* G: block tables per request (request.blocks, group after group) */
    int block_size;
    int max_blocks_per_seq;       /* entries of one group's table */
    /* the batch (fwd_batch points here) */
    int32_t *ids, *positions;     /* (cap_tokens) */
    int64_t *slots;               /* (G * cap_tokens) */
    int32_t *logits_idx;          /* (cap_tokens) */
    int32_t *qsl;                 /* (cap_seqs + 1) */
    int32_t *seq_lens;            /* (cap_seqs) */
    int32_t *block_tables;        /* (G * cap_seqs * max_blocks_per_seq) */
    int32_t *state_slots;         /* (cap_seqs) request.state_slot */
    /* the logits-row plan of the last build, per scheduled request (batch order):
     * rows lp_count[i] prompt-logprob rows (positions lp_from[i] ..), then one
     * sampled row when sampled[i] */
    bool *sampled;                /* (cap_seqs) */
    int *lp_from;                 /* (cap_seqs) first prompt position with a row */
    int *lp_count;                /* (cap_seqs) prompt positions with a row */
    int num_reqs;                 /* requests of the last build */
    int num_sampled;              /* sampled rows of the last build */
    int num_prompt_lp_rows;       /* prompt-logprob rows of the last build */
    /* the pooling runner (ib_set_pooling): its pooling type, and per scheduled request the prompt
     * positions pool_from[i] .. + pool_count[i] whose hidden rows the step returns (in batch order) */
    vllm_pooling_type pool;       /* VLLM_POOLING_AUTO (0): generation */
    int *pool_from, *pool_count;  /* (cap_seqs) */
    int num_pool_rows;            /* rows of the last build */
    int cap_tokens, cap_seqs;
} input_builder;

/* A builder for requests holding num_groups block tables of
 * max_blocks_per_seq entries each (kv_coordinator's layout). */
void ib_init(input_builder *b, int num_groups, int block_size, int max_blocks_per_seq);
void ib_destroy(input_builder *b);
/* The pooling runner: every build returns the rows a `type` pooling reads
 * (fwd_batch.hidden_out) instead of logits rows. */
void ib_set_pooling(input_builder *b, vllm_pooling_type type);
/* Sizes the buffers for steps of up to max_tokens tokens from max_seqs
 * requests, so that such steps allocate nothing. */
vllm_status ib_reserve(input_builder *b, int max_tokens, int max_seqs);
/* Builds the step's batch into *out (arrays owned by b, valid until the
 * next build). Reads each request's tokens, num_computed (the chunk's
 * start: call before sched_commit), blocks and prompt-logprob progress. */
vllm_status ib_build(input_builder *b, const sched_output *so, fwd_batch *out);

#endif
