/*
 * ops_linear_fp8.cu: linear layers on FP8_B128 weights (block-scaled FP8 checkpoints, tensor/fp8.h) on the GPU.
 *
 * A layer keeps W (N, K) as E4M3 bytes, row-major, and its scales (N, K / 128) F32. x (T, K) BF16 is quantized
 * per token and 128 as vLLM's per_token_group_quant_fp8 (s = max(max|x|, 1e-10) / 448, q = e4m3 of x / s, ties to
 * even, saturating), then
 *   - T <= CU_F8_GEMV_MAX_T (decode): k_f8_mma, on the FP8 tensor cores (sm_89+; mma.sync m16n8k32 E4M3, the
 *     products of a 128-block summed in F32 and scaled by s_x s_w: vLLM's arithmetic up to the order of the
 *     additions), x quantized by each CTA into shared memory (no separate launch), the gated product
 *     act(gate) * up or the residual add in its epilogue (linear_fused); k_f8_gemv, a warp per row on the CUDA
 *     cores, before sm_89 or under VLLM_CUDA_F8_GEMV=warp;
 *   - larger T (prefill): x quantized by k_f8_actq, then cuBLASLt's FP8 GEMM with a scale per 128 elements of
 *     each x row (VEC128_32F) and, for W, per 128 elements of each row (VEC128: cuBLAS 13 has no sm_90
 *     algorithm for it) or per 128 x 128 block (BLK128x128_32F, when the rows of every 128 share their scales,
 *     as in block-FP8 checkpoints); where it has no algorithm (small shapes, 1 x 128 weight scales) or under
 *     VLLM_CUDA_F8_GEMM=tiles, x's quantized values dequantized to BF16, W in tiles of rows dequantized to BF16
 *     likewise, and cuBLAS's BF16 GEMM: vLLM's result up to BF16 rounding of the two operands (2^-9 each).
 * The CPU reference is src/cpu/ops_fp8.c (tests/cuda/test_cuda_blocks.c test_fp8 compares them).
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

#include <cublasLt.h>

extern "C" {
#include "core/error.h"
#include "core/log.h"
#include "tensor/fp8.h"
}

#define F8_WARPS 8
static void f8m_prepare(cu_state *cu);

#define F8_TILE_BYTES ((size_t)32 << 20) /* the prefill's dequantized weight tile, at most */

struct cu_f8w {
    int64_t rows, K;
    uint8_t *q;  /* (rows, K) E4M3 */
    float *s;    /* (rows, K / 128): the GEMV's */
    float *sg;   /* the cuBLASLt GEMM's layout of the same scales (f8_scales_mn: (K / 128, rows), else NULL: s) */
    float *s2;   /* rows whose scales agree in every group of 128 (block-FP8 checkpoints' 128 x 128 blocks): one
                    scale per 128 x 128 block, (K / 128, ceil(rows / 128)) (MN-major; K-major under
                    VLLM_CUDA_F8_SCALES=k), for cuBLASLt's BLK128x128 mode; else NULL */
};

/* VLLM_CUDA_F8_SCALES=k: the cuBLASLt GEMM's scales K-major ((rows, K / 128), as s) rather than MN-major
 * ((K / 128, rows): PyTorch's "outer-dim-major" 1x128 scales) */
static bool f8_scales_mn(void) {
    const char *e = getenv("VLLM_CUDA_F8_SCALES");
    return !(e && !strcmp(e, "k"));
}

int64_t cu_f8w_tile_rows(const cu_f8w *w) {
    int64_t t = (int64_t)(F8_TILE_BYTES / ((size_t)w->K * 2));
    if (t >= 128) t -= t % 128; /* tiles start 256-byte aligned in y (as cu_qtile_rows) */
    if (t < 1) t = 1;
    return t < w->rows ? t : w->rows;
}

size_t cu_f8w_tile_bytes(const cu_f8w *w) { return (size_t)cu_f8w_tile_rows(w) * (size_t)w->K * 2; }

void cu_f8w_free(cu_f8w *w) {
    if (!w) return;
    if (w->q) cudaFree(w->q);
    if (w->s) cudaFree(w->s);
    if (w->sg) cudaFree(w->sg);
    if (w->s2) cudaFree(w->s2);
    free(w);
}

