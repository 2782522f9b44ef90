/*
 * ops_sample.cu: the CUDA sample and logprobs ops (contract and reference:
 * src/sample/sample.h, sample.c, logits_proc.c, sampler.c). Only the
 * sampled ids, their logprobs and the requested top logprobs cross back to
 * the host.
 *
 * The host packs each row's parameters into a cu_srow and its sparse logits
 * edits into cu_edit entries, one per distinct token (logits_proc.c's
 * processors, in vLLM v1's order, vllm/v1/sample/sampler.py):
 * allowed_token_ids (every other token -> -inf), bad words and min_tokens
 * (-> -inf), logit_bias (+= clamp(b), the last value of a repeated id), and
 * the penalties (repetition on prompt + output tokens, frequency and
 * presence on output counts; vllm/model_executor/layers/utils.py
 * apply_penalties). One CTA per row then, on the device:
 *   1. NaN check, max and log-sum-exp of the raw row (f32 exponentials
 *      summed in double), the top-k
 *      raw logprobs (k argmax passes, ties to the lower id);
 *   2. the processed row in a workspace (the raw row stays for logprobs);
 *   3. greedy: argmax, lowest id on ties (torch.argmax);
 *   4. else probabilities softmax(l / T) computed as sampler.c does (exp in
 *      double, rounded to float, divided by the double sum), then min_p,
 *      top_k (the k-th largest probability and every tie with it), top_p
 *      (the shortest prefix in (probability desc, id asc) order whose mass
 *      reaches top_p; ties at the cut taken by lowest id), and the
 *      inverse-CDF draw of b->uniform over the survivors, walked in
 *      sampler.c's order: token id order when neither top_k nor top_p cut,
 *      else (probability desc, id asc). The cuts and the draw run on the
 *      few candidates that can survive them, sorted (cand_draw), or, when
 *      those do not fit, by bisection on the float bits of a threshold over
 *      the whole row (non-negative floats order as their bits).
 * Dropped tokens are marked by a probability of -1 in the workspace.
 * Rows with no edits, cuts or top logprobs (greedy, or plain temperature
 * sampling) take a path over many CTAs per row instead (k_fast_*).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

#define SM_THREADS 512
#define SM_WARPS (SM_THREADS / 32)
#define SM_MAXK SAMPLER_MAX_LOGPROBS
#define FULL_MASK 0xffffffffu

/* cu_srow.flags */
#define SR_GREEDY 1
#define SR_ALLOWED 2   /* the row has allowed_token_ids: unlisted tokens -> -inf */
#define SR_LOGPROBS 4  /* the logprobs op: target logprob + top k only */
#define SR_FAST 8      /* no edits, cuts or top logprobs: the multi-CTA path (k_fast_*) */
#define SR_NO_CAND 16  /* top_k / top_p by the bisections only (VLLM_CUDA_SAMPLE_BISECT=1) */
#define SR_RADIX 32    /* the radix select instead of the bisections (VLLM_CUDA_SAMPLE_RADIX=1) */

/* cu_edit.flags */
#define ED_ALLOWED 1
#define ED_BANNED 2
#define ED_BIAS 4
#define ED_PENALTY 8

typedef struct cu_srow {
    int32_t row;           /* row of the logits tensor */
    int32_t flags;
    float temperature;     /* >= 0.01 when sampling */
    float top_p, min_p;
    int32_t top_k;         /* 0 = off */
    float rp, fp, pp;      /* repetition, frequency, presence penalties */
    int32_t edit_off, n_edit;
    int32_t k_top;         /* top logprobs wanted */
    int32_t target;        /* logprobs op: the token whose logprob is wanted */
    double u;              /* the uniform draw */
} cu_srow;

typedef struct cu_edit {
    int32_t token;
    uint32_t flags;
    float bias;
    int32_t count;         /* occurrences in the output */
} cu_edit;

typedef struct cu_sout {
    int32_t token;
    float logprob;
    int32_t top_ids[SM_MAXK];
    float top_lps[SM_MAXK];
} cu_sout;

/* Per (row, chunk) results of the fast path's first pass. */
typedef struct cu_chunk_stats {
    float cmax;            /* max of the chunk's raw logits */
    int32_t carg;          /* lowest id holding it (INT_MAX: none) */
    int32_t nan;           /* the chunk holds a NaN */
    int32_t pad;
    double csum;           /* sum of expf(x - cmax) */
    double csum_t;         /* sum of exp((x - cmax) / temperature) (sampled rows) */
    double mass;           /* second pass: the chunk's probability mass */
} cu_chunk_stats;

struct cu_sample_ws {
    cu_buf h_rows, h_edits, h_outs;   /* pinned host */
    cu_buf d_rows, d_edits, d_outs;   /* device */
    cu_buf h_mask, d_mask;            /* structured outputs: (masked rows) x (logits row, mask words) */
    cu_buf d_stats;                   /* (rows, chunks) cu_chunk_stats */
    cu_buf d_work;                     /* (rows, V) F32 processed logits / probabilities */
    int32_t *slot_of;                  /* (vocab) host: token -> edit index of the row being packed, -1 */
    int vocab;
};

/* ------------------------------------------------------------------ */
/* block-wide primitives (SM_THREADS threads, every thread gets the result) */
/* ------------------------------------------------------------------ */

typedef struct sm_red {
    double d[SM_WARPS];
    long long ll[SM_WARPS];
    float f[SM_WARPS];
    int i[SM_WARPS];
} sm_red;

__device__ double bsum_d(double v, sm_red *r) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r->d[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < SM_WARPS; w++) s += r->d[w];
    return s;
}

__device__ long long bsum_ll(long long v, sm_red *r) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r->ll[threadIdx.x >> 5] = v;
    __syncthreads();
    long long s = 0;
    for (int w = 0; w < SM_WARPS; w++) s += r->ll[w];
    return s;
}

__device__ float bmax_f(float v, sm_red *r) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r->f[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = r->f[0];
    for (int w = 1; w < SM_WARPS; w++) s = fmaxf(s, r->f[w]);
    return s;
}

