/*
 * block_moe.c: the mixture-of-experts block (model/blocks.h), as transformers'
 * Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock:
 *
 *   logits = h W_router^T                        (T, E)
 *   ids, w = top k of softmax(logits) [/ sum]    (T, k)   (moe_route, on the device; DeepSeek's
 *            grouped softmax / sigmoid + correction-bias routings as model_config.moe.scoring says)
 *   o = sum_j w_j * down_e(act(gate_e h) * up_e h)         (moe_experts)
 *   o += sigmoid(h . g) * shared(h)              (Qwen2-MoE's shared expert)
 *
 * DeepSeek's plain shared experts (transformers' DeepseekV2MoE / DeepseekV3MoE: moe(...) +
 * shared_experts(residuals), an MLP of n_shared x moe_intermediate_size, no gate of its own) ride in the
 * expert op: down(act(gate h) * up h) over Is = n I splits exactly over the intermediate dimension, so it
 * is the sum of n experts of size I (rows [j I, (j + 1) I) of gate and up, columns [j I, (j + 1) I) of
 * down), loaded as experts E .. E + n - 1 of the same be_experts and always chosen with weight 1
 * (moe_params.num_shared). Qwen2-MoE's gated shared expert (Qwen3.5-MoE, Qwen3-Next: sigmoid(h . g) *
 * shared(h)) rides the same way with weight sigmoid(h . g) (moe_params.shared_gate: the route reads its
 * gate's logit from the router's output column E, gate_in_router), where Is = n I and the model runs on one
 * device: its GEMVs, the sigmoid gate and the add leave the layer. Where that cannot be (Is not a multiple
 * of I, the backend's limits, shared tensors of another dtype than the experts', a gate that cannot ride in
 * the router) the decoder runs them apart as before.
 *
 * gpt-oss (GptOssMLP): the router has a bias, each expert biases on gate, up and down and the clamped
 * SwiGLU (BE_ACT_SWIGLU_OAI). Its fused tensors are rearranged on the host into experts_create's
 * per-expert (I, D) / (D, I) matrices: transformers 5's gate_up_proj (E, D, 2I) transposed with gate and
 * up de-interleaved (gate = [..., ::2], up = [..., 1::2]) and down_proj (E, I, D) transposed; the
 * original MXFP4 blocks / scales are (E, 2I, D) / (E, D, I) before transformers' transpose
 * (convert_moe_packed_tensors returns out.transpose(1, 2)), so their rows dequantize straight into place.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/blocks.h"
#include "model/mxfp4.h"
#include "tensor/dummy.h"

bool blk_has_moe(const model_config *c) {
    for (int l = 0; l < c->num_layers; l++)
        if (c->layers[l].mlp == MLP_MOE) return true;
    return false;
}

/* The config's routing; score_bias stays NULL (each layer's own: moe_block_run sets it), num_shared 0
 * (likewise). */
moe_params blk_moe_params(const model_config *c) {
    return (moe_params){.num_experts = c->moe.num_experts, .top_k = c->moe.top_k,
                        .scoring = (be_moe_scoring)c->moe.scoring, .renormalize = c->moe.renormalize,
                        .act = (be_act)c->act, .swiglu_alpha = (float)c->moe.swiglu_alpha,
                        .swiglu_limit = (float)c->moe.swiglu_limit, .bias = c->moe.expert_bias,
                        .num_groups = c->moe.num_groups, .topk_groups = c->moe.topk_groups,
                        .routed_scaling = (float)c->moe.routed_scaling};
}

