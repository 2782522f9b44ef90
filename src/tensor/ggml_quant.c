/*
 * ggml_quant.c: reference (de)quantization and dot products of ggml's block types (see ggml_quant.h).
 *
 * Written for clarity: one function per type and direction, element indices spelled out. The layouts and
 * formulas are those of llama.cpp's ggml/src/ggml-common.h and ggml/src/ggml-quants.c; the dot products
 * follow ggml/src/ggml-cpu/quants.c (ggml_vec_dot_*_generic): the same integer sums per block and the same
 * float operations in the same order (including the 8 float lanes of the K-type dots), so a result differs
 * from llama.cpp's scalar CPU path only where a compiler contracts or reorders float operations.
 */
#include "tensor/ggml_quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "tensor/tensor.h"

/* ggml's numbering, as this module relies on it (ggml.h enum ggml_type). */
_Static_assert(GGML_TYPE_F32 == 0 && GGML_TYPE_F16 == 1 && GGML_TYPE_Q4_0 == 2 && GGML_TYPE_Q4_1 == 3,
               "ggml type numbering");
_Static_assert(GGML_TYPE_Q5_0 == 6 && GGML_TYPE_Q5_1 == 7 && GGML_TYPE_Q8_0 == 8 && GGML_TYPE_Q8_1 == 9,
               "ggml type numbering");
_Static_assert(GGML_TYPE_Q2_K == 10 && GGML_TYPE_Q3_K == 11 && GGML_TYPE_Q4_K == 12 && GGML_TYPE_Q5_K == 13,
               "ggml type numbering");
_Static_assert(GGML_TYPE_Q6_K == 14 && GGML_TYPE_Q8_K == 15 && GGML_TYPE_IQ4_NL == 20 &&
                   GGML_TYPE_IQ4_XS == 23 && GGML_TYPE_BF16 == 30,
               "ggml type numbering");
_Static_assert(GGML_TYPE_MXFP4 == 39, "ggml type numbering");

const int8_t gq_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t gq_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- type facts ---- */

typedef struct gq_info {
    const char *name;
    int64_t block;     /* elements per block; 0 = unknown */
    size_t size;       /* bytes per block */
    ggml_type dot;     /* partner activation type; GGML_TYPE_COUNT = not a weight type */
} gq_info;

static const gq_info gq_infos[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"F32", 1, 4, GGML_TYPE_F32},
    [GGML_TYPE_F16] = {"F16", 1, 2, GGML_TYPE_F16},
    [GGML_TYPE_BF16] = {"BF16", 1, 2, GGML_TYPE_BF16},
    [GGML_TYPE_Q4_0] = {"Q4_0", GQ_QK, sizeof(gq_block_q4_0), GGML_TYPE_Q8_0},
    [GGML_TYPE_Q4_1] = {"Q4_1", GQ_QK, sizeof(gq_block_q4_1), GGML_TYPE_Q8_1},
    [GGML_TYPE_Q5_0] = {"Q5_0", GQ_QK, sizeof(gq_block_q5_0), GGML_TYPE_Q8_0},
    [GGML_TYPE_Q5_1] = {"Q5_1", GQ_QK, sizeof(gq_block_q5_1), GGML_TYPE_Q8_1},
    [GGML_TYPE_Q8_0] = {"Q8_0", GQ_QK, sizeof(gq_block_q8_0), GGML_TYPE_Q8_0},
    [GGML_TYPE_Q8_1] = {"Q8_1", GQ_QK, sizeof(gq_block_q8_1), GGML_TYPE_COUNT},
    [GGML_TYPE_Q2_K] = {"Q2_K", GQ_QK_K, sizeof(gq_block_q2_K), GGML_TYPE_Q8_K},
    [GGML_TYPE_Q3_K] = {"Q3_K", GQ_QK_K, sizeof(gq_block_q3_K), GGML_TYPE_Q8_K},
    [GGML_TYPE_Q4_K] = {"Q4_K", GQ_QK_K, sizeof(gq_block_q4_K), GGML_TYPE_Q8_K},
    [GGML_TYPE_Q5_K] = {"Q5_K", GQ_QK_K, sizeof(gq_block_q5_K), GGML_TYPE_Q8_K},
    [GGML_TYPE_Q6_K] = {"Q6_K", GQ_QK_K, sizeof(gq_block_q6_K), GGML_TYPE_Q8_K},
    [GGML_TYPE_Q8_K] = {"Q8_K", GQ_QK_K, sizeof(gq_block_q8_K), GGML_TYPE_COUNT},
    [GGML_TYPE_IQ4_NL] = {"IQ4_NL", GQ_QK, sizeof(gq_block_iq4_nl), GGML_TYPE_Q8_0},
    [GGML_TYPE_IQ4_XS] = {"IQ4_XS", GQ_QK_K, sizeof(gq_block_iq4_xs), GGML_TYPE_Q8_K},
    [GGML_TYPE_MXFP4] = {"MXFP4", GQ_QK, sizeof(gq_block_mxfp4), GGML_TYPE_Q8_0},
};

static const gq_info *gq_info_of(ggml_type t) {
    if ((unsigned)t >= GGML_TYPE_COUNT || gq_infos[t].block == 0) return NULL;
    return &gq_infos[t];
}

