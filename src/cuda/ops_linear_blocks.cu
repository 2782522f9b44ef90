/*
 * ops_linear_blocks.cu: ggml's block-type weights (GGUF's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4) on the CUDA backend, read as they are (no dequantized copy of the model):
 *
 *  - the decode GEMV (T <= 8 tokens, k_qgemv): the activations quantized to int8 first (k_qx: per 32
 *    elements a scale d = max|x| / 127 and q = round(x / d), ggml's Q8_1 rule with d kept in f32, plus the
 *    integer sums of each 16-element half), then each lane streams units of the weight's blocks and takes
 *    the integer dot products of their quants with q (dp4a: 4 byte products per instruction), scaled per
 *    group of 16 (llama.cpp's mmvq with its q8_1 activations); VLLM_CUDA_QGEMV_XQ=0 runs the same kernel on
 *    the BF16 activations instead (each group dequantized in registers and FMAed in f32); bias, the gated
 *    product (linear_fused's act(gate) * up) and the residual add in the epilogue;
 *  - prefill (larger batches): the layer's rows dequantized tile by tile (at most CU_QTILE_BYTES of BF16)
 *    into a workspace by k_qdequant, each tile then one cuBLAS(Lt) GEMM (ops_linear.cu);
 *  - raw rows (k_qraw_rows): rows of a matrix still in the file's layout dequantized to a float dtype: the
 *    embedding of a block table (cu_import copies block tensors as they are) and the experts' weights at
 *    experts_create (ops_moe.cu keeps BF16 experts).
 *
 * Device layout of a linear layer (cu_qweight): the parts' rows stacked (R rows of nb = in / B blocks, B
 * = 32 or 256 elements per block), every block split into its quant bytes and its scale bytes, in two
 * arrays of fixed strides:
 *      Q: R * nb blocks of QB bytes    (block (r, b) at Q + (r * nb + b) * QB; QB a multiple of 16)
 *      S: R * nb blocks of SB bytes    (at S + (r * nb + b) * SB, S 256-byte aligned after Q)
 * so that every quant load is an aligned 16-byte load (a file's blocks are 17, 18, 22, 34, 84, 110 or 210
 * bytes: not aligned) and consecutive lanes read consecutive bytes. Per type (bytes of the ggml block,
 * ggml-common.h, moved as they are, little-endian):
 *      Q8_0   QB  32 qs[32]                   SB  2 d
 *      Q4_0   QB  16 qs[16]                   SB  2 d
 *      Q4_1   QB  16 qs[16]                   SB  4 d, m
 *      Q5_0   QB  16 qs[16]                   SB  8 qh[4], d, (pad 2)
 *      Q5_1   QB  16 qs[16]                   SB  8 qh[4], d, m
 *      IQ4_NL QB  16 qs[16]                   SB  2 d
 *      MXFP4  QB  16 qs[16]                   SB  1 e (E8M0: d = 2^(e - 128))
 *      Q2_K   QB  64 qs[64]                   SB 20 scales[16], d, dmin
 *      Q3_K   QB  96 hmask[32], qs[64]        SB 16 scales[12], d, (pad 2)
 *      Q4_K   QB 128 qs[128]                  SB 16 d, dmin, scales[12]
 *      Q5_K   QB 160 qh[32], qs[128]          SB 16 d, dmin, scales[12]
 *      Q6_K   QB 192 ql[128], qh[64]          SB 20 scales[16], d, (pad 2)
 *      IQ4_XS QB 128 qs[128]                  SB  8 d, scales_h, scales_l[4]
 * (k_qrelayout makes it from the file's blocks, uploaded to a staging buffer part by part; the padding
 * bytes are zero.) A layer takes R * nb * (QB + SB) bytes: the file's size plus 0-11% (Q5_0 +9%, Q6_K +1%).
 *
 * Units: the kernels walk a row by units, UPB per block, each 16 elements x 1..4 groups whose quants sit in
 * one 16-byte load (or two or three: Q3_K, Q5_K, Q6_K): Q8_0 half a block; the 32-element types a block
 * (low nibbles elements 0..15, high nibbles 16..31); Q2_K, Q3_K, Q6_K a quarter of a super-block (4 groups
 * of 16 in 4 sub-blocks); Q4_K, Q5_K, IQ4_XS an eighth (2 groups of 16). A group's 16 integer quants are
 * packed one per byte in 4 words and turned into floats with one byte permute each (0x4B0000qq is the
 * float 2^23 + q) and one add (the offset, e.g. - (2^23 + 8) for Q4_0); the group's value is then
 * a * (q + c) (c an integer offset: the scale a multiplied once per group's dot product) or a * q + b
 * (the types with a min: fused per element). IQ4_NL / IQ4_XS / MXFP4 map nibbles to their 16 levels with byte
 * permutes over the level table held in 4 registers (llama.cpp's get_int_from_table_16 trick).
 *
 * k_qgemv: a warp per output row (two rows for the gated form), KS warps splitting a row's units (KS 1..8
 * chosen so that the rows fill the resident warps; VLLM_CUDA_QGEMV_KS pins it), the first U units of each
 * lane loaded before pdl_wait() (weights are constant) and the next U always in flight while the current
 * ones are computed. Accumulation in f32; x re-read from L1 / L2 for every row. With int8 activations a
 * group of 16 costs, per token, one 16-byte load of q, 4 dp4a (signed q times the unsigned quant bytes) and
 * 2-3 float operations with the group's scales: value a (q_w + c) gives a d (dot + c s), value a q_w + b
 * gives d (a dot + b s), s the half's sum of q. On BF16 activations every element costs a permute, an add
 * (and an FMA for the min types), the widening of x and an FMA per token: arithmetic-bound at the rate 4-bit
 * weights stream from HBM (docs/benchmarks.md).
 *
 * Facts (block layouts, the scale packings, dequantization formulas, the IQ4_NL table) from llama.cpp:
 * ggml/src/ggml-common.h, ggml/src/ggml-quants.c (dequantize_row_*), and the ideas of its CUDA backend
 * (ggml/src/ggml-cuda/mmvq.cu: a GEMV over blocks for small batches; convert.cu / dequantize.cuh: dequantize
 * to a half-precision tile then a GEMM for large batches; vecdotq.cuh get_int_from_table_16: the nibble
 * table lookup with __byte_perm). The code here is written from those descriptions; the plain reference is
 * src/tensor/ggml_quant.c, which the tests compare against.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_blocks.h"
#include "cuda/cuda_blocks_decode.h"

#define QG_WARPS 8
#define QG_THREADS (QG_WARPS * 32)

/* acc[t] += sum_i value_i * x[t, e0 + i] for the group's 16 values, t < T (x rows xs apart, 16-byte aligned) */
template <int TT, bool MIN>
__device__ __forceinline__ void grp_dot(const uint32_t (&q)[4], float a, float b, const __nv_bfloat16 *x, int64_t xs,
                                        int T, float *acc) {
    float v[16];
    grp_values<MIN>(q, a, b, v);
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < T) {
            const uint4 *xp = (const uint4 *)(x + (int64_t)t * xs);
            float xf[16];
            bf16x8_to_f32(xp[0], xf);
            bf16x8_to_f32(xp[1], xf + 8);
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i += 2) {
                s0 = fmaf(v[i], xf[i], s0);
                s1 = fmaf(v[i + 1], xf[i + 1], s1);
            }
            if constexpr (MIN) acc[t] += s0 + s1;
            else acc[t] = fmaf(a, s0 + s1, acc[t]);
        }
    }
}

