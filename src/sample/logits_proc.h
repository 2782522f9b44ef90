/*
 * logits_proc.h: the sampler's logits processing for one request's row of
 * logits, with vLLM v1 semantics: parameter validation, the logits
 * processors (allowed_token_ids, bad_words, min_tokens, logit_bias), the
 * penalties (repetition, frequency, presence), and the top-k logprobs
 * of the raw distribution (logprobs / prompt_logprobs).
 *
 * Order (vLLM v1 vllm/v1/sample/sampler.py, Sampler.apply_logits_processors
 * then Sampler.sample), which sampler_process_logits + sampler_sample follow:
 *   0. raw logprobs for `logprobs` are taken from the logits BEFORE any of
 *      this (logprobs_mode "raw_logprobs", the default): sampler_top_logprobs
 *      and sampler_logprob on the unmodified row.
 *   1. allowed_token_ids: every other token -> -inf
 *   2. bad_words (vllm/v1/sample/ops/bad_words.py)
 *   3. non-argmax-invariant logits processors, in BUILTIN_LOGITS_PROCESSORS
 *      order (vllm/v1/sample/logits_processor/__init__.py):
 *      a) min_tokens: EOS + stop_token_ids -> -inf while output < min_tokens
 *      b) logit_bias: logits[id] += bias
 *   4. penalties (vllm/model_executor/layers/utils.py apply_penalties):
 *      repetition (prompt + output), then frequency, then presence (output)
 *   --- sampler_sample (sampler.c) ---
 *   5. greedy (temperature 0): argmax of the row as it is now
 *   6. temperature, 7. min_p (argmax-invariant processor), 8. top-k, top-p.
 *
 * All functions work in place on one row, in O(V) or less, and allocate
 * nothing per call: the scratch is sized once per vocabulary.
 */
#ifndef VLLM_SAMPLE_LOGITS_PROC_H
#define VLLM_SAMPLE_LOGITS_PROC_H

#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

/* vLLM's default ModelConfig.max_logprobs: the most top logprobs a request
 * may ask for (logprobs and prompt_logprobs). */
#define SAMPLER_MAX_LOGPROBS 20
/* logit_bias values are clamped to [-100, 100] as vLLM's OpenAI server does
 * (vllm/entrypoints/openai/protocol.py, to_sampling_params). */
#define SAMPLER_MAX_LOGIT_BIAS 100.0f

/* Checks every field of p with vLLM's ranges (vllm/sampling_params.py
 * SamplingParams._verify_args, _verify_greedy_sampling, _validate_logprobs,
 * _validate_logit_bias, _validate_allowed_token_ids). Token ids are checked
 * against vocab_size when it is > 0 (skipped when 0). VLLM_ERR_INVALID_ARG
 * with a message naming the field. */
vllm_status sampler_validate(const vllm_sampling_params *p, int vocab_size);

/* Bad words, already tokenized by the engine: word w is
 * ids[offsets[w] .. offsets[w+1]), offsets has num + 1 entries, offsets[0] = 0.
 *
 * The engine builds it as vLLM's SamplingParams.update_from_tokenizer does:
 * for each bad word, encode(word.lstrip(), add_special_tokens=false), and
 * encode(" " + word.lstrip()) too, the latter kept only when its first token
 * differs from the first's and it has the same number of tokens (so the word
 * is banned both at the start of the text and after a space). Every id must
 * be in [0, vocab) (vLLM rejects the request otherwise, naming bad_words).
 * An empty sequence (num tokens 0) is ignored. */
typedef struct sampler_token_seqs {
    const int32_t *ids;
    const size_t *offsets;
    size_t num;
} sampler_token_seqs;

/* Per-vocabulary scratch (reused across calls and requests). */
typedef struct sampler_proc_scratch {
    int32_t *count;   /* (vocab) occurrences in the output, kept all zero between calls */
    uint8_t *mark;    /* (vocab) bit 0: in the prompt, bit 1: marked; kept zero between calls */
    int vocab;
} sampler_proc_scratch;

vllm_status sampler_proc_scratch_init(sampler_proc_scratch *s, int vocab);
void sampler_proc_scratch_free(sampler_proc_scratch *s);

/* What the processors need besides the params: the request's tokens and
 * the model's EOS ids. */
