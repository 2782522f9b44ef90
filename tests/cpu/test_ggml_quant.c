/*
 * test_ggml_quant.c: ggml's quantized block types (src/tensor/ggml_quant.h) and the fast CPU dot products and
 * matmul over them (src/cpu/cpu_quant.h).
 *
 *   - type facts (block sizes, bytes, partner types);
 *   - known-answer blocks: one hand-built block per type, raw bytes at the offsets of llama.cpp's
 *     ggml-common.h structs, dequantized values worked out by hand from the format (nibble order, bit
 *     planes, scale packing) and written here as literals;
 *   - ggml's activation quantizers on hand-made ties (Q8_0 rounds half away from zero, Q8_K half to even
 *     with a signed scale);
 *   - round trips of random data within each type's error bound;
 *   - the fast vec_dot against the reference (on quantized random data and on random bytes) and against the
 *     float dot of the dequantized rows; the fast activation quantizers bit-identical to the reference;
 *   - the matmul against float references on odd shapes, with 1 and several threads (bit-identical).
 *
 * GQ_BENCH=1 in the environment also times the matmul at T = 1 on a 4096 x 4096 weight (stderr).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_quant.h"
#include "core/threadpool.h"
#include "tensor/ggml_quant.h"
#include "test.h"

static const ggml_type WEIGHT_TYPES[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,   GGML_TYPE_Q5_0,
    GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,   GGML_TYPE_Q5_K,
    GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4,
};
#define N_WEIGHT_TYPES ((int)(sizeof WEIGHT_TYPES / sizeof WEIGHT_TYPES[0]))

/* ---- rng ---- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static float rng_uniform(void) { return (float)((double)rng_u32() / 4294967296.0 * 2.0 - 1.0); }

/* roughly normal (sum of 4 uniforms), with the occasional outlier as real weights have */
static float rng_weight(void) {
    float v = (rng_uniform() + rng_uniform() + rng_uniform() + rng_uniform()) * 0.5f;
    if (rng_u32() % 97 == 0) v *= 4.0f;
    return v;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* a 4-byte aligned buffer (Q8_K rows) */
static void *xmalloc_aligned(size_t n) {
    size_t sz = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, sz ? sz : 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* f16 bit patterns used below */
#define H_1 0x3C00      /* 1.0 */
#define H_HALF 0x3800   /* 0.5 */
#define H_QUARTER 0x3400 /* 0.25 */
#define H_M1 0xBC00     /* -1.0 */

/* ---- type facts ---- */

static void test_type_facts(void) {
    static const struct {
        ggml_type t;
        int64_t block;
        size_t size;
        ggml_type dot;
    } facts[] = {
        {GGML_TYPE_F32, 1, 4, GGML_TYPE_F32},          {GGML_TYPE_F16, 1, 2, GGML_TYPE_F16},
        {GGML_TYPE_BF16, 1, 2, GGML_TYPE_BF16},        {GGML_TYPE_Q4_0, 32, 18, GGML_TYPE_Q8_0},
        {GGML_TYPE_Q4_1, 32, 20, GGML_TYPE_Q8_1},      {GGML_TYPE_Q5_0, 32, 22, GGML_TYPE_Q8_0},
        {GGML_TYPE_Q5_1, 32, 24, GGML_TYPE_Q8_1},      {GGML_TYPE_Q8_0, 32, 34, GGML_TYPE_Q8_0},
        {GGML_TYPE_Q2_K, 256, 84, GGML_TYPE_Q8_K},     {GGML_TYPE_Q3_K, 256, 110, GGML_TYPE_Q8_K},
        {GGML_TYPE_Q4_K, 256, 144, GGML_TYPE_Q8_K},    {GGML_TYPE_Q5_K, 256, 176, GGML_TYPE_Q8_K},
        {GGML_TYPE_Q6_K, 256, 210, GGML_TYPE_Q8_K},    {GGML_TYPE_IQ4_NL, 32, 18, GGML_TYPE_Q8_0},
        {GGML_TYPE_IQ4_XS, 256, 136, GGML_TYPE_Q8_K},  {GGML_TYPE_MXFP4, 32, 17, GGML_TYPE_Q8_0},
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        ggml_type t = facts[i].t;
        CHECK_MSG(gq_type_supported(t), "%s", gq_type_name(t));
        CHECK_MSG(gq_block_size(t) == facts[i].block, "%s block", gq_type_name(t));
        CHECK_MSG(gq_type_size(t) == facts[i].size, "%s size", gq_type_name(t));
        CHECK_MSG(gq_vec_dot_type(t) == facts[i].dot, "%s partner", gq_type_name(t));
        CHECK(gq_row_bytes(t, 4096) == facts[i].size * (size_t)(4096 / facts[i].block));
    }
    /* activation-only types: known sizes, not weights */
    CHECK(!gq_type_supported(GGML_TYPE_Q8_K) && gq_block_size(GGML_TYPE_Q8_K) == 256 &&
          gq_type_size(GGML_TYPE_Q8_K) == 292);
    CHECK(!gq_type_supported(GGML_TYPE_Q8_1) && gq_type_size(GGML_TYPE_Q8_1) == 36);
    CHECK(gq_vec_dot_type(GGML_TYPE_Q8_K) == GGML_TYPE_COUNT);
    /* unknown types and bad lengths */
    CHECK(!gq_type_supported(GGML_TYPE_IQ2_XXS) && gq_block_size(GGML_TYPE_IQ2_XXS) == 0);
    CHECK(!gq_type_supported((ggml_type)999) && gq_type_size((ggml_type)999) == 0);
    CHECK(strcmp(gq_type_name((ggml_type)-1), "?") == 0 && strcmp(gq_type_name(GGML_TYPE_Q4_K), "Q4_K") == 0);
    CHECK(gq_row_bytes(GGML_TYPE_Q4_K, 100) == 0 && gq_row_bytes(GGML_TYPE_Q4_K, -256) == 0);
    CHECK(gq_row_bytes(GGML_TYPE_Q4_K, 0) == 0 && gq_row_bytes(GGML_TYPE_Q8_0, 64) == 68);
    CHECK(gq_row_bytes(GGML_TYPE_F32, INT64_MAX) == 0); /* overflow */
    float f[32];
    uint8_t b[64] = {0};
    CHECK(!gq_dequantize_row(GGML_TYPE_Q4_0, b, f, 31));
    CHECK(!gq_dequantize_row(GGML_TYPE_IQ2_XS, b, f, 256));
    CHECK(!gq_quantize_row(GGML_TYPE_Q4_0, f, b, 16));
    CHECK(isnan(gq_vec_dot(GGML_TYPE_Q4_0, b, b, 31)) && isnan(gq_vec_dot(GGML_TYPE_Q8_K, b, b, 256)));
    CHECK(isnan(cpu_quant_vec_dot(GGML_TYPE_Q4_0, b, b, 48)));
    CHECK(gq_dequantize_row(GGML_TYPE_Q4_0, b, f, 0));
}

/* ---- known-answer blocks ---- */

typedef struct kat {
    int index;
    float value;
} kat;

static void check_kat(ggml_type t, const uint8_t *blk, int n, const kat *k, int nk) {
    float y[256];
    CHECK_MSG(gq_dequantize_row(t, blk, y, n), "%s", gq_type_name(t));
    for (int i = 0; i < nk; i++)
        CHECK_MSG(y[k[i].index] == k[i].value, "%s element %d: %.9g, want %.9g", gq_type_name(t), k[i].index,
                  (double)y[k[i].index], (double)k[i].value);
    /* the same block at an odd address reads the same */
    size_t bytes = gq_row_bytes(t, n);
    uint8_t *odd = xmalloc(bytes + 1);
    memcpy(odd + 1, blk, bytes);
    float z[256];
    CHECK(gq_dequantize_row(t, odd + 1, z, n));
    CHECK_MSG(memcmp(y, z, sizeof(float) * (size_t)n) == 0, "%s unaligned", gq_type_name(t));
    free(odd);
}

static void test_known_blocks(void) {
    /* Q4_0: d = 0.5; qs[j] = j | (15 - j) << 4: x[j] = (j - 8) / 2, x[16 + j] = (7 - j) / 2 */
    {
        uint8_t b[18];
        put16(b, H_HALF);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
        const kat k[] = {{0, -4.0f}, {3, -2.5f}, {15, 3.5f}, {16, 3.5f}, {20, 1.5f}, {31, -4.0f}};
        check_kat(GGML_TYPE_Q4_0, b, 32, k, 6);
    }
    /* Q4_1: d = 0.5, m = -1; same nibbles: x[j] = j / 2 - 1, x[16 + j] = (15 - j) / 2 - 1 */
    {
        uint8_t b[20];
        put16(b, H_HALF);
        put16(b + 2, H_M1);
        for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
        const kat k[] = {{0, -1.0f}, {5, 1.5f}, {15, 6.5f}, {16, 6.5f}, {20, 4.5f}, {31, -1.0f}};
        check_kat(GGML_TYPE_Q4_1, b, 32, k, 6);
    }
    /* Q5_0: d = 1; same nibbles; qh = 01 80 02 40: bits 0, 15, 17, 30 set (5th bit of elements 0, 15, 17, 30) */
    {
        uint8_t b[22];
        put16(b, H_1);
        b[2] = 0x01, b[3] = 0x80, b[4] = 0x02, b[5] = 0x40;
        for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | ((15 - j) << 4));
        const kat k[] = {{0, 0.0f}, {1, -15.0f}, {15, 15.0f}, {16, -1.0f}, {17, 14.0f}, {30, 1.0f}, {31, -16.0f}};
        check_kat(GGML_TYPE_Q5_0, b, 32, k, 7);
    }
    /* Q5_1: d = 0.5, m = 1; the same quants as Q5_0 (unsigned): x = q / 2 + 1 */
    {
        uint8_t b[24];
        put16(b, H_HALF);
        put16(b + 2, H_1);
        b[4] = 0x01, b[5] = 0x80, b[6] = 0x02, b[7] = 0x40;
        for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(j | ((15 - j) << 4));
        const kat k[] = {{0, 9.0f}, {1, 1.5f}, {15, 16.5f}, {16, 8.5f}, {17, 16.0f}, {30, 9.5f}, {31, 1.0f}};
        check_kat(GGML_TYPE_Q5_1, b, 32, k, 7);
    }
    /* Q8_0: d = 0.25; qs[j] = 8j - 128: x[j] = 2j - 32 */
    {
        uint8_t b[34];
        put16(b, H_QUARTER);
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(8 * j - 128);
        const kat k[] = {{0, -32.0f}, {16, 0.0f}, {31, 30.0f}};
        check_kat(GGML_TYPE_Q8_0, b, 32, k, 3);
    }
    /* Q8_1: d = 0.5 (s ignored by dequantization) */
    {
        uint8_t b[36];
        put16(b, H_HALF);
        put16(b + 2, H_M1);
        for (int j = 0; j < 32; j++) b[4 + j] = (uint8_t)(int8_t)(j - 16);
        const kat k[] = {{0, -8.0f}, {31, 7.5f}};
        check_kat(GGML_TYPE_Q8_1, b, 32, k, 2);
    }
    /* Q2_K (scales 0..15, qs 16..79, d 80, dmin 82): d = 1, dmin = 0.5; scales[j] = j | (15 - j) << 4;
     * half 0 bytes 0xE4 (2-bit fields 0,1,2,3 for g = 0..3) except byte 5 = 0; half 1 bytes 0x1B (3,2,1,0).
     * x = sc * q - 0.5 * m with sub-block j = e / 16. */
    {
        uint8_t b[84];
        for (int j = 0; j < 16; j++) b[j] = (uint8_t)(j | ((15 - j) << 4));
        for (int i = 0; i < 32; i++) b[16 + i] = 0xE4;
        for (int i = 32; i < 64; i++) b[16 + i] = 0x1B;
        b[16 + 5] = 0x00;
        put16(b + 80, H_1);
        put16(b + 82, H_HALF);
        const kat k[] = {{0, -7.5f},  {40, -4.5f},  {37, -6.5f}, {100, 13.5f},
                         {101, -4.5f}, {130, 20.5f}, {200, 10.5f}, {255, 0.0f}};
        check_kat(GGML_TYPE_Q2_K, b, 256, k, 8);
    }
    /* Q3_K (hmask 0..31, qs 32..95, scales 96..107, d 108): d = 0.5; scale codes (7j + 3) mod 64, i.e.
     * scales - 32 = -29 -22 -15 -8 -1 6 13 20 27 -30 -23 -16 -9 -2 5 12; qs bytes 0xE4 except qs[33] = 0x1B;
     * hmask[l] = 0x0F (l even: half 0 has its high bits) or 0xF0 (l odd: half 1). */
    {
        uint8_t b[110];
        for (int l = 0; l < 32; l++) b[l] = (l % 2) ? 0xF0 : 0x0F;
        for (int i = 0; i < 64; i++) b[32 + i] = 0xE4;
        b[32 + 33] = 0x1B;
        const uint8_t sc[12] = {0xB3, 0x2A, 0x91, 0x08, 0x7F, 0xE6, 0x5D, 0xC4, 0x74, 0x48, 0x89, 0x9D};
        memcpy(b + 96, sc, 12);
        put16(b + 108, H_HALF);
        const kat k[] = {{33, 22.5f},  {34, -7.5f},  {70, -1.0f}, {127, -10.0f}, {129, 40.5f},
                         {130, -54.0f}, {161, -23.0f}, {240, -6.0f}, {255, 18.0f}};
        check_kat(GGML_TYPE_Q3_K, b, 256, k, 9);
        int8_t s[16];
        gq_q3_K_scales(sc, s);
        const int8_t want[16] = {-29, -22, -15, -8, -1, 6, 13, 20, 27, -30, -23, -16, -9, -2, 5, 12};
        CHECK(memcmp(s, want, 16) == 0);
    }
    /* Q4_K (d 0, dmin 2, scales 4..15, qs 16..143): d = 0.5, dmin = 0.25; scale codes 1 2 3 4 37 50 63 20,
     * min codes 5 6 7 8 40 17 33 60 (packed by hand below); qs[32c + l] = l%16 | (15 - l%16) << 4.
     * x = 0.5 * sc * q - 0.25 * m. */
    static const uint8_t k4_scales[12] = {0x81, 0xC2, 0xC3, 0x44, 0x85, 0x46, 0x87, 0xC8, 0x85, 0x12, 0x1F, 0xC4};
    {
        uint8_t b[144];
        put16(b, H_HALF);
        put16(b + 2, H_QUARTER);
        memcpy(b + 4, k4_scales, 12);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[16 + 32 * c + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
        const kat k[] = {{3, 0.25f},     {40, 5.5f},       {81, -0.25f}, {130, 27.0f},
                         {165, 245.75f}, {223, 464.25f}, {255, -15.0f}, {240, 135.0f}};
        check_kat(GGML_TYPE_Q4_K, b, 256, k, 8);
        const uint8_t want_sc[8] = {1, 2, 3, 4, 37, 50, 63, 20}, want_m[8] = {5, 6, 7, 8, 40, 17, 33, 60};
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            gq_scale_min_k4(j, k4_scales, &s, &m);
            CHECK_MSG(s == want_sc[j] && m == want_m[j], "scale/min %d: %d %d", j, s, m);
        }
    }
    /* Q5_K (d 0, dmin 2, scales 4..15, qh 16..47, qs 48..175): as Q4_K; qh[l] = 0x55 (l even: +16 on the
     * low-nibble halves) or 0xAA (l odd: on the high-nibble halves). */
    {
        uint8_t b[176];
        put16(b, H_HALF);
        put16(b + 2, H_QUARTER);
        memcpy(b + 4, k4_scales, 12);
        for (int l = 0; l < 32; l++) b[16 + l] = (l % 2) ? 0xAA : 0x55;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[48 + 32 * c + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
        const kat k[] = {{3, 0.25f},   {2, 7.75f},       {40, 5.5f},       {41, 20.5f},  {130, 323.0f},
                         {165, 645.75f}, {223, 464.25f}, {254, -5.0f}, {255, 145.0f}};
        check_kat(GGML_TYPE_Q5_K, b, 256, k, 9);
    }
    /* Q6_K (ql 0..127, qh 128..191, scales 192..207, d 208): d = 0.5; scales[j] = 9j - 70;
     * ql[b] = b%16 | (b/16) << 4; qh bytes 0xE4 (2-bit fields 0,1,2,3) except qh[5] = qh[40] = 0x1B.
     * x = 0.5 * scale * (q - 32). */
    {
        uint8_t b[210];
        for (int i = 0; i < 128; i++) b[i] = (uint8_t)((i % 16) | ((i / 16) << 4));
        for (int i = 0; i < 64; i++) b[128 + i] = 0xE4;
        b[128 + 5] = 0x1B;
        b[128 + 40] = 0x1B;
        for (int j = 0; j < 16; j++) b[192 + j] = (uint8_t)(int8_t)(9 * j - 70);
        put16(b + 208, H_HALF);
        const kat k[] = {{5, -735.0f},  {6, 910.0f},   {40, 208.0f},   {37, -130.0f}, {84, -12.5f},
                         {127, -66.5f}, {136, 24.0f}, {232, -728.0f}, {223, 117.5f}, {255, 747.5f}};
        check_kat(GGML_TYPE_Q6_K, b, 256, k, 10);
    }
    /* IQ4_NL (d 0, qs 2..17): d = 0.5; qs[j] = j | (15 - j) << 4: x[j] = kv[j] / 2, x[16 + j] = kv[15 - j] / 2 */
    {
        uint8_t b[18];
        put16(b, H_HALF);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
        const kat k[] = {{0, -63.5f}, {7, -5.0f}, {8, 0.5f}, {15, 56.5f}, {16, 56.5f}, {20, 19.0f}, {31, -63.5f}};
        check_kat(GGML_TYPE_IQ4_NL, b, 32, k, 7);
    }
    /* IQ4_XS (d 0, scales_h 2, scales_l 4..7, qs 8..135): d = 0.25; ls = 0 63 31 32 40 17 50 5 (ls - 32 =
     * -32 31 -1 0 8 -15 18 -27): scales_l F0 0F 18 52, scales_h 0x369C; qs[16ib + j] = j | (15 - j) << 4. */
    {
        uint8_t b[136];
        put16(b, H_QUARTER);
        put16(b + 2, 0x369C);
        b[4] = 0xF0, b[5] = 0x0F, b[6] = 0x18, b[7] = 0x52;
        for (int ib = 0; ib < 8; ib++)
            for (int j = 0; j < 16; j++) b[8 + 16 * ib + j] = (uint8_t)(j | ((15 - j) << 4));
        const kat k[] = {{0, 1016.0f}, {33, -806.0f}, {63, -984.25f}, {70, 5.5f},   {100, 0.0f},
                         {140, 106.0f}, {180, -142.5f}, {200, 4.5f}, {255, 857.25f}};
        check_kat(GGML_TYPE_IQ4_XS, b, 256, k, 9);
    }
    /* F16 / BF16 / F32 */
    {
        uint8_t b[8];
        put16(b, 0x3C00);
        put16(b + 2, 0xC000);
        put16(b + 4, 0x7BFF);
        put16(b + 6, 0x0001);
        const kat k[] = {{0, 1.0f}, {1, -2.0f}, {2, 65504.0f}, {3, 0x1p-24f}};
        check_kat(GGML_TYPE_F16, b, 4, k, 4);
        put16(b, 0x3F80);
        put16(b + 2, 0xC040);
        const kat kb[] = {{0, 1.0f}, {1, -3.0f}};
        check_kat(GGML_TYPE_BF16, b, 2, kb, 2);
        float f[2] = {1.25f, -7.0f};
        const kat kf[] = {{0, 1.25f}, {1, -7.0f}};
        check_kat(GGML_TYPE_F32, (const uint8_t *)f, 2, kf, 2);
    }
}

/* ggml's activation quantizers on ties and signs (quantize_row_q8_0_ref, _q8_1_ref, _q8_K_ref). */
static void test_activation_quantizers(void) {
    /* Q8_0: amax 127 -> d = 1, id = 1; roundf rounds halves away from zero */
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = 0.0f;
    x[0] = 127.0f, x[1] = 63.5f, x[2] = -63.5f, x[3] = 0.5f, x[4] = -0.5f, x[5] = 2.5f, x[6] = -2.49f;
    gq_block_q8_0 q0;
    CHECK(gq_quantize_row(GGML_TYPE_Q8_0, x, &q0, 32));
    CHECK(gq_f16_load(q0.d) == 1.0f);
    CHECK(q0.qs[0] == 127 && q0.qs[1] == 64 && q0.qs[2] == -64 && q0.qs[3] == 1 && q0.qs[4] == -1 &&
          q0.qs[5] == 3 && q0.qs[6] == -2 && q0.qs[7] == 0);
    /* Q8_1: the same quants; s = f16(d * sum) */
    gq_block_q8_1 q1;
    CHECK(gq_quantize_row(GGML_TYPE_Q8_1, x, &q1, 32));
    CHECK(memcmp(q1.qs, q0.qs, 32) == 0);
    CHECK(gq_f16_load(q1.s) == (float)(127 + 64 - 64 + 1 - 1 + 3 - 2));
    /* an all-zero block: d = 0, q = 0 */
    float z[32] = {0};
    CHECK(gq_quantize_row(GGML_TYPE_Q8_0, z, &q0, 32));
    CHECK(gq_f16_load(q0.d) == 0.0f && q0.qs[0] == 0 && q0.qs[31] == 0);

    /* Q8_K: iscale = -127 / (signed absmax); max = -127 -> iscale = 1, d = 1; halves round to even */
    gq_block_q8_K *k = xmalloc_aligned(sizeof(gq_block_q8_K));
    x[0] = -127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -0.5f, x[4] = 127.0f, x[5] = -2.5f, x[6] = 0.0f;
    CHECK(gq_quantize_row(GGML_TYPE_Q8_K, x, k, 256));
    CHECK(k->d == 1.0f);
    CHECK(k->qs[0] == -127 && k->qs[1] == 2 && k->qs[2] == 4 && k->qs[3] == 0 && k->qs[4] == 127 && k->qs[5] == -2);
    CHECK(k->bsums[0] == -127 + 2 + 4 + 0 + 127 - 2 && k->bsums[1] == 0);
    /* the first element of largest magnitude decides the sign: +127 first -> iscale = -1, d = -1 */
    x[0] = 127.0f, x[4] = -127.0f;
    CHECK(gq_quantize_row(GGML_TYPE_Q8_K, x, k, 256));
    CHECK(k->d == -1.0f && k->qs[0] == -127 && k->qs[1] == -2 && k->qs[2] == -4 && k->qs[4] == 127);
    /* the fast quantizers agree on these */
    gq_block_q8_K *kf = xmalloc_aligned(sizeof(gq_block_q8_K));
    CHECK(cpu_quant_row(GGML_TYPE_Q8_K, x, kf, 256));
    CHECK(memcmp(k, kf, sizeof *k) == 0);
    CHECK(cpu_quant_row(GGML_TYPE_Q8_K, z, kf, 0));
    float zz[256] = {0};
    CHECK(cpu_quant_row(GGML_TYPE_Q8_K, zz, kf, 256));
    CHECK(kf->d == 0.0f && kf->qs[7] == 0 && kf->bsums[3] == 0);
    CHECK(!cpu_quant_row(GGML_TYPE_Q4_K, zz, kf, 256));
    free(k);
    free(kf);
}

/* ---- round trips ---- */

/* Relative RMS error bound of quantize -> dequantize on rng_weight() data (plain round-to-nearest). */
static double rt_bound(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: return 0.0;
    case GGML_TYPE_F16: return 0.0005;
    case GGML_TYPE_BF16: return 0.004;
    case GGML_TYPE_Q8_0: return 0.008;
    case GGML_TYPE_Q8_1: return 0.008;
    case GGML_TYPE_Q8_K: return 0.016; /* one scale per 256 */
    case GGML_TYPE_Q6_K: return 0.03;
    case GGML_TYPE_Q5_0: return 0.065;
    case GGML_TYPE_Q5_1: return 0.05;
    case GGML_TYPE_Q5_K: return 0.05;
    case GGML_TYPE_Q4_0: return 0.12;
    case GGML_TYPE_Q4_1: return 0.10;
    case GGML_TYPE_Q4_K: return 0.10;
    case GGML_TYPE_IQ4_NL: return 0.12;
    case GGML_TYPE_IQ4_XS: return 0.12;
    case GGML_TYPE_MXFP4: return 0.2; /* levels 0 .. 6 x a power of two: steps up to a third of a value */
    case GGML_TYPE_Q3_K: return 0.25;
    case GGML_TYPE_Q2_K: return 0.45;
    default: return 0.0;
    }
}

static double rel_rms_error(const float *a, const float *b, int64_t n) {
    double e = 0.0, s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static void test_round_trips(void) {
    const int64_t n = 4096;
    float *x = xmalloc(sizeof(float) * n), *y = xmalloc(sizeof(float) * n);
    unsigned char *q = xmalloc_aligned(gq_row_bytes(GGML_TYPE_F32, n));
    ggml_type types[N_WEIGHT_TYPES + 2];
    for (int i = 0; i < N_WEIGHT_TYPES; i++) types[i] = WEIGHT_TYPES[i];
    types[N_WEIGHT_TYPES] = GGML_TYPE_Q8_1;
    types[N_WEIGHT_TYPES + 1] = GGML_TYPE_Q8_K;
    for (int ti = 0; ti < N_WEIGHT_TYPES + 2; ti++) {
        ggml_type t = types[ti];
        for (int trial = 0; trial < 3; trial++) {
            for (int64_t i = 0; i < n; i++) x[i] = rng_weight() * (trial == 2 ? 1e-3f : 1.0f);
            if (trial == 1)
                for (int64_t i = 0; i < n; i += 3) x[i] = fabsf(x[i]); /* skewed: the min offsets matter */
            memset(q, 0xAB, gq_row_bytes(t, n));
            CHECK(gq_quantize_row(t, x, q, n));
            CHECK(gq_dequantize_row(t, q, y, n));
            double err = rel_rms_error(x, y, n);
            if (getenv("GQ_VERBOSE")) fprintf(stderr, "%-6s trial %d round trip %.5f\n", gq_type_name(t), trial, err);
            CHECK_MSG(err <= rt_bound(t), "%s trial %d: relative rms error %.5f > %.5f", gq_type_name(t), trial, err,
                      rt_bound(t));
        }
        /* a zero row dequantizes to zeros */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        CHECK(gq_quantize_row(t, x, q, n));
        CHECK(gq_dequantize_row(t, q, y, n));
        int nonzero = 0;
        for (int64_t i = 0; i < n; i++) nonzero += y[i] != 0.0f;
        CHECK_MSG(nonzero == 0, "%s zero row", gq_type_name(t));
    }
    free(x);
    free(y);
    free(q);
}

/* ---- dot products ---- */

/* A row of n random weights of type t: quantized from random floats, or (random_bytes) random bytes with
 * the f16 scale fields set to finite values, which covers bit patterns the quantizer never makes. */
static void make_weight_row(ggml_type t, int64_t n, bool random_bytes, unsigned char *q, float *tmp) {
    if (!random_bytes || t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) tmp[i] = rng_weight();
        gq_quantize_row(t, tmp, q, n);
        return;
    }
    size_t bytes = gq_row_bytes(t, n), bs = gq_type_size(t);
    for (size_t i = 0; i < bytes; i++) q[i] = (uint8_t)rng_u32();
    for (size_t off = 0; off < bytes; off += bs) {
        unsigned char *b = q + off;
        uint16_t h1 = (uint16_t)(0x2000 + rng_u32() % 0x1800 + (rng_u32() & 1) * 0x8000); /* |d| in [2^-7, 2^-1) */
        uint16_t h2 = (uint16_t)(0x2000 + rng_u32() % 0x1800);
        switch (t) {
        case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_1:
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K: put16(b, h1), put16(b + 2, h2); break;
        case GGML_TYPE_Q2_K: put16(b + 80, h1), put16(b + 82, h2); break;
        case GGML_TYPE_Q3_K: put16(b + 108, h1); break;
        case GGML_TYPE_Q6_K: put16(b + 208, h1); break;
        case GGML_TYPE_MXFP4: b[0] = (uint8_t)(117 + rng_u32() % 12); break; /* E8M0: scales 2^-11 .. 2^0 */
        default: put16(b, h1); break; /* Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first */
        }
    }
}

/* sum |w_i| |x_i| of the dequantized rows, and the float dot */
static void dequant_dots(ggml_type t, const void *w, const void *xq, int64_t n, float *wf, float *xf, double *dot,
                         double *absdot) {
    gq_dequantize_row(t, w, wf, n);
    gq_dequantize_row(gq_vec_dot_type(t), xq, xf, n);
    double d = 0.0, a = 0.0;
    for (int64_t i = 0; i < n; i++) {
        d += (double)wf[i] * xf[i];
        a += fabs((double)wf[i] * xf[i]);
    }
    *dot = d;
    *absdot = a;
}

static void test_vec_dots(void) {
    const int64_t sizes[] = {256, 512, 4096};
    float *x = xmalloc(sizeof(float) * 4096), *tmp = xmalloc(sizeof(float) * 4096);
    float *wf = xmalloc(sizeof(float) * 4096), *xf = xmalloc(sizeof(float) * 4096);
    unsigned char *w = xmalloc_aligned(4096 * 4 + 1), *xq = xmalloc_aligned(4096 * 4), *xr = xmalloc_aligned(4096 * 4);
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        ggml_type t = WEIGHT_TYPES[ti];
        ggml_type act = gq_vec_dot_type(t);
        double worst_fast = 0.0, worst_float = 0.0;
        for (int si = 0; si < 3; si++) {
            int64_t n = sizes[si];
            for (int trial = 0; trial < 8; trial++) {
                bool random_bytes = trial >= 4;
                /* an odd address for the weights half of the time */
                unsigned char *wp = w + (trial % 2);
                make_weight_row(t, n, random_bytes, wp, tmp);
                for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * (trial == 3 ? 100.0f : 1.0f);
                CHECK(gq_quantize_row(act, x, xq, n));
                /* the fast activation quantizer is bit-identical */
                CHECK(cpu_quant_row(act, x, xr, n));
                CHECK_MSG(memcmp(xq, xr, gq_row_bytes(act, n)) == 0, "%s: fast %s quantizer differs", gq_type_name(t),
                          gq_type_name(act));
                float ref = gq_vec_dot(t, wp, xq, n);
                float fast = cpu_quant_vec_dot(t, wp, xq, n);
                double dot, absdot;
                dequant_dots(t, wp, xq, n, wf, xf, &dot, &absdot);
                double e_fast = fabs((double)fast - ref) / (absdot + 1e-30);
                double e_float = fabs((double)ref - dot) / (absdot + 1e-30);
                worst_fast = e_fast > worst_fast ? e_fast : worst_fast;
                worst_float = e_float > worst_float ? e_float : worst_float;
                CHECK_MSG(e_fast <= 2e-6, "%s n %lld trial %d: fast %.9g ref %.9g (|.| %.3g)", gq_type_name(t),
                          (long long)n, trial, (double)fast, (double)ref, absdot);
                /* Q4_1 / Q5_1 use Q8_1's f16 sum s for the min term: a little further from the float dot */
                double tol_float = (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1) ? 2e-3 : 2e-6;
                CHECK_MSG(e_float <= tol_float, "%s n %lld trial %d: ref %.9g float dot %.9g (|.| %.3g)",
                          gq_type_name(t), (long long)n, trial, (double)ref, dot, absdot);
            }
        }
        if (getenv("GQ_VERBOSE"))
            fprintf(stderr, "%-6s fast-ref %.2e ref-float %.2e\n", gq_type_name(t), worst_fast, worst_float);
    }
    free(x);
    free(tmp);
    free(wf);
    free(xf);
    free(w);
    free(xq);
    free(xr);
}

