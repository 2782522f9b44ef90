/* so_json_schema.c: JSON Schema to the structured-output EBNF dialect, with xgrammar 0.1.29's semantics (issue 17). */
#include "structured/so_json_schema.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "structured/so_regex.h"

/* The converter follows xgrammar 0.1.29 cpp/json_schema_converter.cc (JSONSchemaConverter) rule by rule, so most
 * grammars come out as the same text: the basic rules first, then one rule per schema node in the order xgrammar
 * finishes them, names from the same hints (root_prop_0, root_part_1, defs_Foo, root_case_0, string, ...).
 * Read: $ref (JSON pointers "#/...", "#" for the root, recursion through a rule named before its body), const,
 * enum (compact picojson serialisations, '/' written \/ as picojson does), anyOf / oneOf (a choice), allOf (one
 * schema inlined, several: any value, as 0.1.29), type (a name or an array of names), boolean schemas, objects
 * (properties in schema order, optional ones skippable, required, additionalProperties, unevaluatedProperties,
 * strict mode, patternProperties, propertyNames, minProperties / maxProperties), arrays (prefixItems, items,
 * unevaluatedItems, minItems, maxItems, minContains), strings (minLength / maxLength, pattern, the 14 formats),
 * integers and numbers with minimum / maximum / exclusiveMinimum / exclusiveMaximum. A schema that is only
 * {"type": T} (title, description, ... aside) is the non-strict basic rule: {"type":"object"} is any object.
 * Deviations, where 0.1.29 is wrong (marked * below and in the code):
 *   - strings never hold raw control characters: minLength / maxLength bodies read [^\0-\x1f"\\] (0.1.29:
 *     [^"\\\r\n]); pattern, format and patternProperties regexes are read over the decoded string and written
 *     with JSON escapes (so_regex's json_string, xgrammar HEAD);
 *   - integer ranges are exact ([5, inf) is 5 and above; 0.1.29's regex also took 1-4), and number ranges are
 *     exact too: numbers without exponent and with at most 6 decimals (0.1.29's precision) whose value is in
 *     range, exclusive bounds exclusive (0.1.29 read them inclusive and lost fractions in places);
 *   - when both a bound and its exclusive form are given the stricter wins (HEAD); {"minLength": 0} alone is
 *     any string (HEAD; 0.1.29 read one character);
 *   - property keys are written as JSON strings (0.1.29 pasted them raw into the EBNF literal);
 *   - date-time reads minutes 00-59 and seconds 00-60 (HEAD; 0.1.29 had them swapped); the email format is the
 *     RFC's over the decoded string;
 *   - JSON pointers decode ~0 and ~1; a $ref path that names no identifier characters gets the rule name "ref";
 *   - propertyNames must describe strings: enum / const values that are not strings, $ref, anyOf, oneOf and
 *     allOf in it are refused (they could make keys that are not JSON strings).
 * Before converting, vLLM's own refusals apply (backend_xgrammar.py has_xgrammar_unsupported_json_features and
 * has_non_terminating_ref_cycle), with vLLM's messages. Work is bounded: nesting depth, rule count, grammar size,
 * repetition counts. */

#define SO_JSON_MAX_DEPTH 128             /* schema levels the converter descends (a $ref hop counts) */
#define SO_JSON_MAX_DOC_DEPTH 512         /* JSON nesting of the schema document */
#define SO_JSON_MAX_RULES 200000          /* grammar rules */
#define SO_JSON_MAX_BYTES (64u << 20)     /* grammar text */
#define SO_JSON_MAX_COUNT 100000000LL     /* minItems, maxItems, minLength, maxLength, min/maxProperties */
#define SO_JSON_PRECISION 6               /* decimals of a bounded number (xgrammar's GenerateFloatRangeRegex) */

static const char *const UNSUPPORTED = "The provided JSON schema contains features not supported by xgrammar.";
static const char *const REF_CYCLE =
    "The provided JSON schema contains a '$ref' cycle with no base case, so no output can ever satisfy it. Give "
    "the recursion a terminating branch, for example by making the recursive property optional or adding a "
    "non-recursive 'anyOf' branch.";
static const char *const ANY_BODY =
    "basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object";

/* ------------------------------------------------------------------------------------------------------------ */
/* growable strings */

typedef struct sb {
    char *s;
    size_t n, cap;
    bool oom;
} sb;

static void sb_add(sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_cat(sb *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt(sb *b, const char *fmt, ...) VT_PRINTF(2, 3);
static void sb_fmt(sb *b, const char *fmt, ...) {
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        sb_add(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    free(big);
}

static void sb_reset(sb *b) {
    b->n = 0;
    if (b->s) b->s[0] = 0;
}

/* the text (malloc'd; "" when nothing was added), NULL when out of memory; b is left empty */
static char *sb_take(sb *b) {
    char *s = b->s;
    const bool oom = b->oom;
    b->s = NULL;
    b->n = b->cap = 0;
    b->oom = false;
    if (oom) {
        free(s);
        return NULL;
    }
    if (!s) {
        s = malloc(1);
        if (s) s[0] = 0;
    }
    return s;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* JSON text as picojson writes it (xgrammar's serialize(): compact, keys in insertion order, '/' escaped, integral
 * reals below 2^53 without a fraction, other reals %.17g) */

static void json_str(sb *b, const char *s, size_t n, bool escape_slash) {
    sb_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '/': esc = escape_slash ? "\\/" : NULL; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (ch < 0x20 || ch == 0x7f) {
                snprintf(u, sizeof u, "\\u%04x", ch);
                esc = u;
            }
        }
        if (!esc) continue;
        sb_add(b, s + run, i - run);
        sb_cat(b, esc);
        run = i + 1;
    }
    sb_add(b, s + run, n - run);
    sb_add(b, "\"", 1);
}

static void json_ser(sb *b, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *v;
        bool first = true;
        sb_add(b, "{", 1);
        json_object_foreach((json_t *)j, key, v) {
            if (!first) sb_add(b, ",", 1);
            first = false;
            json_str(b, key, strlen(key), true);
            sb_add(b, ":", 1);
            json_ser(b, v);
        }
        sb_add(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (i) sb_add(b, ",", 1);
            json_ser(b, json_array_get(j, i));
        }
        sb_add(b, "]", 1);
        break;
    case JSON_STRING: json_str(b, json_string_value(j), json_string_length(j), true); break;
    case JSON_INTEGER: sb_fmt(b, "%" JSON_INTEGER_FORMAT, json_integer_value(j)); break;
    case JSON_REAL: {
        const double v = json_real_value(j);
        double ip;
        if (fabs(v) < 9007199254740992.0 && modf(v, &ip) == 0) sb_fmt(b, "%.f", v);
        else sb_fmt(b, "%.17g", v);
        break;
    }
    case JSON_TRUE: sb_cat(b, "true"); break;
    case JSON_FALSE: sb_cat(b, "false"); break;
    case JSON_NULL: sb_cat(b, "null"); break;
    }
}

/* an EBNF literal "..." whose code points are the bytes s[0 .. n) (UTF-8) */
static void ebnf_lit(sb *b, const char *s, size_t n) {
    sb_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"') strcpy(esc, "\\\"");
        else if (ch == '\\') strcpy(esc, "\\\\");
        else if (ch == '\n') strcpy(esc, "\\n");
        else if (ch == '\r') strcpy(esc, "\\r");
        else if (ch == '\t') strcpy(esc, "\\t");
        else if (ch < 0x20) snprintf(esc, sizeof esc, "\\x%02x", ch);
        else continue;
        sb_add(b, s + run, i - run);
        sb_cat(b, esc);
        run = i + 1;
    }
    sb_add(b, s + run, n - run);
    sb_add(b, "\"", 1);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* the converter */

typedef struct rule {
    char *name, *body;
} rule;

typedef struct conv {
    const json_t *root;
    bool any_ws, strict;
    const char *start, *mid, *end, *colon, *empty_obj; /* separators (xgrammar's IndentManager without indent) */
    rule *rules;
    int n_rules, cap_rules;
    size_t bytes;
    json_t *names;        /* allocated rule names (a set) */
    json_t *next_suffix;  /* hint -> first suffix not yet tried */
    json_t *uri_rules;    /* $ref -> rule name */
    json_t *string_rules; /* string rule body -> rule name */
    int depth;
    vllm_status st;
} conv;

static void *cfail(conv *c, const char *fmt, ...) VT_PRINTF(2, 3);
static void *cfail(conv *c, const char *fmt, ...) {
    if (c->st == VLLM_OK) {
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        c->st = vt_error(VLLM_ERR_INVALID_ARG, "Failed to transform json schema into a grammar: %s", msg);
    }
    return NULL;
}

static void *coom(conv *c) {
    if (c->st == VLLM_OK) c->st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory converting a JSON schema to a grammar");
    return NULL;
}

static char *cdup(conv *c, const char *s) {
    if (c->st) return NULL;
    char *r = strdup(s);
    return r ? r : coom(c);
}

static char *cfmt(conv *c, const char *fmt, ...) VT_PRINTF(2, 3);
static char *cfmt(conv *c, const char *fmt, ...) {
    if (c->st) return NULL;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return coom(c);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static char *ctake(conv *c, sb *b) {
    char *s = sb_take(b);
    if (!s) return coom(c);
    if (c->st) {
        free(s);
        return NULL;
    }
    return s;
}

/* a unique rule name from hint (xgrammar's AllocateRuleName: the hint, else hint_0, hint_1, ...) */
static char *alloc_name(conv *c, const char *hint) {
    if (c->st) return NULL;
    if (!json_object_get(c->names, hint)) {
        if (json_object_set_new_nocheck(c->names, hint, json_true())) return coom(c);
        return cdup(c, hint);
    }
    const json_t *next = json_object_get(c->next_suffix, hint);
    json_int_t i = next ? json_integer_value(next) : 0;
    sb b = {0};
    for (;; i++) {
        sb_reset(&b);
        sb_fmt(&b, "%s_%" JSON_INTEGER_FORMAT, hint, i);
        if (b.oom) {
            free(b.s);
            return coom(c);
        }
        if (!json_object_get(c->names, b.s)) break;
    }
    if (json_object_set_new_nocheck(c->names, b.s, json_true()) ||
        json_object_set_new_nocheck(c->next_suffix, hint, json_integer(i + 1))) {
        free(b.s);
        return coom(c);
    }
    return ctake(c, &b);
}

/* appends rule name ::= body (both taken); false on failure */
static bool add_rule(conv *c, char *name, char *body) {
    if (!name || !body || c->st) {
        free(name);
        free(body);
        return false;
    }
    c->bytes += strlen(name) + strlen(body) + 6;
    if (c->n_rules >= SO_JSON_MAX_RULES || c->bytes > SO_JSON_MAX_BYTES) {
        free(name);
        free(body);
        cfail(c, "the schema needs a grammar larger than %d rules or %u bytes", SO_JSON_MAX_RULES, SO_JSON_MAX_BYTES);
        return false;
    }
    if (c->n_rules == c->cap_rules) {
        const int cap = c->cap_rules ? 2 * c->cap_rules : 64;
        rule *r = realloc(c->rules, (size_t)cap * sizeof *r);
        if (!r) {
            free(name);
            free(body);
            coom(c);
            return false;
        }
        c->rules = r;
        c->cap_rules = cap;
    }
    c->rules[c->n_rules].name = name;
    c->rules[c->n_rules].body = body;
    c->n_rules++;
    return true;
}

/* xgrammar's AddRule: allocates a name from hint, appends the rule (body taken); the name (malloc'd) or NULL */
static char *new_rule(conv *c, const char *hint, char *body) {
    char *name = alloc_name(c, hint);
    if (!name || !body) {
        free(name);
        free(body);
        return NULL;
    }
    char *ret = cdup(c, name);
    if (!add_rule(c, name, body)) {
        free(ret);
        return NULL;
    }
    return ret;
}

/* a member of an object, or NULL */
static const json_t *member(const json_t *o, const char *key) {
    return json_is_object(o) ? json_object_get(o, key) : NULL;
}

static bool is_ident_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '-' || ch == '.';
}

