/* mxfp4.c: MXFP4 blocks and e8m0 scales dequantized to BF16 (model/mxfp4.h). */
#include "model/mxfp4.h"

#include <math.h>

#include "tensor/tensor.h"

/* transformers' FP4_VALUES (integrations/mxfp4.py): the e2m1 codes 0..15 */
static const float E2M1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float mxfp4_e2m1(unsigned code) { return E2M1[code & 15u]; }

void mxfp4_dequant_row(const uint8_t *blocks, const uint8_t *scales, int64_t groups, uint16_t *out) {
    for (int64_t g = 0; g < groups; g++) {
        /* torch.ldexp(lut[idx], scale - 127): exact in f32 and BF16 (same exponent range; 2^-127 * 0.5
         * is a subnormal of both) */
        const int e = (int)scales[g] - 127;
        const uint8_t *b = blocks + g * MXFP4_BLOCK_BYTES;
        uint16_t *o = out + g * MXFP4_BLOCK;
        for (int j = 0; j < MXFP4_BLOCK_BYTES; j++) {
            o[2 * j] = f32_to_bf16(ldexpf(E2M1[b[j] & 15u], e));
            o[2 * j + 1] = f32_to_bf16(ldexpf(E2M1[b[j] >> 4], e));
        }
    }
}
