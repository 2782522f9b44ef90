/*
 * ops_quant.c: SIMD dot products over ggml's quantized blocks and the quantized matmul (see cpu_quant.h).
 *
 * Every kernel computes, per block, the integer sums of ggml's generic vec_dot (gq_vec_dot in
 * src/tensor/ggml_quant.c; llama.cpp ggml/src/ggml-cpu/quants.c) and scales them in float: only the order
 * of the float additions differs from the reference. Building blocks, on 256-bit vectors:
 *
 *   - u8 x s8 products summed in 4s into int32 lanes: VNNI vpdpbusd, else vpmaddubsw + vpmaddwd;
 *   - int16 x int16 in pairs into int32 lanes: VNNI vpdpwssd, else vpmaddwd + vpaddd. The K types multiply
 *     a sub-block's vpmaddubsw sums (int16: at most 2 * 63 * 127) by its scale this way;
 *   - a signed weight with signed activations uses |w| x (a with w's sign) (vpsignb), so that the unsigned
 *     operand is |w| <= 128 and no pair sum saturates (|a| <= 127 for ggml's activation quantizers);
 *   - weights with an offset (Q6_K's -32, Q3_K's -4) are dotted unsigned and corrected with Q8_K's bsums.
 *
 * A kernel decodes a weight block once for up to CQ_NT activation rows (prefill reuses the decode; decode
 * steps run it with one row). The 32-element types widen the f16 scales of 8 blocks at once. A row's
 * arithmetic does not depend on the other rows of its group, so the matmul's output is bit-identical for any
 * T, tiling or thread count, and equal to cpu_quant_vec_dot's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu_quant.h"
#include "tensor/tensor.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define CQ_AVX2 1
#include <immintrin.h>
#else
#define CQ_AVX2 0
#endif

#if CQ_AVX2 && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define CQ_VNNI 1 /* AVX-512 VNNI on 256-bit vectors */
#elif CQ_AVX2 && defined(__AVXVNNI__)
#define CQ_VNNI 2 /* AVX-VNNI */
#else
#define CQ_VNNI 0
#endif

#if CQ_AVX2 && defined(__AVX512BW__) && defined(__AVX512VL__)
#define CQ_BW 1
#else
#define CQ_BW 0
#endif

/* two weight rows per 512-bit register (the K types' matmul): AVX-512 BW + VNNI */
#if CQ_AVX2 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define CQ_Z 1
#else
#define CQ_Z 0
#endif

#if defined(__GNUC__)
#define CQ_INLINE static inline __attribute__((always_inline))
#else
#define CQ_INLINE static inline
#endif

const char *cpu_quant_isa(void) {
#if CQ_VNNI == 1
    return "avx512-vnni";
#elif CQ_VNNI == 2
    return "avx-vnni";
#elif CQ_AVX2
    return "avx2";
#else
    return "portable";
#endif
}

/* token rows per pass over a weight row (a decoded weight block is reused for this many rows) */
#define CQ_NT 4
/* the pair kernels' (two weight rows per register) */
#define CQ_NT2 8
/* bytes ahead of the blocks in use that the kernels prefetch: a row is one sequential stream, and the
 * software prefetch 3 KiB ahead (768: 24.3, 1536: 25.3) takes the 0.6B Q4_K_M decode from 19.5 to 25.3 tok/s */
#define CQ_PREFETCH 3072

#if CQ_AVX2

/* ---- building blocks ---- */

#define CQ_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define CQ_LOAD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))

/* the cache lines of [p + CQ_PREFETCH, p + CQ_PREFETCH + bytes) */
CQ_INLINE void cq_prefetch(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + CQ_PREFETCH + o, _MM_HINT_T0);
}

CQ_INLINE float cq_f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8))); }

