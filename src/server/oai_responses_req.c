/*
 * oai_responses_req.c: POST /v1/responses bodies (OpenAI Responses API) into chat requests.
 *
 * Follows vLLM (vllm/entrypoints/openai/responses/): protocol.py ResponsesRequest (fields, defaults,
 * check_tool_usage, validate_prompt, validate_background, extract_structured_outputs: text.format json_schema /
 * json_object, "Cannot specify both structured_outputs and text.format"; build_chat_params: reasoning.effort ->
 * chat_template_kwargs reasoning_effort and enable_thinking = effort != "none" unless the caller set it, a last
 * assistant or reasoning item in progress / incomplete continues that message), utils.py
 * construct_input_messages (instructions as the system message, the stored conversation of previous_response_id
 * without its system messages, then its output, then the input items: function_call items become assistant
 * tool_calls merged into the previous assistant message, function_call_output items tool messages, reasoning
 * items the assistant's reasoning, assistant messages their text) and convert_tool_responses_to_completions_format
 * (flat function tools nested under "function"; other tool types are not given to the template).
 * Where this differs: a previous response's function_call items are kept as the assistant's tool_calls (vLLM
 * drops them, so the next turn's function_call_output would follow no call); background is refused (400);
 * store is on by default within --responses-store-bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "server/oai_internal.h"
#include "server/responses_store.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

static const char *const INCLUDE_VALUES[] = {"code_interpreter_call.outputs",  "computer_call_output.output.image_url",
                                             "file_search_call.results",       "message.input_image.image_url",
                                             "message.output_text.logprobs",   "reasoning.encrypted_content"};

/* Fields copied to the chat request as they are (chat validates them). */
static const char *const PASS_THROUGH[] = {"model",           "temperature",         "top_p",
                                           "top_k",           "seed",                "stop",
                                           "logit_bias",      "repetition_penalty",  "presence_penalty",
                                           "frequency_penalty", "ignore_eos",        "skip_special_tokens",
                                           "include_stop_str_in_output", "structured_outputs", "include_reasoning",
                                           "parallel_tool_calls", "min_p",           "stream",
                                           "request_id",      "priority",            "cache_salt"};

/* The text of a content value: a string, or the text / input_text / output_text parts joined. */
static char *content_text(const json_t *c) {
    if (json_is_string(c)) return strdup(json_string_value(c));
    oai_buf b = {0};
    oai_buf_put(&b, "", 0);
    size_t i;
    json_t *p;
    if (json_is_array(c)) json_array_foreach(c, i, p) {
            json_t *t = json_object_get(p, "text");
            if (json_is_string(t)) oai_buf_put(&b, json_string_value(t), json_string_length(t));
        }
    return oai_buf_take(&b, NULL);
}

/* The last message of msgs when it is an assistant message, else NULL. */
static json_t *last_assistant(json_t *msgs) {
    size_t n = json_array_size(msgs);
    json_t *m = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = json_string_value(json_object_get(m, "role"));
    return role && !strcmp(role, "assistant") ? m : NULL;
}

static json_t *assistant_for(json_t *msgs, const char *key) {
    json_t *m = last_assistant(msgs);
    if (m && !json_object_get(m, key)) return m;
    m = json_object();
    if (m) {
        json_object_set_new(m, "role", json_string("assistant"));
        json_array_append_new(msgs, m);
    }
    return m;
}

/* A function_call item -> a tool call of the previous assistant message (or of a new one). */
static vllm_status add_function_call(json_t *msgs, const json_t *item, const char *param, oai_error *err) {
    const char *name = json_string_value(json_object_get(item, "name"));
    const char *args = json_string_value(json_object_get(item, "arguments"));
    const char *call_id = json_string_value(json_object_get(item, "call_id"));
    if (!name || !args || !call_id)
        return BAD(param, "%s: a function_call item needs string \"call_id\", \"name\" and \"arguments\"", param);
    json_t *m = last_assistant(msgs);
    if (!m && !(m = assistant_for(msgs, "tool_calls"))) return NOMEM();
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(m, "tool_calls", calls);
    }
    json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", call_id, "type", "function", "function", "name", name,
                             "arguments", args);
    if (!calls || !call || json_array_append_new(calls, call)) return NOMEM();
    return VLLM_OK;
}

