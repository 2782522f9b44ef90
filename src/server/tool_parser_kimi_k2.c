/*
 * tool_parser_kimi_k2.c: the kimi_k2 parser (Kimi-K2: <|tool_calls_section_begin|><|tool_call_begin|>
 * functions.NAME:IDX<|tool_call_argument_begin|>ARGUMENTS<|tool_call_end|>...<|tool_calls_section_end|>).
 *
 * Follows vllm/tool_parsers/kimi_k2_tool_parser.py@c853e154 (KimiK2ToolParser, the regex parser; vLLM
 * later moved it to an engine adapter, vllm/frontend/processing/tool_parsers/kimi_k2_tool_parser.py@761f1975,
 * whose adjust_request sets skip_special_tokens=False when tools are given: toolp_needs_special_tokens):
 * - extract_tool_calls: no "<|tool_calls_section_begin|>" in the text -> tools_called false, the whole
 *   text as content. Only the plural token counts here: vLLM accepts the singular variant
 *   <|tool_call_section_begin|> in its streaming path alone, so a text with only the singular one is plain
 *   content (and the stream below follows this non-streaming rule). Otherwise every findall match of
 *   <\|tool_call_begin\|>\s*(?P<tool_call_id>[^<]+:\d+)\s*<\|tool_call_argument_begin\|>\s*
 *   (?P<function_arguments>(?:(?!<\|tool_call_begin\|>).)*?)\s*<\|tool_call_end\|>   (DOTALL)
 *   is a call: its id is tool_call_id as written ("functions.get_weather:0": the first '<' after the begin
 *   must start <|tool_call_argument_begin|>, the text before it, blanks stripped, must end in ':' and
 *   digits with something before the ':'), its name tool_call_id.split(":")[0].split(".")[-1]
 *   ("get_weather"; "get_weather:0" -> "get_weather"), its arguments the text up to the first
 *   <|tool_call_end|> with the blanks around them stripped, exactly as written otherwise (no JSON check:
 *   malformed JSON is passed through, vLLM's test_extract_tool_calls_invalid_json). Arguments that
 *   contain <|tool_call_begin|> fail that match (the search goes on from the next begin); a call without
 *   <|tool_call_end|> is not matched and dropped, as is an id not ending in ":IDX"
 *   (test_extract_tool_calls_invalid_funcall). content = the text before <|tool_calls_section_begin|>
 *   (None when empty); text inside the section but outside calls and text after
 *   <|tool_calls_section_end|> are dropped; tools_called is true even when nothing matched. Like vLLM,
 *   the matches are searched in the whole text, also before the section begin.
 *   \s is the regex module's Unicode White_Space (ASCII blanks, U+0085, U+00A0, U+1680, U+2000-200A,
 *   U+2028/9, U+202F, U+205F, U+3000); \d here is ASCII digits only (Python's also takes other
 *   scripts' decimal digits: a documented disagreement).
 * - streaming: content before <|tool_calls_section_begin|> (a suffix that could start it held back);
 *   after it nothing is content (vLLM suppresses text inside the section too; text after
 *   <|tool_calls_section_end|>, which vLLM's streaming passes through, is dropped as the non-streaming
 *   result drops it). A call is announced, with the model's id and the name, once its
 *   <|tool_call_argument_begin|> is read (vLLM: once the portion after the begin matches "ID:IDX"); its
 *   arguments stream as they come, leading blanks skipped and a run of blanks held until something other
 *   than <|tool_call_end|> follows it. Disagreements with the non-streaming result, all output vLLM's
 *   streaming announces too: a call whose arguments never end (the text ends first) or run into a new
 *   <|tool_call_begin|> (which then starts the next call) stays announced with the arguments streamed so
 *   far; a call written before the section begin streams as content.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char SECTION_BEGIN[] = "<|tool_calls_section_begin|>", CALL_BEGIN[] = "<|tool_call_begin|>";
static const char ARG_BEGIN[] = "<|tool_call_argument_begin|>", CALL_END[] = "<|tool_call_end|>";

/* The regex module's \s (White_Space) at s[0..n): its byte length, 0 when s starts with something else,
 * -1 when s[0..n) is the cut-off start of one. */
