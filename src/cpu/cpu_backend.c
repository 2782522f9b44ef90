/*
 * cpu_backend.c: the CPU backend object: creation, the op table, host
 * memory (64-byte aligned malloc; imports are views of the caller's memory),
 * argument checks and the sticky op error reported by synchronize/download.
 * The kernels live in ops_*.c.
 */
#include "cpu/cpu_backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "cpu/cpu_internal.h"

#define CPU_ALIGN 64

/* ---- errors and argument checks ---- */

void cpu_fail(cpu_state *cpu, const char *fmt, ...) {
    if (cpu->err != VLLM_OK) return;  /* keep the first failure */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cpu->err_msg, sizeof cpu->err_msg, fmt, ap);
    va_end(ap);
    cpu->err = VLLM_ERR_BACKEND;
    LOG_E("cpu backend: %s", cpu->err_msg);
}

static bool cpu_dtype_ok(dtype have, dtype want) {
    if (want == CPU_ANY_FLOAT) return have == DTYPE_F32 || have == DTYPE_F16 || have == DTYPE_BF16;
    return have == want;
}

static const char *cpu_dtype_want(dtype want) {
    return want == CPU_ANY_FLOAT ? "F32, F16 or BF16" : dtype_name(want);
}

/* Row length (product of dims 1..) of t, checking dims and overflow. */
static bool cpu_row_len(const tensor *t, int64_t *out) {
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

/* Bytes spanned by t's rows (last row's end), or -1 on overflow / bad shape. */
static int64_t cpu_extent_bytes(const tensor *t) {
    int64_t len;
    if (!cpu_row_len(t, &len)) return -1;
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

bool cpu_check_mat(cpu_state *cpu, const char *op, const char *arg, const tensor *t, dtype dt,
                   int64_t rows, int64_t cols) {
    if (!t || !t->data) {
        cpu_fail(cpu, "%s: %s has no data", op, arg);
        return false;
    }
    if (!cpu_dtype_ok(t->dtype, dt)) {
        cpu_fail(cpu, "%s: %s is %s, expected %s", op, arg, dtype_name(t->dtype), cpu_dtype_want(dt));
        return false;
    }
    int64_t len;
    if (t->ndim < 1 || cpu_extent_bytes(t) < 0 || !cpu_row_len(t, &len)) {
        cpu_fail(cpu, "%s: %s has a bad shape or stride (ndim %d)", op, arg, t->ndim);
        return false;
    }
    if (rows >= 0 && t->shape[0] != rows) {
        cpu_fail(cpu, "%s: %s has %lld rows, expected %lld", op, arg, (long long)t->shape[0],
                 (long long)rows);
        return false;
    }
    if (cols >= 0 && len != cols) {
        cpu_fail(cpu, "%s: %s has rows of %lld elements, expected %lld", op, arg, (long long)len,
                 (long long)cols);
        return false;
    }
    return true;
}

bool cpu_check_vec(cpu_state *cpu, const char *op, const char *arg, const tensor *t, dtype dt, int64_t n) {
    if (!t || !t->data) {
        cpu_fail(cpu, "%s: %s has no data", op, arg);
        return false;
    }
    if (!cpu_dtype_ok(t->dtype, dt)) {
        cpu_fail(cpu, "%s: %s is %s, expected %s", op, arg, dtype_name(t->dtype), cpu_dtype_want(dt));
        return false;
    }
    int64_t len;
    if (cpu_extent_bytes(t) < 0 || !cpu_row_len(t, &len) || (t->row_stride && t->row_stride != len)) {
        cpu_fail(cpu, "%s: %s has a bad shape or is not contiguous", op, arg);
        return false;
    }
    int64_t numel = t->ndim > 0 ? t->shape[0] : 1;
    if (numel != 0 && len > INT64_MAX / numel) {
        cpu_fail(cpu, "%s: %s is too large", op, arg);
        return false;
    }
    numel *= len;
    if (n >= 0 && numel != n) {
        cpu_fail(cpu, "%s: %s has %lld elements, expected %lld", op, arg, (long long)numel, (long long)n);
        return false;
    }
    return true;
}

/* ---- memory ---- */

static vllm_status cpu_alloc(backend *be, tensor *t) {
    (void)be;
    if ((unsigned)t->dtype >= DTYPE_COUNT || t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu alloc: bad dtype or ndim (%d)", t->ndim);
    t->row_stride = 0;
    int64_t bytes = cpu_extent_bytes(t);
    if (bytes < 0 || (uint64_t)bytes > (uint64_t)SIZE_MAX - CPU_ALIGN)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu alloc: bad or too large shape for %s tensor",
                        dtype_name(t->dtype));
    size_t size = ((size_t)bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (size == 0) size = CPU_ALIGN;
    t->data = aligned_alloc(CPU_ALIGN, size);
    if (!t->data)
        return vt_error(VLLM_ERR_NO_MEMORY, "cpu alloc: out of memory (%zu bytes)", size);
    return VLLM_OK;
}

static void cpu_release(backend *be, tensor *t) {
    (void)be;
    if (!t) return;
    free(t->data);
    t->data = NULL;
}

static vllm_status cpu_import(backend *be, const tensor *host, tensor *out) {
    (void)be;
    if ((unsigned)host->dtype >= DTYPE_COUNT || cpu_extent_bytes(host) < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu import: bad dtype, shape or stride");
    if (!host->data && cpu_extent_bytes(host) > 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu import: tensor has no data");
    *out = *host;  /* a view: the CPU computes on host memory directly */
    return VLLM_OK;
}

static void cpu_release_import(backend *be, tensor *t) {
    (void)be;
    if (t) t->data = NULL;
}

static vllm_status cpu_copy_check(const char *what, const tensor *t, const void *host, size_t nbytes) {
    int64_t extent = cpu_extent_bytes(t);
    if (extent < 0) return vt_error(VLLM_ERR_INVALID_ARG, "cpu %s: bad tensor shape or stride", what);
    if ((uint64_t)nbytes > (uint64_t)extent)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu %s: %zu bytes do not fit a tensor of %lld bytes", what,
                        nbytes, (long long)extent);
    if (nbytes && (!t->data || !host))
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu %s: NULL pointer", what);
    return VLLM_OK;
}

static vllm_status cpu_upload(backend *be, tensor *dst, const void *src, size_t nbytes) {
    (void)be;
    vllm_status st = cpu_copy_check("upload", dst, src, nbytes);
    if (st != VLLM_OK) return st;
    if (nbytes) memcpy(dst->data, src, nbytes);
    return VLLM_OK;
}

static vllm_status cpu_synchronize(backend *be) {
    cpu_state *cpu = cpu_of(be);
    if (cpu->err == VLLM_OK) return VLLM_OK;
    vllm_status st = vt_error(cpu->err, "cpu backend: %s", cpu->err_msg);
    cpu->err = VLLM_OK;
    cpu->err_msg[0] = '\0';
    return st;
}

/* Reports a pending op failure first, like a device copy after a failed kernel. */
static vllm_status cpu_download(backend *be, void *dst, const tensor *src, size_t nbytes) {
    vllm_status st = cpu_synchronize(be);
    if (st != VLLM_OK) return st;
    st = cpu_copy_check("download", src, dst, nbytes);
    if (st != VLLM_OK) return st;
    if (nbytes) memcpy(dst, src->data, nbytes);
    return VLLM_OK;
}

static vllm_status cpu_zero(backend *be, tensor *t) {
    (void)be;
    int64_t len;
    if (cpu_extent_bytes(t) < 0 || !cpu_row_len(t, &len))
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu zero: bad tensor shape or stride");
    int64_t rows = t->ndim > 0 ? t->shape[0] : 1;
    size_t es = dtype_size(t->dtype);
    if (rows == 0 || len == 0) return VLLM_OK;
    if (!t->data) return vt_error(VLLM_ERR_INVALID_ARG, "cpu zero: tensor has no data");
    if (!t->row_stride || t->row_stride == len) {
        memset(t->data, 0, (size_t)(rows * len) * es);
    } else {
        for (int64_t r = 0; r < rows; r++)
            memset((char *)t->data + (size_t)(r * t->row_stride) * es, 0, (size_t)len * es);
    }
    return VLLM_OK;
}

/* ---- the backend object ---- */

static void cpu_destroy(backend *be) {
    if (!be) return;
    cpu_state *cpu = cpu_of(be);
    if (cpu) {
        cpu_sample_free(cpu);
        tp_free(cpu->pool);
    }
    free(cpu);
    free(be);
}

static const backend_ops CPU_OPS = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .import = cpu_import,
    .release_import = cpu_release_import,
    .upload = cpu_upload,
    .download = cpu_download,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .linear_create = cpu_linear_create,
    .linear_free = cpu_linear_free,
    .linear = cpu_linear,
    .embedding = cpu_embedding,
    .rms_norm = cpu_rms_norm,
    .add = cpu_add,
    .add_rms_norm = cpu_add_rms_norm,
    .silu_mul = cpu_silu_mul,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .qk_norm_rope_kv = cpu_qk_norm_rope_kv,
    .attention = cpu_attention,
    .gather_rows = cpu_gather_rows,
    .sample = cpu_sample,
    .logprobs = cpu_logprobs,
};

vllm_status cpu_backend_create(const backend_options *opt, backend **out) {
    *out = NULL;
    int num_threads = opt ? opt->num_threads : 0;
    backend *be = calloc(1, sizeof *be);
    cpu_state *cpu = calloc(1, sizeof *cpu);
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return vt_error(VLLM_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    vllm_status st = tp_create(num_threads, &cpu->pool);
    if (st != VLLM_OK) {
        free(be);
        free(cpu);
        return st;
    }
    cpu->num_threads = tp_num_threads(cpu->pool);
    be->ops = &CPU_OPS;
    be->name = "cpu";
    be->act_dtype = DTYPE_F32;
    be->kv_dtype = DTYPE_F32;
    be->impl = cpu;
    LOG_D("cpu backend: %d threads", cpu->num_threads);
    *out = be;
    return VLLM_OK;
}
