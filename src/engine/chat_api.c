/* chat_api.c: vllm_chat_apply_template: a conversation rendered with the engine's chat template (LLM.chat). */
/*
 * The template and bos / eos tokens come from the folder the server reads them from (the `tokenizer`
 * option's, else the model's: ct_load_dir), or from options->chat_template (a file or the text, as
 * `vllmc serve --chat-template`). The template's variables are those of the server's chat path
 * (src/server/oai_chat.c): bos_token, eos_token, the kwargs (which may override them), messages,
 * add_generation_prompt, tools. Messages are normalised as vLLM's parse_chat_messages does for
 * string-format templates: text parts joined with "\n", null content "" for assistant turns, tool-call
 * arguments given as JSON text parsed into objects.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "engine/engine_internal.h"
#include "loader/regular_file.h"
#include "template/chat_template.h"

#define CHAT_MAX_TEMPLATE_BYTES ((size_t)16 << 20)

vllm_chat_template_options vllm_chat_template_default_options(void) {
    vllm_chat_template_options o;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = true;
    return o;
}

void vllm_free(void *ptr) { free(ptr); }

/* tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}) for an overriding template
 * when the folder has no template of its own (ct_load_dir then gives none); NULL when absent. */
static void read_special_tokens(const char *dir, char **bos, char **eos) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path) return;
    char *text = NULL;
    size_t len = 0;
    if (rf_read(path, (size_t)1 << 30, &text, &len) != VLLM_OK) {
        vt_error_clear();
        return;
    }
    json_t *cfg = json_loadb(text, len, 0, NULL);
    free(text);
    const char *keys[2] = {"bos_token", "eos_token"};
    char **outs[2] = {bos, eos};
    for (int i = 0; i < 2 && json_is_object(cfg); i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v)) *outs[i] = strdup(json_string_value(v));
    }
    json_decref(cfg);
}

/* The template (options->chat_template: a readable file, else the text when it looks like a template) and
 * the folder's special tokens. */
static vllm_status load_template(const vllm_engine *e, const char *override, char **tpl, char **bos, char **eos) {
    const char *dir = e->opt.tokenizer ? e->opt.tokenizer : e->model_name;
    if (!dir) return vt_error(VLLM_ERR_INTERNAL, "chat template: the engine has no model path");
    vllm_status st = ct_load_dir(dir, tpl, bos, eos);
    if (st != VLLM_OK && (st != VLLM_ERR_NOT_FOUND || !override)) {
        if (st == VLLM_ERR_NOT_FOUND)
            vt_error(VLLM_ERR_NOT_FOUND, "%s has no chat template: as of transformers v4.44, default chat template is no "
                                         "longer allowed, so you must provide a chat template if the tokenizer does "
                                         "not define one",
                     dir);
        return st;
    }
    if (st == VLLM_ERR_NOT_FOUND) {
        vt_error_clear();
        read_special_tokens(dir, bos, eos);
    }
    if (!override) return VLLM_OK;
    free(*tpl);
    *tpl = NULL;
    st = rf_read(override, CHAT_MAX_TEMPLATE_BYTES, tpl, NULL);
    if (st == VLLM_OK) return VLLM_OK;
    if (strstr(override, "{{") || strstr(override, "{%")) {
        vt_error_clear();
        *tpl = strdup(override);
        return *tpl ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    vt_error_prefix("chat_template (neither a readable file nor a template)");
    return st;
}

/* A message's content as the template sees it (a new reference), or NULL with the error set. */
static json_t *content_text(const json_t *content, const char *role, size_t mi) {
    if (!content || json_is_null(content)) {
        if (strcmp(role, "assistant") != 0) {
            vt_error(VLLM_ERR_INVALID_ARG, "messages[%zu].content is required for role '%s'", mi, role);
            return NULL;
        }
        return json_string("");
    }
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        vt_error(VLLM_ERR_INVALID_ARG, "messages[%zu].content must be a string or a list of content parts", mi);
        return NULL;
    }
    size_t cap = 1, pi;
    json_t *part;
    json_array_foreach(content, pi, part) {
        json_t *t = json_is_string(part) ? part : json_object_get(part, "text");
        if (!json_is_string(t)) t = json_object_get(part, "refusal");
        if (!json_is_string(t)) {
            json_t *type = json_object_get(part, "type");
            vt_error(VLLM_ERR_INVALID_ARG, "messages[%zu].content[%zu]: %s%s%s", mi, pi,
                     json_is_string(type) ? "content parts of type '" : "a content part needs a string \"text\"",
                     json_is_string(type) ? json_string_value(type) : "",
                     json_is_string(type) ? "' are not supported (text only)" : "");
            return NULL;
        }
        cap += json_string_length(t) + 1;
    }
    char *buf = malloc(cap);
    if (!buf) {
        vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    size_t len = 0;
    json_array_foreach(content, pi, part) {
        json_t *t = json_is_string(part) ? part : json_object_get(part, "text");
        if (!json_is_string(t)) t = json_object_get(part, "refusal");
        if (pi) buf[len++] = '\n';
        memcpy(buf + len, json_string_value(t), json_string_length(t));
        len += json_string_length(t);
    }
    json_t *s = json_stringn(buf, len);
    free(buf);
    if (!s) vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    return s;
}

/* The conversation for the template (a new array), or NULL with the error set. */
static json_t *convert_messages(const json_t *msgs, const char **last_content) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        vt_error(VLLM_ERR_INVALID_ARG, "messages must be a non-empty JSON array of message objects");
        return NULL;
    }
    json_t *conv = json_array();
    if (!conv) {
        vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            vt_error(VLLM_ERR_INVALID_ARG, "messages[%zu] must be an object with a string \"role\"", mi);
            goto fail;
        }
        json_t *copy = json_deep_copy(m);
        json_t *content = copy ? content_text(json_object_get(m, "content"), json_string_value(role), mi) : NULL;
        if (!copy || !content) {
            if (!copy) vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
            json_decref(copy);
            goto fail;
        }
        json_object_set_new(copy, "content", content);
        *last_content = json_string_value(content);
        json_t *calls = json_object_get(copy, "tool_calls"), *call;
        size_t ci;
        if (json_is_array(calls)) json_array_foreach(calls, ci, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_object_get(fn, "arguments");
                if (!json_is_string(args)) continue;
                json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
                else json_decref(parsed);
            }
        if (json_array_append_new(conv, copy)) {
            vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
            goto fail;
        }
    }
    return conv;
