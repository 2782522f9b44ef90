/* so_ebnf.c: reads xgrammar's GBNF dialect into the structured-output grammar IR (so_grammar.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "structured/so_grammar.h"

/* The dialect (xgrammar 0.1.29 cpp/grammar_parser.cc, docs/tutorials/ebnf_guided_generation.md; llama.cpp's GBNF):
 *   rule     := name "::=" choice [ "(=" choice ")" ]      a rule ends at the end of its line
 *   choice   := seq ( "|" seq )*                           a newline may follow "|", "::=", "(" and "(="
 *   seq      := ( element postfix* )*                      inside ( ) newlines are spaces
 *   element  := "literal" | [class] | name | ( choice )
 *   postfix  := ? | * | + | {n} | {n,} | {n,m}
 * names [A-Za-z0-9_.-] not starting with a digit, # comments to the end of the line, escapes \" \' \? \\ \a \b
 * \f \n \r \t \v \0 \e \xHH \uXXXX \UXXXXXXXX (code points, written as UTF-8) and in classes \[ \] \- \^. */

typedef struct parser {
    const char *s;
    size_t n, i;
    char **names; /* every rule name seen, defined or referred to */
    so_expr **bodies, **looks;
    int *def_order; /* names' index of the k-th defined rule */
    int n_names, cap, n_defs;
    int depth; /* ( ) nesting */
    bool failed;
    vllm_status st; /* the first failure's */
} parser;

/* bounds on what a request's grammar may make the recursive reader, printer and compiler walk: ( ) nesting, postfix
 * operators on one element, rules (the name lookup is linear) */
#define SO_MAX_NESTING 256
#define SO_MAX_POSTFIX 8
#define SO_MAX_RULES 4096

static void fail(parser *p, const char *fmt, ...) VT_PRINTF(2, 3);
static void fail(parser *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    p->st = VLLM_ERR_INVALID_ARG;
    int line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') line++, col = 1;
        else if (((unsigned char)p->s[k] & 0xC0) != 0x80) col++;
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vt_error(VLLM_ERR_INVALID_ARG, "EBNF parser error at line %d, column %d: %s", line, col, msg);
}

static void oom(parser *p) {
    if (p->failed) return;
    p->failed = true;
    p->st = vt_error(VLLM_ERR_NO_MEMORY, "EBNF parser: out of memory");
}

static so_expr *node(parser *p, so_kind k) {
    so_expr *e = calloc(1, sizeof *e);
    if (!e) oom(p);
    else e->kind = k;
    return e;
}

static bool add_kid(parser *p, so_expr *e, so_expr *k) {
    so_expr **q = realloc(e->kids, (size_t)(e->n_kids + 1) * sizeof *q);
    if (!q) {
        oom(p);
        so_expr_free(k);
        return false;
    }
    e->kids = q;
    e->kids[e->n_kids++] = k;
    return true;
}

static int peek(const parser *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* spaces, tabs and comments; newlines too when nl */
static void space(parser *p, bool nl) {
    while (p->i < p->n) {
        const char c = p->s[p->i];
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) p->i++;
        else if (c == '#')
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        else break;
    }
}

static bool name_char(int c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' || c == '.' ||
           (!first && c >= '0' && c <= '9');
}

