/*
 * bpe.c: the BPE model of tokenizer.json ("model": {"type": "BPE", ...}).
 *
 * Vocab and merges live in open-addressing hash tables (the 150k-entry vocabularies of Qwen3 or
 * Llama 3 load in milliseconds). Encoding one pre-tokenized piece follows HF's Word::merge_all:
 * split into characters (with byte fallback / unk), then repeatedly merge the adjacent pair with
 * the lowest merge rank (leftmost on ties) using a binary heap, so long pieces stay O(n log n).
 */
#include "tokenizer/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tok_bpe {
    tok_strmap vocab;      /* piece -> id */
    const char **pieces;   /* id -> piece (the vocab map's key copies), NULL for holes */
    int32_t size;          /* max id + 1 */
    tok_pairmap merges;    /* (left id, right id) -> (rank, merged id) */
    char *unk_token;       /* NULL: unknown characters are dropped (as HF) */
    int32_t unk_id;        /* -1 when unk_token is not in the vocab */
    char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix (NULL when unset) */
    size_t prefix_len, suffix_len;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* ids of "<0xXX>", -1 when absent */
};

typedef struct bpe_symbol {
    int32_t id;
    int32_t prev, next; /* neighbours in the word, -1 at the ends */
    uint32_t len;       /* bytes covered; 0 once merged into its left neighbour */
} bpe_symbol;

typedef struct bpe_merge {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
} bpe_merge;

struct tok_bpe_scratch {
    bpe_symbol *syms;
    size_t nsym, capsym;
    bpe_merge *heap;
    size_t nheap, capheap;
    tok_buf key;
};

static vllm_status oom(void) { return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (BPE)"); }

void tok_bpe_free(tok_bpe *m) {
    if (!m) return;
    tok_strmap_free(&m->vocab);
    free(m->pieces);
    tok_pairmap_free(&m->merges);
    free(m->unk_token);
    free(m->prefix);
    free(m->suffix);
    free(m);
}

int32_t tok_bpe_size(const tok_bpe *m) { return m->size; }

const char *tok_bpe_id_to_piece(const tok_bpe *m, int32_t id) {
    return id >= 0 && id < m->size ? m->pieces[id] : NULL;
}

int32_t tok_bpe_piece_to_id(const tok_bpe *m, const char *s, size_t len) {
    return tok_strmap_get(&m->vocab, s, len);
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */
/* ------------------------------------------------------------------ */

static vllm_status load_vocab(tok_bpe *m, json_t *vocab, const char *path) {
    if (!json_is_object(vocab)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.vocab must be an object", path);
    const char *key;
    json_t *v;
    int64_t max_id = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v))
            return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.vocab['%s'] must be an integer id", path, key);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= TOK_MAX_ID)
            return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.vocab['%s'] id %lld out of range [0, %d)", path, key,
                            (long long)id, TOK_MAX_ID);
        if (id > max_id) max_id = id;
    }
    m->size = (int32_t)(max_id + 1);
    m->pieces = calloc(m->size ? (size_t)m->size : 1, sizeof *m->pieces);
    if (!m->pieces) return oom();
    vllm_status st = tok_strmap_init(&m->vocab, json_object_size(vocab));
    if (st) return st;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        const char *stored;
        if ((st = tok_strmap_put(&m->vocab, key, strlen(key), id, &stored))) return st;
        if (!m->pieces[id]) m->pieces[id] = stored; /* duplicate ids: the first piece names the id */
    }
    return VLLM_OK;
}

static vllm_status merge_token_id(const tok_bpe *m, const char *s, size_t len, const char *path, size_t i,
                                  int32_t *id) {
    *id = tok_strmap_get(&m->vocab, s, len);
    if (*id < 0)
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.merges[%zu]: token '%.*s' is not in the vocab", path, i,
                        (int)(len > 200 ? 200 : len), s);
    return VLLM_OK;
}

/* Splits a legacy "left right" merge; false when it is not exactly two parts. */
static bool split_legacy(const char *s, size_t len, size_t *a_len, const char **b, size_t *b_len) {
    const char *sp = memchr(s, ' ', len);
    if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s))) return false;
    *a_len = (size_t)(sp - s);
    *b = sp + 1;
    *b_len = len - *a_len - 1;
    return true;
}

