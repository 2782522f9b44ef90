/*
 * util.c: the tokenizer's building blocks: growable buffers and piece lists, UTF-8 and
 * Unicode classes, the GPT-2 byte<->unicode map, hash maps (vocab, merges), Oniguruma
 * regexes and literal patterns, HF's split-delimiter rules, and JSON field helpers.
 */
#include "core/utf8.h"
#include "tokenizer/internal.h"

#include <oniguruma.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static vllm_status oom(const char *what) {
    return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (%s)", what);
}

/* ------------------------------------------------------------------ */
/* Buffers                                                             */
/* ------------------------------------------------------------------ */

vllm_status tok_buf_reserve(tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1) return oom("buffer size overflow");
    size_t need = b->len + extra + 1; /* + NUL */
    if (need <= b->cap) return VLLM_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) return oom("buffer");
    b->data = p;
    b->cap = cap;
    return VLLM_OK;
}

vllm_status tok_buf_append(tok_buf *b, const void *s, size_t n) {
    vllm_status st = tok_buf_reserve(b, n);
    if (st) return st;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return VLLM_OK;
}

vllm_status tok_buf_append_cp(tok_buf *b, uint32_t cp) {
    char tmp[4];
    size_t n = tok_utf8_encode(cp, tmp);
    return tok_buf_append(b, tmp, n);
}

void tok_buf_free(tok_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

vllm_status tok_ids_push(tok_ids *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 32;
        if (cap > SIZE_MAX / sizeof(int32_t)) return oom("id list size overflow");
        int32_t *p = realloc(v->data, cap * sizeof(int32_t));
        if (!p) return oom("id list");
        v->data = p;
        v->cap = cap;
    }
    v->data[v->n++] = id;
    return VLLM_OK;
}

void tok_ids_free(tok_ids *v) {
    free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
}

vllm_status tok_pieces_push(tok_pieces *p, const char *s, size_t len, bool at_start) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        if (cap > SIZE_MAX / sizeof(tok_piece)) return oom("piece list size overflow");
        tok_piece *items = realloc(p->items, cap * sizeof(tok_piece));
        if (!items) return oom("piece list");
        p->items = items;
        p->cap = cap;
    }
    size_t off = p->text.len;
    /* Each piece is stored NUL-terminated so it can be handed out as a C string. */
    vllm_status st = tok_buf_reserve(&p->text, len + 1);
    if (st) return st;
    if (len) memcpy(p->text.data + off, s, len);
    p->text.data[off + len] = '\0';
    p->text.len = off + len + 1;
    p->items[p->n++] = (tok_piece){off, len, at_start};
    return VLLM_OK;
}

void tok_pieces_clear(tok_pieces *p) {
    p->n = 0;
    p->text.len = 0;
}

void tok_pieces_free(tok_pieces *p) {
    tok_buf_free(&p->text);
    free(p->items);
    p->items = NULL;
    p->n = p->cap = 0;
}

void tok_pieces_swap(tok_pieces *a, tok_pieces *b) {
    tok_pieces t = *a;
    *a = *b;
    *b = t;
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */
/* ------------------------------------------------------------------ */

static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Valid range of the second byte of a sequence led by c (Unicode table 3-7). */
static void second_byte_range(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c == 0xE0) *lo = 0xA0;
    else if (c == 0xED) *hi = 0x9F;
    else if (c == 0xF0) *lo = 0x90;
    else if (c == 0xF4) *hi = 0x8F;
}

