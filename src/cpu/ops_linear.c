/*
 * ops_linear.c: the CPU linear layer, y = x @ W^T + b, the hot op.
 *
 * Weights stay where the checkpoint put them (F32, F16 or BF16, any
 * alignment; ggml's block types go to cpu_quant_matmul, ops_quant.c). The kernel widens LIN_K weights at a time into a stack buffer
 * and multiply-adds them into LIN_K accumulator lanes for each of up to
 * LIN_NT tokens, so one read of a weight serves several tokens. Every
 * (token, output) value is computed by the same sequence of f32 operations
 * whatever the batch, the grouping or the thread split, so results do not
 * depend on the thread count.
 *
 * Work items are (token tile, row tile) pairs: a row tile is LIN_ROWS
 * outputs, a token tile as many tokens as keep their x rows in L2. Inside
 * an item, each group of LIN_NT tokens runs over all the tile's rows while
 * its x rows are in L1.
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "cpu/cpu_quant.h"
#include "tensor/ggml_dtype.h"

#define LIN_K 64            /* weight elements widened per step = accumulators per token */
_Static_assert(LIN_K == 64, "lin_reduce is written for 64 lanes");
/* tokens per pass over a weight row: LIN_NT * LIN_K / 16 AVX-512 registers hold the accumulators */
#if defined(__AVX512F__)
#define LIN_NT 4
#else
#define LIN_NT 2
#endif
#define LIN_ROWS 16         /* output rows per work item */
#define LIN_KB 1024         /* input block for several tokens: their x rows stay in L1 */
#define LIN_X_TILE_BYTES (256 * 1024)  /* x rows of one token tile (stay in L2) */
#define LIN_MAX_TOK_TILE 64

typedef struct lin_part {
    const unsigned char *w;     /* (rows, in) of the layer's dtype (block layers: of dt) */
    dtype dt;                   /* this part's dtype */
    size_t w_row_bytes;         /* bytes between weight rows */
    int64_t rows;               /* out_i */
    int64_t row0;               /* first output column of this part */
    const unsigned char *bias;  /* (rows) or NULL */
    dtype bias_dt;
} lin_part;

struct be_linear {
    int n;            /* parts */
    int64_t in;       /* input features */
    int64_t out;      /* sum of the parts' rows */
    dtype dt;         /* weight dtype (a block layer: part 0's) */
    bool block;       /* some part is a ggml block type: every part through cpu_quant_matmul */
    lin_part *parts;
};

