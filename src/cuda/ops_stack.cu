/*
 * ops_stack.cu: one token through a whole stack of dense layers in one persistent kernel (backend.h
 * dense_stack_decode): the batch-1 decode step of the Llama / Mistral / Qwen2 / Qwen3 layout.
 *
 * Why: at batch 1 a small model's step is a chain of short kernels (six a layer), each paying a launch, the
 * first DRAM round trips and a drain: Qwen3-0.6B streamed 30 MB a layer in 26 us where the bandwidth floor is 7
 * (docs/benchmarks.md). Here one CTA per SM (all resident) runs every layer, and the weights never stop
 * streaming: a producer warp walks the CTA's share of every weight matrix of every layer in the order the
 * consumers use them, copying slots of whole rows (MK_SLOT bytes at most) into a ring of MK_NSLOT slots in
 * shared memory with cp.async.bulk (the TMA), each slot's arrival and release signalled by mbarriers. The copies
 * run ahead of the compute across phases and grid barriers, as deep as the ring (160 KB a CTA).
 *
 * Per layer, the 16 consumer warps run five phases, each ended by a grid-wide barrier:
 *   1 qkv      xn = bf16(rms_norm(x) * in_norm) in shared memory (every CTA);
 *              the CTA's rows r of Wqkv:   qkv[r] = bf16(xn . Wqkv[r] + b[r])
 *   2 attn     CTA (KV head g, split s): the group's q heads per-head normed and roped (bf16, as qk_norm_rope_kv),
 *              the split holding the newest key also norms and ropes the new k and writes k, v to the caches at
 *              slot_mapping[0]; its keys -> (m, l, acc) partials in base 2; the last split of g to arrive (a
 *              counter per KV head) merges them: attn[g's heads] = bf16(O / L)
 *   3 o        rows of Wo over attn:        x[r] = bf16(x[r] + (attn . Wo[r] + b[r]))
 *   4 gate_up  xn = bf16(rms_norm(x) * post_norm); gate rows, then up rows:
 *              act[n] = bf16(silu(xn . Wg[n] + bg) * (xn . Wu[n] + bu))
 *   5 down     rows of Wd over act:         x[r] = bf16(x[r] + (act . Wd[r] + b[r]))
 * The roundings are those of the per-layer ops (linear_fused's GEMV, qk_norm_rope_kv, attention), so the two
 * paths differ by f32 summation order only (tests/cuda/test_cuda_stack.c compares them).
 *
 * A GEMV slot holds rps rows of K (a power of two): with 16 or more, each warp takes whole rows; with fewer,
 * 16 / rps warps share a row, each a contiguous range of its 16-byte chunks. A lane's chunks are the same columns
 * in every slot of a phase (at most 4), so its x values are widened once per phase; a warp sums across its lanes
 * once per row, and the warps sharing a row are added in a fixed order (deterministic). Activations written by
 * other CTAs are read with ld.global.cg (L1 is not coherent); the grid barrier is a counter in global memory
 * (release / acquire) that the last CTA to leave resets.
 */
#include "cuda/cuda_internal.h"

#define MK_CW 16                        /* consumer warps */
#define MK_CT (MK_CW * 32)              /* consumer threads */
#define MK_THREADS (MK_CT + 32)         /* and the producer warp */
#define MK_SLOT (32 << 10)              /* bytes a ring slot */
#define MK_NSLOT 5
#define MK_SROWS 64                     /* rows a slot at most (K >= 256) */
#define MK_MAXK 16384                   /* a GEMV's K at most (the input vector in shared memory, BF16) */
#define MK_MAXR 1024                    /* a CTA's rows in one phase at most (gate and up counted) */
#define MK_WORK (44 << 10)              /* the input vector, or the attention's buffers */
#define MK_TKE 4096                     /* attention: keys a tile x head_dim */
#define MK_MINK 16                      /* attention: keys a split at least */
#define MK_MAXG 16                      /* query heads per KV head at most */
#define MK_SMEM ((size_t)MK_NSLOT * MK_SLOT + MK_WORK + 2 * MK_CW * 4 + MK_MAXR * 4)
/* VLLM_CUDA_STACK_DBG bits, for timing the kernel's parts (the results are then wrong) */
#define MK_DBG_NO_GEMV 2       /* the GEMVs' math skipped (the slots still stream) */
#define MK_DBG_NO_ATTN 4       /* the attention phase skipped */
#define MK_DBG_NO_BARRIER 8    /* no grid barriers */
#define MK_DBG_NO_STREAM 16    /* no weight stream (the GEMVs read whatever the slots hold) */
#define MK_DBG_NO_PREFETCH 32  /* the attention's first tile loaded after the barrier (correct; for comparison) */

/* VLLM_CUDA_STACK_TRACE=N (with --enforce-eager): the N-th launch records SM clock stamps, thread 0 of every CTA,
 * four a (layer, phase) (start, input ready, first slot landed, done), and the landing of each of CTA 0's slots;
 * the host prints where the time went (mk_trace_report). For profiling only. */
#define MK_NPH 5                        /* phases a layer in the trace: qkv, attention, o, gate_up, down */
#define MK_TR_SLOTS 16384               /* CTA 0's slot landings kept */

struct mk_layer {
    const __nv_bfloat16 *w[4];          /* qkv (NQ, D), o (D, QD), gate_up (2I, D), down (D, I) */
    const float *b[4];                  /* their biases, or NULL */
    const __nv_bfloat16 *n_in, *n_post; /* (D) */
    const __nv_bfloat16 *n_q, *n_k;     /* (HD) or NULL */
    __nv_bfloat16 *kc, *vc;             /* (num_blocks, bs, nkv, HD) */
};

struct mk_args {
    int L, D, I, nh, nkv, S;            /* S: CTAs (key splits) per KV head */
    int half, neox, window, bs, max_blocks;
    float eps, qscale;                  /* qscale: softmax scale * log2(e) (scores in base 2) */
    const float *cs;                    /* (max_pos, 2 half) */
    int64_t max_pos, num_blocks;
    const int32_t *pos, *seq_lens, *bt; /* positions (1), seq_lens (1), block table row 0 */
    const int64_t *slots;               /* slot_mapping (1) */
    __nv_bfloat16 *x, *qkv, *attn, *act;
    float *ws;                          /* (nh, S, HD + 2) partials */
    unsigned *cnt;                      /* (nkv) arrivals, 0 between launches */
    unsigned *bar;                      /* [0] grid barrier arrivals, [1] CTAs done; 0 between launches */
    cu_dev_err *err;
    int dbg;                            /* MK_DBG_* */
    int nslot;                          /* ring slots in use (MK_NSLOT; fewer for experiments) */
    long long *trace;                   /* NULL, or (nb, L, MK_NPH, 4) clock64 stamps, then 4 (start and end: clock64,
                                           globaltimer), then MK_TR_SLOTS slot landings of CTA 0 */
    mk_layer layer[CU_STACK_MAX_LAYERS];
};

