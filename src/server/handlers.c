/*
 * handlers.c: the server's small endpoints: GET /health and /ping, GET
 * /version, GET /metrics, GET /v1/models, POST /tokenize and /detokenize.
 *
 * vLLM: vllm/entrypoints/openai/api_server.py (health: 200 with an empty
 * body, 503 once the engine is dead; ping: the same for GET and POST; version: {"version": ...};
 * show_available_models; tokenize / detokenize through
 * OpenAIServingTokenization) and vllm/entrypoints/openai/api_server.py's
 * /metrics (prometheus_client's exposition, text/plain; version=0.0.4).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/handlers.h"

/* 200 with an empty body; 503 with the reason once the engine cannot run steps (vLLM's EngineDeadError) */
enum MHD_Result handle_health(http_request *r) {
    if (vllm_async_engine_check_health(r->srv->ae) != VLLM_OK) {
        oai_error e;
        oai_error_set(&e, 503, NULL, "the engine cannot run: %s", vllm_last_error());
        return reply_error(r, &e);
    }
    return reply_body(r, MHD_HTTP_OK, NULL, NULL, 0);
}

enum MHD_Result handle_version(http_request *r) {
    char *json = strdup("{\"version\":\"" VLLM_VERSION "\"}");
    return reply_json(r, MHD_HTTP_OK, json);
}

enum MHD_Result handle_metrics(http_request *r) {
    server *s = r->srv;
    const int ne = vllm_async_engine_num_engines(s->ae);
    vllm_engine_stats *st = calloc((size_t)ne, sizeof *st);
    int *blocks = calloc((size_t)ne, sizeof *blocks);
    char *text = NULL;
    size_t len = 0;
    for (int e = 0; st && blocks && e < ne; e++) {
        vllm_engine_info info;
        vllm_async_engine_get_engine_stats(s->ae, e, &st[e]);
        vllm_async_engine_get_engine_info(s->ae, e, &info);
        blocks[e] = info.num_kv_blocks;
    }
    const vllm_status ms = st && blocks ? metrics_render(s->metrics, st, blocks, &text, &len) : VLLM_ERR_NO_MEMORY;
    free(st);
    free(blocks);
    if (ms != VLLM_OK) return reply_json(r, 500, NULL);
    return reply_body(r, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

enum MHD_Result handle_models(http_request *r) {
    server *s = r->srv;
    const char *root = s->opt.model_root ? s->opt.model_root : s->opt.served_model_names[0];
    return reply_json(r, MHD_HTTP_OK, oai_models_json(&s->ctx, root));
}

enum MHD_Result handle_tokenize(http_request *r) {
    oai_error err;
    char *resp = NULL;
    if (oai_tokenize_request(&r->srv->ctx, r->body, r->body_len, &resp, &err) != VLLM_OK) return reply_error(r, &err);
    return reply_json(r, MHD_HTTP_OK, resp);
}

enum MHD_Result handle_detokenize(http_request *r) {
    oai_error err;
    char *resp = NULL;
    if (oai_detokenize_request(&r->srv->ctx, r->body, r->body_len, &resp, &err) != VLLM_OK) return reply_error(r, &err);
    return reply_json(r, MHD_HTTP_OK, resp);
}