__device__ float bmin_f(float v, sm_red *r) {
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(FULL_MASK, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r->f[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = r->f[0];
    for (int w = 1; w < SM_WARPS; w++) s = fminf(s, r->f[w]);
    return s;
}

__device__ int bmin_i(int v, sm_red *r) {
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(FULL_MASK, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r->i[threadIdx.x >> 5] = v;
    __syncthreads();
    int s = r->i[0];
    for (int w = 1; w < SM_WARPS; w++) s = min(s, r->i[w]);
    return s;
}

__device__ int bmax_i(int v, sm_red *r) {
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL_MASK, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) r->i[threadIdx.x >> 5] = v;
    __syncthreads();
    int s = r->i[0];
    for (int w = 1; w < SM_WARPS; w++) s = max(s, r->i[w]);
    return s;
}

/* (a, ia) better than (b, ib): larger value, then lower id */
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

/* Argmax (value, id) over the block; id INT_MAX when no thread had one. */
__device__ void bargmax(float *v, int *id, sm_red *r) {
    float x = *v;
    int ix = *id;
    for (int o = 16; o > 0; o >>= 1) {
        float y = __shfl_xor_sync(FULL_MASK, x, o);
        int iy = __shfl_xor_sync(FULL_MASK, ix, o);
        if (better(y, iy, x, ix)) {
            x = y;
            ix = iy;
        }
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        r->f[threadIdx.x >> 5] = x;
        r->i[threadIdx.x >> 5] = ix;
    }
    __syncthreads();
    x = r->f[0];
    ix = r->i[0];
    for (int w = 1; w < SM_WARPS; w++)
        if (better(r->f[w], r->i[w], x, ix)) {
            x = r->f[w];
            ix = r->i[w];
        }
    *v = x;
    *id = ix;
}

/* Exclusive prefix sums over the threads in thread order. */
__device__ double bscan_d(double v, sm_red *r) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double x = v;
    for (int o = 1; o < 32; o <<= 1) {
        double y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    double ex = __shfl_up_sync(FULL_MASK, x, 1);
    if (lane == 0) ex = 0.0;
    __syncthreads();
    if (lane == 31) r->d[w] = x;
    __syncthreads();
    double off = 0.0;
    for (int i = 0; i < w; i++) off += r->d[i];
    return off + ex;
}

__device__ long long bscan_ll(long long v, sm_red *r) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    long long x = v;
    for (int o = 1; o < 32; o <<= 1) {
        long long y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    long long ex = __shfl_up_sync(FULL_MASK, x, 1);
    if (lane == 0) ex = 0;
    __syncthreads();
    if (lane == 31) r->ll[w] = x;
    __syncthreads();
    long long off = 0;
    for (int i = 0; i < w; i++) off += r->ll[i];
    return off + ex;
}

/* f(ld(v), v) over this thread's elements v = tid + SM_THREADS i, in increasing v, B of its loads in flight at once
 * instead of a round trip or so each (a pass over V = 151,936 is 297 loads a thread) */
template <int B, typename L, typename F>
__device__ __forceinline__ void row_pass_at(int V, L ld, F f) {
    int v = threadIdx.x;
    if constexpr (B > 1)
        for (; v + (B - 1) * SM_THREADS < V; v += B * SM_THREADS) {
            float x[B];
#pragma unroll
            for (int i = 0; i < B; i++) x[i] = ld(v + i * SM_THREADS);
#pragma unroll
            for (int i = 0; i < B; i++) f(x[i], v + i * SM_THREADS);
        }
    for (; v < V; v += SM_THREADS) f(ld(v), v);
}

template <int B, typename F>
__device__ __forceinline__ void row_pass(const float *w, int V, F f) {
    row_pass_at<B>(V, [&](int v) { return w[v]; }, [&](float x, int) { f(x); });
}

#define SM_RP 8 /* loads in flight a thread in the row's passes (16 measured no faster: session 37) */

/* f(x, v) over w as row_pass does, but warp-uniform: every lane of a warp calls f as often (x = -1 past V, a dropped
 * token's value), so f may use warp collectives (ballots, matches) */
template <int B, typename F>
__device__ __forceinline__ void row_pass_warp(const float *w, int V, F f) {
    const int lane = threadIdx.x & 31;
    for (int v0 = threadIdx.x; v0 - lane < V; v0 += B * SM_THREADS) {
        float xs[B];
#pragma unroll
        for (int i = 0; i < B; i++) xs[i] = v0 + i * SM_THREADS < V ? w[v0 + i * SM_THREADS] : -1.0f;
#pragma unroll
        for (int i = 0; i < B; i++) f(xs[i], v0 + i * SM_THREADS);
    }
}

/* tokens with probability >= tau (tau >= 0, so dropped tokens never count) */
__device__ long long count_ge(const float *w, int V, float tau, sm_red *r) {
    long long c = 0;
    row_pass<SM_RP>(w, V, [&](float x) { c += x >= tau; });
    return bsum_ll(c, r);
}

__device__ double sum_ge(const float *w, int V, float tau, sm_red *r) {
    double s = 0.0;
    row_pass<SM_RP>(w, V, [&](float x) {
        if (x >= tau) s += x;
    });
    return bsum_d(s, r);
}

/* This thread's contiguous slice of [0, V) (for the ordered walks). */
__device__ __forceinline__ void my_slice(int V, int *v0, int *v1) {
    int seg = (V + SM_THREADS - 1) / SM_THREADS;
    long long a = (long long)threadIdx.x * seg, b = a + seg;
    *v0 = (int)(a < V ? a : V);
    *v1 = (int)(b < V ? b : V);
}

/* The token with the given rank (0-based, in id order) among those whose
 * probability equals tau; INT_MAX if there are not that many. */
__device__ int nth_tie(const float *w, int V, float tau, long long rank, sm_red *r) {
    int v0, v1;
    my_slice(V, &v0, &v1);
    long long c = 0;
    for (int v = v0; v < v1; v++) c += w[v] == tau;
    long long base = bscan_ll(c, r);
    int found = INT_MAX;
    for (int v = v0; v < v1 && base <= rank; v++)
        if (w[v] == tau) {
            if (base == rank) found = v;
            base++;
        }
    return bmin_i(found, r);
}

/* top_p's cut at level tau: drops the survivors below tau and the ties at tau after the first j in id order */
__device__ void cut_at(float *w, int V, float tau, long long j, sm_red *r) {
    int v0, v1;
    my_slice(V, &v0, &v1);
    long long c = 0;
    for (int v = v0; v < v1; v++) c += w[v] == tau;
    long long rank = bscan_ll(c, r);
    for (int v = v0; v < v1; v++) {
        float x = w[v];
        if (x < 0.0f) continue;
        if (x < tau) w[v] = -1.0f;
        else if (x == tau) {
            if (rank >= j) w[v] = -1.0f;
            rank++;
        }
    }
    __syncthreads();
}

/* ------------------------------------------------------------------ */
/* top_k / top_p on candidates                                         */
/* ------------------------------------------------------------------ */

/* Qwen3's generation_config (top_k 20, top_p 0.95), which `vllmc serve` applies, sends every row here; the bisections
 * below take ~100 passes over the row (about a millisecond a row on an H100). Instead, t0, a threshold that keeps
 * every token the cuts can keep, comes from the threads' maxima (m_1 >= m_2 >= ..., each a surviving token):
 *   top_k: t0 = m_k, as k tokens are >= it, the k-th probability is >= t0;
 *   top_p alone: t0 = m_j, the first j with m_1 + .. + m_j >= top_p * mass (with a margin), as the tokens >= t0
 *   already hold top_p of the mass, the shortest prefix that does ends at or before the last of them.
 * One pass gathers the tokens >= t0 (about k of them on LLM rows), a bitonic sort puts them in (probability desc,
 * id asc) order, and one thread applies the cuts and the draw on them as sampler.c walks its sorted ids. Rows
 * whose candidates do not fit (ties, flat rows, top_k > SM_THREADS) take the bisections (CAND_FAIL). */
#define SM_CAND 2048 /* candidates at most (a power of two): 16 KB of keys */
#define CAND_FAIL (-2)

typedef struct sm_cand {
    unsigned long long key[SM_CAND]; /* float bits of p << 32 | ~id (p >= 0 orders as its bits); 0 pads */
    float tm[SM_THREADS];            /* the threads' maxima (-1: no survivor), then sorted, largest first */
    float t0;
    int n, pick;
} sm_cand;

__device__ __forceinline__ float cand_p(unsigned long long key) { return __uint_as_float((unsigned)(key >> 32)); }
__device__ __forceinline__ int cand_id(unsigned long long key) { return (int)~(unsigned)key; }

/* The token drawn with u after top_k (0: off; else 0 < top_k < survivors) and top_p (1: off), or CAND_FAIL. w: the
 * row's probabilities (-1: dropped), or with esum > 0 its exponentials e (every token a survivor: p = (float)(e /
 * esum), sampler.c's), only read; n_surv: the survivors; tmax: this thread's largest surviving w (-1: none);
 * mass_all: the survivors' mass (used by top_p without top_k). Every thread gets the answer. */
__device__ int cand_draw(const float *w, int V, long long n_surv, float tmax, int top_k, float top_p, double mass_all,
                         double u, double esum, sm_cand *cs) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (top_k > SM_THREADS) return CAND_FAIL;
    /* the maxima in descending order: each thread's rank (ties by thread index) */
    cs->tm[tid] = tmax;
    if (tid == 0) cs->n = 0;
    __syncthreads();
    int rank = 0;
    for (int j = 0; j < SM_THREADS; j++) {
        float m = cs->tm[j];
        rank += m > tmax || (m == tmax && j < tid);
    }
    __syncthreads();
    cs->tm[rank] = tmax;
    __syncthreads();
    if (tid == 0) {
        float t0 = 0.0f; /* no bound found: every survivor is a candidate */
        bool broad = false;
        if (top_k > 0) {
            t0 = cs->tm[top_k - 1];
        } else {
            const double need = (double)top_p * mass_all * (1.0 + 1e-6);
            double cum = 0.0;
            /* the maxima never reach top_p: every survivor a candidate, so with more than SM_CAND survivors no gather
             * pass for nothing */
            broad = n_surv > SM_CAND;
            for (int j = 0; j < SM_THREADS && cs->tm[j] >= 0.0f; j++)
                if ((cum += cs->tm[j]) >= need) {
                    t0 = cs->tm[j];
                    broad = false;
                    break;
                }
        }
        cs->pick = broad ? CAND_FAIL : 0;
        /* exponentials: p = (float)(e / esum) can tie two normal e up to about 4 ulps apart, so 8 ulps lower keeps
         * every token tied with the k-th probability (a subnormal or zero p can tie e further apart, but such p add
         * nothing to a sum of probabilities of at least 1 / V and are never drawn) */
        if (esum != 0.0) t0 = __float_as_uint(t0) > 8u ? __uint_as_float(__float_as_uint(t0) - 8u) : 0.0f;
        cs->t0 = fmaxf(t0, 0.0f);
    }
    __syncthreads();
    if (cs->pick == CAND_FAIL) return CAND_FAIL;
    /* gather the tokens >= t0 (dropped ones are -1): a warp's hits take consecutive slots. A bound of 0 (top_k with
     * fewer than k threads holding a positive maximum: few allowed tokens, a low temperature) gathers the positive
     * ones only: zero probabilities add nothing to a sum and are never drawn (u * mass < mass) */
    const float t0 = cs->t0;
    const bool pos_only = t0 == 0.0f;
    row_pass_warp<SM_RP>(w, V, [&](float x, int v) {
        const bool hit = pos_only ? x > 0.0f : x >= t0;
        const unsigned b = __ballot_sync(FULL_MASK, hit);
        if (!b) return;
        if (hit && esum != 0.0) x = (float)((double)x / esum);
        int slot = 0;
        if (lane == 0) slot = atomicAdd(&cs->n, __popc(b));
        slot = __shfl_sync(FULL_MASK, slot, 0) + __popc(b & ((1u << lane) - 1u));
        if (hit && slot < SM_CAND) cs->key[slot] = (unsigned long long)__float_as_uint(x) << 32 | (unsigned)~(unsigned)v;
    });
    __syncthreads();
    const int n = cs->n;
    if (n > SM_CAND || n == 0 || (n < top_k && !pos_only)) return CAND_FAIL; /* (k tokens are >= a bound above 0) */
    /* bitonic sort, descending, over a power of two of keys (0 pads sort last) */
    int P = 2;
    while (P < n) P <<= 1;
    for (int i = n + tid; i < P; i += SM_THREADS) cs->key[i] = 0ull;
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < P; i += SM_THREADS) {
                const int l = i ^ j;
                if (l > i) {
                    const unsigned long long a = cs->key[i], b = cs->key[l];
                    if ((i & k) == 0 ? a < b : a > b) {
                        cs->key[i] = b;
                        cs->key[l] = a;
                    }
                }
            }
            __syncthreads();
        }
    /* sampler.c's cuts and draw over the sorted candidates */
    if (tid == 0) {
        const unsigned long long *key = cs->key;
        int pick = CAND_FAIL, nk = n; /* top_k's survivors: the k largest and every tie with the k-th */
        if (top_k > 0 && top_k <= n) { /* (fewer positive candidates than k: the k-th is 0, all are kept) */
            const float kth = cand_p(key[top_k - 1]);
            for (nk = top_k; nk < n && cand_p(key[nk]) >= kth;) nk++;
        }
        int keep = nk;
        bool ok = true;
        if (top_p < 1.0f) {
            double mass = mass_all;
            if (top_k > 0) {
                mass = 0.0;
                for (int i = 0; i < nk; i++) mass += cand_p(key[i]);
            }
            double cum = 0.0;
            int kp = 0;
            for (int i = 0; i < nk; i++) {
                cum += (double)cand_p(key[i]) / mass;
                if (cum >= (double)top_p) {
                    kp = i + 1;
                    break;
                }
            }
            if (kp) keep = kp;
            else ok = top_k > 0; /* top_p alone: the prefix must end among the candidates */
        }
        if (ok) {
            double mass = 0.0, cum = 0.0;
            for (int i = 0; i < keep; i++) mass += cand_p(key[i]);
            const double target = u * mass;
            pick = cand_id(key[keep - 1]); /* rounding: the last survivor */
            for (int i = 0; i < keep; i++)
                if (target < (cum += cand_p(key[i]))) {
                    pick = cand_id(key[i]);
                    break;
                }
        }
        cs->pick = pick;
    }
    __syncthreads();
    return cs->pick;
}

