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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "server/handlers.h"

/* a body larger than this many times max_body_bytes is not even read */
#define BODY_DRAIN_FACTOR 16

server_options server_default_options(void) {
    return (server_options){
        .host = "127.0.0.1",
        .port = 8000,
        .max_body_bytes = 4u << 20,
        .max_pending = 1024,
        .timeout_keep_alive = 5,
        .request_timeout = 30,
        .connection_limit = 1024,
        .use_generation_config = true,
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
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result reply_json(http_request *r, int status, char *json) {
    return reply_body(r, status, "application/json", json, json ? strlen(json) : 1);
}

enum MHD_Result reply_error(http_request *r, const oai_error *err) {
    if (err->status == MHD_HTTP_UNAUTHORIZED) return reply_json(r, err->status, oai_error_unauthorized_json());
    return reply_json(r, err->status, oai_error_json(err));
}

bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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

/* ---- slow-client watchdog ---- */

static void watch_add(server *s, http_request *r) {
    r->deadline = r->arrival + s->opt.request_timeout;
    r->watch_prev = NULL;
    r->watch_next = s->watch_head;
    if (s->watch_head) s->watch_head->watch_prev = r;
    s->watch_head = r;
    r->watched = true;
}

static void watch_unlink(server *s, http_request *r) {
    if (!r->watched) return;
    if (r->watch_prev) r->watch_prev->watch_next = r->watch_next;
    else s->watch_head = r->watch_next;
    if (r->watch_next) r->watch_next->watch_prev = r->watch_prev;
    r->watch_prev = r->watch_next = NULL;
    r->watched = false;
}

/* Answers 408 on the raw socket and shuts it down (under s->mu). MHD is
 * only reading this connection (the request is unfinished, nothing was
 * queued), and it calls the request-completed callback, which takes s->mu,
 * before it closes the socket: the fd is still this connection's. */
static void send_408(server *s, http_request *r) {
    oai_error err;
    oai_error_set(&err, MHD_HTTP_REQUEST_TIMEOUT, NULL,
                  "The request was not received within %d seconds (--request-timeout).", s->opt.request_timeout);
    char *json = oai_error_json(&err);
    char head[256];
    size_t jlen = json ? strlen(json) : 0;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     jlen);
    if (n > 0 && (size_t)n < sizeof head && send(r->fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n && json)
        (void)send(r->fd, json, jlen, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(json);
    shutdown(r->fd, SHUT_RDWR);
    r->timed_out = true;
    r->status = MHD_HTTP_REQUEST_TIMEOUT;
}

static void *watchdog_main(void *arg) {
    server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->watchdog_stop) {
        double now = server_now();
        for (http_request *r = s->watch_head, *next; r; r = next) {
            next = r->watch_next;
            if (now < r->deadline) continue;
            LOG_W("request body not received within %d s: answering 408 and closing the connection",
                  s->opt.request_timeout);
            send_408(s, r);
            watch_unlink(s, r);
        }
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
};

/* Constant-time equality (of lengths too, as far as timing goes). */
static bool same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

/* vLLM's AuthenticationMiddleware.verify_token. */
static bool authorized(server *s, struct MHD_Connection *conn) {
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
    if (s->opt.num_api_keys > 0 && !strncmp(url, "/v1", 3) && !authorized(s, r->conn)) {
        r->deferred.status = MHD_HTTP_UNAUTHORIZED;
        return;
    }
    bool get = !strcmp(method, "GET"), head = !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
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
    switch (r->route) {
    case ROUTE_HEALTH:
    case ROUTE_PING: return handle_health(r);
    case ROUTE_VERSION: return handle_version(r);
    case ROUTE_METRICS: return handle_metrics(r);
    case ROUTE_MODELS: return handle_models(r);
    case ROUTE_TOKENIZE: return handle_tokenize(r);
    case ROUTE_DETOKENIZE: return handle_detokenize(r);
    case ROUTE_COMPLETIONS: return handle_generate(r, OAI_KIND_COMPLETION);
    case ROUTE_CHAT: return handle_generate(r, OAI_KIND_CHAT);
    case ROUTE_NONE: break;
    }
    oai_error err;
    oai_error_set(&err, MHD_HTTP_NOT_FOUND, NULL, "Not Found");
    return reply_error(r, &err);
}

/* The first call for a request (headers in, no body yet). */
static enum MHD_Result request_begin(server *s, struct MHD_Connection *conn, const char *url, const char *method,
                                     void **con_cls) {
    http_request *r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    *con_cls = r;
    r->srv = s;
    r->conn = conn;
    r->arrival = server_now();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    for (char *c = r->path; *c; c++) /* the access log gets no control characters from clients */
        if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '"') *c = '?';
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    /* this request's time limits are ours (the watchdog, then none while the reply is
     * produced); the keep-alive timeout comes back when it completes */
    if (r->fd >= 0) MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    route_request(s, r, url, method);

    /* a declared body far over the limit (or over it, when the client waits for
     * "100 Continue" before sending it) is refused before it is sent */
    unsigned long long declared;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (parse_size(cl, &declared) &&
        (declared / BODY_DRAIN_FACTOR > s->opt.max_body_bytes ||
         (declared > s->opt.max_body_bytes && expect && !strcasecmp(expect, "100-continue")))) {
        oai_error err;
        oai_error_set(&err, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "Request body of %llu bytes exceeds the limit of %zu bytes.",
                      declared, s->opt.max_body_bytes);
        if (r->deferred.status == MHD_HTTP_UNAUTHORIZED) err = r->deferred;
        return reply_error(r, &err);
    }
    if (r->fd >= 0) { /* (without its socket, MHD's own timeout stays in charge) */
        pthread_mutex_lock(&s->mu);
        watch_add(s, r);
        pthread_mutex_unlock(&s->mu);
    }
    return MHD_YES;
}

/* A piece of the body: kept while within the limit and wanted, else dropped. */
static enum MHD_Result request_data(server *s, http_request *r, const char *data, size_t n) {
    size_t cap = s->opt.max_body_bytes;
    r->body_seen += n;
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
    (void)version;
    server *s = cls;
    http_request *r = *con_cls;
    if (!r) return request_begin(s, conn, url, method, con_cls);

    pthread_mutex_lock(&s->mu);
    bool timed_out = r->timed_out;
    bool done = *upload_data_size == 0;
    if (done) watch_unlink(s, r);
    pthread_mutex_unlock(&s->mu);
    if (timed_out) return MHD_NO; /* the watchdog answered 408 */

    if (!done) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return request_data(s, r, upload_data, n);
    }
    if (r->deferred.status) {
        if (r->deferred.status != MHD_HTTP_METHOD_NOT_ALLOWED) return reply_error(r, &r->deferred);
        /* 405 carries Allow */
        char *json = oai_error_json(&r->deferred);
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
    watch_unlink(s, r);
    pthread_mutex_unlock(&s->mu);
    if (log_enabled(LOG_INFO)) {
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
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
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
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 512) != 0) {
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

vllm_status server_start(vllm_async_engine *ae, const server_options *opt, server **out) {
    *out = NULL;
    if (!ae || !opt) return vt_error(VLLM_ERR_INVALID_ARG, "server_start: engine or options missing");
    if (opt->num_served_model_names == 0 || !opt->served_model_names)
        return vt_error(VLLM_ERR_INVALID_ARG, "server: no served model name");
    if (opt->port < 0 || opt->port > 65535) return vt_error(VLLM_ERR_INVALID_ARG, "--port %d: not in [0, 65535]", opt->port);
    if (opt->max_body_bytes == 0 || opt->max_body_bytes > ((size_t)1 << 40))
        return vt_error(VLLM_ERR_INVALID_ARG, "server: max body size %zu out of range", opt->max_body_bytes);
    if (opt->timeout_keep_alive < 0 || opt->request_timeout <= 0 || opt->max_pending < 0 || opt->connection_limit <= 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "server: timeouts and limits must be positive");

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

    vllm_status st = metrics_create(opt->served_model_names[0], s->info.max_model_len, &s->metrics);
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
        .bos_token = opt->bos_token,
        .eos_token = opt->eos_token,
        .tok_ctx = s,
        .tokenize = has_tok ? tok_encode : NULL,
        .detokenize = has_tok ? tok_decode : NULL,
        .token_str = has_tok ? tok_str : NULL,
    };

    bool ipv6 = false;
    if ((st = open_listener(opt->host ? opt->host : "127.0.0.1", opt->port, &s->listen_fd, &s->port, &ipv6))) goto fail;

    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "server: cannot start the watchdog thread");
        goto fail;
    }
    s->watchdog_started = true;

    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG | (ipv6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)opt->timeout_keep_alive,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)opt->connection_limit,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        st = vt_error(VLLM_ERR_IO, "cannot start the HTTP server (libmicrohttpd) on port %d", s->port);
        goto fail;
    }
    s->listen_fd = -1; /* MHD's now */
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
    if (was || !s->daemon) return;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon); /* no new connections; the listening socket is ours to close */
    if (fd != MHD_INVALID_SOCKET) close(fd);
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
    if (s->daemon) {
        server_begin_shutdown(s);
        server_abort_requests(s); /* waiting handlers end their requests and return */
        MHD_stop_daemon(s->daemon); /* closes every connection, joins their threads */
    }
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
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
