/*
 * hf_quant.h: a checkpoint's config.json quantization_config -> quant_config (model/config.h).
 *
 * Read: quant_method "fp8" (vLLM's Fp8Config, vllm/model_executor/layers/quantization/fp8.py; transformers'
 * FineGrainedFP8Config) with weight_block_size [bn, 128] and activation_scheme "dynamic" (weight_scale_inv per
 * block), or without it (AutoFP8: one weight_scale per matrix, activation_scheme dynamic or static); the layers
 * ignored_layers / modules_to_not_convert name are stored in BF16 in such checkpoints and loaded as such.
 * "awq" (bits 4, group_size, zero_point true, version gemm) and "gptq" (bits 4, group_size, desc_act, sym,
 * checkpoint_format gptq / gptq_v2): 4-bit weights read back by tensor/int4.h. "compressed-tensors" with every
 * config group in one scheme: pack-quantized W4A16 (4-bit symmetric int weights by group or channel, actorder;
 * no activation quantization; tensor/int4.h) or float-quantized FP8 W8A8 (E4M3 weights with a weight_scale per
 * tensor, channel or [bn, 128] block; 8-bit float input activations, dynamic or static). F8_E4M3 weights of
 * every scheme load as FP8_B128 rows (model/weights.c). "modelopt" (NVIDIA ModelOpt, config.json's flat form or
 * hf_quant_config.json's "quantization" object, which hf_config_load reads when config.json has none): quant_algo
 * FP8 (per-tensor weight_scale, static input_scale) and FP8_PER_CHANNEL_PER_TOKEN, kv_cache_quant_algo FP8.
 * NVFP4 weights (QUANT_NVFP4, tensor/fp4.h): compressed-tensors' nvfp4-pack-quantized groups (4-bit float,
 * tensor_group, group 16; W4A16, or W4A4 run weight-only) and ModelOpt's NVFP4 / W4A16_NVFP4. A family's own quant_method (gpt-oss's "mxfp4") is
 * QUANT_FAMILY. A compressed-tensors kv_cache_scheme (8-bit float, per tensor, static: each layer's k_scale /
 * v_scale, which --kv-cache-dtype fp8 uses; alone or beside weight groups) sets kv_fp8_scales. Everything else
 * (compressed-tensors' int-quantized / naive / nvfp4 formats, FP8 weights without activation quantization,
 * asymmetric groups, sparsity, per-head KV-cache scales; bitsandbytes, awq gemv / without zero
 * points, 2 / 3 / 8 bits, e5m2, other block widths) is VLLM_ERR_UNSUPPORTED naming the scheme or the key.
 */
#ifndef VLLM_LOADER_HF_QUANT_H
#define VLLM_LOADER_HF_QUANT_H

#include "model/config.h"
#include "vllm.h"

struct json_t;

/* quant: config.json's quantization_config value, or NULL when absent; family_method: the family's own
 * quant_method or NULL; what: the file, for messages. */
vllm_status hf_quant_parse(const struct json_t *quant, const char *what, const char *family_method, quant_config *out);

#endif
