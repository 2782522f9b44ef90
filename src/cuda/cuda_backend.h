/*
 * cuda_backend.h: the CUDA compute backend (all ops of tensor/backend.h) on
 * one GPU, for Hopper first (built for sm_90a with a compute_80 PTX fallback).
 *
 * Activations and KV caches are BF16 with f32 accumulation; the logits the
 * model asks for in F32 are produced in F32. Imported tensors are uploaded
 * once and keep their dtype; linear weights are converted to BF16 on the
 * device (no host copy is kept). Every op is queued on one stream.
 *
 * Ops cannot return errors: a bad argument (shape, dtype) skips the op and a
 * bad index found on the device (token id, position, slot, block id) is
 * recorded by the kernel; both are reported by the next synchronize() or
 * download() as VLLM_ERR_BACKEND with a message naming the op and the value.
 * The ops of one backend must be called from one thread at a time.
 *
 * Decode-path kernels use programmatic dependent launch (cuda_internal.h)
 * and every op can be recorded into a CUDA graph (graph_begin / graph_end /
 * graph_launch). Switches for comparisons (read at creation):
 * VLLM_CUDA_NO_PDL (plain launches), VLLM_CUDA_GEMV=rows (the one-row-per-
 * warp GEMV only), VLLM_CUDA_NO_TC_ATTN (prefill attention on CUDA cores).
 *
 * This header is C (included by src/tensor/backend.c); the implementation
 * is CUDA C++ in the .cu files of src/cuda/.
 */
#ifndef VLLM_CUDA_CUDA_BACKEND_H
#define VLLM_CUDA_CUDA_BACKEND_H

#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the backend on GPU opt->device_id (act_dtype BF16, kv_dtype BF16).
 * VLLM_ERR_UNSUPPORTED ("no CUDA device") when the runtime finds no GPU. */
vllm_status cuda_backend_create(const backend_options *opt, backend **out);

#ifdef __cplusplus
}
#endif

#endif
