/*
 * ops_linear.cu: the CUDA linear layer, y = x @ W^T + b, through cuBLASLt
 * (cuBLAS's GemmEx where cuBLASLt offers no algorithm).
 *
 * linear_create concatenates the parts (q|k|v, gate|up) into one BF16
 * (sum out_i, in) matrix on the device, converting F32 / F16 checkpoints
 * there (the host tensors are read once, in place), and the biases into one
 * F32 vector (zeros for parts without one). A forward is one GEMM with BF16
 * inputs, f32 accumulation and a BF16 or F32 output (the logits), plus a
 * bias pass when the layer has biases. Batches of 1 token (2 for small layers: gemv_fits) take a
 * bandwidth-bound GEMV kernel instead (decode), which also carries
 * linear_fused's stages: the input RMSNorm, plain or Gemma's (1 + w) (each
 * CTA normalises the rows into shared memory), the gated product (SiLU,
 * GELU-tanh, GELU, ReLU: a warp streams the gate and the up row together)
 * and the residual add (in the epilogue). The
 * residual add of larger batches is cuBLAS's beta = 1.
 *
 * Row-major y (T, out) = x (T, in) W^T is, in cuBLAS's column-major terms,
 * D (out, T) = op(A) B with A = W seen as (in, out) and transposed, B = x
 * seen as (in, T): m = out, n = T, k = in, lda = in, ldb = x's row stride,
 * ldc = y's row stride. Layouts and the heuristic's algorithm are cached
 * per shape (CU_LT_PLANS entries, replaced on collision).
 *
 * ggml block-type weights (GGUF; the dtypes cu_qtypes() lists) stay in their blocks on the device
 * (ops_linear_blocks.cu, cuda_blocks.h): decode batches run its block GEMV (bias, the gated product and
 * the residual add in its epilogue; linear_fused's norm runs first as its own op into f->h), larger
 * batches dequantize the rows tile by tile into cu->qlin_ws and run the GEMM below on each tile. Parts
 * may be in different block types (llama-quantize's mixes: Q4_K_M's attn_v in Q6_K beside q / k in
 * Q4_K): consecutive parts of one type form a segment with its own weight, GEMV launch and tiles, each
 * writing its columns of y (the gated product then runs as the composite unless gate and up are one
 * segment). A layer mixing block parts with F32 / F16 / BF16 ones is kept as one BF16 matrix, its block
 * parts dequantized on the device at creation.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_blocks.h"
#include "cuda/cuda_internal.h"

extern "C" {
#include "tensor/op_composite.h"
}

#define CU_LT_PLANS 256
#define CU_LT_TUNED 512          /* shapes timed at most (VLLM_CUDA_LT_TUNE) */
#define CU_LT_TUNE_CANDIDATES 16 /* cuBLASLt heuristics timed per shape */
#define CU_LT_TUNE_MAX_OUT (64u << 20)

struct be_linear {
    int64_t in;            /* input features (k) */
    int64_t out;           /* sum of the parts' rows (m) */
    __nv_bfloat16 *w;      /* (out, in) BF16, device; NULL for block weights */
    float *bias;           /* (out) F32, device, or NULL */
    int nq;                /* ggml block weights (cuda_blocks.h): segments of parts of one type, or 0 */
    struct cu_qseg *q;
    cu_f8w *f8;            /* FP8_B128 weights (ops_linear_fp8.cu), every part; NULL otherwise */
    cu_i4w *i4;            /* I4_B128 weights (ops_linear_int4.cu), every part; NULL otherwise */
};

/* consecutive parts of one block type: rows [r0, r0 + rows) of the layer */
struct cu_qseg {
    int64_t r0, rows;
    cu_qweight *qw;
};

/* a shape whose algorithm was chosen by timing (the plans' key) */
struct cu_lt_tuned {
    int64_t m, n, k, ldb, ldc;
    int ydt;
    unsigned align;
    cublasLtMatmulAlgo_t algo;
};

struct cu_lt_plan {
    bool used;
    bool tuned;            /* algo is the timed choice (VLLM_CUDA_LT_TUNE), not the heuristic's first */
    bool lt_ok;            /* false: cuBLASLt had no algorithm, use GemmEx */
    int64_t m, n, k, ldb, ldc;
    int ydt;
    unsigned align;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

/* ---- weights ---- */

static vllm_status upload_biases(cu_state *cu, be_linear *lin, const tensor *const *weights,
                                 const tensor *const *biases, int n);

/* every part FP8_B128 (one cu_f8w of their rows) or every part I4_B128 (one cu_i4w), the biases */
static vllm_status packed_linear_create(cu_state *cu, const tensor *const *weights, const tensor *const *biases, int n,
                                        int64_t in, dtype dt, be_linear **out) {
    if (cu->capturing) return vt_error(VLLM_ERR_BACKEND, "linear: not allowed while a graph is being recorded");
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const tensor *w = weights[i];
        if (w->ndim != 2 || w->shape[1] != in || w->shape[0] < 0 || (w->shape[0] > 0 && !w->data) ||
            (w->row_stride && w->row_stride != in) || in % dtype_block(dt) || w->shape[0] > INT_MAX - total)
            return vt_error(VLLM_ERR_INVALID_ARG, "linear: %s weight %d must be a contiguous (out, %lld) matrix of "
                            "whole blocks", dtype_name(dt), i, (long long)in);
        const tensor *b = biases ? biases[i] : NULL;
        if (b && (!b->data || b->ndim != 1 || b->shape[0] != w->shape[0] ||
                  (b->dtype != DTYPE_F32 && b->dtype != DTYPE_F16 && b->dtype != DTYPE_BF16)))
            return vt_error(VLLM_ERR_INVALID_ARG, "linear: bias %d must be a (%lld) float vector", i,
                            (long long)w->shape[0]);
        total += w->shape[0];
    }
    if (total == 0) return vt_error(VLLM_ERR_INVALID_ARG, "linear: no output features");
    be_linear *lin = (be_linear *)calloc(1, sizeof *lin);
    if (!lin) return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    lin->in = in;
    lin->out = total;
    vllm_status st = dt == DTYPE_FP8_B128 ? cu_f8w_create(cu, weights, n, in, total, &lin->f8)
                                          : cu_i4w_create(cu, weights, n, in, total, &lin->i4);
    if (st == VLLM_OK)
        st = cu_buf_reserve(cu, &cu->qlin_ws, lin->f8 ? cu_f8w_tile_bytes(lin->f8) : cu_i4w_tile_bytes(lin->i4),
                            "linear: dequantized weight tile");
    if (st == VLLM_OK && lin->i4)
        st = cu_buf_reserve(cu, &cu->i4g_ws, cu_i4w_gemm_ws_bytes(cu, lin->i4), "linear: int4 split-K partials");
    if (st == VLLM_OK) st = upload_biases(cu, lin, weights, biases, n);
    if (st != VLLM_OK) {
        cu_linear_free(NULL, lin);
        return st;
    }
    *out = lin;
    return VLLM_OK;
}

