/*
 * ops_linear_attn.c: the CPU reference ops of the gated delta-net mixer (Qwen3-Next / Qwen3.5 linear
 * attention): the depthwise causal conv1d with per-sequence conv state, the gated delta rule in its
 * recurrent form with per-sequence recurrent state, and the gated RMSNorm.
 *
 * These are the plain versions that the GPU kernels are tested against: one loop per formula of
 * backend.h, in the order transformers' torch paths (torch_causal_conv1d_update,
 * torch_recurrent_gated_delta_rule, Qwen3NextRMSNormGated) compute them, in f32. The sequences of a
 * batch are independent: the conv runs one (sequence, channel) per item and the delta rule one
 * (sequence, v-head) per item, each walking its sequence's tokens in order.
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"

/* The widest conv kernel the CPU keeps on the stack (its rolling window of K - 1 inputs). */
#define LA_MAX_CONV_K 64

/* l2norm's epsilon (transformers' l2norm(eps=1e-6), fla's l2norm in fused_recurrent) */
#define LA_L2NORM_EPS 1e-6f

bool cpu_gdn_params_ok(const gdn_params *p) {
    return p->num_k_heads > 0 && p->num_v_heads > 0 && p->head_k_dim > 0 && p->head_v_dim > 0 &&
           p->num_v_heads % p->num_k_heads == 0 && p->scale >= 0.0f && !isinf(p->scale) &&
           (p->conv_kernel == 0 || (p->conv_kernel >= 2 && p->conv_kernel <= LA_MAX_CONV_K)) &&
           (p->state_dtype == DTYPE_F32 || p->state_dtype == DTYPE_F16 || p->state_dtype == DTYPE_BF16);
}

/* Stores f rounded to float dtype dt at dst[i]. */
static inline void la_store(void *dst, dtype dt, int64_t i, float f) {
    if (dt == DTYPE_F32) {
        ((float *)dst)[i] = f;
    } else {
        uint16_t h = dt == DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
        memcpy((unsigned char *)dst + 2 * i, &h, 2);
    }
}

static inline float la_silu(float x) { return x / (1.0f + expf(-x)); }

static bool la_state_dtype(dtype dt) { return dt == DTYPE_F32 || dt == DTYPE_F16 || dt == DTYPE_BF16; }

/* A state pool: contiguous, ndim dims, a float dtype the state ops store (F32 / F16 / BF16), dims 1..
 * equal to want[0 .. ndim - 1) (dim 0 is the slot count, any). */
static bool la_check_pool(cpu_state *cpu, const char *op, const char *arg, const tensor *t, int ndim,
                          const int64_t *want) {
    int64_t cols = 1;
    for (int d = 0; d < ndim - 1; d++) cols *= want[d];
    if (!cpu_check_mat(cpu, op, arg, t, CPU_ANY_FLOAT, -1, cols)) return false;
    bool ok = t->ndim == ndim && la_state_dtype(t->dtype) && (t->row_stride == 0 || t->row_stride == cols);
    for (int d = 1; ok && d < ndim; d++) ok = t->shape[d] == want[d - 1];
    if (!ok) {
        cpu_fail(cpu, "%s: %s must be a contiguous %d-D F32 / F16 / BF16 pool (slots, ...) with dims 1.. of "
                 "the layer's shapes", op, arg, ndim);
        return false;
    }
    return true;
}

/* The checked metadata of one batch: token ranges, slots and start flags (host-readable on the CPU). */
typedef struct la_seqs {
    int64_t S, T;
    const int32_t *qsl;    /* (S + 1) */
    const int32_t *slots;  /* (S) */
    const int32_t *init;   /* (S) */
} la_seqs;

/* Checks m against T tokens and a pool of num_slots slots: query_start_loc from 0 to T and
 * non-decreasing, every slot < num_slots, no slot twice. */
