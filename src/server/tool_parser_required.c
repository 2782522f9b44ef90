/*
 * tool_parser_required.c: tool_choice "required" replies: the forced JSON array of {"name", "parameters"} objects as tool calls, whole or streamed.
 *
 * vLLM forces the output of tool_choice "required" with the schema of get_json_schema_from_tools (an array of
 * {"name", "parameters"} objects, oai_structured.c) and reads it back without any --tool-call-parser:
 * - non-streaming (vllm/parser/abstract_parser.py DelegatingParser._extract_tool_calls, formerly
 *   serving_chat.py chat_completion_full_generator): TypeAdapter(list[FunctionDefinition]).validate_json(content)
 *   with the ValidationError suppressed (no calls at all then); each element -> a call with
 *   arguments = json.dumps(parameters, ensure_ascii=False) (parameters absent or null -> "null"). A
 *   FunctionDefinition is name: str, description: str | None, parameters: dict | None, other keys allowed.
 * - streaming (vllm/tool_parsers/streaming.py RequiredToolCallScanner + extract_required_tool_call_streaming):
 *   an incremental scanner finds, for each element of the array, where its "name" string and its "parameters"
 *   value lie; a call is announced (id, type, index = its position in the array, name, the arguments so far)
 *   once its name string is complete and valid JSON and its parameters value has started; later deltas carry
 *   {"index", "function": {"name": null, "arguments": <new text>}} (the explicit None survives
 *   exclude_unset). Elements come in order: an element that never becomes ready stops the ones after it.
 *   vLLM streams the raw text of the parameters value; here it is re-serialised as the non-streaming path
 *   does (pj_stream), so the fragments of a call join to the non-streaming arguments string (the convention
 *   of tool_parser.h; they differ in vLLM whenever the model's spacing is not json.dumps').
 * Work is linear in the text: each byte is scanned once and fed once to its call's re-serialiser.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

#define NOMEM() vt_error(VLLM_ERR_NO_MEMORY, "tool_choice required: out of memory")
#define NONE SIZE_MAX

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

/* One element as pydantic's FunctionDefinition: false when it does not validate. */
static bool valid_definition(const pj *o) {
    if (!o || o->t != PJ_OBJ) return false;
    const pj *name = pj_obj_get(o, "name"), *desc = pj_obj_get(o, "description"), *params = pj_obj_get(o, "parameters");
    if (!name || name->t != PJ_STR) return false;
    if (desc && desc->t != PJ_STR && desc->t != PJ_NULL) return false;
    if (params && params->t != PJ_OBJ && params->t != PJ_NULL) return false;
    return true;
}

