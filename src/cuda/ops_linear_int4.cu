/*
 * ops_linear_int4.cu: linear layers on I4_B128 weights (AWQ / GPTQ 4-bit checkpoints, tensor/int4.h) on the GPU,
 * kept in 4 bits on the device (W4A16: the activations stay BF16).
 *
 * Device layout (cu_i4w), made at load from the I4_B128 rows: the layer's group size G (128, 64 or 32: the
 * largest whose runs of 32 in every block share their scale and zero), per row
 *   q:  K / 2 bytes, per 128-chunk 64 bytes: lane tig's 16 bytes (tig = 0..3) hold its 32 elements e_0 .. e_31,
 *       e_j = feature 128 c + (j / P) G + tig P + j % P (P = G / 4: a lane's piece of each of the chunk's 128 / G
 *       groups), word w holding e_8w .. e_8w+7 in nibble order [e0, e2, e4, e6, e1, e3, e5, e7];
 *   s:  (K / G) F32 scales;  zz: (K / G) words 0x4300 | z in both halves (BF16 128 + z).
 * Decode (T <= 8, k_i4_mma): mma.sync m16n8k16 BF16 -> F32 with A = 16 weight rows (gated: 8 gate rows and
 * their 8 up rows), B = the T tokens' x read from global memory (L1) in the same element order. A word's
 * nibbles become BF16 pairs (128 + q) with one lop3 each and (q - z) with one subtraction (exact: small
 * integers), so an MMA sums (q - z) x in F32 over a group's slice and the group's partial is scaled by s once:
 * sum_k (q_k - z) s x_k with exact products (Marlin's dequantization, the scale after the MMA as DeepSeek's
 * FP8 GEMM does). A CTA of I4M_WARPS warps loops over 16-row tiles, warp w taking the chunks w, w + I4M_WARPS,
 * ..., four chunks in flight (the first loaded before pdl_wait); the warps' totals meet in shared memory and
 * warp 0 adds bias / y (accumulate) or writes act(gate) * up.
 * Small batches (8 < T <= VLLM_CUDA_I4_GEMM_MAX_T, default 64; k_i4_gemm): the same MMAs with x staged in shared
 * memory, 64 weight rows x up to 64 tokens per CTA, the weights read once per 64 tokens, still in 4 bits.
 * Prefill (larger T): tiles of rows dequantized to BF16 ((q - z) s rounded once) and cuBLAS's BF16 GEMM.
 * The reference is the CPU's float linear on the dequantized weights (tests/cuda/test_cuda_blocks.c test_int4).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

extern "C" {
#include "core/error.h"
#include "core/log.h"
#include "tensor/int4.h"
}

#define I4M_WARPS 8
#define I4_TILE_BYTES ((size_t)32 << 20) /* the prefill's dequantized weight tile, at most */

struct cu_i4w {
    int64_t rows, K;
    int G;        /* 128, 64 or 32 */
    uint8_t *q;   /* (rows, K / 2) in the lane layout */
    float *s;     /* (rows, K / G) */
    uint32_t *zz; /* (rows, K / G) */
};

int64_t cu_i4w_tile_rows(const cu_i4w *w) {
    int64_t t = (int64_t)(I4_TILE_BYTES / ((size_t)w->K * 2));
    if (t >= 128) t -= t % 128; /* tiles start 256-byte aligned in y (as cu_qtile_rows; K 12288's 1365 rows: 4x slower) */
    if (t < 1) t = 1;
    return t < w->rows ? t : w->rows;
}

size_t cu_i4w_tile_bytes(const cu_i4w *w) { return (size_t)cu_i4w_tile_rows(w) * (size_t)w->K * 2; }

void cu_i4w_free(cu_i4w *w) {
    if (!w) return;
    if (w->q) cudaFree(w->q);
    if (w->s) cudaFree(w->s);
    if (w->zz) cudaFree(w->zz);
    free(w);
}

/* feature (within its 128-chunk) of lane tig's element j, group size G */
static inline int i4_lane_feature(int G, int tig, int j) {
    const int P = G / 4;
    return (j / P) * G + tig * P + j % P;
}

