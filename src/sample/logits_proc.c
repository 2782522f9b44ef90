/*
 * logits_proc.c: validation of vllm_sampling_params and the logits
 * processors / penalties applied to one row before sampling, with vLLM v1
 * semantics (see logits_proc.h for the order and the vLLM sources).
 */
#include "sample/logits_proc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ------------------------------------------------------------------ */
/* Validation                                                          */
/* ------------------------------------------------------------------ */

#define BAD(...) vt_error(VLLM_ERR_INVALID_ARG, __VA_ARGS__)

static bool in_vocab(int32_t id, int vocab) { return id >= 0 && (vocab <= 0 || id < vocab); }

/* Messages follow vllm/sampling_params.py (_verify_args and friends). */
vllm_status sampler_validate(const vllm_sampling_params *p, int vocab) {
    if (!p) return BAD("sampling params: NULL");
    if (p->n < 1) return BAD("n must be at least 1, got %d.", p->n);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return BAD("presence_penalty must be in [-2, 2], got %g.", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return BAD("frequency_penalty must be in [-2, 2], got %g.", (double)p->frequency_penalty);
    if (!isfinite(p->repetition_penalty))
        return BAD("repetition_penalty must be a finite number, got %g.", (double)p->repetition_penalty);
    if (p->repetition_penalty <= 0.0f)
        return BAD("repetition_penalty must be greater than zero, got %g.", (double)p->repetition_penalty);
    if (!isfinite(p->temperature)) return BAD("temperature must be a finite number, got %g.", (double)p->temperature);
    if (p->temperature < 0.0f) return BAD("temperature must be non-negative, got %g.", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return BAD("top_p must be in (0, 1], got %g.", (double)p->top_p);
    if (p->top_k < -1) return BAD("top_k must be 0 (disable), or at least 1, got %d.", p->top_k);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return BAD("min_p must be in [0, 1], got %g.", (double)p->min_p);
    if (p->max_tokens < 1) return BAD("max_tokens must be at least 1, got %d.", p->max_tokens);
    if (p->min_tokens < 0) return BAD("min_tokens must be greater than or equal to 0, got %d.", p->min_tokens);
    if (p->min_tokens > p->max_tokens)
        return BAD("min_tokens must be less than or equal to max_tokens=%d, got %d.", p->max_tokens, p->min_tokens);
    /* our -1 means "none" (vLLM's None); vLLM's -1 (whole vocabulary) is not offered */
    if (p->logprobs < -1) return BAD("logprobs must be non-negative or -1 (none), got %d.", p->logprobs);
    if (p->logprobs > SAMPLER_MAX_LOGPROBS)
        return BAD("logprobs: requested sample logprobs of %d, which is greater than max allowed: %d", p->logprobs,
                   SAMPLER_MAX_LOGPROBS);
    if (p->prompt_logprobs < -1)
        return BAD("prompt_logprobs must be non-negative or -1 (none), got %d.", p->prompt_logprobs);
    if (p->prompt_logprobs > SAMPLER_MAX_LOGPROBS)
        return BAD("prompt_logprobs: requested prompt logprobs of %d, which is greater than max allowed: %d",
                   p->prompt_logprobs, SAMPLER_MAX_LOGPROBS);
    /* arrays: a count without its pointer is a caller bug, named as such */
    if (p->num_stop_token_ids && !p->stop_token_ids) return BAD("stop_token_ids is NULL with num_stop_token_ids > 0");
    for (size_t i = 0; i < p->num_stop_token_ids; i++)
        if (!in_vocab(p->stop_token_ids[i], vocab))
            return BAD("stop_token_ids[%zu] = %d is out of the vocabulary (size %d)", i, p->stop_token_ids[i], vocab);
    if (p->num_stop && !p->stop) return BAD("stop is NULL with num_stop > 0");
    for (size_t i = 0; i < p->num_stop; i++)
        if (!p->stop[i] || !p->stop[i][0]) return BAD("stop cannot contain an empty string (stop[%zu]).", i);
    if (p->num_bad_words && !p->bad_words) return BAD("bad_words is NULL with num_bad_words > 0");
    for (size_t i = 0; i < p->num_bad_words; i++)
        if (!p->bad_words[i] || !p->bad_words[i][0])
            return BAD("bad_words cannot contain an empty string (bad_words[%zu]).", i);
    if (p->num_logit_bias && (!p->logit_bias_ids || !p->logit_bias_values))
        return BAD("logit_bias: ids or values NULL with num_logit_bias > 0");
    for (size_t i = 0; i < p->num_logit_bias; i++) {
        if (!in_vocab(p->logit_bias_ids[i], vocab))
            return BAD("token_id(s) [%d] in logit_bias contain out-of-vocab token ids. Vocabulary size: %d",
                       p->logit_bias_ids[i], vocab);
        if (isnan(p->logit_bias_values[i]))
            return BAD("logit_bias value for token %d is NaN", p->logit_bias_ids[i]);
    }
    /* allowed_token_ids: NULL = all; a non-NULL empty list is an error as in vLLM */
    if (p->allowed_token_ids && p->num_allowed_token_ids == 0) return BAD("allowed_token_ids is not None and empty!");
    if (p->num_allowed_token_ids && !p->allowed_token_ids)
        return BAD("allowed_token_ids is NULL with num_allowed_token_ids > 0");
    for (size_t i = 0; i < p->num_allowed_token_ids; i++)
        if (!in_vocab(p->allowed_token_ids[i], vocab))
            return BAD("allowed_token_ids contains out-of-vocab token id %d (vocabulary size %d)!",
                       p->allowed_token_ids[i], vocab);
    /* greedy: vLLM's _verify_greedy_sampling */
    if (p->temperature == 0.0f && p->n > 1) return BAD("n must be 1 when using greedy sampling, got %d.", p->n);
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Scratch                                                             */
/* ------------------------------------------------------------------ */

enum { MARK_PROMPT = 1, MARK_SEEN = 2 };

vllm_status sampler_proc_scratch_init(sampler_proc_scratch *s, int vocab) {
    if (s->vocab == vocab && s->count && s->mark) return VLLM_OK;
    sampler_proc_scratch_free(s);
    if (vocab <= 0) return vt_error(VLLM_ERR_INVALID_ARG, "sampler: vocab size must be positive, got %d", vocab);
    s->count = calloc((size_t)vocab, sizeof *s->count);
    s->mark = calloc((size_t)vocab, sizeof *s->mark);
    if (!s->count || !s->mark) {
        sampler_proc_scratch_free(s);
        return vt_error(VLLM_ERR_NO_MEMORY, "sampler: out of memory for a %d-token scratch", vocab);
    }
    s->vocab = vocab;
    return VLLM_OK;
}

void sampler_proc_scratch_free(sampler_proc_scratch *s) {
    free(s->count);
    free(s->mark);
    s->count = NULL;
    s->mark = NULL;
    s->vocab = 0;
}

/* ------------------------------------------------------------------ */
/* Processors                                                          */
/* ------------------------------------------------------------------ */

void sampler_apply_allowed(float *logits, int vocab, const int32_t *allowed, size_t n, sampler_proc_scratch *s) {
    if (n == 0 || !allowed) return;
    uint8_t *mark = s->mark;
    for (size_t i = 0; i < n; i++)
        if (allowed[i] >= 0 && allowed[i] < vocab) mark[allowed[i]] |= MARK_SEEN;
    for (int v = 0; v < vocab; v++) {
        if (!(mark[v] & MARK_SEEN)) logits[v] = -INFINITY;
        mark[v] &= (uint8_t)~MARK_SEEN;
    }
}

void sampler_apply_bad_words(float *logits, int vocab, const sampler_token_seqs *words, const int32_t *output,
                             size_t n_output) {
    if (!words) return;
    for (size_t w = 0; w < words->num; w++) {
        const int32_t *word = words->ids + words->offsets[w];
        size_t len = words->offsets[w + 1] - words->offsets[w];
        if (len == 0 || len > n_output + 1) continue;
        size_t prefix = len - 1;
        if (prefix && memcmp(word, output + (n_output - prefix), prefix * sizeof *word) != 0) continue;
        int32_t last = word[prefix];
        if (last >= 0 && last < vocab) logits[last] = -INFINITY;
    }
}

void sampler_apply_min_tokens(float *logits, int vocab, int min_tokens, size_t n_output, const int32_t *eos_ids,
                              size_t n_eos, const int32_t *stop_ids, size_t n_stop) {
    if (min_tokens <= 0 || n_output >= (size_t)min_tokens) return;
    for (size_t i = 0; i < n_eos; i++)
        if (eos_ids[i] >= 0 && eos_ids[i] < vocab) logits[eos_ids[i]] = -INFINITY;
    for (size_t i = 0; i < n_stop; i++)
        if (stop_ids[i] >= 0 && stop_ids[i] < vocab) logits[stop_ids[i]] = -INFINITY;
}

void sampler_apply_logit_bias(float *logits, int vocab, const int32_t *ids, const float *bias, size_t n,
                              sampler_proc_scratch *s) {
    if (n == 0) return;
    uint8_t *mark = s->mark;
    /* from the end, so that the last value of a repeated id wins */
    for (size_t i = n; i-- > 0;) {
        int32_t t = ids[i];
        if (t < 0 || t >= vocab || (mark[t] & MARK_SEEN) || isnan(bias[i])) continue;
        mark[t] |= MARK_SEEN;
        float b = bias[i];
        if (b > SAMPLER_MAX_LOGIT_BIAS) b = SAMPLER_MAX_LOGIT_BIAS;
        if (b < -SAMPLER_MAX_LOGIT_BIAS) b = -SAMPLER_MAX_LOGIT_BIAS;
        logits[t] += b;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vocab) mark[ids[i]] &= (uint8_t)~MARK_SEEN;
}

/* One token's penalties, in vLLM's order: repetition, frequency, presence. */
static void penalize(float *logit, bool repeated, int32_t count, float rp, float fp, float pp) {
    float l = *logit;
    if (repeated) l *= l > 0.0f ? 1.0f / rp : rp; /* apply_repetition_penalties_torch: logits *= scaling */
    l -= fp * (float)count;
    l -= pp * (count > 0 ? 1.0f : 0.0f);
    *logit = l;
}

void sampler_apply_penalties(float *logits, int vocab, const vllm_sampling_params *p, const int32_t *prompt,
                             size_t n_prompt, const int32_t *output, size_t n_output, sampler_proc_scratch *s) {
    float rp = p->repetition_penalty, fp = p->frequency_penalty, pp = p->presence_penalty;
    if (rp == 1.0f && fp == 0.0f && pp == 0.0f) return; /* vLLM's no_penalties */
    int32_t *count = s->count;
    uint8_t *mark = s->mark;
    /* bin counts of the output, prompt mask (get_token_bin_counts_and_mask) */
    for (size_t i = 0; i < n_output; i++)
        if (output[i] >= 0 && output[i] < vocab) count[output[i]]++;
    if (rp != 1.0f)
        for (size_t i = 0; i < n_prompt; i++)
            if (prompt[i] >= 0 && prompt[i] < vocab) mark[prompt[i]] |= MARK_PROMPT;
    /* every token with count > 0 or in the prompt, once (MARK_SEEN), then reset */
    for (size_t i = 0; i < n_output; i++) {
        int32_t t = output[i];
        if (t < 0 || t >= vocab || (mark[t] & MARK_SEEN)) continue;
        mark[t] |= MARK_SEEN;
        penalize(&logits[t], true, count[t], rp, fp, pp);
    }
    if (rp != 1.0f)
        for (size_t i = 0; i < n_prompt; i++) {
            int32_t t = prompt[i];
            if (t < 0 || t >= vocab || (mark[t] & MARK_SEEN)) continue;
            mark[t] |= MARK_SEEN;
            penalize(&logits[t], true, 0, rp, fp, pp);
        }
    for (size_t i = 0; i < n_output; i++)
        if (output[i] >= 0 && output[i] < vocab) {
            count[output[i]] = 0;
            mark[output[i]] = 0;
        }
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] >= 0 && prompt[i] < vocab) mark[prompt[i]] = 0;
}

vllm_status sampler_process_logits(float *logits, int vocab, const vllm_sampling_params *p, const sampler_context *c,
                                   sampler_proc_scratch *s) {
    if (s->vocab < vocab || !s->count || !s->mark)
        return vt_error(VLLM_ERR_INTERNAL, "sampler: scratch holds %d tokens, the row %d (call sampler_proc_scratch_init)",
                        s->vocab, vocab);
    /* 1. allowed_token_ids (Sampler.apply_logits_processors) */
    if (p->allowed_token_ids) sampler_apply_allowed(logits, vocab, p->allowed_token_ids, p->num_allowed_token_ids, s);
    /* 2. bad words (vllm/v1/sample/ops/bad_words.py; past tokens = output only) */
    if (c->bad_words) sampler_apply_bad_words(logits, vocab, c->bad_words, c->output, c->n_output);
    /* 3a. MinTokensLogitsProcessor, 3b. LogitBiasLogitsProcessor */
    sampler_apply_min_tokens(logits, vocab, p->min_tokens, c->n_output, c->eos_ids, c->n_eos, p->stop_token_ids,
                             p->num_stop_token_ids);
    sampler_apply_logit_bias(logits, vocab, p->logit_bias_ids, p->logit_bias_values, p->num_logit_bias, s);
    /* 4. penalties (apply_all_penalties) */
    sampler_apply_penalties(logits, vocab, p, c->prompt, c->n_prompt, c->output, c->n_output, s);
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Logprobs                                                            */
/* ------------------------------------------------------------------ */

/* log(sum(exp(x))) of the row, in double */
static double logsumexp(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) return -INFINITY;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    return (double)mx + log(sum);
}

int sampler_top_logprobs(const float *raw, int vocab, int k, int32_t *ids, float *lps) {
    if (k > vocab) k = vocab;
    if (k <= 0) return 0;
    /* insertion into a k-long list sorted by logit descending; a later id
     * enters only when strictly greater, so ties keep the lower id first */
    int n = 0;
    for (int v = 0; v < vocab; v++) {
        float x = raw[v];
        if (n == k && !(x > lps[n - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && x > lps[j - 1]) {
            lps[j] = lps[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        lps[j] = x;
        ids[j] = v;
    }
    double lse = logsumexp(raw, vocab);
    for (int i = 0; i < n; i++) lps[i] = (float)((double)lps[i] - lse);
    return n;
}

int sampler_token_rank(const float *raw, int vocab, int32_t token) {
    if (token < 0 || token >= vocab) return 0;
    float x = raw[token];
    int rank = 0;
    for (int v = 0; v < vocab; v++) rank += raw[v] >= x;
    return rank;
}

void sampler_apply_token_mask(float *logits, int vocab, const uint32_t *mask) {
    if (!mask) return;
    for (int w = 0; w < (vocab + 31) / 32; w++) {
        const uint32_t m = mask[w];
        if (m == 0xFFFFFFFFu) continue;
        const int end = w * 32 + 32 < vocab ? w * 32 + 32 : vocab;
        for (int t = w * 32; t < end; t++)
            if (!(m >> (t & 31) & 1u)) logits[t] = -INFINITY;
    }
}
