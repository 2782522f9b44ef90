/*
 * tpg_group.h: the collectives of a tensor-parallel group whose ranks are threads of one process (prefix tpg_;
 * core/threadpool.h owns tp_): the CPU multi-rank backend's all-reduce (issue 18: TP=2 / 4 against TP=1 in
 * CI) and the rendezvous of the in-process GPU ranks (NCCL's unique id is broadcast through it).
 *
 * Each collective is called by every one of the group's `size` ranks, each from its own thread, with the same
 * sizes; it returns when every rank's part is done. The reductions are deterministic: element i of an
 * all-reduce is x_0[i] + x_1[i] + ... + x_{size-1}[i] in rank order, the same bits on every rank, whatever the
 * thread timing (vLLM's custom all-reduce likewise sums in a fixed order).
 *
 * Failure: tpg_abort (a rank that cannot go on, e.g. its forward failed) marks the group aborted; every
 * collective then returns VLLM_ERR_BACKEND (naming why) on every rank, those already waiting included, so no
 * rank is left blocked. tpg_reset, once every rank is out of its collectives, makes it usable again.
 *
 * Several hosts (tpg_create_nodes): the ranks are spread over nodes (processes, one per host), each holding an
 * equal share of consecutive ranks (node k: k * L .. k * L + L - 1); here only this node's ranks call. One thread a
 * node (its first rank's) carries the node's part over the data links of dist/tpn_link.h, node 0 in the middle:
 * it gathers every rank's buffer, sums in rank order (the same bits as one process's group) and sends the result
 * back. An abort there shuts the data links down, so every node's ranks return the error; such a group stays
 * aborted (tpg_reset does not revive it): the engine's later steps fail at once, naming why.
 */
#ifndef VLLM_DIST_TPG_GROUP_H
#define VLLM_DIST_TPG_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "dist/tpn_link.h"
#include "vllm.h"

typedef struct tpg_group tpg_group;

/* A group of size ranks (1 <= size <= TPG_MAX_RANKS). */
#define TPG_MAX_RANKS 64
vllm_status tpg_create(int size, tpg_group **out);
/* After every rank has returned from its last collective. */
void tpg_free(tpg_group *g);
int tpg_size(const tpg_group *g);
/* A group of size ranks over net's nodes (size divisible by the nodes); the group owns net (tpg_free closes it). */
vllm_status tpg_create_nodes(int size, tpn_net *net, tpg_group **out);
/* The ranks of this process: first .. first + local - 1 (0 .. size - 1 without nodes). */
int tpg_first_rank(const tpg_group *g);
int tpg_local_size(const tpg_group *g);
/* The links to the other nodes, or NULL for a group of one process. */
tpn_net *tpg_net(const tpg_group *g);
/* False (why in why[cap]) when a group over nodes lost one of them (tpn_probe); true for a group of one process. */
bool tpg_healthy(const tpg_group *g, char *why, size_t cap);

/* Waits for every rank. */
vllm_status tpg_barrier(tpg_group *g, int rank);
/* x (n floats, each rank its own buffer) = the sum over the ranks, in rank order. */
vllm_status tpg_all_reduce_f32(tpg_group *g, int rank, float *x, int64_t n);
/* out (size * bytes) = every rank's x (bytes each) in rank order; out must not overlap any rank's x. */
vllm_status tpg_all_gather(tpg_group *g, int rank, const void *x, size_t bytes, void *out);
/* Every rank's x (bytes) = root's. */
vllm_status tpg_broadcast(tpg_group *g, int rank, void *x, size_t bytes, int root);
/* Marks the group aborted (why is kept for the others' error message); callable from any thread, any time. */
void tpg_abort(tpg_group *g, const char *why);
/* Makes an aborted group usable again; only while no rank is inside a collective (e.g. once every rank has
 * returned from a failed step). */
void tpg_reset(tpg_group *g);

#endif
