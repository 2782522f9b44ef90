/*
 * ops_attention.cu: the CUDA paged KV cache write and paged attention.
 *
 * Caches are (num_blocks, block_size, nkv, head_dim) BF16, or E4M3 bytes
 * (the FP8 cache, --kv-cache-dtype fp8: kv_write stores e4m3(x / s) of the
 * tensor's qscale s, vLLM's scaled_fp8_conversion; the kernels take the
 * element type as a template argument KT, read the bytes exactly and fold
 * the k scale into the score scale and the v scale into the output; the
 * decode and tensor-core kernels have FP8 instances without softcap and
 * sinks, the generic kernel takes the rest); token slot s
 * lives at block s / block_size, offset s % block_size, i.e. at row s of the
 * cache viewed as (num_blocks * block_size, nkv * head_dim) (vLLM's layout,
 * vllm/v1/attention/backends/flash_attn.py).
 *
 * Attention is flash-attention style (online softmax in f32, no score
 * matrix in memory) over the block tables, for any mix of prefill chunks
 * and decodes (vLLM v1's flattened batch, as its unified attention kernel,
 * vllm/v1/attention/ops/triton_unified_attention.py), in three kernels:
 *  - head_dim 64 / 128 / 256, sequences with >= TC_MIN_Q new tokens: the
 *    tensor-core kernel of ops_attention_tc.cu (256 where the GPU's shared
 *    memory allows it);
 *  - head_dim 64 / 128 / 256, the other tokens: k_attn_decode (flash
 *    decoding, below), whose split count the device cuts to each token's
 *    context, so max_seq_len / max_query_len may be upper bounds (graphs);
 *  - other head dims: the generic k_attention, described here. One CTA of 4 warps
 * takes one query token and up to AT_HP query heads of one KV head (GQA:
 * the heads of a group share each K/V load) and one segment of the keys
 * that token sees (causal, sliding window). Its warps take 32 keys at a
 * time: lane j scores key j against every head, the warp updates each
 * head's running max and sum, then the lanes split head_dim to accumulate
 * P V. The warps' states are merged in shared memory at the end.
 *
 * A softcap (Gemma 2's attn_logit_softcapping) bends every score
 * s = q.k * scale to tanh(s / cap) * cap before the mask and the softmax,
 * in all three kernels.
 *
 * Attention sinks (gpt-oss, attn_params.sinks): a logit sink_h per head that
 * joins the softmax's max and denominator but has no value. Every kernel
 * starts one online-softmax state of each (token, head) (the first warp /
 * key group / quad lane of the first split) at max = sink_h, sum = 1 instead
 * of -inf and 0, i.e. as if one key with score sink_h and value 0 came
 * first; the merges of warps, groups and splits then carry it like any key
 * (a template argument SINK: the models without sinks run the same code as
 * before).
 *
 * Split-KV (flash decoding): when the batch has too few (token, KV head)
 * pairs to fill the GPU and contexts are long, the keys are cut into
 * nsplit segments run by separate CTAs; each writes its unnormalised
 * output with its max and sum, and k_attn_combine merges them (as
 * triton_unified_attention.py's 3-D kernel and reduce_segments).
 */
#include "cuda/cuda_internal.h"

#include <cooperative_groups.h>

#define AT_WARPS 4
#define AT_THREADS (AT_WARPS * 32)
#define AT_HP 8          /* query heads per CTA at most */
#define AT_MAX_HD 256    /* head_dim supported (32 * the largest NACC) */

/* ---- kv_write ---- */

// k, v (T, nkv*hd) -> caches (num_blocks, block_size, nkv, hd) at slot_mapping (T)
__global__ void k_kv_write(const void *k, const void *v, int dt, int64_t ks, int64_t vs, void *kc, void *vc,
                           bool f8, float kscale, float vscale, const int64_t *slots, int64_t T, int64_t kvd,
                           int64_t num_slots, cu_dev_err *err) {
    pdl_launch();
    pdl_wait();
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int64_t s = slots[t];
        if (s < 0) continue; /* padding */
        if (s >= num_slots) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_KV_SLOT, t, s, num_slots);
            continue;
        }
        for (int64_t i = threadIdx.x; i < kvd; i += blockDim.x) {
            kv_store(kc, s * kvd + i, cu_ld(k, dt, t * ks + i), f8, kscale);
            kv_store(vc, s * kvd + i, cu_ld(v, dt, t * vs + i), f8, vscale);
        }
    }
}

bool cu_cache_check(cu_state *cu, const char *op, const char *arg, const tensor *c, int block_size, int nkv,
                        int hd) {
    if (!cu_check_vec(cu, op, arg, c, CU_DT(DTYPE_BF16) | CU_DT(DTYPE_F8_E4M3), -1)) return false;
    if (c->dtype == DTYPE_F8_E4M3 && !(c->qscale >= 0.0f && isfinite(c->qscale))) {
        cu_fail(cu, "%s: %s has scale %g", op, arg, (double)c->qscale);
        return false;
    }
    if (c->ndim != 4 || c->shape[1] != block_size || c->shape[2] != nkv || c->shape[3] != hd) {
        cu_fail(cu, "%s: %s must be (num_blocks, %d, %d, %d), got ndim %d (.., %lld, %lld, %lld)", op, arg, block_size,
                nkv, hd, c->ndim, (long long)c->shape[1], (long long)c->shape[2], (long long)c->shape[3]);
        return false;
    }
    return true;
}

void cu_kv_write(backend *be, const tensor *k, const tensor *v, tensor *k_cache, tensor *v_cache, const attn_meta *m) {
    cu_state *cu = cu_of(be);
    if (!m || m->block_size <= 0 || m->num_tokens < 0) {
        cu_fail(cu, "kv_write: bad attention metadata");
        return;
    }
    if (!k_cache || !v_cache || k_cache->ndim != 4) {
        cu_fail(cu, "kv_write: caches must be 4-D (num_blocks, block_size, nkv, head_dim)");
        return;
    }
    int nkv = (int)k_cache->shape[2], hd = (int)k_cache->shape[3];
    if (!cu_cache_check(cu, "kv_write", "k_cache", k_cache, m->block_size, nkv, hd) ||
        !cu_cache_check(cu, "kv_write", "v_cache", v_cache, m->block_size, nkv, hd))
        return;
    if (v_cache->shape[0] != k_cache->shape[0] || v_cache->dtype != k_cache->dtype) {
        cu_fail(cu, "kv_write: k_cache and v_cache have different block counts or dtypes");
        return;
    }
    int64_t T = m->num_tokens, kvd = (int64_t)nkv * hd;
    if (!cu_check_mat(cu, "kv_write", "k", k, CU_ACT, T, kvd) ||
        !cu_check_mat(cu, "kv_write", "v", v, CU_DT(k->dtype), T, kvd) ||
        !cu_check_vec(cu, "kv_write", "slot_mapping", &m->slot_mapping, CU_DT(DTYPE_I64), -1))
        return;
    if (tensor_numel(&m->slot_mapping) < T) {
        cu_fail(cu, "kv_write: slot_mapping has %lld entries for %lld tokens", (long long)tensor_numel(&m->slot_mapping),
                (long long)T);
        return;
    }
    if (T == 0) return;
    cu_launch(cu, "kv_write", true, k_kv_write, dim3(cu_grid(T, 1)), dim3(256), 0, (const void *)k->data,
              (const void *)v->data, (int)k->dtype, tensor_row_stride(k), tensor_row_stride(v),
              k_cache->data, v_cache->data, k_cache->dtype == DTYPE_F8_E4M3, cu_cache_scale(k_cache),
              cu_cache_scale(v_cache), (const int64_t *)m->slot_mapping.data, T, kvd,
              k_cache->shape[0] * (int64_t)m->block_size, cu->derr_dev);
}