static bool la_check_meta(cpu_state *cpu, const char *op, const linear_attn_meta *m, int64_t T,
                          int64_t num_slots, la_seqs *out) {
    if (!m) {
        cpu_fail(cpu, "%s: no linear_attn_meta", op);
        return false;
    }
    const int64_t S = m->num_seqs;
    if (S < 0 || m->num_tokens != T) {
        cpu_fail(cpu, "%s: metadata has %d sequences and %d tokens for %lld input rows", op, m->num_seqs,
                 m->num_tokens, (long long)T);
        return false;
    }
    *out = (la_seqs){.S = S, .T = T};
    if (S == 0) {
        if (T == 0) return true;
        cpu_fail(cpu, "%s: %lld tokens but no sequence", op, (long long)T);
        return false;
    }
    if (!cpu_check_vec(cpu, op, "query_start_loc", &m->query_start_loc, DTYPE_I32, -1) ||
        !cpu_check_vec(cpu, op, "state_slots", &m->state_slots, DTYPE_I32, -1) ||
        !cpu_check_vec(cpu, op, "has_initial_state", &m->has_initial_state, DTYPE_I32, -1))
        return false;
    if (tensor_numel(&m->query_start_loc) < S + 1 || tensor_numel(&m->state_slots) < S ||
        tensor_numel(&m->has_initial_state) < S) {
        cpu_fail(cpu, "%s: metadata arrays are shorter than num_seqs %lld", op, (long long)S);
        return false;
    }
    const int32_t *qsl = m->query_start_loc.data, *slots = m->state_slots.data;
    if (qsl[0] != 0 || qsl[S] != T) {
        cpu_fail(cpu, "%s: query_start_loc must run from 0 to num_tokens %lld", op, (long long)T);
        return false;
    }
    for (int64_t s = 0; s < S; s++) {
        if (qsl[s + 1] < qsl[s]) {
            cpu_fail(cpu, "%s: query_start_loc decreases at sequence %lld", op, (long long)s);
            return false;
        }
        if (slots[s] >= num_slots) {
            cpu_fail(cpu, "%s: sequence %lld has state slot %d, outside the pool's %lld slots", op, (long long)s,
                     slots[s], (long long)num_slots);
            return false;
        }
    }
    unsigned char *seen = calloc((size_t)num_slots + 1, 1);
    if (!seen) {
        cpu_fail(cpu, "%s: out of memory", op);
        return false;
    }
    bool ok = true;
    for (int64_t s = 0; s < S && ok; s++) {
        if (slots[s] < 0) continue;
        if (seen[slots[s]]) {
            cpu_fail(cpu, "%s: state slot %d is given to two sequences of the batch", op, slots[s]);
            ok = false;
        }
        seen[slots[s]] = 1;
    }
    free(seen);
    out->qsl = qsl;
    out->slots = slots;
    out->init = m->has_initial_state.data;
    return ok;
}

/* ---- causal conv1d ---- */

typedef struct conv_ctx {
    la_seqs seqs;
    int64_t C, K;
    const float *x;
    int64_t xs;
    const void *w;          /* (C, K) */
    dtype wdt;
    int64_t ws;
    const void *bias;       /* (C) or NULL */
    dtype bdt;
    bool silu;
    void *state;            /* (num_slots, C, K - 1) */
    dtype sdt;
    float *out;
    int64_t os;
} conv_ctx;

/* Item i = (sequence s, channel c) = s * C + c: one channel of one sequence, token by token. */
static void conv_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const conv_ctx *c = ctx;
    const int64_t C = c->C, K = c->K, W = K - 1;
    for (int64_t item = i0; item < i1; item++) {
        const int64_t s = item / C, ch = item % C;
        const int64_t t0 = c->seqs.qsl[s], t1 = c->seqs.qsl[s + 1];
        if (t1 == t0) continue;  /* no tokens: the slot stays as it was */
        const int32_t slot = c->seqs.slots[s];
        if (slot < 0) {          /* padding: outputs 0, no state */
            for (int64_t t = t0; t < t1; t++) c->out[t * c->os + ch] = 0.0f;
            continue;
        }
        /* win[0 .. W): the W inputs before the next token, oldest first */
        float win[LA_MAX_CONV_K];
        const int64_t base = ((int64_t)slot * C + ch) * W;  /* state[slot, ch, :] */
        for (int64_t j = 0; j < W; j++) win[j] = c->seqs.init[s] ? cpu_load(c->state, c->sdt, base + j) : 0.0f;
        const float b = c->bias ? cpu_load(c->bias, c->bdt, ch) : 0.0f;
        const int64_t wrow = ch * c->ws;  /* w[ch, :] */
        for (int64_t t = t0; t < t1; t++) {
            const float xt = c->x[t * c->xs + ch];  /* read before out (which may be x) is written */
            /* out[t, ch] = b + sum_{j<K} w[ch, j] * x'[t - (K - 1) + j]: the window, then the new input */
            float acc = b;
            for (int64_t j = 0; j < W; j++) acc = CPU_FMA(cpu_load(c->w, c->wdt, wrow + j), win[j], acc);
            acc = CPU_FMA(cpu_load(c->w, c->wdt, wrow + W), xt, acc);
            c->out[t * c->os + ch] = c->silu ? la_silu(acc) : acc;
            for (int64_t j = 0; j + 1 < W; j++) win[j] = win[j + 1];
            win[W - 1] = xt;
        }
        for (int64_t j = 0; j < W; j++) la_store(c->state, c->sdt, base + j, win[j]);
    }
}

