/*
 * ops_attention_dtc.cu: decode attention for large batches on the tensor cores (mma.sync m16n8k16, BF16 cache,
 * f32 accumulation), head_dim 64 and 128 (and 256, opt-in: VLLM_CUDA_DTC_HD256=1), no softcap, no sinks.
 *
 * Where a step has enough (query token, KV head) pairs to fill the GPU without splitting the keys (cu_attention:
 * T * nkv >= 2 x SMs, e.g. 256 decodes of the Qwen3-8B shape, 2,048 pairs), one CTA takes one query token and one
 * KV head: its M = 16 rows are the token's query heads of that KV head (the GQA group, at most 16 a pass; rows
 * past the group are zero), so each K / V row is read once for the whole group. Keys come 16 NW at a time (NW
 * warps: 4, so 64 keys, at head_dim 64 / 128; 2 at 256, whose Q fragments are re-read from shared memory at each
 * k-step beside O's 128 accumulators), gathered from the paged cache into shared memory with cp.async, NST stages
 * deep (the prefill kernel's loop, ops_attention_tc.cu); each warp takes 16 keys of a tile with its own online
 * softmax (base 2) and O accumulators, and the warps' partials are merged in shared memory at the end
 * (flash-decoding's reduce inside the CTA). The block ids of the range are staged in shared memory up front
 * (DT_BLK at a time), so that a tile's loads wait for no other global read, and a first tile of earlier steps'
 * keys goes out before the grid dependency wait (overlapping the previous kernel's tail). The CUDA-core decode
 * kernel (ops_attention.cu) streamed the same KV at 1.6 TB/s on an H100 at batch 256 (164 registers a thread: 3
 * CTAs of 4 warps per SM, each warp loading, then computing, with 4 dot-product shuffles per key and head); this
 * one at 2.45 TB/s (docs/benchmarks.md, session 22), the next tiles' loads in flight while a tile is computed.
 *
 *   q (T, nh * HD) BF16, caches (num_blocks, block_size, nkv, HD) BF16 -> out (T, nh * HD) BF16
 *   S = Q K^T over the token's keys [k_lo, pos] (the window), P = softmax(S * scale), out = P V
 *
 * Tokens of sequences with at least tc_min_q new tokens (when > 0) are the prefill kernel's and skipped.
 */
#include "cuda/cuda_internal.h"

#define DT_ROWS 16    /* query heads per CTA (one m16 tile) */
/* NW warps a CTA (4 at head_dim 64 / 128, 2 at 256), each taking 16 keys of a tile of 16 NW keys */
#define DT_BN(NW) ((NW) * 16)
#define DT_NW(HD) ((HD) <= 128 ? 4 : 2)
#define DT_BLK 256    /* block ids staged in shared memory at once */

typedef struct dt_args {
    const __nv_bfloat16 *q;
    int64_t qs;
    const void *kc, *vc;
    float kscale, vscale;   /* 1 for a BF16 cache (cu_attn_fill_paged's fields) */
    int64_t kvd, num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, T, group, npass, window;
    int tc_min_q;           /* > 0: sequences with this many new tokens are the prefill kernel's */
    float scale_log2;       /* softmax scale * log2(e) */
    __nv_bfloat16 *out;
    int64_t os;
    cu_dev_err *err;
} dt_args;

template <int HD, int NST>
static constexpr size_t dt_smem_bytes() {
    return (size_t)(DT_ROWS + 2 * NST * DT_BN(DT_NW(HD))) * (HD + 8) * sizeof(__nv_bfloat16);
}

