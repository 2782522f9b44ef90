/* so_mask.c: token masks of a structured-output matcher: the vocabulary walk, and the adaptive cache that makes a mask cost little more than the tokens whose fate depends on the context (so_match.h). */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "structured/so_match_internal.h"

/* ---- the walk ---- */

/* Walks the sorted indices idx[0 .. n) (increasing; idx NULL: 0 .. n - 1) through m from its current position:
 * each token is read byte by byte, reusing the sets of the prefix it shares with the previous token, and every
 * later token that shares a refused prefix is skipped (found by bisection: sorted tokens sharing a prefix are
 * contiguous). accepted(i) is called for each token m took whole; refused(idx, from, to, k) once per refused
 * run: positions from .. to - 1 all start with the bytes refused at their byte k. m is back where it started. */
typedef struct walk_fns {
    void (*accepted)(void *ctx, int32_t sorted_i);
    void (*refused)(void *ctx, const int32_t *idx, int32_t from, int32_t to, size_t k, const so_matcher *m);
} walk_fns;

/* the first position in [lo, hi) whose token does not start with p[0 .. np) (the ones that do come first) */
static int32_t prefix_end(const so_vocab *v, const int32_t *idx, int32_t lo, int32_t hi, const uint8_t *p, size_t np) {
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        size_t n2 = 0;
        const uint8_t *b2 = so_vocab_bytes(v, so_vocab_sorted_id(v, idx ? idx[mid] : mid), &n2);
        if (n2 >= np && memcmp(b2, p, np) == 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void walk(so_matcher *m, const so_vocab *v, const int32_t *idx, int32_t n, const walk_fns *fn, void *ctx) {
    const size_t base = so_match_pos(m);
    const uint8_t *prev = NULL;
    size_t prev_n = 0, depth = 0; /* the previous token's bytes; how many of them are read (sets above base) */
    for (int32_t j = 0; j < n;) {
        const int32_t i = idx ? idx[j] : j;
        size_t nb = 0;
        const uint8_t *b = so_vocab_bytes(v, so_vocab_sorted_id(v, i), &nb);
        size_t lcp = 0;
        while (lcp < nb && lcp < prev_n && lcp < depth && b[lcp] == prev[lcp]) lcp++;
        so_match_rollback(m, depth - lcp); /* keep the shared prefix's sets */
        size_t k = lcp;
        while (k < nb && so_match_step(m, b[k])) k++;
        depth = k;
        prev = b, prev_n = nb;
        if (k == nb) {
            if (fn->accepted) fn->accepted(ctx, i);
            j++;
            continue;
        }
        /* byte k refused: so is every later token starting with b[0 .. k] */
        const int32_t to = prefix_end(v, idx, j + 1, n, b, k + 1);
        if (fn->refused) fn->refused(ctx, idx, j, to, k, m);
        j = to;
    }
    so_match_rollback(m, so_match_pos(m) - base);
}

static void set_bit(uint32_t *mask, int32_t id) { mask[id >> 5] |= 1u << (id & 31); }

static void stops(const so_matcher *m, const so_vocab *v, uint32_t *mask) {
    if (!so_match_can_end(m)) return;
    for (int s = 0; s < so_vocab_n_stop(v); s++) set_bit(mask, so_vocab_stop_id(v, s));
}

typedef struct brute_ctx {
    const so_vocab *v;
    uint32_t *mask;
} brute_ctx;

static void brute_accepted(void *ctx, int32_t i) {
    brute_ctx *c = ctx;
    set_bit(c->mask, so_vocab_sorted_id(c->v, i));
}

static const walk_fns brute_fns = {brute_accepted, NULL};

void so_match_fill_mask(so_matcher *m, const so_vocab *v, uint32_t *mask) {
    memset(mask, 0, (size_t)((so_vocab_size(v) + 31) / 32) * sizeof *mask);
    if (m->terminated) return;
    brute_ctx c = {v, mask};
    walk(m, v, NULL, so_vocab_n_sorted(v), &brute_fns, &c);
    stops(m, v, mask);
}

/* ---- the adaptive cache ---- */

/* xgrammar's adaptive token mask cache (cpp/grammar_compiler.cc GetAdaptiveTokenMask, compiled_grammar_impl.h
 * AdaptiveTokenMask; arXiv:2411.15100 section 3.1), over this matcher's automata: for an automaton state s of rule
 * r, each token is classified by a local matcher started at (r, s) with an unknown parent:
 *   accepted  - read whole inside r (and the rules it calls): accepted wherever (r, s) is live;
 *   rejected  - refused inside r before r could end: refused through (r, s) wherever it is live;
 *   uncertain - refused inside r after r could end mid-token: it depends on r's parent.
 * A step's mask is then the union of its live states' accepted sets, minus the intersection of their rejected
 * sets, and only the tokens left (uncertain everywhere they are not rejected) are walked through the real
 * matcher. An entry keeps its accepted or its rejected ids, whichever is fewer, and its uncertain ids. */
typedef struct so_mask_entry {
    bool has_accepted;   /* ids are the accepted ones (the rest rejected), else the rejected ones (the rest accepted) */
    int32_t *ids, n_ids;
    int32_t *unc, n_unc; /* uncertain */
} so_mask_entry;

/* What one fill needs for itself: one per thread filling masks (so_mask_scratch), the cache's own for
 * so_match_fill_mask_cached. */
struct so_mask_scratch {
    uint32_t *stamp;       /* per state: the fill that saw it last */
    int32_t stamp_cap;
    uint32_t fill;
    uint32_t *rej, *tmp;   /* (words) */
    int32_t *list;         /* (n_sorted) */
    size_t words, n_list;
    so_matcher *local;     /* classifying: the matcher started at the state */
    so_matcher *look;      /* and its lookaheads' */
    uint64_t serial;       /* the cache (grammar) they were made for */
};

/* Entries are made once and never change: any thread may read them; one thread classifies a state while the
 * others that need it wait (claim). The counters are atomic. */
struct so_mask_cache {
    const so_compiled *c;
    const so_vocab *v;
    so_mask_entry *_Atomic *entry; /* per state, computed on first use (or by so_mask_cache_classify) */
    _Atomic uint8_t *claim;        /* per state: 1 while a thread classifies it (the others wait for it) */
    uint32_t *sorted_mask; /* bits of the sorted (neither special nor stop) ids */
    so_mask_scratch *own;  /* so_match_fill_mask_cached's */
    _Atomic int64_t entries, bytes, entry_ns;
    _Atomic int64_t fills, walked; /* masks filled, uncertain tokens walked in them */
    _Atomic int32_t last_uncertain; /* tokens the last fill walked */
    uint64_t serial;       /* unique in the process: tells scratches which grammar their matchers are of */
};

static _Atomic uint64_t cache_serial;

void so_mask_scratch_free(so_mask_scratch *sc) {
    if (!sc) return;
    so_matcher_free(sc->local);
    so_matcher_free(sc->look);
    free(sc->stamp);
    free(sc->rej);
    free(sc->tmp);
    free(sc->list);
    free(sc);
}

vllm_status so_mask_scratch_create(so_mask_scratch **out) {
    *out = calloc(1, sizeof **out);
    return *out ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory (mask scratch)");
}

/* sized for mc's grammar and vocabulary */
static bool scratch_fit(so_mask_scratch *sc, const so_mask_cache *mc) {
    const size_t W = (size_t)(so_vocab_size(mc->v) + 31) / 32, nl = (size_t)so_vocab_n_sorted(mc->v) + 1;
    if (sc->stamp_cap < mc->c->n_states + 1) {
        uint32_t *st = calloc((size_t)mc->c->n_states + 1, sizeof *st);
        if (!st) return false;
        free(sc->stamp);
        sc->stamp = st;
        sc->stamp_cap = mc->c->n_states + 1;
        sc->fill = 0;
    }
    if (sc->words < W) {
        uint32_t *r = malloc(W * 4), *t = malloc(W * 4);
        if (!r || !t) {
            free(r), free(t);
            return false;
        }
        free(sc->rej), free(sc->tmp);
        sc->rej = r, sc->tmp = t, sc->words = W;
    }
    if (sc->n_list < nl) {
        int32_t *l = malloc(nl * sizeof *l);
        if (!l) return false;
        free(sc->list);
        sc->list = l, sc->n_list = nl;
    }
    return true;
}

vllm_status so_mask_cache_create(const so_compiled *c, const so_vocab *v, so_mask_cache **out) {
    *out = NULL;
    so_mask_cache *mc = calloc(1, sizeof *mc);
    const size_t W = (size_t)(so_vocab_size(v) + 31) / 32;
    if (mc) mc->c = c, mc->v = v; /* (so_mask_cache_free reads c) */
    if (!mc || !(mc->entry = calloc((size_t)c->n_states + 1, sizeof *mc->entry)) ||
        !(mc->claim = calloc((size_t)c->n_states + 1, sizeof *mc->claim)) || !(mc->sorted_mask = calloc(W, 4)) ||
        so_mask_scratch_create(&mc->own) != VLLM_OK) {
        so_mask_cache_free(mc);
        return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory (mask cache)");
    }
    mc->c = c;
    mc->v = v;
    mc->serial = atomic_fetch_add(&cache_serial, 1) + 1;
    for (int32_t i = 0; i < so_vocab_n_sorted(v); i++) set_bit(mc->sorted_mask, so_vocab_sorted_id(v, i));
    *out = mc;
    return VLLM_OK;
}

static void entry_free(so_mask_entry *e) {
    if (!e) return;
    free(e->ids);
    free(e->unc);
    free(e);
}

void so_mask_cache_free(so_mask_cache *mc) {
    if (!mc) return;
    for (int32_t s = 0; mc->entry && s < mc->c->n_states; s++) entry_free(mc->entry[s]);
    free(mc->entry);
    free((void *)mc->claim);
    so_mask_scratch_free(mc->own);
    free(mc->sorted_mask);
    free(mc);
}

int64_t so_mask_cache_entries(const so_mask_cache *mc) { return mc->entries; }
int64_t so_mask_cache_bytes(const so_mask_cache *mc) { return mc->bytes; }
int32_t so_mask_cache_last_walked(const so_mask_cache *mc) { return mc->last_uncertain; }
int32_t so_mask_cache_num_states(const so_mask_cache *mc) { return mc->c->n_states; }
void so_mask_cache_stats(const so_mask_cache *mc, int64_t *fills, int64_t *walked, double *entry_seconds) {
    *fills = mc->fills;
    *walked = mc->walked;
    *entry_seconds = 1e-9 * (double)mc->entry_ns;
}

/* the classification walk's outcome per sorted index: 1 accepted, 2 rejected, 3 uncertain */
typedef struct classify_ctx {
    uint8_t *out;
    const so_vocab *v;
    so_matcher *look;   /* the lookahead's matcher, when the rule has one */
    int32_t look_rule;  /* its index in start / final, or -1 */
} classify_ctx;

/* whether b[0 .. n) can follow the rule by its lookahead: a prefix of it matches the lookahead, or all of it is
 * the start of a match (xgrammar's lookahead assertion, checked where the rule ends inside a token) */
static bool look_ok(classify_ctx *c, const uint8_t *b, size_t n) {
    so_matcher *m = c->look;
    if (!so_match_reset_local(m, c->look_rule, m->c->start[c->look_rule])) return true;
    if (m->end_seen[0]) return true;
    for (size_t i = 0; i < n; i++) {
        if (!so_match_step(m, b[i])) return false;
        if (m->end_seen[m->n_sets - 1]) return true;
    }
    return true;
}

static void classify_accepted(void *ctx, int32_t i) { ((classify_ctx *)ctx)->out[i] = 1; }

/* refused at byte k (positions from .. to - 1, sorted indices themselves: the classification walks them all):
 * uncertain where the rule could end after one of bytes 1 .. k (sets 1 .. k; set 0's end is already expanded into
 * the live set's parents) with what follows allowed by its lookahead; else rejected */
static void classify_refused(void *ctx, const int32_t *idx, int32_t from, int32_t to, size_t k, const so_matcher *m) {
    classify_ctx *c = ctx;
    (void)idx;
    bool end = false;
    for (size_t j = 1; j <= k && j < m->n_sets; j++) end |= m->end_seen[j] != 0;
    if (!end) {
        memset(c->out + from, 2, (size_t)(to - from));
        return;
    }
    for (int32_t i = from; i < to; i++) {
        size_t nb = 0;
        const uint8_t *b = so_vocab_bytes(c->v, so_vocab_sorted_id(c->v, i), &nb);
        bool unc = false;
        for (size_t j = 1; j <= k && j < m->n_sets && !unc; j++)
            if (m->end_seen[j]) unc = c->look_rule < 0 || look_ok(c, b + j, nb - j);
        c->out[i] = unc ? 3 : 2;
    }
}

static const walk_fns classify_fns = {classify_accepted, classify_refused};

static int32_t state_rule(const so_compiled *c, int32_t s) {
    /* a rule's states are contiguous from its start (so_compile builds one rule, then one lookahead, at a time) */
    int32_t lo = 0, hi = c->n_rules + c->n_looks - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if (c->start[mid] <= s) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether a fill reads state s's entry: a byte edge (its rejected set bounds the mask's) or a call edge (its
 * accepted set adds to it); *bytes: it has a byte edge. */
static bool state_used(const so_compiled *c, int32_t s, bool *bytes) {
    bool b = false, calls = false;
    for (int32_t x = c->off[s]; x < c->off[s + 1]; x++) {
        b |= c->edges[x].call == SO_EDGE_BYTE;
        calls |= c->edges[x].call >= 0;
    }
    *bytes = b;
    return b || calls;
}

/* sc's classifying matchers, made for mc's grammar */
static bool scratch_matchers(so_mask_scratch *sc, const so_mask_cache *mc) {
    if (sc->local && sc->serial == mc->serial) return true;
    so_matcher_free(sc->local), so_matcher_free(sc->look);
    sc->local = sc->look = NULL;
    if (so_matcher_create(mc->c, &sc->local) != VLLM_OK || so_matcher_create(mc->c, &sc->look) != VLLM_OK) {
        so_matcher_free(sc->local), so_matcher_free(sc->look);
        sc->local = sc->look = NULL;
        return false;
    }
    sc->serial = mc->serial;
    return true;
}

static so_mask_entry *classify(so_mask_cache *mc, so_mask_scratch *sc, int32_t s);

/* The classification of state s, made now with sc's matchers (any thread) unless it exists; a state another
 * thread is classifying is waited for (threads filling masks at once often need the same new state). */
static so_mask_entry *entry_get(so_mask_cache *mc, so_mask_scratch *sc, int32_t s) {
    for (;;) {
        so_mask_entry *have = atomic_load_explicit(&mc->entry[s], memory_order_acquire);
        if (have) return have;
        uint8_t free_ = 0;
        if (atomic_compare_exchange_strong_explicit(&mc->claim[s], &free_, 1, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            so_mask_entry *e = atomic_load_explicit(&mc->entry[s], memory_order_acquire);
            if (!e && (e = classify(mc, sc, s))) atomic_store_explicit(&mc->entry[s], e, memory_order_release);
            atomic_store_explicit(&mc->claim[s], 0, memory_order_release);
            return e;
        }
        sched_yield();
    }
}

static so_mask_entry *classify(so_mask_cache *mc, so_mask_scratch *sc, int32_t s) {
    const double t0 = now_s();
    const so_vocab *v = mc->v;
    const int32_t ns = so_vocab_n_sorted(v);
    const int32_t r = state_rule(mc->c, s);
    uint8_t *out = calloc((size_t)ns + 1, 1);
    so_mask_entry *e = calloc(1, sizeof *e);
    if (!out || !e || !scratch_matchers(sc, mc) || !so_match_reset_local(sc->local, r, s)) {
        free(out);
        free(e);
        return NULL;
    }
    classify_ctx cc = {out, v, sc->look, r < mc->c->n_rules ? mc->c->look[r] : -1};
    walk(sc->local, v, NULL, ns, &classify_fns, &cc);
    int32_t na = 0, nr = 0, nu = 0;
    for (int32_t i = 0; i < ns; i++) na += out[i] == 1, nr += out[i] == 2, nu += out[i] == 3;
    e->has_accepted = na <= nr;
    const uint8_t want = e->has_accepted ? 1 : 2;
    e->ids = malloc(((size_t)(e->has_accepted ? na : nr) + 1) * sizeof *e->ids);
    e->unc = malloc(((size_t)nu + 1) * sizeof *e->unc);
    if (!e->ids || !e->unc) {
        free(out);
        entry_free(e);
        return NULL;
    }
    for (int32_t i = 0; i < ns; i++) {
        if (out[i] == want) e->ids[e->n_ids++] = so_vocab_sorted_id(v, i);
        else if (out[i] == 3) e->unc[e->n_unc++] = so_vocab_sorted_id(v, i);
    }
    free(out);
    atomic_fetch_add_explicit(&mc->entries, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mc->entry_ns, (int64_t)((now_s() - t0) * 1e9), memory_order_relaxed);
    atomic_fetch_add_explicit(&mc->bytes, (int64_t)(e->n_ids + e->n_unc) * 4 + (int64_t)sizeof *e, memory_order_relaxed);
    return e;
}

vllm_status so_mask_cache_classify(so_mask_cache *mc, so_mask_scratch *sc, int32_t s) {
    bool bytes;
    if (s < 0 || s >= mc->c->n_states || !state_used(mc->c, s, &bytes)) return VLLM_OK;
    return entry_get(mc, sc, s) ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory (mask cache)");
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static void clear_bit(uint32_t *mask, int32_t id) { mask[id >> 5] &= ~(1u << (id & 31)); }

vllm_status so_match_fill_mask_scratch(so_matcher *m, so_mask_cache *mc, so_mask_scratch *sc, uint32_t *mask) {
    const so_vocab *v = mc->v;
    const so_compiled *c = mc->c;
    const size_t W = (size_t)(so_vocab_size(v) + 31) / 32;
    memset(mask, 0, W * sizeof *mask);
    if (m->c != c) return vt_error(VLLM_ERR_INTERNAL, "structured outputs: a mask cache of another grammar");
    if (m->terminated) return VLLM_OK;
    if (!scratch_fit(sc, mc)) return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory (mask scratch)");
    uint32_t *acc = mask, *rej = sc->rej, *tmp = sc->tmp;
    memcpy(rej, mc->sorted_mask, W * sizeof *rej);
    if (++sc->fill == 0) {
        memset(sc->stamp, 0, (size_t)sc->stamp_cap * sizeof *sc->stamp);
        sc->fill = 1;
    }
    const size_t k = m->n_sets - 1;
    for (size_t j = m->set[k]; j < m->set[k + 1]; j++) {
        const int32_t s = m->items[j].state;
        if (sc->stamp[s] == sc->fill) continue;
        sc->stamp[s] = sc->fill;
        /* a state with a byte edge reads the token's first byte: its rejected set bounds the mask's; one with a
         * call edge only reaches bytes through the called rule's states (in this set too): its accepted set adds
         * to the mask, its rejected one says nothing the callee's does not (and would keep tokens uncertain that
         * the callee's lookahead rejects) */
        bool bytes = false;
        if (!state_used(c, s, &bytes)) continue;
        const so_mask_entry *e = entry_get(mc, sc, s);
        if (!e) return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory (mask cache)");
        if (e->has_accepted) {
            for (int32_t i = 0; i < e->n_ids; i++) set_bit(acc, e->ids[i]);
            if (bytes) {
                for (int32_t i = 0; i < e->n_ids; i++) clear_bit(rej, e->ids[i]);
                for (int32_t i = 0; i < e->n_unc; i++) clear_bit(rej, e->unc[i]);
            }
        } else {
            memcpy(tmp, mc->sorted_mask, W * sizeof *tmp); /* accepted: every sorted id not listed */
            for (int32_t i = 0; i < e->n_ids; i++) clear_bit(tmp, e->ids[i]);
            for (int32_t i = 0; i < e->n_unc; i++) clear_bit(tmp, e->unc[i]);
            for (size_t w = 0; w < W; w++) acc[w] |= tmp[w];
            if (bytes) {
                memset(tmp, 0, W * sizeof *tmp); /* rejected: the listed ones only */
                for (int32_t i = 0; i < e->n_ids; i++) set_bit(tmp, e->ids[i]);
                for (size_t w = 0; w < W; w++) rej[w] &= tmp[w];
            }
        }
    }
    /* the uncertain tokens: neither accepted by a state nor rejected by all, walked in sorted order */
    int32_t nu = 0;
    for (size_t w = 0; w < W; w++) {
        uint32_t u = mc->sorted_mask[w] & ~acc[w] & ~rej[w];
        while (u) {
            const int b = __builtin_ctz(u);
            u &= u - 1;
            sc->list[nu++] = so_vocab_sorted_index(v, (int32_t)(w * 32 + (size_t)b));
        }
    }
    atomic_store_explicit(&mc->last_uncertain, nu, memory_order_relaxed);
    atomic_fetch_add_explicit(&mc->fills, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mc->walked, nu, memory_order_relaxed);
    if (nu) {
        qsort(sc->list, (size_t)nu, sizeof *sc->list, cmp_i32);
        brute_ctx bc = {v, mask};
        walk(m, v, sc->list, nu, &brute_fns, &bc);
    }
    stops(m, v, mask);
    return VLLM_OK;
}

vllm_status so_match_fill_mask_cached(so_matcher *m, so_mask_cache *mc, uint32_t *mask) {
    return so_match_fill_mask_scratch(m, mc, mc->own, mask);
}
