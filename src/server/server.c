/*
 * server.c: the libmicrohttpd daemon of `vllmc serve`: listening socket,
 * per-request state, routing, the API-key check, body collection with its
 * size cap, the slow-client watchdog (408), the --max-pending cap (503),
 * the access log and graceful shutdown. Endpoints are in handlers*.c.
 *
 * Why one thread per connection: a request's reply is produced by waiting
 * on its vllm_stream; with MHD_USE_THREAD_PER_CONNECTION that wait happens
 * on the connection's own thread (in the access handler for JSON replies,
 * in the content-reader callback for SSE), so a slow request or client
 * never delays another, and no suspend/resume bookkeeping is needed. The
 * engine thread is never blocked by HTTP: it only appends to streams.
 *
 * vLLM semantics followed: vllm/entrypoints/openai/api_server.py (routes,
 * /health, /ping, /version, served model names defaulting to the model
 * path), vllm/entrypoints/serve/utils/server_utils.py
 * (AuthenticationMiddleware: paths under /v1, "Bearer" scheme matched
 * case-insensitively, keys compared in constant time, 401
 * {"error": "Unauthorized"}; http_exception_handler: 404 / 405 as
 * ErrorResponse JSON).
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "server/handlers.h"
#include "server/http_framing.h"
#include "server/reasoning_parser.h"
#include "server/responses_store.h"
#include "server/tool_parser.h"

/* a body larger than this many times max_body_bytes is not even read */
#define BODY_DRAIN_FACTOR 16
/* seconds a client is asked to wait after a 503 */
#define RETRY_AFTER "1"

server_options server_default_options(void) {
    return (server_options){
        .host = "127.0.0.1",
        .port = 8000,
        .max_body_bytes = 4u << 20,
        .max_pending = 1024,
        .timeout_keep_alive = 5,
        .header_timeout = 10,
        .request_timeout = 30,
        .max_connections = 4096,
        .max_connections_per_client = 1024,
        .use_generation_config = true,
        .responses_store_bytes = 64u << 20,
    };
}

double server_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- replies ---- */

enum MHD_Result reply_body(http_request *r, int status, const char *content_type, char *body, size_t len) {
    static const char oom[] =
        "{\"error\":{\"message\":\"out of memory\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}";
    struct MHD_Response *resp = NULL;
    if (body) {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!resp) free(body);
    } else if (len == 0) {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) { /* out of memory: the static error */
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        content_type = "application/json";
        resp = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
    }
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER);
    if (r->close_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result reply_json(http_request *r, int status, char *json) {
    return reply_body(r, status, "application/json", json, json ? strlen(json) : 1);
}

enum MHD_Result reply_error(http_request *r, const oai_error *err) {
    if (r->anthropic) {
        oai_error e = *err;
        if (e.status == MHD_HTTP_UNAUTHORIZED && !e.message[0]) snprintf(e.message, sizeof e.message, "invalid x-api-key");
        return reply_json(r, e.status, oai_error_anthropic_json(&e));
    }
    if (err->status == MHD_HTTP_UNAUTHORIZED) return reply_json(r, err->status, oai_error_unauthorized_json());
    return reply_json(r, err->status, oai_error_json(err));
}

enum MHD_Result reply_error_api(http_request *r, const oai_error *err, oai_api api) {
    if (api == OAI_API_ANTHROPIC) r->anthropic = true;
    return reply_error(r, err);
}

bool client_gone(int fd, client_eof *eof) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true; /* a reset, or closed both ways */
    bool at_eof = (p.revents & POLLRDHUP) != 0;
    if (!at_eof && (p.revents & POLLIN)) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
        at_eof = n == 0; /* (n > 0: the client's next request, already sent) */
    }
    if (!at_eof) return false;
    switch (*eof) {
    case CLIENT_EOF_GONE: return true;
    case CLIENT_EOF_PROBE: {
        static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
        *eof = CLIENT_EOF_PROBED;
        return send(fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
               errno != EWOULDBLOCK;
    }
    case CLIENT_EOF_PROBED:
    case CLIENT_EOF_WRITES_TELL: return false;
    }
    return false;
}

