/*
 * ops_moe.c: the CPU mixture-of-experts ops (experts, routing, expert MLPs, the shared-expert sigmoid gate).
 *
 * Routing (moe_route): softmax top-k (Qwen-MoE, Mixtral, gpt-oss), DeepSeek-V2's softmax with
 * group-limited greedy selection and DeepSeek-V3's sigmoid with the correction bias and groups
 * (noaux_tc), as route_task spells out; the reference of ops_moe.cu's k_moe_route.
 *
 * Each expert keeps its weights as the CPU's linear layers do (views of the
 * checkpoint, F32/F16/BF16): gate|up as one two-part be_linear, down as
 * another (with the experts' biases, when given), and moe_experts runs them
 * through cpu_linear and cpu_act_mul (gpt-oss's clamped SwiGLU with moe_params'
 * alpha and limit). The
 * tokens are grouped by expert first (a permutation of the T * k (token,
 * slot) pairs, by expert id, then token), so each chosen expert runs as
 * one linear call over all its tokens and an expert no token chose is not
 * read at all; the outputs are scattered back with their
 * weights, expert by expert in increasing id (transformers' index_add_
 * order), into an f32 sum. This is the layout the GPU kernels follow.
 *
 * DeepSeek's plain shared experts (moe_params.num_shared): experts E .. E + num_shared - 1 of the same
 * be_experts, appended by moe_route after every token's top k with weight 1, so moe_experts runs them
 * with the routed ones (the widths below are k + num_shared, the expert count E + num_shared).
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "tensor/tensor_check.h"

struct be_experts {
    int E;                 /* experts */
    int64_t D;             /* hidden size: gate/up input, down output */
    int64_t I;             /* intermediate size per expert */
    dtype dt;              /* weight dtype (all experts) */
    be_linear **gate_up;   /* (E): (2I, D) = gate_e | up_e */
    be_linear **down;      /* (E): (D, I) */
};

/* ---- experts ---- */

void cpu_experts_free(backend *be, be_experts *ex) {
    if (!ex) return;
    for (int e = 0; e < ex->E; e++) {
        if (ex->gate_up) cpu_linear_free(be, ex->gate_up[e]);
        if (ex->down) cpu_linear_free(be, ex->down[e]);
    }
    free(ex->gate_up);
    free(ex->down);
    free(ex);
}

/* A (rows, cols) 2-D weight of dtype dt. */
static bool moe_weight_ok(const tensor *w, int64_t rows, int64_t cols, dtype dt) {
    return w && w->ndim == 2 && w->shape[0] == rows && w->shape[1] == cols && w->dtype == dt;
}

/* An optional bias entry: NULL, or a (n) float vector. */
static bool moe_bias_ok(const tensor *b, int64_t n) {
    return !b || (b->data && tensor_numel(b) == n &&
                  (b->dtype == DTYPE_F32 || b->dtype == DTYPE_F16 || b->dtype == DTYPE_BF16));
}