vllm_status cpu_linear_create(backend *be, const tensor *const *weights, const tensor *const *biases,
                              int n, be_linear **out) {
    (void)be;
    *out = NULL;
    if (n < 1 || !weights) return vt_error(VLLM_ERR_INVALID_ARG, "linear: %d weight parts", n);
    const tensor *w0 = weights[0];
    if (!w0 || w0->ndim != 2)
        return vt_error(VLLM_ERR_INVALID_ARG, "linear: weight 0 must be a 2-D (out, in) tensor");
    dtype dt = w0->dtype;
    int64_t in = w0->shape[1];
    if (in <= 0) return vt_error(VLLM_ERR_INVALID_ARG, "linear: weight 0 has %lld input features",
                                 (long long)in);
    /* a layer with a part in a ggml block type runs every part through cpu_quant_matmul, each in its own
     * type (llama-quantize mixes them: Q4_K_M's attn_v in Q6_K beside attn_q / attn_k in Q4_K) */
    bool block = false;
    for (int i = 0; i < n; i++) block |= weights[i] && dtype_is_block(weights[i]->dtype);
    for (int i = 0; block && i < n; i++) {
        const dtype d = weights[i] ? weights[i]->dtype : DTYPE_COUNT;
        ggml_type gt = GGML_TYPE_COUNT;
        if (d != DTYPE_FP8_B128 && d != DTYPE_I4_B128 && (!dtype_to_ggml(d, &gt) || !gq_type_supported(gt)))
            return vt_error(VLLM_ERR_UNSUPPORTED,
                            "linear: weight %d dtype %s (expected F32, F16, BF16, FP8_B128, I4_B128 or a ggml block "
                            "type)", i,
                            dtype_name(d));
        if (in % dtype_block(d))
            return vt_error(VLLM_ERR_INVALID_ARG, "linear: %s rows of %lld elements are not whole blocks of %lld",
                            dtype_name(d), (long long)in, (long long)dtype_block(d));
    }
    if (!block && dt != DTYPE_F32 && dt != DTYPE_F16 && dt != DTYPE_BF16)
        return vt_error(VLLM_ERR_UNSUPPORTED, "linear: weight dtype %s (expected F32, F16, BF16 or a ggml block type)",
                        dtype_name(dt));

    be_linear *lin = calloc(1, sizeof *lin);
    lin_part *parts = calloc((size_t)n, sizeof *parts);
    if (!lin || !parts) {
        free(lin);
        free(parts);
        return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    }
    lin->n = n;
    lin->in = in;
    lin->dt = dt;
    lin->block = block;
    lin->parts = parts;
    vllm_status st = VLLM_OK;
    int64_t total = 0;
    for (int i = 0; i < n && st == VLLM_OK; i++) {
        const tensor *w = weights[i];
        if (!w || w->ndim != 2 || (!block && w->dtype != dt) || w->shape[1] != in || w->shape[0] < 0) {
            st = vt_error(VLLM_ERR_INVALID_ARG,
                          "linear: weight %d must be (out, %lld) %s like weight 0", i, (long long)in,
                          dtype_name(dt));
            break;
        }
        int64_t stride = w->row_stride ? w->row_stride : in;
        if (stride < in || stride > INT64_MAX / 4 || w->shape[0] > INT64_MAX - total ||
            (w->shape[0] > 0 && !w->data) || (dtype_is_block(w->dtype) && stride != in)) {
            st = vt_error(VLLM_ERR_INVALID_ARG, "linear: weight %d has a bad stride, size or no data", i);
            break;
        }
        parts[i].w = w->data;
        parts[i].dt = w->dtype;
        parts[i].w_row_bytes = (size_t)(stride / dtype_block(w->dtype)) * dtype_size(w->dtype);
        parts[i].rows = w->shape[0];
        parts[i].row0 = total;
        total += w->shape[0];
        const tensor *b = biases ? biases[i] : NULL;
        if (b) {
            if (!b->data || b->ndim != 1 || b->shape[0] != w->shape[0] ||
                (b->dtype != DTYPE_F32 && b->dtype != DTYPE_F16 && b->dtype != DTYPE_BF16)) {
                st = vt_error(VLLM_ERR_INVALID_ARG, "linear: bias %d must be a (%lld) float vector", i,
                              (long long)w->shape[0]);
                break;
            }
            parts[i].bias = b->data;
            parts[i].bias_dt = b->dtype;
        }
    }
    if (st == VLLM_OK && total == 0) st = vt_error(VLLM_ERR_INVALID_ARG, "linear: no output features");
    if (st != VLLM_OK) {
        free(parts);
        free(lin);
        return st;
    }
    lin->out = total;
    *out = lin;
    return VLLM_OK;
}

void cpu_linear_free(backend *be, be_linear *lin) {
    (void)be;
    if (!lin) return;
    free(lin->parts);
    free(lin);
}

/* ---- kernel ---- */

/* acc[t][j] += x[t][k] * w[k] for the k in [k0, k1) with k % LIN_K == j, for
 * t < nt (nt <= LIN_NT); w of dtype dt. k0 is a multiple of LIN_K. Written
 * like this gcc and clang keep the nt * LIN_K accumulators in vector
 * registers, and what happens to one token does not depend on nt. */
