/*
 * ops_elementwise.c: the CPU row-wise ops: embedding lookup, RMSNorm,
 * residual add, SiLU-gated product and row gather. Each parallelises over
 * rows and runs inline when the tensor is small.
 */
#include "cpu/cpu_internal.h"

/* ---- embedding ---- */

typedef struct emb_ctx {
    const unsigned char *table;
    size_t row_bytes;
    dtype dt;
    const int32_t *ids;
    float *out;
    int64_t os, D;
} emb_ctx;

static void emb_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const emb_ctx *c = ctx;
    for (int64_t t = t0; t < t1; t++)
        cpu_widen(c->out + t * c->os, c->table + (size_t)c->ids[t] * c->row_bytes, c->dt, c->D);
}

// table (V, D), ids (T) -> out (T, D)
void cpu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "embedding", "table", table, CPU_ANY_FLOAT, -1, -1) ||
        !cpu_check_vec(cpu, "embedding", "ids", ids, DTYPE_I32, -1))
        return;
    int64_t T = tensor_numel(ids), V = cpu_rows(table), D = tensor_row_len(table);
    if (!cpu_check_mat(cpu, "embedding", "out", out, DTYPE_F32, T, D)) return;
    const int32_t *id = ids->data;
    for (int64_t t = 0; t < T; t++) {
        if (id[t] < 0 || id[t] >= V) {
            cpu_fail(cpu, "embedding: token id %d at position %lld is out of range [0, %lld)", id[t],
                     (long long)t, (long long)V);
            return;
        }
    }
    emb_ctx c = {table->data, (size_t)tensor_row_stride(table) * dtype_size(table->dtype), table->dtype,
                 id, out->data, tensor_row_stride(out), D};
    tp_run_cost(cpu->pool, T, (double)D, emb_task, &c);
}

/* ---- RMSNorm ---- */

typedef struct norm_ctx {
    const float *x;
    int64_t xs;
    const void *w;
    dtype wdt;
    int64_t G, groups;  /* group size (len(w)) and groups per row */
    float eps;
    float *out;
    int64_t os;
} norm_ctx;

CPU_INLINE void norm_rows(const norm_ctx *c, int64_t r0, int64_t r1, dtype wdt) {
    const int64_t G = c->G;
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t g = 0; g < c->groups; g++) {
            const float *x = c->x + r * c->xs + g * G;
            float *o = c->out + r * c->os + g * G;
            float scale = 1.0f / sqrtf(cpu_dot(x, x, G) / (float)G + c->eps);
            for (int64_t i = 0; i < G; i++) o[i] = x[i] * scale * cpu_load(c->w, wdt, i);
        }
    }
}

static void norm_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const norm_ctx *c = ctx;
    switch (c->wdt) {
    case DTYPE_BF16: norm_rows(c, r0, r1, DTYPE_BF16); break;
    case DTYPE_F16: norm_rows(c, r0, r1, DTYPE_F16); break;
    default: norm_rows(c, r0, r1, DTYPE_F32); break;
    }
}

// x (T, D), w (G) with D % G == 0 -> out (T, D); out may be x
void cpu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "rms_norm", "x", x, DTYPE_F32, -1, -1) ||
        !cpu_check_vec(cpu, "rms_norm", "w", w, CPU_ANY_FLOAT, -1))
        return;
    int64_t T = cpu_rows(x), D = tensor_row_len(x), G = tensor_numel(w);
    if (G <= 0 || D % G != 0) {
        cpu_fail(cpu, "rms_norm: row length %lld is not a multiple of the weight length %lld", (long long)D,
                 (long long)G);
        return;
    }
    if (!cpu_check_mat(cpu, "rms_norm", "out", out, DTYPE_F32, T, D)) return;
    norm_ctx c = {x->data, tensor_row_stride(x), w->data, w->dtype, G, D / G, eps,
                  out->data, tensor_row_stride(out)};
    tp_run_cost(cpu->pool, T, 3.0 * (double)D, norm_task, &c);
}

/* ---- add ---- */

typedef struct add_ctx {
    float *x;
    int64_t xs;
    const float *y;
    int64_t ys, D;
} add_ctx;