/* ---- in-flight cap ---- */

bool server_acquire_slot(server *s, oai_error *err) {
    pthread_mutex_lock(&s->mu);
    bool ok = false;
    if (s->stopping) {
        oai_error_set(err, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, "The server is shutting down.");
    } else if (s->opt.max_pending > 0 && s->in_flight >= s->opt.max_pending) {
        oai_error_set(err, MHD_HTTP_SERVICE_UNAVAILABLE, NULL,
                      "The server is at capacity (%d requests in flight, --max-pending %d); retry later.",
                      s->in_flight, s->opt.max_pending);
    } else {
        s->in_flight++;
        ok = true;
    }
    metrics_set_in_flight(s->metrics, s->in_flight); /* under s->mu: updates land in order */
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void server_release_slot(server *s) {
    pthread_mutex_lock(&s->mu);
    s->in_flight--;
    metrics_set_in_flight(s->metrics, s->in_flight);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- connections and the slow-client watchdog ---- */

/* A new phase for a connection, with its deadline (under s->mu). */
static void conn_phase_set(server *s, server_conn *c, conn_phase phase, double start) {
    if (!c) return;
    c->phase = phase;
    c->deadline = phase == CONN_HEADERS ? start + s->opt.header_timeout + (c->req_count ? s->opt.timeout_keep_alive : 0)
                  : phase == CONN_BODY  ? start + s->opt.request_timeout
                                        : 0;
}

/* The watchdog's answer to a connection past its deadline (under s->mu):
 * 408 on the raw socket (unless an answer was written already), then the
 * socket shut down, which ends MHD's read. MHD is only reading this
 * connection (its request is unfinished, nothing was queued), and it sends
 * the connection-closed notification, which takes s->mu, before it closes
 * the socket: the fd is still this connection's. */
static void conn_time_out(server *s, server_conn *c, int *n_headers, int *n_body) {
    bool headers = c->phase == CONN_HEADERS;
    http_request *r = c->req;
    if (!r || !r->answered_raw) {
        oai_error err;
        if (headers)
            oai_error_set(&err, MHD_HTTP_REQUEST_TIMEOUT, NULL,
                          "The request headers were not received within %d seconds (--header-timeout).",
                          s->opt.header_timeout);
        else
            oai_error_set(&err, MHD_HTTP_REQUEST_TIMEOUT, NULL,
                          "The request was not received within %d seconds (--request-timeout).", s->opt.request_timeout);
        conn_send_error(c->fd, &err, 0);
        (*(headers ? n_headers : n_body))++;
    }
    shutdown(c->fd, SHUT_RDWR);
    c->timed_out = true;
    c->phase = CONN_BUSY;
    if (r && !r->answered_raw) r->status = MHD_HTTP_REQUEST_TIMEOUT;
}

static void *watchdog_main(void *arg) {
    server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->watchdog_stop) {
        double now = server_now();
        int n_headers = 0, n_body = 0; /* one log line per sweep, not per connection */
        for (server_conn *c = s->conns; c; c = c->next)
            if (c->phase != CONN_BUSY && now >= c->deadline) conn_time_out(s, c, &n_headers, &n_body);
        if (n_headers)
            LOG_W("%d connection%s sent no complete request headers within %d s (--header-timeout): answered 408, "
                  "closed", n_headers, n_headers > 1 ? "s" : "", s->opt.header_timeout);
        if (n_body)
            LOG_W("%d request bod%s not received within %d s (--request-timeout): answered 408, closed", n_body,
                  n_body > 1 ? "ies" : "y", s->opt.request_timeout);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- routing ---- */

static const struct route {
    const char *path;
    route_id id;
    bool get, post;
} routes[] = {
    {"/health", ROUTE_HEALTH, true, false},
    {"/ping", ROUTE_PING, true, true},
    {"/version", ROUTE_VERSION, true, false},
    {"/metrics", ROUTE_METRICS, true, false},
    {"/v1/models", ROUTE_MODELS, true, false},
    {"/tokenize", ROUTE_TOKENIZE, false, true},
    {"/detokenize", ROUTE_DETOKENIZE, false, true},
    {"/v1/completions", ROUTE_COMPLETIONS, false, true},
    {"/v1/chat/completions", ROUTE_CHAT, false, true},
    {"/v1/embeddings", ROUTE_EMBEDDINGS, false, true},
    {"/v1/responses", ROUTE_RESPONSES, false, true},
    {"/v1/messages", ROUTE_MESSAGES, false, true},
    {"/v1/messages/count_tokens", ROUTE_COUNT_TOKENS, false, true},
};

#define RESPONSES_PREFIX "/v1/responses/"

/* Constant-time equality (of lengths too, as far as timing goes). */
static bool same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

/* vLLM's AuthenticationMiddleware.verify_token, and Anthropic's x-api-key header (what @anthropic-ai/sdk sends;
 * vLLM issue #51572). */
static bool authorized(server *s, struct MHD_Connection *conn) {
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    if (x) {
        bool ok = false;
        for (size_t i = 0; i < s->opt.num_api_keys; i++) ok |= same_secret(x, s->opt.api_keys[i]);
        if (ok) return true;
    }
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h) return false;
    const char *sp = strchr(h, ' ');
    if (!sp || (size_t)(sp - h) != 6 || strncasecmp(h, "bearer", 6) != 0) return false;
    bool ok = false;
    for (size_t i = 0; i < s->opt.num_api_keys; i++) ok |= same_secret(sp + 1, s->opt.api_keys[i]);
    return ok;
}

/* Decides the route, or the error (401 / 404 / 405) to answer once the
 * body has been read. */
static void route_request(server *s, http_request *r, const char *url, const char *method) {
    r->anthropic = !strncmp(url, "/v1/messages", 12) && (url[12] == 0 || url[12] == '/');
    if (s->opt.num_api_keys > 0 && !strncmp(url, "/v1", 3) && !authorized(s, r->conn)) {
        r->deferred.status = MHD_HTTP_UNAUTHORIZED;
        return;
    }
    bool get = !strcmp(method, "GET"), head = !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strncmp(url, RESPONSES_PREFIX, sizeof RESPONSES_PREFIX - 1) && url[sizeof RESPONSES_PREFIX - 1]) {
        /* /v1/responses/{id} (GET, DELETE) and /v1/responses/{id}/cancel (POST) */
        const char *id = url + sizeof RESPONSES_PREFIX - 1, *slash = strchr(id, '/');
        size_t n = slash ? (size_t)(slash - id) : strlen(id);
        bool cancel = slash && !strcmp(slash, "/cancel");
        if (n == 0 || n >= sizeof r->item_id || (slash && !cancel)) {
            oai_error_set(&r->deferred, MHD_HTTP_NOT_FOUND, NULL, "Not Found");
            return;
        }
        memcpy(r->item_id, id, n);
        r->item_id[n] = 0;
        if (cancel ? post : (get || head || !strcmp(method, "DELETE"))) {
            r->route = cancel ? ROUTE_RESPONSE_CANCEL : ROUTE_RESPONSE_ITEM;
            r->is_head = head;
        } else {
            oai_error_set(&r->deferred, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, "Method Not Allowed");
        }
        return;
    }
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const struct route *rt = &routes[i];
        if (strcmp(url, rt->path) != 0) continue;
        if ((rt->get && (get || head)) || (rt->post && post)) {
            r->route = rt->id;
            r->is_head = head;
        } else {
            oai_error_set(&r->deferred, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, "Method Not Allowed");
        }
        return;
    }
    oai_error_set(&r->deferred, MHD_HTTP_NOT_FOUND, NULL, "Not Found");
}

