/*
 * arch_granite.c: GraniteForCausalLM's config.json as the decoder's spec
 * (decoder.c): Llama's layer with four multipliers,
 *
 *   x = embed(ids) * embedding_multiplier
 *   x += attention(norm(x)) * residual_multiplier     (softmax scale attention_multiplier)
 *   x += mlp(norm(x)) * residual_multiplier
 *   logits = lm_head(norm(x)) / logits_scaling
 *
 * q/k/v/o biases when attention_bias, MLP biases when mlp_bias.
 * transformers' modeling_granite.py; vLLM's granite.py.
 */
#include <jansson.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

static vllm_status parse_granite(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c)) ||
        (st = hf_bool(root, what, "mlp_bias", false, &c->mlp_bias)) ||
        (st = hf_num(root, what, "embedding_multiplier", false, 1.0, 0.0, &c->embed_multiplier, NULL)) ||
        (st = hf_num(root, what, "residual_multiplier", false, 1.0, 0.0, &c->residual_multiplier, NULL)) ||
        (st = hf_num(root, what, "attention_multiplier", false, 1.0, 0.0, &c->attn_scale, NULL)) ||
        (st = hf_num(root, what, "logits_scaling", false, 1.0, 0.0, &c->logits_divisor, NULL)))
        return st;
    c->o_bias = c->attention_bias;
    return VLLM_OK;
}

/* GraniteConfig: max_position_embeddings 2048, num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6,
 * tie_word_embeddings false. */
const model_config_family granite_family = {.max_position_embeddings = 2048, .rms_norm_eps = 1e-6,
                                            .parse = parse_granite};
