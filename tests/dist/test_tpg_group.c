/* test_tpg_group.c: the tensor-parallel group (dist/tpg_group.h): collectives of 1 to 5 thread ranks against serial
 * results, bit for bit; many rounds (buffer reuse); an abort releases the waiting ranks. The same over nodes
 * (tpg_create_nodes: 2 to 4 nodes of 1 or 2 ranks linked over TCP on 127.0.0.1, broadcast roots on every node), an
 * abort on node 0 releasing the ranks of the others; bad node options refused. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/tpg_group.h"
#include "test.h"
#include "test_port.h"

enum { ROUNDS = 200, MAXN = 1037 };

typedef struct rank_ctx {
    tpg_group *g;
    int rank, size, failures;
    bool abort_test;
    vllm_status last;
} rank_ctx;

/* rank r's value at element i of round k: distinct per rank, so that a wrong sum order or a stale buffer shows */
static float val(int r, int k, int64_t i) {
    return (float)((r + 1) * 0.1 + k * 0.001 + (double)i * 1e-4) * (r % 2 ? -1.0f : 1.0f);
}

static void *rank_main(void *p) {
    rank_ctx *c = p;
    float *x = malloc(MAXN * sizeof *x);
    int32_t *gath = malloc((size_t)c->size * 8 * sizeof *gath);
    if (c->abort_test) { /* ranks 1.. wait in a barrier; rank 0 aborts instead of arriving */
        if (c->rank == 0) tpg_abort(c->g, "rank 0's forward failed");
        else c->last = tpg_barrier(c->g, c->rank);
        free(x);
        free(gath);
        return NULL;
    }
    for (int k = 0; k < ROUNDS; k++) {
        const int64_t n = (k * 97) % MAXN; /* 0 included, odd sizes, fewer elements than ranks */
        for (int64_t i = 0; i < n; i++) x[i] = val(c->rank, k, i);
        if (tpg_all_reduce_f32(c->g, c->rank, x, n) != VLLM_OK) c->failures++;
        for (int64_t i = 0; i < n; i++) {
            float want = val(0, k, i);
            for (int r = 1; r < c->size; r++) want += val(r, k, i);
            if (memcmp(&want, &x[i], sizeof want)) {
                c->failures++;
                break;
            }
        }
        int32_t mine[8];
        for (int j = 0; j < 8; j++) mine[j] = c->rank * 1000 + k * 8 + j;
        if (tpg_all_gather(c->g, c->rank, mine, sizeof mine, gath) != VLLM_OK) c->failures++;
        for (int r = 0; r < c->size; r++)
            for (int j = 0; j < 8; j++)
                if (gath[r * 8 + j] != r * 1000 + k * 8 + j) c->failures++;
        int64_t b[3] = {c->rank, k, -1};
        const int root = k % c->size;
        if (tpg_broadcast(c->g, c->rank, b, sizeof b, root) != VLLM_OK) c->failures++;
        if (b[0] != root || b[1] != k) c->failures++;
        if (tpg_barrier(c->g, c->rank) != VLLM_OK) c->failures++;
    }
    free(x);
    free(gath);
    return NULL;
}

static void run(int size, bool abort_test) {
    tpg_group *g = NULL;
    CHECK_OK(tpg_create(size, &g));
    if (!g) return;
    CHECK(tpg_size(g) == size);
    pthread_t th[8];
    rank_ctx c[8];
    for (int r = 0; r < size; r++) {
        c[r] = (rank_ctx){.g = g, .rank = r, .size = size, .abort_test = abort_test};
        CHECK(pthread_create(&th[r], NULL, rank_main, &c[r]) == 0);
    }
    for (int r = 0; r < size; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < size; r++) {
        CHECK_MSG(c[r].failures == 0, "%d ranks: rank %d saw %d wrong results", size, r, c[r].failures);
        if (abort_test && r > 0) CHECK_MSG(c[r].last == VLLM_ERR_BACKEND, "rank %d: status %d after the abort", r,
                                           c[r].last);
    }
    if (abort_test) { /* every later collective fails at once, naming the cause */
        float x[4] = {0};
        CHECK(tpg_all_reduce_f32(g, 0, x, 4) == VLLM_ERR_BACKEND);
        CHECK_MSG(strstr(vllm_last_error(), "rank 0's forward failed") != NULL, "why not named: %s", vllm_last_error());
    }
    tpg_free(g);
    printf("%d rank(s)%s: ok\n", size, abort_test ? ", abort" : "");
}

typedef struct node_ctx {
    tpn_options o;
    tpn_net *net;
    vllm_status st;
} node_ctx;

static void *open_main(void *p) {
    node_ctx *n = p;
    n->st = tpn_open(&n->o, &n->net);
    return NULL;
}

