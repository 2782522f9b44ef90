/*
 * tool_parser.c: the tool-parser registry, results, the streaming core (held-back input, deltas, ids) and the
 * helpers every parser family shares; the families live in tool_parser_<family>.c.
 *
 * vLLM sources followed: vllm/tool_parsers/__init__.py (the registered names), abstract_tool_parser.py
 * (ExtractedToolCallInformation: tools_called, tool_calls, content), vllm/entrypoints/chat_utils.py
 * make_tool_call_id ("chatcmpl-tool-" + random_uuid(): 32 hex), the protocol's ToolCall (id, type,
 * function{name, arguments}) and DeltaToolCall (id, type, index, function{name, arguments}, unset fields left
 * out), mistral_tool_parser.py MistralToolCall.generate_random_id (9 of [A-Za-z0-9]).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

/* ------------------------------------------------------------------ */
/* Buffers and text helpers                                            */
/* ------------------------------------------------------------------ */

void tp_put(tp_buf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (!b->data || b->len + n + 1 > b->cap) {
        if (n > SIZE_MAX / 4 - b->len) {
            b->oom = true;
            return;
        }
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->len + n + 1) nc *= 2;
        char *d = realloc(b->data, nc);
        if (!d) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = nc;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void tp_puts(tp_buf *b, const char *s) { tp_put(b, s, strlen(s)); }
void tp_putc(tp_buf *b, char c) { tp_put(b, &c, 1); }

void tp_buf_free(tp_buf *b) {
    free(b->data);
    *b = (tp_buf){0};
}

void tp_buf_drop(tp_buf *b, size_t n) {
    if (!b->data || !n) return;
    if (n > b->len) n = b->len;
    memmove(b->data, b->data + n, b->len - n + 1);
    b->len -= n;
}

char *tp_strndup(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (!c) return NULL;
    if (n) memcpy(c, s, n);
    c[n] = 0;
    return c;
}

size_t tp_utf8_incomplete_tail(const char *s, size_t n) {
    /* look back over at most 3 continuation bytes for a lead byte whose
       sequence is longer than what follows it */
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

static bool utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return false;
        }
        if (i + need >= n) return false;
        if (p[i + 1] < lo || p[i + 1] > hi) return false;
        for (size_t k = 2; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        i += need + 1;
    }
    return true;
}

json_t *tp_json_str(const char *s, size_t n) {
    if (!s) s = "", n = 0;
    if (utf8_valid(s, n)) return json_stringn(s, n);
    /* each byte that does not start a valid sequence becomes U+FFFD */
    tp_buf b = {0};
    size_t i = 0;
    while (i < n) {
        size_t k = 1;
        while (k <= 4 && i + k <= n && !utf8_valid(s + i, k)) k++;
        if (k <= 4 && i + k <= n) {
            tp_put(&b, s + i, k);
            i += k;
        } else {
            tp_puts(&b, "\xEF\xBF\xBD");
            i++;
        }
    }
    json_t *j = b.oom ? NULL : json_stringn(b.data ? b.data : "", b.len);
    tp_buf_free(&b);
    return j;
}

bool tp_is_space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); }

