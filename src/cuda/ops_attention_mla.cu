/* ops_attention_mla.cu: multi-head latent attention (DeepSeek-V2 / V3) on CUDA: head_linear and attention_mla.
 *
 * The CPU reference and the math are in src/cpu/ops_attention_mla.c (vLLM's absorbed "MQA" form):
 *
 *   q_lat_h = W_UK_h^T q_nope_h                              (L)           head_linear
 *   s_j     = (q_lat_h . c_j + q_rope_h . k_rope_j) * scale                attention_mla
 *   o_lat_h = sum_j softmax(s)_j c_j                         (L)           attention_mla
 *   o_h     = W_UV_h o_lat_h                                 (v_head_dim)  head_linear
 *
 * head_linear: H independent (T, K) x (K, N) products. Decode batches of BF16 (T <= 8) run k_head_gemv, a
 * bandwidth-bound GEMV with the weights' first loads in flight before the previous kernel ends. Where x and w share a dtype
 * it is one cuBLAS strided-batched GEMM (f32 compute; the handle's workspace is set, so it records into
 * graphs); other mixes (a BF16 activation with F32 / F16 weights, as imported from the checkpoint) run
 * k_head_linear, a plain shared-memory tiled kernel in f32.
 *
 * attention_mla: k_mla_cache_write stores the new latents [c ; k_rope] at slot_mapping (vLLM's
 * concat_and_cache_mla: BF16, F32, or E4M3 of x / qscale as kv_write), then k_attention_mla runs one CTA of
 * MLA_WARPS warps per (query token, group of up to MLA_HPC heads): the CTA loads MLA_KT keys at a time from
 * the paged latent cache into shared memory (f32, an FP8 cache's bytes times its scale, as the CPU), every
 * head of the group reads that tile (warp w has heads w and w + MLA_WARPS): lane j scores key j, the warp
 * updates the head's online softmax (running max and sum, f32), then the lanes split L to accumulate
 * sum_j p_j c_j in registers. Same causal / chunked-prefill / prefix-cache semantics and metadata as the
 * paged attention op (ops_attention.cu), the same device-side checks (bad slots, block ids, query_start_loc,
 * lengths reported through cu_dev_err), no allocation and no host sync: both ops record into graphs.
 * mla_prep: k_mla_prep does the latent's RMSNorm, the rotary embedding of the query heads and the shared key
 * and the cache write in one launch (they were three). Limits: L + R <= MLA_MAX_W (1024), L <= 32 * MLA_MAX_NACC. This kernel is the general one (any float cache,
 * FP8 included, any L and R); a BF16 cache with BF16 queries in DeepSeek's shapes goes to the tensor-core kernel
 * of ops_attention_mla_tc.cu, split over the keys (VLLM_CUDA_MLA=generic keeps this one, for comparison).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

#define MLA_WARPS 8
#define MLA_THREADS (MLA_WARPS * 32)
#define MLA_HPW 2                      /* heads per warp at most */
#define MLA_HPC (MLA_WARPS * MLA_HPW)  /* heads per CTA at most (16) */
#define MLA_KT 32                      /* keys per shared-memory tile (a lane each when scoring) */
#define MLA_MAX_W 1024                 /* largest L + R (the tile's shared memory) */
#define MLA_MAX_NACC 32                /* accumulator registers per lane and head: L <= 32 * 32 */

/* ---- head_linear: y[t, h*N + n] = sum_k w[h, n, k] x[t, h*K + k] ---- */

#define HL_TN 64   /* outputs n per CTA */
#define HL_TT 32   /* tokens per CTA */
#define HL_TK 32   /* k per shared-memory step */

/* grid (ceil(N / HL_TN), H, ceil(T / HL_TT)), 256 threads: thread (tx = tid % 16, ty = tid / 16) computes
 * outputs n0 + tx + 16 i (i < 4) of tokens t0 + ty + 16 j (j < 2) in f32. Any float dtypes (x: xdt, row
 * stride xs; w (H, N, K) contiguous: wdt; y (T, H*N) contiguous: ydt). */
__global__ void __launch_bounds__(256) k_head_linear(const void *x, int xdt, int64_t xs, const void *w, int wdt,
                                                     void *y, int ydt, int T, int H, int N, int K) {
    __shared__ float wsm[HL_TK][HL_TN + 1]; /* W_h tile, k-major: wsm[k][n] */
    __shared__ float xsm[HL_TK][HL_TT + 1]; /* x tile, k-major: xsm[k][t] */
    pdl_launch();
    pdl_wait();
    const int h = blockIdx.y, n0 = blockIdx.x * HL_TN, t0 = blockIdx.z * HL_TT;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t wbase = (int64_t)h * N * K;
    float acc[2][4] = {};
    for (int k0 = 0; k0 < K; k0 += HL_TK) {
        for (int e = tid; e < HL_TN * HL_TK; e += 256) { /* coalesced along k */
            const int n = e / HL_TK, k = e % HL_TK;
            wsm[k][n] = (n0 + n < N && k0 + k < K) ? cu_ld(w, wdt, wbase + (int64_t)(n0 + n) * K + k0 + k) : 0.0f;
        }
        for (int e = tid; e < HL_TT * HL_TK; e += 256) {
            const int t = e / HL_TK, k = e % HL_TK;
            xsm[k][t] = (t0 + t < T && k0 + k < K) ? cu_ld(x, xdt, (int64_t)(t0 + t) * xs + (int64_t)h * K + k0 + k)
                                                   : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < HL_TK; k++) {
            float wv[4], xv[2];
#pragma unroll
            for (int i = 0; i < 4; i++) wv[i] = wsm[k][tx + 16 * i];
#pragma unroll
            for (int j = 0; j < 2; j++) xv[j] = xsm[k][ty + 16 * j];
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] = fmaf(wv[i], xv[j], acc[j][i]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int t = t0 + ty + 16 * j;
        if (t >= T) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int n = n0 + tx + 16 * i;
            if (n < N) cu_st(y, ydt, (int64_t)t * H * N + (int64_t)h * N + n, acc[j][i]);
        }
    }
}

