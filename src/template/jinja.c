/*
 * jinja.c: the Jinja2 interpreter behind chat templates: lexer (with trim_blocks /
 * lstrip_blocks / "-" whitespace control), recursive-descent parser to an AST, and a
 * tree-walking evaluator over a small dynamic value model (Python semantics).
 *
 * Memory: every allocation of a render comes from one arena (jt_alloc) freed at the end.
 * Errors: jt_fail() records "chat template: line N: ..." and longjmps back to jt_render.
 */
#include "template/jinja.h"

#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "core/error.h"

/* ------------------------------------------------------------------ */
/* Values                                                              */
/* ------------------------------------------------------------------ */

typedef enum {
    V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_MACRO, V_FUNC, V_LOOP
} jt_type;

typedef struct jt_list jt_list;
typedef struct jt_dict jt_dict;
typedef struct jt_macro jt_macro;
typedef struct jt_loop jt_loop;

typedef struct jv {
    jt_type t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        jt_list *l;
        jt_dict *d;
        jt_macro *m;
        int fn;      /* V_FUNC: a global function id */
        jt_loop *lp;
    } u;
} jv;

struct jt_list { size_t n, cap; jv *v; };
struct jt_dict { size_t n, cap; jv *k, *v; bool ns; };

typedef struct node node;
typedef struct scope scope;
struct jt_macro { node *def; scope *closure; bool is_caller; };
struct jt_loop { jt_list *items; size_t i; };

static const jv UNDEF = {V_UNDEF, {0}};
static const jv NONE = {V_NONE, {0}};

/* ------------------------------------------------------------------ */
/* Render state, arena, errors                                         */
/* ------------------------------------------------------------------ */

typedef struct chunk { struct chunk *next; size_t used, cap; max_align_t data[]; } chunk;

struct scope { scope *parent; jt_dict *vars; };

typedef struct {
    jmp_buf jmp;
    vllm_status status;
    chunk *chunks;
    size_t mem;
    char *out;          /* malloc'd output buffer */
    size_t out_n, out_cap;
    int line;
    int depth;
    long long steps;
    int ctrl;           /* 0, CTRL_BREAK, CTRL_CONTINUE */
    scope *root;
    jv filter_input;    /* the body of a {% filter %} block */
    const char *src;
    size_t line_pos;    /* line_at's cursor: src[0, line_pos) holds line_nl newlines */
    int line_nl;
} R;

enum { CTRL_BREAK = 1, CTRL_CONTINUE = 2 };

static _Noreturn void jt_fail(R *r, const char *fmt, ...) VT_PRINTF(2, 3);
static _Noreturn void jt_fail(R *r, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vt_error(r->status, "chat template: line %d: %s", r->line, msg);
    longjmp(r->jmp, 1);
}

static void *jt_alloc(R *r, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    chunk *c = r->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (r->mem > JT_MAX_MEMORY || cap > JT_MAX_MEMORY - r->mem)
            jt_fail(r, "template uses more than %u MiB of memory", JT_MAX_MEMORY >> 20);
        c = malloc(sizeof(chunk) + cap);
        if (!c) {
            r->status = VLLM_ERR_NO_MEMORY;
            jt_fail(r, "out of memory");
        }
        c->next = r->chunks, c->used = 0, c->cap = cap;
        r->chunks = c;
        r->mem += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

static char *jt_strndup(R *r, const char *s, size_t n) {
    char *p = jt_alloc(r, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------ */
/* Growable byte buffer (arena-backed) and value constructors          */
/* ------------------------------------------------------------------ */

typedef struct { char *p; size_t n, cap; } sbuf;

static void sb_put(R *r, sbuf *b, const char *s, size_t n) {
    if (n > JT_MAX_OUTPUT || b->n > JT_MAX_OUTPUT - n)
        jt_fail(r, "a string is longer than %u MiB", JT_MAX_OUTPUT >> 20);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n) cap *= 2;
        char *p = jt_alloc(r, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void sb_puts(R *r, sbuf *b, const char *s) { sb_put(r, b, s, strlen(s)); }

static jv mk_bool(bool b) { jv v = {V_BOOL, {0}}; v.u.b = b; return v; }
static jv mk_int(int64_t i) { jv v = {V_INT, {0}}; v.u.i = i; return v; }
static jv mk_float(double f) { jv v = {V_FLOAT, {0}}; v.u.f = f; return v; }
static jv mk_strn(const char *p, size_t n) { jv v = {V_STR, {0}}; v.u.s.p = p, v.u.s.n = n; return v; }
static jv mk_str(const char *p) { return mk_strn(p, strlen(p)); }
static jv sb_val(sbuf *b) { return mk_strn(b->p ? b->p : "", b->n); }

static jv mk_list(R *r) {
    jv v = {V_LIST, {0}};
    v.u.l = jt_alloc(r, sizeof(jt_list));
    memset(v.u.l, 0, sizeof(jt_list));
    return v;
}
static void list_push(R *r, jt_list *l, jv x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        if (cap > (JT_MAX_MEMORY / sizeof(jv))) jt_fail(r, "list too long");
        jv *v = jt_alloc(r, cap * sizeof(jv));
        if (l->n) memcpy(v, l->v, l->n * sizeof(jv));
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = x;
}
static jv mk_dict(R *r) {
    jv v = {V_DICT, {0}};
    v.u.d = jt_alloc(r, sizeof(jt_dict));
    memset(v.u.d, 0, sizeof(jt_dict));
    return v;
}

static bool v_eq(const jv *a, const jv *b);

static jv *dict_find(jt_dict *d, jv k) {
    for (size_t i = 0; i < d->n; i++)
        if (v_eq(&d->k[i], &k)) return &d->v[i];
    return NULL;
}
static jv *dict_finds(jt_dict *d, const char *k) {
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, k, n) == 0)
            return &d->v[i];
    return NULL;
}
static void dict_set(R *r, jt_dict *d, jv k, jv v) {
    jv *slot = dict_find(d, k);
    if (slot) { *slot = v; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        if (cap > (JT_MAX_MEMORY / sizeof(jv))) jt_fail(r, "dict too large");
        jv *nk = jt_alloc(r, cap * sizeof(jv)), *nv = jt_alloc(r, cap * sizeof(jv));
        if (d->n) memcpy(nk, d->k, d->n * sizeof(jv)), memcpy(nv, d->v, d->n * sizeof(jv));
        d->k = nk, d->v = nv, d->cap = cap;
    }
    d->k[d->n] = k, d->v[d->n] = v, d->n++;
}

static jv from_json(R *r, const json_t *j, int depth) {
    if (depth > JT_MAX_DEPTH) jt_fail(r, "variables nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: return NONE;
    case JSON_TRUE: return mk_bool(true);
    case JSON_FALSE: return mk_bool(false);
    case JSON_INTEGER: return mk_int((int64_t)json_integer_value(j));
    case JSON_REAL: return mk_float(json_real_value(j));
    case JSON_STRING: return mk_strn(jt_strndup(r, json_string_value(j), json_string_length(j)), json_string_length(j));
    case JSON_ARRAY: {
        jv l = mk_list(r);
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) list_push(r, l.u.l, from_json(r, x, depth + 1));
        return l;
    }
    case JSON_OBJECT: {
        jv d = mk_dict(r);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) dict_set(r, d.u.d, mk_str(jt_strndup(r, k, strlen(k))), from_json(r, x, depth + 1));
        return d;
    }
    }
    return NONE;
}

/* ------------------------------------------------------------------ */
/* Lexer                                                               */
/* ------------------------------------------------------------------ */

typedef enum {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT,
    T_FLOAT, T_OP
} tok_type;

typedef struct {
    tok_type t;
    int line;
    const char *p;  /* text / name / op / decoded string */
    size_t n;
    int64_t i;
    double f;
} tok;

typedef struct { tok *v; size_t n, cap; } toks;

static void tok_push(R *r, toks *ts, tok t) {
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? ts->cap * 2 : 256;
        tok *v = jt_alloc(r, cap * sizeof(tok));
        if (ts->n) memcpy(v, ts->v, ts->n * sizeof(tok));
        ts->v = v, ts->cap = cap;
    }
    ts->v[ts->n++] = t;
}

/* The line (from 1) of src[pos]. The lexer asks in increasing order: counting on from the last
   answer keeps lexing linear (a rescan from the start made it quadratic in the template's size). */
static int line_at(R *r, const char *src, size_t pos) {
    if (pos < r->line_pos) r->line_pos = 0, r->line_nl = 0;
    for (size_t i = r->line_pos; i < pos; i++) r->line_nl += src[i] == '\n';
    r->line_pos = pos;
    return r->line_nl + 1;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void put_utf8(R *r, sbuf *b, uint32_t cp) {
    utf8proc_uint8_t tmp[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, tmp);
    if (n <= 0) jt_fail(r, "bad unicode escape");
    sb_put(r, b, (const char *)tmp, (size_t)n);
}

/* Lexes the expression tokens of one tag from src[*pos] up to its closing delimiter. */
static void lex_tag(R *r, toks *ts, const char *src, size_t len, size_t *pos, char close, bool *strip_after) {
    size_t i = *pos;
    for (;;) {
        while (i < len && is_ws(src[i])) i++;
        if (i >= len) { r->line = line_at(r, src, i); jt_fail(r, "unexpected end of template, tag not closed"); }
        r->line = line_at(r, src, i);
        tok t = {0};
        t.line = r->line;
        char c = src[i];
        /* closing delimiter, with optional - or + */
        if ((c == '-' || c == '+') && i + 2 < len + 1 && i + 1 < len && src[i + 1] == close && i + 2 < len && src[i + 2] == '}') {
            *strip_after = c == '-';
            *pos = i + 3;
            return;
        }
        if (c == close && i + 1 < len && src[i + 1] == '}') {
            *strip_after = false;
            *pos = i + 2;
            return;
        }
        if (isalpha((unsigned char)c) || c == '_') {
            size_t s = i;
            while (i < len && (isalnum((unsigned char)src[i]) || src[i] == '_')) i++;
            t.t = T_NAME, t.p = src + s, t.n = i - s;
        } else if (isdigit((unsigned char)c)) {
            size_t s = i;
            bool is_float = false;
            while (i < len && (isdigit((unsigned char)src[i]) || src[i] == '_')) i++;
            if (i + 1 < len && src[i] == '.' && isdigit((unsigned char)src[i + 1])) {
                is_float = true;
                i++;
                while (i < len && (isdigit((unsigned char)src[i]) || src[i] == '_')) i++;
            }
            if (i < len && (src[i] == 'e' || src[i] == 'E')) {
                size_t j = i + 1;
                if (j < len && (src[j] == '+' || src[j] == '-')) j++;
                if (j < len && isdigit((unsigned char)src[j])) {
                    is_float = true;
                    i = j;
                    while (i < len && isdigit((unsigned char)src[i])) i++;
                }
            }
            char buf[64];
            size_t k = 0;
            for (size_t j = s; j < i && k < sizeof buf - 1; j++)
                if (src[j] != '_') buf[k++] = src[j];
            buf[k] = 0;
            if (i - s >= sizeof buf - 1) jt_fail(r, "number literal too long");
            if (is_float) {
                t.t = T_FLOAT, t.f = strtod(buf, NULL);
            } else {
                char *end;
                unsigned long long u = strtoull(buf, &end, 10);
                if (u > INT64_MAX) jt_fail(r, "integer literal %s is too large", buf);
                t.t = T_INT, t.i = (int64_t)u;
            }
        } else if (c == '\'' || c == '"') {
            sbuf b = {0};
            i++;
            for (;;) {
                if (i >= len) jt_fail(r, "unterminated string literal");
                char d = src[i];
                if (d == c) { i++; break; }
                if (d == '\\' && i + 1 < len) {
                    char e = src[i + 1];
                    i += 2;
                    switch (e) {
                    case 'n': sb_put(r, &b, "\n", 1); break;
                    case 't': sb_put(r, &b, "\t", 1); break;
                    case 'r': sb_put(r, &b, "\r", 1); break;
                    case 'b': sb_put(r, &b, "\b", 1); break;
                    case 'f': sb_put(r, &b, "\f", 1); break;
                    case '\\': sb_put(r, &b, "\\", 1); break;
                    case '\'': sb_put(r, &b, "'", 1); break;
                    case '"': sb_put(r, &b, "\"", 1); break;
                    case '\n': break;
                    case 'x': case 'u': case 'U': {
                        int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                        uint32_t cp = 0;
                        for (int k = 0; k < nd; k++, i++) {
                            if (i >= len || !isxdigit((unsigned char)src[i])) jt_fail(r, "bad \\%c escape in string", e);
                            char h = src[i];
                            cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                        }
                        put_utf8(r, &b, cp);
                        break;
                    }
                    default: sb_put(r, &b, src + i - 2, 2); break;
                    }
                    continue;
                }
                sb_put(r, &b, &src[i], 1);
                i++;
            }
            t.t = T_STRING, t.p = b.p ? b.p : "", t.n = b.n;
        } else {
            static const char *ops2[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
            t.t = T_OP, t.p = src + i, t.n = 1;
            for (int k = 0; ops2[k]; k++)
                if (i + 1 < len && src[i] == ops2[k][0] && src[i + 1] == ops2[k][1]) t.n = 2;
            if (t.n == 1 && !strchr("+-*/%~<>()[]{},.:|=!", c)) jt_fail(r, "unexpected character '%c'", c);
            i += t.n;
        }
        tok_push(r, ts, t);
    }
}

/* Splits the template into text and tag tokens, applying whitespace control. */
static void lex(R *r, const char *src, toks *ts) {
    size_t len = strlen(src);
    /* jinja2 drops one trailing newline (keep_trailing_newline=False) */
    if (len && src[len - 1] == '\n') len--;
    size_t pos = 0;
    bool lstrip_next = false;  /* a "-%}" / "-}}" asks to strip the next text's leading space */
    while (pos <= len) {
        /* find the next tag */
        size_t s = pos;
        while (s + 1 < len && !(src[s] == '{' && (src[s + 1] == '{' || src[s + 1] == '%' || src[s + 1] == '#'))) s++;
        if (s + 1 >= len) s = len;
        size_t ts0 = pos, te = s;
        if (lstrip_next) while (ts0 < te && is_ws(src[ts0])) ts0++;
        char kind = s < len ? src[s + 1] : 0;
        char mod = s + 2 < len ? src[s + 2] : 0;
        if (kind) {
            if (mod == '-') {
                while (te > ts0 && is_ws(src[te - 1])) te--;
            } else if ((kind == '%' || kind == '#') && mod != '+') {
                /* lstrip_blocks: drop spaces/tabs between the line start and the tag */
                size_t j = te;
                while (j > ts0 && (src[j - 1] == ' ' || src[j - 1] == '\t')) j--;
                size_t k = s;
                while (k > 0 && (src[k - 1] == ' ' || src[k - 1] == '\t')) k--;
                if (k == j && (k == 0 || src[k - 1] == '\n')) te = j;
            }
        }
        if (te > ts0) {
            tok t = {0};
            t.t = T_TEXT, t.p = src + ts0, t.n = te - ts0, t.line = line_at(r, src, ts0);
            tok_push(r, ts, t);
        }
        if (!kind) break;
        r->line = line_at(r, src, s);
        size_t i = s + 2 + (mod == '-' || mod == '+');
        bool strip_after = false;
        if (kind == '#') {
            const char *e = strstr(src + i, "#}");
            if (!e) jt_fail(r, "unterminated comment");
            strip_after = e > src + i && e[-1] == '-';
            pos = (size_t)(e - src) + 2;
        } else {
            tok t = {0};
            t.line = r->line;
            t.t = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN;
            tok_push(r, ts, t);
            /* {% raw %} ... {% endraw %}: the text in between is literal */
            size_t j = i;
            while (j < len && is_ws(src[j])) j++;
            if (kind == '%' && len - j >= 3 && memcmp(src + j, "raw", 3) == 0 && (j + 3 >= len || !isalnum((unsigned char)src[j + 3]))) {
                ts->n--;
                size_t k = j + 3;
                while (k < len && is_ws(src[k])) k++;
                if (k < len && src[k] == '-') k++;
                if (k + 1 >= len || src[k] != '%' || src[k + 1] != '}') jt_fail(r, "malformed raw tag");
                size_t body = k + 2;
                const char *e = strstr(src + body, "endraw");
                if (!e) jt_fail(r, "raw block not closed");
                size_t bend = (size_t)(e - src);
                while (bend > body && src[bend - 1] != '{') bend--;
                if (bend <= body) jt_fail(r, "malformed endraw tag");
                bend--;
                size_t close_tag = bend;
                bool strip = bend + 2 < len && src[bend + 2] == '-';
                if (strip) while (bend > body && is_ws(src[bend - 1])) bend--;
                if (bend > body) {
                    tok tt = {0};
                    tt.t = T_TEXT, tt.p = src + body, tt.n = bend - body, tt.line = r->line;
                    tok_push(r, ts, tt);
                }
                const char *ce = strstr(src + close_tag, "%}");
                if (!ce) jt_fail(r, "endraw not closed");
                strip_after = ce > src && ce[-1] == '-';
                pos = (size_t)(ce - src) + 2;
            } else {
                lex_tag(r, ts, src, len, &i, kind == '{' ? '}' : '%', &strip_after);
                tok e = {0};
                e.line = r->line;
                e.t = kind == '{' ? T_VAR_END : T_BLOCK_END;
                tok_push(r, ts, e);
                pos = i;
            }
        }
        lstrip_next = strip_after;
        /* trim_blocks: drop the first newline after a block or comment tag */
        if (!strip_after && kind != '{' && pos < len) {
            if (src[pos] == '\n') pos++;
            else if (src[pos] == '\r' && pos + 1 < len && src[pos + 1] == '\n') pos += 2;
        }
        if (pos > len) pos = len;
        if (pos == len && !lstrip_next) {
            /* nothing left */
        }
    }
    tok e = {0};
    e.t = T_EOF, e.line = line_at(r, src, len);
    tok_push(r, ts, e);
}

/* ------------------------------------------------------------------ */
/* AST                                                                 */
/* ------------------------------------------------------------------ */

typedef enum {
    /* statements */
    N_BLOCK, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK, N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER,
    N_TEST, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_BIN, N_CMP, N_IN, N_NOTIN, N_COND, N_CONCAT,
    N_PLACEHOLDER
} node_kind;

struct node {
    node_kind k;
    int line;
    const char *op;         /* N_BIN / N_CMP operator, N_NAME / N_GETATTR / N_FILTER / N_TEST name */
    bool neg;               /* N_TEST: "is not" */
    jv lit;                 /* N_LIT, N_TEXT */
    node *a, *b, *c, *d;
    node **kids;            /* N_BLOCK statements, N_LIST/N_TUPLE items, N_DICT k,v pairs, call args */
    size_t nkids;
    const char **kwn;       /* keyword argument names (calls, filters, tests) / macro params */
    node **kwv;             /* keyword argument values / macro defaults (NULL if none) */
    size_t nkw;
    const char **names;     /* N_FOR / N_SET targets */
    size_t nnames;
};

typedef struct {
    R *r;
    toks ts;
    size_t i;
    int depth;
} P;

static node *new_node(P *p, node_kind k) {
    node *n = jt_alloc(p->r, sizeof(node));
    memset(n, 0, sizeof(node));
    n->k = k;
    n->line = p->ts.v[p->i < p->ts.n ? p->i : p->ts.n - 1].line;
    return n;
}

typedef struct { node **v; size_t n, cap; } nvec;
static void nv_push(R *r, nvec *v, node *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        node **nv = jt_alloc(r, cap * sizeof(node *));
        if (v->n) memcpy(nv, v->v, v->n * sizeof(node *));
        v->v = nv, v->cap = cap;
    }
    v->v[v->n++] = x;
}
typedef struct { const char **v; size_t n, cap; } svec;
static void sv_push(R *r, svec *v, const char *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        const char **nv = jt_alloc(r, cap * sizeof(char *));
        if (v->n) memcpy(nv, v->v, v->n * sizeof(char *));
        v->v = nv, v->cap = cap;
    }
    v->v[v->n++] = x;
}

