/*
 * test_linear_blocks.c: the CPU backend's linear, experts and embedding ops on ggml block-type weights
 * (GGUF matrices used as they are), FP8_B128 (block-scaled FP8 checkpoints) and I4_B128 (AWQ / GPTQ /
 * compressed-tensors 4-bit, against the dequantized values and x as it is): every type the backend says
 * it runs (backend.native_blocks) against the reference of tensor/ggml_quant.h (each output = gq_vec_dot of
 * the weight row with the token's activation quantized to the type's partner, plus the bias) or tensor/fp8.h
 * (fp8_vec_dot with the activation quantized per 128 as vLLM does), with several parts, biases, strided x / y
 * and 1 vs 4 threads (bit-identical); an embedding table of blocks gathers the dequantized rows; the
 * block dtypes' byte sizes and row views; and refusals (rows of partial blocks, a strided block weight).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "tensor/ggml_dtype.h"
#include "tensor/fp8.h"
#include "tensor/int4.h"
#include "tensor/ggml_quant.h"

/* I4_B128 from floats: per 32, min / max (AWQ's pseudo_quantize_tensor): s = (max - min) / 15, z = round(-min / s)
 * clamped to [0, 15], q = clamp(round(x / s) + z, 0, 15) */
static void i4_quantize_row(const float *x, i4_block *b, int64_t n) {
    memset(b, 0, (size_t)(n / I4_B) * sizeof *b);
    for (int64_t r = 0; r < n / I4_SUB; r++) {
        const float *v = x + r * I4_SUB;
        float mn = v[0], mx = v[0];
        for (int i = 1; i < I4_SUB; i++) mn = v[i] < mn ? v[i] : mn, mx = v[i] > mx ? v[i] : mx;
        const float s = (mx - mn) > 1e-5f ? (mx - mn) / 15.0f : 1e-5f / 15.0f;
        float z = roundf(-mn / s);
        z = z < 0 ? 0 : z > 15 ? 15 : z;
        i4_block *k = &b[r * I4_SUB / I4_B];
        const int j = (int)(r % (I4_B / I4_SUB));
        k->s[j] = s;
        k->z[j] = (uint8_t)z;
        for (int i = 0; i < I4_SUB; i++) {
            float q = roundf(v[i] / s) + z;
            q = q < 0 ? 0 : q > 15 ? 15 : q;
            const int e = j * I4_SUB + i;
            k->q[e / 2] |= (uint8_t)((int)q << (4 * (e & 1)));
        }
    }
}

/* the references by block family: ggml's types (ggml_quant.h), FP8_B128 (fp8.h) or I4_B128 (int4.h) */
static bool blk_quantize(dtype dt, const float *x, void *w, int64_t n) {
    ggml_type gt = GGML_TYPE_F32;
    if (dt == DTYPE_FP8_B128) return fp8_quantize_row(x, n, NULL, w), true;
    if (dt == DTYPE_I4_B128) return i4_quantize_row(x, w, n), true;
    return dtype_to_ggml(dt, &gt) && gq_quantize_row(gt, x, w, n);
}

static bool blk_dequantize(dtype dt, const void *w, float *y, int64_t n) {
    ggml_type gt = GGML_TYPE_F32;
    if (dt == DTYPE_FP8_B128) return fp8_dequantize_row(w, y, n), true;
    if (dt == DTYPE_I4_B128) return i4_dequantize_row(w, n, y), true;
    return dtype_to_ggml(dt, &gt) && gq_dequantize_row(gt, w, y, n);
}

/* weight row w . x: x quantized as the type's partner (ggml) or per 128 (FP8, as vLLM) */
static double blk_dot(dtype dt, const void *w, const float *x, int64_t n) {
    if (dt == DTYPE_I4_B128) { /* weight-only: x as it is */
        float *v = malloc((size_t)n * sizeof *v);
        i4_dequantize_row(w, n, v);
        double d = 0;
        for (int64_t i = 0; i < n; i++) d += (double)v[i] * x[i];
        free(v);
        return d;
    }
    if (dt == DTYPE_FP8_B128) {
        uint8_t *q = malloc((size_t)n);
        float *s = malloc((size_t)(n / FP8_B) * sizeof *s);
        fp8_quantize_act(x, n, q, s);
        const double d = fp8_vec_dot(w, q, s, n);
        free(q), free(s);
        return d;
    }
    ggml_type gt = GGML_TYPE_F32;
    CHECK(dtype_to_ggml(dt, &gt));
    const ggml_type at = gq_vec_dot_type(gt);
    unsigned char *xq = malloc(gq_row_bytes(at, n));
    CHECK(gq_quantize_row(at, x, xq, n));
    const double d = gq_vec_dot(gt, w, xq, n);
    free(xq);
    return d;
}

