/*
 * test_parallel_sampling.c: n > 1 (vLLM's parallel sampling: n child
 * requests sharing the prompt, seed + i) and prompt_logprobs, end to end:
 * seeded samples are reproducible and differ, children of a greedy request
 * are identical, streamed outputs carry the sample index, aborting the
 * request aborts every sample and frees its blocks; prompt logprobs equal
 * the logprobs greedy decoding reported for the same tokens (teacher
 * forcing), with and without chunked prefill, never from the prefix cache,
 * on stories260K and every fixture model.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "test.h"

#define STORIES VLLM_SOURCE_DIR "/models/stories260K"

static vllm_engine *make(const char *dir, int max_batched) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 256;
    if (max_batched) o.max_num_batched_tokens = max_batched;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    return e;
}

static bool same_tokens(const vllm_completion *a, const vllm_completion *b) {
    return a->num_tokens == b->num_tokens && !memcmp(a->token_ids, b->token_ids, a->num_tokens * sizeof(int32_t));
}

/* sample i of a completion: the entry itself for 0, else its siblings */
static const vllm_completion *sample(const vllm_completion *c, size_t i) { return i ? &c->siblings[i - 1] : c; }

static void test_n_seeded(vllm_engine *e) {
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.n = 4;
    sp.has_seed = true;
    sp.seed = 1234;
    sp.max_tokens = 24;
    sp.ignore_eos = true;
    vllm_completion *a = NULL, *b = NULL, *one = NULL;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &a, NULL));
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &b, NULL));
    if (!a || !b) goto done;
    CHECK(a->num_siblings == 3 && b->num_siblings == 3 && a->siblings);
    for (size_t i = 0; i < 4; i++) {
        CHECK(sample(a, i)->index == i);
        CHECK_MSG(same_tokens(sample(a, i), sample(b, i)), "sample %zu not reproducible", i);
        CHECK(sample(a, i)->num_tokens == 24 && sample(a, i)->text != NULL);
        CHECK(sample(a, i)->prompt_logprobs == NULL && (i == 0 || sample(a, i)->siblings == NULL));
        for (size_t j = 0; j < i; j++) CHECK_MSG(!same_tokens(sample(a, i), sample(a, j)), "samples %zu and %zu equal", i, j);
    }
    /* sample i is the single request with seed + i (vLLM's child params) */
    sp.n = 1;
    sp.seed = 1234 + 2;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &one, NULL));
    if (one) CHECK(same_tokens(one, sample(a, 2)) && one->num_siblings == 0 && one->index == 0);
done:
    vllm_completions_free(a, 1);
    vllm_completions_free(b, 1);
    vllm_completions_free(one, 1);
}

/* vLLM refuses n > 1 with temperature 0 ("n must be 1 when using greedy
 * sampling"); top_k = 1 samples greedily all the same: every child of such a
 * request equals the greedy output. */
static void test_n_greedy_and_mixed(vllm_engine *e) {
    vllm_prompt ps[3] = {{.text = "Once upon a time"}, {.text = "Lily and Tom"}, {.text = "The dog"}};
    vllm_sampling_params sp[3];
    for (int i = 0; i < 3; i++) {
        sp[i] = vllm_sampling_default_params();
        sp[i].top_k = 1;
        sp[i].max_tokens = 20 + i;
        sp[i].n = i + 1; /* 1, 2, 3 samples */
    }
    sp[1].temperature = 0;
    CHECK(vllm_sampling_params_validate(&sp[1]) == VLLM_ERR_INVALID_ARG);
    sp[1].temperature = 1;
    vllm_completion *c = NULL, *alone = NULL;
    vllm_generate_stats st;
    CHECK_OK(vllm_generate(e, ps, 3, sp, true, &c, &st));
    if (!c) return;
    CHECK(st.generated_tokens == 20 * 1 + 21 * 2 + 22 * 3 || c[0].finish_reason == VLLM_FINISH_STOP);
    for (int i = 0; i < 3; i++) {
        CHECK(c[i].num_siblings == (size_t)i);
        vllm_sampling_params s1 = sp[i];
        s1.n = 1;
        s1.temperature = 0;
        s1.top_k = 0;
        CHECK_OK(vllm_generate(e, &ps[i], 1, &s1, false, &alone, NULL));
        for (int j = 0; alone && j <= i; j++) {
            const vllm_completion *s = sample(&c[i], (size_t)j);
            CHECK_MSG(same_tokens(s, alone), "prompt %d sample %d differs from greedy", i, j);
            CHECK(s->text && alone->text && !strcmp(s->text, alone->text));
            CHECK(s->num_prompt_tokens == alone->num_prompt_tokens &&
                  !memcmp(s->prompt_token_ids, alone->prompt_token_ids, s->num_prompt_tokens * sizeof(int32_t)));
        }
        vllm_completions_free(alone, 1);
        alone = NULL;
    }
    vllm_completions_free(c, 3);
}

