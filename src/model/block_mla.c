/*
 * block_mla.c: multi-head latent attention (DeepSeek-V2 / V3; model/blocks.h) in vLLM's absorbed form
 * (vllm/v1/attention/backends/mla/common.py, model_executor/models/deepseek_v2.py), with H heads,
 * L = kv_lora_rank, R = qk_rope_head_dim, N = qk_nope_head_dim, V = v_head_dim:
 *
 *   a = in_norm(x) [W_qa | W_kva]^T                  (T, q_lora + L + R)   (or [W_q | W_kva] without q_lora)
 *   q = q_a_layernorm(a_q) W_qb^T                    (T, H (N + R)), rows regrouped at load into
 *                                                    [every head's q_nope | every head's q_rope]
 *   c = kv_a_layernorm(a_c), k_rope = a_kr           the latent (L) and the shared rotary key (R)
 *   rope(q_rope, k_rope)                             interleaved pairs (transformers' apply_rotary_emb /
 *                                                    apply_rotary_pos_emb_interleave; vLLM is_neox_style=False)
 *   [c ; k_rope] -> cache                            (the norm, the rope and this write: one mla_prep op)
 *   q_lat_h = W_UK_h^T q_nope_h                      (T, H L)      head_linear
 *   o_lat = attention_mla(q_lat, q_rope, [c ; k_rope] -> cache)    (T, H L)
 *   out_h = W_UV_h o_lat_h                           (T, H V)      head_linear; o_proj is the decoder's
 *
 * kv_b_proj (H (N + V), L) holds per head N key rows then V value rows (transformers' view(..., -1, N + V)
 * then split [N, V]): W_UK_h = rows h (N + V) .. + N, W_UV_h = the next V rows; W_UK_h is stored transposed.
 * The cache keeps only [c ; k_rope] per token (L + R values), equal to transformers' decompressed attention
 * (k_h = [W_UK_h c ; k_rope], v_h = W_UV_h c) up to rounding.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/blocks.h"
#include "tensor/fp8.h"
#include "tensor/ggml_dtype.h"
#include "tensor/ggml_quant.h"
#include "tensor/int4.h"

static bool has_mla(const model_config *c) {
    for (int l = 0; l < c->num_layers; l++)
        if (c->layers[l].kind == LAYER_MLA) return true;
    return false;
}

static bool float_dtype(dtype dt) { return dt == DTYPE_F32 || dt == DTYPE_BF16 || dt == DTYPE_F16; }

/* The q projection (q_proj or q_b_proj, (H (N + R), in)) with rows regrouped as [every head's nope | every
 * head's rope], into a host copy *host (a view for dummy weights, whose values are random anyway). */
static vllm_status regroup_q(const weight_source *ws, const model_config *c, const tensor *w, void **host, tensor *out) {
    const int64_t H = c->num_heads, N = c->mla.qk_nope_head_dim, R = c->mla.qk_rope_head_dim, in = w->shape[1];
    if (ws_is_dummy(ws)) {
        *out = *w;
        return VLLM_OK;
    }
    /* whole rows (a block dtype's rows carry their own scales): dtype_size is a block's bytes for those */
    const int64_t per = dtype_block(w->dtype) > 0 ? dtype_block(w->dtype) : 1;
    if (in % per)
        return vt_error(VLLM_ERR_FORMAT, "%s: the q projection's %lld columns are not whole %s blocks",
                        c->architecture, (long long)in, dtype_name(w->dtype));
    const size_t row = (size_t)(in / per) * dtype_size(w->dtype);
    unsigned char *d = malloc((size_t)(H * (N + R)) * row);
    if (!d) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (MLA q rows)");
    const unsigned char *s = w->data;
    for (int64_t r = 0; r < H * (N + R); r++) {
        const int64_t src = r < H * N ? r / N * (N + R) + r % N : (r - H * N) / R * (N + R) + N + (r - H * N) % R;
        memcpy(d + (size_t)r * row, s + (size_t)src * row, row);
    }
    *host = d;
    *out = tensor_2d(w->dtype, d, H * (N + R), in);
    return VLLM_OK;
}

