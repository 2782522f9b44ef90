/* so_regex.c: regexes (ECMAScript / Python syntax, xgrammar's RegexToEBNF) to the structured-output EBNF dialect. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "structured/so_regex.h"

/* What is read (xgrammar 0.1.29 cpp/regex_converter.cc, with HEAD's fixes; deviations marked *):
 *   alternation a|b (empty alternatives allowed), groups ( ), (?: ), (?<name> ), (?P<name> ) (names ignored);
 *   quantifiers * + ? {n} {n,} {n,m} and their lazy forms (a trailing ?, the same language); a second quantifier
 *   right after one (a++ possessive, a{2}{3}, a???) is refused, as xgrammar does; counts above SO_RX_MAX_COUNT;
 *   `.` is any code point, \n included (0.1.29's [\u0000-\U0010FFFF]; HEAD's automaton builder reads [^\n]);
 *   classes [..] [^..] with ranges, `-` literal first, last or next to a class escape ([\d-z]), `[` literal,
 *   [^] any character (ECMAScript), an empty class [] refused (xgrammar: "Empty character class");
 *   escapes \n \r \t \f \v \a \e \0 (not followed by a digit*), \xHH (exactly two digits*; xgrammar reads any
 *   number), \uHHHH (a UTF-16 surrogate pair \uD83D\uDE00 joined*), \u{H..H}, \UHHHHHHHH, \cX, \b in a class
 *   (backspace), \d \D \w \W \s \S (ASCII \d \w; \s = [\t\n\v\f\r \u00a0], their complements over all code
 *   points; 0.1.29's \S outside a class also left out `[`, a bug HEAD fixed), an escaped non-alphanumeric
 *   character is itself; an unknown letter escape is refused* (xgrammar warns and reads the letter);
 *   `^` where nothing can have been read yet and `$` where nothing can follow (ignored: the whole text must match
 *   anyway); elsewhere, or in a group repeated more than once, refused* (xgrammar warns and ignores them).
 * Refused: backreferences \1-\9 \k (?P=name), lookahead (?= (?!, lookbehind (?<= (?<!, atomic groups, inline
 * flags, word boundaries \b \B, anchors \A \Z \z \G, Unicode properties \p \P, invalid UTF-8, a NUL byte, more
 * than SO_RX_MAX_LEN bytes, groups nested deeper than SO_RX_MAX_DEPTH (counting the output's own parentheses).
 * json_string: a character JSON must escape (", \, U+0000..U+001F) named by the regex (a literal, a member of a
 * class) is written as its escape: \" \\ \b \f \n \r \t, else \u00XX (hex digits in either case); `.`, negated
 * classes and \D \W \S never produce one (xgrammar HEAD's RegexExpression json_string, which drops them all). */

#define SO_RX_MAX_LEN 65536
#define SO_RX_MAX_DEPTH 256
#define SO_RX_MAX_COUNT 10000
#define SO_RX_MAX_CP 0x10FFFFu

typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

/* a set of code points: n sorted, disjoint, non-adjacent ranges r[2i] .. r[2i+1] once normalized */
typedef struct rset {
    uint32_t *r;
    int n, cap;
} rset;

typedef struct rx {
    const char *src;
    size_t len;
    uint32_t *cp;  /* the regex as code points */
    size_t *off;   /* each one's byte offset; off[n] = len */
    size_t n, i;
    bool json;
    sbuf out;
    int depth;      /* open parentheses of the output */
    size_t lit_end; /* out.n just after the last literal that the next one may join, 0 when none */
    bool failed;
    vllm_status st;
} rx;

/* what an atom wrote */
typedef struct item {
    bool atomic;  /* one EBNF element: a postfix may follow it */
    bool lit;     /* one "..." literal: the next literal may join it */
    bool caret;   /* holds a `^` */
    bool dollar;  /* holds a `$` */
    size_t dollar_off;
} item;

static void fail(rx *p, size_t off, const char *fmt, ...) VT_PRINTF(3, 4);
static void fail(rx *p, size_t off, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    p->st = VLLM_ERR_INVALID_ARG;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vt_error(VLLM_ERR_INVALID_ARG, "regex: %s at offset %zu", msg, off);
}

