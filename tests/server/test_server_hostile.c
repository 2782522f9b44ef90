/*
 * test_server_hostile.c: `vllmc serve` (stories260K) against hostile clients, on raw sockets:
 *   framing     request-smuggling shapes get 400 / 501 and a closed connection; an oversized
 *               chunked body gets 413 (read by the client, not a reset)
 *   half-close  a client that shuts down its sending side after the request gets the whole reply
 *   slow loris  2,000 connections from one address (127.0.0.2) trickling header lines: the
 *               per-client cap answers the excess 503 at once, --header-timeout answers the rest
 *               408, and requests from another address are served meanwhile (p99 printed)
 *   overload    more connections than --max-connections (several addresses): 503 with OpenAI
 *               error JSON and Retry-After, never a reset; service again once they close
 *   log         client-controlled strings reach the log escaped (no forged lines, no ESC)
 *   shutdown    with clients that never read, the server exits within --shutdown-timeout
 * Loopback addresses 127.0.0.2-4 stand for other clients (Linux routes 127/8 to lo).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "server/test_server_util.h"

/* The shutdown's slack past --shutdown-timeout: teardown and exit (LeakSanitizer's scan at exit, TSan's bookkeeping)
 * are several times slower in a sanitized build */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SHUTDOWN_SLACK 3.0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SHUTDOWN_SLACK 3.0
#endif
#endif
#ifndef SHUTDOWN_SLACK
#define SHUTDOWN_SLACK 0.6
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A TCP connection to 127.0.0.1:port from address src (NULL: any); -1 on failure. */
static int tcp_connect(const char *src, int port, bool nonblock, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) return -1;
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    if (src) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &a.sin_addr);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

typedef struct reply {
    char *text;        /* everything received (NUL-terminated) */
    size_t len;
    bool closed;       /* the server closed the connection (EOF) */
    bool reset;        /* ECONNRESET */
} reply;

/* Reads until EOF, a reset or timeout seconds. */
static reply read_reply(int fd, double timeout) {
    reply r = {0};
    size_t cap = 4096;
    r.text = malloc(cap);
    double end = now_s() + timeout;
    for (;;) {
        double left = end - now_s();
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        if (r.len + 4096 + 1 > cap) r.text = realloc(r.text, cap *= 2);
        ssize_t n = recv(fd, r.text + r.len, 4096, MSG_DONTWAIT);
        if (n == 0) {
            r.closed = true;
            break;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            r.reset = errno == ECONNRESET;
            r.closed = true;
            break;
        }
        r.len += (size_t)n;
    }
    r.text[r.len] = 0;
    return r;
}

/* The final status of a reply (interim 1xx responses skipped), or 0. */
static int final_status(const char *t) {
    while (t && !strncmp(t, "HTTP/1.", 7)) {
        int st = atoi(t + 9);
        if (st >= 200) return st;
        t = strstr(t, "\r\n\r\n");
        if (t) t += 4;
    }
    return 0;
}