int blk_moe_shared(const model *m) {
    const model_config *c = &m->cfg;
    /* DeepSeek's plain shared experts, or Qwen2-MoE's gated shared expert (one device, no router bias: its gate's
     * logit rides as the router's last column, moe_block_load's gate_in_router) */
    const bool gated = c->moe.shared_intermediate_size > 0;
    const int64_t Is = gated ? c->moe.shared_intermediate_size : c->shared_experts_size, I = c->moe.intermediate_size;
    if (Is <= 0 || I <= 0 || Is % I || !blk_has_moe(c)) return 0;
    /* VLLM_MOE_SHARED_APART=1 keeps the gated one apart (a measurement switch) */
    const char *apart = getenv("VLLM_MOE_SHARED_APART");
    if (gated && (m->tp_size > 1 || c->moe.router_bias || (apart && !strcmp(apart, "1")))) return 0;
    moe_params mp = blk_moe_params(c);
    mp.num_shared = (int)(Is / I);
    mp.shared_gate = gated;
    return backend_supports(m->be, BE_OP_MOE, &mp) != BE_UNSUPPORTED ? mp.num_shared : 0;
}

/* ws_get_as with a printf-style name */
static vllm_status VT_PRINTF(6, 7) getf_as(weight_source *ws, tensor *out, dtype dt, int ndim, const int64_t *shape,
                                           const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ws_get_as(ws, name, dt, ndim, shape, out);
}

/* dst row r (cols elements of es bytes) of a (rows, cols) matrix = column r of src (cols, ld) read with a
 * column stride of cstride elements from column c0: dst[r][j] = src[j][c0 + r * cstride], in tiles */
#define TRANSPOSE_TILED(T)                                                                                 \
    do {                                                                                                   \
        T *d_ = (T *)(void *)dst;                                                                          \
        const T *s_ = (const T *)(const void *)src;                                                        \
        for (int64_t r0 = 0; r0 < rows; r0 += TILE)                                                        \
            for (int64_t j0 = 0; j0 < cols; j0 += TILE) {                                                  \
                const int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows, j1 = j0 + TILE < cols ? j0 + TILE : cols; \
                for (int64_t r = r0; r < r1; r++) {                                                        \
                    T *dr = d_ + r * cols;                                                                 \
                    const T *sr = s_ + c0 + r * cstride;                                                   \
                    for (int64_t j = j0; j < j1; j++) dr[j] = sr[j * ld];                                  \
                }                                                                                          \
            }                                                                                              \
    } while (0)

static void transpose_cols(unsigned char *dst, const unsigned char *src, int64_t rows, int64_t cols, int64_t ld,
                           int64_t c0, int64_t cstride, size_t es) {
    enum { TILE = 32 }; /* a tile's source lines stay in L1 while its rows are written */
    const bool aligned = ((uintptr_t)dst | (uintptr_t)src) % es == 0;
    if (es == 2 && aligned) { /* BF16 / F16: typed copies (a memcpy call per element took 4 s per gpt-oss-20b layer) */
        TRANSPOSE_TILED(uint16_t);
    } else if (es == 4 && aligned) {
        TRANSPOSE_TILED(uint32_t);
    } else {
        for (int64_t j = 0; j < cols; j++)
            for (int64_t r = 0; r < rows; r++)
                memcpy(dst + ((size_t)r * (size_t)cols + (size_t)j) * es,
                       src + ((size_t)j * (size_t)ld + (size_t)(c0 + r * cstride)) * es, es);
    }
}
#undef TRANSPOSE_TILED

/* gpt-oss's experts of layer l as a GGUF file holds them (ggc_find: llama.cpp's ffn_{gate,up,down}_exps and their
 * biases, one expert a slice, gate and up already apart; MXFP4 read as BF16): t and b as gptoss_experts'. */
