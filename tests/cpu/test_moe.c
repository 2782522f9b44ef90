/*
 * test_moe.c: the CPU mixture-of-experts ops against a naive double
 * reference written here (softmax routing, top k with ties to the lower
 * id, optional renormalisation; every expert computed densely for every
 * token, then the top-k combination): k = 1, 2, 8 of E = 4, 8, 64, SiLU and
 * GELU-tanh, F32 / BF16 / F16 weights, T = 1 and 37 (strided x and y),
 * accumulate on and off; a batch where every token picks the same two
 * experts (the others get no token, and a NaN-filled unused expert must not
 * leak), 1 vs N threads bit for bit; gpt-oss's experts: per-expert biases and
 * the clamped SwiGLU (alpha, limit); moe_route alone (exact ids and
 * weights, ties), sigmoid_gate; DeepSeek's routings (V2's grouped softmax,
 * V3's sigmoid with the correction bias and groups: hand-computed cases where
 * the groups change the choice, ties, renormalisation, scaling, and random
 * rows at the V2 / V3 / V2-Lite / Kimi-K2 shapes against a sort-based
 * reference; bad routing fields refused); DeepSeek's plain shared experts as extra always-chosen
 * experts (moe_params.num_shared: moe_route's ids / weights layout after the routed k, which stay as
 * without them; moe_experts over experts sliced from a dense shared MLP equal to the routed sum plus
 * that MLP computed apart, with the routed scaling left off the shared part); bad arguments refused
 * with a sticky error and nothing written; supports() and the op name.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"

/* ---- the reference ---- */

static double ref_act(be_act act, double x) {
    if (act == BE_ACT_GELU_TANH) return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return x / (1.0 + exp(-x));  /* SiLU */
}

/* ids (k), w (k) from one row of logits (E): softmax in double, top k (best
 * first, equal: lower id first), renormalised when asked */
static void ref_route(const float *logits, int E, int k, bool renorm, int32_t *ids, double *w) {
    double mx = -INFINITY, sum = 0.0;
    double *p = malloc((size_t)E * sizeof *p);
    char *taken = calloc((size_t)E, 1);
    for (int e = 0; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < E; e++) sum += p[e] = exp(logits[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= sum;
    double s = 0.0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
        taken[best] = 1;
        ids[j] = best;
        s += w[j] = p[best];
    }
    if (renorm)
        for (int j = 0; j < k; j++) w[j] /= s;
    free(p);
    free(taken);
}

/* ---- moe_route alone ---- */

static void test_route_exact(backend *be) {
    enum { T = 3, E = 8, K = 3 };
    /* row 0: distinct; row 1: a three-way tie at 2.0 (ids 1, 4, 6) above the
     * rest; row 2: all equal (ids 0, 1, 2, weights 1/8 or 1/3) */
    float logits[T * E] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -3.0f, 0.0f, 1.0f,
                           0.0f, 2.0f,  0.0f, -1.0f, 2.0f, 1.0f,  2.0f, 0.5f,
                           1.0f, 1.0f,  1.0f, 1.0f,  1.0f, 1.0f,  1.0f, 1.0f};
    const int32_t want[T][K] = {{2, 4, 7}, {1, 4, 6}, {0, 1, 2}};
    for (int renorm = 0; renorm < 2; renorm++) {
        int32_t ids[T * K];
        float w[T * K];
        memset(ids, 0xff, sizeof ids);
        tensor L = tensor_2d(DTYPE_F32, logits, T, E), I = tensor_2d(DTYPE_I32, ids, T, K),
               W = tensor_2d(DTYPE_F32, w, T, K);
        moe_params p = {.num_experts = E, .top_k = K, .scoring = BE_MOE_SOFTMAX, .renormalize = renorm};
        be->ops->moe_route(be, &L, &p, &I, &W);
        CHECK_OK(be->ops->synchronize(be));
        for (int t = 0; t < T; t++) {
            int32_t rid[K];
            double rw[K];
            ref_route(logits + t * E, E, K, renorm, rid, rw);
            for (int j = 0; j < K; j++) {
                CHECK_MSG(ids[t * K + j] == want[t][j] && rid[j] == want[t][j], "row %d slot %d: id %d want %d",
                          t, j, ids[t * K + j], want[t][j]);
                CHECK_NEAR(w[t * K + j], rw[j], 1e-6);
            }
        }
        /* the all-equal row: exactly 1/8 each, or 1/3 renormalised */
        CHECK_NEAR(w[2 * K], renorm ? 1.0 / 3 : 0.125, 1e-7);
    }
}

/* random logits (also as BF16), T = 37, E = 64, k = 8: ids exact, weights to 1e-6 */
static void test_route_random(backend *be) {
    enum { T = 37, E = 64, K = 8 };
    static float logits[T * E];
    static uint16_t lb[T * E];
    int32_t ids[T * K];
    float w[T * K];
    ct_fill(logits, T * E, 4.0f);
    for (int i = 0; i < T * E; i++) {
        lb[i] = f32_to_bf16(logits[i]);
    }
    for (int bf = 0; bf < 2; bf++) {
        float lf[T * E];
        for (int i = 0; i < T * E; i++) lf[i] = bf ? bf16_to_f32(lb[i]) : logits[i];
        tensor L = bf ? tensor_2d(DTYPE_BF16, lb, T, E) : tensor_2d(DTYPE_F32, logits, T, E);
        tensor I = tensor_2d(DTYPE_I32, ids, T, K), W = tensor_2d(DTYPE_F32, w, T, K);
        moe_params p = {.num_experts = E, .top_k = K, .renormalize = true};
        be->ops->moe_route(be, &L, &p, &I, &W);
        CHECK_OK(be->ops->synchronize(be));
        int bad = 0;
        for (int t = 0; t < T; t++) {
            int32_t rid[K];
            double rw[K];
            ref_route(lf + t * E, E, K, true, rid, rw);
            for (int j = 0; j < K; j++)
                bad += ids[t * K + j] != rid[j] || fabs(w[t * K + j] - rw[j]) > 1e-6;
        }
        CHECK_MSG(bad == 0, "%d routing mismatches (bf16 logits %d)", bad, bf);
    }
}

/* ---- DeepSeek's routings (BE_MOE_SOFTMAX_GROUPED, BE_MOE_SIGMOID_NOAUX_TC) ---- */

/* A separate reference, written as transformers' tensors are (modeling_deepseek_v2.py's
 * DeepseekV2Moe.route_tokens_to_experts, modeling_deepseek_v3.py's DeepseekV3TopkRouter): the scores in
 * f32 (softmax via double sums, sigmoid as 1 / (1 + exp(-x))), a group mask from sorting the group
 * scores, masked_fill(0.0), then a stable sort of all E by (choice score desc, id asc) for the top k. */
typedef struct ds_rank {
    double v;
    int id;
} ds_rank;

static int ds_rank_cmp(const void *a, const void *b) {
    const ds_rank *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

static void ref_route_ds(const float *logits, const float *bias, int E, int k, be_moe_scoring scoring, int G, int kg,
                         bool renorm, float scale, int32_t *ids, double *w) {
    float *s = malloc((size_t)E * sizeof *s), *c = malloc((size_t)E * sizeof *c);
    ds_rank *r = malloc((size_t)E * sizeof *r);
    if (scoring == BE_MOE_SIGMOID_NOAUX_TC) {
        for (int e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-logits[e]));
            c[e] = s[e] + (bias ? bias[e] : 0.0f);
        }
    } else {
        double mx = -INFINITY, sum = 0.0;
        for (int e = 0; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
        for (int e = 0; e < E; e++) sum += exp(logits[e] - mx);
        for (int e = 0; e < E; e++) c[e] = s[e] = (float)(exp(logits[e] - mx) / sum);
    }
    if (G > 1) {
        const int per = E / G;
        ds_rank *gr = malloc((size_t)G * sizeof *gr);
        for (int g = 0; g < G; g++) {
            /* the group's values sorted, descending: max (V2) or the two largest summed (V3) */
            for (int i = 0; i < per; i++) r[i] = (ds_rank){c[g * per + i], i};
            qsort(r, (size_t)per, sizeof *r, ds_rank_cmp);
            gr[g] = (ds_rank){scoring == BE_MOE_SIGMOID_NOAUX_TC ? (double)(float)(r[0].v + r[1].v) : r[0].v, g};
        }
        qsort(gr, (size_t)G, sizeof *gr, ds_rank_cmp);
        for (int j = kg; j < G; j++) /* the groups not kept: masked_fill(0.0) */
            for (int i = 0; i < per; i++) c[gr[j].id * per + i] = 0.0f;
        free(gr);
    }
    for (int e = 0; e < E; e++) r[e] = (ds_rank){c[e], e};
    qsort(r, (size_t)E, sizeof *r, ds_rank_cmp);
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        ids[j] = r[j].id;
        sum += w[j] = scoring == BE_MOE_SIGMOID_NOAUX_TC ? s[r[j].id] : c[r[j].id];
    }
    for (int j = 0; j < k; j++) w[j] = (renorm ? w[j] / (sum + 1e-20) : w[j]) * (scale > 0.0f ? scale : 1.0f);
    free(s);
    free(c);
    free(r);
}

