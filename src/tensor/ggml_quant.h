/*
 * ggml_quant.h: llama.cpp's (ggml's) tensor block types on the CPU, plain reference code (prefix gq_).
 *
 * GGUF files store weights in ggml's block formats: a row of n elements is n / block_size blocks, each
 * block_size elements in type_size bytes (a scale or two in f16 plus packed integer quants). This module
 * reads those blocks as they are, with no dequantized copy of a model:
 *
 *   - gq_dequantize_row: a row of any supported type -> floats (row in, floats out);
 *   - gq_quantize_row: floats -> blocks. For the activation types Q8_0, Q8_1 and Q8_K the result is that of
 *     ggml's quantize_row_*_ref (the same rounding: Q8_0 / Q8_1 halves away from zero, Q8_K halves to even
 *     with d = 1 / (-127 / signed absmax); an all-zero Q8_K block also gets zero bsums); Q4_0 / Q4_1 / Q5_0 /
 *     Q5_1 follow ggml's reference rules too (round-to-nearest); the K types and IQ4_NL / IQ4_XS get a plain
 *     round-to-nearest quantizer that makes valid blocks for tests and tools (not ggml's search for the best
 *     scales, so not bit-identical to llama.cpp's files); MXFP4 follows ggml's quantize_row_mxfp4_ref (the
 *     scale from the block's absmax, each value to the nearest level);
 *   - gq_vec_dot: dot product of a weight row in type T with an activation row quantized to T's partner
 *     type (gq_vec_dot_type: Q8_0 for Q4_0 / Q5_0 / Q8_0 / IQ4_NL / MXFP4, Q8_1 for Q4_1 / Q5_1, Q8_K for the K
 *     types and IQ4_XS; F32 / F16 / BF16 for themselves), computed as ggml's scalar "generic" CPU path does
 *     (integer sums per block, then the same float operations), so results equal llama.cpp's CPU up to float
 *     summation order. The fast SIMD versions and the matmul are in src/cpu/cpu_quant.h.
 *
 * Facts (block layouts, scale packing, dequantisation formulas, the IQ4_NL table, the vec_dot arithmetic)
 * come from llama.cpp: ggml/src/ggml-common.h (block structs, kvalues_iq4nl), ggml/src/ggml-quants.c
 * (quantize_row_*_ref, dequantize_row_*), ggml/src/ggml-cpu/quants.c (ggml_vec_dot_*_generic); the code
 * here is written from those descriptions.
 *
 * Block structs: every field of the weight blocks is a byte array (f16 values as 2 little-endian bytes), so
 * the structs have alignment 1 and a row of blocks may start at any address (a GGUF file's data need not be
 * aligned to anything wider). Q8_K (an activation-only format, never read from files) keeps ggml's float and
 * int16 fields: a Q8_K row must be 4-byte aligned.
 *
 * Enum values are ggml's numbering (ggml_type in loader/gguf.h).
 */
#ifndef VLLM_TENSOR_GGML_QUANT_H
#define VLLM_TENSOR_GGML_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loader/gguf.h"

#define GQ_QK 32     /* elements per block of the _0 / _1 / IQ4_NL types */
#define GQ_QK_K 256  /* elements per super-block of the K types and IQ4_XS */

/* ---- block layouts (ggml-common.h) ---- */

/* Q4_0: x = d * (q - 8); element j < 16 in the low nibble of qs[j], element j + 16 in its high nibble. */
typedef struct gq_block_q4_0 {
    uint8_t d[2];
    uint8_t qs[GQ_QK / 2];
} gq_block_q4_0;

/* Q4_1: x = d * q + m; nibbles as Q4_0. */
typedef struct gq_block_q4_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qs[GQ_QK / 2];
} gq_block_q4_1;

/* Q5_0: x = d * (q - 16); the low 4 bits as Q4_0, bit 4 of element j is bit j of qh (a little-endian u32). */
typedef struct gq_block_q5_0 {
    uint8_t d[2];
    uint8_t qh[4];
    uint8_t qs[GQ_QK / 2];
} gq_block_q5_0;

/* Q5_1: x = d * q + m; bits as Q5_0. */
typedef struct gq_block_q5_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[GQ_QK / 2];
} gq_block_q5_1;

/* Q8_0: x = d * q. */
typedef struct gq_block_q8_0 {
    uint8_t d[2];
    int8_t qs[GQ_QK];
} gq_block_q8_0;

/* Q8_1 (activations for Q4_1 / Q5_1): x = d * q; s = f16(d * sum(q)). */
typedef struct gq_block_q8_1 {
    uint8_t d[2];
    uint8_t s[2];
    int8_t qs[GQ_QK];
} gq_block_q8_1;