fail:
    json_decref(conv);
    return NULL;
}

/* Cuts the render right after the last occurrence of the final message's content (or of its
 * whitespace-stripped form): transformers' continue_final_message. */
static vllm_status cut_after_final(char *text, const char *final) {
    const char *needle = final;
    size_t nlen = strlen(needle);
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            while (nlen && strchr(" \n\t\r\f\v", *needle)) needle++, nlen--;
            while (nlen && strchr(" \n\t\r\f\v", needle[nlen - 1])) nlen--;
        }
        char *hit = NULL, *end = text + strlen(text);
        for (char *p = text; p + nlen <= end && (p = memmem(p, (size_t)(end - p), needle, nlen)) != NULL; p++)
            hit = p;
        if (hit) {
            hit[nlen] = 0;
            return VLLM_OK;
        }
    }
    return vt_error(VLLM_ERR_INVALID_ARG, "continue_final_message is set but the final message does not appear in the "
                                          "chat after applying the chat template");
}

vllm_status vllm_chat_apply_template(const vllm_engine *e, const char *messages_json,
                                     const vllm_chat_template_options *options, char **out_prompt) {
    if (!out_prompt) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_chat_apply_template: out_prompt is NULL");
    *out_prompt = NULL;
    if (!e || !messages_json) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_chat_apply_template: NULL engine or messages");
    vllm_chat_template_options o = options ? *options : vllm_chat_template_default_options();
    if (o.continue_final_message && o.add_generation_prompt)
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    json_error_t jerr;
    json_t *msgs = NULL, *tools = NULL, *kwargs = NULL, *conv = NULL, *ctx = NULL;
    char *tpl = NULL, *bos = NULL, *eos = NULL, *text = NULL;
    const char *last = "";
    vllm_status st = VLLM_OK;
    if (!(msgs = json_loads(messages_json, 0, &jerr))) {
        st = vt_error(VLLM_ERR_INVALID_ARG, "messages: invalid JSON (line %d: %s)", jerr.line, jerr.text);
        goto done;
    }
    if (o.tools_json && (!(tools = json_loads(o.tools_json, 0, &jerr)) || !json_is_array(tools))) {
        st = vt_error(VLLM_ERR_INVALID_ARG, "tools: %s", tools ? "must be a JSON array" : jerr.text);
        goto done;
    }
    if (o.chat_template_kwargs_json &&
        (!(kwargs = json_loads(o.chat_template_kwargs_json, 0, &jerr)) || !json_is_object(kwargs))) {
        st = vt_error(VLLM_ERR_INVALID_ARG, "chat_template_kwargs: %s", kwargs ? "must be a JSON object" : jerr.text);
        goto done;
    }
    if (!(conv = convert_messages(msgs, &last))) {
        st = VLLM_ERR_INVALID_ARG;
        if (strstr(vllm_last_error(), "out of memory")) st = VLLM_ERR_NO_MEMORY;
        goto done;
    }
    if ((st = load_template(e, o.chat_template, &tpl, &bos, &eos))) goto done;
    if (!(ctx = json_object())) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    if (bos) json_object_set_new(ctx, "bos_token", json_string(bos));
    if (eos) json_object_set_new(ctx, "eos_token", json_string(eos));
    if (kwargs) json_object_update(ctx, kwargs);
    json_object_set(ctx, "messages", conv);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(o.add_generation_prompt));
    if (tools) json_object_set(ctx, "tools", tools);
    if ((st = ct_render(tpl, ctx, &text))) {
        if (st != VLLM_ERR_NO_MEMORY) st = VLLM_ERR_INVALID_ARG;
        goto done;
    }
    if (o.continue_final_message && (st = cut_after_final(text, last))) {
        free(text);
        text = NULL;
        goto done;
    }
    *out_prompt = text;
done:
    json_decref(msgs), json_decref(tools), json_decref(kwargs), json_decref(conv), json_decref(ctx);
    free(tpl), free(bos), free(eos);
    return st;
}