/* ---- attention ---- */

typedef struct at_args {
    const void *q;
    int qdt;
    int64_t qs;
    const void *kc, *vc;    /* KT */
    float kscale, vscale;   /* the caches' scales (the score scale already holds kscale; out is O / L * vscale) */
    int64_t kvd;            /* elements between consecutive cache slots (nkv * hd) */
    int64_t num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, T, nh, hd, group, hp, npass, window, nsplit;
    float scale;
    float softcap;          /* > 0: scores s become tanh(s / softcap) * softcap */
    const void *sinks;      /* SINK: (nh) of sdt, the heads' sink logits (natural log, not scaled or capped) */
    int sdt;
    void *out;
    int odt;
    int64_t os;
    float *ws;              /* nsplit > 1: (T, nh, nsplit, hd + 2) partials */
    cu_dev_err *err;
} at_args;

/* A (token t, head, element d) result of split `split`: the output O / L when the
 * keys were not split (single), else the unnormalised O with the split's max M and
 * sum L (at d == 0) into the split-KV workspace (A: at_args or da_args). */
template <typename A>
__device__ __forceinline__ void attn_put(const A &a, int t, int head, int d, int hd, int split, bool single, float O,
                                         float M, float L) {
    O *= a.vscale; /* the FP8 cache's v scale (1 otherwise) */
    if (single) {
        cu_st(a.out, a.odt, (int64_t)t * a.os + (int64_t)head * hd + d, L > 0.0f ? O / L : 0.0f);
        return;
    }
    float *part = a.ws + (((int64_t)t * a.nh + head) * a.nsplit + split) * (hd + 2);
    part[d] = O;
    if (d == 0) {
        part[hd] = M;
        part[hd + 1] = L;
    }
}

/* grid (T, nkv * npass, nsplit), AT_THREADS threads, dynamic shared memory
 * of at_smem_floats(hp, hd) floats. head_dim <= 32 * NACC. CAP: a.softcap > 0
 * (a template argument: no test in the score loop of the models without one);
 * SINK: a.sinks (warp 0 of split 0 starts at the sink). */