vllm_status cu_f8w_create(cu_state *cu, const tensor *const *parts, int n, int64_t K, int64_t rows, cu_f8w **out) {
    *out = NULL;
    if (K % FP8_B) return vt_error(VLLM_ERR_INVALID_ARG, "linear: FP8_B128 rows of %lld elements", (long long)K);
    cu_f8w *w = (cu_f8w *)calloc(1, sizeof *w);
    if (!w) return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    w->rows = rows;
    w->K = K;
    const int64_t G = K / FP8_B;
    const size_t qb = (size_t)rows * (size_t)K, sb = (size_t)rows * (size_t)G * sizeof(float);
    cudaError_t e = cudaMalloc((void **)&w->q, qb ? qb : 1);
    if (e == cudaSuccess) e = cudaMalloc((void **)&w->s, sb ? sb : 4);
    if (e == cudaSuccess && f8_scales_mn()) e = cudaMalloc((void **)&w->sg, sb ? sb : 4);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_f8w_free(w);
        return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for a (%lld, %lld) FP8 weight", (long long)rows,
                        (long long)K);
    }
    cu->bytes_allocated += qb + (w->sg ? 2 : 1) * sb;
    f8m_prepare(cu);
    /* each part's blocks split on the host into the bytes and the scales, then uploaded */
    int64_t maxr = 0;
    for (int i = 0; i < n; i++)
        if (parts[i]->shape[0] > maxr) maxr = parts[i]->shape[0];
    uint8_t *hq = (uint8_t *)malloc((size_t)maxr * (size_t)K + 1);
    float *hs = (float *)malloc((size_t)maxr * (size_t)G * sizeof(float) + 4);
    vllm_status st = hq && hs ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    int64_t r0 = 0;
    for (int i = 0; i < n && st == VLLM_OK; i++) {
        const tensor *p = parts[i];
        const int64_t pr = p->shape[0];
        const fp8_block *b = (const fp8_block *)p->data;
        for (int64_t r = 0; r < pr; r++)
            for (int64_t g = 0; g < G; g++) {
                memcpy(hq + (size_t)r * (size_t)K + (size_t)g * FP8_B, b[r * G + g].q, FP8_B);
                hs[r * G + g] = fp8_block_scale(&b[r * G + g]);
            }
        e = cudaMemcpy(w->q + (size_t)r0 * (size_t)K, hq, (size_t)pr * (size_t)K, cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(w->s + (size_t)r0 * (size_t)G, hs, (size_t)pr * (size_t)G * sizeof(float), cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cudaGetLastError();
            st = vt_error(VLLM_ERR_BACKEND, "linear: FP8 weight upload failed: %s", cudaGetErrorString(e));
        }
        r0 += pr;
    }
    if (st == VLLM_OK && w->sg) { /* the transposed scales, from the device copy */
        float *all = (float *)malloc(sb + 4), *tr = (float *)malloc(sb + 4);
        e = all && tr ? cudaMemcpy(all, w->s, sb, cudaMemcpyDeviceToHost) : cudaErrorMemoryAllocation;
        for (int64_t r = 0; e == cudaSuccess && r < rows; r++)
            for (int64_t g = 0; g < G; g++) tr[g * rows + r] = all[r * G + g];
        if (e == cudaSuccess) e = cudaMemcpy(w->sg, tr, sb, cudaMemcpyHostToDevice);
        /* one scale per 128 x 128 block when the rows of each 128 agree */
        bool uni = e == cudaSuccess;
        for (int64_t r = 0; uni && r < rows; r++)
            uni = !memcmp(all + r * G, all + (r / 128 * 128) * G, (size_t)G * sizeof(float));
        const int64_t RB = (rows + 127) / 128;
        if (uni && cudaMalloc((void **)&w->s2, (size_t)(RB * G) * sizeof(float)) == cudaSuccess) {
            const bool mn = f8_scales_mn();
            for (int64_t rb = 0; rb < RB; rb++)
                for (int64_t g = 0; g < G; g++) tr[mn ? g * RB + rb : rb * G + g] = all[rb * 128 * G + g];
            e = cudaMemcpy(w->s2, tr, (size_t)(RB * G) * sizeof(float), cudaMemcpyHostToDevice);
            cu->bytes_allocated += (size_t)(RB * G) * sizeof(float);
        } else {
            cudaGetLastError();
            w->s2 = NULL;
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            st = vt_error(VLLM_ERR_BACKEND, "linear: FP8 scale upload failed: %s", cudaGetErrorString(e));
        }
        free(all);
        free(tr);
    }
    free(hq);
    free(hs);
    if (st != VLLM_OK) {
        cu_f8w_free(w);
        return st;
    }
    *out = w;
    return VLLM_OK;
}

/* ---- kernels ---- */

__device__ __forceinline__ float2 f8x2_to_f2(uint16_t v) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
}