/* Q2_K: 16 sub-blocks of 16; scales[j] = scale code (low nibble) | min code (high nibble);
 * x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q 2 bits. Quants: for half h (128 elements,
 * qs[32h .. 32h + 32)) and g = 0..3, element 128h + 32g + l is bits 2g..2g+1 of qs[32h + l]; its sub-block is
 * (128h + 32g + l) / 16. */
typedef struct gq_block_q2_K {
    uint8_t scales[GQ_QK_K / 16];
    uint8_t qs[GQ_QK_K / 4];
    uint8_t d[2];
    uint8_t dmin[2];
} gq_block_q2_K;

/* Q3_K: 16 sub-blocks of 16 with 6-bit scale codes (x = d * (code - 32) * q, q in -4..3). q = low 2 bits
 * (placed as Q2_K's) - 4 unless the element's hmask bit is set: element 128h + 32g + l has its high bit in
 * bit 4h + g of hmask[l]. Code j: low 4 bits = scales[j] & 15 (j < 8) or scales[j - 8] >> 4 (j >= 8), high 2
 * bits = (scales[8 + j % 4] >> (2 * (j / 4))) & 3. */
typedef struct gq_block_q3_K {
    uint8_t hmask[GQ_QK_K / 8];
    uint8_t qs[GQ_QK_K / 4];
    uint8_t scales[12];
    uint8_t d[2];
} gq_block_q3_K;

/* Q4_K: 8 sub-blocks of 32 with 6-bit scale and min codes (gq_scale_min_k4);
 * x = d * sc * q - dmin * m. Element 64c + l (l < 32) is the low nibble of qs[32c + l] (sub-block 2c),
 * element 64c + 32 + l its high nibble (sub-block 2c + 1). */
typedef struct gq_block_q4_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qs[GQ_QK_K / 2];
} gq_block_q4_K;

/* Q5_K: as Q4_K plus a 5th bit: element 64c + l has it in bit 2c of qh[l], element 64c + 32 + l in bit
 * 2c + 1 of qh[l]. */
typedef struct gq_block_q5_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qh[GQ_QK_K / 8];
    uint8_t qs[GQ_QK_K / 2];
} gq_block_q5_K;

/* Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scales[j] * (q - 32), q 6 bits. For half h (ql[64h ..],
 * qh[32h ..]) and l < 32: element 128h + l = ql[64h + l] & 15 | bits 0-1 of qh[32h + l] << 4;
 * 128h + 32 + l: ql[64h + 32 + l] & 15 | bits 2-3; 128h + 64 + l: ql[64h + l] >> 4 | bits 4-5;
 * 128h + 96 + l: ql[64h + 32 + l] >> 4 | bits 6-7. */
typedef struct gq_block_q6_K {
    uint8_t ql[GQ_QK_K / 2];
    uint8_t qh[GQ_QK_K / 4];
    int8_t scales[GQ_QK_K / 16];
    uint8_t d[2];
} gq_block_q6_K;

/* Q8_K (activations for the K types and IQ4_XS): x = d * q; bsums[j] = sum of qs[16j .. 16j + 16). */
typedef struct gq_block_q8_K {
    float d;
    int8_t qs[GQ_QK_K];
    int16_t bsums[GQ_QK_K / 16];
} gq_block_q8_K;

/* IQ4_NL: x = d * gq_kvalues_iq4nl[nibble]; nibbles as Q4_0. */
typedef struct gq_block_iq4_nl {
    uint8_t d[2];
    uint8_t qs[GQ_QK / 2];
} gq_block_iq4_nl;

/* IQ4_XS: 8 sub-blocks of 32, x = d * (ls - 32) * gq_kvalues_iq4nl[nibble], ls 6 bits: low 4 bits in nibble
 * (ib % 2) of scales_l[ib / 2], high 2 bits in bits 2ib..2ib+1 of scales_h (little-endian u16). In sub-block
 * ib, element 32ib + j (j < 16) is the low nibble of qs[16ib + j], element 32ib + 16 + j its high nibble. */
typedef struct gq_block_iq4_xs {
    uint8_t d[2];
    uint8_t scales_h[2];
    uint8_t scales_l[GQ_QK_K / 64];
    uint8_t qs[GQ_QK_K / 2];
} gq_block_iq4_xs;

/* MXFP4 (gpt-oss's experts; OCP microscaling FP4): x = gq_kvalues_mxfp4[nibble] * 2^(e - 128) (the E2M1 values
 * doubled, the E8M0 scale halved: ggml_e8m0_to_fp32_half); nibbles as Q4_0 (element j < 16 in the low nibble of
 * qs[j], element j + 16 in its high nibble). */
typedef struct gq_block_mxfp4 {
    uint8_t e;
    uint8_t qs[GQ_QK / 2];
} gq_block_mxfp4;

