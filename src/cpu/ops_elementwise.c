/*
 * ops_elementwise.c: the CPU row-wise ops: embedding lookup, the norms
 * (RMSNorm, Gemma's (1 + w) RMSNorm, LayerNorm), residual add, the gated
 * product and the plain activations (SiLU, GELU tanh / erf, ReLU), the
 * softcap and row gather. Each parallelises over rows and runs inline when
 * the tensor is small; each row is computed the same way whatever the
 * thread split.
 */
#include "cpu/cpu_internal.h"
#include "tensor/fp8.h"
#include "tensor/int4.h"
#include "tensor/ggml_dtype.h"
#include "tensor/ggml_quant.h"

/* ---- embedding ---- */

typedef struct emb_ctx {
    const unsigned char *table;
    size_t row_bytes;
    dtype dt;
    const int32_t *ids;
    float *out;
    int64_t os, D;
} emb_ctx;

static void emb_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const emb_ctx *c = ctx;
    ggml_type gt = GGML_TYPE_F32;
    const bool block = dtype_is_block(c->dt) && dtype_to_ggml(c->dt, &gt);
    for (int64_t t = t0; t < t1; t++) {
        const unsigned char *row = c->table + (size_t)c->ids[t] * c->row_bytes;
        if (block) gq_dequantize_row(gt, row, c->out + t * c->os, c->D); /* a GGUF table of ggml blocks */
        else if (c->dt == DTYPE_FP8_B128) fp8_dequantize_row((const fp8_block *)(const void *)row, c->out + t * c->os, c->D);
        else if (c->dt == DTYPE_I4_B128) i4_dequantize_row((const i4_block *)(const void *)row, c->D, c->out + t * c->os);
        else cpu_widen(c->out + t * c->os, row, c->dt, c->D);
    }
}

// table (V, D), ids (T) -> out (T, D)
void cpu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    const bool block = dtype_is_block(table->dtype) && tensor_row_len(table) % dtype_block(table->dtype) == 0 &&
                       table->ndim == 2 && !table->row_stride && table->data;
    if (!(block || cpu_check_mat(cpu, "embedding", "table", table, CPU_ANY_FLOAT, -1, -1)) ||
        !cpu_check_vec(cpu, "embedding", "ids", ids, DTYPE_I32, -1))
        return;
    int64_t T = tensor_numel(ids), V = cpu_rows(table), D = tensor_row_len(table);
    if (!cpu_check_mat(cpu, "embedding", "out", out, DTYPE_F32, T, D)) return;
    const int32_t *id = ids->data;
    for (int64_t t = 0; t < T; t++) {
        if (id[t] < 0 || id[t] >= V) {
            cpu_fail(cpu, "embedding: token id %d at position %lld is out of range [0, %lld)", id[t],
                     (long long)t, (long long)V);
            return;
        }
    }
    emb_ctx c = {table->data, (size_t)(tensor_row_stride(table) / dtype_block(table->dtype)) * dtype_size(table->dtype),
                 table->dtype,
                 id, out->data, tensor_row_stride(out), D};
    tp_run_cost(cpu->pool, T, (double)D, emb_task, &c);
}

/* ---- RMSNorm, Gemma's RMSNorm, LayerNorm ---- */

typedef struct norm_ctx {
    const float *x;
    int64_t xs;
    const void *w, *b;
    dtype wdt, bdt;     /* wdt DTYPE_COUNT: no weight (w = 1) */
    be_norm_kind kind;
    int64_t G, groups;  /* group size (len(w)) and groups per row */
    float eps;
    float *out;
    int64_t os;
} norm_ctx;

/* w[i] of dtype wdt, or 1 (the multiplier without a weight) for wdt DTYPE_COUNT */
CPU_INLINE float norm_w(const void *w, dtype wdt, int64_t i) { return wdt == DTYPE_COUNT ? 1.0f : cpu_load(w, wdt, i); }

/* One group of G elements, x -> o (be_norm_kind):
 *   RMS:        o = x * (1 / sqrt(mean(x^2) + eps)) * w
 *   RMS_OFFSET: o = x * (1 / sqrt(mean(x^2) + eps)) * (1 + w)        (w = 0 without a weight)
 *   LAYER:      o = (x - mean) * (1 / sqrt(var + eps)) * w + b         (var = mean((x - mean)^2))
 * in f32 (the mean and variance of LAYER summed in double). */
