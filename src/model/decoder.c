/*
 * decoder.c: the dense decoder every dense family runs, driven by the model
 * config's spec (model/config.h): pre-norm layers of attention with GQA/MQA,
 * RoPE (one table per rope config: Gemma 3's local layers have their own),
 * optional per-head q/k norms and a gated MLP over the paged KV cache;
 * optionally "sandwich" norms around both blocks (Gemma 2/3), (1 + w) norms,
 * a scaled embedding, attention and final-logit softcaps.
 *
 *   x = embed(ids) [* sqrt(D)]                                   (T, D)
 *   per layer l:
 *     q, k, v = in_norm(x) Wqkv [+ b]; q, k = qk_norm(q, k); rope(q, k)
 *     a = attention(q, K_l, V_l)  (window, scale, softcap of layer l)
 *     llama:    x += a Wo;                 x += mlp(mlp_norm(x))
 *     sandwich: x += attn_out_norm(a Wo);  x += mlp_out_norm(mlp(mlp_norm(x)))
 *     mlp(h) = act(h Wg) * (h Wu) Wd
 *   logits = final_norm(x[sampled rows]) Wlm  [softcapped]       (N, V)
 *
 * Semantics follow transformers' modeling_llama / modeling_qwen2 /
 * modeling_qwen3 / modeling_mistral / modeling_gemma2 / modeling_gemma3 and
 * vLLM's model_executor/models/llama.py (fused qkv and gate_up projections).
 * The families' configs are parsed in arch_*.c; the registry (registry.c)
 * maps architectures[0] to them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "model/model_internal.h"
#include "model/rope.h"

typedef struct llama_layer {
    tensor in_norm, post_norm;   /* (D): the attention's input norm, the MLP's input norm */
    tensor attn_out_norm, mlp_out_norm; /* (D), sandwich norms only */
    tensor q_norm, k_norm;       /* (head_dim), qk_norm only */
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
    tensor cos_sin[MODEL_MAX_ROPES]; /* (max_pos, rot_dim) F32, one per rope config */
    float embed_scale;           /* sqrt(hidden_size) rounded to the activation dtype (embed_scale_sqrt) */
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
    char p[96];
    snprintf(p, sizeof p, "%slayers", c->weight_prefix);
    tensor t_in, t_post, wq, wk, wv, wo, wg, wu, wd, bq, bk, bv, bo, t;
    vllm_status st;
    int64_t sD[1] = {D}, sq[2] = {qd, D}, skv[2] = {kvd, D}, so[2] = {D, qd};
    int64_t si[2] = {I, D}, sdn[2] = {D, I}, sbq[1] = {qd}, sbk[1] = {kvd}, shd[1] = {hd};
    /* the MLP's input norm: Llama's post_attention_layernorm; with sandwich norms
     * post_attention_layernorm normalises the attention's output and
     * pre_feedforward_layernorm is the MLP's input norm (Gemma2DecoderLayer) */
    const char *mlp_in = c->sandwich_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm";
    if ((st = ws_getf(ws, &t_in, 1, sD, "%s.%d.input_layernorm.weight", p, l)) ||
        (st = ws_getf(ws, &t_post, 1, sD, "%s.%d.%s.weight", p, l, mlp_in)) ||
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
    if (c->sandwich_norms) {
        if ((st = ws_getf(ws, &t, 1, sD, "%s.%d.post_attention_layernorm.weight", p, l)) ||
            (st = import(m, &t, &L->attn_out_norm)) ||
            (st = ws_getf(ws, &t, 1, sD, "%s.%d.post_feedforward_layernorm.weight", p, l)) ||
            (st = import(m, &t, &L->mlp_out_norm)))
            return st;
    }
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
            if (L->attn_out_norm.data) be->ops->release_import(be, &L->attn_out_norm);
            if (L->mlp_out_norm.data) be->ops->release_import(be, &L->mlp_out_norm);
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
    for (int r = 0; r < MODEL_MAX_ROPES; r++)
        if (lm->cos_sin[r].data) be->ops->release(be, &lm->cos_sin[r]);
    ws_buf *bufs[] = {&lm->x, &lm->h, &lm->qkv, &lm->attn, &lm->o, &lm->gu, &lm->act, &lm->sel, &lm->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) model_buf_release(be, bufs[i]);
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

static vllm_status decoder_build(model *m, weight_source *ws) {
    bool qkv_bias = m->cfg.attention_bias, o_bias = m->cfg.o_bias;
    const model_config *c = &m->cfg;
    backend *be = m->be;
    vllm_status st;
    llama *lm = calloc(1, sizeof *lm);
    if (!lm) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    m->impl = lm;
    lm->layers = calloc((size_t)c->num_layers, sizeof *lm->layers);
    if (!lm->layers) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    if (c->head_dim % 2 || c->head_dim > 1024)
        return vt_error(VLLM_ERR_UNSUPPORTED, "config.json: head_dim %d not supported (even, <= 1024)", c->head_dim);
    for (int r = 0; r < c->num_ropes; r++)
        if (!(c->ropes[r].theta > 0 && isfinite(c->ropes[r].theta)) ||
            (c->ropes[r].type != ROPE_DEFAULT && !(c->ropes[r].factor > 0 && isfinite(c->ropes[r].factor))))
            return vt_error(VLLM_ERR_FORMAT, "config.json: rope_theta and the rope scaling factor must be positive");
    /* what the spec asks of the backend, refused up front with a clear error */
    const be_norm norm_probe = {.kind = c->norm == NORM_STYLE_RMS_OFFSET ? BE_NORM_RMS_OFFSET : BE_NORM_RMS};
    const be_act act = (be_act)c->act;
    const attn_params ap_probe = {.scale = 1, .num_heads = c->num_heads, .num_kv_heads = c->num_kv_heads,
                                  .head_dim = c->head_dim, .softcap = (float)c->attn_softcap};
    if ((st = backend_require(be, BE_OP_NORM, &norm_probe, c->architecture)) ||
        (st = backend_require(be, BE_OP_ADD_NORM, &norm_probe, c->architecture)) ||
        (st = backend_require(be, BE_OP_ACT_MUL, &act, c->architecture)) ||
        (st = backend_require(be, BE_OP_ATTENTION, &ap_probe, c->architecture)) ||
        (c->qk_norm && (st = backend_require(be, BE_OP_QK_NORM_ROPE_KV, &norm_probe, c->architecture))) ||
        (c->final_softcap > 0 && (st = backend_require(be, BE_OP_SOFTCAP, NULL, c->architecture))))
        return st;
    if (c->num_heads % c->num_kv_heads)
        return vt_error(VLLM_ERR_FORMAT, "config.json: num_attention_heads %d not a multiple of num_key_value_heads %d",
                        c->num_heads, c->num_kv_heads);

    int64_t V = c->vocab_size, D = c->hidden_size;
    int64_t se[2] = {V, D}, sD[1] = {D};
    tensor t_embed, t_norm, t_head;
    /* a multimodal checkpoint keeps the text model under its own prefix (transformers 5:
     * model.language_model., 4.x: language_model.model.); the rest of it is not loaded */
    static const char *const prefixes[] = {"model.language_model.", "language_model.model."};
    char name[96];
    snprintf(name, sizeof name, "%sembed_tokens.weight", m->cfg.weight_prefix);
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes && !ws_has(ws, name); i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (ws_has(ws, name)) {
            snprintf(m->cfg.weight_prefix, sizeof m->cfg.weight_prefix, "%s", prefixes[i]);
            LOG_I("%s: running the text model (%s*); the other weights of the checkpoint are not loaded",
                  c->architecture, prefixes[i]);
        }
    }
    if ((st = ws_getf(ws, &t_embed, 2, se, "%sembed_tokens.weight", c->weight_prefix)) ||
        (st = ws_getf(ws, &t_norm, 1, sD, "%snorm.weight", c->weight_prefix)))
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

    /* the RoPE tables (max_pos, rot_dim); every rope config rotates the same dimensions */
    lm->rot_dim = (int)(c->head_dim * c->rope.partial_rotary_factor);
    if (lm->rot_dim < 2 || lm->rot_dim % 2 || lm->rot_dim > c->head_dim) /* hf_config refuses these */
        return vt_error(VLLM_ERR_UNSUPPORTED, "config.json: rotary dimension %d (head_dim %d x partial_rotary_factor %g) "
                        "must be even, at least 2 and at most head_dim", lm->rot_dim, c->head_dim,
                        c->rope.partial_rotary_factor);
    for (int r = 0; r < c->num_ropes; r++)
        if ((st = rope_table(m, &c->ropes[r], lm->rot_dim, &lm->cos_sin[r]))) return st;
    /* Gemma: torch.tensor(hidden_size ** 0.5, dtype=the activations' dtype) */
    lm->embed_scale = sqrtf((float)c->hidden_size);
    if (be->act_dtype == DTYPE_BF16) lm->embed_scale = bf16_to_f32(f32_to_bf16(lm->embed_scale));
    if (be->act_dtype == DTYPE_F16) lm->embed_scale = f16_to_f32(f32_to_f16(lm->embed_scale));
    return VLLM_OK;
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

    const be_norm_kind nk = c->norm == NORM_STYLE_RMS_OFFSET ? BE_NORM_RMS_OFFSET : BE_NORM_RMS;
    const be_act act = (be_act)c->act;
    attn_params ap = {
        .scale = c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)hd),
        .num_heads = c->num_heads,
        .num_kv_heads = c->num_kv_heads,
        .head_dim = (int)hd,
        .softcap = (float)c->attn_softcap,
    };
    tensor q = tensor_cols(&qkv, 0, qd);          /* (T, nh*hd) strided */
    tensor k = tensor_cols(&qkv, qd, kvd);        /* (T, nkv*hd) strided */
    tensor v = tensor_cols(&qkv, qd + kvd, kvd);  /* (T, nkv*hd) strided */

    /* x is the residual stream; each linear_fused (backend.h) carries its
     * neighbours: the input norm, the gated product, the residual add */
    ops->embedding(be, &lm->embed, &s->ids, &x);                    /* x (T, D) */
    if (c->embed_scale_sqrt) ops->scale(be, &x, lm->embed_scale);   /* x *= sqrt(D) */
    const linear_fuse add_to_x = {.accumulate = true, .mid = &o};
    for (int l = 0; l < c->num_layers; l++) {
        llama_layer *L = &lm->layers[l];
        const layer_spec *ls = &c->layers[l];
        ap.sliding_window = ls->sliding_window;
        const linear_fuse attn_in = {.norm_w = &L->in_norm, .eps = eps, .h = &h, .norm_kind = nk};
        ops->linear_fused(be, L->qkv, &x, &attn_in, &qkv);           /* norm(x) -> (T, qd + 2 kvd) */
        /* per-head q/k norm, rope, k/v into the paged cache */
        if (nk == BE_NORM_RMS) {
            ops->qk_norm_rope_kv(be, &q, &k, &v, c->qk_norm ? &L->q_norm : NULL, c->qk_norm ? &L->k_norm : NULL, eps,
                                 &s->positions, &lm->cos_sin[ls->rope], (int)hd, lm->rot_dim, true, &cache->k[l],
                                 &cache->v[l], model_step_meta(s, l));
        } else {
            const be_norm qn = {.kind = nk, .w = &L->q_norm, .eps = eps}, kn = {.kind = nk, .w = &L->k_norm, .eps = eps};
            ops->qk_norm_rope_kv_ex(be, &q, &k, &v, c->qk_norm ? &qn : NULL, c->qk_norm ? &kn : NULL, &s->positions,
                                    &lm->cos_sin[ls->rope], (int)hd, lm->rot_dim, true, &cache->k[l], &cache->v[l],
                                    model_step_meta(s, l));
        }
        ops->attention(be, &q, &cache->k[l], &cache->v[l], model_step_meta(s, l), &ap, &attn); /* (T, qd) */
        if (!c->sandwich_norms) {
            ops->linear_fused(be, L->o, &attn, &add_to_x, &x);        /* x += attn Wo */
            const linear_fuse mlp_in = {.norm_w = &L->post_norm, .eps = eps, .silu_mul = true, .h = &h, .mid = &gu,
                                        .act = act, .norm_kind = nk};
            ops->linear_fused(be, L->gate_up, &x, &mlp_in, &a);      /* act_mul(norm(x) Wgu) -> (T, I) */
            ops->linear_fused(be, L->down, &a, &add_to_x, &x);        /* x += a Wd */
        } else {
            const be_norm attn_out = {.kind = nk, .w = &L->attn_out_norm, .eps = eps};
            const be_norm mlp_in = {.kind = nk, .w = &L->post_norm, .eps = eps};
            const be_norm mlp_out = {.kind = nk, .w = &L->mlp_out_norm, .eps = eps};
            ops->linear(be, L->o, &attn, &o);                         /* o = attn Wo (T, D) */
            ops->norm(be, &o, &attn_out, &o);                         /* o = attn_out_norm(o) */
            ops->add_norm(be, &x, &o, &mlp_in, &h);                   /* x += o; h = mlp_norm(x) */
            const linear_fuse gated = {.silu_mul = true, .mid = &gu, .act = act};
            ops->linear_fused(be, L->gate_up, &h, &gated, &a);       /* act(h Wg) * (h Wu) -> (T, I) */
            ops->linear(be, L->down, &a, &o);                         /* o = a Wd */
            ops->norm(be, &o, &mlp_out, &o);                          /* o = mlp_out_norm(o) */
            ops->add(be, &x, &o);                                     /* x += o */
        }
    }
    /* logits only for the sampled rows: gather them, then the final norm and
     * lm_head (none when the step only advances partial prefills) */
    if (N > 0) {
        ops->gather_rows(be, &x, &s->logits_idx, &sel);               /* (N, D) */
        tensor hn = tensor_rows(&h, 0, N);
        const linear_fuse final = {.norm_w = &lm->final_norm, .eps = eps, .h = &hn, .norm_kind = nk};
        ops->linear_fused(be, lm->lm_head, &sel, &final, &lg);        /* (N, V) */
        if (c->final_softcap > 0) ops->softcap(be, &lg, (float)c->final_softcap); /* tanh(lg / cap) * cap */
    }
    lm->logits_view = lg;
    *logits = &lm->logits_view;
    return VLLM_OK;
}

/* Every dense family runs this decoder; registry.c names them. */
const model_arch decoder_arch = {.name = "decoder", .build = decoder_build, .reserve = llama_reserve, .run = llama_run,
                                 .logits = llama_logits, .destroy = llama_destroy};
