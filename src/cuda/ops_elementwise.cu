/*
 * ops_elementwise.cu: the CUDA row-wise ops: embedding lookup, the norms
 * (RMSNorm, Gemma's (1 + w) RMSNorm, LayerNorm: grouped, in place or not,
 * strided input), residual add, the gated product and the plain
 * activations (SiLU, GELU tanh / erf, ReLU), the softcap, row gather, rotary
 * embedding (neox and interleaved), the fused residual add + norm and q/k
 * norm + RoPE + KV write, and the helpers of linear layers (weight
 * conversion to BF16, bias add).
 *
 * Loads and stores go through cu_ld / cu_st, which switch on the dtype
 * (uniform across a launch, so the branch costs little) and compute in
 * f32; BF16 rows with 8-element alignment take 16-byte vector paths. Most
 * kernels give one block to a row and stride its threads over the columns;
 * the grid strides over rows when there are many. Launches use PDL
 * (cuda_internal.h): every kernel waits before touching activations.
 */
#include "cuda/cuda_blocks.h"
#include "cuda/cuda_internal.h"
#include "tensor/op_composite.h"

#define EW_THREADS 256

/* ---- embedding ---- */

#define EW_ROW_BATCH 8 /* row copies: each thread's loads in flight together before its stores */

/* dst[d] = src[d], d < D, over the block's threads: EW_ROW_BATCH loads of a thread issued before its stores (a
 * load-then-store loop waits a round trip an element: 16 at hidden 4096 and 256 threads) */
__device__ __forceinline__ void row_copy(const void *src, int sdt, int64_t s0, void *dst, int ddt, int64_t d0,
                                         int64_t D) {
    for (int64_t b = threadIdx.x; b < D; b += (int64_t)EW_ROW_BATCH * blockDim.x) {
        float v[EW_ROW_BATCH];
#pragma unroll
        for (int i = 0; i < EW_ROW_BATCH; i++) {
            const int64_t d = b + (int64_t)i * blockDim.x;
            v[i] = d < D ? cu_ld(src, sdt, s0 + d) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < EW_ROW_BATCH; i++) {
            const int64_t d = b + (int64_t)i * blockDim.x;
            if (d < D) cu_st(dst, ddt, d0 + d, v[i]);
        }
    }
}

// table (V, D) any float dtype, ids (T) -> out (T, D)
__global__ void k_embedding(const void *table, int tdt, int64_t ts, const int32_t *ids, int64_t T, int64_t V,
                            int64_t D, void *out, int odt, int64_t os, cu_dev_err *err) {
    pdl_launch();
    pdl_wait();
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int32_t id = ids[t];
        if (id < 0 || id >= V) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_EMBED_ID, t, id, V);
            continue;
        }
        row_copy(table, tdt, (int64_t)id * ts, out, odt, t * os, D);
    }
}

void cu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out) {
    cu_state *cu = cu_of(be);
    if (dtype_is_block(table->dtype)) { /* a GGUF table of ggml blocks (ops_linear_blocks.cu) */
        cu_qembedding(cu, table, ids, out);
        return;
    }
    if (!cu_check_mat(cu, "embedding", "table", table, CU_FLOAT, -1, -1) ||
        !cu_check_vec(cu, "embedding", "ids", ids, CU_DT(DTYPE_I32), -1))
        return;
    int64_t T = tensor_numel(ids), V = cu_rows(table), D = tensor_row_len(table);
    if (!cu_check_mat(cu, "embedding", "out", out, CU_FLOAT, T, D) || T == 0) return;
    cu_launch(cu, "embedding", true, k_embedding, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, (const void *)table->data,
              (int)table->dtype, tensor_row_stride(table), (const int32_t *)ids->data, T, V, D, out->data,
              (int)out->dtype, tensor_row_stride(out), cu->derr_dev);
}

/* ---- norms: RMSNorm, Gemma's (1 + w) RMSNorm, LayerNorm (be_norm_kind) ---- */

/* Shorthand: ws(x) is cu_warp_sum. */
#define warp_sum cu_warp_sum

/* The multiplier of element i: w, or 1 + w for the offset kind; without a weight 1. */
template <int KIND>
__device__ __forceinline__ float norm_wv(const void *w, int wdt, int64_t i) {
    if (KIND == BE_NORM_RMS_OFFSET) return 1.0f + (w ? cu_ld(w, wdt, i) : 0.0f);
    return w ? cu_ld(w, wdt, i) : 1.0f;
}

/* One output element from x, the group's mean (LayerNorm; 0 else) and scale (1 / rms or 1 / std). */
template <int KIND>
__device__ __forceinline__ float norm_out(float x, float mean, float scale, const void *w, int wdt, const void *b,
                                          int bdt, int64_t i) {
    if (KIND == BE_NORM_LAYER) return (x - mean) * scale * norm_wv<KIND>(w, wdt, i) + (b ? cu_ld(b, bdt, i) : 0.0f);
    return x * scale * norm_wv<KIND>(w, wdt, i);
}

// One warp per (row, group) item: small groups (per-head q/k norm).
template <int KIND>
__global__ void k_rms_warp(const void *x, int64_t xs, const void *w, int wdt, const void *b, int bdt, int64_t G,
                           int64_t groups, int64_t items, float eps, void *out, int64_t os, int adt) {
    pdl_launch();
    pdl_wait();
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t it = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; it < items; it += warps) {
        int64_t r = it / groups, g = it % groups;
        int64_t xo = r * xs + g * G, oo = r * os + g * G;
        float mean = 0.0f;
        if constexpr (KIND == BE_NORM_LAYER) {
            float sum = 0.0f;
            for (int64_t i = lane; i < G; i += 32) sum += cu_ld(x, adt, xo + i);
            mean = warp_sum(sum) / (float)G;
        }
        float ss = 0.0f;
        for (int64_t i = lane; i < G; i += 32) {
            float v = cu_ld(x, adt, xo + i);
            if constexpr (KIND == BE_NORM_LAYER) v -= mean;
            ss += v * v;
        }
        ss = warp_sum(ss);
        float scale = 1.0f / sqrtf(ss / (float)G + eps);
        for (int64_t i = lane; i < G; i += 32)
            cu_st(out, adt, oo + i, norm_out<KIND>(cu_ld(x, adt, xo + i), mean, scale, w, wdt, b, bdt, i));
    }
}

/* The sum of v over the block, in every thread (part: one float per warp, bc: one; both
 * free again when it returns). */
__device__ __forceinline__ float block_sum(float v, float *part, float *bc) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) s += part[i];
        *bc = s;
    }
    __syncthreads();
    const float r = *bc;
    __syncthreads();
    return r;
}

// One block per (row, group) item: long groups (the hidden state), any dtypes.
template <int KIND>
__global__ void k_rms_block(const void *x, int64_t xs, const void *w, int wdt, const void *b, int bdt, int64_t G,
                            int64_t groups, int64_t items, float eps, void *out, int64_t os, int adt) {
    __shared__ float part[EW_THREADS / 32];
    __shared__ float bc;
    pdl_launch();
    pdl_wait();
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        int64_t r = it / groups, g = it % groups;
        int64_t xo = r * xs + g * G, oo = r * os + g * G;
        float mean = 0.0f;
        if constexpr (KIND == BE_NORM_LAYER) {
            float sum = 0.0f;
            for (int64_t i = threadIdx.x; i < G; i += blockDim.x) sum += cu_ld(x, adt, xo + i);
            mean = block_sum(sum, part, &bc) / (float)G;
        }
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < G; i += blockDim.x) {
            float v = cu_ld(x, adt, xo + i);
            if constexpr (KIND == BE_NORM_LAYER) v -= mean;
            ss += v * v;
        }
        const float scale = 1.0f / sqrtf(block_sum(ss, part, &bc) / (float)G + eps);
        for (int64_t i = threadIdx.x; i < G; i += blockDim.x)
            cu_st(out, adt, oo + i, norm_out<KIND>(cu_ld(x, adt, xo + i), mean, scale, w, wdt, b, bdt, i));
    }
}

/* BF16 rows of D (D % 8 == 0, 16-byte aligned rows), one block per row,
 * each thread holding up to RMS_VPT 8-element chunks in registers:
 * ADD: x += y (rounded to BF16 and stored, as the add op), then
 * out = the norm of KIND over the stored x (as the norm op): RMSNorm
 * x / sqrt(mean(x^2) + eps) * w, with (1 + w) for the offset kind, or
 * LayerNorm (x - mean) / sqrt(var + eps) * w + b. w and b are BF16 (16-byte
 * aligned), F32 or absent (wdt / bdt < 0). */
#define RMS_VPT 4
#define RMS_MAX_THREADS 512

/* QX: the 8 BF16 outputs o of chunk c (valid: c < nc; whole warps call this) also quantized for the block
 * GEMV into its int8 row xq and meta row xm (cuda_blocks.h): the 4 lanes of a 32-element group (chunks
 * 4k..4k+3 sit in lanes 4k'..4k'+3 of one warp) share max|o| and the half sums, the rule of
 * ops_linear_blocks.cu's k_qx on the same BF16 values */
__device__ __forceinline__ void qx8_store(const float (&o)[8], int c, bool valid, int8_t *xq, qx_meta *xm) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(o[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t wq[2] = {0, 0};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int q = (int)roundf(o[i] * id);
        s += q;
        wq[i >> 2] |= ((uint32_t)q & 0xffu) << (8 * (i & 3));
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1); /* lanes 0-1 of the group: elements 0..15; 2-3: 16..31 */
    const int s_hi = __shfl_down_sync(0xffffffffu, s, 2);
    if (valid) {
        *(uint2 *)(xq + (int64_t)c * 8) = make_uint2(wq[0], wq[1]);
        if ((c & 3) == 0) xm[c >> 2] = qx_meta{d, (short)s, (short)s_hi};
    }
}

