/*
 * ops_attention.c: the CPU paged KV cache write and paged attention.
 *
 * Caches are (num_blocks, block_size, nkv, head_dim) F32, or F8_E4M3 (the FP8 KV cache, --kv-cache-dtype fp8:
 * kv_write stores e4m3(x / qscale), saturating at +-448 as vLLM's scaled_fp8_conversion; attention reads
 * e4m3 * qscale, ATT_CHUNK keys decoded to F32 at a time, then the F32 arithmetic below, so the results equal
 * those over an F32 cache holding the decoded values); token slot s lives
 * at block s / block_size, offset s % block_size, i.e. at row s of the
 * cache viewed as (num_blocks * block_size, nkv * head_dim).
 *
 * Attention runs one work item per (query token, head), or per (query
 * token, group of heads sharing a kv head) when there are enough tokens: it
 * walks the keys the token may see through its sequence's block table,
 * ATT_CHUNK keys at a time, with an online (running max) softmax in f32, so
 * no scratch memory grows with the context length. A softcap (Gemma 2)
 * bends each score s = q.k * scale to tanh(s / cap) * cap first. An
 * attention sink (gpt-oss) joins the running max and the denominator once
 * the keys are done, with no value: transformers' eager_attention_forward
 * appends sink_h as an extra logit, subtracts the max over all of them and
 * drops the sink's column after the softmax.
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "tensor/fp8.h"

#define ATT_CHUNK 32         /* keys scored per online-softmax step */
#define ATT_MAX_PASS 16      /* q heads of one kv group handled in one pass over the keys */
#define ATT_ACC_FLOATS 4096  /* their accumulators (on the stack) */
_Static_assert(CPU_MAX_HEAD_DIM <= ATT_ACC_FLOATS, "one head's accumulator must fit");

/* Checks a paged cache: F32 or F8_E4M3 (num_blocks, block_size, nkv, head_dim), an F8 one's qscale positive and
 * finite (or 0: 1). */
static bool cache_check(cpu_state *cpu, const char *op, const char *arg, const tensor *c, int block_size,
                        int nkv, int hd) {
    if (!cpu_check_vec(cpu, op, arg, c, c && c->dtype == DTYPE_F8_E4M3 ? DTYPE_F8_E4M3 : DTYPE_F32, -1)) return false;
    if (c->dtype == DTYPE_F8_E4M3 && !(c->qscale >= 0.0f && isfinite(c->qscale))) {
        cpu_fail(cpu, "%s: %s has scale %g", op, arg, (double)c->qscale);
        return false;
    }
    if (c->ndim != 4 || c->shape[1] != block_size || c->shape[2] != nkv || c->shape[3] != hd) {
        cpu_fail(cpu, "%s: %s must be (num_blocks, %d, %d, %d), got ndim %d (.., %lld, %lld, %lld)", op, arg,
                 block_size, nkv, hd, c->ndim, (long long)c->shape[1], (long long)c->shape[2],
                 (long long)c->shape[3]);
        return false;
    }
    return true;
}

/* ---- kv_write ---- */

typedef struct kvw_ctx {
    const float *k, *v;
    int64_t ks, vs;
    void *kc, *vc;
    bool fp8;         /* E4M3 caches: e4m3(x / scale) */
    float kscale, vscale;
    const int64_t *slots;
    int64_t kvd;  /* nkv * head_dim */
} kvw_ctx;

/* The scale of an F8_E4M3 cache (qscale, 0 meaning 1). */
static float cache_scale(const tensor *c) { return c->qscale > 0.0f ? c->qscale : 1.0f; }

static void kvw_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const kvw_ctx *c = ctx;
    for (int64_t t = t0; t < t1; t++) {
        int64_t s = c->slots[t];
        if (s < 0) continue;  /* padding */
        if (c->fp8) {
            uint8_t *kd = (uint8_t *)c->kc + s * c->kvd, *vd = (uint8_t *)c->vc + s * c->kvd;
            const float *kx = c->k + t * c->ks, *vx = c->v + t * c->vs;
            for (int64_t i = 0; i < c->kvd; i++) {
                kd[i] = fp8_e4m3_from_f32(kx[i] / c->kscale);
                vd[i] = fp8_e4m3_from_f32(vx[i] / c->vscale);
            }
            continue;
        }
        memcpy((float *)c->kc + s * c->kvd, c->k + t * c->ks, (size_t)c->kvd * sizeof(float));
        memcpy((float *)c->vc + s * c->kvd, c->v + t * c->vs, (size_t)c->kvd * sizeof(float));
    }
}