static vllm_status add_item(json_t *msgs, const json_t *item, size_t i, oai_error *err) {
    char param[48];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(item)) return oai_type_error(err, param, "an input item object", item);
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *role = json_string_value(json_object_get(item, "role"));
    if (!type) type = role ? "message" : "";
    if (!strcmp(type, "function_call")) return add_function_call(msgs, item, param, err);
    if (!strcmp(type, "function_call_output")) {
        const char *call_id = json_string_value(json_object_get(item, "call_id"));
        json_t *out = json_object_get(item, "output");
        if (!call_id || !(json_is_string(out) || json_is_array(out)))
            return BAD(param, "%s: a function_call_output item needs a string \"call_id\" and an \"output\"", param);
        char *text = content_text(out);
        json_t *m = text ? json_pack("{s:s, s:s, s:s}", "role", "tool", "content", text, "tool_call_id", call_id) : NULL;
        free(text);
        if (!m || json_array_append_new(msgs, m)) return NOMEM();
        return VLLM_OK;
    }
    if (!strcmp(type, "reasoning")) {
        json_t *enc = json_object_get(item, "encrypted_content");
        if (enc && !json_is_null(enc)) return BAD(param, "Encrypted content is not supported.");
        json_t *parts = json_object_get(item, "content");
        if (!json_array_size(parts)) parts = json_object_get(item, "summary");
        json_t *first = json_array_get(parts, 0);
        const char *text = json_string_value(json_object_get(first, "text"));
        json_t *m = assistant_for(msgs, "reasoning");
        if (!m) return NOMEM();
        json_object_set_new(m, "reasoning", json_string(text ? text : ""));
        return VLLM_OK;
    }
    if (strcmp(type, "message"))
        return BAD(param, "%s: input items of type '%s' are not supported (message, function_call, "
                          "function_call_output and reasoning are)",
                   param, type);
    json_t *content = json_object_get(item, "content");
    if (!role) return BAD(param, "%s: a message item needs a \"role\"", param);
    if (!(json_is_string(content) || json_is_array(content)))
        return BAD(param, "%s.content: Input should be a string or a list of content parts", param);
    if (!strcmp(role, "assistant")) {
        /* vLLM: the first part's text, merged into the previous assistant message when it has no content yet */
        char *text = NULL;
        if (json_is_string(content)) text = strdup(json_string_value(content));
        else {
            const char *t = json_string_value(json_object_get(json_array_get(content, 0), "text"));
            text = strdup(t ? t : "");
        }
        json_t *m = text ? assistant_for(msgs, "content") : NULL;
        if (m) json_object_set_new(m, "content", json_string(text));
        free(text);
        return m ? VLLM_OK : NOMEM();
    }
    json_t *m = json_pack("{s:s, s:O}", "role", role, "content", content);
    if (!m || json_array_append_new(msgs, m)) return NOMEM();
    return VLLM_OK;
}

/* The stored conversation of previous_response_id: its messages without system ones, then its output. */
static vllm_status add_previous(const oai_server_ctx *ctx, const char *id, json_t *msgs, oai_error *err) {
    char *resp_text = NULL, *msgs_text = NULL;
    if (!responses_store_get(ctx->responses_store, id, &resp_text, &msgs_text)) {
        oai_error_set(err, 404, "response_id", "Response with id '%s' not found.", id);
        return VLLM_ERR_NOT_FOUND;
    }
    /* a chain of turns grows the stored conversation past any one body: bounded as a prompt's text is */
    const size_t cap = ctx->max_tokenize_bytes ? ctx->max_tokenize_bytes : OAI_DEFAULT_MAX_TOKENIZE_BYTES,
                 have = strlen(resp_text) + strlen(msgs_text);
    if (have > cap) {
        free(resp_text), free(msgs_text);
        oai_error_set(err, 400, "previous_response_id",
                      "the conversation of response '%s' holds %zu bytes, more than the %zu a prompt may have "
                      "(--max-tokenize-bytes): start a new conversation",
                      id, have, cap);
        return VLLM_ERR_INVALID_ARG;
    }
    json_t *prev = json_loads(msgs_text, 0, NULL), *resp = json_loads(resp_text, 0, NULL);
    free(resp_text), free(msgs_text);
    vllm_status st = prev && resp ? VLLM_OK : NOMEM();
    size_t i;
    json_t *m;
    if (st == VLLM_OK) json_array_foreach(prev, i, m) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (role && !strcmp(role, "system")) continue; /* instructions do not carry over */
            json_array_append(msgs, m);
        }
    json_t *output = json_object_get(resp, "output");
    if (st == VLLM_OK) json_array_foreach(output, i, m) {
            const char *type = json_string_value(json_object_get(m, "type"));
            if (!type) continue;
            if (!strcmp(type, "message")) {
                json_t *parts = json_object_get(m, "content");
                size_t k;
                json_t *p;
                json_array_foreach(parts, k, p) {
                    const char *t = json_string_value(json_object_get(p, "text"));
                    json_t *a = json_pack("{s:s, s:s}", "role", "assistant", "content", t ? t : "");
                    if (!a || json_array_append_new(msgs, a)) st = NOMEM();
                }
                if (st != VLLM_OK) break;
            } else if (!strcmp(type, "function_call") && (st = add_function_call(msgs, m, "previous_response_id", err))) {
                break;
            }
        }
    json_decref(prev), json_decref(resp);
    return st;
}

