/*
 * oai_embed.c: POST /v1/embeddings bodies -> token-id prompts + vllm_pooling_params, and the
 * EmbeddingResponse JSON (see oai_embed.h).
 *
 * vLLM followed: EmbeddingCompletionRequest (vllm/entrypoints/pooling/embed/ and base/protocol.py:
 * input, model, user, encoding_format "float" | "base64", dimensions, truncate_prompt_tokens >= -1,
 * truncation_side, add_special_tokens (true), normalize / use_activation, embed_dtype, endianness,
 * request_id, priority), serving_engine's truncation ("truncate_prompt_tokens value (K) is greater
 * than max_model_len (M). Please, select a smaller truncation size.") and embedding length check
 * ("This model's maximum context length is M tokens. However, you requested N tokens in the input for
 * embedding generation. Please reduce the length of the input."), parse_and_batch_prompt ("please
 * provide at least one prompt"), the processor's "The decoder prompt cannot be empty", PoolingParams'
 * Matryoshka checks (engine/pooling.h), and serving_embedding's response (request_id_prefix "embd",
 * encode_pooling_output_float / _base64: the float32 bytes base64-encoded).
 */
#include "server/oai_embed.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/pooling.h"
#include "server/oai_internal.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

void oai_embed_request_free(oai_embed_request *r) {
    if (!r) return;
    for (size_t i = 0; r->prompts && i < r->num_prompts; i++) free((void *)r->prompts[i].token_ids);
    free(r->prompts);
    free(r->model);
    free(r->request_id);
    free(r);
}

/* One of the allowed strings (the first is the default), else a 400 naming them. */
static vllm_status get_choice(const json_t *body, const char *key, const char *const *allowed, size_t n, size_t *out,
                              oai_error *err) {
    const char *v = NULL;
    vllm_status st = oai_get_string(body, key, &v, err);
    if (st != VLLM_OK || !v) return st;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v, allowed[i])) {
            *out = i;
            return VLLM_OK;
        }
    char list[256];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s'%s'", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                              allowed[i]);
    return BAD(key, "%s: Input should be %s", key, list);
}

/* ids: a JSON list of token ids into a malloc'd array (param names the list for errors). */
static vllm_status id_list(const json_t *v, const char *param, int vocab, int32_t **out, size_t *n, oai_error *err) {
    size_t count = json_array_size(v);
    int32_t *ids = malloc((count ? count : 1) * sizeof *ids);
    if (!ids) return NOMEM();
    for (size_t i = 0; i < count; i++) {
        long long x;
        char p[96];
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        vllm_status st = oai_get_ll(json_array_get(v, i), p, &x, err);
        if (st == VLLM_OK && x < 0) st = BAD(p, "%s: Input should be greater than or equal to 0", p);
        if (st == VLLM_OK && (x > INT32_MAX || (vocab > 0 && x >= vocab)))
            st = BAD(p, "%s: token id %lld is out of vocabulary (size %d)", p, x, vocab);
        if (st != VLLM_OK) {
            free(ids);
            return st;
        }
        ids[i] = (int32_t)x;
    }
    *out = ids;
    *n = count;
    return VLLM_OK;
}

typedef struct embed_opts {
    bool add_special_tokens;
    bool have_truncate, truncate_right;
    long long truncate;
} embed_opts;

