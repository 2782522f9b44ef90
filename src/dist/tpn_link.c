/* tpn_link.c: TCP links between the nodes of a multi-host tensor-parallel group: hello, framing, failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dist/tpn_link.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"

#define TPN_MAGIC "VLLMCTP1"
#define TPN_VERSION 1u
#define TPN_FRAME 0x314e5054u /* "TPN1" */
#define TPN_MAX_FP 4096

typedef struct tpn_link {
    int fd;          /* -1: none */
    bool failed;
    char why[256];
} tpn_link;

struct tpn_net {
    int nnodes, node_rank;
    pthread_mutex_t mu;         /* failed / why */
    tpn_link link[TPN_MAX_NODES][2]; /* node 0: [peer][chan]; others: [0][chan] */
};

static const char *chan_name(tpn_chan ch) { return ch == TPN_CTL ? "control" : "data"; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Reads exactly len bytes; 0 on success, else errno (ECONNRESET for a closed peer). */
static int read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        const ssize_t r = recv(fd, p, len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno ? errno : EIO;
        if (r == 0) return ECONNRESET;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Writes every iovec whole (partial writes resumed); 0 or errno. */
static int write_iov(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        const ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno ? errno : EIO;
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

static void set_timeout(int fd, double s) {
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* An established link's options: no send delay, keep-alives (a vanished host is noticed in ~60 s), no timeouts
 * (a collective may wait on a long step). */
static void tune(int fd) {
    int one = 1, idle = 30, intvl = 10, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    set_timeout(fd, 0);
}

static tpn_net *net_new(const tpn_options *o) {
    tpn_net *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->nnodes = o->nnodes;
    n->node_rank = o->node_rank;
    pthread_mutex_init(&n->mu, NULL);
    for (int p = 0; p < TPN_MAX_NODES; p++)
        for (int c = 0; c < 2; c++) n->link[p][c].fd = -1;
    return n;
}

void tpn_close(tpn_net *n) {
    if (!n) return;
    for (int p = 0; p < TPN_MAX_NODES; p++)
        for (int c = 0; c < 2; c++)
            if (n->link[p][c].fd >= 0) close(n->link[p][c].fd);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

int tpn_nnodes(const tpn_net *n) { return n->nnodes; }
int tpn_node_rank(const tpn_net *n) { return n->node_rank; }

/* ---- the hello ---- */

/* magic, version, nnodes, node_rank, chan, fingerprint length, fingerprint */
static int send_hello(int fd, const tpn_options *o, tpn_chan ch) {
    unsigned char h[28];
    const size_t fl = strlen(o->fingerprint);
    memcpy(h, TPN_MAGIC, 8);
    put_u32(h + 8, TPN_VERSION);
    put_u32(h + 12, (uint32_t)o->nnodes);
    put_u32(h + 16, (uint32_t)o->node_rank);
    put_u32(h + 20, (uint32_t)ch);
    put_u32(h + 24, (uint32_t)fl);
    struct iovec iov[2] = {{h, sizeof h}, {(void *)o->fingerprint, fl}};
    return write_iov(fd, iov, 2);
}

/* ok (1 / 0), message length, message */
static int send_reply(int fd, bool ok, const char *msg) {
    unsigned char h[8];
    const size_t ml = strlen(msg);
    put_u32(h, ok ? 1u : 0u);
    put_u32(h + 4, (uint32_t)ml);
    struct iovec iov[2] = {{h, sizeof h}, {(void *)msg, ml}};
    return write_iov(fd, iov, 2);
}

/* Node 0: one accepted connection's hello. 1: a node's link taken into n; 0: not a vllm.c node (dropped, keep
 * waiting); -1: a node that cannot join (the error set; it was told why). */
static int take_hello(tpn_net *n, const tpn_options *o, int fd, const char *from) {
    unsigned char h[28];
    set_timeout(fd, 10);
    if (read_full(fd, h, sizeof h) || memcmp(h, TPN_MAGIC, 8)) {
        LOG_W("tensor-parallel group: a connection from %s is not a vllm.c node: dropped", from);
        return 0;
    }
    const uint32_t ver = get_u32(h + 8), nn = get_u32(h + 12), rank = get_u32(h + 16), ch = get_u32(h + 20),
                   fl = get_u32(h + 24);
    char *fp = fl <= TPN_MAX_FP ? malloc(fl + 1) : NULL;
    if (!fp || read_full(fd, fp, fl)) {
        free(fp);
        LOG_W("tensor-parallel group: a connection from %s sent a bad hello: dropped", from);
        return 0;
    }
    fp[fl] = '\0';
    char why[1024] = "";
    if (ver != TPN_VERSION)
        snprintf(why, sizeof why, "node at %.80s speaks protocol version %u, node 0 version %u (different vllm.c builds)",
                 from, ver, TPN_VERSION);
    else if ((int)nn != o->nnodes)
        snprintf(why, sizeof why, "node at %.80s was started with --nnodes %u, node 0 with %d", from, nn, o->nnodes);
    else if (rank < 1 || (int)rank >= o->nnodes || ch > 1)
        snprintf(why, sizeof why, "node at %.80s says it is node %u (link %u): 1 to %d", from, rank, ch, o->nnodes - 1);
    else if (n->link[rank][ch].fd >= 0)
        snprintf(why, sizeof why, "two nodes say they are node %u (the second from %.80s): each --node-rank once", rank,
                 from);
    else if (strcmp(fp, o->fingerprint))
        snprintf(why, sizeof why, "node %u (%.80s) runs other options than node 0: it has [%s], node 0 [%s]", rank, from,
                 fp, o->fingerprint);
    free(fp);
    if (why[0]) {
        send_reply(fd, false, why);
        vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel group: %s", why);
        return -1;
    }
    if (send_reply(fd, true, "")) {
        LOG_W("tensor-parallel group: node %u (%s) left during its hello: dropped", rank, from);
        return 0;
    }
    tune(fd);
    n->link[rank][ch].fd = fd;
    LOG_I("tensor-parallel group: node %u joined from %s (%s link)", rank, from, chan_name((tpn_chan)ch));
    return 1;
}

static int listen_on(int port) {
    for (int fam = 0; fam < 2; fam++) { /* the IPv6 wildcard (IPv4 too), else IPv4's */
        const int fd = socket(fam ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int ok;
        if (!fam) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                                     .sin6_addr = in6addr_any};
            ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        } else {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_ANY)};
            ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        }
        if (ok && listen(fd, 64) == 0) return fd;
        const int e = errno;
        close(fd);
        errno = e;
        if (e == EADDRINUSE) return -1;
    }
    return -1;
}

static vllm_status open_master(tpn_net *n, const tpn_options *o, double timeout) {
    const int lfd = listen_on(o->master_port);
    if (lfd < 0)
        return vt_error(VLLM_ERR_IO, "tensor-parallel group: node 0 cannot listen on port %d: %s", o->master_port,
                        strerror(errno));
    const int want = 2 * (o->nnodes - 1);
    int have = 0;
    const double t0 = now_s();
    double next_log = t0 + 10;
    LOG_I("tensor-parallel group: node 0 of %d waiting on port %d for the other nodes", o->nnodes, o->master_port);
    vllm_status st = VLLM_OK;
    while (have < want) {
        const double t = now_s();
        if (t - t0 > timeout) {
            char missing[512] = "";
            size_t off = 0;
            for (int p = 1; p < o->nnodes && off < sizeof missing - 16; p++)
                if (n->link[p][0].fd < 0 || n->link[p][1].fd < 0)
                    off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d", off ? ", " : "", p);
            st = vt_error(VLLM_ERR_IO, "tensor-parallel group: node 0 waited %.0f s on port %d and node(s) %s "
                          "did not join (start them with the same options and --node-rank)", timeout, o->master_port,
                          missing);
            break;
        }
        if (t >= next_log) {
            LOG_I("tensor-parallel group: %d of %d node links joined; waiting (%.0f s left)", have, want,
                  timeout - (t - t0));
            next_log = t + 10;
        }
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        const int pr = poll(&pf, 1, 500);
        if (pr <= 0) continue;
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        const int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
        if (fd < 0) continue;
        char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?", from[NI_MAXHOST + NI_MAXSERV + 2];
        getnameinfo((struct sockaddr *)&sa, sl, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
        snprintf(from, sizeof from, "%s:%s", host, serv);
        const int r = take_hello(n, o, fd, from);
        if (r == 1) {
            have++;
            continue;
        }
        close(fd);
        if (r < 0) {
            st = VLLM_ERR_INVALID_ARG;
            break;
        }
    }
    close(lfd);
    return st;
}

/* A connect to a port of this host that nobody listens on can meet itself (TCP simultaneous open when the kernel
 * picks that port as the local one): not node 0. */
static bool self_connected(int fd) {
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&a, &la) || getpeername(fd, (struct sockaddr *)&b, &lb)) return false;
    if (la != lb || memcmp(&a, &b, la)) return false;
    errno = ECONNREFUSED;
    return true;
}

/* One link to node 0: connect (retrying while node 0 is not listening yet), hello, its reply. */
static vllm_status connect_link(tpn_net *n, const tpn_options *o, tpn_chan ch, double t0, double timeout) {
    char port[16];
    snprintf(port, sizeof port, "%d", o->master_port);
    double next_log = now_s() + 10;
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        const int gr = getaddrinfo(o->master_addr, port, &hints, &ai);
        int fd = -1, err = 0;
        if (gr == 0) {
            for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
                fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
                if (fd < 0) continue;
                if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 || self_connected(fd)) {
                    err = errno ? errno : ECONNREFUSED;
                    close(fd);
                    fd = -1;
                }
            }
            freeaddrinfo(ai);
        }
        if (fd >= 0) {
            set_timeout(fd, 30);
            unsigned char r[8];
            int e = send_hello(fd, o, ch);
            if (!e) e = read_full(fd, r, sizeof r);
            if (!e) {
                const uint32_t ok = get_u32(r), ml = get_u32(r + 4);
                char msg[1024] = "";
                if (ml < sizeof msg && !read_full(fd, msg, ml)) msg[ml] = '\0';
                else snprintf(msg, sizeof msg, "(a reply too long to read)");
                if (!ok) {
                    close(fd);
                    return vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel group: node 0 refused node %d: %s",
                                    o->node_rank, msg);
                }
                tune(fd);
                n->link[0][ch].fd = fd;
                return VLLM_OK;
            }
            close(fd);
            err = e;
        }
        const double t = now_s();
        if (t - t0 > timeout)
            return vt_error(VLLM_ERR_IO, "tensor-parallel group: node %d could not join node 0 at %s:%d in %.0f s: "
                            "%s", o->node_rank, o->master_addr, o->master_port, timeout,
                            gr ? gai_strerror(gr) : strerror(err ? err : ECONNREFUSED));
        if (t >= next_log) {
            LOG_I("tensor-parallel group: node %d waiting for node 0 at %s:%d (%.0f s left)", o->node_rank,
                  o->master_addr, o->master_port, timeout - (t - t0));
            next_log = t + 10;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

vllm_status tpn_open(const tpn_options *o, tpn_net **out) {
    *out = NULL;
    if (o->nnodes < 2 || o->nnodes > TPN_MAX_NODES)
        return vt_error(VLLM_ERR_INVALID_ARG, "nnodes %d: 2 to %d", o->nnodes, TPN_MAX_NODES);
    if (o->node_rank < 0 || o->node_rank >= o->nnodes)
        return vt_error(VLLM_ERR_INVALID_ARG, "node_rank %d of %d nodes: 0 to %d", o->node_rank, o->nnodes,
                        o->nnodes - 1);
    if (o->master_port < 1 || o->master_port > 65535)
        return vt_error(VLLM_ERR_INVALID_ARG, "master_port %d: 1 to 65535", o->master_port);
    if (!o->master_addr || !*o->master_addr)
        return vt_error(VLLM_ERR_INVALID_ARG, "master_addr: node 0's address is needed");
    if (!o->fingerprint || strlen(o->fingerprint) > TPN_MAX_FP)
        return vt_error(VLLM_ERR_INTERNAL, "tensor-parallel group: no fingerprint");
    tpn_net *n = net_new(o);
    if (!n) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (tensor-parallel links)");
    const double timeout = o->timeout_s > 0 ? o->timeout_s : 600;
    vllm_status st;
    if (o->node_rank == 0) {
        st = open_master(n, o, timeout);
    } else {
        const double t0 = now_s();
        st = connect_link(n, o, TPN_CTL, t0, timeout);
        if (st == VLLM_OK) st = connect_link(n, o, TPN_DATA, t0, timeout);
        if (st == VLLM_OK) LOG_I("tensor-parallel group: node %d of %d joined node 0 at %s:%d", o->node_rank,
                                 o->nnodes, o->master_addr, o->master_port);
    }
    if (st != VLLM_OK) {
        tpn_close(n);
        return st;
    }
    *out = n;
    return VLLM_OK;
}

/* ---- messages ---- */

static vllm_status link_of(tpn_net *n, int peer, tpn_chan ch, tpn_link **l) {
    if (peer < 0 || peer >= n->nnodes || (n->node_rank != 0 && peer != 0) || peer == n->node_rank ||
        n->link[peer][ch].fd < 0)
        return vt_error(VLLM_ERR_INTERNAL, "tensor-parallel group: node %d has no %s link to node %d", n->node_rank,
                        chan_name(ch), peer);
    *l = &n->link[peer][ch];
    pthread_mutex_lock(&n->mu);
    const bool failed = (*l)->failed;
    char why[256];
    snprintf(why, sizeof why, "%s", (*l)->why);
    pthread_mutex_unlock(&n->mu);
    if (failed)
        return vt_error(VLLM_ERR_BACKEND, "tensor-parallel group: the %s link between nodes %d and %d is down: %s",
                        chan_name(ch), n->node_rank, peer, why);
    return VLLM_OK;
}

/* Marks the link failed (shut down so the peer notices) and returns the error. */
static vllm_status link_fail(tpn_net *n, int peer, tpn_chan ch, const char *fmt, const char *arg) {
    tpn_link *l = &n->link[peer][ch];
    char why[256];
    snprintf(why, sizeof why, fmt, arg);
    pthread_mutex_lock(&n->mu);
    if (!l->failed) {
        l->failed = true;
        snprintf(l->why, sizeof l->why, "%s", why);
        shutdown(l->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&n->mu);
    return vt_error(VLLM_ERR_BACKEND, "tensor-parallel group: the %s link between nodes %d and %d: %s", chan_name(ch),
                    n->node_rank, peer, why);
}

vllm_status tpn_send(tpn_net *n, int peer, tpn_chan ch, uint32_t kind, int nparts, const void *const *parts,
                     const size_t *lens) {
    tpn_link *l;
    vllm_status st = link_of(n, peer, ch, &l);
    if (st) return st;
    enum { MAXP = 64 };
    if (nparts > MAXP) return vt_error(VLLM_ERR_INTERNAL, "tpn_send: %d parts (at most %d)", nparts, MAXP);
    unsigned char h[16];
    uint64_t total = 0;
    struct iovec iov[MAXP + 1] = {{h, sizeof h}};
    int k = 1;
    for (int i = 0; i < nparts; i++) {
        total += lens[i];
        if (lens[i]) iov[k++] = (struct iovec){(void *)parts[i], lens[i]};
    }
    put_u32(h, TPN_FRAME);
    put_u32(h + 4, kind);
    put_u64(h + 8, total);
    const int e = write_iov(l->fd, iov, k);
    return e ? link_fail(n, peer, ch, "sending: %s", strerror(e)) : VLLM_OK;
}

vllm_status tpn_recv_header(tpn_net *n, int peer, tpn_chan ch, uint32_t *kind, uint64_t *len) {
    tpn_link *l;
    vllm_status st = link_of(n, peer, ch, &l);
    if (st) return st;
    unsigned char h[16];
    const int e = read_full(l->fd, h, sizeof h);
    if (e) return link_fail(n, peer, ch, "%s", e == ECONNRESET ? "the peer closed it (its process ended?)" : strerror(e));
    if (get_u32(h) != TPN_FRAME) return link_fail(n, peer, ch, "%s", "a message out of frame");
    *kind = get_u32(h + 4);
    *len = get_u64(h + 8);
    return VLLM_OK;
}

vllm_status tpn_recv_body(tpn_net *n, int peer, tpn_chan ch, void *buf, uint64_t len) {
    tpn_link *l;
    vllm_status st = link_of(n, peer, ch, &l);
    if (st) return st;
    const int e = read_full(l->fd, buf, (size_t)len);
    if (e) return link_fail(n, peer, ch, "%s", e == ECONNRESET ? "the peer closed it (its process ended?)" : strerror(e));
    return VLLM_OK;
}

vllm_status tpn_recv_exact(tpn_net *n, int peer, tpn_chan ch, uint32_t kind, void *buf, uint64_t len,
                           const char *what) {
    uint32_t k;
    uint64_t l;
    vllm_status st = tpn_recv_header(n, peer, ch, &k, &l);
    if (st) return st;
    if (k != kind || l != len) {
        char why[200];
        snprintf(why, sizeof why, "expected %s (kind %08x, %llu bytes), got kind %08x of %llu bytes", what, kind,
                 (unsigned long long)len, k, (unsigned long long)l);
        return link_fail(n, peer, ch, "%s", why);
    }
    return tpn_recv_body(n, peer, ch, buf, len);
}

void tpn_shutdown(tpn_net *n, tpn_chan ch, const char *why) {
    pthread_mutex_lock(&n->mu);
    for (int p = 0; p < n->nnodes; p++) {
        tpn_link *l = &n->link[p][ch];
        if (l->fd < 0 || l->failed) continue;
        l->failed = true;
        snprintf(l->why, sizeof l->why, "%s", why ? why : "shut down");
        shutdown(l->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&n->mu);
}

bool tpn_failed(const tpn_net *n, tpn_chan ch) {
    bool f = false;
    pthread_mutex_lock((pthread_mutex_t *)&n->mu);
    for (int p = 0; p < n->nnodes; p++)
        if (n->link[p][ch].fd >= 0 && n->link[p][ch].failed) f = true;
    pthread_mutex_unlock((pthread_mutex_t *)&n->mu);
    return f;
}

bool tpn_probe(tpn_net *n, char *why, size_t cap) {
    bool up = true;
    pthread_mutex_lock(&n->mu);
    for (int p = 0; p < n->nnodes && up; p++)
        for (int c = 0; c < 2 && up; c++) {
            tpn_link *l = &n->link[p][c];
            if (l->fd < 0) continue;
            if (l->failed) {
                snprintf(why, cap, "the %s link between nodes %d and %d is down: %s", chan_name((tpn_chan)c),
                         n->node_rank, p, l->why);
                up = false;
                continue;
            }
            char b;
            const ssize_t r = recv(l->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                snprintf(why, cap, "node %d closed its %s link (its process ended?)", p, chan_name((tpn_chan)c));
                up = false;
            }
        }
    pthread_mutex_unlock(&n->mu);
    return up;
}