/* moe_route on one row set: ids as want (when given) and as the reference, weights within 1e-6 (relative) */
static int route_ds_check(backend *be, const float *logits, const float *bias, int T, int E, int k, be_moe_scoring sc,
                          int G, int kg, bool renorm, float scale, const int32_t *want) {
    int32_t *ids = malloc((size_t)T * k * sizeof *ids);
    float *w = malloc((size_t)T * k * sizeof *w);
    memset(ids, 0xff, (size_t)T * k * sizeof *ids);
    tensor L = tensor_2d(DTYPE_F32, (void *)logits, T, E), I = tensor_2d(DTYPE_I32, ids, T, k),
           W = tensor_2d(DTYPE_F32, w, T, k), B = tensor_1d(DTYPE_F32, (void *)bias, E);
    moe_params p = {.num_experts = E, .top_k = k, .scoring = sc, .renormalize = renorm, .num_groups = G,
                    .topk_groups = kg, .routed_scaling = scale, .score_bias = bias ? &B : NULL};
    CHECK(be->ops->supports(be, BE_OP_MOE, &p) == BE_NATIVE);
    be->ops->moe_route(be, &L, &p, &I, &W);
    CHECK_OK(be->ops->synchronize(be));
    int bad = 0;
    int32_t *rid = malloc((size_t)k * sizeof *rid);
    double *rw = malloc((size_t)k * sizeof *rw);
    for (int t = 0; t < T; t++) {
        ref_route_ds(logits + (size_t)t * E, bias, E, k, sc, G, kg, renorm, scale, rid, rw);
        for (int j = 0; j < k; j++) {
            const int32_t got = ids[t * k + j];
            const bool ok = got == rid[j] && (!want || got == want[t * k + j]) &&
                            fabs(w[t * k + j] - rw[j]) <= 1e-6 * (1.0 + fabs(rw[j]));
            if (!ok && bad < 5)
                fprintf(stderr, "  scoring %d G %d kg %d k %d: row %d slot %d: id %d (ref %d, want %d) w %.9g (ref %.9g)\n",
                        (int)sc, G, kg, k, t, j, got, rid[j], want ? want[t * k + j] : -1, w[t * k + j], rw[j]);
            bad += !ok;
        }
    }
    free(rid);
    free(rw);
    free(ids);
    free(w);
    return bad;
}

/* logit(s): the logit whose sigmoid is s */
static float lgt(double s) { return (float)log(s / (1.0 - s)); }

static void test_route_deepseek_exact(backend *be) {
    enum { E = 8, G = 4 };
    /* V3, groups of 2: s = {0.9, 0.1 | 0.6, 0.6 | 0.55, 0.55 | 0.2, 0.2}; top-2 sums 1.0, 1.2, 1.1, 0.4:
     * groups 1 and 2 kept, so the top 2 are 2 and 3 (a tie: the lower id first), where plain top-k
     * takes 0 and 2 */
    const float l3[E] = {lgt(0.9), lgt(0.1), lgt(0.6), lgt(0.6), lgt(0.55), lgt(0.55), lgt(0.2), lgt(0.2)};
    {
        const int32_t want[2] = {2, 3}, plain[2] = {0, 2};
        int bad = route_ds_check(be, l3, NULL, 1, E, 2, BE_MOE_SIGMOID_NOAUX_TC, G, 2, true, 2.5f, want);
        bad += route_ds_check(be, l3, NULL, 1, E, 2, BE_MOE_SIGMOID_NOAUX_TC, 0, 0, true, 2.5f, plain);
        bad += route_ds_check(be, l3, NULL, 1, E, 2, BE_MOE_SIGMOID_NOAUX_TC, 1, 1, false, 0.0f, plain);
        CHECK_MSG(bad == 0, "V3 groups: %d mismatches", bad);
    }
    /* the weights: renormalised 0.5 each, times 2.5; not renormalised: s (0.6), times 1 */
    for (int renorm = 0; renorm < 2; renorm++) {
        int32_t ids[2];
        float w[2];
        tensor L = tensor_2d(DTYPE_F32, (void *)l3, 1, E), I = tensor_2d(DTYPE_I32, ids, 1, 2),
               W = tensor_2d(DTYPE_F32, w, 1, 2);
        moe_params p = {.num_experts = E, .top_k = 2, .scoring = BE_MOE_SIGMOID_NOAUX_TC, .renormalize = renorm,
                        .num_groups = G, .topk_groups = 2, .routed_scaling = renorm ? 2.5f : 0.0f};
        be->ops->moe_route(be, &L, &p, &I, &W);
        CHECK_OK(be->ops->synchronize(be));
        CHECK(ids[0] == 2 && ids[1] == 3);
        CHECK_NEAR(w[0], renorm ? 1.25 : 0.6, 1e-6);
        CHECK_NEAR(w[1], renorm ? 1.25 : 0.6, 1e-6);
    }
    /* the correction bias moves the choice, not the weights: bias[7] = 1 makes group 3's sum 1.4
     * (kept with group 1), the top 2 are 7 (c 1.2) and 2 (c 0.6); weights s = 0.2 and 0.6, so
     * renormalised 0.25 and 0.75 (times 1) */
    {
        float bias[E] = {0, 0, 0, 0, 0, 0, 0, 1.0f};
        const int32_t want[2] = {7, 2};
        CHECK(route_ds_check(be, l3, bias, 1, E, 2, BE_MOE_SIGMOID_NOAUX_TC, G, 2, true, 0.0f, want) == 0);
        int32_t ids[2];
        float w[2];
        tensor L = tensor_2d(DTYPE_F32, (void *)l3, 1, E), I = tensor_2d(DTYPE_I32, ids, 1, 2),
               W = tensor_2d(DTYPE_F32, w, 1, 2), B = tensor_1d(DTYPE_F32, bias, E);
        moe_params p = {.num_experts = E, .top_k = 2, .scoring = BE_MOE_SIGMOID_NOAUX_TC, .renormalize = true,
                        .num_groups = G, .topk_groups = 2, .score_bias = &B};
        be->ops->moe_route(be, &L, &p, &I, &W);
        CHECK_OK(be->ops->synchronize(be));
        CHECK(ids[0] == 7 && ids[1] == 2);
        CHECK_NEAR(w[0], 0.25, 1e-6);
        CHECK_NEAR(w[1], 0.75, 1e-6);
        /* the same bias as BF16 (exact: 0 and 1) */
        uint16_t bb[E];
        for (int e = 0; e < E; e++) bb[e] = f32_to_bf16(bias[e]);
        tensor BB = tensor_1d(DTYPE_BF16, bb, E);
        p.score_bias = &BB;
        ids[0] = ids[1] = -1;
        be->ops->moe_route(be, &L, &p, &I, &W);
        CHECK_OK(be->ops->synchronize(be));
        CHECK(ids[0] == 7 && ids[1] == 2);
        CHECK_NEAR(w[0], 0.25, 1e-6);
    }
    /* ties: every logit equal, so every group ties: groups 0 and 1 kept (lower ids), ids 0, 1, 2 */
    {
        const float same[E] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
        const int32_t want[3] = {0, 1, 2};
        CHECK(route_ds_check(be, same, NULL, 1, E, 3, BE_MOE_SIGMOID_NOAUX_TC, G, 2, true, 0.0f, want) == 0);
        CHECK(route_ds_check(be, same, NULL, 1, E, 3, BE_MOE_SOFTMAX_GROUPED, G, 2, false, 0.0f, want) == 0);
        /* a group tie broken by the lower group id, then the expert order inside: groups {1, 3} tie at
         * the top (max 2.0), group 0 (1.5) loses */
        const float gt[E] = {1.5f, 0.0f, 2.0f, -1.0f, 0.0f, 0.0f, -1.0f, 2.0f};
        const int32_t want2[2] = {2, 7};
        CHECK(route_ds_check(be, gt, NULL, 1, E, 2, BE_MOE_SOFTMAX_GROUPED, G, 2, false, 0.0f, want2) == 0);
        const int32_t want3[3] = {2, 7, 0}; /* 3 groups: group 0 joins, its 1.5 is next */
        CHECK(route_ds_check(be, gt, NULL, 1, E, 3, BE_MOE_SOFTMAX_GROUPED, G, 3, false, 0.0f, want3) == 0);
    }
    /* V2, groups of 2 by their max: {3, -5 | 2, 2 | 2.5, -5 | 1, 1}: groups 0 and 2 kept; top 3 = 0, 4 and
     * then 1 (p of -5, tied with 5: the lower id), where plain top-k takes 0, 4, 2. Weights: the softmax
     * over all 8 (not over the kept ones), times 16 (DeepSeek-V2's routed_scaling_factor) */
    {
        const float l2[E] = {3.0f, -5.0f, 2.0f, 2.0f, 2.5f, -5.0f, 1.0f, 1.0f};
        const int32_t want[3] = {0, 4, 1}, plain[3] = {0, 4, 2};
        int bad = route_ds_check(be, l2, NULL, 1, E, 3, BE_MOE_SOFTMAX_GROUPED, G, 2, false, 16.0f, want);
        bad += route_ds_check(be, l2, NULL, 1, E, 3, BE_MOE_SOFTMAX_GROUPED, G, 2, true, 0.0f, want);
        bad += route_ds_check(be, l2, NULL, 1, E, 3, BE_MOE_SOFTMAX_GROUPED, 0, 0, false, 16.0f, plain);
        CHECK_MSG(bad == 0, "V2 groups: %d mismatches", bad);
        int32_t ids[3];
        float w[3];
        tensor L = tensor_2d(DTYPE_F32, (void *)l2, 1, E), I = tensor_2d(DTYPE_I32, ids, 1, 3),
               W = tensor_2d(DTYPE_F32, w, 1, 3);
        moe_params p = {.num_experts = E, .top_k = 3, .scoring = BE_MOE_SOFTMAX_GROUPED, .num_groups = G,
                        .topk_groups = 2, .routed_scaling = 16.0f};
        be->ops->moe_route(be, &L, &p, &I, &W);
        CHECK_OK(be->ops->synchronize(be));
        double z = 0.0;
        for (int e = 0; e < E; e++) z += exp(l2[e] - 3.0);
        CHECK(ids[0] == 0 && ids[1] == 4 && ids[2] == 1);
        CHECK_NEAR(w[0], 16.0 / z, 1e-5);
        CHECK_NEAR(w[1], 16.0 * exp(-0.5) / z, 1e-5);
        CHECK_NEAR(w[2], 16.0 * exp(-8.0) / z, 1e-5);
    }
    /* BE_MOE_SOFTMAX with a routed scaling: the weights times 2, nothing else */
    {
        const float l[E] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -3.0f, 0.0f, 1.0f};
        int32_t ids[2][3];
        float w[2][3];
        for (int i = 0; i < 2; i++) {
            tensor L = tensor_2d(DTYPE_F32, (void *)l, 1, E), I = tensor_2d(DTYPE_I32, ids[i], 1, 3),
                   W = tensor_2d(DTYPE_F32, w[i], 1, 3);
            moe_params p = {.num_experts = E, .top_k = 3, .renormalize = true, .routed_scaling = i ? 2.0f : 0.0f};
            be->ops->moe_route(be, &L, &p, &I, &W);
            CHECK_OK(be->ops->synchronize(be));
        }
        for (int j = 0; j < 3; j++) {
            CHECK(ids[0][j] == ids[1][j]);
            CHECK(w[1][j] == 2.0f * w[0][j]);
        }
    }
}

