/*
 * oai_chat.c: chat messages -> prompt text: validation of messages, tools,
 * tool_choice, response_format and the template options of a
 * /v1/chat/completions (or /tokenize) body, and the render through the
 * model's chat template.
 *
 * Semantics: vLLM's chat_completion/protocol.py (ChatCompletionRequest:
 * check_tool_usage, check_generation_prompt, build_chat_params),
 * chat_utils.py (_parse_chat_message_content: text parts joined with "\n"
 * for string-format templates, null content -> "", name / tool_call_id /
 * tool_calls / reasoning copied to the conversation, assistant tool-call
 * arguments parsed from JSON strings into objects for the template) and
 * transformers' apply_chat_template (continue_final_message cuts the render
 * after the final message's content).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/oai_internal.h"
#include "template/chat_template.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};

/* Content parts of these types carry media this text-only server cannot take. */
static const char *const media_parts[] = {"image_url",  "image_pil",   "image_embeds", "input_image", "audio_url",
                                          "input_audio", "audio_embeds", "video_url",   "file"};

static bool in_list(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i])) return true;
    return false;
}

/* A message's content as one string: a string as is, null -> "" (assistant
 * messages carrying tool_calls, as OpenAI allows), a list of text parts
 * joined with "\n" (vLLM, string content format). */
static vllm_status content_text(const json_t *content, const char *role, size_t mi, oai_buf *out, oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", mi);
    if (!content || json_is_null(content)) {
        if (strcmp(role, "assistant") != 0) return BAD(param, "%s: content is required for role '%s'", param, role);
        oai_buf_put(out, "", 0);
        return VLLM_OK;
    }
    if (json_is_string(content)) {
        oai_buf_put(out, json_string_value(content), json_string_length(content));
        return VLLM_OK;
    }
    if (!json_is_array(content)) return oai_type_error(err, param, "a string or a list of content parts", content);
    size_t pi;
    json_t *part;
    bool first = true;
    oai_buf_put(out, "", 0);
    json_array_foreach(content, pi, part) {
        const char *text = NULL;
        size_t text_len = 0;
        if (json_is_string(part)) {
            text = json_string_value(part), text_len = json_string_length(part);
        } else if (json_is_object(part)) {
            json_t *type = json_object_get(part, "type");
            const char *t = json_is_string(type) ? json_string_value(type) : NULL;
            if (!t && json_is_string(json_object_get(part, "text"))) t = "text"; /* vLLM infers the type */
            if (!t) return BAD(param, "%s[%zu]: a content part needs a string \"type\"", param, pi);
            const char *key = NULL;
            if (!strcmp(t, "text") || !strcmp(t, "input_text") || !strcmp(t, "output_text")) key = "text";
            else if (!strcmp(t, "refusal")) key = "refusal";
            else if (in_list(t, media_parts, sizeof media_parts / sizeof media_parts[0]))
                return BAD(param, "%s[%zu]: content parts of type '%s' are not supported: this server serves a "
                                  "text-only model",
                           param, pi, t);
            else return BAD(param, "%s[%zu]: unknown content part type '%s'", param, pi, t);
            json_t *tv = json_object_get(part, key);
            if (!json_is_string(tv)) return BAD(param, "%s[%zu].%s: Input should be a valid string", param, pi, key);
            text = json_string_value(tv), text_len = json_string_length(tv);
        } else {
            return oai_type_error(err, param, "a list of content parts (objects)", part);
        }
        if (!first) oai_buf_put(out, "\n", 1);
        oai_buf_put(out, text, text_len);
        first = false;
    }
    return VLLM_OK;
}

/* A deep copy of an assistant message's tool_calls with each
 * function.arguments JSON string parsed into an object (vLLM
 * _postprocess_messages: templates expect dicts). */
static vllm_status copy_tool_calls(const json_t *calls, size_t mi, json_t **out, oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", mi);
    if (!json_is_array(calls)) return oai_type_error(err, param, "a list of tool calls", calls);
    json_t *copy = json_deep_copy(calls);
    if (!copy) return NOMEM();
    size_t i;
    json_t *call;
    json_array_foreach(copy, i, call) {
        if (!json_is_object(call)) {
            json_decref(copy);
            return oai_type_error(err, param, "a list of tool call objects", call);
        }
        json_t *fn = json_object_get(call, "function");
        if (!fn) continue;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            json_decref(copy);
            return BAD(param, "%s[%zu].function: Input should be an object with a string \"name\"", param, i);
        }
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
            json_t *parsed = json_loads(json_string_value(args), 0, NULL);
            if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
            else json_decref(parsed); /* not a JSON object: the string stays */
        }
    }
    *out = copy;
    return VLLM_OK;
}

