/* tpg_group.c: a tensor-parallel group of threads (and of nodes): barrier, all-reduce, all-gather, broadcast. */
#include "dist/tpg_group.h"

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct tpg_group {
    int size;
    int first, local;            /* this process's ranks: first .. first + local - 1 */
    tpn_net *net;                /* the other nodes' links, or NULL */
    void *scratch;               /* a node group's exchange buffer (its first rank's) */
    size_t scratch_cap;
    uint32_t seq;                /* collectives exchanged with the other nodes (their messages' tag) */
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
    g->local = size;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return VLLM_OK;
}

vllm_status tpg_create_nodes(int size, tpn_net *net, tpg_group **out) {
    const int nn = tpn_nnodes(net);
    if (size < nn || size % nn) {
        *out = NULL;
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor_parallel_size %d over %d nodes: each node takes an equal share "
                        "(a multiple of the nodes)", size, nn);
    }
    vllm_status st = tpg_create(size, out);
    if (st) return st;
    (*out)->local = size / nn;
    (*out)->first = tpn_node_rank(net) * (size / nn);
    (*out)->net = net;
    return VLLM_OK;
}

int tpg_first_rank(const tpg_group *g) { return g->first; }
int tpg_local_size(const tpg_group *g) { return g->local; }
tpn_net *tpg_net(const tpg_group *g) { return g->net; }
bool tpg_healthy(const tpg_group *g, char *why, size_t cap) { return !g->net || tpn_probe(g->net, why, cap); }

void tpg_free(tpg_group *g) {
    if (!g) return;
    tpn_close(g->net);
    free(g->scratch);
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
    if (g->net) tpn_shutdown(g->net, TPN_DATA, why); /* the other nodes' ranks must not wait for these */
}

void tpg_reset(tpg_group *g) {
    pthread_mutex_lock(&g->mu);
    if (g->net && tpn_failed(g->net, TPN_DATA)) { /* the links stay down: so does the group */
        pthread_mutex_unlock(&g->mu);
        return;
    }
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
        if (++g->arrived == g->local) {
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
    if (rank >= g->first && rank < g->first + g->local) return VLLM_OK;
    tpg_abort(g, "a collective was called with a rank outside the group");
    return vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel rank %d outside a group of %d", rank, g->size);
}

/* Publishes this rank's buffer for the collective and waits for the others'. */
static vllm_status publish(tpg_group *g, int rank, const void *p) {
    vllm_status st = check_rank(g, rank);
    if (st) return st;
    g->ptr[rank - g->first] = p; /* read by the others only after the barrier below */
    return wait_all(g, rank);
}

/* ---- several nodes: the first rank of each node exchanges the node's part (node 0 in the middle) ---- */

enum { OP_BARRIER = 1, OP_ALL_REDUCE, OP_ALL_GATHER, OP_BROADCAST };

static bool scratch_fit(tpg_group *g, size_t bytes) {
    if (bytes <= g->scratch_cap) return true;
    void *p = realloc(g->scratch, bytes);
    if (!p) return false;
    g->scratch = p;
    g->scratch_cap = bytes;
    return true;
}

/* Node 0's side: every node's part of the collective (bytes per rank) and the result sent back; the result in
 * scratch (all-reduce: bytes of floats; all-gather: size * bytes; broadcast: bytes). */
static vllm_status exchange_root(tpg_group *g, int op, uint32_t kind, size_t bytes, int root) {
    tpn_net *net = g->net;
    const int nn = tpn_nnodes(net), L = g->local;
    vllm_status st = VLLM_OK;
    size_t res = 0; /* the result's bytes */
    if (op == OP_BARRIER) {
        for (int k = 1; k < nn && !st; k++) st = tpn_recv_exact(net, k, TPN_DATA, kind, NULL, 0, "a barrier");
    } else if (op == OP_ALL_REDUCE) {
        res = bytes;
        const size_t part = (size_t)L * bytes;
        if (!scratch_fit(g, bytes + (size_t)(nn - 1) * part))
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a tensor-parallel all-reduce over nodes)");
        char *remote = (char *)g->scratch + bytes;
        for (int k = 1; k < nn && !st; k++)
            st = tpn_recv_exact(net, k, TPN_DATA, kind, remote + (size_t)(k - 1) * part, part, "an all-reduce");
        if (st) return st;
        const int64_t n = (int64_t)(bytes / sizeof(float));
        float *sum = g->scratch;
        for (int64_t i = 0; i < n; i++) { /* rank order: this node's ranks, then each node's */
            float s = ((const float *)g->ptr[0])[i];
            for (int j = 1; j < L; j++) s += ((const float *)g->ptr[j])[i];
            for (int k = 0; k < (nn - 1) * L; k++) s += ((const float *)remote)[(size_t)k * (size_t)n + (size_t)i];
            sum[i] = s;
        }
    } else if (op == OP_ALL_GATHER) {
        res = (size_t)g->size * bytes;
        if (!scratch_fit(g, res)) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (an all-gather over nodes)");
        for (int j = 0; j < L; j++) if (bytes) memcpy((char *)g->scratch + (size_t)j * bytes, g->ptr[j], bytes);
        for (int k = 1; k < nn && !st; k++)
            st = tpn_recv_exact(net, k, TPN_DATA, kind, (char *)g->scratch + (size_t)k * L * bytes, (size_t)L * bytes,
                                "an all-gather");
    } else { /* broadcast */
        res = bytes;
        const int rn = root / L;
        if (!scratch_fit(g, bytes)) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a broadcast over nodes)");
        if (rn == 0) {
            if (bytes) memcpy(g->scratch, g->ptr[root], bytes);
        } else {
            st = tpn_recv_exact(net, rn, TPN_DATA, kind, g->scratch, bytes, "a broadcast");
        }
    }
    for (int k = 1; k < nn && !st; k++) {
        if (op == OP_BROADCAST && k == root / L) continue;
        const void *p = g->scratch;
        st = tpn_send(net, k, TPN_DATA, kind, 1, &p, &res);
    }
    return st;
}

