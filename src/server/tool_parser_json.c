/*
 * tool_parser_json.c: Python-compatible JSON for the tool parsers: json.loads / raw_decode, json.dumps (Python's
 * float repr, any-size ints, ensure_ascii), int() / float() of a str, a subset of ast.literal_eval, and an
 * incremental re-serialiser that writes json.dumps' text while the JSON is still arriving.
 *
 * Facts followed (CPython 3.12): Modules/_json.c (the C scanner json.loads uses: strict strings, no control
 * characters, \uXXXX surrogate pairs joined, NaN / Infinity / -Infinity accepted, numbers by
 * _match_number_unicode: greedy with back-off on a bare '.' or 'e'), Lib/json/encoder.py (ESCAPE /
 * ESCAPE_ASCII, separators ", " and ": ", floats by float.__repr__, allow_nan), Objects/floatobject.c +
 * Python/pystrtod.c (repr: shortest round-trip digits, exponent form when decpt <= -4 or > 16, two exponent
 * digits at least), Objects/longobject.c (int(str): whitespace, sign, single underscores between digits),
 * Lib/ast.py literal_eval (constants, tuples, lists, dicts, sets, unary +/- on numbers).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "server/tool_parser_internal.h"

#define PJ_MAX_DEPTH 1000 /* Python's default recursion limit: deeper raises RecursionError */
#define LE_MAX_DEPTH 200  /* the tokenizer's MAXLEVEL: "too many nested parentheses" */

/* ------------------------------------------------------------------ */
/* Values                                                              */
/* ------------------------------------------------------------------ */

pj *pj_new(pj_type t) {
    pj *v = calloc(1, sizeof *v);
    if (v) v->t = t;
    return v;
}

void pj_free(pj *v) {
    if (!v) return;
    for (size_t i = 0; i < v->len; i++) {
        pj_free(v->v[i]);
        if (v->k) free(v->k[i]);
    }
    free(v->v);
    free(v->k);
    free(v->kn);
    free(v->hidx);
    free(v->s);
    free(v);
}

pj *pj_str(const char *s, size_t n) {
    pj *v = pj_new(PJ_STR);
    if (!v) return NULL;
    v->s = tp_strndup(s, n);
    if (!v->s) {
        free(v);
        return NULL;
    }
    v->n = n;
    return v;
}

static pj *pj_take_buf(pj_type t, tp_buf *b) {
    pj *v = b->oom ? NULL : pj_new(t);
    if (!v) {
        tp_buf_free(b);
        return NULL;
    }
    v->s = b->data ? b->data : tp_strndup("", 0);
    v->n = b->len;
    *b = (tp_buf){0};
    if (!v->s) {
        free(v);
        return NULL;
    }
    return v;
}

static bool pj_grow(pj *a) {
    if (a->len < a->cap) return true;
    size_t nc = a->cap ? a->cap * 2 : 4;
    pj **nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return false;
    a->v = nv;
    if (a->t == PJ_OBJ) {
        char **nk = realloc(a->k, nc * sizeof *nk);
        if (!nk) return false;
        a->k = nk;
        size_t *nkn = realloc(a->kn, nc * sizeof *nkn);
        if (!nkn) return false;
        a->kn = nkn;
    }
    a->cap = nc;
    return true;
}

bool pj_arr_push(pj *a, pj *item) {
    if (!item) return false;
    if (!pj_grow(a)) {
        pj_free(item);
        return false;
    }
    a->v[a->len++] = item;
    return true;
}

static uint32_t key_hash(const char *k, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}

static void hidx_insert(pj *o, size_t j) {
    size_t m = o->hcap - 1;
    for (size_t i = key_hash(o->k[j], o->kn[j]) & m;; i = (i + 1) & m)
        if (!o->hidx[i]) {
            o->hidx[i] = (uint32_t)(j + 1);
            return;
        }
}

static long obj_find(const pj *o, const char *k, size_t n) {
    if (o->hidx) {
        size_t m = o->hcap - 1;
        for (size_t i = key_hash(k, n) & m;; i = (i + 1) & m) {
            uint32_t e = o->hidx[i];
            if (!e) return -1;
            size_t j = e - 1;
            if (o->kn[j] == n && memcmp(o->k[j], k, n) == 0) return (long)j;
        }
    }
    for (size_t j = 0; j < o->len; j++)
        if (o->kn[j] == n && memcmp(o->k[j], k, n) == 0) return (long)j;
    return -1;
}

/* Keeps lookups O(1) past a few keys (an object with many keys stays linear to build). */
static void obj_reindex(pj *o) {
    if (o->len < 8 || o->len > UINT32_MAX / 4) return;
    if (o->hidx && o->len * 2 <= o->hcap) {
        hidx_insert(o, o->len - 1);
        return;
    }
    size_t hc = 16;
    while (hc < o->len * 4) hc *= 2;
    uint32_t *h = calloc(hc, sizeof *h);
    free(o->hidx);
    o->hidx = h;
    o->hcap = h ? hc : 0;
    if (h)
        for (size_t j = 0; j < o->len; j++) hidx_insert(o, j);
}

bool pj_obj_set(pj *o, const char *key, size_t kn, pj *val) {
    if (!val) return false;
    long j = obj_find(o, key, kn);
    if (j >= 0) {
        pj_free(o->v[j]);
        o->v[j] = val;
        return true;
    }
    char *kc = tp_strndup(key, kn);
    if (!kc || !pj_grow(o)) {
        free(kc);
        pj_free(val);
        return false;
    }
    o->k[o->len] = kc;
    o->kn[o->len] = kn;
    o->v[o->len] = val;
    o->len++;
    obj_reindex(o);
    return true;
}

pj *pj_obj_get(const pj *o, const char *key) {
    if (!o || o->t != PJ_OBJ) return NULL;
    long j = obj_find(o, key, strlen(key));
    return j >= 0 ? o->v[j] : NULL;
}

/* ------------------------------------------------------------------ */
/* UTF-8 and escapes                                                   */
/* ------------------------------------------------------------------ */

/* Code point -> UTF-8 (surrogates as their 3-byte form); returns the length. */
static int utf8_put(char out[4], uint32_t cp) { return (int)utf8_encode(cp, out); }

/* An incremental UTF-8 decoder that accepts the 3-byte surrogate forms this
 * module stores lone surrogates as; an invalid byte yields U+FFFD (the
 * maximal-subpart replacement of Python's errors="replace"). */
typedef struct u8d {
    uint32_t cp;
    int need;
    unsigned char lo, hi;
} u8d;

static int u8_lead(u8d *d, unsigned char c, uint32_t *out) {
    d->lo = 0x80, d->hi = 0xBF;
    if (c < 0x80) {
        out[0] = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) d->need = 1, d->cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        d->need = 2, d->cp = c & 0x0F;
        if (c == 0xE0) d->lo = 0xA0;
    } else if (c >= 0xF0 && c <= 0xF4) {
        d->need = 3, d->cp = c & 0x07;
        if (c == 0xF0) d->lo = 0x90;
        if (c == 0xF4) d->hi = 0x8F;
    } else {
        out[0] = 0xFFFD;
        return 1;
    }
    return 0;
}