template <bool ADD, int KIND, bool QX = false>
__global__ void __launch_bounds__(RMS_MAX_THREADS) k_rms_vec(__nv_bfloat16 *x, int64_t xs, const __nv_bfloat16 *y,
                                                             int64_t ys, const void *w, int wdt, const void *b, int bdt,
                                                             int D, float eps, __nv_bfloat16 *out, int64_t os, int T,
                                                             int8_t *xq, qx_meta *xm) {
    __shared__ float part[RMS_MAX_THREADS / 32];
    const int nc = D / 8;
    pdl_launch();
    /* BF16 weights (and biases) are constant: read them before waiting for the previous kernel */
    uint4 wraw[RMS_VPT], braw[RMS_VPT];
#pragma unroll
    for (int j = 0; j < RMS_VPT; j++) {
        int c = threadIdx.x + j * blockDim.x;
        wraw[j] = c < nc && wdt == DTYPE_BF16 ? __ldg((const uint4 *)w + c) : make_uint4(0, 0, 0, 0);
        braw[j] = KIND == BE_NORM_LAYER && c < nc && bdt == DTYPE_BF16 ? __ldg((const uint4 *)b + c)
                                                                       : make_uint4(0, 0, 0, 0);
    }
    pdl_wait();
    for (int r = blockIdx.x; r < T; r += gridDim.x) {
        uint4 *xr = (uint4 *)(x + (int64_t)r * xs);
        float v[RMS_VPT][8];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < RMS_VPT; j++) {
            int c = threadIdx.x + j * blockDim.x;
            if (c < nc) {
                bf16x8_to_f32(xr[c], v[j]);
                if (ADD) {
                    float yv[8];
                    bf16x8_to_f32(((const uint4 *)(y + (int64_t)r * ys))[c], yv);
#pragma unroll
                    for (int i = 0; i < 8; i++) v[j][i] += yv[i];
                    uint4 packed = f32_to_bf16x8(v[j]);
                    xr[c] = packed;
                    bf16x8_to_f32(packed, v[j]); /* the norm sees the stored (rounded) sum */
                }
                /* the RMSNorms' sum of squares in the same pass (LayerNorm's waits for the mean) */
                if constexpr (KIND != BE_NORM_LAYER) {
#pragma unroll
                    for (int i = 0; i < 8; i++) ss += v[j][i] * v[j][i];
                }
            }
        }
        if constexpr (KIND == BE_NORM_LAYER) { /* the mean first, taken out of v, then the sum of squares */
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < RMS_VPT; j++)
                if (threadIdx.x + j * blockDim.x < nc)
#pragma unroll
                    for (int i = 0; i < 8; i++) sum += v[j][i];
            sum = warp_sum(sum);
            if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = sum;
            __syncthreads();
            float tot = 0.0f;
            for (int i = 0; i < (int)(blockDim.x / 32); i++) tot += part[i];
            const float mean = tot / (float)D;
#pragma unroll
            for (int j = 0; j < RMS_VPT; j++)
                if (threadIdx.x + j * blockDim.x < nc)
#pragma unroll
                    for (int i = 0; i < 8; i++) v[j][i] -= mean;
            __syncthreads(); /* part is reused below */
#pragma unroll
            for (int j = 0; j < RMS_VPT; j++) {
                int c = threadIdx.x + j * blockDim.x;
                if (c < nc) {
#pragma unroll
                    for (int i = 0; i < 8; i++) ss += v[j][i] * v[j][i];
                }
            }
        }
        ss = warp_sum(ss);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
        __syncthreads();
        float tot = 0.0f;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) tot += part[i];
        const float scale = 1.0f / sqrtf(tot / (float)D + eps);
        uint4 *orow = (uint4 *)(out + (int64_t)r * os);
#pragma unroll
        for (int j = 0; j < RMS_VPT; j++) {
            int c = threadIdx.x + j * blockDim.x;
            float o[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            if (c < nc) {
                float wv[8];
                if (wdt == DTYPE_BF16) {
                    bf16x8_to_f32(wraw[j], wv);
                } else if (wdt == DTYPE_F32) {
#pragma unroll
                    for (int i = 0; i < 8; i++) wv[i] = ((const float *)w)[(int64_t)c * 8 + i];
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) wv[i] = KIND == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f;
                }
                if constexpr (KIND == BE_NORM_LAYER) {
                    float bv[8];
                    if (bdt == DTYPE_BF16) {
                        bf16x8_to_f32(braw[j], bv);
                    } else {
#pragma unroll
                        for (int i = 0; i < 8; i++) bv[i] = bdt == DTYPE_F32 ? ((const float *)b)[(int64_t)c * 8 + i] : 0.0f;
                    }
#pragma unroll
                    for (int i = 0; i < 8; i++) o[i] = v[j][i] * scale * wv[i] + bv[i];
                } else if constexpr (KIND == BE_NORM_RMS_OFFSET) {
#pragma unroll
                    for (int i = 0; i < 8; i++) o[i] = v[j][i] * scale * (1.0f + wv[i]);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) o[i] = v[j][i] * scale * wv[i];
                }
                const uint4 packed = f32_to_bf16x8(o);
                orow[c] = packed;
                if constexpr (QX) bf16x8_to_f32(packed, o);
            }
            if constexpr (QX) /* whole warps with any chunk left (D % 32 == 0: a group's lanes agree) */
                if (j * (int)blockDim.x + (int)(threadIdx.x & ~31u) < nc)
                    qx8_store(o, c, c < nc, xq + (int64_t)r * D, xm + (int64_t)r * (D / 32));
        }
        __syncthreads(); /* part is reused by the next row */
    }
}

/* o = v * scale * w (BE_NORM_RMS; w absent: 1) or v * scale * (1 + w) (BE_NORM_RMS_OFFSET), w the chunk's
 * preloaded BF16 (wraw), F32 at w, or absent (wdt < 0) */
template <int KIND>
__device__ __forceinline__ void rms_apply8(const float (&v)[8], float scale, uint4 wraw, int wdt, const void *w, int c,
                                           float (&o)[8]) {
    float wv[8];
    if (wdt == DTYPE_BF16) {
        bf16x8_to_f32(wraw, wv);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++)
            wv[i] = wdt == DTYPE_F32 ? ((const float *)w)[(int64_t)c * 8 + i] : (KIND == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = KIND == BE_NORM_RMS_OFFSET ? v[i] * scale * (1.0f + wv[i]) : v[i] * scale * wv[i];
}

/* the sum of every thread's v over the block (k_rms_vec's order: warps, then the warps' sums in turn); part
 * is free again on return */
__device__ __forceinline__ float rms_block_total(float v, float *part) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float tot = 0.0f;
    for (int i = 0; i < (int)(blockDim.x / 32); i++) tot += part[i];
    __syncthreads();
    return tot;
}

/* The sandwich residual (norm_add_norm) on BF16 rows of D (k_rms_vec's layout, RMS kinds): y = ny(y) (stored,
 * rounded, unless keep_y), xo = x + y (stored, rounded; xo is x itself, or another buffer), then (OUT) out = nx(xo):
 * the three ops of the composite in one kernel, each sum of squares in the norm op's order. */
template <int KIND, bool OUT>
__global__ void __launch_bounds__(RMS_MAX_THREADS) k_norm_add_norm(const __nv_bfloat16 *x, int64_t xs,
                                                                   __nv_bfloat16 *y, int64_t ys, const void *wy,
                                                                   int wydt, float eps_y, const void *wx, int wxdt,
                                                                   float eps_x, int D, __nv_bfloat16 *out, int64_t os,
                                                                   int T, __nv_bfloat16 *xo, int64_t xos, bool keep_y) {
    __shared__ float part[RMS_MAX_THREADS / 32];
    const int nc = D / 8;
    pdl_launch();
    uint4 wyraw[RMS_VPT], wxraw[RMS_VPT]; /* constant: read before waiting for the previous kernel */
#pragma unroll
    for (int j = 0; j < RMS_VPT; j++) {
        const int c = threadIdx.x + j * blockDim.x;
        wyraw[j] = c < nc && wydt == DTYPE_BF16 ? __ldg((const uint4 *)wy + c) : make_uint4(0, 0, 0, 0);
        wxraw[j] = OUT && c < nc && wxdt == DTYPE_BF16 ? __ldg((const uint4 *)wx + c) : make_uint4(0, 0, 0, 0);
    }
    pdl_wait();
    for (int r = blockIdx.x; r < T; r += gridDim.x) {
        uint4 *yr = (uint4 *)(y + (int64_t)r * ys), *xw = (uint4 *)(xo + (int64_t)r * xos);
        const uint4 *xr = (const uint4 *)(x + (int64_t)r * xs);
        float v[RMS_VPT][8];
        uint4 xin[RMS_VPT]; /* x's chunks loaded with y's: one round trip, not a second after the first sum */
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < RMS_VPT; j++) {
            const int c = threadIdx.x + j * blockDim.x;
            xin[j] = c < nc ? xr[c] : make_uint4(0, 0, 0, 0);
            if (c < nc) {
                bf16x8_to_f32(yr[c], v[j]);
#pragma unroll
                for (int i = 0; i < 8; i++) ss += v[j][i] * v[j][i];
            }
        }
        const float scale_y = 1.0f / sqrtf(rms_block_total(ss, part) / (float)D + eps_y);
        ss = 0.0f;
#pragma unroll
        for (int j = 0; j < RMS_VPT; j++) {
            const int c = threadIdx.x + j * blockDim.x;
            if (c < nc) {
                float o[8], xv[8];
                rms_apply8<KIND>(v[j], scale_y, wyraw[j], wydt, wy, c, o);
                const uint4 py = f32_to_bf16x8(o);
                if (!keep_y) yr[c] = py;
                bf16x8_to_f32(py, o); /* the add sees the stored (rounded) norm */
                bf16x8_to_f32(xin[j], xv);
#pragma unroll
                for (int i = 0; i < 8; i++) xv[i] += o[i];
                const uint4 px = f32_to_bf16x8(xv);
                xw[c] = px;
                if constexpr (OUT) {
                    bf16x8_to_f32(px, v[j]); /* the norm sees the stored (rounded) sum */
#pragma unroll
                    for (int i = 0; i < 8; i++) ss += v[j][i] * v[j][i];
                }
            }
        }
        if constexpr (OUT) {
            const float scale_x = 1.0f / sqrtf(rms_block_total(ss, part) / (float)D + eps_x);
            uint4 *orow = (uint4 *)(out + (int64_t)r * os);
#pragma unroll
            for (int j = 0; j < RMS_VPT; j++) {
                const int c = threadIdx.x + j * blockDim.x;
                if (c < nc) {
                    float o[8];
                    rms_apply8<KIND>(v[j], scale_x, wxraw[j], wxdt, wx, c, o);
                    orow[c] = f32_to_bf16x8(o);
                }
            }
        }
    }
}

