/*
 * oai_response.c: the replies of /v1/completions and /v1/chat/completions
 * built from engine stream chunks: non-streaming text_completion /
 * chat.completion objects, streamed chunks as Server-Sent Events, usage,
 * and logprobs in both APIs' formats.
 *
 * Semantics follow vLLM:
 *  - completion/serving.py: completion_stream_generator (choice index =
 *    prompt index * n + sample index; echo prepends the prompt text, ids and
 *    prompt logprobs to a choice's first delta; continuous usage per chunk;
 *    a final usage chunk with "choices": []; "data: [DONE]"),
 *    request_output_to_completion_response, _create_completion_logprobs
 *    (tokens, token_logprobs, top_logprobs dicts of the sampled token + the
 *    top k, text_offset in characters, logprobs clamped at -9999.0);
 *  - chat_completion/serving.py: chat_completion_stream_generator (the first
 *    chunk of each choice has delta {"role", "content": ""}; echo of the last
 *    message; finish chunk with finish_reason and stop_reason),
 *    chat_completion_full_generator, _create_chat_logprobs /
 *    _get_top_logprobs (token, logprob, bytes; top_logprobs = the first k
 *    entries of vLLM's logprob dict, which starts with the sampled token);
 *  - the models' field order (pydantic order, exclude_unset for chunks,
 *    exclude_none for the usage chunk);
 *  - chat with a --reasoning-parser or tools (tool_choice auto / required /
 *    named): the message's reasoning, content and tool_calls and the deltas
 *    come from oai_reply_parse.c; finish_reason "tool_calls" as vLLM decides
 *    it (chat_finish, parsed_delta).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/oai_response_internal.h"


/* ------------------------------------------------------------------ */
/* Create / free                                                       */
/* ------------------------------------------------------------------ */

vllm_status oai_response_create(const oai_server_ctx *ctx, const oai_request *req, const oai_response_options *opt,
                                oai_response **out) {
    *out = NULL;
    if (!ctx || !req || req->n < 1 || req->num_prompts == 0) return VLLM_ERR_INVALID_ARG;
    if ((size_t)req->n > SIZE_MAX / req->num_prompts) return VLLM_ERR_INVALID_ARG;
    oai_response *r = calloc(1, sizeof *r);
    if (!r) return VLLM_ERR_NO_MEMORY;
    r->ctx = ctx, r->req = req;
    r->num_choices = req->num_prompts * (size_t)req->n;
    r->choices = calloc(r->num_choices, sizeof *r->choices);
    r->prompts = calloc(req->num_prompts, sizeof *r->prompts);
    r->model = ctx->num_served_model_names && ctx->served_model_names[0] ? ctx->served_model_names[0] : "";
    const char *prefix = req->api == OAI_API_RESPONSES ? "resp_"
                         : req->api == OAI_API_ANTHROPIC ? "msg_"
                         : req->kind == OAI_KIND_CHAT    ? "chatcmpl-"
                                                         : "cmpl-";
    char hex[33];
    const char *base = opt && opt->id ? NULL : req->request_id;
    if (!base && !(opt && opt->id)) oai_random_hex(hex, 32), base = hex;
    size_t len = opt && opt->id ? strlen(opt->id) + 1 : strlen(prefix) + strlen(base) + 1;
    r->id = malloc(len);
    if (r->id) {
        if (opt && opt->id) memcpy(r->id, opt->id, len);
        else snprintf(r->id, len, "%s%s", prefix, base);
    }
    r->created = opt && opt->created ? opt->created : (long long)time(NULL);
    r->serial = oai_next_serial();
    if (!r->choices || !r->prompts || !r->id) {
        oai_response_free(r);
        return VLLM_ERR_NO_MEMORY;
    }
    vllm_status st = oai_parsers_new(ctx, req, &r->parsers);
    if (st != VLLM_OK) {
        oai_response_free(r);
        return st;
    }
    /* vLLM: suppress_metadata / hide_stream_metadata = not include_reasoning and a parser is configured */
    r->hide_metadata = req->kind == OAI_KIND_CHAT && !req->include_reasoning &&
                       (ctx->reasoning_parser || (ctx->enable_auto_tool_choice && ctx->tool_call_parser));
    *out = r;
    return VLLM_OK;
}

void oai_response_free(oai_response *r) {
    if (!r) return;
    size_t bytes = r->body_bytes; /* what this reply held, for oai_release_memory */
    for (size_t i = 0; r->choices && i < r->num_choices; i++) {
        choice *c = &r->choices[i];
        bytes += c->text.cap + c->cap * (sizeof *c->ids + sizeof *c->lps) +
                 c->cap * (size_t)(c->k > 0 ? c->k : 1) * (sizeof *c->top_ids + sizeof *c->top_lps);
        oai_buf_free(&c->text);
        free(c->ids), free(c->lps), free(c->top_ids), free(c->top_lps), free(c->stop_reason);
        oai_delta_parser_free(c->dp);
    }
    for (size_t i = 0; r->prompts && i < r->req->num_prompts; i++) {
        bytes += r->req->prompts[i].prompt.num_token_ids * (sizeof(float) + (size_t)r->prompts[i].pk * 8);
        free(r->prompts[i].plp), free(r->prompts[i].ptop_ids), free(r->prompts[i].ptop);
    }
    free(r->choices);
    free(r->prompts);
    free(r->id);
    oai_buf_free(&r->api.text);
    free(r->api.call_id), free(r->api.name);
    json_decref(r->api.items);
    free(r->api_object);
    oai_parsers_free(r->parsers);
    free(r);
    oai_release_memory(bytes);
}

const char *oai_response_id(const oai_response *r) { return r ? r->id : NULL; }

const char *oai_response_api_object(const oai_response *r) { return r ? r->api_object : NULL; }