/* Feeds one byte; writes 0-2 code points to out. */
static int u8_feed(u8d *d, unsigned char c, uint32_t out[2]) {
    if (!d->need) return u8_lead(d, c, out);
    if (c >= d->lo && c <= d->hi) {
        d->cp = (d->cp << 6) | (c & 0x3F);
        d->lo = 0x80, d->hi = 0xBF;
        if (--d->need == 0) {
            out[0] = d->cp;
            return 1;
        }
        return 0;
    }
    d->need = 0;
    out[0] = 0xFFFD;
    return 1 + u8_lead(d, c, out + 1);
}

/* The end of a string: an unfinished sequence is one U+FFFD. */
static int u8_end(u8d *d, uint32_t *out) {
    if (!d->need) return 0;
    d->need = 0;
    out[0] = 0xFFFD;
    return 1;
}

static const char HEX[] = "0123456789abcdef";

/* json.dumps' text for one code point (ESCAPE_DCT, ensure_ascii's \uXXXX and
 * surrogate pairs; lone surrogates always escaped); returns the length. */
static int esc_cp(char out[16], uint32_t cp, bool ascii) {
    switch (cp) {
    case '"': memcpy(out, "\\\"", 2); return 2;
    case '\\': memcpy(out, "\\\\", 2); return 2;
    case '\n': memcpy(out, "\\n", 2); return 2;
    case '\r': memcpy(out, "\\r", 2); return 2;
    case '\t': memcpy(out, "\\t", 2); return 2;
    case '\b': memcpy(out, "\\b", 2); return 2;
    case '\f': memcpy(out, "\\f", 2); return 2;
    default: break;
    }
    bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    if (cp < 0x20 || surrogate || (ascii && cp >= 0x7F && cp < 0x10000)) {
        out[0] = '\\', out[1] = 'u';
        for (int i = 0; i < 4; i++) out[2 + i] = HEX[(cp >> (12 - 4 * i)) & 15];
        return 6;
    }
    if (ascii && cp >= 0x10000) {
        uint32_t v = cp - 0x10000, hi = 0xD800 | (v >> 10), lo = 0xDC00 | (v & 0x3FF);
        int k = esc_cp(out, hi, true);
        return k + esc_cp(out + k, lo, true);
    }
    return utf8_put(out, cp);
}

void pj_dump_str(tp_buf *b, const char *s, size_t n, bool ascii) {
    tp_putc(b, '"');
    u8d d = {0};
    size_t i = 0;
    char e[16];
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\' && !d.need) {
            size_t j = i + 1;
            while (j < n && (unsigned char)s[j] >= 0x20 && (unsigned char)s[j] < 0x7F && s[j] != '"' && s[j] != '\\') j++;
            tp_put(b, s + i, j - i);
            i = j;
            continue;
        }
        if (!ascii && c >= 0x80 && !d.need) {
            /* raw bytes pass, except a stored lone surrogate (ED A0..BF xx) */
            if (c == 0xED && i + 2 < n && (unsigned char)s[i + 1] >= 0xA0 &&
                (unsigned char)s[i + 1] <= 0xBF && ((unsigned char)s[i + 2] & 0xC0) == 0x80) {
                uint32_t cp = 0xD000 | (((unsigned char)s[i + 1] & 0x3F) << 6) | ((unsigned char)s[i + 2] & 0x3F);
                tp_put(b, e, (size_t)esc_cp(e, cp, false));
                i += 3;
                continue;
            }
            tp_putc(b, (char)c);
            i++;
            continue;
        }
        uint32_t cps[2];
        int k = u8_feed(&d, c, cps);
        for (int j = 0; j < k; j++) tp_put(b, e, (size_t)esc_cp(e, cps[j], ascii));
        i++;
    }
    uint32_t cp;
    if (u8_end(&d, &cp)) tp_put(b, e, (size_t)esc_cp(e, cp, ascii));
    tp_putc(b, '"');
}

/* ------------------------------------------------------------------ */
/* Numbers                                                             */
/* ------------------------------------------------------------------ */

