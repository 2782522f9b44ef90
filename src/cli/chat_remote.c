/* chat_remote.c: `vllmc chat --url`: each turn POSTed to a running OpenAI-compatible server, the reply streamed. */
/*
 * vllm chat's --url: POST {base}/v1/chat/completions with the history, stream true and the sampling
 * options as request fields (vLLM's names: max_tokens, temperature, top_k, repetition_penalty, ...),
 * the deltas written to stdout as their Server-Sent Events arrive (http_client.h). The model is
 * --model-name or the first id of GET /v1/models. Server errors (OpenAI's error JSON, in the reply or
 * in the stream) are printed and the chat goes on; Ctrl-C closes the connection, which aborts the
 * request on the server. http:// only (the client has no TLS).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/chat.h"
#include "cli/http_client.h"
#include "vllm.h"

#define SETUP_TIMEOUT_MS 10000   /* GET /v1/models */
#define REPLY_TIMEOUT_MS 600000  /* each wait during a reply (a long prompt's first token included) */

struct chat_remote {
    hc_url url;
    char path[1200];      /* {base}/v1/chat/completions */
    char headers[2048];   /* Content-Type and Authorization lines */
    char *model;
    json_t *fields;       /* the sampling fields and chat_template_kwargs of every request */
};

/* "the server answered 400: MESSAGE" from OpenAI's {"error": {"message": ...}} (or the body itself). */
static void print_server_error(int status, const char *body, size_t len) {
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!msg) msg = json_string_value(e);
    if (!msg) msg = json_string_value(json_object_get(j, "detail"));
    if (msg) fprintf(stderr, CHAT_CMD ": the server answered %d: %s\n", status, msg);
    else fprintf(stderr, CHAT_CMD ": the server answered %d: %.300s\n", status, body);
    json_decref(j);
}

/* A 400 that refuses the conversation's length: vllmc serve's ("the prompt has N tokens; max_model_len is M",
 * param input_tokens) or vLLM's ("This model's maximum context length is M tokens. However, ..."). */
static bool too_long(const char *body, size_t len) {
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *param = json_string_value(json_object_get(e, "param"));
    bool yes = (param && !strcmp(param, "input_tokens")) ||
               (msg && (strstr(msg, "max_model_len") || strstr(msg, "maximum context length")));
    json_decref(j);
    return yes;
}

static json_t *ids_array(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *str_array(const char *const *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_string(s[i]));
    return a;
}

/* vllmc generate's sampling options as the request fields vLLM's chat completions take. */
static json_t *request_fields(const cli_gen_opts *go, const json_t *kwargs) {
    json_t *f = json_object();
    if (!f) return NULL;
    json_object_set_new(f, "max_tokens", json_integer(go->max_tokens));
    if (go->set_temperature) json_object_set_new(f, "temperature", json_real(go->temperature));
    if (go->set_top_p) json_object_set_new(f, "top_p", json_real(go->top_p));
    if (go->set_top_k) json_object_set_new(f, "top_k", json_integer(go->top_k));
    if (go->set_min_p) json_object_set_new(f, "min_p", json_real(go->min_p));
    if (go->seed >= 0) json_object_set_new(f, "seed", json_integer(go->seed));
    if (go->min_tokens) json_object_set_new(f, "min_tokens", json_integer(go->min_tokens));
    if (go->ignore_eos) json_object_set_new(f, "ignore_eos", json_true());
    if (go->keep_special) json_object_set_new(f, "skip_special_tokens", json_false());
    if (go->include_stop) json_object_set_new(f, "include_stop_str_in_output", json_true());
    if (go->presence != 0) json_object_set_new(f, "presence_penalty", json_real(go->presence));
    if (go->frequency != 0) json_object_set_new(f, "frequency_penalty", json_real(go->frequency));
    if (go->repetition != 1) json_object_set_new(f, "repetition_penalty", json_real(go->repetition));
    if (go->num_stops) json_object_set_new(f, "stop", str_array(go->stops, go->num_stops));
    if (go->num_bad) json_object_set_new(f, "bad_words", str_array(go->bad_words, go->num_bad));
    if (go->num_stop_ids) json_object_set_new(f, "stop_token_ids", ids_array(go->stop_ids, go->num_stop_ids));
    if (go->num_allowed) json_object_set_new(f, "allowed_token_ids", ids_array(go->allowed, go->num_allowed));
    if (go->num_bias) {
        json_t *b = json_object();
        for (size_t i = 0; b && i < go->num_bias; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", (int)go->bias_ids[i]);
            json_object_set_new(b, key, json_real(go->bias_vals[i]));
        }
        json_object_set_new(f, "logit_bias", b);
    }
    if (kwargs) json_object_set_new(f, "chat_template_kwargs", json_deep_copy(kwargs));
    return f;
}