/* acc + sums of 4 products u8 (u) x s8 (s) per int32 lane */
CQ_INLINE __m256i cq_dpbusd(__m256i acc, __m256i u, __m256i s) {
#if CQ_VNNI == 1
    return _mm256_dpbusd_epi32(acc, u, s);
#elif CQ_VNNI == 2
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + sums of 2 products int16 x int16 per int32 lane */
CQ_INLINE __m256i cq_dpwssd(__m256i acc, __m256i a, __m256i b) {
#if CQ_VNNI == 1
    return _mm256_dpwssd_epi32(acc, a, b);
#elif CQ_VNNI == 2
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

CQ_INLINE float cq_hsum_ps(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

CQ_INLINE int32_t cq_hsum_epi32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

/* The 32 nibbles of 16 bytes: low nibbles in bytes 0..15, high nibbles in bytes 16..31 (the element order of
 * the 32-blocks and of IQ4_XS sub-blocks). */
CQ_INLINE __m256i cq_nibbles(const uint8_t *qs) {
    __m128i q = CQ_LOAD128(qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* byte j = 0x10 where bit j of the 4 little-endian bytes at p is set, else 0 (Q5_0 / Q5_1's 5th bits) */
CQ_INLINE __m256i cq_bit4(const uint8_t *p) {
    uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#if CQ_BW
    return _mm256_maskz_mov_epi8((__mmask32)bits, _mm256_set1_epi8(0x10));
#else
    __m256i v = _mm256_set1_epi32((int)bits);
    v = _mm256_shuffle_epi8(v, _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                  0x0101010101010101ll, 0x0000000000000000ll));
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
#endif
}

/* vpshufb control: every int16 lane of the low 128 bits takes int16 lane k0 of its 128-bit source, every
 * lane of the high 128 bits lane k1 (the two 16-element sub-blocks of a 32-element group). */
CQ_INLINE __m256i cq_pick16(int k0, int k1) {
    return _mm256_set_m128i(_mm_set1_epi16((short)((2 * k1) | ((2 * k1 + 1) << 8))),
                            _mm_set1_epi16((short)((2 * k0) | ((2 * k0 + 1) << 8))));
}

/* the sum of 4 int32 accumulators */
CQ_INLINE __m256i cq_add4(const __m256i acc[4]) {
    return _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
}

/* 8 int16 in a 128-bit register, copied to both halves */
CQ_INLINE __m256i cq_dup128(__m128i v) { return _mm256_broadcastsi128_si256(v); }

/* ---- kernels ----
 *
 * Each kernel takes one weight row and nt <= CQ_NT activation rows: a weight block is decoded once and
 * dotted with every row (prefill reuses the decode). The arithmetic of one activation row does not depend
 * on nt, so a dot product is bit-identical whether it ran alone (the vec_dot, nt = 1) or in a group. */

/* The nt-specialised entry points of kernel cq_k_NAME: cq_dotn_NAME(w, x, nt, n, out). */
#define CQ_DEFINE_DOTN(NAME)                                                                      \
    static void cq_dotn_##NAME(const void *w, const void *const *x, int nt, int64_t n, float *out) { \
        switch (nt) {                                                                             \
        case 4: cq_k_##NAME(w, x, 4, n, out); break;                                              \
        case 3: cq_k_##NAME(w, x, 3, n, out); break;                                              \
        case 2: cq_k_##NAME(w, x, 2, n, out); break;                                              \
        default: cq_k_##NAME(w, x, 1, n, out); break;                                             \
        }                                                                                         \
    }

/* ---- 32-element block types (activations Q8_0, or Q8_1 for Q4_1 / Q5_1) ---- */

/* A decoded block: its 32 values as int8 (q; the _1 types unsigned) and |q| for the signed types (d, and m
 * of the _1 types, are read 8 blocks at a time: the first field of every 32-element block is d, m follows). */
typedef struct cq_w32 {
    __m256i q, qa;
} cq_w32;

CQ_INLINE bool cq_is_1(ggml_type t) { return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1; }

CQ_INLINE cq_w32 cq_decode32(ggml_type t, const uint8_t *b, __m256i iq4_table) {
    cq_w32 r = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    switch (t) {
    case GGML_TYPE_Q8_0: r.q = CQ_LOAD(((const gq_block_q8_0 *)b)->qs); break;
    case GGML_TYPE_Q4_0: r.q = _mm256_sub_epi8(cq_nibbles(((const gq_block_q4_0 *)b)->qs), _mm256_set1_epi8(8)); break;
    case GGML_TYPE_Q5_0: {
        const gq_block_q5_0 *q = (const gq_block_q5_0 *)b;
        r.q = _mm256_sub_epi8(_mm256_or_si256(cq_nibbles(q->qs), cq_bit4(q->qh)), _mm256_set1_epi8(16));
        break;
    }
    case GGML_TYPE_IQ4_NL: r.q = _mm256_shuffle_epi8(iq4_table, cq_nibbles(((const gq_block_iq4_nl *)b)->qs)); break;
    case GGML_TYPE_MXFP4: r.q = _mm256_shuffle_epi8(iq4_table, cq_nibbles(((const gq_block_mxfp4 *)b)->qs)); break;
    case GGML_TYPE_Q4_1: {
        const gq_block_q4_1 *q = (const gq_block_q4_1 *)b;
        r.q = cq_nibbles(q->qs);
        break;
    }
    case GGML_TYPE_Q5_1: {
        const gq_block_q5_1 *q = (const gq_block_q5_1 *)b;
        r.q = _mm256_or_si256(cq_nibbles(q->qs), cq_bit4(q->qh));
        break;
    }
    default: break;
    }
    r.qa = cq_is_1(t) ? r.q : _mm256_abs_epi8(r.q);
    return r;
}

/* MXFP4's scale: 2^(e - 128) (ggml_e8m0_to_fp32_half: e < 2 a subnormal) */
CQ_INLINE float cq_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A 32-element block's weight scale: its f16 d, or MXFP4's E8M0 byte */
CQ_INLINE float cq_scale32(ggml_type t, const uint8_t *b) { return t == GGML_TYPE_MXFP4 ? cq_e8m0_half(b[0]) : cq_f16(b); }

/* The 8 f16 values at p, p + stride, ..., p + 7 stride, widened (8 scales of consecutive blocks). */
CQ_INLINE __m256 cq_f16x8(const uint8_t *p, size_t stride) {
    uint64_t lo = 0, hi = 0;
    for (int j = 0; j < 4; j++) {
        const uint8_t *a = p + (size_t)j * stride, *b = p + (size_t)(j + 4) * stride;
        lo |= (uint64_t)(a[0] | (a[1] << 8)) << (16 * j);
        hi |= (uint64_t)(b[0] | (b[1] << 8)) << (16 * j);
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* The weight scales of 8 consecutive 32-element blocks at p (stride apart): their f16 d, or MXFP4's E8M0 byte */
CQ_INLINE __m256 cq_scale8(ggml_type t, const uint8_t *p, size_t stride) {
    if (t != GGML_TYPE_MXFP4) return cq_f16x8(p, stride);
    return _mm256_setr_ps(cq_e8m0_half(p[0]), cq_e8m0_half(p[stride]), cq_e8m0_half(p[2 * stride]),
                          cq_e8m0_half(p[3 * stride]), cq_e8m0_half(p[4 * stride]), cq_e8m0_half(p[5 * stride]),
                          cq_e8m0_half(p[6 * stride]), cq_e8m0_half(p[7 * stride]));
}

/* Block i (bytes wb) with the nt rows, into accumulator j % 4 of each row: acc[4 (j % 4) + k] += dd[k] *
 * (integer dot), dd[k] = d_w d_x of this block for row k. */
CQ_INLINE void cq_block32(ggml_type t, const uint8_t *wb, const void *const *x, int64_t i, int nt, int j,
                          __m256i iq4_table, const __m256 *dd, __m256 *acc) {
    const size_t xs = cq_is_1(t) ? sizeof(gq_block_q8_1) : sizeof(gq_block_q8_0);
    const size_t xo = cq_is_1(t) ? offsetof(gq_block_q8_1, qs) : offsetof(gq_block_q8_0, qs);
    cq_w32 q = cq_decode32(t, wb, iq4_table);
    for (int k = 0; k < nt; k++) {
        __m256i a = CQ_LOAD((const uint8_t *)x[k] + (size_t)i * xs + xo);
        __m256i p = cq_is_1(t) ? cq_dpbusd(_mm256_setzero_si256(), q.q, a)
                               : cq_dpbusd(_mm256_setzero_si256(), q.qa, _mm256_sign_epi8(a, q.q));
        acc[4 * (j % 4) + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dd[k], acc[4 * (j % 4) + k]);
    }
}

/* Blocks go 8 at a time: their 8 d_w (and d_x, m_w, s_x) are widened together and block j's product
 * d_w d_x broadcast from lane j; 4 float accumulators per row (block i into i mod 4: one would make the FMA
 * latency the limit). The _1 types add m_w s_x per block, 8 blocks per vector too. */
CQ_INLINE void cq_k32(ggml_type t, size_t wsize, const void *vw, const void *const *x, int nt, int64_t n,
                      float *out) {
    const uint8_t *w = vw;
    const size_t xs = cq_is_1(t) ? sizeof(gq_block_q8_1) : sizeof(gq_block_q8_0);
    const __m256i table = cq_dup128(CQ_LOAD128(t == GGML_TYPE_MXFP4 ? gq_kvalues_mxfp4 : gq_kvalues_iq4nl));
    int64_t nb = n / GQ_QK, i = 0;
    __m256 acc[4 * CQ_NT], summ[CQ_NT]; /* acc[4j + k]: accumulator j of row k */
    for (int k = 0; k < nt; k++) {
        for (int j = 0; j < 4; j++) acc[4 * j + k] = _mm256_setzero_ps();
        summ[k] = _mm256_setzero_ps();
    }
    for (; i + 8 <= nb; i += 8) {
        const uint8_t *wb = w + (size_t)i * wsize;
        cq_prefetch(wb, 8 * wsize);
        const __m256 dw = cq_scale8(t, wb, wsize);
        __m256 dd[CQ_NT];
        for (int k = 0; k < nt; k++) {
            const uint8_t *xb = (const uint8_t *)x[k] + (size_t)i * xs;
            dd[k] = _mm256_mul_ps(dw, cq_f16x8(xb, xs));
            if (cq_is_1(t))
                summ[k] = _mm256_fmadd_ps(cq_f16x8(wb + 2, wsize), cq_f16x8(xb + offsetof(gq_block_q8_1, s), xs),
                                          summ[k]);
        }
#pragma GCC unroll 8 /* j indexes registers */
        for (int j = 0; j < 8; j++) {
            __m256 ddj[CQ_NT];
            for (int k = 0; k < nt; k++) ddj[k] = _mm256_permutevar8x32_ps(dd[k], _mm256_set1_epi32(j));
            cq_block32(t, wb + (size_t)j * wsize, x, i + j, nt, j, table, ddj, acc);
        }
    }
    float tail[CQ_NT] = {0};
    for (; i < nb; i++) {
        const uint8_t *wb = w + (size_t)i * wsize;
        __m256 ddj[CQ_NT];
        for (int k = 0; k < nt; k++) {
            const uint8_t *xb = (const uint8_t *)x[k] + (size_t)i * xs;
            ddj[k] = _mm256_set1_ps(cq_scale32(t, wb) * cq_f16(xb));
            if (cq_is_1(t)) tail[k] += cq_f16(wb + 2) * cq_f16(xb + offsetof(gq_block_q8_1, s));
        }
        cq_block32(t, wb, x, i, nt, 0, table, ddj, acc);
    }
    for (int k = 0; k < nt; k++) {
        __m256 s = _mm256_add_ps(_mm256_add_ps(acc[k], acc[4 + k]), _mm256_add_ps(acc[8 + k], acc[12 + k]));
        out[k] = cq_hsum_ps(s) + (cq_is_1(t) ? cq_hsum_ps(summ[k]) + tail[k] : 0.0f);
    }
}

#define CQ_DEFINE_32(NAME, TYPE, BLOCK)                                                              \
    CQ_INLINE void cq_k_##NAME(const void *w, const void *const *x, int nt, int64_t n, float *out) { \
        cq_k32(TYPE, sizeof(BLOCK), w, x, nt, n, out);                                               \
    }                                                                                                \
    CQ_DEFINE_DOTN(NAME)

CQ_DEFINE_32(q8_0, GGML_TYPE_Q8_0, gq_block_q8_0)
CQ_DEFINE_32(q4_0, GGML_TYPE_Q4_0, gq_block_q4_0)
CQ_DEFINE_32(q4_1, GGML_TYPE_Q4_1, gq_block_q4_1)
CQ_DEFINE_32(q5_0, GGML_TYPE_Q5_0, gq_block_q5_0)
CQ_DEFINE_32(q5_1, GGML_TYPE_Q5_1, gq_block_q5_1)
CQ_DEFINE_32(iq4_nl, GGML_TYPE_IQ4_NL, gq_block_iq4_nl)
CQ_DEFINE_32(mxfp4, GGML_TYPE_MXFP4, gq_block_mxfp4)

/* ---- 256-element super-block types (activations Q8_K) ----
 *
 * A super-block decodes to 8 vectors of 32 unsigned quants (u[g]: elements 32g .. 32g + 31) and, per vector,
 * an int16 scale vector (s[g]: lanes 0-7 the scale of elements 32g .. 32g + 15, lanes 8-15 of the next 16,
 * matching vpmaddubsw's pair sums). A row's integer sum is sum_g s[g] . maddubs(u[g], a[g]) in 4 chains
 * (the vpdpwssd latency would limit one), plus the offset or min term from Q8_K's bsums. */

CQ_INLINE const gq_block_q8_K *cq_xk(const void *const *x, int k, int64_t i) {
    return (const gq_block_q8_K *)x[k] + i;
}

/* sum_g s[g] . maddubs(u[g], a[g]) */
CQ_INLINE __m256i cq_dot8(const __m256i u[8], const __m256i s[8], const int8_t *a) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int g = 0; g < 8; g++) acc[g % 4] = cq_dpwssd(acc[g % 4], _mm256_maddubs_epi16(u[g], CQ_LOAD(a + 32 * g)), s[g]);
    return cq_add4(acc);
}

/* Q4_K / Q5_K: the 8 scale and the 8 min codes as bytes (the 12 packed bytes read 4 at a time). */
CQ_INLINE void cq_k4_codes(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = (uint64_t)(u0 & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
    *mn = (uint64_t)(u1 & 0x3f3f3f3fu) | (uint64_t)mn_hi << 32;
}

/* Q4_K / Q5_K: the scale vectors (one scale per 32) and the mins as int16 pairs [m0 m0 m1 m1 ...] for bsums */
CQ_INLINE void cq_k4_scales(const uint8_t *scales, __m256i s[8], __m256i *m2) {
    uint64_t scb, mnb;
    cq_k4_codes(scales, &scb, &mnb);
    const __m256i sc = cq_dup128(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scb)));
    for (int g = 0; g < 8; g++) s[g] = _mm256_shuffle_epi8(sc, cq_pick16(g, g));
    __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mnb));
    *m2 = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

/* The Q4_K / Q5_K / Q2_K form: acc_f += d x_d isum, acc_m += dmin x_d (bsums . m) */
CQ_INLINE void cq_kmin_rows(const __m256i u[8], const __m256i s[8], __m256i m, float dw, float dmw,
                            const void *const *x, int64_t i, int nt, __m256 *accf, __m256 *accm) {
    for (int k = 0; k < nt; k++) {
        const gq_block_q8_K *xb = cq_xk(x, k, i);
        __m256i isum = cq_dot8(u, s, xb->qs);
        accf[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * xb->d), accf[k]);
        accm[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(CQ_LOAD(xb->bsums), m)),
                                  _mm256_set1_ps(dmw * xb->d), accm[k]);
    }
}