CPU_INLINE void lin_accumulate(int nt, const float *const *x, const unsigned char *w, dtype dt, int64_t k0,
                               int64_t k1, float acc[LIN_NT][LIN_K]) {
    const size_t es = dt == DTYPE_F32 ? 4 : 2;
    float a[LIN_NT][LIN_K];
    float wf[LIN_K];
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < LIN_K; j++) a[t][j] = acc[t][j];
    int64_t k = k0;
    for (; k + LIN_K <= k1; k += LIN_K) {
        cpu_widen(wf, w + (size_t)k * es, dt, LIN_K);
        for (int t = 0; t < nt; t++) {
            const float *xt = x[t] + k;
            for (int j = 0; j < LIN_K; j++) a[t][j] = CPU_FMA(xt[j], wf[j], a[t][j]);
        }
    }
    int rem = (int)(k1 - k);
    if (rem > 0) {
        cpu_widen(wf, w + (size_t)k * es, dt, rem);
        for (int t = 0; t < nt; t++) {
            const float *xt = x[t] + k;
            for (int j = 0; j < rem; j++) a[t][j] = CPU_FMA(xt[j], wf[j], a[t][j]);
        }
    }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < LIN_K; j++) acc[t][j] = a[t][j];
}

/* The dot product from a token's LIN_K lanes, in a fixed order: 64 -> 16 -> 1. */
static inline float lin_reduce(const float *acc) {
    float r[16];
    for (int j = 0; j < 16; j++) r[j] = (acc[j] + acc[j + 16]) + (acc[j + 32] + acc[j + 48]);
    for (int h = 8; h > 0; h /= 2)
        for (int j = 0; j < h; j++) r[j] += r[j + h];
    return r[0];
}

typedef struct lin_ctx {
    const be_linear *lin;
    const float *x;
    int64_t xs;        /* x row stride (elements) */
    float *y;
    int64_t ys;        /* y row stride (elements) */
    int64_t T;
    int64_t tok_tile;  /* tokens per item (multiple of LIN_NT) */
    int64_t row_tiles; /* items per token tile */
    int64_t kb;        /* input block (a multiple of LIN_K) */
} lin_ctx;

/* Items [i0, i1): each is output rows [r0, r0 + LIN_ROWS) for tokens
 * [t0, t0 + tok_tile), done LIN_NT tokens at a time; for each group of
 * tokens the input is walked in blocks of LIN_KB so that the group's x and
 * the tile's weight rows stay in L1 while every row of the tile uses them.
 * dt is a constant at each call site, so the kernel is specialised per dtype. */
CPU_INLINE void lin_items(const lin_ctx *c, int64_t i0, int64_t i1, dtype dt) {
    const be_linear *lin = c->lin;
    float acc[LIN_ROWS][LIN_NT][LIN_K];
    const unsigned char *wrow[LIN_ROWS];
    float bias[LIN_ROWS];
    for (int64_t item = i0; item < i1; item++) {
        int64_t t0 = item / c->row_tiles * c->tok_tile;
        int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        int64_t r0 = item % c->row_tiles * LIN_ROWS;
        int nr = (int)(r0 + LIN_ROWS < lin->out ? LIN_ROWS : lin->out - r0);
        /* the tile's weight rows and biases (a tile may straddle parts) */
        int p = 0;
        for (int i = 0; i < nr; i++) {
            int64_t r = r0 + i;
            while (r >= lin->parts[p].row0 + lin->parts[p].rows) p++;
            const lin_part *part = &lin->parts[p];
            wrow[i] = part->w + (size_t)(r - part->row0) * part->w_row_bytes;
            bias[i] = part->bias ? cpu_load(part->bias, part->bias_dt, r - part->row0) : 0.0f;
        }
        for (int64_t t = t0; t < t1; t += LIN_NT) {
            const float *xr[LIN_NT];
            int nt = t1 - t < LIN_NT ? (int)(t1 - t) : LIN_NT;
            for (int i = 0; i < LIN_NT; i++) xr[i] = c->x + (t + (i < nt ? i : 0)) * c->xs;
            for (int i = 0; i < nr; i++)
                for (int ti = 0; ti < nt; ti++)
                    for (int j = 0; j < LIN_K; j++) acc[i][ti][j] = 0.0f;
            for (int64_t k0 = 0; k0 < lin->in; k0 += c->kb) {
                int64_t k1 = k0 + c->kb < lin->in ? k0 + c->kb : lin->in;
                for (int i = 0; i < nr; i++) {
                    switch (nt) {
#if LIN_NT > 2
                    case 4: lin_accumulate(4, xr, wrow[i], dt, k0, k1, acc[i]); break;
                    case 3: lin_accumulate(3, xr, wrow[i], dt, k0, k1, acc[i]); break;
#endif
                    case 2: lin_accumulate(2, xr, wrow[i], dt, k0, k1, acc[i]); break;
                    default: lin_accumulate(1, xr, wrow[i], dt, k0, k1, acc[i]); break;
                    }
                }
            }
            for (int i = 0; i < nr; i++)
                for (int ti = 0; ti < nt; ti++) c->y[(t + ti) * c->ys + r0 + i] = lin_reduce(acc[i][ti]) + bias[i];
        }
    }
}