size_t tok_utf8_decode(const char *s, size_t len, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (len == 0) return 0;
    unsigned char c = u[0], lo, hi;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    else return 0;
    if (len < n) return 0;
    second_byte_range(c, &lo, &hi);
    if (u[1] < lo || u[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (!is_cont(u[i])) return 0;
    if (n == 2) *cp = ((uint32_t)(c & 0x1F) << 6) | (u[1] & 0x3F);
    else if (n == 3) *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    else
        *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
              ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return n;
}

bool tok_utf8_valid(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = tok_utf8_decode(s + i, len - i, &cp);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

size_t tok_utf8_char_len(const char *s, size_t len) {
    uint32_t cp;
    size_t n = tok_utf8_decode(s, len, &cp);
    return n ? n : 1;
}

size_t tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
    return utf8_encode(cp, out);
}

vllm_status tok_utf8_lossy(const char *s, size_t len, tok_buf *out) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    vllm_status st;
    while (i < len) {
        uint32_t cp;
        size_t n = tok_utf8_decode(s + i, len - i, &cp);
        if (n) {
            i += n;
            continue;
        }
        /* Invalid: the maximal prefix of a well-formed sequence becomes one U+FFFD. */
        if ((st = tok_buf_append(out, s + run, i - run))) return st;
        unsigned char c = u[i], lo, hi;
        size_t want = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                    : (c >= 0xF0 && c <= 0xF4) ? 4 : 1;
        size_t bad = 1;
        if (want > 1) {
            second_byte_range(c, &lo, &hi);
            if (i + 1 < len && u[i + 1] >= lo && u[i + 1] <= hi) {
                bad = 2;
                while (bad < want && i + bad < len && is_cont(u[i + bad])) bad++;
            }
        }
        if ((st = tok_buf_append(out, fffd, 3))) return st;
        i += bad;
        run = i;
    }
    return tok_buf_append(out, s + run, len - run);
}

bool tok_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

bool tok_is_word_char(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200C || c == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

bool tok_is_digit(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

/* ------------------------------------------------------------------ */
/* GPT-2 bytes <-> unicode                                             */
/* ------------------------------------------------------------------ */
/* Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to themselves; the other 68 bytes
 * map, in increasing order, to U+0100..U+0143. */

static bool bl_printable(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_bytelevel_cp(uint8_t b) {
    if (bl_printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;                    /* 0x00..0x20: 33 bytes */
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F); /* 34 bytes */
    return 0x100 + 67;                                  /* 0xAD */
}

int tok_bytelevel_byte(uint32_t cp) {
    if (cp <= 0xFF) return bl_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 || cp > 0x100 + 67) return -1;
    uint32_t k = cp - 0x100;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7F + (k - 33));
    return 0xAD;
}

/* ------------------------------------------------------------------ */
/* Hash maps                                                           */
/* ------------------------------------------------------------------ */

struct tok_arena_block {
    tok_arena_block *next;
    size_t used, cap;
    char data[];
};

static char *arena_alloc(tok_arena_block **head, size_t n) {
    tok_arena_block *b = *head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (cap > SIZE_MAX - sizeof(tok_arena_block)) return NULL;
        b = malloc(sizeof(tok_arena_block) + cap);
        if (!b) return NULL;
        b->next = *head;
        b->used = 0;
        b->cap = cap;
        *head = b;
    }
    char *p = b->data + b->used;
    b->used += n;
    return p;
}

static uint32_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Smallest power of two that holds `expected` entries at most 3/4 full. */
static size_t table_cap(size_t expected) {
    size_t cap = 16;
    while (cap - cap / 4 <= expected && cap < ((size_t)1 << 40)) cap *= 2;
    return cap;
}

static bool table_full(size_t count, size_t cap) { return count + 1 > cap - cap / 4; }

vllm_status tok_strmap_init(tok_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = table_cap(expected);
    m->slots = calloc(m->cap, sizeof(tok_strmap_slot));
    if (!m->slots) return oom("string map");
    return VLLM_OK;
}

static uint32_t key_len(const char *key) {
    uint32_t len;
    memcpy(&len, key - sizeof len, sizeof len);
    return len;
}

static tok_strmap_slot *strmap_find(const tok_strmap *m, const char *key, size_t len, uint32_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        tok_strmap_slot *s = &m->slots[i];
        if (!s->key) return s;
        if (s->hash == h && key_len(s->key) == len && memcmp(s->key, key, len) == 0) return s;
    }
}