/* ---- int8 activations ---- */

/* a . b + c over 4 byte pairs: a signed, b unsigned (PTX dp4a.s32.u32) */
__device__ __forceinline__ int dp4a_su(int a, uint32_t b, int c) {
    int d;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* acc[t] += sum_i value_i * d q[t, e0 + i] for the group's 16 values: x points at q[0, e0] (rows xs bytes
 * apart), m at the meta of e0's 32 elements (rows ms apart), h the half of them e0 starts */
template <int TT, bool MIN>
__device__ __forceinline__ void grp_dot8(const uint32_t (&q)[4], float a, float b, const int8_t *x, const qx_meta *m,
                                         int h, int64_t xs, int64_t ms, int T, float *acc) {
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < T) {
            const int4 xv = __ldg((const int4 *)(x + (int64_t)t * xs));
            int dot = dp4a_su(xv.x, q[0], 0);
            dot = dp4a_su(xv.y, q[1], dot);
            dot = dp4a_su(xv.z, q[2], dot);
            dot = dp4a_su(xv.w, q[3], dot);
            const uint2 mw = __ldg((const uint2 *)(m + (int64_t)t * ms));
            const float d = __uint_as_float(mw.x);
            const int s = (int)(short)(h ? mw.y >> 16 : mw.y & 0xffffu);
            if constexpr (MIN) acc[t] = fmaf(d, fmaf(a, (float)dot, b * (float)s), acc[t]);
            else acc[t] = fmaf(a * d, (float)(dot + (int)b * s), acc[t]);
        }
    }
}

