/* pooling_config.c: sentence-transformers pooling and Matryoshka settings of a model folder (see pooling_config.h). */
#include "loader/pooling_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/error.h"
#include "loader/regular_file.h"

#define POOLING_MAX_FILE_BYTES (1u << 20)

vllm_pooling_type pooling_type_of_key(const char *key) {
    char name[64];
    const char *k = key;
    const char *pre = strstr(k, "pooling_mode_"); /* Python's replace("pooling_mode_", ""): the first one here */
    char buf[128];
    if (pre) {
        snprintf(buf, sizeof buf, "%.*s%s", (int)(pre - k), k, pre + strlen("pooling_mode_"));
        k = buf;
    }
    const char *us = strchr(k, '_');
    snprintf(name, sizeof name, "%.*s", us ? (int)(us - k) : (int)strlen(k), k);
    if (strstr(name, "lasttoken")) return VLLM_POOLING_LAST;
    if (!strcasecmp(name, "cls")) return VLLM_POOLING_CLS; /* compared upper-cased */
    if (!strcasecmp(name, "last")) return VLLM_POOLING_LAST;
    if (!strcasecmp(name, "mean")) return VLLM_POOLING_MEAN;
    return VLLM_POOLING_AUTO;
}

static vllm_status load_json(const char *text, const char *what, json_t **out) {
    json_error_t err;
    *out = json_loads(text, JSON_DECODE_ANY, &err);
    if (!*out) return vt_error(VLLM_ERR_FORMAT, "%s: invalid JSON at line %d: %s", what, err.line, err.text);
    return VLLM_OK;
}

/* modules.json: a list of {"type", "path", ...}; *pooling_path (may be NULL) gets the Pooling module's path. */
static vllm_status parse_modules(const json_t *mods, pooling_config *out, const char **pooling_path) {
    if (!json_is_array(mods)) return vt_error(VLLM_ERR_FORMAT, "modules.json: expected a list of modules");
    const json_t *pool = NULL;
    bool norm = false;
    size_t i;
    const json_t *m;
    json_array_foreach(mods, i, m) {
        const json_t *type = json_is_object(m) ? json_object_get(m, "type") : NULL;
        if (!json_is_string(type))
            return vt_error(VLLM_ERR_FORMAT, "modules.json: module %zu has no \"type\" string", i);
        if (!pool && !strcmp(json_string_value(type), "sentence_transformers.models.Pooling")) pool = m;
        if (!strcmp(json_string_value(type), "sentence_transformers.models.Normalize")) norm = true;
    }
    if (!pool) return VLLM_OK; /* vLLM: no Pooling module, no pooling config (Normalize alone is ignored) */
    out->found = true;
    out->normalize = norm;
    if (pooling_path) {
        const json_t *path = json_object_get(pool, "path");
        if (!json_is_string(path))
            return vt_error(VLLM_ERR_FORMAT, "modules.json: the Pooling module has no \"path\" string");
        *pooling_path = json_string_value(path);
    }
    return VLLM_OK;
}

static vllm_status parse_pooling(const json_t *pc, pooling_config *out) {
    if (!json_is_object(pc)) return vt_error(VLLM_ERR_FORMAT, "the Pooling module's config.json: expected an object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)pc, key, v) {
        if (!json_is_true(v)) continue; /* vLLM: `val is True` */
        vllm_pooling_type t = pooling_type_of_key(key);
        if (t != VLLM_POOLING_AUTO) out->type = t;
    }
    return VLLM_OK;
}

