/*
 * arch_qwen3_next.c: the hybrid gated delta-net families' config.json as the decoder's spec
 * (decoder.c): Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and the text models of
 * Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration. Their layers mix linear
 * attention (gated delta-net, a conv and a recurrent state per sequence) with full attention whose q_proj
 * also yields an output gate; per-head q/k norms; zero-centred (1 + w) RMSNorms; partial rotary 0.25 of
 * head_dim 256 by default. The decoder runs them on the gated delta-net ops (BE_OP_GATED_DELTA_NET).
 *
 *   Qwen3-Next:   in_proj_qkvz / in_proj_ba grouped by key head; Qwen2-MoE's sparse block with a shared
 *                 expert (norm_topk_prob, decoder_sparse_step, mlp_only_layers).
 *   Qwen3.5:      in_proj_qkv / in_proj_z / in_proj_b / in_proj_a; a dense MLP in every layer.
 *   Qwen3.5-MoE:  Qwen3.5's mixer; every MLP sparse with a shared expert, the top-k weights always
 *                 renormalised (Qwen3VLMoeTextTopKRouter).
 *
 * transformers' configuration_qwen3_next.py / modeling_qwen3_next.py, modular_qwen3_5.py,
 * modular_qwen3_5_moe.py; vLLM's qwen3_next.py, qwen3_5.py.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

/* layer_types: "linear_attention" (gated delta-net) or "full_attention" for each layer; absent: full
 * attention every full_attention_interval-th layer (Qwen3NextConfig's default pattern). */
static vllm_status hybrid_layer_types(const json_t *root, const char *what, model_config *c) {
    int interval;
    vllm_status st = hf_int(root, what, "full_attention_interval", false, 4, 1, &interval, NULL);
    if (st) return st;
    const json_t *lt = hf_get(root, "layer_types");
    if (lt && (!json_is_array(lt) || json_array_size(lt) != (size_t)c->num_layers))
        return vt_error(VLLM_ERR_FORMAT, "%s: layer_types must list one type for each of the %d layers", what,
                        c->num_layers);
    for (int i = 0; i < c->num_layers; i++) {
        bool linear = (i + 1) % interval != 0;
        if (lt) {
            const json_t *v = json_array_get(lt, (size_t)i);
            const char *s = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(s, "linear_attention")) linear = true;
            else if (!strcmp(s, "full_attention")) linear = false;
            else
                return vt_error(VLLM_ERR_UNSUPPORTED,
                                "%s: layer_types[%d] '%.64s' is not supported (linear_attention, full_attention)", what,
                                i, s);
        }
        c->layers[i].kind = linear ? LAYER_LINEAR_ATTENTION : LAYER_ATTENTION;
    }
    return VLLM_OK;
}

/* The gated delta-net's shapes (linear_*), the layer pattern, and what every hybrid family shares. */
static vllm_status parse_hybrid_common(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c)) ||
        (st = hf_int(root, what, "linear_num_key_heads", false, 16, 1, &c->linear_attn.num_k_heads, NULL)) ||
        (st = hf_int(root, what, "linear_num_value_heads", false, 32, 1, &c->linear_attn.num_v_heads, NULL)) ||
        (st = hf_int(root, what, "linear_key_head_dim", false, 128, 1, &c->linear_attn.k_head_dim, NULL)) ||
        (st = hf_int(root, what, "linear_value_head_dim", false, 128, 1, &c->linear_attn.v_head_dim, NULL)) ||
        (st = hf_int(root, what, "linear_conv_kernel_dim", false, 4, 2, &c->linear_attn.conv_kernel, NULL)) ||
        (st = hybrid_layer_types(root, what, c)))
        return st;
    if (c->linear_attn.num_v_heads % c->linear_attn.num_k_heads)
        return vt_error(VLLM_ERR_FORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                        what, c->linear_attn.num_v_heads, c->linear_attn.num_k_heads);
    c->qk_norm = true;
    c->norm = NORM_STYLE_RMS_OFFSET;
    c->attn_output_gate = true;
    c->o_bias = c->attention_bias;
    c->names = &arch_qwen_moe_names;
    return VLLM_OK;
}

/* Qwen3.5's multimodal RoPE (rope_parameters.mrope_section, mrope_interleaved; Qwen3VLTextRotaryEmbedding):
 * the rotary frequencies are split among temporal, height and width positions. A text-only prompt gives
 * all three the token's position, so the table is the plain one; the sections must still cover the
 * rotary dimension's rot_dim / 2 frequencies, as transformers' rope validation asks. */
