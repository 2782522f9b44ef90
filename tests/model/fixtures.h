/*
 * fixtures.h: reading the parity fixtures of tools/make_fixtures.py
 * (DIR/<case>/expected.json) for the CPU and CUDA parity tests: the case
 * folders of a root, sorted, a case's prompts as engine prompts, and the
 * teacher-forced comparison of an engine's logprobs with a recording.
 */
#ifndef VLLM_TESTS_MODEL_FIXTURES_H
#define VLLM_TESTS_MODEL_FIXTURES_H

#include <dirent.h>
#include <math.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vllm.h"

#define FIXTURES_MAX 64

typedef struct fixture_names {
    char name[FIXTURES_MAX][256];
    int n;
} fixture_names;

/* dir/config.json = src_config's with quantization_config replaced by quant (a JSON value; NULL: dropped) */
static inline void fixture_write_config(const char *src_config, const char *dir, const char *quant) {
    json_error_t err;
    json_t *c = json_load_file(src_config, 0, &err);
    CHECK(c != NULL);
    if (!c) return;
    if (quant) json_object_set_new(c, "quantization_config", json_loads(quant, 0, &err));
    else json_object_del(c, "quantization_config");
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(json_dump_file(c, path, 0) == 0);
    json_decref(c);
}

static int fixture_cmp(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* The case folders under root, sorted; false when root cannot be read. */
static inline bool fixture_list(const char *root, fixture_names *out) {
    out->n = 0;
    DIR *d = opendir(root);
    if (!d) return false;
    struct dirent *ent;
    while ((ent = readdir(d)) && out->n < FIXTURES_MAX) {
        if (ent->d_name[0] == '.') continue;
        snprintf(out->name[out->n++], sizeof out->name[0], "%s", ent->d_name);
    }
    closedir(d);
    qsort(out->name, (size_t)out->n, sizeof out->name[0], fixture_cmp);
    return true;
}

/* root/name/expected.json (dir gets root/name), or NULL with the reason in *err. */
static inline json_t *fixture_load(const char *root, const char *name, char *dir, size_t dir_size,
                                   json_error_t *err) {
    char path[1200];
    if (snprintf(dir, dir_size, "%s/%s", root, name) >= (int)dir_size ||
        snprintf(path, sizeof path, "%s/expected.json", dir) >= (int)sizeof path) {
        snprintf(err->text, sizeof err->text, "path too long");
        return NULL;
    }
    return json_load_file(path, 0, err);
}

/* A case's prompts ("prompts": [{"prompt_token_ids", "token_ids", ...}]) as engine prompts. */
typedef struct fixture_prompts {
    vllm_prompt *ps;    /* (n) */
    int32_t **ids;      /* (n) the prompts' token ids */
    size_t n;
    int max_new;        /* the longest recorded continuation */
} fixture_prompts;

static inline void fixture_prompts_load(json_t *prompts, fixture_prompts *fp) {
    fp->n = json_array_size(prompts);
    fp->ps = calloc(fp->n ? fp->n : 1, sizeof *fp->ps);
    fp->ids = calloc(fp->n ? fp->n : 1, sizeof *fp->ids);
    fp->max_new = 0;
    for (size_t i = 0; i < fp->n; i++) {
        json_t *p = json_object_get(json_array_get(prompts, i), "prompt_token_ids");
        size_t n = json_array_size(p);
        fp->ids[i] = malloc((n ? n : 1) * sizeof(int32_t));
        for (size_t j = 0; j < n; j++) fp->ids[i][j] = (int32_t)json_integer_value(json_array_get(p, j));
        fp->ps[i].token_ids = fp->ids[i];
        fp->ps[i].num_token_ids = n;
        int nt = (int)json_array_size(json_object_get(json_array_get(prompts, i), "token_ids"));
        if (nt > fp->max_new) fp->max_new = nt;
    }
}

static inline void fixture_prompts_free(fixture_prompts *fp) {
    for (size_t i = 0; i < fp->n; i++) free(fp->ids[i]);
    free(fp->ids);
    free(fp->ps);
}

/* The engine on dir (max_model_len 128, 2 threads): the greedy continuation of one prompt, its first k tokens and
 * their logprobs in tok / lp; VLLM_OK, or the status of the engine's creation or generation. */
static inline vllm_status fixture_greedy(const char *dir, const int32_t *ids, size_t n, int k, float *lp, int32_t *tok) {
    vllm_engine_options o = vllm_engine_default_options();
    o.max_model_len = 128;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    if (st != VLLM_OK) return st;
    vllm_prompt p = {.token_ids = ids, .num_token_ids = n};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = k;
    vllm_completion *c = NULL;
    st = vllm_generate(e, &p, 1, &sp, false, &c, NULL);
    if (st == VLLM_OK)
        for (int j = 0; j < k; j++) lp[j] = c[0].logprobs[j], tok[j] = c[0].token_ids[j];
    vllm_completions_free(c, 1);
    vllm_engine_free(e);
    return st;
}

/* the KV cache dtype fixture_teacher_forced's engines use (NULL: auto) */
static const char *fixture_kv_cache_dtype;

/* Every recorded token's logprob (prompts: a fixture's "prompts") given the recorded context, through
 * prompt_logprobs on prompt + continuation, on device ("cpu", "cuda"): each within tf_max, their mean within
 * tf_mean; a PARITY line says what was seen, under the label what. flips (or NULL): set to a calloc'd
 * (prompts, stride) array, 1 where the engine's own top-1 is not the recorded token (token j of prompt i at
 * i * stride + j; the caller frees it). */
static inline void fixture_teacher_forced_flips(const char *name, const char *dir, json_t *prompts, const char *device,
                                                double tf_max, double tf_mean, const char *what,
                                                unsigned char **flips, size_t *stride) {
    size_t np = json_array_size(prompts);
    if (flips) {
        *stride = 1;
        for (size_t i = 0; i < np; i++) {
            size_t nt = json_array_size(json_object_get(json_array_get(prompts, i), "token_ids"));
            if (nt > *stride) *stride = nt;
        }
        *flips = calloc(np ? np * *stride : 1, 1);
    }
    int fails_before = t_failures;
    vllm_engine_options o = vllm_engine_default_options();
    o.device = device;
    o.kv_cache_dtype = fixture_kv_cache_dtype;
    o.max_model_len = 128;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s [%s]: %s", dir, what, vllm_last_error());
    double worst = 0, sum = 0, flip_gap = 0;
    int n = 0, nflips = 0;
    for (size_t i = 0; st == VLLM_OK && i < np; i++) {
        json_t *p = json_array_get(prompts, i);
        json_t *pids = json_object_get(p, "prompt_token_ids"), *toks = json_object_get(p, "token_ids"),
               *lps = json_object_get(p, "logprobs"), *gaps = json_object_get(p, "top2_gap");
        size_t P = json_array_size(pids), nt = json_array_size(toks);
        int32_t *ids = malloc((P + nt + 1) * sizeof *ids);
        for (size_t j = 0; j < P; j++) ids[j] = (int32_t)json_integer_value(json_array_get(pids, j));
        for (size_t j = 0; j < nt; j++) ids[P + j] = (int32_t)json_integer_value(json_array_get(toks, j));
        vllm_prompt pr = {.token_ids = ids, .num_token_ids = P + nt};
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.max_tokens = 1;
        sp.prompt_logprobs = 1; /* the engine's own top-1 at each position too (reported) */
        vllm_completion *c = NULL;
        st = vllm_generate(e, &pr, 1, &sp, false, &c, NULL);
        CHECK_MSG(st == VLLM_OK && c && c[0].prompt_logprobs, "%s [%s] prompt %zu: %s", name, what, i,
                  vllm_last_error());
        if (st == VLLM_OK && c && c[0].prompt_logprobs) {
            for (size_t j = 0; j < nt; j++) {
                double got = c[0].prompt_logprobs[P + j], want = json_number_value(json_array_get(lps, j));
                double d = fabs(got - want);
                if (!(d <= worst)) worst = d; /* NaN sticks */
                sum += d;
                n++;
                CHECK_MSG(d <= tf_max, "%s [%s] prompt %zu token %zu: logprob %.5f want %.5f", name, what,
                          i, j, got, want);
                /* reported, not checked: where the engine's own top-1 is not the recorded token */
                const int k = c[0].num_prompt_top_logprobs;
                if (k >= 1 && c[0].prompt_top_logprob_ids &&
                    c[0].prompt_top_logprob_ids[(P + j) * (size_t)k] != ids[P + j]) {
                    double gap = json_number_value(json_array_get(gaps, j));
                    if (gap > flip_gap) flip_gap = gap;
                    nflips++;
                    if (flips && *flips) (*flips)[i * *stride + j] = 1;
                }
            }
        }
        vllm_completions_free(c, 1);
        free(ids);
    }
    vllm_engine_free(e);
    CHECK_MSG(n > 0 && sum / n <= tf_mean, "%s [%s]: mean |d| %.4f over %d logprobs", name, what,
              n ? sum / n : 0.0, n);
    printf("PARITY %-18s %-30s %s  %d logprobs, max|d| %.4f, mean|d| %.4f (bounds %.3f / %.3f); own top-1 another "
           "token at %d (largest reference gap there %.4f)\n",
           name, what, t_failures == fails_before ? "pass" : "FAIL", n, worst, n ? sum / n : 0.0, tf_max,
           tf_mean, nflips, flip_gap);
    fflush(stdout);
}

static inline void fixture_teacher_forced(const char *name, const char *dir, json_t *prompts, const char *device,
                                          double tf_max, double tf_mean, const char *what) {
    fixture_teacher_forced_flips(name, dir, prompts, device, tf_max, tf_mean, what, NULL, NULL);
}

#endif
