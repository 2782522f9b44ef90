/*
 * tool_parser_deepseek.c: the deepseek_v3 parser (DeepSeek-V3 / R1-0528:
 * <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>).
 *
 * Follows vllm/tool_parsers/deepseekv3_tool_parser.py@80445b45 (DeepSeekV3ToolParser):
 * - extract_tool_calls: no <｜tool▁calls▁begin｜> -> no tools. Otherwise every match of
 *   <｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<function_name>.*)\n```json\n(?P<function_arguments>.*)\n```<｜tool▁call▁end｜>
 *   (no DOTALL: each group stays on one line; type runs to the line's last separator, the name to the
 *   line's end, the arguments are the whole next-but-one line) is a call with the arguments as written
 *   (no re-serialisation). A type other than "function" fails ToolCall's Literal["function"]: no tools,
 *   the whole text as content. content = the text before <｜tool▁calls▁begin｜> (None when empty);
 *   tools_called is true even when nothing matched.
 * - streaming: content before <｜tool▁calls▁begin｜>; a call is announced once its "```json" line is read
 *   (vLLM: once "NAME\n" is), its raw arguments line streams as it comes (the final "\n" held until the
 *   closing fence shows it ends the arguments).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char CALLS_BEGIN[] = "<｜tool▁calls▁begin｜>", CALL_BEGIN[] = "<｜tool▁call▁begin｜>";
static const char SEP[] = "<｜tool▁sep｜>";
static const char FENCE[] = "```json\n", CLOSE[] = "```<｜tool▁call▁end｜>";

/* The last separator in a header line, or NULL. */
static const char *last_sep(const char *h, size_t n) {
    const char *last = NULL, *p = h;
    size_t left = n;
    for (;;) {
        const char *f = tp_find(p, left, SEP);
        if (!f) return last;
        last = f;
        left -= (size_t)(f - p) + 1;
        p = f + 1;
    }
}

static vllm_status deepseek_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    (void)p;
    const char *cb = tp_find(text, len, CALLS_BEGIN);
    if (!cb) return tp_result_plain(r, text, len);
    size_t pos = 0, bl = strlen(CALL_BEGIN), sl = strlen(SEP), fl = strlen(FENCE), cl = strlen(CLOSE);
    for (;;) {
        const char *b = tp_find(text + pos, len - pos, CALL_BEGIN);
        if (!b) break;
        size_t hs = (size_t)(b - text) + bl;
        pos = (size_t)(b - text) + 1; /* where the search resumes when this one does not match */
        const char *eol = memchr(text + hs, '\n', len - hs);
        if (!eol) break; /* no line end after it: no later begin can match either */
        const char *sep = last_sep(text + hs, (size_t)(eol - text) - hs);
        if (!sep) continue;
        size_t f0 = (size_t)(eol - text) + 1;
        if (len - f0 < fl || memcmp(text + f0, FENCE, fl) != 0) continue;
        size_t a0 = f0 + fl;
        const char *a1 = memchr(text + a0, '\n', len - a0);
        if (!a1) continue;
        size_t c0 = (size_t)(a1 - text) + 1;
        if (len - c0 < cl || memcmp(text + c0, CLOSE, cl) != 0) continue;
        /* a match */
        if ((size_t)(sep - text) - hs != strlen("function") || memcmp(text + hs, "function", 8) != 0)
            return tp_result_plain(r, text, len);
        const char *name = sep + sl;
        if (!tp_result_add(r, name, (size_t)(eol - name), text + a0, (size_t)(a1 - text) - a0, TP_ID_CHATCMPL))
            return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
        pos = c0 + cl;
    }
    r->tools_called = true;
    size_t n = (size_t)(cb - text);
    if (n && !tp_result_content(r, text, n)) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    return VLLM_OK;
}

enum { D_TEXT, D_SEEK, D_HEAD, D_FENCE, D_ARGS, D_CLOSE };

