/*
 * bench_serve.c: `vllmc bench serve`, vLLM's online serving benchmark
 * (vllm/benchmarks/serve.py + lib/endpoint_request_func.py) against a running
 * OpenAI-compatible server (`vllmc serve`, `vllm serve`, ...).
 *
 * Owns: the options (vLLM's names and defaults), the random dataset (JSONL
 * files are read by dataset.c), request arrival times (all at once for
 * --request-rate inf, else a Poisson process or, with --burstiness != 1,
 * gamma-distributed gaps, rescaled as vLLM's get_request so the last arrival
 * is at num_prompts / rate), the client threads (one per request in flight,
 * at most --max-concurrency), the streamed requests and their timestamps, the
 * metrics and vLLM's printed result block, and the optional result JSON.
 *
 * Metric definitions (vLLM's calculate_metrics and async_request_openai_*):
 *   TTFT     time from sending the request to the first SSE chunk with a
 *            non-empty "choices" (for chat that is the role chunk)
 *   ITL      gaps between consecutive such chunks
 *   E2EL     time from sending to the last such chunk ("latency")
 *   TPOT     (E2EL - TTFT) / (output tokens - 1), requests with > 1 output token
 *   output tokens = usage.completion_tokens of the include_usage chunk;
 *   input tokens  = usage.prompt_tokens (else the dataset's prompt length).
 * Mean, median, standard deviation (population) and percentiles with numpy's
 * default linear interpolation.
 *
 * HTTP is src/cli/http_client.c, the statistics src/cli/bench_util.c. The
 * result block goes to stdout; progress and the run's preamble to stderr.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/dataset.h"
#include "cli/http_client.h"
#include "core/progress.h"
#include "vllm.h"

int cmd_bench_serve(int argc, char **argv);

#define BS_MAX_THREADS 1024          /* client threads (requests in flight) at most */
#define BS_MAX_PERCENTILES 16
#define BS_MAX_PROMPTS 10000000LL
#define BS_MAX_LEN 10000000LL        /* --input-len / --output-len bound */

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc bench serve [options]     (against a running `vllmc serve` or any OpenAI-compatible server)\n\n"
            "server:\n"
            "  --host H --port P            server address (default 127.0.0.1:8000)\n"
            "  --base-url URL               http://host:port[/prefix] instead of --host/--port\n"
            "  --endpoint PATH              /v1/completions (default) or /v1/chat/completions\n"
            "  --model NAME                 model name sent in requests (default: the first of GET /v1/models)\n"
            "  --served-model-name NAME     name sent in requests when it differs from --model\n"
            "  --api-key KEY                Authorization: Bearer KEY (default: $OPENAI_API_KEY)\n"
            "  --tokenizer DIR              model folder whose config.json gives the vocabulary size for random\n"
            "                               prompts (default: the server's model root, else probed via /detokenize)\n"
            "  --timeout S                  seconds to wait for the server at any point of a request (default 600)\n"
            "workload:\n"
            "  --dataset-name random|jsonl  random token prompts (default) or --dataset-path F.jsonl, one object a line:\n"
            "                                 {\"prompt\": \"text\", \"output_len\": N} or {\"prompt_token_ids\": [..], \"output_len\": N}\n"
            "  --dataset-path F             the JSONL file (output_len may be left out with --output-len)\n"
            "  --num-prompts N              requests (default 1000; a dataset's first N lines)\n"
            "  --random-input-len N         prompt tokens (alias --input-len; default 1024)\n"
            "  --random-output-len N        max_tokens (alias --output-len; default 128)\n"
            "  --random-range-ratio R       lengths drawn uniformly from [len*(1-R), len*(1+R)] (default 0)\n"
            "  --random-prefix-len N        a random prefix shared by every prompt (default 0)\n"
            "  --request-rate R             requests/s (default inf: all at once); Poisson arrivals\n"
            "  --burstiness B               gamma-distributed arrivals instead (B < 1 burstier; default 1)\n"
            "  --max-concurrency N          requests in flight at most (default: no limit)\n"
            "  --num-warmups N              untimed requests first (default 0)\n"
            "  --ready-check-timeout-sec S  retry the first request until it succeeds, up to S seconds (default 0: off)\n"
            "  --seed S                     seed of the random prompts and arrival times (default 0)\n"
            "  --ignore-eos                 ignore_eos in requests (always on for random prompts, as vLLM)\n"
            "  --logprobs K                 logprobs per token in completions requests\n"
            "  --temperature T  --top-p P  --top-k K   sampling sent with every request (default: the server's)\n"
            "results:\n"
            "  --percentile-metrics LIST    of ttft,tpot,itl,e2el (default: all four)\n"
            "  --metric-percentiles LIST    e.g. 50,90,99 (default 99)\n"
            "  --disable-tqdm               no progress lines\n"
            "  --save-result                write the results as JSON (--result-dir D, --result-filename F)\n"
            "  --save-detailed              with per-request input/output lengths, TTFTs, ITLs, texts and errors\n");
}

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

typedef struct bs_args {
    const char *host, *base_url, *endpoint, *model, *served_name, *api_key, *tokenizer;
    const char *dataset_name, *dataset_path, *percentile_metrics, *metric_percentiles;
    const char *result_dir, *result_filename, *label;
    long long port, num_prompts, max_concurrency, input_len, output_len, prefix_len, seed;
    long long num_warmups, logprobs, ready_timeout, timeout_s, top_k;
    double request_rate, burstiness, range_ratio, temperature, top_p;
    bool set_max_concurrency, set_output_len, set_num_prompts, set_logprobs, set_temperature, set_top_p, set_top_k;
    bool ignore_eos, disable_tqdm, save_result, save_detailed;
    /* derived */
    bool chat;                   /* the endpoint is .../chat/completions */
    bool metric_on[4];           /* ttft, tpot, itl, e2el */
    double percentiles[BS_MAX_PERCENTILES];
    int num_percentiles;
} bs_args;

static const char *const METRIC_NAMES[4] = {"ttft", "tpot", "itl", "e2el"};

/* Parses a float or "inf" (for --request-rate / --burstiness). */
static bool parse_rate(const char *s, double *out) {
    if (s && (!strcmp(s, "inf") || !strcmp(s, "Infinity") || !strcmp(s, "infinity"))) {
        *out = INFINITY;
        return true;
    }
    return cli_parse_float(s, out);
}

static bool parse_metric_list(bs_args *a) {
    memset(a->metric_on, 0, sizeof a->metric_on);
    const char *p = a->percentile_metrics;
    while (*p) {
        size_t n = strcspn(p, ",");
        int k = -1;
        for (int m = 0; m < 4; m++)
            if (strlen(METRIC_NAMES[m]) == n && !strncmp(p, METRIC_NAMES[m], n)) k = m;
        if (k < 0) {
            fprintf(stderr, "vllmc bench serve: --percentile-metrics: '%.*s' is not one of ttft,tpot,itl,e2el\n",
                    (int)n, p);
            return false;
        }
        a->metric_on[k] = true;
        p += n;
        if (*p == ',') p++;
    }
    return true;
}