// grid (T, nkv * npass), 32 DT_NW(HD) threads, dt_smem_bytes<HD, NST>() of dynamic shared memory
template <int HD, int NST>
__global__ void __launch_bounds__(DT_NW(HD) * 32, HD <= 128 ? 3 : 1) k_attn_dtc(dt_args a) {
    constexpr int NW = DT_NW(HD), NT = NW * 32, BN = DT_BN(NW);
    constexpr int LD = HD + 8;  /* padded rows: ldmatrix rows on distinct banks */
    constexpr int CPR = HD / 8; /* 16-byte chunks per row */
    /* Q's fragments stay in registers up to head_dim 128; at 256 (next to O's 128 accumulators) they are read
     * from the Q tile at each k-step, as the prefill kernel does */
    constexpr bool QREG = HD <= 128;
    extern __shared__ __align__(16) unsigned char dt_sm[];
    __nv_bfloat16 *sq = (__nv_bfloat16 *)dt_sm;   /* (ROWS, LD) */
    __nv_bfloat16 *sk = sq + DT_ROWS * LD;        /* NST stages of (BN, LD) */
    __nv_bfloat16 *sv = sk + NST * BN * LD;    /* NST stages of (BN, LD) */
    __shared__ long long sslot[NST][BN];
    __shared__ int sblk[DT_BLK];                  /* block ids of columns sb0 .. sb0 + DT_BLK - 1 */
    __shared__ int info[5];                       /* ok, seq, first key, last key + 1, first new position */

    pdl_launch();
    const int t = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kvh = blockIdx.y / a.npass, pass = blockIdx.y % a.npass;
    const int h0 = kvh * a.group + pass * DT_ROWS, nhp = min(DT_ROWS, a.group - pass * DT_ROWS);

    /* Until pdl_wait() the CTA reads only what no kernel of this step writes (cuda_internal.h): the metadata (an
     * upload), the block ids, and the K / V of keys before the step's new tokens (written by earlier steps). */
    if (tid == 0) {
        int s, q0, q1, ctx;
        bool ok = cu_attn_token_seq(a, t, blockIdx.y == 0, &s, &q0, &q1, &ctx);
        if (ok && a.tc_min_q > 0 && q1 - q0 >= a.tc_min_q) ok = false; /* ops_attention_tc.cu's */
        const int pos = ctx - (q1 - q0) + (t - q0);                /* the query's absolute position */
        info[0] = ok;
        info[1] = s;
        info[2] = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
        info[3] = pos + 1;
        info[4] = ctx - (q1 - q0);
    }
    __syncthreads();
    if (!info[0]) return;
    const int s = info[1], k_lo = info[2], k_hi = info[3], first_new = info[4];
    const int nkb = (k_hi - k_lo + BN - 1) / BN;
    const int32_t *blocks = a.bt + (int64_t)s * a.bt_stride;
    const __nv_bfloat16 *kbase = (const __nv_bfloat16 *)a.kc + (int64_t)kvh * HD;
    const __nv_bfloat16 *vbase = (const __nv_bfloat16 *)a.vc + (int64_t)kvh * HD;

    /* the block ids of columns col0 .. col0 + DT_BLK - 1 (those of the range) into sblk; every thread calls it */
    int sb0 = 0;
    const int col_end = (k_hi - 1) / a.bs + 1;
    auto stage_blocks = [&](int col0) {
        __syncthreads(); /* the last reader of sblk is done */
        for (int i = tid; i < DT_BLK; i += NT) {
            const int col = col0 + i;
            int32_t blk = -1;
            if (col < col_end) {
                blk = blocks[col];
                if (blk < 0 || blk >= a.num_blocks) {
                    cu_report(a.err, CU_DEV_ATTN_BLOCK, s, col, blk);
                    blk = -1;
                }
            }
            sblk[i] = blk;
        }
        sb0 = col0;
        __syncthreads();
    };
    /* the keys [kb0, kb0 + BN) of the range into stage st (rows outside it, or of a bad block, zero-filled);
     * every thread calls it */
    auto issue = [&](int st, int kb0) {
        if ((min(kb0 + BN, k_hi) - 1) / a.bs >= sb0 + DT_BLK) stage_blocks(kb0 / a.bs);
        if (tid < BN) {
            const int key = kb0 + tid;
            long long slot = -1;
            if (key >= k_lo && key < k_hi) {
                const int32_t blk = sblk[key / a.bs - sb0];
                if (blk >= 0) slot = (long long)blk * a.bs + key % a.bs;
            }
            sslot[st][tid] = slot;
        }
        __syncthreads();
        cp_async_kv_rows<BN, HD, LD, NT>(sk + st * BN * LD, sv + st * BN * LD, kbase, vbase,
                                                   sslot[st], a.kvd, tid);
        cp_async_commit();
    };

    stage_blocks(k_lo / a.bs);
    /* the first tile goes out before the wait when it holds only keys of earlier steps */
    const bool early = min(k_lo + BN, k_hi) <= first_new;
    if (early) issue(0, k_lo);
    /* q is the previous kernel's output (and the newest keys this step's): wait for it */
    pdl_wait();
    for (int i = tid; i < DT_ROWS * CPR; i += NT) {
        const int r = i / CPR, c = i % CPR;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < nhp) v = *(const uint4 *)(a.q + (int64_t)t * a.qs + (int64_t)(h0 + r) * HD + c * 8);
        *(uint4 *)(sq + r * LD + c * 8) = v; /* read after the loop's first barrier */
    }
    if (!early) issue(0, k_lo);
    /* stages 1 .. NST - 2; an empty group past the range keeps the count */
