/*
 * test_async_engine.c: the thread-safe front (vllm_async_*, vllm_stream_*):
 * 8 producer threads per engine (two engines at once: stories260K with
 * text prompts, llama_gqa with token ids) add requests concurrently and
 * consume their streams, which must equal vllm_generate's greedy results;
 * abort from another thread mid-stream; freeing a stream early; timeouts;
 * freeing the engine with requests in flight; a failed step ending every
 * current request with an error while later requests still run; invalid
 * requests rejected synchronously; n > 1 samples streamed under one id;
 * top and prompt logprobs copied into chunks; text prompts tokenized on
 * the adding thread, not the engine thread. Run under ThreadSanitizer by
 * make test-tsan.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/async_engine.h"
#include "test.h"

#define STORIES VLLM_SOURCE_DIR "/models/stories260K"
#define GQA VLLM_SOURCE_DIR "/tests/fixtures/models/llama_gqa"
#define NTHREADS 8
#define PER_THREAD 3
#define NPROMPTS (NTHREADS * PER_THREAD)

/* CHECK is not thread-safe (shared counters): worker threads record their
 * failures here and the main thread checks them after joining. */
static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_thread_failures = 0;
static void thread_fail(const char *what, const char *id) {
    pthread_mutex_lock(&g_fail_mu);
    g_thread_failures++;
    fprintf(stderr, "thread failure: %s (request %s): %s\n", what, id, vllm_last_error());
    pthread_mutex_unlock(&g_fail_mu);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static vllm_engine_options options(void) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 256;
    o.max_num_seqs = 32;
    return o;
}

static vllm_sampling_params greedy(int max_tokens) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    return sp;
}

/* What a stream delivered, concatenated. */
typedef struct collected {
    int32_t ids[256];
    float lps[256];
    size_t n;
    char text[4096];
    vllm_finish_reason finish;
    size_t completion_tokens, chunks;
    char error[256];
    bool bad;                    /* inconsistent chunks */
} collected;

/* Reads s to its last chunk (-1: forever). */
static vllm_status collect(vllm_stream *s, collected *c, int max_chunks) {
    memset(c, 0, sizeof *c);
    for (;;) {
        vllm_stream_chunk ch;
        vllm_status st = vllm_stream_next(s, &ch, -1);
        if (st != VLLM_OK) return st;
        for (size_t j = 0; j < ch.num_tokens && c->n < 256; j++) {
            c->ids[c->n] = ch.token_ids[j];
            c->lps[c->n++] = ch.logprobs[j];
        }
        if (!ch.text) c->bad = true;
        else strncat(c->text, ch.text, sizeof c->text - strlen(c->text) - 1);
        if (ch.completion_tokens != c->n || ch.index != 0 || ch.last != (ch.finish_reason != VLLM_FINISH_NONE))
            c->bad = true;
        c->completion_tokens = ch.completion_tokens;
        c->finish = ch.finish_reason;
        if (ch.error) snprintf(c->error, sizeof c->error, "%s", ch.error);
        c->chunks++;
        vllm_stream_chunk_clear(&ch);
        if (c->finish != VLLM_FINISH_NONE) return VLLM_OK;
        if (max_chunks > 0 && (int)c->chunks >= max_chunks) return VLLM_OK;
    }
}

/* Reads chunks until at least ntok tokens or the finish (a request paused after a known number of steps: the reader
 * may see its tokens merged into fewer chunks) */
static vllm_status collect_tokens(vllm_stream *s, collected *c, size_t ntok) {
    memset(c, 0, sizeof *c);
    while (c->n < ntok) {
        vllm_stream_chunk ch;
        vllm_status st = vllm_stream_next(s, &ch, -1);
        if (st != VLLM_OK) return st;
        for (size_t j = 0; j < ch.num_tokens && c->n < 256; j++) c->ids[c->n++] = ch.token_ids[j];
        c->finish = ch.finish_reason;
        c->chunks++;
        vllm_stream_chunk_clear(&ch);
        if (c->finish != VLLM_FINISH_NONE) break;
    }
    return VLLM_OK;
}

/* ---- 8 producers per engine, two engines at once ---- */