static tok *peek(P *p) { return &p->ts.v[p->i]; }
static tok *peek2(P *p) { return &p->ts.v[p->i + 1 < p->ts.n ? p->i + 1 : p->i]; }
static tok *next(P *p) {
    tok *t = &p->ts.v[p->i];
    if (t->t != T_EOF) p->i++;
    p->r->line = t->line;
    return t;
}
static bool tok_is(const tok *t, tok_type tt, const char *s) {
    if (t->t != tt) return false;
    if (!s) return true;
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}
static bool is_op(P *p, const char *s) { return tok_is(peek(p), T_OP, s); }
static bool is_name(P *p, const char *s) { return tok_is(peek(p), T_NAME, s); }
static bool accept_op(P *p, const char *s) { if (is_op(p, s)) { next(p); return true; } return false; }
static bool accept_name(P *p, const char *s) { if (is_name(p, s)) { next(p); return true; } return false; }

static const char *tok_desc(P *p, const tok *t) {
    switch (t->t) {
    case T_EOF: return "end of template";
    case T_TEXT: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: {
        size_t n = t->n > 40 ? 40 : t->n;
        char *s = jt_alloc(p->r, n + 3);
        s[0] = '\'';
        memcpy(s + 1, t->p, n);
        s[n + 1] = '\'', s[n + 2] = 0;
        return s;
    }
    }
}

static void syntax(P *p, const char *what) {
    tok *t = peek(p);
    p->r->line = t->line;
    p->r->status = VLLM_ERR_FORMAT;
    jt_fail(p->r, "syntax error: expected %s, got %s", what, tok_desc(p, t));
}
static void expect_op(P *p, const char *s) {
    if (!accept_op(p, s)) {
        char buf[32];
        snprintf(buf, sizeof buf, "'%s'", s);
        syntax(p, buf);
    }
}
static const char *expect_name(P *p) {
    if (peek(p)->t != T_NAME) syntax(p, "a name");
    tok *t = next(p);
    return jt_strndup(p->r, t->p, t->n);
}
static void expect_block_end(P *p) {
    if (peek(p)->t != T_BLOCK_END) syntax(p, "'%}'");
    next(p);
}

static node *parse_expr(P *p);
static node *parse_or(P *p);
static node *parse_unary(P *p);

static void enter(P *p) {
    if (++p->depth > JT_MAX_DEPTH) {
        p->r->status = VLLM_ERR_FORMAT;
        jt_fail(p->r, "syntax error: expression nested too deeply");
    }
}

/* Call arguments after '(': positional in kids, keyword in kwn/kwv. */
static void parse_args(P *p, node *n) {
    nvec pos = {0}, kwv = {0};
    svec kwn = {0};
    while (!accept_op(p, ")")) {
        if (pos.n + kwn.n) expect_op(p, ",");
        if (accept_op(p, ")")) break;
        if (peek(p)->t == T_NAME && tok_is(peek2(p), T_OP, "=")) {
            sv_push(p->r, &kwn, expect_name(p));
            next(p);
            nv_push(p->r, &kwv, parse_expr(p));
        } else {
            if (kwn.n) syntax(p, "a keyword argument after keyword arguments");
            nv_push(p->r, &pos, parse_expr(p));
        }
    }
    n->kids = pos.v, n->nkids = pos.n, n->kwn = kwn.v, n->kwv = kwv.v, n->nkw = kwn.n;
}

static node *parse_primary(P *p) {
    tok *t = peek(p);
    node *n;
    if (t->t == T_NAME) {
        next(p);
        if (tok_is(t, T_NAME, "true") || tok_is(t, T_NAME, "True")) { n = new_node(p, N_LIT); n->lit = mk_bool(true); return n; }
        if (tok_is(t, T_NAME, "false") || tok_is(t, T_NAME, "False")) { n = new_node(p, N_LIT); n->lit = mk_bool(false); return n; }
        if (tok_is(t, T_NAME, "none") || tok_is(t, T_NAME, "None")) { n = new_node(p, N_LIT); n->lit = NONE; return n; }
        n = new_node(p, N_NAME);
        n->op = jt_strndup(p->r, t->p, t->n);
        return n;
    }
    if (t->t == T_STRING) {
        /* adjacent string literals concatenate */
        sbuf b = {0};
        while (peek(p)->t == T_STRING) { tok *s = next(p); sb_put(p->r, &b, s->p, s->n); }
        n = new_node(p, N_LIT);
        n->lit = sb_val(&b);
        return n;
    }
    if (t->t == T_INT) { next(p); n = new_node(p, N_LIT); n->lit = mk_int(t->i); return n; }
    if (t->t == T_FLOAT) { next(p); n = new_node(p, N_LIT); n->lit = mk_float(t->f); return n; }
    if (accept_op(p, "(")) {
        enter(p);
        if (accept_op(p, ")")) { p->depth--; return new_node(p, N_TUPLE); }
        node *e = parse_expr(p);
        if (is_op(p, ",")) {
            nvec items = {0};
            nv_push(p->r, &items, e);
            while (accept_op(p, ",")) {
                if (is_op(p, ")")) break;
                nv_push(p->r, &items, parse_expr(p));
            }
            e = new_node(p, N_TUPLE);
            e->kids = items.v, e->nkids = items.n;
        }
        expect_op(p, ")");
        p->depth--;
        return e;
    }
    if (accept_op(p, "[")) {
        enter(p);
        nvec items = {0};
        while (!accept_op(p, "]")) {
            if (items.n) expect_op(p, ",");
            if (accept_op(p, "]")) break;
            nv_push(p->r, &items, parse_expr(p));
        }
        n = new_node(p, N_LIST);
        n->kids = items.v, n->nkids = items.n;
        p->depth--;
        return n;
    }
    if (accept_op(p, "{")) {
        enter(p);
        nvec items = {0};
        while (!accept_op(p, "}")) {
            if (items.n) expect_op(p, ",");
            if (accept_op(p, "}")) break;
            nv_push(p->r, &items, parse_expr(p));
            expect_op(p, ":");
            nv_push(p->r, &items, parse_expr(p));
        }
        n = new_node(p, N_DICT);
        n->kids = items.v, n->nkids = items.n;
        p->depth--;
        return n;
    }
    syntax(p, "an expression");
    return NULL;
}

static node *parse_postfix(P *p, node *n) {
    for (;;) {
        if (accept_op(p, ".")) {
            node *g = new_node(p, N_GETATTR);
            g->a = n;
            if (peek(p)->t == T_INT) {  /* x.0 is x[0] */
                g->k = N_GETITEM;
                g->b = new_node(p, N_LIT);
                g->b->lit = mk_int(next(p)->i);
            } else {
                g->op = expect_name(p);
            }
            n = g;
        } else if (accept_op(p, "[")) {
            enter(p);
            node *parts[3] = {NULL, NULL, NULL};
            bool slice = false;
            int k = 0;
            for (;;) {
                if (!is_op(p, ":") && !is_op(p, "]")) parts[k] = parse_expr(p);
                if (accept_op(p, ":")) {
                    slice = true;
                    if (++k > 2) syntax(p, "']'");
                    continue;
                }
                break;
            }
            expect_op(p, "]");
            p->depth--;
            node *g = new_node(p, slice ? N_SLICE : N_GETITEM);
            g->a = n;
            if (slice) g->b = parts[0], g->c = parts[1], g->d = parts[2];
            else {
                if (!parts[0]) syntax(p, "an index");
                g->b = parts[0];
            }
            n = g;
        } else if (accept_op(p, "(")) {
            enter(p);
            node *c = new_node(p, N_CALL);
            c->a = n;
            parse_args(p, c);
            p->depth--;
            n = c;
        } else {
            return n;
        }
    }
}

/* '|' filter chains and 'is' tests after a unary expression. */
static node *parse_filters(P *p, node *n) {
    for (;;) {
        if (accept_op(p, "|")) {
            node *f = new_node(p, N_FILTER);
            f->a = n;
            f->op = expect_name(p);
            if (accept_op(p, "(")) { enter(p); parse_args(p, f); p->depth--; }
            n = f;
        } else if (accept_name(p, "is")) {
            node *t = new_node(p, N_TEST);
            t->a = n;
            t->neg = accept_name(p, "not");
            t->op = expect_name(p);
            if (accept_op(p, "(")) {
                enter(p);
                parse_args(p, t);
                p->depth--;
            } else {
                tok *x = peek(p);
                bool arg = x->t == T_STRING || x->t == T_INT || x->t == T_FLOAT || tok_is(x, T_OP, "[") ||
                           tok_is(x, T_OP, "{") || tok_is(x, T_OP, "(") || tok_is(x, T_OP, "-") ||
                           (x->t == T_NAME && !tok_is(x, T_NAME, "else") && !tok_is(x, T_NAME, "or") &&
                            !tok_is(x, T_NAME, "and") && !tok_is(x, T_NAME, "if") && !tok_is(x, T_NAME, "is") &&
                            !tok_is(x, T_NAME, "in") && !tok_is(x, T_NAME, "not"));
                if (arg) {
                    node *a = parse_postfix(p, parse_primary(p));
                    t->kids = jt_alloc(p->r, sizeof(node *));
                    t->kids[0] = a, t->nkids = 1;
                }
            }
            n = t;
        } else {
            return n;
        }
    }
}

