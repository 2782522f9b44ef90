/*
 * engine_internal.h: the vllm_engine struct and the per-request state the
 * engine keeps around the scheduler's view of a request.
 */
#ifndef VLLM_ENGINE_INTERNAL_H
#define VLLM_ENGINE_INTERNAL_H

#include "engine/logits_proc.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

/* A request as the engine sees it. */
typedef struct ereq {
    request r;                   /* the scheduler's view (first member) */
    char *id;                    /* caller's request id */
    tok_stream *stream;          /* incremental detokenizer (NULL without a tokenizer) */
    char *text;                  /* all text produced so far */
    size_t text_len, text_cap;
    size_t text_reported;        /* bytes of text already returned by a step */
    int tokens_reported;         /* generated tokens already returned by a step */
    bool aborted;                /* aborted: report once as VLLM_FINISH_ABORT */
    const char *stop_reason;     /* the matched stop string (points into own_stop) */
    /* owned copies of the caller's parameter arrays (r.params points at them) */
    int32_t *own_bias_ids, *own_allowed, *own_stop_ids;
    float *own_bias_vals;
    char **own_stop, **own_bad;
    size_t max_stop_len;         /* longest stop string, bytes */
    int32_t *bad_ids;            /* bad words as token sequences */
    size_t *bad_offsets;
    sampler_token_seqs bad;
    int32_t *top_ids;            /* (max generated, logprobs) top logprobs per generated token */
    float *top_lps;
    bool done;                   /* finished and reported: freed at the next step */
} ereq;

/* Counters over the engine's lifetime (vllm_generate reports differences). */
typedef struct engine_counters {
    size_t steps, sampled_tokens, prefill_tokens;
    double prefill_seconds, decode_seconds;
} engine_counters;

struct vllm_engine {
    vllm_engine_options opt;
    backend *be;
    model *model;
    model_cache *cache;
    tokenizer *tok;              /* NULL when the folder has none */
    const model_config *cfg;
    int max_model_len;
    int eos_ids[MODEL_MAX_EOS + 1];
    int num_eos;
    scheduler sched;
    sampler_scratch scratch;
    sampler_proc_scratch proc;   /* logits processing (penalties, bias, masks) */
    float *raw_row;              /* (vocab) the raw logits of the row being sampled */
    float *logits_host;          /* (max_num_seqs, vocab) */
    uint64_t next_seed;          /* seeds for requests without one */
    ereq **reqs;                 /* live requests (unfinished, or finished and not yet freed) */
    size_t num_reqs, cap_reqs;
    vllm_request_output *outs;   /* the last step's outputs */
    size_t cap_outs;
    char *out_text;              /* text pieces of the last step's outputs */
    size_t cap_out_text;
    engine_counters counters;
};

/* Frees every live request (engine teardown). */
void engine_requests_free(vllm_engine *e);
/* Drops every request without reporting it (after an error). */
void engine_drop_all(vllm_engine *e);
/* The live request with this id, or NULL. */
ereq *engine_find(vllm_engine *e, const char *id);

#endif
