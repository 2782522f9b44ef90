/*
 * ops_fused.c: the CPU backend's fused ops, as plain composites of the
 * single ops (tensor/op_composite.h): the reference that a GPU backend's
 * fused kernels must match; and the CPU's answer to supports().
 */
#include "cpu/cpu_internal.h"
#include "tensor/op_composite.h"

// x (T, D) += y (T, D); out (T, D) = rms_norm(x) * w
void cpu_add_rms_norm(backend *be, tensor *x, const tensor *y, const tensor *w, float eps, tensor *out) {
    cpu_add(be, x, y);
    cpu_rms_norm(be, x, w, eps, out);
}

// x (T, D) += y (T, D); out (T, D) = norm(x) (be_norm)
void cpu_add_norm(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out) {
    const char *err = add_norm_composite(be, x, y, n, out);
    if (err) cpu_fail(cpu_of(be), "%s", err);
}

// y = ny(y); x (T, D) += y; out (T, D) = nx(x) when nx is given
void cpu_norm_add_norm(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out) {
    const char *err = norm_add_norm_composite(be, x, y, ny, nx, out);
    if (err) cpu_fail(cpu_of(be), "%s", err);
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

// q (T, nq*hd), k (T, nk*hd): per-head norms of any kind (optional), rope; k, v -> paged caches
void cpu_qk_norm_rope_kv_ex(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                            const be_norm *k_norm, const tensor *positions, const tensor *cos_sin, int head_dim,
                            int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m) {
    const char *err = qk_norm_rope_kv_ex_composite(be, q, k, v, q_norm, k_norm, positions, cos_sin, head_dim, rot_dim,
                                                   neox, k_cache, v_cache, m);
    if (err) cpu_fail(cpu_of(be), "%s", err);
}

// the linear layer with its norm, gated product or residual add (backend.h linear_fuse)
void cpu_linear_fused(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f, tensor *y) {
    const char *err = linear_fused_composite(be, lin, x, f, y);
    if (err) cpu_fail(cpu_of(be), "%s", err);
}

/* Every op runs on the CPU: the elementwise ones natively, the fused ones as
 * their composites; refused only where the op itself would fail. */
be_support cpu_supports(backend *be, be_op op, const void *params) {
    (void)be;
    switch (op) {
    case BE_OP_ATTENTION: {
        const attn_params *p = params;
        return p && p->head_dim > 0 && p->head_dim <= CPU_MAX_HEAD_DIM && p->softcap >= 0.0f && !isinf(p->softcap)
                   ? BE_NATIVE /* sinks included */
                   : BE_UNSUPPORTED;
    }
    case BE_OP_ACT_MUL:
    case BE_OP_ACTIVATION: /* the clamped SwiGLU is gated only */
        return params && (unsigned)*(const be_act *)params < BE_ACT_COUNT &&
                       !(op == BE_OP_ACTIVATION && *(const be_act *)params == BE_ACT_SWIGLU_OAI)
                   ? BE_NATIVE
                   : BE_UNSUPPORTED;
    case BE_OP_NORM:
    case BE_OP_ADD_NORM:
    case BE_OP_QK_NORM_ROPE_KV: {
        const be_norm *n = params;
        if (!n) return op == BE_OP_QK_NORM_ROPE_KV ? BE_COMPOSITE : BE_UNSUPPORTED;
        if ((unsigned)n->kind >= BE_NORM_COUNT) return BE_UNSUPPORTED;
        return op == BE_OP_NORM ? BE_NATIVE : BE_COMPOSITE;
    }
    case BE_OP_LINEAR_FUSED: {
        const linear_fuse *f = params;
        return !f || ((unsigned)f->act < BE_ACT_COUNT && (unsigned)f->norm_kind < BE_NORM_COUNT &&
                      !(f->silu_mul && f->accumulate) &&
                      !(f->res && (!f->res_out || !f->res_norm || (unsigned)f->res_norm->kind >= BE_NORM_COUNT)))
                   ? BE_COMPOSITE
                   : BE_UNSUPPORTED;
    }
    case BE_OP_SOFTCAP: return BE_NATIVE;
    case BE_OP_MOE: {
        const moe_params *p = params;
        return p && p->top_k >= 1 && p->top_k <= p->num_experts && (unsigned)p->scoring < BE_MOE_SCORING_COUNT &&
                       (unsigned)p->act < BE_ACT_COUNT && !be_moe_routing_check(p)
                   ? BE_NATIVE
                   : BE_UNSUPPORTED;
    }
    case BE_OP_GATED_DELTA_NET: /* ops_linear_attn.c: any head shape, state F32 / F16 / BF16 */
        return params && cpu_gdn_params_ok(params) ? BE_NATIVE : BE_UNSUPPORTED;
    case BE_OP_MLA: /* ops_attention_mla.c: L + R and head_linear's K up to its stack rows */
        return params && cpu_mla_params_ok(params) ? BE_NATIVE : BE_UNSUPPORTED;
    default: return BE_UNSUPPORTED;
    }
}
