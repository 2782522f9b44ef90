/*
 * arch_olmo2.c: Olmo2ForCausalLM's config.json as the decoder's spec (decoder.c):
 * no input norms; the attention's and the MLP's outputs are normalised before
 * the residual add (post_attention_layernorm, post_feedforward_layernorm); q and
 * k RMS-normalised over the whole projection (nh*hd, nkv*hd) before RoPE;
 * q/k/v/o biases when attention_bias.
 *
 *   x += post_attention_layernorm(attention(x))
 *   x += post_feedforward_layernorm(mlp(x))
 *
 * transformers' modeling_olmo2.py (Olmo2DecoderLayer, Olmo2Attention); vLLM's olmo2.py.
 */
#include <jansson.h>

#include "core/error.h"
#include "model/arch.h"

static const weight_names olmo2_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_out_norm = "post_attention_layernorm", .mlp_out_norm = "post_feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};

static vllm_status parse_olmo2(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c))) return st;
    c->o_bias = c->attention_bias;
    c->norm_layout = NORM_LAYOUT_POST;
    c->qk_norm = true;
    c->qk_norm_kind = QK_NORM_PROJ;
    c->names = &olmo2_names;
    return VLLM_OK;
}

/* Olmo2Config: max_position_embeddings 2048, num_key_value_heads = num_attention_heads, rms_norm_eps 1e-5,
 * tie_word_embeddings false. */
const model_config_family olmo2_family = {.max_position_embeddings = 2048, .rms_norm_eps = 1e-5,
                                          .parse = parse_olmo2};