/* GET {base}/v1/models: the first model's id (malloc'd), or NULL with the message printed. */
static char *first_model(const chat_remote *r, const char *url, const char *v1) {
    char path[1200];
    snprintf(path, sizeof path, "%s/models", v1);
    int status = 0;
    char *body = NULL;
    size_t len = 0;
    if (hc_fetch(r->url.host, r->url.port, SETUP_TIMEOUT_MS, "GET", path, r->headers, NULL, 0, &status, &body,
                 &len) != VLLM_OK) {
        fprintf(stderr, CHAT_CMD ": cannot reach the server at %s: %s\n", url, vllm_last_error());
        return NULL;
    }
    char *id = NULL;
    if (status != 200) {
        print_server_error(status, body, len);
    } else {
        json_t *j = json_loadb(body, len, 0, NULL);
        const char *s = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
        if (s) id = strdup(s);
        else fprintf(stderr, CHAT_CMD ": GET %s lists no model (give --model-name)\n", path);
        json_decref(j);
    }
    free(body);
    return id;
}

bool chat_remote_open(const char *url, const char *model_name, const char *api_key, const cli_gen_opts *go,
                      const json_t *kwargs, chat_remote **out) {
    *out = NULL;
    chat_remote *r = calloc(1, sizeof *r);
    if (!r) return false;
    if (hc_parse_url(url, &r->url) != VLLM_OK) {
        fprintf(stderr, CHAT_CMD ": --url %s\n", vllm_last_error());
        free(r);
        return false;
    }
    /* http://HOST:PORT or http://HOST:PORT/v1 (the openai client's base URL) */
    char v1[1100];
    size_t bl = strlen(r->url.base);
    bool has_v1 = bl >= 3 && !strcmp(r->url.base + bl - 3, "/v1");
    snprintf(v1, sizeof v1, "%s%s", r->url.base, has_v1 ? "" : "/v1");
    snprintf(r->path, sizeof r->path, "%s/chat/completions", v1);
    const char *key = api_key ? api_key : getenv("OPENAI_API_KEY");
    if (key && (strpbrk(key, "\r\n") || strlen(key) > 1024)) {
        fprintf(stderr, CHAT_CMD ": the API key has a line break or is over 1024 bytes\n");
        free(r);
        return false;
    }
    snprintf(r->headers, sizeof r->headers, "Content-Type: application/json\r\n%s%s%s",
             key && *key ? "Authorization: Bearer " : "", key && *key ? key : "", key && *key ? "\r\n" : "");
    r->model = model_name ? strdup(model_name) : first_model(r, url, v1);
    r->fields = request_fields(go, kwargs);
    if (!r->model || !r->fields) {
        chat_remote_free(r);
        return false;
    }
    *out = r;
    return true;
}

void chat_remote_free(chat_remote *r) {
    if (!r) return;
    free(r->model);
    json_decref(r->fields);
    free(r);
}

/* One chunk of the stream: its delta's text written out (reasoning too: nothing is hidden) and the
 * content kept; false after an error event (printed). */
