/*
 * async_replica.c: one replica of the thread-safe front of vllm.h (vLLM's AsyncLLM, async_front.c): one
 * engine thread owns a vllm_engine and steps it while there is work;
 * other threads add requests (and wait for the engine thread's verdict, so
 * errors reach them synchronously), abort them, and read each request's
 * vllm_stream of deep-copied output chunks. Tokenization runs on the
 * calling threads (text prompts in replica_add_request, and
 * replica_tokenize / _detokenize), never on the engine thread.
 *
 * Locks: ae->mu guards the add queue, the stop flag, the caller count and
 * the live-stream table (written only by the engine thread); each stream's
 * mu guards its chunk queue, flags and reference count. Order: ae->mu
 * before a stream's mu, never the reverse. A stream is referenced by its
 * consumer and, while its request is live, by the engine thread; the last
 * reference frees it, so the engine never touches a freed stream.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/async_replica.h"
#include "engine/engine_internal.h"

#define AE_MSG_MAX 1024

typedef struct chunk_node {
    struct chunk_node *next;
    vllm_stream_chunk c;
} chunk_node;

struct vllm_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* a chunk arrived */
    char *id;
    chunk_node *head, *tail;     /* chunks not yet read */
    bool ended;                  /* the engine queued the last chunk */
    bool delivered_last;         /* the consumer read the last chunk */
    bool cancel;                 /* abort requested (replica_abort or vllm_stream_free) */
    bool abandoned;              /* the consumer freed it: outputs are dropped */
    int refs;
    /* engine thread only */
    bool cancel_sent;            /* abort passed to the engine */
    struct sample_state {
        bool done;               /* finished */
        size_t completion_tokens; /* tokens delivered so far */
    } *samples;                  /* (num_samples) */
    size_t num_samples, num_finished;
    size_t prompt_tokens, cached_prompt_tokens; /* usage from the last output */
    int engine;                  /* the replica that runs it (vllm_stream_engine) */
};

/* A caller's add, on the caller's stack until the engine thread sets done. */
typedef struct add_cmd {
    struct add_cmd *next;
    const char *id;
    const vllm_prompt *prompt;
    const vllm_sampling_params *params;
    const vllm_pooling_params *pool; /* a pooling request (params unused) */
    bool pooling;
    vllm_stream *stream;
    bool done;
    vllm_status status;
    char msg[AE_MSG_MAX];
} add_cmd;

struct ae_replica {
    vllm_engine *e;              /* touched only by the engine thread once it runs */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;         /* engine thread: adds queued, stop */
    pthread_cond_t done;         /* callers: verdicts given; free: callers gone */
    add_cmd *adds_head, *adds_tail;
    bool stop;
    int callers;                 /* threads inside add / abort */
    bool fail_next_step;         /* test hooks */
    bool paused;
    int pause_after;             /* > 0: steps to run before pausing */
    size_t steps;
    vllm_engine_stats stats;     /* the engine's stats after its last step (under mu) */
    vllm_stream **live;          /* (num_live) streams of unfinished requests */
    size_t num_live, cap_live;
    size_t num_queued;           /* adds waiting for the engine thread (under mu) */
    bool joined;                 /* replica_stop joined the engine thread */
    int index;                   /* this replica's number in the front */
    replica_release_fn release;  /* the front's id registry (or NULL) */
    void *release_ctx;
};

/* ---- chunks ---- */

void vllm_stream_chunk_clear(vllm_stream_chunk *c) {
    if (!c) return;
    free(c->token_ids);
    free(c->logprobs);
    free(c->top_logprob_ids);
    free(c->top_logprobs);
    free(c->text);
    free(c->stop_reason);
    free(c->error);
    free(c->prompt_logprobs);
    free(c->prompt_top_logprob_ids);
    free(c->prompt_top_logprobs);
    free(c->embedding);
    memset(c, 0, sizeof *c);
}

static void *dup_mem(const void *src, size_t n, size_t size, bool *ok) {
    if (!n || !src) return NULL;
    void *d = malloc(n * size);
    if (!d) *ok = false;
    else memcpy(d, src, n * size);
    return d;
}