CPU_INLINE void norm_group(const norm_ctx *c, const float *x, float *o, dtype wdt, be_norm_kind kind) {
    const int64_t G = c->G;
    if (kind == BE_NORM_LAYER) {
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < G; i++) sum += x[i];
        const float mean = (float)(sum / (double)G);
        for (int64_t i = 0; i < G; i++) sq += (double)(x[i] - mean) * (double)(x[i] - mean);
        const float rstd = 1.0f / sqrtf((float)(sq / (double)G) + c->eps);
        for (int64_t i = 0; i < G; i++) {
            const float bias = c->b ? cpu_load(c->b, c->bdt, i) : 0.0f;
            o[i] = (x[i] - mean) * rstd * norm_w(c->w, wdt, i) + bias;
        }
        return;
    }
    float scale = 1.0f / sqrtf(cpu_dot(x, x, G) / (float)G + c->eps);
    if (kind == BE_NORM_RMS_OFFSET) {
        for (int64_t i = 0; i < G; i++)
            o[i] = x[i] * scale * (1.0f + (wdt == DTYPE_COUNT ? 0.0f : cpu_load(c->w, wdt, i)));
    } else {
        for (int64_t i = 0; i < G; i++) o[i] = x[i] * scale * norm_w(c->w, wdt, i);
    }
}

CPU_INLINE void norm_rows(const norm_ctx *c, int64_t r0, int64_t r1, dtype wdt, be_norm_kind kind) {
    const int64_t G = c->G;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t g = 0; g < c->groups; g++)
            norm_group(c, c->x + r * c->xs + g * G, c->out + r * c->os + g * G, wdt, kind);
}

/* the kernel specialised per weight dtype (constant at each call) */
CPU_INLINE void norm_rows_kind(const norm_ctx *c, int64_t r0, int64_t r1, be_norm_kind kind) {
    switch (c->wdt) {
    case DTYPE_BF16: norm_rows(c, r0, r1, DTYPE_BF16, kind); break;
    case DTYPE_F16: norm_rows(c, r0, r1, DTYPE_F16, kind); break;
    case DTYPE_F32: norm_rows(c, r0, r1, DTYPE_F32, kind); break;
    default: norm_rows(c, r0, r1, DTYPE_COUNT, kind); break;
    }
}

static void norm_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const norm_ctx *c = ctx;
    switch (c->kind) {
    case BE_NORM_RMS_OFFSET: norm_rows_kind(c, r0, r1, BE_NORM_RMS_OFFSET); break;
    case BE_NORM_LAYER: norm_rows_kind(c, r0, r1, BE_NORM_LAYER); break;
    default: norm_rows_kind(c, r0, r1, BE_NORM_RMS); break;
    }
}

/* Checks and runs a norm of kind over x (T, D) -> out; w (required when need_w) and b may be NULL. */
static void norm_run(cpu_state *cpu, const char *op, const tensor *x, be_norm_kind kind, const tensor *w,
                     bool need_w, const tensor *b, float eps, tensor *out) {
    if (!cpu_check_mat(cpu, op, "x", x, DTYPE_F32, -1, -1) ||
        ((w || need_w) && !cpu_check_vec(cpu, op, "w", w, CPU_ANY_FLOAT, -1)))
        return;
    if ((unsigned)kind >= BE_NORM_COUNT) {
        cpu_fail(cpu, "%s: norm kind %d is out of range", op, (int)kind);
        return;
    }
    int64_t T = cpu_rows(x), D = tensor_row_len(x), G = w ? tensor_numel(w) : D;
    if (w && (G <= 0 || D % G != 0)) {
        cpu_fail(cpu, "%s: row length %lld is not a multiple of the weight length %lld", op, (long long)D,
                 (long long)G);
        return;
    }
    if (b && kind != BE_NORM_LAYER) {
        cpu_fail(cpu, "%s: a bias is for BE_NORM_LAYER only", op);
        return;
    }
    if ((b && !cpu_check_vec(cpu, op, "b", b, CPU_ANY_FLOAT, G)) ||
        !cpu_check_mat(cpu, op, "out", out, DTYPE_F32, T, D))
        return;
    if (G == 0) return; /* rows of nothing */
    norm_ctx c = {x->data, tensor_row_stride(x), w ? w->data : NULL, b ? b->data : NULL,
                  w ? w->dtype : DTYPE_COUNT, b ? b->dtype : DTYPE_F32, kind, G, D / G, eps,
                  out->data, tensor_row_stride(out)};
    tp_run_cost(cpu->pool, T, (kind == BE_NORM_LAYER ? 5.0 : 3.0) * (double)D, norm_task, &c);
}

