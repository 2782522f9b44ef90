/*
 * handlers.h: what server.c and the endpoint handlers (handlers.c,
 * handlers_generate.c, handlers_embed.c) share: the server object, the per-request state MHD
 * keeps for us, and the reply helpers. Internal to src/server/.
 */
#ifndef VLLM_SERVER_HANDLERS_H
#define VLLM_SERVER_HANDLERS_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/conn_gate.h"
#include "server/metrics.h"
#include "server/oai_protocol.h"
#include "server/server.h"

struct server {
    vllm_async_engine *ae;
    server_options opt;          /* strings borrowed from the caller */
    vllm_engine_info info;
    oai_server_ctx ctx;          /* what the protocol parsers read (read-only once started) */
    char **token_strs;           /* (info.vocab_size) each id decoded alone, for logprobs; NULL without a tokenizer */
    metrics *metrics;
    struct MHD_Daemon *daemon;
    struct conn_gate *gate;      /* the accept loop and connection caps */
    int listen_fd;               /* ours until the gate owns it (then -1) */
    int port;

    pthread_mutex_t mu;          /* guards everything below; may be held while taking the metrics'
                                    lock (never the other way round) */
    pthread_cond_t cv;           /* watchdog wake-ups and in-flight changes */
    int in_flight;               /* generation requests being served */
    bool stopping;               /* server_begin_shutdown was called */
    bool aborting;               /* server_abort_requests was called: jobs abort their engine requests */
    bool watchdog_stop;
    bool watchdog_started;
    pthread_t watchdog;
    struct server_conn *conns;   /* every connection MHD holds (watchdog deadlines, forced close) */
};

/* Where a connection is in its current request, for the watchdog's deadlines. */
typedef enum conn_phase {
    CONN_HEADERS = 0,            /* waiting for a request's headers: --header-timeout */
    CONN_BODY,                   /* waiting for its body: --request-timeout */
    CONN_BUSY,                   /* the request is being answered: no deadline */
} conn_phase;

/* One connection (MHD's socket context), from MHD's "started" notification to
 * its "closed" one (which comes before the socket is closed). Guarded by srv->mu. */
typedef struct server_conn {
    int fd;
    conn_client_key key;
    conn_phase phase;
    double deadline;             /* of the phase (monotonic seconds) */
    bool timed_out;              /* the watchdog answered 408 and shut the socket */
    int req_count;               /* requests completed on it (the next one's header deadline adds the
                                    keep-alive idle time) */
    struct http_request *req;    /* the request in progress, if any */
    struct server_conn *prev, *next;
} server_conn;

/* The routes (paths) the server knows. */
typedef enum route_id {
    ROUTE_NONE = 0,
    ROUTE_HEALTH,
    ROUTE_PING,
    ROUTE_VERSION,
    ROUTE_METRICS,
    ROUTE_MODELS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_EMBEDDINGS,
    ROUTE_RESPONSES,             /* POST /v1/responses */
    ROUTE_RESPONSE_ITEM,         /* GET / DELETE /v1/responses/{id} */
    ROUTE_RESPONSE_CANCEL,       /* POST /v1/responses/{id}/cancel */
    ROUTE_MESSAGES,              /* POST /v1/messages */
    ROUTE_COUNT_TOKENS,          /* POST /v1/messages/count_tokens */
} route_id;