/* The vector kernel takes BF16 rows of D % 8 == 0 with 16-byte aligned rows
 * and BF16 or F32 weights, D <= RMS_VPT * 8 * RMS_MAX_THREADS. */
static bool rms_vec_fits(const tensor *t, int64_t D) {
    return t->dtype == DTYPE_BF16 && D % 8 == 0 && D <= (int64_t)RMS_VPT * 8 * RMS_MAX_THREADS && cu_aligned16(t->data) &&
           tensor_row_stride(t) % 8 == 0;
}

/* A weight or bias the vector kernel reads: absent, F32, or 16-byte aligned BF16. */
static bool rms_vec_param(const tensor *p) {
    return !p || p->dtype == DTYPE_F32 || (p->dtype == DTYPE_BF16 && cu_aligned16(p->data));
}

static dim3 rms_vec_block(int64_t D) {
    int nc = (int)(D / 8);
    int threads = ((nc + 1) / 2 + 31) / 32 * 32; /* about two chunks per thread, whole warps */
    if (threads < 32) threads = 32;
    if (threads > RMS_MAX_THREADS) threads = RMS_MAX_THREADS;
    return dim3(threads);
}

template <bool ADD, int KIND, bool QX = false>
static void rms_vec_launch_k(cu_state *cu, const char *op, dim3 grid, dim3 block, tensor *x, const tensor *y,
                             const tensor *w, const tensor *b, float eps, tensor *out, int8_t *xq = NULL,
                             qx_meta *xm = NULL) {
    cu_launch(cu, op, true, k_rms_vec<ADD, KIND, QX>, grid, block, 0, (__nv_bfloat16 *)x->data, tensor_row_stride(x),
              (const __nv_bfloat16 *)(ADD ? y->data : NULL), ADD ? tensor_row_stride(y) : (int64_t)0,
              (const void *)(w ? w->data : NULL), w ? (int)w->dtype : -1, (const void *)(b ? b->data : NULL),
              b ? (int)b->dtype : -1, (int)tensor_row_len(x), eps, (__nv_bfloat16 *)out->data, tensor_row_stride(out),
              (int)cu_rows(x), xq, xm);
}

static void rms_vec_launch(cu_state *cu, const char *op, bool add, be_norm_kind kind, tensor *x, const tensor *y,
                           const tensor *w, const tensor *b, float eps, tensor *out) {
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    dim3 grid(cu_grid(T, 1)), block = rms_vec_block(D);
    switch (kind) {
    case BE_NORM_RMS_OFFSET:
        if (add) rms_vec_launch_k<true, BE_NORM_RMS_OFFSET>(cu, op, grid, block, x, y, w, b, eps, out);
        else rms_vec_launch_k<false, BE_NORM_RMS_OFFSET>(cu, op, grid, block, x, y, w, b, eps, out);
        break;
    case BE_NORM_LAYER:
        if (add) rms_vec_launch_k<true, BE_NORM_LAYER>(cu, op, grid, block, x, y, w, b, eps, out);
        else rms_vec_launch_k<false, BE_NORM_LAYER>(cu, op, grid, block, x, y, w, b, eps, out);
        break;
    default:
        if (add) rms_vec_launch_k<true, BE_NORM_RMS>(cu, op, grid, block, x, y, w, b, eps, out);
        else rms_vec_launch_k<false, BE_NORM_RMS>(cu, op, grid, block, x, y, w, b, eps, out);
        break;
    }
}

template <int KIND>
static void norm_rows_launch(cu_state *cu, const char *op, const tensor *x, const tensor *w, const tensor *b,
                             int64_t G, float eps, tensor *out) {
    const int64_t items = cu_rows(x) * (tensor_row_len(x) / G);
    const void *wp = w ? w->data : NULL, *bp = b ? b->data : NULL;
    const int wdt = w ? (int)w->dtype : 0, bdt = b ? (int)b->dtype : 0;
    if (G <= 256)
        cu_launch(cu, op, true, k_rms_warp<KIND>, dim3(cu_grid(items, EW_THREADS / 32)), dim3(EW_THREADS), 0,
                  (const void *)x->data, tensor_row_stride(x), wp, wdt, bp, bdt, G, tensor_row_len(x) / G, items, eps,
                  out->data, tensor_row_stride(out), (int)x->dtype);
    else
        cu_launch(cu, op, true, k_rms_block<KIND>, dim3(cu_grid(items, 1)), dim3(EW_THREADS), 0, (const void *)x->data,
                  tensor_row_stride(x), wp, wdt, bp, bdt, G, tensor_row_len(x) / G, items, eps, out->data,
                  tensor_row_stride(out), (int)x->dtype);
}

/* Checks and runs a norm of kind: x (T, D), w (G) (required when need_w) and b (G) or NULL -> out (T, D). */
static void norm_run(cu_state *cu, const char *op, const tensor *x, be_norm_kind kind, const tensor *w, bool need_w,
                     const tensor *b, float eps, tensor *out) {
    if (!cu_check_mat(cu, op, "x", x, CU_ACT, -1, -1) || ((w || need_w) && !cu_check_vec(cu, op, "w", w, CU_FLOAT, -1)))
        return;
    if ((unsigned)kind >= BE_NORM_COUNT) {
        cu_fail(cu, "%s: norm kind %d is out of range", op, (int)kind);
        return;
    }
    int64_t T = cu_rows(x), D = tensor_row_len(x), G = w ? tensor_numel(w) : D;
    if (w && (G <= 0 || D % G != 0)) {
        cu_fail(cu, "%s: row length %lld is not a multiple of the weight length %lld", op, (long long)D,
                (long long)G);
        return;
    }
    if (b && kind != BE_NORM_LAYER) {
        cu_fail(cu, "%s: a bias is for BE_NORM_LAYER only", op);
        return;
    }
    if ((b && !cu_check_vec(cu, op, "b", b, CU_FLOAT, G)) || !cu_check_mat(cu, op, "out", out, CU_DT(x->dtype), T, D))
        return;
    if (T == 0 || G == 0) return;
    if (G == D && rms_vec_fits(x, D) && rms_vec_fits(out, D) && rms_vec_param(w) && rms_vec_param(b) &&
        T <= INT32_MAX) {
        rms_vec_launch(cu, op, false, kind, (tensor *)x, NULL, w, b, eps, out);
    } else if (kind == BE_NORM_RMS_OFFSET) {
        norm_rows_launch<BE_NORM_RMS_OFFSET>(cu, op, x, w, b, G, eps, out);
    } else if (kind == BE_NORM_LAYER) {
        norm_rows_launch<BE_NORM_LAYER>(cu, op, x, w, b, G, eps, out);
    } else {
        norm_rows_launch<BE_NORM_RMS>(cu, op, x, w, b, G, eps, out);
    }
}

bool cu_norm_qx(cu_state *cu, const tensor *x, be_norm_kind kind, const tensor *w, const tensor *b, float eps,
                tensor *out, int8_t *xq, qx_meta *xm) {
    const int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D % 32 || !rms_vec_fits(x, D) || !rms_vec_fits(out, D) || cu_rows(out) != T ||
        tensor_row_len(out) != D || (w && tensor_numel(w) != D) || (b && (kind != BE_NORM_LAYER || tensor_numel(b) != D)) ||
        !rms_vec_param(w) || !rms_vec_param(b) || (kind == BE_NORM_RMS && !w) || T > INT32_MAX)
        return false;
    const dim3 grid(cu_grid(T, 1)), block = rms_vec_block(D);
    tensor *xm_ = (tensor *)x;
    switch (kind) {
    case BE_NORM_RMS: rms_vec_launch_k<false, BE_NORM_RMS, true>(cu, "norm (int8)", grid, block, xm_, NULL, w, b, eps, out, xq, xm); break;
    case BE_NORM_RMS_OFFSET:
        rms_vec_launch_k<false, BE_NORM_RMS_OFFSET, true>(cu, "norm (int8)", grid, block, xm_, NULL, w, b, eps, out, xq, xm);
        break;
    case BE_NORM_LAYER:
        rms_vec_launch_k<false, BE_NORM_LAYER, true>(cu, "norm (int8)", grid, block, xm_, NULL, w, b, eps, out, xq, xm);
        break;
    default: return false;
    }
    return true;
}