/* The Q6_K / Q3_K form (values u - off): acc_f += d x_d (isum - off * (bsums . scales)) */
CQ_INLINE void cq_koff_rows(const __m256i u[8], const __m256i s[8], __m256i s16, int off_shift, float dw,
                            const void *const *x, int64_t i, int nt, __m256 *accf) {
    for (int k = 0; k < nt; k++) {
        const gq_block_q8_K *xb = cq_xk(x, k, i);
        __m256i off = _mm256_madd_epi16(CQ_LOAD(xb->bsums), s16);
        __m256i isum = _mm256_sub_epi32(cq_dot8(u, s, xb->qs), _mm256_sll_epi32(off, _mm_cvtsi32_si128(off_shift)));
        accf[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * xb->d), accf[k]);
    }
}

CQ_INLINE void cq_k_q4_K(const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const gq_block_q4_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 accf[CQ_NT], accm[CQ_NT];
    for (int k = 0; k < nt; k++) accf[k] = accm[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(w + i, sizeof *w);
        __m256i u[8], s[8], m2;
        cq_k4_scales(w[i].scales, s, &m2);
        for (int c = 0; c < 4; c++) {
            __m256i qv = CQ_LOAD(w[i].qs + 32 * c);
            u[2 * c] = _mm256_and_si256(qv, m4);
            u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4);
        }
        cq_kmin_rows(u, s, m2, cq_f16(w[i].d), cq_f16(w[i].dmin), x, i, nt, accf, accm);
    }
    for (int k = 0; k < nt; k++) out[k] = cq_hsum_ps(_mm256_sub_ps(accf[k], accm[k]));
}
CQ_DEFINE_DOTN(q4_K)

CQ_INLINE void cq_k_q5_K(const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const gq_block_q5_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    __m256 accf[CQ_NT], accm[CQ_NT];
    for (int k = 0; k < nt; k++) accf[k] = accm[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(w + i, sizeof *w);
        __m256i u[8], s[8], m2;
        cq_k4_scales(w[i].scales, s, &m2);
        __m256i hb = CQ_LOAD(w[i].qh); /* bits 2c, 2c + 1 of each byte, moved down by 2 per c */
        for (int c = 0; c < 4; c++) {
            __m256i qv = CQ_LOAD(w[i].qs + 32 * c);
            u[2 * c] = _mm256_or_si256(_mm256_and_si256(qv, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), b4));
            u[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 4), m4),
                                           _mm256_and_si256(_mm256_slli_epi16(hb, 3), b4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        cq_kmin_rows(u, s, m2, cq_f16(w[i].d), cq_f16(w[i].dmin), x, i, nt, accf, accm);
    }
    for (int k = 0; k < nt; k++) out[k] = cq_hsum_ps(_mm256_sub_ps(accf[k], accm[k]));
}
CQ_DEFINE_DOTN(q5_K)

/* the 2-bit fields at bits 2g of 32 bytes */
#define CQ_Q2(qv, g) _mm256_and_si256(_mm256_srli_epi16((qv), 2 * (g)), _mm256_set1_epi8(3))

CQ_INLINE void cq_k_q2_K(const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const gq_block_q2_K *w = vw;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 accf[CQ_NT], accm[CQ_NT];
    for (int k = 0; k < nt; k++) accf[k] = accm[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(w + i, sizeof *w);
        __m256i u[8], s[8];
        const __m128i sb = CQ_LOAD128(w[i].scales);
        const __m128i sc8 = _mm_and_si128(sb, m4), mn8 = _mm_and_si128(_mm_srli_epi16(sb, 4), m4);
        for (int h = 0; h < 2; h++) {
            const __m256i sc = cq_dup128(_mm_cvtepu8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            const __m256i qv = CQ_LOAD(w[i].qs + 32 * h);
            for (int g = 0; g < 4; g++) {
                u[4 * h + g] = CQ_Q2(qv, g);
                s[4 * h + g] = _mm256_shuffle_epi8(sc, cq_pick16(2 * g, 2 * g + 1));
            }
        }
        cq_kmin_rows(u, s, _mm256_cvtepu8_epi16(mn8), cq_f16(w[i].d), cq_f16(w[i].dmin), x, i, nt, accf, accm);
    }
    for (int k = 0; k < nt; k++) out[k] = cq_hsum_ps(_mm256_sub_ps(accf[k], accm[k]));
}
CQ_DEFINE_DOTN(q2_K)

CQ_INLINE void cq_k_q6_K(const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const gq_block_q6_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    __m256 accf[CQ_NT];
    for (int k = 0; k < nt; k++) accf[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(w + i, sizeof *w);
        __m256i u[8], s[8];
        const __m128i sc8 = CQ_LOAD128(w[i].scales);
        for (int h = 0; h < 2; h++) {
            const __m256i sc = cq_dup128(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            const uint8_t *ql = w[i].ql + 64 * h;
            __m256i l0 = CQ_LOAD(ql), l1 = CQ_LOAD(ql + 32), qh = CQ_LOAD(w[i].qh + 32 * h);
            u[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m2));
            u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            for (int g = 0; g < 4; g++) s[4 * h + g] = _mm256_shuffle_epi8(sc, cq_pick16(2 * g, 2 * g + 1));
        }
        /* values u - 32: the offset is 32 * (bsums . scales) */
        cq_koff_rows(u, s, _mm256_cvtepi8_epi16(sc8), 5, cq_f16(w[i].d), x, i, nt, accf);
    }
    for (int k = 0; k < nt; k++) out[k] = cq_hsum_ps(accf[k]);
}
CQ_DEFINE_DOTN(q6_K)

#if CQ_Z
/* ---- the K types two rows at a time: rows A and B in the low and high 256 bits of each 512-bit register ----
 *
 * Every 256-bit half computes exactly what the one-row kernel above computes for its row (the same decoded
 * vectors, the same vpmaddubsw / vpdpwssd lanes, the same float FMAs per lane, the same horizontal sum), so a
 * result is bit-identical to cpu_quant_vec_dot's; the pair halves the instructions per (row, token, block). */

CQ_INLINE __m512i cq_z_pair(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
CQ_INLINE __m512 cq_z_pair_ps(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}
CQ_INLINE __m512i cq_z_bcast(const void *p) { return _mm512_broadcast_i64x4(CQ_LOAD(p)); }

/* sum_g s[g] . maddubs(u[g], a[g]) for both rows (a[g] the same 32 activation bytes in both halves) */
CQ_INLINE __m512i cq_z_dot8(const __m512i u[8], const __m512i s[8], const int8_t *a) {
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int g = 0; g < 8; g++)
        acc[g % 4] = _mm512_dpwssd_epi32(acc[g % 4], _mm512_maddubs_epi16(u[g], cq_z_bcast(a + 32 * g)), s[g]);
    return _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
}

/* the two rows' results: the horizontal sums of each half */
CQ_INLINE void cq_z_out(__m512 v, float *a, float *b) {
    *a = cq_hsum_ps(_mm512_castps512_ps256(v));
    *b = cq_hsum_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* the Q4_K / Q5_K / Q2_K form (cq_kmin_rows) for the pair: dw / dmw hold row A's d in the low half, B's high */
CQ_INLINE void cq_z_kmin_rows(const __m512i u[8], const __m512i s[8], __m512i m, __m512 dw, __m512 dmw,
                              const void *const *x, int64_t i, int nt, __m512 *accf, __m512 *accm) {
    for (int k = 0; k < nt; k++) {
        const gq_block_q8_K *xb = cq_xk(x, k, i);
        const __m512 xd = _mm512_set1_ps(xb->d);
        accf[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(cq_z_dot8(u, s, xb->qs)), _mm512_mul_ps(dw, xd), accf[k]);
        accm[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(cq_z_bcast(xb->bsums), m)),
                                  _mm512_mul_ps(dmw, xd), accm[k]);
    }
}

/* the Q6_K / Q3_K form (cq_koff_rows) for the pair */
CQ_INLINE void cq_z_koff_rows(const __m512i u[8], const __m512i s[8], __m512i s16, int off_shift, __m512 dw,
                              const void *const *x, int64_t i, int nt, __m512 *accf) {
    for (int k = 0; k < nt; k++) {
        const gq_block_q8_K *xb = cq_xk(x, k, i);
        const __m512i off = _mm512_madd_epi16(cq_z_bcast(xb->bsums), s16);
        const __m512i isum = _mm512_sub_epi32(cq_z_dot8(u, s, xb->qs), _mm512_sll_epi32(off, _mm_cvtsi32_si128(off_shift)));
        accf[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), accf[k]);
    }
}

