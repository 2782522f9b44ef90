/*
 * conn_gate.c: the accept loop of `vllmc serve`: total and per-client
 * connection caps, a 503 (OpenAI error JSON, Retry-After) for a connection
 * over a cap followed by a graceful close, and the hand-over of admitted
 * sockets to the HTTP server (see conn_gate.h).
 *
 * A refused socket gets its answer at once (it fits an empty socket
 * buffer), then a half-close (FIN after the answer) and up to
 * DRAIN_SECONDS of reading and dropping what the client still sends before
 * it is closed: closing a socket with unread input makes the kernel send a
 * reset, which can destroy the answer before the client reads it.
 * Out of file descriptors (EMFILE), a spare descriptor kept for the
 * purpose is given up to accept the connection and answer it, so the
 * backlog never fills with clients that get no answer.
 */
#include "server/conn_gate.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "server/oai_protocol.h"

#define BUCKETS 4096          /* client table (chained) */
#define MAX_DRAINING 1024     /* refused sockets kept open to drain at once; more are closed at once */
#define DRAIN_SECONDS 2.0
#define ACCEPT_BURST 64       /* accepts per wake-up before the draining sockets get a turn */

typedef struct client_ent {
    conn_client_key key;
    int count;
    struct client_ent *next;
} client_ent;

typedef struct draining {
    int fd;
    double deadline;
} draining;

struct conn_gate {
    conn_gate_options opt;
    pthread_t thread;
    bool thread_started;
    int wake[2];               /* self-pipe: stop requests */
    int spare_fd;              /* given up when accept fails with EMFILE */

    pthread_mutex_t mu;        /* guards the fields below */
    client_ent *buckets[BUCKETS];
    int held;
    uint64_t refused;
    bool stop_accepting, quit;

    draining drain[MAX_DRAINING]; /* the gate thread's own */
    int num_draining;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

conn_client_key conn_client_key_of(const struct sockaddr *addr) {
    conn_client_key k;
    memset(&k, 0, sizeof k);
    if (!addr) return k;
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        k.b[10] = k.b[11] = 0xff;
        memcpy(&k.b[12], &a->sin_addr, 4);
    } else if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) memcpy(k.b, &a->sin6_addr, 16);
        else memcpy(k.b, &a->sin6_addr, 8); /* the /64 */
    }
    return k;
}

static size_t bucket_of(const conn_client_key *k) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < 16; i++) h = (h ^ k->b[i]) * 1099511628211ull;
    return (size_t)(h % BUCKETS);
}

static client_ent **find(conn_gate *g, const conn_client_key *k) {
    client_ent **p = &g->buckets[bucket_of(k)];
    while (*p && memcmp((*p)->key.b, k->b, 16) != 0) p = &(*p)->next;
    return p;
}

static void track(conn_gate *g, conn_client_key key) {
    pthread_mutex_lock(&g->mu);
    g->held++;
    client_ent **p = find(g, &key);
    if (!*p) {
        client_ent *e = calloc(1, sizeof *e);
        if (e) { /* without memory the client is counted in the total only */
            e->key = key;
            *p = e;
        }
    }
    if (*p) (*p)->count++;
    pthread_mutex_unlock(&g->mu);
}

void conn_gate_untrack(conn_gate *g, conn_client_key key) {
    pthread_mutex_lock(&g->mu);
    g->held--;
    client_ent **p = find(g, &key);
    if (*p && --(*p)->count <= 0) {
        client_ent *e = *p;
        *p = e->next;
        free(e);
    }
    pthread_mutex_unlock(&g->mu);
}

