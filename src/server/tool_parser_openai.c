/*
 * tool_parser_openai.c: the openai parser (gpt-oss harmony messages) and the harmony message reader that the
 * openai_gptoss reasoning parser shares.
 *
 * Harmony (openai/harmony, the format vLLM's harmony_utils parses with StreamableParser(role=ASSISTANT)):
 * the prompt ends with "<|start|>assistant", so the output begins inside a header; a header runs to
 * <|message|> and holds <|channel|>NAME, an optional recipient "to=NAME" and a content type (e.g.
 * "<|constrain|>json"); the content runs to <|end|>, <|call|> or <|return|>; the next message starts
 * with <|start|> and its role ("assistant"). This reader works on the decoded text (special tokens kept),
 * where vLLM feeds token ids; bytes between messages other than <|start|> are skipped (harmony raises).
 *
 * The tool parser follows vllm/tool_parsers/openai_tool_parser.py@2050c211 (OpenAIToolParser):
 * - every complete message whose recipient starts with "functions." is a call named
 *   recipient.split("functions.")[1]; with no content type or one containing "json" its arguments are
 *   json.dumps(json.loads(text)) (ensure_ascii=True: non-ASCII as \uXXXX), the raw text when that
 *   fails or for other content types;
 * - content = the last "final" message (or an unfinished one at the end), else the last "commentary"
 *   message without recipient; tools_called = any call.
 * - reasoning (toolp_result.reasoning / toolp_delta.reasoning): the analysis messages joined by "\n" with
 *   <|...|> markers removed (harmony_utils.parse_chat_output, what serving_chat shows as reasoning).
 * - streaming (vLLM does it in serving_chat.py with the harmony parser): analysis -> reasoning, final and
 *   commentary without recipient -> content, a functions.* message -> a call announced at its header,
 *   its arguments re-serialised as they arrive (vLLM streams them raw; re-serialising keeps them equal
 *   to the non-streaming string for valid JSON).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char M_START[] = "<|start|>", M_CHANNEL[] = "<|channel|>", M_MESSAGE[] = "<|message|>";

/* ------------------------------------------------------------------ */
/* Harmony reader                                                      */
/* ------------------------------------------------------------------ */

enum { HM_HEADER, HM_CONTENT, HM_BETWEEN };

struct hm_reader {
    hm_events ev;
    int state;
    tp_buf header;
};

hm_reader *hm_new(const hm_events *ev) {
    hm_reader *h = calloc(1, sizeof *h);
    if (h) h->ev = *ev;
    return h;
}

void hm_free(hm_reader *h) {
    if (!h) return;
    tp_buf_free(&h->header);
    free(h);
}

static bool hm_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A header's channel, recipient and content type (harmony's parse_header:
 * the channel word after <|channel|>, a "to=" word, the role word skipped,
 * what is left is the content type). */
static void hm_header(hm_reader *h) {
    char channel[64] = "", recipient[256] = "", ctype[64] = "";
    const char *s = h->header.data ? h->header.data : "";
    size_t n = h->header.len, i = 0;
    bool first = true;
    while (i < n) {
        if (hm_space(s[i])) {
            i++;
            continue;
        }
        bool is_channel = tp_starts(s + i, n - i, M_CHANNEL);
        if (is_channel) i += strlen(M_CHANNEL);
        /* a word: up to blank or the next marker (a marker glued in front, like <|constrain|>, stays) */
        size_t j = i;
        if (tp_starts(s + j, n - j, "<|")) {
            const char *e = tp_find(s + j, n - j, "|>");
            j = e ? (size_t)(e - s) + 2 : n;
        }
        while (j < n && !hm_space(s[j]) && !tp_starts(s + j, n - j, "<|")) j++;
        size_t wl = j - i;
        char *dst = NULL;
        size_t cap = 0, off = 0;
        if (is_channel) dst = channel, cap = sizeof channel;
        else if (wl >= 3 && memcmp(s + i, "to=", 3) == 0) dst = recipient, cap = sizeof recipient, off = 3;
        else if (first && wl == 9 && memcmp(s + i, "assistant", 9) == 0) dst = NULL;
        else if (!ctype[0]) dst = ctype, cap = sizeof ctype;
        if (dst && wl - off < cap) {
            memcpy(dst, s + i + off, wl - off);
            dst[wl - off] = 0;
        }
        first = false;
        i = j > i ? j : i + 1;
    }
    if (h->ev.begin) h->ev.begin(h->ev.ctx, channel, recipient, ctype);
}

