/*
 * op_composite.h: fused ops written as the sequence of single backend ops
 * they stand for: their reference semantics, the CPU backend's
 * implementation, and the fallback a GPU backend takes where its fused
 * kernel does not apply (large batches, other layouts).
 */
#ifndef VLLM_TENSOR_OP_COMPOSITE_H
#define VLLM_TENSOR_OP_COMPOSITE_H

#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* linear_fused (backend.h) through rms_norm, linear, silu_mul and add of
 * be. Returns NULL, or a message for a linear_fuse it cannot run (missing
 * scratch, silu_mul with accumulate), which the caller records as its op
 * failure; the single ops check and report their tensors themselves. */
const char *linear_fused_composite(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f,
                                   tensor *y);

#ifdef __cplusplus
}
#endif
#endif
