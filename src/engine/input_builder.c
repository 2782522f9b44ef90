/*
 * input_builder.c: the flattened batch of a step from the scheduler's decisions (see input_builder.h).
 */
#include "engine/input_builder.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ib_init(input_builder *b, int num_groups, int block_size, int max_blocks_per_seq) {
    memset(b, 0, sizeof *b);
    b->num_groups = num_groups > 1 ? num_groups : 1;
    b->block_size = block_size;
    b->max_blocks_per_seq = max_blocks_per_seq;
}

void ib_destroy(input_builder *b) {
    free(b->ids);
    free(b->positions);
    free(b->slots);
    free(b->logits_idx);
    free(b->qsl);
    free(b->seq_lens);
    free(b->block_tables);
    free(b->state_slots);
    free(b->sampled);
    free(b->lp_from);
    free(b->lp_count);
    free(b->pool_from);
    free(b->pool_count);
    memset(b, 0, sizeof *b);
}

void ib_set_pooling(input_builder *b, vllm_pooling_type type) { b->pool = type; }

/* realloc that keeps *p on failure. */
static bool grow(void *pp, size_t n, size_t size) {
    void **p = pp;
    void *q = realloc(*p, (n ? n : 1) * size);
    if (!q) return false;
    *p = q;
    return true;
}

vllm_status ib_reserve(input_builder *b, int max_tokens, int max_seqs) {
    size_t G = (size_t)b->num_groups, mb = (size_t)b->max_blocks_per_seq;
    if (max_tokens > b->cap_tokens) {
        size_t T = (size_t)max_tokens;
        if (!grow(&b->ids, T, sizeof *b->ids) || !grow(&b->positions, T, sizeof *b->positions) ||
            !grow(&b->slots, G * T, sizeof *b->slots) || !grow(&b->logits_idx, T, sizeof *b->logits_idx))
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (step batch of %d tokens)", max_tokens);
        b->cap_tokens = max_tokens;
    }
    if (max_seqs > b->cap_seqs) {
        size_t S = (size_t)max_seqs;
        if (!grow(&b->qsl, S + 1, sizeof *b->qsl) || !grow(&b->seq_lens, S, sizeof *b->seq_lens) ||
            !grow(&b->block_tables, G * S * mb, sizeof *b->block_tables) ||
            !grow(&b->state_slots, S, sizeof *b->state_slots) ||
            !grow(&b->sampled, S, sizeof *b->sampled) || !grow(&b->lp_from, S, sizeof *b->lp_from) ||
            !grow(&b->lp_count, S, sizeof *b->lp_count) || !grow(&b->pool_from, S, sizeof *b->pool_from) ||
            !grow(&b->pool_count, S, sizeof *b->pool_count))
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (step batch of %d requests)", max_seqs);
        b->cap_seqs = max_seqs;
    }
    return VLLM_OK;
}

