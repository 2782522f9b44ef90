/*
 * oai_responses_out.c: replies of POST /v1/responses (OpenAI Responses API): the response object and its stream
 * of events, built from the engine's chunks through the chat reply parsers (reasoning, tool calls).
 *
 * Follows vLLM's vllm/entrypoints/openai/responses/ (serving.py responses_full_generator and
 * responses_stream_generator, utils.py build_response_output_items: a reasoning item, then the message, then one
 * function_call item per call; status "incomplete" with incomplete_details {"reason": "max_output_tokens"} when the
 * length limit ended it; usage with cached and reasoning tokens; streaming: response.created,
 * response.in_progress, per item output_item.added / content_part.added / *.delta / *.done / content_part.done /
 * output_item.done, sequence_number from 0, response.completed) and OpenAI's API reference / openai-node's
 * ResponseStream (what clients need). Where vLLM breaks openai-node's responses.stream(), the official form is
 * used: a reasoning item streams response.content_part.added / .done with a reasoning_text part (vLLM sends
 * response.reasoning_part.*), and the items streamed are the items of response.completed (same ids; vLLM builds
 * new ones). Item ids are msg_ / rs_ / fc_ + 32 hex digits; a call's call_id is the tool parser's id.
 */
#include <stdlib.h>
#include <string.h>

#include "server/oai_response_internal.h"

/* ---- shared pieces ---- */

static json_t *jstr(const char *s) { return oai_json_str(s ? s : "", s ? strlen(s) : 0); }

static json_t *echo(const oai_response *r, const char *key, json_t *dflt) {
    json_t *v = oai_field(r->req->api_body, key);
    if (v) {
        json_decref(dflt);
        return json_incref(v);
    }
    return dflt ? dflt : json_null();
}

/* Tokens of a text (the reasoning's share of the output: vLLM counts the tokens the reasoning parser routed). */
static size_t count_tokens(const oai_response *r, const char *text, size_t len) {
    if (!len || !r->ctx->tokenize) return 0;
    char *t = strndup(text, len);
    int32_t *ids = NULL;
    size_t n = 0;
    if (t && r->ctx->tokenize(r->ctx->tok_ctx, t, false, &ids, &n) != VLLM_OK) n = 0;
    free(ids), free(t);
    return n;
}

static json_t *usage(const oai_response *r, size_t reasoning_tokens) {
    size_t prompt, cached;
    oai_prompt_usage(r, &prompt, &cached);
    size_t out = r->choices[0].num_tokens;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)prompt, "input_tokens_details",
                     "cached_tokens", (json_int_t)cached, "output_tokens", (json_int_t)out, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)reasoning_tokens, "total_tokens", (json_int_t)(prompt + out));
}

