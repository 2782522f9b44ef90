/*
 * bench.c: `vllmc bench latency` and `vllmc bench throughput`, vLLM's
 * offline benchmarks (vllm/benchmarks/latency.py, throughput.py) over the
 * public API: option names, sampling (temperature 1, top_p 1, ignore_eos,
 * max_tokens = output length) and the printed result lines follow vLLM.
 *
 * latency:    one batch of --batch-size random prompts, run to completion
 *             --num-iters-warmup then --num-iters times; prints the average,
 *             standard deviation and 10/25/50/75/90/99% percentile latency.
 * throughput: --num-prompts random prompts or a JSONL dataset, all given to
 *             one vllm_generate call (continuous batching); prints requests/s,
 *             total tokens/s and output tokens/s.
 *
 * Results go to stdout, progress lines to stderr.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "vllm.h"

/* vLLM's latency benchmark draws prompt ids from [0, 10000). */
#define BENCH_MAX_RANDOM_ID 10000

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc bench latency --model DIR [options]\n"
            "       vllmc bench throughput --model DIR (--input-len N | --dataset F.jsonl) [options]\n"
            "       vllmc bench serve [options]   against a running server (vllmc bench serve --help)\n\n"
            "latency: one batch of random prompts, timed end to end over several iterations\n"
            "  --input-len N               prompt tokens per request (default 32)\n"
            "  --output-len N              tokens generated per request (default 128)\n"
            "  --batch-size N              prompts in the batch (default 8)\n"
            "  --num-iters-warmup N        untimed iterations first (default 2)\n"
            "  --num-iters N               timed iterations (default 10)\n"
            "throughput: all prompts in one offline generate call (continuous batching)\n"
            "  --num-prompts N             random prompts (default 1000, or the whole dataset)\n"
            "  --input-len N               prompt tokens per random prompt (required without --dataset)\n"
            "  --output-len N              tokens per request (default 128; overrides the dataset's)\n"
            "  --dataset F.jsonl           a JSONL dataset (alias --dataset-path), one object per line:\n"
            "                                {\"prompt\": \"text\", \"output_len\": N}  (needs the model's tokenizer)\n"
            "                                {\"prompt_token_ids\": [1, 2, 3], \"output_len\": N}\n"
            "                              output_len may be left out when --output-len is given;\n"
            "                              --num-prompts takes the first N lines\n"
            "both:\n"
            "  --seed S                    seed of the random prompts, dummy weights and sampling (default 0)\n"
            "  --output-json F             also write the results as JSON\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching\n"
            "                              (default: off for latency, on for throughput, as vLLM)\n"
            "  --device cpu|cuda  --threads N  --block-size N (16)  --num-kv-blocks N  --kv-cache-memory MiB\n"
            "  --max-model-len N  --max-num-seqs N  --max-num-batched-tokens N  --load-format auto|dummy\n"
            "Sampling is vLLM's: temperature 1.0, top_p 1.0, ignore_eos, max_tokens = output length.\n");
}

typedef struct bench_args {
    const char *cmd;             /* "latency" or "throughput", for messages */
    bool latency;
    const char *model, *dataset, *output_json;
    vllm_engine_options eo;
    long long input_len, output_len, batch_size, num_prompts, warmup, iters, seed;
    long long kv_mib;
    bool set_input_len, set_output_len, set_num_prompts, set_kv_mib;
    bool set_batch_size, set_warmup, set_iters;
} bench_args;

/* An integer option: its name, accepted range and destination. */
typedef struct int_opt {
    const char *name;
    long long lo, hi;
    long long *dst;
    bool *set;
    bool latency_only, throughput_only;
} int_opt;

