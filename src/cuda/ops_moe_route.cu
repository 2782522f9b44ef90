/*
 * ops_moe_route.cu: the CUDA mixture-of-experts routing (backend.h moe_route), on the device.
 *
 * The semantics are the CPU reference's (src/cpu/ops_moe.c, backend.h): p = softmax(logits) in f32 (max-subtracted),
 * the top k of p by repeated arg-max (best first; equal scores: the lower id first; NaN never preferred),
 * renormalised when asked. DeepSeek's routings (BE_MOE_SOFTMAX_GROUPED: V2's group-limited greedy;
 * BE_MOE_SIGMOID_NOAUX_TC: V3's sigmoid + correction bias, groups scored by their top two) in the same code: the
 * group scores reduced over the warp (a lane per group, up to 32 groups), the groups kept by repeated arg-max, the
 * others' choice scores set to 0 (transformers' masked_fill), then the same top k; weights gathered from the
 * unbiased scores, / (sum + 1e-20) when renormalised, times routed_scaling. DeepSeek's plain shared experts
 * (moe_params.num_shared) follow every token's top k with weight 1 (or Qwen2-MoE's sigmoid of the gate logit after
 * the router's), so that moe_experts (ops_moe.cu) runs them as any expert.
 *
 * k_moe_route: a warp per token, lane l holding experts l + 32 i. Up to 128 experts the softmax's max and each
 * top-k round's arg-max are redux.sync reductions of 32-bit order-preserving keys (route_key32, route_pick).
 *
 * Measured and dropped (session 35, H100, ms a batch-1 decode step, one call): the router's GEMV and the routing as
 * one kernel for one token (a CTA per router row, its weights loaded before the PDL wait; the last CTA to arrive, by
 * a fence and an atomic count, routing the logits): Qwen3-30B-A3B 3.392 (two kernels) -> 3.399, Qwen3.5-35B-A3B
 * 3.319 -> 3.303, DeepSeek-V2-Lite 2.740 -> 2.777, gpt-oss-20b 3.159 -> 3.150, where leaving the routing kernel out
 * of the graph altogether (timing only) had saved 0.05-0.18 ms: what costs is the routing's own chain (the logits'
 * round trip, the softmax, k arg-max rounds), which the fused form keeps, plus its fence and atomic.
 */
#include <limits.h>

#include "cuda/cuda_internal.h"

#define MR_WARPS 8              /* k_moe_route: a warp per token */

/* ---- routing ---- */

struct route_args {
    const void *logits;         /* (T, E) of ldt, row stride ls */
    int ldt;
    int64_t ls;
    int32_t *ids;               /* (T, k), row stride is */
    int64_t is;
    float *w;                   /* (T, k), row stride ws */
    int64_t ws;
    int T, E, k;
    int ns;                     /* shared experts E .. E + ns - 1 written after the top k with weight 1 */
    bool shared_gate;           /* ... weight sigmoid(logits[t, E]) instead (moe_params.shared_gate) */
    bool renorm;
    int scoring;                /* be_moe_scoring */
    int G, kg;                  /* groups (0: none; at most 32) and the groups kept */
    float eps;                  /* added to the renormalisation's sum (the grouped scorings: 1e-20) */
    float scale;                /* routed_scaling (1: none) */
    const void *bias;           /* (E) of bdt: the choice scores' bias, or NULL */
    int bdt;
};

/* (av, ai) ranks before (bv, bi): a real id before none (-1), a number before NaN, the larger
 * score, then the lower id (a total order on real ids, so any reduction tree picks the same). */
__device__ __forceinline__ bool route_better(float av, int ai, float bv, int bi) {
    if (bi < 0) return ai >= 0;
    if (ai < 0) return false;
    const bool an = av != av, bn = bv != bv;
    if (an != bn) return bn;
    if (!an && av != bv) return av > bv;
    return ai < bi;
}

/* route_better's order of scores as one unsigned key, larger = better: the score's bits mapped to an order-preserving
 * unsigned (-0 as +0; NaN 1, below every number: -inf is 0x007fffff); 0 is none (an expert taken, a lane past E).
 * Equal keys are equal scores, which go to the lower id. */
__device__ __forceinline__ unsigned route_key32(float v) {
    unsigned b = __float_as_uint(v);
    if (v != v) return 1u;
    if (b == 0x80000000u) b = 0u; /* -0 == +0: ties go to the lower id */
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}

