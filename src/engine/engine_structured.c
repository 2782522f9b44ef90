/* engine_structured.c: structured outputs in the engine: the vocabulary's bytes, the compiled grammars, a matcher per request, its token masks and its advance (engine_internal.h). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/threadpool.h"
#include "engine/engine_internal.h"
#include "structured/so_spec.h"

/* A compiled grammar shared by the requests of one constraint (vLLM keeps xgrammar's compiler cache; a request's
 * n samples and repeated schemas compile once). Engine-thread only, so no lock. */
/* Classifies a new grammar's states in the background (xgrammar computes its adaptive mask cache when it compiles
 * a grammar; vLLM compiles on a thread pool before the request is scheduled): masks that need a state not yet
 * classified classify it themselves or wait for the thread doing it (so_mask.c), so the first steps of a new
 * grammar stop paying for every state they meet. Grammars with more states than SO_AHEAD_MAX_STATES are left to
 * the masks (a huge enum would keep the threads busy for minutes). */
#define SO_AHEAD_MAX_STATES 4096
#define SO_AHEAD_THREADS 4

typedef struct so_ahead so_ahead;
typedef struct ahead_arg {
    so_ahead *a;
    int i;
} ahead_arg;

struct so_ahead {
    pthread_t th[SO_AHEAD_THREADS];
    so_mask_scratch *sc[SO_AHEAD_THREADS];
    ahead_arg args[SO_AHEAD_THREADS];
    int nth;
    so_mask_cache *mc;
    _Atomic int32_t next;
    atomic_bool stop;
};

static void *ahead_main(void *arg) {
    const ahead_arg *x = arg;
    so_ahead *a = x->a;
    const int32_t n = so_mask_cache_num_states(a->mc);
    for (;;) {
        if (atomic_load_explicit(&a->stop, memory_order_relaxed)) break;
        const int32_t s = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (s >= n || so_mask_cache_classify(a->mc, a->sc[x->i], s) != VLLM_OK) break; /* (out of memory: the masks
                                                                                          classify what they need) */
    }
    return NULL;
}

static void ahead_stop(so_ahead *a) {
    if (!a) return;
    atomic_store(&a->stop, true);
    for (int i = 0; i < a->nth; i++) pthread_join(a->th[i], NULL);
    for (int i = 0; i < SO_AHEAD_THREADS; i++) so_mask_scratch_free(a->sc[i]);
    free(a);
}

/* Starts classifying mc's states on up to SO_AHEAD_THREADS threads (a quarter of the cores, at least one); NULL
 * when the grammar is too large or a thread cannot start (the masks then classify all they need). */
static so_ahead *ahead_start(so_mask_cache *mc) {
    if (so_mask_cache_num_states(mc) > SO_AHEAD_MAX_STATES) return NULL;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int want = ncpu >= 4 * SO_AHEAD_THREADS ? SO_AHEAD_THREADS : ncpu >= 8 ? (int)(ncpu / 4) : 1;
    so_ahead *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->mc = mc;
    atomic_init(&a->next, 0);
    atomic_init(&a->stop, false);
    for (int i = 0; i < want; i++) {
        if (so_mask_scratch_create(&a->sc[i]) != VLLM_OK) break;
        a->args[i] = (ahead_arg){a, i};
        if (pthread_create(&a->th[i], NULL, ahead_main, &a->args[i]) != 0) break;
        a->nth++;
    }
    if (a->nth == 0) {
        ahead_stop(a);
        return NULL;
    }
    return a;
}

struct engine_so_grammar {
    char *key;
    so_compiled *c;
    so_mask_cache *mc; /* its token masks over the engine's vocabulary */
    so_ahead *ahead;   /* its states classified in the background, or NULL */
    int refs;        /* requests using it */
    bool cached;     /* still in e->so_cache (else freed when refs drops to 0) */
    uint64_t used;
};

#define SO_CACHE_MAX 64

static void grammar_free(engine_so_grammar *g) {
    if (!g) return;
    ahead_stop(g->ahead);
    if (g->mc) {
        int64_t fills, walked;
        double es;
        so_mask_cache_stats(g->mc, &fills, &walked, &es);
        LOG_D("structured outputs: grammar dropped: %lld masks (%.1f context-dependent tokens each), %lld states "
              "classified in %.3f s, %lld KiB", (long long)fills, fills ? (double)walked / (double)fills : 0.0,
              (long long)so_mask_cache_entries(g->mc), es, (long long)(so_mask_cache_bytes(g->mc) >> 10));
    }
    free(g->key);
    so_mask_cache_free(g->mc);
    so_compiled_free(g->c);
    free(g);
}

