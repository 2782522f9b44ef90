/*
 * test_fp8.c: E4M3 numbers and the FP8_B128 arithmetic (src/tensor/fp8.h), and the CPU's FP8 matmul
 * (cpu_fp8_matmul) against it.
 *
 *   - known values of the format (OCP FP8 E4M3 "fn": bias 7, subnormals m / 8 * 2^-6, max 448, NaN S.1111.111);
 *   - every finite byte survives decode then encode; midpoints of neighbours round to the even one (torch's
 *     cast); beyond 448 saturates (vLLM clamps before casting), NaN encodes as 0x7f;
 *   - the activation quantizer (per_token_group_quant_fp8: s = max(max|x|, 1e-10) / 448) on hand-made groups;
 *   - weight rows quantized with given scales dequantize to the table values times the scales;
 *   - cpu_fp8_matmul against fp8_vec_dot on random rows, 1 and 3 threads bit-identical, T = 1 vs T = 7.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_quant.h"
#include "core/threadpool.h"
#include "tensor/fp8.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static void test_values(void) {
    CHECK(fp8_e4m3_to_f32(0x00) == 0.0f && !signbit(fp8_e4m3_to_f32(0x00)));
    CHECK(fp8_e4m3_to_f32(0x80) == 0.0f && signbit(fp8_e4m3_to_f32(0x80)));
    CHECK(fp8_e4m3_to_f32(0x01) == 0x1p-9f);       /* smallest subnormal */
    CHECK(fp8_e4m3_to_f32(0x07) == 7 * 0x1p-9f);   /* largest subnormal */
    CHECK(fp8_e4m3_to_f32(0x08) == 0x1p-6f);       /* smallest normal */
    CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
    CHECK(fp8_e4m3_to_f32(0x39) == 1.125f);
    CHECK(fp8_e4m3_to_f32(0x40) == 2.0f);
    CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f && fp8_e4m3_to_f32(0xfe) == -448.0f);
    CHECK(isnan(fp8_e4m3_to_f32(0x7f)) && isnan(fp8_e4m3_to_f32(0xff)));
    CHECK(fp8_e4m3_to_f32(0x77) == 240.0f); /* e 14, m 7: 1.875 * 2^7 */
    const float *t = fp8_e4m3_table();
    for (int b = 0; b < 256; b++) {
        const float v = fp8_e4m3_to_f32((uint8_t)b);
        CHECK(isnan(v) ? isnan(t[b]) : t[b] == v);
        if (!isnan(v)) CHECK_MSG(fp8_e4m3_from_f32(v) == b, "byte 0x%02x (%g) -> 0x%02x", b, v, fp8_e4m3_from_f32(v));
    }
    /* the positive values increase with the byte: the midpoint of two neighbours goes to the even byte,
     * anything off the midpoint to the nearer */
    for (int b = 0; b < 0x7e; b++) {
        const float lo = t[b], hi = t[b + 1], mid = (lo + hi) / 2;
        CHECK(lo < hi);
        CHECK_MSG(fp8_e4m3_from_f32(mid) == (b % 2 ? b + 1 : b), "midpoint of 0x%02x", b);
        CHECK(fp8_e4m3_from_f32(nextafterf(mid, 0)) == b && fp8_e4m3_from_f32(nextafterf(mid, 1e9f)) == b + 1);
        CHECK(fp8_e4m3_from_f32(-mid) == (0x80 | (b % 2 ? b + 1 : b)));
    }
    CHECK(fp8_e4m3_from_f32(449.0f) == 0x7e && fp8_e4m3_from_f32(1e30f) == 0x7e && fp8_e4m3_from_f32(INFINITY) == 0x7e);
    CHECK(fp8_e4m3_from_f32(-500.0f) == 0xfe && fp8_e4m3_from_f32(-INFINITY) == 0xfe);
    CHECK(fp8_e4m3_from_f32(NAN) == 0x7f);
    CHECK(fp8_e4m3_from_f32(0x1p-11f) == 0x00);        /* a quarter of the smallest subnormal */
    CHECK(fp8_e4m3_from_f32(0x1p-10f) == 0x00);        /* half of it: ties to even (0) */
    CHECK(fp8_e4m3_from_f32(3 * 0x1p-10f) == 0x02);    /* 1.5 subnormal steps: to 2 */
}

