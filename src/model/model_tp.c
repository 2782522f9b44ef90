/* model_tp.c: a tensor-parallel model's worker ranks: threads that load ranks 1 .. N-1 and run each call with rank 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "dist/tpg_group.h"
#include "model/model_internal.h"

typedef enum { TPW_CACHE_CREATE = 1, TPW_CACHE_FREE, TPW_RESERVE, TPW_FORWARD, TPW_EXIT } tpw_kind;

typedef struct tpw_cmd {
    tpw_kind kind;
    int a, b, c, d;          /* the call's sizes */
    const fwd_batch *batch;  /* TPW_FORWARD: host memory, read by every rank */
} tpw_cmd;

typedef struct tp_worker {
    struct model_tp *tp;
    int rank;
    backend *be;
    model *m;
    model_cache *cache;      /* the rank's shard of the KV cache */
    pthread_t th;
    bool running;
    vllm_status st;          /* the last command's */
    char err[512];
} tp_worker;

struct model_tp {
    int n;                   /* ranks, the driver included */
    tp_worker *w;            /* ranks 1 .. n - 1 at w[0 .. n - 2] */
    tpg_group *g;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a new command */
    pthread_cond_t done_cv;  /* a worker finished it */
    uint64_t seq;            /* commands posted */
    int done;                /* workers done with the current one */
    tpw_cmd cmd;
};

static void *worker_main(void *p) {
    tp_worker *w = p;
    struct model_tp *t = w->tp;
    uint64_t seen = 0;
    if (w->be->ops->bind_thread) w->be->ops->bind_thread(w->be); /* a GPU rank: its device */
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->seq == seen) pthread_cond_wait(&t->cv, &t->mu);
        seen = t->seq;
        const tpw_cmd c = t->cmd;
        pthread_mutex_unlock(&t->mu);
        vllm_status st = VLLM_OK;
        switch (c.kind) {
        case TPW_CACHE_CREATE:
            model_cache_free_rank(w->m, w->cache); /* a cache left by an earlier create that rank 0 failed */
            w->cache = NULL;
            st = model_cache_create_rank(w->m, c.a, c.b, c.c, c.d, &w->cache);
            break;
        case TPW_CACHE_FREE:
            model_cache_free_rank(w->m, w->cache);
            w->cache = NULL;
            break;
        case TPW_RESERVE: st = model_reserve_rank(w->m, c.a, c.b, c.c); break;
        case TPW_FORWARD: {
            const tensor *lg = NULL;
            st = w->cache ? model_forward_rank(w->m, w->cache, c.batch, &lg)
                          : vt_error(VLLM_ERR_INTERNAL, "a forward before the rank's cache exists");
            const vllm_status s2 = w->be->ops->synchronize(w->be); /* the ops' own failures */
            if (st == VLLM_OK) st = s2;
            break;
        }
        case TPW_EXIT: return NULL;
        }
        if (st != VLLM_OK) {
            snprintf(w->err, sizeof w->err, "%s", vllm_last_error());
            tpg_abort(t->g, w->err); /* rank 0 and the others must not wait for this rank in a collective */
        }
        w->st = st;
        pthread_mutex_lock(&t->mu);
        t->done++;
        pthread_cond_signal(&t->done_cv);
        pthread_mutex_unlock(&t->mu);
    }
}