/* size ranks over nnodes nodes of this process: the collectives' results as one group's, bit for bit. */
static void run_nodes(int size, int nnodes, bool abort_test) {
    const int port = t_free_port();
    node_ctx nc[4];
    pthread_t th[8];
    for (int k = 0; k < nnodes; k++) {
        nc[k] = (node_ctx){.o = {.nnodes = nnodes, .node_rank = k, .master_addr = "127.0.0.1", .master_port = port,
                                 .fingerprint = "test", .timeout_s = 30}};
        CHECK(pthread_create(&th[k], NULL, open_main, &nc[k]) == 0);
    }
    for (int k = 0; k < nnodes; k++) pthread_join(th[k], NULL);
    tpg_group *g[4] = {0};
    bool ok = true;
    for (int k = 0; k < nnodes; k++) {
        CHECK_OK(nc[k].st);
        if (nc[k].st == VLLM_OK) CHECK_OK(tpg_create_nodes(size, nc[k].net, &g[k]));
        else ok = false;
        if (!g[k]) ok = false;
    }
    if (ok) {
        rank_ctx c[8];
        const int L = size / nnodes;
        for (int k = 0; k < nnodes; k++) CHECK(tpg_first_rank(g[k]) == k * L && tpg_local_size(g[k]) == L);
        for (int r = 0; r < size; r++) {
            c[r] = (rank_ctx){.g = g[r / L], .rank = r, .size = size, .abort_test = abort_test};
            CHECK(pthread_create(&th[r], NULL, rank_main, &c[r]) == 0);
        }
        for (int r = 0; r < size; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < size; r++) {
            CHECK_MSG(c[r].failures == 0, "%d ranks over %d nodes: rank %d saw %d wrong results", size, nnodes, r,
                      c[r].failures);
            if (abort_test && r > 0)
                CHECK_MSG(c[r].last == VLLM_ERR_BACKEND, "rank %d: status %d after the abort", r, c[r].last);
        }
        if (abort_test) { /* the group stays down on every node: tpg_reset does not revive it */
            float x[4] = {0};
            tpg_reset(g[1]);
            CHECK(tpg_all_reduce_f32(g[1], L, x, 4) == VLLM_ERR_BACKEND);
            CHECK(tpg_all_reduce_f32(g[0], 0, x, 4) == VLLM_ERR_BACKEND);
            CHECK_MSG(strstr(vllm_last_error(), "rank 0's forward failed") != NULL, "why not named: %s",
                      vllm_last_error());
        }
        float x[2] = {0}; /* a rank of another node is refused here */
        if (!abort_test) CHECK(tpg_all_reduce_f32(g[0], size - 1, x, 2) == VLLM_ERR_INVALID_ARG);
    }
    for (int k = 0; k < nnodes; k++) {
        if (g[k]) tpg_free(g[k]); /* closes the links */
        else tpn_close(nc[k].net);
    }
    printf("%d ranks over %d nodes%s: ok\n", size, nnodes, abort_test ? ", abort" : "");
}

int main(void) {
    for (int size = 1; size <= 5; size++) run(size, false);
    run_nodes(2, 2, false);
    run_nodes(4, 2, false);
    run_nodes(4, 4, false);
    run_nodes(4, 2, true);
    {
        tpn_net *net = NULL;
        tpn_options o = {.nnodes = 1, .node_rank = 0, .master_addr = "127.0.0.1", .master_port = 1, .fingerprint = "x"};
        CHECK(tpn_open(&o, &net) == VLLM_ERR_INVALID_ARG && !net);
        o.nnodes = 2, o.node_rank = 2;
        CHECK(tpn_open(&o, &net) == VLLM_ERR_INVALID_ARG && !net);
        o.node_rank = 1, o.master_port = 0;
        CHECK(tpn_open(&o, &net) == VLLM_ERR_INVALID_ARG && !net);
        o.master_port = t_free_port(), o.timeout_s = 0.5; /* nobody listens there */
        CHECK(tpn_open(&o, &net) == VLLM_ERR_IO && !net);
        CHECK_MSG(strstr(vllm_last_error(), "could not join"), "not named: %s", vllm_last_error());
    }
    run(3, true);
    tpg_group *g = NULL;
    CHECK(tpg_create(0, &g) == VLLM_ERR_INVALID_ARG && g == NULL);
    CHECK(tpg_create(TPG_MAX_RANKS + 1, &g) == VLLM_ERR_INVALID_ARG);
    CHECK_OK(tpg_create(2, &g));
    int64_t b = 0;
    CHECK(tpg_broadcast(g, 0, &b, sizeof b, 5) == VLLM_ERR_INVALID_ARG); /* a bad root: refused, the group aborted */
    CHECK(tpg_barrier(g, 1) == VLLM_ERR_BACKEND);
    tpg_free(g);
    TEST_END();
}