static void grammar_release(engine_so_grammar *g) {
    if (g && --g->refs == 0 && !g->cached) grammar_free(g);
}

/* the mask threads and their buffers */
static void engine_so_free_masks(vllm_engine *e) {
    tp_free(e->so_pool);
    e->so_pool = NULL;
    for (int i = 0; e->so_scratch && i < e->so_threads; i++) so_mask_scratch_free(e->so_scratch[i]);
    free(e->so_scratch);
    e->so_scratch = NULL;
    free(e->so_masks);
    e->so_masks = NULL;
    free(e->so_rows);
    e->so_rows = NULL;
    free(e->so_row_seconds);
    e->so_row_seconds = NULL;
    e->so_threads = 0;
}

void engine_so_free(vllm_engine *e) {
    for (int i = 0; i < e->n_so_cache; i++) {
        e->so_cache[i]->cached = false;
        if (e->so_cache[i]->refs == 0) grammar_free(e->so_cache[i]);
    }
    free(e->so_cache);
    e->so_cache = NULL;
    e->n_so_cache = 0;
    so_vocab_free(e->so_vocab);
    e->so_vocab = NULL;
    engine_so_free_masks(e);
}

/* the vocabulary's bytes, built on the first structured request: every EOS id of the engine is a stop token (a
 * grammar allows one only where it may end; xgrammar takes the tokenizer's eos_token_id alone, so a
 * generation_config EOS such as Qwen's <|endoftext|> would stop a JSON string halfway) */
static vllm_status vocab(vllm_engine *e) {
    if (e->so_vocab) return VLLM_OK;
    if (!e->tok) return vt_error(VLLM_ERR_UNSUPPORTED, "structured outputs need the model's tokenizer");
    vllm_status st = so_vocab_build(e->tok, e->cfg->vocab_size, e->eos_ids, e->num_eos, &e->so_vocab);
    if (st == VLLM_OK)
        LOG_I("structured outputs: %d-token vocabulary indexed (%d sorted, %d stop)", so_vocab_size(e->so_vocab),
              so_vocab_n_sorted(e->so_vocab), so_vocab_n_stop(e->so_vocab));
    return st;
}