/* random logits (and correction biases) against ref_route_ds at DeepSeek's shapes: ids exact, weights */
static void test_route_deepseek_random(backend *be) {
    static const struct {
        int E, k, G, kg;
        be_moe_scoring sc;
        bool renorm, bias;
        float scale;
    } cs[] = {
        {256, 8, 8, 4, BE_MOE_SIGMOID_NOAUX_TC, true, true, 2.5f},    /* DeepSeek-V3 / R1 */
        {160, 6, 8, 3, BE_MOE_SOFTMAX_GROUPED, false, false, 16.0f},  /* DeepSeek-V2 */
        {64, 6, 0, 0, BE_MOE_SOFTMAX_GROUPED, false, false, 1.0f},    /* DeepSeek-V2-Lite (greedy) */
        {384, 8, 1, 1, BE_MOE_SIGMOID_NOAUX_TC, true, true, 2.827f},  /* Kimi-K2 */
        {64, 4, 16, 2, BE_MOE_SIGMOID_NOAUX_TC, false, true, 0.0f},   /* groups of 4, little kept */
        {32, 8, 4, 1, BE_MOE_SOFTMAX_GROUPED, true, false, 0.0f},     /* k = the kept experts */
        {16, 1, 8, 1, BE_MOE_SIGMOID_NOAUX_TC, true, false, 0.0f},    /* k 1: weight 1 */
    };
    enum { T = 37 };
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++) {
        const int E = cs[ci].E;
        float *l = malloc((size_t)T * E * sizeof *l), *b = malloc((size_t)E * sizeof *b);
        ct_fill(l, (int64_t)T * E, 4.0f);
        ct_fill(b, E, 0.5f);
        /* a few rows of BF16-rounded logits (repeated values: ties) */
        for (int i = 0; i < 5 * E; i++) l[i] = bf16_to_f32(f32_to_bf16(l[i]));
        int bad = route_ds_check(be, l, cs[ci].bias ? b : NULL, T, E, cs[ci].k, cs[ci].sc, cs[ci].G, cs[ci].kg,
                                 cs[ci].renorm, cs[ci].scale, NULL);
        CHECK_MSG(bad == 0, "case %zu (E %d k %d groups %d / %d scoring %d): %d mismatches", ci, E, cs[ci].k, cs[ci].G,
                  cs[ci].kg, (int)cs[ci].sc, bad);
        /* all rows one integer pattern: many exact ties among groups and experts */
        for (int i = 0; i < T * E; i++) l[i] = (float)((int)(ct_u32() % 5) - 2);
        bad = route_ds_check(be, l, NULL, T, E, cs[ci].k, cs[ci].sc, cs[ci].G, cs[ci].kg, cs[ci].renorm, cs[ci].scale,
                             NULL);
        CHECK_MSG(bad == 0, "case %zu ties: %d mismatches", ci, bad);
        free(l);
        free(b);
    }
}

/* the routing fields refused (both moe_route and supports) with nothing written */
static void test_route_deepseek_bad(backend *be) {
    enum { T = 2, E = 8, K = 2 };
    float logits[T * E], bias[E + 1] = {0};
    ct_fill(logits, T * E, 1.0f);
    tensor L = tensor_2d(DTYPE_F32, logits, T, E), B = tensor_1d(DTYPE_F32, bias, E),
           B9 = tensor_1d(DTYPE_F32, bias, E + 1), BI = tensor_1d(DTYPE_I32, bias, E);
    const be_moe_scoring S = BE_MOE_SOFTMAX, SG = BE_MOE_SOFTMAX_GROUPED, V3 = BE_MOE_SIGMOID_NOAUX_TC;
    const struct {
        moe_params p;
        const char *why;
    } bads[] = {
        {{.num_experts = E, .top_k = K, .scoring = S, .num_groups = 4, .topk_groups = 2}, "takes no groups"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .num_groups = 3, .topk_groups = 2}, "divide"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .num_groups = 4, .topk_groups = 0}, "topk_groups"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .num_groups = 4, .topk_groups = 5}, "topk_groups"},
        {{.num_experts = E, .top_k = 3, .scoring = SG, .num_groups = 4, .topk_groups = 1}, "fewer than top_k"},
        {{.num_experts = E, .top_k = K, .scoring = V3, .num_groups = 8, .topk_groups = 4}, "2 experts"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .num_groups = -1}, "negative"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .routed_scaling = -1.0f}, "routed_scaling"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .routed_scaling = NAN}, "routed_scaling"},
        {{.num_experts = E, .top_k = K, .scoring = V3, .routed_scaling = INFINITY}, "routed_scaling"},
        {{.num_experts = E, .top_k = K, .scoring = SG, .score_bias = &B}, "score_bias"},
        {{.num_experts = E, .top_k = K, .scoring = S, .score_bias = &B}, "score_bias"},
        {{.num_experts = E, .top_k = K, .scoring = V3, .score_bias = &B9}, "score_bias"},
        {{.num_experts = E, .top_k = K, .scoring = V3, .score_bias = &BI}, "score_bias"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof *bads; i++) {
        const moe_params *p = &bads[i].p;
        CHECK_MSG(be->ops->supports(be, BE_OP_MOE, p) == BE_UNSUPPORTED, "case %zu", i);
        int32_t ids[T * 3];
        float w[T * 3];
        memset(ids, 0x7f, sizeof ids);
        tensor I = tensor_2d(DTYPE_I32, ids, T, p->top_k), W = tensor_2d(DTYPE_F32, w, T, p->top_k);
        be->ops->moe_route(be, &L, p, &I, &W);
        CHECK_MSG(be->ops->synchronize(be) != VLLM_OK, "case %zu", i);
        CHECK_MSG(strstr(vllm_last_error(), bads[i].why) != NULL, "case %zu: %s", i, vllm_last_error());
        CHECK(ids[0] == 0x7f7f7f7f);
    }
    /* the good neighbours: V3 with groups of 2, a bias; num_groups 1 with any topk_groups */
    moe_params ok = {.num_experts = E, .top_k = K, .scoring = V3, .num_groups = 4, .topk_groups = 1, .score_bias = &B};
    CHECK(be->ops->supports(be, BE_OP_MOE, &ok) == BE_NATIVE);
    moe_params ok1 = {.num_experts = E, .top_k = K, .scoring = SG, .num_groups = 1, .topk_groups = 7};
    CHECK(be->ops->supports(be, BE_OP_MOE, &ok1) == BE_NATIVE);
}