// x (T, D), w (G) with D % G == 0 -> out (T, D); out may be x
void cu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out) {
    norm_run(cu_of(be), "rms_norm", x, BE_NORM_RMS, w, true, NULL, eps, out);
}

// x (T, D), n->w, n->b (G) or NULL with D % G == 0 -> out (T, D); out may be x
void cu_norm(backend *be, const tensor *x, const be_norm *n, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!n) {
        cu_fail(cu, "norm: no be_norm");
        return;
    }
    norm_run(cu, "norm", x, n->kind, n->w, false, n->b, n->eps, out);
}

/* ---- add ---- */

// x (T, D) += y (T, D)
__global__ void k_add(void *x, int xdt, int64_t xs, const void *y, int ydt, int64_t ys, int64_t T, int64_t D) {
    pdl_launch();
    pdl_wait();
    cu_with_dt(xdt, [&](auto xd) {
        cu_with_dt(ydt, [&](auto yd) {
            constexpr int XD = decltype(xd)::value, YD = decltype(yd)::value;
            for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
                /* CU_ROW_BATCH elements a thread loaded together (indices past D clamped), then stored */
                for (int64_t i0 = threadIdx.x; i0 < D; i0 += (int64_t)blockDim.x * CU_ROW_BATCH) {
                    float v[CU_ROW_BATCH];
#pragma unroll
                    for (int u = 0; u < CU_ROW_BATCH; u++) {
                        const int64_t i = min(i0 + (int64_t)u * blockDim.x, D - 1);
                        v[u] = cu_ld(x, XD, r * xs + i) + cu_ld(y, YD, r * ys + i);
                    }
#pragma unroll
                    for (int u = 0; u < CU_ROW_BATCH; u++)
                        if (i0 + (int64_t)u * blockDim.x < D) cu_st(x, XD, r * xs + i0 + (int64_t)u * blockDim.x, v[u]);
                }
        });
    });
}

void cu_add(backend *be, tensor *x, const tensor *y) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "add", "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, "add", "y", y, CU_ACT, cu_rows(x), tensor_row_len(x)))
        return;
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    cu_launch(cu, "add", true, k_add, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, x->data, (int)x->dtype,
              tensor_row_stride(x), (const void *)y->data, (int)y->dtype, tensor_row_stride(y), T, D);
}

/* x (T, D) += y (T, D); out (T, D) = the norm of x (as add then the norm; out may be x): one
 * vector kernel for BF16 rows normalised whole, else the two ops. */
static void add_norm_run(backend *be, const char *op, tensor *x, const tensor *y, be_norm_kind kind, const tensor *w,
                         bool need_w, const tensor *b, float eps, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, op, "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, op, "y", y, CU_ACT, cu_rows(x), tensor_row_len(x)) ||
        ((w || need_w) && !cu_check_vec(cu, op, "w", w, CU_FLOAT, need_w ? tensor_row_len(x) : -1)) ||
        (b && !cu_check_vec(cu, op, "b", b, CU_FLOAT, -1)) ||
        !cu_check_mat(cu, op, "out", out, CU_DT(x->dtype), cu_rows(x), tensor_row_len(x)))
        return;
    if ((unsigned)kind >= BE_NORM_COUNT) {
        cu_fail(cu, "%s: norm kind %d is out of range", op, (int)kind);
        return;
    }
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    if ((!w || tensor_numel(w) == D) && (!b || (kind == BE_NORM_LAYER && tensor_numel(b) == D)) && rms_vec_fits(x, D) &&
        rms_vec_fits(y, D) && rms_vec_fits(out, D) && rms_vec_param(w) && rms_vec_param(b) && T <= INT32_MAX) {
        rms_vec_launch(cu, op, true, kind, x, y, w, b, eps, out);
        return;
    }
    /* other dtypes and layouts: the two ops */
    cu_add(be, x, y);
    norm_run(cu, op, x, kind, w, need_w, b, eps, out);
}

// x (T, D) += y (T, D); out (T, D) = rms_norm(x) * w  (as add then rms_norm; out may be x)
void cu_add_rms_norm(backend *be, tensor *x, const tensor *y, const tensor *w, float eps, tensor *out) {
    add_norm_run(be, "add_rms_norm", x, y, BE_NORM_RMS, w, true, NULL, eps, out);
}

// x (T, D) += y (T, D); out (T, D) = norm(x) (be_norm)
void cu_add_norm(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out) {
    if (!n) {
        cu_fail(cu_of(be), "add_norm: no be_norm");
        return;
    }
    add_norm_run(be, "add_norm", x, y, n->kind, n->w, false, n->b, n->eps, out);
}

/* one k_norm_add_norm launch (OUT: nx given, out written) */
template <int KIND, bool OUT>
static void nan_launch(cu_state *cu, const char *op, dim3 grid, dim3 block, const tensor *x, const tensor *y,
                       const be_norm *ny, const be_norm *nx, tensor *out, tensor *xo, bool keep_y) {
    const tensor *wy = ny->w, *wx = OUT ? nx->w : NULL;
    cu_launch(cu, op, true, k_norm_add_norm<KIND, OUT>, grid, block, 0, (const __nv_bfloat16 *)x->data,
              tensor_row_stride(x), (__nv_bfloat16 *)y->data, tensor_row_stride(y),
              (const void *)(wy ? wy->data : NULL), wy ? (int)wy->dtype : -1, ny->eps,
              (const void *)(wx ? wx->data : NULL), wx ? (int)wx->dtype : -1, OUT ? nx->eps : 0.0f,
              (int)tensor_row_len(x), OUT ? (__nv_bfloat16 *)out->data : (__nv_bfloat16 *)NULL,
              OUT ? tensor_row_stride(out) : (int64_t)0, (int)cu_rows(x), (__nv_bfloat16 *)xo->data,
              tensor_row_stride(xo), keep_y);
}

/* y = ny(y); x (T, D) += y; out (T, D) = nx(x) when nx is given: one kernel for BF16 rows normalised whole by
 * RMS norms of one kind, else the composite (norm, add [, norm]) */
void cu_norm_add_norm(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out) {
    cu_norm_add_norm_to(be, x, y, ny, nx, out, x);
}

/* cu_norm_add_norm with the sum written to xo (x, or a buffer of its shape apart from x, y and out), x then left
 * as it is, and y too (xo = x + ny(y), out = nx(xo)): linear_fused's pending residual add where the GEMV's
 * prologue does not take it */
void cu_norm_add_norm_to(backend *be, const tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out,
                         tensor *xo) {
    cu_state *cu = cu_of(be);
    const char *op = "norm_add_norm";
    const bool apart = xo->data != x->data;
    if (!ny || (nx && !out)) {
        cu_fail(cu, "%s: %s", op, !ny ? "no be_norm for y" : "a norm of x needs out");
        return;
    }
    if (!cu_check_mat(cu, op, "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, op, "y", y, CU_ACT, cu_rows(x), tensor_row_len(x)) ||
        !cu_check_mat(cu, op, "xo", xo, CU_DT(x->dtype), cu_rows(x), tensor_row_len(x)) ||
        (nx && !cu_check_mat(cu, op, "out", out, CU_DT(x->dtype), cu_rows(x), tensor_row_len(x))))
        return;
    const int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    const be_norm_kind kind = ny->kind;
    const bool rms = kind == BE_NORM_RMS || kind == BE_NORM_RMS_OFFSET;
    if (rms && !ny->b && (!nx || (nx->kind == kind && !nx->b)) && (!ny->w || tensor_numel(ny->w) == D) &&
        (!nx || !nx->w || tensor_numel(nx->w) == D) && rms_vec_fits(x, D) && rms_vec_fits(y, D) &&
        (!nx || rms_vec_fits(out, D)) && rms_vec_fits(xo, D) && rms_vec_param(ny->w) && (!nx || rms_vec_param(nx->w)) &&
        T <= INT32_MAX) {
        if ((ny->w && !cu_check_vec(cu, op, "ny.w", ny->w, CU_FLOAT, D)) ||
            (nx && nx->w && !cu_check_vec(cu, op, "nx.w", nx->w, CU_FLOAT, D)))
            return;
        const dim3 grid(cu_grid(T, 1)), block = rms_vec_block(D);
        if (kind == BE_NORM_RMS_OFFSET) {
            if (nx) nan_launch<BE_NORM_RMS_OFFSET, true>(cu, op, grid, block, x, y, ny, nx, out, xo, apart);
            else nan_launch<BE_NORM_RMS_OFFSET, false>(cu, op, grid, block, x, y, ny, nx, out, xo, apart);
        } else {
            if (nx) nan_launch<BE_NORM_RMS, true>(cu, op, grid, block, x, y, ny, nx, out, xo, apart);
            else nan_launch<BE_NORM_RMS, false>(cu, op, grid, block, x, y, ny, nx, out, xo, apart);
        }
        return;
    }
    if (apart) { /* xo = ny(y); xo += x [; out = nx(xo)] */
        cu_norm(be, y, ny, xo);
        cu_add(be, xo, x);
        if (nx) cu_norm(be, xo, nx, out);
        return;
    }
    const char *err = norm_add_norm_composite(be, (tensor *)x, y, ny, nx, out);
    if (err) cu_fail(cu, "%s", err);
}

/* ---- activations: the gated product, in place, the softcap ---- */

// gate_up (T, 2I) -> out (T, I) = act(gate) * up (BE_ACT_SWIGLU_OAI: with alpha, limit)
__global__ void k_act_mul(const void *gu, int64_t gs, void *out, int64_t os, int dt, int64_t T, int64_t I, int act,
                          float alpha, float limit) {
    pdl_launch();
    pdl_wait();
    for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
        for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
            float g = cu_ld(gu, dt, r * gs + i), u = cu_ld(gu, dt, r * gs + I + i);
            cu_st(out, dt, r * os + i,
                  act == BE_ACT_SWIGLU_OAI ? cu_swiglu_oai(g, u, alpha, limit) : cu_act(act, g) * u);
        }
}

