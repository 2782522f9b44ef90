/*
 * test_engine_api.c: the request-level engine (add_request / step / abort):
 * streamed tokens and text equal the offline results, abort frees blocks
 * and is reported once, ids are checked, and batch invariance: each
 * prompt's greedy output is the same alone and inside a batch of 32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "test.h"

#define FIX VLLM_SOURCE_DIR "/tests/fixtures/models/qwen3_qknorm"

static vllm_engine *make(const char *dir) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 256;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    return e;
}

static void test_stream_and_abort(void) {
    vllm_engine *e = make(VLLM_SOURCE_DIR "/models/stories260K");
    if (!e) return;
    int total_blocks = e->sched.kv.pool.num_free;
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 40;
    vllm_prompt a = {.text = "Once upon a time"}, b = {.text = "Lily and Tom"};
    CHECK_OK(vllm_engine_add_request(e, "a", &a, &sp));
    CHECK_OK(vllm_engine_add_request(e, "b", &b, &sp));
    CHECK(vllm_engine_add_request(e, "a", &a, &sp) == VLLM_ERR_INVALID_ARG); /* id in use */
    CHECK(vllm_engine_abort_request(e, "nope") == VLLM_ERR_NOT_FOUND);
    char text_a[4096] = "";
    int32_t ids_a[64];
    size_t nids = 0;
    int b_reports_after_abort = 0, steps = 0;
    bool aborted = false;
    while (vllm_engine_has_unfinished(e) && steps < 200) {
        const vllm_request_output *o;
        size_t n;
        CHECK_OK(vllm_engine_step(e, &o, &n));
        steps++;
        for (size_t k = 0; k < n; k++) {
            if (!strcmp(o[k].request_id, "a")) {
                strncat(text_a, o[k].new_text, sizeof text_a - strlen(text_a) - 1);
                for (size_t j = 0; j < o[k].num_new_tokens && nids < 64; j++) ids_a[nids++] = o[k].new_token_ids[j];
                if (o[k].finish_reason != VLLM_FINISH_NONE) CHECK(o[k].finish_reason == VLLM_FINISH_LENGTH);
                CHECK(o[k].completion_tokens == nids);
            } else if (aborted) {
                b_reports_after_abort++;
                CHECK(o[k].finish_reason == VLLM_FINISH_ABORT);
            }
        }
        if (steps == 10) {
            CHECK_OK(vllm_engine_abort_request(e, "b"));
            aborted = true;
            CHECK(vllm_engine_abort_request(e, "b") == VLLM_ERR_NOT_FOUND);
        }
    }
    CHECK(b_reports_after_abort == 1);
    CHECK(nids == 40);
    /* every block is back in the pool */
    CHECK(!vllm_engine_has_unfinished(e));
    const vllm_request_output *o;
    size_t n;
    CHECK_OK(vllm_engine_step(e, &o, &n)); /* reaps */
    CHECK(n == 0);
    CHECK(e->sched.kv.pool.num_free == total_blocks);

    /* the same prompt offline gives the same ids and text */
    vllm_completion *c = NULL;
    CHECK_OK(vllm_generate(e, &a, 1, &sp, false, &c, NULL));
    if (c) {
        CHECK(c[0].num_tokens == nids && !memcmp(c[0].token_ids, ids_a, nids * sizeof(int32_t)));
        CHECK_MSG(c[0].text && !strcmp(c[0].text, text_a), "streamed '%s' vs offline '%s'", text_a,
                  c[0].text ? c[0].text : "(null)");
    }
    vllm_completions_free(c, 1);
    vllm_engine_free(e);
}

static void test_batch_invariance(void) {
    vllm_engine *e = make(FIX);
    if (!e) return;
    enum { N = 32 };
    int32_t *ids[N];
    vllm_prompt ps[N];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        int len = 1 + (i * 37) % 61;
        ids[i] = malloc((size_t)len * sizeof(int32_t));
        for (int j = 0; j < len; j++) {
            seed = seed * 1103515245u + 12345u;
            ids[i][j] = 3 + (int32_t)((seed >> 8) % 500);
        }
        ps[i] = (vllm_prompt){.token_ids = ids[i], .num_token_ids = (size_t)len};
    }
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 10;
    sp.ignore_eos = true;
    vllm_completion *batch = NULL;
    CHECK_OK(vllm_generate(e, ps, N, &sp, false, &batch, NULL));
    for (int i = 0; batch && i < N; i++) {
        vllm_completion *alone = NULL;
        CHECK_OK(vllm_generate(e, &ps[i], 1, &sp, false, &alone, NULL));
        if (!alone) continue;
        CHECK(alone[0].num_tokens == batch[i].num_tokens);
        for (size_t j = 0; j < alone[0].num_tokens && j < batch[i].num_tokens; j++) {
            CHECK_MSG(alone[0].token_ids[j] == batch[i].token_ids[j], "prompt %d token %zu", i, j);
            CHECK_NEAR(alone[0].logprobs[j], batch[i].logprobs[j], 1e-5);
        }
        vllm_completions_free(alone, 1);
    }
    vllm_completions_free(batch, N);
    for (int i = 0; i < N; i++) free(ids[i]);
    vllm_engine_free(e);
}

int main(void) {
    test_stream_and_abort();
    test_batch_invariance();
    TEST_END();
}