/* ------------------------------------------------------------------ */
/* the radix select (VLLM_CUDA_SAMPLE_RADIX=1): the cuts and the draw  */
/* where the candidates do not fit                                     */
/* ------------------------------------------------------------------ */

/* The bisections find a level tau by ~31 passes over the row each (the largest tau with count(p >= tau) >= k, with
 * mass(p >= tau) >= top_p * mass, with mass(p >= tau) > u * mass). The radix select finds the same tau in three: a
 * non-negative float orders as its bits, so one pass histograms the survivors by bits 30..20 of p (the count and the
 * mass of each digit), a scan from the top digit down picks the largest digit whose running total satisfies the
 * predicate, and two more passes do the same for bits 19..10 and 9..0 among the tokens of the digits picked so far.
 * Masses are sums of p in fixed point (p * 2^62, truncated: exact for p >= 2^-39, and every sum of probabilities is
 * below 2^63), so they are exact and the same whatever order the atomics land in: no run-to-run rounding at a cut.
 * A warp adds its lanes of one digit together (__match_any_sync, __reduce_add_sync on 21-bit pieces) before one
 * shared-memory atomic. */
#define RX_BUCKETS 2048 /* 11 bits, the first level's digit */
#define RX_COUNT 0      /* count(p >= tau) >= k */
#define RX_TOPP 1       /* mass(p >= tau) / mass >= top_p */
#define RX_DRAW 2       /* mass(p >= tau) > u * mass */

typedef struct sm_radix {
    unsigned long long s[RX_BUCKETS]; /* a digit's mass (p * 2^62) */
    int c[RX_BUCKETS];                /* a digit's tokens */
    unsigned long long s_gt, s_eq;    /* the mass of the tokens above the digit picked, of the digit picked */
    long long c_gt, c_eq;             /* their counts */
} sm_radix;

/* p in fixed point: p in [0, 1] times 2^62 is exact in float, the conversion truncates */
__device__ __forceinline__ unsigned long long p_fx(float p) { return __float2ull_rz(p * 0x1p62f); }

typedef struct rx_out {
    float tau;                   /* the level */
    unsigned long long s_gt, s_eq; /* mass (p * 2^62) of the tokens > tau, == tau */
    long long c_gt, c_eq;        /* their counts */
    double mass;                 /* the survivors' mass (p * 2^62) */
} rx_out;

/* The largest tau (a probability, bit by bit) whose totals over the survivors (w >= 0; -1 dropped) p >= tau satisfy
 * the mode's predicate (k for RX_COUNT, top_p for RX_TOPP, u for RX_DRAW); false when none does (no survivor, or
 * RX_TOPP / RX_DRAW with no mass). The predicates grow with the totals, which grow as tau falls, so each level's
 * digit is the largest one that satisfies it, given the digits above. Every thread gets the answer. */
__device__ bool rx_find(const float *w, int V, int mode, long long k, double top_p, double u, sm_radix *rx,
                        sm_red *red, rx_out *o) {
    const int tid = threadIdx.x, lane = tid & 31;
    unsigned prefix = 0;             /* the digits picked so far, in place */
    unsigned long long s_gt = 0;     /* mass and count of the tokens above them */
    long long c_gt = 0;
    double mass = 0.0, target = 0.0;
    __syncthreads(); /* (rx shares its memory with the candidates, read until now) */
    for (int lvl = 0; lvl < 3; lvl++) {
        /* bits [sh, sh + width) of p; the tokens whose bits above them are the digits so far (level 0: bit 31, the
         * sign, is 0: dropped tokens are -1) */
        const int sh = lvl == 0 ? 20 : lvl == 1 ? 10 : 0, nb = lvl == 0 ? RX_BUCKETS : 1024, hs = lvl == 0 ? 31 : sh + 10;
        const unsigned hp = prefix >> hs;
        for (int d = tid; d < nb; d += SM_THREADS) {
            rx->s[d] = 0ull;
            rx->c[d] = 0;
        }
        __syncthreads();
        /* the histogram (warp-uniform: ballots and matches) */
        row_pass_warp<SM_RP>(w, V, [&](float x, int) {
            const unsigned b = __float_as_uint(x);
            const bool hit = (b >> hs) == hp;
            const unsigned act = __ballot_sync(FULL_MASK, hit);
            if (!hit) return;
            const unsigned d = (b >> sh) & (unsigned)(nb - 1);
            const unsigned long long f = p_fx(x); /* < 2^63 */
            const unsigned grp = __match_any_sync(act, d);
            /* 32 lanes of 21-bit pieces cannot overflow 32 bits */
            const unsigned long long s0 = __reduce_add_sync(grp, (unsigned)(f & 0x1FFFFFull));
            const unsigned long long s1 = __reduce_add_sync(grp, (unsigned)((f >> 21) & 0x1FFFFFull));
            const unsigned long long s2 = __reduce_add_sync(grp, (unsigned)(f >> 42));
            if (lane == __ffs(grp) - 1) {
                atomicAdd(&rx->s[d], s0 + (s1 << 21) + (s2 << 42));
                atomicAdd(&rx->c[d], __popc(grp));
            }
        });
        __syncthreads();
        /* the scan, top digit down: thread t owns digits nb-1-per*t .. nb-per*(t+1) */
        const int per = nb / SM_THREADS;
        unsigned long long ts = 0;
        long long tc = 0;
        for (int i = 0; i < per; i++) {
            const int d = nb - 1 - (tid * per + i);
            ts += rx->s[d];
            tc += rx->c[d];
        }
        if (lvl == 0) {
            mass = (double)(unsigned long long)bsum_ll((long long)ts, red);
            target = u * mass;
        }
        unsigned long long cum = s_gt + (unsigned long long)bscan_ll((long long)ts, red);
        long long cc = c_gt + bscan_ll(tc, red);
        int mine = -1; /* this thread's largest digit that satisfies it */
        unsigned long long m_gt = 0, m_eq = 0;
        long long n_gt = 0, n_eq = 0;
        for (int i = 0; i < per; i++) {
            const int d = nb - 1 - (tid * per + i);
            const unsigned long long sd = rx->s[d];
            const int cd = rx->c[d];
            cum += sd;
            cc += cd;
            const bool ok = mode == RX_COUNT ? cc >= k
                            : mode == RX_TOPP ? mass > 0.0 && (double)cum / mass >= top_p
                                              : (double)cum > target;
            if (ok) {
                mine = d;
                m_gt = cum - sd;
                n_gt = cc - cd;
                m_eq = sd;
                n_eq = cd;
                break;
            }
        }
        const int pick = bmax_i(mine, red);
        if (pick < 0) return false;
        if (mine == pick) { /* one thread: the digits are each one thread's */
            rx->s_gt = m_gt;
            rx->c_gt = n_gt;
            rx->s_eq = m_eq;
            rx->c_eq = n_eq;
        }
        __syncthreads();
        s_gt = rx->s_gt;
        c_gt = rx->c_gt;
        prefix |= (unsigned)pick << sh;
        if (lvl == 2) {
            o->s_eq = rx->s_eq;
            o->c_eq = rx->c_eq;
        }
        __syncthreads();
    }
    o->tau = __uint_as_float(prefix);
    o->s_gt = s_gt;
    o->c_gt = c_gt;
    o->mass = mass;
    return true;
}