/* the largest group size (128, 64, 32) whose runs of 32 share s and z in every block of the parts */
static int i4_group_size(const tensor *const *parts, int n, int64_t K) {
    bool g128 = true, g64 = true;
    for (int i = 0; i < n && g64; i++) {
        const i4_block *b = (const i4_block *)parts[i]->data;
        const int64_t nb = parts[i]->shape[0] * (K / I4_B);
        for (int64_t j = 0; j < nb && g64; j++) {
            const bool p01 = b[j].s[0] == b[j].s[1] && b[j].z[0] == b[j].z[1],
                       p23 = b[j].s[2] == b[j].s[3] && b[j].z[2] == b[j].z[3],
                       p02 = b[j].s[0] == b[j].s[2] && b[j].z[0] == b[j].z[2];
            g64 = p01 && p23;
            g128 = g128 && g64 && p02;
        }
    }
    return g128 ? 128 : g64 ? 64 : 32;
}

vllm_status cu_i4w_create(cu_state *cu, const tensor *const *parts, int n, int64_t K, int64_t rows, cu_i4w **out) {
    *out = NULL;
    if (K % I4_B) return vt_error(VLLM_ERR_INVALID_ARG, "linear: I4_B128 rows of %lld elements", (long long)K);
    cu_i4w *w = (cu_i4w *)calloc(1, sizeof *w);
    if (!w) return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    w->rows = rows;
    w->K = K;
    w->G = i4_group_size(parts, n, K);
    const int64_t NG = K / w->G, NC = K / I4_B;
    const size_t qb = (size_t)rows * (size_t)(K / 2), sb = (size_t)rows * (size_t)NG * 4;
    cudaError_t e = cudaMalloc((void **)&w->q, qb ? qb : 1);
    if (e == cudaSuccess) e = cudaMalloc((void **)&w->s, sb ? sb : 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&w->zz, sb ? sb : 4);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_i4w_free(w);
        return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for a (%lld, %lld) 4-bit weight",
                        (long long)rows, (long long)K);
    }
    cu->bytes_allocated += qb + 2 * sb;
    int64_t maxr = 0;
    for (int i = 0; i < n; i++)
        if (parts[i]->shape[0] > maxr) maxr = parts[i]->shape[0];
    uint8_t *hq = (uint8_t *)malloc((size_t)maxr * (size_t)(K / 2) + 1);
    float *hs = (float *)malloc((size_t)maxr * (size_t)NG * 4 + 4);
    uint32_t *hz = (uint32_t *)malloc((size_t)maxr * (size_t)NG * 4 + 4);
    vllm_status st = hq && hs && hz ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    const int G = w->G;
    /* the lane layout's nibble n of a chunk's 64 bytes (byte n / 2, low nibble first) holds feature src[n] of the
     * block: lane tig = n / 32, word wd = n / 8 % 4, nibble p = n % 8 holds e_{8 wd + [0,2,4,6,1,3,5,7][p]} */
    static const int ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    int src[I4_B];
    for (int nn = 0; nn < I4_B; nn++) src[nn] = i4_lane_feature(G, nn / 32, 8 * (nn / 8 % 4) + ORDER[nn % 8]);
    int64_t r0 = 0;
    for (int i = 0; i < n && st == VLLM_OK; i++) {
        const tensor *p = parts[i];
        const int64_t pr = p->shape[0];
        const i4_block *b = (const i4_block *)p->data;
        for (int64_t r = 0; r < pr; r++) {
            uint8_t *qr = hq + (size_t)r * (size_t)(K / 2);
            for (int64_t c = 0; c < NC; c++) {
                const i4_block *blk = &b[r * NC + c];
                uint8_t *qc = qr + c * 64;
                for (int bi = 0; bi < I4_B / 2; bi++)
                    qc[bi] = (uint8_t)(i4_block_q(blk, src[2 * bi]) | i4_block_q(blk, src[2 * bi + 1]) << 4);
                for (int g = 0; g < I4_B / G; g++) {
                    const int run = g * G / I4_SUB;
                    hs[r * NG + c * (I4_B / G) + g] = blk->s[run];
                    hz[r * NG + c * (I4_B / G) + g] = 0x43004300u | (uint32_t)blk->z[run] << 16 | blk->z[run];
                }
            }
        }
        e = cudaMemcpy(w->q + (size_t)r0 * (size_t)(K / 2), hq, (size_t)pr * (size_t)(K / 2), cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(w->s + (size_t)r0 * (size_t)NG, hs, (size_t)pr * (size_t)NG * 4, cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(w->zz + (size_t)r0 * (size_t)NG, hz, (size_t)pr * (size_t)NG * 4, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cudaGetLastError();
            st = vt_error(VLLM_ERR_BACKEND, "linear: 4-bit weight upload failed: %s", cudaGetErrorString(e));
        }
        r0 += pr;
    }
    free(hq);
    free(hs);
    free(hz);
    if (st != VLLM_OK) {
        cu_i4w_free(w);
        return st;
    }
    *out = w;
    return VLLM_OK;
}

/* ---- kernels ---- */

__device__ __forceinline__ void i4_mma(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* nibbles i and i + 4 of q as the BF16 pair (128 + q_i, 128 + q_{i+4}) less zz (128 + z): (q - z), exact */
template <int I>
__device__ __forceinline__ uint32_t i4_pair(uint32_t q, uint32_t zz) {
    uint32_t v;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v) : "r"(q >> (4 * I)), "r"(0x000f000fu), "r"(0x43004300u));
    __nv_bfloat162 r = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&v), *reinterpret_cast<__nv_bfloat162 *>(&zz));
    return *reinterpret_cast<uint32_t *>(&r);
}

