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
 * bos_token, eos_token (string or {"content": ...} object), clean_up_tokenization_spaces).
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
 * HF does; ids out of range -> VLLM_ERR_INVALID_ARG. When tokenizer_config.json sets
 * clean_up_tokenization_spaces, transformers' clean_up_tokenization follows (" ." -> ".",
 * " n't" -> "n't", ...), as PreTrainedTokenizerFast.decode. */
vllm_status tok_decode(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                       char **text);
/* Same, also giving the byte length (the text may hold U+0000, from a byte token, which ends
 * the C string early); len may be NULL. */
vllm_status tok_decode_len(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                           char **text, size_t *len);
/* Same with the clean-up forced on or off whatever the config says. cleanup=false is what vLLM's
 * incremental detokenizer yields (it never cleans up), so a completion's text built from
 * decodes, as the streamed one, should use it. */
vllm_status tok_decode_ex(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, bool cleanup,
                          char **text, size_t *len);

int tok_vocab_size(const tokenizer *tok);            /* model vocab + added tokens (max id + 1) */
int tok_bos_id(const tokenizer *tok);                /* -1 when none */
int tok_eos_id(const tokenizer *tok);                /* -1 when none */
bool tok_is_special(const tokenizer *tok, int32_t id);
const char *tok_id_to_piece(const tokenizer *tok, int32_t id);   /* raw vocab string, NULL if out of range */
int32_t tok_piece_to_id(const tokenizer *tok, const char *piece); /* -1 if absent */

/* How the vocabulary's strings map to bytes, read from the decoder chain (token_bytes.c): a ByteLevel decoder
 * (GPT-2, Llama 3, Qwen), a ByteFallback one (SentencePiece: Llama 2, Mistral, Gemma), or neither (raw). */
typedef enum tok_vocab_type { TOK_VOCAB_RAW, TOK_VOCAB_BYTE_LEVEL, TOK_VOCAB_BYTE_FALLBACK } tok_vocab_type;
tok_vocab_type tok_vocab_kind(const tokenizer *tok);
/* Token id's bytes as a grammar matches them (xgrammar's decoded vocab, which vLLM's structured outputs use):
 * byte-level pieces mapped back to their bytes, <0xHH> a byte and U+2581 a space, else the piece; buf needs
 * room for strlen(tok_id_to_piece(tok, id)) bytes (never more are written). VLLM_ERR_INVALID_ARG for an id out
 * of range. */
vllm_status tok_token_bytes(const tokenizer *tok, int32_t id, uint8_t *buf, size_t *len);

/* ------------------------------------------------------------------ */
/* Incremental detokenization for streaming (vLLM's detokenize_incrementally: a prefix offset
 * and a read offset over the request's token list). Each push decodes only a short window
 * tokens[prefix_offset:], so a push costs O(1) in the length of the request. Text that ends in
 * U+FFFD (a possibly unfinished UTF-8 sequence) is held back until later tokens complete it or
 * tok_stream_finish flushes it. Every piece is valid UTF-8; their concatenation is the full
 * decode's continuation of the prompt, decode(prompt + generated) minus decode(prompt),
 * whenever that is well defined (it is not when, e.g., an invalid byte makes HF's ByteFallback
 * decoder rewrite already streamed text as U+FFFD). The stream never applies
 * clean_up_tokenization_spaces: vLLM's incremental detokenizer does not either
 * (convert_tokens_to_string / tokenizers' DecodeStream), so its continuation is that of the
 * decode without the clean-up. A tok_stream borrows the tokenizer. */
/* ------------------------------------------------------------------ */
typedef struct tok_stream tok_stream;

/* prompt: the request's prompt ids (its last few set the initial offsets; may be NULL when
 * n_prompt is 0). skip_special: drop special tokens, as tok_decode. */
vllm_status tok_stream_create(const tokenizer *tok, const int32_t *prompt, size_t n_prompt, bool skip_special,
                              tok_stream **out);
/* Appends one generated id; *piece receives the newly completed text (malloc'd, NUL-terminated,
 * possibly ""), *len (optional, may be NULL) its byte length, which counts any U+0000 in it.
 * Ids outside the vocabulary add no text (as vLLM). */
vllm_status tok_stream_push(tok_stream *s, int32_t id, char **piece, size_t *len);
/* Flushes what is still held back at the end (an unfinished byte sequence -> U+FFFD, as the
 * full decode gives); *piece malloc'd, possibly "". Pushing after finish starts from there. */
vllm_status tok_stream_finish(tok_stream *s, char **piece, size_t *len);
void tok_stream_free(tok_stream *s);

/* ------------------------------------------------------------------ */
/* GGUF vocabularies (gguf_vocab.c)                                    */
/* ------------------------------------------------------------------ */
struct gguf_file;

/* Builds the tokenizer of a GGUF file (loader/gguf.h) from its tokenizer.ggml.* metadata, tokenizing
 * as llama.cpp does: "gpt2" byte-level BPE with the tokenizer.ggml.pre pre-tokenizer, "llama"
 * SentencePiece BPE (merges from the scores, add_space_prefix, byte fallback); control / unknown
 * tokens special, user-defined ones added; bos / eos ids and add_bos_token / add_eos_token from the
 * metadata with llama.cpp's defaults (tok_bos_id, tok_encode's add_special). VLLM_ERR_UNSUPPORTED
 * names a tokenizer.ggml.model or tokenizer.ggml.pre it cannot run (bert, t5, ...), VLLM_ERR_FORMAT a
 * malformed vocabulary. The tokenizer does not borrow f. */
vllm_status tok_load_gguf(const struct gguf_file *f, tokenizer **out);
/* The GGUF file's chat template (tokenizer.chat_template; NULL when absent) and its bos / eos token
 * strings (NULL when none), all malloc'd: what ct_load_dir gives for a folder. */
vllm_status tok_gguf_chat_template(const struct gguf_file *f, char **template_src, char **bos_token,
                                   char **eos_token);

#endif