/* sum over 16 byte pairs of e4m3(a_i) * e4m3(b_i) */
__device__ __forceinline__ float f8_dot16(const uint4 &a, const uint4 &b) {
    const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 a0 = f8x2_to_f2((uint16_t)(av[i] & 0xffff)), a1 = f8x2_to_f2((uint16_t)(av[i] >> 16));
        const float2 b0 = f8x2_to_f2((uint16_t)(bv[i] & 0xffff)), b1 = f8x2_to_f2((uint16_t)(bv[i] >> 16));
        s = fmaf(a0.x, b0.x, s);
        s = fmaf(a0.y, b0.y, s);
        s = fmaf(a1.x, b1.x, s);
        s = fmaf(a1.y, b1.y, s);
    }
    return s;
}

/* One group of 128 BF16 values (a warp, 4 per lane) quantized as vLLM's per_token_group_quant_fp8: lane's 4
 * E4M3 bytes packed into the return value, the group's scale d = max(max|x|, 1e-10) / 448 in *d */
__device__ __forceinline__ uint32_t f8_quant_group(const __nv_bfloat16 *xg, int lane, float *d) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = __bfloat162float(xg[lane * 4 + i]);
    float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    *d = fmaxf(m, FP8_ACT_EPS) / FP8_E4M3_MAX;
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float c = fminf(fmaxf(v[i] / *d, -FP8_E4M3_MAX), FP8_E4M3_MAX);
        packed |= (uint32_t)__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3) << (8 * i);
    }
    return packed;
}

// x (T, K) BF16 rows xs apart -> q (T, K) E4M3, s: the scale of (t, g) at s[t st + g sg]; a warp per group of
// 128 (4 per lane)
__global__ void k_f8_actq(const __nv_bfloat16 *x, int64_t xs, int T, int K, uint8_t *q, float *s, int64_t st,
                          int64_t sg) {
    const int G = K / FP8_B;
    const int64_t grp = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (grp >= (int64_t)T * G) return;
    const int t = (int)(grp / G), g = (int)(grp % G);
    float d;
    const uint32_t packed = f8_quant_group(x + (int64_t)t * xs + (int64_t)g * FP8_B, lane, &d);
    *(uint32_t *)(q + (int64_t)t * K + (int64_t)g * FP8_B + lane * 4) = packed;
    if (lane == 0) s[(int64_t)t * st + (int64_t)g * sg] = d;
}

/* ---- the decode GEMV on FP8 tensor cores (sm_89+) ----
 *
 * y (T <= 8, N) = x W^T by mma.sync m16n8k32 E4M3 x E4M3 -> F32: A = 16 rows of W (plain: rows r0 .. r0 + 15;
 * gated: 8 gate rows n0 .. n0 + 7 then their 8 up rows N + n0 ..), B = the T tokens' quantized x (n8: token =
 * column, zero beyond T). The k order inside an MMA is free as long as A and B agree: lane (g = lane / 4,
 * tig = lane % 4) loads 16 contiguous bytes of its rows g and g + 8 at k = 64 h + 16 tig of a 128-chunk (h = 0,
 * 1) and 16 bytes of token g's x at the same k, and hands their words to two MMAs (words 0, 1 as fragment
 * registers {a0, a2} / {b0, b1} of the first, words 2, 3 of the second), so every load is a 16-byte one and
 * a row's 4 lanes read 64 contiguous bytes. A 128-chunk is one scale block: its 4 MMAs accumulate from zero
 * (exact products, F32 sums over 128: DeepSeek-V3's promotion interval), then s_w s_x scale it into the
 * lane's F32 totals (rows g, g + 8 x tokens 2 tig, 2 tig + 1).
 * A CTA of F8M_WARPS warps takes one 16-row tile, warp w the chunks w, w + F8M_WARPS, ..., two chunks ahead
 * in flight (loaded before pdl_wait: weights are constant); x is quantized per 128 into shared memory by the
 * CTA itself first (f8_quant_group, k_f8_actq's arithmetic: no separate launch); the warps' totals meet in
 * shared memory, and warp 0 adds bias / y (accumulate) or, gated, writes act(gate) * up. */
#define F8M_WARPS 8
#define F8M_XPAD 64 /* bytes after each token's row of quantized x in shared memory: conflict-free B loads */
#define F8M_SMEM_MAX (200 << 10)

static size_t f8m_smem(int64_t T, int64_t K) {
    return (size_t)T * (size_t)(K + F8M_XPAD) + (size_t)T * (size_t)(K / FP8_B) * sizeof(float) +
           (size_t)2 * F8M_WARPS * 32 * 4 * sizeof(float);
}

__device__ __forceinline__ void f8_mma(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
    __trap(); /* cu->f8_mma is false below sm_89: never launched */
#endif
}

