/*
 * config.h: a model's hyper-parameters, read from a Hugging Face folder's
 * config.json and generation_config.json (parsed by src/loader/hf_config.c).
 *
 * Per-layer kinds make room for hybrid stacks (full attention, gated
 * delta-net linear attention, MoE MLPs) that later models mix in one stack.
 */
#ifndef VLLM_MODEL_CONFIG_H
#define VLLM_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/tensor.h"
#include "vllm.h"

#define MODEL_MAX_LAYERS 512
#define MODEL_MAX_EOS 8

typedef enum rope_type {
    ROPE_DEFAULT = 0,   /* theta^(-2i/d) */
    ROPE_LINEAR,        /* positions divided by factor */
    ROPE_LLAMA3,        /* Llama 3.1 frequency-dependent scaling */
    ROPE_LONGROPE,      /* Phi-3 LongRoPE: per-dimension short/long factors, scaled cos/sin */
    ROPE_YARN,          /* YaRN: interpolated low frequencies, extrapolated high ones, a ramp between,
                           scaled cos/sin */
    ROPE_NONE,          /* no rotary embedding (OPT: learned absolute positions) */
} rope_type;

#define ROPE_MAX_FACTORS 512 /* LongRoPE factors: one per rotated pair, rot_dim / 2 */

typedef struct rope_config {
    rope_type type;
    double theta;                   /* rope_theta (default 10000) */
    double factor;                  /* rope_scaling.factor (linear, llama3) */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3 */
    int original_max_position;      /* llama3: original_max_position_embeddings */
    double partial_rotary_factor;   /* fraction of head_dim rotated (default 1) */
    /* longrope: inv_freq[i] = 1 / (factor[i] * theta^(2i/rot_dim)), with the long factors when the
       table covers more than original_max_position positions (vLLM: max_model_len > it), cos/sin
       multiplied by attention_factor */
    int num_factors;                /* rot_dim / 2 */
    float short_factor[ROPE_MAX_FACTORS], long_factor[ROPE_MAX_FACTORS];
    double attention_factor;        /* longrope, yarn: cos and sin multiplied by it */
    /* yarn: the ramp between dimensions rotating beta_fast and beta_slow times over original_max_position
       positions (floor / ceil of its ends when truncate) */
    double beta_fast, beta_slow;
    bool truncate;
} rope_config;

typedef enum layer_kind {
    LAYER_ATTENTION = 0,            /* full (or sliding-window) softmax attention */
    LAYER_LINEAR_ATTENTION,         /* gated delta-net (Qwen3-Next, Qwen3.5): a conv and a recurrent state
                                       per sequence (model_config.linear_attn) instead of paged K/V */
    LAYER_MLA,                      /* multi-head latent attention (DeepSeek-V2 / V3, model_config.mla): one
                                       paged latent [c ; k_rope] per token, no V (block_mla.c) */
} layer_kind;

typedef enum mlp_kind {
    MLP_DENSE = 0,                  /* gated MLP: down(act(gate(x)) * up(x)) */
    MLP_DENSE_PLAIN,                /* ungated MLP: down(act(up(x))) (OPT's fc1 / fc2) */
    MLP_MOE,                        /* mixture of experts: top-k of num_experts gated MLPs, weighted
                                       (model_config.moe), optionally plus a gated shared expert */
} mlp_kind;

/* How a layer normalises (transformers' modeling files). */
typedef enum norm_style {
    NORM_STYLE_RMS = 0,             /* x / rms * w (Llama) */
    NORM_STYLE_RMS_OFFSET,          /* x / rms * (1 + w) in f32 (Gemma) */
    NORM_STYLE_LAYER,               /* LayerNorm with weight and bias (OPT) */
} norm_style;

/* Where a layer's norms sit around its two blocks (attention, MLP). */
typedef enum norm_layout {
    NORM_LAYOUT_PRE = 0,            /* x += block(norm(x)) (Llama) */
    NORM_LAYOUT_SANDWICH,           /* x += out_norm(block(in_norm(x))) (Gemma 2/3, GLM-4) */
    NORM_LAYOUT_POST,               /* x += out_norm(block(x)) (OLMo-2) */
} norm_layout;