typedef struct workload {
    const char *name;
    vllm_async_engine *ae;
    vllm_prompt prompts[NPROMPTS];
    vllm_completion *ref;        /* vllm_generate's results */
    vllm_sampling_params sp;
} workload;

typedef struct producer {
    workload *w;
    int t;
    int mismatches;
} producer;

static void *producer_main(void *arg) {
    producer *p = arg;
    workload *w = p->w;
    vllm_stream *streams[PER_THREAD] = {0};
    char id[64];
    for (int k = 0; k < PER_THREAD; k++) {
        int i = p->t + k * NTHREADS;
        snprintf(id, sizeof id, "%s-%d", w->name, i);
        if (vllm_async_add_request(w->ae, id, &w->prompts[i], &w->sp, &streams[k]) != VLLM_OK)
            thread_fail("add", id);
    }
    for (int k = 0; k < PER_THREAD; k++) {
        int i = p->t + k * NTHREADS;
        if (!streams[k]) continue;
        collected c;
        if (collect(streams[k], &c, 0) != VLLM_OK) thread_fail("next", vllm_stream_request_id(streams[k]));
        const vllm_completion *r = &w->ref[i];
        bool same = !c.bad && c.n == r->num_tokens && !memcmp(c.ids, r->token_ids, c.n * sizeof(int32_t)) &&
                    c.finish == r->finish_reason && !strcmp(c.text, r->text ? r->text : "");
        for (size_t j = 0; same && j < c.n; j++) same = c.lps[j] - r->logprobs[j] < 1e-4f && r->logprobs[j] - c.lps[j] < 1e-4f;
        if (!same) {
            p->mismatches++;
            fprintf(stderr, "%s prompt %d: stream (%zu tokens, '%s', %s) != generate (%zu tokens, '%s', %s)\n",
                    w->name, i, c.n, c.text, vllm_finish_reason_str(c.finish), r->num_tokens,
                    r->text ? r->text : "", vllm_finish_reason_str(r->finish_reason));
        }
        vllm_stream_free(streams[k]);
    }
    return NULL;
}

static const char *STORY_PROMPTS[] = {"Once upon a time", "Lily and Tom", "The dog", "One day, a little girl",
                                      "The sun was", "Tim had a big", "She was happy", "They went to the park"};

static bool setup(workload *w, const char *name, const char *dir, bool text) {
    memset(w, 0, sizeof *w);
    w->name = name;
    w->sp = greedy(24);
    static int32_t ids[NPROMPTS][40];
    for (int i = 0; i < NPROMPTS; i++) {
        if (text) {
            w->prompts[i].text = STORY_PROMPTS[i % 8];
        } else {
            int n = 3 + (i * 7) % 37;
            for (int j = 0; j < n; j++) ids[i][j] = (int32_t)(3 + (i * 31 + j * 17) % 500);
            w->prompts[i].token_ids = ids[i];
            w->prompts[i].num_token_ids = (size_t)n;
        }
    }
    vllm_engine_options o = options();
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    if (!e) return false;
    CHECK_OK(vllm_generate(e, w->prompts, NPROMPTS, &w->sp, false, &w->ref, NULL));
    vllm_engine_free(e);
    if (!w->ref) return false;
    CHECK_OK(vllm_async_engine_create(dir, &o, &w->ae));
    return w->ae != NULL;
}

static void test_producers(void) {
    static workload w[2];
    bool ok = setup(&w[0], "story", STORIES, true);
    ok = setup(&w[1], "gqa", GQA, false) && ok;
    if (ok) {
        CHECK(vllm_async_engine_has_tokenizer(w[0].ae) && !vllm_async_engine_has_tokenizer(w[1].ae));
        producer p[2][NTHREADS];
        pthread_t th[2][NTHREADS];
        for (int k = 0; k < 2; k++)
            for (int t = 0; t < NTHREADS; t++) {
                p[k][t] = (producer){.w = &w[k], .t = t};
                CHECK(pthread_create(&th[k][t], NULL, producer_main, &p[k][t]) == 0);
            }
        int mism = 0;
        for (int k = 0; k < 2; k++)
            for (int t = 0; t < NTHREADS; t++) {
                pthread_join(th[k][t], NULL);
                mism += p[k][t].mismatches;
            }
        CHECK(mism == 0);
    }
    for (int k = 0; k < 2; k++) {
        vllm_async_engine_free(w[k].ae);
        vllm_completions_free(w[k].ref, NPROMPTS);
    }
}

