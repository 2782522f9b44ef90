#!/usr/bin/env python3
"""
make_fixtures.py: builds tiny random Hugging Face models plus greedy-decoding
reference outputs from transformers, the parity fixtures for vllm.c's tests.

Usage:  python3 tools/make_fixtures.py --out tests/fixtures/models [--device cpu|cuda]

For each case it writes DIR/<case>/{config.json, model.safetensors,
generation_config.json, expected.json}. Weights are saved in bf16 (one case
in f16), then reloaded from disk and run in float32 with eager attention, so
the reference sees exactly the rounded weights that vllm.c will load.

expected.json:
  {"case", "transformers", "torch", "dtype", "rope", "sliding_window",
   "prompts": [{"prompt_token_ids", "token_ids", "logprobs", "top2_gap"}, ...]}
token_ids are 12 greedy tokens (no EOS stop), logprobs their log_softmax
values, top2_gap the top1 - top2 logprob margin at each step (a test should
only demand exact token agreement where the gap is comfortably > 0).
Cases built only on request (--only NAME) may add "tolerance": {"bf16_max",
"bf16_mean" (transformers' own bf16 drift), "noise_max" (the f32 reference's
drift with BF16-sized noise on every Linear input, 8 draws), "tf_max",
"tf_mean" (the bounds a bf16 engine's teacher-forced logprobs must meet: twice
the larger drift, twice the bf16 mean)}; --retolerance recomputes only that.

Needs: python3, torch, transformers (tested against 5.x, with fallbacks for
4.x config keys), safetensors.
"""
import argparse
import copy
import json
import math
import os
import random
import sys

import torch
import transformers
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

try:
    from transformers import Qwen3Config, Qwen3ForCausalLM
except ImportError:  # transformers < 4.51
    Qwen3Config = Qwen3ForCausalLM = None
try:
    from transformers import Gemma2Config, Gemma2ForCausalLM
except ImportError:
    Gemma2Config = Gemma2ForCausalLM = None
try:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
except ImportError:
    Gemma3TextConfig = Gemma3ForCausalLM = None


def _optional(config_name, model_name):
    """(config class, model class) from transformers, or (None, None) when this version lacks them."""
    try:
        return getattr(transformers, config_name), getattr(transformers, model_name)
    except AttributeError:
        return None, None


Phi3Config, Phi3ForCausalLM = _optional("Phi3Config", "Phi3ForCausalLM")
Olmo2Config, Olmo2ForCausalLM = _optional("Olmo2Config", "Olmo2ForCausalLM")
GraniteConfig, GraniteForCausalLM = _optional("GraniteConfig", "GraniteForCausalLM")
Glm4Config, Glm4ForCausalLM = _optional("Glm4Config", "Glm4ForCausalLM")
OPTConfig, OPTForCausalLM = _optional("OPTConfig", "OPTForCausalLM")
Qwen3MoeConfig, Qwen3MoeForCausalLM = _optional("Qwen3MoeConfig", "Qwen3MoeForCausalLM")
Qwen2MoeConfig, Qwen2MoeForCausalLM = _optional("Qwen2MoeConfig", "Qwen2MoeForCausalLM")
MixtralConfig, MixtralForCausalLM = _optional("MixtralConfig", "MixtralForCausalLM")
GptOssConfig, GptOssForCausalLM = _optional("GptOssConfig", "GptOssForCausalLM")
Qwen3NextConfig, Qwen3NextForCausalLM = _optional("Qwen3NextConfig", "Qwen3NextForCausalLM")
Qwen3_5TextConfig, Qwen3_5ForCausalLM = _optional("Qwen3_5TextConfig", "Qwen3_5ForCausalLM")
Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration = _optional("Qwen3_5MoeConfig",
                                                                 "Qwen3_5MoeForConditionalGeneration")
DeepseekV2Config, DeepseekV2ForCausalLM = _optional("DeepseekV2Config", "DeepseekV2ForCausalLM")
DeepseekV3Config, DeepseekV3ForCausalLM = _optional("DeepseekV3Config", "DeepseekV3ForCausalLM")

from safetensors import safe_open

SEED = 1234
STD = 0.3         # every weight and bias ~ N(0, STD); norm weights 1 + STD*N(0, 1)
EMBED_STD = 1.0   # embed_tokens / lm_head: larger, so logits (std ~8) are peaked and
                  # greedy top-1/top-2 gaps are mostly well clear of bf16 noise
PROMPT_LENS = [1, 5, 17, 40]
NEW_TOKENS = 12
BOS, EOS = 1, 2

# -----------------------------------------------------------------------------
# cases

# phi3_longrope's LongRoPE factors (rot_dim 16: 8 each), spelled in either config layout below
PHI3_SHORT = [1.0 + 0.1 * i for i in range(8)]
PHI3_LONG = [1.0 + 1.5 * i for i in range(8)]

COMMON = dict(vocab_size=512, hidden_size=64, max_position_embeddings=256,
              rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=BOS,
              eos_token_id=EOS, pad_token_id=None, use_cache=False)


