/*
 * test_linear_attn.c: the CPU linear-attention ops (causal_conv1d, gated_delta_rule, rms_norm_gated,
 * gdn_gating, sigmoid_mul)
 * against double-precision formulas written here from transformers' definitions
 * (torch_causal_conv1d_update, torch_recurrent_gated_delta_rule, Qwen3NextRMSNormGated), over
 * variable-length batches with per-sequence state slots; chunked prefill and decode steps against one
 * call; fresh / continued / padding sequences; bad arguments and supports().
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_test_util.h"

#define NSLOTS 8   /* slots in every state pool of these tests */
#define MAXS 8     /* sequences in one batch */

/* ---- batches ---- */

typedef struct la_batch {
    int S, T;
    int32_t qsl[MAXS + 1], slots[MAXS], init[MAXS];
} la_batch;

static la_batch batch_of(int S, const int *lens, const int *slots, const int *init) {
    la_batch b = {.S = S};
    for (int s = 0; s < S; s++) {
        b.qsl[s + 1] = b.qsl[s] + lens[s];
        b.slots[s] = slots[s];
        b.init[s] = init[s];
    }
    b.T = b.qsl[S];
    return b;
}

static linear_attn_meta meta_of(la_batch *b) {
    int maxq = 0;
    for (int s = 0; s < b->S; s++)
        if (b->qsl[s + 1] - b->qsl[s] > maxq) maxq = b->qsl[s + 1] - b->qsl[s];
    return (linear_attn_meta){
        .num_seqs = b->S, .num_tokens = b->T, .max_query_len = maxq,
        .query_start_loc = tensor_1d(DTYPE_I32, b->qsl, b->S + 1),
        .state_slots = tensor_1d(DTYPE_I32, b->slots, b->S > 0 ? b->S : 1),
        .has_initial_state = tensor_1d(DTYPE_I32, b->init, b->S > 0 ? b->S : 1),
    };
}