/* The 32-element types for the pair (cq_k32's arithmetic per half): block j of both rows decoded into one register;
 * a signed weight's sign moves onto the activation with a masked negate (AVX-512 has no 512-bit vpsignb: where q is
 * 0 the product is 0 either way). */
CQ_INLINE void cq_z32(ggml_type t, size_t wsize, const void *va, const void *vb, const void *const *x, int nt,
                      int64_t n, float *outa, float *outb) {
    const uint8_t *wa = va, *wb = vb;
    const size_t xs = cq_is_1(t) ? sizeof(gq_block_q8_1) : sizeof(gq_block_q8_0);
    const size_t xo = cq_is_1(t) ? offsetof(gq_block_q8_1, qs) : offsetof(gq_block_q8_0, qs);
    const __m256i table = cq_dup128(CQ_LOAD128(t == GGML_TYPE_MXFP4 ? gq_kvalues_mxfp4 : gq_kvalues_iq4nl));
    const int64_t nb = n / GQ_QK;
    int64_t i = 0;
    __m512 acc[4 * CQ_NT2], summ[CQ_NT2]; /* acc[CQ_NT2 j + k]: accumulator j of row k */
    for (int k = 0; k < nt; k++) {
        for (int j = 0; j < 4; j++) acc[CQ_NT2 * j + k] = _mm512_setzero_ps();
        summ[k] = _mm512_setzero_ps();
    }
    for (; i + 8 <= nb; i += 8) {
        const uint8_t *ba = wa + (size_t)i * wsize, *bb = wb + (size_t)i * wsize;
        cq_prefetch(ba, 8 * wsize);
        cq_prefetch(bb, 8 * wsize);
        const __m512 dw = _mm512_insertf32x8(_mm512_castps256_ps512(cq_scale8(t, ba, wsize)), cq_scale8(t, bb, wsize), 1);
        __m512 dd[CQ_NT2];
        for (int k = 0; k < nt; k++) {
            const uint8_t *xb = (const uint8_t *)x[k] + (size_t)i * xs;
            const __m256 dx = cq_f16x8(xb, xs);
            dd[k] = _mm512_mul_ps(dw, _mm512_insertf32x8(_mm512_castps256_ps512(dx), dx, 1));
            if (cq_is_1(t)) {
                const __m512 wm = _mm512_insertf32x8(_mm512_castps256_ps512(cq_f16x8(ba + 2, wsize)),
                                                     cq_f16x8(bb + 2, wsize), 1);
                const __m256 sx = cq_f16x8(xb + offsetof(gq_block_q8_1, s), xs);
                summ[k] = _mm512_fmadd_ps(wm, _mm512_insertf32x8(_mm512_castps256_ps512(sx), sx, 1), summ[k]);
            }
        }
#pragma GCC unroll 8 /* j indexes registers */
        for (int j = 0; j < 8; j++) {
            const cq_w32 qa = cq_decode32(t, ba + (size_t)j * wsize, table), qb = cq_decode32(t, bb + (size_t)j * wsize, table);
            const __m512i q = cq_z_pair(qa.q, qb.q), u = cq_z_pair(qa.qa, qb.qa);
            const __mmask64 neg = cq_is_1(t) ? 0 : _mm512_movepi8_mask(q);
            const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi32(j), _mm256_set1_epi32(8 + j), 1);
            for (int k = 0; k < nt; k++) {
                const __m512i a = cq_z_bcast((const uint8_t *)x[k] + (size_t)(i + j) * xs + xo);
                const __m512i as = cq_is_1(t) ? a : _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
                const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, as);
                acc[CQ_NT2 * (j % 4) + k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(pick, dd[k]),
                                                       acc[CQ_NT2 * (j % 4) + k]);
            }
        }
    }
    float taila[CQ_NT2] = {0}, tailb[CQ_NT2] = {0};
    for (; i < nb; i++) {
        const uint8_t *ba = wa + (size_t)i * wsize, *bb = wb + (size_t)i * wsize;
        const cq_w32 qa = cq_decode32(t, ba, table), qb = cq_decode32(t, bb, table);
        const __m512i q = cq_z_pair(qa.q, qb.q), u = cq_z_pair(qa.qa, qb.qa);
        const __mmask64 neg = cq_is_1(t) ? 0 : _mm512_movepi8_mask(q);
        for (int k = 0; k < nt; k++) {
            const uint8_t *xb = (const uint8_t *)x[k] + (size_t)i * xs;
            const __m512 ddj = cq_z_pair_ps(cq_scale32(t, ba) * cq_f16(xb), cq_scale32(t, bb) * cq_f16(xb));
            if (cq_is_1(t)) {
                taila[k] += cq_f16(ba + 2) * cq_f16(xb + offsetof(gq_block_q8_1, s));
                tailb[k] += cq_f16(bb + 2) * cq_f16(xb + offsetof(gq_block_q8_1, s));
            }
            const __m512i a = cq_z_bcast(xb + xo);
            const __m512i as = cq_is_1(t) ? a : _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, as)), ddj, acc[k]);
        }
    }
    for (int k = 0; k < nt; k++) {
        const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[k], acc[CQ_NT2 + k]),
                                        _mm512_add_ps(acc[2 * CQ_NT2 + k], acc[3 * CQ_NT2 + k]));
        cq_z_out(s, &outa[k], &outb[k]);
        if (cq_is_1(t)) {
            float ma, mb;
            cq_z_out(summ[k], &ma, &mb);
            outa[k] += ma + taila[k];
            outb[k] += mb + tailb[k];
        }
    }
}

#define CQ_DEFINE_Z32(NAME, TYPE, BLOCK)                                                                       \
    CQ_INLINE void cq_z_##NAME(const void *wa, const void *wb, const void *const *x, int nt, int64_t n,        \
                               float *outa, float *outb) {                                                      \
        cq_z32(TYPE, sizeof(BLOCK), wa, wb, x, nt, n, outa, outb);                                              \
    }
CQ_DEFINE_Z32(q8_0, GGML_TYPE_Q8_0, gq_block_q8_0)
CQ_DEFINE_Z32(q4_0, GGML_TYPE_Q4_0, gq_block_q4_0)
CQ_DEFINE_Z32(q4_1, GGML_TYPE_Q4_1, gq_block_q4_1)
CQ_DEFINE_Z32(q5_0, GGML_TYPE_Q5_0, gq_block_q5_0)
CQ_DEFINE_Z32(q5_1, GGML_TYPE_Q5_1, gq_block_q5_1)
CQ_DEFINE_Z32(iq4_nl, GGML_TYPE_IQ4_NL, gq_block_iq4_nl)
CQ_DEFINE_Z32(mxfp4, GGML_TYPE_MXFP4, gq_block_mxfp4)

/* Q4_K (q5 false) and Q5_K rows wa, wb with nt activation rows: outa[k], outb[k] (the blocks share d, dmin and
 * scales at the start; Q5_K's qh comes before its qs) */