/* Deep copy of one step output. On failure the chunk is cleared. */
static vllm_status chunk_from_output(const vllm_request_output *o, vllm_stream_chunk *c) {
    memset(c, 0, sizeof *c);
    bool ok = true;
    size_t n = o->num_new_tokens;
    c->num_tokens = n;
    c->token_ids = dup_mem(o->new_token_ids, n, sizeof(int32_t), &ok);
    c->logprobs = dup_mem(o->new_logprobs, n, sizeof(float), &ok);
    if (o->num_top_logprobs > 0 && o->top_logprob_ids && o->top_logprobs) {
        c->num_top_logprobs = o->num_top_logprobs;
        c->top_logprob_ids = dup_mem(o->top_logprob_ids, n * (size_t)o->num_top_logprobs, sizeof(int32_t), &ok);
        c->top_logprobs = dup_mem(o->top_logprobs, n * (size_t)o->num_top_logprobs, sizeof(float), &ok);
    }
    c->text_len = o->new_text ? o->new_text_len : 0;
    c->text = malloc(c->text_len + 1);
    if (c->text) {
        if (c->text_len) memcpy(c->text, o->new_text, c->text_len);
        c->text[c->text_len] = '\0';
    } else {
        ok = false;
    }
    if (o->stop_reason && !(c->stop_reason = strdup(o->stop_reason))) ok = false;
    c->finish_reason = o->finish_reason;
    c->prompt_tokens = o->prompt_tokens;
    c->completion_tokens = o->completion_tokens;
    c->cached_prompt_tokens = o->cached_prompt_tokens;
    c->index = o->index;
    if (o->prompt_logprobs) {
        size_t np = o->prompt_tokens, k = o->num_prompt_top_logprobs > 0 ? (size_t)o->num_prompt_top_logprobs : 0;
        c->prompt_logprobs = dup_mem(o->prompt_logprobs, np, sizeof(float), &ok);
        if (k && o->prompt_top_logprob_ids && o->prompt_top_logprobs) {
            c->num_prompt_top_logprobs = (int)k;
            c->prompt_top_logprob_ids = dup_mem(o->prompt_top_logprob_ids, np * k, sizeof(int32_t), &ok);
            c->prompt_top_logprobs = dup_mem(o->prompt_top_logprobs, np * k, sizeof(float), &ok);
        }
    }
    if (o->embedding) {
        c->embedding = dup_mem(o->embedding, o->embedding_dim, sizeof(float), &ok);
        c->embedding_dim = o->embedding_dim;
    }
    if (!ok) {
        vllm_stream_chunk_clear(c);
        return vt_error(VLLM_ERR_NO_MEMORY, "request %s: out of memory copying an output", o->request_id);
    }
    return VLLM_OK;
}

/* ---- streams ---- */

static vllm_stream *stream_new(const char *id) {
    vllm_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (!(s->id = strdup(id))) {
        free(s);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->refs = 1;
    return s;
}

static void stream_drain(vllm_stream *s) {
    while (s->head) {
        chunk_node *n = s->head;
        s->head = n->next;
        vllm_stream_chunk_clear(&n->c);
        free(n);
    }
    s->tail = NULL;
}

static void stream_release(vllm_stream *s) {
    pthread_mutex_lock(&s->mu);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last) return;
    stream_drain(s);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->samples);
    free(s->id);
    free(s);
}

/* Appends src's n elements of size bytes to *dst (holding dn); false when memory ran out (*dst kept). */
static bool append_mem(void **dst, size_t dn, const void *src, size_t n, size_t size) {
    if (!n) return true;
    void *p = realloc(*dst, (dn + n) * size);
    if (!p) return false;
    memcpy((char *)p + dn * size, src, n * size);
    *dst = p;
    return true;
}

/* Merges c, a later delta of the same sample, into d, a chunk the consumer
 * has not read yet (vLLM's output collector merges unread deltas the same
 * way): a slow consumer then holds one growing chunk per sample instead of
 * one chunk per step. False (nothing changed) when c must stay separate:
 * it ends the stream, carries prompt logprobs or an error, or memory ran out. */
