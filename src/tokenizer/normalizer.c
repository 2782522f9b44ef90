/*
 * normalizer.c: tokenizer.json "normalizer" components, built from JSON and applied to the
 * text between added tokens: Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase,
 * Strip, StripAccents, ByteLevel. Other types are VLLM_ERR_UNSUPPORTED at load.
 */
#include "tokenizer/internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef enum tok_norm_type {
    TOK_NORM_SEQUENCE,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_STRIP,
    TOK_NORM_STRIP_ACCENTS,
    TOK_NORM_BYTELEVEL,
} tok_norm_type;

struct tok_normalizer {
    tok_norm_type type;
    char *text; /* Prepend: prefix; Replace: content */
    size_t text_len;
    tok_pattern pattern;             /* Replace */
    bool strip_left, strip_right;    /* Strip */
    tok_normalizer **children;       /* Sequence */
    size_t n_children;
};

void tok_normalizer_free(tok_normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_children; i++) tok_normalizer_free(n->children[i]);
    free(n->children);
    free(n->text);
    tok_pattern_free(&n->pattern);
    free(n);
}

vllm_status tok_normalizer_load(json_t *j, const char *path, tok_normalizer **out) {
    *out = NULL;
    const char *type;
    vllm_status st = tok_json_type(j, path, &type);
    if (st) return st;
    tok_normalizer *n = calloc(1, sizeof *n);
    if (!n) return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (normalizer)");
    const char *s;
    size_t len;
    if (strcmp(type, "Sequence") == 0) {
        n->type = TOK_NORM_SEQUENCE;
        json_t *arr = json_object_get(j, "normalizers");
        if (!json_is_array(arr)) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.normalizers must be an array", path);
            goto fail;
        }
        size_t count = json_array_size(arr);
        n->children = calloc(count ? count : 1, sizeof *n->children);
        if (!n->children) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (normalizer)");
            goto fail;
        }
        for (size_t i = 0; i < count; i++) {
            char sub[TOK_PATH_MAX];
            tok_pathf(sub, "%s.normalizers[%zu]", path, i);
            if ((st = tok_normalizer_load(json_array_get(arr, i), sub, &n->children[i]))) goto fail;
            n->n_children++;
        }
    } else if (strcmp(type, "Prepend") == 0) {
        n->type = TOK_NORM_PREPEND;
        if ((st = tok_json_str(j, "prepend", true, path, &s, &len))) goto fail;
        if ((st = tok_strndup(s, len, &n->text))) goto fail;
        n->text_len = len;
    } else if (strcmp(type, "Replace") == 0) {
        n->type = TOK_NORM_REPLACE;
        char sub[TOK_PATH_MAX];
        tok_pathf(sub, "%s.pattern", path);
        if ((st = tok_pattern_load(json_object_get(j, "pattern"), sub, &n->pattern))) goto fail;
        if ((st = tok_json_str(j, "content", true, path, &s, &len))) goto fail;
        if ((st = tok_strndup(s, len, &n->text))) goto fail;
        n->text_len = len;
    } else if (strcmp(type, "NFC") == 0) {
        n->type = TOK_NORM_NFC;
    } else if (strcmp(type, "NFD") == 0) {
        n->type = TOK_NORM_NFD;
    } else if (strcmp(type, "NFKC") == 0) {
        n->type = TOK_NORM_NFKC;
    } else if (strcmp(type, "NFKD") == 0) {
        n->type = TOK_NORM_NFKD;
    } else if (strcmp(type, "Lowercase") == 0) {
        n->type = TOK_NORM_LOWERCASE;
    } else if (strcmp(type, "Strip") == 0) {
        n->type = TOK_NORM_STRIP;
        if ((st = tok_json_bool(j, "strip_left", true, path, &n->strip_left))) goto fail;
        if ((st = tok_json_bool(j, "strip_right", true, path, &n->strip_right))) goto fail;
    } else if (strcmp(type, "StripAccents") == 0) {
        n->type = TOK_NORM_STRIP_ACCENTS;
    } else if (strcmp(type, "ByteLevel") == 0) {
        n->type = TOK_NORM_BYTELEVEL;
    } else {
        st = vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": %s type '%s' not supported yet", path, type);
        goto fail;
    }
    *out = n;
    return VLLM_OK;
fail:
    tok_normalizer_free(n);
    return st;
}

