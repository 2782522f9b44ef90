/*
 * gguf_fixture.h: what the tests that write parity fixtures as GGUF files share (test_gguf_model.c,
 * test_gguf_families.c, test_gguf_families_more.c), header only: a list of tensors in llama.cpp's layout (ne innermost first, BF16
 * kept as the bytes, Q8_0 quantized, F32 for norms and rope factors), the tensor section of a file after
 * its metadata (../loader/gguf_build.h), greedy runs of a fixture's prompts through the engine, and the
 * comparison of two runs.
 */
#ifndef VLLM_TESTS_MODEL_GGUF_FIXTURE_H
#define VLLM_TESTS_MODEL_GGUF_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../loader/gguf_build.h"
#include "fixtures.h"
#include "loader/gguf.h"
#include "tensor/ggml_quant.h"
#include "test.h"
#include "vllm.h"

#define MAXT 512

typedef struct gtensor {
    char name[128];
    int n_dims;
    int64_t ne[3];
    uint32_t type;
    uint8_t *data;
    size_t nbytes;
} gtensor;

typedef struct gfile {
    gtensor t[MAXT];
    int n;
} gfile;

static inline float bf16f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* BF16 values -> a tensor of type BF16 (the bytes kept) or Q8_0 (q8, matrices whose rows hold whole blocks) */
static inline void put(gfile *g, const char *name, int n_dims, const int64_t *ne, const uint16_t *bf, bool q8) {
    gtensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= (t->ne[i] = ne[i]);
    const bool quant = q8 && n_dims >= 2 && ne[0] % 32 == 0;
    t->type = quant ? GGML_TYPE_Q8_0 : GGML_TYPE_BF16;
    if (!quant) {
        t->nbytes = (size_t)n * 2;
        t->data = malloc(t->nbytes);
        memcpy(t->data, bf, t->nbytes);
        return;
    }
    const int64_t rows = n / ne[0];
    const size_t rb = gq_row_bytes(GGML_TYPE_Q8_0, ne[0]);
    t->nbytes = rb * (size_t)rows;
    t->data = malloc(t->nbytes);
    float *row = malloc((size_t)ne[0] * sizeof *row);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne[0]; i++) row[i] = bf16f(bf[r * ne[0] + i]);
        CHECK(gq_quantize_row(GGML_TYPE_Q8_0, row, t->data + (size_t)r * rb, ne[0]));
    }
    free(row);
}

/* F32 values -> an F32 tensor (convert_hf_to_gguf.py's type for norms and other 1-D tensors) */
static inline void put_f32(gfile *g, const char *name, int n_dims, const int64_t *ne, const float *v) {
    gtensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= (t->ne[i] = ne[i]);
    t->type = GGML_TYPE_F32;
    t->nbytes = (size_t)n * sizeof(float);
    t->data = malloc(t->nbytes);
    memcpy(t->data, v, t->nbytes);
}

static inline void kv_f32(gb *b, const char *key, float v) {
    gb_key(b, key, GGUF_TYPE_FLOAT32);
    gb_f32(b, v);
}

/* After the header and the metadata: the tensor infos, then their data, 32-byte aligned. */
static inline void gf_write_tensors(gb *b, const gfile *g) {
    uint64_t off = 0;
    for (int i = 0; i < g->n; i++) {
        gb_tensor(b, g->t[i].name, (uint32_t)g->t[i].n_dims, g->t[i].ne, g->t[i].type, off);
        off += (g->t[i].nbytes + 31) / 32 * 32;
    }
    gb_pad(b, 32);
    for (int i = 0; i < g->n; i++) {
        gb_bytes(b, g->t[i].data, g->t[i].nbytes);
        gb_pad(b, 32);
    }
}

static inline void free_gfile(gfile *g) {
    for (int i = 0; i < g->n; i++) free(g->t[i].data);
    g->n = 0;
}

/* The device the GGUF tests run their engines on: VLLM_TEST_GGUF_DEVICE ("cuda" on a GPU machine:
 * tools/device/check_gguf.sh), else the CPU. */
static inline const char *gf_device(void) {
    const char *d = getenv("VLLM_TEST_GGUF_DEVICE");
    return d && *d ? d : "cpu";
}
static inline bool gf_on_gpu(void) { return strcmp(gf_device(), "cpu") != 0; }

/* VLLM_TEST_GGUF_CONVERTED=DIR (tools/device/check_gguf_converter.sh): DIR/<fixture>.gguf made from the fixture by
 * llama.cpp's own convert_hf_to_gguf.py (tools/gguf_convert_fixture.py, BF16) is run in place of the test's own
 * writing of it; out gets its path, false when there is none. */
static inline bool gf_converted(const char *fixture, char *out, size_t n) {
    const char *dir = getenv("VLLM_TEST_GGUF_CONVERTED");
    if (!dir || !*dir) return false;
    snprintf(out, n, "%s/%s.gguf", dir, fixture);
    FILE *f = fopen(out, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Greedy completions of the fixture's prompts; NULL when the engine could not be made. */
static inline vllm_completion *run(const char *model, const fixture_prompts *fp, vllm_status *st) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.device = gf_device();
    if (gf_on_gpu()) o.gpu_memory_utilization = 0.2f;
    o.max_model_len = 128;
    o.block_size = 4;
    vllm_engine *e = NULL;
    if ((*st = vllm_engine_create(model, &o, &e)) != VLLM_OK) return NULL;
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = fp->max_new;
    vllm_completion *c = NULL;
    *st = vllm_generate(e, fp->ps, fp->n, &sp, false, &c, NULL);
    vllm_engine_free(e);
    return *st ? NULL : c;
}

/* Whether a GGUF run whose tensors hold the folder's values matches the folder's run: on the CPU every token and
 * logprobs within cpu_tol (F32 arithmetic on the same values); on a GPU (BF16 activations, where a GGUF's F32 norms
 * and biases meet the folder's BF16 ones) logprobs within 0.05 and 90% of the tokens (a near-tie may flip). */
static inline bool gf_same_run(size_t same, size_t total, double maxd, double cpu_tol) {
    if (!gf_on_gpu()) return same == total && total > 0 && maxd <= cpu_tol;
    return total > 0 && same * 10 >= total * 9 && maxd <= 0.05;
}

/* c against ref: tokens compared (each prompt up to its first difference: the rest follows another path),
 * the largest |logprob difference| where they agree. */
static inline void gf_compare(const vllm_completion *c, const vllm_completion *ref, const fixture_prompts *fp,
                              size_t *same, size_t *total, double *maxd) {
    *same = *total = 0;
    *maxd = 0;
    for (size_t i = 0; c && ref && i < fp->n; i++) {
        for (size_t j = 0; j < c[i].num_tokens && j < ref[i].num_tokens; j++) {
            ++*total;
            if (c[i].token_ids[j] != ref[i].token_ids[j]) break;
            ++*same;
            const double d = fabs(c[i].logprobs[j] - ref[i].logprobs[j]);
            if (d > *maxd) *maxd = d;
        }
    }
}

#endif
