/*
 * ops_attention_tc.cu: paged attention for prefill chunks on the tensor
 * cores (mma.sync m16n8k16, BF16 operands, f32 accumulation), for
 * head_dim 64, 128 and 256 (Gemma; Q's fragments then read from shared
 * memory at each k-step, and the GPU must offer 165 KiB of shared memory
 * per block), with the optional score softcap (Gemma 2) and attention sinks
 * (gpt-oss: each row's online softmax starts at max = sink_h, sum = 1, the
 * sum held by the first lane of the row's quad).
 *
 * FlashAttention-2's loop (Dao, 2023) over vLLM v1's paged, varlen,
 * causal batch (vllm/v1/attention/ops/triton_unified_attention.py,
 * kernel_unified_attention_2d: a tile of one sequence's query tokens for one
 * head, keys walked block by block through the block table, online softmax,
 * sliding window). A CTA of 4 warps takes TC_BM = 64 query tokens of one
 * sequence (one with at least TC_MIN_Q new tokens) for one query head; each
 * warp owns 16 of the rows. Keys come TC_BN = 64 at a time, gathered from
 * the paged cache into shared memory with cp.async, two stages deep; Q K^T
 * and P V are mma.sync with operands from ldmatrix (V transposed), P kept in
 * registers (the score fragments repacked as the A operand). Keys outside a
 * row's causal / window range get -inf; key rows outside the tile's range
 * are zero-filled so that stale cache contents (NaN) never reach P V.
 * Shorter sequences in the same batch are left to the decode kernel
 * (ops_attention.cu), which skips these.
 *
 * The FP8 cache (KT uint8_t, no softcap or sinks): each thread reads 8 E4M3
 * bytes of a K / V row and stores them as 8 BF16 (exact) in the stage,
 * synchronously (the Q tile stays cp.async); the k scale is in the score
 * scale, the v scale in the output.
 */
#include "cuda/cuda_internal.h"

#define TC_BM 64
#define TC_BN 64
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)

typedef struct tc_args {
    const __nv_bfloat16 *q;
    int64_t qs;
    const void *kc, *vc;    /* KT */
    float kscale, vscale;   /* the caches' scales (scale_log2 / cap_mul hold kscale; out is O / l * vscale) */
    int64_t kvd, num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, nh, group, window;
    float scale_log2;       /* softmax scale * log2(e): scores in base 2 */
    float cap_mul;          /* softcap: scale / softcap (0 = off); the score is cap_log2 * tanh(q.k * cap_mul) */
    float cap_log2;         /* softcap * log2(e) */
    const void *sinks;      /* SINK: (nh) of sdt, the heads' sink logits (natural log; * log2(e) here) */
    int sdt;
    __nv_bfloat16 *out;
    int64_t os;
    cu_dev_err *err;
} tc_args;

template <int HD>
static constexpr size_t tc_smem_bytes() {
    return (size_t)(TC_BM + 4 * TC_BN) * (HD + 8) * sizeof(__nv_bfloat16);
}

