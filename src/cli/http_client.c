/*
 * http_client.c: the HTTP/1.1 client of http_client.h. Three layers over one
 * non-blocking socket, each wait bounded by poll() and the connection's
 * timeout:
 *   raw    bytes from recv() in a buffer; CRLF lines for the head and chunk sizes
 *   body   decoded body pieces: Content-Length, chunked (RFC 9112 7.1) or until close
 *   lines  body lines (hc_read_line) and Server-Sent Events on them (hc_sse_next,
 *          the WHATWG event-stream rules: "data:" fields joined by "\n", ":" comments,
 *          an empty line ends an event)
 * Every length from the server is checked before it is used.
 */
#include "cli/http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

typedef enum body_mode {
    BODY_NONE = 0,     /* no body (HEAD, 204, 304) */
    BODY_LENGTH,       /* Content-Length bytes */
    BODY_CHUNKED,      /* chunked transfer coding */
    BODY_UNTIL_CLOSE,  /* everything until the server closes */
} body_mode;

struct hc_conn {
    int fd;
    int timeout_ms;
    bool (*cancelled)(void);  /* hc_set_cancel: polled while waiting (a Ctrl-C flag) */
    char where[300];          /* "host:port" for messages and the Host header */
    /* raw bytes received and not consumed: raw[raw_pos, raw_end) */
    char *raw;
    size_t raw_cap, raw_pos, raw_end;
    bool peer_closed;         /* recv() returned 0 */
    /* framing of the current body */
    bool head_method;         /* the last request was HEAD */
    body_mode mode;
    uint64_t left;            /* LENGTH: body bytes left; CHUNKED: bytes left in this chunk */
    bool need_crlf;           /* CHUNKED: a chunk's data ended, its CRLF follows */
    bool body_done;
    bool keep_alive;
    /* decoded body bytes not yet returned as lines: lb[lb_pos, lb_end) */
    char *lb;
    size_t lb_cap, lb_pos, lb_end;
    /* the SSE event being assembled */
    char *ev;
    size_t ev_cap, ev_len;
    bool ev_has_data;
};

/* ------------------------------------------------------------------ */
/* URLs                                                                */
/* ------------------------------------------------------------------ */

vllm_status hc_parse_url(const char *url, hc_url *out) {
    memset(out, 0, sizeof *out);
    if (!url) return vt_error(VLLM_ERR_INVALID_ARG, "url missing");
    if (!strncasecmp(url, "https://", 8))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: https is not supported (no TLS in vllmc), use http://", url);
    if (strncasecmp(url, "http://", 7) != 0) return vt_error(VLLM_ERR_INVALID_ARG, "%s: not an http:// URL", url);
    const char *p = url + 7;
    const char *host_end;
    const char *host = p;
    if (*p == '[') { /* [IPv6]:port */
        host = p + 1;
        host_end = strchr(host, ']');
        if (!host_end) return vt_error(VLLM_ERR_INVALID_ARG, "%s: unclosed '[' in the host", url);
        p = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/?#");
        p = host_end;
    }
    size_t hl = (size_t)(host_end - host);
    if (hl == 0 || hl >= sizeof out->host) return vt_error(VLLM_ERR_INVALID_ARG, "%s: bad host", url);
    memcpy(out->host, host, hl);
    out->host[hl] = 0;
    out->port = 80;
    if (*p == ':') {
        p++;
        long port = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 6) port = port * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || port < 1 || port > 65535) return vt_error(VLLM_ERR_INVALID_ARG, "%s: bad port", url);
        out->port = (int)port;
    }
    if (*p && *p != '/') return vt_error(VLLM_ERR_INVALID_ARG, "%s: unexpected '%c' after the host", url, *p);
    size_t bl = strcspn(p, "?#");
    while (bl > 0 && p[bl - 1] == '/') bl--;
    if (bl >= sizeof out->base) return vt_error(VLLM_ERR_INVALID_ARG, "%s: path too long", url);
    memcpy(out->base, p, bl);
    out->base[bl] = 0;
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Connection                                                          */
/* ------------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Waits for events on the socket; VLLM_OK when ready, an error on timeout. */
static vllm_status wait_fd(hc_conn *c, short events, const char *what) {
    double deadline = now_ms() + c->timeout_ms;
    for (;;) {
        if (c->cancelled && c->cancelled()) return vt_error(VLLM_ERR_IO, "%s: interrupted %s", c->where, what);
        struct pollfd pfd = {.fd = c->fd, .events = events};
        double left = deadline - now_ms();
        if (left < 0) left = 0;
        if (c->cancelled && left > 200) left = 200; /* look at the cancel flag at least every 200 ms */
        int r = poll(&pfd, 1, (int)left);
        if (r > 0) return VLLM_OK; /* readable, writable, or an error/hang-up the next call reports */
        if (r == 0 && now_ms() >= deadline)
            return vt_error(VLLM_ERR_IO, "%s: timed out after %d ms %s", c->where, c->timeout_ms, what);
        if (r < 0 && errno != EINTR) return vt_error(VLLM_ERR_IO, "%s: poll: %s", c->where, strerror(errno));
    }
}