static vllm_status gptoss_split_experts(const model_config *c, weight_source *ws, const char *pre, tensor *t,
                                        tensor *b) {
    const int E = c->moe.num_experts;
    const int64_t D = c->hidden_size, I = c->moe.intermediate_size;
    const int64_t sgu[2] = {I, D}, sdn[2] = {D, I};
    static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    vllm_status st;
    for (int e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            const int64_t nb = p < 2 ? I : D;
            if ((st = ws_getf(ws, &t[p * E + e], 2, p < 2 ? sgu : sdn, "%s%d.%s.weight", pre, e, proj[p])) ||
                (st = ws_getf(ws, &b[p * E + e], 1, &nb, "%s%d.%s.bias", pre, e, proj[p])))
                return st;
            /* gate and up in one dtype, down in one (the expert op's: a Q4_K_M-style file keeps down apart) */
            const tensor *first = &t[p < 2 ? 0 : 2 * E];
            if (t[p * E + e].dtype != first->dtype)
                return vt_error(VLLM_ERR_UNSUPPORTED, "%s%d.%s.weight is %s, %s0.%s.weight %s: gpt-oss experts of "
                                "mixed types are not supported", pre, e, proj[p], dtype_name(t[p * E + e].dtype), pre,
                                p < 2 ? "gate_proj" : "down_proj", dtype_name(first->dtype));
        }
    return VLLM_OK;
}

/* gpt-oss's experts of layer l (bf16 fused tensors, or MXFP4 blocks and scales) into per-expert views of
 * L->host: t[e] gate (I, D), t[E + e] up (I, D), t[2E + e] down (D, I); b[e], b[E + e] the gate / up
 * biases (I), b[2E + e] the down bias (D). A GGUF file's are per expert already (gptoss_split_experts). */