// gate[e], up[e] (I, D), down[e] (D, I), e < E, all of one dtype [+ biases (I), (I), (D)] -> ex
vllm_status cpu_experts_create(backend *be, const tensor *const *gate, const tensor *const *up,
                               const tensor *const *down, const be_expert_bias *bias, int E, be_experts **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: no output");
    *out = NULL;
    if (E < 1 || !gate || !up || !down)
        return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: %d experts, or no weight arrays", E);
    const tensor *g0 = gate[0];
    if (!g0 || g0->ndim != 2 || g0->shape[0] < 1 || g0->shape[1] < 1)
        return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: gate 0 must be a 2-D (I, D) tensor");
    /* gate and up share a dtype (one linear each expert), down may have its own (GGUF Q4_K_M files keep
     * ffn_down_exps in Q6_K); cpu_linear_create checks the dtypes themselves (float or a ggml block type) */
    const dtype dt = g0->dtype, ddt = down[0] ? down[0]->dtype : dt;
    for (int k = 0; k < 2; k++) {
        const dtype d = k ? ddt : dt;
        if (d != DTYPE_F32 && d != DTYPE_F16 && d != DTYPE_BF16 && !(dtype_is_block(d) && (be->native_blocks >> (d - DTYPE_FIRST_BLOCK) & 1u)))
            return vt_error(VLLM_ERR_UNSUPPORTED, "experts_create: weight dtype %s (expected F32, F16, BF16 or a ggml block type)",
                            dtype_name(d));
    }
    int64_t I = g0->shape[0], D = g0->shape[1];
    for (int e = 0; e < E; e++) {
        if (!moe_weight_ok(gate[e], I, D, dt) || !moe_weight_ok(up[e], I, D, dt) ||
            !moe_weight_ok(down[e], D, I, ddt))
            return vt_error(VLLM_ERR_INVALID_ARG,
                            "experts_create: expert %d must have gate, up (%lld, %lld) %s and down (%lld, %lld) %s "
                            "like expert 0",
                            e, (long long)I, (long long)D, dtype_name(dt), (long long)D, (long long)I, dtype_name(ddt));
    }
    const tensor *const *bg = bias ? bias->gate : NULL, *const *bu = bias ? bias->up : NULL,
                        *const *bd = bias ? bias->down : NULL;
    for (int e = 0; e < E; e++)
        if (!moe_bias_ok(bg ? bg[e] : NULL, I) || !moe_bias_ok(bu ? bu[e] : NULL, I) ||
            !moe_bias_ok(bd ? bd[e] : NULL, D))
            return vt_error(VLLM_ERR_INVALID_ARG,
                            "experts_create: expert %d's biases must be float vectors of (%lld), (%lld) and (%lld)", e,
                            (long long)I, (long long)I, (long long)D);

    be_experts *ex = calloc(1, sizeof *ex);
    if (!ex) return vt_error(VLLM_ERR_NO_MEMORY, "experts_create: out of memory");
    ex->E = E;
    ex->D = D;
    ex->I = I;
    ex->dt = dt;
    ex->gate_up = calloc((size_t)E, sizeof *ex->gate_up);
    ex->down = calloc((size_t)E, sizeof *ex->down);
    if (!ex->gate_up || !ex->down) {
        cpu_experts_free(be, ex);
        return vt_error(VLLM_ERR_NO_MEMORY, "experts_create: out of memory");
    }
    for (int e = 0; e < E; e++) {
        const tensor *gu[2] = {gate[e], up[e]};
        const tensor *gub[2] = {bg ? bg[e] : NULL, bu ? bu[e] : NULL}, *db[1] = {bd ? bd[e] : NULL};
        vllm_status st = cpu_linear_create(be, gu, gub[0] || gub[1] ? gub : NULL, 2, &ex->gate_up[e]);
        if (st == VLLM_OK) st = cpu_linear_create(be, &down[e], db[0] ? db : NULL, 1, &ex->down[e]);
        if (st != VLLM_OK) {
            cpu_experts_free(be, ex);
            return st;
        }
    }
    *out = ex;
    return VLLM_OK;
}

/* ---- routing ---- */

static bool moe_params_ok(cpu_state *cpu, const char *op, const moe_params *p) {
    if (!p) {
        cpu_fail(cpu, "%s: no moe_params", op);
        return false;
    }
    if (p->num_experts < 1 || p->top_k < 1 || p->top_k > p->num_experts) {
        cpu_fail(cpu, "%s: top_k %d of %d experts (need 1 <= top_k <= num_experts)", op, p->top_k,
                 p->num_experts);
        return false;
    }
    if ((unsigned)p->scoring >= BE_MOE_SCORING_COUNT || (unsigned)p->act >= BE_ACT_COUNT) {
        cpu_fail(cpu, "%s: scoring %d or activation %d is out of range", op, (int)p->scoring, (int)p->act);
        return false;
    }
    if (!(p->swiglu_alpha >= 0.0f && p->swiglu_limit >= 0.0f && isfinite(p->swiglu_alpha) &&
          isfinite(p->swiglu_limit))) {
        cpu_fail(cpu, "%s: swiglu_alpha %g and swiglu_limit %g must be 0 (the defaults) or positive and finite", op,
                 (double)p->swiglu_alpha, (double)p->swiglu_limit);
        return false;
    }
    const char *why = be_moe_routing_check(p);
    if (why) {
        cpu_fail(cpu, "%s: %s", op, why);
        return false;
    }
    return true;
}

