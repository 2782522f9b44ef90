/*
 * pooling_config.h: what a model folder says about pooling it for embeddings
 * (the pooling runner): the sentence-transformers modules (modules.json, the
 * Pooling module's config.json, a Normalize module) and config.json's
 * Matryoshka keys.
 *
 * vLLM: vllm/transformers_utils/config.py get_pooling_config /
 * parse_pooling_type (the Pooling module's keys set to true, "pooling_mode_"
 * dropped, cut at the first "_", "lasttoken" -> LAST, upper-cased: CLS,
 * LAST, MEAN; others ignored; a later key wins; use_activation = a Normalize
 * module is listed; no Pooling module: no config at all) and
 * vllm/config/model.py is_matryoshka / matryoshka_dimensions.
 */
#ifndef VLLM_LOADER_POOLING_CONFIG_H
#define VLLM_LOADER_POOLING_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

#define POOLING_MAX_MATRYOSHKA 64

typedef struct pooling_config {
    bool found;               /* modules.json lists a sentence_transformers.models.Pooling module */
    vllm_pooling_type type;   /* the sequence pooling it names (VLLM_POOLING_AUTO: none of CLS / LAST / MEAN) */
    bool normalize;           /* found: modules.json lists a sentence_transformers.models.Normalize module */
    bool is_matryoshka;       /* config.json is_matryoshka true, or a non-empty matryoshka_dimensions */
    int matryoshka_dims[POOLING_MAX_MATRYOSHKA]; /* config.json matryoshka_dimensions (positive ints) */
    size_t num_matryoshka_dims;                 /* 0: any dimensions */
    char architecture[128];   /* config.json architectures[0] ("" when absent or too long) */
} pooling_config;

/* Reads dir/modules.json (absent: found false), the Pooling module's
 * dir/<path>/config.json (absent: no type) and dir/config.json's
 * is_matryoshka / matryoshka_dimensions and architectures[0] (what the runner
 * is chosen by, before the model loads). A malformed modules.json or Pooling
 * config, or Matryoshka keys of the wrong type, are VLLM_ERR_FORMAT naming the
 * file; a config.json that cannot be read or parsed is left to the config
 * reader (hf_config.h) to report. A GGUF file (dir not a folder) has none. */
vllm_status pooling_config_load(const char *dir, pooling_config *out);

/* The same from JSON texts (for tests): modules_json and pooling_json may be
 * NULL (absent files), config_json too. */
vllm_status pooling_config_parse(const char *modules_json, const char *pooling_json, const char *config_json,
                                 pooling_config *out);

/* vLLM's parse_pooling_type on one Pooling-config key set to true: the pooling
 * type it names (CLS, LAST, MEAN), else VLLM_POOLING_AUTO. */
vllm_pooling_type pooling_type_of_key(const char *key);

#endif
