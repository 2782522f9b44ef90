/* model_tp.c: a tensor-parallel model's other ranks: this node's threads, and the other nodes' (their commands). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "dist/tpg_group.h"
#include "model/model_internal.h"

/* Commands (the worker threads', and node 0's messages on the control links, whose replies are TPW_REPLY: int32
 * status then the error text; TPW_READY once a node has loaded: status then its config summary or error). */
typedef enum { TPW_CACHE_CREATE = 1, TPW_CACHE_FREE, TPW_RESERVE, TPW_FORWARD, TPW_GRAPHS, TPW_EXIT, TPW_REPLY,
               TPW_READY } tpw_kind;

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
    int n;                   /* ranks, the driver and other nodes' included */
    int nw;                  /* this node's worker threads */
    tp_worker *w;            /* node 0: ranks 1 .. L - 1 at w[0 .. L - 2]; node k: ranks k L .. k L + L - 1 */
    tpg_group *g;
    tpn_net *net;            /* several nodes: the control links (node 0's to each, a node's to node 0), else NULL */
    vllm_status sent[TPN_MAX_NODES]; /* node 0: the last command's send to each node */
    void *wire;              /* node 0: the forward batch packed for the other nodes (grown, reused every step) */
    size_t wire_cap;
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
        case TPW_GRAPHS: st = model_enable_graphs_rank(w->m, c.a, c.b); break;
        case TPW_FORWARD: {
            const tensor *lg = NULL;
            st = w->cache ? model_forward_rank(w->m, w->cache, c.batch, &lg)
                          : vt_error(VLLM_ERR_INTERNAL, "a forward before the rank's cache exists");
            const vllm_status s2 = w->be->ops->synchronize(w->be); /* the ops' own failures */
            if (st == VLLM_OK) st = s2;
            break;
        }
        case TPW_EXIT: return NULL;
        case TPW_REPLY:
        case TPW_READY: break; /* messages, never posted */
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

/* This node's workers take the command. */
static void post_local(struct model_tp *t, tpw_cmd c) {
    pthread_mutex_lock(&t->mu);
    t->cmd = c;
    t->done = 0;
    t->seq++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Node 0: the command to every other node too (before rank 0 starts on it: their ranks meet it in collectives). */
static void post(struct model_tp *t, tpw_cmd c) {
    post_local(t, c);
    if (!t->net || tpn_node_rank(t->net) != 0) return;
    const int32_t args[4] = {c.a, c.b, c.c, c.d};
    const size_t bb = c.kind == TPW_FORWARD ? tpw_batch_bytes(c.batch) : 0;
    if (bb > t->wire_cap) {
        void *p = realloc(t->wire, bb);
        if (p) t->wire = p, t->wire_cap = bb;
    }
    void *batch = bb && bb <= t->wire_cap ? t->wire : NULL;
    if (batch) tpw_batch_pack(c.batch, batch);
    const void *parts[2] = {args, batch};
    const size_t lens[2] = {sizeof args, bb};
    for (int k = 1; k < tpn_nnodes(t->net); k++) {
        t->sent[k] = bb && !batch ? vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a batch for node %d)", k)
                                  : tpn_send(t->net, k, TPN_CTL, (uint32_t)c.kind, 2, parts, lens);
        if (t->sent[k] != VLLM_OK) tpg_abort(t->g, vllm_last_error()); /* the ranks here must not wait for node k */
    }
}

/* Waits for this node's workers; the first one's failure as the call's error. */
static vllm_status wait_local(struct model_tp *t) {
    pthread_mutex_lock(&t->mu);
    while (t->done < t->nw) pthread_cond_wait(&t->done_cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->nw; i++)
        if (t->w[i].st != VLLM_OK)
            return vt_error(t->w[i].st, "tensor-parallel rank %d: %s", t->w[i].rank, t->w[i].err);
    return VLLM_OK;
}

