/*
 * tool_parser_llama.c: the llama3_json / llama4_json parser (Llama 3.x and 4 JSON tool calls:
 * [<|python_tag|>]{"name": .., "arguments"|"parameters": {..}}; {...}).
 *
 * Follows vllm/tool_parsers/llama_tool_parser.py@13e48c2b (Llama3JsonToolParser):
 * - extract_tool_calls: neither <|python_tag|> nor "{" in the text -> no tools. Otherwise for every "{"
 *   past the end of the last decoded object (a "{" right at that end is skipped too, as vLLM's
 *   `start_index <= end_index` does) json.JSONDecoder.raw_decode runs there; a decode error, a missing
 *   "name" or a missing "arguments"/"parameters" ("arguments" wins when both) makes the whole output plain
 *   content. arguments = json.dumps(value, ensure_ascii=False); content = None when calls were found.
 * - extract_tool_calls_streaming: only a text that starts with <|python_tag|> or "{" is parsed for calls,
 *   anything else streams as content; the name is sent once complete; the arguments are json.dumps of the
 *   partial object (so the fragments join to the non-streaming string). Calls are separated by "; " (any
 *   text up to the next "{" is skipped here).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char BOT[] = "<|python_tag|>";

static vllm_status llama_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    (void)p;
    if (!tp_find(text, len, BOT) && !memchr(text, '{', len)) return tp_result_plain(r, text, len);
    bool oom = false;
    tp_buf args = {0};
    size_t end_index = 0;
    bool have_end = false;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '{' || (have_end && i <= end_index)) continue;
        size_t k;
        pj *obj = pj_raw_decode(text + i, len - i, &k, &oom);
        if (obj) end_index = i + k, have_end = true;
        pj *name = obj ? pj_obj_get(obj, "name") : NULL;
        pj *argv = obj ? pj_obj_get(obj, "arguments") : NULL;
        if (obj && !argv) argv = pj_obj_get(obj, "parameters");
        if (!obj || !name || name->t != PJ_STR || !argv) {
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
    if (!r->num_calls) return tp_result_plain(r, text, len);
    r->tools_called = true;
    return VLLM_OK;
}

enum { L_DECIDE, L_CONTENT, L_SEEK, L_OBJ, L_DEAD };

typedef struct llama_st {
    int state;
    pj_stream *ps;
    tp_jcall jc;
} llama_st;

static const char *const ARGS_KEYS[] = {"arguments", "parameters"};

static bool llama_init(toolp_stream *s) {
    llama_st *l = calloc(1, sizeof *l);
    if (!l) return false;
    l->jc = (tp_jcall){.s = s, .args_keys = ARGS_KEYS, .nargs_keys = 2, .style = TP_ID_CHATCMPL};
    s->impl = l;
    return true;
}

static void llama_free(void *impl) {
    llama_st *l = impl;
    pjs_free(l->ps);
    tp_jcall_free(&l->jc);
    free(l);
}

static void llama_step(toolp_stream *s, bool at_end) {
    llama_st *l = s->impl;
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s);
        if (!n) break;
        switch (l->state) {
        case L_DECIDE:
            if (in[0] == '{') {
                l->state = L_SEEK;
            } else if (tp_starts(in, n, BOT)) {
                tp_withhold(s, in, strlen(BOT));
                tp_consume(s, strlen(BOT));
                l->state = L_SEEK;
            } else if (n < strlen(BOT) && memcmp(in, BOT, n) == 0 && !at_end) {
                return; /* may still become <|python_tag|> */
            } else {
                l->state = L_CONTENT;
            }
            continue;
        case L_CONTENT:
            tp_emit_content(s, in, n);
            tp_consume(s, n);
            continue;
        case L_SEEK: {
            const char *b = memchr(in, '{', n);
            size_t skip = b ? (size_t)(b - in) : n;
            tp_withhold(s, in, skip);
            tp_consume(s, skip);
            if (!b) continue;
            pjs_hooks hk = tp_jcall_hooks(&l->jc);
            l->ps = pjs_new(PJS_OBJECT, false, &hk);
            if (!l->ps) {
                s->oom = true;
                return;
            }
            l->state = L_OBJ;
            continue;
        }
        case L_OBJ: {
            size_t k = pjs_feed(l->ps, in, n);
            tp_withhold(s, in, k);
            tp_consume(s, k);
            if (pjs_error(l->ps)) {
                l->state = L_DEAD;
            } else if (pjs_done(l->ps)) {
                pjs_free(l->ps);
                l->ps = NULL;
                l->state = L_SEEK;
            }
            continue;
        }
        default: /* L_DEAD: a malformed object; the rest is not parsed */
            tp_withhold(s, in, n);
            tp_consume(s, n);
            continue;
        }
    }
    if (at_end && l->ps) pjs_finish(l->ps);
}

const tp_family tp_fam_llama = {llama_extract, llama_init, llama_step, llama_free};