// x (T, K) BF16 (rows xs apart, 16-byte aligned) -> xq (T, K) int8 and xm (T, K / 32): 8 lanes per 32
// elements, 4 each
__global__ void __launch_bounds__(256) k_qx(const __nv_bfloat16 *x, int64_t xs, int T, int K, int8_t *xq,
                                             qx_meta *xm) {
    const int nbk = K >> 5;
    const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
    const int l = threadIdx.x & 7;
    const unsigned mask = 0xffu << (threadIdx.x & 24); /* the 8 lanes of g (all valid or none) */
    pdl_launch();
    pdl_wait(); /* x comes from the previous kernel */
    if (g >= (int64_t)T * nbk) return;
    const int64_t t = g / nbk, b = g - t * nbk;
    const uint2 v = *(const uint2 *)(x + t * xs + b * 32 + l * 4);
    float f[4];
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
    float amax = fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3])));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o, 8));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t packed = 0;
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int q = (int)roundf(f[i] * id);
        s += q;
        packed |= ((uint32_t)q & 0xffu) << (8 * i);
    }
    *(uint32_t *)(xq + t * K + b * 32 + l * 4) = packed;
    s += __shfl_xor_sync(mask, s, 1, 8);
    s += __shfl_xor_sync(mask, s, 2, 8); /* lanes 0-3: elements 0..15; 4-7: 16..31 */
    const int s_hi = __shfl_sync(mask, s, 4, 8);
    if (l == 0) xm[g] = qx_meta{d, (short)s, (short)s_hi};
}

/* the int8 workspace: xq (CU_QGEMV_MAX_T, K) then xm at a 256-byte boundary */
static size_t qx_q_bytes(int64_t K) { return ((size_t)CU_QGEMV_MAX_T * (size_t)K + 255) & ~(size_t)255; }
static size_t qx_bytes(int64_t K) { return qx_q_bytes(K) + (size_t)CU_QGEMV_MAX_T * (size_t)(K / 32) * sizeof(qx_meta); }

vllm_status cu_qx_reserve(cu_state *cu, int64_t K) {
    return cu_buf_reserve(cu, &cu->qx_ws, qx_bytes(K), "linear: int8 activations of the block GEMV");
}

bool cu_qx_buffers(cu_state *cu, int64_t K, int8_t **xq, qx_meta **xm) {
    if (cu->qgemv_f32x || cu_qx_reserve(cu, K) != VLLM_OK) return false;
    *xq = (int8_t *)cu->qx_ws.p;
    *xm = (qx_meta *)((uint8_t *)cu->qx_ws.p + qx_q_bytes(K));
    return true;
}

/* ---- the decode GEMV ---- */

struct qgv_args {
    const uint8_t *Q, *S;      /* the layer's device layout */
    int nb;                    /* blocks per row */
    const __nv_bfloat16 *x;    /* (T, K) BF16, rows xs apart */
    int64_t xs;
    void *y;                   /* (T, N) of dtype ydt, rows ys apart */
    int ydt;
    int64_t ys;
    const float *bias;         /* per weight row, or NULL */
    int T, N;                  /* tokens; outputs (the gated form: W has 2N rows) */
    int ks;                    /* warps per row: 1, 2, 4 or 8 */
    bool acc;                  /* y += */
    int act;                   /* the gated form's activation */
    const int8_t *xq;          /* XQ: x quantized (T, K), rows xqs apart, and its meta (T, K / 32), xms apart */
    const qx_meta *xm;
    int64_t xqs, xms;
};

