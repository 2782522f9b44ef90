/*
 * oai_anthropic_req.c: POST /v1/messages and /v1/messages/count_tokens bodies (Anthropic Messages API) into chat
 * requests, and Anthropic's error shape.
 *
 * Follows vLLM's vllm/entrypoints/anthropic/ (protocol.py AnthropicMessagesRequest: model and max_tokens > 0
 * required, content block types; serving.py _convert_anthropic_to_openai_request: the system prompt (a string or
 * text blocks, plus role "system" messages) joined with "" into one system message, text blocks dropped when
 * they start with x-anthropic-billing-header; tool_result blocks of a user message become tool messages before
 * it (list content: the text items joined with "\n"), of an assistant message the text "Tool result: ...";
 * tool_use blocks the assistant's tool_calls (arguments = the input as JSON text); thinking blocks its
 * reasoning, redacted_thinking dropped; a lone text part collapses to a string; tool_choice auto -> "auto", any
 * -> "required", none -> "none", tool -> the named function; tools with input_schema ("type": "object" added);
 * stop_sequences -> stop; output_config.format -> response_format json_schema, effort -> reasoning_effort;
 * count_tokens renders the same prompt) and Anthropic's API reference (errors
 * {"type":"error","error":{"type","message"}} with the documented error types).
 * Where this differs: thinking {"type":"disabled"} / {"type":"enabled"} sets chat_template_kwargs.enable_thinking
 * and tool_choice.disable_parallel_tool_use sets parallel_tool_calls false (vLLM ignores both); tools without
 * tool_choice are rendered but the reply is only parsed for calls with --enable-auto-tool-choice (vLLM answers
 * 400); images are refused (the server is text-only).
 */
#include <stdlib.h>
#include <string.h>

#include "server/oai_internal.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

static const char BILLING[] = "x-anthropic-billing-header";

char *oai_error_anthropic_json(const oai_error *e) {
    const char *type = e->status == 400   ? "invalid_request_error"
                       : e->status == 401 ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 || e->status == 529 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    /* (oai_json_str: a message that quotes the client may hold invalid UTF-8, which json_pack's "s" refuses) */
    json_t *o = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type, "message",
                          oai_json_str(e->message, strlen(e->message)));
    char *s = o ? oai_json_dump(o, NULL) : NULL;
    json_decref(o);
    return s;
}

/* The text of a tool_result's content: a string, or its text items joined with "\n". */
static vllm_status tool_result_text(const json_t *c, const char *param, char **out, oai_error *err) {
    if (!c || json_is_null(c)) return (*out = strdup("")) ? VLLM_OK : NOMEM();
    if (json_is_string(c)) return (*out = strdup(json_string_value(c))) ? VLLM_OK : NOMEM();
    if (!json_is_array(c)) return oai_type_error(err, param, "a string or a list of content blocks", c);
    oai_buf b = {0};
    oai_buf_put(&b, "", 0);
    size_t i, n = 0;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (type && !strcmp(type, "text")) {
            const char *t = json_string_value(json_object_get(p, "text"));
            if (n++) oai_buf_puts(&b, "\n");
            oai_buf_puts(&b, t ? t : "");
        } else if (type && !strcmp(type, "image")) {
            oai_buf_free(&b);
            return BAD(param, "%s[%zu]: image blocks are not supported: this server serves a text-only model", param, i);
        }
    }
    *out = oai_buf_take(&b, NULL);
    return *out ? VLLM_OK : NOMEM();
}