/* ---- abort, early free, timeouts ---- */

typedef struct aborter {
    vllm_async_engine *ae;
    const char *id;
    vllm_status st;
} aborter;

static void *abort_main(void *arg) {
    aborter *a = arg;
    a->st = vllm_async_abort(a->ae, a->id);
    return NULL;
}

static void test_abort_free_timeout(void) {
    vllm_engine_options o = options();
    o.max_num_seqs = 1; /* the second request waits for the first */
    vllm_async_engine *ae = NULL;
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ae) return;
    vllm_sampling_params sp = greedy(240);
    sp.ignore_eos = true;
    vllm_prompt p = {.text = "Once upon a time"};

    /* abort from another thread mid-stream; b waits behind a meanwhile. a runs 3 steps (3 tokens), then no step runs
     * until unpaused: a cannot finish meanwhile, however late this thread reads (240 tokens take ~20 ms) */
    vllm_stream *a = NULL, *b = NULL;
    async_engine_pause_after(ae, 3);
    CHECK_OK(vllm_async_add_request(ae, "a", &p, &sp, &a));
    CHECK_OK(vllm_async_add_request(ae, "b", &p, &sp, &b));
    vllm_stream *dup = NULL;
    EXPECT_ERR(vllm_async_add_request(ae, "a", &p, &sp, &dup), VLLM_ERR_INVALID_ARG, "'a'", "in use");
    CHECK(dup == NULL);
    if (!a || !b) {
        vllm_async_engine_free(ae);
        return;
    }
    collected c;
    CHECK_OK(collect_tokens(a, &c, 3));
    CHECK_MSG(c.n == 3 && c.finish == VLLM_FINISH_NONE, "%zu tokens, finish %d", c.n, (int)c.finish);

    /* timeouts: b has nothing yet (a runs alone) */
    vllm_stream_chunk ch;
    CHECK(vllm_stream_next(b, &ch, 0) == VLLM_STREAM_TIMEOUT);
    CHECK(ch.text == NULL && ch.num_tokens == 0);
    double t0 = now_ms();
    CHECK(vllm_stream_next(b, &ch, 30) == VLLM_STREAM_TIMEOUT);
    double waited = now_ms() - t0;
    CHECK_MSG(waited >= 25 && waited < 2000, "waited %.1f ms", waited);

    /* adds are answered while no step runs; a stream freed before any output aborts its request */
    vllm_stream *w = NULL;
    CHECK_OK(vllm_async_add_request(ae, "w", &p, &sp, &w));
    vllm_stream_free(w);

    aborter ab = {ae, "a", VLLM_ERR_INTERNAL};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, abort_main, &ab) == 0);
    pthread_join(th, NULL);
    CHECK_OK(ab.st);
    async_engine_pause_after(ae, 3); /* the abort, then b's first 3 steps */
    collected rest;
    CHECK_OK(collect(a, &rest, 0));
    CHECK(rest.finish == VLLM_FINISH_ABORT && rest.error[0] == '\0');
    CHECK(c.n + rest.n < 240);
    CHECK(vllm_stream_next(a, &ch, 0) == VLLM_ERR_NOT_FOUND); /* after the last chunk */
    CHECK(vllm_stream_next(a, &ch, -1) == VLLM_ERR_NOT_FOUND);
    CHECK(vllm_async_abort(ae, "nope") == VLLM_ERR_NOT_FOUND);
    vllm_stream_free(a);

    /* free b early: its request is aborted and the engine goes idle */
    CHECK_OK(collect_tokens(b, &c, 2));
    CHECK(c.finish == VLLM_FINISH_NONE);
    async_engine_pause(ae, false);
    vllm_stream_free(b);
    int tries = 0;
    while (vllm_async_abort(ae, "b") == VLLM_OK && tries++ < 2000) sleep_ms(1); /* until the engine drops it */
    CHECK(tries < 2000);
    size_t s1 = async_engine_steps(ae);
    sleep_ms(50);
    CHECK(async_engine_steps(ae) == s1); /* idle: nothing runs */

    /* the id is free again and the engine serves new requests */
    sp = greedy(8);
    CHECK_OK(vllm_async_add_request(ae, "b", &p, &sp, &b));
    if (b) {
        CHECK_OK(collect(b, &c, 0));
        CHECK(c.finish == VLLM_FINISH_LENGTH && c.n == 8 && strlen(c.text) > 0);
        vllm_stream_free(b);
    }
    vllm_stream_free(NULL);
    vllm_async_engine_free(ae);
}