static char *visit(conv *c, const json_t *s, const char *rn);
static char *create_rule(conv *c, const json_t *s, const char *hint);

/* ------------------------------------------------------------------------------------------------------------ */
/* the basic rules (xgrammar's AddBasicRules with strict mode off) */

/* the basic rule a schema maps to through xgrammar's cache (keys that do not affect validation ignored), or NULL */
static const char *basic_name(const json_t *s) {
    static const char *const skipped[] = {"title",    "default",   "description", "examples", "deprecated",
                                          "readOnly", "writeOnly", "$comment",    "$schema"};
    static const char *const types[] = {"integer", "number", "string", "boolean", "null", "array", "object"};
    static const char *const rules[] = {"basic_integer", "basic_number", "basic_string", "basic_boolean",
                                        "basic_null",    "basic_array",  "basic_object"};
    if (json_is_true(s)) return "basic_any";
    if (!json_is_object(s)) return NULL;
    const char *key;
    json_t *v;
    const json_t *type = NULL;
    json_object_foreach((json_t *)s, key, v) {
        bool skip = false;
        for (size_t i = 0; i < sizeof skipped / sizeof *skipped && !skip; i++) skip = !strcmp(key, skipped[i]);
        if (skip) continue;
        if (strcmp(key, "type") || type) return NULL;
        type = v;
    }
    if (!type) return "basic_any";
    if (!json_is_string(type)) return NULL;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(json_string_value(type), types[i])) return rules[i];
    return NULL;
}

static bool add_basic(conv *c, const char *name, const char *body) {
    if (json_object_set_new_nocheck(c->names, name, json_true())) {
        coom(c);
        return false;
    }
    return add_rule(c, cdup(c, name), cdup(c, body));
}

static bool add_basic_rules(conv *c) {
    char *arr = cfmt(c, "((\"[\" %s basic_any (%s basic_any)* %s \"]\") | (\"[\" %s \"]\"))", c->start, c->mid, c->end,
                     c->start);
    char *obj = cfmt(c,
                     "(\"{\" %s basic_string %s basic_any (%s basic_string %s basic_any)* %s \"}\") | %s", c->start,
                     c->colon, c->mid, c->colon, c->end, c->empty_obj);
    const bool ok =
        arr && obj &&
        add_basic(c, "basic_escape", "[\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]") &&
        add_basic(c, "basic_string_sub",
                  "(\"\\\"\" | [^\\0-\\x1f\\\"\\\\\\r\\n] basic_string_sub | \"\\\\\" basic_escape basic_string_sub) "
                  "(= [ \\n\\t]* [,}\\]:])") &&
        add_basic(c, "basic_any", ANY_BODY) && add_basic(c, "basic_integer", "(\"0\" | \"-\"? [1-9] [0-9]*)") &&
        add_basic(c, "basic_number", "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?") &&
        add_basic(c, "basic_string", "[\"] basic_string_sub") &&
        add_basic(c, "basic_boolean", "\"true\" | \"false\"") &&
        add_basic(c, "basic_null", "\"null\"") && add_basic(c, "basic_array", arr) && add_basic(c, "basic_object", obj);
    free(arr);
    free(obj);
    return ok;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* alternatives of digit sequences, for integer and number ranges */

typedef struct alts {
    sb *out;
    bool any;  /* an alternative was started */
    bool body; /* the current alternative has an element */
} alts;

static void alt_start(alts *a) {
    if (a->any) sb_cat(a->out, " | ");
    a->any = true;
    a->body = false;
}

static void alt_piece(alts *a, const char *s) {
    if (a->body) sb_add(a->out, " ", 1);
    sb_cat(a->out, s);
    a->body = true;
}

static void alt_end(alts *a) {
    if (!a->body) sb_cat(a->out, "\"\"");
}

/* the literal s[0 .. n) of digits (nothing when n == 0) */
static void alt_lit(alts *a, const char *s, size_t n) {
    if (!n) return;
    if (a->body) sb_add(a->out, " ", 1);
    sb_add(a->out, "\"", 1);
    sb_add(a->out, s, n);
    sb_add(a->out, "\"", 1);
    a->body = true;
}

/* one digit in [lo, hi] */
static void alt_digit(alts *a, char lo, char hi) {
    char t[8];
    if (lo == hi) snprintf(t, sizeof t, "\"%c\"", lo);
    else snprintf(t, sizeof t, "[%c-%c]", lo, hi);
    alt_piece(a, t);
}

/* elem repeated lo .. hi times (hi -1: unbounded); elem is "[0-9]" or "\"0\"" */
static void alt_rep(alts *a, const char *elem, long lo, long hi) {
    char t[64];
    if (hi == 0) return;
    if (lo == hi) {
        if (lo == 1) snprintf(t, sizeof t, "%s", elem);
        else snprintf(t, sizeof t, "%s{%ld}", elem, lo);
    } else if (hi < 0) {
        if (lo == 0) snprintf(t, sizeof t, "%s*", elem);
        else if (lo == 1) snprintf(t, sizeof t, "%s+", elem);
        else snprintf(t, sizeof t, "%s{%ld,}", elem, lo);
    } else if (lo == 0 && hi == 1) snprintf(t, sizeof t, "%s?", elem);
    else snprintf(t, sizeof t, "%s{%ld,%ld}", elem, lo, hi);
    alt_piece(a, t);
}

/* digit strings of length n in [lo, hi] (same length, lo <= hi, no leading zero when n > 1) */
static void int_fixed(alts *a, const char *lo, const char *hi, size_t n) {
    size_t p = 0;
    while (p < n && lo[p] == hi[p]) p++;
    if (p == n) {
        alt_start(a);
        alt_lit(a, lo, n);
        alt_end(a);
        return;
    }
    const size_t m = n - p - 1; /* digits after the first difference */
    size_t z = m;               /* lo's tail without its trailing zeros */
    while (z > 0 && lo[p + z] == '0') z--;
    size_t y = m; /* hi's tail without its trailing nines */
    while (y > 0 && hi[p + y] == '9') y--;
    if (z > 0) { /* lo[p] followed by a tail >= lo's */
        for (size_t i = 0; i < z; i++) {
            const char d = lo[p + 1 + i];
            if (d == '9') continue;
            alt_start(a);
            alt_lit(a, lo, p + 1 + i);
            alt_digit(a, (char)(d + 1), '9');
            alt_rep(a, "[0-9]", (long)(m - i - 1), (long)(m - i - 1));
            alt_end(a);
        }
        alt_start(a);
        alt_lit(a, lo, p + 1 + z);
        alt_rep(a, "[0-9]", (long)(m - z), (long)(m - z));
        alt_end(a);
    }
    const char dlo = z == 0 ? lo[p] : (char)(lo[p] + 1), dhi = y == 0 ? hi[p] : (char)(hi[p] - 1);
    if (dlo <= dhi) {
        alt_start(a);
        alt_lit(a, lo, p);
        alt_digit(a, dlo, dhi);
        alt_rep(a, "[0-9]", (long)m, (long)m);
        alt_end(a);
    }
    if (y > 0) { /* hi[p] followed by a tail <= hi's */
        for (size_t i = 0; i < y; i++) {
            const char d = hi[p + 1 + i];
            if (d == '0') continue;
            alt_start(a);
            alt_lit(a, hi, p + 1 + i);
            alt_digit(a, '0', (char)(d - 1));
            alt_rep(a, "[0-9]", (long)(m - i - 1), (long)(m - i - 1));
            alt_end(a);
        }
        alt_start(a);
        alt_lit(a, hi, p + 1 + y);
        alt_rep(a, "[0-9]", (long)(m - y), (long)(m - y));
        alt_end(a);
    }
}

/* canonical non-negative integers in [lo, hi] (decimal strings, hi NULL: unbounded, lo <= hi) */
static void int_range(alts *a, sb *tmp, const char *lo, const char *hi) {
    if (!strcmp(lo, "0")) {
        alt_start(a);
        alt_lit(a, "0", 1);
        alt_end(a);
        if (hi && !strcmp(hi, "0")) return;
        lo = "1";
    }
    const size_t la = strlen(lo), lb = hi ? strlen(hi) : 0;
    if (hi && la == lb) {
        int_fixed(a, lo, hi, la);
        return;
    }
    sb_reset(tmp);
    for (size_t i = 0; i < la; i++) sb_add(tmp, "9", 1);
    if (tmp->oom) return;
    int_fixed(a, lo, tmp->s, la);
    if (!hi) {
        alt_start(a);
        alt_digit(a, '1', '9');
        alt_rep(a, "[0-9]", (long)la, -1);
        alt_end(a);
        return;
    }
    if (lb - la >= 2) { /* every length strictly between */
        alt_start(a);
        alt_digit(a, '1', '9');
        alt_rep(a, "[0-9]", (long)la, (long)(lb - 2));
        alt_end(a);
    }
    sb_reset(tmp);
    sb_add(tmp, "1", 1);
    for (size_t i = 1; i < lb; i++) sb_add(tmp, "0", 1);
    if (tmp->oom) return;
    int_fixed(a, tmp->s, hi, lb);
}

static void u64_str(char *buf, size_t n, uint64_t v) { snprintf(buf, n, "%" PRIu64, v); }

static uint64_t magnitude(int64_t v) { return v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v; }

/* integers in [lo, hi] (either side optional, lo <= hi): the rule body */
static char *int_range_body(conv *c, bool has_lo, int64_t lo, bool has_hi, int64_t hi) {
    sb out = {0}, sub = {0}, tmp = {0};
    alts a = {.out = &out};
    char x[32], y[32];
    if (!has_lo || lo < 0) { /* negative values: magnitudes in [|hi| or 1, |lo| or unbounded] */
        alts s = {.out = &sub};
        u64_str(x, sizeof x, has_hi && hi < 0 ? magnitude(hi) : 1);
        if (has_lo) u64_str(y, sizeof y, magnitude(lo));
        int_range(&s, &tmp, x, has_lo ? y : NULL);
        alt_start(&a);
        alt_piece(&a, "\"-\"");
        sb_add(&out, " (", 2);
        sb_add(&out, sub.s ? sub.s : "", sub.n);
        sb_add(&out, ")", 1);
    }
    if (!has_hi || hi >= 0) {
        u64_str(x, sizeof x, has_lo && lo > 0 ? (uint64_t)lo : 0);
        if (has_hi) u64_str(y, sizeof y, (uint64_t)hi);
        int_range(&a, &tmp, x, has_hi ? y : NULL);
    }
    const bool oom = sub.oom || tmp.oom;
    free(sub.s);
    free(tmp.s);
    char *body = sb_take(&out);
    if (!body || oom) {
        free(body);
        return coom(c);
    }
    char *r = cfmt(c, "(%s)", body);
    free(body);
    return r;
}

/* exact decimals with SO_JSON_PRECISION fraction digits: sign, integer digits (canonical), fraction digits */
typedef struct dec {
    bool neg;
    sb ip;
    char fp[SO_JSON_PRECISION + 1];
} dec;

static bool dec_zero(const dec *d) { return !strcmp(d->ip.s, "0") && strspn(d->fp, "0") == SO_JSON_PRECISION; }

/* the integer digit string s plus one (in place) */
static void digits_inc(sb *s) {
    size_t i = s->n;
    while (i > 0 && s->s[i - 1] == '9') s->s[--i] = '0';
    if (i > 0) {
        s->s[i - 1]++;
        return;
    }
    sb_add(s, "0", 1); /* all nines: 1 followed by zeros */
    if (s->oom) return;
    s->s[0] = '1';
}

/* the integer digit string s (> 0) minus one, canonical */
static void digits_dec(sb *s) {
    size_t i = s->n;
    while (i > 0 && s->s[i - 1] == '0') s->s[--i] = '9';
    if (i > 0) s->s[i - 1]--;
    size_t z = 0;
    while (z + 1 < s->n && s->s[z] == '0') z++;
    if (z) {
        memmove(s->s, s->s + z, s->n - z + 1);
        s->n -= z;
    }
}

static void mag_inc(dec *d) {
    int i = SO_JSON_PRECISION;
    while (i > 0 && d->fp[i - 1] == '9') d->fp[--i] = '0';
    if (i > 0) d->fp[i - 1]++;
    else digits_inc(&d->ip);
}

static void mag_dec(dec *d) { /* the magnitude is not zero */
    int i = SO_JSON_PRECISION;
    while (i > 0 && d->fp[i - 1] == '0') d->fp[--i] = '9';
    if (i > 0) d->fp[i - 1]--;
    else digits_dec(&d->ip);
}

/* the value plus (dir > 0) or minus one unit of the last decimal */
static void dec_step(dec *d, int dir) {
    if (dec_zero(d)) { /* 0 -> +-0.000001 */
        d->neg = dir < 0;
        d->fp[SO_JSON_PRECISION - 1] = '1';
    } else if ((dir > 0) == !d->neg) mag_inc(d);
    else {
        mag_dec(d);
        if (dec_zero(d)) d->neg = false;
    }
}

static int digits_cmp(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    const int r = strcmp(a, b);
    return r < 0 ? -1 : r > 0;
}

static int dec_cmp(const dec *a, const dec *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int r = digits_cmp(a->ip.s, b->ip.s);
    if (!r) r = strcmp(a->fp, b->fp);
    r = r < 0 ? -1 : r > 0;
    return a->neg ? -r : r;
}

/* v as the nearest decimal on the grid of SO_JSON_PRECISION digits, rounded up (dir > 0) or down; *exact when
 * the shortest decimal that reads back as v has no more digits. False when out of memory. */
static bool dec_from_double(double v, int dir, dec *d, bool *exact) {
    char buf[64];
    int p = 0;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof buf, "%.*e", p, v);
    d->neg = buf[0] == '-';
    const char *s = buf + d->neg;
    char digits[32];
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && nd < sizeof digits - 1) digits[nd++] = *s;
    digits[nd] = 0;
    const long e = *s == 'e' ? strtol(s + 1, NULL, 10) : 0;
    const long q = e + 1; /* digits before the decimal point */
    sb fr = {0};
    sb_reset(&d->ip);
    if (q <= 0) {
        sb_add(&d->ip, "0", 1);
        for (long i = 0; i < -q && i <= SO_JSON_PRECISION; i++) sb_add(&fr, "0", 1);
        sb_add(&fr, digits, nd);
    } else if ((size_t)q >= nd) {
        sb_add(&d->ip, digits, nd);
        for (long i = (long)nd; i < q; i++) sb_add(&d->ip, "0", 1);
    } else {
        sb_add(&d->ip, digits, (size_t)q);
        sb_add(&fr, digits + q, nd - (size_t)q);
    }
    /* canonical integer digits (a zero value prints as 0e+00) */
    size_t z = 0;
    while (d->ip.s && z + 1 < d->ip.n && d->ip.s[z] == '0') z++;
    if (z) {
        memmove(d->ip.s, d->ip.s + z, d->ip.n - z + 1);
        d->ip.n -= z;
    }
    *exact = true;
    for (size_t i = 0; i < fr.n; i++)
        if (i >= SO_JSON_PRECISION && fr.s[i] != '0') *exact = false;
    for (int i = 0; i < SO_JSON_PRECISION; i++) d->fp[i] = (size_t)i < fr.n ? fr.s[i] : '0';
    d->fp[SO_JSON_PRECISION] = 0;
    const bool oom = fr.oom || d->ip.oom || !d->ip.s;
    free(fr.s);
    if (oom) return false;
    if (!*exact && (dir > 0) == !d->neg) mag_inc(d);
    if (dec_zero(d)) d->neg = false;
    return !d->ip.oom;
}

