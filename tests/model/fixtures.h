/*
 * fixtures.h: reading the parity fixtures of tools/make_fixtures.py
 * (DIR/<case>/expected.json) for the CPU and CUDA parity tests: the case
 * folders of a root, sorted, and a case's prompts as engine prompts.
 */
#ifndef VLLM_TESTS_MODEL_FIXTURES_H
#define VLLM_TESTS_MODEL_FIXTURES_H

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vllm.h"

#define FIXTURES_MAX 64

typedef struct fixture_names {
    char name[FIXTURES_MAX][256];
    int n;
} fixture_names;

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

#endif