# DeepSeek (issue 14): multi-head latent attention (kv_lora_rank 32, qk_nope 16, qk_rope 8, v_head_dim 16),
# layer 0 dense (first_k_dense_replace 1), then 8 routed experts top 2 plus one plain shared expert.
DEEPSEEK = dict(COMMON, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                intermediate_size=96, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                first_k_dense_replace=1, moe_intermediate_size=32, rms_norm_eps=1e-6,
                tie_word_embeddings=False, attention_bias=False, pad_token_id=0)


def deepseek_score_bias(model):
    """V3's router buffer e_score_correction_bias (zeros from transformers) made random, so noaux_tc's choice
    scores (sigmoid + bias) differ from the weights (sigmoid alone). Non-negative (uniform in [0, 0.5)), as the
    released checkpoints' are in effect: transformers masks the experts of the dropped groups to 0.0, so a
    negative choice score would rank below them and the pick among masked experts (all exactly 0.0) would be
    torch.topk's unspecified tie order."""
    for n, b in list(model.named_buffers()) + list(model.named_parameters()):
        if n.endswith("e_score_correction_bias"):
            b.copy_(0.5 * torch.rand(b.shape))


def zero_centred_norms(model):
    """(1 + w) RMSNorms as the family initialises them (w = 0), plus STD noise, instead of randomise()'s
    1 + STD*N (every norm ~2x). The gated norm of the delta-net (w itself) keeps 1 + STD*N. Used for
    qwen3_next, whose fixture without it failed the CUDA teacher-forced bound (2026-12-02); the MoE hybrids'
    routing still makes transformers' own bf16 run drift by nats (its measured bounds say so)."""
    for n, p in model.named_parameters():
        if n.endswith("norm.weight") and ".linear_attn.norm." not in n and "visual" not in n:
            p.copy_(STD * torch.randn(p.shape))