/* Input i (a text or a list of ids) into r->prompts[i]: tokenized, truncated, length-checked. */
static vllm_status one_input(const oai_server_ctx *ctx, const json_t *v, size_t i, const embed_opts *o,
                             oai_embed_request *r, oai_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    vllm_status st;
    char param[48];
    snprintf(param, sizeof param, r->num_prompts > 1 ? "input[%zu]" : "input", i);
    if (json_is_string(v)) {
        if (!ctx->tokenize) return BAD("input", "this model has no tokenizer: send the input as token ids");
        if ((st = ctx->tokenize(ctx->tok_ctx, json_string_value(v), o->add_special_tokens, &ids, &n))) {
            free(ids);
            oai_error_set(err, st == VLLM_ERR_NO_MEMORY ? 500 : 400, "input", "tokenization failed: %s",
                          vllm_last_error());
            return st;
        }
    } else if ((st = id_list(v, param, ctx->vocab_size, &ids, &n, err))) {
        return st;
    }
    r->prompts[i].token_ids = ids;
    if (o->have_truncate) { /* renderers' _token_truncation: the last tokens kept, or the first */
        size_t keep = (size_t)(o->truncate == -1 ? ctx->max_model_len : o->truncate);
        if (n > keep) {
            if (!o->truncate_right) memmove(ids, ids + (n - keep), keep * sizeof *ids);
            n = keep;
        }
    }
    r->prompts[i].num_token_ids = n;
    if (n == 0) return BAD("input", "The decoder prompt cannot be empty");
    if (n > (size_t)ctx->max_model_len)
        return BAD("input",
                   "This model's maximum context length is %d tokens. However, you requested %zu tokens in the input "
                   "for embedding generation. Please reduce the length of the input.",
                   ctx->max_model_len, n);
    return VLLM_OK;
}

