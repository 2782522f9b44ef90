/*
 * scheduler.c: step planning over the block pool (see scheduler.h).
 * Mirrors vllm/v1/core/sched/scheduler.py: running requests are served
 * first (a decode, or the next chunk of a partial prefill), then waiting
 * requests are admitted while the token budget, max_num_seqs and free
 * blocks allow. When a running request cannot grow, the most recently
 * admitted request is preempted (its blocks freed, recomputed later).
 * Prefix caching follows kv_cache_manager.py: get_computed_blocks on
 * admission (hits capped below the last token), allocate_slots caching
 * every block the step fills.
 * Models with recurrent (linear-attention) layers also hold one state slot
 * per running request (vLLM's mamba cache): taken at admission, given back
 * when the request finishes or is preempted (recompute restarts its state,
 * or restores a checkpoint when its prefix hits).
 * Their prefix caching follows vLLM's mamba_cache_mode "align" (the
 * scheduler's _mamba_block_aligned_split and the mamba manager's cache hits):
 * chunks end on checkpoint boundaries (multiples of ckpt_interval) where they
 * reach one, a chunk ending on a boundary saves the state under the prefix
 * id of the block ending there, and a hit is only as long as the last
 * boundary with a committed checkpoint (kv_coordinator's cap_hit).
 */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

/* Checkpoints are taken and restored (hybrid models with prefix caching). */
static bool ckpt_on(const scheduler *s) { return s->sc.num_slots > 0 && s->kv.pool.caching; }

/* kv_coordinator's cap_hit for hybrid models: the longest hit <= hit (in blocks) that ends on a
 * checkpoint boundary whose checkpoint is committed, keyed by the prefix id of the hit's last block;
 * 0 when none (without checkpoints a hybrid model never hits: its recurrent layers could not resume). */
static int cap_hit(void *ctx, const uint64_t *ids, int hit) {
    const scheduler *s = ctx;
    int per = ckpt_on(s) ? s->cfg.ckpt_interval / s->cfg.block_size : 0; /* blocks per interval */
    if (per <= 0) return 0;
    for (int h = hit / per * per; h > 0; h -= per)
        if (sc_lookup(&s->sc, ids[h - 1]) >= 0) return h;
    return 0;
}

vllm_status sched_init(scheduler *s, const sched_config *cfg, int num_blocks) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (cfg->num_ckpt_slots < 0 || (cfg->num_ckpt_slots > 0 &&
                                    (cfg->num_state_slots <= 0 || cfg->block_size < 1 || cfg->ckpt_interval < 1 ||
                                     cfg->ckpt_interval % cfg->block_size)))
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "scheduler: %d state checkpoints every %d tokens (%d state slots, block_size %d): the "
                        "interval must be a positive multiple of block_size and the model must keep states",
                        cfg->num_ckpt_slots, cfg->ckpt_interval, cfg->num_state_slots, cfg->block_size);
    vllm_status st = kvc_init(&s->kv, cfg->groups, num_blocks, cfg->block_size, cfg->max_blocks_per_seq,
                              cfg->enable_prefix_caching);
    if (st != VLLM_OK) return st;
    if (cfg->num_state_slots > 0) { /* a hybrid model's hits need a checkpoint to resume from */
        s->kv.cap_hit = cap_hit;
        s->kv.cap_ctx = s;
    }
    if ((st = sc_init(&s->sc, cfg->enable_prefix_caching ? cfg->num_ckpt_slots : 0)) != VLLM_OK) {
        sched_destroy(s);
        return st;
    }
    size_t S = (size_t)cfg->max_num_seqs;
    s->running = calloc(S, sizeof *s->running);
    s->step_reqs = calloc(S, sizeof *s->step_reqs);
    s->step_tokens = calloc(S, sizeof *s->step_tokens);
    s->step_cached = malloc((size_t)num_blocks * sizeof *s->step_cached);
    s->step_restores = malloc(S * sizeof *s->step_restores);
    s->step_saves = malloc(S * sizeof *s->step_saves);
    if (cfg->num_state_slots > 0) {
        s->free_slots = malloc((size_t)cfg->num_state_slots * sizeof *s->free_slots);
        for (int i = 0; s->free_slots && i < cfg->num_state_slots; i++)
            s->free_slots[i] = cfg->num_state_slots - i; /* slot 1 on top */
        s->num_free_slots = s->free_slots ? cfg->num_state_slots : 0;
    }
    if (!s->step_cached || !s->running || !s->step_reqs || !s->step_tokens || !s->step_restores ||
        !s->step_saves || (cfg->num_state_slots > 0 && !s->free_slots)) {
        sched_destroy(s);
        return vt_error(VLLM_ERR_NO_MEMORY, "scheduler: out of memory");
    }
    return VLLM_OK;
}

