/*
 * chat_template.c: chat-template rendering on top of the Jinja interpreter, and loading
 * the template and special tokens from a model folder.
 */
#include "template/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "loader/regular_file.h"
#include "template/jinja.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"
#include "tokenizer/tokenizer.h"

/* tokenizer_config.json: the tokenizer reads it with the same bound */
#define CT_MAX_CONFIG_BYTES ((size_t)1 << 30)

vllm_status ct_render(const char *template_src, const json_t *ctx, char **out) {
    if (!template_src || !out) return vt_error(VLLM_ERR_INVALID_ARG, "chat template: no template");
    if (ctx && !json_is_object(ctx)) return vt_error(VLLM_ERR_INVALID_ARG, "chat template: context must be a JSON object");
    if (ctx) {
        json_t *m = json_object_get(ctx, "messages");
        if (m && !json_is_array(m)) return vt_error(VLLM_ERR_INVALID_ARG, "chat template: \"messages\" must be an array");
    }
    return jt_render(template_src, ctx, out);
}

/* The whole file, or NULL with *st set (VLLM_ERR_NOT_FOUND when it does not exist). A FIFO, a
 * directory or a device is refused (loader/regular_file.h), never waited on. */
static char *read_file(const char *path, size_t max, vllm_status *st) {
    char *buf;
    *st = rf_read(path, max, &buf, NULL);
    return *st ? NULL : buf;
}

static vllm_status dup_token(const char *path, const char *field, json_t *v, char **out) {
    *out = NULL;
    if (!v || json_is_null(v)) return VLLM_OK;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return vt_error(VLLM_ERR_FORMAT, "%s: %s must be a string or {\"content\": string}", path, field);
    *out = strdup(json_string_value(v));
    return *out ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
}

/* A GGUF file's tokenizer.chat_template (NOT_FOUND when it has none) */
static vllm_status ct_load_gguf(const char *path, char **template_src, char **bos_token, char **eos_token) {
    gguf_file *f = NULL;
    vllm_status st = gguf_open(path, &f);
    if (!st) st = tok_gguf_chat_template(f, template_src, bos_token, eos_token);
    gguf_close(f);
    if (!st && !*template_src) {
        free(*bos_token), free(*eos_token);
        *bos_token = *eos_token = NULL;
        st = vt_error(VLLM_ERR_NOT_FOUND, "%s: no chat template (no tokenizer.chat_template)", path);
    }
    return st;
}

vllm_status ct_load_dir(const char *dir, char **template_src, char **bos_token, char **eos_token) {
    *template_src = NULL, *bos_token = NULL, *eos_token = NULL;
    if (ggc_is_gguf_path(dir)) return ct_load_gguf(dir, template_src, bos_token, eos_token);
    char path[4096], jpath[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path ||
        snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir) >= (int)sizeof jpath)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: path too long", dir);
    vllm_status st;
    char *jinja = read_file(jpath, 16u << 20, &st);
    if (!jinja && st != VLLM_ERR_NOT_FOUND) return st;
    size_t cfg_len = 0;
    char *cfg_text = NULL;
    st = rf_read(path, CT_MAX_CONFIG_BYTES, &cfg_text, &cfg_len);
    if (st != VLLM_OK && st != VLLM_ERR_NOT_FOUND) {
        free(jinja);
        return st;
    }
    json_error_t jerr;
    json_t *cfg = NULL;
    if (cfg_text) {
        cfg = json_loadb(cfg_text, cfg_len, JSON_DECODE_INT_AS_REAL, &jerr);
        free(cfg_text);
        if (!cfg) {
            free(jinja);
            return vt_error(VLLM_ERR_FORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
        }
    }
    if (!cfg) {
        if (!jinja) return vt_error(VLLM_ERR_NOT_FOUND, "%s: no chat template (no tokenizer_config.json or chat_template.jinja)", dir);
    } else if (!json_is_object(cfg)) {
        json_decref(cfg);
        free(jinja);
        return vt_error(VLLM_ERR_FORMAT, "%s: not a JSON object", path);
    }
    st = VLLM_OK;
    if (cfg) {
        if (!jinja) {
            json_t *ct = json_object_get(cfg, "chat_template");
            const char *src = NULL;
            if (json_is_string(ct)) {
                src = json_string_value(ct);
            } else if (json_is_array(ct)) {
                size_t i;
                json_t *e;
                json_array_foreach(ct, i, e) {
                    json_t *name = json_object_get(e, "name"), *tpl = json_object_get(e, "template");
                    if (json_is_string(name) && json_is_string(tpl) && strcmp(json_string_value(name), "default") == 0)
                        src = json_string_value(tpl);
                }
                if (!src) st = vt_error(VLLM_ERR_NOT_FOUND, "%s: chat_template has no \"default\" entry", path);
            } else if (ct && !json_is_null(ct)) {
                st = vt_error(VLLM_ERR_FORMAT, "%s: chat_template must be a string or a list", path);
            } else {
                st = vt_error(VLLM_ERR_NOT_FOUND, "%s: no chat_template (and no chat_template.jinja)", path);
            }
            if (src && !(jinja = strdup(src))) st = vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
        }
        if (st == VLLM_OK) st = dup_token(path, "bos_token", json_object_get(cfg, "bos_token"), bos_token);
        if (st == VLLM_OK) st = dup_token(path, "eos_token", json_object_get(cfg, "eos_token"), eos_token);
        json_decref(cfg);
    }
    if (st != VLLM_OK) {
        free(jinja), free(*bos_token), free(*eos_token);
        *bos_token = *eos_token = NULL;
        return st;
    }
    *template_src = jinja;
    return VLLM_OK;
}