/* Adds merge number i (a, b) with the next rank; joined is scratch. */
static vllm_status add_merge(tok_bpe *m, const char *a, size_t a_len, const char *b, size_t b_len, const char *path,
                             size_t i, uint32_t *rank, tok_buf *joined) {
    int32_t a_id, b_id, new_id;
    vllm_status st;
    if ((st = merge_token_id(m, a, a_len, path, i, &a_id))) return st;
    if ((st = merge_token_id(m, b, b_len, path, i, &b_id))) return st;
    /* merged token = a + b without its continuing_subword_prefix */
    if (b_len < m->prefix_len || (b_len > m->prefix_len && ((unsigned char)b[m->prefix_len] & 0xC0) == 0x80))
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.merges[%zu]: '%.*s' is shorter than continuing_subword_prefix",
                        path, i, (int)(b_len > 200 ? 200 : b_len), b);
    joined->len = 0;
    if ((st = tok_buf_append(joined, a, a_len))) return st;
    if ((st = tok_buf_append(joined, b + m->prefix_len, b_len - m->prefix_len))) return st;
    if ((st = merge_token_id(m, joined->data, joined->len, path, i, &new_id))) return st;
    /* Duplicate pairs: the later rank wins, as HF's HashMap collect does. */
    return tok_pairmap_put(&m->merges, a_id, b_id, (*rank)++, new_id);
}

static vllm_status load_merges(tok_bpe *m, json_t *merges, const char *path) {
    if (!merges || json_is_null(merges)) merges = NULL;
    else if (!json_is_array(merges)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.merges must be an array", path);
    size_t count = merges ? json_array_size(merges) : 0;
    vllm_status st = tok_pairmap_init(&m->merges, count);
    if (st) return st;
    tok_buf joined = {0};
    uint32_t rank = 0;
    for (size_t i = 0; i < count && !st; i++) {
        json_t *e = json_array_get(merges, i);
        const char *a, *b;
        size_t a_len, b_len;
        if (json_is_string(e)) { /* legacy "left right" */
            a = json_string_value(e);
            size_t len = json_string_length(e);
            if (len >= 8 && memcmp(a, "#version", 8) == 0) continue;
            if (!split_legacy(a, len, &a_len, &b, &b_len)) {
                st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.merges[%zu] '%s' is not \"left right\"", path, i, a);
                break;
            }
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            a_len = json_string_length(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            b_len = json_string_length(json_array_get(e, 1));
        } else {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.merges[%zu] must be \"left right\" or [\"left\", \"right\"]",
                          path, i);
            break;
        }
        st = add_merge(m, a, a_len, b, b_len, path, i, &rank, &joined);
    }
    tok_buf_free(&joined);
    return st;
}

/* ------------------------------------------------------------------ */
/* Fast loading from the raw text (scan.c found the ranges)            */
/* ------------------------------------------------------------------ */

static vllm_status syntax(const char *path, const char *what, const char *base, const char *at) {
    return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s: invalid JSON at byte %zu of the value: %s", path,
                    (size_t)(at - base), what);
}

typedef struct vocab_entry {
    size_t off, len; /* key in the keys buffer */
    int32_t id;
} vocab_entry;

static vllm_status load_vocab_raw(tok_bpe *m, const char *text, size_t len, const char *path) {
    const char *p = text, *end = text + len;
    char vpath[TOK_PATH_MAX];
    tok_pathf(vpath, "%s.vocab", path);
    tok_buf keys = {0}, key = {0};
    vocab_entry *ents = NULL;
    size_t n = 0, cap = 0;
    int64_t max_id = -1;
    vllm_status st = VLLM_OK;
    if (p >= end || *p != '{') return syntax(vpath, "expected '{'", text, p);
    p++;
    tok_scan_ws(&p, end);
    bool empty = p < end && *p == '}';
    if (empty) p++;
    while (!empty && !st) {
        tok_scan_ws(&p, end);
        if ((st = tok_scan_string(&p, end, vpath, &key))) break;
        tok_scan_ws(&p, end);
        if (p >= end || *p != ':') {
            st = syntax(vpath, "expected ':'", text, p);
            break;
        }
        p++;
        tok_scan_ws(&p, end);
        int64_t id;
        int r = tok_scan_int(&p, end, TOK_MAX_ID - 1, &id);
        if (r == -1 || r == -2) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s['%s'] must be an integer id", vpath, key.data);
            break;
        }
        if (r == 1) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s['%s'] id out of range [0, %d)", vpath, key.data, TOK_MAX_ID);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            vocab_entry *e = realloc(ents, cap * sizeof *e);
            if (!e) {
                st = oom();
                break;
            }
            ents = e;
        }
        ents[n++] = (vocab_entry){keys.len, key.len, (int32_t)id};
        if ((st = tok_buf_append(&keys, key.data, key.len))) break;
        if (id > max_id) max_id = id;
        tok_scan_ws(&p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        st = syntax(vpath, "expected ',' or '}'", text, p);
    }
    tok_scan_ws(&p, end);
    if (!st && p != end) st = syntax(vpath, "trailing characters", text, p);
    if (!st) {
        m->size = (int32_t)(max_id + 1);
        m->pieces = calloc(m->size ? (size_t)m->size : 1, sizeof *m->pieces);
        if (!m->pieces) st = oom();
    }
    if (!st) st = tok_strmap_init(&m->vocab, n);
    for (size_t i = 0; i < n && !st; i++) {
        const char *stored;
        size_t before = m->vocab.count;
        st = tok_strmap_put(&m->vocab, keys.data + ents[i].off, ents[i].len, ents[i].id, &stored);
        if (!st && m->vocab.count == before) /* a repeated key: let jansson's rules decide */
            st = vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": %s: repeated key", vpath);
        if (!st && !m->pieces[ents[i].id]) m->pieces[ents[i].id] = stored;
    }
    free(ents);
    tok_buf_free(&keys);
    tok_buf_free(&key);
    return st;
}

