/* test_sampler.c: greedy, temperature, top-k/top-p/min-p filtering, seeds. */
#include <math.h>
#include <string.h>

#include "sample/sampler.h"
#include "test.h"

#define V 8

int main(void) {
    float logits[V] = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 0.0f, 1.5f, -3.0f};
    sampler_scratch sc = {0};
    sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    vllm_sampling_params p = vllm_sampling_default_params();

    /* greedy: argmax, lowest id on ties (torch.argmax) */
    p.temperature = 0;
    CHECK(sampler_sample(logits, V, &p, &rng, &sc) == 1);

    /* raw logprob against a direct computation */
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp(logits[i]);
    CHECK_NEAR(sampler_logprob(logits, V, 6), 1.5 - log(sum), 1e-9);

    /* top_k = 1 and a tiny top_p are greedy whatever the temperature */
    p.temperature = 5.0f;
    p.top_k = 1;
    for (int i = 0; i < 50; i++) {
        int t = sampler_sample(logits, V, &p, &rng, &sc);
        CHECK(t == 1 || t == 3);
    }
    p.top_k = 0;
    p.top_p = 1e-4f;
    for (int i = 0; i < 50; i++) CHECK(sampler_sample(logits, V, &p, &rng, &sc) == 1);

    /* top_k = 3 keeps {1, 3, 6} */
    p.top_p = 1.0f;
    p.top_k = 3;
    p.temperature = 1.0f;
    int hist[V] = {0};
    for (int i = 0; i < 20000; i++) hist[sampler_sample(logits, V, &p, &rng, &sc)]++;
    CHECK(hist[0] == 0 && hist[2] == 0 && hist[4] == 0 && hist[5] == 0 && hist[7] == 0);
    /* frequencies follow softmax over the kept set */
    double z = exp(2.0) + exp(2.0) + exp(1.5);
    CHECK_NEAR(hist[6] / 20000.0, exp(1.5) / z, 0.02);
    CHECK_NEAR(hist[1] / 20000.0, exp(2.0) / z, 0.02);

    /* min_p = 0.9 keeps only the two maxima */
    p.top_k = 0;
    p.min_p = 0.9f;
    for (int i = 0; i < 200; i++) {
        int t = sampler_sample(logits, V, &p, &rng, &sc);
        CHECK(t == 1 || t == 3);
    }
    p.min_p = 0;

    /* unfiltered sampling at temperature 1 matches softmax */
    memset(hist, 0, sizeof hist);
    for (int i = 0; i < 40000; i++) hist[sampler_sample(logits, V, &p, &rng, &sc)]++;
    for (int i = 0; i < V; i++) CHECK_NEAR(hist[i] / 40000.0, exp(logits[i]) / sum, 0.015);

    /* banned tokens (-inf) are never drawn */
    float banned[V];
    memcpy(banned, logits, sizeof banned);
    banned[1] = banned[3] = -INFINITY;
    for (int i = 0; i < 500; i++) {
        int t = sampler_sample(banned, V, &p, &rng, &sc);
        CHECK(t != 1 && t != 3);
    }

    /* vLLM v1 order: min-p before top-p. probs 0.5 / 0.3 / 20 x 0.01, min_p 0.5 keeps
     * only token 0, so top_p 0.6 can no longer admit token 1 */
    {
        float lg[22];
        lg[0] = logf(0.5f);
        lg[1] = logf(0.3f);
        for (int i = 2; i < 22; i++) lg[i] = logf(0.01f);
        vllm_sampling_params q = vllm_sampling_default_params();
        q.top_p = 0.6f;
        q.min_p = 0.5f;
        for (int i = 0; i < 300; i++) CHECK(sampler_sample(lg, 22, &q, &rng, &sc) == 0);
        /* top-k keeps every token tied with the k-th */
        float tie[4] = {1.0f, 3.0f, 3.0f, 3.0f};
        q = vllm_sampling_default_params();
        q.top_k = 1;
        int seen[4] = {0};
        for (int i = 0; i < 600; i++) seen[sampler_sample(tie, 4, &q, &rng, &sc)]++;
        CHECK(seen[0] == 0 && seen[1] > 100 && seen[2] > 100 && seen[3] > 100);
    }

    /* same seed, same sequence */
    sampler_rng a, b;
    sampler_rng_seed(&a, 42);
    sampler_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) CHECK(sampler_sample(logits, V, &p, &a, &sc) == sampler_sample(logits, V, &p, &b, &sc));

    /* parameter validation */
    vllm_sampling_params bad = vllm_sampling_default_params();
    bad.top_p = 0;
    CHECK(vllm_sampling_params_validate(&bad) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "top_p") != NULL);
    bad = vllm_sampling_default_params();
    bad.temperature = -0.5f;
    CHECK(vllm_sampling_params_validate(&bad) == VLLM_ERR_INVALID_ARG);
    bad = vllm_sampling_default_params();
    bad.max_tokens = 0;
    CHECK(vllm_sampling_params_validate(&bad) == VLLM_ERR_INVALID_ARG);
    bad = vllm_sampling_default_params();
    bad.top_k = -5;
    CHECK(vllm_sampling_params_validate(&bad) == VLLM_ERR_INVALID_ARG);
    CHECK_OK(vllm_sampling_params_validate(&p));

    sampler_scratch_free(&sc);
    TEST_END();
}
