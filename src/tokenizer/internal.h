/*
 * internal.h: types shared by the tokenizer's components (not part of the module API).
 *
 * util.c          buffers, UTF-8, hash maps, GPT-2 byte<->unicode map, regex, split rules, JSON helpers
 * normalizer.c    normalizers (Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip, ...)
 * pretokenizer.c  pre-tokenizers (Sequence, Metaspace, ByteLevel, Split, Digits, Whitespace...)
 * bpe.c           the BPE model
 * postprocessor.c post-processors (TemplateProcessing, ByteLevel, Bert, Roberta, Sequence)
 * decoder.c       decoders (Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel)
 * tokenizer.c     loading, added tokens, encode/decode
 * scan.c          raw JSON scanning of the vocab and merges (fast load)
 * stream.c        incremental detokenization (tok_stream)
 * token_bytes.c   one token's bytes as a grammar sees them (tok_token_bytes)
 *
 * Load errors name "tokenizer.json" and the JSON path of the field, e.g.
 * "tokenizer.json: normalizer.normalizers[1].type 'Foo' not supported yet".
 */
#ifndef VLLM_TOKENIZER_INTERNAL_H
#define VLLM_TOKENIZER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

#define TOK_FILE "tokenizer.json"
#define TOK_MAX_ID (1 << 24)      /* ids above this are rejected: they would size arrays */
#define TOK_PATH_MAX 256          /* JSON paths in error messages */

/* ------------------------------------------------------------------ */
/* Growable byte buffer (always NUL-terminated after a successful op)  */
/* ------------------------------------------------------------------ */

typedef struct tok_buf {
    char *data;
    size_t len, cap;
} tok_buf;

vllm_status tok_buf_reserve(tok_buf *b, size_t extra);
vllm_status tok_buf_append(tok_buf *b, const void *s, size_t n);
vllm_status tok_buf_append_cp(tok_buf *b, uint32_t cp);
void tok_buf_free(tok_buf *b);

/* Growable id vector. */
typedef struct tok_ids {
    int32_t *data;
    size_t n, cap;
} tok_ids;

vllm_status tok_ids_push(tok_ids *v, int32_t id);
void tok_ids_free(tok_ids *v);

/* ------------------------------------------------------------------ */
/* Pieces: a list of strings in one buffer (pre-tokenizer splits,      */
/* decoder tokens). at_start: the piece begins at offset 0 of the      */
/* original input (Metaspace prepend_scheme "first").                  */
/* ------------------------------------------------------------------ */

typedef struct tok_piece {
    size_t off, len;
    bool at_start;
} tok_piece;

typedef struct tok_pieces {
    tok_buf text;
    tok_piece *items;
    size_t n, cap;
} tok_pieces;

vllm_status tok_pieces_push(tok_pieces *p, const char *s, size_t len, bool at_start);
static inline const char *tok_piece_str(const tok_pieces *p, size_t i) {
    return p->text.data + p->items[i].off;
}
void tok_pieces_clear(tok_pieces *p);
void tok_pieces_free(tok_pieces *p);
/* Swaps the contents of a and b. */
void tok_pieces_swap(tok_pieces *a, tok_pieces *b);

/* ------------------------------------------------------------------ */
/* UTF-8 and Unicode                                                   */
/* ------------------------------------------------------------------ */

/* Decodes one code point at s (len > 0 bytes available); returns its byte length, 0 if invalid
 * (overlong, surrogate, > U+10FFFF, truncated). */
size_t tok_utf8_decode(const char *s, size_t len, uint32_t *cp);
bool tok_utf8_valid(const char *s, size_t len);
/* Byte length of the (valid) code point starting at s; 1 for an invalid byte. */
size_t tok_utf8_char_len(const char *s, size_t len);
size_t tok_utf8_encode(uint32_t cp, char out[4]);
/* Appends s to out with each maximal invalid subsequence replaced by U+FFFD
 * (Rust's String::from_utf8_lossy). */
vllm_status tok_utf8_lossy(const char *s, size_t len, tok_buf *out);
/* Unicode White_Space (Rust char::is_whitespace, regex \s). */
bool tok_is_whitespace(uint32_t cp);
/* Rust regex \w (alphabetic, marks, decimal digits, connector punctuation, joiners). */
bool tok_is_word_char(uint32_t cp);
/* Unicode general category N* / Nd. */
bool tok_is_digit(uint32_t cp);

/* GPT-2 byte-level map: byte -> printable code point, and back (-1 when cp is not in the map). */
uint32_t tok_bytelevel_cp(uint8_t b);
int tok_bytelevel_byte(uint32_t cp);

/* ------------------------------------------------------------------ */
/* Hash maps                                                           */
/* ------------------------------------------------------------------ */

