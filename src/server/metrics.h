/*
 * metrics.h: the server's Prometheus metrics (GET /metrics), thread-safe.
 *
 * Names, help texts, labels and histogram buckets are vLLM v1's
 * (vllm/v1/metrics/loggers.py, PrometheusStatLogger.__init__): every series
 * carries {engine="i",model_name="<first served name>"} (i: the data-parallel
 * replica, a series per replica as vLLM's per-engine loggers), labels sorted by
 * name as prometheus_client's text exposition writes them, counters end in
 * _total. Engine-level values (running / waiting, KV usage, prefix cache,
 * preemptions) come from a vllm_engine_stats snapshot passed at render
 * time; request-level values (TTFT, inter-token latency, end-to-end latency,
 * prompt / generation tokens, finished requests by reason) are observed by
 * the HTTP handlers as they read each request's stream.
 *
 * Besides vLLM's, four vllmc debug series (prefix "vllmc:"):
 *   vllmc:num_free_kv_blocks       free KV blocks (cached-but-evictable included)
 *   vllmc:num_kv_blocks            KV blocks in the pool
 *   vllmc:num_requests_in_flight   generation requests the server is serving
 *                                  (what --max-pending caps)
 *   vllmc:engine_steps_total       engine steps (forward passes) run
 * so a test can check that a disconnected client's blocks come back, and that
 * requests were batched (fewer steps than tokens generated) without racing a
 * poller against the running gauge.
 */
#ifndef VLLM_SERVER_METRICS_H
#define VLLM_SERVER_METRICS_H

#include <stddef.h>

#include "vllm.h"

typedef struct metrics metrics;

/* model_name labels every series; max_model_len sets the token-count
 * histograms' 1-2-5 buckets (vLLM's build_1_2_5_buckets). */
vllm_status metrics_create(const char *model_name, int max_model_len, int num_engines, metrics **out);
void metrics_free(metrics *m);

/* engine: the replica that ran the request (vllm_stream_engine). */
/* A sample produced its first token, ttft seconds after the request
 * arrived: observes vllm:time_to_first_token_seconds and adds its prompt
 * length to vllm:prompt_tokens_total (vLLM counts each sample's prompt). */
void metrics_first_token(metrics *m, int engine, double ttft, size_t prompt_tokens);
/* num_tokens more tokens were generated (vllm:generation_tokens_total). */
void metrics_generated(metrics *m, int engine, size_t num_tokens);
/* Seconds between two outputs of one sample (vllm:inter_token_latency_seconds). */
void metrics_inter_token(metrics *m, int engine, double seconds);
/* A sample finished: vllm:request_success_total{finished_reason}, the e2e
 * latency and the prompt / generation token histograms. */
void metrics_finished(metrics *m, int engine, vllm_finish_reason reason, double e2e, size_t prompt_tokens,
                      size_t generation_tokens);
/* Generation requests in flight (vllmc:num_requests_in_flight). */
void metrics_set_in_flight(metrics *m, int in_flight);

/* The text exposition (text/plain; version=0.0.4) with each engine's stats
 * and KV pool size (stats, num_kv_blocks: num_engines of each); *out
 * malloc'd, NUL-terminated, *len bytes. */
vllm_status metrics_render(metrics *m, const vllm_engine_stats *stats, const int *num_kv_blocks, char **out,
                           size_t *len);

#endif