static void oom(rx *p) {
    if (p->failed) return;
    p->failed = true;
    p->st = vt_error(VLLM_ERR_NO_MEMORY, "regex: out of memory");
}

/* ---- output text ---- */

static bool sb_reserve(rx *p, sbuf *b, size_t more) {
    if (p->failed) return false;
    if (b->n + more + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        oom(p);
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

static void sb_putn(rx *p, sbuf *b, const char *s, size_t n) {
    if (!sb_reserve(p, b, n)) return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_puts(rx *p, sbuf *b, const char *s) { sb_putn(p, b, s, strlen(s)); }

static void sb_putc(rx *p, sbuf *b, char c) { sb_putn(p, b, &c, 1); }

/* n bytes of s inserted at pos */
static void sb_insert(rx *p, sbuf *b, size_t pos, const char *s, size_t n) {
    if (!sb_reserve(p, b, n)) return;
    memmove(b->s + pos + n, b->s + pos, b->n - pos + 1);
    memcpy(b->s + pos, s, n);
    b->n += n;
}

static void sb_utf8(rx *p, sbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)),
        u[3] = (char)(0x80 | (cp & 63)), n = 4;
    sb_putn(p, b, u, n);
}

/* a code point as the EBNF dialect reads it in a literal (in_class false) or a class */
static void sb_cp(rx *p, sbuf *b, uint32_t cp, bool in_class) {
    char t[16];
    const char *short_esc = cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : cp == '\t' ? "\\t" : NULL;
    if (cp == '"' || cp == '\\' || (in_class && (cp == '[' || cp == ']' || cp == '-' || cp == '^'))) {
        t[0] = '\\', t[1] = (char)cp;
        sb_putn(p, b, t, 2);
    } else if (short_esc) {
        sb_puts(p, b, short_esc);
    } else if (cp < 0x20 || cp == 0x7F || (in_class && cp >= 0x80)) { /* a class shows its bounds' code points */
        snprintf(t, sizeof t, cp <= 0xFF ? "\\x%02x" : cp <= 0xFFFF ? "\\u%04x" : "\\U%08x", (unsigned)cp);
        sb_puts(p, b, t);
    } else {
        sb_utf8(p, b, cp);
    }
}

/* ---- code point sets ---- */

static bool rs_add(rx *p, rset *s, uint32_t lo, uint32_t hi) {
    if (p->failed) return false;
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 8;
        uint32_t *r = realloc(s->r, (size_t)cap * 2 * sizeof *r);
        if (!r) {
            oom(p);
            return false;
        }
        s->r = r;
        s->cap = cap;
    }
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return true;
}

static int cmp_range(const void *x, const void *y) {
    const uint32_t a = ((const uint32_t *)x)[0], b = ((const uint32_t *)y)[0];
    return a < b ? -1 : a > b;
}

static void rs_norm(rset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, 2 * sizeof *s->r, cmp_range);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[2 * i] <= s->r[2 * m - 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * m - 1]) s->r[2 * m - 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * m] = s->r[2 * i];
            s->r[2 * m + 1] = s->r[2 * i + 1];
            m++;
        }
    }
    s->n = m;
}

/* s := its complement over 0 .. U+10FFFF */
static void rs_complement(rx *p, rset *s) {
    rs_norm(s);
    rset c = {0};
    uint32_t next = 0;
    bool done = false;
    for (int i = 0; i < s->n && !done; i++) {
        if (s->r[2 * i] > next) rs_add(p, &c, next, s->r[2 * i] - 1);
        if (s->r[2 * i + 1] >= SO_RX_MAX_CP) done = true;
        else next = s->r[2 * i + 1] + 1;
    }
    if (!done) rs_add(p, &c, next, SO_RX_MAX_CP);
    free(s->r);
    *s = c;
}

/* s := s and t (both normalized) */
static void rs_intersect(rx *p, rset *s, const rset *t) {
    rset c = {0};
    for (int i = 0, j = 0; i < s->n && j < t->n;) {
        const uint32_t lo = s->r[2 * i] > t->r[2 * j] ? s->r[2 * i] : t->r[2 * j];
        const uint32_t hi = s->r[2 * i + 1] < t->r[2 * j + 1] ? s->r[2 * i + 1] : t->r[2 * j + 1];
        if (lo <= hi) rs_add(p, &c, lo, hi);
        if (s->r[2 * i + 1] < t->r[2 * j + 1]) i++;
        else j++;
    }
    free(s->r);
    *s = c;
}