/* ---- DeepSeek's plain shared experts (moe_params.num_shared) ---- */

/* moe_route with ns shared experts: ids / w (T, k + ns) (written into a column view of a wider buffer):
 * the first k as the same call without them (bit for bit), then E .. E + ns - 1 with weight exactly 1 (no
 * routed scaling, no renormalisation); the buffer's other columns untouched */
static void test_route_shared(backend *be) {
    static const struct {
        int E, k, G, kg;
        be_moe_scoring sc;
        bool renorm, bias;
        float scale;
    } cs[] = {
        {8, 2, 0, 0, BE_MOE_SOFTMAX, true, false, 0.0f},
        {64, 6, 0, 0, BE_MOE_SOFTMAX_GROUPED, false, false, 1.0f},     /* DeepSeek-V2-Lite: 2 shared */
        {160, 6, 8, 3, BE_MOE_SOFTMAX_GROUPED, false, false, 16.0f},  /* DeepSeek-V2: 2 shared */
        {256, 8, 8, 4, BE_MOE_SIGMOID_NOAUX_TC, true, true, 2.5f},    /* DeepSeek-V3: 1 shared */
    };
    enum { T = 37, PAD = 3 };
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++)
        for (int ns = 1; ns <= 3; ns++) {
            const int E = cs[ci].E, k = cs[ci].k, kw = k + ns, bw = kw + PAD;
            float *l = malloc((size_t)T * E * sizeof *l), *b = malloc((size_t)E * sizeof *b);
            ct_fill(l, (int64_t)T * E, 4.0f);
            ct_fill(b, E, 0.5f);
            int32_t *id0 = malloc((size_t)T * k * sizeof *id0), *idb = malloc((size_t)T * bw * sizeof *idb);
            float *w0 = malloc((size_t)T * k * sizeof *w0), *wb = malloc((size_t)T * bw * sizeof *wb);
            memset(idb, 0x7f, (size_t)T * bw * sizeof *idb);
            memset(wb, 0x7f, (size_t)T * bw * sizeof *wb);
            tensor L = tensor_2d(DTYPE_F32, l, T, E), B = tensor_1d(DTYPE_F32, b, E);
            tensor I0 = tensor_2d(DTYPE_I32, id0, T, k), W0 = tensor_2d(DTYPE_F32, w0, T, k);
            tensor IBf = tensor_2d(DTYPE_I32, idb, T, bw), WBf = tensor_2d(DTYPE_F32, wb, T, bw);
            tensor IB = tensor_cols(&IBf, 1, kw), WB = tensor_cols(&WBf, 2, kw);
            moe_params p = {.num_experts = E, .top_k = k, .scoring = cs[ci].sc, .renormalize = cs[ci].renorm,
                            .num_groups = cs[ci].G, .topk_groups = cs[ci].kg, .routed_scaling = cs[ci].scale,
                            .score_bias = cs[ci].bias ? &B : NULL};
            be->ops->moe_route(be, &L, &p, &I0, &W0);
            p.num_shared = ns;
            CHECK(be->ops->supports(be, BE_OP_MOE, &p) == BE_NATIVE);
            be->ops->moe_route(be, &L, &p, &IB, &WB);
            CHECK_OK(be->ops->synchronize(be));
            int bad = 0, pad_bad = 0;
            for (int t = 0; t < T; t++) {
                const int32_t *ir = idb + t * bw + 1;
                const float *wr = wb + t * bw + 2;
                for (int j = 0; j < k; j++) bad += ir[j] != id0[t * k + j] || wr[j] != w0[t * k + j];
                for (int j = 0; j < ns; j++) bad += ir[k + j] != E + j || wr[k + j] != 1.0f;
                pad_bad += idb[t * bw] != 0x7f7f7f7f;
                for (int c = kw + 1; c < bw; c++) pad_bad += idb[t * bw + c] != 0x7f7f7f7f;
                for (int c = 0; c < bw; c++)
                    if (c < 2 || c >= kw + 2) pad_bad += memcmp(&wb[t * bw + c], &(uint32_t){0x7f7f7f7fu}, 4) != 0;
            }
            CHECK_MSG(bad == 0 && pad_bad == 0, "case %zu (E %d k %d scoring %d) with %d shared: %d wrong, %d padding",
                      ci, E, k, (int)cs[ci].sc, ns, bad, pad_bad);
            free(l);
            free(b);
            free(id0);
            free(idb);
            free(w0);
            free(wb);
        }
    /* refused: num_shared negative (supports and the op, nothing written); ids / w of width k with ns shared */
    enum { E = 8, K = 2 };
    float logits[2 * E];
    ct_fill(logits, 2 * E, 1.0f);
    int32_t ids[2 * (K + 1)];
    float w[2 * (K + 1)];
    memset(ids, 0x7f, sizeof ids);
    tensor L = tensor_2d(DTYPE_F32, logits, 2, E), I = tensor_2d(DTYPE_I32, ids, 2, K), W = tensor_2d(DTYPE_F32, w, 2, K);
    moe_params neg = {.num_experts = E, .top_k = K, .num_shared = -1};
    CHECK(be->ops->supports(be, BE_OP_MOE, &neg) == BE_UNSUPPORTED);
    be->ops->moe_route(be, &L, &neg, &I, &W);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK_MSG(strstr(vllm_last_error(), "num_shared") != NULL, "%s", vllm_last_error());
    moe_params one = {.num_experts = E, .top_k = K, .num_shared = 1};
    be->ops->moe_route(be, &L, &one, &I, &W); /* (2, K): one column short */
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK(ids[0] == 0x7f7f7f7f);
    moe_params huge = {.num_experts = E, .top_k = K, .num_shared = INT32_MAX - 4};
    CHECK(be->ops->supports(be, BE_OP_MOE, &huge) == BE_UNSUPPORTED);
}

/* ---- sigmoid_gate ---- */

static void test_sigmoid_gate(backend *be) {
    enum { T = 37, D = 50, PAD = 6 };
    static float xbuf[T * (D + PAD)], x0[T * (D + PAD)];
    float g[T];
    ct_fill(xbuf, T * (D + PAD), 2.0f);
    ct_fill(g, T, 6.0f);
    g[0] = 0.0f;
    g[1] = -100.0f;
    memcpy(x0, xbuf, sizeof xbuf);
    tensor full = tensor_2d(DTYPE_F32, xbuf, T, D + PAD);
    tensor X = tensor_cols(&full, PAD / 2, D), G = tensor_2d(DTYPE_F32, g, T, 1);
    be->ops->sigmoid_gate(be, &X, &G);
    CHECK_OK(be->ops->synchronize(be));
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < D + PAD; c++) {
            double in = x0[t * (D + PAD) + c], got = xbuf[t * (D + PAD) + c];
            bool inside = c >= PAD / 2 && c < PAD / 2 + D;
            double want = inside ? in / (1.0 + exp(-(double)g[t])) : in;
            bad += fabs(got - want) > 1e-6 * (1.0 + fabs(want));
        }
    CHECK_MSG(bad == 0, "sigmoid_gate: %d wrong values", bad);
    CHECK(xbuf[PAD / 2] == x0[PAD / 2] * 0.5f);  /* g = 0: exactly half */
    /* g of the wrong shape is refused, x untouched */
    memcpy(x0, xbuf, sizeof xbuf);
    tensor G2 = tensor_2d(DTYPE_F32, g, T - 1, 1);
    be->ops->sigmoid_gate(be, &X, &G2);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK(!memcmp(x0, xbuf, sizeof xbuf));
}