// x (T, K) BF16 (XQ: its int8 quantization), W (N or 2N, K) blocks -> y (T, N) BF16 or F32 (+ bias); T <= TT;
// NR = 2: the gated form
template <class QT, int TT, int NR, bool XQ>
__global__ void __launch_bounds__(QG_THREADS) k_qgemv(qgv_args a) {
    constexpr int U = NR == 1 ? QT::U : (QT::U > 1 ? QT::U / 2 : 1);
    __shared__ float red[QG_WARPS][NR][TT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int KS = a.ks, rw = warp / KS, ks = warp - rw * KS;
    const int n = blockIdx.x * (QG_WARPS / KS) + rw;
    const bool valid = n < a.N;
    const int upr = a.nb * QT::UPB, step = 32 * KS, u0 = ks * 32 + lane;
    const uint8_t *Qr[NR], *Sr[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int64_t b0 = (int64_t)(valid ? n + r * a.N : 0) * a.nb;
        Qr[r] = a.Q + b0 * QT::QB;
        Sr[r] = a.S + b0 * QT::SB;
    }
    auto load = [&](typename QT::raw(&dst)[NR], int u) {
        const int blk = u / QT::UPB, j = u % QT::UPB;
#pragma unroll
        for (int r = 0; r < NR; r++)
            QT::template load<LD_GLOBAL>(dst[r], Qr[r] + (int64_t)blk * QT::QB, Sr[r] + (int64_t)blk * QT::SB, j);
    };
    pdl_launch();
    typename QT::raw cur[U][NR];
#pragma unroll
    for (int i = 0; i < U; i++) {
        const int u = u0 + i * step;
        if (valid && u < upr) load(cur[i], u);
    }
    pdl_wait(); /* x (and y when accumulating) come from the previous kernels */
    float acc[NR][TT];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;
    for (int base = 0; base < upr; base += U * step) {
        typename QT::raw nxt[U][NR];
#pragma unroll
        for (int i = 0; i < U; i++) {
            const int u = u0 + base + (U + i) * step;
            if (valid && u < upr) load(nxt[i], u);
        }
#pragma unroll
        for (int i = 0; i < U; i++) {
            const int u = u0 + base + i * step;
            if (valid && u < upr) {
                const int blk = u / QT::UPB, j = u % QT::UPB;
                const __nv_bfloat16 *xb = a.x + (int64_t)blk * QT::ELEMS;
                const int eb = blk * QT::ELEMS;
#pragma unroll
                for (int r = 0; r < NR; r++)
                    QT::decode(cur[i][r], j,
                               [&](int e0, uint32_t q0, uint32_t q1, uint32_t q2, uint32_t q3, float sa, float sb) {
                                   const uint32_t q[4] = {q0, q1, q2, q3};
                                   if constexpr (XQ) {
                                       const int e = eb + e0;
                                       grp_dot8<TT, QT::MIN>(q, sa, sb, a.xq + e, a.xm + (e >> 5), (e >> 4) & 1,
                                                             a.xqs, a.xms, a.T, acc[r]);
                                   } else {
                                       grp_dot<TT, QT::MIN>(q, sa, sb, xb + e0, a.xs, a.T, acc[r]);
                                   }
                               });
            }
        }
#pragma unroll
        for (int i = 0; i < U; i++)
#pragma unroll
            for (int r = 0; r < NR; r++) cur[i][r] = nxt[i][r];
    }
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = cu_warp_sum(acc[r][t]);
    if (KS > 1) { /* uniform over the CTA */
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int t = 0; t < TT; t++) red[warp][r][t] = acc[r][t];
        __syncthreads();
        if (ks == 0)
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    float s = 0.0f;
                    for (int q = 0; q < KS; q++) s += red[warp + q][r][t];
                    acc[r][t] = s;
                }
    }
    if (ks != 0 || !valid) return;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (lane == t && t < a.T) {
            float v = acc[0][t] + (a.bias ? a.bias[n] : 0.0f);
            if constexpr (NR == 2) v = cu_act(a.act, v) * (acc[NR - 1][t] + (a.bias ? a.bias[a.N + n] : 0.0f));
            const int64_t o = (int64_t)t * a.ys + n;
            cu_st(a.y, a.ydt, o, a.acc ? cu_ld(a.y, a.ydt, o) + v : v);
        }
    }
}

/* ---- dequantization: the prefill tiles ---- */

// dst (rows, K) BF16 = rows [r0, r0 + rows) of the layer (nb blocks per row), a unit per thread
template <class QT>
__global__ void k_qdequant(const uint8_t *Q, const uint8_t *S, int nb, int64_t r0, int64_t rows, __nv_bfloat16 *dst) {
    const int64_t upr = (int64_t)nb * QT::UPB, total = rows * upr, K = (int64_t)nb * QT::ELEMS;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / upr, rem = i - r * upr;
        const int64_t blk = (r0 + r) * nb + rem / QT::UPB;
        const int j = (int)(rem % QT::UPB);
        typename QT::raw raw;
        QT::template load<LD_GLOBAL>(raw, Q + blk * QT::QB, S + blk * QT::SB, j);
        __nv_bfloat16 *o = dst + r * K + (rem / QT::UPB) * QT::ELEMS;
        QT::decode(raw, j, [&](int e0, uint32_t q0, uint32_t q1, uint32_t q2, uint32_t q3, float sa, float sb) {
            const uint32_t q[4] = {q0, q1, q2, q3};
            float v[16];
            grp_exact<QT::MIN>(q, sa, sb, v);
            uint4 *op = (uint4 *)(o + e0);
            op[0] = f32_to_bf16x8(v);
            op[1] = f32_to_bf16x8(v + 8);
        });
    }
}

/* ---- the file's layout -> the device layout ---- */

// nblocks consecutive ggml blocks at src -> Q, S (a byte per thread; load time only)
template <class QT>
__global__ void k_qrelayout(const uint8_t *src, int64_t nblocks, uint8_t *Q, uint8_t *S) {
    const int64_t n = nblocks * QT::BS;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t blk = i / QT::BS;
        bool s;
        const int off = QT::relayout((int)(i - blk * QT::BS), s);
        if (s) S[blk * QT::SB + off] = src[i];
        else Q[blk * QT::QB + off] = src[i];
    }
}