void oai_prompt_usage(const oai_response *r, size_t *prompt_tokens, size_t *cached) {
    *prompt_tokens = 0, *cached = 0;
    for (size_t i = 0; i < r->req->num_prompts; i++) {
        *prompt_tokens += r->req->prompts[i].prompt.num_token_ids;
        if (r->prompts[i].have_cached) *cached += r->prompts[i].cached_tokens;
    }
}

char *oai_response_engine_id(const oai_response *r, size_t prompt_index) {
    if (!r) return NULL;
    /* vLLM: "<request id>-<prompt index>" (serving_completion), then the engine appends
       a random part (InputProcessor.assign_request_id); here a server-unique serial */
    size_t len = strlen(r->id) + 48;
    char *id = malloc(len);
    if (id) snprintf(id, len, "%s-%zu-%" PRIx64, r->id, prompt_index, r->serial);
    return id;
}

/* ------------------------------------------------------------------ */
/* Chunk intake                                                        */
/* ------------------------------------------------------------------ */

vllm_status oai_engine_error(oai_response *r, const char *msg) {
    r->failed = true;
    oai_error_set(&r->err, 500, NULL, "%s", msg && msg[0] ? msg : "the engine failed");
    return VLLM_OK;
}

/* The choice of a chunk, or NULL when the indices are out of range. */
choice *oai_choice_of(oai_response *r, size_t prompt_index, const vllm_stream_chunk *c) {
    if (prompt_index >= r->req->num_prompts || c->index >= (size_t)r->req->n) return NULL;
    return &r->choices[prompt_index * (size_t)r->req->n + c->index];
}

/* Usage and prompt logprobs carried by any chunk of a prompt. */
vllm_status oai_take_prompt_info(oai_response *r, size_t pi, const vllm_stream_chunk *c) {
    prompt_state *ps = &r->prompts[pi];
    if (c->cached_prompt_tokens > ps->cached_tokens || !ps->have_cached) ps->cached_tokens = c->cached_prompt_tokens;
    ps->have_cached = true;
    size_t n = r->req->prompts[pi].prompt.num_token_ids;
    if (c->prompt_logprobs && !ps->plp && c->prompt_tokens == n) {
        ps->plp = malloc((n ? n : 1) * sizeof *ps->plp);
        if (!ps->plp) return NOMEM();
        memcpy(ps->plp, c->prompt_logprobs, n * sizeof *ps->plp);
        int k = c->num_prompt_top_logprobs;
        if (k > 0 && c->prompt_top_logprob_ids && c->prompt_top_logprobs) {
            if (n > SIZE_MAX / sizeof(float) / (size_t)k) return NOMEM();
            ps->ptop_ids = malloc(n * (size_t)k * sizeof *ps->ptop_ids);
            ps->ptop = malloc(n * (size_t)k * sizeof *ps->ptop);
            if (!ps->ptop_ids || !ps->ptop) return NOMEM();
            memcpy(ps->ptop_ids, c->prompt_top_logprob_ids, n * (size_t)k * sizeof *ps->ptop_ids);
            memcpy(ps->ptop, c->prompt_top_logprobs, n * (size_t)k * sizeof *ps->ptop);
            ps->pk = k;
        }
    }
    return VLLM_OK;
}

vllm_status oai_record_finish(oai_response *r, choice *ch, const vllm_stream_chunk *c) {
    if (c->finish_reason == VLLM_FINISH_NONE) return VLLM_OK;
    ch->finished = true;
    ch->finish = c->finish_reason;
    free(ch->stop_reason);
    ch->stop_reason = NULL;
    if (c->stop_reason && !(ch->stop_reason = strdup(c->stop_reason))) return NOMEM();
    return VLLM_OK;
}

vllm_status oai_response_add(oai_response *r, size_t prompt_index, const vllm_stream_chunk *c) {
    if (!r || !c) return VLLM_ERR_INVALID_ARG;
    choice *ch = oai_choice_of(r, prompt_index, c);
    if (!ch) return VLLM_ERR_INVALID_ARG;
    if (c->error) return oai_engine_error(r, c->error);
    vllm_status st = oai_take_prompt_info(r, prompt_index, c);
    if (st != VLLM_OK) return st;
    if (c->text) oai_buf_put(&ch->text, c->text, c->text_len);
    if (ch->text.oom) return NOMEM();
    if (c->num_tokens) {
        /* top-k width: fixed by the choice's first tokens (k never changes within a request;
           a narrower chunk is padded with empty slots, id -1) */
        int kc = c->top_logprob_ids && c->top_logprobs && c->num_top_logprobs > 0 ? c->num_top_logprobs : 0;
        if (!ch->cap) ch->k = kc < OAI_MAX_LOGPROBS ? kc : OAI_MAX_LOGPROBS;
        if (c->num_tokens > SIZE_MAX / 2 - ch->num_tokens) return NOMEM();
        if (ch->num_tokens + c->num_tokens > ch->cap) {
            size_t cap = ch->cap ? ch->cap : 16;
            while (cap < ch->num_tokens + c->num_tokens) cap *= 2;
            size_t kk = (size_t)(ch->k > 0 ? ch->k : 1);
            if (cap > SIZE_MAX / sizeof(float) / kk) return NOMEM();
            int32_t *ids = realloc(ch->ids, cap * sizeof *ids);
            if (ids) ch->ids = ids;
            float *lps = realloc(ch->lps, cap * sizeof *lps);
            if (lps) ch->lps = lps;
            int32_t *tids = realloc(ch->top_ids, cap * kk * sizeof *tids);
            if (tids) ch->top_ids = tids;
            float *tlps = realloc(ch->top_lps, cap * kk * sizeof *tlps);
            if (tlps) ch->top_lps = tlps;
            if (!ids || !lps || !tids || !tlps) return NOMEM();
            ch->cap = cap;
        }
        for (size_t t = 0; t < c->num_tokens; t++) {
            size_t at = ch->num_tokens + t;
            ch->ids[at] = c->token_ids[t];
            ch->lps[at] = c->logprobs ? c->logprobs[t] : NAN;
            for (int j = 0; j < ch->k; j++) {
                size_t dst = at * (size_t)ch->k + (size_t)j, src = t * (size_t)kc + (size_t)j;
                ch->top_ids[dst] = j < kc ? c->top_logprob_ids[src] : -1;
                ch->top_lps[dst] = j < kc ? c->top_logprobs[src] : NAN;
            }
        }
        ch->num_tokens += c->num_tokens;
    }
    return oai_record_finish(r, ch, c);
}