void hc_set_cancel(hc_conn *c, bool (*cancelled)(void)) { c->cancelled = cancelled; }

/* A connection without a socket yet (fd -1), NULL when out of memory. (Also what
 * tests/fuzz/fuzz_http_client.c wraps around one end of a socketpair.) */
static hc_conn *conn_new(int timeout_ms) {
    hc_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = -1;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
    /* the buffers exist from the start (never NULL; they grow as needed) */
    c->raw_cap = 64 * 1024;
    c->lb_cap = 4096;
    c->raw = malloc(c->raw_cap);
    c->lb = malloc(c->lb_cap);
    if (!c->raw || !c->lb) {
        hc_close(c);
        return NULL;
    }
    return c;
}

vllm_status hc_connect(const char *host, int port, int timeout_ms, hc_conn **out) {
    *out = NULL;
    if (!host || !*host || port < 1 || port > 65535)
        return vt_error(VLLM_ERR_INVALID_ARG, "hc_connect: bad host or port");
    hc_conn *c = conn_new(timeout_ms);
    if (!c) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    bool v6 = strchr(host, ':') != NULL;
    snprintf(c->where, sizeof c->where, v6 ? "[%s]:%d" : "%s:%d", host, port);

    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, port_s, &hints, &res);
    if (gai != 0) {
        vllm_status st = vt_error(VLLM_ERR_IO, "%s: cannot resolve host: %s", c->where, gai_strerror(gai));
        hc_close(c);
        return st;
    }
    vllm_status st = vt_error(VLLM_ERR_IO, "%s: no address to connect to", c->where);
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            st = vt_error(VLLM_ERR_IO, "%s: socket: %s", c->where, strerror(errno));
            continue;
        }
        c->fd = fd;
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            st = wait_fd(c, POLLOUT, "connecting");
            if (st == VLLM_OK) {
                int err = 0;
                socklen_t len = sizeof err;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
                r = err ? -1 : 0;
                errno = err;
            }
        }
        if (r == 0) {
            /* requests go out in one send; no Nagle delay before the server sees them */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            st = VLLM_OK;
            break;
        }
        if (errno) st = vt_error(VLLM_ERR_IO, "%s: connect: %s", c->where, strerror(errno));
        close(fd);
        c->fd = -1;
    }
    freeaddrinfo(res);
    if (st != VLLM_OK) {
        hc_close(c);
        return st;
    }
    c->keep_alive = true;
    c->body_done = true;
    *out = c;
    return VLLM_OK;
}

void hc_close(hc_conn *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c->raw);
    free(c->lb);
    free(c->ev);
    free(c);
}

bool hc_reusable(const hc_conn *c) {
    return c && c->fd >= 0 && c->keep_alive && c->body_done && !c->peer_closed && c->raw_pos == c->raw_end &&
           c->lb_pos == c->lb_end;
}

/* ------------------------------------------------------------------ */
/* Sending                                                             */
/* ------------------------------------------------------------------ */

