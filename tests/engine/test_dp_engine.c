/*
 * test_dp_engine.c: data parallelism behind the thread-safe front (data_parallel_size, vLLM's
 * --data-parallel-size): two replicas of stories260K take requests by load (queued while paused: they
 * alternate), each stream says its replica, and the tokens equal one engine's greedy results; ids stay
 * unique across replicas (a live id is refused, a finished one is free again); abort reaches a request on
 * either replica; per-engine and summed stats; 2 replicas of 2 tensor-parallel ranks give the same tokens;
 * vllm_engine_create and out-of-range sizes refused (the server's per-engine /metrics: test_server_concurrency).
 * Run under ThreadSanitizer by make test-tsan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/async_engine.h"
#include "test.h"

#define STORIES VLLM_SOURCE_DIR "/models/stories260K"
#define N 6

static vllm_engine_options options(int dp) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    o.max_model_len = 128;
    o.data_parallel_size = dp;
    return o;
}

static vllm_sampling_params greedy(int max_tokens) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    return sp;
}

/* the stream's tokens to its end; false on an error chunk or a bad status */
static bool drain(vllm_stream *s, int32_t *ids, size_t cap, size_t *n, vllm_finish_reason *fin) {
    *n = 0;
    for (;;) {
        vllm_stream_chunk c;
        if (vllm_stream_next(s, &c, -1) != VLLM_OK) return false;
        for (size_t i = 0; i < c.num_tokens && *n < cap; i++) ids[(*n)++] = c.token_ids[i];
        const bool last = c.last, err = c.error != NULL;
        *fin = c.finish_reason;
        vllm_stream_chunk_clear(&c);
        if (err) return false;
        if (last) return true;
    }
}

static const char *PROMPTS[N] = {"Once upon a time", "Lily and Tom", "The dog", "One day, a little girl",
                                 "The sun was", "Tim had a red ball"};

static void test_balance_and_tokens(void) {
    /* the reference: one engine, greedy */
    vllm_engine *e = NULL;
    vllm_engine_options o1 = options(1);
    CHECK_OK(vllm_engine_create(STORIES, &o1, &e));
    if (!e) return;
    vllm_sampling_params sp = greedy(12);
    vllm_prompt ps[N];
    for (int i = 0; i < N; i++) ps[i] = (vllm_prompt){.text = PROMPTS[i]};
    vllm_completion *ref = NULL;
    vllm_generate_stats gs;
    CHECK_OK(vllm_generate(e, ps, N, &sp, false, &ref, &gs));
    vllm_engine_free(e);
    if (!ref) return;

    vllm_async_engine *ae = NULL;
    vllm_engine_options o = options(2);
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ae) {
        vllm_completions_free(ref, N);
        return;
    }
    CHECK(vllm_async_engine_num_engines(ae) == 2);
    async_engine_pause(ae, true); /* requests stay live: each add sees the others' load */
    vllm_stream *s[N] = {0};
    int per[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        CHECK_OK(vllm_async_add_request(ae, id, &ps[i], &sp, &s[i]));
        const int eng = vllm_stream_engine(s[i]);
        CHECK_MSG(eng == 0 || eng == 1, "request %d on engine %d", i, eng);
        if (eng == 0 || eng == 1) per[eng]++;
    }
    CHECK_MSG(per[0] == 3 && per[1] == 3, "balanced by load: %d / %d", per[0], per[1]);
    /* a live id is refused whichever replica would take it */
    vllm_stream *dup = NULL;
    CHECK(vllm_async_add_request(ae, "r1", &ps[0], &sp, &dup) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "already in use") != NULL);
    CHECK(dup == NULL);
    /* abort reaches a request on either replica */
    int on1 = -1;
    for (int i = 0; i < N; i++)
        if (vllm_stream_engine(s[i]) == 1) on1 = i;
    char abort_id[16];
    snprintf(abort_id, sizeof abort_id, "r%d", on1);
    CHECK_OK(vllm_async_abort(ae, abort_id));
    CHECK(vllm_async_abort(ae, "nobody") == VLLM_ERR_NOT_FOUND);
    async_engine_pause(ae, false);
    for (int i = 0; i < N; i++) {
        int32_t ids[64];
        size_t n = 0;
        vllm_finish_reason fin = VLLM_FINISH_NONE;
        const bool ok = drain(s[i], ids, 64, &n, &fin);
        if (i == on1) {
            CHECK_MSG(fin == VLLM_FINISH_ABORT, "aborted request %d: finish %d", i, (int)fin);
        } else {
            CHECK_MSG(ok && n == ref[i].num_tokens && !memcmp(ids, ref[i].token_ids, n * sizeof *ids),
                      "request %d on engine %d: %zu tokens, not the one-engine result", i, vllm_stream_engine(s[i]),
                      n);
        }
        vllm_stream_free(s[i]);
    }
    /* finished: the id is free again as soon as its last chunk was read (released before that chunk) */
    int32_t ids[64];
    size_t n = 0;
    vllm_finish_reason fin;
    vllm_sampling_params sp2 = greedy(2);
    for (int k = 0; k < 20; k++) {
        vllm_stream *again = NULL;
        const vllm_status st = vllm_async_add_request(ae, "r1", &ps[1], &sp2, &again);
        CHECK_MSG(st == VLLM_OK, "round %d: the finished id r1 refused: %s", k, vllm_last_error());
        if (st != VLLM_OK) break;
        CHECK(drain(again, ids, 64, &n, &fin) && n == 2 && !memcmp(ids, ref[1].token_ids, 2 * sizeof *ids));
        vllm_stream_free(again);
    }
    /* stats: each replica's, and their sum */
    vllm_engine_stats a, b, sum, none;
    vllm_async_engine_get_engine_stats(ae, 0, &a);
    vllm_async_engine_get_engine_stats(ae, 1, &b);
    vllm_async_engine_get_engine_stats(ae, 2, &none);
    vllm_async_engine_get_stats(ae, &sum);
    CHECK(a.generation_tokens > 0 && b.generation_tokens > 0);
    CHECK(sum.generation_tokens == a.generation_tokens + b.generation_tokens);
    CHECK(sum.steps == a.steps + b.steps);
    CHECK(none.steps == 0 && none.generation_tokens == 0);
    CHECK(async_engine_steps(ae) == sum.steps);
    vllm_engine_info i0, i1, ibad;
    vllm_async_engine_get_engine_info(ae, 0, &i0);
    vllm_async_engine_get_engine_info(ae, 1, &i1);
    vllm_async_engine_get_engine_info(ae, -1, &ibad);
    CHECK(i0.num_kv_blocks > 0 && i1.num_kv_blocks == i0.num_kv_blocks && ibad.num_kv_blocks == 0);
    vllm_async_engine_free(ae);
    vllm_completions_free(ref, N);
}