/* Streams a request with n = 3: each output names its sample; the samples
 * equal vllm_generate's; the prompt's full blocks are shared (cached). */
static void test_n_stream_and_abort(vllm_engine *e) {
    int total = sched_num_free_blocks(&e->sched);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = 5 + (i * 13) % 400;
    vllm_prompt p = {.token_ids = prompt, .num_token_ids = 40};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.n = 3;
    sp.has_seed = true;
    sp.seed = 7;
    sp.max_tokens = 16;
    sp.ignore_eos = true;
    vllm_completion *ref = NULL;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &ref, NULL));
    if (!ref) return;
    CHECK_OK(vllm_engine_add_request(e, "r", &p, &sp));
    CHECK(vllm_engine_add_request(e, "r", &p, &sp) == VLLM_ERR_INVALID_ARG); /* id in use by all samples */
    int32_t got[3][32];
    size_t ngot[3] = {0, 0, 0}, cached[3] = {0, 0, 0};
    int finished = 0;
    while (vllm_engine_has_unfinished(e)) {
        const vllm_request_output *o;
        size_t n;
        CHECK_OK(vllm_engine_step(e, &o, &n));
        for (size_t k = 0; k < n; k++) {
            CHECK(!strcmp(o[k].request_id, "r") && o[k].index < 3 && o[k].prompt_logprobs == NULL);
            if (o[k].index >= 3) continue;
            size_t i = o[k].index;
            for (size_t j = 0; j < o[k].num_new_tokens && ngot[i] < 32; j++) got[i][ngot[i]++] = o[k].new_token_ids[j];
            cached[i] = o[k].cached_prompt_tokens;
            finished += o[k].finish_reason != VLLM_FINISH_NONE;
        }
    }
    CHECK(finished == 3);
    for (size_t i = 0; i < 3; i++) {
        const vllm_completion *s = sample(ref, i);
        CHECK(ngot[i] == s->num_tokens && !memcmp(got[i], s->token_ids, ngot[i] * sizeof(int32_t)));
    }
    /* the prompt (2 full blocks of 16) was cached by the reference run */
    CHECK_MSG(cached[0] == 32 && cached[1] == 32 && cached[2] == 32, "cached %zu %zu %zu", cached[0], cached[1],
              cached[2]);
    CHECK(sched_num_free_blocks(&e->sched) == total);

    /* abort by the request's id: every unfinished sample, reported once */
    sp.max_tokens = 100;
    CHECK_OK(vllm_engine_add_request(e, "x", &p, &sp));
    int aborted = 0, steps = 0, after = 0;
    bool abort_called = false;
    while (vllm_engine_has_unfinished(e) && steps < 300) {
        const vllm_request_output *o;
        size_t n;
        CHECK_OK(vllm_engine_step(e, &o, &n));
        steps++;
        for (size_t k = 0; k < n; k++) {
            if (abort_called) after++;
            if (o[k].finish_reason == VLLM_FINISH_ABORT) aborted++;
        }
        if (steps == 3) {
            CHECK_OK(vllm_engine_abort_request(e, "x"));
            abort_called = true;
        }
    }
    CHECK_MSG(aborted == 3 && after == 3, "aborted %d, reports after %d", aborted, after);
    CHECK(vllm_engine_abort_request(e, "x") == VLLM_ERR_NOT_FOUND);
    CHECK(sched_num_free_blocks(&e->sched) == total);
    vllm_completions_free(ref, 1);

    /* a bad n is refused without queuing anything */
    sp.n = 0;
    CHECK(vllm_engine_add_request(e, "bad", &p, &sp) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "n must be") != NULL);
    sp.n = 1 << 20;
    CHECK(vllm_engine_add_request(e, "bad", &p, &sp) == VLLM_ERR_INVALID_ARG);
    CHECK(!vllm_engine_has_unfinished(e));
}