/* A block-scaled FP8 kv_b_proj (FP8_B128 rows: DeepSeek-V3 / R1 / Kimi-K2's checkpoints), a 4-bit one (I4_B128: AWQ /
 * GPTQ checkpoints) or one in ggml blocks (an older GGUF file's attn_kv_b), as a host copy of its values
 * in dt (the activation dtype: the absorptions then run as for a BF16 checkpoint), as vLLM dequantizes it before
 * splitting W_UK / W_UV (MLACommonImpl.process_weights_after_loading: get_and_maybe_dequant_weights). */
static vllm_status dequant_kv_b(const tensor *w, dtype dt, void **host, tensor *out) {
    const int64_t rows = w->shape[0], K = w->shape[1];
    ggml_type gt = GGML_TYPE_COUNT;
    const bool ggml = dtype_to_ggml(w->dtype, &gt) && dtype_is_block(w->dtype), i4 = w->dtype == DTYPE_I4_B128;
    if (!ggml && !i4 && w->dtype != DTYPE_FP8_B128)
        return vt_error(VLLM_ERR_UNSUPPORTED, "kv_b_proj: %s is not supported", dtype_name(w->dtype));
    if (!ggml && K % (i4 ? I4_B : FP8_B))
        return vt_error(VLLM_ERR_FORMAT, "kv_b_proj: %lld columns are not whole %s blocks", (long long)K,
                        dtype_name(w->dtype));
    const size_t grow = ggml ? gq_row_bytes(gt, K) : 0;
    if (ggml && !grow)
        return vt_error(VLLM_ERR_FORMAT, "kv_b_proj: %lld columns are not whole %s blocks", (long long)K,
                        dtype_name(w->dtype));
    float *row = malloc((size_t)K * sizeof *row);
    unsigned char *d = malloc((size_t)(rows * K) * (dt == DTYPE_BF16 ? 2 : 4));
    if (!row || !d) {
        free(row);
        free(d);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (MLA kv_b_proj, dequantized)");
    }
    const fp8_block *b = w->data;
    for (int64_t r = 0; r < rows; r++) {
        if (ggml) (void)gq_dequantize_row(gt, (const uint8_t *)w->data + (size_t)r * grow, row, K); /* (K checked) */
        else if (i4) i4_dequantize_row((const i4_block *)w->data + r * (K / I4_B), K, row);
        else fp8_dequantize_row(b + r * (K / FP8_B), row, K);
        for (int64_t k = 0; k < K; k++) {
            if (dt == DTYPE_BF16) ((uint16_t *)d)[r * K + k] = f32_to_bf16(row[k]);
            else ((float *)d)[r * K + k] = row[k];
        }
    }
    free(row);
    *host = d;
    *out = tensor_2d(dt == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32, d, rows, K);
    return VLLM_OK;
}

/* *t as a host copy in the backend's activation dtype (into *host) when it is in another float dtype. */
static vllm_status to_act_dtype(const model *m, tensor *t, void **host) {
    const dtype act = m->be->act_dtype;
    if (t->dtype == act || (act != DTYPE_BF16 && act != DTYPE_F16 && act != DTYPE_F32)) return VLLM_OK;
    const int64_t n = tensor_numel(t);
    void *d = malloc((size_t)n * dtype_size(act));
    if (!d) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (MLA weights)");
    for (int64_t i = 0; i < n; i++) {
        const float x = t->dtype == DTYPE_F32    ? ((const float *)t->data)[i]
                        : t->dtype == DTYPE_BF16 ? bf16_to_f32(((const uint16_t *)t->data)[i])
                                                 : f16_to_f32(((const uint16_t *)t->data)[i]);
        if (act == DTYPE_BF16) ((uint16_t *)d)[i] = f32_to_bf16(x);
        else if (act == DTYPE_F16) ((uint16_t *)d)[i] = f32_to_f16(x);
        else ((float *)d)[i] = x;
    }
    *host = d;
    *t = tensor_make(act, d, t->ndim, t->shape);
    return VLLM_OK;
}

