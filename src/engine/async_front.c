/*
 * async_front.c: the thread-safe front of vllm.h (vllm_async_*): one engine replica (async_replica.c), or
 * data_parallel_size of them behind one handle as vLLM's data parallelism puts them behind one server.
 *
 * Each replica loads the model (all at once, a thread each) with its own engine thread, scheduler and KV cache (a GPU replica r on
 * ordinals r * tp .. r * tp + tp - 1; on the CPU the cores are shared out). A request goes to the replica
 * that holds the fewest requests, live or queued (vLLM's DPLBAsyncMPClient balances by its engines'
 * waiting and running counts), ties taken in turn; its stream says which (vllm_stream_engine). Request ids
 * stay unique across replicas: the front keeps the ids of requests added and not yet finished, and a
 * replica hands an id back (replica_release_fn) when its request stops being live. With one replica the
 * replica's own check is the only one, as before.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/async_engine.h"
#include "engine/async_replica.h"
#include "engine/engine_internal.h"

struct vllm_async_engine {
    ae_replica **reps; /* (n) */
    int n;
    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t left; /* a caller left (vllm_async_engine_free waits for them) */
    char **ids;         /* (num_ids) ids of the requests added and not yet released (n > 1 only) */
    size_t num_ids, cap_ids;
    unsigned next;      /* where the search for the least loaded replica starts (ties in turn) */
    size_t *picked;     /* (n) adds sent to each replica and not yet answered (a text prompt is tokenized
                           before its replica counts it: concurrent adds would all pick the same one) */
    int callers;        /* threads inside add / abort */
    bool stopping;      /* vllm_async_engine_free has begun: new calls refused */
};

/* ---- the id registry (n > 1) ---- */

static ssize_t ids_find(const vllm_async_engine *ae, const char *id) {
    for (size_t i = 0; i < ae->num_ids; i++)
        if (!strcmp(ae->ids[i], id)) return (ssize_t)i;
    return -1;
}

/* Claims id for a new request: VLLM_ERR_INVALID_ARG when a request of the front already has it. */
static vllm_status ids_claim(vllm_async_engine *ae, const char *id) {
    vllm_status st = VLLM_OK;
    pthread_mutex_lock(&ae->mu);
    if (ids_find(ae, id) >= 0) {
        st = vt_error(VLLM_ERR_INVALID_ARG, "request id '%s' is already in use", id);
    } else if (ae->num_ids == ae->cap_ids) {
        const size_t cap = ae->cap_ids ? 2 * ae->cap_ids : 64;
        char **p = realloc(ae->ids, cap * sizeof *p);
        if (!p) st = vt_error(VLLM_ERR_NO_MEMORY, "request %s: out of memory", id);
        else ae->ids = p, ae->cap_ids = cap;
    }
    char *copy = st == VLLM_OK ? strdup(id) : NULL;
    if (st == VLLM_OK && !copy) st = vt_error(VLLM_ERR_NO_MEMORY, "request %s: out of memory", id);
    if (st == VLLM_OK) ae->ids[ae->num_ids++] = copy;
    pthread_mutex_unlock(&ae->mu);
    return st;
}

/* replica_release_fn: a replica's request ended (or the add failed) */
static void ids_release(void *ctx, const char *id) {
    vllm_async_engine *ae = ctx;
    pthread_mutex_lock(&ae->mu);
    const ssize_t i = ids_find(ae, id);
    if (i >= 0) {
        free(ae->ids[i]);
        ae->ids[i] = ae->ids[--ae->num_ids];
    }
    pthread_mutex_unlock(&ae->mu);
}

/* ---- the handle ---- */

/* one replica's load, on its own thread: its status and (the error text is per thread) message */
typedef struct load_job {
    const char *dir;
    const vllm_engine_options *opt;
    int device_id, index;
    vllm_async_engine *ae;
    vllm_status st;
    char msg[1024];
} load_job;

static void *load_main(void *arg) {
    load_job *j = arg;
    j->st = replica_create(j->dir, j->opt, j->device_id, j->index, ids_release, j->ae, &j->ae->reps[j->index]);
    if (j->st != VLLM_OK) snprintf(j->msg, sizeof j->msg, "%s", vllm_last_error());
    return NULL;
}

