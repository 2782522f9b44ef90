/* test_scheduler.c: token budget, chunked prefill, FCFS admission,
 * block accounting, preemption by recompute and prefix caching (on and
 * off: the same batches, fewer computed tokens), hybrid models' state
 * checkpoints (chunks aligned to checkpoint boundaries, saves, restores on
 * a hit, a same-step save invisible, rollback), without a model; each
 * step's decisions made into a batch by the input builder. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/input_builder.h"
#include "engine/scheduler.h"
#include "test.h"

static request *make_req(size_t idx, int prompt, int max_new, int max_blocks) {
    request *r = calloc(1, sizeof *r);
    r->index = idx;
    r->cap_tokens = prompt + max_new;
    r->tokens = calloc((size_t)r->cap_tokens, sizeof *r->tokens);
    r->logprobs = calloc((size_t)max_new + 1, sizeof *r->logprobs);
    r->blocks = calloc((size_t)max_blocks, sizeof *r->blocks);
    for (int i = 0; i < prompt; i++) r->tokens[i] = (int32_t)(i + 1);
    r->num_prompt = r->num_tokens = prompt;
    r->params = vllm_sampling_default_params();
    return r;
}

static void free_req(request *r) {
    free(r->tokens);
    free(r->logprobs);
    free(r->blocks);
    free(r);
}

/* Appends a token to every request the last build sampled (as the engine would). */
static void fake_sample(const sched_output *so, const input_builder *ib) {
    for (int i = 0; i < so->num_reqs; i++)
        if (ib->sampled[i]) {
            request *r = so->reqs[i];
            r->tokens[r->num_tokens++] = 7;
        }
}

/* The scheduler's next step, made into a batch by ib (sized for cfg). */
static void step(scheduler *s, input_builder *ib, sched_output *so, fwd_batch *b) {
    if (!ib->cap_seqs) {
        ib_init(ib, s->kv.num_groups, s->cfg.block_size, s->cfg.max_blocks_per_seq);
        CHECK_OK(ib_reserve(ib, s->cfg.max_num_batched_tokens, s->cfg.max_num_seqs));
    }
    CHECK_OK(sched_step(s, so));
    memset(b, 0, sizeof *b);
    if (so->num_reqs > 0) CHECK_OK(ib_build(ib, so, b));
}

static void check_batch(const scheduler *s, const fwd_batch *b) {
    /* positions continue each request's cache; slots follow its block table */
    for (int i = 0; i < b->num_seqs; i++) {
        request *r = s->step_reqs[i];
        for (int t = b->query_start_loc[i]; t < b->query_start_loc[i + 1]; t++) {
            int pos = b->positions[t];
            CHECK(pos == r->num_computed + (t - b->query_start_loc[i]));
            CHECK(b->slot_mapping[t] == (int64_t)r->blocks[pos / s->cfg.block_size] * s->cfg.block_size +
                                            pos % s->cfg.block_size);
        }
        CHECK(b->seq_lens[i] == r->num_computed + (b->query_start_loc[i + 1] - b->query_start_loc[i]));
    }
}

/* One step's shape, to compare runs with and without prefix caching. */
typedef struct step_rec {
    int num_seqs, num_tokens, num_logits;
    size_t idx[4];
    int seq_lens[4], query[4];
} step_rec;

/* Runs requests (prompts sharing a 64-token prefix) to completion with
 * max_new generated tokens each; records every step. Returns the steps. */
