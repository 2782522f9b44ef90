/*
 * cpu_internal.h: private state and helpers shared by the CPU backend's files
 * (cpu_backend.c and the ops_*.c kernel groups).
 *
 * Every op validates its arguments on the calling thread before it starts
 * any work; a failure is recorded with cpu_fail() (the first one wins), the
 * op does nothing, and the next synchronize/download reports it.
 */
#ifndef VLLM_CPU_CPU_INTERNAL_H
#define VLLM_CPU_CPU_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/threadpool.h"
#include "tensor/backend.h"

#if defined(__GNUC__)
#define CPU_INLINE static inline __attribute__((always_inline))
#else
#define CPU_INLINE static inline
#endif

/* Fused multiply-add when the target has it (one rounding, and gcc in ISO
 * mode does not contract a * b + c by itself); a plain multiply-add else. */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define CPU_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define CPU_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* Accumulator lanes of the dot-product loops (one AVX-512 register). */
#define CPU_LANES 16
/* Largest head_dim the attention kernel supports (its accumulator is on the stack). */
#define CPU_MAX_HEAD_DIM 1024

typedef struct cpu_state {
    tp_pool *pool;
    int num_threads;
    vllm_status err;   /* first op failure since the last synchronize; VLLM_OK = none */
    char err_msg[512];
    sample_ws *sample_ws; /* (num_threads) sampling workspaces, made on first use */
    float *attn_dec;      /* FP8 KV caches: (num_threads, 2, 32, head_dim) decoded keys / values, grown on use */
    struct tpg_group *tp_group; /* backend_options.tp_group / tp_rank: all_reduce's group, or NULL */
    int tp_rank;
    size_t attn_dec_cap;  /* its floats */
    float *lin_ws;        /* the blocked linear's per-thread weight tiles and accumulators, grown on use */
    size_t lin_ws_cap;    /* its floats */
} cpu_state;

static inline cpu_state *cpu_of(backend *be) { return (cpu_state *)be->impl; }

/* Records an op failure (kept only if none is pending). Calling thread only. */
void cpu_fail(cpu_state *cpu, const char *fmt, ...) VT_PRINTF(2, 3);

/* Argument checks: on failure they call cpu_fail naming op and arg and
 * return false. A matrix is t viewed as (shape[0], product of the other
 * dims) with t's row stride; rows/cols < 0 accept any size. dt may be
 * CPU_ANY_FLOAT (F32, F16 or BF16). */
#define CPU_ANY_FLOAT DTYPE_COUNT
bool cpu_check_mat(cpu_state *cpu, const char *op, const char *arg, const tensor *t, dtype dt,
                   int64_t rows, int64_t cols);
/* A contiguous tensor of n elements (any shape); n < 0 accepts any count. */
bool cpu_check_vec(cpu_state *cpu, const char *op, const char *arg, const tensor *t, dtype dt, int64_t n);

static inline int64_t cpu_rows(const tensor *t) { return t->ndim > 0 ? t->shape[0] : 1; }

/* ---- widening loads (any alignment: checkpoint memory may be only byte aligned) ---- */

/* f16 -> f32 without branches so that loops over it vectorise: move the
 * exponent and mantissa into place and rescale by 2^112 (exact, subnormals
 * included), then patch inf/nan and the sign. */
static inline float cpu_f16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)(h & 0x7fffu) << 13;
    float f;
    memcpy(&f, &bits, 4);
    f *= 0x1p112f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (h & 0x7c00u) == 0x7c00u ? (bits | 0x7f800000u) : u;
    u |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &u, 4);
    return f;
}

/* dst[0 .. n) = the n elements of float dtype dt at src, widened to f32. */
/* sum of a[i] * b[i] over 128 elements, in 16 lanes then a fixed tree (the FP8 and int4 block matmuls' order) */
CPU_INLINE float cpu_dot128(const float *a, const float *b) {
    float l[16] = {0};
    for (int i = 0; i < 128; i += 16)
        for (int j = 0; j < 16; j++) l[j] = CPU_FMA(a[i + j], b[i + j], l[j]);
    for (int h = 8; h > 0; h /= 2)
        for (int j = 0; j < h; j++) l[j] += l[j + h];
    return l[0];
}

CPU_INLINE void cpu_widen(float *dst, const void *src, dtype dt, int64_t n) {
    const unsigned char *s = (const unsigned char *)src;
    if (dt == DTYPE_F32) {
        memcpy(dst, s, (size_t)n * 4);
    } else if (dt == DTYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
    } else {
        int64_t i = 0;
        /* the hardware conversion, as wide as the vectors the FMA loops load
         * back (a narrower store than the load would defeat store forwarding) */
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(s + 2 * i));
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
        }