/* ---- synchronization ---- */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MK_SM90 1
#else
#define MK_SM90 0
#endif

/* the consumer warps' barrier (named barrier 1: the producer warp is not in it) */
__device__ __forceinline__ void mk_bar() { asm volatile("bar.sync 1, %0;\n" ::"n"(MK_CT) : "memory"); }

__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned n) {
#if MK_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(n) : "memory");
#endif
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, unsigned bytes) {
#if MK_SM90
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
#if MK_SM90
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
#if MK_SM90
    uint32_t done = 0;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}
/* bytes (a multiple of 16) global -> shared by the TMA, completing on bar */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
#if MK_SM90
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}

/* release: this thread's earlier writes, and those of the threads a bar.sync ordered before it, visible at gpu
 * scope before what follows (cutlass/barrier.h's red_release: fence.acq_rel, then a relaxed atomic) */
__device__ __forceinline__ void mk_fence() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
__device__ __forceinline__ unsigned mk_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* every CTA's consumers arrive; returns when all gridDim.x have (the k-th barrier waits for k * gridDim.x) */
__device__ __forceinline__ void mk_grid_sync(unsigned *bar, unsigned target, int ctid) {
    mk_bar();
    if (ctid == 0) {
        mk_fence();
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
        while (mk_ld_acquire(bar) < target) {
        }
    }
    mk_bar();
}

/* ---- the weight stream ---- */

/* a phase's rows of weights for one CTA: its first row, rows, K */
struct mk_seg {
    const __nv_bfloat16 *w;
    int n, K;
};

template <int HD>
struct mk {
    static constexpr int EPL = HD / 32;      /* a lane's elements of a head */
    static constexpr int TK = MK_TKE / HD;   /* keys a tile */

    /* phase p's segments: rows, K and first row of weights, for CTA b of nb (the producer and the consumers
     * walk the same list) */
    static __device__ __forceinline__ int segs(const mk_args &a, const mk_layer &ly, int p, int b, int nb,
                                               mk_seg *sg, int *r0_out) {
        const int qd = a.nh * HD, nq = qd + 2 * a.nkv * HD;
        const int N = p == 0 ? nq : p == 2 ? a.I : a.D;
        const int K = p == 0 || p == 2 ? a.D : p == 1 ? qd : a.I;
        const int r0 = (int)((int64_t)N * b / nb), r1 = (int)((int64_t)N * (b + 1) / nb);
        *r0_out = r0;
        sg[0] = mk_seg{ly.w[p] + (int64_t)r0 * K, r1 - r0, K};
        if (p != 2) return 1;
        sg[1] = mk_seg{ly.w[p] + ((int64_t)a.I + r0) * K, r1 - r0, K};
        return 2;
    }

    /* rows a slot: the largest power of two of whole rows in MK_SLOT bytes, at most MK_SROWS */
    static __device__ __forceinline__ int rows_per_slot(int K) {
        int r = MK_SLOT / (K * 2);
        if (r > MK_SROWS) r = MK_SROWS;
        return 1 << (31 - __clz(r));
    }

    /* the producer (one lane): every slot of every phase of every layer, in order */
    static __device__ void produce(const mk_args &a, uint64_t *full, uint64_t *empty, unsigned char *slots) {
        if (a.dbg & MK_DBG_NO_STREAM) return;
        const int b = blockIdx.x, nb = gridDim.x;
        unsigned it = 0;
        for (int l = 0; l < a.L; l++) {
            for (int p = 0; p < 4; p++) {
                mk_seg sg[2];
                int r0;
                const int ns = segs(a, a.layer[l], p, b, nb, sg, &r0);
                for (int q = 0; q < ns; q++) {
                    const int rps = rows_per_slot(sg[q].K);
                    for (int r = 0; r < sg[q].n; r += rps) {
                        const int n = min(rps, sg[q].n - r);
                        const int s = (int)(it % (unsigned)a.nslot);
                        const unsigned round = it / (unsigned)a.nslot;
                        if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);
                        const unsigned bytes = (unsigned)n * (unsigned)sg[q].K * 2u;
                        mbar_expect(&full[s], bytes);
                        bulk_g2s(slots + (size_t)s * MK_SLOT, sg[q].w + (int64_t)r * sg[q].K, bytes, &full[s]);
                        it++;
                    }
                }
            }
        }
    }

    /* a warp's dot of one slot row (its chunks c0 + lane + 32 i < c1) with the widened x chunks xr */
    static __device__ __forceinline__ float row_dot(const uint4 *wr, int c0, int c1, int lane, const float (*xr)[8]) {
        uint4 wv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = c0 + lane + 32 * i;
            wv[i] = c < c1 ? wr[c] : make_uint4(0, 0, 0, 0);
        }
        float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float wf[8];
            bf16x8_to_f32(wv[i], wf);
