/*
 * ops_attention.cu: the CUDA paged KV cache write and paged attention.
 *
 * Caches are (num_blocks, block_size, nkv, head_dim) BF16; token slot s
 * lives at block s / block_size, offset s % block_size, i.e. at row s of the
 * cache viewed as (num_blocks * block_size, nkv * head_dim) (vLLM's layout,
 * vllm/v1/attention/backends/flash_attn.py).
 *
 * Attention is flash-attention style (online softmax in f32, no score
 * matrix in memory) over the block tables, for any mix of prefill chunks
 * and decodes (vLLM v1's flattened batch, as its unified attention kernel,
 * vllm/v1/attention/ops/triton_unified_attention.py). One CTA of 4 warps
 * takes one query token and up to AT_HP query heads of one KV head (GQA:
 * the heads of a group share each K/V load) and one segment of the keys
 * that token sees (causal, sliding window). Its warps take 32 keys at a
 * time: lane j scores key j against every head, the warp updates each
 * head's running max and sum, then the lanes split head_dim to accumulate
 * P V. The warps' states are merged in shared memory at the end.
 *
 * Split-KV (flash decoding): when the batch has too few (token, KV head)
 * pairs to fill the GPU and contexts are long, the keys are cut into
 * nsplit segments run by separate CTAs; each writes its unnormalised
 * output with its max and sum, and k_attn_combine merges them (as
 * triton_unified_attention.py's 3-D kernel and reduce_segments).
 */
#include "cuda/cuda_internal.h"

#define AT_WARPS 4
#define AT_THREADS (AT_WARPS * 32)
#define AT_HP 8          /* query heads per CTA at most */
#define AT_MAX_HD 256    /* head_dim supported (32 * the largest NACC) */
#define AT_MAX_SPLIT 32

/* ---- kv_write ---- */

// k, v (T, nkv*hd) -> caches (num_blocks, block_size, nkv, hd) at slot_mapping (T)
__global__ void k_kv_write(const void *k, const void *v, int dt, int64_t ks, int64_t vs, __nv_bfloat16 *kc,
                           __nv_bfloat16 *vc, const int64_t *slots, int64_t T, int64_t kvd, int64_t num_slots,
                           cu_dev_err *err) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int64_t s = slots[t];
        if (s < 0) continue; /* padding */
        if (s >= num_slots) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_KV_SLOT, t, s, num_slots);
            continue;
        }
        for (int64_t i = threadIdx.x; i < kvd; i += blockDim.x) {
            kc[s * kvd + i] = __float2bfloat16(cu_ld(k, dt, t * ks + i));
            vc[s * kvd + i] = __float2bfloat16(cu_ld(v, dt, t * vs + i));
        }
    }
}

