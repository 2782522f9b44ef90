/*
 * handlers_generate.c: POST /v1/completions and POST /v1/chat/completions:
 * parse (oai_protocol.h), add one engine request per prompt (each with
 * params.n samples), then either collect every chunk into one JSON body, or
 * stream them as Server-Sent Events from an MHD content-reader callback.
 * Also the request-level metrics (TTFT, inter-token latency, e2e, finish
 * reasons) observed as chunks arrive, and aborts: a client that goes away,
 * or server shutdown, ends the engine requests so their KV blocks are freed.
 *
 * vLLM: vllm/entrypoints/openai/serving_completion.py (create_completion:
 * one engine request per prompt with id "<request id>-<i>", merged
 * generators, choice index = prompt index * n + sample index,
 * completion_stream_generator ending in "data: [DONE]") and
 * serving_chat.py (chat_completion_stream_generator); vLLM aborts the
 * engine request when the client disconnects (serving_engine.py,
 * merge_async_iterators / iterate_with_cancellation).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "server/handlers.h"
#include "server/responses_store.h"

#define WAIT_MS 100             /* longest wait on a stream before looking at the client / shutdown */
#define CHECK_EVERY 0.1         /* seconds between client / shutdown checks while chunks flow */

typedef struct sample_state {
    bool started, finished;
    double last;                /* when its last token arrived */
} sample_state;

/* One generation request in flight: the parsed request, its reply builder
 * and one engine stream per prompt. Owned by the HTTP thread that serves
 * it (for SSE: by the MHD response, freed in its free callback). */
typedef struct gen_job {
    server *srv;
    oai_request *req;
    oai_response *res;
    vllm_stream **streams;      /* (num_streams) one per prompt */
    bool *done;                 /* (num_streams) its last chunk was read */
    size_t num_streams;
    sample_state *samples;      /* (num_streams * n) */
    size_t n;
    size_t rr;                  /* round-robin start among streams */
    double arrival;
    int fd;                     /* the client's socket */
    client_eof eof;             /* what end of input from the client means (client_gone) */
    double last_check;
    bool abort_sent;            /* shutdown: the engine requests were aborted */
    bool failed;                /* an engine error was streamed: only [DONE] remains */
    bool ended;                 /* "data: [DONE]" is queued */
    char *out;                  /* SSE bytes not yet handed to MHD */
    size_t out_len, out_off;
} gen_job;

static void job_free(gen_job *j) {
    if (!j) return;
    double now = server_now();
    /* samples that never finished (client gone, shutdown) count as aborted */
    for (size_t i = 0; j->samples && i < j->num_streams * j->n; i++)
        if (!j->samples[i].finished)
            metrics_finished(j->srv->metrics, vllm_stream_engine(j->streams[i / j->n]), VLLM_FINISH_ABORT,
                             now - j->arrival, j->req->prompts[i / j->n].prompt.num_token_ids, 0);
    for (size_t i = 0; i < j->num_streams; i++) vllm_stream_free(j->streams[i]); /* aborts unfinished ones */
    oai_response_free(j->res);
    oai_request_free(j->req);
    free(j->streams);
    free(j->done);
    free(j->samples);
    free(j->out);
    server_release_slot(j->srv);
    free(j);
}

static void job_free_cb(void *cls) { job_free(cls); }

/* Takes req; the caller holds an in-flight slot, which the job now owns. */
static gen_job *job_new(server *s, oai_request *req, const http_request *r) {
    gen_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->srv = s;
    j->req = req;
    j->num_streams = req->num_prompts;
    j->n = req->n > 0 ? (size_t)req->n : 1;
    j->arrival = r->arrival;
    j->fd = r->fd;
    j->eof = req->stream ? CLIENT_EOF_WRITES_TELL : r->http11 ? CLIENT_EOF_PROBE : CLIENT_EOF_GONE;
    j->last_check = server_now();
    size_t ns = j->num_streams ? j->num_streams : 1;
    bool ok = j->num_streams <= SIZE_MAX / sizeof(sample_state) / j->n;
    if (ok) {
        j->streams = calloc(ns, sizeof *j->streams);
        j->done = calloc(ns, sizeof *j->done);
        j->samples = calloc(ns * j->n, sizeof *j->samples);
    }
    if (!ok || !j->streams || !j->done || !j->samples) {
        free(j->streams);
        free(j->done);
        free(j->samples);
        free(j);
        return NULL;
    }
    return j;
}