void sched_destroy(scheduler *s) {
    kvc_destroy(&s->kv);
    sc_destroy(&s->sc);
    free(s->step_restores);
    free(s->step_saves);
    free(s->step_cached);
    free(s->waiting);
    free(s->running);
    free(s->step_reqs);
    free(s->step_tokens);
    free(s->free_slots);
    memset(s, 0, sizeof *s);
}

static vllm_status push_waiting(scheduler *s, request *r, bool front) {
    if (s->num_waiting == s->cap_waiting) {
        int cap = s->cap_waiting ? 2 * s->cap_waiting : 64;
        request **nw = realloc(s->waiting, (size_t)cap * sizeof *nw);
        if (!nw) return vt_error(VLLM_ERR_NO_MEMORY, "scheduler: out of memory");
        s->waiting = nw;
        s->cap_waiting = cap;
    }
    if (front) {
        memmove(s->waiting + 1, s->waiting, (size_t)s->num_waiting * sizeof *s->waiting);
        s->waiting[0] = r;
    } else {
        s->waiting[s->num_waiting] = r;
    }
    s->num_waiting++;
    r->state = REQ_WAITING;
    return VLLM_OK;
}

vllm_status sched_add(scheduler *s, request *r) { return push_waiting(s, r, false); }

size_t sched_blocks_per_request(const scheduler *s) {
    return (size_t)s->kv.num_groups * (size_t)s->cfg.max_blocks_per_seq;
}

bool sched_has_work(const scheduler *s) { return s->num_waiting > 0 || s->num_running > 0; }

/* Releases r's blocks, last first (its tail is evicted before its head). */
static void free_blocks(scheduler *s, request *r) { kvc_free(&s->kv, r->blocks, &r->num_blocks); }

/* Gives r's recurrent-state slot back (none held: nothing). */
static void free_slot(scheduler *s, request *r) {
    if (r->state_slot > 0) s->free_slots[s->num_free_slots++] = r->state_slot;
    r->state_slot = 0;
}

int sched_num_free_blocks(const scheduler *s) { return kvc_num_free(&s->kv); }

kv_stats sched_prefix_cache_stats(const scheduler *s) { return s->kv.pool.stats; }

sc_stats sched_ckpt_stats(const scheduler *s) { return s->sc.stats; }

static void remove_running(scheduler *s, request *r) {
    for (int i = 0; i < s->num_running; i++) {
        if (s->running[i] == r) {
            memmove(s->running + i, s->running + i + 1, (size_t)(s->num_running - i - 1) * sizeof *s->running);
            s->num_running--;
            return;
        }
    }
}

void sched_finish(scheduler *s, request *r) {
    free_blocks(s, r);
    free_slot(s, r);
    remove_running(s, r);
    r->state = REQ_FINISHED;
}

/* Grows r's block tables to hold `tokens` tokens; false (nothing taken)
 * when the pool has too few free blocks. */
static bool ensure_blocks(scheduler *s, request *r, int tokens) {
    return kvc_allocate(&s->kv, r->blocks, &r->num_blocks, tokens);
}

/* Preempts by recompute: drop the cache, return to the front of waiting. */
static vllm_status preempt(scheduler *s, request *r) {
    free_blocks(s, r);
    free_slot(s, r);
    remove_running(s, r);
    r->num_computed = 0;
    s->num_preemptions++;
    LOG_D("preempted request %zu (%d tokens)", r->index, r->num_tokens);
    return push_waiting(s, r, true);
}

/* Chunk alignment with checkpoints (vLLM's align mode): n tokens from `computed` that would cross a
 * checkpoint boundary and not end on one stop at the last boundary they reach, so the state there can be
 * saved (a decode step, one token, never crosses one). */