/* The value f takes once stored in dtype dt. */
static double rounded(double f, dtype dt) {
    unsigned char buf[4];
    ct_store(buf, dt, 0, (float)f);
    return ct_load(buf, dt, 0);
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

/* ---- causal conv1d: the reference ---- */

typedef struct conv_case {
    int C, K;
    bool silu;
    dtype wdt, sdt;      /* weight and state dtypes */
    void *w, *bias;      /* (C, K), (C) or NULL in wdt */
    void *pool;          /* (NSLOTS, C, K - 1) in sdt: the op's */
    double *ref_pool;    /* the reference's copy */
} conv_case;

/* One sequence of len tokens x (len rows of C at stride xs) through the conv from state (C, K - 1),
 * as transformers: x' = cat(state, x) along time, out = conv1d(x', w, groups=C) (the last len outputs),
 * SiLU, state = the last K - 1 columns of x'. */
static void conv_ref_seq(const conv_case *cc, const float *x, int64_t xs, int len, double *state, double *out) {
    const int C = cc->C, K = cc->K, W = K - 1;
    double *xp = malloc(sizeof(double) * (size_t)(W + len));
    for (int c = 0; c < C; c++) {
        for (int i = 0; i < W; i++) xp[i] = state[c * W + i];
        for (int t = 0; t < len; t++) xp[W + t] = x[t * xs + c];
        for (int t = 0; t < len; t++) {
            double acc = cc->bias ? ct_load(cc->bias, cc->wdt, c) : 0.0;
            for (int j = 0; j < K; j++) acc += ct_load(cc->w, cc->wdt, (int64_t)c * K + j) * xp[t + j];
            out[t * C + c] = cc->silu ? silu_d(acc) : acc;
        }
        for (int i = 0; i < W; i++) state[c * W + i] = rounded(xp[len + i], cc->sdt);
    }
    free(xp);
}

static void conv_case_init(conv_case *cc, int C, int K, bool silu, bool bias, dtype wdt, dtype sdt) {
    *cc = (conv_case){.C = C, .K = K, .silu = silu, .wdt = wdt, .sdt = sdt};
    cc->w = malloc((size_t)C * K * 4);
    for (int64_t i = 0; i < (int64_t)C * K; i++) ct_store(cc->w, wdt, i, ct_uniform() * 0.6f);
    if (bias) {
        cc->bias = malloc((size_t)C * 4);
        for (int c = 0; c < C; c++) ct_store(cc->bias, wdt, c, ct_uniform() * 0.3f);
    }
    const int64_t n = (int64_t)NSLOTS * C * (K - 1);
    cc->pool = malloc((size_t)n * 4);
    cc->ref_pool = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {  /* old contents everywhere: a fresh sequence must not read them */
        ct_store(cc->pool, sdt, i, ct_uniform() * 5.0f);
        cc->ref_pool[i] = ct_load(cc->pool, sdt, i);
    }
}

static void conv_case_free(conv_case *cc) {
    free(cc->w);
    free(cc->bias);
    free(cc->pool);
    free(cc->ref_pool);
}

static tensor conv_pool_tensor(conv_case *cc) {
    int64_t shape[3] = {NSLOTS, cc->C, cc->K - 1};
    return tensor_make(cc->sdt, cc->pool, 3, shape);
}

/* Runs one conv call over batch b with inputs x (T rows at stride xs, columns 0 .. C) and checks the
 * outputs and every slot of the pool against the reference (which it advances). in_place: out = x. */
static void conv_step(backend *be, conv_case *cc, la_batch *b, float *x, int64_t xs, bool in_place, float *out_keep) {
    const int C = cc->C, W = cc->K - 1;
    double *want = calloc((size_t)(b->T * C + 1), sizeof(double));
    for (int s = 0; s < b->S; s++) {
        const int t0 = b->qsl[s], len = b->qsl[s + 1] - b->qsl[s];
        if (len == 0 || b->slots[s] < 0) continue;  /* padding: zeros; empty: nothing */
        double *st = cc->ref_pool + (int64_t)b->slots[s] * C * W;
        if (!b->init[s])
            for (int i = 0; i < C * W; i++) st[i] = 0.0;
        conv_ref_seq(cc, x + (int64_t)t0 * xs, xs, len, st, want + (int64_t)t0 * C);
    }
    tensor xt = tensor_2d(DTYPE_F32, x, b->T, C);
    xt.row_stride = xs;
    float *obuf = in_place ? x : malloc((size_t)(b->T * C + 1) * sizeof(float));
    tensor ot = tensor_2d(DTYPE_F32, obuf, b->T, C);
    if (in_place) ot.row_stride = xs;
    const int64_t os = in_place ? xs : C;
    int64_t wshape[2] = {C, cc->K};
    tensor wt = tensor_make(cc->wdt, cc->w, 2, wshape), bt = tensor_1d(cc->wdt, cc->bias, C);
    tensor pool = conv_pool_tensor(cc);
    linear_attn_meta m = meta_of(b);
    if (!in_place)  /* padding rows must be written as 0 */
        for (int64_t i = 0; i < (int64_t)b->T * C; i++) obuf[i] = 1234.0f;
    be->ops->causal_conv1d(be, &xt, &wt, cc->bias ? &bt : NULL, cc->silu, &pool, &m, &ot);
    CHECK_OK(be->ops->synchronize(be));
    int bad = 0;
    for (int64_t t = 0; t < b->T; t++)
        for (int c = 0; c < C; c++) {
            const double got = obuf[t * os + c], ref = want[t * C + c];
            if (!(fabs(got - ref) <= 2e-5 * (1.0 + fabs(ref))) && bad++ < 5)
                CHECK_MSG(0, "conv out[%lld, %d] = %.9g, want %.9g", (long long)t, c, got, ref);
        }
    CHECK(bad == 0);
    bad = 0;
    for (int64_t i = 0; i < (int64_t)NSLOTS * C * W; i++)
        if (ct_load(cc->pool, cc->sdt, i) != cc->ref_pool[i] && bad++ < 5)
            CHECK_MSG(0, "conv state %lld = %.9g, want %.9g", (long long)i, ct_load(cc->pool, cc->sdt, i),
                      cc->ref_pool[i]);
    CHECK(bad == 0);
    if (out_keep)
        for (int64_t t = 0; t < b->T; t++) memcpy(out_keep + t * C, obuf + t * os, (size_t)C * sizeof(float));
    if (!in_place) free(obuf);
    free(want);
}

/* Lengths 1, 3, 17, 64 (fresh and continued, the length-1 one fresh), K = 4, on every dtype mix,
 * strided and in place, with and without bias and SiLU; then K = 2 and K = 7. */
static void test_conv_varlen(backend *be) {
    const int lens[4] = {1, 3, 17, 64}, slots[4] = {5, 0, 2, 7}, init[4] = {0, 1, 0, 1};
    for (int v = 0; v < 6; v++) {
        const int K = v < 4 ? 4 : (v == 4 ? 2 : 7), C = 37;
        const dtype wdt = CT_WDTYPES[v % 3], sdt = v == 3 ? DTYPE_BF16 : (v == 5 ? DTYPE_F16 : DTYPE_F32);
        conv_case cc;
        conv_case_init(&cc, C, K, v != 1, v % 2 == 0, wdt, sdt);
        la_batch b = batch_of(4, lens, slots, init);
        const int64_t xs = C + 11;  /* x: a column slice of a wider projection output */
        float *x = malloc((size_t)(b.T * xs) * sizeof(float));
        ct_fill(x, b.T * xs, 2.0f);
        conv_step(be, &cc, &b, x, xs, false, NULL);
        /* a second call continues every sequence (decode: one token each) */
        const int one[4] = {1, 1, 1, 1}, cont[4] = {1, 1, 1, 1};
        la_batch d = batch_of(4, one, slots, cont);
        conv_step(be, &cc, &d, x, xs, false, NULL);
        /* in place, reordered sequences */
        const int lens2[3] = {17, 2, 5}, slots2[3] = {2, 5, 1}, init2[3] = {1, 1, 0};
        la_batch b2 = batch_of(3, lens2, slots2, init2);
        ct_fill(x, b2.T * xs, 2.0f);
        conv_step(be, &cc, &b2, x, xs, true, NULL);
        free(x);
        conv_case_free(&cc);
    }
}

/* ---- gated delta rule: the reference ---- */

typedef struct gdr_case {
    gdn_params p;
    dtype sdt;
    void *pool;          /* (NSLOTS, Hv, dk, dv) in sdt: the op's */
    double *ref_pool;
} gdr_case;

typedef struct gdr_inputs {
    int T;
    float *q, *k, *v, *g, *beta;  /* rows at strides qs (q and k), vs, gs (g and beta) */
    int64_t qs, vs, gs;
} gdr_inputs;

static int64_t gdr_state_len(const gdn_params *p) { return (int64_t)p->num_v_heads * p->head_k_dim * p->head_v_dim; }

/* transformers' l2norm: x * rsqrt(sum(x^2) + 1e-6) */
static void l2norm_d(double *x, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    for (int i = 0; i < n; i++) x[i] /= sqrt(ss + 1e-6);
}

/* One sequence (tokens t0 .. t0 + len of in) through torch_recurrent_gated_delta_rule from state
 * (Hv, dk, dv): per token and v-head, S *= exp(g); kv_mem = sum over dk of S * k; delta = (v - kv_mem)
 * * beta; S += k delta^T; o = sum over dk of S * q (q scaled after its l2norm). out rows of Hv * dv. */
static void gdr_ref_seq(const gdr_case *gc, const gdr_inputs *in, int t0, int len, double *state, double *out) {
    const gdn_params *p = &gc->p;
    const int Hk = p->num_k_heads, Hv = p->num_v_heads, dk = p->head_k_dim, dv = p->head_v_dim;
    const double scale = p->scale > 0.0f ? p->scale : 1.0 / sqrt((double)dk);
    double *q = malloc(sizeof(double) * dk), *k = malloc(sizeof(double) * dk), *kv = malloc(sizeof(double) * dv);
    for (int h = 0; h < Hv; h++) {
        const int kh = h / (Hv / Hk);  /* repeat_interleave of the q/k heads */
        double *S = state + (int64_t)h * dk * dv;
        for (int t = t0; t < t0 + len; t++) {
            for (int i = 0; i < dk; i++) {
                q[i] = in->q[t * in->qs + kh * dk + i];
                k[i] = in->k[t * in->qs + kh * dk + i];
            }
            if (p->qk_l2norm) {
                l2norm_d(q, dk);
                l2norm_d(k, dk);
            }
            for (int i = 0; i < dk; i++) q[i] *= scale;
            const double decay = exp((double)in->g[t * in->gs + h]), beta = in->beta[t * in->gs + h];
            const float *v = in->v + t * in->vs + h * dv;
            for (int e = 0; e < dk * dv; e++) S[e] *= decay;
            for (int j = 0; j < dv; j++) {
                kv[j] = 0.0;
                for (int i = 0; i < dk; i++) kv[j] += S[i * dv + j] * k[i];
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) S[i * dv + j] += k[i] * (v[j] - kv[j]) * beta;
            for (int j = 0; j < dv; j++) {
                double o = 0.0;
                for (int i = 0; i < dk; i++) o += S[i * dv + j] * q[i];
                out[(int64_t)t * Hv * dv + h * dv + j] = o;
            }
        }
        for (int e = 0; e < dk * dv; e++) S[e] = rounded(S[e], gc->sdt);
    }
    free(q);
    free(k);
    free(kv);
}

static void gdr_case_init(gdr_case *gc, int Hk, int Hv, int dk, int dv, bool l2, float scale, dtype sdt) {
    *gc = (gdr_case){.p = {.num_k_heads = Hk, .num_v_heads = Hv, .head_k_dim = dk, .head_v_dim = dv,
                           .scale = scale, .qk_l2norm = l2, .conv_kernel = 4, .state_dtype = sdt},
                     .sdt = sdt};
    const int64_t n = NSLOTS * gdr_state_len(&gc->p);
    gc->pool = malloc((size_t)n * 4);
    gc->ref_pool = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        ct_store(gc->pool, sdt, i, ct_uniform() * 0.5f);
        gc->ref_pool[i] = ct_load(gc->pool, sdt, i);
    }
}