/* Where q/k norms sit, when the model has them. */
typedef enum qk_norm_kind {
    QK_NORM_NONE = 0,
    QK_NORM_HEAD,                   /* per head, over head_dim (Qwen3, Gemma 3) */
    QK_NORM_PROJ,                   /* over the whole projection, nh*hd and nkv*hd (OLMo-2) */
} qk_norm_kind;

/* Checkpoint tensor names of the decoder, relative to the weight prefix
 * ("model.") and, for the per-layer ones, to "layers.<l>."; ".weight" /
 * ".bias" are appended. NULL: the model has no such tensor. */
typedef struct weight_names {
    const char *embed, *pos_embed, *final_norm;
    const char *attn_norm, *attn_out_norm, *mlp_norm, *mlp_out_norm;
    const char *q, *k, *v, *qkv, *o, *q_norm, *k_norm;
    const char *sinks;              /* attention sinks (num_heads), the full name: no ".weight" (gpt-oss) */
    const char *gate, *up, *gate_up, *down;
    /* mixture-of-experts layers: the router (E, D); the experts' tensors, per expert
       "<experts>.<e>.<expert_gate>" or fused "<experts>.<fused_gate_up>" (E, 2I, D) and
       "<experts>.<fused_down>" (E, D, I) (model_config.moe.layout says which fused layout); the
       shared expert's gated MLP and its (1, D) gate */
    const char *router, *experts, *expert_gate, *expert_up, *expert_down, *fused_gate_up, *fused_down;
    const char *router_score_bias;  /* model_config.moe.score_bias's (E) tensor, the full name (no ".weight");
                                       NULL: "<router>.e_score_correction_bias" */
    const char *shared_gate, *shared_up, *shared_down, *shared_expert_gate;
} weight_names;

/* Llama's names (the default): embed_tokens, input_layernorm, self_attn.q_proj, mlp.gate_proj, ... */
extern const weight_names weight_names_llama;

/* One decoder layer's spec: what it mixes with, what it caches, its MLP. */
/* How a checkpoint fuses its experts' tensors (the names' fused_gate_up / fused_down). */
typedef enum moe_layout {
    MOE_LAYOUT_ROWS = 0,            /* transformers 5's Qwen / Mixtral: gate_up (E, 2I, D), gate rows then up
                                       rows; down (E, D, I) */
    MOE_LAYOUT_GPTOSS,              /* gpt-oss: gate_up (E, D, 2I) with gate and up interleaved in the last
                                       dim (gate = [..., ::2], up = [..., 1::2]), down (E, I, D), biases
                                       "<fused>_bias" (E, 2I) interleaved and (E, D); or the MXFP4
                                       "<fused>_blocks" / "_scales" of (E, 2I, D) / (E, D, I) (interleaved
                                       rows), dequantized at load */
} moe_layout;

typedef struct layer_spec {
    layer_kind kind;
    mlp_kind mlp;
    int sliding_window;             /* keys this many positions back are masked; 0 = global attention */
    int rope;                       /* the RoPE table it uses: index into model_config.ropes */
} layer_spec;

#define MODEL_MAX_ROPES 2

struct json_t;

typedef struct model_config model_config;

/* What an architecture adds to the common config.json fields (src/model/arch_*.c,
 * found by model_config_family_find; src/loader/hf_config.c calls it): the
 * defaults of its transformers config class for absent keys, and its own
 * fields, which must fill the layer specs. */
typedef struct model_config_family {
    int max_position_embeddings;    /* defaults when the key is absent */
    int num_kv_heads;               /* 0: num_attention_heads */
    int head_dim;                   /* 0: hidden_size / num_attention_heads */
    double rms_norm_eps;            /* 0: 1e-6 */
    bool tie_word_embeddings;
    bool attention_bias;            /* attention_bias when absent */
    double partial_rotary_factor;   /* 0: 1 (GLM-4: 0.5) */
    const char *intermediate_key;   /* the MLP width's key (NULL: "intermediate_size"; OPT: "ffn_dim") */
    bool text_config;               /* the decoder's fields are in config.json's text_config (a multimodal
                                       model whose text model is run) */
    const char *quant_method;       /* a quantization_config.quant_method whose weights the family's loader
                                       dequantizes itself (gpt-oss: "mxfp4", its experts); NULL: none */
    vllm_status (*parse)(const struct json_t *root, const char *what, model_config *c);
} model_config_family;