// x (T, C), w (C, K), bias (C) or NULL, conv_state (num_slots, C, K - 1), m -> out (T, C); out may be x
void cpu_causal_conv1d(backend *be, const tensor *x, const tensor *w, const tensor *bias, bool silu,
                       tensor *conv_state, const linear_attn_meta *m, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    const char *op = "causal_conv1d";
    if (!cpu_check_mat(cpu, op, "x", x, DTYPE_F32, -1, -1)) return;
    const int64_t T = cpu_rows(x), C = tensor_row_len(x);
    if (!cpu_check_mat(cpu, op, "w", w, CPU_ANY_FLOAT, C, -1)) return;
    const int64_t K = tensor_row_len(w);
    if (K < 2 || K > LA_MAX_CONV_K) {
        cpu_fail(cpu, "%s: kernel width %lld must be 2 to %d", op, (long long)K, LA_MAX_CONV_K);
        return;
    }
    const int64_t pool_dims[2] = {C, K - 1};
    la_seqs seqs;
    if ((bias && !cpu_check_vec(cpu, op, "bias", bias, CPU_ANY_FLOAT, C)) ||
        !la_check_pool(cpu, op, "conv_state", conv_state, 3, pool_dims) ||
        !cpu_check_mat(cpu, op, "out", out, DTYPE_F32, T, C) ||
        !la_check_meta(cpu, op, m, T, cpu_rows(conv_state), &seqs))
        return;
    if (seqs.S == 0 || C == 0) return;
    conv_ctx c = {
        .seqs = seqs, .C = C, .K = K, .x = x->data, .xs = tensor_row_stride(x),
        .w = w->data, .wdt = w->dtype, .ws = tensor_row_stride(w),
        .bias = bias ? bias->data : NULL, .bdt = bias ? bias->dtype : DTYPE_F32, .silu = silu,
        .state = conv_state->data, .sdt = conv_state->dtype, .out = out->data, .os = tensor_row_stride(out),
    };
    tp_run_cost(cpu->pool, seqs.S * C, (double)(T / seqs.S + 1) * (double)K, conv_task, &c);
}

/* ---- gated delta rule (recurrent) ---- */

typedef struct gdr_ctx {
    la_seqs seqs;
    int64_t Hk, Hv, dk, dv, group;  /* group = Hv / Hk v-heads per q/k head */
    float scale;
    bool l2norm;
    const float *q, *k, *v;
    int64_t qs, ks, vs;
    const void *g, *beta;
    dtype gdt, bdt;
    int64_t gs, bs;
    void *state;                    /* (num_slots, Hv, dk, dv) */
    dtype sdt;
    float *out;                     /* (T, Hv * dv) */
    int64_t os;
    float *scratch;                 /* per thread: S (dk * dv) | q~ (dk) | k~ (dk) | u (dv) */
    int64_t scratch_len;
} gdr_ctx;

/* x (n) *= 1 / sqrt(sum(x^2) + 1e-6) (transformers' l2norm), in f32 */
static void la_l2norm(float *x, int64_t n) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss = CPU_FMA(x[i], x[i], ss);
    const float inv = 1.0f / sqrtf(ss + LA_L2NORM_EPS);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* Item i = (sequence s, v-head h) = s * Hv + h: that head's state through the sequence's tokens. */