static size_t trimmed(const char *t, size_t w) {
    while (w > 0 && t[w - 1] == '0') w--;
    return w;
}

/* the literal pre[0 .. np) followed by t[0 .. nt) */
static void alt_lit2(alts *a, const char *pre, size_t np, const char *t, size_t nt) {
    char buf[2 * SO_JSON_PRECISION + 2];
    memcpy(buf, pre, np);
    memcpy(buf + np, t, nt);
    alt_lit(a, buf, np + nt);
}

/* digit strings s of length (allow_empty ? 0 : 1) .. w, after the literal pre, whose value (padded with zeros
 * to w digits) is >= t (t has w digits) */
static void frac_ge(alts *a, const char *pre, size_t np, const char *t, size_t w, bool allow_empty) {
    const size_t r = trimmed(t, w);
    if (r == 0) {
        if (w == 0 && !allow_empty) return;
        alt_start(a);
        alt_lit(a, pre, np);
        alt_rep(a, "[0-9]", allow_empty ? 0 : 1, (long)w);
        alt_end(a);
        return;
    }
    for (size_t i = 0; i < r; i++) {
        if (t[i] == '9') continue;
        alt_start(a);
        alt_lit2(a, pre, np, t, i);
        alt_digit(a, (char)(t[i] + 1), '9');
        alt_rep(a, "[0-9]", 0, (long)(w - 1 - i));
        alt_end(a);
    }
    alt_start(a);
    alt_lit2(a, pre, np, t, r);
    alt_rep(a, "[0-9]", 0, (long)(w - r));
    alt_end(a);
}

/* the same, value <= t */
static void frac_le(alts *a, const char *pre, size_t np, const char *t, size_t w, bool allow_empty) {
    const size_t r = trimmed(t, w);
    if (r == 0) {
        if (w == 0 && !allow_empty) return;
        alt_start(a);
        alt_lit(a, pre, np);
        alt_rep(a, "\"0\"", allow_empty ? 0 : 1, (long)w);
        alt_end(a);
        return;
    }
    for (size_t i = 0; i < r; i++) {
        if (t[i] == '0') continue;
        alt_start(a);
        alt_lit2(a, pre, np, t, i);
        alt_digit(a, '0', (char)(t[i] - 1));
        alt_rep(a, "[0-9]", 0, (long)(w - 1 - i));
        alt_end(a);
    }
    for (size_t k = allow_empty ? 0 : 1; k < r; k++) { /* a prefix of t, ending early */
        alt_start(a);
        alt_lit2(a, pre, np, t, k);
        alt_end(a);
    }
    alt_start(a);
    alt_lit2(a, pre, np, t, r);
    alt_rep(a, "\"0\"", 0, (long)(w - r));
    alt_end(a);
}

/* the same, lo <= value <= hi */
static void frac_between(alts *a, const char *lo, const char *hi, size_t w, bool allow_empty) {
    size_t p = 0;
    while (p < w && lo[p] == hi[p]) p++;
    const size_t rl = trimmed(lo, w);
    if (p == w) {
        if (rl == 0) {
            alt_start(a);
            alt_rep(a, "\"0\"", allow_empty ? 0 : 1, (long)w);
            alt_end(a);
        } else {
            alt_start(a);
            alt_lit(a, lo, rl);
            alt_rep(a, "\"0\"", 0, (long)(w - rl));
            alt_end(a);
        }
        return;
    }
    const size_t k0 = allow_empty ? 0 : 1;
    for (size_t k = rl > k0 ? rl : k0; k <= p; k++) { /* ends within the common prefix, >= lo when lo ends there */
        alt_start(a);
        alt_lit(a, lo, k);
        alt_end(a);
    }
    frac_ge(a, lo, p + 1, lo + p + 1, w - p - 1, true);
    if (hi[p] - lo[p] > 1) {
        alt_start(a);
        alt_lit(a, lo, p);
        alt_digit(a, (char)(lo[p] + 1), (char)(hi[p] - 1));
        alt_rep(a, "[0-9]", 0, (long)(w - p - 1));
        alt_end(a);
    }
    frac_le(a, hi, p + 1, hi + p + 1, w - p - 1, true);
}

/* "." and the fraction digits: the alternatives in f (taken), optional when empty_ok */
static void frac_part(sb *out, sb *f, bool empty_ok) {
    sb_cat(out, empty_ok ? " (\".\" (" : " \".\" (");
    sb_add(out, f->s ? f->s : "", f->n);
    sb_cat(out, empty_ok ? "))?" : ")");
    if (f->oom) out->oom = true;
    free(f->s);
    *f = (sb){0};
}

static void alts_reset(alts *a) { a->any = a->body = false; }