static void gdr_case_free(gdr_case *gc) {
    free(gc->pool);
    free(gc->ref_pool);
}

/* Random inputs for T tokens, in column slices of wider buffers: g = -exp(A_log) * softplus(a + dt_bias)
 * shaped (a decay in (0, 1]), beta = sigmoid(b); without the l2norm k is kept small so the delta rule
 * stays stable (|k|^2 beta < 2). */
static gdr_inputs gdr_inputs_make(const gdn_params *p, int T) {
    gdr_inputs in = {.T = T};
    in.qs = (int64_t)p->num_k_heads * p->head_k_dim + 3;
    in.vs = (int64_t)p->num_v_heads * p->head_v_dim + 5;
    in.gs = p->num_v_heads + 1;
    const size_t rows = (size_t)(T > 0 ? T : 1);
    in.q = malloc(rows * in.qs * sizeof(float));
    in.k = malloc(rows * in.qs * sizeof(float));
    in.v = malloc(rows * in.vs * sizeof(float));
    in.g = malloc(rows * in.gs * sizeof(float));
    in.beta = malloc(rows * in.gs * sizeof(float));
    const float kscale = p->qk_l2norm ? 1.0f : 1.0f / sqrtf((float)p->head_k_dim);
    ct_fill(in.q, T * in.qs, 1.0f);
    ct_fill(in.k, T * in.qs, kscale);
    ct_fill(in.v, T * in.vs, 1.0f);
    for (int64_t i = 0; i < T * in.gs; i++) {
        const double a = ct_uniform() * 3.0, softplus = log1p(exp(a + 1.0));
        in.g[i] = (float)(-exp(ct_uniform() * 1.5 - 1.0) * softplus * 0.3);
        in.beta[i] = (float)(1.0 / (1.0 + exp(-3.0 * ct_uniform())));
    }
    return in;
}

static void gdr_inputs_free(gdr_inputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->g);
    free(in->beta);
}

static tensor gdr_pool_tensor(gdr_case *gc) {
    int64_t shape[4] = {NSLOTS, gc->p.num_v_heads, gc->p.head_k_dim, gc->p.head_v_dim};
    return tensor_make(gc->sdt, gc->pool, 4, shape);
}