static bool parse_percentiles(bs_args *a) {
    a->num_percentiles = 0;
    const char *p = a->metric_percentiles;
    while (*p) {
        size_t n = strcspn(p, ",");
        char buf[64];
        double v;
        if (n == 0 || n >= sizeof buf || a->num_percentiles == BS_MAX_PERCENTILES) {
            fprintf(stderr, "vllmc bench serve: --metric-percentiles: give up to %d comma-separated numbers\n",
                    BS_MAX_PERCENTILES);
            return false;
        }
        memcpy(buf, p, n);
        buf[n] = 0;
        if (!cli_parse_float(buf, &v) || v <= 0 || v >= 100) {
            fprintf(stderr, "vllmc bench serve: --metric-percentiles: '%s' is not in (0, 100)\n", buf);
            return false;
        }
        a->percentiles[a->num_percentiles++] = v;
        p += n;
        if (*p == ',') p++;
    }
    if (a->num_percentiles == 0) {
        fprintf(stderr, "vllmc bench serve: --metric-percentiles: empty list\n");
        return false;
    }
    return true;
}

typedef struct int_opt {
    const char *name;
    long long lo, hi;
    long long *dst;
    bool *set;
} int_opt;

typedef struct float_opt {
    const char *name;
    double lo, hi;  /* inclusive bounds */
    double *dst;
    bool *set;
    bool inf_ok;
} float_opt;

typedef struct str_opt {
    const char *name;
    const char **dst;
} str_opt;

typedef struct flag_opt {
    const char *name;
    bool *dst;
} flag_opt;

/* 0 ok, 1 help printed, 2 bad option (one line on stderr). */
static int parse_args(int argc, char **argv, bs_args *a) {
    int_opt ints[] = {
        {"--port", 1, 65535, &a->port, NULL},
        {"--num-prompts", 1, BS_MAX_PROMPTS, &a->num_prompts, &a->set_num_prompts},
        {"--max-concurrency", 1, 1000000, &a->max_concurrency, &a->set_max_concurrency},
        {"--random-input-len", 1, BS_MAX_LEN, &a->input_len, NULL},
        {"--input-len", 1, BS_MAX_LEN, &a->input_len, NULL},
        {"--random-output-len", 1, BS_MAX_LEN, &a->output_len, &a->set_output_len},
        {"--output-len", 1, BS_MAX_LEN, &a->output_len, &a->set_output_len},
        {"--random-prefix-len", 0, BS_MAX_LEN, &a->prefix_len, NULL},
        {"--seed", 0, INT64_MAX, &a->seed, NULL},
        {"--num-warmups", 0, 1000000, &a->num_warmups, NULL},
        {"--logprobs", 0, 1000000, &a->logprobs, &a->set_logprobs},
        {"--ready-check-timeout-sec", 0, 100000000, &a->ready_timeout, NULL},
        {"--timeout", 1, 1000000, &a->timeout_s, NULL},
        {"--top-k", -1, INT32_MAX, &a->top_k, &a->set_top_k},
    };
    float_opt floats[] = {
        {"--request-rate", 0, INFINITY, &a->request_rate, NULL, true},
        {"--burstiness", 0, INFINITY, &a->burstiness, NULL, true},
        {"--random-range-ratio", 0, 0.999999, &a->range_ratio, NULL, false},
        {"--temperature", 0, 1e6, &a->temperature, &a->set_temperature, false},
        {"--top-p", 0, 1, &a->top_p, &a->set_top_p, false},
    };
    str_opt strs[] = {
        {"--host", &a->host},
        {"--base-url", &a->base_url},
        {"--endpoint", &a->endpoint},
        {"--model", &a->model},
        {"--served-model-name", &a->served_name},
        {"--api-key", &a->api_key},
        {"--tokenizer", &a->tokenizer},
        {"--dataset-name", &a->dataset_name},
        {"--dataset-path", &a->dataset_path},
        {"--dataset", &a->dataset_path},
        {"--percentile-metrics", &a->percentile_metrics},
        {"--metric-percentiles", &a->metric_percentiles},
        {"--result-dir", &a->result_dir},
        {"--result-filename", &a->result_filename},
        {"--label", &a->label},
    };
    flag_opt flags[] = {
        {"--ignore-eos", &a->ignore_eos},
        {"--disable-tqdm", &a->disable_tqdm},
        {"--save-result", &a->save_result},
        {"--save-detailed", &a->save_detailed},
    };
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 1;
        }
        bool done = false;
        for (size_t k = 0; !done && k < sizeof flags / sizeof flags[0]; k++)
            if (!strcmp(arg, flags[k].name)) *flags[k].dst = done = true;
        if (done) continue;
        const int_opt *io = NULL;
        const float_opt *fo = NULL;
        const str_opt *so = NULL;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (!strcmp(arg, ints[k].name)) io = &ints[k];
        for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++)
            if (!strcmp(arg, floats[k].name)) fo = &floats[k];
        for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++)
            if (!strcmp(arg, strs[k].name)) so = &strs[k];
        if (!io && !fo && !so) {
            fprintf(stderr, "vllmc bench serve: unknown option '%s' (vllmc bench serve --help)\n", arg);
            return 2;
        }
        if (!cli_has_value(argc, argv, i, "vllmc bench serve")) return 2;
        const char *val = argv[++i];
        if (io) {
            long long v;
            if (!cli_parse_int(val, io->lo, io->hi, &v)) {
                fprintf(stderr, "vllmc bench serve: %s: '%s' is not an integer in [%lld, %lld]\n", arg, val, io->lo,
                        io->hi);
                return 2;
            }
            *io->dst = v;
            if (io->set) *io->set = true;
        } else if (fo) {
            double v;
            bool ok = fo->inf_ok ? parse_rate(val, &v) : cli_parse_float(val, &v);
            if (!ok || !(v >= fo->lo && v <= fo->hi) || (fo->inf_ok && v <= 0)) {
                fprintf(stderr, "vllmc bench serve: %s: '%s' is not a number in %s%g, %g]\n", arg, val,
                        fo->inf_ok ? "(" : "[", fo->lo, fo->hi);
                return 2;
            }
            *fo->dst = v;
            if (fo->set) *fo->set = true;
        } else {
            *so->dst = val;
        }
    }
    if (strcmp(a->dataset_name, "random") != 0 && strcmp(a->dataset_name, "jsonl") != 0 &&
        strcmp(a->dataset_name, "custom") != 0) {
        fprintf(stderr, "vllmc bench serve: --dataset-name: '%s' is not random or jsonl\n", a->dataset_name);
        return 2;
    }
    bool random = !strcmp(a->dataset_name, "random");
    if (random && a->dataset_path) {
        fprintf(stderr, "vllmc bench serve: --dataset-path is for --dataset-name jsonl, not random\n");
        return 2;
    }
    if (!random && !a->dataset_path) {
        fprintf(stderr, "vllmc bench serve: --dataset-name %s needs --dataset-path\n", a->dataset_name);
        return 2;
    }
    /* vLLM (serve.py main_async): "when using random datasets, default to ignoring EOS" */
    if (random) a->ignore_eos = true;
    size_t el = strlen(a->endpoint);
    if (el >= 16 && !strcmp(a->endpoint + el - 16, "chat/completions")) {
        a->chat = true;
    } else if (!(el >= 11 && !strcmp(a->endpoint + el - 11, "completions"))) {
        fprintf(stderr, "vllmc bench serve: --endpoint must end with completions or chat/completions: '%s'\n",
                a->endpoint);
        return 2;
    }
    if (a->endpoint[0] != '/') {
        fprintf(stderr, "vllmc bench serve: --endpoint must start with '/': '%s'\n", a->endpoint);
        return 2;
    }
    if (a->api_key && strpbrk(a->api_key, "\r\n")) {
        fprintf(stderr, "vllmc bench serve: --api-key holds a line break\n");
        return 2;
    }
    if (!parse_metric_list(a) || !parse_percentiles(a)) return 2;
    if (a->result_filename || a->result_dir) a->save_result = true;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static void sleep_until(double t) {
    for (;;) {
        double d = t - cli_now();
        if (d <= 0) return;
        struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
        if (nanosleep(&ts, NULL) == 0) return;
    }
}