#elif defined(__F16C__)
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i));
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        }
#endif
        for (; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = cpu_f16_to_f32(h);
        }
    }
}

/* One element of float dtype dt at src[i]. */
CPU_INLINE float cpu_load(const void *src, dtype dt, int64_t i) {
    const unsigned char *s = (const unsigned char *)src;
    if (dt == DTYPE_F32) {
        float f;
        memcpy(&f, s + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    return dt == DTYPE_BF16 ? bf16_to_f32(h) : cpu_f16_to_f32(h);
}

/* Sum of a[0 .. n) * b[0 .. n) in f32, with CPU_LANES accumulators and a
 * fixed summation order. */
CPU_INLINE float cpu_dot(const float *a, const float *b, int64_t n) {
#if defined(__AVX2__) && defined(__FMA__) && CPU_LANES == 16
    /* the portable loop's arithmetic, in registers: lanes 0-7 and 8-15 */
    {
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= n; k += 16) {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), lo);
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), hi);
        }
        for (; k + 8 <= n; k += 8) lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), lo);
        float tail = 0.0f;
        for (; k < n; k++) tail = CPU_FMA(a[k], b[k], tail);
        __m256 v = _mm256_add_ps(lo, hi);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        return _mm_cvtss_f32(h) + tail;
    }
#endif
    float acc[CPU_LANES] = {0};
    int64_t k = 0;
    for (; k + CPU_LANES <= n; k += CPU_LANES) {
        const float *ak = a + k, *bk = b + k;
#pragma GCC unroll 1  /* keeps gcc from unrolling this before it vectorises it */
        for (int j = 0; j < CPU_LANES; j++) acc[j] = CPU_FMA(ak[j], bk[j], acc[j]);
    }
    /* 8 columns at a time (head_dim 8, 24, 40 ...), into the first lanes */
    for (; k + 8 <= n; k += 8) {
        const float *ak = a + k, *bk = b + k;
        for (int j = 0; j < 8; j++) acc[j] = CPU_FMA(ak[j], bk[j], acc[j]);
    }
    float tail = 0.0f;
    for (; k < n; k++) tail = CPU_FMA(a[k], b[k], tail);
    for (int w = CPU_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0] + tail;
}

/* exp(x) written so that loops over it vectorise (libm's expf does not
 * without -fno-math-errno): x = n ln2 + r with |r| <= ln2 / 2, e^r by its
 * degree-7 Taylor polynomial (relative error < 2e-7), 2^n through the
 * exponent bits. x is clamped to [-87, 88], so tiny results are about
 * 1.6e-38 instead of denormals or 0 and huge ones about 1.7e38 instead of
 * inf; NaN stays NaN. */
static inline float cpu_expf(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    xc = xc == xc ? xc : 0.0f;  /* NaN: computed on 0, returned as NaN below */
    const float round_magic = 12582912.0f;  /* 1.5 * 2^23: adding it rounds to an integer */
    float n = CPU_FMA(xc, 1.44269504f, round_magic) - round_magic;
    float r = CPU_FMA(n, -0.693145752f, xc);  /* ln2 split in a high part exact in float ... */
    r = CPU_FMA(n, -1.42860677e-6f, r);      /* ... and the rest */
    float p = 1.0f / 5040;
    p = CPU_FMA(p, r, 1.0f / 720);
    p = CPU_FMA(p, r, 1.0f / 120);
    p = CPU_FMA(p, r, 1.0f / 24);
    p = CPU_FMA(p, r, 1.0f / 6);
    p = CPU_FMA(p, r, 0.5f);
    p = CPU_FMA(p, r, 1.0f);
    p = CPU_FMA(p, r, 1.0f);
    int32_t e = (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x == x ? p * scale : x;
}

/* ---- ops (one file per kernel group) ---- */

/* ops_linear.c */
vllm_status cpu_linear_create(backend *be, const tensor *const *weights, const tensor *const *biases,
                              int n, be_linear **out);
void cpu_linear_free(backend *be, be_linear *lin);
void cpu_linear(backend *be, const be_linear *lin, const tensor *x, tensor *y);
/* One output of cpu_linear by its definition (16 lanes over k, a fixed tree): the tests' bit-exact reference. */
float cpu_linear_dot_ref(const float *x, const void *w, dtype dt, int64_t n);

/* ops_elementwise.c */
void cpu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out);
void cpu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out);
void cpu_add(backend *be, tensor *x, const tensor *y);
void cpu_silu_mul(backend *be, const tensor *gate_up, tensor *out);
void cpu_act_mul(backend *be, be_act act, const tensor *gate_up, tensor *out);
/* act_mul with BE_ACT_SWIGLU_OAI's alpha and limit (other activations ignore them) */
void cpu_act_mul_p(backend *be, be_act act, float alpha, float limit, const tensor *gate_up, tensor *out);
void cpu_activation(backend *be, be_act act, tensor *x);
void cpu_softcap(backend *be, tensor *x, float cap);
void cpu_scale(backend *be, tensor *x, float s);
void cpu_norm(backend *be, const tensor *x, const be_norm *n, tensor *out);
void cpu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out);
void cpu_add_rms_norm(backend *be, tensor *x, const tensor *y, const tensor *w, float eps, tensor *out);
void cpu_linear_fused(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f, tensor *y);
void cpu_add_norm(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out);
void cpu_norm_add_norm(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out);
void cpu_qk_norm_rope_kv_ex(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                            const be_norm *k_norm, const tensor *positions, const tensor *cos_sin, int head_dim,
                            int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m);
