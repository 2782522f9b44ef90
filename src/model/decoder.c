/*
 * decoder.c: the dense decoder every dense family runs, driven by the model
 * config's spec (model/config.h), filled by the family's parser (arch_*.c):
 *
 *   x = embed(ids) [* sqrt(D)] [* embed_multiplier] [+ P[pos + offset]]     (T, D)
 *   per layer l (window, RoPE table and MLP kind from layers[l]):
 *     q, k, v = n_in(x) Wqkv [+ b]                      (T, nh*hd | nkv*hd | nkv*hd)
 *     q, k = qk_norm(q, k)   per head or over the whole projection
 *     rope(q, k)             halves (i, i + r/2) or pairs (2i, 2i+1), first r dims
 *     a = attention(q, K_l, V_l)  causal, sliding window, scale, softcap, sinks    (T, nh*hd)
 *     a *= sigmoid(gate)     Qwen3-Next's output gate: q_proj yields [q | gate] per head
 *     x += n_out(a Wo [+ b]) [* residual_multiplier]
 *     h = n_mlp(x)
 *     x += n_out'(down(act(h Wg) * (h Wu)))   gated;  down(act(h Wu))  plain
 *   logits = final_norm(x[sampled rows]) Wlm  [softcapped] [/ logits_divisor]  (N, V)
 *   (the pooling runner, hidden_out: final_norm(x[pooled rows]) itself, (N, D))
 *
 * A linear-attention layer (the gated delta-net of Qwen3-Next and Qwen3.5, transformers'
 * Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet) replaces the attention block, with its state in the
 * cache's pools at each sequence's slot:
 *     q|k|v|z|b|a = n_in(x) [in_proj_qkvz; in_proj_ba]   (Qwen3-Next: rows regrouped at load, see load_gdn)
 *                   n_in(x) [in_proj_qkv; in_proj_z; in_proj_b; in_proj_a]   (Qwen3.5)
 *     q|k|v = silu(causal_conv1d(q|k|v))                 (T, 2 H_k d_k + H_v d_v), conv state
 *     g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)    (T, H_v)
 *     o = gated_delta_rule(l2norm(q), l2norm(k), v, g, beta)      (T, H_v d_v), recurrent state
 *     x += out_proj(rms_norm(o) * w * silu(z))            per v-head
 *
 * The norms by layout: pre (Llama) n_in, n_mlp, no n_out; sandwich (Gemma,
 * GLM-4) all four; post (OLMo-2) n_out only. A norm is RMSNorm, (1 + w)
 * RMSNorm or LayerNorm with bias (norm style). The Llama layout runs fused:
 * each norm, gated product and residual add rides in its linear_fused.
 *
 * Semantics follow transformers' modeling files of each family (named in its
 * arch_*.c) and vLLM's model_executor/models/llama.py (fused qkv and gate_up
 * projections); the registry (registry.c) maps architectures[0] to them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "model/blocks.h"
#include "model/rope.h"

typedef struct llama_layer {
    dec_norm in_norm, post_norm;        /* (D): the attention's input norm, the MLP's input norm */
    dec_norm attn_out_norm, mlp_out_norm; /* (D): sandwich and post layouts */
    dec_norm q_norm, k_norm;            /* (head_dim) per head, or (nh*hd) / (nkv*hd) over the projection */
    be_linear *qkv;                     /* (nh*hd + 2*nkv*hd, D) */
    be_linear *o;                       /* (D, nh*hd) */
    be_linear *gate_up;                 /* (2I, D) gated; (I, D) plain (OPT's fc1) */
    be_linear *down;                    /* (D, I) */
    moe_block moe;                      /* MLP_MOE layers (block_moe.c); gate_up / down then hold DeepSeek's plain
                                           shared experts where moe.experts does not (moe.num_shared 0) */
    mla_block mla;                      /* LAYER_MLA layers (block_mla.c) */
    tensor sinks;                       /* (nh) attention sinks (gpt-oss), or data NULL */
    /* linear-attention layers (o is out_proj (D, H_v d_v)) */
    be_linear *in_proj;                 /* (2 kd + 2 vd + 2 H_v, D): q | k | v | z | b | a,
                                           kd = H_k d_k, vd = H_v d_v */
    tensor conv_w;                      /* (2 kd + vd, K) conv1d.weight (C, 1, K) viewed */
    tensor A_log, dt_bias;              /* (H_v) */
    tensor gnorm;                       /* (d_v) the gated RMSNorm's weight (w itself, not 1 + w) */
    void *host[2];                      /* weights with regrouped rows (q_proj; in_proj_qkvz and in_proj_ba) */
} llama_layer;

typedef struct llama {
    tensor embed;                /* (V, D) imported */
    tensor pos_embed;            /* (max_pos + offset, D) learned positions, or data NULL */
    dec_norm final_norm;         /* (D) */
    be_linear *lm_head;          /* (V, D), the embedding when tied */
    bool vocab_split;            /* tensor parallelism: embed and lm_head hold this rank's rows v0 .. v0 + vr - 1
                                    of the vocabulary (vLLM's VocabParallelEmbedding / ParallelLMHead) */
    int64_t v0, vr;
    llama_layer *layers;
    tensor cos_sin[MODEL_MAX_ROPES]; /* (max_pos, rot_dim) F32, one per rope config */
    float embed_scale;           /* sqrt(hidden_size) rounded to the activation dtype (embed_scale_sqrt) */
    int rot_dim;                 /* 0: no rotary embedding */
    /* workspace */
    ws_buf x, h, qkv, attn, o, gu, act, sel, logits;
    ws_buf x2;                   /* the sandwich layout's second residual buffer, one row (one-token steps fold the
                                    attention block's output into the gate_up: x alternates between x and x2) */
    ws_buf logits_part;          /* vocab_split: the rank's (N, vr) logits before the all-gather */
    ws_buf proj, conv, g, beta, core; /* linear-attention layers: in_proj's output, the conv's, decay, strength,
                                         the delta rule's */
    moe_bufs moe;                /* the MoE layers' activations */
    mla_bufs mla;                /* the MLA layers' activations */
    tensor logits_view;
    /* the whole stack in one op for one-token steps (backend.h dense_stack_decode), where the backend takes it */
    be_dense_layer *stack_layers;
    be_dense_stack stack;
    bool stack_ok;
    bool moe_add_apart;          /* VLLM_MOE_ADD_APART=1: routed-only MoE layers write o, then x += o (a measurement
                                    switch; by default their combine accumulates into x) */
} llama;

/* *out = src's rows in the given order (out row r = src row order[r]), copied into a host buffer *host
 * that the layer owns; src contiguous, 2-D (rows, cols) or 1-D (a bias: rows of one element). */
static vllm_status regroup_rows(const weight_source *ws, const tensor *src, const int64_t *order, int64_t n,
                                void **host, tensor *out) {
    if (ws_is_dummy(ws)) { /* random values: nothing to regroup (and a device's arena has no host bytes) */
        *host = NULL;
        *out = *src;
        return VLLM_OK;
    }
    /* a row's bytes (block types: its blocks, a GGUF file's rows) */
    const size_t row = (size_t)((src->ndim == 2 ? src->shape[1] : 1) / dtype_block(src->dtype)) * dtype_size(src->dtype);
    unsigned char *d = malloc((size_t)n * row);
    if (!d) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (regrouping weights)");
    const unsigned char *s = src->data;
    for (int64_t r = 0; r < n; r++) memcpy(d + (size_t)r * row, s + (size_t)order[r] * row, row);
    *host = d;
    *out = src->ndim == 2 ? tensor_2d(src->dtype, d, n, src->shape[1]) : tensor_1d(src->dtype, d, n);
    return VLLM_OK;
}

/* The gated attention's q_proj (2 nh hd, D): transformers views its output as (nh, 2 hd) and chunks each
 * head into [query | gate] (Qwen3NextAttention: view(..., -1, head_dim * 2), torch.chunk(2, dim=-1)); the
 * rows are regrouped as [every head's query | every head's gate], so q and the gate are column ranges. */
