/*
 * blocks.h: the decoder's building blocks (decoder.c runs them layer by
 * layer): loading a layer's norms and (fused) linear layers by the family's
 * checkpoint names, and the mixture-of-experts block (block_moe.c).
 */
#ifndef VLLM_MODEL_BLOCKS_H
#define VLLM_MODEL_BLOCKS_H

#include "model/model_internal.h"

/* ---- shared loaders (blocks.c) ---- */

/* A norm's weight and (LayerNorm) bias, imported; data NULL when the model has none. */
typedef struct dec_norm {
    tensor w, b;
} dec_norm;

/* The family's checkpoint names (c->names, else Llama's). */
const weight_names *blk_names(const model_config *c);
/* The backend norm kind of the config's norm style. */
be_norm_kind blk_norm_kind(const model_config *c);
/* n as a be_norm of the config (kind, eps; the bias when it has one). */
be_norm blk_norm(const model_config *c, const dec_norm *n);
/* A host tensor made usable by the backend's ops (be->ops->import). */
vllm_status blk_import(model *m, const tensor *host, tensor *out);
/* The tensor "<prefix>[layers.<l>.]<name>.<suffix>" of the given shape (l < 0: not a layer's). */
vllm_status blk_get(weight_source *ws, const model_config *c, int l, const char *name, const char *suffix, int ndim,
                    const int64_t *shape, tensor *out);
/* Loads and imports a norm of n elements: its weight, and its bias when the norm is a LayerNorm. */
vllm_status blk_load_norm(model *m, weight_source *ws, int l, const char *name, int64_t n, dec_norm *out);
void blk_release_norm(backend *be, dec_norm *n);
/* A linear layer from one fused checkpoint tensor (fused != NULL) or from the parts (names[i],
 * rows[i]), n <= 3, concatenated along the output; with biases when bias. */
vllm_status blk_load_linear(model *m, weight_source *ws, int l, const char *fused, const char *const *names,
                            const int64_t *rows, int n, int64_t in, bool bias, be_linear **out);
/* How a linear layer splits over tensor-parallel ranks (model tp_size > 1), as vLLM's parallel layers: whole on
 * every rank; column-parallel (each part's output rows split: rows[i] and its bias are the rank's share); or
 * row-parallel (the input columns split: in is the rank's share; the caller all-reduces the output). */
typedef enum blk_split {
    BLK_WHOLE = 0,
    BLK_SPLIT_OUT, /* column-parallel */
    BLK_SPLIT_QKV, /* column-parallel q | k | v: k and v by the rank's KV-head shard (model tp_kv_shard) */
    BLK_SPLIT_IN   /* row-parallel */
} blk_split;
vllm_status blk_load_linear_split(model *m, weight_source *ws, int l, const char *fused, const char *const *names,
                                  const int64_t *rows, int n, int64_t in, bool bias, blk_split split, be_linear **out);

/* ---- the mixture-of-experts block (block_moe.c) ---- */

/* One MoE layer's weights. */
typedef struct moe_block {
    be_linear *router;                  /* (E, D) */
    be_experts *experts;                /* E (+ num_shared) x (gate, up (I, D); down (D, I)) */
    int num_shared;                     /* DeepSeek's plain shared experts as experts E .. E + num_shared - 1
                                           (moe_params.num_shared); 0: none, or the decoder runs them apart */
    be_linear *sh_gate_up, *sh_down;    /* the shared expert: (2 Is, D), (D, Is); NULL when none */
    be_linear *sh_gate;                 /* its gate (1, D); NULL when it is the router's last row */
    bool gate_in_router;                /* the router is (E + 1, D): the shared expert's gate its last row (one
                                           GEMV for both; a router without a bias) */
    tensor score_bias;                  /* (E) the router's choice-score bias (moe.score_bias), or data NULL */
    void *host;                         /* expert weights rearranged on the host (gpt-oss), freed with the block
                                           (or once a copying backend has them) */
} moe_block;

/* The step's MoE activations, shared by the layers. */
typedef struct moe_bufs {
    ws_buf rl, ids, rw, sgu, sa, sg, so;
} moe_bufs;