static const char *allow_header(const char *url) {
    if (!strncmp(url, RESPONSES_PREFIX, sizeof RESPONSES_PREFIX - 1))
        return strstr(url + sizeof RESPONSES_PREFIX - 1, "/cancel") ? "POST" : "GET, DELETE";
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) return routes[i].get && routes[i].post ? "GET, POST" : routes[i].get ? "GET" : "POST";
    return NULL;
}

static bool parse_size(const char *v, unsigned long long *out) {
    if (!v || *v < '0' || *v > '9') return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end) return false;
    *out = n;
    return true;
}

static enum MHD_Result dispatch(http_request *r) {
    if (route_wrong_runner(r)) return handle_wrong_runner(r);
    switch (r->route) {
    case ROUTE_HEALTH:
    case ROUTE_PING: return handle_health(r);
    case ROUTE_VERSION: return handle_version(r);
    case ROUTE_METRICS: return handle_metrics(r);
    case ROUTE_MODELS: return handle_models(r);
    case ROUTE_TOKENIZE: return handle_tokenize(r);
    case ROUTE_DETOKENIZE: return handle_detokenize(r);
    case ROUTE_COMPLETIONS: return handle_generate(r, OAI_KIND_COMPLETION, OAI_API_OPENAI);
    case ROUTE_CHAT: return handle_generate(r, OAI_KIND_CHAT, OAI_API_OPENAI);
    case ROUTE_EMBEDDINGS: return handle_embeddings(r);
    case ROUTE_RESPONSES: return handle_generate(r, OAI_KIND_CHAT, OAI_API_RESPONSES);
    case ROUTE_MESSAGES: return handle_generate(r, OAI_KIND_CHAT, OAI_API_ANTHROPIC);
    case ROUTE_RESPONSE_ITEM: return handle_response_item(r);
    case ROUTE_RESPONSE_CANCEL: return handle_response_cancel(r);
    case ROUTE_COUNT_TOKENS: return handle_count_tokens(r);
    case ROUTE_NONE: break;
    }
    oai_error err;
    oai_error_set(&err, MHD_HTTP_NOT_FOUND, NULL, "Not Found");
    return reply_error(r, &err);
}

