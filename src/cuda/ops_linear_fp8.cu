/*
 * ops_linear_fp8.cu: linear layers on FP8_B128 weights (block-scaled FP8 checkpoints, tensor/fp8.h) on the GPU.
 *
 * A layer keeps W (N, K) as E4M3 bytes, row-major, and its scales (N, K / 128) F32. x (T, K) BF16 is quantized
 * per token and 128 as vLLM's per_token_group_quant_fp8 (k_f8_actq: s = max(max|x|, 1e-10) / 448, q = e4m3
 * of x / s, ties to even, saturating), then
 *   - T <= CU_F8_GEMV_MAX_T (decode): k_f8_gemv, a warp per output row streaming its bytes once for every
 *     token: per 16 elements the E4M3 products summed in F32, times s_x s_w of their block (fp8_vec_dot's
 *     arithmetic up to the order of the additions);
 *   - larger T (prefill): x's quantized values dequantized to BF16 (q s, rounded), W in tiles of rows
 *     dequantized to BF16 likewise, and cuBLAS's BF16 GEMM: vLLM's result up to BF16 rounding of the two
 *     operands (2^-9 relative each).
 * The CPU reference is src/cpu/ops_fp8.c (tests/cuda/test_cuda_fp8.c compares them).
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

extern "C" {
#include "core/error.h"
#include "tensor/fp8.h"
}

#define F8_WARPS 8
#define F8_TILE_BYTES ((size_t)32 << 20) /* the prefill's dequantized weight tile, at most */

struct cu_f8w {
    int64_t rows, K;
    uint8_t *q;  /* (rows, K) E4M3 */
    float *s;    /* (rows, K / 128) */
};

int64_t cu_f8w_tile_rows(const cu_f8w *w) {
    int64_t t = (int64_t)(F8_TILE_BYTES / ((size_t)w->K * 2));
    if (t < 1) t = 1;
    return t < w->rows ? t : w->rows;
}

size_t cu_f8w_tile_bytes(const cu_f8w *w) { return (size_t)cu_f8w_tile_rows(w) * (size_t)w->K * 2; }

void cu_f8w_free(cu_f8w *w) {
    if (!w) return;
    if (w->q) cudaFree(w->q);
    if (w->s) cudaFree(w->s);
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
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_f8w_free(w);
        return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for a (%lld, %lld) FP8 weight", (long long)rows,
                        (long long)K);
    }
    cu->bytes_allocated += qb + sb;
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

// x (T, K) BF16 rows xs apart -> q (T, K) E4M3, s (T, K / 128); a warp per group of 128 (4 per lane)
__global__ void k_f8_actq(const __nv_bfloat16 *x, int64_t xs, int T, int K, uint8_t *q, float *s) {
    const int G = K / FP8_B;
    const int64_t grp = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (grp >= (int64_t)T * G) return;
    const int t = (int)(grp / G), g = (int)(grp % G);
    const __nv_bfloat16 *xr = x + (int64_t)t * xs + (int64_t)g * FP8_B + lane * 4;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = __bfloat162float(xr[i]);
    float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float d = fmaxf(m, FP8_ACT_EPS) / FP8_E4M3_MAX;
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float c = fminf(fmaxf(v[i] / d, -FP8_E4M3_MAX), FP8_E4M3_MAX);
        packed |= (uint32_t)__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3) << (8 * i);
    }
    *(uint32_t *)(q + (int64_t)t * K + (int64_t)g * FP8_B + lane * 4) = packed;
    if (lane == 0) s[(int64_t)t * G + g] = d;
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

bool cu_f8_gemv_fits(const cu_f8w *w, const tensor *x, int64_t T) {
    (void)w;
    return T >= 1 && T <= CU_F8_GEMV_MAX_T && x->dtype == DTYPE_BF16;
}

/* x quantized into the workspace: q at *q, scales at *s */
static bool f8_quantize_x(cu_state *cu, const tensor *x, int64_t T, int64_t K, uint8_t **q, float **s) {
    const int64_t G = K / FP8_B;
    const size_t qb = ((size_t)T * (size_t)K + 255) / 256 * 256;
    if (cu_buf_reserve(cu, &cu->f8x_ws, qb + (size_t)T * (size_t)G * sizeof(float), "linear: FP8 activations") !=
        VLLM_OK)
        return false;
    *q = (uint8_t *)cu->f8x_ws.p;
    *s = (float *)((uint8_t *)cu->f8x_ws.p + qb);
    const int64_t groups = T * G;
    return cu_launch(cu, "linear (fp8 activations)", false, k_f8_actq, dim3(cu_grid(groups, 8)), dim3(256), 0,
                     (const __nv_bfloat16 *)x->data, tensor_row_stride(x), (int)T, (int)K, *q, *s);
}

bool cu_f8_linear(cu_state *cu, const cu_f8w *w, const float *bias, const tensor *x, tensor *y, bool accumulate) {
    const int64_t T = cu_rows(x), K = w->K, N = w->rows, ys = tensor_row_stride(y);
    uint8_t *q = NULL;
    float *s = NULL;
    if (!f8_quantize_x(cu, x, T, K, &q, &s)) return false;
    if (cu_f8_gemv_fits(w, x, T)) {
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