/* ---- invalid requests, failed steps, free in flight ---- */

typedef struct consumer {
    vllm_stream *s;
    collected c;
    vllm_status st;
} consumer;

static void *consumer_main(void *arg) {
    consumer *c = arg;
    c->st = collect(c->s, &c->c, 0);
    return NULL;
}

static void test_errors_and_shutdown(void) {
    vllm_async_engine *ae = NULL;
    vllm_engine_options o = options();
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ae) return;
    vllm_stream *s = (vllm_stream *)&o; /* must be reset to NULL on failure */
    vllm_prompt p = {.text = "Once upon a time"};
    vllm_sampling_params bad = greedy(8);
    bad.temperature = -1;
    EXPECT_ERR(vllm_async_add_request(ae, "x", &p, &bad, &s), VLLM_ERR_INVALID_ARG, "temperature", "-1");
    CHECK(s == NULL);
    static int32_t long_ids[300];
    for (int i = 0; i < 300; i++) long_ids[i] = 5;
    vllm_prompt lp = {.token_ids = long_ids, .num_token_ids = 300};
    vllm_sampling_params sp = greedy(8);
    EXPECT_ERR(vllm_async_add_request(ae, "long", &lp, &sp, &s), VLLM_ERR_TOO_LONG, "long", "max_model_len");
    EXPECT_ERR(vllm_async_add_request(ae, "", &p, &sp, &s), VLLM_ERR_INVALID_ARG, "id", "missing");
    EXPECT_ERR(vllm_async_add_request(ae, "np", NULL, &sp, &s), VLLM_ERR_INVALID_ARG, "np", "prompt");
    vllm_sampling_params sd = vllm_async_engine_default_sampling(ae);
    CHECK(sd.max_tokens == 16);

    /* a failed step ends every current request with an error */
    sp = greedy(200);
    sp.ignore_eos = true;
    consumer cs[3];
    pthread_t th[3];
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "f%d", i);
        memset(&cs[i], 0, sizeof cs[i]);
        CHECK_OK(vllm_async_add_request(ae, id, &p, &sp, &cs[i].s));
    }
    async_engine_fail_next_step(ae);
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&th[i], NULL, consumer_main, &cs[i]) == 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_OK(cs[i].st);
        CHECK(cs[i].c.finish == VLLM_FINISH_ABORT);
        CHECK_MSG(strstr(cs[i].c.error, "injected") != NULL, "error '%s'", cs[i].c.error);
        vllm_stream_free(cs[i].s);
    }
    /* later requests still run, with the same ids */
    sp = greedy(12);
    CHECK_OK(vllm_async_add_request(ae, "f0", &p, &sp, &s));
    if (s) {
        collected c;
        CHECK_OK(collect(s, &c, 0));
        CHECK(c.finish == VLLM_FINISH_LENGTH && c.n == 12 && c.error[0] == '\0');
        vllm_stream_free(s);
    }

    /* free with requests in flight: consumers blocked in next get an abort (paused: none can finish first) */
    sp = greedy(240);
    sp.ignore_eos = true;
    async_engine_pause(ae, true);
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "g%d", i);
        memset(&cs[i], 0, sizeof cs[i]);
        CHECK_OK(vllm_async_add_request(ae, id, &p, &sp, &cs[i].s));
        CHECK(pthread_create(&th[i], NULL, consumer_main, &cs[i]) == 0);
    }
    vllm_stream *unread = NULL;
    CHECK_OK(vllm_async_add_request(ae, "unread", &p, &sp, &unread));
    vllm_async_engine_free(ae);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_OK(cs[i].st);
        CHECK(cs[i].c.finish == VLLM_FINISH_ABORT);
        CHECK_MSG(strstr(cs[i].c.error, "freed") != NULL, "error '%s'", cs[i].c.error);
        vllm_stream_free(cs[i].s);
    }
    if (unread) { /* readable after the engine is gone */
        collected c;
        CHECK_OK(collect(unread, &c, 0));
        CHECK(c.finish == VLLM_FINISH_ABORT);
        vllm_stream_free(unread);
    }
}