typedef struct ds_st {
    int state;
    tp_buf head;
    size_t matched;   /* bytes of FENCE / CLOSE matched */
    bool has_call;
    size_t call;
} ds_st;

static bool ds_init(toolp_stream *s) {
    ds_st *d = calloc(1, sizeof *d);
    if (!d) return false;
    s->impl = d;
    return true;
}

static void ds_free(void *impl) {
    ds_st *d = impl;
    tp_buf_free(&d->head);
    free(d);
}

/* Matches input against lit[d->matched..]: 1 complete, 0 needs more, -1 mismatch (nothing consumed then). */
static int ds_expect(toolp_stream *s, ds_st *d, const char *lit) {
    const char *in = tp_in(s);
    size_t n = tp_in_len(s), m = strlen(lit), i = 0;
    while (i < n && d->matched < m) {
        if (in[i] != lit[d->matched]) return -1;
        i++, d->matched++;
    }
    tp_withhold(s, in, i);
    tp_consume(s, i);
    return d->matched == m ? 1 : 0;
}

static void ds_step(toolp_stream *s, bool at_end) {
    ds_st *d = s->impl;
    static const char *const t_calls[] = {CALLS_BEGIN}, *const t_call[] = {CALL_BEGIN};
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s), safe;
        if (!n) return;
        int w;
        switch (d->state) {
        case D_TEXT:
        case D_SEEK: {
            const char *const *tag = d->state == D_TEXT ? t_calls : t_call;
            size_t pos = tp_find_tags(in, n, tag, 1, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            if (d->state == D_TEXT) tp_emit_content(s, in, take);
            else tp_withhold(s, in, take);
            tp_consume(s, take);
            if (w < 0) {
                if (take < n) return;
                continue;
            }
            tp_withhold(s, in + pos, strlen(tag[0]));
            tp_consume(s, strlen(tag[0]));
            d->state = d->state == D_TEXT ? D_SEEK : D_HEAD;
            d->head.len = 0;
            continue;
        }
        case D_HEAD: {
            const char *eol = memchr(in, '\n', n);
            size_t take = eol ? (size_t)(eol - in) + 1 : n;
            tp_put(&d->head, in, eol ? take - 1 : take);
            tp_withhold(s, in, take);
            tp_consume(s, take);
            if (!eol) continue;
            const char *sep = d->head.data ? last_sep(d->head.data, d->head.len) : NULL;
            d->state = sep ? D_FENCE : D_SEEK;
            d->matched = 0;
            continue;
        }
        case D_FENCE: {
            int r = ds_expect(s, d, FENCE);
            if (r < 0) {
                d->state = D_SEEK;
            } else if (r > 0) {
                const char *h = d->head.data;
                const char *sep = last_sep(h, d->head.len);
                d->has_call = false;
                if ((size_t)(sep - h) == 8 && memcmp(h, "function", 8) == 0) {
                    const char *name = sep + strlen(SEP);
                    if (!tp_call_new(s, name, d->head.len - (size_t)(name - h), TP_ID_CHATCMPL)) return;
                    d->has_call = true;
                    d->call = s->ncalls - 1;
                }
                d->state = D_ARGS;
            }
            continue;
        }
        case D_ARGS: {
            const char *eol = memchr(in, '\n', n);
            size_t take = eol ? (size_t)(eol - in) : n;
            if (d->has_call) tp_call_args(s, &s->calls[d->call], in, take);
            tp_withhold(s, in, take + (eol ? 1 : 0));
            tp_consume(s, take + (eol ? 1 : 0));
            if (eol) {
                d->state = D_CLOSE;
                d->matched = 0;
            }
            continue;
        }
        case D_CLOSE: {
            int r = ds_expect(s, d, CLOSE);
            if (r != 0) d->state = D_SEEK; /* closed, or not a call the non-streaming regex matches */
            continue;
        }
        }
    }
}

const tp_family tp_fam_deepseek = {deepseek_extract, ds_init, ds_step, ds_free};