/* ---- moe_experts ---- */

typedef struct experts_fixture {
    int E;
    int64_t D, I;
    dtype dt;
    unsigned char *buf;    /* all weights: gate (E, I, D) | up (E, I, D) | down (E, D, I) */
    tensor *g, *u, *d;
    const tensor **gp, **up, **dp;
    /* biases (with_bias): gate (E, I) | up (E, I) | down (E, D) of bias_dt */
    dtype bias_dt;
    unsigned char *bbuf;
    tensor *bg, *bu, *bd;
    const tensor **bgp, **bup, **bdp;
    be_expert_bias bias;
} experts_fixture;

static void fixture_make(experts_fixture *f, int E, int64_t D, int64_t I, dtype dt, int nan_expert) {
    f->E = E;
    f->D = D;
    f->I = I;
    f->dt = dt;
    const int64_t per = I * D;
    f->buf = malloc((size_t)(3 * E * per) * dtype_size(dt));
    const float scale = 2.0f / sqrtf((float)D);
    for (int64_t i = 0; i < 3 * E * per; i++) ct_store(f->buf, dt, i, ct_uniform() * scale);
    if (nan_expert >= 0)
        for (int m = 0; m < 3; m++)
            for (int64_t i = 0; i < per; i++) ct_store(f->buf, dt, (m * E + nan_expert) * per + i, NAN);
    f->g = malloc((size_t)E * sizeof(tensor));
    f->u = malloc((size_t)E * sizeof(tensor));
    f->d = malloc((size_t)E * sizeof(tensor));
    f->gp = malloc((size_t)E * sizeof(tensor *));
    f->up = malloc((size_t)E * sizeof(tensor *));
    f->dp = malloc((size_t)E * sizeof(tensor *));
    const size_t es = dtype_size(dt);
    for (int e = 0; e < E; e++) {
        f->g[e] = tensor_2d(dt, f->buf + (size_t)((0 * E + e) * per) * es, I, D);
        f->u[e] = tensor_2d(dt, f->buf + (size_t)((1 * E + e) * per) * es, I, D);
        f->d[e] = tensor_2d(dt, f->buf + (size_t)((2 * E + e) * per) * es, D, I);
        f->gp[e] = &f->g[e];
        f->up[e] = &f->u[e];
        f->dp[e] = &f->d[e];
    }
    f->bbuf = NULL;
}

/* Biases for the fixture's experts, uniform in (-scale, scale) for gate and up (large enough to reach
 * gpt-oss's clamp), (-1, 1) for down, of dtype bdt; expert 1's up bias left out (NULL: zero). */
static void fixture_bias(experts_fixture *f, dtype bdt, float scale) {
    const int E = f->E;
    const int64_t D = f->D, I = f->I, n = E * (2 * I + D);
    f->bias_dt = bdt;
    f->bbuf = malloc((size_t)n * dtype_size(bdt));
    for (int64_t i = 0; i < n; i++) ct_store(f->bbuf, bdt, i, ct_uniform() * (i < 2 * E * I ? scale : 1.0f));
    if (E > 1)
        for (int64_t i = 0; i < I; i++) ct_store(f->bbuf, bdt, E * I + I + i, 0.0f); /* expert 1's up: none */
    f->bg = malloc((size_t)(3 * E) * sizeof(tensor));
    f->bu = f->bg + E;
    f->bd = f->bg + 2 * E;
    f->bgp = malloc((size_t)(3 * E) * sizeof(tensor *));
    f->bup = f->bgp + E;
    f->bdp = f->bgp + 2 * E;
    const size_t es = dtype_size(bdt);
    for (int e = 0; e < E; e++) {
        f->bg[e] = tensor_1d(bdt, f->bbuf + (size_t)(e * I) * es, I);
        f->bu[e] = tensor_1d(bdt, f->bbuf + (size_t)(E * I + e * I) * es, I);
        f->bd[e] = tensor_1d(bdt, f->bbuf + (size_t)(2 * E * I + e * D) * es, D);
        f->bgp[e] = &f->bg[e];
        f->bup[e] = e == 1 ? NULL : &f->bu[e];
        f->bdp[e] = &f->bd[e];
    }
    f->bias = (be_expert_bias){.gate = f->bgp, .up = f->bup, .down = f->bdp};
}

/* bias m (0 gate, 1 up, 2 down) of expert e at i, 0 without biases */
static double fb(const experts_fixture *f, int m, int e, int64_t i) {
    if (!f->bbuf) return 0.0;
    const int64_t base = m < 2 ? ((int64_t)m * f->E + e) * f->I : 2 * f->E * f->I + e * f->D;
    return ct_load(f->bbuf, f->bias_dt, base + i);
}

static void fixture_free(experts_fixture *f) {
    free(f->buf);
    free(f->g);
    free(f->u);
    free(f->d);
    free((void *)f->gp);
    free((void *)f->up);
    free((void *)f->dp);
    if (f->bbuf) {
        free(f->bbuf);
        free(f->bg);
        free((void *)f->bgp);
    }
}

static double fw(const experts_fixture *f, int m, int e, int64_t i) {
    return ct_load(f->buf, f->dt, ((int64_t)m * f->E + e) * f->I * f->D + i);
}

/* o (E, T, D): every expert on every token, in double (with the fixture's biases; the clamped SwiGLU
 * with alpha, limit) */
static double *ref_dense(const experts_fixture *f, const float *x, int64_t xs, int64_t T, be_act act, double alpha,
                         double limit) {
    const int64_t D = f->D, I = f->I;
    double *o = malloc((size_t)(f->E * T * D) * sizeof *o);
    double *h = malloc((size_t)I * sizeof *h);
    for (int e = 0; e < f->E; e++)
        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < I; i++) {
                double g = fb(f, 0, e, i), u = fb(f, 1, e, i);
                for (int64_t d = 0; d < D; d++) {
                    g += fw(f, 0, e, i * D + d) * x[t * xs + d];
                    u += fw(f, 1, e, i * D + d) * x[t * xs + d];
                }
                if (act == BE_ACT_SWIGLU_OAI) { /* transformers' GptOssExperts._apply_gate */
                    g = g > limit ? limit : g;
                    u = u > limit ? limit : u < -limit ? -limit : u;
                    h[i] = (u + 1.0) * (g / (1.0 + exp(-alpha * g)));
                } else {
                    h[i] = ref_act(act, g) * u;
                }
            }
            for (int64_t d = 0; d < D; d++) {
                double s = fb(f, 2, e, d);
                for (int64_t i = 0; i < I; i++) s += fw(f, 2, e, d * I + i) * h[i];
                o[(e * T + t) * D + d] = s;
            }
        }
    free(h);
    return o;
}

typedef struct moe_case {
    int E, k;
    int64_t T, D, I;
    be_act act;
    dtype dt;
    bool renorm, accumulate;
    bool same;       /* every token prefers experts 2 and 5 (E = 8): the others get no token, expert 0 is NaN */
    bool bias;       /* with biases (fixture_bias), of bias_dt */
    dtype bias_dt;
    float alpha, limit; /* BE_ACT_SWIGLU_OAI's (0: the defaults) */
} moe_case;

