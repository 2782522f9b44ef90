/*
 * arch_opt.c: OPTForCausalLM's config.json as the decoder's spec (decoder.c):
 * LayerNorms with biases before each block, learned absolute positions (row
 * position + 2 of embed_positions, OPTLearnedPositionalEmbedding's offset) added
 * to the token embeddings, no rotary embedding, an ungated MLP fc2(act(fc1(x)))
 * (activation_function, ReLU), biases on every projection (enable_bias), the
 * lm_head tied to the embeddings; tensors under model.decoder.
 *
 *   x = embed_tokens(ids) + embed_positions(pos + 2)
 *   x += out_proj(attention(self_attn_layer_norm(x)))
 *   x += fc2(relu(fc1(final_layer_norm(x))))
 *   logits = lm_head(final_layer_norm(x))
 *
 * Refused: do_layer_norm_before false (the post-norm OPT-350m), word_embed_proj_dim
 * other than hidden_size (its project_in / project_out), _remove_final_layer_norm,
 * layer_norm_elementwise_affine false.
 * transformers' modeling_opt.py / configuration_opt.py; vLLM's opt.py.
 */
#include <jansson.h>
#include <string.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

static const weight_names opt_names = {
    .embed = "embed_tokens", .pos_embed = "embed_positions", .final_norm = "final_layer_norm",
    .attn_norm = "self_attn_layer_norm", .mlp_norm = "final_layer_norm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.out_proj",
    .up = "fc1", .down = "fc2",
};

static vllm_status parse_opt(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    bool bias;
    int proj;
    if ((st = arch_activation(root, what, "activation_function", "relu", c)) ||
        (st = arch_require_bool(root, what, "do_layer_norm_before", true, true, "the post-norm OPT-350m layout")) ||
        (st = arch_require_bool(root, what, "_remove_final_layer_norm", false, false, "no final LayerNorm")) ||
        (st = arch_require_bool(root, what, "layer_norm_elementwise_affine", true, true, "LayerNorms without weights")) ||
        (st = hf_bool(root, what, "enable_bias", true, &bias)) ||
        (st = hf_int(root, what, "word_embed_proj_dim", false, c->hidden_size, 1, &proj, NULL)))
        return st;
    if (proj != c->hidden_size)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: word_embed_proj_dim %d other than hidden_size %d is not supported "
                        "(project_in / project_out)", what, proj, c->hidden_size);
    c->attention_bias = c->o_bias = c->mlp_bias = bias;
    c->norm = NORM_STYLE_LAYER;
    c->rope.type = ROPE_NONE;
    c->ropes[0] = c->rope;
    c->pos_embed_offset = 2;
    c->names = &opt_names;
    strcpy(c->weight_prefix, "model.decoder.");
    for (int l = 0; l < c->num_layers; l++) c->layers[l].mlp = MLP_DENSE_PLAIN;
    return VLLM_OK;
}

/* OPTConfig: max_position_embeddings 2048, ffn_dim for the MLP width, nn.LayerNorm's eps 1e-5,
 * tie_word_embeddings true. */
const model_config_family opt_family = {.max_position_embeddings = 2048, .rms_norm_eps = 1e-5,
                                        .tie_word_embeddings = true, .intermediate_key = "ffn_dim",
                                        .parse = parse_opt};