static int align_chunk(const scheduler *s, int computed, int n) {
    if (!ckpt_on(s) || n <= 1) return n;
    int C = s->cfg.ckpt_interval, end = computed + n, b = end / C * C;
    return b > computed && b < end ? b - computed : n;
}

/* A chunk of r ending at `end` (after the step cached its blocks): when `end` is a checkpoint boundary
 * and the block ending there is cached (its prefix id is the chain's last: kvc_cache_blocks processed
 * exactly the blocks up to `end`), reserves a checkpoint for that prefix id, unless one exists, and
 * records the save of r's state slot into it (run after the forward; visible at commit). */
static void plan_save(scheduler *s, request *r, int end) {
    if (!ckpt_on(s) || r->state_slot <= 0 || end <= 0 || end % s->cfg.ckpt_interval) return;
    if ((long long)r->chain.num_blocks * s->cfg.block_size != end || r->chain.id == 0) return;
    if (sc_contains(&s->sc, r->chain.id)) return; /* saved before, or by another request of this step */
    int k = sc_reserve(&s->sc, r->chain.id);
    if (k < 0) return; /* every checkpoint is pinned by this step */
    s->step_saves[s->num_step_saves++] = (sched_state_copy){.state_slot = r->state_slot, .ckpt_slot = k};
}

/* Adds r's next n tokens to the step; caches the blocks they fill (and plans the state's save). */
static void schedule(scheduler *s, request *r, int n) {
    kvc_cache_blocks(&s->kv, r->tokens, r->num_computed + n, r->blocks, &r->chain, s->step_cached,
                     &s->num_step_cached);
    plan_save(s, r, r->num_computed + n);
    s->step_reqs[s->num_step] = r;
    s->step_tokens[s->num_step] = n;
    s->num_step++;
}

/* Forgets the blocks an uncommitted step cached and the checkpoints it reserved (never written).
 * Its restores were issued (or not) before the failed forward; the engine drops every request after a
 * failed step (engine_drop_all: a partial forward may have written some layers' states). */
static void rollback_cached(scheduler *s) {
    for (int i = 0; i < s->num_step_cached; i++) kv_uncache(&s->kv.pool, s->step_cached[i]);
    s->num_step_cached = 0;
    sc_rollback(&s->sc);
    s->step_pending = false;
}

/* Admits the head of waiting if its first chunk fits: looks up its cached
 * prefix (the hit every group serves), takes references on the hits and
 * allocates the rest. Returns the tokens scheduled, 0 when it does not fit;
 * *ckpt: the checkpoint a hybrid model's hit resumes from (-1: none). */
static int admit(scheduler *s, request *r, int budget, int *ckpt) {
    int bs = s->cfg.block_size;
    kv_manager *pool = &s->kv.pool;
    *ckpt = -1;
    /* prompt logprobs need every prompt position computed (vLLM skips reading the cache too) */
    int hit = 0;
    if (r->params.prompt_logprobs < 0)
        hit = kvc_find_hit(&s->kv, r->tokens, r->num_tokens, r->blocks, &r->chain);
    else
        r->chain = (kv_chain){0};
    if (hit > 0 && s->cfg.num_state_slots > 0) {
        /* cap_hit made the hit end on a committed checkpoint: the prefix id of its last block */
        *ckpt = sc_lookup(&s->sc, r->chain.id);
        if (*ckpt < 0) { /* never expected: recompute from the start rather than resume a wrong state */
            hit = 0;
            r->chain = (kv_chain){0};
        }
    }
    int computed = hit * bs;
    int n = r->num_tokens - computed;
    if (n > budget) n = budget;
    n = align_chunk(s, computed, n);
    /* summed over the groups: the new blocks, and the hits that leave the free queue */
    int need = kvc_num_new_blocks(&s->kv, hit, computed + n) + kvc_num_evictable(&s->kv, r->blocks, hit);
    if (need > kv_num_free(pool)) {
        *ckpt = -1;
        return 0;
    }
    kvc_touch(&s->kv, r->blocks, hit);
    r->num_blocks = hit;
    r->num_computed = computed;
    kvc_remove_skipped(&s->kv, r->blocks, r->num_blocks, computed);
    if (!ensure_blocks(s, r, computed + n)) { /* cannot happen: counted above */
        free_blocks(s, r);
        r->num_computed = 0;
        *ckpt = -1;
        return 0;
    }
    if (pool->caching) {
        pool->stats.requests++;
        pool->stats.queries += (uint64_t)r->num_tokens;
        pool->stats.hits += (uint64_t)computed;
    }
    if (!r->admitted) {
        r->admitted = true;
        r->num_cached_tokens = computed;
    }
    return n;
}