size_t hm_feed(hm_reader *h, const char *s, size_t n, bool at_end) {
    static const char *const msg[] = {M_MESSAGE}, *const stops[] = {"<|end|>", "<|call|>", "<|return|>"},
                             *const start[] = {M_START};
    size_t i = 0;
    while (i < n) {
        int w;
        size_t safe, pos;
        switch (h->state) {
        case HM_HEADER:
            pos = tp_find_tags(s + i, n - i, msg, 1, &w, &safe);
            if (w < 0) {
                size_t take = at_end ? n - i : safe;
                tp_put(&h->header, s + i, take);
                return i + take;
            }
            tp_put(&h->header, s + i, pos);
            i += pos + strlen(M_MESSAGE);
            hm_header(h);
            h->header.len = 0;
            h->state = HM_CONTENT;
            continue;
        case HM_CONTENT:
            pos = tp_find_tags(s + i, n - i, stops, 3, &w, &safe);
            if (w < 0) {
                size_t take = at_end ? n - i : safe;
                if (take && h->ev.text) h->ev.text(h->ev.ctx, s + i, take);
                i += take;
                if (at_end && h->ev.end) h->ev.end(h->ev.ctx, false);
                if (at_end) h->state = HM_BETWEEN;
                return i;
            }
            if (pos && h->ev.text) h->ev.text(h->ev.ctx, s + i, pos);
            i += pos + strlen(stops[w]);
            if (h->ev.end) h->ev.end(h->ev.ctx, true);
            h->state = HM_BETWEEN;
            continue;
        default:
            pos = tp_find_tags(s + i, n - i, start, 1, &w, &safe);
            if (w < 0) return at_end ? n : i + safe;
            i += pos + strlen(M_START);
            h->state = HM_HEADER;
            continue;
        }
    }
    if (at_end && h->state == HM_CONTENT) {
        if (h->ev.end) h->ev.end(h->ev.ctx, false);
        h->state = HM_BETWEEN;
    }
    return i;
}

void hm_strip_markers(tp_buf *out, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const char *m = tp_find(s + i, n - i, "<|");
        if (!m) break;
        size_t a = (size_t)(m - s), j = a + 2;
        /* <\|[^>]*?\|> : the first "|>" with no '>' before it */
        while (j + 1 < n && s[j] != '>' && !(s[j] == '|' && s[j + 1] == '>')) j++;
        if (j + 1 < n && s[j] == '|' && s[j + 1] == '>') {
            tp_put(out, s + i, a - i);
            i = j + 2;
        } else {
            tp_put(out, s + i, a + 1 - i);
            i = a + 1;
        }
    }
    tp_put(out, s + i, n - i);
}

/* ------------------------------------------------------------------ */
/* Message routing shared by extraction and streaming                  */
/* ------------------------------------------------------------------ */

enum { R_DROP, R_REASONING, R_FINAL, R_COMMENTARY, R_CALL_JSON, R_CALL_RAW };

static int route(const char *channel, const char *recipient, const char *ctype) {
    if (strncmp(recipient, "functions.", 10) == 0) return !ctype[0] || strstr(ctype, "json") ? R_CALL_JSON : R_CALL_RAW;
    if (strcmp(channel, "analysis") == 0) return R_REASONING;
    if (strcmp(channel, "final") == 0) return R_FINAL;
    if (strcmp(channel, "commentary") == 0 && !recipient[0]) return R_COMMENTARY;
    return R_DROP;
}

/* recipient.split("functions.")[1] */
static void call_name(const char *recipient, const char **name, size_t *n) {
    const char *a = recipient + 10, *b = strstr(a, "functions.");
    *name = a;
    *n = b ? (size_t)(b - a) : strlen(a);
}

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

typedef struct ox {
    toolp_result *r;
    int route;
    char recipient[256];
    tp_buf text, final, commentary, reasoning;
    bool have_final, have_commentary, any_reasoning, oom;
} ox;

static void ox_begin(void *ctx, const char *channel, const char *recipient, const char *ctype) {
    ox *o = ctx;
    o->route = route(channel, recipient, ctype);
    snprintf(o->recipient, sizeof o->recipient, "%s", recipient);
    o->text.len = 0;
}

static void ox_text(void *ctx, const char *s, size_t n) { tp_put(&((ox *)ctx)->text, s, n); }

static void ox_end(void *ctx, bool complete) {
    ox *o = ctx;
    const char *t = o->text.data ? o->text.data : "";
    size_t n = o->text.len;
    if (o->route == R_REASONING) {
        if (n) { /* parse_chat_output: complete messages, and a partial one when it has content */
            if (o->any_reasoning) tp_putc(&o->reasoning, '\n');
            tp_put(&o->reasoning, t, n);
            o->any_reasoning = true;
        } else if (complete) {
            if (o->any_reasoning) tp_putc(&o->reasoning, '\n');
            o->any_reasoning = true;
        }
        return;
    }
    if ((o->route == R_FINAL || o->route == R_COMMENTARY) && (complete || n)) {
        tp_buf *dst = o->route == R_FINAL ? &o->final : &o->commentary;
        dst->len = 0;
        tp_put(dst, t, n);
        if (o->route == R_FINAL) o->have_final = true;
        else o->have_commentary = true;
        return;
    }
    if ((o->route == R_CALL_JSON || o->route == R_CALL_RAW) && complete) {
        const char *name;
        size_t nn;
        call_name(o->recipient, &name, &nn);
        tp_buf args = {0};
        bool oom = false;
        pj *v = o->route == R_CALL_JSON ? pj_loads(t, n, &oom) : NULL;
        if (v) pj_dumps(&args, v, true);
        else tp_put(&args, t, n);
        pj_free(v);
        if (oom || args.oom || !tp_result_add(o->r, name, nn, args.data ? args.data : "", args.len, TP_ID_CHATCMPL))
            o->oom = true;
        tp_buf_free(&args);
    }
}