/* A reply that ends the connection: its framing cannot be trusted (RFC 9112 9.6). */
static enum MHD_Result reply_error_close(http_request *r, const oai_error *err) {
    r->close_after = true;
    return reply_error(r, err);
}

/* MHD's URI-log callback: the first sight of a request (its request line),
 * with the target as received, before percent-decoding. Its return value
 * is the request's *con_cls. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn) {
    server *s = cls;
    http_request *r = calloc(1, sizeof *r);
    if (!r) return NULL; /* request_begin tries again, then answers 500 */
    r->srv = s;
    r->conn = conn;
    r->bad_target = !http_check_target(uri, &r->deferred);
    return r;
}

/* The first call for a request (headers in, no body yet). */
static enum MHD_Result request_begin(server *s, struct MHD_Connection *conn, const char *url, const char *method,
                                     const char *version, void **con_cls) {
    http_request *r = *con_cls;
    if (!r && !(r = calloc(1, sizeof *r))) return MHD_NO;
    *con_cls = r;
    r->begun = true;
    r->srv = s;
    r->conn = conn;
    r->arrival = server_now();
    r->http11 = version && strcmp(version, MHD_HTTP_VERSION_1_0) != 0;
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    for (char *c = r->method; *c; c++) /* the access log gets no quotes from clients (log.c escapes the rest) */
        if (*c == '"') *c = '?';
    for (char *c = r->path; *c; c++)
        if (*c == '"') *c = '?';
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->sc = ci ? ci->socket_context : NULL;
    /* this request's time limits are ours (the watchdog, then none while the reply is
     * produced); the keep-alive timeout comes back when it completes */
    if (r->fd >= 0 && r->sc) MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    pthread_mutex_lock(&s->mu);
    bool timed_out = r->sc && r->sc->timed_out;
    if (r->sc && !timed_out) {
        r->sc->req = r;
        conn_phase_set(s, r->sc, CONN_BODY, r->arrival);
    }
    pthread_mutex_unlock(&s->mu);
    if (timed_out) return MHD_NO; /* the watchdog answered 408 while the headers came in */

    oai_error err;
    if (r->bad_target) return reply_error_close(r, &r->deferred);
    if (!http_check_framing(conn, version, &err)) return reply_error_close(r, &err);
    route_request(s, r, url, method);

    /* a declared body far over the limit (or over it, when the client waits for
     * "100 Continue" before sending it) is refused before it is sent */
    unsigned long long declared;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (parse_size(cl, &declared) &&
        (declared / BODY_DRAIN_FACTOR > s->opt.max_body_bytes ||
         (declared > s->opt.max_body_bytes && expect && !strcasecmp(expect, "100-continue")))) {
        oai_error_set(&err, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "Request body of %llu bytes exceeds the limit of %zu bytes.",
                      declared, s->opt.max_body_bytes);
        if (r->deferred.status == MHD_HTTP_UNAUTHORIZED) err = r->deferred;
        return reply_error_close(r, &err);
    }
    return MHD_YES;
}

