/* test_input_builder.c: the model runner's input builder on a hand-made scheduler output: a mixed batch over two KV cache groups. */
#include <stdlib.h>
#include <string.h>

#include "engine/input_builder.h"
#include "test.h"

enum { G = 2, BS = 4, MB = 8 };

/* A request with prompt tokens 100 + i, `generated` tokens 200 + i after them,
 * num_computed tokens already in the cache and each group's block table. */
static request make_req(size_t idx, int prompt, int generated, int computed, const int32_t *g0, const int32_t *g1,
                        int nb, int32_t *tokens, int32_t *blocks) {
    request r;
    memset(&r, 0, sizeof r);
    r.index = idx;
    r.tokens = tokens;
    for (int i = 0; i < prompt; i++) tokens[i] = 100 + i;
    for (int i = 0; i < generated; i++) tokens[prompt + i] = 200 + i;
    r.num_prompt = prompt;
    r.num_tokens = r.cap_tokens = prompt + generated;
    r.num_computed = computed;
    r.blocks = blocks;
    for (int j = 0; j < nb; j++) {
        blocks[j] = g0[j];
        blocks[MB + j] = g1[j];
    }
    r.num_blocks = nb;
    r.params = vllm_sampling_default_params();
    r.state = REQ_RUNNING;
    return r;
}

/* The slot of position pos in a table: block * BS + offset. */
static int64_t slot(const int32_t *table, int pos) { return (int64_t)table[pos / BS] * BS + pos % BS; }

