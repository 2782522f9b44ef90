/*
 * model_internal.h: what model families share: the model struct, the
 * architecture registry entry and the per-step workspace.
 */
#ifndef VLLM_MODEL_INTERNAL_H
#define VLLM_MODEL_INTERNAL_H

#include "model/model.h"
#include "model/weights.h"

typedef struct model_arch {
    const char *name;   /* architectures[0] in config.json */
    /* Loads weights from ws and prepares them on m->be (m->cfg is filled). */
    vllm_status (*build)(model *m, weight_source *ws);
    /* allocates the activations of a max_tokens-token step with max_logits logits rows */
    vllm_status (*reserve)(model *m, int64_t max_tokens, int64_t max_logits);
    vllm_status (*forward)(model *m, model_cache *c, const fwd_batch *b, const tensor **logits);
    void (*destroy)(model *m);
} model_arch;

/* The registry, keyed by architectures[0]; NULL when unknown. */
const model_arch *model_arch_find(const char *name);
/* Comma-separated list of supported architectures (for messages). */
const char *model_arch_list(void);

/* A growable backend tensor: reallocated when a step needs more rows. */
typedef struct ws_buf {
    tensor t;
    int64_t cap_rows;
} ws_buf;

/* Ensures buf holds (rows, cols) of dt; returns a tensor of exactly that shape. */
vllm_status model_buf_ensure(backend *be, ws_buf *buf, dtype dt, int64_t rows, int64_t cols, tensor *out);
void model_buf_release(backend *be, ws_buf *buf);

/* Batch metadata uploaded to the backend for one step. */
typedef struct model_step {
    tensor ids, positions, logits_idx;
    attn_meta meta;
} model_step;

/* Uploads the batch arrays into the model's metadata buffers. */
vllm_status model_upload_batch(model *m, const fwd_batch *b, int block_size, model_step *st);

struct model {
    model_config cfg;
    const model_arch *arch;
    backend *be;
    weight_source *ws;
    void *impl;                 /* family-specific weights and state */
    int max_pos;                /* rows of the RoPE table */
    /* metadata buffers */
    ws_buf ids, positions, logits_idx, qsl, seq_lens, block_tables, slots;
};

#endif
