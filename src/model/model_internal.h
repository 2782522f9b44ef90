/*
 * model_internal.h: what model families share: the model struct, the
 * architecture registry entry and the per-step workspace.
 */
#ifndef VLLM_MODEL_INTERNAL_H
#define VLLM_MODEL_INTERNAL_H

#include "model/model.h"
#include "model/weights.h"

/* One rank's share of the public calls (model.c); model_tp.c runs them on every rank of a tensor-parallel model. */
vllm_status model_forward_rank(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits);
vllm_status model_cache_create_rank(model *m, int num_blocks, int block_size, int num_state_slots, int num_ckpt_slots,
                                    model_cache **out);
void model_cache_free_rank(model *m, model_cache *c);
vllm_status model_reserve_rank(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq);
vllm_status model_enable_graphs_rank(model *m, int max_batch, int max_seq_len);
/* model_tp.c: the driver's worker ranks (and, over several nodes, the other nodes': model.h's model_tp_node_run) */
vllm_status model_tp_start(model *m, const char *dir, const model_load_options *opt);
void model_tp_stop(model *m);
vllm_status model_tp_forward(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits);
vllm_status model_tp_cache_create(model *m, int num_blocks, int block_size, int num_state_slots, int num_ckpt_slots,
                                  model_cache **out);
void model_tp_cache_free(model *m, model_cache *c);
vllm_status model_tp_reserve(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq);
vllm_status model_tp_enable_graphs(model *m, int max_batch, int max_seq_len);
/* model_tp_wire.c: a forward batch as bytes for another node (tpw_batch_unpack points *b into buf, which must be
 * 8-byte aligned, after checking the sizes add up to len) */
size_t tpw_batch_bytes(const fwd_batch *b);
void tpw_batch_pack(const fwd_batch *b, void *out);
vllm_status tpw_batch_unpack(const void *buf, size_t len, fwd_batch *b);

/* Batch metadata uploaded to the backend for one step (views into one buffer). */
typedef struct model_step {
    tensor ids, positions;       /* (T) */
    tensor logits_idx;           /* (num_logits) rows of the batch whose logits are computed */
    int num_logits;
    bool hidden_out;             /* fwd_batch.hidden_out: the rows' final-normed hidden states, no logits */
    attn_meta meta;              /* group 0's; the fields other than block_tables and slot_mapping
                                    are every group's */
    attn_meta group_meta[KV_MAX_GROUPS]; /* each group's: its block tables and slot mapping */
    const int *layer_group;      /* (num_layers) each layer's group (kv_cache_groups.layer_group) */
    linear_attn_meta la_meta;    /* the linear-attention layers' sequences, state slots (-1: padding or the
                                    null slot) and start flags (first position of the step > 0) */
} model_step;

/* The attention metadata layer l reads: its KV cache group's block tables
 * and slot mapping, the rest shared by every group. */
static inline const attn_meta *model_step_meta(const model_step *s, int layer) {
    return s->layer_group && s->layer_group[layer] > 0 ? &s->group_meta[s->layer_group[layer]] : &s->meta;
}

typedef struct model_arch {
    const char *name;   /* architectures[0] in config.json */
    /* Loads weights from ws and prepares them on m->be (m->cfg is filled). */
    vllm_status (*build)(model *m, weight_source *ws);
    /* allocates the activations of a max_tokens-token step with max_logits logits rows */
    vllm_status (*reserve)(model *m, int64_t max_tokens, int64_t max_logits);
    /* issues the ops of one step whose metadata is uploaded (s); *logits
     * receives (s->num_logits, vocab) F32 (s->hidden_out: (s->num_logits, hidden_size) in the
     * activation dtype, the final-normed rows). Ops only: it may be recorded as a graph */
    vllm_status (*run)(model *m, model_cache *c, const model_step *s, const tensor **logits);
    /* *logits = the first n rows of the logits the last run (or replay) wrote */
    vllm_status (*logits)(model *m, int n, const tensor **logits);
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
vllm_status model_buf_ensure(model *m, ws_buf *buf, dtype dt, int64_t rows, int64_t cols, tensor *out);
void model_buf_release(backend *be, ws_buf *buf);


struct model {
    model_config cfg;
    const model_arch *arch;
    backend *be;
    weight_source *ws;
    void *impl;                 /* family-specific weights and state */
    int max_pos;                /* rows of the RoPE table */
    kv_cache_groups groups;     /* which layers share a block table, and their cache slots */
    ws_buf meta;                /* the step's metadata, packed (one upload per step) */
    int32_t *meta_host;         /* (meta_host_cap) host staging of it */
    size_t meta_host_cap;
    be_graph **graphs;          /* (graph_max + 1) recorded decode steps by padded batch size, or NULL */
    int graph_max;              /* largest padded batch size recorded; 0 = graphs off */
    int graph_seq_len;          /* max_seq_len bound the graphs are recorded with */
    uint64_t buf_gen;           /* bumped whenever a step buffer is reallocated */
    uint64_t graph_gen;         /* buf_gen the recorded graphs were made with */
    dtype conv_state_dtype;     /* the linear-attention layers' conv and recurrent state pools (and their */
    dtype ssm_state_dtype;      /* checkpoints): F32 until model_set_state_dtypes */
    bool no_lm_head;            /* model_load_options.no_lm_head: the pooling runner's model */
    int tp_rank, tp_size;       /* model_load_options' (tp_size 1: no tensor parallelism) */
    int tp_kv_shard, tp_kv_shards; /* the rank's KV heads: shard tp_kv_shard of tp_kv_shards (tp_size, or the
                                      checkpoint's KV heads when fewer: each then on tp_size / that ranks) */
    struct model_tp *tp;        /* the driver's worker ranks (model_tp.c), or NULL */
    void **tp_bufs;             /* host copies of the row-parallel weights' column slices (the CPU uses weights
                                   in place), freed with the model */
    int n_tp_bufs;
    float *kv_scales;           /* an F8_E4M3 KV cache: (num_layers, 2) each layer's k_scale, v_scale (1 where the
                                   checkpoint has none); NULL otherwise */
};

#endif