/* Views of rows [t0, t0 + T) of in as the op's tensors. */
static void gdr_tensors(const gdn_params *p, const gdr_inputs *in, int t0, int T, tensor *q, tensor *k, tensor *v,
                        tensor *g, tensor *beta) {
    const int64_t qk = (int64_t)p->num_k_heads * p->head_k_dim, vd = (int64_t)p->num_v_heads * p->head_v_dim;
    *q = tensor_2d(DTYPE_F32, in->q + t0 * in->qs, T, qk);
    *k = tensor_2d(DTYPE_F32, in->k + t0 * in->qs, T, qk);
    *v = tensor_2d(DTYPE_F32, in->v + t0 * in->vs, T, vd);
    *g = tensor_2d(DTYPE_F32, in->g + t0 * in->gs, T, p->num_v_heads);
    *beta = tensor_2d(DTYPE_F32, in->beta + t0 * in->gs, T, p->num_v_heads);
    q->row_stride = k->row_stride = in->qs;
    v->row_stride = in->vs;
    g->row_stride = beta->row_stride = in->gs;
}

/* Runs one gated_delta_rule call over batch b and checks outputs and every slot against the reference. */
static void gdr_step(backend *be, gdr_case *gc, la_batch *b, const gdr_inputs *in) {
    const gdn_params *p = &gc->p;
    const int64_t od = (int64_t)p->num_v_heads * p->head_v_dim, SL = gdr_state_len(p);
    double *want = calloc((size_t)(b->T * od + 1), sizeof(double));
    for (int s = 0; s < b->S; s++) {
        const int t0 = b->qsl[s], len = b->qsl[s + 1] - b->qsl[s];
        if (len == 0 || b->slots[s] < 0) continue;
        double *st = gc->ref_pool + (int64_t)b->slots[s] * SL;
        if (!b->init[s])
            for (int64_t i = 0; i < SL; i++) st[i] = 0.0;
        gdr_ref_seq(gc, in, t0, len, st, want);
    }
    float *out = malloc((size_t)(b->T * od + 1) * sizeof(float));
    for (int64_t i = 0; i < b->T * od; i++) out[i] = 1234.0f;
    tensor q, k, v, g, beta, ot = tensor_2d(DTYPE_F32, out, b->T, od), pool = gdr_pool_tensor(gc);
    gdr_tensors(p, in, 0, b->T, &q, &k, &v, &g, &beta);
    linear_attn_meta m = meta_of(b);
    be->ops->gated_delta_rule(be, &q, &k, &v, &g, &beta, &pool, &m, p, &ot);
    CHECK_OK(be->ops->synchronize(be));
    int bad = 0;
    for (int64_t i = 0; i < b->T * od; i++)
        if (!(fabs(out[i] - want[i]) <= 1e-4 * (1.0 + fabs(want[i]))) && bad++ < 5)
            CHECK_MSG(0, "gdr out[%lld] = %.9g, want %.9g", (long long)i, out[i], want[i]);
    CHECK(bad == 0);
    /* the pool: F32 within f32 rounding of the double reference; F16 / BF16 within one unit of rounding */
    const double tol = gc->sdt == DTYPE_F32 ? 1e-4 : (gc->sdt == DTYPE_F16 ? 2e-3 : 1.6e-2);
    bad = 0;
    for (int64_t i = 0; i < NSLOTS * SL; i++) {
        const double got = ct_load(gc->pool, gc->sdt, i), ref = gc->ref_pool[i];
        if (!(fabs(got - ref) <= tol * (1.0 + fabs(ref))) && bad++ < 5)
            CHECK_MSG(0, "gdr state %lld = %.9g, want %.9g", (long long)i, got, ref);
        gc->ref_pool[i] = got;  /* carry the op's rounding forward, so later steps compare like with like */
    }
    CHECK(bad == 0);
    free(out);
    free(want);
}

/* Lengths 1, 3, 17, 64, grouped heads (H_v = 3 H_k), d_k != d_v (a transposed layout would fail),
 * l2norm on and off, the default and an explicit scale, F32 / BF16 / F16 state. */
static void test_gdr_varlen(backend *be) {
    const int lens[4] = {1, 3, 17, 64}, slots[4] = {5, 0, 2, 7}, init[4] = {0, 1, 0, 1};
    for (int v = 0; v < 5; v++) {
        gdr_case gc;
        const dtype sdt = v == 3 ? DTYPE_BF16 : (v == 4 ? DTYPE_F16 : DTYPE_F32);
        gdr_case_init(&gc, 2, v == 2 ? 2 : 6, 16, 8, v != 1, v == 2 ? 0.3f : 0.0f, sdt);
        la_batch b = batch_of(4, lens, slots, init);
        gdr_inputs in = gdr_inputs_make(&gc.p, b.T);
        gdr_step(be, &gc, &b, &in);
        const int one[4] = {1, 1, 1, 1}, cont[4] = {1, 1, 1, 1}, order[4] = {7, 2, 5, 0};
        la_batch d = batch_of(4, one, order, cont);
        gdr_step(be, &gc, &d, &in);
        gdr_inputs_free(&in);
        gdr_case_free(&gc);
    }
}

/* ---- schedules: chunked prefill and decode steps equal one call ---- */

/* Sequences A (64 tokens, slot 6), B (25, slot 1), C (7, slot 3), D (1, slot 4). Schedule 0: one call
 * of all four from zeros. Schedule 1: chunks and decode steps over several calls, the sequences in
 * changing orders, C leaving after its last token (its slot must then stay as it was), each later chunk
 * continuing from the slot. Outputs and final states must be identical (f32 states: bitwise). */
