/*
 * tool_parser_hermes.c: the hermes parser (Hermes 2 Pro / 3, Qwen2.5, Qwen3: <tool_call>{json}</tool_call>) and
 * the call-object collector the JSON-call parsers share.
 *
 * Follows vllm/tool_parsers/hermes_tool_parser.py@02bb669b (Hermes2ProToolParser):
 * - extract_tool_calls: no "<tool_call>" in the text -> no tools, the text as content. Otherwise every
 *   match of <tool_call>(.*?)</tool_call>|<tool_call>(.*) (DOTALL: a last unclosed call runs to the end) is
 *   json.loads'ed; each must hold "name" (a str, pydantic's FunctionCall) and "arguments", which become
 *   json.dumps(arguments, ensure_ascii=False). content = the text before the first <tool_call>, None when
 *   empty. Any failure -> no tools and the whole text as content.
 * - extract_tool_calls_streaming: content only before the first <tool_call>, holding back a suffix that
 *   could start the tag (partial_tag_overlap); a call is announced with a new id once its name is complete.
 *   vLLM streams the raw text of the "arguments" value; here the value is re-serialised as the
 *   non-streaming path does, so the fragments join to the same string (they differ in vLLM whenever the
 *   model's spacing is not json.dumps').
 * - adjust_request: skip_special_tokens=False when tools are given (toolp_needs_special_tokens).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

/* ------------------------------------------------------------------ */
/* Call-object collector                                               */
/* ------------------------------------------------------------------ */

static void jc_begin(void *ctx) {
    tp_jcall *j = ctx;
    j->name.len = 0, j->pending.len = 0;
    j->name_seen = j->args_seen = j->has_call = false;
}

static int jc_key(void *ctx, const char *k, size_t n) {
    tp_jcall *j = ctx;
    if (n == 4 && memcmp(k, "name", 4) == 0 && !j->name_seen) {
        j->name_seen = true;
        return PJS_NAME;
    }
    for (int i = 0; i < j->nargs_keys; i++)
        if (strlen(j->args_keys[i]) == n && memcmp(k, j->args_keys[i], n) == 0 && !j->args_seen) {
            j->args_seen = true;
            return PJS_ARGS;
        }
    return PJS_DROP;
}

static void jc_out(void *ctx, int sink, const char *s, size_t n) {
    tp_jcall *j = ctx;
    if (sink == PJS_NAME) tp_put(&j->name, s, n);
    else if (j->has_call) tp_call_args(j->s, &j->s->calls[j->call], s, n);
    else tp_put(&j->pending, s, n);
}

static void jc_value_end(void *ctx, int sink, bool is_str) {
    tp_jcall *j = ctx;
    if (sink != PJS_NAME || !is_str || j->has_call) return;
    if (j->name.oom || j->pending.oom) {
        j->s->oom = true;
        return;
    }
    if (!tp_call_new(j->s, j->name.data ? j->name.data : "", j->name.len, j->style)) return;
    j->has_call = true;
    j->call = j->s->ncalls - 1;
    tp_call_args(j->s, &j->s->calls[j->call], j->pending.data ? j->pending.data : "", j->pending.len);
    j->pending.len = 0;
}

pjs_hooks tp_jcall_hooks(tp_jcall *j) {
    return (pjs_hooks){j, jc_key, jc_out, jc_value_end, jc_begin, NULL};
}

void tp_jcall_free(tp_jcall *j) {
    tp_buf_free(&j->name);
    tp_buf_free(&j->pending);
}

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

static vllm_status hermes_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    (void)p;
    const char *first = tp_find(text, len, OPEN);
    if (!first) return tp_result_plain(r, text, len);
    size_t pos = 0;
    bool oom = false;
    tp_buf args = {0};
    for (;;) {
        const char *a = tp_find(text + pos, len - pos, OPEN);
        if (!a) break;
        size_t bs = (size_t)(a - text) + strlen(OPEN), be;
        const char *b = tp_find(text + bs, len - bs, CLOSE);
        if (b) {
            be = (size_t)(b - text);
            pos = be + strlen(CLOSE);
        } else {
            be = pos = len;
        }
        pj *obj = pj_loads(text + bs, be - bs, &oom);
        pj *name = obj ? pj_obj_get(obj, "name") : NULL, *argv = obj ? pj_obj_get(obj, "arguments") : NULL;
        if (!obj || obj->t != PJ_OBJ || !name || name->t != PJ_STR || !argv) {
            pj_free(obj);
            tp_buf_free(&args);
            if (oom) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
            return tp_result_plain(r, text, len);
        }
        args.len = 0;
        pj_dumps(&args, argv, false);
        bool ok = !args.oom && tp_result_add(r, name->s, name->n, args.data, args.len, TP_ID_CHATCMPL);
        pj_free(obj);
        if (!ok) {
            tp_buf_free(&args);
            return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
        }
    }
    tp_buf_free(&args);
    r->tools_called = true;
    size_t cl = (size_t)(first - text);
    if (cl && !tp_result_content(r, text, cl)) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

typedef struct hermes_st {
    bool in_body, seen_tag;
    pj_stream *ps;
    tp_jcall jc;
} hermes_st;

static const char *const ARGS_KEYS[] = {"arguments"};

static bool hermes_init(toolp_stream *s) {
    hermes_st *h = calloc(1, sizeof *h);
    if (!h) return false;
    h->jc = (tp_jcall){.s = s, .args_keys = ARGS_KEYS, .nargs_keys = 1, .style = TP_ID_CHATCMPL};
    s->impl = h;
    return true;
}

static void hermes_free(void *impl) {
    hermes_st *h = impl;
    pjs_free(h->ps);
    tp_jcall_free(&h->jc);
    free(h);
}

static void body_feed(toolp_stream *s, hermes_st *h, const char *t, size_t n) {
    tp_withhold(s, t, n);
    if (h->ps && !pjs_done(h->ps) && !pjs_error(h->ps)) pjs_feed(h->ps, t, n);
    /* after the object: json.loads allows only whitespace (else the whole
       output is malformed, which cannot be unsent here) */
}

static void body_end(hermes_st *h) {
    if (h->ps) pjs_finish(h->ps);
    pjs_free(h->ps);
    h->ps = NULL;
    h->in_body = false;
}

static void hermes_step(toolp_stream *s, bool at_end) {
    hermes_st *h = s->impl;
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s), safe;
        if (!n) break;
        int w;
        const char *tag = h->in_body ? CLOSE : OPEN;
        size_t pos = tp_find_tags(in, n, &tag, 1, &w, &safe);
        if (w < 0) {
            size_t take = at_end ? n : safe;
            if (h->in_body) body_feed(s, h, in, take);
            else if (!h->seen_tag) tp_emit_content(s, in, take);
            else tp_withhold(s, in, take);
            tp_consume(s, take);
            break;
        }
        if (h->in_body) {
            body_feed(s, h, in, pos);
            body_end(h);
        } else {
            if (!h->seen_tag) tp_emit_content(s, in, pos);
            else tp_withhold(s, in, pos);
            h->seen_tag = h->in_body = true;
            pjs_hooks hk = tp_jcall_hooks(&h->jc);
            h->ps = pjs_new(PJS_OBJECT, false, &hk);
            if (!h->ps) {
                s->oom = true;
                return;
            }
        }
        tp_withhold(s, in + pos, strlen(tag));
        tp_consume(s, pos + strlen(tag));
    }
    if (at_end && h->in_body) body_end(h);
}

const tp_family tp_fam_hermes = {hermes_extract, hermes_init, hermes_step, hermes_free};