/* Parses argv (argv[0] is the subcommand); 0 ok, 1 help printed, 2 bad option. */
static int parse_args(int argc, char **argv, bench_args *a) {
    long long threads = 0, block_size = a->eo.block_size, num_kv_blocks = 0, max_model_len = 0;
    long long max_num_seqs = a->eo.max_num_seqs, max_batched = a->eo.max_num_batched_tokens;
    const int_opt opts[] = {
        {"--input-len", 1, INT32_MAX, &a->input_len, &a->set_input_len, false, false},
        {"--output-len", 1, INT32_MAX, &a->output_len, &a->set_output_len, false, false},
        {"--batch-size", 1, 1 << 20, &a->batch_size, &a->set_batch_size, true, false},
        {"--num-iters-warmup", 0, 1 << 20, &a->warmup, &a->set_warmup, true, false},
        {"--num-iters", 1, 1 << 20, &a->iters, &a->set_iters, true, false},
        {"--num-prompts", 1, 1 << 24, &a->num_prompts, &a->set_num_prompts, false, true},
        {"--seed", 0, INT64_MAX, &a->seed, NULL, false, false},
        {"--threads", 0, 4096, &threads, NULL, false, false},
        {"--block-size", 1, 1024, &block_size, NULL, false, false},
        {"--num-kv-blocks", 0, INT32_MAX, &num_kv_blocks, NULL, false, false},
        {"--kv-cache-memory", 1, (long long)1 << 30, &a->kv_mib, &a->set_kv_mib, false, false},
        {"--max-model-len", 0, INT32_MAX, &max_model_len, NULL, false, false},
        {"--max-num-seqs", 1, INT32_MAX, &max_num_seqs, NULL, false, false},
        {"--max-num-batched-tokens", 1, INT32_MAX, &max_batched, NULL, false, false},
    };
    const size_t num_opts = sizeof opts / sizeof opts[0];

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(arg, "--enable-prefix-caching")) {
            a->eo.enable_prefix_caching = true;
            continue;
        }
        if (!strcmp(arg, "--no-enable-prefix-caching")) {
            a->eo.enable_prefix_caching = false;
            continue;
        }
        if (!strcmp(arg, "--enforce-eager")) {
            a->eo.enforce_eager = true;
            continue;
        }
        /* everything else takes a value */
        const int_opt *io = NULL;
        for (size_t k = 0; k < num_opts; k++)
            if (!strcmp(arg, opts[k].name)) io = &opts[k];
        if (!strcmp(arg, "--dataset-path")) arg = "--dataset"; /* vLLM's newer name */
        bool known = io || !strcmp(arg, "--model") || !strcmp(arg, "--dataset") ||
                     !strcmp(arg, "--output-json") || !strcmp(arg, "--device") || !strcmp(arg, "--load-format") ||
                     !strcmp(arg, "--gpu-memory-utilization");
        if (!known) {
            fprintf(stderr, "vllmc bench %s: unknown option '%s'\n", a->cmd, arg);
            return 2;
        }
        if ((io && io->latency_only && !a->latency) || (io && io->throughput_only && a->latency) ||
            (!strcmp(arg, "--dataset") && a->latency)) {
            fprintf(stderr, "vllmc bench %s: %s is an option of bench %s\n", a->cmd, arg,
                    a->latency ? "throughput" : "latency");
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "vllmc bench %s: %s needs a value\n", a->cmd, arg);
            return 2;
        }
        const char *val = argv[++i];
        if (io) {
            if (!cli_parse_int(val, io->lo, io->hi, io->dst)) {
                fprintf(stderr, "vllmc bench %s: %s must be an integer in [%lld, %lld], got '%s'\n", a->cmd, arg,
                        io->lo, io->hi, val);
                return 2;
            }
            if (io->set) *io->set = true;
        } else if (!strcmp(arg, "--model")) {
            a->model = val;
        } else if (!strcmp(arg, "--dataset")) {
            a->dataset = val;
        } else if (!strcmp(arg, "--output-json")) {
            a->output_json = val;
        } else if (!strcmp(arg, "--device")) {
            a->eo.device = val;
        } else if (!strcmp(arg, "--gpu-memory-utilization")) {
            double d;
            if (!cli_parse_float(val, &d) || !(d > 0.0 && d <= 1.0)) {
                fprintf(stderr, "vllmc bench %s: --gpu-memory-utilization must be in (0, 1], got '%s'\n", a->cmd, val);
                return 2;
            }
            a->eo.gpu_memory_utilization = (float)d;
        } else { /* --load-format */
            if (!strcmp(val, "dummy")) {
                a->eo.load_format = VLLM_LOAD_DUMMY;
            } else if (!strcmp(val, "auto") || !strcmp(val, "safetensors")) {
                a->eo.load_format = VLLM_LOAD_AUTO;
            } else {
                fprintf(stderr, "vllmc bench %s: --load-format must be auto or dummy, got '%s'\n", a->cmd, val);
                return 2;
            }
        }
    }
    if (!a->model) {
        fprintf(stderr, "vllmc bench %s: --model is required\n", a->cmd);
        return 2;
    }
    if (!a->latency && !a->dataset && !a->set_input_len) {
        fprintf(stderr, "vllmc bench throughput: --input-len is required for random prompts (or give --dataset)\n");
        return 2;
    }
    if (!a->latency && a->dataset && a->set_input_len) {
        fprintf(stderr, "vllmc bench throughput: --input-len applies to random prompts, not to --dataset\n");
        return 2;
    }
    a->eo.num_threads = (int)threads;
    a->eo.block_size = (int)block_size;
    a->eo.num_kv_blocks = (int)num_kv_blocks;
    a->eo.max_model_len = (int)max_model_len;
    a->eo.max_num_seqs = (int)max_num_seqs;
    a->eo.max_num_batched_tokens = (int)max_batched;
    if (a->set_kv_mib) a->eo.kv_cache_memory = (size_t)a->kv_mib << 20;
    a->eo.seed = (uint64_t)a->seed;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Prompts                                                             */
