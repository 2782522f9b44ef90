/*
 * ops_linear_attn.cu: the CUDA kernels of the gated delta-net mixer (Qwen3-Next / Qwen3.5 linear
 * attention), tested against the CPU reference (src/cpu/ops_linear_attn.c) in tests/cuda/test_cuda_ops.c:
 *
 *   causal_conv1d     one thread per (sequence, channel) walking the sequence's tokens with the last K - 1
 *                     inputs in registers (in place safe: a thread reads x[t, c] before writing out[t, c]);
 *                     out of place, prompts run in chunks of 64 tokens in parallel, the states after;
 *   gated_delta_rule  the recurrent form: a block per (sequence, v-head, 32 state columns), the (d_k, 32)
 *                     slice of the state in registers (4 threads per column, d_k / 4 rows each), tokens
 *                     staged through shared memory 16 at a time; decode is the same kernel with one token;
 *   rms_norm_gated    one warp per (token, v-head group);
 *   gdn_gating, sigmoid_mul   elementwise.
 *
 * Semantics, shapes and dtypes: backend.h (the linear-attention ops). Each sequence's metadata (its
 * tokens, state slot, start flag) is read on the device, so a decode step records into a CUDA graph; a
 * slot outside the pool is reported through the device error word (CU_DEV_LA_SLOT).
 */
#include <stdlib.h>
#include <string.h>

#include <mma.h>

#include "cuda/cuda_internal.h"

#define LA_L2NORM_EPS 1e-6f  /* transformers' l2norm(eps=1e-6) */
#define GDR_COLS 32          /* state columns (d_v) per block */
#define GDR_PARTS 4          /* threads per column, each with d_k / 4 rows */
#define GDR_TOKENS 16        /* tokens staged in shared memory at a time */
#define GDR_MAX_DK CU_LA_MAX_DK

__device__ __forceinline__ float la_silu(float x) { return x / (1.0f + expf(-x)); }

/* A sequence's tokens [t0, t1) and slot, checked against the pool; false when it has nothing to do. */
__device__ __forceinline__ bool la_seq(const int32_t *qsl, const int32_t *slots, int s, int64_t num_slots,
                                       cu_dev_err *err, int64_t *t0, int64_t *t1, int *slot) {
    *t0 = qsl[s];
    *t1 = qsl[s + 1];
    *slot = slots[s];
    if (*slot >= num_slots) {
        if (threadIdx.x == 0) cu_report(err, CU_DEV_LA_SLOT, s, *slot, num_slots);
        return false;
    }
    return *t1 > *t0;
}

/* ---- causal conv1d ---- */

template <int K>
__global__ void k_causal_conv1d(const void *x, int xdt, int64_t xs, const void *w, int wdt, int64_t ws,
                                const void *bias, int bdt, int silu, void *state, int sdt, int64_t num_slots,
                                const int32_t *qsl, const int32_t *slots, const int32_t *init, int64_t C, void *out,
                                int odt, int64_t os, cu_dev_err *err) {
    constexpr int W = K - 1;
    pdl_launch();
    const int s = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    /* Before pdl_wait (cuda_internal.h): the metadata, the weights and the slot's state (only this op writes it,
     * in an earlier step; a prefix-cache restore is a copy, which no kernel of the step starts before); x after. */
    const int64_t t0 = qsl[s], t1 = qsl[s + 1];
    const int slot = slots[s];
    const bool run = slot < num_slots && t1 > t0 && c < C && slot >= 0; /* la_seq's tests */
    float wr[K], win[W > 0 ? W : 1], b = 0.0f;
    const int64_t base = ((int64_t)slot * C + c) * W; /* state[slot, c, :] */
    if (run) {
#pragma unroll
        for (int j = 0; j < K; j++) wr[j] = cu_ld(w, wdt, c * ws + j);
        if (bias) b = cu_ld(bias, bdt, c);
        const bool from_state = init[s] != 0;
#pragma unroll
        for (int j = 0; j < W; j++) win[j] = from_state ? cu_ld(state, sdt, base + j) : 0.0f;
    }
    pdl_wait();
    if (slot >= num_slots) {
        if (threadIdx.x == 0) cu_report(err, CU_DEV_LA_SLOT, s, slot, num_slots);
        return;
    }
    if (t1 <= t0 || c >= C) return;
    if (slot < 0) { /* padding: outputs 0, no state */
        for (int64_t t = t0; t < t1; t++) cu_st(out, odt, t * os + c, 0.0f);
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        const float xt = cu_ld(x, xdt, t * xs + c); /* read before out (which may be x) is written */
        float acc = b;
#pragma unroll
        for (int j = 0; j < W; j++) acc = fmaf(wr[j], win[j], acc);
        acc = fmaf(wr[W], xt, acc);
        cu_st(out, odt, t * os + c, silu ? la_silu(acc) : acc);
#pragma unroll
        for (int j = 0; j + 1 < W; j++) win[j] = win[j + 1];
        win[W - 1] = xt;
    }
#pragma unroll
    for (int j = 0; j < W; j++) cu_st(state, sdt, base + j, win[j]);
}

/* Out of place (out does not overlap x): block (channel tile, token chunk of CONV_CHUNK, sequence); a
 * thread walks its channel through the chunk, the K - 1 inputs before it read from x (or the slot's state
 * before the sequence's first token). The state is written afterwards by k_conv_state (the first chunk
 * reads it). */
#define CONV_CHUNK 64
template <int K>
__global__ void k_causal_conv1d_chunks(const void *x, int xdt, int64_t xs, const void *w, int wdt, int64_t ws,
                                       const void *bias, int bdt, int silu, const void *state, int sdt,
                                       int64_t num_slots, const int32_t *qsl, const int32_t *slots,
                                       const int32_t *init, int64_t C, void *out, int odt, int64_t os,
                                       cu_dev_err *err) {
    constexpr int W = K - 1;
    pdl_launch();
    pdl_wait();
    const int s = blockIdx.z;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t t0, t1;
    int slot;
    if (!la_seq(qsl, slots, s, num_slots, err, &t0, &t1, &slot) || c >= C) return;
    const int64_t c0 = t0 + (int64_t)blockIdx.y * CONV_CHUNK, c1 = min(c0 + CONV_CHUNK, t1);
    if (c0 >= t1) return;
    if (slot < 0) {
        for (int64_t t = c0; t < c1; t++) cu_st(out, odt, t * os + c, 0.0f);
        return;
    }
    float wr[K], win[W > 0 ? W : 1];
#pragma unroll
    for (int j = 0; j < K; j++) wr[j] = cu_ld(w, wdt, c * ws + j);
    const float b = bias ? cu_ld(bias, bdt, c) : 0.0f;
    const int64_t base = ((int64_t)slot * C + c) * W;
    const bool from_state = init[s] != 0;
#pragma unroll
    for (int j = 0; j < W; j++) { /* x'[c0 - W + j]: x inside the sequence, else the state (or 0) */
        const int64_t t = c0 - W + j;
        win[j] = t >= t0 ? cu_ld(x, xdt, t * xs + c) : from_state ? cu_ld(state, sdt, base + (t - t0 + W)) : 0.0f;
    }
    for (int64_t t = c0; t < c1; t++) {
        const float xt = cu_ld(x, xdt, t * xs + c);
        float acc = b;
#pragma unroll
        for (int j = 0; j < W; j++) acc = fmaf(wr[j], win[j], acc);
        acc = fmaf(wr[W], xt, acc);
        cu_st(out, odt, t * os + c, silu ? la_silu(acc) : acc);
#pragma unroll
        for (int j = 0; j + 1 < W; j++) win[j] = win[j + 1];
        win[W - 1] = xt;
    }
}

/* The slot's new conv state after k_causal_conv1d_chunks: the last K - 1 of x' (x's last inputs, the
 * old state's newest ones when the sequence has fewer than K - 1 tokens). */
template <int K>
__global__ void k_conv_state(const void *x, int xdt, int64_t xs, void *state, int sdt, int64_t num_slots,
                             const int32_t *qsl, const int32_t *slots, const int32_t *init, int64_t C,
                             cu_dev_err *err) {
    constexpr int W = K - 1;
    pdl_launch();
    pdl_wait();
    const int s = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t t0, t1;
    int slot;
    if (!la_seq(qsl, slots, s, num_slots, err, &t0, &t1, &slot) || c >= C || slot < 0) return;
    const int64_t base = ((int64_t)slot * C + c) * W;
    const bool from_state = init[s] != 0;
    float win[W > 0 ? W : 1];
#pragma unroll
    for (int j = 0; j < W; j++) {
        const int64_t t = t1 - W + j;
        win[j] = t >= t0 ? cu_ld(x, xdt, t * xs + c) : from_state ? cu_ld(state, sdt, base + (t - t0 + W)) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < W; j++) cu_st(state, sdt, base + j, win[j]);
}

