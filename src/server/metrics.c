/*
 * metrics.c: Prometheus metrics of the server: counters and histograms
 * under one mutex, rendered as Prometheus' text exposition format 0.0.4.
 *
 * Follows vLLM v1's PrometheusStatLogger (vllm/v1/metrics/loggers.py):
 * metric names, help texts, buckets (TTFT, time per output token reused for
 * the inter-token latency as vLLM does, request latency, build_1_2_5_buckets
 * for token counts), the labels model_name / engine / finished_reason; and
 * prometheus_client's exposition (counters suffixed _total in HELP, TYPE and
 * samples; labels sorted by name; floats written like Python's repr).
 */
#include "server/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ---- histograms ---- */

typedef struct histogram {
    double *bounds;       /* (num_bounds) finite upper bounds, increasing */
    size_t num_bounds;
    uint64_t *counts;     /* (num_bounds + 1) per bucket, not cumulative; [num_bounds] is +Inf */
    double sum;
    uint64_t count;
} histogram;

static vllm_status hist_init(histogram *h, const double *bounds, size_t n) {
    h->bounds = malloc((n ? n : 1) * sizeof *h->bounds);
    h->counts = calloc(n + 1, sizeof *h->counts);
    if (!h->bounds || !h->counts) return vt_error(VLLM_ERR_NO_MEMORY, "metrics: out of memory");
    if (n) memcpy(h->bounds, bounds, n * sizeof *bounds);
    h->num_bounds = n;
    return VLLM_OK;
}

static void hist_free(histogram *h) {
    free(h->bounds);
    free(h->counts);
}