/* chunk c of rows a, b: w[0], w[1] row a's bytes 16 tig and 64 + 16 tig, w[2], w[3] row b's */
__device__ __forceinline__ void f8m_load(uint4 *w, const uint8_t *wa, const uint8_t *wb, int c) {
    const int64_t o = (int64_t)c * FP8_B;
    w[0] = __ldcs((const uint4 *)(wa + o));
    w[1] = __ldcs((const uint4 *)(wa + o + 64));
    w[2] = __ldcs((const uint4 *)(wb + o));
    w[3] = __ldcs((const uint4 *)(wb + o + 64));
}

/* the CTA's prologue: x (T, K) quantized per 128 into xq (rows XS apart) and xsc (T, G), 16 threads per group of
 * 128 (8 values each: f8_quant_group's arithmetic), F8M_PRE groups per thread loaded before any is used */
#define F8M_PRE 4
__device__ __forceinline__ void f8m_quantize_x(const __nv_bfloat16 *__restrict__ x, int64_t xs, int T, int K,
                                               uint8_t *xq, int XS, float *xsc) {
    const int G = K / FP8_B, nG = T * G, sub = threadIdx.x & 15, slot = threadIdx.x >> 4;
    constexpr int SLOTS = F8M_WARPS * 2;
    for (int base = 0; base < nG; base += SLOTS * F8M_PRE) {
        uint4 v[F8M_PRE];
#pragma unroll
        for (int r = 0; r < F8M_PRE; r++) {
            const int grp = base + r * SLOTS + slot, t = grp / G, gg = grp - t * G;
            v[r] = grp < nG ? __ldg((const uint4 *)(x + (int64_t)t * xs + (int64_t)gg * FP8_B) + sub)
                            : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int r = 0; r < F8M_PRE; r++) {
            const int grp = base + r * SLOTS + slot, t = grp / G, gg = grp - t * G;
            float f[8];
            bf16x8_to_f32(v[r], f);
            float m = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) m = fmaxf(m, fabsf(f[i]));
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            const float d = fmaxf(m, FP8_ACT_EPS) / FP8_E4M3_MAX;
            uint32_t lo = 0, hi = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                lo |= (uint32_t)__nv_cvt_float_to_fp8(fminf(fmaxf(f[i] / d, -FP8_E4M3_MAX), FP8_E4M3_MAX),
                                                      __NV_SATFINITE, __NV_E4M3) << (8 * i);
                hi |= (uint32_t)__nv_cvt_float_to_fp8(fminf(fmaxf(f[4 + i] / d, -FP8_E4M3_MAX), FP8_E4M3_MAX),
                                                      __NV_SATFINITE, __NV_E4M3) << (8 * i);
            }
            if (grp < nG) {
                *(uint2 *)(xq + (size_t)t * XS + (size_t)gg * FP8_B + sub * 8) = make_uint2(lo, hi);
                if (sub == 0) xsc[t * G + gg] = d;
            }
        }
    }
}

