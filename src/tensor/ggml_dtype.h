/* ggml_dtype.h: the block dtypes of tensor.h and ggml's type numbers (loader/gguf.h), both ways. */
#ifndef VLLM_TENSOR_GGML_DTYPE_H
#define VLLM_TENSOR_GGML_DTYPE_H

#include <stdbool.h>

#include "loader/gguf.h"
#include "tensor/tensor.h"

typedef struct ggml_dtype_pair {
    dtype dt;
    ggml_type gt;
} ggml_dtype_pair;

/* the pairs, n of them */
static inline const ggml_dtype_pair *ggml_dtype_pairs(unsigned *n) {
    static const ggml_dtype_pair P[] = {
        {DTYPE_F32, GGML_TYPE_F32},       {DTYPE_F16, GGML_TYPE_F16},       {DTYPE_BF16, GGML_TYPE_BF16},
        {DTYPE_Q8_0, GGML_TYPE_Q8_0},     {DTYPE_Q4_0, GGML_TYPE_Q4_0},     {DTYPE_Q4_1, GGML_TYPE_Q4_1},
        {DTYPE_Q5_0, GGML_TYPE_Q5_0},     {DTYPE_Q5_1, GGML_TYPE_Q5_1},     {DTYPE_Q2_K, GGML_TYPE_Q2_K},
        {DTYPE_Q3_K, GGML_TYPE_Q3_K},     {DTYPE_Q4_K, GGML_TYPE_Q4_K},     {DTYPE_Q5_K, GGML_TYPE_Q5_K},
        {DTYPE_Q6_K, GGML_TYPE_Q6_K},     {DTYPE_IQ4_NL, GGML_TYPE_IQ4_NL}, {DTYPE_IQ4_XS, GGML_TYPE_IQ4_XS},
        {DTYPE_MXFP4, GGML_TYPE_MXFP4},
    };
    *n = sizeof P / sizeof *P;
    return P;
}

/* The ggml type of a dtype; false for one ggml has no counterpart of here (I32, ...). */
static inline bool dtype_to_ggml(dtype dt, ggml_type *out) {
    unsigned n;
    const ggml_dtype_pair *p = ggml_dtype_pairs(&n);
    for (unsigned i = 0; i < n; i++)
        if (p[i].dt == dt) return *out = p[i].gt, true;
    return false;
}

/* The dtype of a ggml type number; false for the ones tensor.h does not have. */
static inline bool dtype_from_ggml(uint32_t gt, dtype *out) {
    unsigned n;
    const ggml_dtype_pair *p = ggml_dtype_pairs(&n);
    for (unsigned i = 0; i < n; i++)
        if ((uint32_t)p[i].gt == gt) return *out = p[i].dt, true;
    return false;
}

#endif
