/*
 * threadpool.c: a persistent pthreads worker pool (see threadpool.h).
 *
 * Protocol. The caller publishes a job by writing its fields and then
 * storing job_word = (generation << 16 | threads in the job) under the
 * mutex and broadcasting work_cv. Generation and thread count live in one
 * atomic word so that a worker reads them consistently. Worker i (1-based)
 * takes part when i < threads: it runs its own first chunk of items, claims
 * further chunks from an atomic counter, then stores the generation in its
 * own `done` word (one cache line per worker, so finishing costs no shared
 * read-modify-write) and signals done_cv if the caller went to sleep. The
 * caller never rewrites the job fields before every participant is done,
 * so participants read them plainly. Both sides spin (with a sched_yield
 * now and then, for oversubscribed cores) for up to TP_SPIN_NS before
 * sleeping.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

#define TP_MAX_THREADS 1024     /* fits the 16 bits of job_word's thread count */
#define TP_GEN_MASK ((1ull << 48) - 1)  /* generations wrap within job_word's 48 bits */
#define TP_SPIN_NS 200000       /* how long an idle thread spins before sleeping */
#define TP_YIELD_EVERY 128      /* spin iterations between sched_yield calls */
#define TP_CHUNKS_PER_THREAD 4  /* dynamic scheduling granularity */

#define TP_LINE 64  /* cache line: hot atomics get their own */

typedef struct tp_worker {
    _Alignas(TP_LINE) _Atomic uint64_t done;  /* last generation this worker finished */
    tp_pool *pool;
    int index;  /* 1 .. num_threads - 1; also the tid passed to fn */
} tp_worker;

struct tp_pool {
    int num_threads;  /* including the caller */
    double min_work;
    atomic_bool flush_denormals; /* tp_set_flush_denormals */
    pthread_t *threads;
    tp_worker *workers;
    int started;      /* workers actually started */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers wait here for a new job */
    pthread_cond_t done_cv;  /* the caller waits here for the job to finish */

    /* the current job: written by the caller before publishing job_word */
    bool async_job;   /* tp_start's: the workers take every first chunk, the caller only helps with the rest */
    tp_fn fn;
    void *ctx;
    int64_t n;
    int64_t chunk;

    _Alignas(TP_LINE) _Atomic uint64_t job_word;  /* generation << 16 | threads taking part (caller included) */
    atomic_int stop;
    _Alignas(TP_LINE) _Atomic int64_t next;      /* next unclaimed item */
    _Alignas(TP_LINE) atomic_int caller_sleeping;

    /* tp_start's job until tp_wait: its generation and threads (0: none), or run inline (n items, 1 thread) */
    uint64_t pending_gen;
    int pending_threads;
    bool pending_inline;
};

