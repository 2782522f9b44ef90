/*
 * test_sampling_engine.c: sampling parameters end to end on the bundled
 * model: stop strings across token boundaries (with and without the string
 * in the output, streamed with hold-back), stop_token_ids, min_tokens,
 * top-k logprobs, logit_bias, allowed_token_ids, bad_words, penalties, and
 * prefix caching reporting cached prompt tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vllm.h"

static vllm_engine *g_e;

static vllm_completion *gen(const vllm_sampling_params *sp) {
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    vllm_completion *c = NULL;
    CHECK_OK(vllm_generate(g_e, &p, 1, sp, false, &c, NULL));
    return c;
}

static vllm_sampling_params greedy(int n) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = n;
    return sp;
}

int main(void) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    CHECK_OK(vllm_engine_create(VLLM_SOURCE_DIR "/models/stories260K", &o, &g_e));
    if (!g_e) TEST_END();
    vllm_sampling_params sp = greedy(60);
    vllm_completion *base = gen(&sp);
    if (!base) TEST_END();
    const char *T = base->text;
    CHECK(strstr(T, "girl named") != NULL);

    /* stop string spanning tokens */
    const char *stops[] = {"girl named", "zzz"};
    sp.stop = stops;
    sp.num_stop = 2;
    vllm_completion *c = gen(&sp);
    size_t at = (size_t)(strstr(T, "girl named") - T);
    CHECK(c && c->finish_reason == VLLM_FINISH_STOP && c->stop_reason && !strcmp(c->stop_reason, "girl named"));
    CHECK(c && strlen(c->text) == at && !strncmp(c->text, T, at));
    vllm_completions_free(c, 1);
    sp.include_stop_str_in_output = true;
    c = gen(&sp);
    CHECK(c && strlen(c->text) == at + strlen("girl named") && !strncmp(c->text, T, at + 10));
    vllm_completions_free(c, 1);

    /* streamed with hold-back: pieces join to the final text, the stop string never leaks */
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    sp.include_stop_str_in_output = false;
    CHECK_OK(vllm_engine_add_request(g_e, "s", &p, &sp));
    char joined[4096] = "";
    while (vllm_engine_has_unfinished(g_e)) {
        const vllm_request_output *out;
        size_t n;
        CHECK_OK(vllm_engine_step(g_e, &out, &n));
        for (size_t k = 0; k < n; k++) strncat(joined, out[k].new_text, sizeof joined - strlen(joined) - 1);
    }
    CHECK_MSG(strlen(joined) == at && !strncmp(joined, T, at), "streamed '%s'", joined);
    sp.stop = NULL;
    sp.num_stop = 0;

    /* stop_token_ids: the 6th generated token ends generation there */
    int32_t x = base->token_ids[5];
    size_t first = 0;
    while (base->token_ids[first] != x) first++;
    sp.stop_token_ids = &x;
    sp.num_stop_token_ids = 1;
    c = gen(&sp);
    CHECK(c && c->num_tokens == first + 1 && c->finish_reason == VLLM_FINISH_STOP);
    vllm_completions_free(c, 1);
    /* min_tokens holds the stop token back */
    sp.min_tokens = (int)first + 2;
    c = gen(&sp);
    CHECK(c && c->num_tokens > first + 1);
    if (c) CHECK(c->token_ids[first] != x);
    vllm_completions_free(c, 1);
    sp.min_tokens = 0;
    sp.stop_token_ids = NULL;
    sp.num_stop_token_ids = 0;

    /* top-k logprobs: greedy token first, sorted, equal to its raw logprob */
    sp.logprobs = 5;
    c = gen(&sp);
    CHECK(c && c->num_top_logprobs == 5 && c->top_logprob_ids);
    for (size_t i = 0; c && c->top_logprob_ids && i < c->num_tokens; i++) {
        CHECK(c->top_logprob_ids[i * 5] == c->token_ids[i]);
        CHECK_NEAR(c->top_logprobs[i * 5], c->logprobs[i], 1e-6);
        for (int j = 1; j < 5; j++) CHECK(c->top_logprobs[i * 5 + j] <= c->top_logprobs[i * 5 + j - 1]);
    }
    vllm_completions_free(c, 1);
    sp.logprobs = -1;

    /* logit_bias forces a token; allowed_token_ids restricts to a set */
    int32_t forced = 300;
    float bias = 100.0f;
    sp.logit_bias_ids = &forced;
    sp.logit_bias_values = &bias;
    sp.num_logit_bias = 1;
    c = gen(&sp);
    CHECK(c && c->token_ids[0] == 300);
    vllm_completions_free(c, 1);
    sp.num_logit_bias = 0;
    int32_t allowed[2] = {base->token_ids[0], 300};
    sp.allowed_token_ids = allowed;
    sp.num_allowed_token_ids = 2;
    c = gen(&sp);
    for (size_t i = 0; c && i < c->num_tokens; i++) CHECK(c->token_ids[i] == allowed[0] || c->token_ids[i] == 300);
    vllm_completions_free(c, 1);
    sp.num_allowed_token_ids = 0;
    sp.allowed_token_ids = NULL;

    /* bad_words: "Lily" never appears */
    CHECK(strstr(T, "Lily") != NULL);
    const char *bad[] = {"Lily"};
    sp.bad_words = bad;
    sp.num_bad_words = 1;
    c = gen(&sp);
    CHECK_MSG(c && !strstr(c->text, "Lily"), "bad word generated: %s", c ? c->text : "");
    vllm_completions_free(c, 1);
    sp.num_bad_words = 0;
    sp.bad_words = NULL;

    /* a strong repetition penalty changes the greedy story */
    sp.repetition_penalty = 2.0f;
    c = gen(&sp);
    CHECK(c && strcmp(c->text, T) != 0);
    vllm_completions_free(c, 1);
    sp.repetition_penalty = 1.0f;

    /* prefix caching: a second prompt sharing 64 tokens reuses 4 blocks */
    int32_t a[70], b[70];
    for (int i = 0; i < 70; i++) a[i] = b[i] = 3 + (i * 7) % 500;
    for (int i = 64; i < 70; i++) b[i] = 400 + i;
    vllm_prompt pa = {.token_ids = a, .num_token_ids = 70}, pb = {.token_ids = b, .num_token_ids = 70};
    sp = greedy(4);
    c = NULL;
    CHECK_OK(vllm_generate(g_e, &pa, 1, &sp, false, &c, NULL));
    vllm_completions_free(c, 1);
    CHECK_OK(vllm_engine_add_request(g_e, "b", &pb, &sp));
    size_t cached = 0;
    while (vllm_engine_has_unfinished(g_e)) {
        const vllm_request_output *out;
        size_t n;
        CHECK_OK(vllm_engine_step(g_e, &out, &n));
        for (size_t k = 0; k < n; k++) cached = out[k].cached_prompt_tokens;
    }
    CHECK_MSG(cached == 64, "cached prompt tokens %zu", cached);

    /* invalid parameters are refused with the field named */
    sp = greedy(4);
    int32_t bad_id = 100000;
    sp.stop_token_ids = &bad_id;
    sp.num_stop_token_ids = 1;
    CHECK(vllm_engine_add_request(g_e, "x", &p, &sp) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "stop_token_ids") != NULL);

    vllm_completions_free(base, 1);
    vllm_engine_free(g_e);
    TEST_END();
}