#define NSEQ 4
static const int SEQ_LEN[NSEQ] = {64, 25, 7, 1}, SEQ_SLOT[NSEQ] = {6, 1, 3, 4};
/* steps of schedule 1: {seq, tokens} pairs, -1 ends a step */
static const int SCHEDULE[][9] = {
    {0, 5, 1, 20, 2, 1, -1},
    {2, 1, 0, 1, 1, 1, 3, 1, -1},        /* decode steps (D is its whole prompt) */
    {1, 1, 2, 1, 0, 1, -1},
    {0, 17, 2, 4, 1, 1, -1},             /* C ends here */
    {1, 1, 0, 40, -1},
    {1, 1, -1},
    {-1},                                /* an empty batch */
};
#define NSTEPS ((int)(sizeof SCHEDULE / sizeof SCHEDULE[0]))

/* Builds step `st` of schedule 1 (or the one-call schedule 0 for st < 0): the batch, and for each of
 * its tokens the (sequence, position) it comes from. done[] tracks tokens already run. */
static la_batch schedule_step(int st, int *done, int *src_seq, int *src_pos) {
    int S = 0, lens[MAXS], slots[MAXS], init[MAXS], T = 0;
    for (int i = 0; i < 2 * MAXS; i += 2) {
        const int s = st < 0 ? (i / 2 < NSEQ ? i / 2 : -1) : SCHEDULE[st][i];
        if (s < 0) break;
        const int n = st < 0 ? SEQ_LEN[s] : SCHEDULE[st][i + 1];
        lens[S] = n;
        slots[S] = SEQ_SLOT[s];
        init[S] = done[s] > 0;
        for (int j = 0; j < n; j++) {
            src_seq[T] = s;
            src_pos[T++] = done[s] + j;
        }
        done[s] += n;
        S++;
    }
    return batch_of(S, lens, slots, init);
}

static void test_conv_schedule(backend *be) {
    const int C = 21, K = 4;
    float *seqx[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        seqx[s] = malloc((size_t)SEQ_LEN[s] * C * sizeof(float));
        ct_fill(seqx[s], (int64_t)SEQ_LEN[s] * C, 1.5f);
    }
    conv_case cc[2];
    float *outs[2][NSEQ];
    for (int sch = 0; sch < 2; sch++) {
        ct_seed(77);  /* the same weights and old pool contents for both schedules */
        conv_case_init(&cc[sch], C, K, true, true, DTYPE_BF16, DTYPE_F32);
        for (int s = 0; s < NSEQ; s++) outs[sch][s] = calloc((size_t)SEQ_LEN[s] * C, sizeof(float));
        int done[NSEQ] = {0}, src_seq[128], src_pos[128];
        for (int st = sch == 0 ? -1 : 0; st < (sch == 0 ? 0 : NSTEPS); st++) {
            la_batch b = schedule_step(st, done, src_seq, src_pos);
            float *x = malloc((size_t)(b.T + 1) * C * sizeof(float)), *o = malloc((size_t)(b.T + 1) * C * sizeof(float));
            for (int t = 0; t < b.T; t++) memcpy(x + t * C, seqx[src_seq[t]] + src_pos[t] * C, (size_t)C * sizeof(float));
            conv_step(be, &cc[sch], &b, x, C, false, o);
            for (int t = 0; t < b.T; t++)
                memcpy(outs[sch][src_seq[t]] + src_pos[t] * C, o + t * C, (size_t)C * sizeof(float));
            free(x);
            free(o);
        }
        for (int s = 0; s < NSEQ; s++) CHECK(done[s] == SEQ_LEN[s]);
    }
    for (int s = 0; s < NSEQ; s++)
        CHECK_MSG(!memcmp(outs[0][s], outs[1][s], (size_t)SEQ_LEN[s] * C * sizeof(float)), "conv sequence %d", s);
    CHECK(!memcmp(cc[0].pool, cc[1].pool, (size_t)NSLOTS * C * (K - 1) * sizeof(float)));
    for (int sch = 0; sch < 2; sch++) {
        for (int s = 0; s < NSEQ; s++) free(outs[sch][s]);
        conv_case_free(&cc[sch]);
    }
    for (int s = 0; s < NSEQ; s++) free(seqx[s]);
}