template <typename KT, int NACC, bool CAP, bool SINK>
__global__ void __launch_bounds__(AT_THREADS) k_attention(at_args a) {
    extern __shared__ float smem[];
    const int hd = a.hd, hp = a.hp;
    float *qsm = smem;                          /* (hp, hd) */
    float *pw = qsm + hp * hd;                  /* (AT_WARPS, AT_HP, 32) probabilities of a chunk */
    float *wm = pw + AT_WARPS * AT_HP * 32;     /* (AT_WARPS, AT_HP) */
    float *wl = wm + AT_WARPS * AT_HP;          /* (AT_WARPS, AT_HP) */
    float *wacc = wl + AT_WARPS * AT_HP;        /* (AT_WARPS, hp, hd) */
    __shared__ int meta[4];                     /* seq, ok */

    pdl_launch();
    pdl_wait();
    const int t = blockIdx.x;
    const int kvh = blockIdx.y / a.npass, pass = blockIdx.y % a.npass;
    const int h0 = kvh * a.group + pass * hp;
    const int nhp = min(hp, a.group - pass * hp);
    const int split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        /* the sequence that owns token t: the last s with qsl[s] <= t */
        int lo = 0, hi = a.S - 1;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            if (a.qsl[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        int s = lo, ok = 1;
        int q0 = a.qsl[s], q1 = a.qsl[s + 1], ctx = a.seq_lens[s];
        if (t == 0 && blockIdx.y == 0 && split == 0 && (a.qsl[0] != 0 || a.qsl[a.S] != a.T)) {
            cu_report(a.err, CU_DEV_ATTN_QSL, a.qsl[0] != 0 ? 0 : a.S, a.qsl[0] != 0 ? a.qsl[0] : a.qsl[a.S], a.T);
        }
        if (!(q0 <= t && t < q1)) {
            ok = 0;
            if (blockIdx.y == 0 && split == 0) cu_report(a.err, CU_DEV_ATTN_QSL, s + 1, q1, a.T);
        } else if (ctx < q1 - q0 || (int64_t)ctx > (int64_t)a.max_blocks * a.bs) {
            ok = 0;
            if (blockIdx.y == 0 && split == 0) cu_report(a.err, CU_DEV_ATTN_META, s, q1 - q0, ctx);
        }
        meta[0] = s;
        meta[1] = ok;
    }
    __syncthreads();
    if (!meta[1]) return;
    const int s = meta[0];
    const int q_len = a.qsl[s + 1] - a.qsl[s];
    const int pos = a.seq_lens[s] - q_len + (t - a.qsl[s]);  /* absolute position of the query */
    int k_lo = 0;
    if (a.window > 0 && pos - a.window + 1 > 0) k_lo = pos - a.window + 1;
    const int n_keys = pos - k_lo + 1;
    const int seg = (n_keys + a.nsplit - 1) / a.nsplit;
    const int seg_lo = k_lo + split * seg;
    const int seg_hi = min(seg_lo + seg, pos + 1);  /* exclusive; may be <= seg_lo (empty) */
    const int32_t *blocks = a.bt + (int64_t)s * a.bt_stride;

    /* q of the CTA's heads, f32 */
    for (int i = threadIdx.x; i < nhp * hd; i += AT_THREADS)
        qsm[i] = cu_ld(a.q, a.qdt, (int64_t)t * a.qs + (int64_t)(h0 + i / hd) * hd + i % hd);
    __syncthreads();

    float m[AT_HP], l[AT_HP], acc[AT_HP][NACC];
#pragma unroll
    for (int h = 0; h < AT_HP; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < NACC; e++) acc[h][e] = 0.0f;
    }
    if constexpr (SINK) {
        if (warp == 0 && split == 0) /* the sink: one more logit, value 0 */
#pragma unroll
            for (int h = 0; h < AT_HP; h++)
                if (h < nhp) {
                    m[h] = cu_ld(a.sinks, a.sdt, h0 + h);
                    l[h] = 1.0f;
                }
    }
    float *pwarp = pw + warp * AT_HP * 32;
    const bool vec8 = (hd % 8) == 0;

    for (int c = seg_lo + warp * 32; c < seg_hi; c += AT_WARPS * 32) {
        /* lane j: key c + j */
        int key = c + lane;
        bool valid = key < seg_hi;
        int64_t slot = 0;
        if (valid) {
            int col = key / a.bs;
            int32_t blk = blocks[col];
            if (blk < 0 || blk >= a.num_blocks) {
                cu_report(a.err, CU_DEV_ATTN_BLOCK, s, col, blk);
                valid = false;
            } else {
                slot = (int64_t)blk * a.bs + key % a.bs;
            }
        }
        float sc[AT_HP];
#pragma unroll
        for (int h = 0; h < AT_HP; h++) sc[h] = 0.0f;
        if (valid) {
            const KT *kp = (const KT *)a.kc + slot * a.kvd + (int64_t)kvh * hd;
            if (vec8) {
                for (int d = 0; d < hd; d += 8) {
                    float kf[8];
                    kv8_to_f32(kv_ld8(kp + d), kf, kp);
#pragma unroll
                    for (int h = 0; h < AT_HP; h++) {
                        if (h < nhp) {
                            const float *qh = qsm + h * hd + d;
                            float acc_s = sc[h];
#pragma unroll
                            for (int i = 0; i < 8; i++) acc_s += qh[i] * kf[i];
                            sc[h] = acc_s;
                        }
                    }
                }
            } else {
                for (int d = 0; d < hd; d += 2) {
                    const float2 f = make_float2(kv_to_f32(kp[d]), kv_to_f32(kp[d + 1]));
#pragma unroll
                    for (int h = 0; h < AT_HP; h++)
                        if (h < nhp) sc[h] += qsm[h * hd + d] * f.x + qsm[h * hd + d + 1] * f.y;
                }
            }
        }
        /* online softmax per head over the chunk */
#pragma unroll
        for (int h = 0; h < AT_HP; h++) {
            if (h < nhp) {
                float x = -INFINITY;
                if (valid) {
                    x = sc[h] * a.scale;
                    if constexpr (CAP) x = tanhf(x / a.softcap) * a.softcap;
                }
                float cm = cu_warp_max(x);
                float m_new = fmaxf(m[h], cm);
                float p = 0.0f, corr = 1.0f;
                if (m_new != -INFINITY) {
                    p = valid ? expf(x - m_new) : 0.0f;
                    corr = m[h] == -INFINITY ? 0.0f : expf(m[h] - m_new);
                }
                l[h] = l[h] * corr + cu_warp_sum(p);
                m[h] = m_new;
#pragma unroll
                for (int e = 0; e < NACC; e++) acc[h][e] *= corr;
                pwarp[h * 32 + lane] = p;
            }
        }
        __syncwarp();
        /* acc += P V: the lanes split head_dim */
        int nvalid = min(32, seg_hi - c);
        for (int j = 0; j < nvalid; j++) {
            bool vj = __shfl_sync(0xffffffffu, valid, j);
            long long sj = __shfl_sync(0xffffffffu, (long long)slot, j);
            if (!vj) continue;
            const KT *vp = (const KT *)a.vc + sj * a.kvd + (int64_t)kvh * hd;
            float vv[NACC];
#pragma unroll
            for (int e = 0; e < NACC; e++) {
                int d = lane + 32 * e;
                vv[e] = d < hd ? kv_to_f32(vp[d]) : 0.0f;
            }
#pragma unroll
            for (int h = 0; h < AT_HP; h++) {
                if (h < nhp) {
                    float pj = pwarp[h * 32 + j];
#pragma unroll
                    for (int e = 0; e < NACC; e++) acc[h][e] += pj * vv[e];
                }
            }
        }
        __syncwarp();
    }

    /* merge the warps' states */
#pragma unroll
    for (int h = 0; h < AT_HP; h++) {
        if (h < nhp) {
            if (lane == 0) {
                wm[warp * AT_HP + h] = m[h];
                wl[warp * AT_HP + h] = l[h];
            }
#pragma unroll
            for (int e = 0; e < NACC; e++) {
                int d = lane + 32 * e;
                if (d < hd) wacc[(warp * hp + h) * hd + d] = acc[h][e];
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nhp * hd; i += AT_THREADS) {
        int h = i / hd, d = i % hd;
        float M = -INFINITY;
        for (int w = 0; w < AT_WARPS; w++) M = fmaxf(M, wm[w * AT_HP + h]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY) {
            for (int w = 0; w < AT_WARPS; w++) {
                float mw = wm[w * AT_HP + h];
                if (mw == -INFINITY) continue;
                float f = expf(mw - M);
                L += wl[w * AT_HP + h] * f;
                O += wacc[(w * hp + h) * hd + d] * f;
            }
        }
        attn_put(a, t, h0 + h, d, hd, split, a.nsplit == 1, O, M, L);
    }
}

/* grid (T * nh): merges the nsplit partial results of each (token, head). */
__global__ void k_attn_combine(const float *ws, int T, int nh, int hd, int nsplit, void *out, int odt, int64_t os) {
    pdl_launch();
    pdl_wait();
    for (int64_t th = blockIdx.x; th < (int64_t)T * nh; th += gridDim.x) {
        int64_t t = th / nh;
        int head = (int)(th % nh);
        const float *part = ws + th * nsplit * (hd + 2);
        float M = -INFINITY;
        for (int s = 0; s < nsplit; s++) M = fmaxf(M, part[s * (hd + 2) + hd]);
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float L = 0.0f, O = 0.0f;
            if (M != -INFINITY) {
                for (int s = 0; s < nsplit; s++) {
                    const float *ps = part + s * (hd + 2);
                    if (ps[hd] == -INFINITY) continue;
                    float f = expf(ps[hd] - M);
                    L += ps[hd + 1] * f;
                    O += ps[d] * f;
                }
            }
            cu_st(out, odt, t * os + (int64_t)head * hd + d, L > 0.0f ? O / L : 0.0f);
        }
    }
}

static size_t at_smem_bytes(int hp, int hd) {
    return (size_t)(5 * hp * hd + AT_WARPS * AT_HP * 32 + 2 * AT_WARPS * AT_HP) * sizeof(float);
}

/* ---- flash decoding (head_dim 64, 128, 256) ---- */

/* One CTA of 4 warps per (query token, KV head, head pass, split), as the
 * generic kernel, but laid out for bandwidth: a key's K (and V) row is
 * read by LPK = head_dim / 8 lanes with one 16-byte load each, so a warp
 * reads 32 / LPK whole rows per load instruction, and each "key group" of
 * LPK lanes takes every NGRP-th key of the split, DA_U keys per iteration
 * with all their loads in flight. Each group keeps its own online softmax
 * (base 2: q is pre-scaled by scale * log2(e)) for up to GP heads; the
 * groups are merged in shared memory. A token's split count is cut on the
 * device to its own context (at least MINK keys per split), so
 * max_seq_len may be an upper bound. With several splits, each CTA writes
 * its unnormalised output, max and sum, and the last CTA of the (token,
 * KV head) to arrive (an atomic counter, reset by it) merges them:
 * vLLM's flash-decoding reduce (triton_unified_attention.py's
 * reduce_segments) without a second launch. On sm_90 the splits run as
 * thread-block clusters of csize CTAs along z (up to 16 where the GPU
 * schedules them), and a token whose splits
 * fit one cluster (its context at most csize * MINK keys) merges them
 * there instead: each CTA of cluster 0 (those past the token's splits with
 * empty partials) keeps its partials in shared memory, and after a cluster
 * barrier each reads the others' through distributed shared memory for its
 * share of the outputs, in the same order and arithmetic as the merge
 * through the workspace; no fence, counter or global round trip. */
#define DA_WARPS 4
#define DA_THREADS (DA_WARPS * 32)
#define DA_CHUNK 256      /* keys whose block ids are staged in shared memory at once */
#define DA_MAX_SPLIT 32
#define DA_MAX_CLUSTER 16 /* CTAs a cluster at most: the non-portable size where the GPU schedules it (cu->attn_cmax,
                             probed by cu_attention_reserve), else 8 (the portable size) */
#define DA_PORTABLE_CLUSTER 8
#define DA_SMALL_HP 4     /* query heads a CTA at most in batches too small to fill the GPU (cu_attention) */
#define DA_ONE_HP_CAP 8   /* one query head a CTA where the split cap at that many CTAs is still this or more */

