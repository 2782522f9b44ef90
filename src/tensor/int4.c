/* int4.c: AWQ, GPTQ and compressed-tensors 4-bit packings read back, as floats or I4_B128 rows (int4.h). */
#include "tensor/int4.h"

#include <stddef.h>

/* the checkpoints' AWQ / GPTQ words run along N: the conversions walk N in blocks of I4_NB rows, k inside, so the
 * rows' output (K apart) stays in cache */
#define I4_NB 128

void i4_awq_dequantize(const int32_t *qweight, const int32_t *qzeros, const float *scales, int64_t N, int64_t K,
                       int64_t G, float *w) {
    const int64_t C = N / 8;
    for (int64_t n0 = 0; n0 < N; n0 += I4_NB)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = k / G;
            for (int64_t n = n0; n < N && n < n0 + I4_NB; n++) {
                const int sh = 4 * i4_awq_nibble((int)(n % 8));
                const int q = (int)(((uint32_t)qweight[k * C + n / 8] >> sh) & 15u);
                const int z = (int)(((uint32_t)qzeros[g * C + n / 8] >> sh) & 15u);
                w[n * K + k] = (float)(q - z) * scales[g * N + n];
            }
        }
}

bool i4_gptq_dequantize(const int32_t *qweight, const int32_t *qzeros, const float *scales, const int32_t *g_idx,
                        int64_t N, int64_t K, int64_t G, int64_t groups, bool v1, float *w) {
    const int64_t C = N / 8;
    for (int64_t k = 0; k < K; k++)
        if (g_idx && (g_idx[k] < 0 || g_idx[k] >= groups)) return false;
    for (int64_t n0 = 0; n0 < N; n0 += I4_NB)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = g_idx ? g_idx[k] : k / G;
            if (g < 0 || g >= groups) return false;
            for (int64_t n = n0; n < N && n < n0 + I4_NB; n++) {
                const int q = (int)(((uint32_t)qweight[(k / 8) * N + n] >> (4 * (k % 8))) & 15u);
                const int z = (int)(((uint32_t)qzeros[g * C + n / 8] >> (4 * (n % 8))) & 15u) + (v1 ? 1 : 0);
                w[n * K + k] = (float)(q - z) * scales[g * N + n];
            }
        }
    return true;
}

void i4_dequantize_row(const i4_block *b, int64_t K, float *out) {
    for (int64_t k = 0; k < K; k++) {
        const i4_block *bb = &b[k / I4_B];
        const int i = (int)(k % I4_B);
        out[k] = (float)(i4_block_q(bb, i) - (int)bb->z[i / I4_SUB]) * bb->s[i / I4_SUB];
    }
}

bool i4_blocks_fit(const int32_t *g_idx, int64_t K, int64_t G) {
    if (K % I4_B || (!g_idx && G % I4_SUB)) return false;
    for (int64_t k = 0; g_idx && k < K; k++)
        if (g_idx[k - k % I4_SUB] != g_idx[k]) return false;
    return true;
}

/* element (n, k) = (q - z) s into its block (the run's s and z set by its first element) */
static void i4_put(i4_block *out, int64_t K, int64_t n, int64_t k, int q, int z, float s) {
    i4_block *b = &out[n * (K / I4_B) + k / I4_B];
    const int i = (int)(k % I4_B);
    if (i % I4_SUB == 0) {
        b->s[i / I4_SUB] = s;
        b->z[i / I4_SUB] = (uint8_t)z;
    }
    if (i & 1) b->q[i >> 1] = (uint8_t)((b->q[i >> 1] & 15) | (q << 4));
    else b->q[i >> 1] = (uint8_t)q;
}

bool i4_awq_blocks(const int32_t *qweight, const int32_t *qzeros, const float *scales, int64_t N, int64_t K,
                   int64_t G, i4_block *out) {
    if (!i4_blocks_fit(NULL, K, G)) return false;
    const int64_t C = N / 8;
    for (int64_t n0 = 0; n0 < N; n0 += I4_NB)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = k / G;
            for (int64_t n = n0; n < N && n < n0 + I4_NB; n++) {
                const int sh = 4 * i4_awq_nibble((int)(n % 8));
                i4_put(out, K, n, k, (int)(((uint32_t)qweight[k * C + n / 8] >> sh) & 15u),
                       (int)(((uint32_t)qzeros[g * C + n / 8] >> sh) & 15u), scales[g * N + n]);
            }
        }
    return true;
}

bool i4_gptq_blocks(const int32_t *qweight, const int32_t *qzeros, const float *scales, const int32_t *g_idx,
                    int64_t N, int64_t K, int64_t G, int64_t groups, bool v1, i4_block *out) {
    if (!i4_blocks_fit(g_idx, K, G)) return false;
    const int64_t C = N / 8;
    for (int64_t k = 0; k < K; k++)
        if (g_idx && (g_idx[k] < 0 || g_idx[k] >= groups)) return false;
    for (int64_t n0 = 0; n0 < N; n0 += I4_NB)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = g_idx ? g_idx[k] : k / G;
            for (int64_t n = n0; n < N && n < n0 + I4_NB; n++)
                i4_put(out, K, n, k, (int)(((uint32_t)qweight[(k / 8) * N + n] >> (4 * (k % 8))) & 15u),
                       (int)(((uint32_t)qzeros[g * C + n / 8] >> (4 * (n % 8))) & 15u) + (v1 ? 1 : 0),
                       scales[g * N + n]);
        }
    return true;
}

/* element (n, k) of compressed-tensors' packing: its stored nibble (q + 8) and its group (-1: out of range) */
static int i4_ct_q(const int32_t *packed, int64_t K, int64_t n, int64_t k) {
    return (int)(((uint32_t)packed[n * (K / 8) + k / 8] >> (4 * (k % 8))) & 15u);
}

bool i4_ct_dequantize(const int32_t *packed, const float *scales, const int32_t *g_idx, int64_t N, int64_t K, int64_t G,
                      int64_t groups, float *w) {
    for (int64_t k = 0; k < K; k++)
        if (g_idx && (g_idx[k] < 0 || g_idx[k] >= groups)) return false;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = g_idx ? g_idx[k] : k / G;
            w[n * K + k] = (float)(i4_ct_q(packed, K, n, k) - 8) * scales[n * groups + g];
        }
    return true;
}

bool i4_ct_blocks(const int32_t *packed, const float *scales, const int32_t *g_idx, int64_t N, int64_t K, int64_t G,
                  int64_t groups, i4_block *out) {
    if (!i4_blocks_fit(g_idx, K, G)) return false;
    for (int64_t k = 0; g_idx && k < K; k++)
        if (g_idx[k] < 0 || g_idx[k] >= groups) return false;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = g_idx ? g_idx[k] : k / G;
            i4_put(out, K, n, k, i4_ct_q(packed, K, n, k), 8, scales[n * groups + g]);
        }
    return true;
}