void pj_float_repr(tp_buf *b, double d) {
    if (isnan(d)) {
        tp_puts(b, "NaN");
        return;
    }
    if (isinf(d)) {
        tp_puts(b, d < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (d == 0) {
        tp_puts(b, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    /* the shortest digits that read back to d: the correctly rounded ones of
       the first length that round-trips (what repr's dtoa mode 0 yields) */
    char tmp[48];
    for (int p = 0; p <= 16; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p, d);
        if (strtod(tmp, NULL) == d) break;
    }
    const char *q = tmp;
    bool neg = *q == '-';
    if (neg) q++;
    char digs[24];
    int nd = 0;
    while (*q && *q != 'e' && nd < 20) {
        if (*q != '.') digs[nd++] = *q;
        q++;
    }
    int e10 = *q == 'e' ? atoi(q + 1) : 0;
    while (nd > 1 && digs[nd - 1] == '0') nd--;
    int decpt = e10 + 1;
    if (neg) tp_putc(b, '-');
    if (decpt <= -4 || decpt > 16) {
        tp_putc(b, digs[0]);
        if (nd > 1) {
            tp_putc(b, '.');
            tp_put(b, digs + 1, (size_t)nd - 1);
        }
        char eb[16];
        snprintf(eb, sizeof eb, "e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
        tp_puts(b, eb);
    } else if (decpt <= 0) {
        tp_puts(b, "0.");
        for (int i = 0; i < -decpt; i++) tp_putc(b, '0');
        tp_put(b, digs, (size_t)nd);
    } else if (decpt >= nd) {
        tp_put(b, digs, (size_t)nd);
        for (int i = nd; i < decpt; i++) tp_putc(b, '0');
        tp_puts(b, ".0");
    } else {
        tp_put(b, digs, (size_t)decpt);
        tp_putc(b, '.');
        tp_put(b, digs + decpt, (size_t)(nd - decpt));
    }
}

static bool isdig(char c) { return c >= '0' && c <= '9'; }

/* _match_number_unicode: the length of the JSON number at t (0: none) and
 * whether it is a float (a fraction or an exponent). */
static size_t json_number_len(const char *t, size_t n, bool *is_float) {
    size_t i = 0;
    *is_float = false;
    if (i < n && t[i] == '-') i++;
    if (i >= n) return 0;
    if (t[i] == '0') i++;
    else if (t[i] >= '1' && t[i] <= '9')
        while (i < n && isdig(t[i])) i++;
    else
        return 0;
    if (i + 1 < n && t[i] == '.' && isdig(t[i + 1])) {
        i += 2;
        while (i < n && isdig(t[i])) i++;
        *is_float = true;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (t[j] == '+' || t[j] == '-')) j++;
        if (j < n && isdig(t[j])) {
            while (j < n && isdig(t[j])) j++;
            i = j;
            *is_float = true;
        }
    }
    return i;
}

/* A JSON number's text -> its value (int digits, "-0" -> "0"; float by strtod). */
static pj *jnum_value(const char *t, size_t n, bool is_float) {
    if (is_float) {
        char *c = tp_strndup(t, n);
        if (!c) return NULL;
        pj *v = pj_new(PJ_FLOAT);
        if (v) v->d = strtod(c, NULL);
        free(c);
        return v;
    }
    if (n == 2 && t[0] == '-' && t[1] == '0') t++, n--;
    pj *v = pj_new(PJ_INT);
    if (!v) return NULL;
    v->s = tp_strndup(t, n);
    v->n = n;
    if (!v->s) {
        free(v);
        return NULL;
    }
    return v;
}

static void dump_json_number(tp_buf *b, const char *t, size_t n, bool is_float) {
    if (is_float) {
        char *c = tp_strndup(t, n);
        if (!c) {
            b->oom = true;
            return;
        }
        pj_float_repr(b, strtod(c, NULL));
        free(c);
    } else if (n == 2 && t[0] == '-' && t[1] == '0') {
        tp_putc(b, '0');
    } else {
        tp_put(b, t, n);
    }
}

/* ------------------------------------------------------------------ */
/* json.loads                                                          */
/* ------------------------------------------------------------------ */

typedef struct jr {
    const char *s;
    size_t n, i;
    int depth;
    bool *oom;
} jr;

static bool jws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static void jr_ws(jr *r) {
    while (r->i < r->n && jws(r->s[r->i])) r->i++;
}
static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static bool hex4(const char *s, size_t n, size_t i, uint32_t *u) {
    if (i + 4 > n) return false;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval((unsigned char)s[i + (size_t)k]);
        if (h < 0) return false;
        v = v * 16 + (uint32_t)h;
    }
    *u = v;
    return true;
}

static void put_cp(tp_buf *b, uint32_t cp) {
    char u[4];
    tp_put(b, u, (size_t)utf8_put(u, cp));
}

/* scanstring_unicode (strict): r->s[r->i] is the opening quote. */
static bool jr_string(jr *r, tp_buf *out) {
    const char *s = r->s;
    size_t i = r->i + 1;
    for (;;) {
        if (i >= r->n) return false;
        unsigned char c = (unsigned char)s[i];
        if (c == '"') {
            r->i = i + 1;
            return true;
        }
        if (c < 0x20) return false;
        if (c != '\\') {
            size_t j = i + 1;
            while (j < r->n && s[j] != '"' && s[j] != '\\' && (unsigned char)s[j] >= 0x20) j++;
            tp_put(out, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 >= r->n) return false;
        c = (unsigned char)s[i + 1];
        i += 2;
        switch (c) {
        case '"': tp_putc(out, '"'); break;
        case '\\': tp_putc(out, '\\'); break;
        case '/': tp_putc(out, '/'); break;
        case 'b': tp_putc(out, '\b'); break;
        case 'f': tp_putc(out, '\f'); break;
        case 'n': tp_putc(out, '\n'); break;
        case 'r': tp_putc(out, '\r'); break;
        case 't': tp_putc(out, '\t'); break;
        case 'u': {
            uint32_t u, u2;
            if (!hex4(s, r->n, i, &u)) return false;
            i += 4;
            if (u >= 0xD800 && u <= 0xDBFF && i + 6 < r->n && s[i] == '\\' && s[i + 1] == 'u') {
                if (!hex4(s, r->n, i + 2, &u2)) return false;
                if (u2 >= 0xDC00 && u2 <= 0xDFFF) {
                    u = 0x10000 + ((u - 0xD800) << 10) + (u2 - 0xDC00);
                    i += 6;
                }
            }
            put_cp(out, u);
            break;
        }
        default: return false;
        }
    }
}

static pj *jr_value(jr *r);

static pj *jr_object(jr *r) {
    if (++r->depth > PJ_MAX_DEPTH) return NULL;
    r->i++;
    pj *o = pj_new(PJ_OBJ);
    if (!o) goto oom;
    jr_ws(r);
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
        r->depth--;
        return o;
    }
    for (;;) {
        if (r->i >= r->n || r->s[r->i] != '"') goto fail;
        tp_buf k = {0};
        if (!jr_string(r, &k)) {
            tp_buf_free(&k);
            goto fail;
        }
        if (k.oom) {
            tp_buf_free(&k);
            goto oom;
        }
        jr_ws(r);
        if (r->i >= r->n || r->s[r->i] != ':') {
            tp_buf_free(&k);
            goto fail;
        }
        r->i++;
        jr_ws(r);
        pj *val = jr_value(r);
        if (!val) {
            tp_buf_free(&k);
            goto fail;
        }
        bool ok = pj_obj_set(o, k.data ? k.data : "", k.len, val);
        tp_buf_free(&k);
        if (!ok) goto oom;
        jr_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            jr_ws(r);
            continue;
        }
        if (r->i < r->n && r->s[r->i] == '}') {
            r->i++;
            break;
        }
        goto fail;
    }
    r->depth--;
    return o;
oom:
    *r->oom = true;
fail:
    pj_free(o);
    return NULL;
}

static pj *jr_array(jr *r) {
    if (++r->depth > PJ_MAX_DEPTH) return NULL;
    r->i++;
    pj *a = pj_new(PJ_ARR);
    if (!a) goto oom;
    jr_ws(r);
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
        r->depth--;
        return a;
    }
    for (;;) {
        pj *val = jr_value(r);
        if (!val) goto fail;
        if (!pj_arr_push(a, val)) goto oom;
        jr_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            jr_ws(r);
            continue;
        }
        if (r->i < r->n && r->s[r->i] == ']') {
            r->i++;
            break;
        }
        goto fail;
    }
    r->depth--;
    return a;
oom:
    *r->oom = true;
fail:
    pj_free(a);
    return NULL;
}

static bool jr_word(jr *r, const char *w) {
    size_t n = strlen(w);
    if (r->i + n > r->n || memcmp(r->s + r->i, w, n) != 0) return false;
    r->i += n;
    return true;
}

static pj *jr_float(double d, bool *oom) {
    pj *v = pj_new(PJ_FLOAT);
    if (!v) *oom = true;
    else v->d = d;
    return v;
}

static pj *jr_value(jr *r) {
    if (r->i >= r->n) return NULL;
    pj *v = NULL;
    switch (r->s[r->i]) {
    case '"': {
        tp_buf b = {0};
        if (!jr_string(r, &b)) {
            tp_buf_free(&b);
            return NULL;
        }
        v = pj_take_buf(PJ_STR, &b);
        if (!v) *r->oom = true;
        return v;
    }
    case '{': return jr_object(r);
    case '[': return jr_array(r);
    case 'n':
        if (!jr_word(r, "null")) return NULL;
        v = pj_new(PJ_NULL);
        break;
    case 't':
        if (!jr_word(r, "true")) return NULL;
        v = pj_new(PJ_TRUE);
        break;
    case 'f':
        if (!jr_word(r, "false")) return NULL;
        v = pj_new(PJ_FALSE);
        break;
    case 'N': return jr_word(r, "NaN") ? jr_float(NAN, r->oom) : NULL;
    case 'I': return jr_word(r, "Infinity") ? jr_float(INFINITY, r->oom) : NULL;
    case '-':
        if (jr_word(r, "-Infinity")) return jr_float(-INFINITY, r->oom);
        /* fall through */
    default: {
        bool fl;
        size_t k = json_number_len(r->s + r->i, r->n - r->i, &fl);
        if (!k) return NULL;
        v = jnum_value(r->s + r->i, k, fl);
        r->i += k;
        break;
    }
    }
    if (!v) *r->oom = true;
    return v;
}

