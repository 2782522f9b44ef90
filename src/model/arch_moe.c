/*
 * arch_moe.c: the mixture-of-experts families' config.json as the decoder's
 * spec (decoder.c): Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM (the hybrid
 * Qwen3-Next / Qwen3.5 families, MoE or not, are in arch_qwen3_next.c).
 * Attention as their dense relatives (Qwen2: q/k/v biases; Qwen3: per-head
 * q/k norms; Mixtral: Mistral's, with sliding_window when set); the MLP of a
 * layer is a sparse MoE block:
 *
 *   p = softmax(h W_router^T) (f32);  top k of p  [/ their sum]
 *   y = sum over the k of p_e * down_e(act(gate_e h) * up_e h)
 *       [+ sigmoid(h . w_sg) * shared(h)]          (Qwen2-MoE's shared expert)
 *
 * Qwen: layer l is sparse unless l is in mlp_only_layers, when num_experts > 0
 * and (l + 1) % decoder_sparse_step == 0; the weights renormalised when
 * norm_topk_prob. Mixtral: every layer sparse, always renormalised.
 * transformers' modeling_qwen2_moe.py, modeling_qwen3_moe.py, modeling_mixtral.py
 * (Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock);
 * vLLM's qwen2_moe.py, qwen3_moe.py, mixtral.py.
 */
#include <jansson.h>
#include <string.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

const weight_names arch_qwen_moe_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
    .router = "mlp.gate", .experts = "mlp.experts", .expert_gate = "gate_proj", .expert_up = "up_proj",
    .expert_down = "down_proj", .fused_gate_up = "gate_up_proj", .fused_down = "down_proj",
    .shared_gate = "mlp.shared_expert.gate_proj", .shared_up = "mlp.shared_expert.up_proj",
    .shared_down = "mlp.shared_expert.down_proj", .shared_expert_gate = "mlp.shared_expert_gate",
};

static const weight_names mixtral_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .router = "block_sparse_moe.gate", .experts = "block_sparse_moe.experts", .expert_gate = "w1",
    .expert_up = "w3", .expert_down = "w2", .fused_gate_up = "gate_up_proj", .fused_down = "down_proj",
};

/* mlp_only_layers: a list of layer indices (absent or null: none). */
vllm_status arch_mlp_only_layers(const json_t *root, const char *what, model_config *c, bool *dense) {
    const json_t *a = hf_get(root, "mlp_only_layers");
    if (!a) return VLLM_OK;
    if (!json_is_array(a)) return vt_error(VLLM_ERR_FORMAT, "%s: mlp_only_layers must be a list of layer indices", what);
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->num_layers)
            return vt_error(VLLM_ERR_FORMAT, "%s: mlp_only_layers[%zu] must be a layer index below %d", what, i,
                            c->num_layers);
        dense[json_integer_value(v)] = true;
    }
    return VLLM_OK;
}

/* num_experts, or num_local_experts: transformers 5 maps the first onto the second
 * (Qwen3MoeConfig.attribute_map) and saves its configs with num_local_experts; the released
 * checkpoints' config.json files say num_experts. Both, if given, must agree. */
vllm_status arch_qwen_num_experts(const json_t *root, const char *what, int def, int *out) {
    int a, b;
    bool fa, fb;
    vllm_status st;
    if ((st = hf_int(root, what, "num_experts", false, def, 0, &a, &fa)) ||
        (st = hf_int(root, what, "num_local_experts", false, def, 0, &b, &fb)))
        return st;
    if (fa && fb && a != b)
        return vt_error(VLLM_ERR_FORMAT, "%s: num_experts %d and num_local_experts %d disagree", what, a, b);
    *out = fa ? a : b;
    return VLLM_OK;
}

