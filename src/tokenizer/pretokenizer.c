/*
 * pretokenizer.c: tokenizer.json "pre_tokenizer" components: Sequence, Metaspace, ByteLevel,
 * Split, Digits, Whitespace, WhitespaceSplit, Punctuation. Each one splits every piece of a
 * piece list further (and may rewrite it, like Metaspace and ByteLevel), with HF semantics.
 * Other types are VLLM_ERR_UNSUPPORTED at load.
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* The GPT-2 pre-tokenization regex HF's ByteLevel uses (run by Oniguruma in both). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* HF's Whitespace pre-tokenizer. */
static const char WHITESPACE_PATTERN[] = "\\w+|[^\\w\\s]+";

typedef enum tok_pre_type {
    TOK_PRE_SEQUENCE,
    TOK_PRE_METASPACE,
    TOK_PRE_BYTELEVEL,
    TOK_PRE_SPLIT,
    TOK_PRE_DIGITS,
    TOK_PRE_WHITESPACE,
    TOK_PRE_WHITESPACE_SPLIT,
    TOK_PRE_PUNCTUATION,
} tok_pre_type;

struct tok_pretokenizer {
    tok_pre_type type;
    /* Metaspace */
    uint32_t replacement;
    char rep[4];
    size_t rep_len;
    tok_prepend_scheme prepend;
    bool split;
    /* ByteLevel */
    bool add_prefix_space, use_regex;
    /* ByteLevel (GPT-2 regex), Split, Whitespace */
    tok_pattern pattern;
    tok_split_behavior behavior; /* Split, Punctuation */
    bool invert;                 /* Split */
    bool individual_digits;      /* Digits */
    tok_pretokenizer **children; /* Sequence */
    size_t n_children;
};

void tok_pretokenizer_free(tok_pretokenizer *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_children; i++) tok_pretokenizer_free(p->children[i]);
    free(p->children);
    tok_pattern_free(&p->pattern);
    free(p);
}

vllm_status tok_metaspace_parse(json_t *j, const char *path, uint32_t *replacement,
                                tok_prepend_scheme *scheme, bool *split) {
    vllm_status st = tok_json_char(j, "replacement", 0x2581, path, replacement);
    if (st) return st;
    if ((st = tok_json_bool(j, "split", true, path, split))) return st;
    const char *s;
    if ((st = tok_json_str(j, "prepend_scheme", false, path, &s, NULL))) return st;
    *scheme = TOK_PREPEND_ALWAYS;
    if (s) {
        if (strcmp(s, "always") == 0) *scheme = TOK_PREPEND_ALWAYS;
        else if (strcmp(s, "first") == 0) *scheme = TOK_PREPEND_FIRST;
        else if (strcmp(s, "never") == 0) *scheme = TOK_PREPEND_NEVER;
        else return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.prepend_scheme '%s' unknown", path, s);
    }
    /* Older files: add_prefix_space (false means never). */
    json_t *aps = json_object_get(j, "add_prefix_space");
    if (aps && !json_is_null(aps)) {
        if (!json_is_boolean(aps))
            return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.add_prefix_space must be a boolean", path);
        if (json_is_false(aps)) {
            if (s && *scheme != TOK_PREPEND_NEVER)
                return vt_error(VLLM_ERR_FORMAT,
                                TOK_FILE ": %s: add_prefix_space false does not match prepend_scheme '%s'", path, s);
            *scheme = TOK_PREPEND_NEVER;
        }
    }
    return VLLM_OK;
}

