/*
 * reasoning_parser.c: vLLM's reasoning parsers (qwen3, deepseek_r1, deepseek_v3, granite, openai_gptoss) on text:
 * extraction, streaming with held-back partial tags, and the reasoning-end test.
 *
 * Sources followed (vllm-project/vllm):
 * - vllm/reasoning/__init__.py@fe441ccf: the names (deepseek_r1, deepseek_v3, granite, openai_gptoss, qwen3).
 * - vllm/reasoning/basic_parsers.py@9b533e7b (BaseThinkingReasoningParser): is_reasoning_end scans back for
 *   the last start / end token (end first -> true); extract_reasoning strips everything up to the first
 *   start tag, then partitions on the first end tag ("" reasoning kept, "" content -> None); no end tag ->
 *   all reasoning; is_reasoning_end_streaming: the end token is in the delta.
 * - vllm/reasoning/deepseek_r1_reasoning_parser.py@d5c95556: streaming without a start token: everything
 *   before </think> is reasoning (the start tag is in the prompt).
 * - vllm/reasoning/qwen3_reasoning_parser.py@00a4c6a1 (the newer behaviour, vLLM PR #34779): the start tag
 *   may be in the prompt (Qwen3.5) or generated (stripped); no </think> and enable_thinking false ->
 *   (None, output); no </think> otherwise -> a first <tool_call> followed (after blanks) by <function[\s=]
 *   ends the reasoning there (reasoning or None, content or None), else (output, None) (truncated). The
 *   streaming side holds a <tool_call> back until the text after it shows <function (then content from
 *   <tool_call> on) or shows it is not (then reasoning); is_reasoning_end also ends at an unpaired
 *   <tool_call> (no </tool_call> after it) followed by <function. With thinking disabled the serving layer
 *   sends everything as content (prompt_is_reasoning_end).
 * - vllm/reasoning/deepseek_v3_reasoning_parser.py@d4f465fb: DeepSeekR1ReasoningParser when
 *   chat_template_kwargs thinking or enable_thinking is truthy, else IdentityReasoningParser (no reasoning,
 *   is_reasoning_end always true).
 * - vllm/reasoning/granite_reasoning_parser.py@04dbd8f3: (?:Here's|Here is) my thought process:(.*?)
 *   (?:Here's|Here is) my response:(.*) (DOTALL) -> (reasoning, content or None), no match -> (None,
 *   output); streaming follows the markers from the start of the text.
 * - vllm/reasoning/gptoss_reasoning_parser.py@5d1ee758 + entrypoints/openai/parser/harmony_utils.py
 *   parse_chat_output: reasoning = "\n".join(analysis messages, and the unfinished one when it has text),
 *   content = "\n".join(the other messages, likewise), <|...|> markers removed, "" -> None; is_reasoning_end:
 *   "<|channel|>final" then "<|message|>" within 20 tokens (here: 256 bytes).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser_internal.h"

static const char THINK[] = "<think>", END_THINK[] = "</think>", TOOL_CALL[] = "<tool_call>",
                  TOOL_CALL_END[] = "</tool_call>", FUNC[] = "<function";
static const char *const THINK_STARTS[] = {"Here's my thought process:", "Here is my thought process:"};
static const char *const RESPONSE_STARTS[] = {"Here's my response:", "Here is my response:"};

struct reasoning_parser {
    reasoning_kind kind;
    bool thinking;  /* qwen3: enable_thinking; deepseek_v3: thinking (R1) vs identity */
};

static const struct {
    const char *name;
    reasoning_kind kind;
} NAMES[] = {{"qwen3", REASONING_QWEN3},   {"deepseek_r1", REASONING_DEEPSEEK_R1}, {"deepseek_v3", REASONING_DEEPSEEK_V3},
             {"granite", REASONING_GRANITE}, {"openai_gptoss", REASONING_GPT_OSS},   {"gpt_oss", REASONING_GPT_OSS}};
static const char *const NAME_LIST[] = {"qwen3", "deepseek_r1", "deepseek_v3", "granite", "openai_gptoss", "gpt_oss", NULL};

bool reasoning_kind_from_name(const char *name, reasoning_kind *out) {
    if (!name) return false;
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (strcmp(NAMES[i].name, name) == 0) {
            *out = NAMES[i].kind;
            return true;
        }
    return false;
}