static vllm_status grammar_get(vllm_engine *e, const vllm_structured_outputs *s, engine_so_grammar **out) {
    char *key = so_spec_key(s);
    if (!key) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    e->so_tick++;
    for (int i = 0; i < e->n_so_cache; i++)
        if (!strcmp(e->so_cache[i]->key, key)) {
            free(key);
            e->so_cache[i]->used = e->so_tick;
            e->so_cache[i]->refs++;
            *out = e->so_cache[i];
            return VLLM_OK;
        }
    engine_so_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        free(key);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    g->key = key;
    vllm_status st = so_spec_compile(s, &g->c);
    if (st == VLLM_OK) st = so_mask_cache_create(g->c, e->so_vocab, &g->mc);
    if (st != VLLM_OK) {
        grammar_free(g);
        return st;
    }
    g->ahead = ahead_start(g->mc);
    if (!e->so_cache && !(e->so_cache = calloc(SO_CACHE_MAX, sizeof *e->so_cache))) {
        grammar_free(g);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    if (e->n_so_cache == SO_CACHE_MAX) { /* evict the least recently used; in-use grammars live on */
        int lru = 0;
        for (int i = 1; i < e->n_so_cache; i++)
            if (e->so_cache[i]->used < e->so_cache[lru]->used) lru = i;
        engine_so_grammar *old = e->so_cache[lru];
        old->cached = false;
        if (old->refs == 0) grammar_free(old);
        e->so_cache[lru] = e->so_cache[--e->n_so_cache];
    }
    g->cached = true;
    g->refs = 1;
    g->used = e->so_tick;
    e->so_cache[e->n_so_cache++] = g;
    *out = g;
    return VLLM_OK;
}

/* vLLM's BaseThinkingReasoningParser.is_reasoning_end on the prompt (vllm/reasoning/basic_parsers.py): the last
 * start or end token, looking back, says whether the reasoning is over; neither: it has not begun, and the
 * constraint waits for the end token (vllm/v1/structured_output/__init__.py should_fill_bitmask /
 * should_advance: the end token itself is never fed to the grammar) */
static vllm_status reasoning_init(vllm_engine *e, ereq *q) {
    const vllm_structured_outputs *s = &q->r.params.structured_outputs;
    q->so_reasoning = false;
    if (!s->reasoning_end) return VLLM_OK;
    const int32_t end = tok_piece_to_id(e->tok, s->reasoning_end),
                  start = s->reasoning_start ? tok_piece_to_id(e->tok, s->reasoning_start) : -1;
    if (end < 0 || (s->reasoning_start && start < 0))
        return vt_error(VLLM_ERR_INVALID_ARG, "structured outputs: the reasoning markers '%s' / '%s' are not tokens of "
                                              "the vocabulary",
                        s->reasoning_start ? s->reasoning_start : "", s->reasoning_end);
    q->so_think_end = end;
    q->so_reasoning = true;
    for (int i = q->r.num_prompt - 1; i >= 0; i--) {
        if (q->r.tokens[i] == end) {
            q->so_reasoning = false;
            break;
        }
        if (q->r.tokens[i] == start) break;
    }
    return VLLM_OK;
}

vllm_status engine_so_attach(vllm_engine *e, ereq *q) {
    const vllm_structured_outputs *s = &q->r.params.structured_outputs;
    if (!so_spec_count(s)) return VLLM_OK;
    vllm_status st;
    if ((st = so_spec_validate(s)) || (st = vocab(e)) || (st = grammar_get(e, s, &q->so_grammar))) return st;
    if ((st = reasoning_init(e, q))) return st;
    q->so_next = -1;
    return so_matcher_create(q->so_grammar->c, &q->so);
}

void engine_so_detach(ereq *q) {
    so_matcher_free(q->so);
    q->so = NULL;
    grammar_release(q->so_grammar);
    q->so_grammar = NULL;
}

/* The mask threads: as many as the machine has cores, at most SO_MAX_THREADS (a step's masks are independent:
 * one matcher per request, the grammars' caches shared and thread-safe); made on the first mask. */
#define SO_MAX_THREADS 8

static vllm_status pool(vllm_engine *e) {
    if (e->so_pool) return VLLM_OK;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n = ncpu < 1 ? 1 : ncpu > SO_MAX_THREADS ? SO_MAX_THREADS : (int)ncpu;
    const size_t S = (size_t)e->sched.cfg.max_num_seqs, W = (size_t)(so_vocab_size(e->so_vocab) + 31) / 32;
    vllm_status st = tp_create(n, &e->so_pool);
    if (st == VLLM_OK) {
        n = tp_num_threads(e->so_pool);
        e->so_scratch = calloc((size_t)n, sizeof *e->so_scratch);
        e->so_masks = malloc(S * W * sizeof *e->so_masks);
        e->so_rows = malloc(S * sizeof *e->so_rows);
        e->so_row_seconds = malloc(S * sizeof *e->so_row_seconds);
        if (!e->so_scratch || !e->so_masks || !e->so_rows || !e->so_row_seconds) st = VLLM_ERR_NO_MEMORY;
        for (int i = 0; st == VLLM_OK && e->so_scratch && i < n; i++) st = so_mask_scratch_create(&e->so_scratch[i]);
    }
    e->so_threads = n;
    if (st != VLLM_OK) {
        engine_so_free_masks(e);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (token masks)");
    }
    LOG_I("structured outputs: token masks on %d thread%s", n, n == 1 ? "" : "s");
    return VLLM_OK;
}

static void fill_rows(void *cls, int64_t start, int64_t end, int tid) {
    so_fill_job *j = cls;
    vllm_engine *e = j->e;
    for (int64_t k = start; k < end; k++) {
        const int i = j->rows[k];
        ereq *q = j->reqs[i];
        uint32_t *m = e->so_masks + (size_t)i * j->words;
        const double t0 = progress_now();
        bool refused = false;
        if (q->so_next >= 0) { /* the token the last step sampled (engine_so_accept left it to this job) */
            refused = !so_match_token(q->so, e->so_vocab, q->so_next);
            q->so_next = -1;
        }
        if (refused) { /* (the mask allowed it: a bug) every token banned: the sampler ends the request */
            LOG_W("request %s: the structured-output grammar refused the token sampled last", q->id);
            memset(m, 0, j->words * sizeof *m);
        } else if (so_match_terminated(q->so)) {
            m = NULL; /* the grammar ended with that token: unconstrained from here, as vLLM */
        } else if (so_match_fill_mask_scratch(q->so, q->so_grammar->mc, e->so_scratch[tid], m) != VLLM_OK) {
            LOG_W("request %s: %s (its mask walks the whole vocabulary)", q->id, vllm_last_error());
            so_match_fill_mask(q->so, e->so_vocab, m);
        }
        e->so_row_seconds[k] = progress_now() - t0;
        j->ctx[i].mask = m;
    }
}

/* The rows of reqs[0 .. n) to mask now into e->so_rows (ctx[i].mask cleared for every row); their count. */
static int masked_rows(vllm_engine *e, ereq *const *reqs, sampler_context *ctx, int n) {
    int nm = 0;
    for (int i = 0; i < n; i++) {
        ereq *q = reqs[i];
        ctx[i].mask = NULL;
        if (!q->so || q->so_reasoning || so_match_terminated(q->so) || !e->so_vocab) continue;
        if (!e->so_pool && pool(e) != VLLM_OK) {
            LOG_W("%s (the step's structured outputs are unconstrained)", vllm_last_error());
            return 0;
        }
        e->so_rows[nm++] = i;
    }
    return nm;
}

/* the per-mask histogram of the rows just filled */
static void count_rows(vllm_engine *e, int nm, double waited) {
    engine_counters *k = &e->counters;
    k->so_mask_seconds += waited; /* what the engine thread waited */
    if (waited > 2e-4) k->so_long_waits++, k->so_long_wait_seconds += waited;
    k->so_masks += (size_t)nm;
    for (int r = 0; r < nm; r++) {
        const double dt = e->so_row_seconds[r];
        int b = dt * 1e6 < 1.0 ? 0 : 1 + (int)(log(dt * 1e6) / log(1.1));
        k->so_mask_hist[b < ENGINE_MASK_HIST ? b : ENGINE_MASK_HIST - 1]++;
    }
}

void engine_so_fill_masks(vllm_engine *e, ereq *const *reqs, sampler_context *ctx, int n) {
    int nm = masked_rows(e, reqs, ctx, n);
    if (!nm) return;
    e->so_job = (so_fill_job){e, reqs, ctx, e->so_rows, (size_t)(so_vocab_size(e->so_vocab) + 31) / 32};
    const double t0 = progress_now();
    if (nm == 1) fill_rows(&e->so_job, 0, 1, 0);
    else tp_run(e->so_pool, nm, fill_rows, &e->so_job);
    count_rows(e, nm, progress_now() - t0);
}

void engine_so_masks_start(vllm_engine *e, ereq *const *reqs, sampler_context *ctx, int n) {
    e->so_pending = masked_rows(e, reqs, ctx, n);
    if (!e->so_pending) return;
    e->so_job = (so_fill_job){e, reqs, ctx, e->so_rows, (size_t)(so_vocab_size(e->so_vocab) + 31) / 32};
    tp_start(e->so_pool, e->so_pending, fill_rows, &e->so_job);
}

void engine_so_masks_wait(vllm_engine *e) {
    if (!e->so_pending) return;
    const double t0 = progress_now();
    tp_wait(e->so_pool);
    count_rows(e, e->so_pending, progress_now() - t0);
    e->so_pending = 0;
}

bool engine_so_accept(vllm_engine *e, ereq *q, int32_t t) {
    if (!q->so || so_match_terminated(q->so)) return true; /* (tokens after the end: unconstrained, as vLLM) */
    if (q->so_reasoning) {
        if (t == q->so_think_end) q->so_reasoning = false;
        return true;
    }
    if (e->so_overlap && e->so_pool && q->so_next < 0) { /* read by the next step's mask job, off this thread */
        q->so_next = t;
        return true;
    }
    if (q->so_next >= 0 && !so_match_token(q->so, e->so_vocab, q->so_next)) return false;
    q->so_next = -1;
    return so_match_token(q->so, e->so_vocab, t);
}

double engine_hist_quantile(const uint32_t *hist, double q) {
    uint64_t total = 0, seen = 0;
    for (int b = 0; b < ENGINE_MASK_HIST; b++) total += hist[b];
    if (!total) return 0.0;
    for (int b = 0; b < ENGINE_MASK_HIST; b++) {
        seen += hist[b];
        if ((double)seen >= q * (double)total) return b == 0 ? 1.0 : pow(1.1, b);
    }
    return pow(1.1, ENGINE_MASK_HIST);
}