/* ---- rows in the file's layout (embedding, experts) ---- */

struct qraw_args {
    const uint8_t *src;        /* V rows pitch bytes apart */
    size_t pitch;
    int64_t V;
    const int32_t *ids;        /* (T) or NULL: row t */
    int64_t T;
    int nb;                    /* blocks per row */
    int chunk;                 /* blocks per shared-memory pass */
    void *out;                 /* (T, K) of dtype odt, rows os apart */
    int odt;
    int64_t os;
    cu_dev_err *err;
};

// out[t] = row ids[t] dequantized: a CTA per row; its blocks are copied into shared memory in the device
// layout, chunk blocks at a time, and decoded from there
template <class QT>
__global__ void k_qraw_rows(qraw_args a) {
    extern __shared__ __align__(16) uint8_t qsm[];
    uint8_t *sq = qsm, *ss = qsm + (size_t)a.chunk * QT::QB;
    pdl_launch();
    pdl_wait();
    for (int64_t t = blockIdx.x; t < a.T; t += gridDim.x) {
        const int64_t row = a.ids ? (int64_t)a.ids[t] : t;
        if (row < 0 || row >= a.V) {
            if (threadIdx.x == 0) cu_report(a.err, CU_DEV_EMBED_ID, t, row, a.V);
            continue; /* uniform over the CTA */
        }
        const uint8_t *src = a.src + (size_t)row * a.pitch;
        for (int b0 = 0; b0 < a.nb; b0 += a.chunk) {
            const int nbc = a.nb - b0 < a.chunk ? a.nb - b0 : a.chunk;
            __syncthreads(); /* the previous chunk is decoded */
            const uint8_t *cs = src + (size_t)b0 * QT::BS;
            for (int i = threadIdx.x; i < nbc * QT::BS; i += blockDim.x) {
                const int blk = i / QT::BS;
                bool s;
                const int off = QT::relayout(i - blk * QT::BS, s);
                if (s) ss[blk * QT::SB + off] = cs[i];
                else sq[blk * QT::QB + off] = cs[i];
            }
            __syncthreads();
            for (int u = threadIdx.x; u < nbc * QT::UPB; u += blockDim.x) {
                const int blk = u / QT::UPB, j = u % QT::UPB;
                typename QT::raw raw;
                QT::template load<LD_ANY>(raw, sq + blk * QT::QB, ss + blk * QT::SB, j);
                const int64_t o = t * a.os + (int64_t)(b0 + blk) * QT::ELEMS;
                QT::decode(raw, j, [&](int e0, uint32_t q0, uint32_t q1, uint32_t q2, uint32_t q3, float sa, float sb) {
                    const uint32_t q[4] = {q0, q1, q2, q3};
                    float v[16];
                    grp_exact<QT::MIN>(q, sa, sb, v);
#pragma unroll
                    for (int i = 0; i < 16; i++) cu_st(a.out, a.odt, o + e0 + i, v[i]);
                });
            }
        }
    }
}

/* ---- per-type kernel tables ---- */

typedef void (*qgemv_kernel)(qgv_args);

struct qkern {
    dtype dt;
    int bs, elems, qb, sb, upb;
    qgemv_kernel gemv[4][2][2]; /* [T class: 1, 2, 4, 8][gated][int8 x] */
    void (*dequant)(const uint8_t *, const uint8_t *, int, int64_t, int64_t, __nv_bfloat16 *);
    void (*relayout)(const uint8_t *, int64_t, uint8_t *, uint8_t *);
    void (*raw_rows)(qraw_args);
};

template <class QT>
static const qkern *qkern_make(dtype dt) {
    static const qkern k = {
        dt, QT::BS, QT::ELEMS, QT::QB, QT::SB, QT::UPB,
        {{{k_qgemv<QT, 1, 1, false>, k_qgemv<QT, 1, 1, true>}, {k_qgemv<QT, 1, 2, false>, k_qgemv<QT, 1, 2, true>}},
         {{k_qgemv<QT, 2, 1, false>, k_qgemv<QT, 2, 1, true>}, {k_qgemv<QT, 2, 2, false>, k_qgemv<QT, 2, 2, true>}},
         {{k_qgemv<QT, 4, 1, false>, k_qgemv<QT, 4, 1, true>}, {k_qgemv<QT, 4, 2, false>, k_qgemv<QT, 4, 2, true>}},
         {{k_qgemv<QT, 8, 1, false>, k_qgemv<QT, 8, 1, true>}, {k_qgemv<QT, 8, 2, false>, k_qgemv<QT, 8, 2, true>}}},
        k_qdequant<QT>, k_qrelayout<QT>, k_qraw_rows<QT>,
    };
    return &k;
}