static void test_gdr_schedule(backend *be) {
    gdn_params shape = {.num_k_heads = 2, .num_v_heads = 4, .head_k_dim = 12, .head_v_dim = 10, .qk_l2norm = true};
    gdr_inputs seqin[NSEQ];
    for (int s = 0; s < NSEQ; s++) seqin[s] = gdr_inputs_make(&shape, SEQ_LEN[s]);
    const int64_t od = (int64_t)shape.num_v_heads * shape.head_v_dim;
    gdr_case gc[2];
    float *outs[2][NSEQ];
    for (int sch = 0; sch < 2; sch++) {
        ct_seed(78);
        gdr_case_init(&gc[sch], 2, 4, 12, 10, true, 0.0f, DTYPE_F32);
        for (int s = 0; s < NSEQ; s++) outs[sch][s] = calloc((size_t)SEQ_LEN[s] * od, sizeof(float));
        int done[NSEQ] = {0}, src_seq[128], src_pos[128];
        for (int st = sch == 0 ? -1 : 0; st < (sch == 0 ? 0 : NSTEPS); st++) {
            la_batch b = schedule_step(st, done, src_seq, src_pos);
            gdr_inputs in = gdr_inputs_make(&shape, b.T);  /* the same strides as seqin's */
            for (int t = 0; t < b.T; t++) {
                const gdr_inputs *si = &seqin[src_seq[t]];
                const int p = src_pos[t];
                memcpy(in.q + t * in.qs, si->q + p * si->qs, (size_t)in.qs * sizeof(float));
                memcpy(in.k + t * in.qs, si->k + p * si->qs, (size_t)in.qs * sizeof(float));
                memcpy(in.v + t * in.vs, si->v + p * si->vs, (size_t)in.vs * sizeof(float));
                memcpy(in.g + t * in.gs, si->g + p * si->gs, (size_t)in.gs * sizeof(float));
                memcpy(in.beta + t * in.gs, si->beta + p * si->gs, (size_t)in.gs * sizeof(float));
            }
            float *o = malloc((size_t)(b.T + 1) * od * sizeof(float));
            tensor q, k, v, g, beta, ot = tensor_2d(DTYPE_F32, o, b.T, od), pool = gdr_pool_tensor(&gc[sch]);
            gdr_tensors(&shape, &in, 0, b.T, &q, &k, &v, &g, &beta);
            linear_attn_meta m = meta_of(&b);
            be->ops->gated_delta_rule(be, &q, &k, &v, &g, &beta, &pool, &m, &gc[sch].p, &ot);
            CHECK_OK(be->ops->synchronize(be));
            for (int t = 0; t < b.T; t++)
                memcpy(outs[sch][src_seq[t]] + src_pos[t] * od, o + t * od, (size_t)od * sizeof(float));
            free(o);
            gdr_inputs_free(&in);
        }
    }
    for (int s = 0; s < NSEQ; s++)
        CHECK_MSG(!memcmp(outs[0][s], outs[1][s], (size_t)SEQ_LEN[s] * od * sizeof(float)), "gdr sequence %d", s);
    CHECK(!memcmp(gc[0].pool, gc[1].pool, (size_t)(NSLOTS * gdr_state_len(&shape)) * sizeof(float)));
    /* and schedule 0 against the double reference (from zeros, one call) */
    double *st = calloc((size_t)gdr_state_len(&shape), sizeof(double));
    for (int s = 0; s < NSEQ; s++) {
        double *want = calloc((size_t)SEQ_LEN[s] * od, sizeof(double));
        for (int64_t i = 0; i < gdr_state_len(&shape); i++) st[i] = 0.0;
        gdr_ref_seq(&gc[0], &seqin[s], 0, SEQ_LEN[s], st, want);
        int bad = 0;
        for (int64_t i = 0; i < SEQ_LEN[s] * od; i++) bad += !(fabs(outs[1][s][i] - want[i]) <= 1e-4 * (1.0 + fabs(want[i])));
        CHECK_MSG(bad == 0, "gdr sequence %d: %d outputs off the reference", s, bad);
        free(want);
    }
    free(st);
    for (int sch = 0; sch < 2; sch++) {
        for (int s = 0; s < NSEQ; s++) free(outs[sch][s]);
        gdr_case_free(&gc[sch]);
    }
    for (int s = 0; s < NSEQ; s++) gdr_inputs_free(&seqin[s]);
}

/* ---- padding, empty batches, fresh slots ---- */

/* A padding sequence (slot -1) gets zero outputs and touches no slot; a zero-length sequence leaves its
 * slot (even with a fresh flag); T = 0 with S = 0 does nothing. conv_step / gdr_step check the pools. */
static void test_edges(backend *be) {
    const int lens[4] = {3, 0, 2, 1}, slots[4] = {1, 4, -1, 0}, init[4] = {1, 0, 0, 0};
    la_batch b = batch_of(4, lens, slots, init);
    conv_case cc;
    conv_case_init(&cc, 9, 4, true, false, DTYPE_F32, DTYPE_F32);
    float x[6 * 9];
    ct_fill(x, 6 * 9, 1.0f);
    conv_step(be, &cc, &b, x, 9, false, NULL);
    la_batch empty = batch_of(0, NULL, NULL, NULL);
    conv_step(be, &cc, &empty, x, 9, false, NULL);
    const int zl[2] = {0, 0}, zs[2] = {2, 3}, zi[2] = {0, 1};
    la_batch zero_len = batch_of(2, zl, zs, zi);
    conv_step(be, &cc, &zero_len, x, 9, false, NULL);
    conv_case_free(&cc);

    gdr_case gc;
    gdr_case_init(&gc, 1, 2, 8, 4, true, 0.0f, DTYPE_F32);
    gdr_inputs in = gdr_inputs_make(&gc.p, 6);
    gdr_step(be, &gc, &b, &in);
    gdr_step(be, &gc, &empty, &in);
    gdr_step(be, &gc, &zero_len, &in);
    /* a fresh sequence of one token: the state is beta k~ v^T, whatever was in the slot (gdr_step checks o) */
    const int one = 1, slot = 3, fresh = 0;
    la_batch f = batch_of(1, &one, &slot, &fresh);
    gdr_step(be, &gc, &f, &in);
    double kk = 0.0;
    for (int i = 0; i < 8; i++) kk += (double)in.k[i] * in.k[i];
    const double s00 = in.beta[0] * in.k[0] / sqrt(kk + 1e-6) * in.v[0];  /* S[0][0] of head 0 */
    CHECK_NEAR(ct_load(gc.pool, DTYPE_F32, 3 * gdr_state_len(&gc.p)), s00, 1e-6);
    gdr_inputs_free(&in);
    gdr_case_free(&gc);
}

/* ---- gated RMSNorm ---- */

