/*
 * tensor_check.h: argument checks on tensor descriptors shared by every
 * backend: shape and stride sanity with overflow checks, dtype sets, and
 * the one-line messages a backend reports when an op gets a bad tensor.
 */
#ifndef VLLM_TENSOR_TENSOR_CHECK_H
#define VLLM_TENSOR_TENSOR_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A set of dtypes (bit t for dtype t). */
#define TENSOR_DT(t) (1u << (t))
#define TENSOR_FLOAT (TENSOR_DT(DTYPE_F32) | TENSOR_DT(DTYPE_F16) | TENSOR_DT(DTYPE_BF16))

/* Row length (product of dims 1..) of t, checking the dims and overflow. */
bool tensor_row_len_checked(const tensor *t, int64_t *out);
/* Bytes spanned by t's rows (to the last row's end), or -1 for a bad dtype,
 * shape or stride, or on overflow. */
int64_t tensor_extent_bytes(const tensor *t);

/* t is a matrix (shape[0], product of the other dims) with data, a dtype in
 * dtypes, a sane shape and stride, and rows / cols when they are >= 0.
 * On failure writes "op: arg ..." into msg (msg_size bytes) and returns false. */
bool tensor_check_mat(const tensor *t, unsigned dtypes, int64_t rows, int64_t cols, const char *op,
                      const char *arg, char *msg, size_t msg_size);
/* t is contiguous with data, a dtype in dtypes and n elements (n < 0: any). */
bool tensor_check_vec(const tensor *t, unsigned dtypes, int64_t n, const char *op, const char *arg, char *msg,
                      size_t msg_size);

#ifdef __cplusplus
}
#endif
#endif