/* lane's x words for chunk c (its 32 elements in e order, BF16 pairs), zero beyond T */
template <int G>
__device__ __forceinline__ void i4_load_x(uint4 *xv, const __nv_bfloat16 *xr, bool tok, int c, int tig) {
    constexpr int P = G / 4; /* elements per piece: 32, 16 or 8 */
#pragma unroll
    for (int i = 0; i < 4; i++) { /* uint4 i holds e_8i .. e_8i+7 */
        const int j = 8 * i, f = (j / P) * G + tig * P + j % P;
        xv[i] = tok ? __ldg((const uint4 *)(xr + (int64_t)c * I4_B + f)) : make_uint4(0, 0, 0, 0);
    }
}

template <int G, bool GLU>
__global__ void __launch_bounds__(I4M_WARPS * 32) k_i4_mma(const uint8_t *__restrict__ Q, const float *__restrict__ S,
                                                           const uint32_t *__restrict__ Z, int R, int K,
                                                           const __nv_bfloat16 *__restrict__ x, int64_t xs, int T,
                                                           const float *__restrict__ bias, void *y, int ydt,
                                                           int64_t ys, bool acc, int act) {
    __shared__ float red[2][I4M_WARPS * 32 * 4];
    constexpr int GPC = I4_B / G; /* groups per chunk */
    const int NC = K / I4_B, NG = K / G;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int NO = GLU ? R / 2 : R;
    const int tiles = GLU ? (NO + 7) / 8 : (R + 15) / 16;
    const int step = I4M_WARPS;
    const bool tok = g < T;
    const int t0 = 2 * tig, t1 = t0 + 1;
    const __nv_bfloat16 *xr = x + (int64_t)(tok ? g : 0) * xs;
    bool first = true;
    for (int tile = blockIdx.x, par = 0; tile < tiles; tile += gridDim.x, par ^= 1) {
        int oa, ob, ra, rb;
        if (GLU) {
            oa = ob = tile * 8 + g;
            ra = min(oa, NO - 1);
            rb = NO + ra;
        } else {
            oa = tile * 16 + g, ob = oa + 8;
            ra = min(oa, R - 1), rb = min(ob, R - 1);
        }
        const uint4 *qa = (const uint4 *)(Q + (int64_t)ra * (K / 2)) + tig,
                    *qb = (const uint4 *)(Q + (int64_t)rb * (K / 2)) + tig;
        const float *sa = S + (int64_t)ra * NG, *sb = S + (int64_t)rb * NG;
        const uint32_t *za = Z + (int64_t)ra * NG, *zb = Z + (int64_t)rb * NG;
        uint4 wv[4][2];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int cc = warp + u * step;
            if (cc < NC) {
                wv[u][0] = __ldcs(qa + cc * 4);
                wv[u][1] = __ldcs(qb + cc * 4);
            }
        }
        if (first) {
            first = false;
            pdl_launch();
            pdl_wait(); /* x (and y when accumulating) come from the previous kernels */
        }
        float tot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = warp; c < NC; c += 4 * step) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int cc = c + u * step;
                if (cc >= NC) break;
                uint4 xv[4];
                i4_load_x<G>(xv, xr, tok, cc, tig);
                const uint32_t wa[4] = {wv[u][0].x, wv[u][0].y, wv[u][0].z, wv[u][0].w},
                               wb[4] = {wv[u][1].x, wv[u][1].y, wv[u][1].z, wv[u][1].w};
                const uint32_t xw[16] = {xv[0].x, xv[0].y, xv[0].z, xv[0].w, xv[1].x, xv[1].y, xv[1].z, xv[1].w,
                                         xv[2].x, xv[2].y, xv[2].z, xv[2].w, xv[3].x, xv[3].y, xv[3].z, xv[3].w};
                const int nc = cc + 4 * step;
                if (nc < NC) { /* the next chunk of this slot in flight */
                    wv[u][0] = __ldcs(qa + nc * 4);
                    wv[u][1] = __ldcs(qb + nc * 4);
                }
