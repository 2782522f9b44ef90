/*
 * cuda_test_util.h: what the CUDA op tests share (test_cuda_ops.c, test_cuda_mla.c): the CPU and GPU
 * backends, a seeded xorshift (CUDA_TEST_SEED before the include picks the seed), host <-> backend tensor
 * helpers (values packed as BF16 / F16 / F32 / raw E4M3), the GPU-vs-CPU comparison with its bounds, and the
 * check that a device-side error is reported at synchronize.
 */
#ifndef VLLM_CUDA_TEST_UTIL_H
#define VLLM_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/backend.h"
#include "tensor/fp8.h"
#include "test.h"

static backend *cpu, *gpu;

/* ---- random numbers ---- */

#ifndef CUDA_TEST_SEED
#define CUDA_TEST_SEED 0x243f6a8885a308d3ull
#endif
static uint64_t rng_state = CUDA_TEST_SEED;

static inline uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static inline float rnd(void) { return (float)((double)rnd_u32() / 4294967296.0 * 2.0 - 1.0); }
static inline double rnd01(void) { return (double)rnd_u32() / 4294967296.0; }
static inline int rnd_int(int n) { return (int)(rnd_u32() % (uint32_t)n); }

static inline float round_to(dtype dt, float f) {
    if (dt == DTYPE_BF16) return bf16_to_f32(f32_to_bf16(f));
    if (dt == DTYPE_F16) return f16_to_f32(f32_to_f16(f));
    return f;
}

/* ---- host <-> backend helpers ---- */

/* n floats of host values stored as dtype dt (malloc'd bytes). */
static inline void *pack(const float *x, int64_t n, dtype dt) {
    size_t es = dtype_size(dt);
    unsigned char *b = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; i++) {
        if (dt == DTYPE_F32) {
            memcpy(b + 4 * i, &x[i], 4);
        } else if (dt == DTYPE_F8_E4M3) { /* the raw E4M3 value (no scale) */
            b[i] = fp8_e4m3_from_f32(x[i]);
        } else {
            uint16_t h = dt == DTYPE_BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
            memcpy(b + 2 * i, &h, 2);
        }
    }
    return b;
}

static inline void unpack(const void *b, int64_t n, dtype dt, float *x) {
    const unsigned char *p = b;
    for (int64_t i = 0; i < n; i++) {
        if (dt == DTYPE_F32) {
            memcpy(&x[i], p + 4 * i, 4);
        } else if (dt == DTYPE_F8_E4M3) {
            x[i] = fp8_e4m3_to_f32(p[i]);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            x[i] = dt == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
    }
}

/* A backend tensor of shape (d0, d1) in dt holding x (host values). */
static inline tensor put(backend *be, dtype dt, int64_t d0, int64_t d1, const float *x) {
    tensor t = tensor_2d(dt, NULL, d0, d1);
    if (be->ops->alloc(be, &t) != VLLM_OK) {
        fprintf(stderr, "alloc failed: %s\n", vllm_last_error());
        exit(1);
    }
    if (x) {
        void *b = pack(x, d0 * d1, dt);
        CHECK_OK(be->ops->upload(be, &t, b, (size_t)(d0 * d1) * dtype_size(dt)));
        free(b);
    }
    return t;
}

static inline tensor put_i32(backend *be, const int32_t *x, int64_t n) {
    tensor t = tensor_1d(DTYPE_I32, NULL, n);
    CHECK_OK(be->ops->alloc(be, &t));
    CHECK_OK(be->ops->upload(be, &t, x, (size_t)n * 4));
    return t;
}

static inline tensor put_i64(backend *be, const int64_t *x, int64_t n) {
    tensor t = tensor_1d(DTYPE_I64, NULL, n);
    CHECK_OK(be->ops->alloc(be, &t));
    CHECK_OK(be->ops->upload(be, &t, x, (size_t)n * 8));
    return t;
}

/* Fills a GPU tensor (contiguous, its whole extent) with NaN bytes. */
static inline void poison(tensor *t) {
    size_t n = tensor_nbytes(t);
    unsigned char *b = malloc(n + 1);
    memset(b, 0xff, n);
    CHECK_OK(gpu->ops->upload(gpu, t, b, n));
    free(b);
}

/* The whole (contiguous) tensor as floats. */
static inline float *get(backend *be, const tensor *t) {
    int64_t n = tensor_numel(t);
    size_t bytes = (size_t)n * dtype_size(t->dtype);
    void *b = malloc(bytes + 1);
    vllm_status st = be->ops->download(be, b, t, bytes);
    CHECK_MSG(st == VLLM_OK, "download (%s): %s", be->name, vllm_last_error());
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (st == VLLM_OK) unpack(b, n, t->dtype, x);
    else for (int64_t i = 0; i < n; i++) x[i] = NAN;
    free(b);
    return x;
}

static inline void drop(backend *be, tensor *t) { be->ops->release(be, t); }

/* Releases n CPU tensors and their GPU twins. */
static inline void drop_pairs(tensor *const *c, tensor *const *g, int n) {
    for (int i = 0; i < n; i++) {
        drop(cpu, c[i]);
        drop(gpu, g[i]);
    }
}

/* gpu vs cpu values: NaN fails; ‖d‖/‖ref‖ <= rel and |d| <= elem * max|ref| + rel * |ref| each. */
static inline void compare(const char *what, const float *g, const float *c, int64_t n, double rel, double elem) {
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(c[i]));
    int64_t bad = 0, first = -1, nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(g[i]) || isnan(c[i])) {
            if (!nan++ && first < 0) first = i;
            continue;
        }
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
        if (fabs(d) > elem * mx + rel * fabs(c[i]) + 1e-30) {
            if (first < 0) first = i;
            bad++;
        }
    }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("  %-90s rel err %.2e\n", what, err);
    CHECK_MSG(nan == 0 && bad == 0 && err <= rel,
              "%s: rel err %.3g, %lld elements off, %lld NaN; first at %lld: gpu %.6g cpu %.6g", what, err,
              (long long)bad, (long long)nan, (long long)first, first >= 0 ? (double)g[first] : 0.0,
              first >= 0 ? (double)c[first] : 0.0);
}

#define REL 1e-2   /* BF16 outputs */
#define ELEM 2e-2

/* Checks that the GPU reports an error naming `op` at synchronize, and is usable afterwards. */
static inline void expect_device_error(const char *op) {
    vllm_status st = gpu->ops->synchronize(gpu);
    CHECK_MSG(st == VLLM_ERR_BACKEND, "%s: status %d, want a backend error", op, st);
    CHECK_MSG(strstr(vllm_last_error(), op) != NULL, "'%s' not in: %s", op, vllm_last_error());
    CHECK_OK(gpu->ops->synchronize(gpu));
}

#endif