typedef struct route_ctx {
    const void *logits;     /* (T, E) of logits_dt */
    dtype logits_dt;
    int64_t ls;             /* logits row stride (elements) */
    int32_t *ids;           /* (T, k) */
    int64_t is;
    float *w;               /* (T, k) */
    int64_t ws;
    int E, k;
    int ns;                 /* shared experts E .. E + ns - 1 appended after the top k, weight 1 */
    bool shared_gate;       /* ... weight sigmoid(logits[t, E]) instead (moe_params.shared_gate) */
    be_moe_scoring scoring;
    bool renormalize;
    int G, kg;              /* groups (0: none) and the groups kept */
    float scale;            /* routed_scaling (1: none) */
    const void *bias;       /* (E) of bias_dt: the choice scores' bias, or NULL */
    dtype bias_dt;
    float *scratch;         /* (num_threads, 2E + G): p, c, group scores */
    unsigned char *taken;   /* (num_threads, E + G) chosen flags (experts, groups) */
} route_ctx;

/* a ranks before b (values va, vb): the larger, a number before a NaN; equal values keep the order
 * of the scan (increasing ids), so the lower id wins a tie */
static inline bool route_better(float va, float vb) { return va > vb || (vb != vb && va == va); }

/* The routing of one token. The grouped scorings as transformers computes them:
 *  DeepSeek-V2 (modeling_deepseek_v2.py, DeepseekV2Moe.route_tokens_to_experts):
 *    p = softmax(logits, f32); group_scores = p.view(G, E/G).max(-1); keep topk(group_scores, kg);
 *    tmp = p.masked_fill(~kept, 0.0); w, ids = topk(tmp, k); w *= routed_scaling_factor
 *  DeepSeek-V3 (modeling_deepseek_v3.py, DeepseekV3TopkRouter / DeepseekV3MoE.route_tokens_to_experts):
 *    s = sigmoid(logits, f32); c = s + e_score_correction_bias;
 *    group_scores = c.view(G, E/G).topk(2).sum(-1); keep topk(group_scores, kg);
 *    c = c.masked_fill(~kept, 0.0); ids = topk(c, k); w = s.gather(ids);
 *    if norm_topk_prob: w /= w.sum() + 1e-20; w *= routed_scaling_factor
 * vLLM's grouped_topk (fused_moe) computes the same but masks with -inf and renormalises without the
 * 1e-20: the two differ only when a kept group's experts score <= 0 (a V3 choice score pulled negative
 * by its bias, a V2 probability underflowing to 0), where transformers can pick a masked expert. */