template <int HD, int GP, int KB = 2>
struct da_shape {
    static constexpr int LPK = HD / 8;                 /* lanes per key */
    static constexpr int KPW = 32 / LPK;               /* keys per warp load */
    static constexpr int NGRP = DA_WARPS * KPW;        /* key groups per CTA */
    /* keys per group per iteration; twice as many with 1-byte (FP8) elements, for as many bytes in flight */
    static constexpr int U = (GP >= 8 ? 2 : 4) * (KB == 1 ? 2 : 1);
    static constexpr int MINK = NGRP * U;              /* keys per CTA iteration: the smallest split */
};

typedef struct da_args {
    const void *q;
    int qdt;
    int64_t qs;
    const void *kc, *vc;    /* KT */
    float kscale, vscale;   /* the caches' scales (qscale holds kscale; out is O / L * vscale) */
    int64_t kvd, num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, T, nh, group, hp, window, nsplit;
    int tc_min_q;           /* > 0: sequences with this many new tokens are the tensor-core kernel's */
    int csize;              /* > 1: launched as clusters of csize CTAs along z (gridDim.z % csize == 0) */
    bool q16;               /* q is BF16 in 16-byte aligned rows: each lane's 8 elements of a head in one load */
    int min_keys;           /* keys per split at least */
    float qscale;           /* q's factor: the softmax scale * log2(e) (scores in base 2), or with a
                               softcap the softmax scale (the cap bends the natural score first) */
    float cap_inv;          /* softcap: 1 / softcap, 0 = off */
    float cap_log2;         /* softcap: softcap * log2(e) (the capped score in base 2) */
    const void *sinks;      /* SINK: (nh) of sdt, the heads' sink logits (natural log; * log2(e) here) */
    int sdt;
    void *out;
    int odt;
    int64_t os;
    float *ws;              /* nsplit > 1: (T, nh, nsplit, HD + 2) partials */
    int *cnt;               /* nsplit > 1: (T, gridDim.y) arrival counters, 0 between launches */
    cu_dev_err *err;
} da_args;

/* CAP: the softcap (a.cap_inv > 0), a template argument so that the models without one
 * (Llama, Qwen) have no test in the score loop; SINK: a.sinks (key group 0 of split 0 starts
 * at the sink) */
template <typename KT, int HD, int GP, bool CAP, bool SINK>
__global__ void __launch_bounds__(DA_THREADS) k_attn_decode(da_args a) {
    using SH = da_shape<HD, GP, (int)sizeof(KT)>;
    constexpr int LPK = SH::LPK, NGRP = SH::NGRP, U = SH::U;
    extern __shared__ float smem[];
    float *gacc = smem;                            /* (NGRP, hp, HD) */
    float *gm = gacc + NGRP * a.hp * HD;           /* (NGRP, GP) */
    float *gl = gm + NGRP * GP;                    /* (NGRP, GP) */
    float *cpo = gl + NGRP * GP;                   /* csize > 1: this split's partials (hp, HD), max and sum (GP) */
    float *cpm = cpo + a.hp * HD, *cpl = cpm + GP; /* (then the merge's factors (DA_MAX_CLUSTER, GP), sums (GP)) */
    __shared__ int blk_s[DA_CHUNK + 2];
    __shared__ int info[8];                        /* ok, seq, splits, lo, hi, first new position, last */

    pdl_launch();
    const int t = blockIdx.x, split = blockIdx.z;
    const int npass = (a.group + a.hp - 1) / a.hp;
    const int kvh = blockIdx.y / npass, pass = blockIdx.y % npass;
    const int h0 = kvh * a.group + pass * a.hp;
    const int nhp = min(a.hp, a.group - pass * a.hp);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int grp = warp * SH::KPW + lane / LPK;   /* this lane's key group */
    const int e0 = (lane % LPK) * 8;               /* its 8 elements of a row */

    /* Until pdl_wait() the CTA reads only what no kernel of this step writes
     * (cuda_internal.h): the metadata (an upload), the block ids, and the K/V
     * of keys before the step's new tokens (written by earlier steps). */
    if (threadIdx.x == 0) {
        int s, q0, q1, ctx;
        int ok = cu_attn_token_seq(a, t, blockIdx.y == 0 && split == 0, &s, &q0, &q1, &ctx);
        if (ok && a.tc_min_q > 0 && q1 - q0 >= a.tc_min_q) ok = 0; /* ops_attention_tc.cu's */
        int splits = 1, klo = 0, khi = 0;
        if (ok) {
            const int pos = ctx - (q1 - q0) + (t - q0);  /* absolute position of the query */
            int k_lo = 0;
            if (a.window > 0 && pos - a.window + 1 > 0) k_lo = pos - a.window + 1;
            const int n_keys = pos - k_lo + 1;
            splits = min(a.nsplit, (n_keys + a.min_keys - 1) / a.min_keys);
            if (splits < 1) splits = 1;
            const int seg = (n_keys + splits - 1) / splits;
            klo = k_lo + split * seg;
            khi = min(klo + seg, pos + 1);
        }
        info[0] = ok;
        info[1] = s;
        info[2] = splits;
        info[3] = klo;
        info[4] = khi;
        info[5] = ctx - (q1 - q0); /* the first position this step writes */
    }
    __syncthreads();
    const int splits = info[2];
    /* the splits merge in the cluster (every CTA of cluster 0 takes part) or through the workspace */
    const bool clus = a.csize > 1 && splits > 1 && splits <= a.csize;
    if (!info[0] || split >= (clus ? a.csize : splits)) return;
    const int s = info[1], klo = info[3], khi = info[4], first_new = info[5];
    const int32_t *blocks = a.bt + (int64_t)s * a.bt_stride;

    float qv[GP][8], m[GP], l[GP], acc[GP][8];
#pragma unroll
    for (int h = 0; h < GP; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[h][i] = qv[h][i] = 0.0f;
    }
    if constexpr (SINK) {
        if (grp == 0 && split == 0) /* the sink: one more logit (base 2), value 0; a weight, not step data */
#pragma unroll
            for (int h = 0; h < GP; h++)
                if (h < nhp) {
                    m[h] = cu_ld(a.sinks, a.sdt, h0 + h) * 1.4426950408889634f;
                    l[h] = 1.0f;
                }
    }
    const int64_t head_off = (int64_t)kvh * HD + e0;
    const bool pow2 = (a.bs & (a.bs - 1)) == 0;
    const int bs_shift = __ffs(a.bs) - 1;

    /* K/V of this group's keys kb + grp + u NGRP (u < U) of the chunk staged at b0; old_only: only
     * keys before first_new (pend marks the others) */
    auto load_keys = [&](int kb, int c1, int b0, bool old_only, uint4 *kr, uint4 *vr, bool *val, bool *pend) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int key = kb + grp + u * NGRP;
            val[u] = pend[u] = false;
            kr[u] = make_uint4(0, 0, 0, 0);
            vr[u] = make_uint4(0, 0, 0, 0);
            if (key < c1) {
                const int col = pow2 ? key >> bs_shift : key / a.bs, off_in = pow2 ? key & (a.bs - 1) : key % a.bs;
                const int blk = blk_s[col - b0];
                if (blk >= 0) {
                    if (old_only && key >= first_new) {
                        pend[u] = true;
                    } else {
                        const int64_t off = ((int64_t)blk * a.bs + off_in) * a.kvd + head_off;
                        kr[u] = kv_ldcg8((const KT *)a.kc + off);
                        vr[u] = kv_ldcg8((const KT *)a.vc + off);
                        val[u] = true;
                    }
                }
            }
        }
    };
    bool first = true;
    for (int c0 = klo; c0 < khi; c0 += DA_CHUNK) {
        const int c1 = min(c0 + DA_CHUNK, khi);
        const int b0 = pow2 ? c0 >> bs_shift : c0 / a.bs, b1 = pow2 ? (c1 - 1) >> bs_shift : (c1 - 1) / a.bs;
        __syncthreads(); /* the previous chunk is done with blk_s */
        for (int i = threadIdx.x; i <= b1 - b0; i += DA_THREADS) {
            int32_t blk = blocks[b0 + i];
            if (blk < 0 || blk >= a.num_blocks) {
                cu_report(a.err, CU_DEV_ATTN_BLOCK, s, b0 + i, blk);
                blk = -1;
            }
            blk_s[i] = blk;
        }
        __syncthreads();
        /* every lane runs the same iterations (the shuffles need whole warps) */
        for (int kb = c0; kb < c1; kb += NGRP * U) {
            uint4 kr[U], vr[U];
            bool val[U], pend[U];
            if (first) {
                /* the old keys' loads go out before the wait, the new ones and q after it */
                load_keys(kb, c1, b0, true, kr, vr, val, pend);
                pdl_wait();
                first = false;
                if (a.q16) { /* the GP heads' loads in flight together: one round trip */
                    uint4 qr[GP];
#pragma unroll
                    for (int h = 0; h < GP; h++)
                        qr[h] = h < nhp ? *(const uint4 *)((const __nv_bfloat16 *)a.q + (int64_t)t * a.qs +
                                                           (int64_t)(h0 + h) * HD + e0)
                                        : make_uint4(0, 0, 0, 0);
#pragma unroll
                    for (int h = 0; h < GP; h++) {
                        bf16x8_to_f32(qr[h], qv[h]);
#pragma unroll
                        for (int i = 0; i < 8; i++) qv[h][i] *= a.qscale;
                    }
                } else {
#pragma unroll
                    for (int h = 0; h < GP; h++)
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            qv[h][i] = h < nhp ? cu_ld(a.q, a.qdt,
                                                       (int64_t)t * a.qs + (int64_t)(h0 + h) * HD + e0 + i) *
                                                     a.qscale
                                               : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    if (pend[u]) {
                        const int key = kb + grp + u * NGRP;
                        const int col = pow2 ? key >> bs_shift : key / a.bs;
                        const int off_in = pow2 ? key & (a.bs - 1) : key % a.bs;
                        const int64_t off = ((int64_t)blk_s[col - b0] * a.bs + off_in) * a.kvd + head_off;
                        kr[u] = kv_ldcg8((const KT *)a.kc + off);
                        vr[u] = kv_ldcg8((const KT *)a.vc + off);
                        val[u] = true;
                    }
                }
            } else {
                load_keys(kb, c1, b0, false, kr, vr, val, pend);
            }
            float sc[U][GP];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float kf[8];
                kv8_to_f32(kr[u], kf, (const KT *)nullptr);
#pragma unroll
                for (int h = 0; h < GP; h++) {
                    float d = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; i++) d += qv[h][i] * kf[i];
#pragma unroll
                    for (int o = LPK / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    if constexpr (CAP) d = a.cap_log2 * tanhf(d * a.cap_inv); /* Gemma 2's softcap */
                    sc[u][h] = val[u] ? d : -INFINITY;
                }
            }
#pragma unroll
            for (int h = 0; h < GP; h++) {
                float mx = m[h];
#pragma unroll
                for (int u = 0; u < U; u++) mx = fmaxf(mx, sc[u][h]);
                if (mx == -INFINITY) continue; /* no key yet (uniform over the group) */
                const float corr = exp2f(m[h] - mx);
                float lsum = l[h] * corr;
#pragma unroll
                for (int i = 0; i < 8; i++) acc[h][i] *= corr;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const float p = exp2f(sc[u][h] - mx); /* 0 for invalid keys */
                    lsum += p;
                    float vf[8];
                    kv8_to_f32(vr[u], vf, (const KT *)nullptr);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[h][i] += p * vf[i];
                }
                l[h] = lsum;
                m[h] = mx;
            }
        }
    }
    if (first) pdl_wait(); /* an empty split: its results are still written below */

    /* merge the key groups */