/* A piece of the body: kept while within the limit and wanted, else dropped.
 * A body of unknown length (chunked) that passes the limit is answered 413
 * at once on the socket, then drained until it ends (or its deadline): the
 * client gets its answer instead of a reset. */
static enum MHD_Result request_data(server *s, http_request *r, const char *data, size_t n) {
    size_t cap = s->opt.max_body_bytes;
    r->body_seen += n;
    if (r->answered_raw) return MHD_YES;
    if (r->body_seen < n || r->body_seen / BODY_DRAIN_FACTOR > cap) {
        LOG_W("request body over %d x the limit: closing the connection", BODY_DRAIN_FACTOR);
        return MHD_NO;
    }
    if (r->deferred.status) return MHD_YES;
    if (r->body_seen > cap) {
        oai_error_set(&r->deferred, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "Request body exceeds the limit of %zu bytes.",
                      cap);
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        if (r->fd >= 0 && !MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
            conn_send_error(r->fd, &r->deferred, 0);
            shutdown(r->fd, SHUT_WR);
            r->answered_raw = true;
            r->status = MHD_HTTP_CONTENT_TOO_LARGE;
        }
        return MHD_YES;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t want = r->body_cap ? r->body_cap : 4096;
        while (want < r->body_len + n + 1) want *= 2;
        if (want > cap + 1) want = cap + 1;
        char *b = realloc(r->body, want);
        if (!b) {
            oai_error_set(&r->deferred, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "Out of memory reading the request body.");
            return MHD_YES;
        }
        r->body = b;
        r->body_cap = want;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = 0;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    server *s = cls;
    http_request *r = *con_cls;
    if (!r || !r->begun) return request_begin(s, conn, url, method, version, con_cls);

    pthread_mutex_lock(&s->mu);
    bool timed_out = r->sc && r->sc->timed_out;
    bool done = *upload_data_size == 0;
    if (done && r->sc && !timed_out) conn_phase_set(s, r->sc, CONN_BUSY, 0);
    pthread_mutex_unlock(&s->mu);
    if (timed_out) return MHD_NO; /* the watchdog answered 408 */

    if (!done) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return request_data(s, r, upload_data, n);
    }
    if (r->answered_raw) return MHD_NO; /* 413 written mid-body: close */
    if (r->deferred.status) {
        if (r->deferred.status != MHD_HTTP_METHOD_NOT_ALLOWED) return reply_error(r, &r->deferred);
        /* 405 carries Allow */
        char *json = r->anthropic ? oai_error_anthropic_json(&r->deferred) : oai_error_json(&r->deferred);
        struct MHD_Response *resp = json ? MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE) : NULL;
        if (!resp) {
            free(json);
            return reply_json(r, 500, NULL);
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        const char *allow = allow_header(url);
        if (allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
        r->status = MHD_HTTP_METHOD_NOT_ALLOWED;
        enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (!r->body) { /* an empty body is "" for the parsers */
        r->body = calloc(1, 1);
        if (!r->body) return reply_json(r, 500, NULL);
    }
    return dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    http_request *r = *con_cls;
    if (!r) return;
    pthread_mutex_lock(&s->mu);
    if (r->sc) {
        r->sc->req = NULL;
        /* the next request on this connection gets --header-timeout from now */
        r->sc->req_count++;
        if (!r->sc->timed_out)
            conn_phase_set(s, r->sc, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? CONN_HEADERS : CONN_BUSY, server_now());
    }
    pthread_mutex_unlock(&s->mu);
    if (r->begun && log_enabled(LOG_INFO)) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
        if (ci && ci->client_addr) {
            socklen_t alen = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
            getnameinfo(ci->client_addr, alen, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
        }
        const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? ""
                          : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? " (client disconnected)"
                          : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " (server shutdown)"
                          : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " (timeout)"
                          : " (connection closed)";
        char status[16] = "-"; /* no reply (the connection ended first) */
        if (r->status) snprintf(status, sizeof status, "%d", r->status);
        LOG_I("%s:%s \"%s %s\" %s%s", host, serv, r->method, r->path, status, how);
    }
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && r->begun)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->opt.timeout_keep_alive);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    LOG_D("libmicrohttpd: %s", buf);
}

