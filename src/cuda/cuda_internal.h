/*
 * cuda_internal.h: private state and helpers shared by the CUDA backend's
 * files (cuda_backend.cu and the ops_*.cu kernel groups). CUDA C++ only.
 *
 * Every op checks its tensor descriptors on the host before it queues
 * anything; a failure is recorded with cu_fail() (the first one wins) and
 * the op does nothing. Indices that live in device memory (token ids,
 * positions, slots, block tables) are checked by the kernels, which record
 * the first bad one in a cu_dev_err in mapped host memory and skip it.
 * synchronize() / download() report either as VLLM_ERR_BACKEND.
 */
#ifndef VLLM_CUDA_CUDA_INTERNAL_H
#define VLLM_CUDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/error.h"
#include "core/log.h"
#include "tensor/backend.h"
}
#include "cuda/cuda_backend.h"

/* ---- device-side errors ---- */

enum cu_dev_code {
    CU_DEV_OK = 0,
    CU_DEV_EMBED_ID,     /* a: token index, b: id, c: vocab rows */
    CU_DEV_GATHER_IDX,   /* a: output row, b: index, c: input rows */
    CU_DEV_ROPE_POS,     /* a: token, b: position, c: table rows */
    CU_DEV_KV_SLOT,      /* a: token, b: slot, c: cache slots */
    CU_DEV_ATTN_META,    /* a: sequence, b: query tokens, c: context tokens */
    CU_DEV_ATTN_QSL,     /* a: sequence, b: query_start_loc[s], c: num_tokens */
    CU_DEV_ATTN_BLOCK,   /* a: sequence, b: block table column, c: block id */
};

typedef struct cu_dev_err {
    int code;            /* cu_dev_code; 0 = none */
    int pad;
    long long a, b, c;
} cu_dev_err;

/* Records the first device-side failure (later ones are dropped). */
__device__ __forceinline__ void cu_report(cu_dev_err *e, int code, long long a, long long b, long long c) {
    if (atomicCAS(&e->code, 0, -1) == 0) {
        e->a = a;
        e->b = b;
        e->c = c;
        __threadfence_system();
        atomicExch(&e->code, code);
    }
}

/* ---- backend state ---- */

/* A device (or pinned host) buffer that grows and is reused. */
typedef struct cu_buf {
    void *p;
    size_t cap;
} cu_buf;

typedef struct cu_lt_plan cu_lt_plan;  /* ops_linear.cu: cached cuBLASLt layouts + algorithm */
typedef struct cu_sample_ws cu_sample_ws;  /* ops_sample.cu: sampling buffers */

typedef struct cu_state {
    int device;
    int num_sms;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t mm_desc;  /* bf16 x bf16 -> f32 accumulate, A transposed */
    cu_buf lt_ws;                  /* cuBLASLt workspace (device) */
    cu_lt_plan *plans;             /* (CU_LT_PLANS) cache of layouts and algorithms per shape */
    cu_dev_err *derr;              /* mapped pinned host memory (host address) */
    cu_dev_err *derr_dev;          /* the same memory's device address, given to kernels */
    cu_buf attn_ws;                /* split-KV partial results (device) */
    cu_sample_ws *sample;          /* lazily created */
    size_t bytes_allocated;        /* alloc + import + linear weights, for the log */
    vllm_status err;               /* first op failure since the last synchronize */
    char err_msg[512];
} cu_state;

static inline cu_state *cu_of(backend *be) { return (cu_state *)be->impl; }

/* synchronize(): waits for the stream, then reports (and clears) the first
 * pending failure: host-side argument errors, CUDA errors, the device record. */
vllm_status cu_sync(backend *be);
/* Records an op failure (kept only if none is pending). */
void cu_fail(cu_state *cu, const char *fmt, ...) VT_PRINTF(2, 3);
/* After a kernel launch: records a launch failure naming op. */
bool cu_launched(cu_state *cu, const char *op);
/* Checks a CUDA runtime call made by op; false (and cu_fail) on error. */
bool cu_ok(cu_state *cu, cudaError_t e, const char *op, const char *what);
/* Grows a device buffer to at least bytes (contents are not kept). */
vllm_status cu_buf_reserve(cu_state *cu, cu_buf *b, size_t bytes, const char *what);
void cu_buf_free(cu_buf *b);
/* Same for pinned host memory. */
vllm_status cu_hbuf_reserve(cu_buf *b, size_t bytes, const char *what);
void cu_hbuf_free(cu_buf *b);

