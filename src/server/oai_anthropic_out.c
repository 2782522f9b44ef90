/*
 * oai_anthropic_out.c: replies of POST /v1/messages (Anthropic Messages API): the message object and its stream of
 * events, built from the engine's chunks through the chat reply parsers (reasoning -> thinking blocks, tool calls
 * -> tool_use blocks).
 *
 * Follows vLLM's vllm/entrypoints/anthropic/serving.py (messages_full_converter: thinking, text, then one tool_use
 * block per call with the arguments parsed as "input"; stop_reason end_turn / max_tokens / tool_use;
 * message_stream_converter: message_start, content_block_start / _delta / _stop per block in order, thinking_delta,
 * text_delta, input_json_delta, message_delta with the stop reason and usage, message_stop) and Anthropic's
 * streaming reference and @anthropic-ai/sdk's MessageStream (what clients need). Where vLLM departs from the
 * official API, the official form is used: message_start's message carries "type" and "role", a ping follows it,
 * a matched stop string gives stop_reason "stop_sequence" with stop_sequence set, ids are msg_ + 32 hex, and
 * errors mid-stream are an "error" event with Anthropic's error object.
 */
#include <stdlib.h>
#include <string.h>

#include "server/oai_response_internal.h"

static json_t *jstr(const char *s) { return oai_json_str(s ? s : "", s ? strlen(s) : 0); }

/* The stop reason and, for a matched stop string, the stop sequence. */
static const char *stop_reason(const choice *ch, bool tool_calls, const char **seq) {
    *seq = NULL;
    if (ch->finished && ch->finish == VLLM_FINISH_LENGTH) return "max_tokens";
    if (tool_calls) return "tool_use";
    if (ch->stop_reason) {
        *seq = ch->stop_reason;
        return "stop_sequence";
    }
    return "end_turn";
}

static json_t *usage(const oai_response *r, bool with_output) {
    size_t prompt, cached;
    oai_prompt_usage(r, &prompt, &cached);
    json_t *u = json_pack("{s:I, s:I}", "input_tokens", (json_int_t)prompt, "output_tokens",
                          (json_int_t)(with_output ? r->choices[0].num_tokens : 0));
    if (u && r->ctx->enable_prompt_tokens_details) {
        json_object_set_new(u, "cache_read_input_tokens", json_integer((json_int_t)cached));
        json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
    }
    return u;
}

/* A tool_use block's input: the arguments parsed (an object), {} when they do not parse. */
static json_t *tool_input(const char *args, size_t len) {
    json_t *in = len ? json_loadb(args, len, 0, NULL) : NULL;
    if (json_is_object(in)) return in;
    json_decref(in);
    return json_object();
}

static json_t *message(const oai_response *r, json_t *content, const char *stop, const char *seq, json_t *use) {
    json_t *o = json_object();
    if (!o) {
        json_decref(content), json_decref(use);
        return NULL;
    }
    json_object_set_new(o, "id", jstr(r->id));
    json_object_set_new(o, "type", json_string("message"));
    json_object_set_new(o, "role", json_string("assistant"));
    json_object_set_new(o, "content", content ? content : json_array());
    json_object_set_new(o, "model", jstr(r->model));
    json_object_set_new(o, "stop_reason", stop ? json_string(stop) : json_null());
    json_object_set_new(o, "stop_sequence", seq ? jstr(seq) : json_null());
    json_object_set_new(o, "usage", use ? use : json_null());
    return o;
}

/* ---- non-streaming ---- */

json_t *oai_anthropic_body(oai_response *r) {
    choice *ch = &r->choices[0];
    oai_parsed_message m;
    const char *content;
    size_t content_len;
    if (!oai_choice_parse(r, ch, &m, &content, &content_len)) return NULL;
    json_t *blocks = json_array();
    bool ok = blocks != NULL;
    if (ok && m.reasoning && r->req->include_reasoning)
        ok = !json_array_append_new(blocks, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                      oai_json_str(m.reasoning, m.reasoning_len), "signature", ""));
    if (ok && content && content_len)
        ok = !json_array_append_new(blocks, json_pack("{s:s, s:o}", "type", "text", "text", oai_json_str(content, content_len)));
    for (size_t i = 0; ok && i < m.calls.num_calls; i++) {
        toolp_call *c = &m.calls.calls[i];
        ok = !json_array_append_new(blocks, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", c->id, "name",
                                                      c->name, "input", tool_input(c->arguments, c->arguments_len)));
    }
    const char *seq, *stop = stop_reason(ch, m.calls.num_calls > 0, &seq);
    oai_parsed_message_clear(&m);
    if (!ok) {
        json_decref(blocks);
        return NULL;
    }
    return message(r, blocks, stop, seq, usage(r, true));
}

/* ---- streaming ---- */

/* "event: <type>\ndata: {"type":<type>, ...}\n\n"; o is taken. */
static vllm_status event(oai_buf *b, const char *type, json_t *o) { return oai_sse_named(b, type, o); }

static vllm_status start(oai_response *r, oai_buf *b) {
    if (r->api.started) return VLLM_OK;
    r->api.started = true;
    json_t *msg = message(r, NULL, NULL, NULL, usage(r, false));
    vllm_status st = event(b, "message_start", msg ? json_pack("{s:s, s:o}", "type", "message_start", "message", msg) : NULL);
    if (st == VLLM_OK) st = event(b, "ping", json_pack("{s:s}", "type", "ping"));
    return st;
}