/* Checks a paged cache: BF16 (num_blocks, block_size, nkv, head_dim). */
static bool cache_check(cu_state *cu, const char *op, const char *arg, const tensor *c, int block_size, int nkv,
                        int hd) {
    if (!cu_check_vec(cu, op, arg, c, CU_DT(DTYPE_BF16), -1)) return false;
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
    if (!cache_check(cu, "kv_write", "k_cache", k_cache, m->block_size, nkv, hd) ||
        !cache_check(cu, "kv_write", "v_cache", v_cache, m->block_size, nkv, hd))
        return;
    if (v_cache->shape[0] != k_cache->shape[0]) {
        cu_fail(cu, "kv_write: k_cache and v_cache have different block counts");
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
    k_kv_write<<<cu_grid(T, 1), 256, 0, cu->stream>>>(k->data, v->data, k->dtype, tensor_row_stride(k),
                                                      tensor_row_stride(v), (__nv_bfloat16 *)k_cache->data,
                                                      (__nv_bfloat16 *)v_cache->data,
                                                      (const int64_t *)m->slot_mapping.data, T, kvd,
                                                      k_cache->shape[0] * m->block_size, cu->derr_dev);
    cu_launched(cu, "kv_write");
}

/* ---- attention ---- */

typedef struct at_args {
    const void *q;
    int qdt;
    int64_t qs;
    const __nv_bfloat16 *kc, *vc;
    int64_t kvd;            /* elements between consecutive cache slots (nkv * hd) */
    int64_t num_blocks;
    int bs;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int max_blocks;
    int S, T, nh, hd, group, hp, npass, window, nsplit;
    float scale;
    void *out;
    int odt;
    int64_t os;
    float *ws;              /* nsplit > 1: (T, nh, nsplit, hd + 2) partials */
    cu_dev_err *err;
} at_args;

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* grid (T, nkv * npass, nsplit), AT_THREADS threads, dynamic shared memory
 * of at_smem_floats(hp, hd) floats. head_dim <= 32 * NACC. */
template <int NACC>
__global__ void __launch_bounds__(AT_THREADS) k_attention(at_args a) {
    extern __shared__ float smem[];
    const int hd = a.hd, hp = a.hp;
    float *qsm = smem;                          /* (hp, hd) */
    float *pw = qsm + hp * hd;                  /* (AT_WARPS, AT_HP, 32) probabilities of a chunk */
    float *wm = pw + AT_WARPS * AT_HP * 32;     /* (AT_WARPS, AT_HP) */
    float *wl = wm + AT_WARPS * AT_HP;          /* (AT_WARPS, AT_HP) */
    float *wacc = wl + AT_WARPS * AT_HP;        /* (AT_WARPS, hp, hd) */
    __shared__ int meta[4];                     /* seq, ok */

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
            const __nv_bfloat16 *kp = a.kc + slot * a.kvd + (int64_t)kvh * hd;
            if (vec8) {
                for (int d = 0; d < hd; d += 8) {
                    uint4 raw = *(const uint4 *)(kp + d);
                    const __nv_bfloat162 *k2 = (const __nv_bfloat162 *)&raw;
                    float kf[8];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float2 f = __bfloat1622float2(k2[i]);
                        kf[2 * i] = f.x;
                        kf[2 * i + 1] = f.y;
                    }
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
                    float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)(kp + d));
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
                float x = valid ? sc[h] * a.scale : -INFINITY;
                float cm = warp_max(x);
                float m_new = fmaxf(m[h], cm);
                float p = 0.0f, corr = 1.0f;
                if (m_new != -INFINITY) {
                    p = valid ? expf(x - m_new) : 0.0f;
                    corr = m[h] == -INFINITY ? 0.0f : expf(m[h] - m_new);
                }
                l[h] = l[h] * corr + warp_sum_f(p);
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
            const __nv_bfloat16 *vp = a.vc + sj * a.kvd + (int64_t)kvh * hd;
            float vv[NACC];
#pragma unroll
            for (int e = 0; e < NACC; e++) {
                int d = lane + 32 * e;
                vv[e] = d < hd ? __bfloat162float(vp[d]) : 0.0f;
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
        int head = h0 + h;
        if (a.nsplit == 1) {
            cu_st(a.out, a.odt, (int64_t)t * a.os + (int64_t)head * hd + d, L > 0.0f ? O / L : 0.0f);
        } else {
            float *part = a.ws + (((int64_t)t * a.nh + head) * a.nsplit + split) * (hd + 2);
            part[d] = O;
            if (d == 0) {
                part[hd] = M;
                part[hd + 1] = L;
            }
        }
    }
}