#pragma unroll
                for (int gi = 0; gi < GPC; gi++) {
                    const int gg = cc * GPC + gi;
                    const uint32_t zza = __ldg(za + gg), zzb = __ldg(zb + gg);
                    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    /* this group's MMAs: m = gi * 8 / GPC .. ; MMA m uses e_4m .. e_4m+3 (word m / 2) */
#pragma unroll
                    for (int m = gi * 8 / GPC; m < (gi + 1) * 8 / GPC; m++) {
                        const uint32_t qwa = wa[m >> 1], qwb = wb[m >> 1];
                        if (m & 1)
                            i4_mma(d, i4_pair<2>(qwa, zza), i4_pair<2>(qwb, zzb), i4_pair<3>(qwa, zza),
                                   i4_pair<3>(qwb, zzb), xw[2 * m], xw[2 * m + 1]);
                        else
                            i4_mma(d, i4_pair<0>(qwa, zza), i4_pair<0>(qwb, zzb), i4_pair<1>(qwa, zza),
                                   i4_pair<1>(qwb, zzb), xw[2 * m], xw[2 * m + 1]);
                    }
                    const float s_a = __ldg(sa + gg), s_b = __ldg(sb + gg);
                    tot[0] = fmaf(d[0], s_a, tot[0]);
                    tot[1] = fmaf(d[1], s_a, tot[1]);
                    tot[2] = fmaf(d[2], s_b, tot[2]);
                    tot[3] = fmaf(d[3], s_b, tot[3]);
                }
            }
        }
        float *rd = red[par]; /* double-buffered: one barrier per tile */
#pragma unroll
        for (int i = 0; i < 4; i++) rd[(warp * 32 + lane) * 4 + i] = tot[i];
        __syncthreads();
        if (warp) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v = 0.0f;
#pragma unroll
            for (int w2 = 0; w2 < I4M_WARPS; w2++) v += rd[(w2 * 32 + lane) * 4 + i];
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

// rows [r0, r0 + rows) of the layer -> (rows, K) BF16, (q - z) s rounded once; a thread per word: its 8 elements
// are 8 consecutive features of one group (P >= 8), written as one 16-byte store
template <int G>
__global__ void k_i4_dequant(const uint8_t *__restrict__ Q, const float *__restrict__ S, const uint32_t *__restrict__ Z,
                             int64_t r0, int64_t rows, int K, __nv_bfloat16 *out) {
    const int64_t wpr = K / 8, n = rows * wpr; /* words per row, in all */
    const int NG = K / G;
    constexpr int P = G / 4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / wpr, wi = i % wpr;
        const int c = (int)(wi / 16), tig = (int)(wi % 16) / 4, wd = (int)(wi % 4);
        const uint32_t q = __ldg((const uint32_t *)(Q + (r0 + r) * (K / 2)) + wi);
        const int f0 = c * I4_B + (8 * wd / P) * G + tig * P + (8 * wd) % P, gg = f0 / G; /* e_8wd's feature */
        const float s = __ldg(S + (r0 + r) * NG + gg);
        const int z = (int)(__ldg(Z + (r0 + r) * NG + gg) & 0xffu);
        float v[8];
#pragma unroll
        for (int p = 0; p < 8; p++) /* nibble p holds e_{8 wd + [0,2,4,6,1,3,5,7][p]}: feature f0 + that */
            v[p < 4 ? 2 * p : 2 * (p - 4) + 1] = (float)((int)((q >> (4 * p)) & 15u) - z) * s;
        *(uint4 *)(out + r * K + f0) = f32_to_bf16x8(v);
    }
}

/* ---- the mid-size GEMM (CU_F8_GEMV_MAX_T < T <= I4G_MAX_T): k_i4_gemm ----
 * A CTA: I4G_BM = 64 weight rows (4 warps, 16 rows each: the lane's rows as k_i4_mma's) x BN = 8 NT tokens. Per
 * 128-chunk of K, the CTA stages the BN tokens' x (cp.async, I4G_STAGES deep) in shared memory in the lanes'
 * element order (token t's chunk: 16-byte slot 4 i + tig holds lane tig's e_8i .. e_8i+7; rows I4G_XROW bytes
 * apart, which makes a quarter warp's 16-byte reads conflict-free) with the chunk's scales and zeros of the 64
 * rows; each warp keeps its weights in registers (I4G_PF chunks ahead, read once) and runs 8 NT MMAs per chunk
 * (a weight fragment against the NT token tiles), the group's partial scaled by s after the MMAs as k_i4_mma. */