vllm_status tok_pretokenizer_load(json_t *j, const char *path, tok_pretokenizer **out) {
    *out = NULL;
    const char *type;
    vllm_status st = tok_json_type(j, path, &type);
    if (st) return st;
    tok_pretokenizer *p = calloc(1, sizeof *p);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (pre_tokenizer)");
    char sub[TOK_PATH_MAX];
    if (strcmp(type, "Sequence") == 0) {
        p->type = TOK_PRE_SEQUENCE;
        json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr)) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.pretokenizers must be an array", path);
            goto fail;
        }
        size_t count = json_array_size(arr);
        p->children = calloc(count ? count : 1, sizeof *p->children);
        if (!p->children) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (pre_tokenizer)");
            goto fail;
        }
        for (size_t i = 0; i < count; i++) {
            tok_pathf(sub, "%s.pretokenizers[%zu]", path, i);
            if ((st = tok_pretokenizer_load(json_array_get(arr, i), sub, &p->children[i]))) goto fail;
            p->n_children++;
        }
    } else if (strcmp(type, "Metaspace") == 0) {
        p->type = TOK_PRE_METASPACE;
        if ((st = tok_metaspace_parse(j, path, &p->replacement, &p->prepend, &p->split))) goto fail;
        p->rep_len = tok_utf8_encode(p->replacement, p->rep);
    } else if (strcmp(type, "ByteLevel") == 0) {
        p->type = TOK_PRE_BYTELEVEL;
        if ((st = tok_json_bool(j, "add_prefix_space", true, path, &p->add_prefix_space))) goto fail;
        if ((st = tok_json_bool(j, "use_regex", true, path, &p->use_regex))) goto fail;
        if (p->use_regex) {
            tok_pathf(sub, "%s (GPT-2 regex)", path);
            if ((st = tok_regex_new(GPT2_PATTERN, strlen(GPT2_PATTERN), sub, &p->pattern.regex))) goto fail;
        }
    } else if (strcmp(type, "Split") == 0) {
        p->type = TOK_PRE_SPLIT;
        tok_pathf(sub, "%s.pattern", path);
        if ((st = tok_pattern_load(json_object_get(j, "pattern"), sub, &p->pattern))) goto fail;
        if ((st = tok_split_behavior_parse(json_object_get(j, "behavior"), path, &p->behavior))) goto fail;
        if ((st = tok_json_bool(j, "invert", false, path, &p->invert))) goto fail;
    } else if (strcmp(type, "Digits") == 0) {
        p->type = TOK_PRE_DIGITS;
        if ((st = tok_json_bool(j, "individual_digits", false, path, &p->individual_digits))) goto fail;
    } else if (strcmp(type, "Whitespace") == 0) {
        p->type = TOK_PRE_WHITESPACE;
        if ((st = tok_regex_new(WHITESPACE_PATTERN, strlen(WHITESPACE_PATTERN), path, &p->pattern.regex)))
            goto fail;
    } else if (strcmp(type, "WhitespaceSplit") == 0) {
        p->type = TOK_PRE_WHITESPACE_SPLIT;
    } else if (strcmp(type, "Punctuation") == 0) {
        p->type = TOK_PRE_PUNCTUATION;
        p->behavior = TOK_SPLIT_ISOLATED;
        json_t *b = json_object_get(j, "behavior");
        if (b && !json_is_null(b) && (st = tok_split_behavior_parse(b, path, &p->behavior))) goto fail;
    } else {
        st = vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": %s type '%s' not supported yet", path, type);
        goto fail;
    }
    *out = p;
    return VLLM_OK;
fail:
    tok_pretokenizer_free(p);
    return st;
}

/* Spans of the single characters of s for which pred(cp) holds (HF's char-predicate pattern). */
typedef bool (*char_pred)(uint32_t cp);

static bool is_punctuation(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) ||
                          (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

static vllm_status find_chars(const char *s, size_t len, char_pred pred, tok_spans *out) {
    out->n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = tok_utf8_decode(s + i, len - i, &cp);
        if (n == 0) return vt_error(VLLM_ERR_INTERNAL, "tokenizer: invalid UTF-8 reached the pre-tokenizer");
        if (pred(cp)) {
            vllm_status st = tok_spans_push(out, i, i + n);
            if (st) return st;
        }
        i += n;
    }
    return VLLM_OK;
}

/* Metaspace on one piece: spaces -> replacement, maybe prepend it, split before each one. */
static vllm_status metaspace_piece(const tok_pretokenizer *p, const char *s, size_t len, bool at_start,
                                   tok_buf *tmp, tok_spans *spans, tok_pieces *out) {
    tmp->len = 0;
    vllm_status st = VLLM_OK;
    bool starts_with_rep = len >= p->rep_len && memcmp(s, p->rep, p->rep_len) == 0;
    /* s[0] == ' ' also becomes the replacement, so it counts as starting with it. */
    bool starts = starts_with_rep || (len > 0 && s[0] == ' ');
    bool prepend = len > 0 && !starts &&
                   (p->prepend == TOK_PREPEND_ALWAYS || (p->prepend == TOK_PREPEND_FIRST && at_start));
    if (prepend) st = tok_buf_append(tmp, p->rep, p->rep_len);
    for (size_t i = 0; i < len && !st; i++)
        st = s[i] == ' ' ? tok_buf_append(tmp, p->rep, p->rep_len) : tok_buf_append(tmp, s + i, 1);
    if (st) return st;
    if (!p->split) return tmp->len ? tok_pieces_push(out, tmp->data, tmp->len, at_start) : VLLM_OK;
    if ((st = tok_literal_find(p->rep, p->rep_len, tmp->data, tmp->len, spans))) return st;
    return tok_split_apply(tmp->data, tmp->len, spans, TOK_SPLIT_MERGED_WITH_NEXT, false, at_start, out);
}

