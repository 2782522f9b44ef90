/*
 * cli_util.c: the helpers cli.h declares for every vllmc subcommand: strict
 * number and id-list parsing, option values, the engine flags and
 * --load-format that generate, serve and bench share, and the clock.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

bool cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_float(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    const char *p = s;
    size_t k = 0;
    while (*p) {
        char *end;
        errno = 0;
        while (*p == ' ') p++;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(a);
            return false;
        }
        a[k++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') {
            p++;
            if (!*p) {
                free(a);
                return false;
            }
        } else if (*p) {
            free(a);
            return false;
        }
    }
    if (k == 0) {
        free(a);
        return false;
    }
    *ids = a;
    *n = k;
    return true;
}

bool cli_has_value(int argc, char **argv, int i, const char *cmd) {
    if (i + 1 < argc) return true;
    fprintf(stderr, "%s: %s needs a value\n", cmd, argv[i]);
    return false;
}

/* vLLM's EngineArgs flags (vllm/engine/arg_utils.py, add_cli_args): --enforce-eager and the
 * paired --enable-prefix-caching / --no-enable-prefix-caching (argparse.BooleanOptionalAction). */
bool cli_engine_flag(const char *arg, vllm_engine_options *eo) {
    if (!strcmp(arg, "--enforce-eager")) {
        eo->enforce_eager = true;
    } else if (!strcmp(arg, "--enable-prefix-caching")) {
        eo->enable_prefix_caching = true;
    } else if (!strcmp(arg, "--no-enable-prefix-caching")) {
        eo->enable_prefix_caching = false;
    } else {
        return false;
    }
    return true;
}

bool cli_is_state_dtype(const char *arg) {
    return !strcmp(arg, "--mamba-cache-dtype") || !strcmp(arg, "--mamba-ssm-cache-dtype") ||
           !strcmp(arg, "--kv-cache-dtype");
}

bool cli_state_dtype(const char *cmd, const char *arg, const char *val, vllm_engine_options *eo) {
    if (!strcmp(arg, "--kv-cache-dtype")) {
        static const char *const kv[] = {"auto", "fp8", "fp8_e4m3"};
        for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
            if (!strcmp(val, kv[i])) return eo->kv_cache_dtype = kv[i], true;
        fprintf(stderr, "%s: --kv-cache-dtype must be auto, fp8 or fp8_e4m3, got '%s'\n", cmd, val);
        return false;
    }
    static const char *const ok[] = {"auto", "float32", "bfloat16", "float16"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(val, ok[i])) {
            if (!strcmp(arg, "--mamba-ssm-cache-dtype")) eo->mamba_ssm_cache_dtype = ok[i];
            else eo->mamba_cache_dtype = ok[i];
            return true;
        }
    fprintf(stderr, "%s: %s must be auto, float32, bfloat16 or float16, got '%s'\n", cmd, arg, val);
    return false;
}

bool cli_load_format(const char *cmd, const char *val, vllm_load_format *out) {
    if (!strcmp(val, "dummy")) {
        *out = VLLM_LOAD_DUMMY;
    } else if (!strcmp(val, "auto") || !strcmp(val, "safetensors")) {
        *out = VLLM_LOAD_AUTO;
    } else {
        fprintf(stderr, "%s: --load-format must be auto or dummy, got '%s'\n", cmd, val);
        return false;
    }
    return true;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool cli_is_pooling_arg(const char *arg) {
    return !strcmp(arg, "--runner") || !strcmp(arg, "--convert") || !strcmp(arg, "--pooler-config");
}

/* --pooler-config's JSON (vLLM's PoolerConfig): pooling_type / seq_pooling_type and use_activation / normalize. */
static bool pooler_config(const char *cmd, const char *val, vllm_engine_options *eo) {
    json_error_t jerr;
    json_t *j = json_loads(val, 0, &jerr);
    bool ok = json_is_object(j);
    if (!ok) fprintf(stderr, "%s: --pooler-config must be a JSON object, got '%s'\n", cmd, val);
    const char *key;
    json_t *v;
    json_object_foreach(ok ? j : NULL, key, v) {
        if (!strcmp(key, "pooling_type") || !strcmp(key, "seq_pooling_type")) {
            const char *t = json_string_value(v);
            if (t && !strcmp(t, "LAST")) eo->pooling_type = VLLM_POOLING_LAST;
            else if (t && !strcmp(t, "MEAN")) eo->pooling_type = VLLM_POOLING_MEAN;
            else if (t && !strcmp(t, "CLS")) eo->pooling_type = VLLM_POOLING_CLS;
            else if (!json_is_null(v)) {
                fprintf(stderr, "%s: --pooler-config %s must be \"LAST\", \"MEAN\" or \"CLS\"\n", cmd, key);
                ok = false;
            }
        } else if (!strcmp(key, "use_activation") || !strcmp(key, "normalize")) {
            if (json_is_boolean(v)) eo->pooler_normalize = json_is_true(v) ? 1 : -1;
            else if (!json_is_null(v)) {
                fprintf(stderr, "%s: --pooler-config %s must be true or false\n", cmd, key);
                ok = false;
            }
        } else if (!json_is_null(v)) {
            fprintf(stderr, "%s: --pooler-config %s is not supported (pooling_type, use_activation)\n", cmd, key);
            ok = false;
        }
    }
    json_decref(j);
    return ok;
}

bool cli_pooling_arg(const char *cmd, const char *arg, const char *val, vllm_engine_options *eo) {
    if (!strcmp(arg, "--pooler-config")) return pooler_config(cmd, val, eo);
    if (!strcmp(arg, "--runner")) {
        if (!strcmp(val, "auto")) eo->runner = VLLM_RUNNER_AUTO;
        else if (!strcmp(val, "generate")) eo->runner = VLLM_RUNNER_GENERATE;
        else if (!strcmp(val, "pooling")) eo->runner = VLLM_RUNNER_POOLING;
        else {
            fprintf(stderr, "%s: --runner must be auto, generate or pooling, got '%s'\n", cmd, val);
            return false;
        }
        return true;
    }
    /* --convert: embed is the pooling runner's conversion of a causal LM (vLLM's as_embedding_model) */
    if (!strcmp(val, "embed")) {
        if (eo->runner == VLLM_RUNNER_GENERATE) {
            fprintf(stderr, "%s: --convert embed needs --runner pooling (or auto)\n", cmd);
            return false;
        }
        eo->runner = VLLM_RUNNER_POOLING;
        return true;
    }
    if (!strcmp(val, "auto") || !strcmp(val, "none")) return true;
    fprintf(stderr, "%s: --convert must be auto, none or embed, got '%s'%s\n", cmd, val,
            !strcmp(val, "classify") || !strcmp(val, "reward") ? " (classification and reward models are not supported)"
                                                                : "");
    return false;
}
