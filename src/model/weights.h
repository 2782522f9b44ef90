/*
 * weights.h: where a model's weights come from: the memory-mapped
 * safetensors of the folder, a GGUF file, or (load format "dummy") random values
 * generated from config.json alone, as vLLM's --load-format dummy.
 * The source must outlive the model: the CPU backend uses weights in place.
 */
#ifndef VLLM_MODEL_WEIGHTS_H
#define VLLM_MODEL_WEIGHTS_H

#include "model/config.h"
#include "tensor/tensor.h"
#include "core/error.h"
#include "vllm.h"

typedef struct weight_source weight_source;

/* dummy: random weights (dummy.h's values for seed) instead of the folder's safetensors;
 * dummy_on_device: the backend fills them itself (backend.dummy_fill), so tensors of two or more
 * dims point into a dummy arena and the host generates only the small ones (norms, biases). */
vllm_status ws_open(const char *dir, const model_config *cfg, bool dummy, bool dummy_on_device, uint64_t seed,
                    weight_source **out);
/* The tensors of an opened GGUF file (the source takes it over, also on failure), under their Hugging Face
 * names (loader/gguf_config.h's mapping). F32 / F16 / BF16 tensors, and matrices of the block dtypes in
 * native_blocks (backend.native_blocks), are used in place (rows of llama.cpp's permuted q / k projections
 * put back in a copy); other block-type tensors are dequantized to F32 copies (MXFP4, gpt-oss's experts: BF16, exact). ws_log_summary says how
 * much went each way. */
struct gguf_file;
vllm_status ws_open_gguf(struct gguf_file *f, uint32_t native_blocks, weight_source **out);
/* The block dtypes the backend takes (backend.native_blocks), for a safetensors source: a block-scaled FP8
 * checkpoint's F8_E4M3 matrices (and their weight_scale_inv) are handed out as FP8_B128 rows (tensor/fp8.h)
 * when it takes those, else as F32 copies of their values; an AWQ / GPTQ checkpoint's 4-bit weights
 * ('x.weight' read from x.qweight / qzeros / scales / g_idx) as I4_B128 rows (tensor/int4.h) when it takes
 * those and every run of 32 features shares its group (not act-order orders that split them), else as F32
 * copies. Until set: F32 copies. */
void ws_set_native_blocks(weight_source *ws, uint32_t native_blocks);
void ws_close(weight_source *ws);
/* One info line on what loading made of the source (GGUF: the dequantized copies), if anything. */
void ws_log_summary(const weight_source *ws);
/* A host tensor `name` of exactly this shape (F32/F16/BF16), or an error
 * naming the file and tensor. */
vllm_status ws_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out);
/* A host tensor `name` of exactly dtype dt and this shape, for formats the model unpacks itself (MXFP4
 * experts' U8 blocks and scales); dummy weights hold none (VLLM_ERR_NOT_FOUND). */
vllm_status ws_get_as(weight_source *ws, const char *name, dtype dt, int ndim, const int64_t *shape, tensor *out);
/* Frees the dummy weights handed out so far (a backend that copies what it
 * imports no longer needs them: the host then never holds the whole model).
 * Tensors from earlier ws_get calls must not be used afterwards. A no-op for
 * safetensors, whose mapping ws_close releases. */
void ws_release_copied(weight_source *ws);
/* Whether the weights are --load-format dummy's (random values: no layout to rearrange, and on a device
 * with dummy_fill their host pointers must not be read). */
bool ws_is_dummy(const weight_source *ws);
/* Whether the checkpoint holds a tensor of that name (dummy weights hold every name). */
bool ws_has(const weight_source *ws, const char *name);
/* A checkpoint tensor of one value (shape () or (1), F32 / F16 / BF16) as a float: VLLM_ERR_NOT_FOUND when absent
 * (or from GGUF / dummy weights), VLLM_ERR_FORMAT for another shape. */
vllm_status ws_get_scalar(weight_source *ws, const char *name, float *out);
/* printf-style name; convenience for per-layer names. */
vllm_status ws_getf(weight_source *ws, tensor *out, int ndim, const int64_t *shape,
                    const char *fmt, ...) VT_PRINTF(5, 6);

#endif