/* ------------------------------------------------------------------ */
/* Logprobs                                                            */
/* ------------------------------------------------------------------ */

/* The token's text as vLLM shows it (decode([id]) or "token_id:<id>"). */
static const char *tok_str(const oai_response *r, int32_t id, char buf[32], bool *decoded) {
    const char *s = NULL;
    if (!r->req->return_tokens_as_token_ids && r->ctx->token_str) s = r->ctx->token_str(r->ctx->tok_ctx, id);
    if (decoded) *decoded = s != NULL;
    if (s) return s;
    snprintf(buf, 32, "token_id:%d", (int)id);
    return buf;
}

static json_t *jstr(const char *s) { return oai_json_str(s, strlen(s)); }

/* vLLM's step logprob dict {token id: logprob}: the sampled token first, then
 * the top k in rank order; a repeated id keeps its first place. Returns the
 * number of distinct entries written to ids/lps (at most k + 1). */
static int step_dict(const lp_pos *p, int32_t *ids, float *lps) {
    int m = 0;
    ids[m] = p->id, lps[m] = p->lp, m++;
    for (int j = 0; j < p->k; j++) {
        if (p->top_ids[j] < 0) continue; /* an empty slot */
        int dup = -1;
        for (int q = 0; q < m; q++)
            if (ids[q] == p->top_ids[j]) dup = q;
        if (dup >= 0) lps[dup] = p->top_lps[j];
        else ids[m] = p->top_ids[j], lps[m] = p->top_lps[j], m++;
    }
    return m;
}

/* Completions: {"text_offset", "token_logprobs", "tokens", "top_logprobs"}. */
static json_t *completion_logprobs(const oai_response *r, const lp_pos *pos, size_t n, size_t initial_offset) {
    json_t *root = json_object(), *offs = json_array(), *tlps = json_array(), *toks = json_array(), *tops = json_array();
    if (!root || !offs || !tlps || !toks || !tops) goto oom;
    json_object_set(root, "text_offset", offs);
    json_object_set(root, "token_logprobs", tlps);
    json_object_set(root, "tokens", toks);
    json_object_set(root, "top_logprobs", tops);
    size_t offset = initial_offset, last_len = 0;
    for (size_t i = 0; i < n; i++) {
        char buf[32];
        const char *t = tok_str(r, pos[i].id, buf, NULL);
        if (json_array_append_new(toks, jstr(t))) goto oom;
        if (pos[i].none) {
            json_array_append_new(tlps, json_null());
            json_array_append_new(tops, json_null());
        } else {
            json_array_append_new(tlps, oai_json_logprob(pos[i].lp));
            int32_t ids[OAI_MAX_LOGPROBS + 1];
            float lps[OAI_MAX_LOGPROBS + 1];
            lp_pos p = pos[i];
            if (p.k > OAI_MAX_LOGPROBS) p.k = OAI_MAX_LOGPROBS;
            int m = step_dict(&p, ids, lps);
            json_t *d = json_object();
            if (!d) goto oom;
            for (int q = 0; q < m; q++) {
                char b2[32];
                json_t *key = jstr(tok_str(r, ids[q], b2, NULL)); /* keys as valid UTF-8 */
                if (!key) {
                    json_decref(d);
                    goto oom;
                }
                json_object_set_new(d, json_string_value(key), oai_json_logprob(lps[q]));
                json_decref(key);
            }
            json_array_append_new(tops, d);
        }
        if (i > 0) offset += last_len;
        json_array_append_new(offs, json_integer((json_int_t)offset));
        last_len = oai_utf8_chars(t, strlen(t));
    }
    json_decref(offs), json_decref(tlps), json_decref(toks), json_decref(tops);
    return root;
oom:
    json_decref(root), json_decref(offs), json_decref(tlps), json_decref(toks), json_decref(tops);
    return NULL;
}

/* Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}. */
json_t *oai_chat_logprobs(const oai_response *r, const lp_pos *pos, size_t n, int num_top) {
    json_t *root = json_object(), *content = json_array();
    if (!root || !content) goto oom;
    json_object_set(root, "content", content);
    for (size_t i = 0; i < n; i++) {
        char buf[32];
        bool decoded;
        const char *t = tok_str(r, pos[i].id, buf, &decoded);
        json_t *e = json_object(), *tops = json_array();
        if (!e || !tops) {
            json_decref(e), json_decref(tops);
            goto oom;
        }
        json_object_set_new(e, "token", jstr(t));
        json_object_set_new(e, "logprob", oai_json_logprob(pos[i].lp));
        /* bytes of the decoded token (vLLM: step_token.decoded_token, also under return_tokens_as_token_ids) */
        const char *dec = decoded ? t : (r->ctx->token_str ? r->ctx->token_str(r->ctx->tok_ctx, pos[i].id) : NULL);
        json_object_set_new(e, "bytes", dec ? oai_json_bytes(dec) : json_null());
        int32_t ids[OAI_MAX_LOGPROBS + 1];
        float lps[OAI_MAX_LOGPROBS + 1];
        lp_pos p = pos[i];
        if (p.k > OAI_MAX_LOGPROBS) p.k = OAI_MAX_LOGPROBS;
        int m = step_dict(&p, ids, lps);
        for (int q = 0; q < m && q < num_top; q++) {
            char b2[32];
            const char *tt = tok_str(r, ids[q], b2, NULL);
            json_t *te = json_object();
            if (!te) {
                json_decref(e), json_decref(tops);
                goto oom;
            }
            json_object_set_new(te, "token", jstr(tt));
            json_object_set_new(te, "logprob", oai_json_logprob(lps[q]));
            json_object_set_new(te, "bytes", oai_json_bytes(tt));
            json_array_append_new(tops, te);
        }
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(content, e);
    }
    json_decref(content);
    return root;
oom:
    json_decref(root), json_decref(content);
    return NULL;
}