vllm_status cu_linear_create(backend *be, const tensor *const *weights, const tensor *const *biases, int n,
                             be_linear **out) {
    cu_state *cu = cu_of(be);
    *out = NULL;
    if (n < 1 || !weights) return vt_error(VLLM_ERR_INVALID_ARG, "linear: %d weight parts", n);
    const tensor *w0 = weights[0];
    if (!w0 || w0->ndim != 2) return vt_error(VLLM_ERR_INVALID_ARG, "linear: weight 0 must be a 2-D (out, in) tensor");
    dtype dt = w0->dtype;
    int64_t in = w0->shape[1];
    if (in <= 0 || in > INT_MAX) return vt_error(VLLM_ERR_INVALID_ARG, "linear: weight 0 has %lld input features", (long long)in);
    /* FP8_B128 (block-scaled FP8 checkpoints) / I4_B128 (AWQ, GPTQ): every part, one packed weight */
    for (int k = 0; k < 2; k++) {
        const dtype pd = k ? DTYPE_I4_B128 : DTYPE_FP8_B128;
        bool any = false, all = true;
        for (int i = 0; i < n; i++) {
            const bool f = weights[i] && weights[i]->dtype == pd;
            any |= f;
            all &= f;
        }
        if (any && !all)
            return vt_error(VLLM_ERR_UNSUPPORTED, "linear: %s parts mixed with other dtypes in one layer", dtype_name(pd));
        if (any) return packed_linear_create(cu, weights, biases, n, in, pd, out);
    }
    /* ggml block parts: each in a type the kernels take, rows of whole blocks; all block: segments of their
     * blocks, some float: one BF16 matrix (mixed) */
    bool any_block = false, all_block = true;
    for (int i = 0; i < n; i++) {
        const bool b = weights[i] && dtype_is_block(weights[i]->dtype);
        any_block |= b;
        all_block &= b;
    }
    for (int i = 0; any_block && i < n; i++) {
        const dtype d = weights[i] ? weights[i]->dtype : DTYPE_COUNT;
        if (d == DTYPE_F32 || d == DTYPE_F16 || d == DTYPE_BF16) continue;
        if (!cu_qtype_ok(d))
            return vt_error(VLLM_ERR_UNSUPPORTED, "linear: weight %d dtype %s (expected F32, F16, BF16 or a ggml block type)",
                            i, (unsigned)d < DTYPE_COUNT ? dtype_name(d) : "?");
        if (in % dtype_block(d))
            return vt_error(VLLM_ERR_INVALID_ARG, "linear: %s rows of %lld elements are not whole blocks of %lld",
                            dtype_name(d), (long long)in, (long long)dtype_block(d));
    }
    if (!any_block && dt != DTYPE_F32 && dt != DTYPE_F16 && dt != DTYPE_BF16)
        return vt_error(VLLM_ERR_UNSUPPORTED, "linear: weight dtype %s (expected F32, F16, BF16 or a ggml block type)",
                        dtype_name(dt));
    const bool block = all_block, mixed = any_block && !all_block;
    if (any_block && cu->capturing)
        return vt_error(VLLM_ERR_BACKEND, "linear: not allowed while a graph is being recorded");

    /* validate every part first: total rows, strides, biases */
    int64_t total = 0, max_rows = 0;
    bool any_bias = false;
    for (int i = 0; i < n; i++) {
        const tensor *w = weights[i];
        if (!w || w->ndim != 2 || (!any_block && w->dtype != dt) || w->shape[1] != in || w->shape[0] < 0)
            return vt_error(VLLM_ERR_INVALID_ARG, "linear: weight %d must be (out, %lld) %s like weight 0", i,
                            (long long)in, dtype_name(dt));
        int64_t stride = w->row_stride ? w->row_stride : in;
        if (stride < in || stride > INT64_MAX / 4 || w->shape[0] > INT_MAX - total || (w->shape[0] > 0 && !w->data) ||
            (dtype_is_block(w->dtype) && stride % dtype_block(w->dtype)))
            return vt_error(VLLM_ERR_INVALID_ARG, "linear: weight %d has a bad stride, size or no data", i);
        total += w->shape[0];
        if (w->shape[0] > max_rows) max_rows = w->shape[0];
        const tensor *b = biases ? biases[i] : NULL;
        if (b) {
            if (!b->data || b->ndim != 1 || b->shape[0] != w->shape[0] ||
                (b->dtype != DTYPE_F32 && b->dtype != DTYPE_F16 && b->dtype != DTYPE_BF16))
                return vt_error(VLLM_ERR_INVALID_ARG, "linear: bias %d must be a (%lld) float vector", i,
                                (long long)w->shape[0]);
            any_bias = true;
        }
    }
    if (total == 0) return vt_error(VLLM_ERR_INVALID_ARG, "linear: no output features");
    if (total > INT64_MAX / in / 2) return vt_error(VLLM_ERR_INVALID_ARG, "linear: weights too large");

    be_linear *lin = (be_linear *)calloc(1, sizeof *lin);
    if (!lin) return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    lin->in = in;
    lin->out = total;
    vllm_status st = VLLM_OK;
    void *stage = NULL;
    size_t wbytes = (size_t)total * (size_t)in * 2;
    cudaError_t e = cudaSuccess;
    if (block) { /* the blocks as they are (ops_linear_blocks.cu), the prefill tile's workspace at its size now */
        lin->q = (cu_qseg *)calloc((size_t)n, sizeof *lin->q);
        if (!lin->q) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
            goto done;
        }
        size_t tile = 0;
        for (int i = 0, row0 = 0; i < n && st == VLLM_OK;) {
            int j = i + 1;
            int64_t rows = weights[i]->shape[0];
            while (j < n && weights[j]->dtype == weights[i]->dtype) rows += weights[j++]->shape[0];
            cu_qseg *sg = &lin->q[lin->nq];
            sg->r0 = row0;
            sg->rows = rows;
            if (rows > 0) {
                st = cu_qweight_create(cu, weights + i, j - i, in, rows, &sg->qw);
                if (st == VLLM_OK) {
                    lin->nq++;
                    if (cu_qtile_bytes(sg->qw) > tile) tile = cu_qtile_bytes(sg->qw);
                }
            }
            row0 += (int)rows;
            i = j;
        }
        if (st == VLLM_OK) st = cu_buf_reserve(cu, &cu->qlin_ws, tile, "linear: dequantized weight tile");
        if (st == VLLM_OK) st = cu_qx_reserve(cu, in);
        if (st != VLLM_OK) goto done;
        goto biases;
    }
    e = cudaMalloc((void **)&lin->w, wbytes);
    if (e != cudaSuccess) {
        lin->w = NULL;
        cudaGetLastError();
        st = vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for a (%lld, %lld) weight", (long long)total,
                      (long long)in);
        goto done;
    }
    cu->bytes_allocated += wbytes;
    if (mixed) { /* the block parts' file rows are staged, at most max_rows * in * 4 bytes (F32's) */
        size_t sbytes = (size_t)max_rows * (size_t)in * 4;
        e = cudaMalloc(&stage, sbytes ? sbytes : 256);
        if (e != cudaSuccess) {
            stage = NULL;
            cudaGetLastError();
            st = vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for conversion (%zu bytes)", sbytes);
            goto done;
        }
    } else if (dt != DTYPE_BF16) {
        size_t sbytes = (size_t)max_rows * (size_t)in * dtype_size(dt);
        e = cudaMalloc(&stage, sbytes ? sbytes : 256);
        if (e != cudaSuccess) {
            stage = NULL;
            cudaGetLastError();
            st = vt_error(VLLM_ERR_NO_MEMORY, "linear: out of device memory for conversion (%zu bytes)", sbytes);
            goto done;
        }
    }
    {
        int64_t row0 = 0;
        size_t es = dtype_size(dt);
        for (int i = 0; i < n && st == VLLM_OK; i++) {
            const tensor *w = weights[i];
            int64_t rows = w->shape[0], stride = w->row_stride ? w->row_stride : in;
            if (rows == 0) continue;
            __nv_bfloat16 *dst = lin->w + row0 * in;
            const dtype wdt = w->dtype;
            if (dtype_is_block(wdt)) { /* a mixed layer's block part: dequantized into its rows */
                const size_t rb = cu_qrow_bytes(wdt, in);
                e = cu_h2d_2d(cu, stage, rb, w->data, cu_qrow_bytes(wdt, stride), rb, (size_t)rows, wdt);
                if (e == cudaSuccess &&
                    !cu_qraw_rows(cu, "linear", wdt, stage, rb, rows, NULL, rows, in, dst, DTYPE_BF16, in, false))
                    e = cudaErrorLaunchFailure;
                if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream); /* the stage is reused */
            } else if (mixed && wdt != DTYPE_BF16) { /* a mixed layer's F32 / F16 part */
                const size_t wes = dtype_size(wdt);
                e = cu_h2d_2d(cu, stage, (size_t)in * wes, w->data, (size_t)stride * wes, (size_t)in * wes, (size_t)rows,
                              wdt);
                if (e == cudaSuccess && !cu_convert_bf16(cu, dst, stage, wdt, rows, in, in)) e = cudaErrorLaunchFailure;
                if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
            } else if (wdt == DTYPE_BF16) {
                e = cu_h2d_2d(cu, dst, (size_t)in * 2, w->data, (size_t)stride * 2, (size_t)in * 2, (size_t)rows, wdt);
            } else {
                e = cu_h2d_2d(cu, stage, (size_t)in * es, w->data, (size_t)stride * es, (size_t)in * es, (size_t)rows,
                              dt);
                if (e == cudaSuccess && !cu_convert_bf16(cu, dst, stage, dt, rows, in, in)) e = cudaErrorLaunchFailure;
                if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream); /* the stage is reused */
            }
            if (e != cudaSuccess) {
                cudaGetLastError();
                st = vt_error(VLLM_ERR_BACKEND, "linear: upload of weight %d failed: %s", i, cudaGetErrorString(e));
            }
            row0 += rows;
        }
    }
biases:
    if (st == VLLM_OK && any_bias) st = upload_biases(cu, lin, weights, biases, n);
    if (st == VLLM_OK && cu->err != VLLM_OK) st = vt_error(cu->err, "linear: %s", cu->err_msg);
done:
    if (stage) cudaFree(stage);
    if (st != VLLM_OK) {
        cu_linear_free(be, lin);
        return st;
    }
    *out = lin;
    return VLLM_OK;
}

/* lin->bias (out) F32 on the device from the parts' biases (NULL ones: 0), when any is given */
static vllm_status upload_biases(cu_state *cu, be_linear *lin, const tensor *const *weights,
                                 const tensor *const *biases, int n) {
    bool any = false;
    for (int i = 0; biases && i < n; i++) any |= biases[i] != NULL;
    if (!any) return VLLM_OK;
    float *hb = (float *)calloc((size_t)lin->out, sizeof *hb);
    if (!hb) return vt_error(VLLM_ERR_NO_MEMORY, "linear: out of memory");
    int64_t row0 = 0;
    for (int i = 0; i < n; i++) {
        const tensor *b = biases[i];
        int64_t rows = weights[i]->shape[0];
        for (int64_t r = 0; b && r < rows; r++) {
            const unsigned char *p = (const unsigned char *)b->data;
            if (b->dtype == DTYPE_F32) {
                memcpy(&hb[row0 + r], p + 4 * r, 4);
            } else {
                uint16_t h;
                memcpy(&h, p + 2 * r, 2);
                hb[row0 + r] = b->dtype == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
            }
        }
        row0 += rows;
    }
    vllm_status st = VLLM_OK;
    cudaError_t e = cudaMalloc((void **)&lin->bias, (size_t)lin->out * sizeof(float));
    if (e != cudaSuccess) lin->bias = NULL;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(lin->bias, hb, (size_t)lin->out * sizeof(float), cudaMemcpyHostToDevice, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream); /* hb is freed below */
    if (e != cudaSuccess) {
        cudaGetLastError();
        st = vt_error(VLLM_ERR_BACKEND, "linear: bias upload failed: %s", cudaGetErrorString(e));
    }
    free(hb);
    return st;
}

bool cu_linear_plain_bf16(const be_linear *lin, int64_t out, int64_t in) {
    return lin && lin->w && !lin->nq && !lin->f8 && !lin->i4 && lin->out == out && lin->in == in &&
           (uintptr_t)lin->w % 16 == 0;
}
const __nv_bfloat16 *cu_linear_weights(const be_linear *lin) { return lin->w; }
const float *cu_linear_bias(const be_linear *lin) { return lin->bias; }

void cu_linear_free(backend *be, be_linear *lin) {
    (void)be;
    if (!lin) return;
    if (lin->w) cudaFree(lin->w);
    if (lin->bias) cudaFree(lin->bias);
    for (int i = 0; i < lin->nq; i++) cu_qweight_free(lin->q[i].qw);
    free(lin->q);
    cu_f8w_free(lin->f8);
    cu_i4w_free(lin->i4);
    free(lin);
}

/* ---- plans ---- */