static void gdr_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const gdr_ctx *c = ctx;
    const int64_t dk = c->dk, dv = c->dv;
    float *S = c->scratch + (int64_t)tid * c->scratch_len;  /* S[i * dv + j]: (dk, dv) */
    float *qt = S + dk * dv, *kt = qt + dk, *u = kt + dk;
    for (int64_t item = i0; item < i1; item++) {
        const int64_t s = item / c->Hv, h = item % c->Hv, kh = h / c->group;
        const int64_t t0 = c->seqs.qsl[s], t1 = c->seqs.qsl[s + 1];
        if (t1 == t0) continue;  /* no tokens: the slot stays as it was */
        const int32_t slot = c->seqs.slots[s];
        if (slot < 0) {          /* padding: outputs 0, no state */
            for (int64_t t = t0; t < t1; t++) memset(c->out + t * c->os + h * dv, 0, (size_t)dv * sizeof(float));
            continue;
        }
        const int64_t base = ((int64_t)slot * c->Hv + h) * dk * dv;  /* state[slot, h, :, :] */
        if (c->seqs.init[s])
            cpu_widen(S, (const unsigned char *)c->state + base * (int64_t)dtype_size(c->sdt), c->sdt, dk * dv);
        else
            memset(S, 0, (size_t)(dk * dv) * sizeof(float));
        for (int64_t t = t0; t < t1; t++) {
            memcpy(qt, c->q + t * c->qs + kh * dk, (size_t)dk * sizeof(float));
            memcpy(kt, c->k + t * c->ks + kh * dk, (size_t)dk * sizeof(float));
            if (c->l2norm) {
                la_l2norm(qt, dk);
                la_l2norm(kt, dk);
            }
            for (int64_t i = 0; i < dk; i++) qt[i] *= c->scale;
            const float decay = expf(cpu_load(c->g, c->gdt, t * c->gs + h));
            const float beta = cpu_load(c->beta, c->bdt, t * c->bs + h);
            const float *vt = c->v + t * c->vs + h * dv;
            /* S *= exp(g) */
            for (int64_t e = 0; e < dk * dv; e++) S[e] *= decay;
            /* u = (v - S^T k~) * beta : the part of v the state does not yet predict, scaled */
            for (int64_t j = 0; j < dv; j++) u[j] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) u[j] = CPU_FMA(S[i * dv + j], kt[i], u[j]);
            for (int64_t j = 0; j < dv; j++) u[j] = (vt[j] - u[j]) * beta;
            /* S += k~ u^T */
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) S[i * dv + j] = CPU_FMA(kt[i], u[j], S[i * dv + j]);
            /* o = S^T q~ */
            float *o = c->out + t * c->os + h * dv;
            for (int64_t j = 0; j < dv; j++) o[j] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) o[j] = CPU_FMA(S[i * dv + j], qt[i], o[j]);
        }
        for (int64_t e = 0; e < dk * dv; e++) la_store(c->state, c->sdt, base + e, S[e]);
    }
}

