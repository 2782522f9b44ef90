/*
 * engine_internal.h: the vllm_engine struct and the per-request state the
 * engine keeps around the scheduler's view of a request.
 *
 * A request with n > 1 becomes n child ereqs (vLLM v1's ParentRequest,
 * vllm/v1/engine/parallel_sampling.py): child i has n = 1, seed + i when
 * seeded, and shares the caller's id; outputs name it by (id, index).
 * Only child 0 computes prompt logprobs (the others may then reuse its
 * prompt blocks through the prefix cache).
 */
#ifndef VLLM_ENGINE_INTERNAL_H
#define VLLM_ENGINE_INTERNAL_H

#include "sample/logits_proc.h"
#include "structured/so_match.h"
#include "engine/input_builder.h"
#include "engine/scheduler.h"
#include "loader/pooling_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

typedef struct engine_so_grammar engine_so_grammar; /* engine_structured.c: a shared compiled grammar */
typedef struct ereq ereq;
typedef struct vllm_engine vllm_engine;
/* the step's mask job (engine_structured.c) */
typedef struct so_fill_job {
    vllm_engine *e;
    ereq *const *reqs;
    sampler_context *ctx;
    const int *rows;   /* sampled rows to mask */
    size_t words;
} so_fill_job;

/* A request as the engine sees it. */
typedef struct ereq {
    request r;                   /* the scheduler's view (first member) */
    char *id;                    /* caller's request id (shared by the n children of a request) */
    char *child_id;              /* "{index}_{id}" as vLLM names children (n > 1), else NULL; for logs */
    size_t index;                /* which of the request's n samples (0 .. n-1) */
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
    /* prompt logprobs (r.params.prompt_logprobs >= 0): entry p is log P(prompt[p] | prompt[<p]) */
    float *prompt_lps;           /* (num_prompt); [0] = NaN */
    int32_t *prompt_top_ids;     /* (num_prompt, prompt_logprobs) when prompt_logprobs > 0; row 0: -1 */
    float *prompt_top_lps;       /* (num_prompt, prompt_logprobs); row 0: NaN */
    bool prompt_lp_reported;     /* returned by a step already */
    bool done;                   /* finished and reported: freed at the next step */
    /* structured outputs (r.params.structured_outputs set): owned copies of its strings, its grammar, its matcher */
    char *own_so_json, *own_so_regex, *own_so_grammar, *own_so_think_start, *own_so_think_end;
    char **own_so_choice;
    engine_so_grammar *so_grammar;
    so_matcher *so;
    bool so_reasoning;           /* still in the reasoning: unconstrained until so_think_end is generated */
    int32_t so_next;             /* a sampled token the matcher has not read yet (-1: none): with masks filled
                                    during the forward, the mask threads read it before the next mask */
    int32_t so_think_end;
    /* a pooling request (engine_pooling.c): its parameters, the pooled rows so far (MEAN: their sum; LAST /
     * CLS: the row) in double, and the embedding once its prompt is computed */
    bool pooling;
    vllm_pooling_params pool_params;
    double *pool_acc;            /* (hidden_size) */
    float *embedding;            /* (embedding_dim), NULL until finished */
    size_t embedding_dim;
} ereq;

/* Host arrays of one step's sampling work (sample/sample.h), sized for
 * max_num_seqs sampled rows and max_num_batched_tokens prompt-logprob rows. */
typedef struct step_sampling {
    /* sampled rows */
    int32_t *rows;
    const vllm_sampling_params **params;
    sampler_context *ctx;
    double *uniform;
    int32_t *tokens;
    float *logprobs;
    int32_t **top_ids;
    float **top_lps;
    ereq **reqs;                 /* the request of each sampled row */
    /* prompt-logprob rows */
    int32_t *lp_rows, *lp_targets;
    int *lp_k;
    float *lp_vals;
    int32_t **lp_top_ids;
    float **lp_top_lps;
    ereq **lp_reqs;              /* the request of each row */
    int *lp_pos;                 /* the prompt position whose logprob the row gives */
} step_sampling;

/* Counters over the engine's lifetime (vllm_generate reports differences). */
#define ENGINE_MASK_HIST 160 /* token-mask times: bucket b holds [1.1^(b-1), 1.1^b) microseconds */
typedef struct engine_counters {
    size_t steps, sampled_tokens, prefill_tokens;
    double prefill_seconds, decode_seconds;
    size_t so_masks;
    double so_mask_seconds;
    uint32_t so_mask_hist[ENGINE_MASK_HIST];
    double so_advance_seconds;    /* the matchers fed the sampled tokens */
    size_t so_long_waits;         /* steps whose mask wait passed 0.2 ms, and their waits' sum */
    double so_long_wait_seconds;
    double forward_seconds;       /* host time in model_forward (the launch, or all of it where it waits) */
    double sample_seconds;        /* host time in the logprobs and sample ops (they wait for the device) */
} engine_counters;