static vllm_status load_merges_raw(tok_bpe *m, const char *text, size_t len, const char *path) {
    const char *p = text, *end = text + len;
    char mpath[TOK_PATH_MAX];
    tok_pathf(mpath, "%s.merges", path);
    /* Size the table from the commas (two per entry in the ["left", "right"] form); it grows
     * if the guess is short. */
    size_t guess = 0;
    for (const char *q = text; q < end; q++) guess += *q == ',';
    const char *first = text + 1;
    tok_scan_ws(&first, end);
    if (first < end && *first == '[') guess /= 2;
    vllm_status st = tok_pairmap_init(&m->merges, guess + 1);
    if (st) return st;
    tok_buf a = {0}, b = {0}, joined = {0};
    uint32_t rank = 0;
    if (p >= end || *p != '[') return syntax(mpath, "expected '['", text, p);
    p++;
    tok_scan_ws(&p, end);
    bool empty = p < end && *p == ']';
    if (empty) p++;
    for (size_t i = 0; !empty && !st; i++) {
        tok_scan_ws(&p, end);
        const char *bs;
        size_t a_len, b_len;
        if (p < end && *p == '"') { /* legacy "left right" */
            if ((st = tok_scan_string(&p, end, mpath, &a))) break;
            if (!(a.len >= 8 && memcmp(a.data, "#version", 8) == 0)) {
                if (!split_legacy(a.data, a.len, &a_len, &bs, &b_len)) {
                    st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s[%zu] '%s' is not \"left right\"", mpath, i, a.data);
                    break;
                }
                st = add_merge(m, a.data, a_len, bs, b_len, path, i, &rank, &joined);
            }
        } else if (p < end && *p == '[') {
            p++;
            tok_scan_ws(&p, end);
            if (p < end && *p != '"') goto bad_entry;
            if ((st = tok_scan_string(&p, end, mpath, &a))) break;
            tok_scan_ws(&p, end);
            if (p >= end || *p != ',') goto bad_entry;
            p++;
            tok_scan_ws(&p, end);
            if (p < end && *p != '"') goto bad_entry;
            if ((st = tok_scan_string(&p, end, mpath, &b))) break;
            tok_scan_ws(&p, end);
            if (p >= end || *p != ']') goto bad_entry;
            p++;
            st = add_merge(m, a.data, a.len, b.data, b.len, path, i, &rank, &joined);
        } else {
        bad_entry:
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s[%zu] must be \"left right\" or [\"left\", \"right\"]", mpath,
                          i);
            break;
        }
        if (st) break;
        tok_scan_ws(&p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == ']') {
            p++;
            break;
        }
        st = syntax(mpath, "expected ',' or ']'", text, p);
    }
    tok_scan_ws(&p, end);
    if (!st && p != end) st = syntax(mpath, "trailing characters", text, p);
    tok_buf_free(&a);
    tok_buf_free(&b);
    tok_buf_free(&joined);
    return st;
}

static vllm_status dup_opt_str(json_t *j, const char *key, const char *path, char **out, size_t *len) {
    const char *s;
    size_t n;
    vllm_status st = tok_json_str(j, key, false, path, &s, &n);
    if (st || !s) return st;
    if (len) *len = n;
    return tok_strndup(s, n, out);
}

