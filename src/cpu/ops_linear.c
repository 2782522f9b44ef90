/*
 * ops_linear.c: the CPU linear layer, y = x @ W^T + b, the hot op.
 *
 * Weights stay where the checkpoint put them (F32, F16 or BF16, any alignment; ggml's block types go to
 * cpu_quant_matmul, ops_quant.c, FP8_B128 / I4_B128 to ops_fp8.c / ops_int4.c). Every (token, output)
 * value is one dot product computed by the same sequence of f32 operations whatever the batch, the tiling
 * or the thread split (the definition is at "kernel" below), so results do not depend on the thread count
 * or on the other tokens of the step (the engine's layouts, chunked prefill and preemption, agree exactly).
 *
 * Work items are (token tile, row tile) pairs: LIN_ROWS outputs for up to LIN_TT tokens. A batch of a few
 * tokens reads the weights in place; a larger one widens each item's weights to f32 per LIN_KB inputs
 * and runs register tiles of LIN_MR rows x LIN_NT tokens over them (a blocked GEMM: the FMAs, not the
 * loads or the widening, bound the prefill).
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "cpu/cpu_quant.h"
#include "tensor/ggml_dtype.h"

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

/* ---- kernel ----
 *
 * Every output is one dot product with this arithmetic, whatever the batch, the tile or the thread split:
 *     acc[0 .. 16) = 0;  for k = 0 .. in - 1, in order: acc[k % 16] = fma(x[k], w[k], acc[k % 16]);
 *     y = tree(acc) + bias,  tree: for h = 8, 4, 2, 1: acc[j] += acc[j + h] (j < h)
 * with w widened exactly to f32. cpu_linear_dot_ref below is that definition; the fast forms compute a
 * register tile of dot products at once (one accumulator register each):
 *   - a few tokens (decode): one row at a time, its weights widened in registers straight from the
 *     checkpoint (one sequential stream, prefetched ahead);
 *   - more (prefill): each work item's LIN_ROWS rows widened to f32 once into a per-thread buffer, then
 *     register tiles of LIN_MR rows x LIN_NT tokens over LIN_KB inputs at a time (the f32 FMAs stay the
 *     bound, not the widening), the accumulators kept in a buffer between input blocks.
 */
#define LIN_L 16     /* accumulator lanes of a dot product */
#define LIN_MR 4     /* rows of a register tile */
#define LIN_NT 6     /* tokens of a register tile: LIN_MR x LIN_NT = 24 accumulator registers */
#define LIN_ROWS 16  /* rows of a work item */
#define LIN_KB 1024  /* inputs per block of the register tiles (their x rows stay in L1; 256: 194 tok/s, 1024: 224-234) */
#define LIN_TT 132   /* tokens of a work item, LIN_TT / LIN_NT token groups (a 128-token chunk: one item) */
#define LIN_DIRECT_T 3 /* batches up to this many tokens: the decode form (the weights read once anyway) */
#define LIN_PREFETCH 768  /* bytes ahead in a decode row: a software prefetch (18.4 tok/s against 17.0 without; 2048: slower) */
_Static_assert(LIN_ROWS % LIN_MR == 0 && LIN_TT % LIN_NT == 0 && LIN_KB % LIN_L == 0, "linear tiling");

/* the definition, one output (the portable fallback's building block and the tests' reference) */
static inline float lin_tree(float *acc) {
    for (int h = LIN_L / 2; h > 0; h /= 2)
        for (int j = 0; j < h; j++) acc[j] += acc[j + h];
    return acc[0];
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

/* tree() of one accumulator register, in the definition's order: 16 -> 8 -> 4 -> 2 -> 1 */
CPU_INLINE float lin_tree16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* 16 weights of dtype dt from p widened to f32 (lanes off in m read as 0) */
CPU_INLINE __m512 lin_w16(const unsigned char *p, dtype dt, __mmask16 m) {
    if (dt == DTYPE_F32) return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (dt == DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The decode form: one row w (dtype dt, read in place; one row at a time is one sequential stream: 2 or 8
 * interleaved rows measured slower) x tokens x[0 .. NT), inputs [0, n) -> out[t] */
CPU_INLINE void lin_tile_direct(const int NT, const unsigned char *w, dtype dt, const float *const *x, int64_t n,
                                float out[LIN_DIRECT_T]) {
    const size_t es = dt == DTYPE_F32 ? 4 : 2;
    __m512 acc[LIN_DIRECT_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + LIN_L <= n; k += LIN_L) {
        _mm_prefetch((const char *)(w + (size_t)k * es) + LIN_PREFETCH, _MM_HINT_T0);
        const __m512 wv = lin_w16(w + (size_t)k * es, dt, 0xffff);
        for (int t = 0; t < NT; t++) acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(x[t] + k), wv, acc[t]);
    }
    if (k < n) { /* the last lanes: the others keep their sums */
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1u);
        const __m512 wv = lin_w16(w + (size_t)k * es, dt, m);
        for (int t = 0; t < NT; t++) acc[t] = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, x[t] + k), wv, acc[t], m);
    }
    for (int t = 0; t < NT; t++) out[t] = lin_tree16(acc[t]);
}