static void route_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    const route_ctx *c = ctx;
    const int E = c->E, k = c->k, G = c->G;
    float *p = c->scratch + (size_t)tid * (size_t)(2 * E + G); /* (E) the scores: softmax or sigmoid */
    float *ch = p + E;                                          /* (E) the choice scores */
    float *gs = ch + E;                                         /* (G) the group scores */
    unsigned char *taken = c->taken + (size_t)tid * (size_t)(E + G), *gkept = taken + E;
    const bool sigmoid = c->scoring == BE_MOE_SIGMOID_NOAUX_TC;
    for (int64_t t = t0; t < t1; t++) {
        const unsigned char *row = (const unsigned char *)c->logits + (size_t)(t * c->ls) * dtype_size(c->logits_dt);
        if (sigmoid) {
            /* p (E) = sigmoid(logits[t]) in f32; ch = p + bias */
            for (int e = 0; e < E; e++) {
                p[e] = 1.0f / (1.0f + expf(-cpu_load(row, c->logits_dt, e)));
                ch[e] = c->bias ? p[e] + cpu_load(c->bias, c->bias_dt, e) : p[e];
            }
        } else {
            /* p (E) = softmax(logits[t]) in f32, max-subtracted; ch = p */
            float mx = -INFINITY;
            for (int e = 0; e < E; e++) {
                p[e] = cpu_load(row, c->logits_dt, e);
                mx = p[e] > mx ? p[e] : mx;
            }
            float sum = 0.0f;
            for (int e = 0; e < E; e++) {
                p[e] = expf(p[e] - mx);
                sum += p[e];
            }
            for (int e = 0; e < E; e++) ch[e] = p[e] /= sum;
        }
        if (G > 1) {
            /* gs (G): the max of each group's ch (V2) or the sum of its two largest (V3) */
            const int per = E / G;
            for (int g = 0; g < G; g++) {
                float m1 = -INFINITY, m2 = -INFINITY; /* the group's largest two (NaN skipped) */
                for (int e = g * per; e < (g + 1) * per; e++) {
                    if (ch[e] > m1) {
                        m2 = m1;
                        m1 = ch[e];
                    } else if (ch[e] > m2) {
                        m2 = ch[e];
                    }
                }
                gs[g] = sigmoid ? m1 + m2 : m1;
            }
            /* keep the kg best groups; the others' experts get a choice score of 0 */
            memset(gkept, 0, (size_t)G);
            for (int j = 0; j < c->kg; j++) {
                int best = -1;
                for (int g = 0; g < G; g++)
                    if (!gkept[g] && (best < 0 || route_better(gs[g], gs[best]))) best = g;
                gkept[best] = 1;
            }
            for (int e = 0; e < E; e++)
                if (!gkept[e / per]) ch[e] = 0.0f;
        }
        /* the top k of ch, best first; equal scores: the lower id first (a strict > over increasing
         * ids); a NaN score is never preferred */
        memset(taken, 0, (size_t)E);
        int32_t *ids = c->ids + t * c->is;
        float *w = c->w + t * c->ws;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || route_better(ch[e], ch[best]))) best = e;
            taken[best] = 1;
            ids[j] = best;
            w[j] = sigmoid ? p[best] : ch[best]; /* V3: the sigmoid score, not the biased one */
        }
        if (c->renormalize) {
            float s = 0.0f;
            for (int j = 0; j < k; j++) s += w[j];
            if (c->scoring != BE_MOE_SOFTMAX) s += 1e-20f; /* transformers' DeepSeek routers */
            for (int j = 0; j < k; j++) w[j] /= s;
        }
        if (c->scale != 1.0f)
            for (int j = 0; j < k; j++) w[j] *= c->scale;
        /* the shared experts: every token's, unscaled (transformers adds shared_experts(x) as is), or gated by
         * sigmoid(the gate logit after the router's, f32) */
        const float sw = c->shared_gate ? 1.0f / (1.0f + expf(-cpu_load(row, c->logits_dt, E))) : 1.0f;
        for (int j = 0; j < c->ns; j++) {
            ids[k + j] = E + j;
            w[k + j] = sw;
        }
    }
}

// logits (T, E) (shared_gate: (T, E + 1)) [+ score_bias (E)] -> ids (T, k + ns) I32, w (T, k + ns) F32
// (ns = num_shared)
void cpu_moe_route(backend *be, const tensor *logits, const moe_params *p, tensor *ids, tensor *w) {
    cpu_state *cpu = cpu_of(be);
    if (!moe_params_ok(cpu, "moe_route", p)) return;
    const int E = p->num_experts, k = p->top_k, G = p->num_groups > 1 ? p->num_groups : 0, kw = be_moe_width(p);
    if (!cpu_check_mat(cpu, "moe_route", "logits", logits, CPU_ANY_FLOAT, -1, p->shared_gate ? E + 1 : E) ||
        !cpu_check_mat(cpu, "moe_route", "ids", ids, DTYPE_I32, cpu_rows(logits), kw) ||
        !cpu_check_mat(cpu, "moe_route", "w", w, DTYPE_F32, cpu_rows(logits), kw))
        return;
    int64_t T = cpu_rows(logits);
    if (T == 0) return;
    int nt = cpu->num_threads;
    float *scratch = malloc((size_t)nt * (size_t)(2 * E + G) * sizeof *scratch);
    unsigned char *taken = malloc((size_t)nt * (size_t)(E + G));
    if (!scratch || !taken) {
        free(scratch);
        free(taken);
        cpu_fail(cpu, "moe_route: out of memory");
        return;
    }
    route_ctx c = {
        .logits = logits->data, .logits_dt = logits->dtype, .ls = tensor_row_stride(logits),
        .ids = ids->data, .is = tensor_row_stride(ids), .w = w->data, .ws = tensor_row_stride(w),
        .E = E, .k = k, .ns = p->num_shared, .shared_gate = p->shared_gate, .scoring = p->scoring, .renormalize = p->renormalize, .G = G, .kg = p->topk_groups,
        .scale = p->routed_scaling > 0.0f ? p->routed_scaling : 1.0f,
        .bias = p->score_bias ? p->score_bias->data : NULL, .bias_dt = p->score_bias ? p->score_bias->dtype : DTYPE_F32,
        .scratch = scratch, .taken = taken,
    };
    tp_run_cost(cpu->pool, T, (double)E * (6.0 + k), route_task, &c);
    free(scratch);
    free(taken);
}

