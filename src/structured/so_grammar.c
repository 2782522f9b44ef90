/* so_grammar.c: the structured-output grammar IR: freeing and printing as EBNF (so_grammar.h). */
#include "structured/so_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void so_expr_free(so_expr *e) {
    if (!e) return;
    for (int i = 0; i < e->n_kids; i++) so_expr_free(e->kids[i]);
    free(e->kids);
    free(e->bytes);
    free(e->ranges);
    free(e);
}

void so_grammar_free(so_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) {
        free(g->rules[i].name);
        so_expr_free(g->rules[i].body);
        so_expr_free(g->rules[i].lookahead);
    }
    free(g->rules);
    free(g);
}

/* ---- printing ---- */

typedef struct pbuf {
    char *p;
    size_t n, cap;
    bool oom;
} pbuf;

static void put(pbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(pbuf *b, const char *s) { put(b, s, strlen(s)); }

/* one code point as UTF-8 */
static void put_cp(pbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)),
        u[3] = (char)(0x80 | (cp & 63)), n = 4;
    put(b, u, n);
}

/* a code point inside a literal (quote '"') or a class (quote ']'), escaped where the reader needs it */
static void put_char(pbuf *b, uint32_t cp, bool in_class) {
    char e[16];
    switch (cp) {
    case '\\': puts_(b, "\\\\"); return;
    case '\n': puts_(b, "\\n"); return;
    case '\r': puts_(b, "\\r"); return;
    case '\t': puts_(b, "\\t"); return;
    default: break;
    }
    if (!in_class && cp == '"') {
        puts_(b, "\\\"");
        return;
    }
    if (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '[')) {
        e[0] = '\\', e[1] = (char)cp, e[2] = 0;
        puts_(b, e);
        return;
    }
    if (cp < 0x20 || cp == 0x7F) {
        snprintf(e, sizeof e, "\\x%02x", (unsigned)cp);
        puts_(b, e);
        return;
    }
    put_cp(b, cp);
}

/* bytes as a literal: valid UTF-8 sequences as their code points, other bytes as \xHH (the code point, which
 * the reader encodes as UTF-8: exact for bytes below 0x80 only) */
static void put_bytes(pbuf *b, const uint8_t *s, size_t n) {
    puts_(b, "\"");
    for (size_t i = 0; i < n;) {
        const uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool ok = k > 0 && i + k <= n;
        for (size_t j = 1; ok && j < k; j++) ok = (s[i + j] & 0xC0) == 0x80;
        if (!ok) {
            char e[8];
            snprintf(e, sizeof e, "\\x%02x", (unsigned)c);
            puts_(b, e);
            i++;
            continue;
        }
        uint32_t cp = k == 1 ? c : k == 2 ? (uint32_t)(c & 0x1F) : k == 3 ? (uint32_t)(c & 0x0F) : (uint32_t)(c & 0x07);
        for (size_t j = 1; j < k; j++) cp = cp << 6 | (s[i + j] & 0x3F);
        if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
            char e[8]; /* overlong, a surrogate, past U+10FFFF: not UTF-8, its first byte escaped */
            snprintf(e, sizeof e, "\\x%02x", (unsigned)c);
            puts_(b, e);
            i++;
            continue;
        }
        put_char(b, cp, false);
        i += k;
    }
    puts_(b, "\"");
}

static void put_expr(pbuf *b, const so_grammar *g, const so_expr *e, bool atom);

static void put_expr(pbuf *b, const so_grammar *g, const so_expr *e, bool atom) {
    char t[48];
    switch (e->kind) {
    case SO_BYTES: put_bytes(b, e->bytes, e->n_bytes); return;
    case SO_CLASS:
        puts_(b, e->negated ? "[^" : "[");
        for (int i = 0; i < e->n_ranges; i++) {
            put_char(b, e->ranges[2 * i], true);
            if (e->ranges[2 * i + 1] != e->ranges[2 * i]) {
                puts_(b, "-");
                put_char(b, e->ranges[2 * i + 1], true);
            }
        }
        puts_(b, "]");
        return;
    case SO_REF: puts_(b, g->rules[e->rule].name); return;
    case SO_SEQ:
        if (e->n_kids == 0) {
            puts_(b, "\"\"");
            return;
        }
        if (atom) puts_(b, "(");
        for (int i = 0; i < e->n_kids; i++) {
            if (i) puts_(b, " ");
            put_expr(b, g, e->kids[i], true);
        }
        if (atom) puts_(b, ")");
        return;
    case SO_CHOICE:
        if (atom) puts_(b, "(");
        for (int i = 0; i < e->n_kids; i++) {
            if (i) puts_(b, " | ");
            put_expr(b, g, e->kids[i], false);
        }
        if (atom) puts_(b, ")");
        return;
    case SO_REPEAT: {
        const so_expr *k = e->kids[0];
        const bool paren = k->kind == SO_REPEAT || (k->kind == SO_SEQ && k->n_kids > 0) || k->kind == SO_CHOICE;
        if (paren) puts_(b, "(");
        put_expr(b, g, k, false);
        if (paren) puts_(b, ")");
        if (e->min == 0 && e->max == 1) puts_(b, "?");
        else if (e->min == 0 && e->max < 0) puts_(b, "*");
        else if (e->min == 1 && e->max < 0) puts_(b, "+");
        else if (e->max < 0) snprintf(t, sizeof t, "{%d,}", e->min), puts_(b, t);
        else if (e->max == e->min) snprintf(t, sizeof t, "{%d}", e->min), puts_(b, t);
        else snprintf(t, sizeof t, "{%d,%d}", e->min, e->max), puts_(b, t);
        return;
    }
    }
}

char *so_grammar_print(const so_grammar *g) {
    pbuf b = {0};
    for (int i = 0; i < g->n_rules; i++) {
        puts_(&b, g->rules[i].name);
        puts_(&b, " ::= ");
        put_expr(&b, g, g->rules[i].body, false);
        if (g->rules[i].lookahead) {
            puts_(&b, " (= ");
            put_expr(&b, g, g->rules[i].lookahead, false);
            puts_(&b, ")");
        }
        puts_(&b, "\n");
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (!b.p) return calloc(1, 1);
    return b.p;
}
