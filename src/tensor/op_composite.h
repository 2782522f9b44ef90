/*
 * op_composite.h: fused ops written as the sequence of single backend ops
 * they stand for: their reference semantics, the CPU backend's
 * implementation, and the fallback a GPU backend takes where its fused
 * kernel does not apply (large batches, other layouts, other kinds).
 */
#ifndef VLLM_TENSOR_OP_COMPOSITE_H
#define VLLM_TENSOR_OP_COMPOSITE_H

#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a linear_fuse asks for the norm stage (a weight, or a kind other than plain RMSNorm). */
static inline bool linear_fuse_has_norm(const linear_fuse *f) {
    return f && (f->norm_w != NULL || f->norm_kind != BE_NORM_RMS);
}

/* linear_fused (backend.h) through rms_norm (or norm), linear, silu_mul (or
 * act_mul) and add of be. Returns NULL, or a message for a linear_fuse it
 * cannot run (missing scratch, silu_mul with accumulate, an activation or
 * norm kind out of range), which the caller records as its op failure; the
 * single ops check and report their tensors themselves. */
const char *linear_fused_composite(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f,
                                   tensor *y);

/* linear_fuse's pending residual add (f->res) as norm then add: res_out = x + res_norm(res), and *x becomes
 * res_out for the stages after it. NULL (nothing to do, or done), or a message (res without res_norm or
 * res_out). */
const char *linear_fuse_residual(backend *be, const tensor **x, const linear_fuse *f);

/* add_norm (backend.h) as add then norm. NULL, or a message (no be_norm). */
const char *add_norm_composite(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out);

/* norm_add_norm (backend.h) as norm (y in place), then add_norm (nx given) or add. NULL, or a message
 * (no ny, or nx without out). */
const char *norm_add_norm_composite(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx,
                                    tensor *out);

/* qk_norm_rope_kv_ex (backend.h) as norm (q, k, in place; each when given),
 * rope and kv_write. Returns NULL (the ops report their own failures). */
const char *qk_norm_rope_kv_ex_composite(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                                         const be_norm *k_norm, const tensor *positions, const tensor *cos_sin,
                                         int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache,
                                         const attn_meta *m);

#ifdef __cplusplus
}
#endif
#endif