/* route_better's order as one unsigned 64-bit key, larger = better: the score's bits mapped to an order-preserving
 * unsigned (-0 as +0, NaN below every number) above the id's complement (the lower id first on equal scores);
 * 0 is none. */
__device__ __forceinline__ unsigned long long route_key(float v, int id) {
    return (unsigned long long)route_key32(v) << 32 | (unsigned)(0x7fffffff - id); /* NaN: 1 << 32, above none */
}
__device__ __forceinline__ int route_key_id(unsigned long long key) {
    return key ? 0x7fffffff - (int)(unsigned)(key & 0xffffffffull) : -1;
}

/* The top-k rounds' arg-max over a lane's EPL candidates (lane + 32 i), the chosen one then removed: next() returns
 * the chosen id in every lane (-1: none left). Up to 4 a lane (E <= 128): the warp's largest route_key32 by one
 * redux.sync max, then the lowest id holding it by one redux.sync min; more: a 64-bit key (route_key) a candidate
 * and a five-level butterfly of 64-bit maxima (H100, session 36, ms a batch-1 decode step against the butterfly:
 * Qwen3-30B-A3B, E 128, 3.324 -> 3.290; Qwen3.5-35B-A3B, E 256, 3.090 -> 3.113, hence not there). */
template <int EPL, bool REDUX = (EPL <= 4)>
struct route_pick {
    unsigned key[EPL]; /* route_key32; 0: none (taken, or past E) */
    __device__ __forceinline__ void init(const float *c, int lane, int E) {
#pragma unroll
        for (int i = 0; i < EPL; i++) key[i] = lane + 32 * i < E ? route_key32(c[i]) : 0u;
    }
    __device__ __forceinline__ int next(int lane) {
        unsigned best = 0u;
#pragma unroll
        for (int i = 0; i < EPL; i++) best = max(best, key[i]);
        best = __reduce_max_sync(0xffffffffu, best);
        unsigned mine = 0xffffffffu; /* my lowest id holding best (ids grow with i) */
#pragma unroll
        for (int i = EPL - 1; i >= 0; i--)
            if (best && key[i] == best) mine = (unsigned)(lane + 32 * i);
        const int bi = best ? (int)__reduce_min_sync(0xffffffffu, mine) : -1;
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (bi == lane + 32 * i) key[i] = 0u;
        return bi;
    }
};
template <int EPL>
struct route_pick<EPL, false> {
    unsigned long long key[EPL]; /* route_key; 0: none */
    unsigned taken;              /* bit i: lane + 32 i chosen */
    __device__ __forceinline__ void init(const float *c, int lane, int E) {
        taken = 0;
#pragma unroll
        for (int i = 0; i < EPL; i++) key[i] = lane + 32 * i < E ? route_key(c[i], lane + 32 * i) : 0ull;
    }
    __device__ __forceinline__ int next(int lane) {
        unsigned long long best = 0ull;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const unsigned long long ki = (taken >> i) & 1u ? 0ull : key[i];
            best = ki > best ? ki : best;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long ob = __shfl_xor_sync(0xffffffffu, best, o);
            best = ob > best ? ob : best;
        }
        const int bi = route_key_id(best);
        if (bi >= 0 && (bi & 31) == lane) taken |= 1u << (bi >> 5);
        return bi;
    }
};