vllm_status vllm_async_engine_create(const char *model_dir, const vllm_engine_options *options,
                                     vllm_async_engine **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_async_engine_create: out missing");
    *out = NULL;
    vllm_engine_options o = options ? *options : vllm_engine_default_options();
    if (o.data_parallel_size < 0 || o.data_parallel_size > ENGINE_MAX_DP)
        return vt_error(VLLM_ERR_INVALID_ARG, "data_parallel_size %d: 1 to %d", o.data_parallel_size, ENGINE_MAX_DP);
    const int n = o.data_parallel_size > 1 ? o.data_parallel_size : 1;
    const int tp = o.tensor_parallel_size > 1 ? o.tensor_parallel_size : 1;
    vllm_async_engine *ae = calloc(1, sizeof *ae);
    if (!ae || !(ae->reps = calloc((size_t)n, sizeof *ae->reps)) || !(ae->picked = calloc((size_t)n, sizeof *ae->picked))) {
        if (ae) free(ae->reps);
        free(ae);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    pthread_mutex_init(&ae->mu, NULL);
    pthread_cond_init(&ae->left, NULL);
    ae->n = n;
    if (n > 1) {
        if (o.num_threads == 0) { /* the CPU's cores shared out (each TP rank of a replica takes num_threads) */
            const long cores = sysconf(_SC_NPROCESSORS_ONLN);
            o.num_threads = cores > (long)n * tp ? (int)(cores / ((long)n * tp)) : 1;
        }
        LOG_I("data parallelism: %d engine replicas of device %s (%d rank%s each)", n, o.device ? o.device : "cpu", tp,
              tp > 1 ? "s" : "");
    }
    vllm_status st = VLLM_OK;
    if (n == 1) {
        st = replica_create(model_dir, &o, 0, 0, NULL, ae, &ae->reps[0]);
    } else { /* the replicas load at once, each on its own thread (as vLLM starts its engine cores) */
        load_job *jobs = calloc((size_t)n, sizeof *jobs);
        pthread_t *th = calloc((size_t)n, sizeof *th);
        bool *started = calloc((size_t)n, sizeof *started);
        if (!jobs || !th || !started) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        } else {
            for (int r = 0; r < n; r++) {
                jobs[r] = (load_job){.dir = model_dir, .opt = &o, .device_id = r * tp, .index = r, .ae = ae};
                started[r] = r > 0 && pthread_create(&th[r], NULL, load_main, &jobs[r]) == 0;
            }
            for (int r = 0; r < n; r++) /* replica 0, and any whose thread did not start, here */
                if (!started[r]) load_main(&jobs[r]);
            for (int r = 0; r < n; r++)
                if (started[r]) pthread_join(th[r], NULL);
            for (int r = 0; r < n && st == VLLM_OK; r++)
                if (jobs[r].st != VLLM_OK) st = vt_error(jobs[r].st, "data-parallel replica %d: %s", r, jobs[r].msg);
        }
        free(jobs);
        free(th);
        free(started);
    }
    if (st != VLLM_OK) {
        vllm_async_engine_free(ae);
        return st;
    }
    *out = ae;
    return VLLM_OK;
}

/* Stops every replica first (adds in flight are answered "shutting down"), waits for the callers still
 * inside the front, then frees the replicas (their live ids come back through ids_release) and the front. */
void vllm_async_engine_free(vllm_async_engine *ae) {
    if (!ae) return;
    pthread_mutex_lock(&ae->mu);
    ae->stopping = true;
    pthread_mutex_unlock(&ae->mu);
    for (int r = 0; r < ae->n; r++) replica_stop(ae->reps[r]);
    pthread_mutex_lock(&ae->mu);
    while (ae->callers > 0) pthread_cond_wait(&ae->left, &ae->mu);
    pthread_mutex_unlock(&ae->mu);
    for (int r = 0; r < ae->n; r++) replica_free(ae->reps[r]);
    for (size_t i = 0; i < ae->num_ids; i++) free(ae->ids[i]);
    free(ae->ids);
    free(ae->reps);
    free(ae->picked);
    pthread_cond_destroy(&ae->left);
    pthread_mutex_destroy(&ae->mu);
    free(ae);
}

