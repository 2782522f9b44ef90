/*
 * handlers_responses.c: the Responses API's stored responses (GET / DELETE /v1/responses/{id}, POST
 * /v1/responses/{id}/cancel) and POST /v1/messages/count_tokens. POST /v1/responses and /v1/messages themselves
 * are generation requests (handlers_generate.c).
 *
 * vLLM: vllm/entrypoints/openai/responses/serving.py retrieve_responses (404 "Response with id '<id>' not found."
 * with param response_id) and cancel_responses (a finished response: 400 "Cannot cancel a synchronous response.");
 * DELETE follows OpenAI's API reference ({"id", "object": "response", "deleted": true}); count_tokens:
 * vllm/entrypoints/anthropic/serving.py count_tokens.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/handlers.h"
#include "server/responses_store.h"

static enum MHD_Result not_found(http_request *r) {
    oai_error err;
    oai_error_set(&err, MHD_HTTP_NOT_FOUND, "response_id", "Response with id '%s' not found.", r->item_id);
    return reply_error(r, &err);
}

enum MHD_Result handle_response_item(http_request *r) {
    responses_store *store = r->srv->ctx.responses_store;
    if (!strcmp(r->method, "DELETE")) {
        if (!responses_store_delete(store, r->item_id)) return not_found(r);
        json_t *o = json_pack("{s:s, s:s, s:b}", "id", r->item_id, "object", "response", "deleted", 1);
        char *body = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        return reply_json(r, MHD_HTTP_OK, body);
    }
    char *resp = NULL;
    if (!responses_store_get(store, r->item_id, &resp, NULL)) return not_found(r);
    return reply_json(r, MHD_HTTP_OK, resp);
}

enum MHD_Result handle_response_cancel(http_request *r) {
    if (!responses_store_get(r->srv->ctx.responses_store, r->item_id, NULL, NULL)) return not_found(r);
    /* everything stored has finished (background mode is not served) */
    oai_error err;
    oai_error_set(&err, MHD_HTTP_BAD_REQUEST, "response_id", "Cannot cancel a synchronous response.");
    return reply_error(r, &err);
}

enum MHD_Result handle_count_tokens(http_request *r) {
    oai_error err;
    char *resp = NULL;
    if (oai_count_tokens_request(&r->srv->ctx, r->body, r->body_len, &resp, &err) != VLLM_OK)
        return reply_error_api(r, &err, OAI_API_ANTHROPIC);
    return reply_json(r, MHD_HTTP_OK, resp);
}