/* Metrics of one chunk of prompt p's stream, and its end. */
static void job_observe(gen_job *j, size_t p, const vllm_stream_chunk *c) {
    metrics *m = j->srv->metrics;
    const int eng = vllm_stream_engine(j->streams[p]);
    if (c->last) j->done[p] = true;
    if (c->index >= j->n) return;
    sample_state *ss = &j->samples[p * j->n + c->index];
    double now = server_now();
    if (c->num_tokens > 0) {
        if (!ss->started) metrics_first_token(m, eng, now - j->arrival, c->prompt_tokens);
        else metrics_inter_token(m, eng, now - ss->last);
        ss->started = true;
        ss->last = now;
        metrics_generated(m, eng, c->num_tokens);
    }
    if (c->finish_reason != VLLM_FINISH_NONE && !ss->finished) {
        ss->finished = true;
        metrics_finished(m, eng, c->finish_reason, now - j->arrival, c->prompt_tokens, c->completion_tokens);
    }
}

/* The next chunk of any unfinished stream, waiting up to wait_ms.
 * VLLM_OK (*p = its prompt), VLLM_STREAM_TIMEOUT, or VLLM_ERR_NOT_FOUND
 * when every stream has ended. */
static vllm_status job_next(gen_job *j, vllm_stream_chunk *c, size_t *p, int wait_ms) {
    size_t n = j->num_streams, live = 0, first_live = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = (j->rr + k) % n;
        if (j->done[i]) continue;
        if (live++ == 0) first_live = i;
        vllm_status st = vllm_stream_next(j->streams[i], c, 0);
        if (st == VLLM_OK) {
            j->rr = (i + 1) % n;
            *p = i;
            return VLLM_OK;
        }
        if (st != VLLM_STREAM_TIMEOUT) j->done[i] = true; /* ended (cannot happen before its last chunk) */
    }
    if (live == 0) return VLLM_ERR_NOT_FOUND;
    /* one stream: sleep on it; several: a short wait on one, then poll them all again */
    vllm_status st = vllm_stream_next(j->streams[first_live], c, live == 1 ? wait_ms : 2);
    if (st == VLLM_OK) {
        *p = first_live;
        j->rr = (first_live + 1) % n;
        return VLLM_OK;
    }
    return st == VLLM_STREAM_TIMEOUT ? VLLM_STREAM_TIMEOUT : VLLM_ERR_NOT_FOUND;
}

/* Every CHECK_EVERY seconds: passes a shutdown abort to the engine, and
 * tells whether the client is still there. */
static bool job_client_alive(gen_job *j) {
    double now = server_now();
    if (now - j->last_check < CHECK_EVERY) return true;
    j->last_check = now;
    server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    bool aborting = s->aborting;
    pthread_mutex_unlock(&s->mu);
    if (aborting && !j->abort_sent) {
        j->abort_sent = true;
        for (size_t i = 0; i < j->num_streams; i++)
            if (!j->done[i] && vllm_async_abort(s->ae, vllm_stream_request_id(j->streams[i])) != VLLM_OK)
                vt_error_clear(); /* finished meanwhile */
    }
    return !client_gone(j->fd, &j->eof);
}