// logits (T, E) [+ bias (E)] -> ids (T, k + ns) I32 best first (then the shared experts), w (T, k + ns) F32;
// a warp per token, lane l holds experts l + 32 i
template <int EPL>
__global__ void __launch_bounds__(MR_WARPS * 32) k_moe_route(route_args a) {
    pdl_launch();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * MR_WARPS + warp;
    if (t >= a.T) return;
    const bool sigmoid = a.scoring == BE_MOE_SIGMOID_NOAUX_TC;
    float p[EPL]; /* the scores: softmax or sigmoid */
    float c[EPL]; /* the choice scores: p (+ bias), 0 in the groups not kept */
    /* the raw logits (and the bias) of lane + 32 i, loaded together (indices clamped, the dtype a constant: a test
     * per element made the loads a chain of round trips) */
    float raw[EPL], rb[EPL];
    const int64_t row = (int64_t)t * a.ls;
    float gate_logit = 0.0f; /* shared_gate: the gate's logit after the router's, loaded with them (helper review,
                                session 36: loaded after the ids / w stores it was a round trip at the tail) */
    cu_with_dt(a.ldt, [&](auto d) {
#pragma unroll
        for (int i = 0; i < EPL; i++) raw[i] = cu_ld(a.logits, decltype(d)::value, row + min(lane + 32 * i, a.E - 1));
        if (a.shared_gate && a.ns) gate_logit = cu_ld(a.logits, decltype(d)::value, row + a.E);
    });
    cu_ld_batch<EPL>(rb, sigmoid ? a.bias : NULL, a.bdt, lane, 32, a.E);
    if (sigmoid) {
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = lane + 32 * i;
            p[i] = c[i] = 0.0f;
            if (e < a.E) {
                p[i] = 1.0f / (1.0f + expf(-raw[i]));
                c[i] = a.bias ? p[i] + rb[i] : p[i];
            }
        }
    } else {
        /* the largest logit, NaN never the max (as the CPU's compare): up to 4 a lane one redux.sync over
         * route_key32's (NaN 1, below -inf's key), else a butterfly */
        float mx = -INFINITY;
        if constexpr (EPL <= 4) {
            unsigned mk = route_key32(-INFINITY);
#pragma unroll
            for (int i = 0; i < EPL; i++)
                if (lane + 32 * i < a.E) mk = max(mk, route_key32(raw[i]));
            mk = __reduce_max_sync(0xffffffffu, mk);
            mx = __uint_as_float(mk & 0x80000000u ? mk & 0x7fffffffu : ~mk);
        } else {
#pragma unroll
            for (int i = 0; i < EPL; i++)
                if (lane + 32 * i < a.E && raw[i] > mx) mx = raw[i];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float v = __shfl_xor_sync(0xffffffffu, mx, o);
                mx = v > mx ? v : mx;
            }
        }
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            p[i] = lane + 32 * i < a.E ? expf(raw[i] - mx) : 0.0f;
            sum += p[i];
        }
        sum = cu_warp_sum(sum);
#pragma unroll
        for (int i = 0; i < EPL; i++) c[i] = p[i] /= sum;
    }
    if (a.G > 1) {
        /* group g's score (lane g keeps it): the max of its c (V2) or the sum of its two largest (V3),
         * NaN skipped; the two largest of the warp by a butterfly of (largest, second) pairs */
        const int per = a.E / a.G;
        int gi[EPL];
#pragma unroll
        for (int i = 0; i < EPL; i++) gi[i] = lane + 32 * i < a.E ? (lane + 32 * i) / per : -1;
        float gsc = 0.0f;
        for (int g = 0; g < a.G; g++) {
            float m1 = -INFINITY, m2 = -INFINITY;
#pragma unroll
            for (int i = 0; i < EPL; i++)
                if (gi[i] == g) {
                    if (c[i] > m1) {
                        m2 = m1;
                        m1 = c[i];
                    } else if (c[i] > m2) {
                        m2 = c[i];
                    }
                }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float o1 = __shfl_xor_sync(0xffffffffu, m1, o), o2 = __shfl_xor_sync(0xffffffffu, m2, o);
                const float hi = m1 > o1 ? m1 : o1, lo = m1 > o1 ? o1 : m1, r2 = m2 > o2 ? m2 : o2;
                m1 = hi;
                m2 = lo > r2 ? lo : r2;
            }
            if (lane == g) gsc = sigmoid ? m1 + m2 : m1;
        }
        /* keep the kg best groups (repeated arg-max, the lower group first on ties) */
        unsigned kept = 0;
        for (int j = 0; j < a.kg; j++) {
            float bv = 0.0f;
            int bi = -1;
            if (lane < a.G && !((kept >> lane) & 1u)) {
                bv = gsc;
                bi = lane;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (route_better(ov, oi, bv, bi)) {
                    bv = ov;
                    bi = oi;
                }
            }
            if (bi >= 0) kept |= 1u << bi;
        }
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (gi[i] >= 0 && !((kept >> gi[i]) & 1u)) c[i] = 0.0f;
    }
    /* top k of c by repeated arg-max (route_pick); slot j is kept by lane j % 32 (in my[j / 32]) and every slot is
     * written at the end at once (no store-then-reload chain) */
    route_pick<EPL> pick;
    pick.init(c, lane, a.E);
    float wsum = 0.0f, myw[CU_MOE_MAX_K / 32] = {0.0f};
    int myi[CU_MOE_MAX_K / 32] = {0};
    int32_t *ids = a.ids + (int64_t)t * a.is;
    float *w = a.w + (int64_t)t * a.ws;
    for (int j = 0; j < a.k; j++) {
        const int bi = pick.next(lane);
        /* the weight from the lane holding the expert: its choice score (softmax: c, 0 in a group not kept), or
         * its sigmoid score (not c, which has the bias) */
        float mine = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (i == (bi >> 5)) mine = sigmoid ? p[i] : c[i];
        const float bv = __shfl_sync(0xffffffffu, mine, bi & 31);
        /* (bv, bi) in every lane */
#pragma unroll
        for (int h = 0; h < CU_MOE_MAX_K / 32; h++)
            if (j == lane + 32 * h) {
                myi[h] = bi;
                myw[h] = bv;
            }
        wsum += bv; /* in slot order, as the CPU (the same sum in every lane) */
    }
    wsum += a.eps;