template <bool GLU>
__global__ void __launch_bounds__(F8M_WARPS * 32) k_f8_mma(const uint8_t *__restrict__ W, const float *__restrict__ S,
                                                           int R, int K, const __nv_bfloat16 *__restrict__ x,
                                                           int64_t xs, int T, const float *__restrict__ bias, void *y,
                                                           int ydt, int64_t ys, bool acc, int act) {
    extern __shared__ __align__(16) uint8_t f8m_sm[];
    const int G = K / FP8_B, XS = K + F8M_XPAD;
    uint8_t *xq = f8m_sm;                                      /* (T, XS) */
    float *xsc = (float *)(f8m_sm + (size_t)T * XS);           /* (T, G) */
    float *red = xsc + (size_t)T * G;                          /* (2, F8M_WARPS, 32, 4): a tile's totals */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int NO = GLU ? R / 2 : R; /* outputs */
    const int tiles = GLU ? (NO + 7) / 8 : (R + 15) / 16;
    const int step = F8M_WARPS;
    const bool tok = g < T;
    const int t0 = 2 * tig, t1 = t0 + 1;
    const uint8_t *xr = xq + (size_t)(tok ? g : 0) * XS + tig * 16;
    uint4 b0[4], b1[4], b2[4];
    bool first = true;
    for (int tile = blockIdx.x, par = 0; tile < tiles; tile += gridDim.x, par ^= 1) {
        int oa, ob, ra, rb; /* the lane's A rows: output indices and W rows */
        if (GLU) {
            oa = ob = tile * 8 + g;
            ra = min(oa, NO - 1);
            rb = NO + ra;
        } else {
            oa = tile * 16 + g, ob = oa + 8;
            ra = min(oa, R - 1), rb = min(ob, R - 1);
        }
        const uint8_t *wa = W + (int64_t)ra * K + tig * 16, *wb = W + (int64_t)rb * K + tig * 16;
        const float *sa = S + (int64_t)ra * G, *sb = S + (int64_t)rb * G;
        int c = warp;
        if (c < G) f8m_load(b0, wa, wb, c);
        if (c + step < G) f8m_load(b1, wa, wb, c + step);
        if (first) { /* the first tile's weights are in flight: x now */
            first = false;
            pdl_launch();
            pdl_wait(); /* x (and y when accumulating) come from the previous kernels */
            f8m_quantize_x(x, xs, T, K, xq, XS, xsc);
            __syncthreads();
        }
        float tot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        auto chunk = [&](const uint4 *w, int cc) {
            uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
            if (tok) {
                x0 = *(const uint4 *)(xr + (size_t)cc * FP8_B);
                x1 = *(const uint4 *)(xr + (size_t)cc * FP8_B + 64);
            }
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            f8_mma(d, w[0].x, w[2].x, w[0].y, w[2].y, x0.x, x0.y);
            f8_mma(d, w[0].z, w[2].z, w[0].w, w[2].w, x0.z, x0.w);
            f8_mma(d, w[1].x, w[3].x, w[1].y, w[3].y, x1.x, x1.y);
            f8_mma(d, w[1].z, w[3].z, w[1].w, w[3].w, x1.z, x1.w);
            const float swa = __ldg(sa + cc), swb = __ldg(sb + cc);
            const float s0 = t0 < T ? xsc[t0 * G + cc] : 0.0f, s1 = t1 < T ? xsc[t1 * G + cc] : 0.0f;
            tot[0] = fmaf(d[0], swa * s0, tot[0]);
            tot[1] = fmaf(d[1], swa * s1, tot[1]);
            tot[2] = fmaf(d[2], swb * s0, tot[2]);
            tot[3] = fmaf(d[3], swb * s1, tot[3]);
        };
        /* three chunks in registers: the current one and two in flight */
        for (; c < G; c += 3 * step) {
            if (c + 2 * step < G) f8m_load(b2, wa, wb, c + 2 * step);
            chunk(b0, c);
            if (c + step >= G) break;
            if (c + 3 * step < G) f8m_load(b0, wa, wb, c + 3 * step);
            chunk(b1, c + step);
            if (c + 2 * step >= G) break;
            if (c + 4 * step < G) f8m_load(b1, wa, wb, c + 4 * step);
            chunk(b2, c + 2 * step);
        }
        float *rd = red + par * (F8M_WARPS * 32 * 4); /* double-buffered: one barrier per tile */
#pragma unroll
        for (int i = 0; i < 4; i++) rd[(warp * 32 + lane) * 4 + i] = tot[i];
        __syncthreads();
        if (warp) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v = 0.0f;
#pragma unroll
            for (int w2 = 0; w2 < F8M_WARPS; w2++) v += rd[(w2 * 32 + lane) * 4 + i];
            tot[i] = v;
        }
        if constexpr (GLU) {
            if (oa < NO) {
                const float bg = bias ? bias[oa] : 0.0f, bu = bias ? bias[NO + oa] : 0.0f;
                if (t0 < T) cu_st(y, ydt, (int64_t)t0 * ys + oa, cu_act(act, tot[0] + bg) * (tot[2] + bu));
                if (t1 < T) cu_st(y, ydt, (int64_t)t1 * ys + oa, cu_act(act, tot[1] + bg) * (tot[3] + bu));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int o = i < 2 ? oa : ob, t = i & 1 ? t1 : t0;
                if (o >= R || t >= T) continue;
                float v = tot[i];
                if (bias) v += bias[o];
                if (acc) v += cu_ld(y, ydt, (int64_t)t * ys + o);
                cu_st(y, ydt, (int64_t)t * ys + o, v);
            }
        }
    }
}