#pragma unroll
            for (int e = 0; e < 8; e += 2) {
                acc0 += wf[e] * xr[i][e];
                acc1 += wf[e + 1] * xr[i][e + 1];
            }
        }
        return cu_warp_sum(acc0 + acc1);
    }

    /* Consumers: nrows rows of K from the ring into pacc[0..nrows) (xin: the input vector, K BF16 in shared
     * memory). A full slot holds rps rows (a power of two): with rps >= 16 each warp takes whole rows (cw,
     * cw + 16, ...); below, wpr = 16 / rps warps share a row, each a contiguous range of its chunks. Either way a
     * lane's chunks are the same columns in every slot of the phase (at most 4: a warp's range is at most 128
     * chunks), so its x values are widened once, and a warp sums across its lanes once per row; the warps of a
     * shared row are added in a fixed order (deterministic). */
    static __device__ void gemv(unsigned &it, uint64_t *full, uint64_t *empty, const unsigned char *slots,
                                int nrows, int K, const uint4 *xin, float *pacc, float (*pw)[MK_CW], int &pwb,
                                int ctid, int dbg, int nslot, long long *ts_first, long long *tr_slots) {
        const int KC = K >> 3, rps = rows_per_slot(K);
        const int cw = ctid >> 5, lane = ctid & 31;
        const int wpr = rps >= MK_CW ? 1 : MK_CW / rps;
        const int q = cw % wpr, rw = cw / wpr;
        const int c0 = q * KC / wpr, c1 = (q + 1) * KC / wpr;
        float xr[4][8];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = c0 + lane + 32 * i;
            if (c < c1) bf16x8_to_f32(xin[c], xr[i]);
            else
#pragma unroll
                for (int e = 0; e < 8; e++) xr[i][e] = 0.0f;
        }
        for (int r = 0; r < nrows; r += rps) {
            const int n = min(rps, nrows - r);
            const int s = (int)(it % (unsigned)nslot);
            const unsigned par = (it / (unsigned)nslot) & 1;
            it++;
            if (!(dbg & MK_DBG_NO_STREAM)) mbar_wait(&full[s], par);
            if (ctid == 0 && (ts_first || tr_slots)) {
                const long long t = clock64();
                if (ts_first && r == 0) ts_first[2] = t;
                if (tr_slots && it - 1 < MK_TR_SLOTS) tr_slots[it - 1] = t;
            }
            const uint4 *sw = (const uint4 *)(slots + (size_t)s * MK_SLOT);
            const bool math = !(dbg & MK_DBG_NO_GEMV);
            if (wpr == 1) {
                for (int row = cw; row < n; row += MK_CW) {
                    const float v = math ? row_dot(sw + (int64_t)row * KC, c0, c1, lane, xr) : 0.0f;
                    if (lane == 0) pacc[r + row] = v;
                }
                __syncwarp();
                if (lane == 0 && !(dbg & MK_DBG_NO_STREAM)) mbar_arrive(&empty[s]);
            } else {
                const float v = math && rw < n ? row_dot(sw + (int64_t)rw * KC, c0, c1, lane, xr) : 0.0f;
                if (lane == 0) pw[pwb][cw] = v;
                __syncwarp();
                if (lane == 0 && !(dbg & MK_DBG_NO_STREAM)) mbar_arrive(&empty[s]);
                mk_bar();
                if (ctid < n) {
                    float sum = 0.0f;
                    for (int k = 0; k < wpr; k++) sum += pw[pwb][ctid * wpr + k];
                    pacc[r + ctid] = sum;
                }
                pwb ^= 1; /* the next slot's sums go to the other buffer (this one is read until the next barrier) */
            }
        }
    }

    /* xin = bf16(rms_norm(x) * w) (D values), as the GEMV's norm prologue rounds them */
    static __device__ void norm_in(const mk_args &a, const __nv_bfloat16 *w, uint4 *xin, float *red, int ctid) {
        constexpr int NJ = MK_MAXK / 8 / MK_CT;
        const int DC = a.D >> 3, lane = ctid & 31, cw = ctid >> 5;
        uint4 xr[NJ];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int c = ctid + j * MK_CT;
            xr[j] = make_uint4(0, 0, 0, 0);
            if (c < DC) {
                xr[j] = __ldcg((const uint4 *)a.x + c);
                float f[8];
                bf16x8_to_f32(xr[j], f);
#pragma unroll
                for (int i = 0; i < 8; i++) ss += f[i] * f[i];
            }
        }
        ss = cu_warp_sum(ss);
        if (lane == 0) red[cw] = ss;
        mk_bar();
        float tot = 0.0f;
