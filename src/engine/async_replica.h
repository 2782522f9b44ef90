/*
 * async_replica.h: one engine replica of the thread-safe front (async_replica.c): an engine thread that
 * owns a vllm_engine and steps it while there is work, its add queue, its live requests' streams. The
 * public vllm_async_* API (async_front.c) runs one replica, or data_parallel_size of them with requests
 * balanced by load. Every call is thread-safe except replica_free.
 */
#ifndef VLLM_ENGINE_ASYNC_REPLICA_H
#define VLLM_ENGINE_ASYNC_REPLICA_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

typedef struct ae_replica ae_replica;

/* Called on the replica's engine thread when a request that replica_add_* accepted stops being live (it
 * finished, failed or was aborted): the front's id registry lets the id go. */
typedef void (*replica_release_fn)(void *ctx, const char *request_id);

/* The replica's engine (vllm_engine_create's, on GPU ordinal device_id) and its thread; index names it in
 * the streams it makes (vllm_stream_engine). release may be NULL. */
vllm_status replica_create(const char *model_dir, const vllm_engine_options *options, int device_id, int index,
                           replica_release_fn release, void *release_ctx, ae_replica **out);
/* Stops the engine thread (queued and later adds refused) and waits for the callers inside replica_add_*;
 * the replica stays readable until replica_free (which stops it first if need be). */
void replica_stop(ae_replica *r);
void replica_free(ae_replica *r);
vllm_sampling_params replica_default_sampling(const ae_replica *r);
bool replica_has_tokenizer(const ae_replica *r);
void replica_get_info(const ae_replica *r, vllm_engine_info *out);
void replica_get_stats(ae_replica *r, vllm_engine_stats *out);
vllm_status replica_check_health(const ae_replica *r);
/* Requests it holds: live ones plus adds queued for its thread (the front's load measure). */
size_t replica_load(ae_replica *r);
vllm_status replica_tokenize(ae_replica *r, const char *text, bool add_special_tokens, int32_t **ids, size_t *n);
vllm_status replica_detokenize(ae_replica *r, const int32_t *ids, size_t n, bool skip_special, char **text);
vllm_status replica_add_request(ae_replica *r, const char *request_id, const vllm_prompt *prompt,
                                const vllm_sampling_params *params, vllm_stream **out);
vllm_status replica_add_pooling_request(ae_replica *r, const char *request_id, const vllm_prompt *prompt,
                                        const vllm_pooling_params *params, vllm_stream **out);
/* VLLM_ERR_NOT_FOUND (without recording an error) when no live request has this id. */
vllm_status replica_abort(ae_replica *r, const char *request_id);
/* test hooks (async_engine.h) */
void replica_fail_next_step(ae_replica *r);
void replica_pause(ae_replica *r, bool paused);
void replica_pause_after(ae_replica *r, int steps);
size_t replica_steps(ae_replica *r);

#endif