/* MHD's connection notifications: a connection it now holds, and one it is
 * about to close (the gate counted it when it admitted it). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        server_conn *c = calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!c || !fi) { /* not watched: MHD's idle timeout still closes it */
            free(c);
            return;
        }
        c->fd = fi->connect_fd;
        c->key = conn_client_key_of(ai ? ai->client_addr : NULL); /* (as the gate counted it) */
        pthread_mutex_lock(&s->mu);
        conn_phase_set(s, c, CONN_HEADERS, server_now());
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        pthread_mutex_unlock(&s->mu);
        *socket_context = c;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        server_conn *c = *socket_context;
        if (!c) return;
        pthread_mutex_lock(&s->mu);
        if (c->prev) c->prev->next = c->next;
        else s->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        pthread_mutex_unlock(&s->mu);
        conn_gate_untrack(s->gate, c->key);
        free(c);
        *socket_context = NULL;
    }
}

/* The gate's hand-over of an admitted socket. */
static bool admit_connection(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen) {
    server *s = ctx;
    if (MHD_add_connection(s->daemon, fd, addr, addrlen) == MHD_YES) return true;
    LOG_W("server: cannot take a new connection: %s", strerror(errno)); /* (MHD closed the socket) */
    return false;
}

/* ---- tokenizer access for the protocol layer ---- */

static vllm_status tok_encode(void *ctx, const char *text, bool add_special, int32_t **ids, size_t *n) {
    server *s = ctx;
    return vllm_async_tokenize(s->ae, text, add_special, ids, n);
}

static vllm_status tok_decode(void *ctx, const int32_t *ids, size_t n, bool skip_special, char **text) {
    server *s = ctx;
    return vllm_async_detokenize(s->ae, ids, n, skip_special, text);
}

static const char *tok_str(void *ctx, int32_t id) {
    server *s = ctx;
    if (!s->token_strs || id < 0 || id >= s->info.vocab_size) return NULL;
    return s->token_strs[id];
}

/* Each id decoded alone (vLLM's logprob tokens); ids the tokenizer lacks stay NULL. */
static vllm_status build_token_strs(server *s) {
    size_t n = (size_t)s->info.vocab_size;
    s->token_strs = calloc(n ? n : 1, sizeof *s->token_strs);
    if (!s->token_strs) return vt_error(VLLM_ERR_NO_MEMORY, "server: out of memory (token table)");
    for (size_t i = 0; i < n; i++) {
        int32_t id = (int32_t)i;
        if (vllm_async_detokenize(s->ae, &id, 1, false, &s->token_strs[i]) != VLLM_OK) {
            s->token_strs[i] = NULL;
            vt_error_clear();
        }
    }
    return VLLM_OK;
}

/* ---- lifecycle ---- */

/* socket + bind + listen on host:port; *port_out the bound port. */
static vllm_status open_listener(const char *host, int port, int *fd_out, int *port_out, bool *ipv6) {
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) return vt_error(VLLM_ERR_INVALID_ARG, "--host %s: %s", host, gai_strerror(gai));
    vllm_status st = VLLM_ERR_IO;
    int err = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
            err = errno;
            close(fd);
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
            err = errno;
            close(fd);
            continue;
        }
        *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        *ipv6 = ss.ss_family == AF_INET6;
        *fd_out = fd;
        st = VLLM_OK;
        break;
    }
    freeaddrinfo(res);
    if (st != VLLM_OK) return vt_error(VLLM_ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(err));
    return VLLM_OK;
}

