/*
 * test_server_request_id.c: requests that share a request_id (issue 19, item 3), against
 * `vllmc serve` on stories260K over plain sockets. While a streamed completion with
 * request_id "dup" is generating, a completion and a chat completion with the same id
 * must succeed too (the engine's ids carry a server-unique part, as vLLM appends its
 * own), and so must two requests whose ids differ only after 200 bytes (ids were cut to
 * 159 bytes); every reply echoes its request_id unchanged ("cmpl-dup", "chatcmpl-dup"),
 * and none says "already in use". The server must exit 0 on SIGTERM afterwards.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "server/test_server_util.h"

static int g_port;

/* Connects and sends one POST with Connection: close; the socket, or -1. */
static int post(const char *path, const char *body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      path, strlen(body));
    size_t bn = strlen(body);
    if (write(fd, head, (size_t)hn) != hn || write(fd, body, bn) != (ssize_t)bn) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct reply {
    char *data;
    size_t len, cap;
} reply;

/* Reads into r until `until` appears (NULL: until the server closes) or timeout_s passes. */
static bool read_until(int fd, reply *r, const char *until, int timeout_s) {
    double deadline = (double)time(NULL) + timeout_s;
    for (;;) {
        if (until && r->data && strstr(r->data, until)) return true;
        if ((double)time(NULL) > deadline) return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        if (r->len + 4097 > r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 65536;
            char *d = realloc(r->data, cap);
            if (!d) return false;
            r->data = d, r->cap = cap;
        }
        ssize_t n = read(fd, r->data + r->len, 4096);
        if (n <= 0) return until == NULL;
        r->len += (size_t)n;
        r->data[r->len] = 0;
    }
}

/* One whole exchange: the reply (malloc'd, NUL-terminated), or NULL. */
static char *exchange(const char *path, const char *body) {
    int fd = post(path, body);
    if (fd < 0) return NULL;
    reply r = {0};
    bool ok = read_until(fd, &r, NULL, 60);
    close(fd);
    if (!ok) free(r.data), r.data = NULL;
    return r.data;
}

static bool status_200(const char *reply) { return reply && !strncmp(reply, "HTTP/1.1 200", 12); }

/* Every "id" in a reply (body or SSE events) is want, and there is at least one. */
static bool ids_are(const char *reply, const char *want) {
    size_t hits = 0;
    for (const char *p = reply ? strstr(reply, "\"id\":\"") : NULL; p; p = strstr(p + 1, "\"id\":\"")) {
        const char *v = p + 6, *end = strchr(v, '"');
        if (!end || (size_t)(end - v) != strlen(want) || strncmp(v, want, strlen(want))) return false;
        hits++;
    }
    return hits > 0;
}

/* A long streamed completion with this request_id: its socket once its first event arrived. */
static int start_stream(const char *request_id, reply *r) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"stories\",\"prompt\":\"Once upon a time\",\"max_tokens\":320,\"ignore_eos\":true,"
             "\"n\":16,\"temperature\":1,\"stream\":true,\"request_id\":\"%s\"}",
             request_id);
    int fd = post("/v1/completions", body);
    if (fd < 0) return -1;
    if (!read_until(fd, r, "data: {", 60)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads a started stream to its end and checks it. */
static void finish_stream(int fd, reply *r, const char *want_id, const char *what) {
    bool ok = read_until(fd, r, NULL, 300); /* ASan builds on 2 cores: about a minute */
    close(fd);
    CHECK_MSG(ok && status_200(r->data), "%s: %.300s", what, r->data ? r->data : "(nothing)");
    CHECK_MSG(r->data && strstr(r->data, "data: [DONE]"), "%s: no [DONE]", what);
    CHECK_MSG(ids_are(r->data, want_id), "%s: an id is not %s", what, want_id);
    CHECK_MSG(r->data && !strstr(r->data, "already in use"), "%s: %s", what, r->data);
    free(r->data);
}

static void run(void) {
    /* the same short id, three requests at once */
    reply a = {0};
    int fa = start_stream("dup", &a);
    CHECK_MSG(fa >= 0, "the first stream did not start: %.300s", a.data ? a.data : "(nothing)");
    if (fa < 0) return;
    char *b = exchange("/v1/completions", "{\"model\":\"stories\",\"prompt\":\"The dog\",\"max_tokens\":5,"
                                          "\"request_id\":\"dup\"}");
    CHECK_MSG(status_200(b) && ids_are(b, "cmpl-dup"), "second request with request_id dup: %s", b ? b : "(nothing)");
    free(b);
    char *c = exchange("/v1/chat/completions", "{\"model\":\"stories\",\"messages\":[{\"role\":\"user\","
                                               "\"content\":\"Hi\"}],\"max_tokens\":5,\"request_id\":\"dup\"}");
    CHECK_MSG(status_200(c) && ids_are(c, "chatcmpl-dup"), "chat with request_id dup: %s", c ? c : "(nothing)");
    free(c);
    finish_stream(fa, &a, "cmpl-dup", "the first stream");

    /* ids equal in their first 200 bytes */
    char id1[256], id2[256], want1[300], want2[300], body[1024];
    memset(id1, 'x', 200), memset(id2, 'x', 200);
    snprintf(id1 + 200, 8, "-one"), snprintf(id2 + 200, 8, "-two");
    snprintf(want1, sizeof want1, "cmpl-%s", id1), snprintf(want2, sizeof want2, "cmpl-%s", id2);
    reply l = {0};
    int fl = start_stream(id1, &l);
    CHECK_MSG(fl >= 0, "the long-id stream did not start: %.300s", l.data ? l.data : "(nothing)");
    if (fl < 0) return;
    snprintf(body, sizeof body, "{\"model\":\"stories\",\"prompt\":\"The cat\",\"max_tokens\":5,\"request_id\":\"%s\"}",
             id2);
    char *d = exchange("/v1/completions", body);
    CHECK_MSG(status_200(d) && ids_are(d, want2), "a request_id equal in its first 200 bytes: %s", d ? d : "(nothing)");
    free(d);
    finish_stream(fl, &l, want1, "the long-id stream");
}

int main(void) {
    if (!srv_tmpdir("request-id")) TEST_END();
    srv_proc s;
    bool up = srv_start(&s, "server", "", 120);
    CHECK_MSG(up, "vllmc serve did not start");
    if (up) {
        g_port = s.port;
        run();
        srv_stop_check(&s, t_failures != 0);
    }
    srv_cleanup();
    TEST_END();
}