static vllm_status parse_config(const json_t *cfg, pooling_config *out) {
    if (!json_is_object(cfg)) return VLLM_OK; /* config.json's own reader reports that */
    const json_t *archs = json_object_get(cfg, "architectures");
    const json_t *a0 = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (json_is_string(a0) && strlen(json_string_value(a0)) < sizeof out->architecture)
        strcpy(out->architecture, json_string_value(a0));
    const json_t *im = json_object_get(cfg, "is_matryoshka");
    if (im && !json_is_null(im)) {
        if (!json_is_boolean(im)) return vt_error(VLLM_ERR_FORMAT, "config.json: is_matryoshka must be a boolean");
        out->is_matryoshka = json_is_true(im);
    }
    const json_t *md = json_object_get(cfg, "matryoshka_dimensions");
    if (md && !json_is_null(md)) {
        if (!json_is_array(md))
            return vt_error(VLLM_ERR_FORMAT, "config.json: matryoshka_dimensions must be a list of integers");
        if (json_array_size(md) > POOLING_MAX_MATRYOSHKA)
            return vt_error(VLLM_ERR_FORMAT, "config.json: matryoshka_dimensions has %zu entries (at most %d)",
                            json_array_size(md), POOLING_MAX_MATRYOSHKA);
        size_t i;
        const json_t *d;
        json_array_foreach(md, i, d) {
            if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > (1 << 30))
                return vt_error(VLLM_ERR_FORMAT, "config.json: matryoshka_dimensions[%zu] must be a positive integer",
                                i);
            out->matryoshka_dims[out->num_matryoshka_dims++] = (int)json_integer_value(d);
        }
        if (out->num_matryoshka_dims) out->is_matryoshka = true; /* bool(matryoshka_dimensions) */
    }
    return VLLM_OK;
}

vllm_status pooling_config_parse(const char *modules_json, const char *pooling_json, const char *config_json,
                                 pooling_config *out) {
    memset(out, 0, sizeof *out);
    json_t *j = NULL;
    vllm_status st = VLLM_OK;
    if (modules_json) {
        if ((st = load_json(modules_json, "modules.json", &j))) return st;
        st = parse_modules(j, out, NULL);
        json_decref(j);
        if (st) return st;
    }
    if (out->found && pooling_json) {
        if ((st = load_json(pooling_json, "the Pooling module's config.json", &j))) return st;
        st = parse_pooling(j, out);
        json_decref(j);
        if (st) return st;
    }
    if (config_json) {
        if ((st = load_json(config_json, "config.json", &j))) return st;
        st = parse_config(j, out);
        json_decref(j);
    }
    return st;
}

/* dir/name as text, NULL (VLLM_OK) when absent. */
static vllm_status read_opt(const char *dir, const char *name, char **text) {
    *text = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: path too long", dir);
    vllm_status st = rf_read(path, POOLING_MAX_FILE_BYTES, text, NULL);
    if (st == VLLM_ERR_NOT_FOUND) {
        vt_error_clear();
        return VLLM_OK;
    }
    return st;
}

vllm_status pooling_config_load(const char *dir, pooling_config *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return VLLM_OK; /* a GGUF file: no such files */
    char *mods = NULL, *pool = NULL, *cfg = NULL;
    json_t *mj = NULL;
    vllm_status st = read_opt(dir, "modules.json", &mods);
    const char *path = NULL;
    if (st == VLLM_OK && mods && (st = load_json(mods, "modules.json", &mj)) == VLLM_OK)
        st = parse_modules(mj, out, &path);
    if (st == VLLM_OK && out->found) {
        char name[512];
        if (strstr(path, "..") || path[0] == '/' ||
            snprintf(name, sizeof name, "%s/config.json", path) >= (int)sizeof name)
            st = vt_error(VLLM_ERR_FORMAT,
                          "modules.json: the Pooling module's path '%.64s' is not a folder of the model", path);
        else
            st = read_opt(dir, name, &pool);
    }
    if (st == VLLM_OK && read_opt(dir, "config.json", &cfg) != VLLM_OK) vt_error_clear(); /* hf_config reports it */
    if (cfg) { /* likewise a config.json that is not JSON: only its Matryoshka keys are ours */
        json_error_t jerr;
        json_t *cj = json_loads(cfg, 0, &jerr);
        if (!cj) free(cfg), cfg = NULL;
        json_decref(cj);
    }
    if (st == VLLM_OK) {
        /* the Pooling module's config.json missing: vLLM reads it as {} */
        pooling_config pc;
        st = pooling_config_parse(mods, out->found ? (pool ? pool : "{}") : NULL, cfg, &pc);
        if (st == VLLM_OK) *out = pc;
    }
    json_decref(mj);
    free(mods);
    free(pool);
    free(cfg);
    return st;
}
