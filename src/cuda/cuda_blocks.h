/*
 * cuda_blocks.h: ggml block-type weights (tensor.h DTYPE_Q8_0 .. DTYPE_IQ4_XS, GGUF matrices) on the
 * CUDA backend, ops_linear_blocks.cu. CUDA C++ only; used by ops_linear.cu (linear_create / linear /
 * linear_fused on block weights), ops_elementwise.cu (embedding from a block table), ops_moe.cu
 * (experts_create from block weights) and cuda_backend.cu (import of block tensors, native_blocks).
 *
 * The device layout of a linear layer's blocks and the kernels are described at the top of
 * ops_linear_blocks.cu.
 */
#ifndef VLLM_CUDA_CUDA_BLOCKS_H
#define VLLM_CUDA_CUDA_BLOCKS_H

#include "cuda/cuda_internal.h"

/* A linear layer's block weights on the device (all parts stacked: rows (sum out_i), in elements). */
typedef struct cu_qweight cu_qweight;

/* The block dtypes the kernels run, as backend.native_blocks bits (bit dt - DTYPE_FIRST_BLOCK). */
uint32_t cu_qtypes(void);
static inline bool cu_qtype_ok(dtype dt) {
    return dtype_is_block(dt) && ((cu_qtypes() >> (dt - DTYPE_FIRST_BLOCK)) & 1u);
}
/* Bytes of a row of K elements (K a multiple of the block) in the file's layout. */
size_t cu_qrow_bytes(dtype dt, int64_t K);

/* Uploads the n parts w[i] (out_i, in) (host tensors of one block dtype, rows possibly strided by whole
 * blocks; checked by the caller) as one (total, in) weight in the device layout. */
vllm_status cu_qweight_create(cu_state *cu, const tensor *const *w, int n, int64_t in, int64_t total,
                              cu_qweight **out);
void cu_qweight_free(cu_qweight *qw);

/* The decode GEMV: batches of up to CU_QGEMV_MAX_T tokens, BF16 x with 16-byte aligned rows. */
#define CU_QGEMV_MAX_T 8
bool cu_qgemv_fits(const cu_qweight *qw, const tensor *x, int64_t T);
/* y (T, N) = (acc: y +) x W^T + bias, x (T, in) BF16, bias (rows) F32 or NULL; glu: W is (2N, in) and
 * y = act(x Wg^T + bg) * (x Wu^T + bu) (act: be_act < CU_ACT_COUNT). Shapes checked by the caller.
 * x is quantized to int8 into cu->qx_ws first unless quantize_x is false: the layer's later segments on the
 * same x reuse the first one's (or VLLM_CUDA_QGEMV_XQ=0: the BF16 x itself). */
void cu_qgemv(cu_state *cu, const cu_qweight *qw, const float *bias, const tensor *x, tensor *y, bool glu, int act,
              bool acc, bool quantize_x);
/* The int8 activations' workspace for rows of K elements (linear_create reserves it for its layer). */
vllm_status cu_qx_reserve(cu_state *cu, int64_t K);
/* Per 32 elements of an activation row quantized for the GEMV: the scale d (q = round(x / d), d =
 * max|x| / 127) and the sums of q over elements 0..15 and 16..31. */
struct qx_meta {
    float d;
    short s0, s1;
};
/* Where cu_qgemv reads its int8 activations for rows of K elements (up to CU_QGEMV_MAX_T rows: xq rows K
 * bytes apart, xm rows K / 32 apart): a producer that writes them (a norm) lets the GEMV skip its own
 * quantization (quantize_x false). False when the int8 path is off (VLLM_CUDA_QGEMV_XQ=0) or the workspace
 * cannot be had. */
bool cu_qx_buffers(cu_state *cu, int64_t K, int8_t **xq, qx_meta **xm);
/* ops_elementwise.cu: out (T, D) BF16 = the norm of x (kind, w, b, eps: as cu_norm's vector kernel) and the
 * same BF16 values quantized into xq / xm (T rows) as cu_qgemv quantizes its x, in one kernel. False (nothing
 * launched) for what that kernel does not take: D not a multiple of 32, grouped weights, unaligned rows. */
bool cu_norm_qx(cu_state *cu, const tensor *x, be_norm_kind kind, const tensor *w, const tensor *b, float eps,
                tensor *out, int8_t *xq, qx_meta *xm);

/* Prefill: rows of W dequantized per tile into cu->qlin_ws (BF16), then the caller's GEMM. */
/* Rows per tile of this weight (the tile is at most CU_QTILE_BYTES of BF16) and the workspace it needs. */
#define CU_QTILE_BYTES ((size_t)32 << 20)
int64_t cu_qtile_rows(const cu_qweight *qw);
size_t cu_qtile_bytes(const cu_qweight *qw);
/* dst (rows, in) BF16 contiguous = rows [r0, r0 + rows) of W, each element rounded once from the f32 value
 * gq_dequantize_row gives. */
bool cu_qdequant(cu_state *cu, const cu_qweight *qw, int64_t r0, int64_t rows, __nv_bfloat16 *dst);

/* Rows of a block matrix in the file's layout on the device (row r at src + r * pitch, K elements, V rows)
 * dequantized: out[t] (T rows, os elements apart, dtype odt F32 / F16 / BF16) = row ids[t] (ids NULL: row
 * t), the f32 values of gq_dequantize_row rounded once. Bad ids are reported (CU_DEV_EMBED_ID) and their
 * rows skipped. pdl: launched as a decode-path op (embedding). */
bool cu_qraw_rows(cu_state *cu, const char *op, dtype dt, const void *src, size_t pitch, int64_t V,
                  const int32_t *ids, int64_t T, int64_t K, void *out, dtype odt, int64_t os, bool pdl);

/* embedding (backend.h) with a block table imported as it is (cu_import keeps the file's layout). */
void cu_qembedding(cu_state *cu, const tensor *table, const tensor *ids, tensor *out);

#endif