/* Flat Responses function tools -> chat tools (others are not given to the template, as vLLM). */
static vllm_status convert_tools(const json_t *tools, json_t *chat, oai_error *err) {
    if (!tools) return VLLM_OK;
    if (!json_is_array(tools)) return oai_type_error(err, "tools", "a list of tools", tools);
    json_t *out = json_array();
    if (!out) return NOMEM();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (!json_is_object(t)) {
            json_decref(out);
            char param[32];
            snprintf(param, sizeof param, "tools[%zu]", i);
            return oai_type_error(err, param, "a tool object", t);
        }
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function")) continue;
        json_t *fn = json_deep_copy(t);
        if (fn) json_object_del(fn, "type");
        json_t *c = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
        if (!c || json_array_append_new(out, c)) {
            json_decref(out);
            return NOMEM();
        }
    }
    if (json_array_size(out)) json_object_set_new(chat, "tools", out);
    else json_decref(out);
    return VLLM_OK;
}

/* tool_choice, as check_tool_usage: without tools auto / none are dropped, required / named are 400s. */
static vllm_status convert_tool_choice(const json_t *body, json_t *chat, oai_error *err) {
    json_t *tc = oai_field(body, "tool_choice");
    bool has_tools = json_array_size(json_object_get(chat, "tools")) > 0;
    if (!tc) return VLLM_OK;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "auto") && strcmp(s, "none") && strcmp(s, "required"))
            return BAD("tool_choice", "tool_choice: Input should be 'none', 'auto' or 'required'");
        if (!has_tools) {
            if (!strcmp(s, "required"))
                return BAD("tool_choice", "Tool choice 'required' must be specified with 'tools' parameter.");
            return VLLM_OK;
        }
        json_object_set(chat, "tool_choice", tc);
        return VLLM_OK;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    const char *name = json_string_value(json_object_get(tc, "name"));
    if (!json_is_object(tc) || !type) return oai_type_error(err, "tool_choice", "a string or a tool choice object", tc);
    if (!strcmp(type, "allowed_tools")) {
        const char *mode = json_string_value(json_object_get(tc, "mode"));
        if (has_tools) json_object_set_new(chat, "tool_choice", json_string(mode && !strcmp(mode, "required") ? "required" : "auto"));
        return VLLM_OK;
    }
    if (strcmp(type, "function"))
        return BAD("tool_choice", "tool_choice of type '%s' is not supported (function tools only)", type);
    bool found = false;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(chat, "tools"), i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && name && !strcmp(n, name)) found = true;
    }
    if (!found) return BAD("tool_choice", "Tool choice 'function' not found in 'tools' parameter.");
    json_t *named = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    if (!named) return NOMEM();
    json_object_set_new(chat, "tool_choice", named);
    return VLLM_OK;
}