bool gq_type_supported(ggml_type t) {
    const gq_info *in = gq_info_of(t);
    return in && in->dot != GGML_TYPE_COUNT;
}

int64_t gq_block_size(ggml_type t) {
    const gq_info *in = gq_info_of(t);
    return in ? in->block : 0;
}

size_t gq_type_size(ggml_type t) {
    const gq_info *in = gq_info_of(t);
    return in ? in->size : 0;
}

size_t gq_row_bytes(ggml_type t, int64_t n) {
    const gq_info *in = gq_info_of(t);
    if (!in || n < 0 || n % in->block != 0) return 0;
    uint64_t blocks = (uint64_t)(n / in->block);
    if (blocks > SIZE_MAX / in->size) return 0;
    return (size_t)blocks * in->size;
}

ggml_type gq_vec_dot_type(ggml_type t) {
    const gq_info *in = gq_info_of(t);
    return in ? in->dot : GGML_TYPE_COUNT;
}

const char *gq_type_name(ggml_type t) {
    const gq_info *in = gq_info_of(t);
    return in ? in->name : "?";
}

/* ---- scalar helpers ---- */

float gq_f16_load(const uint8_t p[2]) { return f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

void gq_f16_store(uint8_t p[2], float f) {
    uint16_t h = f32_to_f16(f);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static uint32_t gq_u32_load(const uint8_t p[4]) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Round to nearest, ties to even (ggml's nearest_int), for the K quantizers and Q8_K. */
static int gq_nearest(float f) { return (int)lrintf(f); }

static int gq_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void gq_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void gq_q3_K_scales(const uint8_t *q, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? q[j] & 15 : q[j - 8] >> 4;
        int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* Q2_K / Q3_K: the 2-bit field of element e (0..255) in the 64 qs bytes. */
static int gq_q2_bits(const uint8_t *qs, int e) {
    int h = e / 128, g = (e % 128) / 32, l = e % 32;
    return (qs[32 * h + l] >> (2 * g)) & 3;
}

/* Q6_K: the unsigned 6-bit value (0..63) of element e. */
static int gq_q6_value(const gq_block_q6_K *b, int e) {
    int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
    const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    int lo = g == 0 ? ql[l] & 15 : g == 1 ? ql[32 + l] & 15 : g == 2 ? ql[l] >> 4 : ql[32 + l] >> 4;
    int hi = (qh[l] >> (2 * g)) & 3;
    return lo | (hi << 4);
}

/* Q4_K / Q5_K: the low 4 bits of element e. */
static int gq_k4_nibble(const uint8_t *qs, int e) {
    int c = e / 64, r = e % 64;
    return r < 32 ? qs[32 * c + r] & 15 : qs[32 * c + r - 32] >> 4;
}

/* Q5_K: bit 4 of element e. */
static int gq_q5_K_high(const uint8_t *qh, int e) {
    int c = e / 64, r = e % 64;
    return r < 32 ? (qh[r] >> (2 * c)) & 1 : (qh[r - 32] >> (2 * c + 1)) & 1;
}

/* IQ4_XS: the 6-bit scale code of sub-block ib. */
static int gq_iq4_xs_ls(const gq_block_iq4_xs *b, int ib) {
    int h = b->scales_h[0] | (b->scales_h[1] << 8);
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((h >> (2 * ib)) & 3) << 4);
}

/* ---- dequantization (dequantize_row_*) ---- */

static void dq_q4_0(const gq_block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b->qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void dq_q4_1(const gq_block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d), m = gq_f16_load(b->m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b->qs[j] & 15) * d + m;
            y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

static void dq_q5_0(const gq_block_q5_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d);
        uint32_t qh = gq_u32_load(b->qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)(q0 - 16) * d;
            y[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

static void dq_q5_1(const gq_block_q5_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d), m = gq_f16_load(b->m);
        uint32_t qh = gq_u32_load(b->qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)q0 * d + m;
            y[j + 16] = (float)q1 * d + m;
        }
    }
}

static void dq_q8_0(const gq_block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d);
        for (int j = 0; j < GQ_QK; j++) y[j] = (float)b->qs[j] * d;
    }
}

static void dq_q8_1(const gq_block_q8_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d);
        for (int j = 0; j < GQ_QK; j++) y[j] = (float)b->qs[j] * d;
    }
}

static void dq_q2_K(const gq_block_q2_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K) {
        float d = gq_f16_load(b->d), dmin = gq_f16_load(b->dmin);
        for (int e = 0; e < GQ_QK_K; e++) {
            uint8_t sc = b->scales[e / 16];
            float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            y[e] = dl * (float)gq_q2_bits(b->qs, e) - ml;
        }
    }
}

static void dq_q3_K(const gq_block_q3_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K) {
        float d = gq_f16_load(b->d);
        int8_t sc[16];
        gq_q3_K_scales(b->scales, sc);
        for (int e = 0; e < GQ_QK_K; e++) {
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            int high = (b->hmask[l] >> (4 * h + g)) & 1;
            int q = gq_q2_bits(b->qs, e) - (high ? 0 : 4);
            float dl = d * (float)sc[e / 16];
            y[e] = dl * (float)q;
        }
    }
}