pj *pj_loads(const char *s, size_t n, bool *oom) {
    jr r = {s, n, 0, 0, oom};
    jr_ws(&r);
    pj *v = jr_value(&r);
    if (!v) return NULL;
    jr_ws(&r);
    if (r.i != n) {
        pj_free(v);
        return NULL;
    }
    return v;
}

pj *pj_raw_decode(const char *s, size_t n, size_t *end, bool *oom) {
    jr r = {s, n, 0, 0, oom};
    pj *v = jr_value(&r);
    if (v) *end = r.i;
    return v;
}

/* ------------------------------------------------------------------ */
/* json.dumps                                                          */
/* ------------------------------------------------------------------ */

void pj_dumps(tp_buf *b, const pj *v, bool ascii) {
    switch (v->t) {
    case PJ_NULL: tp_puts(b, "null"); return;
    case PJ_FALSE: tp_puts(b, "false"); return;
    case PJ_TRUE: tp_puts(b, "true"); return;
    case PJ_INT: tp_put(b, v->s, v->n); return;
    case PJ_FLOAT: pj_float_repr(b, v->d); return;
    case PJ_STR: pj_dump_str(b, v->s, v->n, ascii); return;
    case PJ_ARR:
        tp_putc(b, '[');
        for (size_t i = 0; i < v->len; i++) {
            if (i) tp_puts(b, ", ");
            pj_dumps(b, v->v[i], ascii);
        }
        tp_putc(b, ']');
        return;
    case PJ_OBJ:
        tp_putc(b, '{');
        for (size_t i = 0; i < v->len; i++) {
            if (i) tp_puts(b, ", ");
            pj_dump_str(b, v->k[i], v->kn[i], ascii);
            tp_puts(b, ": ");
            pj_dumps(b, v->v[i], ascii);
        }
        tp_putc(b, '}');
        return;
    }
}

/* ------------------------------------------------------------------ */
/* int(str) and float(str)                                             */
/* ------------------------------------------------------------------ */

/* Digits with single underscores between them, from s[*i]; appends the
 * digits to out. false when an underscore is misplaced; *nd counts digits. */
static bool py_digits(const char *s, size_t n, size_t *i, tp_buf *out, size_t *nd) {
    *nd = 0;
    while (*i < n) {
        char c = s[*i];
        if (isdig(c)) {
            if (out) tp_putc(out, c);
            (*nd)++;
            (*i)++;
        } else if (c == '_' && *nd && *i + 1 < n && isdig(s[*i + 1])) {
            (*i)++;
        } else {
            break;
        }
    }
    return true;
}

pj *pj_py_int(const char *s, size_t n, bool *oom) {
    tp_strip(&s, &n);
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    tp_buf d = {0};
    size_t nd;
    py_digits(s, n, &i, &d, &nd);
    if (!nd || i != n) {
        tp_buf_free(&d);
        return NULL;
    }
    if (d.oom) {
        *oom = true;
        tp_buf_free(&d);
        return NULL;
    }
    size_t z = 0;
    while (z + 1 < d.len && d.data[z] == '0') z++;
    tp_buf o = {0};
    if (neg && !(d.len - z == 1 && d.data[z] == '0')) tp_putc(&o, '-');
    tp_put(&o, d.data + z, d.len - z);
    tp_buf_free(&d);
    pj *v = pj_take_buf(PJ_INT, &o);
    if (!v) *oom = true;
    return v;
}

static bool ieq(const char *s, size_t n, const char *w) {
    if (strlen(w) != n) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != w[i]) return false;
    }
    return true;
}

int pj_py_float(const char *s, size_t n, double *out) {
    tp_strip(&s, &n);
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (ieq(s + i, n - i, "inf") || ieq(s + i, n - i, "infinity")) {
        *out = neg ? -INFINITY : INFINITY;
        return 0;
    }
    if (ieq(s + i, n - i, "nan")) {
        *out = NAN;
        return 0;
    }
    tp_buf c = {0};
    if (neg) tp_putc(&c, '-');
    size_t ni, nf = 0, ne;
    py_digits(s, n, &i, &c, &ni);
    if (i < n && s[i] == '.') {
        tp_putc(&c, '.');
        i++;
        py_digits(s, n, &i, &c, &nf);
    }
    bool ok = ni + nf > 0;
    if (ok && i < n && (s[i] == 'e' || s[i] == 'E')) {
        tp_putc(&c, 'e');
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) tp_putc(&c, s[i++]);
        py_digits(s, n, &i, &c, &ne);
        ok = ne > 0;
    }
    ok = ok && i == n && !c.oom;
    if (ok) *out = strtod(c.data, NULL);
    tp_buf_free(&c);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* ast.literal_eval                                                    */
/* ------------------------------------------------------------------ */

typedef struct le {
    const char *s;
    size_t n, i;
    int depth;  /* bracket nesting: newlines are whitespace inside brackets only */
    bool *oom;
} le;

static bool le_ident(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || isdig((char)c) || c == '_' || c >= 0x80;
}

static void le_ws(le *L) {
    while (L->i < L->n) {
        char c = L->s[L->i];
        if (c == ' ' || c == '\t' || c == '\f' || (L->depth > 0 && (c == '\n' || c == '\r'))) L->i++;
        else if (c == '\\' && L->i + 1 < L->n && L->s[L->i + 1] == '\n') L->i += 2; /* line continuation */
        else break;
    }
}

static pj *le_elem(le *L);

/* One string literal (prefix, quotes, escapes) appended to out; *bytes set
 * for b'' (not JSON-serialisable). */