/* text.format -> response_format; reasoning.effort -> chat_template_kwargs; include logprobs -> logprobs. */
static vllm_status convert_options(const json_t *body, json_t *chat, oai_error *err) {
    json_t *text = oai_field(body, "text");
    json_t *format = text ? oai_field(text, "format") : NULL;
    if (text && !json_is_object(text)) return oai_type_error(err, "text", "an object", text);
    if (format) {
        const char *type = json_string_value(json_object_get(format, "type"));
        if (!type) return BAD("text.format", "text.format: a format needs a string \"type\"");
        bool constraint = !strcmp(type, "json_object") || !strcmp(type, "json_schema");
        if (constraint && oai_field(body, "structured_outputs"))
            return BAD("structured_outputs", "Cannot specify both structured_outputs and text.format");
        if (!strcmp(type, "json_object")) {
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        } else if (!strcmp(type, "json_schema")) {
            json_t *schema = json_object_get(format, "schema");
            if (!schema) return BAD("text.format.schema", "text.format.schema: Field required");
            const char *name = json_string_value(json_object_get(format, "name"));
            json_t *js = json_pack("{s:s, s:O}", "name", name ? name : "response", "schema", schema);
            json_t *strict = json_object_get(format, "strict");
            if (js && json_is_boolean(strict)) json_object_set(js, "strict", strict);
            json_t *rf = js ? json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js) : NULL;
            if (!rf) return NOMEM();
            json_object_set_new(chat, "response_format", rf);
        } else if (strcmp(type, "text")) {
            return BAD("text.format", "text.format: Input should be 'text', 'json_object' or 'json_schema', got '%s'",
                       type);
        }
    }
    json_t *kwargs = oai_field(body, "chat_template_kwargs");
    if (kwargs && !json_is_object(kwargs)) return oai_type_error(err, "chat_template_kwargs", "an object", kwargs);
    json_t *ck = kwargs ? json_deep_copy(kwargs) : json_object();
    if (!ck) return NOMEM();
    json_t *reasoning = oai_field(body, "reasoning");
    if (reasoning && !json_is_object(reasoning)) {
        json_decref(ck);
        return oai_type_error(err, "reasoning", "an object", reasoning);
    }
    json_t *effort = reasoning ? oai_field(reasoning, "effort") : NULL;
    if (effort) {
        if (!json_is_string(effort)) {
            json_decref(ck);
            return oai_type_error(err, "reasoning.effort", "a string", effort);
        }
        json_object_set(chat, "reasoning_effort", effort);
        if (!json_object_get(ck, "enable_thinking"))
            json_object_set_new(ck, "enable_thinking", json_boolean(strcmp(json_string_value(effort), "none") != 0));
    }
    if (json_object_size(ck)) json_object_set_new(chat, "chat_template_kwargs", ck);
    else json_decref(ck);

    json_t *include = oai_field(body, "include");
    if (include && !json_is_array(include)) return oai_type_error(err, "include", "a list", include);
    bool logprobs = false;
    size_t i;
    json_t *v;
    json_array_foreach(include, i, v) {
        const char *s = json_string_value(v);
        bool known = false;
        for (size_t k = 0; s && k < sizeof INCLUDE_VALUES / sizeof *INCLUDE_VALUES; k++) known |= !strcmp(s, INCLUDE_VALUES[k]);
        if (!known) return BAD("include", "include[%zu]: Input should be one of the documented include values", i);
        if (!strcmp(s, "message.output_text.logprobs")) logprobs = true;
    }
    if (logprobs) {
        json_object_set_new(chat, "logprobs", json_true());
        json_t *top = oai_field(body, "top_logprobs");
        json_object_set_new(chat, "top_logprobs", top ? json_incref(top) : json_integer(0));
    }
    const char *trunc = json_string_value(oai_field(body, "truncation"));
    if (trunc && strcmp(trunc, "auto") && strcmp(trunc, "disabled"))
        return BAD("truncation", "truncation: Input should be 'auto' or 'disabled'");
    if (trunc && !strcmp(trunc, "auto")) json_object_set_new(chat, "truncate_prompt_tokens", json_integer(-1));
    return VLLM_OK;
}

/* A last assistant message or reasoning item still in progress / incomplete is continued (vLLM's
 * should_continue_final_message). */