static vllm_status load_gated_qkv(model *m, weight_source *ws, int l, llama_layer *L) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    const int64_t D = c->hidden_size, hd = c->head_dim, qd = (int64_t)c->num_heads * hd,
                  kvd = (int64_t)c->num_kv_heads * hd, s_q[2] = {2 * qd, D}, s_kv[2] = {kvd, D};
    tensor w[3], b[3], wq, bq = {0};
    vllm_status st;
    if ((st = blk_get(ws, c, l, nm->q, "weight", 2, s_q, &w[0])) ||
        (st = blk_get(ws, c, l, nm->k, "weight", 2, s_kv, &w[1])) ||
        (st = blk_get(ws, c, l, nm->v, "weight", 2, s_kv, &w[2])))
        return st;
    if (c->attention_bias &&
        ((st = blk_get(ws, c, l, nm->q, "bias", 1, &s_q[0], &b[0])) ||
         (st = blk_get(ws, c, l, nm->k, "bias", 1, &kvd, &b[1])) ||
         (st = blk_get(ws, c, l, nm->v, "bias", 1, &kvd, &b[2]))))
        return st;
    int64_t *order = malloc((size_t)(2 * qd) * sizeof *order);
    if (!order) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; r < 2 * qd; r++) /* new row r: head h's query (r < qd) or gate row i */
        order[r] = (r % qd) / hd * 2 * hd + (r >= qd ? hd : 0) + r % hd;
    st = regroup_rows(ws, &w[0], order, 2 * qd, &L->host[0], &wq);
    if (st == VLLM_OK && c->attention_bias) st = regroup_rows(ws, &b[0], order, 2 * qd, &L->host[1], &bq);
    free(order);
    if (st != VLLM_OK) return st;
    const tensor *wp[3] = {&wq, &w[1], &w[2]}, *bp[3] = {&bq, &b[1], &b[2]};
    return m->be->ops->linear_create(m->be, wp, c->attention_bias ? bp : NULL, 3, &L->qkv);
}

/* A gated delta-net layer's weights (model.layers.N.linear_attn.*). in_proj_qkvz's rows come in H_k
 * groups of [q (d_k) | k (d_k) | v (r d_v) | z (r d_v)], r = H_v / H_k, and in_proj_ba's in H_k groups of
 * [b (r) | a (r)] (transformers' fix_query_key_value_ordering: view (..., H_k, -1) then split; v-head
 * g r + j is group g's j-th); they are regrouped into q (kd) | k (kd) | v (vd) | z (vd) and b (H_v) |
 * a (H_v), head-major, and fused into one linear. */
static vllm_status load_gdn(model *m, weight_source *ws, int l, llama_layer *L) {
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden_size, Hk = c->linear_attn.num_k_heads, Hv = c->linear_attn.num_v_heads,
                  dk = c->linear_attn.k_head_dim, dv = c->linear_attn.v_head_dim, r = Hv / Hk, kd = Hk * dk,
                  vd = Hv * dv, C = 2 * kd + vd, K = c->linear_attn.conv_kernel, G = 2 * dk + 2 * r * dv;
    const int64_t s_qkvz[2] = {2 * kd + 2 * vd, D}, s_ba[2] = {2 * Hv, D}, s_conv[3] = {C, 1, K}, s_out[2] = {D, vd};
    const char *pre = c->weight_prefix;
    tensor qkvz, ba, conv, a_log, dt, gn, rq, rb, split[4];
    vllm_status st;
    if ((st = ws_getf(ws, &conv, 3, s_conv, "%slayers.%d.linear_attn.conv1d.weight", pre, l)) ||
        (st = ws_getf(ws, &a_log, 1, &Hv, "%slayers.%d.linear_attn.A_log", pre, l)) ||
        (st = ws_getf(ws, &dt, 1, &Hv, "%slayers.%d.linear_attn.dt_bias", pre, l)) ||
        (st = ws_getf(ws, &gn, 1, &dv, "%slayers.%d.linear_attn.norm.weight", pre, l)))
        return st;
    const tensor conv2 = tensor_2d(conv.dtype, conv.data, C, K); /* (C, 1, K) as (C, K) */
    if ((st = blk_import(m, &conv2, &L->conv_w)) || (st = blk_import(m, &a_log, &L->A_log)) ||
        (st = blk_import(m, &dt, &L->dt_bias)) || (st = blk_import(m, &gn, &L->gnorm)))
        return st;
    const char *out_name = "linear_attn.out_proj";
    if (c->linear_attn.split_proj) { /* Qwen3.5: q | k | v head-major already; z; b; a */
        const int64_t s_qkv[2] = {C, D}, s_z[2] = {vd, D}, s_h[2] = {Hv, D};
        if ((st = ws_getf(ws, &split[0], 2, s_qkv, "%slayers.%d.linear_attn.in_proj_qkv.weight", pre, l)) ||
            (st = ws_getf(ws, &split[1], 2, s_z, "%slayers.%d.linear_attn.in_proj_z.weight", pre, l)) ||
            (st = ws_getf(ws, &split[2], 2, s_h, "%slayers.%d.linear_attn.in_proj_b.weight", pre, l)) ||
            (st = ws_getf(ws, &split[3], 2, s_h, "%slayers.%d.linear_attn.in_proj_a.weight", pre, l)))
            return st;
        const tensor *wp[4] = {&split[0], &split[1], &split[2], &split[3]};
        if ((st = m->be->ops->linear_create(m->be, wp, NULL, 4, &L->in_proj))) return st;
        return blk_load_linear(m, ws, l, NULL, &out_name, &s_out[0], 1, vd, false, &L->o);
    }
    if ((st = ws_getf(ws, &qkvz, 2, s_qkvz, "%slayers.%d.linear_attn.in_proj_qkvz.weight", pre, l)) ||
        (st = ws_getf(ws, &ba, 2, s_ba, "%slayers.%d.linear_attn.in_proj_ba.weight", pre, l)))
        return st;
    int64_t *order = malloc((size_t)(2 * kd + 2 * vd) * sizeof *order);
    if (!order) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    int64_t n = 0;
    for (int64_t g = 0; g < Hk; g++) /* q */
        for (int64_t i = 0; i < dk; i++) order[n++] = g * G + i;
    for (int64_t g = 0; g < Hk; g++) /* k */
        for (int64_t i = 0; i < dk; i++) order[n++] = g * G + dk + i;
    for (int64_t g = 0; g < Hk; g++) /* v: v-heads g r .. g r + r - 1 */
        for (int64_t j = 0; j < r * dv; j++) order[n++] = g * G + 2 * dk + j;
    for (int64_t g = 0; g < Hk; g++) /* z */
        for (int64_t j = 0; j < r * dv; j++) order[n++] = g * G + 2 * dk + r * dv + j;
    st = regroup_rows(ws, &qkvz, order, n, &L->host[0], &rq);
    n = 0;
    for (int64_t g = 0; g < Hk; g++) /* b */
        for (int64_t j = 0; j < r; j++) order[n++] = g * 2 * r + j;
    for (int64_t g = 0; g < Hk; g++) /* a */
        for (int64_t j = 0; j < r; j++) order[n++] = g * 2 * r + r + j;
    if (st == VLLM_OK) st = regroup_rows(ws, &ba, order, n, &L->host[1], &rb);
    free(order);
    if (st != VLLM_OK) return st;
    const tensor *wp[2] = {&rq, &rb};
    if ((st = m->be->ops->linear_create(m->be, wp, NULL, 2, &L->in_proj))) return st;
    return blk_load_linear(m, ws, l, NULL, &out_name, &s_out[0], 1, vd, false, &L->o);
}

