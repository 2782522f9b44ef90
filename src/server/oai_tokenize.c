/*
 * oai_tokenize.c: the bodies of POST /tokenize and POST /detokenize and of
 * GET /v1/models.
 *
 * Semantics: vLLM's serving_tokenization.py and protocol (TokenizeCompletionRequest:
 * prompt + add_special_tokens (true); TokenizeChatRequest: messages +
 * add_generation_prompt (true), continue_final_message, add_special_tokens
 * (false), chat_template_kwargs, tools; return_token_strs; TokenizeResponse
 * {count, max_model_len, tokens, token_strs}; DetokenizeRequest {tokens} ->
 * {prompt}) and models/serving.py show_available_models (one ModelCard per
 * served name with a ModelPermission).
 *
 * Both run the tokenizer on the calling (HTTP) thread through ctx->tokenize /
 * ctx->detokenize, never on the engine thread, and are capped by
 * ctx->max_tokenize_bytes (vLLM leaves them open without an API key: the cap
 * bounds what an unauthenticated request can cost).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/oai_internal.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

/* The cap on /tokenize text bytes and /detokenize ids (oai_server_ctx.max_tokenize_bytes). */
static size_t tokenize_limit(const oai_server_ctx *ctx) {
    return ctx->max_tokenize_bytes ? ctx->max_tokenize_bytes : OAI_DEFAULT_MAX_TOKENIZE_BYTES;
}

static vllm_status dump_to(json_t *o, char **resp, oai_error *err) {
    *resp = o ? oai_json_dump(o, NULL) : NULL;
    json_decref(o);
    return *resp ? VLLM_OK : NOMEM();
}

vllm_status oai_tokenize_request(const oai_server_ctx *ctx, const char *body, size_t len, char **resp,
                                 oai_error *err) {
    *resp = NULL;
    json_t *root;
    vllm_status st = oai_parse_body(body, len, &root, err);
    if (st != VLLM_OK) return st;
    const char *model = NULL, *prompt = NULL;
    bool is_chat = oai_field(root, "messages") != NULL;
    bool add_special = !is_chat, token_strs = false;
    char *rendered = NULL, *role = NULL, *last = NULL, *last_role = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if ((st = oai_get_string(root, "model", &model, err))) goto done;
    if ((st = oai_get_bool(root, "add_special_tokens", &add_special, err))) goto done;
    if ((st = oai_get_bool(root, "return_token_strs", &token_strs, err))) goto done;
    if (!is_chat) {
        if ((st = oai_get_string(root, "prompt", &prompt, err))) goto done;
        if (!prompt) {
            st = BAD("prompt", "prompt: Field required (or send messages)");
            goto done;
        }
    }
    if (!oai_check_model(ctx, model, err)) {
        st = VLLM_ERR_NOT_FOUND;
        goto done;
    }
    if (is_chat) {
        if ((st = oai_chat_render(ctx, root, &rendered, &role, &last, &last_role, err))) goto done;
        prompt = rendered;
    }
    if (!ctx->tokenize) {
        st = BAD(NULL, "this model has no tokenizer");
        goto done;
    }
    /* the endpoint needs no API key: its cost is bounded before the tokenizer runs (on this,
     * the caller's, thread) */
    size_t text_len = strlen(prompt), limit = tokenize_limit(ctx);
    if (text_len > limit) {
        st = BAD(is_chat ? "messages" : "prompt",
                 "%s is %zu bytes: /tokenize accepts at most %zu bytes of text (--max-tokenize-bytes)",
                 is_chat ? "the rendered chat" : "prompt", text_len, limit);
        goto done;
    }
    if ((st = ctx->tokenize(ctx->tok_ctx, prompt, add_special, &ids, &n)) != VLLM_OK) {
        oai_error_set(err, st == VLLM_ERR_NO_MEMORY ? 500 : 400, "prompt", "tokenization failed: %s", vllm_last_error());
        goto done;
    }
    json_t *o = json_object(), *toks = json_array(), *strs = token_strs ? json_array() : json_null();
    if (!o || !toks || !strs) {
        json_decref(o), json_decref(toks), json_decref(strs);
        st = NOMEM();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(toks, json_integer(ids[i]));
        if (token_strs) {
            const char *s = ctx->token_str ? ctx->token_str(ctx->tok_ctx, ids[i]) : NULL;
            char buf[32];
            if (!s) snprintf(buf, sizeof buf, "token_id:%d", (int)ids[i]), s = buf;
            json_array_append_new(strs, oai_json_str(s, strlen(s)));
        }
    }
    json_object_set_new(o, "count", json_integer((json_int_t)n));
    json_object_set_new(o, "max_model_len", json_integer(ctx->max_model_len));
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "token_strs", strs);
    st = dump_to(o, resp, err);
