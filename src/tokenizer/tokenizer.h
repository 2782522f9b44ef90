/*
 * tokenizer.h: Hugging Face tokenizer.json tokenizers (prefix tok_).
 *
 * Encoding follows the HF `tokenizers` pipeline:
 *   added-token split -> normalizer -> pre-tokenizer -> model (BPE) -> post-processor
 * and decoding runs the decoder chain over the tokens' strings.
 * A tokenizer is immutable once loaded: encode/decode may run on many threads at once.
 */
#ifndef VLLM_TOKENIZER_TOKENIZER_H
#define VLLM_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

typedef struct tokenizer tokenizer;

/* Loads dir/tokenizer.json (+ dir/tokenizer_config.json when present: add_bos_token, add_eos_token,
 * bos_token, eos_token (string or {"content": ...} object)).
 * VLLM_ERR_NOT_FOUND when dir has no tokenizer.json. */
vllm_status tok_load_dir(const char *dir, tokenizer **out);
/* Same from JSON text in memory; config_json may be NULL (no tokenizer_config.json). */
vllm_status tok_load_json(const char *json, size_t len, const char *config_json, size_t config_len,
                          tokenizer **out);
void tok_free(tokenizer *tok);

/* ids malloc'd (never NULL on success, even when *n is 0); add_special: apply the post-processor
 * / add_bos_token. Invalid UTF-8 input -> VLLM_ERR_INVALID_ARG. */
vllm_status tok_encode(const tokenizer *tok, const char *text, size_t len, bool add_special,
                       int32_t **ids, size_t *n);
/* text malloc'd, NUL-terminated; invalid UTF-8 produced by byte tokens is replaced by U+FFFD as
 * HF does; ids out of range -> VLLM_ERR_INVALID_ARG. */
vllm_status tok_decode(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                       char **text);

int tok_vocab_size(const tokenizer *tok);            /* model vocab + added tokens (max id + 1) */
int tok_bos_id(const tokenizer *tok);                /* -1 when none */
int tok_eos_id(const tokenizer *tok);                /* -1 when none */
bool tok_is_special(const tokenizer *tok, int32_t id);
const char *tok_id_to_piece(const tokenizer *tok, int32_t id);   /* raw vocab string, NULL if out of range */
int32_t tok_piece_to_id(const tokenizer *tok, const char *piece); /* -1 if absent */

#endif
