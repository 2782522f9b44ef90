/*
 * test_server_http_client.c: src/cli/http_client.c (the HTTP/1.1 client of
 * `vllmc bench serve`) against a scripted in-process server: Content-Length,
 * chunked (with extensions and trailers, delivered one byte per send) and
 * close-delimited bodies, keep-alive reuse, 100 Continue, Server-Sent Events
 * (comments, multi-line data, CRLF, a last event without its blank line),
 * and every failure path: malformed chunk sizes, truncated bodies, overlong
 * header lines, a server that never answers (timeout), bad URLs.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/http_client.c" /* the client lives in the vllmc CLI, not in libvllmc */
#include "test.h"

/* ------------------------------------------------------------------ */
/* The scripted server                                                 */
/* ------------------------------------------------------------------ */

static int g_listen = -1;
static int g_port = 0;

static void send_str(int fd, const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* one byte per send, so the client sees every possible split */
static void send_bytewise(int fd, const char *s) {
    for (int k = 0; s[k]; k++) {
        if (send(fd, s + k, 1, MSG_NOSIGNAL) != 1) return;
        if (k % 16 == 0) usleep(100);
    }
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Reads one request head + Content-Length body; its path into path. false at EOF. */
static bool read_request(int fd, char *path, size_t cap, size_t *body_len) {
    char buf[65536];
    size_t n = 0;
    char *end = NULL;
    while (!end) {
        if (n == sizeof buf - 1) return false;
        ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (r <= 0) return false;
        n += (size_t)r;
        buf[n] = 0;
        end = strstr(buf, "\r\n\r\n");
    }
    char method[16];
    if (sscanf(buf, "%15s %1023s", method, path) != 2) return false;
    (void)cap;
    size_t cl = 0;
    const char *h = strcasestr(buf, "\r\nContent-Length:");
    if (h && h < end) cl = strtoul(h + 17, NULL, 10);
    size_t have = n - (size_t)(end + 4 - buf);
    while (have < cl) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) return false;
        have += (size_t)r;
    }
    *body_len = cl;
    return true;
}

static const char *SSE_BODY =
    ": ping\n\n"
    "data: {\"a\":1}\n\n"
    "data: line1\ndata: line2\n\n"
    "event: x\r\ndata:nospace\r\n\r\n"
    "id: 7\n\n" /* an event without data: skipped */
    "data: [DONE]\n\n"
    "data: tail-without-blank-line";