#pragma unroll
    for (int h = 0; h < GP; h++) {
        if (h < nhp) {
            if (lane % LPK == 0) {
                gm[grp * GP + h] = m[h];
                gl[grp * GP + h] = l[h];
            }
#pragma unroll
            for (int i = 0; i < 8; i++) gacc[(grp * a.hp + h) * HD + e0 + i] = acc[h][i];
        }
    }
    __syncthreads();
    /* each head's max M and sum L over the groups, and the groups' factors exp2(m_g - M) in place of their
     * maxima (0 for a group without keys), once per head instead of once per output element */
    __shared__ float hm_s[GP], hl_s[GP];
    if ((int)threadIdx.x < nhp) {
        const int h = threadIdx.x;
        float M = -INFINITY;
#pragma unroll
        for (int g = 0; g < NGRP; g++) M = fmaxf(M, gm[g * GP + h]);
        float L = 0.0f;
#pragma unroll
        for (int g = 0; g < NGRP; g++) {
            const float mg = gm[g * GP + h];
            float f = 0.0f;
            if (M != -INFINITY && mg != -INFINITY) {
                f = exp2f(mg - M);
                L += gl[g * GP + h] * f;
            }
            gm[g * GP + h] = f;
        }
        hm_s[h] = M;
        hl_s[h] = L;
    }
    __syncthreads();
    const bool single = splits == 1;
    for (int idx = threadIdx.x; idx < nhp * HD; idx += DA_THREADS) {
        const int h = idx / HD, d = idx % HD;
        const float M = hm_s[h], L = hl_s[h];
        float O = 0.0f;
#pragma unroll
        for (int g = 0; g < NGRP; g++) {
            const float f = gm[g * GP + h];
            if (f != 0.0f) O += gacc[(g * a.hp + h) * HD + d] * f;
        }
        if (clus) {
            cpo[idx] = O * a.vscale; /* as attn_put's partial */
            if (d == 0) {
                cpm[h] = M;
                cpl[h] = L;
            }
        } else {
            attn_put(a, t, h0 + h, d, HD, split, single, O, M, L);
        }
    }
    if (clus) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        namespace cg = cooperative_groups;
        cg::cluster_group cl = cg::this_cluster();
        float *csf = cpl + GP, *csl = csf + DA_MAX_CLUSTER * GP;
        cl.sync(); /* every split's partials are in its shared memory */
        if ((int)threadIdx.x < nhp) { /* head h's factors exp2(m_s - M) and sum over the splits */
            /* every split's max and sum read at once, one distributed-shared-memory round trip (the loops over the
             * splits read them one after another: generic loads that may not pass the csf stores between them) */
            const int h = threadIdx.x;
            float ms[DA_MAX_CLUSTER], ls[DA_MAX_CLUSTER];
#pragma unroll
            for (int q = 0; q < DA_MAX_CLUSTER; q++) { /* past the splits: rank 0's, masked (no branch a load) */
                const int qq = q < splits ? q : 0;
                const float mv = cl.map_shared_rank(cpm, qq)[h], lv = cl.map_shared_rank(cpl, qq)[h];
                ms[q] = q < splits ? mv : -INFINITY;
                ls[q] = q < splits ? lv : 0.0f;
            }
            float M = -INFINITY;
#pragma unroll
            for (int q = 0; q < DA_MAX_CLUSTER; q++) M = fmaxf(M, ms[q]);
            float L = 0.0f;
#pragma unroll
            for (int q = 0; q < DA_MAX_CLUSTER; q++)
                if (q < splits) {
                    const float f = ms[q] == -INFINITY ? 0.0f : exp2f(ms[q] - M);
                    csf[q * GP + h] = f;
                    L += f * ls[q];
                }
            csl[h] = L;
        }
        __syncthreads();
        const int r = (int)cl.block_rank();
        for (int idx = r * DA_THREADS + threadIdx.x; idx < nhp * HD; idx += a.csize * DA_THREADS) {
            const int h = idx / HD, d = idx % HD;
            float o[DA_MAX_CLUSTER];
#pragma unroll
            for (int q = 0; q < DA_MAX_CLUSTER; q++) o[q] = q < splits ? cl.map_shared_rank(cpo, q)[idx] : 0.0f;
            float O = 0.0f;
#pragma unroll
            for (int q = 0; q < DA_MAX_CLUSTER; q++)
                if (q < splits) O += csf[q * GP + h] * o[q];
            const float L = csl[h];
            asm volatile("" ::"f"(O)); /* O (every remote read) is computed here, whatever L: see below */
            cu_st(a.out, a.odt, (int64_t)t * a.os + (int64_t)(h0 + h) * HD + d, L > 0.0f ? O / L : 0.0f);
        }
        /* the others are done reading this CTA's shared memory: an execution barrier only. A relaxed arrive
         * orders no memory access, so it relies on every remote read having returned: each one feeds O, which
         * the empty asm above consumes before the arrive (a release here would also wait for the output
         * stores) */
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
        return;
    }
    if (single) return;

    /* the last split of this (token, KV head, pass) to finish merges them all */
    __threadfence();
    __syncthreads();
    int *cnt = a.cnt + (int64_t)t * gridDim.y + blockIdx.y;
    if (threadIdx.x == 0) info[6] = atomicAdd(cnt, 1) == splits - 1;
    __syncthreads();
    if (!info[6]) return;
    __threadfence();
    /* every split's max and sum at once into shared memory (the group buffers are free now),
     * then each output element's splits with their loads in flight together */
    float *sm_m = gacc, *sm_f = gacc + DA_MAX_SPLIT * GP, *sm_l = sm_f + DA_MAX_SPLIT * GP;
    for (int i = threadIdx.x; i < splits * nhp; i += DA_THREADS) {
        const int sp = i / nhp, h = i % nhp;
        const float *ps = a.ws + (((int64_t)t * a.nh + h0 + h) * a.nsplit + sp) * (HD + 2);
        sm_m[sp * GP + h] = __ldcg(ps + HD);
        sm_l[sp * GP + h] = __ldcg(ps + HD + 1);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < splits * nhp; i += DA_THREADS) {
        const int sp = i / nhp, h = i % nhp;
        float M = -INFINITY;
        for (int q = 0; q < splits; q++) M = fmaxf(M, sm_m[q * GP + h]);
        const float ms = sm_m[sp * GP + h];
        sm_f[sp * GP + h] = ms == -INFINITY ? 0.0f : exp2f(ms - M);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nhp * HD; idx += DA_THREADS) {
        const int h = idx / HD, d = idx % HD;
        const float *part = a.ws + ((int64_t)t * a.nh + h0 + h) * a.nsplit * (HD + 2) + d;
        float L = 0.0f, O = 0.0f;
        int sp = 0;
        for (; sp + 4 <= splits; sp += 4) {
            float o[4];
#pragma unroll
            for (int q = 0; q < 4; q++) o[q] = __ldcg(part + (sp + q) * (HD + 2));
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float f = sm_f[(sp + q) * GP + h];
                O += f * o[q];
                L += f * sm_l[(sp + q) * GP + h];
            }
        }
        for (; sp < splits; sp++) {
            const float f = sm_f[sp * GP + h];
            O += f * __ldcg(part + sp * (HD + 2));
            L += f * sm_l[sp * GP + h];
        }
        cu_st(a.out, a.odt, (int64_t)t * a.os + (int64_t)(h0 + h) * HD + d, L > 0.0f ? O / L : 0.0f);
    }
    if (threadIdx.x == 0) *cnt = 0; /* ready for the next launch */
}