// x (T, D), w (G) with D % G == 0 -> out (T, D); out may be x
void cpu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out) {
    norm_run(cpu_of(be), "rms_norm", x, BE_NORM_RMS, w, true, NULL, eps, out);
}

// x (T, D), n->w, n->b (G) or NULL with D % G == 0 -> out (T, D); out may be x
void cpu_norm(backend *be, const tensor *x, const be_norm *n, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!n) {
        cpu_fail(cpu, "norm: no be_norm");
        return;
    }
    norm_run(cpu, "norm", x, n->kind, n->w, false, n->b, n->eps, out);
}

/* ---- add ---- */

typedef struct add_ctx {
    float *x;
    int64_t xs;
    const float *y;
    int64_t ys, D;
} add_ctx;

static void add_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const add_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->x + r * c->xs;
        const float *y = c->y + r * c->ys;
        for (int64_t i = 0; i < c->D; i++) x[i] += y[i];
    }
}

// x (T, D) += y (T, D)
void cpu_add(backend *be, tensor *x, const tensor *y) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "add", "x", x, DTYPE_F32, -1, -1) ||
        !cpu_check_mat(cpu, "add", "y", y, DTYPE_F32, cpu_rows(x), tensor_row_len(x)))
        return;
    add_ctx c = {x->data, tensor_row_stride(x), y->data, tensor_row_stride(y), tensor_row_len(x)};
    tp_run_cost(cpu->pool, cpu_rows(x), (double)c.D, add_task, &c);
}

/* ---- activations: the gated product, in place, the softcap ---- */

/* act(x) in f32 (be_act; transformers' activations.py, PyTorch's formulas:
 * gelu tanh as at::native's GeluKernel, 0.5 x (1 + tanh(kBeta (x + kKappa x^3)))) */
CPU_INLINE float cpu_act(be_act act, float x) {
    switch (act) {
    case BE_ACT_GELU_TANH: {
        const float kBeta = 0.7978845608028654f; /* sqrt(2 / pi) */
        const float kKappa = 0.044715f;
        const float inner = kBeta * (x + kKappa * (x * x * x));
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    case BE_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); /* x / sqrt(2) */
    case BE_ACT_RELU: return x < 0.0f ? 0.0f : x;
    default: return x / (1.0f + cpu_expf(-x)); /* SiLU */
    }
}

typedef struct act_ctx {
    const float *gu;    /* gated: (T, 2I) gate | up; else the input (T, I) */
    int64_t gs;
    float *out;
    int64_t os, I;
    be_act act;
    bool gated;
    float cap;          /* softcap (act unused) when > 0 */
    float mul;          /* scale (act and cap unused) when != 0 */
    float alpha, limit; /* BE_ACT_SWIGLU_OAI's */
} act_ctx;

/* gpt-oss's clamped SwiGLU (backend.h BE_ACT_SWIGLU_OAI), as transformers' GptOssExperts writes it:
 * g = min(g, limit), u = clamp(u, -limit, limit) (NaN stays NaN, as torch.clamp), glu = g * sigmoid(alpha g),
 * o = (u + 1) * glu */
CPU_INLINE void swiglu_oai_row(const float *g, const float *u, float *o, int64_t I, float alpha, float limit) {
    for (int64_t i = 0; i < I; i++) {
        const float gc = g[i] > limit ? limit : g[i];
        const float uc = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        const float glu = gc * (1.0f / (1.0f + cpu_expf(-(gc * alpha))));
        o[i] = (uc + 1.0f) * glu;
    }
}

// gate (I), up (I) -> o (I) = act(gate) * up, act constant at each call
CPU_INLINE void act_mul_row(const float *g, const float *u, float *o, int64_t I, be_act act) {
    for (int64_t i = 0; i < I; i++) o[i] = cpu_act(act, g[i]) * u[i];
}