/* non-negative decimals (at most SO_JSON_PRECISION decimals, no exponent) in [lo, hi] (hi NULL: unbounded) */
static void num_range(alts *a, sb *tmp, const dec *lo, const dec *hi) {
    static const char *const any_frac = "(\".\" [0-9]{1,6})?";
    const size_t w = SO_JSON_PRECISION;
    sb f = {0};
    alts fa = {.out = &f};
    const bool same = hi && !strcmp(lo->ip.s, hi->ip.s);
    /* lo's integer part with a fraction >= lo's (<= hi's too when hi has the same integer part) */
    alt_start(a);
    alt_lit(a, lo->ip.s, lo->ip.n);
    if (same) {
        frac_between(&fa, lo->fp, hi->fp, w, false);
        frac_part(a->out, &f, trimmed(lo->fp, w) == 0);
    } else if (trimmed(lo->fp, w) == 0) alt_piece(a, any_frac);
    else {
        frac_ge(&fa, "", 0, lo->fp, w, false);
        frac_part(a->out, &f, false);
    }
    a->body = true;
    if (same) return;
    /* integer parts strictly between, any fraction */
    sb i1 = {0}, i2 = {0}, sub = {0};
    sb_add(&i1, lo->ip.s, lo->ip.n);
    digits_inc(&i1);
    if (hi) {
        sb_add(&i2, hi->ip.s, hi->ip.n);
        digits_dec(&i2);
    }
    if (!i1.oom && !i2.oom && (!hi || digits_cmp(i1.s, i2.s) <= 0)) {
        alts s = {.out = &sub};
        int_range(&s, tmp, i1.s, hi ? i2.s : NULL);
        alt_start(a);
        sb_add(a->out, "(", 1);
        sb_add(a->out, sub.s ? sub.s : "", sub.n);
        sb_add(a->out, ") ", 2);
        sb_cat(a->out, any_frac);
        a->body = true;
    }
    if (i1.oom || i2.oom || sub.oom) a->out->oom = true;
    free(i1.s);
    free(i2.s);
    free(sub.s);
    if (!hi) return;
    /* hi's integer part with a fraction <= hi's */
    alt_start(a);
    alt_lit(a, hi->ip.s, hi->ip.n);
    alts_reset(&fa);
    frac_le(&fa, "", 0, hi->fp, w, false);
    frac_part(a->out, &f, true);
    a->body = true;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* schema nodes */

static char *visit_const(conv *c, const json_t *v) {
    sb t = {0}, b = {0};
    json_ser(&t, v);
    if (t.oom) {
        free(t.s);
        return coom(c);
    }
    ebnf_lit(&b, t.s, t.n);
    free(t.s);
    return ctake(c, &b);
}

static char *visit_enum(conv *c, const json_t *e) {
    if (!json_is_array(e)) return cfail(c, "enum must be an array");
    if (!json_array_size(e)) return cfail(c, "enum array must not be empty");
    sb b = {0}, t = {0};
    for (size_t i = 0; i < json_array_size(e); i++) {
        sb_reset(&t);
        json_ser(&t, json_array_get(e, i));
        if (t.oom) break;
        sb_cat(&b, i ? " | (" : "(");
        ebnf_lit(&b, t.s, t.n);
        sb_cat(&b, ")");
    }
    if (t.oom) b.oom = true;
    free(t.s);
    return ctake(c, &b);
}

static char *visit_anyof(conv *c, const json_t *list, const char *key, const char *rn) {
    if (!json_is_array(list)) return cfail(c, "%s must be an array", key);
    if (!json_array_size(list)) return cfail(c, "%s must not be empty", key);
    sb b = {0};
    char *hint = NULL;
    for (size_t i = 0; i < json_array_size(list) && !c->st; i++) {
        free(hint);
        hint = cfmt(c, "%s_case_%zu", rn, i);
        char *r = hint ? create_rule(c, json_array_get(list, i), hint) : NULL;
        if (!r) break;
        if (i) sb_cat(&b, " | ");
        sb_cat(&b, r);
        free(r);
    }
    free(hint);
    return ctake(c, &b);
}

static char *uri_rule(conv *c, const char *uri) {
    const json_t *hit = json_object_get(c->uri_rules, uri);
    if (hit) return cdup(c, json_string_value(hit));
    if (!strcmp(uri, "#")) return cdup(c, "root");
    if (strncmp(uri, "#/", 2)) return cdup(c, "basic_any"); /* xgrammar warns and allows any value */
    const char *p = uri + 2;
    const size_t len = strlen(p);
    const json_t *cur = c->root;
    sb prefix = {0}, seg = {0};
    for (size_t pos = 0; pos < len && !c->st;) {
        const char *slash = memchr(p + pos, '/', len - pos);
        const size_t end = slash ? (size_t)(slash - p) : len;
        if (prefix.n) sb_add(&prefix, "_", 1);
        for (size_t k = pos; k < end; k++)
            if (is_ident_char(p[k])) sb_add(&prefix, p + k, 1);
        if (end > pos) { /* a JSON pointer segment: ~1 is '/', ~0 is '~' */
            sb_reset(&seg);
            for (size_t k = pos; k < end; k++) {
                if (p[k] == '~' && k + 1 < end && (p[k + 1] == '0' || p[k + 1] == '1')) {
                    sb_add(&seg, p[k + 1] == '1' ? "/" : "~", 1);
                    k++;
                } else sb_add(&seg, p + k, 1);
            }
            if (seg.oom) break;
            const json_t *next = member(cur, seg.s);
            if (!next) cfail(c, "Cannot find field %s in %s", seg.s, uri);
            cur = next;
        }
        pos = end + 1;
    }
    const bool oom = prefix.oom || seg.oom;
    free(seg.s);
    char *hint = sb_take(&prefix);
    if (oom || !hint) {
        free(hint);
        return coom(c);
    }
    if (c->st) {
        free(hint);
        return NULL;
    }
    char *name = alloc_name(c, hint[0] ? hint : "ref"); /* * an empty prefix would be no name at all */
    free(hint);
    if (!name) return NULL;
    if (json_object_set_new_nocheck(c->uri_rules, uri, json_string(name))) {
        free(name);
        return coom(c);
    }
    char *body = visit(c, cur, name);
    char *ret = cdup(c, name);
    if (!add_rule(c, name, body)) {
        free(ret);
        return NULL;
    }
    return ret;
}

static char *visit_type_array(conv *c, const json_t *s, const json_t *types, const char *rn) {
    json_t *copy = json_copy((json_t *)s);
    if (!copy) return coom(c);
    char *ret = NULL;
    if (!json_array_size(types)) {
        json_object_del(copy, "type");
        ret = visit(c, copy, rn);
        json_decref(copy);
        return ret;
    }
    sb b = {0};
    for (size_t i = 0; i < json_array_size(types) && !c->st; i++) {
        json_t *t = json_array_get(types, i);
        if (!json_is_string(t)) {
            cfail(c, "type must be a string or an array of strings");
            break;
        }
        if (json_object_set(copy, "type", t)) {
            coom(c);
            break;
        }
        char *hint = cfmt(c, "%s_%s", rn, json_string_value(t));
        char *r = hint ? create_rule(c, copy, hint) : NULL;
        free(hint);
        if (!r) break;
        if (i) sb_cat(&b, " | ");
        sb_cat(&b, r);
        free(r);
    }
    json_decref(copy);
    return ctake(c, &b);
}

/* ---- integers and numbers ---- */

static bool int_bound(conv *c, const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (!json_is_real(v)) {
        cfail(c, "Value must be a number");
        return false;
    }
    const double d = json_real_value(v);
    if (d != floor(d)) {
        cfail(c, "Integer constraint must be a whole number");
        return false;
    }
    if (d == -9223372036854776000.0) {
        cfail(c, "Integer exceeds minimum limit due to precision loss at 64-bit boundary");
        return false;
    }
    if (d == 9223372036854776000.0) {
        cfail(c, "Integer exceeds maximum limit due to precision loss at 64-bit boundary");
        return false;
    }
    if (d > 9223372036854775807.0) {
        cfail(c, "Integer exceeds maximum limit");
        return false;
    }
    if (d < -9223372036854775807.0) {
        cfail(c, "Integer exceeds minimum limit");
        return false;
    }
    *out = (int64_t)d;
    return true;
}

static char *visit_integer(conv *c, const json_t *s) {
    const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum"),
                 *xmn = json_object_get(s, "exclusiveMinimum"), *xmx = json_object_get(s, "exclusiveMaximum");
    if (!mn && !mx && !xmn && !xmx) return cdup(c, "(\"0\" | \"-\"? [1-9] [0-9]*)");
    int64_t v, lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    if (mn) {
        if (!int_bound(c, mn, &v)) return NULL;
        lo = v, has_lo = true;
    }
    if (mx) {
        if (!int_bound(c, mx, &v)) return NULL;
        hi = v, has_hi = true;
    }
    if (xmn) {
        if (!int_bound(c, xmn, &v)) return NULL;
        if (v == INT64_MAX) return cfail(c, "exclusiveMinimum would cause integer overflow");
        if (!has_lo || v + 1 > lo) lo = v + 1; /* * the stricter bound wins (0.1.29: the exclusive one) */
        has_lo = true;
    }
    if (xmx) {
        if (!int_bound(c, xmx, &v)) return NULL;
        if (v == INT64_MIN) return cfail(c, "exclusiveMaximum would cause integer underflow");
        if (!has_hi || v - 1 < hi) hi = v - 1;
        has_hi = true;
    }
    if (has_lo && has_hi && lo > hi) return cfail(c, "Invalid range: minimum greater than maximum");
    return int_range_body(c, has_lo, lo, has_hi, hi);
}

static bool num_bound(conv *c, const json_t *s, const char *key, const json_t **v, double *out) {
    *v = json_object_get(s, key);
    if (!*v) return true;
    if (!json_is_number(*v)) {
        cfail(c, "%s must be a number", key);
        return false;
    }
    *out = json_number_value(*v);
    return true;
}

static char *visit_number(conv *c, const json_t *s) {
    const json_t *jmn, *jmx, *jxmn, *jxmx;
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    if (!num_bound(c, s, "minimum", &jmn, &mn) || !num_bound(c, s, "exclusiveMinimum", &jxmn, &xmn) ||
        !num_bound(c, s, "maximum", &jmx, &mx) || !num_bound(c, s, "exclusiveMaximum", &jxmx, &xmx))
        return NULL;
    if (!jmn && !jmx && !jxmn && !jxmx)
        return cdup(c, "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+-]? [0-9]+)?");
    /* the stricter bound wins; on a tie the exclusive one (xgrammar HEAD) */
    const bool has_lo = jmn || jxmn, has_hi = jmx || jxmx;
    const bool ex_lo = jxmn && (!jmn || xmn >= mn), ex_hi = jxmx && (!jmx || xmx <= mx);
    const double lo = ex_lo ? xmn : mn, hi = ex_hi ? xmx : mx;
    if (has_lo && has_hi && (lo > hi || (lo == hi && (ex_lo || ex_hi)))) return cfail(c, "Invalid range: empty range");
    dec L = {0}, H = {0};
    bool exact, ok = true;
    if (has_lo) {
        ok = dec_from_double(lo, +1, &L, &exact);
        if (ok && exact && ex_lo) dec_step(&L, +1);
    }
    if (has_hi && ok) {
        ok = dec_from_double(hi, -1, &H, &exact);
        if (ok && exact && ex_hi) dec_step(&H, -1);
    }
    char *ret = NULL;
    if (!ok || L.ip.oom || H.ip.oom) ret = coom(c);
    else if (has_lo && has_hi && dec_cmp(&L, &H) > 0) ret = cfail(c, "Invalid range: empty range");
    else {
        sb out = {0}, tmp = {0}, sub = {0};
        alts a = {.out = &out};
        if (!has_lo || L.neg) { /* negative values: "-" and a magnitude in [|H| or 0.000001, |L| or unbounded] */
            dec ylo = {0};
            sb_cat(&ylo.ip, "0");
            memset(ylo.fp, '0', SO_JSON_PRECISION);
            ylo.fp[SO_JSON_PRECISION - 1] = '1';
            const dec *y0 = &ylo;
            dec yhi = {0}, yh = {0};
            if (has_hi && H.neg) {
                sb_add(&yh.ip, H.ip.s, H.ip.n);
                memcpy(yh.fp, H.fp, sizeof yh.fp);
                y0 = &yh;
            }
            if (has_lo) {
                sb_add(&yhi.ip, L.ip.s, L.ip.n);
                memcpy(yhi.fp, L.fp, sizeof yhi.fp);
            }
            alts s = {.out = &sub};
            if (!ylo.ip.oom && !yh.ip.oom && !yhi.ip.oom) num_range(&s, &tmp, y0, has_lo ? &yhi : NULL);
            if (ylo.ip.oom || yh.ip.oom || yhi.ip.oom) out.oom = true;
            free(ylo.ip.s);
            free(yh.ip.s);
            free(yhi.ip.s);
            alt_start(&a);
            alt_piece(&a, "\"-\"");
            sb_add(&out, " (", 2);
            sb_add(&out, sub.s ? sub.s : "", sub.n);
            sb_add(&out, ")", 1);
        }
        if (!has_hi || !H.neg) { /* values >= 0 */
            dec zero = {0};
            sb_cat(&zero.ip, "0");
            memset(zero.fp, '0', SO_JSON_PRECISION);
            if (!zero.ip.oom) num_range(&a, &tmp, has_lo && !L.neg ? &L : &zero, has_hi ? &H : NULL);
            else out.oom = true;
            free(zero.ip.s);
        }
        if (tmp.oom || sub.oom) out.oom = true;
        free(tmp.s);
        free(sub.s);
        char *body = sb_take(&out);
        ret = body ? cfmt(c, "(%s)", body) : coom(c);
        free(body);
    }
    free(L.ip.s);
    free(H.ip.s);
    return ret;
}

/* ---- strings ---- */

/* the regex of a built-in string format, read over the decoded string (xgrammar's, RFC 3339 / 5321 / 3986 /
 * 6570 / 6901), or NULL */
static char *format_regex(conv *c, const char *f) {
    static const char *const hex2 = "%[0-9A-Fa-f][0-9A-Fa-f]";
    if (!strcmp(f, "email")) { /* * the quoted local part over the decoded string: "..." with \ escapes */
        static const char *const atext = "[\\w!#$%&'*+/=?^`{|}~-]";
        return cfmt(c,
                    "^((%s+(\\.%s+)*)|\"(\\\\[\\x20-\\x7E]|[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E])*\")@"
                    "([A-Za-z0-9]([\\-A-Za-z0-9]*[A-Za-z0-9])?)((\\.[A-Za-z0-9][\\-A-Za-z0-9]*[A-Za-z0-9])*)$",
                    atext, atext);
    }
#define RFC3339_DATE                                                                                        \
    "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))"
    /* * dates and times: a subset of xgrammar's that is always valid RFC 3339 (its regexes allow April 31,
     * February 30 and a leap second at any time of day, which a validator refuses: found by
     * tests/server/node/structured.mjs with ajv-formats): days per month, February to the 28th, seconds 00-59 */
    if (!strcmp(f, "date")) return cdup(c, "^(" RFC3339_DATE ")$");
    if (!strcmp(f, "time"))
        return cdup(c, "^([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$");
    if (!strcmp(f, "date-time")) /* * minutes 00-59 (HEAD; 0.1.29 had them swapped with the seconds) */
        return cdup(c, "^(" RFC3339_DATE ")T([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d"
                       "(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$");
    if (!strcmp(f, "duration"))
        return cdup(c, "^P((\\d+D|\\d+M(\\d+D)?|\\d+Y(\\d+M(\\d+D)?)?)(T(\\d+S|\\d+M(\\d+S)?|\\d+H(\\d+M(\\d+S)?)?))?"
                       "|T(\\d+S|\\d+M(\\d+S)?|\\d+H(\\d+M(\\d+S)?)?)|\\d+W)$");
    if (!strcmp(f, "ipv4")) {
        /* * octets without leading zeros (xgrammar's [0-1]?\\d?\\d allows 018, which validators refuse) */
        static const char *const b = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
        return cfmt(c, "^(%s\\.){3}%s$", b, b);
    }
    if (!strcmp(f, "ipv6")) {
        static const char *const b = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"; /* * (as ipv4's) */
        return cfmt(c,
                    "(([0-9a-fA-F]{1,4}:){7,7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|"
                    "([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|"
                    "([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|"
                    "([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:((:[0-9a-fA-F]{1,4}){1,6})|"
                    ":((:[0-9a-fA-F]{1,4}){1,7}|:)|::(ffff(:0{1,4}){0,1}:){0,1}(%s\\.){3,3}%s|"
                    "([0-9a-fA-F]{1,4}:){1,4}:(%s\\.){3,3}%s)",
                    b, b, b, b);
    }
    if (!strcmp(f, "hostname")) /* * labels of at most 63 characters (RFC 1123) */
        return cdup(c, "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$");
    if (!strcmp(f, "uuid"))
        return cdup(c, "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$");
    if (!strcmp(f, "uri") || !strcmp(f, "uri-reference")) {
        char *pchar = cfmt(c, "([\\w\\.~!$&'()*+,;=:@-]|%s)", hex2);
        char *qf = cfmt(c, "([\\w\\.~!$&'()*+,;=:@/\\?-]|%s)*", hex2);
        char *userinfo = cfmt(c, "([\\w\\.~!$&'()*+,;=:-]|%s)*", hex2);
        char *host = cfmt(c, "([\\w\\.~!$&'()*+,;=-]|%s)*", hex2);
        char *seg_nz_nc = cfmt(c, "([\\w\\.~!$&'()*+,;=@-]|%s)+", hex2);
        char *r = NULL;
        if (pchar && qf && userinfo && host && seg_nz_nc) {
            if (!strcmp(f, "uri"))
                r = cfmt(c, "^[a-zA-Z][a-zA-Z+\\.-]*:(//(%s@)?%s(:\\d*)?(/%s*)*|/?(%s+(/%s*)*)?)(\\?%s)?(#%s)?$",
                         userinfo, host, pchar, pchar, pchar, qf, qf);
            else
                r = cfmt(c, "^(//(%s@)?%s(:\\d*)?(/%s*)*|/(%s+(/%s*)*)?|%s(/%s*)*)?(\\?%s)?(#%s)?$", userinfo, host,
                         pchar, pchar, pchar, seg_nz_nc, pchar, qf, qf);
        }
        free(pchar);
        free(qf);
        free(userinfo);
        free(host);
        free(seg_nz_nc);
        return r;
    }
    if (!strcmp(f, "uri-template")) {
        char *varchar = cfmt(c, "(\\w|%s)", hex2);
        char *varspec = varchar ? cfmt(c, "%s(\\.?%s)*(:[1-9]\\d?\\d?\\d?|\\*)?", varchar, varchar) : NULL;
        char *r = varspec ? cfmt(c,
                                 "^(([\\x21\\x23-\\x24\\x26\\x28-\\x3B\\x3D\\x3F-\\x5B\\x5D\\x5F\\x61-\\x7A\\x7E]|%s)|"
                                 "\\{([+#\\./;\\?&=,!@|])?%s(,%s)*\\})*$",
                                 hex2, varspec, varspec)
                          : NULL;
        free(varchar);
        free(varspec);
        return r;
    }
    if (!strcmp(f, "json-pointer")) return cdup(c, "^(/([\\x00-\\x2E]|[\\x30-\\x7D]|[\\x7F-\\U0010FFFF]|~[01])*)*$");
    if (!strcmp(f, "relative-json-pointer"))
        return cdup(c, "^(0|[1-9][0-9]*)(#|(/([\\x00-\\x2E]|[\\x30-\\x7D]|[\\x7F-\\U0010FFFF]|~[01])*)*)$");
    return NULL;
}

/* a regex over a JSON string's decoded body as an EBNF expression (JSON escapes), malloc'd */
static char *regex_ebnf(conv *c, const char *re, size_t len) {
    if (c->st) return NULL;
    char *out = NULL;
    const vllm_status st = so_regex_to_ebnf(re, len, true, &out);
    if (st == VLLM_ERR_NO_MEMORY) return coom(c);
    if (st != VLLM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vllm_last_error());
        return cfail(c, "%s", msg);
    }
    return out;
}