/* An attention layer's q/k norms, q/k/v (with the output gate's rows), o and sinks. */
static vllm_status load_attention(model *m, weight_source *ws, int l, llama_layer *L) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    int64_t D = c->hidden_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->num_heads * hd, kvd = (int64_t)c->num_kv_heads * hd;
    vllm_status st;
    if (c->qk_norm) {
        bool proj = c->qk_norm_kind == QK_NORM_PROJ;
        if ((st = blk_load_norm(m, ws, l, nm->q_norm, proj ? qd : hd, &L->q_norm)) ||
            (st = blk_load_norm(m, ws, l, nm->k_norm, proj ? kvd : hd, &L->k_norm)))
            return st;
    }
    const char *qkv_names[3] = {nm->q, nm->k, nm->v};
    const int64_t qkv_rows[3] = {qd, kvd, kvd};
    const int64_t o_rows[1] = {D};
    /* tensor parallelism: q / k / v column-parallel (each rank its heads), o row-parallel */
    if ((st = c->attn_output_gate ? load_gated_qkv(m, ws, l, L)
                                  : blk_load_linear_split(m, ws, l, nm->qkv, qkv_names, qkv_rows, 3, D,
                                                          c->attention_bias, BLK_SPLIT_QKV, &L->qkv)) ||
        (st = blk_load_linear_split(m, ws, l, NULL, &nm->o, o_rows, 1, qd, c->o_bias, BLK_SPLIT_IN, &L->o)))
        return st;
    if (c->attn_sinks) { /* "<prefix>layers.<l>.self_attn.sinks" (num_heads), no .weight */
        const int64_t nh = c->num_heads;
        tensor t;
        if ((st = ws_getf(ws, &t, 1, &nh, "%slayers.%d.%s", c->weight_prefix, l, nm->sinks)) ||
            (st = blk_import(m, &t, &L->sinks)))
            return st;
    }
    return VLLM_OK;
}

static vllm_status build_layer(model *m, weight_source *ws, int l, llama_layer *L) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    int64_t D = c->hidden_size, I = c->intermediate_size;
    vllm_status st;
    /* the blocks' norms, by layout (Gemma 2's sandwich: post_attention_layernorm normalises the
     * attention's output and pre_feedforward_layernorm is the MLP's input norm) */
    if (c->norm_layout != NORM_LAYOUT_POST &&
        ((st = blk_load_norm(m, ws, l, nm->attn_norm, D, &L->in_norm)) ||
         (st = blk_load_norm(m, ws, l, nm->mlp_norm, D, &L->post_norm))))
        return st;
    if (c->norm_layout != NORM_LAYOUT_PRE &&
        ((st = blk_load_norm(m, ws, l, nm->attn_out_norm, D, &L->attn_out_norm)) ||
         (st = blk_load_norm(m, ws, l, nm->mlp_out_norm, D, &L->mlp_out_norm))))
        return st;
    if (c->layers[l].kind == LAYER_LINEAR_ATTENTION) {
        if ((st = load_gdn(m, ws, l, L))) return st;
    } else if (c->layers[l].kind == LAYER_MLA) {
        const int64_t o_rows[1] = {D};
        if ((st = mla_block_load(m, ws, l, &L->mla)) ||
            (st = blk_load_linear(m, ws, l, NULL, &nm->o, o_rows, 1, (int64_t)c->num_heads * c->mla.v_head_dim, false,
                                  &L->o)))
            return st;
    } else if ((st = load_attention(m, ws, l, L))) {
        return st;
    }
    if (c->layers[l].mlp == MLP_MOE) {
        if ((st = moe_block_load(m, ws, l, &L->moe))) return st;
        if (c->shared_experts_size > 0 && !L->moe.num_shared) { /* DeepSeek's plain shared experts apart: gate | up, down */
            const int64_t Is = c->shared_experts_size, sh_rows[2] = {Is, Is}, sd_rows[1] = {D};
            const char *sh[2] = {nm->shared_gate, nm->shared_up};
            if ((st = blk_load_linear(m, ws, l, NULL, sh, sh_rows, 2, D, false, &L->gate_up)) ||
                (st = blk_load_linear(m, ws, l, NULL, &nm->shared_down, sd_rows, 1, Is, false, &L->down)))
                return st;
        }
        return VLLM_OK;
    }
    const bool gated = c->layers[l].mlp == MLP_DENSE;
    const char *gu_names[2] = {gated ? nm->gate : nm->up, nm->up};
    const int64_t gu_rows[2] = {I, I}, down_rows[1] = {D};
    /* tensor parallelism: gate / up column-parallel, down row-parallel */
    if ((st = blk_load_linear_split(m, ws, l, gated ? nm->gate_up : NULL, gu_names, gu_rows, gated ? 2 : 1, D,
                                    c->mlp_bias, BLK_SPLIT_OUT, &L->gate_up)) ||
        (st = blk_load_linear_split(m, ws, l, NULL, &nm->down, down_rows, 1, I, c->mlp_bias, BLK_SPLIT_IN, &L->down)))
        return st;
    return VLLM_OK;
}


static void llama_destroy(model *m) {
    llama *lm = m->impl;
    backend *be = m->be;
    if (!lm) return;
    if (lm->layers) {
        for (int l = 0; l < m->cfg.num_layers; l++) {
            llama_layer *L = &lm->layers[l];
            dec_norm *norms[] = {&L->in_norm, &L->post_norm, &L->attn_out_norm, &L->mlp_out_norm, &L->q_norm,
                                 &L->k_norm};
            for (size_t i = 0; i < sizeof norms / sizeof *norms; i++) blk_release_norm(be, norms[i]);
            be_linear *lins[] = {L->qkv, L->o, L->gate_up, L->down, L->in_proj};
            for (size_t i = 0; i < sizeof lins / sizeof *lins; i++)
                if (lins[i]) be->ops->linear_free(be, lins[i]);
            moe_block_free(be, &L->moe);
            mla_block_free(be, &L->mla);
            tensor *imports[] = {&L->sinks, &L->conv_w, &L->A_log, &L->dt_bias, &L->gnorm};
            for (size_t i = 0; i < sizeof imports / sizeof *imports; i++)
                if (imports[i]->data) be->ops->release_import(be, imports[i]);
            free(L->host[0]);
            free(L->host[1]);
        }
        free(lm->layers);
    }
    free(lm->stack_layers);
    if (lm->embed.data) be->ops->release_import(be, &lm->embed);
    if (lm->pos_embed.data) be->ops->release_import(be, &lm->pos_embed);
    blk_release_norm(be, &lm->final_norm);
    if (lm->lm_head) be->ops->linear_free(be, lm->lm_head);
    for (int r = 0; r < MODEL_MAX_ROPES; r++)
        if (lm->cos_sin[r].data) be->ops->release(be, &lm->cos_sin[r]);
    ws_buf *bufs[] = {&lm->x2, &lm->x,   &lm->h,      &lm->qkv,  &lm->attn, &lm->o,    &lm->gu, &lm->act,
                      &lm->sel, &lm->logits, &lm->logits_part, &lm->proj, &lm->g,    &lm->beta, &lm->core, &lm->conv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) model_buf_release(be, bufs[i]);
    moe_bufs_release(be, &lm->moe);
    mla_bufs_release(be, &lm->mla);
    free(lm);
    m->impl = NULL;
}

/* The RoPE table of a rope config, (max_pos, rot_dim) F32, computed on the host once. */
static vllm_status rope_table(model *m, const rope_config *rc, int rot_dim, tensor *out) {
    backend *be = m->be;
    size_t n = (size_t)m->max_pos * (size_t)rot_dim;
    float *table = malloc(n * sizeof *table);
    if (!table) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (RoPE table)");
    rope_cos_sin_table(rc, rot_dim, m->max_pos, table);
    *out = tensor_2d(DTYPE_F32, NULL, m->max_pos, rot_dim);
    vllm_status st = be->ops->alloc(be, out);
    if (st == VLLM_OK) st = be->ops->upload(be, out, table, n * sizeof *table);
    free(table);
    return st;
}

/* A linear-attention layer's shapes for the gated delta-net ops: q and k L2-normalised in the op
 * (Qwen3NextGatedDeltaNet passes use_qk_l2norm_in_kernel=True), scale 1 / sqrt(d_k), F32 states. */
static gdn_params gdn_params_of(const model_config *c) {
    return (gdn_params){.num_k_heads = c->linear_attn.num_k_heads, .num_v_heads = c->linear_attn.num_v_heads,
                        .head_k_dim = c->linear_attn.k_head_dim, .head_v_dim = c->linear_attn.v_head_dim,
                        .qk_l2norm = true, .conv_kernel = c->linear_attn.conv_kernel, .state_dtype = DTYPE_F32};
}

