/*
 * tokenizer.c: the tokenizer object: loading tokenizer.json (+ tokenizer_config.json), the
 * added-token vocabulary and its splitting, and the encode/decode drivers that run the
 * components (normalizer, pre-tokenizer, BPE model, post-processor, decoder) as HF does.
 */
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "loader/regular_file.h"
#include "tokenizer/internal.h"

#define TOK_CONFIG_FILE "tokenizer_config.json"
#define TOK_MAX_FILE ((size_t)1 << 30) /* 1 GiB: far above any real tokenizer.json */

/* An entry of "added_tokens". pattern is what is matched: the content, or for normalized
 * tokens the content passed through the normalizer. */
typedef struct tok_added {
    char *content;
    size_t len;
    char *pattern;
    size_t pattern_len;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
} tok_added;

/* Added tokens to match, grouped by the first byte of their pattern, longest first in a group
 * (so the first hit at a position is the leftmost-longest match, as HF's Aho-Corasick). */
typedef struct tok_match_set {
    uint32_t *order;
    uint32_t start[257];
} tok_match_set;

struct tokenizer {
    tok_added *added;
    size_t n_added;
    tok_strmap added_map;   /* content -> index into added */
    int32_t *added_by_id;   /* id -> index into added, -1 */
    bool *special_by_id;    /* id -> its piece is a special added token */
    tok_match_set raw_set;  /* normalized == false: matched on the raw text */
    tok_match_set norm_set; /* normalized == true: matched on the normalized text */
    tok_normalizer *normalizer;
    tok_pretokenizer *pre;
    tok_bpe *model;
    tok_postprocessor *post;
    tok_decoder *decoder;
    int32_t vocab_size;
    bool add_bos, add_eos;
    bool cleanup; /* tokenizer_config.json clean_up_tokenization_spaces */
    int32_t bos_id, eos_id;
};

const tok_decoder *tok_decoder_of(const tokenizer *tok) { return tok->decoder; }

static vllm_status oom(void) { return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory"); }

void tok_free(tokenizer *tok) {
    if (!tok) return;
    for (size_t i = 0; i < tok->n_added; i++) {
        free(tok->added[i].content);
        free(tok->added[i].pattern);
    }
    free(tok->added);
    tok_strmap_free(&tok->added_map);
    free(tok->added_by_id);
    free(tok->special_by_id);
    free(tok->raw_set.order);
    free(tok->norm_set.order);
    tok_normalizer_free(tok->normalizer);
    tok_pretokenizer_free(tok->pre);
    tok_bpe_free(tok->model);
    tok_postprocessor_free(tok->post);
    tok_decoder_free(tok->decoder);
    free(tok);
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */
/* ------------------------------------------------------------------ */

static vllm_status load_model(tokenizer *tok, json_t *root, const tok_bpe_raw *raw) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": model missing or not an object");
    json_t *type = json_object_get(model, "type");
    const char *t = json_string_value(type);
    if (type && !t) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": model.type must be a string");
    if (!t && json_object_get(model, "merges")) t = "BPE"; /* old files omit the type */
    if (!t) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": model.type missing");
    if (strcmp(t, "BPE") != 0)
        return vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": model type '%s' not supported yet", t);
    return tok_bpe_load(model, "model", raw, &tok->model);
}

/* Loads an optional component: a missing or null field leaves *out NULL. */
#define LOAD_COMPONENT(root, key, loader, out)                      \
    do {                                                            \
        json_t *c_ = json_object_get(root, key);                    \
        if (c_ && !json_is_null(c_)) {                              \
            vllm_status st_ = loader(c_, key, out);                 \
            if (st_) return st_;                                    \
        }                                                           \
    } while (0)