/* the characters a JSON string body must escape */
static void rs_json_forbidden(rx *p, rset *s) {
    rs_add(p, s, 0, 0x1F);
    rs_add(p, s, '"', '"');
    rs_add(p, s, '\\', '\\');
}

/* s := s without them */
static void rs_drop_forbidden(rx *p, rset *s) {
    rset f = {0};
    rs_json_forbidden(p, &f);
    rs_complement(p, &f);
    rs_norm(s);
    rs_intersect(p, s, &f);
    free(f.r);
}

static void rs_class_escape(rx *p, rset *s, char e) {
    switch (e) {
    case 'd':
    case 'D': rs_add(p, s, '0', '9'); break;
    case 'w':
    case 'W':
        rs_add(p, s, '0', '9');
        rs_add(p, s, 'A', 'Z');
        rs_add(p, s, '_', '_');
        rs_add(p, s, 'a', 'z');
        break;
    default: /* s S */
        rs_add(p, s, '\t', '\r');
        rs_add(p, s, ' ', ' ');
        rs_add(p, s, 0xA0, 0xA0);
        break;
    }
}

/* ---- emitting sets ---- */

static int hexval(uint32_t c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    return c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
}

static void put_class(rx *p, sbuf *b, const rset *s) {
    sb_putc(p, b, '[');
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000; /* the dialect has no surrogates; UTF-8 neither */
        if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
        if (lo > hi) continue;
        sb_cp(p, b, lo, true);
        if (hi > lo + 1) sb_putc(p, b, '-');
        if (hi > lo) sb_cp(p, b, hi, true);
    }
    sb_putc(p, b, ']');
}

/* a JSON short escape (\" \\ \b \f \n \r \t) as an EBNF literal, NULL when c has none */
static const char *json_short_escape(uint32_t c) {
    switch (c) {
    case '"': return "\"\\\\\\\"\"";
    case '\\': return "\"\\\\\\\\\"";
    case 8: return "\"\\\\b\"";
    case 12: return "\"\\\\f\"";
    case '\n': return "\"\\\\n\"";
    case '\r': return "\"\\\\r\"";
    case '\t': return "\"\\\\t\"";
    default: return NULL;
    }
}

/* the JSON escapes of the forbidden characters in e (normalized), as alternatives " | "-separated into b; the
 * number of them in *n_alt, and whether the last is one literal (else two elements, "\\u001" [bB]) in *lit */
static void put_json_escapes(rx *p, sbuf *b, const rset *e, int *n_alt, bool *lit) {
    uint32_t lows[2] = {0, 0}; /* \u00XY: bit Y of lows[X] */
    for (int i = 0; i < e->n; i++) {
        for (uint32_t c = e->r[2 * i]; c <= e->r[2 * i + 1] && c < 0x80; c++) {
            const char *esc = json_short_escape(c);
            if (esc) {
                if ((*n_alt)++) sb_puts(p, b, " | ");
                sb_puts(p, b, esc);
                *lit = true;
            } else if (c < 0x20) {
                lows[c >> 4] |= 1u << (c & 15);
            }
        }
    }
    for (int x = 0; x < 2; x++) {
        if (!lows[x]) continue;
        if ((*n_alt)++) sb_puts(p, b, " | ");
        sb_puts(p, b, x ? "\"\\\\u001" : "\"\\\\u000");
        int single = -1, count = 0;
        for (int y = 0; y < 16; y++)
            if (lows[x] >> y & 1) single = y, count++;
        if (count == 1 && single < 10) {
            sb_putc(p, b, (char)('0' + single));
            sb_putc(p, b, '"');
            *lit = true;
            continue;
        }
        sb_puts(p, b, "\" [");
        for (int y = 0; y < 16; y++) {
            if (!(lows[x] >> y & 1)) continue;
            if (y < 10) sb_putc(p, b, (char)('0' + y));
            else sb_putc(p, b, (char)('a' + y - 10)), sb_putc(p, b, (char)('A' + y - 10));
        }
        sb_putc(p, b, ']');
        *lit = false;
    }
}