/* the rule named "string" (or string_N) with this body, shared by equal bodies (xgrammar's string spec cache) */
static char *string_rule(conv *c, char *body) {
    if (!body) return NULL;
    const json_t *hit = json_object_get(c->string_rules, body);
    if (hit) {
        free(body);
        return cdup(c, json_string_value(hit));
    }
    char *key = cdup(c, body);
    char *name = new_rule(c, "string", body);
    if (name && key && json_object_set_new_nocheck(c->string_rules, key, json_string(name))) {
        free(name);
        name = coom(c);
    }
    free(key);
    return name;
}

static bool count_field(conv *c, const json_t *s, const char *key, long long *out) {
    const json_t *v = json_object_get(s, key);
    if (!v) return true;
    if (!json_is_integer(v)) {
        cfail(c, "%s must be an integer", key);
        return false;
    }
    const json_int_t n = json_integer_value(v);
    if (n < 0) {
        cfail(c, "%s must be a non-negative integer", key);
        return false;
    }
    if (n > SO_JSON_MAX_COUNT) {
        cfail(c, "%s above %lld is not supported", key, SO_JSON_MAX_COUNT);
        return false;
    }
    *out = (long long)n;
    return true;
}

static char *visit_string(conv *c, const json_t *s) {
    const json_t *f = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    if (f) {
        if (!json_is_string(f)) return cfail(c, "format must be a string");
        char *re = format_regex(c, json_string_value(f));
        if (re) {
            char *e = regex_ebnf(c, re, strlen(re));
            free(re);
            if (!e) return NULL;
            char *body = cfmt(c, "\"\\\"\" (%s) \"\\\"\"", e);
            free(e);
            return string_rule(c, body);
        }
        if (c->st) return NULL; /* an unknown format is a plain string (vLLM refuses it first) */
    }
    if (pat) {
        if (!json_is_string(pat)) return cfail(c, "pattern must be a string");
        char *e = regex_ebnf(c, json_string_value(pat), json_string_length(pat));
        if (!e) return NULL;
        char *body = cfmt(c, "\"\\\"\" (%s) \"\\\"\"", e);
        free(e);
        return string_rule(c, body);
    }
    long long mn = 0, mx = -1;
    if (!count_field(c, s, "minLength", &mn) || !count_field(c, s, "maxLength", &mx)) return NULL;
    if (mx >= 0 && mn > mx) return cfail(c, "minLength %lld is greater than maxLength %lld", mn, mx);
    if (mn == 0 && mx < 0) return cdup(c, "basic_string");
    char hi[32] = "";
    if (mx >= 0) snprintf(hi, sizeof hi, "%lld", mx);
    /* * no raw control character (0.1.29: [^"\\\r\n]); escapes are not read, as in xgrammar */
    return string_rule(c, cfmt(c, "\"\\\"\" [^\\0-\\x1f\\\"\\\\]{%lld,%s} \"\\\"\"", mn, hi));
}

/* ---- arrays ---- */

/* item min .. max times (xgrammar's EBNFScriptCreator::Repeat) */
static char *repeat(conv *c, const char *item, long long mn, long long mx) {
    if (mn == 0 && mx == 1) return cfmt(c, "%s?", item);
    if (mn == 0 && mx == -1) return cfmt(c, "%s*", item);
    if (mn == 1 && mx == -1) return cfmt(c, "%s+", item);
    if (mn == 0 && mx == 0) return cdup(c, "");
    if (mn == mx) return cfmt(c, "%s{%lld}", item, mn);
    if (mx == -1) return cfmt(c, "%s{%lld,}", item, mn);
    return cfmt(c, "%s{%lld,%lld}", item, mn, mx);
}