/* transformers' Qwen3NextRMSNormGated in double: w * (x * rsqrt(mean(x^2) + eps)) * silu(z) per group */
static void test_rms_norm_gated(backend *be) {
    const int T = 5, H = 4, G = 24, D = H * G;
    const float eps = 1e-6f;
    for (int v = 0; v < 4; v++) {
        const dtype wdt = CT_WDTYPES[v % 3];
        const bool in_place = v == 3;
        const int64_t xs = D + 7, zs = 2 * D + 1;  /* z: a slice of a wider buffer */
        float *x = malloc((size_t)T * xs * sizeof(float)), *z = malloc((size_t)T * zs * sizeof(float));
        float *o = malloc((size_t)T * D * sizeof(float));
        unsigned char w[G * 4];
        ct_fill(x, T * xs, 3.0f);
        ct_fill(z, T * zs, 4.0f);
        for (int i = 0; i < G; i++) ct_store(w, wdt, i, 1.0f + ct_uniform() * 0.5f);
        double *want = malloc(sizeof(double) * T * D);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                double ss = 0.0;
                for (int i = 0; i < G; i++) ss += (double)x[t * xs + h * G + i] * x[t * xs + h * G + i];
                const double rstd = 1.0 / sqrt(ss / G + eps);
                for (int i = 0; i < G; i++)
                    want[t * D + h * G + i] = ct_load(w, wdt, i) * (x[t * xs + h * G + i] * rstd) *
                                              silu_d(z[t * zs + D + h * G + i]);
            }
        tensor xt = tensor_2d(DTYPE_F32, x, T, D), zt = tensor_2d(DTYPE_F32, z + D, T, D), wt = tensor_1d(wdt, w, G);
        xt.row_stride = xs;
        zt.row_stride = zs;
        tensor ot = in_place ? xt : tensor_2d(DTYPE_F32, o, T, D);
        be->ops->rms_norm_gated(be, &xt, &zt, &wt, eps, &ot);
        CHECK_OK(be->ops->synchronize(be));
        const float *got = in_place ? x : o;
        const int64_t gs = in_place ? xs : D;
        int bad = 0;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                bad += !(fabs(got[t * gs + i] - want[t * D + i]) <= 1e-5 * (1.0 + fabs(want[t * D + i])));
        CHECK_MSG(bad == 0, "rms_norm_gated variant %d: %d elements off", v, bad);
        free(x);
        free(z);
        free(o);
        free(want);
    }
    /* T = 0 */
    float dummy[24] = {0};
    tensor e = tensor_2d(DTYPE_F32, dummy, 0, 24), wt = tensor_1d(DTYPE_F32, dummy, 24);
    be->ops->rms_norm_gated(be, &e, &e, &wt, eps, &e);
    CHECK_OK(be->ops->synchronize(be));
}

/* gdn_gating: g = -exp(A_log) softplus(a + dt_bias) (x above 20), beta = sigmoid(b), from strided a and
 * b (column slices of in_proj's output); sigmoid_mul: x *= sigmoid(gate) with a strided gate. */
static void test_gating(backend *be) {
    const int T = 6, H = 5, W = 2 * H + 3; /* a, b: columns [3, 3 + H) and [3 + H, 3 + 2H) of a (T, W) buffer */
    for (int v = 0; v < 3; v++) {
        const dtype pdt = CT_WDTYPES[v];
        float *ab = malloc(sizeof(float) * T * W), g[T * H], beta[T * H];
        unsigned char A_log[H * 4], dt_bias[H * 4];
        ct_fill(ab, T * W, 4.0f);
        ab[3] = 30.0f; /* a + dt_bias above softplus's threshold */
        for (int h = 0; h < H; h++) {
            ct_store(A_log, pdt, h, ct_uniform() * 2.0f);
            ct_store(dt_bias, pdt, h, ct_uniform());
        }
        tensor a = tensor_2d(DTYPE_F32, ab + 3, T, H), b = tensor_2d(DTYPE_F32, ab + 3 + H, T, H);
        a.row_stride = b.row_stride = W;
        tensor al = tensor_1d(pdt, A_log, H), dt = tensor_1d(pdt, dt_bias, H);
        tensor gt = tensor_2d(DTYPE_F32, g, T, H), bt = tensor_2d(DTYPE_F32, beta, T, H);
        be->ops->gdn_gating(be, &a, &b, &al, &dt, &gt, &bt);
        CHECK_OK(be->ops->synchronize(be));
        int bad = 0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const double x = ab[t * W + 3 + h] + ct_load(dt_bias, pdt, h);
                const double wg = -exp(ct_load(A_log, pdt, h)) * (x > 20 ? x : log1p(exp(x)));
                const double wb = 1.0 / (1.0 + exp(-(double)ab[t * W + 3 + H + h]));
                bad += !(fabs(g[t * H + h] - wg) <= 1e-5 * (1.0 + fabs(wg)));
                bad += !(fabs(beta[t * H + h] - wb) <= 1e-6);
            }
        CHECK_MSG(bad == 0, "gdn_gating variant %d: %d values off", v, bad);
        /* sigmoid_mul over the same buffer: x (T, H) contiguous, gate = the b columns */
        float x[T * H], x0[T * H];
        ct_fill(x, T * H, 3.0f);
        memcpy(x0, x, sizeof x);
        tensor xt = tensor_2d(DTYPE_F32, x, T, H);
        be->ops->sigmoid_mul(be, &xt, &b);
        CHECK_OK(be->ops->synchronize(be));
        bad = 0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const double want = x0[t * H + h] / (1.0 + exp(-(double)ab[t * W + 3 + H + h]));
                bad += !(fabs(x[t * H + h] - want) <= 1e-6 * (1.0 + fabs(want)));
            }
        CHECK_MSG(bad == 0, "sigmoid_mul variant %d: %d values off", v, bad);
        free(ab);
    }
}

/* ---- bad arguments and supports ---- */