/* Raises the soft open-file limit towards the hard one so that max_connections
 * sockets fit (vLLM's set_ulimit raises it to 65535 the same way). */
static vllm_status raise_file_limit(int max_connections) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return VLLM_OK;
    rlim_t want = (rlim_t)max_connections + 256; /* + the model files, the engine's, logs, draining sockets */
    if (want < 65535) want = 65535;
    if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
    if (rl.rlim_cur == RLIM_INFINITY) return VLLM_OK;
    if (rl.rlim_cur < want) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = old;
    }
    if (rl.rlim_cur < (rlim_t)max_connections + 64)
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "--max-connections %d does not fit the open-file limit (ulimit -n %llu, hard %llu): lower it "
                        "or raise the limit",
                        max_connections, (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    return VLLM_OK;
}

/* "a,b,c": the names of a NULL-terminated list (vLLM joins them with ",") */
static void join_names(const char *const *names, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (size_t i = 0; names[i] && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%s", i ? "," : "", names[i]);
}

vllm_status server_check_parsers(bool enable_auto_tool_choice, const char *tool_call_parser,
                                 const char *reasoning_parser) {
    char names[512];
    toolp_kind tk;
    reasoning_kind rk;
    /* vllm/entrypoints/openai/cli_args.py validate_parsed_serve_args and api_server.py run_server */
    if (enable_auto_tool_choice && !tool_call_parser)
        return vt_error(VLLM_ERR_INVALID_ARG, "--enable-auto-tool-choice requires --tool-call-parser");
    if (tool_call_parser && !toolp_kind_from_name(tool_call_parser, &tk)) {
        join_names(toolp_names(), names, sizeof names);
        return vt_error(VLLM_ERR_INVALID_ARG, "invalid tool call parser: %s (chose from { %s })", tool_call_parser, names);
    }
    if (reasoning_parser && !reasoning_kind_from_name(reasoning_parser, &rk)) {
        join_names(reasoning_names(), names, sizeof names);
        return vt_error(VLLM_ERR_INVALID_ARG, "invalid reasoning parser: %s (chose from { %s })", reasoning_parser,
                        names);
    }
    return VLLM_OK;
}

vllm_status server_start(vllm_async_engine *ae, const server_options *opt, server **out) {
    *out = NULL;
    if (!ae || !opt) return vt_error(VLLM_ERR_INVALID_ARG, "server_start: engine or options missing");
    if (opt->num_served_model_names == 0 || !opt->served_model_names)
        return vt_error(VLLM_ERR_INVALID_ARG, "server: no served model name");
    if (opt->port < 0 || opt->port > 65535) return vt_error(VLLM_ERR_INVALID_ARG, "--port %d: not in [0, 65535]", opt->port);
    if (opt->max_body_bytes == 0 || opt->max_body_bytes > ((size_t)1 << 40))
        return vt_error(VLLM_ERR_INVALID_ARG, "server: max body size %zu out of range", opt->max_body_bytes);
    if (opt->timeout_keep_alive < 0 || opt->header_timeout <= 0 || opt->request_timeout <= 0 || opt->max_pending < 0 ||
        opt->max_connections <= 0 || opt->max_connections_per_client < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "server: timeouts and limits must be positive");
    vllm_status pst = server_check_parsers(opt->enable_auto_tool_choice, opt->tool_call_parser, opt->reasoning_parser);
    if (pst) return pst;
    if (opt->max_pending >= opt->max_connections)
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "--max-connections %d must exceed --max-pending %d (every request in flight holds a connection)",
                        opt->max_connections, opt->max_pending);
    vllm_status lst = raise_file_limit(opt->max_connections);
    if (lst) return lst;

    server *s = calloc(1, sizeof *s);
    if (!s) return vt_error(VLLM_ERR_NO_MEMORY, "server: out of memory");
    s->ae = ae;
    s->opt = *opt;
    s->listen_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    vllm_async_engine_get_info(ae, &s->info);

    vllm_status st = metrics_create(opt->served_model_names[0], s->info.max_model_len,
                                    vllm_async_engine_num_engines(ae), &s->metrics);
    bool has_tok = vllm_async_engine_has_tokenizer(ae);
    if (!st && has_tok) st = build_token_strs(s);
    if (st) goto fail;
    s->ctx = (oai_server_ctx){
        .served_model_names = opt->served_model_names,
        .num_served_model_names = opt->num_served_model_names,
        .max_model_len = s->info.max_model_len,
        .vocab_size = s->info.vocab_size,
        .default_sampling = opt->use_generation_config ? vllm_async_engine_default_sampling(ae)
                                                       : vllm_sampling_default_params(),
        .chat_template = opt->chat_template,
        .max_tokenize_bytes = opt->max_tokenize_bytes,
        .max_response_entries = opt->max_response_entries,
        .enable_auto_tool_choice = opt->enable_auto_tool_choice,
        .tool_call_parser = opt->tool_call_parser,
        .reasoning_parser = opt->reasoning_parser,
        .bos_token = opt->bos_token,
        .eos_token = opt->eos_token,
        .tok_ctx = s,
        .tokenize = has_tok ? tok_encode : NULL,
        .detokenize = has_tok ? tok_decode : NULL,
        .token_str = has_tok ? tok_str : NULL,
    };
    if (opt->responses_store_bytes && !(s->ctx.responses_store = responses_store_new(opt->responses_store_bytes))) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "server: out of memory");
        goto fail;
    }

    bool ipv6 = false;
    if ((st = open_listener(opt->host ? opt->host : "127.0.0.1", opt->port, &s->listen_fd, &s->port, &ipv6))) goto fail;

    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "server: cannot start the watchdog thread");
        goto fail;
    }
    s->watchdog_started = true;

    /* MHD gets its connections from the gate (conn_gate.h), which holds the listening socket.
     * MHD's own limit has slack: it counts a connection a little longer than the gate does
     * (until after the closed notification), and refusing there would be a reset, not a 503. */
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                         MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG | (ipv6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)opt->timeout_keep_alive,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)opt->max_connections + 256u,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        st = vt_error(VLLM_ERR_IO, "cannot start the HTTP server (libmicrohttpd) on port %d", s->port);
        goto fail;
    }
    conn_gate_options go = {
        .listen_fd = s->listen_fd,
        .max_connections = opt->max_connections,
        .max_per_client = opt->max_connections_per_client,
        .retry_after = atoi(RETRY_AFTER),
        .admit = admit_connection,
        .ctx = s,
    };
    if ((st = conn_gate_start(&go, &s->gate))) goto fail;
    s->listen_fd = -1; /* the gate's now */
    *out = s;
    return VLLM_OK;
