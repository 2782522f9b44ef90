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
 *
 * Launches: kernels on the decode path are launched with programmatic
 * dependent launch (PDL, Hopper): such a kernel may start while the
 * previous kernel of the stream is finishing, so it must call pdl_wait()
 * before it reads anything an earlier op of the step wrote and before its
 * first global write. Before that it may read only what no kernel of the
 * step writes: weights, and the step's metadata and the KV cache entries of
 * positions before the step's new tokens, which uploads and earlier steps
 * wrote (every step starts with an upload, a copy that waits for all
 * earlier work). It calls pdl_launch() early to let the next kernel start
 * likewise. One exception, by construction: a kernel whose predecessor calls
 * pdl_launch() only after its own pdl_wait() starts after every kernel
 * before that predecessor has finished, so it may read their outputs (through
 * L2: __ldcg, as L1 is not coherent) before its wait (ops_moe.cu: the expert
 * GEMV lets the down + combine read the routing and the permutation early).
 * cu_launch() launches with or without the attribute (without on
 * GPUs before sm_90, or with VLLM_CUDA_NO_PDL set).
 *
 * Graph capture (graph_begin .. graph_end): ops only queue work; anything
 * that would allocate, synchronize or read device data on the host fails
 * the capture with a message (cu_capture_guard), reported by graph_end.
 */
#ifndef VLLM_CUDA_CUDA_INTERNAL_H
#define VLLM_CUDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>
#include <utility>