/* W_UK^T (H, L, N) and W_UV (H, V, L) from kv_b_proj (H (N + V), L). */
static vllm_status split_kv_b(const weight_source *ws, const model_config *c, const tensor *kvb, void **host_uk,
                              void **host_uv, tensor *uk_t, tensor *uv) {
    const int64_t H = c->num_heads, N = c->mla.qk_nope_head_dim, V = c->mla.v_head_dim, L = c->mla.kv_lora_rank;
    const int64_t s_uk[3] = {H, L, N}, s_uv[3] = {H, V, L};
    if (ws_is_dummy(ws)) { /* random values: views of the right sizes (H L N and H V L <= H (N + V) L) */
        *uk_t = tensor_make(kvb->dtype, kvb->data, 3, s_uk);
        *uv = tensor_make(kvb->dtype, kvb->data, 3, s_uv);
        return VLLM_OK;
    }
    const size_t es = dtype_size(kvb->dtype);
    unsigned char *a = malloc((size_t)(H * L * N) * es), *b = malloc((size_t)(H * V * L) * es);
    if (!a || !b) {
        free(a);
        free(b);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (MLA kv_b_proj)");
    }
    const unsigned char *s = kvb->data;
    for (int64_t h = 0; h < H; h++) {
        for (int64_t n = 0; n < N; n++)     /* key row n of head h -> column n of W_UK_h^T */
            for (int64_t l = 0; l < L; l++)
                memcpy(a + (size_t)((h * L + l) * N + n) * es, s + (size_t)((h * (N + V) + n) * L + l) * es, es);
        memcpy(b + (size_t)(h * V * L) * es, s + (size_t)((h * (N + V) + N) * L) * es, (size_t)(V * L) * es);
    }
    *host_uk = a;
    *host_uv = b;
    *uk_t = tensor_make(kvb->dtype, a, 3, s_uk);
    *uv = tensor_make(kvb->dtype, b, 3, s_uv);
    return VLLM_OK;
}