/* One Anthropic message -> chat messages appended to msgs (tool results first). */
static vllm_status add_message(json_t *msgs, const json_t *m, size_t mi, oai_buf *system, oai_error *err) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu]", mi);
    if (!json_is_object(m)) return oai_type_error(err, param, "a message object", m);
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *content = json_object_get(m, "content");
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system")))
        return BAD(param, "%s.role: Input should be 'user' or 'assistant'", param);
    if (!(json_is_string(content) || json_is_array(content)))
        return BAD(param, "%s.content: Input should be a string or a list of content blocks", param);
    if (!strcmp(role, "system")) { /* vLLM extension: joined into the system prompt */
        if (json_is_string(content)) oai_buf_puts(system, json_string_value(content));
        size_t i;
        json_t *b;
        json_array_foreach(content, i, b) {
            const char *t = json_string_value(json_object_get(b, "text"));
            if (t && strncmp(t, BILLING, sizeof BILLING - 1)) oai_buf_puts(system, t);
        }
        return VLLM_OK;
    }
    bool user = !strcmp(role, "user");
    json_t *out = json_pack("{s:s}", "role", role);
    if (!out) return NOMEM();
    if (json_is_string(content)) {
        json_object_set(out, "content", content);
        return json_array_append_new(msgs, out) ? NOMEM() : VLLM_OK;
    }
    json_t *parts = json_array(), *calls = json_array();
    oai_buf reasoning = {0};
    vllm_status st = parts && calls ? VLLM_OK : NOMEM();
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        if (st != VLLM_OK) break;
        char bp[80];
        snprintf(bp, sizeof bp, "%s.content[%zu]", param, i);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type) {
            st = BAD(bp, "%s: a content block needs a string \"type\"", bp);
        } else if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) st = BAD(bp, "%s.text: Input should be a valid string", bp);
            else if (json_string_length(t)) json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", t));
        } else if (!strcmp(type, "thinking")) {
            const char *t = json_string_value(json_object_get(b, "thinking"));
            oai_buf_puts(&reasoning, t ? t : "");
            if (!reasoning.data) oai_buf_put(&reasoning, "", 0);
        } else if (!strcmp(type, "redacted_thinking")) {
            continue;
        } else if (!strcmp(type, "tool_use")) {
            const char *id = json_string_value(json_object_get(b, "id"));
            const char *name = json_string_value(json_object_get(b, "name"));
            json_t *input = json_object_get(b, "input");
            if (!name) {
                st = BAD(bp, "%s.name: Field required", bp);
                continue;
            }
            char *args = json_is_object(input) ? json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
            json_t *call = args ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id ? id : "", "type", "function",
                                            "function", "name", name, "arguments", args)
                                : NULL;
            free(args);
            if (!call || json_array_append_new(calls, call)) st = NOMEM();
        } else if (!strcmp(type, "tool_result")) {
            char *text = NULL;
            if ((st = tool_result_text(json_object_get(b, "content"), bp, &text, err))) continue;
            if (user) {
                const char *id = json_string_value(json_object_get(b, "tool_use_id"));
                json_t *tm = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id ? id : "", "content", text);
                if (!tm || json_array_append_new(msgs, tm)) st = NOMEM();
            } else {
                size_t n = strlen(text) + 16;
                char *t = malloc(n);
                if (t) snprintf(t, n, "Tool result: %s", text);
                if (!t || json_array_append_new(parts, json_pack("{s:s, s:s}", "type", "text", "text", t))) st = NOMEM();
                free(t);
            }
            free(text);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            st = BAD(bp, "%s: %s blocks are not supported: this server serves a text-only model", bp, type);
        } else {
            st = BAD(bp, "%s: unknown content block type '%s'", bp, type);
        }
    }
    if (st == VLLM_OK && reasoning.oom) st = NOMEM();
    if (st == VLLM_OK) {
        size_t np = json_array_size(parts);
        if (np == 1) json_object_set(out, "content", json_object_get(json_array_get(parts, 0), "text"));
        else if (np > 1) json_object_set(out, "content", parts);
        if (json_array_size(calls)) json_object_set(out, "tool_calls", calls);
        if (reasoning.data) json_object_set_new(out, "reasoning", json_string(reasoning.data));
        bool empty = np == 0 && !json_array_size(calls) && !reasoning.data;
        if (user && empty) { /* only tool results: dropped */
        } else {
            if (empty) json_object_set_new(out, "content", json_string(""));
            if (json_array_append(msgs, out)) st = NOMEM();
        }
    }
    json_decref(out), json_decref(parts), json_decref(calls);
    oai_buf_free(&reasoning);
    return st;
}