static int run_shared_prefix(bool caching, int num_blocks, int budget, step_rec *rec, int max_steps, int *cached,
                             kv_stats *stats, size_t *preemptions) {
    enum { N = 3, MAX_NEW = 6 };
    sched_config cfg = {.max_num_seqs = 4, .max_num_batched_tokens = budget, .block_size = 16,
                        .max_blocks_per_seq = 8, .enable_prefix_caching = caching};
    int prompt_len[N] = {80, 90, 70};
    scheduler s;
    CHECK_OK(sched_init(&s, &cfg, num_blocks));
    request *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = make_req((size_t)i, prompt_len[i], MAX_NEW, 8);
        for (int j = 64; j < prompt_len[i]; j++) r[i]->tokens[j] = (int32_t)(1000 * (i + 1) + j); /* own suffix */
        CHECK_OK(sched_add(&s, r[i]));
    }
    int steps = 0;
    input_builder ib = {0};
    sched_output so;
    fwd_batch fb;
    while (sched_has_work(&s) && steps < max_steps) {
        step(&s, &ib, &so, &fb);
        CHECK(fb.num_tokens > 0);
        check_batch(&s, &fb);
        step_rec *x = &rec[steps++];
        memset(x, 0, sizeof *x);
        x->num_seqs = fb.num_seqs;
        x->num_tokens = fb.num_tokens;
        x->num_logits = fb.num_logits;
        for (int i = 0; i < fb.num_seqs && i < 4; i++) {
            x->idx[i] = s.step_reqs[i]->index;
            x->seq_lens[i] = fb.seq_lens[i];
            x->query[i] = fb.query_start_loc[i + 1] - fb.query_start_loc[i];
        }
        sched_commit(&s);
        fake_sample(&so, &ib);
        for (int i = 0; i < s.num_step; i++) {
            request *q = s.step_reqs[i];
            if (q->num_tokens - q->num_prompt >= MAX_NEW && q->state == REQ_RUNNING) sched_finish(&s, q);
        }
    }
    ib_destroy(&ib);
    for (int i = 0; i < N; i++) {
        CHECK(r[i]->state == REQ_FINISHED && r[i]->num_tokens == prompt_len[i] + MAX_NEW);
        cached[i] = r[i]->num_cached_tokens;
        free_req(r[i]);
    }
    CHECK(sched_num_free_blocks(&s) == num_blocks); /* no leak */
    *stats = sched_prefix_cache_stats(&s);
    *preemptions = s.num_preemptions;
    sched_destroy(&s);
    return steps;
}

static void test_prefix_caching(void) {
    enum { MAXS = 64 };
    step_rec off[MAXS], on[MAXS];
    int coff[3], con[3];
    kv_stats soff, son;
    size_t poff, pon;
    /* all three fit in one step: the second and third share the first's
     * 4 prefix blocks, cached as the first's blocks are allocated */
    int noff = run_shared_prefix(false, 64, 512, off, MAXS, coff, &soff, &poff);
    int non = run_shared_prefix(true, 64, 512, on, MAXS, con, &son, &pon);
    CHECK(noff == non && noff == 6);
    CHECK(coff[0] == 0 && coff[1] == 0 && coff[2] == 0);
    CHECK(con[0] == 0 && con[1] == 64 && con[2] == 64);
    CHECK(soff.requests == 0 && soff.queries == 0 && soff.hits == 0);
    CHECK(son.requests == 3 && son.queries == 240 && son.hits == 128);
    CHECK(on[0].num_tokens == 80 + 26 + 6 && off[0].num_tokens == 240);
    for (int i = 0; i < noff && i < non; i++) {
        CHECK(off[i].num_seqs == on[i].num_seqs && off[i].num_logits == on[i].num_logits);
        for (int j = 0; j < off[i].num_seqs && j < 4; j++) {
            CHECK(off[i].idx[j] == on[i].idx[j]);
            CHECK(off[i].seq_lens[j] == on[i].seq_lens[j]);
            if (i > 0) CHECK(off[i].query[j] == on[i].query[j]); /* decodes */
        }
    }
    /* chunked (budget 48): the later requests are admitted in later steps
     * and hit the prefix the first computed */
    noff = run_shared_prefix(false, 64, 48, off, MAXS, coff, &soff, &poff);
    non = run_shared_prefix(true, 64, 48, on, MAXS, con, &son, &pon);
    CHECK(non < noff);
    CHECK(con[0] == 0 && con[1] == 64 && con[2] == 64);
    CHECK(son.hits == 128);
    /* tiny pools (16 and 8 blocks of 16 tokens): preemption with and
     * without caching, every request finishes, no block leaks */
    noff = run_shared_prefix(false, 16, 512, off, MAXS, coff, &soff, &poff);
    CHECK(noff < MAXS && poff > 0);
    non = run_shared_prefix(true, 8, 512, on, MAXS, con, &son, &pon);
    CHECK(non < MAXS && pon > 0);
    CHECK(con[1] == 64 && con[2] == 64);
    CHECK(son.requests == 3 + pon && son.hits > 128); /* a preempted request resumes from its cached blocks */
}