// The same on BF16 with I % 8 == 0 and 16-byte aligned rows: one 8-element chunk per thread.
template <int ACT>
__global__ void k_act_mul_vec(const __nv_bfloat16 *gu, int64_t gs, __nv_bfloat16 *out, int64_t os, int64_t T,
                              int64_t I, float alpha, float limit) {
    pdl_launch();
    pdl_wait();
    const int64_t nc = I / 8, n = T * nc;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / nc, c = i % nc;
        float g[8], u[8], o[8];
        bf16x8_to_f32(*(const uint4 *)(gu + r * gs + c * 8), g);
        bf16x8_to_f32(*(const uint4 *)(gu + r * gs + I + c * 8), u);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if constexpr (ACT == BE_ACT_SWIGLU_OAI) o[j] = cu_swiglu_oai(g[j], u[j], alpha, limit);
            else o[j] = cu_act(ACT, g[j]) * u[j];
        }
        *(uint4 *)(out + r * os + c * 8) = f32_to_bf16x8(o);
    }
}

static void act_mul_run(cu_state *cu, const char *op, be_act act, float alpha, float limit, const tensor *gate_up,
                        tensor *out) {
    if ((unsigned)act >= BE_ACT_COUNT) {
        cu_fail(cu, "%s: activation %d is out of range", op, (int)act);
        return;
    }
    if (act == BE_ACT_SWIGLU_OAI && !(alpha > 0.0f && limit > 0.0f && isfinite(alpha) && isfinite(limit))) {
        cu_fail(cu, "%s: swigluoai alpha %g and limit %g must be positive and finite", op, (double)alpha,
                (double)limit);
        return;
    }
    if (!cu_check_mat(cu, op, "gate_up", gate_up, CU_ACT, -1, -1)) return;
    int64_t T = cu_rows(gate_up), D = tensor_row_len(gate_up);
    if (D % 2) {
        cu_fail(cu, "%s: gate_up row length %lld is odd", op, (long long)D);
        return;
    }
    if (!cu_check_mat(cu, op, "out", out, CU_DT(gate_up->dtype), T, D / 2) || T == 0 || D == 0) return;
    int64_t I = D / 2, gs = tensor_row_stride(gate_up), os = tensor_row_stride(out);
    if (gate_up->dtype == DTYPE_BF16 && I % 8 == 0 && gs % 8 == 0 && os % 8 == 0 && cu_aligned16(gate_up->data) &&
        cu_aligned16(out->data)) {
        void (*k)(const __nv_bfloat16 *, int64_t, __nv_bfloat16 *, int64_t, int64_t, int64_t, float, float) =
            act == BE_ACT_GELU_TANH    ? k_act_mul_vec<BE_ACT_GELU_TANH>
            : act == BE_ACT_GELU       ? k_act_mul_vec<BE_ACT_GELU>
            : act == BE_ACT_RELU       ? k_act_mul_vec<BE_ACT_RELU>
            : act == BE_ACT_SWIGLU_OAI ? k_act_mul_vec<BE_ACT_SWIGLU_OAI>
                                       : k_act_mul_vec<BE_ACT_SILU>;
        cu_launch(cu, op, true, k, dim3(cu_grid(T * (I / 8), 128)), dim3(128), 0, (const __nv_bfloat16 *)gate_up->data,
                  gs, (__nv_bfloat16 *)out->data, os, T, I, alpha, limit);
        return;
    }
    cu_launch(cu, op, true, k_act_mul, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, (const void *)gate_up->data, gs,
              out->data, os, (int)gate_up->dtype, T, I, (int)act, alpha, limit);
}

void cu_silu_mul(backend *be, const tensor *gate_up, tensor *out) {
    act_mul_run(cu_of(be), "silu_mul", BE_ACT_SILU, 0.0f, 0.0f, gate_up, out);
}

void cu_act_mul(backend *be, be_act act, const tensor *gate_up, tensor *out) {
    act_mul_run(cu_of(be), "act_mul", act, BE_SWIGLU_OAI_ALPHA, BE_SWIGLU_OAI_LIMIT, gate_up, out);
}

void cu_act_mul_p(backend *be, be_act act, float alpha, float limit, const tensor *gate_up, tensor *out) {
    act_mul_run(cu_of(be), "act_mul", act, alpha, limit, gate_up, out);
}

// x (T, D) in place: mul != 0: x * mul (scale); cap > 0: tanh(x / cap) * cap (the softcap); else act(x)
__global__ void k_unary(void *x, int dt, int64_t xs, int64_t T, int64_t D, int act, float cap, float mul) {
    pdl_launch();
    pdl_wait();
    for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            const float v = cu_ld(x, dt, r * xs + i);
            cu_st(x, dt, r * xs + i, mul != 0.0f ? v * mul : cap > 0.0f ? tanhf(v / cap) * cap : cu_act(act, v));
        }
}

void cu_activation(backend *be, be_act act, tensor *x) {
    cu_state *cu = cu_of(be);
    if ((unsigned)act >= CU_ACT_COUNT) {
        cu_fail(cu, "activation: activation %d is out of range (or gated only)", (int)act);
        return;
    }
    if (!cu_check_mat(cu, "activation", "x", x, CU_ACT, -1, -1)) return;
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    cu_launch(cu, "activation", true, k_unary, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, x->data, (int)x->dtype,
              tensor_row_stride(x), T, D, (int)act, 0.0f, 0.0f);
}

// x (T, V) = tanh(x / cap) * cap; logits F32 or BF16
void cu_softcap(backend *be, tensor *x, float cap) {
    cu_state *cu = cu_of(be);
    if (!(cap > 0.0f) || isinf(cap)) {
        cu_fail(cu, "softcap: cap %g must be positive and finite", (double)cap);
        return;
    }
    if (!cu_check_mat(cu, "softcap", "x", x, CU_ACT, -1, -1)) return;
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    cu_launch(cu, "softcap", true, k_unary, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, x->data, (int)x->dtype,
              tensor_row_stride(x), T, D, (int)BE_ACT_SILU, cap, 0.0f);
}

// x (T, D) *= s in place
void cu_scale(backend *be, tensor *x, float s) {
    cu_state *cu = cu_of(be);
    if (!isfinite(s) || s == 0.0f) {
        cu_fail(cu, "scale: factor %g must be finite and nonzero", (double)s);
        return;
    }
    if (!cu_check_mat(cu, "scale", "x", x, CU_ACT, -1, -1)) return;
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    cu_launch(cu, "scale", true, k_unary, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, x->data, (int)x->dtype,
              tensor_row_stride(x), T, D, (int)BE_ACT_SILU, 0.0f, s);
}

/* ---- gather rows ---- */

// x (M, D), idx (N) -> out (N, D)
__global__ void k_gather(const void *x, int xdt, int64_t xs, const int32_t *idx, int64_t N, int64_t M, int64_t D,
                         void *out, int odt, int64_t os, cu_dev_err *err) {
    pdl_launch();
    pdl_wait();
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        int32_t j = idx[r];
        if (j < 0 || j >= M) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_GATHER_IDX, r, j, M);
            continue;
        }
        row_copy(x, xdt, (int64_t)j * xs, out, odt, r * os, D);
    }
}

// out is x's dtype, or F32 from any float x (as the CPU backend)
void cu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!x || !out) {
        cu_fail(cu, "gather_rows: missing x or out");
        return;
    }
    bool widen = x->dtype != out->dtype;
    if (!cu_check_mat(cu, "gather_rows", "x", x, CU_FLOAT, -1, -1) ||
        !cu_check_vec(cu, "gather_rows", "idx", idx, CU_DT(DTYPE_I32), -1))
        return;
    int64_t N = tensor_numel(idx), M = cu_rows(x), D = tensor_row_len(x);
    if (!cu_check_mat(cu, "gather_rows", "out", out, widen ? CU_DT(DTYPE_F32) : CU_DT(x->dtype), N, D) || N == 0)
        return;
    cu_launch(cu, "gather_rows", true, k_gather, dim3(cu_grid(N, 1)), dim3(EW_THREADS), 0, (const void *)x->data,
              (int)x->dtype, tensor_row_stride(x), (const int32_t *)idx->data, N, M, D, out->data, (int)out->dtype,
              tensor_row_stride(out), cu->derr_dev);
}

/* ---- rotary embedding ---- */

/* One block per token; its threads walk the (head, pair) rotations of q
 * then k. cos_sin row p = [cos(p f_0) .. cos(p f_{r/2-1}) | sin(...)] (F32);
 * neox rotates (i, i + r/2), else (2i, 2i + 1); dims past rot_dim stay. */
