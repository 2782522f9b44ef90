/* int4.c: AWQ and GPTQ 4-bit packings read back (int4.h). */
#include "tensor/int4.h"

void i4_awq_dequantize(const int32_t *qweight, const int32_t *qzeros, const float *scales, int64_t N, int64_t K,
                       int64_t G, float *w) {
    const int64_t C = N / 8;
    for (int64_t k = 0; k < K; k++) {
        const int64_t g = k / G;
        for (int64_t n = 0; n < N; n++) {
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
    for (int64_t k = 0; k < K; k++) {
        const int64_t g = g_idx ? g_idx[k] : k / G;
        if (g < 0 || g >= groups) return false;
        for (int64_t n = 0; n < N; n++) {
            const int q = (int)(((uint32_t)qweight[(k / 8) * N + n] >> (4 * (k % 8))) & 15u);
            const int z = (int)(((uint32_t)qzeros[g * C + n / 8] >> (4 * (n % 8))) & 15u) + (v1 ? 1 : 0);
            w[n * K + k] = (float)(q - z) * scales[g * N + n];
        }
    }
    return true;
}
