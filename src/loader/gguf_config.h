/*
 * gguf_config.h: a GGUF file's model metadata as the Hugging Face config.json it stands for, and the
 * mapping from Hugging Face tensor names to GGUF ones (prefix ggc_).
 *
 * vLLM runs GGUF files the same way (its gguf loader asks transformers for the HF config of the file and
 * maps tensor names with gguf-py's table), so every architecture file of src/model keeps one spelling of
 * its config and weight names. The keys are llama.cpp's (src/llama-arch.cpp LLM_KV_*, gguf-py
 * constants.py Keys): general.architecture, <arch>.context_length, <arch>.embedding_length,
 * <arch>.block_count, <arch>.feed_forward_length, <arch>.attention.head_count / head_count_kv /
 * key_length / layer_norm_rms_epsilon, <arch>.rope.freq_base / dimension_count / scaling.*,
 * <arch>.expert_count / expert_used_count / expert_feed_forward_length; tokenizer.ggml.bos_token_id /
 * eos_token_id. Families: llama (and Mistral; rope_freqs as per-dimension frequency divisors; Mixtral when
 * llama.expert_count > 0), qwen2, qwen2moe (expert_shared_feed_forward_length), qwen3, qwen3moe; gemma2 / gemma3 (text)
 * (<arch>.attn_logit_softcapping / final_logit_softcapping, attention.sliding_window and _pattern (a period),
 * rope.freq_base_swa, query_pre_attn_scalar as llama.cpp derives it, norms stored as w + 1); phi3 (fused
 * attn_qkv / ffn_up, partial rotary from rope.dimension_count, LongRoPE from the rope_factors_long / _short
 * tensors with rope.scaling.original_context_length / attn_factor); gpt-oss (expert_feed_forward_length,
 * attention.sliding_window by period 2, attn_sinks, MXFP4 experts); qwen3next / qwen35 / qwen35moe (ssm.conv_kernel /
 * state_size / group_count / time_step_rank / inner_size, attention.recurrent_layers or full_attention_interval,
 * nextn_predict_layers, norms stored as 1 + w, ssm_a = -exp(A_log), the value-head and qkvz row orders through
 * ggc_map); olmo2 (post-norms), granite (attention.scale, embedding_scale, residual_scale, logit_scale), glm4
 * (sandwich norms, partial rotary); deepseek2 (attention.kv_lora_rank / q_lora_rank / key_length_mla /
 * value_length_mla, attn_k_b / attn_v_b as self_attn.k_b_proj / v_b_proj, leading_dense_block_count, expert_shared_count,
 * expert_gating_func, expert_group_count / _used_count, expert_weights_norm / _scale, yarn_log_multiplier);
 * YaRN (rope.scaling.type yarn, factor,
 * original_context_length) as llama.cpp runs it. A value the architecture depends on that
 * this mapping cannot express (per-layer head counts, YaRN keys llama.cpp's graphs ignore, rope_freqs beside a
 * rope scaling type, a
 * per-layer sliding-window list for gemma, an attention.scale llama.cpp would ignore, an expert_weights_scale,
 * an unknown architecture) is refused with VLLM_ERR_UNSUPPORTED naming the key.
 */
#ifndef VLLM_LOADER_GGUF_CONFIG_H
#define VLLM_LOADER_GGUF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "loader/gguf.h"
#include "vllm.h"

/* Whether a --model path names a GGUF file (a regular file ending in .gguf) rather than a folder. */
bool ggc_is_gguf_path(const char *path);

/* The architectures the mapping knows, "llama, qwen2, ..." (messages). */
const char *ggc_architectures(void);

/* *config_json: malloc'd config.json text for f (what names the file in messages). */
vllm_status ggc_hf_config(const gguf_file *f, const char *what, char **config_json);

/* A row or column order the converter changed (see ggc_tensor_ref). */
typedef enum ggc_map {
    GGC_MAP_NONE = 0,
    GGC_MAP_VHEAD_ROWS,  /* qwen35: value heads tiled (file slot n holds HF head (n % hk) r + n / hk), rows */
    GGC_MAP_VHEAD_COLS,  /* the same over columns (ssm_out) */
    GGC_MAP_QKVZ,        /* qwen3next: HF in_proj_qkvz (per key head [q | k | v | z]) from attn_qkv (q, k, v
                          * head-major) and attn_gate (z) */
} ggc_map;

/* How a weight of the HF name maps into the file. */
typedef struct ggc_tensor_ref {
    const gguf_tensor_info *t; /* the GGUF tensor */
    int expert;                /* >= 0: the HF tensor is slice `expert` of t's outermost dimension */
    int64_t row0, rows;        /* rows > 0: the HF tensor is rows [row0, row0 + rows) of that slice (one half of a
                                * fused ffn_gate_up_exps) */
    int permute_heads;         /* > 0: llama.cpp permuted the rows of this q / k projection for its rotary
                                * layout with this many heads (convert_hf_to_gguf.py LlamaModel.permute):
                                * the reader must undo it */
    bool norm_minus_one;       /* a Gemma RMSNorm weight: convert_hf_to_gguf.py stored w + 1 (llama.cpp runs
                                * a plain norm, HF x * (1 + w)): the reader hands out the values less 1 */
    /* the gated delta-net layers of qwen3next / qwen35 (Qwen3NextModel, _LinearAttentionVReorderBase): */
    ggc_map map;               /* how the HF tensor's rows (or columns) come from the file's: ggc_source_index */
    const gguf_tensor_info *t2; /* GGC_MAP_QKVZ: attn_gate, the z rows (t: attn_qkv) */
    int64_t off, hk, r, hs, dk; /* the mapped rows / columns: after off, r = H_v / H_k value heads per key head of
                                 * hs rows each (GGC_MAP_QKVZ: dk, the key head size, and hs the value head's) */
    bool neg_exp_log;          /* A_log: the file holds -exp(A_log) (ssm_a): the reader hands out log(-x) */
} ggc_tensor_ref;

/* The shape (outermost first) of the HF tensor ref stands for: its tensor's, less an expert slice's outermost
 * dimension, with a fused half's rows, or attn_qkv's rows plus attn_gate's (GGC_MAP_QKVZ); returns the number of
 * dimensions (shape holds GGUF_MAX_DIMS). */
int ggc_ref_shape(const ggc_tensor_ref *ref, int64_t *shape);

/* Which row (or column, GGC_MAP_VHEAD_COLS) of the file holds index i of the HF tensor, in ref->t, or in ref->t2
 * when *second is set (GGC_MAP_QKVZ). */
int64_t ggc_source_index(const ggc_tensor_ref *ref, int64_t i, bool *second);

/* Looks up the GGUF tensor for a Hugging Face weight name ("model.layers.3.self_attn.q_proj.weight");
 * false when the name has no GGUF counterpart or the file lacks it. */
bool ggc_find(const gguf_file *f, const char *hf_name, ggc_tensor_ref *ref);

#endif
