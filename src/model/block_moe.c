/*
 * block_moe.c: the mixture-of-experts block (model/blocks.h), as transformers'
 * Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock:
 *
 *   logits = h W_router^T                        (T, E)
 *   ids, w = top k of softmax(logits) [/ sum]    (T, k)   (moe_route, on the device)
 *   o = sum_j w_j * down_e(act(gate_e h) * up_e h)         (moe_experts)
 *   o += sigmoid(h . g) * shared(h)              (Qwen2-MoE's shared expert)
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/blocks.h"

bool blk_has_moe(const model_config *c) {
    for (int l = 0; l < c->num_layers; l++)
        if (c->layers[l].mlp == MLP_MOE) return true;
    return false;
}

moe_params blk_moe_params(const model_config *c) {
    return (moe_params){.num_experts = c->moe.num_experts, .top_k = c->moe.top_k, .scoring = BE_MOE_SOFTMAX,
                        .renormalize = c->moe.renormalize, .act = (be_act)c->act};
}

/* An MoE layer's router, experts (per-expert tensors, or the fused (E, 2I, D) / (E, D, I) ones of
 * transformers 5) and shared expert. */
vllm_status moe_block_load(model *m, weight_source *ws, int l, moe_block *L) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    const int E = c->moe.num_experts;
    const int64_t D = c->hidden_size, I = c->moe.intermediate_size;
    vllm_status st;
    const int64_t rrows[1] = {E};
    if ((st = blk_load_linear(m, ws, l, NULL, &nm->router, rrows, 1, D, false, &L->router))) return st;
    tensor *t = calloc((size_t)E * 3, sizeof *t);
    const tensor **pg = calloc((size_t)E * 3, sizeof *pg);
    if (!t || !pg) {
        free(t);
        free(pg);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (experts)");
    }
    const tensor **pu = pg + E, **pd = pg + 2 * E;
    char name[160];
    snprintf(name, sizeof name, "%slayers.%d.%s.%s", c->weight_prefix, l, nm->experts, nm->fused_gate_up ? nm->fused_gate_up : "");
    if (nm->fused_gate_up && ws_has(ws, name)) {
        /* transformers 5's fused experts: gate_up (E, 2I, D), rows gate | up per expert; down (E, D, I) */
        tensor gu, dn;
        const int64_t sgu[3] = {E, 2 * I, D}, sdn[3] = {E, D, I};
        st = ws_getf(ws, &gu, 3, sgu, "%s", name);
        if (!st) st = ws_getf(ws, &dn, 3, sdn, "%slayers.%d.%s.%s", c->weight_prefix, l, nm->experts, nm->fused_down);
        for (int e = 0; !st && e < E; e++) {
            size_t es = dtype_size(gu.dtype), ds = dtype_size(dn.dtype);
            t[e] = tensor_2d(gu.dtype, (char *)gu.data + (size_t)e * 2 * I * D * es, I, D);
            t[E + e] = tensor_2d(gu.dtype, (char *)gu.data + ((size_t)e * 2 * I + I) * D * es, I, D);
            t[2 * E + e] = tensor_2d(dn.dtype, (char *)dn.data + (size_t)e * D * I * ds, D, I);
        }
    } else {
        const int64_t sgu[2] = {I, D}, sdn[2] = {D, I};
        st = VLLM_OK;
        for (int e = 0; !st && e < E; e++) {
            const char *pre = c->weight_prefix, *ex = nm->experts;
            if ((st = ws_getf(ws, &t[e], 2, sgu, "%slayers.%d.%s.%d.%s.weight", pre, l, ex, e, nm->expert_gate)) ||
                (st = ws_getf(ws, &t[E + e], 2, sgu, "%slayers.%d.%s.%d.%s.weight", pre, l, ex, e, nm->expert_up)))
                break;
            st = ws_getf(ws, &t[2 * E + e], 2, sdn, "%slayers.%d.%s.%d.%s.weight", pre, l, ex, e, nm->expert_down);
        }
    }
    for (int i = 0; i < 3 * E; i++) pg[i] = &t[i];
    if (!st) st = m->be->ops->experts_create(m->be, pg, pu, pd, NULL, E, &L->experts);
    free(t);
    free(pg);
    if (st) return st;
    if (c->moe.shared_intermediate_size > 0) {
        const int64_t Is = c->moe.shared_intermediate_size;
        const char *sh[2] = {nm->shared_gate, nm->shared_up};
        const int64_t shrows[2] = {Is, Is}, dnrows[1] = {D}, grows[1] = {1};
        if ((st = blk_load_linear(m, ws, l, NULL, sh, shrows, 2, D, false, &L->sh_gate_up)) ||
            (st = blk_load_linear(m, ws, l, NULL, &nm->shared_down, dnrows, 1, Is, false, &L->sh_down)) ||
            (st = blk_load_linear(m, ws, l, NULL, &nm->shared_expert_gate, grows, 1, D, false, &L->sh_gate)))
            return st;
    }
    return VLLM_OK;
}