done:
    free(ids);
    free(rendered), free(role), free(last), free(last_role);
    json_decref(root);
    return st;
}

vllm_status oai_detokenize_request(const oai_server_ctx *ctx, const char *body, size_t len, char **resp,
                                   oai_error *err) {
    *resp = NULL;
    json_t *root;
    vllm_status st = oai_parse_body(body, len, &root, err);
    if (st != VLLM_OK) return st;
    const char *model = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t n = 0;
    if ((st = oai_get_string(root, "model", &model, err))) goto done;
    json_t *tv = oai_field(root, "tokens");
    if (!tv) {
        st = BAD("tokens", "tokens: Field required");
        goto done;
    }
    if (!json_is_array(tv)) {
        st = oai_type_error(err, "tokens", "a list of integers", tv);
        goto done;
    }
    n = json_array_size(tv);
    if (n > tokenize_limit(ctx)) {
        st = BAD("tokens", "tokens has %zu ids: /detokenize accepts at most %zu (--max-tokenize-bytes)", n,
                 tokenize_limit(ctx));
        goto done;
    }
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        st = NOMEM();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char param[32];
        long long x;
        snprintf(param, sizeof param, "tokens[%zu]", i);
        if ((st = oai_get_ll(json_array_get(tv, i), param, &x, err))) goto done;
        if (x < 0 || x > INT32_MAX || (ctx->vocab_size > 0 && x >= ctx->vocab_size)) {
            st = BAD(param, "Token id %lld is out of vocabulary", x);
            goto done;
        }
        ids[i] = (int32_t)x;
    }
    if (!oai_check_model(ctx, model, err)) {
        st = VLLM_ERR_NOT_FOUND;
        goto done;
    }
    if (!ctx->detokenize) {
        st = BAD(NULL, "this model has no tokenizer");
        goto done;
    }
    if ((st = ctx->detokenize(ctx->tok_ctx, ids, n, false, &text)) != VLLM_OK) {
        oai_error_set(err, st == VLLM_ERR_NO_MEMORY ? 500 : 400, "tokens", "detokenization failed: %s",
                      vllm_last_error());
        goto done;
    }
    json_t *o = json_object();
    if (o) json_object_set_new(o, "prompt", oai_json_str(text, strlen(text)));
    st = dump_to(o, resp, err);
done:
    free(ids);
    free(text);
    json_decref(root);
    return st;
}

char *oai_models_json(const oai_server_ctx *ctx, const char *root) {
    json_t *list = json_object(), *data = json_array();
    if (!list || !data) {
        json_decref(list), json_decref(data);
        return NULL;
    }
    json_object_set_new(list, "object", json_string("list"));
    json_object_set(list, "data", data);
    long long now = (long long)time(NULL);
    for (size_t i = 0; i < ctx->num_served_model_names; i++) {
        const char *name = ctx->served_model_names[i];
        if (!name) continue;
        json_t *card = json_object(), *perm = json_object(), *perms = json_array();
        if (!card || !perm || !perms) {
            json_decref(card), json_decref(perm), json_decref(perms);
            continue;
        }
        char hex[33], pid[48];
        oai_random_hex(hex, 32);
        snprintf(pid, sizeof pid, "modelperm-%s", hex);
        json_object_set_new(perm, "id", json_string(pid));
        json_object_set_new(perm, "object", json_string("model_permission"));
        json_object_set_new(perm, "created", json_integer(now));
        json_object_set_new(perm, "allow_create_engine", json_false());
        json_object_set_new(perm, "allow_sampling", json_true());
        json_object_set_new(perm, "allow_logprobs", json_true());
        json_object_set_new(perm, "allow_search_indices", json_false());
        json_object_set_new(perm, "allow_view", json_true());
        json_object_set_new(perm, "allow_fine_tuning", json_false());
        json_object_set_new(perm, "organization", json_string("*"));
        json_object_set_new(perm, "group", json_null());
        json_object_set_new(perm, "is_blocking", json_false());
        json_array_append_new(perms, perm);
        json_object_set_new(card, "id", oai_json_str(name, strlen(name)));
        json_object_set_new(card, "object", json_string("model"));
        json_object_set_new(card, "created", json_integer(now));
        json_object_set_new(card, "owned_by", json_string("vllm"));
        json_object_set_new(card, "root", root ? oai_json_str(root, strlen(root)) : json_null());
        json_object_set_new(card, "parent", json_null());
        json_object_set_new(card, "max_model_len", json_integer(ctx->max_model_len));
        json_object_set_new(card, "permission", perms);
        json_array_append_new(data, card);
    }
    json_decref(data);
    char *s = oai_json_dump(list, NULL);
    json_decref(list);
    return s;
}