// q, k (T, Hk * dk), v (T, Hv * dv), g, beta (T, Hv), state (num_slots, Hv, dk, dv), m, p -> out (T, Hv * dv)
void cpu_gated_delta_rule(backend *be, const tensor *q, const tensor *k, const tensor *v, const tensor *g,
                          const tensor *beta, tensor *state, const linear_attn_meta *m, const gdn_params *p,
                          tensor *out) {
    cpu_state *cpu = cpu_of(be);
    const char *op = "gated_delta_rule";
    if (!p) {
        cpu_fail(cpu, "%s: no gdn_params", op);
        return;
    }
    gdn_params shape = *p;
    shape.conv_kernel = 0;             /* not this op's */
    shape.state_dtype = DTYPE_F32;     /* checked on the pool itself */
    if (!cpu_gdn_params_ok(&shape)) {
        cpu_fail(cpu, "%s: bad gdn_params (heads %d / %d of dims %d / %d, scale %g): H_v must be a positive "
                 "multiple of H_k", op, p->num_k_heads, p->num_v_heads, p->head_k_dim, p->head_v_dim,
                 (double)p->scale);
        return;
    }
    const int64_t Hk = p->num_k_heads, Hv = p->num_v_heads, dk = p->head_k_dim, dv = p->head_v_dim;
    if (!cpu_check_mat(cpu, op, "q", q, DTYPE_F32, -1, Hk * dk)) return;
    const int64_t T = cpu_rows(q);
    const int64_t pool_dims[3] = {Hv, dk, dv};
    la_seqs seqs;
    if (!cpu_check_mat(cpu, op, "k", k, DTYPE_F32, T, Hk * dk) ||
        !cpu_check_mat(cpu, op, "v", v, DTYPE_F32, T, Hv * dv) ||
        !cpu_check_mat(cpu, op, "g", g, CPU_ANY_FLOAT, T, Hv) ||
        !cpu_check_mat(cpu, op, "beta", beta, CPU_ANY_FLOAT, T, Hv) ||
        !la_check_pool(cpu, op, "state", state, 4, pool_dims) ||
        !cpu_check_mat(cpu, op, "out", out, DTYPE_F32, T, Hv * dv) ||
        !la_check_meta(cpu, op, m, T, cpu_rows(state), &seqs))
        return;
    if (out->row_stride != 0 && out->row_stride != Hv * dv) {
        cpu_fail(cpu, "%s: out must be contiguous", op);
        return;
    }
    if (seqs.S == 0) return;
    const int64_t scratch_len = dk * dv + 2 * dk + dv;
    float *scratch = malloc((size_t)(scratch_len * cpu->num_threads) * sizeof(float));
    if (!scratch) {
        cpu_fail(cpu, "%s: out of memory for %d state copies of %lld x %lld", op, cpu->num_threads,
                 (long long)dk, (long long)dv);
        return;
    }
    gdr_ctx c = {
        .seqs = seqs, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv, .group = Hv / Hk,
        .scale = p->scale > 0.0f ? p->scale : 1.0f / sqrtf((float)dk), .l2norm = p->qk_l2norm,
        .q = q->data, .k = k->data, .v = v->data,
        .qs = tensor_row_stride(q), .ks = tensor_row_stride(k), .vs = tensor_row_stride(v),
        .g = g->data, .beta = beta->data, .gdt = g->dtype, .bdt = beta->dtype,
        .gs = tensor_row_stride(g), .bs = tensor_row_stride(beta),
        .state = state->data, .sdt = state->dtype, .out = out->data, .os = tensor_row_stride(out),
        .scratch = scratch, .scratch_len = scratch_len,
    };
    /* cost: 4 passes over the (dk, dv) state per token */
    tp_run_cost(cpu->pool, seqs.S * Hv, (double)(T / seqs.S + 1) * 4.0 * (double)(dk * dv), gdr_task, &c);
    free(scratch);
}

/* ---- gated RMSNorm ---- */

typedef struct rng_ctx {
    const float *x, *z;
    int64_t xs, zs;
    const void *w;
    dtype wdt;
    int64_t G, groups;
    float eps;
    float *out;
    int64_t os;
} rng_ctx;

static void rng_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const rng_ctx *c = ctx;
    const int64_t G = c->G;
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t gi = 0; gi < c->groups; gi++) {
            const float *x = c->x + r * c->xs + gi * G, *z = c->z + r * c->zs + gi * G;
            float *o = c->out + r * c->os + gi * G;
            /* rstd = 1 / sqrt(mean(x^2) + eps) over the group */
            float ss = 0.0f;
            for (int64_t i = 0; i < G; i++) ss = CPU_FMA(x[i], x[i], ss);
            const float rstd = 1.0f / sqrtf(ss / (float)G + c->eps);
            /* o = w * (x * rstd) * silu(z) */
            for (int64_t i = 0; i < G; i++) o[i] = cpu_load(c->w, c->wdt, i) * (x[i] * rstd) * la_silu(z[i]);
        }
    }
}

// x, z (T, D), w (G) with D % G == 0 -> out (T, D); out may be x
void cpu_rms_norm_gated(backend *be, const tensor *x, const tensor *z, const tensor *w, float eps, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    const char *op = "rms_norm_gated";
    if (!cpu_check_mat(cpu, op, "x", x, DTYPE_F32, -1, -1) || !cpu_check_vec(cpu, op, "w", w, CPU_ANY_FLOAT, -1))
        return;
    const int64_t T = cpu_rows(x), D = tensor_row_len(x), G = tensor_numel(w);
    if (G <= 0 || D % G != 0) {
        cpu_fail(cpu, "%s: row length %lld is not a multiple of the weight length %lld", op, (long long)D,
                 (long long)G);
        return;
    }
    if (!cpu_check_mat(cpu, op, "z", z, DTYPE_F32, T, D) || !cpu_check_mat(cpu, op, "out", out, DTYPE_F32, T, D))
        return;
    if (T == 0 || D == 0) return;
    rng_ctx c = {x->data, z->data, tensor_row_stride(x), tensor_row_stride(z), w->data, w->dtype, G, D / G, eps,
                 out->data, tensor_row_stride(out)};
    tp_run_cost(cpu->pool, T, 6.0 * (double)D, rng_task, &c);
}

