/*
 * hf_config.h: reads a Hugging Face model folder's config.json (and
 * generation_config.json) into a model_config.
 *
 * Accepts the transformers v4 spellings (torch_dtype, rope_theta +
 * rope_scaling) and the v5 ones (dtype, rope_parameters). Unknown
 * architectures are not rejected here: the model registry does that.
 *
 * Only the fields every transformers config shares are read here (no model
 * names): an architecture's defaults for absent keys and its own fields come
 * from its model_config_family (src/model/arch_*.c, through the registry),
 * which also fills the decoder's per-layer spec. Every value a supported
 * family depends on is honoured or refused with VLLM_ERR_UNSUPPORTED naming
 * the field and its value (rope types other than default / linear / llama3,
 * a partial_rotary_factor giving an odd rotary dimension, quantization_config
 * here; hidden_act, mlp_bias, use_sliding_window, ... in the families).
 * The files are read only when they are regular files (loader/regular_file.h).
 */
#ifndef VLLM_LOADER_HF_CONFIG_H
#define VLLM_LOADER_HF_CONFIG_H

#include <stdbool.h>

#include "vllm.h"
#include "model/config.h"

/* Parses dir/config.json into cfg (and dir/generation_config.json when present).
   A missing config.json is VLLM_ERR_IO "DIR/config.json: No such file or directory". */
vllm_status hf_config_load(const char *dir, model_config *cfg);

/* Typed getters for an architecture's own fields (src/model/arch_*.c): absent
 * and null give def; a wrong type or range is VLLM_ERR_FORMAT naming what and
 * key; *found (may be NULL) says whether the key had a value. */
const struct json_t *hf_get(const struct json_t *obj, const char *key);
bool hf_absent(const struct json_t *obj, const char *key); /* not there at all (null is there) */
vllm_status hf_int(const struct json_t *obj, const char *what, const char *key, bool required, int def, int min,
                   int *out, bool *found);
vllm_status hf_num(const struct json_t *obj, const char *what, const char *key, bool required, double def,
                   double min_excl, double *out, bool *found);
vllm_status hf_bool(const struct json_t *obj, const char *what, const char *key, bool def, bool *out);
vllm_status hf_str(const struct json_t *obj, const char *what, const char *key, const char **out);

/* Same from JSON text (for tests); gen_json may be NULL. `what` names the source in messages
   ("config.json"; generation_config messages say "generation_config.json"). */
vllm_status hf_config_parse(const char *config_json, const char *gen_json, const char *what, model_config *cfg);

#endif
