/*
 * ops_moe_route.cu: the CUDA mixture-of-experts routing (backend.h moe_route) and the router GEMV fused with it
 * (moe_router_route).
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
 * k_moe_route: a warp per token (route_token), lane l holding experts l + 32 i.
 *
 * k_moe_router (moe_router_route, one token: a decode step of one sequence): the router's linear_fused (the RMSNorm
 * of x into h, the GEMV, its bias) as a CTA per router row whose weights load before the PDL wait, and the routing
 * by the last CTA to finish (an arrival counter after a fence: the CUDA programming guide's threadfence reduction), so
 * that the step has one kernel boundary fewer between the attention's output and the experts
 * (VLLM_CUDA_MOE_ROUTER=split runs the two ops instead, for comparisons). The timing-only
 * measure that motivated it (H100, session 35, the routing kernel left out of the graph): Qwen3-30B-A3B 3.395 ->
 * 3.242 ms a step, Qwen3.5-35B-A3B 3.284 -> 3.100, DeepSeek-V2-Lite 2.731 -> 2.684, gpt-oss-20b 3.143 -> 3.099.
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

/* route_better's order as one unsigned 64-bit key, larger = better: the score's bits mapped to an order-preserving
 * unsigned (-0 as +0, NaN below every number) above the id's complement (the lower id first on equal scores);
 * 0 is none. */
__device__ __forceinline__ unsigned long long route_key(float v, int id) {
    unsigned b = __float_as_uint(v), u;
    if (v != v) u = 0u;
    else {
        if (b == 0x80000000u) b = 0u; /* -0 == +0: ties go to the lower id */
        u = b & 0x80000000u ? ~b : b | 0x80000000u; /* -inf: 0x007fffff > 0 */
    }
    return (unsigned long long)u << 32 | (unsigned)(0x7fffffff - id);
}
__device__ __forceinline__ int route_key_id(unsigned long long key) {
    return key ? 0x7fffffff - (int)(unsigned)(key & 0xffffffffull) : -1;
}