/* The pool shapes the ops take: contiguous F32 / F16 / BF16, dims 1.. as want (dim 0: slots, any). */
static bool la_check_pool(cu_state *cu, const char *op, const char *arg, const tensor *t, int ndim,
                          const int64_t *want) {
    int64_t cols = 1;
    for (int d = 0; d < ndim - 1; d++) cols *= want[d];
    if (!cu_check_mat(cu, op, arg, t, CU_FLOAT, -1, cols)) return false;
    bool ok = t->ndim == ndim && (t->row_stride == 0 || t->row_stride == cols);
    for (int d = 1; ok && d < ndim; d++) ok = t->shape[d] == want[d - 1];
    if (!ok) cu_fail(cu, "%s: %s must be a contiguous %d-D F32 / F16 / BF16 pool (slots, ...) with dims 1.. of the "
                     "layer's shapes", op, arg, ndim);
    return ok;
}

/* The metadata's arrays: device I32 vectors long enough for num_seqs, num_tokens matching T. */
static bool la_check_meta(cu_state *cu, const char *op, const linear_attn_meta *m, int64_t T) {
    if (!m) {
        cu_fail(cu, "%s: no linear_attn_meta", op);
        return false;
    }
    if (m->num_seqs < 0 || m->num_tokens != T || (m->num_seqs == 0 && T > 0)) {
        cu_fail(cu, "%s: metadata has %d sequences and %d tokens for %lld input rows", op, m->num_seqs, m->num_tokens,
                (long long)T);
        return false;
    }
    if (m->num_seqs == 0) return true;
    if (!cu_check_vec(cu, op, "query_start_loc", &m->query_start_loc, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, op, "state_slots", &m->state_slots, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, op, "has_initial_state", &m->has_initial_state, CU_DT(DTYPE_I32), -1))
        return false;
    if (tensor_numel(&m->query_start_loc) < m->num_seqs + 1 || tensor_numel(&m->state_slots) < m->num_seqs ||
        tensor_numel(&m->has_initial_state) < m->num_seqs) {
        cu_fail(cu, "%s: metadata arrays are shorter than num_seqs %d", op, m->num_seqs);
        return false;
    }
    return true;
}

// x (T, C) act, w (C, K), bias (C) or NULL, conv_state (num_slots, C, K - 1), m -> out (T, C) act; out may be x
extern "C" void cu_causal_conv1d(backend *be, const tensor *x, const tensor *w, const tensor *bias, bool silu,
                                 tensor *conv_state, const linear_attn_meta *m, tensor *out) {
    cu_state *cu = cu_of(be);
    const char *op = "causal_conv1d";
    if (!cu_check_mat(cu, op, "x", x, CU_ACT, -1, -1)) return;
    const int64_t T = cu_rows(x), C = tensor_row_len(x);
    if (!cu_check_mat(cu, op, "w", w, CU_FLOAT, C, -1)) return;
    const int64_t K = tensor_row_len(w);
    if (K < 2 || K > CU_LA_MAX_CONV_K) {
        cu_fail(cu, "%s: kernel width %lld must be 2 to %d", op, (long long)K, CU_LA_MAX_CONV_K);
        return;
    }
    const int64_t pool[2] = {C, K - 1};
    if ((bias && !cu_check_vec(cu, op, "bias", bias, CU_FLOAT, C)) ||
        !la_check_pool(cu, op, "conv_state", conv_state, 3, pool) || !cu_check_mat(cu, op, "out", out, CU_ACT, T, C) ||
        !la_check_meta(cu, op, m, T))
        return;
    if (m->num_seqs == 0 || C == 0) return;
    const dim3 grid((unsigned)((C + 127) / 128), (unsigned)m->num_seqs), block(128);
    const void *bp = bias ? bias->data : NULL;
    const int bdt = bias ? (int)bias->dtype : 0;
    /* out of place and prompts longer than a chunk: chunks of tokens in parallel, then the states */
    const bool overlap = (const char *)out->data < (const char *)x->data + tensor_nbytes(x) &&
                         (const char *)x->data < (const char *)out->data + tensor_nbytes(out);
    if (!overlap && m->max_query_len > CONV_CHUNK) {
        const dim3 cgrid((unsigned)((C + 127) / 128), (unsigned)((m->max_query_len + CONV_CHUNK - 1) / CONV_CHUNK),
                         (unsigned)m->num_seqs);
#define CHUNK_ARGS                                                                                            \
    x->data, (int)x->dtype, tensor_row_stride(x), w->data, (int)w->dtype, tensor_row_stride(w), bp, bdt,       \
        (int)silu, (const void *)conv_state->data, (int)conv_state->dtype, cu_rows(conv_state),                \
        (const int32_t *)m->query_start_loc.data, (const int32_t *)m->state_slots.data,                        \
        (const int32_t *)m->has_initial_state.data, C, out->data, (int)out->dtype, tensor_row_stride(out),     \
        cu->derr_dev
#define STATE_ARGS                                                                                            \
    x->data, (int)x->dtype, tensor_row_stride(x), conv_state->data, (int)conv_state->dtype, cu_rows(conv_state), \
        (const int32_t *)m->query_start_loc.data, (const int32_t *)m->state_slots.data,                        \
        (const int32_t *)m->has_initial_state.data, C, cu->derr_dev
#define CONV_CASE(KK)                                                                                         \
    case KK:                                                                                                  \
        if (cu_launch(cu, op, true, k_causal_conv1d_chunks<KK>, cgrid, block, 0, CHUNK_ARGS))                 \
            cu_launch(cu, op, true, k_conv_state<KK>, grid, block, 0, STATE_ARGS);                            \
        return;
        switch (K) {
            CONV_CASE(2)
            CONV_CASE(3)
            CONV_CASE(4)
            CONV_CASE(5)
            CONV_CASE(6)
            CONV_CASE(7)
            CONV_CASE(8)
        }
#undef CONV_CASE
#undef STATE_ARGS
#undef CHUNK_ARGS
    }
#define CONV_ARGS                                                                                             \
    x->data, (int)x->dtype, tensor_row_stride(x), w->data, (int)w->dtype, tensor_row_stride(w), bp, bdt,       \
        (int)silu, conv_state->data, (int)conv_state->dtype, cu_rows(conv_state),                              \
        (const int32_t *)m->query_start_loc.data, (const int32_t *)m->state_slots.data,                        \
        (const int32_t *)m->has_initial_state.data, C, out->data, (int)out->dtype, tensor_row_stride(out),     \
        cu->derr_dev
    switch (K) {
    case 2: cu_launch(cu, op, true, k_causal_conv1d<2>, grid, block, 0, CONV_ARGS); break;
    case 3: cu_launch(cu, op, true, k_causal_conv1d<3>, grid, block, 0, CONV_ARGS); break;
    case 4: cu_launch(cu, op, true, k_causal_conv1d<4>, grid, block, 0, CONV_ARGS); break;
    case 5: cu_launch(cu, op, true, k_causal_conv1d<5>, grid, block, 0, CONV_ARGS); break;
    case 6: cu_launch(cu, op, true, k_causal_conv1d<6>, grid, block, 0, CONV_ARGS); break;
    case 7: cu_launch(cu, op, true, k_causal_conv1d<7>, grid, block, 0, CONV_ARGS); break;
    default: cu_launch(cu, op, true, k_causal_conv1d<8>, grid, block, 0, CONV_ARGS); break;
    }
#undef CONV_ARGS
}

/* ---- gated delta rule (recurrent form) ---- */

struct gdr_args {
    const void *q, *k, *v, *g, *beta;
    int qdt, kdt, vdt, gdt, bdt;
    int64_t qs, ks, vs, gs, bs;
    void *state;
    int sdt;
    int64_t num_slots;
    const int32_t *qsl, *slots, *init;
    int Hv, group, dk, dv;
    float scale;
    int l2norm;
    void *out;
    int odt;
    int64_t os;
    cu_dev_err *err;
};

/* The state elements S[p + GDR_PARTS r, j] (r < R, rows below dk) of state rows dv apart from base, as float (none:
 * zeros). One dtype test outside the unrolled loop: the R loads go out together (a test per element made them a
 * chain of R round trips, 20 us a layer on an H100). */