__global__ void k_rope(void *q, int64_t qs, int64_t nq, void *k, int64_t ks, int64_t nk, int dt,
                       const int32_t *pos, int64_t T, const float *cs, int64_t css, int64_t max_pos, int hd,
                       int half, bool neox, cu_dev_err *err) {
    pdl_launch();
    pdl_wait();
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int32_t p = pos[t];
        if (p < 0 || p >= max_pos) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_ROPE_POS, t, p, max_pos);
            continue;
        }
        const float *c = cs + (int64_t)p * css, *s = c + half;
        int64_t total = (nq + nk) * half;
        for (int64_t j = threadIdx.x; j < total; j += blockDim.x) {
            int64_t h = j / half;
            int i = (int)(j % half);
            void *x;
            int64_t base;
            if (h < nq) {
                x = q;
                base = t * qs + h * hd;
            } else {
                x = k;
                base = t * ks + (h - nq) * hd;
            }
            int64_t i1 = neox ? base + i : base + 2 * i, i2 = neox ? base + i + half : base + 2 * i + 1;
            float x1 = cu_ld(x, dt, i1), x2 = cu_ld(x, dt, i2);
            cu_st(x, dt, i1, x1 * c[i] - x2 * s[i]);
            cu_st(x, dt, i2, x2 * c[i] + x1 * s[i]);
        }
    }
}

// q (T, nq*hd), k (T, nk*hd) in place; positions (T); cos_sin (max_pos, rot_dim)
void cu_rope(backend *be, tensor *q, tensor *k, const tensor *positions, const tensor *cos_sin, int head_dim,
             int rot_dim, bool neox) {
    cu_state *cu = cu_of(be);
    if (head_dim <= 0 || rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim) {
        cu_fail(cu, "rope: bad head_dim %d / rot_dim %d (need 0 < rot_dim <= head_dim, rot_dim even)", head_dim,
                rot_dim);
        return;
    }
    if (!cu_check_vec(cu, "rope", "positions", positions, CU_DT(DTYPE_I32), -1) ||
        !cu_check_mat(cu, "rope", "cos_sin", cos_sin, CU_DT(DTYPE_F32), -1, rot_dim))
        return;
    int64_t T = tensor_numel(positions);
    tensor *xs[2] = {q, k};
    const char *names[2] = {"q", "k"};
    int64_t heads[2] = {0, 0}, strides[2] = {0, 0};
    void *data[2] = {NULL, NULL};
    int dt = -1;
    for (int i = 0; i < 2; i++) {
        if (!xs[i]) continue; /* k may be omitted */
        if (!cu_check_mat(cu, "rope", names[i], xs[i], CU_ACT, T, -1)) return;
        int64_t D = tensor_row_len(xs[i]);
        if (D % head_dim) {
            cu_fail(cu, "rope: %s row length %lld is not a multiple of head_dim %d", names[i], (long long)D, head_dim);
            return;
        }
        if (dt >= 0 && xs[i]->dtype != dt) {
            cu_fail(cu, "rope: q and k have different dtypes");
            return;
        }
        dt = xs[i]->dtype;
        heads[i] = D / head_dim;
        strides[i] = tensor_row_stride(xs[i]);
        data[i] = xs[i]->data;
    }
    if (T == 0 || dt < 0 || heads[0] + heads[1] == 0) return;
    cu_launch(cu, "rope", true, k_rope, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, data[0], strides[0], heads[0],
              data[1], strides[1], heads[1], dt, (const int32_t *)positions->data, T, (const float *)cos_sin->data,
              tensor_row_stride(cos_sin), cu_rows(cos_sin), (int)head_dim, rot_dim / 2, neox, cu->derr_dev);
}

/* ---- the attention prologue, fused ---- */

/* One warp per (token, head) item, q heads then k heads: lane l holds the
 * head's elements l + 32 j (j < NJ, NJ = ceil(head_dim / 32)) in registers.
 * The position, slot, cos/sin row and norm weights are read before
 * pdl_wait() (qkr_pre), the head and the v head after it: one round trip
 * once the previous kernel is done. The head is RMS-normalised by the
 * per-head weight (Qwen3's q_norm / k_norm, Gemma 3's with 1 + w; none when
 * not given; a LayerNorm takes the ops it fuses), rotated
 * (partners through shared memory), and stored in place; a k head is also
 * written to the paged k cache at the token's slot with the token's v head
 * (slots < 0 are padding and skipped). Unlike the op composite, the
 * normalised value is not rounded before the rotation. */
#define QKR_WARPS 4
#define QKR_MAX_HD 512

/* A head's RMSNorm in the fused prologue: on (normalise at all), the (1 + w) kind, eps, weight (or
 * none). The kernel reads the fields of q's or k's by value (a reference chosen at run time put
 * both in local memory: a 48-byte stack frame), and the (1 + w) kind is its template argument
 * OFF (bit 0: q's norm, bit 1: k's), so that Qwen3's plain q / k norms run as before. */
struct qkr_norm {
    const void *w;  /* (head_dim) any float dtype, or NULL (w = 1; the offset kind: 1 + 0) */
    int wdt;
    bool on;
    bool offset;    /* BE_NORM_RMS_OFFSET: the multiplier is 1 + w */
    float eps;
};
#define QKR_OFF_Q 1
#define QKR_OFF_K 2

/* What an item needs that no kernel of the step writes (the position and
 * slot are uploaded, the table and the norm weights constant): loaded before
 * pdl_wait() for a warp's first item. */
template <int NJ>
struct qkr_pre {
    int32_t p;
    int64_t slot;
    float cv[NJ], sv[NJ], wv[NJ];
};

template <int NJ, int OFF>
__device__ __forceinline__ void qkr_prefetch(qkr_pre<NJ> &pr, int64_t t, bool isk, const void *nw, int ndt,
                                             const int32_t *pos, const int64_t *slots, const float *cs, int64_t css,
                                             int64_t max_pos, int hd, int half, bool neox, int i0, int di) {
    pr.p = pos[t];
    pr.slot = isk ? slots[t] : -1;
    /* the (1 + w) kind: constant false without OFF bits (the plain RMSNorm's code as before it came) */
    const bool offset = OFF == 0 ? false : OFF == (QKR_OFF_Q | QKR_OFF_K) ? true : isk ? (OFF & QKR_OFF_K) != 0
                                                                                   : (OFF & QKR_OFF_Q) != 0;
    /* the weights' NJ loads together (the dtype tested once, indices past hd clamped): a test per element made
     * them a chain of NJ round trips */
    float wr[NJ];
    cu_ld_batch<NJ>(wr, nw, ndt, i0, di, hd);
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const bool has = nw && i0 + di * j < hd;
        if (OFF == 0) {
            pr.wv[j] = has ? wr[j] : 1.0f;
        } else {
            const float w = has ? wr[j] : (offset ? 0.0f : 1.0f);
            pr.wv[j] = offset ? 1.0f + w : w;
        }
    }
    const bool ok = pr.p >= 0 && pr.p < max_pos;
    const float *c = cs + (int64_t)(ok ? pr.p : 0) * css, *sn = c + half;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int i = i0 + di * j;
        pr.cv[j] = 1.0f;
        pr.sv[j] = 0.0f;
        if (ok && i < 2 * half) {
            const int f = neox ? (i < half ? i : i - half) : i / 2;
            pr.cv[j] = c[f];
            pr.sv[j] = sn[f];
        }
    }
}

template <int NJ, int OFF>
__global__ void __launch_bounds__(QKR_WARPS * 32) k_qk_norm_rope_kv(
    void *q, int64_t qs, int nq, void *k, int64_t ks, int nk, const void *v, int64_t vs, int dt, qkr_norm qn,
    qkr_norm kn, const int32_t *pos, int64_t T, const float *cs, int64_t css, int64_t max_pos, int hd, int half,
    bool neox, void *kc, void *vc, bool f8, float kscale, float vscale, const int64_t *slots, int64_t num_slots,
    cu_dev_err *err) {
    __shared__ float buf[QKR_WARPS][NJ * 32];
    pdl_launch();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int heads = nq + nk;
    const int64_t kvd = (int64_t)nk * hd, items = T * heads;
    float *b = buf[warp];
    const int64_t it0 = (int64_t)blockIdx.x * QKR_WARPS + warp;
    qkr_pre<NJ> pr;
    if (it0 < items) {
        const int h = (int)(it0 % heads);
        const bool isk = h >= nq;
        qkr_prefetch<NJ, OFF>(pr, it0 / heads, isk, isk ? kn.w : qn.w, isk ? kn.wdt : qn.wdt, pos, slots, cs, css,
                              max_pos, hd, half, neox, lane, 32);
    }
    pdl_wait();
    for (int64_t it = it0; it < items; it += (int64_t)gridDim.x * QKR_WARPS) {
        const int64_t t = it / heads;
        const int h = (int)(it % heads);
        const bool isk = h >= nq;
        const int hh = isk ? h - nq : h;
        void *x = isk ? k : q;
        const int64_t base = t * (isk ? ks : qs) + (int64_t)hh * hd;
        const void *nw = isk ? kn.w : qn.w;
        if (it != it0)
            qkr_prefetch<NJ, OFF>(pr, t, isk, nw, isk ? kn.wdt : qn.wdt, pos, slots, cs, css, max_pos, hd, half, neox,
                                  lane, 32);
        float xv[NJ], vv[NJ];
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int i = lane + 32 * j;
            xv[j] = i < hd ? cu_ld(x, dt, base + i) : 0.0f;
            vv[j] = i < hd && isk ? cu_ld(v, dt, t * vs + (int64_t)hh * hd + i) : 0.0f;
        }
        if (pr.p < 0 || pr.p >= max_pos) {
            if (lane == 0) cu_report(err, CU_DEV_ROPE_POS, t, pr.p, max_pos);
            continue;
        }
        int64_t slot = pr.slot;
        if (slot >= num_slots) {
            if (lane == 0) cu_report(err, CU_DEV_KV_SLOT, t, slot, num_slots);
            slot = -1;
        }
        float scale = 1.0f;
        if (isk ? kn.on : qn.on) {
            float ss = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; j++) ss += xv[j] * xv[j];
            ss = cu_warp_sum(ss);
            scale = 1.0f / sqrtf(ss / (float)hd + (isk ? kn.eps : qn.eps));
        }
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            xv[j] *= scale * pr.wv[j];
            b[lane + 32 * j] = xv[j];
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int i = lane + 32 * j;
            if (i >= hd) continue;
            float o = xv[j];
            if (i < 2 * half) {
                /* neox: (i, i + half); interleaved: (2f, 2f + 1) */
                const int partner = neox ? (i < half ? i + half : i - half) : (i ^ 1);
                const bool first = neox ? i < half : (i & 1) == 0;
                o = first ? o * pr.cv[j] - b[partner] * pr.sv[j] : o * pr.cv[j] + b[partner] * pr.sv[j];
            }
            cu_st(x, dt, base + i, o);
            if (slot >= 0) {
                kv_store(kc, slot * kvd + (int64_t)hh * hd + i, o, f8, kscale); /* BF16, or E4M3 of o / scale */
                kv_store(vc, slot * kvd + (int64_t)hh * hd + i, vv[j], f8, vscale);
            }
        }
        __syncwarp(); /* b is reused by the warp's next item */
    }
}