static bool chunk_merge(vllm_stream_chunk *d, vllm_stream_chunk *c) {
    if (c->last || c->prompt_logprobs || c->embedding || c->error || d->error || !d->text || !c->text ||
        d->num_top_logprobs != c->num_top_logprobs || d->finish_reason != VLLM_FINISH_NONE)
        return false;
    const size_t k = (size_t)c->num_top_logprobs, dn = d->num_tokens, n = c->num_tokens;
    /* grow every array first, then commit: a failure leaves d's contents as they were */
    int32_t *ids = d->token_ids;
    float *lps = d->logprobs;
    if (!append_mem((void **)&ids, dn, c->token_ids, n, sizeof *ids)) return false;
    d->token_ids = ids;
    if (!append_mem((void **)&lps, dn, c->logprobs, n, sizeof *lps)) return false;
    d->logprobs = lps;
    if (k && (!append_mem((void **)&d->top_logprob_ids, dn * k, c->top_logprob_ids, n * k, sizeof(int32_t)) ||
              !append_mem((void **)&d->top_logprobs, dn * k, c->top_logprobs, n * k, sizeof(float))))
        return false;
    char *text = realloc(d->text, d->text_len + c->text_len + 1);
    if (!text) return false;
    d->text = text;
    /* the arrays now hold both; counts and the rest follow c */
    d->num_tokens = dn + n;
    memcpy(text + d->text_len, c->text, c->text_len);
    d->text_len += c->text_len;
    text[d->text_len] = '\0';
    if (c->stop_reason) {
        free(d->stop_reason);
        d->stop_reason = c->stop_reason;
        c->stop_reason = NULL;
    }
    d->finish_reason = c->finish_reason;
    d->prompt_tokens = c->prompt_tokens;
    d->completion_tokens = c->completion_tokens;
    d->cached_prompt_tokens = c->cached_prompt_tokens;
    vllm_stream_chunk_clear(c);
    return true;
}

/* Queues a chunk (taking ownership of its arrays); the last one (c->last)
 * ends the stream. An unread chunk of the same sample absorbs it where it
 * can (chunk_merge). Dropped when the consumer has gone. Out of memory, the
 * chunk is lost; a lost last chunk ends the stream anyway (vllm_stream_next
 * then answers VLLM_ERR_NOT_FOUND after the queued ones). */