static vllm_status gptoss_experts(model *m, weight_source *ws, int l, moe_block *L, tensor *t, tensor *b) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    const int E = c->moe.num_experts;
    const int64_t D = c->hidden_size, I = c->moe.intermediate_size;
    char pre[160];
    snprintf(pre, sizeof pre, "%slayers.%d.%s.", c->weight_prefix, l, nm->experts);
    vllm_status st;
    char split[224];
    snprintf(split, sizeof split, "%s0.gate_proj.weight", pre);
    if (!ws_is_dummy(ws) && ws_has(ws, split)) return gptoss_split_experts(c, ws, pre, t, b);
    tensor gub, dnb;
    const int64_t sgub[2] = {E, 2 * I}, sdnb[2] = {E, D};
    if ((st = ws_getf(ws, &gub, 2, sgub, "%s%s_bias", pre, nm->fused_gate_up)) ||
        (st = ws_getf(ws, &dnb, 2, sdnb, "%s%s_bias", pre, nm->fused_down)))
        return st;
    char name[224];
    snprintf(name, sizeof name, "%s%s", pre, nm->fused_gate_up);
    const bool mxfp4 = !ws_has(ws, name);
    tensor gu, dn, gus, dns;
    if (mxfp4) {
        /* MXFP4: gate_up (E, 2I, D / 32, 16) + (E, 2I, D / 32), down (E, D, I / 32, 16) + (E, D, I / 32) */
        if (D % MXFP4_BLOCK || I % MXFP4_BLOCK)
            return vt_error(VLLM_ERR_FORMAT, "%s: MXFP4 experts need hidden_size %lld and intermediate_size %lld "
                            "to be multiples of %d", c->architecture, (long long)D, (long long)I, MXFP4_BLOCK);
        const int64_t sgu[4] = {E, 2 * I, D / MXFP4_BLOCK, MXFP4_BLOCK_BYTES}, sdn[4] = {E, D, I / MXFP4_BLOCK,
                                                                                         MXFP4_BLOCK_BYTES};
        if ((st = getf_as(ws, &gu, DTYPE_U8, 4, sgu, "%s%s_blocks", pre, nm->fused_gate_up)) ||
            (st = getf_as(ws, &gus, DTYPE_U8, 3, sgu, "%s%s_scales", pre, nm->fused_gate_up)) ||
            (st = getf_as(ws, &dn, DTYPE_U8, 4, sdn, "%s%s_blocks", pre, nm->fused_down)) ||
            (st = getf_as(ws, &dns, DTYPE_U8, 3, sdn, "%s%s_scales", pre, nm->fused_down)))
            return st;
    } else {
        const int64_t sgu[3] = {E, D, 2 * I}, sdn[3] = {E, I, D};
        if ((st = ws_getf(ws, &gu, 3, sgu, "%s", name)) ||
            (st = ws_getf(ws, &dn, 3, sdn, "%s%s", pre, nm->fused_down)))
            return st;
        if (gu.dtype != dn.dtype)
            return vt_error(VLLM_ERR_FORMAT, "%s: layer %d's experts: gate_up_proj is %s, down_proj %s",
                            c->architecture, l, dtype_name(gu.dtype), dtype_name(dn.dtype));
    }
    const dtype wdt = mxfp4 ? DTYPE_BF16 : gu.dtype, bdt = gub.dtype;
    const size_t es = dtype_size(wdt), bs = dtype_size(bdt);
    const size_t per = (size_t)I * (size_t)D; /* elements of one expert's gate, up or down */
    uint64_t dseed, doff;
    if (!mxfp4 && dummy_lookup(gu.data, &dseed, &doff)) {
        /* dummy weights the device fills (tensor/dummy.h): random either way, so views of the
         * checkpoint tensors in the expected shapes stand for the reordered ones (never read here) */
        char *G = gu.data, *Dn = dn.data, *GB = gub.data;
        for (int e = 0; e < E; e++) {
            t[e] = tensor_2d(wdt, G + (size_t)e * 2 * per * es, I, D);
            t[E + e] = tensor_2d(wdt, G + ((size_t)e * 2 + 1) * per * es, I, D);
            t[2 * E + e] = tensor_2d(wdt, Dn + (size_t)e * per * es, D, I);
            b[e] = tensor_1d(bdt, GB + (size_t)e * 2 * (size_t)I * bs, I);
            b[E + e] = tensor_1d(bdt, GB + ((size_t)e * 2 + 1) * (size_t)I * bs, I);
            b[2 * E + e] =
                tensor_1d(dnb.dtype, (unsigned char *)dnb.data + (size_t)e * (size_t)D * dtype_size(dnb.dtype), D);
        }
        return VLLM_OK;
    }
    unsigned char *h = malloc(3 * (size_t)E * per * es + 2 * (size_t)E * (size_t)I * bs);
    if (!h) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (layer %d's experts)", l);
    L->host = h;
    unsigned char *hb = h + 3 * (size_t)E * per * es; /* the gate / up biases (E, I) each */
    for (int e = 0; e < E; e++) {
        unsigned char *g = h + (size_t)e * per * es, *u = h + ((size_t)E + e) * per * es,
                      *d = h + (2 * (size_t)E + e) * per * es;
        if (mxfp4) {
            /* row 2i of the (2I, D) matrix is gate row i, row 2i + 1 up row i; down (D, I) as is */
            const int64_t gd = D / MXFP4_BLOCK, gi = I / MXFP4_BLOCK;
            const uint8_t *blk = (const uint8_t *)gu.data + (size_t)e * 2 * (size_t)I * (size_t)gd * MXFP4_BLOCK_BYTES;
            const uint8_t *scl = (const uint8_t *)gus.data + (size_t)e * 2 * (size_t)I * (size_t)gd;
            for (int64_t r = 0; r < 2 * I; r++)
                mxfp4_dequant_row(blk + (size_t)r * (size_t)gd * MXFP4_BLOCK_BYTES, scl + (size_t)r * (size_t)gd, gd,
                                  (uint16_t *)(void *)((r % 2 ? u : g) + (size_t)(r / 2) * (size_t)D * es));
            blk = (const uint8_t *)dn.data + (size_t)e * (size_t)D * (size_t)gi * MXFP4_BLOCK_BYTES;
            scl = (const uint8_t *)dns.data + (size_t)e * (size_t)D * (size_t)gi;
            for (int64_t r = 0; r < D; r++)
                mxfp4_dequant_row(blk + (size_t)r * (size_t)gi * MXFP4_BLOCK_BYTES, scl + (size_t)r * (size_t)gi, gi,
                                  (uint16_t *)(void *)(d + (size_t)r * (size_t)I * es));
        } else {
            /* gate_up[e] (D, 2I): gate row i = column 2i, up row i = column 2i + 1; down[e] (I, D) transposed */
            const unsigned char *src = (const unsigned char *)gu.data + (size_t)e * (size_t)D * 2 * (size_t)I * es;
            transpose_cols(g, src, I, D, 2 * I, 0, 2, es);
            transpose_cols(u, src, I, D, 2 * I, 1, 2, es);
            transpose_cols(d, (const unsigned char *)dn.data + (size_t)e * per * es, D, I, D, 0, 1, es);
        }
        /* biases: gate_up_proj_bias[e] (2I) interleaved as the columns; down_proj_bias[e] (D) a view */
        const unsigned char *gb = (const unsigned char *)gub.data + (size_t)e * 2 * (size_t)I * bs;
        unsigned char *bg = hb + (size_t)e * (size_t)I * bs, *bu = hb + ((size_t)E + e) * (size_t)I * bs;
        for (int64_t i = 0; i < I; i++) {
            memcpy(bg + (size_t)i * bs, gb + (size_t)(2 * i) * bs, bs);
            memcpy(bu + (size_t)i * bs, gb + (size_t)(2 * i + 1) * bs, bs);
        }
        t[e] = tensor_2d(wdt, g, I, D);
        t[E + e] = tensor_2d(wdt, u, I, D);
        t[2 * E + e] = tensor_2d(wdt, d, D, I);
        b[e] = tensor_1d(bdt, bg, I);
        b[E + e] = tensor_1d(bdt, bu, I);
        b[2 * E + e] = tensor_1d(dnb.dtype, (unsigned char *)dnb.data + (size_t)e * (size_t)D * dtype_size(dnb.dtype), D);
    }
    return VLLM_OK;
}