/* ------------------------------------------------------------------ */
/* the kernel                                                          */
/* ------------------------------------------------------------------ */

__device__ __forceinline__ float raw_at(const void *logits, int ldt, int64_t base, int v) {
    return cu_ld(logits, ldt, base + v);
}

// logits (B, V) row-major with row stride ls; one CTA per packed row
__global__ void __launch_bounds__(SM_THREADS, 1) k_sample(const void *logits, int ldt, int64_t ls, int V,
                                                       const cu_srow *rows, const cu_edit *edits, float *work,
                                                       cu_sout *outs) {
    __shared__ sm_red red;
    __shared__ int top_id[SM_MAXK];
    __shared__ float top_lp[SM_MAXK];
    __shared__ union {
        sm_cand c;  /* the candidates */
        sm_radix x; /* then, when they do not fit, the radix select */
    } sel;
    sm_cand &cs = sel.c;
    const cu_srow r = rows[blockIdx.x];
    if (r.flags & SR_FAST) return; /* k_fast_* */
    cu_sout *out = outs + blockIdx.x;
    const int64_t base = (int64_t)r.row * ls;
    float *w = work + (int64_t)blockIdx.x * V;
    const int tid = threadIdx.x;
    /* the bisections' passes over w */
    auto cnt_ge = [&](float tau) { return count_ge(w, V, tau, &red); };
    auto sm_ge = [&](float tau) { return sum_ge(w, V, tau, &red); };

    /* 1. NaN check, max and argmax (lowest id) of the raw row */
    float mx = -INFINITY;
    int mxid = INT_MAX, nan = 0;
    /* (the row's one-CTA passes keep SM_RP loads a thread in flight: each is a ~300-load walk on a 151,936 vocabulary) */
    auto raw = [&](int v) { return raw_at(logits, ldt, base, v); };
    row_pass_at<SM_RP>(V, raw, [&](float x, int v) {
        if (isnan(x)) nan = 1;
        if (better(x, v, mx, mxid)) {
            mx = x;
            mxid = v;
        }
    });
    nan = bmax_i(nan, &red);
    bargmax(&mx, &mxid, &red);
    const int k_top = r.k_top;
    /* a row without edits samples from the raw logits (no processed copy, no second argmax); a sampled one without
     * top logprobs sums the log-sum-exp's exponentials in its probabilities' pass */
    const bool plain = !(r.flags & (SR_ALLOWED | SR_LOGPROBS)) && r.n_edit == 0;
    const bool fuse_lse = plain && !(r.flags & SR_GREEDY) && k_top == 0;
    if (nan) {
        if (tid == 0) {
            out->token = SAMPLE_NAN_LOGITS;
            out->logprob = NAN;
        }
        for (int j = tid; j < k_top; j += SM_THREADS) {
            out->top_ids[j] = -1;
            out->top_lps[j] = NAN;
        }
        return;
    }
    /* log-sum-exp in double (sampler_logprob) */
    double lse = 0.0;
    if (!fuse_lse) {
        double se = 0.0; /* f32 exponentials (relative error ~1e-7), summed in double */
        row_pass_at<SM_RP>(V, raw, [&](float x, int) { se += (double)expf(x - mx); });
        se = bsum_d(se, &red);
        lse = (double)mx + log(se);
    }

    /* top-k raw logprobs: the next pick is the best of the tokens after the
     * previous one in (logit desc, id asc) order */
    {
        float pv = INFINITY;
        int pid = -1;
        for (int j = 0; j < k_top; j++) {
            float bv = -INFINITY;
            int bid = INT_MAX;
            for (int v = tid; v < V; v += SM_THREADS) {
                float x = raw_at(logits, ldt, base, v);
                bool after = x < pv || (x == pv && v > pid);
                if (after && better(x, v, bv, bid)) {
                    bv = x;
                    bid = v;
                }
            }
            bargmax(&bv, &bid, &red);
            if (tid == 0) {
                top_id[j] = bid == INT_MAX ? -1 : bid;
                top_lp[j] = bid == INT_MAX ? NAN : (float)((double)bv - lse);
            }
            pv = bv;
            pid = bid;
        }
    }
    __syncthreads();

    int token = SAMPLE_ALL_BANNED;
    if (r.flags & SR_LOGPROBS) {
        token = r.target;  /* the logprob of a given token */
    } else {
        /* 2. the processed row (a row without edits keeps the raw one) */
        const bool allowed = (r.flags & SR_ALLOWED) != 0;
        if (!plain)
            for (int v = tid; v < V; v += SM_THREADS) w[v] = allowed ? -INFINITY : raw_at(logits, ldt, base, v);
        __syncthreads();
        for (int i = tid; i < r.n_edit; i += SM_THREADS) {
            cu_edit e = edits[r.edit_off + i];
            float l = raw_at(logits, ldt, base, e.token);
            if (allowed && !(e.flags & ED_ALLOWED)) l = -INFINITY;
            if (e.flags & ED_BANNED) l = -INFINITY;
            if (e.flags & ED_BIAS) l = __fadd_rn(l, e.bias);
            if (e.flags & ED_PENALTY) { /* logits_proc.c penalize(): repetition, frequency, presence */
                l = __fmul_rn(l, l > 0.0f ? __fdiv_rn(1.0f, r.rp) : r.rp);
                l = __fsub_rn(l, __fmul_rn(r.fp, (float)e.count));
                l = __fsub_rn(l, __fmul_rn(r.pp, e.count > 0 ? 1.0f : 0.0f));
            }
            w[e.token] = l;
        }
        __syncthreads();
        /* 3. argmax of the processed row (greedy; its max for sampling) */
        float bv = mx;
        int bid = mxid;
        if (!plain) {
            bv = -INFINITY;
            bid = INT_MAX;
            for (int v = tid; v < V; v += SM_THREADS)
                if (better(w[v], v, bv, bid)) {
                    bv = w[v];
                    bid = v;
                }
            bargmax(&bv, &bid, &red);
        }
        if (r.flags & SR_GREEDY) {
            token = bid == INT_MAX ? 0 : bid;  /* all -inf: token 0, as argmax */
        } else if (bv != -INFINITY) {
            /* 4. probabilities as sampler.c */
            const double m2 = (double)bv, inv_t = 1.0 / (double)r.temperature;
            double s = 0.0, se = 0.0;
            float tmax = -1.0f; /* this thread's largest exponential, then probability, of a survivor (-1: none) */
            row_pass_at<SM_RP>(V, [&](int v) { return plain ? raw(v) : w[v]; }, [&](float l, int v) {
                double e = exp(((double)l - m2) * inv_t);
                w[v] = (float)e;
                tmax = fmaxf(tmax, (float)e);
                s += e;
                if (fuse_lse) se += (double)expf(l - mx);
            });
            s = bsum_d(s, &red);
            if (fuse_lse) lse = (double)mx + log(bsum_d(se, &red));
            /* top_k without min_p: the candidates straight from the exponentials (their probabilities computed for
             * them alone); else every probability first */
            const bool cut_p = r.top_p < 1.0f, no_cand = (r.flags & SR_NO_CAND) != 0;
            const bool early = !no_cand && !(r.min_p > 0.0f) && r.top_k > 0 && r.top_k < V && r.top_k <= SM_THREADS;
            int cpick = early ? cand_draw(w, V, V, tmax, r.top_k, r.top_p, 0.0, r.u, s, &cs) : CAND_FAIL;
            float pmax = 0.0f;
            long long n = V;
            if (cpick == CAND_FAIL) {
                tmax = -1.0f;
                for (int v = tid; v < V; v += SM_THREADS) {
                    float p = (float)((double)w[v] / s);
                    w[v] = p;
                    tmax = fmaxf(tmax, p);
                }
                pmax = bmax_f(fmaxf(tmax, 0.0f), &red);
                /* min_p: drop p < min_p * max p */
                if (r.min_p > 0.0f) {
                    const float thresh = __fmul_rn(r.min_p, pmax);
                    long long c = 0;
                    for (int v = tid; v < V; v += SM_THREADS) {
                        if (w[v] < thresh) w[v] = -1.0f;
                        else c++;
                    }
                    if (tmax < thresh) tmax = -1.0f;
                    n = bsum_ll(c, &red);
                }
                /* top_k / top_p on the candidates; the bisections below when they do not fit */
                const bool cut_k = r.top_k > 0 && r.top_k < n;
                if ((cut_k || cut_p) && !no_cand && !early)
                    cpick = cand_draw(w, V, n, tmax, cut_k ? r.top_k : 0, r.top_p, cut_k ? 0.0 : sm_ge(0.0f), r.u,
                                      0.0, &cs);
            }
            if (cpick != CAND_FAIL) {
                token = cpick >= 0 && cpick < V ? cpick : SAMPLE_ALL_BANNED;
            } else {
                bool sorted = false;
                const bool radix = (r.flags & SR_RADIX) != 0;
                rx_out ro;
                const unsigned hi0 = __float_as_uint(pmax) + 1u; /* no probability reaches this */
                /* top_k: the largest tau with count(p >= tau) >= k is the k-th probability */
                if (r.top_k > 0 && r.top_k < n) {
                    unsigned lo = 0, hi = hi0;
                    if (radix) {
                        lo = rx_find(w, V, RX_COUNT, r.top_k, 0.0, 0.0, &sel.x, &red, &ro) ? __float_as_uint(ro.tau)
                                                                                         : 0u;
                    } else {
                        while (hi - lo > 1) {
                            unsigned mid = lo + (hi - lo) / 2;
                            if (cnt_ge(__uint_as_float(mid)) >= r.top_k) lo = mid;
                            else hi = mid;
                        }
                    }
                    const float kth = __uint_as_float(lo);
                    for (int v = tid; v < V; v += SM_THREADS)
                        if (w[v] >= 0.0f && w[v] < kth) w[v] = -1.0f;
                    __syncthreads();
                    sorted = true;
                }
                /* top_p: the cut is at the largest tau with mass(p >= tau) / mass >= top_p */
                if (r.top_p < 1.0f && radix) {
                    /* the level, then as below with the fixed-point sums: the first j ties in id order that reach it */
                    if (rx_find(w, V, RX_TOPP, 0, (double)r.top_p, 0.0, &sel.x, &red, &ro) && ro.tau > 0.0f) {
                        const float tau = ro.tau;
                        long long j = (long long)ceil(((double)r.top_p - (double)ro.s_gt / ro.mass) /
                                                      ((double)p_fx(tau) / ro.mass));
                        cut_at(w, V, tau, j < 1 ? 1 : j > ro.c_eq ? ro.c_eq : j, &red);
                    }
                    sorted = true;
                } else if (r.top_p < 1.0f) {
                    const double mass = sm_ge(0.0f);
                    const double top_p = (double)r.top_p;
                    if (mass > 0.0) { /* (no positive mass: sampler.c's keep == 0, all kept) */
                        unsigned lo = 0, hi = hi0;
                        while (hi - lo > 1) {
                            unsigned mid = lo + (hi - lo) / 2;
                            if (sm_ge(__uint_as_float(mid)) / mass >= top_p) lo = mid;
                            else hi = mid;
                        }
                        const float tau = __uint_as_float(lo);
                        if (lo > 0) { /* tau == 0: the positive mass never reaches top_p, keep all (sampler.c keep == 0) */
                            const double cum_gt = sm_ge(__uint_as_float(lo + 1)) / mass;
                            const long long ties = cnt_ge(tau) - cnt_ge(__uint_as_float(lo + 1));
                            /* ties at the cut, in id order: keep the first j that reach top_p */
                            long long j = (long long)ceil((top_p - cum_gt) / ((double)tau / mass));
                            cut_at(w, V, tau, j < 1 ? 1 : j > ties ? ties : j, &red);
                        }
                    }
                    sorted = true;
                }
                /* 5. the draw: target = u * mass of the survivors */
                int pick = INT_MAX;
                if (!sorted) {
                    const double target = r.u * sm_ge(0.0f);
                    /* id order: the first token whose running mass passes target */
                    int v0, v1;
                    my_slice(V, &v0, &v1);
                    double part = 0.0;
                    for (int v = v0; v < v1; v++)
                        if (w[v] >= 0.0f) part += w[v];
                    double cum = bscan_d(part, &red);
                    for (int v = v0; v < v1; v++) {
                        if (w[v] < 0.0f) continue;
                        cum += w[v];
                        if (target < cum) {
                            pick = v;
                            break;
                        }
                    }
                    pick = bmin_i(pick, &red);
                    if (pick == INT_MAX) { /* rounding: the last survivor */
                        int last = -1;
                        for (int v = tid; v < V; v += SM_THREADS)
                            if (w[v] >= 0.0f) last = v;
                        pick = bmax_i(last, &red);
                    }
                } else {
                    /* (probability desc, id asc) order: the level tau where the mass of p >= tau first passes
                     * target = u * mass, then the j-th tie there in id order */
                    if (radix) {
                        if (rx_find(w, V, RX_DRAW, 0, 0.0, r.u, &sel.x, &red, &ro) && ro.tau > 0.0f && ro.c_eq > 0) {
                            long long j =
                                (long long)floor((r.u * ro.mass - (double)ro.s_gt) / (double)p_fx(ro.tau)) + 1;
                            pick = nth_tie(w, V, ro.tau, (j < 1 ? 1 : j > ro.c_eq ? ro.c_eq : j) - 1, &red);
                        }
                    } else {
                        const double mass = sm_ge(0.0f), target = r.u * mass;
                        if (mass > target) {
                            unsigned lo = 0, hi = hi0;
                            while (hi - lo > 1) {
                                unsigned mid = lo + (hi - lo) / 2;
                                if (sm_ge(__uint_as_float(mid)) > target) lo = mid;
                                else hi = mid;
                            }
                            if (lo > 0) {
                                const float tau = __uint_as_float(lo);
                                const double cum_gt = sm_ge(__uint_as_float(lo + 1));
                                const long long ties = cnt_ge(tau) - cnt_ge(__uint_as_float(lo + 1));
                                long long j = (long long)floor((target - cum_gt) / (double)tau) + 1;
                                pick = nth_tie(w, V, tau, (j < 1 ? 1 : j > ties ? ties : j) - 1, &red);
                            }
                        }
                    }
                    if (pick == INT_MAX) { /* rounding: the last in that order (lowest p, highest id) */
                        float pmin = INFINITY;
                        for (int v = tid; v < V; v += SM_THREADS)
                            if (w[v] >= 0.0f) pmin = fminf(pmin, w[v]);
                        pmin = bmin_f(pmin, &red);
                        int last = -1;
                        for (int v = tid; v < V; v += SM_THREADS)
                            if (w[v] == pmin) last = v;
                        pick = bmax_i(last, &red);
                    }
                }
                token = pick >= 0 && pick < V ? pick : SAMPLE_ALL_BANNED;
            }
        }
    }

    /* outputs: the raw logprob of the token, the top list when it is valid */
    if (tid == 0) {
        bool ok = token >= 0 && token < V;
        out->token = (r.flags & SR_LOGPROBS) ? r.target : token;
        out->logprob = ok ? (float)((double)raw_at(logits, ldt, base, token) - lse) : NAN;
        bool tops = ok || (r.flags & SR_LOGPROBS);
        for (int j = 0; j < k_top; j++) {
            out->top_ids[j] = tops ? top_id[j] : -1;
            out->top_lps[j] = tops ? top_lp[j] : NAN;
        }
    }
}