// y (T, N) (+)= x W^T (+ bias): a warp per row n, 16 bytes per lane per step; T <= TT
template <int TT>
__global__ void __launch_bounds__(F8_WARPS * 32) k_f8_gemv(const uint8_t *__restrict__ W, const float *__restrict__ S,
                                                           int N, int K, const uint8_t *__restrict__ xq,
                                                           const float *__restrict__ xsc, int T, const float *bias,
                                                           void *y, int ydt, int64_t ys, bool acc) {
    const int n = blockIdx.x * F8_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (n >= N) return;
    const int G = K / FP8_B, V = K / 16;
    const uint4 *wr = (const uint4 *)(W + (int64_t)n * K);
    const float *sr = S + (int64_t)n * G;
    float a[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) a[t] = 0.0f;
#pragma unroll 4
    for (int i = lane; i < V; i += 32) {
        const uint4 w = __ldcs(wr + i);
        const int g = i >> 3;
        const float ws = __ldg(sr + g);
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            const uint4 xv = __ldg((const uint4 *)(xq + (int64_t)t * K) + i);
            a[t] = fmaf(f8_dot16(w, xv), ws * __ldg(xsc + (int64_t)t * G + g), a[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t >= T) break;
        float v = cu_warp_sum(a[t]);
        if (lane == 0) {
            if (bias) v += bias[n];
            if (acc) v += cu_ld(y, ydt, (int64_t)t * ys + n);
            cu_st(y, ydt, (int64_t)t * ys + n, v);
        }
    }
}

// q (T, K) E4M3 and s (T, K / 128) -> x' (T, K) BF16 = q s
__global__ void k_f8_dequant_x(const uint8_t *q, const float *s, int64_t n, int K, __nv_bfloat16 *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t t = i / K, k = i % K;
    __half_raw h = __nv_cvt_fp8_to_halfraw(q[i], __NV_E4M3);
    out[i] = __float2bfloat16(__half2float(*reinterpret_cast<__half *>(&h)) * s[t * (K / FP8_B) + k / FP8_B]);
}

// rows [r0, r0 + rows) of W -> (rows, K) BF16
__global__ void k_f8_dequant_w(const uint8_t *q, const float *s, int64_t r0, int64_t n, int K, __nv_bfloat16 *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t r = r0 + i / K, k = i % K;
    __half_raw h = __nv_cvt_fp8_to_halfraw(q[r0 * K + i], __NV_E4M3);
    out[i] = __float2bfloat16(__half2float(*reinterpret_cast<__half *>(&h)) * s[r * (K / FP8_B) + k / FP8_B]);
}

/* ---- host ---- */

/* once: the MMA GEMV may take F8M_SMEM_MAX of shared memory (8 tokens of K 12288 quantized: 99 KiB); where it
 * cannot, the CUDA-core GEMV */
static void f8m_prepare(cu_state *cu) {
    if (!cu->f8m_ready && cu->f8_mma) {
        cu->f8m_ready = cudaFuncSetAttribute(k_f8_mma<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, F8M_SMEM_MAX) ==
                       cudaSuccess &&
                   cudaFuncSetAttribute(k_f8_mma<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, F8M_SMEM_MAX) ==
                       cudaSuccess;
        if (!cu->f8m_ready) {
            cudaGetLastError();
            cu->f8_mma = false;
            LOG_W("cuda linear: no %d KiB of shared memory for the FP8 MMA GEMV: the CUDA-core one instead",
                  F8M_SMEM_MAX >> 10);
        }
    }
}


bool cu_f8_gemv_fits(const cu_f8w *w, const tensor *x, int64_t T) {
    return T >= 1 && T <= CU_F8_GEMV_MAX_T && x->dtype == DTYPE_BF16 && f8m_smem(T, w->K) <= F8M_SMEM_MAX &&
           (uintptr_t)x->data % 16 == 0 && tensor_row_stride(x) % 8 == 0;
}

/* y (T, N) (+)= x W^T + b, or (glu) y (T, N / 2) = act(x W_gate^T + b_gate) * (x W_up^T + b_up), on the FP8 tensor
 * cores: T within cu_f8_gemv_fits, cu->f8_mma */
static bool f8_mma_run(cu_state *cu, const cu_f8w *w, const float *bias, const tensor *x, tensor *y, bool acc,
                       bool glu, int act) {
    const int64_t T = cu_rows(x), N = w->rows;
    const int64_t tiles = glu ? (N / 2 + 7) / 8 : (N + 15) / 16;
    const size_t smem = f8m_smem(T, w->K);
    /* as many CTAs as are resident at once, each looping over tiles (one prologue per CTA) */
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, glu ? k_f8_mma<true> : k_f8_mma<false>, F8M_WARPS * 32,
                                                      smem) != cudaSuccess || occ < 1) {
        cudaGetLastError();
        occ = 1;
    }
    const int64_t grid = tiles < (int64_t)occ * cu->num_sms ? tiles : (int64_t)occ * cu->num_sms;
    if (glu)
        return cu_launch(cu, "linear (fp8 gemv, gated)", true, k_f8_mma<true>, dim3((unsigned)grid),
                         dim3(F8M_WARPS * 32), smem, (const uint8_t *)w->q, (const float *)w->s, (int)N, (int)w->K,
                         (const __nv_bfloat16 *)x->data, tensor_row_stride(x), (int)T, bias, y->data, (int)y->dtype,
                         tensor_row_stride(y), false, act);
    return cu_launch(cu, "linear (fp8 gemv)", true, k_f8_mma<false>, dim3((unsigned)grid), dim3(F8M_WARPS * 32), smem,
                     (const uint8_t *)w->q, (const float *)w->s, (int)N, (int)w->K, (const __nv_bfloat16 *)x->data,
                     tensor_row_stride(x), (int)T, bias, y->data, (int)y->dtype, tensor_row_stride(y), acc, 0);
}