/* One request on a fresh connection; the reply after the server closes or timeout. */
static reply roundtrip(int port, const char *src, const char *req, size_t len, bool half_close, double timeout) {
    int fd = tcp_connect(src, port, false, 0);
    reply r = {0};
    if (fd < 0 || !send_all(fd, req, len)) {
        if (fd >= 0) close(fd);
        r.text = strdup("");
        return r;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    r = read_reply(fd, timeout);
    close(fd);
    return r;
}

/* ---- framing ---- */

static void test_framing(int port) {
    static const char body[] = "{\"model\":\"stories\",\"prompt\":\"Once\",\"max_tokens\":2}";
    char ok_cl[64];
    snprintf(ok_cl, sizeof ok_cl, "%zu", strlen(body));
    struct {
        const char *name, *head;
        int want;
        bool with_body;
    } cases[] = {
        {"control: a good GET", "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, false},
        {"control: HTTP/1.0 needs no Host", "GET /health HTTP/1.0\r\n\r\n", 200, false},
        {"space before the colon", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length : %s\r\n\r\n", 400, true},
        {"two different Content-Length",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\nContent-Length: 3\r\n\r\n", 400, true},
        {"Content-Length with Transfer-Encoding",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\nTransfer-Encoding: chunked\r\n\r\n", 400, true},
        {"Transfer-Encoding gzip", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, false},
        {"HTTP/1.1 without Host", "GET /health HTTP/1.1\r\n\r\n", 400, false},
        {"two Host headers", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, false},
        {"%00 in the path", "GET /v1/models%%00.json HTTP/1.1\r\nHost: x\r\n\r\n", 400, false},
        {"NUL in a header value", "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 400, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char req[1024];
        size_t n;
        if (i == sizeof cases / sizeof *cases - 1) { /* the NUL case: built by hand */
            static const char nul[] = "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n";
            n = sizeof nul - 1;
            memcpy(req, nul, n);
        } else {
            n = (size_t)snprintf(req, sizeof req, cases[i].head, ok_cl);
            if (cases[i].with_body) n += (size_t)snprintf(req + n, sizeof req - n, "%s", body);
        }
        double t0 = now_s();
        reply r = roundtrip(port, NULL, req, n, false, 5);
        double dt = now_s() - t0;
        int st = final_status(r.text);
        CHECK_MSG(st == cases[i].want, "framing: %s: status %d, want %d:\n%.300s", cases[i].name, st, cases[i].want, r.text);
        if (cases[i].want >= 400) {
            CHECK_MSG(r.closed && !r.reset, "framing: %s: the connection is closed after the answer (closed %d reset %d)",
                      cases[i].name, r.closed, r.reset);
            CHECK_MSG(strstr(r.text, "\"error\"") != NULL, "framing: %s: OpenAI error JSON", cases[i].name);
            CHECK_MSG(dt < 2.0, "framing: %s: answered in %.2f s (not after a timeout)", cases[i].name, dt);
        }
        free(r.text);
    }

    /* a chunked body far over --max-body-mb 1: 413, read while still sending, then the close */
    int fd = tcp_connect(NULL, port, false, 0);
    CHECK(fd >= 0);
    if (fd < 0) return;
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n";
    CHECK(send_all(fd, head, strlen(head)));
    static char chunk[65536 + 16];
    size_t clen = 65536;
    int hn = snprintf(chunk, sizeof chunk, "%zx\r\n", clen);
    memset(chunk + hn, ' ', clen);
    memcpy(chunk + hn + clen, "\r\n", 2);
    size_t chunk_len = (size_t)hn + clen + 2;
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    char got[8192];
    size_t got_len = 0, sent = 0, off = 0;
    double end = now_s() + 20;
    bool reset = false, eof = false;
    while (now_s() < end && !eof && !reset && sent < (64u << 20)) {
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
        if (poll(&p, 1, 200) <= 0) continue;
        if (p.revents & POLLIN) {
            ssize_t r = recv(fd, got + got_len, sizeof got - 1 - got_len, 0);
            if (r > 0) got_len += (size_t)r;
            else if (r == 0) eof = true;
            else if (errno == ECONNRESET) reset = true;
            got[got_len] = 0;
            if (strstr(got, "\r\n\r\n") && strstr(got, "}}")) break;
        }
        if (p.revents & POLLOUT) {
            ssize_t w = send(fd, chunk + off, chunk_len - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                sent += (size_t)w;
                if (off == chunk_len) off = 0;
            } else if (w < 0 && errno != EAGAIN) {
                if (errno == ECONNRESET) reset = true;
                else if (errno == EPIPE) eof = true;
            }
        }
    }
    got[got_len] = 0;
    CHECK_MSG(final_status(got) == 413, "framing: oversized chunked body: status %d after %zu bytes sent (reset %d):\n%s",
              final_status(got), sent, reset, got);
    CHECK_MSG(strstr(got, "\"error\"") != NULL, "framing: oversized chunked body: error JSON");
    close(fd);
}

/* ---- half-close ---- */

static void test_half_close(int port) {
    for (int stream = 0; stream < 2; stream++) {
        char body[256], req[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"stories\",\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,"
                 "\"ignore_eos\":true,\"stream\":%s}",
                 stream ? "true" : "false");
        int n = snprintf(req, sizeof req,
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
        reply r = roundtrip(port, NULL, req, (size_t)n, true, 20);
        CHECK_MSG(final_status(r.text) == 200, "half-close (stream %d): status %d:\n%.400s", stream, final_status(r.text),
                  r.text);
        if (stream) CHECK_MSG(strstr(r.text, "data: [DONE]") != NULL, "half-close: the stream ends with [DONE]");
        else CHECK_MSG(strstr(r.text, "\"completion_tokens\":60") != NULL, "half-close: all 60 tokens:\n%.600s", r.text);
        free(r.text);
    }
}

/* ---- slow loris and overload ---- */

typedef struct attacker {
    int fd;
    int status;        /* the answer's status (0 = none yet) */
    bool done;         /* answered or closed */
    bool reset;
    bool started;      /* its request line was sent */
    char buf[512];
    size_t len;
} attacker;

/* Reads what the server wrote to an attacker; true when it is done. */
static bool attacker_read(attacker *a) {
    for (;;) {
        ssize_t n = recv(a->fd, a->buf + a->len, sizeof a->buf - 1 - a->len, MSG_DONTWAIT);
        if (n > 0) {
            a->len += (size_t)n;
            a->buf[a->len] = 0;
            if (!a->status && a->len >= 12) a->status = atoi(a->buf + 9);
            if (a->len == sizeof a->buf - 1) a->len = 0; /* keep only the start */
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            if (n < 0 && errno == ECONNRESET) a->reset = true;
            a->done = true;
            close(a->fd);
            a->fd = -1;
        }
        return a->done;
    }
}

/* Opens num connections from src, each trickling a header line every second. */
static attacker *attack_open(const char *src, int port, int num) {
    attacker *a = calloc((size_t)num, sizeof *a);
    for (int i = 0; i < num; i++) {
        a[i].fd = tcp_connect(src, port, true, 0);
        if (a[i].fd < 0) a[i].done = true;
    }
    return a;
}

/* Drives the attackers for secs seconds (sending the request line, then one header line a second). */
static void attack_run(attacker *a, int num, double secs, double *next_line) {
    double end = now_s() + secs;
    struct pollfd *p = calloc((size_t)num, sizeof *p);
    while (now_s() < end) {
        bool trickle = now_s() >= *next_line;
        if (trickle) *next_line = now_s() + 1.0;
        for (int i = 0; i < num; i++) {
            p[i] = (struct pollfd){.fd = a[i].done ? -1 : a[i].fd, .events = POLLIN};
            if (trickle && !a[i].done) {
                const char *line = a[i].started ? "X-Slow: 1\r\n" : "POST /v1/completions HTTP/1.1\r\nX-Slow: 1\r\n";
                if (send(a[i].fd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) a[i].started = true;
            }
        }
        int rc = poll(p, (nfds_t)num, 50);
        for (int i = 0; rc > 0 && i < num; i++)
            if (p[i].revents && !a[i].done) attacker_read(&a[i]);
    }
    free(p);
}

static void attack_count(attacker *a, int num, int *n408, int *n503, int *other, int *open_, int *resets) {
    *n408 = *n503 = *other = *open_ = *resets = 0;
    for (int i = 0; i < num; i++) {
        if (a[i].reset) (*resets)++;
        if (a[i].status == 408) (*n408)++;
        else if (a[i].status == 503) (*n503)++;
        else if (a[i].done) (*other)++;
        else (*open_)++;
    }
}

static void attack_close(attacker *a, int num) {
    for (int i = 0; i < num; i++)
        if (a[i].fd >= 0) close(a[i].fd);
    free(a);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Requests from 127.0.0.1 while the attack runs: all must succeed; p50 / p99 printed. */
static void served_meanwhile(int port, attacker *a, int num, double *next_line, const char *what) {
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    static const char body[] = "{\"model\":\"stories\",\"prompt\":\"Once\",\"max_tokens\":4}";
    char gen[512];
    int gn = snprintf(gen, sizeof gen,
                      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
    enum { N = 40 };
    double lat[N];
    int ok = 0;
    for (int i = 0; i < N; i++) {
        attack_run(a, num, 0.02, next_line);
        double t0 = now_s();
        reply r = i % 4 == 3 ? roundtrip(port, "127.0.0.1", gen, (size_t)gn, false, 10)
                             : roundtrip(port, "127.0.0.1", health, sizeof health - 1, false, 10);
        lat[i] = now_s() - t0;
        if (final_status(r.text) == 200) ok++;
        else fprintf(stderr, "%s: request %d from another client: %.200s\n", what, i, r.text);
        free(r.text);
    }
    qsort(lat, N, sizeof *lat, cmp_double);
    fprintf(stderr, "%s: %d/%d requests from another client served, latency p50 %.1f ms p99 %.1f ms\n", what, ok, N,
            1e3 * lat[N / 2], 1e3 * lat[N - 1]);
    CHECK_MSG(ok == N, "%s: %d of %d requests from another client served", what, ok, N);
    CHECK_MSG(lat[N - 1] < 2.0, "%s: p99 latency %.3f s", what, lat[N - 1]);
}

static void test_slow_loris(int port, int num, int per_client, int header_timeout) {
    double next_line = 0;
    double t0 = now_s();
    attacker *a = attack_open("127.0.0.2", port, num);
    attack_run(a, num, 1.0, &next_line);
    int n408, n503, other, open_, resets;
    attack_count(a, num, &n408, &n503, &other, &open_, &resets);
    fprintf(stderr, "slow loris: after 1 s: %d open, %d answered 503, %d 408, %d other\n", open_, n503, n408, other);
    CHECK_MSG(n503 >= num - per_client - 8, "slow loris: the connections over the per-client cap get 503 at once (%d of %d)",
              n503, num - per_client);
    served_meanwhile(port, a, num, &next_line, "slow loris");
    double left = header_timeout + 2.0 - (now_s() - t0);
    if (left > 0) attack_run(a, num, left, &next_line);
    attack_count(a, num, &n408, &n503, &other, &open_, &resets);
    fprintf(stderr, "slow loris: after %.1f s: %d open, %d answered 503, %d 408, %d other, %d resets\n", now_s() - t0,
            open_, n503, n408, other, resets);
    CHECK_MSG(open_ == 0, "slow loris: every trickling connection is closed after --header-timeout (%d open)", open_);
    CHECK_MSG(n408 + n503 == num, "slow loris: every connection got an HTTP answer (408 %d + 503 %d of %d; %d other)", n408,
              n503, num, other);
    CHECK_MSG(n408 >= per_client - 8 && n408 <= per_client,
              "slow loris: the connections within the per-client cap get 408 at --header-timeout (%d of %d)", n408,
              per_client);
    for (int i = 0, shown = 0; i < num && shown < 3; i++)
        if (a[i].status != 408 && a[i].status != 503) {
            fprintf(stderr, "slow loris: connection %d: status %d, reset %d, fd %d: %.200s\n", i, a[i].status, a[i].reset,
                    a[i].fd, a[i].buf);
            shown++;
        }
    CHECK_MSG(resets == 0, "slow loris: no connection reset (%d)", resets);
    for (int i = 0; i < num; i++)
        if (a[i].status == 503) {
            CHECK_MSG(strstr(a[i].buf, "Retry-After: ") && strstr(a[i].buf, "--max-connections-per-client"),
                      "slow loris: the 503 names the cap and carries Retry-After:\n%s", a[i].buf);
            break;
        }
    attack_close(a, num);
}

static void test_overload(int port, int max_connections) {
    const char *srcs[3] = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};
    int per = max_connections / 2; /* 1.5 x the cap in all */
    attacker *a[3];
    double next_line = 0;
    for (int k = 0; k < 3; k++) a[k] = attack_open(srcs[k], port, per);
    for (int k = 0; k < 3; k++) attack_run(a[k], per, 0.4, &next_line);
    int n503 = 0, resets = 0, open_ = 0;
    const char *sample = NULL;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < per; i++) {
            if (a[k][i].status == 503) {
                n503++;
                if (!sample) sample = a[k][i].buf;
            }
            resets += a[k][i].reset;
            open_ += !a[k][i].done;
        }
    fprintf(stderr, "overload: %d connections, %d held, %d answered 503, %d resets\n", 3 * per, open_, n503, resets);
    CHECK_MSG(n503 >= 3 * per - max_connections - 8 && n503 <= 3 * per - max_connections + 8,
              "overload: the connections over --max-connections %d get 503 (%d of %d)", max_connections, n503,
              3 * per - max_connections);
    CHECK_MSG(resets == 0, "overload: no connection reset (%d)", resets);
    CHECK_MSG(sample && strstr(sample, "Retry-After: 1") && strstr(sample, "\"ServiceUnavailableError\"") &&
                  strstr(sample, "--max-connections"),
              "overload: 503 with Retry-After and OpenAI error JSON:\n%s", sample ? sample : "(none)");
    for (int k = 0; k < 3; k++) attack_close(a[k], per);
    /* once they are gone, service is back */
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int st = 0;
    for (int tries = 0; tries < 50 && st != 200; tries++) {
        srv_sleep_ms(100);
        reply r = roundtrip(port, NULL, health, sizeof health - 1, false, 5);
        st = final_status(r.text);
        free(r.text);
    }
    CHECK_MSG(st == 200, "overload: served again once the connections closed (status %d)", st);
}

/* ---- log injection ---- */

static void test_log_injection(srv_proc *s) {
    /* a method with an escape byte (answered 4xx, logged by the access log), and a request id
     * with a newline and escape bytes whose client hangs up mid-request (logged on abort) */
    static const char bad_method[] = "GE\x1b[31mT /health HTTP/1.1\r\nHost: x\r\n\r\n";
    reply r = roundtrip(s->port, NULL, bad_method, sizeof bad_method - 1, false, 5);
    free(r.text);
    static const char body[] = "{\"model\":\"stories\",\"prompt\":\"Once\",\"max_tokens\":400,\"ignore_eos\":true,"
                               "\"stream\":true,\"request_id\":\"x\\nvllmc error: forged line\\u001b[2J\"}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    int fd = tcp_connect(NULL, s->port, false, 0);
    if (fd >= 0) {
        send_all(fd, req, (size_t)n);
        char buf[256];
        (void)recv(fd, buf, sizeof buf, 0); /* the reply has started */
        close(fd);
    }
    srv_sleep_ms(500);
    char *log = t_slurp(s->err);
    CHECK(log != NULL);
    if (!log) return;
    CHECK_MSG(strchr(log, 0x1b) == NULL, "log: no escape byte reaches the log");
    bool forged = false;
    for (const char *p = log; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, "vllmc error: forged", 19)) forged = true;
    CHECK_MSG(!forged, "log: a client's newline cannot start a log line");
    CHECK_MSG(strstr(log, "\\x1b") != NULL, "log: the escape byte is shown escaped");
    free(log);
}

/* ---- shutdown with clients that never read ---- */

static void test_shutdown(void) {
    srv_proc s;
    bool up = srv_start(&s, "shutdown", "--shutdown-timeout 2", 120);
    CHECK_MSG(up, "vllmc serve (shutdown) did not start");
    if (!up) return;
    /* streams far larger than the socket buffers, from clients that never read */
    static const char body[] = "{\"model\":\"stories\",\"prompt\":\"Once\",\"max_tokens\":400,\"ignore_eos\":true,"
                               "\"stream\":true,\"n\":16,\"logprobs\":20}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = tcp_connect(NULL, s.port, false, 4096);
        if (fds[i] >= 0) send_all(fds[i], req, (size_t)n);
    }
    srv_sleep_ms(1500); /* the server fills the buffers and blocks */
    double t0 = now_s();
    int rc = srv_stop(&s, 30);
    double dt = now_s() - t0;
    fprintf(stderr, "shutdown: exit %d after %.2f s with 4 clients that never read (--shutdown-timeout 2)\n", rc, dt);
    CHECK_MSG(rc == 0, "shutdown: exit status %d", rc);
    CHECK_MSG(dt <= 2.0 + SHUTDOWN_SLACK, "shutdown: the server exits within --shutdown-timeout 2 (took %.2f s)", dt);
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (rc != 0 || dt > 2.0 + SHUTDOWN_SLACK) srv_dump(s.err, "server stderr");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (!srv_tmpdir("hostile")) TEST_END();
    /* the attack needs ~2,100 descriptors here */
    struct rlimit rl;
    int attackers = 2000;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2200) {
        rl.rlim_cur = rl.rlim_max < 2200 ? rl.rlim_max : 2200;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < 2200) {
            attackers = (int)rl.rlim_cur - 100;
            fprintf(stderr, "open-file limit %llu: %d slow connections instead of 2000\n", (unsigned long long)rl.rlim_cur,
                    attackers);
        }
    }
    srv_proc s;
    const int per_client = 400, max_conn = 700, header_timeout = 2;
    char extra[256];
    snprintf(extra, sizeof extra,
             "--max-body-mb 1 --header-timeout %d --max-connections %d --max-connections-per-client %d --max-pending 16",
             header_timeout, max_conn, per_client);
    bool up = srv_start(&s, "server", extra, 120);
    CHECK_MSG(up, "vllmc serve did not start");
    if (up) {
        test_framing(s.port);
        test_half_close(s.port);
        test_slow_loris(s.port, attackers, per_client, header_timeout);
        test_overload(s.port, max_conn);
        test_log_injection(&s);
        srv_stop_check(&s, t_failures > 0);
    }
    test_shutdown();
    srv_cleanup();
    TEST_END();
}
