/*
 * cli_util.c: the helpers cli.h declares for every vllmc subcommand: strict
 * number and id-list parsing, option values, the engine flags and
 * --load-format that generate, serve and bench share, generate's sampling and
 * engine options (shared with chat), and the clock.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_hub.h"

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

/* ---- the sampling and engine options of generate and chat ---- */

void cli_gen_opts_init(cli_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->eo = vllm_engine_default_options();
    o->max_tokens = 256;
    o->seed = -1;
    o->logprobs_k = -1;
    o->n_samples = 1;
    o->repetition = 1;
}

void cli_gen_opts_free(cli_gen_opts *o) {
    free(o->stops);
    free(o->bad_words);
    free(o->stop_ids);
    free(o->allowed);
    free(o->bias_ids);
    free(o->bias_vals);
    o->stops = o->bad_words = NULL;
    o->stop_ids = o->allowed = o->bias_ids = NULL;
    o->bias_vals = NULL;
}

/* --logit-bias ID:VALUE[,ID:VALUE...] */
static int logit_bias(const char *cmd, const char *q, cli_gen_opts *o) {
    size_t cap = 1;
    for (const char *t = q; *t; t++) cap += *t == ',';
    free(o->bias_ids);
    free(o->bias_vals);
    o->bias_ids = malloc(cap * sizeof *o->bias_ids);
    o->bias_vals = malloc(cap * sizeof *o->bias_vals);
    if (!o->bias_ids || !o->bias_vals) return -2;
    o->num_bias = 0;
    while (*q) {
        char *end;
        long id = strtol(q, &end, 10);
        if (end == q || *end != ':' || id < 0 || id > INT32_MAX) break;
        q = end + 1;
        double v = strtod(q, &end);
        if (end == q) break;
        o->bias_ids[o->num_bias] = (int32_t)id;
        o->bias_vals[o->num_bias++] = (float)v;
        q = end;
        if (*q == ',') q++;
        else if (*q) break;
    }
    if (*q || o->num_bias == 0) {
        fprintf(stderr, "%s: --logit-bias must be ID:VALUE[,ID:VALUE...]\n", cmd);
        return -1;
    }
    return 1;
}