typedef struct sampler_context {
    const int32_t *prompt;          /* (n_prompt) prompt token ids */
    size_t n_prompt;
    const int32_t *output;          /* (n_output) generated token ids so far */
    size_t n_output;
    const int32_t *eos_ids;         /* (n_eos) the model's EOS ids (generation_config) */
    size_t n_eos;
    const sampler_token_seqs *bad_words; /* NULL = none */
    const uint32_t *mask;           /* structured outputs: ((vocab + 31) / 32) words, token t allowed where bit
                                       t % 32 of word t / 32 is set; NULL = every token */
} sampler_context;

/* 0. structured outputs' token mask: tokens whose bit is clear -> -inf, on the row itself BEFORE the raw
 * logprobs are taken (vLLM applies the grammar bitmask in the model runner, before its Sampler:
 * vllm/v1/worker/gpu_model_runner.py apply_grammar_bitmask, xgrammar's apply_token_bitmask_inplace), so
 * logprobs are those of the masked distribution. */
void sampler_apply_token_mask(float *logits, int vocab, const uint32_t *mask);

/* 1. allowed_token_ids: tokens not in the list -> -inf (vLLM's
 * allowed_token_ids_mask, vllm/v1/worker/gpu_input_batch.py). n == 0: no-op. */
void sampler_apply_allowed(float *logits, int vocab, const int32_t *allowed, size_t n, sampler_proc_scratch *s);

/* 2. bad_words: for each word, when its first len-1 tokens equal the last
 * len-1 tokens of output, its last token -> -inf; a one-token word is always
 * banned; a word longer than output + 1 is skipped
 * (vllm/v1/sample/ops/bad_words.py _apply_bad_words_single_batch). */
void sampler_apply_bad_words(float *logits, int vocab, const sampler_token_seqs *words, const int32_t *output,
                             size_t n_output);

/* 3a. min_tokens: while n_output < min_tokens, EOS ids and stop_ids -> -inf
 * (MinTokensLogitsProcessor: params.all_stop_token_ids = stop_token_ids + the
 * EOS ids, masked even with ignore_eos). */
void sampler_apply_min_tokens(float *logits, int vocab, int min_tokens, size_t n_output, const int32_t *eos_ids,
                              size_t n_eos, const int32_t *stop_ids, size_t n_stop);

/* 3b. logit_bias: logits[id] += clamp(bias, -100, 100); for a repeated id
 * the last value wins (a Python dict). Ids outside [0, vocab) are ignored
 * (sampler_validate rejects them). */
void sampler_apply_logit_bias(float *logits, int vocab, const int32_t *ids, const float *bias, size_t n,
                              sampler_proc_scratch *s);

/* 4. penalties, exactly as vLLM (float32):
 *   if token in prompt or output: logit *= logit > 0 ? 1/rp : rp
 *   logit -= frequency_penalty * count_in_output
 *   logit -= presence_penalty * (count_in_output > 0)
 * O(n_prompt + n_output); no-op when all three are off. */
void sampler_apply_penalties(float *logits, int vocab, const vllm_sampling_params *p, const int32_t *prompt,
                             size_t n_prompt, const int32_t *output, size_t n_output, sampler_proc_scratch *s);

/* Steps 1-4 in vLLM's order on one row. The caller keeps a copy of the raw
 * row first if it needs raw logprobs. Fails (VLLM_ERR_INTERNAL) only when the
 * scratch was not initialised for at least vocab tokens. The functions above
 * that take a scratch need the same (s->vocab >= vocab). */
vllm_status sampler_process_logits(float *logits, int vocab, const vllm_sampling_params *p, const sampler_context *ctx,
                                   sampler_proc_scratch *s);

/* The min(k, vocab) most probable tokens of log_softmax(raw_logits), by
 * logprob descending, ties by lower id; writes ids[] and lps[] and returns
 * the count. O(V * k), k <= SAMPLER_MAX_LOGPROBS in practice. */
int sampler_top_logprobs(const float *raw_logits, int vocab, int k, int32_t *ids, float *lps);

/* vLLM's rank of token: how many tokens have a logprob >= its own (1 = the
 * most probable) (vllm/v1/sample/ops/logprobs.py batched_count_greater_than). */
int sampler_token_rank(const float *raw_logits, int vocab, int32_t token);

#endif