/* One validated conversation message for the template. */
static vllm_status convert_message(const json_t *m, size_t mi, json_t *conv, const char **role_out, oai_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", mi);
    if (!json_is_object(m)) return oai_type_error(err, param, "a message object", m);
    json_t *rv = json_object_get(m, "role");
    snprintf(param, sizeof param, "messages[%zu].role", mi);
    if (!rv) return BAD(param, "%s: Field required", param);
    if (!json_is_string(rv)) return oai_type_error(err, param, "a valid string", rv);
    const char *role = json_string_value(rv);
    if (!in_list(role, roles, sizeof roles / sizeof roles[0]))
        return BAD(param, "%s: unknown role '%s' (expected 'system', 'user', 'assistant', 'tool' or 'developer')", param,
                   role);
    *role_out = role;

    oai_buf text = {0};
    vllm_status st = content_text(json_object_get(m, "content"), role, mi, &text, err);
    if (st != VLLM_OK) {
        oai_buf_free(&text);
        return st;
    }
    json_t *msg = json_object();
    json_t *content = text.oom ? NULL : oai_json_str(text.data ? text.data : "", text.len);
    oai_buf_free(&text);
    if (!msg || !content) {
        json_decref(msg);
        json_decref(content);
        return NOMEM();
    }
    json_object_set_new(msg, "role", json_string(role));
    json_object_set_new(msg, "content", content);

    static const char *const str_fields[] = {"name", "tool_call_id", "reasoning", "reasoning_content"};
    for (size_t f = 0; f < sizeof str_fields / sizeof str_fields[0]; f++) {
        json_t *v = oai_field(m, str_fields[f]);
        if (!v) continue;
        if (!json_is_string(v)) {
            json_decref(msg);
            snprintf(param, sizeof param, "messages[%zu].%s", mi, str_fields[f]);
            return oai_type_error(err, param, "a valid string", v);
        }
        json_object_set(msg, str_fields[f], v);
    }
    /* vLLM renames reasoning_content to reasoning and hands both to the template */
    json_t *reasoning = json_object_get(msg, "reasoning");
    if (!reasoning) reasoning = json_object_get(msg, "reasoning_content");
    if (reasoning) {
        json_object_set(msg, "reasoning", reasoning);
        json_object_set(msg, "reasoning_content", reasoning);
    }
    json_t *calls = oai_field(m, "tool_calls");
    if (calls) {
        json_t *copy = NULL;
        if ((st = copy_tool_calls(calls, mi, &copy, err)) != VLLM_OK) {
            json_decref(msg);
            return st;
        }
        json_object_set_new(msg, "tool_calls", copy);
    }
    if (json_array_append_new(conv, msg)) return NOMEM();
    return VLLM_OK;
}

/* tools -> the template's list (each {"type": "function", "function": {name,
 * description, parameters}} as vLLM's model_dump() gives it), *tools NULL when none. */
static vllm_status convert_tools(const json_t *body, json_t **tools, oai_error *err) {
    *tools = NULL;
    json_t *tv = oai_field(body, "tools");
    if (!tv) return VLLM_OK;
    if (!json_is_array(tv)) return oai_type_error(err, "tools", "a list of tools", tv);
    if (json_array_size(tv) == 0)
        return BAD("tools", "`tools` must not be an empty array. Either provide at least one tool or omit the field "
                            "entirely.");
    json_t *out = json_array();
    if (!out) return NOMEM();
    size_t i;
    json_t *t;
    json_array_foreach(tv, i, t) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type");
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(t) || (type && !json_is_null(type) && (!json_is_string(type) ||
                                                                   strcmp(json_string_value(type), "function"))) ||
            !json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            json_decref(out);
            return BAD(param, "%s: Input should be {\"type\": \"function\", \"function\": {\"name\": string, ...}}",
                       param);
        }
        json_t *desc = json_object_get(fn, "description"), *params = json_object_get(fn, "parameters");
        if ((desc && !json_is_null(desc) && !json_is_string(desc)) ||
            (params && !json_is_null(params) && !json_is_object(params))) {
            json_decref(out);
            return BAD(param, "%s.function: description must be a string and parameters an object", param);
        }
        json_t *f = json_deep_copy(fn), *tool = json_object();
        if (!f || !tool) {
            json_decref(f), json_decref(tool), json_decref(out);
            return NOMEM();
        }
        if (!desc) json_object_set_new(f, "description", json_null());
        if (!params) json_object_set_new(f, "parameters", json_null());
        json_object_set_new(tool, "type", json_string("function"));
        json_object_set_new(tool, "function", f);
        json_array_append_new(out, tool);
    }
    *tools = out;
    return VLLM_OK;
}