/* ---- n > 1: samples of one request on one stream ---- */

typedef struct sample_text {
    int32_t ids[64];
    size_t n;
    char text[1024];
    vllm_finish_reason finish;
    int finishes;
} sample_text;

/* Reads a stream of nsamples samples to its last chunk; false on any
 * inconsistency. exact: the whole stream is read (usage equals the ids seen). */
static bool collect_samples(vllm_stream *s, sample_text *out, size_t nsamples, bool exact) {
    memset(out, 0, nsamples * sizeof *out);
    size_t finished = 0;
    for (;;) {
        vllm_stream_chunk ch;
        if (vllm_stream_next(s, &ch, -1) != VLLM_OK) return false;
        bool ok = ch.index < nsamples && ch.text;
        if (ok) {
            sample_text *t = &out[ch.index];
            for (size_t j = 0; j < ch.num_tokens && t->n < 64; j++) t->ids[t->n++] = ch.token_ids[j];
            strncat(t->text, ch.text, sizeof t->text - strlen(t->text) - 1);
            ok = t->finishes == 0 && (exact ? ch.completion_tokens == t->n : ch.completion_tokens >= t->n);
            if (ch.finish_reason != VLLM_FINISH_NONE) {
                t->finish = ch.finish_reason;
                t->finishes++;
                finished++;
            }
            ok = ok && ch.last == (finished == nsamples);
        }
        bool last = ch.last;
        vllm_stream_chunk_clear(&ch);
        if (!ok) return false;
        if (last) return true;
    }
}