static vllm_status parse(const oai_server_ctx *ctx, const vllm_engine_info *info, const json_t *body,
                         oai_embed_request *r, oai_error *err) {
    vllm_status st;
    const char *model = NULL, *user = NULL, *request_id = NULL;
    if ((st = oai_get_string(body, "model", &model, err))) return st;
    if (model && !(r->model = strdup(model))) return NOMEM();
    if (!oai_check_model(ctx, model, err)) return VLLM_ERR_NOT_FOUND;
    if ((st = oai_get_string(body, "user", &user, err))) return st; /* ignored, as vLLM */
    if ((st = oai_get_string(body, "request_id", &request_id, err))) return st;
    if (request_id) {
        if (strlen(request_id) > 256) return BAD("request_id", "request_id must be at most 256 bytes long");
        if (!(r->request_id = strdup(request_id))) return NOMEM();
    }
    if (oai_field(body, "messages"))
        return BAD("messages", "chat-style embedding requests (messages) are not supported by this server: send input");
    long long priority = 0;
    if ((st = oai_get_int64(body, "priority", &priority, NULL, err))) return st;
    if (priority != 0) return BAD("priority", "Got priority %lld but Priority scheduling is not enabled.", priority);

    /* encoding: float or base64 (of float32 values); the bytes formats are not served */
    static const char *const formats[] = {"float", "base64", "bytes", "bytes_only"};
    static const char *const dtypes[] = {"float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"};
    static const char *const ends[] = {"native", "big", "little"};
    size_t fmt = 0, dt = 0, end = 0;
    if ((st = get_choice(body, "encoding_format", formats, 4, &fmt, err))) return st;
    if (fmt >= 2) return BAD("encoding_format", "encoding_format '%s' is not supported by this server", formats[fmt]);
    if ((st = get_choice(body, "embed_dtype", dtypes, 5, &dt, err))) return st;
    if (dt != 0) return BAD("embed_dtype", "embed_dtype '%s' is not supported by this server (float32)", dtypes[dt]);
    if ((st = get_choice(body, "endianness", ends, 3, &end, err))) return st;
    r->base64 = fmt == 1;
    r->big_endian = end == 1;

    /* pooling parameters */
    long long dims = 0;
    bool have_dims = false;
    if ((st = oai_get_int64(body, "dimensions", &dims, &have_dims, err))) return st;
    if (have_dims) {
        const char *name = ctx->num_served_model_names ? ctx->served_model_names[0] : "";
        if (pool_check_dimensions(info, dims, name) != VLLM_OK) return BAD("dimensions", "%s", vllm_last_error());
        r->params.dimensions = dims > INT_MAX ? INT_MAX : (int)dims; /* past the embedding's size: all of it */
    }
    bool norm = false, act = false, have_norm = oai_field(body, "normalize") != NULL,
         have_act = oai_field(body, "use_activation") != NULL;
    if ((st = oai_get_bool(body, "normalize", &norm, err)) || (st = oai_get_bool(body, "use_activation", &act, err)))
        return st;
    if (have_norm && have_act && norm != act)
        return BAD("use_activation", "normalize and use_activation disagree (use_activation is normalize's new name)");
    if (have_norm || have_act) r->params.normalize = (have_act ? act : norm) ? 1 : -1;

    /* tokenization */
    embed_opts o = {.add_special_tokens = true};
    if ((st = oai_get_bool(body, "add_special_tokens", &o.add_special_tokens, err))) return st;
    if ((st = oai_get_int64(body, "truncate_prompt_tokens", &o.truncate, &o.have_truncate, err))) return st;
    if (o.have_truncate && o.truncate < -1)
        return BAD("truncate_prompt_tokens", "truncate_prompt_tokens: Input should be greater than or equal to -1");
    if (o.have_truncate && o.truncate > ctx->max_model_len)
        return BAD("truncate_prompt_tokens",
                   "truncate_prompt_tokens value (%lld) is greater than max_model_len (%d). Please, select a smaller "
                   "truncation size.",
                   o.truncate, ctx->max_model_len);
    static const char *const sides[] = {"left", "right"};
    size_t side = 0;
    if ((st = get_choice(body, "truncation_side", sides, 2, &side, err))) return st;
    o.truncate_right = side == 1;

    /* input: a string, a list of strings, a list of ids or a list of lists of ids */
    const json_t *in = oai_field(body, "input");
    const char *want = "a string, a list of strings, a list of token ids or a list of lists of token ids";
    if (!in) return BAD("input", "input: Field required");
    if (!json_is_string(in) && !json_is_array(in)) return oai_type_error(err, "input", want, in);
    if (json_is_array(in) && json_array_size(in) == 0) return BAD("input", "please provide at least one prompt");
    const json_t *first = json_is_array(in) ? json_array_get(in, 0) : NULL;
    bool one = json_is_string(in) || json_is_number(first);
    size_t num = one ? 1 : json_array_size(in);
    if (first && !one && !json_is_string(first) && !json_is_array(first))
        return oai_type_error(err, "input", want, first);
    for (size_t i = 0; !one && i < num; i++) {
        const json_t *e = json_array_get(in, i);
        if (json_is_string(first) ? !json_is_string(e) : !json_is_array(e))
            return oai_type_error(err, "input", want, e);
    }
    if (num > OAI_MAX_EMBED_INPUTS)
        return BAD("input", "input: at most %d inputs per request, got %zu", OAI_MAX_EMBED_INPUTS, num);
    /* the reply holds inputs x the embedding's size numbers: bounded as a generation reply's entries */
    long long limit = ctx->max_response_entries ? ctx->max_response_entries : OAI_DEFAULT_MAX_RESPONSE_ENTRIES;
    size_t dim = pool_embedding_dim(info->embedding_size, r->params.dimensions);
    if (limit >= 0 && (long long)num * (long long)dim > limit)
        return BAD("input", "%zu inputs x %zu dimensions = %lld numbers is more than the %lld one reply may hold (the "
                   "server's --max-response-entries); send fewer inputs per request", num, dim,
                   (long long)num * (long long)dim, limit);
    if (!(r->prompts = calloc(num, sizeof *r->prompts))) return NOMEM();
    r->num_prompts = num;
    for (size_t i = 0; i < num; i++)
        if ((st = one_input(ctx, one ? in : json_array_get(in, i), i, &o, r, err))) return st;
    return VLLM_OK;
}

vllm_status oai_parse_embedding(const oai_server_ctx *ctx, const vllm_engine_info *info, const char *body, size_t len,
                                oai_embed_request **out, oai_error *err) {
    *out = NULL;
    memset(err, 0, sizeof *err);
    json_t *root = NULL;
    vllm_status st = oai_parse_body(body, len, &root, err);
    if (st != VLLM_OK) return st;
    oai_embed_request *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(root);
        return NOMEM();
    }
    st = parse(ctx, info, root, r, err);
    json_decref(root);
    if (st != VLLM_OK) {
        oai_embed_request_free(r);
        return st;
    }
    *out = r;
    return VLLM_OK;
}