static void dq_q4_K(const gq_block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K) {
        float d = gq_f16_load(b->d), dmin = gq_f16_load(b->dmin);
        for (int e = 0; e < GQ_QK_K; e++) {
            uint8_t sc, m;
            gq_scale_min_k4(e / 32, b->scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            y[e] = d1 * (float)gq_k4_nibble(b->qs, e) - m1;
        }
    }
}

static void dq_q5_K(const gq_block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K) {
        float d = gq_f16_load(b->d), dmin = gq_f16_load(b->dmin);
        for (int e = 0; e < GQ_QK_K; e++) {
            uint8_t sc, m;
            gq_scale_min_k4(e / 32, b->scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            int q = gq_k4_nibble(b->qs, e) + 16 * gq_q5_K_high(b->qh, e);
            y[e] = d1 * (float)q - m1;
        }
    }
}

static void dq_q6_K(const gq_block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K) {
        float d = gq_f16_load(b->d);
        for (int e = 0; e < GQ_QK_K; e++)
            y[e] = d * (float)b->scales[e / 16] * (float)(gq_q6_value(b, e) - 32);
    }
}

static void dq_q8_K(const gq_block_q8_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K)
        for (int e = 0; e < GQ_QK_K; e++) y[e] = b->d * (float)b->qs[e];
}

static void dq_iq4_nl(const gq_block_iq4_nl *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        float d = gq_f16_load(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)gq_kvalues_iq4nl[b->qs[j] & 15];
            y[j + 16] = d * (float)gq_kvalues_iq4nl[b->qs[j] >> 4];
        }
    }
}