/* one character of set s (consumed); in json mode its forbidden members as their escapes */
static void emit_set(rx *p, rset *s, item *it, size_t off) {
    rs_norm(s);
    it->atomic = true;
    it->lit = false;
    if (!p->json) {
        put_class(p, &p->out, s);
        return;
    }
    rset f = {0}, ok = {0};
    rs_json_forbidden(p, &f);
    rs_norm(&f);
    for (int i = 0; i < s->n; i++) rs_add(p, &ok, s->r[2 * i], s->r[2 * i + 1]);
    rs_drop_forbidden(p, &ok);
    rs_intersect(p, s, &f); /* s := its forbidden members */
    free(f.r);
    if (s->n == 0) {
        put_class(p, &p->out, &ok);
        free(ok.r);
        return;
    }
    sbuf alt = {0};
    int n_alt = 0;
    bool lit = false;
    if (ok.n) {
        put_class(p, &alt, &ok);
        n_alt++;
    }
    put_json_escapes(p, &alt, s, &n_alt, &lit);
    free(ok.r);
    if (!p->failed) {
        if (n_alt == 1) {
            sb_putn(p, &p->out, alt.s, alt.n);
            it->atomic = it->lit = lit;
        } else if (p->depth + 1 > SO_RX_MAX_DEPTH) {
            fail(p, off, "groups nested deeper than %d", SO_RX_MAX_DEPTH);
        } else {
            sb_puts(p, &p->out, "( ");
            sb_putn(p, &p->out, alt.s, alt.n);
            sb_puts(p, &p->out, " )");
        }
    }
    free(alt.s);
}

/* one literal character */
static void emit_char(rx *p, uint32_t c, item *it, size_t off) {
    if (p->json && (c < 0x20 || c == '"' || c == '\\')) {
        rset s = {0};
        rs_add(p, &s, c, c);
        emit_set(p, &s, it, off);
        free(s.r);
        return;
    }
    sb_putc(p, &p->out, '"');
    sb_cp(p, &p->out, c, false);
    sb_putc(p, &p->out, '"');
    it->atomic = it->lit = true;
}

/* ---- the reader ---- */

static int64_t peek(const rx *p) { return p->i < p->n ? (int64_t)p->cp[p->i] : -1; }
static int64_t peek_at(const rx *p, size_t k) { return p->i + k < p->n ? (int64_t)p->cp[p->i + k] : -1; }
static size_t here(const rx *p) { return p->off[p->i < p->n ? p->i : p->n]; }