static vllm_status strmap_grow(tok_strmap *m) {
    size_t cap = m->cap * 2;
    tok_strmap_slot *slots = calloc(cap, sizeof(tok_strmap_slot));
    if (!slots) return oom("string map");
    for (size_t i = 0; i < m->cap; i++) {
        tok_strmap_slot *s = &m->slots[i];
        if (!s->key) continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return VLLM_OK;
}

vllm_status tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t value,
                           const char **stored) {
    if (len > UINT32_MAX - 8) return vt_error(VLLM_ERR_FORMAT, "tokenizer: key too long");
    if (table_full(m->count, m->cap)) {
        vllm_status st = strmap_grow(m);
        if (st) return st;
    }
    uint32_t h = hash_bytes(key, len);
    tok_strmap_slot *s = strmap_find(m, key, len, h);
    if (!s->key) {
        /* [uint32 length][key bytes][NUL], the length 4-byte aligned */
        size_t need = (sizeof(uint32_t) + len + 1 + 3) & ~(size_t)3;
        char *copy = arena_alloc(&m->arena, need);
        if (!copy) return oom("string map keys");
        uint32_t len32 = (uint32_t)len;
        memcpy(copy, &len32, sizeof len32);
        copy += sizeof len32;
        memcpy(copy, key, len);
        copy[len] = '\0';
        s->key = copy;
        s->hash = h;
        m->count++;
    }
    s->value = value;
    if (stored) *stored = s->key;
    return VLLM_OK;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    const tok_strmap_slot *s = strmap_find(m, key, len, hash_bytes(key, len));
    return s->key ? s->value : -1;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    tok_arena_block *b = m->arena;
    while (b) {
        tok_arena_block *next = b->next;
        free(b);
        b = next;
    }
    memset(m, 0, sizeof *m);
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

vllm_status tok_pairmap_init(tok_pairmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = table_cap(expected);
    m->slots = malloc(m->cap * sizeof(tok_pair_slot));
    if (!m->slots) return oom("merge map");
    for (size_t i = 0; i < m->cap; i++) m->slots[i].key = UINT64_MAX;
    return VLLM_OK;
}

static size_t pairmap_slot(const tok_pair_slot *slots, size_t cap, uint64_t key) {
    size_t mask = cap - 1;
    size_t i = mix64(key) & mask;
    while (slots[i].key != UINT64_MAX && slots[i].key != key) i = (i + 1) & mask;
    return i;
}

vllm_status tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    if (table_full(m->count, m->cap)) {
        tok_pairmap g;
        vllm_status st = tok_pairmap_init(&g, m->cap); /* doubles */
        if (st) return st;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key != UINT64_MAX) g.slots[pairmap_slot(g.slots, g.cap, m->slots[i].key)] = m->slots[i];
        g.count = m->count;
        tok_pairmap_free(m);
        *m = g;
    }
    uint64_t key = pair_key(a, b);
    tok_pair_slot *s = &m->slots[pairmap_slot(m->slots, m->cap, key)];
    if (s->key == UINT64_MAX) {
        s->key = key;
        m->count++;
    }
    s->rank = rank;
    s->new_id = new_id;
    return VLLM_OK;
}

bool tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    if (!m->slots) return false;
    const tok_pair_slot *s = &m->slots[pairmap_slot(m->slots, m->cap, pair_key(a, b))];
    if (s->key == UINT64_MAX) return false;
    *rank = s->rank;
    *new_id = s->new_id;
    return true;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ */
/* Regexes and patterns                                                */
/* ------------------------------------------------------------------ */

struct tok_regex {
    regex_t *re;
};

static pthread_once_t g_onig_once = PTHREAD_ONCE_INIT;
static int g_onig_rc;

static void onig_init_once(void) {
    OnigEncoding encs[1] = {ONIG_ENCODING_UTF8};
    g_onig_rc = onig_initialize(encs, 1);
}

/* Unicode property escapes. The system Oniguruma may carry older Unicode tables than HF's, so
 * before compiling, every general-category escape (\p{L}, \p{Lu}, \P{N}, \p{^S}, long names like
 * \p{Letter}) is replaced by an explicit code-point class built from utf8proc's category table,
 * and \d / \w (\D, \W) get the current Nd / word characters added to Oniguruma's own set.
 * Other escapes (scripts, \s, \h, ...) are left to Oniguruma. */

#define CAT(c) (1u << UTF8PROC_CATEGORY_##c)
#define MASK_L (CAT(LU) | CAT(LL) | CAT(LT) | CAT(LM) | CAT(LO))
#define MASK_M (CAT(MN) | CAT(MC) | CAT(ME))
#define MASK_N (CAT(ND) | CAT(NL) | CAT(NO))
#define MASK_P (CAT(PC) | CAT(PD) | CAT(PS) | CAT(PE) | CAT(PI) | CAT(PF) | CAT(PO))
#define MASK_S (CAT(SM) | CAT(SC) | CAT(SK) | CAT(SO))
#define MASK_Z (CAT(ZS) | CAT(ZL) | CAT(ZP))
#define MASK_C (CAT(CC) | CAT(CF) | CAT(CS) | CAT(CO) | CAT(CN))
#define MASK_WORD (MASK_L | MASK_M | CAT(ND) | CAT(NL) | CAT(PC))