static vllm_status check_mrope(const json_t *root, const char *what, const model_config *c) {
    const json_t *rp = hf_get(root, "rope_parameters");
    const json_t *sec = rp && json_is_object(rp) ? json_object_get(rp, "mrope_section") : NULL;
    if (!sec || json_is_null(sec)) return VLLM_OK;
    const int half = (int)floor((double)c->head_dim * c->rope.partial_rotary_factor) / 2;
    long long sum = 0;
    if (!json_is_array(sec)) return vt_error(VLLM_ERR_FORMAT, "%s: rope_parameters.mrope_section must be a list", what);
    for (size_t i = 0; i < json_array_size(sec); i++) {
        const json_t *v = json_array_get(sec, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return vt_error(VLLM_ERR_FORMAT, "%s: rope_parameters.mrope_section[%zu] must be a count", what, i);
        sum += json_integer_value(v);
    }
    if (sum != half)
        return vt_error(VLLM_ERR_FORMAT, "%s: rope_parameters.mrope_section sums to %lld, the rotary dimension has %d "
                        "frequencies", what, sum, half);
    return VLLM_OK;
}

/* The routed experts of Qwen3-Next and Qwen3.5-MoE (with a shared expert behind a sigmoid gate). */
static vllm_status parse_experts(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = arch_qwen_num_experts(root, what, 512, &c->moe.num_experts)) ||
        (st = hf_int(root, what, "num_experts_per_tok", false, 10, 1, &c->moe.top_k, NULL)) ||
        (st = hf_int(root, what, "moe_intermediate_size", false, 512, 1, &c->moe.intermediate_size, NULL)) ||
        (st = hf_int(root, what, "shared_expert_intermediate_size", false, 512, 0, &c->moe.shared_intermediate_size,
                     NULL)))
        return st;
    if (c->moe.num_experts > 0 && c->moe.top_k > c->moe.num_experts)
        return vt_error(VLLM_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_experts %d", what, c->moe.top_k,
                        c->moe.num_experts);
    return VLLM_OK;
}

/* Qwen3NextForCausalLM: norm_topk_prob defaults to true; layer l sparse unless in mlp_only_layers, when
 * num_experts > 0 and (l + 1) % decoder_sparse_step == 0. */
static vllm_status parse_qwen3_next(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    bool dense[MODEL_MAX_LAYERS] = {false};
    int step;
    if ((st = parse_hybrid_common(root, what, c)) || (st = parse_experts(root, what, c)) ||
        (st = hf_bool(root, what, "norm_topk_prob", true, &c->moe.renormalize)) ||
        (st = hf_int(root, what, "decoder_sparse_step", false, 1, 1, &step, NULL)) ||
        (st = arch_mlp_only_layers(root, what, c, dense)))
        return st;
    for (int l = 0; l < c->num_layers; l++)
        if (!dense[l] && c->moe.num_experts > 0 && (l + 1) % step == 0) c->layers[l].mlp = MLP_MOE;
    return VLLM_OK;
}

/* Qwen3_5ForCausalLM (Qwen3_5TextConfig): every MLP dense (intermediate_size). */
static vllm_status parse_qwen3_5(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = parse_hybrid_common(root, what, c)) || (st = check_mrope(root, what, c))) return st;
    c->linear_attn.split_proj = true;
    return VLLM_OK;
}

/* Qwen3_5MoeForCausalLM (Qwen3_5MoeTextConfig, which has no intermediate_size, norm_topk_prob,
 * decoder_sparse_step or mlp_only_layers): every MLP sparse. */
static vllm_status parse_qwen3_5_moe(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    if ((st = parse_qwen3_5(root, what, c)) || (st = parse_experts(root, what, c))) return st;
    if (c->moe.num_experts < 1) return vt_error(VLLM_ERR_FORMAT, "%s: num_experts must be at least 1", what);
    c->moe.renormalize = true;
    for (int l = 0; l < c->num_layers; l++) c->layers[l].mlp = MLP_MOE;
    return VLLM_OK;
}

/* Qwen3NextConfig / Qwen3_5TextConfig / Qwen3_5MoeTextConfig: max_position_embeddings 32768,
 * num_key_value_heads 2, head_dim 256, rms_norm_eps 1e-6, partial_rotary_factor 0.25. Qwen3.5-MoE's
 * width key is moe_intermediate_size (it has no dense MLP). The ConditionalGeneration classes keep the
 * text model's fields in text_config. */
#define HYBRID_DEFAULTS                                                                                  \
    .max_position_embeddings = 32768, .num_kv_heads = 2, .head_dim = 256, .rms_norm_eps = 1e-6,         \
    .partial_rotary_factor = 0.25
const model_config_family qwen3_next_family = {HYBRID_DEFAULTS, .parse = parse_qwen3_next};
const model_config_family qwen3_5_family = {HYBRID_DEFAULTS, .parse = parse_qwen3_5};
const model_config_family qwen3_5_mm_family = {HYBRID_DEFAULTS, .text_config = true, .parse = parse_qwen3_5};
const model_config_family qwen3_5_moe_family = {HYBRID_DEFAULTS, .intermediate_key = "moe_intermediate_size",
                                                .parse = parse_qwen3_5_moe};
const model_config_family qwen3_5_moe_mm_family = {HYBRID_DEFAULTS, .intermediate_key = "moe_intermediate_size",
                                                   .text_config = true, .parse = parse_qwen3_5_moe};
