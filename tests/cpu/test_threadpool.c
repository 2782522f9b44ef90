/*
 * test_threadpool.c: the CPU backend's worker pool: every item runs once,
 * thread ids are in range, 10,000 back-to-back dispatches, wake-up after the
 * workers went to sleep, the inline path for small jobs, create/free cycles;
 * tp_set_flush_denormals: a denormal product is 0 in every thread of a job
 * (the caller's share included) and the caller's float mode is back after it.
 * Also run under -fsanitize=thread.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "test.h"

typedef struct job {
    int64_t n;
    int *hits;           /* hits[i]: times item i ran (each item is written by one thread) */
    int64_t *value;      /* value[i] = i * i, to sum afterwards */
    int num_threads;
    atomic_int bad_tid;
    atomic_int calls;
    atomic_int max_tid;
} job;

static void job_fn(void *ctx, int64_t start, int64_t end, int tid) {
    job *j = ctx;
    if (tid < 0 || tid >= j->num_threads || start < 0 || end > j->n || start >= end)
        atomic_fetch_add(&j->bad_tid, 1);
    int m = atomic_load(&j->max_tid);
    while (tid > m && !atomic_compare_exchange_weak(&j->max_tid, &m, tid)) {}
    atomic_fetch_add(&j->calls, 1);
    for (int64_t i = start; i < end; i++) {
        j->hits[i]++;
        j->value[i] = i * i;
    }
}

/* Runs one job of n items and checks it. Returns 1 when all is well. */
static int run_job(tp_pool *p, int64_t n, double cost, int *used_workers) {
    job j = {.n = n, .num_threads = tp_num_threads(p)};
    atomic_init(&j.bad_tid, 0);
    atomic_init(&j.calls, 0);
    atomic_init(&j.max_tid, 0);
    j.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *j.hits);
    j.value = calloc((size_t)(n > 0 ? n : 1), sizeof *j.value);
    if (cost == -2) { /* tp_start, the caller busy meanwhile, tp_wait */
        tp_start(p, n, job_fn, &j);
        struct timespec busy = {0, 20000}; /* the caller does something else meanwhile */
        nanosleep(&busy, NULL);
        tp_wait(p);
    } else if (cost < 0) {
        tp_run(p, n, job_fn, &j);
    } else {
        tp_run_cost(p, n, cost, job_fn, &j);
    }
    int ok = atomic_load(&j.bad_tid) == 0;
    int64_t sum = 0, want = 0;
    for (int64_t i = 0; i < n; i++) {
        ok &= j.hits[i] == 1;
        sum += j.value[i];
        want += i * i;
    }
    ok &= sum == want;
    if (used_workers) *used_workers = atomic_load(&j.max_tid) > 0;
    free(j.hits);
    free(j.value);
    return ok;
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

#if defined(__x86_64__) || defined(__SSE__)
/* Each item: a product that is denormal unless flushed; nonzero counts the items that saw it unflushed. */
static volatile float tiny_a = 1e-30f, tiny_b = 1e-15f;
typedef struct flush_ctx {
    atomic_int nonzero, items;
} flush_ctx;

static void flush_fn(void *vc, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    flush_ctx *c = vc;
    for (int64_t i = i0; i < i1; i++) {
        const float prod = tiny_a * tiny_b; /* 1e-45: a denormal (or 0 when flushed) */
        if (prod != 0.0f) atomic_fetch_add(&c->nonzero, 1);
        atomic_fetch_add(&c->items, 1);
    }
}