/* Whether one-token steps can run the whole stack as one op (dense_stack_decode): every layer the Llama layout's
 * (pre norms, RMSNorm without bias, softmax attention over one RoPE table and window, no softcap, sinks or output
 * gate, per-head q/k norms or none, a SiLU-gated dense MLP, no residual multiplier, one rank), and the backend
 * takes the stack (supports). The caches are filled in at each step. */
static vllm_status stack_prepare(model *m) {
    llama *lm = m->impl;
    const model_config *c = &m->cfg;
    backend *be = m->be;
    lm->stack_ok = false;
    if (!be->ops->dense_stack_decode || c->num_layers < 1 || c->norm_layout != NORM_LAYOUT_PRE ||
        blk_norm_kind(c) != BE_NORM_RMS || c->attn_softcap != 0 || c->attn_output_gate || !lm->rot_dim ||
        (c->qk_norm && c->qk_norm_kind == QK_NORM_PROJ) || c->act != BE_ACT_SILU ||
        (c->residual_multiplier != 0 && c->residual_multiplier != 1) || m->tp_size > 1)
        return VLLM_OK;
    const layer_spec *l0 = &c->layers[0];
    for (int l = 0; l < c->num_layers; l++) {
        const layer_spec *ls = &c->layers[l];
        const llama_layer *L = &lm->layers[l];
        if (ls->kind != LAYER_ATTENTION || ls->mlp != MLP_DENSE || ls->rope != l0->rope ||
            ls->sliding_window != l0->sliding_window || L->sinks.data || L->in_norm.b.data || L->post_norm.b.data ||
            !L->qkv || !L->o || !L->gate_up || !L->down)
            return VLLM_OK;
    }
    lm->stack_layers = calloc((size_t)c->num_layers, sizeof *lm->stack_layers);
    if (!lm->stack_layers) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    const bool head_norm = c->qk_norm && c->qk_norm_kind != QK_NORM_PROJ;
    for (int l = 0; l < c->num_layers; l++) {
        const llama_layer *L = &lm->layers[l];
        lm->stack_layers[l] = (be_dense_layer){
            .qkv = L->qkv, .o = L->o, .gate_up = L->gate_up, .down = L->down, .in_norm = &L->in_norm.w,
            .post_norm = &L->post_norm.w, .q_norm = head_norm ? &L->q_norm.w : NULL,
            .k_norm = head_norm ? &L->k_norm.w : NULL};
    }
    lm->stack = (be_dense_stack){
        .layers = lm->stack_layers, .num_layers = c->num_layers, .hidden = c->hidden_size,
        .intermediate = c->intermediate_size, .num_heads = c->num_heads, .num_kv_heads = c->num_kv_heads,
        .head_dim = c->head_dim, .rot_dim = lm->rot_dim, .neox = !c->rope_interleaved,
        .cos_sin = &lm->cos_sin[l0->rope], .eps = (float)c->rms_norm_eps,
        .scale = c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)c->head_dim),
        .sliding_window = l0->sliding_window};
    lm->stack_ok = backend_supports(be, BE_OP_DENSE_STACK, &lm->stack) == BE_NATIVE;
    if (lm->stack_ok) LOG_I("%s: one-token steps run the %d layers as one kernel (dense_stack_decode)",
                            c->architecture, c->num_layers);
    return VLLM_OK;
}