/* Answers one request on fd; false to close the connection. */
static bool answer(int fd, const char *path, size_t body_len) {
    char out[8192];
    if (!strcmp(path, "/len")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world");
    } else if (!strcmp(path, "/echo-len")) {
        char body[64];
        snprintf(body, sizeof body, "%zu", body_len);
        snprintf(out, sizeof out, "HTTP/1.1 201 Created\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
        send_str(fd, out);
    } else if (!strcmp(path, "/chunked")) {
        send_bytewise(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5\r\nhello\r\n6;ext=1\r\n world\r\nA \r\n\nline2\nend\r\n0\r\nTrailer: x\r\n\r\n");
    } else if (!strcmp(path, "/sse")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        /* the event stream in chunks of 7 bytes */
        size_t n = strlen(SSE_BODY);
        for (size_t off = 0; off < n; off += 7) {
            size_t k = n - off < 7 ? n - off : 7;
            snprintf(out, sizeof out, "%zx\r\n%.*s\r\n", k, (int)k, SSE_BODY + off);
            send_str(fd, out);
            if (off % 21 == 0) sleep_ms(1);
        }
        send_str(fd, "0\r\n\r\n");
    } else if (!strcmp(path, "/close")) {
        send_str(fd, "HTTP/1.0 200 OK\r\n\r\nuntil close\nsecond");
        return false;
    } else if (!strcmp(path, "/continue")) {
        send_str(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        return false;
    } else if (!strcmp(path, "/badchunk")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n");
        return false;
    } else if (!strcmp(path, "/hugechunk")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nabc\r\n");
        return false;
    } else if (!strcmp(path, "/chunk-overrun")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n");
        return false;
    } else if (!strcmp(path, "/truncated")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b");
        return false;
    } else if (!strcmp(path, "/badlen")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\nabc");
        return false;
    } else if (!strcmp(path, "/notstatus")) {
        send_str(fd, "SSH-2.0-OpenSSH\r\n\r\n");
        return false;
    } else if (!strcmp(path, "/longheader")) {
        send_str(fd, "HTTP/1.1 200 OK\r\nX-Long: ");
        static char big[HC_MAX_LINE + 100];
        memset(big, 'a', sizeof big - 1);
        big[sizeof big - 1] = 0;
        send_str(fd, big);
        send_str(fd, "\r\n\r\n");
        return false;
    } else if (!strcmp(path, "/silent")) {
        sleep_ms(1500); /* longer than the client's timeout */
        return false;
    } else if (!strcmp(path, "/error404")) {
        send_str(fd, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n"
                     "{\"error\":{\"code\":404,\"x\":1}}");
    } else {
        send_str(fd, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n");
    }
    return true;
}

static void *server_main(void *arg) {
    (void)arg;
    for (;;) {
        int fd = accept(g_listen, NULL, NULL);
        if (fd < 0) return NULL;
        char path[1024];
        size_t body_len;
        bool stop = false;
        while (read_request(fd, path, sizeof path, &body_len)) {
            if (!strcmp(path, "/quit")) {
                stop = true;
                break;
            }
            if (!answer(fd, path, body_len)) break;
        }
        close(fd);
        if (stop) return NULL;
    }
}

static bool start_server(pthread_t *tid) {
    g_listen = socket(AF_INET, SOCK_STREAM, 0);
    if (g_listen < 0) return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(g_listen, (struct sockaddr *)&a, sizeof a) != 0 || listen(g_listen, 16) != 0 ||
        getsockname(g_listen, (struct sockaddr *)&a, &len) != 0)
        return false;
    g_port = ntohs(a.sin_port);
    return pthread_create(tid, NULL, server_main, NULL) == 0;
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

/* GET path on a new connection: the status and whole body. */
static vllm_status get(const char *path, int timeout_ms, int *status, char **body) {
    return hc_fetch("127.0.0.1", g_port, timeout_ms, "GET", path, NULL, NULL, 0, status, body, NULL);
}

static void test_bodies(void) {
    int status;
    char *body;
    CHECK_OK(get("/len", 2000, &status, &body));
    CHECK(status == 200 && body && !strcmp(body, "hello world"));
    free(body);

    CHECK_OK(get("/chunked", 2000, &status, &body));
    CHECK_MSG(body && !strcmp(body, "hello world\nline2\nend"), "chunked body: '%s'", body ? body : "(null)");
    free(body);

    CHECK_OK(get("/close", 2000, &status, &body));
    CHECK(status == 200 && body && !strcmp(body, "until close\nsecond"));
    free(body);

    CHECK_OK(get("/continue", 2000, &status, &body));
    CHECK(status == 200 && body && !strcmp(body, "ok"));
    free(body);

    CHECK_OK(get("/error404", 2000, &status, &body));
    CHECK(status == 404 && body && strstr(body, "\"code\":404"));
    free(body);

    /* a POST body arrives whole (Content-Length added by hc_send) */
    size_t big = 3 << 20;
    char *payload = malloc(big);
    memset(payload, 'x', big);
    CHECK_OK(hc_fetch("127.0.0.1", g_port, 5000, "POST", "/echo-len", "Content-Type: text/plain\r\n", payload, big,
                      &status, &body, NULL));
    CHECK_MSG(status == 201 && body && strtoul(body, NULL, 10) == big, "status %d body %s", status, body ? body : "");
    free(body);
    free(payload);
}

static void test_lines_and_keepalive(void) {
    hc_conn *c;
    CHECK_OK(hc_connect("127.0.0.1", g_port, 2000, &c));
    if (!c) return;
    hc_response r;
    /* read_line over a chunked body, delivered byte by byte */
    CHECK_OK(hc_send(c, "GET", "/chunked", NULL, NULL, 0));
    CHECK_OK(hc_read_head(c, &r));
    CHECK(r.status == 200 && r.chunked && r.keep_alive && r.content_length == -1);
    const char *want[] = {"hello world", "line2", "end"};
    for (int k = 0; k < 3; k++) {
        const char *line;
        size_t n;
        bool eof;
        CHECK_OK(hc_read_line(c, &line, &n, &eof));
        CHECK_MSG(!eof && line && !strcmp(line, want[k]) && n == strlen(want[k]), "line %d: '%s'", k,
                  line ? line : "(eof)");
    }
    const char *line;
    size_t n;
    bool eof;
    CHECK_OK(hc_read_line(c, &line, &n, &eof));
    CHECK(eof);
    CHECK(hc_reusable(c));
    /* the same connection again, with a Content-Length body */
    CHECK_OK(hc_send(c, "GET", "/len", NULL, NULL, 0));
    CHECK_OK(hc_read_head(c, &r));
    CHECK(r.content_length == 11 && !strcmp(r.content_type, "text/plain") && !strcmp(r.reason, "OK"));
    char *body;
    size_t len;
    CHECK_OK(hc_read_body(c, &body, &len));
    CHECK(len == 11 && body && !strcmp(body, "hello world"));
    free(body);
    CHECK(hc_reusable(c));
    /* a third time: SSE */
    CHECK_OK(hc_send(c, "GET", "/sse", NULL, NULL, 0));
    CHECK_OK(hc_read_head(c, &r));
    CHECK(!strcmp(r.content_type, "text/event-stream"));
    const char *events[] = {"{\"a\":1}", "line1\nline2", "nospace", "[DONE]", "tail-without-blank-line"};
    for (int k = 0; k < 5; k++) {
        const char *data;
        CHECK_OK(hc_sse_next(c, &data, &n, &eof));
        CHECK_MSG(!eof && data && !strcmp(data, events[k]) && n == strlen(events[k]), "event %d: '%s'", k,
                  data ? data : "(eof)");
    }
    const char *data;
    CHECK_OK(hc_sse_next(c, &data, &n, &eof));
    CHECK(eof && data == NULL);
    CHECK(hc_reusable(c));
    /* sending before the body is read is refused */
    CHECK_OK(hc_send(c, "GET", "/len", NULL, NULL, 0));
    CHECK_OK(hc_read_head(c, &r));
    CHECK(hc_send(c, "GET", "/len", NULL, NULL, 0) == VLLM_ERR_INVALID_ARG);
    CHECK(!hc_reusable(c));
    hc_close(c);

    /* a close-delimited body leaves the connection unusable */
    CHECK_OK(hc_connect("127.0.0.1", g_port, 2000, &c));
    CHECK_OK(hc_send(c, "GET", "/close", NULL, NULL, 0));
    CHECK_OK(hc_read_head(c, &r));
    CHECK(!r.keep_alive);
    CHECK_OK(hc_read_body(c, &body, &len));
    free(body);
    CHECK(!hc_reusable(c));
    CHECK(hc_send(c, "GET", "/len", NULL, NULL, 0) == VLLM_ERR_IO);
    hc_close(c);
}

/* A request whose body read fails with status want and a message holding needle. */
static void expect_fail(const char *path, vllm_status want, const char *needle, int timeout_ms) {
    int status;
    char *body = NULL;
    vllm_status st = get(path, timeout_ms, &status, &body);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", path, st, want, vllm_last_error());
    CHECK_MSG(strstr(vllm_last_error(), needle) != NULL, "%s: '%s' lacks '%s'", path, vllm_last_error(), needle);
    CHECK(body == NULL);
    free(body);
}

static void test_failures(void) {
    expect_fail("/badchunk", VLLM_ERR_FORMAT, "bad chunk size", 2000);
    expect_fail("/hugechunk", VLLM_ERR_FORMAT, "bad chunk size", 2000);
    expect_fail("/chunk-overrun", VLLM_ERR_FORMAT, "chunk data longer", 2000);
    expect_fail("/truncated", VLLM_ERR_IO, "body bytes still to come", 2000);
    expect_fail("/badlen", VLLM_ERR_FORMAT, "bad Content-Length", 2000);
    expect_fail("/notstatus", VLLM_ERR_FORMAT, "not an HTTP/1.x status line", 2000);
    expect_fail("/longheader", VLLM_ERR_FORMAT, "longer than", 2000);
    double t0 = now_ms();
    expect_fail("/silent", VLLM_ERR_IO, "timed out", 300);
    CHECK_MSG(now_ms() - t0 < 1400, "timeout took %.0f ms", now_ms() - t0);

    hc_conn *c = NULL;
    /* port 1 on loopback: nothing listens (connection refused) */
    CHECK(hc_connect("127.0.0.1", 1, 1000, &c) == VLLM_ERR_IO && c == NULL);
    CHECK(hc_connect("no-such-host.invalid", 80, 1000, &c) == VLLM_ERR_IO && c == NULL);
    CHECK(hc_connect("", 80, 1000, &c) == VLLM_ERR_INVALID_ARG);
    CHECK_OK(hc_connect("localhost", g_port, 1000, &c));
    if (c) {
        CHECK(hc_send(c, "GET", "no-slash", NULL, NULL, 0) == VLLM_ERR_INVALID_ARG);
        CHECK(hc_send(c, "GET", "/a b", NULL, NULL, 0) == VLLM_ERR_INVALID_ARG);
        CHECK(hc_send(c, "GE\r\nT", "/", NULL, NULL, 0) == VLLM_ERR_INVALID_ARG);
    }
    hc_close(c);
    hc_close(NULL);
}

static void test_urls(void) {
    hc_url u;
    CHECK_OK(hc_parse_url("http://127.0.0.1:8000", &u));
    CHECK(!strcmp(u.host, "127.0.0.1") && u.port == 8000 && !strcmp(u.base, ""));
    CHECK_OK(hc_parse_url("http://example.com/api/v2/", &u));
    CHECK(!strcmp(u.host, "example.com") && u.port == 80 && !strcmp(u.base, "/api/v2"));
    CHECK_OK(hc_parse_url("HTTP://[::1]:9/x?q=1", &u));
    CHECK(!strcmp(u.host, "::1") && u.port == 9 && !strcmp(u.base, "/x"));
    CHECK(hc_parse_url("https://example.com", &u) == VLLM_ERR_UNSUPPORTED);
    CHECK(hc_parse_url("ftp://example.com", &u) == VLLM_ERR_INVALID_ARG);
    CHECK(hc_parse_url("http://:80", &u) == VLLM_ERR_INVALID_ARG);
    CHECK(hc_parse_url("http://h:0", &u) == VLLM_ERR_INVALID_ARG);
    CHECK(hc_parse_url("http://h:65536", &u) == VLLM_ERR_INVALID_ARG);
    CHECK(hc_parse_url("http://h:80x", &u) == VLLM_ERR_INVALID_ARG);
    CHECK(hc_parse_url("http://[::1", &u) == VLLM_ERR_INVALID_ARG);
    CHECK(hc_parse_url(NULL, &u) == VLLM_ERR_INVALID_ARG);
}

int main(void) {
    pthread_t tid;
    if (!start_server(&tid)) TEST_SKIP("cannot listen on 127.0.0.1");
    test_urls();
    test_bodies();
    test_lines_and_keepalive();
    test_failures();
    int status;
    char *body = NULL;
    hc_fetch("127.0.0.1", g_port, 1000, "GET", "/quit", NULL, NULL, 0, &status, &body, NULL); /* fails: no reply */
    free(body);
    pthread_join(tid, NULL);
    close(g_listen);
    TEST_END();
}