#define I4G_WARPS 4
#define I4G_BM (16 * I4G_WARPS)
#define I4G_STAGES 3 /* x stages in flight (4 and 6 measured no faster on the H200) */
#define I4G_XROW (I4_B * 2 + 64)
#define I4G_PF 4
#define I4G_MAX_T_DEFAULT 64 /* tokens up to this: k_i4_gemm; more: dequantized tiles and cuBLAS */

template <int G, int NT>
__host__ __device__ constexpr int i4g_stage_bytes() {
    return 8 * NT * I4G_XROW + 2 * I4G_BM * (I4_B / G) * 4;
}

template <int G, int NT>
__global__ void __launch_bounds__(I4G_WARPS * 32) k_i4_gemm(const uint8_t *__restrict__ Q, const float *__restrict__ S,
                                                            const uint32_t *__restrict__ Z, int R, int K,
                                                            const __nv_bfloat16 *__restrict__ x, int64_t xs, int T,
                                                            const float *__restrict__ bias, void *y, int ydt,
                                                            int64_t ys, bool acc, float *__restrict__ part) {
    constexpr int GPC = I4_B / G, P = G / 4, BN = 8 * NT;
    constexpr int XB = BN * I4G_XROW, SB = I4G_BM * GPC * 4, STAGE = i4g_stage_bytes<G, NT>();
    extern __shared__ __align__(16) uint8_t i4g_sm[];
    const int NG = K / G;
    /* split K (gridDim.z > 1): this CTA's chunks [cb, ce), its partial sums to part (gridDim.z, T, R) */
    const int cb = (int)((int64_t)blockIdx.z * (K / I4_B) / gridDim.z),
              ce = (int)((int64_t)(blockIdx.z + 1) * (K / I4_B) / gridDim.z), NC = ce - cb;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int n0 = blockIdx.x * BN, row0 = blockIdx.y * I4G_BM;
    const int la = warp * 16 + g, lb = la + 8; /* the lane's rows within the CTA's 64 */
    const int ra = min(row0 + la, R - 1), rb = min(row0 + lb, R - 1);
    const uint4 *qa = (const uint4 *)(Q + (int64_t)ra * (K / 2)) + (int64_t)cb * 4 + tig,
                *qb = (const uint4 *)(Q + (int64_t)rb * (K / 2)) + (int64_t)cb * 4 + tig;
    /* the CTA's chunk c (chunk cb + c of the row)'s x, scales and zeros -> stage c % I4G_STAGES */
    auto stage = [&](int cl) {
        uint8_t *st = i4g_sm + (cl % I4G_STAGES) * STAGE;
        const int c = cb + cl;
        for (int p = threadIdx.x; p < BN * 16; p += I4G_WARPS * 32) {
            const int t = p >> 4, i = (p >> 2) & 3, tg = p & 3;
            const int f = c * I4_B + (8 * i / P) * G + tg * P + (8 * i) % P; /* lane tg's e_8i */
            const bool ok = n0 + t < T;
            cp_async16(st + t * I4G_XROW + (i * 4 + tg) * 16, x + (int64_t)(ok ? n0 + t : 0) * xs + f, ok);
        }
        for (int p = threadIdx.x; p < 2 * I4G_BM; p += I4G_WARPS * 32) {
            const int r = p % I4G_BM;
            const int64_t o = (int64_t)min(row0 + r, R - 1) * NG + (int64_t)c * GPC;
            if (p < I4G_BM)
                cp_async_ca<GPC * 4>(st + XB + r * GPC * 4, S + o);
            else
                cp_async_ca<GPC * 4>(st + XB + SB + r * GPC * 4, Z + o);
        }
    };
    uint4 wv[I4G_PF][2];
#pragma unroll
    for (int u = 0; u < I4G_PF; u++)
        if (u < NC) {
            wv[u][0] = __ldcs(qa + u * 4);
            wv[u][1] = __ldcs(qb + u * 4);
        }
    pdl_launch();
    pdl_wait(); /* x (and y when accumulating) come from the previous kernels */
#pragma unroll
    for (int s = 0; s < I4G_STAGES - 1; s++) {
        if (s < NC) stage(s);
        cp_async_commit();
    }
    float tot[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) tot[nt][i] = 0.0f;
    for (int c0 = 0; c0 < NC; c0 += I4G_PF) {
#pragma unroll
        for (int u = 0; u < I4G_PF; u++) {
            const int c = c0 + u;
            if (c >= NC) break; /* uniform over the CTA */
            cp_async_wait<I4G_STAGES - 2>();
            __syncthreads(); /* chunk c staged; every warp is past chunk c - 1, whose stage is refilled now */
            if (c + I4G_STAGES - 1 < NC) stage(c + I4G_STAGES - 1);
            cp_async_commit();
            const uint8_t *st = i4g_sm + (c % I4G_STAGES) * STAGE;
            const float *ss = (const float *)(st + XB);
            const uint32_t *zs = (const uint32_t *)(st + XB + SB);
            const uint32_t wa[4] = {wv[u][0].x, wv[u][0].y, wv[u][0].z, wv[u][0].w},
                           wb[4] = {wv[u][1].x, wv[u][1].y, wv[u][1].z, wv[u][1].w};
            if (c + I4G_PF < NC) { /* this slot's next chunk in flight */
                wv[u][0] = __ldcs(qa + (c + I4G_PF) * 4);
                wv[u][1] = __ldcs(qb + (c + I4G_PF) * 4);
            }
#pragma unroll
            for (int gi = 0; gi < GPC; gi++) {
                const uint32_t zza = zs[la * GPC + gi], zzb = zs[lb * GPC + gi];
                float d[NT][4];
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) d[nt][i] = 0.0f;
                /* the group's pieces: piece i (word i: e_8i .. e_8i+7) is MMAs 2i and 2i + 1 */
#pragma unroll
                for (int i = gi * 4 / GPC; i < (gi + 1) * 4 / GPC; i++) {
                    const uint32_t a0[4] = {i4_pair<0>(wa[i], zza), i4_pair<0>(wb[i], zzb), i4_pair<1>(wa[i], zza),
                                            i4_pair<1>(wb[i], zzb)},
                                   a1[4] = {i4_pair<2>(wa[i], zza), i4_pair<2>(wb[i], zzb), i4_pair<3>(wa[i], zza),
                                            i4_pair<3>(wb[i], zzb)};
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const uint4 xv = *(const uint4 *)(st + (nt * 8 + g) * I4G_XROW + (i * 4 + tig) * 16);
                        i4_mma(d[nt], a0[0], a0[1], a0[2], a0[3], xv.x, xv.y);
                        i4_mma(d[nt], a1[0], a1[1], a1[2], a1[3], xv.z, xv.w);
                    }
                }
                const float s_a = ss[la * GPC + gi], s_b = ss[lb * GPC + gi];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    tot[nt][0] = fmaf(d[nt][0], s_a, tot[nt][0]);
                    tot[nt][1] = fmaf(d[nt][1], s_a, tot[nt][1]);
                    tot[nt][2] = fmaf(d[nt][2], s_b, tot[nt][2]);
                    tot[nt][3] = fmaf(d[nt][3], s_b, tot[nt][3]);
                }
            }
        }
    }
    cp_async_wait<0>();
    /* d[nt]: (row g, tokens 2 tig, 2 tig + 1), (row g + 8, the same tokens) */
    const int oa = row0 + la, ob = row0 + lb;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int o = i < 2 ? oa : ob, t = n0 + nt * 8 + 2 * tig + (i & 1);
            if (o >= R || t >= T) continue;
            if (part) { /* k_i4_splitk_sum finishes */
                part[((int64_t)blockIdx.z * T + t) * R + o] = tot[nt][i];
                continue;
            }
            float v = tot[nt][i];
            if (bias) v += bias[o];
            if (acc) v += cu_ld(y, ydt, (int64_t)t * ys + o);
            cu_st(y, ydt, (int64_t)t * ys + o, v);
        }
}