/* ------------------------------------------------------------------ */

typedef struct bench_prompts {
    vllm_prompt *items;          /* (n) */
    int *output_len;             /* (n) max_tokens per prompt; 0 = take --output-len */
    char **texts;                /* (n) owned, NULL for id prompts */
    int32_t **ids;               /* (n) owned, NULL for text prompts */
    size_t n, cap;
} bench_prompts;

static bool prompts_push(bench_prompts *p, char *text, int32_t *ids, size_t nids, int output_len) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        vllm_prompt *a = realloc(p->items, cap * sizeof *a);
        if (a) p->items = a;
        int *o = realloc(p->output_len, cap * sizeof *o);
        if (o) p->output_len = o;
        char **t = realloc(p->texts, cap * sizeof *t);
        if (t) p->texts = t;
        int32_t **d = realloc(p->ids, cap * sizeof *d);
        if (d) p->ids = d;
        if (!a || !o || !t || !d) return false;
        p->cap = cap;
    }
    p->items[p->n] = (vllm_prompt){.text = text, .token_ids = ids, .num_token_ids = nids};
    p->output_len[p->n] = output_len;
    p->texts[p->n] = text;
    p->ids[p->n] = ids;
    p->n++;
    return true;
}

static void prompts_free(bench_prompts *p) {
    for (size_t i = 0; i < p->n; i++) {
        free(p->texts[i]);
        free(p->ids[i]);
    }
    free(p->items);
    free(p->output_len);
    free(p->texts);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

/* splitmix64: a small seeded generator for the random prompt ids. */
static uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The model's vocabulary size from config.json (or its text_config), 0 if absent. */
static long long model_vocab_size(const char *model_dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", model_dir) >= (int)sizeof path) return 0;
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *v = cfg ? json_object_get(cfg, "vocab_size") : NULL;
    if (!json_is_integer(v) && cfg) v = json_object_get(json_object_get(cfg, "text_config"), "vocab_size");
    long long n = json_is_integer(v) ? json_integer_value(v) : 0;
    json_decref(cfg);
    return n > 0 ? n : 0;
}

/* n prompts of len random ids in [0, min(vocab, 10000)). */
static bool random_prompts(bench_prompts *p, size_t n, size_t len, long long vocab, uint64_t seed) {
    uint64_t state = seed;
    uint64_t range = vocab > 0 && vocab < BENCH_MAX_RANDOM_ID ? (uint64_t)vocab : BENCH_MAX_RANDOM_ID;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids = malloc(len * sizeof *ids);
        if (!ids) return false;
        for (size_t j = 0; j < len; j++) ids[j] = (int32_t)(rng_next(&state) % range);
        if (!prompts_push(p, NULL, ids, len, 0)) {
            free(ids);
            return false;
        }
    }
    return true;
}

/* Reads a JSONL dataset (format in usage()); prints one error line on failure.
 * need_output_len: every line must carry "output_len" (no --output-len). */