/* A caller enters the front (false: it is being freed) and leaves it. */
static bool enter(vllm_async_engine *ae) {
    pthread_mutex_lock(&ae->mu);
    const bool ok = !ae->stopping;
    if (ok) ae->callers++;
    pthread_mutex_unlock(&ae->mu);
    return ok;
}

static void leave(vllm_async_engine *ae) {
    pthread_mutex_lock(&ae->mu);
    if (--ae->callers == 0 && ae->stopping) pthread_cond_broadcast(&ae->left);
    pthread_mutex_unlock(&ae->mu);
}

/* The replicas load the same model: replica 0 answers for all. */
vllm_sampling_params vllm_async_engine_default_sampling(const vllm_async_engine *ae) {
    return replica_default_sampling(ae->reps[0]);
}

bool vllm_async_engine_has_tokenizer(const vllm_async_engine *ae) { return ae && replica_has_tokenizer(ae->reps[0]); }

void vllm_async_engine_get_info(const vllm_async_engine *ae, vllm_engine_info *out) { replica_get_info(ae->reps[0], out); }

int vllm_async_engine_num_engines(const vllm_async_engine *ae) { return ae ? ae->n : 0; }

vllm_status vllm_async_engine_check_health(const vllm_async_engine *ae) {
    if (!ae) return vt_error(VLLM_ERR_INVALID_ARG, "no engine");
    for (int i = 0; i < ae->n; i++) {
        const vllm_status st = replica_check_health(ae->reps[i]);
        if (st == VLLM_OK) continue;
        if (ae->n > 1) vt_error_prefix("engine %d", i);
        return st;
    }
    return VLLM_OK;
}

void vllm_async_engine_get_engine_info(const vllm_async_engine *ae, int engine, vllm_engine_info *out) {
    if (!ae || engine < 0 || engine >= ae->n) {
        memset(out, 0, sizeof *out);
        return;
    }
    replica_get_info(ae->reps[engine], out);
}

void vllm_async_engine_get_engine_stats(vllm_async_engine *ae, int engine, vllm_engine_stats *out) {
    if (!ae || engine < 0 || engine >= ae->n) {
        memset(out, 0, sizeof *out);
        return;
    }
    replica_get_stats(ae->reps[engine], out);
}

void vllm_async_engine_get_stats(vllm_async_engine *ae, vllm_engine_stats *out) {
    replica_get_stats(ae->reps[0], out);
    if (ae->n == 1) return;
    /* KV usage weighted by each replica's pool (GPU replicas size theirs apart) */
    vllm_engine_info info;
    replica_get_info(ae->reps[0], &info);
    double used = out->kv_cache_usage * info.num_kv_blocks, blocks = info.num_kv_blocks;
    for (int r = 1; r < ae->n; r++) {
        vllm_engine_stats s;
        replica_get_stats(ae->reps[r], &s);
        replica_get_info(ae->reps[r], &info);
        used += s.kv_cache_usage * info.num_kv_blocks;
        blocks += info.num_kv_blocks;
        out->num_running += s.num_running;
        out->num_waiting += s.num_waiting;
        out->num_free_kv_blocks += s.num_free_kv_blocks;
        out->prefix_cache_queries += s.prefix_cache_queries;
        out->prefix_cache_hits += s.prefix_cache_hits;
        out->num_preemptions += s.num_preemptions;
        out->prompt_tokens += s.prompt_tokens;
        out->generation_tokens += s.generation_tokens;
        out->steps += s.steps;
    }
    out->kv_cache_usage = blocks > 0 ? used / blocks : 0.0;
}

vllm_status vllm_async_tokenize(vllm_async_engine *ae, const char *text, bool add_special, int32_t **ids,
                                size_t *n) {
    return replica_tokenize(ae->reps[0], text, add_special, ids, n);
}

vllm_status vllm_async_detokenize(vllm_async_engine *ae, const int32_t *ids, size_t n, bool skip_special,
                                  char **text) {
    return replica_detokenize(ae->reps[0], ids, n, skip_special, text);
}