static void dq_iq4_xs(const gq_block_iq4_xs *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK_K) {
        float d = gq_f16_load(b->d);
        for (int ib = 0; ib < 8; ib++) {
            float dl = d * (float)(gq_iq4_xs_ls(b, ib) - 32);
            const uint8_t *qs = b->qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = dl * (float)gq_kvalues_iq4nl[qs[j] & 15];
                y[32 * ib + 16 + j] = dl * (float)gq_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ggml_e8m0_to_fp32_half: 2^(e - 128), exact for every e (2^-128 is a float subnormal) */
static float e8m0_half(uint8_t e) { return ldexpf(1.0f, (int)e - 128); }

static void dq_mxfp4(const gq_block_mxfp4 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += GQ_QK) {
        const float d = e8m0_half(b->e);
        for (int j = 0; j < GQ_QK / 2; j++) {
            y[j] = d * (float)gq_kvalues_mxfp4[b->qs[j] & 15];
            y[j + GQ_QK / 2] = d * (float)gq_kvalues_mxfp4[b->qs[j] >> 4];
        }
    }
}

bool gq_dequantize_row(ggml_type t, const void *src, float *dst, int64_t n) {
    const gq_info *in = gq_info_of(t);
    if (!in || n < 0 || n % in->block != 0) return false;
    int64_t nb = n / in->block;
    const unsigned char *s = src;
    switch (t) {
    case GGML_TYPE_F32: memcpy(dst, s, (size_t)n * 4); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = gq_f16_load(s + 2 * i);
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
        break;
    case GGML_TYPE_Q4_0: dq_q4_0(src, dst, nb); break;
    case GGML_TYPE_Q4_1: dq_q4_1(src, dst, nb); break;
    case GGML_TYPE_Q5_0: dq_q5_0(src, dst, nb); break;
    case GGML_TYPE_Q5_1: dq_q5_1(src, dst, nb); break;
    case GGML_TYPE_Q8_0: dq_q8_0(src, dst, nb); break;
    case GGML_TYPE_Q8_1: dq_q8_1(src, dst, nb); break;
    case GGML_TYPE_Q2_K: dq_q2_K(src, dst, nb); break;
    case GGML_TYPE_Q3_K: dq_q3_K(src, dst, nb); break;
    case GGML_TYPE_Q4_K: dq_q4_K(src, dst, nb); break;
    case GGML_TYPE_Q5_K: dq_q5_K(src, dst, nb); break;
    case GGML_TYPE_Q6_K: dq_q6_K(src, dst, nb); break;
    case GGML_TYPE_Q8_K: dq_q8_K(src, dst, nb); break;
    case GGML_TYPE_IQ4_NL: dq_iq4_nl(src, dst, nb); break;
    case GGML_TYPE_IQ4_XS: dq_iq4_xs(src, dst, nb); break;
    case GGML_TYPE_MXFP4: dq_mxfp4(src, dst, nb); break;
    default: return false;
    }
    return true;
}

/* ---- quantization ---- */

/* The element of largest magnitude (the first one on ties), with its sign; 0 for an all-zero block. */
static float gq_signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (ties away from zero), d stored as f16. */
static void q_q8_0(const float *x, gq_block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float amax = 0.0f;
        for (int j = 0; j < GQ_QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        for (int j = 0; j < GQ_QK; j++) b->qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* quantize_row_q8_1_ref: as Q8_0, plus s = f16(d * sum(q)) with the unrounded d. */
static void q_q8_1(const float *x, gq_block_q8_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float amax = 0.0f;
        for (int j = 0; j < GQ_QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        int sum = 0;
        for (int j = 0; j < GQ_QK; j++) {
            b->qs[j] = (int8_t)roundf(x[j] * id);
            sum += b->qs[j];
        }
        gq_f16_store(b->s, (float)sum * d);
    }
}

/* quantize_row_q8_K_ref: iscale = -127 / (the signed absmax), q = min(127, nearest(iscale * x)) (ties to
 * even), d = 1 / iscale (a float), bsums per 16. An all-zero block is d = 0, q = 0 (bsums 0 too). */
static void q_q8_K(const float *x, gq_block_q8_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        float max = gq_signed_absmax(x, GQ_QK_K);
        if (max == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < GQ_QK_K; j++) {
            int v = gq_nearest(iscale * x[j]);
            b->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b->qs[16 * j + l];
            b->bsums[j] = (int16_t)sum;
        }
        b->d = 1.0f / iscale;
    }
}

/* quantize_row_q4_0_ref: d = (signed absmax) / -8, q = min(15, trunc(x / d + 8.5)). */
static void q_q4_0(const float *x, gq_block_q4_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float d = gq_signed_absmax(x, GQ_QK) / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        for (int j = 0; j < 16; j++) {
            int q0 = gq_clamp((int)(x[j] * id + 8.5f), 0, 15);
            int q1 = gq_clamp((int)(x[j + 16] * id + 8.5f), 0, 15);
            b->qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* quantize_row_q4_1_ref / q5_1_ref: d = (max - min) / nmax, m = min, q = trunc((x - min) / d + 0.5). */
static void gq_minmax(const float *x, int n, float *lo, float *hi) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    *lo = mn;
    *hi = mx;
}

static void q_q4_1(const float *x, gq_block_q4_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float mn, mx;
        gq_minmax(x, GQ_QK, &mn, &mx);
        float d = (mx - mn) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        gq_f16_store(b->m, mn);
        for (int j = 0; j < 16; j++) {
            int q0 = gq_clamp((int)((x[j] - mn) * id + 0.5f), 0, 15);
            int q1 = gq_clamp((int)((x[j + 16] - mn) * id + 0.5f), 0, 15);
            b->qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* quantize_row_q5_0_ref: d = (signed absmax) / -16, q = min(31, trunc(x / d + 16.5)). */
static void q_q5_0(const float *x, gq_block_q5_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float d = gq_signed_absmax(x, GQ_QK) / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = gq_clamp((int)(x[j] * id + 16.5f), 0, 31);
            int q1 = gq_clamp((int)(x[j + 16] * id + 16.5f), 0, 31);
            b->qs[j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b->qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

static void q_q5_1(const float *x, gq_block_q5_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float mn, mx;
        gq_minmax(x, GQ_QK, &mn, &mx);
        float d = (mx - mn) / 31.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        gq_f16_store(b->d, d);
        gq_f16_store(b->m, mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = gq_clamp((int)((x[j] - mn) * id + 0.5f), 0, 31);
            int q1 = gq_clamp((int)((x[j + 16] - mn) * id + 0.5f), 0, 31);
            b->qs[j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b->qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* The weight K quantizers below are plain round-to-nearest (not ggml's search for the best scales):
 * per sub-block a scale (and a min) from the range, the scales coded against the super-block's largest,
 * then every element re-quantized with the coded (f16) scales so that dequantization is consistent. */

/* x ~ scale * q - minv, q in [0, nmax]: *minv = -min(0, min x) >= 0, returns the scale >= 0. */
static float gq_fit_scale_min(const float *x, int n, int nmax, float *minv) {
    float lo, hi;
    gq_minmax(x, n, &lo, &hi);
    if (lo > 0.0f) lo = 0.0f;
    *minv = -lo;
    return hi > lo ? (hi - lo) / (float)nmax : 0.0f;
}

/* Codes round(v[j] / step) in [0, cmax] for step = max(v) / cmax; returns step (0 when all v are 0). */
static float gq_code_scales(const float *v, int n, int cmax, int *codes) {
    float mx = 0.0f;
    for (int j = 0; j < n; j++) mx = v[j] > mx ? v[j] : mx;
    float step = mx / (float)cmax;
    for (int j = 0; j < n; j++) codes[j] = step > 0.0f ? gq_clamp(gq_nearest(v[j] / step), 0, cmax) : 0;
    return step;
}

static void q_q2_K(const float *x, gq_block_q2_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        float scale[16], minv[16];
        int sc[16], mc[16];
        for (int j = 0; j < 16; j++) scale[j] = gq_fit_scale_min(x + 16 * j, 16, 3, &minv[j]);
        gq_f16_store(b->d, gq_code_scales(scale, 16, 15, sc));
        gq_f16_store(b->dmin, gq_code_scales(minv, 16, 15, mc));
        float d = gq_f16_load(b->d), dmin = gq_f16_load(b->dmin);
        memset(b->qs, 0, sizeof b->qs);
        for (int j = 0; j < 16; j++) b->scales[j] = (uint8_t)(sc[j] | (mc[j] << 4));
        for (int e = 0; e < GQ_QK_K; e++) {
            float s = d * (float)sc[e / 16], m = dmin * (float)mc[e / 16];
            int q = s > 0.0f ? gq_clamp(gq_nearest((x[e] + m) / s), 0, 3) : 0;
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            b->qs[32 * h + l] |= (uint8_t)(q << (2 * g));
        }
    }
}

static void q_q3_K(const float *x, gq_block_q3_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        /* per sub-block: the element of largest magnitude maps to -4 */
        float s[16];
        for (int j = 0; j < 16; j++) s[j] = gq_signed_absmax(x + 16 * j, 16) / -4.0f;
        /* the sub-block scale of largest magnitude maps to code -32 */
        float dsup = gq_signed_absmax(s, 16) / -32.0f;
        int code[16];
        for (int j = 0; j < 16; j++) code[j] = dsup != 0.0f ? gq_clamp(gq_nearest(s[j] / dsup), -32, 31) : 0;
        gq_f16_store(b->d, dsup);
        float d = gq_f16_load(b->d);
        memset(b->scales, 0, sizeof b->scales);
        memset(b->hmask, 0, sizeof b->hmask);
        memset(b->qs, 0, sizeof b->qs);
        for (int j = 0; j < 16; j++) {
            int u = code[j] + 32;
            if (j < 8)
                b->scales[j] |= (uint8_t)(u & 15);
            else
                b->scales[j - 8] |= (uint8_t)((u & 15) << 4);
            b->scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        }
        for (int e = 0; e < GQ_QK_K; e++) {
            float dl = d * (float)code[e / 16];
            int q = dl != 0.0f ? gq_clamp(gq_nearest(x[e] / dl), -4, 3) : 0;
            int u = q + 4;
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            b->qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * g));
            if (u & 4) b->hmask[l] |= (uint8_t)(1u << (4 * h + g));
        }
    }
}

/* Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scale and min codes packed as gq_scale_min_k4 reads them. */
static void gq_k4_scales(const float *x, int nmax, uint8_t d16[2], uint8_t dmin16[2], uint8_t scales[12],
                         int sc[8], int mc[8]) {
    float scale[8], minv[8];
    for (int j = 0; j < 8; j++) scale[j] = gq_fit_scale_min(x + 32 * j, 32, nmax, &minv[j]);
    gq_f16_store(d16, gq_code_scales(scale, 8, 63, sc));
    gq_f16_store(dmin16, gq_code_scales(minv, 8, 63, mc));
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = (uint8_t)sc[j];
            scales[j + 4] = (uint8_t)mc[j];
        } else {
            scales[j + 4] = (uint8_t)((sc[j] & 15) | ((mc[j] & 15) << 4));
            scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            scales[j] |= (uint8_t)((mc[j] >> 4) << 6);
        }
    }
}

static void q_q4_K(const float *x, gq_block_q4_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        int sc[8], mc[8];
        gq_k4_scales(x, 15, b->d, b->dmin, b->scales, sc, mc);
        float d = gq_f16_load(b->d), dmin = gq_f16_load(b->dmin);
        for (int c = 0; c < 4; c++) {
            int q[64];
            for (int r = 0; r < 64; r++) {
                int e = 64 * c + r;
                float s = d * (float)sc[e / 32], m = dmin * (float)mc[e / 32];
                q[r] = s > 0.0f ? gq_clamp(gq_nearest((x[e] + m) / s), 0, 15) : 0;
            }
            for (int l = 0; l < 32; l++) b->qs[32 * c + l] = (uint8_t)(q[l] | (q[l + 32] << 4));
        }
    }
}

static void q_q5_K(const float *x, gq_block_q5_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        int sc[8], mc[8];
        gq_k4_scales(x, 31, b->d, b->dmin, b->scales, sc, mc);
        float d = gq_f16_load(b->d), dmin = gq_f16_load(b->dmin);
        memset(b->qh, 0, sizeof b->qh);
        for (int c = 0; c < 4; c++) {
            int q[64];
            for (int r = 0; r < 64; r++) {
                int e = 64 * c + r;
                float s = d * (float)sc[e / 32], m = dmin * (float)mc[e / 32];
                q[r] = s > 0.0f ? gq_clamp(gq_nearest((x[e] + m) / s), 0, 31) : 0;
            }
            for (int l = 0; l < 32; l++) {
                b->qs[32 * c + l] = (uint8_t)((q[l] & 15) | ((q[l + 32] & 15) << 4));
                b->qh[l] |= (uint8_t)(((q[l] >> 4) << (2 * c)) | ((q[l + 32] >> 4) << (2 * c + 1)));
            }
        }
    }
}

static void q_q6_K(const float *x, gq_block_q6_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        float s[16];
        for (int j = 0; j < 16; j++) s[j] = gq_signed_absmax(x + 16 * j, 16) / -32.0f;
        float dsup = gq_signed_absmax(s, 16) / -128.0f;
        int code[16];
        for (int j = 0; j < 16; j++) {
            code[j] = dsup != 0.0f ? gq_clamp(gq_nearest(s[j] / dsup), -128, 127) : 0;
            b->scales[j] = (int8_t)code[j];
        }
        gq_f16_store(b->d, dsup);
        float d = gq_f16_load(b->d);
        int u[GQ_QK_K];
        for (int e = 0; e < GQ_QK_K; e++) {
            float dl = d * (float)code[e / 16];
            u[e] = (dl != 0.0f ? gq_clamp(gq_nearest(x[e] / dl), -32, 31) : 0) + 32;
        }
        for (int h = 0; h < 2; h++) {
            const int *v = u + 128 * h;
            for (int l = 0; l < 32; l++) {
                b->ql[64 * h + l] = (uint8_t)((v[l] & 15) | ((v[l + 64] & 15) << 4));
                b->ql[64 * h + 32 + l] = (uint8_t)((v[l + 32] & 15) | ((v[l + 96] & 15) << 4));
                b->qh[32 * h + l] = (uint8_t)((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                              ((v[l + 96] >> 4) << 6));
            }
        }
    }
}

/* The index of the IQ4_NL level nearest to v (the lower one on ties). */
static int gq_iq4_index(float v) {
    int best = 0;
    float berr = fabsf(v - (float)gq_kvalues_iq4nl[0]);
    for (int k = 1; k < 16; k++) {
        float err = fabsf(v - (float)gq_kvalues_iq4nl[k]);
        if (err < berr) {
            berr = err;
            best = k;
        }
    }
    return best;
}

/* IQ4_NL: the element of largest magnitude maps to level -127. */
static void q_iq4_nl(const float *x, gq_block_iq4_nl *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        gq_f16_store(b->d, gq_signed_absmax(x, GQ_QK) / -127.0f);
        float d = gq_f16_load(b->d);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++)
            b->qs[j] = (uint8_t)(gq_iq4_index(x[j] * id) | (gq_iq4_index(x[j + 16] * id) << 4));
    }
}

/* IQ4_XS: per sub-block of 32 a scale s (largest magnitude -> level -127), coded as d * (ls - 32) with the
 * largest |s| at ls = 0. */
/* quantize_row_mxfp4_ref: e from the absmax (floor(log2) - 2 + 127: the largest level 12 d covers it), each value
 * to its nearest level (the first of equals) */
static void q_mxfp4(const float *x, gq_block_mxfp4 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK) {
        float amax = 0.0f;
        for (int j = 0; j < GQ_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* ggml's (uint8_t)(floorf(log2f(amax)) - 2 + 127), kept in 0 .. 254 (its cast is undefined outside) */
        int e = 0;
        if (amax > 0.0f) e = isfinite(amax) ? (int)floorf(log2f(amax)) - 2 + 127 : 254;
        b->e = (uint8_t)(e < 0 ? 0 : e > 254 ? 254 : e);
        const float d = e8m0_half(b->e);
        for (int j = 0; j < GQ_QK; j++) {
            int best = 0;
            float err = fabsf((float)gq_kvalues_mxfp4[0] * d - x[j]);
            for (int k = 1; k < 16; k++) {
                const float e = fabsf((float)gq_kvalues_mxfp4[k] * d - x[j]);
                if (e < err) best = k, err = e;
            }
            if (j < GQ_QK / 2) b->qs[j] = (uint8_t)best;
            else b->qs[j - GQ_QK / 2] |= (uint8_t)(best << 4);
        }
    }
}

static void q_iq4_xs(const float *x, gq_block_iq4_xs *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += GQ_QK_K) {
        float s[8];
        for (int ib = 0; ib < 8; ib++) s[ib] = gq_signed_absmax(x + 32 * ib, 32) / -127.0f;
        float dsup = gq_signed_absmax(s, 8) / -32.0f;
        gq_f16_store(b->d, dsup);
        float d = gq_f16_load(b->d);
        int h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        for (int ib = 0; ib < 8; ib++) {
            int ls = dsup != 0.0f ? gq_clamp(gq_nearest(s[ib] / dsup), -32, 31) + 32 : 32;
            b->scales_l[ib / 2] |= (uint8_t)((ls & 15) << (4 * (ib % 2)));
            h |= (ls >> 4) << (2 * ib);
            float dl = d * (float)(ls - 32);
            float id = dl != 0.0f ? 1.0f / dl : 0.0f;
            const float *xb = x + 32 * ib;
            for (int j = 0; j < 16; j++)
                b->qs[16 * ib + j] = (uint8_t)(gq_iq4_index(xb[j] * id) | (gq_iq4_index(xb[j + 16] * id) << 4));
        }
        b->scales_h[0] = (uint8_t)(h & 0xff);
        b->scales_h[1] = (uint8_t)(h >> 8);
    }
}