/* Oniguruma's general-category names; matched ignoring case, spaces, '_' and '-'. */
static const struct { const char *name; uint32_t mask; } g_gc_names[] = {
    {"l", MASK_L}, {"letter", MASK_L}, {"lc", CAT(LU) | CAT(LL) | CAT(LT)},
    {"casedletter", CAT(LU) | CAT(LL) | CAT(LT)},
    {"lu", CAT(LU)}, {"uppercaseletter", CAT(LU)}, {"ll", CAT(LL)}, {"lowercaseletter", CAT(LL)},
    {"lt", CAT(LT)}, {"titlecaseletter", CAT(LT)}, {"lm", CAT(LM)}, {"modifierletter", CAT(LM)},
    {"lo", CAT(LO)}, {"otherletter", CAT(LO)},
    {"m", MASK_M}, {"mark", MASK_M}, {"combiningmark", MASK_M}, {"mn", CAT(MN)},
    {"nonspacingmark", CAT(MN)}, {"mc", CAT(MC)}, {"spacingmark", CAT(MC)}, {"me", CAT(ME)},
    {"enclosingmark", CAT(ME)},
    {"n", MASK_N}, {"number", MASK_N}, {"nd", CAT(ND)}, {"decimalnumber", CAT(ND)},
    {"nl", CAT(NL)}, {"letternumber", CAT(NL)}, {"no", CAT(NO)}, {"othernumber", CAT(NO)},
    {"p", MASK_P}, {"punctuation", MASK_P}, {"pc", CAT(PC)}, {"connectorpunctuation", CAT(PC)},
    {"pd", CAT(PD)}, {"dashpunctuation", CAT(PD)}, {"ps", CAT(PS)}, {"openpunctuation", CAT(PS)},
    {"pe", CAT(PE)}, {"closepunctuation", CAT(PE)}, {"pi", CAT(PI)}, {"initialpunctuation", CAT(PI)},
    {"pf", CAT(PF)}, {"finalpunctuation", CAT(PF)}, {"po", CAT(PO)}, {"otherpunctuation", CAT(PO)},
    {"s", MASK_S}, {"symbol", MASK_S}, {"sm", CAT(SM)}, {"mathsymbol", CAT(SM)}, {"sc", CAT(SC)},
    {"currencysymbol", CAT(SC)}, {"sk", CAT(SK)}, {"modifiersymbol", CAT(SK)}, {"so", CAT(SO)},
    {"othersymbol", CAT(SO)},
    {"z", MASK_Z}, {"separator", MASK_Z}, {"zs", CAT(ZS)}, {"spaceseparator", CAT(ZS)},
    {"zl", CAT(ZL)}, {"lineseparator", CAT(ZL)}, {"zp", CAT(ZP)}, {"paragraphseparator", CAT(ZP)},
    {"c", MASK_C}, {"other", MASK_C}, {"cc", CAT(CC)}, {"control", CAT(CC)}, {"cf", CAT(CF)},
    {"format", CAT(CF)}, {"cs", CAT(CS)}, {"surrogate", CAT(CS)}, {"co", CAT(CO)},
    {"privateuse", CAT(CO)}, {"cn", CAT(CN)}, {"unassigned", CAT(CN)},
};

/* Category mask of a property name (0: not a general category, left to Oniguruma). */
static uint32_t gc_mask(const char *name, size_t len) {
    char norm[32];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (c == ' ' || c == '_' || c == '-') continue;
        if (n + 1 >= sizeof norm) return 0;
        norm[n++] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    norm[n] = '\0';
    for (size_t i = 0; i < sizeof g_gc_names / sizeof g_gc_names[0]; i++)
        if (!strcmp(norm, g_gc_names[i].name)) return g_gc_names[i].mask;
    return 0;
}

/* The code points as runs of one category, computed once (~3.3k runs). Surrogates are left
 * out: they never occur in valid UTF-8 and Oniguruma's UTF-8 classes need not hold them. */