char *oai_embed_response_id(const oai_embed_request *req) {
    char hex[33];
    const char *tail = req->request_id;
    if (!tail) {
        oai_random_hex(hex, 32);
        tail = hex;
    }
    char *id = malloc(strlen(tail) + 6);
    if (id) sprintf(id, "embd-%s", tail);
    return id;
}

char *oai_base64(const unsigned char *d, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* s as a JSON string literal. */
static void put_json_string(oai_buf *b, const char *s) {
    json_t *j = oai_json_str(s, strlen(s));
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    if (t) oai_buf_puts(b, t);
    else b->oom = true;
    free(t);
    json_decref(j);
}

/* A float32 value as JSON: 9 significant digits (round-trips), a ".0" on integral values as Python prints
 * them, null for NaN and infinities (not JSON numbers). */
static void put_float(oai_buf *b, float x) {
    if (!isfinite(x)) {
        oai_buf_puts(b, "null");
        return;
    }
    char num[40];
    int n = snprintf(num, sizeof num, "%.9g", (double)x);
    if (n > 0 && !strpbrk(num, ".e")) snprintf(num + n, sizeof num - (size_t)n, ".0");
    oai_buf_puts(b, num);
}

char *oai_embed_response(const oai_server_ctx *ctx, const oai_embed_request *req, const char *id, long long created,
                         const float *const *emb, const size_t *dims, size_t *len) {
    oai_buf b = {0};
    char num[128];
    oai_buf_puts(&b, "{\"id\":");
    put_json_string(&b, id);
    snprintf(num, sizeof num, ",\"object\":\"list\",\"created\":%lld,\"model\":", created);
    oai_buf_puts(&b, num);
    put_json_string(&b, ctx->num_served_model_names ? ctx->served_model_names[0] : "");
    oai_buf_puts(&b, ",\"data\":[");
    size_t prompt_tokens = 0;
    for (size_t i = 0; i < req->num_prompts; i++) {
        prompt_tokens += req->prompts[i].num_token_ids;
        snprintf(num, sizeof num, "%s{\"index\":%zu,\"object\":\"embedding\",\"embedding\":", i ? "," : "", i);
        oai_buf_puts(&b, num);
        if (req->base64) { /* np.array(embedding, dtype="float32").tobytes(), in the asked byte order */
            unsigned char *bytes = malloc(dims[i] * 4 + 1);
            char *enc = NULL;
            if (bytes) {
                for (size_t k = 0; k < dims[i]; k++) {
                    uint32_t u;
                    memcpy(&u, &emb[i][k], 4);
                    for (int byte = 0; byte < 4; byte++)
                        bytes[4 * k + (size_t)byte] = (unsigned char)(u >> (8 * (req->big_endian ? 3 - byte : byte)));
                }
                enc = oai_base64(bytes, dims[i] * 4);
            }
            if (enc) {
                oai_buf_puts(&b, "\"");
                oai_buf_puts(&b, enc);
                oai_buf_puts(&b, "\"");
            } else {
                b.oom = true;
            }
            free(bytes);
            free(enc);
        } else {
            oai_buf_puts(&b, "[");
            for (size_t k = 0; k < dims[i]; k++) {
                if (k) oai_buf_puts(&b, ",");
                put_float(&b, emb[i][k]);
            }
            oai_buf_puts(&b, "]");
        }
        oai_buf_puts(&b, "}");
    }
    snprintf(num, sizeof num, "],\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu,", prompt_tokens, prompt_tokens);
    oai_buf_puts(&b, num);
    oai_buf_puts(&b, "\"completion_tokens\":0,\"prompt_tokens_details\":null}}");
    if (b.oom) {
        oai_buf_free(&b);
        return NULL;
    }
    return oai_buf_take(&b, len);
}
