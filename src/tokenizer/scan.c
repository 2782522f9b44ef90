/*
 * scan.c: a small purpose-built JSON scanner for the big parts of tokenizer.json.
 *
 * jansson builds a node per value: for a 150k-entry vocab and 150k merges (each merge an
 * array of two strings) that is ~600k allocations, most of the load time. Instead the loader
 * finds the byte ranges of model.vocab and model.merges here, hands the rest of the file (with
 * those two values replaced by {} and []) to jansson, and bpe.c parses the two ranges directly
 * with tok_scan_string / tok_scan_int. Any surprise in the structure makes tok_scan_model
 * return false and the loader falls back to jansson for the whole file (and its messages).
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

#define SCAN_MAX_DEPTH 1024

void tok_scan_ws(const char **p, const char *end) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
    *p = s;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static vllm_status bad(const char *what, const char *path) {
    return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s: invalid JSON string (%s)", path, what);
}

vllm_status tok_scan_string(const char **p, const char *end, const char *path, tok_buf *out) {
    const char *s = *p;
    if (s >= end || *s != '"') return bad("expected '\"'", path);
    s++;
    if (out) out->len = 0;
    vllm_status st = VLLM_OK;
    for (;;) {
        const char *run = s;
        while (s < end && (unsigned char)*s >= 0x20 && *s != '"' && *s != '\\' && (unsigned char)*s < 0x80) s++;
        if (out && s > run && (st = tok_buf_append(out, run, (size_t)(s - run)))) return st;
        if (s >= end) return bad("unterminated", path);
        unsigned char c = (unsigned char)*s;
        if (c == '"') break;
        if (c < 0x20) return bad("control character", path);
        if (c >= 0x80) {
            uint32_t cp;
            size_t n = tok_utf8_decode(s, (size_t)(end - s), &cp);
            if (n == 0) return bad("invalid UTF-8", path);
            if (out && (st = tok_buf_append(out, s, n))) return st;
            s += n;
            continue;
        }
        /* escape */
        if (end - s < 2) return bad("unterminated escape", path);
        char e = s[1];
        s += 2;
        char ch = 0;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            int u = end - s >= 4 ? hex4(s) : -1;
            if (u < 0) return bad("bad \\u escape", path);
            s += 4;
            uint32_t cp = (uint32_t)u;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
                int lo = end - s >= 6 && s[0] == '\\' && s[1] == 'u' ? hex4(s + 2) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return bad("lone surrogate", path);
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                s += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return bad("lone surrogate", path);
            } else if (cp == 0) {
                return bad("\\u0000 is not allowed", path); /* as jansson: keys are C strings */
            }
            if (out && (st = tok_buf_append_cp(out, cp))) return st;
            continue;
        }
        default:
            return bad("bad escape", path);
        }
        if (out && (st = tok_buf_append(out, &ch, 1))) return st;
    }
    if (out && !out->data && (st = tok_buf_append(out, "", 0))) return st;
    *p = s + 1;
    return VLLM_OK;
}

int tok_scan_int(const char **p, const char *end, int64_t max, int64_t *out) {
    const char *s = *p;
    bool neg = s < end && *s == '-';
    if (neg) s++;
    if (s >= end || *s < '0' || *s > '9') return -1;
    if (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9') return -1; /* leading zero */
    int64_t v = 0;
    bool big = false;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v > (INT64_MAX - 9) / 10) big = true;
        else v = v * 10 + (*s - '0');
    }
    if (s < end && (*s == '.' || *s == 'e' || *s == 'E')) return -2; /* a real number */
    *p = s;
    *out = neg ? -v : v;
    return big || *out > max || *out < 0 ? 1 : 0;
}

/* Skips one value without building it (strings are checked; the rest is left to jansson,
 * which parses everything outside the two scanned ranges). */
static bool skip_value(const char **p, const char *end) {
    const char *s = *p;
    int depth = 0;
    do {
        tok_scan_ws(&s, end);
        if (s >= end) return false;
        char c = *s;
        if (c == '"') {
            if (tok_scan_string(&s, end, "", NULL)) return false;
        } else if (c == '{' || c == '[') {
            if (++depth > SCAN_MAX_DEPTH) return false;
            s++;
        } else if (c == '}' || c == ']') {
            if (--depth < 0) return false;
            s++;
        } else if (c == ',' || c == ':') {
            if (depth == 0) return false;
            s++;
        } else { /* number or literal */
            const char *start = s;
            while (s < end && !strchr(" \t\r\n,:[]{}\"", *s)) s++;
            if (s == start) return false;
        }
    } while (depth > 0);
    *p = s;
    return true;
}

