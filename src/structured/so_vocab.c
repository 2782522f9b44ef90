/* so_vocab.c: a model's vocabulary as byte strings, sorted with trie ranges, for grammar matching (so_vocab.h). */
#include "structured/so_vocab.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct so_vocab {
    int32_t n;          /* the model's vocabulary size */
    uint8_t *bytes;     /* every id's bytes, concatenated */
    size_t *off;        /* (n + 1) offsets into bytes */
    uint8_t *flags;     /* per id: SO_SPECIAL, SO_STOP */
    int32_t *stop;      /* the stop ids, as given (duplicates dropped) */
    int n_stop;
    int32_t *sorted;    /* the sorted ids */
    int32_t *sub_end;   /* per sorted index: its trie range's end */
    int32_t *rank;      /* per id: its sorted index, -1 for a special or stop id */
    int32_t n_sorted;
};

enum { SO_SPECIAL = 1, SO_STOP = 2 };

void so_vocab_free(so_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->flags);
    free(v->stop);
    free(v->sorted);
    free(v->sub_end);
    free(v->rank);
    free(v);
}

/* a is a prefix of b */
static bool is_prefix(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    return na <= nb && memcmp(a, b, na) == 0;
}

/* a sorted entry: a token's bytes and id */
typedef struct so_entry {
    const uint8_t *b;
    size_t n;
    int32_t id;
} so_entry;

static int cmp_entry(const void *pa, const void *pb) {
    const so_entry *a = pa, *b = pb;
    const int c = memcmp(a->b, b->b, a->n < b->n ? a->n : b->n);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id; /* equal bytes: by id (a total order) */
}

vllm_status so_vocab_build(const tokenizer *tok, int32_t model_vocab_size, const int32_t *stop_ids, int n_stop,
                           so_vocab **out) {
    *out = NULL;
    if (model_vocab_size < 1)
        return vt_error(VLLM_ERR_INVALID_ARG, "structured outputs: vocabulary size %d", (int)model_vocab_size);
    for (int i = 0; i < n_stop; i++)
        if (stop_ids[i] < 0 || stop_ids[i] >= model_vocab_size)
            return vt_error(VLLM_ERR_INVALID_ARG, "structured outputs: stop token %d outside the vocabulary (%d)",
                            (int)stop_ids[i], (int)model_vocab_size);
    so_vocab *v = calloc(1, sizeof *v);
    if (!v) return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    const int32_t n = model_vocab_size, nt = tok_vocab_size(tok);
    v->n = n;
    size_t total = 0;
    for (int32_t id = 0; id < n && id < nt; id++) {
        const char *p = tok_id_to_piece(tok, id);
        total += p ? strlen(p) : 0;
    }
    v->bytes = malloc(total + 1);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->flags = calloc((size_t)n, 1);
    v->stop = malloc(((size_t)n_stop + 1) * sizeof *v->stop);
    v->sorted = malloc((size_t)n * sizeof *v->sorted);
    v->sub_end = malloc((size_t)n * sizeof *v->sub_end);
    v->rank = malloc((size_t)n * sizeof *v->rank);
    if (!v->bytes || !v->off || !v->flags || !v->stop || !v->sorted || !v->sub_end || !v->rank) {
        so_vocab_free(v);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory for a vocabulary of %d", (int)n);
    }
    size_t o = 0;
    for (int32_t id = 0; id < n; id++) {
        v->off[id] = o;
        size_t len = 0;
        /* ids the tokenizer does not have (padding) and ids without a piece: special, no bytes */
        if (id < nt && tok_id_to_piece(tok, id)) {
            vllm_status st = tok_token_bytes(tok, id, v->bytes + o, &len);
            if (st != VLLM_OK) {
                so_vocab_free(v);
                return st;
            }
        }
        /* no bytes, or a special token (added with special: true): never allowed. xgrammar takes a special token's
         * text as its bytes, but the reply drops it (skip_special_tokens), so `"<s>"` in a JSON string would reach
         * the client as `""` (found by tests/server/node/structured.mjs) */
        if (len == 0 || (id < nt && tok_is_special(tok, id))) v->flags[id] |= SO_SPECIAL;
        o += len;
    }
    v->off[n] = o;
    for (int i = 0; i < n_stop; i++)
        if (!(v->flags[stop_ids[i]] & SO_STOP)) {
            v->flags[stop_ids[i]] = SO_STOP; /* a stop id is never special, even without bytes */
            v->stop[v->n_stop++] = stop_ids[i];
        }
    so_entry *e = malloc((size_t)n * sizeof *e);
    if (!e) {
        so_vocab_free(v);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    }
    for (int32_t id = 0; id < n; id++)
        if (!v->flags[id]) e[v->n_sorted++] = (so_entry){v->bytes + v->off[id], v->off[id + 1] - v->off[id], id};
    qsort(e, (size_t)v->n_sorted, sizeof *e, cmp_entry);
    for (int32_t id = 0; id < n; id++) v->rank[id] = -1;
    for (int32_t i = 0; i < v->n_sorted; i++) v->sorted[i] = e[i].id, v->rank[e[i].id] = i;
    free(e);
    /* trie ranges: walking back, each index's range ends where the first later token stops having its bytes as a
     * prefix; a stack of open prefixes (each a prefix of the next) finds it in O(n) pops */
    int32_t *stack = malloc(((size_t)v->n_sorted + 1) * sizeof *stack);
    if (!stack) {
        so_vocab_free(v);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    }
    int sp = 0;
    for (int32_t i = 0; i < v->n_sorted; i++) {
        const int32_t id = v->sorted[i];
        const uint8_t *b = v->bytes + v->off[id];
        const size_t nb = v->off[id + 1] - v->off[id];
        while (sp > 0) {
            const int32_t top = v->sorted[stack[sp - 1]];
            if (is_prefix(v->bytes + v->off[top], v->off[top + 1] - v->off[top], b, nb)) break;
            v->sub_end[stack[--sp]] = i;
        }
        stack[sp++] = i;
    }
    while (sp > 0) v->sub_end[stack[--sp]] = v->n_sorted;
    free(stack);
    *out = v;
    return VLLM_OK;
}

int32_t so_vocab_size(const so_vocab *v) { return v->n; }

const uint8_t *so_vocab_bytes(const so_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n) return NULL;
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

bool so_vocab_is_special(const so_vocab *v, int32_t id) { return id >= 0 && id < v->n && (v->flags[id] & SO_SPECIAL); }
bool so_vocab_is_stop(const so_vocab *v, int32_t id) { return id >= 0 && id < v->n && (v->flags[id] & SO_STOP); }
int so_vocab_n_stop(const so_vocab *v) { return v->n_stop; }
int32_t so_vocab_stop_id(const so_vocab *v, int i) { return v->stop[i]; }
int32_t so_vocab_n_sorted(const so_vocab *v) { return v->n_sorted; }
int32_t so_vocab_sorted_id(const so_vocab *v, int32_t i) { return v->sorted[i]; }
int32_t so_vocab_subtree_end(const so_vocab *v, int32_t i) { return v->sub_end[i]; }
int32_t so_vocab_sorted_index(const so_vocab *v, int32_t id) { return id >= 0 && id < v->n ? v->rank[id] : -1; }