const char *reasoning_kind_name(reasoning_kind kind) {
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (NAMES[i].kind == kind) return NAMES[i].name;
    return "?";
}

const char *const *reasoning_names(void) { return NAME_LIST; }

/* Python's bool() of a JSON value. */
static bool truthy(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return false;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_STRING: return json_string_length(v) != 0;
    case JSON_ARRAY: return json_array_size(v) != 0;
    case JSON_OBJECT: return json_object_size(v) != 0;
    default: return true;
    }
}

vllm_status reasoning_parser_new(const char *name, const json_t *kwargs, reasoning_parser **out) {
    *out = NULL;
    reasoning_kind k;
    if (!reasoning_kind_from_name(name, &k))
        return vt_error(VLLM_ERR_INVALID_ARG, "reasoning parser: unknown name '%s' (one of qwen3, deepseek_r1, "
                        "deepseek_v3, granite, openai_gptoss)", name ? name : "(null)");
    reasoning_parser *p = calloc(1, sizeof *p);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "reasoning parser: out of memory");
    p->kind = k;
    const json_t *kw = json_is_object(kwargs) ? kwargs : NULL;
    if (k == REASONING_QWEN3) {
        const json_t *v = kw ? json_object_get(kw, "enable_thinking") : NULL;
        p->thinking = v ? truthy(v) : true;
    } else if (k == REASONING_DEEPSEEK_V3) {
        const json_t *a = kw ? json_object_get(kw, "thinking") : NULL, *b = kw ? json_object_get(kw, "enable_thinking") : NULL;
        p->thinking = (a && truthy(a)) || (b && truthy(b));
    } else {
        p->thinking = true;
    }
    *out = p;
    return VLLM_OK;
}

void reasoning_parser_free(reasoning_parser *p) { free(p); }
reasoning_kind reasoning_parser_kind(const reasoning_parser *p) { return p->kind; }

void reasoning_result_clear(reasoning_result *r) {
    if (!r) return;
    free(r->reasoning);
    free(r->content);
    *r = (reasoning_result){0};
}

/* A deepseek_v3 without thinking: no reasoning at all. */
static bool identity(const reasoning_parser *p) { return p->kind == REASONING_DEEPSEEK_V3 && !p->thinking; }

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static bool set_part(char **dst, size_t *dn, const char *s, size_t n) {
    *dst = tp_strndup(s, n);
    *dn = n;
    return *dst != NULL;
}

/* After a <tool_call>: blanks, then <function and a blank or '=' (_RE_FUNCTION_OPEN.match(after.lstrip())). */
static bool function_follows(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && tp_is_space((unsigned char)s[i])) i++;
    size_t fl = strlen(FUNC);
    if (n - i < fl + 1 || memcmp(s + i, FUNC, fl) != 0) return false;
    char c = s[i + fl];
    return c == '=' || tp_is_space((unsigned char)c);
}

/* The earliest of the given markers at or after s; *which / *mlen set. */
static const char *first_of(const char *s, size_t n, const char *const *m, int nm, int *which) {
    const char *best = NULL;
    for (int i = 0; i < nm; i++) {
        const char *f = tp_find(s, n, m[i]);
        if (f && (!best || f < best)) best = f, *which = i;
    }
    return best;
}

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

static vllm_status oom(void) { return vt_error(VLLM_ERR_NO_MEMORY, "reasoning parser: out of memory"); }

static vllm_status extract_think(const reasoning_parser *p, const char *text, size_t len, reasoning_result *r) {
    const char *st = tp_find(text, len, THINK);
    if (st) { /* model_output.partition(start)[2] */
        size_t k = (size_t)(st - text) + strlen(THINK);
        text += k, len -= k;
    }
    const char *e = tp_find(text, len, END_THINK);
    if (e) {
        size_t rl = (size_t)(e - text), cs = rl + strlen(END_THINK);
        if (!set_part(&r->reasoning, &r->reasoning_len, text, rl)) return oom();
        if (len > cs && !set_part(&r->content, &r->content_len, text + cs, len - cs)) return oom();
        return VLLM_OK;
    }
    if (p->kind == REASONING_QWEN3) {
        if (!p->thinking) return set_part(&r->content, &r->content_len, text, len) ? VLLM_OK : oom();
        const char *tc = tp_find(text, len, TOOL_CALL);
        if (tc) {
            size_t a = (size_t)(tc - text) + strlen(TOOL_CALL);
            if (function_follows(text + a, len - a)) {
                size_t rl = (size_t)(tc - text);
                if (rl && !set_part(&r->reasoning, &r->reasoning_len, text, rl)) return oom();
                if (!set_part(&r->content, &r->content_len, tc, len - rl)) return oom();
                return VLLM_OK;
            }
        }
    }
    return set_part(&r->reasoning, &r->reasoning_len, text, len) ? VLLM_OK : oom();
}