/* the kernels of a block dtype; NULL for one they do not take */
static const qkern *qk(dtype dt) {
    switch (dt) {
    case DTYPE_Q8_0: return qkern_make<QK_Q8_0>(dt);
    case DTYPE_Q4_0: return qkern_make<QK_Q4_0>(dt);
    case DTYPE_Q4_1: return qkern_make<QK_Q4_1>(dt);
    case DTYPE_Q5_0: return qkern_make<QK_Q5_0>(dt);
    case DTYPE_Q5_1: return qkern_make<QK_Q5_1>(dt);
    case DTYPE_Q2_K: return qkern_make<QK_Q2_K>(dt);
    case DTYPE_Q3_K: return qkern_make<QK_Q3_K>(dt);
    case DTYPE_Q4_K: return qkern_make<QK_Q4_K>(dt);
    case DTYPE_Q5_K: return qkern_make<QK_Q5_K>(dt);
    case DTYPE_Q6_K: return qkern_make<QK_Q6_K>(dt);
    case DTYPE_IQ4_NL: return qkern_make<QK_IQ4_NL>(dt);
    case DTYPE_IQ4_XS: return qkern_make<QK_IQ4_XS>(dt);
    case DTYPE_MXFP4: return qkern_make<QK_MXFP4>(dt);
    default: return NULL;
    }
}

uint32_t cu_qtypes(void) {
    uint32_t m = 0;
    for (int d = DTYPE_FIRST_BLOCK; d < DTYPE_COUNT; d++) {
        const qkern *k = qk((dtype)d);
        /* the traits must agree with tensor.h's sizes (ggml's) */
        if (k && (size_t)k->bs == dtype_size((dtype)d) && k->elems == dtype_block((dtype)d)) m |= 1u << (d - DTYPE_FIRST_BLOCK);
    }
    return m;
}

size_t cu_qrow_bytes(dtype dt, int64_t K) { return (size_t)(K / dtype_block(dt)) * dtype_size(dt); }

/* ---- weights ---- */

struct cu_qweight {
    const qkern *k;
    int64_t rows, K, nb;
    uint8_t *mem;              /* one allocation: Q, then S at a 256-byte boundary */
    uint8_t *Q, *S;
    size_t bytes;
};

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

#define CU_QSTAGE_BYTES ((size_t)64 << 20) /* the file's rows are uploaded through this much device memory */

vllm_status cu_qweight_create(cu_state *cu, const tensor *const *w, int n, int64_t in, int64_t total,
                              cu_qweight **out) {
    *out = NULL;
    const dtype dt = w[0]->dtype;
    const qkern *k = qk(dt);
    if (!k || !cu_qtype_ok(dt)) return vt_error(VLLM_ERR_UNSUPPORTED, "linear: weight dtype %s", dtype_name(dt));
    if (in % k->elems || in / k->elems > INT_MAX)
        return vt_error(VLLM_ERR_INVALID_ARG, "linear: %s rows of %lld elements are not whole blocks of %d", dtype_name(dt),
                        (long long)in, k->elems);
    cu_qweight *qw = (cu_qweight *)calloc(1, sizeof *qw);
    if (!qw) return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    qw->k = k;
    qw->rows = total;
    qw->K = in;
    qw->nb = in / k->elems;
    const size_t nblk = (size_t)total * (size_t)qw->nb, rb = (size_t)qw->nb * (size_t)k->bs;
    const size_t qbytes = align256(nblk * (size_t)k->qb), sbytes = nblk * (size_t)k->sb;
    qw->bytes = qbytes + sbytes;
    vllm_status st = VLLM_OK;
    uint8_t *stage = NULL;
    int64_t stage_rows = (int64_t)(CU_QSTAGE_BYTES / rb);
    if (stage_rows < 1) stage_rows = 1;
    bool counted = false;
    cudaError_t e = cudaMalloc((void **)&qw->mem, qw->bytes);
    if (e == cudaSuccess) {
        int64_t max_rows = 0;
        for (int i = 0; i < n; i++) max_rows = w[i]->shape[0] > max_rows ? w[i]->shape[0] : max_rows;
        if (stage_rows > max_rows) stage_rows = max_rows;
        e = cudaMalloc((void **)&stage, (size_t)(stage_rows > 0 ? stage_rows : 1) * rb);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        st = vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for a (%lld, %lld) %s weight (%zu bytes)",
                      (long long)total, (long long)in, dtype_name(dt), qw->bytes);
        goto done;
    }
    cu->bytes_allocated += qw->bytes;
    counted = true;
    qw->Q = qw->mem;
    qw->S = qw->mem + qbytes;
    e = cudaMemsetAsync(qw->S, 0, sbytes, cu->stream); /* the padding bytes */
    {
        int64_t row0 = 0;
        for (int i = 0; i < n && e == cudaSuccess; i++) {
            const tensor *wi = w[i];
            const int64_t rows = wi->shape[0], stride = wi->row_stride ? wi->row_stride : in;
            const size_t pitch = cu_qrow_bytes(dt, stride);
            for (int64_t c0 = 0; c0 < rows && e == cudaSuccess; c0 += stage_rows) {
                const int64_t cr = rows - c0 < stage_rows ? rows - c0 : stage_rows;
                e = cu_h2d_2d(cu, stage, rb, (const uint8_t *)wi->data + (size_t)c0 * pitch, pitch, rb, (size_t)cr, dt);
                if (e != cudaSuccess) break;
                const int64_t nbk = cr * qw->nb, b0 = (row0 + c0) * qw->nb;
                k->relayout<<<cu_grid(nbk * k->bs, 256), 256, 0, cu->stream>>>(stage, nbk, qw->Q + b0 * k->qb,
                                                                                 qw->S + b0 * k->sb);
                e = cudaGetLastError();
                if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream); /* the stage is reused */
            }
            row0 += rows;
        }
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        st = vt_error(VLLM_ERR_BACKEND, "linear: upload of a %s weight failed: %s", dtype_name(dt), cudaGetErrorString(e));
    }