CASES = [
    dict(name="llama_gqa", cfg_cls=LlamaConfig, model_cls=LlamaForCausalLM,
         dtype=torch.bfloat16,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128,
                   tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    dict(name="llama3_mqa_tied", cfg_cls=LlamaConfig, model_cls=LlamaForCausalLM,
         dtype=torch.bfloat16,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=1, head_dim=32, intermediate_size=96,
                   max_position_embeddings=1024, tie_word_embeddings=True,
                   attention_bias=False, mlp_bias=False),
         head_dim=32,
         rope=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                   low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64)),
    dict(name="mistral_swa", cfg_cls=MistralConfig, model_cls=MistralForCausalLM,
         dtype=torch.bfloat16,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=8, intermediate_size=128,
                   sliding_window=16, tie_word_embeddings=False),
         head_dim=8,
         rope=dict(rope_type="linear", rope_theta=10000.0, factor=2.0),
         rope_optional=True),  # falls back to default rope if Mistral refuses scaling
    dict(name="qwen2_bias_tied", cfg_cls=Qwen2Config, model_cls=Qwen2ForCausalLM,
         dtype=torch.bfloat16,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=96,
                   tie_word_embeddings=True, use_sliding_window=False,
                   sliding_window=None),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=1000000.0)),
    dict(name="qwen3_qknorm", cfg_cls=Qwen3Config, model_cls=Qwen3ForCausalLM,
         dtype=torch.bfloat16,
         base=dict(COMMON, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, intermediate_size=128,
                   tie_word_embeddings=False, attention_bias=False,
                   use_sliding_window=False, sliding_window=None),
         head_dim=32,
         rope=dict(rope_type="default", rope_theta=1000000.0)),
    dict(name="llama_mha_f16", cfg_cls=LlamaConfig, model_cls=LlamaForCausalLM,
         dtype=torch.float16,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=128,
                   tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # Gemma 2: sandwich (1 + w) norms, GELU-tanh, query_pre_attn_scalar, alternating
    # sliding (even layers) / global layers, attention and final-logit softcaps (small
    # caps, so they bite on these weights). custom: the config class's own RoPE
    # defaults (rope_theta 10000), no rope kwargs.
    # embed_std 0.4: (1 + w) norms and the sqrt(hidden) embedding scale make logits
    # (std ~6 here) as peaked as the other cases' with EMBED_STD
    dict(name="gemma2_softcap", cfg_cls=Gemma2Config, model_cls=Gemma2ForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True, embed_std=0.4,
         base=dict(COMMON, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                   rms_norm_eps=1e-6, pad_token_id=0, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, intermediate_size=128,
                   query_pre_attn_scalar=24, sliding_window=8, attn_logit_softcapping=5.0,
                   final_logit_softcapping=15.0, tie_word_embeddings=True),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # Gemma 3: as Gemma 2 without softcaps, plus per-head (1 + w) q/k norms and a
    # second RoPE table (rope_local_base_freq 10000) for the sliding layers; the
    # global layers keep rope_theta 1e6.
    dict(name="gemma3_local", cfg_cls=Gemma3TextConfig, model_cls=Gemma3ForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True, embed_std=0.4,
         base=dict(COMMON, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                   rms_norm_eps=1e-6, pad_token_id=0, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, intermediate_size=128,
                   query_pre_attn_scalar=32, sliding_window=8,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                   tie_word_embeddings=True),
         head_dim=32,
         rope=dict(rope_type="default", rope_theta=1000000.0)),
    # Phi-3: fused qkv_proj / gate_up_proj checkpoint tensors, longrope scaling.
    # original_max_position_embeddings 16 < every sequence (prompts of 17 to 40
    # tokens): transformers then rotates with long_factor, and so does vLLM (and
    # vllm.c) whenever max_model_len exceeds it; cos/sin scaled by
    # sqrt(1 + ln(256/16) / ln(16)).
    dict(name="phi3_longrope", bf16_reference=True, cfg_cls=Phi3Config, model_cls=Phi3ForCausalLM,
         dtype=torch.bfloat16, custom=True, prompt_lens=[17, 40, 33, 24],
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128,
                   original_max_position_embeddings=16, tie_word_embeddings=False,
                   pad_token_id=0),
         variants=[
             dict(rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                       short_factor=PHI3_SHORT,
                                       long_factor=PHI3_LONG,
                                       original_max_position_embeddings=16)),
             dict(rope_theta=10000.0,
                  rope_scaling=dict(type="longrope",
                                    short_factor=PHI3_SHORT,
                                    long_factor=PHI3_LONG)),
         ],
         check=lambda m: abs(float(m.model.rotary_emb.attention_scaling) - math.sqrt(2.0)) < 1e-6,
         head_dim=16,
         rope=dict(rope_type="longrope", rope_theta=10000.0)),
    # OLMo-2: no input norms; post-attention / post-feedforward norms on the blocks'
    # outputs; q/k RMSNorm over the whole projection (nh*hd, nkv*hd) before RoPE.
    dict(name="olmo2_postnorm", bf16_reference=True, cfg_cls=Olmo2Config, model_cls=Olmo2ForCausalLM,
         dtype=torch.bfloat16, custom=True,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128,
                   tie_word_embeddings=False, attention_bias=False, pad_token_id=0,
                   rope_theta=500000.0),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=500000.0)),
    # Granite: embedding / residual / attention multipliers and logits scaling, all
    # away from 1 so each one matters.
    dict(name="granite_mult", bf16_reference=True, cfg_cls=GraniteConfig, model_cls=GraniteForCausalLM,
         dtype=torch.bfloat16, custom=True,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=1, intermediate_size=128,
                   tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
                   embedding_multiplier=3.0, residual_multiplier=0.5,
                   attention_multiplier=0.2, logits_scaling=0.5, pad_token_id=0,
                   rope_theta=10000.0),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # GLM-4: q/k/v biases, fused gate_up_proj, interleaved RoPE on half of each head
    # (partial_rotary_factor 0.5), post-attention and post-MLP norms.
    dict(name="glm4_partial", bf16_reference=True, cfg_cls=Glm4Config, model_cls=Glm4ForCausalLM,
         dtype=torch.bfloat16, custom=True,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, intermediate_size=128,
                   tie_word_embeddings=False, attention_bias=True, pad_token_id=0,
                   partial_rotary_factor=0.5, rope_theta=10000.0),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # OPT: LayerNorm with bias, learned positions (offset 2), ReLU fc1/fc2 MLP,
    # biases everywhere, no RoPE, tied lm_head.
    dict(name="opt_learned", bf16_reference=True, cfg_cls=OPTConfig, model_cls=OPTForCausalLM,
         dtype=torch.bfloat16, custom=True,
         base=dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                   num_attention_heads=4, max_position_embeddings=256,
                   activation_function="relu", do_layer_norm_before=True,
                   word_embed_proj_dim=64, enable_bias=True, bos_token_id=BOS,
                   eos_token_id=EOS, pad_token_id=0, use_cache=False,
                   tie_word_embeddings=True),
         head_dim=16,
         rope=dict(rope_type="none", rope_theta=0.0)),
    # Qwen3-MoE: 16 experts, top 4, renormalised; layer 1 dense (mlp_only_layers), per-head
    # q/k norms. A 40-token prompt sends many tokens to the same experts; the 1-token
    # prompt leaves 12 of 16 experts without a token.
    dict(name="qwen3_moe", cfg_cls=Qwen3MoeConfig, model_cls=Qwen3MoeForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(COMMON, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_experts=16,
                   num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                   mlp_only_layers=[1], tie_word_embeddings=False, pad_token_id=0,
                   use_sliding_window=False, rope_theta=1000000.0),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=1000000.0)),
    # Qwen2-MoE: 8 experts, top 2, not renormalised, a shared expert behind a sigmoid gate,
    # q/k/v biases.
    dict(name="qwen2_moe_shared", cfg_cls=Qwen2MoeConfig, model_cls=Qwen2MoeForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                   num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
                   tie_word_embeddings=False, pad_token_id=0, use_sliding_window=False,
                   rope_theta=10000.0),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # Mixtral: 4 experts, top 2 (always renormalised), sliding window 16.
    dict(name="mixtral_moe", cfg_cls=MixtralConfig, model_cls=MixtralForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                   sliding_window=16, tie_word_embeddings=False, pad_token_id=0,
                   rope_theta=1000000.0),
         head_dim=16,
         rope=dict(rope_type="default", rope_theta=1000000.0)),
    # gpt-oss: 8 experts, top 2 (router with a bias; softmax over the top-k logits), expert biases,
    # the clamped SwiGLU (swiglu_limit 7), a sink per head, q/k/v/o biases, layers alternating
    # sliding (window 8: the 17- and 40-token prompts exceed it) and full, YaRN as gpt-oss-20b ships
    # it. randomise() gives every parameter, the sinks and biases included, N(0, STD) (transformers
    # zeroes the expert biases); post_init widens the sinks so that they matter.
    dict(name="gptoss_moe", cfg_cls=GptOssConfig, model_cls=GptOssForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(COMMON, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                   sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                   swiglu_limit=7.0, attention_bias=True, tie_word_embeddings=False, pad_token_id=0),
         variants=[  # transformers 5: rope_parameters; 4.x: rope_theta + rope_scaling
             dict(rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                       beta_slow=1.0, truncate=False, original_max_position_embeddings=4096)),
             dict(rope_theta=150000.0,
                  rope_scaling=dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0,
                                    truncate=False, original_max_position_embeddings=4096)),
         ],
         post_init=lambda model: [p.normal_(0.0, 1.5) for n, p in model.named_parameters()
                                  if n.endswith("self_attn.sinks")],
         head_dim=16,
         rope=dict(rope_type="yarn", rope_theta=150000.0)),
    # Qwen3-Next (issue 13): 3 gated delta-net layers and 1 full-attention layer (layer_types), H_v = 2 H_k,
    # conv width 4, a gated attention output, partial rotary 0.25 of head_dim 32, q/k norms, (1 + w)
    # norms, 8 experts top 2 renormalised with a shared expert behind a sigmoid gate. transformers' torch
    # fallbacks (torch_chunk_gated_delta_rule, the nn.Conv1d path) run without fla / causal-conv1d.
    dict(name="qwen3_next", cfg_cls=Qwen3NextConfig, model_cls=Qwen3NextForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True, post_init=zero_centred_norms,
         base=dict(COMMON, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=32, intermediate_size=96, moe_intermediate_size=32,
                   shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
                   norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                   layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                   linear_value_head_dim=16, linear_conv_kernel_dim=4, tie_word_embeddings=False,
                   pad_token_id=0, partial_rotary_factor=0.25, rope_theta=10000.0),
         head_dim=32,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # Qwen3.5 dense (issue 13): Qwen3-Next's layers with separate in_proj_qkv / in_proj_z / in_proj_b /
    # in_proj_a, a dense MLP in every layer, and the multimodal RoPE (mrope_section) that text-only
    # positions reduce to the plain table of the rotary 0.25.
    dict(name="qwen3_5", cfg_cls=Qwen3_5TextConfig, model_cls=Qwen3_5ForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(COMMON, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=32, intermediate_size=96,
                   layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                   linear_value_head_dim=16, linear_conv_kernel_dim=4, tie_word_embeddings=False,
                   pad_token_id=0),
         variants=[dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                                             mrope_section=[2, 1, 1], mrope_interleaved=True))],
         head_dim=32,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # Qwen3.5-MoE as it ships (Qwen3_5MoeForConditionalGeneration: text_config, a vision tower whose
    # weights the engine skips): 8 experts top 2, always renormalised, a shared expert in every layer whose
    # intermediate size is twice the experts' (64 = 2 x 32; Qwen3.5-35B-A3B's is 1 x 512), so the engine runs it
    # as 2 extra experts of the expert op (moe_params.shared_gate); qwen2_moe_shared and qwen3_next (48) keep it
    # as its own MLP.
    dict(name="qwen3_5_moe", cfg_cls=Qwen3_5MoeConfig, model_cls=Qwen3_5MoeForConditionalGeneration,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(text_config=dict(COMMON, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=32, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                    num_experts=8, num_experts_per_tok=2,
                                    layer_types=["linear_attention", "full_attention", "linear_attention",
                                                 "linear_attention"],
                                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                                    linear_value_head_dim=16, linear_conv_kernel_dim=4, pad_token_id=0,
                                    rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                         partial_rotary_factor=0.25, mrope_section=[2, 1, 1],
                                                         mrope_interleaved=True)),
                   vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                                      out_hidden_size=COMMON["hidden_size"], num_position_embeddings=16),
                   tie_word_embeddings=False),
         head_dim=32,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # Not a committed fixture (1.2 GB): tools/device/check.sh builds it on the GPU
    # machine (--only qwen3_0.6b_shape) for the teacher-forced comparison of issue 6.
    # Qwen3-0.6B's real shapes with transformers' own random init (hf_init: weights
    # ~ N(0, initializer_range)), so logits are flat and greedy ties are common:
    # the comparison that counts is the teacher-forced one, with tolerances set
    # from transformers' own bf16 drift on the same tokens (bf16_reference).
    dict(name="qwen3_0.6b_shape", cfg_cls=Qwen3Config, model_cls=Qwen3ForCausalLM,
         dtype=torch.bfloat16, on_request=True, hf_init=True, bf16_reference=True,
         base=dict(COMMON, vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                   num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                   head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                   tie_word_embeddings=True, attention_bias=False,
                   use_sliding_window=False, sliding_window=None),
         head_dim=128,
         rope=dict(rope_type="default", rope_theta=1000000.0)),
    # DeepSeek-V2-Lite's shape (issue 14): a plain q_proj (q_lora_rank null), topk_method greedy (softmax,
    # not renormalised), routed_scaling_factor 1.5, RoPE on interleaved pairs (apply_rotary_emb).
    dict(name="deepseek_v2_lite", cfg_cls=DeepseekV2Config, model_cls=DeepseekV2ForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(DEEPSEEK, q_lora_rank=None, topk_method="greedy", norm_topk_prob=False,
                   routed_scaling_factor=1.5),
         variants=[dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
                   dict(rope_theta=10000.0)],
         head_dim=8,
         rope=dict(rope_type="default", rope_theta=10000.0)),
    # DeepSeek-V2 with q_a_proj / q_a_layernorm / q_b_proj (q_lora_rank 32) and YaRN (factor 4 over an original
    # 64 positions; no mscale / mscale_all_dim: transformers' DeepseekV2Attention has no mscale^2 softmax factor,
    # vLLM and vllm.c apply it when mscale_all_dim is set, so this case leaves it out).
    dict(name="deepseek_v2_yarn", cfg_cls=DeepseekV2Config, model_cls=DeepseekV2ForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True,
         base=dict(DEEPSEEK, q_lora_rank=32, topk_method="greedy", norm_topk_prob=False,
                   routed_scaling_factor=1.0),
         variants=[dict(rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, beta_fast=32.0,
                                             beta_slow=1.0, original_max_position_embeddings=64)),
                   dict(rope_theta=10000.0, rope_scaling=dict(type="yarn", factor=4.0, beta_fast=32.0,
                                                               beta_slow=1.0, original_max_position_embeddings=64))],
         head_dim=8,
         rope=dict(rope_type="yarn", rope_theta=10000.0)),
    # DeepSeek-V3: noaux_tc routing (its only router; vllm.c's default for V3 without topk_method) (sigmoid scores, a random e_score_correction_bias for the choice, 2 groups of
    # 4 experts with the best 1 kept, renormalised, routed_scaling_factor 2.5), q_lora_rank 32, rope_interleave,
    # YaRN with mscale = mscale_all_dim = 1 as V3 ships it (cos/sin unscaled, the softmax scale times mscale^2).
    # vllm.c runs it once the MoE op's DeepSeek routing lands (it refuses noaux_tc until then).
    dict(name="deepseek_v3", cfg_cls=DeepseekV3Config, model_cls=DeepseekV3ForCausalLM,
         dtype=torch.bfloat16, custom=True, bf16_reference=True, post_init=deepseek_score_bias,
         base=dict(DEEPSEEK, q_lora_rank=32, n_group=2, topk_group=1, norm_topk_prob=True,
                   routed_scaling_factor=2.5, rope_interleave=True),  # DeepseekV3Config has no topk_method
         variants=[dict(rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, mscale=1.0,
                                             mscale_all_dim=1.0, beta_fast=32.0, beta_slow=1.0,
                                             original_max_position_embeddings=64)),
                   dict(rope_theta=10000.0, rope_scaling=dict(type="yarn", factor=4.0, mscale=1.0, mscale_all_dim=1.0,
                                                               beta_fast=32.0, beta_slow=1.0,
                                                               original_max_position_embeddings=64))],
         head_dim=8,
         rope=dict(rope_type="yarn", rope_theta=10000.0)),
]