/* String -> int32 map. Keys are copied into an arena owned by the map; their copies are
 * NUL-terminated and stay at a fixed address until tok_strmap_free. Open addressing with
 * 16-byte slots (a key's length is stored in the arena just before it), at most 3/4 full:
 * the 150k-entry vocabularies fit in 4 MiB, which keeps loading and lookups cache-friendly. */
typedef struct tok_arena_block tok_arena_block;
typedef struct tok_strmap_slot {
    const char *key; /* NULL: empty */
    uint32_t hash;
    int32_t value;
} tok_strmap_slot;

typedef struct tok_strmap {
    tok_strmap_slot *slots;
    size_t cap, count;
    tok_arena_block *arena;
} tok_strmap;

vllm_status tok_strmap_init(tok_strmap *m, size_t expected);
/* Inserts or overwrites; *stored (optional) receives the map's copy of the key. */
vllm_status tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t value,
                           const char **stored);
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len); /* -1 when absent */
void tok_strmap_free(tok_strmap *m);

/* (int32, int32) -> (rank, new id) map for BPE merges (one 16-byte slot per pair). */
typedef struct tok_pair_slot {
    uint64_t key; /* UINT64_MAX: empty */
    uint32_t rank;
    int32_t new_id;
} tok_pair_slot;

typedef struct tok_pairmap {
    tok_pair_slot *slots;
    size_t cap, count;
} tok_pairmap;

vllm_status tok_pairmap_init(tok_pairmap *m, size_t expected);
vllm_status tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id);
bool tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id);
void tok_pairmap_free(tok_pairmap *m);

/* ------------------------------------------------------------------ */
/* Patterns: regexes (Oniguruma, as HF) and literal strings             */
/* ------------------------------------------------------------------ */

typedef struct tok_span {
    size_t start, end;
} tok_span;

typedef struct tok_spans {
    tok_span *data;
    size_t n, cap;
} tok_spans;

vllm_status tok_spans_push(tok_spans *s, size_t start, size_t end);
void tok_spans_free(tok_spans *s);

typedef struct tok_regex tok_regex;

/* Compiles pattern (Ruby syntax, UTF-8, like HF's onig SysRegex); path names the field. */
vllm_status tok_regex_new(const char *pattern, size_t len, const char *path, tok_regex **out);
void tok_regex_free(tok_regex *re);

/* A "pattern" field: {"String": s} (literal) or {"Regex": r}. */
typedef struct tok_pattern {
    char *literal;    /* literal string, or NULL for a regex */
    size_t literal_len;
    tok_regex *regex;
} tok_pattern;

vllm_status tok_pattern_load(json_t *j, const char *path, tok_pattern *out);
void tok_pattern_free(tok_pattern *p);
/* All non-overlapping matches in s, left to right (onig find_iter semantics for regexes:
 * empty matches included, never twice at the same end). Clears and fills out. */
vllm_status tok_pattern_find(const tok_pattern *p, const char *s, size_t len, tok_spans *out);
/* Literal matches only (used by Metaspace with its replacement char). */
vllm_status tok_literal_find(const char *lit, size_t lit_len, const char *s, size_t len,
                             tok_spans *out);

/* HF SplitDelimiterBehavior. */
typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

vllm_status tok_split_behavior_parse(json_t *j, const char *path, tok_split_behavior *out);
/* Splits s (a piece) at the given matches according to behavior (invert: matches become the
 * kept parts), pushing the non-empty parts to out. at_start: s itself is at the input start. */
vllm_status tok_split_apply(const char *s, size_t len, const tok_spans *matches,
                            tok_split_behavior behavior, bool invert, bool at_start,
                            tok_pieces *out);

/* ------------------------------------------------------------------ */
/* JSON helpers: missing or null fields take the default; a wrong type  */
/* is VLLM_ERR_FORMAT naming tokenizer.json and path.key.              */
/* ------------------------------------------------------------------ */

vllm_status tok_json_bool(json_t *obj, const char *key, bool def, const char *path, bool *out);
/* *out borrowed from the JSON (NULL when missing/null and !required). */
vllm_status tok_json_str(json_t *obj, const char *key, bool required, const char *path,
                         const char **out, size_t *len);
/* "type" of a component object; path names the component. */
vllm_status tok_json_type(json_t *obj, const char *path, const char **type);
/* Formats a JSON path for error messages into out[TOK_PATH_MAX] (truncating). */
void tok_pathf(char *out, const char *fmt, ...) VT_PRINTF(2, 3);
/* Duplicates a JSON string value into malloc'd memory (NUL-terminated). */
vllm_status tok_strndup(const char *s, size_t len, char **out);
/* A single-character string field (Metaspace replacement, Strip content). */
vllm_status tok_json_char(json_t *obj, const char *key, uint32_t def, const char *path,
                          uint32_t *out);

