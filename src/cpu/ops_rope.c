/*
 * ops_rope.c: the CPU rotary position embedding, in place on the q and k
 * views (usually strided column slices of the fused qkv buffer).
 *
 * cos_sin row p is [cos(p f_0) .. cos(p f_{r/2-1}) | sin(p f_0) .. sin(p f_{r/2-1})]
 * with r = rot_dim; only the first rot_dim values of each head rotate.
 *   neox (HF Llama):  (x_i, x_{i+r/2}) -> (x_i c_i - x_{i+r/2} s_i, x_{i+r/2} c_i + x_i s_i)
 *   GPT-J style:      (x_2i, x_2i+1)   -> (x_2i c_i - x_2i+1 s_i,   x_2i+1 c_i + x_2i s_i)
 */
#include "cpu/cpu_internal.h"

typedef struct rope_ctx {
    float *x[2];        /* q, k */
    int64_t xs[2];      /* row strides */
    int64_t heads[2];   /* heads per row */
    const int32_t *pos;
    const float *cos_sin;
    int64_t cs_stride;
    int hd, half;
    bool neox;
} rope_ctx;

static void rope_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const rope_ctx *c = ctx;
    const int half = c->half;
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = c->cos_sin + (int64_t)c->pos[t] * c->cs_stride;
        const float *sn = cs + half;
        for (int which = 0; which < 2; which++) {
            if (!c->x[which]) continue;
            float *row = c->x[which] + t * c->xs[which];
            for (int64_t h = 0; h < c->heads[which]; h++) {
                float *x = row + h * c->hd;
                if (c->neox) {
                    for (int i = 0; i < half; i++) {
                        float x1 = x[i], x2 = x[i + half];
                        x[i] = x1 * cs[i] - x2 * sn[i];
                        x[i + half] = x2 * cs[i] + x1 * sn[i];
                    }
                } else {
                    for (int i = 0; i < half; i++) {
                        float x1 = x[2 * i], x2 = x[2 * i + 1];
                        x[2 * i] = x1 * cs[i] - x2 * sn[i];
                        x[2 * i + 1] = x2 * cs[i] + x1 * sn[i];
                    }
                }
            }
        }
    }
}

// q (T, nq*hd), k (T, nk*hd) in place; positions (T); cos_sin (max_pos, rot_dim)
void cpu_rope(backend *be, tensor *q, tensor *k, const tensor *positions, const tensor *cos_sin,
              int head_dim, int rot_dim, bool neox) {
    cpu_state *cpu = cpu_of(be);
    if (head_dim <= 0 || rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim) {
        cpu_fail(cpu, "rope: bad head_dim %d / rot_dim %d (need 0 < rot_dim <= head_dim, rot_dim even)",
                 head_dim, rot_dim);
        return;
    }
    if (!cpu_check_vec(cpu, "rope", "positions", positions, DTYPE_I32, -1) ||
        !cpu_check_mat(cpu, "rope", "cos_sin", cos_sin, DTYPE_F32, -1, rot_dim))
        return;
    int64_t T = tensor_numel(positions), max_pos = cpu_rows(cos_sin);
    rope_ctx c = {.pos = positions->data, .cos_sin = cos_sin->data, .cs_stride = tensor_row_stride(cos_sin),
                  .hd = head_dim, .half = rot_dim / 2, .neox = neox};
    tensor *xs[2] = {q, k};
    const char *names[2] = {"q", "k"};
    for (int i = 0; i < 2; i++) {
        if (!xs[i]) continue;  /* k may be omitted */
        if (!cpu_check_mat(cpu, "rope", names[i], xs[i], DTYPE_F32, T, -1)) return;
        int64_t D = tensor_row_len(xs[i]);
        if (D % head_dim) {
            cpu_fail(cpu, "rope: %s row length %lld is not a multiple of head_dim %d", names[i], (long long)D,
                     head_dim);
            return;
        }
        c.x[i] = xs[i]->data;
        c.xs[i] = tensor_row_stride(xs[i]);
        c.heads[i] = D / head_dim;
    }
    for (int64_t t = 0; t < T; t++) {
        if (c.pos[t] < 0 || c.pos[t] >= max_pos) {
            cpu_fail(cpu, "rope: position %d of token %lld is out of range [0, %lld)", c.pos[t], (long long)t,
                     (long long)max_pos);
            return;
        }
    }
    double cost = 3.0 * (double)(c.heads[0] + c.heads[1]) * rot_dim;
    tp_run_cost(cpu->pool, T, cost, rope_task, &c);
}