/* Teacher forcing: generate greedily with logprobs, then score prompt +
 * generated as one prompt: its prompt logprobs from position |prompt| on
 * equal the generated logprobs (and the top-k). Also through the step API
 * (delivered once, with the first token) and twice on one engine (the
 * second run may not read the prefix cache). */
static void check_teacher_forcing(const char *dir, int max_batched) {
    vllm_engine *e = make(dir, max_batched);
    if (!e) return;
    int V = e->cfg->vocab_size;
    int32_t prompt[11];
    for (int i = 0; i < 11; i++) prompt[i] = 1 + (i * 37 + 5) % (V - 1);
    vllm_prompt p = {.token_ids = prompt, .num_token_ids = 11};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 30;
    sp.ignore_eos = true;
    sp.logprobs = 3;
    vllm_completion *g = NULL;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &g, NULL));
    if (!g) {
        vllm_engine_free(e);
        return;
    }
    size_t np = 11 + g->num_tokens;
    int32_t *all = malloc(np * sizeof *all);
    memcpy(all, prompt, sizeof prompt);
    memcpy(all + 11, g->token_ids, g->num_tokens * sizeof(int32_t));
    vllm_prompt tf = {.token_ids = all, .num_token_ids = np};
    vllm_sampling_params sq = vllm_sampling_default_params();
    sq.temperature = 0;
    sq.max_tokens = 1;
    sq.prompt_logprobs = 3;
    for (int run = 0; run < 2; run++) {
        vllm_completion *c = NULL;
        CHECK_OK(vllm_generate(e, &tf, 1, &sq, false, &c, NULL));
        if (!c) break;
        CHECK(c->prompt_logprobs && c->num_prompt_top_logprobs == 3 && c->prompt_top_logprob_ids);
        if (!c->prompt_logprobs || !c->prompt_top_logprob_ids) {
            vllm_completions_free(c, 1);
            break;
        }
        CHECK(isnan(c->prompt_logprobs[0]) && c->prompt_top_logprob_ids[0] == -1);
        for (size_t i = 1; i < np; i++) CHECK(c->prompt_logprobs[i] <= 0.0f && !isnan(c->prompt_logprobs[i]));
        for (size_t i = 0; i < g->num_tokens; i++) {
            size_t at = 11 + i;
            CHECK_NEAR(c->prompt_logprobs[at], g->logprobs[i], 1e-4);
            /* greedy: the generated token is the top one */
            CHECK_NEAR(c->prompt_top_logprobs[at * 3], g->top_logprobs[i * 3], 1e-4);
            for (int j = 0; j < 3; j++) CHECK_NEAR(c->prompt_top_logprobs[at * 3 + j], g->top_logprobs[i * 3 + j], 1e-4);
            CHECK(c->prompt_top_logprob_ids[at * 3] == g->top_logprob_ids[i * 3]);
        }
        /* the token after the scored text is the greedy continuation's next token */
        vllm_completions_free(c, 1);
    }
    /* step API: prompt logprobs once, with the first token; no cache hit although the prompt is cached */
    sq.prompt_logprobs = 0;
    CHECK_OK(vllm_engine_add_request(e, "tf", &tf, &sq));
    int seen = 0;
    while (vllm_engine_has_unfinished(e)) {
        const vllm_request_output *o;
        size_t n;
        CHECK_OK(vllm_engine_step(e, &o, &n));
        for (size_t k = 0; k < n; k++) {
            CHECK(o[k].cached_prompt_tokens == 0);
            if (!o[k].prompt_logprobs) continue;
            seen++;
            CHECK(o[k].num_new_tokens == 1 && o[k].num_prompt_top_logprobs == 0 && !o[k].prompt_top_logprob_ids);
            for (size_t i = 0; i < g->num_tokens; i++) CHECK_NEAR(o[k].prompt_logprobs[11 + i], g->logprobs[i], 1e-4);
        }
    }
    CHECK(seen == 1);
    /* n = 2 with prompt logprobs: sample 0 carries them */
    sq.n = 2;
    sq.temperature = 1;
    sq.top_k = 1;
    vllm_completion *c2 = NULL;
    CHECK_OK(vllm_generate(e, &tf, 1, &sq, false, &c2, NULL));
    if (c2) {
        CHECK(c2->prompt_logprobs && c2->num_siblings == 1 && !c2->siblings[0].prompt_logprobs);
        for (size_t i = 0; c2->prompt_logprobs && i < g->num_tokens; i++)
            CHECK_NEAR(c2->prompt_logprobs[11 + i], g->logprobs[i], 1e-4);
        CHECK(same_tokens(c2, &c2->siblings[0]));
    }
    vllm_completions_free(c2, 1);
    free(all);
    vllm_completions_free(g, 1);
    vllm_engine_free(e);
}