void moe_block_free(backend *be, moe_block *b) {
    be_linear *lins[] = {b->router, b->sh_gate_up, b->sh_down, b->sh_gate};
    for (size_t i = 0; i < sizeof lins / sizeof *lins; i++)
        if (lins[i]) be->ops->linear_free(be, lins[i]);
    if (b->experts) be->ops->experts_free(be, b->experts);
}

vllm_status moe_bufs_ensure(model *m, moe_bufs *mb, int64_t T) {
    const model_config *c = &m->cfg;
    if (!blk_has_moe(c)) return VLLM_OK;
    const dtype act = m->be->act_dtype;
    const int64_t E = c->moe.num_experts, k = c->moe.top_k, Is = c->moe.shared_intermediate_size, D = c->hidden_size;
    tensor t;
    vllm_status st;
    if ((st = model_buf_ensure(m, &mb->rl, act, T, E, &t)) || (st = model_buf_ensure(m, &mb->ids, DTYPE_I32, T, k, &t)) ||
        (st = model_buf_ensure(m, &mb->rw, DTYPE_F32, T, k, &t)))
        return st;
    if (Is > 0 && ((st = model_buf_ensure(m, &mb->sgu, act, T, 2 * Is, &t)) ||
                   (st = model_buf_ensure(m, &mb->sa, act, T, Is, &t)) ||
                   (st = model_buf_ensure(m, &mb->sg, act, T, 1, &t)) ||
                   (st = model_buf_ensure(m, &mb->so, act, T, D, &t))))
        return st;
    return VLLM_OK;
}

void moe_bufs_release(backend *be, moe_bufs *mb) {
    ws_buf *bufs[] = {&mb->rl, &mb->ids, &mb->rw, &mb->sgu, &mb->sa, &mb->sg, &mb->so};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) model_buf_release(be, bufs[i]);
}

/* The first T rows of a buffer sized by moe_bufs_ensure. */
static tensor rows(const ws_buf *b, int64_t T) { return tensor_rows(&b->t, 0, T); }

void moe_block_run(model *m, const moe_block *b, moe_bufs *mb, const tensor *h, tensor *o) {
    backend *be = m->be;
    const backend_ops *ops = be->ops;
    const int64_t T = h->shape[0];
    const moe_params mp = blk_moe_params(&m->cfg);
    tensor rl = rows(&mb->rl, T), ids = rows(&mb->ids, T), rw = rows(&mb->rw, T);
    ops->linear(be, b->router, h, &rl);                           /* (T, E) router logits */
    ops->moe_route(be, &rl, &mp, &ids, &rw);                      /* top-k ids, weights (T, k) */
    ops->moe_experts(be, b->experts, h, &ids, &rw, &mp, false, o); /* o (T, D) */
    if (b->sh_gate_up) {
        tensor sgu = rows(&mb->sgu, T), sa = rows(&mb->sa, T), sg = rows(&mb->sg, T), so = rows(&mb->so, T);
        const linear_fuse gated = {.silu_mul = true, .mid = &sgu, .act = (be_act)m->cfg.act};
        ops->linear_fused(be, b->sh_gate_up, h, &gated, &sa);   /* (T, Is) */
        ops->linear(be, b->sh_down, &sa, &so);                   /* (T, D) */
        ops->linear(be, b->sh_gate, h, &sg);                     /* (T, 1) */
        ops->sigmoid_gate(be, &so, &sg);                          /* so *= sigmoid(sg) */
        ops->add(be, o, &so);                                     /* o += so */
    }
}
