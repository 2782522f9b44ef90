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
#include <string.h>

#include "core/log.h"
#include "cpu/cpu_internal.h"
#include "dist/tpg_group.h"
#include "tensor/ggml_dtype.h"
#include "tensor/ggml_quant.h"
#include "tensor/tensor_check.h"

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

/* CPU op checks: the shared tensor checks (tensor/tensor_check.h), reported through cpu_fail. */
static unsigned cpu_dtypes(dtype dt) { return dt == CPU_ANY_FLOAT ? TENSOR_FLOAT : TENSOR_DT(dt); }

bool cpu_check_mat(cpu_state *cpu, const char *op, const char *arg, const tensor *t, dtype dt,
                   int64_t rows, int64_t cols) {
    char msg[sizeof cpu->err_msg];
    if (tensor_check_mat(t, cpu_dtypes(dt), rows, cols, op, arg, msg, sizeof msg)) return true;
    cpu_fail(cpu, "%s", msg);
    return false;
}

bool cpu_check_vec(cpu_state *cpu, const char *op, const char *arg, const tensor *t, dtype dt, int64_t n) {
    char msg[sizeof cpu->err_msg];
    if (tensor_check_vec(t, cpu_dtypes(dt), n, op, arg, msg, sizeof msg)) return true;
    cpu_fail(cpu, "%s", msg);
    return false;
}

/* ---- memory ---- */

