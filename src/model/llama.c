/*
 * llama.c: the Llama family: LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM (q/k/v bias) and Qwen3ForCausalLM (per-head q/k RMSNorm,
 * explicit head_dim). Pre-norm decoder: attention with GQA/MQA, RoPE and a
 * SiLU-gated MLP, over the paged KV cache.
 *
 * Semantics follow transformers' modeling_llama / modeling_qwen2 /
 * modeling_qwen3 / modeling_mistral and vLLM's model_executor/models/llama.py
 * (fused qkv and gate_up projections).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "model/model_internal.h"
#include "model/rope.h"

typedef struct llama_layer {
    tensor in_norm, post_norm;   /* (D) */
    tensor q_norm, k_norm;       /* (head_dim), Qwen3 only */
    be_linear *qkv;              /* (nh*hd + 2*nkv*hd, D) */
    be_linear *o;                /* (D, nh*hd) */
    be_linear *gate_up;          /* (2I, D) */
    be_linear *down;             /* (D, I) */
} llama_layer;

typedef struct llama {
    tensor embed;                /* (V, D) imported */
    tensor final_norm;           /* (D) */
    be_linear *lm_head;          /* (V, D), the embedding when tied */
    llama_layer *layers;
    tensor cos_sin;              /* (max_pos, rot_dim) F32 */
    int rot_dim;
    /* workspace */
    ws_buf x, h, qkv, attn, o, gu, act, sel, logits;
    tensor logits_view;
} llama;

static vllm_status import(model *m, const tensor *host, tensor *out) {
    return m->be->ops->import(m->be, host, out);
}

static vllm_status build_layer(model *m, weight_source *ws, int l, llama_layer *L, bool qkv_bias, bool o_bias) {
    const model_config *c = &m->cfg;
    backend *be = m->be;
    int64_t D = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->num_heads * hd, kvd = (int64_t)c->num_kv_heads * hd;
    const char *p = "model.layers";
    tensor t_in, t_post, wq, wk, wv, wo, wg, wu, wd, bq, bk, bv, bo, t;
    vllm_status st;
    int64_t sD[1] = {D}, sq[2] = {qd, D}, skv[2] = {kvd, D}, so[2] = {D, qd};
    int64_t si[2] = {I, D}, sdn[2] = {D, I}, sbq[1] = {qd}, sbk[1] = {kvd}, shd[1] = {hd};
    if ((st = ws_getf(ws, &t_in, 1, sD, "%s.%d.input_layernorm.weight", p, l)) ||
        (st = ws_getf(ws, &t_post, 1, sD, "%s.%d.post_attention_layernorm.weight", p, l)) ||
        (st = ws_getf(ws, &wq, 2, sq, "%s.%d.self_attn.q_proj.weight", p, l)) ||
        (st = ws_getf(ws, &wk, 2, skv, "%s.%d.self_attn.k_proj.weight", p, l)) ||
        (st = ws_getf(ws, &wv, 2, skv, "%s.%d.self_attn.v_proj.weight", p, l)) ||
        (st = ws_getf(ws, &wo, 2, so, "%s.%d.self_attn.o_proj.weight", p, l)) ||
        (st = ws_getf(ws, &wg, 2, si, "%s.%d.mlp.gate_proj.weight", p, l)) ||
        (st = ws_getf(ws, &wu, 2, si, "%s.%d.mlp.up_proj.weight", p, l)) ||
        (st = ws_getf(ws, &wd, 2, sdn, "%s.%d.mlp.down_proj.weight", p, l)))
        return st;
    if (qkv_bias &&
        ((st = ws_getf(ws, &bq, 1, sbq, "%s.%d.self_attn.q_proj.bias", p, l)) ||
         (st = ws_getf(ws, &bk, 1, sbk, "%s.%d.self_attn.k_proj.bias", p, l)) ||
         (st = ws_getf(ws, &bv, 1, sbk, "%s.%d.self_attn.v_proj.bias", p, l))))
        return st;
    if (o_bias && (st = ws_getf(ws, &bo, 1, sD, "%s.%d.self_attn.o_proj.bias", p, l))) return st;
    if ((st = import(m, &t_in, &L->in_norm)) || (st = import(m, &t_post, &L->post_norm))) return st;
    if (c->qk_norm) {
        if ((st = ws_getf(ws, &t, 1, shd, "%s.%d.self_attn.q_norm.weight", p, l)) ||
            (st = import(m, &t, &L->q_norm)) ||
            (st = ws_getf(ws, &t, 1, shd, "%s.%d.self_attn.k_norm.weight", p, l)) ||
            (st = import(m, &t, &L->k_norm)))
            return st;
    }
    /* fused projections, as vLLM's QKVParallelLinear / MergedColumnParallelLinear */
    const tensor *qkv_w[3] = {&wq, &wk, &wv};
    const tensor *qkv_b[3] = {&bq, &bk, &bv};
    const tensor *o_w[1] = {&wo}, *o_b[1] = {&bo};
    const tensor *gu_w[2] = {&wg, &wu};
    const tensor *dn_w[1] = {&wd};
    if ((st = be->ops->linear_create(be, qkv_w, qkv_bias ? qkv_b : NULL, 3, &L->qkv)) ||
        (st = be->ops->linear_create(be, o_w, o_bias ? o_b : NULL, 1, &L->o)) ||
        (st = be->ops->linear_create(be, gu_w, NULL, 2, &L->gate_up)) ||
        (st = be->ops->linear_create(be, dn_w, NULL, 1, &L->down)))
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
            if (L->in_norm.data) be->ops->release_import(be, &L->in_norm);
            if (L->post_norm.data) be->ops->release_import(be, &L->post_norm);
            if (L->q_norm.data) be->ops->release_import(be, &L->q_norm);
            if (L->k_norm.data) be->ops->release_import(be, &L->k_norm);
            be_linear *lins[] = {L->qkv, L->o, L->gate_up, L->down};
            for (int i = 0; i < 4; i++)
                if (lins[i]) be->ops->linear_free(be, lins[i]);
        }
        free(lm->layers);
    }
    if (lm->embed.data) be->ops->release_import(be, &lm->embed);
    if (lm->final_norm.data) be->ops->release_import(be, &lm->final_norm);
    if (lm->lm_head) be->ops->linear_free(be, lm->lm_head);
    if (lm->cos_sin.data) be->ops->release(be, &lm->cos_sin);
    ws_buf *bufs[] = {&lm->x, &lm->h, &lm->qkv, &lm->attn, &lm->o, &lm->gu, &lm->act, &lm->sel, &lm->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) model_buf_release(be, bufs[i]);
    free(lm);
    m->impl = NULL;
}

