/*
 * tool_parser_mistral.c: the mistral parser: [TOOL_CALLS][{"name": .., "arguments": {..}}, ..] (tokenizer
 * before v11) and [TOOL_CALLS]name{args}[TOOL_CALLS]name2{args2} (v11 and later).
 *
 * Follows vllm/tool_parsers/mistral_tool_parser.py@decc268e (MistralToolParser):
 * - extract_tool_calls: no [TOOL_CALLS] -> no tools. content = the text before the first [TOOL_CALLS]
 *   (None when empty), tools_called = true.
 *   v11+: each piece after a [TOOL_CALLS] that holds "{" is a call: the name is the text before its first
 *   "{", the arguments the raw rest of the piece (not re-serialised: "wrongly formatted" arguments are
 *   still returned as calls). Pieces without "{" are skipped.
 *   pre-v11: the stripped text after the single [TOOL_CALLS] is json.loads'ed; each item becomes
 *   {name, json.dumps(arguments, ensure_ascii=False)}. On a JSONDecodeError the regex \[{.*}\] (DOTALL,
 *   greedy) is tried; if that fails too: no tools and content = the stripped text after [TOOL_CALLS].
 *   Where vLLM raises instead of answering (two [TOOL_CALLS] before v11, items without name/arguments, and
 *   the regex fallback, whose dicts fail FunctionCall's str check) this port answers: the whole text as
 *   content, except the regex fallback, whose calls are returned (re-serialised).
 * - ids: MistralToolCall.generate_random_id, 9 characters of [A-Za-z0-9].
 * - streaming: content before [TOOL_CALLS]; v11: the name is sent at its "{", then the raw arguments
 *   until the next [TOOL_CALLS]; pre-v11: each array item's name once complete, its arguments
 *   re-serialised (vLLM streams them raw; re-serialising keeps them equal to the non-streaming string).
 * - The format is fixed by the tokenizer version in vLLM (every non-mistral_common tokenizer is pre-v11);
 *   toolp_options.mistral_version sets it, 0 decides from the first non-blank byte after [TOOL_CALLS].
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char BOT[] = "[TOOL_CALLS]";

/* pre-v11 when the version says so, or (auto) when the text after the tag starts with '[' */
static bool is_pre_v11(const toolp_parser *p, const char *after, size_t n) {
    if (p->mistral_version > 0) return p->mistral_version < 11;
    size_t i = 0;
    while (i < n && tp_is_space((unsigned char)after[i])) i++;
    return i < n && after[i] == '[';
}

static vllm_status oom_err(void) { return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory"); }

/* pre-v11: a decoded list of {name, arguments} -> calls; false when an item is malformed. */
static bool add_list(toolp_result *r, const pj *list, bool *oom) {
    if (list->t != PJ_ARR) return false;
    tp_buf args = {0};
    for (size_t i = 0; i < list->len; i++) {
        const pj *it = list->v[i];
        pj *name = pj_obj_get(it, "name"), *argv = pj_obj_get(it, "arguments");
        if (!name || name->t != PJ_STR || !argv) {
            tp_buf_free(&args);
            return false;
        }
        args.len = 0;
        pj_dumps(&args, argv, false);
        if (args.oom || !tp_result_add(r, name->s, name->n, args.data, args.len, TP_ID_MISTRAL)) {
            *oom = true;
            tp_buf_free(&args);
            return false;
        }
    }
    tp_buf_free(&args);
    return true;
}

static vllm_status mistral_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    const char *bot = tp_find(text, len, BOT);
    if (!bot) return tp_result_plain(r, text, len);
    size_t cl = (size_t)(bot - text), bl = strlen(BOT);
    const char *rest = bot + bl;
    size_t rn = len - cl - bl;
    bool oom = false;
    if (!is_pre_v11(p, rest, rn)) {
        /* split on every [TOOL_CALLS] */
        const char *seg = rest;
        size_t sn = rn;
        for (;;) {
            const char *next = tp_find(seg, sn, BOT);
            size_t pl = next ? (size_t)(next - seg) : sn;
            const char *br = memchr(seg, '{', pl);
            if (br && !tp_result_add(r, seg, (size_t)(br - seg), br, pl - (size_t)(br - seg), TP_ID_MISTRAL))
                return oom_err();
            if (!next) break;
            seg = next + bl;
            sn -= pl + bl;
        }
    } else {
        if (tp_find(rest, rn, BOT)) return tp_result_plain(r, text, len); /* vLLM raises ValueError */
        const char *st = rest;
        size_t sn = rn;
        tp_strip(&st, &sn);
        pj *list = pj_loads(st, sn, &oom);
        if (!list && !oom) {
            /* \[{.*}\]: from the first "[{" to the last "}]" after it */
            const char *a = tp_find(st, sn, "[{");
            const char *z = NULL;
            for (size_t i = sn; a && i >= 2 && st + i - 2 >= a + 2; i--)
                if (st[i - 2] == '}' && st[i - 1] == ']') {
                    z = st + i;
                    break;
                }
            if (a && z) list = pj_loads(a, (size_t)(z - a), &oom);
            if (!list && !oom) {
                toolp_result_clear(r);
                if (!tp_result_content(r, st, sn)) return oom_err();
                return VLLM_OK;
            }
        }
        if (oom) return oom_err();
        bool ok = add_list(r, list, &oom);
        pj_free(list);
        if (oom) return oom_err();
        if (!ok) return tp_result_plain(r, text, len); /* vLLM raises TypeError / KeyError */
    }
    r->tools_called = true;
    if (cl && !tp_result_content(r, text, cl)) return oom_err();
    return VLLM_OK;
}