fail:
    server_free(s);
    return st;
}

int server_port(const server *s) { return s->port; }

void server_begin_shutdown(server *s) {
    pthread_mutex_lock(&s->mu);
    bool was = s->stopping;
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    if (!was) conn_gate_stop_accepting(s->gate); /* no new connections */
}

void server_close_connections(server *s) {
    pthread_mutex_lock(&s->mu);
    for (server_conn *c = s->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
}

int server_in_flight(server *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void server_abort_requests(server *s) {
    pthread_mutex_lock(&s->mu);
    s->aborting = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void server_free(server *s) {
    if (!s) return;
    if (s->gate) server_begin_shutdown(s);
    if (s->daemon) {
        server_abort_requests(s); /* waiting handlers end their requests and return */
        MHD_stop_daemon(s->daemon); /* closes every connection, joins their threads */
    }
    conn_gate_free(s->gate); /* (after MHD: its closed notifications untrack in the gate) */
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->watchdog_started) {
        pthread_mutex_lock(&s->mu);
        s->watchdog_stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->watchdog, NULL);
    }
    if (s->token_strs)
        for (int i = 0; i < s->info.vocab_size; i++) free(s->token_strs[i]);
    free(s->token_strs);
    metrics_free(s->metrics);
    responses_store_free(s->ctx.responses_store);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