static bool le_string(le *L, tp_buf *out, bool *bytes) {
    size_t i = L->i;
    bool raw = false, fstr = false;
    *bytes = false;
    while (i < L->n && (L->s[i] != '"' && L->s[i] != '\'')) {
        char c = (char)(L->s[i] | 0x20);
        if (c == 'r') raw = true;
        else if (c == 'b') *bytes = true;
        else if (c == 'f') fstr = true;
        else if (c != 'u') return false;
        if (++i - L->i > 2) return false;
    }
    if (i >= L->n || fstr) return false;
    char q = L->s[i];
    bool triple = i + 2 < L->n && L->s[i + 1] == q && L->s[i + 2] == q;
    i += triple ? 3 : 1;
    for (;;) {
        if (i >= L->n) return false;
        char c = L->s[i];
        if (c == q && (!triple || (i + 2 < L->n && L->s[i + 1] == q && L->s[i + 2] == q))) {
            L->i = i + (triple ? 3 : 1);
            return true;
        }
        if (!triple && (c == '\n' || c == '\r')) return false;
        if (c != '\\') {
            tp_putc(out, c);
            i++;
            continue;
        }
        if (i + 1 >= L->n) return false;
        char e = L->s[i + 1];
        if (raw) { /* a backslash keeps itself and the character after it */
            tp_putc(out, '\\');
            tp_putc(out, e);
            i += 2;
            continue;
        }
        i += 2;
        uint32_t cp;
        switch (e) {
        case '\n': break;
        case '\\': tp_putc(out, '\\'); break;
        case '\'': tp_putc(out, '\''); break;
        case '"': tp_putc(out, '"'); break;
        case 'a': tp_putc(out, '\a'); break;
        case 'b': tp_putc(out, '\b'); break;
        case 'f': tp_putc(out, '\f'); break;
        case 'n': tp_putc(out, '\n'); break;
        case 'r': tp_putc(out, '\r'); break;
        case 't': tp_putc(out, '\t'); break;
        case 'v': tp_putc(out, '\v'); break;
        case 'x':
        case 'u':
        case 'U': {
            int nh = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (*bytes && e != 'x') { /* \u in bytes is kept as is */
                tp_putc(out, '\\');
                tp_putc(out, e);
                break;
            }
            cp = 0;
            for (int k = 0; k < nh; k++) {
                int h = i < L->n ? hexval((unsigned char)L->s[i]) : -1;
                if (h < 0) return false;
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (cp > 0x10FFFF) return false;
            put_cp(out, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(L->s[i++] - '0');
                put_cp(out, cp);
            } else if (e == 'N') {
                return false; /* \N{name}: no name table here */
            } else {
                tp_putc(out, '\\');
                tp_putc(out, e);
            }
        }
    }
}

/* A Python number literal at L->i (no sign). */
static pj *le_number(le *L) {
    const char *s = L->s;
    size_t n = L->n, i = L->i;
    pj *v = NULL;
    if (i + 1 < n && s[i] == '0' && strchr("xXoObB", s[i + 1])) {
        int base = (s[i + 1] | 0x20) == 'x' ? 16 : (s[i + 1] | 0x20) == 'o' ? 8 : 2;
        i += 2;
        unsigned long long x = 0;
        size_t nd = 0;
        for (;;) {
            if (i < n && s[i] == '_' && i + 1 < n && hexval((unsigned char)s[i + 1]) >= 0 &&
                hexval((unsigned char)s[i + 1]) < base)
                i++;
            int h = i < n ? hexval((unsigned char)s[i]) : -1;
            if (h < 0 || h >= base) break;
            if (x > (~0ULL - (unsigned)h) / (unsigned)base) return NULL; /* past 64 bits: not supported */
            x = x * (unsigned)base + (unsigned)h;
            nd++;
            i++;
        }
        if (!nd || (i < n && le_ident((unsigned char)s[i]))) return NULL;
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", x);
        v = pj_new(PJ_INT);
        if (v) v->s = tp_strndup(buf, strlen(buf)), v->n = strlen(buf);
        if (!v || !v->s) goto oom;
        L->i = i;
        return v;
    }
    tp_buf c = {0};
    size_t ni, nf = 0, ne = 0;
    bool is_float = false;
    py_digits(s, n, &i, &c, &ni);
    if (i < n && s[i] == '.') {
        is_float = true;
        tp_putc(&c, '.');
        i++;
        py_digits(s, n, &i, &c, &nf);
    }
    if (ni + nf == 0) goto fail;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        tp_buf e = {0};
        tp_putc(&e, 'e');
        if (j < n && (s[j] == '+' || s[j] == '-')) tp_putc(&e, s[j++]);
        py_digits(s, n, &j, &e, &ne);
        if (!ne) {
            tp_buf_free(&e);
            goto fail;
        }
        tp_put(&c, e.data, e.len);
        tp_buf_free(&e);
        i = j;
        is_float = true;
    }
    if (i < n && le_ident((unsigned char)s[i])) goto fail; /* 1j (complex), 1abc */
    if (c.oom) goto oomc;
    if (is_float) {
        v = pj_new(PJ_FLOAT);
        if (!v) goto oomc;
        v->d = strtod(c.data, NULL);
        tp_buf_free(&c);
    } else {
        size_t z = 0;
        while (z + 1 < c.len && c.data[z] == '0') z++;
        if (z && c.data[z] != '0') goto fail; /* 07: leading zeros are a SyntaxError */
        if (z) memmove(c.data, c.data + z, c.len - z + 1), c.len -= z;
        v = pj_take_buf(PJ_INT, &c);
        if (!v) goto oom;
    }
    L->i = i;
    return v;
oomc:
    tp_buf_free(&c);
oom:
    pj_free(v);
    *L->oom = true;
    return NULL;
fail:
    tp_buf_free(&c);
    return NULL;
}

static bool le_word(le *L, const char *w) {
    size_t n = strlen(w);
    if (L->i + n > L->n || memcmp(L->s + L->i, w, n) != 0) return false;
    if (L->i + n < L->n && le_ident((unsigned char)L->s[L->i + n])) return false;
    L->i += n;
    return true;
}

/* A dict key as json.dumps writes keys: str as is; int, float, True, False, None converted. */
static bool le_key(pj *k, tp_buf *out) {
    switch (k->t) {
    case PJ_STR: tp_put(out, k->s, k->n); return true;
    case PJ_INT: tp_put(out, k->s, k->n); return true;
    case PJ_FLOAT: pj_float_repr(out, k->d); return true;
    case PJ_TRUE: tp_puts(out, "true"); return true;
    case PJ_FALSE: tp_puts(out, "false"); return true;
    case PJ_NULL: tp_puts(out, "null"); return true;
    default: return false; /* a tuple key: TypeError */
    }
}

/* At the sequence's end: its closing bracket (consumed), or for a bare
 * top-level tuple (close 0) only blanks left. */
static bool le_at_close(le *L, char close) {
    if (close) {
        if (L->i < L->n && L->s[L->i] == close) {
            L->i++;
            return true;
        }
        return false;
    }
    size_t j = L->i;
    while (j < L->n && (L->s[j] == ' ' || L->s[j] == '\t' || L->s[j] == '\n' || L->s[j] == '\r' || L->s[j] == '\f')) j++;
    return j == L->n;
}

/* Elements up to `close` (list, tuple, or a bare tuple when close is 0);
 * first (already read) when non-NULL. */
static pj *le_seq(le *L, char close, pj *first) {
    pj *a = pj_new(PJ_ARR);
    if (!a || (first && !pj_arr_push(a, first))) {
        if (!a) pj_free(first);
        pj_free(a);
        *L->oom = true;
        return NULL;
    }
    for (;;) {
        le_ws(L);
        if (le_at_close(L, close)) return a;
        if (a->len) {
            if (L->i >= L->n || L->s[L->i] != ',') break;
            L->i++;
            le_ws(L);
            if (le_at_close(L, close)) return a;
        }
        pj *e = le_elem(L);
        if (!e) break;
        if (!pj_arr_push(a, e)) {
            *L->oom = true;
            break;
        }
    }
    pj_free(a);
    return NULL;
}

static pj *le_atom(le *L) {
    le_ws(L);
    if (L->i >= L->n) return NULL;
    char c = L->s[L->i];
    if (c == '[' || c == '(' || c == '{') {
        if (++L->depth > LE_MAX_DEPTH) return NULL;
        L->i++;
        pj *v = NULL;
        if (c == '[') {
            v = le_seq(L, ']', NULL);
        } else if (c == '(') {
            le_ws(L);
            if (L->i < L->n && L->s[L->i] == ')') {
                L->i++;
                v = pj_new(PJ_ARR);
                if (!v) *L->oom = true;
            } else {
                pj *e = le_elem(L);
                le_ws(L);
                if (e && L->i < L->n && L->s[L->i] == ')') {
                    L->i++;
                    v = e; /* a parenthesised value */
                } else if (e && L->i < L->n && L->s[L->i] == ',') {
                    v = le_seq(L, ')', e);
                } else {
                    pj_free(e);
                }
            }
        } else {
            le_ws(L);
            v = pj_new(PJ_OBJ);
            if (!v) {
                *L->oom = true;
                return NULL;
            }
            bool first = true;
            for (;;) {
                le_ws(L);
                if (L->i < L->n && L->s[L->i] == '}') {
                    L->i++;
                    break;
                }
                if (!first) {
                    if (L->i >= L->n || L->s[L->i] != ',') goto dict_fail;
                    L->i++;
                    le_ws(L);
                    if (L->i < L->n && L->s[L->i] == '}') {
                        L->i++;
                        break;
                    }
                }
                first = false;
                pj *k = le_elem(L);
                le_ws(L);
                if (!k || L->i >= L->n || L->s[L->i] != ':') { /* a set, or not a literal */
                    pj_free(k);
                    goto dict_fail;
                }
                L->i++;
                pj *val = le_elem(L);
                tp_buf kb = {0};
                bool ok = val && le_key(k, &kb) && !kb.oom;
                pj_free(k);
                if (ok) ok = pj_obj_set(v, kb.data ? kb.data : "", kb.len, val);
                else pj_free(val);
                tp_buf_free(&kb);
                if (!ok) goto dict_fail;
            }
            goto done;
        dict_fail:
            pj_free(v);
            v = NULL;
        }
    done:
        L->depth--;
        return v;
    }
    if (c == '"' || c == '\'' || le_ident((unsigned char)c)) {
        /* string literals (adjacent ones concatenate), or a name */
        size_t j = L->i;
        while (j < L->n && j - L->i < 3 && le_ident((unsigned char)L->s[j]) && !isdig(L->s[j])) j++;
        if (j < L->n && (L->s[j] == '"' || L->s[j] == '\'')) {
            tp_buf b = {0};
            bool any_bytes = false;
            for (;;) {
                bool bytes;
                if (!le_string(L, &b, &bytes)) {
                    tp_buf_free(&b);
                    return NULL;
                }
                any_bytes |= bytes;
                size_t save = L->i;
                le_ws(L);
                size_t k = L->i;
                while (k < L->n && k - L->i < 3 && le_ident((unsigned char)L->s[k]) && !isdig(L->s[k])) k++;
                if (k < L->n && (L->s[k] == '"' || L->s[k] == '\'')) continue;
                L->i = save;
                break;
            }
            if (any_bytes) { /* bytes: json.dumps raises TypeError (mixed: SyntaxError) */
                tp_buf_free(&b);
                return NULL;
            }
            pj *v = pj_take_buf(PJ_STR, &b);
            if (!v) *L->oom = true;
            return v;
        }
        pj *v = NULL;
        if (le_word(L, "True")) v = pj_new(PJ_TRUE);
        else if (le_word(L, "False")) v = pj_new(PJ_FALSE);
        else if (le_word(L, "None")) v = pj_new(PJ_NULL);
        else if (isdig(c)) return le_number(L);
        else return NULL;
        if (!v) *L->oom = true;
        return v;
    }
    if (c == '.' && L->i + 1 < L->n && isdig(L->s[L->i + 1])) return le_number(L);
    return NULL;
}

/* An element: an atom, or + / - before a number. */
static pj *le_elem(le *L) {
    le_ws(L);
    if (L->i < L->n && (L->s[L->i] == '-' || L->s[L->i] == '+')) {
        bool neg = L->s[L->i] == '-';
        L->i++;
        le_ws(L);
        if (L->i >= L->n || !(isdig(L->s[L->i]) || L->s[L->i] == '.')) return NULL;
        pj *v = le_number(L);
        if (!v || !neg) return v;
        if (v->t == PJ_FLOAT) {
            v->d = -v->d;
        } else if (!(v->n == 1 && v->s[0] == '0')) {
            char *t = malloc(v->n + 2);
            if (!t) {
                pj_free(v);
                *L->oom = true;
                return NULL;
            }
            t[0] = '-';
            memcpy(t + 1, v->s, v->n + 1);
            free(v->s);
            v->s = t;
            v->n++;
        }
        return v;
    }
    return le_atom(L);
}

pj *pj_literal_eval(const char *s, size_t n, bool *oom) {
    le L = {s, n, 0, 0, oom};
    /* literal_eval strips leading spaces and tabs; blank lines around the
       expression are allowed by the eval-mode tokenizer */
    while (L.i < n && (s[L.i] == ' ' || s[L.i] == '\t' || s[L.i] == '\n' || s[L.i] == '\r' || s[L.i] == '\f')) L.i++;
    pj *v = le_elem(&L);
    if (!v) return NULL;
    le_ws(&L);
    if (L.i < n && s[L.i] == ',') { /* a bare tuple: 1, 2 */
        v = le_seq(&L, 0, v);
        if (!v) return NULL;
    }
    while (L.i < n && (s[L.i] == ' ' || s[L.i] == '\t' || s[L.i] == '\n' || s[L.i] == '\r' || s[L.i] == '\f')) L.i++;
    if (L.i != n) {
        pj_free(v);
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------------ */
/* Incremental re-serialiser                                           */
/* ------------------------------------------------------------------ */

enum { FR_OBJ = 0, FR_ARR = 1 };
enum { ST_KEY_OR_END, ST_KEY, ST_COLON, ST_VALUE, ST_AFTER, ST_VAL_OR_END, ST_VAL, ST_AAFTER };
enum { LX_NONE, LX_STR, LX_NUM, LX_LIT };
enum { SK_VALUE, SK_KEYCAP, SK_KEYOUT };

typedef struct pjs_frame {
    unsigned char kind, st;
    bool call;       /* a call object: its keys go to hooks.key, its members to msink */
    bool calls;      /* the top array of PJS_ARRAY: its items are call objects */
    bool member;     /* this container is a call object's member value */
    int out;         /* where its own punctuation goes */
    int msink;       /* call objects: the current member's sink */
} pjs_frame;

struct pj_stream {
    pjs_mode mode;
    bool ascii;
    pjs_hooks h;
    pjs_frame *fr;
    size_t nfr, capfr;
    bool done, err, started;
    int lex;
    /* the scalar being read */
    int vsink, skind;
    bool vmember;
    int esc;          /* 0; 1 after '\'; 2..5: hex digits of \u read + 2 */
    uint32_t u, hi;   /* \u value; a pending high surrogate */
    int hist;         /* with hi: 0 want '\', 1 want 'u' */
    bool second;      /* the \u being read follows a high surrogate */
    u8d dec;          /* raw UTF-8 being assembled (ensure_ascii) */
    tp_buf tok;       /* number / literal text */
    tp_buf key;       /* a call object's key */
};

pj_stream *pjs_new(pjs_mode mode, bool ascii, const pjs_hooks *hooks) {
    pj_stream *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->mode = mode;
    p->ascii = ascii;
    if (hooks) p->h = *hooks;
    return p;
}

void pjs_free(pj_stream *p) {
    if (!p) return;
    free(p->fr);
    tp_buf_free(&p->tok);
    tp_buf_free(&p->key);
    free(p);
}

bool pjs_done(const pj_stream *p) { return p->done; }
bool pjs_error(const pj_stream *p) { return p->err; }
bool pjs_started(const pj_stream *p) { return p->started; }

static void pjs_emit(pj_stream *p, int sink, const char *s, size_t n) {
    if (sink == PJS_ARGS && p->h.out && n) p->h.out(p->h.ctx, PJS_ARGS, s, n);
}

/* One decoded code point of the string being read. */
static void pjs_cp(pj_stream *p, uint32_t cp) {
    char e[16];
    if (p->skind == SK_KEYCAP) {
        tp_put(&p->key, e, (size_t)utf8_put(e, cp));
    } else if (p->vsink == PJS_NAME) {
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        if (p->h.out) p->h.out(p->h.ctx, PJS_NAME, e, (size_t)utf8_put(e, cp));
    } else if (p->vsink == PJS_ARGS) {
        pjs_emit(p, PJS_ARGS, e, (size_t)esc_cp(e, cp, p->ascii));
    }
}

/* Plain bytes of the string (no quote, backslash or control character). */
static void pjs_raw(pj_stream *p, const char *s, size_t n) {
    if (p->skind == SK_KEYCAP) {
        tp_put(&p->key, s, n);
        return;
    }
    if (p->vsink == PJS_NAME) {
        if (p->h.out) p->h.out(p->h.ctx, PJS_NAME, s, n);
        return;
    }
    if (p->vsink != PJS_ARGS) return;
    if (!p->ascii) {
        pjs_emit(p, PJS_ARGS, s, n);
        return;
    }
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x7F && !p->dec.need) {
            size_t j = i + 1;
            while (j < n && (unsigned char)s[j] < 0x7F) j++;
            pjs_emit(p, PJS_ARGS, s + i, j - i);
            i = j;
            continue;
        }
        uint32_t cps[2];
        int k = u8_feed(&p->dec, c, cps);
        for (int j = 0; j < k; j++) pjs_cp(p, cps[j]);
        i++;
    }
}

static void pjs_u8_flush(pj_stream *p) {
    uint32_t cp;
    if (u8_end(&p->dec, &cp)) pjs_cp(p, cp);
}

static bool pjs_push(pj_stream *p, pjs_frame f) {
    if (p->nfr >= PJ_MAX_DEPTH) return false;
    if (p->nfr == p->capfr) {
        size_t nc = p->capfr ? p->capfr * 2 : 8;
        pjs_frame *nf = realloc(p->fr, nc * sizeof *nf);
        if (!nf) return false;
        p->fr = nf;
        p->capfr = nc;
    }
    p->fr[p->nfr++] = f;
    return true;
}

/* A scalar ended. */
static void pjs_scalar_end(pj_stream *p, bool is_str) {
    p->lex = LX_NONE;
    if (p->vmember && p->h.value_end) p->h.value_end(p->h.ctx, p->vsink, is_str);
    if (!p->nfr) p->done = true;
}

static void pjs_close(pj_stream *p) {
    pjs_frame f = p->fr[--p->nfr];
    if (f.call) {
        if (p->h.call_end) p->h.call_end(p->h.ctx);
    } else {
        pjs_emit(p, f.out, f.kind == FR_OBJ ? "}" : "]", 1);
    }
    if (f.member && p->h.value_end) p->h.value_end(p->h.ctx, f.out, false);
    if (!p->nfr) p->done = true;
}

/* The first byte of a value; sink: where it goes; member: it is a call
 * object's member value; call: it must be a call object. */
static void pjs_value(pj_stream *p, unsigned char c, int sink, bool member, bool call) {
    if (call && c != '{') {
        p->err = true;
        return;
    }
    p->vsink = sink, p->vmember = member;
    switch (c) {
    case '{':
        if (!pjs_push(p, (pjs_frame){FR_OBJ, ST_KEY_OR_END, call, false, member, call ? PJS_DROP : sink, PJS_DROP})) {
            p->err = true;
            return;
        }
        if (call) {
            if (p->h.call_begin) p->h.call_begin(p->h.ctx);
        } else {
            pjs_emit(p, sink, "{", 1);
        }
        return;
    case '[':
        if (!pjs_push(p, (pjs_frame){FR_ARR, ST_VAL_OR_END, false, false, member, sink, PJS_DROP})) {
            p->err = true;
            return;
        }
        pjs_emit(p, sink, "[", 1);
        return;
    case '"':
        p->lex = LX_STR, p->skind = SK_VALUE, p->esc = 0, p->hi = 0, p->second = false;
        pjs_emit(p, sink, "\"", 1);
        return;
    default:
        if (c == '-' || isdig((char)c)) p->lex = LX_NUM;
        else if (c == 'n' || c == 't' || c == 'f' || c == 'N' || c == 'I') p->lex = LX_LIT;
        else {
            p->err = true;
            return;
        }
        p->tok.len = 0;
        tp_putc(&p->tok, (char)c);
    }
}

static void pjs_number_end(pj_stream *p) {
    bool fl;
    size_t k = json_number_len(p->tok.data, p->tok.len, &fl);
    if (p->tok.oom || k != p->tok.len) {
        p->err = true;
        return;
    }
    if (p->vsink == PJS_ARGS) {
        tp_buf b = {0};
        dump_json_number(&b, p->tok.data, p->tok.len, fl);
        if (b.oom) p->err = true;
        else pjs_emit(p, PJS_ARGS, b.data, b.len);
        tp_buf_free(&b);
    }
    pjs_scalar_end(p, false);
}

static const char *const LITERALS[] = {"null", "true", "false", "NaN", "Infinity", "-Infinity"};

/* A literal grew by one byte: still a prefix, complete, or an error. */
static void pjs_literal(pj_stream *p) {
    bool prefix = false;
    for (size_t i = 0; i < sizeof LITERALS / sizeof *LITERALS; i++) {
        size_t n = strlen(LITERALS[i]);
        if (p->tok.len <= n && memcmp(LITERALS[i], p->tok.data, p->tok.len) == 0) {
            if (p->tok.len == n) {
                pjs_emit(p, p->vsink, LITERALS[i], n);
                pjs_scalar_end(p, false);
                return;
            }
            prefix = true;
        }
    }
    if (!prefix || p->tok.oom) p->err = true;
}

/* A string ended (closing quote read). */
static void pjs_string_end(pj_stream *p) {
    pjs_u8_flush(p);
    if (p->skind == SK_KEYCAP) {
        pjs_frame *f = &p->fr[p->nfr - 1];
        f->msink = p->h.key ? p->h.key(p->h.ctx, p->key.data ? p->key.data : "", p->key.len) : PJS_DROP;
        f->st = ST_COLON;
        p->key.len = 0;
        p->lex = LX_NONE;
        return;
    }
    pjs_emit(p, p->vsink, "\"", 1);
    if (p->skind == SK_KEYOUT) {
        p->fr[p->nfr - 1].st = ST_COLON;
        p->lex = LX_NONE;
        return;
    }
    pjs_scalar_end(p, true);
}

static void pjs_got_u(pj_stream *p) {
    uint32_t u = p->u;
    if (p->second) {
        uint32_t h = p->hi;
        p->second = false, p->hi = 0;
        if (u >= 0xDC00 && u <= 0xDFFF) {
            pjs_cp(p, 0x10000 + ((h - 0xD800) << 10) + (u - 0xDC00));
            return;
        }
        pjs_cp(p, h); /* not a pair: the high one alone, then this escape afresh */
    }
    if (u >= 0xD800 && u <= 0xDBFF) {
        p->hi = u, p->hist = 0;
        return;
    }
    pjs_cp(p, u);
}

/* Reads string bytes; returns how many were consumed. */
static size_t pjs_lex_str(pj_stream *p, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && !p->err && p->lex == LX_STR) {
        unsigned char c = (unsigned char)s[i];
        if (p->hi && !p->esc && !p->second) {
            if (p->hist == 0 && c == '\\') {
                p->hist = 1;
                i++;
                continue;
            }
            if (p->hist == 1 && c == 'u') {
                p->esc = 2, p->u = 0, p->second = true;
                i++;
                continue;
            }
            uint32_t h = p->hi;
            bool had_backslash = p->hist == 1;
            p->hi = 0;
            pjs_cp(p, h);
            if (had_backslash) p->esc = 1; /* c is the escape's letter */
            continue;
        }
        if (p->esc == 1) {
            i++;
            p->esc = 0;
            switch (c) {
            case '"': pjs_cp(p, '"'); break;
            case '\\': pjs_cp(p, '\\'); break;
            case '/': pjs_cp(p, '/'); break;
            case 'b': pjs_cp(p, '\b'); break;
            case 'f': pjs_cp(p, '\f'); break;
            case 'n': pjs_cp(p, '\n'); break;
            case 'r': pjs_cp(p, '\r'); break;
            case 't': pjs_cp(p, '\t'); break;
            case 'u': p->esc = 2, p->u = 0; break;
            default: p->err = true;
            }
            continue;
        }
        if (p->esc >= 2) {
            int h = hexval(c);
            if (h < 0) {
                p->err = true;
                break;
            }
            p->u = p->u * 16 + (uint32_t)h;
            i++;
            if (++p->esc == 6) {
                p->esc = 0;
                pjs_got_u(p);
            }
            continue;
        }
        if (c == '"') {
            i++;
            pjs_string_end(p);
            break;
        }
        if (c == '\\') {
            pjs_u8_flush(p);
            p->esc = 1;
            i++;
            continue;
        }
        if (c < 0x20) {
            p->err = true;
            break;
        }
        size_t j = i + 1;
        while (j < n && s[j] != '"' && s[j] != '\\' && (unsigned char)s[j] >= 0x20) j++;
        pjs_raw(p, s + i, j - i);
        i = j;
    }
    return i;
}