static node *parse_unary(P *p) {
    enter(p);
    node *n;
    if (accept_op(p, "-")) {
        n = new_node(p, N_NEG);
        n->a = parse_unary(p);
    } else if (accept_op(p, "+")) {
        n = new_node(p, N_POS);
        n->a = parse_unary(p);
    } else {
        n = parse_filters(p, parse_postfix(p, parse_primary(p)));
    }
    p->depth--;
    return n;
}

static node *bin(P *p, node_kind k, const char *op, node *a, node *b) {
    node *n = new_node(p, k);
    n->op = op, n->a = a, n->b = b;
    return n;
}

static node *parse_pow(P *p) {
    node *n = parse_unary(p);
    while (accept_op(p, "**")) n = bin(p, N_BIN, "**", n, parse_unary(p));
    return n;
}
static node *parse_mul(P *p) {
    node *n = parse_pow(p);
    for (;;) {
        const char *op = is_op(p, "*") ? "*" : is_op(p, "/") ? "/" : is_op(p, "//") ? "//" : is_op(p, "%") ? "%" : NULL;
        if (!op) return n;
        next(p);
        n = bin(p, N_BIN, op, n, parse_pow(p));
    }
}
static node *parse_concat(P *p) {
    node *n = parse_mul(p);
    while (accept_op(p, "~")) n = bin(p, N_CONCAT, "~", n, parse_mul(p));
    return n;
}
static node *parse_add(P *p) {
    node *n = parse_concat(p);
    for (;;) {
        const char *op = is_op(p, "+") ? "+" : is_op(p, "-") ? "-" : NULL;
        if (!op) return n;
        next(p);
        n = bin(p, N_BIN, op, n, parse_concat(p));
    }
}
static node *parse_cmp(P *p) {
    node *n = parse_add(p);
    for (;;) {
        static const char *ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
        const char *op = NULL;
        for (int k = 0; ops[k]; k++)
            if (is_op(p, ops[k])) { op = ops[k]; break; }
        if (op) { next(p); n = bin(p, N_CMP, op, n, parse_add(p)); continue; }
        if (accept_name(p, "in")) { n = bin(p, N_IN, "in", n, parse_add(p)); continue; }
        if (is_name(p, "not") && tok_is(peek2(p), T_NAME, "in")) {
            next(p), next(p);
            n = bin(p, N_NOTIN, "not in", n, parse_add(p));
            continue;
        }
        return n;
    }
}
static node *parse_not(P *p) {
    if (accept_name(p, "not")) {
        enter(p);
        node *n = new_node(p, N_NOT);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_cmp(p);
}
static node *parse_and(P *p) {
    node *n = parse_not(p);
    while (accept_name(p, "and")) n = bin(p, N_AND, "and", n, parse_not(p));
    return n;
}
static node *parse_or(P *p) {
    node *n = parse_and(p);
    while (accept_name(p, "or")) n = bin(p, N_OR, "or", n, parse_and(p));
    return n;
}
static node *parse_expr(P *p) {
    enter(p);
    node *n = parse_or(p);
    while (accept_name(p, "if")) {
        node *c = new_node(p, N_COND);
        c->a = parse_or(p);
        c->b = n;
        if (accept_name(p, "else")) c->c = parse_expr(p);
        n = c;
    }
    p->depth--;
    return n;
}
/* An expression list without parentheses ("a, b") becomes a tuple. */
static node *parse_tuple_expr(P *p) {
    node *e = parse_expr(p);
    if (!is_op(p, ",")) return e;
    nvec items = {0};
    nv_push(p->r, &items, e);
    while (accept_op(p, ",")) nv_push(p->r, &items, parse_expr(p));
    node *t = new_node(p, N_TUPLE);
    t->kids = items.v, t->nkids = items.n;
    return t;
}

/* ------------------------------------------------------------------ */
/* Statements                                                          */
/* ------------------------------------------------------------------ */

static node *parse_body(P *p, const char *const *ends, const char **ended);

static node *parse_if(P *p) {
    node *n = new_node(p, N_IF);
    n->a = parse_expr(p);
    expect_block_end(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *e;
    n->b = parse_body(p, ends, &e);
    if (strcmp(e, "elif") == 0) {
        n->c = parse_if(p);
        return n;
    }
    if (strcmp(e, "else") == 0) {
        expect_block_end(p);
        static const char *const ends2[] = {"endif", NULL};
        n->c = parse_body(p, ends2, &e);
    }
    expect_block_end(p);
    return n;
}

static void parse_targets(P *p, node *n) {
    svec names = {0};
    bool paren = accept_op(p, "(");
    do {
        if (paren && is_op(p, ")")) break;
        sv_push(p->r, &names, expect_name(p));
    } while (accept_op(p, ","));
    if (paren) expect_op(p, ")");
    n->names = names.v, n->nnames = names.n;
}

static node *parse_for(P *p) {
    node *n = new_node(p, N_FOR);
    parse_targets(p, n);
    if (!accept_name(p, "in")) syntax(p, "'in'");
    /* the iterable: no bare ternary, so that "for x in y if cond" filters */
    node *it = parse_or(p);
    if (is_op(p, ",")) {
        nvec items = {0};
        nv_push(p->r, &items, it);
        while (accept_op(p, ",")) nv_push(p->r, &items, parse_or(p));
        it = new_node(p, N_TUPLE);
        it->kids = items.v, it->nkids = items.n;
    }
    n->a = it;
    if (accept_name(p, "if")) n->b = parse_expr(p);
    accept_name(p, "recursive");
    expect_block_end(p);
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *e;
    n->c = parse_body(p, ends, &e);
    if (strcmp(e, "else") == 0) {
        expect_block_end(p);
        static const char *const ends2[] = {"endfor", NULL};
        n->d = parse_body(p, ends2, &e);
    }
    expect_block_end(p);
    return n;
}

static node *parse_set(P *p) {
    node *n = new_node(p, N_SET);
    if (peek(p)->t == T_NAME && tok_is(peek2(p), T_OP, ".")) {
        /* namespace attribute: set ns.x = value */
        n->a = new_node(p, N_NAME);
        n->a->op = expect_name(p);
        next(p);
        n->op = expect_name(p);
    } else {
        parse_targets(p, n);
    }
    if (accept_op(p, "=")) {
        n->b = parse_tuple_expr(p);
        expect_block_end(p);
        return n;
    }
    /* block set: {% set x %}...{% endset %}, optionally filtered */
    if (n->a || n->nnames != 1) syntax(p, "'='");
    node *f = NULL;
    if (is_op(p, "|")) {
        f = parse_filters(p, new_node(p, N_PLACEHOLDER));
    }
    expect_block_end(p);
    static const char *const ends[] = {"endset", NULL};
    const char *e;
    n->c = parse_body(p, ends, &e);
    n->d = f;
    expect_block_end(p);
    return n;
}

static void parse_params(P *p, node *n) {
    svec names = {0};
    nvec defs = {0};
    if (accept_op(p, "(")) {
        while (!accept_op(p, ")")) {
            if (names.n) expect_op(p, ",");
            if (accept_op(p, ")")) break;
            sv_push(p->r, &names, expect_name(p));
            nv_push(p->r, &defs, accept_op(p, "=") ? parse_expr(p) : NULL);
        }
    }
    n->kwn = names.v, n->kwv = defs.v, n->nkw = names.n;
}

static node *parse_macro(P *p) {
    node *n = new_node(p, N_MACRO);
    n->op = expect_name(p);
    parse_params(p, n);
    expect_block_end(p);
    static const char *const ends[] = {"endmacro", NULL};
    const char *e;
    n->a = parse_body(p, ends, &e);
    if (peek(p)->t == T_NAME) next(p);  /* {% endmacro name %} */
    expect_block_end(p);
    return n;
}

static node *parse_call_block(P *p) {
    node *n = new_node(p, N_CALLBLOCK);
    if (is_op(p, "(")) parse_params(p, n);
    n->a = parse_expr(p);
    if (n->a->k != N_CALL) syntax(p, "a macro call");
    expect_block_end(p);
    static const char *const ends[] = {"endcall", NULL};
    const char *e;
    n->b = parse_body(p, ends, &e);
    expect_block_end(p);
    return n;
}

static node *parse_filter_block(P *p) {
    node *n = new_node(p, N_FILTERBLOCK);
    node *ph = new_node(p, N_PLACEHOLDER);
    node *f = new_node(p, N_FILTER);
    f->a = ph;
    f->op = expect_name(p);
    if (accept_op(p, "(")) parse_args(p, f);
    n->a = parse_filters(p, f);
    expect_block_end(p);
    static const char *const ends[] = {"endfilter", NULL};
    const char *e;
    n->b = parse_body(p, ends, &e);
    expect_block_end(p);
    return n;
}

/* Parses statements until a {% name %} with name in ends (consumed up to the name). */
static node *parse_body(P *p, const char *const *ends, const char **ended) {
    if (++p->depth > JT_MAX_DEPTH) {
        p->r->status = VLLM_ERR_FORMAT;
        jt_fail(p->r, "syntax error: blocks nested too deeply");
    }
    node *blk = new_node(p, N_BLOCK);
    nvec kids = {0};
    for (;;) {
        tok *t = peek(p);
        if (t->t == T_EOF) {
            if (ends) {
                char buf[64];
                int last = 0;
                while (ends[last + 1]) last++;
                snprintf(buf, sizeof buf, "'{%% %s %%}'", ends[last]);
                syntax(p, buf);
            }
            break;
        }
        if (t->t == T_TEXT) {
            node *n = new_node(p, N_TEXT);
            n->lit = mk_strn(t->p, t->n);
            next(p);
            nv_push(p->r, &kids, n);
        } else if (t->t == T_VAR_BEGIN) {
            next(p);
            node *n = new_node(p, N_OUTPUT);
            n->a = parse_tuple_expr(p);
            if (peek(p)->t != T_VAR_END) syntax(p, "'}}'");
            next(p);
            nv_push(p->r, &kids, n);
        } else if (t->t == T_BLOCK_BEGIN) {
            next(p);
            tok *nt = peek(p);
            if (nt->t != T_NAME) syntax(p, "a statement name");
            if (ends)
                for (int k = 0; ends[k]; k++)
                    if (tok_is(nt, T_NAME, ends[k])) {
                        next(p);
                        *ended = ends[k];
                        blk->kids = kids.v, blk->nkids = kids.n;
                        p->depth--;
                        return blk;
                    }
            next(p);
            node *n;
            if (tok_is(nt, T_NAME, "if")) n = parse_if(p);
            else if (tok_is(nt, T_NAME, "for")) n = parse_for(p);
            else if (tok_is(nt, T_NAME, "set")) n = parse_set(p);
            else if (tok_is(nt, T_NAME, "macro")) n = parse_macro(p);
            else if (tok_is(nt, T_NAME, "call")) n = parse_call_block(p);
            else if (tok_is(nt, T_NAME, "filter")) n = parse_filter_block(p);
            else if (tok_is(nt, T_NAME, "break") || tok_is(nt, T_NAME, "continue")) {
                n = new_node(p, tok_is(nt, T_NAME, "break") ? N_BREAK : N_CONTINUE);
                expect_block_end(p);
            } else if (tok_is(nt, T_NAME, "do")) {
                n = new_node(p, N_SET);  /* {% do expr %}: evaluate, discard */
                n->b = parse_tuple_expr(p);
                expect_block_end(p);
            } else if (tok_is(nt, T_NAME, "generation") || tok_is(nt, T_NAME, "endgeneration")) {
                expect_block_end(p);  /* transformers' assistant-mask markers: no output */
                continue;
            } else {
                p->r->line = nt->line;
                p->r->status = VLLM_ERR_FORMAT;
                jt_fail(p->r, "syntax error: unknown statement '%.*s'", (int)(nt->n > 40 ? 40 : nt->n), nt->p);
            }
            nv_push(p->r, &kids, n);
        } else {
            syntax(p, "text or a tag");
        }
    }
    blk->kids = kids.v, blk->nkids = kids.n;
    p->depth--;
    return blk;
}

/* ------------------------------------------------------------------ */
/* Value helpers: truthiness, equality, str(), repr(), JSON            */
/* ------------------------------------------------------------------ */

static const char *type_name(jt_type t) {
    static const char *names[] = {"undefined", "none", "boolean", "integer", "float", "string",
                                  "list", "dict", "macro", "function", "loop"};
    return names[t];
}

static bool truthy(jv v) {
    switch (v.t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: return v.u.b;
    case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0;
    case V_STR: return v.u.s.n > 0;
    case V_LIST: return v.u.l->n > 0;
    case V_DICT: return v.u.d->n > 0 || v.u.d->ns;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static double num_f(jv v) { return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.t == V_INT ? v.u.i : v.u.b; }

static bool v_eq(const jv *a, const jv *b) {
    if (is_num(*a) && is_num(*b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return num_i(*a) == num_i(*b);
        return num_f(*a) == num_f(*b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a->u.s.n == b->u.s.n && memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
    case V_LIST:
        if (a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!v_eq(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    case V_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            jv *o = dict_find(b->u.d, a->u.d->k[i]);
            if (!o || !v_eq(&a->u.d->v[i], o)) return false;
        }
        return true;
    case V_MACRO: return a->u.m == b->u.m;
    case V_FUNC: return a->u.fn == b->u.fn;
    case V_LOOP: return a->u.lp == b->u.lp;
    default: return false;
    }
}

/* Python float repr: the shortest digits that round-trip. */
static void fmt_float(double f, char *buf, size_t cap) {
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d.ddde[+-]XX: split digits and exponent */
    char digits[32];
    int nd = 0, exp10;
    const char *q = tmp;
    bool negative = *q == '-';
    if (negative) q++;
    for (; *q && *q != 'e'; q++)
        if (isdigit((unsigned char)*q)) digits[nd++] = *q;
    exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = buf;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_, left -= (size_t)w_; } while (0)
    if (negative) PUT("-");
    if (exp10 >= -5 && exp10 < 16) {
        if (exp10 < 0) {
            PUT("0.");
            for (int k = 0; k < -exp10 - 1; k++) PUT("0");
            PUT("%s", digits);
        } else {
            for (int k = 0; k <= exp10; k++) PUT("%c", k < nd ? digits[k] : '0');
            PUT(".");
            if (nd > exp10 + 1) PUT("%s", digits + exp10 + 1);
            else PUT("0");
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
#undef PUT
}

static void put_str(R *r, sbuf *b, jv v);

static void put_repr(R *r, sbuf *b, jv v, int depth) {
    if (depth > JT_MAX_DEPTH) jt_fail(r, "value nested too deeply to print");
    if (v.t == V_STR) {
        bool dq = memchr(v.u.s.p, '\'', v.u.s.n) && !memchr(v.u.s.p, '"', v.u.s.n);
        char qc = dq ? '"' : '\'';
        sb_put(r, b, &qc, 1);
        for (size_t i = 0; i < v.u.s.n; i++) {
            unsigned char c = (unsigned char)v.u.s.p[i];
            if (c == '\\') sb_puts(r, b, "\\\\");
            else if (c == (unsigned char)qc) { sb_puts(r, b, "\\"); sb_put(r, b, &qc, 1); }
            else if (c == '\n') sb_puts(r, b, "\\n");
            else if (c == '\r') sb_puts(r, b, "\\r");
            else if (c == '\t') sb_puts(r, b, "\\t");
            else if (c < 0x20 || c == 0x7f) { char e[8]; snprintf(e, sizeof e, "\\x%02x", c); sb_puts(r, b, e); }
            else sb_put(r, b, (const char *)&c, 1);
        }
        sb_put(r, b, &qc, 1);
    } else if (v.t == V_LIST) {
        sb_puts(r, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_puts(r, b, ", ");
            put_repr(r, b, v.u.l->v[i], depth + 1);
        }
        sb_puts(r, b, "]");
    } else if (v.t == V_DICT) {
        if (v.u.d->ns) sb_puts(r, b, "<Namespace ");
        sb_puts(r, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_puts(r, b, ", ");
            put_repr(r, b, v.u.d->k[i], depth + 1);
            sb_puts(r, b, ": ");
            put_repr(r, b, v.u.d->v[i], depth + 1);
        }
        sb_puts(r, b, "}");
        if (v.u.d->ns) sb_puts(r, b, ">");
    } else if (v.t == V_UNDEF) {
        sb_puts(r, b, "Undefined");
    } else {
        put_str(r, b, v);
    }
}

/* str(v) as jinja2 prints it. */
static void put_str(R *r, sbuf *b, jv v) {
    char buf[64];
    switch (v.t) {
    case V_UNDEF: return;
    case V_NONE: sb_puts(r, b, "None"); return;
    case V_BOOL: sb_puts(r, b, v.u.b ? "True" : "False"); return;
    case V_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); sb_puts(r, b, buf); return;
    case V_FLOAT: fmt_float(v.u.f, buf, sizeof buf); sb_puts(r, b, buf); return;
    case V_STR: sb_put(r, b, v.u.s.p, v.u.s.n); return;
    case V_LIST: case V_DICT: put_repr(r, b, v, 0); return;
    case V_MACRO: sb_puts(r, b, "<macro>"); return;
    case V_FUNC: sb_puts(r, b, "<function>"); return;
    case V_LOOP: sb_puts(r, b, "<LoopContext>"); return;
    }
}

static jv to_str(R *r, jv v) {
    if (v.t == V_STR) return v;
    sbuf b = {0};
    put_str(r, &b, v);
    return sb_val(&b);
}

static void json_indent(R *r, sbuf *b, int indent, int level) {
    sb_puts(r, b, "\n");
    for (int i = 0; i < indent * level; i++) sb_puts(r, b, " ");
}

/* json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: none). */
static void put_json(R *r, sbuf *b, jv v, int indent, int level) {
    if (level > JT_MAX_DEPTH) jt_fail(r, "tojson: value nested too deeply");
    char buf[64];
    switch (v.t) {
    case V_NONE: sb_puts(r, b, "null"); return;
    case V_BOOL: sb_puts(r, b, v.u.b ? "true" : "false"); return;
    case V_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); sb_puts(r, b, buf); return;
    case V_FLOAT:
        if (isnan(v.u.f)) sb_puts(r, b, "NaN");
        else if (isinf(v.u.f)) sb_puts(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { fmt_float(v.u.f, buf, sizeof buf); sb_puts(r, b, buf); }
        return;
    case V_STR:
        sb_puts(r, b, "\"");
        for (size_t i = 0; i < v.u.s.n; i++) {
            unsigned char c = (unsigned char)v.u.s.p[i];
            switch (c) {
            case '"': sb_puts(r, b, "\\\""); break;
            case '\\': sb_puts(r, b, "\\\\"); break;
            case '\n': sb_puts(r, b, "\\n"); break;
            case '\r': sb_puts(r, b, "\\r"); break;
            case '\t': sb_puts(r, b, "\\t"); break;
            case '\b': sb_puts(r, b, "\\b"); break;
            case '\f': sb_puts(r, b, "\\f"); break;
            default:
                if (c < 0x20) { snprintf(buf, sizeof buf, "\\u%04x", c); sb_puts(r, b, buf); }
                else sb_put(r, b, (const char *)&c, 1);
            }
        }
        sb_puts(r, b, "\"");
        return;
    case V_LIST:
        if (v.u.l->n == 0) { sb_puts(r, b, "[]"); return; }
        sb_puts(r, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_puts(r, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_indent(r, b, indent, level + 1);
            put_json(r, b, v.u.l->v[i], indent, level + 1);
        }
        if (indent >= 0) json_indent(r, b, indent, level);
        sb_puts(r, b, "]");
        return;
    case V_DICT:
        if (v.u.d->n == 0) { sb_puts(r, b, "{}"); return; }
        sb_puts(r, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_puts(r, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_indent(r, b, indent, level + 1);
            jv k = v.u.d->k[i];
            if (k.t != V_STR) k = to_str(r, k);
            put_json(r, b, k, indent, level + 1);
            sb_puts(r, b, ": ");
            put_json(r, b, v.u.d->v[i], indent, level + 1);
        }
        if (indent >= 0) json_indent(r, b, indent, level);
        sb_puts(r, b, "}");
        return;
    default:
        jt_fail(r, "tojson: cannot serialize a value of type %s", type_name(v.t));
    }
}

/* ------------------------------------------------------------------ */
/* Strings: code points, case, strip                                   */
/* ------------------------------------------------------------------ */

static bool is_ascii(jv s) {
    for (size_t i = 0; i < s.u.s.n; i++)
        if ((unsigned char)s.u.s.p[i] >= 0x80) return false;
    return true;
}

/* Byte offsets of each code point, plus the end: n+1 entries. */
static size_t *cp_offsets(R *r, jv s, size_t *n) {
    size_t *off = jt_alloc(r, (s.u.s.n + 1) * sizeof(size_t));
    size_t k = 0;
    for (size_t i = 0; i < s.u.s.n;) {
        off[k++] = i;
        utf8proc_int32_t cp;
        utf8proc_ssize_t w = utf8proc_iterate((const utf8proc_uint8_t *)s.u.s.p + i, (utf8proc_ssize_t)(s.u.s.n - i), &cp);
        i += w > 0 ? (size_t)w : 1;
    }
    off[k] = s.u.s.n;
    *n = k;
    return off;
}

static size_t str_len(R *r, jv s) {
    if (is_ascii(s)) return s.u.s.n;
    size_t n;
    cp_offsets(r, s, &n);
    return n;
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };
static jv str_case(R *r, jv s, int mode) {
    sbuf b = {0};
    bool prev_cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t w = utf8proc_iterate((const utf8proc_uint8_t *)s.u.s.p + i, (utf8proc_ssize_t)(s.u.s.n - i), &cp);
        if (w <= 0) { sb_put(r, &b, s.u.s.p + i, 1); i++; continue; }
        utf8proc_int32_t o = cp;
        if (mode == CASE_UPPER) o = utf8proc_toupper(cp);
        else if (mode == CASE_LOWER) o = utf8proc_tolower(cp);
        else if (mode == CASE_TITLE) o = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
        else o = i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
        const utf8proc_property_t *pr = utf8proc_get_property(cp);
        bool letter = pr->category >= UTF8PROC_CATEGORY_LU && pr->category <= UTF8PROC_CATEGORY_LO;
        prev_cased = letter || (pr->category >= UTF8PROC_CATEGORY_MN && pr->category <= UTF8PROC_CATEGORY_ME && prev_cased) ||
                     (cp == '\'' && prev_cased && mode == CASE_TITLE);
        put_utf8(r, &b, (uint32_t)o);
        i += (size_t)w;
    }
    return sb_val(&b);
}

static bool in_chars(jv chars, const char *p, size_t n) {
    for (size_t i = 0; i + n <= chars.u.s.n;) {
        size_t w = 1;
        while (i + w < chars.u.s.n && ((unsigned char)chars.u.s.p[i + w] & 0xC0) == 0x80) w++;
        if (w == n && memcmp(chars.u.s.p + i, p, n) == 0) return true;
        i += w;
    }
    return false;
}

/* Python str.strip([chars]); which: 1 left, 2 right, 3 both. chars.t != V_STR: whitespace. */
static jv str_strip(jv s, jv chars, int which) {
    const char *p = s.u.s.p;
    size_t a = 0, e = s.u.s.n;
    bool ws = chars.t != V_STR;
    if (which & 1) {
        while (a < e) {
            size_t w = 1;
            while (a + w < e && ((unsigned char)p[a + w] & 0xC0) == 0x80) w++;
            if (ws ? !(w == 1 && (is_ws(p[a]) || p[a] == 0x1c || p[a] == 0x1d || p[a] == 0x1e || p[a] == 0x1f)) : !in_chars(chars, p + a, w)) break;
            a += w;
        }
    }
    if (which & 2) {
        while (e > a) {
            size_t w = 1;
            while (e - w > a && ((unsigned char)p[e - w] & 0xC0) == 0x80) w++;
            if (ws ? !(w == 1 && (is_ws(p[e - 1]) || p[e - 1] == 0x1c || p[e - 1] == 0x1d || p[e - 1] == 0x1e || p[e - 1] == 0x1f)) : !in_chars(chars, p + e - w, w)) break;
            e -= w;
        }
    }
    return mk_strn(p + a, e - a);
}

static const char *find_sub(jv h, jv n, size_t from) {
    if (n.u.s.n == 0) return h.u.s.p + from;
    if (from > h.u.s.n) return NULL;
    const char *x = memmem(h.u.s.p + from, h.u.s.n - from, n.u.s.p, n.u.s.n);
    return x;
}

static jv str_replace(R *r, jv s, jv old, jv rep, int64_t count) {
    sbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        /* Python inserts rep between every character */
        size_t n;
        size_t *off = cp_offsets(r, s, &n);
        for (size_t k = 0; k <= n; k++) {
            if (count < 0 || done < count) { sb_put(r, &b, rep.u.s.p, rep.u.s.n); done++; }
            if (k < n) sb_put(r, &b, s.u.s.p + off[k], off[k + 1] - off[k]);
        }
        return sb_val(&b);
    }
    for (;;) {
        const char *x = (count < 0 || done < count) ? find_sub(s, old, i) : NULL;
        if (!x) { sb_put(r, &b, s.u.s.p + i, s.u.s.n - i); break; }
        size_t at = (size_t)(x - s.u.s.p);
        sb_put(r, &b, s.u.s.p + i, at - i);
        sb_put(r, &b, rep.u.s.p, rep.u.s.n);
        i = at + old.u.s.n;
        done++;
    }
    return sb_val(&b);
}

static jv str_split(R *r, jv s, jv sep, int64_t maxsplit) {
    jv out = mk_list(r);
    if (sep.t != V_STR) {
        size_t i = 0, n = s.u.s.n;
        int64_t done = 0;
        while (i < n) {
            while (i < n && is_ws(s.u.s.p[i])) i++;
            if (i >= n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                jv rest = str_strip(mk_strn(s.u.s.p + i, n - i), UNDEF, 2);
                list_push(r, out.u.l, rest);
                break;
            }
            size_t st = i;
            while (i < n && !is_ws(s.u.s.p[i])) i++;
            list_push(r, out.u.l, mk_strn(s.u.s.p + st, i - st));
            done++;
        }
        return out;
    }
    if (sep.u.s.n == 0) jt_fail(r, "split: empty separator");
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *x = (maxsplit < 0 || done < maxsplit) ? find_sub(s, sep, i) : NULL;
        if (!x) { list_push(r, out.u.l, mk_strn(s.u.s.p + i, s.u.s.n - i)); break; }
        size_t at = (size_t)(x - s.u.s.p);
        list_push(r, out.u.l, mk_strn(s.u.s.p + i, at - i));
        i = at + sep.u.s.n;
        done++;
    }
    return out;
}

/* ------------------------------------------------------------------ */
/* Scopes, output                                                      */
/* ------------------------------------------------------------------ */

static scope *new_scope(R *r, scope *parent) {
    scope *s = jt_alloc(r, sizeof(scope));
    s->parent = parent;
    s->vars = mk_dict(r).u.d;
    return s;
}
static jv *scope_get(scope *s, const char *name) {
    for (; s; s = s->parent) {
        jv *v = dict_finds(s->vars, name);
        if (v) return v;
    }
    return NULL;
}
static void scope_set(R *r, scope *s, const char *name, jv v) { dict_set(r, s->vars, mk_str(name), v); }

static void out_put(R *r, const char *p, size_t n) {
    if (n > JT_MAX_OUTPUT - r->out_n)
        jt_fail(r, "output is longer than %u MiB", JT_MAX_OUTPUT >> 20);
    if (r->out_n + n + 1 > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 4096;
        while (cap < r->out_n + n + 1) cap *= 2;
        char *o = realloc(r->out, cap);
        if (!o) { r->status = VLLM_ERR_NO_MEMORY; jt_fail(r, "out of memory"); }
        r->out = o, r->out_cap = cap;
    }
    memcpy(r->out + r->out_n, p, n);
    r->out_n += n;
}

/* The output written since mark, as a string value, taken off the output. (r->out is NULL until
   something is written: no pointer arithmetic on it then.) */
static jv out_take(R *r, size_t mark) {
    size_t n = r->out_n - mark;
    jv v = mk_strn(jt_strndup(r, n ? r->out + mark : "", n), n);
    r->out_n = mark;
    return v;
}

static void step(R *r) {
    if (++r->steps > JT_MAX_STEPS) jt_fail(r, "template runs too long (more than %lld loop iterations and calls)", JT_MAX_STEPS);
}

/* ------------------------------------------------------------------ */
/* Evaluation                                                          */
/* ------------------------------------------------------------------ */

enum { G_RANGE = 1, G_NAMESPACE, G_RAISE, G_STRFTIME, G_DICT };
static const struct { const char *name; int id; } GLOBALS[] = {
    {"range", G_RANGE}, {"namespace", G_NAMESPACE}, {"raise_exception", G_RAISE},
    {"strftime_now", G_STRFTIME}, {"dict", G_DICT}, {NULL, 0}};

typedef struct { size_t n; jv *v; size_t nkw; const char **kwn; jv *kwv; } args;

static jv eval(R *r, scope *s, node *n);
static void exec(R *r, scope *s, node *n);

static args eval_args(R *r, scope *s, node *n, size_t skip_first_kids) {
    args a = {0};
    (void)skip_first_kids;
    a.n = n->nkids;
    a.v = jt_alloc(r, (n->nkids + 1) * sizeof(jv));
    for (size_t i = 0; i < n->nkids; i++) a.v[i] = eval(r, s, n->kids[i]);
    a.nkw = n->nkw;
    a.kwn = n->kwn;
    a.kwv = jt_alloc(r, (n->nkw + 1) * sizeof(jv));
    for (size_t i = 0; i < n->nkw; i++) a.kwv[i] = eval(r, s, n->kwv[i]);
    return a;
}

/* Argument i (positional) or name (keyword), else def. */
static jv arg(const args *a, size_t i, const char *name, jv def) {
    if (i < a->n) return a->v[i];
    for (size_t k = 0; name && k < a->nkw; k++)
        if (strcmp(a->kwn[k], name) == 0) return a->kwv[k];
    return def;
}
static jv arg_str(R *r, const args *a, size_t i, const char *name, const char *what) {
    jv v = arg(a, i, name, UNDEF);
    if (v.t != V_STR)
        jt_fail(r, "%s: argument %s must be a string, got %s", what, name ? name : "(positional)", type_name(v.t));
    return v;
}
static int64_t arg_int(R *r, const args *a, size_t i, const char *name, int64_t def, const char *what) {
    jv v = arg(a, i, name, UNDEF);
    if (v.t == V_UNDEF || v.t == V_NONE) return def;
    if (v.t != V_INT && v.t != V_BOOL)
        jt_fail(r, "%s: argument %s must be an integer, got %s", what, name ? name : "(positional)", type_name(v.t));
    return num_i(v);
}

static jv loop_attr(R *r, jt_loop *lp, const char *name) {
    int64_t n = (int64_t)lp->items->n, i = (int64_t)lp->i;
    if (!strcmp(name, "index")) return mk_int(i + 1);
    if (!strcmp(name, "index0")) return mk_int(i);
    if (!strcmp(name, "revindex")) return mk_int(n - i);
    if (!strcmp(name, "revindex0")) return mk_int(n - i - 1);
    if (!strcmp(name, "first")) return mk_bool(i == 0);
    if (!strcmp(name, "last")) return mk_bool(i == n - 1);
    if (!strcmp(name, "length")) return mk_int(n);
    if (!strcmp(name, "depth")) return mk_int(1);
    if (!strcmp(name, "depth0")) return mk_int(0);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : UNDEF;
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : UNDEF;
    (void)r;
    return UNDEF;
}

static jv getattr_v(R *r, jv v, const char *name) {
    if (v.t == V_DICT) {
        jv *x = dict_finds(v.u.d, name);
        return x ? *x : UNDEF;
    }
    if (v.t == V_LOOP) return loop_attr(r, v.u.lp, name);
    return UNDEF;
}

/* Python index normalisation: -1 is the last; false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

static jv getitem_v(R *r, jv v, jv k) {
    if (v.t == V_DICT) {
        jv *x = dict_find(v.u.d, k);
        return x ? *x : UNDEF;
    }
    if (v.t == V_LIST && (k.t == V_INT || k.t == V_BOOL)) {
        size_t i;
        return norm_index(num_i(k), v.u.l->n, &i) ? v.u.l->v[i] : UNDEF;
    }
    if (v.t == V_STR && (k.t == V_INT || k.t == V_BOOL)) {
        size_t n, i;
        size_t *off = cp_offsets(r, v, &n);
        if (!norm_index(num_i(k), n, &i)) return UNDEF;
        return mk_strn(v.u.s.p + off[i], off[i + 1] - off[i]);
    }
    if (k.t == V_STR) return getattr_v(r, v, jt_strndup(r, k.u.s.p, k.u.s.n));
    return UNDEF;
}

static jv slice_v(R *r, jv v, jv a, jv b, jv c) {
    int64_t stepv = 1;
    if (c.t != V_UNDEF && c.t != V_NONE) {
        if (c.t != V_INT) jt_fail(r, "slice step must be an integer");
        stepv = c.u.i;
        if (stepv == 0) jt_fail(r, "slice step cannot be zero");
    }
    size_t n;
    size_t *off = NULL;
    if (v.t == V_LIST) n = v.u.l->n;
    else if (v.t == V_STR) off = cp_offsets(r, v, &n);
    else if (v.t == V_UNDEF) return UNDEF;
    else jt_fail(r, "cannot slice a value of type %s", type_name(v.t));
    int64_t len = (int64_t)n, lo, hi;
    /* Python's slice.indices() */
    if (a.t == V_UNDEF || a.t == V_NONE) lo = stepv < 0 ? len - 1 : 0;
    else {
        if (a.t != V_INT) jt_fail(r, "slice indices must be integers");
        lo = a.u.i;
        if (lo < 0) { lo += len; if (lo < 0) lo = stepv < 0 ? -1 : 0; }
        else if (lo >= len) lo = stepv < 0 ? len - 1 : len;
    }
    if (b.t == V_UNDEF || b.t == V_NONE) hi = stepv < 0 ? -1 : len;
    else {
        if (b.t != V_INT) jt_fail(r, "slice indices must be integers");
        hi = b.u.i;
        if (hi < 0) { hi += len; if (hi < 0) hi = stepv < 0 ? -1 : 0; }
        else if (hi >= len) hi = stepv < 0 ? len - 1 : len;
    }
    jv out = v.t == V_LIST ? mk_list(r) : UNDEF;
    sbuf sb = {0};
    for (int64_t i = lo; stepv > 0 ? i < hi : i > hi; i += stepv) {
        if (v.t == V_LIST) list_push(r, out.u.l, v.u.l->v[i]);
        else sb_put(r, &sb, v.u.s.p + off[i], off[i + 1] - off[i]);
    }
    return v.t == V_LIST ? out : sb_val(&sb);
}

/* Items of an iterable as a list (dict: keys, string: characters). */
static jt_list *iter_list(R *r, jv v, const char *what) {
    if (v.t == V_LIST) return v.u.l;
    jv out = mk_list(r);
    if (v.t == V_UNDEF) return out.u.l;
    if (v.t == V_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) list_push(r, out.u.l, v.u.d->k[i]);
        return out.u.l;
    }
    if (v.t == V_STR) {
        size_t n;
        size_t *off = cp_offsets(r, v, &n);
        for (size_t i = 0; i < n; i++) list_push(r, out.u.l, mk_strn(v.u.s.p + off[i], off[i + 1] - off[i]));
        return out.u.l;
    }
    jt_fail(r, "%s: a value of type %s is not iterable", what, type_name(v.t));
    return NULL;
}

static int v_cmp(R *r, jv a, jv b, bool case_sensitive) {
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b);
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == V_STR && b.t == V_STR) {
        if (!case_sensitive) { a = str_case(r, a, CASE_LOWER); b = str_case(r, b, CASE_LOWER); }
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.t == V_LIST && b.t == V_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            int c = v_cmp(r, a.u.l->v[i], b.u.l->v[i], case_sensitive);
            if (c) return c;
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    jt_fail(r, "cannot compare %s with %s", type_name(a.t), type_name(b.t));
    return 0;
}

static bool contains(R *r, jv hay, jv needle) {
    if (hay.t == V_STR) {
        if (needle.t != V_STR) jt_fail(r, "'in <string>' requires a string, got %s", type_name(needle.t));
        return find_sub(hay, needle, 0) != NULL;
    }
    if (hay.t == V_LIST) {
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (v_eq(&hay.u.l->v[i], &needle)) return true;
        return false;
    }
    if (hay.t == V_DICT) return dict_find(hay.u.d, needle) != NULL;
    if (hay.t == V_UNDEF) return false;
    jt_fail(r, "'in' needs a string, list or dict on the right, got %s", type_name(hay.t));
    return false;
}

static jv arith(R *r, const char *op, jv a, jv b) {
    if (a.t == V_UNDEF || b.t == V_UNDEF) jt_fail(r, "'%s' on an undefined value", op);
    if (op[0] == '+') {
        if (a.t == V_STR && b.t == V_STR) {
            sbuf sb = {0};
            sb_put(r, &sb, a.u.s.p, a.u.s.n);
            sb_put(r, &sb, b.u.s.p, b.u.s.n);
            return sb_val(&sb);
        }
        if (a.t == V_LIST && b.t == V_LIST) {
            jv l = mk_list(r);
            for (size_t i = 0; i < a.u.l->n; i++) list_push(r, l.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) list_push(r, l.u.l, b.u.l->v[i]);
            return l;
        }
    }
    if (op[0] == '*' && !op[1] && ((a.t == V_STR || a.t == V_LIST) && (b.t == V_INT || b.t == V_BOOL))) {
        int64_t k = num_i(b);
        size_t unit = a.t == V_STR ? a.u.s.n : a.u.l->n * sizeof(jv);
        if (k > 0 && unit > 0 && (uint64_t)k > JT_MAX_OUTPUT / unit) jt_fail(r, "repetition too large");
        if (unit == 0) k = 0; /* '' * 10**15 is '' at once, not 10**15 empty appends */
        if (a.t == V_STR) {
            sbuf sb = {0};
            for (int64_t i = 0; i < k; i++) sb_put(r, &sb, a.u.s.p, a.u.s.n);
            return sb_val(&sb);
        }
        jv l = mk_list(r);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++) list_push(r, l.u.l, a.u.l->v[j]);
        return l;
    }
    if (!is_num(a) || !is_num(b))
        jt_fail(r, "unsupported operand types for %s: %s and %s", op, type_name(a.t), type_name(b.t));
    bool fl = a.t == V_FLOAT || b.t == V_FLOAT;
    if (!strcmp(op, "/")) {
        if (num_f(b) == 0) jt_fail(r, "division by zero");
        return mk_float(num_f(a) / num_f(b));
    }
    if (fl || !strcmp(op, "**")) {
        double x = num_f(a), y = num_f(b);
        if (!strcmp(op, "+")) return mk_float(x + y);
        if (!strcmp(op, "-")) return mk_float(x - y);
        if (!strcmp(op, "*")) return mk_float(x * y);
        if (!strcmp(op, "**")) {
            if (!fl && y >= 0) {
                /* integer power, checked */
                int64_t base = num_i(a), e = num_i(b), res = 1;
                for (int64_t i = 0; i < e; i++) {
                    if (__builtin_mul_overflow(res, base, &res)) jt_fail(r, "integer overflow in **");
                    if (res == 0 || res == 1) break;
                }
                return mk_int(res);
            }
            return mk_float(pow(x, y));
        }
        if (y == 0) jt_fail(r, "division by zero");
        if (!strcmp(op, "//")) return mk_float(floor(x / y));
        if (!strcmp(op, "%")) { double m = fmod(x, y); if (m != 0 && ((m < 0) != (y < 0))) m += y; return mk_float(m); }
    }
    int64_t x = num_i(a), y = num_i(b), z;
    if (!strcmp(op, "+")) { if (__builtin_add_overflow(x, y, &z)) jt_fail(r, "integer overflow"); return mk_int(z); }
    if (!strcmp(op, "-")) { if (__builtin_sub_overflow(x, y, &z)) jt_fail(r, "integer overflow"); return mk_int(z); }
    if (!strcmp(op, "*")) { if (__builtin_mul_overflow(x, y, &z)) jt_fail(r, "integer overflow"); return mk_int(z); }
    if (y == 0) jt_fail(r, "division by zero");
    if (x == INT64_MIN && y == -1) jt_fail(r, "integer overflow");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
    return mk_int(!strcmp(op, "//") ? q : m);
}

/* ------------------------------------------------------------------ */
/* Tests (x is name)                                                   */
/* ------------------------------------------------------------------ */

static bool apply_test(R *r, const char *name, jv v, const args *a) {
    jv x = arg(a, 0, NULL, UNDEF);
    if (!strcmp(name, "defined")) return v.t != V_UNDEF;
    if (!strcmp(name, "undefined")) return v.t == V_UNDEF;
    if (!strcmp(name, "none")) return v.t == V_NONE;
    if (!strcmp(name, "string")) return v.t == V_STR;
    if (!strcmp(name, "mapping")) return v.t == V_DICT;
    if (!strcmp(name, "iterable")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT;
    if (!strcmp(name, "sequence")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT;
    if (!strcmp(name, "number")) return is_num(v);
    if (!strcmp(name, "integer")) return v.t == V_INT;
    if (!strcmp(name, "float")) return v.t == V_FLOAT;
    if (!strcmp(name, "boolean")) return v.t == V_BOOL;
    if (!strcmp(name, "true")) return v.t == V_BOOL && v.u.b;
    if (!strcmp(name, "false")) return v.t == V_BOOL && !v.u.b;
    if (!strcmp(name, "callable")) return v.t == V_MACRO || v.t == V_FUNC;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v.t != V_INT && v.t != V_BOOL) jt_fail(r, "test '%s' needs an integer, got %s", name, type_name(v.t));
        int64_t m = num_i(v) % 2;
        return !strcmp(name, "odd") ? m != 0 : m == 0;
    }
    if (!strcmp(name, "divisibleby")) {
        if (!is_num(v) || !is_num(x) || num_f(x) == 0) jt_fail(r, "test 'divisibleby' needs non-zero numbers");
        if (v.t == V_FLOAT || x.t == V_FLOAT) return fmod(num_f(v), num_f(x)) == 0;
        return num_i(x) == -1 || num_i(v) % num_i(x) == 0;
    }
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) return v_eq(&v, &x);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !v_eq(&v, &x);
    if (!strcmp(name, "sameas")) return v.t == x.t && v_eq(&v, &x);
    if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) return v_cmp(r, v, x, true) < 0;
    if (!strcmp(name, "le") || !strcmp(name, "<=")) return v_cmp(r, v, x, true) <= 0;
    if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) return v_cmp(r, v, x, true) > 0;
    if (!strcmp(name, "ge") || !strcmp(name, ">=")) return v_cmp(r, v, x, true) >= 0;
    if (!strcmp(name, "in")) return contains(r, x, v);
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v.t != V_STR) return false;
        jv c = str_case(r, v, !strcmp(name, "lower") ? CASE_LOWER : CASE_UPPER);
        return v_eq(&c, &v);
    }
    if (!strcmp(name, "escaped")) return false;
    jt_fail(r, "unknown test '%s'", name);
    return false;
}

