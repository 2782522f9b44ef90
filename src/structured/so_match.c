/* so_match.c: structured-output grammars as byte automata, matched by an Earley parser; token masks (so_match.h). */
#include "structured/so_match.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "structured/so_match_internal.h"

/* ---- the automata ---- */

typedef struct so_raw_edge { /* while building: from, then the edge */
    int32_t from;
    so_edge e;
} so_raw_edge;

typedef struct builder {
    const so_grammar *g;
    int32_t n_states;
    so_raw_edge *e;
    size_t n, cap;
    bool failed;
    vllm_status st;
} builder;

static void b_fail(builder *b, vllm_status st, const char *msg) {
    if (b->failed) return;
    b->failed = true;
    b->st = vt_error(st, "structured outputs: %s", msg);
}

static int32_t new_state(builder *b) {
    if (b->n_states >= SO_MAX_STATES) {
        b_fail(b, VLLM_ERR_INVALID_ARG, "the grammar is too large (more than 4M automaton states: a repeat's "
                                        "bounds?)");
        return 0;
    }
    return b->n_states++;
}

static void edge(builder *b, int32_t from, int32_t to, int32_t call, uint8_t lo, uint8_t hi) {
    if (b->failed) return;
    if (b->n >= SO_MAX_STATES) { /* (a class's edges: as bounded as the states) */
        b_fail(b, VLLM_ERR_INVALID_ARG, "the grammar is too large (more than 4M automaton edges: a repeat's bounds?)");
        return;
    }
    if (b->n == b->cap) {
        const size_t cap = b->cap ? 2 * b->cap : 256;
        so_raw_edge *q = realloc(b->e, cap * sizeof *q);
        if (!q) {
            b_fail(b, VLLM_ERR_NO_MEMORY, "out of memory");
            return;
        }
        b->e = q;
        b->cap = cap;
    }
    b->e[b->n++] = (so_raw_edge){from, {to, call, lo, hi}};
}

/* UTF-8 byte-range sequences of the code points [lo, hi] (no surrogates), as edges from `from` to `to`: the
 * range split until every byte position is a plain range (RE2's / Go's utf8 range compiler) */
static int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static void utf8_enc(uint32_t cp, uint8_t *u) { utf8_encode(cp, (char *)u); }

static void utf8_range(builder *b, uint32_t lo, uint32_t hi, int32_t from, int32_t to) {
    if (lo > hi || b->failed) return;
    static const uint32_t tops[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= tops[i] && hi > tops[i]) {
            utf8_range(b, lo, tops[i], from, to);
            utf8_range(b, tops[i] + 1, hi, from, to);
            return;
        }
    const int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_range(b, lo, lo | m, from, to);
                utf8_range(b, (lo | m) + 1, hi, from, to);
                return;
            }
            if ((hi & m) != m) {
                utf8_range(b, lo, (hi & ~m) - 1, from, to);
                utf8_range(b, hi & ~m, hi, from, to);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    utf8_enc(lo, a);
    utf8_enc(hi, z);
    int32_t cur = from;
    for (int i = 0; i < n; i++) {
        const int32_t next = i == n - 1 ? to : new_state(b);
        edge(b, cur, next, SO_EDGE_BYTE, a[i], z[i]);
        cur = next;
    }
}

static int cmp_u32_pair(const void *x, const void *y) {
    const uint32_t a = ((const uint32_t *)x)[0], c = ((const uint32_t *)y)[0];
    return a < c ? -1 : a > c;
}