extern "C" {
#include "core/error.h"
#include "core/log.h"
#include "tensor/backend.h"
#include "tensor/tensor_check.h"
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
    CU_DEV_LA_SLOT,      /* a: sequence, b: state slot, c: pool slots (the linear-attention ops) */
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

/* The upload staging ring: pinned host memory the uploads are copied into
 * before an asynchronous copy; each copy's range is guarded by an event
 * until the copy is done (cuda_backend.cu). */
#define CU_STAGE_RECS 64
typedef struct cu_stage_rec {
    size_t lo, hi;                 /* bytes of the ring the copy reads */
    cudaEvent_t ev;                /* recorded after the copy */
} cu_stage_rec;

typedef struct cu_stage {
    cu_buf buf;                    /* pinned host memory */
    size_t head;                   /* next free byte */
    cu_stage_rec recs[CU_STAGE_RECS]; /* pending copies, oldest first from first */
    int first, count;
} cu_stage;

typedef struct cu_lt_plan cu_lt_plan;  /* ops_linear.cu: cached cuBLASLt layouts + algorithm */
typedef struct cu_sample_ws cu_sample_ws;  /* ops_sample.cu: sampling buffers */

/* kernels of one device that may be given the non-portable cluster size (cu_nonportable_cluster) */
#define CU_NONPORT_MAX 128
/* ops_linear.cu's GEMV norm kinds (GV_NORM_*), the first index of its occupancy caches */
#define CU_GEMV_NK_COUNT 5

typedef struct cu_state {
    int device;
    int num_sms;
    int dev;                       /* the GPU ordinal (backend_options.device_id) */
    struct tpg_group *tp_group;    /* tensor parallelism (comm_nccl.cu): the ranks' group, this rank, its NCCL */
    int tp_rank;                   /* communicator (made at the first collective) and gather scratch */
    void *nccl;
    cu_buf comm_ws;
    size_t smem_optin;             /* the most dynamic shared memory a block may opt into */
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t mm_desc;  /* bf16 x bf16 -> f32 accumulate, A transposed */
    cu_buf lt_ws;                  /* cuBLASLt workspace (device) */
    cu_lt_plan *plans;             /* (CU_LT_PLANS) cache of layouts and algorithms per shape */
    bool lt_tune;                  /* VLLM_CUDA_LT_TUNE=1: decode-sized GEMMs time cuBLASLt's candidates (ops_linear.cu) */
    struct cu_lt_tuned *tuned;     /* (CU_LT_TUNED) the shapes timed and their fastest algorithm */
    int ntuned;
    cu_buf tune_out;               /* the timed runs' output (the real y may be accumulated into) */
    cu_dev_err *derr;              /* mapped pinned host memory (host address) */
    cu_dev_err *derr_dev;          /* the same memory's device address, given to kernels */
    bool pdl;                      /* programmatic dependent launch (sm_90+) */
    bool no_tc_attention;          /* VLLM_CUDA_NO_TC_ATTN: prefill attention on the CUDA cores (comparisons) */
    bool tc_hd256;                 /* the tensor-core prefill kernel's head_dim 256 fits the GPU's shared memory */
    bool no_dtc_attention;         /* VLLM_CUDA_NO_DTC_ATTN: large decode batches on the CUDA-core kernel (comparisons) */
    int dtc_stages;                /* VLLM_CUDA_DTC_STAGES: the tensor-core decode kernel's cp.async stages (2, 3) */
    bool dtc_hd256;                /* VLLM_CUDA_DTC_HD256=1: the tensor-core decode kernel at head_dim 256 (opt-in) */
    bool stack_on;                 /* dense_stack_decode taken (VLLM_CUDA_STACK=1; ops_stack.cu) */
    int stack_ready[3];            /* its kernel per head_dim 64 / 128 / 256: 1 fits an SM, -1 not, 0 not asked */
    cu_buf stack_ws;               /* its attention partials (device) */
    cu_buf stack_cnt;              /* its counters: per KV head, then the grid barrier's two (0 between launches) */
    bool gemv_rows;                /* VLLM_CUDA_GEMV=rows: the one-row-per-warp GEMV only (for comparisons) */
    int gemv_ks;                   /* VLLM_CUDA_GEMV_KS=1|2|4|8: the persistent GEMV's split-K forced (comparisons) */
    int gemv_max_t;                /* the most tokens the BF16 GEMV takes: 0 = by layer size (gemv_fits), else
                                      VLLM_CUDA_GEMV_MAX_T=1..CU_GEMV_MAX_T */
    int attn_hp;                   /* VLLM_CUDA_ATTN_HP=1..8: query heads an attention CTA at most (0: the default) */
    int attn_min_keys;             /* VLLM_CUDA_ATTN_MIN_KEYS: decode attention keys per split at least (0: the kernel's) */
    bool sample_bisect;            /* VLLM_CUDA_SAMPLE_BISECT=1: top_k / top_p by the bisections over the whole row only,
                                      never on candidates (ops_sample.cu cand_draw; comparisons and its tests) */
    bool sample_radix;             /* VLLM_CUDA_SAMPLE_RADIX=1: the cuts and the draw that the candidates cannot take by
                                      the radix select (ops_sample.cu rx_find) instead of the bisections */
    int attn_splits;               /* VLLM_CUDA_ATTN_SPLITS=1..32: decode attention splits at most (0: the default cap) */
    bool qkr_scalar;               /* VLLM_CUDA_QKR=scalar: qk_norm_rope_kv's 32-lane form for BF16 too (comparisons) */
    bool sm90;                     /* the GPU runs the kernels' sm_90 code (cuda_backend.cu sm90_code) */
    bool attn_cluster;             /* decode attention merges a token's splits inside a thread-block cluster where they
                                      fit one (sm_90; VLLM_CUDA_ATTN_CLUSTER=0: through the workspace always) */
    int attn_climit;               /* VLLM_CUDA_ATTN_CLUSTER: 0 (no cluster merge), 8 (the portable size) or 16 (default) */
    int attn_cmax;                 /* its largest cluster: 16 where schedulable and allowed, else 8 (ops_attention.cu) */
    const void *nonport[CU_NONPORT_MAX]; /* kernels allowed non-portable cluster sizes on this device (so far) */
    int n_nonport;
    bool capturing;                /* between graph_begin and graph_end */
    cu_stage stage;                /* upload staging */
    cu_buf attn_ws;                /* split-KV partial results (device) */
    cu_buf attn_cnt;               /* split-KV arrival counters (device, kept at 0 between launches) */
    cu_sample_ws *sample;          /* lazily created */
    cu_buf gdn_ws;                 /* ops_linear_attn.cu: the chunked gated delta rule's per-chunk matrices (device) */
    int gemv_occ[CU_GEMV_NK_COUNT][4][4]; /* ops_linear.cu: resident CTAs per SM of k_gemv<T, KS, NK> ([NK][T class][KS]), 0 = not asked yet */
    int gemv_rows_occ[2][CU_GEMV_NK_COUNT][4]; /* the same for k_gemv_rows<T, NR, NK, .> ([gated][NK][T class]) */
    cu_buf qlin_ws;                /* ops_linear_blocks.cu: a block-type layer's rows dequantized to BF16 for the
                                      prefill GEMM (the largest layer's tile, reserved by linear_create) */
    cu_buf i4g_ws;                 /* ops_linear_int4.cu: k_i4_gemm's split-K partials (reserved by linear_create) */
    cu_buf qx_ws;                  /* ops_linear_blocks.cu: the block GEMV's activations quantized to int8 (up to
                                      CU_QGEMV_MAX_T rows of the widest block layer, reserved by linear_create) */
    cu_buf f8x_ws;                 /* ops_linear_fp8.cu: x quantized to E4M3 and its scales (the layer's T rows) */
    cu_buf f8xb_ws;                /* ops_linear_fp8.cu: the prefill's dequantized x (BF16) */
    struct cu_f8_plan *f8_plans;   /* ops_linear_fp8.cu: cuBLASLt FP8 GEMM plans */
    bool f8_mma;                   /* the FP8 decode GEMV on the tensor cores (sm_89+; VLLM_CUDA_F8_GEMV=warp: the
                                      CUDA-core one, for comparisons) */
    bool f8m_ready;                /* its shared memory limit raised (ops_linear_fp8.cu f8m_prepare) */
    bool f8_lt;                    /* the FP8 prefill on cuBLASLt's FP8 GEMM where it has an algorithm (default;
                                      VLLM_CUDA_F8_GEMM=tiles: BF16 tiles and cuBLAS, for comparisons) */
    int qgemv_occ[DTYPE_COUNT - DTYPE_FIRST_BLOCK][4][2][2]; /* resident CTAs per SM of k_qgemv<type, T class, gated, int8 x> */
    int qgemv_ks;                  /* VLLM_CUDA_QGEMV_KS=1|2|4|8: the block GEMV's warps per row pinned (comparisons) */
    bool qgemv_f32x;               /* VLLM_CUDA_QGEMV_XQ=0: the block GEMV on BF16 activations (no int8 quantization) */
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
/* Grows a device buffer to at least bytes (contents are not kept). Fails
 * (VLLM_ERR_BACKEND) when it would have to grow during a graph capture. */
vllm_status cu_buf_reserve(cu_state *cu, cu_buf *b, size_t bytes, const char *what);
/* false (and the capture fails with a message) when a graph is being
 * recorded: for what may not be recorded (synchronize, host reads). */
bool cu_capture_guard(cu_state *cu, const char *what);
void cu_buf_free(cu_buf *b);
/* Same for pinned host memory. */
vllm_status cu_hbuf_reserve(cu_buf *b, size_t bytes, const char *what);
void cu_hbuf_free(cu_buf *b);

/* ---- argument checks (tensor/tensor_check.h, reported through cu_fail) ---- */

/* dtype masks */
#define CU_DT(t) TENSOR_DT(t)
#define CU_FLOAT TENSOR_FLOAT
#define CU_ACT (CU_DT(DTYPE_F32) | CU_DT(DTYPE_BF16))

/* t viewed as a (shape[0], product of the other dims) matrix with t's row
 * stride; rows/cols < 0 accept any size; dtype in mask. */
bool cu_check_mat(cu_state *cu, const char *op, const char *arg, const tensor *t, unsigned mask, int64_t rows,
                  int64_t cols);
/* A contiguous tensor of n elements (n < 0: any). */
bool cu_check_vec(cu_state *cu, const char *op, const char *arg, const tensor *t, unsigned mask, int64_t n);

static inline int64_t cu_rows(const tensor *t) { return t->ndim > 0 ? t->shape[0] : 1; }
/* p may be read as 16-byte vectors (uint4: 8 BF16 values). */
static inline bool cu_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- launches ---- */

/* Launches kernel<<<grid, block, smem>>>(args) on the backend's stream as thread-block clusters of cz CTAs along z
 * (cz > 1: sm_90, grid.z % cz == 0; 1: none), with programmatic dependent launch when pdl (the kernel calls
 * pdl_wait()) and the GPU has it; records a failure naming op. */
template <typename... KArgs, typename... Args>
static inline bool cu_launch_cluster(cu_state *cu, const char *op, bool pdl, void (*kernel)(KArgs...), dim3 grid,
                                     dim3 block, size_t smem, int cz, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cu->stream;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cz > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = 1;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = (unsigned)cz;
        n++;
    }
    if (pdl && cu->pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_fail(cu, "%s: kernel launch failed: %s", op, cudaGetErrorString(e));
        return false;
    }
    return true;
}

/* Allows kernel clusters of more than 8 CTAs (cudaFuncAttributeNonPortableClusterSizeAllowed), once per kernel
 * and device (the attribute call is host time on every eager launch otherwise); records a failure naming op. */
static inline bool cu_nonportable_cluster(cu_state *cu, const void *kernel, const char *op) {
    for (int i = 0; i < cu->n_nonport; i++)
        if (cu->nonport[i] == kernel) return true;
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_fail(cu, "%s: allowing clusters of 16 CTAs: %s", op, cudaGetErrorString(e));
        return false;
    }
    if (cu->n_nonport < CU_NONPORT_MAX) cu->nonport[cu->n_nonport++] = kernel;
    return true;
}

