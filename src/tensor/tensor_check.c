/* tensor_check.c: the backends' shared argument checks on tensor descriptors. */
#include "tensor/tensor_check.h"

#include <stdio.h>

bool tensor_row_len_checked(const tensor *t, int64_t *out) {
    if (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS) return false;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return false;
        if (i == 0) continue;
        if (t->shape[i] != 0 && n > INT64_MAX / t->shape[i]) return false;
        n *= t->shape[i];
    }
    *out = n;
    return true;
}

int64_t tensor_extent_bytes(const tensor *t) {
    int64_t len;
    if ((unsigned)t->dtype >= DTYPE_COUNT || !tensor_row_len_checked(t, &len)) return -1;
    int64_t rows = t->ndim > 0 ? t->shape[0] : 1;
    int64_t stride = t->row_stride ? t->row_stride : len;
    int64_t es = (int64_t)dtype_size(t->dtype);
    if (es == 0 || stride < len) return -1;
    if (rows == 0 || len == 0) return 0;
    if (rows - 1 > 0 && stride > INT64_MAX / (rows - 1)) return -1;
    int64_t elems = (rows - 1) * stride;
    if (elems > INT64_MAX - len) return -1;
    elems += len;
    if (elems > INT64_MAX / es) return -1;
    return elems * es;
}

static const char *dtypes_name(unsigned dtypes) {
    if (dtypes == TENSOR_FLOAT) return "F32, F16 or BF16";
    if (dtypes == (TENSOR_DT(DTYPE_F32) | TENSOR_DT(DTYPE_BF16))) return "F32 or BF16";
    for (int t = 0; t < DTYPE_COUNT; t++)
        if (dtypes == TENSOR_DT(t)) return dtype_name((dtype)t);
    return "another dtype";
}

/* Data present and dtype in the set. */
static bool check_common(const tensor *t, unsigned dtypes, const char *op, const char *arg, char *msg, size_t n) {
    if (!t || !t->data) {
        snprintf(msg, n, "%s: %s has no data", op, arg);
        return false;
    }
    if ((unsigned)t->dtype >= DTYPE_COUNT || !(dtypes & TENSOR_DT(t->dtype))) {
        snprintf(msg, n, "%s: %s is %s, expected %s", op, arg,
                 (unsigned)t->dtype < DTYPE_COUNT ? dtype_name(t->dtype) : "?", dtypes_name(dtypes));
        return false;
    }
    return true;
}

bool tensor_check_mat(const tensor *t, unsigned dtypes, int64_t rows, int64_t cols, const char *op,
                      const char *arg, char *msg, size_t n) {
    if (!check_common(t, dtypes, op, arg, msg, n)) return false;
    int64_t len;
    if (t->ndim < 1 || tensor_extent_bytes(t) < 0 || !tensor_row_len_checked(t, &len)) {
        snprintf(msg, n, "%s: %s has a bad shape or stride (ndim %d)", op, arg, t->ndim);
        return false;
    }
    if (rows >= 0 && t->shape[0] != rows) {
        snprintf(msg, n, "%s: %s has %lld rows, expected %lld", op, arg, (long long)t->shape[0], (long long)rows);
        return false;
    }
    if (cols >= 0 && len != cols) {
        snprintf(msg, n, "%s: %s has rows of %lld elements, expected %lld", op, arg, (long long)len,
                 (long long)cols);
        return false;
    }
    return true;
}

bool tensor_check_vec(const tensor *t, unsigned dtypes, int64_t want, const char *op, const char *arg, char *msg,
                      size_t n) {
    if (!check_common(t, dtypes, op, arg, msg, n)) return false;
    int64_t len;
    if (tensor_extent_bytes(t) < 0 || !tensor_row_len_checked(t, &len) || (t->row_stride && t->row_stride != len)) {
        snprintf(msg, n, "%s: %s has a bad shape or is not contiguous", op, arg);
        return false;
    }
    int64_t numel = t->ndim > 0 ? t->shape[0] : 1;
    if (numel != 0 && len > INT64_MAX / numel) {
        snprintf(msg, n, "%s: %s is too large", op, arg);
        return false;
    }
    numel *= len;
    if (want >= 0 && numel != want) {
        snprintf(msg, n, "%s: %s has %lld elements, expected %lld", op, arg, (long long)numel, (long long)want);
        return false;
    }
    return true;
}