/* Decode batches (T <= HG_MAXT, BF16 x and w, K a multiple of 8): a bandwidth-bound GEMV. grid (ceil(N / (4 HG_RPW)),
 * H), 128 threads: the CTA's x_h rows (T, K) in shared memory as f32; warp w computes rows n0 + w HG_RPW .. + HG_RPW
 * for every token, its lanes streaming 16-byte chunks of each row (f32 sums, one warp reduction per output). */
#define HG_MAXT 8
#define HG_RPW 4
#define HG_MAXK 1024
template <int TT, int KC>
__global__ void __launch_bounds__(128) k_head_gemv(const __nv_bfloat16 *x, int64_t xs, const __nv_bfloat16 *w,
                                                   void *y, int ydt, int T, int H, int N, int K) {
    __shared__ float xsm[TT * HG_MAXK];
    pdl_launch();
    const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * 4 + warp) * HG_RPW;
    const __nv_bfloat16 *wh = w + (int64_t)h * N * K;
    /* the weights do not depend on the previous kernel: all of a lane's chunks (KC = ceil(K / 256) a row: K 512,
     * W_UV's, takes two) are requested before waiting, none after */
    uint4 pre[HG_RPW][KC];
#pragma unroll
    for (int r = 0; r < HG_RPW; r++)
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            const int k0 = lane * 8 + 256 * kc;
            pre[r][kc] = n0 + r < N && k0 < K ? *(const uint4 *)(wh + (int64_t)(n0 + r) * K + k0) : make_uint4(0, 0, 0, 0);
        }
    pdl_wait();
    for (int i = threadIdx.x; i < T * (K / 8); i += 128) {
        const int t = i / (K / 8), c = i % (K / 8);
        float f[8];
        bf16x8_to_f32(*(const uint4 *)(x + (int64_t)t * xs + (int64_t)h * K + c * 8), f);
#pragma unroll
        for (int e = 0; e < 8; e++) xsm[t * K + c * 8 + e] = f[e];
    }
    __syncthreads();
    float acc[HG_RPW][TT];
#pragma unroll
    for (int r = 0; r < HG_RPW; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        const int k0 = lane * 8 + 256 * kc;
        if (k0 >= K) break;
#pragma unroll
        for (int r = 0; r < HG_RPW; r++) {
            float wf[8];
            bf16x8_to_f32(pre[r][kc], wf);
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t >= T) break;
                const float *xr = xsm + t * K + k0;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[r][t] = fmaf(wf[e], xr[e], acc[r][t]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < HG_RPW; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            const float v = cu_warp_sum(acc[r][t]);
            if (lane == 0 && n0 + r < N) cu_st(y, ydt, (int64_t)t * H * N + (int64_t)h * N + n0 + r, v);
        }
}