/* A float as Python's str() prints the usual values: "1.0", "0.5", "inf". */
static const char *py_float(double v, char *buf, size_t cap) {
    if (isinf(v)) snprintf(buf, cap, v > 0 ? "inf" : "-inf");
    else if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, cap, "%.1f", v);
    else snprintf(buf, cap, "%g", v);
    return buf;
}

/* distributions built on splitmix64 (cli_rng_next) */

/* uniform in (0, 1) */
static double rng_unit(uint64_t *s) { return ((double)(cli_rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* uniform integer in [lo, hi] */
static long long rng_int(uint64_t *s, long long lo, long long hi) {
    return lo + (long long)(cli_rng_next(s) % (uint64_t)(hi - lo + 1));
}

static double rng_normal(uint64_t *s) {
    return sqrt(-2.0 * log(rng_unit(s))) * cos(2.0 * M_PI * rng_unit(s));
}

/* Gamma(shape k, scale theta): Marsaglia and Tsang; k < 1 through Gamma(k + 1) * U^(1/k). */
static double rng_gamma(uint64_t *s, double k, double theta) {
    if (k < 1.0) return rng_gamma(s, k + 1.0, theta) * pow(rng_unit(s), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(s), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = rng_unit(s);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v * theta;
    }
}

/* ------------------------------------------------------------------ */
/* Talking to the server (setup requests)                              */
/* ------------------------------------------------------------------ */

typedef struct bs_server {
    hc_url url;
    char headers[2048];   /* Content-Type + Authorization lines */
    int timeout_ms;
} bs_server;

/* path under the base URL */
static void server_path(const bs_server *sv, const char *p, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", sv->url.base, p);
}

/* One JSON request (body NULL: GET); *resp is the parsed reply on HTTP 200. */
static vllm_status server_json(const bs_server *sv, const char *path, json_t *body, int *status, json_t **resp,
                               char **raw_out) {
    *resp = NULL;
    char full[2048];
    server_path(sv, path, full, sizeof full);
    char *req = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !req) return VLLM_ERR_NO_MEMORY;
    char *raw = NULL;
    size_t n = 0;
    vllm_status st = hc_fetch(sv->url.host, sv->url.port, sv->timeout_ms, body ? "POST" : "GET", full, sv->headers,
                              req, req ? strlen(req) : 0, status, &raw, &n);
    free(req);
    if (st) return st;
    /* JSON_ALLOW_NUL: "\u0000" is valid JSON (a /detokenize of byte 0), as Python's json.loads takes it */
    if (*status == 200) *resp = json_loadb(raw, n, JSON_ALLOW_NUL, NULL);
    if (raw_out) *raw_out = raw;
    else free(raw);
    return VLLM_OK;
}

/* GET /v1/models: the first model's id and root (malloc'd; root may be NULL). */
static bool first_model(const bs_server *sv, char **id, char **root) {
    *id = *root = NULL;
    int status;
    json_t *r;
    char *raw = NULL;
    vllm_status st = server_json(sv, "/v1/models", NULL, &status, &r, &raw);
    if (st) {
        fprintf(stderr, "vllmc bench serve: GET /v1/models at %s:%d failed: %s\n", sv->url.host, sv->url.port,
                vllm_last_error());
        return false;
    }
    json_t *m = json_array_get(json_object_get(r, "data"), 0);
    const char *s = json_string_value(json_object_get(m, "id"));
    if (status != 200 || !s) {
        fprintf(stderr, "vllmc bench serve: GET /v1/models: HTTP %d, no model in: %.200s\n", status, raw ? raw : "");
    } else {
        *id = strdup(s);
        const char *rt = json_string_value(json_object_get(m, "root"));
        if (rt) *root = strdup(rt);
    }
    free(raw);
    json_decref(r);
    return *id != NULL;
}

/* Is token id accepted by POST /detokenize? -1 on a transport failure. */
static int detok_accepts(const bs_server *sv, const char *model, long long id) {
    json_t *body = json_pack("{s:s, s:[I]}", "model", model, "tokens", (json_int_t)id);
    int status = 0;
    json_t *r = NULL;
    vllm_status st = server_json(sv, "/detokenize", body, &status, &r, NULL);
    json_decref(body);
    json_decref(r);
    if (st) return -1;
    return status == 200;
}

/* The vocabulary size for random prompts: --tokenizer, the server's model
 * root folder, or the largest id /detokenize accepts (binary search). */
static long long find_vocab(const bs_args *a, const bs_server *sv, const char *model, const char *root) {
    if (a->tokenizer) {
        long long v = cli_model_vocab_size(a->tokenizer);
        if (!v) fprintf(stderr, "vllmc bench serve: --tokenizer %s: no vocab_size in its config.json\n", a->tokenizer);
        return v;
    }
    if (root) {
        long long v = cli_model_vocab_size(root);
        if (v) {
            fprintf(stderr, "Vocabulary size %lld from %s/config.json (the server's model root)\n", v, root);
            return v;
        }
    }
    int ok0 = detok_accepts(sv, model, 0);
    if (ok0 != 1) {
        fprintf(stderr,
                "vllmc bench serve: cannot learn the vocabulary size for random prompts (POST /detokenize %s); "
                "give --tokenizer MODEL_DIR\n",
                ok0 < 0 ? vllm_last_error() : "rejected token 0");
        return 0;
    }
    long long lo = 0, hi = (long long)1 << 24; /* lo accepted, hi rejected (assumed) */
    while (hi - lo > 1) {
        long long mid = lo + (hi - lo) / 2;
        int ok = detok_accepts(sv, model, mid);
        if (ok < 0) {
            fprintf(stderr, "vllmc bench serve: POST /detokenize failed: %s\n", vllm_last_error());
            return 0;
        }
        if (ok) lo = mid;
        else hi = mid;
    }
    fprintf(stderr, "Vocabulary size %lld (the largest token id POST /detokenize accepts + 1)\n", lo + 1);
    return lo + 1;
}

/* ------------------------------------------------------------------ */
/* Dataset                                                             */
/* ------------------------------------------------------------------ */

/* vLLM's RandomDataset (datasets/random.py): lengths drawn uniformly from
 * [floor(len * (1 - r)), ceil(len * (1 + r))] (output at least 1), a shared
 * random prefix, then ids (offset + i + k) % vocab with a random offset per
 * request. vLLM skips the tokenizer's special ids and decodes to text; here
 * every id of the vocabulary is used and sent as a token-id prompt (chat
 * prompts are decoded by the server's /detokenize later). */
static bool random_dataset(const bs_args *a, long long vocab, cli_dataset *d) {
    uint64_t rng = (uint64_t)a->seed;
    long long in_lo = (long long)floor((double)a->input_len * (1 - a->range_ratio));
    long long in_hi = (long long)ceil((double)a->input_len * (1 + a->range_ratio));
    long long out_lo = (long long)floor((double)a->output_len * (1 - a->range_ratio));
    long long out_hi = (long long)ceil((double)a->output_len * (1 + a->range_ratio));
    if (out_lo < 1) out_lo = 1;
    if (out_hi < 1) out_hi = 1;
    if (a->prefix_len + in_lo < 1) {
        fprintf(stderr, "vllmc bench serve: --random-input-len too small for --random-range-ratio\n");
        return false;
    }
    if (in_hi + a->prefix_len > INT32_MAX || out_hi > INT32_MAX) {
        fprintf(stderr, "vllmc bench serve: prompt or output length too large\n");
        return false;
    }
    int32_t *prefix = NULL;
    if (a->prefix_len > 0) {
        prefix = malloc((size_t)a->prefix_len * sizeof *prefix);
        if (!prefix) return false;
        for (long long k = 0; k < a->prefix_len; k++) prefix[k] = (int32_t)rng_int(&rng, 0, vocab - 1);
    }
    fprintf(stderr, "Sampling input_len from [%lld, %lld] and output_len from [%lld, %lld]\n", in_lo, in_hi, out_lo,
            out_hi);
    bool ok = true;
    for (long long i = 0; ok && i < a->num_prompts; i++) {
        long long in = rng_int(&rng, in_lo, in_hi);
        long long out = rng_int(&rng, out_lo, out_hi);
        long long offset = rng_int(&rng, 0, vocab - 1);
        size_t n = (size_t)(a->prefix_len + in);
        int32_t *ids = malloc(n * sizeof *ids);
        if (!ids) {
            ok = false;
            break;
        }
        if (a->prefix_len) memcpy(ids, prefix, (size_t)a->prefix_len * sizeof *ids);
        for (long long k = 0; k < in; k++) ids[a->prefix_len + k] = (int32_t)((offset + i + k) % vocab);
        if (!cli_dataset_push(d, (cli_prompt){.ids = ids, .num_ids = n, .output_len = (int)out})) {
            free(ids);
            ok = false;
        }
    }
    free(prefix);
    if (!ok) fprintf(stderr, "vllmc bench serve: out of memory for the random prompts\n");
    return ok;
}

/* Chat needs text: token-id prompts are decoded by the server's /detokenize. */
static bool detokenize_prompts(const bs_server *sv, const char *model, cli_dataset *d) {
    for (size_t i = 0; i < d->n; i++) {
        cli_prompt *it = &d->items[i];
        if (it->text) continue;
        json_t *toks = json_array();
        for (size_t k = 0; toks && k < it->num_ids; k++) json_array_append_new(toks, json_integer(it->ids[k]));
        json_t *body = json_pack("{s:s, s:o}", "model", model, "tokens", toks);
        int status = 0;
        json_t *r = NULL;
        char *raw = NULL;
        vllm_status st = body ? server_json(sv, "/detokenize", body, &status, &r, &raw) : VLLM_ERR_NO_MEMORY;
        json_decref(body);
        const char *s = json_string_value(json_object_get(r, "prompt"));
        if (st || status != 200 || !s) {
            fprintf(stderr, "vllmc bench serve: POST /detokenize for chat prompt %zu: %s\n", i,
                    st ? vllm_last_error() : raw ? raw : "no \"prompt\" in the reply");
            json_decref(r);
            free(raw);
            return false;
        }
        it->text = strdup(s);
        json_decref(r);
        free(raw);
        if (!it->text) return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* One streamed request                                                */
/* ------------------------------------------------------------------ */

/* A growing array of seconds: a request's inter-token latencies, a metric's values. */
typedef struct bs_series {
    double *v;              /* (n) */
    size_t n, cap;
} bs_series;

static bool series_push(bs_series *s, double x) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        if (cap < s->cap || cap > SIZE_MAX / sizeof *s->v) return false;
        double *n = realloc(s->v, cap * sizeof *n);
        if (!n) return false;
        s->v = n;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return true;
}

typedef struct bs_result {
    bool success;
    double start;           /* when the request was sent (monotonic s) */
    double queue_time;      /* start - arrival (waiting for a free slot) */
    double ttft, latency;
    bs_series itl;          /* gaps between streamed chunks */
    int prompt_len;         /* usage.prompt_tokens, else the dataset's */
    int output_tokens;      /* usage.completion_tokens (0 when not reported) */
    char *text;             /* generated text (--save-detailed) */
    size_t text_len;
    char *error;            /* why it failed */
} bs_result;

static void result_clear(bs_result *r) {
    free(r->itl.v);
    free(r->text);
    free(r->error);
    memset(r, 0, sizeof *r);
}

static void result_fail(bs_result *r, const char *fmt, const char *detail) {
    if (r->error) return;
    size_t n = strlen(fmt) + (detail ? strlen(detail) : 0) + 1;
    r->error = malloc(n);
    if (r->error) snprintf(r->error, n, fmt, detail ? detail : "");
    r->success = false;
}

/* s holds n bytes (it may hold NULs: a "\u0000" in the stream). */
static void append_text(bs_result *r, const char *s, size_t n) {
    char *t = realloc(r->text, r->text_len + n + 1);
    if (!t) return;
    memcpy(t + r->text_len, s, n);
    t[r->text_len + n] = 0;
    r->text = t;
    r->text_len += n;
}

/* The request body for one item (vLLM's payloads: endpoint_request_func.py). */
static char *request_body(const bs_args *a, const char *model, const cli_prompt *it) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "model", json_string(model));
    if (a->chat) {
        /* async_request_openai_chat_completions: one user message of text parts */
        json_t *msgs = json_pack("[{s:s, s:[{s:s, s:s}]}]", "role", "user", "content", "type", "text", "text",
                                 it->text ? it->text : "");
        json_object_set_new(o, "messages", msgs);
        json_object_set_new(o, "max_completion_tokens", json_integer(it->output_len));
    } else {
        if (it->ids) {
            json_t *ids = json_array();
            for (size_t k = 0; ids && k < it->num_ids; k++) json_array_append_new(ids, json_integer(it->ids[k]));
            json_object_set_new(o, "prompt", ids);
        } else {
            json_object_set_new(o, "prompt", json_string(it->text));
        }
        json_object_set_new(o, "repetition_penalty", json_real(1.0));
        json_object_set_new(o, "max_tokens", json_integer(it->output_len));
        if (a->set_logprobs) json_object_set_new(o, "logprobs", json_integer(a->logprobs));
    }
    json_object_set_new(o, "stream", json_true());
    json_object_set_new(o, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (a->ignore_eos) json_object_set_new(o, "ignore_eos", json_true());
    if (a->set_temperature) json_object_set_new(o, "temperature", json_real(a->temperature));
    if (a->set_top_p) json_object_set_new(o, "top_p", json_real(a->top_p));
    if (a->set_top_k) json_object_set_new(o, "top_k", json_integer(a->top_k));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* A client thread's connection, kept alive across its requests. */
typedef struct bs_client {
    const bs_args *a;
    const bs_server *sv;
    const char *model;
    char path[2048];
    hc_conn *conn;
} bs_client;

/* Sends the request and reads the head; reconnects once when a kept-alive
 * connection turns out to be closed by the server. */
static vllm_status client_start(bs_client *c, const char *body, hc_response *head) {
    for (int attempt = 0;; attempt++) {
        bool reused = c->conn != NULL;
        if (c->conn && !hc_reusable(c->conn)) {
            hc_close(c->conn);
            c->conn = NULL;
            reused = false;
        }
        vllm_status st = VLLM_OK;
        if (!c->conn) st = hc_connect(c->sv->url.host, c->sv->url.port, c->sv->timeout_ms, &c->conn);
        if (!st) st = hc_send(c->conn, "POST", c->path, c->sv->headers, body, strlen(body));
        if (!st) st = hc_read_head(c->conn, head);
        if (!st) return VLLM_OK;
        hc_close(c->conn);
        c->conn = NULL;
        if (!reused || attempt > 0 || st != VLLM_ERR_IO) return st;
    }
}

/* One request: vLLM's async_request_openai_completions / _chat_completions. */
static void client_run(bs_client *c, const cli_prompt *it, bs_result *r, bool keep_text) {
    const bs_args *a = c->a;
    memset(r, 0, sizeof *r);
    r->prompt_len = (int)it->num_ids; /* known for token-id prompts; usage.prompt_tokens replaces it */
    char *body = request_body(a, c->model, it);
    if (!body) {
        result_fail(r, "out of memory building the request%s", NULL);
        return;
    }
    hc_response head;
    double st = cli_now();
    r->start = st;
    double last = st;
    bool first = false;
    vllm_status s = client_start(c, body, &head);
    free(body);
    if (s) {
        result_fail(r, "%s", vllm_last_error());
        return;
    }
    if (head.status != 200) {
        char *resp = NULL;
        size_t n;
        char msg[512];
        if (hc_read_body(c->conn, &resp, &n) != VLLM_OK) resp = NULL;
        snprintf(msg, sizeof msg, "HTTP %d %s: %.300s", head.status, head.reason, resp ? resp : "");
        free(resp);
        result_fail(r, "%s", msg);
        return;
    }
    for (;;) {
        const char *data;
        size_t n;
        bool eof;
        s = hc_sse_next(c->conn, &data, &n, &eof);
        if (s) {
            result_fail(r, "%s", vllm_last_error());
            hc_close(c->conn);
            c->conn = NULL;
            return;
        }
        if (eof) break;
        if (n == 6 && !memcmp(data, "[DONE]", 6)) continue; /* the body ends right after */
        double ts = cli_now();
        /* JSON_ALLOW_NUL: a generated byte 0 (Qwen's token 188, a byte-fallback <0x00>) is sent as
         * "\u0000", valid JSON that Python's json.loads (vLLM's client) accepts; without the flag jansson
         * rejects the chunk and the request is counted as failed */
        json_error_t jerr;
        json_t *o = json_loadb(data, n, JSON_ALLOW_NUL, &jerr);
        if (!json_is_object(o)) {
            char msg[512];
            snprintf(msg, sizeof msg, "invalid JSON in the stream (%s): %.200s", o ? "not an object" : jerr.text, data);
            result_fail(r, "%s", msg);
            json_decref(o);
            continue;
        }
        json_t *choices = json_object_get(o, "choices");
        json_t *usage = json_object_get(o, "usage");
        json_t *err = json_object_get(o, "error");
        if (json_is_array(choices) && json_array_size(choices) > 0) {
            json_t *c0 = json_array_get(choices, 0);
            json_t *tv = a->chat ? json_object_get(json_object_get(c0, "delta"), "content") : json_object_get(c0, "text");
            const char *text = json_string_value(tv);
            if (!first) {
                first = true;
                r->ttft = ts - st;
            } else if (!series_push(&r->itl, ts - last)) {
                result_fail(r, "out of memory%s", NULL);
            }
            last = ts;
            if (keep_text && text) append_text(r, text, json_string_length(tv));
        } else if (json_is_object(usage)) {
            json_t *ct = json_object_get(usage, "completion_tokens");
            json_t *pt = json_object_get(usage, "prompt_tokens");
            if (json_is_integer(ct) && json_integer_value(ct) >= 0 && json_integer_value(ct) <= INT32_MAX)
                r->output_tokens = (int)json_integer_value(ct);
            if (json_is_integer(pt) && json_integer_value(pt) >= 0 && json_integer_value(pt) <= INT32_MAX)
                r->prompt_len = (int)json_integer_value(pt);
        } else if (json_is_object(err)) {
            const char *m = json_string_value(json_object_get(err, "message"));
            result_fail(r, "error in the stream: %s", m ? m : "(no message)");
        }
        json_decref(o);
    }
    if (r->error) return;
    if (!first) {
        result_fail(r, "Never received a valid chunk to calculate TTFT.%s", NULL);
        return;
    }
    r->success = true;
    r->latency = last - st;
}

/* ------------------------------------------------------------------ */
/* The run: arrival times and client threads                           */
/* ------------------------------------------------------------------ */

typedef struct bs_run {
    const bs_args *a;
    const bs_server *sv;
    const char *model;
    const cli_dataset *d;
    const size_t *order;     /* item of request i (warmups repeat item 0) */
    size_t n;                /* requests */
    const double *arrival;   /* (n) seconds after t0, or NULL: all at t0 */
    double t0;
    bs_result *results;      /* (n) */
    bool keep_text;
    pthread_mutex_t mu;
    size_t next, done;
    progress prog;
    bool show_progress;
} bs_run;

static void *client_thread(void *arg) {
    bs_run *run = arg;
    bs_client c = {.a = run->a, .sv = run->sv, .model = run->model};
    server_path(run->sv, run->a->endpoint, c.path, sizeof c.path);
    for (;;) {
        pthread_mutex_lock(&run->mu);
        size_t i = run->next < run->n ? run->next++ : SIZE_MAX;
        pthread_mutex_unlock(&run->mu);
        if (i == SIZE_MAX) break;
        double arrival = run->t0 + (run->arrival ? run->arrival[i] : 0);
        sleep_until(arrival);
        bs_result *r = &run->results[i];
        client_run(&c, &run->d->items[run->order ? run->order[i] : i], r, run->keep_text);
        r->queue_time = r->start - arrival;
        pthread_mutex_lock(&run->mu);
        run->done++;
        if (run->show_progress) progress_update(&run->prog, (int64_t)run->done);
        pthread_mutex_unlock(&run->mu);
    }
    hc_close(c.conn);
    return NULL;
}

/* Runs run->n requests with `threads` client threads; false if none could start. */
static bool run_requests(bs_run *run, size_t threads, const char *what) {
    if (threads > run->n) threads = run->n;
    if (threads > BS_MAX_THREADS) threads = BS_MAX_THREADS;
    if (threads == 0) threads = 1;
    pthread_t *tids = calloc(threads, sizeof *tids);
    if (!tids) return false;
    pthread_mutex_init(&run->mu, NULL);
    run->next = run->done = 0;
    if (run->show_progress) progress_start(&run->prog, what, (int64_t)run->n);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    size_t started = 0;
    run->t0 = cli_now();
    for (; started < threads; started++)
        if (pthread_create(&tids[started], &attr, client_thread, run) != 0) break;
    pthread_attr_destroy(&attr);
    if (started == 0) {
        fprintf(stderr, "vllmc bench serve: cannot start a client thread\n");
        pthread_mutex_destroy(&run->mu);
        free(tids);
        return false;
    }
    if (started < threads) fprintf(stderr, "vllmc bench serve: only %zu of %zu client threads started\n", started, threads);
    for (size_t k = 0; k < started; k++) pthread_join(tids[k], NULL);
    pthread_mutex_destroy(&run->mu);
    free(tids);
    return true;
}

/* vLLM's get_request: cumulative gaps from Gamma(burstiness, 1 / (rate * burstiness))
 * (exponential when burstiness is 1), constant 1 / rate for burstiness inf,
 * rescaled so that the last arrival is at n / rate. NULL for rate inf. */
static double *arrival_times(const bs_args *a, size_t n, bool *oom) {
    *oom = false;
    if (isinf(a->request_rate)) return NULL;
    double *t = malloc(n * sizeof *t);
    if (!t) {
        *oom = true;
        return NULL;
    }
    uint64_t rng = (uint64_t)a->seed ^ 0x5bd1e995ULL;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double gap = isinf(a->burstiness) ? 1.0 / a->request_rate
                                          : rng_gamma(&rng, a->burstiness, 1.0 / (a->request_rate * a->burstiness));
        sum += gap;
        t[i] = sum;
    }
    if (sum > 0) {
        double scale = ((double)n / a->request_rate) / sum;
        for (size_t i = 0; i < n; i++) t[i] *= scale;
    }
    return t;
}

/* ------------------------------------------------------------------ */
/* Metrics                                                             */
/* ------------------------------------------------------------------ */

typedef struct bs_stat {
    double mean, median, std, pct[BS_MAX_PERCENTILES];
} bs_stat;

/* Statistics in milliseconds of values in seconds (sorts s). */
static bs_stat series_stat(bs_series *s, const bs_args *a) {
    bs_stat st = {0};
    if (s->n == 0) return st;
    cli_sort_mean_std(s->v, s->n, &st.mean, &st.std);
    st.mean *= 1000;
    st.std *= 1000;
    st.median = cli_percentile(s->v, s->n, 50) * 1000;
    for (int k = 0; k < a->num_percentiles; k++) st.pct[k] = cli_percentile(s->v, s->n, a->percentiles[k]) * 1000;
    return st;
}

typedef struct bs_metrics {
    size_t completed, failed;
    long long total_input, total_output;
    double duration;
    double request_throughput, output_throughput, total_token_throughput;
    double max_output_tokens_per_s;
    int max_concurrent_requests;
    bs_stat stat[4];         /* ttft, tpot, itl, e2el */
    int *output_lens;        /* (n) per request, 0 when failed */
} bs_metrics;

static int cmp_event(const void *x, const void *y) {
    const double *a = x, *b = y;
    if (a[0] != b[0]) return (a[0] > b[0]) - (a[0] < b[0]);
    return (a[1] > b[1]) - (a[1] < b[1]); /* departures (-1) before arrivals (+1) */
}

/* vLLM's calculate_metrics. false when out of memory. */
static bool compute_metrics(const bs_args *a, const bs_result *res, size_t n, double duration, bs_metrics *m) {
    memset(m, 0, sizeof *m);
    m->duration = duration;
    bs_series s[4] = {{0}};
    m->output_lens = calloc(n ? n : 1, sizeof *m->output_lens);
    bool ok = m->output_lens != NULL;
    double min_start = INFINITY, max_end = -INFINITY;
    for (size_t i = 0; ok && i < n; i++) {
        const bs_result *r = &res[i];
        if (!r->success) {
            m->failed++;
            continue;
        }
        /* no usage chunk: one token per streamed chunk (vLLM re-tokenizes the text instead) */
        int out = r->output_tokens ? r->output_tokens : (int)r->itl.n + 1;
        m->output_lens[i] = out;
        m->total_output += out;
        m->total_input += r->prompt_len;
        if (out > 1) ok = ok && series_push(&s[1], (r->latency - r->ttft) / (out - 1));
        for (size_t k = 0; ok && k < r->itl.n; k++) ok = series_push(&s[2], r->itl.v[k]);
        ok = ok && series_push(&s[0], r->ttft) && series_push(&s[3], r->latency);
        m->completed++;
        if (r->start < min_start) min_start = r->start;
        if (r->start + r->latency > max_end) max_end = r->start + r->latency;
    }
    /* peak output tokens in any one-second bucket, and peak concurrency (sweep line) */
    if (ok && m->completed > 0) {
        size_t buckets = (size_t)ceil(max_end - min_start) + 1;
        double *tok = calloc(buckets, sizeof *tok);
        double *ev = malloc(2 * m->completed * 2 * sizeof *ev);
        ok = tok && ev;
        size_t ne = 0;
        for (size_t i = 0; ok && i < n; i++) {
            const bs_result *r = &res[i];
            if (!r->success) continue;
            double t = r->start + r->ttft;
            for (size_t k = 0; k <= r->itl.n; k++) {
                if (k > 0) t += r->itl.v[k - 1];
                double b = floor(t - min_start);
                if (b >= 0 && b < (double)buckets) tok[(size_t)b] += 1;
            }
            ev[2 * ne] = r->start, ev[2 * ne + 1] = 1, ne++;
            ev[2 * ne] = r->start + r->latency, ev[2 * ne + 1] = -1, ne++;
        }
        if (ok) {
            for (size_t b = 0; b < buckets; b++)
                if (tok[b] > m->max_output_tokens_per_s) m->max_output_tokens_per_s = tok[b];
            qsort(ev, ne, 2 * sizeof *ev, cmp_event);
            int cur = 0;
            for (size_t k = 0; k < ne; k++) {
                cur += (int)ev[2 * k + 1];
                if (cur > m->max_concurrent_requests) m->max_concurrent_requests = cur;
            }
        }
        free(tok);
        free(ev);
    }
    if (ok) {
        for (int k = 0; k < 4; k++) m->stat[k] = series_stat(&s[k], a);
        m->request_throughput = (double)m->completed / duration;
        m->output_throughput = (double)m->total_output / duration;
        m->total_token_throughput = (double)(m->total_input + m->total_output) / duration;
    }
    for (int k = 0; k < 4; k++) free(s[k].v);
    return ok;
}

/* Python's "{s:{c}^{n}}": s centred in width 50, extra fill on the right. */
static void print_centered(const char *s, char fill) {
    int len = (int)strlen(s), pad = 50 - len;
    if (pad < 0) pad = 0;
    int left = pad / 2, right = pad - left;
    for (int i = 0; i < left; i++) putchar(fill);
    fputs(s, stdout);
    for (int i = 0; i < right; i++) putchar(fill);
    putchar('\n');
}

static void percentile_word(double p, char *buf, size_t cap) {
    if (p == floor(p)) snprintf(buf, cap, "%d", (int)p);
    else snprintf(buf, cap, "%g", p);
}

/* vLLM's result block (benchmark() in serve.py: "{:<40} {:<10}" lines). */
static void print_results(const bs_args *a, const bs_metrics *m) {
    print_centered(" Serving Benchmark Result ", '=');
    printf("%-40s %-10zu\n", "Successful requests:", m->completed);
    printf("%-40s %-10zu\n", "Failed requests:", m->failed);
    if (a->set_max_concurrency) printf("%-40s %-10lld\n", "Maximum request concurrency:", a->max_concurrency);
    if (!isinf(a->request_rate)) printf("%-40s %-10.2f\n", "Request rate configured (RPS):", a->request_rate);
    printf("%-40s %-10.2f\n", "Benchmark duration (s):", m->duration);
    printf("%-40s %-10lld\n", "Total input tokens:", m->total_input);
    printf("%-40s %-10lld\n", "Total generated tokens:", m->total_output);
    printf("%-40s %-10.2f\n", "Request throughput (req/s):", m->request_throughput);
    printf("%-40s %-10.2f\n", "Output token throughput (tok/s):", m->output_throughput);
    printf("%-40s %-10.2f\n", "Peak output token throughput (tok/s):", m->max_output_tokens_per_s);
    printf("%-40s %-10.2f\n", "Peak concurrent requests:", (double)m->max_concurrent_requests);
    printf("%-40s %-10.2f\n", "Total token throughput (tok/s):", m->total_token_throughput);
    static const char *const label[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
    static const char *const header[4] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                                          "Inter-token Latency", "End-to-end Latency"};
    for (int k = 0; k < 4; k++) {
        if (!a->metric_on[k]) continue;
        char name[64];
        print_centered(header[k], '-');
        snprintf(name, sizeof name, "Mean %s (ms):", label[k]);
        printf("%-40s %-10.2f\n", name, m->stat[k].mean);
        snprintf(name, sizeof name, "Median %s (ms):", label[k]);
        printf("%-40s %-10.2f\n", name, m->stat[k].median);
        for (int p = 0; p < a->num_percentiles; p++) {
            char pw[32];
            percentile_word(a->percentiles[p], pw, sizeof pw);
            snprintf(name, sizeof name, "P%s %s (ms):", pw, label[k]);
            printf("%-40s %-10.2f\n", name, m->stat[k].pct[p]);
        }
    }
    for (int i = 0; i < 50; i++) putchar('=');
    putchar('\n');
    fflush(stdout);
}

/* vLLM's result JSON (main_async: result_json), keys as vLLM names them. */
static bool save_results(const bs_args *a, const char *model, const bs_metrics *m, const bs_result *res, size_t n) {
    char date[32], path[4096], name[1024];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tmv);
    const char *backend = a->chat ? "openai-chat" : "openai";
    if (a->result_filename) {
        snprintf(name, sizeof name, "%s", a->result_filename);
    } else {
        char rate[40], conc[48];
        py_float(a->request_rate, rate, sizeof rate);
        conc[0] = 0;
        if (a->set_max_concurrency) snprintf(conc, sizeof conc, "-concurrency%lld", a->max_concurrency);
        const char *base = strrchr(model, '/');
        snprintf(name, sizeof name, "%s-%sqps%s-%s-%s.json", a->label ? a->label : backend, rate, conc,
                 base ? base + 1 : model, date);
    }
    if (a->result_dir) {
        mkdir(a->result_dir, 0777);
        snprintf(path, sizeof path, "%s/%s", a->result_dir, name);
    } else {
        snprintf(path, sizeof path, "%s", name);
    }
    json_t *o = json_object();
    json_object_set_new(o, "date", json_string(date));
    json_object_set_new(o, "endpoint_type", json_string(backend));
    json_object_set_new(o, "backend", json_string(backend));
    json_object_set_new(o, "label", a->label ? json_string(a->label) : json_null());
    json_object_set_new(o, "model_id", json_string(model));
    json_object_set_new(o, "num_prompts", json_integer((json_int_t)n));
    json_object_set_new(o, "request_rate", isinf(a->request_rate) ? json_string("inf") : json_real(a->request_rate));
    json_object_set_new(o, "burstiness", json_real(a->burstiness));
    json_object_set_new(o, "max_concurrency", a->set_max_concurrency ? json_integer(a->max_concurrency) : json_null());
    json_object_set_new(o, "duration", json_real(m->duration));
    json_object_set_new(o, "completed", json_integer((json_int_t)m->completed));
    json_object_set_new(o, "failed", json_integer((json_int_t)m->failed));
    json_object_set_new(o, "total_input_tokens", json_integer(m->total_input));
    json_object_set_new(o, "total_output_tokens", json_integer(m->total_output));
    json_object_set_new(o, "request_throughput", json_real(m->request_throughput));
    json_object_set_new(o, "request_goodput", json_null());
    json_object_set_new(o, "output_throughput", json_real(m->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(m->total_token_throughput));
    json_object_set_new(o, "max_output_tokens_per_s", json_real(m->max_output_tokens_per_s));
    json_object_set_new(o, "max_concurrent_requests", json_integer(m->max_concurrent_requests));
    for (int k = 0; k < 4; k++) {
        if (!a->metric_on[k]) continue;
        char key[64];
        snprintf(key, sizeof key, "mean_%s_ms", METRIC_NAMES[k]);
        json_object_set_new(o, key, json_real(m->stat[k].mean));
        snprintf(key, sizeof key, "median_%s_ms", METRIC_NAMES[k]);
        json_object_set_new(o, key, json_real(m->stat[k].median));
        snprintf(key, sizeof key, "std_%s_ms", METRIC_NAMES[k]);
        json_object_set_new(o, key, json_real(m->stat[k].std));
        for (int p = 0; p < a->num_percentiles; p++) {
            char pw[32];
            percentile_word(a->percentiles[p], pw, sizeof pw);
            snprintf(key, sizeof key, "p%s_%s_ms", pw, METRIC_NAMES[k]);
            json_object_set_new(o, key, json_real(m->stat[k].pct[p]));
        }
    }
    if (a->save_detailed) {
        json_t *il = json_array(), *ol = json_array(), *tt = json_array(), *it = json_array(), *lat = json_array(),
               *stt = json_array(), *gt = json_array(), *er = json_array();
        for (size_t i = 0; i < n; i++) {
            const bs_result *r = &res[i];
            json_array_append_new(il, json_integer(r->prompt_len));
            json_array_append_new(ol, json_integer(m->output_lens[i]));
            json_array_append_new(tt, json_real(r->ttft));
            json_t *one = json_array();
            for (size_t k = 0; k < r->itl.n; k++) json_array_append_new(one, json_real(r->itl.v[k]));
            json_array_append_new(it, one);
            json_array_append_new(lat, json_real(r->latency));
            json_array_append_new(stt, json_real(r->start));
            json_t *txt = r->text ? json_stringn(r->text, r->text_len) : NULL;
            json_array_append_new(gt, txt ? txt : json_string(""));
            json_array_append_new(er, json_string(r->error ? r->error : ""));
        }
        json_object_set_new(o, "input_lens", il);
        json_object_set_new(o, "output_lens", ol);
        json_object_set_new(o, "ttfts", tt);
        json_object_set_new(o, "itls", it);
        json_object_set_new(o, "latencies", lat);
        json_object_set_new(o, "start_times", stt);
        json_object_set_new(o, "generated_texts", gt);
        json_object_set_new(o, "errors", er);
    }
    int rc = json_dump_file(o, path, JSON_INDENT(0));
    json_decref(o);
    if (rc != 0) {
        fprintf(stderr, "vllmc bench serve: %s: cannot write the results\n", path);
        return false;
    }
    fprintf(stderr, "Results written to %s\n", path);
    return true;
}

/* ------------------------------------------------------------------ */
/* Entry                                                               */
/* ------------------------------------------------------------------ */

int cmd_bench_serve(int argc, char **argv) {
    bs_args a = {
        .host = "127.0.0.1",
        .endpoint = "/v1/completions",
        .dataset_name = "random",
        .percentile_metrics = "ttft,tpot,itl,e2el",
        .metric_percentiles = "99",
        .port = 8000,
        .num_prompts = 1000,
        .input_len = 1024,
        .output_len = 128,
        .timeout_s = 600,
        .request_rate = INFINITY,
        .burstiness = 1.0,
    };
    int prc = parse_args(argc - 1, argv + 1, &a);
    if (prc) return prc == 1 ? 0 : 2;
    json_object_seed(0); /* jansson's hash seed set before the client threads use it (jansson's threading notes) */

    bs_server sv;
    memset(&sv, 0, sizeof sv);
    sv.timeout_ms = (int)(a.timeout_s * 1000 > INT32_MAX ? INT32_MAX : a.timeout_s * 1000);
    if (a.base_url) {
        if (hc_parse_url(a.base_url, &sv.url) != VLLM_OK) {
            fprintf(stderr, "vllmc bench serve: --base-url: %s\n", vllm_last_error());
            return 2;
        }
    } else {
        if (strlen(a.host) >= sizeof sv.url.host) {
            fprintf(stderr, "vllmc bench serve: --host too long\n");
            return 2;
        }
        snprintf(sv.url.host, sizeof sv.url.host, "%s", a.host);
        sv.url.port = (int)a.port;
    }
    const char *key = a.api_key ? a.api_key : getenv("OPENAI_API_KEY");
    if (key && (strpbrk(key, "\r\n") || strlen(key) > 1024)) key = NULL;
    snprintf(sv.headers, sizeof sv.headers, "Content-Type: application/json\r\n%s%s%s",
             key && *key ? "Authorization: Bearer " : "", key && *key ? key : "", key && *key ? "\r\n" : "");

    /* the model: --served-model-name, --model, or the server's first */
    char *model_id = NULL, *root = NULL;
    if (!a.model) {
        fprintf(stderr, "Model not specified, fetching first model from server...\n");
        if (!first_model(&sv, &model_id, &root)) return 1;
        fprintf(stderr, "First model name: %s, first model id: %s\n", model_id, root ? root : model_id);
    } else {
        model_id = strdup(a.model);
        if (!model_id) return 1;
    }
    const char *model = a.served_name ? a.served_name : model_id;

    int rc = 1;
    cli_dataset d = {0};
    bs_result *results = NULL;
    double *arrival = NULL;
    bs_metrics m = {0};
    if (!strcmp(a.dataset_name, "random")) {
        long long vocab = find_vocab(&a, &sv, model, root ? root : (a.model ? a.model : NULL));
        if (!vocab || !random_dataset(&a, vocab, &d)) goto out;
    } else if (!cli_dataset_read_jsonl("vllmc bench serve", a.dataset_path,
                                       a.set_num_prompts ? (size_t)a.num_prompts : SIZE_MAX,
                                       a.set_output_len ? (int)a.output_len : CLI_OUTPUT_LEN_FROM_FILE, &d)) {
        goto out;
    }
    if (a.chat && !detokenize_prompts(&sv, model, &d)) goto out;
    size_t n = d.n;

    if (a.ready_timeout > 0 || a.num_warmups > 0) {
        /* the first prompt: retried until it succeeds (--ready-check-timeout-sec), then the warmups */
        bs_result r0;
        bs_client c = {.a = &a, .sv = &sv, .model = model};
        server_path(&sv, a.endpoint, c.path, sizeof c.path);
        if (a.ready_timeout > 0) {
            fprintf(stderr, "Waiting for the endpoint (up to %lld s)...\n", a.ready_timeout);
            double deadline = cli_now() + (double)a.ready_timeout;
            for (;;) {
                client_run(&c, &d.items[0], &r0, false);
                bool ok = r0.success;
                if (!ok && cli_now() < deadline) {
                    result_clear(&r0);
                    sleep_until(cli_now() + 1);
                    continue;
                }
                if (!ok) fprintf(stderr, "vllmc bench serve: initial test run failed: %s\n", r0.error ? r0.error : "?");
                result_clear(&r0);
                if (!ok) {
                    hc_close(c.conn);
                    goto out;
                }
                break;
            }
            fprintf(stderr, "Initial test run completed.\n");
        }
        hc_close(c.conn);
        if (a.num_warmups > 0) {
            fprintf(stderr, "Warming up with %lld requests...\n", a.num_warmups);
            size_t nw = (size_t)a.num_warmups;
            size_t *order = calloc(nw, sizeof *order); /* every warmup sends the first prompt */
            bs_result *wr = calloc(nw, sizeof *wr);
            bs_run w = {.a = &a, .sv = &sv, .model = model, .d = &d, .order = order, .n = nw, .results = wr};
            bool ok = order && wr && run_requests(&w, a.set_max_concurrency ? (size_t)a.max_concurrency : nw, "warmup");
            for (size_t i = 0; wr && i < nw; i++) result_clear(&wr[i]);
            free(wr);
            free(order);
            if (!ok) goto out;
            fprintf(stderr, "Warmup run completed.\n");
        }
    }

    char f1[40], f2[40];
    fprintf(stderr, "Starting main benchmark run...\n");
    fprintf(stderr, "Traffic request rate: %s\n", py_float(a.request_rate, f1, sizeof f1));
    fprintf(stderr, "Burstiness factor: %s (%s)\n", py_float(a.burstiness, f2, sizeof f2),
            a.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
    if (a.set_max_concurrency) fprintf(stderr, "Maximum request concurrency: %lld\n", a.max_concurrency);
    else fprintf(stderr, "Maximum request concurrency: None\n");
    size_t threads = a.set_max_concurrency && (size_t)a.max_concurrency < n ? (size_t)a.max_concurrency : n;
    if (threads > BS_MAX_THREADS)
        fprintf(stderr, "note: at most %d requests in flight (client threads)\n", BS_MAX_THREADS);

    bool oom;
    arrival = arrival_times(&a, n, &oom);
    results = calloc(n, sizeof *results);
    if (oom || !results) {
        fprintf(stderr, "vllmc bench serve: out of memory\n");
        goto out;
    }
    bs_run run = {.a = &a, .sv = &sv, .model = model, .d = &d, .n = n, .arrival = arrival, .results = results,
                  .keep_text = a.save_detailed, .show_progress = !a.disable_tqdm};
    if (!run_requests(&run, threads, "requests")) goto out;
    double duration = cli_now() - run.t0;

    if (!compute_metrics(&a, results, n, duration, &m)) {
        fprintf(stderr, "vllmc bench serve: out of memory computing the metrics\n");
        goto out;
    }
    if (m.failed) {
        fprintf(stderr, "Failed requests during benchmark run detected (capping to 10):\n");
        size_t shown = 0;
        for (size_t i = 0; i < n && shown < 10; i++)
            if (!results[i].success) fprintf(stderr, "Error %zu: %s\n", shown++, results[i].error ? results[i].error : "");
    }
    if (m.completed == 0) fprintf(stderr, "All requests failed. This is likely due to a misconfiguration on the benchmark arguments.\n");
    print_results(&a, &m);
    rc = m.completed > 0 ? 0 : 1;
    if (a.save_result && !save_results(&a, model, &m, results, n)) rc = 1;

out:
    for (size_t i = 0; results && i < d.n; i++) result_clear(&results[i]);
    free(results);
    free(arrival);
    free(m.output_lens);
    cli_dataset_free(&d);
    free(model_id);
    free(root);
    return rc;
}
