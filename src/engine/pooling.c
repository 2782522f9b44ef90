/* pooling.c: the pooling runner's host arithmetic: row accumulation and the embedding head (see pooling.h). */
#include "engine/pooling.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

static double row_at(const void *row, dtype dt, int i) {
    switch (dt) {
    case DTYPE_BF16: return bf16_to_f32(((const uint16_t *)row)[i]);
    case DTYPE_F16: return f16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

void pool_add_row(double *acc, const void *row, dtype dt, int D) {
    for (int i = 0; i < D; i++) acc[i] += row_at(row, dt, i);
}

void pool_set_row(double *acc, const void *row, dtype dt, int D) {
    for (int i = 0; i < D; i++) acc[i] = row_at(row, dt, i);
}

size_t pool_embedding_dim(int D, int dimensions) {
    return dimensions > 0 && dimensions < D ? (size_t)dimensions : (size_t)(D > 0 ? D : 0);
}

size_t pool_finish(const double *pooled, int D, double count, int dimensions, bool normalize, float *out) {
    size_t dim = pool_embedding_dim(D, dimensions);
    double c = count > 0 ? count : 1.0;
    double ss = 0.0;
    for (size_t i = 0; i < dim; i++) {
        out[i] = (float)(pooled[i] / c); /* the pooled float32 vector (vLLM: head_dtype float32) */
        ss += (double)out[i] * (double)out[i];
    }
    if (normalize) {
        double norm = sqrt(ss);
        if (norm < 1e-12) norm = 1e-12;
        for (size_t i = 0; i < dim; i++) out[i] = (float)((double)out[i] / norm);
    }
    return dim;
}

vllm_status pool_check_dimensions(const vllm_engine_info *info, long long dimensions, const char *model_name) {
    if (!info->is_matryoshka)
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "Model \"%s\" does not support matryoshka representation, changing output dimensions will "
                        "lead to poor results.",
                        model_name);
    if (info->num_matryoshka_dimensions) {
        for (size_t i = 0; i < info->num_matryoshka_dimensions; i++)
            if (info->matryoshka_dimensions[i] == dimensions) return VLLM_OK;
        char list[512];
        size_t k = 0;
        list[0] = '\0';
        for (size_t i = 0; i < info->num_matryoshka_dimensions && k < sizeof list - 16; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? ", " : "", info->matryoshka_dimensions[i]);
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "Model \"%s\" only supports [%s] matryoshka dimensions, use other output dimensions will "
                        "lead to poor results.",
                        model_name, list);
    }
    if (dimensions < 1) return vt_error(VLLM_ERR_INVALID_ARG, "Dimensions must be greater than 0");
    return VLLM_OK;
}