// k, v (T, nkv*hd) -> caches (num_blocks, block_size, nkv, hd) at slot_mapping (T)
void cpu_kv_write(backend *be, const tensor *k, const tensor *v, tensor *k_cache, tensor *v_cache,
                  const attn_meta *m) {
    cpu_state *cpu = cpu_of(be);
    if (!m || m->block_size <= 0 || m->num_tokens < 0) {
        cpu_fail(cpu, "kv_write: bad attention metadata");
        return;
    }
    if (!k_cache || !v_cache || k_cache->ndim != 4) {
        cpu_fail(cpu, "kv_write: caches must be 4-D (num_blocks, block_size, nkv, head_dim)");
        return;
    }
    int nkv = (int)k_cache->shape[2], hd = (int)k_cache->shape[3];
    if (!cache_check(cpu, "kv_write", "k_cache", k_cache, m->block_size, nkv, hd) ||
        !cache_check(cpu, "kv_write", "v_cache", v_cache, m->block_size, nkv, hd))
        return;
    if (v_cache->shape[0] != k_cache->shape[0] || v_cache->dtype != k_cache->dtype) {
        cpu_fail(cpu, "kv_write: k_cache and v_cache have different block counts or dtypes");
        return;
    }
    int64_t T = m->num_tokens, kvd = (int64_t)nkv * hd;
    if (!cpu_check_mat(cpu, "kv_write", "k", k, DTYPE_F32, T, kvd) ||
        !cpu_check_mat(cpu, "kv_write", "v", v, DTYPE_F32, T, kvd) ||
        !cpu_check_vec(cpu, "kv_write", "slot_mapping", &m->slot_mapping, DTYPE_I64, -1))
        return;
    if (tensor_numel(&m->slot_mapping) < T) {
        cpu_fail(cpu, "kv_write: slot_mapping has %lld entries for %lld tokens",
                 (long long)tensor_numel(&m->slot_mapping), (long long)T);
        return;
    }
    const int64_t *slots = m->slot_mapping.data;
    int64_t num_slots = k_cache->shape[0] * m->block_size;
    for (int64_t t = 0; t < T; t++) {
        if (slots[t] >= num_slots) {
            cpu_fail(cpu, "kv_write: slot %lld of token %lld is past the cache's %lld slots",
                     (long long)slots[t], (long long)t, (long long)num_slots);
            return;
        }
    }
    kvw_ctx c = {k->data, v->data, tensor_row_stride(k), tensor_row_stride(v),
                 k_cache->data, v_cache->data, k_cache->dtype == DTYPE_F8_E4M3, cache_scale(k_cache),
                 cache_scale(v_cache), slots, kvd};
    tp_run_cost(cpu->pool, T, 2.0 * (double)kvd, kvw_task, &c);
}

/* ---- attention ---- */

typedef struct attn_ctx {
    const float *q;
    int64_t qs;
    const void *kc, *vc;    /* F32, or E4M3 bytes when fp8 */
    bool fp8;
    float kscale, vscale;   /* fp8: what the decoded values multiply */
    const float *e4m3;      /* fp8: fp8_e4m3_table() */
    float *dec;             /* fp8: (threads, 2, ATT_CHUNK, hd) decoded keys and values */
    int64_t kvd;            /* elements between consecutive cache slots (nkv * hd) */
    int block_size;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int num_seqs, nh, group, hd, window;
    int pass;               /* q heads per work item (divides group) */
    float scale;
    float softcap;          /* > 0: scores become tanh(s / softcap) * softcap */
    const void *sinks;      /* (nh) of sinks_dt, or NULL */
    dtype sinks_dt;
    float *out;
    int64_t os;
} attn_ctx;

