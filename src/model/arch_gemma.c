/*
 * arch_gemma.c: the Gemma 2 / Gemma 3 families' config.json, as the decoder's
 * spec (decoder.c): Gemma2ForCausalLM, Gemma3ForCausalLM and the text model of
 * Gemma3ForConditionalGeneration (its config nests the text model's fields in
 * text_config; the vision tower's weights are not loaded).
 *
 * transformers' modeling_gemma2.py / modeling_gemma3.py:
 * - embeddings scaled by hidden_size ** 0.5 in the activations' dtype
 *   (Gemma2Model.forward's normalizer, Gemma3TextScaledWordEmbedding);
 * - every RMSNorm is x / rms * (1 + w) in f32 (Gemma2RMSNorm); four per layer:
 *   input_layernorm, post_attention_layernorm (on the attention's output),
 *   pre_feedforward_layernorm, post_feedforward_layernorm (on the MLP's output);
 * - MLP down(act(gate(x)) * up(x)) with hidden_activation (gelu_pytorch_tanh);
 * - attention scale query_pre_attn_scalar ** -0.5; Gemma 2: scores softcapped by
 *   attn_logit_softcapping (default 50) and logits by final_logit_softcapping
 *   (default 30); Gemma 3: neither by default, per-head q/k norms (1 + w) before RoPE;
 * - layers alternate sliding-window and global attention: layer_types, or
 *   Gemma 2's pattern (even layers sliding) and Gemma 3's sliding_window_pattern
 *   (default 6: every 6th layer global); Gemma 3's sliding layers rotate with
 *   rope_local_base_freq (default 10000, no scaling), its global ones with
 *   rope_theta and rope_scaling (transformers 5: rope_parameters per layer type).
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "model/arch.h"

/* Llama's names with Gemma's four norms per layer */
static const weight_names gemma_names = {
    .embed = "embed_tokens", .final_norm = "norm",
    .attn_norm = "input_layernorm", .attn_out_norm = "post_attention_layernorm",
    .mlp_norm = "pre_feedforward_layernorm", .mlp_out_norm = "post_feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};

/* A softcap field: absent -> def, null -> off, else a positive number. */
static vllm_status softcap_field(const json_t *root, const char *what, const char *key, double def, double *out) {
    if (hf_absent(root, key)) {
        *out = def;
        return VLLM_OK;
    }
    return hf_num(root, what, key, false, 0.0, 0.0, out, NULL);
}

static vllm_status parse_gemma(const json_t *root, const char *what, model_config *c, int version) {
    vllm_status st;
    /* hidden_activation (Gemma's own field) wins over hidden_act, as Gemma2MLP reads it */
    const char *act = NULL;
    if ((st = hf_str(root, what, "hidden_activation", &act))) return st;
    if (!act && (st = hf_str(root, what, "hidden_act", &act))) return st;
    if (!act) act = "gelu_pytorch_tanh";
    be_act a;
    if (!be_act_from_name(act, &a))
        return vt_error(VLLM_ERR_UNSUPPORTED,
                        "%s: hidden_activation '%.64s' is not supported (gelu_pytorch_tanh, gelu, silu, relu)", what, act);
    c->act = (int)a;
    c->norm = NORM_STYLE_RMS_OFFSET;
    c->norm_layout = NORM_LAYOUT_SANDWICH;
    c->names = &gemma_names;
    c->embed_scale_sqrt = true;
    c->o_bias = c->attention_bias;
    c->qk_norm = version == 3;

    double qpas;
    if ((st = hf_num(root, what, "query_pre_attn_scalar", false, 256.0, 0.0, &qpas, NULL))) return st;
    c->attn_scale = 1.0 / sqrt(qpas);
    if ((st = softcap_field(root, what, "attn_logit_softcapping", version == 2 ? 50.0 : 0.0, &c->attn_softcap)) ||
        (st = softcap_field(root, what, "final_logit_softcapping", version == 2 ? 30.0 : 0.0, &c->final_softcap)))
        return st;
    if ((st = hf_int(root, what, "sliding_window", false, 4096, 1, &c->sliding_window, NULL))) return st;

    bool given;
    if ((st = arch_layer_types(root, what, c, &given))) return st;
    if (!given) {
        int pattern = 2; /* Gemma2Config: sliding if (i + 1) % 2 */
        if (version == 3 && (st = hf_int(root, what, "sliding_window_pattern", false, 6, 1, &pattern, NULL))) return st;
        for (int i = 0; i < c->num_layers; i++) c->layers[i].sliding_window = (i + 1) % pattern ? c->sliding_window : 0;
    }
    if (version == 3) {
        /* the local layers' RoPE: rope_local_base_freq (v4), rope_parameters.sliding_attention (v5) */
        rope_config local = {.type = ROPE_DEFAULT, .factor = 1.0, .partial_rotary_factor = 1.0};
        const json_t *params = hf_get(root, "rope_parameters");
        const json_t *sw = params && json_is_object(params) ? hf_get(params, "sliding_attention") : NULL;
        if (sw) {
            const char *type = NULL;
            if (!json_is_object(sw) || (st = hf_str(sw, what, "rope_type", &type)))
                return st ? st : vt_error(VLLM_ERR_FORMAT, "%s: rope_parameters.sliding_attention must be an object", what);
            if (type && strcmp(type, "default"))
                return vt_error(VLLM_ERR_UNSUPPORTED, "%s: rope_parameters.sliding_attention.rope_type '%.32s' is not "
                                "supported (default)", what, type);
            if ((st = hf_num(sw, what, "rope_theta", true, 10000.0, 0.0, &local.theta, NULL))) return st;
        } else if ((st = hf_num(root, what, "rope_local_base_freq", false, 10000.0, 0.0, &local.theta, NULL))) {
            return st;
        }
        c->ropes[1] = local;
        c->num_ropes = 2;
        for (int i = 0; i < c->num_layers; i++) c->layers[i].rope = c->layers[i].sliding_window ? 1 : 0;
    }
    return VLLM_OK;
}

static vllm_status parse_gemma2(const json_t *root, const char *what, model_config *c) {
    return parse_gemma(root, what, c, 2);
}
static vllm_status parse_gemma3(const json_t *root, const char *what, model_config *c) {
    return parse_gemma(root, what, c, 3);
}

/* Gemma2Config: max_position_embeddings 8192, num_key_value_heads 4, head_dim 256, rms_norm_eps 1e-6,
 * tie_word_embeddings true; Gemma3TextConfig: max_position_embeddings 131072, the rest the same. */
const model_config_family gemma_family_gemma2 = {.max_position_embeddings = 8192, .num_kv_heads = 4, .head_dim = 256,
                                                 .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                                                 .parse = parse_gemma2};
const model_config_family gemma_family_gemma3 = {.max_position_embeddings = 131072, .num_kv_heads = 4, .head_dim = 256,
                                                 .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                                                 .parse = parse_gemma3};
const model_config_family gemma_family_gemma3_mm = {.max_position_embeddings = 131072, .num_kv_heads = 4,
                                                    .head_dim = 256, .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                                                    .text_config = true, .parse = parse_gemma3};