static vllm_status extract_granite(const char *text, size_t len, reasoning_result *r) {
    int w;
    const char *t = first_of(text, len, THINK_STARTS, 2, &w);
    if (t) {
        const char *rs = t + strlen(THINK_STARTS[w]);
        int w2;
        const char *resp = first_of(rs, len - (size_t)(rs - text), RESPONSE_STARTS, 2, &w2);
        if (resp) {
            const char *c = resp + strlen(RESPONSE_STARTS[w2]);
            size_t cn = len - (size_t)(c - text);
            if (!set_part(&r->reasoning, &r->reasoning_len, rs, (size_t)(resp - rs))) return oom();
            if (cn && !set_part(&r->content, &r->content_len, c, cn)) return oom();
            return VLLM_OK;
        }
    }
    return set_part(&r->content, &r->content_len, text, len) ? VLLM_OK : oom();
}

/* parse_chat_output's two joins. */
typedef struct gx {
    bool analysis;
    tp_buf cur, parts[2];
    bool any[2];
} gx;

static void gx_begin(void *ctx, const char *channel, const char *recipient, const char *ctype) {
    gx *g = ctx;
    (void)recipient, (void)ctype;
    g->analysis = strcmp(channel, "analysis") == 0;
    g->cur.len = 0;
}
static void gx_text(void *ctx, const char *s, size_t n) { tp_put(&((gx *)ctx)->cur, s, n); }
static void gx_end(void *ctx, bool complete) {
    gx *g = ctx;
    if (!complete && !g->cur.len) return;
    int k = g->analysis ? 0 : 1;
    if (g->any[k]) tp_putc(&g->parts[k], '\n');
    tp_put(&g->parts[k], g->cur.data ? g->cur.data : "", g->cur.len);
    g->any[k] = true;
}

static vllm_status extract_gptoss(const char *text, size_t len, reasoning_result *r) {
    gx g = {0};
    hm_reader *h = hm_new(&(hm_events){&g, gx_begin, gx_text, gx_end});
    if (!h) return oom();
    hm_feed(h, text, len, true);
    hm_free(h);
    vllm_status st = VLLM_OK;
    for (int k = 0; k < 2 && st == VLLM_OK; k++) {
        tp_buf s = {0};
        hm_strip_markers(&s, g.parts[k].data ? g.parts[k].data : "", g.parts[k].len);
        if (s.oom || g.parts[k].oom) st = oom();
        else if (s.len) {
            if (k == 0) r->reasoning = s.data, r->reasoning_len = s.len;
            else r->content = s.data, r->content_len = s.len;
            s = (tp_buf){0};
        }
        tp_buf_free(&s);
    }
    tp_buf_free(&g.cur);
    tp_buf_free(&g.parts[0]);
    tp_buf_free(&g.parts[1]);
    return st;
}

vllm_status reasoning_extract(const reasoning_parser *p, const char *text, size_t len, reasoning_result *out) {
    if (!p || !out || (!text && len)) return vt_error(VLLM_ERR_INVALID_ARG, "reasoning_extract: NULL argument");
    *out = (reasoning_result){0};
    if (!text) text = "";
    vllm_status st;
    if (identity(p)) st = set_part(&out->content, &out->content_len, text, len) ? VLLM_OK : oom();
    else if (p->kind == REASONING_GRANITE) st = extract_granite(text, len, out);
    else if (p->kind == REASONING_GPT_OSS) st = extract_gptoss(text, len, out);
    else st = extract_think(p, text, len, out);
    if (st != VLLM_OK) reasoning_result_clear(out);
    return st;
}

/* ------------------------------------------------------------------ */
/* Reasoning end                                                       */
/* ------------------------------------------------------------------ */