static vllm_status load_added(tokenizer *tok, json_t *root) {
    json_t *arr = json_object_get(root, "added_tokens");
    if (!arr || json_is_null(arr)) return tok_strmap_init(&tok->added_map, 0);
    if (!json_is_array(arr)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": added_tokens must be an array");
    size_t n = json_array_size(arr);
    tok->added = calloc(n ? n : 1, sizeof *tok->added);
    if (!tok->added) return oom();
    vllm_status st = tok_strmap_init(&tok->added_map, n);
    if (st) return st;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        char path[TOK_PATH_MAX];
        tok_pathf(path, "added_tokens[%zu]", i);
        if (!json_is_object(e)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must be an object", path);
        json_t *id = json_object_get(e, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOK_MAX_ID)
            return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.id must be an integer in [0, %d)", path, TOK_MAX_ID);
        const char *content;
        size_t len;
        if ((st = tok_json_str(e, "content", true, path, &content, &len))) return st;
        if (len == 0) continue; /* HF ignores empty added tokens */
        tok_added a = {.id = (int32_t)json_integer_value(id), .len = len};
        if ((st = tok_json_bool(e, "special", false, path, &a.special))) return st;
        if ((st = tok_json_bool(e, "single_word", false, path, &a.single_word))) return st;
        if ((st = tok_json_bool(e, "lstrip", false, path, &a.lstrip))) return st;
        if ((st = tok_json_bool(e, "rstrip", false, path, &a.rstrip))) return st;
        if ((st = tok_json_bool(e, "normalized", !a.special, path, &a.normalized))) return st;
        if ((st = tok_strndup(content, len, &a.content))) return st;
        tok->added[tok->n_added++] = a;
        if ((st = tok_strmap_put(&tok->added_map, content, len, (int32_t)(tok->n_added - 1), NULL))) return st;
    }
    return VLLM_OK;
}

/* The string each added token is matched as (normalized tokens go through the normalizer). */
static vllm_status added_patterns(tokenizer *tok) {
    tok_buf b = {0};
    vllm_status st = VLLM_OK;
    for (size_t i = 0; i < tok->n_added && !st; i++) {
        tok_added *a = &tok->added[i];
        b.len = 0;
        if (a->normalized && tok->normalizer) st = tok_normalizer_apply(tok->normalizer, a->content, a->len, &b);
        else st = tok_buf_append(&b, a->content, a->len);
        if (!st) st = tok_strndup(b.data ? b.data : "", b.len, &a->pattern);
        a->pattern_len = b.len;
    }
    tok_buf_free(&b);
    return st;
}

typedef struct set_key {
    uint32_t idx;
    uint8_t first;
    size_t len;
} set_key;

static int set_key_cmp(const void *pa, const void *pb) {
    const set_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; /* longest first */
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static vllm_status build_set(tokenizer *tok, bool normalized, tok_match_set *set) {
    set_key *keys = malloc((tok->n_added ? tok->n_added : 1) * sizeof *keys);
    set->order = malloc((tok->n_added ? tok->n_added : 1) * sizeof *set->order);
    if (!keys || !set->order) {
        free(keys);
        return oom();
    }
    size_t n = 0;
    for (size_t i = 0; i < tok->n_added; i++) {
        const tok_added *a = &tok->added[i];
        if (a->normalized != normalized || a->pattern_len == 0) continue;
        keys[n++] = (set_key){(uint32_t)i, (uint8_t)a->pattern[0], a->pattern_len};
    }
    qsort(keys, n, sizeof *keys, set_key_cmp);
    memset(set->start, 0, sizeof set->start);
    for (size_t i = 0; i < n; i++) {
        set->order[i] = keys[i].idx;
        set->start[keys[i].first + 1]++;
    }
    for (int b = 0; b < 256; b++) set->start[b + 1] += set->start[b];
    free(keys);
    return VLLM_OK;
}

static const char *id_piece(const tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->vocab_size) return NULL;
    if (tok->added_by_id[id] >= 0) return tok->added[tok->added_by_id[id]].content;
    return tok_bpe_id_to_piece(tok->model, id);
}

static vllm_status build_id_tables(tokenizer *tok) {
    int32_t size = tok_bpe_size(tok->model);
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id >= size) size = tok->added[i].id + 1;
    tok->vocab_size = size;
    tok->added_by_id = malloc((size ? (size_t)size : 1) * sizeof(int32_t));
    tok->special_by_id = calloc(size ? (size_t)size : 1, sizeof(bool));
    if (!tok->added_by_id || !tok->special_by_id) return oom();
    for (int32_t i = 0; i < size; i++) tok->added_by_id[i] = -1;
    for (size_t i = 0; i < tok->n_added; i++) tok->added_by_id[tok->added[i].id] = (int32_t)i;
    /* HF skips by content: any id whose piece is the content of a special added token (its own id,
     * and a model id with the same piece that no added token shadows). */
    for (size_t i = 0; i < tok->n_added; i++) {
        const tok_added *a = &tok->added[i];
        if (!a->special) continue;
        int32_t ids[2] = {a->id, tok_bpe_piece_to_id(tok->model, a->content, a->len)};
        for (int k = 0; k < 2; k++) {
            const char *p = id_piece(tok, ids[k]);
            if (p && strcmp(p, a->content) == 0) tok->special_by_id[ids[k]] = true;
        }
    }
    return VLLM_OK;
}