/* A step that is planned but never committed (the forward failed) leaves
 * nothing cached behind: its blocks were never written. */
static void test_uncommitted_step(void) {
    sched_config cfg = {.max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 4, .max_blocks_per_seq = 8,
                        .enable_prefix_caching = true};
    scheduler s;
    CHECK_OK(sched_init(&s, &cfg, 16));
    request *a = make_req(0, 10, 2, 8);
    CHECK_OK(sched_add(&s, a));
    input_builder ib = {0};
    sched_output so;
    fwd_batch fb;
    step(&s, &ib, &so, &fb);
    CHECK(s.kv.pool.num_cached == 2);
    sched_finish(&s, a); /* aborted after the failed step */
    request *b = make_req(1, 10, 2, 8);
    CHECK_OK(sched_add(&s, b));
    step(&s, &ib, &so, &fb); /* forgets a's blocks first */
    CHECK(b->num_cached_tokens == 0 && fb.num_tokens == 10);
    sched_commit(&s);
    CHECK(s.kv.pool.num_cached == 2);
    /* a request wanting prompt logprobs computes its whole prompt */
    request *c = make_req(2, 10, 2, 8), *d = make_req(3, 10, 2, 8);
    c->params.prompt_logprobs = 0;
    CHECK_OK(sched_add(&s, c));
    CHECK_OK(sched_add(&s, d));
    step(&s, &ib, &so, &fb);
    CHECK(fb.num_seqs == 2 && fb.num_tokens == 10 + 2); /* b has nothing to run (not sampled here) */
    CHECK(c->num_cached_tokens == 0 && d->num_cached_tokens == 8);
    /* c: rows 0 .. 8 give prompt logprobs 1 .. 9, row 9 is sampled; d: its last row */
    CHECK(fb.num_logits == 9 + 1 + 1 && fb.logits_indices[0] == 0 && fb.logits_indices[9] == 9 &&
          fb.logits_indices[10] == 11);
    sched_commit(&s);
    sched_reset(&s);
    ib_destroy(&ib);
    CHECK(s.kv.pool.num_cached == 0 && sched_num_free_blocks(&s) == 16);
    sched_destroy(&s);
    free_req(a);
    free_req(b);
    free_req(c);
    free_req(d);
}

/* Recurrent-state slots (hybrid models): one per running request, distinct, in 1 .. num_state_slots, passed
 * to the batch; given back at finish and at preemption (the recompute takes a slot again and restarts at
 * position 0, so the model zeroes that state); waiting requests hold none. */
static void check_slots(const scheduler *s, const fwd_batch *b, int num_slots) {
    bool used[8] = {false};
    for (int i = 0; i < s->num_running; i++) {
        int k = s->running[i]->state_slot;
        CHECK(k >= 1 && k <= num_slots && !used[k]);
        if (k >= 1 && k <= num_slots) used[k] = true;
    }
    for (int i = 0; i < s->num_waiting; i++) CHECK(s->waiting[i]->state_slot == 0);
    CHECK(s->num_free_slots + s->num_running == num_slots);
    for (int i = 0; b && i < b->num_seqs; i++) CHECK(b->state_slots[i] == s->step_reqs[i]->state_slot);
}