/* ---- matmul ---- */

static void test_matmul(void) {
    tp_pool *pool1 = NULL, *pool4 = NULL;
    CHECK_OK(tp_create(1, &pool1));
    CHECK_OK(tp_create(4, &pool4));
    if (!pool1 || !pool4) return;
    tp_set_min_work(pool4, 0.0); /* parallelise even the smallest jobs */
    const int64_t Ts[] = {1, 3, 17};
    const int64_t outs[] = {1, 37, 300};
    const int64_t ins[] = {256, 768};
    const int64_t max_in = 768, max_out = 300, max_T = 17;
    float *wf32 = xmalloc(sizeof(float) * (size_t)(max_out * max_in));
    float *wdq = xmalloc(sizeof(float) * (size_t)(max_out * max_in));
    float *x = xmalloc(sizeof(float) * (size_t)(max_T * (max_in + 5)));
    float *xdq = xmalloc(sizeof(float) * (size_t)(max_T * max_in));
    float *y0 = xmalloc(sizeof(float) * (size_t)(max_T * (max_out + 3)));
    float *y1 = xmalloc(sizeof(float) * (size_t)(max_T * (max_out + 3)));
    float *y4 = xmalloc(sizeof(float) * (size_t)(max_T * (max_out + 3)));
    unsigned char *xq = xmalloc_aligned((size_t)(max_in * 4));
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        ggml_type t = WEIGHT_TYPES[ti];
        ggml_type act = gq_vec_dot_type(t);
        for (int ii = 0; ii < 2; ii++) {
            int64_t in = ins[ii];
            size_t row = gq_row_bytes(t, in), stride = row + 3; /* rows at odd offsets */
            unsigned char *w = xmalloc(stride * (size_t)max_out);
            for (int64_t r = 0; r < max_out; r++) {
                for (int64_t k = 0; k < in; k++) wf32[r * in + k] = rng_weight();
                CHECK(gq_quantize_row(t, wf32 + r * in, w + (size_t)r * stride, in));
                CHECK(gq_dequantize_row(t, w + (size_t)r * stride, wdq + r * in, in));
            }
            for (int oi = 0; oi < 3; oi++) {
                for (int tt = 0; tt < 3; tt++) {
                    int64_t out = outs[oi], T = Ts[tt], xs = in + 5, ys = out + 3;
                    for (int64_t i = 0; i < T * xs; i++) x[i] = rng_uniform();
                    for (int64_t i = 0; i < T; i++) {
                        gq_quantize_row(act, x + i * xs, xq, in);
                        gq_dequantize_row(act, xq, xdq + i * in, in);
                    }
                    for (int64_t i = 0; i < T * ys; i++) y0[i] = y1[i] = y4[i] = -12345.0f;
                    CHECK_OK(cpu_quant_matmul(NULL, t, w, stride, out, in, x, xs, T, y0, ys));
                    CHECK_OK(cpu_quant_matmul(pool1, t, w, stride, out, in, x, xs, T, y1, ys));
                    CHECK_OK(cpu_quant_matmul(pool4, t, w, stride, out, in, x, xs, T, y4, ys));
                    int bad_threads = 0, bad_tight = 0, bad_loose = 0, bad_pad = 0, bad_single = 0;
                    for (int64_t i = 0; i < T; i++) {
                        /* token i alone: its results do not depend on the other tokens */
                        CHECK(cpu_quant_row(act, x + i * xs, xq, in));
                        for (int64_t r = 0; r < out; r++) {
                            float v = y0[i * ys + r];
                            bad_threads += memcmp(&v, &y1[i * ys + r], 4) != 0 || memcmp(&v, &y4[i * ys + r], 4) != 0;
                            float single = cpu_quant_vec_dot(t, w + (size_t)r * stride, xq, in);
                            bad_single += memcmp(&v, &single, 4) != 0;
                            double dq = 0.0, dx = 0.0, ab = 0.0;
                            for (int64_t k = 0; k < in; k++) {
                                double wv = wdq[r * in + k];
                                dq += wv * xdq[i * in + k];
                                dx += wv * x[i * xs + k];
                                ab += fabs(wv * x[i * xs + k]);
                            }
                            /* tight: against the dequantized weights and activations */
                            double tol_tight = (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 ? 2e-3 : 1e-5) * ab;
                            bad_tight += !(fabs(v - dq) <= tol_tight);
                            /* loose: against the float activations (their quantization error included) */
                            bad_loose += !(fabs(v - dx) <= 0.01 * ab);
                        }
                        for (int64_t r = out; r < ys; r++) bad_pad += y0[i * ys + r] != -12345.0f;
                    }
                    CHECK_MSG(bad_threads == 0 && bad_single == 0 && bad_tight == 0 && bad_loose == 0 && bad_pad == 0,
                              "%s T %lld out %lld in %lld: %d differ across threads, %d from the single-token dot, "
                              "%d tight, %d loose, %d pad",
                              gq_type_name(t), (long long)T, (long long)out, (long long)in, bad_threads, bad_single,
                              bad_tight, bad_loose, bad_pad);
                }
            }
            free(w);
        }
    }
    /* errors */
    float dummy[512] = {0};
    unsigned char wb[1024] = {0};
    CHECK(cpu_quant_matmul(pool1, GGML_TYPE_IQ2_XXS, wb, 66, 1, 256, dummy, 256, 1, dummy, 1) ==
          VLLM_ERR_UNSUPPORTED);
    CHECK(cpu_quant_matmul(pool1, GGML_TYPE_Q4_K, wb, 144, 1, 200, dummy, 200, 1, dummy, 1) == VLLM_ERR_INVALID_ARG);
    CHECK(cpu_quant_matmul(pool1, GGML_TYPE_Q4_K, wb, 100, 1, 256, dummy, 256, 1, dummy, 1) == VLLM_ERR_INVALID_ARG);
    CHECK(cpu_quant_matmul(pool1, GGML_TYPE_Q4_K, wb, 144, 1, 256, dummy, 255, 1, dummy, 1) == VLLM_ERR_INVALID_ARG);
    CHECK_OK(cpu_quant_matmul(pool1, GGML_TYPE_Q4_K, wb, 144, 1, 256, dummy, 256, 0, dummy, 1));
    tp_free(pool1);
    tp_free(pool4);
    free(wf32);
    free(wdq);
    free(x);
    free(xdq);
    free(y0);
    free(y1);
    free(y4);
    free(xq);
}