/* A structural byte (not whitespace, outside any scalar). */
static void pjs_structural(pj_stream *p, unsigned char c) {
    if (!p->nfr) { /* the top-level value */
        if (p->mode == PJS_ARRAY) {
            if (c != '[' || !pjs_push(p, (pjs_frame){FR_ARR, ST_VAL_OR_END, false, true, false, PJS_DROP, PJS_DROP}))
                p->err = true;
            return;
        }
        pjs_value(p, c, p->mode == PJS_VALUE ? PJS_ARGS : PJS_DROP, false, p->mode == PJS_OBJECT);
        return;
    }
    pjs_frame *f = &p->fr[p->nfr - 1];
    switch (f->st) {
    case ST_KEY_OR_END:
        if (c == '}') {
            pjs_close(p);
            return;
        }
        /* fall through */
    case ST_KEY:
        if (c != '"') {
            p->err = true;
            return;
        }
        p->lex = LX_STR, p->esc = 0, p->hi = 0, p->second = false;
        if (f->call) {
            p->skind = SK_KEYCAP;
            p->key.len = 0;
        } else {
            p->skind = SK_KEYOUT;
            p->vsink = f->out;
            pjs_emit(p, f->out, "\"", 1);
        }
        return;
    case ST_COLON:
        if (c != ':') {
            p->err = true;
            return;
        }
        if (!f->call) pjs_emit(p, f->out, ": ", 2);
        f->st = ST_VALUE;
        return;
    case ST_VALUE: {
        f->st = ST_AFTER;
        bool call = f->call;
        pjs_value(p, c, call ? f->msink : f->out, call, false);
        return;
    }
    case ST_AFTER:
        if (c == ',') {
            if (!f->call) pjs_emit(p, f->out, ", ", 2);
            f->st = ST_KEY;
        } else if (c == '}') {
            pjs_close(p);
        } else {
            p->err = true;
        }
        return;
    case ST_VAL_OR_END:
        if (c == ']') {
            pjs_close(p);
            return;
        }
        /* fall through */
    case ST_VAL: {
        f->st = ST_AAFTER;
        bool calls = f->calls;
        pjs_value(p, c, f->out, false, calls);
        return;
    }
    case ST_AAFTER:
        if (c == ',') {
            pjs_emit(p, f->out, ", ", 2);
            f->st = ST_VAL;
        } else if (c == ']') {
            pjs_close(p);
        } else {
            p->err = true;
        }
        return;
    }
}

static bool numchar(unsigned char c) { return isdig((char)c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

size_t pjs_feed(pj_stream *p, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && !p->err && !p->done) {
        unsigned char c = (unsigned char)s[i];
        switch (p->lex) {
        case LX_STR: i += pjs_lex_str(p, s + i, n - i); continue;
        case LX_NUM:
            if (p->tok.len == 1 && p->tok.data[0] == '-' && c == 'I') { /* -Infinity */
                p->lex = LX_LIT;
                tp_putc(&p->tok, 'I');
                i++;
                continue;
            }
            if (numchar(c)) {
                tp_putc(&p->tok, (char)c);
                i++;
            } else {
                pjs_number_end(p); /* c is read again */
            }
            continue;
        case LX_LIT:
            tp_putc(&p->tok, (char)c);
            i++;
            pjs_literal(p);
            continue;
        default: break;
        }
        if (jws((char)c)) {
            i++;
            continue;
        }
        p->started = true;
        pjs_structural(p, c);
        i++;
    }
    return p->err ? n : i;
}

void pjs_finish(pj_stream *p) {
    if (!p->err && p->lex == LX_NUM) pjs_number_end(p);
}