/* ---- argument checks (as the CPU backend's) ---- */

/* dtype masks */
#define CU_DT(t) (1u << (t))
#define CU_FLOAT (CU_DT(DTYPE_F32) | CU_DT(DTYPE_F16) | CU_DT(DTYPE_BF16))
#define CU_ACT (CU_DT(DTYPE_F32) | CU_DT(DTYPE_BF16))

/* t viewed as a (shape[0], product of the other dims) matrix with t's row
 * stride; rows/cols < 0 accept any size; dtype in mask. */
bool cu_check_mat(cu_state *cu, const char *op, const char *arg, const tensor *t, unsigned mask, int64_t rows,
                  int64_t cols);
/* A contiguous tensor of n elements (n < 0: any). */
bool cu_check_vec(cu_state *cu, const char *op, const char *arg, const tensor *t, unsigned mask, int64_t n);
/* Bytes spanned by t's rows (-1 on a bad shape or overflow). */
int64_t cu_extent_bytes(const tensor *t);

static inline int64_t cu_rows(const tensor *t) { return t->ndim > 0 ? t->shape[0] : 1; }

/* ---- device helpers ---- */

/* One element of float dtype dt (F32, F16, BF16) at p[i], widened. */
__device__ __forceinline__ float cu_ld(const void *p, int dt, int64_t i) {
    if (dt == DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores v at p[i] in float dtype dt, rounding to nearest even. */
__device__ __forceinline__ void cu_st(void *p, int dt, int64_t i, float v) {
    if (dt == DTYPE_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else if (dt == DTYPE_F16) ((__half *)p)[i] = __float2half(v);
    else ((float *)p)[i] = v;
}

/* Blocks of `threads` covering n items, capped (kernels loop with a grid stride). */
static inline unsigned cu_grid(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535 * 8) b = 65535 * 8;
    return (unsigned)b;
}

/* ---- ops (one file per kernel group) ---- */

/* ops_linear.cu */
vllm_status cu_linear_create(backend *be, const tensor *const *weights, const tensor *const *biases, int n,
                             be_linear **out);
void cu_linear_free(backend *be, be_linear *lin);
void cu_linear(backend *be, const be_linear *lin, const tensor *x, tensor *y);
void cu_plans_free(cu_state *cu);

/* ops_elementwise.cu */
void cu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out);
void cu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out);
void cu_add(backend *be, tensor *x, const tensor *y);
void cu_silu_mul(backend *be, const tensor *gate_up, tensor *out);
void cu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out);
void cu_rope(backend *be, tensor *q, tensor *k, const tensor *positions, const tensor *cos_sin, int head_dim,
             int rot_dim, bool neox);
/* dst (rows, cols) BF16 contiguous = src (rows, cols) of float dtype sdt with row stride ss (elements). */
bool cu_convert_bf16(cu_state *cu, void *dst, const void *src, dtype sdt, int64_t rows, int64_t cols, int64_t ss);
/* y (T, N) of dtype ydt with row stride ys += bias (N) F32. */
bool cu_add_bias(cu_state *cu, void *y, dtype ydt, int64_t ys, const float *bias, int64_t T, int64_t N);

/* ops_attention.cu */
void cu_kv_write(backend *be, const tensor *k, const tensor *v, tensor *k_cache, tensor *v_cache,
                 const attn_meta *m);
void cu_attention(backend *be, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                  const attn_params *p, tensor *out);

/* ops_sample.cu */
vllm_status cu_sample(backend *be, tensor *logits, const sample_batch *b);
vllm_status cu_logprobs(backend *be, const tensor *logits, const logprob_batch *b);
void cu_sample_free(cu_state *cu);

#endif