typedef struct gc_run {
    uint32_t lo, hi;
    uint8_t cat;
} gc_run;

static gc_run *g_runs;
static size_t g_nruns;
static pthread_once_t g_runs_once = PTHREAD_ONCE_INIT;

static void gc_runs_init(void) {
    size_t cap = 4096, n = 0;
    gc_run *r = malloc(cap * sizeof *r);
    if (!r) return;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp == 0xD800) cp = 0xE000;
        uint8_t cat = (uint8_t)utf8proc_category((utf8proc_int32_t)cp);
        if (n && r[n - 1].cat == cat && r[n - 1].hi + 1 == cp) {
            r[n - 1].hi = cp;
            continue;
        }
        if (n == cap) {
            gc_run *g = realloc(r, 2 * cap * sizeof *r);
            if (!g) {
                free(r);
                return;
            }
            r = g;
            cap *= 2;
        }
        r[n++] = (gc_run){cp, cp, cat};
    }
    g_runs = r;
    g_nruns = n;
}

/* Cache of class bodies ("\x{41}-\x{5a}..."), one per (mask, negated); lives until exit. */
typedef struct gc_class {
    uint32_t mask;
    bool neg;
    char *body;
    size_t len;
    struct gc_class *next;
} gc_class;

static gc_class *g_classes;
static pthread_mutex_t g_classes_lock = PTHREAD_MUTEX_INITIALIZER;

static vllm_status append_range(tok_buf *b, uint32_t lo, uint32_t hi) {
    char tmp[40];
    int n = lo == hi ? snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)lo)
                     : snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)lo, (unsigned)hi);
    return tok_buf_append(b, tmp, (size_t)n);
}

/* The ranges (no brackets) of the code points whose category is in mask, or of all the others
 * (neg), surrogates excluded. *body points into the cache. */
static vllm_status gc_class_body(uint32_t mask, bool neg, const char **body, size_t *len) {
    pthread_once(&g_runs_once, gc_runs_init);
    if (!g_runs) return oom("unicode category table");
    pthread_mutex_lock(&g_classes_lock);
    vllm_status st = VLLM_OK;
    gc_class *c = g_classes;
    while (c && !(c->mask == mask && c->neg == neg)) c = c->next;
    if (!c) {
        tok_buf b = {0};
        bool open = false; /* a range [lo, hi] is pending */
        uint32_t lo = 0, hi = 0;
        for (size_t i = 0; i < g_nruns && !st; i++) {
            bool in = ((mask >> g_runs[i].cat) & 1u) != neg;
            if (!in) continue;
            if (open && hi + 1 == g_runs[i].lo) {
                hi = g_runs[i].hi;
                continue;
            }
            if (open) st = append_range(&b, lo, hi);
            lo = g_runs[i].lo, hi = g_runs[i].hi, open = true;
        }
        if (!st && open) st = append_range(&b, lo, hi);
        if (!st && !b.data) st = tok_buf_append(&b, "", 0);
        if (!st && !(c = malloc(sizeof *c))) st = oom("unicode class cache");
        if (st) {
            tok_buf_free(&b);
        } else {
            *c = (gc_class){mask, neg, b.data, b.len, g_classes};
            g_classes = c;
        }
    }
    if (c) {
        *body = c->body;
        *len = c->len;
    }
    pthread_mutex_unlock(&g_classes_lock);
    return st;
}

/* Appends the class for mask: in_class: the bare ranges (inside an enclosing [...]; a negated
 * set gives the complement ranges), else a bracketed class. keep: an Oniguruma escape ("\\d")
 * kept in the class as well (union with its own tables); then a negated set inside a class
 * becomes a nested [^...]. */
static vllm_status emit_class(tok_buf *out, uint32_t mask, bool neg, bool in_class, const char *keep) {
    const char *body = NULL;
    size_t blen = 0;
    bool nested = !in_class || (keep && neg);
    vllm_status st = gc_class_body(mask, nested ? false : neg, &body, &blen);
    if (st) return st;
    if (nested && (st = tok_buf_append(out, neg ? "[^" : "[", neg ? 2 : 1))) return st;
    if (keep && (st = tok_buf_append(out, keep, strlen(keep)))) return st;
    if ((st = tok_buf_append(out, body, blen))) return st;
    return nested ? tok_buf_append(out, "]", 1) : VLLM_OK;
}