/* ---- requests ---- */

/* The replica holding the fewest requests (live, queued, or picked by an add not yet answered), the search
 * starting one further each call (ties in turn); counted in picked until the add returns. */
static int pick(vllm_async_engine *ae) {
    if (ae->n == 1) return 0;
    size_t load[ENGINE_MAX_DP];
    for (int r = 0; r < ae->n; r++) load[r] = replica_load(ae->reps[r]);
    pthread_mutex_lock(&ae->mu);
    const unsigned start = ae->next++;
    int best = -1;
    for (int k = 0; k < ae->n; k++) {
        const int r = (int)((start + (unsigned)k) % (unsigned)ae->n);
        if (best < 0 || load[r] + ae->picked[r] < load[best] + ae->picked[best]) best = r;
    }
    ae->picked[best]++;
    pthread_mutex_unlock(&ae->mu);
    return best;
}

typedef struct add_args {
    const vllm_sampling_params *params;
    const vllm_pooling_params *pool;
    bool pooling;
} add_args;

static vllm_status add(vllm_async_engine *ae, const char *id, const vllm_prompt *prompt, add_args a, vllm_stream **out) {
    if (out) *out = NULL;
    if (!ae || !out) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_async_add_request: engine or out missing");
    if (!id || !*id) return vt_error(VLLM_ERR_INVALID_ARG, "request id missing");
    if (!enter(ae)) return vt_error(VLLM_ERR_INVALID_ARG, "request %s: the async engine is shutting down", id);
    vllm_status st = ae->n > 1 ? ids_claim(ae, id) : VLLM_OK;
    if (st == VLLM_OK) {
        const int r = pick(ae);
        st = a.pooling ? replica_add_pooling_request(ae->reps[r], id, prompt, a.pool, out)
                       : replica_add_request(ae->reps[r], id, prompt, a.params, out);
        if (ae->n > 1) {
            pthread_mutex_lock(&ae->mu);
            ae->picked[r]--;
            pthread_mutex_unlock(&ae->mu);
            if (st != VLLM_OK) ids_release(ae, id); /* (the error stays the replica's) */
        }
    }
    leave(ae);
    return st;
}

vllm_status vllm_async_add_request(vllm_async_engine *ae, const char *request_id, const vllm_prompt *prompt,
                                   const vllm_sampling_params *params, vllm_stream **out) {
    return add(ae, request_id, prompt, (add_args){.params = params}, out);
}

vllm_status vllm_async_add_pooling_request(vllm_async_engine *ae, const char *request_id, const vllm_prompt *prompt,
                                           const vllm_pooling_params *params, vllm_stream **out) {
    return add(ae, request_id, prompt, (add_args){.pool = params, .pooling = true}, out);
}

vllm_status vllm_async_abort(vllm_async_engine *ae, const char *request_id) {
    if (!ae || !request_id) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_async_abort: engine or request id missing");
    if (!enter(ae)) return vt_error(VLLM_ERR_NOT_FOUND, "no unfinished request '%s'", request_id);
    bool found = false;
    for (int r = 0; r < ae->n && !found; r++) found = replica_abort(ae->reps[r], request_id) == VLLM_OK;
    leave(ae);
    return found ? VLLM_OK : vt_error(VLLM_ERR_NOT_FOUND, "no unfinished request '%s'", request_id);
}

/* ---- test hooks (async_engine.h) ---- */

void async_engine_fail_next_step(vllm_async_engine *ae) {
    for (int r = 0; r < ae->n; r++) replica_fail_next_step(ae->reps[r]);
}

void async_engine_pause(vllm_async_engine *ae, bool paused) {
    for (int r = 0; r < ae->n; r++) replica_pause(ae->reps[r], paused);
}

void async_engine_pause_after(vllm_async_engine *ae, int steps) {
    for (int r = 0; r < ae->n; r++) replica_pause_after(ae->reps[r], steps);
}

size_t async_engine_steps(vllm_async_engine *ae) {
    size_t n = 0;
    for (int r = 0; r < ae->n; r++) n += replica_steps(ae->reps[r]);
    return n;
}
