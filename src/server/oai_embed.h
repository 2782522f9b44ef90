/*
 * oai_embed.h: the OpenAI / vLLM embeddings protocol (POST /v1/embeddings),
 * without HTTP or threads: the request body into token-id prompts and
 * vllm_pooling_params, and the embedding list back as JSON (floats, or base64
 * of their float32 bytes).
 *
 * vLLM: vllm/entrypoints/openai/serving_embedding.py and
 * entrypoints/pooling/embed/ (EmbeddingCompletionRequest: input a string, a
 * list of strings, a list of token ids or a list of lists of ids;
 * encoding_format float / base64; dimensions; user; truncate_prompt_tokens;
 * add_special_tokens; normalize / use_activation; embed_dtype float32;
 * endianness), pooling_params.py (the Matryoshka checks), serving_engine.py
 * (the embedding length check) and EmbeddingResponse (id "embd-...", object
 * "list", data [{"index", "object": "embedding", "embedding"}], usage).
 */
#ifndef VLLM_SERVER_OAI_EMBED_H
#define VLLM_SERVER_OAI_EMBED_H

#include <stdbool.h>
#include <stddef.h>

#include "server/oai_protocol.h"
#include "vllm.h"

/* The most inputs one request may hold (OpenAI's limit). */
#define OAI_MAX_EMBED_INPUTS 2048

typedef struct oai_embed_request {
    char *model;                  /* as sent (NULL when absent) */
    vllm_prompt *prompts;         /* (num_prompts) token ids (owned) */
    size_t num_prompts;
    vllm_pooling_params params;   /* dimensions (0: the whole embedding), normalize */
    bool base64;                  /* encoding_format "base64": float32 bytes, base64 */
    bool big_endian;              /* endianness "big" (native and little: little-endian here) */
    char *request_id;             /* the body's request_id, else NULL: the id is "embd-<request_id>" */
} oai_embed_request;

/* Parses and validates a /v1/embeddings body against the engine (info: a
 * pooling engine's embedding size and Matryoshka support): model name,
 * inputs tokenized (special tokens unless add_special_tokens is false),
 * truncate_prompt_tokens applied, each input at most max_model_len tokens
 * (400 as vLLM), dimensions checked (400 as vLLM's PoolingParams), and the
 * reply's size within ctx->max_response_entries (inputs x embedding size).
 * VLLM_OK and *out, or an error status with err filled and *out NULL. */
vllm_status oai_parse_embedding(const oai_server_ctx *ctx, const vllm_engine_info *info, const char *body, size_t len,
                                oai_embed_request **out, oai_error *err);
void oai_embed_request_free(oai_embed_request *r);

/* The response id: "embd-" + the body's request_id, else + 32 random hex digits (malloc'd). */
char *oai_embed_response_id(const oai_embed_request *req);

/* The EmbeddingResponse JSON: embeddings[i] (dims[i] floats) of prompt i, usage from the prompts' lengths
 * (prompt_tokens = total_tokens, completion_tokens 0). malloc'd, NULL when out of memory. */
char *oai_embed_response(const oai_server_ctx *ctx, const oai_embed_request *req, const char *id, long long created,
                         const float *const *embeddings, const size_t *dims, size_t *len);

/* Standard base64 (RFC 4648, padded) of n bytes; malloc'd NUL-terminated, NULL when out of memory. */
char *oai_base64(const unsigned char *data, size_t n);

#endif
