/*
 * tool_parser_deepseek_v31.c: the deepseek_v31 parser (DeepSeek-V3.1 / V3.2:
 * <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>).
 *
 * Follows vllm/tool_parsers/deepseekv31_tool_parser.py@e2fc92ec (DeepSeekV31ToolParser; unchanged in
 * vllm/frontend/processing/tool_parsers/deepseekv31_tool_parser.py@b59bccae), token strings taken from it
 * (U+FF5C full-width bars, U+2581 '▁'):
 * - extract_tool_calls: no <｜tool▁calls▁begin｜> in the text -> tools_called false, the whole text as
 *   content. Otherwise every findall match of
 *   <｜tool▁call▁begin｜>(?P<function_name>.*?)<｜tool▁sep｜>(?P<function_arguments>.*?)<｜tool▁call▁end｜>
 *   (no DOTALL: the name runs to the first separator and the arguments to the first call end, neither
 *   crossing a '\n'; no stripping) is a call with the arguments exactly as written: no JSON check or
 *   re-serialisation, so malformed JSON is passed through. Ids: make_tool_call_id ("chatcmpl-tool-...").
 *   content = the text before <｜tool▁calls▁begin｜> (None when empty); text after the calls (after
 *   <｜tool▁calls▁end｜> or between calls) is dropped; a call without its <｜tool▁call▁end｜> (or with a
 *   '\n' in its name or arguments) is not matched and dropped; tools_called is true even when nothing
 *   matched (vLLM's tests/tool_parsers/test_deepseekv31_tool_parser.py: prefix as content, suffix dropped).
 *   Like vLLM, the matches are searched in the whole text, also before <｜tool▁calls▁begin｜>.
 * - streaming: content before <｜tool▁calls▁begin｜> (a suffix that could start it held back); after it
 *   nothing is content (vLLM's streaming passes text between / after calls through as content; here it
 *   follows the non-streaming result, which drops it). A call is announced with its name once
 *   <｜tool▁sep｜> is read (vLLM: the same), its raw arguments stream as they come (a suffix that could
 *   start <｜tool▁call▁end｜> held back) until <｜tool▁call▁end｜>.
 *   Disagreements with the non-streaming result, all output vLLM's streaming announces too: a call whose
 *   arguments never end (the text ends first, or a '\n' comes first) stays announced with the arguments
 *   streamed so far (a '\n' ends them; the text held back at the end of the text is flushed into them);
 *   a call written before <｜tool▁calls▁begin｜> streams as content.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char CALLS_BEGIN[] = "<｜tool▁calls▁begin｜>", CALL_BEGIN[] = "<｜tool▁call▁begin｜>";
static const char SEP[] = "<｜tool▁sep｜>", CALL_END[] = "<｜tool▁call▁end｜>";

static vllm_status v31_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    (void)p;
    const char *cb = tp_find(text, len, CALLS_BEGIN);
    if (!cb) return tp_result_plain(r, text, len);
    size_t bl = strlen(CALL_BEGIN), sl = strlen(SEP), el = strlen(CALL_END);
    size_t pos = 0, nl = 0;
    bool nl_known = false;
    for (;;) {
        const char *b = tp_find(text + pos, len - pos, CALL_BEGIN);
        if (!b) break;
        size_t e = (size_t)(b - text) + bl;
        /* the end of this line (cached: many calls on one line stay linear) */
        if (!nl_known || nl < e) {
            const char *q = memchr(text + e, '\n', len - e);
            nl = q ? (size_t)(q - text) : len;
            nl_known = true;
        }
        /* No separator, or no call end after it, before the line ends: no match here, nor at any begin
         * before the line end (it would need both on the same stretch), so the search resumes past it. */
        const char *sep = tp_find(text + e, nl - e, SEP);
        const char *end = sep ? tp_find(sep + sl, nl - (size_t)(sep + sl - text), CALL_END) : NULL;
        if (!end) {
            if (nl >= len) break;
            pos = nl + 1;
            continue;
        }
        size_t a0 = (size_t)(sep - text) + sl;
        if (!tp_result_add(r, text + e, (size_t)(sep - text) - e, text + a0, (size_t)(end - text) - a0, TP_ID_CHATCMPL))
            return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
        pos = (size_t)(end - text) + el;
    }
    r->tools_called = true;
    size_t n = (size_t)(cb - text);
    if (n && !tp_result_content(r, text, n)) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    return VLLM_OK;
}

enum { V_TEXT, V_SEEK, V_NAME, V_ARGS };

typedef struct v31_st {
    int state;
    tp_buf name;
} v31_st;

static bool v31_init(toolp_stream *s) {
    v31_st *v = calloc(1, sizeof *v);
    if (!v) return false;
    s->impl = v;
    return true;
}

static void v31_free(void *impl) {
    v31_st *v = impl;
    tp_buf_free(&v->name);
    free(v);
}

static void v31_step(toolp_stream *s, bool at_end) {
    v31_st *v = s->impl;
    static const char *const t_calls[] = {CALLS_BEGIN}, *const t_call[] = {CALL_BEGIN}, *const t_sep[] = {SEP},
                             *const t_end[] = {CALL_END};
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s), safe;
        if (!n) return;
        int w;
        switch (v->state) {
        case V_TEXT:
        case V_SEEK: {
            bool text = v->state == V_TEXT;
            const char *tag = text ? CALLS_BEGIN : CALL_BEGIN;
            size_t pos = tp_find_tags(in, n, text ? t_calls : t_call, 1, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            if (text) tp_emit_content(s, in, take); /* after the calls begin, nothing is content */
            tp_consume(s, take);
            if (w < 0) return; /* all taken, or a partial tag waits for more */
            tp_consume(s, strlen(tag));
            v->state = text ? V_SEEK : V_NAME;
            v->name.len = 0;
            continue;
        }
        case V_NAME: {
            const char *nlp = memchr(in, '\n', n);
            size_t lim = nlp ? (size_t)(nlp - in) : n;
            size_t pos = tp_find_tags(in, lim, t_sep, 1, &w, &safe);
            if (w >= 0) {
                tp_put(&v->name, in, pos);
                tp_consume(s, pos + strlen(SEP));
                if (v->name.oom) {
                    s->oom = true;
                    return;
                }
                if (!tp_call_new(s, v->name.data ? v->name.data : "", v->name.len, TP_ID_CHATCMPL)) return;
                v->state = V_ARGS;
                continue;
            }
            if (nlp || at_end) { /* the regex cannot match from this begin: look for the next one */
                tp_consume(s, nlp ? lim + 1 : n);
                v->state = V_SEEK;
                continue;
            }
            tp_put(&v->name, in, safe);
            tp_consume(s, safe);
            return;
        }
        case V_ARGS: {
            tp_callst *c = &s->calls[s->ncalls - 1];
            const char *nlp = memchr(in, '\n', n);
            size_t lim = nlp ? (size_t)(nlp - in) : n;
            size_t pos = tp_find_tags(in, lim, t_end, 1, &w, &safe);
            if (w >= 0) {
                tp_call_args(s, c, in, pos);
                tp_consume(s, pos + strlen(CALL_END));
                v->state = V_SEEK;
                continue;
            }
            if (nlp || at_end) { /* unmatched (announced all the same): the arguments end here */
                tp_call_args(s, c, in, lim);
                tp_consume(s, nlp ? lim + 1 : n);
                v->state = V_SEEK;
                continue;
            }
            tp_call_args(s, c, in, safe);
            tp_consume(s, safe);
            return;
        }
        }
    }
}

const tp_family tp_fam_deepseek_v31 = {v31_extract, v31_init, v31_step, v31_free};