be_support cpu_supports(backend *be, be_op op, const void *params);
void cpu_qk_norm_rope_kv(backend *be, tensor *q, tensor *k, const tensor *v, const tensor *q_norm,
                         const tensor *k_norm, float eps, const tensor *positions, const tensor *cos_sin,
                         int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m);
vllm_status cpu_sample(backend *be, tensor *logits, const sample_batch *b);
vllm_status cpu_logprobs(backend *be, const tensor *logits, const logprob_batch *b);
void cpu_sample_free(cpu_state *cpu);

/* ops_rope.c */
void cpu_rope(backend *be, tensor *q, tensor *k, const tensor *positions, const tensor *cos_sin,
              int head_dim, int rot_dim, bool neox);

/* ops_moe.c */
vllm_status cpu_experts_create(backend *be, const tensor *const *gate, const tensor *const *up,
                               const tensor *const *down, const be_expert_bias *bias, int E, be_experts **out);
void cpu_experts_free(backend *be, be_experts *ex);
void cpu_moe_route(backend *be, const tensor *logits, const moe_params *p, tensor *ids, tensor *w);
void cpu_moe_experts(backend *be, const be_experts *ex, const tensor *x, const tensor *ids, const tensor *w,
                     const moe_params *p, bool accumulate, tensor *y);
void cpu_sigmoid_gate(backend *be, tensor *x, const tensor *g);

/* ops_linear_attn.c */
void cpu_causal_conv1d(backend *be, const tensor *x, const tensor *w, const tensor *bias, bool silu,
                       tensor *conv_state, const linear_attn_meta *m, tensor *out);
void cpu_gated_delta_rule(backend *be, const tensor *q, const tensor *k, const tensor *v, const tensor *g,
                          const tensor *beta, tensor *state, const linear_attn_meta *m, const gdn_params *p,
                          tensor *out);
void cpu_rms_norm_gated(backend *be, const tensor *x, const tensor *z, const tensor *w, float eps, tensor *out);
void cpu_gdn_gating(backend *be, const tensor *a, const tensor *b, const tensor *A_log, const tensor *dt_bias,
                    tensor *g, tensor *beta);
void cpu_sigmoid_mul(backend *be, tensor *x, const tensor *gate);
/* p's shapes are positive, H_v % H_k == 0, the scale finite and >= 0, conv_kernel 0 or >= 2 and the
 * state dtype F32 / F16 / BF16 (supports(BE_OP_GATED_DELTA_NET)) */
bool cpu_gdn_params_ok(const gdn_params *p);

/* ops_attention.c */
void cpu_kv_write(backend *be, const tensor *k, const tensor *v, tensor *k_cache, tensor *v_cache,
                  const attn_meta *m);
void cpu_attention(backend *be, const tensor *q, const tensor *k_cache, const tensor *v_cache,
                   const attn_meta *m, const attn_params *p, tensor *out);

/* ops_attention_mla.c */
void cpu_head_linear(backend *be, const tensor *x, const tensor *w, tensor *y);
/* The MLA shapes ops_attention_mla.c runs (supports(BE_OP_MLA)). */
bool cpu_mla_params_ok(const mla_params *p);
void cpu_mla_prep(backend *be, tensor *q_rope, tensor *kv, const tensor *norm_w, float eps, const tensor *positions,
                  const tensor *cos_sin, int rope_dim, bool neox, tensor *cache, const attn_meta *m);
void cpu_attention_mla(backend *be, const tensor *q_lat, const tensor *q_rope, const tensor *kv, tensor *cache,
                       const attn_meta *m, const mla_params *p, tensor *out);

#endif