/* A status message from node k (TPW_REPLY or TPW_READY): *node_st its status, text its message. */
static vllm_status recv_status(tpn_net *net, int k, uint32_t kind, vllm_status *node_st, char *text, size_t cap) {
    uint32_t got;
    uint64_t len;
    int32_t s;
    vllm_status st = tpn_recv_header(net, k, TPN_CTL, &got, &len);
    if (st == VLLM_OK && (got != kind || len < 4 || len - 4 >= cap))
        st = vt_error(VLLM_ERR_BACKEND, "tensor-parallel node %d answered out of turn (kind %u, %llu bytes)", k, got,
                      (unsigned long long)len);
    if (st == VLLM_OK) st = tpn_recv_body(net, k, TPN_CTL, &s, 4);
    if (st == VLLM_OK) st = tpn_recv_body(net, k, TPN_CTL, text, len - 4);
    if (st != VLLM_OK) return st;
    text[len - 4] = '\0';
    *node_st = (vllm_status)s;
    return VLLM_OK;
}

/* Waits for every worker here and (node 0) every other node's reply; the first failure as the call's error. */
static vllm_status wait_done(struct model_tp *t) {
    vllm_status st = wait_local(t);
    char msg[640];
    snprintf(msg, sizeof msg, "%s", st ? vllm_last_error() : "");
    for (int k = 1; t->net && tpn_node_rank(t->net) == 0 && k < tpn_nnodes(t->net); k++) {
        vllm_status ns = t->sent[k];
        char text[512] = "";
        if (ns == VLLM_OK) {
            const vllm_status rs = recv_status(t->net, k, TPW_REPLY, &ns, text, sizeof text);
            if (rs != VLLM_OK) ns = rs;
        }
        if (ns != VLLM_OK && !text[0]) snprintf(text, sizeof text, "%s", vllm_last_error());
        if (ns != VLLM_OK && st == VLLM_OK) {
            st = ns;
            snprintf(msg, sizeof msg, "tensor-parallel node %d: %s", k, text);
        }
    }
    return st ? vt_error(st, "%s", msg) : VLLM_OK;
}

/* A model_tp over opt's group with nw worker threads (not started yet). */
static struct model_tp *tp_new(const model_load_options *opt, int nw) {
    struct model_tp *t = calloc(1, sizeof *t);
    if (t && nw > 0 && !(t->w = calloc((size_t)nw, sizeof *t->w))) {
        free(t);
        t = NULL;
    }
    if (!t) return NULL;
    t->n = tpg_size(opt->tp_group);
    t->nw = nw;
    t->g = opt->tp_group;
    t->net = tpg_net(opt->tp_group);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    return t;
}

/* Loads ranks first_worker .. first_worker + t->nw - 1 (this node's GPUs from device_id: its first rank on
 * device_id) and starts their threads. */