CQ_INLINE void cq_z_k45(bool q5, const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                        float *outb) {
    const size_t bs = q5 ? sizeof(gq_block_q5_K) : sizeof(gq_block_q4_K);
    const size_t oqs = q5 ? offsetof(gq_block_q5_K, qs) : offsetof(gq_block_q4_K, qs);
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    __m512 accf[CQ_NT2], accm[CQ_NT2];
    for (int k = 0; k < nt; k++) accf[k] = accm[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        const uint8_t *ba = (const uint8_t *)va + (size_t)i * bs, *bb = (const uint8_t *)vb + (size_t)i * bs;
        cq_prefetch(ba, bs);
        cq_prefetch(bb, bs);
        __m256i sa[8], sb[8], ma, mb;
        cq_k4_scales(ba + offsetof(gq_block_q4_K, scales), sa, &ma);
        cq_k4_scales(bb + offsetof(gq_block_q4_K, scales), sb, &mb);
        __m512i u[8], s[8];
        for (int g = 0; g < 8; g++) s[g] = cq_z_pair(sa[g], sb[g]);
        /* Q5_K: bits 2c, 2c + 1 of each qh byte, moved down by 2 per c */
        __m512i hb = q5 ? cq_z_pair(CQ_LOAD(ba + offsetof(gq_block_q5_K, qh)), CQ_LOAD(bb + offsetof(gq_block_q5_K, qh)))
                        : _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            const __m512i qv = cq_z_pair(CQ_LOAD(ba + oqs + 32 * c), CQ_LOAD(bb + oqs + 32 * c));
            u[2 * c] = _mm512_and_si512(qv, m4);
            u[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(qv, 4), m4);
            if (q5) {
                u[2 * c] = _mm512_or_si512(u[2 * c], _mm512_and_si512(_mm512_slli_epi16(hb, 4), b4));
                u[2 * c + 1] = _mm512_or_si512(u[2 * c + 1], _mm512_and_si512(_mm512_slli_epi16(hb, 3), b4));
                hb = _mm512_srli_epi16(hb, 2);
            }
        }
        cq_z_kmin_rows(u, s, cq_z_pair(ma, mb), cq_z_pair_ps(cq_f16(ba), cq_f16(bb)),
                       cq_z_pair_ps(cq_f16(ba + offsetof(gq_block_q4_K, dmin)), cq_f16(bb + offsetof(gq_block_q4_K, dmin))),
                       x, i, nt, accf, accm);
    }
    for (int k = 0; k < nt; k++) cq_z_out(_mm512_sub_ps(accf[k], accm[k]), &outa[k], &outb[k]);
}
CQ_INLINE void cq_z_q4_K(const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                         float *outb) {
    cq_z_k45(false, va, vb, x, nt, n, outa, outb);
}
CQ_INLINE void cq_z_q5_K(const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                         float *outb) {
    cq_z_k45(true, va, vb, x, nt, n, outa, outb);
}

CQ_INLINE void cq_z_q6_K(const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                         float *outb) {
    const gq_block_q6_K *wa = va, *wb = vb;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    __m512 accf[CQ_NT2];
    for (int k = 0; k < nt; k++) accf[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(wa + i, sizeof *wa);
        cq_prefetch(wb + i, sizeof *wb);
        __m512i u[8], s[8];
        const __m128i sca = CQ_LOAD128(wa[i].scales), scb = CQ_LOAD128(wb[i].scales);
        for (int h = 0; h < 2; h++) {
            const __m512i sc = cq_z_pair(cq_dup128(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sca, 8) : sca)),
                                         cq_dup128(_mm_cvtepi8_epi16(h ? _mm_srli_si128(scb, 8) : scb)));
            const __m512i l0 = cq_z_pair(CQ_LOAD(wa[i].ql + 64 * h), CQ_LOAD(wb[i].ql + 64 * h));
            const __m512i l1 = cq_z_pair(CQ_LOAD(wa[i].ql + 64 * h + 32), CQ_LOAD(wb[i].ql + 64 * h + 32));
            const __m512i qh = cq_z_pair(CQ_LOAD(wa[i].qh + 32 * h), CQ_LOAD(wb[i].qh + 32 * h));
            u[4 * h] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m2));
            u[4 * h + 1] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m2));
            u[4 * h + 2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(qh, m2));
            u[4 * h + 3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                           _mm512_and_si512(_mm512_srli_epi16(qh, 2), m2));
            for (int g = 0; g < 4; g++) {
                const __m256i pk = cq_pick16(2 * g, 2 * g + 1);
                s[4 * h + g] = _mm512_shuffle_epi8(sc, cq_z_pair(pk, pk));
            }
        }
        cq_z_koff_rows(u, s, cq_z_pair(_mm256_cvtepi8_epi16(sca), _mm256_cvtepi8_epi16(scb)), 5,
                       cq_z_pair_ps(cq_f16(wa[i].d), cq_f16(wb[i].d)), x, i, nt, accf);
    }
    for (int k = 0; k < nt; k++) cq_z_out(accf[k], &outa[k], &outb[k]);
}

#define CQ_DEFINE_DOTN2(NAME)                                                                                 \
    static void cq_dotn2_##NAME(const void *wa, const void *wb, const void *const *x, int nt, int64_t n,     \
                                float *outa, float *outb) {                                                  \
        switch (nt) {                                                                                         \
        case 8: cq_z_##NAME(wa, wb, x, 8, n, outa, outb); break;                                              \
        case 7: cq_z_##NAME(wa, wb, x, 7, n, outa, outb); break;                                              \
        case 6: cq_z_##NAME(wa, wb, x, 6, n, outa, outb); break;                                              \
        case 5: cq_z_##NAME(wa, wb, x, 5, n, outa, outb); break;                                              \
        case 4: cq_z_##NAME(wa, wb, x, 4, n, outa, outb); break;                                              \
        case 3: cq_z_##NAME(wa, wb, x, 3, n, outa, outb); break;                                              \
        case 2: cq_z_##NAME(wa, wb, x, 2, n, outa, outb); break;                                              \
        default: cq_z_##NAME(wa, wb, x, 1, n, outa, outb); break;                                             \
        }                                                                                                     \
    }
CQ_DEFINE_DOTN2(q4_K)
CQ_DEFINE_DOTN2(q5_K)
CQ_DEFINE_DOTN2(q6_K)
CQ_DEFINE_DOTN2(q8_0)
CQ_DEFINE_DOTN2(q4_0)
CQ_DEFINE_DOTN2(q4_1)
CQ_DEFINE_DOTN2(q5_0)
CQ_DEFINE_DOTN2(q5_1)
CQ_DEFINE_DOTN2(iq4_nl)
CQ_DEFINE_DOTN2(mxfp4)
#endif /* CQ_Z */