/* The prefill form's register tile: R rows of widened weights w (rows ws floats apart) x NT tokens x[t],
 * inputs [0, n); the accumulators from ab (or zero when first), back to ab, or (last) their trees to
 * out[t][i]. */
CPU_INLINE void lin_tile_wide(const int R, const int NT, const float *w, int64_t ws, const float *const *x,
                              int64_t n, float *ab, bool first, bool last, float out[LIN_NT][LIN_MR]) {
    __m512 acc[LIN_MR][LIN_NT];
    for (int i = 0; i < R; i++)
        for (int t = 0; t < NT; t++)
            acc[i][t] = first ? _mm512_setzero_ps() : _mm512_load_ps(ab + (i * LIN_NT + t) * LIN_L);
    int64_t k = 0;
    for (; k + LIN_L <= n; k += LIN_L) {
        __m512 wv[LIN_MR];
        for (int i = 0; i < R; i++) wv[i] = _mm512_load_ps(w + i * ws + k);
        for (int t = 0; t < NT; t++) {
            const __m512 xv = _mm512_loadu_ps(x[t] + k);
            for (int i = 0; i < R; i++) acc[i][t] = _mm512_fmadd_ps(xv, wv[i], acc[i][t]);
        }
    }
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1u);
        __m512 wv[LIN_MR];
        for (int i = 0; i < R; i++) wv[i] = _mm512_maskz_load_ps(m, w + i * ws + k);
        for (int t = 0; t < NT; t++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + k);
            for (int i = 0; i < R; i++) acc[i][t] = _mm512_mask3_fmadd_ps(xv, wv[i], acc[i][t], m);
        }
    }
    for (int i = 0; i < R; i++)
        for (int t = 0; t < NT; t++) {
            if (last) out[t][i] = lin_tree16(acc[i][t]);
            else _mm512_store_ps(ab + (i * LIN_NT + t) * LIN_L, acc[i][t]);
        }
}

#else /* portable: the same arithmetic on arrays (compilers vectorise the lane loops) */

CPU_INLINE void lin_tile_direct(const int NT, const unsigned char *w, dtype dt, const float *const *x, int64_t n,
                                float out[LIN_DIRECT_T]) {
    const size_t es = dt == DTYPE_F32 ? 4 : 2;
    float acc[LIN_DIRECT_T][LIN_L] = {{0}};
    float wf[LIN_L];
    for (int64_t k = 0; k < n; k += LIN_L) {
        const int nl = n - k < LIN_L ? (int)(n - k) : LIN_L;
        cpu_widen(wf, w + (size_t)k * es, dt, nl);
        for (int t = 0; t < NT; t++)
            for (int j = 0; j < nl; j++) acc[t][j] = CPU_FMA(x[t][k + j], wf[j], acc[t][j]);
    }
    for (int t = 0; t < NT; t++) out[t] = lin_tree(acc[t]);
}

CPU_INLINE void lin_tile_wide(const int R, const int NT, const float *w, int64_t ws, const float *const *x,
                              int64_t n, float *ab, bool first, bool last, float out[LIN_NT][LIN_MR]) {
    if (first) memset(ab, 0, sizeof(float) * LIN_MR * LIN_NT * LIN_L);
    for (int64_t k = 0; k < n; k += LIN_L) {
        const int nl = n - k < LIN_L ? (int)(n - k) : LIN_L;
        for (int i = 0; i < R; i++)
            for (int t = 0; t < NT; t++) {
                float *a = ab + (i * LIN_NT + t) * LIN_L;
                for (int j = 0; j < nl; j++) a[j] = CPU_FMA(x[t][k + j], w[i * ws + k + j], a[j]);
            }
    }
    if (last)
        for (int i = 0; i < R; i++)
            for (int t = 0; t < NT; t++) out[t][i] = lin_tree(ab + (i * LIN_NT + t) * LIN_L);
}
#endif

