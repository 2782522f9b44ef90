/*
 * tensor.h: element types, bf16/f16 conversion and the tensor descriptor.
 *
 * A tensor is a descriptor over memory owned elsewhere (a backend buffer, a
 * memory-mapped checkpoint, a host array): row-major, with an optional
 * stride on dim 0 so that a slice of columns (q out of a fused qkv buffer)
 * can be viewed without a copy. It never owns its data.
 */
#ifndef VLLM_TENSOR_TENSOR_H
#define VLLM_TENSOR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16,
    DTYPE_BF16,
    DTYPE_I32,
    DTYPE_I64,
    DTYPE_U8,
    DTYPE_F8_E4M3,  /* OCP FP8 E4M3 ("fn": no infinities, 0x7f / 0xff NaN, max 448); safetensors' F8_E4M3 */
    /* ggml's block types (GGUF weight matrices; ggml_quant.h reads them): dtype_block(t) elements of a row
     * are packed into dtype_size(t) bytes. A tensor of one is contiguous, its rows whole blocks; only the
     * ops whose backend says so (backend.native_blocks) take one. */
    DTYPE_Q8_0,
    DTYPE_Q4_0,
    DTYPE_Q4_1,
    DTYPE_Q5_0,
    DTYPE_Q5_1,
    DTYPE_Q2_K,
    DTYPE_Q3_K,
    DTYPE_Q4_K,
    DTYPE_Q5_K,
    DTYPE_Q6_K,
    DTYPE_IQ4_NL,
    DTYPE_IQ4_XS,
    DTYPE_MXFP4, /* gpt-oss's experts in GGUF files (ggml_quant.h gq_block_mxfp4) */
    /* FP8 E4M3 weights in blocks of 128 elements along a row, each 128 bytes then its F32 scale
     * (tensor/fp8.h): the block-scaled FP8 checkpoints' rows (quantization_config quant_method "fp8"),
     * repacked at load. Not a ggml type. */
    DTYPE_FP8_B128,
    /* 4-bit integer weights in blocks of 128 elements along a row, a scale and a zero per 32 (tensor/int4.h):
     * AWQ / GPTQ checkpoints' rows, repacked at load. Not a ggml type. */
    DTYPE_I4_B128,
    DTYPE_COUNT
} dtype;

#define DTYPE_FIRST_BLOCK DTYPE_Q8_0

/* Bytes per element, or per block for the block types. */
size_t dtype_size(dtype t);
/* Elements per block: 1 for the plain types, 32 or 256 for the block types. */
int64_t dtype_block(dtype t);
static inline bool dtype_is_block(dtype t) { return t >= DTYPE_FIRST_BLOCK && t < DTYPE_COUNT; }
const char *dtype_name(dtype t);  /* "F32", "BF16", ... (safetensors spelling; ggml's for block types) */
/* Parses a safetensors dtype string; false when unknown. */
bool dtype_from_name(const char *name, dtype *out);

#define TENSOR_MAX_DIMS 4

typedef struct tensor {
    dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t row_stride;  /* elements between consecutive dim-0 rows; 0 = contiguous */
    void *data;          /* memory of the backend (or host) that made it */
    float qscale;        /* an F8_E4M3 KV cache: the scale its values multiply (value = e4m3 * qscale; 0 means 1) */
} tensor;

/* A contiguous tensor over data. */
tensor tensor_make(dtype t, void *data, int ndim, const int64_t *shape);
tensor tensor_2d(dtype t, void *data, int64_t d0, int64_t d1);
tensor tensor_1d(dtype t, void *data, int64_t d0);
int64_t tensor_numel(const tensor *x);
/* Elements in one dim-0 row (product of dims 1..). */
int64_t tensor_row_len(const tensor *x);
/* Elements between dim-0 rows (row_stride, or the row length when 0). */
int64_t tensor_row_stride(const tensor *x);
/* Bytes of a contiguous tensor of this shape (whole blocks per row for the block types). */
size_t tensor_nbytes(const tensor *x);
/* Columns [col0, col0 + ncols) of a 2-D tensor, as a strided view. */
tensor tensor_cols(const tensor *x, int64_t col0, int64_t ncols);
/* Rows [row0, row0 + nrows) of a tensor (dim 0), as a view. */
tensor tensor_rows(const tensor *x, int64_t row0, int64_t nrows);

/* ---- scalar conversions (round to nearest even) ---- */

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) { man <<= 1; exp--; }
            man &= 0x3ffu;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f);

#endif