bool cu_f8_gemv_glu(cu_state *cu, const cu_f8w *w, const float *bias, const tensor *x, tensor *y, int act) {
    const int64_t T = cu_rows(x);
    if (!cu->f8_mma || !cu_f8_gemv_fits(w, x, T) || w->rows % 2) return false;
    f8_mma_run(cu, w, bias, x, y, false, true, act); /* (a launch failure is recorded) */
    return true;
}

/* x quantized into the workspace: q at *q, scales at *s: (T, K / 128), or (mn) (K / 128, ceil4(T)) for the
 * cuBLASLt GEMM */
static bool f8_quantize_x(cu_state *cu, const tensor *x, int64_t T, int64_t K, bool mn, uint8_t **q, float **s) {
    const int64_t G = K / FP8_B, Tp = (T + 3) / 4 * 4;
    const size_t qb = ((size_t)T * (size_t)K + 255) / 256 * 256;
    if (cu_buf_reserve(cu, &cu->f8x_ws, qb + (size_t)Tp * (size_t)G * sizeof(float), "linear: FP8 activations") !=
        VLLM_OK)
        return false;
    *q = (uint8_t *)cu->f8x_ws.p;
    *s = (float *)((uint8_t *)cu->f8x_ws.p + qb);
    const int64_t groups = T * G;
    return cu_launch(cu, "linear (fp8 activations)", false, k_f8_actq, dim3(cu_grid(groups, 8)), dim3(256), 0,
                     (const __nv_bfloat16 *)x->data, tensor_row_stride(x), (int)T, (int)K, *q, *s,
                     mn ? (int64_t)1 : G, mn ? Tp : (int64_t)1);
}

/* ---- the FP8 GEMM: cuBLASLt with 1 x 128 block scales on both operands (VEC128_32F) ---- */

#define F8_PLANS 64

struct cu_f8_plan {
    bool used, ok, blk;  /* blk: the weights' scales per 128 x 128 block (BLK128x128_32F) */
    int64_t n, t, k, ldc;
    int ydt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

static void f8_plan_clear(cu_f8_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

void cu_f8_plans_free(cu_state *cu) {
    if (!cu->f8_plans) return;
    for (int i = 0; i < F8_PLANS; i++) f8_plan_clear(&cu->f8_plans[i]);
    free(cu->f8_plans);
    cu->f8_plans = NULL;
}

/* The plan of y (T, N) = x (T, K) W^T in FP8 with VEC128 scales, made on a miss; ok false when cuBLASLt has no
 * algorithm for it (the tiles then). */
static cu_f8_plan *f8_plan(cu_state *cu, int64_t N, int64_t T, int64_t K, int64_t ldc, dtype ydt, const void *sa,
                           const void *sb, bool blk) {
    if (!cu->lt) return NULL;
    if (!cu->f8_plans && !(cu->f8_plans = (cu_f8_plan *)calloc(F8_PLANS, sizeof(cu_f8_plan)))) return NULL;
    uint64_t h = 1469598103934665603ull;
    const int64_t key[6] = {N, T, K, ldc, (int64_t)ydt, (int64_t)blk};
    for (int i = 0; i < 6; i++) h = (h ^ (uint64_t)key[i]) * 1099511628211ull;
    cu_f8_plan *p = &cu->f8_plans[h % F8_PLANS];
    if (p->used && p->n == N && p->t == T && p->k == K && p->ldc == ldc && p->ydt == (int)ydt && p->blk == blk)
        return p;
    f8_plan_clear(p);
    p->used = true, p->n = N, p->t = T, p->k = K, p->ldc = ldc, p->ydt = (int)ydt, p->blk = blk;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                                      amode = blk ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : mode;
    const cudaDataType_t yt = ydt == DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF;
    if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode) ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) ||
        /* the block modes want their scale pointers set before the heuristic is asked */
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa) ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb) ||
        cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, K) ||
        cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)T, K) ||
        cublasLtMatrixLayoutCreate(&p->c, yt, (uint64_t)N, (uint64_t)T, ldc))
        return p;
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return p;
    size_t ws = cu->lt_ws.cap;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cu->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = res.algo;
        p->ok = true;
    } else {
        LOG_I("cuda linear: no cuBLASLt FP8 algorithm with %s weight scales for (%lld, %lld) x %lld tokens (%s)",
              blk ? "128 x 128" : "1 x 128", (long long)N, (long long)K, (long long)T, cublasGetStatusString(st));
    }
    return p;
}