static char *visit_array(conv *c, const json_t *s, const char *rn) {
    const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items"),
                 *uneval = json_object_get(s, "unevaluatedItems"), *addl = NULL;
    size_t np = 0;
    if (prefix) {
        if (!json_is_array(prefix)) return cfail(c, "prefixItems must be an array");
        np = json_array_size(prefix);
        for (size_t i = 0; i < np; i++) {
            const json_t *it = json_array_get(prefix, i);
            if (json_is_false(it)) return cfail(c, "prefixItems contains false");
            if (!json_is_boolean(it) && !json_is_object(it))
                return cfail(c, "prefixItems must be an array of objects or booleans");
        }
    }
    if (items) {
        if (!json_is_boolean(items) && !json_is_object(items)) return cfail(c, "items must be a boolean or an object");
        addl = json_is_false(items) ? NULL : items;
    } else if (uneval) {
        if (!json_is_boolean(uneval) && !json_is_object(uneval))
            return cfail(c, "unevaluatedItems must be a boolean or an object");
        addl = json_is_false(uneval) ? NULL : uneval;
    } else if (!c->strict) addl = json_true();
    long long mn = 0, mx = -1, mc = 0;
    const json_t *v = json_object_get(s, "minItems");
    if (v) {
        if (!json_is_integer(v)) return cfail(c, "minItems must be an integer");
        mn = json_integer_value(v) > 0 ? (long long)json_integer_value(v) : 0;
    }
    if ((v = json_object_get(s, "minContains"))) {
        if (!json_is_integer(v)) return cfail(c, "minContains must be an integer");
        mc = (long long)json_integer_value(v);
        if (mc > mn) mn = mc;
    }
    if ((v = json_object_get(s, "maxItems"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return cfail(c, "maxItems must be a non-negative integer");
        mx = (long long)json_integer_value(v);
    }
    if (mn > SO_JSON_MAX_COUNT || mx > SO_JSON_MAX_COUNT)
        return cfail(c, "minItems / maxItems above %lld are not supported", SO_JSON_MAX_COUNT);
    if (mx != -1 && mn > mx) return cfail(c, "minItems is greater than maxItems: %lld > %lld", mn, mx);
    if (mx != -1 && mx < (long long)np)
        return cfail(c, "maxItems is less than the number of prefixItems: %lld < %zu", mx, np);
    if (!addl && (long long)np < mn)
        return cfail(c, "minItems is greater than the number of prefixItems, but additional items are not allowed: "
                        "%lld > %zu",
                     mn, np);

    char **item_rules = np ? calloc(np, sizeof *item_rules) : NULL;
    if (np && !item_rules) return coom(c);
    char *add = NULL, *ret = NULL;
    for (size_t i = 0; i < np && !c->st; i++) {
        char *hint = cfmt(c, "%s_item_%zu", rn, i);
        if (hint) item_rules[i] = create_rule(c, json_array_get(prefix, i), hint);
        free(hint);
    }
    if (addl && !c->st) {
        char *hint = cfmt(c, "%s_additional", rn);
        if (hint) add = create_rule(c, addl, hint);
        free(hint);
    }
    if (!c->st) {
        char *empty = cfmt(c, "(\"[\" %s \"]\")", c->start);
        if (!np) {
            if (!addl || (mn == 0 && mx == 0)) {
                ret = empty;
                empty = NULL;
            } else {
                char *item = cfmt(c, "(%s %s)", c->mid, add);
                char *rep = item ? repeat(c, item, mn == 0 ? 0 : mn - 1, mx == -1 ? -1 : mx - 1) : NULL;
                if (rep && empty) {
                    if (mn == 0)
                        ret = cfmt(c, "((\"[\" %s %s %s %s \"]\") | %s)", c->start, add, rep, c->end, empty);
                    else ret = cfmt(c, "(\"[\" %s %s %s %s \"]\")", c->start, add, rep, c->end);
                }
                free(item);
                free(rep);
            }
        } else {
            sb p = {0};
            sb_add(&p, "(", 1);
            for (size_t i = 0; i < np; i++) {
                if (i) {
                    sb_add(&p, " ", 1);
                    sb_cat(&p, c->mid);
                    sb_add(&p, " ", 1);
                }
                sb_cat(&p, item_rules[i]);
            }
            sb_add(&p, ")", 1);
            char *ps = ctake(c, &p);
            if (ps && !addl) ret = cfmt(c, "(\"[\" %s %s %s \"]\")", c->start, ps, c->end);
            else if (ps) {
                char *item = cfmt(c, "(%s %s)", c->mid, add);
                const long long lo = mn - (long long)np > 0 ? mn - (long long)np : 0;
                char *rep = item ? repeat(c, item, lo, mx == -1 ? -1 : mx - (long long)np) : NULL;
                if (rep) ret = cfmt(c, "(\"[\" %s %s %s %s \"]\")", c->start, ps, rep, c->end);
                free(item);
                free(rep);
            }
            free(ps);
        }
        free(empty);
    }
    for (size_t i = 0; i < np; i++) free(item_rules[i]);
    free(item_rules);
    free(add);
    if (c->st) {
        free(ret);
        return NULL;
    }
    return ret;
}

/* ---- objects ---- */

/* pattern repeated so that already + the repeats is within [mn, mx] (xgrammar's GetPropertyWithNumberConstrains) */
static char *count_repeat(conv *c, const char *pat, long long mn, long long mx, long long already) {
    if (mx == already) return cdup(c, "\"\"");
    const long long lo = mn - already > 0 ? mn - already : 0, hi = mx - already > -1 ? mx - already : -1;
    if (lo == 0 && hi == -1) return cfmt(c, "(%s)*", pat);
    if (lo == 0 && hi == 1) return cfmt(c, "(%s)?", pat);
    if (lo == 1 && hi == 1) return cdup(c, pat);
    if (mx == -1) return cfmt(c, "(%s){%lld,} ", pat, lo);
    return cfmt(c, "(%s){%lld,%lld} ", pat, lo, hi);
}

typedef struct objspec {
    const json_t *props, *pattern_props, *addl;
    json_t *req;        /* required names (a set) */
    json_t *prop_names; /* propertyNames as a string schema, or NULL */
    const char *suffix;
    long long mn, mx;
} objspec;

/* `xgrammar: properties "k": value, in order, optional ones skippable, then other properties (pattern A)` with
 * no property count constraint: xgrammar's rules, text for text */
static char *props_plain(conv *c, const char *rn, char **pats, const bool *req, size_t n, const char *A, size_t n_req) {
    char **names = calloc(n, sizeof *names);
    if (!names) return coom(c);
    if (A) {
        char *hint = cfmt(c, "%s_part_%zu", rn, n - 1);
        char *body = cfmt(c, "(%s %s)*", c->mid, A);
        names[n - 1] = hint ? new_rule(c, hint, body) : (free(body), NULL);
        free(hint);
    } else names[n - 1] = cdup(c, "\"\"");
    for (size_t k = n - 1; k-- > 0 && !c->st;) {
        char *body = req[k + 1] ? cfmt(c, "%s %s %s", c->mid, pats[k + 1], names[k + 1])
                                : cfmt(c, "%s | %s %s %s", names[k + 1], c->mid, pats[k + 1], names[k + 1]);
        char *hint = cfmt(c, "%s_part_%zu", rn, k);
        names[k] = hint ? new_rule(c, hint, body) : (free(body), NULL);
        free(hint);
    }
    sb b = {0};
    if (!c->st) {
        sb_cat(&b, c->start);
        sb_cat(&b, " (");
        for (size_t i = 0; i < n; i++) {
            if (i) sb_cat(&b, " | ");
            sb_fmt(&b, "(%s %s)", pats[i], names[i]);
            if (req[i]) break;
        }
        if (A && n_req == 0) sb_fmt(&b, " | %s %s", A, names[n - 1]);
        sb_cat(&b, ") ");
        sb_cat(&b, c->end);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return ctake(c, &b);
}

/* * the same with minProperties / maxProperties: rules <rn>_part_<i>_<k> read properties i+1 .. with k of them
 * written so far (k saturates at minProperties when there is no maximum); only states that can still end within
 * [mn, mx] are referenced (xgrammar builds the same kind of table, with mistakes) */
static char *props_counted(conv *c, const char *rn, char **pats, const bool *req, size_t n, const char *A,
                           size_t n_req, long long mn, long long mx) {
    const long long cap = mx >= 0 ? mx : mn; /* >= 1 here */
    if ((double)n * (double)cap > SO_JSON_MAX_RULES)
        return cfail(c, "minProperties / maxProperties with %zu properties need more than %d grammar rules", n,
                     SO_JSON_MAX_RULES);
    const size_t w = (size_t)cap + 1;
    char **t = calloc(n * w, sizeof *t);
    size_t *req_after = calloc(n, sizeof *req_after);
    if (!t || !req_after) {
        free(t);
        free(req_after);
        return coom(c);
    }
    for (size_t i = n - 1; i-- > 0;) req_after[i] = req_after[i + 1] + (req[i + 1] ? 1 : 0);
#define SAT(k) (mx >= 0 ? (k) : ((k) < cap ? (k) : cap))
#define FEASIBLE(i, k) \
    ((mx < 0 || (k) + (long long)req_after[i] <= mx) && (A || (k) + (long long)(n - 1 - (i)) >= mn))
    for (size_t i = n; i-- > 0 && !c->st;) {
        const long long kmax = (long long)i + 1 < cap ? (long long)i + 1 : cap;
        for (long long k = 1; k <= kmax && !c->st; k++) {
            if (!FEASIBLE(i, k)) continue;
            char *body = NULL;
            if (i == n - 1) {
                if (A) {
                    char *pat = cfmt(c, "%s %s", c->mid, A);
                    body = pat ? count_repeat(c, pat, mn, mx, k) : NULL;
                    free(pat);
                } else body = cdup(c, "\"\"");
            } else {
                sb b = {0};
                const long long k2 = SAT(k + 1);
                bool any = false;
                if (!req[i + 1] && FEASIBLE(i + 1, k)) {
                    sb_cat(&b, t[(i + 1) * w + (size_t)k]);
                    any = true;
                }
                if ((mx < 0 || k + 1 <= mx) && FEASIBLE(i + 1, k2)) {
                    sb_fmt(&b, "%s%s %s %s", any ? " | " : "", c->mid, pats[i + 1], t[(i + 1) * w + (size_t)k2]);
                    any = true;
                }
                if (!any) sb_cat(&b, "\"\""); /* not reached: a feasible state has a way on */
                body = ctake(c, &b);
            }
            char *hint = cfmt(c, "%s_part_%zu_%lld", rn, i, k);
            t[i * w + (size_t)k] = hint ? new_rule(c, hint, body) : (free(body), NULL);
            free(hint);
        }
    }
    sb b = {0};
    bool any = false;
    if (!c->st) {
        sb_cat(&b, c->start);
        sb_cat(&b, " (");
        const long long k1 = SAT(1);
        for (size_t i = 0; i < n; i++) {
            if (mx != 0 && FEASIBLE(i, k1)) {
                sb_fmt(&b, "%s(%s %s)", any ? " | " : "", pats[i], t[i * w + (size_t)k1]);
                any = true;
            }
            if (req[i]) break;
        }
        if (A && n_req == 0 && mx != 0) {
            char *pat = cfmt(c, "%s %s", c->mid, A);
            char *rep = pat ? count_repeat(c, pat, mn, mx, 1) : NULL;
            if (rep) sb_fmt(&b, "%s(%s %s)", any ? " | " : "", A, rep);
            any = any || rep;
            free(pat);
            free(rep);
        }
        sb_cat(&b, ") ");
        sb_cat(&b, c->end);
    }
#undef SAT
#undef FEASIBLE
    for (size_t i = 0; i < n * w; i++) free(t[i]);
    free(t);
    free(req_after);
    if (!c->st && !any) {
        free(b.s);
        return cfail(c, "the property count constraints of the object cannot be met");
    }
    return ctake(c, &b);
}

static bool parse_object(conv *c, const json_t *s, objspec *o) {
    *o = (objspec){.mn = 0, .mx = -1};
    o->props = json_object_get(s, "properties");
    if (o->props && !json_is_object(o->props)) return cfail(c, "properties must be an object"), false;
    const json_t *req = json_object_get(s, "required");
    if (req && !json_is_array(req)) return cfail(c, "required must be an array"), false;
    if (!(o->req = json_object())) return coom(c), false;
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return cfail(c, "required must be an array of strings"), false;
        if (json_object_set_new_nocheck(o->req, json_string_value(r), json_true())) return coom(c), false;
    }
    o->pattern_props = json_object_get(s, "patternProperties");
    if (o->pattern_props && !json_is_object(o->pattern_props))
        return cfail(c, "patternProperties must be an object"), false;
    const json_t *pn = json_object_get(s, "propertyNames");
    if (pn) {
        if (!json_is_object(pn)) return cfail(c, "propertyNames must be an object"), false;
        const json_t *t = json_object_get(pn, "type");
        if (json_is_string(t) && strcmp(json_string_value(t), "string"))
            return cfail(c, "propertyNames must be an object that validates string"), false;
        /* * names must come out as JSON strings */
        const json_t *e = json_object_get(pn, "enum"), *k = json_object_get(pn, "const");
        bool strings = !k || json_is_string(k);
        for (size_t i = 0; json_is_array(e) && i < json_array_size(e); i++)
            strings = strings && json_is_string(json_array_get(e, i));
        if (!strings) return cfail(c, "propertyNames must be an object that validates string"), false;
        if (json_object_get(pn, "$ref") || json_object_get(pn, "anyOf") || json_object_get(pn, "oneOf") ||
            json_object_get(pn, "allOf"))
            return cfail(c, "propertyNames with $ref, anyOf, oneOf or allOf is not supported"), false;
        o->prop_names = json_copy((json_t *)pn);
        if (!o->prop_names || json_object_set_new(o->prop_names, "type", json_string("string")))
            return coom(c), false;
    }
    const json_t *ap = json_object_get(s, "additionalProperties");
    const bool allow_add = ap && !json_is_false(ap);
    bool allow_uneval;
    const json_t *uneval = NULL;
    if (ap) allow_uneval = allow_add;
    else {
        uneval = json_object_get(s, "unevaluatedProperties");
        if (!uneval) uneval = c->strict ? json_false() : json_true();
        allow_uneval = !json_is_false(uneval);
    }
    if (allow_add) o->addl = ap, o->suffix = "addl";
    else if (allow_uneval) o->addl = uneval, o->suffix = "uneval";
    if (!count_field(c, s, "minProperties", &o->mn) || !count_field(c, s, "maxProperties", &o->mx)) return false;
    if (o->mx != -1 && o->mn > o->mx)
        return cfail(c, "minProperties is greater than maxProperties: %lld > %lld", o->mn, o->mx), false;
    const long long n_req = (long long)json_object_size(o->req);
    if (o->mx != -1 && n_req > o->mx)
        return cfail(c, "maxProperties is less than the number of required properties: %lld < %lld", o->mx, n_req),
               false;
    const long long n_props = o->props ? (long long)json_object_size(o->props) : 0;
    if ((!o->pattern_props || !json_object_size(o->pattern_props)) && !o->prop_names && !allow_add && !allow_uneval &&
        o->mn > n_props)
        return cfail(c,
                     "minProperties is greater than the number of properties, but additional properties aren't "
                     "allowed: %lld > %lld",
                     o->mn, n_props),
               false;
    return true;
}

static char *visit_object(conv *c, const json_t *s, const char *rn) {
    objspec o;
    sb b = {0};
    char *A = NULL, *part = NULL;
    bool could_be_empty = false;
    if (!parse_object(c, s, &o)) goto out;
    sb_cat(&b, "\"{\"");
    const size_t n_pattern = o.pattern_props ? json_object_size(o.pattern_props) : 0;
    const size_t n_props = o.props ? json_object_size(o.props) : 0;
    if (n_pattern || o.prop_names) { /* patternProperties or propertyNames: any number of matching properties */
        if (o.mx != 0) {
            sb pb = {0};
            sb_add(&pb, "(", 1);
            if (n_pattern) {
                const char *key;
                json_t *v;
                size_t i = 0;
                json_object_foreach((json_t *)o.pattern_props, key, v) {
                    char *hint = cfmt(c, "%s_prop_%zu", rn, i);
                    char *value = hint ? create_rule(c, v, hint) : NULL;
                    char *kre = value ? regex_ebnf(c, key, strlen(key)) : NULL;
                    if (kre)
                        sb_fmt(&pb, "%s(%s \"\\\"\" (%s) \"\\\"\" %s %s)", i ? " | " : "", c->start, kre, c->colon,
                               value);
                    free(hint);
                    free(value);
                    free(kre);
                    if (c->st) break;
                    i++;
                }
                sb_add(&pb, ")", 1);
            } else {
                char *hint = cfmt(c, "%s_name", rn);
                char *kr = hint ? create_rule(c, o.prop_names, hint) : NULL;
                if (kr) sb_fmt(&pb, "%s %s %s basic_any)", c->start, kr, c->colon);
                free(hint);
                free(kr);
            }
            char *body = ctake(c, &pb);
            char *hint = cfmt(c, "%s_prop", rn);
            char *pr = hint && body ? new_rule(c, hint, body) : (free(body), NULL);
            free(hint);
            char *pat = pr ? cfmt(c, "%s %s", c->mid, pr) : NULL;
            char *rep = pat ? count_repeat(c, pat, o.mn, o.mx, 1) : NULL;
            if (rep) sb_fmt(&b, " %s %s %s", pr, rep, c->end);
            free(pr);
            free(pat);
            free(rep);
            could_be_empty = o.mn == 0;
        }
    } else if (n_props) { /* properties (and maybe others after them) */
        char **pats = calloc(n_props, sizeof *pats);
        bool *req = calloc(n_props, sizeof *req);
        if (!pats || !req) coom(c);
        const char *key;
        json_t *v;
        size_t i = 0;
        json_object_foreach((json_t *)o.props, key, v) {
            if (c->st || o.mx == 0) break; /* maxProperties 0: xgrammar makes no property rule */
            char *hint = cfmt(c, "%s_prop_%zu", rn, i);
            char *value = hint ? create_rule(c, v, hint) : NULL;
            free(hint);
            if (!value) break;
            sb kb = {0}, kt = {0};
            json_str(&kt, key, strlen(key), false); /* * the key as a JSON string */
            ebnf_lit(&kb, kt.s ? kt.s : "", kt.n);
            sb_fmt(&kb, " %s %s", c->colon, value);
            if (kt.oom) kb.oom = true;
            free(kt.s);
            free(value);
            pats[i] = ctake(c, &kb);
            req[i] = json_object_get(o.req, key) != NULL;
            i++;
        }
        if (o.addl && o.mx != 0 && !c->st) {
            char *hint = cfmt(c, "%s_%s", rn, o.suffix);
            char *value = hint ? create_rule(c, o.addl, hint) : NULL;
            if (value) A = cfmt(c, "basic_string %s %s", c->colon, value);
            free(hint);
            free(value);
        }
        if (!c->st) {
            if (o.mx == 0) part = cdup(c, "");
            else if (o.mn == 0 && o.mx == -1)
                part = props_plain(c, rn, pats, req, n_props, A, json_object_size(o.req));
            else part = props_counted(c, rn, pats, req, n_props, A, json_object_size(o.req), o.mn, o.mx);
            if (part) sb_fmt(&b, " %s", part);
        }
        for (size_t k = 0; pats && k < n_props; k++) free(pats[k]);
        free(pats);
        free(req);
        could_be_empty = json_object_size(o.req) == 0 && o.mn == 0;
    } else if (o.addl) { /* only other properties */
        if (o.mx != 0) {
            char *hint = cfmt(c, "%s_%s", rn, o.suffix);
            char *value = hint ? create_rule(c, o.addl, hint) : NULL;
            char *pat = value ? cfmt(c, "basic_string %s %s", c->colon, value) : NULL;
            char *mp = pat ? cfmt(c, "%s %s", c->mid, pat) : NULL;
            char *rep = mp ? count_repeat(c, mp, o.mn, o.mx, 1) : NULL;
            if (rep) sb_fmt(&b, " %s %s %s %s", c->start, pat, rep, c->end);
            free(hint);
            free(value);
            free(pat);
            free(mp);
            free(rep);
        }
        could_be_empty = o.mn == 0;
    }
    sb_cat(&b, " \"}\"");
    if (could_be_empty && !c->st && !b.oom) {
        if (!strcmp(b.s, "\"{\"  \"}\"")) {
            sb_reset(&b);
            sb_cat(&b, c->empty_obj);
        } else {
            char *r = sb_take(&b);
            if (r) sb_fmt(&b, "(%s) | %s", r, c->empty_obj);
            else b.oom = true;
            free(r);
        }
    }
out:
    json_decref(o.req);
    json_decref(o.prop_names);
    free(A);
    free(part);
    if (c->st) {
        free(b.s);
        return NULL;
    }
    return ctake(c, &b);
}

/* ---- dispatch ---- */

static char *visit_inner(conv *c, const json_t *s, const char *rn) {
    if (json_is_true(s)) return cdup(c, ANY_BODY);
    if (json_is_false(s)) return cfail(c, "Schema 'false' cannot accept any value");
    if (!json_is_object(s)) {
        sb t = {0};
        json_ser(&t, s);
        char *txt = ctake(c, &t);
        if (txt && strlen(txt) > 200) strcpy(txt + 197, "...");
        cfail(c, "Schema should be an object or bool, but got %s", txt ? txt : "");
        free(txt);
        return NULL;
    }
    const json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        if (!json_is_string(v)) return cfail(c, "$ref must be a string");
        return uri_rule(c, json_string_value(v));
    }
    if ((v = json_object_get(s, "const"))) return visit_const(c, v);
    if ((v = json_object_get(s, "enum"))) return visit_enum(c, v);
    if ((v = json_object_get(s, "anyOf"))) return visit_anyof(c, v, "anyOf", rn);
    if ((v = json_object_get(s, "oneOf"))) return visit_anyof(c, v, "oneOf", rn);
    if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v)) return cfail(c, "allOf must be an array");
        if (json_array_size(v) == 1) {
            char *hint = cfmt(c, "%s_case_0", rn);
            char *r = hint ? visit(c, json_array_get(v, 0), hint) : NULL;
            free(hint);
            return r;
        }
        return cdup(c, ANY_BODY); /* several: xgrammar 0.1.29 fuses them into {} */
    }
    if ((v = json_object_get(s, "type"))) {
        if (json_is_array(v)) return visit_type_array(c, s, v, rn);
        if (!json_is_string(v)) return cfail(c, "Type should be a string");
        const char *t = json_string_value(v);
        if (!strcmp(t, "integer")) return visit_integer(c, s);
        if (!strcmp(t, "number")) return visit_number(c, s);
        if (!strcmp(t, "string")) return visit_string(c, s);
        if (!strcmp(t, "boolean")) return cdup(c, "\"true\" | \"false\"");
        if (!strcmp(t, "null")) return cdup(c, "\"null\"");
        if (!strcmp(t, "array")) return visit_array(c, s, rn);
        if (!strcmp(t, "object")) return visit_object(c, s, rn);
        return cfail(c, "Unsupported type \"%s\"", t);
    }
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
        json_object_get(s, "unevaluatedProperties"))
        return visit_object(c, s, rn);
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems") || json_object_get(s, "unevaluatedItems"))
        return visit_array(c, s, rn);
    return cdup(c, ANY_BODY);
}