static vllm_status decoder_build(model *m, weight_source *ws) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    backend *be = m->be;
    vllm_status st;
    llama *lm = calloc(1, sizeof *lm);
    if (!lm) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    m->impl = lm;
    lm->layers = calloc((size_t)c->num_layers, sizeof *lm->layers);
    if (!lm->layers) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    if (c->head_dim % 2 || c->head_dim > 1024)
        return vt_error(VLLM_ERR_UNSUPPORTED, "config.json: head_dim %d not supported (even, <= 1024)", c->head_dim);
    const bool rope = c->rope.type != ROPE_NONE;
    for (int r = 0; rope && r < c->num_ropes; r++)
        if (!(c->ropes[r].theta > 0 && isfinite(c->ropes[r].theta)) ||
            (c->ropes[r].type != ROPE_DEFAULT && !(c->ropes[r].factor > 0 && isfinite(c->ropes[r].factor))))
            return vt_error(VLLM_ERR_FORMAT, "config.json: rope_theta and the rope scaling factor must be positive");
    /* linear-attention layers and the gated attention output run on the gated delta-net ops
     * (BE_OP_GATED_DELTA_NET; the CUDA backend has no kernels for them yet and refuses here) */
    if (model_has_recurrent_state(m) || c->attn_output_gate) {
        gdn_params gp = gdn_params_of(c);
        if (!model_has_recurrent_state(m)) gp = (gdn_params){.num_k_heads = 1, .num_v_heads = 1, .head_k_dim = 1,
                                                             .head_v_dim = 1, .qk_l2norm = true};
        if (model_has_recurrent_state(m) && c->norm_layout != NORM_LAYOUT_PRE)
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: linear-attention layers need the pre-norm layout",
                            c->architecture);
        if ((st = backend_require(be, BE_OP_GATED_DELTA_NET, &gp,
                                  model_has_recurrent_state(m)
                                      ? "the gated delta-net (linear attention) mixer"
                                      : "the gated attention output")))
            return st;
    }
    /* multi-head latent attention runs on attention_mla / head_linear (the CPU's, CUDA's); refused without them */
    for (int l = 0; l < c->num_layers; l++)
        if (c->layers[l].kind == LAYER_MLA && (!be->ops->attention_mla || !be->ops->head_linear || !be->ops->rope))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: MLA attention is not implemented on %s yet", c->architecture,
                            !strcmp(be->name, "cuda") ? "CUDA" : be->name);
    /* what the spec asks of the backend, refused up front with a clear error */
    const be_norm norm_probe = {.kind = blk_norm_kind(c)};
    const be_act act = (be_act)c->act;
    const tensor sinks_probe = tensor_1d(DTYPE_F32, NULL, c->num_heads);
    const attn_params ap_probe = {.scale = 1, .num_heads = c->num_heads, .num_kv_heads = c->num_kv_heads,
                                  .head_dim = c->head_dim, .softcap = (float)c->attn_softcap,
                                  .sinks = c->attn_sinks ? &sinks_probe : NULL};
    bool plain_mlp = false, gated_linear = c->moe.shared_intermediate_size > 0; /* a shared expert's gate|up */
    for (int l = 0; l < c->num_layers; l++) {
        plain_mlp |= c->layers[l].mlp == MLP_DENSE_PLAIN;
        gated_linear |= c->layers[l].mlp == MLP_DENSE;
    }
    /* the fused linear with the gated product only where a layer uses it (gpt-oss's activation lives in
     * its experts alone) */
    const linear_fuse lf_probe = {.norm_kind = norm_probe.kind, .silu_mul = gated_linear, .act = gated_linear ? act : 0};
    if ((st = backend_require(be, BE_OP_NORM, &norm_probe, c->architecture)) ||
        (st = backend_require(be, BE_OP_ADD_NORM, &norm_probe, c->architecture)) ||
        (st = backend_require(be, BE_OP_LINEAR_FUSED, &lf_probe, c->architecture)) ||
        (st = backend_require(be, BE_OP_ACT_MUL, &act, c->architecture)) ||
        (plain_mlp && (st = backend_require(be, BE_OP_ACTIVATION, &act, c->architecture))) ||
        (st = backend_require(be, BE_OP_ATTENTION, &ap_probe, c->architecture)) ||
        (c->qk_norm && c->qk_norm_kind != QK_NORM_PROJ &&
         (st = backend_require(be, BE_OP_QK_NORM_ROPE_KV, &norm_probe, c->architecture))) ||
        (c->final_softcap > 0 && (st = backend_require(be, BE_OP_SOFTCAP, NULL, c->architecture))))
        return st;
    if (blk_has_moe(c)) {
        const moe_params mp = blk_moe_params(c);
        if ((st = backend_require(be, BE_OP_MOE, &mp, c->architecture))) return st;
        if (!(c->moe.num_experts > 0 && c->moe.top_k >= 1 && c->moe.top_k <= c->moe.num_experts &&
              c->moe.intermediate_size > 0))
            return vt_error(VLLM_ERR_FORMAT, "%s: mixture of experts needs 1 <= num_experts_per_tok <= the number of "
                            "experts and an expert intermediate size", c->architecture);
    }
    if (c->num_heads % c->num_kv_heads)
        return vt_error(VLLM_ERR_FORMAT, "config.json: num_attention_heads %d not a multiple of num_key_value_heads %d",
                        c->num_heads, c->num_kv_heads);
    if (c->qk_norm && !rope)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: q/k norms without a rotary embedding are not supported",
                        c->architecture);

    int64_t V = c->vocab_size, D = c->hidden_size;
    int64_t se[2] = {V, D};
    tensor t_embed, t_head, t_pos;
    /* a multimodal checkpoint keeps the text model under its own prefix (transformers 5:
     * model.language_model., 4.x: language_model.model.); the rest of it is not loaded */
    static const char *const prefixes[] = {"model.language_model.", "language_model.model.", ""};
    char name[96];
    snprintf(name, sizeof name, "%s%s.weight", m->cfg.weight_prefix, nm->embed);
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes && !ws_has(ws, name); i++) {
        snprintf(name, sizeof name, "%s%s.weight", prefixes[i], nm->embed);
        if (ws_has(ws, name)) {
            snprintf(m->cfg.weight_prefix, sizeof m->cfg.weight_prefix, "%s", prefixes[i]);
            if (prefixes[i][0])
                LOG_I("%s: running the text model (%s*); the other weights of the checkpoint are not loaded",
                      c->architecture, prefixes[i]);
            else /* a *Model checkpoint (e5-mistral's MistralModel): the decoder's tensors at the top level */
                LOG_I("%s: the decoder's tensors have no \"model.\" prefix", c->architecture);
        }
    }
    if ((st = blk_get(ws, c, -1, nm->embed, "weight", 2, se, &t_embed)) ||
        (st = blk_load_norm(m, ws, -1, nm->final_norm, D, &lm->final_norm)))
        return st;
    if (nm->pos_embed) {
        /* learned absolute positions: rows offset .. offset + max_pos - 1 are read */
        if (m->max_pos > c->max_position_embeddings)
            return vt_error(VLLM_ERR_INVALID_ARG, "%s: max_model_len %d exceeds max_position_embeddings %d (learned "
                            "position embeddings have no rows past it)", c->architecture, m->max_pos,
                            c->max_position_embeddings);
        int64_t sp[2] = {(int64_t)c->max_position_embeddings + c->pos_embed_offset, D};
        if ((st = blk_get(ws, c, -1, nm->pos_embed, "weight", 2, sp, &t_pos)) || (st = blk_import(m, &t_pos, &lm->pos_embed)))
            return st;
    }
    /* the pooling runner loads no LM head (vLLM's as_embedding_model drops lm_head.*) */
    if (!m->no_lm_head && !c->tie_word_embeddings && (st = ws_get(ws, "lm_head.weight", 2, se, &t_head))) return st;
    /* tensor parallelism: the vocabulary split when it divides (float tables), else whole on every rank */
    const bool fl = t_embed.dtype == DTYPE_F32 || t_embed.dtype == DTYPE_F16 || t_embed.dtype == DTYPE_BF16;
    if (m->tp_size > 1 && V % m->tp_size == 0 && fl && be->ops->all_gather_cols && be->ops->embedding_range &&
        (c->tie_word_embeddings || m->no_lm_head || t_head.dtype == t_embed.dtype)) {
        lm->vocab_split = true;
        lm->vr = V / m->tp_size;
        lm->v0 = (int64_t)m->tp_rank * lm->vr;
        LOG_D("tensor-parallel rank %d: vocabulary rows %lld .. %lld of %lld", m->tp_rank, (long long)lm->v0,
              (long long)(lm->v0 + lm->vr - 1), (long long)V);
        const size_t row = (size_t)D * dtype_size(t_embed.dtype);
        t_embed = tensor_2d(t_embed.dtype, (char *)t_embed.data + (size_t)lm->v0 * row, lm->vr, D);
        if (!m->no_lm_head && !c->tie_word_embeddings)
            t_head = tensor_2d(t_head.dtype, (char *)t_head.data + (size_t)lm->v0 * row, lm->vr, D);
    }
    if ((st = blk_import(m, &t_embed, &lm->embed))) return st;
    const tensor *head_w[1] = {c->tie_word_embeddings ? &t_embed : &t_head};
    if (!m->no_lm_head && (st = be->ops->linear_create(be, head_w, NULL, 1, &lm->lm_head))) return st;
    if (be->import_copies) ws_release_copied(ws); /* the device has them */

    progress pr;
    progress_start(&pr, "loading weights", c->num_layers);
    for (int l = 0; l < c->num_layers; l++) {
        if ((st = build_layer(m, ws, l, &lm->layers[l]))) return st;
        if (be->import_copies) ws_release_copied(ws);
        progress_update(&pr, l + 1);
    }
    if (c->shared_experts_size > 0 || c->moe.shared_intermediate_size > 0) { /* where the shared experts run
                                                                                (block_moe.c) */
        int in_op = 0, apart = 0;
        for (int l = 0; l < c->num_layers; l++)
            if (c->layers[l].mlp == MLP_MOE) {
                in_op += lm->layers[l].moe.num_shared > 0;
                apart += lm->layers[l].moe.num_shared == 0;
            }
        LOG_I("%s: the shared experts (%lld wide) run %s", c->architecture,
              (long long)(c->shared_experts_size > 0 ? c->shared_experts_size : c->moe.shared_intermediate_size),
              !apart ? "as extra experts of the MoE op" : !in_op ? "apart, as a dense MLP" : "apart in some layers");
    }

    /* the RoPE tables (max_pos, rot_dim); every rope config rotates the same dimensions */
    if (rope) {
        lm->rot_dim = (int)(c->head_dim * c->rope.partial_rotary_factor);
        if (lm->rot_dim < 2 || lm->rot_dim % 2 || lm->rot_dim > c->head_dim) /* hf_config refuses these */
            return vt_error(VLLM_ERR_UNSUPPORTED, "config.json: rotary dimension %d (head_dim %d x partial_rotary_factor "
                            "%g) must be even, at least 2 and at most head_dim", lm->rot_dim, c->head_dim,
                            c->rope.partial_rotary_factor);
        for (int r = 0; r < c->num_ropes; r++)
            if ((st = rope_table(m, &c->ropes[r], lm->rot_dim, &lm->cos_sin[r]))) return st;
        /* (one list for both: per-dimension frequency divisors, a GGUF's rope_freqs; no choice to report) */
        if (c->rope.type == ROPE_LONGROPE &&
            memcmp(c->rope.long_factor, c->rope.short_factor, (size_t)c->rope.num_factors * sizeof(float)))
            LOG_I("%s: LongRoPE with its %s factors (max_model_len %d %s original_max_position_embeddings %d)",
                  c->architecture, m->max_pos > c->rope.original_max_position ? "long" : "short", m->max_pos,
                  m->max_pos > c->rope.original_max_position ? ">" : "<=", c->rope.original_max_position);
    }
    if ((st = stack_prepare(m))) return st;
    const char *apart = getenv("VLLM_MOE_ADD_APART");
    lm->moe_add_apart = apart && !strcmp(apart, "1");
    /* Gemma: torch.tensor(hidden_size ** 0.5, dtype=the activations' dtype) */
    lm->embed_scale = sqrtf((float)c->hidden_size);
    if (be->act_dtype == DTYPE_BF16) lm->embed_scale = bf16_to_f32(f32_to_bf16(lm->embed_scale));
    if (be->act_dtype == DTYPE_F16) lm->embed_scale = f16_to_f32(f32_to_f16(lm->embed_scale));
    return VLLM_OK;
}