static bool is_alnum(int64_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* k hexadecimal digits at p->i (consumed), -1 when not there */
static int64_t hex_digits(rx *p, int k) {
    int64_t v = 0;
    for (int j = 0; j < k; j++) {
        const int64_t c = peek_at(p, (size_t)j);
        const int h = c < 0 ? -1 : hexval((uint32_t)c);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    p->i += (size_t)k;
    return v;
}

/* an escape at p->i (a backslash): 1 with a character in *c, 2 with a class escape's set added to *s (its
 * complement without JSON's forbidden characters in json mode for \D \W \S), 0 on failure */
static int escape(rx *p, bool in_class, uint32_t *c, rset *s) {
    const size_t off = here(p);
    const int64_t e = peek_at(p, 1);
    if (e < 0) {
        fail(p, off, "unterminated escape");
        return 0;
    }
    p->i += 2;
    switch (e) {
    case 'd':
    case 'w':
    case 's': rs_class_escape(p, s, (char)e); return p->failed ? 0 : 2;
    case 'D':
    case 'W':
    case 'S': {
        rset t = {0};
        rs_class_escape(p, &t, (char)(e - 'A' + 'a'));
        rs_complement(p, &t);
        if (p->json) rs_drop_forbidden(p, &t);
        for (int i = 0; i < t.n; i++) rs_add(p, s, t.r[2 * i], t.r[2 * i + 1]);
        free(t.r);
        return p->failed ? 0 : 2;
    }
    case 'n': *c = '\n'; return 1;
    case 'r': *c = '\r'; return 1;
    case 't': *c = '\t'; return 1;
    case 'f': *c = '\f'; return 1;
    case 'v': *c = '\v'; return 1;
    case 'a': *c = 7; return 1;
    case 'e': *c = 27; return 1;
    case 'b':
        if (in_class) {
            *c = 8;
            return 1;
        }
        fail(p, off, "word boundary \\b is not supported");
        return 0;
    case 'B': fail(p, off, "word boundary \\B is not supported"); return 0;
    case '0': {
        const int64_t d = peek(p);
        if (d >= '0' && d <= '9') {
            fail(p, off, "octal escape is not supported");
            return 0;
        }
        *c = 0;
        return 1;
    }
    case 'x': {
        const int64_t v = hex_digits(p, 2);
        if (v < 0) {
            fail(p, off, "invalid \\x escape: two hexadecimal digits expected");
            return 0;
        }
        *c = (uint32_t)v;
        return 1;
    }
    case 'U': {
        const int64_t v = hex_digits(p, 8);
        if (v < 0 || v > SO_RX_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) {
            fail(p, off, v < 0 ? "invalid \\U escape: eight hexadecimal digits expected"
                               : "invalid code point in \\U escape");
            return 0;
        }
        *c = (uint32_t)v;
        return 1;
    }
    case 'u': {
        int64_t v;
        if (peek(p) == '{') {
            p->i++;
            v = 0;
            int k = 0;
            for (int h; k <= 6 && peek(p) >= 0 && (h = hexval((uint32_t)peek(p))) >= 0; k++, p->i++) v = v * 16 + h;
            if (k == 0 || k > 6 || peek(p) != '}' || v > SO_RX_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) {
                fail(p, off, "invalid \\u{...} escape");
                return 0;
            }
            p->i++;
        } else {
            v = hex_digits(p, 4);
            if (v < 0) {
                fail(p, off, "invalid \\u escape: four hexadecimal digits expected");
                return 0;
            }
            if (v >= 0xD800 && v <= 0xDBFF && peek(p) == '\\' && peek_at(p, 1) == 'u') { /* a UTF-16 pair */
                const size_t save = p->i;
                p->i += 2;
                const int64_t lo = hex_digits(p, 4);
                if (lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                else p->i = save;
            }
            if (v >= 0xD800 && v <= 0xDFFF) {
                fail(p, off, "lone surrogate \\u%04X", (unsigned)v);
                return 0;
            }
        }
        *c = (uint32_t)v;
        return 1;
    }
    case 'c': {
        const int64_t l = peek(p);
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) {
            fail(p, off, "invalid control escape \\c");
            return 0;
        }
        p->i++;
        *c = (uint32_t)l % 32;
        return 1;
    }
    case 'k': fail(p, off, "backreference \\k is not supported"); return 0;
    case 'p':
    case 'P': fail(p, off, "Unicode property escape \\%c is not supported", (char)e); return 0;
    case 'A':
    case 'Z':
    case 'z':
    case 'G': fail(p, off, "anchor \\%c is not supported", (char)e); return 0;
    default:
        if (e >= '1' && e <= '9') {
            fail(p, off, "backreference \\%c is not supported", (char)e);
            return 0;
        }
        if (is_alnum(e)) {
            fail(p, off, "unknown escape \\%c", (char)e);
            return 0;
        }
        *c = (uint32_t)e; /* an escaped punctuation or non-ASCII character is itself */
        return 1;
    }
}

/* a class at p->i ('[') into s; *negated for [^ */
static void read_class(rx *p, rset *s, bool *negated) {
    const size_t open = here(p);
    p->i++;
    *negated = false;
    if (peek(p) == '^') {
        *negated = true;
        p->i++;
    }
    if (peek(p) == ']') {
        if (*negated) { /* [^]: any character (ECMAScript; xgrammar's [^] reads the same) */
            p->i++;
            return;
        }
        fail(p, open, "empty character class");
        return;
    }
    while (!p->failed) {
        const int64_t c = peek(p);
        if (c < 0) {
            fail(p, open, "unterminated character class");
            return;
        }
        if (c == ']') {
            p->i++;
            return;
        }
        const size_t lo_off = here(p);
        uint32_t lo;
        if (c == '\\') {
            const int k = escape(p, true, &lo, s);
            if (k == 0) return;
            if (k == 2) continue; /* a class escape: a `-` after it is literal */
        } else {
            lo = (uint32_t)c;
            p->i++;
        }
        if (peek(p) != '-' || peek_at(p, 1) == ']' || peek_at(p, 1) < 0) {
            rs_add(p, s, lo, lo);
            continue;
        }
        p->i++; /* - */
        uint32_t hi;
        if (peek(p) == '\\') {
            rset t = {0};
            const int k = escape(p, true, &hi, &t);
            free(t.r);
            if (k == 0) return;
            if (k == 2) {
                fail(p, lo_off, "invalid class range: a class escape as its bound");
                return;
            }
        } else {
            hi = (uint32_t)peek(p);
            p->i++;
        }
        if (hi < lo) {
            fail(p, lo_off, "invalid class range: out of order");
            return;
        }
        rs_add(p, s, lo, hi);
    }
}

static void parse_alt(rx *p, bool at_start, item *it);

/* `(?` modifiers at p->i (just after the `(`) */
static void group_modifier(rx *p, size_t open) {
    if (peek(p) != '?') return;
    p->i++;
    const int64_t c = peek(p), d = peek_at(p, 1);
    if (c == ':') {
        p->i++;
        return;
    }
    if (c == '=' || c == '!') {
        fail(p, open, "lookahead is not supported");
        return;
    }
    if (c == '<' && (d == '=' || d == '!')) {
        fail(p, open, "lookbehind is not supported");
        return;
    }
    if (c == 'P' && d == '=') {
        fail(p, open, "backreference (?P=...) is not supported");
        return;
    }
    if (c == '<' || (c == 'P' && d == '<')) {
        p->i += c == '<' ? 1 : 2;
        size_t k = 0;
        for (int64_t x = peek(p); x == '_' || is_alnum(x); x = peek(p), k++) {
            if (k == 0 && x >= '0' && x <= '9') break;
            p->i++;
        }
        if (k == 0 || peek(p) != '>') {
            fail(p, open, "invalid group name");
            return;
        }
        p->i++;
        return;
    }
    if (c == '>') fail(p, open, "atomic group is not supported");
    else if (c < 0) fail(p, open, "unterminated group");
    else if (c == '-' || (c >= 'a' && c <= 'z')) fail(p, open, "inline flags are not supported");
    else fail(p, open, "unsupported group modifier");
}

static void parse_atom(rx *p, bool at_start, item *it) {
    const size_t off = here(p);
    const int64_t c = peek(p);
    memset(it, 0, sizeof *it);
    if (c == '(') {
        if (p->depth + 1 > SO_RX_MAX_DEPTH) {
            fail(p, off, "groups nested deeper than %d", SO_RX_MAX_DEPTH);
            return;
        }
        p->i++;
        group_modifier(p, off);
        if (p->failed) return;
        p->depth++;
        sb_puts(p, &p->out, "( ");
        parse_alt(p, at_start, it);
        p->depth--;
        if (p->failed) return;
        if (peek(p) != ')') {
            fail(p, off, "unclosed '('");
            return;
        }
        p->i++;
        sb_puts(p, &p->out, " )");
        it->atomic = true;
        it->lit = false;
        return;
    }
    if (c == '[') {
        rset s = {0};
        bool negated;
        read_class(p, &s, &negated);
        if (!p->failed && negated) {
            rs_complement(p, &s);
            if (p->json) rs_drop_forbidden(p, &s);
        }
        if (!p->failed) emit_set(p, &s, it, off);
        free(s.r);
        return;
    }
    if (c == '.') {
        p->i++;
        rset s = {0};
        rs_add(p, &s, 0, SO_RX_MAX_CP);
        if (p->json) rs_drop_forbidden(p, &s);
        if (!p->failed) emit_set(p, &s, it, off);
        free(s.r);
        return;
    }
    if (c == '\\') {
        rset s = {0};
        uint32_t ch;
        const int k = escape(p, false, &ch, &s);
        if (k == 1) emit_char(p, ch, it, off);
        else if (k == 2) emit_set(p, &s, it, off);
        free(s.r);
        return;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
        fail(p, off, "nothing to repeat");
        return;
    }
    p->i++;
    emit_char(p, (uint32_t)c, it, off);
}

/* a quantifier at p->i into t (NUL-terminated), its upper bound in *max (-1: none), false when there is none;
 * p->failed on a bad one */
static bool quantifier(rx *p, char *t, size_t tn, long *max) {
    const int64_t c = peek(p);
    const size_t off = here(p);
    if (c == '*' || c == '+' || c == '?') {
        t[0] = (char)c, t[1] = 0;
        *max = c == '?' ? 1 : -1;
        p->i++;
    } else if (c == '{') {
        p->i++;
        long v[2] = {-1, -1};
        bool comma = false;
        for (int k = 0; k < 2; k++) {
            long x = 0;
            int digits = 0;
            for (int64_t d = peek(p); d >= '0' && d <= '9'; d = peek(p), digits++) {
                if (x <= SO_RX_MAX_COUNT) x = x * 10 + (long)(d - '0');
                p->i++;
            }
            if (digits && x > SO_RX_MAX_COUNT) {
                fail(p, off, "repeat count over %d", SO_RX_MAX_COUNT);
                return false;
            }
            v[k] = digits ? x : -1;
            if (k == 0 && (!digits || (peek(p) != ',' && peek(p) != '}'))) {
                fail(p, off, "invalid repetition count");
                return false;
            }
            if (k == 0 && peek(p) == '}') break;
            if (k == 0) {
                comma = true;
                p->i++;
            }
        }
        if (peek(p) != '}') {
            fail(p, off, "invalid repetition count");
            return false;
        }
        p->i++;
        if (comma && v[1] >= 0 && v[1] < v[0]) {
            fail(p, off, "repetition range out of order");
            return false;
        }
        *max = comma ? v[1] : v[0];
        if (!comma) snprintf(t, tn, "{%ld}", v[0]);
        else if (v[1] < 0) snprintf(t, tn, "{%ld,}", v[0]);
        else snprintf(t, tn, "{%ld,%ld}", v[0], v[1]);
    } else {
        return false;
    }
    if (peek(p) == '?') p->i++; /* lazy: the same language */
    const int64_t n = peek(p);
    if (n == '*' || n == '+' || n == '?' || n == '{') {
        fail(p, here(p), n == '+' ? "possessive quantifier is not supported (two consecutive quantifiers)"
                                  : "two consecutive quantifiers");
        return false;
    }
    return true;
}

/* a sequence up to `|`, `)` or the end */
static void parse_seq(rx *p, bool at_start, item *acc) {
    bool start = at_start, first = true, dollar = false;
    size_t dollar_off = 0;
    p->lit_end = 0;
    while (!p->failed) {
        const int64_t c = peek(p);
        if (c < 0 || c == '|' || c == ')') break;
        const size_t off = here(p);
        if (c == '^' || c == '$') {
            p->i++;
            if (c == '^' && !start) {
                fail(p, off, "'^' not at the start");
                return;
            }
            if (c == '^') acc->caret = true;
            else if (!dollar) dollar = true, dollar_off = off;
            const int64_t n = peek(p);
            if (n == '*' || n == '+' || n == '?' || n == '{') {
                fail(p, here(p), "nothing to repeat");
                return;
            }
            continue;
        }
        if (dollar) {
            fail(p, dollar_off, "'$' not at the end");
            return;
        }
        if (!first) sb_putc(p, &p->out, ' ');
        first = false;
        const size_t mark = p->out.n;
        item it;
        parse_atom(p, start, &it);
        if (p->failed) return;
        start = false;
        if (it.caret) acc->caret = true;
        if (it.dollar) dollar = true, dollar_off = it.dollar_off;
        char q[48];
        long max = -1;
        if (quantifier(p, q, sizeof q, &max)) {
            if ((it.caret || it.dollar) && (max < 0 || max > 1)) { /* (^a)? is fine, (^a)* is not */
                fail(p, it.dollar ? it.dollar_off : off, "anchor inside a repeated group");
                return;
            }
            if (!it.atomic) {
                if (p->depth + 1 > SO_RX_MAX_DEPTH) {
                    fail(p, off, "groups nested deeper than %d", SO_RX_MAX_DEPTH);
                    return;
                }
                sb_insert(p, &p->out, mark, "( ", 2);
                sb_puts(p, &p->out, " )");
            }
            sb_puts(p, &p->out, q);
            p->lit_end = 0;
        } else if (p->failed) {
            return;
        } else if (it.lit) {
            if (p->lit_end && p->lit_end + 1 == mark) { /* "ab" rather than "a" "b" */
                memmove(p->out.s + p->lit_end - 1, p->out.s + p->lit_end + 2, p->out.n - p->lit_end - 1);
                p->out.n -= 3;
            }
            p->lit_end = p->out.n;
        } else {
            p->lit_end = 0;
        }
    }
    if (p->failed) return;
    if (first) sb_puts(p, &p->out, "\"\"");
    if (dollar) {
        acc->dollar = true;
        acc->dollar_off = dollar_off;
    }
}

static void parse_alt(rx *p, bool at_start, item *it) {
    for (;;) {
        parse_seq(p, at_start, it);
        if (p->failed || peek(p) != '|') return;
        p->i++;
        sb_puts(p, &p->out, " | ");
    }
}

/* re as code points into p->cp / p->off */
static void decode(rx *p) {
    p->cp = malloc((p->len + 1) * sizeof *p->cp);
    p->off = malloc((p->len + 1) * sizeof *p->off);
    if (!p->cp || !p->off) {
        oom(p);
        return;
    }
    const unsigned char *s = (const unsigned char *)p->src;
    size_t i = 0;
    while (i < p->len) {
        const unsigned c = s[i];
        if (c == 0) {
            fail(p, i, "NUL byte");
            return;
        }
        size_t k = 0; /* the sequence's length by its lead byte, 0 for none */
        if (c < 0x80) k = 1;
        else if (c >= 0xC2 && c <= 0xDF) k = 2;
        else if (c >= 0xE0 && c <= 0xEF) k = 3;
        else if (c >= 0xF0 && c <= 0xF4) k = 4;
        bool ok = k > 0 && i + k <= p->len;
        for (size_t j = 1; ok && j < k; j++) ok = (s[i + j] & 0xC0) == 0x80;
        uint32_t cp = 0;
        if (ok) {
            cp = k == 1 ? c : k == 2 ? (c & 0x1F) : k == 3 ? (c & 0x0F) : (c & 0x07);
            for (size_t j = 1; j < k; j++) cp = cp << 6 | (s[i + j] & 0x3F);
            ok = !(k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) &&
                 !(k == 4 && (cp < 0x10000 || cp > SO_RX_MAX_CP));
        }
        if (!ok) {
            fail(p, i, "invalid UTF-8");
            return;
        }
        p->cp[p->n] = cp;
        p->off[p->n] = i;
        p->n++;
        i += k;
    }
    p->off[p->n] = p->len;
}

vllm_status so_regex_to_ebnf(const char *re, size_t len, bool json_string, char **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "regex: no output");
    *out = NULL;
    if (!re && len) return vt_error(VLLM_ERR_INVALID_ARG, "regex: NULL text");
    if (len > SO_RX_MAX_LEN)
        return vt_error(VLLM_ERR_INVALID_ARG, "regex: longer than %d bytes (%zu) at offset %d", SO_RX_MAX_LEN, len,
                        SO_RX_MAX_LEN);
    rx p = {.src = re ? re : "", .len = len, .json = json_string, .st = VLLM_OK};
    decode(&p);
    if (!p.failed) {
        item it = {0};
        parse_alt(&p, true, &it);
        if (!p.failed && p.i < p.n) fail(&p, here(&p), "unmatched ')'"); /* parse_alt stops only at ')' or the end */
    }
    if (!p.failed && !p.out.s) sb_puts(&p, &p.out, "\"\"");
    free(p.cp);
    free(p.off);
    if (p.failed) {
        free(p.out.s);
        return p.st;
    }
    *out = p.out.s;
    return VLLM_OK;
}