static void run_moe_case(backend *be[CT_NBE], int nbe, const moe_case *mc) {
    const int E = mc->E, k = mc->k;
    const int64_t T = mc->T, D = mc->D, I = mc->I;
    experts_fixture f;
    fixture_make(&f, E, D, I, mc->dt, mc->same ? 0 : -1);
    const bool with_bias = mc->bias;
    if (with_bias) fixture_bias(&f, mc->bias_dt, 9.0f);

    /* x (T, D) a column view of (T, D + 5); y (T, D) a view of (T, D + 3) */
    const int64_t xw = D + 5, yw = D + 3;
    float *xbuf = malloc((size_t)(T * xw) * sizeof(float));
    float *y0 = malloc((size_t)(T * yw) * sizeof(float));
    float *ybuf = malloc((size_t)(T * yw) * sizeof(float));
    float *yfirst = malloc((size_t)(T * yw) * sizeof(float));
    float *logits = malloc((size_t)(T * E) * sizeof(float));
    int32_t *ids = malloc((size_t)(T * k) * sizeof(int32_t));
    float *w = malloc((size_t)(T * k) * sizeof(float));
    ct_fill(xbuf, T * xw, 1.0f);
    ct_fill(y0, T * yw, 1.0f);
    ct_fill(logits, T * E, 3.0f);
    if (mc->same)
        for (int64_t t = 0; t < T; t++) {
            for (int e = 0; e < E; e++) logits[t * E + e] *= 0.1f;
            logits[t * E + 2] += 4.0f;
            logits[t * E + 5] += 4.0f;
        }
    tensor xfull = tensor_2d(DTYPE_F32, xbuf, T, xw), yfull = tensor_2d(DTYPE_F32, ybuf, T, yw);
    tensor X = tensor_cols(&xfull, 2, D), Y = tensor_cols(&yfull, 1, D);
    tensor L = tensor_2d(DTYPE_F32, logits, T, E), IDS = tensor_2d(DTYPE_I32, ids, T, k),
           W = tensor_2d(DTYPE_F32, w, T, k);
    moe_params p = {.num_experts = E, .top_k = k, .scoring = BE_MOE_SOFTMAX, .renormalize = mc->renorm,
                    .act = mc->act, .swiglu_alpha = mc->alpha, .swiglu_limit = mc->limit, .bias = with_bias};

    /* the reference: routing and every expert on every token, then the top-k combination */
    double *o = ref_dense(&f, xbuf + 2, xw, T, mc->act, mc->alpha > 0 ? mc->alpha : 1.702,
                          mc->limit > 0 ? mc->limit : 7.0);
    double *want = malloc((size_t)(T * D) * sizeof *want);
    int32_t *rids = malloc((size_t)(T * k) * sizeof *rids);
    for (int64_t t = 0; t < T; t++) {
        double rw[64];
        ref_route(logits + t * E, E, k, mc->renorm, rids + t * k, rw);
        for (int64_t d = 0; d < D; d++) {
            double s = mc->accumulate ? y0[t * yw + 1 + d] : 0.0;
            for (int j = 0; j < k; j++) s += rw[j] * o[(rids[t * k + j] * T + t) * D + d];
            want[t * D + d] = s;
        }
    }

    char what[160];
    snprintf(what, sizeof what, "E %d k %d T %lld D %lld I %lld act %d %s renorm %d acc %d same %d bias %s", E, k,
             (long long)T, (long long)D, (long long)I, (int)mc->act, dtype_name(mc->dt), mc->renorm,
             mc->accumulate, mc->same, with_bias ? dtype_name(mc->bias_dt) : "none");
    for (int b = 0; b < nbe; b++) {
        be_experts *ex = NULL;
        CHECK_OK(be[b]->ops->experts_create(be[b], f.gp, f.up, f.dp, with_bias ? &f.bias : NULL, E, &ex));
        if (!ex) break;
        memcpy(ybuf, y0, (size_t)(T * yw) * sizeof(float));
        be[b]->ops->moe_route(be[b], &L, &p, &IDS, &W);
        be[b]->ops->moe_experts(be[b], ex, &X, &IDS, &W, &p, mc->accumulate, &Y);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        CHECK_MSG(!memcmp(ids, rids, (size_t)(T * k) * sizeof *ids), "%s: routing differs", what);
        int bad = 0, pad_bad = 0;
        double worst = 0.0;
        for (int64_t t = 0; t < T; t++) {
            for (int64_t d = 0; d < D; d++) {
                double got = ybuf[t * yw + 1 + d], err = fabs(got - want[t * D + d]);
                if (!(err <= 1e-4 * (1.0 + fabs(want[t * D + d])))) bad++;
                worst = err > worst || isnan(err) ? err : worst;
            }
            pad_bad += ybuf[t * yw] != y0[t * yw];
            for (int64_t c = 1 + D; c < yw; c++) pad_bad += ybuf[t * yw + c] != y0[t * yw + c];
        }
        CHECK_MSG(bad == 0, "%s, backend %d: %d of %lld wrong, worst error %g", what, b, bad, (long long)(T * D),
                  worst);
        CHECK_MSG(pad_bad == 0, "%s: y's padding columns written", what);
        if (b == 0)
            memcpy(yfirst, ybuf, (size_t)(T * yw) * sizeof(float));
        else
            CHECK_MSG(!memcmp(yfirst, ybuf, (size_t)(T * yw) * sizeof(float)), "%s: backend %d differs from 1 thread",
                      what, b);
        be[b]->ops->experts_free(be[b], ex);
    }
    if (mc->same) /* the batch really shares its experts */
        for (int64_t t = 0; t < T; t++)
            CHECK((rids[t * k] == 2 || rids[t * k] == 5) && (k < 2 || rids[t * k + 1] == 7 - rids[t * k]));
    free(o);
    free(want);
    free(rids);
    free(xbuf);
    free(y0);
    free(ybuf);
    free(yfirst);
    free(logits);
    free(ids);
    free(w);
    fixture_free(&f);
}

static void test_moe_experts(backend *be[CT_NBE]) {
    static const int EK[][2] = {{4, 1}, {4, 2}, {8, 2}, {8, 8}, {64, 8}, {64, 1}};
    static const be_act acts[2] = {BE_ACT_SILU, BE_ACT_GELU_TANH};
    static const dtype dts[2] = {DTYPE_F32, DTYPE_BF16};
    static const int64_t Ts[2] = {1, 37};
    int n = 0;
    for (size_t c = 0; c < sizeof EK / sizeof EK[0]; c++)
        for (int ti = 0; ti < 2; ti++)
            for (int a = 0; a < 2; a++)
                for (int di = 0; di < 2; di++)
                    for (int flags = 0; flags < 4; flags++) {
                        moe_case mc = {.E = EK[c][0], .k = EK[c][1], .T = Ts[ti], .D = 40, .I = 24, .act = acts[a],
                                       .dt = dts[di], .renorm = flags & 1, .accumulate = flags >> 1};
                        /* all three backends on a quarter of the cases, 1 thread on the rest */
                        run_moe_case(be, n++ % 4 == 0 ? CT_NBE : 1, &mc);
                    }
    /* F16 weights; the large-row linear kernel (D, I > 256) */
    moe_case f16 = {.E = 8, .k = 2, .T = 37, .D = 40, .I = 24, .act = BE_ACT_SILU, .dt = DTYPE_F16, .renorm = true};
    run_moe_case(be, CT_NBE, &f16);
    moe_case big = {.E = 8, .k = 2, .T = 37, .D = 272, .I = 264, .act = BE_ACT_SILU, .dt = DTYPE_BF16,
                    .accumulate = true};
    run_moe_case(be, CT_NBE, &big);
    /* every token picks experts 2 and 5: six experts get no token (expert 0 is NaN and must not be read) */
    for (int k = 1; k <= 2; k++)
        for (int64_t T = 1; T <= 37; T += 36) {
            moe_case same = {.E = 8, .k = k, .T = T, .D = 40, .I = 24, .act = BE_ACT_GELU_TANH, .dt = DTYPE_BF16,
                             .renorm = k == 2, .same = true};
            run_moe_case(be, CT_NBE, &same);
        }
    /* gpt-oss's experts: biases (BF16 and F32, expert 1 without an up bias) and the clamped SwiGLU, its
     * defaults (alpha 1.702, limit 7) and others; pre-activations reach past the limit both ways */
    for (int v = 0; v < 4; v++) {
        moe_case oai = {.E = 8, .k = v < 2 ? 2 : 4, .T = v % 2 ? 37 : 1, .D = 40, .I = 24, .act = BE_ACT_SWIGLU_OAI,
                        .dt = v < 2 ? DTYPE_BF16 : DTYPE_F32, .renorm = true, .accumulate = v == 3, .bias = true,
                        .bias_dt = v % 2 ? DTYPE_F32 : DTYPE_BF16, .alpha = v == 2 ? 1.25f : 0.0f,
                        .limit = v == 2 ? 3.0f : 0.0f};
        run_moe_case(be, CT_NBE, &oai);
    }
    /* biases with another activation */
    moe_case bs = {.E = 4, .k = 2, .T = 37, .D = 40, .I = 24, .act = BE_ACT_SILU, .dt = DTYPE_BF16, .bias = true,
                   .bias_dt = DTYPE_BF16};
    run_moe_case(be, CT_NBE, &bs);
}