/* The sequence that owns query token t: the last s with qsl[s] <= t. */
static int attn_seq_of(const attn_ctx *c, int64_t t) {
    int lo = 0, hi = c->num_seqs - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (c->qsl[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* a[0 .. hd) += sum over j < n of p[j] * v[j][0 .. hd), in j order for each
 * column; CPU_LANES columns at a time stay in registers across the keys. */
CPU_INLINE void attn_accumulate(float *a, const float *p, const float *const *v, int n, int hd) {
    int d0 = 0;
    for (; d0 + CPU_LANES <= hd; d0 += CPU_LANES) {
        float r[CPU_LANES];
        for (int e = 0; e < CPU_LANES; e++) r[e] = a[d0 + e];
        for (int j = 0; j < n; j++) {
            const float pj = p[j], *vj = v[j] + d0;
#pragma GCC unroll 1  /* keeps gcc from unrolling this before it vectorises it */
            for (int e = 0; e < CPU_LANES; e++) r[e] = CPU_FMA(pj, vj[e], r[e]);
        }
        for (int e = 0; e < CPU_LANES; e++) a[d0 + e] = r[e];
    }
    for (; d0 + 8 <= hd; d0 += 8) { /* small heads (head_dim 8, 24, ...) */
        float r[8];
        for (int e = 0; e < 8; e++) r[e] = a[d0 + e];
        for (int j = 0; j < n; j++) {
            const float pj = p[j], *vj = v[j] + d0;
            for (int e = 0; e < 8; e++) r[e] = CPU_FMA(pj, vj[e], r[e]);
        }
        for (int e = 0; e < 8; e++) a[d0 + e] = r[e];
    }
    for (; d0 < hd; d0++) {
        float r = a[d0];
        for (int j = 0; j < n; j++) r = CPU_FMA(p[j], v[j][d0], r);
        a[d0] = r;
    }
}

/* For the np query heads h0 .. h0 + np - 1 of one token (all reading kv head
 * kvh): out_h = softmax over keys k0..k1 of (q_h . k) * scale, applied to v.
 * The keys of a chunk are scored and accumulated for every head while they
 * are in L1. Each head's arithmetic is the same whatever np is. */
static void attn_heads(const attn_ctx *c, const float *q, const int32_t *blocks, int h0, int np, int64_t k0,
                       int64_t k1, float *out, float *kdec, float *vdec) {
    const int kvh = h0 / c->group;
    const int hd = c->hd, bs = c->block_size;
    float acc[ATT_ACC_FLOATS];  /* np * hd */
    float mx[ATT_MAX_PASS], l[ATT_MAX_PASS];
    for (int i = 0; i < np * hd; i++) acc[i] = 0.0f;
    for (int h = 0; h < np; h++) {
        mx[h] = -INFINITY;
        l[h] = 0.0f;
    }
    int64_t blk = k0 / bs;
    int off = (int)(k0 % bs);
    for (int64_t key = k0; key <= k1;) {
        int n = k1 - key + 1 < ATT_CHUNK ? (int)(k1 - key + 1) : ATT_CHUNK;
        const float *kp[ATT_CHUNK], *vp[ATT_CHUNK];
        for (int j = 0; j < n; j++) {
            int64_t slot = (int64_t)blocks[blk] * bs + off, at = slot * c->kvd + (int64_t)kvh * hd;
            if (c->fp8) { /* the chunk's keys and values decoded */
                const uint8_t *kq = (const uint8_t *)c->kc + at, *vq = (const uint8_t *)c->vc + at;
                float *kd = kdec + (int64_t)j * hd, *vd = vdec + (int64_t)j * hd;
                for (int d = 0; d < hd; d++) kd[d] = c->e4m3[kq[d]] * c->kscale, vd[d] = c->e4m3[vq[d]] * c->vscale;
                kp[j] = kd, vp[j] = vd;
            } else {
                kp[j] = (const float *)c->kc + at;
                vp[j] = (const float *)c->vc + at;
            }
            if (++off == bs) {
                off = 0;
                blk++;
            }
        }
        for (int h = 0; h < np; h++) {
            const float *qh = q + (int64_t)h * hd;
            float *a = acc + h * hd;
            /* scores of the chunk and their max */
            float sc[ATT_CHUNK], cm = -INFINITY;
            for (int j = 0; j < n; j++) {
                float s = cpu_dot(qh, kp[j], hd) * c->scale;
                if (c->softcap > 0.0f) s = tanhf(s / c->softcap) * c->softcap; /* as transformers' eager attention */
                sc[j] = s;
                cm = sc[j] > cm ? sc[j] : cm;
            }
            if (cm > mx[h]) {  /* new running max: rescale what was accumulated */
                if (mx[h] != -INFINITY) {
                    float corr = cpu_expf(mx[h] - cm);
                    l[h] *= corr;
                    for (int d = 0; d < hd; d++) a[d] *= corr;
                }
                mx[h] = cm;
            }
            float lsum = 0.0f;
            for (int j = 0; j < n; j++) sc[j] = cpu_expf(sc[j] - mx[h]);
            for (int j = 0; j < n; j++) lsum += sc[j];
            l[h] += lsum;
            attn_accumulate(a, sc, vp, n, hd);
        }
        key += n;
    }
    if (c->sinks) {
        /* the sink: one more logit in the max and the denominator, with no value */
        for (int h = 0; h < np; h++) {
            const float sk = cpu_load(c->sinks, c->sinks_dt, h0 + h);
            float *a = acc + h * hd;
            if (sk > mx[h]) {
                float corr = mx[h] == -INFINITY ? 0.0f : cpu_expf(mx[h] - sk);
                l[h] *= corr;
                for (int d = 0; d < hd; d++) a[d] *= corr;
                mx[h] = sk;
            }
            l[h] += cpu_expf(sk - mx[h]);
        }
    }
    for (int h = 0; h < np; h++) {
        float inv = 1.0f / l[h];
        for (int d = 0; d < hd; d++) out[(int64_t)h * hd + d] = acc[h * hd + d] * inv;
    }
}

/* Items are (token, pass of heads), token-major. */
static void attn_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_ctx *c = ctx;
    const int passes = c->nh / c->pass;
    /* fp8: this thread's chunk of decoded keys and values */
    float *kdec = c->dec ? c->dec + (int64_t)tid * 2 * ATT_CHUNK * c->hd : NULL, *vdec = kdec ? kdec + ATT_CHUNK * c->hd : NULL;
    for (int64_t i = i0; i < i1; i++) {
        int64_t t = i / passes;
        int h0 = (int)(i % passes) * c->pass;
        int s = attn_seq_of(c, t);
        int64_t q_len = c->qsl[s + 1] - c->qsl[s];
        int64_t pos = c->seq_lens[s] - q_len + (t - c->qsl[s]);  /* absolute position of the query */
        int64_t k0 = 0;
        if (c->window > 0 && pos - c->window + 1 > 0) k0 = pos - c->window + 1;
        attn_heads(c, c->q + t * c->qs + (int64_t)h0 * c->hd, c->bt + (int64_t)s * c->bt_stride,
                   h0, c->pass, k0, pos, c->out + t * c->os + (int64_t)h0 * c->hd, kdec, vdec);
    }
}

// q (T, nh*hd), caches (num_blocks, block_size, nkv, hd) -> out (T, nh*hd)
void cpu_attention(backend *be, const tensor *q, const tensor *k_cache, const tensor *v_cache,
                   const attn_meta *m, const attn_params *p, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!m || !p || m->block_size <= 0 || m->num_tokens < 0 || m->num_seqs < 0 ||
        m->max_blocks_per_seq < 0) {
        cpu_fail(cpu, "attention: bad attention metadata");
        return;
    }
    const int nh = p->num_heads, nkv = p->num_kv_heads, hd = p->head_dim, bs = m->block_size;
    if (nh <= 0 || nkv <= 0 || nh % nkv || hd <= 0 || hd > CPU_MAX_HEAD_DIM || p->sliding_window < 0) {
        cpu_fail(cpu, "attention: bad heads %d / kv heads %d / head_dim %d / sliding_window %d "
                 "(need num_heads %% num_kv_heads == 0, head_dim <= %d)",
                 nh, nkv, hd, p->sliding_window, CPU_MAX_HEAD_DIM);
        return;
    }
    if (!(p->softcap >= 0.0f) || isinf(p->softcap)) {
        cpu_fail(cpu, "attention: softcap %g must be 0 (off) or positive and finite", (double)p->softcap);
        return;
    }
    const int64_t T = m->num_tokens, S = m->num_seqs;
    if (p->sinks && !cpu_check_vec(cpu, "attention", "sinks", p->sinks, CPU_ANY_FLOAT, nh)) return;
    if (!cpu_check_mat(cpu, "attention", "q", q, DTYPE_F32, T, (int64_t)nh * hd) ||
        !cpu_check_mat(cpu, "attention", "out", out, DTYPE_F32, T, (int64_t)nh * hd) ||
        !cache_check(cpu, "attention", "k_cache", k_cache, bs, nkv, hd) ||
        !cache_check(cpu, "attention", "v_cache", v_cache, bs, nkv, hd) ||
        !cpu_check_vec(cpu, "attention", "query_start_loc", &m->query_start_loc, DTYPE_I32, -1) ||
        !cpu_check_vec(cpu, "attention", "seq_lens", &m->seq_lens, DTYPE_I32, -1) ||
        !cpu_check_mat(cpu, "attention", "block_tables", &m->block_tables, DTYPE_I32, -1,
                       m->max_blocks_per_seq))
        return;
    if (v_cache->shape[0] != k_cache->shape[0] || v_cache->dtype != k_cache->dtype) {
        cpu_fail(cpu, "attention: k_cache and v_cache have different block counts or dtypes");
        return;
    }
    if (tensor_numel(&m->query_start_loc) < S + 1 || tensor_numel(&m->seq_lens) < S ||
        cpu_rows(&m->block_tables) < S) {
        cpu_fail(cpu, "attention: metadata arrays are shorter than num_seqs %lld", (long long)S);
        return;
    }
    if (T == 0) return;
    const int32_t *qsl = m->query_start_loc.data, *seq_lens = m->seq_lens.data, *bt = m->block_tables.data;
    const int64_t bt_stride = tensor_row_stride(&m->block_tables), num_blocks = k_cache->shape[0];
    if (S == 0 || qsl[0] != 0 || qsl[S] != T) {
        cpu_fail(cpu, "attention: query_start_loc must run from 0 to num_tokens %lld", (long long)T);
        return;
    }
    /* every block that some query will read must be a real block */
    for (int64_t s = 0; s < S; s++) {
        int64_t q_len = (int64_t)qsl[s + 1] - qsl[s], ctx = seq_lens[s];
        if (q_len < 0 || q_len > ctx || ctx > (int64_t)m->max_blocks_per_seq * bs) {
            cpu_fail(cpu, "attention: sequence %lld has %lld queries, %lld context tokens and %d block "
                     "table columns of %d", (long long)s, (long long)q_len, (long long)ctx,
                     m->max_blocks_per_seq, bs);
            return;
        }
        if (q_len == 0) continue;
        int64_t first = 0, first_pos = ctx - q_len;
        if (p->sliding_window > 0 && first_pos - p->sliding_window + 1 > 0)
            first = first_pos - p->sliding_window + 1;
        for (int64_t b = first / bs; b <= (ctx - 1) / bs; b++) {
            int32_t id = bt[s * bt_stride + b];
            if (id < 0 || id >= num_blocks) {
                cpu_fail(cpu, "attention: sequence %lld block %lld is %d, outside the cache's %lld blocks",
                         (long long)s, (long long)b, id, (long long)num_blocks);
                return;
            }
        }
    }

    /* Heads of a kv group share a pass over K/V (read once) when that still
     * leaves a few items per thread; else one head per item. Results are
     * the same either way. */
    int group = nh / nkv, pass = 1;
    for (int np = group; np > 1; np--) {
        if (group % np == 0 && np <= ATT_MAX_PASS && np * hd <= ATT_ACC_FLOATS &&
            (T * (nh / np) >= 2 * (int64_t)cpu->num_threads || cpu->num_threads == 1)) {
            pass = np;
            break;
        }
    }
    attn_ctx c = {
        .q = q->data, .qs = tensor_row_stride(q),
        .kc = k_cache->data, .vc = v_cache->data, .fp8 = k_cache->dtype == DTYPE_F8_E4M3,
        .kscale = cache_scale(k_cache), .vscale = cache_scale(v_cache), .e4m3 = fp8_e4m3_table(),
        .kvd = (int64_t)nkv * hd, .block_size = bs,
        .qsl = qsl, .seq_lens = seq_lens, .bt = bt, .bt_stride = bt_stride,
        .num_seqs = (int)S, .nh = nh, .group = group, .hd = hd, .window = p->sliding_window, .pass = pass,
        .scale = p->scale, .softcap = p->softcap, .sinks = p->sinks ? p->sinks->data : NULL,
        .sinks_dt = p->sinks ? p->sinks->dtype : DTYPE_F32, .out = out->data, .os = tensor_row_stride(out),
    };
    if (c.fp8) { /* the threads' decode buffers, kept between calls */
        const size_t need = (size_t)cpu->num_threads * 2 * ATT_CHUNK * (size_t)hd;
        if (need > cpu->attn_dec_cap) {
            float *p = realloc(cpu->attn_dec, need * sizeof(float));
            if (!p) {
                cpu_fail(cpu, "attention: out of memory");
                return;
            }
            cpu->attn_dec = p, cpu->attn_dec_cap = need;
        }
        c.dec = cpu->attn_dec;
    }
    /* cost: a query sees about max_seq_len / 2 keys on average, 4 * hd flops each per head */
    int64_t avg_keys = m->max_seq_len > 2 ? m->max_seq_len / 2 : 1;
    tp_run_cost(cpu->pool, T * (nh / pass), 4.0 * pass * (double)hd * (double)avg_keys, attn_task, &c);
}
