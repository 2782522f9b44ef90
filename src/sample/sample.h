/*
 * sample.h: the batched sampling contract between the engine and a
 * backend's sample / logprobs ops, and its reference implementation.
 *
 * The engine names, for one step, which rows of the logits tensor (B, V) to
 * sample and with what per-row parameters (the request's SamplingParams, its
 * prompt and output token ids, one uniform draw from its own generator);
 * the backend returns only the sampled ids and the requested logprobs.
 * A CPU backend runs sample_row_ref over the rows in parallel; a GPU backend
 * packs the parameters into device arrays and must give the same tokens
 * (up to floating-point near-ties) and logprobs within its dtype's bounds.
 *
 * Per row, in vLLM v1 order (vllm/v1/sample/sampler.py):
 *   raw logprobs of the unmodified row (logprobs_mode "raw_logprobs"), then
 *   the logits processors and penalties (logits_proc.h), then greedy or
 *   temperature -> min_p -> top_k -> top_p -> draw (sampler.h).
 */
#ifndef VLLM_SAMPLE_SAMPLE_H
#define VLLM_SAMPLE_SAMPLE_H

#include <stdint.h>

#include "sample/logits_proc.h"
#include "sample/sampler.h"
#include "vllm.h"

/* Sampled-token codes for rows that could not be sampled. */
#define SAMPLE_NAN_LOGITS (-1)  /* the row holds a NaN */
#define SAMPLE_ALL_BANNED (-2)  /* every token is at -inf after processing */
#define SAMPLE_FAILED (-3)      /* the workspace does not fit the vocabulary (a bug) */

/* One step's sampling work: num_rows rows of a logits tensor. */
typedef struct sample_batch {
    int num_rows;
    const int32_t *rows;                       /* (num_rows) row of the logits tensor to sample */
    const vllm_sampling_params *const *params; /* (num_rows) the request's parameters */
    const sampler_context *ctx;                /* (num_rows) prompt/output ids, EOS ids, bad words */
    const double *uniform;                     /* (num_rows) draw in [0, 1), used when temperature > 0 */
    /* outputs */
    int32_t *tokens;                           /* (num_rows) sampled id, or SAMPLE_* < 0 */
    float *logprobs;                           /* (num_rows) raw logprob of the sampled id */
    int32_t *const *top_ids;                   /* (num_rows) NULL, or params->logprobs ids to fill */
    float *const *top_lps;                     /* (num_rows) NULL, or params->logprobs values to fill */
} sample_batch;

/* Logprobs of given tokens (prompt logprobs): row i's raw log_softmax at
 * targets[i] and its top k[i]. */
typedef struct logprob_batch {
    int num_rows;
    const int32_t *rows;                       /* (num_rows) row of the logits tensor */
    const int32_t *targets;                    /* (num_rows) token whose logprob is wanted */
    const int *k;                              /* (num_rows) top logprobs wanted (0 = none) */
    float *logprobs;                           /* (num_rows) out: raw logprob of targets[i] (NaN on NaN rows) */
    int32_t *const *top_ids;                   /* (num_rows) NULL when k[i] == 0, else k[i] ids (-1 past V) */
    float *const *top_lps;                     /* (num_rows) same shape (NaN past V) */
} logprob_batch;

/* Per-thread scratch of the reference (sized for one vocabulary). */
typedef struct sample_ws {
    sampler_scratch scratch;
    sampler_proc_scratch proc;
    float *raw;                                /* (vocab) a copy of the row being processed */
    int vocab;
} sample_ws;

vllm_status sample_ws_init(sample_ws *ws, int vocab);
void sample_ws_free(sample_ws *ws);

/* Row i of b on logits (vocab) F32, processed in place: fills b's outputs
 * at index i. */
void sample_row_ref(float *logits, int vocab, const sample_batch *b, int i, sample_ws *ws);
/* Row i of b on logits (vocab) F32 (not modified). */
void logprob_row_ref(const float *logits, int vocab, const logprob_batch *b, int i);

#endif