static bool load_dataset(const char *path, bench_prompts *p, size_t max_prompts, bool need_output_len) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vllmc bench throughput: %s: cannot open\n", path);
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    bool ok = true;
    while (ok && p->n < max_prompts && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)len, 0, &err);
        json_t *text = o ? json_object_get(o, "prompt") : NULL;
        json_t *ids = o ? json_object_get(o, "prompt_token_ids") : NULL;
        json_t *olen = o ? json_object_get(o, "output_len") : NULL;
        int output_len = 0;
        if (!json_is_object(o)) {
            fprintf(stderr, "vllmc bench throughput: %s:%ld: invalid JSON: %s\n", path, lineno,
                    o ? "not an object" : err.text);
            ok = false;
        } else if (olen && (!json_is_integer(olen) || json_integer_value(olen) < 1 ||
                            json_integer_value(olen) > INT32_MAX)) {
            fprintf(stderr, "vllmc bench throughput: %s:%ld: output_len must be a positive integer\n", path, lineno);
            ok = false;
        } else if (!olen && need_output_len) {
            fprintf(stderr, "vllmc bench throughput: %s:%ld: no \"output_len\" (or give --output-len)\n", path,
                    lineno);
            ok = false;
        } else {
            output_len = olen ? (int)json_integer_value(olen) : 0;
        }
        if (!ok) {
        } else if (json_is_string(text)) {
            char *t = strdup(json_string_value(text));
            ok = t && prompts_push(p, t, NULL, 0, output_len);
            if (!ok) {
                free(t);
                fprintf(stderr, "vllmc bench throughput: out of memory\n");
            }
        } else if (json_is_array(ids) && json_array_size(ids) > 0) {
            size_t n = json_array_size(ids);
            int32_t *a = malloc(n * sizeof *a);
            if (!a) {
                fprintf(stderr, "vllmc bench throughput: out of memory\n");
                ok = false;
            }
            for (size_t i = 0; ok && i < n; i++) {
                json_t *v = json_array_get(ids, i);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                    fprintf(stderr, "vllmc bench throughput: %s:%ld: prompt_token_ids[%zu] is not a valid token id\n",
                            path, lineno, i);
                    ok = false;
                } else {
                    a[i] = (int32_t)json_integer_value(v);
                }
            }
            if (ok && !prompts_push(p, NULL, a, n, output_len)) {
                fprintf(stderr, "vllmc bench throughput: out of memory\n");
                ok = false;
            }
            if (!ok) free(a);
        } else {
            fprintf(stderr,
                    "vllmc bench throughput: %s:%ld: needs \"prompt\" (string) or \"prompt_token_ids\" (non-empty "
                    "array)\n",
                    path, lineno);
            ok = false;
        }
        json_decref(o);
    }
    if (ok && ferror(f)) {
        fprintf(stderr, "vllmc bench throughput: %s: cannot read\n", path);
        ok = false;
    }
    free(line);
    fclose(f);
    if (ok && p->n == 0) {
        fprintf(stderr, "vllmc bench throughput: %s: no prompts\n", path);
        ok = false;
    }
    return ok;
}

