/*
 * arch_phi3.c: Phi3ForCausalLM's config.json as the decoder's spec (decoder.c):
 * Llama's layer with q, k, v fused in one checkpoint tensor (self_attn.qkv_proj,
 * rows q | k | v) and gate, up fused in mlp.gate_up_proj (rows gate | up), no
 * biases, LongRoPE scaling (rope type "longrope", legacy "su"; rope.c picks its
 * long factors when max_model_len exceeds original_max_position_embeddings, as
 * vLLM), partial_rotary_factor (Phi-4-mini), sliding_window on every layer when
 * set (transformers' Phi3Attention passes config.sliding_window to every layer).
 *
 * transformers' modeling_phi3.py / configuration_phi3.py; vLLM runs it as its
 * Llama model with the fused tensors split at load time (phi3.py).
 */
#include <jansson.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

static const weight_names phi3_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm",
    .qkv = "self_attn.qkv_proj", .o = "self_attn.o_proj",
    .gate_up = "mlp.gate_up_proj", .down = "mlp.down_proj",
};

static vllm_status parse_phi3(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c))) return st;
    c->attention_bias = c->o_bias = false; /* Phi3Attention / Phi3MLP: bias=False whatever the config says */
    c->names = &phi3_names;
    if ((st = hf_int(root, what, "sliding_window", false, 0, 0, &c->sliding_window, NULL))) return st;
    for (int l = 0; l < c->num_layers; l++) c->layers[l].sliding_window = c->sliding_window;
    return VLLM_OK;
}

/* Phi3Config: max_position_embeddings 4096, num_key_value_heads = num_attention_heads, rms_norm_eps 1e-5,
 * tie_word_embeddings false. */
const model_config_family phi3_family = {.max_position_embeddings = 4096, .rms_norm_eps = 1e-5, .parse = parse_phi3};