/* Positions of prompt pi (prompt logprobs when they came, else none) into pos[0..n). */
static void prompt_positions(const oai_response *r, size_t pi, lp_pos *pos) {
    const oai_prompt *p = &r->req->prompts[pi];
    const prompt_state *ps = &r->prompts[pi];
    for (size_t i = 0; i < p->prompt.num_token_ids; i++) {
        pos[i] = (lp_pos){.id = p->prompt.token_ids[i], .none = true};
        if (ps->plp && i > 0 && !isnan(ps->plp[i])) {
            pos[i].none = false;
            pos[i].lp = ps->plp[i];
            if (ps->ptop_ids) pos[i].top_ids = ps->ptop_ids + i * (size_t)ps->pk, pos[i].top_lps = ps->ptop + i * (size_t)ps->pk, pos[i].k = ps->pk;
        }
    }
}

/* vLLM's prompt_logprobs field: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...]. */
static json_t *prompt_logprobs_json(const oai_response *r, size_t pi) {
    const prompt_state *ps = &r->prompts[pi];
    if (r->req->prompt_logprobs < 0 || !ps->plp) return json_null();
    const oai_prompt *p = &r->req->prompts[pi];
    json_t *arr = json_array();
    if (!arr) return NULL;
    for (size_t i = 0; i < p->prompt.num_token_ids; i++) {
        if (i == 0 || isnan(ps->plp[i])) {
            json_array_append_new(arr, json_null());
            continue;
        }
        json_t *d = json_object();
        if (!d) {
            json_decref(arr);
            return NULL;
        }
        /* the prompt token first (its rank is not known here: null), then the top k with ranks */
        int n = 1 + ps->pk;
        for (int q = 0; q < n; q++) {
            int32_t id = q == 0 ? p->prompt.token_ids[i] : ps->ptop_ids[i * (size_t)ps->pk + (size_t)(q - 1)];
            float lp = q == 0 ? ps->plp[i] : ps->ptop[i * (size_t)ps->pk + (size_t)(q - 1)];
            char key[16], buf[32];
            snprintf(key, sizeof key, "%d", (int)id);
            json_t *e = json_object();
            if (!e) break;
            json_object_set_new(e, "logprob", oai_json_logprob(lp));
            json_object_set_new(e, "rank", q == 0 ? json_null() : json_integer(q));
            json_object_set_new(e, "decoded_token", jstr(tok_str(r, id, buf, NULL)));
            json_t *prev = json_object_get(d, key);
            if (prev && q > 0) json_object_set_new(prev, "rank", json_integer(q)); /* the prompt token's rank */
            if (!prev) json_object_set_new(d, key, e);
            else json_decref(e);
        }
        json_array_append_new(arr, d);
    }
    return arr;
}

/* ------------------------------------------------------------------ */
/* Shared JSON pieces                                                  */
/* ------------------------------------------------------------------ */

static const char *finish_str(vllm_finish_reason f) {
    switch (f) {
    case VLLM_FINISH_STOP: return "stop";
    case VLLM_FINISH_LENGTH: return "length";
    case VLLM_FINISH_ABORT: return "abort";
    default: return NULL;
    }
}

static json_t *usage_json(const oai_response *r, size_t prompt_tokens, size_t completion_tokens, bool details) {
    json_t *u = json_object();
    if (!u) return NULL;
    json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)prompt_tokens));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)(prompt_tokens + completion_tokens)));
    json_object_set_new(u, "completion_tokens", json_integer((json_int_t)completion_tokens));
    if (details && r->ctx->enable_prompt_tokens_details) {
        size_t cached = 0;
        bool have = false;
        for (size_t i = 0; i < r->req->num_prompts; i++)
            if (r->prompts[i].have_cached) cached += r->prompts[i].cached_tokens, have = true;
        if (have) {
            json_t *d = json_object();
            if (d) json_object_set_new(d, "cached_tokens", json_integer((json_int_t)cached));
            json_object_set_new(u, "prompt_tokens_details", d);
        }
    }
    return u;
}

static void totals(const oai_response *r, size_t *prompt_tokens, size_t *completion_tokens) {
    *prompt_tokens = 0, *completion_tokens = 0;
    for (size_t i = 0; i < r->req->num_prompts; i++) *prompt_tokens += r->req->prompts[i].prompt.num_token_ids;
    for (size_t i = 0; i < r->num_choices; i++) *completion_tokens += r->choices[i].num_tokens;
}