void tp_strip(const char **s, size_t *n) {
    while (*n && tp_is_space((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && tp_is_space((unsigned char)(*s)[*n - 1])) (*n)--;
}

const char *tp_find(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (!m) return s;
    if (m > n) return NULL;
    const char *end = s + n - m;
    for (const char *p = s; p <= end;) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
        p++;
    }
    return NULL;
}

bool tp_starts(const char *s, size_t n, const char *prefix) {
    size_t m = strlen(prefix);
    return n >= m && memcmp(s, prefix, m) == 0;
}

size_t tp_partial_overlap(const char *s, size_t n, const char *tag) {
    size_t m = strlen(tag);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

size_t tp_find_tags(const char *s, size_t n, const char *const *tags, int ntags, int *which, size_t *safe) {
    /* the distinct first bytes of the tags, to jump between candidates */
    unsigned char firsts[16];
    int nf = 0;
    for (int t = 0; t < ntags; t++) {
        unsigned char f = (unsigned char)tags[t][0];
        bool have = false;
        for (int k = 0; k < nf; k++) have |= firsts[k] == f;
        if (!have && nf < 16) firsts[nf++] = f;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool cand = false;
        for (int k = 0; k < nf; k++) cand |= firsts[k] == c;
        if (!cand) continue;
        bool partial = false;
        for (int t = 0; t < ntags; t++) {
            size_t m = strlen(tags[t]);
            if (n - i >= m) {
                if (memcmp(s + i, tags[t], m) == 0) {
                    *which = t;
                    return i;
                }
            } else if (memcmp(s + i, tags[t], n - i) == 0) {
                partial = true;
            }
        }
        if (partial) {
            /* s[i..n) may start a tag; no complete tag begins later either
               (it would have to fit in the same tail), except a shorter one:
               keep scanning for complete ones, remember the earliest partial */
            size_t first_partial = i;
            for (size_t j = i + 1; j < n; j++)
                for (int t = 0; t < ntags; t++) {
                    size_t m = strlen(tags[t]);
                    if (n - j >= m && memcmp(s + j, tags[t], m) == 0) {
                        *which = t;
                        return j;
                    }
                }
            *which = -1;
            *safe = first_partial;
            return n;
        }
    }
    *which = -1;
    *safe = n;
    return n;
}

/* ------------------------------------------------------------------ */
/* Ids                                                                 */
/* ------------------------------------------------------------------ */

static void random_bytes(unsigned char *b, size_t n) {
    if (getentropy(b, n) == 0) return;
    /* no kernel entropy: ids need only be unique, not secret */
    static _Atomic unsigned long long counter;
    unsigned long long x = (unsigned long long)time(NULL) ^ (unsigned long long)(uintptr_t)b;
    x ^= (atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 33, x *= 0xFF51AFD7ED558CCDull, x ^= x >> 33;
        b[i] = (unsigned char)x;
    }
}

void tp_make_id(tp_id_style style, char out[48]) {
    static const char hex[] = "0123456789abcdef";
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[16];
    random_bytes(r, sizeof r);
    if (style == TP_ID_MISTRAL) {
        /* 62 symbols from 16 random bytes: 2 bytes per symbol keeps the bias tiny */
        for (int i = 0; i < 9; i++) out[i] = alnum[(((unsigned)r[i] << 8) | r[(i + 9) % 16]) % 62];
        out[9] = 0;
        return;
    }
    const char *prefix = style == TP_ID_CALL24 ? "call_" : "chatcmpl-tool-";
    size_t nhex = style == TP_ID_CALL24 ? 24 : 32, k = strlen(prefix);
    memcpy(out, prefix, k);
    for (size_t i = 0; i < nhex; i++) out[k + i] = hex[(r[i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out[k + nhex] = 0;
}

/* ------------------------------------------------------------------ */
/* Registry and parsers                                                */
/* ------------------------------------------------------------------ */

static const struct {
    const char *name;
    toolp_kind kind;
} NAMES[] = {
    {"hermes", TOOLP_HERMES},           {"qwen3_coder", TOOLP_QWEN3_CODER}, {"qwen3_xml", TOOLP_QWEN3_XML},
    {"llama3_json", TOOLP_LLAMA3_JSON}, {"llama4_json", TOOLP_LLAMA3_JSON}, {"mistral", TOOLP_MISTRAL},
    {"deepseek_v3", TOOLP_DEEPSEEK_V3}, {"openai", TOOLP_OPENAI},           {"deepseek_v31", TOOLP_DEEPSEEK_V31},
    {"kimi_k2", TOOLP_KIMI_K2},
};
static const char *const NAME_LIST[] = {"hermes",  "qwen3_coder", "qwen3_xml", "llama3_json",  "llama4_json",
                                        "mistral", "deepseek_v3", "openai",    "deepseek_v31", "kimi_k2",
                                        NULL};

bool toolp_kind_from_name(const char *name, toolp_kind *out) {
    if (!name) return false;
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (strcmp(NAMES[i].name, name) == 0) {
            *out = NAMES[i].kind;
            return true;
        }
    return false;
}

const char *toolp_kind_name(toolp_kind kind) {
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (NAMES[i].kind == kind) return NAMES[i].name;
    return "?";
}

const char *const *toolp_names(void) { return NAME_LIST; }

static const tp_family *family(toolp_kind k) {
    switch (k) {
    case TOOLP_HERMES: return &tp_fam_hermes;
    case TOOLP_QWEN3_CODER:
    case TOOLP_QWEN3_XML: return &tp_fam_qwen3;
    case TOOLP_LLAMA3_JSON: return &tp_fam_llama;
    case TOOLP_MISTRAL: return &tp_fam_mistral;
    case TOOLP_DEEPSEEK_V3: return &tp_fam_deepseek;
    case TOOLP_OPENAI: return &tp_fam_openai;
    case TOOLP_DEEPSEEK_V31: return &tp_fam_deepseek_v31;
    case TOOLP_KIMI_K2: return &tp_fam_kimi_k2;
    default: return NULL;
    }
}

vllm_status toolp_parser_new(const char *name, const toolp_options *opt, toolp_parser **out) {
    *out = NULL;
    toolp_kind k;
    if (!toolp_kind_from_name(name, &k))
        return vt_error(VLLM_ERR_INVALID_ARG, "tool call parser: unknown name '%s' (one of hermes, qwen3_coder, "
                        "qwen3_xml, llama3_json, llama4_json, mistral, deepseek_v3, openai, deepseek_v31, kimi_k2)",
                        name ? name : "(null)");
    const json_t *tools = opt && opt->tools && !json_is_null(opt->tools) ? opt->tools : NULL;
    if (tools && !json_is_array(tools))
        return vt_error(VLLM_ERR_INVALID_ARG, "tool call parser: tools must be a JSON array");
    toolp_parser *p = calloc(1, sizeof *p);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    p->kind = k;
    if (opt) {
        p->tools = tools ? json_incref((json_t *)tools) : NULL;
        p->mistral_version = opt->mistral_version;
    }
    *out = p;
    return VLLM_OK;
}

void toolp_parser_free(toolp_parser *p) {
    if (!p) return;
    json_decref(p->tools);
    free(p);
}

toolp_kind toolp_parser_kind(const toolp_parser *p) { return p->kind; }

bool toolp_kind_needs_special_tokens(toolp_kind kind) {
    /* kimi_k2: vLLM's KimiK2ToolParser.adjust_request sets skip_special_tokens=False (the section and call
     * markers are special tokens of Kimi-K2's tokenizer; this text-level parser needs them in the text) */
    return kind == TOOLP_HERMES || kind == TOOLP_MISTRAL || kind == TOOLP_OPENAI || kind == TOOLP_KIMI_K2;
}

bool toolp_needs_special_tokens(const toolp_parser *p) { return toolp_kind_needs_special_tokens(p->kind); }

void toolp_make_call_id(char out[48]) { tp_make_id(TP_ID_CHATCMPL, out); }

/* ------------------------------------------------------------------ */
/* Results                                                             */
/* ------------------------------------------------------------------ */

void toolp_result_clear(toolp_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->num_calls; i++) {
        free(r->calls[i].id);
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->content);
    free(r->reasoning);
    *r = (toolp_result){0};
}

bool tp_result_add(toolp_result *r, const char *name, size_t nn, const char *args, size_t an, tp_id_style style) {
    toolp_call *nc = realloc(r->calls, (r->num_calls + 1) * sizeof *nc);
    if (!nc) return false;
    r->calls = nc;
    toolp_call *c = &r->calls[r->num_calls];
    char id[48];
    tp_make_id(style, id);
    c->id = tp_strndup(id, strlen(id));
    c->name = tp_strndup(name, nn);
    c->arguments = tp_strndup(args, an);
    c->arguments_len = an;
    if (!c->id || !c->name || !c->arguments) {
        free(c->id), free(c->name), free(c->arguments);
        return false;
    }
    r->num_calls++;
    return true;
}

bool tp_result_content(toolp_result *r, const char *s, size_t n) {
    free(r->content);
    r->content = tp_strndup(s, n);
    r->content_len = n;
    return r->content != NULL;
}

vllm_status tp_result_plain(toolp_result *r, const char *text, size_t len) {
    toolp_result_clear(r);
    if (!tp_result_content(r, text, len)) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    return VLLM_OK;
}

vllm_status toolp_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *out) {
    if (!p || !out || (!text && len)) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_extract: NULL argument");
    *out = (toolp_result){0};
    if (!text) text = "";
    vllm_status st = family(p->kind)->extract(p, text, len, out);
    if (st != VLLM_OK) toolp_result_clear(out);
    return st;
}

json_t *toolp_result_tool_calls_json(const toolp_result *r) {
    json_t *a = json_array();
    if (!a) return NULL;
    for (size_t i = 0; i < r->num_calls; i++) {
        json_t *c = json_object(), *f = json_object();
        if (!c || !f || json_array_append_new(a, c) != 0) {
            json_decref(f);
            json_decref(a);
            return NULL;
        }
        if (json_object_set_new(c, "id", tp_json_str(r->calls[i].id, strlen(r->calls[i].id))) ||
            json_object_set_new(c, "type", json_string("function")) || json_object_set_new(c, "function", f) ||
            json_object_set_new(f, "name", tp_json_str(r->calls[i].name, strlen(r->calls[i].name))) ||
            json_object_set_new(f, "arguments", tp_json_str(r->calls[i].arguments, r->calls[i].arguments_len))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

void tp_consume(toolp_stream *s, size_t n) {
    s->in_off += n;
    if (s->in_off > s->in.len) s->in_off = s->in.len;
}

void tp_emit_content(toolp_stream *s, const char *t, size_t n) { tp_put(&s->content.b, t, n); }
void tp_emit_reasoning(toolp_stream *s, const char *t, size_t n) { tp_put(&s->reasoning.b, t, n); }

void tp_withhold(toolp_stream *s, const char *t, size_t n) {
    if (s->ncalls) return;
    s->withholding = true;
    tp_put(&s->withheld, t, n);
}

tp_callst *tp_call_new(toolp_stream *s, const char *name, size_t n, tp_id_style style) {
    if (s->ncalls == s->capcalls) {
        size_t nc = s->capcalls ? s->capcalls * 2 : 4;
        tp_callst *c = realloc(s->calls, nc * sizeof *c);
        if (!c) {
            s->oom = true;
            return NULL;
        }
        s->calls = c;
        s->capcalls = nc;
    }
    tp_callst *c = &s->calls[s->ncalls];
    *c = (tp_callst){0};
    c->name = tp_strndup(name, n);
    if (!c->name) {
        s->oom = true;
        return NULL;
    }
    tp_make_id(style, c->id);
    s->ncalls++;
    /* a call came: what was withheld is not content after all */
    tp_buf_free(&s->withheld);
    s->withholding = false;
    return c;
}

void tp_call_args(toolp_stream *s, tp_callst *c, const char *t, size_t n) {
    (void)s;
    tp_put(&c->args, t, n);
}

vllm_status toolp_stream_new(const toolp_parser *p, toolp_stream **out) {
    *out = NULL;
    if (!p) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_stream_new: NULL parser");
    toolp_stream *s = calloc(1, sizeof *s);
    if (!s) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    s->p = p;
    s->fam = family(p->kind);
    if (!s->fam->init(s)) {
        free(s);
        return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    }
    *out = s;
    return VLLM_OK;
}

void toolp_stream_free(toolp_stream *s) {
    if (!s) return;
    if (s->fam && s->impl) s->fam->free_impl(s->impl);
    tp_buf_free(&s->in);
    tp_buf_free(&s->content.b);
    tp_buf_free(&s->reasoning.b);
    tp_buf_free(&s->withheld);
    for (size_t i = 0; i < s->ncalls; i++) {
        free(s->calls[i].name);
        free(s->calls[i].xid);
        tp_buf_free(&s->calls[i].args);
    }
    free(s->calls);
    free(s->deltas);
    free(s);
}

/* The part of o not handed out yet, up to a UTF-8 boundary unless final. */
static const char *out_frag(tp_out *o, bool final, size_t *len) {
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

static vllm_status build_delta(toolp_stream *s, bool final, toolp_delta *d) {
    *d = (toolp_delta){0};
    if (s->oom || s->content.b.oom || s->reasoning.b.oom) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    d->content = out_frag(&s->content, final, &d->content_len);
    d->reasoning = out_frag(&s->reasoning, final, &d->reasoning_len);
    size_t nd = 0;
    for (size_t i = 0; i < s->ncalls; i++) {
        tp_callst *c = &s->calls[i];
        if (c->args.oom) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
        size_t end = c->args.len;
        if (!final) end -= tp_utf8_incomplete_tail(c->args.data ? c->args.data : "", c->args.len);
        if (c->announced && end <= c->sent) continue;
        if (nd == s->capdeltas) {
            size_t nc = s->capdeltas ? s->capdeltas * 2 : 4;
            toolp_call_delta *nd_ = realloc(s->deltas, nc * sizeof *nd_);
            if (!nd_) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
            s->deltas = nd_;
            s->capdeltas = nc;
        }
        toolp_call_delta *e = &s->deltas[nd++];
        e->index = i;
        e->id = c->announced ? NULL : c->xid ? c->xid : c->id;
        e->name = c->announced ? NULL : c->name;
        e->arguments = end > c->sent ? c->args.data + c->sent : "";
        e->arguments_len = end > c->sent ? end - c->sent : 0;
        e->name_null = false;
        if (end > c->sent) c->sent = end;
        c->announced = true;
    }
    d->calls = nd ? s->deltas : NULL;
    d->num_calls = nd;
    return VLLM_OK;
}

/* Drops what earlier deltas handed out (their pointers expire now). */
static void compact(toolp_stream *s) {
    tp_buf_drop(&s->content.b, s->content.sent);
    s->content.sent = 0;
    tp_buf_drop(&s->reasoning.b, s->reasoning.sent);
    s->reasoning.sent = 0;
    tp_buf_drop(&s->in, s->in_off);
    s->in_off = 0;
}

vllm_status toolp_stream_push(toolp_stream *s, const char *piece, size_t len, toolp_delta *out) {
    if (!s || !out || (!piece && len)) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_stream_push: NULL argument");
    *out = (toolp_delta){0};
    if (s->finished) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_stream_push: the stream has finished");
    compact(s);
    if (len) tp_put(&s->in, piece, len);
    if (s->in.oom) return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    s->fam->step(s, false);
    return build_delta(s, false, out);
}

vllm_status toolp_stream_finish(toolp_stream *s, toolp_delta *out) {
    if (!s || !out) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_stream_finish: NULL argument");
    *out = (toolp_delta){0};
    if (s->finished) return vt_error(VLLM_ERR_INVALID_ARG, "toolp_stream_finish: the stream has finished");
    compact(s);
    s->fam->step(s, true);
    s->finished = true;
    if (!s->ncalls && s->withholding) tp_put(&s->content.b, s->withheld.data ? s->withheld.data : "", s->withheld.len);
    return build_delta(s, true, out);
}

size_t toolp_stream_num_calls(const toolp_stream *s) { return s ? s->ncalls : 0; }

const char *toolp_stream_call_name(const toolp_stream *s, size_t i) {
    return s && i < s->ncalls ? s->calls[i].name : NULL;
}

const char *toolp_stream_call_arguments(const toolp_stream *s, size_t i, size_t *len) {
    if (!s || i >= s->ncalls) return NULL;
    if (len) *len = s->calls[i].args.len;
    return s->calls[i].args.data ? s->calls[i].args.data : "";
}

json_t *toolp_delta_tool_calls_json(const toolp_delta *d) {
    if (!d || !d->num_calls) return NULL;
    json_t *a = json_array();
    if (!a) return NULL;
    for (size_t i = 0; i < d->num_calls; i++) {
        const toolp_call_delta *e = &d->calls[i];
        json_t *c = json_object(), *f = json_object();
        if (!c || !f || json_array_append_new(a, c) != 0) {
            json_decref(f);
            json_decref(a);
            return NULL;
        }
        int bad = 0;
        if (e->id) {
            bad |= json_object_set_new(c, "id", tp_json_str(e->id, strlen(e->id)));
            bad |= json_object_set_new(c, "type", json_string("function"));
        }
        bad |= json_object_set_new(c, "index", json_integer((json_int_t)e->index));
        bad |= json_object_set_new(c, "function", f);
        if (e->name) bad |= json_object_set_new(f, "name", tp_json_str(e->name, strlen(e->name)));
        else if (e->name_null) bad |= json_object_set_new(f, "name", json_null());
        bad |= json_object_set_new(f, "arguments", tp_json_str(e->arguments, e->arguments_len));
        if (bad) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}
