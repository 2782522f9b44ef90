/*
 * arch_deepseek.c: DeepseekV2ForCausalLM / DeepseekV3ForCausalLM's config.json as the decoder's spec (decoder.c):
 * every layer multi-head latent attention (LAYER_MLA, block_mla.c: q from q_proj or q_a_proj /
 * q_a_layernorm / q_b_proj, the latent [c ; k_rope] from kv_a_proj_with_mqa / kv_a_layernorm cached alone,
 * kv_b_proj absorbed), RoPE on interleaved pairs over qk_rope_head_dim; layer l's MLP an MoE when
 * l >= first_k_dense_replace and l % moe_layer_freq == 0 (vLLM's rule; transformers' ignores moe_layer_freq,
 * 1 in every released config), else a dense gated MLP of intermediate_size. The MoE adds plain shared experts
 * (mlp.shared_experts, a gated MLP of moe_intermediate_size * n_shared_experts, no sigmoid gate) to the
 * routed output, whose routing weights are multiplied by routed_scaling_factor.
 *
 * Routing (the MoE op's, backend.h): V2's topk_method "greedy" (softmax, top k; renormalised when
 * norm_topk_prob, as vLLM's renormalize) is BE_MOE_SOFTMAX; "group_limited_greedy" BE_MOE_SOFTMAX_GROUPED
 * (n_group, topk_group); V3's "noaux_tc" BE_MOE_SIGMOID_NOAUX_TC (sigmoid scores, e_score_correction_bias
 * choosing, grouped top-k by each group's two best).
 * Softmax scale 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim), times yarn_get_mscale(factor, mscale_all_dim)^2
 * when rope_scaling sets mscale_all_dim (transformers' DeepseekV3Attention, vLLM's DeepseekV2MLAAttention;
 * transformers' DeepseekV2Attention leaves it out). V3's multi-token-prediction layers
 * (num_nextn_predict_layers, model.layers.<num_hidden_layers>.*) are not loaded.
 *
 * transformers' modeling_deepseek_v2.py / modeling_deepseek_v3.py and their configuration files; vLLM's
 * model_executor/models/deepseek_v2.py.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "loader/hf_config.h"
#include "model/arch.h"

static const weight_names deepseek_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm",
    .o = "self_attn.o_proj",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
    .router = "mlp.gate", .experts = "mlp.experts", .expert_gate = "gate_proj", .expert_up = "up_proj",
    .expert_down = "down_proj", .fused_gate_up = "gate_up_proj", .fused_down = "down_proj",
    .shared_gate = "mlp.shared_experts.gate_proj", .shared_up = "mlp.shared_experts.up_proj",
    .shared_down = "mlp.shared_experts.down_proj",
};

/* transformers' yarn_get_mscale */
static double yarn_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