bool gq_quantize_row(ggml_type t, const float *src, void *dst, int64_t n) {
    const gq_info *in = gq_info_of(t);
    if (!in || n < 0 || n % in->block != 0) return false;
    int64_t nb = n / in->block;
    unsigned char *d = dst;
    switch (t) {
    case GGML_TYPE_F32: memcpy(d, src, (size_t)n * 4); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) gq_f16_store(d + 2 * i, src[i]);
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            d[2 * i] = (uint8_t)(h & 0xff);
            d[2 * i + 1] = (uint8_t)(h >> 8);
        }
        break;
    case GGML_TYPE_Q4_0: q_q4_0(src, dst, nb); break;
    case GGML_TYPE_Q4_1: q_q4_1(src, dst, nb); break;
    case GGML_TYPE_Q5_0: q_q5_0(src, dst, nb); break;
    case GGML_TYPE_Q5_1: q_q5_1(src, dst, nb); break;
    case GGML_TYPE_Q8_0: q_q8_0(src, dst, nb); break;
    case GGML_TYPE_Q8_1: q_q8_1(src, dst, nb); break;
    case GGML_TYPE_Q2_K: q_q2_K(src, dst, nb); break;
    case GGML_TYPE_Q3_K: q_q3_K(src, dst, nb); break;
    case GGML_TYPE_Q4_K: q_q4_K(src, dst, nb); break;
    case GGML_TYPE_Q5_K: q_q5_K(src, dst, nb); break;
    case GGML_TYPE_Q6_K: q_q6_K(src, dst, nb); break;
    case GGML_TYPE_Q8_K: q_q8_K(src, dst, nb); break;
    case GGML_TYPE_IQ4_NL: q_iq4_nl(src, dst, nb); break;
    case GGML_TYPE_IQ4_XS: q_iq4_xs(src, dst, nb); break;
    case GGML_TYPE_MXFP4: q_mxfp4(src, dst, nb); break;
    default: return false;
    }
    return true;
}