/* ---- the experts' MLPs ---- */

static bool moe_overlap(const tensor *a, const tensor *b) {
    int64_t na = tensor_extent_bytes(a), nb = tensor_extent_bytes(b);
    const char *pa = a->data, *pb = b->data;
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

// x (T, D), ids (T, k) I32, w (T, k) F32 -> y (T, D) (+)= sum_j w[t, j] expert_{ids[t, j]}(x_t);
// k = top_k + num_shared, the experts E + num_shared
void cpu_moe_experts(backend *be, const be_experts *ex, const tensor *x, const tensor *ids, const tensor *w,
                     const moe_params *p, bool accumulate, tensor *y) {
    cpu_state *cpu = cpu_of(be);
    if (!ex) {
        cpu_fail(cpu, "moe_experts: no experts");
        return;
    }
    if (!moe_params_ok(cpu, "moe_experts", p)) return;
    if (p->num_experts + p->num_shared != ex->E) {
        cpu_fail(cpu, "moe_experts: moe_params has %d experts (%d routed, %d shared), the layer %d",
                 p->num_experts + p->num_shared, p->num_experts, p->num_shared, ex->E);
        return;
    }
    const int E = ex->E, k = be_moe_width(p); /* the shared experts are ids like the routed ones */
    const int64_t D = ex->D, I = ex->I;
    const float alpha = p->swiglu_alpha > 0.0f ? p->swiglu_alpha : BE_SWIGLU_OAI_ALPHA;
    const float limit = p->swiglu_limit > 0.0f ? p->swiglu_limit : BE_SWIGLU_OAI_LIMIT;
    if (!cpu_check_mat(cpu, "moe_experts", "x", x, DTYPE_F32, -1, D)) return;
    const int64_t T = cpu_rows(x);
    if (!cpu_check_mat(cpu, "moe_experts", "ids", ids, DTYPE_I32, T, k) ||
        !cpu_check_mat(cpu, "moe_experts", "w", w, DTYPE_F32, T, k) ||
        !cpu_check_mat(cpu, "moe_experts", "y", y, DTYPE_F32, T, D))
        return;
    if (T == 0) return;
    if (moe_overlap(x, y)) {
        cpu_fail(cpu, "moe_experts: y overlaps x");
        return;
    }
    const int32_t *id = ids->data;
    const float *wt = w->data;
    const int64_t is = tensor_row_stride(ids), wsd = tensor_row_stride(w);
    const int64_t xs = tensor_row_stride(x), ys = tensor_row_stride(y);
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < k; j++)
            if (id[t * is + j] < 0 || id[t * is + j] >= E) {
                cpu_fail(cpu, "moe_experts: ids[%lld, %d] = %d is not an expert (0 .. %d)", (long long)t, j,
                         (int)id[t * is + j], E - 1);
                return;
            }

    /* the permutation: count[e] (token, slot) pairs per expert, start[e] the
     * offset of expert e's group in perm (T * k), pairs in token order */
    const int64_t N = T * k;
    int64_t *start = calloc((size_t)E + 1, sizeof *start);
    int64_t *perm = malloc((size_t)N * sizeof *perm);  /* t * k + j, grouped by expert */
    if (!start || !perm) {
        free(start);
        free(perm);
        cpu_fail(cpu, "moe_experts: out of memory");
        return;
    }
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < k; j++) start[id[t * is + j] + 1]++;
    int64_t max_n = 0;
    for (int e = 0; e < E; e++) {
        max_n = start[e + 1] > max_n ? start[e + 1] : max_n;
        start[e + 1] += start[e];
    }
    {
        int64_t *fill = malloc((size_t)E * sizeof *fill);
        if (!fill) {
            free(start);
            free(perm);
            cpu_fail(cpu, "moe_experts: out of memory");
            return;
        }
        memcpy(fill, start, (size_t)E * sizeof *fill);
        for (int64_t t = 0; t < T; t++)
            for (int j = 0; j < k; j++) perm[fill[id[t * is + j]]++] = t * k + j;
        free(fill);
    }

    /* per-expert scratch, max_n rows: xg (n, D) the gathered tokens, gu (n, 2I),
     * h (n, I) = act(gate) * up, o (n, D) = down h */
    float *xg = malloc((size_t)max_n * (size_t)(2 * D + 3 * I) * sizeof(float));
    if (!xg) {
        free(start);
        free(perm);
        cpu_fail(cpu, "moe_experts: out of memory (%lld tokens for one expert)", (long long)max_n);
        return;
    }
    float *gu = xg + max_n * D, *h = gu + max_n * 2 * I, *o = h + max_n * I;

    /* y = 0 unless accumulating: the experts' weighted outputs are summed into it */
    if (!accumulate)
        for (int64_t t = 0; t < T; t++) memset((float *)y->data + t * ys, 0, (size_t)D * sizeof(float));

    for (int e = 0; e < E; e++) {
        const int64_t n = start[e + 1] - start[e];
        if (n == 0) continue;  /* an expert no token picked: its weights are not read */
        const int64_t *pe = perm + start[e];
        for (int64_t r = 0; r < n; r++)
            memcpy(xg + r * D, (const float *)x->data + (pe[r] / k) * xs, (size_t)D * sizeof(float));
        tensor XG = tensor_2d(DTYPE_F32, xg, n, D), GU = tensor_2d(DTYPE_F32, gu, n, 2 * I);
        tensor H = tensor_2d(DTYPE_F32, h, n, I), O = tensor_2d(DTYPE_F32, o, n, D);
        cpu_linear(be, ex->gate_up[e], &XG, &GU);  /* (n, 2I) = xg @ [gate_e | up_e]^T */
        cpu_act_mul_p(be, p->act, alpha, limit, &GU, &H); /* (n, I) = act(gate) * up */
        cpu_linear(be, ex->down[e], &H, &O);       /* (n, D) = h @ down_e^T */
        /* the inverse permutation: y[t] += w[t, j] * o[r] (a token's slots name
         * distinct experts or repeat one: either way this loop is serial) */
        for (int64_t r = 0; r < n; r++) {
            const int64_t t = pe[r] / k;
            const int j = (int)(pe[r] % k);
            const float wj = wt[t * wsd + j];
            float *yt = (float *)y->data + t * ys;
            const float *orow = o + r * D;
            for (int64_t d = 0; d < D; d++) yt[d] = CPU_FMA(wj, orow[d], yt[d]);
        }
    }
    free(xg);
    free(start);
    free(perm);
}

/* ---- the shared expert's gate ---- */

typedef struct sgate_ctx {
    float *x;
    int64_t xs, D;
    const void *g;
    dtype g_dt;
    int64_t gs;
} sgate_ctx;

static void sgate_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const sgate_ctx *c = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const float s = 1.0f / (1.0f + expf(-cpu_load(c->g, c->g_dt, t * c->gs)));
        float *xt = c->x + t * c->xs;
        for (int64_t d = 0; d < c->D; d++) xt[d] *= s;
    }
}

// x (T, D) *= sigmoid(g[t]) per row; g (T, 1)
void cpu_sigmoid_gate(backend *be, tensor *x, const tensor *g) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "sigmoid_gate", "x", x, DTYPE_F32, -1, -1) ||
        !cpu_check_mat(cpu, "sigmoid_gate", "g", g, CPU_ANY_FLOAT, cpu_rows(x), 1))
        return;
    int64_t T = cpu_rows(x);
    if (T == 0) return;
    sgate_ctx c = {x->data, tensor_row_stride(x), tensor_row_len(x), g->data, g->dtype, tensor_row_stride(g)};
    tp_run_cost(cpu->pool, T, (double)c.D, sgate_task, &c);
}