/* ---- the mixer's gating and the attention output gate ---- */

typedef struct gating_ctx {
    const float *a, *b;
    int64_t as, bs, H;
    const void *A_log, *dt_bias;
    dtype adt, ddt;
    float *g, *beta;
} gating_ctx;

/* softplus(x) = log(1 + exp(x)), x itself above torch's threshold 20 (F.softplus(beta=1, threshold=20)) */
static inline float la_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void gating_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const gating_ctx *c = ctx;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < c->H; h++) {
            const float a = c->a[t * c->as + h], b = c->b[t * c->bs + h];
            const float dt = cpu_load(c->dt_bias, c->ddt, h);
            c->g[t * c->H + h] = -expf(cpu_load(c->A_log, c->adt, h)) * la_softplus(a + dt);
            c->beta[t * c->H + h] = 1.0f / (1.0f + expf(-b));
        }
}

// a, b (T, H), A_log, dt_bias (H) -> g (T, H) F32 = -exp(A_log) softplus(a + dt_bias), beta (T, H) = sigmoid(b)
void cpu_gdn_gating(backend *be, const tensor *a, const tensor *b, const tensor *A_log, const tensor *dt_bias,
                    tensor *g, tensor *beta) {
    cpu_state *cpu = cpu_of(be);
    const char *op = "gdn_gating";
    if (!cpu_check_mat(cpu, op, "a", a, DTYPE_F32, -1, -1)) return;
    const int64_t T = cpu_rows(a), H = tensor_row_len(a);
    if (!cpu_check_mat(cpu, op, "b", b, DTYPE_F32, T, H) || !cpu_check_vec(cpu, op, "A_log", A_log, CPU_ANY_FLOAT, H) ||
        !cpu_check_vec(cpu, op, "dt_bias", dt_bias, CPU_ANY_FLOAT, H) ||
        !cpu_check_mat(cpu, op, "g", g, DTYPE_F32, T, H) || !cpu_check_mat(cpu, op, "beta", beta, DTYPE_F32, T, H))
        return;
    if (tensor_row_stride(g) != H || tensor_row_stride(beta) != H) {
        cpu_fail(cpu, "%s: g and beta must be contiguous", op);
        return;
    }
    if (T == 0 || H == 0) return;
    gating_ctx c = {a->data, b->data, tensor_row_stride(a), tensor_row_stride(b), H, A_log->data, dt_bias->data,
                    A_log->dtype, dt_bias->dtype, g->data, beta->data};
    tp_run_cost(cpu->pool, T, 30.0 * (double)H, gating_task, &c);
}

typedef struct smul_ctx {
    float *x;
    const float *gate;
    int64_t xs, gs, D;
} smul_ctx;

static void smul_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const smul_ctx *c = ctx;
    for (int64_t t = t0; t < t1; t++) {
        float *x = c->x + t * c->xs;
        const float *gt = c->gate + t * c->gs;
        for (int64_t d = 0; d < c->D; d++) x[d] *= 1.0f / (1.0f + expf(-gt[d]));
    }
}

// x (T, D) *= sigmoid(gate (T, D)) element by element
void cpu_sigmoid_mul(backend *be, tensor *x, const tensor *gate) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "sigmoid_mul", "x", x, DTYPE_F32, -1, -1) ||
        !cpu_check_mat(cpu, "sigmoid_mul", "gate", gate, DTYPE_F32, cpu_rows(x), tensor_row_len(x)))
        return;
    const int64_t T = cpu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    smul_ctx c = {x->data, gate->data, tensor_row_stride(x), tensor_row_stride(gate), D};
    tp_run_cost(cpu->pool, T, 20.0 * (double)D, smul_task, &c);
}