static bool is_engine_int(const char *a) {
    static const char *const names[] = {"--threads",      "--block-size",           "--num-kv-blocks",
                                        "--max-model-len", "--max-num-seqs",         "--max-num-batched-tokens",
                                        "--kv-cache-memory", "--tensor-parallel-size", "-tp",
                                        "--nnodes",       "--node-rank",            "--master-port"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (!strcmp(a, names[k])) return true;
    return false;
}

int cli_gen_opt(const char *cmd, int argc, char **argv, int *ip, cli_gen_opts *o) {
    int i = *ip;
    const char *a = argv[i];
    vllm_engine_options *eo = &o->eo;
    double d;
    long long v;
#define GEN_NEED_VALUE()                                        \
    do {                                                        \
        if (!cli_has_value(argc, argv, i, cmd)) return -1;     \
        *ip = ++i;                                              \
    } while (0)
    if (!strcmp(a, "--ignore-eos")) {
        o->ignore_eos = true;
    } else if (!strcmp(a, "--no-skip-special-tokens")) {
        o->keep_special = true;
    } else if (!strcmp(a, "--include-stop-str-in-output")) {
        o->include_stop = true;
    } else if (cli_engine_flag(a, eo)) { /* --enforce-eager, --[no-]enable-prefix-caching */
        o->engine_given = true;
    } else if (!strcmp(a, "--stop") || !strcmp(a, "--bad-words")) {
        GEN_NEED_VALUE();
        const char ***list = !strcmp(a, "--stop") ? &o->stops : &o->bad_words;
        size_t *cnt = !strcmp(a, "--stop") ? &o->num_stops : &o->num_bad;
        const char **nl = realloc(*list, (*cnt + 1) * sizeof *nl);
        if (!nl) return -2;
        *list = nl;
        nl[(*cnt)++] = argv[i];
    } else if (!strcmp(a, "--stop-token-ids") || !strcmp(a, "--allowed-token-ids")) {
        GEN_NEED_VALUE();
        int32_t **dst = !strcmp(a, "--stop-token-ids") ? &o->stop_ids : &o->allowed;
        size_t *cnt = !strcmp(a, "--stop-token-ids") ? &o->num_stop_ids : &o->num_allowed;
        free(*dst);
        if (!cli_parse_ids(argv[i], dst, cnt)) {
            fprintf(stderr, "%s: %s must be comma-separated token ids\n", cmd, a);
            return -1;
        }
    } else if (!strcmp(a, "--logit-bias")) {
        GEN_NEED_VALUE();
        return logit_bias(cmd, argv[i], o);
    } else if (!strcmp(a, "--presence-penalty") || !strcmp(a, "--frequency-penalty") ||
               !strcmp(a, "--repetition-penalty")) {
        GEN_NEED_VALUE();
        if (!cli_parse_float(argv[i], &d)) { fprintf(stderr, "%s: %s needs a number\n", cmd, a); return -1; }
        if (!strcmp(a, "--presence-penalty")) o->presence = d;
        else if (!strcmp(a, "--frequency-penalty")) o->frequency = d;
        else o->repetition = d;
    } else if (!strcmp(a, "--n")) {
        GEN_NEED_VALUE();
        if (!cli_parse_int(argv[i], 1, 4096, &o->n_samples)) {
            fprintf(stderr, "%s: --n needs an integer in [1, 4096]\n", cmd);
            return -1;
        }
    } else if (!strcmp(a, "--logprobs")) {
        GEN_NEED_VALUE();
        if (!cli_parse_int(argv[i], 0, 1000, &o->logprobs_k)) {
            fprintf(stderr, "%s: --logprobs needs a non-negative integer\n", cmd);
            return -1;
        }
    } else if (!strcmp(a, "--device")) {
        GEN_NEED_VALUE();
        eo->device = argv[i];
        o->engine_given = true;
    } else if (!strcmp(a, "--tokenizer")) {
        GEN_NEED_VALUE();
        eo->tokenizer = argv[i];
        o->engine_given = true;
    } else if (!strcmp(a, "--master-addr")) {
        GEN_NEED_VALUE();
        eo->master_addr = argv[i];
        o->engine_given = true;
    } else if (!strcmp(a, "--revision") || !strcmp(a, "--tokenizer-revision")) { /* Hugging Face ids */
        if (cli_hub_opt(cmd, argc, argv, ip, eo) < 0) return -1;
        o->engine_given = true;
    } else if (!strcmp(a, "--load-format")) {
        GEN_NEED_VALUE();
        if (!cli_load_format(cmd, argv[i], &eo->load_format)) return -1;
        o->engine_given = true;
    } else if (cli_is_state_dtype(a)) {
        GEN_NEED_VALUE();
        if (!cli_state_dtype(cmd, a, argv[i], eo)) return -1;
        o->engine_given = true;
    } else if (!strcmp(a, "--gpu-memory-utilization")) {
        GEN_NEED_VALUE();
        if (!cli_parse_float(argv[i], &d)) { fprintf(stderr, "%s: %s needs a number\n", cmd, a); return -1; }
        eo->gpu_memory_utilization = (float)d;
        o->engine_given = true;
    } else if (!strcmp(a, "--temperature") || !strcmp(a, "--top-p") || !strcmp(a, "--min-p")) {
        GEN_NEED_VALUE();
        if (!cli_parse_float(argv[i], &d)) { fprintf(stderr, "%s: %s needs a number\n", cmd, a); return -1; }
        if (!strcmp(a, "--temperature")) o->temperature = d, o->set_temperature = true;
        else if (!strcmp(a, "--top-p")) o->top_p = d, o->set_top_p = true;
        else o->min_p = d, o->set_min_p = true;
    } else if (!strcmp(a, "--max-tokens") || !strcmp(a, "--top-k") || !strcmp(a, "--seed") ||
               !strcmp(a, "--min-tokens") || is_engine_int(a)) {
        GEN_NEED_VALUE();
        if (!cli_parse_int(argv[i], -1, INT32_MAX, &v)) {
            fprintf(stderr, "%s: %s needs an integer, got '%s'\n", cmd, a, argv[i]);
            return -1;
        }
        if (is_engine_int(a)) o->engine_given = true;
        if (!strcmp(a, "--max-tokens")) o->max_tokens = v;
        else if (!strcmp(a, "--top-k")) o->top_k = v, o->set_top_k = true;
        else if (!strcmp(a, "--seed")) o->seed = v;
        else if (!strcmp(a, "--min-tokens")) o->min_tokens = v;
        else if (!strcmp(a, "--threads")) eo->num_threads = (int)v;
        else if (!strcmp(a, "--block-size")) eo->block_size = (int)v;
        else if (!strcmp(a, "--num-kv-blocks")) eo->num_kv_blocks = (int)v;
        else if (!strcmp(a, "--max-model-len")) eo->max_model_len = (int)v;
        else if (!strcmp(a, "--max-num-seqs")) eo->max_num_seqs = (int)v;
        else if (!strcmp(a, "--max-num-batched-tokens")) eo->max_num_batched_tokens = (int)v;
        else if (!strcmp(a, "--tensor-parallel-size") || !strcmp(a, "-tp")) eo->tensor_parallel_size = (int)v;
        else if (!strcmp(a, "--nnodes")) eo->nnodes = (int)v;
        else if (!strcmp(a, "--node-rank")) eo->node_rank = (int)v;
        else if (!strcmp(a, "--master-port")) eo->master_port = (int)v;
        else eo->kv_cache_memory = (size_t)(v < 0 ? 0 : v) << 20;
    } else {
        return 0;
    }
#undef GEN_NEED_VALUE
    return 1;
}

vllm_sampling_params cli_gen_sampling(const cli_gen_opts *o, vllm_sampling_params sp) {
    sp.max_tokens = (int)o->max_tokens;
    if (o->set_temperature) sp.temperature = (float)o->temperature;
    if (o->set_top_p) sp.top_p = (float)o->top_p;
    if (o->set_min_p) sp.min_p = (float)o->min_p;
    if (o->set_top_k) sp.top_k = (int)o->top_k;
    sp.min_tokens = (int)o->min_tokens;
    sp.ignore_eos = o->ignore_eos;
    sp.skip_special_tokens = !o->keep_special;
    sp.stop = o->stops;
    sp.num_stop = o->num_stops;
    sp.include_stop_str_in_output = o->include_stop;
    sp.bad_words = o->bad_words;
    sp.num_bad_words = o->num_bad;
    sp.stop_token_ids = o->stop_ids;
    sp.num_stop_token_ids = o->num_stop_ids;
    sp.allowed_token_ids = o->allowed;
    sp.num_allowed_token_ids = o->num_allowed;
    sp.logit_bias_ids = o->bias_ids;
    sp.logit_bias_values = o->bias_vals;
    sp.num_logit_bias = o->num_bias;
    sp.presence_penalty = (float)o->presence;
    sp.frequency_penalty = (float)o->frequency;
    sp.repetition_penalty = (float)o->repetition;
    sp.logprobs = (int)o->logprobs_k;
    sp.n = (int)o->n_samples;
    return sp;
}