static vllm_status llama_build_common(model *m, weight_source *ws, bool qkv_bias, bool o_bias) {
    const model_config *c = &m->cfg;
    backend *be = m->be;
    llama *lm = calloc(1, sizeof *lm);
    if (!lm) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    m->impl = lm;
    lm->layers = calloc((size_t)c->num_layers, sizeof *lm->layers);
    if (!lm->layers) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    if (c->head_dim % 2 || c->head_dim > 1024)
        return vt_error(VLLM_ERR_UNSUPPORTED, "config.json: head_dim %d not supported (even, <= 1024)", c->head_dim);
    if (!(c->rope.theta > 0 && isfinite(c->rope.theta)) ||
        (c->rope.type != ROPE_DEFAULT && !(c->rope.factor > 0 && isfinite(c->rope.factor))))
        return vt_error(VLLM_ERR_FORMAT, "config.json: rope_theta and the rope scaling factor must be positive");
    if (c->num_heads % c->num_kv_heads)
        return vt_error(VLLM_ERR_FORMAT, "config.json: num_attention_heads %d not a multiple of num_key_value_heads %d",
                        c->num_heads, c->num_kv_heads);

    vllm_status st;
    int64_t V = c->vocab_size, D = c->hidden_size;
    int64_t se[2] = {V, D}, sD[1] = {D};
    tensor t_embed, t_norm, t_head;
    if ((st = ws_get(ws, "model.embed_tokens.weight", 2, se, &t_embed)) ||
        (st = ws_get(ws, "model.norm.weight", 1, sD, &t_norm)))
        return st;
    if (!c->tie_word_embeddings && (st = ws_get(ws, "lm_head.weight", 2, se, &t_head))) return st;
    if ((st = import(m, &t_embed, &lm->embed)) || (st = import(m, &t_norm, &lm->final_norm))) return st;
    const tensor *head_w[1] = {c->tie_word_embeddings ? &t_embed : &t_head};
    if ((st = be->ops->linear_create(be, head_w, NULL, 1, &lm->lm_head))) return st;
    if (be->import_copies) ws_release_copied(ws); /* the device has them */

    progress pr;
    progress_start(&pr, "loading weights", c->num_layers);
    for (int l = 0; l < c->num_layers; l++) {
        if ((st = build_layer(m, ws, l, &lm->layers[l], qkv_bias, o_bias))) return st;
        if (be->import_copies) ws_release_copied(ws);
        progress_update(&pr, l + 1);
    }

    /* RoPE table (max_pos, rot_dim), computed on the host once */
    lm->rot_dim = (int)(c->head_dim * c->rope.partial_rotary_factor);
    if (lm->rot_dim < 2 || lm->rot_dim % 2 || lm->rot_dim > c->head_dim) /* hf_config refuses these */
        return vt_error(VLLM_ERR_UNSUPPORTED, "config.json: rotary dimension %d (head_dim %d x partial_rotary_factor %g) "
                        "must be even, at least 2 and at most head_dim", lm->rot_dim, c->head_dim,
                        c->rope.partial_rotary_factor);
    size_t n = (size_t)m->max_pos * (size_t)lm->rot_dim;
    float *table = malloc(n * sizeof *table);
    if (!table) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (RoPE table)");
    rope_cos_sin_table(&c->rope, lm->rot_dim, m->max_pos, table);
    lm->cos_sin = tensor_2d(DTYPE_F32, NULL, m->max_pos, lm->rot_dim);
    st = be->ops->alloc(be, &lm->cos_sin);
    if (st == VLLM_OK) st = be->ops->upload(be, &lm->cos_sin, table, n * sizeof *table);
    free(table);
    return st;
}