static cudaDataType cu_blas_type(dtype dt) { return dt == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// x (T, H*K), w (H, N, K) -> y (T, H*N)
void cu_head_linear(backend *be, const tensor *x, const tensor *w, tensor *y) {
    cu_state *cu = cu_of(be);
    const char *op = "head_linear";
    if (!w || w->ndim != 3 || w->shape[0] <= 0 || w->shape[1] <= 0 || w->shape[2] <= 0 || w->shape[0] > 65535 ||
        w->shape[1] > INT32_MAX || w->shape[2] > INT32_MAX) {
        cu_fail(cu, "head_linear: w must be (H, N, K) with 0 < H <= 65535");
        return;
    }
    const int H = (int)w->shape[0], N = (int)w->shape[1], K = (int)w->shape[2];
    const int64_t T = x ? cu_rows(x) : 0;
    if (!cu_check_vec(cu, op, "w", w, CU_FLOAT, -1) || !cu_check_mat(cu, op, "x", x, CU_ACT, T, (int64_t)H * K) ||
        !cu_check_mat(cu, op, "y", y, CU_ACT, T, (int64_t)H * N))
        return;
    if (tensor_row_stride(y) != (int64_t)H * N) {
        cu_fail(cu, "head_linear: y must be contiguous");
        return;
    }
    const int64_t xs = tensor_row_stride(x);
    if (T == 0) return;
    if (T > INT32_MAX || xs > INT32_MAX || (int64_t)H * N > INT32_MAX) {
        cu_fail(cu, "head_linear: %lld rows of stride %lld are too many", (long long)T, (long long)xs);
        return;
    }
    if (T <= HG_MAXT && x->dtype == DTYPE_BF16 && w->dtype == DTYPE_BF16 && K % 8 == 0 && K <= HG_MAXK &&
        xs % 8 == 0 && (uintptr_t)x->data % 16 == 0 && (uintptr_t)w->data % 16 == 0) {
        const dim3 grid((unsigned)((N + 4 * HG_RPW - 1) / (4 * HG_RPW)), (unsigned)H);
        const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x->data, *wb = (const __nv_bfloat16 *)w->data;
        /* the kernel for (tokens, chunks a lane) */
        auto go = [&](auto tt) {
            constexpr int TT = decltype(tt)::value;
            if (K <= 256)
                cu_launch(cu, op, true, k_head_gemv<TT, 1>, grid, dim3(128), 0, xb, xs, wb, y->data, (int)y->dtype,
                          (int)T, H, N, K);
            else if (K <= 512)
                cu_launch(cu, op, true, k_head_gemv<TT, 2>, grid, dim3(128), 0, xb, xs, wb, y->data, (int)y->dtype,
                          (int)T, H, N, K);
            else
                cu_launch(cu, op, true, k_head_gemv<TT, 4>, grid, dim3(128), 0, xb, xs, wb, y->data, (int)y->dtype,
                          (int)T, H, N, K);
        };
        if (T == 1) go(std::integral_constant<int, 1>{});
        else if (T <= 2) go(std::integral_constant<int, 2>{});
        else if (T <= 4) go(std::integral_constant<int, 4>{});
        else go(std::integral_constant<int, 8>{});
        return;
    }
    /* x, w of one dtype: one strided-batched GEMM. Column-major per head h: Y_h^T (N, T) ldc H*N =
     * op(A) (N, K) with A = W_h stored (K, N) lda K, transposed, times X_h^T (K, T) ldb xs. */
    const bool blas = x->dtype == w->dtype && (x->dtype == DTYPE_BF16 || x->dtype == DTYPE_F32) &&
                      (y->dtype == x->dtype || y->dtype == DTYPE_F32);
    if (blas) {
        const float alpha = 1.0f, beta = 0.0f;
        const cublasStatus_t s = cublasGemmStridedBatchedEx(
            cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, (int)T, K, &alpha, w->data, cu_blas_type(w->dtype), K,
            (long long)N * K, x->data, cu_blas_type(x->dtype), (int)xs, (long long)K, &beta, y->data,
            cu_blas_type(y->dtype), H * N, (long long)N, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s == CUBLAS_STATUS_SUCCESS) return;
        /* no cuBLAS algorithm for this shape: the kernel below (it takes every dtype) */
        LOG_D("cuda head_linear: cublasGemmStridedBatchedEx failed (%s); using k_head_linear",
              cublasGetStatusString(s));
    }
    const dim3 grid((unsigned)((N + HL_TN - 1) / HL_TN), (unsigned)H, (unsigned)((T + HL_TT - 1) / HL_TT));
    if (grid.z > 65535) {
        cu_fail(cu, "head_linear: %lld tokens exceed the grid", (long long)T);
        return;
    }
    cu_launch(cu, op, true, k_head_linear, grid, dim3(256), 0, (const void *)x->data, (int)x->dtype, xs,
              (const void *)w->data, (int)w->dtype, y->data, (int)y->dtype, (int)T, H, N, K);
}

/* ---- the latent cache's element: F32, BF16 or an E4M3 byte (KT) ---- */

__device__ __forceinline__ void mla_store(float *c, int64_t i, float x, float) { c[i] = x; }
__device__ __forceinline__ void mla_store(__nv_bfloat16 *c, int64_t i, float x, float) { c[i] = __float2bfloat16(x); }
__device__ __forceinline__ void mla_store(uint8_t *c, int64_t i, float x, float scale) { c[i] = f32_to_e4m3(x, scale); }

/* 8 consecutive cache elements (16-byte aligned for BF16 / F32 ... 8-byte for E4M3) as f32 */
__device__ __forceinline__ void mla_ld8(const float *p, float *f) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void mla_ld8(const __nv_bfloat16 *p, float *f) { kv8_to_f32(kv_ld8(p), f, p); }
__device__ __forceinline__ void mla_ld8(const uint8_t *p, float *f) { kv8_to_f32(kv_ld8(p), f, p); }
__device__ __forceinline__ float mla_ld1(const float *p) { return *p; }
__device__ __forceinline__ float mla_ld1(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float mla_ld1(const uint8_t *p) { return kv_to_f32(*p); }

/* ---- concat_and_cache_mla ---- */

// kv (T, W) -> cache rows slot_mapping[t] of the cache viewed as (num_slots, W)
template <typename KT>
__global__ void k_mla_cache_write(const void *kv, int kdt, int64_t ks, KT *cache, float scale, const int64_t *slots,
                                  int64_t T, int W, int64_t num_slots, cu_dev_err *err) {
    pdl_launch();
    pdl_wait();
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const int64_t s = slots[t];
        if (s < 0) continue; /* padding */
        if (s >= num_slots) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_KV_SLOT, t, s, num_slots);
            continue;
        }
        for (int i = threadIdx.x; i < W; i += blockDim.x)
            mla_store(cache, s * W + i, cu_ld(kv, kdt, t * ks + i), scale);
    }
}

/* ---- attention_mla ---- */

typedef struct mla_args {
    const void *ql, *qr;    /* q_lat (T, H*L), q_rope (T, H*R) */
    int qldt, qrdt;
    int64_t qls, qrs;       /* their row strides */
    const void *cache;      /* KT (num_blocks, bs, 1, W) */
    float cscale;           /* an FP8 cache's scale (1 otherwise) */
    int64_t num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, T, H, L, R, hpc; /* hpc: heads per CTA */
    bool vec8;              /* W % 8 == 0 and an aligned cache: 8-element loads */
    float scale;
    void *out;              /* (T, H*L) contiguous */
    int odt;
    cu_dev_err *err;
} mla_args;

/* dynamic shared memory: slots (MLA_KT) int64, then q (hpc, W), the tile (MLA_KT, W + 1), p (hpc, MLA_KT) f32 */
static size_t mla_smem_bytes(int hpc, int W) {
    return MLA_KT * sizeof(long long) +
           ((size_t)hpc * W + (size_t)MLA_KT * (W + 1) + (size_t)hpc * MLA_KT) * sizeof(float);
}

