/*
 * hf_quant.h: a checkpoint's config.json quantization_config -> quant_config (model/config.h).
 *
 * Read: quant_method "fp8" with weight_block_size [bn, 128] and activation_scheme "dynamic" (vLLM's Fp8Config
 * block path, vllm/model_executor/layers/quantization/fp8.py; transformers' FineGrainedFP8Config): the
 * F8_E4M3 weights and their weight_scale_inv are loaded as FP8_B128 rows (model/weights.c); the layers
 * ignored_layers / modules_to_not_convert name are stored in BF16 in such checkpoints and loaded as such.
 * "awq" (bits 4, group_size, zero_point true, version gemm) and "gptq" (bits 4, group_size, desc_act, sym,
 * checkpoint_format gptq / gptq_v2) and "compressed-tensors" in its pack-quantized W4A16 scheme (4-bit
 * symmetric int weights by group or channel, actorder; no activation quantization): 4-bit weights read back
 * by tensor/int4.h. A family's own quant_method (gpt-oss's "mxfp4") is QUANT_FAMILY. Everything else
 * (compressed-tensors' float-quantized / int-quantized / naive formats, asymmetric or activation-quantizing
 * groups, sparsity, KV-cache schemes; bitsandbytes, awq gemv / without zero points, 2 / 3 / 8 bits, fp8
 * per-tensor or static, e5m2, other block widths) is VLLM_ERR_UNSUPPORTED naming the scheme or the key.
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