/* the index of name s[0 .. len) among the names, added when new; -1 on failure */
static int name_index(parser *p, const char *s, size_t len) {
    for (int k = 0; k < p->n_names; k++)
        if (strlen(p->names[k]) == len && !memcmp(p->names[k], s, len)) return k;
    if (p->n_names == p->cap) {
        const int cap = p->cap ? 2 * p->cap : 16;
        char **nn = realloc(p->names, (size_t)cap * sizeof *nn);
        if (nn) p->names = nn;
        so_expr **b = realloc(p->bodies, (size_t)cap * sizeof *b);
        if (b) p->bodies = b;
        so_expr **l = realloc(p->looks, (size_t)cap * sizeof *l);
        if (l) p->looks = l;
        int *d = realloc(p->def_order, (size_t)cap * sizeof *d);
        if (d) p->def_order = d;
        if (!nn || !b || !l || !d) {
            oom(p);
            return -1;
        }
        p->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) {
        oom(p);
        return -1;
    }
    memcpy(c, s, len);
    c[len] = 0;
    p->names[p->n_names] = c;
    p->bodies[p->n_names] = NULL;
    p->looks[p->n_names] = NULL;
    return p->n_names++;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* one character of a literal or class at p->i (not the closing quote): its code point, -1 on failure */
static int64_t read_char(parser *p, bool in_class) {
    const unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\n' || c == '\r') {
        fail(p, in_class ? "character class should not contain newline" : "string literal should not contain newline");
        return -1;
    }
    if (c != '\\') { /* a UTF-8 sequence */
        const size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool ok = k > 0 && p->i + k <= p->n;
        for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)p->s[p->i + j] & 0xC0) == 0x80;
        if (!ok) {
            fail(p, "invalid UTF-8");
            return -1;
        }
        uint32_t cp = k == 1 ? c : k == 2 ? (uint32_t)(c & 0x1F) : k == 3 ? (uint32_t)(c & 0x0F) : (uint32_t)(c & 0x07);
        for (size_t j = 1; j < k; j++) cp = cp << 6 | ((unsigned char)p->s[p->i + j] & 0x3F);
        if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
            fail(p, "invalid UTF-8");
            return -1;
        }
        p->i += k;
        return cp;
    }
    if (p->i + 1 >= p->n) {
        fail(p, "unterminated escape");
        return -1;
    }
    const char e = p->s[p->i + 1];
    p->i += 2;
    switch (e) {
    case '"': return '"';
    case '\'': return '\'';
    case '?': return '?';
    case '\\': return '\\';
    case 'a': return 7;
    case 'b': return 8;
    case 'f': return 12;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'v': return 11;
    case '0': return 0;
    case 'e': return 27;
    case 'x':
    case 'u':
    case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int d = 0; d < digits; d++) {
            const int h = p->i < p->n ? hexval((unsigned char)p->s[p->i]) : -1;
            if (h < 0) {
                fail(p, "invalid escape \\%c: %d hexadecimal digits expected", e, digits);
                return -1;
            }
            cp = cp << 4 | (uint32_t)h;
            p->i++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            fail(p, "invalid code point U+%X", (unsigned)cp);
            return -1;
        }
        return cp;
    }
    default:
        if (in_class && (e == '[' || e == ']' || e == '-' || e == '^')) return e;
        p->i -= 2;
        fail(p, "invalid escape sequence \\%c", e);
        return -1;
    }
}

static bool put_utf8(parser *p, so_expr *e, uint32_t cp) {
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) u[0] = (uint8_t)cp, n = 1;
    else if (cp < 0x800) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 63)), u[2] = (uint8_t)(0x80 | (cp & 63)),
        n = 3;
    else
        u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 63)), u[3] = (uint8_t)(0x80 | (cp & 63)), n = 4;
    uint8_t *b = realloc(e->bytes, e->n_bytes + n);
    if (!b) {
        oom(p);
        return false;
    }
    e->bytes = b;
    memcpy(e->bytes + e->n_bytes, u, n);
    e->n_bytes += n;
    return true;
}

static so_expr *literal(parser *p) {
    p->i++; /* " */
    so_expr *e = node(p, SO_BYTES);
    while (e && !p->failed) {
        if (p->i >= p->n) {
            fail(p, "unterminated string literal");
            break;
        }
        if (p->s[p->i] == '"') {
            p->i++;
            return e;
        }
        const int64_t cp = read_char(p, false);
        if (cp < 0 || !put_utf8(p, e, (uint32_t)cp)) break;
    }
    so_expr_free(e);
    return NULL;
}

static so_expr *char_class(parser *p) {
    p->i++; /* [ */
    so_expr *e = node(p, SO_CLASS);
    if (e && peek(p) == '^') {
        e->negated = true;
        p->i++;
    }
    while (e && !p->failed) {
        if (p->i >= p->n) {
            fail(p, "unterminated character class");
            break;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            return e;
        }
        const int64_t lo = read_char(p, true);
        if (lo < 0) break;
        int64_t hi = lo;
        if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p, true);
            if (hi < 0) break;
            if (hi < lo) {
                fail(p, "invalid character class: lower bound is larger than upper bound");
                break;
            }
        }
        uint32_t *r = realloc(e->ranges, (size_t)(e->n_ranges + 1) * 2 * sizeof *r);
        if (!r) {
            oom(p);
            break;
        }
        e->ranges = r;
        e->ranges[2 * e->n_ranges] = (uint32_t)lo;
        e->ranges[2 * e->n_ranges + 1] = (uint32_t)hi;
        e->n_ranges++;
    }
    so_expr_free(e);
    return NULL;
}

static int read_int(parser *p) {
    int v = 0, digits = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (v > 100000000) {
            fail(p, "repetition count too large");
            return -1;
        }
        v = v * 10 + (p->s[p->i++] - '0');
        digits++;
    }
    return digits ? v : -1;
}

static so_expr *choice(parser *p, bool nested);

