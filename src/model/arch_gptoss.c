/*
 * arch_gptoss.c: the gpt-oss family's config.json (GptOssForCausalLM, gpt-oss-20b / 120b) as the decoder's
 * spec (decoder.c). transformers' modeling_gpt_oss.py / configuration_gpt_oss.py, vLLM's gpt_oss.py:
 *
 * - Llama's layer (pre-norm RMSNorm, eps rms_norm_eps 1e-5) with q/k/v/o biases (attention_bias, default
 *   true) and a learned sink logit per head (self_attn.sinks) that joins each query's softmax denominator;
 * - layers alternate sliding-window (sliding_window, default 128) and full attention by layer_types
 *   (default: layer i slides when (i + 1) % 2, i.e. the even layers, as vLLM's layer_idx % 2 == 0);
 * - YaRN RoPE on the whole head (rope_scaling / rope_parameters; GptOssConfig's default when neither is
 *   given: yarn, factor 32, beta_fast 32, beta_slow 1, truncate false, original 4096; rope_theta 150000);
 * - every MLP a sparse MoE: a router with a bias (mlp.router) picks num_experts_per_tok of
 *   num_local_experts by logit and softmaxes their logits (GptOssTopKRouter: topk, then softmax over the
 *   k: the same as softmax over all, top k, renormalised, which is what vLLM's FusedMoE runs with
 *   renormalize=True); each expert down(swiglu_oai(gate x + bg, up x + bu)) + bd, the clamped SwiGLU of
 *   GptOssExperts (alpha 1.702 or swiglu_alpha, limit swiglu_limit 7.0);
 * - expert weights fused (mlp.experts.gate_up_proj (E, D, 2I) interleaved, down_proj (E, I, D), their
 *   biases) in bf16 checkpoints, or MXFP4 blocks and scales (quantization_config quant_method "mxfp4",
 *   the original releases), dequantized at load (block_moe.c, mxfp4.c).
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

static const weight_names gptoss_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .mlp_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .sinks = "self_attn.sinks",
    .router = "mlp.router", .experts = "mlp.experts", .fused_gate_up = "gate_up_proj", .fused_down = "down_proj",
};

/* Neither rope_scaling nor rope_parameters: GptOssConfig's default rope_parameters (yarn, factor 32,
 * beta_fast 32, beta_slow 1, truncate false, original_max_position_embeddings 4096) and default_theta
 * 150000 when rope_theta is absent too; attention_factor get_mscale(32) = 0.1 ln 32 + 1. */
static void gptoss_default_rope(const json_t *root, model_config *c) {
    if (hf_get(root, "rope_scaling") || hf_get(root, "rope_parameters")) return;
    rope_config *r = &c->rope;
    if (!hf_get(root, "rope_theta")) r->theta = 150000.0;
    r->type = ROPE_YARN;
    r->factor = 32.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->truncate = false;
    r->original_max_position = 4096;
    r->attention_factor = 0.1 * log(32.0) + 1.0;
    c->ropes[0] = *r;
}

static vllm_status parse_gptoss(const json_t *root, const char *what, model_config *c) {
    vllm_status st;
    double alpha, limit;
    if ((st = hf_int(root, what, "num_local_experts", false, 128, 1, &c->moe.num_experts, NULL)) ||
        (st = hf_int(root, what, "num_experts_per_tok", false, 4, 1, &c->moe.top_k, NULL)) ||
        (st = hf_num(root, what, "swiglu_alpha", false, 1.702, 0.0, &alpha, NULL)) ||
        (st = hf_num(root, what, "swiglu_limit", false, 7.0, 0.0, &limit, NULL)))
        return st;
    if (c->moe.top_k > c->moe.num_experts)
        return vt_error(VLLM_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_local_experts %d", what, c->moe.top_k,
                        c->moe.num_experts);
    if (alpha > 1e6 || limit > 1e6) /* kept as floats by the backends */
        return vt_error(VLLM_ERR_FORMAT, "%s: swiglu_alpha %g / swiglu_limit %g out of range", what, alpha, limit);
    /* sliding_window: absent 128 (GptOssConfig), null none (the sliding layers then see every key) */
    c->sliding_window = 128;
    if (!hf_absent(root, "sliding_window") &&
        (st = hf_int(root, what, "sliding_window", false, 0, 1, &c->sliding_window, NULL)))
        return st;
    bool given;
    if ((st = arch_layer_types(root, what, c, &given))) return st;
    for (int l = 0; l < c->num_layers; l++) {
        if (!given) c->layers[l].sliding_window = (l + 1) % 2 ? c->sliding_window : 0;
        c->layers[l].mlp = MLP_MOE;
    }
    gptoss_default_rope(root, c);

    c->o_bias = c->attention_bias;          /* GptOssAttention: q, k, v and o all with attention_bias */
    c->attn_sinks = true;
    c->act = (int)BE_ACT_SWIGLU_OAI;        /* the experts' (no dense MLP) */
    c->moe.intermediate_size = c->intermediate_size;
    c->moe.renormalize = true;
    c->moe.router_bias = true;
    c->moe.expert_bias = true;
    c->moe.swiglu_alpha = alpha;
    c->moe.swiglu_limit = limit;
    c->moe.layout = MOE_LAYOUT_GPTOSS;
    c->names = &gptoss_names;
    return VLLM_OK;
}

/* GptOssConfig: max_position_embeddings 131072, num_key_value_heads 8, head_dim 64, rms_norm_eps 1e-5,
 * attention_bias true, tie_word_embeddings false; its checkpoints' MXFP4 experts are dequantized at load. */
const model_config_family gptoss_family = {.max_position_embeddings = 131072, .num_kv_heads = 8, .head_dim = 64,
                                           .rms_norm_eps = 1e-5, .attention_bias = true, .quant_method = "mxfp4",
                                           .parse = parse_gptoss};
