/*
 * fuzz_http_client.c: libFuzzer target for the HTTP/1.1 client of vllmc bench serve
 * (src/cli/http_client.c): status lines, headers, Content-Length / chunked / close-delimited
 * bodies, 1xx heads, pipelined responses, body lines and Server-Sent Events, and hc_parse_url.
 * The input is what the server sends, through a socketpair written by a thread, after a
 * flags byte: bits 0-1 how the body is read (whole, lines, events, events then the rest),
 * bit 2 the request is a HEAD, bit 3 the bytes arrive in small pieces.
 * Any crash, leak, hang or sanitizer report is a bug.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>

#include "cli/http_client.c" /* the client lives in the vllmc CLI, not in libvllmc */
#include "fuzz_util.h"

typedef struct writer {
    int fd;
    const uint8_t *data;
    size_t size;
    bool small_pieces;
} writer;

static void *write_all(void *arg) {
    writer *w = arg;
    size_t off = 0;
    uint32_t rng = (uint32_t)w->size * 2654435761u + 1;
    while (off < w->size) {
        size_t n = w->size - off;
        if (w->small_pieces) {
            rng = rng * 1664525u + 1013904223u;
            size_t piece = 1 + (rng >> 24) % 13;
            if (n > piece) n = piece;
        }
        ssize_t k = send(w->fd, w->data + off, n, MSG_NOSIGNAL);
        if (k <= 0) break; /* the client closed its end */
        off += (size_t)k;
    }
    shutdown(w->fd, SHUT_WR);
    return NULL;
}

static void fail(const char *what) {
    fprintf(fuzz_quiet_stderr(), "fuzz_http_client: %s: %s\n", what, vllm_last_error());
    abort();
}

/* Reads one response's body the way mode says; false when the connection cannot go on. */
static bool read_body(hc_conn *c, int mode) {
    vllm_status st = VLLM_OK;
    if (mode == 1) {
        for (int i = 0; i < 100000; i++) {
            const char *line;
            size_t len;
            bool eof;
            if ((st = hc_read_line(c, &line, &len, &eof))) return false;
            if (eof) return true;
            if (!line || line[len] != 0 || memchr(line, '\n', len)) fail("bad body line");
        }
        return false;
    }
    if (mode == 2 || mode == 3) {
        for (int i = 0; i < 100000; i++) {
            const char *data;
            size_t len;
            bool eof;
            if ((st = hc_sse_next(c, &data, &len, &eof))) return false;
            if (eof) return true;
            if (!data || data[len] != 0) fail("bad event");
            if (mode == 3 && i == 0) break; /* the rest as a whole body */
        }
    }
    char *body = NULL;
    size_t len = 0;
    if ((st = hc_read_body(c, &body, &len))) {
        if (body) fail("body on failure");
        return false;
    }
    if (!body || body[len] != 0) fail("body not terminated");
    free(body);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr();
    /* the input as a URL */
    char *url = malloc(size + 1);
    if (!url) abort();
    memcpy(url, data, size);
    url[size] = 0;
    hc_url u;
    if (hc_parse_url(url, &u) == VLLM_OK &&
        (!memchr(u.host, 0, sizeof u.host) || !u.host[0] || u.port < 1 || u.port > 65535 ||
         !memchr(u.base, 0, sizeof u.base)))
        fail("bad parsed URL");
    free(url);

    if (size < 1) return 0;
    int flags = data[0];
    data++, size--;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK); /* as hc_connect's socket */
    hc_conn *c = conn_new(5000);
    if (!c) abort();
    c->fd = sv[0];
    snprintf(c->where, sizeof c->where, "fuzz");
    c->keep_alive = true;
    c->body_done = true;
    /* the request (left unread in the server's end) */
    vllm_status st = flags & 4 ? hc_send(c, "HEAD", "/health", NULL, NULL, 0)
                               : hc_send(c, "POST", "/v1/completions", "Content-Type: application/json\r\n", "{}", 2);
    if (st) fail("send");
    writer w = {.fd = sv[1], .data = data, .size = size, .small_pieces = (flags & 8) != 0};
    pthread_t th;
    if (pthread_create(&th, NULL, write_all, &w) != 0) abort();
    for (int k = 0; k < 8; k++) { /* pipelined responses while the connection allows */
        hc_response r;
        if (hc_read_head(c, &r)) break;
        if (r.status < 200 || r.status > 599 || !memchr(r.reason, 0, sizeof r.reason) ||
            !memchr(r.content_type, 0, sizeof r.content_type))
            fail("bad response head");
        if (!read_body(c, flags & 3)) break;
        if (!c->body_done) fail("body read but not done");
        if (!c->keep_alive) break;
    }
    hc_close(c); /* the writer, if still sending, gets EPIPE */
    pthread_join(th, NULL);
    close(sv[1]);
    return 0;
}