#pragma unroll
    for (int st = 1; st < NST - 1; st++) {
        if (st < nkb) issue(st, k_lo + st * BN);
        else cp_async_commit();
    }

    const int g = lane >> 2, qd = lane & 3; /* fragment row (and row + 8), column pair */
    const int wk = warp * 16;               /* the warp's first key of a tile */
    uint32_t qf[QREG ? HD / 16 : 1][4];
    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};

    for (int it = 0; it < nkb; it++) {
        if (it + NST - 1 < nkb) issue((it + NST - 1) % NST, k_lo + (it + NST - 1) * BN);
        else cp_async_commit();
        cp_async_wait<NST - 1>();
        __syncthreads();
        if constexpr (QREG) {
            if (it == 0) {
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++)
                    ldsm_x4(qf[kk], sq + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
            }
        }
        const __nv_bfloat16 *kt = sk + (it % NST) * BN * LD, *vt = sv + (it % NST) * BN * LD;
        /* S = Q K^T: (16 rows, the warp's 16 keys) */
        float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t b[4];
            ldsm_x4(b, kt + (wk + (lane >> 4) * 8 + (lane & 7)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
            if constexpr (QREG) {
                mma16816(sc[0], qf[kk], b[0], b[1]);
                mma16816(sc[1], qf[kk], b[2], b[3]);
            } else {
                uint32_t qa[4];
                ldsm_x4(qa, sq + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
                mma16816(sc[0], qa, b[0], b[1]);
                mma16816(sc[1], qa, b[2], b[3]);
            }
        }
        /* mask (one position for every row), scale, online softmax */
        const int kb0 = k_lo + it * BN + wk;
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kb0 + n * 8 + 2 * qd + (e & 1);
                sc[n][e] = key < k_hi ? sc[n][e] * a.scale_log2 : -INFINITY;
            }
        mma_softmax_step<2, HD / 8>(sc, mrow, lrow, o);
        /* O += P V: the two score fragments are the A operand of the warp's 16 keys */
        const uint32_t pa[4] = {pack_bf16(sc[0][0], sc[0][1]), pack_bf16(sc[0][2], sc[0][3]),
                                pack_bf16(sc[1][0], sc[1][1]), pack_bf16(sc[1][2], sc[1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, vt + (wk + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 + (lane >> 4) * 8);
            mma16816(o[2 * dp], pa, b[0], b[1]);
            mma16816(o[2 * dp + 1], pa, b[2], b[3]);
        }
        __syncthreads(); /* the stage is refilled by a later issue */
    }
    cp_async_wait<0>(); /* (only empty groups can be pending) */

    /* the warps' partials through shared memory (the stages are free now): max, sum, O per row */
    float *wo = (float *)sk;                      /* (WARPS, ROWS, HD) */
    float *wm = wo + NW * DT_ROWS * HD;     /* (WARPS, ROWS) */
    float *wl = wm + NW * DT_ROWS;          /* (WARPS, ROWS) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
        if (qd == 0) {
            wm[warp * DT_ROWS + g + 8 * r] = mrow[r];
            wl[warp * DT_ROWS + g + 8 * r] = lrow[r];
        }
    }
#pragma unroll
    for (int d = 0; d < HD / 8; d++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            wo[(warp * DT_ROWS + g + 8 * (e >> 1)) * HD + d * 8 + 2 * qd + (e & 1)] = o[d][e];
    __syncthreads();
    for (int idx = tid; idx < nhp * HD; idx += NT) {
        const int r = idx / HD, d = idx % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++) M = fmaxf(M, wm[w * DT_ROWS + r]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < NW; w++) {
                const float mw = wm[w * DT_ROWS + r];
                if (mw == -INFINITY) continue;
                const float f = exp2f(mw - M);
                L += wl[w * DT_ROWS + r] * f;
                O += wo[(w * DT_ROWS + r) * HD + d] * f;
            }
        }
        a.out[(int64_t)t * a.os + (int64_t)(h0 + r) * HD + d] = __float2bfloat16(L > 0.0f ? O / L * a.vscale : 0.0f);
    }
}

/* NST: VLLM_CUDA_DTC_STAGES (2 or 3; default 2); head_dim 256 two stages only */
template <int HD, int NST>
static cudaError_t dt_set_smem() {
    return cudaFuncSetAttribute(k_attn_dtc<HD, NST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)dt_smem_bytes<HD, NST>());
}

vllm_status cu_attention_dtc_init(cu_state *cu) {
    cudaError_t e = dt_set_smem<64, 2>();
    if (e == cudaSuccess) e = dt_set_smem<64, 3>();
    if (e == cudaSuccess) e = dt_set_smem<128, 2>();
    if (e == cudaSuccess) e = dt_set_smem<128, 3>();
    if (e == cudaSuccess && cu->dtc_hd256) e = dt_set_smem<256, 2>();
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda backend: decode attention shared memory: %s", cudaGetErrorString(e));
    }
    return VLLM_OK;
}

bool cu_attention_dtc_fits(const cu_state *cu, const tensor *q, const tensor *out, const tensor *k_cache,
                           const tensor *v_cache, const attn_params *p) {
    const bool hd = p->head_dim == 64 || p->head_dim == 128 || (p->head_dim == 256 && cu->dtc_hd256);
    return !cu->no_dtc_attention && hd && p->softcap == 0.0f && !p->sinks && k_cache->dtype == DTYPE_BF16 && v_cache->dtype == DTYPE_BF16 &&
           q->dtype == DTYPE_BF16 && out->dtype == DTYPE_BF16 && ((uintptr_t)q->data & 15) == 0 &&
           tensor_row_stride(q) % 8 == 0 && ((uintptr_t)k_cache->data & 15) == 0 &&
           ((uintptr_t)v_cache->data & 15) == 0;
}

template <int HD, int NST>
static void dt_launch(cu_state *cu, dim3 grid, const dt_args &a) {
    cu_launch(cu, "attention (decode, tensor cores)", true, k_attn_dtc<HD, NST>, grid, dim3(DT_NW(HD) * 32),
              dt_smem_bytes<HD, NST>(), a);
}

// the tokens of the batch that are not the prefill kernel's (tc: it runs too)
void cu_attention_dtc(cu_state *cu, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                      const attn_params *p, tensor *out, bool tc) {
    dt_args a;
    a.q = (const __nv_bfloat16 *)q->data;
    a.qs = tensor_row_stride(q);
    cu_attn_fill_paged(a, k_cache, v_cache, m, p);
    a.S = (int)m->num_seqs;
    a.T = (int)m->num_tokens;
    a.group = p->num_heads / p->num_kv_heads;
    a.npass = (a.group + DT_ROWS - 1) / DT_ROWS;
    a.window = p->sliding_window;
    a.tc_min_q = tc ? TC_MIN_Q : 0;
    a.scale_log2 = p->scale * 1.4426950408889634f * a.kscale;
    a.out = (__nv_bfloat16 *)out->data;
    a.os = tensor_row_stride(out);
    a.err = cu->derr_dev;
    const dim3 grid((unsigned)m->num_tokens, (unsigned)(p->num_kv_heads * a.npass));
    const bool three = cu->dtc_stages == 3;
    switch (p->head_dim) {
    case 64: three ? dt_launch<64, 3>(cu, grid, a) : dt_launch<64, 2>(cu, grid, a); break;
    case 128: three ? dt_launch<128, 3>(cu, grid, a) : dt_launch<128, 2>(cu, grid, a); break;
    default: dt_launch<256, 2>(cu, grid, a); break;
    }
}