static void plan_clear(cu_lt_plan *p) {
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

void cu_plans_free(cu_state *cu) {
    free(cu->tuned);
    cu->tuned = NULL;
    cu->ntuned = 0;
    cu_buf_free(&cu->tune_out);
    if (!cu->plans) return;
    for (int i = 0; i < CU_LT_PLANS; i++) plan_clear(&cu->plans[i]);
    free(cu->plans);
    cu->plans = NULL;
}

/* Largest power of two (<= 256) dividing the address. */
static unsigned ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

/* The cached plan for this shape, made (layouts + heuristic) on a miss. */
static cu_lt_plan *plan_get(cu_state *cu, int64_t m, int64_t n, int64_t k, int64_t ldb, int64_t ldc, dtype ydt,
                            unsigned align) {
    if (!cu->plans) {
        cu->plans = (cu_lt_plan *)calloc(CU_LT_PLANS, sizeof *cu->plans);
        if (!cu->plans) return NULL;
    }
    uint64_t h = 1469598103934665603ull;
    int64_t key[7] = {m, n, k, ldb, ldc, (int64_t)ydt, (int64_t)align};
    for (int i = 0; i < 7; i++) h = (h ^ (uint64_t)key[i]) * 1099511628211ull;
    cu_lt_plan *p = &cu->plans[h % CU_LT_PLANS];
    if (p->used && p->m == m && p->n == n && p->k == k && p->ldb == ldb && p->ldc == ldc && p->ydt == (int)ydt &&
        p->align == align)
        return p;
    plan_clear(p);
    p->used = true;
    p->m = m;
    p->n = n;
    p->k = k;
    p->ldb = ldb;
    p->ldc = ldc;
    p->ydt = (int)ydt;
    p->align = align;
    cudaDataType_t yt = ydt == DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF;
    if (cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, ldb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->c, yt, (uint64_t)m, (uint64_t)n, ldc) != CUBLAS_STATUS_SUCCESS)
        return p; /* lt_ok stays false */
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return p;
    size_t ws = cu->lt_ws.cap;
    uint32_t al = align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(cu->lt, cu->mm_desc, p->a, p->b, p->c, p->c, pref, 1, &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = res.algo;
        p->lt_ok = true;
        for (int i = 0; i < cu->ntuned; i++) { /* timed before (the plan was replaced on a collision since) */
            const cu_lt_tuned *t = &cu->tuned[i];
            if (t->m == m && t->n == n && t->k == k && t->ldb == ldb && t->ldc == ldc && t->ydt == (int)ydt &&
                t->align == align) {
                p->algo = t->algo;
                p->tuned = true;
                break;
            }
        }
    } else {
        LOG_D("cuda linear: no cuBLASLt algorithm for m %lld n %lld k %lld; using cublasGemmEx", (long long)m,
              (long long)n, (long long)k);
    }
    return p;
}

/* ---- forward ---- */

/* Decode-sized batches (T <= 8): a bandwidth-bound GEMV instead of
 * cuBLAS's tiled kernels, which leave most of the memory bandwidth unused
 * at these shapes. Decode is bound by how many weight bytes are in flight
 * (Little's law: at ~4.4 TB/s and a loaded latency of microseconds, about
 * 150-200 KB per SM), so the kernel keeps every resident warp streaming:
 *  - a persistent grid (as many CTAs as fit, from the occupancy API) whose
 *    CTAs take equal contiguous ranges of row groups (+-1), so no partial
 *    last wave leaves SMs idle;
 *  - a CTA of 8 warps takes 8 / KS rows at a time, KS warps per row
 *    (split-K, reduced through shared memory), KS chosen per shape for the
 *    best balance;
 *  - each lane walks its 16-byte chunks of all its rows as one flattened
 *    stream, GV_U chunks in registers and the next GV_U in flight, across
 *    row boundaries; the first loads are issued before pdl_wait() (weights
 *    are constant, so they stream while the previous kernel finishes).
 * The bias is added in the same kernel. The batch's x rows are re-read
 * from L1. Needs K % (256 * KS) == 0 (every lane the same number of chunks
 * per row) and 16-byte aligned x rows. Shapes whose rows fill more than a
 * wave of resident CTAs (the lm_head, gate_up), and other K, take
 * k_gemv_rows (a warp per row, a CTA per 8 rows), which measured 5-8%
 * faster there; the persistent kernel wins where the rows are few for the
 * GPU (H200, Qwen3 shapes: o / down projections of 0.6B 1.6-2.4x). */
#define GEMV_WARPS 8
#define GV_U 4

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) { return __ldcs(p); }

/* What a GEMV launch computes: y (T, N) (= or +=) in W^T + bias, in = x or,
 * with a norm, rms_norm(x) * nw (or * (1 + nw), Gemma's) as the norm op
 * rounds it: BF16. GLU kernels (k_gemv_rows<TT, 2, .>) read W as (2N, K):
 * output n is act(row n . in) * (row N + n . in), act SiLU, GELU-tanh, ... */
struct gv_args {
    const __nv_bfloat16 *W;      /* (N or 2N, K) */
    const __nv_bfloat16 *x;      /* (T, K), row stride xs */
    int64_t xs;
    void *y;                     /* (T, N) of dtype ydt, row stride ys */
    int ydt;
    int64_t ys;
    const float *bias;           /* per weight row, or NULL */
    int T, N, K;
    const __nv_bfloat16 *nw;     /* (K) RMSNorm weight (NORM kernels) */
    float eps;
    bool norm_offset;            /* the norm multiplies by 1 + nw (Gemma's RMSNorm): picks NK below */
    bool acc;                    /* y += instead of y = (the residual add) */
    int act;                     /* be_act of the gated form: picks ACT below */
    __nv_bfloat16 *h;            /* NORM kernels: the normalised rows also stored here (T, K) by CTA 0
                                    (linear_fused's f->h, which its callers may read), rows hs apart; or NULL */
    int64_t hs;
    /* RES kernels (linear_fuse res): x is first x + BF16(rms_norm(res) * rnw) (* (1 + rnw) with the offset
     * kinds), rounded as norm and add round it, which CTA 0 stores to rout (rows routs apart) */
    const __nv_bfloat16 *res;    /* (T, K), rows ress apart */
    int64_t ress;
    const __nv_bfloat16 *rnw;    /* (K) */
    float reps;
    __nv_bfloat16 *rout;
    int64_t routs;
};

/* The norm kinds and the gate's activation are template arguments of the kernels (NK: GV_NORM_*,
 * ACT: be_act), picked at launch from a.nw, a.norm_offset and a.act: the Llama / Qwen forms
 * (plain RMSNorm, SiLU) run the code they ran before the other kinds came, with no test per
 * element or output (a runtime switch there cost 13% on Qwen3-0.6B's gate_up, H200). */
#define GV_NORM_NONE 0
#define GV_NORM_RMS 1
#define GV_NORM_OFFSET 2 /* RMSNorm * (1 + nw) */
#define GV_NORM_RES_RMS 3    /* a pending residual add first (gv_args res), then RMSNorm; one token only */
#define GV_NORM_RES_OFFSET 4 /* the same with (1 + w) norms (Gemma's sandwich) */
static_assert(GV_NORM_RES_OFFSET + 1 == CU_GEMV_NK_COUNT, "cuda_internal.h's occupancy caches hold every norm kind");
__host__ __device__ constexpr bool gv_res(int nk) { return nk >= GV_NORM_RES_RMS; }
__host__ __device__ constexpr bool gv_offset(int nk) { return nk == GV_NORM_OFFSET || nk == GV_NORM_RES_OFFSET; }

/* acc[r][t] += dot(w[r] chunk, x[t] chunk c) for t < T, r < NR; x rows xs apart
 * (global memory, or the normalised rows in shared memory) */
template <int TT, int NR>
__device__ __forceinline__ void gemv_fma(const uint4 *w, const __nv_bfloat16 *x, int64_t xs, int c, int T,
                                         float (*acc)[TT]) {
    float wf[NR][8];
#pragma unroll
    for (int r = 0; r < NR; r++) bf16x8_to_f32(w[r], wf[r]);
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < T) {
            float xf[8];
            bf16x8_to_f32(*((const uint4 *)(x + (int64_t)t * xs) + c), xf);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                float sum = acc[r][t];
#pragma unroll
                for (int i = 0; i < 8; i++) sum += wf[r][i] * xf[i];
                acc[r][t] = sum;
            }
        }
    }
}

/* The norm weights' chunks a thread takes in the norm's prologue (threadIdx.x + j * blockDim.x, j < GV_NW_PRE(TT);
 * none for T > 2, whose kernels have no registers to spare), loaded before pdl_wait (constant), so that the
 * prologue's second pass needs no round trip. */
#define GV_NW_PRE(TT) ((TT) <= 2 ? 2 : 0)
#define GV_NW_ARR(TT) (GV_NW_PRE(TT) > 0 ? GV_NW_PRE(TT) : 1)
/* ... and the residual's norm weights' chunks after them (RES kinds) */
#define GV_NW_ALL(TT, NK) (GV_NW_ARR(TT) * (gv_res(NK) ? 2 : 1))
template <int TT, int NK>
__device__ __forceinline__ void gemv_nw_prefetch(const gv_args &a, uint4 *nwr) {
#pragma unroll
    for (int j = 0; j < GV_NW_PRE(TT); j++) {
        const int c = threadIdx.x + j * blockDim.x;
        nwr[j] = NK != GV_NORM_NONE && c < (a.K >> 3) ? __ldg((const uint4 *)a.nw + c) : make_uint4(0, 0, 0, 0);
        if constexpr (gv_res(NK))
            nwr[GV_NW_ARR(TT) + j] = c < (a.K >> 3) ? __ldg((const uint4 *)a.rnw + c) : make_uint4(0, 0, 0, 0);
    }
}

/* The CTA's RMS factors: inv[t] = 1 / sqrt(sum over the CTA of ss[t] / K + eps) (ss: each thread's partial sums
 * of squares; red: GEMV_WARPS x TT scratch, free again only after a barrier) */
template <int TT>
__device__ __forceinline__ void gemv_rms_inv(float *ss, float (*red)[TT], int K, float eps, float *inv) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        ss[t] = cu_warp_sum(ss[t]);
        if (lane == 0) red[warp][t] = ss[t];
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < TT; t++) {
        float tot = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += red[w][t];
        inv[t] = 1.0f / sqrtf(tot / (float)K + eps);
    }
}

/* The RES kinds' first stage, by the whole CTA: xr (T, K) in shared memory = BF16(x + BF16(res / sqrt(mean(res^2)
 * + reps) * rnw)) (offset kinds: * (1 + rnw)), as norm_add_norm rounds x; CTA 0 also stores it to a.rout. x's
 * chunks are loaded with res's (one round trip) and parked in xr until the sum replaces them (registers held
 * across the barrier spilled in the one-token gated kernel, held to 80). Each thread writes the chunks
 * threadIdx.x + j blockDim.x, which the norm's passes after it read back (the same thread's). rnwr:
 * gemv_nw_prefetch's residual norm chunks. */
