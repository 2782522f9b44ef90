/*
 * arch_llama.c: the Llama family's config.json: LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM. Their defaults for
 * absent keys and the fields each one honours or refuses; the decoder that
 * runs them is decoder.c.
 *
 * transformers' modeling files:
 * - LlamaAttention: q/k/v/o biases = attention_bias; LlamaMLP: gate/up/down biases = mlp_bias
 *   (not implemented: refused). pretraining_tp > 1 only sliced the same matmuls into
 *   pretraining_tp pieces (concatenated or summed: the same product), so it is ignored.
 * - MistralAttention / MistralMLP: no biases (attention_bias and mlp_bias are not read);
 *   sliding_window on every layer (layer_types is not read by MistralForCausalLM).
 * - Qwen2Attention: q/k/v biases always, o_proj none; Qwen3Attention: q/k/v/o = attention_bias,
 *   per-head q/k RMSNorm.
 * - Qwen2 / Qwen3: use_sliding_window (sliding_window on layers >= max_window_layers) is refused.
 * - hidden_act: every family runs ACT2FN[hidden_act] in its gated MLP; vLLM's LlamaMLP raises
 *   "Unsupported activation" for anything but silu, and so do we.
 */
#include <jansson.h>
#include <string.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/model_internal.h"

/* hidden_act: "silu" or its alias "swish" (both SiLUActivation in ACT2FN). */
static vllm_status llama_activation(const json_t *root, const char *what) {
    const char *act;
    vllm_status st = hf_str(root, what, "hidden_act", &act);
    if (st) return st;
    if (!act || !strcmp(act, "silu") || !strcmp(act, "swish")) return VLLM_OK; /* absent: "silu" (all four) */
    return vt_error(VLLM_ERR_UNSUPPORTED, "%s: hidden_act '%.64s' is not supported (only silu is implemented)", what,
                    act);
}

/* layer_types (Qwen2Config / Qwen3Config): one "full_attention" or "sliding_attention" per layer,
 * as transformers' layer_type_validation demands. A sliding layer only has a window when
 * use_sliding_window is set (the config then keeps sliding_window, else sets it to None), and
 * use_sliding_window is refused, so every layer here attends to the whole context. */
static vllm_status qwen_layer_types(const json_t *root, const char *what, int num_layers) {
    const json_t *lt = hf_get(root, "layer_types");
    if (!lt) return VLLM_OK;
    if (!json_is_array(lt)) return vt_error(VLLM_ERR_FORMAT, "%s: layer_types must be a list of strings", what);
    if (json_array_size(lt) != (size_t)num_layers)
        return vt_error(VLLM_ERR_FORMAT, "%s: layer_types has %zu entries for %d layers (num_hidden_layers)", what,
                        json_array_size(lt), num_layers);
    for (size_t i = 0; i < json_array_size(lt); i++) {
        const json_t *v = json_array_get(lt, i);
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (!s || (strcmp(s, "full_attention") && strcmp(s, "sliding_attention")))
            return vt_error(VLLM_ERR_UNSUPPORTED,
                            "%s: layer_types[%zu] '%.64s' is not supported (full_attention, sliding_attention)", what,
                            i, s ? s : "(not a string)");
    }
    return VLLM_OK;
}

static vllm_status parse_llama(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    bool mlp_bias;
    if ((st = llama_activation(root, what)) || (st = hf_bool(root, what, "mlp_bias", false, &mlp_bias))) return st;
    if (mlp_bias) return vt_error(VLLM_ERR_UNSUPPORTED, "%s: mlp_bias true is not supported (MLP biases)", what);
    c->o_bias = c->attention_bias;
    return VLLM_OK;
}

static vllm_status parse_mistral(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = llama_activation(root, what))) return st;
    c->attention_bias = false;
    /* MistralConfig: sliding_window 4096 when the key is absent, None (off) when null */
    if ((st = hf_int(root, what, "sliding_window", false, hf_absent(root, "sliding_window") ? 4096 : 0, 0,
                     &c->sliding_window, NULL)))
        return st;
    for (int l = 0; l < c->num_layers; l++) c->layers[l].sliding_window = c->sliding_window;
    return VLLM_OK;
}

static vllm_status parse_qwen(const json_t *root, const char *what, model_config *c, bool qwen3) {
    vllm_status st;
    bool use_sw;
    if ((st = llama_activation(root, what)) || (st = hf_bool(root, what, "use_sliding_window", false, &use_sw)))
        return st;
    if (use_sw) return vt_error(VLLM_ERR_UNSUPPORTED, "%s: use_sliding_window is not supported yet", what);
    if ((st = qwen_layer_types(root, what, c->num_layers))) return st;
    if (qwen3) {
        c->qk_norm = true;
        c->o_bias = c->attention_bias;
    } else {
        c->attention_bias = true; /* Qwen2Attention: q/k/v biases whatever the config says */
        c->o_bias = false;
    }
    return VLLM_OK;
}
static vllm_status parse_qwen2(const json_t *root, const char *what, model_config *c) {
    return parse_qwen(root, what, c, false);
}
static vllm_status parse_qwen3(const json_t *root, const char *what, model_config *c) {
    return parse_qwen(root, what, c, true);
}

/* Defaults of the config classes for absent keys:
 * LlamaConfig: max_position_embeddings 2048, num_key_value_heads / head_dim None;
 * MistralConfig: max_position_embeddings 4096 * 32, num_key_value_heads 8;
 * Qwen2Config: max_position_embeddings 32768, num_key_value_heads 32 (no head_dim field);
 * Qwen3Config: max_position_embeddings 32768, num_key_value_heads 32, head_dim 128. */
const model_config_family llama_family_llama = {.max_position_embeddings = 2048, .parse = parse_llama};
const model_config_family llama_family_mistral = {.max_position_embeddings = 4096 * 32, .num_kv_heads = 8,
                                                  .parse = parse_mistral};
const model_config_family llama_family_qwen2 = {.max_position_embeddings = 32768, .num_kv_heads = 32,
                                                .parse = parse_qwen2};
const model_config_family llama_family_qwen3 = {.max_position_embeddings = 32768, .num_kv_heads = 32,
                                                .head_dim = 128, .parse = parse_qwen3};