/* DeepSeek's plain shared experts of layer l (mlp.shared_experts: gate, up (ns I, D), down (D, ns I)) as ns
 * experts of the routed ones' size I: sh[j], sh[ns + j], sh[2 ns + j] = gate rows, up rows, down columns
 * [j I, (j + 1) I) (views: a dummy arena's too, whose values the device writes from the views' offsets).
 * *n = ns, or 0 when they are not of the experts' float dtypes (gate and up as gate0, down as down0: one
 * be_experts takes one of each): the decoder then runs them as a separate MLP. */
static vllm_status shared_as_experts(model *m, weight_source *ws, int l, int ns, const tensor *gate0,
                                     const tensor *down0, tensor *sh, int *n) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    const int64_t D = c->hidden_size, I = c->moe.intermediate_size, Is = I * ns;
    const int64_t sgu[2] = {Is, D}, sdn[2] = {D, Is};
    tensor g, u, d;
    vllm_status st;
    *n = 0;
    if ((st = blk_get(ws, c, l, nm->shared_gate, "weight", 2, sgu, &g)) ||
        (st = blk_get(ws, c, l, nm->shared_up, "weight", 2, sgu, &u)) ||
        (st = blk_get(ws, c, l, nm->shared_down, "weight", 2, sdn, &d)))
        return st;
    const dtype gdt = gate0->dtype;
    if ((gdt != DTYPE_F32 && gdt != DTYPE_F16 && gdt != DTYPE_BF16) || g.dtype != gdt || u.dtype != gdt ||
        d.dtype != down0->dtype)
        return VLLM_OK;
    for (int j = 0; j < ns; j++) {
        sh[j] = tensor_rows(&g, (int64_t)j * I, I);
        sh[ns + j] = tensor_rows(&u, (int64_t)j * I, I);
        sh[2 * ns + j] = tensor_cols(&d, (int64_t)j * I, I); /* (D, I), rows Is apart */
    }
    *n = ns;
    return VLLM_OK;
}