/* Rewrites pattern into out (see above). Tracks character classes ([...], nested, POSIX
 * brackets [:alpha:]) to know whether an escape stands inside one. */
static vllm_status regex_rewrite(const char *p, size_t len, tok_buf *out) {
    int depth = 0;
    size_t i = 0;
    vllm_status st = VLLM_OK;
    while (i < len && !st) {
        char c = p[i];
        if (c == '\\' && i + 1 < len) {
            char e = p[i + 1];
            if ((e == 'p' || e == 'P') && i + 2 < len && p[i + 2] == '{') {
                const char *name = p + i + 3, *close = memchr(name, '}', len - (i + 3));
                if (close) {
                    bool neg = e == 'P';
                    size_t nlen = (size_t)(close - name);
                    if (nlen && name[0] == '^') neg = !neg, name++, nlen--;
                    uint32_t mask = gc_mask(name, nlen);
                    if (mask) {
                        st = emit_class(out, mask, neg, depth > 0, NULL);
                        i = (size_t)(close - p) + 1;
                        continue;
                    }
                }
            } else if (e == 'd' || e == 'D' || e == 'w' || e == 'W') {
                bool word = e == 'w' || e == 'W', neg = e == 'D' || e == 'W';
                st = emit_class(out, word ? MASK_WORD : CAT(ND), neg, depth > 0, word ? "\\w" : "\\d");
                i += 2;
                continue;
            }
            size_t n = 1 + tok_utf8_char_len(p + i + 1, len - i - 1); /* the escape, verbatim */
            st = tok_buf_append(out, p + i, n);
            i += n;
            continue;
        }
        if (c == '[') {
            if (depth > 0 && i + 1 < len && p[i + 1] == ':') { /* POSIX bracket [:alpha:] */
                size_t j = i + 2;
                while (j < len && j < i + 16 && ((p[j] >= 'a' && p[j] <= 'z') || p[j] == '^')) j++;
                if (j + 1 < len && p[j] == ':' && p[j + 1] == ']') {
                    st = tok_buf_append(out, p + i, j + 2 - i);
                    i = j + 2;
                    continue;
                }
            }
            depth++;
            size_t j = i + 1;
            if (j < len && p[j] == '^') j++;
            if (j < len && p[j] == ']') j++; /* a leading ']' is literal */
            st = tok_buf_append(out, p + i, j - i);
            i = j;
            continue;
        }
        if (c == ']' && depth > 0) depth--;
        st = tok_buf_append(out, p + i, 1);
        i++;
    }
    if (!st && !out->data) st = tok_buf_append(out, "", 0);
    return st;
}

vllm_status tok_regex_new(const char *pattern, size_t len, const char *path, tok_regex **out) {
    *out = NULL;
    pthread_once(&g_onig_once, onig_init_once);
    if (g_onig_rc != ONIG_NORMAL)
        return vt_error(VLLM_ERR_INTERNAL, "tokenizer: Oniguruma failed to initialize (%d)", g_onig_rc);
    tok_regex *r = calloc(1, sizeof *r);
    if (!r) return oom("regex");
    tok_buf pat = {0};
    vllm_status st = regex_rewrite(pattern, len, &pat);
    if (st) {
        free(r);
        return st;
    }
    OnigErrorInfo einfo;
    const OnigUChar *p = (const OnigUChar *)pat.data;
    int rc = onig_new(&r->re, p, p + pat.len, ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &einfo);
    if (rc != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, rc, &einfo); /* einfo may point into pat */
        tok_buf_free(&pat);
        free(r);
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s: bad regex: %s", path, (const char *)msg);
    }
    tok_buf_free(&pat);
    *out = r;
    return VLLM_OK;
}

void tok_regex_free(tok_regex *re) {
    if (!re) return;
    onig_free(re->re);
    free(re);
}

void tok_spans_free(tok_spans *s) {
    free(s->data);
    s->data = NULL;
    s->n = s->cap = 0;
}

vllm_status tok_spans_push(tok_spans *s, size_t start, size_t end) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        if (cap > SIZE_MAX / sizeof(tok_span)) return oom("match list size overflow");
        tok_span *d = realloc(s->data, cap * sizeof(tok_span));
        if (!d) return oom("match list");
        s->data = d;
        s->cap = cap;
    }
    s->data[s->n++] = (tok_span){start, end};
    return VLLM_OK;
}

