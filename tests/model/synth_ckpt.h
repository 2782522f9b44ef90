/*
 * synth_ckpt.h: what the model tests that write their own random checkpoints share (test_gptoss_model.c,
 * test_qwen3_next_model.c): a seeded LCG (SYNTH_SEED, defined before the include), BF16-rounded fills, and a
 * list of BF16 / U8 tensors written as model.safetensors.
 */
#ifndef VLLM_TESTS_SYNTH_CKPT_H
#define VLLM_TESTS_SYNTH_CKPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/safetensors.h"
#include "tensor/tensor.h"

#ifndef SYNTH_SEED
#error "define SYNTH_SEED before including synth_ckpt.h"
#endif

static uint64_t rng = SYNTH_SEED;
static float unif(void) { /* (-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static unsigned rnd(unsigned n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(rng >> 33) % n;
}
static float bf(float x) { return bf16_to_f32(f32_to_bf16(x)); }
/* p[0..n) = offset + scale * uniform(-1, 1), rounded to BF16 (what the checkpoint will hold) */
static void fill(float *p, int n, float scale, float offset) {
    for (int i = 0; i < n; i++) p[i] = bf(offset + unif() * scale);
}

#define SYNTH_MAX_TENSORS 1024
typedef struct ckpt {
    const char *names[SYNTH_MAX_TENSORS];
    tensor ts[SYNTH_MAX_TENSORS];
    void *owned[SYNTH_MAX_TENSORS];
    size_t n;
} ckpt;

/* adds name = a BF16 copy of the floats at p, of the given shape */
static void add_bf16(ckpt *c, const char *name, const float *p, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    uint16_t *d = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(p[i]);
    c->owned[c->n] = d;
    c->names[c->n] = strdup(name);
    c->ts[c->n++] = tensor_make(DTYPE_BF16, d, ndim, shape);
}

/* adds name = the bytes d (taken over: freed with the list), of the given shape */
static inline void add_u8(ckpt *c, const char *name, uint8_t *d, int ndim, const int64_t *shape) {
    c->owned[c->n] = d;
    c->names[c->n] = strdup(name);
    c->ts[c->n++] = tensor_make(DTYPE_U8, d, ndim, shape);
}

/* Writes the list to dir/model.safetensors and frees it (c too); whether the file was written. */
static bool ckpt_write(ckpt *c, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bool ok = st_write_file(path, c->names, c->ts, c->n) == VLLM_OK;
    for (size_t i = 0; i < c->n; i++) {
        free((void *)c->names[i]);
        free(c->owned[i]);
    }
    free(c);
    return ok;
}

#endif
