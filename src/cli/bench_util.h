/*
 * bench_util.h: what the benchmarks share (bench.c: latency and throughput,
 * bench_serve.c: serve): the seeded generator, the model's vocabulary size
 * and numpy's statistics (mean, population std, linear percentiles).
 */
#ifndef VLLM_CLI_BENCH_UTIL_H
#define VLLM_CLI_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64: the next value of a small seeded generator (state advanced). */
uint64_t cli_rng_next(uint64_t *state);

/* vocab_size from DIR/config.json (or its text_config); 0 when absent, not positive or > INT32_MAX. */
long long cli_model_vocab_size(const char *dir);

/* Sorts v (n) ascending and gives numpy.mean and numpy.std (population) of it; 0s when n == 0. */
void cli_sort_mean_std(double *v, size_t n, double *mean, double *std);

/* numpy.percentile (linear interpolation) of sorted (n) at pct in [0, 100]; 0 when n == 0
 * (vLLM's calculate_metrics: `np.percentile(x or 0, p)`). */
double cli_percentile(const double *sorted, size_t n, double pct);

#endif