/* The position of the last occurrence of m in s, or -1. */
static long last_pos(const char *s, size_t n, const char *m) {
    long last = -1;
    const char *p = s;
    size_t left = n;
    for (;;) {
        const char *f = tp_find(p, left, m);
        if (!f) return last;
        last = (long)(f - s);
        left -= (size_t)(f - p) + 1;
        p = f + 1;
    }
}

bool reasoning_is_end(const reasoning_parser *p, const char *text, size_t len) {
    if (!p) return false;
    if (!text) text = "", len = 0;
    if (identity(p)) return true;
    if (p->kind == REASONING_GRANITE) {
        int w;
        return first_of(text, len, RESPONSE_STARTS, 2, &w) != NULL;
    }
    if (p->kind == REASONING_GPT_OSS) {
        const char *pre = "<|channel|>final";
        const char *s = text;
        size_t left = len;
        for (;;) {
            const char *f = tp_find(s, left, pre);
            if (!f) return false;
            size_t a = (size_t)(f - text) + strlen(pre), win = len - a < 256 + 11 ? len - a : 256 + 11;
            if (tp_find(text + a, win, "<|message|>")) return true;
            left -= (size_t)(f - s) + 1;
            s = f + 1;
        }
    }
    long st = last_pos(text, len, THINK), en = last_pos(text, len, END_THINK);
    long best = en > st ? en : -1;
    if (p->kind == REASONING_QWEN3) {
        /* an unpaired <tool_call> (after the last </tool_call>) followed by <function */
        long tce = last_pos(text, len, TOOL_CALL_END);
        size_t from = tce < 0 ? 0 : (size_t)tce;
        const char *s = text + from;
        size_t left = len - from;
        for (;;) {
            const char *f = tp_find(s, left, TOOL_CALL);
            if (!f) break;
            size_t a = (size_t)(f - text) + strlen(TOOL_CALL);
            if ((long)(f - text) > st && function_follows(text + a, len - a) && (long)(f - text) > best)
                best = (long)(f - text);
            left -= (size_t)(f - s) + 1;
            s = f + 1;
        }
    }
    return best >= 0 && best > st;
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

enum { S_REASON, S_TCPEND, S_CONTENT, S_GSTART, S_PLAIN };

struct reasoning_stream {
    const reasoning_parser *p;
    int state;
    bool start_stripped;  /* the first <think> was removed */
    tp_buf in;
    size_t in_off;
    tp_buf tcpend;        /* qwen3: "<tool_call>" and what follows while undecided */
    size_t tc_got;        /* bytes of "<function" matched after it */
    tp_out out[2];        /* 0 reasoning, 1 content */
    bool finished, oom;
    /* openai_gptoss */
    hm_reader *h;
    int hk;               /* current message: 0 analysis, 1 other, -1 none */
    bool hk_text;         /* the current message has produced text */
    bool hm_any[2];
    bool final_seen;      /* a final-channel header was read */
};

static void s_emit(reasoning_stream *s, int k, const char *t, size_t n) { tp_put(&s->out[k].b, t, n); }

static void g_begin(void *ctx, const char *channel, const char *recipient, const char *ctype) {
    reasoning_stream *s = ctx;
    (void)recipient, (void)ctype;
    s->hk = strcmp(channel, "analysis") == 0 ? 0 : 1;
    s->hk_text = false;
    if (strcmp(channel, "final") == 0) s->final_seen = true;
}
static void g_sep(reasoning_stream *s) {
    if (s->hk_text) return;
    if (s->hm_any[s->hk]) s_emit(s, s->hk, "\n", 1);
    s->hm_any[s->hk] = true;
    s->hk_text = true;
}
static void g_text(void *ctx, const char *t, size_t n) {
    reasoning_stream *s = ctx;
    if (s->hk < 0 || !n) return;
    g_sep(s);
    s_emit(s, s->hk, t, n);
}
static void g_end(void *ctx, bool complete) {
    reasoning_stream *s = ctx;
    if (s->hk >= 0 && complete) g_sep(s);
    s->hk = -1;
}

vllm_status reasoning_stream_new(const reasoning_parser *p, bool prompt_reasoning_ended, reasoning_stream **out) {
    *out = NULL;
    if (!p) return vt_error(VLLM_ERR_INVALID_ARG, "reasoning_stream_new: NULL parser");
    reasoning_stream *s = calloc(1, sizeof *s);
    if (!s) return oom();
    s->p = p;
    s->hk = -1;
    if (p->kind == REASONING_GPT_OSS) {
        s->h = hm_new(&(hm_events){s, g_begin, g_text, g_end});
        if (!s->h) {
            free(s);
            return oom();
        }
        s->state = prompt_reasoning_ended ? S_CONTENT : S_REASON;
    } else if (prompt_reasoning_ended || identity(p) || (p->kind == REASONING_QWEN3 && !p->thinking)) {
        s->state = S_CONTENT;
    } else {
        s->state = p->kind == REASONING_GRANITE ? S_GSTART : S_REASON;
    }
    *out = s;
    return VLLM_OK;
}

void reasoning_stream_free(reasoning_stream *s) {
    if (!s) return;
    hm_free(s->h);
    tp_buf_free(&s->in);
    tp_buf_free(&s->tcpend);
    tp_buf_free(&s->out[0].b);
    tp_buf_free(&s->out[1].b);
    free(s);
}

bool reasoning_stream_ended(const reasoning_stream *s) {
    if (!s) return false;
    if (s->p->kind == REASONING_GPT_OSS) return s->state == S_CONTENT || s->final_seen;
    return s->state == S_CONTENT || s->state == S_PLAIN;
}

static const char *r_in(reasoning_stream *s) { return s->in.data ? s->in.data + s->in_off : ""; }
static size_t r_len(reasoning_stream *s) { return s->in.len - s->in_off; }
static void r_take(reasoning_stream *s, size_t n) { s->in_off += n; }

/* The think parsers (qwen3, deepseek_r1, deepseek_v3 with thinking). */
static void step_think(reasoning_stream *s, bool at_end) {
    bool qwen = s->p->kind == REASONING_QWEN3;
    for (;;) {
        const char *in = r_in(s);
        size_t n = r_len(s), safe;
        if (!n) break;
        if (s->state == S_CONTENT) {
            s_emit(s, 1, in, n);
            r_take(s, n);
            continue;
        }
        if (s->state == S_TCPEND) {
            /* after <tool_call>: blanks, then "<function" and a blank or '=' (tc_got: bytes of
               "<function" matched so far, kept across pushes so blanks are read once) */
            size_t i = 0, fl = strlen(FUNC);
            int verdict = 0; /* 1 genuine, -1 not */
            while (i < n && !verdict) {
                unsigned char c = (unsigned char)in[i];
                if (s->tc_got == 0 && tp_is_space(c)) {
                    i++;
                } else if (s->tc_got < fl) {
                    if (c != (unsigned char)FUNC[s->tc_got]) verdict = -1;
                    else s->tc_got++, i++;
                } else {
                    verdict = c == '=' || tp_is_space(c) ? 1 : -1;
                }
            }
            tp_put(&s->tcpend, in, i);
            r_take(s, i);
            if (verdict > 0) {
                s_emit(s, 1, s->tcpend.data, s->tcpend.len);
                s->tcpend.len = 0;
                s->state = S_CONTENT;
            } else if (verdict < 0 || at_end) {
                s_emit(s, 0, s->tcpend.data, s->tcpend.len);
                s->tcpend.len = 0;
                s->state = S_REASON;
            }
            continue;
        }
        /* S_REASON */
        const char *tags[3];
        int nt = 0, t_end = nt;
        tags[nt++] = END_THINK;
        int t_start = s->start_stripped ? -1 : nt;
        if (!s->start_stripped) tags[nt++] = THINK;
        int t_tc = qwen ? nt : -1;
        if (qwen) tags[nt++] = TOOL_CALL;
        int w;
        size_t pos = tp_find_tags(in, n, tags, nt, &w, &safe);
        size_t take = w >= 0 ? pos : at_end ? n : safe;
        s_emit(s, 0, in, take);
        r_take(s, take);
        if (w < 0) {
            if (take < n) break;
            continue;
        }
        r_take(s, strlen(tags[w]));
        if (w == t_end) {
            s->state = S_CONTENT;
        } else if (w == t_start) {
            s->start_stripped = true;
        } else if (w == t_tc) {
            s->tcpend.len = 0;
            tp_puts(&s->tcpend, TOOL_CALL);
            s->tc_got = 0;
            s->state = S_TCPEND;
        }
    }
    if (at_end && s->state == S_TCPEND) {
        s_emit(s, 0, s->tcpend.data, s->tcpend.len);
        s->tcpend.len = 0;
        s->state = S_REASON;
    }
}

static void step_granite(reasoning_stream *s, bool at_end) {
    for (;;) {
        const char *in = r_in(s);
        size_t n = r_len(s), safe;
        if (!n) break;
        if (s->state == S_GSTART) {
            int which = -1;
            bool prefix = false;
            for (int i = 0; i < 2; i++) {
                size_t m = strlen(THINK_STARTS[i]);
                if (n >= m && memcmp(in, THINK_STARTS[i], m) == 0) which = i;
                else if (n < m && memcmp(in, THINK_STARTS[i], n) == 0) prefix = true;
            }
            if (which >= 0) {
                r_take(s, strlen(THINK_STARTS[which]));
                s->state = S_REASON;
            } else if (prefix && !at_end) {
                break;
            } else {
                s->state = S_PLAIN; /* no reasoning in this output */
            }
            continue;
        }
        if (s->state != S_REASON) {
            s_emit(s, 1, in, n);
            r_take(s, n);
            continue;
        }
        int w;
        size_t pos = tp_find_tags(in, n, RESPONSE_STARTS, 2, &w, &safe);
        size_t take = w >= 0 ? pos : at_end ? n : safe;
        s_emit(s, 0, in, take);
        r_take(s, take);
        if (w < 0) {
            if (take < n) break;
            continue;
        }
        r_take(s, strlen(RESPONSE_STARTS[w]));
        s->state = S_CONTENT;
    }
}

static void step(reasoning_stream *s, bool at_end) {
    if (s->p->kind == REASONING_GPT_OSS) {
        if (s->state == S_CONTENT) {
            s_emit(s, 1, r_in(s), r_len(s));
            r_take(s, r_len(s));
            return;
        }
        r_take(s, hm_feed(s->h, r_in(s), r_len(s), at_end));
    } else if (s->p->kind == REASONING_GRANITE) {
        step_granite(s, at_end);
    } else {
        step_think(s, at_end);
    }
}

static const char *frag(tp_out *o, bool final, size_t *len) {
    size_t end = o->b.len;
    if (!final) end -= tp_utf8_incomplete_tail(o->b.data ? o->b.data : "", o->b.len);
    if (end <= o->sent) {
        *len = 0;
        return NULL;
    }
    const char *p = o->b.data + o->sent;
    *len = end - o->sent;
    o->sent = end;
    return p;
}

static vllm_status deliver(reasoning_stream *s, bool final, reasoning_delta *d) {
    if (s->in.oom || s->tcpend.oom || s->out[0].b.oom || s->out[1].b.oom) return oom();
    d->reasoning = frag(&s->out[0], final, &d->reasoning_len);
    d->content = frag(&s->out[1], final, &d->content_len);
    return VLLM_OK;
}

static void compact(reasoning_stream *s) {
    for (int k = 0; k < 2; k++) {
        tp_buf_drop(&s->out[k].b, s->out[k].sent);
        s->out[k].sent = 0;
    }
    tp_buf_drop(&s->in, s->in_off);
    s->in_off = 0;
}

vllm_status reasoning_stream_push(reasoning_stream *s, const char *piece, size_t len, reasoning_delta *out) {
    if (!s || !out || (!piece && len)) return vt_error(VLLM_ERR_INVALID_ARG, "reasoning_stream_push: NULL argument");
    *out = (reasoning_delta){0};
    if (s->finished) return vt_error(VLLM_ERR_INVALID_ARG, "reasoning_stream_push: the stream has finished");
    compact(s);
    if (len) tp_put(&s->in, piece, len);
    if (s->in.oom) return oom();
    step(s, false);
    return deliver(s, false, out);
}

vllm_status reasoning_stream_finish(reasoning_stream *s, reasoning_delta *out) {
    if (!s || !out) return vt_error(VLLM_ERR_INVALID_ARG, "reasoning_stream_finish: NULL argument");
    *out = (reasoning_delta){0};
    if (s->finished) return vt_error(VLLM_ERR_INVALID_ARG, "reasoning_stream_finish: the stream has finished");
    compact(s);
    step(s, true);
    s->finished = true;
    return deliver(s, true, out);
}