static vllm_status send_all(hc_conn *c, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            vllm_status st = wait_fd(c, POLLOUT, "sending the request");
            if (st) return st;
            continue;
        }
        return vt_error(VLLM_ERR_IO, "%s: send: %s", c->where, w < 0 ? strerror(errno) : "nothing written");
    }
    return VLLM_OK;
}

/* True when s has no CR, LF, space or control byte (a request-line token). */
static bool clean_token(const char *s) {
    if (!s || !*s) return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f) return false;
    return true;
}

vllm_status hc_send(hc_conn *c, const char *method, const char *path, const char *headers, const char *body,
                    size_t body_len) {
    if (!c || c->fd < 0) return vt_error(VLLM_ERR_INVALID_ARG, "hc_send: no connection");
    if (!clean_token(method) || !clean_token(path) || path[0] != '/')
        return vt_error(VLLM_ERR_INVALID_ARG, "hc_send: bad method or path");
    if (!c->body_done || c->raw_pos != c->raw_end || c->lb_pos != c->lb_end)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: the previous response was not read to its end", c->where);
    if (!c->keep_alive || c->peer_closed)
        return vt_error(VLLM_ERR_IO, "%s: the server closed this connection", c->where);
    char head[1024];
    int hn = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n", method, path,
                      c->where);
    if (hn < 0 || (size_t)hn >= sizeof head) return vt_error(VLLM_ERR_INVALID_ARG, "hc_send: path too long");
    if (body) {
        int k = snprintf(head + hn, sizeof head - (size_t)hn, "Content-Length: %zu\r\n", body_len);
        if (k < 0 || (size_t)k >= sizeof head - (size_t)hn) return vt_error(VLLM_ERR_INVALID_ARG, "hc_send: path too long");
        hn += k;
    }
    size_t hl = headers ? strlen(headers) : 0;
    if (!body) body_len = 0;
    /* one buffer, one send: head + extra headers + blank line + body */
    if (hl > SIZE_MAX / 2 || body_len > SIZE_MAX / 2 - hl - (size_t)hn - 2)
        return vt_error(VLLM_ERR_INVALID_ARG, "hc_send: request too large");
    size_t total = (size_t)hn + hl + 2 + body_len;
    char *msg = malloc(total);
    if (!msg) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory for a %zu-byte request", total);
    memcpy(msg, head, (size_t)hn);
    if (hl) memcpy(msg + hn, headers, hl);
    memcpy(msg + (size_t)hn + hl, "\r\n", 2);
    if (body_len) memcpy(msg + (size_t)hn + hl + 2, body, body_len);
    vllm_status st = send_all(c, msg, total);
    free(msg);
    c->head_method = !strcmp(method, "HEAD");
    return st;
}

/* ------------------------------------------------------------------ */
/* Raw layer                                                           */
/* ------------------------------------------------------------------ */

/* Receives more bytes into raw (or sets peer_closed). */
static vllm_status raw_fill(hc_conn *c) {
    if (c->raw_pos == c->raw_end) c->raw_pos = c->raw_end = 0;
    if (c->raw_end == c->raw_cap && c->raw_pos > 0) {
        memmove(c->raw, c->raw + c->raw_pos, c->raw_end - c->raw_pos);
        c->raw_end -= c->raw_pos;
        c->raw_pos = 0;
    }
    if (c->raw_end == c->raw_cap) {
        size_t cap = c->raw_cap * 2;
        if (cap > 4 * (size_t)HC_MAX_LINE + 64 * 1024)
            return vt_error(VLLM_ERR_FORMAT, "%s: response line longer than %d bytes", c->where, HC_MAX_LINE);
        char *n = realloc(c->raw, cap);
        if (!n) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        c->raw = n;
        c->raw_cap = cap;
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->raw + c->raw_end, c->raw_cap - c->raw_end, 0);
        if (r > 0) {
            c->raw_end += (size_t)r;
            return VLLM_OK;
        }
        if (r == 0) {
            c->peer_closed = true;
            return VLLM_OK;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            vllm_status st = wait_fd(c, POLLIN, "waiting for the response");
            if (st) return st;
            continue;
        }
        return vt_error(VLLM_ERR_IO, "%s: recv: %s", c->where, strerror(errno));
    }
}

