/*
 * mxfp4.h: MXFP4 (OCP microscaling: blocks of 32 FP4 e2m1 values sharing one e8m0 scale) dequantized to
 * BF16 on the host, as gpt-oss's original checkpoints store their experts (`*_blocks` U8 (..., G, 16), two
 * values a byte, and `*_scales` U8 (..., G)) and as transformers' convert_moe_packed_tensors
 * (integrations/mxfp4.py) unpacks them: value 2j of a block is the low nibble of byte j, value 2j + 1 its
 * high nibble, each FP4_VALUES[nibble] * 2^(scale - 127).
 */
#ifndef VLLM_MODEL_MXFP4_H
#define VLLM_MODEL_MXFP4_H

#include <stdint.h>

#define MXFP4_BLOCK 32          /* values per scale */
#define MXFP4_BLOCK_BYTES 16    /* bytes per block */

/* The e2m1 value of a 4-bit code: +0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negated (code 8 is -0). */
float mxfp4_e2m1(unsigned code);

/* One row of G blocks: out (G * 32) BF16 = blocks (G, 16), scales (G). */
void mxfp4_dequant_row(const uint8_t *blocks, const uint8_t *scales, int64_t groups, uint16_t *out);

#endif