/* ------------------------------------------------------------------ */
/* Filters                                                             */
/* ------------------------------------------------------------------ */

static jv apply_filter(R *r, const char *name, jv v, const args *a);

/* attribute lookup with dotted paths ("a.b") and integer parts, as jinja2's make_attrgetter */
static jv attr_path(R *r, jv v, jv attr) {
    if (attr.t == V_INT) return getitem_v(r, v, attr);
    if (attr.t != V_STR) jt_fail(r, "attribute must be a string");
    const char *p = attr.u.s.p, *e = p + attr.u.s.n;
    while (p <= e) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        if (!dot) dot = e;
        char *part = jt_strndup(r, p, (size_t)(dot - p));
        char *end;
        long long idx = strtoll(part, &end, 10);
        if (*part && !*end) v = getitem_v(r, v, mk_int(idx));
        else v = getitem_v(r, v, mk_str(part));
        p = dot + 1;
    }
    return v;
}

static args shift_args(const args *a, size_t k) {
    args b = *a;
    if (k > b.n) k = b.n;
    b.n -= k, b.v += k;
    return b;
}

static void sort_list(R *r, jv *v, size_t n, bool rev, bool cs, jv attr) {
    /* stable insertion sort via merge: simple bottom-up merge sort */
    jv *tmp = jt_alloc(r, (n + 1) * sizeof(jv));
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                jv x = v[i], y = v[j];
                if (attr.t != V_UNDEF) x = attr_path(r, x, attr), y = attr_path(r, y, attr);
                int c = v_cmp(r, x, y, cs);
                if (rev) c = -c;
                tmp[k++] = c <= 0 ? v[i++] : v[j++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof(jv));
    }
}