/* bos_token / eos_token: a string, an {"content": ...} object, or null. */
static vllm_status config_token(const tokenizer *tok, json_t *cfg, const char *key, int32_t *id) {
    *id = -1;
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return VLLM_OK;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return vt_error(VLLM_ERR_FORMAT, TOK_CONFIG_FILE ": %s must be a string or {\"content\": string}", key);
    *id = tok_piece_to_id(tok, json_string_value(v));
    if (*id < 0) LOG_W("tokenizer: %s '%s' of " TOK_CONFIG_FILE " is not in the vocabulary", key, json_string_value(v));
    return VLLM_OK;
}

static vllm_status load_config(tokenizer *tok, const char *text, size_t len) {
    json_error_t err;
    /* (ints as reals: some configs hold model_max_length = 1e30 as an integer literal) */
    json_t *cfg = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &err);
    if (!cfg)
        return vt_error(VLLM_ERR_FORMAT, TOK_CONFIG_FILE ": invalid JSON at line %d column %d: %s", err.line,
                        err.column, err.text);
    vllm_status st = VLLM_OK;
    if (!json_is_object(cfg)) st = vt_error(VLLM_ERR_FORMAT, TOK_CONFIG_FILE ": must be a JSON object");
    /* clean_up_tokenization_spaces: transformers' default is false since v4.45 */
    static const char *flags[3] = {"add_bos_token", "add_eos_token", "clean_up_tokenization_spaces"};
    bool *dst[3] = {&tok->add_bos, &tok->add_eos, &tok->cleanup};
    for (int i = 0; i < 3 && !st; i++) {
        json_t *v = json_object_get(cfg, flags[i]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_boolean(v)) st = vt_error(VLLM_ERR_FORMAT, TOK_CONFIG_FILE ": %s must be a boolean", flags[i]);
        else *dst[i] = json_is_true(v);
    }
    if (!st) st = config_token(tok, cfg, "bos_token", &tok->bos_id);
    if (!st) st = config_token(tok, cfg, "eos_token", &tok->eos_id);
    json_decref(cfg);
    return st;
}

static vllm_status load_root(tokenizer *tok, json_t *root, const tok_bpe_raw *raw) {
    if (!json_is_object(root)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": must be a JSON object");
    vllm_status st = load_model(tok, root, raw);
    if (st) return st;
    LOAD_COMPONENT(root, "normalizer", tok_normalizer_load, &tok->normalizer);
    LOAD_COMPONENT(root, "pre_tokenizer", tok_pretokenizer_load, &tok->pre);
    LOAD_COMPONENT(root, "post_processor", tok_postprocessor_load, &tok->post);
    LOAD_COMPONENT(root, "decoder", tok_decoder_load, &tok->decoder);
    if ((st = load_added(tok, root))) return st;
    if ((st = added_patterns(tok))) return st;
    if ((st = build_set(tok, false, &tok->raw_set))) return st;
    if ((st = build_set(tok, true, &tok->norm_set))) return st;
    return build_id_tables(tok);
}

/* Parses text (raw: the vocab and merges come from the text, not the tree) into a tokenizer. */
static vllm_status load_text(const char *text, size_t len, const tok_bpe_raw *raw, const char *config_json,
                             size_t config_len, tokenizer **out) {
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    if (!root)
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": invalid JSON at line %d column %d: %s", err.line, err.column,
                        err.text);
    tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(root);
        return oom();
    }
    tok->bos_id = tok->eos_id = -1;
    vllm_status st = load_root(tok, root, raw);
    json_decref(root);
    if (!st && config_json) st = load_config(tok, config_json, config_len);
    if (st) {
        tok_free(tok);
        return st;
    }
    *out = tok;
    return VLLM_OK;
}