float cpu_linear_dot_ref(const float *x, const void *w, dtype dt, int64_t n) {
    float acc[LIN_L] = {0};
    for (int64_t k = 0; k < n; k++) acc[k % LIN_L] = CPU_FMA(x[k], cpu_load(w, dt, k), acc[k % LIN_L]);
    return lin_tree(acc);
}

typedef struct lin_ctx {
    const be_linear *lin;
    const float *x;
    int64_t xs;        /* x row stride (elements) */
    float *y;
    int64_t ys;        /* y row stride (elements) */
    int64_t T;
    int64_t tok_tile;  /* tokens per item */
    int64_t row_tiles; /* items per token tile */
    float *ws;         /* the blocked form's workspace (NULL: the decode form): per thread ws_per_thread floats, */
    size_t ws_per_thread, wt_floats; /* the widened rows (wt_floats) then the accumulators */
} lin_ctx;

/* item's rows [r0, r0 + nr): their weight rows and biases (a tile may straddle parts) */
static int lin_item_rows(const be_linear *lin, int64_t r0, const unsigned char **wrow, float *bias) {
    const int nr = (int)(r0 + LIN_ROWS < lin->out ? LIN_ROWS : lin->out - r0);
    int p = 0;
    for (int i = 0; i < nr; i++) {
        const int64_t r = r0 + i;
        while (r >= lin->parts[p].row0 + lin->parts[p].rows) p++;
        const lin_part *part = &lin->parts[p];
        wrow[i] = part->w + (size_t)(r - part->row0) * part->w_row_bytes;
        bias[i] = part->bias ? cpu_load(part->bias, part->bias_dt, r - part->row0) : 0.0f;
    }
    return nr;
}

/* the register tile shapes as constants, so that each is its own unrolled kernel */
#define LIN_CASES_NT(M, R) M(R, 1) M(R, 2) M(R, 3) M(R, 4) M(R, 5) M(R, 6)

/* Items [i0, i1), a few tokens each: weights read in place, a row at a time for up to LIN_DIRECT_T tokens. */
CPU_INLINE void lin_items_direct(const lin_ctx *c, int64_t i0, int64_t i1, dtype dt) {
    const be_linear *lin = c->lin;
    const unsigned char *wrow[LIN_ROWS];
    float bias[LIN_ROWS], out[LIN_DIRECT_T];
    for (int64_t item = i0; item < i1; item++) {
        const int64_t t0 = item / c->row_tiles * c->tok_tile;
        const int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        const int64_t r0 = item % c->row_tiles * LIN_ROWS;
        const int nr = lin_item_rows(lin, r0, wrow, bias);
        for (int64_t t = t0; t < t1; t += LIN_DIRECT_T) {
            const int nt = t1 - t < LIN_DIRECT_T ? (int)(t1 - t) : LIN_DIRECT_T;
            const float *xr[LIN_DIRECT_T];
            for (int i = 0; i < LIN_DIRECT_T; i++) xr[i] = c->x + (t + (i < nt ? i : 0)) * c->xs;
            for (int i = 0; i < nr; i++) {
                if (nt == 1) lin_tile_direct(1, wrow[i], dt, xr, lin->in, out); /* constant shapes: unrolled */
                else if (nt == 2) lin_tile_direct(2, wrow[i], dt, xr, lin->in, out);
                else lin_tile_direct(3, wrow[i], dt, xr, lin->in, out);
                for (int ti = 0; ti < nt; ti++) c->y[(t + ti) * c->ys + r0 + i] = out[ti] + bias[i];
            }
        }
    }
}

/* Items [i0, i1), many tokens each: the item's weight rows widened to f32 into wt (rows kp floats apart: one
 * sequential read of the rows), then per LIN_KB inputs every token group x row quad of the item runs its
 * register tile over them, the accumulators kept in accb between input blocks. */
