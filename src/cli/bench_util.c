/*
 * bench_util.c: the helpers bench_util.h declares for vllmc bench latency,
 * throughput and serve.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/bench_util.h"

uint64_t cli_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

long long cli_model_vocab_size(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) return 0;
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *v = cfg ? json_object_get(cfg, "vocab_size") : NULL;
    if (!json_is_integer(v) && cfg) v = json_object_get(json_object_get(cfg, "text_config"), "vocab_size");
    long long n = json_is_integer(v) ? json_integer_value(v) : 0;
    json_decref(cfg);
    return n > 0 && n <= INT32_MAX ? n : 0;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

void cli_sort_mean_std(double *v, size_t n, double *mean, double *std) {
    *mean = *std = 0;
    if (n == 0) return;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    *mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += (v[i] - *mean) * (v[i] - *mean);
    *std = sqrt(sq / (double)n);
}

double cli_percentile(const double *sorted, size_t n, double pct) {
    if (n == 0) return 0;
    double pos = pct / 100.0 * (double)(n - 1);
    if (!(pos > 0)) return sorted[0];
    size_t lo = (size_t)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * (pos - (double)lo);
}
