/* op_composite.c: fused ops as sequences of single backend ops (op_composite.h). */
#include "tensor/op_composite.h"

#include <stddef.h>

const char *linear_fused_composite(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f,
                                   tensor *y) {
    const backend_ops *o = be->ops;
    if (!f) {
        o->linear(be, lin, x, y);
        return NULL;
    }
    if (f->silu_mul && f->accumulate) return "linear_fused: silu_mul and accumulate do not combine";
    if (f->norm_w && !f->h) return "linear_fused: a norm needs the h scratch tensor";
    if ((f->silu_mul || f->accumulate) && !f->mid) return "linear_fused: silu_mul and accumulate need the mid scratch";
    const tensor *in = x;
    if (f->norm_w) {
        o->rms_norm(be, x, f->norm_w, f->eps, f->h); /* h (T, in) */
        in = f->h;
    }
    if (f->silu_mul) {
        o->linear(be, lin, in, f->mid);              /* mid (T, 2I) */
        o->silu_mul(be, f->mid, y);                  /* y (T, I) */
    } else if (f->accumulate) {
        o->linear(be, lin, in, f->mid);              /* mid (T, out) */
        o->add(be, y, f->mid);                       /* y += mid */
    } else {
        o->linear(be, lin, in, y);
    }
    return NULL;
}