/* One HTTP request (MHD's *con_cls), from its headers to the request-completed callback. */
typedef struct http_request {
    server *srv;
    struct MHD_Connection *conn;
    int fd;                      /* the connection's socket (for the watchdog and disconnect checks) */
    route_id route;
    bool is_head;                /* HEAD of a GET route */
    double arrival;              /* monotonic seconds when the headers arrived */
    char *body;                  /* the request body (NUL-terminated), up to max_body_bytes */
    size_t body_len, body_cap;
    size_t body_seen;            /* bytes received, kept or not */
    oai_error deferred;          /* an error decided before the body ended (status 0 = none): the body is
                                    read and dropped, then this is the reply */
    server_conn *sc;             /* its connection (NULL if MHD gave no socket context) */
    bool begun;                  /* the access handler has seen it (headers in) */
    bool bad_target;             /* the raw request target failed http_check_target */
    bool http11;                 /* HTTP/1.1 (or later): interim 1xx responses are allowed */
    bool close_after;            /* the reply closes the connection ("Connection: close") */
    bool answered_raw;           /* an error was written on the socket mid-body (413): drain, then close */
    int status;                  /* the status replied (for the access log) */
    char method[12];             /* for the access log (truncated) */
    char item_id[320];           /* ROUTE_RESPONSE_ITEM / _CANCEL: the {id} of the path ("resp_" + a request_id of
                                    up to 256 bytes fits) */
    bool anthropic;              /* a /v1/messages path: errors in Anthropic's shape (reply_error) */
    char path[96];
} http_request;

double server_now(void);         /* monotonic seconds */

/* Replies: queue a response on r's connection. Bodies passed in are
 * malloc'd and owned by the call (freed on every path); a NULL body (out of
 * memory) becomes a 500 with a static error JSON, except reply_body's
 * (NULL, 0), which is an empty body. */
enum MHD_Result reply_body(http_request *r, int status, const char *content_type, char *body, size_t len);
enum MHD_Result reply_json(http_request *r, int status, char *json);
enum MHD_Result reply_error(http_request *r, const oai_error *err);

/* True when the client closed its side or reset the connection (checked
 * without consuming anything: a pipelined request is not a hang-up). */
/* What end of input from a client means while its request is answered. A
 * client may shut down only its sending side (a half-close) and still read
 * the answer; until the server writes, that looks the same as a client that
 * closed the connection. */
typedef enum client_eof {
    CLIENT_EOF_WRITES_TELL = 0,  /* a streamed reply: its own writes fail when the client is gone */
    CLIENT_EOF_PROBE,            /* HTTP/1.1, nothing written yet: on end of input write an interim
                                    "100 Continue" once (RFC 9110 15.2: clients accept any 1xx);
                                    a closed socket answers it with a reset */
    CLIENT_EOF_PROBED,           /* that probe was written */
    CLIENT_EOF_GONE,             /* HTTP/1.0 (no interim responses): end of input = gone */
} client_eof;

/* Whether the client on fd has gone away (a reset, a closed socket, or end of
 * input as *eof says; *eof moves from PROBE to PROBED when the probe is written). */
bool client_gone(int fd, client_eof *eof);

/* Endpoints, called once the whole body is in r->body (handlers.c). */
enum MHD_Result handle_health(http_request *r);
enum MHD_Result handle_version(http_request *r);
enum MHD_Result handle_metrics(http_request *r);
enum MHD_Result handle_models(http_request *r);
enum MHD_Result handle_tokenize(http_request *r);
enum MHD_Result handle_detokenize(http_request *r);
/* POST /v1/completions and /v1/chat/completions (handlers_generate.c). */
enum MHD_Result handle_generate(http_request *r, oai_kind kind, oai_api api);
/* GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel (handlers_responses.c) */
enum MHD_Result handle_response_item(http_request *r);
enum MHD_Result handle_response_cancel(http_request *r);
enum MHD_Result handle_count_tokens(http_request *r);
/* An error in the shape of the API the route belongs to (Anthropic's for /v1/messages*). */
enum MHD_Result reply_error_api(http_request *r, const oai_error *err, oai_api api);

/* POST /v1/embeddings (handlers_embed.c), on a pooling engine. */
enum MHD_Result handle_embeddings(http_request *r);
/* The route needs the other runner (/v1/embeddings on a generate engine, /v1/completions or
 * /v1/chat/completions on a pooling one); handle_wrong_runner answers it with vLLM's 400. */
bool route_wrong_runner(const http_request *r);
enum MHD_Result handle_wrong_runner(http_request *r);

/* In-flight accounting for --max-pending (server.c): false (and err = 503)
 * when the cap is reached or the server is shutting down. */
bool server_acquire_slot(server *s, oai_error *err);
void server_release_slot(server *s);

#endif