static vllm_status openai_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    (void)p;
    ox o = {.r = r};
    hm_reader *h = hm_new(&(hm_events){&o, ox_begin, ox_text, ox_end});
    if (!h) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    hm_feed(h, text, len, true);
    hm_free(h);
    vllm_status st = VLLM_OK;
    if (o.oom || o.final.oom || o.commentary.oom || o.reasoning.oom || o.text.oom) st = VLLM_ERR_NO_MEMORY;
    /* content = final_content or commentary_content ("" counts as none) */
    tp_buf *c = o.have_final && o.final.len ? &o.final : o.have_commentary && o.commentary.len ? &o.commentary : NULL;
    if (st == VLLM_OK && c && !tp_result_content(r, c->data, c->len)) st = VLLM_ERR_NO_MEMORY;
    if (st == VLLM_OK && o.reasoning.len) {
        tp_buf rs = {0};
        hm_strip_markers(&rs, o.reasoning.data, o.reasoning.len);
        if (rs.oom) st = VLLM_ERR_NO_MEMORY;
        else if (rs.len) r->reasoning = rs.data, r->reasoning_len = rs.len, rs = (tp_buf){0};
        tp_buf_free(&rs);
    }
    r->tools_called = r->num_calls > 0;
    tp_buf_free(&o.text);
    tp_buf_free(&o.final);
    tp_buf_free(&o.commentary);
    tp_buf_free(&o.reasoning);
    return st == VLLM_OK ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

typedef struct oa_st {
    toolp_stream *s;
    hm_reader *h;
    int route;
    bool any_reasoning;  /* "\n" between analysis messages */
    bool has_call;
    size_t call;
    pj_stream *ps;
} oa_st;

static void oa_args(void *ctx, int sink, const char *t, size_t n) {
    oa_st *o = ctx;
    (void)sink;
    if (o->has_call) tp_call_args(o->s, &o->s->calls[o->call], t, n);
}

static void oa_begin(void *ctx, const char *channel, const char *recipient, const char *ctype) {
    oa_st *o = ctx;
    o->route = route(channel, recipient, ctype);
    o->has_call = false;
    if (o->route == R_REASONING && o->any_reasoning) tp_emit_reasoning(o->s, "\n", 1);
    if (o->route == R_REASONING) o->any_reasoning = true;
    if (o->route != R_CALL_JSON && o->route != R_CALL_RAW) return;
    const char *name;
    size_t nn;
    call_name(recipient, &name, &nn);
    if (!tp_call_new(o->s, name, nn, TP_ID_CHATCMPL)) return;
    o->has_call = true;
    o->call = o->s->ncalls - 1;
    if (o->route == R_CALL_JSON) {
        pjs_free(o->ps);
        o->ps = pjs_new(PJS_VALUE, true, &(pjs_hooks){.ctx = o, .out = oa_args});
        if (!o->ps) o->s->oom = true;
    }
}

static void oa_text(void *ctx, const char *t, size_t n) {
    oa_st *o = ctx;
    switch (o->route) {
    case R_REASONING: tp_emit_reasoning(o->s, t, n); return;
    case R_FINAL:
    case R_COMMENTARY: tp_emit_content(o->s, t, n); return;
    case R_CALL_RAW: oa_args(o, PJS_ARGS, t, n); return;
    case R_CALL_JSON:
        if (o->ps && !pjs_done(o->ps) && !pjs_error(o->ps)) pjs_feed(o->ps, t, n);
        return;
    default: return;
    }
}

static void oa_end(void *ctx, bool complete) {
    oa_st *o = ctx;
    (void)complete;
    if (o->ps) pjs_finish(o->ps);
    pjs_free(o->ps);
    o->ps = NULL;
    o->route = R_DROP;
}

static bool oa_init(toolp_stream *s) {
    oa_st *o = calloc(1, sizeof *o);
    if (!o) return false;
    o->s = s;
    o->h = hm_new(&(hm_events){o, oa_begin, oa_text, oa_end});
    if (!o->h) {
        free(o);
        return false;
    }
    s->impl = o;
    return true;
}

static void oa_free(void *impl) {
    oa_st *o = impl;
    hm_free(o->h);
    pjs_free(o->ps);
    free(o);
}

static void oa_step(toolp_stream *s, bool at_end) {
    oa_st *o = s->impl;
    size_t k = hm_feed(o->h, tp_in(s), tp_in_len(s), at_end);
    tp_consume(s, k);
}

const tp_family tp_fam_openai = {openai_extract, oa_init, oa_step, oa_free};