/* a class's code points as merged ranges (the complement when negated), surrogates left out, into edges */
static void class_edges(builder *b, const so_expr *e, int32_t from, int32_t to) {
    const int n = e->n_ranges;
    uint32_t *r = malloc(((size_t)n + 1) * 2 * sizeof *r);
    if (!r) {
        b_fail(b, VLLM_ERR_NO_MEMORY, "out of memory");
        return;
    }
    if (n) memcpy(r, e->ranges, (size_t)n * 2 * sizeof *r);
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_u32_pair);
    int m = 0; /* merged */
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    uint32_t prev = 0; /* the complement walks the gaps */
    for (int i = 0; i <= m; i++) {
        uint32_t lo, hi;
        if (e->negated) {
            lo = prev;
            hi = i < m ? (r[2 * i] ? r[2 * i] - 1 : 0) : 0x10FFFF;
            const bool empty = i < m && r[2 * i] == 0;
            if (i < m) prev = r[2 * i + 1] + 1;
            if (empty || lo > hi || lo > 0x10FFFF) continue;
        } else {
            if (i == m) break;
            lo = r[2 * i], hi = r[2 * i + 1];
        }
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (lo < 0xD800 && hi >= 0xD800) { /* around the surrogates */
            utf8_range(b, lo, 0xD7FF, from, to);
            if (hi > 0xDFFF) utf8_range(b, 0xE000, hi, from, to);
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            if (hi > 0xDFFF) utf8_range(b, 0xE000, hi, from, to);
        } else {
            utf8_range(b, lo, hi, from, to);
        }
    }
    free(r);
}

/* e's automaton from state `from`; returns its exit state */
static int32_t build(builder *b, const so_expr *e, int32_t from) {
    if (b->failed) return from;
    switch (e->kind) {
    case SO_BYTES: {
        int32_t cur = from;
        for (size_t i = 0; i < e->n_bytes; i++) {
            const int32_t next = new_state(b);
            edge(b, cur, next, SO_EDGE_BYTE, e->bytes[i], e->bytes[i]);
            cur = next;
        }
        return cur;
    }
    case SO_CLASS: {
        const int32_t to = new_state(b);
        class_edges(b, e, from, to);
        return to;
    }
    case SO_REF: {
        const int32_t to = new_state(b);
        edge(b, from, to, e->rule, 0, 0);
        return to;
    }
    case SO_SEQ: {
        int32_t cur = from;
        for (int i = 0; i < e->n_kids; i++) cur = build(b, e->kids[i], cur);
        return cur;
    }
    case SO_CHOICE: {
        const int32_t to = new_state(b);
        for (int i = 0; i < e->n_kids; i++) {
            const int32_t in = new_state(b);
            edge(b, from, in, SO_EDGE_EPS, 0, 0);
            edge(b, build(b, e->kids[i], in), to, SO_EDGE_EPS, 0, 0);
        }
        return to;
    }
    case SO_REPEAT: {
        int32_t cur = from;
        for (int i = 0; i < e->min && !b->failed; i++) {
            const int32_t in = new_state(b); /* (a fresh entry: the copy's loops stay inside it) */
            edge(b, cur, in, SO_EDGE_EPS, 0, 0);
            cur = build(b, e->kids[0], in);
        }
        const int32_t to = new_state(b);
        edge(b, cur, to, SO_EDGE_EPS, 0, 0);
        if (e->max < 0) { /* a loop: to -> a copy -> to */
            const int32_t in = new_state(b);
            edge(b, to, in, SO_EDGE_EPS, 0, 0);
            edge(b, build(b, e->kids[0], in), to, SO_EDGE_EPS, 0, 0);
            return to;
        }
        for (int i = e->min; i < e->max && !b->failed; i++) { /* optional copies, each may stop the repeat */
            const int32_t in = new_state(b);
            edge(b, cur, in, SO_EDGE_EPS, 0, 0);
            cur = build(b, e->kids[0], in);
            edge(b, cur, to, SO_EDGE_EPS, 0, 0);
        }
        return to;
    }
    }
    return from;
}

/* alternative e of rule r ends with a call of r (a SEQ whose last kid is r) */
static bool tail_calls(const so_expr *e, int r) {
    return e->kind == SO_SEQ && e->n_kids > 1 && e->kids[e->n_kids - 1]->kind == SO_REF &&
           e->kids[e->n_kids - 1]->rule == r;
}

/* rule r's automaton from `from`. A right-recursive rule R ::= A1 R | .. | Ak R | B1 | .. | Bm (JSON's
 * basic_string_sub, one call per character) is built as its least solution (A1 | .. | Ak)* (B1 | .. | Bm) (Arden's
 * rule): the same language, matched in one rule instance instead of one per character, so the Earley sets stay
 * small and a string's closing quote completes one item, not one per character read */