static vllm_status convert_tools(const json_t *body, json_t *chat, oai_error *err) {
    json_t *tools = oai_field(body, "tools"), *tc = oai_field(body, "tool_choice");
    if (tools && !json_is_array(tools)) return oai_type_error(err, "tools", "a list of tools", tools);
    if (json_array_size(tools)) {
        json_t *out = json_array();
        if (!out) return NOMEM();
        json_object_set_new(chat, "tools", out);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            char param[32];
            snprintf(param, sizeof param, "tools[%zu]", i);
            const char *name = json_string_value(json_object_get(t, "name"));
            json_t *schema = json_object_get(t, "input_schema");
            if (!name) return BAD(param, "%s.name: Field required", param);
            if (schema && !json_is_object(schema)) return oai_type_error(err, param, "an input_schema object", schema);
            json_t *params = schema ? json_deep_copy(schema) : json_object();
            if (params && !json_object_get(params, "type")) json_object_set_new(params, "type", json_string("object"));
            json_t *fn = params ? json_pack("{s:s, s:o}", "name", name, "parameters", params) : NULL;
            json_t *desc = json_object_get(t, "description");
            if (fn && json_is_string(desc)) json_object_set(fn, "description", desc);
            json_t *c = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
            if (!c || json_array_append_new(out, c)) return NOMEM();
        }
    }
    if (!tc) return VLLM_OK;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type) return oai_type_error(err, "tool_choice", "a tool choice object", tc);
    if (!strcmp(type, "tool")) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name) return BAD("tool_choice", "tool_choice.name is required when type is 'tool'");
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name));
        if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
            json_object_set_new(chat, "parallel_tool_calls", json_false());
    } else if (!strcmp(type, "auto") || !strcmp(type, "any") || !strcmp(type, "none")) {
        json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
        if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
        if (!json_array_size(tools)) {
            if (!strcmp(type, "any")) return BAD("tool_choice", "tool_choice 'any' needs tools");
            return VLLM_OK;
        }
        json_object_set_new(chat, "tool_choice", json_string(!strcmp(type, "any") ? "required" : type));
    } else {
        return BAD("tool_choice", "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'");
    }
    return VLLM_OK;
}

/* The chat body of an Anthropic request (count: count_tokens, no max_tokens). */
static vllm_status to_chat(const json_t *body, bool count, json_t *chat, oai_error *err);
static vllm_status messages_to_chat(const oai_server_ctx *ctx, const json_t *body, json_t *chat, void *arg,
                                    oai_error *err) {
    (void)ctx;
    return to_chat(body, *(const bool *)arg, chat, err);
}

static vllm_status to_chat(const json_t *body, bool count, json_t *chat, oai_error *err) {
    vllm_status st;
    json_t *model = oai_field(body, "model");
    if (!json_is_string(model) || !json_string_length(model)) return BAD("model", "Model is required");
    json_object_set(chat, "model", model);
    if (!count) {
        long long mt = 0;
        bool have = false;
        if ((st = oai_get_int64(body, "max_tokens", &mt, &have, err))) return st;
        if (!have) return BAD("max_tokens", "max_tokens: Field required");
        if (mt <= 0) return BAD("max_tokens", "max_tokens must be positive");
        json_object_set_new(chat, "max_tokens", json_integer(mt));
        static const char *const pass[] = {"temperature", "top_p", "top_k", "stream"};
        for (size_t i = 0; i < sizeof pass / sizeof *pass; i++) {
            json_t *v = json_object_get(body, pass[i]);
            if (v) json_object_set(chat, pass[i], v);
        }
        json_t *stop = oai_field(body, "stop_sequences");
        if (stop && !json_is_array(stop)) return oai_type_error(err, "stop_sequences", "a list of strings", stop);
        if (json_array_size(stop)) json_object_set(chat, "stop", stop);
        /* vLLM extensions kept on this endpoint too */
        static const char *const ext[] = {"seed", "structured_outputs", "repetition_penalty", "min_p", "ignore_eos"};
        for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
            json_t *v = json_object_get(body, ext[i]);
            if (v) json_object_set(chat, ext[i], v);
        }
    }
    oai_buf system = {0};
    oai_buf_put(&system, "", 0);
    json_t *sys = oai_field(body, "system");
    if (sys && !(json_is_string(sys) || json_is_array(sys))) {
        oai_buf_free(&system);
        return oai_type_error(err, "system", "a string or a list of text blocks", sys);
    }
    if (json_is_string(sys)) oai_buf_puts(&system, json_string_value(sys));
    size_t i;
    json_t *m;
    json_array_foreach(sys, i, m) {
        const char *t = json_string_value(json_object_get(m, "text"));
        if (t && strncmp(t, BILLING, sizeof BILLING - 1)) oai_buf_puts(&system, t);
    }
    json_t *msgs = json_array(), *in = oai_field(body, "messages");
    st = msgs ? VLLM_OK : NOMEM();
    if (st == VLLM_OK && !in) st = BAD("messages", "messages: Field required");
    if (st == VLLM_OK && !json_is_array(in)) st = oai_type_error(err, "messages", "a list of messages", in);
    json_array_foreach(in, i, m) if (st == VLLM_OK) st = add_message(msgs, m, i, &system, err);
    if (st == VLLM_OK && system.oom) st = NOMEM();
    if (st == VLLM_OK && system.len) {
        json_t *sm = json_pack("{s:s, s:s}", "role", "system", "content", system.data);
        if (!sm || json_array_insert_new(msgs, 0, sm)) st = NOMEM();
    }
    oai_buf_free(&system);
    if (st != VLLM_OK) {
        json_decref(msgs);
        return st;
    }
    json_object_set_new(chat, "messages", msgs);
    if ((st = convert_tools(body, chat, err))) return st;

    json_t *kwargs = oai_field(body, "chat_template_kwargs");
    if (kwargs && !json_is_object(kwargs)) return oai_type_error(err, "chat_template_kwargs", "an object", kwargs);
    json_t *ck = kwargs ? json_deep_copy(kwargs) : json_object();
    if (!ck) return NOMEM();
    json_t *thinking = oai_field(body, "thinking");
    const char *ttype = json_string_value(json_object_get(thinking, "type"));
    if (ttype && !json_object_get(ck, "enable_thinking"))
        json_object_set_new(ck, "enable_thinking", json_boolean(strcmp(ttype, "disabled") != 0));
    json_t *oc = oai_field(body, "output_config");
    const char *effort = json_string_value(json_object_get(oc, "effort"));
    if (effort) json_object_set_new(ck, "reasoning_effort", json_string(effort));
    if (json_object_size(ck)) json_object_set_new(chat, "chat_template_kwargs", ck);
    else json_decref(ck);
    json_t *format = json_object_get(oc, "format");
    if (format && !count) {
        const char *ft = json_string_value(json_object_get(format, "type"));
        json_t *schema = json_object_get(format, "schema");
        if (!ft || strcmp(ft, "json_schema") || !json_is_object(schema))
            return BAD("output_config.format", "output_config.format: a {\"type\": \"json_schema\", \"schema\": {...}} "
                                               "object is expected");
        json_t *rf = json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name", "json_schema",
                               "schema", schema);
        if (!rf) return NOMEM();
        json_object_set_new(chat, "response_format", rf);
    }
    return VLLM_OK;
}

