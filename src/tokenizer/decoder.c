/*
 * decoder.c: tokenizer.json "decoder" components. Each rewrites the list of token strings
 * (HF's decode_chain); the final text is their concatenation. Supported: Sequence, Replace,
 * ByteFallback, Fuse, Strip, Metaspace, ByteLevel, BPEDecoder. Other types are
 * VLLM_ERR_UNSUPPORTED at load.
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

typedef enum tok_dec_type {
    TOK_DEC_SEQUENCE,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTE_FALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_METASPACE,
    TOK_DEC_BYTELEVEL,
    TOK_DEC_BPE,
} tok_dec_type;

struct tok_decoder {
    tok_dec_type type;
    tok_pattern pattern;     /* Replace */
    char *text;              /* Replace: content; BPEDecoder: suffix */
    size_t text_len;
    uint32_t ch;             /* Strip: content; Metaspace: replacement */
    size_t start, stop;      /* Strip */
    tok_prepend_scheme prepend; /* Metaspace */
    tok_decoder **children;  /* Sequence */
    size_t n_children;
};

tok_vocab_type tok_decoder_vocab_type(const tok_decoder *d) {
    if (!d) return TOK_VOCAB_RAW;
    if (d->type == TOK_DEC_BYTELEVEL) return TOK_VOCAB_BYTE_LEVEL;
    tok_vocab_type r = d->type == TOK_DEC_BYTE_FALLBACK ? TOK_VOCAB_BYTE_FALLBACK : TOK_VOCAB_RAW;
    for (size_t i = 0; i < d->n_children; i++) {
        const tok_vocab_type c = tok_decoder_vocab_type(d->children[i]);
        if (c == TOK_VOCAB_BYTE_LEVEL) return c; /* ByteLevel anywhere wins (xgrammar's HFTokenizerAnalyzer) */
        if (c == TOK_VOCAB_BYTE_FALLBACK) r = c;
    }
    return r;
}

void tok_decoder_free(tok_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_children; i++) tok_decoder_free(d->children[i]);
    free(d->children);
    tok_pattern_free(&d->pattern);
    free(d->text);
    free(d);
}

static vllm_status json_count(json_t *j, const char *key, const char *path, size_t *out) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        *out = 0;
        return VLLM_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.%s must be a non-negative integer", path, key);
    *out = (size_t)json_integer_value(v);
    return VLLM_OK;
}

vllm_status tok_decoder_load(json_t *j, const char *path, tok_decoder **out) {
    *out = NULL;
    const char *type;
    vllm_status st = tok_json_type(j, path, &type);
    if (st) return st;
    tok_decoder *d = calloc(1, sizeof *d);
    if (!d) return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (decoder)");
    char sub[TOK_PATH_MAX];
    const char *s;
    size_t len;
    if (strcmp(type, "Sequence") == 0) {
        d->type = TOK_DEC_SEQUENCE;
        json_t *arr = json_object_get(j, "decoders");
        if (!json_is_array(arr)) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.decoders must be an array", path);
            goto fail;
        }
        size_t n = json_array_size(arr);
        d->children = calloc(n ? n : 1, sizeof *d->children);
        if (!d->children) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (decoder)");
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            tok_pathf(sub, "%s.decoders[%zu]", path, i);
            if ((st = tok_decoder_load(json_array_get(arr, i), sub, &d->children[i]))) goto fail;
            d->n_children++;
        }
    } else if (strcmp(type, "Replace") == 0) {
        d->type = TOK_DEC_REPLACE;
        tok_pathf(sub, "%s.pattern", path);
        if ((st = tok_pattern_load(json_object_get(j, "pattern"), sub, &d->pattern))) goto fail;
        if ((st = tok_json_str(j, "content", true, path, &s, &len))) goto fail;
        if ((st = tok_strndup(s, len, &d->text))) goto fail;
        d->text_len = len;
    } else if (strcmp(type, "ByteFallback") == 0) {
        d->type = TOK_DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d->type = TOK_DEC_FUSE;
    } else if (strcmp(type, "Strip") == 0) {
        d->type = TOK_DEC_STRIP;
        if ((st = tok_json_char(j, "content", ' ', path, &d->ch))) goto fail;
        if ((st = json_count(j, "start", path, &d->start))) goto fail;
        if ((st = json_count(j, "stop", path, &d->stop))) goto fail;
    } else if (strcmp(type, "Metaspace") == 0) {
        d->type = TOK_DEC_METASPACE;
        bool split;
        if ((st = tok_metaspace_parse(j, path, &d->ch, &d->prepend, &split))) goto fail;
    } else if (strcmp(type, "ByteLevel") == 0) {
        d->type = TOK_DEC_BYTELEVEL;
    } else if (strcmp(type, "BPEDecoder") == 0) {
        d->type = TOK_DEC_BPE;
        if ((st = tok_json_str(j, "suffix", false, path, &s, &len))) goto fail;
        if (!s) s = "</w>", len = 4;
        if ((st = tok_strndup(s, len, &d->text))) goto fail;
        d->text_len = len;
    } else {
        st = vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": %s type '%s' not supported yet", path, type);
        goto fail;
    }
    *out = d;
    return VLLM_OK;
