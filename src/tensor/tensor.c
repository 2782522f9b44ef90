/* tensor.c: dtype tables, tensor shape helpers and f32 -> f16 rounding. */
#include "tensor/tensor.h"

#include <math.h>

/* block types: ggml's block sizes and bytes per block (ggml/src/ggml.c type_traits); FP8_B128 tensor/fp8.h's, I4_B128
 * tensor/int4.h's */
static const struct { const char *name; size_t size; int64_t block; } DTYPES[DTYPE_COUNT] = {
    [DTYPE_F32] = {"F32", 4, 1}, [DTYPE_F16] = {"F16", 2, 1}, [DTYPE_BF16] = {"BF16", 2, 1},
    [DTYPE_I32] = {"I32", 4, 1}, [DTYPE_I64] = {"I64", 8, 1}, [DTYPE_U8] = {"U8", 1, 1},
    [DTYPE_F8_E4M3] = {"F8_E4M3", 1, 1},
    [DTYPE_Q8_0] = {"Q8_0", 34, 32}, [DTYPE_Q4_0] = {"Q4_0", 18, 32}, [DTYPE_Q4_1] = {"Q4_1", 20, 32},
    [DTYPE_Q5_0] = {"Q5_0", 22, 32}, [DTYPE_Q5_1] = {"Q5_1", 24, 32}, [DTYPE_Q2_K] = {"Q2_K", 84, 256},
    [DTYPE_Q3_K] = {"Q3_K", 110, 256}, [DTYPE_Q4_K] = {"Q4_K", 144, 256}, [DTYPE_Q5_K] = {"Q5_K", 176, 256},
    [DTYPE_Q6_K] = {"Q6_K", 210, 256}, [DTYPE_IQ4_NL] = {"IQ4_NL", 18, 32}, [DTYPE_IQ4_XS] = {"IQ4_XS", 136, 256},
    [DTYPE_MXFP4] = {"MXFP4", 17, 32},
    [DTYPE_FP8_B128] = {"FP8_B128", 132, 128}, [DTYPE_I4_B128] = {"I4_B128", 84, 128},
};

size_t dtype_size(dtype t) { return (unsigned)t < DTYPE_COUNT ? DTYPES[t].size : 0; }
int64_t dtype_block(dtype t) { return (unsigned)t < DTYPE_COUNT ? DTYPES[t].block : 1; }
const char *dtype_name(dtype t) { return (unsigned)t < DTYPE_COUNT ? DTYPES[t].name : "?"; }

bool dtype_from_name(const char *name, dtype *out) {
    for (int i = 0; i < DTYPE_FIRST_BLOCK; i++) { /* safetensors' names: the plain types */
        if (!strcmp(name, DTYPES[i].name)) {
            *out = (dtype)i;
            return true;
        }
    }
    return false;
}

tensor tensor_make(dtype t, void *data, int ndim, const int64_t *shape) {
    tensor x;
    memset(&x, 0, sizeof x);
    x.dtype = t;
    x.ndim = ndim;
    for (int i = 0; i < ndim && i < TENSOR_MAX_DIMS; i++) x.shape[i] = shape[i];
    x.data = data;
    return x;
}

tensor tensor_2d(dtype t, void *data, int64_t d0, int64_t d1) {
    int64_t s[2] = {d0, d1};
    return tensor_make(t, data, 2, s);
}

tensor tensor_1d(dtype t, void *data, int64_t d0) { return tensor_make(t, data, 1, &d0); }

int64_t tensor_numel(const tensor *x) {
    int64_t n = 1;
    for (int i = 0; i < x->ndim; i++) n *= x->shape[i];
    return n;
}

int64_t tensor_row_len(const tensor *x) {
    int64_t n = 1;
    for (int i = 1; i < x->ndim; i++) n *= x->shape[i];
    return n;
}

int64_t tensor_row_stride(const tensor *x) {
    return x->row_stride ? x->row_stride : tensor_row_len(x);
}

size_t tensor_nbytes(const tensor *x) { return (size_t)(tensor_numel(x) / dtype_block(x->dtype)) * dtype_size(x->dtype); }

tensor tensor_cols(const tensor *x, int64_t col0, int64_t ncols) {
    tensor v = *x;
    v.row_stride = tensor_row_stride(x);
    v.shape[1] = ncols;
    v.data = (char *)x->data + (size_t)(col0 / dtype_block(x->dtype)) * dtype_size(x->dtype);
    return v;
}

tensor tensor_rows(const tensor *x, int64_t row0, int64_t nrows) {
    tensor v = *x;
    v.shape[0] = nrows;
    v.data = (char *)x->data + (size_t)(row0 * tensor_row_stride(x) / dtype_block(x->dtype)) * dtype_size(x->dtype);
    return v;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);           /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* overflow -> inf */
    if (absu < 0x38800000u) {                                            /* subnormal or zero */
        float a;
        memcpy(&a, &absu, 4);
        /* scale so the f16 subnormal unit (2^-24) becomes 1, round to nearest even */
        float r = nearbyintf(a * 16777216.0f);
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t mant = absu & 0x7fffffu;
    uint32_t exp = (absu >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