static vllm_status close_block(oai_response *r, oai_buf *b) {
    api_stream *a = &r->api;
    if (a->open == API_NONE) return VLLM_OK;
    a->open = API_NONE;
    free(a->call_id), free(a->name);
    a->call_id = a->name = NULL;
    return event(b, "content_block_stop", json_pack("{s:s, s:I}", "type", "content_block_stop", "index", (json_int_t)a->index));
}

static vllm_status open_block(oai_response *r, oai_buf *b, int kind, const char *id, const char *name) {
    api_stream *a = &r->api;
    vllm_status st = close_block(r, b);
    if (st != VLLM_OK) return st;
    a->open = kind;
    a->index = a->count++;
    json_t *block = kind == API_TEXT        ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                    : kind == API_REASONING ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                                            : json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id ? id : "",
                                                        "name", name ? name : "", "input");
    return event(b, "content_block_start",
                 block ? json_pack("{s:s, s:I, s:o}", "type", "content_block_start", "index", (json_int_t)a->index,
                                   "content_block", block)
                       : NULL);
}

/* One delta of the open block (opened as needed): text_delta / thinking_delta / input_json_delta. */
static vllm_status block_delta(oai_response *r, oai_buf *b, int kind, const char *s, size_t n) {
    api_stream *a = &r->api;
    vllm_status st = a->open == kind ? VLLM_OK : open_block(r, b, kind, NULL, NULL);
    if (st != VLLM_OK) return st;
    json_t *v = oai_json_str(s, n);
    json_t *d = !v                      ? NULL
                : kind == API_TEXT      ? json_pack("{s:s, s:o}", "type", "text_delta", "text", v)
                : kind == API_REASONING ? json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", v)
                                        : json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json", v);
    return event(b, "content_block_delta",
                 d ? json_pack("{s:s, s:I, s:o}", "type", "content_block_delta", "index", (json_int_t)a->index, "delta", d)
                   : NULL);
}

static vllm_status tool_deltas(oai_response *r, oai_buf *b, const json_t *calls) {
    api_stream *a = &r->api;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        long long index = json_integer_value(json_object_get(c, "index"));
        vllm_status st;
        if (id) {
            if ((st = open_block(r, b, API_TOOL, id, json_string_value(json_object_get(fn, "name"))))) return st;
            a->tool_index = index;
            a->any_args = true; /* a tool call was streamed: stop_reason tool_use */
        } else if (a->open != API_TOOL || index != a->tool_index) {
            continue;
        }
        json_t *args = json_object_get(fn, "arguments");
        if (json_string_length(args) && (st = block_delta(r, b, API_TOOL, json_string_value(args), json_string_length(args))))
            return st;
    }
    return VLLM_OK;
}

vllm_status oai_anthropic_stream_chunk(oai_response *r, choice *ch, const vllm_stream_chunk *c, oai_buf *b) {
    vllm_status st = start(r, b);
    if (st != VLLM_OK) return NOMEM();
    if (ch->finished) return VLLM_OK;
    ch->num_tokens += c->num_tokens;
    if ((st = oai_record_finish(r, ch, c)) != VLLM_OK) return st;
    const char *text = c->text ? c->text : "";
    if (!r->parsers) return c->text_len && block_delta(r, b, API_TEXT, text, c->text_len) ? NOMEM() : VLLM_OK;
    json_t *d = NULL;
    st = ch->dp ? VLLM_OK : oai_delta_parser_new(r->parsers, &ch->dp);
    if (st == VLLM_OK) st = oai_delta_parser_push(ch->dp, text, c->text_len, c->finish_reason != VLLM_FINISH_NONE, &d);
    if (st != VLLM_OK) {
        if (st == VLLM_ERR_NO_MEMORY) return NOMEM();
        oai_error_set(&r->err, 500, NULL, "%s", vllm_last_error());
        return st;
    }
    json_t *reasoning = json_object_get(d, "reasoning"), *content = json_object_get(d, "content");
    if (json_string_length(reasoning) && r->req->include_reasoning)
        st = block_delta(r, b, API_REASONING, json_string_value(reasoning), json_string_length(reasoning));
    if (st == VLLM_OK && json_string_length(content))
        st = block_delta(r, b, API_TEXT, json_string_value(content), json_string_length(content));
    if (st == VLLM_OK && json_array_size(json_object_get(d, "tool_calls")))
        st = tool_deltas(r, b, json_object_get(d, "tool_calls"));
    json_decref(d);
    return st == VLLM_OK ? VLLM_OK : NOMEM();
}

vllm_status oai_anthropic_stream_end(oai_response *r, oai_buf *b) {
    vllm_status st = start(r, b);
    if (st == VLLM_OK) st = close_block(r, b);
    if (st != VLLM_OK) return VLLM_ERR_NO_MEMORY;
    const char *seq, *stop = stop_reason(&r->choices[0], r->api.any_args, &seq);
    json_t *d = json_pack("{s:s, s:o}", "stop_reason", stop, "stop_sequence", seq ? jstr(seq) : json_null());
    json_t *u = usage(r, true);
    if (!d || !u) {
        json_decref(d), json_decref(u);
        return VLLM_ERR_NO_MEMORY;
    }
    st = event(b, "message_delta", json_pack("{s:s, s:o, s:o}", "type", "message_delta", "delta", d, "usage", u));
    if (st == VLLM_OK) st = event(b, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return st;
}

vllm_status oai_anthropic_stream_error(oai_response *r, oai_buf *b) {
    char *e = oai_error_anthropic_json(&r->err);
    json_t *o = e ? json_loads(e, 0, NULL) : NULL;
    free(e);
    return event(b, "error", o);
}