/* cu_launch_cluster without clusters: the plain launch every op uses. */
template <typename... KArgs, typename... Args>
static inline bool cu_launch(cu_state *cu, const char *op, bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                             size_t smem, Args &&...args) {
    return cu_launch_cluster(cu, op, pdl, kernel, grid, block, smem, 1, std::forward<Args>(args)...);
}

/* PDL: wait until the previous kernel's writes are visible (a no-op when
 * the kernel was launched without the attribute or before sm_90). */
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* PDL: the next kernel may be scheduled now (it still waits in pdl_wait). */
__device__ __forceinline__ void pdl_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* ---- device helpers ---- */

/* shared-memory address of p, for PTX */
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, or 16 zero bytes when !valid (src-size 0) */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
/* 4, 8 or 16 bytes global -> shared through L1 (cp.async.ca: the sizes below 16) */
template <int B>
__device__ __forceinline__ void cp_async_ca(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_u32(dst)), "l"(src), "n"(B) : "memory");
}
/* ldmatrix (x4: four 8x8 BF16 matrices; _t transposed; x2: two, addresses from lanes 0-15) */
__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c (16x8, f32) += a (16x16, bf16, row) b (16x8, bf16, col) */
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}


/* 8 BF16 values (16 bytes) widened to f32. */
__device__ __forceinline__ void bf16x8_to_f32(uint4 r, float *f) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&r;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

/* ---- the KV cache's element: BF16, or an E4M3 byte (uint8_t: the FP8 cache, --kv-cache-dtype fp8, whose
 * values multiply the cache tensor's qscale; the kernels fold that into the score scale (k) and the output (v),
 * so the bytes decode exactly, to f32 or to BF16 for the tensor cores). The overloads pick by pointer type. */