/* Responses with store: the finished response and its conversation, for previous_response_id and GET. */
static void job_store(gen_job *j) {
    const oai_request *q = j->req;
    const char *obj = oai_response_api_object(j->res);
    if (q->api != OAI_API_RESPONSES || !q->api_store || !obj) return;
    char *msgs = q->api_messages ? json_dumps(q->api_messages, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (responses_store_put(j->srv->ctx.responses_store, oai_response_id(j->res), obj, msgs) != VLLM_OK)
        LOG_W("%s: not stored (out of memory)", oai_response_id(j->res));
    free(msgs);
}

/* ---- non-streaming: collect, then one JSON body ---- */

static enum MHD_Result collect_and_reply(http_request *r, gen_job *j) {
    oai_error err = {0};
    vllm_status st = VLLM_OK;
    for (;;) {
        vllm_stream_chunk c;
        size_t p = 0;
        vllm_status ns = job_next(j, &c, &p, WAIT_MS);
        if (ns == VLLM_ERR_NOT_FOUND) break;
        if (ns == VLLM_OK) {
            job_observe(j, p, &c);
            if (st == VLLM_OK) st = oai_response_add(j->res, p, &c);
            vllm_stream_chunk_clear(&c);
        }
        if (!job_client_alive(j)) {
            LOG_I("%s: client disconnected: request aborted", oai_response_id(j->res));
            job_free(j); /* aborts the engine requests */
            return MHD_NO;
        }
    }
    char *body = NULL;
    size_t len = 0;
    if (st == VLLM_OK) st = oai_response_body(j->res, &body, &len, &err);
    if (st == VLLM_OK) job_store(j);
    oai_api api = j->req->api;
    job_free(j);
    if (st != VLLM_OK) {
        if (err.status == 0) oai_error_set(&err, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s", vllm_last_error());
        return reply_error_api(r, &err, api);
    }
    return reply_body(r, MHD_HTTP_OK, "application/json", body, len);
}

/* ---- streaming: SSE from MHD's content-reader callback ---- */

static void job_set_out(gen_job *j, char *sse, size_t len) {
    free(j->out);
    j->out = sse;
    j->out_len = sse ? len : 0;
    j->out_off = 0;
}

/* About the memory of a chunk (text, ids, logprobs and their top-k). */
static size_t chunk_bytes(const vllm_stream_chunk *c) {
    size_t per = sizeof(int32_t) + sizeof(float) + (size_t)c->num_top_logprobs * (sizeof(int32_t) + sizeof(float));
    size_t prompt = c->prompt_logprobs ? c->prompt_tokens * (sizeof(float) + (size_t)c->num_prompt_top_logprobs * 8) : 0;
    return c->text_len + c->num_tokens * per + prompt;
}

/* Runs on the connection's thread whenever MHD can send more. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen_job *j = cls;
    for (;;) {
        if (j->out_off < j->out_len) {
            size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
            memcpy(buf, j->out + j->out_off, n);
            j->out_off += n;
            return (ssize_t)n;
        }
        if (j->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        char *sse = NULL;
        size_t len = 0;
        vllm_stream_chunk c;
        size_t p = 0;
        vllm_status st = j->failed ? VLLM_ERR_NOT_FOUND : job_next(j, &c, &p, WAIT_MS);
        if (st == VLLM_ERR_NOT_FOUND) {
            /* every stream ended (or an error was sent): usage chunk and [DONE] */
            if (j->failed && j->req->api == OAI_API_OPENAI) {
                sse = strdup("data: [DONE]\n\n");
                len = sse ? strlen(sse) : 0;
                st = sse ? VLLM_OK : VLLM_ERR_NO_MEMORY;
            } else {
                st = oai_response_stream_end(j->res, &sse, &len); /* Responses / Messages: nothing after an error */
                if (st == VLLM_OK && !j->failed) job_store(j);
            }
            if (st != VLLM_OK) return MHD_CONTENT_READER_END_WITH_ERROR;
            job_set_out(j, sse, len);
            j->ended = true;
            continue;
        }
        if (st == VLLM_OK) {
            job_observe(j, p, &c);
            st = oai_response_stream_chunk(j->res, p, &c, &sse, &len);
            if (c.error) {
                LOG_E("%s: engine error: %s", oai_response_id(j->res), c.error);
                j->failed = true;
            }
            size_t held = chunk_bytes(&c) + len; /* a chunk merged while the reader lagged can be large */
            vllm_stream_chunk_clear(&c);
            oai_release_memory(held);
            if (st != VLLM_OK) return MHD_CONTENT_READER_END_WITH_ERROR;
            job_set_out(j, sse, len);
        }
        if (!job_client_alive(j)) {
            LOG_I("%s: client disconnected: request aborted", oai_response_id(j->res));
            return MHD_CONTENT_READER_END_WITH_ERROR; /* MHD closes; job_free_cb aborts the engine requests */
        }
    }
}

