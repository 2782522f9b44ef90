/*
 * handlers_embed.c: POST /v1/embeddings on a pooling engine: parse (oai_embed.h), add one
 * pooling request per input, wait for each embedding (aborting them when the client goes away
 * or the server shuts down), reply with one JSON body. And the runner checks both ways: a
 * generate engine answers /v1/embeddings, a pooling engine /v1/completions and
 * /v1/chat/completions, with vLLM's 400.
 *
 * vLLM: vllm/entrypoints/openai/api_server.py (create_embedding: "The model does not support
 * Embeddings API" when the model has no embed task; create_completion / create_chat_completion:
 * "The model does not support Completions API" / "Chat Completions API" without the generate
 * task) and serving_embedding.py (one engine request per input, "<request id>-<i>").
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"
#include "server/handlers.h"
#include "server/oai_embed.h"

#define WAIT_MS 100      /* longest wait on a stream before looking at the client / shutdown */
#define CHECK_EVERY 0.1  /* seconds between those checks */

bool route_wrong_runner(const http_request *r) {
    bool pooling = r->srv->info.runner == VLLM_RUNNER_POOLING;
    bool generate = r->route == ROUTE_COMPLETIONS || r->route == ROUTE_CHAT || r->route == ROUTE_RESPONSES ||
                    r->route == ROUTE_MESSAGES;
    return pooling ? generate : r->route == ROUTE_EMBEDDINGS;
}

enum MHD_Result handle_wrong_runner(http_request *r) {
    oai_error err;
    const char *api = r->route == ROUTE_EMBEDDINGS    ? "Embeddings"
                      : r->route == ROUTE_CHAT        ? "Chat Completions"
                      : r->route == ROUTE_RESPONSES   ? "Responses"
                      : r->route == ROUTE_MESSAGES    ? "Messages"
                                                      : "Completions";
    oai_error_set(&err, MHD_HTTP_BAD_REQUEST, NULL, "The model does not support %s API", api);
    return reply_error(r, &err);
}

/* An engine message without its "request <engine id>: " prefix (the client knows the response id). */
static const char *engine_message(const char *msg, const char *engine_id) {
    size_t n = strlen(engine_id);
    if (!strncmp(msg, "request ", 8) && !strncmp(msg + 8, engine_id, n) && !strncmp(msg + 8 + n, ": ", 2))
        return msg + 8 + n + 2;
    return msg;
}

typedef struct embed_job {
    server *srv;
    oai_embed_request *req;
    char *id;                    /* the response id */
    vllm_stream **streams;       /* (n) */
    float **emb;                 /* (n) each input's embedding, once it came */
    size_t *dims;                /* (n) */
    size_t n;
} embed_job;

static void job_free(embed_job *j, double e2e) {
    for (size_t i = 0; i < j->n; i++) {
        if (j->streams && j->streams[i])
            metrics_finished(j->srv->metrics, vllm_stream_engine(j->streams[i]),
                             j->emb[i] ? VLLM_FINISH_STOP : VLLM_FINISH_ABORT, e2e, j->req->prompts[i].num_token_ids, 0);
        vllm_stream_free(j->streams ? j->streams[i] : NULL); /* aborts an unfinished one */
        free(j->emb ? j->emb[i] : NULL);
    }
    free(j->streams);
    free(j->emb);
    free(j->dims);
    free(j->id);
    oai_embed_request_free(j->req);
}

/* Waits for every input's embedding. false with err filled (an engine error: 500) or with *gone set (the
 * client went away: no reply). */