// y (T, R) (+)= the KS partials of part (KS, T, R), summed in order, + bias
__global__ void k_i4_splitk_sum(const float *__restrict__ part, int KS, int T, int R, const float *__restrict__ bias,
                                void *y, int ydt, int64_t ys, bool acc) {
    pdl_launch();
    pdl_wait();
    const int64_t n = (int64_t)T * R;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / R), o = (int)(i % R);
        float v = 0.0f;
        for (int z = 0; z < KS; z++) v += part[(int64_t)z * n + i];
        if (bias) v += bias[o];
        if (acc) v += cu_ld(y, ydt, (int64_t)t * ys + o);
        cu_st(y, ydt, (int64_t)t * ys + o, v);
    }
}

/* ---- host ---- */

bool cu_i4_gemv_fits(const cu_i4w *w, const tensor *x, int64_t T) {
    (void)w;
    return T >= 1 && T <= CU_F8_GEMV_MAX_T && x->dtype == DTYPE_BF16 && (uintptr_t)x->data % 16 == 0 &&
           tensor_row_stride(x) % 8 == 0;
}

template <int G, bool GLU>
static bool i4_launch(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, bool acc, int act) {
    const int64_t T = cu_rows(x), N = w->rows;
    const int64_t tiles = GLU ? (N / 2 + 7) / 8 : (N + 15) / 16;
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_i4_mma<G, GLU>, I4M_WARPS * 32, 0) != cudaSuccess ||
        occ < 1) {
        cudaGetLastError();
        occ = 1;
    }
    const int64_t grid = tiles < (int64_t)occ * cu->num_sms ? tiles : (int64_t)occ * cu->num_sms;
    return cu_launch(cu, GLU ? "linear (int4 gemv, gated)" : "linear (int4 gemv)", true, k_i4_mma<G, GLU>,
                     dim3((unsigned)grid), dim3(I4M_WARPS * 32), 0, (const uint8_t *)w->q, (const float *)w->s,
                     (const uint32_t *)w->zz, (int)N, (int)w->K, (const __nv_bfloat16 *)x->data, tensor_row_stride(x),
                     (int)T, bias, y->data, (int)y->dtype, tensor_row_stride(y), acc, act);
}