static jv filter_select(R *r, jv v, const args *a, bool attr_mode, bool keep) {
    jt_list *items = iter_list(r, v, "select");
    jv out = mk_list(r);
    jv attr = attr_mode ? arg(a, 0, NULL, UNDEF) : UNDEF;
    size_t k = attr_mode ? 1 : 0;
    jv test = arg(a, k, NULL, UNDEF);
    args rest = shift_args(a, k + 1);
    for (size_t i = 0; i < items->n; i++) {
        jv x = items->v[i];
        jv y = attr_mode ? attr_path(r, x, attr) : x;
        bool t;
        if (test.t == V_STR) t = apply_test(r, jt_strndup(r, test.u.s.p, test.u.s.n), y, &rest);
        else t = truthy(y);
        if (t == keep) list_push(r, out.u.l, x);
    }
    return out;
}

static jv apply_filter(R *r, const char *name, jv v, const args *a) {
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (v.t == V_STR) return mk_int((int64_t)str_len(r, v));
        if (v.t == V_LIST) return mk_int((int64_t)v.u.l->n);
        if (v.t == V_DICT) return mk_int((int64_t)v.u.d->n);
        if (v.t == V_UNDEF) return mk_int(0);
        jt_fail(r, "filter 'length': a value of type %s has no length", type_name(v.t));
    }
    if (!strcmp(name, "safe") || !strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape"))
        return v.t == V_STR ? v : to_str(r, v);
    if (!strcmp(name, "string")) return to_str(r, v);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv def = arg(a, 0, "default_value", mk_str(""));
        bool boolean = truthy(arg(a, 1, "boolean", mk_bool(false)));
        if (v.t == V_UNDEF || (boolean && !truthy(v))) return def;
        return v;
    }
    if (!strcmp(name, "tojson")) {
        jv ind = arg(a, 0, "indent", NONE);
        int indent = -1;
        if (ind.t == V_INT) indent = ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : (int)ind.u.i;
        else if (ind.t != V_NONE && ind.t != V_UNDEF) jt_fail(r, "filter 'tojson': indent must be an integer");
        sbuf b = {0};
        put_json(r, &b, v, indent, 0);
        return sb_val(&b);
    }
    if (!strcmp(name, "list")) {
        jv out = mk_list(r);
        jt_list *items = iter_list(r, v, "filter 'list'");
        for (size_t i = 0; i < items->n; i++) list_push(r, out.u.l, items->v[i]);
        return out;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jt_list *items = iter_list(r, v, "filter 'first'");
        if (!items->n) return UNDEF;
        return items->v[!strcmp(name, "first") ? 0 : items->n - 1];
    }
    if (!strcmp(name, "reverse")) {
        if (v.t == V_STR) return slice_v(r, v, UNDEF, UNDEF, mk_int(-1));
        jt_list *items = iter_list(r, v, "filter 'reverse'");
        jv out = mk_list(r);
        for (size_t i = items->n; i-- > 0;) list_push(r, out.u.l, items->v[i]);
        return out;
    }
    if (!strcmp(name, "join")) {
        jv sep = arg(a, 0, "d", mk_str(""));
        jv attr = arg(a, 1, "attribute", UNDEF);
        sep = to_str(r, sep);
        jt_list *items = iter_list(r, v, "filter 'join'");
        sbuf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (i) sb_put(r, &b, sep.u.s.p, sep.u.s.n);
            jv x = attr.t != V_UNDEF ? attr_path(r, items->v[i], attr) : items->v[i];
            put_str(r, &b, x);
        }
        return sb_val(&b);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
        jv s = to_str(r, v);
        int mode = !strcmp(name, "upper") ? CASE_UPPER : !strcmp(name, "lower") ? CASE_LOWER : !strcmp(name, "title") ? CASE_TITLE : CASE_CAPITALIZE;
        return str_case(r, s, mode);
    }
    if (!strcmp(name, "trim")) {
        jv chars = arg(a, 0, "chars", UNDEF);
        return str_strip(to_str(r, v), chars.t == V_STR ? chars : UNDEF, 3);
    }
    if (!strcmp(name, "replace")) {
        jv s = to_str(r, v);
        jv old = to_str(r, arg(a, 0, "old", UNDEF)), rep = to_str(r, arg(a, 1, "new", UNDEF));
        return str_replace(r, s, old, rep, arg_int(r, a, 2, "count", -1, "filter 'replace'"));
    }
    if (!strcmp(name, "items")) {
        if (v.t == V_UNDEF) return mk_list(r);
        if (v.t != V_DICT) jt_fail(r, "filter 'items' needs a dict, got %s", type_name(v.t));
        jv out = mk_list(r);
        for (size_t i = 0; i < v.u.d->n; i++) {
            jv pair = mk_list(r);
            list_push(r, pair.u.l, v.u.d->k[i]);
            list_push(r, pair.u.l, v.u.d->v[i]);
            list_push(r, out.u.l, pair);
        }
        return out;
    }
    if (!strcmp(name, "dictsort")) {
        if (v.t != V_DICT) jt_fail(r, "filter 'dictsort' needs a dict, got %s", type_name(v.t));
        jv items = apply_filter(r, "items", v, a);
        bool cs = truthy(arg(a, 0, "case_sensitive", mk_bool(false)));
        jv by = arg(a, 1, "by", mk_str("key"));
        bool rev = truthy(arg(a, 2, "reverse", mk_bool(false)));
        bool by_value = by.t == V_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5);
        sort_list(r, items.u.l->v, items.u.l->n, rev, cs, by_value ? mk_int(1) : mk_int(0));
        return items;
    }
    if (!strcmp(name, "sort")) {
        jt_list *items = iter_list(r, v, "filter 'sort'");
        jv out = mk_list(r);
        for (size_t i = 0; i < items->n; i++) list_push(r, out.u.l, items->v[i]);
        bool rev = truthy(arg(a, 0, "reverse", mk_bool(false)));
        bool cs = truthy(arg(a, 1, "case_sensitive", mk_bool(false)));
        jv attr = arg(a, 2, "attribute", UNDEF);
        sort_list(r, out.u.l->v, out.u.l->n, rev, cs, attr);
        return out;
    }
    if (!strcmp(name, "unique")) {
        jt_list *items = iter_list(r, v, "filter 'unique'");
        jv out = mk_list(r);
        for (size_t i = 0; i < items->n; i++)
            if (!contains(r, out, items->v[i])) list_push(r, out.u.l, items->v[i]);
        return out;
    }
    if (!strcmp(name, "map")) {
        jt_list *items = iter_list(r, v, "filter 'map'");
        jv out = mk_list(r);
        jv attr = arg(a, a->n > 0 ? (size_t)-1 : 0, "attribute", UNDEF);
        if (attr.t != V_UNDEF) {
            jv def = arg(a, (size_t)-1, "default", UNDEF);
            for (size_t i = 0; i < items->n; i++) {
                jv x = attr_path(r, items->v[i], attr);
                list_push(r, out.u.l, x.t == V_UNDEF ? def : x);
            }
            return out;
        }
        jv f = arg(a, 0, NULL, UNDEF);
        if (f.t != V_STR) jt_fail(r, "filter 'map' needs a filter name or attribute=");
        const char *fname = jt_strndup(r, f.u.s.p, f.u.s.n);
        args rest = shift_args(a, 1);
        for (size_t i = 0; i < items->n; i++) list_push(r, out.u.l, apply_filter(r, fname, items->v[i], &rest));
        return out;
    }
    if (!strcmp(name, "select")) return filter_select(r, v, a, false, true);
    if (!strcmp(name, "reject")) return filter_select(r, v, a, false, false);
    if (!strcmp(name, "selectattr")) return filter_select(r, v, a, true, true);
    if (!strcmp(name, "rejectattr")) return filter_select(r, v, a, true, false);
    if (!strcmp(name, "attr")) return getattr_v(r, v, jt_strndup(r, arg_str(r, a, 0, "name", "filter 'attr'").u.s.p, arg(a, 0, "name", UNDEF).u.s.n));
    if (!strcmp(name, "int")) {
        int64_t def = arg_int(r, a, 0, "default", 0, "filter 'int'");
        if (v.t == V_INT) return v;
        if (v.t == V_BOOL) return mk_int(v.u.b);
        if (v.t == V_FLOAT) return isfinite(v.u.f) && fabs(v.u.f) < 9e18 ? mk_int((int64_t)v.u.f) : mk_int(def);
        if (v.t == V_STR) {
            char *s = jt_strndup(r, v.u.s.p, v.u.s.n), *end;
            while (is_ws(*s)) s++;
            long long x = strtoll(s, &end, 10);
            while (is_ws(*end)) end++;
            if (end != s && !*end) return mk_int(x);
            double f = strtod(s, &end);
            while (is_ws(*end)) end++;
            if (end != s && !*end && isfinite(f) && fabs(f) < 9e18) return mk_int((int64_t)f);
        }
        return mk_int(def);
    }
    if (!strcmp(name, "float")) {
        jv def = arg(a, 0, "default", mk_float(0));
        if (is_num(v)) return mk_float(num_f(v));
        if (v.t == V_STR) {
            char *s = jt_strndup(r, v.u.s.p, v.u.s.n), *end;
            double f = strtod(s, &end);
            while (is_ws(*end)) end++;
            if (end != s && !*end) return mk_float(f);
        }
        return def;
    }
    if (!strcmp(name, "abs")) {
        if (v.t == V_INT) { if (v.u.i == INT64_MIN) jt_fail(r, "integer overflow"); return mk_int(v.u.i < 0 ? -v.u.i : v.u.i); }
        if (is_num(v)) return mk_float(fabs(num_f(v)));
        jt_fail(r, "filter 'abs' needs a number, got %s", type_name(v.t));
    }
    if (!strcmp(name, "round")) {
        if (!is_num(v)) jt_fail(r, "filter 'round' needs a number, got %s", type_name(v.t));
        int64_t prec = arg_int(r, a, 0, "precision", 0, "filter 'round'");
        jv method = arg(a, 1, "method", mk_str("common"));
        if (prec < -300 || prec > 300) jt_fail(r, "filter 'round': bad precision");
        double m = pow(10, (double)prec), x = num_f(v) * m;
        const char *md = method.t == V_STR ? method.u.s.p : "common";
        double y = !strncmp(md, "floor", 5) ? floor(x) : !strncmp(md, "ceil", 4) ? ceil(x) : round(x);
        return mk_float(y / m);
    }
    if (!strcmp(name, "sum")) {
        jt_list *items = iter_list(r, v, "filter 'sum'");
        jv attr = arg(a, 0, "attribute", UNDEF);
        jv acc = arg(a, 1, "start", mk_int(0));
        for (size_t i = 0; i < items->n; i++) acc = arith(r, "+", acc, attr.t != V_UNDEF ? attr_path(r, items->v[i], attr) : items->v[i]);
        return acc;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max")) {
        jt_list *items = iter_list(r, v, "filter 'min'");
        bool cs = truthy(arg(a, 0, "case_sensitive", mk_bool(false)));
        jv attr = arg(a, 1, "attribute", UNDEF);
        if (!items->n) return UNDEF;
        jv best = items->v[0];
        for (size_t i = 1; i < items->n; i++) {
            jv x = items->v[i];
            jv kx = attr.t != V_UNDEF ? attr_path(r, x, attr) : x, kb = attr.t != V_UNDEF ? attr_path(r, best, attr) : best;
            int c = v_cmp(r, kx, kb, cs);
            if (!strcmp(name, "min") ? c < 0 : c > 0) best = x;
        }
        return best;
    }
    if (!strcmp(name, "indent")) {
        jv s = to_str(r, v);
        jv w = arg(a, 0, "width", mk_int(4));
        bool first = truthy(arg(a, 1, "first", mk_bool(false))), blank = truthy(arg(a, 2, "blank", mk_bool(false)));
        jv pad;
        if (w.t == V_STR) pad = w;
        else {
            int64_t k = w.t == V_INT ? w.u.i : 4;
            if (k < 0) k = 0;
            if (k > 1024) jt_fail(r, "filter 'indent': width too large");
            sbuf pb = {0};
            for (int64_t i = 0; i < k; i++) sb_puts(r, &pb, " ");
            pad = sb_val(&pb);
        }
        sbuf b = {0};
        size_t i = 0;
        bool first_line = true;
        while (i <= s.u.s.n) {
            const char *nl = memchr(s.u.s.p + i, '\n', s.u.s.n - i);
            size_t e = nl ? (size_t)(nl - s.u.s.p) : s.u.s.n;
            bool empty = e == i;
            if ((first_line ? first : true) && (blank || !empty)) sb_put(r, &b, pad.u.s.p, pad.u.s.n);
            sb_put(r, &b, s.u.s.p + i, e - i);
            if (!nl) break;
            sb_puts(r, &b, "\n");
            i = e + 1;
            first_line = false;
        }
        return sb_val(&b);
    }
    if (!strcmp(name, "center")) {
        jv s = to_str(r, v);
        int64_t w = arg_int(r, a, 0, "width", 80, "filter 'center'");
        size_t len = str_len(r, s);
        if (w > 1 << 20) jt_fail(r, "filter 'center': width too large");
        if (w <= (int64_t)len) return s;
        size_t tot = (size_t)w - len, left = tot / 2 + (tot & len & 1);
        sbuf b = {0};
        for (size_t i = 0; i < left; i++) sb_puts(r, &b, " ");
        sb_put(r, &b, s.u.s.p, s.u.s.n);
        for (size_t i = left; i < tot; i++) sb_puts(r, &b, " ");
        return sb_val(&b);
    }
    if (!strcmp(name, "wordcount")) {
        jv s = to_str(r, v);
        return mk_int((int64_t)str_split(r, s, UNDEF, -1).u.l->n);
    }
    if (!strcmp(name, "batch")) {
        int64_t k = arg_int(r, a, 0, "linecount", 1, "filter 'batch'");
        if (k <= 0) jt_fail(r, "filter 'batch': size must be positive");
        jv fill = arg(a, 1, "fill_with", UNDEF);
        jt_list *items = iter_list(r, v, "filter 'batch'");
        jv out = mk_list(r), cur = UNDEF;
        for (size_t i = 0; i < items->n; i++) {
            if (cur.t == V_UNDEF) cur = mk_list(r);
            list_push(r, cur.u.l, items->v[i]);
            if ((int64_t)cur.u.l->n == k) { list_push(r, out.u.l, cur); cur = UNDEF; }
        }
        if (cur.t != V_UNDEF) {
            if (fill.t != V_UNDEF) while ((int64_t)cur.u.l->n < k) list_push(r, cur.u.l, fill);
            list_push(r, out.u.l, cur);
        }
        return out;
    }
    if (!strcmp(name, "pprint")) {
        sbuf b = {0};
        put_repr(r, &b, v, 0);
        return sb_val(&b);
    }
    jt_fail(r, "unknown filter '%s'", name);
    return UNDEF;
}