static inline void tp_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t tp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Runs chunk `tid` of the job, then claims and runs chunks until the items
 * are exhausted (`next` starts past the threads' first chunks). */
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define TP_FTZ 0x8000u /* MXCSR flush-to-zero: results that would be denormal are 0 (DAZ stays off: inputs that are
                              denormal keep their value, e.g. the f16 widening of cpu_f16_to_f32 goes through one) */
/* The thread's float mode for the pool's jobs; returns the mode it had. */
static unsigned tp_float_mode(const tp_pool *p) {
    const unsigned old = _mm_getcsr();
    const unsigned want = atomic_load_explicit(&p->flush_denormals, memory_order_relaxed) ? old | TP_FTZ
                                                                                           : old & ~TP_FTZ;
    if (want != old) _mm_setcsr(want);
    return old;
}
static void tp_float_restore(unsigned old) {
    if (_mm_getcsr() != old) _mm_setcsr(old);
}
#else
static unsigned tp_float_mode(const tp_pool *p) {
    (void)p;
    return 0;
}
static void tp_float_restore(unsigned old) { (void)old; }
#endif

void tp_set_flush_denormals(tp_pool *p, bool on) { atomic_store(&p->flush_denormals, on); }

static void tp_work(tp_pool *p, int tid) {
    int64_t start = !p->async_job ? (int64_t)tid * p->chunk
                    : tid > 0     ? (int64_t)(tid - 1) * p->chunk
                                  : atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
    while (start < p->n) {
        int64_t end = start + p->chunk < p->n ? start + p->chunk : p->n;
        p->fn(p->ctx, start, end, tid);
        if (atomic_load_explicit(&p->next, memory_order_relaxed) >= p->n) break;
        start = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
    }
}

static void *tp_worker_main(void *arg) {
    tp_worker *w = arg;
    tp_pool *p = w->pool;
    uint64_t seen = 0;  /* generation 0 is the "no job yet" state set before workers start */
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        uint64_t word = atomic_load_explicit(&p->job_word, memory_order_acquire);
        if ((word >> 16) == seen && !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            int64_t t0 = tp_now_ns();
            for (int i = 1;; i++) {
                tp_relax();
                word = atomic_load_explicit(&p->job_word, memory_order_acquire);
                if ((word >> 16) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
                if (i % TP_YIELD_EVERY != 0) continue;
                sched_yield();  /* lets a descheduled thread run when cores are oversubscribed */
                if (tp_now_ns() - t0 > TP_SPIN_NS) {
                    pthread_mutex_lock(&p->mu);
                    for (;;) {
                        word = atomic_load_explicit(&p->job_word, memory_order_acquire);
                        if ((word >> 16) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
                            break;
                        pthread_cond_wait(&p->work_cv, &p->mu);
                    }
                    pthread_mutex_unlock(&p->mu);
                    break;
                }
            }
        }
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
        seen = word >> 16;
        if (w->index >= (int)(word & 0xffff)) continue;  /* not needed for this job */

        tp_float_mode(p); /* a worker keeps the pool's mode */
        tp_work(p, w->index);
        /* seq_cst store then load, against the caller's store of caller_sleeping
         * then load of done: one of the two sides sees the other */
        atomic_store(&w->done, seen);
        if (atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int tp_default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

vllm_status tp_create(int num_threads, tp_pool **out) {
    *out = NULL;
    if (num_threads < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu backend: num_threads %d is negative", num_threads);
    if (num_threads == 0) num_threads = tp_default_threads();
    if (num_threads > TP_MAX_THREADS) num_threads = TP_MAX_THREADS;

    size_t pool_bytes = (sizeof(tp_pool) + TP_LINE - 1) / TP_LINE * TP_LINE;
    tp_pool *p = aligned_alloc(TP_LINE, pool_bytes);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "cpu backend: out of memory (thread pool)");
    memset(p, 0, pool_bytes);
    p->num_threads = num_threads;
    p->min_work = TP_DEFAULT_MIN_WORK;
    atomic_init(&p->job_word, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->caller_sleeping, 0);
    if (pthread_mutex_init(&p->mu, NULL)) {
        free(p);
        return vt_error(VLLM_ERR_INTERNAL, "cpu backend: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->work_cv, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return vt_error(VLLM_ERR_INTERNAL, "cpu backend: pthread_cond_init failed");
    }
    if (pthread_cond_init(&p->done_cv, NULL)) {
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return vt_error(VLLM_ERR_INTERNAL, "cpu backend: pthread_cond_init failed");
    }

    int nw = num_threads - 1;
    if (nw > 0) {
        p->threads = calloc((size_t)nw, sizeof *p->threads);
        /* sizeof *p->workers is a multiple of TP_LINE, as aligned_alloc wants */
        p->workers = aligned_alloc(TP_LINE, (size_t)nw * sizeof *p->workers);
        if (p->workers) memset(p->workers, 0, (size_t)nw * sizeof *p->workers);
        if (!p->threads || !p->workers) {
            tp_free(p);
            return vt_error(VLLM_ERR_NO_MEMORY, "cpu backend: out of memory (thread pool)");
        }
        for (int i = 0; i < nw; i++) {
            atomic_init(&p->workers[i].done, 0);
            p->workers[i].pool = p;
            p->workers[i].index = i + 1;
            if (pthread_create(&p->threads[i], NULL, tp_worker_main, &p->workers[i])) {
                tp_free(p);
                return vt_error(VLLM_ERR_INTERNAL, "cpu backend: could not start worker thread %d of %d",
                                i + 1, nw);
            }
            p->started++;
        }
    }
    *out = p;
    return VLLM_OK;
}

void tp_free(tp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, 1, memory_order_relaxed);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int tp_num_threads(const tp_pool *p) { return p->num_threads; }

void tp_set_min_work(tp_pool *p, double min_work) { p->min_work = min_work > 0 ? min_work : 0; }

/* True when workers 1 .. threads - 1 have finished generation gen. */
static bool tp_all_done(tp_pool *p, int threads, uint64_t gen) {
    for (int i = 1; i < threads; i++)
        if (atomic_load(&p->workers[i - 1].done) != gen) return false;
    return true;
}

/* Publishes a job for `threads` threads (caller included, 2 <= threads <= num_threads): the workers start on it;
 * its generation. */
static uint64_t tp_publish(tp_pool *p, int64_t n, int threads, bool async_job, tp_fn fn, void *ctx) {
    int64_t chunk = n / ((int64_t)threads * TP_CHUNKS_PER_THREAD);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk > 0 ? chunk : 1;
    p->async_job = async_job;
    atomic_store_explicit(&p->next, (int64_t)(async_job ? threads - 1 : threads) * p->chunk, memory_order_relaxed);

    pthread_mutex_lock(&p->mu);
    uint64_t gen = ((atomic_load_explicit(&p->job_word, memory_order_relaxed) >> 16) + 1) & TP_GEN_MASK;
    atomic_store_explicit(&p->job_word, gen << 16 | (uint64_t)threads, memory_order_release);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    return gen;
}

/* The caller's share of generation gen, then the wait for the workers, one after the other: spin, then sleep. */
static void tp_join(tp_pool *p, int threads, uint64_t gen) {
    tp_work(p, 0);
    int i = 1;
    int64_t t0 = tp_now_ns();
    for (int spins = 1; i < threads; spins++) {
        if (atomic_load_explicit(&p->workers[i - 1].done, memory_order_acquire) == gen) {
            i++;
            continue;
        }
        tp_relax();
        if (spins % TP_YIELD_EVERY != 0) continue;
        sched_yield();
        if (tp_now_ns() - t0 > TP_SPIN_NS) break;
    }
    if (i == threads) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeping, 1);
    while (!tp_all_done(p, threads, gen)) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_sleeping, 0);
    pthread_mutex_unlock(&p->mu);
}

/* Runs a job on `threads` threads (caller included, 2 <= threads <= num_threads). */
static void tp_dispatch(tp_pool *p, int64_t n, int threads, tp_fn fn, void *ctx) {
    tp_join(p, threads, tp_publish(p, n, threads, false, fn, ctx));
}

void tp_start(tp_pool *p, int64_t n, tp_fn fn, void *ctx) {
    p->pending_threads = 0;
    p->pending_inline = false;
    if (n <= 0) return;
    int threads = p->num_threads;
    if (n < threads) threads = (int)n;
    if (threads <= 1) { /* no worker: the caller runs it all in tp_wait */
        p->fn = fn, p->ctx = ctx, p->n = n;
        p->pending_inline = true;
        return;
    }
    p->pending_gen = tp_publish(p, n, threads, true, fn, ctx);
    p->pending_threads = threads;
}

void tp_wait(tp_pool *p) {
    const unsigned mode = tp_float_mode(p);
    if (p->pending_inline) p->fn(p->ctx, 0, p->n, 0);
    else if (p->pending_threads) tp_join(p, p->pending_threads, p->pending_gen);
    tp_float_restore(mode);
    p->pending_inline = false;
    p->pending_threads = 0;
}

void tp_run(tp_pool *p, int64_t n, tp_fn fn, void *ctx) {
    if (n <= 0) return;
    int threads = p->num_threads;
    if (n < threads) threads = (int)n;
    const unsigned mode = tp_float_mode(p);
    if (threads <= 1) fn(ctx, 0, n, 0);
    else tp_dispatch(p, n, threads, fn, ctx);
    tp_float_restore(mode);
}

void tp_run_cost(tp_pool *p, int64_t n, double item_cost, tp_fn fn, void *ctx) {
    if (n <= 0) return;
    double threads = p->num_threads;
    if ((double)n < threads) threads = (double)n;
    if (p->min_work > 0) {
        double by_work = (double)n * item_cost / p->min_work;
        if (by_work < threads) threads = by_work;
    }
    const unsigned mode = tp_float_mode(p);
    if (threads < 2) fn(ctx, 0, n, 0);
    else tp_dispatch(p, n, (int)threads, fn, ctx);
    tp_float_restore(mode);
}