CPU_INLINE void lin_items_wide(const lin_ctx *c, int64_t i0, int64_t i1, dtype dt, float *wt, float *accb) {
    const be_linear *lin = c->lin;
    const int64_t kp = (lin->in + LIN_L - 1) / LIN_L * LIN_L;
    const unsigned char *wrow[LIN_ROWS];
    float bias[LIN_ROWS], out[LIN_NT][LIN_MR];
    for (int64_t item = i0; item < i1; item++) {
        const int64_t t0 = item / c->row_tiles * c->tok_tile;
        const int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        const int64_t r0 = item % c->row_tiles * LIN_ROWS;
        const int nr = lin_item_rows(lin, r0, wrow, bias);
        for (int i = 0; i < nr; i++) cpu_widen(wt + i * kp, wrow[i], dt, lin->in);
        for (int64_t kb = 0; kb < lin->in; kb += LIN_KB) {
            const int64_t kn = lin->in - kb < LIN_KB ? lin->in - kb : LIN_KB;
            const bool first = kb == 0, last = kb + kn >= lin->in;
            for (int64_t t = t0, g = 0; t < t1; t += LIN_NT, g++) {
                const int nt = t1 - t < LIN_NT ? (int)(t1 - t) : LIN_NT;
                const float *xr[LIN_NT];
                for (int i = 0; i < LIN_NT; i++) xr[i] = c->x + (t + (i < nt ? i : 0)) * c->xs + kb;
                for (int q = 0; q < nr; q += LIN_MR) {
                    const int R = nr - q < LIN_MR ? nr - q : LIN_MR;
                    float *ab = accb + (g * (LIN_ROWS / LIN_MR) + q / LIN_MR) * (LIN_MR * LIN_NT * LIN_L);
                    const float *w = wt + q * kp + kb;
                    switch (R * 8 + nt) {
#define LIN_WIDE_CASE(RR, NN) \
    case RR * 8 + NN: lin_tile_wide(RR, NN, w, kp, xr, kn, ab, first, last, out); break;
                        LIN_CASES_NT(LIN_WIDE_CASE, 4)
                        LIN_CASES_NT(LIN_WIDE_CASE, 3)
                        LIN_CASES_NT(LIN_WIDE_CASE, 2)
                        LIN_CASES_NT(LIN_WIDE_CASE, 1)
#undef LIN_WIDE_CASE
                    default: break;
                    }
                    if (last)
                        for (int ti = 0; ti < nt; ti++)
                            for (int i = 0; i < R; i++) c->y[(t + ti) * c->ys + r0 + q + i] = out[ti][i] + bias[q + i];
                }
            }
        }
    }
}

static void lin_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    const lin_ctx *c = ctx;
    if (c->ws) { /* the blocked form, in this thread's part of the workspace */
        float *wt = c->ws + (size_t)tid * c->ws_per_thread, *accb = wt + c->wt_floats;
        switch (c->lin->dt) {
        case DTYPE_BF16: lin_items_wide(c, i0, i1, DTYPE_BF16, wt, accb); break;
        case DTYPE_F16: lin_items_wide(c, i0, i1, DTYPE_F16, wt, accb); break;
        default: lin_items_wide(c, i0, i1, DTYPE_F32, wt, accb); break;
        }
        return;
    }
    switch (c->lin->dt) {
    case DTYPE_BF16: lin_items_direct(c, i0, i1, DTYPE_BF16); break;
    case DTYPE_F16: lin_items_direct(c, i0, i1, DTYPE_F16); break;
    default: lin_items_direct(c, i0, i1, DTYPE_F32); break;
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
        .tok_tile = T < LIN_TT ? T : LIN_TT,
    };
    if (T > LIN_DIRECT_T) { /* the blocked form's workspace (without it: the decode form, the same results) */
        const size_t kp = (size_t)(lin->in + LIN_L - 1) / LIN_L * LIN_L;
        c.wt_floats = LIN_ROWS * kp;
        c.ws_per_thread = c.wt_floats + (size_t)(LIN_TT / LIN_NT) * (LIN_ROWS / LIN_MR) * LIN_MR * LIN_NT * LIN_L;
        const size_t need = c.ws_per_thread * (size_t)tp_num_threads(cpu->pool);
        if (need > cpu->lin_ws_cap) {
            free(cpu->lin_ws);
            cpu->lin_ws = aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64);
            cpu->lin_ws_cap = cpu->lin_ws ? need : 0;
        }
        c.ws = cpu->lin_ws;
    }
    const int64_t tok_tiles = (T + c.tok_tile - 1) / c.tok_tile;
    const double cost = (double)LIN_ROWS * (double)c.tok_tile * (double)lin->in;
    tp_run_cost(cpu->pool, tok_tiles * c.row_tiles, cost, lin_task, &c);
}