/* ------------------------------------------------------------------ */
/* Methods on values: str.strip(), dict.items(), list.append(), ...    */
/* ------------------------------------------------------------------ */

static bool call_method(R *r, jv obj, const char *m, const args *a, jv *out) {
    if (obj.t == V_STR) {
        if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
            jv chars = arg(a, 0, "chars", UNDEF);
            *out = str_strip(obj, chars.t == V_STR ? chars : UNDEF, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
            return true;
        }
        if (!strcmp(m, "split")) {
            jv sep = arg(a, 0, "sep", UNDEF);
            *out = str_split(r, obj, sep.t == V_STR ? sep : UNDEF, arg_int(r, a, 1, "maxsplit", -1, "split"));
            return true;
        }
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            jv p = arg(a, 0, NULL, UNDEF);
            jt_list *cands;
            if (p.t == V_STR) { jv l = mk_list(r); list_push(r, l.u.l, p); cands = l.u.l; }
            else if (p.t == V_LIST) cands = p.u.l;
            else jt_fail(r, "%s: argument must be a string, got %s", m, type_name(p.t));
            *out = mk_bool(false);
            for (size_t i = 0; i < cands->n; i++) {
                jv c = cands->v[i];
                if (c.t != V_STR) jt_fail(r, "%s: argument must be a string", m);
                if (c.u.s.n > obj.u.s.n) continue;
                const char *at = m[0] == 's' ? obj.u.s.p : obj.u.s.p + obj.u.s.n - c.u.s.n;
                if (memcmp(at, c.u.s.p, c.u.s.n) == 0) *out = mk_bool(true);
            }
            return true;
        }
        if (!strcmp(m, "upper")) { *out = str_case(r, obj, CASE_UPPER); return true; }
        if (!strcmp(m, "lower")) { *out = str_case(r, obj, CASE_LOWER); return true; }
        if (!strcmp(m, "title")) { *out = str_case(r, obj, CASE_TITLE); return true; }
        if (!strcmp(m, "capitalize")) { *out = str_case(r, obj, CASE_CAPITALIZE); return true; }
        if (!strcmp(m, "replace")) {
            *out = str_replace(r, obj, arg_str(r, a, 0, "old", "replace"), arg_str(r, a, 1, "new", "replace"),
                               arg_int(r, a, 2, "count", -1, "replace"));
            return true;
        }
        if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count") || !strcmp(m, "index")) {
            jv sub = arg_str(r, a, 0, "sub", m);
            if (!strcmp(m, "count")) {
                int64_t c = 0;
                if (sub.u.s.n == 0) c = (int64_t)str_len(r, obj) + 1;
                else for (const char *x = find_sub(obj, sub, 0); x; x = find_sub(obj, sub, (size_t)(x - obj.u.s.p) + sub.u.s.n)) c++;
                *out = mk_int(c);
                return true;
            }
            const char *x = NULL;
            if (m[0] == 'r') {
                for (const char *y = find_sub(obj, sub, 0); y; y = (size_t)(y - obj.u.s.p) + 1 <= obj.u.s.n ? find_sub(obj, sub, (size_t)(y - obj.u.s.p) + 1) : NULL) x = y;
            } else {
                x = find_sub(obj, sub, 0);
            }
            if (!x && m[0] == 'i') jt_fail(r, "index: substring not found");
            if (!x) { *out = mk_int(-1); return true; }
            jv prefix = mk_strn(obj.u.s.p, (size_t)(x - obj.u.s.p));
            *out = mk_int((int64_t)str_len(r, prefix));
            return true;
        }
        if (!strcmp(m, "join")) {
            jt_list *items = iter_list(r, arg(a, 0, NULL, UNDEF), "join");
            sbuf b = {0};
            for (size_t i = 0; i < items->n; i++) {
                if (i) sb_put(r, &b, obj.u.s.p, obj.u.s.n);
                if (items->v[i].t != V_STR) jt_fail(r, "join: item %zu is not a string", i);
                put_str(r, &b, items->v[i]);
            }
            *out = sb_val(&b);
            return true;
        }
        if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isspace") || !strcmp(m, "isalnum") ||
            !strcmp(m, "islower") || !strcmp(m, "isupper")) {
            bool ok = obj.u.s.n > 0;
            for (size_t i = 0; i < obj.u.s.n && ok; i++) {
                unsigned char c = (unsigned char)obj.u.s.p[i];
                if (!strcmp(m, "isdigit")) ok = isdigit(c);
                else if (!strcmp(m, "isalpha")) ok = isalpha(c);
                else if (!strcmp(m, "isspace")) ok = is_ws((char)c);
                else if (!strcmp(m, "isalnum")) ok = isalnum(c);
                else if (!strcmp(m, "islower")) ok = !isupper(c);
                else ok = !islower(c);
            }
            *out = mk_bool(ok);
            return true;
        }
        if (!strcmp(m, "splitlines")) {
            jv l = str_split(r, obj, mk_str("\n"), -1);
            if (l.u.l->n && l.u.l->v[l.u.l->n - 1].u.s.n == 0) l.u.l->n--;
            *out = l;
            return true;
        }
        if (!strcmp(m, "format")) {
            sbuf b = {0};
            size_t k = 0;
            for (size_t i = 0; i < obj.u.s.n; i++) {
                if (obj.u.s.p[i] == '{' && i + 1 < obj.u.s.n && obj.u.s.p[i + 1] == '}') {
                    put_str(r, &b, arg(a, k++, NULL, UNDEF));
                    i++;
                } else if ((obj.u.s.p[i] == '{' || obj.u.s.p[i] == '}') && i + 1 < obj.u.s.n && obj.u.s.p[i + 1] == obj.u.s.p[i]) {
                    sb_put(r, &b, obj.u.s.p + i, 1);
                    i++;
                } else {
                    sb_put(r, &b, obj.u.s.p + i, 1);
                }
            }
            *out = sb_val(&b);
            return true;
        }
        return false;
    }
    if (obj.t == V_LIST) {
        if (!strcmp(m, "append")) { list_push(r, obj.u.l, arg(a, 0, NULL, UNDEF)); *out = NONE; return true; }
        if (!strcmp(m, "extend")) {
            jt_list *items = iter_list(r, arg(a, 0, NULL, UNDEF), "extend");
            size_t n = items->n;
            for (size_t i = 0; i < n; i++) list_push(r, obj.u.l, items->v[i]);
            *out = NONE;
            return true;
        }
        if (!strcmp(m, "pop")) {
            size_t i;
            if (!norm_index(arg_int(r, a, 0, "index", -1, "pop"), obj.u.l->n, &i)) jt_fail(r, "pop: index out of range");
            *out = obj.u.l->v[i];
            memmove(obj.u.l->v + i, obj.u.l->v + i + 1, (obj.u.l->n - i - 1) * sizeof(jv));
            obj.u.l->n--;
            return true;
        }
        if (!strcmp(m, "insert")) {
            int64_t at = arg_int(r, a, 0, "index", 0, "insert");
            jv x = arg(a, 1, NULL, UNDEF);
            list_push(r, obj.u.l, x);
            size_t n = obj.u.l->n;
            if (at < 0) at += (int64_t)n - 1;
            if (at < 0) at = 0;
            if ((size_t)at > n - 1) at = (int64_t)n - 1;
            memmove(obj.u.l->v + at + 1, obj.u.l->v + at, (n - 1 - (size_t)at) * sizeof(jv));
            obj.u.l->v[at] = x;
            *out = NONE;
            return true;
        }
        if (!strcmp(m, "index")) {
            jv x = arg(a, 0, NULL, UNDEF);
            for (size_t i = 0; i < obj.u.l->n; i++)
                if (v_eq(&obj.u.l->v[i], &x)) { *out = mk_int((int64_t)i); return true; }
            jt_fail(r, "index: value not in list");
        }
        if (!strcmp(m, "count")) {
            jv x = arg(a, 0, NULL, UNDEF);
            int64_t c = 0;
            for (size_t i = 0; i < obj.u.l->n; i++) c += v_eq(&obj.u.l->v[i], &x);
            *out = mk_int(c);
            return true;
        }
        return false;
    }
    if (obj.t == V_DICT) {
        if (!strcmp(m, "items")) { *out = apply_filter(r, "items", obj, a); return true; }
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jv l = mk_list(r);
            for (size_t i = 0; i < obj.u.d->n; i++) list_push(r, l.u.l, m[0] == 'k' ? obj.u.d->k[i] : obj.u.d->v[i]);
            *out = l;
            return true;
        }
        if (!strcmp(m, "get")) {
            jv *x = dict_find(obj.u.d, arg(a, 0, "key", UNDEF));
            *out = x ? *x : arg(a, 1, "default", NONE);
            return true;
        }
        if (!strcmp(m, "update")) {
            jv o = arg(a, 0, NULL, UNDEF);
            if (o.t == V_DICT) for (size_t i = 0; i < o.u.d->n; i++) dict_set(r, obj.u.d, o.u.d->k[i], o.u.d->v[i]);
            for (size_t i = 0; i < a->nkw; i++) dict_set(r, obj.u.d, mk_str(a->kwn[i]), a->kwv[i]);
            *out = NONE;
            return true;
        }
        return false;
    }
    return false;
}

