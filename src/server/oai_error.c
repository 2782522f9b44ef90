/*
 * oai_error.c: OpenAI-style error bodies and HTTP statuses.
 *
 * Follows vLLM's ErrorResponse / ErrorInfo (vllm/entrypoints/openai/engine/protocol.py:
 * {"error": {"message", "type", "param", "code"}}) and create_error_response
 * (vllm/entrypoints/utils.py: err_type "BadRequestError" + 400 by default,
 * "NotFoundError" + 404, "InternalServerError" + 500, "NotImplementedError" + 501).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai_internal.h"

const char *oai_error_type(int status) {
    switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowed";
    case 408: return "RequestTimeout";
    case 413: return "RequestEntityTooLarge";
    case 422: return "UnprocessableEntityError";
    case 429: return "RateLimitError";
    case 500: return "InternalServerError";
    case 501: return "NotImplementedError";
    case 503: return "ServiceUnavailableError";
    default: return "Error";
    }
}

/* Copies src into dst[cap] without cutting a UTF-8 sequence in half. */
static void copy_utf8(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--; /* back to a sequence start */
    }
    memcpy(dst, src, n);
    dst[n] = 0;
}

static void set_fields(oai_error *e, int status, const char *param, const char *message) {
    memset(e, 0, sizeof *e);
    e->status = status;
    copy_utf8(e->type, sizeof e->type, oai_error_type(status));
    if (param) copy_utf8(e->param, sizeof e->param, param);
    copy_utf8(e->message, sizeof e->message, message ? message : "");
}

void oai_error_set(oai_error *e, int status, const char *param, const char *fmt, ...) {
    if (!e) return;
    char msg[sizeof e->message + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_fields(e, status, param, msg);
}

void oai_error_from_status(oai_error *e, vllm_status st, const char *message) {
    if (!e) return;
    int status;
    switch (st) {
    case VLLM_ERR_INVALID_ARG:
    case VLLM_ERR_TOO_LONG:
    case VLLM_ERR_UNSUPPORTED:
    case VLLM_ERR_FORMAT: status = 400; break;
    case VLLM_ERR_NOT_FOUND: status = 404; break;
    default: status = 500; break;
    }
    const char *param = status == 400 ? oai_guess_param(message) : NULL;
    if (st == VLLM_ERR_TOO_LONG) param = "input_tokens"; /* vLLM's renderer length check */
    set_fields(e, status, param, message && message[0] ? message : vllm_status_str(st));
}

/* {"error": {...}} as a json_t. */
static json_t *error_object(const oai_error *e) {
    json_t *inner = json_object();
    json_t *root = json_object();
    if (!inner || !root) {
        json_decref(inner);
        json_decref(root);
        return NULL;
    }
    json_object_set_new(inner, "message", oai_json_str(e->message, strlen(e->message)));
    json_object_set_new(inner, "type", oai_json_str(e->type, strlen(e->type)));
    json_object_set_new(inner, "param", e->param[0] ? oai_json_str(e->param, strlen(e->param)) : json_null());
    json_object_set_new(inner, "code", json_integer(e->status));
    json_object_set_new(root, "error", inner);
    return root;
}

char *oai_error_json(const oai_error *e) {
    if (!e) return NULL;
    json_t *j = error_object(e);
    if (!j) return NULL;
    char *s = oai_json_dump(j, NULL);
    json_decref(j);
    return s;
}

char *oai_error_sse(const oai_error *e) {
    char *body = oai_error_json(e);
    if (!body) return NULL;
    oai_buf b = {0};
    oai_buf_puts(&b, "data: ");
    oai_buf_puts(&b, body);
    oai_buf_puts(&b, "\n\n");
    free(body);
    return oai_buf_take(&b, NULL);
}

char *oai_error_unauthorized_json(void) {
    /* vLLM's API-key middleware answers {"error": "Unauthorized"}; the issue asks for
       OpenAI's error object, which the openai clients parse into AuthenticationError */
    oai_error e;
    oai_error_set(&e, 401, NULL, "Unauthorized");
    return oai_error_json(&e);
}