/* The split count most CTAs can use: splits fill the GPU twice over when the
 * (token, KV head, pass) CTAs alone would not. It depends on the batch
 * shape only, so the workspace it sizes is the same for a step run eagerly
 * and recorded in a graph with upper-bound lengths. */
static int attn_split_cap(const cu_state *cu, int64_t ctas) {
    const int64_t target = 2 * (int64_t)cu->num_sms;
    if (ctas >= target) return 1;
    int64_t want = (target + ctas - 1) / ctas;
    return (int)(want < DA_MAX_SPLIT ? want : DA_MAX_SPLIT);
}

/* The decode kernel's largest cluster (cu->attn_cmax): 16 CTAs where the GPU schedules a cluster of 16 of the
 * form with the most shared memory (head_dim 256, 8 heads a CTA; its 225 registers, like every form's 255 or fewer
 * at 128 threads, leave 2 CTAs an SM), else the portable 8; VLLM_CUDA_ATTN_CLUSTER=8 keeps 8 (comparisons). A
 * split count from 9 to 16 then merges in the cluster instead of through the workspace (contexts up to 16 x MINK
 * keys: BF16 caches with up to 4 heads a CTA 512 at head_dim 128, 256 at 256; half that with more heads, twice
 * with the FP8 cache). */
template <int HD, int GP>
static size_t da_smem_bytes(int hp, int csize) {
    using SH = da_shape<HD, GP>;
    size_t smem = (size_t)(SH::NGRP * hp * HD + 2 * SH::NGRP * GP) * sizeof(float);
    if (csize > 1) smem += (size_t)(hp * HD + (3 + DA_MAX_CLUSTER) * GP) * sizeof(float); /* the cluster merge's */
    return smem;
}

static void da_probe_clusters(cu_state *cu) {
    cu->attn_cmax = DA_PORTABLE_CLUSTER;
    if (!cu->attn_cluster || cu->attn_climit < 16) return;
    void (*k)(da_args) = k_attn_decode<__nv_bfloat16, 256, 8, true, true>;
    const size_t smem = da_smem_bytes<256, 8>(8, 16);
    if (cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, 16);
    cfg.blockDim = dim3(DA_THREADS);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 16;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, k, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (n >= 1) cu->attn_cmax = 16;
    LOG_D("cuda attention: decode clusters of up to %d CTAs (%d clusters of 16 resident)", cu->attn_cmax, n);
}

/* The split-KV workspace is made once, at its largest: with c = T * nkv *
 * npass CTAs below the 2 * SMs target and cap = ceil(target / c), the
 * partials T * nh * cap <= hp * c * cap < 2 * hp * target rows of
 * (hd + 2) floats, and fewer than target counters; so no step (and no graph
 * recording) ever has to grow it. */