template <int TT, int NK>
__device__ __forceinline__ void gemv_res_rows(const gv_args &a, float (*red)[TT], __nv_bfloat16 *xr,
                                              const uint4 *rnwr) {
    constexpr int PRE = GV_NW_PRE(TT);
    const int nc = a.K >> 3;
    auto chunk = [&](const __nv_bfloat16 *p, int64_t stride, int t, int c) {
        return *((const uint4 *)(p + (int64_t)t * stride) + c);
    };
    uint4 rv[GV_NW_ARR(TT)][TT];
    auto xr_chunk = [&](int t, int c) -> uint4 & { return ((uint4 *)(xr + (int64_t)t * a.K))[c]; };
    float ss[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) ss[t] = 0.0f;
    auto sum_sq = [&](int t, uint4 v) {
        float f[8];
        bf16x8_to_f32(v, f);
#pragma unroll
        for (int i = 0; i < 8; i++) ss[t] += f[i] * f[i];
    };
#pragma unroll
    for (int j = 0; j < PRE; j++) {
        const int c = threadIdx.x + j * blockDim.x;
#pragma unroll
        for (int t = 0; t < TT; t++) {
            const bool in = c < nc && t < a.T;
            rv[j][t] = in ? chunk(a.res, a.ress, t, c) : make_uint4(0, 0, 0, 0);
            if (in) xr_chunk(t, c) = chunk(a.x, a.xs, t, c);
            sum_sq(t, rv[j][t]);
        }
    }
    for (int c = threadIdx.x + PRE * blockDim.x; c < nc; c += blockDim.x)
#pragma unroll
        for (int t = 0; t < TT; t++)
            if (t < a.T) sum_sq(t, chunk(a.res, a.ress, t, c));
    float inv[TT];
    gemv_rms_inv<TT>(ss, red, a.K, a.reps, inv);
    __syncthreads(); /* red is the norm's next */
    auto put = [&](int c, uint4 nw, int t, uint4 r, uint4 x) {
        float nf[8], rf[8], xf[8];
        bf16x8_to_f32(nw, nf);
        bf16x8_to_f32(r, rf);
        bf16x8_to_f32(x, xf);
#pragma unroll
        for (int i = 0; i < 8; i++) rf[i] = rf[i] * inv[t] * (gv_offset(NK) ? 1.0f + nf[i] : nf[i]);
        bf16x8_to_f32(f32_to_bf16x8(rf), rf); /* the add sees the stored (rounded) norm */
#pragma unroll
        for (int i = 0; i < 8; i++) xf[i] += rf[i];
        const uint4 v = f32_to_bf16x8(xf);
        xr_chunk(t, c) = v;
        if (blockIdx.x == 0) ((uint4 *)(a.rout + (int64_t)t * a.routs))[c] = v;
    };
#pragma unroll
    for (int j = 0; j < PRE; j++) {
        const int c = threadIdx.x + j * blockDim.x;
#pragma unroll
        for (int t = 0; t < TT; t++)
            if (c < nc && t < a.T) put(c, rnwr[j], t, rv[j][t], xr_chunk(t, c));
    }
    for (int c = threadIdx.x + PRE * blockDim.x; c < nc; c += blockDim.x) {
        const uint4 nw = __ldg((const uint4 *)a.rnw + c);
#pragma unroll
        for (int t = 0; t < TT; t++)
            if (t < a.T) put(c, nw, t, chunk(a.res, a.ress, t, c), chunk(a.x, a.xs, t, c));
    }
}

/* The norm's prologue (after pdl_wait), by the whole CTA: xn (T, K) in shared
 * memory = BF16(x / sqrt(mean(x^2) + eps) * nw) (NK GV_NORM_OFFSET: * (1 + nw)),
 * as the norm op writes h; CTA 0 also stores them to a.h (when set: h must not
 * overlap x, which the other CTAs still read). red: GEMV_WARPS x TT scratch;
 * nwr: the thread's first GV_NW_PRE(TT) chunks of nw (gemv_nw_prefetch). */
template <int TT, int NK>
__device__ __forceinline__ void gemv_norm_rows(const gv_args &a, float (*red)[TT], __nv_bfloat16 *xn,
                                               const uint4 *nwr) {
    const int nc = a.K >> 3;
    /* the rows to normalise: x, or (RES) x plus the residual, made in xn first (each thread's own chunks,
     * normalised in place below) */
    const __nv_bfloat16 *xsrc = a.x;
    int64_t xstride = a.xs;
    if constexpr (gv_res(NK)) {
        gemv_res_rows<TT, NK>(a, red, xn, nwr + GV_NW_ARR(TT));
        xsrc = xn;
        xstride = a.K;
    }
    auto x_chunk = [&](int t, int c, float *xf) { bf16x8_to_f32(*((const uint4 *)(xsrc + (int64_t)t * xstride) + c), xf); };
    float ss[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) ss[t] = 0.0f;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
#pragma unroll
        for (int t = 0; t < TT; t++) {
            float xf[8];
            if (t < a.T) x_chunk(t, c, xf);
#pragma unroll
            for (int i = 0; i < 8; i++) ss[t] += t < a.T ? xf[i] * xf[i] : 0.0f;
        }
    }
    float inv[TT];
    gemv_rms_inv<TT>(ss, red, a.K, a.eps, inv);
    auto put = [&](int c, uint4 nw) {
        float nf[8];
        bf16x8_to_f32(nw, nf);
        if constexpr (gv_offset(NK)) {
#pragma unroll
            for (int i = 0; i < 8; i++) nf[i] = 1.0f + nf[i];
        }
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= a.T) continue;
            float xf[8];
            x_chunk(t, c, xf); /* (an L1 hit: the first pass read it) */
#pragma unroll
            for (int i = 0; i < 8; i++) xf[i] = xf[i] * inv[t] * nf[i];
            const uint4 v = f32_to_bf16x8(xf);
            ((uint4 *)(xn + (int64_t)t * a.K))[c] = v;
            if (a.h && blockIdx.x == 0) ((uint4 *)(a.h + (int64_t)t * a.hs))[c] = v;
        }
    };
#pragma unroll
    for (int j = 0; j < GV_NW_PRE(TT); j++) {
        const int c = threadIdx.x + j * blockDim.x;
        if (c < nc) put(c, nwr[j]);
    }
    for (int c = threadIdx.x + GV_NW_PRE(TT) * blockDim.x; c < nc; c += blockDim.x)
        put(c, __ldg((const uint4 *)a.nw + c));
    __syncthreads();
}

/* The GEMV's input rows after pdl_wait: x itself, or (NK != GV_NORM_NONE) the normalised rows in
 * shared memory. */
template <int TT, int NK>
__device__ __forceinline__ const __nv_bfloat16 *gemv_input(const gv_args &a, float (*red)[TT], unsigned char *smem,
                                                           int64_t *xs, const uint4 *nwr) {
    if constexpr (NK == GV_NORM_NONE) {
        *xs = a.xs;
        return a.x;
    }
    gemv_norm_rows<TT, NK>(a, red, (__nv_bfloat16 *)smem, nwr);
    *xs = a.K;
    return (const __nv_bfloat16 *)smem;
}

/* y[t, n] = v, or (acc) yold + v */
__device__ __forceinline__ void gemv_put(const gv_args &a, int t, int n, float v, float yold) {
    cu_st(a.y, a.ydt, (int64_t)t * a.ys + n, a.acc ? yold + v : v);
}
/* the old y[t, n] when accumulating (loaded a row ahead, so its latency hides) */
__device__ __forceinline__ float gemv_old(const gv_args &a, int t, int n) {
    return a.acc && t < a.T && n < a.N ? cu_ld(a.y, a.ydt, (int64_t)t * a.ys + n) : 0.0f;
}