/* ---- optional timing ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(void) {
    /* GQ_BENCH_SHAPE=in,out,T (e.g. 1024,3072,128: the 0.6B's gate projection at a 128-token prefill) */
    long long sin = 4096, sout = 4096, sT = 64;
    const char *shape = getenv("GQ_BENCH_SHAPE");
    if (shape && sscanf(shape, "%lld,%lld,%lld", &sin, &sout, &sT) != 3) sin = 4096, sout = 4096, sT = 64;
    const int64_t in = sin, out = sout, Tmax = sT;
    const ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K, GGML_TYPE_Q4_0, GGML_TYPE_Q5_K,
                               GGML_TYPE_IQ4_XS, GGML_TYPE_Q3_K, GGML_TYPE_Q2_K, GGML_TYPE_MXFP4};
    const int copies = 8; /* cycling through 8 weights (> L3) measures DRAM; 1 copy what the caches give */
    float *x = xmalloc(sizeof(float) * (size_t)(in * Tmax)), *y = xmalloc(sizeof(float) * (size_t)(out * Tmax));
    for (int64_t i = 0; i < in * Tmax; i++) x[i] = rng_uniform();
    float *rowf = xmalloc(sizeof(float) * (size_t)in);
    fprintf(stderr, "quant matmul, %s kernels, W %lld x %lld\n", cpu_quant_isa(), (long long)out, (long long)in);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        ggml_type t = types[ti];
        size_t row = gq_row_bytes(t, in), bytes = row * (size_t)out;
        unsigned char *w = xmalloc(bytes * copies);
        for (int64_t r = 0; r < out; r++) {
            for (int64_t k = 0; k < in; k++) rowf[k] = rng_weight();
            gq_quantize_row(t, rowf, w + (size_t)r * row, in);
        }
        for (int c = 1; c < copies; c++) memcpy(w + bytes * (size_t)c, w, bytes);
        for (int threads = 1; threads <= 2; threads++) {
            tp_pool *pool = NULL;
            if (tp_create(threads, &pool) != VLLM_OK) continue;
            for (int64_t T = 1; T <= Tmax; T = T == 1 && Tmax > 1 ? Tmax : Tmax + 1) {
                for (int cold = 0; cold < 2; cold++) {
                    int reps = T == 1 ? 200 : 8;
                    cpu_quant_matmul(pool, t, w, row, out, in, x, in, T, y, out); /* warm up */
                    double t0 = now_s();
                    for (int r = 0; r < reps; r++) {
                        const unsigned char *wc = w + (cold ? bytes * (size_t)(r % copies) : 0);
                        cpu_quant_matmul(pool, t, wc, row, out, in, x, in, T, y, out);
                    }
                    double dt = (now_s() - t0) / reps;
                    fprintf(stderr, "%-6s T %2lld threads %d %s: %8.1f us  %6.1f GB/s of weights  %7.1f GMAC/s\n",
                            gq_type_name(t), (long long)T, threads, cold ? "cold (8 weights)" : "hot (1 weight) ", dt * 1e6,
                            (double)bytes / dt * 1e-9, (double)T * (double)in * (double)out / dt * 1e-9);
                }
            }
            tp_free(pool);
        }
        free(w);
    }
    free(x);
    free(y);
    free(rowf);
}

int main(void) {
    fprintf(stderr, "cpu quant kernels: %s\n", cpu_quant_isa());
    test_type_facts();
    test_known_blocks();
    test_activation_quantizers();
    test_round_trips();
    test_vec_dots();
    test_matmul();
    if (getenv("GQ_BENCH")) bench();
    TEST_END();
}