vllm_status cu_attention_reserve(cu_state *cu) {
    const size_t target = 2 * (size_t)cu->num_sms;
    vllm_status st = cu_buf_reserve(cu, &cu->attn_ws, 2 * AT_HP * target * (AT_MAX_HD + 2) * sizeof(float),
                                    "attention (split-KV workspace)");
    if (st == VLLM_OK) st = cu_buf_reserve(cu, &cu->attn_cnt, target * sizeof(int), "attention (split-KV counters)");
    if (st == VLLM_OK && cudaMemsetAsync(cu->attn_cnt.p, 0, cu->attn_cnt.cap, cu->stream) != cudaSuccess) {
        cudaGetLastError();
        st = vt_error(VLLM_ERR_BACKEND, "cuda backend: clearing the split-KV counters failed");
    }
    if (st == VLLM_OK) st = cu_attention_tc_init(cu);
    if (st == VLLM_OK) st = cu_attention_dtc_init(cu);
    if (st == VLLM_OK) da_probe_clusters(cu);
    return st;
}

template <int HD, int GP>
static void da_launch(cu_state *cu, const da_args &a, dim3 grid, bool f8) {
    const size_t smem = da_smem_bytes<HD, GP>(a.hp, a.csize);
    const bool cap = a.cap_inv > 0.0f;
    typedef __nv_bfloat16 B;
    void (*k)(da_args) = a.sinks ? (cap ? k_attn_decode<B, HD, GP, true, true> : k_attn_decode<B, HD, GP, false, true>)
                                 : (cap ? k_attn_decode<B, HD, GP, true, false> : k_attn_decode<B, HD, GP, false, false>);
    if (f8) k = k_attn_decode<uint8_t, HD, GP, false, false>; /* cu_attention sends FP8 with a softcap or sinks to
                                                                  the generic kernel */
    if (a.csize > DA_PORTABLE_CLUSTER && !cu_nonportable_cluster(cu, (const void *)k, "attention")) return;
    cu_launch_cluster(cu, "attention", true, k, grid, dim3(DA_THREADS), smem, a.csize, a); /* (csize 1: no clusters) */
}

template <int HD>
static void da_dispatch(cu_state *cu, const da_args &a, dim3 grid, bool f8) {
    if (a.hp <= 1) da_launch<HD, 1>(cu, a, grid, f8);
    else if (a.hp <= 2) da_launch<HD, 2>(cu, a, grid, f8);
    else if (a.hp <= 4) da_launch<HD, 4>(cu, a, grid, f8);
    else da_launch<HD, 8>(cu, a, grid, f8);
}

/* MINK of the kernel da_dispatch picks (keys per CTA iteration). */
static int da_min_keys(const cu_state *cu, int hd, int hp, bool f8) {
    if (cu->attn_min_keys > 0) return cu->attn_min_keys;
    int lpk = hd / 8, ngrp = DA_WARPS * (32 / lpk), u = (hp > 4 ? 2 : 4) * (f8 ? 2 : 1);
    return ngrp * u;
}

/* The fields the generic and the decode kernels' arguments share (A: at_args or da_args). */
template <typename A>
static void attn_fill_common(A &a, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                             const attn_params *p, tensor *out, int S, int T, int nh, int group, int hp, int nsplit,
                             float *ws) {
    a.q = q->data;
    a.qdt = q->dtype;
    a.qs = tensor_row_stride(q);
    cu_attn_fill_paged(a, k_cache, v_cache, m, p);
    a.S = S;
    a.T = T;
    a.nh = nh;
    a.group = group;
    a.hp = hp;
    a.window = p->sliding_window;
    a.sinks = p->sinks ? p->sinks->data : NULL;
    a.sdt = p->sinks ? (int)p->sinks->dtype : (int)DTYPE_F32;
    a.nsplit = nsplit;
    a.out = out->data;
    a.odt = out->dtype;
    a.os = tensor_row_stride(out);
    a.ws = ws;
}

/* The generic kernel for head_dim hd, softcap on or off, sinks or not (SINK). */
template <typename KT, bool SINK>
static void (*at_kernel(int hd, bool cap))(at_args) {
    if (hd <= 64) return cap ? k_attention<KT, 2, true, SINK> : k_attention<KT, 2, false, SINK>;
    if (hd <= 128) return cap ? k_attention<KT, 4, true, SINK> : k_attention<KT, 4, false, SINK>;
    return cap ? k_attention<KT, 8, true, SINK> : k_attention<KT, 8, false, SINK>;
}

