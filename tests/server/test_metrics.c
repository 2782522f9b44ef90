/*
 * test_metrics.c: the server's Prometheus metrics (src/server/metrics.c):
 * vLLM's names and labels, cumulative histogram buckets (vLLM's bounds and
 * build_1_2_5_buckets), counters by finish reason, label escaping, float
 * formatting, and counts that add up under concurrent observers.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"
#include "test.h"

/* The value of the sample line that starts with `series ` (exact series), or -1. */
static double value_of(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

static bool has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, line, n) && (p[n] == '\n' || p[n] == 0)) return true;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return false;
}

#define L "{engine=\"0\",model_name=\"m\"}"

static void test_render(void) {
    metrics *m = NULL;
    CHECK_OK(metrics_create("m", 100, 1, &m));
    if (!m) return;
    metrics_first_token(m, 0, 0.003, 7);   /* ttft bucket le=0.005 */
    metrics_first_token(m, 0, 3.0, 5);     /* le=5.0 */
    metrics_generated(m, 0, 4);
    metrics_generated(m, 0, 2);
    metrics_inter_token(m, 0, 0.02);
    metrics_inter_token(m, 0, 100.0);      /* above every bound: only +Inf */
    metrics_finished(m, 0, VLLM_FINISH_STOP, 0.4, 7, 4);
    metrics_finished(m, 0, VLLM_FINISH_LENGTH, 2.0, 5, 2);
    metrics_finished(m, 0, VLLM_FINISH_ABORT, 1.0, 5, 0);
    metrics_set_in_flight(m, 3);
    vllm_engine_stats st = {.num_running = 2, .num_waiting = 1, .num_free_kv_blocks = 90,
                            .kv_cache_usage = 0.25, .prefix_cache_queries = 40, .prefix_cache_hits = 16,
                            .num_preemptions = 3};
    char *text = NULL;
    size_t len = 0;
    const int blocks120 = 120;
    CHECK_OK(metrics_render(m, &st, &blocks120, &text, &len));
    if (!text) {
        metrics_free(m);
        return;
    }
    CHECK(strlen(text) == len);
    CHECK(has_line(text, "# TYPE vllm:num_requests_running gauge"));
    CHECK(has_line(text, "vllm:num_requests_running" L " 2.0"));
    CHECK(has_line(text, "vllm:num_requests_waiting" L " 1.0"));
    CHECK(has_line(text, "vllm:kv_cache_usage_perc" L " 0.25"));
    CHECK(has_line(text, "# TYPE vllm:prefix_cache_queries_total counter"));
    CHECK(has_line(text, "vllm:prefix_cache_queries_total" L " 40.0"));
    CHECK(has_line(text, "vllm:prefix_cache_hits_total" L " 16.0"));
    CHECK(has_line(text, "vllm:num_preemptions_total" L " 3.0"));
    CHECK(has_line(text, "vllm:prompt_tokens_total" L " 12.0"));
    CHECK(has_line(text, "vllm:generation_tokens_total" L " 6.0"));
    CHECK(has_line(text, "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 1.0"));
    CHECK(has_line(text, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 1.0"));
    CHECK(has_line(text, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"m\"} 1.0"));
    /* TTFT: vLLM's 22 bounds, cumulative */
    CHECK(has_line(text, "# TYPE vllm:time_to_first_token_seconds histogram"));
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"m\"}") == 0);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.005\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2.5\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"5.0\",model_name=\"m\"}") == 2);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2560.0\",model_name=\"m\"}") == 2);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"}") == 2);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_count" L) == 2);
    CHECK_NEAR(value_of(text, "vllm:time_to_first_token_seconds_sum" L), 3.003, 1e-12);
    /* inter-token latency: 19 bounds up to 80; 100 s only in +Inf */
    CHECK(value_of(text, "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"0.025\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"80.0\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"}") == 2);
    /* e2e: request latency buckets from 0.3 */
    CHECK(value_of(text, "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"m\"}") == 0);
    CHECK(value_of(text, "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"}") == 2);
    CHECK(value_of(text, "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"2.0\",model_name=\"m\"}") == 3);
    /* token histograms: build_1_2_5_buckets(100) = 1, 2, 5, 10, 20, 50, 100 */
    CHECK(value_of(text, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"5.0\",model_name=\"m\"}") == 2);
    CHECK(value_of(text, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"10.0\",model_name=\"m\"}") == 3);
    CHECK(value_of(text, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"100.0\",model_name=\"m\"}") == 3);
    CHECK(value_of(text, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"200.0\",model_name=\"m\"}") == -1);
    CHECK(value_of(text, "vllm:request_generation_tokens_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:request_generation_tokens_bucket{engine=\"0\",le=\"2.0\",model_name=\"m\"}") == 2);
    CHECK(value_of(text, "vllm:request_generation_tokens_sum" L) == 6);
    /* vllmc debug gauges */
    CHECK(has_line(text, "vllmc:num_free_kv_blocks" L " 90.0"));
    CHECK(has_line(text, "vllmc:num_kv_blocks" L " 120.0"));
    CHECK(has_line(text, "vllmc:num_requests_in_flight" L " 3.0"));
    /* every line is a comment or "name{labels} value" */
    int bad = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        CHECK(nl != NULL);
        if (!nl) break;
        if (*p != '#' && (!memchr(p, '{', (size_t)(nl - p)) || !memchr(p, '}', (size_t)(nl - p)))) bad++;
        p = nl + 1;
    }
    CHECK(bad == 0);
    free(text);
    metrics_free(m);
}