/* ---- dot products (ggml_vec_dot_*_generic) ---- */

static float vd_q4_0(const gq_block_q4_0 *x, const gq_block_q8_0 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            sumi0 += ((x[i].qs[j] & 15) - 8) * y[i].qs[j];
            sumi1 += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sumf += (float)(sumi0 + sumi1) * gq_f16_load(x[i].d) * gq_f16_load(y[i].d);
    }
    return sumf;
}

static float vd_q4_1(const gq_block_q4_1 *x, const gq_block_q8_1 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            sumi0 += (x[i].qs[j] & 15) * y[i].qs[j];
            sumi1 += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sumf += (gq_f16_load(x[i].d) * gq_f16_load(y[i].d)) * (float)(sumi0 + sumi1) +
                gq_f16_load(x[i].m) * gq_f16_load(y[i].s);
    }
    return sumf;
}

static float vd_q5_0(const gq_block_q5_0 *x, const gq_block_q8_0 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t qh = gq_u32_load(x[i].qh);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ((x[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4)) - 16;
            int q1 = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi0 += q0 * y[i].qs[j];
            sumi1 += q1 * y[i].qs[j + 16];
        }
        sumf += (gq_f16_load(x[i].d) * gq_f16_load(y[i].d)) * (float)(sumi0 + sumi1);
    }
    return sumf;
}