/* The family of architectures[0], or NULL (registry.c). A name not registered
 * as such is looked up with its suffix replaced as vLLM's registry does
 * (Qwen3Model and Qwen3ForTextEncoding run as Qwen3ForCausalLM). */
const model_config_family *model_config_family_find(const char *architecture);
/* True when architectures[0] is not registered itself but found that way
 * from a suffix whose default runner is pooling (*Model, *EmbeddingModel,
 * *ForTextEncoding: vLLM's --runner auto picks pooling, --convert embed). */
bool model_arch_default_pooling(const char *architecture);

/* A checkpoint's quantization_config (loader/hf_quant.h): how its weights are stored. */
typedef enum quant_method {
    QUANT_NONE = 0,   /* F32 / F16 / BF16 weights */
    QUANT_FAMILY,     /* the family's own quant_method (model_config_family.quant_method: gpt-oss's mxfp4) */
    QUANT_FP8,        /* F8_E4M3 weights with F32 / BF16 / F16 scales per block, channel (row) or tensor: "fp8"
                         (weight_block_size: weight_scale_inv per block; else weight_scale per tensor) and
                         "compressed-tensors" float-quantized W8A8 (weight_scale per tensor / channel / block) */
    QUANT_AWQ,        /* "awq" (GEMM version), 4 bits: qweight / qzeros / scales (tensor/int4.h) */
    QUANT_GPTQ,       /* "gptq", 4 bits: qweight / qzeros / scales / g_idx (tensor/int4.h) */
    QUANT_CT_W4A16,   /* "compressed-tensors" pack-quantized, 4-bit symmetric int weights (W4A16): weight_packed /
                         weight_scale / weight_g_idx (tensor/int4.h) */
    QUANT_NVFP4,      /* NVFP4 weights (tensor/fp4.h): compressed-tensors nvfp4-pack-quantized (weight_packed /
                         weight_scale / weight_global_scale) or ModelOpt NVFP4 (weight / weight_scale /
                         weight_scale_2); weight-only, as vLLM's Marlin FP4 on Hopper */
} quant_method;

/* QUANT_FP8: what the weight scales cover */
typedef enum fp8_scales {
    FP8_SCALE_BLOCK = 0, /* (ceil(N / block_n), K / block_k) */
    FP8_SCALE_CHANNEL,   /* (N) or (N, 1): one per output row */
    FP8_SCALE_TENSOR,    /* () or (1): one per matrix (per shard of a fused checkpoint matrix) */
} fp8_scales;

typedef struct quant_config {
    quant_method method;
    char name[32];            /* quant_method as config.json spells it ("" for none) */
    fp8_scales fp8_scales;    /* QUANT_FP8: the weight scales' granularity */
    int block_n, block_k;     /* QUANT_FP8 FP8_SCALE_BLOCK: [block_n, block_k] (block_k is 128) */
    bool fp8_scale_inv;       /* QUANT_FP8: the scales are `<weight>_scale_inv` ("fp8" block), else `_scale` */
    bool fp8_static_act;      /* QUANT_FP8: the checkpoint has static input_scale tensors (activation_scheme
                                 static / input_activations dynamic false); vllm.c quantizes dynamically per
                                 token and 128 all the same (model/weights.c says so at load) */
    int group_size;           /* AWQ / GPTQ / CT_W4A16: input features per scale (-1: the whole row) */
    bool desc_act;            /* GPTQ / CT_W4A16 (actorder "group"): groups from g_idx (act-order) */
    bool gptq_v1;             /* GPTQ checkpoint_format "gptq": zeros stored less 1 */
    bool nvfp4_ct;            /* QUANT_NVFP4: compressed-tensors' names and inverse global scale (else ModelOpt's) */
    bool nvfp4_w4a4;          /* QUANT_NVFP4: the checkpoint also quantizes activations (W4A4), which vLLM leaves
                                 unquantized on Hopper (Marlin) and vllm.c everywhere */
    bool kv_fp8_scales;       /* compressed-tensors kv_cache_scheme (8-bit float, per tensor, static): the
                                 checkpoint holds each layer's k_scale / v_scale for an FP8 KV cache */
} quant_config;