static char *visit(conv *c, const json_t *s, const char *rn) {
    if (c->st) return NULL;
    if (c->depth >= SO_JSON_MAX_DEPTH) return cfail(c, "the schema is nested deeper than %d levels", SO_JSON_MAX_DEPTH);
    c->depth++;
    char *r = visit_inner(c, s, rn);
    c->depth--;
    if (c->st) {
        free(r);
        return NULL;
    }
    return r;
}

/* xgrammar's CreateRuleFromSchema: the basic rule the schema is, or a new rule named from hint; the name */
static char *create_rule(conv *c, const json_t *s, const char *hint) {
    if (c->st) return NULL;
    const char *basic = basic_name(s);
    if (basic) return strcmp(hint, "root") ? cdup(c, basic) : new_rule(c, hint, cdup(c, basic));
    char *name = alloc_name(c, hint);
    if (!name) return NULL;
    char *body = visit(c, s, name);
    char *ret = cdup(c, name);
    if (!add_rule(c, name, body)) {
        free(ret);
        return NULL;
    }
    return ret;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* vLLM's checks before xgrammar (vllm/v1/structured_output/backend_xgrammar.py) */

static bool doc_depth_ok(const json_t *j, int d) {
    if (d > SO_JSON_MAX_DOC_DEPTH) return false;
    if (json_is_object(j)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v) if (!doc_depth_ok(v, d + 1)) return false;
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++)
            if (!doc_depth_ok(json_array_get(j, i), d + 1)) return false;
    }
    return true;
}