static vllm_status regex_find(const tok_regex *re, const char *s, size_t len, tok_spans *out) {
    OnigRegion *region = onig_region_new();
    if (!region) return oom("regex region");
    const OnigUChar *u = (const OnigUChar *)s;
    size_t last_end = 0, last_match_end = SIZE_MAX;
    vllm_status st = VLLM_OK;
    while (last_end <= len) {
        int r = onig_search(re->re, u, u + len, u + last_end, u + len, region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) {
            st = vt_error(VLLM_ERR_INTERNAL, "tokenizer: regex search failed (%d)", r);
            break;
        }
        size_t ms = (size_t)region->beg[0], me = (size_t)region->end[0];
        if (ms == me && last_match_end == me) {
            /* No empty match right after the previous match: step one character. */
            last_end += last_end < len ? tok_utf8_char_len(s + last_end, len - last_end) : 1;
            continue;
        }
        last_end = me;
        last_match_end = me;
        if ((st = tok_spans_push(out, ms, me))) break;
    }
    onig_region_free(region, 1);
    return st;
}

vllm_status tok_literal_find(const char *lit, size_t lit_len, const char *s, size_t len,
                             tok_spans *out) {
    out->n = 0;
    if (lit_len == 0) return VLLM_OK;
    size_t i = 0;
    while (i + lit_len <= len) {
        /* first byte with memchr, then the rest (memmem is not C11) */
        const char *hit = memchr(s + i, lit[0], len - i - lit_len + 1);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (memcmp(hit + 1, lit + 1, lit_len - 1) != 0) {
            i = at + 1;
            continue;
        }
        vllm_status st = tok_spans_push(out, at, at + lit_len);
        if (st) return st;
        i = at + lit_len;
    }
    return VLLM_OK;
}

vllm_status tok_pattern_find(const tok_pattern *p, const char *s, size_t len, tok_spans *out) {
    out->n = 0;
    if (p->regex) return regex_find(p->regex, s, len, out);
    return tok_literal_find(p->literal, p->literal_len, s, len, out);
}

vllm_status tok_pattern_load(json_t *j, const char *path, tok_pattern *out) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(j))
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must be an object {\"String\": ...} or {\"Regex\": ...}", path);
    json_t *lit = json_object_get(j, "String");
    json_t *re = json_object_get(j, "Regex");
    if (lit && json_is_string(lit)) {
        out->literal_len = json_string_length(lit);
        return tok_strndup(json_string_value(lit), out->literal_len, &out->literal);
    }
    if (re && json_is_string(re)) {
        char sub[TOK_PATH_MAX];
        tok_pathf(sub, "%s.Regex", path);
        return tok_regex_new(json_string_value(re), json_string_length(re), sub, &out->regex);
    }
    return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must have a string \"String\" or \"Regex\"", path);
}

void tok_pattern_free(tok_pattern *p) {
    free(p->literal);
    tok_regex_free(p->regex);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------ */
/* Split behaviors (HF NormalizedString::split)                        */
/* ------------------------------------------------------------------ */

vllm_status tok_split_behavior_parse(json_t *j, const char *path, tok_split_behavior *out) {
    static const struct { const char *name; tok_split_behavior b; } names[] = {
        {"Removed", TOK_SPLIT_REMOVED}, {"Isolated", TOK_SPLIT_ISOLATED},
        {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT}, {"Contiguous", TOK_SPLIT_CONTIGUOUS},
    };
    const char *s = json_string_value(j);
    if (!s) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.behavior must be a string", path);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].b;
            return VLLM_OK;
        }
    }
    return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.behavior '%s' unknown", path, s);
}

typedef struct seg {
    size_t start, end;
    bool flag; /* is_match before folding; "remove" after */
} seg;

