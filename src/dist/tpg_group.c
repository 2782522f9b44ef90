/* tpg_group.c: a tensor-parallel group of threads: barrier, all-reduce, all-gather, broadcast in shared memory. */
#include "dist/tpg_group.h"

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct tpg_group {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;                 /* ranks at the current barrier */
    uint64_t generation;         /* barriers completed */
    bool aborted;
    char why[256];
    const void *ptr[TPG_MAX_RANKS]; /* each rank's buffer in the current collective */
};

vllm_status tpg_create(int size, tpg_group **out) {
    *out = NULL;
    if (size < 1 || size > TPG_MAX_RANKS)
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel group of %d ranks: 1 to %d", size, TPG_MAX_RANKS);
    tpg_group *g = calloc(1, sizeof *g);
    if (!g) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (tensor-parallel group)");
    g->size = size;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return VLLM_OK;
}

void tpg_free(tpg_group *g) {
    if (!g) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int tpg_size(const tpg_group *g) { return g->size; }

void tpg_abort(tpg_group *g, const char *why) {
    pthread_mutex_lock(&g->mu);
    if (!g->aborted) {
        g->aborted = true;
        snprintf(g->why, sizeof g->why, "%s", why ? why : "a rank gave up");
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void tpg_reset(tpg_group *g) {
    pthread_mutex_lock(&g->mu);
    g->aborted = false;
    g->why[0] = '\0';
    g->arrived = 0;
    g->generation++; /* a barrier's waiters (none: no rank is inside) would see a new generation */
    pthread_mutex_unlock(&g->mu);
}

/* The group's abort as this rank's error (called with the lock held). */
static vllm_status aborted_err(const tpg_group *g, int rank) {
    return vt_error(VLLM_ERR_BACKEND, "tensor-parallel rank %d: the group was aborted: %s", rank, g->why);
}

/* Every rank arrives, then all go on (the mutex orders each rank's writes before the others' reads). */
static vllm_status wait_all(tpg_group *g, int rank) {
    pthread_mutex_lock(&g->mu);
    vllm_status st = VLLM_OK;
    if (g->aborted) {
        st = aborted_err(g, rank);
    } else {
        const uint64_t gen = g->generation;
        if (++g->arrived == g->size) {
            g->arrived = 0;
            g->generation++;
            pthread_cond_broadcast(&g->cv);
        } else {
            while (gen == g->generation && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
            if (gen == g->generation) st = aborted_err(g, rank);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

static vllm_status check_rank(tpg_group *g, int rank) {
    if (rank >= 0 && rank < g->size) return VLLM_OK;
    tpg_abort(g, "a collective was called with a rank outside the group");
    return vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel rank %d outside a group of %d", rank, g->size);
}

vllm_status tpg_barrier(tpg_group *g, int rank) {
    vllm_status st = check_rank(g, rank);
    return st ? st : wait_all(g, rank);
}

/* Publishes this rank's buffer for the collective and waits for the others'. */
static vllm_status publish(tpg_group *g, int rank, const void *p) {
    vllm_status st = check_rank(g, rank);
    if (st) return st;
    g->ptr[rank] = p; /* read by the others only after the barrier below */
    return wait_all(g, rank);
}

vllm_status tpg_all_reduce_f32(tpg_group *g, int rank, float *x, int64_t n) {
    vllm_status st = publish(g, rank, x);
    if (st) return st;
    if (g->size == 1 || n <= 0) return VLLM_OK; /* every rank has the same n: nothing was read */
    /* reduce-scatter: rank r sums its chunk over every rank (rank order) into a private copy ... */
    const int64_t per = (n + g->size - 1) / g->size, lo = rank * per < n ? rank * per : n,
                  hi = lo + per < n ? lo + per : n;
    float *sum = malloc((size_t)(hi > lo ? hi - lo : 1) * sizeof *sum);
    if (!sum) {
        tpg_abort(g, "out of memory in an all-reduce");
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (tensor-parallel all-reduce)");
    }
    for (int64_t i = lo; i < hi; i++) {
        float s = ((const float *)g->ptr[0])[i];
        for (int k = 1; k < g->size; k++) s += ((const float *)g->ptr[k])[i];
        sum[i - lo] = s;
    }
    /* ... then, once every rank has read every buffer, writes it into every rank's buffer (all-gather) */
    st = wait_all(g, rank);
    if (st == VLLM_OK)
        for (int k = 0; k < g->size; k++)
            if (hi > lo) memcpy((float *)g->ptr[k] + lo, sum, (size_t)(hi - lo) * sizeof *sum);
    free(sum);
    return st ? st : wait_all(g, rank); /* the buffers are whole before anyone returns */
}

vllm_status tpg_all_gather(tpg_group *g, int rank, const void *x, size_t bytes, void *out) {
    vllm_status st = publish(g, rank, x);
    if (st) return st;
    for (int k = 0; k < g->size; k++)
        if (bytes) memcpy((char *)out + (size_t)k * bytes, g->ptr[k], bytes);
    return wait_all(g, rank); /* the sources stay until every rank has copied them */
}

vllm_status tpg_broadcast(tpg_group *g, int rank, void *x, size_t bytes, int root) {
    if (root < 0 || root >= g->size) {
        tpg_abort(g, "a broadcast named a root outside the group");
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel broadcast root %d outside a group of %d", root, g->size);
    }
    vllm_status st = publish(g, rank, x);
    if (st) return st;
    if (rank != root && bytes) memcpy(x, g->ptr[root], bytes);
    return wait_all(g, rank);
}