// x (T, K) BF16, W (N, K) BF16 -> y (T, N) BF16 or F32 (+ bias (N) F32); T <= TT
template <int TT, int KS, int NK>
__global__ void __launch_bounds__(GEMV_WARPS * 32, TT <= 2 ? 4 : 3) k_gemv(gv_args a) {
    __shared__ float red[GEMV_WARPS][TT];
    extern __shared__ __align__(16) unsigned char gv_smem[]; /* NK: the normalised rows (T, K) */
    constexpr int RPC = GEMV_WARPS / KS; /* rows per group */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rw = warp / KS, ks = warp % KS;
    pdl_launch();
    const int N = a.N;
    const int G = (N + RPC - 1) / RPC;
    const int g0 = (int)((int64_t)blockIdx.x * G / gridDim.x), g1 = (int)((int64_t)(blockIdx.x + 1) * G / gridDim.x);
    const int64_t row_chunks = a.K >> 3;
    const int m = (int)(row_chunks / KS) >> 5; /* chunks per lane per row (the slice is a multiple of 32) */
    const int c0 = ks * (int)(row_chunks / KS) + lane; /* this lane's first chunk of a row */
    const int total = (g1 - g0) * m;                  /* this lane's chunks over all its rows */
    /* the load cursor walks the lane's stream: chunk li of row lrow (rows RPC apart) */
    int li = 0, lrow = g0 * RPC + rw, loaded = 0;
    const uint4 *lp = (const uint4 *)a.W + (int64_t)lrow * row_chunks + c0;
    auto next = [&]() -> uint4 {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (loaded < total && lrow < N) v = ld_stream(lp + 32 * li);
        loaded++;
        if (++li == m) {
            li = 0;
            lrow += RPC;
            lp += RPC * row_chunks;
        }
        return v;
    };
    uint4 cur[GV_U];
#pragma unroll
    for (int u = 0; u < GV_U; u++) cur[u] = next();
    uint4 nwr[GV_NW_ALL(TT, NK)];
    gemv_nw_prefetch<TT, NK>(a, nwr);
    int ci = 0, crow = g0 * RPC + rw; /* the compute cursor */
    /* the row's bias (a weight): the first before the wait, each next one as its row starts, not after the dot
     * product (a round trip at every row's tail) */
    auto bias_of = [&](int row) { return ks == 0 && a.bias && row < N ? a.bias[row] : 0.0f; };
    float bcur = bias_of(crow);
    pdl_wait();
    int64_t xs;
    const __nv_bfloat16 *xin = gemv_input<TT, NK>(a, red, gv_smem, &xs, nwr);
    float acc[1][TT];
#pragma unroll
    for (int t = 0; t < TT; t++) acc[0][t] = 0.0f;
    float yold = ks == 0 ? gemv_old(a, lane, crow) : 0.0f;
    for (int j0 = 0; j0 < total; j0 += GV_U) {
        uint4 nxt[GV_U];
#pragma unroll
        for (int u = 0; u < GV_U; u++) nxt[u] = next();
#pragma unroll
        for (int u = 0; u < GV_U; u++) {
            if (j0 + u < total) { /* uniform over the CTA */
                gemv_fma<TT, 1>(&cur[u], xin, xs, c0 + 32 * ci, a.T, acc);
                if (++ci == m) { /* the end of a row: reduce, write */
#pragma unroll
                    for (int t = 0; t < TT; t++) acc[0][t] = cu_warp_sum(acc[0][t]);
                    if (KS > 1) {
                        if (lane == 0)
#pragma unroll
                            for (int t = 0; t < TT; t++) red[warp][t] = acc[0][t];
                        __syncthreads();
                        if (ks == 0) {
#pragma unroll
                            for (int t = 0; t < TT; t++) {
                                float sum = 0.0f;
#pragma unroll
                                for (int q = 0; q < KS; q++) sum += red[warp + q][t];
                                acc[0][t] = sum;
                            }
                        }
                    }
                    if (ks == 0 && crow < N) {
#pragma unroll
                        for (int t = 0; t < TT; t++)
                            if (lane == t && t < a.T) gemv_put(a, t, crow, acc[0][t] + bcur, yold);
                    }
                    if (KS > 1) __syncthreads(); /* red is reused by the next row */
#pragma unroll
                    for (int t = 0; t < TT; t++) acc[0][t] = 0.0f;
                    ci = 0;
                    crow += RPC;
                    bcur = bias_of(crow);
                    if (ks == 0) yold = gemv_old(a, lane, crow);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < GV_U; u++) cur[u] = nxt[u];
    }
}

/* Any K % 8 == 0: one warp per output, a non-persistent grid (the general
 * fallback, and the large-N shapes). NR = 2 is the gated form: the warp
 * streams rows n and N + n and writes ACT(first) * second. Its one-token
 * form is held to 80 registers, 3 CTAs an SM instead of 2 (88 registers):
 * a gate_up's CTAs run in fewer, fuller waves (Qwen3-0.6B's 384 CTAs in one
 * wave of 396 on an H100 / H200 instead of 1.45 of 264; Gemma-3-12B's 1920
 * in 4.85 instead of 7.27: the partial last wave has too few bytes in
 * flight to stream at full bandwidth). */
#define GV_ROWS_MIN_CTAS(TT, NR) ((NR) == 2 && (TT) == 1 ? 3 : 1)
/* ... with 3 chunks of each row in flight a lane instead of GV_U (4), which would not fit (spills) */
#define GV_ROWS_U(TT, NR) ((NR) == 2 && (TT) == 1 ? 3 : GV_U)
template <int TT, int NR, int NK, int ACT>
__global__ void __launch_bounds__(GEMV_WARPS * 32, GV_ROWS_MIN_CTAS(TT, NR)) k_gemv_rows(gv_args a) {
    __shared__ float red[GEMV_WARPS][TT];
    extern __shared__ __align__(16) unsigned char gv_smem[];
    constexpr int U = GV_ROWS_U(TT, NR);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * GEMV_WARPS + warp, N = a.N;
    pdl_launch();
    const int KC = a.K >> 3;
    const uint4 *w[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) w[r] = (const uint4 *)(a.W + ((int64_t)(n < N ? n : 0) + (int64_t)r * N) * a.K);
    uint4 cur[U][NR];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = lane + 32 * u;
#pragma unroll
        for (int r = 0; r < NR; r++) cur[u][r] = n < N && c < KC ? ld_stream(w[r] + c) : make_uint4(0, 0, 0, 0);
    }
    uint4 nwr[GV_NW_ALL(TT, NK)];
    gemv_nw_prefetch<TT, NK>(a, nwr);
    float bias[NR]; /* a weight: loaded before the wait, not after the dot product (a round trip at the tail) */
#pragma unroll
    for (int r = 0; r < NR; r++) bias[r] = a.bias && n < N ? a.bias[n + r * N] : 0.0f;
    pdl_wait();
    int64_t xs;
    const __nv_bfloat16 *xin = gemv_input<TT, NK>(a, red, gv_smem, &xs, nwr);
    const float yold = gemv_old(a, lane, n);
    float acc[NR][TT];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;
    for (int base = 0; base < KC; base += 32 * U) {
        uint4 nxt[U][NR];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + 32 * U + lane + 32 * u;
#pragma unroll
            for (int r = 0; r < NR; r++) nxt[u][r] = n < N && c < KC ? ld_stream(w[r] + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + lane + 32 * u;
            if (c < KC) gemv_fma<TT, NR>(cur[u], xin, xs, c, a.T, acc);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < NR; r++) cur[u][r] = nxt[u][r];
    }
    if (n >= N) return;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        float v[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) v[r] = cu_warp_sum(acc[r][t]) + bias[r];
        if (lane == t && t < a.T) gemv_put(a, t, n, NR == 2 ? cu_act(ACT, v[0]) * v[NR - 1] : v[0], yold);
    }
}

/* Which batches the BF16 GEMV takes (else cuBLAS's tensor cores, the norm and residual add then as their own
 * kernels). Each weight chunk costs the GEMV T tokens' x conversions and FMAs, so it becomes instruction-bound as T
 * grows: at T 8 the H200 rows put it at 1.2-1.6 TB/s ((6144, 4096) 41.1 us, (24576, 4096) 127.9, (4096, 12288)
 * 108.9) where cuBLAS at T 16 streams the same weights at 3.2-4.1 TB/s (15.5, 48.4, 27.7 us). Decode steps on the
 * H200 (2026-12-05, tools/device/bench_small_batch.sh, ms a step with the GEMV up to T 1 / 2 / 4 / 8):
 *   Qwen3-8B    batch 2: 5.09 / 5.47 / 5.46,  batch 3: 5.18 / 5.20 / 8.26,  batch 4: 5.19 / 5.21 / 8.33,
 *               batch 8: - / - / 5.41 / 13.85
 *   Qwen3-0.6B  batch 2: 1.48 / 1.14 / 1.12,  batch 3: 1.39 / 1.40 / 1.49,  batch 4: 1.40 / 1.40 / 1.51
 * So by default (cu->gemv_max_t 0) the GEMV takes one token, and two for layers of at most CU_GEMV_T2_ELEMS
 * weights (the 0.6B's are latency-bound: at most 6.3M; the 8B's at least 16.8M); VLLM_CUDA_GEMV_MAX_T=1..8 sets a
 * plain limit instead (test_cuda_ops: 8, to test the GEMV at every T it is built for). */
#define CU_GEMV_T2_ELEMS ((int64_t)1 << 23)
/* The GEMV takes BF16 x with K % 8 == 0 and 16-byte aligned rows. */
static bool gemv_fits(const cu_state *cu, const be_linear *lin, const tensor *x, int64_t T) {
    const bool takes_t = cu->gemv_max_t ? T <= cu->gemv_max_t
                                        : T == 1 || (T == 2 && lin->out * lin->in <= CU_GEMV_T2_ELEMS);
    return takes_t && lin->in % 8 == 0 && lin->in <= INT_MAX && lin->out <= INT_MAX &&
           cu_aligned16(x->data) && tensor_row_stride(x) % 8 == 0;
}

/* The norm's rows staged in shared memory: at most this many bytes (T * K * 2). */
#define GEMV_NORM_SMEM (32 << 10)
/* ... and for at most this many outputs (a CTA per 8 of them) */
#define GEMV_NORM_MAX_N 65536

typedef void (*gemv_kernel)(gv_args);

template <int TT, int NK>
static gemv_kernel gemv_pick(int ks) {
    switch (ks) {
    case 1: return k_gemv<TT, 1, NK>;
    case 2: return k_gemv<TT, 2, NK>;
    case 4: return k_gemv<TT, 4, NK>;
    default: return k_gemv<TT, 8, NK>;
    }
}

template <int NK>
static gemv_kernel gemv_pick_t(int ti, int ks) {
    if constexpr (gv_res(NK)) /* the RES kinds: one token */
        return gemv_pick<1, NK>(ks);
    else
        return ti == 0 ? gemv_pick<1, NK>(ks) : ti == 1 ? gemv_pick<2, NK>(ks) : ti == 2 ? gemv_pick<4, NK>(ks)
                                                                                          : gemv_pick<8, NK>(ks);
}

/* k_gemv<T class ti, ks, norm kind nk> */
static gemv_kernel gemv_pick_nk(int nk, int ti, int ks) {
    switch (nk) {
    case GV_NORM_RMS: return gemv_pick_t<GV_NORM_RMS>(ti, ks);
    case GV_NORM_OFFSET: return gemv_pick_t<GV_NORM_OFFSET>(ti, ks);
    case GV_NORM_RES_RMS: return gemv_pick_t<GV_NORM_RES_RMS>(ti, ks);
    case GV_NORM_RES_OFFSET: return gemv_pick_t<GV_NORM_RES_OFFSET>(ti, ks);
    default: return gemv_pick_t<GV_NORM_NONE>(ti, ks);
    }
}

template <int NR, int NK, int ACT>
static gemv_kernel gemv_rows_pick(int ti) {
    if constexpr (gv_res(NK)) /* the RES kinds: one token */
        return k_gemv_rows<1, NR, NK, ACT>;
    else
        return ti == 0 ? k_gemv_rows<1, NR, NK, ACT> : ti == 1 ? k_gemv_rows<2, NR, NK, ACT>
                                                     : ti == 2 ? k_gemv_rows<4, NR, NK, ACT>
                                                               : k_gemv_rows<8, NR, NK, ACT>;
}

/* The gated form's activation (the plain form has none: SiLU's instantiation, unused). */
template <int NR, int NK>
static gemv_kernel gemv_rows_pick_act(int act, int ti) {
    if constexpr (NR == 1) {
        (void)act;
        return gemv_rows_pick<1, NK, BE_ACT_SILU>(ti);
    } else {
        switch (act) {
        case BE_ACT_GELU_TANH: return gemv_rows_pick<NR, NK, BE_ACT_GELU_TANH>(ti);
        case BE_ACT_GELU: return gemv_rows_pick<NR, NK, BE_ACT_GELU>(ti);
        case BE_ACT_RELU: return gemv_rows_pick<NR, NK, BE_ACT_RELU>(ti);
        default: return gemv_rows_pick<NR, NK, BE_ACT_SILU>(ti);
        }
    }
}

