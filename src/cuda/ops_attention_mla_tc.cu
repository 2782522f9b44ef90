/* ops_attention_mla_tc.cu: MLA attention (DeepSeek-V2 / V3, absorbed form) on the tensor cores, split over the keys.
 *
 * The math is ops_attention_mla.cu's (the CPU reference: src/cpu/ops_attention_mla.c); this kernel is its fast path
 * for a BF16 latent cache with BF16 queries and (kv_lora_rank L, rope R) of DeepSeek-V2 / V3 / Kimi-K2 (512, 64)
 * or MiniCPM3 (256, 32), compile-time shapes. FlashMLA's idea (deepseek-ai/FlashMLA) in mma.sync form: the H heads
 * of one query token share every latent, so 16 heads are the M rows of one MMA tile and each cached latent is read
 * once per 16 heads. A CTA of 8 warps:
 *
 *   CTA (token t, heads h0 .. h0 + 15, split): keys [lo, hi) of the token's causal range 0 .. pos, MT_BN at a time
 *   S (16, MT_BN)  = [q_lat ; q_rope] (16, L + R) . [c ; k_rope]^T      warp w: keys 8 (w % 4) .., half w / 4 of K
 *   online softmax per head (base 2), P (16, MT_BN) to shared memory as BF16           warp w: heads 2w, 2w + 1
 *   O (16, L) = O * corr + P . c (MT_BN, L)                                  warp w: columns w L / 8 .. (w + 1) L / 8
 *
 * Keys come from the paged cache into shared memory with cp.async, two tiles deep (rows padded by 8 BF16 so that
 * ldmatrix rows fall on distinct banks); the block-table entries of a tile are loaded a tile ahead. With one split
 * the CTA writes O / l; with several (a short batch: as many splits as fit one wave of two CTAs per SM, at least
 * MT_MINK keys each) each writes its unnormalised O with its max and sum to the split-KV workspace and
 * k_mla_tc_combine merges them (a grid of its own, a CTA per token, head and 128 columns: the partials of 16 heads
 * x L are too many for one CTA to merge). A token's split count is cut on the device to its own length (max_seq_len may be an
 * upper bound, as in a recorded graph). Heads past H are zero rows; keys past the range or behind a bad block id
 * (reported) get -inf.
 */
#include "cuda/cuda_internal.h"

#define MT_BN 32          /* keys per tile */
#define MT_WARPS 8
#define MT_THREADS (MT_WARPS * 32)
#define MT_HPC 16         /* heads per CTA: the MMA's M */
#define MT_MINK 128       /* keys per split at least (its partial output, 16 x L floats, is a fraction of its keys) */
#define MT_MAX_SPLIT 128
#define MT_SLD (MT_BN + 4) /* score rows (f32) */
#define MT_PLD (MT_BN + 8) /* P rows (BF16): 80 bytes apart, distinct banks for ldmatrix */

typedef struct mt_args {
    const __nv_bfloat16 *ql, *qr; /* (T, H L), (T, H R) with row strides qls, qrs */
    int64_t qls, qrs;
    const __nv_bfloat16 *cache;   /* (num_blocks, bs, 1, L + R) */
    int64_t num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, T, H, nsplit;
    float scale_log2;             /* softmax scale * log2(e) */
    __nv_bfloat16 *out;           /* (T, H L) contiguous */
    float *ws;                    /* nsplit > 1: (T, H, nsplit, L + 4) partials: O, then max (base 2), sum, 2 spare
                                     (rows of 16-byte multiples for the merge's float4 loads) */
    cu_dev_err *err;
} mt_args;

static size_t mt_smem_bytes(int W) {
    const size_t LD = (size_t)W + 8;
    return (size_t)(MT_HPC + 2 * MT_BN) * LD * sizeof(__nv_bfloat16) + (size_t)2 * MT_HPC * MT_SLD * sizeof(float) +
           (size_t)MT_HPC * MT_PLD * sizeof(__nv_bfloat16) + (size_t)3 * MT_HPC * sizeof(float);
}