static float vd_q5_1(const gq_block_q5_1 *x, const gq_block_q8_1 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t qh = gq_u32_load(x[i].qh);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi0 += q0 * y[i].qs[j];
            sumi1 += q1 * y[i].qs[j + 16];
        }
        sumf += (gq_f16_load(x[i].d) * gq_f16_load(y[i].d)) * (float)(sumi0 + sumi1) +
                gq_f16_load(x[i].m) * gq_f16_load(y[i].s);
    }
    return sumf;
}

static float vd_q8_0(const gq_block_q8_0 *x, const gq_block_q8_0 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < GQ_QK; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (gq_f16_load(x[i].d) * gq_f16_load(y[i].d));
    }
    return sumf;
}

/* ggml_vec_dot_mxfp4_q8_0_generic: d = d_y * 2^(e - 128), the levels of gq_kvalues_mxfp4 */
static float vd_mxfp4(const gq_block_mxfp4 *x, const gq_block_q8_0 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        float d = gq_f16_load(y[i].d) * e8m0_half(x[i].e);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < 16; j++) {
            sumi1 += y[i].qs[j] * gq_kvalues_mxfp4[x[i].qs[j] & 15];
            sumi2 += y[i].qs[j + 16] * gq_kvalues_mxfp4[x[i].qs[j] >> 4];
        }
        sumf += d * (float)(sumi1 + sumi2);
    }
    return sumf;
}

static float vd_iq4_nl(const gq_block_iq4_nl *x, const gq_block_q8_0 *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        float d = gq_f16_load(y[i].d) * gq_f16_load(x[i].d);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < 16; j++) {
            sumi1 += y[i].qs[j] * gq_kvalues_iq4nl[x[i].qs[j] & 15];
            sumi2 += y[i].qs[j + 16] * gq_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
        sumf += d * (float)(sumi1 + sumi2);
    }
    return sumf;
}

static float vd_q2_K(const gq_block_q2_K *x, const gq_block_q8_K *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
        float dall = y[i].d * gq_f16_load(x[i].d);
        float dmin = y[i].d * gq_f16_load(x[i].dmin);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int isuml = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++) isuml += y[i].qs[e] * gq_q2_bits(x[i].qs, e);
            isum += (x[i].scales[j] & 15) * isuml;
        }
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

/* The K-type dots of ggml keep 8 float lanes: lane l sums d * (the integer sum over elements e = l mod 8 of
 * the block), and the lanes are added at the end. */