_Static_assert(sizeof(gq_block_mxfp4) == 17, "mxfp4 block size");
_Static_assert(sizeof(gq_block_q4_0) == 18 && sizeof(gq_block_q4_1) == 20, "q4 block sizes");
_Static_assert(sizeof(gq_block_q5_0) == 22 && sizeof(gq_block_q5_1) == 24, "q5 block sizes");
_Static_assert(sizeof(gq_block_q8_0) == 34 && sizeof(gq_block_q8_1) == 36, "q8 block sizes");
_Static_assert(sizeof(gq_block_q2_K) == 84 && sizeof(gq_block_q3_K) == 110, "q2_K / q3_K block sizes");
_Static_assert(sizeof(gq_block_q4_K) == 144 && sizeof(gq_block_q5_K) == 176, "q4_K / q5_K block sizes");
_Static_assert(sizeof(gq_block_q6_K) == 210 && sizeof(gq_block_q8_K) == 292, "q6_K / q8_K block sizes");
_Static_assert(sizeof(gq_block_iq4_nl) == 18 && sizeof(gq_block_iq4_xs) == 136, "iq4 block sizes");
_Static_assert(_Alignof(gq_block_q6_K) == 1 && _Alignof(gq_block_q4_K) == 1, "weight blocks are byte aligned");

/* The 16 IQ4_NL / IQ4_XS levels (kvalues_iq4nl). */
extern const int8_t gq_kvalues_iq4nl[16];
/* The 16 MXFP4 levels, twice the E2M1 values (kvalues_mxfp4): 0, 1, 2, 3, 4, 6, 8, 12, then negated. */
extern const int8_t gq_kvalues_mxfp4[16];

/* ---- type facts ---- */

/* True for the weight types this module reads: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 (dequantize, vec_dot and the CPU matmul). Q8_1 and Q8_K are activation
 * formats: known to the size helpers, gq_quantize_row and gq_dequantize_row, but not weights. */
bool gq_type_supported(ggml_type t);
/* Elements per block (1 for F32 / F16 / BF16); 0 for a type this module does not know. */
int64_t gq_block_size(ggml_type t);
/* Bytes per block; 0 for a type this module does not know. */
size_t gq_type_size(ggml_type t);
/* Bytes of a row of n elements; 0 when the type is unknown, n < 0, n is not a multiple of the block size,
 * or the size overflows. */
size_t gq_row_bytes(ggml_type t, int64_t n);
/* The type activations are quantized to for a dot product with a weight of type t (ggml's vec_dot_type);
 * GGML_TYPE_COUNT when t is not a supported weight type. */
ggml_type gq_vec_dot_type(ggml_type t);
/* "Q4_K", "F16", ...; "?" when unknown. */
const char *gq_type_name(ggml_type t);

/* ---- f16 fields ---- */

/* The f16 value stored little-endian at p, widened. */
float gq_f16_load(const uint8_t p[2]);
/* f32 -> f16 (round to nearest even), stored little-endian at p. */
void gq_f16_store(uint8_t p[2], float f);

/* ---- rows ---- */

/* dst[0 .. n) = the n elements of the row at src (type t, any alignment except Q8_K: 4). False (dst
 * untouched) when t is unknown or n is not a non-negative multiple of the block size. */
bool gq_dequantize_row(ggml_type t, const void *src, float *dst, int64_t n);

/* Quantizes src[0 .. n) (finite values) into gq_row_bytes(t, n) bytes at dst (see the header comment for
 * which quantizer). False (dst untouched) when t is unknown or n is not a non-negative multiple of the block
 * size. Written for clarity, not speed: cpu_quant_row (src/cpu/cpu_quant.h) is the fast activation path. */
bool gq_quantize_row(ggml_type t, const float *src, void *dst, int64_t n);

/* Reference dot product of a weight row w (type t) with an activation row xq already quantized to
 * gq_vec_dot_type(t), n elements, computed as ggml's generic vec_dot. NaN when t is not a supported weight
 * type or n is not a non-negative multiple of its block size. */
float gq_vec_dot(ggml_type t, const void *w, const void *xq, int64_t n);

/* The 6-bit scale and min codes of sub-block j (0..7) of a Q4_K / Q5_K block's 12 scale bytes
 * (get_scale_min_k4): j < 4: sc = q[j] & 63, m = q[j + 4] & 63; j >= 4: the low 4 bits from q[j + 4]
 * (scale low nibble, min high nibble), the high 2 bits from the top bits of q[j - 4] (scale) and q[j] (min). */
void gq_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m);
/* The 16 6-bit scale codes of a Q3_K block's 12 scale bytes, minus 32 (-32..31). */
void gq_q3_K_scales(const uint8_t *q, int8_t out[16]);

#endif