/* Short rows (in <= LIN_SMALL_IN): a plain 16-lane dot product per (token,
 * output), without the 64-lane accumulator tiles whose setup would cost more
 * than the arithmetic. Chosen by `in` alone, so a token's result still does
 * not depend on the batch or the thread split. */
#define LIN_SMALL_IN 256

CPU_INLINE float lin_dot_small(const float *x, const unsigned char *w, dtype dt, int64_t n) {
    const size_t es = dt == DTYPE_F32 ? 4 : 2;
    float a[16] = {0};
    float wf[16];
    int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
    /* the same arithmetic as the portable loop below, kept in registers
     * (the compiler spills the 16 lanes and reduces them through memory) */
    if (dt == DTYPE_F32) {
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        const float *wp = (const float *)(const void *)w;
        for (; k + 16 <= n; k += 16) {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(wp + k), lo);
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_loadu_ps(wp + k + 8), hi);
        }
        _mm256_storeu_ps(a, lo);
        _mm256_storeu_ps(a + 8, hi);
        if (k < n) {
            for (int j = 0; j < (int)(n - k); j++) a[j] = CPU_FMA(x[k + j], wp[k + j], a[j]);
            lo = _mm256_loadu_ps(a);
            hi = _mm256_loadu_ps(a + 8);
        }
        __m256 v = _mm256_add_ps(lo, hi);                                          /* a[j] + a[j + 8] */
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* + 4 */
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                    /* + 2 */
        h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));                                /* + 1 */
        return _mm_cvtss_f32(h);
    }
#endif
    for (; k + 16 <= n; k += 16) {
        cpu_widen(wf, w + (size_t)k * es, dt, 16);
        for (int j = 0; j < 16; j++) a[j] = CPU_FMA(x[k + j], wf[j], a[j]);
    }
    if (k < n) {
        int rem = (int)(n - k);
        cpu_widen(wf, w + (size_t)k * es, dt, rem);
        for (int j = 0; j < rem; j++) a[j] = CPU_FMA(x[k + j], wf[j], a[j]);
    }
    for (int h = 8; h > 0; h /= 2)
        for (int j = 0; j < h; j++) a[j] += a[j + h];
    return a[0];
}

CPU_INLINE void lin_items_small(const lin_ctx *c, int64_t i0, int64_t i1, dtype dt) {
    const be_linear *lin = c->lin;
    for (int64_t item = i0; item < i1; item++) {
        int64_t t0 = item / c->row_tiles * c->tok_tile;
        int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        int64_t r0 = item % c->row_tiles * LIN_ROWS;
        int64_t r1 = r0 + LIN_ROWS < lin->out ? r0 + LIN_ROWS : lin->out;
        int p = 0;
        for (int64_t r = r0; r < r1; r++) {
            while (r >= lin->parts[p].row0 + lin->parts[p].rows) p++;
            const lin_part *part = &lin->parts[p];
            const unsigned char *wr = part->w + (size_t)(r - part->row0) * part->w_row_bytes;
            float b = part->bias ? cpu_load(part->bias, part->bias_dt, r - part->row0) : 0.0f;
            for (int64_t t = t0; t < t1; t++)
                c->y[t * c->ys + r] = lin_dot_small(c->x + t * c->xs, wr, dt, lin->in) + b;
        }
    }
}

static void lin_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const lin_ctx *c = ctx;
    if (c->lin->in <= LIN_SMALL_IN) {
        switch (c->lin->dt) {
        case DTYPE_BF16: lin_items_small(c, i0, i1, DTYPE_BF16); break;
        case DTYPE_F16: lin_items_small(c, i0, i1, DTYPE_F16); break;
        default: lin_items_small(c, i0, i1, DTYPE_F32); break;
        }
        return;
    }
    switch (c->lin->dt) {
    case DTYPE_BF16: lin_items(c, i0, i1, DTYPE_BF16); break;
    case DTYPE_F16: lin_items(c, i0, i1, DTYPE_F16); break;
    default: lin_items(c, i0, i1, DTYPE_F32); break;
    }
}

