/* op_composite.c: fused ops as sequences of single backend ops (op_composite.h). */
#include "tensor/op_composite.h"

#include <stddef.h>

/* in (T, in) = the linear_fuse's norm of x into h */
static void fuse_norm(backend *be, const tensor *x, const linear_fuse *f) {
    if (f->norm_kind == BE_NORM_RMS) {
        be->ops->rms_norm(be, x, f->norm_w, f->eps, f->h); /* h (T, in) */
    } else {
        const be_norm n = {.kind = f->norm_kind, .w = f->norm_w, .b = f->norm_b, .eps = f->eps};
        be->ops->norm(be, x, &n, f->h); /* h (T, in) */
    }
}

const char *linear_fused_composite(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f,
                                   tensor *y) {
    const backend_ops *o = be->ops;
    if (!f) {
        o->linear(be, lin, x, y);
        return NULL;
    }
    if (f->silu_mul && f->accumulate) return "linear_fused: silu_mul and accumulate do not combine";
    if ((unsigned)f->act >= BE_ACT_COUNT) return "linear_fused: activation out of range";
    if ((unsigned)f->norm_kind >= BE_NORM_COUNT) return "linear_fused: norm kind out of range";
    const bool norm = linear_fuse_has_norm(f);
    if (norm && !f->h) return "linear_fused: a norm needs the h scratch tensor";
    if ((f->silu_mul || f->accumulate) && !f->mid) return "linear_fused: silu_mul and accumulate need the mid scratch";
    const char *err = linear_fuse_residual(be, &x, f);
    if (err) return err;
    const tensor *in = x;
    if (norm) {
        fuse_norm(be, x, f);
        in = f->h;
    }
    if (f->silu_mul) {
        o->linear(be, lin, in, f->mid);              /* mid (T, 2I) */
        if (f->act == BE_ACT_SILU) o->silu_mul(be, f->mid, y);  /* y (T, I) */
        else o->act_mul(be, f->act, f->mid, y);
    } else if (f->accumulate) {
        o->linear(be, lin, in, f->mid);              /* mid (T, out) */
        o->add(be, y, f->mid);                       /* y += mid */
    } else {
        o->linear(be, lin, in, y);
    }
    return NULL;
}

const char *linear_fuse_residual(backend *be, const tensor **x, const linear_fuse *f) {
    if (!f || !f->res) return NULL;
    if (!f->res_norm || !f->res_out) return "linear_fused: res needs res_norm and res_out";
    be->ops->norm(be, f->res, f->res_norm, f->res_out); /* res_out (T, in) = res_norm(res) */
    be->ops->add(be, f->res_out, *x);                   /* res_out += x */
    *x = f->res_out;
    return NULL;
}

const char *add_norm_composite(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out) {
    if (!n) return "add_norm: no be_norm";
    be->ops->add(be, x, y);                 /* x (T, D) += y */
    be->ops->norm(be, x, n, out);           /* out (T, D) */
    return NULL;
}

const char *norm_add_norm_composite(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx,
                                    tensor *out) {
    if (!ny) return "norm_add_norm: no be_norm for y";
    if (nx && !out) return "norm_add_norm: a norm of x needs out";
    be->ops->norm(be, y, ny, y);            /* y (T, D) = ny(y) */
    if (nx) be->ops->add_norm(be, x, y, nx, out); /* x += y; out = nx(x) */
    else be->ops->add(be, x, y);            /* x += y */
    return NULL;
}

const char *qk_norm_rope_kv_ex_composite(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                                         const be_norm *k_norm, const tensor *positions, const tensor *cos_sin,
                                         int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache,
                                         const attn_meta *m) {
    const backend_ops *o = be->ops;
    if (q_norm) o->norm(be, q, q_norm, q);  /* per head: q_norm->w (head_dim) */
    if (k_norm) o->norm(be, k, k_norm, k);
    o->rope(be, q, k, positions, cos_sin, head_dim, rot_dim, neox);
    o->kv_write(be, k, v, k_cache, v_cache, m);
    return NULL;
}