/* moe_experts with DeepSeek's plain shared experts: E routed experts of (I, D) and a dense shared MLP of
 * Is = ns I (gate, up (Is, D), down (D, Is)) given to experts_create as experts E .. E + ns - 1 (views of
 * its rows [j I, (j + 1) I) and down's columns, as block_moe.c loads them), routed by moe_route with
 * num_shared; y must equal (y0 +) the routed sum (routed_scaling applied) + the dense shared MLP computed
 * apart in double (weight 1), on every backend, the threaded ones bit for bit as one thread. */
static void run_shared_case(backend *be[CT_NBE], int E, int k, int ns, int64_t T, dtype dt, be_act act, bool acc,
                            be_moe_scoring sc, float scale) {
    const int64_t D = 40, I = 24, Is = ns * I;
    experts_fixture f;
    fixture_make(&f, E, D, I, dt, -1);
    const size_t es = dtype_size(dt);
    unsigned char *sh = malloc((size_t)(3 * Is * D) * es); /* gate (Is, D) | up (Is, D) | down (D, Is) */
    const float wscale = 2.0f / sqrtf((float)D);
    for (int64_t i = 0; i < 3 * Is * D; i++) ct_store(sh, dt, i, ct_uniform() * wscale);
    const tensor SG = tensor_2d(dt, sh, Is, D), SU = tensor_2d(dt, sh + (size_t)(Is * D) * es, Is, D),
                 SD = tensor_2d(dt, sh + (size_t)(2 * Is * D) * es, D, Is);
    const int Et = E + ns;
    tensor *st = malloc((size_t)(3 * ns) * sizeof *st);
    const tensor **pg = malloc((size_t)(3 * Et) * sizeof *pg), **pu = pg + Et, **pd = pg + 2 * Et;
    for (int e = 0; e < E; e++) {
        pg[e] = f.gp[e];
        pu[e] = f.up[e];
        pd[e] = f.dp[e];
    }
    for (int j = 0; j < ns; j++) {
        st[j] = tensor_rows(&SG, j * I, I);
        st[ns + j] = tensor_rows(&SU, j * I, I);
        st[2 * ns + j] = tensor_cols(&SD, j * I, I); /* rows Is apart */
        pg[E + j] = &st[j];
        pu[E + j] = &st[ns + j];
        pd[E + j] = &st[2 * ns + j];
    }

    const int kw = k + ns;
    float *x = malloc((size_t)(T * D) * sizeof *x), *y0 = malloc((size_t)(T * D) * sizeof *y0),
          *y = malloc((size_t)(T * D) * sizeof *y), *yfirst = malloc((size_t)(T * D) * sizeof *yfirst),
          *logits = malloc((size_t)(T * E) * sizeof *logits), *w = malloc((size_t)(T * kw) * sizeof *w);
    int32_t *ids = malloc((size_t)(T * kw) * sizeof *ids);
    ct_fill(x, T * D, 1.0f);
    ct_fill(y0, T * D, 1.0f);
    ct_fill(logits, T * E, 3.0f);
    tensor X = tensor_2d(DTYPE_F32, x, T, D), Y = tensor_2d(DTYPE_F32, y, T, D),
           L = tensor_2d(DTYPE_F32, logits, T, E), IDS = tensor_2d(DTYPE_I32, ids, T, kw),
           W = tensor_2d(DTYPE_F32, w, T, kw);
    const moe_params p = {.num_experts = E, .top_k = k, .scoring = sc, .renormalize = sc == BE_MOE_SOFTMAX,
                          .act = act, .routed_scaling = scale, .num_shared = ns};

    /* the reference: the routed experts' weighted sum, then the dense shared MLP over all Is */
    double *o = ref_dense(&f, x, D, T, act, 1.702, 7.0);
    double *want = malloc((size_t)(T * D) * sizeof *want), *h = malloc((size_t)Is * sizeof *h);
    int32_t rid[64];
    double rw[64];
    for (int64_t t = 0; t < T; t++) {
        ref_route_ds(logits + t * E, NULL, E, k, sc, 0, 0, sc == BE_MOE_SOFTMAX, scale, rid, rw);
        for (int64_t i = 0; i < Is; i++) {
            double g = 0.0, u = 0.0;
            for (int64_t d = 0; d < D; d++) {
                g += ct_load(sh, dt, i * D + d) * x[t * D + d];
                u += ct_load(sh, dt, Is * D + i * D + d) * x[t * D + d];
            }
            h[i] = ref_act(act, g) * u;
        }
        for (int64_t d = 0; d < D; d++) {
            double s = acc ? y0[t * D + d] : 0.0, sd = 0.0;
            for (int j = 0; j < k; j++) s += rw[j] * o[(rid[j] * T + t) * D + d];
            for (int64_t i = 0; i < Is; i++) sd += ct_load(sh, dt, 2 * Is * D + d * Is + i) * h[i];
            want[t * D + d] = s + sd;
        }
    }
    char what[160];
    snprintf(what, sizeof what, "shared experts: E %d k %d + %d shared T %lld %s act %d acc %d scoring %d scale %g", E,
             k, ns, (long long)T, dtype_name(dt), (int)act, acc, (int)sc, (double)scale);
    for (int b = 0; b < CT_NBE; b++) {
        be_experts *ex = NULL;
        CHECK_OK(be[b]->ops->experts_create(be[b], pg, pu, pd, NULL, Et, &ex));
        if (!ex) break;
        memcpy(y, y0, (size_t)(T * D) * sizeof *y);
        be[b]->ops->moe_route(be[b], &L, &p, &IDS, &W);
        be[b]->ops->moe_experts(be[b], ex, &X, &IDS, &W, &p, acc, &Y);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        int bad = 0;
        double worst = 0.0;
        for (int64_t i = 0; i < T * D; i++) {
            const double err = fabs(y[i] - want[i]);
            if (!(err <= 1e-4 * (1.0 + fabs(want[i])))) bad++;
            worst = err > worst || isnan(err) ? err : worst;
        }
        CHECK_MSG(bad == 0, "%s, backend %d: %d of %lld wrong, worst error %g", what, b, bad, (long long)(T * D), worst);
        for (int64_t t = 0; t < T; t++)
            for (int j = 0; j < ns; j++) CHECK(ids[t * kw + k + j] == E + j && w[t * kw + k + j] == 1.0f);
        if (b == 0)
            memcpy(yfirst, y, (size_t)(T * D) * sizeof *y);
        else
            CHECK_MSG(!memcmp(yfirst, y, (size_t)(T * D) * sizeof *y), "%s: backend %d differs from 1 thread", what, b);
        /* the same experts asked without their shared part: a count mismatch, refused with y untouched */
        if (b == 0) {
            moe_params p0 = p;
            p0.num_shared = 0;
            memcpy(y, yfirst, (size_t)(T * D) * sizeof *y);
            be[b]->ops->moe_experts(be[b], ex, &X, &IDS, &W, &p0, acc, &Y);
            CHECK(be[b]->ops->synchronize(be[b]) != VLLM_OK);
            CHECK_MSG(strstr(vllm_last_error(), "shared") != NULL, "%s", vllm_last_error());
            CHECK(!memcmp(y, yfirst, (size_t)(T * D) * sizeof *y));
        }
        be[b]->ops->experts_free(be[b], ex);
    }
    free(o);
    free(want);
    free(h);
    free(x);
    free(y0);
    free(y);
    free(yfirst);
    free(logits);
    free(w);
    free(ids);
    free(st);
    free((void *)pg);
    free(sh);
    fixture_free(&f);
}

static void test_moe_experts_shared(backend *be[CT_NBE]) {
    for (int ns = 1; ns <= 2; ns++)
        for (int ti = 0; ti < 2; ti++)
            for (int v = 0; v < 4; v++)
                run_shared_case(be, v < 2 ? 8 : 16, v < 2 ? 2 : 4, ns, ti ? 37 : 1, v % 2 ? DTYPE_BF16 : DTYPE_F32,
                                v == 3 ? BE_ACT_GELU_TANH : BE_ACT_SILU, (v + ti) % 2 == 1,
                                v < 2 ? BE_MOE_SOFTMAX_GROUPED : v == 2 ? BE_MOE_SIGMOID_NOAUX_TC : BE_MOE_SOFTMAX,
                                v < 2 ? 16.0f : v == 2 ? 2.5f : 0.0f);
}

/* ---- refusals ---- */