fail:
    tok_decoder_free(d);
    return st;
}

/* Replaces every match of pattern in s by content, appending to out. */
static vllm_status replace_into(const tok_pattern *pat, const char *content, size_t content_len, const char *s,
                                size_t len, tok_spans *spans, tok_buf *out) {
    vllm_status st = len ? tok_pattern_find(pat, s, len, spans) : VLLM_OK;
    size_t prev = 0;
    for (size_t i = 0; len && i < spans->n && !st; i++) {
        st = tok_buf_append(out, s + prev, spans->data[i].start - prev);
        if (!st) st = tok_buf_append(out, content, content_len);
        prev = spans->data[i].end;
    }
    return st ? st : tok_buf_append(out, s + prev, len - prev);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xXX>" -> the byte (Rust's u8::from_str_radix on the two chars, which also takes "+X"). */
static int byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    if (s[3] == '+') return hex_digit(s[4]);
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static vllm_status flush_bytes(tok_buf *bytes, tok_pieces *out) {
    if (bytes->len == 0) return VLLM_OK;
    vllm_status st = VLLM_OK;
    if (tok_utf8_valid(bytes->data, bytes->len)) {
        st = tok_pieces_push(out, bytes->data, bytes->len, false);
    } else { /* one U+FFFD per byte, as HF's ByteFallback */
        for (size_t i = 0; i < bytes->len && !st; i++) st = tok_pieces_push(out, "\xEF\xBF\xBD", 3, false);
    }
    bytes->len = 0;
    return st;
}

static vllm_status decode_one(const tok_decoder *d, const tok_pieces *in, tok_pieces *out) {
    vllm_status st = VLLM_OK;
    tok_buf buf = {0};
    tok_spans spans = {0};
    char rep[4];
    size_t rep_len = tok_utf8_encode(d->ch, rep);
    switch (d->type) {
    case TOK_DEC_REPLACE:
    case TOK_DEC_BPE:
        for (size_t i = 0; i < in->n && !st; i++) {
            buf.len = 0;
            if (d->type == TOK_DEC_REPLACE) {
                st = replace_into(&d->pattern, d->text, d->text_len, tok_piece_str(in, i), in->items[i].len, &spans,
                                  &buf);
            } else { /* BPEDecoder: suffix -> " ", or "" on the last token */
                tok_pattern lit = {d->text, d->text_len, NULL};
                st = replace_into(&lit, i + 1 == in->n ? "" : " ", i + 1 == in->n ? 0 : 1, tok_piece_str(in, i),
                                  in->items[i].len, &spans, &buf);
            }
            if (!st) st = tok_pieces_push(out, buf.data ? buf.data : "", buf.len, false);
        }
        break;
    case TOK_DEC_BYTE_FALLBACK:
        for (size_t i = 0; i < in->n && !st; i++) {
            int b = byte_token(tok_piece_str(in, i), in->items[i].len);
            if (b >= 0) {
                char c = (char)b;
                st = tok_buf_append(&buf, &c, 1);
            } else {
                st = flush_bytes(&buf, out);
                if (!st) st = tok_pieces_push(out, tok_piece_str(in, i), in->items[i].len, false);
            }
        }
        if (!st) st = flush_bytes(&buf, out);
        break;
    case TOK_DEC_FUSE:
        for (size_t i = 0; i < in->n && !st; i++) st = tok_buf_append(&buf, tok_piece_str(in, i), in->items[i].len);
        if (!st) st = tok_pieces_push(out, buf.data ? buf.data : "", buf.len, false);
        break;
    case TOK_DEC_STRIP:
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = tok_piece_str(in, i);
            size_t len = in->items[i].len, a = 0, b = len;
            /* up to `start` leading and `stop` trailing copies of the content char */
            for (size_t k = 0; k < d->start && b - a >= rep_len && memcmp(s + a, rep, rep_len) == 0; k++) a += rep_len;
            for (size_t k = 0; k < d->stop && b - a >= rep_len && memcmp(s + b - rep_len, rep, rep_len) == 0; k++)
                b -= rep_len;
            st = tok_pieces_push(out, s + a, b - a, false);
        }
        break;
    case TOK_DEC_METASPACE:
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = tok_piece_str(in, i);
            size_t len = in->items[i].len;
            bool drop = i == 0 && d->prepend != TOK_PREPEND_NEVER;
            buf.len = 0;
            for (size_t k = 0; k < len && !st;) {
                if (len - k >= rep_len && memcmp(s + k, rep, rep_len) == 0) {
                    if (!drop) st = tok_buf_append(&buf, " ", 1);
                    k += rep_len;
                } else {
                    st = tok_buf_append(&buf, s + k, 1);
                    k++;
                }
            }
            if (!st) st = tok_pieces_push(out, buf.data ? buf.data : "", buf.len, false);
        }
        break;
    case TOK_DEC_BYTELEVEL: {
        tok_buf bytes = {0};
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = tok_piece_str(in, i);
            size_t len = in->items[i].len, mark = bytes.len;
            bool all = true;
            for (size_t k = 0; k < len && !st;) {
                uint32_t cp;
                size_t n = tok_utf8_decode(s + k, len - k, &cp);
                int b = n ? tok_bytelevel_byte(cp) : -1;
                if (b < 0) {
                    all = false;
                    break;
                }
                char c = (char)b;
                st = tok_buf_append(&bytes, &c, 1);
                k += n;
            }
            if (!st && !all) { /* a char outside the map: the token's own bytes */
                bytes.len = mark;
                st = tok_buf_append(&bytes, s, len);
            }
        }
        if (!st) st = tok_utf8_lossy(bytes.data ? bytes.data : "", bytes.len, &buf);
        if (!st) st = tok_pieces_push(out, buf.data ? buf.data : "", buf.len, false);
        tok_buf_free(&bytes);
        break;
    }
    case TOK_DEC_SEQUENCE:
        st = vt_error(VLLM_ERR_INTERNAL, "tokenizer: decode_one on a Sequence");
        break;
    }
    tok_buf_free(&buf);
    tok_spans_free(&spans);
    return st;
}

vllm_status tok_decoder_apply(const tok_decoder *d, tok_pieces *tokens, tok_pieces *scratch) {
    if (d->type == TOK_DEC_SEQUENCE) {
        for (size_t i = 0; i < d->n_children; i++) {
            vllm_status st = tok_decoder_apply(d->children[i], tokens, scratch);
            if (st) return st;
        }
        return VLLM_OK;
    }
    tok_pieces_clear(scratch);
    vllm_status st = decode_one(d, tokens, scratch);
    if (!st) tok_pieces_swap(tokens, scratch);
    return st;
}
