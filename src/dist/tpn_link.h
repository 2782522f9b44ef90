/*
 * tpn_link.h: the TCP links between the hosts ("nodes") of a tensor-parallel group spread over several machines
 * (issue 18 item 3; prefix tpn_). Node 0 (the engine's: scheduler, sampler, rank 0) listens on master_port; each
 * other node connects to master_addr:master_port (vLLM's / torchrun's --nnodes, --node-rank, --master-addr,
 * --master-port) with two links: the control link (node 0's commands to the node: load, cache, forward, exit; the
 * node's replies) and the data link (the CPU collectives' bytes, and the NCCL id for GPU ranks). Each link opens
 * with a hello naming the node and a fingerprint of the options every node must share; node 0 refuses a node
 * whose fingerprint differs from its own, naming both.
 *
 * Messages are framed: a 16-byte header (kind, length) and the body. A link that fails (the peer died, closed,
 * or sent what the protocol does not expect) stays failed: every later call on it returns VLLM_ERR_BACKEND
 * naming the peer and why. TCP keep-alives are on, so a host that vanished without closing is noticed in about a
 * minute rather than never.
 */
#ifndef VLLM_DIST_TPN_LINK_H
#define VLLM_DIST_TPN_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

typedef struct tpn_net tpn_net;

#define TPN_MAX_NODES 64
typedef enum { TPN_CTL = 0, TPN_DATA = 1 } tpn_chan;

typedef struct tpn_options {
    int nnodes;              /* 2 .. TPN_MAX_NODES */
    int node_rank;           /* 0: listens; others connect */
    const char *master_addr; /* node 0's address (a name or a numeric IPv4 / IPv6 address) */
    int master_port;         /* 1 .. 65535 */
    const char *fingerprint; /* what every node's options must agree on (compared whole) */
    double timeout_s;        /* how long node 0 waits for the others, and a node for node 0 (0: 600 s) */
} tpn_options;

/* Node 0: listens and accepts both links of every other node; other nodes: connect (retrying until node 0
 * listens). Progress lines every 10 s while waiting. */
vllm_status tpn_open(const tpn_options *o, tpn_net **out);
/* Closes every link (a peer blocked on one sees it closed). */
void tpn_close(tpn_net *n);
int tpn_nnodes(const tpn_net *n);
int tpn_node_rank(const tpn_net *n);

/* Sends one message of kind (the parts concatenated as its body) to peer (node 0: any other node; other nodes:
 * 0). Safe to call from one thread per (peer, chan) at a time. */
vllm_status tpn_send(tpn_net *n, int peer, tpn_chan ch, uint32_t kind, int nparts, const void *const *parts,
                     const size_t *lens);
/* Receives the next message's header from peer: its kind and body length (the body must be read next). */
vllm_status tpn_recv_header(tpn_net *n, int peer, tpn_chan ch, uint32_t *kind, uint64_t *len);
/* Reads len bytes of the body. */
vllm_status tpn_recv_body(tpn_net *n, int peer, tpn_chan ch, void *buf, uint64_t len);
/* A whole message whose kind and length are known: a different kind or length fails the link, naming both. */
vllm_status tpn_recv_exact(tpn_net *n, int peer, tpn_chan ch, uint32_t kind, void *buf, uint64_t len,
                           const char *what);
/* Shuts the links of chan down (every peer's): a thread blocked on one of them here or at the peer returns an
 * error. Callable from any thread; the links stay failed (why is kept for the messages). */
void tpn_shutdown(tpn_net *n, tpn_chan ch, const char *why);
/* True once chan's links were shut down or one failed. */
bool tpn_failed(const tpn_net *n, tpn_chan ch);
/* Whether every link is up: false (why in why[cap]) when one failed or was shut down, or its peer has closed it
 * (a look without reading: a node whose process ended is seen while the links are idle). Any thread. */
bool tpn_probe(tpn_net *n, char *why, size_t cap);

#endif
