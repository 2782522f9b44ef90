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
    MLP_DENSE = 0,                  /* SiLU-gated MLP */
} mlp_kind;

typedef struct model_config {
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
    rope_config rope;
    bool tie_word_embeddings;
    bool attention_bias;            /* q/k/v projections carry a bias (Qwen2: always) */
    bool qk_norm;                   /* per-head RMSNorm on q and k (Qwen3) */
    int sliding_window;             /* 0 = none */
    dtype torch_dtype;              /* torch_dtype / dtype (default BF16) */
    layer_kind layer_kinds[MODEL_MAX_LAYERS];
    mlp_kind mlp_kinds[MODEL_MAX_LAYERS];

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
} model_config;

#endif