# -----------------------------------------------------------------------------
# rope: what inv_freq the model must end up with (checked against the model's
# rotary embedding, so a config key transformers silently ignored is caught)

def expected_inv_freq(rope, head_dim):
    base = rope["rope_theta"]
    inv = [1.0 / (base ** (i / head_dim)) for i in range(0, head_dim, 2)]
    kind = rope["rope_type"]
    if kind == "default":
        return inv
    if kind == "linear":
        return [f / rope["factor"] for f in inv]
    if kind == "llama3":
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        lo_wavelen, hi_wavelen = old / lo, old / hi
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < hi_wavelen:
                out.append(f)
            elif wavelen > lo_wavelen:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - lo) / (hi - lo)
                out.append((1 - smooth) * f / factor + smooth * f)
        return out
    raise ValueError(f"unknown rope_type {kind}")


def rotary_inv_freq(model):
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "inv_freq"):
            return [float(x) for x in m.inv_freq.detach().float().cpu()]
    raise RuntimeError("no rotary embedding module with inv_freq found")


def inv_freq_matches(model, rope, head_dim):
    got = rotary_inv_freq(model)
    want = expected_inv_freq(rope, head_dim)
    if len(got) != len(want):
        return False
    return all(abs(g - w) <= 1e-5 * abs(w) + 1e-12 for g, w in zip(got, want))