/* The next CRLF (or LF) line of raw bytes, NUL-terminated in place without
 * its line end; valid until the next raw call. */
static vllm_status raw_line(hc_conn *c, char **line, size_t *len, const char *what) {
    for (;;) {
        char *s = c->raw + c->raw_pos;
        size_t avail = c->raw_end - c->raw_pos;
        char *nl = avail ? memchr(s, '\n', avail) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - s);
            if (n > HC_MAX_LINE)
                return vt_error(VLLM_ERR_FORMAT, "%s: %s longer than %d bytes", c->where, what, HC_MAX_LINE);
            c->raw_pos += n + 1;
            if (n > 0 && s[n - 1] == '\r') n--;
            s[n] = 0;
            *line = s;
            *len = n;
            return VLLM_OK;
        }
        if (avail > HC_MAX_LINE)
            return vt_error(VLLM_ERR_FORMAT, "%s: %s longer than %d bytes", c->where, what, HC_MAX_LINE);
        if (c->peer_closed)
            return vt_error(VLLM_ERR_IO, "%s: connection closed by the server while reading the %s", c->where, what);
        vllm_status st = raw_fill(c);
        if (st) return st;
    }
}

/* Up to max raw bytes (at least 1 unless the server closed: then *n = 0). */
static vllm_status raw_take(hc_conn *c, uint64_t max, const char **p, size_t *n) {
    if (c->raw_pos == c->raw_end && !c->peer_closed) {
        vllm_status st = raw_fill(c);
        if (st) return st;
    }
    size_t avail = c->raw_end - c->raw_pos;
    if ((uint64_t)avail > max) avail = (size_t)max;
    *p = c->raw + c->raw_pos;
    *n = avail;
    c->raw_pos += avail;
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Response head                                                       */
/* ------------------------------------------------------------------ */

/* Case-insensitive: does the comma-separated header value hold token? */
static bool has_token(const char *value, const char *token) {
    size_t tl = strlen(token);
    const char *p = value;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t')) m--;
        if (m == tl && !strncasecmp(p, token, tl)) return true;
        p += n;
    }
    return false;
}