__device__ __forceinline__ uint4 kv_ld8(const __nv_bfloat16 *p) { return *(const uint4 *)p; }
__device__ __forceinline__ uint4 kv_ld8(const uint8_t *p) {
    const uint2 r = *(const uint2 *)p;
    return make_uint4(r.x, r.y, 0u, 0u);
}
__device__ __forceinline__ uint4 kv_ldcg8(const __nv_bfloat16 *p) { return __ldcg((const uint4 *)p); }
__device__ __forceinline__ uint4 kv_ldcg8(const uint8_t *p) {
    const uint2 r = __ldcg((const uint2 *)p);
    return make_uint4(r.x, r.y, 0u, 0u);
}
/* two E4M3 bytes (the low 16 bits of w) as floats (exact) */
__device__ __forceinline__ float2 e4m3x2_to_f32(uint32_t w) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    return __half22float2(*(const __half2 *)&h);
}
__device__ __forceinline__ void kv8_to_f32(uint4 r, float *f, const __nv_bfloat16 *) { bf16x8_to_f32(r, f); }
__device__ __forceinline__ void kv8_to_f32(uint4 r, float *f, const uint8_t *) {
    const uint32_t w[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 v = e4m3x2_to_f32(w[i >> 1] >> (16 * (i & 1)));
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}
__device__ __forceinline__ float kv_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float kv_to_f32(uint8_t v) { return e4m3x2_to_f32(v).x; }
/* 8 cache elements as 8 BF16 in 16 bytes (E4M3 values are BF16 values: exact) */
__device__ __forceinline__ uint4 kv8_to_bf16x8(uint4 r, const __nv_bfloat16 *) { return r; }
__device__ __forceinline__ uint4 kv8_to_bf16x8(uint4 r, const uint8_t *) {
    float f[8];
    kv8_to_f32(r, f, (const uint8_t *)nullptr);
    uint4 o;
    uint32_t *w = (uint32_t *)&o;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        w[i] = *(const uint32_t *)&b;
    }
    return o;
}
/* x / scale as an E4M3 byte: round to nearest even, saturating at +-448 (vLLM's scaled_fp8_conversion) */
__device__ __forceinline__ uint8_t f32_to_e4m3(float x, float scale) {
    return (uint8_t)__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}
/* a cache element of value x: BF16, or E4M3 of x / scale (f8) */
__device__ __forceinline__ void kv_store(void *c, int64_t i, float x, bool f8, float scale) {
    if (f8) ((uint8_t *)c)[i] = f32_to_e4m3(x, scale);
    else ((__nv_bfloat16 *)c)[i] = __float2bfloat16(x);
}

/* 8 f32 values rounded to BF16 (nearest even), packed in 16 bytes. */
__device__ __forceinline__ uint4 f32_to_bf16x8(const float *f) {
    uint4 r;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&r;
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return r;
}