def config_attempts(case, rope):
    """Config kwargs to try, newest transformers spelling first."""
    base = dict(case["base"])
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    # transformers 5: one rope_parameters dict carrying rope_theta too
    yield dict(base, rope_parameters=dict(rope))
    # transformers 4.x: rope_theta + rope_scaling (None for default rope)
    legacy = dict(base, rope_theta=rope["rope_theta"])
    if rope["rope_type"] != "default":
        legacy["rope_scaling"] = dict(scaling, type=rope["rope_type"])
    yield legacy


def build_config(case, rope):
    """Returns (config, fresh model) whose rotary inv_freq matches `rope`, or None."""
    if case.get("custom"):  # the class's own RoPE defaults (several tables: no single inv_freq)
        errors = []
        for extra in case.get("variants", [{}]):  # newest transformers spelling first
            try:
                cfg = case["cfg_cls"](**dict(case["base"], **extra))
                try:
                    cfg._attn_implementation = "eager"
                except Exception:
                    pass
                model = case["model_cls"](cfg)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if case.get("check") and not case["check"](model):
                errors.append(f"check failed with kwargs {sorted(extra)}")
                continue
            return cfg, model
        print(f"  [{case['name']}] no config accepted: " + " | ".join(errors))
        return None
    errors = []
    for kw in config_attempts(case, rope):
        try:
            cfg = case["cfg_cls"](**kw)
            try:
                cfg._attn_implementation = "eager"
            except Exception:
                pass
            model = case["model_cls"](cfg)
        except Exception as e:  # a key this version rejects
            errors.append(f"{type(e).__name__}: {e}")
            continue
        if inv_freq_matches(model, rope, case["head_dim"]):
            return cfg, model
        errors.append(f"inv_freq mismatch with kwargs {sorted(kw)}")
    print(f"  [{case['name']}] rope {rope} not accepted: " + " | ".join(errors))
    return None