/* Q3_K's 16 scale codes - 32, as int8 (the 12 packed bytes read 4 at a time). */
CQ_INLINE __m128i cq_q3_K_scales(const uint8_t *s) {
    uint32_t a0, a1, t;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&t, s + 8, 4);
    uint32_t s0 = (a0 & 0x0f0f0f0fu) | ((t & 0x03030303u) << 4);
    uint32_t s1 = (a1 & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
    uint32_t s2 = ((a0 >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
    uint32_t s3 = ((a1 >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
    return _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
}

CQ_INLINE void cq_k_q3_K(const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const gq_block_q3_K *w = vw;
    const __m256i one = _mm256_set1_epi8(1);
    __m256 accf[CQ_NT];
    for (int k = 0; k < nt; k++) accf[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(w + i, sizeof *w);
        __m256i u[8], s[8];
        const __m128i sc8 = cq_q3_K_scales(w[i].scales);
        const __m256i hm = CQ_LOAD(w[i].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i sc = cq_dup128(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            const __m256i qv = CQ_LOAD(w[i].qs + 32 * h);
            for (int g = 0; g < 4; g++) {
                __m256i hbit = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), one);
                u[4 * h + g] = _mm256_or_si256(CQ_Q2(qv, g), _mm256_slli_epi16(hbit, 2));
                s[4 * h + g] = _mm256_shuffle_epi8(sc, cq_pick16(2 * g, 2 * g + 1));
            }
        }
        /* values u - 4: the offset is 4 * (bsums . scales) */
        cq_koff_rows(u, s, _mm256_cvtepi8_epi16(sc8), 2, cq_f16(w[i].d), x, i, nt, accf);
    }
    for (int k = 0; k < nt; k++) out[k] = cq_hsum_ps(accf[k]);
}
CQ_DEFINE_DOTN(q3_K)

/* IQ4_XS: signed table values, so |q| x (a with q's sign) per sub-block of 32, times (ls - 32) */
CQ_INLINE void cq_k_iq4_xs(const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const gq_block_iq4_xs *w = vw;
    const __m256i table = cq_dup128(CQ_LOAD128(gq_kvalues_iq4nl));
    __m256 accf[CQ_NT];
    for (int k = 0; k < nt; k++) accf[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(w + i, sizeof *w);
        __m256i q[8], qa[8], s[8];
        int sh = w[i].scales_h[0] | (w[i].scales_h[1] << 8);
        for (int ib = 0; ib < 8; ib++) {
            int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            q[ib] = _mm256_shuffle_epi8(table, cq_nibbles(w[i].qs + 16 * ib));
            qa[ib] = _mm256_abs_epi8(q[ib]);
            s[ib] = _mm256_set1_epi16((short)(ls - 32));
        }
        float dw = cq_f16(w[i].d);
        for (int k = 0; k < nt; k++) {
            const gq_block_q8_K *xb = cq_xk(x, k, i);
            __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                              _mm256_setzero_si256()};
            for (int ib = 0; ib < 8; ib++) {
                __m256i p = _mm256_maddubs_epi16(qa[ib], _mm256_sign_epi8(CQ_LOAD(xb->qs + 32 * ib), q[ib]));
                acc[ib % 4] = cq_dpwssd(acc[ib % 4], p, s[ib]);
            }
            accf[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(cq_add4(acc)), _mm256_set1_ps(dw * xb->d), accf[k]);
        }
    }
    for (int k = 0; k < nt; k++) out[k] = cq_hsum_ps(accf[k]);
}
CQ_DEFINE_DOTN(iq4_xs)

#if CQ_Z
/* Q2_K, Q3_K and IQ4_XS for the pair (their one-row kernels' arithmetic per half, as the pair kernels above) */
CQ_INLINE void cq_z_q2_K(const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                         float *outb) {
    const gq_block_q2_K *wa = va, *wb = vb;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m512 accf[CQ_NT2], accm[CQ_NT2];
    for (int k = 0; k < nt; k++) accf[k] = accm[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(wa + i, sizeof *wa);
        cq_prefetch(wb + i, sizeof *wb);
        __m512i u[8], s[8];
        const __m128i sba = CQ_LOAD128(wa[i].scales), sbb = CQ_LOAD128(wb[i].scales);
        const __m128i sca = _mm_and_si128(sba, m4), mna = _mm_and_si128(_mm_srli_epi16(sba, 4), m4);
        const __m128i scb = _mm_and_si128(sbb, m4), mnb = _mm_and_si128(_mm_srli_epi16(sbb, 4), m4);
        for (int h = 0; h < 2; h++) {
            const __m512i sc = cq_z_pair(cq_dup128(_mm_cvtepu8_epi16(h ? _mm_srli_si128(sca, 8) : sca)),
                                         cq_dup128(_mm_cvtepu8_epi16(h ? _mm_srli_si128(scb, 8) : scb)));
            const __m512i qv = cq_z_pair(CQ_LOAD(wa[i].qs + 32 * h), CQ_LOAD(wb[i].qs + 32 * h));
            for (int g = 0; g < 4; g++) {
                u[4 * h + g] = _mm512_and_si512(_mm512_srli_epi16(qv, 2 * g), _mm512_set1_epi8(3));
                const __m256i pk = cq_pick16(2 * g, 2 * g + 1);
                s[4 * h + g] = _mm512_shuffle_epi8(sc, cq_z_pair(pk, pk));
            }
        }
        cq_z_kmin_rows(u, s, cq_z_pair(_mm256_cvtepu8_epi16(mna), _mm256_cvtepu8_epi16(mnb)),
                       cq_z_pair_ps(cq_f16(wa[i].d), cq_f16(wb[i].d)),
                       cq_z_pair_ps(cq_f16(wa[i].dmin), cq_f16(wb[i].dmin)), x, i, nt, accf, accm);
    }
    for (int k = 0; k < nt; k++) cq_z_out(_mm512_sub_ps(accf[k], accm[k]), &outa[k], &outb[k]);
}

CQ_INLINE void cq_z_q3_K(const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                         float *outb) {
    const gq_block_q3_K *wa = va, *wb = vb;
    const __m512i one = _mm512_set1_epi8(1);
    __m512 accf[CQ_NT2];
    for (int k = 0; k < nt; k++) accf[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(wa + i, sizeof *wa);
        cq_prefetch(wb + i, sizeof *wb);
        __m512i u[8], s[8];
        const __m128i sca = cq_q3_K_scales(wa[i].scales), scb = cq_q3_K_scales(wb[i].scales);
        const __m512i hm = cq_z_pair(CQ_LOAD(wa[i].hmask), CQ_LOAD(wb[i].hmask));
        for (int h = 0; h < 2; h++) {
            const __m512i sc = cq_z_pair(cq_dup128(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sca, 8) : sca)),
                                         cq_dup128(_mm_cvtepi8_epi16(h ? _mm_srli_si128(scb, 8) : scb)));
            const __m512i qv = cq_z_pair(CQ_LOAD(wa[i].qs + 32 * h), CQ_LOAD(wb[i].qs + 32 * h));
            for (int g = 0; g < 4; g++) {
                const __m512i hbit = _mm512_and_si512(_mm512_srli_epi16(hm, 4 * h + g), one);
                u[4 * h + g] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qv, 2 * g), _mm512_set1_epi8(3)),
                                               _mm512_slli_epi16(hbit, 2));
                const __m256i pk = cq_pick16(2 * g, 2 * g + 1);
                s[4 * h + g] = _mm512_shuffle_epi8(sc, cq_z_pair(pk, pk));
            }
        }
        cq_z_koff_rows(u, s, cq_z_pair(_mm256_cvtepi8_epi16(sca), _mm256_cvtepi8_epi16(scb)), 2,
                       cq_z_pair_ps(cq_f16(wa[i].d), cq_f16(wb[i].d)), x, i, nt, accf);
    }
    for (int k = 0; k < nt; k++) cq_z_out(accf[k], &outa[k], &outb[k]);
}

CQ_INLINE void cq_z_iq4_xs(const void *va, const void *vb, const void *const *x, int nt, int64_t n, float *outa,
                           float *outb) {
    const gq_block_iq4_xs *wa = va, *wb = vb;
    const __m256i table = cq_dup128(CQ_LOAD128(gq_kvalues_iq4nl));
    __m512 accf[CQ_NT2];
    for (int k = 0; k < nt; k++) accf[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / GQ_QK_K; i++) {
        cq_prefetch(wa + i, sizeof *wa);
        cq_prefetch(wb + i, sizeof *wb);
        __m512i qa[8], s[8];
        __mmask64 neg[8];
        const int sha = wa[i].scales_h[0] | (wa[i].scales_h[1] << 8), shb = wb[i].scales_h[0] | (wb[i].scales_h[1] << 8);
        for (int ib = 0; ib < 8; ib++) {
            const int lsa = ((wa[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((sha >> (2 * ib)) & 3) << 4);
            const int lsb = ((wb[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((shb >> (2 * ib)) & 3) << 4);
            const __m512i q = cq_z_pair(_mm256_shuffle_epi8(table, cq_nibbles(wa[i].qs + 16 * ib)),
                                        _mm256_shuffle_epi8(table, cq_nibbles(wb[i].qs + 16 * ib)));
            qa[ib] = _mm512_abs_epi8(q);
            neg[ib] = _mm512_movepi8_mask(q);
            s[ib] = cq_z_pair(_mm256_set1_epi16((short)(lsa - 32)), _mm256_set1_epi16((short)(lsb - 32)));
        }
        const __m512 dw = cq_z_pair_ps(cq_f16(wa[i].d), cq_f16(wb[i].d));
        for (int k = 0; k < nt; k++) {
            const gq_block_q8_K *xb = cq_xk(x, k, i);
            __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                              _mm512_setzero_si512()};
            for (int ib = 0; ib < 8; ib++) {
                const __m512i a = cq_z_bcast(xb->qs + 32 * ib);
                const __m512i as = _mm512_mask_sub_epi8(a, neg[ib], _mm512_setzero_si512(), a);
                acc[ib % 4] = _mm512_dpwssd_epi32(acc[ib % 4], _mm512_maddubs_epi16(qa[ib], as), s[ib]);
            }
            const __m512i isum = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
            accf[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), accf[k]);
        }
    }
    for (int k = 0; k < nt; k++) cq_z_out(accf[k], &outa[k], &outb[k]);
}
CQ_DEFINE_DOTN2(q2_K)
CQ_DEFINE_DOTN2(q3_K)
CQ_DEFINE_DOTN2(iq4_xs)
#endif /* CQ_Z */

/* ---- float weights (activations converted to the weight's type, as ggml does); a row at a time ---- */

CQ_INLINE __m256 cq_load8(ggml_type t, const uint8_t *p) {
    if (t == GGML_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)p);
    if (t == GGML_TYPE_F16) return _mm256_cvtph_ps(CQ_LOAD128(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(CQ_LOAD128(p)), 16));
}

CQ_INLINE float cq_load1(ggml_type t, const uint8_t *p) {
    if (t == GGML_TYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == GGML_TYPE_F16) return cq_f16(p);
    return bf16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

CQ_INLINE void cq_kfloat(ggml_type t, const void *vw, const void *const *x, int nt, int64_t n, float *out) {
    const size_t es = t == GGML_TYPE_F32 ? 4 : 2;
    const uint8_t *w = vw;
    for (int k = 0; k < nt; k++) {
        const uint8_t *xr = x[k];
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) {
            a0 = _mm256_fmadd_ps(cq_load8(t, w + j * es), cq_load8(t, xr + j * es), a0);
            a1 = _mm256_fmadd_ps(cq_load8(t, w + (j + 8) * es), cq_load8(t, xr + (j + 8) * es), a1);
        }
        float tail = 0.0f;
        for (; j < n; j++) tail += cq_load1(t, w + j * es) * cq_load1(t, xr + j * es);
        out[k] = cq_hsum_ps(_mm256_add_ps(a0, a1)) + tail;
    }
}

#define CQ_DEFINE_FLOAT(NAME, TYPE)                                                                  \
    CQ_INLINE void cq_k_##NAME(const void *w, const void *const *x, int nt, int64_t n, float *out) { \
        cq_kfloat(TYPE, w, x, nt, n, out);                                                           \
    }                                                                                                \
    CQ_DEFINE_DOTN(NAME)