static void act_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const act_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *g = c->gu + r * c->gs;
        float *o = c->out + r * c->os;
        if (c->mul != 0.0f) {
            for (int64_t i = 0; i < c->I; i++) o[i] = g[i] * c->mul;
        } else if (c->cap > 0.0f) { /* softcap: tanh(x / cap) * cap, as transformers writes it */
            for (int64_t i = 0; i < c->I; i++) o[i] = tanhf(g[i] / c->cap) * c->cap;
        } else if (c->gated) {
            switch (c->act) {
            case BE_ACT_GELU_TANH: act_mul_row(g, g + c->I, o, c->I, BE_ACT_GELU_TANH); break;
            case BE_ACT_GELU: act_mul_row(g, g + c->I, o, c->I, BE_ACT_GELU); break;
            case BE_ACT_RELU: act_mul_row(g, g + c->I, o, c->I, BE_ACT_RELU); break;
            case BE_ACT_SWIGLU_OAI: swiglu_oai_row(g, g + c->I, o, c->I, c->alpha, c->limit); break;
            default: { /* SiLU, written out as silu_mul always was */
                const float *u = g + c->I;
                for (int64_t i = 0; i < c->I; i++) o[i] = g[i] / (1.0f + cpu_expf(-g[i])) * u[i];
            }
            }
        } else {
            for (int64_t i = 0; i < c->I; i++) o[i] = cpu_act(c->act, g[i]);
        }
    }
}

/* gate_up (T, 2I) -> out (T, I) = act(gate) * up (BE_ACT_SWIGLU_OAI with alpha, limit) */
static void act_mul_run(cpu_state *cpu, const char *op, be_act act, float alpha, float limit, const tensor *gate_up,
                        tensor *out) {
    if ((unsigned)act >= BE_ACT_COUNT) {
        cpu_fail(cpu, "%s: activation %d is out of range", op, (int)act);
        return;
    }
    if (act == BE_ACT_SWIGLU_OAI && !(alpha > 0.0f && limit > 0.0f && isfinite(alpha) && isfinite(limit))) {
        cpu_fail(cpu, "%s: swigluoai alpha %g and limit %g must be positive and finite", op, (double)alpha,
                 (double)limit);
        return;
    }
    if (!cpu_check_mat(cpu, op, "gate_up", gate_up, DTYPE_F32, -1, -1)) return;
    int64_t T = cpu_rows(gate_up), D = tensor_row_len(gate_up);
    if (D % 2) {
        cpu_fail(cpu, "%s: gate_up row length %lld is odd", op, (long long)D);
        return;
    }
    if (!cpu_check_mat(cpu, op, "out", out, DTYPE_F32, T, D / 2)) return;
    act_ctx c = {gate_up->data, tensor_row_stride(gate_up), out->data, tensor_row_stride(out), D / 2, act, true, 0.0f, 0.0f,
                 alpha, limit};
    tp_run_cost(cpu->pool, T, 8.0 * (double)c.I, act_task, &c);
}

// gate_up (T, 2I) -> out (T, I) = silu(gate) * up
void cpu_silu_mul(backend *be, const tensor *gate_up, tensor *out) {
    act_mul_run(cpu_of(be), "silu_mul", BE_ACT_SILU, 0.0f, 0.0f, gate_up, out);
}

// gate_up (T, 2I) -> out (T, I) = act(gate) * up
void cpu_act_mul(backend *be, be_act act, const tensor *gate_up, tensor *out) {
    act_mul_run(cpu_of(be), "act_mul", act, BE_SWIGLU_OAI_ALPHA, BE_SWIGLU_OAI_LIMIT, gate_up, out);
}

// act_mul with BE_ACT_SWIGLU_OAI's alpha and limit given (moe_experts)
void cpu_act_mul_p(backend *be, be_act act, float alpha, float limit, const tensor *gate_up, tensor *out) {
    act_mul_run(cpu_of(be), "act_mul", act, alpha, limit, gate_up, out);
}

