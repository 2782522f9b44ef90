/* weights.c: weight sources: safetensors (in place) or dummy random weights. */
#include "model/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "loader/safetensors.h"

struct weight_source {
    st_set *st;          /* NULL for dummy */
    dtype dummy_dtype;
    uint64_t rng;        /* dummy generator state */
    void **buffers;      /* dummy allocations */
    size_t num_buffers, cap_buffers;
};

vllm_status ws_open(const char *dir, const model_config *cfg, bool dummy, uint64_t seed,
                    weight_source **out) {
    *out = NULL;
    weight_source *ws = calloc(1, sizeof *ws);
    if (!ws) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    if (dummy) {
        ws->dummy_dtype = cfg->torch_dtype == DTYPE_F32 ? DTYPE_F32 : cfg->torch_dtype;
        ws->rng = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    } else {
        vllm_status st = st_open_dir(dir, &ws->st);
        if (st != VLLM_OK) {
            free(ws);
            return st;
        }
    }
    *out = ws;
    return VLLM_OK;
}

void ws_close(weight_source *ws) {
    if (!ws) return;
    st_close(ws->st);
    for (size_t i = 0; i < ws->num_buffers; i++) free(ws->buffers[i]);
    free(ws->buffers);
    free(ws);
}

void ws_release_copied(weight_source *ws) {
    if (!ws) return;
    for (size_t i = 0; i < ws->num_buffers; i++) free(ws->buffers[i]);
    ws->num_buffers = 0;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Dummy weights: uniform(-1e-3, 1e-3) like vLLM's initialize_dummy_weights. */
static vllm_status dummy_get(weight_source *ws, const char *name, int ndim, const int64_t *shape,
                             tensor *out) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0 || n > INT64_MAX / shape[i])
            return vt_error(VLLM_ERR_INVALID_ARG, "dummy weight '%s': bad shape", name);
        n *= shape[i];
    }
    size_t esz = dtype_size(ws->dummy_dtype);
    if ((uint64_t)n > SIZE_MAX / esz) return vt_error(VLLM_ERR_NO_MEMORY, "dummy weight '%s' too large", name);
    void *buf = malloc((size_t)n * esz);
    if (!buf) return vt_error(VLLM_ERR_NO_MEMORY, "dummy weight '%s': out of memory", name);
    if (ws->num_buffers == ws->cap_buffers) {
        size_t cap = ws->cap_buffers ? ws->cap_buffers * 2 : 64;
        void **nb = realloc(ws->buffers, cap * sizeof *nb);
        if (!nb) {
            free(buf);
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        }
        ws->buffers = nb;
        ws->cap_buffers = cap;
    }
    ws->buffers[ws->num_buffers++] = buf;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(&ws->rng);
        float v = ((float)(r >> 40) / (float)(1ull << 24) * 2.0f - 1.0f) * 1e-3f;
        if (ws->dummy_dtype == DTYPE_F32) ((float *)buf)[i] = v;
        else if (ws->dummy_dtype == DTYPE_BF16) ((uint16_t *)buf)[i] = f32_to_bf16(v);
        else ((uint16_t *)buf)[i] = f32_to_f16(v);
    }
    *out = tensor_make(ws->dummy_dtype, buf, ndim, shape);
    return VLLM_OK;
}

vllm_status ws_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out) {
    if (!ws->st) return dummy_get(ws, name, ndim, shape, out);
    return st_get(ws->st, name, ndim, shape, out);
}

vllm_status ws_get_as(weight_source *ws, const char *name, dtype dt, int ndim, const int64_t *shape, tensor *out) {
    if (!ws->st) return vt_error(VLLM_ERR_NOT_FOUND, "dummy weights: no %s tensor '%s'", dtype_name(dt), name);
    return st_get_as(ws->st, name, dt, ndim, shape, out);
}

bool ws_has(const weight_source *ws, const char *name) { return !ws->st || st_find(ws->st, name) != NULL; }

vllm_status ws_getf(weight_source *ws, tensor *out, int ndim, const int64_t *shape, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ws_get(ws, name, ndim, shape, out);
}