template <int R>
__device__ __forceinline__ void gdr_state_load(float *S, const void *st, int sdt, int64_t base, int64_t dv, int j,
                                               int p, int dk, bool any) {
    if (!any) {
#pragma unroll
        for (int r = 0; r < R; r++) S[r] = 0.0f;
        return;
    }
    cu_with_dt(sdt, [&](auto dt) {
#pragma unroll
        for (int r = 0; r < R; r++) { /* rows past dk read row dk - 1 (no test between the loads) */
            const int i = min(p + GDR_PARTS * r, dk - 1);
            S[r] = cu_ld(st, decltype(dt)::value, base + (int64_t)i * dv + j);
        }
#pragma unroll
        for (int r = 0; r < R; r++)
            if (p + GDR_PARTS * r >= dk) S[r] = 0.0f;
    });
}

/* ... and back, rounded to the state's dtype */
template <int R>
__device__ __forceinline__ void gdr_state_store(const float *S, void *st, int sdt, int64_t base, int64_t dv, int j,
                                                int p, int dk) {
    cu_with_dt(sdt, [&](auto dt) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = p + GDR_PARTS * r;
            if (i < dk) cu_st(st, decltype(dt)::value, base + (int64_t)i * dv + j, S[r]);
        }
    });
}

/* Block (column tile, v-head h, sequence s), 128 threads: thread = column c (0..31) * 4 + part p; it keeps
 * S[i, j0 + c] for the rows i = p + 4 r (r < R) in registers. Per token (backend.h's recurrence):
 *   S *= exp(g); u = (v - S^T k~) beta; S += k~ u^T; o = S^T q~
 * with the sums over i split across the 4 parts of a column (adjacent lanes: two xor shuffles). */
template <int R>
__global__ void __launch_bounds__(GDR_COLS *GDR_PARTS) k_gated_delta_rule(gdr_args a) {
    extern __shared__ float sm[];
    float *sq = sm, *sk = sq + GDR_TOKENS * a.dk;            /* (tokens, dk) q and k of the staged tokens */
    float *sv = sk + GDR_TOKENS * a.dk;                      /* (tokens, 32) v of the block's columns */
    float *sg = sv + GDR_TOKENS * GDR_COLS, *sb = sg + GDR_TOKENS; /* (tokens) decay, strength */
    pdl_launch();
    const int s = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * GDR_COLS;
    const int tid = threadIdx.x, c = tid / GDR_PARTS, p = tid % GDR_PARTS, j = j0 + c;
    const int kh = h / a.group, dk = a.dk;
    /* Before pdl_wait (cuda_internal.h): the step's metadata (an upload) and the state slice, which only this
     * op writes, in an earlier step (a prefix-cache restore is a copy, which no kernel of the step starts
     * before); q, k, v, g and beta are the step's, read after it. */
    const int64_t t0 = a.qsl[s], t1 = a.qsl[s + 1];
    const int slot = a.slots[s];
    const bool run = slot < a.num_slots && t1 > t0; /* la_seq's test, reported after the wait */
    const bool col = j < a.dv;
    const int64_t base = ((int64_t)(slot < 0 ? 0 : slot) * a.Hv + h) * dk * a.dv; /* state[slot, h, :, :] */
    float S[R];
    gdr_state_load<R>(S, a.state, a.sdt, base, a.dv, j, p, dk, run && slot >= 0 && a.init[s] != 0 && col);
    pdl_wait();
    if (!run) {
        if (slot >= a.num_slots && threadIdx.x == 0) cu_report(a.err, CU_DEV_LA_SLOT, s, slot, a.num_slots);
        return;
    }
    if (slot < 0) { /* padding: outputs 0, no state */
        if (p == 0 && j < a.dv)
            for (int64_t t = t0; t < t1; t++) cu_st(a.out, a.odt, t * a.os + (int64_t)h * a.dv + j, 0.0f);
        return;
    }
    for (int64_t tb = t0; tb < t1; tb += GDR_TOKENS) {
        const int n = (int)min((int64_t)GDR_TOKENS, t1 - tb);
        __syncthreads(); /* the previous tokens' reads are done */
        if (a.qdt == a.kdt && a.qdt == a.vdt && a.bdt == a.qdt && a.gdt == DTYPE_F32) {
            /* q, k, v and beta of one dtype (the model's activations), g F32 (gdn_gating's): one loop, each
             * element's loads with the dtypes constants and indices clamped, so that a thread's q, k, v, g and
             * beta loads go out together (a dtype test per element, its conversion inside, chained them: 5 round
             * trips at decode, then 3 while g's and beta's dtypes were tested) */
            cu_with_dt(a.qdt, [&](auto d) {
                constexpr int AD = decltype(d)::value;
                const int nq = n * dk, nv = n * GDR_COLS, ne = nq > nv ? nq : nv;
                for (int e = tid; e < ne; e += blockDim.x) {
                    const int eq = min(e, nq - 1), ev = min(e, nv - 1), eg = min(e, n - 1);
                    const int64_t tq = tb + eq / dk, tv = tb + ev / GDR_COLS;
                    const int i = eq % dk, jj = j0 + ev % GDR_COLS;
                    const float qv = cu_ld(a.q, AD, tq * a.qs + (int64_t)kh * dk + i);
                    const float kv = cu_ld(a.k, AD, tq * a.ks + (int64_t)kh * dk + i);
                    const float vv = cu_ld(a.v, AD, tv * a.vs + (int64_t)h * a.dv + min(jj, a.dv - 1));
                    const float gv = cu_ld(a.g, DTYPE_F32, (tb + eg) * a.gs + h);
                    const float bv = cu_ld(a.beta, AD, (tb + eg) * a.bs + h);
                    if (e < nq) {
                        sq[e] = qv;
                        sk[e] = kv;
                    }
                    if (e < nv) sv[e] = jj < a.dv ? vv : 0.0f;
                    if (e < n) {
                        sg[e] = expf(gv);
                        sb[e] = bv;
                    }
                }
            });
        } else {
            for (int e = tid; e < n * dk; e += blockDim.x) {
                const int64_t t = tb + e / dk;
                const int i = e % dk;
                sq[e] = cu_ld(a.q, a.qdt, t * a.qs + (int64_t)kh * dk + i);
                sk[e] = cu_ld(a.k, a.kdt, t * a.ks + (int64_t)kh * dk + i);
            }
            for (int e = tid; e < n * GDR_COLS; e += blockDim.x) {
                const int64_t t = tb + e / GDR_COLS;
                const int jj = j0 + e % GDR_COLS;
                sv[e] = jj < a.dv ? cu_ld(a.v, a.vdt, t * a.vs + (int64_t)h * a.dv + jj) : 0.0f;
            }
            if (tid < n) {
                sg[tid] = expf(cu_ld(a.g, a.gdt, (tb + tid) * a.gs + h));
                sb[tid] = cu_ld(a.beta, a.bdt, (tb + tid) * a.bs + h);
            }
        }
        __syncthreads();
        for (int tt = 0; tt < n; tt++) {
            const float *qt = sq + tt * dk, *kt = sk + tt * dk;
            float kr[R], qr[R], kn = 0.0f, qn = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = p + GDR_PARTS * r;
                kr[r] = i < dk ? kt[i] : 0.0f;
                qr[r] = i < dk ? qt[i] : 0.0f;
                kn = fmaf(kr[r], kr[r], kn);
                qn = fmaf(qr[r], qr[r], qn);
            }
            float kinv = 1.0f, qinv = a.scale;
            if (a.l2norm) {
                kn += __shfl_xor_sync(0xffffffffu, kn, 1);
                kn += __shfl_xor_sync(0xffffffffu, kn, 2);
                qn += __shfl_xor_sync(0xffffffffu, qn, 1);
                qn += __shfl_xor_sync(0xffffffffu, qn, 2);
                kinv = rsqrtf(kn + LA_L2NORM_EPS);
                qinv = a.scale * rsqrtf(qn + LA_L2NORM_EPS);
            }
            const float decay = sg[tt];
            float kv = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                kr[r] *= kinv;
                S[r] *= decay;
                kv = fmaf(S[r], kr[r], kv);
            }
            kv += __shfl_xor_sync(0xffffffffu, kv, 1);
            kv += __shfl_xor_sync(0xffffffffu, kv, 2);
            const float u = (sv[tt * GDR_COLS + c] - kv) * sb[tt];
            float o = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                S[r] = fmaf(kr[r], u, S[r]);
                o = fmaf(S[r], qr[r], o);
            }
            o += __shfl_xor_sync(0xffffffffu, o, 1);
            o += __shfl_xor_sync(0xffffffffu, o, 2);
            if (p == 0 && col) cu_st(a.out, a.odt, (tb + tt) * a.os + (int64_t)h * a.dv + j, o * qinv);
        }
    }
    if (col) gdr_state_store<R>(S, a.state, a.sdt, base, a.dv, j, p, dk);
}