/* tool_choice (vLLM check_tool_usage, vllm/entrypoints/openai/chat_completion/protocol.py): "none", "auto",
 * "required" or {"type": "function", "function": {"name": N}} naming one of the tools; "required" and a named tool
 * are forced through structured outputs (oai_structured.c oai_parse_tool_choice). */
static vllm_status check_tool_choice(const json_t *body, const json_t *tools, oai_error *err) {
    json_t *tc = oai_field(body, "tool_choice");
    if (!tc) return VLLM_OK;
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none")) return VLLM_OK;
    if (!tools) return BAD("tool_choice", "When using `tool_choice`, `tools` must be set.");
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto") || !strcmp(s, "required")) return VLLM_OK;
        return BAD("tool_choice", "Invalid value for `tool_choice`: %s! Only named tools, \"none\", \"auto\" or "
                                  "\"required\" are supported.",
                   s);
    }
    if (json_is_object(tc)) {
        json_t *fn = json_object_get(tc, "function");
        if (!json_is_object(fn))
            return BAD("tool_choice", "Invalid value for `function` in `tool_choice`! Correct usage: `{\"type\": "
                                      "\"function\", \"function\": {\"name\": \"my_function\"}}`");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name))
            return BAD("tool_choice", "Expected field `name` in `function` in `tool_choice`! Correct usage: "
                                      "`{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *tn = json_object_get(json_object_get(t, "function"), "name");
            if (json_is_string(tn) && !strcmp(json_string_value(tn), json_string_value(name))) return VLLM_OK;
        }
        return BAD("tool_choice", "The tool specified in `tool_choice` does not match any of the specified `tools`");
    }
    return oai_type_error(err, "tool_choice", "\"none\", \"auto\", \"required\" or a named tool", tc);
}

/* The last occurrence of needle[0..nlen) in hay (Python's str.rindex), or
 * NULL: one linear memmem over both strings reversed. */
static char *rfind(char *hay, const char *needle, size_t nlen, bool *oom) {
    size_t hlen = strlen(hay);
    if (nlen > hlen) return NULL;
    if (nlen == 0) return hay + hlen;
    char *rh = malloc(hlen), *rn = malloc(nlen);
    char *hit = NULL;
    if (!rh || !rn) {
        *oom = true;
    } else {
        for (size_t i = 0; i < hlen; i++) rh[i] = hay[hlen - 1 - i];
        for (size_t i = 0; i < nlen; i++) rn[i] = needle[nlen - 1 - i];
        char *q = memmem(rh, hlen, rn, nlen);
        if (q) hit = hay + (hlen - (size_t)(q - rh) - nlen);
    }
    free(rh);
    free(rn);
    return hit;
}

/* transformers' continue_final_message: the render ends right after the
 * final message's content (its last text part), so the model continues it;
 * if it is not found as is, its whitespace-stripped form is looked for. */
static vllm_status cut_after_final(char *rendered, const char *final_text, oai_error *err) {
    const char *needle = final_text;
    size_t nlen = strlen(needle);
    bool oom = false;
    char *hit = rfind(rendered, needle, nlen, &oom);
    if (!hit && !oom) {
        while (nlen && strchr(" \n\t\r\f\v", *needle)) needle++, nlen--;
        while (nlen && strchr(" \n\t\r\f\v", needle[nlen - 1])) nlen--;
        hit = rfind(rendered, needle, nlen, &oom);
    }
    if (oom) return NOMEM();
    if (!hit)
        return BAD("messages",
                   "continue_final_message is set but the final message does not appear in the chat after applying "
                   "the chat template! This can happen if the chat template deletes portions of the final message. "
                   "Please verify the chat template and final message in your chat to ensure they are compatible.");
    hit[nlen] = 0;
    return VLLM_OK;
}