static bool f8_gemm(cu_state *cu, const cu_f8w *w, const uint8_t *q, const float *s, int64_t T, tensor *y,
                    bool accumulate) {
    const void *sa = w->sg ? w->sg : w->s, *sb = s;
    cu_f8_plan *p = f8_plan(cu, w->rows, T, w->K, tensor_row_stride(y), y->dtype, sa, sb, false);
    if ((!p || !p->ok) && w->s2) { /* 1 x 128 weight scales refused: the 128 x 128 ones */
        sa = w->s2;
        p = f8_plan(cu, w->rows, T, w->K, tensor_row_stride(y), y->dtype, sa, sb, true);
    }
    if (!p || !p->ok) return false;
    if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa) ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb))
        return p->ok = false;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasStatus_t st = cublasLtMatmul(cu->lt, p->desc, &alpha, w->q, p->a, q, p->b, &beta, y->data, p->c, y->data,
                                       p->c, &p->algo, cu->lt_ws.p, cu->lt_ws.cap, cu->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        LOG_I("cuda linear: cuBLASLt FP8 GEMM failed (%s): BF16 tiles", cublasGetStatusString(st));
        return p->ok = false;
    }
    return true;
}

bool cu_f8_linear(cu_state *cu, const cu_f8w *w, const float *bias, const tensor *x, tensor *y, bool accumulate) {
    const int64_t T = cu_rows(x), K = w->K, N = w->rows, ys = tensor_row_stride(y);
    uint8_t *q = NULL;
    float *s = NULL;
    const bool gv = cu_f8_gemv_fits(w, x, T);
    if (!gv && cu->f8_lt) { /* FP8 tensor cores through cuBLASLt */
        if (!f8_quantize_x(cu, x, T, K, f8_scales_mn(), &q, &s)) return false;
        if (f8_gemm(cu, w, q, s, T, y, accumulate)) return bias ? cu_add_bias(cu, y->data, y->dtype, ys, bias, T, N) : true;
        if (cu->err != VLLM_OK) return false;
    }
    if (gv && cu->f8_mma) return f8_mma_run(cu, w, bias, x, y, accumulate, false, 0);
    if (!f8_quantize_x(cu, x, T, K, false, &q, &s)) return false;
    if (gv) {
        const dim3 grid(cu_grid(N, F8_WARPS)), block(F8_WARPS * 32);
#define F8_GEMV(TT)                                                                                                    \
    cu_launch(cu, "linear (fp8 gemv)", false, k_f8_gemv<TT>, grid, block, 0, (const uint8_t *)w->q, (const float *)w->s, \
              (int)N, (int)K, (const uint8_t *)q, (const float *)s, (int)T, bias, y->data, (int)y->dtype, ys, accumulate)
        return T == 1 ? F8_GEMV(1) : T == 2 ? F8_GEMV(2) : T <= 4 ? F8_GEMV(4) : F8_GEMV(8);
#undef F8_GEMV
    }
    /* prefill: x' and W tiles in BF16, cuBLAS */
    const size_t xb = (size_t)T * (size_t)K * 2;
    if (cu_buf_reserve(cu, &cu->f8xb_ws, xb, "linear: FP8 activations dequantized") != VLLM_OK ||
        cu_buf_reserve(cu, &cu->qlin_ws, cu_f8w_tile_bytes(w), "linear: dequantized weight tile") != VLLM_OK)
        return false;
    __nv_bfloat16 *xd = (__nv_bfloat16 *)cu->f8xb_ws.p, *wt = (__nv_bfloat16 *)cu->qlin_ws.p;
    if (!cu_launch(cu, "linear (fp8 x)", false, k_f8_dequant_x, dim3(cu_grid(T * K, 256)), dim3(256), 0,
                   (const uint8_t *)q, (const float *)s, T * K, (int)K, xd))
        return false;
    const int64_t dims[2] = {T, K};
    tensor xt = tensor_make(DTYPE_BF16, xd, 2, dims);
    const int64_t tile = cu_f8w_tile_rows(w);
    const size_t es = dtype_size(y->dtype);
    for (int64_t r0 = 0; r0 < N; r0 += tile) {
        const int64_t rows = N - r0 < tile ? N - r0 : tile;
        if (!cu_launch(cu, "linear (fp8 w)", false, k_f8_dequant_w, dim3(cu_grid(rows * K, 256)), dim3(256), 0,
                       (const uint8_t *)w->q, (const float *)w->s, r0, rows * K, (int)K, wt) ||
            !cu_gemm_bf16(cu, wt, rows, K, &xt, T, (char *)y->data + (size_t)r0 * es, y->dtype, ys, accumulate))
            return false;
    }
    if (bias) return cu_add_bias(cu, y->data, y->dtype, ys, bias, T, N);
    return true;
}