static int32_t build_rule(builder *b, const so_grammar *g, int r, int32_t from) {
    const so_expr *body = g->rules[r].body;
    while (body->kind == SO_SEQ && body->n_kids == 1) body = body->kids[0];
    int n_rec = 0;
    if (body->kind == SO_CHOICE)
        for (int i = 0; i < body->n_kids; i++) n_rec += tail_calls(body->kids[i], r);
    if (n_rec == 0 || n_rec == body->n_kids) return build(b, g->rules[r].body, from);
    const int32_t loop = new_state(b), to = new_state(b);
    edge(b, from, loop, SO_EDGE_EPS, 0, 0);
    for (int i = 0; i < body->n_kids && !b->failed; i++) {
        const so_expr *alt = body->kids[i];
        const int32_t in = new_state(b);
        if (tail_calls(alt, r)) { /* loop: the alternative without its last call, back to the loop */
            edge(b, loop, in, SO_EDGE_EPS, 0, 0);
            int32_t cur = in;
            for (int k = 0; k < alt->n_kids - 1; k++) cur = build(b, alt->kids[k], cur);
            edge(b, cur, loop, SO_EDGE_EPS, 0, 0);
        } else { /* exit */
            edge(b, loop, in, SO_EDGE_EPS, 0, 0);
            edge(b, build(b, alt, in), to, SO_EDGE_EPS, 0, 0);
        }
    }
    return to;
}

static int cmp_raw(const void *x, const void *y) {
    const so_raw_edge *a = x, *c = y;
    return a->from < c->from ? -1 : a->from > c->from;
}

void so_compiled_free(so_compiled *c) {
    if (!c) return;
    free(c->start);
    free(c->final);
    free(c->look);
    free(c->off);
    free(c->edges);
    free(c);
}

int64_t so_compiled_states(const so_compiled *c) { return c->n_states; }

vllm_status so_compile(const so_grammar *g, so_compiled **out) {
    *out = NULL;
    if (g->n_rules < 1 || g->root < 0 || g->root >= g->n_rules)
        return vt_error(VLLM_ERR_INVALID_ARG, "structured outputs: a grammar without its root rule");
    so_compiled *c = calloc(1, sizeof *c);
    builder b = {.g = g};
    if (!c || !(c->start = malloc(2 * (size_t)g->n_rules * sizeof *c->start)) ||
        !(c->final = malloc(2 * (size_t)g->n_rules * sizeof *c->final)) ||
        !(c->look = malloc((size_t)g->n_rules * sizeof *c->look))) {
        so_compiled_free(c);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    }
    c->n_rules = g->n_rules;
    c->root = g->root;
    for (int r = 0; r < g->n_rules && !b.failed; r++) {
        c->start[r] = new_state(&b);
        c->final[r] = build_rule(&b, g, r, c->start[r]);
    }
    for (int r = 0; r < g->n_rules && !b.failed; r++) { /* lookaheads: automata no rule calls (the mask cache's) */
        c->look[r] = -1;
        if (!g->rules[r].lookahead) continue;
        const int l = g->n_rules + c->n_looks++;
        c->look[r] = l;
        c->start[l] = new_state(&b);
        c->final[l] = build(&b, g->rules[r].lookahead, c->start[l]);
    }
    if (!b.failed) {
        c->n_states = b.n_states;
        c->off = calloc((size_t)b.n_states + 1, sizeof *c->off);
        c->edges = malloc((b.n ? b.n : 1) * sizeof *c->edges);
        if (!c->off || !c->edges) b_fail(&b, VLLM_ERR_NO_MEMORY, "out of memory");
    }
    if (b.failed) {
        free(b.e);
        so_compiled_free(c);
        return b.st;
    }
    if (b.n) qsort(b.e, b.n, sizeof *b.e, cmp_raw); /* (a grammar of empty strings has no edges: b.e NULL) */
    for (size_t i = 0; i < b.n; i++) {
        c->edges[i] = b.e[i].e;
        c->off[b.e[i].from + 1]++;
    }
    for (int32_t s = 0; s < b.n_states; s++) c->off[s + 1] += c->off[s];
    free(b.e);
    *out = c;
    return VLLM_OK;
}

/* ---- the Earley matcher ---- */

static size_t item_hash(const so_item *it) {
    uint64_t h = (uint64_t)(uint32_t)it->rule * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)it->state * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t)(uint32_t)it->origin * 0x165667B19E3779F9ull;
    return (size_t)(h ^ h >> 29);
}