template <bool GLU>
static bool i4_gemv(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, bool acc, int act) {
    return w->G == 128 ? i4_launch<128, GLU>(cu, w, bias, x, y, acc, act)
           : w->G == 64 ? i4_launch<64, GLU>(cu, w, bias, x, y, acc, act)
                        : i4_launch<32, GLU>(cu, w, bias, x, y, acc, act);
}

bool cu_i4_gemv_glu(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, int act) {
    if (!cu_i4_gemv_fits(w, x, cu_rows(x)) || w->rows % 2) return false;
    i4_gemv<true>(cu, w, bias, x, y, false, act); /* (a launch failure is recorded) */
    return true;
}

/* VLLM_CUDA_I4_GEMM_MAX_T: the largest batch for k_i4_gemm (0: never; default I4G_MAX_T_DEFAULT) */
static int64_t i4g_max_t(void) {
    static int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("VLLM_CUDA_I4_GEMM_MAX_T");
        v = e && *e ? atoll(e) : I4G_MAX_T_DEFAULT;
        if (v < 0) v = 0;
    }
    return v;
}

/* k_i4_gemm's split of K over CTAs for a grid of `ctas` (token tiles x row blocks): enough CTAs for two per
 * multiprocessor, at most 8 splits, at least 4 chunks each */
static int i4g_splits(const cu_state *cu, const cu_i4w *w, int64_t ctas) {
    int ks = (int)((2 * (int64_t)cu->num_sms + ctas - 1) / ctas);
    const int most = (int)(w->K / I4_B / 4);
    if (ks > most) ks = most;
    if (ks > 8) ks = 8;
    return ks < 1 ? 1 : ks;
}

size_t cu_i4w_gemm_ws_bytes(const cu_state *cu, const cu_i4w *w) {
    const int64_t T = i4g_max_t();
    if (T <= CU_F8_GEMV_MAX_T) return 0;
    /* the most splits are at one token tile: ks * T * N partials bound every T up to the largest */
    const int ks = i4g_splits(cu, w, (w->rows + I4G_BM - 1) / I4G_BM);
    return ks > 1 ? (size_t)ks * (size_t)T * (size_t)w->rows * sizeof(float) : 0;
}