#pragma unroll
        for (int i = 0; i < MK_CW; i++) tot += red[i];
        const float inv = 1.0f / sqrtf(tot / (float)a.D + a.eps);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int c = ctid + j * MK_CT;
            if (c < DC) {
                float f[8], nf[8];
                bf16x8_to_f32(xr[j], f);
                bf16x8_to_f32(__ldg((const uint4 *)w + c), nf);
#pragma unroll
                for (int i = 0; i < 8; i++) f[i] = f[i] * inv * nf[i];
                xin[c] = f32_to_bf16x8(f);
            }
        }
        mk_bar();
    }

    /* xin = v (n BF16 values written by other CTAs) */
    static __device__ void load_in(const __nv_bfloat16 *v, int n, uint4 *xin, int ctid) {
        for (int c = ctid; c < (n >> 3); c += MK_CT) xin[c] = __ldcg((const uint4 *)v + c);
        mk_bar();
    }

    /* CTA b's split of the keys: KV head g, split sp of se in use, keys [klo, khi) of the context ctx (ok: the
     * metadata is sound); false when the CTA has no split this step */
    struct split {
        int g, sp, se, klo, khi, ctx;
        bool ok;
    };
    static __device__ __forceinline__ bool split_of(const mk_args &a, split &r) {
        const int b = blockIdx.x;
        if (b >= a.nkv * a.S) return false;
        r.g = b / a.S;
        r.sp = b % a.S;
        r.ctx = a.seq_lens[0];
        r.ok = r.ctx >= 1 && (int64_t)r.ctx <= (int64_t)a.max_blocks * a.bs;
        const int k_lo = a.window > 0 && r.ctx > a.window ? r.ctx - a.window : 0;
        const int nk = r.ok ? r.ctx - k_lo : 0;
        r.se = nk > 0 ? min(a.S, (nk + MK_MINK - 1) / MK_MINK) : 1; /* splits in use */
        const int seg = nk > 0 ? (nk + r.se - 1) / r.se : 0;
        r.klo = k_lo + r.sp * seg;
        r.khi = r.ok ? min(r.klo + seg, r.ctx) : r.klo;
        return r.sp < r.se;
    }

    /* this thread's chunk of the tile at t0: K and V of key t0 + ctid / (HD / 8), elements (ctid % (HD / 8)) * 8 on;
     * keys before the newest only (new_too: the newest from kn / vn too), zeros past khi. Returns whether the key
     * counts: false past khi and for a block id outside the cache (reported; masked as the attention op masks it) */
    static __device__ __forceinline__ bool tile_chunk(const mk_args &a, const mk_layer &ly, const split &r, int t0,
                                                      int ctid, bool new_too, const __nv_bfloat16 *kn,
                                                      const __nv_bfloat16 *vn, uint4 &kr, uint4 &vr) {
        constexpr int CPR = HD / 8;
        const int key = t0 + ctid / CPR, e = (ctid % CPR) * 8;
        kr = vr = make_uint4(0, 0, 0, 0);
        if (key >= r.khi) return false;
        if (key == r.ctx - 1) {
            if (new_too) {
                kr = *(const uint4 *)(kn + e);
                vr = *(const uint4 *)(vn + e);
            }
            return true;
        }
        const int blk = a.bt[key / a.bs];
        if (blk >= 0 && blk < a.num_blocks) {
            const int64_t off = ((int64_t)blk * a.bs + key % a.bs) * ((int64_t)a.nkv * HD) + (int64_t)r.g * HD + e;
            kr = __ldcg((const uint4 *)(ly.kc + off));
            vr = __ldcg((const uint4 *)(ly.vc + off));
            return true;
        }
        if (e == 0) cu_report(a.err, CU_DEV_ATTN_BLOCK, 0, key / a.bs, blk);
        return false;
    }

    /* Before the grid barrier that ends phase 1: the first tile's keys of earlier steps (nothing in this step
     * writes them), so their DRAM round trip overlaps the barrier. */
    static __device__ __forceinline__ void prefetch(const mk_args &a, const mk_layer &ly, int ctid, uint4 &kr,
                                                    uint4 &vr, bool &valid) {
        split r;
        kr = vr = make_uint4(0, 0, 0, 0);
        valid = false;
        if (split_of(a, r) && r.klo < r.khi)
            valid = tile_chunk(a, ly, r, r.klo, ctid, false, nullptr, nullptr, kr, vr);
    }

    /* Phase 2 for CTA b: attention of KV head b / S over split b % S (nothing for b >= nkv S); pk / pv: this
     * thread's chunk of the first tile (prefetch), or pre false to load it here. */
    static __device__ void attention(const mk_args &a, const mk_layer &ly, unsigned char *work, int *info, int ctid,
                                     bool pre, uint4 pk, uint4 pv, bool pvalid, long long *ts) {
        const int b = blockIdx.x;
        split r;
        if (!split_of(a, r)) return;
        const int G = a.nh / a.nkv, S = a.S, g = r.g, sp = r.sp, se = r.se, klo = r.klo, khi = r.khi, ctx = r.ctx;
        const int cw = ctid >> 5, lane = ctid & 31;
        const int64_t kvd = (int64_t)a.nkv * HD;
        float *sq = (float *)work;                            /* (G, HD) q, bf16-rounded, * qscale */
        float *acc = sq + G * HD;                             /* (G, HD) */
        __nv_bfloat16 *sk = (__nv_bfloat16 *)(acc + G * HD);  /* (TK, HD) */
        __nv_bfloat16 *sv = sk + TK * HD;                     /* (TK, HD) */
        float *sc = (float *)(sv + TK * HD);                  /* (G, TK) scores, then probabilities */
        __nv_bfloat16 *kn = (__nv_bfloat16 *)(sc + G * TK);  /* (HD) the new k (normed, roped) */
        __nv_bfloat16 *vn = kn + HD;                          /* (HD) the new v */
        float *mrow = (float *)(vn + HD), *lrow = mrow + MK_MAXG, *crow = lrow + MK_MAXG;
        int *kval = (int *)(crow + MK_MAXG);                  /* (TK) the tile's keys that count */

        int pos = a.pos[0];
        const bool pos_ok = pos >= 0 && pos < a.max_pos;
        if (!r.ok && b == 0 && ctid == 0) cu_report(a.err, CU_DEV_ATTN_META, 0, 1, ctx);
        if (pos < 0 || pos >= a.max_pos) {
            if (b == 0 && ctid == 0) cu_report(a.err, CU_DEV_ROPE_POS, 0, pos, a.max_pos);
            pos = 0;
        }
        const bool has_new = r.ok && klo <= ctx - 1 && ctx - 1 < khi;

        /* q heads (h < G) and the new k (h == G): per-head RMSNorm, RoPE, rounded to BF16 */
        const float *cs = a.cs + (int64_t)pos * 2 * a.half, *sn = cs + a.half;
        for (int h = cw; h <= G; h += MK_CW) {
            if (h == G && !has_new) continue;
            const bool isq = h < G;
            const __nv_bfloat16 *src = isq ? a.qkv + (int64_t)(g * G + h) * HD : a.qkv + (int64_t)a.nh * HD + g * HD;
            const __nv_bfloat16 *nw = isq ? ly.n_q : ly.n_k;
            float xv[EPL];
#pragma unroll
            for (int j = 0; j < EPL; j++) xv[j] = __bfloat162float(__ldcg(src + lane + 32 * j));
            if (nw) {
                float ss = 0.0f;
#pragma unroll
                for (int j = 0; j < EPL; j++) ss += xv[j] * xv[j];
                ss = cu_warp_sum(ss);
                const float r = 1.0f / sqrtf(ss / (float)HD + a.eps);
#pragma unroll
                for (int j = 0; j < EPL; j++) xv[j] *= r * __bfloat162float(nw[lane + 32 * j]);
            }
            float o[EPL];
#pragma unroll
            for (int j = 0; j < EPL; j++) {
                const int i = lane + 32 * j;
                const float ip = __shfl_xor_sync(0xffffffffu, xv[j], 1); /* the adjacent pair's partner */
                o[j] = xv[j];
                if (i < 2 * a.half) {
                    float partner;
                    bool first;
                    int f;
                    if (a.neox) { /* (i, i + half): half % 32 == 0, so the partner is this lane's element j +- half / 32 */
                        first = i < a.half;
                        f = first ? i : i - a.half;
                        const int jp = first ? j + a.half / 32 : j - a.half / 32;
                        partner = 0.0f;
#pragma unroll
                        for (int q = 0; q < EPL; q++)
                            if (q == jp) partner = xv[q];
                    } else {
                        first = (i & 1) == 0;
                        f = i >> 1;
                        partner = ip;
                    }
                    const float c = cs[f], s = sn[f];
                    o[j] = first ? xv[j] * c - partner * s : xv[j] * c + partner * s;
                }
            }
            if (isq) {
#pragma unroll
                for (int j = 0; j < EPL; j++)
                    sq[h * HD + lane + 32 * j] = __bfloat162float(__float2bfloat16(o[j])) * a.qscale;
            } else {
                const int64_t slot = a.slots[0];
                const bool put = slot >= 0 && slot < a.num_blocks * a.bs && pos_ok; /* (the op skips a bad position) */
                if (slot >= a.num_blocks * a.bs && lane == 0) cu_report(a.err, CU_DEV_KV_SLOT, 0, slot, a.num_blocks * a.bs);
                const __nv_bfloat16 *vsrc = a.qkv + (int64_t)a.nh * HD + kvd + g * HD;
#pragma unroll
                for (int j = 0; j < EPL; j++) {
                    const int i = lane + 32 * j;
                    const __nv_bfloat16 kb = __float2bfloat16(o[j]), vb = __ldcg(vsrc + i);
                    kn[i] = kb;
                    vn[i] = vb;
                    if (put) {
                        ly.kc[slot * kvd + g * HD + i] = kb;
                        ly.vc[slot * kvd + g * HD + i] = vb;
                    }
                }
            }
        }
        for (int i = ctid; i < G * HD; i += MK_CT) acc[i] = 0.0f;
        if (ctid < G) {
            mrow[ctid] = -INFINITY;
            lrow[ctid] = 0.0f;
        }
        mk_bar();
        if (ts) ts[1] = clock64(); /* (trace: q, k normed and roped) */

        for (int t0 = klo; t0 < khi; t0 += TK) {
            { /* the tile's K and V rows: one chunk of each per thread (TK * HD / 8 == MK_CT) */
                uint4 kr, vr;
                bool valid;
                constexpr int CPR = HD / 8;
                if (t0 == klo && pre) { /* prefetched: only the newest key is left to place */
                    kr = pk;
                    vr = pv;
                    valid = pvalid;
                    if (t0 + ctid / CPR == ctx - 1) valid = tile_chunk(a, ly, r, t0, ctid, true, kn, vn, kr, vr);
                } else {
                    valid = tile_chunk(a, ly, r, t0, ctid, true, kn, vn, kr, vr);
                }
                ((uint4 *)sk)[ctid] = kr;
                ((uint4 *)sv)[ctid] = vr;
                if (ctid % CPR == 0) kval[ctid / CPR] = valid;
            }
            mk_bar();
            /* scores: warp cw takes keys cw, cw + 16, ...; every head of the group */
            for (int j = cw; j < TK; j += MK_CW) {
                float kf[EPL];
#pragma unroll
                for (int q = 0; q < EPL; q++) kf[q] = __bfloat162float(sk[j * HD + lane + 32 * q]);
                for (int h = 0; h < G; h++) {
                    float d = 0.0f;
#pragma unroll
                    for (int q = 0; q < EPL; q++) d += sq[h * HD + lane + 32 * q] * kf[q];
                    d = cu_warp_sum(d);
                    if (lane == 0) sc[h * TK + j] = kval[j] ? d : -INFINITY;
                }
            }
            mk_bar();
            /* online softmax: warp h rescales head h */
            for (int h = cw; h < G; h += MK_CW) {
                float mx = mrow[h];
                for (int j = lane; j < TK; j += 32) mx = fmaxf(mx, sc[h * TK + j]);
                mx = cu_warp_max(mx);
                const float corr = mrow[h] == -INFINITY ? 0.0f : exp2f(mrow[h] - mx);
                float ls = 0.0f;
                for (int j = lane; j < TK; j += 32) {
                    const float p = exp2f(sc[h * TK + j] - mx);
                    sc[h * TK + j] = p;
                    ls += p;
                }
                ls = cu_warp_sum(ls);
                __syncwarp();
                if (lane == 0) {
                    lrow[h] = lrow[h] * corr + ls;
                    mrow[h] = mx;
                    crow[h] = corr;
                }
            }
            mk_bar();
            for (int i = ctid; i < G * HD; i += MK_CT) {
                const int h = i / HD, d = i % HD;
                float o = acc[i] * crow[h];
                for (int j = 0; j < TK; j++) o += sc[h * TK + j] * __bfloat162float(sv[j * HD + d]);
                acc[i] = o;
            }
            mk_bar();
        }

        /* this split's partials, then the last split of head group g merges them all */
        auto part = [&](int h, int s) { return a.ws + ((int64_t)(g * G + h) * S + s) * (HD + 2); };
        for (int i = ctid; i < G * HD; i += MK_CT) part(i / HD, sp)[i % HD] = acc[i];
        if (ctid < G) {
            part(ctid, sp)[HD] = mrow[ctid];
            part(ctid, sp)[HD + 1] = lrow[ctid];
        }
        mk_bar();
        if (ts) ts[2] = clock64(); /* (trace: this split's keys done) */
        if (ctid == 0) {
            mk_fence();
            info[0] = atomicAdd(&a.cnt[g], 1u) == (unsigned)(se - 1);
            if (info[0]) mk_fence(); /* (acquire: the other splits' partials) */
        }
        mk_bar();
        if (!info[0]) return;
        float *fs = (float *)sk; /* (G, se) the splits' factors exp2(m_s - M) (sk and sv: 2 TK HD BF16 >= G se floats) */
        for (int i = ctid; i < G * se; i += MK_CT) fs[i] = __ldcg(part(i / se, i % se) + HD);
        mk_bar();
        for (int h = cw; h < G; h += MK_CW) {
            float M = -INFINITY;
            for (int s = lane; s < se; s += 32) M = fmaxf(M, fs[h * se + s]);
            M = cu_warp_max(M);
            float L = 0.0f;
            for (int s = lane; s < se; s += 32) {
                const float ms = fs[h * se + s];
                const float f = ms == -INFINITY ? 0.0f : exp2f(ms - M);
                fs[h * se + s] = f;
                L += f * __ldcg(part(h, s) + HD + 1);
            }
            L = cu_warp_sum(L);
            if (lane == 0) lrow[h] = L;
        }
        mk_bar();
        for (int i = ctid; i < G * HD; i += MK_CT) {
            const int h = i / HD, d = i % HD;
            float O = 0.0f;
            for (int s = 0; s < se; s++) O += fs[h * se + s] * __ldcg(part(h, s) + d);
            const float L = lrow[h];
            a.attn[(int64_t)(g * G + h) * HD + d] = __float2bfloat16(L > 0.0f ? O / L : 0.0f);
        }
        if (ctid == 0) a.cnt[g] = 0; /* ready for the next layer (after the grid barrier) */
    }
};