/* ByteLevel on one piece: maybe prefix a space, split by the GPT-2 regex, map bytes to chars. */
static vllm_status bytelevel_piece(const tok_pretokenizer *p, const char *s, size_t len, bool at_start,
                                   tok_buf *tmp, tok_spans *spans, tok_pieces *out) {
    tmp->len = 0;
    vllm_status st = VLLM_OK;
    if (p->add_prefix_space && len > 0 && s[0] != ' ') st = tok_buf_append(tmp, " ", 1);
    if (!st) st = tok_buf_append(tmp, s, len);
    if (st) return st;
    size_t first = out->n;
    if (p->use_regex) {
        if ((st = tok_pattern_find(&p->pattern, tmp->data, tmp->len, spans))) return st;
        if ((st = tok_split_apply(tmp->data, tmp->len, spans, TOK_SPLIT_ISOLATED, false, at_start, out)))
            return st;
    } else if (tmp->len) {
        if ((st = tok_pieces_push(out, tmp->data, tmp->len, at_start))) return st;
    }
    /* Rewrite the new pieces through the byte -> char map (at most 2 bytes per byte). */
    tok_buf mapped = {0};
    size_t keep = out->n;
    for (size_t i = first; i < keep && !st; i++) {
        mapped.len = 0;
        const char *ps = tok_piece_str(out, i);
        for (size_t k = 0; k < out->items[i].len && !st; k++)
            st = tok_buf_append_cp(&mapped, tok_bytelevel_cp((uint8_t)ps[k]));
        if (!st) st = tok_pieces_push(out, mapped.data, mapped.len, out->items[i].at_start);
    }
    tok_buf_free(&mapped);
    if (st) return st;
    /* Drop the unmapped copies: move the mapped items down (their text stays in the buffer). */
    memmove(out->items + first, out->items + keep, (out->n - keep) * sizeof(tok_piece));
    out->n = first + (out->n - keep);
    return VLLM_OK;
}

static vllm_status apply_one(const tok_pretokenizer *p, const char *s, size_t len, bool at_start,
                             tok_buf *tmp, tok_spans *spans, tok_pieces *out) {
    vllm_status st;
    switch (p->type) {
    case TOK_PRE_METASPACE:
        return metaspace_piece(p, s, len, at_start, tmp, spans, out);
    case TOK_PRE_BYTELEVEL:
        return bytelevel_piece(p, s, len, at_start, tmp, spans, out);
    case TOK_PRE_SPLIT:
        if ((st = tok_pattern_find(&p->pattern, s, len, spans))) return st;
        return tok_split_apply(s, len, spans, p->behavior, p->invert, at_start, out);
    case TOK_PRE_WHITESPACE:
        if ((st = tok_pattern_find(&p->pattern, s, len, spans))) return st;
        return tok_split_apply(s, len, spans, TOK_SPLIT_REMOVED, true, at_start, out);
    case TOK_PRE_DIGITS:
        if ((st = find_chars(s, len, tok_is_digit, spans))) return st;
        return tok_split_apply(s, len, spans, p->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS,
                               false, at_start, out);
    case TOK_PRE_WHITESPACE_SPLIT:
        if ((st = find_chars(s, len, tok_is_whitespace, spans))) return st;
        return tok_split_apply(s, len, spans, TOK_SPLIT_REMOVED, false, at_start, out);
    case TOK_PRE_PUNCTUATION:
        if ((st = find_chars(s, len, is_punctuation, spans))) return st;
        return tok_split_apply(s, len, spans, p->behavior, false, at_start, out);
    case TOK_PRE_SEQUENCE:
        break;
    }
    return vt_error(VLLM_ERR_INTERNAL, "tokenizer: bad pre-tokenizer type %d", (int)p->type);
}

vllm_status tok_pretokenizer_apply(const tok_pretokenizer *p, tok_pieces *pieces, tok_pieces *scratch) {
    if (p->type == TOK_PRE_SEQUENCE) {
        for (size_t i = 0; i < p->n_children; i++) {
            vllm_status st = tok_pretokenizer_apply(p->children[i], pieces, scratch);
            if (st) return st;
        }
        return VLLM_OK;
    }
    tok_buf tmp = {0};
    tok_spans spans = {0};
    vllm_status st = VLLM_OK;
    tok_pieces_clear(scratch);
    for (size_t i = 0; i < pieces->n && !st; i++)
        st = apply_one(p, tok_piece_str(pieces, i), pieces->items[i].len, pieces->items[i].at_start,
                       &tmp, &spans, scratch);
    tok_buf_free(&tmp);
    tok_spans_free(&spans);
    if (!st) tok_pieces_swap(pieces, scratch);
    return st;
}
