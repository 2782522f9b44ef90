/*
 * int4.h: the 4-bit weight packings of AWQ and GPTQ checkpoints, read back (prefix i4_).
 *
 * Both store W (N out, K in) as 4-bit integers q with a scale s and a zero z per group of G input
 * features: W[n][k] = (q[k][n] - z[g][n]) * s[g][n], g = k / G (GPTQ with desc_act: g = g_idx[k]).
 *
 * AWQ (AutoAWQ's GEMM version; vLLM awq.py, transformers' AwqConfig): qweight I32 (K, N / 8), qzeros I32
 * (K / G, N / 8), scales F16 (K / G, N). Eight output features share an int32, in the order AutoAWQ's
 * pack_intweight writes: nibble p (bits 4p .. 4p + 3) holds feature 8c + [0, 2, 4, 6, 1, 3, 5, 7][p], so
 * feature 8c + j sits in nibble [0, 4, 1, 5, 2, 6, 3, 7][j] (vLLM's AWQ_REVERSE_ORDER); qzeros likewise.
 *
 * GPTQ (AutoGPTQ / GPTQModel; vLLM gptq.py): qweight I32 (K / 8, N), nibble i of qweight[r][n] being
 * q[8 r + i][n]; qzeros I32 (groups, N / 8), nibble i of qzeros[g][c] the zero of feature 8 c + i; scales
 * F16 (groups, N); g_idx I32 (K). Checkpoint format "gptq" (v1) stores each zero less 1 (the zero is the
 * stored value + 1); "gptq_v2" stores it as it is.
 *
 * compressed-tensors pack-quantized W4A16 (llm-compressor; compressed_tensors pack_to_int32, vLLM
 * CompressedTensorsWNA16): weight_packed I32 (N, K / 8), nibble i of weight_packed[n][c] being q[n][8 c + i]
 * stored as q + 8 (q in [-8, 7]), weight_scale (N, K / G) in the model's float dtype, weight_g_idx I32 (K) with
 * actorder "group"; symmetric: W[n][k] = (stored - 8) s.
 */
#ifndef VLLM_TENSOR_INT4_H
#define VLLM_TENSOR_INT4_H

#include <stdbool.h>
#include <stdint.h>

/* The nibble holding AWQ feature 8 c + j (j < 8) of its int32 */
static inline int i4_awq_nibble(int j) {
    static const int REV[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    return REV[j & 7];
}

/* W (N, K) as floats from AWQ's tensors (G divides K; scales (K / G, N) as floats): w[n * K + k]. */
void i4_awq_dequantize(const int32_t *qweight, const int32_t *qzeros, const float *scales, int64_t N, int64_t K,
                       int64_t G, float *w);

/* W (N, K) as floats from GPTQ's tensors: group of k = g_idx[k] (g_idx NULL: k / G), zeros + 1 when v1;
 * false when a g_idx entry is outside [0, groups). */
bool i4_gptq_dequantize(const int32_t *qweight, const int32_t *qzeros, const float *scales, const int32_t *g_idx,
                        int64_t N, int64_t K, int64_t G, int64_t groups, bool v1, float *w);

/* W (N, K) as floats from compressed-tensors' symmetric pack-quantized tensors (scales (N, groups) as floats; group of
 * k = g_idx[k], or k / G without one); false when a g_idx entry is outside [0, groups). */
bool i4_ct_dequantize(const int32_t *packed, const float *scales, const int32_t *g_idx, int64_t N, int64_t K, int64_t G,
                      int64_t groups, float *w);

/* ---- I4_B128: the 4-bit weights as blocks of 128 input features (the layout backends take natively) ----
 * Block b of row n holds W[n][128 b + i], i < 128: nibble i (byte i / 2, the low nibble for even i) q_i in
 * [0, 15], and per 32 features a scale and a zero: value_i = s[i / 32] (q_i - z[i / 32]) (z up to 16: GPTQ v1's
 * stored 15 + 1). Any group size that is a multiple of 32 (and the whole row, group_size -1) repeats its s and
 * z in its 32-runs; 84 bytes per 128 values. */
#define I4_B 128
#define I4_SUB 32
typedef struct i4_block {
    float s[I4_B / I4_SUB];
    uint8_t z[I4_B / I4_SUB];
    uint8_t q[I4_B / 2];
} i4_block;

static inline int i4_block_q(const i4_block *b, int i) { return (b->q[i >> 1] >> (4 * (i & 1))) & 15; }

/* K / 128 blocks of a row -> K floats */
void i4_dequantize_row(const i4_block *b, int64_t K, float *out);

/* Whether a matrix of K input features in groups of G (g_idx: act-order, else k / G) can be I4_B128 rows: K a
 * multiple of 128 and every run of 32 features in one group (g_idx entries are range-checked by the readers) */
bool i4_blocks_fit(const int32_t *g_idx, int64_t K, int64_t G);

/* The same weights as I4_B128 rows (N rows of K / 128 blocks): false (nothing promised in out) when K is not a
 * multiple of 128 or a group does not cover whole runs of 32 features (G % 32, or a g_idx whose groups change
 * inside a 32-run: act-order), or a g_idx entry is outside [0, groups). */
bool i4_awq_blocks(const int32_t *qweight, const int32_t *qzeros, const float *scales, int64_t N, int64_t K,
                   int64_t G, i4_block *out);
bool i4_gptq_blocks(const int32_t *qweight, const int32_t *qzeros, const float *scales, const int32_t *g_idx,
                    int64_t N, int64_t K, int64_t G, int64_t groups, bool v1, i4_block *out);
bool i4_ct_blocks(const int32_t *packed, const float *scales, const int32_t *g_idx, int64_t N, int64_t K, int64_t G,
                  int64_t groups, i4_block *out);

#endif