/* ---- gated delta rule, chunked (prefill) ----
 * fla's chunk_gated_delta_rule (Yang et al., "Gated Delta Networks", the WY representation), per sequence
 * and v-head over chunks of GDR_L tokens starting at the sequence's first token. With G_t the cumulative
 * decay inside the chunk (sum of g up to t), k~ / q~ the normalised (scaled) rows and S_0 the state before
 * the chunk, the recurrence of backend.h unrolls to
 *   A[t][s] = beta_t exp(G_t - G_s) k~_t . k~_s  (s < t),   T = (I + A)^-1 (unit lower triangular)
 *   U' = T (beta v),   W = T (beta exp(G) k~),   u = U' - W S_0                     (the chunk's deltas)
 *   o_t = exp(G_t) q~_t S_0 + sum_{s <= t} exp(G_t - G_s) (q~_t . k~_s) u_s
 *   S_L = exp(G_last) S_0 + sum_s exp(G_last - G_s) k~_s u_s^T
 * k_gdr_prep computes W, U', the masked exp(G_t - G_s) q~_t . k~_s (P) and G of every chunk in parallel
 * (a block per chunk and head) into the workspace; k_gdr_scan then walks each sequence's chunks in order,
 * a block per (sequence, head, 32 state columns) holding S_0's columns in shared memory. All in f32. */
#define GDR_L 64           /* tokens per chunk */
#define GDR_CHUNK_MAX_D 128 /* d_k and d_v the chunked kernels take (shared memory) */
#define GDR_ALIGN 256       /* the workspace arrays start at multiples of this */

struct gdr_ws {
    float *W, *U, *P, *G;  /* (T, H_v, d_k), (T, H_v, d_v), (T, H_v, GDR_L), (T, H_v) */
    float *Qe, *Kd;        /* (T, H_v, d_k) each: exp(G_t) q~_t, exp(G_last - G_t) k~_t */
};

__device__ __forceinline__ int64_t gdr_chunk(const int32_t *qsl, int s, int ci, int64_t *tb, int *n) {
    const int64_t t0 = qsl[s], t1 = qsl[s + 1];
    *tb = t0 + (int64_t)ci * GDR_L;
    *n = (int)min((int64_t)GDR_L, t1 - *tb);
    return t1;
}

/* Rows [0, n) of a (n, d) shared matrix (row stride ld) scaled to unit L2 norm (x / sqrt(sum x^2 + eps)) times mul,
 * a warp per row. */
__device__ __forceinline__ void gdr_l2rows(float *m, int n, int d, int ld, float mul, bool l2) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int r = warp; r < n; r += warps) {
        float ss = 0.0f;
        for (int i = lane; i < d; i += 32) ss = fmaf(m[r * ld + i], m[r * ld + i], ss);
        const float f = (l2 ? rsqrtf(cu_warp_sum(ss) + LA_L2NORM_EPS) : 1.0f) * mul;
        for (int i = lane; i < d; i += 32) m[r * ld + i] *= f;
    }
}

/* tf32 tensor-core tiles (wmma m16n16k8): a and b widened to tf32 after the load, f32 accumulators. */
using namespace nvcuda;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> gdr_fa;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> gdr_fa_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> gdr_fb;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> gdr_fb_t;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> gdr_fc;

template <typename F> __device__ __forceinline__ void gdr_tf32(F &f) {
#pragma unroll
    for (int e = 0; e < f.num_elements; e++) f.x[e] = wmma::__float_to_tf32(f.x[e]);
}

/* acc += A (16 x K, row-major at a, lda) * B (K x 16 at b, ldb; row-major, or col-major when bt: b points at
 * B^T's (16 x K) first row) */