static vllm_status build_llama(model *m, weight_source *ws) {
    return llama_build_common(m, ws, m->cfg.attention_bias, m->cfg.attention_bias);
}
static vllm_status build_mistral(model *m, weight_source *ws) { return llama_build_common(m, ws, false, false); }
static vllm_status build_qwen2(model *m, weight_source *ws) { return llama_build_common(m, ws, true, false); }
static vllm_status build_qwen3(model *m, weight_source *ws) {
    return llama_build_common(m, ws, m->cfg.attention_bias, m->cfg.attention_bias);
}

/* Views of the step's activations, T rows (N for the logits rows). */
typedef struct llama_bufs {
    tensor x, h, qkv, attn, o, gu, a, sel, lg;
} llama_bufs;

static vllm_status llama_buffers(model *m, int64_t T, int64_t N, llama_bufs *t) {
    llama *lm = m->impl;
    const model_config *c = &m->cfg;
    backend *be = m->be;
    int64_t D = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->num_heads * hd, kvd = (int64_t)c->num_kv_heads * hd;
    dtype act = be->act_dtype;
    vllm_status st;
    if ((st = model_buf_ensure(m, &lm->x, act, T, D, &t->x)) || (st = model_buf_ensure(m, &lm->h, act, T, D, &t->h)) ||
        (st = model_buf_ensure(m, &lm->qkv, act, T, qd + 2 * kvd, &t->qkv)) ||
        (st = model_buf_ensure(m, &lm->attn, act, T, qd, &t->attn)) ||
        (st = model_buf_ensure(m, &lm->o, act, T, D, &t->o)) ||
        (st = model_buf_ensure(m, &lm->gu, act, T, 2 * I, &t->gu)) ||
        (st = model_buf_ensure(m, &lm->act, act, T, I, &t->a)) ||
        (st = model_buf_ensure(m, &lm->sel, act, N, D, &t->sel)) ||
        (st = model_buf_ensure(m, &lm->logits, DTYPE_F32, N, c->vocab_size, &t->lg)))
        return st;
    return VLLM_OK;
}

static vllm_status llama_reserve(model *m, int64_t max_tokens, int64_t max_logits) {
    llama_bufs t;
    return llama_buffers(m, max_tokens, max_logits, &t);
}