/* ---- the endpoint ---- */

/* An engine message without its "request <engine id>: " prefix: the client
 * knows its request by the response id, not by the engine's. */
static const char *engine_message(const char *msg, const char *engine_id) {
    size_t n = engine_id ? strlen(engine_id) : 0;
    if (n && !strncmp(msg, "request ", 8) && !strncmp(msg + 8, engine_id, n) && !strncmp(msg + 8 + n, ": ", 2))
        return msg + 8 + n + 2;
    return msg;
}

/* a 500 in the API's shape */
static enum MHD_Result reply_out_of_memory(http_request *r, oai_api api) {
    oai_error err;
    oai_error_set(&err, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "out of memory");
    return reply_error_api(r, &err, api);
}

enum MHD_Result handle_generate(http_request *r, oai_kind kind, oai_api api) {
    server *s = r->srv;
    oai_error err = {0};
    if (!server_acquire_slot(s, &err)) return reply_error_api(r, &err, api);
    oai_request *req = NULL;
    vllm_status st = api == OAI_API_RESPONSES   ? oai_parse_responses(&s->ctx, r->body, r->body_len, &req, &err)
                     : api == OAI_API_ANTHROPIC ? oai_parse_messages(&s->ctx, r->body, r->body_len, &req, &err)
                     : kind == OAI_KIND_CHAT    ? oai_parse_chat(&s->ctx, r->body, r->body_len, &req, &err)
                                                : oai_parse_completion(&s->ctx, r->body, r->body_len, &req, &err);
    if (st != VLLM_OK) {
        server_release_slot(s);
        if (err.status == 0) oai_error_set(&err, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s", vllm_last_error());
        return reply_error_api(r, &err, api);
    }
    gen_job *j = job_new(s, req, r);
    if (!j) {
        oai_request_free(req);
        server_release_slot(s);
        return reply_out_of_memory(r, api);
    }
    if (oai_response_create(&s->ctx, req, NULL, &j->res) != VLLM_OK) {
        job_free(j);
        return reply_out_of_memory(r, api);
    }
    /* one engine request per prompt: "<response id>-<prompt index>" as vLLM, plus a
       server-unique serial (vLLM appends a random part), so clients that send the same
       request_id never collide and never learn of each other */
    for (size_t p = 0; p < j->num_streams; p++) {
        char *id = oai_response_engine_id(j->res, p);
        st = id ? vllm_async_add_request(s->ae, id, &req->prompts[p].prompt, &req->prompts[p].params, &j->streams[p])
                : vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        if (st != VLLM_OK) {
            oai_error_from_status(&err, st, engine_message(vllm_last_error(), id));
            free(id);
            job_free(j); /* aborts the prompts already added */
            return reply_error_api(r, &err, api);
        }
        free(id);
    }
    if (!req->stream) return collect_and_reply(r, j);

    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, j, job_free_cb);
    if (!resp) {
        job_free(j);
        return reply_out_of_memory(r, api);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    r->status = MHD_HTTP_OK;
    enum MHD_Result ret = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp); /* the job lives until MHD is done with the response */
    return ret;
}