template <int HD>
__global__ void __launch_bounds__(MK_THREADS, 1) k_dense_stack(const __grid_constant__ mk_args a) {
    extern __shared__ __align__(128) unsigned char mk_smem[];
    __shared__ __align__(8) uint64_t full[MK_NSLOT], empty[MK_NSLOT];
    __shared__ float red[MK_CW];
    __shared__ int info[1];
    unsigned char *slots = mk_smem;
    unsigned char *work = slots + (size_t)MK_NSLOT * MK_SLOT;
    float(*pw)[MK_CW] = (float(*)[MK_CW])(work + MK_WORK);
    float *pacc = (float *)(work + MK_WORK + 2 * MK_CW * 4);
    uint4 *xin = (uint4 *)work;
    using K = mk<HD>;

    if (threadIdx.x == 0) {
        for (int s = 0; s < MK_NSLOT; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], MK_CW);
        }
#if MK_SM90
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
    }
    __syncthreads();
    if (threadIdx.x >= MK_CT) { /* the producer warp: weights only, before any wait for the previous kernel */
        if (threadIdx.x == MK_CT) K::produce(a, full, empty, slots);
        return;
    }
    const int ctid = threadIdx.x, b = blockIdx.x, nb = gridDim.x;
    long long *const tr = a.trace && ctid == 0 ? a.trace + (int64_t)b * a.L * MK_NPH * 4 : nullptr;
    long long *const tr_end = a.trace ? a.trace + (int64_t)nb * a.L * MK_NPH * 4 : nullptr;
    pdl_wait(); /* x, the step's metadata */
    if (tr && b == 0) {
        tr_end[0] = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tr_end[1]));
    }
    unsigned it = 0, nbar = 0;
    int pwb = 0;
    for (int l = 0; l < a.L; l++) {
        const mk_layer &ly = a.layer[l];
        for (int p = 0; p < 4; p++) {
            /* trace stamps of this phase: start, input ready, first slot landed, done (before the barrier) */
            long long *ts = tr ? tr + ((int64_t)l * MK_NPH + (p == 0 ? 0 : p + 1)) * 4 : nullptr;
            if (ts) ts[0] = clock64();
            /* the phase's input vector */
            if (p == 0) K::norm_in(a, ly.n_in, xin, red, ctid);
            else if (p == 1) K::load_in(a.attn, a.nh * HD, xin, ctid);
            else if (p == 2) K::norm_in(a, ly.n_post, xin, red, ctid);
            else K::load_in(a.act, a.I, xin, ctid);
            if (ts) ts[1] = ts[2] = clock64();
            mk_seg sg[2];
            int r0;
            const int ns = K::segs(a, ly, p, b, nb, sg, &r0);
            for (int q = 0; q < ns; q++)
                K::gemv(it, full, empty, slots, sg[q].n, sg[q].K, xin, pacc + q * sg[0].n, pw, pwb, ctid, a.dbg, a.nslot,
                        q == 0 ? ts : nullptr, tr && b == 0 ? tr_end + 4 : nullptr);
            mk_bar();
            const float *bias = ly.b[p];
            const int n = sg[0].n;
            for (int i = ctid; i < n; i += MK_CT) {
                const int r = r0 + i;
                if (p == 0) {
                    a.qkv[r] = __float2bfloat16(pacc[i] + (bias ? bias[r] : 0.0f));
                } else if (p == 2) {
                    const float gt = pacc[i] + (bias ? bias[r] : 0.0f), up = pacc[n + i] + (bias ? bias[a.I + r] : 0.0f);
                    a.act[r] = __float2bfloat16(cu_act(BE_ACT_SILU, gt) * up);
                } else {
                    const float v = pacc[i] + (bias ? bias[r] : 0.0f);
                    a.x[r] = __float2bfloat16(__bfloat162float(__ldcg(a.x + r)) + v);
                }
            }
            if (ts) ts[3] = clock64();
            const bool sync = !(a.dbg & MK_DBG_NO_BARRIER), pre = p == 0 && !(a.dbg & MK_DBG_NO_PREFETCH);
            uint4 pk, pv;
            bool pvalid = false;
            if (pre) K::prefetch(a, ly, ctid, pk, pv, pvalid);
            if (sync) mk_grid_sync(a.bar, ++nbar * (unsigned)nb, ctid);
            if (p == 0) {
                long long *ta = tr ? tr + ((int64_t)l * MK_NPH + 1) * 4 : nullptr;
                if (ta) ta[0] = ta[1] = ta[2] = clock64();
                if (!(a.dbg & MK_DBG_NO_ATTN)) K::attention(a, ly, work, info, ctid, pre, pk, pv, pvalid, ta);
                if (ta) ta[3] = clock64();
                if (sync) mk_grid_sync(a.bar, ++nbar * (unsigned)nb, ctid);
            }
        }
    }
    if (tr && b == 0) {
        tr_end[2] = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tr_end[3]));
    }
    if (ctid == 0) { /* the last CTA out resets the barrier for the next launch */
        mk_fence();
        if (atomicAdd(&a.bar[1], 1u) == (unsigned)nb - 1) {
            mk_fence(); /* (acquire: every CTA is done with the barrier) */
            a.bar[0] = 0;
            a.bar[1] = 0;
            mk_fence();
        }
    }
}