static jv call_global(R *r, int id, const args *a) {
    switch (id) {
    case G_RANGE: {
        int64_t lo = 0, hi, st = 1;
        if (a->n == 1) hi = arg_int(r, a, 0, NULL, 0, "range");
        else {
            lo = arg_int(r, a, 0, NULL, 0, "range");
            hi = arg_int(r, a, 1, NULL, 0, "range");
            st = arg_int(r, a, 2, NULL, 1, "range");
        }
        if (st == 0) jt_fail(r, "range: step cannot be zero");
        jv l = mk_list(r);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
            step(r);
            list_push(r, l.u.l, mk_int(i));
            if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st)) break;
        }
        return l;
    }
    case G_NAMESPACE: case G_DICT: {
        jv d = mk_dict(r);
        d.u.d->ns = id == G_NAMESPACE;
        for (size_t i = 0; i < a->n; i++) {
            if (a->v[i].t != V_DICT) jt_fail(r, "namespace()/dict() takes keyword arguments or a dict");
            for (size_t k = 0; k < a->v[i].u.d->n; k++) dict_set(r, d.u.d, a->v[i].u.d->k[k], a->v[i].u.d->v[k]);
        }
        for (size_t i = 0; i < a->nkw; i++) dict_set(r, d.u.d, mk_str(a->kwn[i]), a->kwv[i]);
        return d;
    }
    case G_RAISE: {
        jv m = to_str(r, arg(a, 0, NULL, mk_str("")));
        jt_fail(r, "raise_exception: %.*s", (int)(m.u.s.n > 400 ? 400 : m.u.s.n), m.u.s.p);
    }
    case G_STRFTIME: {
        jv fmt = arg_str(r, a, 0, "format", "strftime_now");
        const char *sde = getenv("SOURCE_DATE_EPOCH");
        time_t now = time(NULL);
        struct tm tmv;
        if (sde && *sde) {
            now = (time_t)strtoll(sde, NULL, 10);
            gmtime_r(&now, &tmv);
        } else {
            localtime_r(&now, &tmv);
        }
        char *f = jt_strndup(r, fmt.u.s.p, fmt.u.s.n);
        char buf[512];
        size_t n = f[0] ? strftime(buf, sizeof buf, f, &tmv) : 0;
        return mk_str(jt_strndup(r, buf, n));
    }
    }
    jt_fail(r, "unknown function");
    return UNDEF;
}