static void test_bad_args(backend *be) {
    conv_case cc;
    conv_case_init(&cc, 4, 4, true, false, DTYPE_F32, DTYPE_F32);
    float x[8 * 4] = {0}, o[8 * 4];
    int64_t wshape[2] = {4, 4};
    tensor xt = tensor_2d(DTYPE_F32, x, 4, 4), ot = tensor_2d(DTYPE_F32, o, 4, 4);
    tensor wt = tensor_make(DTYPE_F32, cc.w, 2, wshape), pool = conv_pool_tensor(&cc);
    const int lens[2] = {2, 2}, ok_slots[2] = {0, 1}, init[2] = {0, 0};
    la_batch b = batch_of(2, lens, ok_slots, init);
    linear_attn_meta m = meta_of(&b);
    be->ops->causal_conv1d(be, &xt, &wt, NULL, true, &pool, &m, &ot);
    CHECK_OK(be->ops->synchronize(be));
    struct { int slot0, slot1, last; const char *what; } bads[] = {
        {0, NSLOTS, 4, "outside the pool"}, {2, 2, 4, "two sequences"}, {0, 1, 3, "query_start_loc"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        la_batch bb = b;
        bb.slots[0] = bads[i].slot0;
        bb.slots[1] = bads[i].slot1;
        bb.qsl[2] = bads[i].last;
        linear_attn_meta mm = meta_of(&bb);
        mm.num_tokens = 4;
        be->ops->causal_conv1d(be, &xt, &wt, NULL, true, &pool, &mm, &ot);
        EXPECT_ERR(be->ops->synchronize(be), VLLM_ERR_BACKEND, "causal_conv1d", bads[i].what);
    }
    int64_t bad_shape[3] = {NSLOTS, 4, 4};  /* K columns instead of K - 1 */
    tensor bad_pool = tensor_make(DTYPE_F32, cc.pool, 3, bad_shape);
    be->ops->causal_conv1d(be, &xt, &wt, NULL, true, &bad_pool, &m, &ot);
    EXPECT_ERR(be->ops->synchronize(be), VLLM_ERR_BACKEND, "causal_conv1d", "conv_state");
    conv_case_free(&cc);

    gdr_case gc;
    gdr_case_init(&gc, 2, 4, 4, 4, true, 0.0f, DTYPE_F32);
    gdr_inputs in = gdr_inputs_make(&gc.p, 4);
    tensor q, k, v, g, beta, gp = gdr_pool_tensor(&gc);
    float go[4 * 16];
    tensor got = tensor_2d(DTYPE_F32, go, 4, 16);
    gdr_tensors(&gc.p, &in, 0, 4, &q, &k, &v, &g, &beta);
    gdn_params p = gc.p;
    p.num_v_heads = 3;  /* not a multiple of H_k */
    be->ops->gated_delta_rule(be, &q, &k, &v, &g, &beta, &gp, &m, &p, &got);
    EXPECT_ERR(be->ops->synchronize(be), VLLM_ERR_BACKEND, "gated_delta_rule", "multiple");
    gp.dtype = DTYPE_I32;
    be->ops->gated_delta_rule(be, &q, &k, &v, &g, &beta, &gp, &m, &gc.p, &got);
    EXPECT_ERR(be->ops->synchronize(be), VLLM_ERR_BACKEND, "gated_delta_rule", "state");
    gdr_inputs_free(&in);
    gdr_case_free(&gc);

    float w[3] = {1, 1, 1}, xz[8] = {0};
    tensor x2 = tensor_2d(DTYPE_F32, xz, 2, 4), w3 = tensor_1d(DTYPE_F32, w, 3);
    be->ops->rms_norm_gated(be, &x2, &x2, &w3, 1e-6f, &x2);
    EXPECT_ERR(be->ops->synchronize(be), VLLM_ERR_BACKEND, "rms_norm_gated", "multiple");
}

static void test_supports(backend *be) {
    gdn_params p = {.num_k_heads = 16, .num_v_heads = 32, .head_k_dim = 128, .head_v_dim = 128,
                    .qk_l2norm = true, .conv_kernel = 4, .state_dtype = DTYPE_F32};
    CHECK(backend_supports(be, BE_OP_GATED_DELTA_NET, &p) == BE_NATIVE);
    p.state_dtype = DTYPE_BF16;
    CHECK(backend_supports(be, BE_OP_GATED_DELTA_NET, &p) == BE_NATIVE);
    CHECK(backend_require(be, BE_OP_GATED_DELTA_NET, &p, "Qwen3NextForCausalLM linear attention") == VLLM_OK);
    p.state_dtype = DTYPE_I32;
    CHECK(backend_supports(be, BE_OP_GATED_DELTA_NET, &p) == BE_UNSUPPORTED);
    p.state_dtype = DTYPE_F32;
    p.num_v_heads = 24;  /* not a multiple of 16 */
    CHECK(backend_supports(be, BE_OP_GATED_DELTA_NET, &p) == BE_UNSUPPORTED);
    p.num_v_heads = 32;
    p.conv_kernel = 1;
    CHECK(backend_supports(be, BE_OP_GATED_DELTA_NET, &p) == BE_UNSUPPORTED);
    CHECK(backend_supports(be, BE_OP_GATED_DELTA_NET, NULL) == BE_UNSUPPORTED);
    CHECK(!strcmp(be_op_name(BE_OP_GATED_DELTA_NET), "gated_delta_net"));
}

int main(void) {
    ct_seed(13);
    backend *be[CT_NBE];
    ct_backends(be);
    for (int i = 0; i < CT_NBE; i++) {
        test_conv_varlen(be[i]);
        test_gdr_varlen(be[i]);
        test_conv_schedule(be[i]);
        test_gdr_schedule(be[i]);
        test_edges(be[i]);
        test_rms_norm_gated(be[i]);
        test_gating(be[i]);
    }
    test_bad_args(be[0]);
    test_supports(be[0]);
    ct_backends_free(be);
    TEST_END();
}