/* ---- host ---- */

static_assert(sizeof(mk_args) <= 32000, "mk_args must fit the kernel parameter space");

typedef void (*mk_kernel)(const mk_args);

static mk_kernel mk_pick(int hd) {
    return hd == 64 ? k_dense_stack<64> : hd == 128 ? k_dense_stack<128> : k_dense_stack<256>;
}

/* the CTAs of the grid: one per SM, when one fits (asked once per head_dim) */
static bool mk_ready(cu_state *cu, int hd) {
    const int i = hd == 64 ? 0 : hd == 128 ? 1 : 2;
    if (cu->stack_ready[i] == 0) {
        int n = 0;
        mk_kernel k = mk_pick(hd);
        bool ok = cu->smem_optin >= MK_SMEM &&
                  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MK_SMEM) == cudaSuccess &&
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, MK_THREADS, MK_SMEM) == cudaSuccess && n >= 1;
        cudaGetLastError();
        cu->stack_ready[i] = ok ? 1 : -1;
    }
    return cu->stack_ready[i] == 1;
}

/* VLLM_CUDA_STACK_DBG (MK_DBG_* bits; read once) */
static int mk_dbg() {
    static int dbg = -1;
    if (dbg < 0) dbg = getenv("VLLM_CUDA_STACK_DBG") ? atoi(getenv("VLLM_CUDA_STACK_DBG")) & 62 : 0;
    return dbg;
}

/* VLLM_CUDA_STACK_NSLOT: ring slots in use, 2..MK_NSLOT (experiments; default all) */
static int mk_nslot() {
    static int n = -1;
    if (n < 0) {
        n = getenv("VLLM_CUDA_STACK_NSLOT") ? atoi(getenv("VLLM_CUDA_STACK_NSLOT")) : MK_NSLOT;
        if (n < 2 || n > MK_NSLOT) n = MK_NSLOT;
    }
    return n;
}

/* ---- the trace (VLLM_CUDA_STACK_TRACE=N, profiling only; the process's N-th launch, whichever backend) ---- */

static struct {
    int at, calls;      /* the launch to trace (0: off), launches so far */
    long long *d;       /* device buffer */
    size_t n;           /* its stamps */
    int L, nb;
} mk_tr = {-1, 0, NULL, 0, 0, 0};

/* stamps for the next launch of L layers over nb CTAs, or NULL when this one is not traced */
static long long *mk_trace_arm(cu_state *cu, int L, int nb) {
    if (mk_tr.at < 0) mk_tr.at = getenv("VLLM_CUDA_STACK_TRACE") ? atoi(getenv("VLLM_CUDA_STACK_TRACE")) : 0;
    if (mk_tr.at <= 0 || ++mk_tr.calls != mk_tr.at || L < 2) return NULL;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cu->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        LOG_W("dense stack trace: launch %d is inside a CUDA graph capture (use --enforce-eager); not traced", mk_tr.at);
        return NULL;
    }
    mk_tr.n = (size_t)nb * L * MK_NPH * 4 + 4 + MK_TR_SLOTS;
    if (cudaMalloc((void **)&mk_tr.d, mk_tr.n * sizeof(long long)) != cudaSuccess) {
        cudaGetLastError();
        mk_tr.d = NULL;
        return NULL;
    }
    if (cudaMemsetAsync(mk_tr.d, 0, mk_tr.n * sizeof(long long), cu->stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(mk_tr.d);
        mk_tr.d = NULL;
        return NULL;
    }
    mk_tr.L = L;
    mk_tr.nb = nb;
    return mk_tr.d;
}