done:
    if (stage) cudaFree(stage);
    if (st != VLLM_OK) {
        if (counted) cu->bytes_allocated -= qw->bytes;
        cu_qweight_free(qw);
        return st;
    }
    *out = qw;
    return VLLM_OK;
}

void cu_qweight_free(cu_qweight *qw) {
    if (!qw) return;
    if (qw->mem) cudaFree(qw->mem);
    free(qw);
}

/* ---- GEMV ---- */

bool cu_qgemv_fits(const cu_qweight *qw, const tensor *x, int64_t T) {
    return T <= CU_QGEMV_MAX_T && x->dtype == DTYPE_BF16 && ((uintptr_t)x->data % 16) == 0 &&
           tensor_row_stride(x) % 8 == 0 && tensor_row_stride(x) <= INT_MAX && qw->rows <= INT_MAX &&
           qw->nb * qw->k->upb <= INT_MAX / 64;
}

void cu_qgemv(cu_state *cu, const cu_qweight *qw, const float *bias, const tensor *x, tensor *y, bool glu, int act,
              bool acc, bool quantize_x) {
    const qkern *k = qw->k;
    const int T = (int)cu_rows(x);
    if (T == 0 || qw->rows == 0) return;
    const int ti = T <= 1 ? 0 : T == 2 ? 1 : T <= 4 ? 2 : 3;
    const bool xq = !cu->qgemv_f32x;
    const qgemv_kernel kern = k->gemv[ti][glu ? 1 : 0][xq ? 1 : 0];
    qgv_args a = {};
    if (xq) {
        if (cu_qx_reserve(cu, qw->K) != VLLM_OK) return; /* (reserved by linear_create: only a recording fails) */
        int8_t *xqp = (int8_t *)cu->qx_ws.p;
        qx_meta *xm = (qx_meta *)(xqp + qx_q_bytes(qw->K));
        if (quantize_x) {
            const int64_t threads = (int64_t)T * (qw->K / 32) * 8;
            if (!cu_launch(cu, "linear (block gemv: activations to int8)", true, k_qx, dim3((unsigned)((threads + 255) / 256)),
                           dim3(256), 0, (const __nv_bfloat16 *)x->data, (int64_t)tensor_row_stride(x), T, (int)qw->K,
                           xqp, xm))
                return;
        }
        a.xq = xqp;
        a.xm = xm;
        a.xqs = qw->K;
        a.xms = qw->K / 32;
    }
    a.Q = qw->Q;
    a.S = qw->S;
    a.nb = (int)qw->nb;
    a.x = (const __nv_bfloat16 *)x->data;
    a.xs = tensor_row_stride(x);
    a.y = y->data;
    a.ydt = (int)y->dtype;
    a.ys = tensor_row_stride(y);
    a.bias = bias;
    a.T = T;
    a.N = (int)(glu ? qw->rows / 2 : qw->rows);
    a.acc = acc;
    a.act = act;
    /* warps per row: enough rows x splits to fill the resident warps, each lane at least 2 units (1 when pinned) */
    int *occ = &cu->qgemv_occ[k->dt - DTYPE_FIRST_BLOCK][ti][glu ? 1 : 0][xq ? 1 : 0];
    if (*occ == 0) {
        int nb = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, QG_THREADS, 0) != cudaSuccess || nb < 1) {
            cudaGetLastError();
            nb = 1;
        }
        *occ = nb;
    }
    const int64_t resident = (int64_t)*occ * cu->num_sms * QG_WARPS, upr = qw->nb * k->upb;
    /* split while the rows leave resident warps idle and every lane keeps 2 units (pinned: 1) */
    int ks = 1;
    if (cu->qgemv_ks) {
        while (ks < cu->qgemv_ks && upr >= 32 * (int64_t)(2 * ks)) ks *= 2;
    } else {
        while (ks < QG_WARPS && (int64_t)a.N * ks < resident && upr >= 64 * (int64_t)(2 * ks)) ks *= 2;
    }
    a.ks = ks;
    const int64_t rpc = QG_WARPS / ks, grid = ((int64_t)a.N + rpc - 1) / rpc;
    cu_launch(cu, "linear (block gemv)", true, kern, dim3((unsigned)grid), dim3(QG_THREADS), 0, a);
}