static so_expr *element(parser *p, bool nested) {
    const int c = peek(p);
    if (c == '"') return literal(p);
    if (c == '[') return char_class(p);
    if (c == '(') {
        p->i++;
        if (peek(p) == '=') {
            fail(p, "a lookahead assertion is only allowed at the end of a rule");
            return NULL;
        }
        if (p->depth >= SO_MAX_NESTING) {
            fail(p, "parentheses nested deeper than %d", SO_MAX_NESTING);
            return NULL;
        }
        p->depth++;
        space(p, true);
        so_expr *e = choice(p, true);
        p->depth--;
        space(p, true);
        if (e && peek(p) != ')') {
            fail(p, "expected ')'");
            so_expr_free(e);
            return NULL;
        }
        p->i++;
        return e;
    }
    if (name_char(c, true)) {
        const size_t s = p->i;
        while (p->i < p->n && name_char((unsigned char)p->s[p->i], false)) p->i++;
        const int k = name_index(p, p->s + s, p->i - s);
        if (k < 0) return NULL;
        so_expr *e = node(p, SO_REF);
        if (e) e->rule = k; /* a name index until so_ebnf_parse maps it to its rule */
        return e;
    }
    (void)nested;
    fail(p, c < 0 ? "unexpected end of input" : "unexpected character '%c'", c);
    return NULL;
}

/* postfix operators after an element */
static so_expr *postfix(parser *p, so_expr *e) {
    for (int ops = 0;; ops++) {
        const int c = peek(p);
        int mn, mx;
        if (ops == SO_MAX_POSTFIX && (c == '?' || c == '*' || c == '+' || c == '{')) {
            fail(p, "more than %d repetition operators on one element", SO_MAX_POSTFIX);
            so_expr_free(e);
            return NULL;
        }
        if (c == '?') mn = 0, mx = 1, p->i++;
        else if (c == '*') mn = 0, mx = -1, p->i++;
        else if (c == '+') mn = 1, mx = -1, p->i++;
        else if (c == '{') {
            p->i++;
            space(p, false);
            mn = read_int(p);
            if (mn < 0) {
                if (!p->failed) fail(p, "repetition range should have a lower bound");
                so_expr_free(e);
                return NULL;
            }
            space(p, false);
            mx = mn;
            if (peek(p) == ',') {
                p->i++;
                space(p, false);
                mx = peek(p) == '}' ? -1 : read_int(p);
                if (mx < -1 || (mx == -1 && peek(p) != '}') || p->failed) {
                    if (!p->failed) fail(p, "invalid repetition range");
                    so_expr_free(e);
                    return NULL;
                }
                space(p, false);
            }
            if (peek(p) != '}' || (mx >= 0 && mx < mn)) {
                fail(p, peek(p) != '}' ? "expected '}'" : "repetition range: the upper bound is below the lower");
                so_expr_free(e);
                return NULL;
            }
            p->i++;
        } else return e;
        so_expr *r = node(p, SO_REPEAT);
        if (!r) {
            so_expr_free(e);
            return NULL;
        }
        r->min = mn;
        r->max = mx;
        if (!add_kid(p, r, e)) {
            so_expr_free(r);
            return NULL;
        }
        e = r;
    }
}

static so_expr *sequence(parser *p, bool nested) {
    so_expr *seq = node(p, SO_SEQ);
    while (seq && !p->failed) {
        space(p, nested);
        const int c = peek(p);
        if (c < 0 || c == '|' || c == ')' || c == '\n' || c == '\r') break;
        if (!nested && c == '(' && p->i + 1 < p->n && p->s[p->i + 1] == '=') break; /* the rule's lookahead */
        so_expr *e = element(p, nested);
        if (e) e = postfix(p, e);
        if (!e || !add_kid(p, seq, e)) break;
    }
    if (p->failed) {
        so_expr_free(seq);
        return NULL;
    }
    if (seq->n_kids == 1) { /* a one-element sequence is its element */
        so_expr *k = seq->kids[0];
        free(seq->kids);
        free(seq);
        return k;
    }
    return seq;
}

static so_expr *choice(parser *p, bool nested) {
    so_expr *first = sequence(p, nested);
    if (!first) return NULL;
    space(p, nested);
    if (peek(p) != '|') return first;
    so_expr *ch = node(p, SO_CHOICE);
    if (!ch || !add_kid(p, ch, first)) {
        so_expr_free(ch);
        return NULL;
    }
    while (peek(p) == '|') {
        p->i++;
        space(p, true);
        so_expr *s = sequence(p, nested);
        if (!s || !add_kid(p, ch, s)) {
            so_expr_free(ch);
            return NULL;
        }
        space(p, nested);
    }
    return ch;
}