/* grid (T, ceil(H / hpc)), MLA_THREADS threads, mla_smem_bytes(hpc, L + R). L <= 32 * NACC. */
template <typename KT, int NACC>
__global__ void __launch_bounds__(MLA_THREADS) k_attention_mla(mla_args a) {
    extern __shared__ long long mla_smem[];
    const int L = a.L, W = a.L + a.R, W1 = W + 1, hpc = a.hpc;
    long long *slot_sm = mla_smem;                  /* (MLA_KT) slots of the tile's keys, -1: none */
    float *qsm = (float *)(mla_smem + MLA_KT);      /* (hpc, W) [q_lat_h ; q_rope_h] */
    float *tile = qsm + hpc * W;                    /* (MLA_KT, W + 1) [c_j ; k_rope_j] in f32 */
    float *psm = tile + MLA_KT * W1;                /* (hpc, MLA_KT) the tile's probabilities */
    __shared__ int meta[2];                         /* sequence, ok */

    pdl_launch();
    pdl_wait();
    const int t = blockIdx.x, h0 = blockIdx.y * hpc, nh = min(hpc, a.H - h0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        /* the sequence that owns token t: the last s with qsl[s] <= t */
        int lo = 0, hi = a.S - 1;
        while (lo < hi) {
            const int mid = lo + (hi - lo + 1) / 2;
            if (a.qsl[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        const int s = lo, q0 = a.qsl[s], q1 = a.qsl[s + 1], ctx = a.seq_lens[s];
        int ok = 1;
        if (t == 0 && blockIdx.y == 0 && (a.qsl[0] != 0 || a.qsl[a.S] != a.T))
            cu_report(a.err, CU_DEV_ATTN_QSL, a.qsl[0] != 0 ? 0 : a.S, a.qsl[0] != 0 ? a.qsl[0] : a.qsl[a.S], a.T);
        if (!(q0 <= t && t < q1)) {
            ok = 0;
            if (blockIdx.y == 0) cu_report(a.err, CU_DEV_ATTN_QSL, s + 1, q1, a.T);
        } else if (ctx < q1 - q0 || (int64_t)ctx > (int64_t)a.max_blocks * a.bs) {
            ok = 0;
            if (blockIdx.y == 0) cu_report(a.err, CU_DEV_ATTN_META, s, q1 - q0, ctx);
        }
        meta[0] = s;
        meta[1] = ok;
    }
    /* the CTA's queries, f32 */
    for (int i = threadIdx.x; i < nh * W; i += MLA_THREADS) {
        const int hh = i / W, d = i % W, h = h0 + hh;
        qsm[i] = d < L ? cu_ld(a.ql, a.qldt, (int64_t)t * a.qls + (int64_t)h * L + d)
                       : cu_ld(a.qr, a.qrdt, (int64_t)t * a.qrs + (int64_t)h * a.R + (d - L));
    }
    __syncthreads();
    if (!meta[1]) return;
    const int s = meta[0];
    const int q_len = a.qsl[s + 1] - a.qsl[s];
    const int pos = a.seq_lens[s] - q_len + (t - a.qsl[s]); /* the query's absolute position: keys 0 .. pos */
    const int32_t *blocks = a.bt + (int64_t)s * a.bt_stride;
    const bool vec8 = a.vec8;

    /* warp w: heads w and w + MLA_WARPS of the group */
    float m[MLA_HPW], l[MLA_HPW], acc[MLA_HPW][NACC];
#pragma unroll
    for (int i = 0; i < MLA_HPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < NACC; e++) acc[i][e] = 0.0f;
    }

    for (int c0 = 0; c0 <= pos; c0 += MLA_KT) {
        const int n = min(MLA_KT, pos + 1 - c0); /* keys c0 .. c0 + n - 1 */
        if (threadIdx.x < MLA_KT) {
            long long slot = -1;
            const int key = c0 + threadIdx.x;
            if (threadIdx.x < n) {
                const int col = key / a.bs;
                const int32_t blk = blocks[col];
                if (blk < 0 || blk >= a.num_blocks) cu_report(a.err, CU_DEV_ATTN_BLOCK, s, col, blk);
                else slot = (long long)blk * a.bs + key % a.bs;
            }
            slot_sm[threadIdx.x] = slot;
        }
        __syncthreads();
        /* the tile: row j = key c0 + j's [c ; k_rope] (zeros for a bad block) */
        if (vec8) {
            const int per = W / 8;
            for (int i = threadIdx.x; i < n * per; i += MLA_THREADS) {
                const int j = i / per, d = (i % per) * 8;
                const long long slot = slot_sm[j];
                float f[8];
                if (slot >= 0) {
                    mla_ld8((const KT *)a.cache + slot * W + d, f);
                } else {
#pragma unroll
                    for (int k = 0; k < 8; k++) f[k] = 0.0f;
                }
#pragma unroll
                for (int k = 0; k < 8; k++) tile[j * W1 + d + k] = f[k] * a.cscale;
            }
        } else {
            for (int i = threadIdx.x; i < n * W; i += MLA_THREADS) {
                const int j = i / W, d = i % W;
                const long long slot = slot_sm[j];
                tile[j * W1 + d] = slot >= 0 ? mla_ld1((const KT *)a.cache + slot * W + d) * a.cscale : 0.0f;
            }
        }
        __syncthreads();
        /* scores: lane j against key j (conflict-free: rows are W + 1 apart), every head of the warp */
        const bool valid = lane < n && slot_sm[lane] >= 0;
        float sc[MLA_HPW];
#pragma unroll
        for (int i = 0; i < MLA_HPW; i++) sc[i] = 0.0f;
        if (valid) {
            const float *row = tile + lane * W1;
            for (int d = 0; d < W; d++) {
                const float kv = row[d];
#pragma unroll
                for (int i = 0; i < MLA_HPW; i++) {
                    const int hh = warp + MLA_WARPS * i;
                    if (hh < nh) sc[i] = fmaf(qsm[hh * W + d], kv, sc[i]);
                }
            }
        }
        /* online softmax per head; the tile's probabilities to shared memory */
#pragma unroll
        for (int i = 0; i < MLA_HPW; i++) {
            const int hh = warp + MLA_WARPS * i;
            if (hh >= nh) continue; /* warp-uniform */
            const float x = valid ? sc[i] * a.scale : -INFINITY;
            float cm = x;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
            const float m_new = fmaxf(m[i], cm);
            float p = 0.0f, corr = 1.0f;
            if (m_new != -INFINITY) {
                p = valid ? expf(x - m_new) : 0.0f;
                corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
            }
            l[i] = l[i] * corr + cu_warp_sum(p);
            m[i] = m_new;
#pragma unroll
            for (int e = 0; e < NACC; e++) acc[i][e] *= corr;
            psm[hh * MLA_KT + lane] = p;
        }
        __syncwarp();
        /* acc += sum_j p_j c_j: lane owns d = lane + 32 e */
        for (int j = 0; j < n; j++) {
            const float *row = tile + j * W1;
            float cv[NACC];
#pragma unroll
            for (int e = 0; e < NACC; e++) {
                const int d = lane + 32 * e;
                cv[e] = d < L ? row[d] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < MLA_HPW; i++) {
                const int hh = warp + MLA_WARPS * i;
                if (hh >= nh) continue;
                const float pj = psm[hh * MLA_KT + j];
#pragma unroll
                for (int e = 0; e < NACC; e++) acc[i][e] = fmaf(pj, cv[e], acc[i][e]);
            }
        }
        __syncthreads(); /* the tile and the slots are rewritten next */
    }

    /* out[t, h] = acc / l */
#pragma unroll
    for (int i = 0; i < MLA_HPW; i++) {
        const int hh = warp + MLA_WARPS * i;
        if (hh >= nh) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        const int64_t o = (int64_t)t * a.H * L + (int64_t)(h0 + hh) * L;
#pragma unroll
        for (int e = 0; e < NACC; e++) {
            const int d = lane + 32 * e;
            if (d < L) cu_st(a.out, a.odt, o + d, acc[i][e] * inv);
        }
    }
}

template <typename KT, int NACC>
static void mla_launch(cu_state *cu, const mla_args &a, dim3 grid, size_t smem) {
    static size_t smem_set = 48 * 1024; /* per instantiation: the dynamic shared memory allowed so far */
    if (smem > smem_set) {
        if (!cu_ok(cu, cudaFuncSetAttribute(k_attention_mla<KT, NACC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem),
                   "attention_mla", "cudaFuncSetAttribute"))
            return;
        smem_set = smem;
    }
    cu_launch(cu, "attention_mla", true, k_attention_mla<KT, NACC>, grid, dim3(MLA_THREADS), smem, a);
}

template <typename KT>
static void mla_dispatch(cu_state *cu, const mla_args &a, dim3 grid, size_t smem) {
    const int nacc = (a.L + 31) / 32;
    if (nacc <= 1) mla_launch<KT, 1>(cu, a, grid, smem);
    else if (nacc <= 2) mla_launch<KT, 2>(cu, a, grid, smem);
    else if (nacc <= 4) mla_launch<KT, 4>(cu, a, grid, smem);
    else if (nacc <= 8) mla_launch<KT, 8>(cu, a, grid, smem);
    else if (nacc <= 16) mla_launch<KT, 16>(cu, a, grid, smem);
    else mla_launch<KT, 32>(cu, a, grid, smem);
}

const char *cu_attention_mla_unsupported(const cu_state *cu, const mla_params *p, dtype cache_dt) {
    static thread_local char why[320];
    const int H = p->num_heads, L = p->kv_lora_rank, R = p->rope_dim, W = L + R;
    if (H <= 0 || L <= 0 || R < 0 || !isfinite(p->scale)) return "bad head counts or scale";
    if (W > MLA_MAX_W || L > 32 * MLA_MAX_NACC) {
        snprintf(why, sizeof why, "kv_lora_rank %d + rope %d: the kernels take L + R <= %d", L, R, MLA_MAX_W);
        return why;
    }
    /* the tensor-core kernel where it applies (a BF16 cache and its shapes), else the general one */
    const size_t tc = cache_dt == DTYPE_BF16 ? cu_attention_mla_tc_smem(L, R) : 0;
    const size_t need = tc ? tc : mla_smem_bytes(H < MLA_HPC ? H : MLA_HPC, W);
    if (need > cu->smem_optin) {
        snprintf(why, sizeof why, "kv_lora_rank %d + rope %d over a %s cache needs %zu bytes of shared memory per "
                 "block; this GPU allows %zu%s", L, R, dtype_name(cache_dt), need, cu->smem_optin,
                 cache_dt != DTYPE_BF16 ? " (the BF16 cache takes the tensor-core kernel, which needs less)" : "");
        return why;
    }
    return NULL;
}

/* mla_prep: grid-stride over tokens, 128 threads: the latent's sum of squares (block reduction), c normalised
 * (rounded to the activation dtype in kv, as the separate norm op stores it) and written to the cache; then the
 * rotary pairs of the H query heads and of the shared key (rounded likewise), the key's into the cache. A bad
 * position or slot is reported; that token is then left alone (the step fails at synchronize). */
#define MLP_N 4 /* elements (and rotary pairs at a time) a thread of k_mla_prep keeps */
template <typename KT>
__global__ void __launch_bounds__(128) k_mla_prep(void *q, int64_t qs, int H, void *kv, int64_t ks, int adt,
                                                  const void *w, int wdt, float eps, const int32_t *pos,
                                                  const float *cs, int64_t css, int64_t max_pos, int L, int R,
                                                  bool neox, KT *cache, float scale, const int64_t *slots, int64_t T,
                                                  int64_t num_slots, cu_dev_err *err) {
    __shared__ float part[4];
    pdl_launch();
    const int W = L + R, half = R / 2;
    /* Latents of at most 128 MLP_N elements (DeepSeek's 512) keep a thread's elements in registers between the
     * sum of squares and the store (wider ones read them twice), and the rotary pairs go MLP_N at a time, their loads together before the
     * stores (a loop of load, store, load... could not start a load before the previous store: about 10 round
     * trips a token); the norm weight's elements are read before pdl_wait. */
    const bool regs = L <= 128 * MLP_N;
    float wv[MLP_N];
    cu_ld_batch<MLP_N>(wv, regs ? w : nullptr, wdt, threadIdx.x, 128, L);
    /* the first token's slot and position too (the step's metadata, which no kernel of the step writes) */
    int64_t slot = 0;
    int32_t p = 0;
    if ((int64_t)blockIdx.x < T) {
        slot = slots[blockIdx.x];
        p = pos[blockIdx.x];
    }
    pdl_wait();
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        if (t != (int64_t)blockIdx.x) { /* (a grid smaller than T) */
            slot = slots[t];
            p = pos[t];
        }
        if (p < 0 || p >= max_pos || slot >= num_slots) { /* uniform over the block */
            if (threadIdx.x == 0) {
                if (p < 0 || p >= max_pos) cu_report(err, CU_DEV_ROPE_POS, t, p, max_pos);
                else cu_report(err, CU_DEV_KV_SLOT, t, slot, num_slots);
            }
            continue;
        }
        const int64_t row = t * ks;
        const float *c = cs + (int64_t)p * css, *sn = c + half;
        cu_with_dt(adt, [&](auto d) {
            constexpr int AD = decltype(d)::value;
            /* the activation dtype's rounding of a stored value (what a re-read returns) */
            auto rnd = [](float v) {
                return AD == DTYPE_BF16 ? __bfloat162float(__float2bfloat16(v))
                                        : AD == DTYPE_F16 ? __half2float(__float2half(v)) : v;
            };
            /* the rotary pairs, MLP_N a thread at a time: the query heads' and the key's (kv's last R columns, apart
             * from the latent the norm rewrites), the first batch's loads issued with the latent's */
            const int np = (H + 1) * half;
            float x1[MLP_N], x2[MLP_N], cv[MLP_N], sv[MLP_N];
            /* pair j's two elements (in q, or in kv for the key: h == H) and its index in the rotary table */
            auto pair_at = [&](int j, int64_t *a1, int64_t *a2) {
                const int h = j / half, i = j % half;
                const int64_t base = h < H ? t * qs + (int64_t)h * R : row + L;
                *a1 = neox ? base + i : base + 2 * i;
                *a2 = neox ? base + i + half : base + 2 * i + 1;
                return i;
            };
            auto load_pairs = [&](int j0) {
#pragma unroll
                for (int u = 0; u < MLP_N; u++) {
                    const int j = min(j0 + 128 * u, np - 1);
                    int64_t a1, a2;
                    const int i = pair_at(j, &a1, &a2);
                    const void *x = j / half < H ? q : kv;
                    x1[u] = cu_ld(x, AD, a1);
                    x2[u] = cu_ld(x, AD, a2);
                    cv[u] = c[i];
                    sv[u] = sn[i];
                }
            };
            load_pairs(threadIdx.x);
            /* the block's sum of squares of the latent -> its RMS factor */
            auto rms_inv = [&](float ss) {
                ss = cu_warp_sum(ss);
                if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
                __syncthreads();
                const float inv = 1.0f / sqrtf((part[0] + part[1] + part[2] + part[3]) / (float)L + eps);
                __syncthreads(); /* part is rewritten by the next token */
                return inv;
            };
            if (regs) { /* a thread's latent elements kept in registers */
                float xv[MLP_N];
#pragma unroll
                for (int u = 0; u < MLP_N; u++) xv[u] = cu_ld(kv, AD, row + min((int)threadIdx.x + 128 * u, L - 1));
                float ss = 0.0f;
#pragma unroll
                for (int u = 0; u < MLP_N; u++)
                    if ((int)threadIdx.x + 128 * u < L) ss += xv[u] * xv[u];
                const float inv = rms_inv(ss);
#pragma unroll
                for (int u = 0; u < MLP_N; u++) {
                    const int i = threadIdx.x + 128 * u;
                    if (i >= L) continue;
                    const float y = rnd(xv[u] * inv * wv[u]);
                    cu_st(kv, AD, row + i, y);
                    if (slot >= 0) mla_store(cache, slot * W + i, y, scale);
                }
            } else { /* wider latents: read twice */
                float ss = 0.0f;
                for (int i = threadIdx.x; i < L; i += 128) {
                    const float v = cu_ld(kv, AD, row + i);
                    ss += v * v;
                }
                const float inv = rms_inv(ss);
                for (int i = threadIdx.x; i < L; i += 128) {
                    const float y = rnd(cu_ld(kv, AD, row + i) * inv * cu_ld(w, wdt, i));
                    cu_st(kv, AD, row + i, y);
                    if (slot >= 0) mla_store(cache, slot * W + i, y, scale);
                }
            }
            for (int j0 = threadIdx.x; j0 < np; j0 += 128 * MLP_N) {
                if (j0 != (int)threadIdx.x) load_pairs(j0);
#pragma unroll
                for (int u = 0; u < MLP_N; u++) {
                    const int j = j0 + 128 * u;
                    if (j >= np) continue;
                    const int h = j / half;
                    int64_t a1, a2;
                    pair_at(j, &a1, &a2);
                    void *x = h < H ? q : kv;
                    const float y1 = rnd(x1[u] * cv[u] - x2[u] * sv[u]), y2 = rnd(x2[u] * cv[u] + x1[u] * sv[u]);
                    cu_st(x, AD, a1, y1);
                    cu_st(x, AD, a2, y2);
                    if (h == H && slot >= 0) {
                        mla_store(cache, slot * W + (a1 - row), y1, scale);
                        mla_store(cache, slot * W + (a2 - row), y2, scale);
                    }
                }
            }
        });
    }
}

// q_rope (T, H*R), kv (T, L+R) in place; norm_w (L); positions (T); cos_sin (max_pos, R); kv's rows into the cache
void cu_mla_prep(backend *be, tensor *q_rope, tensor *kv, const tensor *norm_w, float eps, const tensor *positions,
                 const tensor *cos_sin, int rope_dim, bool neox, tensor *cache, const attn_meta *m) {
    cu_state *cu = cu_of(be);
    const char *op = "mla_prep";
    const int R = rope_dim;
    if (!m || !kv || !q_rope || !cache || m->block_size <= 0 || R <= 0 || R % 2 || kv->ndim != 2 ||
        kv->shape[1] <= R || kv->shape[1] > INT32_MAX) {
        cu_fail(cu, "mla_prep: bad metadata, kv or rope_dim %d (kv (T, L + R) with L > 0 and R even)", R);
        return;
    }
    const int64_t T = kv->shape[0], W = kv->shape[1], L = W - R, bs = m->block_size;
    const int64_t H = q_rope->ndim == 2 ? q_rope->shape[1] / R : 0;
    if (!cu_check_mat(cu, op, "kv", kv, CU_ACT, T, W) ||
        !cu_check_mat(cu, op, "q_rope", q_rope, CU_DT(kv->dtype), T, H * R) ||
        !cu_check_vec(cu, op, "norm_w", norm_w, CU_FLOAT, L) ||
        !cu_check_vec(cu, op, "positions", positions, CU_DT(DTYPE_I32), T) ||
        !cu_check_mat(cu, op, "cos_sin", cos_sin, CU_DT(DTYPE_F32), -1, R) ||
        !cu_check_vec(cu, op, "cache", cache, CU_DT(DTYPE_BF16) | CU_DT(DTYPE_F8_E4M3) | CU_DT(DTYPE_F32), -1) ||
        !cu_check_vec(cu, op, "slot_mapping", &m->slot_mapping, CU_DT(DTYPE_I64), -1))
        return;
    if (H <= 0 || H * R != q_rope->shape[1] || H > INT32_MAX) {
        cu_fail(cu, "mla_prep: q_rope's %lld columns are not heads of %d", (long long)q_rope->shape[1], R);
        return;
    }
    if (cache->ndim != 4 || cache->shape[1] != bs || cache->shape[2] != 1 || cache->shape[3] != W) {
        cu_fail(cu, "mla_prep: cache must be (num_blocks, %lld, 1, %lld)", (long long)bs, (long long)W);
        return;
    }
    if (cache->dtype == DTYPE_F8_E4M3 && !(cache->qscale >= 0.0f && isfinite(cache->qscale))) {
        cu_fail(cu, "mla_prep: cache has scale %g", (double)cache->qscale);
        return;
    }
    if (tensor_numel(&m->slot_mapping) < T) {
        cu_fail(cu, "mla_prep: slot_mapping is shorter than the %lld tokens", (long long)T);
        return;
    }
    if (T == 0) return;
    const int64_t nslots = cache->shape[0] * bs;
    const float cscale = cu_cache_scale(cache);
    const dim3 grid(cu_grid(T, 1));
    const int64_t *slots = (const int64_t *)m->slot_mapping.data;
    const float *cs = (const float *)cos_sin->data;
#define MLA_PREP_ARGS(KT)                                                                                           \
    q_rope->data, tensor_row_stride(q_rope), (int)H, kv->data, tensor_row_stride(kv), (int)kv->dtype,            \
        (const void *)norm_w->data, (int)norm_w->dtype, eps, (const int32_t *)positions->data, cs,                \
        tensor_row_stride(cos_sin), cu_rows(cos_sin), (int)L, R, neox, (KT *)cache->data, cscale, slots, T, nslots, \
        cu->derr_dev
    if (cache->dtype == DTYPE_F8_E4M3)
        cu_launch(cu, op, true, k_mla_prep<uint8_t>, grid, dim3(128), 0, MLA_PREP_ARGS(uint8_t));
    else if (cache->dtype == DTYPE_BF16)
        cu_launch(cu, op, true, k_mla_prep<__nv_bfloat16>, grid, dim3(128), 0, MLA_PREP_ARGS(__nv_bfloat16));
    else
        cu_launch(cu, op, true, k_mla_prep<float>, grid, dim3(128), 0, MLA_PREP_ARGS(float));
#undef MLA_PREP_ARGS
}

// q_lat (T, H*L), q_rope (T, H*R), kv (T, L+R), cache (num_blocks, block_size, 1, L+R) -> out (T, H*L)
void cu_attention_mla(backend *be, const tensor *q_lat, const tensor *q_rope, const tensor *kv, tensor *cache,
                      const attn_meta *m, const mla_params *p, tensor *out) {
    cu_state *cu = cu_of(be);
    const char *op = "attention_mla";
    if (!m || !p || m->block_size <= 0 || m->num_tokens < 0 || m->num_seqs < 0 || m->max_blocks_per_seq < 0) {
        cu_fail(cu, "attention_mla: bad attention metadata");
        return;
    }
    const int H = p->num_heads, L = p->kv_lora_rank, R = p->rope_dim, bs = m->block_size;
    if (H <= 0 || L <= 0 || R < 0 || L + R > MLA_MAX_W || L > 32 * MLA_MAX_NACC || !isfinite(p->scale)) {
        cu_fail(cu, "attention_mla: bad heads %d / kv_lora_rank %d / rope_dim %d / scale %g (CUDA: L + R <= %d)", H, L,
                R, (double)p->scale, MLA_MAX_W);
        return;
    }
    const int W = L + R;
    const int64_t T = m->num_tokens, S = m->num_seqs;
    if (!cu_check_mat(cu, op, "q_lat", q_lat, CU_ACT, T, (int64_t)H * L) ||
        !cu_check_mat(cu, op, "q_rope", q_rope, CU_ACT, T, (int64_t)H * R) ||
        !cu_check_mat(cu, op, "out", out, CU_ACT, T, (int64_t)H * L) ||
        (kv && !cu_check_mat(cu, op, "kv", kv, CU_ACT, T, W)) ||
        !cu_check_vec(cu, op, "cache", cache, CU_DT(DTYPE_BF16) | CU_DT(DTYPE_F8_E4M3) | CU_DT(DTYPE_F32), -1) ||
        !cu_check_vec(cu, op, "query_start_loc", &m->query_start_loc, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, op, "seq_lens", &m->seq_lens, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, op, "slot_mapping", &m->slot_mapping, CU_DT(DTYPE_I64), -1) ||
        !cu_check_mat(cu, op, "block_tables", &m->block_tables, CU_DT(DTYPE_I32), -1, m->max_blocks_per_seq))
        return;
    if (cache->ndim != 4 || cache->shape[1] != bs || cache->shape[2] != 1 || cache->shape[3] != W) {
        cu_fail(cu, "attention_mla: cache must be (num_blocks, %d, 1, %d)", bs, W);
        return;
    }
    if (cache->dtype == DTYPE_F8_E4M3 && !(cache->qscale >= 0.0f && isfinite(cache->qscale))) {
        cu_fail(cu, "attention_mla: cache has scale %g", (double)cache->qscale);
        return;
    }
    if (tensor_row_stride(out) != (int64_t)H * L) {
        cu_fail(cu, "attention_mla: out must be contiguous");
        return;
    }
    if (tensor_numel(&m->query_start_loc) < S + 1 || tensor_numel(&m->seq_lens) < S ||
        cu_rows(&m->block_tables) < S || (kv && tensor_numel(&m->slot_mapping) < T)) {
        cu_fail(cu, "attention_mla: metadata arrays are shorter than num_seqs %lld / num_tokens %lld", (long long)S,
                (long long)T);
        return;
    }
    if (T > INT32_MAX || S > INT32_MAX) {
        cu_fail(cu, "attention_mla: %lld tokens / %lld sequences are too many", (long long)T, (long long)S);
        return;
    }
    const int64_t num_blocks = cache->shape[0];
    const float cscale = cu_cache_scale(cache);
    if (kv && T > 0) { /* the new tokens' latents first: the queries read them */
        const int kdt = (int)kv->dtype;
        const int64_t ks = tensor_row_stride(kv), nslots = num_blocks * bs;
        const int64_t *slots = (const int64_t *)m->slot_mapping.data;
        const dim3 grid(cu_grid(T, 1));
        bool ok;
        if (cache->dtype == DTYPE_F8_E4M3)
            ok = cu_launch(cu, "attention_mla (cache write)", true, k_mla_cache_write<uint8_t>, grid, dim3(128), 0,
                           (const void *)kv->data, kdt, ks, (uint8_t *)cache->data, cscale, slots, T, W, nslots,
                           cu->derr_dev);
        else if (cache->dtype == DTYPE_BF16)
            ok = cu_launch(cu, "attention_mla (cache write)", true, k_mla_cache_write<__nv_bfloat16>, grid, dim3(128),
                           0, (const void *)kv->data, kdt, ks, (__nv_bfloat16 *)cache->data, cscale, slots, T, W,
                           nslots, cu->derr_dev);
        else
            ok = cu_launch(cu, "attention_mla (cache write)", true, k_mla_cache_write<float>, grid, dim3(128), 0,
                           (const void *)kv->data, kdt, ks, (float *)cache->data, cscale, slots, T, W, nslots,
                           cu->derr_dev);
        if (!ok) return;
    }
    if (T == 0) return;
    if (S == 0) {
        cu_fail(cu, "attention_mla: %lld tokens but no sequence", (long long)T);
        return;
    }
    /* the tensor-core kernel where it applies (VLLM_CUDA_MLA=generic: always this file's) */
    static int generic = -1;
    if (generic < 0) {
        const char *e = getenv("VLLM_CUDA_MLA");
        generic = e && !strcmp(e, "generic");
    }
    if (!generic && cu_attention_mla_tc_fits(q_lat, q_rope, cache, out, L, R)) {
        cu_attention_mla_tc(cu, q_lat, q_rope, cache, m, p, out);
        return;
    }
    mla_args a = {};
    a.ql = q_lat->data;
    a.qr = q_rope->data;
    a.qldt = (int)q_lat->dtype;
    a.qrdt = (int)q_rope->dtype;
    a.qls = tensor_row_stride(q_lat);
    a.qrs = tensor_row_stride(q_rope);
    a.cache = cache->data;
    a.cscale = cache->dtype == DTYPE_F8_E4M3 ? cscale : 1.0f;
    a.num_blocks = num_blocks;
    a.bs = bs;
    a.qsl = (const int32_t *)m->query_start_loc.data;
    a.seq_lens = (const int32_t *)m->seq_lens.data;
    a.bt = (const int32_t *)m->block_tables.data;
    a.bt_stride = tensor_row_stride(&m->block_tables);
    a.max_blocks = m->max_blocks_per_seq;
    a.S = (int)S;
    a.T = (int)T;
    a.H = H;
    a.L = L;
    a.R = R;
    a.hpc = H < MLA_HPC ? H : MLA_HPC;
    a.vec8 = W % 8 == 0 && (uintptr_t)cache->data % 16 == 0;
    a.scale = p->scale;
    a.out = out->data;
    a.odt = (int)out->dtype;
    a.err = cu->derr_dev;
    const dim3 grid((unsigned)T, (unsigned)((H + a.hpc - 1) / a.hpc));
    const size_t smem = mla_smem_bytes(a.hpc, W);
    if (cache->dtype == DTYPE_F8_E4M3) mla_dispatch<uint8_t>(cu, a, grid, smem);
    else if (cache->dtype == DTYPE_BF16) mla_dispatch<__nv_bfloat16>(cu, a, grid, smem);
    else mla_dispatch<float>(cu, a, grid, smem);
}
