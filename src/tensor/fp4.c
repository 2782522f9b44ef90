/* fp4.c: FP4 E2M1 numbers and NVFP4 row dequantization (fp4.h). */
#include "tensor/fp4.h"

#include <math.h>

#include "tensor/fp8.h"

static const float E2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float fp4_e2m1_to_f32(uint8_t code) {
    const float m = E2M1[code & 7];
    return code & 8 ? -m : m;
}

uint8_t fp4_e2m1_from_f32(float x) {
    const float a = fabsf(x);
    uint8_t best = 0;
    for (uint8_t i = 1; i < 8; i++)
        if (fabsf(a - E2M1[i]) < fabsf(a - E2M1[best])) best = i; /* strict: a tie keeps the smaller */
    if (!(a == a)) best = 0;                                       /* NaN: 0 */
    return (uint8_t)(best | (signbit(x) ? 8 : 0));
}

void nvfp4_dequantize_row(const uint8_t *packed, const uint8_t *scales, float g, bool divide, int64_t K, float *out) {
    const float *e4m3 = fp8_e4m3_table();
    for (int64_t b = 0; b < K / NVFP4_GROUP; b++) {
        const float s = divide ? e4m3[scales[b]] / g : e4m3[scales[b]] * g;
        for (int i = 0; i < NVFP4_GROUP / 2; i++) {
            const uint8_t byte = packed[b * (NVFP4_GROUP / 2) + i];
            out[b * NVFP4_GROUP + 2 * i] = fp4_e2m1_to_f32(byte & 15) * s;
            out[b * NVFP4_GROUP + 2 * i + 1] = fp4_e2m1_to_f32(byte >> 4) * s;
        }
    }
}