struct model_config {
    char architecture[64];          /* architectures[0] */
    char model_type[64];            /* model_type */
    quant_config quant;             /* quantization_config */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_layers;                 /* num_hidden_layers */
    int num_heads;                  /* num_attention_heads */
    int num_kv_heads;               /* num_key_value_heads (default num_heads) */
    int head_dim;                   /* head_dim (default hidden_size / num_heads) */
    int max_position_embeddings;
    double rms_norm_eps;
    rope_config rope;               /* the global RoPE table (ropes[0] of the layer specs) */
    bool tie_word_embeddings;
    bool attention_bias;            /* q/k/v projections carry a bias (Qwen2: always) */
    bool o_bias;                    /* o_proj carries a bias */
    bool qk_norm;                   /* per-head norm on q and k (Qwen3, Gemma 3) */
    int sliding_window;             /* the window of the sliding layers; 0 = none */
    dtype torch_dtype;              /* torch_dtype / dtype (default BF16) */

    /* the decoder's spec (filled by the architecture's parse_config, src/model/arch_*.c) */
    int act;                        /* be_act of the gated MLP (0 = SiLU) */
    norm_style norm;                /* every norm of the model */
    norm_layout norm_layout;        /* where the blocks' norms sit (sandwich: Gemma 2/3's post-attention
                                       and pre/post-feedforward norms) */
    qk_norm_kind qk_norm_kind;      /* with qk_norm: per head (default) or over the whole projection */
    bool mlp_bias;                  /* the MLP's projections carry biases (OPT) */
    bool rope_interleaved;          /* RoPE rotates pairs (2i, 2i + 1) (GLM-4), not halves (i, i + r/2) */
    int pos_embed_offset;           /* learned absolute positions: row position + offset of pos_embed (OPT: 2);
                                       used when names->pos_embed is set */
    double embed_multiplier;        /* embeddings multiplied by it (Granite; 0 = 1) */
    double residual_multiplier;     /* each block's output multiplied by it before the residual add (0 = 1) */
    double logits_divisor;          /* logits divided by it (Granite's logits_scaling; 0 = 1) */
    const weight_names *names;      /* checkpoint tensor names (NULL: weight_names_llama) */
    struct {                        /* mixture of experts, for the layers whose mlp is MLP_MOE */
        int num_experts;            /* E */
        int top_k;                  /* experts per token */
        int intermediate_size;      /* each expert's I */
        bool renormalize;           /* top-k weights divided by their sum */
        int shared_intermediate_size; /* the shared expert's I (0: none), gated by sigmoid(x . w) */
        bool router_bias;           /* the router carries a bias (gpt-oss) */
        bool expert_bias;           /* the experts carry biases (gpt-oss) */
        double swiglu_alpha, swiglu_limit; /* act BE_ACT_SWIGLU_OAI's (gpt-oss: 1.702, swiglu_limit 7) */
        moe_layout layout;          /* the fused experts' layout */
        /* The router's scoring (moe_params' fields of the same names, backend.h; zero: Qwen's softmax top-k):
         *  DeepSeek-V2 (topk_method "group_limited_greedy"): BE_MOE_SOFTMAX_GROUPED, n_group, topk_group;
         *    "greedy" (V2-Lite): BE_MOE_SOFTMAX_GROUPED (or BE_MOE_SOFTMAX) with num_groups 0.
         *    transformers 5's DeepseekV2Moe never renormalises (norm_topk_prob unread) and always scales;
         *    the original remote code renormalises when top_k > 1 and norm_topk_prob, else scales (the
         *    released V2 / V2-Lite configs: norm_topk_prob false, so both agree).
         *  DeepSeek-V3 / R1 / Kimi-K2 (topk_method "noaux_tc", scoring_func "sigmoid"):
         *    BE_MOE_SIGMOID_NOAUX_TC, n_group, topk_group, renormalize = norm_topk_prob, score_bias true. */
        int scoring;                /* be_moe_scoring (0 = BE_MOE_SOFTMAX) */
        int num_groups;             /* n_group: experts in this many equal groups of consecutive ids; 0 / 1 none */
        int topk_groups;            /* topk_group: the groups kept per token (with num_groups > 1) */
        double routed_scaling;      /* routed_scaling_factor: the routing weights multiplied by it after the
                                       renormalisation, in moe_route (as transformers; 0 = 1). Not to be
                                       combined with a scaling of the routed output */
        bool score_bias;            /* BE_MOE_SIGMOID_NOAUX_TC: each MoE layer has the router's (E) choice
                                       bias, names.router_score_bias (mlp.gate.e_score_correction_bias) */
    } moe;
    struct {                        /* gated delta-net, for the layers whose kind is LAYER_LINEAR_ATTENTION */
        int num_k_heads, num_v_heads; /* q / k heads and v heads (num_v_heads a multiple of num_k_heads) */
        int k_head_dim, v_head_dim;
        int conv_kernel;            /* the depthwise causal conv1d's width (linear_conv_kernel_dim) */
        bool split_proj;            /* Qwen3.5: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, rows already
                                       q | k | v head-major; else Qwen3-Next's grouped in_proj_qkvz / in_proj_ba */
    } linear_attn;
    struct {                        /* multi-head latent attention, for the layers whose kind is LAYER_MLA */
        int q_lora_rank;            /* 0: a plain q_proj (V2-Lite); else q_a_proj, q_a_layernorm, q_b_proj */
        int kv_lora_rank;           /* L: the latent c cached per token */
        int qk_nope_head_dim, qk_rope_head_dim, v_head_dim; /* per head; the rope part R is shared by the heads */
    } mla;
    int shared_experts_size;        /* MoE layers: a plain shared-experts MLP (no sigmoid gate) of this width added to
                                       the routed output (DeepSeek's mlp.shared_experts); 0: none */
    bool attn_sinks;                /* a learned sink logit per head in the attention's softmax (gpt-oss) */
    bool attn_output_gate;          /* q_proj also yields a gate per head ([q | gate] per head): the attention
                                       output is multiplied by sigmoid(gate) before o_proj (Qwen3-Next) */
    bool embed_scale_sqrt;          /* embeddings multiplied by sqrt(hidden_size) in the activation dtype */
    double attn_scale;              /* softmax scale (0: 1 / sqrt(head_dim)) */
    double attn_softcap;            /* attention logit softcap; 0 = off */
    double final_softcap;           /* final logit softcap; 0 = off */
    char weight_prefix[32];         /* of the decoder's tensors: "model." ("model.embed_tokens.weight"), or
                                       the text model's inside a multimodal checkpoint */
    rope_config ropes[MODEL_MAX_ROPES];
    int num_ropes;                  /* 1, or 2 (Gemma 3: rope_local_base_freq for sliding layers) */
    layer_spec layers[MODEL_MAX_LAYERS];