template <int G, int NT>
static bool i4g_launch(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, bool acc) {
    const int64_t T = cu_rows(x), N = w->rows;
    const size_t smem = (size_t)I4G_STAGES * i4g_stage_bytes<G, NT>();
    static bool attr = false; /* (idempotent: a race sets it twice) */
    if (!attr && smem > (48 << 10)) {
        if (cudaFuncSetAttribute(k_i4_gemm<G, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
            cudaGetLastError();
            cu_fail(cu, "linear (int4 gemm): no %zu bytes of shared memory", smem);
            return false;
        }
        attr = true;
    }
    const int64_t tt = (T + 8 * NT - 1) / (8 * NT), rb = (N + I4G_BM - 1) / I4G_BM;
    const int ks = i4g_splits(cu, w, tt * rb);
    float *part = NULL;
    if (ks > 1) {
        const size_t bytes = (size_t)ks * (size_t)T * (size_t)N * sizeof(float);
        if (cu_buf_reserve(cu, &cu->i4g_ws, bytes, "linear: int4 split-K partials") != VLLM_OK) return false;
        part = (float *)cu->i4g_ws.p;
    }
    const dim3 grid((unsigned)tt, (unsigned)rb, (unsigned)ks);
    if (!cu_launch(cu, "linear (int4 gemm)", true, k_i4_gemm<G, NT>, grid, dim3(I4G_WARPS * 32), smem,
                   (const uint8_t *)w->q, (const float *)w->s, (const uint32_t *)w->zz, (int)N, (int)w->K,
                   (const __nv_bfloat16 *)x->data, tensor_row_stride(x), (int)T, bias, y->data, (int)y->dtype,
                   tensor_row_stride(y), acc, part))
        return false;
    if (ks == 1) return true;
    return cu_launch(cu, "linear (int4 split-K sum)", true, k_i4_splitk_sum, dim3(cu_grid(T * N, 256)), dim3(256), 0,
                     (const float *)part, ks, (int)T, (int)N, bias, y->data, (int)y->dtype, tensor_row_stride(y), acc);
}

template <int G>
static bool i4g_run(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, bool acc) {
    const int64_t T = cu_rows(x);
    return T <= 16 ? i4g_launch<G, 2>(cu, w, bias, x, y, acc)
           : T <= 32 ? i4g_launch<G, 4>(cu, w, bias, x, y, acc)
                     : i4g_launch<G, 8>(cu, w, bias, x, y, acc);
}

bool cu_i4_linear(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, bool accumulate) {
    const int64_t T = cu_rows(x), K = w->K, N = w->rows, ys = tensor_row_stride(y);
    if (cu_i4_gemv_fits(w, x, T)) return i4_gemv<false>(cu, w, bias, x, y, accumulate, 0);
    if (T <= i4g_max_t() && T <= INT_MAX && x->dtype == DTYPE_BF16 && (uintptr_t)x->data % 16 == 0 &&
        tensor_row_stride(x) % 8 == 0)
        return w->G == 128  ? i4g_run<128>(cu, w, bias, x, y, accumulate)
               : w->G == 64 ? i4g_run<64>(cu, w, bias, x, y, accumulate)
                            : i4g_run<32>(cu, w, bias, x, y, accumulate);
    /* prefill: W in tiles of rows dequantized to BF16, cuBLAS */
    if (cu_buf_reserve(cu, &cu->qlin_ws, cu_i4w_tile_bytes(w), "linear: dequantized weight tile") != VLLM_OK) return false;
    __nv_bfloat16 *wt = (__nv_bfloat16 *)cu->qlin_ws.p;
    const int64_t tile = cu_i4w_tile_rows(w);
    const size_t es = dtype_size(y->dtype);
    for (int64_t r0 = 0; r0 < N; r0 += tile) {
        const int64_t rows = N - r0 < tile ? N - r0 : tile;
        const dim3 grid(cu_grid(rows * K / 8, 256)), block(256);
        const bool ok = w->G == 128 ? cu_launch(cu, "linear (int4 w)", false, k_i4_dequant<128>, grid, block, 0,
                                                (const uint8_t *)w->q, (const float *)w->s, (const uint32_t *)w->zz, r0,
                                                rows, (int)K, wt)
                        : w->G == 64 ? cu_launch(cu, "linear (int4 w)", false, k_i4_dequant<64>, grid, block, 0,
                                                 (const uint8_t *)w->q, (const float *)w->s, (const uint32_t *)w->zz,
                                                 r0, rows, (int)K, wt)
                                     : cu_launch(cu, "linear (int4 w)", false, k_i4_dequant<32>, grid, block, 0,
                                                 (const uint8_t *)w->q, (const float *)w->s, (const uint32_t *)w->zz,
                                                 r0, rows, (int)K, wt);
        if (!ok || !cu_gemm_bf16(cu, wt, rows, K, x, T, (char *)y->data + (size_t)r0 * es, y->dtype, ys, accumulate))
            return false;
    }
    if (bias) return cu_add_bias(cu, y->data, y->dtype, ys, bias, T, N);
    return true;
}