static bool has_type(const json_t *o, const char *t) {
    const json_t *v = json_object_get(o, "type");
    if (json_is_string(v)) return !strcmp(json_string_value(v), t);
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (json_is_string(e) && !strcmp(json_string_value(e), t)) return true;
    }
    return false;
}

static bool has(const json_t *o, const char *k) { return json_object_get(o, k) != NULL; }

static bool pattern_and_lengths(const json_t *o) {
    return (has(o, "pattern") || has(o, "format")) && (has(o, "minLength") || has(o, "maxLength"));
}

/* has_xgrammar_unsupported_json_features */
static bool unsupported(const json_t *o) {
    static const char *const formats[] = {"email", "date",     "time", "date-time", "duration",      "ipv4",
                                          "ipv6",  "hostname", "uuid", "uri",       "uri-reference", "uri-template",
                                          "json-pointer", "relative-json-pointer"};
    if (!json_is_object(o)) return false;
    if ((has_type(o, "integer") || has_type(o, "number")) && has(o, "multipleOf")) return true;
    if (has_type(o, "array") &&
        (has(o, "uniqueItems") || has(o, "contains") || has(o, "minContains") || has(o, "maxContains")))
        return true;
    if (has_type(o, "string")) {
        const json_t *f = json_object_get(o, "format");
        if (f) {
            bool known = false;
            for (size_t i = 0; json_is_string(f) && i < sizeof formats / sizeof *formats && !known; i++)
                known = !strcmp(json_string_value(f), formats[i]);
            if (!known) return true;
        }
        if (pattern_and_lengths(o)) return true;
    }
    if (has_type(o, "object")) {
        const json_t *pn = json_object_get(o, "propertyNames"), *pp = json_object_get(o, "patternProperties"),
                     *up = json_object_get(o, "unevaluatedProperties");
        if (json_is_object(pn) && pattern_and_lengths(pn)) return true;
        if (pn && (has(o, "properties") || pp || json_is_object(json_object_get(o, "additionalProperties")) ||
                   (up && !json_is_true(up))))
            return true;
        if (json_is_object(pp) && (has(o, "properties") || json_object_size(pp) > 1)) return true;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (json_is_object(v) && unsupported(v)) return true;
        for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
            if (unsupported(json_array_get(v, i))) return true;
    }
    return false;
}

/* the node a local $ref names (vLLM's _resolve_local_json_ref), or NULL */
static const json_t *vllm_resolve(const json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const char *p = ref + 1;
    size_t len = strlen(p);
    while (len && *p == '/') p++, len--;
    while (len && p[len - 1] == '/') len--;
    if (!len) return root;
    const json_t *cur = root;
    sb seg = {0};
    for (size_t pos = 0; pos <= len && cur;) {
        const char *slash = memchr(p + pos, '/', len - pos);
        const size_t end = slash ? (size_t)(slash - p) : len;
        sb_reset(&seg);
        sb_add(&seg, "", 0);
        for (size_t k = pos; k < end; k++) {
            if (p[k] == '~' && k + 1 < end && (p[k + 1] == '0' || p[k + 1] == '1')) {
                sb_add(&seg, p[k + 1] == '1' ? "/" : "~", 1);
                k++;
            } else sb_add(&seg, p + k, 1);
        }
        cur = seg.oom || !seg.s ? NULL : member(cur, seg.s);
        pos = end + 1;
    }
    free(seg.s);
    return cur;
}

typedef struct cyc_node {
    const json_t *j;
    int need;     /* groups not yet satisfied */
    int sat;      /* bit g: group g satisfied */
    int edges;    /* first edge from this node to a node that waits on it */
    bool done;    /* known to terminate */
} cyc_node;

typedef struct cyc_edge {
    int parent, group, next;
} cyc_edge;

typedef struct cyc {
    cyc_node *n;
    int nn, cn;
    cyc_edge *e;
    int ne, ce;
    const json_t **keys; /* pointer -> node index + 1, open addressing */
    int *vals;
    size_t cap;
    bool oom;
} cyc;

static size_t ptr_hash(const json_t *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static int cyc_node_of(cyc *y, const json_t *j) {
    if ((size_t)(y->nn + 1) * 2 > y->cap) {
        const size_t cap = y->cap ? 2 * y->cap : 64;
        const json_t **keys = calloc(cap, sizeof *keys);
        int *vals = calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            y->oom = true;
            return -1;
        }
        for (size_t i = 0; i < y->cap; i++) {
            if (!y->keys[i]) continue;
            size_t h = ptr_hash(y->keys[i], cap);
            while (keys[h]) h = (h + 1) & (cap - 1);
            keys[h] = y->keys[i];
            vals[h] = y->vals[i];
        }
        free(y->keys);
        free(y->vals);
        y->keys = keys;
        y->vals = vals;
        y->cap = cap;
    }
    size_t h = ptr_hash(j, y->cap);
    while (y->keys[h] && y->keys[h] != j) h = (h + 1) & (y->cap - 1);
    if (y->keys[h]) return y->vals[h] - 1;
    if (y->nn == y->cn) {
        const int cap = y->cn ? 2 * y->cn : 64;
        cyc_node *n = realloc(y->n, (size_t)cap * sizeof *n);
        if (!n) {
            y->oom = true;
            return -1;
        }
        y->n = n;
        y->cn = cap;
    }
    y->n[y->nn] = (cyc_node){.j = j, .edges = -1};
    y->keys[h] = j;
    y->vals[h] = y->nn + 1;
    return y->nn++;
}

static void cyc_edge_add(cyc *y, int child, int parent, int group) {
    if (child < 0) return;
    if (y->ne == y->ce) {
        const int cap = y->ce ? 2 * y->ce : 64;
        cyc_edge *e = realloc(y->e, (size_t)cap * sizeof *e);
        if (!e) {
            y->oom = true;
            return;
        }
        y->e = e;
        y->ce = cap;
    }
    y->e[y->ne] = (cyc_edge){.parent = parent, .group = group, .next = y->n[child].edges};
    y->n[child].edges = y->ne++;
}

/* has_non_terminating_ref_cycle as a least fixpoint: a node terminates unless it is a $ref to a node that does
 * not, or all branches of its anyOf (or of its oneOf) do not; computed by propagation (linear). -1 when out of
 * memory, 1 when the root does not terminate */
static int ref_cycle(const json_t *root) {
    cyc y = {0};
    int ret = -1;
    const int r = cyc_node_of(&y, root);
    for (int i = 0; i < y.nn && !y.oom; i++) {
        const json_t *j = y.n[i].j;
        const json_t *ref = json_object_get(j, "$ref");
        if (json_is_string(ref)) {
            const json_t *t = vllm_resolve(root, json_string_value(ref));
            if (json_is_object(t)) {
                const int k = cyc_node_of(&y, t);
                if (y.oom) break;
                cyc_edge_add(&y, k, i, 0);
                y.n[i].need = 1;
            }
            continue;
        }
        static const char *const keys[] = {"anyOf", "oneOf"};
        for (int g = 0; g < 2 && !y.oom; g++) {
            const json_t *list = json_object_get(j, keys[g]);
            if (!json_is_array(list) || !json_array_size(list)) continue;
            bool leaf = false;
            for (size_t b = 0; b < json_array_size(list); b++) leaf = leaf || !json_is_object(json_array_get(list, b));
            if (leaf) continue; /* a branch that is not an object terminates */
            y.n[i].need++;
            for (size_t b = 0; b < json_array_size(list) && !y.oom; b++) {
                const int k = cyc_node_of(&y, json_array_get(list, b));
                cyc_edge_add(&y, k, i, g);
            }
        }
    }
    if (!y.oom) {
        int *stack = malloc((size_t)(y.nn ? y.nn : 1) * sizeof *stack);
        if (stack) {
            int top = 0;
            for (int i = 0; i < y.nn; i++)
                if (!y.n[i].need) y.n[i].done = true, stack[top++] = i;
            while (top) {
                const int i = stack[--top];
                for (int e = y.n[i].edges; e >= 0; e = y.e[e].next) {
                    cyc_node *p = &y.n[y.e[e].parent];
                    if (p->done || (p->sat & (1 << y.e[e].group))) continue;
                    p->sat |= 1 << y.e[e].group;
                    if (--p->need == 0) p->done = true, stack[top++] = y.e[e].parent;
                }
            }
            ret = y.n[r].done ? 0 : 1;
            free(stack);
        }
    }
    free(y.n);
    free(y.e);
    free(y.keys);
    free(y.vals);
    return ret;
}

/* ------------------------------------------------------------------------------------------------------------ */

so_json_options so_json_default_options(void) { return (so_json_options){.any_whitespace = true, .strict = true}; }

vllm_status so_json_schema_to_ebnf(const json_t *schema, const so_json_options *o, char **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "so_json_schema_to_ebnf: no output");
    *out = NULL;
    if (!schema) return vt_error(VLLM_ERR_INVALID_ARG, "so_json_schema_to_ebnf: no schema");
    const so_json_options opts = o ? *o : so_json_default_options();
    if (!doc_depth_ok(schema, 0))
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "Failed to transform json schema into a grammar: the schema is nested deeper than %d levels",
                        SO_JSON_MAX_DOC_DEPTH);
    if (json_is_object(schema)) {
        if (unsupported(schema)) return vt_error(VLLM_ERR_INVALID_ARG, "%s", UNSUPPORTED);
        const int cy = ref_cycle(schema);
        if (cy < 0) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory converting a JSON schema to a grammar");
        if (cy) return vt_error(VLLM_ERR_INVALID_ARG, "%s", REF_CYCLE);
    }
    conv c = {.root = schema, .any_ws = opts.any_whitespace, .strict = opts.strict};
    if (c.any_ws) {
        c.start = c.end = "[ \\n\\t]*";
        c.mid = "[ \\n\\t]* \",\" [ \\n\\t]*";
        c.colon = "[ \\n\\t]* \":\" [ \\n\\t]*";
        c.empty_obj = "\"{\" [ \\n\\t]* \"}\"";
    } else {
        c.start = c.end = "\"\"";
        c.mid = "\", \"";
        c.colon = "\": \"";
        c.empty_obj = "\"{\" \"}\"";
    }
    c.names = json_object();
    c.next_suffix = json_object();
    c.uri_rules = json_object();
    c.string_rules = json_object();
    char *text = NULL;
    if (!c.names || !c.next_suffix || !c.uri_rules || !c.string_rules) coom(&c);
    else if (add_basic_rules(&c)) {
        char *root = create_rule(&c, schema, "root");
        free(root);
    }
    if (!c.st) {
        sb b = {0};
        for (int i = 0; i < c.n_rules; i++) {
            sb_cat(&b, c.rules[i].name);
            sb_cat(&b, " ::= ");
            sb_cat(&b, c.rules[i].body);
            sb_add(&b, "\n", 1);
        }
        text = ctake(&c, &b);
    }
    for (int i = 0; i < c.n_rules; i++) {
        free(c.rules[i].name);
        free(c.rules[i].body);
    }
    free(c.rules);
    json_decref(c.names);
    json_decref(c.next_suffix);
    json_decref(c.uri_rules);
    json_decref(c.string_rules);
    if (c.st) {
        free(text);
        return c.st;
    }
    *out = text;
    return VLLM_OK;
}

vllm_status so_json_schema_text_to_ebnf(const char *text, size_t len, const so_json_options *o, char **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "so_json_schema_text_to_ebnf: no output");
    *out = NULL;
    json_error_t err;
    json_t *schema = text ? json_loadb(text, len, JSON_DECODE_ANY, &err) : NULL;
    if (!schema) return vt_error(VLLM_ERR_INVALID_ARG, "Invalid JSON grammar specification.");
    const vllm_status st = so_json_schema_to_ebnf(schema, o, out);
    json_decref(schema);
    return st;
}