    /* token ids (-1 when absent) */
    int bos_token_id;
    int pad_token_id;
    int eos_token_ids[MODEL_MAX_EOS];
    int num_eos;

    /* generation_config.json defaults (has_* false when absent) */
    bool has_temperature, has_top_p, has_top_k;
    double gen_temperature;
    double gen_top_p;
    int gen_top_k;
};

/* What a layer keeps per sequence between steps (vLLM's KVCacheSpec,
 * vllm/v1/kv_cache_interface.py). Layers with equal specs form KV cache
 * groups (src/model/kv_cache_groups.h); later kinds (per-sequence recurrent
 * state, compressed MLA latent) extend the enum and add their fields. */
typedef enum cache_kind {
    CACHE_NONE = 0,                 /* the layer caches nothing */
    CACHE_FULL_ATTENTION,           /* paged K and V of every position (FullAttentionSpec) */
    CACHE_SLIDING_WINDOW,           /* paged K and V, only the last sliding_window positions read
                                       (SlidingWindowSpec): older blocks can be freed */
    CACHE_MLA,                      /* one paged plane of [c ; k_rope] (kv_lora_rank + qk_rope_head_dim values) per
                                       token and no V (vLLM's MLAAttentionSpec) */
} cache_kind;

typedef struct cache_spec {
    cache_kind kind;
    int sliding_window;             /* CACHE_SLIDING_WINDOW: keys this many positions back are dropped */
    int num_kv_heads, head_dim;     /* K (and V) rows of one token (attention kinds; CACHE_MLA: 1 x L + R) */
} cache_spec;

/* The planes a spec caches per token: 2 (K and V), 1 (CACHE_MLA's latent), 0 (none). */
static inline int cache_spec_planes(const cache_spec *s) {
    return s->kind == CACHE_NONE ? 0 : s->kind == CACHE_MLA ? 1 : 2;
}

/* Layer l's cache spec, from its layer_spec (src/model/kv_cache_groups.c). */
cache_spec model_layer_cache_spec(const model_config *c, int l);

#endif