static bool job_wait(embed_job *j, http_request *r, oai_error *err, bool *gone) {
    server *s = j->srv;
    client_eof eof = r->http11 ? CLIENT_EOF_PROBE : CLIENT_EOF_GONE;
    double last_check = server_now();
    bool abort_sent = false;
    for (size_t i = 0; i < j->n;) {
        vllm_stream_chunk c;
        vllm_status st = vllm_stream_next(j->streams[i], &c, WAIT_MS);
        if (st == VLLM_OK) {
            bool last = c.last;
            if (c.embedding) {
                j->emb[i] = c.embedding;
                j->dims[i] = c.embedding_dim;
                c.embedding = NULL;
            } else if (last) {
                const char *why = c.error      ? c.error
                                  : abort_sent ? "the server is shutting down"
                                               : "the request was aborted";
                oai_error_set(err, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s", why);
            }
            vllm_stream_chunk_clear(&c);
            if (last && !j->emb[i]) return false;
            if (last) i++;
        } else if (st != VLLM_STREAM_TIMEOUT) {
            oai_error_set(err, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "the embedding of input %zu was lost", i);
            return false;
        }
        double now = server_now();
        if (now - last_check < CHECK_EVERY) continue;
        last_check = now;
        pthread_mutex_lock(&s->mu);
        bool aborting = s->aborting;
        pthread_mutex_unlock(&s->mu);
        if (aborting && !abort_sent) { /* shutdown: end the engine requests; their streams end (abort) */
            abort_sent = true;
            for (size_t k = i; k < j->n; k++)
                if (vllm_async_abort(s->ae, vllm_stream_request_id(j->streams[k])) != VLLM_OK) vt_error_clear();
        }
        if (client_gone(r->fd, &eof)) {
            *gone = true;
            return false;
        }
    }
    return true;
}

enum MHD_Result handle_embeddings(http_request *r) {
    server *s = r->srv;
    oai_error err = {0};
    if (s->info.runner != VLLM_RUNNER_POOLING) return handle_wrong_runner(r);
    if (!server_acquire_slot(s, &err)) return reply_error(r, &err);
    embed_job j = {.srv = s};
    vllm_status st = oai_parse_embedding(&s->ctx, &s->info, r->body, r->body_len, &j.req, &err);
    if (st != VLLM_OK) {
        server_release_slot(s);
        if (err.status == 0) oai_error_set(&err, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s", vllm_last_error());
        return reply_error(r, &err);
    }
    j.n = j.req->num_prompts;
    j.id = oai_embed_response_id(j.req);
    j.streams = calloc(j.n, sizeof *j.streams);
    j.emb = calloc(j.n, sizeof *j.emb);
    j.dims = calloc(j.n, sizeof *j.dims);
    if (!j.id || !j.streams || !j.emb || !j.dims) {
        job_free(&j, 0);
        server_release_slot(s);
        return reply_json(r, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL);
    }
    static _Atomic unsigned long long serial;
    const long long created = (long long)time(NULL);
    /* one engine request per input: "<response id>-<i>-<serial>" (a server-unique part, as for generation) */
    for (size_t i = 0; i < j.n; i++) {
        char eid[320];
        snprintf(eid, sizeof eid, "%s-%zu-%llu", j.id, i, ++serial);
        st = vllm_async_add_pooling_request(s->ae, eid, &j.req->prompts[i], &j.req->params, &j.streams[i]);
        if (st != VLLM_OK) {
            oai_error_from_status(&err, st, engine_message(vllm_last_error(), eid));
            job_free(&j, server_now() - r->arrival);
            server_release_slot(s);
            return reply_error(r, &err);
        }
    }
    bool gone = false;
    bool ok = job_wait(&j, r, &err, &gone);
    char *body = NULL;
    size_t len = 0;
    if (ok) body = oai_embed_response(&s->ctx, j.req, j.id, created, (const float *const *)j.emb, j.dims, &len);
    if (gone) LOG_I("%s: client disconnected: request aborted", j.id);
    job_free(&j, server_now() - r->arrival);
    server_release_slot(s);
    if (gone) return MHD_NO;
    if (!ok) return reply_error(r, &err);
    if (!body) return reply_json(r, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL);
    return reply_body(r, MHD_HTTP_OK, "application/json", body, len);
}