/* The token's sequence, checks, and its split of the keys (shared by the kernel and the merge): info = {ok, seq,
 * splits, lo, hi}. Reports only from (head group 0, split 0) when report. */
__device__ __forceinline__ void mt_locate(const mt_args &a, int t, int split, bool report, int *info) {
    int lo = 0, hi = a.S - 1; /* the last s with qsl[s] <= t */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (a.qsl[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    const int s = lo, q0 = a.qsl[s], q1 = a.qsl[s + 1], ctx = a.seq_lens[s];
    int ok = 1;
    if (report && t == 0 && (a.qsl[0] != 0 || a.qsl[a.S] != a.T))
        cu_report(a.err, CU_DEV_ATTN_QSL, a.qsl[0] != 0 ? 0 : a.S, a.qsl[0] != 0 ? a.qsl[0] : a.qsl[a.S], a.T);
    if (!(q0 <= t && t < q1)) {
        ok = 0;
        if (report) cu_report(a.err, CU_DEV_ATTN_QSL, s + 1, q1, a.T);
    } else if (ctx < q1 - q0 || (int64_t)ctx > (int64_t)a.max_blocks * a.bs) {
        ok = 0;
        if (report) cu_report(a.err, CU_DEV_ATTN_META, s, q1 - q0, ctx);
    }
    const int n_keys = ok ? ctx - (q1 - q0) + (t - q0) + 1 : 1; /* keys 0 .. the query's position */
    int splits = a.nsplit;
    if (splits > 1) splits = min(splits, (n_keys + MT_MINK - 1) / MT_MINK);
    const int seg = ((n_keys + splits - 1) / splits + MT_BN - 1) / MT_BN * MT_BN;
    splits = (n_keys + seg - 1) / seg;
    info[0] = ok;
    info[1] = s;
    info[2] = splits;
    info[3] = split * seg;
    info[4] = min(n_keys, (split + 1) * seg);
}

/* sc (+ sc2) += the k-steps [K0, K1) of Q (16 rows at qrow) K^T (8 keys at krow), two k-steps per iteration */
template <int K0, int K1>
__device__ __forceinline__ void mt_qk(float *sc, float *sc2, const __nv_bfloat16 *krow, const __nv_bfloat16 *qrow,
                                      int lane) {
#pragma unroll
    for (int kk = K0; kk + 1 < K1; kk += 2) {
        uint32_t qa[4], qb[4], b[4];
        ldsm_x4(b, krow + kk * 16 + (lane >> 3) * 8);
        ldsm_x4(qa, qrow + kk * 16);
        ldsm_x4(qb, qrow + kk * 16 + 16);
        mma16816(sc, qa, b[0], b[1]);
        mma16816(sc2, qb, b[2], b[3]);
    }
    if ((K1 - K0) % 2) {
        uint32_t qa[4], b[2];
        ldsm_x2(b, krow + (K1 - 1) * 16 + ((lane >> 3) & 1) * 8);
        ldsm_x4(qa, qrow + (K1 - 1) * 16);
        mma16816(sc, qa, b[0], b[1]);
    }
}

// grid (T, ceil(H / 16), nsplit), MT_THREADS threads, mt_smem_bytes(L + R) bytes of dynamic shared memory
template <int L, int R>
__global__ void __launch_bounds__(MT_THREADS) k_mla_tc(mt_args a) {
    constexpr int WC = L / MT_WARPS; /* output columns per warp */
    constexpr int NP = WC / 16;      /* their 16-column groups (two n-tiles each) */
    constexpr int W = L + R, LD = W + 8, KS = W / 16, CPR = W / 8;
    extern __shared__ __align__(16) unsigned char mt_sm[];
    __nv_bfloat16 *sq = (__nv_bfloat16 *)mt_sm;          /* (16, LD) [q_lat ; q_rope] of the CTA's heads */
    __nv_bfloat16 *sk = sq + MT_HPC * LD;                 /* 2 stages of (MT_BN, LD) [c ; k_rope] */
    float *ss = (float *)(sk + 2 * MT_BN * LD);           /* 2 x (16, MT_SLD) the tile's scores, two halves of K */
    __nv_bfloat16 *sp = (__nv_bfloat16 *)(ss + 2 * MT_HPC * MT_SLD); /* (16, MT_PLD) the tile's P */
    float *scorr = (float *)(sp + MT_HPC * MT_PLD);       /* (16) the rows' rescale factors */
    float *sml = scorr + MT_HPC;                          /* (16, 2) the rows' final max and sum */
    __shared__ long long sslot[2][MT_BN];
    __shared__ int info[5];

    pdl_launch();
    pdl_wait();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int t = blockIdx.x, h0 = blockIdx.y * MT_HPC, nh = min(MT_HPC, a.H - h0), split = blockIdx.z;
    if (tid == 0) mt_locate(a, t, split, blockIdx.y == 0 && split == 0, info);
    __syncthreads();
    if (!info[0] || split >= info[2]) return;
    const int s = info[1], splits = info[2], lo = info[3], hi = info[4];
    const int32_t *blocks = a.bt + (int64_t)s * a.bt_stride;

    /* the queries (heads past H: zero rows) */
    for (int i = tid; i < MT_HPC * CPR; i += MT_THREADS) {
        const int r = i / CPR, c = i % CPR;
        const bool valid = r < nh;
        const __nv_bfloat16 *src = a.ql;
        if (valid)
            src = c * 8 < L ? a.ql + (int64_t)t * a.qls + (int64_t)(h0 + r) * L + c * 8
                            : a.qr + (int64_t)t * a.qrs + (int64_t)(h0 + r) * R + (c * 8 - L);
        cp_async16(sq + r * LD + c * 8, src, valid);
    }
    /* thread tid < MT_BN: the block id of key kb0 + tid, loaded a tile ahead of its use (its latency then hides
     * behind a tile's work instead of preceding each tile's copies) */
    auto blk_of = [&](int kb0) -> int32_t {
        const int key = kb0 + tid;
        return tid < MT_BN && key < hi ? blocks[key / a.bs] : -1;
    };
    /* keys [kb0, kb0 + MT_BN) into stage st (rows past hi or behind a bad block: zeros, slot -1) */
    auto issue = [&](int st, int kb0, int32_t blk) {
        if (tid < MT_BN) {
            const int key = kb0 + tid;
            long long slot = -1;
            if (key < hi) {
                if (blk < 0 || blk >= a.num_blocks) cu_report(a.err, CU_DEV_ATTN_BLOCK, s, key / a.bs, blk);
                else slot = (long long)blk * a.bs + key % a.bs;
            }
            sslot[st][tid] = slot;
        }
        __syncthreads();
        for (int i = tid; i < MT_BN * CPR; i += MT_THREADS) {
            const int r = i / CPR, c = i % CPR;
            const long long slot = sslot[st][r];
            cp_async16(sk + (st * MT_BN + r) * LD + c * 8, slot >= 0 ? a.cache + slot * W + c * 8 : a.cache,
                       slot >= 0);
        }
        cp_async_commit();
    };
    const int ntile = (hi - lo + MT_BN - 1) / MT_BN;
    int32_t nblk = blk_of(lo);
    issue(0, lo, nblk); /* with the queries in the same group */
    nblk = blk_of(lo + MT_BN);

    const int g = lane >> 2, qd = lane & 3; /* fragment row (and row + 8), column pair */
    float o[2 * NP][4];
#pragma unroll
    for (int n = 0; n < 2 * NP; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float mrow[2], lrow[2]; /* heads 2 warp + i: the running max (base 2) and sum, the same in every lane */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }

    for (int it = 0; it < ntile; it++) {
        if (it + 1 < ntile) {
            issue((it + 1) & 1, lo + (it + 1) * MT_BN, nblk);
            nblk = blk_of(lo + (it + 2) * MT_BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16 *kt = sk + (it & 1) * MT_BN * LD;
        /* S = Q K^T: warp w the 8 keys 8 (w % 4) .. over half w / 4 of the k-steps (the halves' sums meet in
         * shared memory), two k-steps per iteration (one ldmatrix of the keys for both, two accumulators so that
         * consecutive MMAs do not wait on each other) */
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sc2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const __nv_bfloat16 *krow = kt + ((warp & 3) * 8 + (lane & 7)) * LD,
                            *qrow = sq + (lane & 15) * LD + (lane >> 4) * 8;
        if (warp < 4) mt_qk<0, KS / 2>(sc, sc2, krow, qrow, lane);
        else mt_qk<KS / 2, KS>(sc, sc2, krow, qrow, lane);
        float *ssw = ss + (warp >> 2) * MT_HPC * MT_SLD;
#pragma unroll
        for (int e = 0; e < 4; e++)
            ssw[(g + 8 * (e >> 1)) * MT_SLD + (warp & 3) * 8 + 2 * qd + (e & 1)] = sc[e] + sc2[e];
        __syncthreads();
        /* online softmax: warp w has heads 2w, 2w + 1, lane j key j */
        const int kb0 = lo + it * MT_BN;
        const bool valid = kb0 + lane < hi && sslot[it & 1][lane] >= 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = 2 * warp + i;
            const float x = valid ? (ss[row * MT_SLD + lane] + ss[(MT_HPC + row) * MT_SLD + lane]) * a.scale_log2
                                  : -INFINITY;
            float mx = x;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(mrow[i], mx), use = m_new == -INFINITY ? 0.0f : m_new;
            const float corr = exp2f(mrow[i] - use), p = exp2f(x - use); /* 0 for -inf */
            lrow[i] = lrow[i] * corr + cu_warp_sum(p);
            mrow[i] = m_new;
            sp[row * MT_PLD + lane] = __float2bfloat16(p);
            if (lane == 0) scorr[row] = corr;
        }
        __syncthreads();
        /* O = O * corr + P c over the warp's columns */
        const float c0 = scorr[g], c1 = scorr[g + 8];
#pragma unroll
        for (int n = 0; n < 2 * NP; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
#pragma unroll
        for (int j = 0; j < MT_BN / 16; j++) {
            uint32_t pa[4];
            ldsm_x4(pa, sp + (lane & 15) * MT_PLD + j * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int dp = 0; dp < NP; dp++) {
                uint32_t b[4];
                ldsm_x4_t(b, kt + (j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + warp * WC + dp * 16 +
                                 (lane >> 4) * 8);
                mma16816(o[2 * dp], pa, b[0], b[1]);
                mma16816(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* the stage, the scores and P are rewritten next */
    }
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sml[(2 * warp + i) * 2] = mrow[i];
            sml[(2 * warp + i) * 2 + 1] = lrow[i];
        }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = g + 8 * r;
        if (row >= nh) continue;
        const float M = sml[row * 2], Ls = sml[row * 2 + 1];
        if (splits == 1) {
            const float inv = Ls > 0.0f ? 1.0f / Ls : 0.0f;
            __nv_bfloat16 *dst = a.out + (int64_t)t * a.H * L + (int64_t)(h0 + row) * L + warp * WC + 2 * qd;
#pragma unroll
            for (int n = 0; n < 2 * NP; n++)
                *(uint32_t *)(dst + n * 8) = pack_bf16(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        } else {
            float *part = a.ws + (((int64_t)t * a.H + h0 + row) * a.nsplit + split) * (L + 4);
#pragma unroll
            for (int n = 0; n < 2 * NP; n++)
                *(float2 *)(part + warp * WC + n * 8 + 2 * qd) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
            if (warp == 0 && qd == 0) {
                part[L] = M;
                part[L + 1] = Ls;
            }
        }
    }
}

/* grid (T, H, L / 128 (1 below 128)), 128 threads: merges the splits of one (token, head) for 128 columns (tokens of one split
 * were written by k_mla_tc). The splits' max and sum: a thread each; the columns: 4 groups of 32 lanes take every
 * 4th split, 4 columns a lane (float4), their sums added in shared memory. */
template <int L>
__global__ void __launch_bounds__(128) k_mla_tc_combine(mt_args a) {
    constexpr int CW = L < 128 ? L : 128; /* columns per CTA */
    __shared__ float fsm[MT_MAX_SPLIT]; /* the splits' weights exp2(M_s - M) */
    __shared__ float red[4][128];
    __shared__ float wm[4], wl[4];
    __shared__ int info[5];
    pdl_launch();
    pdl_wait();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int t = blockIdx.x, h = blockIdx.y, c0 = blockIdx.z * CW;
    if (tid == 0) mt_locate(a, t, 0, false, info);
    __syncthreads();
    const int splits = info[2];
    if (!info[0] || splits == 1) return;
    const float *part = a.ws + ((int64_t)t * a.H + h) * a.nsplit * (L + 4);
    const float ms = tid < splits ? __ldcg(part + tid * (L + 4) + L) : -INFINITY;
    const float ls = tid < splits ? __ldcg(part + tid * (L + 4) + L + 1) : 0.0f;
    float M = ms;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    if (lane == 0) wm[warp] = M;
    __syncthreads();
    M = fmaxf(fmaxf(wm[0], wm[1]), fmaxf(wm[2], wm[3]));
    const float f = ms == -INFINITY ? 0.0f : exp2f(ms - M);
    if (tid < MT_MAX_SPLIT) fsm[tid] = f;
    const float lw = cu_warp_sum(f * ls);
    if (lane == 0) wl[warp] = lw;
    __syncthreads();
    const float Ls = wl[0] + wl[1] + wl[2] + wl[3];
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int sp = warp; lane * 4 < CW && sp < splits; sp += 4) {
        const float4 v = __ldcg((const float4 *)(part + sp * (L + 4) + c0 + lane * 4));
        const float w = fsm[sp];
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
    }
    if (lane * 4 < CW) *(float4 *)&red[warp][lane * 4] = acc;
    __syncthreads();
    if (tid >= CW) return;
    const float O = red[0][tid] + red[1][tid] + red[2][tid] + red[3][tid];
    a.out[(int64_t)t * a.H * L + (int64_t)h * L + c0 + tid] = __float2bfloat16(Ls > 0.0f ? O / Ls : 0.0f);
}

size_t cu_attention_mla_tc_smem(int L, int R) {
    return (L == 512 && R == 64) || (L == 256 && R == 32) || (L == 64 && R == 16) ? mt_smem_bytes(L + R) : 0;
}

bool cu_attention_mla_tc_fits(const tensor *q_lat, const tensor *q_rope, const tensor *cache, const tensor *out,
                              int L, int R) {
    const bool bf = q_lat->dtype == DTYPE_BF16 && q_rope->dtype == DTYPE_BF16 && cache->dtype == DTYPE_BF16 &&
                    out->dtype == DTYPE_BF16;
    /* the instantiated shapes: DeepSeek-V2 / V3 / Kimi-K2 (512, 64), MiniCPM3 (256, 32), a small one for tests */
    const bool shape = (L == 512 && R == 64) || (L == 256 && R == 32);
    /* 16-byte copies of the query rows */
    const bool aligned = tensor_row_stride(q_lat) % 8 == 0 && tensor_row_stride(q_rope) % 8 == 0 &&
                         (uintptr_t)q_lat->data % 16 == 0 && (uintptr_t)q_rope->data % 16 == 0 &&
                         (uintptr_t)cache->data % 16 == 0 && (uintptr_t)out->data % 16 == 0;
    return bf && shape && aligned;
}

template <int L, int R>
static void mt_launch(cu_state *cu, const mt_args &a, dim3 grid, size_t smem) {
    static size_t smem_set = 48 * 1024; /* per instantiation: the dynamic shared memory allowed so far */
    if (smem > smem_set) {
        if (!cu_ok(cu, cudaFuncSetAttribute(k_mla_tc<L, R>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                   "attention_mla", "cudaFuncSetAttribute"))
            return;
        smem_set = smem;
    }
    if (!cu_launch(cu, "attention_mla", true, k_mla_tc<L, R>, grid, dim3(MT_THREADS), smem, a) || a.nsplit == 1)
        return;
    cu_launch(cu, "attention_mla (split merge)", true, k_mla_tc_combine<L>, dim3(grid.x, a.H, L < 128 ? 1 : L / 128), dim3(128), 0,
              a);
}

// q_lat (T, H*L), q_rope (T, H*R) BF16, cache (num_blocks, bs, 1, L+R) BF16 (the new latents written) -> out (T, H*L)
void cu_attention_mla_tc(cu_state *cu, const tensor *q_lat, const tensor *q_rope, const tensor *cache,
                         const attn_meta *m, const mla_params *p, tensor *out) {
    const int H = p->num_heads, L = p->kv_lora_rank, R = p->rope_dim, W = L + R;
    const int64_t T = m->num_tokens, hg = (H + MT_HPC - 1) / MT_HPC, ctas = T * hg;
    if (hg > 65535) {
        cu_fail(cu, "attention_mla: %d heads exceed the grid", H);
        return;
    }
    /* splits: as many as keep every CTA in one wave of two per SM (their shared memory allows two), at least
     * MT_MINK keys each (of max_seq_len, an upper bound) */
    const int64_t target = 2 * (int64_t)cu->num_sms;
    const int64_t max_len = m->max_seq_len > 0 ? m->max_seq_len : (int64_t)m->max_blocks_per_seq * m->block_size;
    int64_t nsplit = 1;
    if (2 * ctas <= target) {
        nsplit = target / ctas;
        const int64_t by_len = (max_len + MT_MINK - 1) / MT_MINK;
        if (nsplit > by_len) nsplit = by_len;
        if (nsplit > MT_MAX_SPLIT) nsplit = MT_MAX_SPLIT;
        if (nsplit < 1) nsplit = 1;
    }
    mt_args a = {};
    if (nsplit > 1) {
        /* the workspace at its bound for any batch (T ceil(H / 16) nsplit <= target CTAs of 16 heads), so that
         * a graph recorded later never needs it larger */
        const size_t bytes = (size_t)target * MT_HPC * (L + 4) * sizeof(float);
        if (cu_buf_reserve(cu, &cu->attn_ws, bytes, "attention_mla (split-KV workspace)") != VLLM_OK) return;
        a.ws = (float *)cu->attn_ws.p;
    }
    a.ql = (const __nv_bfloat16 *)q_lat->data;
    a.qr = (const __nv_bfloat16 *)q_rope->data;
    a.qls = tensor_row_stride(q_lat);
    a.qrs = tensor_row_stride(q_rope);
    a.cache = (const __nv_bfloat16 *)cache->data;
    a.num_blocks = cache->shape[0];
    a.bs = m->block_size;
    a.qsl = (const int32_t *)m->query_start_loc.data;
    a.seq_lens = (const int32_t *)m->seq_lens.data;
    a.bt = (const int32_t *)m->block_tables.data;
    a.bt_stride = tensor_row_stride(&m->block_tables);
    a.max_blocks = m->max_blocks_per_seq;
    a.S = (int)m->num_seqs;
    a.T = (int)T;
    a.H = H;
    a.nsplit = (int)nsplit;
    a.scale_log2 = p->scale * 1.4426950408889634f;
    a.out = (__nv_bfloat16 *)out->data;
    a.err = cu->derr_dev;
    const dim3 grid((unsigned)T, (unsigned)hg, (unsigned)nsplit);
    const size_t smem = mt_smem_bytes(W);
    if (L == 512) mt_launch<512, 64>(cu, a, grid, smem);
    else mt_launch<256, 32>(cu, a, grid, smem);
}