static vllm_status llama_logits(model *m, int n, const tensor **logits) {
    llama *lm = m->impl;
    lm->logits_view = tensor_2d(DTYPE_F32, lm->logits.t.data, n, m->cfg.vocab_size);
    *logits = &lm->logits_view;
    return VLLM_OK;
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
    if ((st = llama_buffers(m, T, N, &t))) return st;
    tensor x = t.x, h = t.h, qkv = t.qkv, attn = t.attn, o = t.o, gu = t.gu, a = t.a, sel = t.sel, lg = t.lg;

    attn_params ap = {
        .scale = 1.0f / sqrtf((float)hd),
        .sliding_window = c->sliding_window,
        .num_heads = c->num_heads,
        .num_kv_heads = c->num_kv_heads,
        .head_dim = (int)hd,
    };
    tensor q = tensor_cols(&qkv, 0, qd);          /* (T, nh*hd) strided */
    tensor k = tensor_cols(&qkv, qd, kvd);        /* (T, nkv*hd) strided */
    tensor v = tensor_cols(&qkv, qd + kvd, kvd);  /* (T, nkv*hd) strided */

    /* x is the residual stream; each linear_fused (backend.h) carries its
     * neighbours: the input norm, the SiLU-gated product, the residual add */
    ops->embedding(be, &lm->embed, &s->ids, &x);                    /* x (T, D) */
    const linear_fuse add_to_x = {.accumulate = true, .mid = &o};
    for (int l = 0; l < c->num_layers; l++) {
        llama_layer *L = &lm->layers[l];
        const linear_fuse attn_in = {.norm_w = &L->in_norm, .eps = eps, .h = &h};
        ops->linear_fused(be, L->qkv, &x, &attn_in, &qkv);           /* norm(x) -> (T, qd + 2 kvd) */
        /* per-head q/k norm (Qwen3), rope, k/v into the paged cache */
        ops->qk_norm_rope_kv(be, &q, &k, &v, c->qk_norm ? &L->q_norm : NULL, c->qk_norm ? &L->k_norm : NULL, eps,
                             &s->positions, &lm->cos_sin, (int)hd, lm->rot_dim, true, &cache->k[l], &cache->v[l],
                             &s->meta);
        ops->attention(be, &q, &cache->k[l], &cache->v[l], &s->meta, &ap, &attn); /* (T, qd) */
        ops->linear_fused(be, L->o, &attn, &add_to_x, &x);            /* x += attn Wo */
        const linear_fuse mlp_in = {.norm_w = &L->post_norm, .eps = eps, .silu_mul = true, .h = &h, .mid = &gu};
        ops->linear_fused(be, L->gate_up, &x, &mlp_in, &a);          /* silu_mul(norm(x) Wgu) -> (T, I) */
        ops->linear_fused(be, L->down, &a, &add_to_x, &x);            /* x += a Wd */
    }
    /* logits only for the sampled rows: gather them, then the final norm and
     * lm_head (none when the step only advances partial prefills) */
    if (N > 0) {
        ops->gather_rows(be, &x, &s->logits_idx, &sel);               /* (N, D) */
        tensor hn = tensor_rows(&h, 0, N);
        const linear_fuse final = {.norm_w = &lm->final_norm, .eps = eps, .h = &hn};
        ops->linear_fused(be, lm->lm_head, &sel, &final, &lg);        /* (N, V) */
    }
    lm->logits_view = lg;
    *logits = &lm->logits_view;
    return VLLM_OK;
}

#define LLAMA_ARCH(var, arch_name, builder) \
    const model_arch var = {.name = arch_name, .build = builder, .reserve = llama_reserve, .run = llama_run,          \
                            .logits = llama_logits, .destroy = llama_destroy}

LLAMA_ARCH(llama_arch_llama, "LlamaForCausalLM", build_llama);
LLAMA_ARCH(llama_arch_mistral, "MistralForCausalLM", build_mistral);
LLAMA_ARCH(llama_arch_qwen2, "Qwen2ForCausalLM", build_qwen2);
LLAMA_ARCH(llama_arch_qwen3, "Qwen3ForCausalLM", build_qwen3);