static void test_samples(void) {
    vllm_engine_options o = options();
    vllm_sampling_params sp = greedy(16);
    sp.temperature = 0.8f;
    sp.has_seed = true;
    sp.seed = 1234;
    sp.n = 3;
    vllm_prompt p = {.text = "Once upon a time"};
    vllm_engine *e = NULL;
    vllm_completion *ref = NULL;
    CHECK_OK(vllm_engine_create(STORIES, &o, &e));
    if (e) CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &ref, NULL));
    vllm_engine_free(e);
    vllm_async_engine *ae = NULL;
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ref || !ae) {
        vllm_completions_free(ref, 1);
        vllm_async_engine_free(ae);
        return;
    }
    CHECK(ref[0].num_siblings == 2);
    /* prompt and top logprobs are copied into the chunks */
    {
        vllm_sampling_params lp = greedy(4);
        lp.logprobs = 2;
        lp.prompt_logprobs = 2;
        vllm_completion *lref = NULL;
        CHECK_OK(vllm_engine_create(STORIES, &o, &e));
        if (e) CHECK_OK(vllm_generate(e, &p, 1, &lp, false, &lref, NULL));
        vllm_engine_free(e);
        vllm_stream *ls = NULL;
        CHECK_OK(vllm_async_add_request(ae, "lp", &p, &lp, &ls));
        size_t got_tokens = 0, prompt_chunks = 0;
        for (bool last = false; ls && lref && !last;) {
            vllm_stream_chunk ch;
            if (vllm_stream_next(ls, &ch, -1) != VLLM_OK) break;
            if (ch.prompt_logprobs) {
                prompt_chunks++;
                size_t np = lref[0].num_prompt_tokens;
                CHECK(ch.prompt_tokens == np && ch.num_prompt_top_logprobs == 2 && ch.prompt_top_logprob_ids);
                for (size_t i = 1; i < np && ch.prompt_top_logprob_ids; i++) {
                    CHECK_NEAR(ch.prompt_logprobs[i], lref[0].prompt_logprobs[i], 1e-4);
                    CHECK(ch.prompt_top_logprob_ids[2 * i] == lref[0].prompt_top_logprob_ids[2 * i]);
                }
            }
            for (size_t j = 0; j < ch.num_tokens && got_tokens < lref[0].num_tokens; j++, got_tokens++) {
                CHECK(ch.num_top_logprobs == 2 && ch.top_logprob_ids);
                if (ch.top_logprob_ids) {
                    CHECK(ch.top_logprob_ids[2 * j + 1] == lref[0].top_logprob_ids[2 * got_tokens + 1]);
                    CHECK_NEAR(ch.top_logprobs[2 * j + 1], lref[0].top_logprobs[2 * got_tokens + 1], 1e-4);
                }
            }
            last = ch.last;
            vllm_stream_chunk_clear(&ch);
        }
        CHECK(prompt_chunks == 1 && lref && got_tokens == lref[0].num_tokens);
        vllm_stream_free(ls);
        vllm_completions_free(lref, 1);
    }
    vllm_stream *s = NULL;
    sample_text got[3];
    CHECK_OK(vllm_async_add_request(ae, "n3", &p, &sp, &s));
    if (s) {
        CHECK(collect_samples(s, got, 3, true));
        for (size_t i = 0; i < 3 && ref[0].num_siblings == 2; i++) {
            const vllm_completion *r = i == 0 ? &ref[0] : &ref[0].siblings[i - 1];
            CHECK_MSG(got[i].n == r->num_tokens && !memcmp(got[i].ids, r->token_ids, r->num_tokens * sizeof(int32_t)) &&
                          !strcmp(got[i].text, r->text ? r->text : "") && got[i].finish == r->finish_reason,
                      "sample %zu: stream '%s' vs generate '%s'", i, got[i].text, r->text ? r->text : "");
        }
        vllm_stream_free(s);
    }
    /* abort mid-stream: every sample ends, the last chunk once (one step, then paused until the abort is in) */
    sp.max_tokens = 200;
    sp.ignore_eos = true;
    async_engine_pause_after(ae, 1);
    CHECK_OK(vllm_async_add_request(ae, "n3", &p, &sp, &s));
    if (s) {
        vllm_stream_chunk ch;
        CHECK_OK(vllm_stream_next(s, &ch, -1));
        vllm_stream_chunk_clear(&ch);
        CHECK_OK(vllm_async_abort(ae, "n3"));
        async_engine_pause(ae, false);
        CHECK(collect_samples(s, got, 3, false));
        for (int i = 0; i < 3; i++) CHECK(got[i].finish == VLLM_FINISH_ABORT && got[i].finishes == 1);
        vllm_stream_free(s);
    }
    /* freeing the engine ends every sample of a request in flight */
    CHECK_OK(vllm_async_add_request(ae, "n3", &p, &sp, &s));
    vllm_async_engine_free(ae);
    if (s) {
        CHECK(collect_samples(s, got, 3, true));
        for (int i = 0; i < 3; i++) CHECK(got[i].finish != VLLM_FINISH_NONE && got[i].finishes == 1);
        vllm_stream_free(s);
    }
    vllm_completions_free(ref, 1);
}

/* ---- a consumer that reads only after the request finished ---- */

/* Unread deltas of a sample are merged (vLLM's output collector does the
 * same): a reader that falls behind gets the whole output in a few chunks,
 * equal to vllm_generate's, instead of a queue of one chunk per step. */
static void test_slow_consumer(void) {
    vllm_async_engine *ae = NULL;
    vllm_engine_options o = options();
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ae) return;
    vllm_sampling_params sp = greedy(120);
    sp.ignore_eos = true;
    sp.logprobs = 2;
    vllm_prompt p = {.text = "Once upon a time"};
    vllm_stream *s = NULL;
    CHECK_OK(vllm_async_add_request(ae, "slow", &p, &sp, &s));
    vllm_engine *ref_e = NULL;
    vllm_completion *ref = NULL;
    CHECK_OK(vllm_engine_create(STORIES, &o, &ref_e));
    if (ref_e) CHECK_OK(vllm_generate(ref_e, &p, 1, &sp, false, &ref, NULL));
    for (int i = 0; i < 1000 && s; i++) { /* until all 120 tokens were sampled (~10 ms here, more under sanitizers) */
        sleep_ms(10);
        vllm_engine_stats st;
        vllm_async_engine_get_stats(ae, &st);
        if (st.generation_tokens >= 120 && st.num_running == 0) break;
    }
    if (s && ref) {
        collected c;
        CHECK_OK(collect(s, &c, 0));
        CHECK_MSG(c.chunks <= 3, "a reader behind the engine got %zu chunks for 120 tokens", c.chunks);
        CHECK(!c.bad && c.finish == VLLM_FINISH_LENGTH && c.n == 120 && c.completion_tokens == 120);
        CHECK(c.n == ref[0].num_tokens && !memcmp(c.ids, ref[0].token_ids, c.n * sizeof(int32_t)));
        CHECK(!strcmp(c.text, ref[0].text));
        vllm_stream_free(s);
    }
    vllm_completions_free(ref, 1);
    vllm_engine_free(ref_e);
    vllm_async_engine_free(ae);
}