# -----------------------------------------------------------------------------
# init, save, reload

def randomise(model, embed_std=EMBED_STD):
    """Overwrite every parameter: weights/biases ~ N(0, STD), norm weights 1 + STD*N,
    embeddings / lm_head ~ N(0, embed_std)."""
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + STD * torch.randn(p.shape))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(embed_std * torch.randn(p.shape))
            else:
                p.copy_(STD * torch.randn(p.shape))


def save(model, out_dir, dtype):
    model = model.to(dtype)
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:  # safe_serialization dropped (always safetensors)
        model.save_pretrained(out_dir)
    GenerationConfig(bos_token_id=BOS, eos_token_id=EOS).save_pretrained(out_dir)
    path = os.path.join(out_dir, "model.safetensors")
    if not os.path.exists(path):
        raise RuntimeError(f"{out_dir}: save_pretrained wrote no model.safetensors: "
                           f"{sorted(os.listdir(out_dir))}")
    # config.json must state the saved dtype ("torch_dtype" in 4.x, "dtype" in 5.x)
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg_json = json.load(f)
    dname = {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    keys = [k for k in ("dtype", "torch_dtype") if k in cfg_json] or ["torch_dtype"]
    if any(cfg_json.get(k) != dname for k in keys):
        for k in keys:
            cfg_json[k] = dname
        with open(cfg_path, "w") as f:
            json.dump(cfg_json, f, indent=2, sort_keys=True)
            f.write("\n")
    want = {torch.bfloat16: "BF16", torch.float16: "F16"}[dtype]
    with safe_open(path, framework="pt") as f:
        names = list(f.keys())
        for n in names:
            got = str(f.get_slice(n).get_dtype())
            if got != want:
                raise RuntimeError(f"{path}: tensor {n} saved as {got}, expected {want}")
    # keep the saved-precision weights for the reload comparison
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, names


def reload(case, out_dir):
    model, info = case["model_cls"].from_pretrained(
        out_dir, attn_implementation="eager", output_loading_info=True)
    bad = [k for k in info.get("missing_keys", []) if "lm_head" not in k]
    if bad or info.get("unexpected_keys") or info.get("mismatched_keys"):
        raise RuntimeError(f"{out_dir}: reload problems: {info}")
    return model.float().eval()

# -----------------------------------------------------------------------------
# greedy reference

@torch.no_grad()
def greedy(model, prompt, device):
    ids = list(prompt)
    toks, lps, gaps = [], [], []
    for _ in range(NEW_TOKENS):
        x = torch.tensor([ids], dtype=torch.long, device=device)
        logits = model(input_ids=x, use_cache=False).logits[0, -1].float()
        lp = torch.log_softmax(logits, dim=-1)
        tok = int(torch.argmax(lp))
        top2 = torch.topk(lp, 2).values
        toks.append(tok)
        lps.append(float(lp[tok]))
        gaps.append(float(top2[0] - top2[1]))
        ids.append(tok)
    return toks, lps, gaps


@torch.no_grad()
def last_logits(model, prompt, device):
    x = torch.tensor([prompt], dtype=torch.long, device=device)
    return model(input_ids=x, use_cache=False).logits[0, -1].float().cpu()


@torch.no_grad()
def bf16_drift(case, out_dir, results, device):
    """transformers itself in bf16, teacher-forced on the recorded continuations,
    against the f32 reference: the yardstick for a bf16 engine. Returns the drift
    and the tolerances a test should use: twice the drift, at least 0.05 (max) /
    0.01 (mean)."""
    model = case["model_cls"].from_pretrained(out_dir, attn_implementation="eager",
                                              dtype=torch.bfloat16).to(device).eval()
    worst, tot, n = 0.0, 0.0, 0
    for r in results:
        P = len(r["prompt_token_ids"])
        x = torch.tensor([r["prompt_token_ids"] + r["token_ids"]], dtype=torch.long, device=device)
        lp = torch.log_softmax(model(input_ids=x, use_cache=False).logits[0].float(), dim=-1)
        for j, t in enumerate(r["token_ids"]):
            d = abs(float(lp[P - 1 + j, t]) - r["logprobs"][j])
            worst, tot, n = max(worst, d), tot + d, n + 1
    del model
    noise = noise_drift(case, out_dir, results, device)
    return dict(bf16_max=worst, bf16_mean=tot / n, noise_max=noise, tf_max=max(0.05, 2 * worst, 2 * noise),
                tf_mean=max(0.01, 2 * tot / n))


@torch.no_grad()
def noise_drift(case, out_dir, results, device, rel=2.0 ** -9, draws=8):
    """The f32 reference teacher-forced with every Linear's input scaled by 1 +- rel (random signs; rel 2^-9 is
    BF16's rounding of activations), draws times: the largest |logprob - recorded| over all draws. One bf16 run
    samples that spread once; a tiny random model can sit near a knife edge (glm4_partial: 0.20 for transformers'
    bf16, 0.7 under this noise at one position), so the teacher-forced bound takes the larger of the two."""
    model = reload(case, out_dir).to(device)
    state = {"gen": None}

    def hook(m, args):
        x = args[0]
        r = torch.randint(0, 2, x.shape, generator=state["gen"], device="cpu").to(x.device, x.dtype) * 2 - 1
        return (x * (1 + rel * r),)

    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(hook)
    worst = 0.0
    for seed in range(draws):
        state["gen"] = torch.Generator().manual_seed(seed)
        for r in results:
            P = len(r["prompt_token_ids"])
            x = torch.tensor([r["prompt_token_ids"] + r["token_ids"]], dtype=torch.long, device=device)
            lp = torch.log_softmax(model(input_ids=x, use_cache=False).logits[0].float(), dim=-1)
            for j, t in enumerate(r["token_ids"]):
                worst = max(worst, abs(float(lp[P - 1 + j, t]) - r["logprobs"][j]))
    del model
    return worst


def retolerance(case, out_dir, device):
    """An existing fixture's "tolerance" recomputed from its saved weights and recorded prompts (nothing else in
    expected.json changes)."""
    path = os.path.join(out_dir, "expected.json")
    with open(path) as f:
        expected = json.load(f)
    old = expected.get("tolerance")
    expected["tolerance"] = bf16_drift(case, out_dir, expected["prompts"], device)
    print(f"  [{case['name']}] tolerance {old} -> {expected['tolerance']}")
    with open(path, "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


def make_prompts(case_index, vocab, lens=PROMPT_LENS):
    rng = random.Random(SEED * 100 + case_index)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lens]


def run_case(index, case, out_root, device):
    name = case["name"]
    if case["cfg_cls"] is None:
        print(f"  [{name}] skipped: this transformers has no such model class")
        return None
    out_dir = os.path.join(out_root, name)
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):  # stale files from an earlier run
        if f.endswith((".safetensors", ".json")):
            os.remove(os.path.join(out_dir, f))

    rope = case["rope"]
    torch.manual_seed(SEED + index)  # hf_init cases: transformers initialises in the constructor
    built = build_config(case, rope)
    if built is None and case.get("rope_optional"):
        rope = dict(rope_type="default", rope_theta=rope["rope_theta"])
        print(f"  [{name}] falling back to default rope")
        built = build_config(case, rope)
    if built is None:
        raise RuntimeError(f"{name}: could not build a config with rope {rope}")
    cfg, model = built

    torch.manual_seed(SEED + index)
    if not case.get("hf_init"):
        randomise(model, case.get("embed_std", EMBED_STD))
    if case.get("post_init"):  # a family's own tweaks after the random init
        with torch.no_grad():
            case["post_init"](model)
    saved, names = save(model, out_dir, case["dtype"])
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if tied and "lm_head.weight" in names:
        print(f"  [{name}] note: tied model still saved lm_head.weight")

    model = reload(case, out_dir)
    # reloaded weights must be exactly the saved (rounded) ones
    sd = model.state_dict()
    for k, v in saved.items():
        if k not in sd or not torch.equal(sd[k].float(), v.float()):
            raise RuntimeError(f"{name}: reloaded tensor {k} differs from the saved one")
    if not case.get("custom") and not inv_freq_matches(model, rope, case["head_dim"]):
        raise RuntimeError(f"{name}: reloaded model lost rope config {rope}")
    model.to(device)

    vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size  # multimodal: text_config
    prompts = make_prompts(index, vocab, case.get("prompt_lens", PROMPT_LENS))
    results = []
    for p in prompts:
        toks, lps, gaps = greedy(model, p, device)
        results.append(dict(prompt_token_ids=p, token_ids=toks, logprobs=lps, top2_gap=gaps))

    # does the sliding window actually change anything for the long prompt?
    # (same weights in a model built without it)
    swa_effective = None
    sw = getattr(model.config, "sliding_window", None)
    if sw:
        cfg2 = copy.deepcopy(model.config)
        cfg2.sliding_window = None
        if getattr(cfg2, "layer_types", None):  # Gemma: every layer global
            cfg2.sliding_window = 10 ** 6
        try:
            full = case["model_cls"](cfg2)
            full.load_state_dict(model.state_dict())
            full = full.float().eval().to(device)
            a = last_logits(model, prompts[-1], device)
            b = last_logits(full, prompts[-1], device)
            swa_effective = not torch.allclose(a, b)
        except Exception as e:
            print(f"  [{name}] sliding-window check skipped: {type(e).__name__}: {e}")
            swa_effective = None
        if not swa_effective:
            print(f"  [{name}] WARNING: sliding_window={sw} made no difference to "
                  f"the {len(prompts[-1])}-token prompt's logits")

    tolerance = None
    if case.get("bf16_reference"):
        tolerance = bf16_drift(case, out_dir, results, device)
        print(f"  [{name}] transformers bf16 vs f32: max|d| {tolerance['bf16_max']:.4f}, "
              f"mean|d| {tolerance['bf16_mean']:.4f}")

    expected = {
        "case": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": {torch.bfloat16: "bfloat16", torch.float16: "float16"}[case["dtype"]],
        "rope": rope,
        "sliding_window": sw or None,
        "sliding_window_effective": swa_effective,
        "new_tokens": NEW_TOKENS,
        "prompts": results,
    }
    if tolerance:
        expected["tolerance"] = tolerance
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")

    size = os.path.getsize(os.path.join(out_dir, "model.safetensors"))
    all_gaps = [g for r in results for g in r["top2_gap"]]
    return dict(case=name, params=sum(p.numel() for p in model.parameters()),
                size=size, min_gap=min(all_gaps),
                small=sum(g < 0.05 for g in all_gaps), n=len(all_gaps),
                rope=rope["rope_type"], swa=swa_effective)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", required=True, help="output folder (one subfolder per case)")
    ap.add_argument("--device", default="cpu", help="torch device for the reference (cpu)")
    ap.add_argument("--only", default=None, help="comma-separated case names")
    ap.add_argument("--retolerance", action="store_true",
                    help="recompute the tolerance of the --only cases already in --out, nothing else")
    args = ap.parse_args()

    torch.set_grad_enabled(False)
    if torch.cuda.is_available():  # full-precision fp32 matmuls for the reference
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:
        pass
    try:
        transformers.logging.set_verbosity_error()
    except Exception:
        pass

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"device {args.device}")
    only = set(args.only.split(",")) if args.only else None
    rows, failed = [], []
    for i, case in enumerate(CASES):
        if (only and case["name"] not in only) or (not only and case.get("on_request")):
            continue
        print(f"case {case['name']} ...")
        if args.retolerance:
            retolerance(case, os.path.join(args.out, case["name"]), args.device)
            continue
        try:
            row = run_case(i, case, args.out, args.device)
        except Exception as e:
            import traceback
            traceback.print_exc()
            failed.append(case["name"])
            print(f"  [{case['name']}] FAILED: {type(e).__name__}: {e}")
            continue
        if row:
            rows.append(row)

    print()
    print(f"{'case':<18} {'params':>8} {'bytes':>8} {'rope':>8} {'swa':>5} "
          f"{'min gap':>9} {'gaps<0.05':>10}")
    for r in rows:
        swa = "-" if r["swa"] is None else ("yes" if r["swa"] else "NO")
        print(f"{r['case']:<18} {r['params']:>8} {r['size']:>8} {r['rope']:>8} {swa:>5} "
              f"{r['min_gap']:>9.4f} {r['small']:>5}/{r['n']:<4}")
    if failed:
        print(f"FAILED cases: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