/* k_gemv_rows<T class ti, glu ? 2 : 1, norm kind nk, act> */
template <int NR>
static gemv_kernel gemv_rows_pick_nk(int nk, int act, int ti) {
    switch (nk) {
    case GV_NORM_RMS: return gemv_rows_pick_act<NR, GV_NORM_RMS>(act, ti);
    case GV_NORM_OFFSET: return gemv_rows_pick_act<NR, GV_NORM_OFFSET>(act, ti);
    case GV_NORM_RES_RMS: return gemv_rows_pick_act<NR, GV_NORM_RES_RMS>(act, ti);
    case GV_NORM_RES_OFFSET: return gemv_rows_pick_act<NR, GV_NORM_RES_OFFSET>(act, ti);
    default: return gemv_rows_pick_act<NR, GV_NORM_NONE>(act, ti);
    }
}

/* CTAs of a GEMV kernel resident per SM (the occupancy API with smem bytes, cached in *slot). */
static int gemv_occupancy(int *slot, gemv_kernel k, size_t smem) {
    if (*slot == 0) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, GEMV_WARPS * 32, smem) != cudaSuccess || n < 1) {
            cudaGetLastError();
            n = 1;
        }
        *slot = n;
    }
    return *slot;
}

/* One GEMV launch for a (glu: the gated form, N = out / 2 outputs; a.nw: the norm, whose
 * rows must fit GEMV_NORM_SMEM). */
static void gemv(cu_state *cu, const be_linear *lin, gv_args a, bool glu) {
    const int N = a.N, K = a.K, T = a.T;
    const bool norm = a.nw != NULL;
    const int nk = !norm ? GV_NORM_NONE
                   : a.res  ? (a.norm_offset ? GV_NORM_RES_OFFSET : GV_NORM_RES_RMS)
                            : (a.norm_offset ? GV_NORM_OFFSET : GV_NORM_RMS);
    const int ti = T == 1 ? 0 : T == 2 ? 1 : T <= 4 ? 2 : 3;
    const size_t smem = norm ? (size_t)T * K * 2 : 0;
    gemv_kernel pick[4];
    for (int i = 0; i < 4; i++) pick[i] = gemv_pick_nk(nk, ti, 1 << i);
    const char *op = "linear (gemv)";
    gemv_kernel rows_k = glu ? gemv_rows_pick_nk<2>(nk, a.act, ti) : gemv_rows_pick_nk<1>(nk, a.act, ti);
    const int64_t rows_ctas = ((int64_t)N + GEMV_WARPS - 1) / GEMV_WARPS;
    a.W = lin->w;
    a.bias = lin->bias;
    /* occupancy depends on the smem of this T: cached per (kernel, T class); the norm's smem for
     * a T class is at most GEMV_NORM_SMEM, so the cache holds the worst case of the class */
    const size_t occ_smem = norm ? GEMV_NORM_SMEM : 0;
    /* One row per warp and a CTA per 8 rows streams best once the rows fill more than one wave of
     * resident CTAs (lm_head, gate_up: measured 4.2-4.4 TB/s on an H200); below that the
     * persistent split-K kernel keeps more warps streaming (H200, 2026-11-30: o / down projections
     * 1.6-2.4x faster, see ops_linear.cu's header). The gated form is the row kernel's. */
    const int64_t rows_slots =
        glu || K % 256 != 0 || cu->gemv_rows
            ? 0
            : (int64_t)gemv_occupancy(&cu->gemv_rows_occ[glu][nk][ti], rows_k, occ_smem) * cu->num_sms;
    /* ... except a row grid whose second wave is at most a quarter full (the first tail-heavy, the second nearly
     * empty), which the split-K kernel takes if it balances clearly better. H100, 2026-12-06, with the split-K
     * kernel taking every row grid past one wave where it balanced clearly better: Qwen3.5-27B 18.72 ms a step
     * against 19.33 (out_proj and down, N 5120: 640 CTAs for 528 resident, 1.21 waves; the attention layers'
     * qkv, 3.4 waves), Qwen3-8B 5.68 against 5.65 (qkv, 768 CTAs, 1.45 waves): so only the short second waves */
    const bool tail = rows_ctas > rows_slots && rows_ctas * 4 <= rows_slots * 5;
    bool rows = rows_slots == 0 || (rows_ctas > rows_slots && !tail);
    /* the split whose row groups fill the resident CTAs best (ties: less splitting, but at least
     * 2 for K >= 2048: two warps per row measured 5-10% faster than one on Qwen3-8B's o / down /
     * qkv at equal balance; Qwen3-0.6B's qkv (K 1024) is faster with one; H200 2026-11-30) */
    int best = 0;
    double best_u = -1.0;
    int64_t best_grid = 1;
    for (int i = K >= 2048 && K % 512 == 0 ? 1 : 0; !rows && i < 4; i++) {
        const int ks = 1 << i;
        if (K % (256 * ks) != 0) break;
        const int64_t R = (int64_t)gemv_occupancy(&cu->gemv_occ[nk][ti][i], pick[i], occ_smem) * cu->num_sms;
        const int64_t G = ((int64_t)N * ks + GEMV_WARPS - 1) / GEMV_WARPS;
        const int64_t grid = G < R ? G : R;
        const int64_t per_cta = (G + grid - 1) / grid;
        const double u = (double)G / ((double)R * (double)per_cta);
        if (cu->gemv_ks == ks || (!cu->gemv_ks && u > best_u + 0.02)) { /* a clearly better balance is worth the extra reductions */
            best_u = u;
            best = i;
            best_grid = grid;
        }
    }
    /* the tail window's row grid runs two waves, the second part-filled: its balance rows_ctas / (2 slots) */
    if (tail && best_u < (double)rows_ctas / (2.0 * (double)rows_slots) + 0.05) rows = true;
    if (rows)
        cu_launch(cu, op, true, rows_k, dim3((unsigned)rows_ctas), dim3(GEMV_WARPS * 32), smem, a);
    else
        cu_launch(cu, op, true, pick[best], dim3((unsigned)best_grid), dim3(GEMV_WARPS * 32), smem, a);
}

static gv_args gemv_args(const tensor *x, tensor *y, int T, int N, int K) {
    gv_args a = {};
    a.x = (const __nv_bfloat16 *)x->data;
    a.xs = tensor_row_stride(x);
    a.y = y->data;
    a.ydt = (int)y->dtype;
    a.ys = tensor_row_stride(y);
    a.T = T;
    a.N = N;
    a.K = K;
    return a;
}

static void linear_run(cu_state *cu, const be_linear *lin, const tensor *x, tensor *y, bool accumulate);

// x (T, in) BF16, W (out, in) -> y (T, out) BF16 or F32; y must not overlap x
void cu_linear(backend *be, const be_linear *lin, const tensor *x, tensor *y) {
    cu_state *cu = cu_of(be);
    if (!lin) {
        cu_fail(cu, "linear: no layer");
        return;
    }
    linear_run(cu, lin, x, y, false);
}

/* VLLM_CUDA_LT_TUNE=1 (opt-in, as PyTorch's TunableOp): the first GEMM of each decode-sized shape (n up to 512 in
 * steps of 8, the graph capture sizes' tokens, or fewer than 8) times up to CU_LT_TUNE_CANDIDATES of cuBLASLt's
 * heuristic algorithms on its own operands (1 warm-up + 3 runs each, into a scratch output of at most
 * CU_LT_TUNE_MAX_OUT bytes) and keeps the fastest for the shape. At M = 256 tokens the heuristic's first choice ran
 * the Qwen3-8B shape's GEMMs at 430-530 TFLOP/s on an H100 (docs/benchmarks.md, session 22): its tiles can leave a
 * partial last wave. Eager steps only (a recording keeps the plan), so the start-up capture's warm-up steps do it;
 * the choice follows the timings, so it may differ between runs. */
static bool tune_eligible(const cu_state *cu, int64_t m, int64_t n, dtype ydt, int64_t ldc) {
    return cu->lt_tune && !cu->capturing && cu->ntuned < CU_LT_TUNED && n > 0 && n <= 512 && (n % 8 == 0 || n < 8) &&
           (uint64_t)n * (uint64_t)ldc * dtype_size(ydt) <= CU_LT_TUNE_MAX_OUT && m > 0;
}

