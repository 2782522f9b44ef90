/*
 * fp8.h: FP8 E4M3 numbers and the FP8_B128 weight blocks on the CPU, plain reference code (prefix fp8_).
 *
 * E4M3 ("e4m3fn", the OCP FP8 format of torch.float8_e4m3fn and safetensors' F8_E4M3): 1 sign bit, 4
 * exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (m / 8 * 2^-6); no infinities, S.1111.111
 * is NaN, so the largest finite value is 448 (S.1111.110).
 *
 * Block-scaled FP8 checkpoints (config.json quantization_config {"quant_method": "fp8",
 * "weight_block_size": [bn, bk]}: Qwen3-*-FP8, DeepSeek-V3) store W (N, K) as F8_E4M3 values q with an F32
 * weight_scale_inv (ceil(N / bn), ceil(K / bk)); W[n][k] = q[n][k] * s[n / bn][k / bk]. vLLM multiplies them
 * with activations quantized on the fly per token and group of 128 along K (per_token_group_quant_fp8 in
 * vllm/model_executor/layers/quantization/utils/fp8_utils.py: s = max(max|x|, 1e-10) / 448,
 * q = e4m3(clamp(x / s, -448, 448)), round to nearest even), summing q_x q_w per group and scaling each group
 * by s_x s_w (w8a8_block_fp8_matmul). fp8_quantize_act and fp8_vec_dot are that arithmetic.
 *
 * FP8_B128 (tensor.h) is the row layout vllm.c loads such weights into: each row of K elements (K % 128 ==
 * 0) is K / 128 blocks of fp8_block, the 128 values of elements 128 j .. then the F32 scale of that block
 * (the checkpoint's scale of the row's block (n / bn, j) when bk is 128).
 */
#ifndef VLLM_TENSOR_FP8_H
#define VLLM_TENSOR_FP8_H

#include <stdbool.h>
#include <stdint.h>

#define FP8_B 128              /* elements per FP8_B128 block, and vLLM's activation group */
#define FP8_E4M3_MAX 448.0f
#define FP8_ACT_EPS 1e-10f     /* per_token_group_quant_fp8's eps */

/* One FP8_B128 block: 132 bytes, alignment 1 (the scale as 4 little-endian bytes of an F32). */
typedef struct fp8_block {
    uint8_t q[FP8_B];
    uint8_t d[4];
} fp8_block;

/* The value of an E4M3 byte (NaN for 0x7f / 0xff). */
float fp8_e4m3_to_f32(uint8_t b);
/* The 256 values of fp8_e4m3_to_f32, a table built once (thread-safe). */
const float *fp8_e4m3_table(void);
/* x rounded to E4M3: to nearest, ties to even (torch's cast), saturating at +-448 (the clamp vLLM and
 * transformers apply before casting); NaN gives 0x7f. */
uint8_t fp8_e4m3_from_f32(float x);

/* The scale of an FP8_B128 block. */
float fp8_block_scale(const fp8_block *b);
void fp8_block_set_scale(fp8_block *b, float s);

/* Activation row x (n floats, n % 128 == 0) -> q (n E4M3 bytes) and s (n / 128 scales), as
 * per_token_group_quant_fp8 with group 128. */
void fp8_quantize_act(const float *x, int64_t n, uint8_t *q, float *s);

/* Weight row w (n floats, n % 128 == 0) -> n / 128 blocks, block j with scale s[j] (values w / s[j] rounded
 * as fp8_e4m3_from_f32; a zero scale gives zeros); s NULL: each block's own max|w| / 448 (1 for an all-zero
 * block). For tests and tools. */
void fp8_quantize_row(const float *w, int64_t n, const float *s, fp8_block *out);

/* n / 128 blocks -> n floats (q * s). */
void fp8_dequantize_row(const fp8_block *b, float *y, int64_t n);

/* Weight row w (n / 128 blocks) . activation row (q, s from fp8_quantize_act): sum over blocks j of
 * (sum over its 128 elements of q_x q_w, in order) * s_x[j] * s_w[j], accumulated in order in F32. */
float fp8_vec_dot(const fp8_block *w, const uint8_t *xq, const float *xs, int64_t n);

#endif