static void post(struct model_tp *t, tpw_cmd c) {
    pthread_mutex_lock(&t->mu);
    t->cmd = c;
    t->done = 0;
    t->seq++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Waits for every worker; the first worker's failure as the call's error. */
static vllm_status wait_done(struct model_tp *t) {
    pthread_mutex_lock(&t->mu);
    while (t->done < t->n - 1) pthread_cond_wait(&t->done_cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n - 1; i++)
        if (t->w[i].st != VLLM_OK)
            return vt_error(t->w[i].st, "tensor-parallel rank %d: %s", t->w[i].rank, t->w[i].err);
    return VLLM_OK;
}

vllm_status model_tp_start(model *m, const char *dir, const model_load_options *opt) {
    if (!opt->tp_group || !opt->tp_backend_options || tpg_size(opt->tp_group) != m->tp_size)
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor parallelism over %d ranks without their group", m->tp_size);
    struct model_tp *t = calloc(1, sizeof *t);
    if (t) t->w = calloc((size_t)m->tp_size - 1, sizeof *t->w);
    if (!t || !t->w) {
        free(t);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (tensor-parallel ranks)");
    }
    t->n = m->tp_size;
    t->g = opt->tp_group;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    m->tp = t;
    vllm_status st = VLLM_OK;
    for (int r = 1; r < t->n && st == VLLM_OK; r++) {
        tp_worker *w = &t->w[r - 1];
        w->tp = t;
        w->rank = r;
        backend_options bo = *opt->tp_backend_options;
        bo.tp_group = opt->tp_group;
        bo.tp_rank = r;
        bo.device_id += r; /* a GPU each: device_id .. device_id + tp - 1 */
        model_load_options mo = *opt;
        mo.tp_rank = r;
        mo.tp_device = NULL; /* a worker loads only itself */
        LOG_I("tensor-parallel rank %d of %d: loading its shard", r, t->n);
        if ((st = backend_create(opt->tp_device, &bo, &w->be)) || (st = model_load(dir, w->be, &mo, &w->m))) break;
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
            st = vt_error(VLLM_ERR_INTERNAL, "tensor-parallel rank %d: could not start its thread", r);
            break;
        }
        w->running = true;
    }
    /* making the workers' backends left this thread on the last one's GPU: rank 0's device again */
    if (m->be->ops->bind_thread) m->be->ops->bind_thread(m->be);
    return st; /* on failure model_free (model_tp_stop) releases what was made */
}

/* The calling thread (the engine's: it may not be the one that loaded the model) on rank 0's device. */
static void bind_driver(model *m) {
    if (m->be->ops->bind_thread) m->be->ops->bind_thread(m->be);
}

void model_tp_stop(model *m) {
    struct model_tp *t = m->tp;
    if (!t) return;
    post(t, (tpw_cmd){.kind = TPW_EXIT});
    for (int i = 0; i < t->n - 1; i++) {
        tp_worker *w = &t->w[i];
        if (w->running) pthread_join(w->th, NULL);
        if (w->cache) model_cache_free_rank(w->m, w->cache);
        model_free(w->m);
        if (w->be) backend_free(w->be);
    }
    pthread_cond_destroy(&t->done_cv);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->w);
    free(t);
    m->tp = NULL;
}

vllm_status model_tp_forward(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits) {
    struct model_tp *t = m->tp;
    bind_driver(m);
    post(t, (tpw_cmd){.kind = TPW_FORWARD, .batch = b});
    vllm_status st = model_forward_rank(m, cache, b, logits); /* with the workers: the collectives pair up */
    if (st != VLLM_OK) tpg_abort(t->g, vllm_last_error());
    const vllm_status ws = wait_done(t);
    if (st != VLLM_OK || ws != VLLM_OK) { /* every rank is out of its collectives now: the next step may run */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vllm_last_error());
        tpg_reset(t->g);
        vt_error(st != VLLM_OK ? st : ws, "%s", msg);
    }
    return st != VLLM_OK ? st : ws;
}

vllm_status model_tp_cache_create(model *m, int num_blocks, int block_size, int num_state_slots, int num_ckpt_slots,
                                  model_cache **out) {
    struct model_tp *t = m->tp;
    bind_driver(m);
    post(t, (tpw_cmd){.kind = TPW_CACHE_CREATE, .a = num_blocks, .b = block_size, .c = num_state_slots,
                      .d = num_ckpt_slots});
    vllm_status st = model_cache_create_rank(m, num_blocks, block_size, num_state_slots, num_ckpt_slots, out);
    const vllm_status ws = wait_done(t);
    if (st == VLLM_OK && ws != VLLM_OK) {
        model_cache_free_rank(m, *out);
        *out = NULL;
        st = ws;
    }
    return st;
}

void model_tp_cache_free(model *m, model_cache *c) {
    post(m->tp, (tpw_cmd){.kind = TPW_CACHE_FREE});
    model_cache_free_rank(m, c);
    wait_done(m->tp);
}

vllm_status model_tp_reserve(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq) {
    bind_driver(m);
    post(m->tp, (tpw_cmd){.kind = TPW_RESERVE, .a = max_tokens, .b = max_seqs, .c = max_blocks_per_seq});
    const vllm_status st = model_reserve_rank(m, max_tokens, max_seqs, max_blocks_per_seq);
    const vllm_status ws = wait_done(m->tp);
    return st != VLLM_OK ? st : ws;
}