vllm_status tok_load_json(const char *json, size_t len, const char *config_json, size_t config_len,
                          tokenizer **out) {
    if (!out || !json) return vt_error(VLLM_ERR_INVALID_ARG, "tok_load_json: NULL argument");
    *out = NULL;
    /* Fast path: jansson parses the file without model.vocab / model.merges, which bpe.c reads
     * straight from the text. On any failure the whole file goes through jansson, so errors
     * (and any corner case the scanner does not take) behave exactly as the plain path. */
    tok_bpe_raw raw;
    char *rest = NULL;
    size_t rest_len = 0;
    if (tok_scan_model(json, len, &raw, &rest, &rest_len)) {
        vllm_status st = load_text(rest, rest_len, &raw, config_json, config_len, out);
        free(rest);
        if (st == VLLM_OK) return VLLM_OK;
    }
    return load_text(json, len, NULL, config_json, config_len, out);
}

/* Reads a whole file; VLLM_ERR_NOT_FOUND when it does not exist. A FIFO, a directory or a device
 * is refused (loader/regular_file.h), never waited on. */
static vllm_status read_file(const char *path, char **data, size_t *len) {
    return rf_read(path, TOK_MAX_FILE, data, len);
}

vllm_status tok_load_dir(const char *dir, tokenizer **out) {
    if (!dir || !out) return vt_error(VLLM_ERR_INVALID_ARG, "tok_load_dir: NULL argument");
    *out = NULL;
    size_t dlen = strlen(dir);
    char *path = malloc(dlen + sizeof("/" TOK_CONFIG_FILE));
    if (!path) return oom();
    char *json = NULL, *cfg = NULL;
    size_t json_len = 0, cfg_len = 0;
    snprintf(path, dlen + sizeof("/" TOK_CONFIG_FILE), "%s/" TOK_FILE, dir);
    vllm_status st = read_file(path, &json, &json_len);
    if (!st) {
        snprintf(path, dlen + sizeof("/" TOK_CONFIG_FILE), "%s/" TOK_CONFIG_FILE, dir);
        st = read_file(path, &cfg, &cfg_len);
        if (st == VLLM_ERR_NOT_FOUND) st = VLLM_OK; /* optional */
        if (!st) {
            st = tok_load_json(json, json_len, cfg, cfg_len, out);
            if (st) vt_error_prefix("%s", dir);
        }
    }
    free(path);
    free(json);
    free(cfg);
    return st;
}

/* ------------------------------------------------------------------ */
/* Added-token splitting (HF AddedVocabulary::find_matches)            */
/* ------------------------------------------------------------------ */

typedef struct tok_seg {
    size_t start, end;
    int32_t id; /* added token id, -1 for text to run through the pipeline */
} tok_seg;

typedef struct tok_segs {
    tok_seg *data;
    size_t n, cap;
} tok_segs;

static vllm_status segs_push(tok_segs *s, size_t start, size_t end, int32_t id) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        tok_seg *d = realloc(s->data, cap * sizeof *d);
        if (!d) return oom();
        s->data = d;
        s->cap = cap;
    }
    s->data[s->n++] = (tok_seg){start, end, id};
    return VLLM_OK;
}

/* Last code point before pos (s valid UTF-8). */
static uint32_t char_before(const char *s, size_t pos) {
    size_t k = pos - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp = 0xFFFD;
    tok_utf8_decode(s + k, pos - k, &cp);
    return cp;
}

static uint32_t char_at(const char *s, size_t len, size_t pos) {
    uint32_t cp = 0xFFFD;
    tok_utf8_decode(s + pos, len - pos, &cp);
    return cp;
}