/* after the traced launch: where the time went, per phase (means over layers 1.. and CTAs, in us) */
static void mk_trace_report(cu_state *cu) {
    const int L = mk_tr.L, nb = mk_tr.nb;
    long long *h = (long long *)malloc(mk_tr.n * sizeof(long long));
    if (!h || cudaStreamSynchronize(cu->stream) != cudaSuccess ||
        cudaMemcpy(h, mk_tr.d, mk_tr.n * sizeof(long long), cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        free(h);
        cudaFree(mk_tr.d);
        mk_tr.d = NULL;
        return;
    }
    const long long *e = h + (size_t)nb * L * MK_NPH * 4, *sl = e + 4;
    const double ghz = (double)(e[2] - e[0]) / (double)(e[3] - e[1] > 0 ? e[3] - e[1] : 1); /* clocks a ns */
    auto us = [&](double c) { return c / ghz / 1000.0; };
    auto at = [&](int b, int l, int ph, int k) { return h[(((size_t)b * L + l) * MK_NPH + ph) * 4 + k]; };
    fprintf(stderr, "dense stack trace: %d layers, %d CTAs, kernel %.1f us (globaltimer), SM clock %.3f GHz\n", L, nb,
            (double)(e[3] - e[1]) / 1000.0, ghz);
    static const char *names[MK_NPH] = {"qkv", "attention", "o", "gate_up", "down"};
    static const char *cols[2][4] = {{"input", "1st slot", "rest", "barrier"}, {"rope", "keys", "merge", "barrier"}};
    double tot = 0.0;
    for (int ph = 0; ph < MK_NPH; ph++) {
        double m[4] = {0}, mx[4] = {0}, wmin = 1e30, wmax = 0.0, skew = 0.0;
        int cnt = 0;
        for (int l = 1; l < L; l++) {
            double lo = 1e30, hi = -1e30, lmx[4] = {0};
            for (int b = 0; b < nb; b++) {
                /* the barrier ends at the next phase's start (the next layer's qkv after down) */
                const bool last = ph == MK_NPH - 1 && l == L - 1;
                const long long next = last ? at(b, l, ph, 3) : ph == MK_NPH - 1 ? at(b, l + 1, 0, 0) : at(b, l, ph + 1, 0);
                const double d[4] = {(double)(at(b, l, ph, 1) - at(b, l, ph, 0)), (double)(at(b, l, ph, 2) - at(b, l, ph, 1)),
                                     (double)(at(b, l, ph, 3) - at(b, l, ph, 2)), (double)(next - at(b, l, ph, 3))};
                for (int k = 0; k < 4; k++) {
                    m[k] += d[k];
                    lmx[k] = d[k] > lmx[k] ? d[k] : lmx[k];
                }
                const double work = (double)(at(b, l, ph, 3) - at(b, l, ph, 0));
                lo = work < lo ? work : lo;
                hi = work > hi ? work : hi;
                wmin = d[3] < wmin ? d[3] : wmin;
                wmax = d[3] > wmax ? d[3] : wmax;
                cnt++;
            }
            skew += hi - lo;
            for (int k = 0; k < 4; k++) mx[k] += lmx[k];
        }
        const double sum = (m[0] + m[1] + m[2] + m[3]) / cnt;
        tot += sum;
        fprintf(stderr,
                "  %-9s %6.2f us: %s %.2f, %s %.2f, %s %.2f, %s %.2f (wait min %.2f max %.2f); work spread %.2f\n",
                names[ph], us(sum), cols[ph == 1][0], us(m[0] / cnt), cols[ph == 1][1], us(m[1] / cnt),
                cols[ph == 1][2], us(m[2] / cnt), cols[ph == 1][3], us(m[3] / cnt), us(wmin), us(wmax),
                us(skew / (L - 1)));
        fprintf(stderr, "  %-9s        slowest CTA: %.2f, %.2f, %.2f, %.2f\n", "", us(mx[0] / (L - 1)),
                us(mx[1] / (L - 1)), us(mx[2] / (L - 1)), us(mx[3] / (L - 1)));
    }
    fprintf(stderr, "  a layer %.2f us\n", us(tot));
    /* CTA 0's slots: the gaps between landings, as a histogram (us) */
    int ns = 0;
    while (ns < MK_TR_SLOTS && sl[ns]) ns++;
    int hist[8] = {0};
    static const double edges[7] = {0.25, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0};
    for (int i = 1; i < ns; i++) {
        const double g = us((double)(sl[i] - sl[i - 1]));
        int k = 0;
        while (k < 7 && g >= edges[k]) k++;
        hist[k]++;
    }
    fprintf(stderr, "  CTA 0: %d slots landed over %.1f us; gaps <0.25 %d, <0.5 %d, <1 %d, <1.5 %d, <2 %d, <4 %d, <8 %d, "
            ">=8 %d\n", ns, ns > 1 ? us((double)(sl[ns - 1] - sl[0])) : 0.0, hist[0], hist[1], hist[2], hist[3],
            hist[4], hist[5], hist[6], hist[7]);
    free(h);
    cudaFree(mk_tr.d);
    mk_tr.d = NULL;
}

static bool plain_bf16(const be_linear *l, int64_t out, int64_t in) { return cu_linear_plain_bf16(l, out, in); }

static bool vec_bf16(const tensor *t, int64_t n) {
    return t && t->data && t->dtype == DTYPE_BF16 && tensor_numel(t) == n && (t->ndim == 1 || t->row_stride == 0) &&
           (uintptr_t)t->data % 16 == 0;
}

/* Why st cannot run as one kernel here (NULL: it can). */
static const char *stack_refusal(cu_state *cu, const be_dense_stack *st) {
    if (!cu->stack_on) return "off (VLLM_CUDA_STACK=0)";
    if (!cu->pdl) return "needs sm_90 (the TMA)";
    if (!st || !st->layers || st->num_layers < 1 || st->num_layers > CU_STACK_MAX_LAYERS) return "layer count";
    const int hd = st->head_dim, nh = st->num_heads, nkv = st->num_kv_heads;
    if (hd != 64 && hd != 128 && hd != 256) return "head_dim not 64, 128 or 256";
    if (nh <= 0 || nkv <= 0 || nh % nkv || nh / nkv > MK_MAXG || (nh / nkv) * hd > 2048 || nkv > cu->num_sms)
        return "heads";
    if (st->rot_dim <= 0 || st->rot_dim > hd || st->rot_dim % 2 || (st->neox && (st->rot_dim / 2) % 32))
        return "rotary dims";
    const int64_t D = st->hidden, I = st->intermediate, qd = (int64_t)nh * hd, nq = qd + 2LL * nkv * hd;
    const int64_t ks[3] = {D, qd, I};
    for (int i = 0; i < 3; i++)
        if (ks[i] <= 0 || ks[i] % 256 || ks[i] > MK_MAXK) return "widths (need multiples of 256, at most 16384)";
    const int64_t nb = cu->num_sms;
    if ((nq + nb - 1) / nb > MK_MAXR || 2 * ((I + nb - 1) / nb) > MK_MAXR || (D + nb - 1) / nb > MK_MAXR)
        return "rows per SM";
    if (st->sliding_window < 0 || !(st->scale > 0.0f)) return "window or scale";
    const tensor *cs = st->cos_sin;
    if (!cs || cs->dtype != DTYPE_F32 || cs->ndim != 2 || cs->shape[1] != st->rot_dim ||
        tensor_row_stride(cs) != st->rot_dim)
        return "RoPE table";
    for (int l = 0; l < st->num_layers; l++) {
        const be_dense_layer *ly = &st->layers[l];
        if (!plain_bf16(ly->qkv, nq, D) || !plain_bf16(ly->o, D, qd) || !plain_bf16(ly->gate_up, 2 * I, D) ||
            !plain_bf16(ly->down, D, I))
            return "weights (BF16 ones only)";
        if (!vec_bf16(ly->in_norm, D) || !vec_bf16(ly->post_norm, D) || (ly->q_norm && !vec_bf16(ly->q_norm, hd)) ||
            (ly->k_norm && !vec_bf16(ly->k_norm, hd)))
            return "norm weights (BF16 ones only)";
    }
    return NULL;
}

be_support cu_dense_stack_supports(cu_state *cu, const be_dense_stack *st) {
    const char *why = stack_refusal(cu, st);
    if (why) {
        LOG_D("cuda backend: dense_stack_decode not taken: %s", why);
        return BE_UNSUPPORTED;
    }
    return mk_ready(cu, st->head_dim) ? BE_NATIVE : BE_UNSUPPORTED;
}

vllm_status cu_stack_reserve(cu_state *cu) {
    const size_t ws = (size_t)MK_MAXG * cu->num_sms * (256 + 2) * sizeof(float);
    vllm_status st = cu_buf_reserve(cu, &cu->stack_ws, ws, "dense stack (attention partials)");
    if (st == VLLM_OK)
        st = cu_buf_reserve(cu, &cu->stack_cnt, ((size_t)cu->num_sms + 2) * sizeof(unsigned), "dense stack (counters)");
    if (st == VLLM_OK && cudaMemsetAsync(cu->stack_cnt.p, 0, cu->stack_cnt.cap, cu->stream) != cudaSuccess) {
        cudaGetLastError();
        st = vt_error(VLLM_ERR_BACKEND, "cuda backend: clearing the dense stack's counters failed");
    }
    return st;
}

void cu_dense_stack_decode(backend *be, const be_dense_stack *st, tensor *x, const tensor *positions,
                           const attn_meta *m, tensor *qkv, tensor *attn, tensor *act) {
    cu_state *cu = cu_of(be);
    const char *op = "dense_stack_decode";
    const char *why = stack_refusal(cu, st);
    if (why || !mk_ready(cu, st->head_dim)) {
        cu_fail(cu, "%s: this stack is not supported: %s", op, why ? why : "no CTA per SM fits");
        return;
    }
    const int hd = st->head_dim, nh = st->num_heads, nkv = st->num_kv_heads;
    const int64_t D = st->hidden, I = st->intermediate, qd = (int64_t)nh * hd, nq = qd + 2LL * nkv * hd;
    if (!m || m->num_tokens != 1 || m->num_seqs != 1 || m->block_size <= 0 || m->max_blocks_per_seq <= 0) {
        cu_fail(cu, "%s: needs one token of one sequence", op);
        return;
    }
    if (!cu_check_mat(cu, op, "x", x, CU_DT(DTYPE_BF16), 1, D) || !cu_check_mat(cu, op, "qkv", qkv, CU_DT(DTYPE_BF16), 1, nq) ||
        !cu_check_mat(cu, op, "attn", attn, CU_DT(DTYPE_BF16), 1, qd) ||
        !cu_check_mat(cu, op, "act", act, CU_DT(DTYPE_BF16), 1, I) ||
        !cu_check_vec(cu, op, "positions", positions, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, op, "seq_lens", &m->seq_lens, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, op, "slot_mapping", &m->slot_mapping, CU_DT(DTYPE_I64), -1) ||
        !cu_check_mat(cu, op, "block_tables", &m->block_tables, CU_DT(DTYPE_I32), -1, m->max_blocks_per_seq))
        return;
    const tensor *bufs[4] = {x, qkv, attn, act};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)bufs[i]->data % 16) {
            cu_fail(cu, "%s: x, qkv, attn and act must be 16-byte aligned", op);
            return;
        }
    mk_args a = {};
    a.L = st->num_layers;
    a.D = (int)D;
    a.I = (int)I;
    a.nh = nh;
    a.nkv = nkv;
    a.S = cu->num_sms / nkv;
    a.half = st->rot_dim / 2;
    a.neox = st->neox;
    a.window = st->sliding_window;
    a.bs = m->block_size;
    a.max_blocks = m->max_blocks_per_seq;
    a.eps = st->eps;
    a.qscale = st->scale * 1.4426950408889634f;
    a.cs = (const float *)st->cos_sin->data;
    a.max_pos = st->cos_sin->shape[0];
    a.pos = (const int32_t *)positions->data;
    a.seq_lens = (const int32_t *)m->seq_lens.data;
    a.bt = (const int32_t *)m->block_tables.data;
    a.slots = (const int64_t *)m->slot_mapping.data;
    a.x = (__nv_bfloat16 *)x->data;
    a.qkv = (__nv_bfloat16 *)qkv->data;
    a.attn = (__nv_bfloat16 *)attn->data;
    a.act = (__nv_bfloat16 *)act->data;
    a.ws = (float *)cu->stack_ws.p;
    a.cnt = (unsigned *)cu->stack_cnt.p;
    a.bar = a.cnt + cu->num_sms;
    a.err = cu->derr_dev;
    a.dbg = mk_dbg();
    a.nslot = mk_nslot();
    for (int l = 0; l < a.L; l++) {
        const be_dense_layer *ly = &st->layers[l];
        if (!cu_cache_check(cu, op, "k_cache", ly->k_cache, m->block_size, nkv, hd) ||
            !cu_cache_check(cu, op, "v_cache", ly->v_cache, m->block_size, nkv, hd))
            return;
        if (ly->k_cache->dtype != DTYPE_BF16 || ly->v_cache->dtype != DTYPE_BF16 ||
            ly->v_cache->shape[0] != ly->k_cache->shape[0]) {
            cu_fail(cu, "%s: layer %d: the caches must be BF16 with the same block count", op, l);
            return;
        }
        if (l == 0) a.num_blocks = ly->k_cache->shape[0];
        else if (ly->k_cache->shape[0] != a.num_blocks) {
            cu_fail(cu, "%s: layer %d: the caches' block counts differ", op, l);
            return;
        }
        mk_layer &k = a.layer[l];
        const be_linear *lins[4] = {ly->qkv, ly->o, ly->gate_up, ly->down};
        for (int i = 0; i < 4; i++) {
            k.w[i] = cu_linear_weights(lins[i]);
            k.b[i] = cu_linear_bias(lins[i]);
        }
        k.n_in = (const __nv_bfloat16 *)ly->in_norm->data;
        k.n_post = (const __nv_bfloat16 *)ly->post_norm->data;
        k.n_q = ly->q_norm ? (const __nv_bfloat16 *)ly->q_norm->data : NULL;
        k.n_k = ly->k_norm ? (const __nv_bfloat16 *)ly->k_norm->data : NULL;
        k.kc = (__nv_bfloat16 *)ly->k_cache->data;
        k.vc = (__nv_bfloat16 *)ly->v_cache->data;
    }
    if (!cu->stack_ws.p || !cu->stack_cnt.p) {
        cu_fail(cu, "%s: workspace not reserved", op);
        return;
    }
    a.trace = mk_trace_arm(cu, a.L, cu->num_sms);
    cu_launch(cu, op, true, mk_pick(hd), dim3((unsigned)cu->num_sms), dim3(MK_THREADS), MK_SMEM, a);
    if (a.trace) mk_trace_report(cu);
}