/* ------------------------------------------------------------------ */
/* Timing and statistics                                               */
/* ------------------------------------------------------------------ */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile's default (linear interpolation) over sorted x (n >= 1). */
static double percentile(const double *sorted, size_t n, double pct) {
    double h = (double)(n - 1) * pct / 100.0;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + (h - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

static bool write_json(const char *path, json_t *o, const char *cmd) {
    char *text = json_dumps(o, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    FILE *f = text ? fopen(path, "w") : NULL;
    bool ok = f && fprintf(f, "%s\n", text) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    if (!ok) fprintf(stderr, "vllmc bench %s: %s: cannot write\n", cmd, path);
    return ok;
}

/* vLLM's benchmark sampling: temperature 1, top_p 1, ignore_eos. */
static vllm_sampling_params bench_sampling(int max_tokens) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    return sp;
}

/* ------------------------------------------------------------------ */
/* latency                                                             */
/* ------------------------------------------------------------------ */

/* One batch run to completion; *seconds is its wall time. Returns 0, 1
 * (engine error) or 2 (the lengths do not fit max_model_len). */
static int latency_once(vllm_engine *engine, const bench_prompts *p, const vllm_sampling_params *sp,
                        double *seconds) {
    vllm_completion *comps = NULL;
    double t0 = now_seconds();
    vllm_status st = vllm_generate(engine, p->items, p->n, sp, false, &comps, NULL);
    *seconds = now_seconds() - t0;
    if (st != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < p->n && rc == 0; i++)
        if (comps[i].num_tokens != (size_t)sp->max_tokens) {
            fprintf(stderr,
                    "vllmc bench latency: a request stopped after %zu of %d output tokens: input-len + output-len "
                    "must fit in max_model_len\n",
                    comps[i].num_tokens, sp->max_tokens);
            rc = 2;
        }
    vllm_completions_free(comps, p->n);
    return rc;
}

static int run_latency(const bench_args *a, vllm_engine *engine, const bench_prompts *p) {
    double *lat = NULL;
    int rc = 1;
    lat = malloc((size_t)a->iters * sizeof *lat);
    if (!lat) {
        fprintf(stderr, "vllmc bench latency: out of memory\n");
        goto out;
    }
    vllm_sampling_params sp = bench_sampling((int)a->output_len);
    for (long long i = 0; i < a->warmup; i++) {
        double s;
        if ((rc = latency_once(engine, p, &sp, &s)) != 0) goto out;
        fprintf(stderr, "Warmup iteration %lld/%lld: %.4f s\n", i + 1, a->warmup, s);
    }
    for (long long i = 0; i < a->iters; i++) {
        if ((rc = latency_once(engine, p, &sp, &lat[i])) != 0) goto out;
        fprintf(stderr, "Bench iteration %lld/%lld: %.4f s\n", i + 1, a->iters, lat[i]);
    }

    size_t n = (size_t)a->iters;
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) mean += lat[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += (lat[i] - mean) * (lat[i] - mean);
    double std = sqrt(var / (double)n); /* numpy.std: population */
    double *sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
        fprintf(stderr, "vllmc bench latency: out of memory\n");
        rc = 1;
        goto out;
    }
    memcpy(sorted, lat, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    static const int pcts[] = {10, 25, 50, 75, 90, 99};
    double pv[6];
    for (int k = 0; k < 6; k++) pv[k] = percentile(sorted, n, pcts[k]);
    free(sorted);

    printf("Avg latency: %.6f seconds\n", mean);
    printf("Std latency: %.6f seconds\n", std);
    for (int k = 0; k < 6; k++) printf("%d%% percentile latency: %.6f seconds\n", pcts[k], pv[k]);
    fflush(stdout);

    rc = 0;
    if (a->output_json) {
        json_t *o = json_object(), *l = json_array(), *pc = json_object();
        for (size_t i = 0; i < n; i++) json_array_append_new(l, json_real(lat[i]));
        for (int k = 0; k < 6; k++) {
            char key[8];
            snprintf(key, sizeof key, "%d", pcts[k]);
            json_object_set_new(pc, key, json_real(pv[k]));
        }
        json_object_set_new(o, "avg_latency", json_real(mean));
        json_object_set_new(o, "std_latency", json_real(std));
        json_object_set_new(o, "latencies", l);
        json_object_set_new(o, "percentiles", pc);
        if (!write_json(a->output_json, o, "latency")) rc = 1;
        json_decref(o);
    }
out:
    free(lat);
    return rc;
}

/* ------------------------------------------------------------------ */
/* throughput                                                          */
/* ------------------------------------------------------------------ */

static int run_throughput(const bench_args *a, vllm_engine *engine, const bench_prompts *pp) {
    const bench_prompts p = *pp;
    vllm_sampling_params *sps = NULL;
    vllm_completion *comps = NULL;
    int rc = 1;
    for (size_t i = 0; i < p.n; i++)
        if (p.items[i].text && !vllm_engine_has_tokenizer(engine)) {
            fprintf(stderr, "vllmc bench throughput: %s has text prompts but %s has no tokenizer.json\n", a->dataset,
                    a->model);
            return 2;
        }
    sps = malloc(p.n * sizeof *sps);
    if (!sps) {
        fprintf(stderr, "vllmc bench throughput: out of memory\n");
        goto out;
    }
    size_t requested = 0;
    for (size_t i = 0; i < p.n; i++) {
        sps[i] = bench_sampling(a->set_output_len || !p.output_len[i] ? (int)a->output_len : p.output_len[i]);
        requested += (size_t)sps[i].max_tokens;
    }

    fprintf(stderr, "Running %zu prompts (up to %zu output tokens, max_num_seqs %d, max_num_batched_tokens %d)\n",
            p.n, requested, a->eo.max_num_seqs, a->eo.max_num_batched_tokens);
    vllm_generate_stats st;
    memset(&st, 0, sizeof st);
    double t0 = now_seconds();
    vllm_status s = vllm_generate(engine, p.items, p.n, sps, true, &comps, &st);
    double elapsed = now_seconds() - t0;
    if (s != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        goto out;
    }
    size_t prompt_tokens = 0, output_tokens = 0, short_requests = 0;
    for (size_t i = 0; i < p.n; i++) {
        prompt_tokens += comps[i].num_prompt_tokens;
        output_tokens += comps[i].num_tokens;
        short_requests += comps[i].num_tokens < (size_t)sps[i].max_tokens;
    }
    fprintf(stderr, "Done: %zu requests in %.3f s (%zu engine steps, %zu preemptions)\n", p.n, elapsed, st.steps,
            st.preemptions);
    if (short_requests)
        fprintf(stderr, "warning: %zu requests stopped before their output length (max_model_len)\n", short_requests);
    if (elapsed <= 0) elapsed = 1e-9;
    size_t total = prompt_tokens + output_tokens;
    printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", (double)p.n / elapsed,
           (double)total / elapsed, (double)output_tokens / elapsed);
    printf("Total num prompt tokens:  %zu\n", prompt_tokens);
    printf("Total num output tokens:  %zu\n", output_tokens);
    fflush(stdout);

    rc = 0;
    if (a->output_json) {
        json_t *o = json_object();
        json_object_set_new(o, "elapsed_time", json_real(elapsed));
        json_object_set_new(o, "num_requests", json_integer((json_int_t)p.n));
        json_object_set_new(o, "total_num_tokens", json_integer((json_int_t)total));
        json_object_set_new(o, "total_output_tokens", json_integer((json_int_t)output_tokens));
        json_object_set_new(o, "requests_per_second", json_real((double)p.n / elapsed));
        json_object_set_new(o, "tokens_per_second", json_real((double)total / elapsed));
        json_object_set_new(o, "output_tokens_per_second", json_real((double)output_tokens / elapsed));
        if (!write_json(a->output_json, o, "throughput")) rc = 1;
        json_decref(o);
    }
out:
    vllm_completions_free(comps, p.n);
    free(sps);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Entry                                                               */
/* ------------------------------------------------------------------ */

int cmd_bench_serve(int argc, char **argv); /* bench_serve.c: `vllmc bench serve` (online, over HTTP) */

int cmd_bench(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "vllmc bench: give a benchmark: latency or throughput (or serve; vllmc bench --help)\n");
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "serve")) return cmd_bench_serve(argc - 1, argv + 1);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    bench_args a;
    memset(&a, 0, sizeof a);
    a.cmd = sub;
    if (!strcmp(sub, "latency")) {
        a.latency = true;
    } else if (strcmp(sub, "throughput") != 0) {
        fprintf(stderr, "vllmc bench: unknown benchmark '%s' (latency or throughput)\n", sub);
        return 2;
    }
    a.eo = vllm_engine_default_options();
    /* vLLM's latency benchmark turns prefix caching off: the same batch
     * runs every iteration and would otherwise be served from the cache. */
    if (a.latency) a.eo.enable_prefix_caching = false;
    a.input_len = 32;
    a.output_len = 128;
    a.batch_size = 8;
    a.warmup = 2;
    a.iters = 10;
    a.num_prompts = 1000;
    int prc = parse_args(argc - 1, argv + 1, &a);
    if (prc) return prc == 1 ? 0 : 2;

    /* the prompts first, so that a bad dataset fails before the model loads */
    bench_prompts p = {0};
    if (a.dataset) {
        if (!load_dataset(a.dataset, &p, a.set_num_prompts ? (size_t)a.num_prompts : SIZE_MAX, !a.set_output_len)) {
            prompts_free(&p);
            return 2;
        }
    } else {
        size_t n = (size_t)(a.latency ? a.batch_size : a.num_prompts);
        if (!random_prompts(&p, n, (size_t)a.input_len, model_vocab_size(a.model), (uint64_t)a.seed)) {
            fprintf(stderr, "vllmc bench %s: out of memory\n", a.cmd);
            prompts_free(&p);
            return 1;
        }
    }
    vllm_engine *engine = NULL;
    int rc = 1;
    if (vllm_engine_create(a.model, &a.eo, &engine) != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
    } else {
        rc = a.latency ? run_latency(&a, engine, &p) : run_throughput(&a, engine, &p);
    }
    vllm_engine_free(engine);
    prompts_free(&p);
    return rc;
}