/* Walks the members of the object at *p; for each key calls visit (which must consume the
 * value). Returns false on anything unexpected. */
typedef bool (*member_fn)(void *ctx, const char *key, size_t key_len, const char **p, const char *end);

static bool walk_object(const char **p, const char *end, member_fn visit, void *ctx) {
    const char *s = *p;
    tok_scan_ws(&s, end);
    if (s >= end || *s != '{') return false;
    s++;
    tok_scan_ws(&s, end);
    if (s < end && *s == '}') {
        *p = s + 1;
        return true;
    }
    tok_buf key = {0};
    bool ok = false;
    for (;;) {
        tok_scan_ws(&s, end);
        if (tok_scan_string(&s, end, "", &key)) break;
        tok_scan_ws(&s, end);
        if (s >= end || *s != ':') break;
        s++;
        tok_scan_ws(&s, end);
        if (!visit(ctx, key.data, key.len, &s, end)) break;
        tok_scan_ws(&s, end);
        if (s < end && *s == ',') {
            s++;
            continue;
        }
        if (s < end && *s == '}') {
            s++;
            ok = true;
        }
        break;
    }
    tok_buf_free(&key);
    if (ok) *p = s;
    return ok;
}

typedef struct scan_ctx {
    const char *vocab, *vocab_end, *merges, *merges_end;
} scan_ctx;

static bool visit_model(void *vctx, const char *key, size_t key_len, const char **p, const char *end) {
    scan_ctx *c = vctx;
    const char *start = *p;
    if (!skip_value(p, end)) return false;
    /* (a repeated key: the last one wins, as in jansson) */
    if (key_len == 5 && memcmp(key, "vocab", 5) == 0) {
        c->vocab = *start == '{' ? start : NULL;
        c->vocab_end = *p;
    } else if (key_len == 6 && memcmp(key, "merges", 6) == 0) {
        c->merges = *start == '[' ? start : NULL;
        c->merges_end = *p;
    }
    return true;
}

static bool visit_root(void *vctx, const char *key, size_t key_len, const char **p, const char *end) {
    scan_ctx *c = vctx;
    if (key_len == 5 && memcmp(key, "model", 5) == 0) {
        c->vocab = c->merges = NULL;
        if (**p == '{') return walk_object(p, end, visit_model, c);
    }
    return skip_value(p, end);
}

/* Appends [s, e) as an empty container of the same kind, keeping the line count. */
static vllm_status placeholder(tok_buf *b, const char *s, const char *e) {
    vllm_status st = tok_buf_append(b, s, 1); /* '{' or '[' */
    for (const char *q = s; q < e && !st; q++)
        if (*q == '\n') st = tok_buf_append(b, "\n", 1);
    return st ? st : tok_buf_append(b, *s == '{' ? "}" : "]", 1);
}

bool tok_scan_model(const char *json, size_t len, tok_bpe_raw *raw, char **rest, size_t *rest_len) {
    memset(raw, 0, sizeof *raw);
    *rest = NULL;
    *rest_len = 0;
    scan_ctx c = {0};
    const char *p = json, *end = json + len;
    if (!walk_object(&p, end, visit_root, &c)) return false;
    tok_scan_ws(&p, end);
    if (p != end || (!c.vocab && !c.merges)) return false;
    /* rest = json with the ranges replaced, in file order */
    const char *r[2][2] = {{c.vocab, c.vocab_end}, {c.merges, c.merges_end}};
    if (r[0][0] && r[1][0] && r[1][0] < r[0][0]) {
        const char *t0 = r[0][0], *t1 = r[0][1];
        r[0][0] = r[1][0], r[0][1] = r[1][1];
        r[1][0] = t0, r[1][1] = t1;
    }
    tok_buf b = {0};
    const char *at = json;
    vllm_status st = VLLM_OK;
    for (int i = 0; i < 2 && !st; i++) {
        if (!r[i][0]) continue;
        st = tok_buf_append(&b, at, (size_t)(r[i][0] - at));
        if (!st) st = placeholder(&b, r[i][0], r[i][1]);
        at = r[i][1];
    }
    if (!st) st = tok_buf_append(&b, at, (size_t)(end - at));
    if (st) {
        tok_buf_free(&b);
        return false;
    }
    raw->vocab = c.vocab;
    raw->vocab_len = c.vocab ? (size_t)(c.vocab_end - c.vocab) : 0;
    raw->merges = c.merges;
    raw->merges_len = c.merges ? (size_t)(c.merges_end - c.merges) : 0;
    *rest = b.data;
    *rest_len = b.len;
    return true;
}