vllm_status tok_bpe_load(json_t *j, const char *path, const tok_bpe_raw *raw, tok_bpe **out) {
    *out = NULL;
    tok_bpe *m = calloc(1, sizeof *m);
    if (!m) return oom();
    m->unk_id = -1;
    vllm_status st;
    json_t *dropout = json_object_get(j, "dropout");
    if (dropout && !json_is_null(dropout)) {
        if (!json_is_number(dropout)) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.dropout must be a number or null", path);
            goto fail;
        }
        if (json_number_value(dropout) > 0.0) {
            st = vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": %s.dropout > 0 not supported (inference is deterministic)",
                          path);
            goto fail;
        }
    }
    if ((st = dup_opt_str(j, "unk_token", path, &m->unk_token, NULL))) goto fail;
    if ((st = dup_opt_str(j, "continuing_subword_prefix", path, &m->prefix, &m->prefix_len))) goto fail;
    if ((st = dup_opt_str(j, "end_of_word_suffix", path, &m->suffix, &m->suffix_len))) goto fail;
    if ((st = tok_json_bool(j, "fuse_unk", false, path, &m->fuse_unk))) goto fail;
    if ((st = tok_json_bool(j, "byte_fallback", false, path, &m->byte_fallback))) goto fail;
    if ((st = tok_json_bool(j, "ignore_merges", false, path, &m->ignore_merges))) goto fail;
    if (raw && raw->vocab) st = load_vocab_raw(m, raw->vocab, raw->vocab_len, path);
    else st = load_vocab(m, json_object_get(j, "vocab"), path);
    if (st) goto fail;
    if (raw && raw->merges) st = load_merges_raw(m, raw->merges, raw->merges_len, path);
    else st = load_merges(m, json_object_get(j, "merges"), path);
    if (st) goto fail;
    if (m->unk_token) m->unk_id = tok_strmap_get(&m->vocab, m->unk_token, strlen(m->unk_token));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    *out = m;
    return VLLM_OK;
fail:
    tok_bpe_free(m);
    return st;
}

/* ------------------------------------------------------------------ */
/* Encoding                                                            */
/* ------------------------------------------------------------------ */

void tok_bpe_scratch_free(tok_bpe_scratch *sc) {
    if (!sc) return;
    free(sc->syms);
    free(sc->heap);
    tok_buf_free(&sc->key);
    free(sc);
}

static vllm_status add_symbol(tok_bpe_scratch *sc, int32_t id, size_t len) {
    if (sc->nsym == sc->capsym) {
        size_t cap = sc->capsym ? sc->capsym * 2 : 64;
        bpe_symbol *p = realloc(sc->syms, cap * sizeof *p);
        if (!p) return oom();
        sc->syms = p;
        sc->capsym = cap;
    }
    int32_t n = (int32_t)sc->nsym;
    if (n > 0) sc->syms[n - 1].next = n;
    sc->syms[n] = (bpe_symbol){id, n - 1, -1, (uint32_t)len};
    sc->nsym++;
    return VLLM_OK;
}

/* Min-heap on (rank, pos): the lowest rank first, the leftmost on ties. */
static bool merge_less(bpe_merge a, bpe_merge b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static vllm_status heap_push(tok_bpe_scratch *sc, bpe_merge m) {
    if (sc->nheap == sc->capheap) {
        size_t cap = sc->capheap ? sc->capheap * 2 : 64;
        bpe_merge *p = realloc(sc->heap, cap * sizeof *p);
        if (!p) return oom();
        sc->heap = p;
        sc->capheap = cap;
    }
    size_t i = sc->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_less(m, sc->heap[parent])) break;
        sc->heap[i] = sc->heap[parent];
        i = parent;
    }
    sc->heap[i] = m;
    return VLLM_OK;
}

static bpe_merge heap_pop(tok_bpe_scratch *sc) {
    bpe_merge top = sc->heap[0];
    bpe_merge last = sc->heap[--sc->nheap];
    size_t i = 0, n = sc->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(sc->heap[c + 1], sc->heap[c])) c++;
        if (!merge_less(sc->heap[c], last)) break;
        sc->heap[i] = sc->heap[c];
        i = c;
    }
    if (n) sc->heap[i] = last;
    return top;
}