static void copy_trunc(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

vllm_status hc_read_head(hc_conn *c, hc_response *r) {
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    if (!c || c->fd < 0) return vt_error(VLLM_ERR_INVALID_ARG, "hc_read_head: no connection");
    c->lb_pos = c->lb_end = 0;
    c->ev_len = 0;
    c->ev_has_data = false;
    for (;;) { /* once per response head; 1xx heads are skipped */
        char *line;
        size_t len;
        vllm_status st = raw_line(c, &line, &len, "status line");
        if (st) return st;
        int minor = -1, status = 0, consumed = 0;
        if (sscanf(line, "HTTP/1.%1d %3d%n", &minor, &status, &consumed) != 2 || status < 100 || status > 599 ||
            (line[consumed] != ' ' && line[consumed] != 0))
            return vt_error(VLLM_ERR_FORMAT, "%s: not an HTTP/1.x status line: '%.80s'", c->where, line);
        const char *reason = line + consumed;
        while (*reason == ' ') reason++;
        r->status = status;
        copy_trunc(r->reason, sizeof r->reason, reason);
        r->keep_alive = minor >= 1;
        r->chunked = false;
        r->content_length = -1;
        r->content_type[0] = 0;
        bool te_seen = false;
        for (int nh = 0;; nh++) {
            st = raw_line(c, &line, &len, "header");
            if (st) return st;
            if (len == 0) break;
            if (nh >= HC_MAX_HEADERS)
                return vt_error(VLLM_ERR_FORMAT, "%s: more than %d header lines", c->where, HC_MAX_HEADERS);
            char *colon = strchr(line, ':');
            if (!colon || colon == line)
                return vt_error(VLLM_ERR_FORMAT, "%s: malformed header line '%.80s'", c->where, line);
            *colon = 0;
            char *value = colon + 1;
            while (*value == ' ' || *value == '\t') value++;
            size_t vl = strlen(value);
            while (vl > 0 && (value[vl - 1] == ' ' || value[vl - 1] == '\t')) value[--vl] = 0;
            if (!strcasecmp(line, "content-length")) {
                long long v = 0;
                if (!*value) return vt_error(VLLM_ERR_FORMAT, "%s: empty Content-Length", c->where);
                for (const char *q = value; *q; q++) {
                    if (*q < '0' || *q > '9' || v > (LLONG_MAX - 9) / 10)
                        return vt_error(VLLM_ERR_FORMAT, "%s: bad Content-Length '%.40s'", c->where, value);
                    v = v * 10 + (*q - '0');
                }
                if (r->content_length >= 0 && r->content_length != v)
                    return vt_error(VLLM_ERR_FORMAT, "%s: conflicting Content-Length headers", c->where);
                r->content_length = v;
            } else if (!strcasecmp(line, "transfer-encoding")) {
                te_seen = true;
                /* chunked must be the last coding (RFC 9112 6.3) */
                const char *last = strrchr(value, ',');
                last = last ? last + 1 : value;
                while (*last == ' ' || *last == '\t') last++;
                r->chunked = !strcasecmp(last, "chunked");
            } else if (!strcasecmp(line, "connection")) {
                if (has_token(value, "close")) r->keep_alive = false;
                else if (has_token(value, "keep-alive")) r->keep_alive = true;
            } else if (!strcasecmp(line, "content-type")) {
                copy_trunc(r->content_type, sizeof r->content_type, value);
            }
        }
        if (status >= 100 && status < 200) continue; /* 100 Continue and friends: the real head follows */
        c->body_done = false;
        c->need_crlf = false;
        c->left = 0;
        if (c->head_method || status == 204 || status == 304) {
            c->mode = BODY_NONE;
            c->body_done = true;
        } else if (te_seen) {
            if (!r->chunked) { /* a body framed only by close */
                c->mode = BODY_UNTIL_CLOSE;
                r->keep_alive = false;
            } else {
                c->mode = BODY_CHUNKED;
            }
            r->content_length = -1; /* Transfer-Encoding overrides Content-Length */
        } else if (r->content_length >= 0) {
            c->mode = BODY_LENGTH;
            c->left = (uint64_t)r->content_length;
            if (c->left == 0) c->body_done = true;
        } else {
            c->mode = BODY_UNTIL_CLOSE;
            r->keep_alive = false;
        }
        c->keep_alive = r->keep_alive;
        return VLLM_OK;
    }
}

/* ------------------------------------------------------------------ */
/* Body layer                                                          */
/* ------------------------------------------------------------------ */

/* Parses a chunk-size line: hex digits, then optional ";ext" or spaces. */
static bool parse_chunk_size(const char *s, uint64_t *out) {
    uint64_t v = 0;
    int digits = 0;
    for (; *s; s++) {
        int d;
        if (*s >= '0' && *s <= '9') d = *s - '0';
        else if (*s >= 'a' && *s <= 'f') d = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F') d = *s - 'A' + 10;
        else break;
        if (v > (UINT64_MAX >> 4)) return false;
        v = v * 16 + (uint64_t)d;
        digits++;
    }
    if (digits == 0) return false;
    while (*s == ' ' || *s == '\t') s++;
    if (*s && *s != ';') return false;
    *out = v;
    return true;
}

/* The next piece of decoded body (pointing into raw); *n = 0 at its end. */
static vllm_status body_piece(hc_conn *c, const char **p, size_t *n) {
    *p = NULL;
    *n = 0;
    vllm_status st;
    while (!c->body_done) {
        switch (c->mode) {
        case BODY_NONE:
            c->body_done = true;
            break;
        case BODY_LENGTH:
            st = raw_take(c, c->left, p, n);
            if (st) return st;
            if (*n == 0)
                return vt_error(VLLM_ERR_IO, "%s: connection closed with %llu body bytes still to come", c->where,
                                (unsigned long long)c->left);
            c->left -= *n;
            if (c->left == 0) c->body_done = true;
            return VLLM_OK;
        case BODY_UNTIL_CLOSE:
            st = raw_take(c, UINT64_MAX, p, n);
            if (st) return st;
            if (*n == 0) {
                c->body_done = true;
                c->keep_alive = false;
            }
            return VLLM_OK;
        case BODY_CHUNKED: {
            if (c->left > 0) {
                st = raw_take(c, c->left, p, n);
                if (st) return st;
                if (*n == 0) return vt_error(VLLM_ERR_IO, "%s: connection closed inside a chunk", c->where);
                c->left -= *n;
                if (c->left == 0) c->need_crlf = true;
                return VLLM_OK;
            }
            char *line;
            size_t len;
            if (c->need_crlf) {
                st = raw_line(c, &line, &len, "chunk end");
                if (st) return st;
                if (len != 0) return vt_error(VLLM_ERR_FORMAT, "%s: chunk data longer than its size", c->where);
                c->need_crlf = false;
            }
            st = raw_line(c, &line, &len, "chunk size line");
            if (st) return st;
            uint64_t size;
            if (!parse_chunk_size(line, &size))
                return vt_error(VLLM_ERR_FORMAT, "%s: bad chunk size line '%.40s'", c->where, line);
            if (size == 0) { /* last chunk: skip trailer fields up to the empty line */
                for (int k = 0;; k++) {
                    st = raw_line(c, &line, &len, "trailer");
                    if (st) return st;
                    if (len == 0) break;
                    if (k >= HC_MAX_HEADERS) return vt_error(VLLM_ERR_FORMAT, "%s: too many trailer lines", c->where);
                }
                c->body_done = true;
                break;
            }
            c->left = size;
            break;
        }
        }
    }
    return VLLM_OK;
}

/* Appends decoded body bytes to lb (compacting first); bounded by HC_MAX_BODY. */
static vllm_status lb_append(hc_conn *c, const char *p, size_t n) {
    if (c->lb_pos > 0) {
        memmove(c->lb, c->lb + c->lb_pos, c->lb_end - c->lb_pos);
        c->lb_end -= c->lb_pos;
        c->lb_pos = 0;
    }
    if (n > HC_MAX_BODY || c->lb_end > HC_MAX_BODY - n)
        return vt_error(VLLM_ERR_FORMAT, "%s: a response line longer than %zu bytes", c->where, HC_MAX_BODY);
    if (c->lb_end + n + 1 > c->lb_cap) { /* +1: room for a NUL */
        size_t cap = c->lb_cap;
        while (cap < c->lb_end + n + 1) cap *= 2;
        char *nb = realloc(c->lb, cap);
        if (!nb) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        c->lb = nb;
        c->lb_cap = cap;
    }
    memcpy(c->lb + c->lb_end, p, n);
    c->lb_end += n;
    return VLLM_OK;
}

vllm_status hc_read_line(hc_conn *c, const char **line, size_t *len, bool *eof) {
    *line = NULL;
    *len = 0;
    *eof = false;
    size_t scanned = 0; /* bytes of lb already known to hold no newline */
    for (;;) {
        char *s = c->lb + c->lb_pos;
        size_t avail = c->lb_end - c->lb_pos;
        char *nl = avail > scanned ? memchr(s + scanned, '\n', avail - scanned) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - s);
            c->lb_pos += n + 1;
            if (n > 0 && s[n - 1] == '\r') n--;
            s[n] = 0;
            *line = s;
            *len = n;
            return VLLM_OK;
        }
        if (c->body_done) {
            if (avail == 0) {
                *eof = true;
                return VLLM_OK;
            }
            /* the last line, without a newline: lb always has room for the NUL */
            c->lb_pos = c->lb_end;
            if (s[avail - 1] == '\r') avail--;
            s[avail] = 0;
            *line = s;
            *len = avail;
            return VLLM_OK;
        }
        scanned = avail;
        const char *p;
        size_t n;
        vllm_status st = body_piece(c, &p, &n);
        if (st) return st;
        if (n) { /* lb_append compacts lb to lb_pos = 0; scanned stays relative to lb_pos */
            st = lb_append(c, p, n);
            if (st) return st;
        }
    }
}