static void test_state_slots(void) {
    enum { SLOTS = 3 };
    sched_config cfg = {.max_num_seqs = SLOTS, .max_num_batched_tokens = 64, .block_size = 4,
                        .max_blocks_per_seq = 8, .num_state_slots = SLOTS};
    scheduler s;
    CHECK_OK(sched_init(&s, &cfg, 12)); /* 12 blocks: three requests of 12 tokens fill the pool */
    request *r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = make_req((size_t)i, 11, 8, 8);
        CHECK_OK(sched_add(&s, r[i]));
    }
    input_builder ib = {0};
    sched_output so;
    fwd_batch fb;
    step(&s, &ib, &so, &fb); /* three admitted (max_num_seqs), the fourth waits */
    CHECK(fb.num_seqs == SLOTS && s.num_waiting == 1);
    check_slots(&s, &fb, SLOTS);
    sched_commit(&s);
    fake_sample(&so, &ib);
    int preemptions = 0;
    for (int k = 0; k < 60 && sched_has_work(&s); k++) {
        step(&s, &ib, &so, &fb);
        check_slots(&s, &fb, SLOTS);
        /* a sequence starting at position 0 starts from a zero state */
        for (int i = 0; i < fb.num_seqs; i++)
            if (fb.positions[fb.query_start_loc[i]] == 0) CHECK(s.step_reqs[i]->num_computed == 0);
        sched_commit(&s);
        fake_sample(&so, &ib);
        preemptions = (int)s.num_preemptions;
        for (int i = 0; i < 4; i++) /* finish at 18 tokens: the slot comes back */
            if (r[i]->state == REQ_RUNNING && r[i]->num_tokens >= 18 && r[i]->num_computed == r[i]->num_tokens - 1) {
                sched_finish(&s, r[i]);
                CHECK(r[i]->state_slot == 0);
                check_slots(&s, NULL, SLOTS);
            }
    }
    CHECK(preemptions > 0); /* the pool is too small for three growing requests */
    CHECK(!sched_has_work(&s) && s.num_free_slots == SLOTS);
    sched_reset(&s);
    ib_destroy(&ib);
    sched_destroy(&s);
    for (int i = 0; i < 4; i++) free_req(r[i]);
}

/* A hybrid model's scheduler: blocks of 4, checkpoints every 8 tokens. */
static sched_config ckpt_config(int budget, int num_ckpt) {
    return (sched_config){.max_num_seqs = 4, .max_num_batched_tokens = budget, .block_size = 4,
                          .max_blocks_per_seq = 8, .enable_prefix_caching = true, .num_state_slots = 4,
                          .num_ckpt_slots = num_ckpt, .ckpt_interval = 8};
}

/* Commits the step and appends a token to every request it sampled. */
static void commit_sample(scheduler *s, const sched_output *so, const input_builder *ib) {
    sched_commit(s);
    fake_sample(so, ib);
}

