/* test_scheduler.c: token budget, chunked prefill, FCFS admission,
 * block accounting and preemption by recompute, without a model. */
#include <stdlib.h>
#include <string.h>

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

/* Appends a token to every sampled request (as the engine would). */
static void fake_sample(scheduler *s) {
    for (int i = 0; i < s->num_step; i++)
        if (sched_is_sampled(s, i)) {
            request *r = s->step_reqs[i];
            r->tokens[r->num_tokens++] = 7;
        }
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

int main(void) {
    /* chunked prefill under a 10-token budget */
    sched_config cfg = {.max_num_seqs = 4, .max_num_batched_tokens = 10, .block_size = 4, .max_blocks_per_seq = 16};
    scheduler s;
    CHECK_OK(sched_init(&s, &cfg, 64));
    request *a = make_req(0, 23, 3, 16), *b = make_req(1, 5, 3, 16);
    CHECK_OK(sched_add(&s, a));
    CHECK_OK(sched_add(&s, b));
    fwd_batch fb;
    CHECK_OK(sched_step(&s, &fb));
    CHECK(fb.num_tokens == 10 && fb.num_seqs == 1 && fb.num_logits == 0); /* a: first chunk */
    check_batch(&s, &fb);
    sched_commit(&s);
    CHECK_OK(sched_step(&s, &fb));
    CHECK(fb.num_tokens == 10 && fb.num_seqs == 1);                       /* a: second chunk */
    sched_commit(&s);
    CHECK_OK(sched_step(&s, &fb));
    /* a: last 3 prompt tokens (sampled) + b: 5 prompt tokens, 2 budget left unused by b? b takes min(5, 7) */
    CHECK(fb.num_seqs == 2 && fb.num_tokens == 8 && fb.num_logits == 2);
    CHECK(fb.logits_indices[0] == 2 && fb.logits_indices[1] == 7);
    check_batch(&s, &fb);
    sched_commit(&s);
    fake_sample(&s);
    CHECK_OK(sched_step(&s, &fb));
    CHECK(fb.num_seqs == 2 && fb.num_tokens == 2 && fb.num_logits == 2);  /* two decodes */
    CHECK(fb.positions[0] == 23 && fb.positions[1] == 5);
    check_batch(&s, &fb);
    sched_commit(&s);
    sched_finish(&s, a);
    sched_finish(&s, b);
    CHECK(s.pool.num_free == 64);
    CHECK(!sched_has_work(&s));
    sched_destroy(&s);
    free_req(a);
    free_req(b);

    /* preemption: 6 blocks of 4 tokens, two requests growing past it */
    sched_config c2 = {.max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 4, .max_blocks_per_seq = 8};
    CHECK_OK(sched_init(&s, &c2, 6));
    request *x = make_req(0, 8, 12, 8), *y = make_req(1, 8, 12, 8);
    CHECK_OK(sched_add(&s, x));
    CHECK_OK(sched_add(&s, y));
    int preempted_seen = 0;
    for (int step = 0; step < 60 && sched_has_work(&s); step++) {
        CHECK_OK(sched_step(&s, &fb));
        CHECK(fb.num_tokens > 0);
        check_batch(&s, &fb);
        sched_commit(&s);
        fake_sample(&s);
        for (int i = 0; i < s.num_step; i++) {
            request *r = s.step_reqs[i];
            if (r->num_tokens - r->num_prompt >= 12 && r->state == REQ_RUNNING) sched_finish(&s, r);
        }
        if (s.num_preemptions) preempted_seen = 1;
        CHECK(s.pool.num_free >= 0);
    }
    CHECK(preempted_seen);
    CHECK(x->state == REQ_FINISHED && y->state == REQ_FINISHED);
    CHECK(x->num_tokens == 20 && y->num_tokens == 20);
    CHECK(s.pool.num_free == 6);
    sched_destroy(&s);
    free_req(x);
    free_req(y);
    TEST_END();
}