static vllm_status cpu_alloc(backend *be, tensor *t) {
    (void)be;
    if ((unsigned)t->dtype >= DTYPE_COUNT || t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu alloc: bad dtype or ndim (%d)", t->ndim);
    t->row_stride = 0;
    int64_t bytes = tensor_extent_bytes(t);
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
    if ((unsigned)host->dtype >= DTYPE_COUNT || tensor_extent_bytes(host) < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu import: bad dtype, shape or stride");
    if (!host->data && tensor_extent_bytes(host) > 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu import: tensor has no data");
    *out = *host;  /* a view: the CPU computes on host memory directly */
    return VLLM_OK;
}

static void cpu_release_import(backend *be, tensor *t) {
    (void)be;
    if (t) t->data = NULL;
}

static vllm_status cpu_copy_check(const char *what, const tensor *t, const void *host, size_t nbytes) {
    int64_t extent = tensor_extent_bytes(t);
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
    if (tensor_extent_bytes(t) < 0 || !tensor_row_len_checked(t, &len))
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

static void cpu_copy(backend *be, const tensor *src, tensor *dst) {
    cpu_state *cpu = cpu_of(be);
    if ((unsigned)src->dtype >= DTYPE_COUNT) {
        cpu_fail(cpu, "copy: src has a bad dtype");
        return;
    }
    if (!cpu_check_vec(cpu, "copy", "src", src, src->dtype, -1) ||
        !cpu_check_vec(cpu, "copy", "dst", dst, src->dtype, tensor_numel(src)))
        return;
    size_t n = (size_t)tensor_numel(src) * dtype_size(src->dtype);
    if (n && dst->data != src->data) memmove(dst->data, src->data, n);
}

/* ---- the backend object ---- */

static void cpu_destroy(backend *be) {
    if (!be) return;
    cpu_state *cpu = cpu_of(be);
    if (cpu) {
        cpu_sample_free(cpu);
        tp_free(cpu->pool);
        free(cpu->attn_dec);
        free(cpu->lin_ws);
    }
    free(cpu);
    free(be);
}

/* x = its sum over the tensor-parallel group (row by row when strided: every rank has the same shape) */
static void cpu_all_reduce(backend *be, tensor *x) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu->tp_group || tpg_size(cpu->tp_group) == 1) return;
    if (!cpu_check_mat(cpu, "all_reduce", "x", x, DTYPE_F32, -1, -1)) {
        tpg_abort(cpu->tp_group, "all_reduce: a rank's tensor is not F32");
        return;
    }
    const int64_t rows = cpu_rows(x), cols = tensor_numel(x) / (rows ? rows : 1), rs = tensor_row_stride(x);
    vllm_status st = VLLM_OK;
    if (rs == cols) st = tpg_all_reduce_f32(cpu->tp_group, cpu->tp_rank, x->data, rows * cols);
    else
        for (int64_t r = 0; r < rows && st == VLLM_OK; r++)
            st = tpg_all_reduce_f32(cpu->tp_group, cpu->tp_rank, (float *)x->data + r * rs, cols);
    if (st != VLLM_OK) cpu_fail(cpu, "all_reduce: %s", vllm_last_error());
}

/* out (N, C tp): rank k's x (N, C) in columns [k C, (k + 1) C) */
static void cpu_all_gather_cols(backend *be, const tensor *x, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    const int n = cpu->tp_group ? tpg_size(cpu->tp_group) : 1;
    const int64_t N = x ? cpu_rows(x) : 0, C = N ? tensor_numel(x) / N : 0;
    if (!cpu_check_mat(cpu, "all_gather_cols", "x", x, DTYPE_F32, -1, -1) ||
        !cpu_check_mat(cpu, "all_gather_cols", "out", out, DTYPE_F32, N, C * n)) {
        if (cpu->tp_group) tpg_abort(cpu->tp_group, "all_gather_cols: bad shapes on a rank");
        return;
    }
    const int64_t xs = tensor_row_stride(x), os = tensor_row_stride(out);
    float *buf = malloc((size_t)(N * C * n + 1) * sizeof *buf), *mine = malloc((size_t)(N * C + 1) * sizeof *mine);
    vllm_status st = buf && mine ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "out of memory (all_gather_cols)");
    for (int64_t r = 0; st == VLLM_OK && r < N; r++) memcpy(mine + r * C, (const float *)x->data + r * xs, (size_t)C * 4);
    if (st == VLLM_OK && n > 1) st = tpg_all_gather(cpu->tp_group, cpu->tp_rank, mine, (size_t)(N * C) * 4, buf);
    else if (st == VLLM_OK) memcpy(buf, mine, (size_t)(N * C) * 4);
    else if (cpu->tp_group) tpg_abort(cpu->tp_group, vllm_last_error());
    for (int k = 0; st == VLLM_OK && k < n; k++)
        for (int64_t r = 0; r < N; r++)
            memcpy((float *)out->data + r * os + k * C, buf + ((int64_t)k * N + r) * C, (size_t)C * 4);
    if (st != VLLM_OK) cpu_fail(cpu, "all_gather_cols: %s", vllm_last_error());
    free(buf);
    free(mine);
}

/* out (T, D) = table[ids - row0], zero rows for ids outside the table's range */
static void cpu_embedding_range(backend *be, const tensor *table, const tensor *ids, int64_t row0, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "embedding_range", "table", table, CPU_ANY_FLOAT, -1, -1) ||
        !cpu_check_vec(cpu, "embedding_range", "ids", ids, DTYPE_I32, -1))
        return;
    const int64_t T = tensor_numel(ids), V = cpu_rows(table), D = tensor_row_len(table), ts = tensor_row_stride(table);
    if (!cpu_check_mat(cpu, "embedding_range", "out", out, DTYPE_F32, T, D)) return;
    const int32_t *id = ids->data;
    const size_t es = dtype_size(table->dtype);
    for (int64_t t = 0; t < T; t++) {
        float *o = (float *)out->data + t * tensor_row_stride(out);
        const int64_t r = (int64_t)id[t] - row0;
        if (r < 0 || r >= V) {
            memset(o, 0, (size_t)D * sizeof *o);
            continue;
        }
        const char *row = (const char *)table->data + (size_t)(r * ts) * es;
        for (int64_t d = 0; d < D; d++)
            o[d] = table->dtype == DTYPE_F32   ? ((const float *)row)[d]
                   : table->dtype == DTYPE_BF16 ? bf16_to_f32(((const uint16_t *)row)[d])
                                                : f16_to_f32(((const uint16_t *)row)[d]);
    }
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
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .linear_create = cpu_linear_create,
    .linear_free = cpu_linear_free,
    .linear = cpu_linear,
    .linear_fused = cpu_linear_fused,
    .embedding = cpu_embedding,
    .rms_norm = cpu_rms_norm,
    .add = cpu_add,
    .add_rms_norm = cpu_add_rms_norm,
    .silu_mul = cpu_silu_mul,
    .act_mul = cpu_act_mul,
    .activation = cpu_activation,
    .softcap = cpu_softcap,
    .scale = cpu_scale,
    .norm = cpu_norm,
    .add_norm = cpu_add_norm,
    .norm_add_norm = cpu_norm_add_norm,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .qk_norm_rope_kv = cpu_qk_norm_rope_kv,
    .qk_norm_rope_kv_ex = cpu_qk_norm_rope_kv_ex,
    .attention = cpu_attention,
    .head_linear = cpu_head_linear,
    .attention_mla = cpu_attention_mla,
    .mla_prep = cpu_mla_prep,
    .gather_rows = cpu_gather_rows,
    .experts_create = cpu_experts_create,
    .experts_free = cpu_experts_free,
    .moe_route = cpu_moe_route,
    .moe_experts = cpu_moe_experts,
    .sigmoid_gate = cpu_sigmoid_gate,
    .causal_conv1d = cpu_causal_conv1d,
    .gated_delta_rule = cpu_gated_delta_rule,
    .rms_norm_gated = cpu_rms_norm_gated,
    .gdn_gating = cpu_gdn_gating,
    .sigmoid_mul = cpu_sigmoid_mul,
    .sample = cpu_sample,
    .logprobs = cpu_logprobs,
    .supports = cpu_supports,
    .all_reduce = cpu_all_reduce,
    .all_gather_cols = cpu_all_gather_cols,
    .embedding_range = cpu_embedding_range,
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
    { /* denormals flushed in the ops (threadpool.h: a block of tiny activations made a quantized layer 4-7x slower);
         VLLM_CPU_FLUSH_DENORMALS=0 keeps them */
        const char *fd = getenv("VLLM_CPU_FLUSH_DENORMALS");
        tp_set_flush_denormals(cpu->pool, !(fd && !strcmp(fd, "0")));
    }
    be->ops = &CPU_OPS;
    be->name = "cpu";
    be->native_blocks = 0; /* every ggml block type ggml_quant.h reads, through cpu_quant_matmul, and FP8_B128 */
    for (int d = DTYPE_FIRST_BLOCK; d < DTYPE_COUNT; d++) {
        ggml_type gt = GGML_TYPE_F32;
        if (dtype_to_ggml((dtype)d, &gt) && gq_type_supported(gt)) be->native_blocks |= 1u << (d - DTYPE_FIRST_BLOCK);
    }
    be->native_blocks |= 1u << (DTYPE_FP8_B128 - DTYPE_FIRST_BLOCK); /* through cpu_fp8_matmul */
    be->native_blocks |= 1u << (DTYPE_I4_B128 - DTYPE_FIRST_BLOCK);  /* through cpu_i4_matmul */
    be->act_dtype = DTYPE_F32;
    be->kv_dtype = opt && opt->kv_cache_fp8 ? DTYPE_F8_E4M3 : DTYPE_F32; /* ops_attention.c reads both */
    if (opt && opt->tp_group) {
        if (opt->tp_rank < 0 || opt->tp_rank >= tpg_size(opt->tp_group)) {
            tp_free(cpu->pool);
            free(be);
            free(cpu);
            return vt_error(VLLM_ERR_INVALID_ARG, "cpu backend: tensor-parallel rank %d outside a group of %d",
                            opt->tp_rank, tpg_size(opt->tp_group));
        }
        cpu->tp_group = opt->tp_group;
        cpu->tp_rank = opt->tp_rank;
    }
    be->impl = cpu;
    LOG_D("cpu backend: %d threads", cpu->num_threads);
    *out = be;
    return VLLM_OK;
}