struct vllm_engine {
    vllm_engine_options opt;
    int device_id;               /* the GPU ordinal of rank 0 (a data-parallel replica's first) */
    backend *be;
    struct tpg_group *tp_group;  /* tensor_parallel_size > 1: the ranks' group (rank 0's backend is be) */
    model *model;
    model_cache *cache;
    tokenizer *tok;              /* NULL when the folder has none */
    const model_config *cfg;
    int max_model_len;
    int32_t eos_ids[MODEL_MAX_EOS + 1];
    int num_eos;
    scheduler sched;
    input_builder ib;            /* the step's batch and logits rows from the scheduler's decisions */
    step_sampling ss;            /* the step's sample / logprobs batches for the backend */
    uint64_t next_seed;          /* seeds for requests without one */
    ereq **reqs;                 /* live requests (unfinished, or finished and not yet freed) */
    size_t num_reqs, cap_reqs;
    vllm_request_output *outs;   /* the last step's outputs */
    ereq **out_reqs;             /* (cap_outs) the request behind each output */
    size_t cap_outs;
    char *out_text;              /* text pieces of the last step's outputs */
    size_t cap_out_text;
    engine_counters counters;
    /* structured outputs (engine_structured.c): built on first use */
    so_vocab *so_vocab;
    engine_so_grammar **so_cache; /* compiled grammars, most recently used kept */
    int n_so_cache;
    uint64_t so_tick;
    uint32_t *so_masks;          /* (max_num_seqs, (V + 31) / 32) the step's token masks */
    struct tp_pool *so_pool;     /* the mask threads (engine_structured.c), made on the first mask */
    struct so_mask_scratch **so_scratch; /* (so_threads) one per thread */
    int so_threads;
    int *so_rows;                /* (max_num_seqs) the step's masked rows */
    double *so_row_seconds;      /* (max_num_seqs) each one's fill time */
    so_fill_job so_job;          /* the masks being filled */
    int so_pending;              /* rows engine_so_masks_start handed to the mask threads (0: none) */
    bool so_overlap;             /* masks filled during the forward: an async backend, or VLLM_MASKS_OVERLAP=1
                                    (=0: never; a diagnostic and test switch) */
    /* the pooling runner (engine_pooling.c) */
    bool pooling;                /* runner pooling: embeddings only, the model has no LM head */
    vllm_pooling_type pool_type; /* LAST, MEAN or CLS (resolved) */
    bool pool_normalize;         /* the default of vllm_pooling_params.normalize */
    pooling_config pool_cfg;     /* the folder's sentence-transformers / Matryoshka settings */
    char *model_name;            /* the model path (messages: vLLM's served_model_name) */
    char *hub_tokenizer;         /* opt.tokenizer's local path (a copy; the hub cache's for a model id) */
    unsigned char *pool_rows;    /* (pool_rows_cap) bytes: a step's hidden rows copied to the host */
    size_t pool_rows_cap;
};

void step_sampling_free(step_sampling *ss);
/* Frees one request and everything it owns. */
void ereq_free(ereq *q);
/* Room in e->reqs for n more requests. */
vllm_status engine_reqs_reserve(vllm_engine *e, size_t n);
/* The pooling runner (engine_pooling.c). resolve: at create, before the model loads, the runner
 * (e->pooling), pooling type and normalisation from the options and the folder (logged);
 * rows: after the forward, before sched_commit, the step's hidden rows (out, (num_pool_rows, D)) into
 * each scheduled request's pool_acc; finish: after sched_commit, the requests whose prompt is now
 * computed get their embedding and finish (stop). */
vllm_status engine_pooling_resolve(vllm_engine *e, const char *model_dir);
vllm_status engine_pooling_rows(vllm_engine *e, const sched_output *so, const tensor *out);
vllm_status engine_pooling_finish(vllm_engine *e, const sched_output *so);
/* Frees every live request and the step's arrays (engine teardown). */
void engine_requests_free(vllm_engine *e);
/* Drops every request without reporting it (after an error). */
void engine_drop_all(vllm_engine *e);
/* structured outputs (engine_structured.c). attach: q's grammar (compiled, or from the cache) and matcher, when
 * its params have a constraint; detach: drops them; mask: the token mask of q's next token in the step's mask
 * slot `slot`, NULL when unconstrained (none, or its grammar ended); accept: advances q's matcher by t, false
 * when the grammar refuses t; free: the engine's vocabulary, cache and masks. */
vllm_status engine_so_attach(vllm_engine *e, ereq *q);
void engine_so_detach(ereq *q);
/* The step's token masks, filled on the mask threads: ctx[i].mask for each sampled row i of reqs[0 .. n) whose
 * request is constrained now, NULL for the others. */
void engine_so_fill_masks(vllm_engine *e, ereq *const *reqs, sampler_context *ctx, int n);
/* The same in two halves (an async backend: the masks are filled while the device runs the forward):
 * engine_so_masks_start hands the rows to the mask threads, engine_so_masks_wait returns once they are filled.
 * The requests and ctx must not change in between. */
void engine_so_masks_start(vllm_engine *e, ereq *const *reqs, sampler_context *ctx, int n);
void engine_so_masks_wait(vllm_engine *e);
bool engine_so_accept(vllm_engine *e, ereq *q, int32_t t);
void engine_so_free(vllm_engine *e);
/* the q-quantile of a mask-time histogram (engine_counters.so_mask_hist), microseconds (its bucket's upper end;
 * 0 when empty) */
double engine_hist_quantile(const uint32_t *hist, double q);

/* A live, not yet reported request with this id (any of its children), or NULL. */
ereq *engine_find(vllm_engine *e, const char *id);

/* vllm_engine_create on GPU ordinal device_id (a data-parallel replica: async_front.c); options'
 * data_parallel_size is the front's business and not looked at here. */
#define ENGINE_MAX_DP 64
vllm_status engine_create_on(const char *model_dir, const vllm_engine_options *options, int device_id,
                             vllm_engine **out);
/* Makes the calling thread use the engine's device (a GPU's current device is per thread): the engine
 * thread of a data-parallel replica on GPU r, and the thread that frees it. */
void engine_bind_thread(vllm_engine *e);

#endif