int conn_gate_held(conn_gate *g, const conn_client_key *key) {
    pthread_mutex_lock(&g->mu);
    int n = g->held;
    if (key) {
        client_ent **p = find(g, key);
        n = *p ? (*p)->count : 0;
    }
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint64_t conn_gate_refused(conn_gate *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->refused;
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* The 503 for a connection over a cap (NULL: admitted). */
static const char *over_cap(conn_gate *g, const struct sockaddr *addr, int *count) {
    conn_client_key k = conn_client_key_of(addr);
    pthread_mutex_lock(&g->mu);
    const char *why = NULL;
    *count = g->held;
    if (g->held >= g->opt.max_connections) {
        why = "--max-connections";
    } else if (g->opt.max_per_client > 0) {
        client_ent **p = find(g, &k);
        *count = *p ? (*p)->count : 0;
        if (*count >= g->opt.max_per_client) why = "--max-connections-per-client";
    }
    if (why) g->refused++;
    pthread_mutex_unlock(&g->mu);
    return why;
}

/* Answers 503 on a fresh socket and starts its graceful close. */
static void refuse(conn_gate *g, int fd, const char *why, int count, bool can_drain) {
    oai_error err;
    if (!strcmp(why, "--max-connections"))
        oai_error_set(&err, 503, NULL, "The server is at capacity (%d connections, --max-connections); retry later.",
                      count);
    else
        oai_error_set(&err, 503, NULL,
                      "Too many connections from your address (%d, --max-connections-per-client); retry later.", count);
    conn_send_error(fd, &err, g->opt.retry_after);
    shutdown(fd, SHUT_WR);
    if (can_drain && g->num_draining < MAX_DRAINING) {
        g->drain[g->num_draining++] = (draining){.fd = fd, .deadline = now_s() + DRAIN_SECONDS};
    } else {
        close(fd);
    }
}

static void drop_draining(conn_gate *g, int i) {
    close(g->drain[i].fd);
    g->drain[i] = g->drain[--g->num_draining];
}

static void accept_some(conn_gate *g) {
    for (int k = 0; k < ACCEPT_BURST; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(g->opt.listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE) && g->spare_fd >= 0) {
                /* out of descriptors: answer one client with the spare */
                close(g->spare_fd);
                g->spare_fd = -1;
                fd = accept4(g->opt.listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
                if (fd >= 0) {
                    pthread_mutex_lock(&g->mu);
                    g->refused++;
                    int held = g->held;
                    pthread_mutex_unlock(&g->mu);
                    LOG_W("out of file descriptors with %d connections held: answering 503", held);
                    refuse(g, fd, "--max-connections", held, false);
                }
                g->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            }
            return; /* EAGAIN and the rest: back to poll */
        }
        int count = 0;
        const char *why = over_cap(g, (struct sockaddr *)&ss, &count);
        if (why) {
            int flags = fcntl(fd, F_GETFL);
            if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
            refuse(g, fd, why, count, true);
            continue;
        }
        conn_client_key key = conn_client_key_of((struct sockaddr *)&ss);
        track(g, key);
        if (!g->opt.admit(g->opt.ctx, fd, (struct sockaddr *)&ss, sl)) conn_gate_untrack(g, key);
    }
}

static void *gate_main(void *arg) {
    conn_gate *g = arg;
    struct pollfd *pfd = calloc(2 + MAX_DRAINING, sizeof *pfd);
    if (!pfd) {
        LOG_E("server: out of memory in the accept loop");
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&g->mu);
        bool quit = g->quit, stop = g->stop_accepting;
        pthread_mutex_unlock(&g->mu);
        if (quit) break;
        if (stop && g->opt.listen_fd >= 0) {
            close(g->opt.listen_fd);
            g->opt.listen_fd = -1;
        }
        double now = now_s(), next = now + 1.0;
        for (int i = g->num_draining - 1; i >= 0; i--) {
            if (g->drain[i].deadline <= now) drop_draining(g, i);
            else if (g->drain[i].deadline < next) next = g->drain[i].deadline;
        }
        nfds_t n = 0;
        pfd[n++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = g->opt.listen_fd, .events = POLLIN}; /* fd -1 is ignored by poll */
        for (int i = 0; i < g->num_draining; i++) pfd[n++] = (struct pollfd){.fd = g->drain[i].fd, .events = POLLIN};
        int nd = g->num_draining;
        int rc = poll(pfd, n, (int)((next - now) * 1000) + 1);
        if (rc < 0) continue;
        if (pfd[0].revents) {
            char buf[64];
            while (read(g->wake[0], buf, sizeof buf) > 0) {
            }
        }
        /* draining sockets first (their indices move when one is dropped: walk backwards) */
        for (int i = nd - 1; i >= 0; i--) {
            if (!pfd[2 + i].revents) continue;
            char buf[4096];
            ssize_t r = recv(g->drain[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) drop_draining(g, i);
        }
        if (g->opt.listen_fd >= 0 && (pfd[1].revents & POLLIN)) accept_some(g);
    }
    while (g->num_draining > 0) drop_draining(g, g->num_draining - 1);
    free(pfd);
    return NULL;
}

static void wake(conn_gate *g) {
    char c = 1;
    ssize_t w = write(g->wake[1], &c, 1);
    (void)w; /* a full pipe already wakes the thread */
}

vllm_status conn_gate_start(const conn_gate_options *opt, conn_gate **out) {
    *out = NULL;
    if (!opt || opt->listen_fd < 0 || opt->max_connections <= 0 || opt->max_per_client < 0 || !opt->admit)
        return vt_error(VLLM_ERR_INVALID_ARG, "conn_gate_start: bad options");
    conn_gate *g = calloc(1, sizeof *g);
    if (!g) return vt_error(VLLM_ERR_NO_MEMORY, "server: out of memory");
    g->opt = *opt;
    g->wake[0] = g->wake[1] = -1;
    pthread_mutex_init(&g->mu, NULL);
    g->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (pipe2(g->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        int e = errno;
        conn_gate_free(g);
        return vt_error(VLLM_ERR_IO, "server: pipe: %s", strerror(e));
    }
    int flags = fcntl(opt->listen_fd, F_GETFL);
    if (flags >= 0) fcntl(opt->listen_fd, F_SETFL, flags | O_NONBLOCK);
    *out = g; /* before the first connection: its closed notification needs it */
    if (pthread_create(&g->thread, NULL, gate_main, g) != 0) {
        *out = NULL;
        g->opt.listen_fd = -1; /* still the caller's */
        conn_gate_free(g);
        return vt_error(VLLM_ERR_NO_MEMORY, "server: cannot start the accept thread");
    }
    g->thread_started = true;
    return VLLM_OK;
}

void conn_gate_stop_accepting(conn_gate *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop_accepting = true;
    pthread_mutex_unlock(&g->mu);
    wake(g);
}

void conn_gate_free(conn_gate *g) {
    if (!g) return;
    if (g->thread_started) {
        pthread_mutex_lock(&g->mu);
        g->quit = true;
        pthread_mutex_unlock(&g->mu);
        wake(g);
        pthread_join(g->thread, NULL);
    }
    if (g->opt.listen_fd >= 0) close(g->opt.listen_fd);
    if (g->spare_fd >= 0) close(g->spare_fd);
    for (int k = 0; k < 2; k++)
        if (g->wake[k] >= 0) close(g->wake[k]);
    for (size_t b = 0; b < BUCKETS; b++)
        for (client_ent *e = g->buckets[b], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---- answers written on a raw socket ---- */

static const char *reason_phrase(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

bool conn_send_error(int fd, const oai_error *err, int retry_after) {
    char *json = oai_error_json(err);
    size_t jlen = json ? strlen(json) : 0;
    char head[320], retry[48] = "";
    if (retry_after > 0) snprintf(retry, sizeof retry, "Retry-After: %d\r\n", retry_after);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     err->status, reason_phrase(err->status), jlen, retry);
    bool ok = n > 0 && (size_t)n < sizeof head && send(fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n &&
              (!json || send(fd, json, jlen, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)jlen);
    free(json);
    return ok;
}