/* Another node's side: its ranks' buffers to node 0, the result back into scratch. */
static vllm_status exchange_node(tpg_group *g, int op, uint32_t kind, size_t bytes, int root) {
    tpn_net *net = g->net;
    const int L = g->local;
    const bool sends = op != OP_BROADCAST || root / L == tpn_node_rank(net);
    const bool gets = op != OP_BROADCAST || !sends;
    const size_t res = op == OP_ALL_GATHER ? (size_t)g->size * bytes : op == OP_BARRIER ? 0 : bytes;
    vllm_status st = VLLM_OK;
    if (sends) {
        size_t lens[TPG_MAX_RANKS] = {0};
        const void *parts[TPG_MAX_RANKS] = {0};
        int np = 0;
        if (op == OP_BROADCAST) {
            parts[np] = g->ptr[root - g->first], lens[np++] = bytes;
        } else if (op != OP_BARRIER) {
            for (int j = 0; j < L; j++) parts[np] = g->ptr[j], lens[np++] = bytes;
        }
        st = tpn_send(net, 0, TPN_DATA, kind, np, parts, lens);
        if (!st && op == OP_BROADCAST && bytes) { /* this node's other ranks copy it from scratch */
            if (!scratch_fit(g, bytes)) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a broadcast over nodes)");
            memcpy(g->scratch, g->ptr[root - g->first], bytes);
        }
    }
    if (!st && gets) {
        if (!scratch_fit(g, res)) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (a collective over nodes)");
        st = tpn_recv_exact(net, 0, TPN_DATA, kind, g->scratch, res, "a collective's result");
    }
    return st;
}

/* A collective of a node group: publish, the first rank's exchange, each rank's copy of the result. */
static vllm_status span(tpg_group *g, int rank, void *x, int op, size_t bytes, int root, void *out) {
    vllm_status st = publish(g, rank, x);
    if (st) return st;
    if (rank == g->first) {
        const uint32_t kind = (uint32_t)op << 24 | (g->seq++ & 0xffffffu);
        st = tpn_node_rank(g->net) == 0 ? exchange_root(g, op, kind, bytes, root)
                                        : exchange_node(g, op, kind, bytes, root);
        if (st) tpg_abort(g, vllm_last_error()); /* this node's other ranks, and every other node */
    }
    if ((st = wait_all(g, rank))) return st;
    if (op == OP_ALL_REDUCE && bytes) memcpy(x, g->scratch, bytes);
    else if (op == OP_ALL_GATHER && bytes) memcpy(out, g->scratch, (size_t)g->size * bytes);
    else if (op == OP_BROADCAST && rank != root && bytes) memcpy(x, g->scratch, bytes);
    return wait_all(g, rank); /* scratch is free again before anyone returns */
}

vllm_status tpg_barrier(tpg_group *g, int rank) {
    if (g->net) return span(g, rank, NULL, OP_BARRIER, 0, 0, NULL);
    vllm_status st = check_rank(g, rank);
    return st ? st : wait_all(g, rank);
}

vllm_status tpg_all_reduce_f32(tpg_group *g, int rank, float *x, int64_t n) {
    if (g->net) return span(g, rank, x, OP_ALL_REDUCE, n > 0 ? (size_t)n * sizeof *x : 0, 0, NULL);
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
    if (g->net) return span(g, rank, (void *)x, OP_ALL_GATHER, bytes, 0, out);
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
    if (g->net) return span(g, rank, x, OP_BROADCAST, bytes, root, NULL);
    vllm_status st = publish(g, rank, x);
    if (st) return st;
    if (rank != root && bytes) memcpy(x, g->ptr[root], bytes);
    return wait_all(g, rank);
}