/* a fresh dedupe table (a new generation; grown to hold want items at half load) */
static bool hash_reset(so_matcher *m, size_t want) {
    size_t cap = m->hcap ? m->hcap : 64;
    while (cap < 2 * want + 16) cap *= 2;
    if (cap != m->hcap) {
        int32_t *h = realloc(m->hash, cap * sizeof *h);
        if (h) m->hash = h;
        uint32_t *gq = realloc(m->hgen, cap * sizeof *gq);
        if (gq) m->hgen = gq;
        if (!h || !gq) return false;
        m->hcap = cap;
        memset(m->hgen, 0, cap * sizeof *m->hgen);
        m->gen = 0;
    }
    if (++m->gen == 0) { /* (wrapped) */
        memset(m->hgen, 0, m->hcap * sizeof *m->hgen);
        m->gen = 1;
    }
    return true;
}

/* adds it to the set being built (from items[base]) unless there */
static void add(so_matcher *m, size_t base, so_item it) {
    if (m->failed) return;
    if (2 * (m->n_items - base + 1) >= m->hcap) { /* grow, rehash */
        if (!hash_reset(m, m->n_items - base + 1)) {
            m->failed = true;
            return;
        }
        for (size_t j = base; j < m->n_items; j++) {
            size_t h = item_hash(&m->items[j]) & (m->hcap - 1);
            while (m->hgen[h] == m->gen) h = (h + 1) & (m->hcap - 1);
            m->hgen[h] = m->gen;
            m->hash[h] = (int32_t)(j - base);
        }
    }
    size_t h = item_hash(&it) & (m->hcap - 1);
    for (; m->hgen[h] == m->gen; h = (h + 1) & (m->hcap - 1)) {
        const so_item *o = &m->items[base + (size_t)m->hash[h]];
        if (o->rule == it.rule && o->state == it.state && o->origin == it.origin) return;
    }
    if (m->n_items == m->cap) {
        const size_t cap = m->cap ? 2 * m->cap : 1024;
        so_item *q = realloc(m->items, cap * sizeof *q);
        if (!q) {
            m->failed = true;
            return;
        }
        m->items = q;
        m->cap = cap;
    }
    m->hgen[h] = m->gen;
    m->hash[h] = (int32_t)(m->n_items - base);
    m->items[m->n_items++] = it;
}

/* predictions and completions of the set being built (index k, from items[base]) until nothing changes */
static void closure(so_matcher *m, size_t k, size_t base) {
    const so_compiled *c = m->c;
    memset(m->done, 0, (size_t)c->n_rules);
    for (size_t j = base; j < m->n_items && !m->failed; j++) {
        const so_item it = m->items[j];
        for (int32_t x = c->off[it.state]; x < c->off[it.state + 1]; x++) {
            const so_edge *e = &c->edges[x];
            if (e->call == SO_EDGE_EPS) add(m, base, (so_item){it.rule, e->to, it.origin});
            else if (e->call >= 0) {
                add(m, base, (so_item){e->call, c->start[e->call], (int32_t)k});
                if (m->done[e->call]) add(m, base, (so_item){it.rule, e->to, it.origin}); /* an empty match */
            }
        }
        if (it.state != c->final[it.rule]) continue;
        if (it.origin < 0) { /* a local matcher's own item: its parent is not known */
            m->end_seen[k] = 1;
            continue;
        }
        /* complete: the items of the origin set waiting on this rule advance */
        const size_t ob = m->set[it.origin], oe = (size_t)it.origin == k ? m->n_items : m->set[it.origin + 1];
        if ((size_t)it.origin == k) m->done[it.rule] = 1;
        for (size_t w = ob; w < oe && !m->failed; w++) {
            const so_item wi = m->items[w];
            for (int32_t x = c->off[wi.state]; x < c->off[wi.state + 1]; x++)
                if (c->edges[x].call == it.rule) add(m, base, (so_item){wi.rule, c->edges[x].to, wi.origin});
        }
    }
}

