/*
 * sampler.h: turning one row of logits into a token: greedy, temperature,
 * top-k, top-p, min-p, with a per-request random generator so that the
 * same seed gives the same output whatever else is in the batch.
 */
#ifndef VLLM_SAMPLE_SAMPLER_H
#define VLLM_SAMPLE_SAMPLER_H

#include <stdint.h>

#include "vllm.h"

typedef struct sampler_rng {
    uint64_t s[4];  /* xoshiro256** state */
} sampler_rng;

void sampler_rng_seed(sampler_rng *rng, uint64_t seed);
/* Uniform in [0, 1). */
double sampler_rng_uniform(sampler_rng *rng);

/* Scratch for one vocabulary-sized row (reused across calls). */
typedef struct sampler_scratch {
    float *probs;
    int32_t *idx;
    int cap;
} sampler_scratch;

void sampler_scratch_free(sampler_scratch *s);

/* log_softmax(logits)[token] in double precision: the raw model logprob. */
double sampler_logprob(const float *logits, int vocab, int32_t token);

/* Samples from logits (vocab) under params; logits may hold -INFINITY for
 * banned tokens. The row should already have been through
 * sampler_process_logits (logits_proc.h). Greedy (argmax, lowest id on ties)
 * when temperature == 0; a temperature in (0, 0.01) counts as 0.01 (vLLM's
 * _MAX_TEMP). Then temperature -> min_p -> top_k -> top_p -> draw.
 * Returns the token id, or -1 (with a message) on failure.
 * u is the uniform draw in [0, 1) (unused when greedy). */
int32_t sampler_sample_u(const float *logits, int vocab, const vllm_sampling_params *p, double u,
                         sampler_scratch *scratch);
/* sampler_sample_u with u drawn from rng, only when temperature > 0 (a
 * greedy request leaves its generator untouched). */
int32_t sampler_sample(const float *logits, int vocab, const vllm_sampling_params *p, sampler_rng *rng,
                       sampler_scratch *scratch);

#endif
