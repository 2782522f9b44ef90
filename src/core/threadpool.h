/*
 * threadpool.h: a persistent pthreads worker pool (the CPU backend's ops, the engine's token masks).
 *
 * tp_run splits the items [0, n) across the workers and the calling thread
 * and returns when every item is done. Workers spin briefly after each job
 * (a decode step issues ~60 small ops back to back) and then sleep on a
 * condition variable. Small jobs run inline on the caller without waking
 * anyone.
 *
 * One thread at a time may call tp_run on a pool (the engine thread), and fn
 * must not call tp_run on the same pool.
 */
#ifndef VLLM_CPU_THREADPOOL_H
#define VLLM_CPU_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm.h"

typedef struct tp_pool tp_pool;

/* Processes items [start, end) on thread `tid` (0 = the caller, then
 * 1 .. tp_num_threads - 1). Called several times per job with disjoint
 * ranges; which ranges land on which thread is not deterministic. */
typedef void (*tp_fn)(void *ctx, int64_t start, int64_t end, int tid);

/* Work (in the units of tp_run_cost's item_cost, roughly one multiply-add)
 * below which a thread is not worth waking. */
#define TP_DEFAULT_MIN_WORK 32768.0

/* num_threads counts the caller: num_threads - 1 workers are started.
 * 0 = all cores available to the process. */
vllm_status tp_create(int num_threads, tp_pool **out);
void tp_free(tp_pool *pool);
int tp_num_threads(const tp_pool *pool);

/* Each thread that is woken must get at least min_work of work (jobs with
 * less in total run inline). 0 parallelises every job with n > 1 (tests). */
void tp_set_min_work(tp_pool *pool, double min_work);
/* Flush denormal results to zero (x86's MXCSR FTZ) while the pool's jobs run: in the workers, and in the caller
 * for the duration of each tp_run / tp_run_cost / tp_start..tp_wait (restored after). A float operation that makes a
 * denormal takes a microcode assist of ~100 cycles: one 256-block of tiny activations made every FMA of a quantized
 * dot product with it that slow (a 4-7x slower layer measured). Results then differ only where a value's magnitude
 * would be below 1.2e-38. Denormal inputs keep their value (no DAZ: the CPU's f16 widening passes through one).
 * Off by default; a no-op off x86. */
void tp_set_flush_denormals(tp_pool *pool, bool on);

/* Runs fn over [0, n) on up to all threads, with no work threshold. */
void tp_run(tp_pool *pool, int64_t n, tp_fn fn, void *ctx);
/* Same, but uses only as many threads as n * item_cost / min_work; runs
 * inline when that is one. */
void tp_run_cost(tp_pool *pool, int64_t n, double item_cost, tp_fn fn, void *ctx);
/* tp_run in two halves, so the caller can do something else meanwhile: tp_start hands the items to the workers
 * and returns at once; tp_wait runs the caller's share (thread 0's first chunk and whatever is left) and returns
 * when every item is done. Every tp_start needs its tp_wait before the next job on the pool. */
void tp_start(tp_pool *pool, int64_t n, tp_fn fn, void *ctx);
void tp_wait(tp_pool *pool);

#endif
