/*
 * hf_config.h: reads a Hugging Face model folder's config.json (and
 * generation_config.json) into a model_config.
 *
 * Accepts the transformers v4 spellings (torch_dtype, rope_theta +
 * rope_scaling) and the v5 ones (dtype, rope_parameters). Unknown
 * architectures are not rejected here: the model registry does that.
 *
 * Every value a supported family (Llama, Mistral, Qwen2, Qwen3) depends on is
 * honoured, with transformers' per-family defaults for absent keys, or
 * refused with VLLM_ERR_UNSUPPORTED naming the field and its value:
 * hidden_act other than silu / swish, mlp_bias (Llama), use_sliding_window
 * (Qwen), rope types other than default / linear / llama3, a
 * partial_rotary_factor giving an odd rotary dimension, quantization_config.
 * The files are read only when they are regular files (loader/regular_file.h).
 */
#ifndef VLLM_LOADER_HF_CONFIG_H
#define VLLM_LOADER_HF_CONFIG_H

#include "vllm.h"
#include "model/config.h"

/* Parses dir/config.json into cfg (and dir/generation_config.json when present).
   A missing config.json is VLLM_ERR_IO "DIR/config.json: No such file or directory". */
vllm_status hf_config_load(const char *dir, model_config *cfg);

/* Same from JSON text (for tests); gen_json may be NULL. `what` names the source in messages
   ("config.json"; generation_config messages say "generation_config.json"). */
vllm_status hf_config_parse(const char *config_json, const char *gen_json, const char *what, model_config *cfg);

#endif
