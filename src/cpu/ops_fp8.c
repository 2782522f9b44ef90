/*
 * ops_fp8.c: the CPU's FP8_B128 matmul (cpu_quant.h's cpu_fp8_matmul): tensor/fp8.h's arithmetic, threaded.
 *
 * Each x row is quantized per group of 128 (fp8_quantize_act) and kept as the E4M3 values in F32 plus the
 * group scales; a work item is 16 weight rows for a tile of tokens, each weight block decoded once (table
 * look-up) for every token of the tile, the 128 products summed in 16 lanes, then scaled by s_x s_w. A
 * token's result depends on nothing but its own row and the weights: bit-identical for any T, tiling or
 * thread count, and fp8_vec_dot's up to the order of the additions inside a block.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_quant.h"
#include "tensor/fp8.h"

#define F8_ROWS 16
#define F8_MAX_TOK_TILE 16

typedef struct f8_ctx {
    const unsigned char *w;
    size_t w_row_bytes;
    int64_t in, out, T;
    const float *x;
    int64_t xs;
    float *xv;     /* (T, in): the E4M3 values of x's quantization */
    float *xsc;    /* (T, in / 128): their scales */
    float *y;
    int64_t ys;
    int64_t row_tiles, tok_tile;
} f8_ctx;

static void f8_quantize_task(void *vc, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const f8_ctx *c = vc;
    const float *tab = fp8_e4m3_table();
    uint8_t q[FP8_B];
    const int64_t G = c->in / FP8_B;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t g = 0; g < G; g++) {
            fp8_quantize_act(c->x + t * c->xs + g * FP8_B, FP8_B, q, c->xsc + t * G + g);
            float *v = c->xv + t * c->in + g * FP8_B;
            for (int i = 0; i < FP8_B; i++) v[i] = tab[q[i]];
        }
}

static void f8_matmul_task(void *vc, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const f8_ctx *c = vc;
    const float *tab = fp8_e4m3_table();
    const int64_t G = c->in / FP8_B;
    float wf[FP8_B];
    for (int64_t item = i0; item < i1; item++) {
        const int64_t t0 = item / c->row_tiles * c->tok_tile;
        const int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        const int64_t r0 = item % c->row_tiles * F8_ROWS;
        const int64_t r1 = r0 + F8_ROWS < c->out ? r0 + F8_ROWS : c->out;
        for (int64_t r = r0; r < r1; r++) {
            const fp8_block *wb = (const fp8_block *)(const void *)(c->w + (size_t)r * c->w_row_bytes);
            float acc[F8_MAX_TOK_TILE] = {0};
            for (int64_t g = 0; g < G; g++) {
                for (int i = 0; i < FP8_B; i++) wf[i] = tab[wb[g].q[i]];
                const float ws = fp8_block_scale(&wb[g]);
                for (int64_t t = t0; t < t1; t++)
                    acc[t - t0] += cpu_dot128(c->xv + t * c->in + g * FP8_B, wf) * c->xsc[t * G + g] * ws;
            }
            for (int64_t t = t0; t < t1; t++) c->y[t * c->ys + r] = acc[t - t0];
        }
    }
}

vllm_status cpu_fp8_matmul(tp_pool *pool, const void *w, size_t w_row_bytes, int64_t out, int64_t in, const float *x,
                           int64_t x_stride, int64_t T, float *y, int64_t y_stride) {
    if (in <= 0 || in % FP8_B)
        return vt_error(VLLM_ERR_INVALID_ARG, "fp8 matmul: FP8_B128 weights need in (%lld) a positive multiple of %d",
                        (long long)in, FP8_B);
    if (out < 0 || T < 0 || x_stride < in || y_stride < out)
        return vt_error(VLLM_ERR_INVALID_ARG, "fp8 matmul: bad shape (T %lld, out %lld, x stride %lld, y stride %lld)",
                        (long long)T, (long long)out, (long long)x_stride, (long long)y_stride);
    const size_t wrow = (size_t)(in / FP8_B) * sizeof(fp8_block);
    if (w_row_bytes < wrow)
        return vt_error(VLLM_ERR_INVALID_ARG, "fp8 matmul: weight row stride %zu < %zu bytes of a row of %lld",
                        w_row_bytes, wrow, (long long)in);
    if (T == 0 || out == 0) return VLLM_OK;
    if (!w || !x || !y) return vt_error(VLLM_ERR_INVALID_ARG, "fp8 matmul: no data");
    if ((uint64_t)T > SIZE_MAX / 8 / (uint64_t)in)
        return vt_error(VLLM_ERR_INVALID_ARG, "fp8 matmul: %lld activation rows do not fit in memory", (long long)T);
    float *xv = malloc((size_t)T * (size_t)in * sizeof *xv);
    float *xsc = malloc((size_t)T * (size_t)(in / FP8_B) * sizeof *xsc);
    if (!xv || !xsc) {
        free(xv);
        free(xsc);
        return vt_error(VLLM_ERR_NO_MEMORY, "fp8 matmul: out of memory (%lld activation rows)", (long long)T);
    }
    f8_ctx c = {
        .w = w, .w_row_bytes = w_row_bytes, .in = in, .out = out, .T = T, .x = x, .xs = x_stride,
        .xv = xv, .xsc = xsc, .y = y, .ys = y_stride,
        .row_tiles = (out + F8_ROWS - 1) / F8_ROWS,
        .tok_tile = T < F8_MAX_TOK_TILE ? T : F8_MAX_TOK_TILE,
    };
    const int64_t items = (T + c.tok_tile - 1) / c.tok_tile * c.row_tiles;
    if (pool) {
        tp_run_cost(pool, T, (double)in * 4.0, f8_quantize_task, &c);
        tp_run_cost(pool, items, (double)F8_ROWS * (double)c.tok_tile * (double)in, f8_matmul_task, &c);
    } else {
        f8_quantize_task(&c, 0, T, 0);
        f8_matmul_task(&c, 0, items, 0);
    }
    free(xv);
    free(xsc);
    return VLLM_OK;
}