/* ------------------------------------------------------------------ */
/* the fast path: rows without edits, cuts or top logprobs             */
/* ------------------------------------------------------------------ */

/* Greedy and plain temperature sampling (vLLM's benchmarks sample with
 * temperature 1, top_p 1) over many CTAs per row: the row is cut into
 * `chunks` pieces of `chunk` tokens. Pass 1 (k_fast_stats): each chunk's
 * max, argmax, NaN flag and exponential sums; pass 2 (k_fast_mass, sampled
 * rows): each chunk's probability mass, with the row's max and sum merged
 * from pass 1; pass 3 (k_fast_pick, one CTA per row): the token, greedy
 * from the merged argmax, else the inverse-CDF draw walked in id order
 * inside the chunk where the running mass passes u * mass (the
 * probabilities as the main kernel computes them, sampler.c's). */
#define FS_THREADS SM_THREADS /* the block primitives assume it */
#define FS_MAX_CHUNKS 64
#define FS_MIN_CHUNK 1024

/* The row's max, argmax, NaN flag and log-sum-exp merged from its chunks;
 * every thread gets them (shared memory through r). */
__device__ void fast_merge(const cu_chunk_stats *st, int chunks, float *mx, int *arg, int *nan, double *lse,
                           sm_red *r) {
    float m = -INFINITY;
    int a = INT_MAX, n = 0;
    for (int c = threadIdx.x; c < chunks; c += FS_THREADS) {
        n |= st[c].nan;
        if (better(st[c].cmax, st[c].carg, m, a)) {
            m = st[c].cmax;
            a = st[c].carg;
        }
    }
    bargmax(&m, &a, r);
    n = bmax_i(n, r);
    double se = 0.0;
    if (m != -INFINITY)
        for (int c = threadIdx.x; c < chunks; c += FS_THREADS)
            if (st[c].cmax != -INFINITY) se += st[c].csum * exp((double)st[c].cmax - (double)m);
    se = bsum_d(se, r);
    *mx = m;
    *arg = a;
    *nan = n;
    *lse = m == -INFINITY ? (double)m : (double)m + log(se);
}

