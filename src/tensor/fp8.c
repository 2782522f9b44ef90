/* fp8.c: E4M3 conversions and the FP8_B128 reference arithmetic (fp8.h). */
#include "tensor/fp8.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

float fp8_e4m3_to_f32(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) v = ldexpf((float)m, -9); /* m / 8 * 2^-6 */
    else v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return b & 0x80 ? -v : v;
}

static float g_table[256];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
    for (int i = 0; i < 256; i++) g_table[i] = fp8_e4m3_to_f32((uint8_t)i);
}

const float *fp8_e4m3_table(void) {
    pthread_once(&g_table_once, table_init);
    return g_table;
}

uint8_t fp8_e4m3_from_f32(float x) {
    if (isnan(x)) return 0x7f;
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const float a = fabsf(x);
    if (a >= FP8_E4M3_MAX) return sign | 0x7e;
    if (a < 0x1p-6f) /* subnormal: multiples of 2^-9; 8 * 2^-9 rounds up into the smallest normal, 0x08 */
        return sign | (uint8_t)nearbyintf(a * 0x1p9f);
    int e;
    const float f = frexpf(a, &e); /* a = f 2^e, f in [0.5, 1) */
    int ex = e - 1;                /* a = (2 f) 2^ex, 2 f in [1, 2) */
    int mq = (int)nearbyintf((2.0f * f - 1.0f) * 8.0f); /* exact products; the default mode rounds ties to even */
    if (mq == 8) mq = 0, ex++;
    /* ex <= 8 here (a < 448); 448 <= a was saturated above, and (1 + 7/8) 2^8 = 480 is never reached */
    return sign | (uint8_t)((ex + 7) << 3 | mq);
}

float fp8_block_scale(const fp8_block *b) {
    float s;
    memcpy(&s, b->d, 4);
    return s;
}

void fp8_block_set_scale(fp8_block *b, float s) { memcpy(b->d, &s, 4); }

void fp8_quantize_act(const float *x, int64_t n, uint8_t *q, float *s) {
    for (int64_t g = 0; g < n / FP8_B; g++) {
        const float *xg = x + g * FP8_B;
        float amax = 0.0f;
        for (int i = 0; i < FP8_B; i++) amax = fmaxf(amax, fabsf(xg[i]));
        const float d = fmaxf(amax, FP8_ACT_EPS) / FP8_E4M3_MAX;
        s[g] = d;
        for (int i = 0; i < FP8_B; i++) q[g * FP8_B + i] = fp8_e4m3_from_f32(xg[i] / d);
    }
}

void fp8_quantize_row(const float *w, int64_t n, const float *s, fp8_block *out) {
    for (int64_t j = 0; j < n / FP8_B; j++) {
        const float *wj = w + j * FP8_B;
        float d;
        if (s) {
            d = s[j];
        } else {
            float amax = 0.0f;
            for (int i = 0; i < FP8_B; i++) amax = fmaxf(amax, fabsf(wj[i]));
            d = amax > 0.0f ? amax / FP8_E4M3_MAX : 1.0f;
        }
        for (int i = 0; i < FP8_B; i++) out[j].q[i] = d != 0.0f ? fp8_e4m3_from_f32(wj[i] / d) : 0;
        fp8_block_set_scale(&out[j], d);
    }
}

void fp8_dequantize_row(const fp8_block *b, float *y, int64_t n) {
    const float *t = fp8_e4m3_table();
    for (int64_t j = 0; j < n / FP8_B; j++) {
        const float d = fp8_block_scale(&b[j]);
        for (int i = 0; i < FP8_B; i++) y[j * FP8_B + i] = t[b[j].q[i]] * d;
    }
}

float fp8_vec_dot(const fp8_block *w, const uint8_t *xq, const float *xs, int64_t n) {
    const float *t = fp8_e4m3_table();
    float acc = 0.0f;
    for (int64_t j = 0; j < n / FP8_B; j++) {
        float dot = 0.0f;
        for (int i = 0; i < FP8_B; i++) dot += t[xq[j * FP8_B + i]] * t[w[j].q[i]];
        acc += dot * xs[j] * fp8_block_scale(&w[j]);
    }
    return acc;
}