static void add_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const add_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->x + r * c->xs;
        const float *y = c->y + r * c->ys;
        for (int64_t i = 0; i < c->D; i++) x[i] += y[i];
    }
}

// x (T, D) += y (T, D)
void cpu_add(backend *be, tensor *x, const tensor *y) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "add", "x", x, DTYPE_F32, -1, -1) ||
        !cpu_check_mat(cpu, "add", "y", y, DTYPE_F32, cpu_rows(x), tensor_row_len(x)))
        return;
    add_ctx c = {x->data, tensor_row_stride(x), y->data, tensor_row_stride(y), tensor_row_len(x)};
    tp_run_cost(cpu->pool, cpu_rows(x), (double)c.D, add_task, &c);
}

/* ---- SiLU-gated product ---- */

typedef struct silu_ctx {
    const float *gu;
    int64_t gs;
    float *out;
    int64_t os, I;
} silu_ctx;

static void silu_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const silu_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *g = c->gu + r * c->gs;
        const float *u = g + c->I;
        float *o = c->out + r * c->os;
        for (int64_t i = 0; i < c->I; i++) o[i] = g[i] / (1.0f + cpu_expf(-g[i])) * u[i];
    }
}

// gate_up (T, 2I) -> out (T, I) = silu(gate) * up
void cpu_silu_mul(backend *be, const tensor *gate_up, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!cpu_check_mat(cpu, "silu_mul", "gate_up", gate_up, DTYPE_F32, -1, -1)) return;
    int64_t T = cpu_rows(gate_up), D = tensor_row_len(gate_up);
    if (D % 2) {
        cpu_fail(cpu, "silu_mul: gate_up row length %lld is odd", (long long)D);
        return;
    }
    if (!cpu_check_mat(cpu, "silu_mul", "out", out, DTYPE_F32, T, D / 2)) return;
    silu_ctx c = {gate_up->data, tensor_row_stride(gate_up), out->data, tensor_row_stride(out), D / 2};
    tp_run_cost(cpu->pool, T, 8.0 * (double)c.I, silu_task, &c);
}

/* ---- gather rows ---- */

typedef struct gather_ctx {
    const unsigned char *x;
    size_t x_row_bytes;
    dtype xdt;
    const int32_t *idx;
    unsigned char *out;
    size_t out_row_bytes;
    dtype odt;
    int64_t D;
} gather_ctx;

static void gather_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const gather_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *src = c->x + (size_t)c->idx[r] * c->x_row_bytes;
        unsigned char *dst = c->out + (size_t)r * c->out_row_bytes;
        if (c->xdt == c->odt)
            memcpy(dst, src, (size_t)c->D * dtype_size(c->xdt));
        else
            cpu_widen((float *)(void *)dst, src, c->xdt, c->D);
    }
}

// x (M, D), idx (N) -> out (N, D); out is x's dtype, or F32 from any float x
void cpu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out) {
    cpu_state *cpu = cpu_of(be);
    if (!x || !out) {
        cpu_fail(cpu, "gather_rows: missing x or out");
        return;
    }
    bool widen = x->dtype != out->dtype;
    if (!cpu_check_mat(cpu, "gather_rows", "x", x, widen ? CPU_ANY_FLOAT : x->dtype, -1, -1) ||
        !cpu_check_vec(cpu, "gather_rows", "idx", idx, DTYPE_I32, -1))
        return;
    int64_t N = tensor_numel(idx), M = cpu_rows(x), D = tensor_row_len(x);
    if (!cpu_check_mat(cpu, "gather_rows", "out", out, widen ? DTYPE_F32 : x->dtype, N, D)) return;
    const int32_t *id = idx->data;
    for (int64_t r = 0; r < N; r++) {
        if (id[r] < 0 || id[r] >= M) {
            cpu_fail(cpu, "gather_rows: index %d at %lld is out of range [0, %lld)", id[r], (long long)r,
                     (long long)M);
            return;
        }
    }
    gather_ctx c = {x->data, (size_t)tensor_row_stride(x) * dtype_size(x->dtype), x->dtype, id,
                    out->data, (size_t)tensor_row_stride(out) * dtype_size(out->dtype), out->dtype, D};
    tp_run_cost(cpu->pool, N, (double)D, gather_task, &c);
}