// grid (chunks, rows)
__global__ void __launch_bounds__(FS_THREADS) k_fast_stats(const void *logits, int ldt, int64_t ls, int V, int chunk,
                                                           const cu_srow *rows, cu_chunk_stats *stats, int chunks) {
    __shared__ sm_red red;
    const cu_srow r = rows[blockIdx.y];
    if (!(r.flags & SR_FAST)) return;
    const int64_t base = (int64_t)r.row * ls;
    const int v0 = blockIdx.x * chunk, v1 = min(V, v0 + chunk);
    float bv = -INFINITY;
    int bid = INT_MAX, nan = 0;
    for (int v = v0 + threadIdx.x; v < v1; v += FS_THREADS) {
        float x = raw_at(logits, ldt, base, v);
        if (isnan(x)) nan = 1;
        else if (better(x, v, bv, bid)) {
            bv = x;
            bid = v;
        }
    }
    bargmax(&bv, &bid, &red);
    nan = bmax_i(nan, &red);
    double s = 0.0, st = 0.0;
    const bool sampled = !(r.flags & SR_GREEDY);
    const double inv_t = sampled ? 1.0 / (double)r.temperature : 0.0;
    if (!nan && bv != -INFINITY) {
        for (int v = v0 + threadIdx.x; v < v1; v += FS_THREADS) {
            float x = raw_at(logits, ldt, base, v);
            s += (double)expf(x - bv);
            if (sampled) st += exp(((double)x - (double)bv) * inv_t);
        }
    }
    s = bsum_d(s, &red);
    st = bsum_d(st, &red);
    if (threadIdx.x == 0) {
        cu_chunk_stats *o = stats + (int64_t)blockIdx.y * chunks + blockIdx.x;
        o->cmax = bv;
        o->carg = bid;
        o->nan = nan;
        o->csum = s;
        o->csum_t = st;
        o->mass = 0.0;
    }
}

/* The row's max and sum of exp((x - max) / T) (the softmax denominator). */
__device__ void fast_denominator(const cu_chunk_stats *st, int chunks, double inv_t, float *mx, double *s, int *nan,
                                 sm_red *r) {
    float m = -INFINITY;
    int n = 0;
    for (int c = threadIdx.x; c < chunks; c += FS_THREADS) {
        n |= st[c].nan;
        m = fmaxf(m, st[c].cmax);
    }
    m = bmax_f(m, r);
    n = bmax_i(n, r);
    double sum = 0.0;
    if (m != -INFINITY)
        for (int c = threadIdx.x; c < chunks; c += FS_THREADS)
            if (st[c].cmax != -INFINITY) sum += st[c].csum_t * exp(((double)st[c].cmax - (double)m) * inv_t);
    *s = bsum_d(sum, r);
    *mx = m;
    *nan = n;
}

/* p(v) as the main kernel computes it: exp in double, rounded to float,
 * divided by the double sum and rounded again. */
__device__ __forceinline__ float fast_prob(float x, double m2, double inv_t, double s) {
    return (float)((double)(float)exp(((double)x - m2) * inv_t) / s);
}

// grid (chunks, rows): sampled rows only
__global__ void __launch_bounds__(FS_THREADS) k_fast_mass(const void *logits, int ldt, int64_t ls, int V, int chunk,
                                                          const cu_srow *rows, cu_chunk_stats *stats, int chunks) {
    __shared__ sm_red red;
    const cu_srow r = rows[blockIdx.y];
    if (!(r.flags & SR_FAST) || (r.flags & SR_GREEDY)) return;
    cu_chunk_stats *st = stats + (int64_t)blockIdx.y * chunks;
    const double inv_t = 1.0 / (double)r.temperature;
    float m;
    double s;
    int nan;
    fast_denominator(st, chunks, inv_t, &m, &s, &nan, &red);
    if (nan || m == -INFINITY) return;
    const int64_t base = (int64_t)r.row * ls;
    const int v0 = blockIdx.x * chunk, v1 = min(V, v0 + chunk);
    double mass = 0.0;
    for (int v = v0 + threadIdx.x; v < v1; v += FS_THREADS) mass += fast_prob(raw_at(logits, ldt, base, v), m, inv_t, s);
    mass = bsum_d(mass, &red);
    if (threadIdx.x == 0) st[blockIdx.x].mass = mass;
}

// one CTA per row
__global__ void __launch_bounds__(FS_THREADS) k_fast_pick(const void *logits, int ldt, int64_t ls, int V, int chunk,
                                                          const cu_srow *rows, const cu_chunk_stats *stats,
                                                          int chunks, cu_sout *outs) {
    __shared__ sm_red red;
    __shared__ double pre[FS_MAX_CHUNKS + 1];
    const cu_srow r = rows[blockIdx.x];
    if (!(r.flags & SR_FAST)) return;
    const cu_chunk_stats *st = stats + (int64_t)blockIdx.x * chunks;
    cu_sout *out = outs + blockIdx.x;
    const int64_t base = (int64_t)r.row * ls;
    float mx;
    int arg, nan;
    double lse;
    fast_merge(st, chunks, &mx, &arg, &nan, &lse, &red);
    int token = SAMPLE_ALL_BANNED;
    if (nan) {
        token = SAMPLE_NAN_LOGITS;
    } else if (r.flags & SR_GREEDY) {
        token = arg == INT_MAX ? 0 : arg; /* all -inf: token 0, as argmax */
    } else if (mx != -INFINITY) {
        const double inv_t = 1.0 / (double)r.temperature;
        float m;
        double s;
        int n2;
        fast_denominator(st, chunks, inv_t, &m, &s, &n2, &red);
        if (threadIdx.x == 0) {
            double acc = 0.0;
            for (int c = 0; c < chunks; c++) {
                pre[c] = acc;
                acc += st[c].mass;
            }
            pre[chunks] = acc;
        }
        __syncthreads();
        const double target = r.u * pre[chunks];
        int c = 0;
        while (c < chunks - 1 && !(target < pre[c + 1])) c++;
        /* walk chunk c in id order: thread slices, a block scan of their masses */
        const int v0 = c * chunk, v1 = min(V, v0 + chunk);
        const int n = v1 - v0, seg = (n + FS_THREADS - 1) / FS_THREADS;
        const int a0 = min(v1, v0 + (int)threadIdx.x * seg), a1 = min(v1, a0 + seg);
        double part = 0.0;
        for (int v = a0; v < a1; v++) part += fast_prob(raw_at(logits, ldt, base, v), m, inv_t, s);
        double cum = pre[c] + bscan_d(part, &red);
        int pick = INT_MAX;
        for (int v = a0; v < a1; v++) {
            cum += fast_prob(raw_at(logits, ldt, base, v), m, inv_t, s);
            if (target < cum) {
                pick = v;
                break;
            }
        }
        pick = bmin_i(pick, &red);
        token = pick == INT_MAX ? V - 1 : pick; /* rounding: the last survivor (every token survives here) */
    }
    if (threadIdx.x == 0) {
        bool ok = token >= 0 && token < V;
        out->token = token;
        out->logprob = ok ? (float)((double)raw_at(logits, ldt, base, token) - lse) : NAN;
    }
}

/* structured outputs' token masks (sampler_apply_token_mask), in place on the logits before anything reads
 * them: grid (ceil(V / 256), nm), one thread a logit; row blockIdx.y masks logits row rows[y] with
 * words[y * W ..], W = (V + 31) / 32; a clear bit -> -inf. (One CTA a row looping over V left 64 CTAs each
 * walking 600 dependent iterations: about 0.3 ms a 64-row step on the H200, the structured-output cost.) */
__global__ void k_apply_mask(void *logits, int dt, int64_t ls, int V, const int32_t *rows, const uint32_t *words) {
    const int t = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= V) return;
    const uint32_t *m = words + (size_t)blockIdx.y * (size_t)((V + 31) / 32);
    if (m[t >> 5] >> (t & 31) & 1u) return;
    const int64_t at = (int64_t)rows[blockIdx.y] * ls + t;
    if (dt == DTYPE_F32) ((float *)logits)[at] = -INFINITY;
    else ((__nv_bfloat16 *)logits)[at] = __float2bfloat16(-INFINITY);
}

/* ------------------------------------------------------------------ */
/* host side                                                           */
/* ------------------------------------------------------------------ */

/* the rows of b with a token mask: uploaded and applied to the logits (on the stream, before the sampling
 * kernels, which then read the masked rows as the reference does) */