vllm_status ib_build(input_builder *b, const sched_output *so, fwd_batch *out) {
    memset(out, 0, sizeof *out);
    b->num_reqs = b->num_sampled = b->num_prompt_lp_rows = b->num_pool_rows = 0;
    int S = so->num_reqs, T = so->total_tokens;
    if (S <= 0 || T <= 0) return vt_error(VLLM_ERR_INTERNAL, "input builder: an empty step");
    if (T > b->cap_tokens || S > b->cap_seqs) { /* beyond the reserve: grow geometrically */
        int want_t = T > b->cap_tokens && T < 2 * b->cap_tokens ? 2 * b->cap_tokens : T;
        int want_s = S > b->cap_seqs && S < 2 * b->cap_seqs ? 2 * b->cap_seqs : S;
        vllm_status st = ib_reserve(b, want_t, want_s);
        if (st != VLLM_OK) return st;
    }
    int G = b->num_groups, bs = b->block_size, mb = b->max_blocks_per_seq;
    int t = 0, nl = 0;
    b->qsl[0] = 0;
    for (int i = 0; i < S; i++) {
        const request *r = so->reqs[i];
        int n = so->num_tokens[i], c0 = r->num_computed, c1 = c0 + n;
        if (n <= 0 || c1 > r->num_tokens || t + n > T || r->num_blocks > mb ||
            (long long)r->num_blocks * bs < c1)
            return vt_error(VLLM_ERR_INTERNAL, "input builder: request %zu scheduled inconsistently", r->index);
        /* the chunk's tokens: ids, positions, and each group's slot (its block, the offset in it) */
        for (int pos = c0; pos < c1; pos++, t++) {
            b->ids[t] = r->tokens[pos];
            b->positions[t] = pos;
            for (int g = 0; g < G; g++)
                b->slots[(size_t)g * T + (size_t)t] =
                    (int64_t)r->blocks[(size_t)g * mb + (size_t)(pos / bs)] * bs + pos % bs;
        }
        b->qsl[i + 1] = t;
        b->seq_lens[i] = c1;
        b->state_slots[i] = r->state_slot;
        /* each group's block table row, (G, S, mb) */
        for (int g = 0; g < G; g++) {
            int32_t *row = b->block_tables + ((size_t)g * S + (size_t)i) * (size_t)mb;
            memcpy(row, r->blocks + (size_t)g * mb, (size_t)r->num_blocks * sizeof *row);
            memset(row + r->num_blocks, 0, (size_t)(mb - r->num_blocks) * sizeof *row);
        }
        /* logits rows (vLLM's gpu_model_runner computes the logits of a chunk's prompt
         * positions for prompt logprobs): row q of the chunk gives log P(prompt[q + 1] |
         * prompt[<= q]); positions whose logprob is already known (computed before a
         * preemption) get none. Then the last row when the request is sampled. */
        if (b->pool) { /* the pooling runner (vLLM's pooling cursor): the rows the pooling reads */
            int pf = c0, pc = 0;
            if (b->pool == VLLM_POOLING_MEAN) pc = n;
            else if (b->pool == VLLM_POOLING_CLS) pc = c0 == 0;
            else if (c1 == r->num_prompt) pf = c1 - 1, pc = 1;
            for (int pos = pf; pos < pf + pc; pos++) b->logits_idx[nl++] = b->qsl[i] + (pos - c0);
            b->pool_from[i] = pf;
            b->pool_count[i] = pc;
            b->num_pool_rows += pc;
            b->lp_from[i] = c0;
            b->lp_count[i] = 0;
            b->sampled[i] = false;
            continue;
        }
        int from = c0, count = 0;
        if (r->params.prompt_logprobs >= 0) {
            if (r->prompt_lp_done - 1 > from) from = r->prompt_lp_done - 1;
            int to = c1 < r->num_prompt - 1 ? c1 : r->num_prompt - 1;
            count = to > from ? to - from : 0;
            for (int pos = from; pos < from + count; pos++) b->logits_idx[nl++] = b->qsl[i] + (pos - c0);
        }
        b->lp_from[i] = from;
        b->lp_count[i] = count;
        b->num_prompt_lp_rows += count;
        b->sampled[i] = c1 == r->num_tokens;
        if (b->sampled[i]) {
            b->logits_idx[nl++] = t - 1;
            b->num_sampled++;
        }
    }
    if (t != T) return vt_error(VLLM_ERR_INTERNAL, "input builder: %d tokens scheduled, %d counted", T, t);
    b->num_reqs = S;
    out->num_tokens = T;
    out->num_seqs = S;
    out->token_ids = b->ids;
    out->positions = b->positions;
    out->query_start_loc = b->qsl;
    out->seq_lens = b->seq_lens;
    out->num_kv_groups = G;
    out->block_tables = b->block_tables;
    out->max_blocks_per_seq = mb;
    out->slot_mapping = b->slots;
    out->state_slots = b->state_slots;
    out->num_logits = nl;
    out->logits_indices = b->logits_idx;
    out->hidden_out = b->pool != VLLM_POOLING_AUTO;
    return VLLM_OK;
}