enum { M_TEXT, M_DECIDE, M_PRE, M_PRE_DONE, M_NAME, M_ARGS };

typedef struct mistral_st {
    int state;
    tp_buf lead;  /* blanks after [TOOL_CALLS] while deciding the format (v11: part of the name) */
    tp_buf name;  /* v11: the name so far */
    size_t call;  /* v11: the call receiving arguments */
    pj_stream *ps;
    tp_jcall jc;
} mistral_st;

static const char *const ARGS_KEYS[] = {"arguments"};

static bool mistral_init(toolp_stream *s) {
    mistral_st *m = calloc(1, sizeof *m);
    if (!m) return false;
    m->jc = (tp_jcall){.s = s, .args_keys = ARGS_KEYS, .nargs_keys = 1, .style = TP_ID_MISTRAL};
    s->impl = m;
    return true;
}

static void mistral_free(void *impl) {
    mistral_st *m = impl;
    tp_buf_free(&m->lead);
    tp_buf_free(&m->name);
    pjs_free(m->ps);
    tp_jcall_free(&m->jc);
    free(m);
}

static void mistral_step(toolp_stream *s, bool at_end) {
    mistral_st *m = s->impl;
    static const char *const bot[] = {BOT};
    static const char *const name_end[] = {"{", BOT};
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s), safe;
        if (!n) break;
        int w;
        switch (m->state) {
        case M_TEXT: {
            size_t pos = tp_find_tags(in, n, bot, 1, &w, &safe);
            if (w < 0) {
                size_t take = at_end ? n : safe;
                tp_emit_content(s, in, take);
                tp_consume(s, take);
                if (take < n) return;
                continue;
            }
            tp_emit_content(s, in, pos);
            tp_withhold(s, in + pos, strlen(BOT));
            tp_consume(s, pos + strlen(BOT));
            m->state = s->p->mistral_version > 0 ? (s->p->mistral_version < 11 ? M_PRE : M_NAME) : M_DECIDE;
            continue;
        }
        case M_DECIDE: {
            size_t i = 0;
            while (i < n && tp_is_space((unsigned char)in[i])) i++;
            tp_put(&m->lead, in, i);
            tp_withhold(s, in, i);
            tp_consume(s, i);
            if (i == n) continue;
            if (in[i] == '[') {
                m->state = M_PRE;
            } else {
                m->state = M_NAME;
                tp_put(&m->name, m->lead.data ? m->lead.data : "", m->lead.len);
            }
            continue;
        }
        case M_PRE:
            if (!m->ps) {
                pjs_hooks hk = tp_jcall_hooks(&m->jc);
                m->ps = pjs_new(PJS_ARRAY, false, &hk);
                if (!m->ps) {
                    s->oom = true;
                    return;
                }
            }
            {
                size_t k = pjs_feed(m->ps, in, n);
                tp_withhold(s, in, k);
                tp_consume(s, k);
                if (pjs_done(m->ps) || pjs_error(m->ps)) m->state = M_PRE_DONE;
            }
            continue;
        case M_PRE_DONE:
            tp_withhold(s, in, n);
            tp_consume(s, n);
            continue;
        case M_NAME: {
            size_t pos = tp_find_tags(in, n, name_end, 2, &w, &safe);
            if (w < 0) {
                size_t take = at_end ? n : safe;
                tp_put(&m->name, in, take);
                tp_withhold(s, in, take);
                tp_consume(s, take);
                if (take < n) return;
                continue;
            }
            tp_put(&m->name, in, pos);
            tp_withhold(s, in, pos);
            tp_consume(s, pos);
            if (w == 1) { /* a piece without "{": skipped */
                m->name.len = 0;
                tp_withhold(s, in + pos, strlen(BOT));
                tp_consume(s, strlen(BOT));
                continue;
            }
            if (m->name.oom || !tp_call_new(s, m->name.data ? m->name.data : "", m->name.len, TP_ID_MISTRAL)) {
                s->oom = true;
                return;
            }
            m->call = s->ncalls - 1;
            m->name.len = 0;
            m->state = M_ARGS; /* the "{" is the first argument byte */
            continue;
        }
        case M_ARGS: {
            size_t pos = tp_find_tags(in, n, bot, 1, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            tp_call_args(s, &s->calls[m->call], in, take);
            tp_consume(s, take);
            if (w >= 0) {
                tp_consume(s, strlen(BOT));
                m->state = M_NAME;
                continue;
            }
            if (take < n) return;
            continue;
        }
        }
    }
    if (at_end && m->ps) pjs_finish(m->ps);
}

const tp_family tp_fam_mistral = {mistral_extract, mistral_init, mistral_step, mistral_free};