static vllm_status apply_masks(cu_state *cu, tensor *logits, const sample_batch *b, int V) {
    int nm = 0;
    for (int i = 0; i < b->num_rows; i++) nm += b->ctx[i].mask != NULL;
    if (!nm) return VLLM_OK;
    cu_sample_ws *s = cu->sample;
    const size_t W = (size_t)(V + 31) / 32, rows_bytes = ((size_t)nm * sizeof(int32_t) + 15) & ~(size_t)15;
    const size_t bytes = rows_bytes + (size_t)nm * W * sizeof(uint32_t);
    vllm_status st;
    if ((st = cu_hbuf_reserve(&s->h_mask, bytes, "token masks")) ||
        (st = cu_buf_reserve(cu, &s->d_mask, bytes, "token masks")))
        return st;
    int32_t *rows = (int32_t *)s->h_mask.p;
    uint32_t *words = (uint32_t *)((char *)s->h_mask.p + rows_bytes);
    for (int i = 0, j = 0; i < b->num_rows; i++) {
        if (!b->ctx[i].mask) continue;
        rows[j] = b->rows[i];
        memcpy(words + (size_t)j * W, b->ctx[i].mask, W * sizeof(uint32_t));
        j++;
    }
    cudaError_t e = cudaMemcpyAsync(s->d_mask.p, s->h_mask.p, bytes, cudaMemcpyHostToDevice, cu->stream);
    if (e == cudaSuccess) {
        const int32_t *d_rows = (const int32_t *)s->d_mask.p;
        const uint32_t *d_words = (const uint32_t *)((char *)s->d_mask.p + rows_bytes);
        for (int y0 = 0; y0 < nm; y0 += 65535) { /* gridDim.y's limit */
            const int ny = nm - y0 < 65535 ? nm - y0 : 65535;
            k_apply_mask<<<dim3((unsigned)((V + 255) / 256), (unsigned)ny), 256, 0, cu->stream>>>(
                logits->data, logits->dtype, tensor_row_stride(logits), V, d_rows + y0, d_words + (size_t)y0 * W);
        }
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda sample (token masks): %s", cudaGetErrorString(e));
    }
    return VLLM_OK;
}

void cu_sample_free(cu_state *cu) {
    cu_sample_ws *s = cu->sample;
    if (!s) return;
    cu_hbuf_free(&s->h_rows);
    cu_hbuf_free(&s->h_edits);
    cu_hbuf_free(&s->h_outs);
    cu_buf_free(&s->d_rows);
    cu_buf_free(&s->d_edits);
    cu_buf_free(&s->d_outs);
    cu_buf_free(&s->d_work);
    cu_buf_free(&s->d_stats);
    cu_hbuf_free(&s->h_mask);
    cu_buf_free(&s->d_mask);
    free(s->slot_of);
    free(s);
    cu->sample = NULL;
}

/* Common checks; sets *V. Reports a pending op failure first. */
static vllm_status sample_prepare(backend *be, const tensor *logits, const int32_t *rows, int n, const char *op,
                                  int *V) {
    cu_state *cu = cu_of(be);
    /* no wait for the forward here: the rows, edits and token masks are packed on the host while the device still
       runs it (the outputs' download at the end waits, and reports any device error); a failure already recorded
       is reported now */
    vllm_status st = cu->err != VLLM_OK ? cu_sync(be) : VLLM_OK;
    if (st != VLLM_OK) return st;
    if (!logits || !logits->data || logits->ndim != 2 || (logits->dtype != DTYPE_F32 && logits->dtype != DTYPE_BF16) ||
        logits->shape[1] <= 0 || logits->shape[1] > INT32_MAX / 2 || tensor_extent_bytes(logits) < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "cuda %s: logits must be a (rows, vocab) F32 or BF16 matrix", op);
    if (n < 0 || (n > 0 && !rows)) return vt_error(VLLM_ERR_INVALID_ARG, "cuda %s: bad row list", op);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= logits->shape[0])
            return vt_error(VLLM_ERR_INVALID_ARG, "cuda %s: row %d outside the %lld logits rows", op, (int)rows[i],
                            (long long)logits->shape[0]);
    *V = (int)logits->shape[1];
    if (!cu->sample) {
        cu->sample = (cu_sample_ws *)calloc(1, sizeof *cu->sample);
        if (!cu->sample) return vt_error(VLLM_ERR_NO_MEMORY, "cuda %s: out of memory", op);
    }
    cu_sample_ws *s = cu->sample;
    if (s->vocab != *V) {
        free(s->slot_of);
        s->slot_of = (int32_t *)malloc((size_t)*V * sizeof *s->slot_of);
        if (!s->slot_of) {
            s->vocab = 0;
            return vt_error(VLLM_ERR_NO_MEMORY, "cuda %s: out of memory for a %d-token vocabulary", op, *V);
        }
        for (int v = 0; v < *V; v++) s->slot_of[v] = -1;
        s->vocab = *V;
    }
    if ((st = cu_hbuf_reserve(&s->h_rows, (size_t)(n ? n : 1) * sizeof(cu_srow), "sampling rows")) ||
        (st = cu_hbuf_reserve(&s->h_outs, (size_t)(n ? n : 1) * sizeof(cu_sout), "sampling outputs")) ||
        (st = cu_buf_reserve(cu, &s->d_rows, (size_t)(n ? n : 1) * sizeof(cu_srow), "sampling rows")) ||
        (st = cu_buf_reserve(cu, &s->d_outs, (size_t)(n ? n : 1) * sizeof(cu_sout), "sampling outputs")))
        return st;
    return VLLM_OK;
}

/* The edit of token t in the row being packed (made on first use). */
static cu_edit *edit_of(cu_sample_ws *s, int32_t t, int32_t row_off, int32_t *n_edits) {
    if (s->slot_of[t] < 0) {
        s->slot_of[t] = *n_edits - row_off;
        cu_edit *e = (cu_edit *)s->h_edits.p + *n_edits;
        e->token = t;
        e->flags = 0;
        e->bias = 0.0f;
        e->count = 0;
        (*n_edits)++;
    }
    return (cu_edit *)s->h_edits.p + row_off + s->slot_of[t];
}

/* Most edits one row can produce (each source id adds at most one entry). */
static size_t row_edit_bound(const vllm_sampling_params *p, const sampler_context *c) {
    size_t n = p->num_allowed_token_ids + p->num_logit_bias + p->num_stop_token_ids + c->n_eos + c->n_output +
               c->n_prompt;
    if (c->bad_words) n += c->bad_words->num;
    return n;
}

/* Packs row i's logits processors and penalties as sparse edits (the
 * semantics of logits_proc.c, in its order). */
static void pack_edits(cu_sample_ws *s, const vllm_sampling_params *p, const sampler_context *c, int V, cu_srow *r,
                       int32_t *n_edits) {
    const int32_t off = *n_edits;
    r->edit_off = off;
    /* 1. allowed_token_ids (sampler_apply_allowed: a no-op when empty) */
    if (p->allowed_token_ids && p->num_allowed_token_ids > 0) {
        r->flags |= SR_ALLOWED;
        for (size_t i = 0; i < p->num_allowed_token_ids; i++) {
            int32_t t = p->allowed_token_ids[i];
            if (t >= 0 && t < V) edit_of(s, t, off, n_edits)->flags |= ED_ALLOWED;
        }
    }
    /* 2. bad words (sampler_apply_bad_words) */
    if (c->bad_words) {
        const sampler_token_seqs *bw = c->bad_words;
        for (size_t wi = 0; wi < bw->num; wi++) {
            const int32_t *word = bw->ids + bw->offsets[wi];
            size_t len = bw->offsets[wi + 1] - bw->offsets[wi];
            if (len == 0 || len > c->n_output + 1) continue;
            size_t prefix = len - 1;
            if (prefix && memcmp(word, c->output + (c->n_output - prefix), prefix * sizeof *word) != 0) continue;
            int32_t last = word[prefix];
            if (last >= 0 && last < V) edit_of(s, last, off, n_edits)->flags |= ED_BANNED;
        }
    }
    /* 3a. min_tokens: EOS and stop ids banned while the output is short */
    if (p->min_tokens > 0 && c->n_output < (size_t)p->min_tokens) {
        for (size_t i = 0; i < c->n_eos; i++)
            if (c->eos_ids[i] >= 0 && c->eos_ids[i] < V) edit_of(s, c->eos_ids[i], off, n_edits)->flags |= ED_BANNED;
        for (size_t i = 0; p->stop_token_ids && i < p->num_stop_token_ids; i++)
            if (p->stop_token_ids[i] >= 0 && p->stop_token_ids[i] < V)
                edit_of(s, p->stop_token_ids[i], off, n_edits)->flags |= ED_BANNED;
    }
    /* 3b. logit_bias: from the end, so that the last value of a repeated id wins */
    for (size_t i = p->num_logit_bias; p->logit_bias_ids && p->logit_bias_values && i-- > 0;) {
        int32_t t = p->logit_bias_ids[i];
        float b = p->logit_bias_values[i];
        if (t < 0 || t >= V || isnan(b)) continue;
        cu_edit *e = edit_of(s, t, off, n_edits);
        if (e->flags & ED_BIAS) continue;
        if (b > SAMPLER_MAX_LOGIT_BIAS) b = SAMPLER_MAX_LOGIT_BIAS;
        if (b < -SAMPLER_MAX_LOGIT_BIAS) b = -SAMPLER_MAX_LOGIT_BIAS;
        e->flags |= ED_BIAS;
        e->bias = b;
    }
    /* 4. penalties (off when all three are neutral, vLLM's no_penalties) */
    if (!(p->repetition_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f)) {
        for (size_t i = 0; i < c->n_output; i++) {
            int32_t t = c->output[i];
            if (t < 0 || t >= V) continue;
            cu_edit *e = edit_of(s, t, off, n_edits);
            e->flags |= ED_PENALTY;
            e->count++;
        }
        if (p->repetition_penalty != 1.0f)
            for (size_t i = 0; i < c->n_prompt; i++) {
                int32_t t = c->prompt[i];
                if (t >= 0 && t < V) edit_of(s, t, off, n_edits)->flags |= ED_PENALTY;
            }
    }
    r->n_edit = *n_edits - off;
    /* reset the token map for the next row */
    for (int32_t i = off; i < *n_edits; i++) s->slot_of[((cu_edit *)s->h_edits.p)[i].token] = -1;
}

