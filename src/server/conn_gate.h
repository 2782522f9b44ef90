/*
 * conn_gate.h: admission of TCP connections for `vllmc serve`: the accept
 * loop, the total and per-client connection caps, and the answer to a
 * connection over a cap (503 with OpenAI's error JSON and Retry-After,
 * then a graceful close), so that overload is never a TCP reset.
 *
 * A connection the gate admits is counted as held and handed to the admit
 * callback (server.c: MHD_add_connection); the server reports its end with
 * conn_gate_untrack (from MHD's connection-closed notification), or at once
 * when the hand-over fails. Only the gate's thread admits, so the count a
 * decision reads includes every connection admitted before it.
 *
 * Clients are keyed by address: an IPv4 address (also when it arrives
 * IPv4-mapped on an IPv6 socket), or an IPv6 /64 prefix (what one host or
 * one subscriber usually gets), so a single attacker cannot spread over
 * many addresses of its own network.
 */
#ifndef VLLM_SERVER_CONN_GATE_H
#define VLLM_SERVER_CONN_GATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "vllm.h"

typedef struct conn_gate conn_gate;

/* A client's key: 16 bytes (IPv4 as ::ffff:a.b.c.d, IPv6 as its /64). */
typedef struct conn_client_key {
    uint8_t b[16];
} conn_client_key;

/* Admits a connection (takes the socket: closes it on failure); false when it failed
 * (the connection is then no longer counted). */
typedef bool (*conn_gate_admit_fn)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen);

typedef struct conn_gate_options {
    int listen_fd;               /* a listening socket; the gate owns it from conn_gate_start on */
    int max_connections;         /* connections held at once (> 0) */
    int max_per_client;          /* of them from one client key (0 = no cap) */
    int retry_after;             /* seconds in Retry-After of a 503 */
    conn_gate_admit_fn admit;
    void *ctx;
} conn_gate_options;

vllm_status conn_gate_start(const conn_gate_options *opt, conn_gate **out);
/* Stops accepting and closes the listening socket (new connections are refused by the kernel). */
void conn_gate_stop_accepting(conn_gate *g);
/* Stops the thread, closes what it still holds (rejected sockets draining) and frees. */
void conn_gate_free(conn_gate *g);

/* The key of an address. */
conn_client_key conn_client_key_of(const struct sockaddr *addr);
/* A held connection of that client has closed. */
void conn_gate_untrack(conn_gate *g, conn_client_key key);
/* Connections held now, and of them from one client. */
int conn_gate_held(conn_gate *g, const conn_client_key *key_or_null);
/* Connections refused so far (over a cap). */
uint64_t conn_gate_refused(conn_gate *g);

struct oai_error;
/* Writes a whole error response (OpenAI error JSON, "Connection: close",
 * Retry-After when retry_after > 0) on a raw socket without blocking; for
 * sockets nobody else is writing to. True when all of it was sent. */
bool conn_send_error(int fd, const struct oai_error *err, int retry_after);

#endif