/* Some layer of the config is an MoE layer. */
bool blk_has_moe(const model_config *c);
/* The routing of the config's MoE layers (num_shared 0: each layer's moe_block says). */
moe_params blk_moe_params(const model_config *c);
/* How many experts DeepSeek's plain shared experts (shared_experts_size) make when split into experts of the
 * routed ones' size, where the backend's MoE op takes them so (block_moe.c); 0 otherwise. */
int blk_moe_shared(const model *m);
/* Layer l's router, experts (per-expert tensors, transformers 5's fused ones, gpt-oss's fused ones with
 * biases in BF16 or MXFP4) and shared expert; DeepSeek's plain shared experts among the experts where
 * blk_moe_shared allows and their dtypes match the experts' (b->num_shared). */
vllm_status moe_block_load(model *m, weight_source *ws, int l, moe_block *b);
void moe_block_free(backend *be, moe_block *b);
/* Sizes the buffers for a step of T tokens (none when the model has no MoE layer). */
vllm_status moe_bufs_ensure(model *m, moe_bufs *mb, int64_t T);
void moe_bufs_release(backend *be, moe_bufs *mb);
/* o (T, D) = (accumulate: +=) the MoE of h (T, D): sum over the top k of w_e expert_e(h) [+ the plain shared
 * experts (num_shared)] [+ sigmoid(h . g) shared(h)]. With norm, h = norm(x) is written into *hbuf by the
 * router's linear_fused (the norm folded into the router's GEMV) and read by the experts; without, h = x
 * (hbuf unused). o must not overlap h (it may be x, the residual stream, when h is another buffer). */
void moe_block_run(model *m, const moe_block *b, moe_bufs *mb, const tensor *x, const be_norm *norm, tensor *hbuf,
                   bool accumulate, tensor *o);

/* ---- multi-head latent attention (block_mla.c; DeepSeek-V2 / V3, layers of kind LAYER_MLA) ---- */

/* One MLA layer's weights, prepared for vLLM's absorbed form (L = kv_lora_rank, R = qk_rope_head_dim,
 * N = qk_nope_head_dim, V = v_head_dim, H heads). */
typedef struct mla_block {
    be_linear *a;                       /* [q_a_proj | kv_a_proj_with_mqa] (q_lora + L + R, D), or
                                           [q_proj | kv_a_proj_with_mqa] (H (N + R) + L + R, D) */
    be_linear *q_b;                     /* q_b_proj (H (N + R), q_lora), or NULL (a plain q_proj) */
    dec_norm q_a_norm, kv_a_norm;       /* (q_lora), (L) */
    tensor w_uk_t;                      /* (H, L, N): W_UK_h^T, from kv_b_proj's key rows */
    tensor w_uv;                        /* (H, V, L): W_UV_h, from kv_b_proj's value rows */
    void *host[3];                      /* the regrouped q rows, W_UK^T and W_UV on the host */
} mla_block;

/* The step's MLA activations, shared by the layers. */
typedef struct mla_bufs {
    ws_buf a, qh, q, qlat, olat, out, so;
} mla_bufs;

/* Layer l's MLA weights (self_attn.*; o_proj is the decoder's). */
vllm_status mla_block_load(model *m, weight_source *ws, int l, mla_block *b);
void mla_block_free(backend *be, mla_block *b);
/* Sizes the buffers for a step of T tokens (none when the model has no MLA layer). */
vllm_status mla_bufs_ensure(model *m, mla_bufs *mb, int64_t T);
void mla_bufs_release(backend *be, mla_bufs *mb);
/* *out = the attention of one MLA layer before o_proj, (T, H V) (a view of mb's buffer): the normed x
 * (in_norm, its scratch h) projected, the latent written into cache at meta's slots, attended with
 * RoPE table cos_sin (rot_interleaved: pairs (2i, 2i + 1)). */
void mla_block_run(model *m, const mla_block *b, mla_bufs *mb, const tensor *x, const dec_norm *in_norm, tensor *h,
                   tensor *cache, const attn_meta *meta, const tensor *positions, const tensor *cos_sin,
                   tensor *out);

#endif