static vllm_status parse_qwen_moe(const json_t *root, const char *what, model_config *c, bool qwen3) {
    vllm_status st;
    bool use_sw, dense[MODEL_MAX_LAYERS] = {false};
    int step;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c)) ||
        (st = hf_bool(root, what, "use_sliding_window", false, &use_sw)) ||
        (st = arch_qwen_num_experts(root, what, qwen3 ? 128 : 60, &c->moe.num_experts)) ||
        (st = hf_int(root, what, "num_experts_per_tok", false, qwen3 ? 8 : 4, 1, &c->moe.top_k, NULL)) ||
        (st = hf_int(root, what, "moe_intermediate_size", false, qwen3 ? 768 : 1408, 1, &c->moe.intermediate_size,
                     NULL)) ||
        (st = hf_bool(root, what, "norm_topk_prob", false, &c->moe.renormalize)) ||
        (st = hf_int(root, what, "decoder_sparse_step", false, 1, 1, &step, NULL)) ||
        (st = arch_mlp_only_layers(root, what, c, dense)))
        return st;
    if (use_sw) return vt_error(VLLM_ERR_UNSUPPORTED, "%s: use_sliding_window is not supported yet", what);
    if (!qwen3 && (st = hf_int(root, what, "shared_expert_intermediate_size", false, 5632, 0,
                               &c->moe.shared_intermediate_size, NULL)))
        return st;
    if (c->moe.num_experts > 0 && c->moe.top_k > c->moe.num_experts)
        return vt_error(VLLM_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_experts %d", what, c->moe.top_k,
                        c->moe.num_experts);
    for (int l = 0; l < c->num_layers; l++)
        if (!dense[l] && c->moe.num_experts > 0 && (l + 1) % step == 0) c->layers[l].mlp = MLP_MOE;
    if (qwen3) {
        c->qk_norm = true;
        c->o_bias = c->attention_bias;
    } else {
        /* Qwen2MoeAttention: q/k/v biases (qkv_bias, default true), o_proj none */
        if ((st = hf_bool(root, what, "qkv_bias", true, &c->attention_bias))) return st;
        c->o_bias = false;
    }
    c->names = &arch_qwen_moe_names;
    return VLLM_OK;
}
static vllm_status parse_qwen2_moe(const json_t *root, const char *what, model_config *c) {
    return parse_qwen_moe(root, what, c, false);
}
static vllm_status parse_qwen3_moe(const json_t *root, const char *what, model_config *c) {
    return parse_qwen_moe(root, what, c, true);
}

static vllm_status parse_mixtral(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c)) ||
        (st = hf_int(root, what, "num_local_experts", false, 8, 1, &c->moe.num_experts, NULL)) ||
        (st = hf_int(root, what, "num_experts_per_tok", false, 2, 1, &c->moe.top_k, NULL)) ||
        (st = hf_int(root, what, "sliding_window", false, 0, 0, &c->sliding_window, NULL)))
        return st;
    if (c->moe.top_k > c->moe.num_experts)
        return vt_error(VLLM_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_local_experts %d", what, c->moe.top_k,
                        c->moe.num_experts);
    c->moe.intermediate_size = c->intermediate_size; /* each expert's width */
    c->moe.renormalize = true;                         /* MixtralSparseMoeBlock: always */
    c->attention_bias = c->o_bias = false;
    for (int l = 0; l < c->num_layers; l++) {
        c->layers[l].mlp = MLP_MOE;
        c->layers[l].sliding_window = c->sliding_window;
    }
    c->names = &mixtral_names;
    return VLLM_OK;
}

/* Qwen2MoeConfig: max_position_embeddings 32768, num_key_value_heads 16, rms_norm_eps 1e-6;
 * Qwen3MoeConfig: 32768, 4, 1e-6; MixtralConfig: 4096 * 32, 8, 1e-5; none ties its embeddings. */
const model_config_family qwen2_moe_family = {.max_position_embeddings = 32768, .num_kv_heads = 16,
                                              .rms_norm_eps = 1e-6, .parse = parse_qwen2_moe};
const model_config_family qwen3_moe_family = {.max_position_embeddings = 32768, .num_kv_heads = 4,
                                              .rms_norm_eps = 1e-6, .parse = parse_qwen3_moe};
const model_config_family mixtral_family = {.max_position_embeddings = 4096 * 32, .num_kv_heads = 8,
                                            .rms_norm_eps = 1e-5, .parse = parse_mixtral};
