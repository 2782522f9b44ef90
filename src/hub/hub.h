/*
 * hub.h: Hugging Face model ids wherever a model folder is accepted. An id ("org/name", "name",
 * "org/name:QUANT" for one GGUF file of the repository, as `llama-cli -hf`) is resolved from the local
 * hub cache in huggingface_hub's layout (hf_cache.h); files that are missing are downloaded into it from
 * $HF_ENDPOINT (default https://huggingface.co) with $HF_TOKEN, 8 at a time, resumed after an
 * interruption, their size and LFS sha256 verified. HF_HUB_OFFLINE=1 never touches the network.
 */
#ifndef VLLM_HUB_HUB_H
#define VLLM_HUB_HUB_H

#include <stdbool.h>

#include "vllm.h"

typedef struct hub_options {
    const char *revision;  /* branch, tag or commit (NULL: "main") */
    bool tokenizer_only;   /* the tokenizer files alone (a --tokenizer id) */
    bool no_weights;       /* config and tokenizer, no weights (--load-format dummy) */
} hub_options;

/* True when s names no existing file or folder and reads as a model id (then hub_resolve applies). */
bool hub_is_model_id(const char *s);

/* The local path of a model id: the snapshot folder, or the GGUF file of "org/name:QUANT" (malloc'd). */
vllm_status hub_resolve(const char *spec, const hub_options *o, char **out_path);

#endif