static bool continue_final(const json_t *input) {
    size_t n = json_array_size(input);
    json_t *last = n ? json_array_get(input, n - 1) : NULL;
    const char *type = json_string_value(json_object_get(last, "type"));
    const char *role = json_string_value(json_object_get(last, "role"));
    const char *status = json_string_value(json_object_get(last, "status"));
    bool kind = (type && !strcmp(type, "reasoning")) || (role && !strcmp(role, "assistant"));
    return kind && status && (!strcmp(status, "in_progress") || !strcmp(status, "incomplete"));
}

static vllm_status to_chat(const oai_server_ctx *ctx, const json_t *body, json_t *chat, void *store_out,
                           oai_error *err) {
    bool *store = store_out;
    vllm_status st;
    if (oai_field(body, "prompt")) return BAD("prompt", "prompt template is not supported");
    bool background = false;
    *store = true;
    if ((st = oai_get_bool(body, "background", &background, err)) || (st = oai_get_bool(body, "store", store, err)))
        return st;
    if (background && !*store) return BAD("background", "background can only be used when `store` is true");
    if (background)
        return BAD("background", "background mode is not supported by this server: send the request without "
                                 "\"background\" (stream it to see progress)");
    if (oai_field(body, "previous_input_messages"))
        return BAD("previous_input_messages", "previous_input_messages is not supported: use previous_response_id");
    for (size_t i = 0; i < sizeof PASS_THROUGH / sizeof *PASS_THROUGH; i++) {
        json_t *v = json_object_get(body, PASS_THROUGH[i]);
        if (v) json_object_set(chat, PASS_THROUGH[i], v);
    }
    json_t *mot = oai_field(body, "max_output_tokens");
    if (mot) json_object_set(chat, "max_tokens", mot);

    json_t *msgs = json_array();
    if (!msgs) return NOMEM();
    json_object_set_new(chat, "messages", msgs);
    json_t *instr = oai_field(body, "instructions");
    if (instr && !json_is_string(instr)) return oai_type_error(err, "instructions", "a string", instr);
    if (instr && json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", instr))) return NOMEM();
    const char *prev = NULL;
    if ((st = oai_get_string(body, "previous_response_id", &prev, err))) return st;
    if (prev && (st = add_previous(ctx, prev, msgs, err))) return st;
    json_t *input = oai_field(body, "input");
    if (!input) return BAD("input", "input: Field required");
    if (json_is_string(input)) {
        if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input))) return NOMEM();
    } else if (json_is_array(input)) {
        size_t i;
        json_t *item;
        json_array_foreach(input, i, item) if ((st = add_item(msgs, item, i, err))) return st;
        if (continue_final(input)) {
            json_object_set_new(chat, "continue_final_message", json_true());
            json_object_set_new(chat, "add_generation_prompt", json_false());
        }
    } else {
        return oai_type_error(err, "input", "a string or a list of input items", input);
    }
    if ((st = convert_tools(oai_field(body, "tools"), chat, err)) || (st = convert_tool_choice(body, chat, err)) ||
        (st = convert_options(body, chat, err)))
        return st;
    return VLLM_OK;
}

/* chat's names for the fields the caller named otherwise */
static void rename_param(oai_error *err) {
    if (!strcmp(err->param, "max_tokens") || !strcmp(err->param, "max_completion_tokens"))
        snprintf(err->param, sizeof err->param, "max_output_tokens");
    else if (!strcmp(err->param, "messages") || !strncmp(err->param, "messages[", 9) ||
             !strcmp(err->param, "input_tokens"))
        snprintf(err->param, sizeof err->param, "input");
}

vllm_status oai_parse_responses(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                                oai_error *err) {
    *out = NULL;
    oai_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    json_t *root, *chat;
    bool store = true;
    vllm_status st = oai_translate_body(ctx, body, len, to_chat, &store, &root, &chat, err);
    if (st == VLLM_OK) st = oai_parse_chat_body(ctx, chat, OAI_API_RESPONSES, out, err);
    if (st == VLLM_OK) {
        (*out)->api_body = json_incref(root);
        (*out)->api_messages = json_incref(json_object_get(chat, "messages"));
        (*out)->api_store = store && ctx->responses_store;
    } else if (err->status == 400) {
        rename_param(err);
    }
    json_decref(root), json_decref(chat);
    return st;
}