template <bool BT, int K>
__device__ __forceinline__ void gdr_mma(gdr_fc &acc, const float *a, int lda, const float *b, int ldb) {
#pragma unroll
    for (int k = 0; k < K; k += 8) {
        gdr_fa fa;
        wmma::load_matrix_sync(fa, a + k, lda);
        gdr_tf32(fa);
        if (BT) {
            gdr_fb_t fb;
            wmma::load_matrix_sync(fb, b + k, ldb);
            gdr_tf32(fb);
            wmma::mma_sync(acc, fa, fb, acc);
        } else {
            gdr_fb fb;
            wmma::load_matrix_sync(fb, b + (size_t)k * ldb, ldb);
            gdr_tf32(fb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
    }
}

/* Shared-memory row strides: 4 floats of padding move successive rows 4 banks apart (the wmma tiles'
 * rows would all start in one bank at strides of 32, 64 or 128 floats) and keep rows 16-byte aligned. */
#define GDR_PAD(d) ((d) + 4)
#define GDR_LDL GDR_PAD(GDR_L)

/* dst[0..7] = 8 consecutive elements of p from index i (one 16-byte load for aligned BF16) */
__device__ __forceinline__ void gdr_ld8(const void *p, int dt, int64_t i, float *dst) {
    if (dt == DTYPE_BF16 && (((uintptr_t)p + (uintptr_t)i * 2) & 15) == 0) {
        const uint4 u = __ldg((const uint4 *)((const __nv_bfloat16 *)p + i));
        const __nv_bfloat162 *b = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 f = __bfloat1622float2(b[e]);
            dst[2 * e] = f.x;
            dst[2 * e + 1] = f.y;
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) dst[e] = cu_ld(p, dt, i + e);
}

/* dst (L, d) at row stride ld <- rows tb + t (t < n; zero past n) of an activation (x, dt, row stride xs),
 * columns c0 .. c0 + d (d % 8 == 0) */
__device__ __forceinline__ void gdr_stage(float *dst, int ld, const void *x, int dt, int64_t xs, int64_t tb, int n,
                                          int64_t c0, int d) {
    const int q = d / 8;
    for (int e = threadIdx.x; e < GDR_L * q; e += blockDim.x) {
        const int t = e / q, c = (e % q) * 8;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (t < n) gdr_ld8(x, dt, (tb + t) * xs + c0 + c, v);
        *(float4 *)(dst + t * ld + c) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(dst + t * ld + c + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
}

/* Block (chunk ci, v-head h, sequence s), 256 threads (8 warps). Shared: K~ (later the output stage),
 * Q~ (later beta exp(G) k~), beta v (L, d) each; K~K~^T -> A, Q~K~^T -> T (L, L); G, beta. Rows at or past
 * the chunk's n tokens are zero. Writes W, U', P, G and the scan's exp(G) q~ and exp(G_last - G) k~. */
template <int DK>
__global__ void __launch_bounds__(256) k_gdr_prep(gdr_args a, gdr_ws w) {
    extern __shared__ __align__(128) float sm[];
    constexpr int dk = DK;
    const int dv = a.dv, ldk = GDR_PAD(dk), ldv = GDR_PAD(dv), ldm = GDR_PAD(max(dk, dv));
    float *Ks = sm, *Qs = Ks + GDR_L * ldm, *Vb = Qs + GDR_L * ldk;     /* (L, dk) (L, dk) (L, dv) */
    float *KK = Vb + GDR_L * ldv, *QT = KK + GDR_L * GDR_LDL;           /* (L, L) x 2 */
    float *Gs = QT + GDR_L * GDR_LDL, *Bs = Gs + GDR_L;                 /* (L) */
    float *Os = Ks;                                                     /* (L, max(dk, dv)), once K~ is done */
    pdl_launch();
    pdl_wait();
    const int s = blockIdx.z, h = blockIdx.y, ci = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const int warp = tid >> 5, kh = h / a.group, Hv = a.Hv;
    int64_t tb;
    int n;
    gdr_chunk(a.qsl, s, ci, &tb, &n);
    const int slot = a.slots[s];
    if (n <= 0 || slot < 0 || slot >= a.num_slots) return; /* padding / no tokens: k_gdr_scan handles them */
    gdr_stage(Ks, ldk, a.k, a.kdt, a.ks, tb, n, (int64_t)kh * dk, dk);
    gdr_stage(Qs, ldk, a.q, a.qdt, a.qs, tb, n, (int64_t)kh * dk, dk);
    gdr_stage(Vb, ldv, a.v, a.vdt, a.vs, tb, n, (int64_t)h * dv, dv);
    if (tid < GDR_L) {
        Gs[tid] = tid < n ? cu_ld(a.g, a.gdt, (tb + tid) * a.gs + h) : 0.0f;
        Bs[tid] = tid < n ? cu_ld(a.beta, a.bdt, (tb + tid) * a.bs + h) : 0.0f;
    }
    __syncthreads();
    gdr_l2rows(Ks, n, dk, ldk, 1.0f, a.l2norm);
    gdr_l2rows(Qs, n, dk, ldk, a.scale, a.l2norm);
    if (warp == 0) { /* inclusive prefix sum of g over the chunk's 64 entries: two per lane */
        const int lane = tid & 31;
        float x0 = Gs[2 * lane], x1 = x0 + Gs[2 * lane + 1], sum = x1;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, sum, o);
            if (lane >= o) sum += y;
        }
        const float before = sum - x1;
        Gs[2 * lane] = before + x0;
        Gs[2 * lane + 1] = before + x1;
    }
    __syncthreads();
    /* the scan's operands: exp(G_t) q~_t and exp(G_last - G_t) k~_t, a float4 at a time (d_k % 16 == 0) */
    for (int e = tid; e < n * (dk / 4); e += nt) {
        const int t = e / (dk / 4), i = (e % (dk / 4)) * 4;
        const float eq = expf(Gs[t]), ek = expf(Gs[n - 1] - Gs[t]);
        const float4 q4 = *(const float4 *)(Qs + t * ldk + i), k4 = *(const float4 *)(Ks + t * ldk + i);
        const int64_t o = ((tb + t) * Hv + h) * dk + i;
        *(float4 *)(w.Qe + o) = make_float4(q4.x * eq, q4.y * eq, q4.z * eq, q4.w * eq);
        *(float4 *)(w.Kd + o) = make_float4(k4.x * ek, k4.y * ek, k4.z * ek, k4.w * ek);
    }
    /* K~K~^T and Q~K~^T: 16 tiles each, 2 + 2 per warp */
    for (int tile = warp; tile < 16; tile += 8) {
        const int r0 = (tile / 4) * 16, c0 = (tile % 4) * 16;
        gdr_fc kk, qk;
        wmma::fill_fragment(kk, 0.0f);
        wmma::fill_fragment(qk, 0.0f);
        gdr_mma<true, DK>(kk, Ks + r0 * ldk, ldk, Ks + c0 * ldk, ldk);
        gdr_mma<true, DK>(qk, Qs + r0 * ldk, ldk, Ks + c0 * ldk, ldk);
        wmma::store_matrix_sync(KK + r0 * GDR_LDL + c0, kk, GDR_LDL, wmma::mem_row_major);
        wmma::store_matrix_sync(QT + r0 * GDR_LDL + c0, qk, GDR_LDL, wmma::mem_row_major);
    }
    __syncthreads();
    /* A (strictly lower) in KK, P to the workspace, then T = I in QT (each element read, then written, by
     * one thread), beta v, beta exp(G) k~ in Qs */
    for (int e = tid; e < GDR_L * GDR_L; e += nt) {
        const int t = e / GDR_L, c = e % GDR_L, o = t * GDR_LDL + c;
        const float dec = c <= t && t < n ? expf(Gs[t] - Gs[c]) : 0.0f;
        KK[o] = c < t ? Bs[t] * dec * KK[o] : 0.0f;
        if (t < n) w.P[((tb + t) * Hv + h) * GDR_L + c] = dec * QT[o];
        QT[o] = t == c && t < n ? 1.0f : 0.0f;
    }
    for (int e = tid; e < GDR_L * dv; e += nt) Vb[(e / dv) * ldv + e % dv] *= Bs[e / dv];
    for (int e = tid; e < GDR_L * dk; e += nt) {
        const int t = e / dk, o = t * ldk + e % dk;
        Qs[o] = Ks[o] * Bs[t] * expf(Gs[t]);
    }
    __syncthreads();
    /* T = (I + A)^-1 (A strictly lower, in KK): the four 16 x 16 diagonal blocks by forward substitution, a
     * warp each (lane = column): T[r][c] = -(A[r][c] + sum_{c < m < r} A[r][m] T[m][c]); then the blocks
     * below the diagonal, one block diagonal at a time: T_ij = -T_ii sum_{j <= k < i} A_ik T_kj, through a
     * (3 x 16 x 16) stage where K~ was. Rows past n stay zero (A's rows and T's diagonal are). */
    float *Tm = QT, *Xb = Ks;
    if (warp < 4) {
        const int b0 = warp * 16, lane = tid & 31;
        for (int r = 1; r < 16; r++) {
            if (lane < r) {
                const float *ar = KK + (b0 + r) * GDR_LDL + b0;
                float acc = ar[lane];
                for (int m = lane + 1; m < r; m++) acc = fmaf(ar[m], Tm[(b0 + m) * GDR_LDL + b0 + lane], acc);
                Tm[(b0 + r) * GDR_LDL + b0 + lane] = -acc;
            }
            __syncwarp();
        }
    }
    __syncthreads();
    for (int d = 1; d < 4; d++) {
        for (int e = tid; e < (4 - d) * 256; e += nt) {
            const int bi = d + e / 256, bj = bi - d, r = (e % 256) / 16, c = e % 16;
            const float *ar = KK + (bi * 16 + r) * GDR_LDL;
            float acc = 0.0f;
            for (int k = bj * 16; k < bi * 16; k++) acc = fmaf(ar[k], Tm[k * GDR_LDL + bj * 16 + c], acc);
            Xb[e] = acc;
        }
        __syncthreads();
        for (int e = tid; e < (4 - d) * 256; e += nt) {
            const int bi = d + e / 256, bj = bi - d, r = (e % 256) / 16, c = e % 16;
            const float *tr = Tm + (bi * 16 + r) * GDR_LDL + bi * 16;
            float acc = 0.0f;
            for (int m = 0; m <= r; m++) acc = fmaf(tr[m], Xb[(e / 256) * 256 + m * 16 + c], acc);
            Tm[(bi * 16 + r) * GDR_LDL + bj * 16 + c] = -acc;
        }
        __syncthreads();
    }
    /* U' = T (beta v), then W = T (beta exp(G) k~): (L, L) x (L, d) tiles into the stage (where K~ was),
     * rows < n out */
    for (int pass = 0; pass < 2; pass++) {
        const int d = pass ? dk : dv, ld = pass ? ldk : ldv;
        const float *B = pass ? Qs : Vb;
        for (int tile = warp; tile < 4 * (d / 16); tile += 8) {
            const int r0 = (tile % 4) * 16, c0 = (tile / 4) * 16;
            gdr_fc acc;
            wmma::fill_fragment(acc, 0.0f);
            gdr_mma<false, GDR_L>(acc, Tm + r0 * GDR_LDL, GDR_LDL, B + c0, ld);
            wmma::store_matrix_sync(Os + r0 * ld + c0, acc, ld, wmma::mem_row_major);
        }
        __syncthreads();
        float *dst = pass ? w.W : w.U;
        for (int e = tid; e < n * (d / 4); e += nt) {
            const int t = e / (d / 4), c = (e % (d / 4)) * 4;
            *(float4 *)(dst + ((tb + t) * Hv + h) * d + c) = *(const float4 *)(Os + t * ld + c);
        }
        __syncthreads();
    }
    if (tid < n) w.G[(tb + tid) * Hv + h] = Gs[tid];
}

/* Block (32 state columns, v-head h, sequence s), 256 threads (8 warps). Shared: S_0's columns (dk, 32);
 * U' -> u (L, 32); P (L, L); a stage (L, 32). W, exp(G) q~ and exp(G_last - G) k~ are read by the tensor-core
 * tiles straight from the workspace (their rows past the chunk's n tokens are another chunk's or the
 * zeroed padding: they only meet u's rows past n, which are zero, or outputs that are not stored). */
#define GDR_SCAN_THREADS 256
#define GDR_LDC GDR_PAD(GDR_COLS)

template <int DK>
__global__ void __launch_bounds__(GDR_SCAN_THREADS) k_gdr_scan(gdr_args a, gdr_ws w) {
    extern __shared__ __align__(128) float sm[];
    constexpr int dk = DK;
    const int dv = a.dv;
    float *Ss = sm, *Us = Ss + dk * GDR_LDC, *Ps = Us + GDR_L * GDR_LDC, *Xs = Ps + GDR_L * GDR_LDL;
    pdl_launch();
    pdl_wait();
    const int s = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * GDR_COLS, tid = threadIdx.x, nt = blockDim.x;
    const int warp = tid >> 5, Hv = a.Hv;
    const int64_t ldw = (int64_t)Hv * dk;
    int64_t t0, t1;
    int slot;
    if (!la_seq(a.qsl, a.slots, s, a.num_slots, a.err, &t0, &t1, &slot)) return;
    if (slot < 0) {
        for (int64_t e = tid; e < (t1 - t0) * GDR_COLS; e += nt)
            if (j0 + e % GDR_COLS < dv) cu_st(a.out, a.odt, (t0 + e / GDR_COLS) * a.os + (int64_t)h * dv + j0 + e % GDR_COLS, 0.0f);
        return;
    }
    const int64_t base = ((int64_t)slot * Hv + h) * dk * dv;
    const bool from_state = a.init[s] != 0;
    for (int e = tid; e < dk * GDR_COLS; e += nt) {
        const int i = e / GDR_COLS, c = e % GDR_COLS;
        Ss[i * GDR_LDC + c] = from_state && j0 + c < dv ? cu_ld(a.state, a.sdt, base + (int64_t)i * dv + j0 + c) : 0.0f;
    }
    /* warp w: row tile r0 = 16 (w / 2), column tile c0 = 16 (w % 2) of the (L, 32) products */
    const int r0 = (warp >> 1) * 16, c0 = (warp & 1) * 16;
    const int nchunks = (int)((t1 - t0 + GDR_L - 1) / GDR_L);
    for (int ci = 0; ci < nchunks; ci++) {
        int64_t tb;
        int n;
        gdr_chunk(a.qsl, s, ci, &tb, &n);
        /* U' (L, 32) and P (L, L), rows past n zero */
        for (int e = tid; e < GDR_L * (GDR_COLS / 4); e += nt) {
            const int t = e / (GDR_COLS / 4), c = (e % (GDR_COLS / 4)) * 4;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (t < n && j0 + c < dv) v = __ldg((const float4 *)(w.U + ((tb + t) * Hv + h) * dv + j0 + c));
            *(float4 *)(Us + t * GDR_LDC + c) = v;
        }
        for (int e = tid; e < GDR_L * (GDR_L / 4); e += nt) {
            const int t = e / (GDR_L / 4), c = (e % (GDR_L / 4)) * 4;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (t < n) v = __ldg((const float4 *)(w.P + ((tb + t) * Hv + h) * GDR_L + c));
            *(float4 *)(Ps + t * GDR_LDL + c) = v;
        }
        const float el = expf(__ldg(w.G + (tb + n - 1) * Hv + h));
        const float *Wg = w.W + (tb * Hv + h) * (int64_t)dk, *Qg = w.Qe + (tb * Hv + h) * (int64_t)dk;
        const float *Kg = w.Kd + (tb * Hv + h) * (int64_t)dk;
        /* W S_0 (to the stage) and exp(G) q~ S_0 (kept), each warp its tile */
        gdr_fc xw, xo;
        wmma::fill_fragment(xw, 0.0f);
        wmma::fill_fragment(xo, 0.0f);
#pragma unroll
        for (int k = 0; k < dk; k += 8) {
            gdr_fb fb;
            wmma::load_matrix_sync(fb, Ss + (size_t)k * GDR_LDC + c0, GDR_LDC);
            gdr_tf32(fb);
            gdr_fa fw, fq;
            wmma::load_matrix_sync(fw, Wg + r0 * ldw + k, (unsigned)ldw);
            wmma::load_matrix_sync(fq, Qg + r0 * ldw + k, (unsigned)ldw);
            gdr_tf32(fw);
            gdr_tf32(fq);
            wmma::mma_sync(xw, fw, fb, xw);
            wmma::mma_sync(xo, fq, fb, xo);
        }
        wmma::store_matrix_sync(Xs + r0 * GDR_LDC + c0, xw, GDR_LDC, wmma::mem_row_major);
        __syncthreads(); /* U', P staged; W S_0 in the stage; S_0 read by every warp */
        for (int e = tid; e < GDR_L * GDR_COLS; e += nt) { /* u = U' - W S_0, rows past n zero */
            const int t = e / GDR_COLS, o = t * GDR_LDC + e % GDR_COLS;
            Us[o] = t < n ? Us[o] - Xs[o] : 0.0f;
        }
        __syncthreads();
        /* o = exp(G) q~ S_0 + P u into the stage */
        gdr_mma<false, GDR_L>(xo, Ps + r0 * GDR_LDL, GDR_LDL, Us + c0, GDR_LDC);
        wmma::store_matrix_sync(Xs + r0 * GDR_LDC + c0, xo, GDR_LDC, wmma::mem_row_major);
        /* S = exp(G_last) S_0 + (exp(G_last - G) k~)^T u: (dk, L) x (L, 32), each warp its own tiles of S */
        for (int tile = warp; tile < (dk / 16) * 2; tile += 8) {
            const int sr = (tile / 2) * 16, sc = (tile % 2) * 16;
            gdr_fc acc;
            wmma::load_matrix_sync(acc, Ss + sr * GDR_LDC + sc, GDR_LDC, wmma::mem_row_major);
#pragma unroll
            for (int e = 0; e < acc.num_elements; e++) acc.x[e] *= el;
#pragma unroll
            for (int k = 0; k < GDR_L; k += 8) {
                gdr_fa_t fa; /* Kd^T's rows sr.., columns k..: Kd (L, dk) read column-major */
                wmma::load_matrix_sync(fa, Kg + (int64_t)k * ldw + sr, (unsigned)ldw);
                gdr_tf32(fa);
                gdr_fb fb;
                wmma::load_matrix_sync(fb, Us + (size_t)k * GDR_LDC + sc, GDR_LDC);
                gdr_tf32(fb);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ss + sr * GDR_LDC + sc, acc, GDR_LDC, wmma::mem_row_major);
        }
        __syncthreads(); /* the stage holds o; S is the next chunk's S_0 */
        for (int e = tid; e < n * GDR_COLS; e += nt) {
            const int t = e / GDR_COLS, c = e % GDR_COLS;
            if (j0 + c < dv) cu_st(a.out, a.odt, (tb + t) * a.os + (int64_t)h * dv + j0 + c, Xs[t * GDR_LDC + c]);
        }
        __syncthreads(); /* the stage and u are free again */
    }
    for (int e = tid; e < dk * GDR_COLS; e += nt) {
        const int i = e / GDR_COLS, c = e % GDR_COLS;
        if (j0 + c < dv) cu_st(a.state, a.sdt, base + (int64_t)i * dv + j0 + c, Ss[i * GDR_LDC + c]);
    }
}

/* W, U', P, G, exp(G) q~, exp(G) k~ for T tokens, each padded by a chunk of rows (the scan's tiles read up
 * to 63 rows past a sequence's last token) */
static size_t gdr_ws_bytes(int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    return (size_t)(T + GDR_L) * (size_t)Hv * (size_t)(3 * dk + dv + GDR_L + 1) * sizeof(float) + 6 * GDR_ALIGN;
}

static size_t gdr_prep_smem(int dk, int dv) {
    return (size_t)(GDR_L * (GDR_PAD(dk > dv ? dk : dv) + GDR_PAD(dk) + GDR_PAD(dv)) + 2 * GDR_L * GDR_LDL + 2 * GDR_L) *
           sizeof(float);
}

static size_t gdr_scan_smem(int dk) {
    return (size_t)(dk * GDR_LDC + 2 * GDR_L * GDR_LDC + GDR_L * GDR_LDL) * sizeof(float);
}

/* Whether the chunked kernels run a call: VLLM_CUDA_GDN=recurrent|chunked forces (comparisons, tests), else
 * batches with a sequence longer than one chunk, when d_k and d_v fit (multiples of 16, at most 128). */
static bool gdr_use_chunked(const linear_attn_meta *m, int64_t dk, int64_t dv) {
    if (dk > GDR_CHUNK_MAX_D || dv > GDR_CHUNK_MAX_D || dk % 16 || dv % 16) return false;
    const char *mode = getenv("VLLM_CUDA_GDN");
    if (mode && !strcmp(mode, "recurrent")) return false;
    if (mode && !strcmp(mode, "chunked")) return true;
    /* auto: the chunked form once a sequence spans more than one chunk */
    return m->max_query_len > GDR_L;
}

extern "C" vllm_status cu_gdn_reserve(backend *be, const gdn_params *p, int64_t max_tokens) {
    cu_state *cu = cu_of(be);
    if (!p || p->head_k_dim > GDR_CHUNK_MAX_D || p->head_v_dim > GDR_CHUNK_MAX_D || max_tokens <= 0) return VLLM_OK;
    return cu_buf_reserve(cu, &cu->gdn_ws, gdr_ws_bytes(max_tokens, p->num_v_heads, p->head_k_dim, p->head_v_dim),
                          "gated_delta_rule workspace");
}

template <int DK>
static void gdr_launch(cu_state *cu, const gdr_args &a, const gdr_ws &w, const linear_attn_meta *m) {
    const char *op = "gated_delta_rule";
    static bool attr_set = false; /* per instantiation */
    if (!attr_set) {
        cudaFuncSetAttribute(k_gdr_prep<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)gdr_prep_smem(DK, GDR_CHUNK_MAX_D));
        cudaFuncSetAttribute(k_gdr_scan<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gdr_scan_smem(DK));
        attr_set = true;
    }
    const unsigned chunks = (unsigned)((m->max_query_len + GDR_L - 1) / GDR_L);
    if (!cu_launch(cu, op, true, k_gdr_prep<DK>, dim3(chunks, (unsigned)a.Hv, (unsigned)m->num_seqs), dim3(256),
                   gdr_prep_smem(DK, a.dv), a, w))
        return;
    cu_launch(cu, op, true, k_gdr_scan<DK>, dim3((unsigned)((a.dv + GDR_COLS - 1) / GDR_COLS), (unsigned)a.Hv,
                                                  (unsigned)m->num_seqs), dim3(GDR_SCAN_THREADS), gdr_scan_smem(DK), a, w);
}

static void gdr_chunked(cu_state *cu, const gdr_args &a, const linear_attn_meta *m, int64_t T) {
    const char *op = "gated_delta_rule";
    if (cu_buf_reserve(cu, &cu->gdn_ws, gdr_ws_bytes(T, a.Hv, a.dk, a.dv), "gated_delta_rule workspace") != VLLM_OK) {
        if (cu->err == VLLM_OK) cu_fail(cu, "%s: %s", op, vllm_last_error());
        return;
    }
    char *p = (char *)cu->gdn_ws.p;
    gdr_ws w;
    const size_t nW = (size_t)T * a.Hv * a.dk, nU = (size_t)T * a.Hv * a.dv, nP = (size_t)T * a.Hv * GDR_L;
    w.W = (float *)p;
    w.U = (float *)(p + ((nW * 4 + GDR_ALIGN - 1) / GDR_ALIGN) * GDR_ALIGN);
    w.P = (float *)((char *)w.U + ((nU * 4 + GDR_ALIGN - 1) / GDR_ALIGN) * GDR_ALIGN);
    w.G = (float *)((char *)w.P + ((nP * 4 + GDR_ALIGN - 1) / GDR_ALIGN) * GDR_ALIGN);
    w.Qe = (float *)((char *)w.G + (((size_t)T * a.Hv * 4 + GDR_ALIGN - 1) / GDR_ALIGN) * GDR_ALIGN);
    w.Kd = (float *)((char *)w.Qe + ((nW * 4 + GDR_ALIGN - 1) / GDR_ALIGN) * GDR_ALIGN);
    switch (a.dk) {
    case 16: gdr_launch<16>(cu, a, w, m); break;
    case 32: gdr_launch<32>(cu, a, w, m); break;
    case 48: gdr_launch<48>(cu, a, w, m); break;
    case 64: gdr_launch<64>(cu, a, w, m); break;
    case 80: gdr_launch<80>(cu, a, w, m); break;
    case 96: gdr_launch<96>(cu, a, w, m); break;
    case 112: gdr_launch<112>(cu, a, w, m); break;
    default: gdr_launch<128>(cu, a, w, m); break; /* gdr_use_chunked: d_k a multiple of 16 up to 128 */
    }
}

extern "C" void cu_gated_delta_rule(backend *be, const tensor *q, const tensor *k, const tensor *v, const tensor *g,
                                    const tensor *beta, tensor *state, const linear_attn_meta *m,
                                    const gdn_params *p, tensor *out) {
    cu_state *cu = cu_of(be);
    const char *op = "gated_delta_rule";
    if (!p || p->num_k_heads <= 0 || p->num_v_heads <= 0 || p->num_v_heads % p->num_k_heads || p->head_k_dim <= 0 ||
        p->head_k_dim > GDR_MAX_DK || p->head_v_dim <= 0 || !(p->scale >= 0.0f) || isinf(p->scale)) {
        cu_fail(cu, "%s: bad gdn_params: H_v must be a positive multiple of H_k, d_k at most %d", op, GDR_MAX_DK);
        return;
    }
    const int64_t Hk = p->num_k_heads, Hv = p->num_v_heads, dk = p->head_k_dim, dv = p->head_v_dim;
    if (!cu_check_mat(cu, op, "q", q, CU_ACT, -1, Hk * dk)) return;
    const int64_t T = cu_rows(q);
    const int64_t pool[3] = {Hv, dk, dv};
    if (!cu_check_mat(cu, op, "k", k, CU_ACT, T, Hk * dk) || !cu_check_mat(cu, op, "v", v, CU_ACT, T, Hv * dv) ||
        !cu_check_mat(cu, op, "g", g, CU_FLOAT, T, Hv) || !cu_check_mat(cu, op, "beta", beta, CU_FLOAT, T, Hv) ||
        !la_check_pool(cu, op, "state", state, 4, pool) || !cu_check_mat(cu, op, "out", out, CU_ACT, T, Hv * dv) ||
        !la_check_meta(cu, op, m, T))
        return;
    if (tensor_row_stride(out) != Hv * dv) {
        cu_fail(cu, "%s: out must be contiguous", op);
        return;
    }
    if (m->num_seqs == 0) return;
    gdr_args a = {q->data, k->data, v->data, g->data, beta->data,
                  (int)q->dtype, (int)k->dtype, (int)v->dtype, (int)g->dtype, (int)beta->dtype,
                  tensor_row_stride(q), tensor_row_stride(k), tensor_row_stride(v), tensor_row_stride(g),
                  tensor_row_stride(beta), state->data, (int)state->dtype, cu_rows(state),
                  (const int32_t *)m->query_start_loc.data, (const int32_t *)m->state_slots.data,
                  (const int32_t *)m->has_initial_state.data, (int)Hv, (int)(Hv / Hk), (int)dk, (int)dv,
                  p->scale > 0.0f ? p->scale : 1.0f / sqrtf((float)dk), (int)p->qk_l2norm, out->data,
                  (int)out->dtype, tensor_row_stride(out), cu->derr_dev};
    if (gdr_use_chunked(m, dk, dv)) {
        gdr_chunked(cu, a, m, T);
        return;
    }
    const dim3 grid((unsigned)((dv + GDR_COLS - 1) / GDR_COLS), (unsigned)Hv, (unsigned)m->num_seqs);
    const dim3 block(GDR_COLS * GDR_PARTS);
    const size_t smem = (size_t)(2 * GDR_TOKENS * dk + GDR_TOKENS * GDR_COLS + 2 * GDR_TOKENS) * sizeof(float);
    const int rows = (int)((dk + GDR_PARTS - 1) / GDR_PARTS);
    if (rows <= 4) cu_launch(cu, op, true, k_gated_delta_rule<4>, grid, block, smem, a);
    else if (rows <= 8) cu_launch(cu, op, true, k_gated_delta_rule<8>, grid, block, smem, a);
    else if (rows <= 16) cu_launch(cu, op, true, k_gated_delta_rule<16>, grid, block, smem, a);
    else if (rows <= 32) cu_launch(cu, op, true, k_gated_delta_rule<32>, grid, block, smem, a);
    else cu_launch(cu, op, true, k_gated_delta_rule<64>, grid, block, smem, a);
}

/* ---- gated RMSNorm ---- */

/* One warp per (row t, group): out = rms_norm(x) * w * silu(z), with transformers' roundings to the
 * activation dtype (backend.h): the normalised x, its product with a BF16 weight, the result. Groups of at most
 * 32 RNG_MAX elements (Qwen3.5's 128) and z of x's dtype keep a lane's x and z in registers, loaded together (out may be x: a loop
 * of loads and stores would chain them), and w's before pdl_wait (a weight). */
#define RNG_MAX 8
__global__ void k_rms_norm_gated(const void *x, int xdt, int64_t xs, const void *z, int zdt, int64_t zs,
                                 const void *w, int wdt, int64_t G, int64_t groups, int64_t T, float eps, void *out,
                                 int odt, int64_t os) {
    pdl_launch();
    const int lane = threadIdx.x & 31;
    const int64_t item = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const bool regs = G <= 32 * RNG_MAX && zdt == xdt;
    float wv[RNG_MAX];
    cu_ld_batch<RNG_MAX>(wv, regs ? w : nullptr, wdt, lane, 32, regs ? (int)G : 1);
    pdl_wait();
    if (item >= T * groups) return;
    const int64_t t = item / groups, g0 = (item % groups) * G;
    const bool round = xdt == DTYPE_BF16, round_w = round && wdt == DTYPE_BF16;
    if (regs) {
        cu_with_dt(xdt, [&](auto xd) { /* (z has x's dtype) */
            float xv[RNG_MAX], zv[RNG_MAX];
#pragma unroll
            for (int u = 0; u < RNG_MAX; u++) { /* (past G: the group's last element, not used) */
                const int64_t i = min(lane + 32 * u, (int)G - 1);
                xv[u] = cu_ld(x, decltype(xd)::value, t * xs + g0 + i);
                zv[u] = cu_ld(z, decltype(xd)::value, t * zs + g0 + i);
            }
            float ss = 0.0f;
#pragma unroll
            for (int u = 0; u < RNG_MAX; u++)
                if (lane + 32 * u < G) ss = fmaf(xv[u], xv[u], ss);
            const float rstd = rsqrtf(cu_warp_sum(ss) / (float)G + eps);
#pragma unroll
            for (int u = 0; u < RNG_MAX; u++) {
                if (lane + 32 * u >= G) continue;
                float y = xv[u] * rstd;
                if (round) y = __bfloat162float(__float2bfloat16(y));
                y *= wv[u];
                if (round_w) y = __bfloat162float(__float2bfloat16(y));
                cu_st(out, odt, t * os + g0 + lane + 32 * u, y * la_silu(zv[u]));
            }
        });
        return;
    }
    float ss = 0.0f;
    for (int64_t i = lane; i < G; i += 32) {
        const float v = cu_ld(x, xdt, t * xs + g0 + i);
        ss = fmaf(v, v, ss);
    }
    const float rstd = rsqrtf(cu_warp_sum(ss) / (float)G + eps);
    for (int64_t i = lane; i < G; i += 32) {
        float y = cu_ld(x, xdt, t * xs + g0 + i) * rstd;
        if (round) y = __bfloat162float(__float2bfloat16(y));
        y *= cu_ld(w, wdt, i);
        if (round_w) y = __bfloat162float(__float2bfloat16(y));
        cu_st(out, odt, t * os + g0 + i, y * la_silu(cu_ld(z, zdt, t * zs + g0 + i)));
    }
}

// x, z (T, D) act, w (G), D % G == 0 -> out (T, D) act; out may be x
extern "C" void cu_rms_norm_gated(backend *be, const tensor *x, const tensor *z, const tensor *w, float eps,
                                  tensor *out) {
    cu_state *cu = cu_of(be);
    const char *op = "rms_norm_gated";
    if (!cu_check_mat(cu, op, "x", x, CU_ACT, -1, -1) || !cu_check_vec(cu, op, "w", w, CU_FLOAT, -1)) return;
    const int64_t T = cu_rows(x), D = tensor_row_len(x), G = tensor_numel(w);
    if (G <= 0 || D % G != 0) {
        cu_fail(cu, "%s: row length %lld is not a multiple of the weight length %lld", op, (long long)D, (long long)G);
        return;
    }
    if (!cu_check_mat(cu, op, "z", z, CU_ACT, T, D) || !cu_check_mat(cu, op, "out", out, CU_ACT, T, D)) return;
    if (T == 0 || D == 0) return;
    const int64_t warps = T * (D / G);
    cu_launch(cu, op, true, k_rms_norm_gated, dim3((unsigned)((warps + 7) / 8)), dim3(256), 0, x->data,
              (int)x->dtype, tensor_row_stride(x), z->data, (int)z->dtype, tensor_row_stride(z), w->data,
              (int)w->dtype, G, D / G, T, eps, out->data, (int)out->dtype, tensor_row_stride(out));
}

/* ---- gating, output gate ---- */

__device__ __forceinline__ float la_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void k_gdn_gating(const void *a, int adt, int64_t as, const void *b, int bdt, int64_t bs,
                             const void *A_log, int ldt, const void *dt_bias, int ddt, int64_t T, int64_t H, float *g,
                             void *beta, int betadt) {
    pdl_launch();
    /* the first element's head constants before pdl_wait (weights); a and b after */
    const int64_t e0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float A0 = 0.0f, d0 = 0.0f;
    if (e0 < T * H) {
        A0 = cu_ld(A_log, ldt, e0 % H);
        d0 = cu_ld(dt_bias, ddt, e0 % H);
    }
    pdl_wait();
    /* a and b of one dtype (the activations'): their loads with it a constant go out together (a dtype test each,
     * its conversion inside, chained them) */
    auto run = [&](auto ad, auto bd) {
        for (int64_t e = e0; e < T * H; e += (int64_t)gridDim.x * blockDim.x) {
            const int64_t t = e / H, h = e % H;
            const float av = cu_ld(a, ad.value, t * as + h), bv = cu_ld(b, bd.value, t * bs + h);
            const float Al = e == e0 ? A0 : cu_ld(A_log, ldt, h), db = e == e0 ? d0 : cu_ld(dt_bias, ddt, h);
            g[e] = -expf(Al) * la_softplus(av + db);
            cu_st(beta, betadt, e, 1.0f / (1.0f + expf(-bv)));
        }
    };
    if (adt == bdt) cu_with_dt(adt, [&](auto d) { run(d, d); });
    else run(cu_any_dt{adt}, cu_any_dt{bdt});
}

// a, b (T, H) act, A_log, dt_bias (H) -> g (T, H) F32, beta (T, H) float, both contiguous
extern "C" void cu_gdn_gating(backend *be, const tensor *a, const tensor *b, const tensor *A_log,
                              const tensor *dt_bias, tensor *g, tensor *beta) {
    cu_state *cu = cu_of(be);
    const char *op = "gdn_gating";
    if (!cu_check_mat(cu, op, "a", a, CU_ACT, -1, -1)) return;
    const int64_t T = cu_rows(a), H = tensor_row_len(a);
    if (!cu_check_mat(cu, op, "b", b, CU_ACT, T, H) || !cu_check_vec(cu, op, "A_log", A_log, CU_FLOAT, H) ||
        !cu_check_vec(cu, op, "dt_bias", dt_bias, CU_FLOAT, H) ||
        !cu_check_mat(cu, op, "g", g, CU_DT(DTYPE_F32), T, H) || !cu_check_mat(cu, op, "beta", beta, CU_FLOAT, T, H))
        return;
    if (tensor_row_stride(g) != H || tensor_row_stride(beta) != H) {
        cu_fail(cu, "%s: g and beta must be contiguous", op);
        return;
    }
    if (T == 0 || H == 0) return;
    cu_launch(cu, op, true, k_gdn_gating, dim3(cu_grid(T * H, 256)), dim3(256), 0, a->data, (int)a->dtype,
              tensor_row_stride(a), b->data, (int)b->dtype, tensor_row_stride(b), A_log->data, (int)A_log->dtype,
              dt_bias->data, (int)dt_bias->dtype, T, H, (float *)g->data, beta->data, (int)beta->dtype);
}

__global__ void k_sigmoid_mul(void *x, int xdt, int64_t xs, const void *gate, int gdt, int64_t gs, int64_t T,
                              int64_t D) {
    pdl_launch();
    pdl_wait();
    /* x and gate of one dtype: both loads out together (a dtype test each chained them) */
    auto run = [&](auto xd, auto gd) {
        for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < T * D;
             e += (int64_t)gridDim.x * blockDim.x) {
            const int64_t t = e / D, d = e % D;
            const float gv = cu_ld(gate, gd.value, t * gs + d);
            const float xv = cu_ld(x, xd.value, t * xs + d);
            cu_st(x, xd.value, t * xs + d, xv * (1.0f / (1.0f + expf(-gv))));
        }
    };
    if (xdt == gdt) cu_with_dt(xdt, [&](auto d) { run(d, d); });
    else run(cu_any_dt{xdt}, cu_any_dt{gdt});
}

// x (T, D) act *= sigmoid(gate (T, D) act)
extern "C" void cu_sigmoid_mul(backend *be, tensor *x, const tensor *gate) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "sigmoid_mul", "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, "sigmoid_mul", "gate", gate, CU_ACT, cu_rows(x), tensor_row_len(x)))
        return;
    const int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    cu_launch(cu, "sigmoid_mul", true, k_sigmoid_mul, dim3(cu_grid(T * D, 256)), dim3(256), 0, x->data, (int)x->dtype,
              tensor_row_stride(x), gate->data, (int)gate->dtype, tensor_row_stride(gate), T, D);
}