/* Sum / max over a warp (every lane gets it). */
__device__ __forceinline__ float cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* One element of float dtype dt (F32, F16, BF16) at p[i], widened. */
__device__ __forceinline__ float cu_ld(const void *p, int dt, int64_t i) {
    if (dt == DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* f(dt) with the float dtype dt (BF16, F16, else F32) as a constant (std::integral_constant: decltype(dt)::value),
 * so that cu_ld's / cu_st's tests fold: in an unrolled loop a test per element makes each load a branch, and the
 * loads a chain of round trips instead of a batch in flight (k_gated_delta_rule's state: 20 us a layer) */
template <typename F>
__device__ __forceinline__ void cu_with_dt(int dt, F &&f) {
    if (dt == DTYPE_BF16) f(std::integral_constant<int, DTYPE_BF16>{});
    else if (dt == DTYPE_F16) f(std::integral_constant<int, DTYPE_F16>{});
    else f(std::integral_constant<int, DTYPE_F32>{});
}

/* A float dtype known only at run time, passed where cu_with_dt's constant would be: code written with d.value
 * takes either (the constant folds cu_ld's tests; this one keeps them, for mixes of dtypes) */
struct cu_any_dt {
    int value;
};

/* dst[j] = p[min(i0 + di j, n - 1)] (j < N) as float, the N loads in flight together (cu_with_dt; indices clamped
 * rather than tested); zeros when p is NULL */
template <int N>
__device__ __forceinline__ void cu_ld_batch(float *dst, const void *p, int dt, int i0, int di, int n) {
#pragma unroll
    for (int j = 0; j < N; j++) dst[j] = 0.0f;
    if (!p) return;
    cu_with_dt(dt, [&](auto d) {
#pragma unroll
        for (int j = 0; j < N; j++) dst[j] = cu_ld(p, decltype(d)::value, min(i0 + di * j, n - 1));
    });
}

/* Elements a thread loads at once (loads first, then the stores) in the row kernels that read and write one
 * buffer: a loop of load, store, load... cannot start a load before the previous store (they may alias) */
#define CU_ROW_BATCH 8

/* Stores v at p[i] in float dtype dt, rounding to nearest even. */
__device__ __forceinline__ void cu_st(void *p, int dt, int64_t i, float v) {
    if (dt == DTYPE_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else if (dt == DTYPE_F16) ((__half *)p)[i] = __float2half(v);
    else ((float *)p)[i] = v;
}

/* The activations cu_act has: all of be_act's but gpt-oss's clamped SwiGLU (BE_ACT_SWIGLU_OAI), which is
 * gated only: act_mul and moe_experts have it (cu_swiglu_oai); activation and linear_fused's GEMV refuse it. */
#define CU_ACT_COUNT BE_ACT_SWIGLU_OAI

/* gpt-oss's clamped SwiGLU of a gate g and an up u (backend.h BE_ACT_SWIGLU_OAI; the CPU's swiglu_oai_row):
 * g = min(g, limit), u = clamp(u, -limit, limit) (NaN stays NaN), out = (u + 1) * g * sigmoid(alpha g) */
__device__ __forceinline__ float cu_swiglu_oai(float g, float u, float alpha, float limit) {
    const float gc = g > limit ? limit : g;
    const float uc = u > limit ? limit : u < -limit ? -limit : u;
    return (uc + 1.0f) * (gc * (1.0f / (1.0f + expf(-(gc * alpha)))));
}

/* act(x) in f32 (be_act, backend.h), the CPU backend's formulas (ops_elementwise.c cpu_act). */
__device__ __forceinline__ float cu_act(int act, float x) {
    switch (act) {
    case BE_ACT_GELU_TANH: {
        const float kBeta = 0.7978845608028654f; /* sqrt(2 / pi) */
        const float kKappa = 0.044715f;
        const float inner = kBeta * (x + kKappa * (x * x * x));
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    case BE_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); /* x / sqrt(2) */
    case BE_ACT_RELU: return x < 0.0f ? 0.0f : x;
    default: return x / (1.0f + expf(-x)); /* SiLU */
    }
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
void cu_linear_fused(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f, tensor *y);
void cu_plans_free(cu_state *cu);

/* ops_elementwise.cu */
void cu_add_rms_norm(backend *be, tensor *x, const tensor *y, const tensor *w, float eps, tensor *out);
void cu_qk_norm_rope_kv(backend *be, tensor *q, tensor *k, const tensor *v, const tensor *q_norm,
                        const tensor *k_norm, float eps, const tensor *positions, const tensor *cos_sin,
                        int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m);
void cu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out);
void cu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out);
void cu_add(backend *be, tensor *x, const tensor *y);
void cu_silu_mul(backend *be, const tensor *gate_up, tensor *out);
void cu_act_mul(backend *be, be_act act, const tensor *gate_up, tensor *out);
/* act_mul with BE_ACT_SWIGLU_OAI's alpha and limit given (cu_act_mul: BE_SWIGLU_OAI_ALPHA / _LIMIT) */
void cu_act_mul_p(backend *be, be_act act, float alpha, float limit, const tensor *gate_up, tensor *out);
void cu_activation(backend *be, be_act act, tensor *x);
void cu_softcap(backend *be, tensor *x, float cap);
void cu_scale(backend *be, tensor *x, float s);
void cu_norm(backend *be, const tensor *x, const be_norm *n, tensor *out);
void cu_add_norm(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out);
void cu_norm_add_norm(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out);
void cu_norm_add_norm_to(backend *be, const tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out,
                         tensor *xo);
void cu_qk_norm_rope_kv_ex(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                           const be_norm *k_norm, const tensor *positions, const tensor *cos_sin, int head_dim,
                           int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m);
void cu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out);
void cu_rope(backend *be, tensor *q, tensor *k, const tensor *positions, const tensor *cos_sin, int head_dim,
             int rot_dim, bool neox);
/* dst (rows, cols) BF16 contiguous = src (rows, cols) of float dtype sdt with row stride ss (elements). */
bool cu_convert_bf16(cu_state *cu, void *dst, const void *src, dtype sdt, int64_t rows, int64_t cols, int64_t ss);
/* ops_dummy.cu: rows of width bytes, spitch apart at host src, into dst (dpitch apart) on cu's stream;
 * a src in a dummy arena (tensor/dummy.h) is not read: its values (of dtype dt) are written on the device.
 * Every upload of host weights goes through it. */
cudaError_t cu_h2d_2d(cu_state *cu, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                      dtype dt);
/* ops_linear.cu: y (T, m) = (accumulate: y +) x (T, k) W^T, W (m, k) BF16 on the device, through cuBLASLt or
 * cublasGemmEx; false (and cu_fail) when both fail. y: dtype ydt, rows ys apart. */
bool cu_gemm_bf16(cu_state *cu, const __nv_bfloat16 *W, int64_t m, int64_t k, const tensor *x, int64_t T, void *y,
                  dtype ydt, int64_t ys, bool accumulate);

/* ops_linear_fp8.cu: FP8_B128 layer weights (E4M3 bytes and scales on the device) */
typedef struct cu_f8w cu_f8w;
typedef struct cu_f8_plan cu_f8_plan;
void cu_f8_plans_free(cu_state *cu);
#define CU_F8_GEMV_MAX_T 8  /* tokens up to this: the FP8 GEMV; more: BF16 tiles and cuBLAS */
#define CU_GEMV_MAX_T 8     /* the most tokens the BF16 GEMV is built for (cu->gemv_max_t picks up to it) */
#define FP8_B128_ELEMS 128
vllm_status cu_f8w_create(cu_state *cu, const tensor *const *parts, int n, int64_t K, int64_t rows, cu_f8w **out);
void cu_f8w_free(cu_f8w *w);
size_t cu_f8w_tile_bytes(const cu_f8w *w);
/* the decode GEMV takes x (T tokens; else the prefill path) */
bool cu_f8_gemv_fits(const cu_f8w *w, const tensor *x, int64_t T);
/* y (T, N) (+)= x (T, K) W^T (+ bias): x BF16; false (and cu_fail) on a failure */
bool cu_f8_linear(cu_state *cu, const cu_f8w *w, const float *bias, const tensor *x, tensor *y, bool accumulate);
/* y (T, N / 2) = act(x W_gate^T + b) * (x W_up^T + b) in one decode GEMV (W's rows gate then up); false (nothing
 * launched) where that kernel does not take x: the caller runs the composite */
bool cu_f8_gemv_glu(cu_state *cu, const cu_f8w *w, const float *bias, const tensor *x, tensor *y, int act);

/* ops_linear_int4.cu: I4_B128 layer weights (AWQ / GPTQ 4-bit, kept in 4 bits on the device) */
typedef struct cu_i4w cu_i4w;
vllm_status cu_i4w_create(cu_state *cu, const tensor *const *parts, int n, int64_t K, int64_t rows, cu_i4w **out);
void cu_i4w_free(cu_i4w *w);
size_t cu_i4w_tile_bytes(const cu_i4w *w);
/* the split-K partials k_i4_gemm may need (cu->i4g_ws, reserved at creation: none while a graph records) */
size_t cu_i4w_gemm_ws_bytes(const cu_state *cu, const cu_i4w *w);
/* the decode GEMV takes x (T tokens, BF16; else the dequantized tiles and cuBLAS) */
bool cu_i4_gemv_fits(const cu_i4w *w, const tensor *x, int64_t T);
/* y (T, N) (+)= x W^T (+ bias); false (and cu_fail) on a failure */
bool cu_i4_linear(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, bool accumulate);
/* the gated form in one GEMV (as cu_f8_gemv_glu); false (nothing launched) where it does not take x */
bool cu_i4_gemv_glu(cu_state *cu, const cu_i4w *w, const float *bias, const tensor *x, tensor *y, int act);

/* y (T, N) of dtype ydt with row stride ys += bias (N) F32. */
bool cu_add_bias(cu_state *cu, void *y, dtype ydt, int64_t ys, const float *bias, int64_t T, int64_t N);

/* ops_attention.cu */
/* the scale an F8_E4M3 cache's values multiply (1 for BF16) */
static inline float cu_cache_scale(const tensor *c) {
    return c->dtype == DTYPE_F8_E4M3 && c->qscale > 0.0f ? c->qscale : 1.0f;
}
/* The paged-cache fields every attention kernel's arguments carry (A: their struct). */
template <typename A>
static inline void cu_attn_fill_paged(A &a, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                                      const attn_params *p) {
    a.kc = k_cache->data;
    a.vc = v_cache->data;
    a.kscale = cu_cache_scale(k_cache);
    a.vscale = cu_cache_scale(v_cache);
    a.kvd = (int64_t)p->num_kv_heads * p->head_dim;
    a.num_blocks = k_cache->shape[0];
    a.bs = m->block_size;
    a.qsl = (const int32_t *)m->query_start_loc.data;
    a.seq_lens = (const int32_t *)m->seq_lens.data;
    a.bt = (const int32_t *)m->block_tables.data;
    a.bt_stride = tensor_row_stride(&m->block_tables);
    a.max_blocks = m->max_blocks_per_seq;
}
/* The sequence that owns query token t of a varlen batch (the last s with qsl[s] <= t; in a decode batch, s = t),
 * its new tokens [q0, q1) and context ctx, checked: qsl's ends (reported by token 0), t inside its sequence, the
 * context within the block table; reporter: this CTA reports what it finds. Returns whether t can be attended.
 * A: an attention kernel's arguments (qsl, seq_lens, S, T, max_blocks, bs, err). */
template <typename A>
__device__ __forceinline__ bool cu_attn_token_seq(const A &a, int t, bool reporter, int *s_out, int *q0_out,
                                                  int *q1_out, int *ctx_out) {
    int s = t < a.S ? t : a.S - 1;
    /* the guess s = t (decode: a token a sequence) loads its context with its bounds, in one round trip */
    int q0 = a.qsl[s], q1 = a.qsl[s + 1], ctx = a.seq_lens[s];
    if (!(q0 <= t && t < q1)) {
        int lo = 0, hi = a.S - 1;
        while (lo < hi) {
            const int mid = lo + (hi - lo + 1) / 2;
            if (a.qsl[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        s = lo;
        q0 = a.qsl[s];
        q1 = a.qsl[s + 1];
        ctx = a.seq_lens[s];
    }
    bool ok = true;
    if (t == 0 && reporter && (a.qsl[0] != 0 || a.qsl[a.S] != a.T))
        cu_report(a.err, CU_DEV_ATTN_QSL, a.qsl[0] != 0 ? 0 : a.S, a.qsl[0] != 0 ? a.qsl[0] : a.qsl[a.S], a.T);
    if (!(q0 <= t && t < q1)) {
        ok = false;
        if (reporter) cu_report(a.err, CU_DEV_ATTN_QSL, s + 1, q1, a.T);
    } else if (ctx < q1 - q0 || (int64_t)ctx > (int64_t)a.max_blocks * a.bs) {
        ok = false;
        if (reporter) cu_report(a.err, CU_DEV_ATTN_META, s, q1 - q0, ctx);
    }
    *s_out = s;
    *q0_out = q0;
    *q1_out = q1;
    *ctx_out = ctx;
    return ok;
}
/* BN paged-cache rows of HD BF16 values (slots[r]: the row's cache slot, -1: zero-filled) of K and V into shared
 * memory rows LD apart with cp.async, by the NT threads of the CTA (tid); kbase / vbase: the caches at the KV
 * head's first element, kvd elements a slot. */
template <int BN, int HD, int LD, int NT>
__device__ __forceinline__ void cp_async_kv_rows(__nv_bfloat16 *sk, __nv_bfloat16 *sv, const __nv_bfloat16 *kbase,
                                                 const __nv_bfloat16 *vbase, const long long *slots, int64_t kvd,
                                                 int tid) {
    constexpr int CPR = HD / 8; /* 16-byte chunks per row */
    for (int i = tid; i < BN * CPR; i += NT) {
        const int r = i / CPR, c = i % CPR;
        const long long slot = slots[r];
        const bool valid = slot >= 0;
        const int64_t off = valid ? slot * kvd + c * 8 : 0;
        cp_async16(sk + r * LD + c * 8, kbase + off, valid);
        cp_async16(sv + r * LD + c * 8, vbase + off, valid);
    }
}
/* One step of the online softmax (base 2) over mma.sync score fragments: sc[NT][4] holds a warp's masked, scaled
 * scores of NT 8-key tiles (elements 0, 1 of row g = lane / 4, 2, 3 of row g + 8); each row's running max mrow and
 * (per-lane partial) sum lrow are updated, sc becomes the probabilities 2^(s - max), and the ND output fragments o
 * (the same rows) are rescaled to the new max (to 0 while the row had no key). */
template <int NT, int ND>
__device__ __forceinline__ void mma_softmax_step(float (*sc)[4], float *mrow, float *lrow, float (*o)[4]) {
    float corr[2];
    float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float use = mx[r] == -INFINITY ? 0.0f : mx[r];
        corr[r] = exp2f(mrow[r] - use); /* 0 while the row had nothing */
        mrow[r] = mx[r];
        lrow[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float use = mrow[e >> 1] == -INFINITY ? 0.0f : mrow[e >> 1];
            const float pv = exp2f(sc[n][e] - use);
            sc[n][e] = pv;
            lrow[e >> 1] += pv;
        }
#pragma unroll
    for (int d = 0; d < ND; d++) {
        o[d][0] *= corr[0];
        o[d][1] *= corr[0];
        o[d][2] *= corr[1];
        o[d][3] *= corr[1];
    }
}
/* Checks a paged cache: BF16 or F8_E4M3 (num_blocks, block_size, nkv, head_dim), an F8 one's qscale positive
 * and finite (or 0: 1). */
bool cu_cache_check(cu_state *cu, const char *op, const char *arg, const tensor *c, int block_size, int nkv, int hd);
/* ops_attention_tc.cu: prefill chunks on the tensor cores (sequences with at
 * least TC_MIN_Q new tokens, head_dim 64 / 128 / 256 (256: cu->tc_hd256), BF16 q and out) */
#define TC_MIN_Q 16
/* ops_attention_mla_tc.cu: MLA attention on the tensor cores (BF16 cache and queries, L in 64 / 128 / 256 / 512) */
bool cu_attention_mla_tc_fits(const tensor *q_lat, const tensor *q_rope, const tensor *cache, const tensor *out,
                              int L, int R);
void cu_attention_mla_tc(cu_state *cu, const tensor *q_lat, const tensor *q_rope, const tensor *cache,
                         const attn_meta *m, const mla_params *p, tensor *out);
vllm_status cu_attention_tc_init(cu_state *cu);
bool cu_attention_tc_fits(const cu_state *cu, const tensor *q, const tensor *out, int hd, int max_query_len);
void cu_attention_tc(cu_state *cu, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                     const attn_params *p, tensor *out);
/* ops_attention_dtc.cu: decode attention for large batches on the tensor cores (BF16 cache, q and out, head_dim
 * 64 / 128, and 256 with VLLM_CUDA_DTC_HD256=1; no softcap or sinks); tc: the prefill kernel takes the sequences of >= TC_MIN_Q new tokens */
vllm_status cu_attention_dtc_init(cu_state *cu);
bool cu_attention_dtc_fits(const cu_state *cu, const tensor *q, const tensor *out, const tensor *k_cache,
                           const tensor *v_cache, const attn_params *p);
void cu_attention_dtc(cu_state *cu, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                      const attn_params *p, tensor *out, bool tc);
/* ops_stack.cu: a decode token through a stack of dense layers in one persistent kernel (dense_stack_decode) */
#define CU_STACK_MAX_LAYERS 128
be_support cu_dense_stack_supports(cu_state *cu, const be_dense_stack *st);
vllm_status cu_stack_reserve(cu_state *cu);
void cu_dense_stack_decode(backend *be, const be_dense_stack *st, tensor *x, const tensor *positions,
                           const attn_meta *m, tensor *qkv, tensor *attn, tensor *act);
/* ops_linear.cu: lin is plain BF16 weights (out, in) (not block, FP8 or int4 ones); its device weights and bias */
bool cu_linear_plain_bf16(const be_linear *lin, int64_t out, int64_t in);
const __nv_bfloat16 *cu_linear_weights(const be_linear *lin);
const float *cu_linear_bias(const be_linear *lin);
/* Allocates the split-KV workspace at its largest (at creation). */
vllm_status cu_attention_reserve(cu_state *cu);
void cu_kv_write(backend *be, const tensor *k, const tensor *v, tensor *k_cache, tensor *v_cache,
                 const attn_meta *m);
void cu_attention(backend *be, const tensor *q, const tensor *k_cache, const tensor *v_cache, const attn_meta *m,
                  const attn_params *p, tensor *out);

/* ops_attention_mla.cu: multi-head latent attention (DeepSeek-V2 / V3; latent caches BF16, F32 or F8_E4M3,
 * L + R <= 1024) */
void cu_head_linear(backend *be, const tensor *x, const tensor *w, tensor *y);
/* comm_nccl.cu: tensor parallelism */
void cu_all_reduce(backend *be, tensor *x);
void cu_all_gather_cols(backend *be, const tensor *x, tensor *out);
void cu_embedding_range(backend *be, const tensor *table, const tensor *ids, int64_t row0, tensor *out);
void cu_bind_thread(backend *be);
void cu_comm_free(cu_state *cu);
/* Why attention_mla cannot run p's shape over a cache_dt cache on this GPU (NULL: it can); supports(BE_OP_MLA). */
const char *cu_attention_mla_unsupported(const cu_state *cu, const mla_params *p, dtype cache_dt);
/* The tensor-core kernel's shared memory for (L, R), 0 for shapes it does not take. */
size_t cu_attention_mla_tc_smem(int L, int R);
void cu_mla_prep(backend *be, tensor *q_rope, tensor *kv, const tensor *norm_w, float eps, const tensor *positions,
                 const tensor *cos_sin, int rope_dim, bool neox, tensor *cache, const attn_meta *m);
void cu_attention_mla(backend *be, const tensor *q_lat, const tensor *q_rope, const tensor *kv, tensor *cache,
                      const attn_meta *m, const mla_params *p, tensor *out);

/* ops_sample.cu */
vllm_status cu_sample(backend *be, tensor *logits, const sample_batch *b);
vllm_status cu_logprobs(backend *be, const tensor *logits, const logprob_batch *b);
void cu_sample_free(cu_state *cu);

/* ops_moe.cu: mixture of experts (backend.h); scratch shared by a backend's layers, freed with its last experts */
#define CU_MOE_MAX_E 512        /* experts per layer the permutation's shared memory holds */
#define CU_MOE_MAX_K 64         /* top_k of moe_experts (the combine's per-token list) */
#define CU_MOE_GEMV_MAX_PAIRS 64 /* T * k up to this: the decode path (expert GEMV), recordable into graphs */
#define CU_DEV_MOE_ID 64  /* cu_dev_err code: moe_experts got an expert id out of range (a: token, b: id, c: experts) */
vllm_status cu_experts_reserve(backend *be, const be_experts *ex, int64_t max_pairs);
vllm_status cu_experts_create(backend *be, const tensor *const *gate, const tensor *const *up,
                              const tensor *const *down, const be_expert_bias *bias, int E, be_experts **out);
void cu_experts_free(backend *be, be_experts *ex);
bool cu_moe_params_ok(cu_state *cu, const char *op, const moe_params *p); /* false (cu_fail naming op) if bad */
/* ops_moe_route.cu: the routing */
void cu_moe_route(backend *be, const tensor *logits, const moe_params *p, tensor *ids, tensor *w);
void cu_moe_experts(backend *be, const be_experts *ex, const tensor *x, const tensor *ids, const tensor *w,
                    const moe_params *p, bool accumulate, tensor *y);
void cu_sigmoid_gate(backend *be, tensor *x, const tensor *g);

/* ops_linear_attn.cu: the gated delta-net mixer's ops (BE_OP_GATED_DELTA_NET) */
#define CU_LA_MAX_CONV_K 8      /* causal_conv1d's widest kernel (one template per width) */
#define CU_LA_MAX_DK 256        /* gated_delta_rule's largest d_k (the state rows a block keeps in registers) */
extern "C" {
void cu_causal_conv1d(backend *be, const tensor *x, const tensor *w, const tensor *bias, bool silu,
                      tensor *conv_state, const linear_attn_meta *m, tensor *out);
void cu_gated_delta_rule(backend *be, const tensor *q, const tensor *k, const tensor *v, const tensor *g,
                         const tensor *beta, tensor *state, const linear_attn_meta *m, const gdn_params *p,
                         tensor *out);
void cu_rms_norm_gated(backend *be, const tensor *x, const tensor *z, const tensor *w, float eps, tensor *out);
void cu_gdn_gating(backend *be, const tensor *a, const tensor *b, const tensor *A_log, const tensor *dt_bias,
                   tensor *g, tensor *beta);
void cu_sigmoid_mul(backend *be, tensor *x, const tensor *gate);
vllm_status cu_gdn_reserve(backend *be, const gdn_params *p, int64_t max_tokens);
}

#endif
