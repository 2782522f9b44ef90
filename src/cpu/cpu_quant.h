/*
 * cpu_quant.h: fast CPU dot products and matmul over ggml's quantized blocks (ops_quant.c; prefix cpu_quant_).
 *
 * The reference of every function here is src/tensor/ggml_quant.h (gq_vec_dot, gq_quantize_row): the
 * SIMD kernels compute the same integer sums per block and differ from it only in the order of the float
 * additions. The instruction set is chosen at compile time like the rest of src/cpu (-march=native by
 * default): AVX-512 VNNI (+VL, BW) or AVX-VNNI, else AVX2 + FMA + F16C, else the portable reference code.
 *
 * The CPU backend's linear op calls cpu_quant_matmul for a weight whose ggml type is one of
 * gq_type_supported's, cpu_fp8_matmul for FP8_B128 and cpu_i4_matmul for I4_B128 weights.
 */
#ifndef VLLM_CPU_CPU_QUANT_H
#define VLLM_CPU_CPU_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "tensor/ggml_quant.h"
#include "vllm.h"

/* The kernels this build uses: "avx512-vnni", "avx-vnni", "avx2" or "portable". */
const char *cpu_quant_isa(void);

/* Dot product of weight row w (type t, n elements) with activation row xq quantized to
 * gq_vec_dot_type(t): the contract and, up to float summation order, the value of gq_vec_dot. NaN for an
 * unsupported type or n not a multiple of the block size. Any alignment of w; a Q8_K xq 4-byte aligned. */
float cpu_quant_vec_dot(ggml_type t, const void *w, const void *xq, int64_t n);

/* Quantizes an activation row (x, n floats) to type act (Q8_0, Q8_1, Q8_K, F32, F16 or BF16), bit-identical
 * to gq_quantize_row (NaN inputs aside). False for another type or n not a multiple of act's block size. */
bool cpu_quant_row(ggml_type act, const float *x, void *xq, int64_t n);

/*
 * y (T, out) = x (T, in) @ W^T, W (out, in) stored in ggml type t.
 *
 *   w, w_row_bytes: weight row r starts at w + r * w_row_bytes (>= gq_row_bytes(t, in)); any alignment;
 *   x, x_stride:    token i's row is x[i * x_stride .. + in) (floats, x_stride >= in);
 *   y, y_stride:    y[i * y_stride + r] is written for r < out (y_stride >= out); y must not overlap x.
 *
 * in must be a positive multiple of gq_block_size(t) (256 for the K types and IQ4_XS, 32 for the others).
 * Each x row is quantized once to gq_vec_dot_type(t) (Q8_0 / Q8_1 / Q8_K, or F16 / BF16 for those weights,
 * as llama.cpp does), into a scratch buffer allocated per call; then (token tile, 16-row tile) items are
 * spread over pool's threads (pool NULL: the calling thread); inside an item each weight row is decoded once
 * per 4 tokens. y[i][r] is bit-identical to cpu_quant_vec_dot(t, row r, token i quantized by cpu_quant_row)
 * whatever T, the tiling or the thread count. VLLM_ERR_UNSUPPORTED for a type outside gq_type_supported, VLLM_ERR_INVALID_ARG for bad
 * sizes, VLLM_ERR_NO_MEMORY; y is untouched on error.
 */
vllm_status cpu_quant_matmul(tp_pool *pool, ggml_type t, const void *w, size_t w_row_bytes, int64_t out,
                             int64_t in, const float *x, int64_t x_stride, int64_t T, float *y, int64_t y_stride);

/*
 * y (T, out) = x (T, in) @ W^T for W (out, in) in FP8_B128 (tensor/fp8.h; ops_fp8.c): each x row quantized per
 * 128 as vLLM's per_token_group_quant_fp8, the products of E4M3 values summed per block and scaled by the two
 * scales, as fp8_vec_dot up to the order of the additions. w_row_bytes >= (in / 128) * 132; in a positive
 * multiple of 128; y[i][r] for r < out, bit-identical whatever T or the thread count. Errors as
 * cpu_quant_matmul's.
 */
vllm_status cpu_fp8_matmul(tp_pool *pool, const void *w, size_t w_row_bytes, int64_t out, int64_t in, const float *x,
                           int64_t x_stride, int64_t T, float *y, int64_t y_stride);

/*
 * y (T, out) = x (T, in) @ W^T for W (out, in) in I4_B128 (tensor/int4.h; ops_int4.c): each block decoded to its
 * float values (q - z) s, F32 dot products with x (weight-only: x as it is). w_row_bytes >= (in / 128) * 84; in
 * a positive multiple of 128. Threaded on pool (NULL: the calling thread); bit-identical for any T / threads.
 */
vllm_status cpu_i4_matmul(tp_pool *pool, const void *w, size_t w_row_bytes, int64_t out, int64_t in, const float *x,
                          int64_t x_stride, int64_t T, float *y, int64_t y_stride);

#endif
