/*
 * sample.c: the reference of the batched sampling ops (sample.h), one row
 * at a time: NaN check, raw logprobs, logits processors and penalties, the
 * sampler; and the logprobs of given tokens (prompt logprobs).
 */
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

vllm_status sample_ws_init(sample_ws *ws, int vocab) {
    if (ws->vocab == vocab && ws->raw) return VLLM_OK;
    sample_ws_free(ws);
    vllm_status st = sampler_proc_scratch_init(&ws->proc, vocab);
    if (st != VLLM_OK) return st;
    ws->raw = malloc((size_t)vocab * sizeof *ws->raw);
    if (!ws->raw) {
        sample_ws_free(ws);
        return vt_error(VLLM_ERR_NO_MEMORY, "sampler: out of memory for a %d-token row", vocab);
    }
    ws->vocab = vocab;
    return VLLM_OK;
}

void sample_ws_free(sample_ws *ws) {
    sampler_scratch_free(&ws->scratch);
    sampler_proc_scratch_free(&ws->proc);
    free(ws->raw);
    ws->raw = NULL;
    ws->vocab = 0;
}

static bool row_has_nan(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (isnan(x[i])) return true;
    return false;
}

/* Fills the top-k list from the raw row; entries past the vocabulary get -1 / NaN. */
static void fill_top(const float *raw, int vocab, int k, int32_t *ids, float *lps) {
    int n = raw ? sampler_top_logprobs(raw, vocab, k, ids, lps) : 0;
    for (int j = n; j < k; j++) {
        ids[j] = -1;
        lps[j] = NAN;
    }
}

void sample_row_ref(float *logits, int vocab, const sample_batch *b, int i, sample_ws *ws) {
    const vllm_sampling_params *p = b->params[i];
    int k = b->top_ids && b->top_ids[i] ? p->logprobs : 0;
    int32_t t = SAMPLE_NAN_LOGITS;
    sampler_apply_token_mask(logits, vocab, b->ctx[i].mask);
    if (!row_has_nan(logits, vocab)) {
        /* raw logprobs are of the row before any processing (logprobs_mode raw_logprobs) */
        memcpy(ws->raw, logits, (size_t)vocab * sizeof *logits);
        if (sampler_process_logits(logits, vocab, p, &b->ctx[i], &ws->proc) != VLLM_OK) t = SAMPLE_FAILED;
        else if ((t = sampler_sample_u(logits, vocab, p, b->uniform[i], &ws->scratch)) < 0) t = SAMPLE_ALL_BANNED;
    }
    b->tokens[i] = t;
    bool ok = t >= 0;
    b->logprobs[i] = ok ? (float)sampler_logprob(ws->raw, vocab, t) : NAN;
    if (k > 0) fill_top(ok ? ws->raw : NULL, vocab, k, b->top_ids[i], b->top_lps[i]);
}

void logprob_row_ref(const float *logits, int vocab, const logprob_batch *b, int i) {
    bool ok = !row_has_nan(logits, vocab);
    int32_t t = b->targets[i];
    b->logprobs[i] = ok && t >= 0 && t < vocab ? (float)sampler_logprob(logits, vocab, t) : NAN;
    if (b->k[i] > 0 && b->top_ids && b->top_ids[i])
        fill_top(ok ? logits : NULL, vocab, b->k[i], b->top_ids[i], b->top_lps[i]);
}