vllm_status toolp_required_extract(const char *text, size_t len, toolp_result *out) {
    if (!out || (!text && len)) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_required_extract: NULL argument");
    *out = (toolp_result){0};
    bool oom = false;
    pj *root = pj_loads(text ? text : "", len, &oom);
    if (oom) return NOMEM();
    bool ok = root && root->t == PJ_ARR;
    for (size_t i = 0; ok && i < root->len; i++) ok = valid_definition(root->v[i]);
    vllm_status st = VLLM_OK;
    for (size_t i = 0; ok && st == VLLM_OK && i < root->len; i++) {
        const pj *name = pj_obj_get(root->v[i], "name"), *params = pj_obj_get(root->v[i], "parameters");
        tp_buf args = {0};
        if (params && params->t == PJ_OBJ) pj_dumps(&args, params, false);
        else tp_puts(&args, "null");
        if (args.oom || !tp_result_add(out, name->s, name->n, args.data, args.len, TP_ID_CHATCMPL)) st = NOMEM();
        tp_buf_free(&args);
    }
    pj_free(root);
    out->tools_called = out->num_calls > 0;
    if (st != VLLM_OK) toolp_result_clear(out);
    return st;
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

/* What the scanner expects inside one element object (vLLM's parse states). */
enum { EXPECT_KEY, EXPECT_COLON, EXPECT_VALUE, IN_STRING_VALUE, IN_CONTAINER_VALUE, IN_SCALAR_VALUE, AFTER_VALUE };

/* One element of the array: where its name and parameters lie, and its call. */
typedef struct rq_span {
    char *name;          /* decoded once the string closed and was valid JSON; else NULL */
    size_t args_start;   /* the parameters value's first byte, NONE until it starts */
    size_t args_end;     /* just past it, NONE while it is generated */
    bool announced;      /* the call's first delta was handed out */
    char id[48];
    pj_stream *ser;      /* re-serialises the parameters value */
    size_t fed;          /* text fed to ser up to here */
    tp_buf args;         /* the arguments produced */
    size_t sent;         /* args bytes handed out */
} rq_span;

struct toolp_required_stream {
    tp_buf text;         /* everything pushed (the spans point into it) */
    int depth;
    bool in_string, escaped, done, finished, oom;
    size_t string_start, value_start;
    size_t key_start, key_len; /* the current member's key, raw (NONE: no key) */
    int expect;
    rq_span **spans;     /* each allocated alone: a span's re-serialiser writes through a pointer to it */
    size_t nspans, capspans;
    long cur;            /* the open element, -1 when none */
    size_t first_open;   /* elements before it ended and were handed out whole */
    toolp_call_delta *deltas;
    size_t capdeltas;
};

vllm_status toolp_required_stream_new(toolp_required_stream **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_required_stream_new: NULL argument");
    toolp_required_stream *s = calloc(1, sizeof *s);
    if (!s) return NOMEM();
    s->cur = -1;
    s->key_start = NONE;
    *out = s;
    return VLLM_OK;
}

void toolp_required_stream_free(toolp_required_stream *s) {
    if (!s) return;
    for (size_t i = 0; i < s->nspans; i++) {
        free(s->spans[i]->name);
        pjs_free(s->spans[i]->ser);
        tp_buf_free(&s->spans[i]->args);
        free(s->spans[i]);
    }
    free(s->spans);
    free(s->deltas);
    tp_buf_free(&s->text);
    free(s);
}

size_t toolp_required_stream_num_calls(const toolp_required_stream *s) {
    size_t n = 0;
    for (size_t i = 0; s && i < s->nspans; i++) n += s->spans[i]->announced;
    return n;
}

static bool key_is(const toolp_required_stream *s, const char *k) {
    size_t n = strlen(k);
    return s->key_start != NONE && s->key_len == n && memcmp(s->text.data + s->key_start, k, n) == 0;
}

static rq_span *cur_span(toolp_required_stream *s) { return s->cur >= 0 ? s->spans[s->cur] : NULL; }

/* vLLM's end_value: the parameters value ends, or the name string is decoded. */
static void end_value(toolp_required_stream *s, size_t pos) {
    rq_span *sp = cur_span(s);
    if (key_is(s, "parameters")) {
        sp->args_end = pos;
    } else if (key_is(s, "name") && s->expect == IN_STRING_VALUE) {
        bool oom = false;
        pj *v = pj_loads(s->text.data + s->value_start, pos - s->value_start, &oom);
        free(sp->name);
        sp->name = v && v->t == PJ_STR ? tp_strndup(v->s, v->n) : NULL;
        if (oom || (v && v->t == PJ_STR && !sp->name)) s->oom = true;
        pj_free(v);
    }
    s->expect = AFTER_VALUE;
}

static void start_value(toolp_required_stream *s, size_t pos, int state) {
    s->value_start = pos;
    if (key_is(s, "parameters")) cur_span(s)->args_start = pos;
    s->expect = state;
}

static bool new_span(toolp_required_stream *s) {
    if (s->nspans == s->capspans) {
        size_t nc = s->capspans ? 2 * s->capspans : 4;
        rq_span **ns = realloc(s->spans, nc * sizeof *ns);
        if (!ns) return false;
        s->spans = ns, s->capspans = nc;
    }
    rq_span *sp = malloc(sizeof *sp);
    if (!sp) return false;
    *sp = (rq_span){.args_start = NONE, .args_end = NONE};
    s->spans[s->nspans] = sp;
    s->cur = (long)s->nspans++;
    s->expect = EXPECT_KEY;
    s->key_start = NONE;
    return true;
}

/* Python's str.isspace() for the bytes a JSON scalar can meet. */
static bool py_space(unsigned char c) { return tp_is_space(c) || (c >= 0x1c && c <= 0x1f); }

/* RequiredToolCallScanner.scan over text[from..): structural bytes only (UTF-8 continuation bytes never
 * match one). */
static void scan(toolp_required_stream *s, size_t from) {
    const char *t = s->text.data;
    for (size_t i = from; i < s->text.len && !s->done && !s->oom; i++) {
        char ch = t[i];
        bool in_elem = s->depth == 2 && s->cur >= 0;
        if (s->in_string) {
            if (s->escaped) {
                s->escaped = false;
            } else if (ch == '\\') {
                s->escaped = true;
            } else if (ch == '"') {
                s->in_string = false;
                if (in_elem && s->expect == EXPECT_KEY) {
                    s->key_start = s->string_start + 1, s->key_len = i - s->key_start;
                    s->expect = EXPECT_COLON;
                } else if (in_elem && s->expect == IN_STRING_VALUE) {
                    end_value(s, i + 1);
                }
            }
            continue;
        }
        if (ch == '"') {
            s->in_string = true;
            s->string_start = i;
            if (in_elem && s->expect == EXPECT_VALUE) start_value(s, i, IN_STRING_VALUE);
        } else if (ch == '{' || ch == '[') {
            if (s->depth == 0 && ch != '[') s->done = true;
            else if (s->depth == 1 && ch != '{') s->done = true;
            else if (s->depth == 1 && !new_span(s)) s->oom = true;
            else if (in_elem && s->expect == EXPECT_VALUE) start_value(s, i, IN_CONTAINER_VALUE);
            s->depth++;
        } else if (ch == '}' || ch == ']') {
            if (in_elem && s->expect == IN_SCALAR_VALUE) end_value(s, i);
            s->depth--;
            if (s->depth == 2 && s->cur >= 0 && s->expect == IN_CONTAINER_VALUE) end_value(s, i + 1);
            else if (s->depth == 1) s->cur = -1;
            else if (s->depth <= 0) s->done = true;
        } else if (!in_elem) {
            continue;
        } else if (ch == ':') {
            if (s->expect == EXPECT_COLON) s->expect = EXPECT_VALUE;
        } else if (ch == ',') {
            if (s->expect == IN_SCALAR_VALUE) end_value(s, i);
            s->expect = EXPECT_KEY;
            s->key_start = NONE;
        } else if (py_space((unsigned char)ch)) {
            if (s->expect == IN_SCALAR_VALUE) end_value(s, i);
        } else if (s->expect == EXPECT_VALUE) {
            start_value(s, i, IN_SCALAR_VALUE);
        }
    }
}

static void ser_out(void *ctx, int sink, const char *t, size_t n) {
    if (sink == PJS_ARGS) tp_put(&((rq_span *)ctx)->args, t, n);
}

/* Feeds the span's re-serialiser the parameters text available now. */
static bool feed(toolp_required_stream *s, rq_span *sp, bool at_end) {
    if (!sp->ser) {
        pjs_hooks h = {.ctx = sp, .out = ser_out};
        if (!(sp->ser = pjs_new(PJS_VALUE, false, &h))) return false;
        sp->fed = sp->args_start;
    }
    size_t end = sp->args_end != NONE ? sp->args_end : s->text.len;
    if (end > sp->fed && !pjs_done(sp->ser) && !pjs_error(sp->ser)) pjs_feed(sp->ser, s->text.data + sp->fed, end - sp->fed);
    sp->fed = end;
    if (sp->args_end != NONE || at_end) pjs_finish(sp->ser); /* a scalar ends at its delimiter */
    return !sp->args.oom;
}

static toolp_call_delta *next_delta(toolp_required_stream *s, size_t nd) {
    if (nd == s->capdeltas) {
        size_t nc = s->capdeltas ? 2 * s->capdeltas : 4;
        toolp_call_delta *d = realloc(s->deltas, nc * sizeof *d);
        if (!d) return NULL;
        s->deltas = d, s->capdeltas = nc;
    }
    return &s->deltas[nd];
}

/* extract_required_tool_call_streaming: the deltas of every ready element, in order. */
static vllm_status build(toolp_required_stream *s, bool at_end, toolp_delta *out) {
    *out = (toolp_delta){0};
    if (s->oom || s->text.oom) return NOMEM();
    size_t nd = 0;
    for (size_t i = s->first_open; i < s->nspans; i++) {
        rq_span *sp = s->spans[i];
        if (!sp->name || sp->args_start == NONE) break; /* not ready: nothing later is either */
        if (!feed(s, sp, at_end)) return NOMEM();
        bool whole = sp->args_end != NONE || at_end;
        size_t end = sp->args.len - (whole ? 0 : tp_utf8_incomplete_tail(sp->args.data ? sp->args.data : "", sp->args.len));
        if (sp->announced && end > sp->sent) {
            toolp_call_delta *d = next_delta(s, nd++);
            if (!d) return NOMEM();
            *d = (toolp_call_delta){.index = i, .arguments = sp->args.data + sp->sent, .arguments_len = end - sp->sent,
                                    .name_null = true};
        } else if (!sp->announced) {
            toolp_call_delta *d = next_delta(s, nd++);
            if (!d) return NOMEM();
            toolp_make_call_id(sp->id);
            *d = (toolp_call_delta){.index = i, .id = sp->id, .name = sp->name,
                                    .arguments = end ? sp->args.data : "", .arguments_len = end};
            sp->announced = true;
        }
        if (end > sp->sent) sp->sent = end;
        if (sp->args_end != NONE && i == s->first_open && sp->sent == sp->args.len) s->first_open++;
    }
    out->calls = nd ? s->deltas : NULL;
    out->num_calls = nd;
    return VLLM_OK;
}

vllm_status toolp_required_stream_push(toolp_required_stream *s, const char *piece, size_t len, toolp_delta *out) {
    if (!s || !out || (!piece && len)) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_required_stream_push: NULL argument");
    *out = (toolp_delta){0};
    if (s->finished) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_required_stream_push: the stream has finished");
    size_t from = s->text.len;
    if (len) tp_put(&s->text, piece, len);
    if (s->text.oom) return NOMEM();
    scan(s, from);
    return build(s, false, out);
}

vllm_status toolp_required_stream_finish(toolp_required_stream *s, toolp_delta *out) {
    if (!s || !out) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_required_stream_finish: NULL argument");
    *out = (toolp_delta){0};
    if (s->finished) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_required_stream_finish: the stream has finished");
    s->finished = true;
    return build(s, true, out);
}