static bool take_chunk(const char *data, size_t n, chat_buf *b, bool *oom) {
    json_t *j = json_loadb(data, n, 0, NULL);
    if (!j) return true; /* not JSON: nothing to show */
    json_t *err = json_object_get(j, "error");
    if (err) {
        const char *msg = json_string_value(json_object_get(err, "message"));
        fprintf(stderr, "\n" CHAT_CMD ": the server reported: %s\n", msg ? msg : "an error");
        json_decref(j);
        return false;
    }
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    const char *keys[3] = {"reasoning", "reasoning_content", "content"};
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(delta, keys[k]);
        const char *s = json_string_value(v);
        if (!s || (k == 1 && json_object_get(delta, "reasoning"))) continue; /* the same text under two names */
        size_t len = json_string_length(v);
        fwrite(s, 1, len, stdout);
        fflush(stdout);
        if (k == 2 && !chat_buf_add(b, s, len)) *oom = true;
    }
    json_decref(j);
    return true;
}

chat_result chat_remote_reply(chat_remote *r, json_t *messages, char **reply) {
    *reply = NULL;
    json_t *body = json_copy(r->fields);
    if (!body) return CHAT_FATAL;
    json_object_set_new(body, "model", json_string(r->model));
    json_object_set(body, "messages", messages);
    json_object_set_new(body, "stream", json_true());
    char *req = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!req) return CHAT_FATAL;
    hc_conn *c = NULL;
    hc_response head;
    vllm_status st = hc_connect(r->url.host, r->url.port, REPLY_TIMEOUT_MS, &c);
    if (st == VLLM_OK) hc_set_cancel(c, chat_interrupted); /* Ctrl-C ends any wait on the server */
    if (st == VLLM_OK) st = hc_send(c, "POST", r->path, r->headers, req, strlen(req));
    if (st == VLLM_OK) st = hc_read_head(c, &head);
    free(req);
    if (st != VLLM_OK) {
        if (chat_interrupted()) fprintf(stderr, CHAT_CMD ": reply stopped (Ctrl-C)\n");
        else fprintf(stderr, CHAT_CMD ": %s\n", vllm_last_error());
        hc_close(c);
        return CHAT_SKIP;
    }
    if (head.status != 200) {
        char *err = NULL;
        size_t n = 0;
        chat_result res = CHAT_SKIP;
        if (hc_read_body(c, &err, &n) == VLLM_OK) {
            if (head.status == 400 && too_long(err, n)) res = CHAT_TOO_LONG; /* the caller trims and retries */
            else print_server_error(head.status, err, n);
        } else {
            fprintf(stderr, CHAT_CMD ": the server answered %d %s\n", head.status, head.reason);
        }
        free(err);
        hc_close(c);
        return res;
    }
    chat_buf b = {0};
    bool oom = !chat_buf_add(&b, "", 0), failed = false, stopped = false;
    for (;;) {
        if (chat_interrupted()) { /* closing the connection aborts the request on the server */
            stopped = true;
            break;
        }
        const char *data;
        size_t n;
        bool eof = false;
        if (hc_sse_next(c, &data, &n, &eof) != VLLM_OK) {
            if (chat_interrupted()) {
                stopped = true;
                break;
            }
            fprintf(stderr, "\n" CHAT_CMD ": the reply broke off: %s\n", vllm_last_error());
            failed = true;
            break;
        }
        if (eof || (n == 6 && !memcmp(data, "[DONE]", 6))) break;
        if (!take_chunk(data, n, &b, &oom)) {
            failed = true;
            break;
        }
    }
    hc_close(c);
    fputc('\n', stdout);
    fflush(stdout);
    if (stopped) fprintf(stderr, CHAT_CMD ": reply stopped (Ctrl-C)\n");
    if (oom) fprintf(stderr, CHAT_CMD ": out of memory\n");
    if (failed || oom) {
        free(b.s);
        return oom ? CHAT_FATAL : CHAT_SKIP;
    }
    *reply = b.s;
    return CHAT_OK;
}