static void hist_observe(histogram *h, double v) {
    if (!isfinite(v)) return;
    size_t i = 0;
    while (i < h->num_bounds && v > h->bounds[i]) i++; /* bucket le=bounds[i] holds v <= bounds[i] */
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

/* vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... up to max. */
static size_t buckets_1_2_5(int max_value, double *out, size_t cap) {
    static const int mant[3] = {1, 2, 5};
    size_t n = 0;
    for (double scale = 1; n < cap; scale *= 10)
        for (int k = 0; k < 3; k++) {
            double v = mant[k] * scale;
            if (v > max_value || n == cap) return n;
            out[n++] = v;
        }
    return n;
}

/* vllm/v1/metrics/loggers.py: histogram_time_to_first_token */
static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
/* histogram_time_per_output_token (and inter_token_latency, same buckets) */
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
/* request_latency_buckets (e2e) */
static const double latency_buckets[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,    10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define NUM_REASONS 3 /* stop, length, abort (vLLM v1's FinishReason) */

/* one engine replica's request-level series (data parallelism: one each, label engine="i") */
typedef struct engine_series {
    char *label;                 /* engine="i",model_name="<escaped>" */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t success[NUM_REASONS];
    histogram ttft, itl, e2e, req_prompt, req_gen;
} engine_series;

struct metrics {
    pthread_mutex_t mu;
    char *model_label;           /* model_name="<escaped>" */
    engine_series *eng;          /* (num_engines) */
    int num_engines;
    int in_flight;
};

/* Prometheus label value escaping: backslash, double quote, newline. */
static char *escape_label(const char *s) {
    size_t n = strlen(s);
    if (n > (SIZE_MAX - 1) / 2) return NULL;
    char *out = malloc(2 * n + 1), *p = out;
    if (!out) return NULL;
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') *p++ = '\\', *p++ = *s;
        else if (*s == '\n') *p++ = '\\', *p++ = 'n';
        else *p++ = *s;
    }
    *p = 0;
    return out;
}

vllm_status metrics_create(const char *model_name, int max_model_len, int num_engines, metrics **out) {
    *out = NULL;
    if (!model_name) return vt_error(VLLM_ERR_INVALID_ARG, "metrics: model name missing");
    if (num_engines < 1) num_engines = 1;
    metrics *m = calloc(1, sizeof *m);
    if (!m) return vt_error(VLLM_ERR_NO_MEMORY, "metrics: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    vllm_status st = VLLM_OK;
    char *esc = escape_label(model_name);
    if (esc) {
        size_t n = strlen(esc) + 32;
        if ((m->model_label = malloc(n))) snprintf(m->model_label, n, "model_name=\"%s\"", esc);
        free(esc);
    }
    if (!m->model_label || !(m->eng = calloc((size_t)num_engines, sizeof *m->eng))) {
        metrics_free(m);
        return vt_error(VLLM_ERR_NO_MEMORY, "metrics: out of memory");
    }
    m->num_engines = num_engines;
    double tok[64];
    size_t ntok = buckets_1_2_5(max_model_len > 0 ? max_model_len : 1, tok, 64);
    for (int e = 0; e < num_engines && !st; e++) {
        engine_series *g = &m->eng[e];
        size_t n = strlen(m->model_label) + 32;
        if ((g->label = malloc(n))) snprintf(g->label, n, "engine=\"%d\",%s", e, m->model_label);
        else st = vt_error(VLLM_ERR_NO_MEMORY, "metrics: out of memory");
        if (!st) st = hist_init(&g->ttft, ttft_buckets, sizeof ttft_buckets / sizeof *ttft_buckets);
        if (!st) st = hist_init(&g->itl, itl_buckets, sizeof itl_buckets / sizeof *itl_buckets);
        if (!st) st = hist_init(&g->e2e, latency_buckets, sizeof latency_buckets / sizeof *latency_buckets);
        if (!st) st = hist_init(&g->req_prompt, tok, ntok);
        if (!st) st = hist_init(&g->req_gen, tok, ntok);
    }
    if (st) {
        metrics_free(m);
        return st;
    }
    *out = m;
    return VLLM_OK;
}

void metrics_free(metrics *m) {
    if (!m) return;
    for (int e = 0; m->eng && e < m->num_engines; e++) {
        engine_series *g = &m->eng[e];
        hist_free(&g->ttft);
        hist_free(&g->itl);
        hist_free(&g->e2e);
        hist_free(&g->req_prompt);
        hist_free(&g->req_gen);
        free(g->label);
    }
    free(m->eng);
    free(m->model_label);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* engine's series (an index out of range, as a stream never made: engine 0's) */
static engine_series *series(metrics *m, int engine) {
    return &m->eng[engine >= 0 && engine < m->num_engines ? engine : 0];
}

void metrics_first_token(metrics *m, int engine, double ttft, size_t prompt_tokens) {
    pthread_mutex_lock(&m->mu);
    engine_series *g = series(m, engine);
    hist_observe(&g->ttft, ttft);
    g->prompt_tokens += prompt_tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_generated(metrics *m, int engine, size_t num_tokens) {
    pthread_mutex_lock(&m->mu);
    series(m, engine)->generation_tokens += num_tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_inter_token(metrics *m, int engine, double seconds) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&series(m, engine)->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_finished(metrics *m, int engine, vllm_finish_reason reason, double e2e, size_t prompt_tokens,
                      size_t generation_tokens) {
    int r = reason == VLLM_FINISH_STOP ? 0 : reason == VLLM_FINISH_LENGTH ? 1 : 2;
    pthread_mutex_lock(&m->mu);
    engine_series *g = series(m, engine);
    g->success[r]++;
    hist_observe(&g->e2e, e2e);
    hist_observe(&g->req_prompt, (double)prompt_tokens);
    hist_observe(&g->req_gen, (double)generation_tokens);
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_in_flight(metrics *m, int in_flight) {
    pthread_mutex_lock(&m->mu);
    m->in_flight = in_flight;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) VT_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->s && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len <= (size_t)n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            cap *= 2;
        }
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* A float as Python's repr writes it (prometheus_client's floatToGoString):
 * 12.0, 0.25, 1e-05, +Inf; the shortest form that reads back exactly. */
static void fmt_num(char out[40], double v) {
    if (isinf(v)) {
        snprintf(out, 40, "%sInf", v > 0 ? "+" : "-");
        return;
    }
    if (isnan(v)) {
        snprintf(out, 40, "NaN");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e16) {
        snprintf(out, 40, "%.1f", v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(out, 40, "%.*g", p, v);
        if (strtod(out, NULL) == v) return;
    }
}

static void header(sbuf *b, const char *name, const char *type, const char *help) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(sbuf *b, const char *name, const char *label, double v) {
    char num[40];
    fmt_num(num, v);
    sb_printf(b, "%s{%s} %s\n", name, label, num);
}

static void gauge(sbuf *b, const char *name, const char *help, const char *label, double v) {
    header(b, name, "gauge", help);
    sample(b, name, label, v);
}

/* one engine's name_bucket{engine,le,model_name} (cumulative), name_count, name_sum (the header written once
 * by the caller) */
static void hist_render(sbuf *b, const char *name, int engine, const char *model_label, const histogram *h) {
    uint64_t cum = 0;
    char num[40];
    for (size_t i = 0; i <= h->num_bounds; i++) {
        cum += h->counts[i];
        fmt_num(num, i < h->num_bounds ? h->bounds[i] : INFINITY);
        /* labels sorted: engine, le, model_name */
        sb_printf(b, "%s_bucket{engine=\"%d\",le=\"%s\",%s} %" PRIu64 ".0\n", name, engine, num, model_label, cum);
    }
    sb_printf(b, "%s_count{engine=\"%d\",%s} %" PRIu64 ".0\n", name, engine, model_label, h->count);
    fmt_num(num, h->sum);
    sb_printf(b, "%s_sum{engine=\"%d\",%s} %s\n", name, engine, model_label, num);
}

/* The engine-level families: a header, then a sample per engine of the value v(stats of engine e). */
#define PER_ENGINE(kind, name, help, expr)                                          \
    do {                                                                            \
        header(&b, name, kind, help);                                               \
        for (int e = 0; e < m->num_engines; e++) {                                  \
            const vllm_engine_stats *st = &stats[e];                                \
            const engine_series *g = &m->eng[e];                                    \
            (void)st, (void)g;                                                      \
            sample(&b, name, g->label, (double)(expr));                             \
        }                                                                           \
    } while (0)

#define PER_ENGINE_HIST(name, help, field)                                          \
    do {                                                                            \
        header(&b, name, "histogram", help);                                        \
        for (int e = 0; e < m->num_engines; e++) hist_render(&b, name, e, ml, &m->eng[e].field); \
    } while (0)

vllm_status metrics_render(metrics *m, const vllm_engine_stats *stats, const int *num_kv_blocks, char **out,
                           size_t *len) {
    *out = NULL;
    *len = 0;
    sbuf b = {0};
    const char *ml = m->model_label;
    static const char *reasons[NUM_REASONS] = {"stop", "length", "abort"};

    pthread_mutex_lock(&m->mu);
    PER_ENGINE("gauge", "vllm:num_requests_running", "Number of requests in model execution batches.", st->num_running);
    PER_ENGINE("gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed.", st->num_waiting);
    PER_ENGINE("gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", st->kv_cache_usage);
    PER_ENGINE("counter", "vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
               st->prefix_cache_queries);
    PER_ENGINE("counter", "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
               st->prefix_cache_hits);
    PER_ENGINE("counter", "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
               st->num_preemptions);
    PER_ENGINE("counter", "vllm:prompt_tokens_total", "Number of prefill tokens processed.", g->prompt_tokens);
    PER_ENGINE("counter", "vllm:generation_tokens_total", "Number of generation tokens processed.", g->generation_tokens);
    header(&b, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    for (int e = 0; e < m->num_engines; e++)
        for (int r = 0; r < NUM_REASONS; r++) {
            char num[40];
            fmt_num(num, (double)m->eng[e].success[r]);
            sb_printf(&b, "vllm:request_success_total{engine=\"%d\",finished_reason=\"%s\",%s} %s\n", e, reasons[r],
                      ml, num);
        }
    PER_ENGINE_HIST("vllm:request_prompt_tokens", "Number of prefill tokens processed.", req_prompt);
    PER_ENGINE_HIST("vllm:request_generation_tokens", "Number of generation tokens processed.", req_gen);
    PER_ENGINE_HIST("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft);
    PER_ENGINE_HIST("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl);
    PER_ENGINE_HIST("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e);
    PER_ENGINE("gauge", "vllmc:num_free_kv_blocks", "Free KV cache blocks (cached but evictable ones included).",
               st->num_free_kv_blocks);
    PER_ENGINE("gauge", "vllmc:num_kv_blocks", "KV cache blocks in the pool.", num_kv_blocks[e]);
    PER_ENGINE("counter", "vllmc:engine_steps_total", "Engine steps (forward passes) run.", st->steps);
    gauge(&b, "vllmc:num_requests_in_flight", "Generation requests being served (capped by --max-pending).",
          m->eng[0].label, m->in_flight);
    pthread_mutex_unlock(&m->mu);

    if (b.failed || !b.s) {
        free(b.s);
        return vt_error(VLLM_ERR_NO_MEMORY, "metrics: out of memory");
    }
    *out = b.s;
    *len = b.len;
    return VLLM_OK;
}