/* opens set n_sets (its items from n_items) */
static bool open_set(so_matcher *m) {
    if (m->n_sets + 2 > m->set_cap) {
        const size_t cap = m->set_cap ? 2 * m->set_cap : 256;
        size_t *q = realloc(m->set, cap * sizeof *q);
        if (!q) return false;
        m->set = q;
        uint8_t *es = realloc(m->end_seen, cap);
        if (!es) return false;
        m->end_seen = es;
        m->set_cap = cap;
    }
    m->set[m->n_sets] = m->n_items;
    m->end_seen[m->n_sets] = 0;
    return hash_reset(m, 16);
}

void so_matcher_free(so_matcher *m) {
    if (!m) return;
    free(m->items);
    free(m->set);
    free(m->hash);
    free(m->hgen);
    free(m->done);
    free(m->end_seen);
    free(m);
}

vllm_status so_matcher_create(const so_compiled *c, so_matcher **out) {
    *out = NULL;
    so_matcher *m = calloc(1, sizeof *m);
    if (!m || !(m->done = calloc((size_t)c->n_rules + 1, 1)) || !open_set(m)) {
        so_matcher_free(m);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    }
    m->c = c;
    add(m, 0, (so_item){c->root, c->start[c->root], 0});
    closure(m, 0, 0);
    m->n_sets = 1;
    m->set[1] = m->n_items;
    if (m->failed) {
        so_matcher_free(m);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    }
    *out = m;
    return VLLM_OK;
}

bool so_match_reset_local(so_matcher *m, int32_t rule, int32_t state) {
    m->n_sets = 0;
    m->n_items = 0;
    m->terminated = false;
    if (m->failed || !open_set(m)) return false;
    add(m, 0, (so_item){rule, state, -1});
    closure(m, 0, 0);
    m->n_sets = 1;
    m->set[1] = m->n_items;
    return !m->failed;
}

size_t so_match_pos(const so_matcher *m) { return m->n_sets - 1; }

void so_match_rollback(so_matcher *m, size_t n) {
    if (n > m->n_sets - 1) n = m->n_sets - 1;
    m->n_sets -= n;
    m->n_items = m->set[m->n_sets];
    m->terminated = false; /* a stop token taken is undone too */
}

bool so_match_step(so_matcher *m, uint8_t byte) {
    if (m->failed || !open_set(m)) {
        m->failed = true;
        return false;
    }
    const so_compiled *c = m->c;
    const size_t k = m->n_sets, base = m->n_items, pb = m->set[k - 1], pe = m->set[k];
    for (size_t j = pb; j < pe; j++) {
        const so_item it = m->items[j];
        for (int32_t x = c->off[it.state]; x < c->off[it.state + 1]; x++) {
            const so_edge *e = &c->edges[x];
            if (e->call == SO_EDGE_BYTE && byte >= e->lo && byte <= e->hi) add(m, base, (so_item){it.rule, e->to, it.origin});
        }
    }
    if (m->n_items == base || m->failed) {
        m->n_items = base;
        return false;
    }
    closure(m, k, base);
    if (m->failed) {
        m->n_items = base;
        return false;
    }
    m->n_sets++;
    m->set[m->n_sets] = m->n_items;
    return true;
}

bool so_match_bytes(so_matcher *m, const uint8_t *b, size_t n) {
    if (m->terminated) return n == 0;
    for (size_t i = 0; i < n; i++)
        if (!so_match_step(m, b[i])) {
            so_match_rollback(m, i);
            return false;
        }
    return true;
}

bool so_match_can_end(const so_matcher *m) {
    const so_compiled *c = m->c;
    for (size_t j = m->set[m->n_sets - 1]; j < m->set[m->n_sets]; j++)
        if (m->items[j].rule == c->root && m->items[j].origin == 0 && m->items[j].state == c->final[c->root]) return true;
    return false;
}

bool so_match_terminated(const so_matcher *m) { return m->terminated; }

bool so_match_token(so_matcher *m, const so_vocab *v, int32_t id) {
    if (m->terminated || id < 0 || id >= so_vocab_size(v) || so_vocab_is_special(v, id)) return false;
    if (so_vocab_is_stop(v, id)) {
        if (!so_match_can_end(m)) return false;
        m->terminated = true;
        return true;
    }
    size_t n = 0;
    const uint8_t *b = so_vocab_bytes(v, id, &n);
    return so_match_bytes(m, b, n);
}