/* The BF16 form for head_dim % 8 == 0 up to 256 (and, with neox pairs, rot_dim % 16 == 0): a head is
 * LPH = head_dim / 8 lanes, each holding 8 consecutive elements (one 16-byte load or store), so a warp takes
 * 32 / LPH items at once and the head and its v head come in two loads after pdl_wait() (the 32-lane form
 * above issues 2 NJ two-byte loads through its dtype switch, and at head_dim 256 (Gemma 3) measured 10 us alone
 * on an H100, 864 instructions a warp). The neox partner lives rot_dim / 16 lanes away (a shuffle), the
 * interleaved one in the lane. Same arithmetic as the form above but for the order of the sum of squares. */
template <int LPH, int OFF>
__global__ void __launch_bounds__(QKR_WARPS * 32) k_qk_norm_rope_kv8(
    __nv_bfloat16 *q, int64_t qs, int nq, __nv_bfloat16 *k, int64_t ks, int nk, const __nv_bfloat16 *v, int64_t vs,
    qkr_norm qn, qkr_norm kn, const int32_t *pos, int64_t T, const float *cs, int64_t css, int64_t max_pos, int hd,
    int half, bool neox, void *kc, void *vc, bool f8, float kscale, float vscale, const int64_t *slots,
    int64_t num_slots, cu_dev_err *err) {
    constexpr int HPW = 32 / LPH; /* items a warp */
    pdl_launch();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, sub = lane % LPH;
    const int heads = nq + nk, e0 = sub * 8;
    const int64_t kvd = (int64_t)nk * hd, items = T * heads;
    const int64_t it = ((int64_t)blockIdx.x * QKR_WARPS + warp) * HPW + lane / LPH;
    const bool live = it < items; /* (the whole warp stays for the shuffles) */
    const int64_t t = live ? it / heads : 0;
    const int h = live ? (int)(it % heads) : 0;
    const bool isk = h >= nq;
    const int hh = isk ? h - nq : h;
    /* before the wait: position, slot, norm weights, cos / sin of the 8 elements (qkr_prefetch, elements e0 + j) */
    qkr_pre<8> pr;
    qkr_prefetch<8, OFF>(pr, t, isk, isk ? kn.w : qn.w, isk ? kn.wdt : qn.wdt, pos, slots, cs, css, max_pos, hd, half,
                         neox, e0, 1);
    const int32_t p = pr.p;
    int64_t slot = live ? pr.slot : -1;
    const bool ok = p >= 0 && p < max_pos;
    const float *wv = pr.wv, *cv = pr.cv, *sv = pr.sv;
    pdl_wait();
    __nv_bfloat16 *x = (isk ? k + t * ks : q + t * qs) + (int64_t)hh * hd + e0;
    float xv[8], vv[8];
    uint4 xr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
    if (live && sub * 8 < hd) {
        xr = *(const uint4 *)x;
        if (isk) vr = *(const uint4 *)(v + t * vs + (int64_t)hh * hd + e0);
    }
    bf16x8_to_f32(xr, xv);
    bf16x8_to_f32(vr, vv);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) ss += xv[j] * xv[j];
#pragma unroll
    for (int o = LPH / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = (isk ? kn.on : qn.on) ? 1.0f / sqrtf(ss / (float)hd + (isk ? kn.eps : qn.eps)) : 1.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) xv[j] *= scale * wv[j];
    /* the neox partners: element i < half pairs with i + half, half / 8 lanes on */
    const int dl = half / 8;
    const bool first_half = e0 < half;
    const int src = lane + (first_half ? dl : -dl);
    float pv[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float y = __shfl_sync(0xffffffffu, xv[j], neox && e0 < 2 * half ? src : lane);
        pv[j] = neox ? y : xv[j ^ 1];
    }
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int i = e0 + j;
        o[j] = xv[j];
        if (i < 2 * half) {
            const bool first = neox ? first_half : (j & 1) == 0;
            o[j] = first ? xv[j] * cv[j] - pv[j] * sv[j] : xv[j] * cv[j] + pv[j] * sv[j];
        }
    }
    if (!live || sub * 8 >= hd) return;
    if (!ok) {
        if (sub == 0) cu_report(err, CU_DEV_ROPE_POS, t, p, max_pos);
        return;
    }
    if (slot >= num_slots) {
        if (sub == 0) cu_report(err, CU_DEV_KV_SLOT, t, slot, num_slots);
        slot = -1;
    }
    const uint4 ob = f32_to_bf16x8(o);
    *(uint4 *)x = ob;
    if (slot >= 0) {
        const int64_t ci = slot * kvd + (int64_t)hh * hd + e0;
        if (!f8) {
            *(uint4 *)((__nv_bfloat16 *)kc + ci) = ob;
            *(uint4 *)((__nv_bfloat16 *)vc + ci) = vr;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                kv_store(kc, ci + j, o[j], true, kscale); /* E4M3 of o / scale */
                kv_store(vc, ci + j, vv[j], true, vscale);
            }
        }
    }
}

/* The fused prologue's norm of a be_norm (NULL: none); false for a kind it does not fuse (LayerNorm). */
static bool qkr_norm_of(const be_norm *n, qkr_norm *out) {
    *out = qkr_norm{NULL, 0, false, false, 0.0f};
    if (!n) return true;
    if ((n->kind != BE_NORM_RMS && n->kind != BE_NORM_RMS_OFFSET) || n->b) return false; /* cu_norm takes or refuses it */
    *out = qkr_norm{n->w ? n->w->data : NULL, n->w ? (int)n->w->dtype : 0, true, n->kind == BE_NORM_RMS_OFFSET,
                    n->eps};
    return true;
}

typedef void (*qkr_kernel)(void *, int64_t, int, void *, int64_t, int, const void *, int64_t, int, qkr_norm, qkr_norm,
                           const int32_t *, int64_t, const float *, int64_t, int64_t, int, int, bool, void *, void *,
                           bool, float, float, const int64_t *, int64_t, cu_dev_err *);

/* k_qk_norm_rope_kv<NJ (nj rounded up to a power of two from 2), OFF> */
template <int OFF>
static qkr_kernel qkr_pick(int nj) {
    return nj <= 2 ? k_qk_norm_rope_kv<2, OFF> : nj <= 4 ? k_qk_norm_rope_kv<4, OFF>
                                                 : nj <= 8 ? k_qk_norm_rope_kv<8, OFF>
                                                           : k_qk_norm_rope_kv<16, OFF>;
}

typedef void (*qkr8_kernel)(__nv_bfloat16 *, int64_t, int, __nv_bfloat16 *, int64_t, int, const __nv_bfloat16 *,
                            int64_t, qkr_norm, qkr_norm, const int32_t *, int64_t, const float *, int64_t, int64_t, int,
                            int, bool, void *, void *, bool, float, float, const int64_t *, int64_t, cu_dev_err *);

template <int LPH>
static qkr8_kernel qkr8_pick_off(int off) {
    switch (off) {
    case 0: return k_qk_norm_rope_kv8<LPH, 0>;
    case QKR_OFF_Q: return k_qk_norm_rope_kv8<LPH, QKR_OFF_Q>;
    case QKR_OFF_K: return k_qk_norm_rope_kv8<LPH, QKR_OFF_K>;
    default: return k_qk_norm_rope_kv8<LPH, QKR_OFF_Q | QKR_OFF_K>;
    }
}

/* k_qk_norm_rope_kv8<lanes a head, OFF> */
static qkr8_kernel qkr8_pick(int lph, int off) {
    return lph == 8 ? qkr8_pick_off<8>(off) : lph == 16 ? qkr8_pick_off<16>(off) : qkr8_pick_off<32>(off);
}