/* ------------------------------------------------------------------ */
/* Components                                                          */
/* ------------------------------------------------------------------ */

typedef struct tok_normalizer tok_normalizer;
vllm_status tok_normalizer_load(json_t *j, const char *path, tok_normalizer **out);
/* Appends normalize(s) to out (out is not cleared). */
vllm_status tok_normalizer_apply(const tok_normalizer *n, const char *s, size_t len, tok_buf *out);
void tok_normalizer_free(tok_normalizer *n);

/* Metaspace settings, shared by the pre-tokenizer and the decoder. */
typedef enum tok_prepend_scheme {
    TOK_PREPEND_ALWAYS,
    TOK_PREPEND_FIRST,
    TOK_PREPEND_NEVER,
} tok_prepend_scheme;

vllm_status tok_metaspace_parse(json_t *j, const char *path, uint32_t *replacement,
                                tok_prepend_scheme *scheme, bool *split);

typedef struct tok_pretokenizer tok_pretokenizer;
vllm_status tok_pretokenizer_load(json_t *j, const char *path, tok_pretokenizer **out);
/* Splits every piece of *pieces further; scratch is working space. */
vllm_status tok_pretokenizer_apply(const tok_pretokenizer *p, tok_pieces *pieces, tok_pieces *scratch);
void tok_pretokenizer_free(tok_pretokenizer *p);

/* ------------------------------------------------------------------ */
/* scan.c: raw JSON scanning of model.vocab / model.merges (fast load)  */
/* ------------------------------------------------------------------ */

/* Byte ranges of the model.vocab object and the model.merges array in the file text (NULL:
 * take them from the jansson tree instead). */
typedef struct tok_bpe_raw {
    const char *vocab, *merges;
    size_t vocab_len, merges_len;
} tok_bpe_raw;

/* Finds the ranges; *rest (malloc'd) is the text with those values replaced by {} and [] (same
 * line count). false when the text is not shaped as expected (the caller falls back to jansson). */
bool tok_scan_model(const char *json, size_t len, tok_bpe_raw *raw, char **rest, size_t *rest_len);
void tok_scan_ws(const char **p, const char *end);
/* Parses the JSON string at *p into out (cleared; NULL: only check it); path names the field
 * in the error. */
vllm_status tok_scan_string(const char **p, const char *end, const char *path, tok_buf *out);
/* Parses a JSON integer at *p: 0 ok, 1 out of [0, max], -1 not a number, -2 a real number. */
int tok_scan_int(const char **p, const char *end, int64_t max, int64_t *out);

typedef struct tok_bpe tok_bpe;
typedef struct tok_bpe_scratch tok_bpe_scratch;
/* raw (may be NULL): vocab / merges to parse from the text instead of from j. */
vllm_status tok_bpe_load(json_t *j, const char *path, const tok_bpe_raw *raw, tok_bpe **out);
/* Appends the ids of one pre-tokenized piece. */
vllm_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t len, tok_bpe_scratch **scratch,
                             tok_ids *out);
void tok_bpe_scratch_free(tok_bpe_scratch *sc);
int32_t tok_bpe_size(const tok_bpe *m);                       /* max id + 1 */
const char *tok_bpe_id_to_piece(const tok_bpe *m, int32_t id); /* NULL for holes */
int32_t tok_bpe_piece_to_id(const tok_bpe *m, const char *s, size_t len);
void tok_bpe_free(tok_bpe *m);

/* Resolves special token names for post-processors (Bert/Roberta give names + ids directly). */
typedef struct tok_postprocessor tok_postprocessor;
vllm_status tok_postprocessor_load(json_t *j, const char *path, tok_postprocessor **out);
/* Applies the single-sequence template to ids (in place). */
vllm_status tok_postprocessor_apply(const tok_postprocessor *p, tok_ids *ids);
/* True when the processor adds tokens (a template); false for ByteLevel-only chains. */
bool tok_postprocessor_adds_tokens(const tok_postprocessor *p);
void tok_postprocessor_free(tok_postprocessor *p);

typedef struct tok_decoder tok_decoder;
vllm_status tok_decoder_load(json_t *j, const char *path, tok_decoder **out);
/* the vocabulary kind a decoder chain implies (tok_vocab_kind) */
tok_vocab_type tok_decoder_vocab_type(const tok_decoder *d);
/* a tokenizer's decoder chain (NULL: none) */
const tok_decoder *tok_decoder_of(const tokenizer *tok);
/* decode_chain: rewrites the token list; scratch is working space. */
vllm_status tok_decoder_apply(const tok_decoder *d, tok_pieces *tokens, tok_pieces *scratch);
void tok_decoder_free(tok_decoder *d);

#endif