static vllm_status parse_deepseek(const json_t *root, const char *what, model_config *c, bool v3) {
    vllm_status st;
    int first_dense, freq, n_shared, n_group, topk_group, nextn;
    double rsf;
    bool mlp_bias, interleave;
    const char *topk_method = NULL, *scoring = NULL;
    /* q_lora_rank: null is a plain q_proj (V2-Lite); absent the class default 1536 */
    const json_t *ql = json_object_get(root, "q_lora_rank");
    c->mla.q_lora_rank = 1536;
    if (ql && json_is_null(ql)) c->mla.q_lora_rank = 0;
    else if ((st = hf_int(root, what, "q_lora_rank", false, 1536, 1, &c->mla.q_lora_rank, NULL))) return st;
    if ((st = arch_activation(root, what, "hidden_act", "silu", c)) ||
        (st = hf_int(root, what, "kv_lora_rank", false, 512, 1, &c->mla.kv_lora_rank, NULL)) ||
        (st = hf_int(root, what, "qk_nope_head_dim", false, 128, 1, &c->mla.qk_nope_head_dim, NULL)) ||
        (st = hf_int(root, what, "qk_rope_head_dim", false, 64, 2, &c->mla.qk_rope_head_dim, NULL)) ||
        (st = hf_int(root, what, "v_head_dim", false, 128, 1, &c->mla.v_head_dim, NULL)) ||
        (st = hf_int(root, what, "first_k_dense_replace", false, v3 ? 3 : 0, 0, &first_dense, NULL)) ||
        (st = hf_int(root, what, "moe_layer_freq", false, 1, 1, &freq, NULL)) ||
        (st = hf_int(root, what, "n_routed_experts", false, v3 ? 256 : 64, 0, &c->moe.num_experts, NULL)) ||
        (st = hf_int(root, what, "n_shared_experts", false, v3 ? 1 : 2, 0, &n_shared, NULL)) ||
        (st = hf_int(root, what, "num_experts_per_tok", false, v3 ? 8 : 0, 0, &c->moe.top_k, NULL)) ||
        (st = hf_int(root, what, "moe_intermediate_size", false, v3 ? 2048 : 1407, 1, &c->moe.intermediate_size,
                     NULL)) ||
        (st = hf_bool(root, what, "norm_topk_prob", v3, &c->moe.renormalize)) ||
        (st = hf_num(root, what, "routed_scaling_factor", false, v3 ? 2.5 : 1.0, 0.0, &rsf, NULL)) ||
        (st = hf_str(root, what, "topk_method", &topk_method)) ||
        (st = hf_str(root, what, "scoring_func", &scoring)) ||
        (st = hf_int(root, what, "n_group", false, v3 ? 8 : 0, 0, &n_group, NULL)) ||
        (st = hf_int(root, what, "topk_group", false, v3 ? 4 : 0, 0, &topk_group, NULL)) ||
        (st = hf_bool(root, what, "mlp_bias", false, &mlp_bias)) ||
        (st = hf_bool(root, what, "rope_interleave", true, &interleave)) ||
        (st = hf_int(root, what, "num_nextn_predict_layers", false, 0, 0, &nextn, NULL)))
        return st;
    if (!topk_method) topk_method = v3 ? "noaux_tc" : "greedy";
    if (!scoring) scoring = v3 || !strcmp(topk_method, "noaux_tc") ? "sigmoid" : "softmax";
    if (c->attention_bias)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: attention_bias true (biases on q_a_proj, kv_a_proj_with_mqa, "
                        "o_proj) is not supported", what);
    if (mlp_bias) return vt_error(VLLM_ERR_UNSUPPORTED, "%s: mlp_bias true is not supported", what);
    const int L = c->mla.kv_lora_rank, R = c->mla.qk_rope_head_dim;
    if (R % 2) return vt_error(VLLM_ERR_FORMAT, "%s: qk_rope_head_dim %d must be even", what, R);
    if (L + R > 2048 || c->mla.qk_nope_head_dim > 2048 || c->mla.q_lora_rank > 65536)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: kv_lora_rank + qk_rope_head_dim %d (at most 2048) or "
                        "qk_nope_head_dim %d too large", what, L + R, c->mla.qk_nope_head_dim);

    /* which layers are MoE, and their routing */
    bool any_moe = false;
    for (int l = 0; l < c->num_layers; l++) {
        c->layers[l].kind = LAYER_MLA;
        if (c->moe.num_experts > 0 && l >= first_dense && l % freq == 0) {
            c->layers[l].mlp = MLP_MOE;
            any_moe = true;
        }
    }
    if (any_moe) {
        if (c->moe.top_k < 1 || c->moe.top_k > c->moe.num_experts)
            return vt_error(VLLM_ERR_FORMAT, "%s: num_experts_per_tok %d must be in 1 .. n_routed_experts %d", what,
                            c->moe.top_k, c->moe.num_experts);
        if (strcmp(scoring, "softmax") && strcmp(scoring, "sigmoid"))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: scoring_func '%.32s' is not supported (softmax, sigmoid)", what,
                            scoring);
        if (!strcmp(topk_method, "greedy")) {
            if (strcmp(scoring, "softmax"))
                return vt_error(VLLM_ERR_UNSUPPORTED, "%s: topk_method greedy with scoring_func '%.32s' is not "
                                "supported (softmax)", what, scoring);
            c->moe.scoring = BE_MOE_SOFTMAX;
        } else if (!strcmp(topk_method, "group_limited_greedy")) {
            if (n_group < 1 || topk_group < 1) /* transformers fails on it; no silent ungrouped top-k */
                return vt_error(VLLM_ERR_FORMAT, "%s: topk_method group_limited_greedy needs n_group and topk_group "
                                "(got %d and %d)", what, n_group, topk_group);
            if (strcmp(scoring, "softmax"))
                return vt_error(VLLM_ERR_UNSUPPORTED, "%s: topk_method group_limited_greedy with scoring_func "
                                "'%.32s' is not supported (softmax)", what, scoring);
            c->moe.scoring = BE_MOE_SOFTMAX_GROUPED;
            c->moe.num_groups = n_group;
            c->moe.topk_groups = topk_group;
        } else if (!strcmp(topk_method, "noaux_tc")) {
            if (n_group < 1 || topk_group < 1)
                return vt_error(VLLM_ERR_FORMAT, "%s: topk_method noaux_tc needs n_group and topk_group (got %d and %d)",
                                what, n_group, topk_group);
            if (strcmp(scoring, "sigmoid"))
                return vt_error(VLLM_ERR_UNSUPPORTED, "%s: topk_method noaux_tc with scoring_func '%.32s' is not "
                                "supported (sigmoid)", what, scoring);
            c->moe.scoring = BE_MOE_SIGMOID_NOAUX_TC;
            c->moe.num_groups = n_group;
            c->moe.topk_groups = topk_group;
            c->moe.score_bias = true;    /* mlp.gate.e_score_correction_bias */
        } else {
            return vt_error(VLLM_ERR_UNSUPPORTED,
                            "%s: topk_method '%.32s' is not supported (greedy, group_limited_greedy, noaux_tc)", what,
                            topk_method);
        }
        if (c->moe.num_groups > 1) {
            moe_params mp = {.num_experts = c->moe.num_experts, .top_k = c->moe.top_k,
                             .scoring = (be_moe_scoring)c->moe.scoring, .num_groups = c->moe.num_groups,
                             .topk_groups = c->moe.topk_groups};
            const char *why = be_moe_routing_check(&mp);
            if (why) return vt_error(VLLM_ERR_FORMAT, "%s: n_group %d / topk_group %d: %s", what, n_group, topk_group, why);
        }
        /* n_shared_experts null: no shared experts (transformers / vLLM build them only when it is not None) */
        if (json_is_null(json_object_get(root, "n_shared_experts"))) n_shared = 0;
        const int64_t shared = (int64_t)c->moe.intermediate_size * n_shared;
        if (shared > INT32_MAX / 2)
            return vt_error(VLLM_ERR_FORMAT, "%s: moe_intermediate_size %d x n_shared_experts %d is too large", what,
                            c->moe.intermediate_size, n_shared);
        c->shared_experts_size = (int)shared;
        c->moe.routed_scaling = rsf;    /* the routing weights times routed_scaling_factor (transformers) */
    }
    if (nextn > 0)
        LOG_I("%s: %d multi-token-prediction layer(s) (num_nextn_predict_layers) are not loaded", c->architecture,
              nextn);

    /* attention: H query heads over one latent "KV head"; head_dim is the rotary part (the RoPE table's
     * width, transformers' config.head_dim = qk_rope_head_dim); num_key_value_heads plays no part */
    c->head_dim = R;
    c->num_kv_heads = c->num_heads;
    c->rope.partial_rotary_factor = 1.0;
    c->ropes[0] = c->rope;
    c->rope_interleaved = v3 ? interleave : true; /* V2: apply_rotary_emb on complex pairs (2i, 2i + 1) */
    double scale = 1.0 / sqrt((double)(c->mla.qk_nope_head_dim + R));
    const json_t *rs = hf_get(root, "rope_scaling");
    if (!rs) rs = hf_get(root, "rope_parameters");
    if (rs && json_is_object(rs)) {
        const json_t *mad = hf_get(rs, "mscale_all_dim"), *f = hf_get(rs, "factor");
        if (mad && !json_is_number(mad))
            return vt_error(VLLM_ERR_FORMAT, "%s: rope_scaling.mscale_all_dim must be a number", what);
        if (mad && json_number_value(mad) != 0 && f && json_is_number(f)) {
            const double m = yarn_get_mscale(json_number_value(f), json_number_value(mad));
            scale *= m * m;
        }
    }
    c->attn_scale = scale;
    c->names = &deepseek_names;
    return VLLM_OK;
}

static vllm_status parse_deepseek_v2(const json_t *root, const char *what, model_config *c) {
    return parse_deepseek(root, what, c, false);
}
static vllm_status parse_deepseek_v3(const json_t *root, const char *what, model_config *c) {
    return parse_deepseek(root, what, c, true);
}

/* DeepseekV2Config: max_position_embeddings 2048, rms_norm_eps 1e-6, untied; DeepseekV3Config: 4096, 1e-6,
 * untied. (num_key_value_heads defaults to num_attention_heads and is not used.) */
const model_config_family deepseek_v2_family = {.max_position_embeddings = 2048, .rms_norm_eps = 1e-6,
                                                .parse = parse_deepseek_v2};
const model_config_family deepseek_v3_family = {.max_position_embeddings = 4096, .rms_norm_eps = 1e-6,
                                                .parse = parse_deepseek_v3};