int main(void) {
    int32_t tok[4][16], blk[4][G * MB];
    /* A: a prefill chunk, prompt positions 4 .. 7 of 10 (not sampled); group 1 (a sliding
     * window) already dropped block 0 for the null block */
    request a = make_req(0, 10, 0, 4, (int32_t[]){3, 5}, (int32_t[]){0, 6}, 2, tok[0], blk[0]);
    /* B: a decode at position 6 (5 prompt tokens, 2 generated), sampled */
    request b = make_req(1, 5, 2, 6, (int32_t[]){1, 2}, (int32_t[]){0, 8}, 2, tok[1], blk[1]);
    /* C: its whole 6-token prompt with prompt logprobs, recomputed after a preemption that
     * already gave the logprobs of positions 1 and 2: rows for positions 2 .. 4 (giving
     * the logprobs of 3 .. 5), then its last row sampled */
    request c = make_req(2, 6, 0, 0, (int32_t[]){10, 11}, (int32_t[]){12, 13}, 2, tok[2], blk[2]);
    c.params.prompt_logprobs = 2;
    c.prompt_lp_done = 3;
    /* D: the first 3-token chunk of an 8-token prompt with prompt logprobs: a row for each
     * of its positions 0 .. 2, not sampled */
    request d = make_req(3, 8, 0, 0, (int32_t[]){4}, (int32_t[]){7}, 1, tok[3], blk[3]);
    d.params.prompt_logprobs = 0;
    d.prompt_lp_done = 1;

    request *reqs[4] = {&a, &b, &c, &d};
    int ntok[4] = {4, 1, 6, 3};
    sched_output so = {.num_reqs = 4, .reqs = reqs, .num_tokens = ntok, .total_tokens = 14};

    input_builder ib;
    ib_init(&ib, G, BS, MB);
    CHECK_OK(ib_reserve(&ib, 4, 2)); /* too small: the build grows it */
    fwd_batch fb;
    CHECK_OK(ib_build(&ib, &so, &fb));
    CHECK(fb.num_tokens == 14 && fb.num_seqs == 4 && fb.num_kv_groups == G && fb.max_blocks_per_seq == MB);

    /* token ids and positions, request after request */
    int want_pos[14] = {4, 5, 6, 7, 6, 0, 1, 2, 3, 4, 5, 0, 1, 2};
    int32_t want_ids[14] = {104, 105, 106, 107, 201, 100, 101, 102, 103, 104, 105, 100, 101, 102};
    for (int t = 0; t < 14; t++) {
        CHECK_MSG(fb.positions[t] == want_pos[t], "token %d", t);
        CHECK_MSG(fb.token_ids[t] == want_ids[t], "token %d", t);
    }
    int want_qsl[5] = {0, 4, 5, 11, 14}, want_seq[4] = {8, 7, 6, 3};
    for (int i = 0; i < 5; i++) CHECK(fb.query_start_loc[i] == want_qsl[i]);
    for (int i = 0; i < 4; i++) CHECK(fb.seq_lens[i] == want_seq[i]);

    /* slot mappings (G, T): each group's own table */
    for (int i = 0; i < 4; i++)
        for (int t = want_qsl[i]; t < want_qsl[i + 1]; t++)
            for (int g = 0; g < G; g++)
                CHECK_MSG(fb.slot_mapping[g * 14 + t] == slot(reqs[i]->blocks + g * MB, want_pos[t]),
                          "group %d token %d", g, t);
    CHECK(fb.slot_mapping[0] == 20 && fb.slot_mapping[14 + 0] == 24);  /* A pos 4: block 5 / block 6 */
    CHECK(fb.slot_mapping[4] == 10 && fb.slot_mapping[14 + 4] == 34);  /* B pos 6: block 2 / block 8 */
    CHECK(fb.slot_mapping[10] == 45 && fb.slot_mapping[14 + 10] == 53); /* C pos 5: block 11 / block 13 */

    /* block tables (G, S, MB): the request's entries, then zeros */
    for (int g = 0; g < G; g++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < MB; j++) {
                int32_t want = j < reqs[i]->num_blocks ? reqs[i]->blocks[g * MB + j] : 0;
                CHECK_MSG(fb.block_tables[(g * 4 + i) * MB + j] == want, "group %d seq %d entry %d", g, i, j);
            }

    /* logits rows: B's decode; C's prompt-logprob rows then its sampled row; D's rows */
    int want_rows[8] = {4, 7, 8, 9, 10, 11, 12, 13};
    CHECK(fb.num_logits == 8);
    for (int k = 0; k < 8 && k < fb.num_logits; k++) CHECK_MSG(fb.logits_indices[k] == want_rows[k], "row %d", k);
    CHECK(ib.num_reqs == 4 && ib.num_sampled == 2 && ib.num_prompt_lp_rows == 6);
    CHECK(!ib.sampled[0] && ib.sampled[1] && ib.sampled[2] && !ib.sampled[3]);
    CHECK(ib.lp_count[0] == 0 && ib.lp_count[1] == 0);
    CHECK(ib.lp_from[2] == 2 && ib.lp_count[2] == 3);
    CHECK(ib.lp_from[3] == 0 && ib.lp_count[3] == 3);

    /* the next step (A's last chunk, sampled; B's next decode) reuses the buffers */
    const int32_t *ids_before = fb.token_ids;
    b.num_computed = 7;
    b.tokens[b.num_tokens++] = 300;
    a.num_computed = 8;
    int32_t a2[2] = {9, 1};
    a.blocks[2] = a2[0];
    a.blocks[MB + 2] = a2[1];
    a.num_blocks = 3;
    request *reqs2[2] = {&b, &a};
    int ntok2[2] = {1, 2};
    sched_output so2 = {.num_reqs = 2, .reqs = reqs2, .num_tokens = ntok2, .total_tokens = 3};
    CHECK_OK(ib_build(&ib, &so2, &fb));
    CHECK(fb.token_ids == ids_before);
    CHECK(fb.num_tokens == 3 && fb.num_seqs == 2 && fb.num_logits == 2);
    CHECK(fb.token_ids[0] == 300 && fb.positions[0] == 7 && fb.token_ids[1] == 108 && fb.positions[2] == 9);
    CHECK(fb.slot_mapping[0] == 11 && fb.slot_mapping[3 + 0] == 35);      /* B pos 7: block 2 / block 8 */
    CHECK(fb.slot_mapping[2] == 37 && fb.slot_mapping[3 + 2] == 5);       /* A pos 9: block 9 / block 1 */
    CHECK(fb.logits_indices[0] == 0 && fb.logits_indices[1] == 2);
    CHECK(fb.block_tables[(0 * 2 + 1) * MB + 2] == 9 && fb.block_tables[(1 * 2 + 1) * MB + 2] == 1);
    CHECK(fb.block_tables[(1 * 2 + 0) * MB + 0] == 0 && fb.block_tables[(1 * 2 + 0) * MB + 1] == 8);

    /* a request whose blocks do not hold its tokens is an internal error, not a wild slot */
    a.num_blocks = 2;
    ntok2[1] = 2;
    CHECK(ib_build(&ib, &so2, &fb) == VLLM_ERR_INTERNAL);
    /* so is a step whose token counts do not add up */
    a.num_blocks = 3;
    so2.total_tokens = 4;
    CHECK(ib_build(&ib, &so2, &fb) == VLLM_ERR_INTERNAL);

    ib_destroy(&ib);
    TEST_END();
}
