/* weights.c: weight sources: safetensors (in place) or dummy random weights. */
#include "model/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "loader/safetensors.h"
#include "tensor/dummy.h"

struct weight_source {
    st_set *st;          /* NULL for dummy */
    dtype dummy_dtype;
    uint64_t seed;       /* dummy.h's stream */
    uint64_t offset;     /* dummy: the next tensor's byte offset (as an arena would place it) */
    dummy_arena *arena;  /* dummy on the device: the tensors of 2+ dims live here */
    void **buffers;      /* dummy allocations */
    size_t num_buffers, cap_buffers;
};

vllm_status ws_open(const char *dir, const model_config *cfg, bool dummy, bool dummy_on_device, uint64_t seed,
                    weight_source **out) {
    *out = NULL;
    weight_source *ws = calloc(1, sizeof *ws);
    if (!ws) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    if (dummy) {
        ws->dummy_dtype = cfg->torch_dtype == DTYPE_F32 ? DTYPE_F32 : cfg->torch_dtype;
        ws->seed = dummy_seed(seed);
        if (dummy_on_device && !(ws->arena = dummy_arena_create(ws->seed))) {
            free(ws);
            return VLLM_ERR_NO_MEMORY;
        }
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
    dummy_arena_destroy(ws->arena);
    free(ws);
}

void ws_release_copied(weight_source *ws) {
    if (!ws) return;
    for (size_t i = 0; i < ws->num_buffers; i++) free(ws->buffers[i]);
    ws->num_buffers = 0;
}

/* Dummy weights: uniform(-1e-3, 1e-3) like vLLM's initialize_dummy_weights, element i of a
 * tensor at byte offset o being dummy_value(seed, o / size + i), where o advances as a dummy
 * arena's allocations do: host-made and device-filled weights are the same numbers. */
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
    const size_t bytes = (size_t)n * esz;
    uint64_t offset = ws->offset;
    if (ws->arena) { /* the arena places it (the same offsets as below) */
        void *p = dummy_arena_take(ws->arena, bytes);
        uint64_t seed;
        if (!p || !dummy_lookup(p, &seed, &offset))
            return vt_error(VLLM_ERR_NO_MEMORY, "dummy weight '%s': the dummy arena is exhausted", name);
        if (ndim >= 2) { /* the backend fills it on the device */
            *out = tensor_make(ws->dummy_dtype, p, ndim, shape);
            return VLLM_OK;
        }
    }
    ws->offset = offset + (bytes ? (bytes + DUMMY_ALIGN - 1) / DUMMY_ALIGN * DUMMY_ALIGN : DUMMY_ALIGN);
    void *buf = malloc(bytes);
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
    const uint64_t base = offset / esz;
    for (int64_t i = 0; i < n; i++) {
        float v = dummy_value(ws->seed, base + (uint64_t)i);
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

bool ws_is_dummy(const weight_source *ws) { return !ws->st; }

bool ws_has(const weight_source *ws, const char *name) { return !ws->st || st_find(ws->st, name) != NULL; }

vllm_status ws_getf(weight_source *ws, tensor *out, int ndim, const int64_t *shape, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ws_get(ws, name, ndim, shape, out);
}
