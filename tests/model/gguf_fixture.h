/*
 * gguf_fixture.h: what the tests that write parity fixtures as GGUF files share (test_gguf_model.c,
 * test_gguf_families.c, test_gguf_families_more.c), header only: a list of tensors in llama.cpp's layout (ne innermost first, BF16
 * kept as the bytes, Q8_0 quantized, F32 for norms and rope factors), the tensor section of a file after
 * its metadata (../loader/gguf_build.h), greedy runs of a fixture's prompts through the engine, and the
 * comparison of two runs.
 */
#ifndef VLLM_TESTS_MODEL_GGUF_FIXTURE_H
#define VLLM_TESTS_MODEL_GGUF_FIXTURE_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "../loader/gguf_build.h"
#include "fixtures.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"
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

/* BF16 values -> a tensor of block type qt (rows quantized by gq_quantize_row; matrices whose rows hold whole
 * blocks), or BF16 (the bytes kept) when qt is GGML_TYPE_BF16 or the rows do not hold whole blocks */
static inline void put_as(gfile *g, const char *name, int n_dims, const int64_t *ne, const uint16_t *bf, ggml_type qt) {
    gtensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= (t->ne[i] = ne[i]);
    const bool quant = qt != GGML_TYPE_BF16 && n_dims >= 2 && ne[0] % gq_block_size(qt) == 0;
    t->type = quant ? qt : GGML_TYPE_BF16;
    if (!quant) {
        t->nbytes = (size_t)n * 2;
        t->data = malloc(t->nbytes);
        memcpy(t->data, bf, t->nbytes);
        return;
    }
    const int64_t rows = n / ne[0];
    const size_t rb = gq_row_bytes(qt, ne[0]);
    t->nbytes = rb * (size_t)rows;
    t->data = malloc(t->nbytes);
    float *row = malloc((size_t)ne[0] * sizeof *row);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne[0]; i++) row[i] = bf16f(bf[r * ne[0] + i]);
        CHECK(gq_quantize_row(qt, row, t->data + (size_t)r * rb, ne[0]));
    }
    free(row);
}

/* BF16 values -> a tensor of type BF16 (the bytes kept) or Q8_0 (q8, matrices whose rows hold whole blocks) */
static inline void put(gfile *g, const char *name, int n_dims, const int64_t *ne, const uint16_t *bf, bool q8) {
    put_as(g, name, n_dims, ne, bf, q8 ? GGML_TYPE_Q8_0 : GGML_TYPE_BF16);
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

/* ---- the file's metadata, as the converter's set_gguf_parameters writes it ---- */

/* K_BOOLS: an array of v bools (true, false, true, ...); K_FLAGS: an array of bools spelled by s ("1101");
 * K_BOOL: one bool; K_DEL: the key left out (an entry replaced by it) */
typedef enum { K_U32, K_F32, K_STR, K_BOOLS, K_FLAGS, K_BOOL, K_DEL } kind;

typedef struct kvx {
    char key[96];
    kind k;
    double v;
    const char *s;
} kvx;

#define MAXKV 48

typedef struct kvlist {
    kvx kv[MAXKV];
    int n;
} kvlist;

/* sets "arch.suffix" (or suffix alone when arch is NULL), replacing an earlier entry of the same key */
static inline void set(kvlist *l, const char *arch, const char *suffix, kind k, double v, const char *s) {
    char key[96];
    if (arch) snprintf(key, sizeof key, "%s.%s", arch, suffix);
    else snprintf(key, sizeof key, "%s", suffix);
    int i = 0;
    while (i < l->n && strcmp(l->kv[i].key, key)) i++;
    if (i == l->n) {
        if (l->n == MAXKV) return;
        l->n++;
    }
    snprintf(l->kv[i].key, sizeof l->kv[i].key, "%s", key);
    l->kv[i].k = k;
    l->kv[i].v = v;
    l->kv[i].s = s;
}

/* Writes the file: the metadata of l, then the tensors of g. */
static inline bool write_gguf(const char *path, const kvlist *l, const gfile *g) {
    gb b = {0};
    uint64_t nkv = 0;
    for (int i = 0; i < l->n; i++) nkv += l->kv[i].k != K_DEL;
    gb_header(&b, 3, (uint64_t)g->n, nkv);
    for (int i = 0; i < l->n; i++) {
        const kvx *kv = &l->kv[i];
        switch (kv->k) {
        case K_U32: gb_kv_u32(&b, kv->key, (uint32_t)kv->v); break;
        case K_F32: kv_f32(&b, kv->key, (float)kv->v); break;
        case K_STR: gb_kv_str(&b, kv->key, kv->s); break;
        case K_BOOLS:
            gb_key(&b, kv->key, GGUF_TYPE_ARRAY);
            gb_arr(&b, GGUF_TYPE_BOOL, (uint64_t)kv->v);
            for (int j = 0; j < (int)kv->v; j++) gb_u8(&b, (uint8_t)(j % 2 == 0));
            break;
        case K_FLAGS:
            gb_key(&b, kv->key, GGUF_TYPE_ARRAY);
            gb_arr(&b, GGUF_TYPE_BOOL, (uint64_t)strlen(kv->s));
            for (const char *c = kv->s; *c; c++) gb_u8(&b, (uint8_t)(*c == '1'));
            break;
        case K_BOOL:
            gb_key(&b, kv->key, GGUF_TYPE_BOOL);
            gb_u8(&b, (uint8_t)(kv->v != 0));
            break;
        case K_DEL: break;
        }
    }
    gf_write_tensors(&b, g);
    const int rc = gb_write(&b, path);
    gb_free(&b);
    return rc == 0;
}

static inline void drop_tensor(gfile *g, const char *name) {
    for (int i = 0; i < g->n; i++) {
        if (strcmp(g->t[i].name, name)) continue;
        free(g->t[i].data);
        memmove(&g->t[i], &g->t[i + 1], (size_t)(g->n - i - 1) * sizeof *g->t);
        g->n--;
        return;
    }
}

static inline double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

/* ---- fixtures and reference folders ---- */

/* root/fixture's expected.json (*expected) and config.json (returned); dir gets the folder */
static inline json_t *load_cfg(const char *root, const char *fixture, char *dir, size_t n, json_t **expected) {
    json_error_t err;
    *expected = fixture_load(root, fixture, dir, n, &err);
    CHECK_MSG(*expected != NULL, "%s: %s", fixture, err.text);
    if (!*expected) return NULL;
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *cfg = json_load_file(p, 0, &err);
    CHECK_MSG(cfg != NULL, "%s: %s", p, err.text);
    return cfg;
}

/* A copy of the fixture folder dir in /tmp/vllmc_test_<tag>_<pid>_ref (out): config.json changed by edit, the
 * weights and generation_config.json linked */
static inline bool reference_dir(const char *tag, const char *dir, const json_t *cfg, void (*edit)(json_t *),
                                 char *out, size_t n) {
    snprintf(out, n, "/tmp/vllmc_test_%s_%d_ref", tag, (int)getpid());
    if (mkdir(out, 0700) && access(out, F_OK)) return false;
    json_t *c = json_deep_copy(cfg);
    edit(c);
    char p[1400], src[1400];
    snprintf(p, sizeof p, "%s/config.json", out);
    const bool ok = json_dump_file(c, p, JSON_INDENT(1)) == 0;
    json_decref(c);
    static const char *links[] = {"model.safetensors", "generation_config.json"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", out, links[i]);
        snprintf(src, sizeof src, "%s/%s", dir, links[i]);
        unlink(p);
        if (symlink(src, p)) return false;
    }
    return ok;
}

static inline void remove_reference_dir(const char *out) {
    static const char *files[] = {"config.json", "model.safetensors", "generation_config.json"};
    char p[1400];
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        unlink(p);
    }
    rmdir(out);
}