/* The response object (vLLM's ResponsesResponse.from_request, every field present). output and use are taken. */
static json_t *response_object(const oai_response *r, const char *status, json_t *output, json_t *use) {
    const oai_request *q = r->req;
    const vllm_sampling_params *sp = &q->prompts[0].params;
    json_t *o = json_object();
    if (!o) {
        json_decref(output), json_decref(use);
        return NULL;
    }
    bool incomplete = !strcmp(status, "incomplete");
    json_object_set_new(o, "id", jstr(r->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer((json_int_t)r->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details",
                        incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(o, "instructions", echo(r, "instructions", NULL));
    json_object_set_new(o, "metadata", echo(r, "metadata", NULL));
    json_object_set_new(o, "model", jstr(r->model));
    json_object_set_new(o, "output", output ? output : json_array());
    json_object_set_new(o, "parallel_tool_calls", echo(r, "parallel_tool_calls", json_true()));
    json_object_set_new(o, "temperature", json_real(sp->temperature));
    json_object_set_new(o, "tool_choice", echo(r, "tool_choice", json_string("auto")));
    json_object_set_new(o, "tools", echo(r, "tools", json_array()));
    json_object_set_new(o, "top_p", json_real(sp->top_p));
    json_object_set_new(o, "background", json_false());
    json_object_set_new(o, "max_output_tokens", json_integer(sp->max_tokens));
    json_object_set_new(o, "max_tool_calls", echo(r, "max_tool_calls", NULL));
    json_object_set_new(o, "previous_response_id", echo(r, "previous_response_id", NULL));
    json_object_set_new(o, "prompt", json_null());
    json_object_set_new(o, "reasoning", echo(r, "reasoning", NULL));
    json_object_set_new(o, "service_tier", echo(r, "service_tier", json_string("auto")));
    json_object_set_new(o, "store", json_boolean(q->api_store));
    json_object_set_new(o, "text", echo(r, "text", json_pack("{s:{s:s}}", "format", "type", "text")));
    json_object_set_new(o, "top_logprobs", q->logprobs >= 0 ? json_integer(q->logprobs) : json_null());
    json_object_set_new(o, "truncation", echo(r, "truncation", json_string("disabled")));
    json_object_set_new(o, "usage", use ? use : json_null());
    json_object_set_new(o, "user", echo(r, "user", NULL));
    return o;
}

static const char *final_status(const choice *ch) {
    return ch->finished && ch->finish == VLLM_FINISH_LENGTH ? "incomplete" : "completed";
}

static void new_id(char *out, const char *prefix) {
    char hex[33];
    oai_random_hex(hex, 32);
    snprintf(out, 48, "%s%s", prefix, hex);
}

static json_t *text_part(const char *text, size_t len, json_t *logprobs) {
    json_t *p = json_object();
    if (!p) {
        json_decref(logprobs);
        return NULL;
    }
    json_object_set_new(p, "annotations", json_array());
    json_object_set_new(p, "text", oai_json_str(text, len));
    json_object_set_new(p, "type", json_string("output_text"));
    json_object_set_new(p, "logprobs", logprobs ? logprobs : json_array());
    return p;
}

static json_t *message_item(const char *id, json_t *parts, const char *status) {
    return json_pack("{s:s, s:o, s:s, s:s, s:s}", "id", id, "content", parts, "role", "assistant", "status", status,
                     "type", "message");
}

static json_t *reasoning_item(const char *id, json_t *content, const char *status) {
    return json_pack("{s:s, s:[], s:s, s:o, s:n, s:s}", "id", id, "summary", "type", "reasoning", "content", content,
                     "encrypted_content", "status", status);
}

static json_t *call_item(const char *id, const char *call_id, const char *name, const char *args, size_t args_len,
                         const char *status) {
    json_t *a = oai_json_str(args, args_len);
    return a ? json_pack("{s:o, s:s, s:s, s:s, s:s, s:s}", "arguments", a, "call_id", call_id, "name", name, "type",
                         "function_call", "id", id, "status", status)
             : NULL;
}

/* The logprobs of the whole choice in the Responses form (chat's "content" list), or NULL when not asked. */
static json_t *choice_logprobs(const oai_response *r, const choice *ch) {
    if (r->req->logprobs < 0 || r->hide_metadata) return NULL;
    size_t n;
    lp_pos *pos = oai_choice_positions(r, ch, 0, false, true, &n);
    json_t *lp = pos ? oai_chat_logprobs(r, pos, n, r->req->logprobs) : NULL;
    free(pos);
    json_t *content = lp ? json_incref(json_object_get(lp, "content")) : NULL;
    json_decref(lp);
    return content;
}

/* ---- non-streaming ---- */

json_t *oai_responses_body(oai_response *r) {
    choice *ch = &r->choices[0];
    oai_parsed_message m;
    const char *content;
    size_t content_len;
    if (!oai_choice_parse(r, ch, &m, &content, &content_len)) return NULL;
    json_t *output = json_array();
    char id[48];
    bool ok = output != NULL;
    if (ok && m.reasoning && r->req->include_reasoning) {
        new_id(id, "rs_");
        json_t *c = json_pack("[{s:o, s:s}]", "text", oai_json_str(m.reasoning, m.reasoning_len), "type",
                              "reasoning_text");
        ok = c && !json_array_append_new(output, reasoning_item(id, c, "completed"));
    }
    if (ok && ((content && content_len) || (!m.calls.num_calls && !m.reasoning))) {
        new_id(id, "msg_");
        json_t *parts = json_array();
        if (parts && content && content_len &&
            json_array_append_new(parts, text_part(content, content_len, choice_logprobs(r, ch))))
            json_decref(parts), parts = NULL;
        ok = parts && !json_array_append_new(output, message_item(id, parts, "completed"));
    }
    for (size_t i = 0; ok && i < m.calls.num_calls; i++) {
        toolp_call *c = &m.calls.calls[i];
        new_id(id, "fc_");
        ok = !json_array_append_new(output, call_item(id, c->id, c->name, c->arguments, c->arguments_len, "completed"));
    }
    size_t reasoning_tokens = m.reasoning ? count_tokens(r, m.reasoning, m.reasoning_len) : 0;
    oai_parsed_message_clear(&m);
    json_t *last = json_array_get(output, json_array_size(output) - 1);
    if (ok && last && !strcmp(final_status(ch), "incomplete")) json_object_set_new(last, "status", json_string("incomplete"));
    if (!ok) {
        json_decref(output);
        return NULL;
    }
    json_t *o = response_object(r, final_status(ch), output, usage(r, reasoning_tokens));
    free(r->api_object);
    r->api_object = o ? oai_json_dump(o, NULL) : NULL;
    return o;
}

/* ---- streaming ---- */

/* "event: <type>\ndata: {...,"sequence_number":N,"type":<type>}\n\n"; o is taken. */
static vllm_status event(oai_response *r, oai_buf *b, const char *type, json_t *o) {
    if (!o) return VLLM_ERR_NO_MEMORY;
    json_object_set_new(o, "sequence_number", json_integer(r->api.seq++));
    json_object_set_new(o, "type", json_string(type));
    return oai_sse_named(b, type, o);
}

static vllm_status start(oai_response *r, oai_buf *b) {
    if (r->api.started) return VLLM_OK;
    r->api.started = true;
    if (!r->api.items && !(r->api.items = json_array())) return VLLM_ERR_NO_MEMORY;
    vllm_status st = event(r, b, "response.created", json_pack("{s:o}", "response", response_object(r, "in_progress", NULL, NULL)));
    if (st == VLLM_OK)
        st = event(r, b, "response.in_progress", json_pack("{s:o}", "response", response_object(r, "in_progress", NULL, NULL)));
    return st;
}

static json_t *item_ref(const api_stream *a) {
    return json_pack("{s:s, s:I}", "item_id", a->item_id, "output_index", (json_int_t)a->index);
}

/* Closes the open item: its done events; the finished item joins api.items. */
static vllm_status close_item(oai_response *r, oai_buf *b, const char *status) {
    api_stream *a = &r->api;
    if (a->open == API_NONE) return VLLM_OK;
    vllm_status st = VLLM_OK;
    const char *t = a->text.data ? a->text.data : "";
    size_t n = a->text.len;
    json_t *item = NULL;
    if (a->open == API_TEXT || a->open == API_REASONING) {
        bool text = a->open == API_TEXT;
        json_t *done = item_ref(a);
        if (done) {
            json_object_set_new(done, "content_index", json_integer(0));
            json_object_set_new(done, "text", oai_json_str(t, n));
            if (text) json_object_set_new(done, "logprobs", json_array());
        }
        st = event(r, b, text ? "response.output_text.done" : "response.reasoning_text.done", done);
        json_t *part = text ? text_part(t, n, NULL) : json_pack("{s:o, s:s}", "text", oai_json_str(t, n), "type", "reasoning_text");
        json_t *pd = item_ref(a);
        if (pd && part) {
            json_object_set_new(pd, "content_index", json_integer(0));
            json_object_set_new(pd, "part", json_deep_copy(part));
        }
        if (st == VLLM_OK) st = event(r, b, "response.content_part.done", pd);
        else json_decref(pd);
        json_t *parts = part ? json_pack("[o]", part) : NULL;
        item = !parts ? NULL : text ? message_item(a->item_id, parts, status) : reasoning_item(a->item_id, parts, status);
    } else {
        json_t *done = item_ref(a);
        if (done) {
            json_object_set_new(done, "arguments", oai_json_str(t, n));
            json_object_set_new(done, "name", jstr(a->name));
        }
        st = event(r, b, "response.function_call_arguments.done", done);
        item = call_item(a->item_id, a->call_id ? a->call_id : "", a->name ? a->name : "", t, n, status);
    }
    json_t *od = item ? json_pack("{s:O, s:I}", "item", item, "output_index", (json_int_t)a->index) : NULL;
    if (st == VLLM_OK) st = event(r, b, "response.output_item.done", od);
    else json_decref(od);
    if (st == VLLM_OK && (!item || json_array_append_new(a->items, item))) st = VLLM_ERR_NO_MEMORY;
    else if (st != VLLM_OK) json_decref(item);
    a->open = API_NONE;
    oai_buf_free(&a->text);
    free(a->call_id), free(a->name);
    a->call_id = a->name = NULL;
    return st;
}

/* Opens an item of kind (closing another kind first): output_item.added (+ content_part.added). */
static vllm_status open_item(oai_response *r, oai_buf *b, int kind, const char *call_id, const char *name) {
    api_stream *a = &r->api;
    vllm_status st = close_item(r, b, "completed");
    if (st != VLLM_OK) return st;
    a->open = kind;
    a->index = a->count++;
    oai_buf_put(&a->text, "", 0);
    json_t *item;
    if (kind == API_TEXT) {
        new_id(a->item_id, "msg_");
        item = message_item(a->item_id, json_array(), "in_progress");
    } else if (kind == API_REASONING) {
        new_id(a->item_id, "rs_");
        item = reasoning_item(a->item_id, json_array(), "in_progress");
    } else {
        new_id(a->item_id, "fc_");
        a->call_id = strdup(call_id ? call_id : "");
        a->name = strdup(name ? name : "");
        if (!a->call_id || !a->name) return VLLM_ERR_NO_MEMORY;
        item = call_item(a->item_id, a->call_id, a->name, "", 0, "in_progress");
    }
    st = event(r, b, "response.output_item.added",
               item ? json_pack("{s:o, s:I}", "item", item, "output_index", (json_int_t)a->index) : NULL);
    if (st != VLLM_OK || kind == API_TOOL) return st;
    json_t *part = kind == API_TEXT ? text_part("", 0, NULL) : json_pack("{s:s, s:s}", "text", "", "type", "reasoning_text");
    json_t *pa = item_ref(a);
    if (pa && part) {
        json_object_set_new(pa, "content_index", json_integer(0));
        json_object_set_new(pa, "part", part);
    } else {
        json_decref(part);
    }
    return event(r, b, "response.content_part.added", pa);
}

/* Text or reasoning text of the open item (opened as needed). */
static vllm_status text_delta(oai_response *r, oai_buf *b, int kind, const char *s, size_t n, json_t *logprobs) {
    api_stream *a = &r->api;
    vllm_status st = a->open == kind ? VLLM_OK : open_item(r, b, kind, NULL, NULL);
    if (st != VLLM_OK) {
        json_decref(logprobs);
        return st;
    }
    oai_buf_put(&a->text, s, n);
    json_t *d = item_ref(a);
    if (d) {
        json_object_set_new(d, "content_index", json_integer(0));
        json_object_set_new(d, "delta", oai_json_str(s, n));
        if (kind == API_TEXT) json_object_set_new(d, "logprobs", logprobs ? logprobs : json_array());
        else json_decref(logprobs);
    } else {
        json_decref(logprobs);
    }
    return event(r, b, kind == API_TEXT ? "response.output_text.delta" : "response.reasoning_text.delta", d);
}

static vllm_status tool_deltas(oai_response *r, oai_buf *b, const json_t *calls) {
    api_stream *a = &r->api;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        long long index = json_integer_value(json_object_get(c, "index"));
        vllm_status st = VLLM_OK;
        if (id) {
            if ((st = open_item(r, b, API_TOOL, id, name))) return st;
            a->tool_index = index;
        } else if (a->open != API_TOOL || index != a->tool_index) {
            continue; /* a fragment of a call no longer open */
        }
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        size_t n = args ? json_string_length(json_object_get(fn, "arguments")) : 0;
        if (!n) continue;
        oai_buf_put(&a->text, args, n);
        json_t *d = item_ref(a);
        if (d) json_object_set_new(d, "delta", oai_json_str(args, n));
        if ((st = event(r, b, "response.function_call_arguments.delta", d))) return st;
    }
    return VLLM_OK;
}

vllm_status oai_responses_stream_chunk(oai_response *r, choice *ch, const vllm_stream_chunk *c, oai_buf *b) {
    vllm_status st = start(r, b);
    if (st != VLLM_OK) return NOMEM();
    if (ch->finished) return VLLM_OK;
    json_t *logprobs = NULL;
    if (r->req->logprobs >= 0 && !r->hide_metadata && c->num_tokens) {
        size_t n;
        lp_pos *pos = oai_chunk_positions(c, &n);
        json_t *lp = pos ? oai_chat_logprobs(r, pos, n, r->req->logprobs) : NULL;
        free(pos);
        if (!lp) return NOMEM();
        logprobs = json_incref(json_object_get(lp, "content"));
        json_decref(lp);
    }
    ch->num_tokens += c->num_tokens;
    if ((st = oai_record_finish(r, ch, c)) != VLLM_OK) {
        json_decref(logprobs);
        return st;
    }
    const char *text = c->text ? c->text : "";
    if (!r->parsers) {
        if (c->text_len) return text_delta(r, b, API_TEXT, text, c->text_len, logprobs) ? NOMEM() : VLLM_OK;
        json_decref(logprobs);
        return VLLM_OK;
    }
    json_t *d = NULL;
    st = ch->dp ? VLLM_OK : oai_delta_parser_new(r->parsers, &ch->dp);
    if (st == VLLM_OK) st = oai_delta_parser_push(ch->dp, text, c->text_len, c->finish_reason != VLLM_FINISH_NONE, &d);
    if (st != VLLM_OK) {
        json_decref(logprobs);
        if (st == VLLM_ERR_NO_MEMORY) return NOMEM();
        oai_error_set(&r->err, 500, NULL, "%s", vllm_last_error());
        return st;
    }
    json_t *reasoning = json_object_get(d, "reasoning"), *content = json_object_get(d, "content");
    if (reasoning && json_string_length(reasoning) && r->req->include_reasoning)
        st = text_delta(r, b, API_REASONING, json_string_value(reasoning), json_string_length(reasoning), NULL);
    if (st == VLLM_OK && content && json_string_length(content)) {
        st = text_delta(r, b, API_TEXT, json_string_value(content), json_string_length(content), logprobs);
        logprobs = NULL;
    }
    if (st == VLLM_OK && json_array_size(json_object_get(d, "tool_calls")))
        st = tool_deltas(r, b, json_object_get(d, "tool_calls"));
    json_decref(logprobs);
    json_decref(d);
    return st == VLLM_OK ? VLLM_OK : NOMEM();
}

vllm_status oai_responses_stream_end(oai_response *r, oai_buf *b) {
    vllm_status st = start(r, b);
    choice *ch = &r->choices[0];
    if (st == VLLM_OK) st = close_item(r, b, final_status(ch)); /* the item the length limit cut: "incomplete" */
    if (st != VLLM_OK) return VLLM_ERR_NO_MEMORY;
    /* reasoning tokens: the reasoning items' text */
    size_t reasoning_tokens = 0, i;
    json_t *item;
    json_array_foreach(r->api.items, i, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        json_t *t = json_object_get(json_array_get(json_object_get(item, "content"), 0), "text");
        if (type && !strcmp(type, "reasoning") && json_is_string(t))
            reasoning_tokens += count_tokens(r, json_string_value(t), json_string_length(t));
    }
    json_t *o = response_object(r, final_status(ch), json_incref(r->api.items), usage(r, reasoning_tokens));
    free(r->api_object);
    r->api_object = o ? oai_json_dump(o, NULL) : NULL;
    return event(r, b, "response.completed", o ? json_pack("{s:o}", "response", o) : NULL);
}

vllm_status oai_responses_stream_error(oai_response *r, oai_buf *b) {
    vllm_status st = start(r, b);
    if (st != VLLM_OK) return st;
    return event(r, b, "error",
                 json_pack("{s:s, s:o, s:n}", "code", "server_error", "message",
                           oai_json_str(r->err.message, strlen(r->err.message)), "param"));
}