static void stream_push(vllm_stream *s, vllm_stream_chunk *c) {
    bool last = c->last;
    pthread_mutex_lock(&s->mu);
    if (!s->abandoned && !last) {
        chunk_node *same = NULL; /* the latest queued chunk of this sample */
        for (chunk_node *q = s->head; q; q = q->next)
            if (q->c.index == c->index) same = q;
        if (same && chunk_merge(&same->c, c)) {
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
            memset(c, 0, sizeof *c);
            return;
        }
    }
    pthread_mutex_unlock(&s->mu);
    chunk_node *n = malloc(sizeof *n);
    pthread_mutex_lock(&s->mu);
    if (last) s->ended = true;
    if (s->abandoned || !n) {
        if (!s->abandoned) LOG_E("request %s: out of memory queueing an output (dropped)", s->id);
        if (last) s->delivered_last = true; /* nothing more will come */
        vllm_stream_chunk_clear(c);
        free(n);
    } else {
        n->c = *c;
        n->next = NULL;
        if (s->tail) s->tail->next = n;
        else s->head = n;
        s->tail = n;
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    memset(c, 0, sizeof *c);
}

/* Engine thread: records that sample i finished; true when it was the
 * stream's last unfinished sample. */
static bool stream_sample_finished(vllm_stream *s, size_t i) {
    if (i < s->num_samples && !s->samples[i].done) {
        s->samples[i].done = true;
        s->num_finished++;
    }
    return s->num_finished == s->num_samples;
}

/* Ends every unfinished sample of a stream with an abort chunk carrying
 * `error` (may be NULL). */
static void stream_end_all(vllm_stream *s, const char *error) {
    for (size_t i = 0; i < s->num_samples; i++) {
        if (s->samples[i].done) continue;
        vllm_stream_chunk c;
        memset(&c, 0, sizeof c);
        c.index = i;
        c.prompt_tokens = s->prompt_tokens;
        c.cached_prompt_tokens = s->cached_prompt_tokens;
        c.completion_tokens = s->samples[i].completion_tokens;
        c.finish_reason = VLLM_FINISH_ABORT;
        c.last = stream_sample_finished(s, i);
        c.text = strdup("");
        if (error) c.error = strdup(error);
        stream_push(s, &c);
    }
}

const char *vllm_stream_request_id(const vllm_stream *s) { return s ? s->id : NULL; }

static void deadline_after(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

vllm_status vllm_stream_next(vllm_stream *s, vllm_stream_chunk *chunk, int timeout_ms) {
    if (!s || !chunk) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_stream_next: stream or chunk missing");
    memset(chunk, 0, sizeof *chunk);
    struct timespec deadline;
    if (timeout_ms > 0) deadline_after(&deadline, timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (!s->head && !s->delivered_last) {
        if (timeout_ms == 0) break;
        if (timeout_ms < 0) {
            pthread_cond_wait(&s->cv, &s->mu);
        } else if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    if (!s->head) {
        bool ended = s->delivered_last;
        pthread_mutex_unlock(&s->mu);
        if (ended) return vt_error(VLLM_ERR_NOT_FOUND, "request %s: the stream has ended", s->id);
        return VLLM_STREAM_TIMEOUT;
    }
    chunk_node *n = s->head;
    s->head = n->next;
    if (!s->head) s->tail = NULL;
    if (n->c.last) s->delivered_last = true;
    pthread_mutex_unlock(&s->mu);
    *chunk = n->c;
    free(n);
    return VLLM_OK;
}

void vllm_stream_free(vllm_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->abandoned = true;
    if (!s->ended) s->cancel = true; /* the engine thread aborts it at its next step */
    stream_drain(s);
    pthread_mutex_unlock(&s->mu);
    stream_release(s);
}

/* ---- the engine thread ---- */

static ssize_t live_find(ae_replica *ae, const char *id) {
    for (size_t i = 0; i < ae->num_live; i++)
        if (!strcmp(ae->live[i]->id, id)) return (ssize_t)i;
    return -1;
}

/* Takes live stream i out of the table and drops the engine's reference. */
static void live_remove(ae_replica *ae, size_t i) {
    vllm_stream *s = ae->live[i];
    pthread_mutex_lock(&ae->mu);
    ae->live[i] = ae->live[--ae->num_live];
    pthread_mutex_unlock(&ae->mu);
    stream_release(s);
}

/* The front's id registry lets live stream i's id go: called before its last chunk is pushed, so that a
 * consumer who read that chunk may reuse the id at once (then live_remove). */
static void live_release(ae_replica *ae, size_t i) {
    if (ae->release) ae->release(ae->release_ctx, ae->live[i]->id);
}

/* Ends live stream i with an abort chunk carrying msg (every unfinished sample) and drops it. */
static void live_end(ae_replica *ae, size_t i, const char *msg) {
    live_release(ae, i);
    stream_end_all(ae->live[i], msg);
    live_remove(ae, i);
}

/* Runs queued adds on the engine, answering each caller as soon as its
 * add is done (the caller's add_cmd must not be touched afterwards). */
static void run_adds(ae_replica *ae, add_cmd *cmd) {
    while (cmd) {
        add_cmd *next = cmd->next;
        vllm_status st = VLLM_OK;
        pthread_mutex_lock(&ae->mu);
        if (ae->num_live == ae->cap_live) {
            size_t cap = ae->cap_live ? 2 * ae->cap_live : 64;
            vllm_stream **nl = realloc(ae->live, cap * sizeof *nl);
            if (!nl) {
                st = vt_error(VLLM_ERR_NO_MEMORY, "request %s: out of memory", cmd->id);
            } else {
                ae->live = nl;
                ae->cap_live = cap;
            }
        }
        pthread_mutex_unlock(&ae->mu);
        if (st == VLLM_OK && live_find(ae, cmd->id) >= 0)
            st = vt_error(VLLM_ERR_INVALID_ARG, "request id '%s' is already in use", cmd->id);
        if (st == VLLM_OK)
            st = cmd->pooling ? vllm_engine_add_pooling_request(ae->e, cmd->id, cmd->prompt, cmd->pool)
                              : vllm_engine_add_request(ae->e, cmd->id, cmd->prompt, cmd->params);
        if (st == VLLM_OK) {
            /* validated by the engine: n samples of this request now exist */
            size_t n = !cmd->pooling && cmd->params && cmd->params->n > 1 ? (size_t)cmd->params->n : 1;
            if (!(cmd->stream->samples = calloc(n, sizeof *cmd->stream->samples))) {
                vllm_engine_abort_request(ae->e, cmd->id); /* its abort outputs are ignored */
                st = vt_error(VLLM_ERR_NO_MEMORY, "request %s: out of memory", cmd->id);
            } else {
                cmd->stream->num_samples = n;
            }
        }
        if (st == VLLM_OK) {
            pthread_mutex_lock(&cmd->stream->mu);
            cmd->stream->refs++;
            pthread_mutex_unlock(&cmd->stream->mu);
        }
        pthread_mutex_lock(&ae->mu);
        if (st == VLLM_OK) ae->live[ae->num_live++] = cmd->stream;
        ae->num_queued--;
        cmd->status = st;
        if (st != VLLM_OK) snprintf(cmd->msg, sizeof cmd->msg, "%s", vllm_last_error());
        cmd->done = true;
        pthread_cond_broadcast(&ae->done);
        pthread_mutex_unlock(&ae->mu);
        cmd = next;
    }
}

/* Passes aborts requested through streams (replica_abort, an early
 * vllm_stream_free) to the engine. */
static void run_cancels(ae_replica *ae) {
    for (size_t i = 0; i < ae->num_live; i++) {
        vllm_stream *s = ae->live[i];
        if (s->cancel_sent) continue;
        pthread_mutex_lock(&s->mu);
        bool cancel = s->cancel;
        pthread_mutex_unlock(&s->mu);
        if (!cancel) continue;
        s->cancel_sent = true;
        if (vllm_engine_abort_request(ae->e, s->id) != VLLM_OK) vt_error_clear(); /* finished meanwhile */
    }
}

/* Ends every live request with an abort chunk carrying msg and drops them
 * from the engine, which stays usable. */
static void fail_all(ae_replica *ae, const char *msg) {
    LOG_E("engine step failed: %s (aborting %zu requests)", msg, ae->num_live);
    while (ae->num_live) live_end(ae, ae->num_live - 1, msg);
    engine_drop_all(ae->e);
}

static void run_step(ae_replica *ae) {
    pthread_mutex_lock(&ae->mu);
    bool fail = ae->fail_next_step;
    ae->fail_next_step = false;
    pthread_mutex_unlock(&ae->mu);
    const vllm_request_output *outs = NULL;
    size_t n = 0;
    vllm_status st = fail ? vt_error(VLLM_ERR_BACKEND, "injected step failure (test hook)")
                          : vllm_engine_step(ae->e, &outs, &n);
    vllm_engine_stats stats;
    vllm_engine_get_stats(ae->e, &stats);
    pthread_mutex_lock(&ae->mu);
    ae->steps++;
    if (ae->pause_after > 0 && --ae->pause_after == 0) ae->paused = true;
    ae->stats = stats;
    pthread_mutex_unlock(&ae->mu);
    if (st != VLLM_OK) {
        char msg[AE_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", vllm_last_error());
        fail_all(ae, msg);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        ssize_t i = live_find(ae, outs[k].request_id);
        if (i < 0) {
            if (outs[k].finish_reason != VLLM_FINISH_ABORT)
                LOG_E("async engine: output for unknown request %s", outs[k].request_id);
            continue;
        }
        vllm_stream *s = ae->live[i];
        vllm_stream_chunk c;
        if (chunk_from_output(&outs[k], &c) != VLLM_OK) {
            LOG_E("%s", vllm_last_error());
            if (outs[k].finish_reason == VLLM_FINISH_NONE) {
                /* the stream would miss tokens: end the request instead */
                if (vllm_engine_abort_request(ae->e, s->id) == VLLM_OK) s->cancel_sent = true;
                continue;
            }
            memset(&c, 0, sizeof c);
            c.index = outs[k].index;
            c.finish_reason = outs[k].finish_reason;
        }
        s->prompt_tokens = outs[k].prompt_tokens;
        s->cached_prompt_tokens = outs[k].cached_prompt_tokens;
        if (outs[k].index < s->num_samples) s->samples[outs[k].index].completion_tokens = outs[k].completion_tokens;
        bool last = c.finish_reason != VLLM_FINISH_NONE && stream_sample_finished(s, outs[k].index);
        c.last = last;
        if (last) live_release(ae, (size_t)i);
        stream_push(s, &c);
        if (last) live_remove(ae, (size_t)i);
    }
}

static void *engine_main(void *arg) {
    ae_replica *ae = arg;
    engine_bind_thread(ae->e); /* a GPU replica's device: the thread's current device is per thread */
    bool busy = false;
    pthread_mutex_lock(&ae->mu);
    for (;;) {
        while (!ae->stop && !ae->adds_head && (!busy || ae->paused)) pthread_cond_wait(&ae->wake, &ae->mu);
        if (ae->stop) break;
        add_cmd *adds = ae->adds_head;
        ae->adds_head = ae->adds_tail = NULL;
        bool paused = ae->paused;
        pthread_mutex_unlock(&ae->mu);
        run_adds(ae, adds);
        if (!paused) {
            run_cancels(ae);
            if (vllm_engine_has_unfinished(ae->e)) run_step(ae);
        }
        busy = vllm_engine_has_unfinished(ae->e);
        pthread_mutex_lock(&ae->mu);
    }
    /* stopping: adds still queued are refused */
    for (add_cmd *c = ae->adds_head, *next; c; c = next) {
        next = c->next;
        c->status = VLLM_ERR_INVALID_ARG;
        snprintf(c->msg, sizeof c->msg, "request %s: the async engine is shutting down", c->id);
        c->done = true;
        ae->num_queued--;
    }
    ae->adds_head = ae->adds_tail = NULL;
    pthread_cond_broadcast(&ae->done);
    pthread_mutex_unlock(&ae->mu);
    return NULL;
}

/* ---- the engine handle ---- */

vllm_status replica_create(const char *model_dir, const vllm_engine_options *options, int device_id, int index,
                           replica_release_fn release, void *release_ctx, ae_replica **out) {
    *out = NULL;
    ae_replica *ae = calloc(1, sizeof *ae);
    if (!ae) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    ae->index = index;
    ae->release = release;
    ae->release_ctx = release_ctx;
    vllm_status st = engine_create_on(model_dir, options, device_id, &ae->e);
    if (st != VLLM_OK) {
        free(ae);
        return st;
    }
    pthread_mutex_init(&ae->mu, NULL);
    pthread_cond_init(&ae->wake, NULL);
    pthread_cond_init(&ae->done, NULL);
    vllm_engine_get_stats(ae->e, &ae->stats);
    int rc = pthread_create(&ae->thread, NULL, engine_main, ae);
    if (rc != 0) {
        pthread_cond_destroy(&ae->done);
        pthread_cond_destroy(&ae->wake);
        pthread_mutex_destroy(&ae->mu);
        vllm_engine_free(ae->e);
        free(ae);
        return vt_error(VLLM_ERR_NO_MEMORY, "vllm_async_engine_create: cannot start the engine thread (%s)",
                        strerror(rc));
    }
    *out = ae;
    return VLLM_OK;
}

void replica_stop(ae_replica *ae) {
    if (!ae) return;
    pthread_mutex_lock(&ae->mu);
    const bool joined = ae->joined;
    ae->stop = true;
    ae->joined = true;
    pthread_cond_signal(&ae->wake);
    pthread_mutex_unlock(&ae->mu);
    if (!joined) pthread_join(ae->thread, NULL);
    /* callers answered by the stopping thread may still be leaving */
    pthread_mutex_lock(&ae->mu);
    while (ae->callers > 0) pthread_cond_wait(&ae->done, &ae->mu);
    pthread_mutex_unlock(&ae->mu);
}

void replica_free(ae_replica *ae) {
    if (!ae) return;
    replica_stop(ae);
    while (ae->num_live) live_end(ae, ae->num_live - 1, "the async engine was freed");
    free(ae->live);
    engine_bind_thread(ae->e); /* the engine's device on this thread too */
    vllm_engine_free(ae->e);
    pthread_cond_destroy(&ae->done);
    pthread_cond_destroy(&ae->wake);
    pthread_mutex_destroy(&ae->mu);
    free(ae);
}

/* Immutable after create: safe from any thread. */
vllm_sampling_params replica_default_sampling(const ae_replica *ae) {
    return vllm_engine_default_sampling(ae->e);
}

bool replica_has_tokenizer(const ae_replica *ae) { return ae && vllm_engine_has_tokenizer(ae->e); }

void replica_get_info(const ae_replica *ae, vllm_engine_info *out) {
    vllm_engine_get_info(ae->e, out); /* fixed after create: no lock needed */
}

vllm_status replica_check_health(const ae_replica *ae) {
    return vllm_engine_check_health(ae->e); /* reads the links' state under their own lock */
}

void replica_get_stats(ae_replica *ae, vllm_engine_stats *out) {
    pthread_mutex_lock(&ae->mu);
    *out = ae->stats;
    pthread_mutex_unlock(&ae->mu);
}

size_t replica_load(ae_replica *ae) {
    pthread_mutex_lock(&ae->mu);
    const size_t n = ae->num_live + ae->num_queued;
    pthread_mutex_unlock(&ae->mu);
    return n;
}

int vllm_stream_engine(const vllm_stream *s) { return s ? s->engine : -1; }

/* Both run on the calling thread (the server's HTTP threads for /tokenize, /detokenize and
 * prompts): the tokenizer is read-only after load (tokenizer.h) and the engine thread is not
 * involved. */
vllm_status replica_tokenize(ae_replica *ae, const char *text, bool add_special, int32_t **ids,
                                size_t *n) {
    return vllm_tokenize(ae->e, text, add_special, ids, n); /* the tokenizer is read-only */
}

vllm_status replica_detokenize(ae_replica *ae, const int32_t *ids, size_t n, bool skip_special,
                                  char **text) {
    return vllm_detokenize(ae->e, ids, n, skip_special, text);
}

static void caller_leave(ae_replica *ae) {
    ae->callers--;
    if (ae->stop && ae->callers == 0) pthread_cond_broadcast(&ae->done);
}

/* replica_add_request and replica_add_pooling_request: cmd has the id, params or pool and pooling set. */
static vllm_status add_common(ae_replica *ae, add_cmd *tmpl, const vllm_prompt *prompt, vllm_stream **out) {
    const char *request_id = tmpl->id;
    if (out) *out = NULL;
    if (!ae || !out) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_async_add_request: engine or out missing");
    if (!request_id || !*request_id) return vt_error(VLLM_ERR_INVALID_ARG, "request id missing");
    if (!prompt) return vt_error(VLLM_ERR_INVALID_ARG, "request %s: no prompt", request_id);
    vllm_stream *s = stream_new(request_id);
    if (!s) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    s->engine = ae->index;
    pthread_mutex_lock(&ae->mu);
    if (ae->stop) {
        pthread_mutex_unlock(&ae->mu);
        stream_release(s);
        return vt_error(VLLM_ERR_INVALID_ARG, "request %s: the async engine is shutting down", request_id);
    }
    ae->callers++; /* from here replica_free waits for this call (the tokenizer stays) */
    pthread_mutex_unlock(&ae->mu);

    /* A text prompt is tokenized here, on the caller's thread (the tokenizer is immutable once
     * loaded), once for all n samples: the engine thread, which steps every running request,
     * never spends its time on a request's tokenization (a megabyte of text is a CPU-second). */
    vllm_prompt ids_prompt;
    int32_t *ids = NULL;
    vllm_status st = VLLM_OK;
    if (prompt->text && !prompt->token_ids) {
        size_t n = 0;
        if ((st = vllm_tokenize(ae->e, prompt->text, true, &ids, &n)) != VLLM_OK) {
            vt_error_prefix("request %s", request_id);
        } else {
            ids_prompt = (vllm_prompt){.token_ids = ids, .num_token_ids = n};
            prompt = &ids_prompt;
        }
    }
    add_cmd cmd = *tmpl;
    cmd.prompt = prompt;
    cmd.stream = s;
    pthread_mutex_lock(&ae->mu);
    if (st == VLLM_OK && ae->stop)
        st = vt_error(VLLM_ERR_INVALID_ARG, "request %s: the async engine is shutting down", request_id);
    if (st != VLLM_OK) {
        caller_leave(ae);
        pthread_mutex_unlock(&ae->mu);
        free(ids);
        stream_release(s);
        return st;
    }
    if (ae->adds_tail) ae->adds_tail->next = &cmd;
    else ae->adds_head = &cmd;
    ae->adds_tail = &cmd;
    ae->num_queued++;
    pthread_cond_signal(&ae->wake);
    while (!cmd.done) pthread_cond_wait(&ae->done, &ae->mu);
    caller_leave(ae);
    pthread_mutex_unlock(&ae->mu);
    free(ids); /* the engine copied the prompt */
    if (cmd.status != VLLM_OK) {
        stream_release(s);
        return vt_error(cmd.status, "%s", cmd.msg);
    }
    *out = s;
    return VLLM_OK;
}

vllm_status replica_add_request(ae_replica *ae, const char *request_id, const vllm_prompt *prompt,
                                   const vllm_sampling_params *params, vllm_stream **out) {
    add_cmd cmd = {.id = request_id, .params = params};
    return add_common(ae, &cmd, prompt, out);
}

vllm_status replica_add_pooling_request(ae_replica *ae, const char *request_id, const vllm_prompt *prompt,
                                           const vllm_pooling_params *params, vllm_stream **out) {
    add_cmd cmd = {.id = request_id, .pool = params, .pooling = true};
    return add_common(ae, &cmd, prompt, out);
}

vllm_status replica_abort(ae_replica *ae, const char *request_id) {
    pthread_mutex_lock(&ae->mu);
    ssize_t i = live_find(ae, request_id);
    if (i >= 0) {
        vllm_stream *s = ae->live[i];
        pthread_mutex_lock(&s->mu);
        s->cancel = true;
        pthread_mutex_unlock(&s->mu);
        pthread_cond_signal(&ae->wake);
    }
    pthread_mutex_unlock(&ae->mu);
    return i < 0 ? VLLM_ERR_NOT_FOUND : VLLM_OK;
}

/* ---- test hooks ---- */

void replica_fail_next_step(ae_replica *ae) {
    pthread_mutex_lock(&ae->mu);
    ae->fail_next_step = true;
    pthread_mutex_unlock(&ae->mu);
}

void replica_pause(ae_replica *ae, bool paused) {
    replica_pause_after(ae, paused ? -1 : 0);
}

void replica_pause_after(ae_replica *ae, int steps) {
    pthread_mutex_lock(&ae->mu);
    ae->paused = steps < 0;
    ae->pause_after = steps > 0 ? steps : 0;
    pthread_cond_signal(&ae->wake);
    pthread_mutex_unlock(&ae->mu);
}

size_t replica_steps(ae_replica *ae) {
    pthread_mutex_lock(&ae->mu);
    size_t n = ae->steps;
    pthread_mutex_unlock(&ae->mu);
    return n;
}