static void test_bad_args(backend *be) {
    enum { E = 4, T = 3, D = 16, I = 8, K = 2 };
    experts_fixture f;
    fixture_make(&f, E, D, I, DTYPE_F32, -1);
    be_experts *ex = NULL;
    CHECK_OK(be->ops->experts_create(be, f.gp, f.up, f.dp, NULL, E, &ex));

    float x[T * D], y[T * D], y0[T * D], logits[T * E], w[T * K];
    int32_t ids[T * K] = {0, 1, 2, 3, 1, 0};
    ct_fill(x, T * D, 1.0f);
    ct_fill(y, T * D, 1.0f);
    ct_fill(logits, T * E, 1.0f);
    ct_fill(w, T * K, 1.0f);
    memcpy(y0, y, sizeof y);
    tensor X = tensor_2d(DTYPE_F32, x, T, D), Y = tensor_2d(DTYPE_F32, y, T, D);
    tensor IDS = tensor_2d(DTYPE_I32, ids, T, K), W = tensor_2d(DTYPE_F32, w, T, K);
    tensor L = tensor_2d(DTYPE_F32, logits, T, E);
    moe_params p = {.num_experts = E, .top_k = K};

    /* a good call first */
    be->ops->moe_experts(be, ex, &X, &IDS, &W, &p, false, &Y);
    CHECK_OK(be->ops->synchronize(be));
    memcpy(y0, y, sizeof y);

    /* ids out of range: -1 and E */
    for (int bad = 0; bad < 2; bad++) {
        ids[3] = bad ? E : -1;
        be->ops->moe_experts(be, ex, &X, &IDS, &W, &p, true, &Y);
        vllm_status st = be->ops->synchronize(be);
        CHECK(st != VLLM_OK);
        CHECK_MSG(strstr(vllm_last_error(), "ids[1, 1]") != NULL, "%s", vllm_last_error());
        CHECK(!memcmp(y, y0, sizeof y));
    }
    ids[3] = 3;
    /* top_k > E, top_k 0, scoring / act out of range, NULL params: refused by both ops */
    moe_params bads[5] = {{.num_experts = E, .top_k = E + 1}, {.num_experts = E, .top_k = 0},
                          {.num_experts = E, .top_k = K, .scoring = BE_MOE_SCORING_COUNT},
                          {.num_experts = E, .top_k = K, .act = BE_ACT_COUNT}, {.num_experts = 0, .top_k = 0}};
    for (int i = 0; i < 5; i++) {
        CHECK(be->ops->supports(be, BE_OP_MOE, &bads[i]) == BE_UNSUPPORTED);
        be->ops->moe_experts(be, ex, &X, &IDS, &W, &bads[i], false, &Y);
        CHECK(be->ops->synchronize(be) != VLLM_OK);
        int32_t ids2[T * (E + 1)];
        float w2[T * (E + 1)];
        memset(ids2, 0x7f, sizeof ids2);
        tensor I2 = tensor_2d(DTYPE_I32, ids2, T, bads[i].top_k > 0 ? bads[i].top_k : 1);
        tensor W2 = tensor_2d(DTYPE_F32, w2, T, bads[i].top_k > 0 ? bads[i].top_k : 1);
        be->ops->moe_route(be, &L, &bads[i], &I2, &W2);
        CHECK(be->ops->synchronize(be) != VLLM_OK);
        CHECK(ids2[0] == 0x7f7f7f7f);
    }
    be->ops->moe_route(be, &L, NULL, &IDS, &W);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_experts(be, ex, &X, &IDS, &W, NULL, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_experts(be, NULL, &X, &IDS, &W, &p, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK(!memcmp(y, y0, sizeof y));
    /* the clamped SwiGLU's alpha / limit negative or not finite */
    moe_params pa = {.num_experts = E, .top_k = K, .act = BE_ACT_SWIGLU_OAI, .swiglu_limit = -1.0f};
    be->ops->moe_experts(be, ex, &X, &IDS, &W, &pa, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    pa.swiglu_limit = 0.0f;
    pa.swiglu_alpha = INFINITY;
    be->ops->moe_experts(be, ex, &X, &IDS, &W, &pa, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK(!memcmp(y, y0, sizeof y));
    /* params naming another expert count than the layer's */
    moe_params p8 = {.num_experts = 8, .top_k = K};
    be->ops->moe_experts(be, ex, &X, &IDS, &W, &p8, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    /* wrong shapes and dtypes: x of another width, ids as F32, w of other rows, logits of other width, y = x */
    tensor Xb = tensor_2d(DTYPE_F32, x, T, D - 1), IDSf = tensor_2d(DTYPE_F32, ids, T, K),
           Wb = tensor_2d(DTYPE_F32, w, T - 1, K), Lb = tensor_2d(DTYPE_F32, logits, T, E - 1);
    be->ops->moe_experts(be, ex, &Xb, &IDS, &W, &p, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_experts(be, ex, &X, &IDSf, &W, &p, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_experts(be, ex, &X, &IDS, &Wb, &p, false, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_experts(be, ex, &X, &IDS, &W, &p, false, &X);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_route(be, &Lb, &p, &IDS, &W);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->moe_route(be, &L, &p, &IDSf, &W);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK(!memcmp(y, y0, sizeof y));
    be->ops->experts_free(be, ex);
    be->ops->experts_free(be, NULL);

    /* experts_create: no experts, a mismatched shape, mixed dtypes, a NULL entry, an integer dtype */
    be_experts *bad = (be_experts *)&f;
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, NULL, 0, &bad), VLLM_ERR_INVALID_ARG, "experts_create", "0");
    CHECK(bad == NULL);
    tensor keep = f.d[2];
    f.d[2] = tensor_2d(DTYPE_F32, f.d[2].data, D, I - 1);
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, NULL, E, &bad), VLLM_ERR_INVALID_ARG, "expert 2", "down");
    f.d[2] = keep;
    keep = f.u[1];
    f.u[1].dtype = DTYPE_BF16;
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, NULL, E, &bad), VLLM_ERR_INVALID_ARG, "expert 1", "F32");
    f.u[1] = keep;
    f.gp[3] = NULL;
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, NULL, E, &bad), VLLM_ERR_INVALID_ARG, "expert 3", "gate");
    f.gp[3] = &f.g[3];
    /* biases: a down bias of the wrong length, an integer gate bias */
    fixture_bias(&f, DTYPE_F32, 1.0f);
    f.bd[2] = tensor_1d(DTYPE_F32, f.bd[2].data, D - 1);
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, &f.bias, E, &bad), VLLM_ERR_INVALID_ARG, "expert 2",
               "biases");
    f.bd[2] = tensor_1d(DTYPE_F32, f.bd[2].data, D);
    f.bg[0].dtype = DTYPE_I32;
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, &f.bias, E, &bad), VLLM_ERR_INVALID_ARG, "expert 0",
               "biases");
    f.bg[0].dtype = DTYPE_F32;
    CHECK_OK(be->ops->experts_create(be, f.gp, f.up, f.dp, &f.bias, E, &bad));
    be->ops->experts_free(be, bad);
    bad = NULL;
    for (int e = 0; e < E; e++) f.g[e].dtype = f.u[e].dtype = f.d[e].dtype = DTYPE_I32;
    EXPECT_ERR(be->ops->experts_create(be, f.gp, f.up, f.dp, NULL, E, &bad), VLLM_ERR_UNSUPPORTED, "experts_create",
               "I32");
    CHECK(bad == NULL);
    fixture_free(&f);
}

static void test_supports(backend *be) {
    moe_params ok = {.num_experts = 128, .top_k = 8, .renormalize = true, .act = BE_ACT_SILU};
    CHECK(be->ops->supports(be, BE_OP_MOE, &ok) == BE_NATIVE);
    moe_params all = {.num_experts = 4, .top_k = 4, .act = BE_ACT_GELU_TANH};
    CHECK(be->ops->supports(be, BE_OP_MOE, &all) == BE_NATIVE);
    CHECK(be->ops->supports(be, BE_OP_MOE, NULL) == BE_UNSUPPORTED);
    CHECK(backend_require(be, BE_OP_MOE, &ok, "Qwen3MoeForCausalLM moe") == VLLM_OK);
    CHECK(!strcmp(be_op_name(BE_OP_MOE), "moe"));
}

int main(void) {
    ct_seed(12);
    backend *be[CT_NBE];
    ct_backends(be);
    test_route_exact(be[0]);
    test_route_exact(be[1]);
    test_route_random(be[1]);
    test_route_deepseek_exact(be[0]);
    test_route_deepseek_exact(be[1]);
    test_route_deepseek_random(be[1]);
    test_route_deepseek_bad(be[0]);
    test_route_shared(be[0]);
    test_route_shared(be[1]);
    test_sigmoid_gate(be[0]);
    test_sigmoid_gate(be[1]);
    test_moe_experts(be);
    test_moe_experts_shared(be);
    test_bad_args(be[0]);
    test_supports(be[0]);
    ct_backends_free(be);
    TEST_END();
}