/* ---- tokenization off the engine thread ---- */

static double cpu_s(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A text prompt is tokenized on the thread that adds it, not on the engine
 * thread (which would stall every running request meanwhile): nearly all the
 * CPU time the process spends in an add of a large text prompt is the
 * caller's own. The prompt is too long for max_model_len, so the add fails
 * after tokenizing, with the engine's message. */
static void test_tokenize_on_caller(void) {
    vllm_async_engine *ae = NULL;
    vllm_engine_options o = options();
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    if (!ae) return;
    const char *words = "Once upon a time, there was a little girl named Lily who loved to play outside. ";
    size_t wl = strlen(words), cap = (size_t)256 << 10;
    char *text = malloc(cap + 1);
    size_t len = 0;
    while (len + wl <= cap) memcpy(text + len, words, wl), len += wl;
    text[len] = '\0';
    vllm_prompt p = {.text = text};
    vllm_sampling_params sp = greedy(4);
    vllm_stream *s = NULL;
    double t0 = cpu_s(CLOCK_THREAD_CPUTIME_ID), p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    EXPECT_ERR(vllm_async_add_request(ae, "big", &p, &sp, &s), VLLM_ERR_TOO_LONG, "request big: the prompt has",
               "max_model_len is 256");
    double caller = cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0, process = cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
    CHECK(s == NULL);
    CHECK_MSG(process > 0.005, "the add took %.4f CPU-s: too little to measure", process);
    CHECK_MSG(caller >= 0.7 * process, "caller thread %.4f CPU-s of the process's %.4f: tokenized elsewhere", caller,
              process);
    /* the same for vllm_async_tokenize (the server's /tokenize and prompts) */
    int32_t *big = NULL;
    size_t nbig = 0;
    t0 = cpu_s(CLOCK_THREAD_CPUTIME_ID), p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    CHECK_OK(vllm_async_tokenize(ae, text, true, &big, &nbig));
    caller = cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0, process = cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
    CHECK(nbig > 256);
    CHECK_MSG(caller >= 0.7 * process, "vllm_async_tokenize: caller %.4f CPU-s of %.4f", caller, process);
    free(big);

    /* a text prompt still generates what its token ids do; tokenization errors keep the request id */
    p.text = "Once upon a time";
    CHECK_OK(vllm_async_add_request(ae, "t", &p, &sp, &s));
    collected a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (s) {
        CHECK_OK(collect(s, &a, 0));
        vllm_stream_free(s);
        s = NULL;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(vllm_async_tokenize(ae, "Once upon a time", true, &ids, &n));
    vllm_prompt q = {.token_ids = ids, .num_token_ids = n};
    CHECK_OK(vllm_async_add_request(ae, "i", &q, &sp, &s));
    if (s) {
        CHECK_OK(collect(s, &b, 0));
        vllm_stream_free(s);
        s = NULL;
    }
    CHECK(a.n == 4 && a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof a.ids[0]) && !strcmp(a.text, b.text));
    free(ids);
    p.text = "\xff\xfe";
    EXPECT_ERR(vllm_async_add_request(ae, "utf8", &p, &sp, &s), VLLM_ERR_INVALID_ARG, "request utf8", "");
    free(text);
    vllm_async_engine_free(ae);
}

int main(void) {
    test_tokenize_on_caller();
    test_slow_consumer();
    test_producers();
    test_abort_free_timeout();
    test_errors_and_shutdown();
    test_samples();
    CHECK(g_thread_failures == 0);
    TEST_END();
}