/* A layer of ggml blocks: each part through cpu_quant_matmul (x quantized to the type's partner, integer
 * dot products per block, as llama.cpp's CPU backend) or, FP8_B128 / I4_B128, cpu_fp8_matmul / cpu_i4_matmul,
 * then its bias. */
static void lin_blocks(cpu_state *cpu, const be_linear *lin, const float *x, int64_t xs, float *y, int64_t ys,
                       int64_t T) {
    for (int i = 0; i < lin->n; i++) {
        const lin_part *p = &lin->parts[i];
        ggml_type gt = GGML_TYPE_COUNT;
        if (p->rows == 0 || (p->dt != DTYPE_FP8_B128 && p->dt != DTYPE_I4_B128 && !dtype_to_ggml(p->dt, &gt)))
            continue; /* types checked by cpu_linear_create */
        const vllm_status st =
            p->dt == DTYPE_FP8_B128
                ? cpu_fp8_matmul(cpu->pool, p->w, p->w_row_bytes, p->rows, lin->in, x, xs, T, y + p->row0, ys)
            : p->dt == DTYPE_I4_B128
                ? cpu_i4_matmul(cpu->pool, p->w, p->w_row_bytes, p->rows, lin->in, x, xs, T, y + p->row0, ys)
                : cpu_quant_matmul(cpu->pool, gt, p->w, p->w_row_bytes, p->rows, lin->in, x, xs, T, y + p->row0, ys);
        if (st != VLLM_OK) {
            cpu_fail(cpu, "linear: %s", vllm_last_error());
            return;
        }
        if (p->bias)
            for (int64_t t = 0; t < T; t++)
                for (int64_t r = 0; r < p->rows; r++) y[t * ys + p->row0 + r] += cpu_load(p->bias, p->bias_dt, r);
    }
}

// x (T, in), W (out, in) -> y (T, out); y must not overlap x
void cpu_linear(backend *be, const be_linear *lin, const tensor *x, tensor *y) {
    cpu_state *cpu = cpu_of(be);
    if (!lin) {
        cpu_fail(cpu, "linear: no layer");
        return;
    }
    if (!cpu_check_mat(cpu, "linear", "x", x, DTYPE_F32, -1, lin->in) ||
        !cpu_check_mat(cpu, "linear", "y", y, DTYPE_F32, cpu_rows(x), lin->out))
        return;
    int64_t T = cpu_rows(x);
    if (T == 0) return;
    if (lin->block) {
        lin_blocks(cpu, lin, x->data, tensor_row_stride(x), y->data, tensor_row_stride(y), T);
        return;
    }

    lin_ctx c = {
        .lin = lin,
        .x = x->data,
        .xs = tensor_row_stride(x),
        .y = y->data,
        .ys = tensor_row_stride(y),
        .T = T,
        .row_tiles = (lin->out + LIN_ROWS - 1) / LIN_ROWS,
    };
    int64_t tile = LIN_X_TILE_BYTES / (lin->in * 4) / LIN_NT * LIN_NT;
    if (tile < LIN_NT) tile = LIN_NT;
    if (tile > LIN_MAX_TOK_TILE) tile = LIN_MAX_TOK_TILE;
    c.tok_tile = tile;
    /* blocking the input only pays when several tokens share each weight row:
     * alone, one token streams each row straight through (prefetch friendly) */
    c.kb = T > 1 ? LIN_KB : (lin->in + LIN_K - 1) / LIN_K * LIN_K;
    int64_t tok_tiles = (T + tile - 1) / tile;
    int64_t tokens_per_item = T < tile ? T : tile;
    double cost = (double)LIN_ROWS * (double)tokens_per_item * (double)lin->in;
    tp_run_cost(cpu->pool, tok_tiles * c.row_tiles, cost, lin_task, &c);
}
