/* ops_attention_mla.c: the CPU reference of multi-head latent attention (DeepSeek-V2 / V3) in vLLM's absorbed form.
 *
 * vLLM's MLA backends (vllm/v1/attention/backends/mla/common.py) cache only the latent of each token,
 * [c ; k_rope] (kv_lora_rank L + qk_rope_head_dim R values, 576 for V2 / V3), and run attention as MQA with
 * one KV head: the key part of kv_b_proj (W_UK) is absorbed into the query and the value part (W_UV)
 * applied to the latent output, so per head h
 *
 *   q_lat_h = W_UK_h^T q_nope_h                              (L)           head_linear
 *   s_j     = (q_lat_h . c_j + q_rope_h . k_rope_j) * scale                attention_mla
 *   o_lat_h = sum_j softmax(s)_j c_j                         (L)           attention_mla
 *   o_h     = W_UV_h o_lat_h                                 (v_head_dim)  head_linear
 *
 * which equals transformers' decompressed form (DeepseekV2Attention: k_h = [W_UK_h c ; k_rope],
 * v_h = W_UV_h c). The cache is (num_blocks, block_size, 1, L + R), F32 or F8_E4M3 (e4m3 * qscale): token
 * slot s is row s of the cache viewed as (num_blocks * block_size, L + R). One work item per (query
 * token, head); keys MLA_CHUNK at a time with an online (running max) softmax in f32, as ops_attention.c.
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "tensor/fp8.h"

#define MLA_CHUNK 32          /* keys scored per online-softmax step */
#define MLA_MAX_DIM 2048      /* largest L + R, and K of head_linear (stack buffers) */
#define HL_TOKENS 16          /* head_linear: tokens per work item (one head's weights widened once per item) */

/* ---- head_linear: y[t, h*N + n] = sum_k w[h, n, k] x[t, h*K + k] ---- */

typedef struct hl_ctx {
    const float *x;
    int64_t xs;               /* x's row stride */
    const void *w;
    dtype wdt;
    int64_t T;
    int H, N, K;
    float *y;
} hl_ctx;

/* Items are (block of HL_TOKENS tokens, head). */
static void hl_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const hl_ctx *c = ctx;
    float wrow[MLA_MAX_DIM];
    const size_t es = dtype_size(c->wdt);
    for (int64_t i = i0; i < i1; i++) {
        const int h = (int)(i % c->H);
        const int64_t t0 = i / c->H * HL_TOKENS, t1 = t0 + HL_TOKENS < c->T ? t0 + HL_TOKENS : c->T;
        for (int n = 0; n < c->N; n++) {
            /* row n of W_h (K values) in f32 */
            cpu_widen(wrow, (const unsigned char *)c->w + (size_t)(((int64_t)h * c->N + n) * c->K) * es, c->wdt, c->K);
            for (int64_t t = t0; t < t1; t++)
                c->y[t * (int64_t)c->H * c->N + (int64_t)h * c->N + n] =
                    cpu_dot(wrow, c->x + t * c->xs + (int64_t)h * c->K, c->K);
        }
    }
}

// x (T, H*K), w (H, N, K) -> y (T, H*N)
void cpu_head_linear(backend *be, const tensor *x, const tensor *w, tensor *y) {
    cpu_state *cpu = cpu_of(be);
    if (!w || w->ndim != 3 || w->shape[0] <= 0 || w->shape[1] <= 0 || w->shape[2] <= 0 ||
        w->shape[2] > MLA_MAX_DIM) {
        cpu_fail(cpu, "head_linear: w must be (H, N, K) with K <= %d", MLA_MAX_DIM);
        return;
    }
    const int H = (int)w->shape[0], N = (int)w->shape[1], K = (int)w->shape[2];
    const int64_t T = x ? cpu_rows(x) : 0;
    if (!cpu_check_vec(cpu, "head_linear", "w", w, CPU_ANY_FLOAT, -1) ||
        !cpu_check_mat(cpu, "head_linear", "x", x, DTYPE_F32, T, (int64_t)H * K) ||
        !cpu_check_mat(cpu, "head_linear", "y", y, DTYPE_F32, T, (int64_t)H * N))
        return;
    if (tensor_row_stride(y) != (int64_t)H * N) {
        cpu_fail(cpu, "head_linear: y must be contiguous");
        return;
    }
    if (T == 0) return;
    hl_ctx c = {.x = x->data, .xs = tensor_row_stride(x), .w = w->data, .wdt = w->dtype, .T = T,
                .H = H, .N = N, .K = K, .y = y->data};
    const int64_t blocks = (T + HL_TOKENS - 1) / HL_TOKENS;
    tp_run_cost(cpu->pool, blocks * H, 2.0 * HL_TOKENS * (double)N * (double)K, hl_task, &c);
}