/* data parallelism over tensor-parallel replicas: 2 replicas of 2 CPU ranks each give one engine's tokens */
static void test_dp_tp(void) {
    vllm_engine *e = NULL;
    vllm_engine_options o1 = options(1);
    CHECK_OK(vllm_engine_create(STORIES, &o1, &e));
    if (!e) return;
    vllm_sampling_params sp = greedy(10);
    vllm_prompt ps[4];
    for (int i = 0; i < 4; i++) ps[i] = (vllm_prompt){.text = PROMPTS[i]};
    vllm_completion *ref = NULL;
    vllm_generate_stats gs;
    CHECK_OK(vllm_generate(e, ps, 4, &sp, false, &ref, &gs));
    vllm_engine_free(e);
    vllm_engine_options o = options(2);
    o.tensor_parallel_size = 2;
    vllm_async_engine *ae = NULL;
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ae || !ref) {
        vllm_async_engine_free(ae);
        vllm_completions_free(ref, 4);
        return;
    }
    vllm_stream *s[4] = {0};
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "tp%d", i);
        CHECK_OK(vllm_async_add_request(ae, id, &ps[i], &sp, &s[i]));
    }
    for (int i = 0; i < 4; i++) {
        int32_t ids[64];
        size_t n = 0;
        vllm_finish_reason fin;
        if (!s[i]) continue;
        CHECK_MSG(drain(s[i], ids, 64, &n, &fin) && n == ref[i].num_tokens &&
                      !memcmp(ids, ref[i].token_ids, n * sizeof *ids),
                  "dp 2 x tp 2, request %d on engine %d: not the one-engine tokens", i, vllm_stream_engine(s[i]));
        vllm_stream_free(s[i]);
    }
    vllm_async_engine_free(ae);
    vllm_completions_free(ref, 4);
}

static void test_refused(void) {
    vllm_engine *e = NULL;
    vllm_engine_options o = options(2);
    CHECK(vllm_engine_create(STORIES, &o, &e) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "data_parallel_size") != NULL);
    CHECK(e == NULL);
    vllm_async_engine *ae = NULL;
    o = options(65);
    CHECK(vllm_async_engine_create(STORIES, &o, &ae) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "data_parallel_size 65") != NULL);
    o = options(-1);
    CHECK(vllm_async_engine_create(STORIES, &o, &ae) == VLLM_ERR_INVALID_ARG);
    CHECK(ae == NULL);
    /* a replica that cannot load: the error names it, nothing leaks */
    o = options(2);
    CHECK(vllm_async_engine_create(VLLM_SOURCE_DIR "/no/such/model", &o, &ae) != VLLM_OK);
    CHECK(ae == NULL);
}

int main(void) {
    test_balance_and_tokens();
    test_dp_tp();
    test_refused();
    TEST_END();
}