CQ_DEFINE_FLOAT(f32, GGML_TYPE_F32)
CQ_DEFINE_FLOAT(f16, GGML_TYPE_F16)
CQ_DEFINE_FLOAT(bf16, GGML_TYPE_BF16)

/* ---- activation quantizers (bit-identical to gq_quantize_row) ---- */

/* roundf (ties away from zero), exactly: v - trunc(v) is exact */
CQ_INLINE __m256 cq_roundf(__m256 v) {
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(v, t);
    const __m256 one = _mm256_set1_ps(1.0f);
    t = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
    return _mm256_sub_ps(t, _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
}

/* 32 int32 (in [-128, 127]) in 4 vectors -> 32 int8 in order */
CQ_INLINE __m256i cq_pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i v = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

CQ_INLINE float cq_absmax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x)),
                                           _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8))),
                             _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 16)),
                                           _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 24))));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 32 floats times id, rounded as roundf, as int8 */
CQ_INLINE __m256i cq_q8_round32(const float *x, float id) {
    const __m256 s = _mm256_set1_ps(id);
    __m256i v[4];
    for (int k = 0; k < 4; k++) v[k] = _mm256_cvttps_epi32(cq_roundf(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), s)));
    return cq_pack32(v[0], v[1], v[2], v[3]);
}

static void cq_quantize_q8_0(const float *x, gq_block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float d = cq_absmax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        _mm256_storeu_si256((__m256i *)(void *)b->qs, cq_q8_round32(x, id));
    }
}

static void cq_quantize_q8_1(const float *x, gq_block_q8_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float d = cq_absmax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        __m256i q = cq_q8_round32(x, id);
        _mm256_storeu_si256((__m256i *)(void *)b->qs, q);
        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
        gq_f16_store(b->s, (float)cq_hsum_epi32(s) * d);
    }
}

static void cq_quantize_q8_K(const float *x, gq_block_q8_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        float amax = 0.0f;
        for (int k = 0; k < GQ_QK_K; k += 32) {
            float m = cq_absmax32(x + k);
            amax = m > amax ? m : amax;
        }
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float max = 0.0f; /* the first element of largest magnitude, with its sign */
        for (int k = 0; k < GQ_QK_K; k++) {
            if (fabsf(x[k]) == amax) {
                max = x[k];
                break;
            }
        }
        float iscale = -127.0f / max;
        const __m256 s = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int k = 0; k < GQ_QK_K; k += 32) {
            __m256i v[4];
            for (int j = 0; j < 4; j++)
                v[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), s)), lim);
            __m256i q = cq_pack32(v[0], v[1], v[2], v[3]);
            _mm256_storeu_si256((__m256i *)(void *)(b->qs + k), q);
            /* the two bsums of these 32: int16 pair sums, then sums within each 128-bit half */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            __m128i h = _mm_hadd_epi32(lo, hi);
            h = _mm_hadd_epi32(h, h);
            b->bsums[k / 16] = (int16_t)_mm_cvtsi128_si32(h);
            b->bsums[k / 16 + 1] = (int16_t)_mm_extract_epi32(h, 1);
        }
        b->d = 1.0f / iscale;
    }
}

static void cq_convert_f16(const float *x, uint8_t *y, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + 2 * k),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; k < n; k++) gq_f16_store(y + 2 * k, x[k]);
}

#endif /* CQ_AVX2 */

/* ---- dispatch ---- */

/* two weight rows (wa, wb) with nt activation rows -> outa, outb (the pair kernels, CQ_Z) */
typedef void (*cq_dotn2_fn_t)(const void *wa, const void *wb, const void *const *x, int nt, int64_t n, float *outa,
                              float *outb);

/* n elements of weight row w with nt (1 .. CQ_NT) activation rows x[0 .. nt) in the partner type -> out */
typedef void (*cq_dotn_fn)(const void *w, const void *const *x, int nt, int64_t n, float *out);

/* The SIMD kernel of weight type t; NULL where this build has none (the reference is used). */
static cq_dotn_fn cq_kernel(ggml_type t) {
#if CQ_AVX2
    switch (t) {
    case GGML_TYPE_F32: return cq_dotn_f32;
    case GGML_TYPE_F16: return cq_dotn_f16;
    case GGML_TYPE_BF16: return cq_dotn_bf16;
    case GGML_TYPE_Q4_0: return cq_dotn_q4_0;
    case GGML_TYPE_Q4_1: return cq_dotn_q4_1;
    case GGML_TYPE_Q5_0: return cq_dotn_q5_0;
    case GGML_TYPE_Q5_1: return cq_dotn_q5_1;
    case GGML_TYPE_Q8_0: return cq_dotn_q8_0;
    case GGML_TYPE_Q2_K: return cq_dotn_q2_K;
    case GGML_TYPE_Q3_K: return cq_dotn_q3_K;
    case GGML_TYPE_Q4_K: return cq_dotn_q4_K;
    case GGML_TYPE_Q5_K: return cq_dotn_q5_K;
    case GGML_TYPE_Q6_K: return cq_dotn_q6_K;
    case GGML_TYPE_IQ4_NL: return cq_dotn_iq4_nl;
    case GGML_TYPE_IQ4_XS: return cq_dotn_iq4_xs;
    case GGML_TYPE_MXFP4: return cq_dotn_mxfp4;
    default: return NULL;
    }
#else
    (void)t;
    return NULL;
#endif
}

/* The pair kernel of weight type t (two rows per 512-bit register) for a T-token matmul, or NULL. The 32-element
 * types take it from 2 tokens (0.6B Q8_0 prefill 143 -> 174 tok/s); a one-token step keeps their one-row kernel
 * (test_ggml_quant's GQ_BENCH at T 1: Q8_0 the same, Q4_0 69 vs 83 us for the one-row kernel), IQ4_XS too (707 vs
 * 1086 us; at T 64 the pair takes 20.5 ms for 22.6); the K types take it everywhere (0.6B Q4_K_M decode 25 -> 40
 * tok/s; at T 64 Q3_K 21.3 -> 16.4 ms, Q2_K 18.7 -> 14.8, one core, 4096 x 4096). */
static cq_dotn2_fn_t cq_kernel2(ggml_type t, int64_t T) {
#if CQ_Z
    if (T < 2 && (gq_block_size(t) != GQ_QK_K || t == GGML_TYPE_IQ4_XS)) return NULL;
    switch (t) {
    case GGML_TYPE_Q4_K: return cq_dotn2_q4_K;
    case GGML_TYPE_Q5_K: return cq_dotn2_q5_K;
    case GGML_TYPE_Q6_K: return cq_dotn2_q6_K;
    case GGML_TYPE_Q2_K: return cq_dotn2_q2_K;
    case GGML_TYPE_Q3_K: return cq_dotn2_q3_K;
    case GGML_TYPE_IQ4_XS: return cq_dotn2_iq4_xs;
    case GGML_TYPE_Q8_0: return cq_dotn2_q8_0;
    case GGML_TYPE_Q4_0: return cq_dotn2_q4_0;
    case GGML_TYPE_Q4_1: return cq_dotn2_q4_1;
    case GGML_TYPE_Q5_0: return cq_dotn2_q5_0;
    case GGML_TYPE_Q5_1: return cq_dotn2_q5_1;
    case GGML_TYPE_IQ4_NL: return cq_dotn2_iq4_nl;
    case GGML_TYPE_MXFP4: return cq_dotn2_mxfp4;
    default: return NULL;
    }
#else
    (void)t;
    (void)T;
    return NULL;
#endif
}

