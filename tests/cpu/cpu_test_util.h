/*
 * cpu_test_util.h: helpers shared by the CPU backend tests: a seeded RNG,
 * random arrays stored in F32 / F16 / BF16, and backends with 1 or N
 * threads where the N-thread one parallelises even tiny ops.
 */
#ifndef VLLM_TESTS_CPU_TEST_UTIL_H
#define VLLM_TESTS_CPU_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_internal.h"
#include "tensor/backend.h"
#include "test.h"

static uint64_t ct_rng_state = 0x9e3779b97f4a7c15ull;

static inline void ct_seed(uint64_t s) { ct_rng_state = s * 0x9e3779b97f4a7c15ull + 1; }

static inline uint32_t ct_u32(void) {
    ct_rng_state ^= ct_rng_state << 13;
    ct_rng_state ^= ct_rng_state >> 7;
    ct_rng_state ^= ct_rng_state << 17;
    return (uint32_t)(ct_rng_state >> 16);
}

/* Uniform in [-1, 1). */
static inline float ct_uniform(void) { return (float)((double)ct_u32() / 4294967296.0 * 2.0 - 1.0); }

static inline void ct_fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = ct_uniform() * scale;
}

/* Stores f in dtype dt at dst[i] (any alignment). */
static inline void ct_store(void *dst, dtype dt, int64_t i, float f) {
    unsigned char *d = dst;
    if (dt == DTYPE_F32) {
        memcpy(d + 4 * i, &f, 4);
    } else {
        uint16_t h = dt == DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
        memcpy(d + 2 * i, &h, 2);
    }
}

/* The value stored at src[i], widened with the reference conversions of tensor.h. */
static inline double ct_load(const void *src, dtype dt, int64_t i) {
    const unsigned char *s = src;
    if (dt == DTYPE_F32) {
        float f;
        memcpy(&f, s + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    return dt == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

static const dtype CT_WDTYPES[3] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

/* A backend of num_threads; force_parallel lowers the work threshold to 0
 * so that every op with more than one item is split across threads. */
static inline backend *ct_backend(int num_threads, int force_parallel) {
    backend_options opt = {.num_threads = num_threads};
    backend *be = NULL;
    if (cpu_backend_create(&opt, &be) != VLLM_OK) {
        fprintf(stderr, "cpu_backend_create failed: %s\n", vllm_last_error());
        exit(1);
    }
    if (force_parallel) tp_set_min_work(cpu_of(be)->pool, 0);
    return be;
}

/* Number of backends ct_backends makes: 1 thread, 4 threads forced parallel, 4 threads default. */
#define CT_NBE 3
static inline void ct_backends(backend *be[CT_NBE]) {
    be[0] = ct_backend(1, 0);
    be[1] = ct_backend(4, 1);
    be[2] = ct_backend(4, 0);
}
static inline void ct_backends_free(backend *be[CT_NBE]) {
    for (int i = 0; i < CT_NBE; i++) backend_free(be[i]);
}

/* |a - b| <= tol * scale, where scale is the magnitude the error scales with. */
#define CT_REL_TOL 1e-5

#endif