vllm_status mla_block_load(model *m, weight_source *ws, int l, mla_block *b) {
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden_size, H = c->num_heads, N = c->mla.qk_nope_head_dim, R = c->mla.qk_rope_head_dim,
                  V = c->mla.v_head_dim, L = c->mla.kv_lora_rank, QL = c->mla.q_lora_rank;
    vllm_status st;
    /* the backend's limits (the CUDA kernels' L + R and shared memory) refused here, at load */
    const mla_params mp = {.num_heads = (int)H, .kv_lora_rank = (int)L, .rope_dim = (int)R,
                           .scale = (float)c->attn_scale};
    char what[96];
    snprintf(what, sizeof what, "%s's multi-head latent attention", c->architecture);
    if ((st = backend_require(m->be, BE_OP_MLA, &mp, what))) return st;
    tensor q, kva, qb, kvb, qr, uk, uv;
    const int64_t s_kva[2] = {L + R, D}, s_kvb[2] = {H * (N + V), L}, s_uk[3] = {H, L, N}, s_uv[3] = {H, V, L};
    if ((st = blk_get(ws, c, l, "self_attn.kv_a_proj_with_mqa", "weight", 2, s_kva, &kva)) ||
        (st = blk_load_norm(m, ws, l, "self_attn.kv_a_layernorm", L, &b->kv_a_norm)))
        return st;
    char split[160];
    snprintf(split, sizeof split, "%slayers.%d.self_attn.k_b_proj.weight", c->weight_prefix, l);
    if (!ws_is_dummy(ws) && ws_has(ws, split)) {
        /* kv_b_proj already split as W_UK^T and W_UV (a GGUF file's attn_k_b / attn_v_b: llama.cpp's converter) */
        if ((st = blk_get(ws, c, l, "self_attn.k_b_proj", "weight", 3, s_uk, &uk)) ||
            (st = blk_get(ws, c, l, "self_attn.v_b_proj", "weight", 3, s_uv, &uv)))
            return st;
        if (!float_dtype(uk.dtype) || !float_dtype(uv.dtype))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: layer %d's self_attn.k_b_proj / v_b_proj are %s / %s: MLA needs "
                            "them in F32 / F16 / BF16", c->architecture, l, dtype_name(uk.dtype), dtype_name(uv.dtype));
        /* in the activations' dtype, as a split kv_b_proj of an FP8 checkpoint (quantized ones come as F32 copies) */
        if ((st = to_act_dtype(m, &uk, &b->host[1])) || (st = to_act_dtype(m, &uv, &b->host[2]))) return st;
    } else {
        if ((st = blk_get(ws, c, l, "self_attn.kv_b_proj", "weight", 2, s_kvb, &kvb))) return st;
        void *kvb_deq = NULL; /* an FP8 kv_b_proj's values, freed once split */
        if (dtype_is_block(kvb.dtype)) { /* FP8, int4, or a GGUF file's ggml blocks */
            tensor d;
            if ((st = dequant_kv_b(&kvb, m->be->act_dtype, &kvb_deq, &d))) return st;
            kvb = d;
        } else if (!float_dtype(kvb.dtype)) {
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: layer %d's self_attn.kv_b_proj is %s: MLA needs it in F32 / "
                            "F16 / BF16 or block FP8", c->architecture, l, dtype_name(kvb.dtype));
        }
        st = split_kv_b(ws, c, &kvb, &b->host[1], &b->host[2], &uk, &uv);
        free(kvb_deq);
        if (st) return st;
    }
    if ((st = blk_import(m, &uk, &b->w_uk_t)) || (st = blk_import(m, &uv, &b->w_uv))) return st;
    if (QL > 0) {
        const int64_t s_qa[2] = {QL, D}, s_qb[2] = {H * (N + R), QL};
        if ((st = blk_get(ws, c, l, "self_attn.q_a_proj", "weight", 2, s_qa, &q)) ||
            (st = blk_get(ws, c, l, "self_attn.q_b_proj", "weight", 2, s_qb, &qb)) ||
            (st = blk_load_norm(m, ws, l, "self_attn.q_a_layernorm", QL, &b->q_a_norm)) ||
            (st = regroup_q(ws, c, &qb, &b->host[0], &qr)))
            return st;
        const tensor *wb[1] = {&qr};
        if ((st = m->be->ops->linear_create(m->be, wb, NULL, 1, &b->q_b))) return st;
    } else {
        const int64_t s_q[2] = {H * (N + R), D};
        if ((st = blk_get(ws, c, l, "self_attn.q_proj", "weight", 2, s_q, &qb)) ||
            (st = regroup_q(ws, c, &qb, &b->host[0], &q)))
            return st;
    }
    const tensor *wa[2] = {&q, &kva};
    if ((st = m->be->ops->linear_create(m->be, wa, NULL, 2, &b->a))) return st;
    if (m->be->import_copies) /* the device has its own copies */
        for (int i = 0; i < 3; i++) {
            free(b->host[i]);
            b->host[i] = NULL;
        }
    return VLLM_OK;
}

void mla_block_free(backend *be, mla_block *b) {
    if (b->a) be->ops->linear_free(be, b->a);
    if (b->q_b) be->ops->linear_free(be, b->q_b);
    blk_release_norm(be, &b->q_a_norm);
    blk_release_norm(be, &b->kv_a_norm);
    if (b->w_uk_t.data) be->ops->release_import(be, &b->w_uk_t);
    if (b->w_uv.data) be->ops->release_import(be, &b->w_uv);
    for (int i = 0; i < 3; i++) free(b->host[i]);
    memset(b, 0, sizeof *b);
}

vllm_status mla_bufs_ensure(model *m, mla_bufs *mb, int64_t T) {
    const model_config *c = &m->cfg;
    if (!has_mla(c)) return VLLM_OK;
    const dtype act = m->be->act_dtype;
    const int64_t H = c->num_heads, N = c->mla.qk_nope_head_dim, R = c->mla.qk_rope_head_dim, V = c->mla.v_head_dim,
                  L = c->mla.kv_lora_rank, QL = c->mla.q_lora_rank, Wq = QL > 0 ? QL : H * (N + R);
    tensor t;
    vllm_status st;
    if ((st = model_buf_ensure(m, &mb->a, act, T, Wq + L + R, &t)) ||
        (QL > 0 && ((st = model_buf_ensure(m, &mb->qh, act, T, QL, &t)) ||
                    (st = model_buf_ensure(m, &mb->q, act, T, H * (N + R), &t)))) ||
        (st = model_buf_ensure(m, &mb->qlat, act, T, H * L, &t)) ||
        (st = model_buf_ensure(m, &mb->olat, act, T, H * L, &t)) ||
        (st = model_buf_ensure(m, &mb->out, act, T, H * V, &t)) ||
        (c->shared_experts_size > 0 && (st = model_buf_ensure(m, &mb->so, act, T, c->hidden_size, &t))))
        return st;
    return VLLM_OK;
}