static void run_type(backend *be[CT_NBE], dtype dt) {
    const int64_t blk = dtype_block(dt), in = 2 * blk + (blk == 32 ? 3 * 32 : 0), T = 5;
    const int64_t outs[2] = {7, 18}, out = outs[0] + outs[1];
    const size_t rb = (size_t)(in / blk) * dtype_size(dt);
    ggml_type gt = GGML_TYPE_F32;
    if (dtype_to_ggml(dt, &gt)) CHECK(rb == gq_row_bytes(gt, in));
    else if (dt == DTYPE_I4_B128) CHECK(rb == (size_t)(in / I4_B) * sizeof(i4_block) && sizeof(i4_block) == 84);
    else CHECK(dt == DTYPE_FP8_B128 && rb == (size_t)(in / FP8_B) * sizeof(fp8_block));
    unsigned char *w[2];
    tensor wt[2], bt;
    float *bias = malloc((size_t)outs[1] * sizeof *bias), *row = malloc((size_t)in * sizeof *row);
    ct_fill(bias, outs[1], 1.0f);
    for (int p = 0; p < 2; p++) {
        w[p] = malloc(rb * (size_t)outs[p]);
        for (int64_t r = 0; r < outs[p]; r++) {
            ct_fill(row, in, 1.0f);
            CHECK(blk_quantize(dt, row, w[p] + (size_t)r * rb, in));
        }
        wt[p] = tensor_2d(dt, w[p], outs[p], in);
        CHECK(tensor_nbytes(&wt[p]) == rb * (size_t)outs[p]);
    }
    bt = tensor_1d(DTYPE_F32, bias, outs[1]);
    const tensor *wp[2] = {&wt[0], &wt[1]}, *bp[2] = {NULL, &bt};
    /* x (T, in) as a column view of (T, in + 6), y (T, out) of (T, out + 2) */
    const int64_t xw = in + 6, yw = out + 2;
    float *xbuf = malloc((size_t)(T * xw) * sizeof *xbuf);
    ct_fill(xbuf, T * xw, 1.0f);
    tensor xfull = tensor_2d(DTYPE_F32, xbuf, T, xw), x = tensor_cols(&xfull, 3, in);
    /* reference */
    double *ref = malloc((size_t)(T * out) * sizeof *ref);
    for (int64_t t = 0; t < T; t++)
        for (int p = 0, r0 = 0; p < 2; r0 += (int)outs[p], p++)
            for (int64_t r = 0; r < outs[p]; r++)
                ref[t * out + r0 + r] = blk_dot(dt, w[p] + (size_t)r * rb, xbuf + t * xw + 3, in) + (p ? bias[r] : 0.0f);
    float *y[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        CHECK(be[b]->native_blocks >> (dt - DTYPE_FIRST_BLOCK) & 1u);
        be_linear *lin = NULL;
        CHECK_MSG(be[b]->ops->linear_create(be[b], wp, bp, 2, &lin) == VLLM_OK, "%s: %s", dtype_name(dt), vllm_last_error());
        y[b] = calloc((size_t)(T * yw), sizeof(float));
        tensor yfull = tensor_2d(DTYPE_F32, y[b], T, yw), yv = tensor_cols(&yfull, 1, out);
        be[b]->ops->linear(be[b], lin, &x, &yv);
        CHECK(be[b]->ops->synchronize(be[b]) == VLLM_OK);
        double maxe = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = 0; r < out; r++) {
                const double e = fabs(y[b][t * yw + 1 + r] - ref[t * out + r]) / (1.0 + fabs(ref[t * out + r]));
                if (e > maxe) maxe = e;
            }
        CHECK_MSG(maxe < 1e-4, "%s backend %d: relative error %g", dtype_name(dt), b, maxe);
        be[b]->ops->linear_free(be[b], lin);
        if (b) CHECK_MSG(!memcmp(y[b], y[0], (size_t)(T * yw) * sizeof(float)), "%s: threads change the result", dtype_name(dt));
    }
    /* an embedding table of blocks: the rows dequantized */
    int32_t ids[3] = {4, 0, 6};
    tensor idt = tensor_1d(DTYPE_I32, ids, 3);
    float *emb = malloc((size_t)(3 * in) * sizeof *emb);
    tensor et = tensor_2d(DTYPE_F32, emb, 3, in);
    be[0]->ops->embedding(be[0], &wt[0], &idt, &et);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_OK);
    for (int i = 0; i < 3; i++) {
        CHECK(blk_dequantize(dt, w[0] + (size_t)ids[i] * rb, row, in));
        CHECK_MSG(!memcmp(row, emb + i * in, (size_t)in * sizeof *row), "%s embedding row %d", dtype_name(dt), i);
    }
    /* a row view of a block tensor starts at its row's blocks */
    tensor r2 = tensor_rows(&wt[1], 2, 3);
    CHECK((unsigned char *)r2.data == w[1] + 2 * rb);
    /* rows of partial blocks and strided block weights are refused */
    tensor bad = tensor_2d(dt, w[0], outs[0], in - 1);
    const tensor *badp[1] = {&bad};
    be_linear *lin = NULL;
    CHECK(be[0]->ops->linear_create(be[0], badp, NULL, 1, &lin) == VLLM_ERR_INVALID_ARG && !lin);
    tensor strided = wt[0];
    strided.row_stride = in + 1;
    badp[0] = &strided;
    CHECK(be[0]->ops->linear_create(be[0], badp, NULL, 1, &lin) == VLLM_ERR_INVALID_ARG && !lin);
    for (int b = 0; b < CT_NBE; b++) free(y[b]);
    free(emb), free(ref), free(xbuf), free(bias), free(row), free(w[0]), free(w[1]);
}

int main(void) {
    backend *be[CT_NBE];
    ct_backends(be);
    for (int d = DTYPE_FIRST_BLOCK; d < DTYPE_COUNT; d++) run_type(be, (dtype)d);
    ct_backends_free(be);
    TEST_END();
}