/* Views of the step's activations, T rows (N for the logits rows). */
typedef struct llama_bufs {
    tensor x, x2, h, qkv, attn, o, gu, a, sel, lg, lp;
    tensor proj, conv, g, beta, core; /* linear-attention layers (data NULL without them) */
} llama_bufs;


/* hidden: a pooling step (the N rows' final-normed hidden states, no logits buffer) */
static vllm_status llama_buffers(model *m, int64_t T, int64_t N, bool hidden, llama_bufs *t) {
    llama *lm = m->impl;
    const model_config *c = &m->cfg;
    backend *be = m->be;
    int64_t D = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    if (c->shared_experts_size > I) I = c->shared_experts_size; /* DeepSeek's shared experts use gu / act too */
    int64_t qd = (int64_t)c->num_heads * hd, kvd = (int64_t)c->num_kv_heads * hd;
    dtype act = be->act_dtype;
    vllm_status st;
    const int64_t qw = c->attn_output_gate ? 2 * qd : qd; /* q [| gate] */
    if (model_has_recurrent_state(m)) {
        const int64_t Hv = c->linear_attn.num_v_heads, vd = Hv * c->linear_attn.v_head_dim,
                      kd = (int64_t)c->linear_attn.num_k_heads * c->linear_attn.k_head_dim;
        if ((st = model_buf_ensure(m, &lm->proj, act, T, 2 * kd + 2 * vd + 2 * Hv, &t->proj)) ||
            (st = model_buf_ensure(m, &lm->conv, act, T, 2 * kd + vd, &t->conv)) ||
            (st = model_buf_ensure(m, &lm->g, DTYPE_F32, T, Hv, &t->g)) ||
            (st = model_buf_ensure(m, &lm->beta, act, T, Hv, &t->beta)) ||
            (st = model_buf_ensure(m, &lm->core, act, T, vd, &t->core)))
            return st;
    }
    if ((st = model_buf_ensure(m, &lm->x, act, T, D, &t->x)) || (st = model_buf_ensure(m, &lm->h, act, T, D, &t->h)) ||
        (st = model_buf_ensure(m, &lm->qkv, act, T, qw + 2 * kvd, &t->qkv)) ||
        (st = model_buf_ensure(m, &lm->attn, act, T, qd, &t->attn)) ||
        (st = model_buf_ensure(m, &lm->o, act, T, D, &t->o)) ||
        (st = model_buf_ensure(m, &lm->gu, act, T, 2 * I, &t->gu)) ||
        (st = model_buf_ensure(m, &lm->act, act, T, I, &t->a)) ||
        (st = model_buf_ensure(m, &lm->sel, act, N, D, &t->sel)) ||
        (!hidden && (st = model_buf_ensure(m, &lm->logits, DTYPE_F32, N, c->vocab_size, &t->lg))) ||
        (!hidden && lm->vocab_split && (st = model_buf_ensure(m, &lm->logits_part, DTYPE_F32, N, lm->vr, &t->lp))))
        return st;
    if (c->norm_layout == NORM_LAYOUT_SANDWICH && (st = model_buf_ensure(m, &lm->x2, act, 1, D, &t->x2))) return st;
    if ((st = mla_bufs_ensure(m, &lm->mla, T))) return st;
    return moe_bufs_ensure(m, &lm->moe, T);
}

static vllm_status llama_reserve(model *m, int64_t max_tokens, int64_t max_logits) {
    llama_bufs t;
    memset(&t, 0, sizeof t);
    /* the pooling runner's steps may pool every row (MEAN): hidden rows for all of them, no logits */
    vllm_status st = llama_buffers(m, max_tokens, m->no_lm_head ? max_tokens : max_logits, m->no_lm_head, &t);
    const llama *lm = m->impl;
    backend *be = m->be;
    /* the gated delta rule's workspace for the largest step (a GPU's chunked prefill) */
    for (int l = 0; st == VLLM_OK && l < m->cfg.num_layers && be->ops->gdn_reserve; l++)
        if (m->cfg.layers[l].kind == LAYER_LINEAR_ATTENTION) {
            const gdn_params gp = gdn_params_of(&m->cfg);
            st = be->ops->gdn_reserve(be, &gp, max_tokens);
            break;
        }
    /* the MoE scratch for the largest step (its layers share it): every decode batch records. A layer with
     * DeepSeek's shared experts among its experts has the most of them and top_k + num_shared pairs a token */
    const moe_block *big = NULL;
    for (int l = 0; l < m->cfg.num_layers; l++)
        if (lm->layers[l].moe.experts && (!big || lm->layers[l].moe.num_shared > big->num_shared))
            big = &lm->layers[l].moe;
    if (st == VLLM_OK && big && be->ops->experts_reserve)
        st = be->ops->experts_reserve(be, big->experts, max_tokens * (m->cfg.moe.top_k + big->num_shared));
    return st;
}

static vllm_status llama_logits(model *m, int n, const tensor **logits) {
    llama *lm = m->impl;
    lm->logits_view = tensor_2d(DTYPE_F32, lm->logits.t.data, n, m->cfg.vocab_size);
    *logits = &lm->logits_view;
    return VLLM_OK;
}

/* o = a block's output: x += [out_norm](o) [* residual_multiplier]; with the sandwich layout the
 * MLP's input norm is fused in (h = mlp_norm(x)). */
static void residual_add(model *m, const llama_layer *L, tensor *x, tensor *o, tensor *h, const dec_norm *out_norm,
                         bool then_mlp_norm) {
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const bool scaled = c->residual_multiplier != 0 && c->residual_multiplier != 1;
    const be_norm mlp_norm = blk_norm(c, &L->post_norm);
    if (out_norm && out_norm->w.data) {
        const be_norm n = blk_norm(c, out_norm);
        if (!scaled) { /* o = out_norm(o); x += o [; h = mlp_norm(x)]: one kernel */
            be->ops->norm_add_norm(be, x, o, &n, then_mlp_norm ? &mlp_norm : NULL, h);
            return;
        }
        be->ops->norm(be, o, &n, o);                                  /* o = out_norm(o) */
    }
    if (scaled) be->ops->scale(be, o, (float)c->residual_multiplier); /* o *= residual_multiplier */
    if (then_mlp_norm) be->ops->add_norm(be, x, o, &mlp_norm, h);     /* x += o; h = mlp_norm(x) */
    else be->ops->add(be, x, o);                                       /* x += o */
}

/* A gated delta-net layer's mixer (transformers' Qwen3NextGatedDeltaNet.forward) up to out_proj:
 * t->core = rms_norm_gated(gated_delta_rule(conv(q|k|v), g, beta), z), the conv and recurrent states of
 * each sequence's slot carried across steps (s->la_meta). h receives in_norm(x). */
static void gdn_mixer(model *m, const llama_layer *L, model_cache *cache, const model_step *s, int l, const tensor *x,
                      tensor *h, llama_bufs *t) {
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *ops = be->ops;
    const gdn_params gp = gdn_params_of(c);
    const int64_t Hv = gp.num_v_heads, kd = (int64_t)gp.num_k_heads * gp.head_k_dim, vd = Hv * gp.head_v_dim;
    const linear_fuse in = {.norm_w = &L->in_norm.w, .eps = (float)c->rms_norm_eps, .h = h,
                            .norm_kind = blk_norm_kind(c)};
    ops->linear_fused(be, L->in_proj, x, &in, &t->proj);            /* (T, 2 kd + 2 vd + 2 H_v) */
    tensor qkv = tensor_cols(&t->proj, 0, 2 * kd + vd);              /* the conv's channels q | k | v */
    tensor q = tensor_cols(&t->conv, 0, kd), k = tensor_cols(&t->conv, kd, kd), v = tensor_cols(&t->conv, 2 * kd, vd);
    tensor z = tensor_cols(&t->proj, 2 * kd + vd, vd);               /* (T, vd) the norm's gate */
    tensor b = tensor_cols(&t->proj, 2 * kd + 2 * vd, Hv), a = tensor_cols(&t->proj, 2 * kd + 2 * vd + Hv, Hv);
    ops->causal_conv1d(be, &qkv, &L->conv_w, NULL, true, &cache->conv_state[l], &s->la_meta, &t->conv); /* (T, C) */
    ops->gdn_gating(be, &a, &b, &L->A_log, &L->dt_bias, &t->g, &t->beta); /* g, beta (T, H_v) */
    ops->gated_delta_rule(be, &q, &k, &v, &t->g, &t->beta, &cache->ssm_state[l], &s->la_meta, &gp, &t->core);
    ops->rms_norm_gated(be, &t->core, &z, &L->gnorm, (float)c->rms_norm_eps, &t->core); /* per v-head */
}