vllm_status tok_split_apply(const char *s, size_t len, const tok_spans *matches,
                            tok_split_behavior behavior, bool invert, bool at_start,
                            tok_pieces *out) {
    if (len == 0) return VLLM_OK;
    if (matches->n > (SIZE_MAX / sizeof(seg) - 1) / 2) return oom("split size overflow");
    seg *segs = malloc((2 * matches->n + 1) * sizeof(seg));
    if (!segs) return oom("split");
    /* 1. Cover s with (span, is_match) segments. */
    size_t n = 0, prev = 0;
    for (size_t i = 0; i < matches->n; i++) {
        tok_span m = matches->data[i];
        if (prev != m.start) segs[n++] = (seg){prev, m.start, false};
        segs[n++] = (seg){m.start, m.end, true};
        prev = m.end;
    }
    if (prev != len) segs[n++] = (seg){prev, len, false};
    if (invert)
        for (size_t i = 0; i < n; i++) segs[i].flag = !segs[i].flag;

    /* 2. Fold by behavior; afterwards flag means "remove". Folding is in place (k <= i). */
    size_t k = 0;
    bool prev_match = false;
    switch (behavior) {
    case TOK_SPLIT_REMOVED:
        k = n;
        break;
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) segs[i].flag = false;
        k = n;
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            bool m = segs[i].flag;
            if (m == prev_match && k > 0) segs[k - 1].end = segs[i].end;
            else segs[k++] = (seg){segs[i].start, segs[i].end, false};
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < n; i++) {
            bool m = segs[i].flag;
            if (m && !prev_match && k > 0) segs[k - 1].end = segs[i].end;
            else segs[k++] = (seg){segs[i].start, segs[i].end, false};
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_NEXT: {
        /* Same fold from the right: a match joins the non-match that follows it. Fill from the
         * top of the array down (slot index >= i keeps it in place), then shift to 0. */
        size_t top = n;
        for (size_t i = n; i-- > 0;) {
            bool m = segs[i].flag;
            if (m && !prev_match && top < n) segs[top].start = segs[i].start;
            else segs[--top] = (seg){segs[i].start, segs[i].end, false};
            prev_match = m;
        }
        k = n - top;
        memmove(segs, segs + top, k * sizeof(seg));
        break;
    }
    }

    /* 3. Emit the kept, non-empty parts. */
    vllm_status st = VLLM_OK;
    for (size_t i = 0; i < k && !st; i++) {
        if (segs[i].flag || segs[i].end == segs[i].start) continue;
        st = tok_pieces_push(out, s + segs[i].start, segs[i].end - segs[i].start,
                             at_start && segs[i].start == 0);
    }
    free(segs);
    return st;
}

/* ------------------------------------------------------------------ */
/* JSON helpers                                                        */
/* ------------------------------------------------------------------ */

void tok_pathf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, TOK_PATH_MAX, fmt, ap);
    va_end(ap);
}

vllm_status tok_strndup(const char *s, size_t len, char **out) {
    *out = NULL;
    if (len == SIZE_MAX) return oom("string size overflow");
    char *p = malloc(len + 1);
    if (!p) return oom("string");
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    *out = p;
    return VLLM_OK;
}

vllm_status tok_json_bool(json_t *obj, const char *key, bool def, const char *path, bool *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return VLLM_OK;
    }
    if (!json_is_boolean(v))
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.%s must be a boolean", path, key);
    *out = json_is_true(v);
    return VLLM_OK;
}

vllm_status tok_json_str(json_t *obj, const char *key, bool required, const char *path,
                         const char **out, size_t *len) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (len) *len = 0;
    if (!v || json_is_null(v)) {
        if (required) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.%s missing", path, key);
        return VLLM_OK;
    }
    if (!json_is_string(v))
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.%s must be a string", path, key);
    *out = json_string_value(v);
    if (len) *len = json_string_length(v);
    return VLLM_OK;
}

vllm_status tok_json_type(json_t *obj, const char *path, const char **type) {
    if (!json_is_object(obj)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must be an object", path);
    return tok_json_str(obj, "type", true, path, type, NULL);
}

vllm_status tok_json_char(json_t *obj, const char *key, uint32_t def, const char *path,
                          uint32_t *out) {
    const char *s;
    size_t len;
    vllm_status st = tok_json_str(obj, key, false, path, &s, &len);
    if (st) return st;
    if (!s) {
        *out = def;
        return VLLM_OK;
    }
    uint32_t cp;
    size_t n = tok_utf8_decode(s, len, &cp);
    if (n == 0 || n != len)
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.%s must be a single character", path, key);
    *out = cp;
    return VLLM_OK;
}