static float vd_q3_K(const gq_block_q3_K *x, const gq_block_q8_K *y, int64_t nb) {
    float sums[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        int8_t sc[16];
        gq_q3_K_scales(x[i].scales, sc);
        int32_t aux32[8] = {0};
        for (int e = 0; e < GQ_QK_K; e++) {
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            int q = gq_q2_bits(x[i].qs, e) - (((x[i].hmask[l] >> (4 * h + g)) & 1) ? 0 : 4);
            aux32[e % 8] += sc[e / 16] * (y[i].qs[e] * q);
        }
        float d = gq_f16_load(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
    }
    float sumf = 0.0f;
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

static float vd_q4_K(const gq_block_q4_K *x, const gq_block_q8_K *y, int64_t nb) {
    float sums[8] = {0};
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) gq_scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
        int32_t aux32[8] = {0};
        for (int e = 0; e < GQ_QK_K; e++) aux32[e % 8] += sc[e / 32] * (y[i].qs[e] * gq_k4_nibble(x[i].qs, e));
        int sumi = 0;
        for (int j = 0; j < 16; j++) sumi += y[i].bsums[j] * mn[j / 2];
        float d = gq_f16_load(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
        float dmin = gq_f16_load(x[i].dmin) * y[i].d;
        sumf -= dmin * (float)sumi;
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

static float vd_q5_K(const gq_block_q5_K *x, const gq_block_q8_K *y, int64_t nb) {
    float sums[8] = {0};
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) gq_scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
        int32_t aux32[8] = {0};
        for (int e = 0; e < GQ_QK_K; e++) {
            int q = gq_k4_nibble(x[i].qs, e) + 16 * gq_q5_K_high(x[i].qh, e);
            aux32[e % 8] += sc[e / 32] * (y[i].qs[e] * q);
        }
        int sumi = 0;
        for (int j = 0; j < 16; j++) sumi += y[i].bsums[j] * mn[j / 2];
        float d = gq_f16_load(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
        float dmin = gq_f16_load(x[i].dmin) * y[i].d;
        sumf -= dmin * (float)sumi;
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

static float vd_q6_K(const gq_block_q6_K *x, const gq_block_q8_K *y, int64_t nb) {
    float sums[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        int32_t aux32[8] = {0};
        for (int e = 0; e < GQ_QK_K; e++)
            aux32[e % 8] += x[i].scales[e / 16] * (y[i].qs[e] * (gq_q6_value(&x[i], e) - 32));
        float d = gq_f16_load(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
    }
    float sumf = 0.0f;
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

static float vd_iq4_xs(const gq_block_iq4_xs *x, const gq_block_q8_K *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        float d4d8 = gq_f16_load(x[i].d) * y[i].d;
        for (int ib = 0; ib < 8; ib++) {
            float dl = d4d8 * (float)(gq_iq4_xs_ls(&x[i], ib) - 32);
            const uint8_t *qs = x[i].qs + 16 * ib;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int sumi1 = 0, sumi2 = 0;
            for (int j = 0; j < 16; j++) {
                sumi1 += q8[j] * gq_kvalues_iq4nl[qs[j] & 15];
                sumi2 += q8[j + 16] * gq_kvalues_iq4nl[qs[j] >> 4];
            }
            sumf += dl * (float)(sumi1 + sumi2);
        }
    }
    return sumf;
}

/* ggml_vec_dot_f32 / _f16 / _bf16 (scalar): float products summed in double. */
static float vd_float(ggml_type t, const unsigned char *x, const unsigned char *y, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float a, b;
        if (t == GGML_TYPE_F32) {
            memcpy(&a, x + 4 * i, 4);
            memcpy(&b, y + 4 * i, 4);
        } else if (t == GGML_TYPE_F16) {
            a = gq_f16_load(x + 2 * i);
            b = gq_f16_load(y + 2 * i);
        } else {
            a = bf16_to_f32((uint16_t)(x[2 * i] | (x[2 * i + 1] << 8)));
            b = bf16_to_f32((uint16_t)(y[2 * i] | (y[2 * i + 1] << 8)));
        }
        sum += (double)(a * b);
    }
    return (float)sum;
}

float gq_vec_dot(ggml_type t, const void *w, const void *xq, int64_t n) {
    if (!gq_type_supported(t)) return NAN;
    int64_t bs = gq_block_size(t);
    if (n < 0 || n % bs != 0) return NAN;
    int64_t nb = n / bs;
    switch (t) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16: return vd_float(t, w, xq, n);
    case GGML_TYPE_Q4_0: return vd_q4_0(w, xq, nb);
    case GGML_TYPE_Q4_1: return vd_q4_1(w, xq, nb);
    case GGML_TYPE_Q5_0: return vd_q5_0(w, xq, nb);
    case GGML_TYPE_Q5_1: return vd_q5_1(w, xq, nb);
    case GGML_TYPE_Q8_0: return vd_q8_0(w, xq, nb);
    case GGML_TYPE_Q2_K: return vd_q2_K(w, xq, nb);
    case GGML_TYPE_Q3_K: return vd_q3_K(w, xq, nb);
    case GGML_TYPE_Q4_K: return vd_q4_K(w, xq, nb);
    case GGML_TYPE_Q5_K: return vd_q5_K(w, xq, nb);
    case GGML_TYPE_Q6_K: return vd_q6_K(w, xq, nb);
    case GGML_TYPE_IQ4_NL: return vd_iq4_nl(w, xq, nb);
    case GGML_TYPE_IQ4_XS: return vd_iq4_xs(w, xq, nb);
    case GGML_TYPE_MXFP4: return vd_mxfp4(w, xq, nb);
    default: return NAN;
    }
}