// token t's logits (E) [+ bias (E)] -> ids (k + ns) I32 best first (then the shared experts), w (k + ns) F32, by one
// warp (every lane calls): lane l holds experts l + 32 i
template <int EPL>
__device__ __forceinline__ void route_token(const route_args &a, int t, int lane) {
    const bool sigmoid = a.scoring == BE_MOE_SIGMOID_NOAUX_TC;
    float p[EPL]; /* the scores: softmax or sigmoid */
    float c[EPL]; /* the choice scores: p (+ bias), 0 in the groups not kept */
    /* the raw logits (and the bias) of lane + 32 i, loaded together (indices clamped, the dtype a constant: a test
     * per element made the loads a chain of round trips) */
    float raw[EPL], rb[EPL];
    const int64_t row = (int64_t)t * a.ls;
    cu_with_dt(a.ldt, [&](auto d) {
#pragma unroll
        for (int i = 0; i < EPL; i++) raw[i] = cu_ld(a.logits, decltype(d)::value, row + min(lane + 32 * i, a.E - 1));
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
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = lane + 32 * i;
            p[i] = e < a.E ? raw[i] : -INFINITY;
            mx = p[i] > mx ? p[i] : mx; /* NaN never the max (as the CPU's compare) */
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = v > mx ? v : mx;
        }
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            p[i] = lane + 32 * i < a.E ? expf(p[i] - mx) : 0.0f;
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
    /* top k of c by repeated arg-max over route_key's (a 64-bit max per butterfly level: route_better's branches
     * made each level of the 8 x 5 a chain of ~20 dependent instructions, ncu 10 us a call at base clocks for
     * E 128, k 8); taken: bit i = expert lane + 32 i chosen; slot j is kept by lane j % 32 (in my[j / 32]) and
     * every slot is written at the end at once (no store-then-reload chain) */
    unsigned long long key[EPL];
#pragma unroll
    for (int i = 0; i < EPL; i++) key[i] = lane + 32 * i < a.E ? route_key(c[i], lane + 32 * i) : 0ull;
    unsigned taken = 0;
    float wsum = 0.0f, myw[CU_MOE_MAX_K / 32] = {0.0f};
    int myi[CU_MOE_MAX_K / 32] = {0};
    int32_t *ids = a.ids + (int64_t)t * a.is;
    float *w = a.w + (int64_t)t * a.ws;
    for (int j = 0; j < a.k; j++) {
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
        /* the weight from the lane holding the expert: its choice score (softmax: c, 0 in a group not kept), or
         * its sigmoid score (not c, which has the bias) */
        float mine = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (i == (bi >> 5)) mine = sigmoid ? p[i] : c[i];
        const float bv = __shfl_sync(0xffffffffu, mine, bi & 31);
        /* the butterfly left (bv, bi) in every lane */
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
    const float sw = a.shared_gate && a.ns ? 1.0f / (1.0f + expf(-cu_ld(a.logits, a.ldt, row + a.E))) : 1.0f;
    for (int j = lane; j < a.ns; j += 32) {
        ids[a.k + j] = a.E + j;
        w[a.k + j] = sw;
    }
}

// logits (T, E) [+ bias (E)] -> ids (T, k + ns), w (T, k + ns): a warp per token
template <int EPL>
__global__ void __launch_bounds__(MR_WARPS * 32) k_moe_route(route_args a) {
    pdl_launch();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * MR_WARPS + warp;
    if (t >= a.T) return;
    route_token<EPL>(a, t, lane);
}

typedef void (*route_kernel)(route_args);

// logits (T, E) BF16 / F16 / F32 ((T, E + 1) with shared_gate) [+ score_bias (E)] -> ids (T, k + ns) I32,
// w (T, k + ns) F32 (ns = num_shared)
/* Checks moe_route's arguments (op names them) and fills a; false (cu_fail) when they are bad. */
static bool route_prepare(cu_state *cu, const char *op, const tensor *logits, const moe_params *p, tensor *ids,
                          tensor *w, route_args &a) {
    if (!cu_moe_params_ok(cu, op, p)) return false; /* k + ns <= CU_MOE_MAX_K */
    const int E = p->num_experts, k = p->top_k, kw = be_moe_width(p);
    if (!cu_check_mat(cu, op, "logits", logits, CU_FLOAT, -1, p->shared_gate ? E + 1 : E) ||
        !cu_check_mat(cu, op, "ids", ids, CU_DT(DTYPE_I32), cu_rows(logits), kw) ||
        !cu_check_mat(cu, op, "w", w, CU_DT(DTYPE_F32), cu_rows(logits), kw))
        return false;
    const int64_t T = cu_rows(logits);
    if (T > INT_MAX - MR_WARPS) {
        cu_fail(cu, "%s: %lld tokens", op, (long long)T);
        return false;
    }
    a = route_args{};
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
    return true;
}

/* The lanes' experts EPL of a routing over E experts (E <= CU_MOE_MAX_E = 512). */
static int route_epl(int E) {
    const int epl = (E + 31) / 32;
    return epl <= 1 ? 1 : epl <= 2 ? 2 : epl <= 4 ? 4 : epl <= 8 ? 8 : 16;
}

void cu_moe_route(backend *be, const tensor *logits, const moe_params *p, tensor *ids, tensor *w) {
    cu_state *cu = cu_of(be);
    route_args a;
    if (!route_prepare(cu, "moe_route", logits, p, ids, w, a) || a.T == 0) return;
    const int epl = route_epl(a.E);
    route_kernel kern = epl == 1 ? k_moe_route<1> : epl == 2 ? k_moe_route<2> : epl == 4 ? k_moe_route<4>
                                                  : epl == 8 ? k_moe_route<8> : k_moe_route<16>;
    cu_launch(cu, "moe_route", true, kern, dim3((unsigned)((a.T + MR_WARPS - 1) / MR_WARPS)), dim3(MR_WARPS * 32), 0,
              a);
}


/* ---- the router GEMV and the routing in one kernel (one token) ---- */

#define RR_THREADS 256          /* k_moe_router: a CTA per router row */
#define RR_MAXC 4               /* 16-byte chunks of a row a thread takes at most: K <= 8 * RR_THREADS * RR_MAXC */

struct rr_args {
    const __nv_bfloat16 *x;     /* (1, K) */
    const __nv_bfloat16 *W;     /* (N, K) the router */
    const float *bias;          /* (N) or NULL */
    const __nv_bfloat16 *nw;    /* (K) the norm's weight, or NULL: no norm */
    bool offset;                /* the norm multiplies by (1 + nw) */
    float eps;
    __nv_bfloat16 *h;           /* (1, K) receives the normalised x (with nw) */
    void *y;                    /* (1, N) the logits, of ydt */
    int ydt;
    int N, K;
    unsigned *cnt;              /* the CTAs' arrival counter, 0 between launches */
    route_args r;               /* the routing of y's first E (+ 1) columns, T 1 */
};

/* The CTA's sum of v (every thread calls; red: RR_THREADS / 32 floats, free again after the call's second barrier). */
__device__ __forceinline__ float rr_cta_sum(float v, float *red) {
    v = cu_warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int w = 0; w < RR_THREADS / 32; w++) tot += red[w];
    __syncthreads();
    return tot;
}

// x (1, K) BF16 -> [h = BF16(rms_norm(x) * nw)] -> y[n] = h . W[n] (+ b[n]) for n = blockIdx.x (grid N), rounded to
// y's dtype, as linear_fused's GEMV; the last CTA to finish (an atomic arrival count) then routes y as k_moe_route
// (warp 0), so the routing costs no launch and no wait for one.
template <int EPL>
__global__ void __launch_bounds__(RR_THREADS) k_moe_router(rr_args a) {
    __shared__ float red[RR_THREADS / 32];
    __shared__ bool last;
    pdl_launch();
    const int n = blockIdx.x, nc = a.K >> 3;
    /* the row's weights and the norm's: constants, loaded before the wait (they overlap the previous kernel) */
    uint4 wr[RR_MAXC], nwr[RR_MAXC];
#pragma unroll
    for (int j = 0; j < RR_MAXC; j++) {
        const int c = threadIdx.x + j * RR_THREADS;
        wr[j] = c < nc ? __ldg((const uint4 *)(a.W + (int64_t)n * a.K) + c) : make_uint4(0, 0, 0, 0);
        nwr[j] = a.nw && c < nc ? __ldg((const uint4 *)a.nw + c) : make_uint4(0, 0, 0, 0);
    }
    const float b = a.bias && threadIdx.x == 0 ? __ldg(a.bias + n) : 0.0f;
    pdl_wait();
    float xf[RR_MAXC][8];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < RR_MAXC; j++) {
        const int c = threadIdx.x + j * RR_THREADS;
        bf16x8_to_f32(c < nc ? *((const uint4 *)a.x + c) : make_uint4(0, 0, 0, 0), xf[j]);
#pragma unroll
        for (int i = 0; i < 8; i++) ss += xf[j][i] * xf[j][i];
    }
    if (a.nw) {
        /* the norm as linear_fused's prologue rounds it: BF16(x * inv * nw) */
        const float inv = 1.0f / sqrtf(rr_cta_sum(ss, red) / (float)a.K + a.eps);
#pragma unroll
        for (int j = 0; j < RR_MAXC; j++) {
            const int c = threadIdx.x + j * RR_THREADS;
            float nf[8];
            bf16x8_to_f32(nwr[j], nf);
#pragma unroll
            for (int i = 0; i < 8; i++) xf[j][i] = xf[j][i] * inv * (a.offset ? 1.0f + nf[i] : nf[i]);
            const uint4 v = f32_to_bf16x8(xf[j]);
            bf16x8_to_f32(v, xf[j]);
            if (n == 0 && c < nc) ((uint4 *)a.h)[c] = v;
        }
    }
    float d = 0.0f;
#pragma unroll
    for (int j = 0; j < RR_MAXC; j++) {
        float wf[8];
        bf16x8_to_f32(wr[j], wf);
#pragma unroll
        for (int i = 0; i < 8; i++) d += wf[i] * xf[j][i];
    }
    d = rr_cta_sum(d, red);
    if (threadIdx.x == 0) {
        cu_st(a.y, a.ydt, n, d + b);
        __threadfence(); /* the logit is visible to every CTA before this one counts as arrived */
        last = atomicAdd(a.cnt, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence(); /* every CTA's logit, written before its arrival, is read after it */
    if (threadIdx.x < 32) route_token<EPL>(a.r, 0, threadIdx.x);
    if (threadIdx.x == 0) *a.cnt = 0; /* for the next launch (the counter's users are ordered by the stream) */
}

typedef void (*rr_kernel)(rr_args);

static bool rr_overlap(const tensor *a, const tensor *b) {
    const int64_t na = tensor_extent_bytes(a), nb = tensor_extent_bytes(b);
    const char *pa = (const char *)a->data, *pb = (const char *)b->data;
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

void cu_moe_router_route(backend *be, const be_linear *router, const tensor *x, const linear_fuse *f, tensor *rl,
                         const moe_params *p, tensor *ids, tensor *w) {
    cu_state *cu = cu_of(be);
    const char *op = "moe_router_route";
    if (!router || !x || !rl || !p) {
        cu_fail(cu, "%s: no router, x, logits or moe_params", op);
        return;
    }
    const int E = p->num_experts;
    if (E < 1 || rl->ndim != 2 || rl->shape[1] < (p->shared_gate ? E + 1 : E)) {
        cu_fail(cu, "%s: the router's output has fewer columns than the routing reads", op);
        return;
    }
    tensor logits = tensor_cols(rl, 0, p->shared_gate ? E + 1 : E);
    int64_t K = 0, N = 0;
    const float *bias = NULL;
    const __nv_bfloat16 *W = cu_linear_bf16(router, &bias, &K, &N);
    const tensor *nw = f ? f->norm_w : NULL;
    /* the kernel's cases: one token, plain BF16 weights, at most RR_MAXC chunks a thread, the norm (RMS, plain or
     * 1 + w, with a BF16 weight) or none, nothing else of linear_fuse; the rest as the two ops */
    bool fused = !cu->router_split && W && cu_rows(x) == 1 && x->dtype == DTYPE_BF16 && x->ndim == 2 &&
                 x->shape[1] == K && K % 8 == 0 && K <= 8 * RR_THREADS * RR_MAXC && cu_aligned16(x->data) &&
                 cu_aligned16(W) && rl->shape[0] == 1 && rl->shape[1] == N && N <= INT_MAX && cu->route_cnt.p &&
                 (!f || (!f->silu_mul && !f->accumulate && !f->res && !f->norm_b &&
                         (nw ? (f->norm_kind == BE_NORM_RMS || f->norm_kind == BE_NORM_RMS_OFFSET)
                             : f->norm_kind == BE_NORM_RMS)));
    if (fused && nw)
        fused = nw->dtype == DTYPE_BF16 && nw->ndim == 1 && nw->shape[0] == K && nw->data && cu_aligned16(nw->data) &&
                f->h && f->h->dtype == DTYPE_BF16 && f->h->data && cu_aligned16(f->h->data) && cu_rows(f->h) == 1 &&
                f->h->shape[f->h->ndim - 1] == K && !rr_overlap(f->h, x);
    if (!fused) {
        if (f) cu_linear_fused(be, router, x, f, rl);
        else cu_linear(be, router, x, rl);
        cu_moe_route(be, &logits, p, ids, w);
        return;
    }
    if (!cu_check_mat(cu, op, "logits", rl, CU_FLOAT, 1, N)) return;
    rr_args a = {};
    if (!route_prepare(cu, op, &logits, p, ids, w, a.r)) return;
    a.x = (const __nv_bfloat16 *)x->data;
    a.W = W;
    a.bias = bias;
    a.nw = nw ? (const __nv_bfloat16 *)nw->data : NULL;
    a.offset = nw && f->norm_kind == BE_NORM_RMS_OFFSET;
    a.eps = f ? f->eps : 0.0f;
    a.h = nw ? (__nv_bfloat16 *)f->h->data : NULL;
    a.y = rl->data;
    a.ydt = (int)rl->dtype;
    a.N = (int)N;
    a.K = (int)K;
    a.cnt = (unsigned *)cu->route_cnt.p;
    const int epl = route_epl(E);
    rr_kernel kern = epl == 1 ? k_moe_router<1> : epl == 2 ? k_moe_router<2> : epl == 4 ? k_moe_router<4>
                                                : epl == 8 ? k_moe_router<8> : k_moe_router<16>;
    cu_launch(cu, op, true, kern, dim3((unsigned)N), dim3(RR_THREADS), 0, a);
}