static void test_act(void) {
    float x[2 * FP8_B], s[2];
    uint8_t q[2 * FP8_B];
    for (int i = 0; i < FP8_B; i++) x[i] = (float)(i - 64) / 64.0f * 896.0f; /* max |x| 896: s = 2 */
    for (int i = 0; i < FP8_B; i++) x[FP8_B + i] = 0.0f;                     /* all zero: s = 1e-10 / 448 */
    fp8_quantize_act(x, 2 * FP8_B, q, s);
    CHECK(s[0] == 2.0f);
    CHECK_NEAR(s[1], 1e-10 / 448.0, 1e-20);
    for (int i = 0; i < FP8_B; i++) CHECK(q[i] == fp8_e4m3_from_f32(x[i] / 2.0f));
    CHECK(q[0] == 0xfe); /* -896 / 2 */
    for (int i = 0; i < FP8_B; i++) CHECK(q[FP8_B + i] == 0);
}

static void test_rows(void) {
    enum { N = 3 * FP8_B };
    float w[N], y[N];
    const float sc[3] = {0.5f, 0.0f, 3.0f};
    fp8_block b[3];
    for (int i = 0; i < N; i++) w[i] = frand() * 100.0f;
    fp8_quantize_row(w, N, sc, b);
    fp8_dequantize_row(b, y, N);
    const float *t = fp8_e4m3_table();
    for (int j = 0; j < 3; j++) {
        CHECK(fp8_block_scale(&b[j]) == sc[j]);
        for (int i = 0; i < FP8_B; i++) {
            CHECK(y[j * FP8_B + i] == t[b[j].q[i]] * sc[j]);
            if (sc[j] != 0.0f) CHECK(b[j].q[i] == fp8_e4m3_from_f32(w[j * FP8_B + i] / sc[j]));
        }
    }
    /* own scales: max |w| / 448, within E4M3's half-ulp (2^-4 relative) of w */
    fp8_quantize_row(w, N, NULL, b);
    fp8_dequantize_row(b, y, N);
    for (int i = 0; i < N; i++) CHECK(fabsf(y[i] - w[i]) <= fabsf(w[i]) / 16.0f + fp8_block_scale(&b[i / FP8_B]) * 0x1p-9f);
}

static void test_matmul(void) {
    const int64_t out = 21, in = 3 * FP8_B, T = 7, xs = in + 5, ys = out + 3;
    fp8_block *w = malloc((size_t)(out * in / FP8_B) * sizeof *w);
    float *row = malloc((size_t)in * sizeof *row), *x = malloc((size_t)(T * xs) * sizeof *x);
    for (int64_t r = 0; r < out; r++) {
        for (int64_t i = 0; i < in; i++) row[i] = frand() * (r % 3 ? 1.0f : 1e-3f);
        fp8_quantize_row(row, in, NULL, w + r * (in / FP8_B));
    }
    for (int64_t i = 0; i < T * xs; i++) x[i] = frand() * 4.0f;
    float *y[3];
    tp_pool *pool = NULL;
    CHECK_OK(tp_create(3, &pool));
    for (int k = 0; k < 3; k++) {
        y[k] = calloc((size_t)(T * ys), sizeof(float));
        if (k < 2) CHECK_OK(cpu_fp8_matmul(k ? pool : NULL, w, (size_t)(in / FP8_B) * sizeof *w, out, in, x, xs, T, y[k], ys));
        else
            for (int64_t t = 0; t < T; t++) /* one token at a time */
                CHECK_OK(cpu_fp8_matmul(pool, w, (size_t)(in / FP8_B) * sizeof *w, out, in, x + t * xs, xs, 1,
                                        y[k] + t * ys, ys));
    }
    CHECK(!memcmp(y[0], y[1], (size_t)(T * ys) * sizeof(float)) && !memcmp(y[0], y[2], (size_t)(T * ys) * sizeof(float)));
    uint8_t q[3 * FP8_B];
    float s[3];
    double maxe = 0;
    for (int64_t t = 0; t < T; t++) {
        fp8_quantize_act(x + t * xs, in, q, s);
        for (int64_t r = 0; r < out; r++) {
            const double ref = fp8_vec_dot(w + r * (in / FP8_B), q, s, in);
            const double e = fabs(y[0][t * ys + r] - ref) / (1e-3 + fabs(ref));
            if (e > maxe) maxe = e;
        }
    }
    CHECK_MSG(maxe < 1e-5, "relative error %g", maxe);
    CHECK(y[0][out] == 0.0f); /* past out: untouched */
    EXPECT_ERR(cpu_fp8_matmul(NULL, w, 10, out, in, x, xs, T, y[0], ys), VLLM_ERR_INVALID_ARG, "row stride", "");
    EXPECT_ERR(cpu_fp8_matmul(NULL, w, 1000, out, 100, x, xs, T, y[0], ys), VLLM_ERR_INVALID_ARG, "multiple of 128", "");
    tp_free(pool);
    for (int k = 0; k < 3; k++) free(y[k]);
    free(w), free(row), free(x);
}

int main(void) {
    test_values();
    test_act();
    test_rows();
    test_matmul();
    TEST_END();
}
