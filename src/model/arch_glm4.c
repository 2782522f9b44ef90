/*
 * arch_glm4.c: Glm4ForCausalLM's config.json as the decoder's spec (decoder.c):
 * four norms per layer around the two blocks (input_layernorm,
 * post_self_attn_layernorm on the attention's output, post_attention_layernorm
 * as the MLP's input norm, post_mlp_layernorm on its output), q/k/v biases
 * (attention_bias, default true), gate and up fused in mlp.gate_up_proj, and
 * RoPE on the first partial_rotary_factor (default 0.5) of each head, rotating
 * adjacent pairs (2i, 2i + 1): transformers' Glm4 apply_rotary_pos_emb
 * (repeat_interleave of cos/sin), vLLM's is_neox_style=False.
 *
 *   x += post_self_attn_layernorm(attention(input_layernorm(x)))
 *   x += post_mlp_layernorm(mlp(post_attention_layernorm(x)))
 *
 * transformers' modeling_glm4.py / configuration_glm4.py; vLLM's glm4.py.
 */
#include <jansson.h>

#include "core/error.h"
#include "model/arch.h"

static const weight_names glm4_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .attn_out_norm = "post_self_attn_layernorm",
    .mlp_norm = "post_attention_layernorm", .mlp_out_norm = "post_mlp_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .gate_up = "mlp.gate_up_proj", .down = "mlp.down_proj",
};

static vllm_status parse_glm4(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c))) return st;
    c->o_bias = false; /* Glm4Attention: o_proj bias=False */
    c->norm_layout = NORM_LAYOUT_SANDWICH;
    c->rope_interleaved = true;
    c->names = &glm4_names;
    return VLLM_OK;
}

/* Glm4Config: max_position_embeddings 131072, num_key_value_heads 2, head_dim 128, partial_rotary_factor 0.5,
 * attention_bias true, rms_norm_eps 1.5625e-07, tie_word_embeddings false. */
const model_config_family glm4_family = {.max_position_embeddings = 131072, .num_kv_heads = 2, .head_dim = 128,
                                         .rms_norm_eps = 1.5625e-07, .attention_bias = true,
                                         .partial_rotary_factor = 0.5, .parse = parse_glm4};