/* A small file of one fixture for the config and refusal checks: its config, expected.json, tensors and path. */
typedef struct small {
    json_t *cfg, *expected;
    gfile g;
    char path[256];
} small;

static inline void small_close(small *s) {
    free_gfile(&s->g);
    json_decref(s->cfg);
    json_decref(s->expected);
    unlink(s->path);
}

/* ggc_hf_config of the file, parsed (NULL on failure: the status in *st) */
static inline json_t *config_of(const char *path, vllm_status *st) {
    gguf_file *f = NULL;
    char *text = NULL;
    *st = gguf_open(path, &f);
    if (!*st) *st = ggc_hf_config(f, "x.gguf", &text);
    gguf_close(f);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return j;
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

/* A GGUF run against the folder's: tokens compared (each prompt up to its first difference: the rest follows
 * another path), the largest and the mean |logprob difference| where they agree. */
typedef struct gf_diff {
    size_t same, total;
    double max, mean;
} gf_diff;

static inline gf_diff gf_compare(const vllm_completion *c, const vllm_completion *ref, const fixture_prompts *fp) {
    gf_diff d = {0};
    double sum = 0;
    for (size_t i = 0; c && ref && i < fp->n; i++) {
        for (size_t j = 0; j < c[i].num_tokens && j < ref[i].num_tokens; j++) {
            ++d.total;
            if (c[i].token_ids[j] != ref[i].token_ids[j]) break;
            ++d.same;
            const double x = fabs(c[i].logprobs[j] - ref[i].logprobs[j]);
            sum += x;
            if (x > d.max) d.max = x;
        }
    }
    d.mean = d.same ? sum / (double)d.same : 0;
    return d;
}

/* Whether a GGUF run whose tensors hold the folder's values matches the folder's run: on the CPU every token and
 * logprobs within cpu_tol (F32 arithmetic on the same values); on a GPU (BF16 activations, where a GGUF's F32 norms,
 * biases and recurrent parameters meet the folder's BF16 ones and take other roundings: H200, 2026-12-05, max 0.07 to
 * 0.34 on the MLA, hybrid and longrope fixtures) test_cuda_parity's bounds against transformers: logprobs within
 * 0.6, their mean within 0.05, and 90% of the tokens (a near-tie may flip). */
static inline bool gf_same_run(const gf_diff *d, double cpu_tol) {
    if (!gf_on_gpu()) return d->same == d->total && d->total > 0 && d->max <= cpu_tol;
    return d->total > 0 && d->same * 10 >= d->total * 9 && d->max <= 0.6 && d->mean <= 0.05;
}

#endif