/* grid (T * nh): merges the nsplit partial results of each (token, head). */
__global__ void k_attn_combine(const float *ws, int T, int nh, int hd, int nsplit, void *out, int odt, int64_t os) {
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
    const int64_t T = m->num_tokens, S = m->num_seqs;
    if (!cu_check_mat(cu, "attention", "q", q, CU_ACT, T, (int64_t)nh * hd) ||
        !cu_check_mat(cu, "attention", "out", out, CU_ACT, T, (int64_t)nh * hd) ||
        !cache_check(cu, "attention", "k_cache", k_cache, bs, nkv, hd) ||
        !cache_check(cu, "attention", "v_cache", v_cache, bs, nkv, hd) ||
        !cu_check_vec(cu, "attention", "query_start_loc", &m->query_start_loc, CU_DT(DTYPE_I32), -1) ||
        !cu_check_vec(cu, "attention", "seq_lens", &m->seq_lens, CU_DT(DTYPE_I32), -1) ||
        !cu_check_mat(cu, "attention", "block_tables", &m->block_tables, CU_DT(DTYPE_I32), -1, m->max_blocks_per_seq))
        return;
    if (v_cache->shape[0] != k_cache->shape[0]) {
        cu_fail(cu, "attention: k_cache and v_cache have different block counts");
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
    const int hp = group < AT_HP ? group : AT_HP;
    const int npass = (group + hp - 1) / hp;
    if ((int64_t)nkv * npass > 65535) {
        cu_fail(cu, "attention: %d kv heads x %d head passes exceed the grid", nkv, npass);
        return;
    }
    /* split the keys when the (token, kv head) CTAs would not fill the GPU twice over */
    int nsplit = 1;
    int64_t ctas = T * nkv * npass;
    if (m->max_seq_len > 256 && ctas < 2 * (int64_t)cu->num_sms) {
        int64_t want = (2 * (int64_t)cu->num_sms + ctas - 1) / ctas;
        int64_t by_len = ((int64_t)m->max_seq_len + 127) / 128;
        nsplit = (int)(want < by_len ? want : by_len);
        if (nsplit > AT_MAX_SPLIT) nsplit = AT_MAX_SPLIT;
        if (nsplit < 1) nsplit = 1;
    }
    at_args a;
    a.q = q->data;
    a.qdt = q->dtype;
    a.qs = tensor_row_stride(q);
    a.kc = (const __nv_bfloat16 *)k_cache->data;
    a.vc = (const __nv_bfloat16 *)v_cache->data;
    a.kvd = (int64_t)nkv * hd;
    a.num_blocks = k_cache->shape[0];
    a.bs = bs;
    a.qsl = (const int32_t *)m->query_start_loc.data;
    a.seq_lens = (const int32_t *)m->seq_lens.data;
    a.bt = (const int32_t *)m->block_tables.data;
    a.bt_stride = tensor_row_stride(&m->block_tables);
    a.max_blocks = m->max_blocks_per_seq;
    a.S = (int)S;
    a.T = (int)T;
    a.nh = nh;
    a.hd = hd;
    a.group = group;
    a.hp = hp;
    a.npass = npass;
    a.window = p->sliding_window;
    a.nsplit = nsplit;
    a.scale = p->scale;
    a.out = out->data;
    a.odt = out->dtype;
    a.os = tensor_row_stride(out);
    a.ws = NULL;
    a.err = cu->derr_dev;
    if (nsplit > 1) {
        size_t bytes = (size_t)T * nh * nsplit * (hd + 2) * sizeof(float);
        if (cu_buf_reserve(cu, &cu->attn_ws, bytes, "split-KV attention") != VLLM_OK) {
            cu_fail(cu, "attention: %s", vllm_last_error());
            return;
        }
        a.ws = (float *)cu->attn_ws.p;
    }
    dim3 grid((unsigned)T, (unsigned)(nkv * npass), (unsigned)nsplit);
    size_t smem = at_smem_bytes(hp, hd);
    if (hd <= 64) k_attention<2><<<grid, AT_THREADS, smem, cu->stream>>>(a);
    else if (hd <= 128) k_attention<4><<<grid, AT_THREADS, smem, cu->stream>>>(a);
    else k_attention<8><<<grid, AT_THREADS, smem, cu->stream>>>(a);
    if (!cu_launched(cu, "attention")) return;
    if (nsplit > 1) {
        k_attn_combine<<<cu_grid(T * nh, 1), 128, 0, cu->stream>>>(a.ws, (int)T, nh, hd, nsplit, out->data,
                                                                   out->dtype, a.os);
        cu_launched(cu, "attention combine");
    }
}