static void test_flush_denormals(void) {
    for (int threads = 1; threads <= 3; threads += 2) {
        tp_pool *p = NULL;
        CHECK_OK(tp_create(threads, &p));
        if (!p) continue;
        flush_ctx c = {0};
        tp_run(p, 64, flush_fn, &c);
        CHECK_MSG(atomic_load(&c.nonzero) == 64, "%d threads, default: %d of 64 kept the denormal", threads,
                  atomic_load(&c.nonzero));
        tp_set_flush_denormals(p, true);
        for (int way = 0; way < 3; way++) { /* tp_run, tp_run_cost, tp_start + tp_wait */
            flush_ctx f = {0};
            if (way == 0) tp_run(p, 64, flush_fn, &f);
            else if (way == 1) tp_run_cost(p, 64, 1e9, flush_fn, &f);
            else {
                tp_start(p, 64, flush_fn, &f);
                tp_wait(p);
            }
            CHECK_MSG(atomic_load(&f.items) == 64 && atomic_load(&f.nonzero) == 0,
                      "%d threads, flushing (way %d): %d of %d items kept the denormal", threads, way,
                      atomic_load(&f.nonzero), atomic_load(&f.items));
        }
        const float after = tiny_a * tiny_b; /* the caller's own mode is back */
        CHECK_MSG(after != 0.0f, "the caller's float mode was left flushing");
        tp_set_flush_denormals(p, false);
        flush_ctx k = {0};
        tp_run(p, 64, flush_fn, &k);
        CHECK(atomic_load(&k.nonzero) == 64);
        tp_free(p);
    }
}
#endif

int main(void) {
    tp_pool *p = NULL;
#if defined(__x86_64__) || defined(__SSE__)
    test_flush_denormals(); /* (a no-op elsewhere) */
#endif

    /* bad argument */
    CHECK(tp_create(-1, &p) == VLLM_ERR_INVALID_ARG);
    CHECK(p == NULL);

    /* 0 = all cores */
    CHECK_OK(tp_create(0, &p));
    CHECK(p && tp_num_threads(p) >= 1);
    CHECK(run_job(p, 1000, -1, NULL));
    tp_free(p);
    tp_free(NULL);

    /* 4 threads: sizes around the thread count, 0 and 1 items */
    CHECK_OK(tp_create(4, &p));
    CHECK(tp_num_threads(p) == 4);
    int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 100000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        CHECK_MSG(run_job(p, sizes[i], -1, NULL), "n=%lld", (long long)sizes[i]);

    /* 10,000 back-to-back dispatches of small jobs */
    int all_ok = 1;
    for (int i = 0; i < 10000; i++) all_ok &= run_job(p, 4 + i % 61, -1, NULL);
    CHECK(all_ok);

    /* tp_start + tp_wait: the same jobs in two halves, workers asleep or not */
    all_ok = 1;
    for (int i = 0; i < 2000; i++) all_ok &= run_job(p, i % 70, -2, NULL);
    CHECK(all_ok);
    sleep_ms(3);
    CHECK(run_job(p, 64, -2, NULL));

    /* workers asleep (idle longer than the spin time) still wake up */
    for (int i = 0; i < 5; i++) {
        sleep_ms(3);
        CHECK(run_job(p, 64, -1, NULL));
    }

    /* the work threshold: tiny jobs stay on the caller, big ones spread */
    int used = 1;
    CHECK(run_job(p, 1000, 1.0, &used));
    CHECK(!used);  /* 1000 units < TP_DEFAULT_MIN_WORK */
    CHECK(run_job(p, 1000, 1e6, NULL));
    tp_set_min_work(p, 0);
    CHECK(run_job(p, 2, 1.0, NULL));
    tp_free(p);

    /* single-threaded pool runs everything inline */
    CHECK_OK(tp_create(1, &p));
    used = 1;
    CHECK(run_job(p, 1000, -1, &used));
    CHECK(!used);
    CHECK(run_job(p, 1000, -2, &used));
    CHECK(!used);
    tp_free(p);

    /* create/free cycles, with and without a job in between */
    int counts[] = {1, 2, 3, 8};
    for (int r = 0; r < 20; r++) {
        CHECK_OK(tp_create(counts[r % 4], &p));
        if (r % 2) CHECK(run_job(p, 257, -1, NULL));
        tp_free(p);
    }

    /* two pools at once */
    tp_pool *a = NULL, *b = NULL;
    CHECK_OK(tp_create(3, &a));
    CHECK_OK(tp_create(2, &b));
    for (int i = 0; i < 100; i++) {
        CHECK(run_job(a, 50, -1, NULL));
        CHECK(run_job(b, 50, -1, NULL));
    }
    tp_free(a);
    tp_free(b);
    TEST_END();
}
