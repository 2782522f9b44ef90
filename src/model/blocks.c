/*
 * blocks.c: what the decoder's blocks share: checkpoint names, loading norms
 * and (fused) linear layers, the norm of a config (model/blocks.h).
 */
#include "model/blocks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Llama's tensor names, the default of model_config.names. */
const weight_names weight_names_llama = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};

const weight_names *blk_names(const model_config *c) { return c->names ? c->names : &weight_names_llama; }

be_norm_kind blk_norm_kind(const model_config *c) {
    return c->norm == NORM_STYLE_RMS_OFFSET ? BE_NORM_RMS_OFFSET
           : c->norm == NORM_STYLE_LAYER    ? BE_NORM_LAYER
                                            : BE_NORM_RMS;
}

vllm_status blk_import(model *m, const tensor *host, tensor *out) {
    return m->be->ops->import(m->be, host, out);
}

/* The tensor "<prefix>[layers.<l>.]<name>.<suffix>" of the given shape (l < 0: not a layer's). */
vllm_status blk_get(weight_source *ws, const model_config *c, int l, const char *name, const char *suffix,
                       int ndim, const int64_t *shape, tensor *out) {
    if (l < 0) return ws_getf(ws, out, ndim, shape, "%s%s.%s", c->weight_prefix, name, suffix);
    return ws_getf(ws, out, ndim, shape, "%slayers.%d.%s.%s", c->weight_prefix, l, name, suffix);
}

/* Loads and imports a norm of n elements: its weight, and its bias when the norm is a LayerNorm. */
vllm_status blk_load_norm(model *m, weight_source *ws, int l, const char *name, int64_t n, dec_norm *out) {
    tensor t;
    vllm_status st;
    if ((st = blk_get(ws, &m->cfg, l, name, "weight", 1, &n, &t)) || (st = blk_import(m, &t, &out->w))) return st;
    if (m->cfg.norm == NORM_STYLE_LAYER &&
        ((st = blk_get(ws, &m->cfg, l, name, "bias", 1, &n, &t)) || (st = blk_import(m, &t, &out->b))))
        return st;
    return VLLM_OK;
}

void blk_release_norm(backend *be, dec_norm *n) {
    if (n->w.data) be->ops->release_import(be, &n->w);
    if (n->b.data) be->ops->release_import(be, &n->b);
}

be_norm blk_norm(const model_config *c, const dec_norm *n) {
    return (be_norm){.kind = blk_norm_kind(c), .w = &n->w, .b = n->b.data ? &n->b : NULL, .eps = (float)c->rms_norm_eps};
}

/* A linear layer from one fused checkpoint tensor (fused != NULL) or from the parts (names[i], rows[i]),
 * concatenated along the output as vLLM's QKVParallelLinear / MergedColumnParallelLinear; with biases. */
vllm_status blk_load_linear(model *m, weight_source *ws, int l, const char *fused, const char *const *names,
                               const int64_t *rows, int n, int64_t in, bool bias, be_linear **out) {
    return blk_load_linear_split(m, ws, l, fused, names, rows, n, in, bias, BLK_WHOLE, out);
}

/* The rank's share of a part of the full tensor w (float dtypes: whole elements). BLK_SPLIT_OUT: rows
 * [rank rows, + rows) of w (rows * tp, in), a view; BLK_SPLIT_IN: columns [rank in, + in) of w (rows, in * tp),
 * a copy the model keeps. */
static vllm_status tp_slice(model *m, const tensor *w, blk_split split, int64_t rows, int64_t in, int index,
                            int count, tensor *out) {
    if (!(w->dtype == DTYPE_F32 || w->dtype == DTYPE_F16 || w->dtype == DTYPE_BF16))
        return vt_error(VLLM_ERR_UNSUPPORTED, "tensor parallelism: %s weights are not split yet", dtype_name(w->dtype));
    const size_t es = dtype_size(w->dtype);
    if (split != BLK_SPLIT_IN) {
        *out = w->ndim == 2 ? tensor_2d(w->dtype, (char *)w->data + (size_t)(index * rows * in) * es, rows, in)
                            : tensor_1d(w->dtype, (char *)w->data + (size_t)(index * rows) * es, rows);
        return VLLM_OK;
    }
    void **bufs = realloc(m->tp_bufs, (size_t)(m->n_tp_bufs + 1) * sizeof *bufs);
    char *d = bufs ? malloc((size_t)(rows * in) * es) : NULL;
    if (bufs) m->tp_bufs = bufs;
    if (!d) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a tensor-parallel weight slice)");
    m->tp_bufs[m->n_tp_bufs++] = d;
    const char *s = w->data;
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + (size_t)(r * in) * es, s + (size_t)(r * in * count + index * in) * es, (size_t)in * es);
    *out = tensor_2d(w->dtype, d, rows, in);
    return VLLM_OK;
}

vllm_status blk_load_linear_split(model *m, weight_source *ws, int l, const char *fused, const char *const *names,
                                  const int64_t *rows, int n, int64_t in, bool bias, blk_split split,
                                  be_linear **out) {
    tensor w[3], b[3];
    const tensor *wp[3], *bp[3];
    vllm_status st;
    int64_t total = 0;
    const int tp = m->tp_size > 1 ? m->tp_size : 1;
    if (tp > 1 && split != BLK_WHOLE) {
        if (fused)
            return vt_error(VLLM_ERR_UNSUPPORTED, "tensor parallelism: the fused checkpoint tensor %s is not split yet",
                            fused);
        if (split == BLK_SPLIT_IN && bias)
            return vt_error(VLLM_ERR_UNSUPPORTED, "tensor parallelism: a row-parallel layer's bias is not split yet");
        for (int i = 0; i < n; i++) {
            /* BLK_SPLIT_QKV's k and v parts: the rank's KV-head shard (replicated when fewer heads than ranks) */
            const bool kv = split == BLK_SPLIT_QKV && i > 0;
            const int index = kv ? m->tp_kv_shard : m->tp_rank, count = kv ? m->tp_kv_shards : tp;
            const int64_t sw[2] = {split != BLK_SPLIT_IN ? rows[i] * count : rows[i],
                                   split == BLK_SPLIT_IN ? in * tp : in},
                          sb = rows[i] * count;
            tensor full;
            if ((st = blk_get(ws, &m->cfg, l, names[i], "weight", 2, sw, &full)) ||
                (st = tp_slice(m, &full, split, rows[i], in, index, count, &w[i])))
                return st;
            if (bias && ((st = blk_get(ws, &m->cfg, l, names[i], "bias", 1, &sb, &full)) ||
                         (st = tp_slice(m, &full, split, rows[i], 1, index, count, &b[i]))))
                return st;
            wp[i] = &w[i];
            bp[i] = &b[i];
        }
        return m->be->ops->linear_create(m->be, wp, bias ? bp : NULL, n, out);
    }
    if (fused) {
        for (int i = 0; i < n; i++) total += rows[i];
        names = &fused;
        rows = &total;
        n = 1;
    }
    for (int i = 0; i < n; i++) {
        int64_t sw[2] = {rows[i], in};
        if ((st = blk_get(ws, &m->cfg, l, names[i], "weight", 2, sw, &w[i]))) return st;
        if (bias && (st = blk_get(ws, &m->cfg, l, names[i], "bias", 1, &rows[i], &b[i]))) return st;
        wp[i] = &w[i];
        bp[i] = &b[i];
    }
    return m->be->ops->linear_create(m->be, wp, bias ? bp : NULL, n, out);
}