/* Unicode normalization forms through utf8proc. */
static vllm_status apply_unicode_form(utf8proc_option_t opts, const char *s, size_t len, tok_buf *out) {
    if (len > (size_t)PTRDIFF_MAX) return vt_error(VLLM_ERR_TOO_LONG, "tokenizer: text too long to normalize");
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      opts | UTF8PROC_STABLE);
    if (n < 0) {
        free(dst);
        return vt_error(n == UTF8PROC_ERROR_NOMEM ? VLLM_ERR_NO_MEMORY : VLLM_ERR_INVALID_ARG,
                        "tokenizer: unicode normalization failed: %s", utf8proc_errmsg(n));
    }
    vllm_status st = tok_buf_append(out, dst, (size_t)n);
    free(dst);
    return st;
}

static vllm_status apply_replace(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    tok_spans m = {0};
    vllm_status st = tok_pattern_find(&n->pattern, s, len, &m);
    size_t prev = 0;
    for (size_t i = 0; i < m.n && !st; i++) {
        st = tok_buf_append(out, s + prev, m.data[i].start - prev);
        if (!st) st = tok_buf_append(out, n->text, n->text_len);
        prev = m.data[i].end;
    }
    if (!st) st = tok_buf_append(out, s + prev, len - prev);
    tok_spans_free(&m);
    return st;
}

/* Per-character transforms: Lowercase, StripAccents, ByteLevel. */
static vllm_status apply_chars(tok_norm_type type, const char *s, size_t len, tok_buf *out) {
    vllm_status st = VLLM_OK;
    for (size_t i = 0; i < len && !st;) {
        uint32_t cp;
        size_t n = tok_utf8_decode(s + i, len - i, &cp);
        if (n == 0) return vt_error(VLLM_ERR_INTERNAL, "tokenizer: invalid UTF-8 reached the normalizer");
        if (type == TOK_NORM_LOWERCASE) {
            if (cp == 0x130) { /* the one code point whose full lowercase is two chars */
                st = tok_buf_append(out, "i\xCC\x87", 3);
            } else {
                st = tok_buf_append_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            }
        } else if (type == TOK_NORM_STRIP_ACCENTS) {
            if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN)
                st = tok_buf_append(out, s + i, n);
        } else { /* ByteLevel */
            for (size_t k = 0; k < n && !st; k++)
                st = tok_buf_append_cp(out, tok_bytelevel_cp((uint8_t)s[i + k]));
        }
        i += n;
    }
    return st;
}

static vllm_status apply_strip(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    size_t a = 0, b = len;
    uint32_t cp;
    if (n->strip_left) {
        while (a < b) {
            size_t k = tok_utf8_decode(s + a, b - a, &cp);
            if (k == 0 || !tok_is_whitespace(cp)) break;
            a += k;
        }
    }
    if (n->strip_right) {
        while (b > a) {
            size_t start = b - 1;
            while (start > a && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
            size_t k = tok_utf8_decode(s + start, b - start, &cp);
            if (k == 0 || !tok_is_whitespace(cp)) break;
            b = start;
        }
    }
    return tok_buf_append(out, s + a, b - a);
}

vllm_status tok_normalizer_apply(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    if (len == 0) return VLLM_OK; /* every normalizer maps "" to "" */
    switch (n->type) {
    case TOK_NORM_SEQUENCE: {
        tok_buf a = {0}, b = {0};
        const char *cur = s;
        size_t cur_len = len;
        vllm_status st = VLLM_OK;
        for (size_t i = 0; i < n->n_children && !st; i++) {
            b.len = 0;
            st = tok_normalizer_apply(n->children[i], cur, cur_len, &b);
            tok_buf t = a;
            a = b;
            b = t;
            cur = a.data;
            cur_len = a.len;
        }
        if (!st) st = tok_buf_append(out, cur, cur_len);
        tok_buf_free(&a);
        tok_buf_free(&b);
        return st;
    }
    case TOK_NORM_PREPEND: {
        vllm_status st = tok_buf_append(out, n->text, n->text_len);
        return st ? st : tok_buf_append(out, s, len);
    }
    case TOK_NORM_REPLACE:
        return apply_replace(n, s, len, out);
    case TOK_NORM_NFC:
        return apply_unicode_form(UTF8PROC_COMPOSE, s, len, out);
    case TOK_NORM_NFD:
        return apply_unicode_form(UTF8PROC_DECOMPOSE, s, len, out);
    case TOK_NORM_NFKC:
        return apply_unicode_form(UTF8PROC_COMPOSE | UTF8PROC_COMPAT, s, len, out);
    case TOK_NORM_NFKD:
        return apply_unicode_form(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, s, len, out);
    case TOK_NORM_STRIP:
        return apply_strip(n, s, len, out);
    case TOK_NORM_LOWERCASE:
    case TOK_NORM_STRIP_ACCENTS:
    case TOK_NORM_BYTELEVEL:
        return apply_chars(n->type, s, len, out);
    }
    return vt_error(VLLM_ERR_INTERNAL, "tokenizer: bad normalizer type %d", (int)n->type);
}