static jv call_macro(R *r, jt_macro *m, const args *a, jv caller) {
    step(r);
    if (++r->depth > JT_MAX_DEPTH) jt_fail(r, "macro calls nested too deeply (recursion?)");
    node *def = m->def;
    scope *s = new_scope(r, m->closure);
    for (size_t i = 0; i < def->nkw; i++) {
        jv v = UNDEF;
        bool found = false;
        if (i < a->n) v = a->v[i], found = true;
        for (size_t k = 0; k < a->nkw && !found; k++)
            if (!strcmp(a->kwn[k], def->kwn[i])) v = a->kwv[k], found = true;
        if (!found && def->kwv[i]) v = eval(r, s, def->kwv[i]);
        scope_set(r, s, def->kwn[i], v);
    }
    jv varargs = mk_list(r);
    for (size_t i = def->nkw; i < a->n; i++) list_push(r, varargs.u.l, a->v[i]);
    scope_set(r, s, "varargs", varargs);
    if (caller.t != V_UNDEF) scope_set(r, s, "caller", caller);
    size_t mark = r->out_n;
    int saved_ctrl = r->ctrl;
    exec(r, s, m->is_caller ? def->b : def->a);
    r->ctrl = saved_ctrl;
    jv res = out_take(r, mark);
    r->depth--;
    return res;
}

static const char *callee_name(node *n) {
    return (n->k == N_NAME || n->k == N_GETATTR) ? n->op : "expression";
}

static jv eval_call(R *r, scope *s, node *n, jv caller) {
    node *f = n->a;
    if (f->k == N_GETATTR) {
        jv obj = eval(r, s, f->a);
        args a = eval_args(r, s, n, 0);
        jv out;
        r->line = n->line;
        if (call_method(r, obj, f->op, &a, &out)) return out;
        jv fn = getattr_v(r, obj, f->op);
        if (fn.t == V_MACRO) return call_macro(r, fn.u.m, &a, caller);
        if (obj.t == V_UNDEF) jt_fail(r, "cannot call '%s' on an undefined value", f->op);
        jt_fail(r, "%s has no method '%s'", type_name(obj.t), f->op);
    }
    jv fn = eval(r, s, f);
    args a = eval_args(r, s, n, 0);
    r->line = n->line;
    if (fn.t == V_MACRO) return call_macro(r, fn.u.m, &a, caller);
    if (fn.t == V_FUNC) return call_global(r, fn.u.fn, &a);
    if (fn.t == V_UNDEF) jt_fail(r, "'%s' is undefined", callee_name(f));
    jt_fail(r, "'%s' (a %s) is not callable", callee_name(f), type_name(fn.t));
    return UNDEF;
}

static jv eval(R *r, scope *s, node *n) {
    r->line = n->line;
    switch (n->k) {
    case N_LIT: return n->lit;
    case N_PLACEHOLDER: return r->filter_input;
    case N_NAME: {
        jv *v = scope_get(s, n->op);
        if (v) return *v;
        for (int k = 0; GLOBALS[k].name; k++)
            if (!strcmp(GLOBALS[k].name, n->op)) { jv f = {V_FUNC, {0}}; f.u.fn = GLOBALS[k].id; return f; }
        return UNDEF;
    }
    case N_LIST: case N_TUPLE: {
        jv l = mk_list(r);
        for (size_t i = 0; i < n->nkids; i++) list_push(r, l.u.l, eval(r, s, n->kids[i]));
        return l;
    }
    case N_DICT: {
        jv d = mk_dict(r);
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            jv k = eval(r, s, n->kids[i]);
            dict_set(r, d.u.d, k, eval(r, s, n->kids[i + 1]));
        }
        return d;
    }
    case N_GETATTR: return getattr_v(r, eval(r, s, n->a), n->op);
    case N_GETITEM: {
        jv obj = eval(r, s, n->a);
        return getitem_v(r, obj, eval(r, s, n->b));
    }
    case N_SLICE: {
        jv obj = eval(r, s, n->a);
        jv a = n->b ? eval(r, s, n->b) : UNDEF, b = n->c ? eval(r, s, n->c) : UNDEF, c = n->d ? eval(r, s, n->d) : UNDEF;
        r->line = n->line;
        return slice_v(r, obj, a, b, c);
    }
    case N_CALL: return eval_call(r, s, n, UNDEF);
    case N_FILTER: {
        jv v = eval(r, s, n->a);
        args a = eval_args(r, s, n, 0);
        r->line = n->line;
        return apply_filter(r, n->op, v, &a);
    }
    case N_TEST: {
        jv v = eval(r, s, n->a);
        args a = eval_args(r, s, n, 0);
        r->line = n->line;
        return mk_bool(apply_test(r, n->op, v, &a) != n->neg);
    }
    case N_NEG: case N_POS: {
        jv v = eval(r, s, n->a);
        if (!is_num(v)) jt_fail(r, "unary %s needs a number, got %s", n->k == N_NEG ? "-" : "+", type_name(v.t));
        if (n->k == N_POS) return v.t == V_BOOL ? mk_int(v.u.b) : v;
        if (v.t == V_FLOAT) return mk_float(-v.u.f);
        if (num_i(v) == INT64_MIN) jt_fail(r, "integer overflow");
        return mk_int(-num_i(v));
    }
    case N_NOT: return mk_bool(!truthy(eval(r, s, n->a)));
    case N_AND: { jv a = eval(r, s, n->a); return truthy(a) ? eval(r, s, n->b) : a; }
    case N_OR: { jv a = eval(r, s, n->a); return truthy(a) ? a : eval(r, s, n->b); }
    case N_BIN: {
        jv a = eval(r, s, n->a), b = eval(r, s, n->b);
        r->line = n->line;
        return arith(r, n->op, a, b);
    }
    case N_CONCAT: {
        jv a = eval(r, s, n->a), b = eval(r, s, n->b);
        sbuf sb = {0};
        put_str(r, &sb, a);
        put_str(r, &sb, b);
        return sb_val(&sb);
    }
    case N_CMP: {
        jv a = eval(r, s, n->a), b = eval(r, s, n->b);
        r->line = n->line;
        if (!strcmp(n->op, "==")) return mk_bool(v_eq(&a, &b));
        if (!strcmp(n->op, "!=")) return mk_bool(!v_eq(&a, &b));
        int c = v_cmp(r, a, b, true);
        if (!strcmp(n->op, "<")) return mk_bool(c < 0);
        if (!strcmp(n->op, ">")) return mk_bool(c > 0);
        if (!strcmp(n->op, "<=")) return mk_bool(c <= 0);
        return mk_bool(c >= 0);
    }
    case N_IN: case N_NOTIN: {
        jv a = eval(r, s, n->a), b = eval(r, s, n->b);
        r->line = n->line;
        return mk_bool(contains(r, b, a) == (n->k == N_IN));
    }
    case N_COND: {
        if (truthy(eval(r, s, n->a))) return eval(r, s, n->b);
        return n->c ? eval(r, s, n->c) : UNDEF;
    }
    default: jt_fail(r, "internal error: bad expression node %d", (int)n->k);
    }
    return UNDEF;
}

/* Binds loop / set targets: one name, or unpacking a sequence into several. */
static void assign(R *r, scope *s, const char **names, size_t nn, jv v) {
    if (nn == 1) { scope_set(r, s, names[0], v); return; }
    jt_list *items = iter_list(r, v, "unpacking");
    if (items->n != nn) jt_fail(r, "cannot unpack %zu values into %zu names", items->n, nn);
    for (size_t i = 0; i < nn; i++) scope_set(r, s, names[i], items->v[i]);
}

static void exec_for(R *r, scope *s, node *n) {
    jv it = eval(r, s, n->a);
    if (it.t != V_UNDEF && it.t != V_LIST && it.t != V_DICT && it.t != V_STR)
        jt_fail(r, "for: a value of type %s is not iterable", type_name(it.t));
    jt_list *items = iter_list(r, it, "for");
    if (n->b) {
        jv kept = mk_list(r);
        for (size_t i = 0; i < items->n; i++) {
            step(r);
            scope *fs = new_scope(r, s);
            assign(r, fs, n->names, n->nnames, items->v[i]);
            if (truthy(eval(r, fs, n->b))) list_push(r, kept.u.l, items->v[i]);
        }
        items = kept.u.l;
    } else {
        /* iterate over a snapshot: the body may append to the list */
        jv copy = mk_list(r);
        for (size_t i = 0; i < items->n; i++) list_push(r, copy.u.l, items->v[i]);
        items = copy.u.l;
    }
    jt_loop *lp = jt_alloc(r, sizeof(jt_loop));
    lp->items = items;
    jv loopv = {V_LOOP, {0}};
    loopv.u.lp = lp;
    for (size_t i = 0; i < items->n; i++) {
        step(r);
        lp->i = i;
        scope *body = new_scope(r, s);
        assign(r, body, n->names, n->nnames, items->v[i]);
        scope_set(r, body, "loop", loopv);
        exec(r, body, n->c);
        if (r->ctrl == CTRL_BREAK) { r->ctrl = 0; break; }
        if (r->ctrl == CTRL_CONTINUE) r->ctrl = 0;
    }
    if (items->n == 0 && n->d) exec(r, s, n->d);
}

static void exec(R *r, scope *s, node *n) {
    r->line = n->line;
    switch (n->k) {
    case N_BLOCK:
        for (size_t i = 0; i < n->nkids && !r->ctrl; i++) exec(r, s, n->kids[i]);
        return;
    case N_TEXT: out_put(r, n->lit.u.s.p, n->lit.u.s.n); return;
    case N_OUTPUT: {
        jv v = eval(r, s, n->a);
        if (v.t == V_STR) { out_put(r, v.u.s.p, v.u.s.n); return; }
        sbuf b = {0};
        put_str(r, &b, v);
        out_put(r, b.p ? b.p : "", b.n);
        return;
    }
    case N_IF:
        if (truthy(eval(r, s, n->a))) exec(r, s, n->b);
        else if (n->c) exec(r, s, n->c);
        return;
    case N_FOR: exec_for(r, s, n); return;
    case N_SET: {
        jv v;
        if (n->c) {
            size_t mark = r->out_n;
            exec(r, s, n->c);
            v = out_take(r, mark);
            if (n->d) {
                jv saved = r->filter_input;
                r->filter_input = v;
                v = eval(r, s, n->d);
                r->filter_input = saved;
            }
        } else {
            v = eval(r, s, n->b);
        }
        r->line = n->line;
        if (n->a) {
            jv *ns = scope_get(s, n->a->op);
            if (!ns || ns->t != V_DICT || !ns->u.d->ns)
                jt_fail(r, "cannot set attribute '%s' of '%s': not a namespace", n->op, n->a->op);
            dict_set(r, ns->u.d, mk_str(n->op), v);
        } else if (n->nnames) {
            assign(r, s, n->names, n->nnames, v);
        }
        return;
    }
    case N_MACRO: {
        jv m = {V_MACRO, {0}};
        m.u.m = jt_alloc(r, sizeof(jt_macro));
        m.u.m->def = n, m.u.m->closure = s, m.u.m->is_caller = false;
        scope_set(r, s, n->op, m);
        return;
    }
    case N_CALLBLOCK: {
        jv c = {V_MACRO, {0}};
        c.u.m = jt_alloc(r, sizeof(jt_macro));
        c.u.m->def = n, c.u.m->closure = s, c.u.m->is_caller = true;
        jv v = eval_call(r, s, n->a, c);
        sbuf b = {0};
        put_str(r, &b, v);
        out_put(r, b.p ? b.p : "", b.n);
        return;
    }
    case N_FILTERBLOCK: {
        size_t mark = r->out_n;
        exec(r, s, n->b);
        jv body = out_take(r, mark);
        jv saved = r->filter_input;
        r->filter_input = body;
        jv v = eval(r, s, n->a);
        r->filter_input = saved;
        sbuf b = {0};
        put_str(r, &b, v);
        out_put(r, b.p ? b.p : "", b.n);
        return;
    }
    case N_BREAK: r->ctrl = CTRL_BREAK; return;
    case N_CONTINUE: r->ctrl = CTRL_CONTINUE; return;
    default: jt_fail(r, "internal error: bad statement node %d", (int)n->k);
    }
}

/* ------------------------------------------------------------------ */
/* Entry point                                                         */
/* ------------------------------------------------------------------ */

static void free_chunks(R *r) {
    for (chunk *c = r->chunks, *nx; c; c = nx) nx = c->next, free(c);
    r->chunks = NULL;
}

vllm_status jt_render(const char *src, const json_t *vars, char **out) {
    if (!src || !out) return vt_error(VLLM_ERR_INVALID_ARG, "chat template: no template");
    *out = NULL;
    if (vars && !json_is_object(vars)) return vt_error(VLLM_ERR_INVALID_ARG, "chat template: variables must be a JSON object");
    R *r = calloc(1, sizeof(R));
    if (!r) return vt_error(VLLM_ERR_NO_MEMORY, "chat template: out of memory");
    r->status = VLLM_ERR_INVALID_ARG;
    r->line = 1;
    r->src = src;
    if (setjmp(r->jmp)) {
        vllm_status st = r->status;
        free(r->out);
        free_chunks(r);
        free(r);
        return st;
    }
    /* parse (syntax errors are FORMAT) */
    r->status = VLLM_ERR_FORMAT;
    P p = {0};
    p.r = r;
    lex(r, src, &p.ts);
    node *root = parse_body(&p, NULL, NULL);
    r->status = VLLM_ERR_INVALID_ARG;
    /* globals */
    r->root = new_scope(r, NULL);
    if (vars) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)vars, k, x) scope_set(r, r->root, jt_strndup(r, k, strlen(k)), from_json(r, x, 0));
    }
    r->line = 1;
    exec(r, r->root, root);
    out_put(r, "", 0);
    if (!r->out) {
        r->out = malloc(1);
        if (!r->out) { r->status = VLLM_ERR_NO_MEMORY; jt_fail(r, "out of memory"); }
    }
    r->out[r->out_n] = 0;
    *out = r->out;
    free_chunks(r);
    free(r);
    return VLLM_OK;
}