/* ---- prefill tiles ---- */

int64_t cu_qtile_rows(const cu_qweight *qw) {
    int64_t t = (int64_t)(CU_QTILE_BYTES / ((size_t)qw->K * 2));
    if (t >= 128) t -= t % 128; /* tiles start 256-byte aligned in y */
    if (t < 1) t = 1;
    return t < qw->rows ? t : qw->rows;
}

size_t cu_qtile_bytes(const cu_qweight *qw) { return (size_t)cu_qtile_rows(qw) * (size_t)qw->K * 2; }

bool cu_qdequant(cu_state *cu, const cu_qweight *qw, int64_t r0, int64_t rows, __nv_bfloat16 *dst) {
    if (rows <= 0) return true;
    const qkern *k = qw->k;
    const int64_t units = rows * qw->nb * k->upb;
    const int64_t cap = (int64_t)cu->num_sms * 16;
    int64_t grid = (units + 255) / 256;
    if (grid > cap) grid = cap;
    k->dequant<<<(unsigned)grid, 256, 0, cu->stream>>>(qw->Q, qw->S, (int)qw->nb, r0, rows, dst);
    return cu_launched(cu, "linear (block dequantize)");
}

/* ---- raw rows ---- */

#define QRAW_SMEM (24 << 10)

bool cu_qraw_rows(cu_state *cu, const char *op, dtype dt, const void *src, size_t pitch, int64_t V,
                  const int32_t *ids, int64_t T, int64_t K, void *out, dtype odt, int64_t os, bool pdl) {
    const qkern *k = qk(dt);
    if (!k || K % k->elems || K / k->elems > INT_MAX) {
        cu_fail(cu, "%s: %s rows of %lld elements are not supported", op, dtype_name(dt), (long long)K);
        return false;
    }
    if (T == 0 || K == 0) return true;
    qraw_args a = {};
    a.src = (const uint8_t *)src;
    a.pitch = pitch;
    a.V = V;
    a.ids = ids;
    a.T = T;
    a.nb = (int)(K / k->elems);
    a.chunk = QRAW_SMEM / (k->qb + k->sb);
    if (a.chunk > a.nb) a.chunk = a.nb;
    a.out = out;
    a.odt = (int)odt;
    a.os = os;
    a.err = cu->derr_dev;
    const size_t smem = (size_t)a.chunk * (size_t)(k->qb + k->sb);
    return cu_launch(cu, op, pdl, k->raw_rows, dim3(cu_grid(T, 1)), dim3(256), smem, a);
}

// table (V, D) of a block dtype (the file's layout), ids (T) -> out (T, D)
void cu_qembedding(cu_state *cu, const tensor *table, const tensor *ids, tensor *out) {
    const dtype dt = table->dtype;
    if (!cu_qtype_ok(dt)) {
        cu_fail(cu, "embedding: table dtype %s is not supported", dtype_name(dt));
        return;
    }
    const int64_t blk = dtype_block(dt);
    if (table->ndim != 2 || !table->data || table->shape[0] < 0 || table->shape[1] <= 0 || table->shape[1] % blk ||
        (table->row_stride && (table->row_stride < table->shape[1] || table->row_stride % blk))) {
        cu_fail(cu, "embedding: a %s table must be a 2-D (V, D) tensor of whole blocks of %lld", dtype_name(dt),
                (long long)blk);
        return;
    }
    if (!cu_check_vec(cu, "embedding", "ids", ids, CU_DT(DTYPE_I32), -1)) return;
    const int64_t T = tensor_numel(ids), V = table->shape[0], D = table->shape[1];
    if (!cu_check_mat(cu, "embedding", "out", out, CU_FLOAT, T, D) || T == 0) return;
    cu_qraw_rows(cu, "embedding", dt, table->data, cu_qrow_bytes(dt, tensor_row_stride(table)), V,
                 (const int32_t *)ids->data, T, D, out->data, out->dtype, tensor_row_stride(out), true);
}
