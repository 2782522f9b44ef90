/*
 * ops_fused.c: the CPU backend's fused ops, as plain composites of the
 * single ops: the reference that a GPU backend's fused kernels must match.
 */
#include "cpu/cpu_internal.h"
#include "tensor/op_composite.h"

// x (T, D) += y (T, D); out (T, D) = rms_norm(x) * w
void cpu_add_rms_norm(backend *be, tensor *x, const tensor *y, const tensor *w, float eps, tensor *out) {
    cpu_add(be, x, y);
    cpu_rms_norm(be, x, w, eps, out);
}

// q (T, nq*hd), k (T, nk*hd): per-head norm (optional), rope; k, v -> paged caches
void cpu_qk_norm_rope_kv(backend *be, tensor *q, tensor *k, const tensor *v, const tensor *q_norm,
                         const tensor *k_norm, float eps, const tensor *positions, const tensor *cos_sin,
                         int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m) {
    if (q_norm) cpu_rms_norm(be, q, q_norm, eps, q);
    if (k_norm) cpu_rms_norm(be, k, k_norm, eps, k);
    cpu_rope(be, q, k, positions, cos_sin, head_dim, rot_dim, neox);
    cpu_kv_write(be, k, v, k_cache, v_cache, m);
}

// the linear layer with its norm, gated product or residual add (backend.h linear_fuse)
void cpu_linear_fused(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f, tensor *y) {
    const char *err = linear_fused_composite(be, lin, x, f, y);
    if (err) cpu_fail(cpu_of(be), "%s", err);
}
