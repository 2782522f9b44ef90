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
} rope_type;

typedef struct rope_config {
    rope_type type;
    double theta;                   /* rope_theta (default 10000) */
    double factor;                  /* rope_scaling.factor (linear, llama3) */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3 */
    int original_max_position;      /* llama3: original_max_position_embeddings */
    double partial_rotary_factor;   /* fraction of head_dim rotated (default 1) */
} rope_config;

typedef enum layer_kind {
    LAYER_ATTENTION = 0,            /* full (or sliding-window) softmax attention */
} layer_kind;

typedef enum mlp_kind {
    MLP_DENSE = 0,                  /* gated MLP: down(act(gate(x)) * up(x)) */
} mlp_kind;

/* How a layer normalises (transformers' modeling files). */
typedef enum norm_style {
    NORM_STYLE_RMS = 0,             /* x / rms * w (Llama) */
    NORM_STYLE_RMS_OFFSET,          /* x / rms * (1 + w) in f32 (Gemma) */
} norm_style;

/* One decoder layer's spec: what it mixes with, what it caches, its MLP. */
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
    bool text_config;               /* the decoder's fields are in config.json's text_config (a multimodal
                                       model whose text model is run) */
    vllm_status (*parse)(const struct json_t *root, const char *what, model_config *c);
} model_config_family;

/* The family of architectures[0], or NULL (registry.c). */
const model_config_family *model_config_family_find(const char *architecture);

struct model_config {
    char architecture[64];          /* architectures[0] */
    char model_type[64];            /* model_type */
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
    bool sandwich_norms;            /* post-attention and pre/post-feedforward norms (Gemma 2/3):
                                       x += post_attn_norm(attn(in_norm(x)));
                                       x += post_ffn_norm(mlp(pre_ffn_norm(x))) */
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

#endif