#pragma unroll
    for (int h = 0; h < CU_MOE_MAX_K / 32; h++) {
        const int j = lane + 32 * h;
        if (j < a.k) {
            ids[j] = myi[h];
            float v = a.renorm ? myw[h] / wsum : myw[h];
            if (a.scale != 1.0f) v *= a.scale;
            w[j] = v;
        }
    }
    /* the shared experts, unscaled, or gated by sigmoid(the gate logit after the router's, f32) */
    const float sw = a.shared_gate && a.ns ? 1.0f / (1.0f + expf(-gate_logit)) : 1.0f;
    for (int j = lane; j < a.ns; j += 32) {
        ids[a.k + j] = a.E + j;
        w[a.k + j] = sw;
    }
}

typedef void (*route_kernel)(route_args);

// logits (T, E) BF16 / F16 / F32 ((T, E + 1) with shared_gate) [+ score_bias (E)] -> ids (T, k + ns) I32,
// w (T, k + ns) F32 (ns = num_shared)
void cu_moe_route(backend *be, const tensor *logits, const moe_params *p, tensor *ids, tensor *w) {
    cu_state *cu = cu_of(be);
    if (!cu_moe_params_ok(cu, "moe_route", p)) return; /* k + ns <= CU_MOE_MAX_K */
    const int E = p->num_experts, k = p->top_k, kw = be_moe_width(p);
    if (!cu_check_mat(cu, "moe_route", "logits", logits, CU_FLOAT, -1, p->shared_gate ? E + 1 : E) ||
        !cu_check_mat(cu, "moe_route", "ids", ids, CU_DT(DTYPE_I32), cu_rows(logits), kw) ||
        !cu_check_mat(cu, "moe_route", "w", w, CU_DT(DTYPE_F32), cu_rows(logits), kw))
        return;
    const int64_t T = cu_rows(logits);
    if (T == 0) return;
    if (T > INT_MAX - MR_WARPS) {
        cu_fail(cu, "moe_route: %lld tokens", (long long)T);
        return;
    }
    route_args a = {};
    a.logits = logits->data;
    a.ldt = (int)logits->dtype;
    a.ls = tensor_row_stride(logits);
    a.ids = (int32_t *)ids->data;
    a.is = tensor_row_stride(ids);
    a.w = (float *)w->data;
    a.ws = tensor_row_stride(w);
    a.T = (int)T;
    a.E = E;
    a.k = k;
    a.ns = p->num_shared;
    a.shared_gate = p->shared_gate;
    a.renorm = p->renormalize;
    a.scoring = (int)p->scoring;
    a.G = p->num_groups > 1 ? p->num_groups : 0;
    a.kg = p->topk_groups;
    a.eps = p->scoring == BE_MOE_SOFTMAX ? 0.0f : 1e-20f; /* transformers' DeepSeek routers */
    a.scale = p->routed_scaling > 0.0f ? p->routed_scaling : 1.0f;
    a.bias = p->score_bias ? p->score_bias->data : NULL;
    a.bdt = p->score_bias ? (int)p->score_bias->dtype : (int)DTYPE_F32;
    const int epl = (E + 31) / 32;
    route_kernel kern = epl <= 1 ? k_moe_route<1> : epl <= 2 ? k_moe_route<2> : epl <= 4 ? k_moe_route<4>
                                                 : epl <= 8 ? k_moe_route<8> : k_moe_route<16>; /* E <= 512 */
    cu_launch(cu, "moe_route", true, kern, dim3((unsigned)((T + MR_WARPS - 1) / MR_WARPS)), dim3(MR_WARPS * 32), 0, a);
}