vllm_status sched_step(scheduler *s, sched_output *out) {
    memset(out, 0, sizeof *out);
    if (s->step_pending) rollback_cached(s);
    s->step_pending = true;
    s->num_step = 0;
    s->num_step_restores = s->num_step_saves = 0;
    int budget = s->cfg.max_num_batched_tokens;
    bool preempted = false;

    /* 1. running requests, in admission order */
    for (int i = 0; i < s->num_running && budget > 0;) {
        request *r = s->running[i];
        int n = r->num_tokens - r->num_computed;
        if (n > budget) n = budget;
        if (n <= 0) { i++; continue; }
        n = align_chunk(s, r->num_computed, n);
        /* sliding windows first give back the blocks no query reads any more */
        kvc_remove_skipped(&s->kv, r->blocks, r->num_blocks, r->num_computed);
        while (!ensure_blocks(s, r, r->num_computed + n)) {
            request *victim = s->running[s->num_running - 1];
            vllm_status st = preempt(s, victim);
            if (st != VLLM_OK) return st;
            preempted = true;
            if (victim == r) break;
        }
        if (r->state != REQ_RUNNING) continue; /* r itself was preempted; i now points past the end */
        schedule(s, r, n);
        budget -= n;
        i++;
    }

    /* 2. waiting requests, FCFS, unless this step had to preempt */
    while (!preempted && s->num_waiting > 0 && budget > 0 && s->num_running < s->cfg.max_num_seqs) {
        request *r = s->waiting[0];
        if (s->cfg.num_state_slots > 0 && s->num_free_slots == 0) break; /* cannot happen: one per running */
        int ckpt;
        int n = admit(s, r, budget, &ckpt);
        if (n == 0) break;
        if (s->cfg.num_state_slots > 0) r->state_slot = s->free_slots[--s->num_free_slots];
        if (ckpt >= 0) { /* resume from the checkpoint: copied into the new slot before the forward */
            sc_pin(&s->sc, ckpt);
            s->step_restores[s->num_step_restores++] = (sched_state_copy){.state_slot = r->state_slot,
                                                                          .ckpt_slot = ckpt};
        }
        memmove(s->waiting, s->waiting + 1, (size_t)(s->num_waiting - 1) * sizeof *s->waiting);
        s->num_waiting--;
        r->state = REQ_RUNNING;
        s->running[s->num_running++] = r;
        schedule(s, r, n);
        budget -= n;
    }

    /* 3. the decisions; the model runner's input builder makes the batch of them */
    out->num_reqs = s->num_step;
    out->reqs = s->step_reqs;
    out->num_tokens = s->step_tokens;
    out->total_tokens = s->cfg.max_num_batched_tokens - budget;
    out->num_restores = s->num_step_restores;
    out->restores = s->step_restores;
    out->num_saves = s->num_step_saves;
    out->saves = s->step_saves;
    return VLLM_OK;
}

void sched_reset(scheduler *s) {
    for (int i = 0; i < s->num_running; i++) {
        free_blocks(s, s->running[i]);
        free_slot(s, s->running[i]);
    }
    for (int i = 0; i < s->num_waiting; i++) free_blocks(s, s->waiting[i]);
    s->num_running = s->num_waiting = s->num_step = 0;
    kv_reset_cache(&s->kv.pool);
    sc_reset(&s->sc);
    s->num_step_cached = 0;
    s->num_step_restores = s->num_step_saves = 0;
    s->step_pending = false;
}

void sched_commit(scheduler *s) {
    for (int i = 0; i < s->num_step; i++) s->step_reqs[i]->num_computed += s->step_tokens[i];
    s->num_step_cached = 0;
    sc_commit(&s->sc);
    s->step_pending = false;
}
