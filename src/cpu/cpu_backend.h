/*
 * cpu_backend.h: the CPU compute backend (all ops of tensor/backend.h).
 *
 * Activations and KV caches are F32; weights stay in their checkpoint dtype
 * (F32, F16 or BF16) and are read in place. Ops run on a pthreads pool.
 * Ops cannot return errors: a bad argument (shape mismatch, token id out of
 * range, ...) skips the op and is reported by the next synchronize() as
 * VLLM_ERR_BACKEND with a message naming the op and the argument.
 * alloc() does not initialise memory (use zero()). The ops of one backend
 * must be called from one thread at a time (the engine thread); two
 * backends in one process are independent.
 */
#ifndef VLLM_CPU_CPU_BACKEND_H
#define VLLM_CPU_CPU_BACKEND_H

#include "tensor/backend.h"

/* Creates the CPU backend (act_dtype F32, kv_dtype F32) with a pthreads pool
 * of opt->num_threads (0 = all cores via sysconf). */
vllm_status cpu_backend_create(const backend_options *opt, backend **out);

#endif
