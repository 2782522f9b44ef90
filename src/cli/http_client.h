/*
 * http_client.h: a small HTTP/1.1 client on POSIX sockets, for vllmc's
 * clients of `vllmc serve` (bench serve). It owns one TCP connection per
 * hc_conn (kept alive across requests when the server allows it), reads
 * response bodies framed by Content-Length, chunked transfer coding or
 * connection close, reads them incrementally as lines or Server-Sent Events,
 * and bounds every wait (connect, send, each receive) by a timeout.
 *
 * Typical use:
 *   hc_conn *c; hc_connect("127.0.0.1", 8000, 10000, &c);
 *   hc_send(c, "POST", "/v1/completions", "Content-Type: application/json\r\n", body, len);
 *   hc_response r; hc_read_head(c, &r);
 *   streaming:  while (hc_sse_next(c, &data, &n, &eof) == VLLM_OK && !eof) { ... }
 *   whole body: hc_read_body(c, &body, &n); ... free(body);
 *   hc_close(c);
 * or one request on its own connection: hc_fetch(...).
 *
 * Not supported (clear errors): https, 1xx other than 100-continue (skipped),
 * bodies over HC_MAX_BODY, header lines over HC_MAX_LINE.
 */
#ifndef VLLM_CLI_HTTP_CLIENT_H
#define VLLM_CLI_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

#define HC_MAX_LINE (16 * 1024)             /* status, header and chunk-size lines */
#define HC_MAX_HEADERS 128                  /* header lines per response */
#define HC_MAX_BODY ((size_t)256 << 20)     /* hc_read_body, and one body line / SSE event */

/* "http://host[:port][/base]" split up; port 80 when absent, base without a trailing '/'. */
typedef struct hc_url {
    char host[256];   /* name or address; IPv6 without the brackets */
    int port;
    char base[1024];  /* path prefix, "" or "/x/y" */
} hc_url;

/* Parses an http:// URL (https is rejected: no TLS here). */
vllm_status hc_parse_url(const char *url, hc_url *out);

typedef struct hc_conn hc_conn;

/* Opens a TCP connection (getaddrinfo: names, IPv4, IPv6); timeout_ms bounds
 * the connect and later every single wait for the socket (<= 0: 60 s). */
vllm_status hc_connect(const char *host, int port, int timeout_ms, hc_conn **out);
void hc_close(hc_conn *c);
/* True when the last response allows another request on this connection
 * (HTTP/1.1 keep-alive and its body was read to the end). */
bool hc_reusable(const hc_conn *c);

/* Sends one request. headers: extra header lines, each ending in "\r\n"
 * (NULL for none); Host, Content-Length (when body is not NULL) and
 * Connection are added. body may be NULL. */
vllm_status hc_send(hc_conn *c, const char *method, const char *path, const char *headers, const char *body,
                    size_t body_len);

/* The head of a response. */
typedef struct hc_response {
    int status;                 /* 200, 404, ... */
    char reason[128];           /* "OK", "Not Found", ... (truncated) */
    char content_type[128];     /* "" when absent */
    long long content_length;   /* -1 when absent */
    bool chunked;               /* Transfer-Encoding: chunked */
    bool keep_alive;            /* the server keeps the connection open after the body */
} hc_response;

/* Reads the status line and headers of the response to the last hc_send
 * (skipping any 100 Continue). The body is then read with hc_read_line,
 * hc_sse_next or hc_read_body. */
vllm_status hc_read_head(hc_conn *c, hc_response *r);

/* The next line of the body, without its "\n" or "\r\n"; *line points into
 * the connection's buffer (valid until the next read). At the end of the
 * body *eof is set (a last line without a newline is returned first). */
vllm_status hc_read_line(hc_conn *c, const char **line, size_t *len, bool *eof);

/* The next Server-Sent Event's data (its "data:" lines joined by "\n"),
 * skipping comments (": ...") and events without data; *data points into
 * the connection (valid until the next read). *eof at the end of the body
 * (pending data not closed by an empty line is still delivered first). */
vllm_status hc_sse_next(hc_conn *c, const char **data, size_t *len, bool *eof);

/* The rest of the body, malloc'd and NUL-terminated (*len excludes the NUL). */
vllm_status hc_read_body(hc_conn *c, char **body, size_t *len);

/* One request on a new connection (closed afterwards): *status and the whole
 * body (malloc'd, NUL-terminated; free() it). */
vllm_status hc_fetch(const char *host, int port, int timeout_ms, const char *method, const char *path,
                     const char *headers, const char *body, size_t body_len, int *status, char **resp_body,
                     size_t *resp_len);

/* Waits on c look at cancelled() at least every 200 ms (and after a signal) and fail with "interrupted" once
 * it is true (vllmc chat --url's Ctrl-C); NULL: no such check. */
void hc_set_cancel(hc_conn *c, bool (*cancelled)(void));

#endif
