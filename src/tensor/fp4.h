/*
 * fp4.h: FP4 E2M1 numbers and NVFP4 weights, plain reference code (prefix fp4_ / nvfp4_).
 *
 * E2M1 (OCP FP4, torch.float4_e2m1fn_x2's element): a sign bit (bit 3) and the magnitudes 0, 0.5, 1, 1.5, 2, 3,
 * 4, 6 (bits 0-2 index them). NVFP4 weights (compressed-tensors' nvfp4-pack-quantized, NVIDIA ModelOpt's NVFP4)
 * store W (N, K) as N rows of K / 2 bytes, element 2 i of a row in the low nibble of byte i and 2 i + 1 in the high
 * one (compressed-tensors' pack_fp4_to_uint8), one E4M3 scale per 16 elements of a row ((N, K / 16)), and one F32
 * global scale per matrix: compressed-tensors stores its inverse (W = q * (s / weight_global_scale): its
 * dequantize, and vLLM's CompressedTensorsW4A16Fp4, which takes 1 / weight_global_scale), ModelOpt the factor
 * itself (W = q * (s * weight_scale_2): vLLM's ModelOptNvFp4LinearMethod).
 */
#ifndef VLLM_TENSOR_FP4_H
#define VLLM_TENSOR_FP4_H

#include <stdbool.h>
#include <stdint.h>

#define NVFP4_GROUP 16 /* elements per E4M3 scale */

/* The value of an E2M1 code (its low 4 bits). */
float fp4_e2m1_to_f32(uint8_t code);
/* x rounded to the nearest E2M1 code (a tie to the smaller magnitude, as compressed-tensors' argmin), saturating at
 * +-6; for tests and tools. */
uint8_t fp4_e2m1_from_f32(float x);

/* One row of K values (K % 16 == 0) of an NVFP4 weight: packed (K / 2 bytes), scales (K / 16 E4M3 bytes) ->
 * out[k] = e2m1 * (scale / g) when divide (compressed-tensors), else e2m1 * (scale * g) (ModelOpt). */
void nvfp4_dequantize_row(const uint8_t *packed, const uint8_t *scales, float g, bool divide, int64_t K, float *out);

#endif