/* Appends to the SSE event buffer (with a "\n" between data lines). */
static vllm_status ev_append(hc_conn *c, const char *p, size_t n) {
    size_t extra = n + (c->ev_has_data ? 1 : 0);
    if (extra > HC_MAX_BODY || c->ev_len > HC_MAX_BODY - extra)
        return vt_error(VLLM_ERR_FORMAT, "%s: a server-sent event larger than %zu bytes", c->where, HC_MAX_BODY);
    if (c->ev_len + extra + 1 > c->ev_cap) {
        size_t cap = c->ev_cap ? c->ev_cap : 4096;
        while (cap < c->ev_len + extra + 1) cap *= 2;
        char *nb = realloc(c->ev, cap);
        if (!nb) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        c->ev = nb;
        c->ev_cap = cap;
    }
    if (c->ev_has_data) c->ev[c->ev_len++] = '\n';
    memcpy(c->ev + c->ev_len, p, n);
    c->ev_len += n;
    c->ev[c->ev_len] = 0;
    c->ev_has_data = true;
    return VLLM_OK;
}

vllm_status hc_sse_next(hc_conn *c, const char **data, size_t *len, bool *eof) {
    *data = NULL;
    *len = 0;
    *eof = false;
    c->ev_len = 0;
    c->ev_has_data = false;
    for (;;) {
        const char *line;
        size_t n;
        bool end;
        vllm_status st = hc_read_line(c, &line, &n, &end);
        if (st) return st;
        if (end || n == 0) {
            if (c->ev_has_data) { /* dispatch */
                *data = c->ev;
                *len = c->ev_len;
                return VLLM_OK;
            }
            if (end) {
                *eof = true;
                return VLLM_OK;
            }
            continue;
        }
        if (line[0] == ':') continue; /* comment (keep-alive pings) */
        const char *colon = memchr(line, ':', n);
        size_t name_len = colon ? (size_t)(colon - line) : n;
        if (name_len != 4 || memcmp(line, "data", 4) != 0) continue; /* event:, id:, retry: ignored */
        const char *v = colon ? colon + 1 : line + n;
        if (v < line + n && *v == ' ') v++;
        st = ev_append(c, v, (size_t)(line + n - v));
        if (st) return st;
    }
}