static vllm_status push_pair(const tok_bpe *m, tok_bpe_scratch *sc, int32_t pos) {
    const bpe_symbol *s = &sc->syms[pos];
    if (s->next < 0) return VLLM_OK;
    uint32_t rank;
    int32_t new_id;
    if (!tok_pairmap_get(&m->merges, s->id, sc->syms[s->next].id, &rank, &new_id)) return VLLM_OK;
    return heap_push(sc, (bpe_merge){rank, pos, new_id});
}

static vllm_status merge_all(const tok_bpe *m, tok_bpe_scratch *sc) {
    vllm_status st;
    sc->nheap = 0;
    for (size_t i = 0; i + 1 < sc->nsym; i++)
        if ((st = push_pair(m, sc, (int32_t)i))) return st;
    while (sc->nheap) {
        bpe_merge top = heap_pop(sc);
        bpe_symbol *cur = &sc->syms[top.pos];
        if (cur->len == 0 || cur->next < 0) continue; /* merged away, or now last */
        bpe_symbol *right = &sc->syms[cur->next];
        uint32_t rank;
        int32_t new_id;
        /* Stale entry: the pair at pos changed since it was queued. */
        if (!tok_pairmap_get(&m->merges, cur->id, right->id, &rank, &new_id) || new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += right->len;
        cur->next = right->next;
        right->len = 0;
        if (cur->next >= 0) sc->syms[cur->next].prev = top.pos;
        if (cur->prev >= 0 && (st = push_pair(m, sc, cur->prev))) return st;
        if ((st = push_pair(m, sc, top.pos))) return st;
    }
    return VLLM_OK;
}

vllm_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t len, tok_bpe_scratch **scratch,
                             tok_ids *out) {
    if (len == 0) return VLLM_OK;
    if (m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vocab, s, len);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (len >= INT32_MAX) return vt_error(VLLM_ERR_TOO_LONG, "tokenizer: a %zu-byte word is too long for BPE", len);
    if (!*scratch && !(*scratch = calloc(1, sizeof(tok_bpe_scratch)))) return oom();
    tok_bpe_scratch *sc = *scratch;
    sc->nsym = 0;
    vllm_status st = VLLM_OK;
    int32_t unk_id = -1; /* pending unknown symbol (fused with following unknowns when fuse_unk) */
    size_t unk_len = 0;

    for (size_t i = 0; i < len && !st;) {
        size_t n = tok_utf8_char_len(s + i, len - i);
        /* the symbol's string: [prefix if not first] char [suffix if last] */
        const char *key = s + i;
        size_t key_len = n;
        if ((m->prefix && i > 0) || (m->suffix && i + n == len)) {
            sc->key.len = 0;
            if (m->prefix && i > 0) st = tok_buf_append(&sc->key, m->prefix, m->prefix_len);
            if (!st) st = tok_buf_append(&sc->key, s + i, n);
            if (!st && m->suffix && i + n == len) st = tok_buf_append(&sc->key, m->suffix, m->suffix_len);
            if (st) break;
            key = sc->key.data;
            key_len = sc->key.len;
        }
        int32_t id = tok_strmap_get(&m->vocab, key, key_len);
        if (id >= 0) {
            if (unk_id >= 0) {
                st = add_symbol(sc, unk_id, unk_len);
                unk_id = -1;
            }
            if (!st) st = add_symbol(sc, id, n);
        } else {
            bool done = false;
            if (m->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < key_len; k++) all = all && m->byte_ids[(unsigned char)key[k]] >= 0;
                if (all) { /* (as HF: a pending unk is not flushed before the bytes) */
                    for (size_t k = 0; k < key_len && !st; k++)
                        st = add_symbol(sc, m->byte_ids[(unsigned char)key[k]], 1);
                    done = true;
                }
            }
            if (!done && m->unk_token) {
                if (m->unk_id < 0) {
                    st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": model.unk_token '%s' is not in model.vocab",
                                  m->unk_token);
                } else if (unk_id >= 0 && m->fuse_unk) {
                    unk_len += n;
                } else {
                    if (unk_id >= 0) st = add_symbol(sc, unk_id, unk_len);
                    unk_id = m->unk_id;
                    unk_len = n;
                }
            }
        }
        i += n;
    }
    if (!st && unk_id >= 0) st = add_symbol(sc, unk_id, unk_len);
    if (!st) st = merge_all(m, sc);
    for (size_t i = 0; i < sc->nsym && !st; i++)
        if (sc->syms[i].len) st = tok_ids_push(out, sc->syms[i].id);
    return st;
}