// grid (tiles upper bound, num_heads): q (T, nh*HD) BF16, caches -> out (T, nh*HD) BF16.
// CAP: the softcap, a template argument so that the models without one (Llama, Qwen) run the
// score loop without it (a runtime test there cost 37% at head_dim 128 on an H200); SINK: a.sinks
template <typename KT, int HD, bool CAP, bool SINK>
__global__ void __launch_bounds__(TC_THREADS) k_attn_tc(tc_args a) {
    constexpr int LD = HD + 8; /* padded shared-memory rows: ldmatrix rows land on distinct banks */
    constexpr int CPR = HD / 8; /* 16-byte chunks per row */
    extern __shared__ __align__(16) unsigned char tc_sm[];
    __nv_bfloat16 *sq = (__nv_bfloat16 *)tc_sm;       /* (BM, LD) */
    __nv_bfloat16 *sk = sq + TC_BM * LD;               /* 2 stages of (BN, LD) */
    __nv_bfloat16 *sv = sk + 2 * TC_BN * LD;           /* 2 stages of (BN, LD) */
    __shared__ long long sslot[2][TC_BN];
    __shared__ int wsum[TC_WARPS];
    __shared__ int info[4];                            /* seq, first row, found */

    pdl_launch();
    pdl_wait();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = blockIdx.y, kvh = h / a.group;

    /* which tile: tiles are numbered over the sequences with >= TC_MIN_Q new tokens, in order */
    if (tid == 0) info[2] = 0;
    __syncthreads();
    int base = 0;
    for (int c = 0; c < a.S; c += TC_THREADS) {
        const int s = c + tid;
        int n = 0;
        if (s < a.S) {
            const int ql = a.qsl[s + 1] - a.qsl[s];
            n = ql >= TC_MIN_Q ? (ql + TC_BM - 1) / TC_BM : 0;
        }
        int incl = n;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += y;
        }
        if (lane == 31) wsum[warp] = incl;
        __syncthreads();
        int off = 0, total = 0;
        for (int w = 0; w < TC_WARPS; w++) {
            off += w < warp ? wsum[w] : 0;
            total += wsum[w];
        }
        incl += off;
        const int excl = incl - n;
        if (n && (int)blockIdx.x >= base + excl && (int)blockIdx.x < base + incl) {
            info[0] = s;
            info[1] = ((int)blockIdx.x - base - excl) * TC_BM;
            info[2] = 1;
        }
        base += total;
        __syncthreads();
        if (info[2]) break;
    }
    if (!info[2]) return;
    const int s = info[0], r0 = info[1];
    const int q0 = a.qsl[s], q_len = a.qsl[s + 1] - q0, ctx = a.seq_lens[s];
    if (ctx < q_len || (int64_t)ctx > (int64_t)a.max_blocks * a.bs) {
        if (tid == 0 && h == 0 && r0 == 0) cu_report(a.err, CU_DEV_ATTN_META, s, q_len, ctx);
        return;
    }
    const int rows = min(TC_BM, q_len - r0);
    const int p_first = ctx - q_len + r0, p_last = p_first + rows - 1;
    const int k_lo = a.window > 0 && p_first - a.window + 1 > 0 ? p_first - a.window + 1 : 0;
    const int k_hi = p_last + 1;
    const int nkb = (k_hi - k_lo + TC_BN - 1) / TC_BN;
    const int32_t *blocks = a.bt + (int64_t)s * a.bt_stride;
    const KT *kbase = (const KT *)a.kc + (int64_t)kvh * HD, *vbase = (const KT *)a.vc + (int64_t)kvh * HD;

    /* Q tile (rows past the sequence's tokens are zero) */
    for (int i = tid; i < TC_BM * CPR; i += TC_THREADS) {
        const int r = i / CPR, c = i % CPR;
        const bool valid = r < rows;
        const __nv_bfloat16 *src = valid ? a.q + (int64_t)(q0 + r0 + r) * a.qs + (int64_t)h * HD + c * 8 : a.q;
        cp_async16(sq + r * LD + c * 8, src, valid);
    }
    /* the keys [kb0, kb0 + BN) of the tile's range into stage st */
    auto issue = [&](int st, int kb0) {
        if (tid < TC_BN) {
            const int key = kb0 + tid;
            long long slot = -1;
            if (key >= k_lo && key < k_hi) {
                const int col = key / a.bs;
                const int32_t blk = blocks[col];
                if (blk < 0 || blk >= a.num_blocks) cu_report(a.err, CU_DEV_ATTN_BLOCK, s, col, blk);
                else slot = (long long)blk * a.bs + key % a.bs;
            }
            sslot[st][tid] = slot;
        }
        __syncthreads();
        if constexpr (sizeof(KT) == 1) { /* E4M3 -> BF16 through registers */
            for (int i = tid; i < TC_BN * CPR; i += TC_THREADS) {
                const int r = i / CPR, c = i % CPR;
                const long long slot = sslot[st][r];
                const bool valid = slot >= 0;
                const int64_t off = valid ? slot * a.kvd + c * 8 : 0;
                const uint4 kr = valid ? kv8_to_bf16x8(kv_ldcg8(kbase + off), kbase) : make_uint4(0, 0, 0, 0);
                const uint4 vr = valid ? kv8_to_bf16x8(kv_ldcg8(vbase + off), vbase) : make_uint4(0, 0, 0, 0);
                *(uint4 *)(sk + (st * TC_BN + r) * LD + c * 8) = kr;
                *(uint4 *)(sv + (st * TC_BN + r) * LD + c * 8) = vr;
            }
        } else {
            cp_async_kv_rows<TC_BN, HD, LD, TC_THREADS>(sk + st * TC_BN * LD, sv + st * TC_BN * LD, kbase, vbase,
                                                       sslot[st], a.kvd, tid);
        }
        cp_async_commit();
    };
    issue(0, k_lo); /* with the Q tile in the same group */

    const int g = lane >> 2, qd = lane & 3; /* fragment row (and row + 8), column pair */
    const int wr = warp * 16;               /* the warp's first row of the tile */
    /* Q's fragments stay in registers up to head_dim 128; at 256 they would push the thread
     * past 255 registers next to O's 128 accumulators, so they are read from the Q tile
     * (which stays in shared memory) at every k-step instead */
    constexpr bool QREG = HD <= 128;
    uint32_t qf[QREG ? HD / 16 : 1][4];
    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    if constexpr (SINK) { /* the sink: one more logit (base 2), value 0, counted once per row (lane qd 0) */
        mrow[0] = mrow[1] = cu_ld(a.sinks, a.sdt, h) * 1.4426950408889634f;
        lrow[0] = lrow[1] = qd == 0 ? 1.0f : 0.0f;
    }
    /* absolute positions of the thread's two rows (past the tokens: masked everywhere) */
    const int pr[2] = {wr + g < rows ? p_first + wr + g : -1, wr + g + 8 < rows ? p_first + wr + g + 8 : -1};

    for (int it = 0; it < nkb; it++) {
        if (it + 1 < nkb) {
            issue((it + 1) & 1, k_lo + (it + 1) * TC_BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (QREG) {
            if (it == 0) {
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++)
                    ldsm_x4(qf[kk], sq + (wr + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
            }
        }
        const __nv_bfloat16 *kt = sk + (it & 1) * TC_BN * LD, *vt = sv + (it & 1) * TC_BN * LD;
        /* S = Q K^T: (16 rows, 64 keys) per warp */
        float sc[TC_BN / 8][4];
#pragma unroll
        for (int n = 0; n < TC_BN / 8; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t qa[4];
            if constexpr (QREG) {
#pragma unroll
                for (int i = 0; i < 4; i++) qa[i] = qf[kk][i];
            } else {
                ldsm_x4(qa, sq + (wr + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
            }
#pragma unroll
            for (int np = 0; np < TC_BN / 16; np++) {
                uint32_t b[4];
                ldsm_x4(b, kt + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816(sc[2 * np], qa, b[0], b[1]);
                mma16816(sc[2 * np + 1], qa, b[2], b[3]);
            }
        }
        /* mask, scale, online softmax (base 2) */
        const int kb0 = k_lo + it * TC_BN;
#pragma unroll
        for (int n = 0; n < TC_BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kb0 + n * 8 + 2 * qd + (e & 1), p = pr[e >> 1];
                const bool ok = key <= p && key < k_hi && (a.window <= 0 || key > p - a.window);
                float v;
                if constexpr (CAP) v = ok ? a.cap_log2 * tanhf(sc[n][e] * a.cap_mul) : -INFINITY;
                else v = ok ? sc[n][e] * a.scale_log2 : -INFINITY;
                sc[n][e] = v;
            }
        mma_softmax_step<TC_BN / 8, HD / 8>(sc, mrow, lrow, o);
        /* O += P V: the score fragments of key tiles 2j, 2j + 1 are the A operand of keys 16j .. 16j + 15 */
#pragma unroll
        for (int j = 0; j < TC_BN / 16; j++) {
            uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]), pack_bf16(sc[2 * j][2], sc[2 * j][3]),
                              pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                              pack_bf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t b[4];
                ldsm_x4_t(b, vt + (j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 + (lane >> 4) * 8);
                mma16816(o[2 * dp], pa, b[0], b[1]);
                mma16816(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* the stage is refilled by the next iteration's issue */
    }
    /* the rows' sums over the quad, then out = O / l */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wr + g + 8 * r;
        if (row >= rows) continue;
        const float inv = lrow[r] > 0.0f ? a.vscale / lrow[r] : 0.0f;
        __nv_bfloat16 *dst = a.out + (int64_t)(q0 + r0 + row) * a.os + (int64_t)h * HD + 2 * qd;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *(uint32_t *)(dst + d * 8) = pack_bf16(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
}

/* The instantiations of head_dim HD (softcap off / on, sinks or not) may take tc_smem_bytes<HD>() bytes. */
template <int HD>
static cudaError_t tc_set_smem() {
    typedef __nv_bfloat16 B;
    void (*const ks[5])(tc_args) = {k_attn_tc<B, HD, false, false>, k_attn_tc<B, HD, true, false>,
                                    k_attn_tc<B, HD, false, true>, k_attn_tc<B, HD, true, true>,
                                    k_attn_tc<uint8_t, HD, false, false>};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 5 && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tc_smem_bytes<HD>());
    return e;
}

vllm_status cu_attention_tc_init(cu_state *cu) {
    cudaError_t e = tc_set_smem<64>();
    if (e == cudaSuccess) e = tc_set_smem<128>();
    /* head_dim 256 needs 165 KiB of shared memory per CTA: Hopper's 227 KiB has it, an A100's
     * 163 KiB does not (its prefills then take the decode kernel) */
    int optin = 0;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cu->device);
    cu->tc_hd256 = false;
    if (e == cudaSuccess && (size_t)optin >= tc_smem_bytes<256>()) {
        e = tc_set_smem<256>();
        cu->tc_hd256 = e == cudaSuccess;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda backend: prefill attention shared memory: %s", cudaGetErrorString(e));
    }
    return VLLM_OK;
}

bool cu_attention_tc_fits(const cu_state *cu, const tensor *q, const tensor *out, int hd, int max_query_len) {
    return !cu->no_tc_attention && (hd == 64 || hd == 128 || (hd == 256 && cu->tc_hd256)) &&
           max_query_len >= TC_MIN_Q && q->dtype == DTYPE_BF16 &&
           out->dtype == DTYPE_BF16 && ((uintptr_t)q->data & 15) == 0 && tensor_row_stride(q) % 8 == 0 &&
           ((uintptr_t)out->data & 3) == 0 && tensor_row_stride(out) % 2 == 0;
}

template <int HD>
static void tc_launch(cu_state *cu, bool cap, dim3 grid, const tc_args &a, bool f8) {
    typedef __nv_bfloat16 B;
    void (*k)(tc_args) = a.sinks ? (cap ? k_attn_tc<B, HD, true, true> : k_attn_tc<B, HD, false, true>)
                                 : (cap ? k_attn_tc<B, HD, true, false> : k_attn_tc<B, HD, false, false>);
    if (f8) k = k_attn_tc<uint8_t, HD, false, false>; /* (no softcap, no sinks: cu_attention checks) */
    cu_launch(cu, "attention (prefill)", true, k, grid, dim3(TC_THREADS), tc_smem_bytes<HD>(), a);
}

// the prefill sequences (>= TC_MIN_Q new tokens) of the batch; the decode kernel takes the rest
void cu_attention_tc(cu_state *cu, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                     const attn_params *p, tensor *out) {
    tc_args a;
    a.q = (const __nv_bfloat16 *)q->data;
    a.qs = tensor_row_stride(q);
    cu_attn_fill_paged(a, k_cache, v_cache, m, p);
    a.S = m->num_seqs;
    a.nh = p->num_heads;
    a.group = p->num_heads / p->num_kv_heads;
    a.window = p->sliding_window;
    a.scale_log2 = p->scale * 1.4426950408889634f * a.kscale;
    a.cap_mul = p->softcap > 0.0f ? p->scale / p->softcap * a.kscale : 0.0f;
    a.cap_log2 = p->softcap * 1.4426950408889634f;
    a.sinks = p->sinks ? p->sinks->data : NULL;
    a.sdt = p->sinks ? (int)p->sinks->dtype : (int)DTYPE_F32;
    a.out = (__nv_bfloat16 *)out->data;
    a.os = tensor_row_stride(out);
    a.err = cu->derr_dev;
    /* tiles: sum over prefill sequences of ceil(q_len / BM) <= T / BM + (number of such sequences) */
    const int64_t T = m->num_tokens, S = m->num_seqs;
    int64_t pre = T / TC_MIN_Q < S ? T / TC_MIN_Q : S;
    int64_t tiles = T / TC_BM + pre + 1;
    if (tiles > INT32_MAX) tiles = INT32_MAX;
    dim3 grid((unsigned)tiles, (unsigned)p->num_heads);
    const bool cap = p->softcap > 0.0f, f8 = k_cache->dtype == DTYPE_F8_E4M3;
    switch (p->head_dim) {
    case 64: tc_launch<64>(cu, cap, grid, a, f8); break;
    case 128: tc_launch<128>(cu, cap, grid, a, f8); break;
    default: tc_launch<256>(cu, cap, grid, a, f8); break;
    }
}