vllm_status hc_read_body(hc_conn *c, char **body, size_t *len) {
    *body = NULL;
    *len = 0;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (!b) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    /* bytes already decoded by the line reader come first */
    const char *p = c->lb + c->lb_pos;
    size_t k = c->lb_end - c->lb_pos;
    c->lb_pos = c->lb_end = 0;
    for (;;) {
        if (k) {
            if (k > HC_MAX_BODY || n > HC_MAX_BODY - k) {
                free(b);
                return vt_error(VLLM_ERR_FORMAT, "%s: response body larger than %zu bytes", c->where, HC_MAX_BODY);
            }
            if (n + k + 1 > cap) {
                while (cap < n + k + 1) cap *= 2;
                char *nb = realloc(b, cap);
                if (!nb) {
                    free(b);
                    return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
                }
                b = nb;
            }
            memcpy(b + n, p, k);
            n += k;
        }
        if (c->body_done) break;
        vllm_status st = body_piece(c, &p, &k);
        if (st) {
            free(b);
            return st;
        }
    }
    b[n] = 0;
    *body = b;
    *len = n;
    return VLLM_OK;
}

vllm_status hc_fetch(const char *host, int port, int timeout_ms, const char *method, const char *path,
                     const char *headers, const char *body, size_t body_len, int *status, char **resp_body,
                     size_t *resp_len) {
    *status = 0;
    *resp_body = NULL;
    if (resp_len) *resp_len = 0;
    hc_conn *c;
    vllm_status st = hc_connect(host, port, timeout_ms, &c);
    if (st) return st;
    hc_response r;
    size_t n = 0;
    st = hc_send(c, method, path, headers, body, body_len);
    if (!st) st = hc_read_head(c, &r);
    if (!st) st = hc_read_body(c, resp_body, &n);
    if (!st) {
        *status = r.status;
        if (resp_len) *resp_len = n;
    }
    hc_close(c);
    return st;
}