static vllm_status find_added(const tokenizer *tok, const tok_match_set *set, const char *s, size_t len,
                              tok_segs *out) {
    out->n = 0;
    size_t start_offset = 0, pos = 0;
    vllm_status st = VLLM_OK;
    bool any = set->start[256] > 0;
    while (any && pos < len) {
        uint8_t b = (uint8_t)s[pos];
        const tok_added *hit = NULL;
        for (uint32_t k = set->start[b]; k < set->start[b + 1]; k++) {
            const tok_added *a = &tok->added[set->order[k]];
            if (a->pattern_len <= len - pos && memcmp(s + pos, a->pattern, a->pattern_len) == 0) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + hit->pattern_len;
        pos = stop; /* the search resumes after the raw match, whatever is done with it */
        if (hit->single_word) {
            bool start_space = start == 0 || !tok_is_word_char(char_before(s, start));
            bool stop_space = stop == len || !tok_is_word_char(char_at(s, len, stop));
            if (!start_space || !stop_space) continue;
        }
        if (hit->lstrip) {
            size_t k = start;
            while (k > 0 && tok_is_whitespace(char_before(s, k))) {
                k--;
                while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            }
            start = k > start_offset ? k : start_offset;
        }
        if (hit->rstrip) {
            while (stop < len && tok_is_whitespace(char_at(s, len, stop)))
                stop += tok_utf8_char_len(s + stop, len - stop);
        }
        if (start_offset < start && (st = segs_push(out, start_offset, start, -1))) return st;
        if ((st = segs_push(out, start, stop, hit->id))) return st;
        start_offset = stop;
    }
    if (start_offset < len) st = segs_push(out, start_offset, len, -1);
    return st;
}

/* ------------------------------------------------------------------ */
/* Encode / decode                                                     */
/* ------------------------------------------------------------------ */

typedef struct encode_ctx {
    tok_ids ids;
    tok_segs raw, norm;
    tok_buf text;
    tok_pieces pieces, scratch;
    tok_bpe_scratch *bpe;
} encode_ctx;

static void encode_ctx_free(encode_ctx *c) {
    tok_ids_free(&c->ids);
    free(c->raw.data);
    free(c->norm.data);
    tok_buf_free(&c->text);
    tok_pieces_free(&c->pieces);
    tok_pieces_free(&c->scratch);
    tok_bpe_scratch_free(c->bpe);
}

/* normalized text (between added tokens) -> pre-tokenizer -> model */
static vllm_status encode_segment(const tokenizer *tok, encode_ctx *c, const char *s, size_t len, bool at_start) {
    vllm_status st = find_added(tok, &tok->norm_set, s, len, &c->norm);
    for (size_t i = 0; i < c->norm.n && !st; i++) {
        tok_seg g = c->norm.data[i];
        if (g.id >= 0) {
            st = tok_ids_push(&c->ids, g.id);
            continue;
        }
        tok_pieces_clear(&c->pieces);
        if ((st = tok_pieces_push(&c->pieces, s + g.start, g.end - g.start, at_start && g.start == 0))) break;
        if (tok->pre && (st = tok_pretokenizer_apply(tok->pre, &c->pieces, &c->scratch))) break;
        for (size_t k = 0; k < c->pieces.n && !st; k++)
            st = tok_bpe_tokenize(tok->model, tok_piece_str(&c->pieces, k), c->pieces.items[k].len, &c->bpe, &c->ids);
    }
    return st;
}

static vllm_status encode(const tokenizer *tok, const char *text, size_t len, bool add_special, encode_ctx *c) {
    vllm_status st = find_added(tok, &tok->raw_set, text, len, &c->raw);
    for (size_t i = 0; i < c->raw.n && !st; i++) {
        tok_seg g = c->raw.data[i];
        if (g.id >= 0) {
            st = tok_ids_push(&c->ids, g.id);
            continue;
        }
        c->text.len = 0;
        if (tok->normalizer) st = tok_normalizer_apply(tok->normalizer, text + g.start, g.end - g.start, &c->text);
        else st = tok_buf_append(&c->text, text + g.start, g.end - g.start);
        if (!st && c->text.len) st = encode_segment(tok, c, c->text.data, c->text.len, g.start == 0);
    }
    if (st || !add_special) return st;
    if (tok_postprocessor_adds_tokens(tok->post)) return tok_postprocessor_apply(tok->post, &c->ids);
    /* No template: tokenizer_config.json's add_bos_token / add_eos_token. */
    if (tok->add_bos && tok->bos_id >= 0) {
        if ((st = tok_ids_push(&c->ids, 0))) return st;
        memmove(c->ids.data + 1, c->ids.data, (c->ids.n - 1) * sizeof(int32_t));
        c->ids.data[0] = tok->bos_id;
    }
    if (tok->add_eos && tok->eos_id >= 0) st = tok_ids_push(&c->ids, tok->eos_id);
    return st;
}

vllm_status tok_encode(const tokenizer *tok, const char *text, size_t len, bool add_special, int32_t **ids,
                       size_t *n) {
    if (!ids || !n) return vt_error(VLLM_ERR_INVALID_ARG, "tok_encode: NULL output");
    *ids = NULL;
    *n = 0;
    if (!tok || (!text && len)) return vt_error(VLLM_ERR_INVALID_ARG, "tok_encode: NULL argument");
    if (!text) text = "";
    if (!tok_utf8_valid(text, len)) {
        size_t bad = 0;
        uint32_t cp;
        for (size_t k; bad < len && (k = tok_utf8_decode(text + bad, len - bad, &cp)) != 0;) bad += k;
        return vt_error(VLLM_ERR_INVALID_ARG, "tokenizer: input is not valid UTF-8 (byte %zu)", bad);
    }
    encode_ctx c = {0};
    vllm_status st = encode(tok, text, len, add_special, &c);
    if (!st && !c.ids.data) { /* never hand out NULL, even for no ids */
        st = tok_ids_push(&c.ids, 0);
        c.ids.n = 0;
    }
    if (st) {
        encode_ctx_free(&c);
        return st;
    }
    *ids = c.ids.data;
    *n = c.ids.n;
    c.ids.data = NULL;
    encode_ctx_free(&c);
    return VLLM_OK;
}

/* transformers' clean_up_tokenization: these replacements, each over the whole text, in order
 * (Python str.replace: non-overlapping, left to right). All shrink, so they run in place. */
static void clean_up_tokenization(tok_buf *b) {
    static const struct { const char *from, *to; } rules[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        size_t fl = strlen(rules[k].from), tl = strlen(rules[k].to), r = 0, w = 0;
        while (r < b->len) {
            if (b->len - r >= fl && !memcmp(b->data + r, rules[k].from, fl)) {
                memcpy(b->data + w, rules[k].to, tl); /* w <= r: never overwrites unread text */
                w += tl;
                r += fl;
            } else {
                b->data[w++] = b->data[r++];
            }
        }
        b->len = w;
        if (b->data) b->data[w] = '\0';
    }
}

vllm_status tok_decode(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, char **text) {
    return tok_decode_len(tok, ids, n, skip_special, text, NULL);
}

vllm_status tok_decode_len(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, char **text,
                           size_t *len) {
    return tok_decode_ex(tok, ids, n, skip_special, tok && tok->cleanup, text, len);
}

vllm_status tok_decode_ex(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, bool cleanup,
                          char **text, size_t *len) {
    if (len) *len = 0;
    if (!text) return vt_error(VLLM_ERR_INVALID_ARG, "tok_decode: NULL output");
    *text = NULL;
    if (!tok || (!ids && n)) return vt_error(VLLM_ERR_INVALID_ARG, "tok_decode: NULL argument");
    tok_pieces tokens = {0}, scratch = {0};
    tok_buf out = {0};
    vllm_status st = VLLM_OK;
    for (size_t i = 0; i < n && !st; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->vocab_size) {
            st = vt_error(VLLM_ERR_INVALID_ARG, "tokenizer: token id %d (at %zu) out of range [0, %d)", (int)id, i,
                          (int)tok->vocab_size);
            break;
        }
        if (skip_special && tok->special_by_id[id]) continue;
        const char *p = id_piece(tok, id);
        if (p) st = tok_pieces_push(&tokens, p, strlen(p), false); /* ids without a piece are dropped, as HF */
    }
    if (!st && tok->decoder) st = tok_decoder_apply(tok->decoder, &tokens, &scratch);
    for (size_t i = 0; i < tokens.n && !st; i++) {
        if (!tok->decoder && i > 0) st = tok_buf_append(&out, " ", 1); /* no decoder: join with spaces */
        if (!st) st = tok_buf_append(&out, tok_piece_str(&tokens, i), tokens.items[i].len);
    }
    if (!st && !out.data) st = tok_buf_append(&out, "", 0);
    if (!st && cleanup) clean_up_tokenization(&out);
    tok_pieces_free(&tokens);
    tok_pieces_free(&scratch);
    if (st) {
        tok_buf_free(&out);
        return st;
    }
    *text = out.data;
    if (len) *len = out.len;
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Vocabulary queries                                                  */
/* ------------------------------------------------------------------ */

int tok_vocab_size(const tokenizer *tok) { return tok ? tok->vocab_size : 0; }
int tok_bos_id(const tokenizer *tok) { return tok ? tok->bos_id : -1; }
int tok_eos_id(const tokenizer *tok) { return tok ? tok->eos_id : -1; }

bool tok_is_special(const tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->vocab_size && tok->special_by_id[id];
}

const char *tok_id_to_piece(const tokenizer *tok, int32_t id) { return tok ? id_piece(tok, id) : NULL; }

int32_t tok_piece_to_id(const tokenizer *tok, const char *piece) {
    if (!tok || !piece) return -1;
    size_t len = strlen(piece);
    int32_t k = tok_strmap_get(&tok->added_map, piece, len);
    if (k >= 0) return tok->added[k].id;
    return tok_bpe_piece_to_id(tok->model, piece, len);
}