vllm_status oai_parse_messages(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                               oai_error *err) {
    *out = NULL;
    oai_error scratch;
    if (!err) err = &scratch;
    json_t *root, *chat;
    const bool count = false;
    vllm_status st = oai_translate_body(ctx, body, len, messages_to_chat, (void *)&count, &root, &chat, err);
    if (st == VLLM_OK) st = oai_parse_chat_body(ctx, chat, OAI_API_ANTHROPIC, out, err);
    if (st == VLLM_OK) (*out)->api_body = json_incref(root);
    json_decref(root), json_decref(chat);
    return st;
}

vllm_status oai_count_tokens_request(const oai_server_ctx *ctx, const char *body, size_t len, char **resp,
                                     oai_error *err) {
    *resp = NULL;
    oai_error scratch;
    if (!err) err = &scratch;
    json_t *root, *chat;
    const bool count = true;
    vllm_status st = oai_translate_body(ctx, body, len, messages_to_chat, (void *)&count, &root, &chat, err);
    json_decref(root);
    if (st == VLLM_OK && !oai_check_model(ctx, json_string_value(json_object_get(chat, "model")), err))
        st = VLLM_ERR_NOT_FOUND;
    /* the prompt as /v1/messages renders it, counted by /tokenize's code */
    char *text = NULL, *tok = NULL;
    if (st == VLLM_OK) {
        json_object_set_new(chat, "add_generation_prompt", json_true());
        json_object_del(chat, "tool_choice");
        text = json_dumps(chat, JSON_COMPACT);
        if (!text) st = NOMEM();
    }
    if (st == VLLM_OK) st = oai_tokenize_request(ctx, text, strlen(text), &tok, err);
    json_t *t = tok ? json_loads(tok, 0, NULL) : NULL;
    if (st == VLLM_OK) {
        json_t *o = t ? json_pack("{s:O}", "input_tokens", json_object_get(t, "count")) : NULL;
        if (!o || !(*resp = oai_json_dump(o, NULL))) st = NOMEM();
        json_decref(o);
    }
    json_decref(t);
    free(text), free(tok);
    json_decref(chat);
    return st;
}
