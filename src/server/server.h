/*
 * server.h: the OpenAI-compatible HTTP server (`vllmc serve`) on
 * libmicrohttpd: the daemon and its lifecycle, routing, API-key check, body
 * limits, slow-client timeouts and graceful shutdown (server.c); the
 * endpoints live in handlers*.c, the wire format in oai_protocol.h.
 *
 * Threads: one HTTP thread per connection (MHD_USE_THREAD_PER_CONNECTION).
 * A connection's thread parses its request, adds it to the async engine and
 * then waits on the request's vllm_stream with short timeouts (checking for
 * a vanished client and for shutdown between waits), so HTTP threads never
 * hold anything the engine thread needs: the engine thread only pushes
 * chunks into streams. Streaming replies are MHD content-reader callbacks
 * run on the connection's own thread, so blocking in them (with a timeout)
 * delays nobody else.
 *
 * Endpoints (vLLM's vllm/entrypoints/openai/api_server.py):
 *   POST /v1/completions, POST /v1/chat/completions (stream: SSE)
 *   GET  /v1/models
 *   POST /tokenize, POST /detokenize
 *   GET  /health (200, empty), GET|POST /ping, GET /version, GET /metrics
 * Unknown paths: 404; a known path with another method: 405 (Allow
 * header); both with OpenAI's error JSON.
 *
 * Limits:
 *   - API keys (when set) are checked on every path under /v1 (vLLM's
 *     AuthenticationMiddleware): "Authorization: Bearer <key>", else 401
 *     {"error": "Unauthorized"}.
 *   - Bodies over max_body_bytes get 413. A body that declares (or sends)
 *     more than 16 x max_body_bytes is refused at once and the connection
 *     closed; smaller ones are read and dropped so the client sees the 413.
 *   - A request whose body has not fully arrived request_timeout seconds
 *     after its headers (a slow or stalled client, "slow loris") gets 408
 *     with the error JSON, written by a watchdog thread, and its connection
 *     is closed; the connection's thread is freed and others are unaffected.
 *     Idle keep-alive connections and clients stalling inside their headers
 *     are closed after timeout_keep_alive seconds (no response: there is no
 *     request yet).
 *   - max_pending caps the generation requests in flight: one more gets 503.
 */
#ifndef VLLM_SERVER_SERVER_H
#define VLLM_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

typedef struct server server;

typedef struct server_options {
    const char *host;                       /* bind address (default "127.0.0.1"; "0.0.0.0", "::") */
    int port;                               /* default 8000; 0 = a free port (see server_port) */
    const char *const *served_model_names;  /* (num_served_model_names >= 1); [0] names responses and metrics */
    size_t num_served_model_names;
    const char *model_root;                 /* "root" in /v1/models: the model path as given */
    const char *const *api_keys;            /* (num_api_keys); none = no authentication */
    size_t num_api_keys;
    size_t max_body_bytes;                  /* 413 above (default 4 MiB) */
    int max_pending;                        /* 503 beyond this many generation requests in flight; 0 = no cap */
    int timeout_keep_alive;                 /* seconds an idle keep-alive connection stays open (default 5) */
    int request_timeout;                    /* seconds a request's body may take to arrive (default 30) -> 408 */
    int connection_limit;                   /* connections (= HTTP threads) at once (default 1024) */
    const char *chat_template;              /* NULL: chat completions get 400 */
    const char *bos_token;                  /* for the chat template; may be NULL */
    const char *eos_token;
    bool use_generation_config;             /* default sampling from generation_config.json (default true;
                                               vLLM's --generation-config auto; false = vllm) */
} server_options;

server_options server_default_options(void);

/* Binds host:port, starts the HTTP threads and serves requests on ae
 * (which must outlive the server). Strings in opt are borrowed: they must
 * stay valid until server_free. */
vllm_status server_start(vllm_async_engine *ae, const server_options *opt, server **out);
/* The port actually bound (the chosen one when opt.port was 0). */
int server_port(const server *s);

/* Graceful shutdown, in steps (serve.c drives them from its signal loop):
 * server_begin_shutdown stops accepting connections and answers new
 * generation requests 503; server_in_flight counts those still running;
 * server_abort_requests ends them now (their streams finish with
 * finish_reason "abort", so every client gets a well-formed reply);
 * server_free closes what is left, joins the HTTP threads and frees. */
void server_begin_shutdown(server *s);
int server_in_flight(server *s);
void server_abort_requests(server *s);
void server_free(server *s);

#endif