/* nt rows through the kernel, or the reference one row at a time */
static void cq_dotn(ggml_type t, cq_dotn_fn fn, const void *w, const void *const *x, int nt, int64_t n, float *out) {
    if (fn) {
        fn(w, x, nt, n, out);
    } else {
        for (int k = 0; k < nt; k++) out[k] = gq_vec_dot(t, w, x[k], n);
    }
}

float cpu_quant_vec_dot(ggml_type t, const void *w, const void *xq, int64_t n) {
    if (!gq_type_supported(t) || n < 0 || n % gq_block_size(t) != 0) return NAN;
    float r;
    cq_dotn(t, cq_kernel(t), w, &xq, 1, n, &r);
    return r;
}

bool cpu_quant_row(ggml_type act, const float *x, void *xq, int64_t n) {
    if (act != GGML_TYPE_Q8_0 && act != GGML_TYPE_Q8_1 && act != GGML_TYPE_Q8_K && act != GGML_TYPE_F32 &&
        act != GGML_TYPE_F16 && act != GGML_TYPE_BF16)
        return false;
    if (n < 0 || n % gq_block_size(act) != 0) return false;
#if CQ_AVX2
    switch (act) {
    case GGML_TYPE_Q8_0: cq_quantize_q8_0(x, xq, n / GQ_QK); return true;
    case GGML_TYPE_Q8_1: cq_quantize_q8_1(x, xq, n / GQ_QK); return true;
    case GGML_TYPE_Q8_K: cq_quantize_q8_K(x, xq, n / GQ_QK_K); return true;
    case GGML_TYPE_F16: cq_convert_f16(x, xq, n); return true;
    default: break;
    }
#endif
    return gq_quantize_row(act, x, xq, n);
}

/* ---- matmul ---- */

#define CQ_ROWS 16                      /* output rows per work item */
#define CQ_X_TILE_BYTES (256 * 1024)    /* quantized x rows of one token tile (stay in L2) */
#define CQ_MAX_TOK_TILE 64

typedef struct cq_ctx {
    ggml_type t;
    cq_dotn_fn fn;
    cq_dotn2_fn_t fn2;   /* two rows at a time, or NULL */
    const unsigned char *w;
    size_t w_row_bytes;
    int64_t in, out, T;
    const float *x;
    int64_t xs;
    unsigned char *xq;   /* (T) quantized rows */
    size_t xq_row_bytes;
    ggml_type act;
    float *y;
    int64_t ys;
    int64_t tok_tile, row_tiles;
} cq_ctx;

static void cq_quantize_task(void *vc, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const cq_ctx *c = vc;
    for (int64_t t = t0; t < t1; t++) cpu_quant_row(c->act, c->x + t * c->xs, c->xq + (size_t)t * c->xq_row_bytes, c->in);
}

/* Items [i0, i1): output rows [r0, r0 + CQ_ROWS) for tokens [t0, t0 + tok_tile), CQ_NT tokens per pass over a
 * weight row (the row stays in L1 across the token tile's passes, the tile's x rows in L2). */
static void cq_matmul_task(void *vc, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const cq_ctx *c = vc;
    const void *xr[CQ_MAX_TOK_TILE];
    for (int64_t item = i0; item < i1; item++) {
        int64_t t0 = item / c->row_tiles * c->tok_tile;
        int64_t t1 = t0 + c->tok_tile < c->T ? t0 + c->tok_tile : c->T;
        int64_t r0 = item % c->row_tiles * CQ_ROWS;
        int64_t r1 = r0 + CQ_ROWS < c->out ? r0 + CQ_ROWS : c->out;
        for (int64_t t = t0; t < t1; t++) xr[t - t0] = c->xq + (size_t)t * c->xq_row_bytes;
        int64_t r = r0;
        for (; c->fn2 && r + 2 <= r1; r += 2) { /* pairs of rows: the same results, half the instructions */
            const unsigned char *wa = c->w + (size_t)r * c->w_row_bytes, *wb = wa + c->w_row_bytes;
            for (int64_t t = t0; t < t1; t += CQ_NT2) {
                int nt = t1 - t < CQ_NT2 ? (int)(t1 - t) : CQ_NT2;
                float oa[CQ_NT2], ob[CQ_NT2];
                c->fn2(wa, wb, xr + (t - t0), nt, c->in, oa, ob);
                for (int k = 0; k < nt; k++) {
                    c->y[(t + k) * c->ys + r] = oa[k];
                    c->y[(t + k) * c->ys + r + 1] = ob[k];
                }
            }
        }
        for (; r < r1; r++) {
            const unsigned char *wr = c->w + (size_t)r * c->w_row_bytes;
            for (int64_t t = t0; t < t1; t += CQ_NT) {
                int nt = t1 - t < CQ_NT ? (int)(t1 - t) : CQ_NT;
                float o[CQ_NT];
                cq_dotn(c->t, c->fn, wr, xr + (t - t0), nt, c->in, o);
                for (int k = 0; k < nt; k++) c->y[(t + k) * c->ys + r] = o[k];
            }
        }
    }
}

vllm_status cpu_quant_matmul(tp_pool *pool, ggml_type t, const void *w, size_t w_row_bytes, int64_t out,
                             int64_t in, const float *x, int64_t x_stride, int64_t T, float *y, int64_t y_stride) {
    if (!gq_type_supported(t))
        return vt_error(VLLM_ERR_UNSUPPORTED, "quant matmul: weight type %s (%d) is not supported", gq_type_name(t),
                        (int)t);
    int64_t bs = gq_block_size(t);
    if (in <= 0 || in % bs != 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "quant matmul: %s weights need in (%lld) a positive multiple of %lld",
                        gq_type_name(t), (long long)in, (long long)bs);
    if (out < 0 || T < 0 || x_stride < in || y_stride < out)
        return vt_error(VLLM_ERR_INVALID_ARG, "quant matmul: bad shape (T %lld, out %lld, x stride %lld, y stride %lld)",
                        (long long)T, (long long)out, (long long)x_stride, (long long)y_stride);
    size_t wrow = gq_row_bytes(t, in);
    if (wrow == 0 || w_row_bytes < wrow)
        return vt_error(VLLM_ERR_INVALID_ARG, "quant matmul: weight row stride %zu < %zu bytes of a %s row of %lld",
                        w_row_bytes, wrow, gq_type_name(t), (long long)in);
    if (T == 0 || out == 0) return VLLM_OK;
    if (!w || !x || !y) return vt_error(VLLM_ERR_INVALID_ARG, "quant matmul: no data");

    ggml_type act = gq_vec_dot_type(t);
    size_t xrow = gq_row_bytes(act, in);
    if (xrow == 0 || (size_t)T > SIZE_MAX / 64 / xrow)
        return vt_error(VLLM_ERR_INVALID_ARG, "quant matmul: %lld activation rows do not fit in memory", (long long)T);
    size_t bytes = ((size_t)T * xrow + 63) / 64 * 64;
    unsigned char *xq = aligned_alloc(64, bytes);
    if (!xq) return vt_error(VLLM_ERR_NO_MEMORY, "quant matmul: out of memory (%zu bytes of activations)", bytes);

    cq_ctx c = {
        .t = t,
        .fn = cq_kernel(t),
        .fn2 = cq_kernel2(t, T),
        .w = w,
        .w_row_bytes = w_row_bytes,
        .in = in,
        .out = out,
        .T = T,
        .x = x,
        .xs = x_stride,
        .xq = xq,
        .xq_row_bytes = xrow,
        .act = act,
        .y = y,
        .ys = y_stride,
        .row_tiles = (out + CQ_ROWS - 1) / CQ_ROWS,
    };
    int64_t tile = (int64_t)(CQ_X_TILE_BYTES / xrow);
    if (tile < 1) tile = 1;
    if (tile > CQ_MAX_TOK_TILE) tile = CQ_MAX_TOK_TILE;
    c.tok_tile = tile;
    int64_t tok_tiles = (T + tile - 1) / tile;
    int64_t tokens_per_item = T < tile ? T : tile;
    if (pool) {
        tp_run_cost(pool, T, (double)in * 4.0, cq_quantize_task, &c);
        tp_run_cost(pool, tok_tiles * c.row_tiles, (double)CQ_ROWS * (double)tokens_per_item * (double)in,
                    cq_matmul_task, &c);
    } else {
        cq_quantize_task(&c, 0, T, 0);
        cq_matmul_task(&c, 0, tok_tiles * c.row_tiles, 0);
    }
    free(xq);
    return VLLM_OK;
}