void mla_bufs_release(backend *be, mla_bufs *mb) {
    ws_buf *bufs[] = {&mb->a, &mb->qh, &mb->q, &mb->qlat, &mb->olat, &mb->out, &mb->so};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) model_buf_release(be, bufs[i]);
}

void mla_block_run(model *m, const mla_block *b, mla_bufs *mb, const tensor *x, const dec_norm *in_norm, tensor *h,
                   tensor *cache, const attn_meta *meta, const tensor *positions, const tensor *cos_sin,
                   tensor *out) {
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *ops = be->ops;
    const int64_t T = x->shape[0], H = c->num_heads, N = c->mla.qk_nope_head_dim, R = c->mla.qk_rope_head_dim,
                  L = c->mla.kv_lora_rank, QL = c->mla.q_lora_rank, Wq = QL > 0 ? QL : H * (N + R);
    const float eps = (float)c->rms_norm_eps;
    tensor a = tensor_rows(&mb->a.t, 0, T), qlat = tensor_rows(&mb->qlat.t, 0, T), olat = tensor_rows(&mb->olat.t, 0, T);
    *out = tensor_rows(&mb->out.t, 0, T);
    const linear_fuse in = {.norm_w = &in_norm->w, .eps = eps, .h = h, .norm_kind = blk_norm_kind(c)};
    ops->linear_fused(be, b->a, x, &in, &a);                          /* (T, Wq + L + R) */
    tensor q = tensor_cols(&a, 0, Wq);                                  /* (T, H (N + R)) without q_lora */
    if (QL > 0) {                                                       /* q = q_b(q_a_layernorm(a_q)) */
        tensor qh = tensor_rows(&mb->qh.t, 0, T), qa = q;
        q = tensor_rows(&mb->q.t, 0, T);
        const linear_fuse qn = {.norm_w = &b->q_a_norm.w, .eps = eps, .h = &qh, .norm_kind = BE_NORM_RMS};
        ops->linear_fused(be, b->q_b, &qa, &qn, &q);                    /* (T, H (N + R)) */
    }
    tensor kv = tensor_cols(&a, Wq, L + R);                             /* [c ; k_rope] (T, L + R) */
    tensor cl = tensor_cols(&kv, 0, L), k_rope = tensor_cols(&kv, L, R);
    tensor q_nope = tensor_cols(&q, 0, H * N), q_rope = tensor_cols(&q, H * N, H * R);
    const bool neox = !c->rope_interleaved;
    const tensor *kv_in = &kv;                                          /* attention_mla writes it to the cache */
    if (ops->mla_prep) {                  /* c = kv_a_layernorm(c), rope(q_rope, k_rope), the cache write: one op */
        ops->mla_prep(be, &q_rope, &kv, &b->kv_a_norm.w, eps, positions, cos_sin, (int)R, neox, cache, meta);
        kv_in = NULL;
    } else {
        const be_norm kvn = {.kind = BE_NORM_RMS, .w = &b->kv_a_norm.w, .eps = eps};
        ops->norm(be, &cl, &kvn, &cl);                                  /* c = kv_a_layernorm(c), in place */
        ops->rope(be, &q_rope, &k_rope, positions, cos_sin, (int)R, (int)R, neox);
    }
    ops->head_linear(be, &q_nope, &b->w_uk_t, &qlat);                   /* q_lat_h = W_UK_h^T q_nope_h */
    const mla_params mp = {.num_heads = (int)H, .kv_lora_rank = (int)L, .rope_dim = (int)R,
                           .scale = (float)c->attn_scale};
    ops->attention_mla(be, &qlat, &q_rope, kv_in, cache, meta, &mp, &olat); /* (T, H L) */
    ops->head_linear(be, &olat, &b->w_uv, out);                         /* out_h = W_UV_h o_lat_h (T, H V) */
}