/* ---- attention_mla ---- */

typedef struct mla_ctx {
    const float *ql, *qr;     /* q_lat (T, H*L), q_rope (T, H*R) */
    int64_t qls, qrs;         /* their row strides */
    const void *cache;        /* F32, or E4M3 bytes when fp8 */
    bool fp8;
    float cscale;             /* fp8: what the decoded values multiply */
    const float *e4m3;
    int L, R, H, block_size;
    const int32_t *qsl, *seq_lens, *bt;
    int64_t bt_stride;
    int num_seqs;
    float scale;
    float *out;
    float *dec;               /* fp8: per thread MLA_CHUNK rows of W decoded values (tid-indexed), else NULL */
} mla_ctx;

/* The sequence that owns query token t: the last s with qsl[s] <= t. */
static int mla_seq_of(const mla_ctx *c, int64_t t) {
    int lo = 0, hi = c->num_seqs - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (c->qsl[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Items are (query token, head), token-major. */
static void mla_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const mla_ctx *c = ctx;
    const int L = c->L, R = c->R, W = L + R, bs = c->block_size;
    float acc[MLA_MAX_DIM];                 /* the running sum of p_j c_j (L) */
    float *dec = c->dec ? c->dec + (size_t)tid * MLA_CHUNK * (size_t)W : NULL; /* fp8: the chunk's rows decoded */
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = i / c->H;
        const int h = (int)(i % c->H);
        const int s = mla_seq_of(c, t);
        const int64_t q_len = c->qsl[s + 1] - c->qsl[s];
        const int64_t pos = c->seq_lens[s] - q_len + (t - c->qsl[s]); /* the query's absolute position */
        const float *ql = c->ql + t * c->qls + (int64_t)h * L, *qr = c->qr + t * c->qrs + (int64_t)h * R;
        const int32_t *blocks = c->bt + (int64_t)s * c->bt_stride;
        float mx = -INFINITY, l = 0.0f;
        for (int d = 0; d < L; d++) acc[d] = 0.0f;
        for (int64_t k0 = 0; k0 <= pos; k0 += MLA_CHUNK) {  /* keys 0 .. pos (causal) */
            const int n = pos - k0 + 1 < MLA_CHUNK ? (int)(pos - k0 + 1) : MLA_CHUNK;
            const float *row[MLA_CHUNK];
            float sc[MLA_CHUNK], cm = -INFINITY;
            for (int j = 0; j < n; j++) {
                const int64_t key = k0 + j, slot = (int64_t)blocks[key / bs] * bs + key % bs;
                if (c->fp8) {
                    const uint8_t *q8 = (const uint8_t *)c->cache + slot * W;
                    float *dj = dec + (size_t)j * W;
                    for (int d = 0; d < W; d++) dj[d] = c->e4m3[q8[d]] * c->cscale;
                    row[j] = dj;
                } else {
                    row[j] = (const float *)c->cache + slot * W;
                }
                /* [q_lat ; q_rope] . [c ; k_rope] */
                sc[j] = (cpu_dot(ql, row[j], L) + cpu_dot(qr, row[j] + L, R)) * c->scale;
                cm = sc[j] > cm ? sc[j] : cm;
            }
            if (cm > mx) { /* a new running max: rescale what was accumulated */
                if (mx != -INFINITY) {
                    const float corr = cpu_expf(mx - cm);
                    l *= corr;
                    for (int d = 0; d < L; d++) acc[d] *= corr;
                }
                mx = cm;
            }
            for (int j = 0; j < n; j++) {
                const float p = cpu_expf(sc[j] - mx);
                l += p;
                for (int d = 0; d < L; d++) acc[d] = CPU_FMA(p, row[j][d], acc[d]);
            }
        }
        float *o = c->out + t * (int64_t)c->H * L + (int64_t)h * L;
        const float inv = 1.0f / l;
        for (int d = 0; d < L; d++) o[d] = acc[d] * inv;
    }
}

/* kv (T, L + R) into the cache rows of slot_mapping (vLLM's concat_and_cache_mla). */
static void mla_cache_write(const tensor *kv, tensor *cache, const int64_t *slots, int64_t T, int W) {
    const int64_t ks = tensor_row_stride(kv);
    const float *k = kv->data;
    const float s = cache->qscale > 0.0f ? cache->qscale : 1.0f;
    for (int64_t t = 0; t < T; t++) {
        if (slots[t] < 0) continue; /* padding */
        if (cache->dtype == DTYPE_F8_E4M3) {
            uint8_t *d = (uint8_t *)cache->data + slots[t] * W;
            for (int i = 0; i < W; i++) d[i] = fp8_e4m3_from_f32(k[t * ks + i] / s);
        } else {
            memcpy((float *)cache->data + slots[t] * W, k + t * ks, (size_t)W * sizeof(float));
        }
    }
}

bool cpu_mla_params_ok(const mla_params *p) {
    return p->num_heads > 0 && p->kv_lora_rank > 0 && p->rope_dim >= 0 &&
           p->kv_lora_rank + p->rope_dim <= MLA_MAX_DIM && isfinite(p->scale);
}

/* The slots of T tokens inside a cache of nslots (an error naming op otherwise). */
static bool mla_slots_ok(cpu_state *cpu, const char *op, const int64_t *slots, int64_t T, int64_t nslots) {
    for (int64_t t = 0; t < T; t++)
        if (slots[t] >= nslots) {
            cpu_fail(cpu, "%s: slot %lld of token %lld is past the cache's %lld slots", op, (long long)slots[t],
                     (long long)t, (long long)nslots);
            return false;
        }
    return true;
}

// q_rope (T, H*R), kv (T, L+R) in place; norm_w (L); the rows into cache at m->slot_mapping: the composition of
// norm, rope and attention_mla's write, which the fused backends equal
void cpu_mla_prep(backend *be, tensor *q_rope, tensor *kv, const tensor *norm_w, float eps, const tensor *positions,
                  const tensor *cos_sin, int rope_dim, bool neox, tensor *cache, const attn_meta *m) {
    cpu_state *cpu = cpu_of(be);
    const int R = rope_dim;
    if (!m || !kv || !cache || m->block_size <= 0 || R <= 0 || R % 2 || kv->ndim != 2 || kv->shape[1] <= R ||
        kv->shape[1] > MLA_MAX_DIM) {
        cpu_fail(cpu, "mla_prep: bad metadata, kv or rope_dim %d (kv (T, L + R) with L > 0, R even, L + R <= %d)", R,
                 MLA_MAX_DIM);
        return;
    }
    const int64_t T = kv->shape[0], W = kv->shape[1], L = W - R, bs = m->block_size;
    const bool fp8 = cache->dtype == DTYPE_F8_E4M3;
    if (!cpu_check_mat(cpu, "mla_prep", "kv", kv, DTYPE_F32, T, W) ||
        !cpu_check_vec(cpu, "mla_prep", "cache", cache, fp8 ? DTYPE_F8_E4M3 : DTYPE_F32, -1) ||
        !cpu_check_vec(cpu, "mla_prep", "slot_mapping", &m->slot_mapping, DTYPE_I64, -1))
        return;
    if (cache->ndim != 4 || cache->shape[1] != bs || cache->shape[2] != 1 || cache->shape[3] != W) {
        cpu_fail(cpu, "mla_prep: cache must be (num_blocks, %lld, 1, %lld)", (long long)bs, (long long)W);
        return;
    }
    if (fp8 && !(cache->qscale >= 0.0f && isfinite(cache->qscale))) {
        cpu_fail(cpu, "mla_prep: cache has scale %g", (double)cache->qscale);
        return;
    }
    if (tensor_numel(&m->slot_mapping) < T) {
        cpu_fail(cpu, "mla_prep: slot_mapping is shorter than the %lld tokens", (long long)T);
        return;
    }
    if (!mla_slots_ok(cpu, "mla_prep", m->slot_mapping.data, T, cache->shape[0] * bs)) return;
    tensor c = tensor_cols(kv, 0, L), kr = tensor_cols(kv, L, R);
    const be_norm n = {.kind = BE_NORM_RMS, .w = norm_w, .eps = eps};
    cpu_norm(be, &c, &n, &c);
    cpu_rope(be, q_rope, &kr, positions, cos_sin, R, R, neox);
    if (cpu->err != VLLM_OK) return; /* the norm or the rope refused its arguments */
    mla_cache_write(kv, cache, m->slot_mapping.data, T, (int)W);
}

// q_lat (T, H*L), q_rope (T, H*R), kv (T, L+R), cache (num_blocks, block_size, 1, L+R) -> out (T, H*L)
void cpu_attention_mla(backend *be, const tensor *q_lat, const tensor *q_rope, const tensor *kv, tensor *cache,
                       const attn_meta *m, const mla_params *p, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!m || !p || m->block_size <= 0 || m->num_tokens < 0 || m->num_seqs < 0 || m->max_blocks_per_seq < 0) {
        cpu_fail(cpu, "attention_mla: bad attention metadata");
        return;
    }
    const int H = p->num_heads, L = p->kv_lora_rank, R = p->rope_dim, W = L + R, bs = m->block_size;
    if (H <= 0 || L <= 0 || R < 0 || W > MLA_MAX_DIM || !isfinite(p->scale)) {
        cpu_fail(cpu, "attention_mla: bad heads %d / kv_lora_rank %d / rope_dim %d / scale %g (L + R <= %d)", H, L, R,
                 (double)p->scale, MLA_MAX_DIM);
        return;
    }
    const int64_t T = m->num_tokens, S = m->num_seqs;
    const bool fp8 = cache && cache->dtype == DTYPE_F8_E4M3;
    if (!cpu_check_mat(cpu, "attention_mla", "q_lat", q_lat, DTYPE_F32, T, (int64_t)H * L) ||
        !cpu_check_mat(cpu, "attention_mla", "q_rope", q_rope, DTYPE_F32, T, (int64_t)H * R) ||
        !cpu_check_mat(cpu, "attention_mla", "out", out, DTYPE_F32, T, (int64_t)H * L) ||
        (kv && !cpu_check_mat(cpu, "attention_mla", "kv", kv, DTYPE_F32, T, W)) ||
        !cpu_check_vec(cpu, "attention_mla", "cache", cache, fp8 ? DTYPE_F8_E4M3 : DTYPE_F32, -1) ||
        !cpu_check_vec(cpu, "attention_mla", "query_start_loc", &m->query_start_loc, DTYPE_I32, -1) ||
        !cpu_check_vec(cpu, "attention_mla", "seq_lens", &m->seq_lens, DTYPE_I32, -1) ||
        !cpu_check_vec(cpu, "attention_mla", "slot_mapping", &m->slot_mapping, DTYPE_I64, -1) ||
        !cpu_check_mat(cpu, "attention_mla", "block_tables", &m->block_tables, DTYPE_I32, -1, m->max_blocks_per_seq))
        return;
    if (cache->ndim != 4 || cache->shape[1] != bs || cache->shape[2] != 1 || cache->shape[3] != W) {
        cpu_fail(cpu, "attention_mla: cache must be (num_blocks, %d, 1, %d)", bs, W);
        return;
    }
    if (tensor_row_stride(out) != (int64_t)H * L) {
        cpu_fail(cpu, "attention_mla: out must be contiguous");
        return;
    }
    if (fp8 && !(cache->qscale >= 0.0f && isfinite(cache->qscale))) {
        cpu_fail(cpu, "attention_mla: cache has scale %g", (double)cache->qscale);
        return;
    }
    if (tensor_numel(&m->query_start_loc) < S + 1 || tensor_numel(&m->seq_lens) < S ||
        cpu_rows(&m->block_tables) < S || (kv && tensor_numel(&m->slot_mapping) < T)) {
        cpu_fail(cpu, "attention_mla: metadata arrays are shorter than num_seqs %lld / num_tokens %lld", (long long)S,
                 (long long)T);
        return;
    }
    const int64_t num_blocks = cache->shape[0];
    if (kv) { /* the new tokens' latents first: the queries read them */
        const int64_t *slots = m->slot_mapping.data;
        if (!mla_slots_ok(cpu, "attention_mla", slots, T, num_blocks * bs)) return;
        mla_cache_write(kv, cache, slots, T, W);
    }
    if (T == 0) return;
    const int32_t *qsl = m->query_start_loc.data, *seq_lens = m->seq_lens.data, *bt = m->block_tables.data;
    const int64_t bt_stride = tensor_row_stride(&m->block_tables);
    if (S == 0 || qsl[0] != 0 || qsl[S] != T) {
        cpu_fail(cpu, "attention_mla: query_start_loc must run from 0 to num_tokens %lld", (long long)T);
        return;
    }
    /* every block that some query will read must be a real block */
    for (int64_t s = 0; s < S; s++) {
        const int64_t q_len = (int64_t)qsl[s + 1] - qsl[s], ctx = seq_lens[s];
        if (q_len < 0 || q_len > ctx || ctx > (int64_t)m->max_blocks_per_seq * bs) {
            cpu_fail(cpu, "attention_mla: sequence %lld has %lld queries, %lld context tokens and %d block table "
                     "columns of %d", (long long)s, (long long)q_len, (long long)ctx, m->max_blocks_per_seq, bs);
            return;
        }
        for (int64_t b = 0; q_len > 0 && b <= (ctx - 1) / bs; b++) {
            const int32_t id = bt[s * bt_stride + b];
            if (id < 0 || id >= num_blocks) {
                cpu_fail(cpu, "attention_mla: sequence %lld block %lld is %d, outside the cache's %lld blocks",
                         (long long)s, (long long)b, id, (long long)num_blocks);
                return;
            }
        }
    }
    mla_ctx c = {
        .ql = q_lat->data, .qr = q_rope->data, .qls = tensor_row_stride(q_lat), .qrs = tensor_row_stride(q_rope),
        .cache = cache->data, .fp8 = fp8, .cscale = cache->qscale > 0.0f ? cache->qscale : 1.0f,
        .e4m3 = fp8_e4m3_table(), .L = L, .R = R, .H = H, .block_size = bs, .qsl = qsl, .seq_lens = seq_lens,
        .bt = bt, .bt_stride = bt_stride, .num_seqs = (int)S, .scale = p->scale, .out = out->data,
    };
    if (fp8) { /* decoded rows on the heap, one chunk per thread (not 256 KiB of every thread's stack) */
        c.dec = malloc((size_t)tp_num_threads(cpu->pool) * MLA_CHUNK * (size_t)W * sizeof(float));
        if (!c.dec) {
            cpu_fail(cpu, "attention_mla: out of memory");
            return;
        }
    }
    /* cost: a query sees about max_seq_len / 2 keys on average, about 4 * (L + R) flops each */
    const int64_t avg_keys = m->max_seq_len > 2 ? m->max_seq_len / 2 : 1;
    tp_run_cost(cpu->pool, T * H, 4.0 * (double)W * (double)avg_keys, mla_task, &c);
    free(c.dec);
}