/* Uploads rows and edits, runs the kernels, downloads the outputs. n_fast /
 * n_fast_sampled: rows flagged SR_FAST, and those of them not greedy. */
static vllm_status sample_run(backend *be, const tensor *logits, int n, int32_t n_edits, int n_fast,
                              int n_fast_sampled, const char *op) {
    cu_state *cu = cu_of(be);
    cu_sample_ws *s = cu->sample;
    int V = (int)logits->shape[1];
    int chunks = (V + FS_MIN_CHUNK - 1) / FS_MIN_CHUNK;
    if (chunks > FS_MAX_CHUNKS) chunks = FS_MAX_CHUNKS;
    if (chunks < 1) chunks = 1;
    const int chunk = (V + chunks - 1) / chunks;
    vllm_status st;
    if ((st = cu_buf_reserve(cu, &s->d_edits, (size_t)(n_edits ? n_edits : 1) * sizeof(cu_edit), "sampling edits")) ||
        (n > n_fast &&
         (st = cu_buf_reserve(cu, &s->d_work, (size_t)n * (size_t)V * sizeof(float), "sampling workspace"))) ||
        (st = cu_buf_reserve(cu, &s->d_stats, (size_t)n * chunks * sizeof(cu_chunk_stats), "sampling statistics")))
        return st;
    cudaError_t e = cudaMemcpyAsync(s->d_rows.p, s->h_rows.p, (size_t)n * sizeof(cu_srow), cudaMemcpyHostToDevice,
                                    cu->stream);
    if (e == cudaSuccess && n_edits)
        e = cudaMemcpyAsync(s->d_edits.p, s->h_edits.p, (size_t)n_edits * sizeof(cu_edit), cudaMemcpyHostToDevice,
                            cu->stream);
    if (e == cudaSuccess) {
        const int64_t ls = tensor_row_stride(logits);
        const cu_srow *rows = (const cu_srow *)s->d_rows.p;
        cu_chunk_stats *stats = (cu_chunk_stats *)s->d_stats.p;
        cu_sout *outs = (cu_sout *)s->d_outs.p;
        if (n > n_fast)
            k_sample<<<(unsigned)n, SM_THREADS, 0, cu->stream>>>(
                logits->data, logits->dtype, ls, V, rows, (const cu_edit *)s->d_edits.p, (float *)s->d_work.p, outs);
        if (n_fast) {
            dim3 grid((unsigned)chunks, (unsigned)n);
            k_fast_stats<<<grid, FS_THREADS, 0, cu->stream>>>(logits->data, logits->dtype, ls, V, chunk, rows, stats,
                                                              chunks);
            if (n_fast_sampled)
                k_fast_mass<<<grid, FS_THREADS, 0, cu->stream>>>(logits->data, logits->dtype, ls, V, chunk, rows,
                                                                 stats, chunks);
            k_fast_pick<<<(unsigned)n, FS_THREADS, 0, cu->stream>>>(logits->data, logits->dtype, ls, V, chunk, rows,
                                                                   stats, chunks, outs);
        }
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(s->h_outs.p, s->d_outs.p, (size_t)n * sizeof(cu_sout), cudaMemcpyDeviceToHost, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda %s: %s", op, cudaGetErrorString(e));
    }
    /* waits for the forward and the sampling, and reports a failure of either (device error flags included) */
    return cu_sync(be);
}

vllm_status cu_sample(backend *be, tensor *logits, const sample_batch *b) {
    cu_state *cu = cu_of(be);
    int V = 0;
    if (b->num_rows <= 0) return VLLM_OK;
    vllm_status st = sample_prepare(be, logits, b->rows, b->num_rows, "sample", &V);
    if (st != VLLM_OK) return st;
    cu_sample_ws *s = cu->sample;
    const int n = b->num_rows;
    /* room for the edits */
    size_t bound = 0;
    for (int i = 0; i < n; i++) {
        if (!b->params[i]) return vt_error(VLLM_ERR_INVALID_ARG, "cuda sample: row %d has no parameters", i);
        bound += row_edit_bound(b->params[i], &b->ctx[i]);
    }
    if (bound > (size_t)INT32_MAX / 2) return vt_error(VLLM_ERR_INVALID_ARG, "cuda sample: too many token ids");
    if ((st = cu_hbuf_reserve(&s->h_edits, (bound ? bound : 1) * sizeof(cu_edit), "sampling edits"))) return st;
    cu_srow *rows = (cu_srow *)s->h_rows.p;
    int32_t n_edits = 0;
    int n_fast = 0, n_fast_sampled = 0;
    for (int i = 0; i < n; i++) {
        const vllm_sampling_params *p = b->params[i];
        cu_srow *r = &rows[i];
        memset(r, 0, sizeof *r);
        r->row = b->rows[i];
        int k = b->top_ids && b->top_ids[i] ? p->logprobs : 0;
        if (k < 0) k = 0;
        if (k > SM_MAXK)
            return vt_error(VLLM_ERR_INVALID_ARG, "cuda sample: row %d asks for %d top logprobs (at most %d)", i, k,
                            SM_MAXK);
        r->k_top = k;
        if (!(p->temperature > 0.0f)) {
            r->flags |= SR_GREEDY;
        } else {
            r->temperature = p->temperature < 0.01f ? 0.01f : p->temperature; /* vLLM's _MAX_TEMP */
            r->u = b->uniform[i];
        }
        r->top_k = p->top_k > 0 ? p->top_k : 0;
        r->top_p = p->top_p;
        r->min_p = p->min_p;
        r->rp = p->repetition_penalty;
        r->fp = p->frequency_penalty;
        r->pp = p->presence_penalty;
        pack_edits(s, p, &b->ctx[i], V, r, &n_edits);
        if (cu->sample_bisect) r->flags |= SR_NO_CAND;
        if (cu->sample_radix) r->flags |= SR_RADIX;
        const bool greedy = (r->flags & SR_GREEDY) != 0;
        if (r->n_edit == 0 && !(r->flags & SR_ALLOWED) && r->k_top == 0 &&
            (greedy || (!(r->min_p > 0.0f) && (r->top_k <= 0 || r->top_k >= V) && !(r->top_p < 1.0f)))) {
            r->flags |= SR_FAST;
            n_fast++;
            n_fast_sampled += !greedy;
        }
    }
    if ((st = apply_masks(cu, logits, b, V)) ||
        (st = sample_run(be, logits, n, n_edits, n_fast, n_fast_sampled, "sample")))
        return st;
    const cu_sout *o = (const cu_sout *)s->h_outs.p;
    for (int i = 0; i < n; i++) {
        b->tokens[i] = o[i].token;
        b->logprobs[i] = o[i].logprob;
        int k = rows[i].k_top;
        for (int j = 0; j < k; j++) {
            b->top_ids[i][j] = o[i].top_ids[j];
            b->top_lps[i][j] = o[i].top_lps[j];
        }
    }
    return VLLM_OK;
}

vllm_status cu_logprobs(backend *be, const tensor *logits, const logprob_batch *b) {
    cu_state *cu = cu_of(be);
    int V = 0;
    if (b->num_rows <= 0) return VLLM_OK;
    vllm_status st = sample_prepare(be, logits, b->rows, b->num_rows, "logprobs", &V);
    if (st != VLLM_OK) return st;
    cu_sample_ws *s = cu->sample;
    const int n = b->num_rows;
    cu_srow *rows = (cu_srow *)s->h_rows.p;
    for (int i = 0; i < n; i++) {
        cu_srow *r = &rows[i];
        memset(r, 0, sizeof *r);
        r->row = b->rows[i];
        r->flags = SR_LOGPROBS;
        r->target = b->targets[i];
        int k = b->k[i] > 0 && b->top_ids && b->top_ids[i] ? b->k[i] : 0;
        if (k > SM_MAXK)
            return vt_error(VLLM_ERR_INVALID_ARG, "cuda logprobs: row %d asks for %d top logprobs (at most %d)", i, k,
                            SM_MAXK);
        r->k_top = k;
    }
    if ((st = sample_run(be, logits, n, 0, 0, 0, "logprobs"))) return st;
    const cu_sout *o = (const cu_sout *)s->h_outs.p;
    for (int i = 0; i < n; i++) {
        int32_t t = b->targets[i];
        b->logprobs[i] = t >= 0 && t < V ? o[i].logprob : NAN;
        int k = rows[i].k_top;
        for (int j = 0; j < k; j++) {
            b->top_ids[i][j] = o[i].top_ids[j];
            b->top_lps[i][j] = o[i].top_lps[j];
        }
    }
    return VLLM_OK;
}