static void test_checkpoints(void) {
    scheduler s;
    input_builder ib = {0};
    sched_output so;
    fwd_batch fb;
    /* the interval must be a multiple of the block size, and checkpoints need state slots */
    sched_config bad = ckpt_config(64, 4);
    bad.ckpt_interval = 6;
    CHECK(sched_init(&s, &bad, 32) != VLLM_OK);
    bad = ckpt_config(64, 4);
    bad.num_state_slots = 0;
    CHECK(sched_init(&s, &bad, 32) != VLLM_OK);
    vt_error_clear();

    /* 1. a: 21 tokens in one chunk of 64 stops at the last boundary, 16, and saves there; b, the same
     * prompt admitted in the same step, hits a's blocks but not the checkpoint (pending): it recomputes */
    sched_config cfg = ckpt_config(64, 4);
    CHECK_OK(sched_init(&s, &cfg, 32));
    request *a = make_req(0, 21, 8, 8), *b = make_req(1, 21, 8, 8), *c = make_req(2, 21, 8, 8);
    CHECK_OK(sched_add(&s, a));
    CHECK_OK(sched_add(&s, b));
    step(&s, &ib, &so, &fb);
    CHECK(so.num_reqs == 2 && so.num_tokens[0] == 16 && so.num_tokens[1] == 16 && fb.num_logits == 0);
    CHECK(b->num_cached_tokens == 0 && b->num_computed == 0);
    CHECK(so.num_restores == 0 && so.num_saves == 1 && so.saves[0].state_slot == a->state_slot);
    const int ck16 = so.saves[0].ckpt_slot;
    check_batch(&s, &fb);
    commit_sample(&s, &so, &ib);
    CHECK(sched_ckpt_stats(&s).saves == 1);

    /* 2. the rest of both prompts (no boundary before 24): sampled, nothing saved */
    step(&s, &ib, &so, &fb);
    CHECK(so.num_reqs == 2 && so.num_tokens[0] == 5 && so.num_tokens[1] == 5 && fb.num_logits == 2);
    CHECK(so.num_saves == 0 && so.num_restores == 0);
    commit_sample(&s, &so, &ib);

    /* 3. c, the same prompt, resumes at 16 from a's checkpoint (blocks up to 20 are cached, but 20 is no
     * boundary): a restore into c's new slot, 5 tokens computed; a and b decode */
    CHECK_OK(sched_add(&s, c));
    kv_stats before = sched_prefix_cache_stats(&s);
    step(&s, &ib, &so, &fb);
    CHECK(so.num_reqs == 3 && so.num_tokens[2] == 5 && c->num_cached_tokens == 16 && c->num_computed == 16);
    CHECK(so.num_restores == 1 && so.restores[0].ckpt_slot == ck16 && so.restores[0].state_slot == c->state_slot);
    CHECK(fb.positions[fb.query_start_loc[2]] == 16);
    kv_stats after = sched_prefix_cache_stats(&s);
    CHECK(after.hits - before.hits == 16 && after.requests - before.requests == 1);
    check_batch(&s, &fb);
    commit_sample(&s, &so, &ib);
    CHECK(sched_ckpt_stats(&s).restores == 1);

    /* 4. decodes: the step computing position 23 ends on the boundary 24 and saves a's and c's state
     * once (b's and c's prefixes are a's: one checkpoint per prefix id) */
    int saves24 = 0;
    for (int k = 0; k < 3; k++) {
        step(&s, &ib, &so, &fb);
        CHECK(so.num_restores == 0);
        for (int i = 0; i < so.num_reqs; i++) CHECK(so.num_tokens[i] == 1); /* decodes are never cut */
        if (a->num_computed + 1 == 24) saves24 = so.num_saves;
        else CHECK(so.num_saves == 0);
        commit_sample(&s, &so, &ib);
    }
    /* a, b and c generated the same token 7: one prefix, so one checkpoint */
    CHECK(saves24 == 1 && sched_ckpt_stats(&s).saves == 2);

    /* 5. an uncommitted step's save is forgotten: d (a new prompt) saves at 8, the step never commits */
    sched_finish(&s, a);
    sched_finish(&s, b);
    sched_finish(&s, c);
    request *d = make_req(3, 10, 4, 8), *e = make_req(4, 10, 4, 8);
    for (int i = 0; i < 10; i++) d->tokens[i] = e->tokens[i] = 500 + i;
    CHECK_OK(sched_add(&s, d));
    step(&s, &ib, &so, &fb);
    CHECK(so.num_reqs == 1 && so.num_tokens[0] == 8 && so.num_saves == 1 && s.sc.num_used == 3);
    sched_finish(&s, d); /* as after a failed forward */
    CHECK_OK(sched_add(&s, e));
    step(&s, &ib, &so, &fb); /* rolls the last step back first */
    CHECK(s.sc.num_used == 3 && e->num_cached_tokens == 0 && so.num_tokens[0] == 8 && so.num_saves == 1);
    commit_sample(&s, &so, &ib);
    CHECK(sched_ckpt_stats(&s).saves == 3);
    sched_finish(&s, e);

    /* 6. sched_reset forgets the checkpoints with the prefix cache */
    sched_reset(&s);
    CHECK(s.sc.num_used == 0 && sched_num_free_blocks(&s) == 32);
    sched_destroy(&s);
    ib_destroy(&ib);

    /* 7. a 10-token budget: 21 tokens go as 8 (boundary 8, saved), 8 (16, saved), 5 */
    cfg = ckpt_config(10, 4);
    CHECK_OK(sched_init(&s, &cfg, 32));
    request *f = make_req(5, 21, 2, 8);
    CHECK_OK(sched_add(&s, f));
    const int chunks[3] = {8, 8, 5}, saves[3] = {1, 1, 0};
    for (int k = 0; k < 3; k++) {
        step(&s, &ib, &so, &fb);
        CHECK(so.num_reqs == 1 && so.num_tokens[0] == chunks[k] && so.num_saves == saves[k]);
        commit_sample(&s, &so, &ib);
    }
    sched_finish(&s, f);
    sched_destroy(&s);
    ib_destroy(&ib);

    /* 8. a hybrid model with prefix caching but no checkpoints: no hit (its states could not resume), no
     * alignment */
    cfg = ckpt_config(64, 0);
    CHECK_OK(sched_init(&s, &cfg, 32));
    request *g = make_req(6, 21, 2, 8), *h = make_req(7, 21, 2, 8);
    CHECK_OK(sched_add(&s, g));
    step(&s, &ib, &so, &fb);
    CHECK(so.num_tokens[0] == 21 && so.num_saves == 0);
    commit_sample(&s, &so, &ib);
    CHECK_OK(sched_add(&s, h));
    step(&s, &ib, &so, &fb);
    CHECK(h->num_cached_tokens == 0 && so.num_restores == 0 && s.kv.pool.num_cached > 0);
    commit_sample(&s, &so, &ib);
    sched_reset(&s);
    sched_destroy(&s);
    ib_destroy(&ib);
    request *all[] = {a, b, c, d, e, f, g, h};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free_req(all[i]);
}