static void rule(parser *p) {
    const size_t s = p->i;
    if (!name_char(peek(p), true)) {
        fail(p, "expected a rule name");
        return;
    }
    while (p->i < p->n && name_char((unsigned char)p->s[p->i], false)) p->i++;
    const size_t len = p->i - s;
    if (p->n_defs >= SO_MAX_RULES) {
        p->i = s;
        fail(p, "more than %d rules", SO_MAX_RULES);
        return;
    }
    const int k = name_index(p, p->s + s, len);
    if (k < 0) return;
    for (int d = 0; d < p->n_defs; d++)
        if (p->def_order[d] == k) {
            p->i = s;
            fail(p, "Rule \"%s\" is defined multiple times", p->names[k]);
            return;
        }
    space(p, false);
    if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0) {
        fail(p, "expected ::=");
        return;
    }
    p->i += 3;
    space(p, true);
    const size_t at = p->i;
    so_expr *body = choice(p, false);
    if (!body) return;
    if (body->kind == SO_SEQ && body->n_kids == 0) { /* ("" is the empty string) */
        p->i = at;
        fail(p, "the rule's body is empty");
        so_expr_free(body);
        return;
    }
    so_expr *look = NULL;
    space(p, false);
    if (peek(p) == '(' && p->i + 1 < p->n && p->s[p->i + 1] == '=') {
        p->i += 2;
        space(p, true);
        look = choice(p, true);
        space(p, true);
        if (look && peek(p) != ')') fail(p, "expected ')'");
        if (p->failed) {
            so_expr_free(body);
            so_expr_free(look);
            return;
        }
        p->i++;
        space(p, false);
    }
    if (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') {
        fail(p, "expected the end of the rule (one rule per line)");
        so_expr_free(body);
        so_expr_free(look);
        return;
    }
    p->bodies[k] = body;
    p->looks[k] = look;
    p->def_order[p->n_defs++] = k;
}

/* SO_REF name indices -> rule indices */
static void map_refs(so_expr *e, const int *rule_of) {
    if (!e) return;
    if (e->kind == SO_REF) e->rule = rule_of[e->rule];
    for (int i = 0; i < e->n_kids; i++) map_refs(e->kids[i], rule_of);
}

/* the first reference to an undefined name (rule_of -1), or NULL */
static const so_expr *undefined_ref(const so_expr *e, const int *rule_of) {
    if (!e) return NULL;
    if (e->kind == SO_REF && rule_of[e->rule] < 0) return e;
    for (int i = 0; i < e->n_kids; i++) {
        const so_expr *u = undefined_ref(e->kids[i], rule_of);
        if (u) return u;
    }
    return NULL;
}

static void parser_free(parser *p) {
    for (int k = 0; k < p->n_names; k++) {
        free(p->names[k]);
        so_expr_free(p->bodies[k]);
        so_expr_free(p->looks[k]);
    }
    free(p->names);
    free(p->bodies);
    free(p->looks);
    free(p->def_order);
}

vllm_status so_ebnf_parse(const char *text, size_t len, const char *root_name, so_grammar **out) {
    *out = NULL;
    parser p = {.s = text, .n = len};
    for (;;) {
        space(&p, true);
        if (p.i >= p.n || p.failed) break;
        rule(&p);
    }
    int *rule_of = NULL;
    so_grammar *g = NULL;
    if (!p.failed) {
        rule_of = malloc(((size_t)p.n_names + 1) * sizeof *rule_of);
        g = calloc(1, sizeof *g);
        if (g) g->rules = calloc((size_t)p.n_defs + 1, sizeof *g->rules);
        if (!rule_of || !g || !g->rules) oom(&p);
    }
    if (!p.failed) {
        for (int k = 0; k < p.n_names; k++) rule_of[k] = -1;
        for (int d = 0; d < p.n_defs; d++) rule_of[p.def_order[d]] = d;
        for (int d = 0; d < p.n_defs && !p.failed; d++) {
            const int k = p.def_order[d];
            const so_expr *u = undefined_ref(p.bodies[k], rule_of);
            if (!u) u = undefined_ref(p.looks[k], rule_of);
            if (u) {
                p.failed = true; /* (named, not placed: the reference may be anywhere) */
                p.st = vt_error(VLLM_ERR_INVALID_ARG, "EBNF parser error: Rule \"%s\" is not defined", p.names[u->rule]);
            }
        }
    }
    if (!p.failed) {
        const char *root = root_name ? root_name : "root";
        g->root = -1;
        g->n_rules = p.n_defs;
        for (int d = 0; d < p.n_defs; d++) {
            const int k = p.def_order[d];
            g->rules[d].name = p.names[k];
            g->rules[d].body = p.bodies[k];
            g->rules[d].lookahead = p.looks[k];
            p.names[k] = NULL, p.bodies[k] = NULL, p.looks[k] = NULL;
            map_refs(g->rules[d].body, rule_of);
            map_refs(g->rules[d].lookahead, rule_of);
            if (!strcmp(g->rules[d].name, root)) g->root = d;
        }
        if (g->root < 0) {
            p.failed = true;
            p.st = vt_error(VLLM_ERR_INVALID_ARG, "The root rule with name \"%s\" is not found", root);
        }
    }
    free(rule_of);
    parser_free(&p);
    if (p.failed) {
        so_grammar_free(g);
        return p.st;
    }
    *out = g;
    return VLLM_OK;
}