/* A KV pool of 8 blocks that three 71-token sequences must share, in
 * chunks of 7: requests are preempted (some mid-prompt) and recomputed, and
 * their prompt logprobs still equal those of a roomy engine. */
static void test_prompt_logprobs_preemption(void) {
    int32_t prompt[41];
    for (int i = 0; i < 41; i++) prompt[i] = 1 + (i * 29 + 3) % 500;
    vllm_prompt ps[3];
    for (int i = 0; i < 3; i++) ps[i] = (vllm_prompt){.token_ids = prompt + i, .num_token_ids = (size_t)(41 - i)};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 30;
    sp.ignore_eos = true;
    sp.prompt_logprobs = 2;
    vllm_engine *big = make(STORIES, 0);
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 128;
    o.num_kv_blocks = 8;
    o.max_num_batched_tokens = 7;
    vllm_engine *tiny = NULL;
    CHECK_OK(vllm_engine_create(STORIES, &o, &tiny));
    vllm_completion *ref = NULL, *c = NULL;
    vllm_generate_stats st;
    if (big) CHECK_OK(vllm_generate(big, ps, 3, &sp, false, &ref, NULL));
    if (tiny) CHECK_OK(vllm_generate(tiny, ps, 3, &sp, false, &c, &st));
    if (ref && c) {
        CHECK_MSG(st.preemptions > 0, "no preemption");
        for (int i = 0; i < 3; i++) {
            CHECK(same_tokens(&ref[i], &c[i]) && c[i].prompt_logprobs && c[i].num_prompt_top_logprobs == 2);
            for (size_t j = 1; c[i].prompt_logprobs && j < c[i].num_prompt_tokens; j++) {
                CHECK_NEAR(c[i].prompt_logprobs[j], ref[i].prompt_logprobs[j], 1e-4);
                CHECK(c[i].prompt_top_logprob_ids[2 * j] == ref[i].prompt_top_logprob_ids[2 * j]);
            }
        }
        CHECK(sched_num_free_blocks(&tiny->sched) == 8);
    }
    vllm_completions_free(ref, 3);
    vllm_completions_free(c, 3);
    vllm_engine_free(big);
    vllm_engine_free(tiny);
}

int main(void) {
    vllm_engine *e = make(STORIES, 0);
    if (!e) TEST_END();
    test_n_seeded(e);
    test_n_greedy_and_mixed(e);
    test_n_stream_and_abort(e);
    vllm_engine_free(e);

    test_prompt_logprobs_preemption();
    check_teacher_forcing(STORIES, 0);
    check_teacher_forcing(STORIES, 7); /* chunked prefill: the 41-token prompt over 6 steps */
    const char *root = VLLM_SOURCE_DIR "/tests/fixtures/models";
    DIR *d = opendir(root);
    CHECK(d != NULL);
    struct dirent *de;
    int models = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, de->d_name);
        check_teacher_forcing(dir, 0);
        check_teacher_forcing(dir, 5);
        models++;
    }
    if (d) closedir(d);
    CHECK(models >= 1);
    TEST_END();
}