// x (T, I) = act(x) in place
void cpu_activation(backend *be, be_act act, tensor *x) {
    cpu_state *cpu = cpu_of(be);
    if ((unsigned)act >= BE_ACT_COUNT || act == BE_ACT_SWIGLU_OAI) {
        cpu_fail(cpu, "activation: activation %d is out of range (or gated only)", (int)act);
        return;
    }
    if (!cpu_check_mat(cpu, "activation", "x", x, DTYPE_F32, -1, -1)) return;
    act_ctx c = {x->data, tensor_row_stride(x), x->data, tensor_row_stride(x), tensor_row_len(x), act, false, 0.0f, 0.0f,
                 0.0f, 0.0f};
    tp_run_cost(cpu->pool, cpu_rows(x), 8.0 * (double)c.I, act_task, &c);
}

// x (T, V) = tanh(x / cap) * cap in place
void cpu_softcap(backend *be, tensor *x, float cap) {
    cpu_state *cpu = cpu_of(be);
    if (!(cap > 0.0f) || isinf(cap)) {
        cpu_fail(cpu, "softcap: cap %g must be positive and finite", (double)cap);
        return;
    }
    if (!cpu_check_mat(cpu, "softcap", "x", x, DTYPE_F32, -1, -1)) return;
    act_ctx c = {x->data, tensor_row_stride(x), x->data, tensor_row_stride(x), tensor_row_len(x), BE_ACT_SILU, false,
                 cap, 0.0f, 0.0f, 0.0f};
    tp_run_cost(cpu->pool, cpu_rows(x), 8.0 * (double)c.I, act_task, &c);
}

// x (T, D) *= s in place
void cpu_scale(backend *be, tensor *x, float s) {
    cpu_state *cpu = cpu_of(be);
    if (!isfinite(s) || s == 0.0f) {
        cpu_fail(cpu, "scale: factor %g must be finite and nonzero", (double)s);
        return;
    }
    if (!cpu_check_mat(cpu, "scale", "x", x, DTYPE_F32, -1, -1)) return;
    act_ctx c = {x->data, tensor_row_stride(x), x->data, tensor_row_stride(x), tensor_row_len(x), BE_ACT_SILU, false,
                 0.0f, s, 0.0f, 0.0f};
    tp_run_cost(cpu->pool, cpu_rows(x), 1.0 * (double)c.I, act_task, &c);
}

/* ---- gather rows ---- */

typedef struct gather_ctx {
    const unsigned char *x;
    size_t x_row_bytes;
    dtype xdt;
    const int32_t *idx;
    unsigned char *out;
    size_t out_row_bytes;
    dtype odt;
    int64_t D;
} gather_ctx;

static void gather_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const gather_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *src = c->x + (size_t)c->idx[r] * c->x_row_bytes;
        unsigned char *dst = c->out + (size_t)r * c->out_row_bytes;
        if (c->xdt == c->odt)
            memcpy(dst, src, (size_t)c->D * dtype_size(c->xdt));
        else
            cpu_widen((float *)(void *)dst, src, c->xdt, c->D);
    }
}

// x (M, D), idx (N) -> out (N, D); out is x's dtype, or F32 from any float x
void cpu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!x || !out) {
        cpu_fail(cpu, "gather_rows: missing x or out");
        return;
    }
    bool widen = x->dtype != out->dtype;
    if (!cpu_check_mat(cpu, "gather_rows", "x", x, widen ? CPU_ANY_FLOAT : x->dtype, -1, -1) ||
        !cpu_check_vec(cpu, "gather_rows", "idx", idx, DTYPE_I32, -1))
        return;
    int64_t N = tensor_numel(idx), M = cpu_rows(x), D = tensor_row_len(x);
    if (!cpu_check_mat(cpu, "gather_rows", "out", out, widen ? DTYPE_F32 : x->dtype, N, D)) return;
    const int32_t *id = idx->data;
    for (int64_t r = 0; r < N; r++) {
        if (id[r] < 0 || id[r] >= M) {
            cpu_fail(cpu, "gather_rows: index %d at %lld is out of range [0, %lld)", id[r], (long long)r,
                     (long long)M);
            return;
        }
    }
    gather_ctx c = {x->data, (size_t)tensor_row_stride(x) * dtype_size(x->dtype), x->dtype, id,
                    out->data, (size_t)tensor_row_stride(out) * dtype_size(out->dtype), out->dtype, D};
    tp_run_cost(cpu->pool, N, (double)D, gather_task, &c);
}