static vllm_status start_workers(struct model_tp *t, const char *dir, const model_load_options *opt, int first_worker) {
    vllm_status st = VLLM_OK;
    const int first = tpg_first_rank(t->g);
    for (int i = 0; i < t->nw && st == VLLM_OK; i++) {
        tp_worker *w = &t->w[i];
        const int r = first_worker + i;
        w->tp = t;
        w->rank = r;
        backend_options bo = *opt->tp_backend_options;
        bo.tp_group = opt->tp_group;
        bo.tp_rank = r;
        bo.device_id += r - first; /* a GPU each: device_id .. device_id + L - 1 on every node */
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
    return st;
}

/* What every node's shard must agree on (compared once the nodes have loaded). */
static void config_summary(const model *m, char *out, size_t cap) {
    const model_config *c = model_get_config(m);
    snprintf(out, cap, "%s: %d layers, hidden %d, %d heads, %d KV heads, intermediate %d, vocab %d", c->architecture,
             c->num_layers, c->hidden_size, c->num_heads, c->num_kv_heads, c->intermediate_size, c->vocab_size);
}

/* Stops and frees the workers of t, and t. */
static void tp_free(struct model_tp *t) {
    post_local(t, (tpw_cmd){.kind = TPW_EXIT});
    for (int i = 0; i < t->nw; i++) {
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
    free(t->wire);
    free(t);
}

vllm_status model_tp_start(model *m, const char *dir, const model_load_options *opt) {
    if (!opt->tp_group || !opt->tp_backend_options || tpg_size(opt->tp_group) != m->tp_size)
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor parallelism over %d ranks without their group", m->tp_size);
    struct model_tp *t = tp_new(opt, tpg_local_size(opt->tp_group) - 1);
    if (!t) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (tensor-parallel ranks)");
    m->tp = t;
    vllm_status st = start_workers(t, dir, opt, 1);
    /* making the workers' backends left this thread on the last one's GPU: rank 0's device again */
    if (m->be->ops->bind_thread) m->be->ops->bind_thread(m->be);
    /* the other nodes load their ranks meanwhile: each says when it is ready, and with what config */
    char mine[256];
    config_summary(m, mine, sizeof mine);
    for (int k = 1; t->net && k < tpn_nnodes(t->net); k++) {
        char text[512];
        vllm_status ns = VLLM_OK;
        LOG_I("tensor-parallel group: waiting for node %d to load its ranks", k);
        const vllm_status rs = recv_status(t->net, k, TPW_READY, &ns, text, sizeof text);
        if (rs != VLLM_OK && st == VLLM_OK) st = rs;
        else if (ns != VLLM_OK && st == VLLM_OK) st = vt_error(ns, "tensor-parallel node %d could not load: %s", k, text);
        else if (rs == VLLM_OK && ns == VLLM_OK && strcmp(text, mine) && st == VLLM_OK)
            st = vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel node %d loaded another model: [%s], node 0 [%s]", k,
                          text, mine);
        else if (st == VLLM_OK) LOG_I("tensor-parallel group: node %d ready", k);
    }
    return st; /* on failure model_free (model_tp_stop) releases what was made */
}

/* The calling thread (the engine's: it may not be the one that loaded the model) on rank 0's device. */
static void bind_driver(model *m) {
    if (m->be->ops->bind_thread) m->be->ops->bind_thread(m->be);
}

void model_tp_stop(model *m) {
    struct model_tp *t = m->tp;
    if (!t) return;
    if (t->net && tpn_node_rank(t->net) == 0) { /* the other nodes free their ranks and return */
        char keep[512]; /* the error that brought us here (a failed load), not a lost node's */
        snprintf(keep, sizeof keep, "%s", vllm_last_error());
        bool lost = false;
        for (int k = 1; k < tpn_nnodes(t->net); k++)
            lost |= tpn_send(t->net, k, TPN_CTL, TPW_EXIT, 0, NULL, NULL) != VLLM_OK;
        if (lost && keep[0]) vt_error(VLLM_ERR_BACKEND, "%s", keep);
        else if (lost) vt_error_clear();
    }
    tp_free(t);
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

vllm_status model_tp_enable_graphs(model *m, int max_batch, int max_seq_len) {
    bind_driver(m);
    post(m->tp, (tpw_cmd){.kind = TPW_GRAPHS, .a = max_batch, .b = max_seq_len});
    return wait_done(m->tp);
}

vllm_status model_tp_reserve(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq) {
    bind_driver(m);
    post(m->tp, (tpw_cmd){.kind = TPW_RESERVE, .a = max_tokens, .b = max_seqs, .c = max_blocks_per_seq});
    const vllm_status st = model_reserve_rank(m, max_tokens, max_seqs, max_blocks_per_seq);
    const vllm_status ws = wait_done(m->tp);
    return st != VLLM_OK ? st : ws;
}

/* ---- a node other than node 0: its ranks, run on node 0's commands ---- */

/* The reply to node 0 (kind TPW_REPLY / TPW_READY): st and its message (or the ready node's config summary). */
static vllm_status send_status(tpn_net *net, uint32_t kind, vllm_status st, const char *text) {
    const int32_t s = st;
    const void *parts[2] = {&s, text};
    const size_t lens[2] = {4, strlen(text)};
    return tpn_send(net, 0, TPN_CTL, kind, 2, parts, lens);
}

vllm_status model_tp_node_run(const char *dir, const model_load_options *opt) {
    tpn_net *net = opt->tp_group ? tpg_net(opt->tp_group) : NULL;
    if (!net || tpn_node_rank(net) == 0 || !opt->tp_backend_options || !opt->tp_device)
        return vt_error(VLLM_ERR_INVALID_ARG, "model_tp_node_run: a node other than node 0 of a group over nodes");
    struct model_tp *t = tp_new(opt, tpg_local_size(opt->tp_group));
    if (!t) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (tensor-parallel ranks)");
    const int node = tpn_node_rank(net);
    vllm_status st = start_workers(t, dir, opt, tpg_first_rank(opt->tp_group));
    char text[512];
    if (st == VLLM_OK) config_summary(t->w[0].m, text, sizeof text);
    else snprintf(text, sizeof text, "%s", vllm_last_error());
    vllm_status ls = send_status(net, TPW_READY, st, text);
    if (st == VLLM_OK && ls == VLLM_OK)
        LOG_I("tensor-parallel node %d: ranks %d .. %d loaded; running node 0's steps", node, t->w[0].rank,
              t->w[t->nw - 1].rank);
    if (st == VLLM_OK) st = ls;
    void *buf = NULL;
    size_t cap = 0;
    uint64_t steps = 0;
    while (st == VLLM_OK) {
        uint32_t kind;
        uint64_t len;
        if ((st = tpn_recv_header(net, 0, TPN_CTL, &kind, &len))) break;
        if (len > cap) { /* 8-aligned: malloc's */
            void *p = len <= ((uint64_t)1 << 40) ? realloc(buf, (size_t)len) : NULL;
            if (!p) {
                st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a %llu-byte command from node 0)",
                              (unsigned long long)len);
                break;
            }
            buf = p;
            cap = (size_t)len;
        }
        if ((st = tpn_recv_body(net, 0, TPN_CTL, buf, len))) break;
        if (kind == TPW_EXIT) break;
        int32_t a[4] = {0};
        fwd_batch b;
        vllm_status cs = VLLM_OK;
        if (kind < TPW_CACHE_CREATE || kind > TPW_GRAPHS || len < sizeof a)
            cs = vt_error(VLLM_ERR_BACKEND, "node %d: a command it does not know from node 0 (kind %u)", node, kind);
        else
            memcpy(a, buf, sizeof a);
        if (cs == VLLM_OK && kind == TPW_FORWARD) cs = tpw_batch_unpack((char *)buf + 16, (size_t)len - 16, &b);
        else if (cs == VLLM_OK && len != sizeof a)
            cs = vt_error(VLLM_ERR_BACKEND, "node %d: a command of %llu bytes from node 0", node, (unsigned long long)len);
        if (cs != VLLM_OK) { /* not node 0's protocol: the group cannot go on */
            st = cs;
            break;
        }
        post_local(t, (tpw_cmd){.kind = (tpw_kind)kind, .a = a[0], .b = a[1], .c = a[2], .d = a[3],
                                .batch = kind == TPW_FORWARD ? &b : NULL});
        cs = wait_local(t);
        if (cs != VLLM_OK) tpg_abort(t->g, vllm_last_error());
        if (kind == TPW_FORWARD && ++steps % 1000 == 0) LOG_D("tensor-parallel node %d: %llu steps", node,
                                                               (unsigned long long)steps);
        st = send_status(net, TPW_REPLY, cs, cs ? vllm_last_error() : "");
    }
    free(buf);
    if (st != VLLM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vllm_last_error());
        tpg_abort(t->g, msg); /* workers blocked in a collective return */
        tp_free(t);
        return vt_error(st, "tensor-parallel node %d stopped: %s", node, msg);
    }
    LOG_I("tensor-parallel node %d: node 0 ended the group after %llu steps", node, (unsigned long long)steps);
    tp_free(t);
    return VLLM_OK;
}

vllm_status model_check_health(const model *m) {
    const struct model_tp *t = m ? m->tp : NULL;
    char why[300];
    if (!t || tpg_healthy(t->g, why, sizeof why)) return VLLM_OK;
    return vt_error(VLLM_ERR_BACKEND, "the tensor-parallel group lost a node: %s; restart every node", why);
}