// q (T, nh*hd), caches (num_blocks, block_size, nkv, hd) -> out (T, nh*hd)
void cu_attention(backend *be, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                  const attn_params *p, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!m || !p || m->block_size <= 0 || m->num_tokens < 0 || m->num_seqs < 0 || m->max_blocks_per_seq < 0) {
        cu_fail(cu, "attention: bad attention metadata");
        return;
    }
    const int nh = p->num_heads, nkv = p->num_kv_heads, hd = p->head_dim, bs = m->block_size;
    if (nh <= 0 || nkv <= 0 || nh % nkv || hd <= 0 || hd % 2 || hd > AT_MAX_HD || p->sliding_window < 0) {
        cu_fail(cu, "attention: bad heads %d / kv heads %d / head_dim %d / sliding_window %d "
                "(need num_heads %% num_kv_heads == 0, head_dim even and <= %d)",
                nh, nkv, hd, p->sliding_window, AT_MAX_HD);
        return;
    }
    if (!(p->softcap >= 0.0f) || isinf(p->softcap)) {
        cu_fail(cu, "attention: softcap %g must be 0 (off) or positive and finite", (double)p->softcap);
        return;
    }
    if (p->sinks && !cu_check_vec(cu, "attention", "sinks", p->sinks, CU_FLOAT, nh)) return;
    const int64_t T = m->num_tokens, S = m->num_seqs;
    if (!cu_check_mat(cu, "attention", "q", q, CU_ACT, T, (int64_t)nh * hd) ||
        !cu_check_mat(cu, "attention", "out", out, CU_ACT, T, (int64_t)nh * hd) ||
        !cu_cache_check(cu, "attention", "k_cache", k_cache, bs, nkv, hd) ||
        !cu_cache_check(cu, "attention", "v_cache", v_cache, bs, nkv, hd) ||
        !cu_check_vec(cu, "attention", "query_start_loc", &m->query_start_loc, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, "attention", "seq_lens", &m->seq_lens, CU_DT(DTYPE_I32), -1) ||
        !cu_check_mat(cu, "attention", "block_tables", &m->block_tables, CU_DT(DTYPE_I32), -1, m->max_blocks_per_seq))
        return;
    if (v_cache->shape[0] != k_cache->shape[0] || v_cache->dtype != k_cache->dtype) {
        cu_fail(cu, "attention: k_cache and v_cache have different block counts or dtypes");
        return;
    }
    if (tensor_numel(&m->query_start_loc) < S + 1 || tensor_numel(&m->seq_lens) < S || cu_rows(&m->block_tables) < S) {
        cu_fail(cu, "attention: metadata arrays are shorter than num_seqs %lld", (long long)S);
        return;
    }
    if (T == 0) return;
    if (S == 0 || T > INT32_MAX / 2 || m->max_blocks_per_seq == 0) {
        cu_fail(cu, "attention: %lld tokens over %lld sequences with %d block table columns", (long long)T,
                (long long)S, m->max_blocks_per_seq);
        return;
    }
    const int group = nh / nkv;
    /* the FP8 cache: the decode and tensor-core kernels' FP8 instances have no softcap and no sinks */
    const bool f8 = k_cache->dtype == DTYPE_F8_E4M3;
    const bool decode = (hd == 64 || hd == 128 || hd == 256) && !(f8 && (p->softcap > 0.0f || p->sinks));
    /* query heads a CTA: up to AT_HP (their KV head's keys read once for them all); a decode batch whose CTAs stay
     * below the split target (attn_split_cap) even with DA_SMALL_HP heads a CTA takes at most that many: twice the
     * CTAs for 8-head groups, each with half the registers and twice the keys an iteration, so fewer splits (H100,
     * session 35, ms a batch-1 decode step: Qwen3-30B-A3B 3.399 -> 3.282, Qwen3.5-35B-A3B 3.303 -> 3.086, gpt-oss-20b
     * 3.150 -> 3.127). A batch so small that even one head a CTA leaves DA_ONE_HP_CAP splits or more (batch 1 with
     * up to 32 query heads) takes one (H100, ms a batch-1 step, sessions 36 / 37, 4 -> 1 head a CTA: Qwen3-30B-A3B
     * 3.264 -> 3.194, Qwen3.5-35B-A3B 3.078 -> 3.046, Qwen3-8B 5.554 -> 5.465 / 5.548 -> 5.461, Gemma-3-12B 8.566 ->
     * 8.494, Qwen3-0.6B 0.872 -> 0.840 / 0.846 -> 0.853). VLLM_CUDA_ATTN_HP=N pins the most at N (comparisons). */
    int hp = group < AT_HP ? group : AT_HP;
    if (cu->attn_hp > 0) hp = group < cu->attn_hp ? group : cu->attn_hp;
    else if (decode && hp > 1 && attn_split_cap(cu, T * nh) >= DA_ONE_HP_CAP) hp = 1;
    else if (decode && hp > DA_SMALL_HP && attn_split_cap(cu, T * nkv * ((group + DA_SMALL_HP - 1) / DA_SMALL_HP)) > 1)
        hp = DA_SMALL_HP;
    const int npass = (group + hp - 1) / hp;
    if ((int64_t)nkv * npass > 65535) {
        cu_fail(cu, "attention: %d kv heads x %d head passes exceed the grid", nkv, npass);
        return;
    }
    const int64_t ctas = T * nkv * npass;
    const int cap = attn_split_cap(cu, ctas);
    /* split the keys (device-side, each token to its own length; max_seq_len bounds them) */
    const int64_t max_len = m->max_seq_len > 0 ? m->max_seq_len : (int64_t)m->max_blocks_per_seq * bs;
    int nsplit = 1;
    if (cap > 1) {
        if (decode) {
            int64_t by_len = (max_len + da_min_keys(cu, hd, hp, f8) - 1) / da_min_keys(cu, hd, hp, f8);
            nsplit = (int)(by_len < cap ? by_len : cap);
            if (cu->attn_splits > 0 && nsplit > cu->attn_splits) nsplit = cu->attn_splits; /* comparisons */
        } else if (max_len > 256) {
            int64_t by_len = (max_len + 127) / 128;
            nsplit = (int)(by_len < cap ? by_len : cap);
        }
        if (nsplit < 1) nsplit = 1;
    }
    /* the decode kernel's clusters: cu->attn_cmax CTAs (the splits cut to a multiple of it), or all the splits */
    int csize = 1;
    if (decode && nsplit > 1 && cu->attn_cluster) {
        const int cmax = cu->attn_cmax > 1 ? cu->attn_cmax : DA_PORTABLE_CLUSTER;
        if (nsplit >= cmax) {
            nsplit -= nsplit % cmax;
            csize = cmax;
        } else {
            csize = nsplit;
        }
    }
    float *ws = NULL;
    int *cnt = NULL;
    if (cap > 1) {
        /* sized by the cap, not nsplit: the same for any max_seq_len */
        size_t bytes = (size_t)T * nh * cap * (hd + 2) * sizeof(float);
        size_t cbytes = (size_t)ctas * sizeof(int);
        size_t had = cu->attn_cnt.cap;
        if (cu_buf_reserve(cu, &cu->attn_ws, bytes, "attention (split-KV workspace)") != VLLM_OK ||
            cu_buf_reserve(cu, &cu->attn_cnt, cbytes, "attention (split-KV counters)") != VLLM_OK)
            return; /* recorded by cu_buf_reserve */
        if (cu->attn_cnt.cap != had &&
            !cu_ok(cu, cudaMemsetAsync(cu->attn_cnt.p, 0, cu->attn_cnt.cap, cu->stream), "attention",
                   "clearing the split-KV counters"))
            return;
        ws = (float *)cu->attn_ws.p;
        cnt = (int *)cu->attn_cnt.p;
    }
    dim3 grid((unsigned)T, (unsigned)(nkv * npass), (unsigned)nsplit);
    const bool tc = decode && cu_attention_tc_fits(cu, q, out, hd, m->max_query_len);
    if (tc) cu_attention_tc(cu, q, k_cache, v_cache, m, p, out); /* the prefill sequences */
    if (decode && cap == 1 && cu_attention_dtc_fits(cu, q, out, k_cache, v_cache, p)) {
        /* enough (token, KV head) pairs to fill the GPU unsplit: the tensor cores (ops_attention_dtc.cu) */
        cu_attention_dtc(cu, q, k_cache, v_cache, m, p, out, tc);
        return;
    }
    if (decode) {
        da_args d;
        attn_fill_common(d, q, k_cache, v_cache, m, p, out, (int)S, (int)T, nh, group, hp, nsplit, ws);
        d.tc_min_q = tc ? TC_MIN_Q : 0;
        d.csize = csize;
        d.q16 = q->dtype == DTYPE_BF16 && (uintptr_t)q->data % 16 == 0 && tensor_row_stride(q) % 8 == 0;
        d.min_keys = da_min_keys(cu, hd, hp, f8);
        d.qscale = (p->softcap > 0.0f ? p->scale : p->scale * 1.4426950408889634f) * d.kscale;
        d.cap_inv = p->softcap > 0.0f ? 1.0f / p->softcap : 0.0f;
        d.cap_log2 = p->softcap * 1.4426950408889634f;
        d.cnt = cnt;
        d.err = cu->derr_dev;
        if (hd == 64) da_dispatch<64>(cu, d, grid, f8);
        else if (hd == 128) da_dispatch<128>(cu, d, grid, f8);
        else da_dispatch<256>(cu, d, grid, f8);
        return;
    }
    at_args a;
    attn_fill_common(a, q, k_cache, v_cache, m, p, out, (int)S, (int)T, nh, group, hp, nsplit, ws);
    a.hd = hd;
    a.npass = npass;
    a.scale = p->scale * a.kscale;
    a.softcap = p->softcap;
    a.err = cu->derr_dev;
    size_t smem = at_smem_bytes(hp, hd);
    const bool capped = a.softcap > 0.0f;
    void (*kern)(at_args) = f8 ? (a.sinks ? at_kernel<uint8_t, true>(hd, capped) : at_kernel<uint8_t, false>(hd, capped))
                               : (a.sinks ? at_kernel<__nv_bfloat16, true>(hd, capped)
                                          : at_kernel<__nv_bfloat16, false>(hd, capped));
    cu_launch(cu, "attention", true, kern, grid, dim3(AT_THREADS), smem, a);
    if (nsplit > 1)
        cu_launch(cu, "attention combine", true, k_attn_combine, dim3(cu_grid(T * nh, 1)), dim3(128), 0,
                  (const float *)a.ws, (int)T, nh, hd, nsplit, out->data, (int)out->dtype, a.os);
}
