/*
 * responses_store.h: the Responses API's stored responses (previous_response_id, GET / DELETE
 * /v1/responses/{id}): an in-memory map id -> {response object JSON, the chat messages it answered}, bounded in
 * bytes, least recently used evicted first; thread-safe.
 *
 * vLLM keeps them in unbounded dicts (VLLM_ENABLE_RESPONSES_API_STORE, "This may cause a memory leak");
 * here the bound is --responses-store-bytes (an evicted or never-stored id is the same 404 as in vLLM).
 */
#ifndef VLLM_SERVER_RESPONSES_STORE_H
#define VLLM_SERVER_RESPONSES_STORE_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

typedef struct responses_store responses_store;

/* max_bytes: the most bytes of ids + JSON kept (> 0). NULL when out of memory. */
responses_store *responses_store_new(size_t max_bytes);
void responses_store_free(responses_store *s);
/* Stores copies (replacing an entry of the same id), evicting the least recently used entries past the bound;
 * an entry larger than the bound is not kept (VLLM_OK all the same: it is "evicted" at once). */
vllm_status responses_store_put(responses_store *s, const char *id, const char *response, const char *messages);
/* Copies (malloc'd) of the entry's parts, NULL for a part not wanted; false when the id is not stored (or out of
 * memory). Marks the entry recently used. */
bool responses_store_get(responses_store *s, const char *id, char **response, char **messages);
/* Removes the entry; false when the id is not stored. */
bool responses_store_delete(responses_store *s, const char *id);
/* Entries and bytes held now. */
void responses_store_stats(responses_store *s, size_t *entries, size_t *bytes);

#endif