vllm_status oai_chat_render(const oai_server_ctx *ctx, const json_t *body, char **prompt, char **role_out,
                            char **last_content, char **last_role, oai_error *err) {
    *prompt = NULL, *role_out = NULL, *last_content = NULL, *last_role = NULL;
    vllm_status st;
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs || json_is_null(msgs)) return BAD("messages", "messages: Field required");
    if (!json_is_array(msgs)) return oai_type_error(err, "messages", "a list of messages", msgs);
    if (json_array_size(msgs) == 0) return BAD("messages", "messages: List should have at least 1 item");

    bool agp = true, cfm = false, agp_given = false;
    json_t *agpv = oai_field(body, "add_generation_prompt");
    if ((st = oai_get_bool(body, "add_generation_prompt", &agp, err))) return st;
    agp_given = agpv != NULL;
    if ((st = oai_get_bool(body, "continue_final_message", &cfm, err))) return st;
    if (cfm && agp && agp_given)
        return BAD("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to "
                                             "True.");
    if (cfm) agp = false;
    if (oai_field(body, "chat_template"))
        return BAD("chat_template", "Chat template is passed with request, but --trust-request-chat-template is not "
                                    "set. Refused request with untrusted chat template.");
    json_t *kwargs = oai_field(body, "chat_template_kwargs");
    if (kwargs && !json_is_object(kwargs)) return oai_type_error(err, "chat_template_kwargs", "an object", kwargs);
    json_t *docs = oai_field(body, "documents");
    if (docs && !json_is_array(docs)) return oai_type_error(err, "documents", "a list of objects", docs);
    const char *effort = NULL;
    if ((st = oai_get_string(body, "reasoning_effort", &effort, err))) return st;
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (effort && !in_list(effort, efforts, sizeof efforts / sizeof efforts[0]))
        return BAD("reasoning_effort", "reasoning_effort: Input should be 'none', 'minimal', 'low', 'medium', 'high', "
                                       "'xhigh' or 'max'");
    json_t *tools = NULL, *conv = NULL, *tctx = NULL;
    if ((st = convert_tools(body, &tools, err))) return st;
    if ((st = check_tool_choice(body, tools, err))) goto done;

    conv = json_array();
    if (!conv) {
        st = NOMEM();
        goto done;
    }
    size_t mi;
    json_t *m;
    const char *last = NULL;
    json_array_foreach(msgs, mi, m) {
        if ((st = convert_message(m, mi, conv, &last, err))) goto done;
    }
    if (!ctx->chat_template) {
        st = BAD(NULL, "As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
                       "chat template if the tokenizer does not define one.");
        goto done;
    }

    /* the template's variables: the request's kwargs (which may override the
       special tokens, as in transformers), then ours */
    tctx = json_object();
    if (!tctx) {
        st = NOMEM();
        goto done;
    }
    if (ctx->bos_token) json_object_set_new(tctx, "bos_token", json_string(ctx->bos_token));
    if (ctx->eos_token) json_object_set_new(tctx, "eos_token", json_string(ctx->eos_token));
    if (effort) {
        json_object_set_new(tctx, "reasoning_effort", json_string(effort));
        if (!kwargs || !json_object_get(kwargs, "enable_thinking"))
            json_object_set_new(tctx, "enable_thinking", json_boolean(strcmp(effort, "none") != 0));
    }
    if (kwargs) json_object_update(tctx, kwargs);
    json_object_set(tctx, "messages", conv);
    json_object_set_new(tctx, "add_generation_prompt", json_boolean(agp));
    if (tools) json_object_set(tctx, "tools", tools);
    if (docs) json_object_set(tctx, "documents", docs);

    char *text = NULL;
    vllm_status rst = ct_render(ctx->chat_template, tctx, &text);
    if (rst != VLLM_OK) {
        /* a template error (raise_exception included) is the request's fault: 400 as vLLM;
           the renderer's messages already start with "chat template: " */
        const char *msg = vllm_last_error();
        const char *prefix = strncmp(msg, "chat template: ", 15) ? "chat template: " : "";
        oai_error_set(err, rst == VLLM_ERR_NO_MEMORY ? 500 : 400, NULL, "%s%s", prefix, msg);
        st = rst == VLLM_ERR_NO_MEMORY ? rst : VLLM_ERR_INVALID_ARG;
        goto done;
    }
    json_t *final_msg = json_array_get(conv, json_array_size(conv) - 1);
    const char *final_text = json_string_value(json_object_get(final_msg, "content"));
    if (cfm) {
        /* transformers looks for the last text part when content is a list */
        json_t *orig = json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content");
        const char *needle = final_text ? final_text : "";
        if (json_is_array(orig) && json_array_size(orig)) {
            json_t *lp = json_array_get(orig, json_array_size(orig) - 1);
            needle = json_is_string(lp) ? json_string_value(lp) : json_string_value(json_object_get(lp, "text"));
            if (!needle) needle = "";
        }
        if ((st = cut_after_final(text, needle, err))) {
            free(text);
            goto done;
        }
    }
    *prompt = text;
    *role_out = strdup(agp ? "assistant" : last);
    *last_role = strdup(last);
    *last_content = strdup(final_text ? final_text : "");
    if (!*role_out || !*last_role || !*last_content) {
        free(*prompt), free(*role_out), free(*last_role), free(*last_content);
        *prompt = *role_out = *last_role = *last_content = NULL;
        st = NOMEM();
        goto done;
    }
    st = VLLM_OK;
done:
    json_decref(tools);
    json_decref(conv);
    json_decref(tctx);
    return st;
}