// q (T, nq*hd) in place, k (T, nk*hd) in place, v (T, nk*hd); per-head norms (be_norm over hd) or NULL;
// positions (T); cos_sin (max_pos, rot_dim); caches (num_blocks, block_size, nk, hd) at m->slot_mapping
static void qk_norm_rope_kv_run(backend *be, const char *op, tensor *q, tensor *k, const tensor *v,
                                const be_norm *q_norm, const be_norm *k_norm, const tensor *positions,
                                const tensor *cos_sin, int head_dim, int rot_dim, bool neox, tensor *k_cache,
                                tensor *v_cache, const attn_meta *m) {
    cu_state *cu = cu_of(be);
    if (head_dim <= 0 || rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim) {
        cu_fail(cu, "%s: bad head_dim %d / rot_dim %d (need 0 < rot_dim <= head_dim, rot_dim even)", op, head_dim,
                rot_dim);
        return;
    }
    if (!m || m->block_size <= 0 || m->num_tokens < 0) {
        cu_fail(cu, "%s: bad attention metadata", op);
        return;
    }
    const be_norm *norms[2] = {q_norm, k_norm};
    for (int i = 0; i < 2; i++) {
        if (!norms[i]) continue;
        if ((unsigned)norms[i]->kind >= BE_NORM_COUNT) {
            cu_fail(cu, "%s: norm kind %d is out of range", op, (int)norms[i]->kind);
            return;
        }
        if ((norms[i]->w && !cu_check_vec(cu, op, i ? "k_norm" : "q_norm", norms[i]->w, CU_FLOAT, head_dim)) ||
            (norms[i]->b && !cu_check_vec(cu, op, i ? "k_norm bias" : "q_norm bias", norms[i]->b, CU_FLOAT, head_dim)))
            return;
    }
    if (!cu_check_vec(cu, op, "positions", positions, CU_DT(DTYPE_I32), m->num_tokens) ||
        !cu_check_mat(cu, op, "cos_sin", cos_sin, CU_DT(DTYPE_F32), -1, rot_dim) ||
        !cu_check_mat(cu, op, "q", q, CU_ACT, m->num_tokens, -1) ||
        !cu_check_mat(cu, op, "k", k, CU_DT(q->dtype), m->num_tokens, -1) ||
        !cu_check_mat(cu, op, "v", v, CU_DT(q->dtype), m->num_tokens, tensor_row_len(k)) ||
        !cu_check_vec(cu, op, "slot_mapping", &m->slot_mapping, CU_DT(DTYPE_I64), -1))
        return;
    const int64_t T = m->num_tokens, QD = tensor_row_len(q), KD = tensor_row_len(k);
    if (QD % head_dim || KD % head_dim || QD / head_dim > INT32_MAX / 2 || KD / head_dim > INT32_MAX / 2) {
        cu_fail(cu, "%s: q / k row lengths %lld / %lld are not multiples of head_dim %d", op, (long long)QD,
                (long long)KD, head_dim);
        return;
    }
    const int nq = (int)(QD / head_dim), nk = (int)(KD / head_dim);
    if (!cu_cache_check(cu, op, "k_cache", k_cache, m->block_size, nk, head_dim) ||
        !cu_cache_check(cu, op, "v_cache", v_cache, m->block_size, nk, head_dim))
        return;
    if (v_cache->shape[0] != k_cache->shape[0] || v_cache->dtype != k_cache->dtype) {
        cu_fail(cu, "%s: k_cache and v_cache have different block counts or dtypes", op);
        return;
    }
    if (tensor_numel(&m->slot_mapping) < T) {
        cu_fail(cu, "%s: slot_mapping has %lld entries for %lld tokens", op, (long long)tensor_numel(&m->slot_mapping),
                (long long)T);
        return;
    }
    if (T == 0) return;
    qkr_norm qn, kn;
    if (head_dim > QKR_MAX_HD || !qkr_norm_of(q_norm, &qn) || !qkr_norm_of(k_norm, &kn)) { /* the ops it fuses */
        if (q_norm) cu_norm(be, q, q_norm, q);
        if (k_norm) cu_norm(be, k, k_norm, k);
        cu_rope(be, q, k, positions, cos_sin, head_dim, rot_dim, neox);
        cu_kv_write(be, k, v, k_cache, v_cache, m);
        return;
    }
    const int64_t items = T * (nq + nk);
    const int nj = (head_dim + 31) / 32;
    const int off = (qn.on && qn.offset ? QKR_OFF_Q : 0) | (kn.on && kn.offset ? QKR_OFF_K : 0);
    const int half = rot_dim / 2;
    const bool a16 = ((uintptr_t)q->data | (uintptr_t)k->data | (uintptr_t)v->data) % 16 == 0 &&
                     (tensor_row_stride(q) | tensor_row_stride(k) | tensor_row_stride(v)) % 8 == 0;
    if (q->dtype == DTYPE_BF16 && head_dim % 8 == 0 && head_dim <= 256 && (!neox || half % 8 == 0) && a16 &&
        (k_cache->dtype == DTYPE_BF16 || k_cache->dtype == DTYPE_F8_E4M3) && !cu->qkr_scalar) {
        const int lph = head_dim <= 64 ? 8 : head_dim <= 128 ? 16 : 32; /* lanes a head (a power of two) */
        qkr8_kernel kern8 = qkr8_pick(lph, off);
        const int64_t per_cta = (int64_t)QKR_WARPS * (32 / lph);
        cu_launch(cu, op, true, kern8, dim3((unsigned)((items + per_cta - 1) / per_cta)), dim3(QKR_WARPS * 32), 0,
                  (__nv_bfloat16 *)q->data, tensor_row_stride(q), nq, (__nv_bfloat16 *)k->data, tensor_row_stride(k),
                  nk, (const __nv_bfloat16 *)v->data, tensor_row_stride(v), qn, kn, (const int32_t *)positions->data, T,
                  (const float *)cos_sin->data, tensor_row_stride(cos_sin), cu_rows(cos_sin), head_dim, half, neox,
                  k_cache->data, v_cache->data, k_cache->dtype == DTYPE_F8_E4M3, cu_cache_scale(k_cache),
                  cu_cache_scale(v_cache), (const int64_t *)m->slot_mapping.data,
                  k_cache->shape[0] * (int64_t)m->block_size, cu->derr_dev);
        return;
    }
    qkr_kernel kern;
    switch (off) {
    case 0: kern = qkr_pick<0>(nj); break;
    case QKR_OFF_Q: kern = qkr_pick<QKR_OFF_Q>(nj); break;
    case QKR_OFF_K: kern = qkr_pick<QKR_OFF_K>(nj); break;
    default: kern = qkr_pick<QKR_OFF_Q | QKR_OFF_K>(nj); break;
    }
    cu_launch(cu, op, true, kern, dim3(cu_grid(items, QKR_WARPS)), dim3(QKR_WARPS * 32), 0, q->data,
              tensor_row_stride(q), nq, k->data, tensor_row_stride(k), nk, (const void *)v->data, tensor_row_stride(v),
              (int)q->dtype, qn, kn, (const int32_t *)positions->data, T, (const float *)cos_sin->data,
              tensor_row_stride(cos_sin), cu_rows(cos_sin), head_dim, rot_dim / 2, neox, k_cache->data, v_cache->data,
              k_cache->dtype == DTYPE_F8_E4M3, cu_cache_scale(k_cache), cu_cache_scale(v_cache),
              (const int64_t *)m->slot_mapping.data, k_cache->shape[0] * (int64_t)m->block_size, cu->derr_dev);
}

void cu_qk_norm_rope_kv(backend *be, tensor *q, tensor *k, const tensor *v, const tensor *q_norm,
                        const tensor *k_norm, float eps, const tensor *positions, const tensor *cos_sin,
                        int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m) {
    const be_norm qn = {BE_NORM_RMS, q_norm, NULL, eps}, kn = {BE_NORM_RMS, k_norm, NULL, eps};
    cu_state *cu = cu_of(be);
    const char *op = "qk_norm_rope_kv";
    /* the weights are the norms here: each given one must be a (head_dim) vector */
    if ((q_norm && !cu_check_vec(cu, op, "q_norm", q_norm, CU_FLOAT, head_dim)) ||
        (k_norm && !cu_check_vec(cu, op, "k_norm", k_norm, CU_FLOAT, head_dim)))
        return;
    qk_norm_rope_kv_run(be, op, q, k, v, q_norm ? &qn : NULL, k_norm ? &kn : NULL, positions, cos_sin, head_dim,
                        rot_dim, neox, k_cache, v_cache, m);
}

void cu_qk_norm_rope_kv_ex(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                           const be_norm *k_norm, const tensor *positions, const tensor *cos_sin, int head_dim,
                           int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m) {
    qk_norm_rope_kv_run(be, "qk_norm_rope_kv_ex", q, k, v, q_norm, k_norm, positions, cos_sin, head_dim, rot_dim, neox,
                        k_cache, v_cache, m);
}

/* ---- linear helpers ---- */

__global__ void k_convert_bf16(__nv_bfloat16 *dst, const void *src, int sdt, int64_t rows, int64_t cols,
                               int64_t ss) {
    int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        dst[i] = __float2bfloat16(cu_ld(src, sdt, r * ss + c));
    }
}

bool cu_convert_bf16(cu_state *cu, void *dst, const void *src, dtype sdt, int64_t rows, int64_t cols, int64_t ss) {
    if (rows * cols == 0) return true;
    k_convert_bf16<<<cu_grid(rows * cols, EW_THREADS), EW_THREADS, 0, cu->stream>>>((__nv_bfloat16 *)dst, src, sdt,
                                                                                    rows, cols, ss);
    return cu_launched(cu, "linear weight conversion");
}

__global__ void k_add_bias(void *y, int ydt, int64_t ys, const float *bias, int64_t T, int64_t N) {
    pdl_launch();
    pdl_wait();
    for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
        for (int64_t i = threadIdx.x; i < N; i += blockDim.x) cu_st(y, ydt, r * ys + i, cu_ld(y, ydt, r * ys + i) + bias[i]);
}

bool cu_add_bias(cu_state *cu, void *y, dtype ydt, int64_t ys, const float *bias, int64_t T, int64_t N) {
    if (T == 0 || N == 0) return true;
    return cu_launch(cu, "linear bias", true, k_add_bias, dim3(cu_grid(T, 1)), dim3(EW_THREADS), 0, y, (int)ydt, ys,
                     bias, T, N);
}