/* {"id", "object", "created", "model", "choices": choices} */
static json_t *envelope(const oai_response *r, const char *object, json_t *choices) {
    json_t *o = json_object();
    if (!o || !choices) {
        json_decref(o), json_decref(choices);
        return NULL;
    }
    json_object_set_new(o, "id", jstr(r->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer((json_int_t)r->created));
    json_object_set_new(o, "model", jstr(r->model));
    json_object_set_new(o, "choices", choices);
    return o;
}

/* Appends "data: <json>\n\n" and drops o. */
static vllm_status sse_event(oai_buf *b, json_t *o) {
    if (!o) return VLLM_ERR_NO_MEMORY;
    size_t n;
    char *s = oai_json_dump(o, &n);
    json_decref(o);
    if (!s) return VLLM_ERR_NO_MEMORY;
    oai_buf_puts(b, "data: ");
    oai_buf_put(b, s, n);
    oai_buf_puts(b, "\n\n");
    free(s);
    return b->oom ? VLLM_ERR_NO_MEMORY : VLLM_OK;
}

bool oai_choice_parse(const oai_response *r, const choice *ch, oai_parsed_message *m, const char **content,
                      size_t *content_len) {
    const char *text = ch->text.data ? ch->text.data : "";
    memset(m, 0, sizeof *m);
    if (r->parsers && oai_parse_message(r->parsers, text, ch->text.len, m) != VLLM_OK) return false;
    *content = r->parsers ? m->content : text;
    *content_len = r->parsers ? m->content_len : ch->text.len;
    return true;
}

vllm_status oai_sse_named(oai_buf *b, const char *type, json_t *o) {
    if (!o) return VLLM_ERR_NO_MEMORY;
    size_t n;
    char *s = oai_json_dump(o, &n);
    json_decref(o);
    if (!s) return VLLM_ERR_NO_MEMORY;
    oai_buf_puts(b, "event: ");
    oai_buf_puts(b, type);
    oai_buf_puts(b, "\ndata: ");
    oai_buf_put(b, s, n);
    oai_buf_puts(b, "\n\n");
    free(s);
    return b->oom ? VLLM_ERR_NO_MEMORY : VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Non-streaming bodies                                                */
/* ------------------------------------------------------------------ */

/* pos for prefix positions (echo) + the choice's tokens. */
lp_pos *oai_choice_positions(const oai_response *r, const choice *ch, size_t pi, bool with_prompt, bool with_output,
                                size_t *n) {
    size_t np = with_prompt ? r->req->prompts[pi].prompt.num_token_ids : 0;
    size_t no = with_output ? ch->num_tokens : 0;
    lp_pos *pos = malloc((np + no ? np + no : 1) * sizeof *pos);
    if (!pos) return NULL;
    if (np) prompt_positions(r, pi, pos);
    for (size_t t = 0; t < no; t++)
        pos[np + t] = (lp_pos){.id = ch->ids[t],
                               .lp = ch->lps[t],
                               .top_ids = ch->k ? ch->top_ids + t * (size_t)ch->k : NULL,
                               .top_lps = ch->k ? ch->top_lps + t * (size_t)ch->k : NULL,
                               .k = ch->k};
    *n = np + no;
    return pos;
}

static json_t *completion_body(oai_response *r) {
    const oai_request *q = r->req;
    json_t *choices = json_array();
    if (!choices) return NULL;
    for (size_t i = 0; i < r->num_choices; i++) {
        choice *ch = &r->choices[i];
        size_t pi = i / (size_t)q->n;
        const char *ptext = q->echo && q->prompts[pi].text ? q->prompts[pi].text : "";
        json_t *c = json_object();
        if (!c) goto oom;
        json_array_append_new(choices, c);
        json_object_set_new(c, "index", json_integer((json_int_t)i));
        oai_buf text = {0};
        oai_buf_puts(&text, ptext);
        if (!q->echo_only) oai_buf_put(&text, ch->text.data ? ch->text.data : "", ch->text.len);
        if (text.oom) {
            oai_buf_free(&text);
            goto oom;
        }
        json_object_set_new(c, "text", oai_json_str(text.data, text.len));
        oai_buf_free(&text);
        if (q->logprobs >= 0) {
            size_t n;
            lp_pos *pos = oai_choice_positions(r, ch, pi, q->echo, !q->echo_only, &n);
            if (!pos) goto oom;
            json_object_set_new(c, "logprobs", completion_logprobs(r, pos, n, 0));
            free(pos);
        } else {
            json_object_set_new(c, "logprobs", json_null());
        }
        const char *fr = ch->finished ? finish_str(ch->finish) : NULL;
        json_object_set_new(c, "finish_reason", fr ? json_string(fr) : json_null());
        json_object_set_new(c, "stop_reason", ch->stop_reason ? jstr(ch->stop_reason) : json_null());
        json_object_set_new(c, "prompt_logprobs", prompt_logprobs_json(r, pi));
    }
    json_t *o = envelope(r, "text_completion", choices);
    size_t pt, ct;
    totals(r, &pt, &ct);
    if (o) json_object_set_new(o, "usage", usage_json(r, pt, ct, true));
    return o;
oom:
    json_decref(choices);
    return NULL;
}

/* vLLM's finish_reason of a whole chat reply: "tool_calls" when tool_choice auto found calls or when
 * tool_choice required stopped normally (vLLM PR #25054 aligned both with OpenAI; named keeps "stop"); else
 * the engine's, "stop" by default. chat_completion/serving.py chat_completion_full_generator. */
static const char *chat_finish(const oai_response *r, const choice *ch, bool auto_tools_called) {
    bool stopped = ch->finished && ch->finish == VLLM_FINISH_STOP;
    if (auto_tools_called || (r->req->tool_mode == OAI_TOOLS_REQUIRED && stopped)) return "tool_calls";
    const char *fr = ch->finished ? finish_str(ch->finish) : NULL;
    return fr ? fr : "stop";
}

/* One choice's message (vLLM's ChatMessage: tool_calls left out when empty; echo prepends the last
 * message to the content) and its finish_reason. */
static json_t *chat_message(const oai_response *r, const choice *ch, const char **finish) {
    const oai_request *q = r->req;
    const char *text = ch->text.data ? ch->text.data : "";
    oai_parsed_message m = {0};
    if (r->parsers && oai_parse_message(r->parsers, text, ch->text.len, &m) != VLLM_OK) return NULL;
    const char *content = r->parsers ? m.content : text;
    size_t content_len = r->parsers ? m.content_len : ch->text.len;
    oai_buf c = {0};
    if (q->echo_text) oai_buf_puts(&c, q->echo_text);
    if (content) oai_buf_put(&c, content, content_len);
    json_t *msg = json_object(), *calls = m.calls.num_calls ? toolp_result_tool_calls_json(&m.calls) : NULL;
    if (!msg || c.oom || (m.calls.num_calls && !calls)) {
        json_decref(msg), json_decref(calls), oai_buf_free(&c), oai_parsed_message_clear(&m);
        return NULL;
    }
    json_object_set_new(msg, "role", jstr(q->chat_role ? q->chat_role : "assistant"));
    json_object_set_new(msg, "content", content || q->echo_text ? oai_json_str(c.data ? c.data : "", c.len) : json_null());
    json_object_set_new(msg, "refusal", json_null());
    json_object_set_new(msg, "annotations", json_null());
    json_object_set_new(msg, "audio", json_null());
    json_object_set_new(msg, "function_call", json_null());
    if (calls) json_object_set_new(msg, "tool_calls", calls);
    json_object_set_new(msg, "reasoning", m.reasoning ? oai_json_str(m.reasoning, m.reasoning_len) : json_null());
    *finish = chat_finish(r, ch, m.auto_tools_called);
    oai_buf_free(&c);
    oai_parsed_message_clear(&m);
    return msg;
}

static json_t *chat_body(oai_response *r) {
    const oai_request *q = r->req;
    json_t *choices = json_array();
    if (!choices) return NULL;
    for (size_t i = 0; i < r->num_choices; i++) {
        choice *ch = &r->choices[i];
        const char *fr = "stop";
        json_t *c = json_object(), *msg = chat_message(r, ch, &fr);
        if (!c || !msg) {
            json_decref(c), json_decref(msg);
            goto oom;
        }
        json_array_append_new(choices, c);
        json_object_set_new(c, "index", json_integer((json_int_t)i));
        json_object_set_new(c, "message", msg);
        if (q->logprobs >= 0 && !r->hide_metadata) {
            size_t n;
            lp_pos *pos = oai_choice_positions(r, ch, 0, false, true, &n);
            if (!pos) goto oom;
            json_object_set_new(c, "logprobs", oai_chat_logprobs(r, pos, n, q->logprobs));
            free(pos);
        } else {
            json_object_set_new(c, "logprobs", json_null());
        }
        json_object_set_new(c, "finish_reason", json_string(fr));
        json_object_set_new(c, "stop_reason", ch->stop_reason ? jstr(ch->stop_reason) : json_null());
    }
    json_t *o = envelope(r, "chat.completion", choices);
    size_t pt, ct;
    totals(r, &pt, &ct);
    if (o) {
        json_object_set_new(o, "usage", usage_json(r, pt, ct, true));
        json_object_set_new(o, "prompt_logprobs", prompt_logprobs_json(r, 0));
    }
    return o;
oom:
    json_decref(choices);
    return NULL;
}

vllm_status oai_response_body(oai_response *r, char **body, size_t *len, oai_error *err) {
    *body = NULL;
    if (len) *len = 0;
    if (r->failed) {
        if (err) *err = r->err;
        return VLLM_ERR_BACKEND;
    }
    json_t *o = r->req->api == OAI_API_RESPONSES   ? oai_responses_body(r)
                : r->req->api == OAI_API_ANTHROPIC ? oai_anthropic_body(r)
                : r->req->kind == OAI_KIND_CHAT    ? chat_body(r)
                                                   : completion_body(r);
    size_t n = 0;
    char *s = o ? oai_json_dump(o, &n) : NULL;
    json_decref(o);
    if (len) *len = n;
    /* the tree just freed took about 12 to 15 times the text (measured with logprobs):
       oai_response_free gives it back with the choices' arrays */
    r->body_bytes = n > SIZE_MAX / 16 ? SIZE_MAX / 16 * 12 : n * 12;
    if (!s) {
        if (err) oai_error_set(err, 500, NULL, "out of memory");
        return VLLM_ERR_NO_MEMORY;
    }
    *body = s;
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

static json_t *stream_usage(const oai_response *r, size_t pi, const choice *ch) {
    return usage_json(r, r->req->prompts[pi].prompt.num_token_ids, ch->num_tokens, false);
}

/* Positions of one chunk's tokens. */
lp_pos *oai_chunk_positions(const vllm_stream_chunk *c, size_t *n) {
    lp_pos *pos = malloc((c->num_tokens ? c->num_tokens : 1) * sizeof *pos);
    if (!pos) return NULL;
    int k = c->top_logprob_ids && c->top_logprobs && c->num_top_logprobs > 0 ? c->num_top_logprobs : 0;
    for (size_t t = 0; t < c->num_tokens; t++)
        pos[t] = (lp_pos){.id = c->token_ids[t],
                          .lp = c->logprobs ? c->logprobs[t] : NAN,
                          .top_ids = k ? c->top_logprob_ids + t * (size_t)k : NULL,
                          .top_lps = k ? c->top_logprobs + t * (size_t)k : NULL,
                          .k = k};
    *n = c->num_tokens;
    return pos;
}

static vllm_status stream_completion(oai_response *r, size_t pi, choice *ch, const vllm_stream_chunk *c, oai_buf *b) {
    const oai_request *q = r->req;
    size_t index = (size_t)(ch - r->choices);
    bool echo_now = q->echo && !ch->echoed;
    bool with_output = !(q->echo_only); /* echo with max_tokens 0: the prompt alone */
    if (!echo_now && (q->echo_only || (!c->text_len && !c->num_tokens && !ch->num_tokens)) &&
        c->finish_reason == VLLM_FINISH_NONE)
        return VLLM_OK; /* nothing to say yet (vLLM skips empty chunked-prefill outputs) */

    oai_buf text = {0};
    if (echo_now) oai_buf_puts(&text, q->prompts[pi].text ? q->prompts[pi].text : "");
    if (with_output && c->text) oai_buf_put(&text, c->text, c->text_len);
    if (text.oom) {
        oai_buf_free(&text);
        return NOMEM();
    }
    json_t *logprobs = json_null();
    if (q->logprobs >= 0) {
        size_t np = echo_now ? q->prompts[pi].prompt.num_token_ids : 0, no = 0;
        lp_pos *out = with_output ? oai_chunk_positions(c, &no) : NULL;
        lp_pos *pos = malloc((np + no ? np + no : 1) * sizeof *pos);
        if (!pos || (with_output && !out)) {
            free(out), free(pos), oai_buf_free(&text);
            return NOMEM();
        }
        if (np) prompt_positions(r, pi, pos);
        if (no) memcpy(pos + np, out, no * sizeof *pos);
        logprobs = completion_logprobs(r, pos, np + no, ch->text_chars);
        free(out), free(pos);
    }
    if (echo_now) ch->echoed = true;
    ch->text_chars += oai_utf8_chars(text.data ? text.data : "", text.len);
    ch->num_tokens += c->num_tokens; /* counted even when not shown (echo_only), as vLLM */
    vllm_status st = oai_record_finish(r, ch, c);

    json_t *choice_o = json_object(), *choices = json_array();
    if (choice_o) {
        json_object_set_new(choice_o, "index", json_integer((json_int_t)index));
        json_object_set_new(choice_o, "text", oai_json_str(text.data, text.len));
        json_object_set_new(choice_o, "logprobs", logprobs);
        const char *fr = finish_str(c->finish_reason);
        json_object_set_new(choice_o, "finish_reason", fr ? json_string(fr) : json_null());
        json_object_set_new(choice_o, "stop_reason", c->stop_reason ? jstr(c->stop_reason) : json_null());
    } else {
        json_decref(logprobs);
    }
    oai_buf_free(&text);
    if (choices && choice_o) json_array_append_new(choices, choice_o);
    else json_decref(choice_o);
    json_t *o = envelope(r, "text_completion", choices);
    if (o && q->continuous_usage_stats) json_object_set_new(o, "usage", stream_usage(r, pi, ch));
    if (st == VLLM_OK) st = sse_event(b, o);
    else json_decref(o);
    return st;
}

/* One chat.completion.chunk with one choice. */
static vllm_status chat_chunk(oai_response *r, oai_buf *b, size_t index, json_t *delta, json_t *logprobs,
                              const char *finish, const char *stop_reason, bool with_stop, const choice *ch) {
    json_t *c = json_object(), *choices = json_array();
    if (c) {
        json_object_set_new(c, "index", json_integer((json_int_t)index));
        json_object_set_new(c, "delta", delta);
        json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
        json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
        if (with_stop) json_object_set_new(c, "stop_reason", stop_reason ? jstr(stop_reason) : json_null());
    } else {
        json_decref(delta), json_decref(logprobs);
    }
    if (choices && c) json_array_append_new(choices, c);
    else json_decref(c);
    json_t *o = envelope(r, "chat.completion.chunk", choices);
    if (o && r->req->continuous_usage_stats) json_object_set_new(o, "usage", stream_usage(r, 0, ch));
    return sse_event(b, o);
}

static json_t *delta(const char *role, const char *content, size_t len) {
    json_t *d = json_object();
    if (!d) return NULL;
    if (role) json_object_set_new(d, "role", jstr(role));
    json_object_set_new(d, "content", oai_json_str(content, len));
    return d;
}

/* The delta of one chunk with reasoning / tool parsing: NULL *d and VLLM_OK when there is nothing to send
 * (vLLM skips the chunk unless it finishes or carries logprobs; it then sends an empty delta). A
 * finishing chunk's finish_reason is "tool_calls" when tool-call deltas were streamed, tool_choice is not
 * named and the engine stopped normally (chat_completion/serving.py chat_completion_stream_generator). */
static vllm_status parsed_delta(oai_response *r, choice *ch, const vllm_stream_chunk *c, bool with_logprobs,
                                const char **fr, json_t **d) {
    vllm_status st = ch->dp ? VLLM_OK : oai_delta_parser_new(r->parsers, &ch->dp);
    if (st == VLLM_OK) st = oai_delta_parser_push(ch->dp, c->text, c->text_len, *fr != NULL, d);
    if (st == VLLM_ERR_NO_MEMORY) return NOMEM();
    if (st != VLLM_OK) {
        oai_error_set(&r->err, 500, NULL, "%s", vllm_last_error());
        return st;
    }
    if (!*d && (*fr || with_logprobs) && !(*d = json_object())) return NOMEM();
    if (*fr && oai_delta_parser_tools_streamed(ch->dp) && r->req->tool_mode != OAI_TOOLS_NAMED &&
        c->finish_reason == VLLM_FINISH_STOP)
        *fr = "tool_calls";
    return VLLM_OK;
}

static vllm_status stream_chat(oai_response *r, choice *ch, const vllm_stream_chunk *c, oai_buf *b) {
    const oai_request *q = r->req;
    vllm_status st = VLLM_OK;
    if (!r->started) {
        /* the first output: a role chunk for every choice, then the echoed last message */
        r->started = true;
        for (size_t i = 0; i < r->num_choices && st == VLLM_OK; i++)
            st = chat_chunk(r, b, i, delta(q->chat_role ? q->chat_role : "assistant", "", 0), NULL, NULL, NULL, false,
                            &r->choices[i]);
        for (size_t i = 0; q->echo_text && i < r->num_choices && st == VLLM_OK; i++) {
            st = chat_chunk(r, b, i, delta(NULL, q->echo_text, strlen(q->echo_text)), NULL, NULL, NULL, false,
                            &r->choices[i]);
            r->choices[i].echoed = true;
        }
        if (st != VLLM_OK) return NOMEM();
    }
    if (ch->finished) return VLLM_OK; /* vLLM: finish_reason_sent */
    if (!c->text_len && !c->num_tokens && !ch->num_tokens && c->finish_reason == VLLM_FINISH_NONE) return VLLM_OK;
    size_t index = (size_t)(ch - r->choices);
    json_t *logprobs = NULL;
    if (q->logprobs >= 0 && !r->hide_metadata) {
        size_t n;
        lp_pos *pos = oai_chunk_positions(c, &n);
        if (!pos) return NOMEM();
        logprobs = oai_chat_logprobs(r, pos, n, q->logprobs);
        free(pos);
        if (!logprobs) return NOMEM();
    }
    ch->num_tokens += c->num_tokens;
    ch->text_chars += oai_utf8_chars(c->text ? c->text : "", c->text_len);
    if ((st = oai_record_finish(r, ch, c)) != VLLM_OK) {
        json_decref(logprobs);
        return st;
    }
    const char *fr = finish_str(c->finish_reason);
    json_t *d = NULL;
    if (!r->parsers) d = delta(NULL, c->text ? c->text : "", c->text_len);
    else if ((st = parsed_delta(r, ch, c, logprobs != NULL, &fr, &d)) != VLLM_OK || !d) {
        json_decref(logprobs);
        return st;
    }
    st = chat_chunk(r, b, index, d, logprobs, fr, c->stop_reason, fr != NULL, ch);
    return st == VLLM_OK ? VLLM_OK : NOMEM();
}

vllm_status oai_response_stream_chunk(oai_response *r, size_t prompt_index, const vllm_stream_chunk *c, char **sse,
                                      size_t *len) {
    *sse = NULL;
    if (len) *len = 0;
    if (!r || !c) return VLLM_ERR_INVALID_ARG;
    choice *ch = oai_choice_of(r, prompt_index, c);
    if (!ch) return VLLM_ERR_INVALID_ARG;
    oai_buf b = {0};
    vllm_status st;
    if (c->error) {
        /* vLLM: a GenerationError becomes one error event; the caller sends [DONE] next */
        oai_engine_error(r, c->error);
        if (r->req->api != OAI_API_OPENAI) {
            st = r->req->api == OAI_API_RESPONSES ? oai_responses_stream_error(r, &b) : oai_anthropic_stream_error(r, &b);
            if (st == VLLM_OK && !(*sse = oai_buf_take(&b, len))) st = VLLM_ERR_NO_MEMORY;
            if (st != VLLM_OK) oai_buf_free(&b);
            return st;
        }
        char *e = oai_error_sse(&r->err);
        if (!e) return VLLM_ERR_NO_MEMORY;
        *sse = e;
        if (len) *len = strlen(e);
        return VLLM_OK;
    }
    if ((st = oai_take_prompt_info(r, prompt_index, c)) != VLLM_OK) return st;
    st = r->req->api == OAI_API_RESPONSES   ? oai_responses_stream_chunk(r, ch, c, &b)
         : r->req->api == OAI_API_ANTHROPIC ? oai_anthropic_stream_chunk(r, ch, c, &b)
         : r->req->kind == OAI_KIND_CHAT    ? stream_chat(r, ch, c, &b)
                                            : stream_completion(r, prompt_index, ch, c, &b);
    if (st != VLLM_OK) {
        oai_buf_free(&b);
        return st;
    }
    *sse = oai_buf_take(&b, len);
    return *sse ? VLLM_OK : VLLM_ERR_NO_MEMORY;
}

vllm_status oai_response_stream_end(oai_response *r, char **sse, size_t *len) {
    *sse = NULL;
    if (len) *len = 0;
    if (!r) return VLLM_ERR_INVALID_ARG;
    oai_buf b = {0};
    if (r->req->api != OAI_API_OPENAI) {
        vllm_status st = r->failed                         ? VLLM_OK
                         : r->req->api == OAI_API_RESPONSES ? oai_responses_stream_end(r, &b)
                                                            : oai_anthropic_stream_end(r, &b);
        if (st == VLLM_OK && !(*sse = oai_buf_take(&b, len))) st = VLLM_ERR_NO_MEMORY;
        if (st != VLLM_OK) oai_buf_free(&b);
        return st;
    }
    if (r->req->include_usage && !r->failed) {
        size_t pt, ct;
        totals(r, &pt, &ct);
        json_t *o = envelope(r, r->req->kind == OAI_KIND_CHAT ? "chat.completion.chunk" : "text_completion",
                             json_array());
        if (o) json_object_set_new(o, "usage", usage_json(r, pt, ct, true));
        if (sse_event(&b, o) != VLLM_OK) {
            oai_buf_free(&b);
            return VLLM_ERR_NO_MEMORY;
        }
    }
    oai_buf_puts(&b, "data: [DONE]\n\n");
    *sse = oai_buf_take(&b, len);
    return *sse ? VLLM_OK : VLLM_ERR_NO_MEMORY;
}
