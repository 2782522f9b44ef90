/*
 * arch.h: what the architectures' config parsers (src/model/arch_*.c) share.
 */
#ifndef VLLM_MODEL_ARCH_H
#define VLLM_MODEL_ARCH_H

#include "model/model_internal.h"

struct json_t;

/* The MLP activation named by config.json's key (def when absent) into c->act, or a clear
 * error naming the key when it is not one of be_act's (silu, gelu_pytorch_tanh, gelu, relu). */
vllm_status arch_activation(const struct json_t *root, const char *what, const char *key, const char *def,
                            model_config *c);

/* A boolean config flag the implementation depends on: refused unless it has the value we run. */
vllm_status arch_require_bool(const struct json_t *root, const char *what, const char *key, bool def, bool want,
                              const char *why);

/* layer_types, when config.json gives it: "sliding_attention" (window c->sliding_window) or "full_attention"
 * for each of the layers, into c->layers[].sliding_window; *given says whether it was there. Other types
 * are refused by name. */
vllm_status arch_layer_types(const struct json_t *root, const char *what, model_config *c, bool *given);

/* The Qwen MoE families' weight names (arch_moe.c; Qwen3-Next and Qwen3.5-MoE share them). */
extern const weight_names arch_qwen_moe_names;

/* mlp_only_layers: a list of layer indices (absent or null: none) into dense[] (MODEL_MAX_LAYERS). */
vllm_status arch_mlp_only_layers(const struct json_t *root, const char *what, model_config *c, bool *dense);

/* num_experts, or num_local_experts (transformers 5 saves the latter); def when both are absent, an
 * error when they disagree. */
vllm_status arch_qwen_num_experts(const struct json_t *root, const char *what, int def, int *out);

#endif