static vllm_status llama_run(model *m, model_cache *cache, const model_step *s, const tensor **logits) {
    llama *lm = m->impl;
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *ops = be->ops;
    vllm_status st;
    int64_t T = s->meta.num_tokens, N = s->num_logits, hd = c->head_dim, qd = (int64_t)c->num_heads * hd,
            kvd = (int64_t)c->num_kv_heads * hd;
    float eps = (float)c->rms_norm_eps;
    llama_bufs t;
    memset(&t, 0, sizeof t);
    if (!s->hidden_out && m->no_lm_head && N > 0)
        return vt_error(VLLM_ERR_INTERNAL, "forward: logits asked of a model loaded without its LM head (pooling)");
    if ((st = llama_buffers(m, T, N, s->hidden_out, &t))) return st;
    tensor x = t.x, h = t.h, qkv = t.qkv, attn = t.attn, o = t.o, gu = t.gu, a = t.a, sel = t.sel, lg = t.lg;

    const be_norm_kind nk = blk_norm_kind(c);
    const be_act act = (be_act)c->act;
    attn_params ap = {
        .scale = c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)hd),
        .num_heads = c->num_heads,
        .num_kv_heads = c->num_kv_heads,
        .head_dim = (int)hd,
        .softcap = (float)c->attn_softcap,
    };
    const int64_t qw = c->attn_output_gate ? 2 * qd : qd; /* q [| gate] */
    tensor q = tensor_cols(&qkv, 0, qd);          /* (T, nh*hd) strided */
    tensor gate = tensor_cols(&qkv, qd, qd);      /* (T, nh*hd) strided: the output gate (attn_output_gate) */
    tensor k = tensor_cols(&qkv, qw, kvd);        /* (T, nkv*hd) strided */
    tensor v = tensor_cols(&qkv, qw + kvd, kvd);  /* (T, nkv*hd) strided */
    const bool pre = c->norm_layout == NORM_LAYOUT_PRE, post = c->norm_layout == NORM_LAYOUT_POST;
    /* the Llama fast path: each residual add fused into the linear before it */
    const bool fused_residual = pre && (c->residual_multiplier == 0 || c->residual_multiplier == 1) &&
                                m->tp_size <= 1; /* tensor parallelism: the add comes after the all-reduce */
    const bool neox = !c->rope_interleaved;

    /* x is the residual stream; each linear_fused (backend.h) carries its
     * neighbours: the input norm, the gated product, the residual add */
    if (lm->vocab_split) {                                           /* each rank its rows, then their sum */
        ops->embedding_range(be, &lm->embed, &s->ids, lm->v0, &x);
        ops->all_reduce(be, &x);
    } else {
        ops->embedding(be, &lm->embed, &s->ids, &x);                /* x (T, D) */
    }
    if (c->embed_scale_sqrt) ops->scale(be, &x, lm->embed_scale);   /* x *= sqrt(D) */
    if (c->embed_multiplier != 0 && c->embed_multiplier != 1) ops->scale(be, &x, (float)c->embed_multiplier);
    if (lm->pos_embed.data) {                                        /* x += P[pos + offset] */
        tensor rows = tensor_rows(&lm->pos_embed, c->pos_embed_offset, m->max_pos);
        ops->embedding(be, &rows, &s->positions, &h);
        ops->add(be, &x, &h);
    }
    const linear_fuse add_to_x = {.accumulate = true, .mid = &o};
    /* The sandwich layout's attention residual in one-token steps: x += attn_out_norm(o) rides in the gate_up's
     * linear_fused (linear_fuse res: the GEMV's prologue, each CTA adding for itself), which writes the sum to the
     * other residual buffer (xo); x and xo then swap. Measured on Gemma-3-12B's shape (H100, session 27): +1.0%
     * there; the MLP's residual folded into the next layer's qkv the same way was 1.0% slower (every CTA of the
     * persistent GEMV paying the second norm at once), so it stays norm_add_norm, as do larger steps. */
    const bool fold = c->norm_layout == NORM_LAYOUT_SANDWICH && T == 1 && t.x2.data && m->tp_size <= 1 &&
                      (c->residual_multiplier == 0 || c->residual_multiplier == 1);
    tensor xo = t.x2;
    be_norm attn_norm;
    /* one token of one sequence: the whole stack as one op where the backend has it (every layer reads one
     * KV cache group's metadata) */
    bool stacked = lm->stack_ok && T == 1 && s->meta.num_seqs == 1;
    for (int l = 0; stacked && l < c->num_layers; l++) {
        stacked = model_step_meta(s, l) == model_step_meta(s, 0);
        lm->stack_layers[l].k_cache = &cache->k[l];
        lm->stack_layers[l].v_cache = &cache->v[l];
    }
    if (stacked) {
        tensor act1 = tensor_cols(&a, 0, c->intermediate_size);
        ops->dense_stack_decode(be, &lm->stack, &x, &s->positions, model_step_meta(s, 0), &qkv, &attn, &act1);
    }
    for (int l = 0; !stacked && l < c->num_layers; l++) {
        llama_layer *L = &lm->layers[l];
        const layer_spec *ls = &c->layers[l];
        const attn_meta *meta = model_step_meta(s, l);
        ap.sliding_window = ls->sliding_window;
        ap.sinks = L->sinks.data ? &L->sinks : NULL;

        const tensor *mix = &attn;                                   /* the token mixer's output */
        tensor mla_out;
        if (ls->kind == LAYER_LINEAR_ATTENTION) {
            gdn_mixer(m, L, cache, s, l, &x, &h, &t);                 /* t.core (T, H_v d_v) */
            mix = &t.core;
        } else if (ls->kind == LAYER_MLA) {                           /* (T, H v_head_dim), latent cache */
            mla_block_run(m, &L->mla, &lm->mla, &x, &L->in_norm, &h, &cache->k[l], meta, &s->positions,
                          &lm->cos_sin[ls->rope], &mla_out);
            mix = &mla_out;
        } else {
            /* attention: q, k, v = [in_norm](x) Wqkv [+ b] */
            if (post) {
                ops->linear(be, L->qkv, &x, &qkv);                        /* (T, qd + 2 kvd) */
            } else {
                const linear_fuse attn_in = {.norm_w = &L->in_norm.w,
                                             .norm_b = L->in_norm.b.data ? &L->in_norm.b : NULL, .eps = eps, .h = &h,
                                             .norm_kind = nk};
                ops->linear_fused(be, L->qkv, &x, &attn_in, &qkv);       /* norm(x) -> (T, qd + 2 kvd) */
            }
            /* q/k norms, rope, k/v into the paged cache */
            const bool head_norm = c->qk_norm && c->qk_norm_kind != QK_NORM_PROJ;
            if (c->qk_norm && !head_norm) {                               /* over the whole projection (OLMo-2) */
                const be_norm qn = blk_norm(c, &L->q_norm), kn = blk_norm(c, &L->k_norm);
                ops->norm(be, &q, &qn, &q);
                ops->norm(be, &k, &kn, &k);
            }
            if (!lm->rot_dim) {
                ops->kv_write(be, &k, &v, &cache->k[l], &cache->v[l], meta);
            } else if (nk == BE_NORM_RMS) {
                ops->qk_norm_rope_kv(be, &q, &k, &v, head_norm ? &L->q_norm.w : NULL,
                                     head_norm ? &L->k_norm.w : NULL, eps, &s->positions, &lm->cos_sin[ls->rope],
                                     (int)hd, lm->rot_dim, neox, &cache->k[l], &cache->v[l], meta);
            } else {
                const be_norm qn = blk_norm(c, &L->q_norm), kn = blk_norm(c, &L->k_norm);
                ops->qk_norm_rope_kv_ex(be, &q, &k, &v, head_norm ? &qn : NULL, head_norm ? &kn : NULL, &s->positions,
                                        &lm->cos_sin[ls->rope], (int)hd, lm->rot_dim, neox, &cache->k[l], &cache->v[l],
                                        meta);
            }
            ops->attention(be, &q, &cache->k[l], &cache->v[l], meta, &ap, &attn); /* (T, qd) */
            if (c->attn_output_gate) ops->sigmoid_mul(be, &attn, &gate);  /* attn *= sigmoid(gate) */
        }
        bool mlp_normed = false;                                      /* h = mlp_norm(x) already */
        const bool fold_o = fold && ls->mlp != MLP_MOE && L->attn_out_norm.w.data; /* into the gate_up below */
        if (fold_o) {
            ops->linear(be, L->o, mix, &o);                           /* o = mix Wo (T, D) */
        } else if (fused_residual) {
            ops->linear_fused(be, L->o, mix, &add_to_x, &x);          /* x += mix Wo */
        } else {
            ops->linear(be, L->o, mix, &o);                           /* o = mix Wo (T, D) */
            if (m->tp_size > 1) ops->all_reduce(be, &o);              /* the row-parallel o's partial sums */
            mlp_normed = c->norm_layout == NORM_LAYOUT_SANDWICH;
            residual_add(m, L, &x, &o, &h, &L->attn_out_norm, mlp_normed);
        }

        if (ls->mlp == MLP_MOE) {
            /* h = mlp_norm(x); o = sum over the top k of w_e expert_e(h) [+ sigmoid(h.g) shared(h)]. The norm
             * rides in the router's linear_fused, which writes h for the experts (none with the post layout;
             * the sandwich layout's residual_add wrote h already) */
            const bool norm_here = !mlp_normed && !post;
            const be_norm mlp_norm = blk_norm(c, &L->post_norm);
            const tensor *hin = post ? &x : &h;
            /* With nothing between the MLP's output and the residual add (no out norm, no residual multiplier, one
             * rank, no shared experts apart in L->gate_up), the experts' sum goes straight into x: the combine
             * accumulates (x + its f32 sum, rounded once) and no add follows. Shared experts inside the expert op
             * (moe.num_shared: DeepSeek's, weight 1; Qwen2-MoE's gated) are part of that sum (transformers'
             * DeepseekV2MoE: moe(...) + shared_experts(residuals), then the decoder layer's residual + that); a
             * Qwen2-MoE shared expert run apart adds into x after it (moe_block_run). */
            const bool into_x = hin != &x && !L->mlp_out_norm.w.data && !L->gate_up && !lm->moe_add_apart &&
                                (c->residual_multiplier == 0 || c->residual_multiplier == 1) && m->tp_size <= 1;
            moe_block_run(m, &L->moe, &lm->moe, norm_here ? &x : hin, norm_here ? &mlp_norm : NULL, &h, into_x,
                          into_x ? &x : &o);                      /* x += / o = (T, D) */
            if (into_x) continue;
            if (L->gate_up) { /* DeepSeek's shared experts apart: o += down(act(gate h) * up h), no gate of their own */
                const int64_t Is = c->shared_experts_size;
                tensor so = tensor_rows(&lm->mla.so.t, 0, T), sgu = tensor_2d(gu.dtype, gu.data, T, 2 * Is),
                       sa = tensor_2d(a.dtype, a.data, T, Is);         /* gu / a's memory, Is wide */
                const linear_fuse sh = {.silu_mul = true, .mid = &sgu, .act = act};
                ops->linear_fused(be, L->gate_up, hin, &sh, &sa);     /* (T, Is) */
                ops->linear(be, L->down, &sa, &so);                    /* (T, D) */
                ops->add(be, &o, &so);
            }
            if (m->tp_size > 1) ops->all_reduce(be, &o); /* each rank's experts are a slice of every expert's width */
            residual_add(m, L, &x, &o, &h, &L->mlp_out_norm, false);
            continue;
        }
        /* MLP: a = act(h Wg) * (h Wu) (gated) or act(h Wu) (plain), h = [mlp_norm](x) */
        const bool gated = ls->mlp == MLP_DENSE;
        const tensor *mlp_x = mlp_normed ? &h : &x;
        const bool norm_here = !mlp_normed && !post;
        linear_fuse mlp_in = {.norm_w = norm_here ? &L->post_norm.w : NULL,
                              .norm_b = norm_here && L->post_norm.b.data ? &L->post_norm.b : NULL,
                              .norm_kind = norm_here ? nk : BE_NORM_RMS, .eps = eps, .h = &h,
                              .silu_mul = gated, .mid = &gu, .act = act};
        if (fold_o) {                                                 /* xo = x + attn_out_norm(o) first */
            attn_norm = blk_norm(c, &L->attn_out_norm);
            mlp_in.res = &o;
            mlp_in.res_norm = &attn_norm;
            mlp_in.res_out = &xo;
        }
        ops->linear_fused(be, L->gate_up, mlp_x, &mlp_in, &a);       /* (T, I) */
        if (fold_o) {
            const tensor sw = x;
            x = xo;
            xo = sw;
        }
        if (!gated) ops->activation(be, act, &a);                      /* a = act(a) */
        if (fused_residual) {
            ops->linear_fused(be, L->down, &a, &add_to_x, &x);        /* x += a Wd */
        } else {
            ops->linear(be, L->down, &a, &o);                         /* o = a Wd */
            if (m->tp_size > 1) ops->all_reduce(be, &o);              /* the row-parallel down's partial sums */
            residual_add(m, L, &x, &o, &h, &L->mlp_out_norm, false);
        }
    }
    /* logits only for the sampled rows: gather them, then the final norm and
     * lm_head (none when the step only advances partial prefills); the pooling
     * runner stops at the final norm (vLLM's *Model forward: norm(hidden_states)) */
    if (N > 0 && s->hidden_out) {
        ops->gather_rows(be, &x, &s->logits_idx, &sel);               /* (N, D) */
        const be_norm fn = blk_norm(c, &lm->final_norm);
        ops->norm(be, &sel, &fn, &sel);                               /* final_norm(x[rows]) in place */
        lm->logits_view = sel;
        *logits = &lm->logits_view;
        return VLLM_OK;
    }
    if (N > 0) {
        ops->gather_rows(be, &x, &s->logits_idx, &sel);               /* (N, D) */
        tensor hn = tensor_rows(&h, 0, N);
        const linear_fuse final = {.norm_w = &lm->final_norm.w,
                                   .norm_b = lm->final_norm.b.data ? &lm->final_norm.b : NULL, .eps = eps, .h = &hn,
                                   .norm_kind = nk};
        if (lm->vocab_split) {                                       /* the rank's columns, then every rank's */
            tensor lp = tensor_rows(&t.lp, 0, N);
            ops->linear_fused(be, lm->lm_head, &sel, &final, &lp);    /* (N, V / tp) */
            ops->all_gather_cols(be, &lp, &lg);                       /* (N, V) */
        } else {
            ops->linear_fused(be, lm->lm_head, &sel, &final, &lg);    /* (N, V) */
        }
        if (c->final_softcap > 0) ops->softcap(be, &lg, (float)c->final_softcap); /* tanh(lg / cap) * cap */
        if (c->logits_divisor != 0 && c->logits_divisor != 1) ops->scale(be, &lg, (float)(1.0 / c->logits_divisor));
    }
    lm->logits_view = lg;
    *logits = &lm->logits_view;
    return VLLM_OK;
}

/* Every dense family runs this decoder; registry.c names them. */
const model_arch decoder_arch = {.name = "decoder", .build = decoder_build, .reserve = llama_reserve, .run = llama_run,
                                 .logits = llama_logits, .destroy = llama_destroy};
