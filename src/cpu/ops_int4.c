/*
 * ops_int4.c: the CPU's I4_B128 matmul (cpu_quant.h's cpu_i4_matmul): AWQ / GPTQ / compressed-tensors 4-bit
 * weights kept 4-bit (tensor/int4.h), threaded.
 *
 * A work item is 16 weight rows for a tile of tokens; each block of a row is decoded once per tile into 128
 * floats (q - z) s (the F32 copy's values exactly), then dotted with each token's x in 16 lanes and a fixed
 * tree. A token's result depends only on its own row and the weights: bit-identical for any T, tiling or
 * thread count; against the float layer of the dequantized values (F32 copies) only the order of the
 * additions differs.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_quant.h"
#include "tensor/int4.h"

#define I4_ROWS 16
#define I4_MAX_TOK_TILE 16

typedef struct i4_ctx {
    const unsigned char *w;
    size_t w_row_bytes;
    int64_t in, out, T;
    const float *x;
    int64_t xs;
    float *y;
    int64_t ys;
    int64_t row_tiles, tok_tile;
} i4_ctx;

static void i4_matmul_task(void *vc, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const i4_ctx *c = vc;
    const int64_t NB = c->in / I4_B;
    float wf[I4_B];
    for (int64_t item = i0; item < i1; item++) {
        const int64_t t0 = item / c->row_tiles * c->tok_tile;
        const int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        const int64_t r0 = item % c->row_tiles * I4_ROWS;
        const int64_t r1 = r0 + I4_ROWS < c->out ? r0 + I4_ROWS : c->out;
        for (int64_t r = r0; r < r1; r++) {
            const i4_block *wb = (const i4_block *)(const void *)(c->w + (size_t)r * c->w_row_bytes);
            float acc[I4_MAX_TOK_TILE] = {0};
            for (int64_t b = 0; b < NB; b++) {
                i4_dequantize_row(&wb[b], I4_B, wf);
                for (int64_t t = t0; t < t1; t++) acc[t - t0] += cpu_dot128(c->x + t * c->xs + b * I4_B, wf);
            }
            for (int64_t t = t0; t < t1; t++) c->y[t * c->ys + r] = acc[t - t0];
        }
    }
}

vllm_status cpu_i4_matmul(tp_pool *pool, const void *w, size_t w_row_bytes, int64_t out, int64_t in, const float *x,
                          int64_t x_stride, int64_t T, float *y, int64_t y_stride) {
    if (in <= 0 || in % I4_B)
        return vt_error(VLLM_ERR_INVALID_ARG, "int4 matmul: I4_B128 weights need in (%lld) a positive multiple of %d",
                        (long long)in, I4_B);
    if (out < 0 || T < 0 || x_stride < in || y_stride < out)
        return vt_error(VLLM_ERR_INVALID_ARG, "int4 matmul: bad shape (T %lld, out %lld, x stride %lld, y stride %lld)",
                        (long long)T, (long long)out, (long long)x_stride, (long long)y_stride);
    const size_t wrow = (size_t)(in / I4_B) * sizeof(i4_block);
    if (w_row_bytes < wrow)
        return vt_error(VLLM_ERR_INVALID_ARG, "int4 matmul: weight row stride %zu < %zu bytes of a row of %lld",
                        w_row_bytes, wrow, (long long)in);
    if (T == 0 || out == 0) return VLLM_OK;
    if (!w || !x || !y) return vt_error(VLLM_ERR_INVALID_ARG, "int4 matmul: no data");
    i4_ctx c = {
        .w = w, .w_row_bytes = w_row_bytes, .in = in, .out = out, .T = T, .x = x, .xs = x_stride, .y = y,
        .ys = y_stride, .row_tiles = (out + I4_ROWS - 1) / I4_ROWS,
        .tok_tile = T < I4_MAX_TOK_TILE ? T : I4_MAX_TOK_TILE,
    };
    const int64_t items = (T + c.tok_tile - 1) / c.tok_tile * c.row_tiles;
    if (pool) tp_run_cost(pool, items, (double)I4_ROWS * (double)c.tok_tile * (double)in, i4_matmul_task, &c);
    else i4_matmul_task(&c, 0, items, 0);
    return VLLM_OK;
}