static int ws_at(const char *s, size_t n) {
    static const char *const MB[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                     "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    if (!n) return -1;
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return 1;
    if (c < 0x80) return 0;
    /* U+2000..U+200A: E2 80 80..8A */
    if (c == 0xE2 && (n < 2 || (unsigned char)s[1] == 0x80)) {
        if (n < 3) return -1;
        if ((unsigned char)s[2] >= 0x80 && (unsigned char)s[2] <= 0x8A) return 3;
    }
    for (size_t i = 0; i < sizeof MB / sizeof *MB; i++) {
        size_t m = strlen(MB[i]);
        if (memcmp(s, MB[i], n < m ? n : m) == 0) return n < m ? -1 : (int)m;
    }
    return 0;
}

/* The byte length of a White_Space character ending at s + n (0 when none). */
static size_t ws_before(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (ws_at(s + n - k, k) == (int)k) return k;
    return 0;
}

static size_t skip_ws(const char *s, size_t n) {
    size_t i = 0;
    int k;
    while (i < n && (k = ws_at(s + i, n - i)) > 0) i += (size_t)k;
    return i;
}

static size_t rstrip_len(const char *s, size_t n) {
    size_t k;
    while (n && (k = ws_before(s, n)) > 0) n -= k;
    return n;
}

/* The id segment (the text between the call begin and its argument begin, which holds no '<') against
 * \s*(?P<tool_call_id>[^<]+:\d+)\s* with the regex's preferences: true and *id / *idn when it matches. */
static bool id_match(const char *s, size_t n, const char **id, size_t *idn) {
    size_t w1 = skip_ws(s, n);
    const char *r = s + w1;
    size_t rn = rstrip_len(r, n - w1);
    if (rn < 2) return false;
    /* greedy [^<]+ then ':' and digits to the end of the stripped part: the last ':' */
    size_t j = rn;
    while (j > 0 && r[j - 1] != ':') j--;
    if (j == 0 || j == rn) return false;
    for (size_t k = j; k < rn; k++)
        if (r[k] < '0' || r[k] > '9') return false;
    j--; /* the ':' */
    if (j == 0) {
        /* nothing before the ':': \s* gives back its last blank to [^<]+ */
        size_t k = w1 ? ws_before(s, w1) : 0;
        if (!k) return false;
        r -= k, rn += k;
    }
    *id = r;
    *idn = rn;
    return true;
}

/* tool_call_id.split(":")[0].split(".")[-1] */
static void id_name(const char *id, size_t n, const char **name, size_t *nn) {
    const char *colon = memchr(id, ':', n);
    size_t m = colon ? (size_t)(colon - id) : n, k = m;
    while (k > 0 && id[k - 1] != '.') k--;
    *name = id + k;
    *nn = m - k;
}

static vllm_status kimi_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    (void)p;
    const char *sb = tp_find(text, len, SECTION_BEGIN);
    if (!sb) return tp_result_plain(r, text, len);
    size_t bl = strlen(CALL_BEGIN), al = strlen(ARG_BEGIN), el = strlen(CALL_END);
    size_t pos = 0, endp = 0;
    bool end_known = false;
    for (;;) {
        const char *b = tp_find(text + pos, len - pos, CALL_BEGIN);
        if (!b) break;
        size_t e = (size_t)(b - text) + bl;
        pos = (size_t)(b - text) + 1; /* where the search resumes when this begin does not match */
        const char *lt = memchr(text + e, '<', len - e);
        if (!lt) break; /* no argument begin anywhere after: no later begin can match either */
        size_t l = (size_t)(lt - text);
        const char *id;
        size_t idn;
        if (len - l < al || memcmp(lt, ARG_BEGIN, al) != 0 || !id_match(text + e, l - e, &id, &idn)) continue;
        size_t a1 = l + al;
        a1 += skip_ws(text + a1, len - a1);
        /* the first call end after the arguments start (cached: begins that fail reuse it) */
        if (!end_known || endp < a1) {
            const char *q = tp_find(text + a1, len - a1, CALL_END);
            if (!q) break; /* no call end: no later begin can match either */
            endp = (size_t)(q - text);
            end_known = true;
        }
        /* the arguments may not hold a call begin: (?:(?!<\|tool_call_begin\|>).)*? */
        if (tp_find(text + a1, endp - a1, CALL_BEGIN)) continue;
        size_t an = rstrip_len(text + a1, endp - a1);
        const char *name;
        size_t nn;
        id_name(id, idn, &name, &nn);
        if (!tp_result_add(r, name, nn, text + a1, an, TP_ID_CHATCMPL))
            return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
        toolp_call *c = &r->calls[r->num_calls - 1];
        free(c->id);
        if (!(c->id = tp_strndup(id, idn))) {
            c->id = tp_strndup("", 0); /* keep the result freeable */
            return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
        }
        pos = endp + el;
    }
    r->tools_called = true;
    size_t n = (size_t)(sb - text);
    if (n && !tp_result_content(r, text, n)) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    return VLLM_OK;
}

enum { K_TEXT, K_SEEK, K_ID, K_ARGS };

typedef struct kimi_st {
    int state;
    tp_buf id;      /* the id segment read so far */
    tp_buf pend;    /* blanks in the arguments not handed out yet (they end the arguments before a call end) */
    bool lead;      /* at the start of the arguments: blanks are skipped */
} kimi_st;

static bool kimi_init(toolp_stream *s) {
    kimi_st *k = calloc(1, sizeof *k);
    if (!k) return false;
    s->impl = k;
    return true;
}

