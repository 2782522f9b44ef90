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

/* ---- the mixture-of-experts block (block_moe.c) ---- */

/* One MoE layer's weights. */
typedef struct moe_block {
    be_linear *router;                  /* (E, D) */
    be_experts *experts;                /* E x (gate, up (I, D); down (D, I)) */
    be_linear *sh_gate_up, *sh_down;    /* the shared expert: (2 Is, D), (D, Is); NULL when none */
    be_linear *sh_gate;                 /* its gate (1, D) */
    void *host;                         /* expert weights rearranged on the host (gpt-oss), freed with the block
                                           (or once a copying backend has them) */
} moe_block;

/* The step's MoE activations, shared by the layers. */
typedef struct moe_bufs {
    ws_buf rl, ids, rw, sgu, sa, sg, so;
} moe_bufs;

/* Some layer of the config is an MoE layer. */
bool blk_has_moe(const model_config *c);
/* The routing of the config's MoE layers. */
moe_params blk_moe_params(const model_config *c);
/* Layer l's router, experts (per-expert tensors, transformers 5's fused ones, gpt-oss's fused ones with
 * biases in BF16 or MXFP4) and shared expert. */
vllm_status moe_block_load(model *m, weight_source *ws, int l, moe_block *b);
void moe_block_free(backend *be, moe_block *b);
/* Sizes the buffers for a step of T tokens (none when the model has no MoE layer). */
vllm_status moe_bufs_ensure(model *m, moe_bufs *mb, int64_t T);
void moe_bufs_release(backend *be, moe_bufs *mb);
/* o (T, D) = the MoE of h (T, D): sum over the top k of w_e expert_e(h) [+ sigmoid(h . g) shared(h)]. */
void moe_block_run(model *m, const moe_block *b, moe_bufs *mb, const tensor *h, tensor *o);

#endif