/* An MoE layer's router, experts (per-expert tensors, or the fused (E, 2I, D) / (E, D, I) ones of
 * transformers 5) and shared expert; DeepSeek's plain shared experts as experts E .. E + ns - 1 where
 * blk_moe_shared says the op takes them (b->num_shared; else they are the decoder's to load). */
vllm_status moe_block_load(model *m, weight_source *ws, int l, moe_block *L) {
    const model_config *c = &m->cfg;
    const weight_names *nm = blk_names(c);
    const int E = c->moe.num_experts;
    const int64_t D = c->hidden_size, I = c->moe.intermediate_size;
    vllm_status st;
    /* the shared expert's gate (1, D) rides as the router's last row where neither has a bias and both are stored
     * in one float dtype, which linear_create concatenates (Qwen2-MoE, Qwen3.5's and Qwen3-Next's MoE): one GEMV,
     * its logit column E of the router's output; else a linear of its own */
    L->gate_in_router = false;
    if (c->moe.shared_intermediate_size > 0 && !c->moe.router_bias) {
        const int64_t rs[2] = {E, D}, gs[2] = {1, D};
        tensor rw, gw;
        if (blk_get(ws, c, l, nm->router, "weight", 2, rs, &rw) == VLLM_OK &&
            blk_get(ws, c, l, nm->shared_expert_gate, "weight", 2, gs, &gw) == VLLM_OK)
            L->gate_in_router = rw.dtype == gw.dtype &&
                                (rw.dtype == DTYPE_BF16 || rw.dtype == DTYPE_F16 || rw.dtype == DTYPE_F32);
        vt_error_clear(); /* a missing tensor is the loads' below to report */
    }
    const int64_t rrows[2] = {E, 1};
    const char *rnames[2] = {nm->router, nm->shared_expert_gate};
    if ((st = blk_load_linear(m, ws, l, NULL, rnames, rrows, L->gate_in_router ? 2 : 1, D, c->moe.router_bias,
                              &L->router)))
        return st;
    if (c->moe.score_bias) { /* DeepSeek-V3's "<prefix>layers.<l>.mlp.gate.e_score_correction_bias" (E) */
        const int64_t ne = E;
        tensor sb;
        if (nm->router_score_bias)
            st = ws_getf(ws, &sb, 1, &ne, "%slayers.%d.%s", c->weight_prefix, l, nm->router_score_bias);
        else
            st = ws_getf(ws, &sb, 1, &ne, "%slayers.%d.%s.e_score_correction_bias", c->weight_prefix, l, nm->router);
        if (st || (st = blk_import(m, &sb, &L->score_bias))) return st;
    }
    /* t: the routed experts' gate, up, down, bias tensors (E each), then the shared experts' slices (ns each);
     * pg: pointers to them, E + ns a kind (the shared experts' bias entries NULL: none) */
    const int ns = blk_moe_shared(m), Et = E + ns;
    tensor *t = calloc((size_t)E * 6 + (size_t)ns * 3, sizeof *t);
    const tensor **pg = calloc((size_t)Et * 6, sizeof *pg);
    if (!t || !pg) {
        free(t);
        free(pg);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (experts)");
    }
    const tensor **pu = pg + Et, **pd = pg + 2 * Et;
    be_expert_bias bias = {.gate = pg + 3 * Et, .up = pg + 4 * Et, .down = pg + 5 * Et};
    char name[160];
    snprintf(name, sizeof name, "%slayers.%d.%s.%s", c->weight_prefix, l, nm->experts, nm->fused_gate_up ? nm->fused_gate_up : "");
    if (c->moe.layout == MOE_LAYOUT_GPTOSS) {
        st = gptoss_experts(m, ws, l, L, t, t + 3 * E);
    } else if (nm->fused_gate_up && ws_has(ws, name)) {
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
    L->num_shared = 0;
    /* the gated shared expert rides along only with its gate's logit in the router's output */
    if (!st && ns > 0 && (c->moe.shared_intermediate_size == 0 || L->gate_in_router))
        st = shared_as_experts(m, ws, l, ns, &t[0], &t[2 * E], t + 6 * E, &L->num_shared);
    if (!st && m->tp_size > 1) { /* tensor-parallel experts (vLLM's default for MoE under TP): every expert's
                                    gate / up rows and down columns split, the layer's output all-reduced */
        const int64_t Ir = I / m->tp_size, r0 = m->tp_rank * Ir;
        for (int e = 0; !st && e < E; e++) { /* a block-typed down projection (GGUF, FP8, int4) is cut between blocks */
            const int64_t blk = dtype_block(t[2 * E + e].dtype);
            if (blk > 1 && Ir % blk)
                st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: layer %d's experts' down projection is %s (blocks of %lld "
                                "inputs): tensor parallelism %d would cut it at %lld of its %lld inputs, inside a "
                                "block; use a tensor-parallel size that divides it into whole blocks",
                                c->architecture, l, dtype_name(t[2 * E + e].dtype), (long long)blk, m->tp_size,
                                (long long)Ir, (long long)I);
        }
        for (int e = 0; !st && e < E; e++) {
            t[e] = tensor_rows(&t[e], r0, Ir);
            t[E + e] = tensor_rows(&t[E + e], r0, Ir);
            t[2 * E + e] = tensor_cols(&t[2 * E + e], r0, Ir); /* (D, I / tp), rows I apart */
        }
    }
    for (int k = 0; k < 6; k++)
        for (int e = 0; e < E; e++) pg[k * Et + e] = &t[k * E + e];
    for (int j = 0; j < L->num_shared; j++)
        for (int k = 0; k < 3; k++) pg[k * Et + E + j] = &t[6 * E + k * ns + j];
    if (!st)
        st = m->be->ops->experts_create(m->be, pg, pu, pd, c->moe.expert_bias ? &bias : NULL, E + L->num_shared,
                                        &L->experts);
    free(t);
    free(pg);
    if (L->host && m->be->import_copies) { /* the device has them */
        free(L->host);
        L->host = NULL;
    }
    if (st) return st;
    if (c->moe.shared_intermediate_size > 0 && !L->num_shared) { /* the gated shared expert apart */
        const int64_t Is = c->moe.shared_intermediate_size;
        const char *sh[2] = {nm->shared_gate, nm->shared_up};
        const int64_t shrows[2] = {Is, Is}, dnrows[1] = {D}, grows[1] = {1};
        /* tensor parallelism: the shared expert split as a dense MLP (its sigmoid gate whole) */
        if ((st = blk_load_linear_split(m, ws, l, NULL, sh, shrows, 2, D, false, BLK_SPLIT_OUT, &L->sh_gate_up)) ||
            (st = blk_load_linear_split(m, ws, l, NULL, &nm->shared_down, dnrows, 1, Is, false, BLK_SPLIT_IN,
                                        &L->sh_down)) ||
            (!L->gate_in_router &&
             (st = blk_load_linear(m, ws, l, NULL, &nm->shared_expert_gate, grows, 1, D, false, &L->sh_gate))))
            return st;
    }
    return VLLM_OK;
}

void moe_block_free(backend *be, moe_block *b) {
    be_linear *lins[] = {b->router, b->sh_gate_up, b->sh_down, b->sh_gate};
    for (size_t i = 0; i < sizeof lins / sizeof *lins; i++)
        if (lins[i]) be->ops->linear_free(be, lins[i]);
    if (b->experts) be->ops->experts_free(be, b->experts);
    if (b->score_bias.data) be->ops->release_import(be, &b->score_bias);
    b->score_bias.data = NULL;
    free(b->host);
    b->host = NULL;
}

vllm_status moe_bufs_ensure(model *m, moe_bufs *mb, int64_t T) {
    const model_config *c = &m->cfg;
    if (!blk_has_moe(c)) return VLLM_OK;
    const dtype act = m->be->act_dtype;
    /* ids / weights: the top k and the shared experts that ride along (a layer without them: a column view) */
    const int64_t E = c->moe.num_experts, k = c->moe.top_k + blk_moe_shared(m), Is = c->moe.shared_intermediate_size,
                  D = c->hidden_size;
    tensor t;
    vllm_status st;
    /* rl: the router's logits, and the shared expert's gate logit after them (moe_block gate_in_router), in rows
     * padded to 8 elements (16-byte aligned rows for the prefill GEMM's output) */
    if ((st = model_buf_ensure(m, &mb->rl, act, T, Is > 0 ? (E + 8) / 8 * 8 : E, &t)) ||
        (st = model_buf_ensure(m, &mb->ids, DTYPE_I32, T, k, &t)) ||
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

void moe_block_run(model *m, const moe_block *b, moe_bufs *mb, const tensor *x, const be_norm *norm, tensor *hbuf,
                   bool accumulate, tensor *o) {
    backend *be = m->be;
    const backend_ops *ops = be->ops;
    const int64_t T = x->shape[0];
    const tensor *h = norm ? hbuf : x; /* the experts' input: norm(x), which the router's linear_fused writes */
    moe_params mp = blk_moe_params(&m->cfg);
    mp.score_bias = b->score_bias.data ? &b->score_bias : NULL;
    mp.num_shared = b->num_shared; /* DeepSeek's shared experts ride along, or Qwen2-MoE's gated by its logit */
    mp.shared_gate = b->num_shared > 0 && m->cfg.moe.shared_intermediate_size > 0;
    const int64_t kw = be_moe_width(&mp);
    tensor rlb = rows(&mb->rl, T), idb = rows(&mb->ids, T), rwb = rows(&mb->rw, T);
    const int64_t E = mp.num_experts;
    tensor rl = tensor_cols(&rlb, 0, b->gate_in_router ? E + 1 : E); /* the router's output */
    tensor logits = tensor_cols(&rlb, 0, mp.shared_gate ? E + 1 : E), ids = tensor_cols(&idb, 0, kw),
           rw = tensor_cols(&rwb, 0, kw);
    if (norm) { /* h = norm(x) and the router logits in one op (a decode batch's GEMV normalises x itself) */
        const linear_fuse in = {.norm_w = norm->w, .norm_b = norm->b, .eps = norm->eps, .norm_kind = norm->kind,
                                .h = hbuf};
        ops->linear_fused(be, b->router, x, &in, &rl);            /* (T, E) router logits; h (T, D) */
    } else {
        ops->linear(be, b->router, h, &rl);                       /* (T, E) router logits */
    }
    ops->moe_route(be, &logits, &mp, &ids, &rw); /* top-k (+ shared) ids, weights (T, kw): the shared gated by
                                                    sigmoid(logits[:, E]) */
    ops->moe_experts(be, b->experts, h, &ids, &rw, &mp, accumulate, o); /* o (T, D) (+)= */
    if (b->sh_gate_up) {
        tensor sgu = rows(&mb->sgu, T), sa = rows(&mb->sa, T), sg = rows(&mb->sg, T), so = rows(&mb->so, T);
        const linear_fuse gated = {.silu_mul = true, .mid = &sgu, .act = (be_act)m->cfg.act};
        ops->linear_fused(be, b->sh_gate_up, h, &gated, &sa);   /* (T, Is) */
        ops->linear(be, b->sh_down, &sa, &so);                   /* (T, D) */
        if (b->gate_in_router) sg = tensor_cols(&rlb, E, 1);     /* (T, 1): the router's last column */
        else ops->linear(be, b->sh_gate, h, &sg);                /* (T, 1) */
        ops->sigmoid_gate(be, &so, &sg);                          /* so *= sigmoid(sg) */
        ops->add(be, o, &so);                                     /* o += so */
    }
}