/* Data parallelism: a series per engine (label engine="i"), each family's header once. */
static void test_engines(void) {
    metrics *m = NULL;
    CHECK_OK(metrics_create("m", 100, 2, &m));
    if (!m) return;
    metrics_first_token(m, 1, 0.003, 7);
    metrics_generated(m, 1, 5);
    metrics_generated(m, 0, 2);
    metrics_finished(m, 1, VLLM_FINISH_STOP, 0.4, 7, 5);
    metrics_finished(m, 7, VLLM_FINISH_ABORT, 0.4, 7, 0); /* out of range: engine 0's */
    vllm_engine_stats st[2] = {{.num_running = 2, .steps = 11}, {.num_running = 5, .num_waiting = 1, .steps = 4}};
    char *text = NULL;
    size_t len = 0;
    const int blocks[2] = {64, 48};
    CHECK_OK(metrics_render(m, st, blocks, &text, &len));
    CHECK(text && strstr(text, "vllmc:num_kv_blocks{engine=\"1\",model_name=\"m\"} 48.0"));
    if (!text) {
        metrics_free(m);
        return;
    }
    CHECK(has_line(text, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2.0"));
    CHECK(has_line(text, "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 5.0"));
    CHECK(has_line(text, "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 1.0"));
    CHECK(has_line(text, "vllmc:engine_steps_total{engine=\"0\",model_name=\"m\"} 11.0"));
    CHECK(has_line(text, "vllmc:engine_steps_total{engine=\"1\",model_name=\"m\"} 4.0"));
    CHECK(strstr(text, "# TYPE vllmc:engine_steps_total counter\n") != NULL);
    CHECK(has_line(text, "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 2.0"));
    CHECK(has_line(text, "vllm:generation_tokens_total{engine=\"1\",model_name=\"m\"} 5.0"));
    CHECK(has_line(text, "vllm:request_success_total{engine=\"1\",finished_reason=\"stop\",model_name=\"m\"} 1.0"));
    CHECK(has_line(text, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"m\"} 1.0"));
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_count{engine=\"1\",model_name=\"m\"}") == 1);
    CHECK(value_of(text, "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"}") == 0);
    int headers = 0;
    for (const char *p = text; (p = strstr(p, "# TYPE vllm:num_requests_running ")); p++) headers++;
    CHECK(headers == 1);
    free(text);
    metrics_free(m);
}

static void test_escaping(void) {
    metrics *m = NULL;
    CHECK_OK(metrics_create("a\"b\\c\nd", 8, 1, &m));
    if (!m) return;
    vllm_engine_stats st = {0};
    char *text = NULL;
    size_t len;
    const int blocks0 = 0;
    CHECK_OK(metrics_render(m, &st, &blocks0, &text, &len));
    CHECK(text && strstr(text, "vllm:num_requests_running{engine=\"0\",model_name=\"a\\\"b\\\\c\\nd\"} 0.0\n"));
    /* build_1_2_5_buckets(8) = 1, 2, 5 */
    CHECK(text && strstr(text, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"5.0\",model_name="));
    CHECK(text && !strstr(text, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"10.0\""));
    free(text);
    metrics_free(m);
    metrics_free(NULL);
}

enum { THREADS = 4, ITERS = 2000 };

static void *observer(void *arg) {
    metrics *m = arg;
    for (int i = 0; i < ITERS; i++) {
        metrics_first_token(m, 0, 0.01, 3);
        metrics_generated(m, 0, 1);
        metrics_inter_token(m, 0, 0.001);
        metrics_finished(m, 0, VLLM_FINISH_LENGTH, 0.5, 3, 1);
    }
    return NULL;
}

static void test_threads(void) {
    metrics *m = NULL;
    CHECK_OK(metrics_create("m", 512, 1, &m));
    if (!m) return;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, observer, m) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    vllm_engine_stats st = {0};
    char *text = NULL;
    size_t len;
    const int blocks0 = 0;
    CHECK_OK(metrics_render(m, &st, &blocks0, &text, &len));
    if (text) {
        CHECK(value_of(text, "vllm:prompt_tokens_total" L) == 3.0 * THREADS * ITERS);
        CHECK(value_of(text, "vllm:generation_tokens_total" L) == (double)THREADS * ITERS);
        CHECK(value_of(text, "vllm:inter_token_latency_seconds_count" L) == (double)THREADS * ITERS);
        CHECK(value_of(text, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"}") ==
              (double)THREADS * ITERS);
    }
    free(text);
    metrics_free(m);
}

int main(void) {
    test_render();
    test_escaping();
    test_engines();
    test_threads();
    TEST_END();
}