static void plan_tune(cu_state *cu, cu_lt_plan *p, const __nv_bfloat16 *W, const void *x, dtype ydt) {
    p->tuned = true; /* once, whatever happens below */
    if (!cu->tuned && !(cu->tuned = (cu_lt_tuned *)calloc(CU_LT_TUNED, sizeof *cu->tuned))) return;
    const size_t out_bytes = (size_t)p->n * (size_t)p->ldc * dtype_size(ydt);
    if (cu_buf_reserve(cu, &cu->tune_out, out_bytes, "cuBLASLt tuning output") != VLLM_OK) {
        vt_error_clear();
        return;
    }
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return;
    size_t ws = cu->lt_ws.cap;
    uint32_t al = p->align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res[CU_LT_TUNE_CANDIDATES];
    int nres = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(cu->lt, cu->mm_desc, p->a, p->b, p->c, p->c, pref,
                                                      CU_LT_TUNE_CANDIDATES, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (s != CUBLAS_STATUS_SUCCESS || nres < 2 || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess) {
        if (e0) cudaEventDestroy(e0);
        cudaGetLastError();
        return;
    }
    const float alpha = 1.0f, beta = 0.0f;
    void *out = cu->tune_out.p;
    int best = -1;
    float best_ms = 0.0f, first_ms = 0.0f;
    for (int i = 0; i < nres; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        bool ok = true;
        for (int r = 0; r < 4 && ok; r++) {
            if (r == 1) ok = cudaEventRecord(e0, cu->stream) == cudaSuccess;
            ok = ok && cublasLtMatmul(cu->lt, cu->mm_desc, &alpha, W, p->a, x, p->b, &beta, out, p->c, out, p->c,
                                      &res[i].algo, cu->lt_ws.p, cu->lt_ws.cap, cu->stream) == CUBLAS_STATUS_SUCCESS;
        }
        float ms = 0.0f;
        ok = ok && cudaEventRecord(e1, cu->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (!ok) {
            cudaGetLastError();
            continue;
        }
        if (i == 0) first_ms = ms;
        if (best < 0 || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (best < 0) return;
    p->algo = res[best].algo;
    cu_lt_tuned *t = &cu->tuned[cu->ntuned++];
    *t = (cu_lt_tuned){.m = p->m, .n = p->n, .k = p->k, .ldb = p->ldb, .ldc = p->ldc, .ydt = p->ydt,
                       .align = p->align, .algo = p->algo};
    LOG_D("cuda linear: m %lld n %lld k %lld: candidate %d of %d, %.1f us (the heuristic's first %.1f us)",
          (long long)p->m, (long long)p->n, (long long)p->k, best, nres, 1e3 * best_ms / 3, 1e3 * first_ms / 3);
}

/* y (T, m) = (accumulate: y +) x (T, k) W^T, W (m, k) BF16 on the device: cuBLASLt (cached plan) or
 * cublasGemmEx; false (and cu_fail) when both fail. y: dtype ydt, rows ys apart. */
bool cu_gemm_bf16(cu_state *cu, const __nv_bfloat16 *W, int64_t m, int64_t k, const tensor *x, int64_t T, void *y,
                  dtype ydt, int64_t ys, bool accumulate) {
    const int64_t xs = tensor_row_stride(x);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f; /* C = D = y */
    unsigned align = ptr_align(W);
    unsigned ax = ptr_align(x->data), ay = ptr_align(y);
    if (ax < align) align = ax;
    if (ay < align) align = ay;
    /* strides that are not multiples of the alignment lower it too */
    while (align > 2 && (((size_t)xs * 2) % align || ((size_t)ys * dtype_size(ydt)) % align)) align >>= 1;
    cu_lt_plan *p = plan_get(cu, m, T, k, xs, ys, ydt, align);
    if (p && p->lt_ok && !p->tuned && tune_eligible(cu, m, T, ydt, ys)) plan_tune(cu, p, W, x->data, ydt);
    if (p && p->lt_ok) {
        cublasStatus_t s = cublasLtMatmul(cu->lt, cu->mm_desc, &alpha, W, p->a, x->data, p->b, &beta, y, p->c, y, p->c,
                                          &p->algo, cu->lt_ws.p, cu->lt_ws.cap, cu->stream);
        if (s == CUBLAS_STATUS_SUCCESS) return true;
        p->lt_ok = false; /* don't try this plan again */
    }
    cublasStatus_t s = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)T, (int)k, &alpha, W, CUDA_R_16BF,
                                    (int)k, x->data, CUDA_R_16BF, (int)xs, &beta, y,
                                    ydt == DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF, (int)ys, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cu_fail(cu, "linear: cuBLAS GEMM (m %lld, n %lld, k %lld) failed: %s", (long long)m, (long long)T, (long long)k,
                cublasGetStatusString(s));
        return false;
    }
    return true;
}

/* every segment's block GEMV takes x (T tokens) */
static bool qgemv_fits(const be_linear *lin, const tensor *x, int64_t T) {
    for (int i = 0; i < lin->nq; i++)
        if (!cu_qgemv_fits(lin->q[i].qw, x, T)) return false;
    return lin->nq > 0;
}

/* y = (accumulate: y +) x W^T + b: the GEMV, or cuBLAS(Lt) with beta 0 or 1 (block weights: their GEMV, or
 * the GEMM per dequantized tile of rows) */
static void linear_run(cu_state *cu, const be_linear *lin, const tensor *x, tensor *y, bool accumulate) {
    if (!cu_check_mat(cu, "linear", "x", x, CU_DT(DTYPE_BF16), -1, lin->in) ||
        !cu_check_mat(cu, "linear", "y", y, CU_ACT, cu_rows(x), lin->out))
        return;
    int64_t T = cu_rows(x), xs = tensor_row_stride(x), ys = tensor_row_stride(y);
    if (T == 0) return;
    if (T > INT_MAX || xs > INT_MAX || ys > INT_MAX) {
        cu_fail(cu, "linear: %lld rows (row strides %lld, %lld) exceed cuBLAS's int range", (long long)T,
                (long long)xs, (long long)ys);
        return;
    }
    if (lin->f8) {
        cu_f8_linear(cu, lin->f8, lin->bias, x, y, accumulate);
        return;
    }
    if (lin->i4) {
        cu_i4_linear(cu, lin->i4, lin->bias, x, y, accumulate);
        return;
    }
    if (lin->nq) {
        if (qgemv_fits(lin, x, T)) { /* each segment's GEMV on its columns of y, adding its biases */
            for (int i = 0; i < lin->nq; i++) {
                const cu_qseg *sg = &lin->q[i];
                tensor yv = tensor_cols(y, sg->r0, sg->rows);
                cu_qgemv(cu, sg->qw, lin->bias ? lin->bias + sg->r0 : NULL, x, &yv, false, BE_ACT_SILU, accumulate,
                         i == 0);
            }
            return;
        }
        __nv_bfloat16 *ws = (__nv_bfloat16 *)cu->qlin_ws.p;
        const size_t es = dtype_size(y->dtype);
        for (int i = 0; i < lin->nq; i++) {
            const cu_qseg *sg = &lin->q[i];
            const int64_t tile = cu_qtile_rows(sg->qw);
            if (cu_buf_reserve(cu, &cu->qlin_ws, cu_qtile_bytes(sg->qw), "linear: dequantized weight tile") != VLLM_OK)
                return; /* (reserved by linear_create: only a recording can get here) */
            ws = (__nv_bfloat16 *)cu->qlin_ws.p;
            for (int64_t r0 = 0; r0 < sg->rows; r0 += tile) {
                const int64_t rows = sg->rows - r0 < tile ? sg->rows - r0 : tile;
                /* the tile (rows, in) BF16, then y[:, c .. c + rows) = x tile^T (the next tile waits in the stream) */
                if (!cu_qdequant(cu, sg->qw, r0, rows, ws) ||
                    !cu_gemm_bf16(cu, ws, rows, lin->in, x, T, (char *)y->data + (size_t)(sg->r0 + r0) * es, y->dtype, ys,
                          accumulate))
                    return;
            }
        }
        if (lin->bias) cu_add_bias(cu, y->data, y->dtype, ys, lin->bias, T, lin->out);
        return;
    }
    if (gemv_fits(cu, lin, x, T)) {
        gv_args a = gemv_args(x, y, (int)T, (int)lin->out, (int)lin->in);
        a.acc = accumulate;
        gemv(cu, lin, a, false); /* adds the bias */
        return;
    }
    if (!cu_gemm_bf16(cu, lin->w, lin->out, lin->in, x, T, y->data, y->dtype, ys, accumulate)) return;
    if (lin->bias) cu_add_bias(cu, y->data, y->dtype, ys, lin->bias, T, lin->out);
}

/* linear_fused on block weights: decode batches as [the norm op into f->h, then] one block GEMV with the
 * gated product or the residual add in its epilogue; other batches (and what the GEMV does not take) as
 * the composite of single ops, whose linear runs the tiles */
static void qlinear_fused(backend *be, cu_state *cu, const be_linear *lin, const tensor *x, const linear_fuse *f,
                          tensor *y) {
    const int64_t T = cu_rows(x);
    const bool glu = f && f->silu_mul, norm = linear_fuse_has_norm(f);
    /* the gated form needs gate and up in one segment (one kernel streams both rows) */
    const bool kernel = f && !(f->silu_mul && f->accumulate) && (unsigned)f->act < CU_ACT_COUNT &&
                        (unsigned)f->norm_kind < BE_NORM_COUNT && (!glu || (lin->out % 2 == 0 && lin->nq == 1)) &&
                        qgemv_fits(lin, x, T) && (!norm || (f->h && f->h->dtype == DTYPE_BF16));
    if (!kernel) {
        if (f && f->accumulate && !norm && !f->silu_mul) {
            linear_run(cu, lin, x, y, true); /* its GEMV, or beta 1 in the tiles' GEMMs */
            return;
        }
        const char *err = linear_fused_composite(be, lin, x, f, y);
        if (err) cu_fail(cu, "%s", err);
        return;
    }
    const int64_t N = glu ? lin->out / 2 : lin->out;
    if (!cu_check_mat(cu, "linear_fused", "x", x, CU_DT(DTYPE_BF16), T, lin->in) ||
        !cu_check_mat(cu, "linear_fused", "y", y, CU_ACT, T, N))
        return;
    if (T == 0) return;
    const tensor *in = x;
    bool xq_done = false; /* the norm wrote the GEMV's int8 activations too */
    if (norm) { /* as the composite's: h (T, in) */
        if (!cu_check_mat(cu, "linear_fused", "h", f->h, CU_DT(DTYPE_BF16), T, lin->in)) return;
        int8_t *xq = NULL;
        qx_meta *xm = NULL;
        if (cu_qx_buffers(cu, lin->in, &xq, &xm))
            xq_done = cu_norm_qx(cu, x, (be_norm_kind)f->norm_kind, f->norm_w, f->norm_b, f->eps, f->h, xq, xm);
        if (!xq_done && f->norm_kind == BE_NORM_RMS) {
            cu_rms_norm(be, x, f->norm_w, f->eps, f->h);
        } else if (!xq_done) {
            const be_norm n = {f->norm_kind, f->norm_w, f->norm_b, f->eps};
            cu_norm(be, x, &n, f->h);
        }
        in = f->h;
        if (!qgemv_fits(lin, in, T)) {
            cu_fail(cu, "linear_fused: h must be BF16 with 16-byte aligned rows");
            return;
        }
    }
    if (glu) {
        cu_qgemv(cu, lin->q[0].qw, lin->bias, in, y, true, (int)f->act, false, !xq_done);
        return;
    }
    for (int i = 0; i < lin->nq; i++) { /* each segment on its columns of y */
        const cu_qseg *sg = &lin->q[i];
        tensor yv = tensor_cols(y, sg->r0, sg->rows);
        cu_qgemv(cu, sg->qw, lin->bias ? lin->bias + sg->r0 : NULL, in, &yv, false, BE_ACT_SILU, f->accumulate,
                 i == 0 && !xq_done);
    }
}

/* the packed layer's (FP8 / int4) decode GEMV takes x */
static bool packed_gemv_fits(cu_state *cu, const be_linear *lin, const tensor *x, int64_t T) {
    return lin->f8 ? cu->f8_mma && cu_f8_gemv_fits(lin->f8, x, T) : cu_i4_gemv_fits(lin->i4, x, T);
}

/* linear_fused on FP8 / int4 weights: decode batches as [the norm op into f->h, then] the layer's GEMV with the
 * gated product or the residual add in its epilogue (the FP8 one's prologue quantizes x); other batches as the
 * composite of single ops (its linear the FP8 GEMM / the dequantized tiles'), the add through beta 1 */
static void packed_linear_fused(backend *be, cu_state *cu, const be_linear *lin, const tensor *x, const linear_fuse *f,
                                tensor *y) {
    const int64_t T = cu_rows(x);
    const bool glu = f && f->silu_mul, norm = linear_fuse_has_norm(f);
    const bool kernel = f && !(glu && f->accumulate) && (unsigned)f->act < CU_ACT_COUNT &&
                        (unsigned)f->norm_kind < BE_NORM_COUNT && (!glu || lin->out % 2 == 0) &&
                        packed_gemv_fits(cu, lin, x, T) && (!norm || (f->h && f->h->dtype == DTYPE_BF16));
    if (!kernel) {
        if (f && f->accumulate && !norm && !glu) {
            linear_run(cu, lin, x, y, true);
            return;
        }
        const char *err = linear_fused_composite(be, lin, x, f, y);
        if (err) cu_fail(cu, "%s", err);
        return;
    }
    const int64_t N = glu ? lin->out / 2 : lin->out;
    if (!cu_check_mat(cu, "linear_fused", "x", x, CU_DT(DTYPE_BF16), T, lin->in) ||
        !cu_check_mat(cu, "linear_fused", "y", y, CU_ACT, T, N))
        return;
    const tensor *in = x;
    if (norm) { /* as the composite's: h (T, in) */
        if (!cu_check_mat(cu, "linear_fused", "h", f->h, CU_DT(DTYPE_BF16), T, lin->in)) return;
        if (f->norm_kind == BE_NORM_RMS) {
            cu_rms_norm(be, x, f->norm_w, f->eps, f->h);
        } else {
            const be_norm n = {f->norm_kind, f->norm_w, f->norm_b, f->eps};
            cu_norm(be, x, &n, f->h);
        }
        in = f->h;
        if (!packed_gemv_fits(cu, lin, in, T)) {
            cu_fail(cu, "linear_fused: h must be BF16 with 16-byte aligned rows");
            return;
        }
    }
    if (glu) {
        if (!(lin->f8 ? cu_f8_gemv_glu(cu, lin->f8, lin->bias, in, y, (int)f->act)
                      : cu_i4_gemv_glu(cu, lin->i4, lin->bias, in, y, (int)f->act)))
            cu_fail(cu, "linear_fused: the gated GEMV does not take this layer");
        return;
    }
    linear_run(cu, lin, in, y, f->accumulate);
}

/* a and b's bytes overlap */
static bool lf_overlap(const tensor *a, const tensor *b) {
    const int64_t na = tensor_extent_bytes(a), nb = tensor_extent_bytes(b);
    const char *pa = (const char *)a->data, *pb = (const char *)b->data;
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

/* Whether the GEMV's RES prologue takes f's pending residual add (f->res): one token, BF16 weights, the norm stage
 * an RMS norm of the residual norm's kind, BF16 rows 16-byte aligned, res_out apart from what the kernel reads */
static bool lf_res_fits(const be_linear *lin, const tensor *x, const linear_fuse *f, const tensor *y) {
    const tensor *r = f->res, *ro = f->res_out;
    const be_norm *rn = f->res_norm;
    if (!lin->w || cu_rows(x) != 1 || !rn || !ro || !f->norm_w || rn->b || rn->kind != f->norm_kind ||
        (rn->kind != BE_NORM_RMS && rn->kind != BE_NORM_RMS_OFFSET))
        return false;
    const tensor *w = rn->w;
    return w && w->data && w->dtype == DTYPE_BF16 && w->ndim == 1 && w->shape[0] == lin->in && cu_aligned16(w->data) &&
           r->data && ro->data && r->dtype == DTYPE_BF16 && ro->dtype == DTYPE_BF16 && cu_rows(r) == 1 &&
           cu_rows(ro) == 1 && tensor_row_len(r) == lin->in && tensor_row_len(ro) == lin->in && cu_aligned16(r->data) &&
           cu_aligned16(ro->data) && !lf_overlap(ro, x) && !lf_overlap(ro, r) && !lf_overlap(ro, y) && !lf_overlap(y, r) &&
           (!f->h || (!lf_overlap(f->h, r) && !lf_overlap(f->h, ro)));
}

/* linear_fused (backend.h): decode-sized batches in one GEMV kernel (the
 * norm's factors computed by every CTA from x, the gated product and the
 * residual add in its epilogue; for one token also a pending residual add
 * before the norm, f->res); otherwise the composite of single ops. */
void cu_linear_fused(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f, tensor *y) {
    cu_state *cu = cu_of(be);
    if (!lin) {
        cu_fail(cu, "linear_fused: no layer");
        return;
    }
    if (f && f->res && !lf_res_fits(lin, x, f, y)) {
        const be_norm *rn = f->res_norm;
        if (rn && f->res_out && f->h && f->norm_w && !f->norm_b && rn->kind == f->norm_kind &&
            (rn->kind == BE_NORM_RMS || rn->kind == BE_NORM_RMS_OFFSET) && !lf_overlap(f->res_out, x) &&
            !lf_overlap(f->res_out, f->res) && !lf_overlap(f->h, f->res) && !lf_overlap(f->h, f->res_out)) {
            /* res_out = x + res_norm(res), h = norm(res_out) in one kernel (res left as it is: xo apart from x),
             * then the layer on h: the launches of the unfolded sandwich (norm_add_norm, then the linear) */
            const be_norm nx = {.kind = f->norm_kind, .w = f->norm_w, .b = NULL, .eps = f->eps};
            cu_norm_add_norm_to(be, x, (tensor *)f->res, rn, &nx, f->h, f->res_out);
            linear_fuse rest = *f;
            rest.res = NULL;
            rest.res_norm = NULL;
            rest.res_out = NULL;
            rest.norm_w = NULL;
            rest.norm_kind = BE_NORM_RMS;
            cu_linear_fused(be, lin, f->h, &rest, y);
            return;
        }
        /* otherwise the residual add as its ops (norm, add), then the rest */
        const tensor *xr = x;
        const char *err = linear_fuse_residual(be, &xr, f);
        if (err) {
            cu_fail(cu, "%s", err);
            return;
        }
        linear_fuse rest = *f;
        rest.res = NULL;
        rest.res_norm = NULL;
        rest.res_out = NULL;
        cu_linear_fused(be, lin, xr, &rest, y);
        return;
    }
    if (lin->nq) {
        qlinear_fused(be, cu, lin, x, f, y);
        return;
    }
    if (lin->f8 || lin->i4) {
        packed_linear_fused(be, cu, lin, x, f, y);
        return;
    }
    const int64_t T = cu_rows(x);
    const bool glu = f && f->silu_mul;
    const tensor *nw = f ? f->norm_w : NULL;
    /* the kernel's norms: RMSNorm with a weight, plain or (1 + w); other stages as the composite */
    bool fused = f && !(f->silu_mul && f->accumulate) && gemv_fits(cu, lin, x, T) && x->dtype == DTYPE_BF16 &&
                 (!glu || lin->out % 2 == 0) && (unsigned)f->act < CU_ACT_COUNT &&
                 (f->norm_kind == BE_NORM_RMS || (f->norm_kind == BE_NORM_RMS_OFFSET && nw)) && !f->norm_b;
    /* the norm's prologue runs in every CTA: for a vocabulary-sized layer (tens of thousands of
     * CTAs) one norm kernel first is cheaper (Qwen3-0.6B lm_head: 87 vs 72 us, H200). f->h receives
     * the normalised rows (backend.h: callers may read them, as the MoE block's experts do): the
     * kernel's CTA 0 stores them where h takes 16-byte stores and does not overlap x; otherwise the
     * composite (the norm op into h) */
    if (fused && nw)
        fused = nw->dtype == DTYPE_BF16 && nw->ndim == 1 && nw->shape[0] == lin->in && nw->data &&
                cu_aligned16(nw->data) && T * lin->in * 2 <= GEMV_NORM_SMEM &&
                (glu ? lin->out / 2 : lin->out) <= GEMV_NORM_MAX_N && f->h && f->h->dtype == DTYPE_BF16 &&
                f->h->data && cu_aligned16(f->h->data) && tensor_row_stride(f->h) % 8 == 0 &&
                !lf_overlap(f->h, x);
    if (!fused && f && f->accumulate && !linear_fuse_has_norm(f) && !f->silu_mul) {
        linear_run(cu, lin, x, y, true); /* cuBLAS accumulates itself (beta 1) */
        return;
    }
    if (!fused) {
        const char *err = linear_fused_composite(be, lin, x, f, y);
        if (err) cu_fail(cu, "%s", err);
        return;
    }
    const int64_t N = glu ? lin->out / 2 : lin->out;
    if (!cu_check_mat(cu, "linear_fused", "x", x, CU_DT(DTYPE_BF16), -1, lin->in) ||
        !cu_check_mat(cu, "linear_fused", "y", y, CU_ACT, T, N))
        return;
    if (T == 0) return;
    gv_args a = gemv_args(x, y, (int)T, (int)N, (int)lin->in);
    a.nw = nw ? (const __nv_bfloat16 *)nw->data : NULL;
    if (nw) {
        if (!cu_check_mat(cu, "linear_fused", "h", f->h, CU_DT(DTYPE_BF16), T, lin->in)) return;
        a.h = (__nv_bfloat16 *)f->h->data;
        a.hs = tensor_row_stride(f->h);
    }
    a.eps = f->eps;
    a.norm_offset = f->norm_kind == BE_NORM_RMS_OFFSET;
    if (f->res) { /* lf_res_fits */
        a.res = (const __nv_bfloat16 *)f->res->data;
        a.ress = tensor_row_stride(f->res);
        a.rnw = (const __nv_bfloat16 *)f->res_norm->w->data;
        a.reps = f->res_norm->eps;
        a.rout = (__nv_bfloat16 *)f->res_out->data;
        a.routs = tensor_row_stride(f->res_out);
    }
    a.acc = f->accumulate;
    a.act = (int)f->act;
    gemv(cu, lin, a, glu);
}
