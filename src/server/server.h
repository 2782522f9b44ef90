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
 *   - Slow clients ("slow loris"): a request's headers must arrive within
 *     header_timeout seconds (from the connection's start, or from the end
 *     of its previous request on a kept-alive connection) and its body
 *     within request_timeout seconds of its headers: total deadlines, not
 *     idle timers that each byte restarts. Past one, a watchdog thread
 *     writes 408 with the error JSON and closes the connection. Idle
 *     keep-alive connections close after timeout_keep_alive seconds.
 *   - Connections: at most max_connections at once (each is an HTTP
 *     thread), and at most max_connections_per_client from one client
 *     address (IPv6: one /64); the accept loop (conn_gate.h) answers a
 *     connection over either cap with 503 (error JSON, Retry-After) and a
 *     graceful close, never a TCP reset. The process's open-file limit is
 *     raised to fit (as vLLM's set_ulimit does).
 *   - max_pending caps the generation requests in flight: one more gets 503
 *     (with Retry-After).
 *   - Framing (http_framing.h): ambiguous or unsupported request framing
 *     (duplicate Content-Length, Content-Length with Transfer-Encoding, a
 *     transfer coding other than chunked, HTTP/1.1 without Host, control
 *     bytes in header values, "%00" in the target, whitespace before a
 *     header's colon) gets 400 or 501 and the connection is closed. A
 *     chunked body that passes the size limit is answered 413 at once.
 *   - A client that half-closes (shuts down its sending side after the
 *     request) still gets the full response (see client_eof in handlers.h).
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
    size_t max_tokenize_bytes;              /* /tokenize text bytes and /detokenize ids above: 400
                                               (oai_server_ctx.max_tokenize_bytes; 0 = its default, 1 MiB) */
    long long max_response_entries;         /* one request's n x (max_tokens x (1 + logprobs) + prompt x (1 +
                                               prompt_logprobs)) above: 400 (0 = the default, 2^20; < 0 = no cap) */
    int max_pending;                        /* 503 beyond this many generation requests in flight; 0 = no cap */
    int timeout_keep_alive;                 /* seconds an idle keep-alive connection stays open (default 5) */
    int header_timeout;                     /* seconds a request's headers may take to arrive (default 10) -> 408 */
    int request_timeout;                    /* seconds a request's body may take to arrive (default 30) -> 408 */
    int max_connections;                    /* connections (= HTTP threads) at once (default 4096; must
                                               exceed max_pending) -> 503 */
    int max_connections_per_client;         /* of them from one address (default 1024; 0 = no cap) -> 503 */
    const char *chat_template;              /* NULL: chat completions get 400 */
    const char *bos_token;                  /* for the chat template; may be NULL */
    const char *eos_token;
    bool use_generation_config;             /* default sampling from generation_config.json (default true;
                                               vLLM's --generation-config auto; false = vllm) */
    bool enable_auto_tool_choice;           /* tool_choice "auto" served (--enable-auto-tool-choice) */
    const char *tool_call_parser;           /* --tool-call-parser NAME (tool_parser.h), NULL = none */
    const char *reasoning_parser;           /* --reasoning-parser NAME (reasoning_parser.h), NULL = none */
    size_t responses_store_bytes;           /* the Responses API's store of finished responses (previous_response_id,
                                               GET /v1/responses/{id}): at most this many bytes, least recently used
                                               evicted (default 64 MiB; 0 = nothing stored) */
} server_options;

server_options server_default_options(void);

/* The tool / reasoning parser options as vLLM's validate_parsed_serve_args checks them: an unknown
 * --tool-call-parser or --reasoning-parser name is an error listing the valid names, and
 * --enable-auto-tool-choice needs --tool-call-parser. VLLM_ERR_INVALID_ARG with vt_error's message. */
vllm_status server_check_parsers(bool enable_auto_tool_choice, const char *tool_call_parser,
                                 const char *reasoning_parser);

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
/* Shuts down every connection's socket now (the end of a shutdown: threads
 * blocked on clients that never read return at once). */
void server_close_connections(server *s);
void server_free(server *s);

#endif