static void kimi_free(void *impl) {
    kimi_st *k = impl;
    tp_buf_free(&k->id);
    tp_buf_free(&k->pend);
    free(k);
}

/* Argument text in[0..n) of call c: blanks pend until something else follows them. Returns the bytes
 * consumed (an incomplete UTF-8 sequence at the end waits for more unless final). */
static size_t kimi_args(toolp_stream *s, kimi_st *k, tp_callst *c, const char *in, size_t n, bool final) {
    size_t i = 0;
    if (k->lead) {
        int lw = 0;
        while (i < n && (lw = ws_at(in + i, n - i)) > 0) i += (size_t)lw;
        if (i == n) return n;
        if (lw < 0 && !final) return i; /* a cut character that may be a blank */
        k->lead = false;
    }
    while (i < n) {
        /* a run of non-blanks */
        size_t j = i;
        int w = 0;
        while (j < n && (w = ws_at(in + j, n - j)) == 0) j++;
        if (j > i) {
            if (k->pend.len) tp_call_args(s, c, k->pend.data, k->pend.len);
            k->pend.len = 0;
            tp_call_args(s, c, in + i, j - i);
        }
        if (j == n) return n;
        if (w < 0) {
            if (!final) return j;
            /* the text ended inside a character: not a blank */
            if (k->pend.len) tp_call_args(s, c, k->pend.data, k->pend.len);
            k->pend.len = 0;
            tp_call_args(s, c, in + j, n - j);
            return n;
        }
        tp_put(&k->pend, in + j, (size_t)w);
        if (k->pend.oom) s->oom = true;
        i = j + (size_t)w;
    }
    return n;
}

static void kimi_step(toolp_stream *s, bool at_end) {
    kimi_st *k = s->impl;
    static const char *const t_section[] = {SECTION_BEGIN}, *const t_call[] = {CALL_BEGIN},
                             *const t_args[] = {CALL_END, CALL_BEGIN};
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s), safe;
        if (!n || s->oom) return;
        int w;
        switch (k->state) {
        case K_TEXT:
        case K_SEEK: {
            bool text = k->state == K_TEXT;
            const char *tag = text ? SECTION_BEGIN : CALL_BEGIN;
            size_t pos = tp_find_tags(in, n, text ? t_section : t_call, 1, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            if (text) tp_emit_content(s, in, take); /* inside the section nothing is content */
            tp_consume(s, take);
            if (w < 0) return;
            tp_consume(s, strlen(tag));
            k->state = text ? K_SEEK : K_ID;
            k->id.len = 0;
            continue;
        }
        case K_ID: {
            const char *lt = memchr(in, '<', n);
            if (!lt) {
                if (at_end) {
                    tp_consume(s, n);
                    return;
                }
                tp_put(&k->id, in, n);
                tp_consume(s, n);
                if (k->id.oom) s->oom = true;
                return;
            }
            size_t l = (size_t)(lt - in), al = strlen(ARG_BEGIN), have = n - l < al ? n - l : al;
            tp_put(&k->id, in, l);
            tp_consume(s, l);
            if (k->id.oom) {
                s->oom = true;
                return;
            }
            if (memcmp(lt, ARG_BEGIN, have) == 0 && have < al && !at_end) return; /* wait for the rest */
            const char *id;
            size_t idn;
            if (have < al || memcmp(lt, ARG_BEGIN, al) != 0 || !id_match(k->id.data ? k->id.data : "", k->id.len, &id, &idn)) {
                k->state = K_SEEK; /* no match from this begin; the '<' may start the next one */
                continue;
            }
            tp_consume(s, al);
            const char *name;
            size_t nn;
            id_name(id, idn, &name, &nn);
            tp_callst *c = tp_call_new(s, name, nn, TP_ID_CHATCMPL);
            if (!c) return;
            if (!(c->xid = tp_strndup(id, idn))) {
                s->oom = true;
                return;
            }
            k->state = K_ARGS;
            k->lead = true;
            k->pend.len = 0;
            continue;
        }
        case K_ARGS: {
            tp_callst *c = &s->calls[s->ncalls - 1];
            size_t pos = tp_find_tags(in, n, t_args, 2, &w, &safe);
            size_t upto = w >= 0 ? pos : at_end ? n : safe;
            size_t used = kimi_args(s, k, c, in, upto, w >= 0 || at_end);
            tp_consume(s, used);
            if (w < 0) return; /* a partial tag, or a cut character, waits (at the end: all taken) */
            /* the call ends here: blanks before the tag are not arguments. A call begin inside the
             * arguments fails vLLM's match for this call (announced all the same) and starts the next. */
            k->pend.len = 0;
            tp_consume(s, strlen(w == 0 ? CALL_END : CALL_BEGIN));
            k->state = w == 0 ? K_SEEK : K_ID;
            k->id.len = 0;
            continue;
        }
        }
    }
}

const tp_family tp_fam_kimi_k2 = {kimi_extract, kimi_init, kimi_step, kimi_free};