int main(void) {
    test_prefix_caching();
    test_checkpoints();
    test_state_slots();
    test_uncommitted_step();

    /* chunked prefill under a 10-token budget */
    sched_config cfg = {.max_num_seqs = 4, .max_num_batched_tokens = 10, .block_size = 4, .max_blocks_per_seq = 16};
    scheduler s;
    CHECK_OK(sched_init(&s, &cfg, 64));
    request *a = make_req(0, 23, 3, 16), *b = make_req(1, 5, 3, 16);
    CHECK_OK(sched_add(&s, a));
    CHECK_OK(sched_add(&s, b));
    input_builder ib = {0};
    sched_output so;
    fwd_batch fb;
    step(&s, &ib, &so, &fb);
    CHECK(fb.num_tokens == 10 && fb.num_seqs == 1 && fb.num_logits == 0); /* a: first chunk */
    check_batch(&s, &fb);
    sched_commit(&s);
    step(&s, &ib, &so, &fb);
    CHECK(fb.num_tokens == 10 && fb.num_seqs == 1);                       /* a: second chunk */
    sched_commit(&s);
    step(&s, &ib, &so, &fb);
    /* a: last 3 prompt tokens (sampled) + b: 5 prompt tokens, 2 budget left unused by b? b takes min(5, 7) */
    CHECK(fb.num_seqs == 2 && fb.num_tokens == 8 && fb.num_logits == 2);
    CHECK(fb.logits_indices[0] == 2 && fb.logits_indices[1] == 7);
    check_batch(&s, &fb);
    sched_commit(&s);
    fake_sample(&so, &ib);
    step(&s, &ib, &so, &fb);
    CHECK(fb.num_seqs == 2 && fb.num_tokens == 2 && fb.num_logits == 2);  /* two decodes */
    CHECK(fb.positions[0] == 23 && fb.positions[1] == 5);
    check_batch(&s, &fb);
    sched_commit(&s);
    sched_finish(&s, a);
    sched_finish(&s, b);
    CHECK(sched_num_free_blocks(&s) == 64);
    CHECK(!sched_has_work(&s));
    sched_destroy(&s);
    ib_destroy(&ib);
    free_req(a);
    free_req(b);

    /* preemption: 6 blocks of 4 tokens, two requests growing past it */
    sched_config c2 = {.max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 4, .max_blocks_per_seq = 8};
    CHECK_OK(sched_init(&s, &c2, 6));
    request *x = make_req(0, 8, 12, 8), *y = make_req(1, 8, 12, 8);
    CHECK_OK(sched_add(&s, x));
    CHECK_OK(sched_add(&s, y));
    int preempted_seen = 0;
    for (int k = 0; k < 60 && sched_has_work(&s); k++) {
        step(&s, &ib, &so, &fb);
        CHECK(fb.num_tokens > 0);
        check_batch(&s, &fb);
        sched_commit(&s);
        fake_sample(&so, &ib);
        for (int i = 0; i < s.num_step; i++) {
            request *r = s.step_reqs[i];
            if (r->num_tokens - r->num_prompt >= 12 && r->state == REQ_RUNNING) sched_finish(&s, r);
        }
        if (s.num_preemptions) preempted_seen = 1;
        CHECK(sched_num_free_blocks(&s) >= 0);
    }
    CHECK(preempted_seen);
    CHECK(x->state == REQ_FINISHED && y->state == REQ_FINISHED);
    CHECK(x->num_tokens == 20 && y->num_tokens == 20);
    CHECK(sched_num_free_blocks(&s) == 6);
    sched_destroy(&s);
    ib_destroy(&ib);
    free_req(x);
    free_req(y);
    TEST_END();
}
